/*
 * tests/graph_support.h — graph-building helpers shared by the white-box graph suites (test_graph.c,
 * test_lower.c; they link the static library). Everything is static inline, so a suite that leaves a
 * helper unused gets no -Wunused-function.
 */
#ifndef RF_TESTS_GRAPH_SUPPORT_H
#define RF_TESTS_GRAPH_SUPPORT_H

#include <criterion/criterion.h>

#include "ringfetch.h"
#include "base/error.h"

#include <stdint.h>

/* Empty rf_errmsg(), so that a later check sees only what the call under test wrote. */
static inline void clear_errmsg(void)
{
	rf__err(RF_OK, "%s", "");
	cr_assert_str_empty(rf_errmsg());
}

static inline rf_graph *new_graph(void)
{
	rf_graph *g = NULL;
	cr_assert_eq(rf_graph_create(0, &g), RF_OK);
	cr_assert_not_null(g);
	return g;
}

/* Add a node; its id. */
static inline size_t add(rf_graph *g, rf_node_kind kind, unsigned queue, size_t block, unsigned slot)
{
	rf_node_desc d = {kind, queue, block, slot, 0};
	size_t id = SIZE_MAX;
	int rc = rf_graph_add_node(g, &d, &id);
	cr_assert_eq(rc, RF_OK, "add_node: %d (%s)", rc, rf_errmsg());
	return id;
}

static inline void edge(rf_graph *g, size_t from, size_t to)
{
	int rc = rf_graph_add_edge(g, from, to);
	cr_assert_eq(rc, RF_OK, "add_edge %zu -> %zu: %d (%s)", from, to, rc, rf_errmsg());
}

/* Does rf_graph_ring accept depth D with K copy queues? */
static inline int valid_ring(unsigned D, unsigned K)
{
	return D >= 1 && K >= 1 && (K == 1 || D >= K + 1);
}

/* The ring graph of N blocks, depth D, K copy queues. */
static inline rf_graph *ring(size_t N, unsigned D, unsigned K)
{
	rf_graph *g = NULL;
	int rc = rf_graph_ring(N, D, K, &g);
	cr_assert_eq(rc, RF_OK, "ring N=%zu D=%u K=%u: %d (%s)", N, D, K, rc, rf_errmsg());
	cr_assert_not_null(g);
	return g;
}

#endif /* RF_TESTS_GRAPH_SUPPORT_H */
