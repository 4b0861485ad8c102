/* tests/test_lower.c — lowering graphs to per-queue programs of copy / compute / signal / wait ops.
 *
 *  - ring graphs: the exact op list of every queue, derived from the rules in <ringfetch/graph.h>;
 *  - seeded random graphs (built in a non-topological id order too): the program equals an independent
 *    reference model of the rules, and every rule is checked on its own (no self waits, increasing
 *    wait values, signal values 1, 2, 3..., every wait after its signal in the global issue order,
 *    every cross-queue edge covered by a wait);
 *  - the periodic ring program (rf__ring_program), expanded, equals the generic lowering of the
 *    explicit ring graph — plain and staged (two-hop: stage, copy, compute), staging slots included;
 *  - STAGE nodes: their ops, the staging slot a staged block's copy reads;
 *  - reading and printing programs. */
#include <criterion/criterion.h>

#include "ringfetch.h"
#include "graph/graph_int.h"
#include "graph/program.h"
#include "base/error.h"
#include "graph_support.h"
#include "rng.h"

#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- helpers ----------------------------------------------------------------------------------- */

static const char *op_name(rf_op_kind k)
{
	switch (k) {
	case RF_OP_COPY:
		return "copy";
	case RF_OP_COMPUTE:
		return "compute";
	case RF_OP_SIGNAL:
		return "signal";
	case RF_OP_WAIT:
		return "wait";
	case RF_OP_STAGE:
		return "stage";
	}
	return "?";
}

static rf_program *lower(const rf_graph *g)
{
	rf_program *p = NULL;
	int rc = rf_graph_lower(g, &p);
	cr_assert_eq(rc, RF_OK, "lower: %d (%s)", rc, rf_errmsg());
	cr_assert_not_null(p);
	return p;
}

static rf_op get_op(const rf_program *p, unsigned q, size_t i)
{
	rf_op o;
	memset(&o, 0xa5, sizeof o);
	int rc = rf_program_op(p, q, i, &o);
	cr_assert_eq(rc, RF_OK, "op %zu of q%u: %d", i, q, rc);
	cr_assert_eq(o.queue, q, "op %zu of q%u reports queue %u", i, q, o.queue);
	return o;
}

/* Context printed with every failure of a shared checker (seed of a random graph, ring parameters). */
static char ctx[128];

/* ---- the generic rule checker --------------------------------------------------------------------- */

/*
 * Check a lowered program against its graph, rule by rule:
 *  1. no op waits on its own queue;
 *  2. on each queue, the values waited on one foreign queue strictly increase;
 *  3. the signal values of each queue are 1, 2, 3, ... in order;
 *  4. every wait value is a value its queue signals, and that signal comes before the wait in the
 *     program's global issue order (struct rf_program ops[]);
 *  5. a node signals exactly once if it has a consumer on another queue, else never;
 *  6. per queue, ops appear in the global order in queue order, and the non-event ops are the queue's
 *     COPY / COMPUTE nodes in addition order;
 *  7. every cross-queue edge u -> v is covered: by the time v runs, v's queue has waited on u's queue
 *     for a value >= u's signal.
 */
static void check_rules(const rf_graph *g, const rf_program *p)
{
	const struct rf_program *ip = p;
	size_t n = rf_graph_nodes(g);
	unsigned nq = rf_program_queues(p);
	cr_assert_eq(nq, g->nqueues, "%s: %u queues, graph uses %u", ctx, nq, g->nqueues);
	cr_assert_eq(ip->period, 0, "%s", ctx);
	cr_assert_eq(ip->nslots, g->nslots, "%s", ctx);
	cr_assert_eq(ip->nblocks_min, g->nblocks, "%s", ctx);

	rf_node_desc *nd = malloc((n ? n : 1) * sizeof *nd);
	uint64_t *sig = calloc(n ? n : 1, sizeof *sig);      /* value node i signals, 0 = none */
	size_t *sig_at = malloc((n ? n : 1) * sizeof *sig_at); /* global index of that signal */
	cr_assert(nd && sig && sig_at);
	for (size_t i = 0; i < n; i++) {
		cr_assert_eq(rf_graph_node(g, i, &nd[i]), RF_OK);
		sig_at[i] = SIZE_MAX;
	}

	/* global order: index of each queue op in ops[]; per-queue ops in queue order have increasing index */
	size_t total = 0;
	for (unsigned q = 0; q < nq; q++) {
		size_t m = rf_program_ops(p, q);
		total += m;
		size_t prev = 0;
		for (size_t i = 0; i < m; i++) {
			size_t gi = ip->qidx[ip->qstart[q] + i];
			cr_assert_lt(gi, ip->nops, "%s", ctx);
			cr_assert_eq(ip->ops[gi].queue, q, "%s", ctx);
			if (i > 0)
				cr_assert_gt(gi, prev, "%s: q%u ops %zu and %zu out of global order", ctx, q, i - 1, i);
			prev = gi;
		}
	}
	cr_assert_eq(total, ip->nops, "%s: per-queue ops %zu, global %zu", ctx, total, ip->nops);

	/* signals: rules 3 and 5 (count) */
	for (unsigned q = 0; q < nq; q++) {
		uint64_t next = 1;
		for (size_t i = 0; i < rf_program_ops(p, q); i++) {
			rf_op o = get_op(p, q, i);
			if (o.kind != RF_OP_SIGNAL)
				continue;
			cr_assert_eq(o.value, next, "%s: q%u op %zu signals %" PRIu64 ", want %" PRIu64, ctx, q, i, o.value,
				     next);
			next++;
			cr_assert_lt(o.node, n, "%s", ctx);
			cr_assert_eq(nd[o.node].queue, q, "%s: q%u signals for node %zu of q%u", ctx, q, o.node,
				     nd[o.node].queue);
			cr_assert_eq(sig[o.node], 0, "%s: node %zu signals twice", ctx, o.node);
			sig[o.node] = o.value;
			sig_at[o.node] = ip->qidx[ip->qstart[q] + i];
		}
	}
	for (size_t i = 0; i < n; i++) {
		int foreign = 0;
		for (size_t j = 0; j < n; j++)
			if (j != i && nd[j].queue != nd[i].queue && rf_graph_has_edge(g, i, j))
				foreign = 1;
		cr_assert_eq(sig[i] != 0, foreign, "%s: node %zu %s but %s foreign consumer", ctx, i,
			     sig[i] ? "signals" : "does not signal", foreign ? "has a" : "has no");
	}

	/* waits: rules 1, 2, 4; walk each queue's nodes in addition order alongside its ops (rules 6, 7) */
	for (unsigned q = 0; q < nq; q++) {
		uint64_t waited[RF_MAX_QUEUES] = {0};
		size_t m = rf_program_ops(p, q), i = 0;
		for (size_t v = 0; v < n; v++) {
			if (nd[v].queue != q)
				continue;
			/* ops of node v: waits, then its copy / compute, then its signal */
			while (i < m) {
				rf_op o = get_op(p, q, i);
				if (o.kind != RF_OP_WAIT)
					break;
				if (o.node != v)
					break;
				cr_assert_neq(o.wait_queue, q, "%s: q%u op %zu waits on its own queue", ctx, q, i);
				cr_assert_lt(o.wait_queue, nq, "%s", ctx);
				cr_assert_gt(o.value, waited[o.wait_queue],
					     "%s: q%u op %zu waits q%u>=%" PRIu64 " after waiting >=%" PRIu64, ctx, q, i,
					     o.wait_queue, o.value, waited[o.wait_queue]);
				waited[o.wait_queue] = o.value;
				/* rule 4: some node of the waited queue signals this value, earlier in global order */
				size_t gi = ip->qidx[ip->qstart[q] + i], found = SIZE_MAX;
				for (size_t u = 0; u < n; u++)
					if (nd[u].queue == o.wait_queue && sig[u] == o.value)
						found = u;
				cr_assert_neq(found, SIZE_MAX, "%s: q%u op %zu waits q%u>=%" PRIu64 ", never signalled", ctx,
					      q, i, o.wait_queue, o.value);
				cr_assert_lt(sig_at[found], gi, "%s: q%u op %zu (global %zu) waits before its signal (global %zu)",
					     ctx, q, i, gi, sig_at[found]);
				i++;
			}
			if (nd[v].kind != RF_NODE_WAIT) {
				cr_assert_lt(i, m, "%s: q%u ends before node %zu", ctx, q, v);
				rf_op o = get_op(p, q, i);
				rf_op_kind want = nd[v].kind == RF_NODE_COPY ? RF_OP_COPY : RF_OP_COMPUTE;
				cr_assert(o.kind == want && o.node == v && o.block == nd[v].block && o.slot == nd[v].slot,
					  "%s: q%u op %zu is %s node %zu b%zu s%u, want %s node %zu b%zu s%u", ctx, q, i,
					  op_name(o.kind), o.node, o.block, o.slot, op_name(want), v, nd[v].block, nd[v].slot);
				i++;
			}
			if (sig[v]) {
				cr_assert_lt(i, m, "%s", ctx);
				rf_op o = get_op(p, q, i);
				cr_assert(o.kind == RF_OP_SIGNAL && o.node == v, "%s: q%u op %zu: signal of node %zu misplaced",
					  ctx, q, i, v);
				i++;
			}
			/* rule 7: every cross-queue predecessor is covered by the waits so far */
			for (size_t u = 0; u < n; u++) {
				if (nd[u].queue == q || !rf_graph_has_edge(g, u, v))
					continue;
				cr_assert_geq(waited[nd[u].queue], sig[u],
					      "%s: edge %zu (q%u) -> %zu (q%u) not covered: waited %" PRIu64 ", signal %" PRIu64,
					      ctx, u, nd[u].queue, v, q, waited[nd[u].queue], sig[u]);
			}
		}
		cr_assert_eq(i, m, "%s: q%u has %zu ops, only %zu belong to its nodes", ctx, q, m, i);
	}
	free(nd);
	free(sig);
	free(sig_at);
}

