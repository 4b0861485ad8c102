/* tests/test_threads_sched.c — how a threads pipeline chooses between running on its lanes, inline on
 * the caller, and with the cache handoff (backends/threads_sched.h): the rule and its comparisons on
 * synthetic samples (no clock), the configuration (RINGFETCH_OVERLAP, key `overlap`), what rf_stats and
 * rf_pipeline_describe say, the locality mode (RF_LOCALITY_COPIER); and, in the suite sched_timing (its
 * own ctest, label "timing", serial), the whole loop against lanes made slow or fast on purpose.
 * White-box (static library); each test runs in its own process. */
#define _GNU_SOURCE
#include "ringfetch.h"
#include "backends/threads_sched.h"
#include "base/test_hooks.h"
#include "runtime/config.h"

#include <criterion/criterion.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void clean_env(void)
{
	unsetenv("RINGFETCH_CONFIG");
	unsetenv("RINGFETCH_OVERLAP");
	unsetenv("RINGFETCH_HANDOFF");
	unsetenv("RINGFETCH_DEPTH");
	unsetenv("RINGFETCH_BACKEND");
}

TestSuite(sched, .init = clean_env);
TestSuite(sched_timing, .init = clean_env);

/* ---- the rule --------------------------------------------------------------------------------------- */

Test(sched, shapes)
{
	cr_assert_neq(rf__sch_shape(0, 0), 0u);
	cr_assert_eq(rf__sch_shape(512u << 16, 512), rf__sch_shape(512u << 16, 512));
	cr_assert_eq(rf__sch_shape(64 * 100000, 64), rf__sch_shape(64 * 110000, 64), "same power of two");
	cr_assert_neq(rf__sch_shape(64u << 16, 64), rf__sch_shape(64u << 20, 64), "64 KiB vs 1 MiB blocks");
	cr_assert_neq(rf__sch_shape(2u << 20, 2), rf__sch_shape(512u << 20, 512), "2 vs 512 blocks of 1 MiB");
	cr_assert_eq(rf__sch_shape(1u << 30, 1u << 20), rf__sch_shape(1u << 31, 1u << 21), "counts capped");
}

static unsigned best(const double *fig, unsigned n)
{
	const rf__cmp_rule r = RF__SCH_RULE;
	return rf__cmp_pick(&r, fig, NULL, n);
}

Test(sched, best_keeps_the_preferred_arm_unless_beaten_by_the_margin)
{
	double a[2] = {100, 90};
	cr_assert_eq(best(a, 2), 1u, "10 % faster");
	double b[2] = {100, 98};
	cr_assert_eq(best(b, 2), 0u, "2 %: inside the 3 % margin");
	double c[2] = {100, 100};
	cr_assert_eq(best(c, 2), 0u, "a tie keeps the first");
	double d[3] = {100, 80, 79};
	cr_assert_eq(best(d, 3), 1u, "the third must beat the second by the margin too");
	double e[3] = {100, 80, 70};
	cr_assert_eq(best(e, 3), 2u);
	double f[1] = {5};
	cr_assert_eq(best(f, 1), 0u);
}

static const unsigned two[2] = {RF__SCH_INLINE, RF__SCH_LANES};

/* Run one comparison: each run of arm a takes x[a] (lanes first, then in turn). */
static int compare(rf__sch *s, uint32_t shape, const double *x)
{
	int ended = 0;
	for (unsigned k = 0; k < s->narms * RF__SCH_ROUNDS; k++) {
		rf__sch_class *c;
		unsigned arm = rf__sch_pick(s, shape, &c);
		cr_assert(c->probing, "run %u of a comparison", k);
		ended = rf__sch_note(s, c, arm, x[arm]);
		cr_assert_eq(ended, k + 1 == s->narms * RF__SCH_ROUNDS, "run %u", k);
	}
	return ended;
}

