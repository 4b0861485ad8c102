/* bench/bench.c — ringfetch-bench: sweep depth x size x backend on one workload, with baselines run
 * alternately in the same process, and report time per block, bandwidth, overlap efficiency, speedup
 * over the sequential ring and ratios to a hand-written ring and StarPU. `make run` runs its default.
 *
 * Per (backend, size) every repetition runs, in turn: copy-only, compute-only, sequential (cpu,
 * depth 1), and for each depth ringfetch, hand and StarPU; medians over the repetitions are reported.
 * Exit status: 0, 1 (a run failed or a payload check failed), 2 (bad options). */
#include "baselines.h"
#include "machine.h"
#include "report.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { T_COPY, T_COMPUTE, T_SEQ, T_FIRST_DEPTH };
enum { M_RF, M_HAND, M_STARPU, M_LOCAL, NM };

typedef struct sweep {
	const rfb_opts *o;
	int have_starpu, baselines_done;
	rfb_results res;
	double t0;
	unsigned step, nsteps;
} sweep;

static void progress(sweep *s, const char *backend, size_t size, unsigned rep)
{
	s->step++;
	if (s->o->quiet || rfb_now() - s->t0 < 2)
		return;
	fprintf(stderr, "\r[%3u%%] backend %s, size %zu, rep %u/%u   ", 100 * s->step / s->nsteps, backend, size,
		rep + 1, s->o->reps);
	fflush(stderr);
}

/* Runs a depth = auto pipeline makes before its depth is fixed: 1 (the rule) + 3 rounds of 3 probes
 * (runtime/pipeline.c: RF__AUTO_ROUNDS x RF__AUTO_NCAND). */
#define RFB_AUTO_SETTLE_RUNS 10
/* Runs a threads pipeline makes before its schedule is chosen for a run shape: 5 rounds of up to 3
 * arms, lanes, inline, lanes + handoff (backends/threads_sched.h; 2 arms without cldemote). The bench
 * measures what a long-lived pipeline does after them; the next comparison comes 16 runs later. */
#define RFB_SCHED_SETTLE_RUNS 15

/* Time one contestant over the whole workload; seconds per block, or -1 on failure (message printed). */
static double timed(const char *what, const rfb_work *w, int (*fn)(void *ctx, rfb_sink *k), void *ctx, int nocheck)
{
	rfb_sink k = {w, 0, 0, nocheck};
	double t0 = rfb_now();
	int rc = fn(ctx, &k);
	double t = (rfb_now() - t0) / (double)w->n;
	if (rc != 0 || k.bad != 0) {
		fprintf(stderr, "\n%s: %s (%zu wrong blocks)\n", what, rc != 0 ? rf_errmsg() : "payload check failed", k.bad);
		return -1;
	}
	return t;
}

/* The contestants, as closures over (work, ring, pipeline, depth). */
typedef struct arm {
	const rfb_work *w;
	unsigned char *ring;
	rf_pipeline *p;
	unsigned depth;
} arm;

static int run_pipeline(void *ctx, rfb_sink *k)
{
	arm *a = ctx;
	return rf_pipeline_run(a->p, a->w->n, a->w->srcs, a->w->sizes, rfb_compute, k);
}

static int run_hand(void *ctx, rfb_sink *k)
{
	arm *a = ctx;
	return rfb_hand_run(a->w, a->depth, a->ring, k);
}

static int run_starpu(void *ctx, rfb_sink *k)
{
	arm *a = ctx;
	return rfb_starpu_run(a->w, a->depth, a->ring, k);
}

static int run_copy_only(void *ctx, rfb_sink *k)
{
	arm *a = ctx;
	(void)k;
	for (size_t i = 0; i < a->w->n; i++)
		memcpy(a->ring + (i % a->depth) * a->w->size, a->w->srcs[i], a->w->sizes[i]);
	return 0;
}

/* The compute's own cost with its block at hand: over one cache-resident buffer. */
static int run_compute_only(void *ctx, rfb_sink *k)
{
	arm *a = ctx;
	memcpy(a->ring, a->w->srcs[0], a->w->size);
	for (size_t i = 0; i < a->w->n; i++) {
		rf_block b = {i, 0, a->ring, a->w->sizes[i], NULL};
		rfb_compute(k, &b);
	}
	return 0;
}

