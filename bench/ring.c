/* bench/ring.c — the threads backend against what it replaces, on the same pipeline:
 *
 *   block i is memcpy'd from its source into slot i % depth, then a compute sums the block's floats
 *   and checks the sum against the source's (a wrong or torn slot fails the run).
 *
 * Contestants, run alternately (A B C A B C ...) in one process so that noise hits all of them:
 *   ringfetch  rf_pipeline_run on the "threads" backend (copy worker + computes on the caller);
 *   hand       a hand-written two-thread ring: a copy thread and the caller, two atomic counters;
 *   starpu     StarPU 1.3 with implicit data dependencies (copy task writes slot handle i % depth,
 *              compute task reads it), when built with StarPU;
 *   sequential rf_pipeline_run on "cpu" (depth 1: no overlap), the floor for speedups.
 * Also measured alone: copy-only (source to slot) and compute-only (over a cache-resident slot) time
 * per block; their max is the ideal pipelined time, and overlap efficiency = ideal / measured.
 *
 * usage: ringfetch-ring [--sizes 1K,64K,1M] [--depth 2] [--reps 9] [--bytes-per-rep 64M]
 *                       [--starpu-ncpu N (0: skip StarPU)]
 */
#include "ringfetch.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#ifdef RF_HAVE_STARPU
#include <starpu.h>
#endif

/* ---- workload --------------------------------------------------------------------------------- */

typedef struct work {
	size_t n, size, nsrc;
	const void **srcs;
	size_t *sizes;
	float *expect; /* per source: the sum of its floats */
	unsigned depth;
} work;

typedef struct sink {
	const work *w;
	double total;
	size_t bad;
} sink;

__attribute__((noinline)) static float sum_floats(const void *p, size_t bytes)
{
	const float *f = p;
	float s = 0;
	for (size_t i = 0; i < bytes / sizeof(float); i++)
		s += f[i];
	return s;
}

/* noinline: every contestant calls this same machine code (the library can only call it through a
 * pointer; a hand-written ring in the same file could otherwise inline and schedule it differently). */
__attribute__((noinline)) static int compute(void *user, const rf_block *b)
{
	sink *k = user;
	float s = sum_floats(b->data, b->bytes);
	k->bad += s != k->w->expect[b->index % k->w->nsrc];
	k->total += s;
	return 0;
}

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* ---- the hand-written ring ---------------------------------------------------------------------- */

typedef struct hand {
	const work *w;
	unsigned char *ring;
	_Alignas(64) atomic_size_t filled; /* blocks copied */
	_Alignas(64) atomic_size_t done;   /* blocks computed */
} hand;

static void spin_until(atomic_size_t *c, size_t v)
{
	for (unsigned i = 0; atomic_load_explicit(c, memory_order_acquire) < v; i++)
		if (i > 1000)
			sched_yield();
#if defined(__x86_64__)
		else
			__builtin_ia32_pause();
#endif
}

static void *hand_copier(void *arg)
{
	hand *h = arg;
	const work *w = h->w;
	for (size_t i = 0; i < w->n; i++) {
		if (i >= w->depth)
			spin_until(&h->done, i - w->depth + 1); /* WAR */
		memcpy(h->ring + (i % w->depth) * w->size, w->srcs[i], w->sizes[i]);
		atomic_store_explicit(&h->filled, i + 1, memory_order_release);
	}
	return NULL;
}

static int hand_run(const work *w, unsigned char *ring, sink *k)
{
	hand h = {w, ring, 0, 0};
	pthread_t t;
	if (pthread_create(&t, NULL, hand_copier, &h) != 0)
		return -1;
	for (size_t i = 0; i < w->n; i++) {
		spin_until(&h.filled, i + 1); /* RAW */
		rf_block b = {i, (unsigned)(i % w->depth), ring + (i % w->depth) * w->size, w->sizes[i], NULL};
		compute(k, &b);
		atomic_store_explicit(&h.done, i + 1, memory_order_release);
	}
	pthread_join(t, NULL);
	return 0;
}