Test(sched, comparisons_alternate_from_the_lanes_and_keep_the_faster)
{
	rf__sch s;
	rf__sch_init(&s, two, 2);
	uint32_t shape = rf__sch_shape(64u << 16, 64);
	unsigned seen[2 * RF__SCH_ROUNDS], want[2 * RF__SCH_ROUNDS];
	for (unsigned k = 0; k < 2 * RF__SCH_ROUNDS; k++) {
		rf__sch_class *c;
		seen[k] = rf__sch_pick(&s, shape, &c);
		want[k] = k % 2 ? RF__SCH_INLINE : RF__SCH_LANES;
		rf__sch_note(&s, c, seen[k], seen[k] == RF__SCH_INLINE ? 100 : 150);
	}
	cr_assert_arr_eq(seen, want, sizeof want, "lanes first, then in turn");
	rf__sch_class *c;
	for (unsigned k = 0; k < RF__SCH_RECHECK; k++)
		cr_assert_eq(rf__sch_pick(&s, shape, &c), RF__SCH_INLINE, "the faster is kept (run %u)", k);
	cr_assert_eq(c->choice, RF__SCH_INLINE);
	cr_assert_float_eq(c->cmp.fig[0], 100, 1e-9);
	cr_assert_float_eq(c->cmp.fig[1], 150, 1e-9);
	/* then compared again, and the lanes are faster now: taken, and compared again soon */
	double x[2] = {200, 100};
	cr_assert(compare(&s, shape, x));
	cr_assert_eq(c->choice, RF__SCH_LANES);
	cr_assert_eq(c->interval, RF__SCH_RECHECK, "a changed choice is checked again soon");
}

/* Run the kept arm until the next comparison is due. */
static void settle(rf__sch *s, uint32_t shape)
{
	rf__sch_class *c;
	while (rf__sch_pick(s, shape, &c), !c->probing)
		;
	c->cmp.k = 0; /* that pick opened the comparison: let compare() take its turns from the start */
}

Test(sched, earlier_comparisons_count_half_each_time)
{
	rf__sch s;
	rf__sch_init(&s, two, 2);
	uint32_t shape = rf__sch_shape(1u << 20, 64);
	double x[2];
	x[RF__SCH_INLINE] = 100, x[RF__SCH_LANES] = 80;
	cr_assert(compare(&s, shape, x));
	rf__sch_class *c = &s.c[0];
	cr_assert_eq(c->choice, RF__SCH_LANES);
	/* one comparison that says the lanes are 5 % slower does not undo a 20 % gain seen before:
	 * lanes (80 R / 2 + 105 R) / (R / 2 + R) = 96.7 against inline 100 */
	const double R = RF__SCH_ROUNDS;
	settle(&s, shape);
	x[RF__SCH_LANES] = 105;
	cr_assert(compare(&s, shape, x));
	cr_assert_float_eq(c->cmp.fig[1], (80 * R / 2 + 105 * R) / (R / 2 + R), 1e-9);
	cr_assert_eq(c->choice, RF__SCH_LANES);
	/* a second one that says so (lanes now 20 % slower) does: 110 */
	settle(&s, shape);
	x[RF__SCH_LANES] = 120;
	cr_assert(compare(&s, shape, x));
	cr_assert_float_eq(c->cmp.fig[1], ((80 * R / 2 + 105 * R) / 2 + 120 * R) / ((R / 2 + R) / 2 + R), 1e-9);
	cr_assert_eq(c->choice, RF__SCH_INLINE);
}

Test(sched, the_interval_doubles_up_to_its_cap)
{
	rf__sch s;
	rf__sch_init(&s, two, 2);
	uint32_t shape = rf__sch_shape(1u << 20, 8);
	double x[2] = {100, 50};
	rf__sch_class *c;
	unsigned intervals[10];
	for (unsigned i = 0; i < 10; i++) {
		/* one comparison */
		for (unsigned k = 0; k < 2 * RF__SCH_ROUNDS; k++) {
			unsigned arm = rf__sch_pick(&s, shape, &c);
			cr_assert(c->probing);
			rf__sch_note(&s, c, arm, x[arm]);
		}
		intervals[i] = c->interval;
		for (unsigned k = 0; k < c->interval; k++)
			cr_assert_eq(rf__sch_pick(&s, shape, &c), RF__SCH_LANES);
	}
	unsigned want[10] = {16, 32, 64, 128, 256, 512, 1024, 1024, 1024, 1024};
	cr_assert_arr_eq(intervals, want, sizeof want);
}

/* The figure is the mean: what the caller waits for is the sum of its runs. A schedule whose typical
 * run is faster but which is often held up (its lane not running on a busy machine) loses; noise of a
 * few per cent around a real difference does not decide. */