static rfb_record *add(sweep *s, const char *method, const char *backend, unsigned depth, const rfb_work *w,
		       double *t, double copy, double compute)
{
	rfb_record *r = rfb_results_add(&s->res);
	if (r == NULL)
		return NULL;
	r->method = method;
	r->backend = backend;
	r->depth = depth;
	r->copy_queues = strcmp(method, "ringfetch") == 0 ? s->o->copy_queues : 1;
	r->size = w->size;
	r->blocks = w->n;
	r->us_per_block = rfb_median(t, s->o->reps) * 1e6;
	r->copy_us = copy * 1e6;
	r->compute_us = compute * 1e6;
	r->efficiency = (copy > compute ? copy : compute) * 1e6 / r->us_per_block;
	return r;
}

/* How a pipeline's measured runs ran, from its stats before and after them. */
static void ran(rfb_record *r, const rf_stats *before, const rf_pipeline *p)
{
	rf_stats a;
	rf_pipeline_stats(p, &a);
	uint64_t n = a.runs - before->runs, k = a.inline_runs - before->inline_runs;
	const char *last = a.schedule == RF_SCHEDULE_INLINE ? "inline" : a.schedule == RF_SCHEDULE_LOCAL ? "local" : "ring";
	if (k == 0 || k == n)
		snprintf(r->ran, sizeof r->ran, "%s", last);
	else
		snprintf(r->ran, sizeof r->ran, "inline %llu/%llu", (unsigned long long)k, (unsigned long long)n);
}

typedef struct size_run {
	rfb_work w;
	unsigned char *ring;
	rf_pipeline *p[RFB_MAX_LIST], *lp[RFB_MAX_LIST], *seq; /* lp: RF_LOCALITY_COPIER */
	rf_stats before[RFB_MAX_LIST][2];                      /* ringfetch, rf-local: before the reps */
	double *t; /* [(T_FIRST_DEPTH + ndepths * NM) * reps] */
} size_run;

static void size_run_free(size_run *z, const rfb_opts *o)
{
	for (unsigned d = 0; d < o->ndepths; d++) {
		rf_pipeline_destroy(z->p[d]);
		rf_pipeline_destroy(z->lp[d]);
	}
	rf_pipeline_destroy(z->seq);
	free(z->ring);
	free(z->t);
	rfb_work_free(&z->w);
}

static int size_run_init(size_run *z, const rfb_opts *o, const char *backend, size_t size)
{
	memset(z, 0, sizeof *z);
	size_t n = o->blocks ? o->blocks : o->bytes_per_rep / size;
	n = o->blocks ? n : n < 64 ? 64 : n > 100000 ? 100000 : n;
	unsigned maxd = 1;
	for (unsigned d = 0; d < o->ndepths; d++)
		maxd = o->depths[d] > maxd ? o->depths[d] : maxd;
	if (rfb_work_init(&z->w, o, size, n) != 0 ||
	    (z->ring = aligned_alloc(64, ((size_t)maxd * size + 63) & ~(size_t)63)) == NULL ||
	    (z->t = calloc((T_FIRST_DEPTH + o->ndepths * NM) * o->reps, sizeof *z->t)) == NULL) {
		fprintf(stderr, "out of memory for %zu blocks of %zu bytes\n", n, size);
		return -1;
	}
	rf_pipeline_params ps = {.depth = 1, .slot_bytes = size, .backend = "cpu"};
	int rc = rf_pipeline_create(&ps, &z->seq);
	for (unsigned d = 0; d < o->ndepths && rc == RF_OK; d++) {
		int autod = o->depths[d] == RFB_DEPTH_AUTO;
		rf_pipeline_params pp = {.depth = autod ? 0 : o->depths[d], .depth_auto = autod ? RF_DEPTH_AUTO : 0,
					 .slot_bytes = size, .backend = backend, .copy_queues = o->copy_queues,
					 .memory = rfb_memory_of(backend)};
		if (o->locality & RFB_LOC_CALLER)
			rc = rf_pipeline_create(&pp, &z->p[d]);
		pp.locality = RF_LOCALITY_COPIER;
		if (rc == RF_OK && (o->locality & RFB_LOC_COPIER))
			rc = rf_pipeline_create(&pp, &z->lp[d]);
	}
	if (rc != RF_OK) {
		fprintf(stderr, "backend %s: rf_pipeline_create: %s: %s\n", backend, rf_strerror(rc), rf_errmsg());
		return -1;
	}
	return 0;
}

