/* tests/test_graph.c — the job graph: building and reading back, the ring builder (structure checked
 * against rf_plan_ring), validation (cycles, RAW / WAR / WAW hazards, with negative controls on ring
 * graphs and hand-built graphs), and DOT export. */
#include <criterion/criterion.h>

#include "ringfetch.h"
#include "graph/graph_int.h"
#include "graph/program.h"
#include "base/error.h"
#include "graph_support.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* ---- helpers ----------------------------------------------------------------------------------- */

/* Validation of g fails with `want`, and rf_errmsg() says `what` ("RAW", "WAR", "WAW", "cycle"). */
static void assert_invalid(const rf_graph *g, int want, const char *what)
{
	clear_errmsg();
	int rc = rf_graph_validate(g);
	cr_assert_eq(rc, want, "validate: %d, want %d (%s)", rc, want, what);
	cr_assert(strstr(rf_errmsg(), what) != NULL, "\"%s\"", rf_errmsg());
}

/* Node ids of a ring graph, per block: copy, the WAR wait before it (SIZE_MAX if b < D), the RAW wait
 * on queue 0 and the compute. Found by reading the nodes back, never assumed. */
typedef struct ring_ids {
	size_t *copy, *war, *raw, *compute;
} ring_ids;

static void ring_ids_free(ring_ids *r)
{
	free(r->copy);
	free(r->war);
	free(r->raw);
	free(r->compute);
}

/*
 * Check a ring graph node by node against the plan (node ids follow plan order):
 *   PREFETCH b -> [WAIT on q 1+b%K if b >= D] COPY(q 1+b%K, b, b%D)
 *   AWAIT n    -> WAIT on q0
 *   COMPUTE n  -> COMPUTE(q0, n, n%D)
 * and fill r.
 */
static void check_ring_nodes(const rf_graph *g, size_t N, unsigned D, unsigned K, ring_ids *r)
{
	size_t m = N ? N : 1;
	r->copy = malloc(m * sizeof(size_t));
	r->war = malloc(m * sizeof(size_t));
	r->raw = malloc(m * sizeof(size_t));
	r->compute = malloc(m * sizeof(size_t));
	cr_assert(r->copy && r->war && r->raw && r->compute);
	for (size_t b = 0; b < N; b++)
		r->copy[b] = r->war[b] = r->raw[b] = r->compute[b] = SIZE_MAX;

	size_t nsteps = 3 * N;
	rf_step *steps = malloc((nsteps ? nsteps : 1) * sizeof *steps);
	cr_assert_not_null(steps);
	cr_assert_eq(rf_plan_ring(N, D, steps, nsteps, NULL), RF_OK);

	size_t id = 0, ncopy = 0, ncompute = 0, nwait_raw = 0, nwait_war = 0;
	rf_node_desc d;
	for (size_t i = 0; i < nsteps; i++) {
		size_t b = steps[i].block;
		switch (steps[i].kind) {
		case RF_STEP_PREFETCH: {
			unsigned q = 1 + (unsigned)(b % K);
			if (b >= D) {
				cr_assert_eq(rf_graph_node(g, id, &d), RF_OK, "N=%zu D=%u K=%u: node %zu", N, D, K, id);
				cr_assert(d.kind == RF_NODE_WAIT && d.queue == q,
					  "N=%zu D=%u K=%u: node %zu should be the WAR wait of block %zu on q%u (kind %d q%u)",
					  N, D, K, id, b, q, (int)d.kind, d.queue);
				cr_assert(d.block == 0 && d.slot == 0 && d.flags == 0);
				r->war[b] = id++;
				nwait_war++;
			}
			cr_assert_eq(rf_graph_node(g, id, &d), RF_OK, "N=%zu D=%u K=%u: node %zu", N, D, K, id);
			cr_assert(d.kind == RF_NODE_COPY && d.queue == q && d.block == b && d.slot == b % D && d.flags == 0,
				  "N=%zu D=%u K=%u: node %zu should be copy b%zu s%zu q%u, is kind %d b%zu s%u q%u", N, D,
				  K, id, b, b % D, q, (int)d.kind, d.block, d.slot, d.queue);
			r->copy[b] = id++;
			ncopy++;
			break;
		}
		case RF_STEP_AWAIT:
			cr_assert_eq(rf_graph_node(g, id, &d), RF_OK);
			cr_assert(d.kind == RF_NODE_WAIT && d.queue == 0,
				  "N=%zu D=%u K=%u: node %zu should be the RAW wait of block %zu", N, D, K, id, b);
			r->raw[b] = id++;
			nwait_raw++;
			break;
		case RF_STEP_COMPUTE:
			cr_assert_eq(rf_graph_node(g, id, &d), RF_OK);
			cr_assert(d.kind == RF_NODE_COMPUTE && d.queue == 0 && d.block == b && d.slot == b % D,
				  "N=%zu D=%u K=%u: node %zu should be compute b%zu, is kind %d b%zu s%u q%u", N, D, K,
				  id, b, (int)d.kind, d.block, d.slot, d.queue);
			r->compute[b] = id++;
			ncompute++;
			break;
		}
	}
	free(steps);
	cr_assert_eq(rf_graph_nodes(g), id, "N=%zu D=%u K=%u: %zu nodes, want %zu", N, D, K, rf_graph_nodes(g), id);
	cr_assert_eq(ncopy, N);
	cr_assert_eq(ncompute, N);
	cr_assert_eq(nwait_raw, N);
	cr_assert_eq(nwait_war, N > D ? N - D : 0);
	cr_assert_eq(id, 3 * N + (N > D ? N - D : 0));
}

/* The explicit edges of a ring graph are exactly the RAW and WAR chains. */
static void check_ring_edges(const rf_graph *g, size_t N, unsigned D, unsigned K, const ring_ids *r)
{
	size_t want = 0;
	for (size_t b = 0; b < N; b++) {
		cr_assert(rf_graph_has_edge(g, r->copy[b], r->raw[b]), "N=%zu D=%u K=%u: no RAW edge copy(%zu) -> wait",
			  N, D, K, b);
		cr_assert(rf_graph_has_edge(g, r->raw[b], r->compute[b]),
			  "N=%zu D=%u K=%u: no RAW edge wait -> compute(%zu)", N, D, K, b);
		want += 2;
		if (b >= D) {
			cr_assert(rf_graph_has_edge(g, r->compute[b - D], r->war[b]),
				  "N=%zu D=%u K=%u: no WAR edge compute(%zu) -> wait", N, D, K, b - D);
			cr_assert(rf_graph_has_edge(g, r->war[b], r->copy[b]),
				  "N=%zu D=%u K=%u: no WAR edge wait -> copy(%zu)", N, D, K, b);
			want += 2;
		}
		/* and nothing backwards */
		cr_assert(!rf_graph_has_edge(g, r->compute[b], r->copy[b]));
		cr_assert(!rf_graph_has_edge(g, r->raw[b], r->copy[b]));
	}
	cr_assert_eq(rf_graph_edges(g), want, "N=%zu D=%u K=%u: %zu edges, want %zu", N, D, K, rf_graph_edges(g), want);
	/* The internal adjacency agrees with the count (in- and out-lists mirror each other). */
	size_t nin = 0, nout = 0;
	for (size_t i = 0; i < g->n; i++) {
		nin += g->in[i].n;
		nout += g->out[i].n;
	}
	cr_assert_eq(nin, want);
	cr_assert_eq(nout, want);
}