_Static_assert(RF__SCH_ROUNDS == 5, "the samples below are five runs per arm");

static unsigned decide(const double *lanes, const double *inl)
{
	rf__sch s;
	rf__sch_init(&s, two, 2);
	uint32_t shape = rf__sch_shape(1u << 16, 512);
	rf__sch_class *c = NULL;
	for (unsigned k = 0; k < 2 * RF__SCH_ROUNDS; k++) {
		unsigned arm = rf__sch_pick(&s, shape, &c);
		rf__sch_note(&s, c, arm, arm == RF__SCH_LANES ? lanes[k / 2] : inl[k / 2]);
	}
	return c->choice;
}

Test(sched, the_mean_of_the_runs_decides)
{
	double held_up[5] = {70, 400, 71, 72, 300}, steady[5] = {100, 102, 101, 99, 100};
	cr_assert_eq(decide(held_up, steady), RF__SCH_INLINE, "lanes: typical 72, mean 183");
	double fast[5] = {70, 75, 71, 73, 72}, noisy[5] = {100, 60, 140, 90, 110};
	cr_assert_eq(decide(fast, noisy), RF__SCH_LANES, "72 vs 100");
	double close[5] = {98, 99, 97, 98, 98};
	cr_assert_eq(decide(close, steady), RF__SCH_INLINE, "2 %: within the margin");
}

Test(sched, failed_runs_are_not_samples)
{
	rf__sch s;
	rf__sch_init(&s, two, 2);
	uint32_t shape = rf__sch_shape(1u << 16, 16);
	rf__sch_class *c;
	unsigned a = rf__sch_pick(&s, shape, &c);
	/* the run failed: nothing noted; the next run is the same turn */
	cr_assert_eq(rf__sch_pick(&s, shape, &c), a);
	cr_assert_eq(c->cmp.k, 0u);
	cr_assert_eq(rf__sch_note(&s, c, RF__SCH_INLINE, 5), 0, "not this turn's arm: ignored");
	cr_assert_eq(c->cmp.k, 0u);
}

Test(sched, shapes_are_chosen_for_separately)
{
	rf__sch s;
	rf__sch_init(&s, two, 2);
	uint32_t small = rf__sch_shape(4u << 10, 2), big = rf__sch_shape(64u << 20, 64);
	rf__sch_class *c;
	/* interleaved: small runs inline faster, big runs lanes faster */
	for (unsigned k = 0; k < 4 * RF__SCH_ROUNDS; k++) {
		uint32_t sh = k % 2 ? big : small;
		unsigned arm = rf__sch_pick(&s, sh, &c);
		double x = sh == small ? (arm == RF__SCH_INLINE ? 1 : 3) : (arm == RF__SCH_INLINE ? 10 : 6);
		rf__sch_note(&s, c, arm, x);
	}
	cr_assert_eq(rf__sch_pick(&s, small, &c), RF__SCH_INLINE);
	cr_assert_eq(rf__sch_pick(&s, big, &c), RF__SCH_LANES);
	/* more shapes than classes: the least recently used is forgotten and compared afresh */
	for (unsigned i = 0; i < RF__SCH_CLASSES; i++)
		rf__sch_pick(&s, rf__sch_shape((uint64_t)1 << (24 + i), 1), &c);
	rf__sch_pick(&s, small, &c);
	cr_assert(c->probing, "forgotten: compared again");
	cr_assert_eq(c->cmp.k, 0u);
}

Test(sched, one_arm_is_no_choice)
{
	rf__sch s;
	unsigned on[1] = {RF__SCH_LANES};
	rf__sch_init(&s, on, 1);
	rf__sch_class *c;
	for (unsigned k = 0; k < 40; k++) {
		cr_assert_eq(rf__sch_pick(&s, 1, &c), RF__SCH_LANES);
		cr_assert_eq(rf__sch_note(&s, c, RF__SCH_LANES, k), 0);
	}
}

