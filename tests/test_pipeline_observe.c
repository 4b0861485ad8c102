/*
 * tests/test_pipeline_observe.c — the core public contract of rf_pipeline_* (include/ringfetch.h), against
 * the shared library, exactly as an outside program would use it: tracing, cancellation and statistics.
 *
 * Backend-agnostic: ctest runs this binary once per backend with RF_TEST_BACKEND set ("cpu" when
 * unset); every pipeline is created on that backend. Callbacks never use Criterion asserts (they may
 * run on a library thread): they record the first violation in their context, and the test asserts
 * on it after the run has returned. The helpers (block sets, the checking callback) are in support.h.
 *
 * Randomised tests print their seed on failure; RF_TEST_SEED=<n> replays one.
 */
#include "support.h"

#include <pthread.h>
#include <stdatomic.h>

/* ---- tracing ----------------------------------------------------------------------------------- */

typedef struct trace_reentry {
	rf_pipeline *p;
	int rc;
} trace_reentry;

static int trace_reentry_cb(void *user, const rf_block *blk)
{
	(void)blk;
	trace_reentry *t = user;
	t->rc = rf_pipeline_trace(t->p, NULL);
	return 0;
}

/* Every copy and compute of every traced run becomes one slice; runs append; NULL stops. */
Test(pipeline, trace_records_every_copy_and_compute)
{
	char path[] = "/tmp/rf-trace-XXXXXX";
	int fd = mkstemp(path);
	cr_assert_geq(fd, 0);
	close(fd);
	remove(path);
	blockset bs;
	bs_uniform(&bs, 37, 256, test_seed());
	rf_pipeline *p = make_pipeline(3, 256, 1);
	cr_assert_eq(rf_pipeline_trace(p, path), RF_OK, "%s", rf_errmsg());
	checked_run(p, &bs, 0, "traced run 1");
	checked_run(p, &bs, 0, "traced run 2");
	cr_assert_eq(rf_pipeline_trace(p, NULL), RF_OK);
	checked_run(p, &bs, 0, "untraced run");
	cr_assert_eq(count_in_file(path, "\"cat\":\"copy\""), 2 * 37u);
	cr_assert_eq(count_in_file(path, "\"cat\":\"compute\""), 2 * 37u);
	cr_assert_eq(count_in_file(path, "\"process_name\""), 2u);
	cr_assert_eq(count_in_file(path, "["), 1u, "one opening bracket, however many runs");
	/* Changing the trace from inside a run is refused. */
	trace_reentry t = {p, 0};
	cr_assert_eq(rf_pipeline_run(p, bs.n, bs_srcs(&bs), bs.sizes, trace_reentry_cb, &t), RF_OK);
	cr_assert_eq(t.rc, RF_EBUSY);
	cr_assert_eq(rf_pipeline_trace(NULL, path), RF_EINVAL);
	cr_assert_eq(rf_pipeline_trace(p, ""), RF_EINVAL);
	rf_pipeline_destroy(p);
	bs_free(&bs);
	remove(path);
	leak_check();
}

/* ---- cancellation ------------------------------------------------------------------------------ */

typedef struct cancel_probe {
	rf_pipeline *p;
	size_t calls, at;
	atomic_int started;
	atomic_int canceled; /* the other thread's cancel has returned */
} cancel_probe;

/* Cancels its own pipeline at block `at` (from inside the callback). */
static int cancel_self_cb(void *user, const rf_block *blk)
{
	cancel_probe *c = user;
	c->calls++;
	if (blk->index == c->at)
		cr_assert_eq(rf_pipeline_cancel(c->p), RF_OK);
	return 0;
}

/* Slow computes, and the fifth waits for the other thread's cancel, however late that thread runs: the
 * cancel lands mid-run. */
static int slow_cb(void *user, const rf_block *blk)
{
	cancel_probe *c = user;
	c->calls++;
	atomic_store(&c->started, 1);
	struct timespec d = {0, 2000000};
	nanosleep(&d, NULL);
	while (blk->index == 4 && !atomic_load(&c->canceled))
		nanosleep(&d, NULL);
	return 0;
}

static void *cancel_later(void *arg)
{
	cancel_probe *c = arg;
	while (!atomic_load(&c->started))
		sched_yield();
	struct timespec d = {0, 10000000};
	nanosleep(&d, NULL);
	cr_assert_eq(rf_pipeline_cancel(c->p), RF_OK);
	atomic_store(&c->canceled, 1);
	return NULL;
}

Test(pipeline, cancel_from_the_callback_stops_after_that_block)
{
	blockset bs;
	bs_uniform(&bs, 40, 64, test_seed());
	for (unsigned depth = 1; depth <= 4; depth++) {
		rf_pipeline *p = make_pipeline(depth, 64, 1);
		cancel_probe c = {p, 0, 7, 0, 0};
		int rc = rf_pipeline_run(p, bs.n, bs_srcs(&bs), bs.sizes, cancel_self_cb, &c);
		cr_assert_eq(rc, RF_ECANCELED, "depth %u: %s", depth, rf_err_name(rc));
		cr_assert_eq(c.calls, 8u, "depth %u: %zu computes, none may follow block 7", depth, c.calls);
		checked_run(p, &bs, 0, "after a cancel"); /* usable, and the cancel is not remembered */
		rf_pipeline_destroy(p);
	}
	bs_free(&bs);
	leak_check();
}