/* ---- StarPU -------------------------------------------------------------------------------------- */

#ifdef RF_HAVE_STARPU
static void sp_copy(void *buffers[], void *arg)
{
	const void *src;
	size_t bytes;
	starpu_codelet_unpack_args(arg, &src, &bytes);
	memcpy((void *)STARPU_VECTOR_GET_PTR(buffers[0]), src, bytes);
}

static void sp_compute(void *buffers[], void *arg)
{
	sink *k;
	size_t index, bytes;
	starpu_codelet_unpack_args(arg, &k, &index, &bytes);
	rf_block b = {index, 0, (const void *)STARPU_VECTOR_GET_PTR(buffers[0]), bytes, NULL};
	compute(k, &b); /* compute tasks of one slot are ordered, and all of them by RAW/WAR chains */
}

static struct starpu_codelet sp_copy_cl = {.cpu_funcs = {sp_copy}, .nbuffers = 1, .modes = {STARPU_W}};
static struct starpu_codelet sp_compute_cl = {.cpu_funcs = {sp_compute}, .nbuffers = 1, .modes = {STARPU_R}};

/* StarPU's idle workers poll: paused between its own reps, so that they do not steal a core from the
 * other contestants (and resumed for its reps, which therefore include the resume). */
static int starpu_run(const work *w, unsigned char *ring, sink *k)
{
	starpu_data_handle_t h[RF_MAX_DEPTH];
	starpu_resume();
	for (unsigned s = 0; s < w->depth; s++)
		starpu_vector_data_register(&h[s], STARPU_MAIN_RAM, (uintptr_t)(ring + s * w->size),
					    (uint32_t)(w->size / sizeof(float)), sizeof(float));
	for (size_t i = 0; i < w->n; i++) {
		const void *src = w->srcs[i];
		size_t bytes = w->sizes[i];
		starpu_data_handle_t slot = h[i % w->depth];
		if (starpu_task_insert(&sp_copy_cl, STARPU_W, slot, STARPU_VALUE, &src, sizeof src, STARPU_VALUE,
				       &bytes, sizeof bytes, 0) != 0 ||
		    starpu_task_insert(&sp_compute_cl, STARPU_R, slot, STARPU_VALUE, &k, sizeof k, STARPU_VALUE, &i,
				       sizeof i, STARPU_VALUE, &bytes, sizeof bytes, 0) != 0)
			return -1;
	}
	starpu_task_wait_for_all();
	for (unsigned s = 0; s < w->depth; s++)
		starpu_data_unregister(h[s]);
	starpu_pause();
	return 0;
}
#endif

/* ---- measurement --------------------------------------------------------------------------------- */

enum { C_RF, C_HAND, C_STARPU, C_SEQ, C_COPY, C_COMPUTE, NC };
static const char *const cname[NC] = {"ringfetch", "hand", "starpu", "sequential", "copy-only", "compute-only"};