/* One repetition: every contestant once, alternating. */
static int one_rep(sweep *s, size_run *z, unsigned r, int with_baselines)
{
	const rfb_opts *o = s->o;
	unsigned R = o->reps;
	arm a = {&z->w, z->ring, z->seq, 1};
	if ((z->t[T_COPY * R + r] = timed("copy-only", &z->w, run_copy_only, &a, 1)) < 0 ||
	    (z->t[T_COMPUTE * R + r] = timed("compute-only", &z->w, run_compute_only, &a, 1)) < 0)
		return -1;
	if (with_baselines && (o->baselines & RFB_BASE_SEQUENTIAL) &&
	    (z->t[T_SEQ * R + r] = timed("sequential", &z->w, run_pipeline, &a, 0)) < 0)
		return -1;
	for (unsigned d = 0; d < o->ndepths; d++) {
		arm x = {&z->w, z->ring, z->p[d], o->depths[d]}, xl = {&z->w, z->ring, z->lp[d], o->depths[d]};
		double *t = z->t + (T_FIRST_DEPTH + d * NM) * R;
		if (z->p[d] != NULL && (t[M_RF * R + r] = timed("ringfetch", &z->w, run_pipeline, &x, 0)) < 0)
			return -1;
		if (z->lp[d] != NULL && (t[M_LOCAL * R + r] = timed("rf-local", &z->w, run_pipeline, &xl, 0)) < 0)
			return -1;
		if (o->depths[d] == RFB_DEPTH_AUTO) /* the baselines have no auto depth */
			continue;
		if (with_baselines && (o->baselines & RFB_BASE_HAND) &&
		    (t[M_HAND * R + r] = timed("hand", &z->w, run_hand, &x, 0)) < 0)
			return -1;
		if (with_baselines && s->have_starpu && (t[M_STARPU * R + r] = timed("starpu", &z->w, run_starpu, &x, 0)) < 0)
			return -1;
	}
	return 0;
}

static int record_size(sweep *s, size_run *z, const char *backend, int with_baselines)
{
	const rfb_opts *o = s->o;
	unsigned R = o->reps;
	double copy = rfb_median(z->t + T_COPY * R, R), compute = rfb_median(z->t + T_COMPUTE * R, R);
	int ok = 1;
	if (with_baselines && (o->baselines & RFB_BASE_SEQUENTIAL))
		ok &= add(s, "sequential", "cpu", 1, &z->w, z->t + T_SEQ * R, copy, compute) != NULL;
	if (with_baselines && (o->baselines & RFB_BASE_SEQUENTIAL) && s->res.n > 0)
		snprintf(s->res.r[s->res.n - 1].ran, sizeof s->res.r[0].ran, "inline");
	for (unsigned d = 0; d < o->ndepths; d++) {
		double *t = z->t + (T_FIRST_DEPTH + d * NM) * R;
		for (int k = 0; k < 2; k++) {
			rf_pipeline *p = k ? z->lp[d] : z->p[d];
			rfb_record *rf = p ? add(s, k ? "rf-local" : "ringfetch", backend, o->depths[d], &z->w,
						 t + (k ? M_LOCAL : M_RF) * R, copy, compute)
					   : NULL;
			ok &= p == NULL || rf != NULL;
			if (rf == NULL)
				continue;
			ran(rf, &z->before[d][k], p);
			if (o->depths[d] == RFB_DEPTH_AUTO)
				rf->auto_depth = rf_pipeline_depth(p);
		}
		if (o->depths[d] == RFB_DEPTH_AUTO)
			continue;
		if (with_baselines && (o->baselines & RFB_BASE_HAND))
			ok &= add(s, "hand", "-", o->depths[d], &z->w, t + M_HAND * R, copy, compute) != NULL;
		if (with_baselines && s->have_starpu)
			ok &= add(s, "starpu", "-", o->depths[d], &z->w, t + M_STARPU * R, copy, compute) != NULL;
	}
	return ok ? 0 : -1;
}

