/* tests/test_autodepth.c — depth = auto: the rule f(samples) -> depth and the probing on synthetic
 * samples (no clock), the measuring run's bounded memory, RF_DEPTH_AUTO through the API; and one
 * wall-clock test of the whole loop (suite autodepth_timing: its own ctest, label "timing", serial). */
#include "ringfetch.h"
#include "runtime/autodepth.h"
#include "runtime/backend.h"

#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

/* Samples of n blocks: copy i takes copy_us (slow_us every `every`-th), computes take compute_us, and
 * a refill ends `slack_us` plus its copy after the compute that freed the slot. */
typedef struct synth {
	int64_t copy[1000], refill[1000], compute[1000];
	rf__auto_samples s;
} synth;

static rf__auto_samples *make(synth *z, size_t n, double copy_us, double slow_us, size_t every, double compute_us)
{
	for (size_t i = 0; i < n; i++) {
		double c = every && i % every == 0 ? slow_us : copy_us;
		z->copy[i] = (int64_t)(c * 1000);
		z->refill[i] = (int64_t)(c * 1000); /* the copy starts as soon as the slot frees */
		z->compute[i] = (int64_t)(compute_us * 1000);
	}
	z->s = (rf__auto_samples){z->copy, z->refill, z->compute, n, n, n};
	return &z->s;
}

Test(autodepth, steady_short_copies_give_the_double_buffer)
{
	synth z;
	rf__auto_summary x;
	cr_assert_eq(rf__auto_rule(make(&z, 40, 20, 0, 0, 200), 1, 16, &x), 2u);
	cr_assert_float_eq(x.compute_mean, 200000.0, 1e-6);
	cr_assert_float_eq(x.copy_mean, 20000.0, 1e-6);
}

Test(autodepth, slow_copies_get_slack_of_refill_p90_over_compute)
{
	synth z;
	rf__auto_summary x;
	/* every 5th copy 1 ms, computes 250 us, mean copy 200 us < 250 us: 1 + ceil(1000 / 250) = 5 */
	cr_assert_eq(rf__auto_rule(make(&z, 40, 0, 1000, 5, 250), 1, 16, &x), 5u, "refill p90 %.0f", x.refill_p90);
	/* every 10th copy 1 ms, computes 300 us: the p90 is the slow copy (index 36 of 40 sorted): 5 */
	cr_assert_eq(rf__auto_rule(make(&z, 40, 10, 1000, 10, 300), 1, 16, &x), 5u);
	/* the slots cap it */
	cr_assert_eq(rf__auto_rule(make(&z, 40, 0, 1000, 5, 250), 1, 3, &x), 3u);
	/* absurd refill latencies (a copy that waited very long) stay within the cap, no overflow */
	rf__auto_samples *s = make(&z, 40, 1, 0, 0, 0.01);
	for (int i = 0; i < 40; i++)
		z.refill[i] = INT64_MAX / 2;
	z.compute[0] = 100; /* compute mean 12.5 ns: copies (1 us) are the bottleneck, 2 */
	cr_assert_eq(rf__auto_rule(s, 1, 16, &x), 2u);
	for (int i = 0; i < 40; i++)
		z.compute[i] = 2000; /* compute-bound: the latency rule, capped */
	cr_assert_eq(rf__auto_rule(s, 1, 16, &x), 16u);
}

Test(autodepth, copy_bound_keeps_every_queue_busy)
{
	synth z;
	rf__auto_summary x;
	cr_assert_eq(rf__auto_rule(make(&z, 24, 400, 0, 0, 50), 1, 16, &x), 2u, "steady copy-bound: 2");
	/* jittery copy-bound: p90 > 1.5 x mean adds a slot */
	cr_assert_eq(rf__auto_rule(make(&z, 40, 400, 4000, 5, 50), 1, 16, &x), 3u);
	/* two copy queues: at least 3; copies 400 us vs computes 250 us are not copy-bound with K = 2 */
	cr_assert_eq(rf__auto_rule(make(&z, 40, 400, 0, 0, 250), 2, 16, &x), 3u);
	cr_assert_eq(rf__auto_rule(make(&z, 40, 600, 0, 0, 250), 2, 16, &x), 3u, "copy-bound with K = 2: K + 1");
}

Test(autodepth, nothing_to_learn_from_gives_zero)
{
	synth z;
	rf__auto_summary x = {1, 2, 3, 4};
	rf__auto_samples *s = make(&z, 10, 1, 0, 0, 1);
	s->ncompute = 0;
	cr_assert_eq(rf__auto_rule(s, 1, 16, &x), 0u);
	s->ncompute = 10;
	s->ncopy = 0;
	cr_assert_eq(rf__auto_rule(s, 1, 16, &x), 0u);
	cr_assert_float_eq(x.copy_mean, 1.0, 1e-9, "left alone");
	/* no refill pairs: the copy p90 stands in */
	s = make(&z, 10, 100, 0, 0, 30);
	s->nrefill = 0;
	cr_assert_eq(rf__auto_rule(s, 1, 16, &x), 2u, "copy-bound");
}

