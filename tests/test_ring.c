/* tests/test_ring.c — the ring schedule is written once, in the plan (rf_plan_ring): the ring graph and
 * the ring's periodic program are derived from its steps. These suites tie the derivations down:
 *  - rf_graph_ring makes, step by step, the nodes and edges of the plan (WAR waits made explicit);
 *  - rf__ring_program's template equals, field by field, the hand-written template the library had
 *    before it was derived (kept here as the reference), for every depth and copy-queue count tried.
 * (test_lower checks that the template, expanded, equals the generic lowering of the ring graph.) */
#include <criterion/criterion.h>

#include "ringfetch.h"
#include "graph/program.h"
#include "graph_support.h"

#include <stdint.h>
#include <stdlib.h>

/* ---- the graph follows the plan --------------------------------------------------------------------- */

static rf_node_desc node(const rf_graph *g, size_t id)
{
	rf_node_desc d;
	cr_assert_eq(rf_graph_node(g, id, &d), RF_OK, "node %zu", id);
	return d;
}

static void expect_node(const rf_graph *g, size_t id, rf_node_kind kind, unsigned queue, size_t block, unsigned slot)
{
	rf_node_desc d = node(g, id);
	cr_assert(d.kind == kind && d.queue == queue, "node %zu: kind %d q%u, want kind %d q%u", id, (int)d.kind,
		  d.queue, (int)kind, queue);
	if (kind != RF_NODE_WAIT)
		cr_assert(d.block == block && d.slot == slot, "node %zu: b%zu s%u, want b%zu s%u", id, d.block, d.slot,
			  block, slot);
}

static void check_graph_follows_plan(size_t N, unsigned D, unsigned K)
{
	size_t len = 0;
	rf_step *steps = malloc((3 * N + 1) * sizeof *steps);
	cr_assert_eq(rf_plan_ring(N, D, steps, 3 * N, &len), RF_OK);
	rf_graph *g = ring(N, D, K);
	size_t *copy_of = malloc((N + 1) * sizeof *copy_of), *compute_of = malloc((N + 1) * sizeof *compute_of);
	size_t id = 0, edges = 0, await = SIZE_MAX;
	for (size_t i = 0; i < len; i++) {
		const rf_step *s = &steps[i];
		unsigned cq = 1 + (unsigned)(s->block % K);
		if (s->kind == RF_STEP_PREFETCH) {
			if (s->block >= D) { /* WAR: the previous reader of the slot, then the copy */
				expect_node(g, id, RF_NODE_WAIT, cq, 0, 0);
				cr_assert(rf_graph_has_edge(g, compute_of[s->block - D], id), "N=%zu D=%u K=%u: WAR of b%zu", N,
					  D, K, s->block);
				cr_assert(rf_graph_has_edge(g, id, id + 1));
				id++, edges += 2;
			}
			expect_node(g, id, RF_NODE_COPY, cq, s->block, s->slot);
			copy_of[s->block] = id++;
		} else if (s->kind == RF_STEP_AWAIT) {
			expect_node(g, id, RF_NODE_WAIT, 0, 0, 0);
			cr_assert(rf_graph_has_edge(g, copy_of[s->block], id), "RAW of b%zu", s->block);
			await = id++, edges++;
		} else {
			expect_node(g, id, RF_NODE_COMPUTE, 0, s->block, s->slot);
			cr_assert(rf_graph_has_edge(g, await, id));
			compute_of[s->block] = id++, edges++;
		}
	}
	cr_assert_eq(rf_graph_nodes(g), id, "N=%zu D=%u K=%u: %zu nodes, %zu from the plan", N, D, K,
		     rf_graph_nodes(g), id);
	cr_assert_eq(rf_graph_edges(g), edges, "N=%zu D=%u K=%u", N, D, K);
	free(copy_of);
	free(compute_of);
	free(steps);
	rf_graph_destroy(g);
}

Test(ring, graph_follows_plan)
{
	static const size_t ns[] = {0, 1, 2, 3, 5, 8, 17, 40};
	for (unsigned D = 1; D <= 9; D++)
		for (unsigned K = 1; K <= 4; K++)
			if (valid_ring(D, K))
				for (size_t i = 0; i < sizeof ns / sizeof ns[0]; i++)
					check_graph_follows_plan(ns[i], D, K);
	check_graph_follows_plan(300, 64, 63);
}

/* ---- the template equals the hand-written one ---------------------------------------------------------- */

typedef struct ref_op {
	uint8_t kind, queue, wqueue;
	uint32_t slot;
	int64_t block, aux, value;
	size_t node;
} ref_op;