/* ---- building by hand ---------------------------------------------------------------------------- */

Test(graph, create_args)
{
	rf_graph *g = (rf_graph *)(uintptr_t)0x1;
	clear_errmsg();
	cr_assert_eq(rf_graph_create(1, &g), RF_EINVAL);
	cr_assert_str_not_empty(rf_errmsg());
	cr_assert_eq(g, (rf_graph *)(uintptr_t)0x1, "out written on failure");
	clear_errmsg();
	cr_assert_eq(rf_graph_create(0, NULL), RF_EINVAL);
	cr_assert_str_not_empty(rf_errmsg());
	g = new_graph();
	cr_assert_eq(rf_graph_nodes(g), 0);
	cr_assert_eq(rf_graph_edges(g), 0);
	cr_assert_eq(rf_graph_validate(g), RF_OK, "an empty graph is valid");
	rf_graph_destroy(g);
	rf_graph_destroy(NULL);
	cr_assert_eq(rf_graph_nodes(NULL), 0);
	cr_assert_eq(rf_graph_edges(NULL), 0);
}

Test(graph, add_node_ids_and_readback)
{
	rf_graph *g = new_graph();
	const rf_node_desc descs[] = {
	    {RF_NODE_COPY, 1, 0, 0, 0},      {RF_NODE_WAIT, 0, 0, 0, 0},     {RF_NODE_COMPUTE, 0, 0, 0, 0},
	    {RF_NODE_COPY, 2, 7, 3, 0},      {RF_NODE_COMPUTE, 5, 7, 3, 0},  {RF_NODE_COPY, 63, 1000, 1023, 0},
	    {RF_NODE_WAIT, 63, 77, 9, 0}, /* block and slot of a WAIT read back as 0 */
	};
	size_t n = sizeof descs / sizeof descs[0];
	for (size_t i = 0; i < n; i++) {
		size_t id = SIZE_MAX;
		cr_assert_eq(rf_graph_add_node(g, &descs[i], &id), RF_OK, "node %zu: %s", i, rf_errmsg());
		cr_assert_eq(id, i);
		cr_assert_eq(rf_graph_nodes(g), i + 1);
	}
	/* id may be NULL */
	cr_assert_eq(rf_graph_add_node(g, &descs[0], NULL), RF_OK);
	cr_assert_eq(rf_graph_nodes(g), n + 1);
	for (size_t i = 0; i < n; i++) {
		rf_node_desc d;
		memset(&d, 0xa5, sizeof d);
		cr_assert_eq(rf_graph_node(g, i, &d), RF_OK);
		cr_assert_eq(d.kind, descs[i].kind, "node %zu", i);
		cr_assert_eq(d.queue, descs[i].queue, "node %zu", i);
		cr_assert_eq(d.flags, 0);
		if (descs[i].kind == RF_NODE_WAIT) {
			cr_assert_eq(d.block, 0, "node %zu: WAIT block reads back %zu", i, d.block);
			cr_assert_eq(d.slot, 0, "node %zu: WAIT slot reads back %u", i, d.slot);
		} else {
			cr_assert_eq(d.block, descs[i].block, "node %zu", i);
			cr_assert_eq(d.slot, descs[i].slot, "node %zu", i);
		}
	}
	rf_node_desc d;
	clear_errmsg();
	cr_assert_eq(rf_graph_node(g, n + 1, &d), RF_EINVAL);
	cr_assert_str_not_empty(rf_errmsg());
	cr_assert_eq(rf_graph_node(g, SIZE_MAX, &d), RF_EINVAL);
	cr_assert_eq(rf_graph_node(NULL, 0, &d), RF_EINVAL);
	cr_assert_eq(rf_graph_node(g, 0, NULL), RF_EINVAL);
	rf_graph_destroy(g);
}

Test(graph, many_nodes_grow)
{
	/* Past the initial capacity: ids stay dense and nodes read back intact. */
	rf_graph *g = new_graph();
	for (size_t i = 0; i < 1000; i++) {
		size_t id = add(g, i % 2 ? RF_NODE_COMPUTE : RF_NODE_COPY, (unsigned)(i % 3), i / 2, (unsigned)(i / 2 % 17));
		cr_assert_eq(id, i);
		if (i > 0)
			edge(g, i - 1, i);
	}
	cr_assert_eq(rf_graph_nodes(g), 1000);
	cr_assert_eq(rf_graph_edges(g), 999);
	for (size_t i = 0; i < 1000; i += 37) {
		rf_node_desc d;
		cr_assert_eq(rf_graph_node(g, i, &d), RF_OK);
		cr_assert_eq(d.block, i / 2);
		cr_assert_eq(d.queue, i % 3);
		cr_assert_eq(d.slot, i / 2 % 17);
		cr_assert(rf_graph_has_edge(g, i ? i - 1 : 0, i) == (i > 0));
	}
	rf_graph_destroy(g);
}

Test(graph, add_node_bad_args)
{
	rf_graph *g = new_graph();
	add(g, RF_NODE_COPY, 1, 0, 0);
	struct {
		rf_node_desc d;
		const char *why;
	} bad[] = {
	    {{(rf_node_kind)4, 0, 0, 0, 0}, "kind 4"},
	    {{RF_NODE_STAGE, 0, 0, RF_MAX_SLOTS, 0}, "stage slot RF_MAX_SLOTS"},
	    {{RF_NODE_STAGE, 0, (size_t)INT64_MAX / 8, 0, 0}, "stage block past the limit"},
	    {{(rf_node_kind)-1, 0, 0, 0, 0}, "kind -1"},
	    {{(rf_node_kind)100, 0, 0, 0, 0}, "kind 100"},
	    {{RF_NODE_COPY, RF_MAX_QUEUES, 0, 0, 0}, "queue RF_MAX_QUEUES"},
	    {{RF_NODE_WAIT, RF_MAX_QUEUES, 0, 0, 0}, "wait on queue RF_MAX_QUEUES"},
	    {{RF_NODE_COMPUTE, UINT32_MAX, 0, 0, 0}, "queue UINT_MAX"},
	    {{RF_NODE_COPY, 0, 0, RF_MAX_SLOTS, 0}, "copy slot RF_MAX_SLOTS"},
	    {{RF_NODE_COMPUTE, 0, 0, RF_MAX_SLOTS + 5, 0}, "compute slot > RF_MAX_SLOTS"},
	    {{RF_NODE_COPY, 0, 0, 0, 1}, "flags 1"},
	    {{RF_NODE_WAIT, 0, 0, 0, 0x80000000u}, "wait flags"},
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		size_t id = 4242;
		clear_errmsg();
		cr_assert_eq(rf_graph_add_node(g, &bad[i].d, &id), RF_EINVAL, "%s accepted", bad[i].why);
		cr_assert_str_not_empty(rf_errmsg(), "%s: no errmsg", bad[i].why);
		cr_assert_eq(id, 4242, "%s: id written on failure", bad[i].why);
		cr_assert_eq(rf_graph_nodes(g), 1, "%s: node added on failure", bad[i].why);
	}
	rf_node_desc ok = {RF_NODE_COPY, 0, 0, 0, 0};
	clear_errmsg();
	cr_assert_eq(rf_graph_add_node(NULL, &ok, NULL), RF_EINVAL);
	cr_assert_str_not_empty(rf_errmsg());
	cr_assert_eq(rf_graph_add_node(g, NULL, NULL), RF_EINVAL);
	cr_assert_eq(rf_graph_nodes(g), 1);
	/* the limits themselves are fine */
	size_t id;
	rf_node_desc top = {RF_NODE_COPY, RF_MAX_QUEUES - 1, 5, RF_MAX_SLOTS - 1, 0};
	cr_assert_eq(rf_graph_add_node(g, &top, &id), RF_OK);
	cr_assert_eq(id, 1);
	/* a failed add does not disturb queue order: the next node on queue 1 follows node 0 */
	size_t id2 = add(g, RF_NODE_COPY, 1, 1, 1);
	cr_assert_eq(id2, 2);
	cr_assert_eq(g->qprev[2], 0);
	rf_graph_destroy(g);
}