Test(sched, the_handoff_is_an_arm_by_the_same_rule)
{
	rf__sch s;
	unsigned three[3] = {RF__SCH_INLINE, RF__SCH_LANES, RF__SCH_HANDOFF};
	rf__sch_init(&s, three, 3);
	uint32_t shape = rf__sch_shape(1u << 20, 64);
	double x[3];
	x[RF__SCH_INLINE] = 100, x[RF__SCH_LANES] = 80, x[RF__SCH_HANDOFF] = 78; /* 2.5 %: not enough */
	cr_assert(compare(&s, shape, x));
	rf__sch_class *c = &s.c[0];
	cr_assert_eq(c->choice, RF__SCH_LANES);
	x[RF__SCH_HANDOFF] = 60;
	for (unsigned k = 0; k < c->interval;)
		k += rf__sch_pick(&s, shape, &c) == c->choice;
	cr_assert(compare(&s, shape, x));
	cr_assert_eq(c->choice, RF__SCH_HANDOFF);
	/* the turn order: lanes, handoff, inline */
	rf__sch_init(&s, three, 3);
	unsigned seen[3];
	for (unsigned k = 0; k < 3; k++) {
		seen[k] = rf__sch_pick(&s, shape, &c);
		rf__sch_note(&s, c, seen[k], 1);
	}
	unsigned want[3] = {RF__SCH_LANES, RF__SCH_HANDOFF, RF__SCH_INLINE};
	cr_assert_arr_eq(seen, want, sizeof want);
}

/* ---- configuration --------------------------------------------------------------------------------- */

Test(sched, parse_overlap)
{
	/* the overlap modes are parsed as the handoff's (the same three words) */
	cr_assert_eq(rf__parse_handoff("auto"), RF__MODE_AUTO);
	cr_assert_eq(rf__parse_handoff("off"), RF__MODE_OFF);
	cr_assert_eq(rf__parse_handoff("on"), RF__MODE_ON);
	cr_assert_eq(rf__parse_handoff("yes"), -1);
	cr_assert_eq(rf__parse_handoff(""), -1);
}

Test(sched, malformed_overlap_is_a_config_error)
{
	setenv("RINGFETCH_OVERLAP", "sometimes", 1);
	rf_pipeline_params pp = {.depth = 2, .slot_bytes = 64, .backend = "threads"};
	rf_pipeline *p = NULL;
	cr_assert_eq(rf_pipeline_create(&pp, &p), RF_ECONFIG);
	cr_assert(strstr(rf_errmsg(), "RINGFETCH_OVERLAP"), "%s", rf_errmsg());
	cr_assert_null(p);
}

/* ---- pipelines: stats and describe ---------------------------------------------------------------- */

enum { N = 32, SZ = 4096 };
static unsigned char g_src[N][SZ];
static const void *g_srcs[N];
static size_t g_sizes[N];

static void sources(void)
{
	for (int i = 0; i < N; i++) {
		memset(g_src[i], i + 1, SZ);
		g_srcs[i] = g_src[i];
		g_sizes[i] = SZ;
	}
}

typedef struct seen {
	size_t next;
	int bad;
	pthread_t caller;
	int off_caller; /* computes that ran on another thread */
} seen;

static int check(void *user, const rf_block *b)
{
	seen *s = user;
	const unsigned char *d = b->data;
	s->bad |= b->index != s->next++ || d[0] != (unsigned char)(b->index + 1) || d[SZ - 1] != d[0];
	s->off_caller += !pthread_equal(pthread_self(), s->caller);
	return 0;
}

static rf_pipeline *make(const char *backend, unsigned depth, const char *overlap, uint64_t locality)
{
	sources();
	if (overlap)
		setenv("RINGFETCH_OVERLAP", overlap, 1);
	rf_pipeline_params pp = {.depth = depth, .slot_bytes = SZ, .backend = backend, .locality = locality};
	rf_pipeline *p = NULL;
	cr_assert_eq(rf_pipeline_create(&pp, &p), RF_OK, "%s", rf_errmsg());
	return p;
}

static void run(rf_pipeline *p, seen *s)
{
	*s = (seen){0, 0, pthread_self(), 0};
	cr_assert_eq(rf_pipeline_run(p, N, g_srcs, g_sizes, check, s), RF_OK, "%s", rf_errmsg());
	cr_assert_eq(s->bad, 0);
	cr_assert_eq(s->next, (size_t)N);
}

