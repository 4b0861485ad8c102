/* tests/race_experts.c — seeded stress of keyed serving of file ranges as a mixture-of-experts model
 * uses it (python/ringfetch/transformers.py), as a plain program so that it runs under ThreadSanitizer.
 *
 * A file holds layers x experts "experts" at offsets and of sizes that are multiples of 8 but not of
 * 4096 (100..600 KiB, odd multiples of 8), one or two ranges (keys) each. Each iteration creates a
 * keyed pipeline with few slots of (largest range + two file-system blocks), as the model's server
 * does, and runs decode steps: per layer, the routed experts (top 2, skewed) are looked up, a wrong
 * hint that is ready is evicted, the absent ones are hinted in a window, the next layer's experts are
 * hinted (its real route with some probability, else others), then the routed ones are acquired
 * (ready, then copying, then absent) and EVERY byte of every block is compared with the file's bytes
 * (read with pread), again after a random pause while hints run, before release; an expert not in the
 * retained set is evicted once used. So unaligned ranges go through the reader's rules (the O_DIRECT
 * window moved down, or buffered reads), several hints in flight per lane, withdrawals, evictions and
 * refills of the same slots over and over. Iterations drop the file's pages from the page cache (once,
 * or every few steps: cold reads, as after the benchmark's cache drop, make the rules settle on the
 * moved O_DIRECT window) and set the device's largest request as small as 4 KiB (white box), so that an
 * expert is read in many pieces landing in any order, as the 24 MiB experts of a real model are.
 *
 * usage: race_experts [--backend B] [--depth N|auto] [--seed S] [--iterations N] [--steps N]
 *                     [--seconds T]
 * Output ends with the plain line "N passed, N failed"; a failure prints the line that replays it. */
#include "io/file.h"
#include "ringfetch.h"
#include "rng.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define LAYERS 4u
#define EXPERTS 8u
#define NEXP (LAYERS * EXPERTS)
#define TOPK 2u
#define MAXKPE 2u /* keys per expert */

static const char *g_backend = "threads";
static unsigned g_depth;    /* 0: from the slot budget drawn per iteration */
static int g_depth_auto;
static unsigned g_steps = 40;
static unsigned char *g_ref; /* the file's bytes, read back with pread */
static const unsigned char *g_map[2]; /* the file opened O_DIRECT, and buffered */
static size_t g_fsize;
static int g_fd = -1; /* the file, for dropping its pages from the page cache */
static rf_file *g_file[2];
static size_t g_io_max[2]; /* the devices' largest requests, as rf_file_open found them */

typedef struct expert {
	uint64_t off[MAXKPE];
	size_t len[MAXKPE];
} expert;

static expert g_ex[NEXP];
static unsigned g_kpe; /* keys per expert this iteration */

static size_t layout(unsigned long long seed)
{
	uint64_t s = seed;
	uint64_t off = 8 + 8 * rng_below(&s, 1024);
	for (unsigned e = 0; e < NEXP; e++) {
		size_t lo = (100u << 10) / 16, hi = (600u << 10) / 16;
		size_t len = 8 * (2 * (lo + (size_t)rng_below(&s, hi - lo)) + 1); /* an odd multiple of 8 */
		size_t a = 8 * (1 + (size_t)rng_below(&s, len / 8 - 1));   /* the second range: the down projection */
		g_ex[e].off[0] = off, g_ex[e].len[0] = a;
		g_ex[e].off[1] = off + a, g_ex[e].len[1] = len - a;
		off += len + 8 * rng_below(&s, 64);
	}
	return (size_t)off + 8 * rng_below(&s, 600);
}

static const void *src_of(unsigned e, unsigned j, int map)
{
	return g_map[map] + g_ex[e].off[j];
}

static uint64_t key_of(unsigned e, unsigned j)
{
	return (uint64_t)e * MAXKPE + j;
}