Test(autodepth, candidates_are_d_2d_4d_within_the_slots)
{
	unsigned c[RF__AUTO_NCAND];
	cr_assert_eq(rf__auto_candidates(2, 16, c), 3u);
	cr_assert(c[0] == 2 && c[1] == 4 && c[2] == 8);
	cr_assert_eq(rf__auto_candidates(5, 16, c), 3u);
	cr_assert(c[0] == 5 && c[1] == 10 && c[2] == 16, "the slots themselves when the next doubling passes them");
	cr_assert_eq(rf__auto_candidates(3, 5, c), 2u);
	cr_assert(c[0] == 3 && c[1] == 5);
	cr_assert_eq(rf__auto_candidates(16, 16, c), 1u);
	cr_assert_eq(c[0], 16u);
}

/* After a first run that read ahead in every slot: as many blocks ahead as the reads it chose in flight. */
Test(autodepth, reads_chosen_online_become_blocks_ahead)
{
	const double mib = 1 << 20;
	cr_assert_eq(rf__auto_reads_depth(8 * 1016 * 1024.0, 4 * mib, 2, 16), 3u, "8 x 1016K: two 4 MiB blocks ahead");
	cr_assert_eq(rf__auto_reads_depth(8 * mib, 4 * mib, 2, 16), 3u, "exactly two blocks");
	cr_assert_eq(rf__auto_reads_depth(8 * mib + 1, 4 * mib, 2, 16), 4u);
	cr_assert_eq(rf__auto_reads_depth(2 * mib, 4 * mib, 2, 16), 2u, "less than a block: the ring's least");
	cr_assert_eq(rf__auto_reads_depth(2 * mib, 4 * mib, 3, 16), 3u, "two copy queues need three");
	cr_assert_eq(rf__auto_reads_depth(32 * mib, 1 * mib, 2, 16), 16u, "the slots cap it");
	cr_assert_eq(rf__auto_reads_depth(1e30, 1, 2, 16), 16u);
	cr_assert_eq(rf__auto_reads_depth(0, 4 * mib, 2, 16), 2u, "nothing chosen");
	cr_assert_eq(rf__auto_reads_depth(8 * mib, 0, 2, 16), 2u, "no bytes per block");
}

/* Runs the probe over scripted speeds: speed[i][r] for candidate i's r-th run; returns the winner. */
static unsigned probe_with(const unsigned *cand, unsigned n, double speed[][RF__AUTO_ROUNDS])
{
	rf__auto_probe pr;
	rf__auto_probe_start(&pr, cand, n);
	unsigned rounds[RF__AUTO_NCAND] = {0}, runs = 0;
	for (;;) {
		unsigned i = rf__cmp_turn(&pr.cmp);
		runs++;
		if (rf__cmp_note(&pr.cmp, speed[i][rounds[i]++]))
			break;
		cr_assert_neq(rf__cmp_turn(&pr.cmp), i, "candidates alternate");
	}
	cr_assert_eq(runs, n * RF__AUTO_ROUNDS);
	return pr.cmp.best;
}

Test(autodepth, probing_keeps_the_fastest_by_mean)
{
	const unsigned cand[3] = {2, 4, 8};
	double a[3][RF__AUTO_ROUNDS] = {{10, 10, 10}, {9, 9, 30}, {8, 1, 12}};
	cr_assert_eq(probe_with(cand, 3, a), 2u, "means 10, 16, 7");
	double b[3][RF__AUTO_ROUNDS] = {{10, 10, 10}, {1, 50, 50}, {11, 11, 11}};
	cr_assert_eq(probe_with(cand, 3, b), 0u, "one lucky run does not decide");
	double c[3][RF__AUTO_ROUNDS] = {{10, 10, 10}, {9.95, 9.95, 9.95}, {9.95, 9.95, 9.95}};
	cr_assert_eq(probe_with(cand, 3, c), 0u, "a deeper ring must win by 1 %");
	/* the runs' sum is what the caller waits for: a deeper ring held up once loses */
	double d[3][RF__AUTO_ROUNDS] = {{10, 10, 10}, {8, 8, 20}, {11, 11, 11}};
	cr_assert_eq(probe_with(cand, 3, d), 0u, "means 10, 12, 11");
}

static int noop(void *user, const rf_block *b)
{
	(void)user;
	(void)b;
	return 0;
}