/*
 * An independent model of the rules: signal values are numbered per queue in queue order over the
 * nodes with a foreign consumer; before each node, for each foreign queue in ascending order, wait for
 * the largest signal among its predecessors there unless the queue already waited for that much.
 * Compare, op by op, with the program (the waits before one node compared as a set).
 */
static int cmp_wait(const void *a, const void *b)
{
	const rf_op *x = a, *y = b;
	return (x->wait_queue > y->wait_queue) - (x->wait_queue < y->wait_queue);
}

static void check_reference(const rf_graph *g, const rf_program *p)
{
	size_t n = rf_graph_nodes(g);
	unsigned nq = g->nqueues;
	rf_node_desc *nd = malloc((n ? n : 1) * sizeof *nd);
	uint64_t *sig = calloc(n ? n : 1, sizeof *sig);
	cr_assert(nd && sig);
	for (size_t i = 0; i < n; i++)
		cr_assert_eq(rf_graph_node(g, i, &nd[i]), RF_OK);
	uint64_t next[RF_MAX_QUEUES];
	for (unsigned q = 0; q < RF_MAX_QUEUES; q++)
		next[q] = 1;
	for (size_t i = 0; i < n; i++) /* ids increase along each queue: this is queue order */
		for (size_t j = 0; j < n; j++)
			if (nd[j].queue != nd[i].queue && rf_graph_has_edge(g, i, j)) {
				sig[i] = next[nd[i].queue]++;
				break;
			}
	for (unsigned q = 0; q < nq; q++) {
		size_t cap = 4 * n + 8, k = 0;
		rf_op *want = calloc(cap, sizeof *want);
		cr_assert_not_null(want);
		uint64_t waited[RF_MAX_QUEUES] = {0};
		for (size_t v = 0; v < n; v++) {
			if (nd[v].queue != q)
				continue;
			uint64_t need[RF_MAX_QUEUES] = {0};
			for (size_t u = 0; u < n; u++)
				if (nd[u].queue != q && rf_graph_has_edge(g, u, v) && sig[u] > need[nd[u].queue])
					need[nd[u].queue] = sig[u];
			for (unsigned wq = 0; wq < RF_MAX_QUEUES; wq++) {
				if (need[wq] <= waited[wq])
					continue;
				waited[wq] = need[wq];
				rf_op o = {RF_OP_WAIT, q, v, 0, 0, wq, need[wq]};
				cr_assert_lt(k, cap);
				want[k++] = o;
			}
			if (nd[v].kind != RF_NODE_WAIT) {
				rf_op o = {nd[v].kind == RF_NODE_COPY ? RF_OP_COPY : RF_OP_COMPUTE, q, v, nd[v].block, nd[v].slot,
					   0, 0};
				cr_assert_lt(k, cap);
				want[k++] = o;
			}
			if (sig[v]) {
				rf_op o = {RF_OP_SIGNAL, q, v, 0, 0, 0, sig[v]};
				cr_assert_lt(k, cap);
				want[k++] = o;
			}
		}
		size_t m = rf_program_ops(p, q);
		cr_assert_eq(m, k, "%s: q%u has %zu ops, the model %zu", ctx, q, m, k);
		rf_op *got = calloc(m ? m : 1, sizeof *got);
		cr_assert_not_null(got);
		for (size_t i = 0; i < m; i++)
			got[i] = get_op(p, q, i);
		/* sort each run of waits before one node by waited queue */
		for (size_t i = 0, j; i < m; i = j) {
			for (j = i; j < m && got[j].kind == RF_OP_WAIT && got[j].node == got[i].node; j++)
				;
			if (j == i)
				j = i + 1;
			else
				qsort(got + i, j - i, sizeof *got, cmp_wait);
		}
		for (size_t i = 0; i < m; i++) {
			const rf_op *a = &got[i], *b = &want[i];
			int same = a->kind == b->kind && a->queue == b->queue && a->node == b->node;
			if (a->kind == RF_OP_COPY || a->kind == RF_OP_COMPUTE)
				same = same && a->block == b->block && a->slot == b->slot;
			if (a->kind == RF_OP_WAIT)
				same = same && a->wait_queue == b->wait_queue;
			if (a->kind == RF_OP_WAIT || a->kind == RF_OP_SIGNAL)
				same = same && a->value == b->value;
			cr_assert(same,
				  "%s: q%u op %zu: got %s node %zu b%zu s%u wq%u v%" PRIu64 ", model %s node %zu b%zu s%u wq%u v%" PRIu64,
				  ctx, q, i, op_name(a->kind), a->node, a->block, a->slot, a->wait_queue, a->value,
				  op_name(b->kind), b->node, b->block, b->slot, b->wait_queue, b->value);
		}
		free(got);
		free(want);
	}
	free(nd);
	free(sig);
}