Test(graph, edges_dedupe_remove)
{
	rf_graph *g = new_graph();
	size_t a = add(g, RF_NODE_COPY, 1, 0, 0);
	size_t w = add(g, RF_NODE_WAIT, 0, 0, 0);
	size_t c = add(g, RF_NODE_COMPUTE, 0, 0, 0);
	cr_assert_eq(rf_graph_edges(g), 0, "queue order is implicit, not an edge");
	cr_assert(!rf_graph_has_edge(g, w, c), "queue order is not an explicit edge");
	edge(g, a, w);
	cr_assert_eq(rf_graph_edges(g), 1);
	edge(g, a, w);
	edge(g, a, w);
	cr_assert_eq(rf_graph_edges(g), 1, "duplicate edge counted");
	cr_assert_eq(g->out[a].n, 1, "duplicate edge stored");
	cr_assert_eq(g->in[w].n, 1, "duplicate edge stored");
	edge(g, w, c);
	edge(g, a, c);
	cr_assert_eq(rf_graph_edges(g), 3);
	cr_assert(rf_graph_has_edge(g, a, w) && rf_graph_has_edge(g, w, c) && rf_graph_has_edge(g, a, c));
	cr_assert(!rf_graph_has_edge(g, w, a), "edges are directed");
	cr_assert(!rf_graph_has_edge(g, c, a));
	/* bad arguments to has_edge read as "no edge" */
	cr_assert_eq(rf_graph_has_edge(NULL, a, w), 0);
	cr_assert_eq(rf_graph_has_edge(g, a, 99), 0);
	cr_assert_eq(rf_graph_has_edge(g, 99, a), 0);

	cr_assert_eq(rf_graph_remove_edge(g, a, w), RF_OK);
	cr_assert_eq(rf_graph_edges(g), 2);
	cr_assert(!rf_graph_has_edge(g, a, w));
	cr_assert(rf_graph_has_edge(g, a, c) && rf_graph_has_edge(g, w, c), "remove took another edge");
	clear_errmsg();
	cr_assert_eq(rf_graph_remove_edge(g, a, w), RF_EINVAL, "removing a missing edge");
	cr_assert_str_not_empty(rf_errmsg());
	cr_assert_eq(rf_graph_edges(g), 2);
	cr_assert_eq(rf_graph_remove_edge(g, w, a), RF_EINVAL, "reverse of an existing edge");
	cr_assert_eq(rf_graph_remove_edge(g, a, 99), RF_EINVAL);
	cr_assert_eq(rf_graph_remove_edge(NULL, a, c), RF_EINVAL);
	/* re-adding after removal works and is counted once */
	edge(g, a, w);
	cr_assert_eq(rf_graph_edges(g), 3);
	cr_assert(rf_graph_has_edge(g, a, w));
	/* remove everything */
	cr_assert_eq(rf_graph_remove_edge(g, a, c), RF_OK);
	cr_assert_eq(rf_graph_remove_edge(g, w, c), RF_OK);
	cr_assert_eq(rf_graph_remove_edge(g, a, w), RF_OK);
	cr_assert_eq(rf_graph_edges(g), 0);
	for (size_t i = 0; i < 3; i++)
		cr_assert(g->in[i].n == 0 && g->out[i].n == 0, "node %zu keeps adjacency", i);
	rf_graph_destroy(g);
}

Test(graph, add_edge_bad_args)
{
	rf_graph *g = new_graph();
	size_t a = add(g, RF_NODE_COPY, 1, 0, 0);
	size_t c = add(g, RF_NODE_COMPUTE, 0, 0, 0);
	clear_errmsg();
	cr_assert_eq(rf_graph_add_edge(NULL, a, c), RF_EINVAL);
	cr_assert_str_not_empty(rf_errmsg());
	clear_errmsg();
	cr_assert_eq(rf_graph_add_edge(g, a, 2), RF_EINVAL, "edge to a missing node");
	cr_assert_str_not_empty(rf_errmsg());
	clear_errmsg();
	cr_assert_eq(rf_graph_add_edge(g, 2, a), RF_EINVAL, "edge from a missing node");
	cr_assert_str_not_empty(rf_errmsg());
	cr_assert_eq(rf_graph_add_edge(g, SIZE_MAX, a), RF_EINVAL);
	clear_errmsg();
	cr_assert_eq(rf_graph_add_edge(g, a, a), RF_EINVAL, "self edge");
	cr_assert_str_not_empty(rf_errmsg());
	cr_assert_eq(rf_graph_add_edge(g, c, c), RF_EINVAL, "self edge");
	cr_assert_eq(rf_graph_edges(g), 0, "failed add_edge left an edge");
	cr_assert(!rf_graph_has_edge(g, a, a));
	rf_graph_destroy(g);
}

/* ---- the ring builder ---------------------------------------------------------------------------- */

static const size_t ring_ns[] = {0, 1, 2, 3, 4, 5, 7, 8, 16, 17, 33, 40};

Test(graph, ring_structure)
{
	for (unsigned D = 1; D <= 16; D++) {
		for (unsigned K = 1; K <= 3; K++) {
			if (!valid_ring(D, K))
				continue;
			for (size_t i = 0; i < sizeof ring_ns / sizeof ring_ns[0]; i++) {
				size_t N = ring_ns[i];
				rf_graph *g = ring(N, D, K);
				ring_ids r;
				check_ring_nodes(g, N, D, K, &r);
				check_ring_edges(g, N, D, K, &r);
				int rc = rf_graph_validate(g);
				cr_assert_eq(rc, RF_OK, "ring N=%zu D=%u K=%u does not validate: %d (%s)", N, D, K, rc,
					     rf_errmsg());
				/* The internal summaries agree. */
				cr_assert_eq(g->nslots, N == 0 ? 0 : (unsigned)(N < D ? N : D));
				cr_assert_eq(g->nqueues, N == 0 ? 0 : 1 + (unsigned)(N < K ? N : K));
				cr_assert_eq(g->nblocks, N);
				ring_ids_free(&r);
				rf_graph_destroy(g);
			}
		}
	}
}

Test(graph, ring_larger)
{
	/* bigger rings, including many copy queues and a deep ring */
	static const struct {
		size_t N;
		unsigned D, K;
	} c[] = {{500, 2, 1}, {300, 7, 3}, {200, 64, 63}, {150, 9, 8}, {100, 1024, 1}, {1100, 1024, 5}};
	for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
		rf_graph *g = ring(c[i].N, c[i].D, c[i].K);
		ring_ids r;
		check_ring_nodes(g, c[i].N, c[i].D, c[i].K, &r);
		check_ring_edges(g, c[i].N, c[i].D, c[i].K, &r);
		cr_assert_eq(rf_graph_validate(g), RF_OK, "N=%zu D=%u K=%u: %s", c[i].N, c[i].D, c[i].K, rf_errmsg());
		ring_ids_free(&r);
		rf_graph_destroy(g);
	}
}