static int cmpd(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

static double median(double *v, unsigned n)
{
	qsort(v, n, sizeof *v, cmpd);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static size_t parse_size(const char *s, int *ok)
{
	char *end;
	double v = strtod(s, &end);
	size_t m = 1;
	if (*end == 'K' || *end == 'k')
		m = 1024, end++;
	else if (*end == 'M' || *end == 'm')
		m = 1024 * 1024, end++;
	*ok = end != s && *end == '\0' && v > 0 && v * (double)m <= 1024.0 * 1024 * 1024;
	return (size_t)(v * (double)m);
}

typedef struct opts {
	size_t sizes[16];
	unsigned nsizes, depth, reps, starpu_ncpu;
	size_t bytes_per_rep;
} opts;

/* One contestant, one rep: seconds per block, or a negative value on failure. */
static double run_one(int c, const work *w, unsigned char *ring, rf_pipeline *rf, rf_pipeline *seq)
{
	sink k = {w, 0, 0};
	double t0 = now();
	int rc = 0;
	switch (c) {
	case C_RF:
		rc = rf_pipeline_run(rf, w->n, w->srcs, w->sizes, compute, &k);
		break;
	case C_SEQ:
		rc = rf_pipeline_run(seq, w->n, w->srcs, w->sizes, compute, &k);
		break;
	case C_HAND:
		rc = hand_run(w, ring, &k);
		break;
#ifdef RF_HAVE_STARPU
	case C_STARPU:
		rc = starpu_run(w, ring, &k);
		break;
#endif
	case C_COPY:
		for (size_t i = 0; i < w->n; i++)
			memcpy(ring + (i % w->depth) * w->size, w->srcs[i], w->sizes[i]);
		break;
	case C_COMPUTE:
		for (unsigned j = 0; j < w->depth; j++)
			memcpy(ring + j * w->size, w->srcs[j], w->sizes[j]);
		/* Over the ring slots, which stay cache-resident: the compute's own cost with its block at
		 * hand, as in the best case of a pipeline. The ring holds copies of the first sources. */
		for (size_t i = 0; i < w->n; i++) {
			rf_block b = {i % w->depth, 0, ring + (i % w->depth) * w->size, w->sizes[i], NULL};
			compute(&k, &b);
		}
		break;
	}
	double t = (now() - t0) / (double)w->n;
	if (rc != 0 || k.bad != 0) {
		fprintf(stderr, "%s: %s (%zu wrong sums)\n", cname[c], rc ? rf_errmsg() : "payload check failed", k.bad);
		return -1;
	}
	return t;
}

static int bench_size(const opts *o, size_t size, int have_starpu)
{
	/* Enough distinct sources to defeat the caches for big blocks (>= 256 MiB in all, or 4096). */
	size_t nsrc = (256u << 20) / size;
	nsrc = nsrc < 4 ? 4 : nsrc > 4096 ? 4096 : nsrc;
	size_t n = o->bytes_per_rep / size;
	n = n < 256 ? 256 : n > 50000 ? 50000 : n;
	work w = {n, size, nsrc, malloc(n * sizeof(void *)), malloc(n * sizeof(size_t)),
		  malloc(nsrc * sizeof(float)), o->depth};
	unsigned char *pool = malloc(nsrc * size), *ring = aligned_alloc(64, ((size_t)o->depth * size + 63) & ~(size_t)63);
	if (!w.srcs || !w.sizes || !w.expect || !pool || !ring)
		return -1;
	for (size_t s = 0; s < nsrc; s++) {
		float *f = (float *)(pool + s * size);
		for (size_t i = 0; i < size / sizeof(float); i++)
			f[i] = (float)((s * 7 + i) % 1000) * 0.5f;
		w.expect[s] = sum_floats(f, size);
	}
	for (size_t i = 0; i < n; i++)
		w.srcs[i] = pool + (i % nsrc) * size, w.sizes[i] = size;
	rf_pipeline_params pr = {.depth = o->depth, .slot_bytes = size, .backend = "threads"};
	rf_pipeline_params ps = {.depth = 1, .slot_bytes = size, .backend = "cpu"};
	rf_pipeline *rf, *seq;
	if (rf_pipeline_create(&pr, &rf) != RF_OK || rf_pipeline_create(&ps, &seq) != RF_OK) {
		fprintf(stderr, "rf_pipeline_create: %s\n", rf_errmsg());
		return -1;
	}
	double t[NC][64];
	for (unsigned r = 0; r < o->reps; r++)
		for (int c = 0; c < NC; c++) {
			if (c == C_STARPU && !have_starpu)
				continue;
			if ((t[c][r] = run_one(c, &w, ring, rf, seq)) < 0)
				return -1;
		}
	double m[NC] = {0};
	for (int c = 0; c < NC; c++)
		if (c != C_STARPU || have_starpu)
			m[c] = median(t[c], o->reps);
	double ideal = m[C_COPY] > m[C_COMPUTE] ? m[C_COPY] : m[C_COMPUTE];
	printf("%8zu B  depth %u  %6zu blocks | copy %8.2f  compute %8.2f  ideal %8.2f us/block\n", size, o->depth,
	       n, m[C_COPY] * 1e6, m[C_COMPUTE] * 1e6, ideal * 1e6);
	for (int c = C_RF; c <= C_SEQ; c++) {
		if (c == C_STARPU && !have_starpu)
			continue;
		printf("    %-10s %9.2f us/block  efficiency %5.1f%%  vs ringfetch %5.2fx\n", cname[c], m[c] * 1e6,
		       100 * ideal / m[c], m[c] / m[C_RF]);
	}
	fflush(stdout);
	rf_pipeline_destroy(rf);
	rf_pipeline_destroy(seq);
	free(pool);
	free(ring);
	free(w.srcs);
	free(w.sizes);
	free(w.expect);
	return 0;
}

static int parse_opts(int argc, char **argv, opts *o)
{
	int ok = 1;
	for (int i = 1; i < argc && ok; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[++i] : NULL;
		if (v == NULL)
			ok = 0;
		else if (!strcmp(a, "--sizes")) {
			char buf[256];
			snprintf(buf, sizeof buf, "%s", v);
			o->nsizes = 0;
			for (char *tok = strtok(buf, ","); tok && ok; tok = strtok(NULL, ",")) {
				ok = o->nsizes < 16;
				if (ok)
					o->sizes[o->nsizes++] = parse_size(tok, &ok);
				ok = ok && o->sizes[o->nsizes - 1] % sizeof(float) == 0;
			}
		} else if (!strcmp(a, "--depth"))
			o->depth = (unsigned)strtoul(v, NULL, 10), ok = o->depth >= 1 && o->depth <= 64;
		else if (!strcmp(a, "--reps"))
			o->reps = (unsigned)strtoul(v, NULL, 10), ok = o->reps >= 1 && o->reps <= 64;
		else if (!strcmp(a, "--bytes-per-rep"))
			o->bytes_per_rep = parse_size(v, &ok);
		else if (!strcmp(a, "--starpu-ncpu"))
			o->starpu_ncpu = (unsigned)strtoul(v, NULL, 10); /* 0: no StarPU */
		else
			ok = 0;
	}
	return ok && o->nsizes > 0;
}

int main(int argc, char **argv)
{
	long ncores = sysconf(_SC_NPROCESSORS_ONLN);
	opts o = {{1024, 64 * 1024, 1024 * 1024}, 3, 2, 9, ncores > 1 ? (unsigned)ncores - 1 : 1, 64u << 20};
	if (!parse_opts(argc, argv, &o)) {
		fprintf(stderr, "usage: %s [--sizes 1K,64K,1M] [--depth 2] [--reps 9] [--bytes-per-rep 64M] "
				"[--starpu-ncpu N]\n  sizes: multiples of 4 bytes, at most 1G; depth 1..64; reps 1..64\n",
			argv[0]);
		return 2;
	}
	int have_starpu = 0;
#ifdef RF_HAVE_STARPU
	struct starpu_conf conf;
	starpu_conf_init(&conf);
	conf.ncpus = (int)o.starpu_ncpu;
	conf.ncuda = 0;
	conf.nopencl = 0;
	have_starpu = o.starpu_ncpu > 0 && starpu_init(&conf) == 0;
	if (have_starpu)
		starpu_pause();
	else if (o.starpu_ncpu > 0)
		fprintf(stderr, "starpu_init failed: StarPU baseline skipped\n");
#endif
	printf("ringfetch %s, threads backend vs hand-written ring%s; %ld cores; medians of %u alternating reps\n",
	       rf_version_string(), have_starpu ? " vs StarPU" : " (StarPU not built)", ncores, o.reps);
	if (have_starpu)
		printf("StarPU: %u CPU worker(s)\n", o.starpu_ncpu);
	int rc = 0;
	for (unsigned i = 0; i < o.nsizes && rc == 0; i++)
		rc = bench_size(&o, o.sizes[i], have_starpu);
#ifdef RF_HAVE_STARPU
	if (have_starpu) {
		starpu_resume();
		starpu_shutdown();
	}
#endif
	return rc == 0 ? 0 : 1;
}