/* ---- ring graphs ----------------------------------------------------------------------------------- */

/*
 * The exact program of ring(N, D, K), from the rules:
 *   q0, for n = 0..N-1: WAIT(q 1+n%K >= n/K+1)  COMPUTE(n, n%D)  [SIGNAL n+1 if n+D < N: compute(n)
 *       has a WAR consumer, the copy of n+D]
 *   q 1+j, for its blocks b = j, j+K, ...: [WAIT(q0 >= b-D+1) if b >= D]  COPY(b, b%D)  SIGNAL(b/K+1)
 *       (every copy has its RAW consumer on q0).
 */
static void check_ring_program(size_t N, unsigned D, unsigned K)
{
	snprintf(ctx, sizeof ctx, "ring N=%zu D=%u K=%u", N, D, K);
	rf_graph *g = ring(N, D, K);
	rf_program *p = lower(g);
	size_t war = N > D ? N - D : 0;
	unsigned nq = N == 0 ? 0 : 1 + (unsigned)(N < K ? N : K);
	cr_assert_eq(rf_program_queues(p), nq, "%s: %u queues", ctx, rf_program_queues(p));
	cr_assert_eq(rf_program_count(p, RF_OP_COPY), N, "%s", ctx);
	cr_assert_eq(rf_program_count(p, RF_OP_COMPUTE), N, "%s", ctx);
	cr_assert_eq(rf_program_count(p, RF_OP_SIGNAL), N + war, "%s: %zu signals", ctx,
		     rf_program_count(p, RF_OP_SIGNAL));
	cr_assert_eq(rf_program_count(p, RF_OP_WAIT), N + war, "%s: %zu waits", ctx, rf_program_count(p, RF_OP_WAIT));

	/* queue 0 */
	if (N > 0) {
		cr_assert_eq(rf_program_ops(p, 0), 2 * N + war, "%s", ctx);
		size_t i = 0, q0_signals = 0;
		for (size_t b = 0; b < N; b++) {
			rf_op o = get_op(p, 0, i++);
			cr_assert(o.kind == RF_OP_WAIT && o.wait_queue == 1 + b % K && o.value == b / K + 1,
				  "%s: q0 before compute %zu: %s wq%u v%" PRIu64, ctx, b, op_name(o.kind), o.wait_queue, o.value);
			o = get_op(p, 0, i++);
			cr_assert(o.kind == RF_OP_COMPUTE && o.block == b && o.slot == b % D, "%s: q0 compute %zu: %s b%zu s%u",
				  ctx, b, op_name(o.kind), o.block, o.slot);
			if (b + D < N) {
				o = get_op(p, 0, i++);
				cr_assert(o.kind == RF_OP_SIGNAL && o.value == b + 1, "%s: q0 signal after compute %zu", ctx, b);
				q0_signals++;
			}
		}
		cr_assert_eq(i, rf_program_ops(p, 0));
		cr_assert_eq(q0_signals, war);
	}
	/* copy queues */
	for (unsigned j = 0; j < K && j < N; j++) {
		unsigned q = 1 + j;
		size_t i = 0, copies = 0;
		for (size_t b = j; b < N; b += K) {
			rf_op o;
			if (b >= D) {
				o = get_op(p, q, i++);
				cr_assert(o.kind == RF_OP_WAIT && o.wait_queue == 0 && o.value == b - D + 1,
					  "%s: q%u WAR wait before copy %zu: %s wq%u v%" PRIu64, ctx, q, b, op_name(o.kind),
					  o.wait_queue, o.value);
			}
			o = get_op(p, q, i++);
			cr_assert(o.kind == RF_OP_COPY && o.block == b && o.slot == b % D, "%s: q%u copy %zu: %s b%zu s%u", ctx,
				  q, b, op_name(o.kind), o.block, o.slot);
			o = get_op(p, q, i++);
			cr_assert(o.kind == RF_OP_SIGNAL && o.value == b / K + 1, "%s: q%u signal after copy %zu: %s v%" PRIu64,
				  ctx, q, b, op_name(o.kind), o.value);
			copies++;
		}
		cr_assert_eq(i, rf_program_ops(p, q), "%s: q%u", ctx, q);
	}
	cr_assert_eq(rf_program_ops(p, nq), 0, "queue past the last has ops");
	check_rules(g, p);
	rf_program_destroy(p);
	rf_graph_destroy(g);
}

Test(lower, ring_programs_exact)
{
	static const size_t ns[] = {0, 1, 2, 3, 4, 5, 6, 7, 9, 16, 17, 25, 40};
	for (unsigned D = 1; D <= 16; D++)
		for (unsigned K = 1; K <= 3; K++)
			if (valid_ring(D, K))
				for (size_t i = 0; i < sizeof ns / sizeof ns[0]; i++)
					check_ring_program(ns[i], D, K);
}

