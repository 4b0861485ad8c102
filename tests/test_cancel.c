/* tests/test_cancel.c — rf_pipeline_cancel as a serving loop relies on it: a cancel that finds no run
 * waits for the next one, each cancel is consumed by exactly one run, and rf_pipeline_cancel_clear
 * withdraws one that came too late. (Races: tests/race_control.c, --check pending-cancel.) */
#include "ringfetch.h"

#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#define NB 16

static const char *backend(void)
{
	const char *b = getenv("RF_TEST_BACKEND");
	return b && *b ? b : "cpu";
}

static rf_pipeline *make(void)
{
	rf_pipeline_params pp = {0};
	pp.depth = 3;
	pp.slot_bytes = 32;
	pp.backend = backend();
	rf_pipeline *p = NULL;
	cr_assert_eq(rf_pipeline_create(&pp, &p), RF_OK, "%s", rf_errmsg());
	return p;
}

typedef struct probe {
	rf_pipeline *p;
	size_t computes;
	size_t cancel_at; /* cancel from the callback at this block (NB: never) */
} probe;

static int count_cb(void *user, const rf_block *b)
{
	probe *c = user;
	c->computes++;
	if (b->index == c->cancel_at)
		rf_pipeline_cancel(c->p);
	return 0;
}

static unsigned char g_data[NB][32];
static const void *g_srcs[NB];
static size_t g_sizes[NB];

static int run(rf_pipeline *p, probe *c)
{
	for (int i = 0; i < NB; i++) {
		g_srcs[i] = g_data[i];
		g_sizes[i] = sizeof g_data[i];
	}
	c->p = p;
	c->computes = 0;
	return rf_pipeline_run(p, NB, g_srcs, g_sizes, count_cb, c);
}

Test(cancel, a_cancel_between_runs_stops_the_next_run_before_any_compute)
{
	rf_pipeline *p = make();
	probe c = {0, 0, NB};
	cr_assert_eq(run(p, &c), RF_OK);
	cr_assert_eq(rf_pipeline_cancel(p), RF_OK);
	cr_assert_eq(run(p, &c), RF_ECANCELED, "the cancel made between runs was lost");
	cr_assert_eq(c.computes, 0u);
	cr_assert_eq(run(p, &c), RF_OK, "consumed: the run after is not canceled");
	cr_assert_eq(c.computes, (size_t)NB);
	rf_pipeline_destroy(p);
}

Test(cancel, cancels_before_a_run_merge_into_one)
{
	rf_pipeline *p = make();
	probe c = {0, 0, NB};
	for (int i = 0; i < 3; i++)
		cr_assert_eq(rf_pipeline_cancel(p), RF_OK);
	cr_assert_eq(run(p, &c), RF_ECANCELED);
	cr_assert_eq(run(p, &c), RF_OK);
	rf_pipeline_destroy(p);
}

Test(cancel, a_cancel_after_the_last_compute_started_stays_pending)
{
	rf_pipeline *p = make();
	probe c = {0, 0, NB - 1}; /* cancels from inside the last compute */
	cr_assert_eq(run(p, &c), RF_OK, "%s", rf_errmsg());
	cr_assert_eq(c.computes, (size_t)NB);
	c.cancel_at = NB;
	cr_assert_eq(run(p, &c), RF_ECANCELED, "it stays for the next run");
	cr_assert_eq(run(p, &c), RF_OK);
	rf_pipeline_destroy(p);
}

Test(cancel, a_cancel_inside_a_run_is_consumed_by_it)
{
	rf_pipeline *p = make();
	probe c = {0, 0, 2};
	cr_assert_eq(run(p, &c), RF_ECANCELED);
	cr_assert_eq(c.computes, 3u);
	c.cancel_at = NB;
	cr_assert_eq(run(p, &c), RF_OK, "the cancel was consumed by the run it stopped");
	rf_pipeline_destroy(p);
}

Test(cancel, clear_withdraws_a_pending_cancel)
{
	rf_pipeline *p = make();
	probe c = {0, 0, NB};
	cr_assert_eq(rf_pipeline_cancel_clear(p), RF_OK, "nothing pending: nothing happens");
	cr_assert_eq(rf_pipeline_cancel(p), RF_OK);
	cr_assert_eq(rf_pipeline_cancel_clear(p), RF_OK);
	cr_assert_eq(run(p, &c), RF_OK);
	cr_assert_eq(rf_pipeline_cancel_clear(NULL), RF_EINVAL);
	cr_assert_eq(rf_pipeline_cancel(NULL), RF_EINVAL);
	rf_pipeline_destroy(p);
}

static int clear_from_callback(void *user, const rf_block *b)
{
	probe *c = user;
	if (b->index == 0)
		cr_assert_eq(rf_pipeline_cancel_clear(c->p), RF_EBUSY);
	return 0;
}

Test(cancel, clear_during_a_run_is_ebusy)
{
	rf_pipeline *p = make();
	probe c = {p, 0, NB};
	for (int i = 0; i < NB; i++) {
		g_srcs[i] = g_data[i];
		g_sizes[i] = sizeof g_data[i];
	}
	cr_assert_eq(rf_pipeline_run(p, NB, g_srcs, g_sizes, clear_from_callback, &c), RF_OK);
	rf_pipeline_destroy(p);
}
