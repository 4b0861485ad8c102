/* tests/test_validate.c — rf_graph_validate stays near-linear where one copy feeds many computes (the
 * computes of one block are checked with one search each way, not one per compute: 1 copy + 80k
 * computes of one block took 14 s before), and the hazards are still found. */
#include "ringfetch.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

static double now_s(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static size_t add(rf_graph *g, rf_node_kind kind, unsigned queue, size_t block, unsigned slot)
{
	rf_node_desc d = {kind, queue, block, slot, 0};
	size_t id;
	cr_assert_eq(rf_graph_add_node(g, &d, &id), RF_OK, "%s", rf_errmsg());
	return id;
}

/* copy b0 (queue 1) -> K computes of b0 (queue 0) -> copy b1 into the same slot (queue 1). */
static rf_graph *fan(size_t k, int drop_raw, int drop_war)
{
	rf_graph *g;
	cr_assert_eq(rf_graph_create(0, &g), RF_OK);
	size_t c0 = add(g, RF_NODE_COPY, 1, 0, 0), first = 0, last = 0;
	for (size_t i = 0; i < k; i++) {
		last = add(g, RF_NODE_COMPUTE, 0, 0, 0);
		first = i == 0 ? last : first;
	}
	size_t c1 = add(g, RF_NODE_COPY, 1, 1, 0);
	size_t c2 = add(g, RF_NODE_COMPUTE, 0, 1, 0);
	if (!drop_raw)
		cr_assert_eq(rf_graph_add_edge(g, c0, first), RF_OK);
	if (!drop_war)
		cr_assert_eq(rf_graph_add_edge(g, last, c1), RF_OK);
	cr_assert_eq(rf_graph_add_edge(g, c1, c2), RF_OK);
	return g;
}

Test(validate, one_copy_feeding_80k_computes_is_fast, .timeout = 60)
{
	rf_graph *g = fan(80000, 0, 0);
	double t0 = now_s();
	cr_assert_eq(rf_graph_validate(g), RF_OK, "%s", rf_errmsg());
	double dt = now_s() - t0;
	/* Linear work is a few ms; the quadratic check took 14 s. 5 s leaves room for a loaded machine and
	 * sanitizers while still catching the quadratic one. */
	cr_assert_lt(dt, 5.0, "validation took %.2f s", dt);
	rf_graph_destroy(g);
}

Test(validate, the_hazards_of_a_fan_are_still_found)
{
	rf_graph *g = fan(1000, 1, 0);
	cr_assert_eq(rf_graph_validate(g), RF_EHAZARD, "RAW: the copy reaches no compute");
	cr_assert(strstr(rf_errmsg(), "RAW") != NULL, "%s", rf_errmsg());
	rf_graph_destroy(g);
	g = fan(1000, 0, 1);
	cr_assert_eq(rf_graph_validate(g), RF_EHAZARD, "WAR: the next copy waits for no compute");
	cr_assert(strstr(rf_errmsg(), "WAR") != NULL, "%s", rf_errmsg());
	rf_graph_destroy(g);
	/* computes on two queues: only the ones on queue 0 follow the copy */
	cr_assert_eq(rf_graph_create(0, &g), RF_OK);
	size_t c0 = add(g, RF_NODE_COPY, 1, 0, 0);
	size_t a = add(g, RF_NODE_COMPUTE, 0, 0, 0);
	add(g, RF_NODE_COMPUTE, 0, 0, 0);
	size_t b = add(g, RF_NODE_COMPUTE, 2, 0, 0);
	cr_assert_eq(rf_graph_add_edge(g, c0, a), RF_OK);
	cr_assert_eq(rf_graph_validate(g), RF_EHAZARD);
	char want[64];
	snprintf(want, sizeof want, "node %zu", b);
	cr_assert(strstr(rf_errmsg(), "RAW") != NULL, "%s", rf_errmsg());
	cr_assert_eq(rf_graph_add_edge(g, c0, b), RF_OK);
	cr_assert_eq(rf_graph_validate(g), RF_OK, "%s", rf_errmsg());
	rf_graph_destroy(g);
}

static int never(void *user, const rf_block *b)
{
	(void)user;
	(void)b;
	cr_assert_fail("no compute may run");
	return 0;
}

/* One block limit (INT64_MAX / 8) for add_node, rings and runs: a block add_node accepts can be run. */
Test(validate, one_block_limit_everywhere)
{
	const size_t limit = (size_t)INT64_MAX / 8;
	rf_graph *g;
	cr_assert_eq(rf_graph_create(0, &g), RF_OK);
	rf_node_desc d = {RF_NODE_COPY, 1, limit - 1, 0, 0};
	cr_assert_eq(rf_graph_add_node(g, &d, NULL), RF_OK, "the last block: %s", rf_errmsg());
	d.block = limit;
	cr_assert_eq(rf_graph_add_node(g, &d, NULL), RF_EINVAL, "one past the limit");
	d.block = (size_t)INT64_MAX / 4; /* accepted before (limit INT64_MAX / 2), though no run could reach it */
	cr_assert_eq(rf_graph_add_node(g, &d, NULL), RF_EINVAL);
	rf_graph_destroy(g);
	rf_graph *r = NULL;
	cr_assert_eq(rf_graph_ring(limit + 1, 2, 1, &r), RF_EINVAL);
	rf_pipeline_params pp = {.depth = 2, .slot_bytes = 8, .backend = "cpu"};
	rf_pipeline *p;
	cr_assert_eq(rf_pipeline_create(&pp, &p), RF_OK);
	static const void *srcs[1];
	static size_t sizes[1];
	/* refused before any size is read: the arrays may be short */
	cr_assert_eq(rf_pipeline_run(p, limit + 1, srcs, sizes, never, NULL), RF_EINVAL);
	cr_assert(strstr(rf_errmsg(), "nblocks") != NULL, "%s", rf_errmsg());
	rf_pipeline_destroy(p);
}