Test(graph, ring_bad_args)
{
	static const struct {
		unsigned D, K;
	} bad[] = {{0, 1},  {0, 2}, {1, 0}, {4, 0}, {RF_MAX_DEPTH + 1, 1}, {2, 2}, {1, 2}, {3, 3},
		   {2, 3},  {5, 5}, {63, 63}, {100, RF_MAX_QUEUES}, {100, RF_MAX_QUEUES + 1}, {UINT32_MAX, 1}};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		rf_graph *g = (rf_graph *)(uintptr_t)0x1;
		clear_errmsg();
		cr_assert_eq(rf_graph_ring(8, bad[i].D, bad[i].K, &g), RF_EINVAL, "D=%u K=%u accepted", bad[i].D,
			     bad[i].K);
		cr_assert_str_not_empty(rf_errmsg());
		cr_assert_eq(g, (rf_graph *)(uintptr_t)0x1, "D=%u K=%u: out written on failure", bad[i].D, bad[i].K);
	}
	clear_errmsg();
	cr_assert_eq(rf_graph_ring(8, 2, 1, NULL), RF_EINVAL);
	cr_assert_str_not_empty(rf_errmsg());
	/* the edges of the valid range */
	static const struct {
		unsigned D, K;
	} ok[] = {{1, 1}, {RF_MAX_DEPTH, 1}, {3, 2}, {4, 3}, {64, 63}, {RF_MAX_DEPTH, RF_MAX_QUEUES - 1}};
	for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
		rf_graph *g = NULL;
		cr_assert_eq(rf_graph_ring(3, ok[i].D, ok[i].K, &g), RF_OK, "D=%u K=%u: %s", ok[i].D, ok[i].K,
			     rf_errmsg());
		rf_graph_destroy(g);
	}
}

/* ---- negative controls on ring graphs -------------------------------------------------------------- */

Test(graph, ring_missing_war_edge)
{
	for (unsigned D = 1; D <= 6; D++) {
		for (unsigned K = 1; K <= 3; K++) {
			if (!valid_ring(D, K))
				continue;
			size_t N = 3 * D + 4;
			for (size_t b = D; b < N; b++) {
				rf_graph *g = ring(N, D, K);
				ring_ids r;
				check_ring_nodes(g, N, D, K, &r);
				cr_assert_eq(rf_graph_remove_edge(g, r.compute[b - D], r.war[b]), RF_OK);
				clear_errmsg();
				int rc = rf_graph_validate(g);
				cr_assert_eq(rc, RF_EHAZARD, "N=%zu D=%u K=%u: WAR edge of block %zu removed, validate %d",
					     N, D, K, b, rc);
				/* With copy(b-D) and copy(b) on one queue the copies stay ordered and the missing order
				 * is compute(b-D) -> copy(b): WAR. On different queues nothing orders the two copies
				 * either, and the first violation met is the WAW one. */
				const char *want = (b % K == (b - D) % K) ? "WAR" : "WAW";
				cr_assert(strstr(rf_errmsg(), want) != NULL, "N=%zu D=%u K=%u b=%zu: want %s in \"%s\"", N, D,
					  K, b, want, rf_errmsg());
				/* and it names the copy of block b */
				char name[96];
				snprintf(name, sizeof name, "node %zu (copy b%zu", r.copy[b], b);
				cr_assert(strstr(rf_errmsg(), name) != NULL, "errmsg \"%s\" does not name %s", rf_errmsg(),
					  name);
				ring_ids_free(&r);
				rf_graph_destroy(g);
			}
		}
	}
}

Test(graph, ring_missing_war_wait_to_copy_edge)
{
	/* The other half of the WAR chain, WAIT -> copy(b), is also implied by the copy queue's order (the
	 * WAIT is the copy's queue predecessor): removing it keeps the graph valid. Removing the
	 * compute -> WAIT half as well must then be a WAR hazard. */
	size_t N = 12;
	unsigned D = 3;
	for (size_t b = D; b < N; b++) {
		rf_graph *g = ring(N, D, 1);
		ring_ids r;
		check_ring_nodes(g, N, D, 1, &r);
		cr_assert_eq(g->qprev[r.copy[b]], r.war[b], "WAR wait is not the copy's queue predecessor");
		cr_assert_eq(rf_graph_remove_edge(g, r.war[b], r.copy[b]), RF_OK);
		int rc = rf_graph_validate(g);
		cr_assert_eq(rc, RF_OK, "b=%zu: %d (%s)", b, rc, rf_errmsg());
		cr_assert_eq(rf_graph_remove_edge(g, r.compute[b - D], r.war[b]), RF_OK);
		clear_errmsg();
		cr_assert_eq(rf_graph_validate(g), RF_EHAZARD, "b=%zu", b);
		cr_assert(strstr(rf_errmsg(), "WAR") != NULL, "b=%zu: \"%s\"", b, rf_errmsg());
		ring_ids_free(&r);
		rf_graph_destroy(g);
	}
}

Test(graph, ring_missing_raw_edge)
{
	for (unsigned D = 1; D <= 6; D++) {
		for (unsigned K = 1; K <= 3; K++) {
			if (!valid_ring(D, K))
				continue;
			size_t N = 2 * D + 5;
			for (size_t b = 0; b < N; b++) {
				for (int half = 0; half < 2; half++) {
					rf_graph *g = ring(N, D, K);
					ring_ids r;
					check_ring_nodes(g, N, D, K, &r);
					if (half == 0)
						cr_assert_eq(rf_graph_remove_edge(g, r.copy[b], r.raw[b]), RF_OK);
					else
						cr_assert_eq(rf_graph_remove_edge(g, r.raw[b], r.compute[b]), RF_OK);
					clear_errmsg();
					int rc = rf_graph_validate(g);
					/* Removing wait -> compute(b) leaves queue order: copy(b) -> wait -> ... ->
					 * compute(b) still holds through queue 0's order, so that graph stays valid. */
					if (half == 1) {
						cr_assert_eq(rc, RF_OK, "N=%zu D=%u K=%u: wait->compute(%zu) is implied by queue order, got %d (%s)",
							     N, D, K, b, rc, rf_errmsg());
					} else {
						cr_assert_eq(rc, RF_EHAZARD, "N=%zu D=%u K=%u: RAW edge of block %zu removed, validate %d",
							     N, D, K, b, rc);
						cr_assert(strstr(rf_errmsg(), "RAW") != NULL, "N=%zu D=%u K=%u b=%zu: \"%s\"", N, D,
							  K, b, rf_errmsg());
						char name[96];
						snprintf(name, sizeof name, "node %zu (compute b%zu", r.compute[b], b);
						cr_assert(strstr(rf_errmsg(), name) != NULL, "errmsg \"%s\" does not name %s",
							  rf_errmsg(), name);
					}
					ring_ids_free(&r);
					rf_graph_destroy(g);
				}
			}
		}
	}
}