Test(lower, ring_event_counts_per_block)
{
	/* The benchmark's figure: depth >= 2, one copy queue, N >= depth: N copy signals, N - depth compute
	 * signals, N RAW waits, N - depth WAR waits. */
	for (unsigned D = 2; D <= 8; D++) {
		for (size_t N = D; N <= D + 20; N++) {
			rf_graph *g = ring(N, D, 1);
			rf_program *p = lower(g);
			size_t s0 = 0, s1 = 0, w0 = 0, w1 = 0;
			for (unsigned q = 0; q < 2; q++)
				for (size_t i = 0; i < rf_program_ops(p, q); i++) {
					rf_op o = get_op(p, q, i);
					if (o.kind == RF_OP_SIGNAL)
						*(q ? &s1 : &s0) += 1;
					if (o.kind == RF_OP_WAIT)
						*(q ? &w1 : &w0) += 1;
				}
			cr_assert_eq(s1, N, "D=%u N=%zu: copy signals %zu", D, N, s1);
			cr_assert_eq(s0, N - D, "D=%u N=%zu: compute signals %zu", D, N, s0);
			cr_assert_eq(w0, N, "D=%u N=%zu: RAW waits %zu", D, N, w0);
			cr_assert_eq(w1, N - D, "D=%u N=%zu: WAR waits %zu", D, N, w1);
			rf_program_destroy(p);
			rf_graph_destroy(g);
		}
	}
	/* depth 1: every block but the last is a WAR producer */
	rf_graph *g = ring(10, 1, 1);
	rf_program *p = lower(g);
	cr_assert_eq(rf_program_count(p, RF_OP_SIGNAL), 10 + 9);
	cr_assert_eq(rf_program_count(p, RF_OP_WAIT), 10 + 9);
	rf_program_destroy(p);
	rf_graph_destroy(g);
}

Test(lower, ring_big_many_queues)
{
	check_ring_program(200, 64, 63);
	check_ring_program(300, 9, 8);
	check_ring_program(1030, RF_MAX_DEPTH, 1);
}

/* ---- random graphs ---------------------------------------------------------------------------------- */

static uint64_t rng_state;

static uint32_t rnd(uint32_t bound)
{
	return (uint32_t)rng_below(&rng_state, bound);
}

/*
 * A random valid graph: a logical sequence of nodes (copies of distinct blocks into distinct slots,
 * computes of copied blocks with an edge from their copy, WAIT nodes) on random queues, extra random
 * forward edges, then the nodes added in a random interleaving of the queues (queue order kept, so
 * cross-queue edges often go from a higher id to a lower one).
 */
static rf_graph *random_graph(uint64_t seed, int interleave)
{
	rng_state = seed * 0x9e3779b97f4a7c15ull + 1;
	unsigned nq = 1 + rnd(6);
	size_t L = 1 + rnd(40);
	unsigned nblocks = 1 + rnd(12);
	rf_node_desc *desc = calloc(L, sizeof *desc);
	size_t *copy_of = malloc(nblocks * sizeof *copy_of); /* logical index of block b's copy, or SIZE_MAX */
	size_t (*edges)[2] = malloc(8 * L * sizeof *edges);
	size_t ne = 0;
	cr_assert(desc && copy_of && edges);
	for (unsigned b = 0; b < nblocks; b++)
		copy_of[b] = SIZE_MAX;
	unsigned ncopied = 0;
	for (size_t i = 0; i < L; i++) {
		unsigned r = rnd(10);
		desc[i].queue = rnd(nq);
		if (r < 4 && ncopied < nblocks) {
			unsigned b;
			do
				b = rnd(nblocks);
			while (copy_of[b] != SIZE_MAX);
			desc[i].kind = RF_NODE_COPY;
			desc[i].block = b;
			desc[i].slot = (b * 7 + 3) % 97; /* distinct slots, not equal to the block */
			copy_of[b] = i;
			ncopied++;
		} else if (r < 8 && ncopied > 0) {
			unsigned b;
			do
				b = rnd(nblocks);
			while (copy_of[b] == SIZE_MAX);
			desc[i].kind = RF_NODE_COMPUTE;
			desc[i].block = b;
			desc[i].slot = (b * 7 + 3) % 97;
			edges[ne][0] = copy_of[b];
			edges[ne][1] = i;
			ne++;
		} else {
			desc[i].kind = RF_NODE_WAIT;
		}
		if (i > 0) {
			unsigned extra = rnd(4);
			for (unsigned e = 0; e < extra; e++) {
				edges[ne][0] = rnd((uint32_t)i);
				edges[ne][1] = i;
				ne++;
			}
		}
	}
	/* add the nodes: each queue's nodes keep their logical order, queues interleaved at random */
	size_t *id_of = malloc(L * sizeof *id_of), *head = calloc(RF_MAX_QUEUES, sizeof *head);
	cr_assert(id_of && head);
	rf_graph *g = new_graph();
	for (size_t added = 0; added < L; added++) {
		size_t pick = SIZE_MAX;
		if (!interleave) {
			pick = added;
		} else {
			/* the next logical node of a random queue that still has nodes */
			while (pick == SIZE_MAX) {
				unsigned q = rnd(nq);
				for (size_t i = head[q]; i < L; i++)
					if (desc[i].queue == q) {
						pick = i;
						head[q] = i + 1;
						break;
					}
				if (pick == SIZE_MAX)
					head[q] = L;
			}
		}
		id_of[pick] = add(g, desc[pick].kind, desc[pick].queue, desc[pick].block, desc[pick].slot);
	}
	for (size_t e = 0; e < ne; e++)
		edge(g, id_of[edges[e][0]], id_of[edges[e][1]]);
	free(desc);
	free(copy_of);
	free(edges);
	free(id_of);
	free(head);
	return g;
}

Test(lower, random_graphs_rules)
{
	for (uint64_t seed = 1; seed <= 600; seed++) {
		for (int inter = 0; inter < 2; inter++) {
			snprintf(ctx, sizeof ctx, "seed %" PRIu64 " interleave %d", seed, inter);
			rf_graph *g = random_graph(seed, inter);
			int rc = rf_graph_validate(g);
			cr_assert_eq(rc, RF_OK, "%s: generated graph invalid: %d (%s)", ctx, rc, rf_errmsg());
			rf_program *p = lower(g);
			check_rules(g, p);
			check_reference(g, p);
			rf_program_destroy(p);
			rf_graph_destroy(g);
		}
	}
}

Test(lower, random_graphs_have_backward_edges)
{
	/* the interleaved generator really produces edges from higher to lower ids (else the test above
	 * would not exercise the non-topological path) */
	size_t backward = 0;
	for (uint64_t seed = 1; seed <= 100; seed++) {
		rf_graph *g = random_graph(seed, 1);
		for (size_t i = 0; i < g->n; i++)
			for (uint32_t e = 0; e < g->in[i].n; e++)
				backward += g->in[i].v[e] > i;
		rf_graph_destroy(g);
	}
	cr_assert_gt(backward, 50, "only %zu backward edges", backward);
}

/* ---- hand-built lowering rules ------------------------------------------------------------------- */