static int check(const rf_block *b, unsigned e, unsigned j, const char *when)
{
	const unsigned char *want = g_ref + g_ex[e].off[j];
	size_t n = g_ex[e].len[j];
	if (b->bytes == n && memcmp(b->data, want, n) == 0)
		return 0;
	size_t i = 0;
	while (i < n && i < b->bytes && ((const unsigned char *)b->data)[i] == want[i])
		i++;
	fprintf(stderr, "expert %u key %u (offset %llu, %zu bytes) slot %u: wrong bytes %s, first at %zu\n", e, j,
		(unsigned long long)g_ex[e].off[j], n, b->slot, when, i);
	return -1;
}

/* A skewed route: some experts of each layer are routed far more often (what makes retention pay). */
static void route(uint64_t *s, unsigned layer, unsigned out[TOPK])
{
	for (unsigned i = 0; i < TOPK; i++) {
		unsigned e;
		do {
			unsigned r = (unsigned)rng_below(s, 100);
			e = r < 50 ? (unsigned)rng_below(s, 3) : (unsigned)rng_below(s, EXPERTS);
		} while (i == 1 && e == out[0] % EXPERTS);
		out[i] = layer * EXPERTS + e;
	}
}

static rf_keyed_stats g_sum; /* over every iteration: what the stress went through */
static char g_desc[1024];     /* the last pipeline's describe line (how its reads were made) */

static int in(const unsigned *v, unsigned n, unsigned e)
{
	for (unsigned i = 0; i < n; i++)
		if (v[i] == e)
			return 1;
	return 0;
}

typedef struct state {
	rf_pipeline *p;
	uint64_t s;
	int map;                  /* which mapping the sources name */
	unsigned slots, window;   /* slots; misses hinted at once */
	unsigned char retain[NEXP];
	unsigned pred[LAYERS][TOPK], npred[LAYERS]; /* the hints each layer was given */
} state;

/* Hint every key of expert e (a full ring is only a hint not taken). */
static int hint(state *st, unsigned e)
{
	for (unsigned j = 0; j < g_kpe; j++) {
		int rc = rf_pipeline_prefetch(st->p, key_of(e, j), src_of(e, j, st->map), g_ex[e].len[j], 0);
		if (rc == RF_ENOSPC)
			return 0;
		if (rc != RF_OK) {
			fprintf(stderr, "prefetch of expert %u: %s: %s\n", e, rf_err_name(rc), rf_errmsg());
			return -1;
		}
	}
	return 0;
}

/* 0 absent (some key), 1 copying (some key), 2 ready (every key). */
static int looked_up(state *st, unsigned e, int *rc)
{
	int worst = 2;
	for (unsigned j = 0; j < g_kpe; j++) {
		rf_key_state k = RF_KEY_ABSENT;
		if (rf_pipeline_lookup(st->p, key_of(e, j), &k, NULL) != RF_OK)
			*rc = -1;
		worst = (int)k < worst ? (int)k : worst;
	}
	return worst;
}

static int evict(state *st, unsigned e)
{
	for (unsigned j = 0; j < g_kpe; j++) {
		int rc = rf_pipeline_evict(st->p, key_of(e, j));
		if (rc != RF_OK) {
			fprintf(stderr, "evict of expert %u: %s: %s\n", e, rf_err_name(rc), rf_errmsg());
			return -1;
		}
	}
	return 0;
}

/* Acquire expert e's keys, check every byte (again after a pause while hints run), release. */
static int use(state *st, unsigned e)
{
	rf_block b[MAXKPE];
	unsigned got = 0;
	int rc = 0;
	for (unsigned j = 0; j < g_kpe && rc == 0; j++) {
		int a = rf_pipeline_acquire(st->p, key_of(e, j), src_of(e, j, st->map), g_ex[e].len[j], NULL, 0, &b[j]);
		if (a != RF_OK) {
			fprintf(stderr, "acquire of expert %u: %s: %s\n", e, rf_err_name(a), rf_errmsg());
			rc = -1;
			break;
		}
		got++;
		rc = check(&b[j], e, j, "on acquire");
	}
	if (rc == 0 && rng_below(&st->s, 4) == 0) {
		struct timespec d = {0, (long)(1 + rng_below(&st->s, 200)) * 1000};
		nanosleep(&d, NULL);
		for (unsigned j = 0; j < got && rc == 0; j++)
			rc = check(&b[j], e, j, "before release");
	}
	while (got > 0)
		if (rf_pipeline_release(st->p, &b[--got]) != RF_OK) {
			fprintf(stderr, "release: %s\n", rf_errmsg());
			rc = -1;
		}
	return rc;
}