Test(graph, ring_back_edge_cycle)
{
	unsigned D = 2;
	size_t N = 6;
	/* compute(3) -> copy(1): copy(1) -> wait -> compute(1) -> (q0 order) -> compute(3) -> copy(1). */
	{
		rf_graph *g = ring(N, D, 1);
		ring_ids r;
		check_ring_nodes(g, N, D, 1, &r);
		edge(g, r.compute[3], r.copy[1]);
		assert_invalid(g, RF_EINVAL, "cycle");
		/* the error names a node on the cycle; every node from copy(1) to compute(3) in the
		 * effective graph is, so check the id lies in that closed range of ids */
		const char *s = strstr(rf_errmsg(), "node ");
		cr_assert_not_null(s);
		size_t id = (size_t)strtoull(s + 5, NULL, 10);
		cr_assert(id >= r.copy[1] && id <= r.compute[3], "named node %zu not on the cycle (%s)", id, rf_errmsg());
		rf_program *p = (rf_program *)(uintptr_t)0x1;
		cr_assert_eq(rf_graph_lower(g, &p), RF_EINVAL, "lowering a cyclic graph");
		cr_assert_eq(p, (rf_program *)(uintptr_t)0x1);
		/* removing the back edge restores validity */
		cr_assert_eq(rf_graph_remove_edge(g, r.compute[3], r.copy[1]), RF_OK);
		cr_assert_eq(rf_graph_validate(g), RF_OK, "%s", rf_errmsg());
		ring_ids_free(&r);
		rf_graph_destroy(g);
	}
	/* An edge from a later node to an earlier node of the same queue (compute(4) -> compute(1) on
	 * q0, copy(5) -> copy(2) on q1): queue order makes it a cycle. */
	for (int which = 0; which < 2; which++) {
		rf_graph *g = ring(N, D, 1);
		ring_ids r;
		check_ring_nodes(g, N, D, 1, &r);
		if (which == 0)
			edge(g, r.compute[4], r.compute[1]);
		else
			edge(g, r.copy[5], r.copy[2]);
		clear_errmsg();
		cr_assert_eq(rf_graph_validate(g), RF_EINVAL, "which=%d", which);
		cr_assert(strstr(rf_errmsg(), "cycle") != NULL, "\"%s\"", rf_errmsg());
		ring_ids_free(&r);
		rf_graph_destroy(g);
	}
	/* An edge from an earlier to a later node of one queue is redundant, not a cycle. */
	{
		rf_graph *g = ring(N, D, 1);
		ring_ids r;
		check_ring_nodes(g, N, D, 1, &r);
		edge(g, r.compute[1], r.compute[4]);
		edge(g, r.copy[0], r.copy[5]);
		cr_assert_eq(rf_graph_validate(g), RF_OK, "%s", rf_errmsg());
		ring_ids_free(&r);
		rf_graph_destroy(g);
	}
}

/* ---- hand-built graphs ------------------------------------------------------------------------------ */

Test(graph, hand_compute_without_copy)
{
	rf_graph *g = new_graph();
	add(g, RF_NODE_COPY, 1, 0, 0);
	add(g, RF_NODE_COMPUTE, 0, 1, 0); /* block 1 was never copied */
	edge(g, 0, 1);
	assert_invalid(g, RF_EHAZARD, "RAW");
	rf_graph_destroy(g);

	/* alone on a queue */
	g = new_graph();
	add(g, RF_NODE_COMPUTE, 0, 0, 0);
	cr_assert_eq(rf_graph_validate(g), RF_EHAZARD);
	rf_graph_destroy(g);

	/* block copied, but into another slot than the compute reads */
	g = new_graph();
	add(g, RF_NODE_COPY, 0, 0, 1);
	add(g, RF_NODE_COMPUTE, 0, 0, 0);
	assert_invalid(g, RF_EHAZARD, "RAW");
	rf_graph_destroy(g);

	/* copy and compute on two queues with no edge */
	g = new_graph();
	add(g, RF_NODE_COPY, 1, 0, 0);
	add(g, RF_NODE_COMPUTE, 0, 0, 0);
	assert_invalid(g, RF_EHAZARD, "RAW");
	/* and the edge fixes it */
	edge(g, 0, 1);
	cr_assert_eq(rf_graph_validate(g), RF_OK, "%s", rf_errmsg());
	/* compute before the copy on the same queue: RAW again */
	rf_graph_destroy(g);
	g = new_graph();
	add(g, RF_NODE_COMPUTE, 0, 0, 0);
	add(g, RF_NODE_COPY, 0, 0, 0);
	cr_assert_eq(rf_graph_validate(g), RF_EHAZARD);
	rf_graph_destroy(g);
}

Test(graph, hand_two_copies_one_slot)
{
	/* the same block copied twice into one slot, ordered on one queue */
	rf_graph *g = new_graph();
	add(g, RF_NODE_COPY, 1, 0, 0);
	add(g, RF_NODE_COPY, 1, 0, 0);
	add(g, RF_NODE_COMPUTE, 1, 0, 0);
	clear_errmsg();
	cr_assert_eq(rf_graph_validate(g), RF_EHAZARD);
	cr_assert_str_not_empty(rf_errmsg());
	rf_graph_destroy(g);

	/* two different blocks into one slot from two queues, unordered: WAW */
	g = new_graph();
	size_t c0 = add(g, RF_NODE_COPY, 1, 0, 0);
	size_t c1 = add(g, RF_NODE_COPY, 2, 1, 0);
	assert_invalid(g, RF_EHAZARD, "WAW");
	edge(g, c0, c1);
	cr_assert_eq(rf_graph_validate(g), RF_OK, "%s", rf_errmsg());
	rf_graph_destroy(g);

	/* the same block into two different slots is fine */
	g = new_graph();
	size_t a = add(g, RF_NODE_COPY, 1, 0, 0);
	size_t b = add(g, RF_NODE_COPY, 2, 0, 1);
	size_t x = add(g, RF_NODE_COMPUTE, 0, 0, 0);
	size_t y = add(g, RF_NODE_COMPUTE, 0, 0, 1);
	edge(g, a, x);
	edge(g, b, y);
	cr_assert_eq(rf_graph_validate(g), RF_OK, "%s", rf_errmsg());
	rf_graph_destroy(g);
}

Test(graph, hand_war_two_readers)
{
	/* slot 0: copy b0, read by computes on q0 and q2, then copy b1 ordered after only one reader. */
	rf_graph *g = new_graph();
	size_t cp0 = add(g, RF_NODE_COPY, 1, 0, 0);
	size_t r0 = add(g, RF_NODE_COMPUTE, 0, 0, 0);
	size_t r2 = add(g, RF_NODE_COMPUTE, 2, 0, 0);
	size_t cp1 = add(g, RF_NODE_COPY, 1, 1, 0);
	size_t r1 = add(g, RF_NODE_COMPUTE, 0, 1, 0);
	edge(g, cp0, r0);
	edge(g, cp0, r2);
	edge(g, r0, cp1);
	edge(g, cp1, r1);
	assert_invalid(g, RF_EHAZARD, "WAR");
	char name[96];
	snprintf(name, sizeof name, "node %zu (compute b0", r2);
	cr_assert(strstr(rf_errmsg(), name) != NULL, "\"%s\" does not name the unordered reader", rf_errmsg());
	edge(g, r2, cp1);
	cr_assert_eq(rf_graph_validate(g), RF_OK, "%s", rf_errmsg());
	rf_graph_destroy(g);
}