Test(pipeline, cancel_from_another_thread_drains_and_returns_ecanceled)
{
	blockset bs;
	bs_uniform(&bs, 2000, 64, test_seed());
	rf_pipeline *p = make_pipeline(3, 64, 1);
	cancel_probe c = {p, 0, 0, 0, 0};
	pthread_t t;
	cr_assert_eq(pthread_create(&t, NULL, cancel_later, &c), 0);
	int rc = rf_pipeline_run(p, bs.n, bs_srcs(&bs), bs.sizes, slow_cb, &c);
	pthread_join(t, NULL);
	cr_assert_eq(rc, RF_ECANCELED, "%s: %s", rf_err_name(rc), rf_errmsg());
	cr_assert_lt(c.calls, bs.n, "the run went to the end");
	checked_run(p, &bs, 0, "after a cancel from another thread");
	cr_assert_eq(rf_pipeline_cancel(NULL), RF_EINVAL);
	rf_pipeline_destroy(p);
	bs_free(&bs);
	leak_check();
}

/* ---- statistics -------------------------------------------------------------------------------- */

static int spin_cb(void *user, const rf_block *blk)
{
	(void)blk;
	rf_pipeline *p = user;
	rf_stats s;
	cr_assert_eq(rf_pipeline_stats(p, &s), RF_OK, "stats while running: the run before");
	cr_assert_eq(rf_pipeline_collect_stats(p, 0), RF_EBUSY, "collect while running");
	struct timespec t0, t;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	do
		clock_gettime(CLOCK_MONOTONIC, &t);
	while ((t.tv_sec - t0.tv_sec) * 1000000000L + (t.tv_nsec - t0.tv_nsec) < 20000);
	return 0;
}

Test(pipeline, stats_of_the_last_run)
{
	blockset bs;
	bs_uniform(&bs, 64, 4096, test_seed());
	uint64_t bytes = 0;
	for (size_t i = 0; i < bs.n; i++)
		bytes += bs.sizes[i];
	rf_pipeline *p = make_pipeline(3, 4096, 2);
	rf_stats s;
	cr_assert_eq(rf_pipeline_stats(p, &s), RF_OK);
	cr_assert_eq(s.blocks, 0u, "no run yet");
	checked_run(p, &bs, 0, "untimed");
	cr_assert_eq(rf_pipeline_stats(p, &s), RF_OK);
	cr_assert_eq(s.blocks, bs.n);
	cr_assert_eq(s.bytes, bytes);
	cr_assert_gt(s.wall_ns, 0u);
	cr_assert_eq(s.timed, 0);
	cr_assert_eq(rf_pipeline_collect_stats(p, 1), RF_OK);
	cr_assert_eq(rf_pipeline_run(p, bs.n, bs_srcs(&bs), bs.sizes, spin_cb, p), RF_OK, "%s", rf_errmsg());
	cr_assert_eq(rf_pipeline_stats(p, &s), RF_OK);
	cr_assert_eq(s.timed, 1);
	cr_assert_eq(s.nqueues, 3u, "queue 0 computes, two copy queues");
	cr_assert_eq(s.queue[0].computes, bs.n);
	cr_assert_eq(s.queue[0].copies, 0u);
	cr_assert_eq(s.queue[1].copies + s.queue[2].copies, bs.n);
	cr_assert_geq(s.queue[0].busy_ns, bs.n * 20000u, "64 computes of >= 20 us");
	cr_assert_leq(s.queue[0].busy_ns, s.wall_ns);
	cr_assert_gt(s.copy_ns, 0u);
	cr_assert_eq(s.exposed_ns, s.wall_ns - s.queue[0].busy_ns);
	cr_assert(s.overlap_efficiency >= 0 && s.overlap_efficiency <= 1, "%f", s.overlap_efficiency);
	if (strcmp(test_backend(), "cpu") == 0) /* nothing overlaps inline: every copy is exposed */
		cr_assert_eq(s.overlap_efficiency, 0.0);
	cr_assert_eq(rf_pipeline_collect_stats(p, 0), RF_OK);
	checked_run(p, &bs, 0, "untimed again");
	cr_assert_eq(rf_pipeline_stats(p, &s), RF_OK);
	cr_assert_eq(s.timed, 0);
	cr_assert_eq(rf_pipeline_stats(NULL, &s), RF_EINVAL);
	cr_assert_eq(rf_pipeline_stats(p, NULL), RF_EINVAL);
	cr_assert_eq(rf_pipeline_collect_stats(NULL, 1), RF_EINVAL);
	rf_pipeline_destroy(p);
	bs_free(&bs);
	leak_check();
}

