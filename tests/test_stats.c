/* tests/test_stats.c — rf_pipeline_stats from any thread at any time: during a run it reports the run
 * before (never RF_EBUSY), and totals since create add up every finished run, failed ones included.
 * (The race with a monitoring thread: tests/race_control.c, --check stats-poll, under TSan.) */
#include "ringfetch.h"

#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

static const char *backend(void)
{
	const char *b = getenv("RF_TEST_BACKEND");
	return b && *b ? b : "cpu";
}

static unsigned char g_data[16][256];
static const void *g_srcs[16];
static size_t g_sizes[16];

typedef struct probe {
	rf_pipeline *p;
	rf_stats during;
	int rc_during;
	size_t fail_at;
} probe;

static int cb(void *user, const rf_block *b)
{
	probe *c = user;
	if (b->index == 0)
		c->rc_during = rf_pipeline_stats(c->p, &c->during);
	return b->index == c->fail_at ? 7 : 0;
}

static int run(probe *c, size_t n, size_t bytes)
{
	for (int i = 0; i < 16; i++) {
		g_srcs[i] = g_data[i];
		g_sizes[i] = bytes;
	}
	return rf_pipeline_run(c->p, n, g_srcs, g_sizes, cb, c);
}

Test(stats, during_a_run_stats_report_the_run_before)
{
	rf_pipeline_params pp = {.depth = 3, .slot_bytes = 256, .backend = backend()};
	probe c = {0};
	c.fail_at = 99;
	cr_assert_eq(rf_pipeline_create(&pp, &c.p), RF_OK, "%s", rf_errmsg());
	cr_assert_eq(run(&c, 5, 100), RF_OK);
	cr_assert_eq(c.rc_during, RF_OK, "stats during the first run");
	cr_assert_eq(c.during.runs, 0u);
	cr_assert_eq(c.during.blocks, 0u);
	cr_assert_eq(run(&c, 9, 200), RF_OK);
	cr_assert_eq(c.rc_during, RF_OK, "stats while running: %s", rf_err_name(c.rc_during));
	cr_assert_eq(c.during.runs, 1u);
	cr_assert_eq(c.during.blocks, 5u);
	cr_assert_eq(c.during.bytes, 500u);
	rf_pipeline_destroy(c.p);
}

Test(stats, totals_add_every_finished_run)
{
	rf_pipeline_params pp = {.depth = 2, .slot_bytes = 256, .backend = backend()};
	probe c = {0};
	c.fail_at = 99;
	cr_assert_eq(rf_pipeline_create(&pp, &c.p), RF_OK, "%s", rf_errmsg());
	rf_stats s;
	cr_assert_eq(rf_pipeline_stats(c.p, &s), RF_OK);
	cr_assert_eq(s.runs, 0u);
	cr_assert_eq(run(&c, 4, 10), RF_OK);
	cr_assert_eq(rf_pipeline_collect_stats(c.p, 1), RF_OK);
	c.fail_at = 2;
	cr_assert_eq(run(&c, 6, 20), RF_ECALLBACK);
	c.fail_at = 99;
	cr_assert_eq(run(&c, 0, 20), RF_OK, "nblocks 0: not a run");
	cr_assert_eq(run(&c, 8, 30), RF_OK);
	cr_assert_eq(rf_pipeline_stats(c.p, &s), RF_OK);
	cr_assert_eq(s.runs, 3u);
	cr_assert_eq(s.total_blocks, 4u + 6u + 8u);
	cr_assert_eq(s.total_bytes, 40u + 120u + 240u);
	cr_assert_eq(s.timed_runs, 2u);
	cr_assert_eq(s.blocks, 8u, "the last run");
	cr_assert_geq(s.total_wall_ns, s.wall_ns);
	cr_assert_geq(s.total_exposed_ns, s.exposed_ns);
	rf_pipeline_destroy(c.p);
}

Test(stats, describe_is_stable_once_returned)
{
	rf_pipeline_params pp = {.depth_auto = RF_DEPTH_AUTO, .slot_bytes = 256, .backend = backend()};
	probe c = {0};
	c.fail_at = 99;
	cr_assert_eq(rf_pipeline_create(&pp, &c.p), RF_OK, "%s", rf_errmsg());
	const char *before = rf_pipeline_describe(c.p);
	char copy[600];
	snprintf(copy, sizeof copy, "%s", before);
	for (int i = 0; i < 12; i++)
		cr_assert_eq(run(&c, 16, 256), RF_OK);
	cr_assert_str_eq(before, copy, "a returned describe line changed under the caller");
	cr_assert(strstr(rf_pipeline_describe(c.p), "depth auto") != NULL, "%s", rf_pipeline_describe(c.p));
	rf_pipeline_destroy(c.p);
}

Test(stats, a_run_stopped_by_a_pending_cancel_counts_nothing_that_did_not_run)
{
	rf_pipeline_params pp = {.depth = 2, .slot_bytes = 256, .backend = backend()};
	probe c = {0};
	c.fail_at = 99;
	cr_assert_eq(rf_pipeline_create(&pp, &c.p), RF_OK, "%s", rf_errmsg());
	cr_assert_eq(rf_pipeline_collect_stats(c.p, 1), RF_OK);
	cr_assert_eq(run(&c, 8, 10), RF_OK);
	cr_assert_eq(rf_pipeline_cancel(c.p), RF_OK);
	cr_assert_eq(run(&c, 8, 10), RF_ECANCELED);
	rf_stats s;
	cr_assert_eq(rf_pipeline_stats(c.p, &s), RF_OK);
	cr_assert_eq(s.runs, 2u);
	uint64_t copies = 0, computes = 0;
	for (unsigned q = 0; q < s.nqueues; q++)
		copies += s.queue[q].copies, computes += s.queue[q].computes;
	cr_assert_eq(copies + computes, 0u, "the canceled run copied %llu and computed %llu blocks",
		     (unsigned long long)copies, (unsigned long long)computes);
	rf_pipeline_destroy(c.p);
}