Test(graph, hand_queue_order_only)
{
	/* Two queues, no explicit edge at all: every ordering comes from queue order. */
	rf_graph *g = new_graph();
	add(g, RF_NODE_COPY, 0, 0, 0);
	add(g, RF_NODE_COPY, 1, 1, 1);
	add(g, RF_NODE_COMPUTE, 0, 0, 0);
	add(g, RF_NODE_COMPUTE, 1, 1, 1);
	add(g, RF_NODE_COPY, 0, 2, 0); /* reuses slot 0 after compute(0): ordered by queue 0 */
	add(g, RF_NODE_COMPUTE, 0, 2, 0);
	cr_assert_eq(rf_graph_edges(g), 0);
	cr_assert_eq(rf_graph_validate(g), RF_OK, "%s", rf_errmsg());

	rf_program *p = NULL;
	cr_assert_eq(rf_graph_lower(g, &p), RF_OK, "%s", rf_errmsg());
	cr_assert_eq(rf_program_queues(p), 2);
	cr_assert_eq(rf_program_count(p, RF_OP_SIGNAL), 0, "queue order needs no events");
	cr_assert_eq(rf_program_count(p, RF_OP_WAIT), 0, "queue order needs no events");
	cr_assert_eq(rf_program_ops(p, 0), 4);
	cr_assert_eq(rf_program_ops(p, 1), 2);
	static const struct {
		rf_op_kind k;
		size_t b;
	} q0[] = {{RF_OP_COPY, 0}, {RF_OP_COMPUTE, 0}, {RF_OP_COPY, 2}, {RF_OP_COMPUTE, 2}};
	for (size_t i = 0; i < 4; i++) {
		rf_op o;
		cr_assert_eq(rf_program_op(p, 0, i, &o), RF_OK);
		cr_assert(o.kind == q0[i].k && o.block == q0[i].b && o.slot == 0 && o.queue == 0, "q0 op %zu", i);
	}
	rf_program_destroy(p);
	rf_graph_destroy(g);

	/* the same graph with slot 0 reused from another queue without an edge is a WAR hazard */
	g = new_graph();
	add(g, RF_NODE_COPY, 0, 0, 0);
	add(g, RF_NODE_COMPUTE, 0, 0, 0);
	add(g, RF_NODE_COPY, 1, 2, 0);
	add(g, RF_NODE_COMPUTE, 1, 2, 0);
	cr_assert_eq(rf_graph_validate(g), RF_EHAZARD);
	rf_graph_destroy(g);
}

Test(graph, hand_non_topological_ids)
{
	/* Computes added first, their copies later on other queues: every edge goes from a higher id to a
	 * lower one. Valid, and lowering must order each copy's signal before the wait on it. */
	rf_graph *g = new_graph();
	size_t x0 = add(g, RF_NODE_COMPUTE, 0, 0, 0);
	size_t x1 = add(g, RF_NODE_COMPUTE, 0, 1, 1);
	size_t c1 = add(g, RF_NODE_COPY, 1, 1, 1);
	size_t c0 = add(g, RF_NODE_COPY, 2, 0, 0);
	edge(g, c1, x1);
	edge(g, c0, x0);
	cr_assert_eq(rf_graph_validate(g), RF_OK, "%s", rf_errmsg());

	size_t *order, *pos;
	cr_assert_eq(rf__graph_topo(g, &order, &pos), RF_OK);
	for (size_t i = 0; i < 4; i++)
		cr_assert_eq(order[pos[i]], i);
	cr_assert_lt(pos[c0], pos[x0]);
	cr_assert_lt(pos[c1], pos[x1]);
	cr_assert_lt(pos[x0], pos[x1], "queue order kept");
	free(order);
	free(pos);

	rf_program *p = NULL;
	cr_assert_eq(rf_graph_lower(g, &p), RF_OK, "%s", rf_errmsg());
	cr_assert_eq(rf_program_queues(p), 3);
	/* q0: wait q2>=1, compute b0, wait q1>=1, compute b1;  q1: copy b1, signal 1;  q2: copy b0, signal 1 */
	static const struct {
		rf_op_kind k;
		size_t b;
		unsigned wq;
		uint64_t v;
	} q0[] = {{RF_OP_WAIT, 0, 2, 1}, {RF_OP_COMPUTE, 0, 0, 0}, {RF_OP_WAIT, 0, 1, 1}, {RF_OP_COMPUTE, 1, 0, 0}};
	cr_assert_eq(rf_program_ops(p, 0), 4);
	for (size_t i = 0; i < 4; i++) {
		rf_op o;
		cr_assert_eq(rf_program_op(p, 0, i, &o), RF_OK);
		cr_assert_eq(o.kind, q0[i].k, "q0 op %zu", i);
		if (o.kind == RF_OP_WAIT)
			cr_assert(o.wait_queue == q0[i].wq && o.value == q0[i].v, "q0 op %zu: wait q%u>=%llu", i,
				  o.wait_queue, (unsigned long long)o.value);
		else
			cr_assert_eq(o.block, q0[i].b);
	}
	for (unsigned q = 1; q <= 2; q++) {
		rf_op o;
		cr_assert_eq(rf_program_ops(p, q), 2);
		cr_assert_eq(rf_program_op(p, q, 0, &o), RF_OK);
		cr_assert(o.kind == RF_OP_COPY && o.block == (q == 1 ? 1u : 0u), "q%u op 0", q);
		cr_assert_eq(rf_program_op(p, q, 1, &o), RF_OK);
		cr_assert(o.kind == RF_OP_SIGNAL && o.value == 1, "q%u op 1", q);
	}
	/* global issue order: each signal precedes the wait on it */
	struct rf_program *ip = p;
	size_t sig1 = SIZE_MAX, sig2 = SIZE_MAX, w1 = SIZE_MAX, w2 = SIZE_MAX;
	for (size_t i = 0; i < ip->nops; i++) {
		const rf__op *o = &ip->ops[i];
		if (o->kind == RF_OP_SIGNAL)
			*(o->queue == 1 ? &sig1 : &sig2) = i;
		if (o->kind == RF_OP_WAIT)
			*(o->wqueue == 1 ? &w1 : &w2) = i;
	}
	cr_assert(sig1 < w1 && sig2 < w2, "signal after its wait in the global order");
	rf_program_destroy(p);
	rf_graph_destroy(g);
}

Test(graph, hand_cycles)
{
	/* a two-node cycle across queues, with a node upstream and one downstream */
	rf_graph *g = new_graph();
	size_t up = add(g, RF_NODE_COPY, 1, 0, 0);
	size_t a = add(g, RF_NODE_WAIT, 2, 0, 0);
	size_t b = add(g, RF_NODE_WAIT, 3, 0, 0);
	size_t down = add(g, RF_NODE_COMPUTE, 0, 0, 0);
	edge(g, up, a);
	edge(g, a, b);
	edge(g, b, a);
	edge(g, b, down);
	assert_invalid(g, RF_EINVAL, "cycle");
	char na[64], nb[64];
	snprintf(na, sizeof na, "node %zu (", a);
	snprintf(nb, sizeof nb, "node %zu (", b);
	cr_assert(strstr(rf_errmsg(), na) || strstr(rf_errmsg(), nb), "\"%s\" names no node of the cycle", rf_errmsg());
	/* breaking it makes the graph valid again */
	cr_assert_eq(rf_graph_remove_edge(g, b, a), RF_OK);
	cr_assert_eq(rf_graph_validate(g), RF_OK, "%s", rf_errmsg());
	rf_graph_destroy(g);

	/* a cycle made of one explicit edge and queue order */
	g = new_graph();
	size_t w0 = add(g, RF_NODE_WAIT, 0, 0, 0);
	size_t w1 = add(g, RF_NODE_WAIT, 0, 0, 0);
	edge(g, w1, w0);
	assert_invalid(g, RF_EINVAL, "cycle");
	rf_graph_destroy(g);

	clear_errmsg();
	cr_assert_eq(rf_graph_validate(NULL), RF_EINVAL);
	cr_assert_str_not_empty(rf_errmsg());
}