Test(lower, one_signal_for_two_foreign_queues)
{
	rf_graph *g = new_graph();
	size_t c = add(g, RF_NODE_COPY, 1, 0, 0);
	size_t x0 = add(g, RF_NODE_COMPUTE, 0, 0, 0);
	size_t x2 = add(g, RF_NODE_COMPUTE, 2, 0, 0);
	size_t x3 = add(g, RF_NODE_COMPUTE, 2, 0, 0); /* a second consumer on q2 */
	edge(g, c, x0);
	edge(g, c, x2);
	edge(g, c, x3);
	rf_program *p = lower(g);
	cr_assert_eq(rf_program_count(p, RF_OP_SIGNAL), 1, "one signal, however many consumers");
	cr_assert_eq(rf_program_ops(p, 1), 2);
	rf_op o = get_op(p, 1, 1);
	cr_assert(o.kind == RF_OP_SIGNAL && o.value == 1 && o.node == c);
	/* q0: wait q1>=1, compute;  q2: wait q1>=1, compute, compute (the second needs no wait) */
	cr_assert_eq(rf_program_ops(p, 0), 2);
	o = get_op(p, 0, 0);
	cr_assert(o.kind == RF_OP_WAIT && o.wait_queue == 1 && o.value == 1 && o.node == x0);
	cr_assert_eq(rf_program_ops(p, 2), 3);
	o = get_op(p, 2, 0);
	cr_assert(o.kind == RF_OP_WAIT && o.wait_queue == 1 && o.value == 1 && o.node == x2);
	o = get_op(p, 2, 2);
	cr_assert(o.kind == RF_OP_COMPUTE && o.node == x3, "already-waited value waited again");
	cr_assert_eq(rf_program_count(p, RF_OP_WAIT), 2);
	snprintf(ctx, sizeof ctx, "one_signal_for_two_foreign_queues");
	check_rules(g, p);
	rf_program_destroy(p);
	rf_graph_destroy(g);
}

Test(lower, wait_only_latest_producer)
{
	/* q1: copy b0 (signal 1), copy b1 (signal 2). q0: a WAIT node after both copies, then computes.
	 * The WAIT node waits once, for 2; the computes need nothing more. */
	rf_graph *g = new_graph();
	size_t c0 = add(g, RF_NODE_COPY, 1, 0, 0);
	size_t c1 = add(g, RF_NODE_COPY, 1, 1, 1);
	size_t w = add(g, RF_NODE_WAIT, 0, 0, 0);
	size_t x0 = add(g, RF_NODE_COMPUTE, 0, 0, 0);
	size_t x1 = add(g, RF_NODE_COMPUTE, 0, 1, 1);
	edge(g, c0, w);
	edge(g, c1, w);
	edge(g, c0, x0);
	edge(g, c1, x1);
	rf_program *p = lower(g);
	cr_assert_eq(rf_program_ops(p, 1), 4);
	cr_assert_eq(get_op(p, 1, 1).value, 1);
	cr_assert_eq(get_op(p, 1, 3).value, 2);
	cr_assert_eq(rf_program_ops(p, 0), 3, "q0 has %zu ops", rf_program_ops(p, 0));
	rf_op o = get_op(p, 0, 0);
	cr_assert(o.kind == RF_OP_WAIT && o.wait_queue == 1 && o.value == 2 && o.node == w, "wait q%u>=%" PRIu64,
		  o.wait_queue, o.value);
	cr_assert_eq(get_op(p, 0, 1).node, x0);
	cr_assert_eq(get_op(p, 0, 2).node, x1);
	snprintf(ctx, sizeof ctx, "wait_only_latest_producer");
	check_rules(g, p);
	rf_program_destroy(p);
	rf_graph_destroy(g);
}

Test(lower, wait_node_relays)
{
	/* copy on q1 -> WAIT on q0 -> compute on q2: q0 waits on q1 and signals; q2 waits on q0 only. */
	rf_graph *g = new_graph();
	size_t c = add(g, RF_NODE_COPY, 1, 0, 0);
	size_t w = add(g, RF_NODE_WAIT, 0, 0, 0);
	size_t x = add(g, RF_NODE_COMPUTE, 2, 0, 0);
	edge(g, c, w);
	edge(g, w, x);
	cr_assert_eq(rf_graph_validate(g), RF_OK, "%s", rf_errmsg());
	rf_program *p = lower(g);
	cr_assert_eq(rf_program_ops(p, 0), 2);
	rf_op o = get_op(p, 0, 0);
	cr_assert(o.kind == RF_OP_WAIT && o.wait_queue == 1 && o.value == 1 && o.node == w);
	o = get_op(p, 0, 1);
	cr_assert(o.kind == RF_OP_SIGNAL && o.value == 1 && o.node == w);
	cr_assert_eq(rf_program_ops(p, 2), 2);
	o = get_op(p, 2, 0);
	cr_assert(o.kind == RF_OP_WAIT && o.wait_queue == 0 && o.value == 1 && o.node == x);
	snprintf(ctx, sizeof ctx, "wait_node_relays");
	check_rules(g, p);
	rf_program_destroy(p);
	rf_graph_destroy(g);
}

Test(lower, fan_in_and_out_all_queues)
{
	/* 63 copies, one per queue 1..63, all feeding one WAIT node on q0 (63 waits before it, more ops than
	 * the lowering's first guess of the program size), then a compute per block on q0, then one node on
	 * q0 consumed by a node on every other queue (one signal). */
	rf_graph *g = new_graph();
	size_t copies[RF_MAX_QUEUES];
	for (unsigned q = 1; q < RF_MAX_QUEUES; q++)
		copies[q] = add(g, RF_NODE_COPY, q, q, q);
	size_t w = add(g, RF_NODE_WAIT, 0, 0, 0);
	for (unsigned q = 1; q < RF_MAX_QUEUES; q++)
		edge(g, copies[q], w);
	for (unsigned q = 1; q < RF_MAX_QUEUES; q++)
		edge(g, copies[q], add(g, RF_NODE_COMPUTE, 0, q, q));
	size_t hub = add(g, RF_NODE_WAIT, 0, 0, 0);
	for (unsigned q = 1; q < RF_MAX_QUEUES; q++)
		edge(g, hub, add(g, RF_NODE_WAIT, q, 0, 0));
	rf_program *p = lower(g);
	cr_assert_eq(rf_program_queues(p), RF_MAX_QUEUES);
	unsigned n = RF_MAX_QUEUES - 1;
	/* q0: 63 waits (one per queue, value 1), 63 computes (no more waits), one signal for the hub */
	cr_assert_eq(rf_program_ops(p, 0), n + n + 1, "q0 has %zu ops", rf_program_ops(p, 0));
	for (unsigned i = 0; i < n; i++) {
		rf_op o = get_op(p, 0, i);
		cr_assert(o.kind == RF_OP_WAIT && o.value == 1 && o.node == w, "q0 op %u", i);
	}
	rf_op last = get_op(p, 0, 2 * n);
	cr_assert(last.kind == RF_OP_SIGNAL && last.value == 1 && last.node == hub);
	cr_assert_eq(rf_program_count(p, RF_OP_SIGNAL), n + 1);
	cr_assert_eq(rf_program_count(p, RF_OP_WAIT), n + n);
	for (unsigned q = 1; q < RF_MAX_QUEUES; q++) {
		cr_assert_eq(rf_program_ops(p, q), 3, "q%u", q);
		rf_op o = get_op(p, q, 2);
		cr_assert(o.kind == RF_OP_WAIT && o.wait_queue == 0 && o.value == 1, "q%u waits on the hub", q);
	}
	snprintf(ctx, sizeof ctx, "fan_in_and_out_all_queues");
	check_rules(g, p);
	check_reference(g, p);
	rf_program_destroy(p);
	rf_graph_destroy(g);
}