/* One layer of one decode step, in transformers.py's order. */
static int layer(state *st, unsigned l, const unsigned routed[TOPK], const unsigned *next_routed)
{
	int rc = 0;
	/* a wrong hint's slot is free again once read */
	for (unsigned i = 0; i < st->npred[l] && rc == 0; i++) {
		unsigned e = st->pred[l][i];
		if (!in(routed, TOPK, e) && !st->retain[e] && looked_up(st, e, &rc) == 2)
			rc = evict(st, e);
	}
	st->npred[l] = 0;
	int ks[TOPK]; /* looked up once: the order below stays what it was when decided */
	for (unsigned i = 0; i < TOPK; i++)
		ks[i] = looked_up(st, routed[i], &rc);
	unsigned order[TOPK], n = 0, absent[TOPK], na = 0;
	for (int want = 2; want >= 0; want--) /* ready, copying, then absent */
		for (unsigned i = 0; i < TOPK; i++)
			if (ks[i] == want) {
				order[n++] = routed[i];
				if (want == 0)
					absent[na++] = routed[i];
			}
	for (unsigned i = 0; i < na && i < st->window && rc == 0; i++)
		rc = hint(st, absent[i]);
	if (next_routed != NULL && rc == 0) { /* the next layer's hints: mostly right */
		unsigned nh = 1 + (unsigned)rng_below(&st->s, TOPK);
		for (unsigned i = 0; i < nh; i++) {
			unsigned e = rng_below(&st->s, 10) < 7 ? next_routed[i] : (l + 1) * EXPERTS + (unsigned)rng_below(&st->s, EXPERTS);
			if (!in(st->pred[l + 1], st->npred[l + 1], e))
				st->pred[l + 1][st->npred[l + 1]++] = e;
		}
		for (unsigned i = 0; i < st->npred[l + 1] && rc == 0; i++)
			rc = hint(st, st->pred[l + 1][i]);
	}
	for (unsigned i = 0; i < n && rc == 0; i++) {
		unsigned e = order[i];
		rc = use(st, e);
		if (rc == 0 && !st->retain[e]) /* streamed, not kept: its slot is free for the next read */
			rc = evict(st, e);
		if (rc == 0 && i >= n - na && i - (n - na) + st->window < na) /* the next miss's read */
			rc = hint(st, absent[i - (n - na) + st->window]);
	}
	return rc;
}