/* ---- DOT --------------------------------------------------------------------------------------- */

static size_t count_substr(const char *s, const char *sub)
{
	size_t n = 0, l = strlen(sub);
	for (const char *p = strstr(s, sub); p; p = strstr(p + l, sub))
		n++;
	return n;
}

static char *dot_of(const rf_graph *g, size_t *len_out)
{
	size_t len = 0;
	clear_errmsg();
	int rc = rf_graph_dot(g, NULL, 0, &len);
	cr_assert_eq(rc, RF_ENOSPC, "sizing call: %d", rc);
	cr_assert_str_not_empty(rf_errmsg());
	cr_assert_gt(len, 1);
	/* one short: ENOSPC, same size, and nothing written past cap */
	char *buf = malloc(len + 16);
	cr_assert_not_null(buf);
	memset(buf, 'Z', len + 16);
	size_t len2 = 0;
	cr_assert_eq(rf_graph_dot(g, buf, len - 1, &len2), RF_ENOSPC);
	cr_assert_eq(len2, len);
	for (size_t i = len - 1; i < len + 16; i++)
		cr_assert_eq(buf[i], 'Z', "byte %zu written past cap %zu", i, len - 1);
	/* exact */
	len2 = 0;
	cr_assert_eq(rf_graph_dot(g, buf, len, &len2), RF_OK, "%s", rf_errmsg());
	cr_assert_eq(len2, len);
	cr_assert_eq(strlen(buf) + 1, len);
	for (size_t i = len; i < len + 16; i++)
		cr_assert_eq(buf[i], 'Z', "byte %zu written past cap %zu", i, len);
	*len_out = len;
	return buf;
}

Test(graph, dot_ring)
{
	static const struct {
		size_t N;
		unsigned D, K;
	} c[] = {{6, 3, 2}, {5, 2, 1}, {9, 4, 3}, {1, 1, 1}};
	for (size_t t = 0; t < sizeof c / sizeof c[0]; t++) {
		rf_graph *g = ring(c[t].N, c[t].D, c[t].K);
		size_t len;
		char *s = dot_of(g, &len);
		cr_assert_eq(strncmp(s, "digraph", 7), 0, "starts with \"%.20s\"", s);
		cr_assert_eq(s[len - 2], '\n');
		cr_assert_eq(s[len - 3], '}');
		unsigned nq = g->nqueues;
		cr_assert_eq(count_substr(s, "cluster_q"), nq);
		for (unsigned q = 0; q < nq; q++) {
			char cl[64];
			snprintf(cl, sizeof cl, "cluster_q%u ", q);
			cr_assert_eq(count_substr(s, cl), 1, "%s", cl);
		}
		/* one line per explicit edge, plus one dotted line per queue-order link */
		size_t arrows = count_substr(s, " -> ");
		size_t dotted = count_substr(s, "style=dotted");
		size_t links = 0;
		for (size_t i = 0; i < rf_graph_nodes(g); i++)
			links += g->qprev[i] != RF__NONE;
		cr_assert_eq(dotted, links);
		cr_assert_eq(arrows - dotted, rf_graph_edges(g), "%zu edge lines, %zu edges", arrows - dotted,
			     rf_graph_edges(g));
		/* every explicit edge has its line; WAR (compute -> wait) edges are dashed */
		for (size_t i = 0; i < rf_graph_nodes(g); i++) {
			for (uint32_t e = 0; e < g->out[i].n; e++) {
				size_t t2 = g->out[i].v[e];
				char solid[96], dashed[96];
				snprintf(solid, sizeof solid, "  n%zu -> n%zu;\n", i, t2);
				snprintf(dashed, sizeof dashed, "  n%zu -> n%zu [style=dashed", i, t2);
				size_t ns = count_substr(s, solid), nd = count_substr(s, dashed);
				cr_assert_eq(ns + nd, 1, "edge %zu -> %zu: %zu solid + %zu dashed lines", i, t2, ns, nd);
				rf_node_desc di;
				rf_graph_node(g, i, &di);
				if (di.kind == RF_NODE_COMPUTE)
					cr_assert_eq(nd, 1, "WAR edge %zu -> %zu not dashed", i, t2);
				else if (di.kind == RF_NODE_COPY)
					cr_assert_eq(ns, 1, "RAW edge %zu -> %zu not solid", i, t2);
			}
		}
		/* every node is declared once */
		for (size_t i = 0; i < rf_graph_nodes(g); i++) {
			char decl[64];
			snprintf(decl, sizeof decl, "    n%zu [label=", i);
			cr_assert_eq(count_substr(s, decl), 1, "node %zu declared %zu times", i, count_substr(s, decl));
		}
		free(s);
		rf_graph_destroy(g);
	}
}

Test(graph, dot_empty_and_args)
{
	rf_graph *g = new_graph();
	size_t len;
	char *s = dot_of(g, &len);
	cr_assert_eq(strncmp(s, "digraph", 7), 0);
	cr_assert_eq(count_substr(s, "cluster_q"), 0);
	cr_assert_eq(count_substr(s, " -> "), 0);
	free(s);

	char buf[8];
	size_t l = 0;
	clear_errmsg();
	cr_assert_eq(rf_graph_dot(NULL, buf, sizeof buf, &l), RF_EINVAL);
	cr_assert_str_not_empty(rf_errmsg());
	clear_errmsg();
	cr_assert_eq(rf_graph_dot(g, buf, sizeof buf, NULL), RF_EINVAL);
	cr_assert_str_not_empty(rf_errmsg());
	clear_errmsg();
	cr_assert_eq(rf_graph_dot(g, NULL, 5, &l), RF_EINVAL);
	cr_assert_str_not_empty(rf_errmsg());
	rf_graph_destroy(g);
}

Test(graph, dot_hand_built_queues)
{
	/* queues 0 and 5 used, 1..4 empty: a cluster for each queue that has nodes, none for the others */
	rf_graph *g = new_graph();
	size_t c = add(g, RF_NODE_COPY, 5, 0, 0);
	size_t x = add(g, RF_NODE_COMPUTE, 0, 0, 0);
	edge(g, c, x);
	size_t len;
	char *s = dot_of(g, &len);
	cr_assert_eq(count_substr(s, "cluster_q"), 2);
	cr_assert_eq(g->nqueues, 6);
	cr_assert_eq(count_substr(s, "cluster_q0 "), 1);
	cr_assert_eq(count_substr(s, "cluster_q5 "), 1);
	cr_assert_eq(count_substr(s, " -> "), 1);
	cr_assert_neq(strstr(s, "  n0 -> n1;"), NULL, "%s", s);
	free(s);
	rf_graph_destroy(g);
}

/* ---- STAGE nodes: staging slots, their hazards, the staged ring ------------------------------------- */

/* The node of `kind` for block b in a graph (the first one), or SIZE_MAX. */
static size_t node_of(const rf_graph *g, rf_node_kind kind, size_t b)
{
	for (size_t i = 0; i < rf_graph_nodes(g); i++)
		if (g->nodes[i].kind == kind && g->nodes[i].block == b)
			return i;
	return SIZE_MAX;
}

/* The explicit staged ring validates; removing one of its staging edges is caught and named: the
 * stage -> WAIT edge that orders copy(b) after stage(b) (RAW on the staging slot), the copy -> WAIT
 * edge that orders stage(b) after copy(b - S), the slot's previous reader (WAR). */