Test(sched, overlap_off_runs_inline_and_says_so)
{
	rf_pipeline *p = make("threads", 3, "off", 0);
	seen s;
	for (int i = 0; i < 5; i++)
		run(p, &s);
	rf_stats st;
	cr_assert_eq(rf_pipeline_stats(p, &st), RF_OK);
	cr_assert_eq(st.runs, 5u);
	cr_assert_eq(st.inline_runs, 5u);
	cr_assert_eq(st.schedule, RF_SCHEDULE_INLINE);
	cr_assert_eq(st.handoff_runs, 0u);
	cr_assert(strstr(rf_pipeline_describe(p), "overlap off (forced by configuration"), "%s", rf_pipeline_describe(p));
	rf_pipeline_destroy(p);
}

Test(sched, overlap_on_always_uses_the_lanes)
{
	rf_pipeline *p = make("threads", 2, "on", 0);
	seen s;
	for (int i = 0; i < 8; i++)
		run(p, &s);
	rf_stats st;
	cr_assert_eq(rf_pipeline_stats(p, &st), RF_OK);
	cr_assert_eq(st.inline_runs, 0u);
	cr_assert_eq(st.schedule, RF_SCHEDULE_RING);
	cr_assert(strstr(rf_pipeline_describe(p), "overlap on (forced by configuration)"), "%s", rf_pipeline_describe(p));
	cr_assert_null(strstr(rf_pipeline_describe(p), "schedule for"), "nothing compared");
	rf_pipeline_destroy(p);
}

/* The comparison's turns do not depend on timing: after 2 x RF__SCH_ROUNDS runs of one shape, half ran
 * inline and half on the lanes, and describe has the comparison's figures and its choice. */
Test(sched, auto_compares_on_the_first_runs_and_describes_it)
{
	rf_pipeline *p = make("threads", 2, NULL, 0);
	cr_assert(strstr(rf_pipeline_describe(p), "overlap auto"), "%s", rf_pipeline_describe(p));
	seen s;
	unsigned sched[2 * RF__SCH_ROUNDS], want[2 * RF__SCH_ROUNDS];
	for (unsigned i = 0; i < 2 * RF__SCH_ROUNDS; i++) {
		run(p, &s);
		rf_stats st;
		rf_pipeline_stats(p, &st);
		sched[i] = (unsigned)st.schedule;
		want[i] = i % 2 ? RF_SCHEDULE_INLINE : RF_SCHEDULE_RING;
	}
	cr_assert_arr_eq(sched, want, sizeof want);
	rf_stats st;
	rf_pipeline_stats(p, &st);
	cr_assert_eq(st.inline_runs, RF__SCH_ROUNDS);
	const char *d = rf_pipeline_describe(p);
	cr_assert(strstr(d, "schedule for 4 KiB blocks x 32: ") && strstr(d, "means of 5; again in 16 runs"), "%s", d);
	cr_assert(strstr(d, ": inline (") || strstr(d, ": lanes ("), "%s", d);
	rf_pipeline_destroy(p);
}

Test(sched, cpu_and_depth_1_are_inline)
{
	rf_pipeline *p = make("cpu", 2, NULL, 0), *q = make("threads", 1, NULL, 0);
	seen s;
	run(p, &s);
	run(q, &s);
	rf_stats a, b;
	rf_pipeline_stats(p, &a);
	rf_pipeline_stats(q, &b);
	cr_assert_eq(a.schedule, RF_SCHEDULE_INLINE);
	cr_assert_eq(a.inline_runs, 1u);
	cr_assert_eq(b.schedule, RF_SCHEDULE_INLINE);
	cr_assert_eq(b.inline_runs, 1u);
	rf_pipeline_destroy(p);
	rf_pipeline_destroy(q);
}

/* ---- locality ------------------------------------------------------------------------------------- */

Test(sched, locality_must_be_known)
{
	rf_pipeline_params pp = {.depth = 2, .slot_bytes = 64, .backend = "threads", .locality = 2};
	rf_pipeline *p = NULL;
	cr_assert_eq(rf_pipeline_create(&pp, &p), RF_EINVAL);
	cr_assert(strstr(rf_errmsg(), "locality 2"), "%s", rf_errmsg());
}

/* The caller and the lane take blocks in turn: computes run on both threads, in block order, each block
 * holding its payload; with two copy queues three threads share them. Checked by the hazard oracle too. */