static int iteration(unsigned long long seed)
{
	state st;
	memset(&st, 0, sizeof st);
	st.s = seed;
	g_kpe = 1 + (unsigned)rng_below(&st.s, MAXKPE);
	st.map = rng_below(&st.s, 4) == 0; /* mostly the O_DIRECT file, as the model's server opens it */
	/* A device's largest request as small as 4 KiB or as found (white box: no pipeline reads the files
	 * now): an expert is then read in many pieces, landing in any order, as large experts are. */
	static const size_t io_max[] = {0, 4096, 16384, 65536, 131072};
	unsigned im = (unsigned)rng_below(&st.s, 6);
	for (int i = 0; i < 2; i++)
		g_file[i]->io_max = im < 5 ? io_max[im] : g_io_max[i];
	if (g_kpe == 1) /* one range: the whole expert */
		for (unsigned e = 0; e < NEXP; e++) {
			g_ex[e].len[0] += g_ex[e].len[1];
			g_ex[e].len[1] = 0;
		}
	size_t largest = 0;
	for (unsigned e = 0; e < NEXP; e++)
		for (unsigned j = 0; j < g_kpe; j++)
			largest = g_ex[e].len[j] > largest ? g_ex[e].len[j] : largest;
	rf_pipeline_params pp = {0};
	pp.slot_bytes = (largest + 2 * 4096 + 4095) / 4096 * 4096;
	/* slots just above the least the server accepts (top_k experts and one more), or up to a dozen
	 * more keys: then more hints are in flight than a lane takes, and some are held back */
	st.slots = g_kpe * (TOPK + 1) + (unsigned)rng_below(&st.s, 4 * g_kpe + 5);
	pp.depth = g_depth ? g_depth : st.slots;
	if (g_depth_auto)
		pp.depth = 0, pp.depth_auto = RF_DEPTH_AUTO;
	pp.backend = g_backend;
	pp.copy_queues = rng_below(&st.s, 3) == 0 && pp.depth >= 3 ? 2 : 0;
	rf_pipeline *p;
	if (rf_pipeline_create(&pp, &p) != RF_OK) {
		fprintf(stderr, "create: %s\n", rf_errmsg());
		return -1;
	}
	st.p = p;
	st.slots = rf_pipeline_depth(p);
	unsigned per = st.slots / g_kpe;
	st.window = per > TOPK + 2 ? per - TOPK - 1 : 1;
	/* the retained experts: as many as leave room for the routed ones and the hints */
	unsigned keep = per > 2 * TOPK + 1 ? (unsigned)rng_below(&st.s, per - 2 * TOPK) : 0;
	for (unsigned i = 0; i < keep; i++)
		st.retain[(unsigned)rng_below(&st.s, LAYERS) * EXPERTS + (unsigned)rng_below(&st.s, 3)] = 1;
	int rc = 0;
	unsigned cur[TOPK], nxt[TOPK];
	route(&st.s, 0, cur);
	/* Cold reads as after a cache drop (what the benchmark does before each run): buffered reads then
	 * wait for the device, so the rule of a size class may settle on the O_DIRECT window moved down. */
	unsigned cold = (unsigned)rng_below(&st.s, 3); /* 0: warm; 1: dropped once; 2: dropped every 4 steps */
	for (unsigned step = 0; step < g_steps && rc == 0; step++) {
		if ((cold == 1 && step == 0) || (cold == 2 && step % 4 == 0))
			(void)posix_fadvise(g_fd, 0, 0, POSIX_FADV_DONTNEED);
		for (unsigned l = 0; l < LAYERS && rc == 0; l++) {
			int last = l + 1 == LAYERS;
			route(&st.s, last ? 0 : l + 1, nxt);
			rc = layer(&st, l, cur, last ? NULL : nxt);
			memcpy(cur, nxt, sizeof cur);
		}
	}
	rf_keyed_stats ks;
	if (rc == 0 && (rf_pipeline_keyed_stats(p, &ks) != RF_OK || ks.hits > ks.acquires)) {
		fprintf(stderr, "keyed stats inconsistent\n");
		rc = -1;
	}
	if (rc == 0) {
		g_sum.acquires += ks.acquires, g_sum.hits += ks.hits, g_sum.late += ks.late;
		g_sum.prefetches += ks.prefetches, g_sum.dropped += ks.dropped, g_sum.wasted += ks.wasted;
		g_sum.bytes_copied += ks.bytes_copied;
	}
	snprintf(g_desc, sizeof g_desc, "%s", rf_pipeline_describe(p));
	if (rc != 0)
		fprintf(stderr, "%s\n", g_desc);
	rf_pipeline_destroy(p);
	return rc;
}