Test(lower, same_queue_edges_are_free)
{
	rf_graph *g = new_graph();
	size_t c = add(g, RF_NODE_COPY, 3, 0, 0);
	size_t w = add(g, RF_NODE_WAIT, 3, 0, 0);
	size_t x = add(g, RF_NODE_COMPUTE, 3, 0, 0);
	edge(g, c, w);
	edge(g, w, x);
	edge(g, c, x);
	rf_program *p = lower(g);
	cr_assert_eq(rf_program_queues(p), 4, "queues = largest used + 1");
	cr_assert_eq(rf_program_ops(p, 0), 0);
	cr_assert_eq(rf_program_ops(p, 3), 2);
	cr_assert_eq(get_op(p, 3, 0).kind, RF_OP_COPY);
	cr_assert_eq(get_op(p, 3, 1).kind, RF_OP_COMPUTE);
	cr_assert_eq(rf_program_count(p, RF_OP_SIGNAL) + rf_program_count(p, RF_OP_WAIT), 0);
	rf_program_destroy(p);
	rf_graph_destroy(g);
}

Test(lower, errors)
{
	rf_program *p = (rf_program *)(uintptr_t)0x1;
	clear_errmsg();
	cr_assert_eq(rf_graph_lower(NULL, &p), RF_EINVAL);
	cr_assert_str_not_empty(rf_errmsg());
	rf_graph *g = new_graph();
	clear_errmsg();
	cr_assert_eq(rf_graph_lower(g, NULL), RF_EINVAL);
	cr_assert_str_not_empty(rf_errmsg());
	/* a hazard is reported by lowering as by validation, and *out stays untouched */
	add(g, RF_NODE_COPY, 1, 0, 0);
	add(g, RF_NODE_COMPUTE, 0, 0, 0);
	clear_errmsg();
	cr_assert_eq(rf_graph_lower(g, &p), RF_EHAZARD);
	cr_assert(strstr(rf_errmsg(), "RAW") != NULL, "\"%s\"", rf_errmsg());
	cr_assert_eq(p, (rf_program *)(uintptr_t)0x1);
	rf_graph_destroy(g);
	/* an empty graph lowers to an empty program */
	g = new_graph();
	rf_program *e = lower(g);
	cr_assert_eq(rf_program_queues(e), 0);
	cr_assert_eq(rf_program_ops(e, 0), 0);
	cr_assert_eq(rf_program_count(e, RF_OP_COPY), 0);
	rf_program_destroy(e);
	rf_graph_destroy(g);
}

Test(lower, program_independent_of_graph)
{
	rf_graph *g = ring(6, 2, 1);
	rf_program *p = lower(g);
	size_t n0 = rf_program_ops(p, 0);
	rf_graph_destroy(g);
	cr_assert_eq(rf_program_ops(p, 0), n0);
	rf_op o = get_op(p, 0, 1);
	cr_assert(o.kind == RF_OP_COMPUTE && o.block == 0);
	rf_program_destroy(p);
}

/* ---- the periodic ring program equals the generic lowering --------------------------------------- */

/* Position (1-based) of value v among the values a queue signalled (increasing), or 0. */
static uint64_t ordinal(const int64_t *vals, size_t n, int64_t v)
{
	size_t lo = 0, hi = n;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (vals[mid] < v)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo < n && vals[lo] == v ? lo + 1 : 0;
}

/* Program p run over nblocks as the flat op list a generic lowering gives (the template unrolled by
 * the rules of graph/program.h, values renumbered per queue from 1), and each op's staging slot (or
 * RF__NO_STAGE). *out and *stages are malloc'd (*n entries). */
static void expand(const struct rf_program *p, size_t nblocks, rf_op **out, unsigned **stages, size_t *n)
{
	int64_t iend = rf__prog_iter_end(p, nblocks), P = p->period;
	size_t cap = (size_t)(iend - p->iter_begin) * p->nops + 1, k = 0;
	rf_op *ops = malloc(cap * sizeof *ops);
	unsigned *st = malloc(cap * sizeof *st);
	int64_t *sig = malloc(cap * sizeof *sig);
	size_t nsig[RF_MAX_QUEUES] = {0}, sigoff[RF_MAX_QUEUES];
	cr_assert(ops != NULL && st != NULL && sig != NULL);
	/* Pass 1: the ops that run, raw values. */
	for (int64_t r = p->iter_begin; r < iend; r++) {
		int64_t base = r * P;
		for (size_t i = 0; i < p->nops; i++) {
			const rf__op *o = &p->ops[i];
			int64_t b = o->block + base, a = o->aux + base;
			if (P != 0 && (b < 0 || a < 0 || (uint64_t)b >= nblocks || (uint64_t)a >= nblocks))
				continue;
			st[k] = o->stage == RF__NO_STAGE ? RF__NO_STAGE : rf__mod(o->stage + base, p->nstage);
			rf_op x = {(rf_op_kind)o->kind, o->queue, o->node, 0, 0, 0, 0};
			if (o->kind == RF_OP_COPY || o->kind == RF_OP_COMPUTE || o->kind == RF_OP_STAGE) {
				x.block = (size_t)b;
				unsigned slot = p->nslots ? rf__mod(o->slot + base, p->nslots) : 0;
				x.slot = o->kind == RF_OP_STAGE ? st[k] : slot;
			}
			if (o->kind == RF_OP_WAIT)
				x.wait_queue = o->wqueue;
			if (o->kind == RF_OP_WAIT || o->kind == RF_OP_SIGNAL)
				x.value = (uint64_t)(o->value + base);
			ops[k++] = x;
		}
	}
	/* Pass 2: renumber signal values per queue from 1, and waits to match. */
	for (unsigned q = 0, off = 0; q < RF_MAX_QUEUES; q++) {
		sigoff[q] = off;
		for (size_t i = 0; i < k; i++)
			if (ops[i].kind == RF_OP_SIGNAL && ops[i].queue == q)
				sig[off + nsig[q]++] = (int64_t)ops[i].value;
		off += (unsigned)nsig[q];
	}
	for (size_t i = 0; i < k; i++) {
		unsigned q = ops[i].kind == RF_OP_WAIT ? ops[i].wait_queue : ops[i].queue;
		if (ops[i].kind == RF_OP_SIGNAL || ops[i].kind == RF_OP_WAIT)
			ops[i].value = ordinal(sig + sigoff[q], nsig[q], (int64_t)ops[i].value);
	}
	free(sig);
	*out = ops;
	*stages = st;
	*n = k;
}