static int bench_size(sweep *s, const char *backend, size_t size, int with_baselines, const char **resolved)
{
	size_run z;
	int rc = size_run_init(&z, s->o, backend, size);
	if (rc == 0) {
		*resolved = rf_pipeline_backend(z.p[0] ? z.p[0] : z.lp[0]);
		if (s->o->compute == RFB_RATIO) { /* compute time = R x this size's measured copy time */
			arm a = {&z.w, z.ring, NULL, 1};
			double c = timed("copy-only", &z.w, run_copy_only, &a, 1);
			rfb_work_set_ratio(&z.w, s->o, c * 1e9); /* c: seconds per block */
		}
	}
	/* A pipeline settles over its first runs (depth = auto: RFB_AUTO_SETTLE_RUNS; the schedule of
	 * threads: RFB_SCHED_SETTLE_RUNS): what a long-lived pipeline does once. Those runs are not
	 * measured; the stats after them tell how the measured runs ran. */
	for (unsigned d = 0; d < s->o->ndepths && rc == 0; d++) {
		int settle = RFB_SCHED_SETTLE_RUNS + (s->o->depths[d] == RFB_DEPTH_AUTO ? RFB_AUTO_SETTLE_RUNS : 0);
		for (int k = 0; k < 2; k++) {
			arm x = {&z.w, z.ring, k ? z.lp[d] : z.p[d], s->o->depths[d]};
			for (int i = 0; x.p != NULL && i < settle && rc == 0; i++)
				rc = timed("ringfetch", &z.w, run_pipeline, &x, 0) < 0 ? -1 : 0;
			if (x.p != NULL)
				rf_pipeline_stats(x.p, &z.before[d][k]);
		}
	}
	for (unsigned r = 0; r < s->o->reps && rc == 0; r++) {
		progress(s, *resolved, size, r);
		rc = one_rep(s, &z, r, with_baselines);
	}
	if (rc == 0)
		rc = record_size(s, &z, *resolved, with_baselines);
	size_run_free(&z, s->o);
	return rc;
}

/* ---- extras: trace, DOT, machine ------------------------------------------------------------------- */

static unsigned pick_depth(const rfb_opts *o)
{
	unsigned first = 2;
	for (unsigned d = o->ndepths; d-- > 0;) {
		if (o->depths[d] == 2)
			return 2;
		if (o->depths[d] != RFB_DEPTH_AUTO)
			first = o->depths[d];
	}
	return first;
}

/* One representative run, traced: the first backend, depth 2 (or the first), the middle size. */
static int write_trace(const rfb_opts *o, const char *path)
{
	size_t size = o->sizes[o->nsizes / 2], n = 48;
	rfb_opts one = *o;
	one.blocks = n;
	rfb_work w;
	rf_pipeline *p = NULL;
	rf_pipeline_params pp = {.depth = pick_depth(o), .slot_bytes = size, .backend = o->backends[0],
				 .copy_queues = o->copy_queues, .memory = rfb_memory_of(o->backends[0])};
	if (rfb_work_init(&w, &one, size, n) != 0)
		return -1;
	if (o->compute == RFB_RATIO)
		rfb_work_set_ratio(&w, o, (double)size * 0.1); /* as if copies ran at 10 GB/s */
	remove(path); /* a trace file accumulates runs: start afresh */
	rfb_sink k = {&w, 0, 0, 0};
	int rc = rf_pipeline_create(&pp, &p);
	if (rc == RF_OK && (rc = rf_pipeline_trace(p, path)) == RF_OK)
		rc = rf_pipeline_run(p, n, w.srcs, w.sizes, rfb_compute, &k);
	if (rc != RF_OK)
		fprintf(stderr, "trace run: %s: %s\n", rf_strerror(rc), rf_errmsg());
	rf_pipeline_destroy(p);
	rfb_work_free(&w);
	return rc == RF_OK ? 0 : -1;
}