int main(int argc, char **argv)
{
	unsigned long long seed = 1, iters = 40;
	double seconds = 60;
	for (int i = 1; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "--backend"))
			g_backend = argv[i + 1];
		else if (!strcmp(argv[i], "--depth") && !strcmp(argv[i + 1], "auto"))
			g_depth_auto = 1;
		else if (!strcmp(argv[i], "--depth"))
			g_depth = (unsigned)strtoul(argv[i + 1], NULL, 0);
		else if (!strcmp(argv[i], "--seed"))
			seed = strtoull(argv[i + 1], NULL, 0);
		else if (!strcmp(argv[i], "--iterations"))
			iters = strtoull(argv[i + 1], NULL, 0);
		else if (!strcmp(argv[i], "--steps"))
			g_steps = (unsigned)strtoul(argv[i + 1], NULL, 0);
		else if (!strcmp(argv[i], "--seconds"))
			seconds = atof(argv[i + 1]);
	}
	char path[] = "rf_race_experts_XXXXXX";
	int fd = mkstemp(path);
	if (fd < 0)
		return 2;
	g_fsize = layout(seed);
	unsigned char *buf = malloc(g_fsize);
	g_ref = malloc(g_fsize);
	if (buf == NULL || g_ref == NULL)
		return 2;
	uint64_t s = seed * 31 + 7;
	for (size_t i = 0; i < g_fsize; i += 8) { /* each 8 bytes name their offset: a shifted read shows */
		uint64_t v = (uint64_t)i ^ (rng_next(&s) << 32);
		memcpy(buf + i, &v, g_fsize - i < 8 ? g_fsize - i : 8);
	}
	if (write(fd, buf, g_fsize) != (ssize_t)g_fsize || fsync(fd) != 0 ||
	    pread(fd, g_ref, g_fsize, 0) != (ssize_t)g_fsize || memcmp(buf, g_ref, g_fsize) != 0)
		return 2;
	free(buf);
	g_fd = fd;
	rf_file *f[2];
	if (rf_file_open(path, 0, &f[0]) != RF_OK || rf_file_open(path, RF_FILE_BUFFERED, &f[1]) != RF_OK) {
		fprintf(stderr, "rf_file_open: %s\n", rf_errmsg());
		unlink(path);
		return 2;
	}
	g_map[0] = rf_file_data(f[0]);
	g_map[1] = rf_file_data(f[1]);
	for (int i = 0; i < 2; i++)
		g_file[i] = f[i], g_io_max[i] = f[i]->io_max;
	expert saved[NEXP];
	memcpy(saved, g_ex, sizeof saved);
	unsigned long long passed = 0, failed = 0;
	time_t t0 = time(NULL);
	for (unsigned long long i = 0; i < iters && difftime(time(NULL), t0) < seconds; i++) {
		memcpy(g_ex, saved, sizeof saved); /* one key per expert merged the ranges */
		if (iteration(seed ^ ((i + 1) * 0x9e3779b97f4a7c15ull)) == 0) {
			passed++;
		} else {
			failed++;
			char d[16];
			snprintf(d, sizeof d, "%u", g_depth);
			fprintf(stderr, "replay: race_experts --backend %s --depth %s --seed %llu --iterations %llu --steps %u\n",
				g_backend, g_depth_auto ? "auto" : d, seed, i + 1, g_steps);
		}
	}
	int closed = rf_file_close(f[0]) == RF_OK && rf_file_close(f[1]) == RF_OK;
	close(g_fd);
	unlink(path);
	free(g_ref);
	if (!closed) {
		printf("a file could not be closed after every pipeline was destroyed: %s\n", rf_errmsg());
		failed++;
	}
	printf("keyed: %llu acquires, %llu hits (%llu late), %llu hints, %llu dropped, %llu wasted, %llu MiB copied\n"
	       "last pipeline: %s\n",
	       (unsigned long long)g_sum.acquires, (unsigned long long)g_sum.hits, (unsigned long long)g_sum.late,
	       (unsigned long long)g_sum.prefetches, (unsigned long long)g_sum.dropped,
	       (unsigned long long)g_sum.wasted, (unsigned long long)(g_sum.bytes_copied >> 20), g_desc);
	printf("%llu passed, %llu failed\n", passed, failed);
	return failed ? 1 : 0;
}