Test(sched, locality_computes_where_blocks_were_copied)
{
	setenv("RINGFETCH_ORACLE", "1", 1);
	for (unsigned kq = 1; kq <= 2; kq++) {
		sources();
		setenv("RINGFETCH_OVERLAP", "on", 1);
		rf_pipeline_params pp = {.depth = kq + 2, .slot_bytes = SZ, .backend = "threads", .copy_queues = kq,
					 .locality = RF_LOCALITY_COPIER};
		rf_pipeline *p = NULL;
		cr_assert_eq(rf_pipeline_create(&pp, &p), RF_OK, "%s", rf_errmsg());
		cr_assert(strstr(rf_pipeline_describe(p), "locality: each block computed by the thread that copied it"),
			  "%s", rf_pipeline_describe(p));
		seen s;
		for (int i = 0; i < 4; i++) {
			run(p, &s);
			cr_assert_eq(s.off_caller, N - (N + (int)kq) / ((int)kq + 1), "kq %u: blocks not on the caller", kq);
		}
		rf_stats st;
		rf_pipeline_stats(p, &st);
		cr_assert_eq(st.schedule, RF_SCHEDULE_LOCAL);
		rf_pipeline_destroy(p);
	}
	unsetenv("RINGFETCH_ORACLE");
}

/* Short runs (fewer blocks than queues), uneven sizes and a failing compute keep the contract. */
static int fail_at_5(void *user, const rf_block *b)
{
	check(user, b);
	return b->index == 5 ? 42 : 0;
}

Test(sched, locality_keeps_the_contract_on_short_and_failing_runs)
{
	setenv("RINGFETCH_ORACLE", "1", 1);
	rf_pipeline *p = make("threads", 2, "on", RF_LOCALITY_COPIER);
	seen s = {0, 0, pthread_self(), 0};
	for (size_t n = 1; n <= 3; n++) {
		s = (seen){0, 0, pthread_self(), 0};
		cr_assert_eq(rf_pipeline_run(p, n, g_srcs, g_sizes, check, &s), RF_OK, "%s", rf_errmsg());
		cr_assert_eq(s.next, n);
		cr_assert_eq(s.bad, 0);
	}
	s = (seen){0, 0, pthread_self(), 0};
	cr_assert_eq(rf_pipeline_run(p, N, g_srcs, g_sizes, fail_at_5, &s), RF_ECALLBACK);
	cr_assert(strstr(rf_errmsg(), "block 5"), "%s", rf_errmsg());
	cr_assert_eq(s.next, 6u, "no compute after the failing one");
	run(p, &s); /* usable again */
	rf_pipeline_destroy(p);
	unsetenv("RINGFETCH_ORACLE");
}

Test(sched, locality_is_ignored_by_cpu)
{
	rf_pipeline *p = make("cpu", 2, NULL, RF_LOCALITY_COPIER);
	seen s;
	run(p, &s);
	cr_assert_eq(s.off_caller, 0);
	rf_stats st;
	rf_pipeline_stats(p, &st);
	cr_assert_eq(st.schedule, RF_SCHEDULE_INLINE);
	rf_pipeline_destroy(p);
}

/* ---- the whole loop, timed ------------------------------------------------------------------------- */

static pthread_t g_main;
static atomic_int g_mode;          /* 1: computes after a lane's copy are slow; 2: the caller's copies are slow */
static atomic_uint g_lane_copies;  /* copies made on a lane so far */
static unsigned g_seen_copies;     /* the count the last compute saw (the caller's) */

static void sleep_us(long us)
{
	struct timespec ts = {0, us * 1000};
	nanosleep(&ts, NULL);
}

static void mark_copy(size_t block)
{
	(void)block;
	int on_main = pthread_equal(pthread_self(), g_main);
	if (!on_main)
		atomic_fetch_add(&g_lane_copies, 1);
	if (atomic_load(&g_mode) == 2 && on_main)
		sleep_us(300);
}

static void spin_us(long us)
{
	struct timespec t0, t;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	do
		clock_gettime(CLOCK_MONOTONIC, &t);
	while ((t.tv_sec - t0.tv_sec) * 1000000000L + (t.tv_nsec - t0.tv_nsec) < us * 1000);
}