static int write_dot(const rfb_opts *o, const char *path)
{
	rf_graph *g;
	int rc = rf_graph_ring(8, pick_depth(o), o->copy_queues, &g);
	size_t len = 0;
	char *buf = NULL;
	if (rc == RF_OK && rf_graph_dot(g, NULL, 0, &len) == RF_ENOSPC && (buf = malloc(len)) != NULL &&
	    rf_graph_dot(g, buf, len, &len) == RF_OK) {
		FILE *f = fopen(path, "w");
		rc = f && fputs(buf, f) >= 0 && fclose(f) == 0 ? 0 : -1;
	} else {
		rc = -1;
	}
	free(buf);
	rf_graph_destroy(g);
	return rc;
}

static int outputs(sweep *s)
{
	const rfb_opts *o = s->o;
	char machine[512], why[128];
	int rc = 0;
	char starpu[48];
	snprintf(starpu, sizeof starpu, ", \"starpu_ncpu\": %u", s->have_starpu ? o->starpu_ncpu : 0);
	rfb_machine_json(machine, sizeof machine, starpu);
	if (o->json && rfb_write_json(&s->res, o, machine, o->json) != 0)
		fprintf(stderr, "cannot write %s\n", o->json), rc = 1;
	if (o->csv && rfb_write_csv(&s->res, o->csv) != 0)
		fprintf(stderr, "cannot write %s\n", o->csv), rc = 1;
	if (o->plot && rfb_write_plot(&s->res, o->plot, why, sizeof why) != 0)
		fprintf(stderr, "plot %s: %s\n", o->plot, why), rc = 1;
	if (o->trace && write_trace(o, o->trace) != 0)
		rc = 1;
	if (o->dot && write_dot(o, o->dot) != 0)
		fprintf(stderr, "cannot write %s\n", o->dot), rc = 1;
	return rc;
}

int main(int argc, char **argv)
{
	rfb_opts o;
	char err[256];
	int prc = rfb_parse(argc, argv, &o, err, sizeof err);
	if (prc == 1) {
		fputs(rfb_usage(), stdout);
		return 0;
	}
	if (prc != 0) {
		fprintf(stderr, "ringfetch-bench: %s\n(ringfetch-bench --help lists the options)\n", err);
		return 2;
	}
	if (o.starpu_ncpu == 0) {
		long c = sysconf(_SC_NPROCESSORS_ONLN);
		o.starpu_ncpu = c > 1 ? (unsigned)c - 1 : 1; /* the submitting thread keeps a core */
	}
	sweep s = {&o, 0, 0, {0}, rfb_now(), 0, o.nbackends * o.nsizes * o.reps};
	if (o.baselines & RFB_BASE_STARPU) {
		s.have_starpu = rfb_starpu_init(o.starpu_ncpu, err, sizeof err) == 0;
		if (!s.have_starpu)
			fprintf(stderr, "StarPU baseline skipped: %s\n", err);
	}
	int rc = 0;
	for (unsigned b = 0; b < o.nbackends && rc == 0; b++) {
		const char *resolved = o.backends[b];
		for (unsigned i = 0; i < o.nsizes && rc == 0; i++)
			rc = bench_size(&s, o.backends[b], o.sizes[i], b == 0, &resolved);
	}
	if (s.have_starpu)
		rfb_starpu_shutdown();
	if (!o.quiet && rfb_now() - s.t0 >= 2)
		fprintf(stderr, "\r%60s\r", "");
	if (rc != 0) {
		rfb_results_free(&s.res);
		return 1;
	}
	rfb_results_relate(&s.res);
	printf("ringfetch-bench %s: %u rep(s), medians; efficiency = max(copy, compute) / time per block%s\n",
	       rf_version_string(), o.reps, s.have_starpu ? "" : "; StarPU not measured");
	rfb_print_table(&s.res, stdout);
	rc = outputs(&s);
	rfb_results_free(&s.res);
	return rc;
}