/* The template as it was written by hand: one iteration = K blocks n = j (j = 0..K-1), each
 * [WAR wait] copy(n+D-1) signal; RAW wait, compute(n), signal, values "block + 1". */
static size_t reference_template(unsigned D, unsigned K, ref_op *out)
{
	size_t k = 0;
	int64_t d = D;
	for (unsigned j = 0; j < K; j++) {
		int64_t n = j, b = n + d - 1;
		uint8_t cq = (uint8_t)(1 + (unsigned)((b % K + K) % K)), nq = (uint8_t)(1 + j % K);
		uint32_t bslot = (uint32_t)(((b % d) + d) % d), nslot = (uint32_t)(n % d);
		size_t id = k;
		out[k++] = (ref_op){.kind = RF_OP_WAIT, .queue = cq, .block = b, .aux = b - d, .value = b - d + 1, .node = id};
		out[k++] = (ref_op){.kind = RF_OP_COPY, .queue = cq, .slot = bslot, .block = b, .aux = b, .node = id};
		out[k++] = (ref_op){.kind = RF_OP_SIGNAL, .queue = cq, .block = b, .aux = b, .value = b + 1, .node = id};
		out[k++] = (ref_op){.kind = RF_OP_WAIT, .wqueue = nq, .block = n, .aux = n, .value = n + 1, .node = id};
		out[k++] = (ref_op){.kind = RF_OP_COMPUTE, .slot = nslot, .block = n, .aux = n, .node = id};
		out[k++] = (ref_op){.kind = RF_OP_SIGNAL, .block = n, .aux = n + d, .value = n + 1, .node = id};
	}
	return k;
}

static void check_template(unsigned D, unsigned K)
{
	struct rf_program *p = NULL;
	cr_assert_eq(rf__ring_program(D, K, 0, &p), RF_OK, "D=%u K=%u: %s", D, K, rf_errmsg());
	ref_op *want = malloc(6 * (size_t)K * sizeof *want);
	size_t n = reference_template(D, K, want);
	cr_assert_eq(p->nops, n, "D=%u K=%u: %zu ops, want %zu", D, K, p->nops, n);
	for (size_t i = 0; i < n; i++) {
		const rf__op *o = &p->ops[i];
		const ref_op *w = &want[i];
		cr_assert(o->kind == w->kind && o->queue == w->queue && o->wqueue == w->wqueue && o->slot == w->slot &&
				  o->block == w->block && o->aux == w->aux && o->value == w->value && o->node == w->node,
			  "D=%u K=%u op %zu: kind %u q%u wq%u s%u b%lld a%lld v%lld n%zu, want kind %u q%u wq%u s%u b%lld "
			  "a%lld v%lld n%zu",
			  D, K, i, o->kind, o->queue, o->wqueue, o->slot, (long long)o->block, (long long)o->aux,
			  (long long)o->value, o->node, w->kind, w->queue, w->wqueue, w->slot, (long long)w->block,
			  (long long)w->aux, (long long)w->value, w->node);
	}
	cr_assert(p->nqueues == 1 + K && p->nslots == D && p->period == K && p->nblocks_min == 0);
	cr_assert_eq(p->iter_begin, -(int64_t)((D + K - 2) / K), "D=%u K=%u", D, K);
	free(want);
	rf_program_destroy(p);
}

Test(ring, template_equals_hand_written)
{
	for (unsigned D = 1; D <= 24; D++)
		for (unsigned K = 1; K <= 8; K++)
			if (valid_ring(D, K))
				check_template(D, K);
	check_template(64, 63);
	check_template(RF_MAX_DEPTH, 1);
	check_template(RF_MAX_DEPTH, RF_MAX_QUEUES - 1);
}

Test(ring, template_rejects_what_callers_check)
{
	struct rf_program *p = NULL;
	cr_assert_eq(rf__ring_program(0, 1, 0, &p), RF_EINVAL);
	cr_assert_eq(rf__ring_program(2, 0, 0, &p), RF_EINVAL);
	cr_assert_eq(rf__ring_program(2, RF_MAX_QUEUES, 0, &p), RF_EINVAL);
	cr_assert_eq(rf__ring_program(40, RF_MAX_QUEUES / 2, 1, &p), RF_EINVAL, "1 + 2 K queues staged");
	cr_assert_eq(rf__ring_program(2, 1, RF_MAX_SLOTS + 1, &p), RF_EINVAL);
	cr_assert_null(p);
}