static void expect_same_ops(const rf_op *a, size_t na, const rf_op *b, size_t nb, const char *what)
{
	cr_assert_eq(na, nb, "%s: %zu ops vs %zu", what, na, nb);
	for (size_t i = 0; i < na; i++) {
		int same = a[i].kind == b[i].kind && a[i].queue == b[i].queue && a[i].block == b[i].block &&
			   a[i].slot == b[i].slot && a[i].wait_queue == b[i].wait_queue && a[i].value == b[i].value;
		cr_assert(same,
			  "%s: op %zu: periodic %s q%u b%zu s%u wq%u v%" PRIu64 " vs generic %s q%u b%zu s%u wq%u v%" PRIu64,
			  what, i, op_name(a[i].kind), a[i].queue, a[i].block, a[i].slot, a[i].wait_queue, a[i].value,
			  op_name(b[i].kind), b[i].queue, b[i].block, b[i].slot, b[i].wait_queue, b[i].value);
	}
}

static void compare_periodic(const struct rf_program *rp, size_t N, unsigned D, unsigned K, unsigned P)
{
	char what[96];
	snprintf(what, sizeof what, "N=%zu D=%u K=%u P=%u", N, D, K, P);
	rf_graph *g = NULL;
	cr_assert_eq(rf__graph_ring(N, D, K, P, &g), RF_OK, "%s: %s", what, rf_errmsg());
	cr_assert_eq(rf_graph_validate(g), RF_OK, "%s: %s", what, rf_errmsg());
	rf_program *gp = lower(g);
	rf_op *a = NULL, *b = NULL;
	unsigned *sa = NULL, *sb = NULL;
	size_t na = 0, nb = 0;
	expand(rp, N, &a, &sa, &na);
	expand(gp, N, &b, &sb, &nb);
	expect_same_ops(a, na, b, nb, what);
	for (size_t i = 0; i < na; i++)
		cr_assert_eq(sa[i], sb[i], "%s: op %zu (%s b%zu): staging slot %u vs %u", what, i, op_name(a[i].kind),
			     a[i].block, sa[i], sb[i]);
	/* the generic program's expansion is its own global order: per queue it reads back as
	 * rf_program_op does */
	for (unsigned q = 0; q < rf_program_queues(gp); q++) {
		size_t i = 0;
		for (size_t k = 0; k < nb; k++) {
			if (b[k].queue != q)
				continue;
			rf_op o = get_op(gp, q, i++);
			cr_assert(o.kind == b[k].kind && o.block == b[k].block && o.value == b[k].value, "%s q%u op %zu", what,
				  q, i - 1);
		}
		cr_assert_eq(i, rf_program_ops(gp, q), "%s", what);
	}
	if (N >= rp->nstage)
		cr_assert_eq(gp->nstage, rp->nstage, "%s", what);
	free(a);
	free(b);
	free(sa);
	free(sb);
	rf_program_destroy(gp);
	rf_graph_destroy(g);
}

static struct rf_program *ring_program(unsigned D, unsigned K, unsigned P)
{
	struct rf_program *rp = NULL;
	cr_assert_eq(rf__ring_program(D, K, P, &rp), RF_OK, "D=%u K=%u P=%u: %s", D, K, P, rf_errmsg());
	cr_assert_eq(rp->nqueues, 1 + (P ? 2 : 1) * K);
	cr_assert_eq(rp->nslots, D);
	cr_assert_eq(rp->nstage, K * P);
	cr_assert_eq(rp->period, (int64_t)K);
	cr_assert_leq(rp->nops, (P ? 10 : 6) * (size_t)K, "D=%u K=%u P=%u: %zu template ops", D, K, P, rp->nops);
	return rp;
}

Test(lower, periodic_ring_equals_generic)
{
	for (unsigned D = 1; D <= 12; D++) {
		for (unsigned K = 1; K <= 3; K++) {
			if (!valid_ring(D, K))
				continue;
			struct rf_program *rp = ring_program(D, K, 0);
			for (size_t N = 0; N <= 50; N++)
				compare_periodic(rp, N, D, K, 0);
			rf_program_destroy(rp);
		}
	}
}

/* The staged ring (the cuda pipeline's): every depth, copy-queue and staging-slot count tried, the
 * template expanded equals the generic lowering of the explicit graph, staging slots included. */
Test(lower, periodic_staged_ring_equals_generic, .timeout = 120)
{
	for (unsigned D = 1; D <= 7; D++)
		for (unsigned K = 1; K <= 3; K++)
			for (unsigned P = 1; P <= 4; P++) {
				if (!valid_ring(D, K))
					continue;
				struct rf_program *rp = ring_program(D, K, P);
				for (size_t N = 0; N <= 40; N++)
					compare_periodic(rp, N, D, K, P);
				rf_program_destroy(rp);
			}
}

Test(lower, periodic_ring_equals_generic_large)
{
	static const struct {
		size_t N;
		unsigned D, K, P;
	} c[] = {{1000, 2, 1, 0}, {999, 7, 3, 0}, {513, 16, 5, 0}, {300, 64, 63, 0}, {1030, RF_MAX_DEPTH, 1, 0},
		 {5, RF_MAX_DEPTH, 1, 0}, {2049, RF_MAX_DEPTH, 2, 0}, {1000, 2, 1, 16}, {777, 5, 4, 3}, {300, 32, 31, 16},
		 {70, RF_MAX_DEPTH, 1, RF_MAX_SLOTS}};
	for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
		struct rf_program *rp = ring_program(c[i].D, c[i].K, c[i].P);
		compare_periodic(rp, c[i].N, c[i].D, c[i].K, c[i].P);
		rf_program_destroy(rp);
	}
}

/* STAGE nodes lower to stage ops on their queue; a staged block's copy names the staging slot, an
 * unstaged block's none; the program counts its staging slots apart from its ring slots. */
Test(lower, stage_ops_and_the_staging_slot_a_copy_reads)
{
	rf_graph *g = new_graph();
	size_t s0 = add(g, RF_NODE_STAGE, 2, 0, 3);
	size_t c0 = add(g, RF_NODE_COPY, 1, 0, 0);
	size_t c1 = add(g, RF_NODE_COPY, 1, 1, 1);
	size_t m0 = add(g, RF_NODE_COMPUTE, 0, 0, 0), m1 = add(g, RF_NODE_COMPUTE, 0, 1, 1);
	edge(g, s0, c0);
	edge(g, c0, m0);
	edge(g, c1, m1);
	rf_program *p = lower(g);
	cr_assert_eq(p->nslots, 2);
	cr_assert_eq(p->nstage, 4);
	cr_assert_eq(rf_program_count(p, RF_OP_STAGE), 1);
	rf_op o = get_op(p, 2, 0);
	cr_assert(o.kind == RF_OP_STAGE && o.block == 0 && o.slot == 3 && o.node == s0, "%s b%zu s%u", op_name(o.kind),
		  o.block, o.slot);
	cr_assert_eq(get_op(p, 2, 1).kind, RF_OP_SIGNAL, "the stage's consumer is on another queue");
	for (size_t i = 0; i < p->nops; i++)
		if (p->ops[i].kind == RF_OP_COPY)
			cr_assert_eq(p->ops[i].stage, p->ops[i].block == 0 ? 3u : RF__NO_STAGE, "copy of b%lld",
				     (long long)p->ops[i].block);
	rf_program_destroy(p);
	rf_graph_destroy(g);
}