/* 300 us, and in mode 1 another 1 ms when a lane copied something since the previous compute: a block
 * read from another core's cache at a (much exaggerated) cost. */
static int busy_300us(void *user, const rf_block *b)
{
	(void)user;
	(void)b;
	unsigned n = atomic_load(&g_lane_copies);
	if (atomic_load(&g_mode) == 1 && n != g_seen_copies)
		sleep_us(1000);
	g_seen_copies = n;
	spin_us(300);
	return 0;
}

static double run_ms(rf_pipeline *p, size_t n, rf_compute_fn fn)
{
	struct timespec a, b;
	clock_gettime(CLOCK_MONOTONIC, &a);
	cr_assert_eq(rf_pipeline_run(p, n, g_srcs, g_sizes, fn, NULL), RF_OK, "%s", rf_errmsg());
	clock_gettime(CLOCK_MONOTONIC, &b);
	return (double)(b.tv_sec - a.tv_sec) * 1e3 + (double)(b.tv_nsec - a.tv_nsec) / 1e6;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

/* Computes that cost 1 ms more when they read what a lane copied (a stand-in for a machine where a block
 * read from another core's cache costs more than its copy): a ring there is slower than running inline.
 * The pipeline must notice from its own runs and run inline — as fast as the cpu backend, within a
 * loose bound for a loaded machine (medians of 9 runs each, alternating). Before the fallback existed a
 * threads pipeline ran every block's copy on the lane: over 4x the cpu backend's time here. */
Test(sched_timing, slow_lanes_fall_back_to_inline)
{
	g_main = pthread_self();
	atomic_store(&g_mode, 1);
	rf__test_hooks.before_copy = mark_copy;
	sources();
	rf_pipeline_params pt = {.depth = 2, .slot_bytes = SZ, .backend = "threads"},
			   pc = {.depth = 1, .slot_bytes = SZ, .backend = "cpu"};
	rf_pipeline *t = NULL, *c = NULL;
	cr_assert_eq(rf_pipeline_create(&pt, &t), RF_OK, "%s", rf_errmsg());
	cr_assert_eq(rf_pipeline_create(&pc, &c), RF_OK, "%s", rf_errmsg());
	for (unsigned i = 0; i < 2 * RF__SCH_ROUNDS + 2; i++)
		run_ms(t, 16, busy_300us);
	double tt[9], tc[9];
	for (int i = 0; i < 9; i++) {
		tt[i] = run_ms(t, 16, busy_300us);
		tc[i] = run_ms(c, 16, busy_300us);
	}
	qsort(tt, 9, sizeof *tt, cmp_double);
	qsort(tc, 9, sizeof *tc, cmp_double);
	cr_assert(tt[4] < tc[4] * 1.5, "threads %.2f ms vs cpu %.2f ms per run: %s", tt[4], tc[4],
		  rf_pipeline_describe(t));
	rf_stats st;
	rf_pipeline_stats(t, &st);
	cr_assert_eq(st.schedule, RF_SCHEDULE_INLINE, "%s", rf_pipeline_describe(t));
	rf_pipeline_destroy(t);
	rf_pipeline_destroy(c);
	rf__test_hooks.before_copy = NULL;
}

/* And the other way: copies that cost 300 us on the caller and nothing on the lane are hidden by the
 * ring, which the comparison keeps. */
Test(sched_timing, a_ring_that_pays_is_kept)
{
	g_main = pthread_self();
	atomic_store(&g_mode, 2);
	rf__test_hooks.before_copy = mark_copy;
	rf_pipeline *t = make("threads", 2, NULL, 0);
	for (unsigned i = 0; i < 2 * RF__SCH_ROUNDS + 2; i++)
		run_ms(t, 16, busy_300us);
	rf_stats a, b;
	rf_pipeline_stats(t, &a);
	for (int i = 0; i < 4; i++)
		run_ms(t, 16, busy_300us);
	rf_pipeline_stats(t, &b);
	cr_assert_eq(b.inline_runs, a.inline_runs, "kept the lanes: %s", rf_pipeline_describe(t));
	cr_assert_eq(b.schedule, RF_SCHEDULE_RING);
	rf_pipeline_destroy(t);
	rf__test_hooks.before_copy = NULL;
}