Test(graph, staged_ring_hazards_are_caught_and_named)
{
	for (unsigned D = 1; D <= 4; D++)
		for (unsigned K = 1; K <= 2; K++)
			for (unsigned P = 1; P <= 3; P++) {
				if (!valid_ring(D, K))
					continue;
				unsigned S = K * P;
				size_t N = 2 * S + D + 2;
				for (size_t b = 0; b < N; b++) {
					rf_graph *g = NULL;
					cr_assert_eq(rf__graph_ring(N, D, K, P, &g), RF_OK, "%s", rf_errmsg());
					cr_assert_eq(rf_graph_validate(g), RF_OK, "D=%u K=%u P=%u: %s", D, K, P, rf_errmsg());
					size_t st = node_of(g, RF_NODE_STAGE, b), cp = node_of(g, RF_NODE_COPY, b);
					cr_assert_eq(g->nodes[st].slot, b % S);
					/* RAW: stage(b) -> the copy queue's WAIT (the WAIT -> copy edge and queue order stay) */
					size_t w = g->out[st].v[0];
					cr_assert_eq(g->nodes[w].kind, RF_NODE_WAIT);
					cr_assert_eq(rf_graph_remove_edge(g, st, w), RF_OK);
					clear_errmsg();
					cr_assert_eq(rf_graph_validate(g), RF_EHAZARD, "D=%u K=%u P=%u b=%zu: RAW", D, K, P, b);
					char want[160], s1[96], s2[96];
					snprintf(want, sizeof want, "RAW hazard on a staging slot: %s is not ordered before %s",
						 rf__node_str(g, st, s1, sizeof s1), rf__node_str(g, cp, s2, sizeof s2));
					cr_assert_str_eq(rf_errmsg(), want);
					rf_graph_destroy(g);
					if (b < S)
						continue;
					/* WAR: copy(b - S) -> the stage queue's WAIT before stage(b) */
					cr_assert_eq(rf__graph_ring(N, D, K, P, &g), RF_OK);
					size_t prev = node_of(g, RF_NODE_COPY, b - S), ww = g->in[st].v[0];
					cr_assert_eq(rf_graph_remove_edge(g, prev, ww), RF_OK);
					clear_errmsg();
					cr_assert_eq(rf_graph_validate(g), RF_EHAZARD, "D=%u K=%u P=%u b=%zu: WAR", D, K, P, b);
					snprintf(want, sizeof want, "WAR hazard on a staging slot: %s is not ordered before %s",
						 rf__node_str(g, prev, s1, sizeof s1), rf__node_str(g, st, s2, sizeof s2));
					cr_assert_str_eq(rf_errmsg(), want);
					rf_graph_destroy(g);
				}
			}
}

/* By hand: WAW between two stages into one staging slot, a block staged twice, and the copy of an
 * unstaged block reading no staging slot at all. */
Test(graph, stage_waw_and_double_stage)
{
	rf_graph *g = new_graph();
	size_t s0 = add(g, RF_NODE_STAGE, 2, 0, 0), c0 = add(g, RF_NODE_COPY, 1, 0, 0);
	size_t s1 = add(g, RF_NODE_STAGE, 3, 1, 0), c1 = add(g, RF_NODE_COPY, 1, 1, 1);
	edge(g, s0, c0);
	edge(g, s1, c1);
	edge(g, c0, s1); /* WAR: orders the stages too */
	cr_assert_eq(rf_graph_validate(g), RF_OK, "%s", rf_errmsg());
	cr_assert_eq(rf_graph_remove_edge(g, c0, s1), RF_OK);
	clear_errmsg();
	cr_assert_eq(rf_graph_validate(g), RF_EHAZARD);
	cr_assert(strstr(rf_errmsg(), "WAW hazard on a staging slot") != NULL, "%s", rf_errmsg());
	edge(g, s0, s1); /* ordered writes, but copy(b0) may still read after stage(b1) */
	clear_errmsg();
	cr_assert_eq(rf_graph_validate(g), RF_EHAZARD);
	cr_assert(strstr(rf_errmsg(), "WAR hazard on a staging slot") != NULL, "%s", rf_errmsg());
	rf_graph_destroy(g);

	g = new_graph();
	size_t a = add(g, RF_NODE_STAGE, 2, 5, 0), b = add(g, RF_NODE_STAGE, 2, 5, 1), c = add(g, RF_NODE_COPY, 1, 5, 0);
	edge(g, b, c);
	clear_errmsg();
	cr_assert_eq(rf_graph_validate(g), RF_EHAZARD);
	char s[96], t[96], want[256];
	snprintf(want, sizeof want, "stage hazard: %s and %s stage the same block", rf__node_str(g, a, s, sizeof s),
		 rf__node_str(g, b, t, sizeof t));
	cr_assert(strncmp(rf_errmsg(), want, strlen(want)) == 0, "%s", rf_errmsg());
	cr_assert_eq(rf_graph_lower(g, &(rf_program *){NULL}), RF_EHAZARD);
	rf_graph_destroy(g);

	/* staging slots are their own namespace: a stage into t0 and a copy into s0 of other blocks do not
	 * meet */
	g = new_graph();
	size_t x = add(g, RF_NODE_STAGE, 2, 0, 0), y = add(g, RF_NODE_COPY, 1, 0, 0), z = add(g, RF_NODE_COPY, 1, 1, 1);
	edge(g, x, y);
	(void)z;
	cr_assert_eq(rf_graph_validate(g), RF_OK, "%s", rf_errmsg());
	cr_assert_eq(g->nslots, 2);
	cr_assert_eq(g->nstage, 1);
	rf_node_desc d;
	cr_assert_eq(rf_graph_node(g, x, &d), RF_OK);
	cr_assert(d.kind == RF_NODE_STAGE && d.queue == 2 && d.block == 0 && d.slot == 0);
	char name[96];
	cr_assert_str_eq(rf__node_str(g, x, name, sizeof name), "node 0 (stage b0 t0 on q2)");
	rf_graph_destroy(g);
}

/* DOT: stages are drawn as such, and the staging slot's WAR edges (copy -> the WAIT before a stage)
 * are dashed like the ring's. */
Test(graph, dot_staged_ring)
{
	rf_graph *g = NULL;
	cr_assert_eq(rf__graph_ring(7, 2, 1, 2, &g), RF_OK);
	size_t len;
	char *s = dot_of(g, &len);
	cr_assert_eq(count_substr(s, "label=\"stage b"), 7, "%s", s);
	size_t war = 0;
	for (size_t i = 0; i < rf_graph_nodes(g); i++)
		for (uint32_t e = 0; e < g->out[i].n; e++) {
			size_t t = g->out[i].v[e];
			char dashed[96];
			snprintf(dashed, sizeof dashed, "  n%zu -> n%zu [style=dashed", i, t);
			int is_war = g->nodes[i].kind == RF_NODE_COPY && g->nodes[t].kind == RF_NODE_WAIT &&
				     g->nodes[g->out[t].v[0]].kind == RF_NODE_STAGE;
			cr_assert_eq(count_substr(s, dashed), (size_t)(is_war || g->nodes[i].kind == RF_NODE_COMPUTE),
				     "edge %zu -> %zu", i, t);
			war += is_war;
		}
	cr_assert_eq(war, 7 - 2, "one staging WAR edge per block past the staging slots");
	free(s);
	rf_graph_destroy(g);
}