/* ---- reading and printing ------------------------------------------------------------------------ */

Test(lower, program_read_args)
{
	rf_graph *g = ring(4, 2, 1);
	rf_program *p = lower(g);
	rf_op o;
	size_t m0 = rf_program_ops(p, 0);
	cr_assert_eq(m0, 2 * 4 + 2);
	clear_errmsg();
	cr_assert_eq(rf_program_op(p, 0, m0, &o), RF_EINVAL, "index past the end");
	cr_assert_str_not_empty(rf_errmsg());
	clear_errmsg();
	cr_assert_eq(rf_program_op(p, 2, 0, &o), RF_EINVAL, "queue past the end");
	cr_assert_str_not_empty(rf_errmsg());
	cr_assert_eq(rf_program_op(p, RF_MAX_QUEUES, 0, &o), RF_EINVAL);
	cr_assert_eq(rf_program_op(p, 0, SIZE_MAX, &o), RF_EINVAL);
	cr_assert_eq(rf_program_op(NULL, 0, 0, &o), RF_EINVAL);
	cr_assert_eq(rf_program_op(p, 0, 0, NULL), RF_EINVAL);
	cr_assert_eq(rf_program_op(p, 0, m0 - 1, &o), RF_OK);
	cr_assert(o.kind == RF_OP_COMPUTE && o.block == 3, "last op of q0: %s b%zu", op_name(o.kind), o.block);
	cr_assert_eq(rf_program_queues(NULL), 0);
	cr_assert_eq(rf_program_ops(NULL, 0), 0);
	cr_assert_eq(rf_program_ops(p, 2), 0);
	cr_assert_eq(rf_program_ops(p, UINT32_MAX), 0);
	cr_assert_eq(rf_program_count(NULL, RF_OP_COPY), 0);
	rf_program_destroy(NULL);
	rf_program_destroy(p);
	rf_graph_destroy(g);
}

/* Some line of text contains all four substrings. */
static int has_line(const char *text, const char *a, const char *b, const char *c, const char *d)
{
	for (const char *l = text; *l;) {
		const char *e = strchr(l, '\n');
		size_t n = e ? (size_t)(e - l) : strlen(l);
		char line[256];
		if (n >= sizeof line)
			n = sizeof line - 1;
		memcpy(line, l, n);
		line[n] = '\0';
		if (strstr(line, a) && strstr(line, b) && strstr(line, c) && strstr(line, d))
			return 1;
		if (!e)
			break;
		l = e + 1;
	}
	return 0;
}

Test(lower, program_print)
{
	rf_graph *g = ring(5, 3, 2);
	rf_program *p = lower(g);
	FILE *f = tmpfile();
	cr_assert_not_null(f);
	cr_assert_eq(rf_program_print(p, f), RF_OK, "%s", rf_errmsg());
	long size = ftell(f);
	cr_assert_gt(size, 0, "nothing printed");
	rewind(f);
	char *text = calloc((size_t)size + 1, 1);
	cr_assert_not_null(text);
	cr_assert_eq(fread(text, 1, (size_t)size, f), (size_t)size);
	fclose(f);
	size_t lines = 0;
	for (char *s = text; *s; s++)
		lines += *s == '\n';
	size_t ops = 0;
	for (unsigned q = 0; q < rf_program_queues(p); q++)
		ops += rf_program_ops(p, q);
	cr_assert_eq(lines, rf_program_queues(p) + ops, "one header per queue and one line per op:\n%s", text);
	cr_assert_not_null(strstr(text, "copy"));
	cr_assert_not_null(strstr(text, "compute"));
	cr_assert_null(strstr(text, "stage"), "an unstaged ring has no stage:\n%s", text);
	cr_assert_not_null(strstr(text, "signal"));
	cr_assert_not_null(strstr(text, "wait"));
	cr_assert(has_line(text, "q1:", "copy", "b0 ", "s0 "), "%s", text);
	cr_assert(has_line(text, "q2:", "copy", "b1 ", "s1 "), "%s", text);
	cr_assert(has_line(text, "q0:", "compute", "b4 ", "s1 "), "%s", text);
	cr_assert(!has_line(text, "q0:", "copy", "", ""), "a copy printed on the compute queue:\n%s", text);
	free(text);

	clear_errmsg();
	cr_assert_eq(rf_program_print(NULL, stdout), RF_EINVAL);
	cr_assert_str_not_empty(rf_errmsg());
	cr_assert_eq(rf_program_print(p, NULL), RF_EINVAL);
	/* a stream that cannot be written */
	FILE *ro = fopen("/dev/null", "r");
	if (ro != NULL) {
		clear_errmsg();
		cr_assert_eq(rf_program_print(p, ro), RF_EBACKEND);
		cr_assert_str_not_empty(rf_errmsg());
		fclose(ro);
	}
	rf_program_destroy(p);
	rf_graph_destroy(g);
}

/* A staged ring prints its stages and, on each staged block's copy, the staging slot it reads. */
Test(lower, program_print_staged)
{
	rf_graph *g = NULL;
	cr_assert_eq(rf__graph_ring(5, 2, 1, 3, &g), RF_OK, "%s", rf_errmsg());
	rf_program *p = lower(g);
	FILE *f = tmpfile();
	cr_assert_not_null(f);
	cr_assert_eq(rf_program_print(p, f), RF_OK, "%s", rf_errmsg());
	long size = ftell(f);
	rewind(f);
	char *text = calloc((size_t)size + 1, 1);
	cr_assert_not_null(text);
	cr_assert_eq(fread(text, 1, (size_t)size, f), (size_t)size);
	fclose(f);
	cr_assert(has_line(text, "q2:", "stage", "b4 ", "-> t1 "), "%s", text);
	cr_assert(has_line(text, "q1:", "copy", "b4 t1 ", "-> s0 "), "%s", text);
	cr_assert(has_line(text, "q2:", "wait", "q1>=", ""), "the staging slot's WAR wait:\n%s", text);
	cr_assert(has_line(text, "q1:", "wait", "q2>=", ""), "the copy's wait for its stage:\n%s", text);
	free(text);
	rf_program_destroy(p);
	rf_graph_destroy(g);
}