Test(autodepth, rf_depth_auto_through_the_api)
{
	rf_pipeline_params pp = {.depth_auto = RF_DEPTH_AUTO, .slot_bytes = 64, .backend = "cpu"};
	rf_pipeline *p = NULL;
	cr_assert_eq(rf_pipeline_create(&pp, &p), RF_OK, "%s", rf_errmsg());
	cr_assert_eq(rf_pipeline_depth(p), 2u, "the starting ring");
	static unsigned char src[64];
	const void *srcs[32];
	size_t sizes[32];
	for (int i = 0; i < 32; i++)
		srcs[i] = src, sizes[i] = sizeof src;
	for (int r = 0; r < 12; r++)
		cr_assert_eq(rf_pipeline_run(p, 32, srcs, sizes, noop, NULL), RF_OK, "%s", rf_errmsg());
	cr_assert(strstr(rf_pipeline_describe(p), "depth auto") != NULL, "%s", rf_pipeline_describe(p));
	unsigned d = rf_pipeline_depth(p);
	cr_assert(d >= 2 && d <= 16, "depth %u", d);
	rf_pipeline_destroy(p);
	/* with copy queues: starts at K + 1 */
	pp.copy_queues = 3;
	cr_assert_eq(rf_pipeline_create(&pp, &p), RF_OK, "%s", rf_errmsg());
	cr_assert_eq(rf_pipeline_depth(p), 4u);
	rf_pipeline_destroy(p);
}

static long maxrss_kib(void)
{
	struct rusage u;
	getrusage(RUSAGE_SELF, &u);
	return u.ru_maxrss;
}

/* The measuring run samples: its memory does not grow with nblocks (it used to log every block). */
Test(autodepth, the_measuring_run_does_not_grow_with_nblocks, .timeout = 300)
{
	enum { N = 2000000 }; /* a per-block log: 2 events x 56 bytes x N = 224 MB */
	const void **srcs = calloc(N, sizeof *srcs); /* empty blocks: NULL sources are allowed */
	size_t *sizes = calloc(N, sizeof *sizes);
	cr_assert(srcs && sizes);
	memset(srcs, 0, N * sizeof *srcs); /* touched now, before the baseline */
	memset(sizes, 0, N * sizeof *sizes);
	rf_pipeline_params pp = {.depth_auto = RF_DEPTH_AUTO, .slot_bytes = 64, .backend = "cpu"};
	rf_pipeline *p = NULL;
	cr_assert_eq(rf_pipeline_create(&pp, &p), RF_OK, "%s", rf_errmsg());
	long before = maxrss_kib();
	cr_assert_eq(rf_pipeline_run(p, N, (const void *const *)srcs, sizes, noop, NULL), RF_OK, "%s", rf_errmsg());
	long grew = maxrss_kib() - before;
	cr_assert_lt(grew, 64 * 1024, "the measuring run of %d blocks grew the peak RSS by %ld KiB", N, grew);
	cr_assert(strstr(rf_pipeline_describe(p), "depth auto") != NULL, "measured: %s", rf_pipeline_describe(p));
	rf_pipeline_destroy(p);
	free(srcs);
	free(sizes);
}

/* ---- the one wall-clock test (ctest autodepth_timing: label timing, RUN_SERIAL) ---------------- */

static void spin_us(long us)
{
	struct timespec t0, t;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	do
		clock_gettime(CLOCK_MONOTONIC, &t);
	while ((t.tv_sec - t0.tv_sec) * 1000000L + (t.tv_nsec - t0.tv_nsec) / 1000 < us);
}

static void slow_every_5th(size_t block)
{
	if (block % 5 == 0)
		spin_us(1000);
}

static int compute_250us(void *user, const rf_block *b)
{
	(void)user;
	(void)b;
	spin_us(250);
	return 0;
}

/* Real times through the real measuring shell: jittery copies (every 5th copy 1 ms, computes 250 us)
 * must get more than the double buffer. Bounds are loose: a loaded machine stretches every time. */
Test(autodepth_timing, jittery_copies_get_more_than_the_double_buffer)
{
	rf__test_hooks.before_copy = slow_every_5th;
	rf_pipeline_params pp = {.depth_auto = RF_DEPTH_AUTO, .slot_bytes = 256, .backend = "cpu"};
	rf_pipeline *p = NULL;
	cr_assert_eq(rf_pipeline_create(&pp, &p), RF_OK, "%s", rf_errmsg());
	static unsigned char src[256];
	const void *srcs[40];
	size_t sizes[40];
	for (int i = 0; i < 40; i++)
		srcs[i] = src, sizes[i] = sizeof src;
	cr_assert_eq(rf_pipeline_run(p, 40, srcs, sizes, compute_250us, NULL), RF_OK, "%s", rf_errmsg());
	unsigned d = rf_pipeline_depth(p);
	cr_assert(d >= 3 && d <= 8, "jittery copies: depth %u: %s", d, rf_pipeline_describe(p));
	rf_pipeline_destroy(p);
	rf__test_hooks.before_copy = NULL;
}
