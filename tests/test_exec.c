/*
 * tests/test_exec.c — rf_graph + rf_exec through the public API (<ringfetch/graph.h>), against the
 * shared library. Backend-agnostic: execs are created on RF_TEST_BACKEND ("cpu" when unset).
 * Callbacks never use Criterion asserts (they may run on a library thread); they record the first
 * violation and the test asserts after the run. RF_TEST_SEED=<n> replays a randomised run.
 */
#include "support.h"

#include <stdatomic.h>

/* ---- helpers ------------------------------------------------------------------------------------- */

static rf_exec_params exec_params(size_t slot_bytes)
{
	rf_exec_params ep;
	memset(&ep, 0, sizeof ep);
	ep.backend = test_backend();
	ep.slot_bytes = slot_bytes;
	return ep;
}

static rf_exec *make_exec(const rf_graph *g, size_t slot_bytes)
{
	rf_exec_params ep = exec_params(slot_bytes);
	rf_exec *e = NULL;
	int rc = rf_exec_create(g, &ep, &e);
	cr_assert_eq(rc, RF_OK, "rf_exec_create: %s: %s", rf_err_name(rc), rf_errmsg());
	cr_assert_not_null(e);
	cr_assert_str_eq(rf_exec_backend(e), test_backend());
	return e;
}

static size_t add_node(rf_graph *g, rf_node_kind kind, unsigned queue, size_t block, unsigned slot)
{
	rf_node_desc d;
	memset(&d, 0, sizeof d);
	d.kind = kind;
	d.queue = queue;
	d.block = block;
	d.slot = slot;
	size_t id = SIZE_MAX;
	int rc = rf_graph_add_node(g, &d, &id);
	cr_assert_eq(rc, RF_OK, "add_node: %s", rf_errmsg());
	return id;
}

static void add_edge(rf_graph *g, size_t from, size_t to)
{
	int rc = rf_graph_add_edge(g, from, to);
	cr_assert_eq(rc, RF_OK, "add_edge %zu -> %zu: %s", from, to, rf_errmsg());
}

/* Blocks 0..n-1 in order, block b in slot b % depth. */
typedef struct ring_expect {
	size_t *order;
	unsigned *slot_of;
} ring_expect;

static void ring_expect_make(ring_expect *r, size_t n, unsigned depth)
{
	r->order = calloc(n ? n : 1, sizeof *r->order);
	r->slot_of = calloc(n ? n : 1, sizeof *r->slot_of);
	cr_assert(r->order && r->slot_of);
	for (size_t b = 0; b < n; b++) {
		r->order[b] = b;
		r->slot_of[b] = (unsigned)(b % depth);
	}
}

static void ring_expect_free(ring_expect *r)
{
	free(r->order);
	free(r->slot_of);
}

/* One checked run of e over all of bs (work: yields + re-reads per compute): it returns RF_OK, and
 * the computes are exactly order[0 .. norder) in their slot_of[] slots, with their bytes. `what` and
 * the test's seed go into every failure message. */
static void checked_exec_run(rf_exec *e, const blockset *bs, const size_t *order, size_t norder,
			const unsigned *slot_of, unsigned work, const char *what, uint64_t seed)
{
	checker c;
	ck_order(&c, bs, order, norder, slot_of);
	c.work = work;
	int rc = rf_exec_run(e, bs->n, bs_srcs(bs), bs->sizes, check_cb, &c);
	cr_assert_eq(rc, RF_OK, "%s: %s: %s", what, rf_err_name(rc), rf_errmsg());
	cr_assert_str_empty(c.err, "%s: %s [seed %llu]", what, c.err, (unsigned long long)seed);
	cr_assert_eq(c.calls, norder, "%s: %zu computes, expected %zu", what, c.calls, norder);
}

/* ---- ring graphs ----------------------------------------------------------------------------------- */

Test(exec, ring_graph_tagged_payloads)
{
	uint64_t seed = test_seed(), run = 0;
	for (unsigned depth = 1; depth <= 6; depth++) {
		for (unsigned kq = 1; kq <= 2; kq++) {
			if (kq > 1 && depth < kq + 1)
				continue;
			const size_t ns[] = {1, depth, depth + 1, 3 * (size_t)depth + 2, 40};
			for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++) {
				size_t n = ns[ni];
				rf_graph *g = NULL;
				int rc = rf_graph_ring(n, depth, kq, &g);
				cr_assert_eq(rc, RF_OK, "rf_graph_ring(%zu, %u, %u): %s", n, depth, kq, rf_errmsg());
				rf_exec *e = make_exec(g, 96);
				ring_expect r;
				ring_expect_make(&r, n, depth);
				/* Run twice: an exec is reusable. */
				for (int pass = 0; pass < 2; pass++) {
					blockset bs;
					bs_random(&bs, n, 96, seed + run++);
					char what[96];
					snprintf(what, sizeof what, "depth %u kq %u n %zu pass %d", depth, kq, n, pass);
					checked_exec_run(e, &bs, r.order, n, r.slot_of, (unsigned)(n % 2), what, seed);
					bs_free(&bs);
				}
				ring_expect_free(&r);
				rf_exec_destroy(e);
				rf_graph_destroy(g);
			}
		}
	}
	leak_check();
}

/* Two-hop staging by hand: block b staged on queue 2 into staging slot b % S, copied from there on queue
 * 1 into slot b % D, computed on queue 0; RAW and WAR on both kinds of slots as explicit edges. Every
 * compute sees its block's bytes (on "cpu" and "threads" a stage is a memcpy into host memory beside the
 * ring), and the graph oracle (RINGFETCH_ORACLE=1) checks every run against the edges. */
Test(exec, staged_two_hop_graph)
{
	uint64_t seed = test_seed(), run = 0;
	for (unsigned depth = 1; depth <= 4; depth++)
		for (unsigned S = 1; S <= 4; S++) {
			const size_t n = 3 * (size_t)(depth + S) + 1;
			rf_graph *g = NULL;
			cr_assert_eq(rf_graph_create(0, &g), RF_OK);
			size_t *st = calloc(n, sizeof *st), *cp = calloc(n, sizeof *cp), *cm = calloc(n, sizeof *cm);
			cr_assert(st && cp && cm);
			for (size_t b = 0; b < n; b++) {
				st[b] = add_node(g, RF_NODE_STAGE, 2, b, (unsigned)(b % S));
				cp[b] = add_node(g, RF_NODE_COPY, 1, b, (unsigned)(b % depth));
				cm[b] = add_node(g, RF_NODE_COMPUTE, 0, b, (unsigned)(b % depth));
				add_edge(g, st[b], cp[b]);
				add_edge(g, cp[b], cm[b]);
				if (b >= depth)
					add_edge(g, cm[b - depth], cp[b]);
				if (b >= S)
					add_edge(g, cp[b - S], st[b]);
			}
			cr_assert_eq(rf_graph_validate(g), RF_OK, "%s", rf_errmsg());
			rf_exec *e = make_exec(g, 96);
			ring_expect r;
			ring_expect_make(&r, n, depth);
			for (int pass = 0; pass < 2; pass++) {
				blockset bs;
				bs_random(&bs, n, 96, seed + run++);
				char what[96];
				snprintf(what, sizeof what, "depth %u staging slots %u pass %d", depth, S, pass);
				checked_exec_run(e, &bs, r.order, n, r.slot_of, (unsigned)(n % 2), what, seed);
				bs_free(&bs);
			}
			ring_expect_free(&r);
			rf_exec_destroy(e);
			/* without one staging WAR edge the graph is refused */
			if (n > S) {
				cr_assert_eq(rf_graph_remove_edge(g, cp[n - 1 - S], st[n - 1]), RF_OK);
				rf_exec *bad = NULL;
				rf_exec_params ep = exec_params(96);
				cr_assert_eq(rf_exec_create(g, &ep, &bad), RF_EHAZARD, "%s", rf_errmsg());
				cr_assert(strstr(rf_errmsg(), "staging slot") != NULL, "%s", rf_errmsg());
			}
			free(st);
			free(cp);
			free(cm);
			rf_graph_destroy(g);
		}
	leak_check();
}

Test(exec, graph_destroyed_right_after_create)
{
	uint64_t seed = test_seed();
	const size_t n = 25;
	const unsigned depth = 3;
	rf_graph *g = NULL;
	cr_assert_eq(rf_graph_ring(n, depth, 1, &g), RF_OK);
	rf_exec *e = make_exec(g, 50);
	rf_graph_destroy(g);
	ring_expect r;
	ring_expect_make(&r, n, depth);
	blockset bs;
	bs_random(&bs, n, 50, seed);
	checked_exec_run(e, &bs, r.order, n, r.slot_of, 0, "graph destroyed right after create", seed);
	bs_free(&bs);
	ring_expect_free(&r);
	rf_exec_destroy(e);
	leak_check();
}

Test(exec, graph_changed_after_create_does_not_affect_exec)
{
	uint64_t seed = test_seed();
	const size_t n = 6;
	rf_graph *g = NULL;
	cr_assert_eq(rf_graph_ring(n, 2, 1, &g), RF_OK);
	rf_exec *e = make_exec(g, 32);
	/* Grow the graph: a compute of block 9 on slot 0 (a hazard and more blocks). */
	add_node(g, RF_NODE_COMPUTE, 0, 9, 0);
	ring_expect r;
	ring_expect_make(&r, n, 2);
	blockset bs;
	bs_random(&bs, n, 32, seed);
	checked_exec_run(e, &bs, r.order, n, r.slot_of, 0, "graph grown after create", seed);
	bs_free(&bs);
	ring_expect_free(&r);
	rf_exec_destroy(e);
	rf_graph_destroy(g);
	leak_check();
}

/* ---- hand-built graphs ----------------------------------------------------------------------------- */

/* A double buffer by hand: 4 blocks, 2 slots, copies on queue 1, computes on queue 0, with explicit
 * WAIT nodes for RAW (copy -> wait(q0) -> compute) and WAR (compute -> wait(q1) -> copy). */
static rf_graph *two_slot_graph(int with_war)
{
	rf_graph *g = NULL;
	cr_assert_eq(rf_graph_create(0, &g), RF_OK);
	size_t copy[4], comp[4];
	copy[0] = add_node(g, RF_NODE_COPY, 1, 0, 0);
	copy[1] = add_node(g, RF_NODE_COPY, 1, 1, 1);
	for (size_t b = 0; b < 4; b++) {
		size_t w = add_node(g, RF_NODE_WAIT, 0, 0, 0);
		add_edge(g, copy[b], w);
		comp[b] = add_node(g, RF_NODE_COMPUTE, 0, b, (unsigned)(b % 2));
		add_edge(g, w, comp[b]);
		if (b + 2 < 4) {
			size_t ww = add_node(g, RF_NODE_WAIT, 1, 0, 0);
			if (with_war)
				add_edge(g, comp[b], ww);
			copy[b + 2] = add_node(g, RF_NODE_COPY, 1, b + 2, (unsigned)(b % 2));
			add_edge(g, ww, copy[b + 2]);
		}
	}
	return g;
}

Test(exec, hand_built_two_slot_graph)
{
	uint64_t seed = test_seed();
	rf_graph *g = two_slot_graph(1);
	cr_assert_eq(rf_graph_validate(g), RF_OK, "%s", rf_errmsg());
	rf_exec *e = make_exec(g, 64);
	rf_graph_destroy(g);
	static const size_t order[] = {0, 1, 2, 3};
	static const unsigned slot_of[] = {0, 1, 0, 1};
	for (int pass = 0; pass < 3; pass++) {
		blockset bs;
		bs_random(&bs, 4, 64, seed + (uint64_t)pass);
		char what[32];
		snprintf(what, sizeof what, "pass %d", pass);
		checked_exec_run(e, &bs, order, 4, slot_of, 2, what, seed);
		bs_free(&bs);
	}
	/* nblocks may exceed the graph's blocks: the extra ones are checked but not streamed. */
	blockset bs;
	bs_random(&bs, 7, 64, seed + 99);
	checked_exec_run(e, &bs, order, 4, slot_of, 0, "7 blocks for a graph of 4", seed);
	bs_free(&bs);
	rf_exec_destroy(e);
	leak_check();
}

Test(exec, slots_are_the_nodes_slots)
{
	/* Block b in slot 3 - b (not b % nslots), and only blocks 1 and 3 computed, out of 4. */
	uint64_t seed = test_seed();
	rf_graph *g = NULL;
	cr_assert_eq(rf_graph_create(0, &g), RF_OK);
	size_t c3 = add_node(g, RF_NODE_COPY, 1, 3, 0);
	size_t c1 = add_node(g, RF_NODE_COPY, 1, 1, 2);
	size_t k1 = add_node(g, RF_NODE_COMPUTE, 0, 1, 2);
	size_t k3 = add_node(g, RF_NODE_COMPUTE, 0, 3, 0);
	add_edge(g, c1, k1);
	add_edge(g, c3, k3);
	rf_exec *e = make_exec(g, 16);
	rf_graph_destroy(g);
	static const size_t order[] = {1, 3};
	static const unsigned slot_of[] = {9, 2, 9, 0};
	blockset bs;
	bs_random(&bs, 4, 16, seed);
	checked_exec_run(e, &bs, order, 2, slot_of, 0, "blocks 1 and 3 of 4", seed);
	bs_free(&bs);
	rf_exec_destroy(e);
	leak_check();
}

/* Two compute queues (0: even blocks, 2: odd blocks), one copy queue, a slot per block. Computes on
 * one queue run in that queue's order; the two queues may run concurrently. */
typedef struct two_q {
	const blockset *bs;
	size_t next[2];
	atomic_size_t calls;
	char err[2][200];
} two_q;

static int two_q_cb(void *user, const rf_block *blk)
{
	two_q *t = user;
	atomic_fetch_add(&t->calls, 1);
	size_t i = blk->index, par = i % 2;
	if (t->err[par][0] != '\0')
		return 0;
	if (i != t->next[par])
		snprintf(t->err[par], sizeof t->err[par], "queue of parity %zu: block %zu, expected %zu", par, i,
			 t->next[par]);
	else if (blk->slot != (unsigned)i)
		snprintf(t->err[par], sizeof t->err[par], "block %zu in slot %u", i, blk->slot);
	else if (blk->bytes != t->bs->sizes[i] || (blk->bytes && memcmp(blk->data, t->bs->srcs[i], blk->bytes)))
		snprintf(t->err[par], sizeof t->err[par], "block %zu: wrong bytes", i);
	t->next[par] = i + 2;
	return 0;
}

Test(exec, two_compute_queues)
{
	const size_t n = 8;
	uint64_t seed = test_seed();
	rf_graph *g = NULL;
	cr_assert_eq(rf_graph_create(0, &g), RF_OK);
	size_t copy[8];
	for (size_t b = 0; b < n; b++)
		copy[b] = add_node(g, RF_NODE_COPY, 1, b, (unsigned)b);
	for (size_t b = 0; b < n; b++) {
		size_t k = add_node(g, RF_NODE_COMPUTE, b % 2 ? 2 : 0, b, (unsigned)b);
		add_edge(g, copy[b], k);
	}
	rf_exec *e = make_exec(g, 24);
	rf_graph_destroy(g);
	blockset bs;
	bs_random(&bs, n, 24, seed);
	two_q t;
	memset(&t, 0, sizeof t);
	t.bs = &bs;
	t.next[1] = 1;
	atomic_init(&t.calls, 0);
	int rc = rf_exec_run(e, n, bs_srcs(&bs), bs.sizes, two_q_cb, &t);
	bs_free(&bs);
	cr_assert_eq(rc, RF_OK, "%s", rf_errmsg());
	cr_assert_str_empty(t.err[0], "%s", t.err[0]);
	cr_assert_str_empty(t.err[1], "%s", t.err[1]);
	cr_assert_eq(atomic_load(&t.calls), n);
	cr_assert_eq(t.next[0], n);
	cr_assert_eq(t.next[1], n + 1);
	rf_exec_destroy(e);
	leak_check();
}

Test(exec, high_queue_numbers)
{
	/* Copies on queue 63 (the last), computes on queue 0; queues 1..62 are unused. */
	uint64_t seed = test_seed();
	const size_t n = 6;
	rf_graph *g = NULL;
	cr_assert_eq(rf_graph_create(0, &g), RF_OK);
	for (size_t b = 0; b < n; b++) {
		size_t c = add_node(g, RF_NODE_COPY, RF_MAX_QUEUES - 1, b, (unsigned)b);
		size_t k = add_node(g, RF_NODE_COMPUTE, 0, b, (unsigned)b);
		add_edge(g, c, k);
	}
	rf_exec *e = make_exec(g, 20);
	rf_graph_destroy(g);
	static const size_t order[] = {0, 1, 2, 3, 4, 5};
	static const unsigned slot_of[] = {0, 1, 2, 3, 4, 5};
	blockset bs;
	bs_random(&bs, n, 20, seed);
	checked_exec_run(e, &bs, order, n, slot_of, 0, "copies on queue 63", seed);
	bs_free(&bs);
	rf_exec_destroy(e);
	leak_check();
}

Test(exec, graph_of_wait_nodes_only)
{
	/* Not empty, but no block: nothing to copy or compute, any nblocks (even 0) runs. */
	rf_graph *g = NULL;
	cr_assert_eq(rf_graph_create(0, &g), RF_OK);
	size_t a = add_node(g, RF_NODE_WAIT, 0, 0, 0);
	size_t b = add_node(g, RF_NODE_WAIT, 1, 0, 0);
	add_edge(g, a, b);
	rf_exec *e = make_exec(g, 8);
	rf_graph_destroy(g);
	size_t calls = 0;
	cr_assert_eq(rf_exec_run(e, 0, NULL, NULL, NULL, NULL), RF_OK, "%s", rf_errmsg());
	blockset bs;
	bs_random(&bs, 3, 8, 1);
	cr_assert_eq(rf_exec_run(e, 3, bs_srcs(&bs), bs.sizes, count_cb, &calls), RF_OK, "%s", rf_errmsg());
	cr_assert_eq(calls, 0);
	bs_free(&bs);
	rf_exec_destroy(e);
	leak_check();
}

/* Random DAGs: copies on queues 1 and 3, computes on queues 0, 2 and 4, a slot per block (no reuse),
 * RAW edges copy(b) -> compute(b) (sometimes through a WAIT node), and random extra edges from earlier
 * computes to later ones, direct or through a WAIT node on the consumer's queue. Checked: every
 * compute sees its bytes, runs after every compute it depends on (atomic done flags), and each queue's
 * computes run in queue order. Callbacks may run concurrently on several threads here. */
enum { RD_N = 40, RD_MAXPRED = 4 };

typedef struct rand_dag {
	const blockset *bs;
	unsigned queue_of[RD_N];
	size_t npred[RD_N];
	size_t pred[RD_N][RD_MAXPRED];
	size_t prev_on_queue[RD_N]; /* SIZE_MAX: first compute of its queue */
	atomic_int done[RD_N];
	atomic_size_t calls;
	int bad[RD_N]; /* per block, written by that block's compute only: 0 ok, else what failed */
	size_t bad_detail[RD_N];
} rand_dag;

static int rand_dag_cb(void *user, const rf_block *blk)
{
	rand_dag *d = user;
	size_t b = blk->index;
	atomic_fetch_add(&d->calls, 1);
	if (b >= RD_N)
		return 0;
	if (atomic_load(&d->done[b]) != 0)
		d->bad[b] = 1; /* computed twice */
	for (size_t i = 0; i < d->npred[b] && !d->bad[b]; i++)
		if (atomic_load(&d->done[d->pred[b][i]]) == 0) {
			d->bad[b] = 2; /* an edge not respected */
			d->bad_detail[b] = d->pred[b][i];
		}
	if (!d->bad[b] && d->prev_on_queue[b] != SIZE_MAX && atomic_load(&d->done[d->prev_on_queue[b]]) == 0) {
		d->bad[b] = 3; /* queue order not respected */
		d->bad_detail[b] = d->prev_on_queue[b];
	}
	if (!d->bad[b] && (blk->slot != (unsigned)b || blk->bytes != d->bs->sizes[b] ||
			   (blk->bytes && memcmp(blk->data, d->bs->srcs[b], blk->bytes) != 0)))
		d->bad[b] = 4; /* wrong slot or bytes */
	for (int y = 0; y < (int)(b % 3); y++)
		sched_yield();
	atomic_store(&d->done[b], 1);
	return 0;
}

Test(exec, random_dags)
{
	uint64_t seed = test_seed();
	for (unsigned round = 0; round < 12; round++) {
		uint64_t st = seed + round;
		rand_dag *d = calloc(1, sizeof *d);
		cr_assert(d != NULL);
		rf_graph *g = NULL;
		cr_assert_eq(rf_graph_create(0, &g), RF_OK);
		size_t compute_id[RD_N], last_on_queue[5];
		for (unsigned q = 0; q < 5; q++)
			last_on_queue[q] = SIZE_MAX;
		for (size_t b = 0; b < RD_N; b++) {
			unsigned cq = (rng_next(&st) % 2) ? 1 : 3;
			unsigned kq = (unsigned)(rng_next(&st) % 3) * 2;
			size_t copy = add_node(g, RF_NODE_COPY, cq, b, (unsigned)b);
			size_t pre = copy;
			if (rng_next(&st) % 3 == 0) { /* RAW through a WAIT node on the compute queue */
				pre = add_node(g, RF_NODE_WAIT, kq, 0, 0);
				add_edge(g, copy, pre);
			}
			/* Extra dependencies on earlier computes. */
			size_t extra = b > 0 ? (size_t)(rng_next(&st) % (RD_MAXPRED + 1)) : 0;
			size_t via_wait = SIZE_MAX;
			if (extra > 0 && rng_next(&st) % 2) {
				via_wait = add_node(g, RF_NODE_WAIT, kq, 0, 0);
			}
			size_t from[RD_MAXPRED], nfrom = 0;
			for (size_t i = 0; i < extra; i++) {
				size_t a = (size_t)(rng_next(&st) % b);
				int dup = 0;
				for (size_t j = 0; j < nfrom; j++)
					dup |= from[j] == a;
				if (!dup)
					from[nfrom++] = a;
			}
			compute_id[b] = add_node(g, RF_NODE_COMPUTE, kq, b, (unsigned)b);
			add_edge(g, pre, compute_id[b]);
			for (size_t i = 0; i < nfrom; i++) {
				if (via_wait != SIZE_MAX)
					add_edge(g, compute_id[from[i]], via_wait);
				else
					add_edge(g, compute_id[from[i]], compute_id[b]);
				d->pred[b][d->npred[b]++] = from[i];
			}
			if (via_wait != SIZE_MAX)
				add_edge(g, via_wait, compute_id[b]);
			d->queue_of[b] = kq;
			d->prev_on_queue[b] = last_on_queue[kq];
			last_on_queue[kq] = b;
			atomic_init(&d->done[b], 0);
		}
		cr_assert_eq(rf_graph_validate(g), RF_OK, "round %u: %s", round, rf_errmsg());
		rf_exec *e = make_exec(g, 48);
		rf_graph_destroy(g);
		blockset bs;
		bs_random(&bs, RD_N, 48, seed + 1000 + round);
		d->bs = &bs;
		atomic_init(&d->calls, 0);
		int rc = rf_exec_run(e, RD_N, bs_srcs(&bs), bs.sizes, rand_dag_cb, d);
		bs_free(&bs);
		cr_assert_eq(rc, RF_OK, "round %u: %s: %s", round, rf_err_name(rc), rf_errmsg());
		cr_assert_eq(atomic_load(&d->calls), RD_N, "round %u: %zu computes", round, atomic_load(&d->calls));
		for (size_t b = 0; b < RD_N; b++)
			cr_assert_eq(d->bad[b], 0,
				     "round %u block %zu (queue %u): check %d failed (1 twice, 2 edge from compute %zu, "
				     "3 queue order after %zu, 4 bytes) [seed %llu]",
				     round, b, d->queue_of[b], d->bad[b], d->bad_detail[b], d->bad_detail[b],
				     (unsigned long long)seed);
		rf_exec_destroy(e);
		free(d);
	}
	leak_check();
}

/* ---- errors ------------------------------------------------------------------------------------------ */

#define SENTINEL ((rf_exec *)(uintptr_t)0x5e5e5e50u)

static int try_exec_create(const rf_graph *g, const rf_exec_params *ep)
{
	rf_exec *e = SENTINEL;
	int rc = rf_exec_create(g, ep, &e);
	if (rc == RF_OK)
		rf_exec_destroy(e);
	else
		cr_assert_eq(e, SENTINEL, "*out changed on failure (%s)", rf_err_name(rc));
	return rc;
}

Test(exec, nblocks_below_the_graphs_blocks_is_einval)
{
	rf_graph *g = two_slot_graph(1); /* blocks 0..3 */
	rf_exec *e = make_exec(g, 64);
	rf_graph_destroy(g);
	blockset bs;
	bs_random(&bs, 4, 64, 7);
	size_t calls = 0;
	for (size_t n = 0; n < 4; n++) {
		int rc = rf_exec_run(e, n, bs_srcs(&bs), bs.sizes, count_cb, &calls);
		cr_assert_eq(rc, RF_EINVAL, "nblocks %zu for a graph using blocks 0..3: %s", n, rf_err_name(rc));
		cr_assert_str_neq(rf_errmsg(), "");
	}
	cr_assert_eq(calls, 0, "compute called %zu times", calls);
	cr_assert_eq(rf_exec_run(e, 4, bs_srcs(&bs), bs.sizes, count_cb, &calls), RF_OK, "%s", rf_errmsg());
	cr_assert_eq(calls, 4);
	bs_free(&bs);
	rf_exec_destroy(e);
	leak_check();
}

Test(exec, hazards_are_ehazard)
{
	rf_exec_params ep = exec_params(64);
	/* The double buffer without its WAR edges: copy of block 2 into slot 0 races compute 0. */
	rf_graph *g = two_slot_graph(0);
	int rc = try_exec_create(g, &ep);
	cr_assert_eq(rc, RF_EHAZARD, "missing WAR: %s: %s", rf_err_name(rc), rf_errmsg());
	cr_assert_str_neq(rf_errmsg(), "");
	rf_graph_destroy(g);

	/* A compute with no copy at all (RAW). */
	cr_assert_eq(rf_graph_create(0, &g), RF_OK);
	add_node(g, RF_NODE_COMPUTE, 0, 0, 0);
	rc = try_exec_create(g, &ep);
	cr_assert_eq(rc, RF_EHAZARD, "compute without copy: %s: %s", rf_err_name(rc), rf_errmsg());
	rf_graph_destroy(g);

	/* A copy on another queue not ordered before its compute (RAW). */
	cr_assert_eq(rf_graph_create(0, &g), RF_OK);
	add_node(g, RF_NODE_COPY, 1, 0, 0);
	add_node(g, RF_NODE_COMPUTE, 0, 0, 0);
	rc = try_exec_create(g, &ep);
	cr_assert_eq(rc, RF_EHAZARD, "unordered copy -> compute: %s: %s", rf_err_name(rc), rf_errmsg());
	rf_graph_destroy(g);
	leak_check();
}

Test(exec, cycle_is_einval)
{
	rf_exec_params ep = exec_params(64);
	rf_graph *g = NULL;
	cr_assert_eq(rf_graph_create(0, &g), RF_OK);
	size_t c = add_node(g, RF_NODE_COPY, 1, 0, 0);
	size_t w = add_node(g, RF_NODE_WAIT, 0, 0, 0);
	size_t k = add_node(g, RF_NODE_COMPUTE, 0, 0, 0);
	add_edge(g, c, w);
	add_edge(g, k, c); /* compute -> copy, and copy -> wait -> compute by queue order: a cycle */
	int rc = try_exec_create(g, &ep);
	cr_assert_eq(rc, RF_EINVAL, "cyclic graph: %s: %s", rf_err_name(rc), rf_errmsg());
	cr_assert_str_neq(rf_errmsg(), "");
	rf_graph_destroy(g);
	leak_check();
}

Test(exec, create_rejects_bad_arguments)
{
	rf_exec_params ep = exec_params(64);
	rf_graph *empty = NULL;
	cr_assert_eq(rf_graph_create(0, &empty), RF_OK);
	cr_assert_eq(try_exec_create(empty, &ep), RF_EINVAL, "empty graph");
	rf_graph_destroy(empty);
	cr_assert_eq(rf_graph_ring(0, 2, 1, &empty), RF_OK);
	cr_assert_eq(rf_graph_nodes(empty), 0);
	cr_assert_eq(try_exec_create(empty, &ep), RF_EINVAL, "ring graph of 0 blocks");
	rf_graph_destroy(empty);

	rf_graph *g = NULL;
	cr_assert_eq(rf_graph_ring(4, 2, 1, &g), RF_OK);
	rf_exec *e;
	cr_assert_eq(rf_exec_create(NULL, &ep, &e), RF_EINVAL);
	cr_assert_eq(rf_exec_create(g, NULL, &e), RF_EINVAL);
	cr_assert_eq(rf_exec_create(g, &ep, NULL), RF_EINVAL);
	ep.slot_bytes = 0;
	cr_assert_eq(try_exec_create(g, &ep), RF_EINVAL, "slot_bytes 0");
	ep = exec_params(64);
	ep.flags = 4;
	cr_assert_eq(try_exec_create(g, &ep), RF_EINVAL, "flags 4");
	ep = exec_params(64);
	ep.backend = "nope";
	cr_assert_eq(try_exec_create(g, &ep), RF_ENODEV, "backend nope");
	/* Backend from the environment when params.backend is NULL. */
	ep = exec_params(64);
	ep.backend = NULL;
	setenv("RINGFETCH_BACKEND", "gpu", 1);
	cr_assert_eq(try_exec_create(g, &ep), RF_ECONFIG, "RINGFETCH_BACKEND=gpu");
	cr_assert(strstr(rf_errmsg(), "RINGFETCH_BACKEND") != NULL, "%s", rf_errmsg());
	setenv("RINGFETCH_BACKEND", test_backend(), 1);
	e = NULL;
	cr_assert_eq(rf_exec_create(g, &ep, &e), RF_OK, "%s", rf_errmsg());
	cr_assert_str_eq(rf_exec_backend(e), test_backend());
	rf_exec_destroy(e);
	rf_graph_destroy(g);

	cr_assert_str_eq(rf_exec_backend(NULL), "");
	rf_exec_destroy(NULL);
	leak_check();
}

Test(exec, run_rejects_bad_inputs_before_any_work)
{
	rf_graph *g = NULL;
	cr_assert_eq(rf_graph_ring(5, 2, 1, &g), RF_OK);
	rf_exec *e = make_exec(g, 32);
	rf_graph_destroy(g);
	blockset bs;
	bs_random(&bs, 5, 32, 3);
	size_t calls = 0;
	cr_assert_eq(rf_exec_run(NULL, 5, bs_srcs(&bs), bs.sizes, count_cb, &calls), RF_EINVAL);
	cr_assert_eq(rf_exec_run(e, 5, NULL, bs.sizes, count_cb, &calls), RF_EINVAL);
	cr_assert_eq(rf_exec_run(e, 5, bs_srcs(&bs), NULL, count_cb, &calls), RF_EINVAL);
	cr_assert_eq(rf_exec_run(e, 5, bs_srcs(&bs), bs.sizes, NULL, &calls), RF_EINVAL);
	size_t saved = bs.sizes[4];
	bs.sizes[4] = 33;
	cr_assert_eq(rf_exec_run(e, 5, bs_srcs(&bs), bs.sizes, count_cb, &calls), RF_EINVAL);
	cr_assert(has_number(rf_errmsg(), 4), "errmsg does not name block 4: %s", rf_errmsg());
	bs.sizes[4] = saved;
	const void *src = bs.srcs[3];
	size_t sz = bs.sizes[3];
	bs.srcs[3] = NULL;
	bs.sizes[3] = 1;
	cr_assert_eq(rf_exec_run(e, 5, bs_srcs(&bs), bs.sizes, count_cb, &calls), RF_EINVAL);
	cr_assert(has_number(rf_errmsg(), 3), "errmsg does not name block 3: %s", rf_errmsg());
	bs.srcs[3] = src;
	bs.sizes[3] = sz;
	cr_assert_eq(calls, 0, "compute called %zu times on invalid input", calls);
	cr_assert_eq(rf_exec_run(e, 5, bs_srcs(&bs), bs.sizes, count_cb, &calls), RF_OK, "%s", rf_errmsg());
	cr_assert_eq(calls, 5);
	bs_free(&bs);
	rf_exec_destroy(e);
	leak_check();
}

Test(exec, callback_failure_then_reusable)
{
	uint64_t seed = test_seed();
	const size_t n = 10;
	for (unsigned depth = 1; depth <= 4; depth++) {
		rf_graph *g = NULL;
		cr_assert_eq(rf_graph_ring(n, depth, 1, &g), RF_OK);
		rf_exec *e = make_exec(g, 40);
		rf_graph_destroy(g);
		ring_expect r;
		ring_expect_make(&r, n, depth);
		const size_t ks[] = {0, depth, n - 1};
		for (size_t ki = 0; ki < sizeof ks / sizeof ks[0]; ki++) {
			size_t k = ks[ki];
			int value = -300 - (int)k;
			blockset bs;
			bs_random(&bs, n, 40, seed + k);
			checker c;
			ck_order(&c, &bs, r.order, n, r.slot_of);
			c.fail_at = k;
			c.fail_value = value;
			int rc = rf_exec_run(e, n, bs_srcs(&bs), bs.sizes, check_cb, &c);
			bs_free(&bs);
			cr_assert_eq(rc, RF_ECALLBACK, "depth %u fail at %zu: %s", depth, k, rf_err_name(rc));
			cr_assert_str_empty(c.err, "%s", c.err);
			cr_assert_eq(c.calls, k + 1, "depth %u fail at %zu: %zu computes", depth, k, c.calls);
			cr_assert(has_number(rf_errmsg(), (long long)k), "errmsg does not name block %zu: %s", k,
				  rf_errmsg());
			cr_assert(has_number(rf_errmsg(), value), "errmsg does not name value %d: %s", value, rf_errmsg());

			bs_random(&bs, n, 40, seed + 100 + k);
			checked_exec_run(e, &bs, r.order, n, r.slot_of, 0, "run after failure", seed);
			bs_free(&bs);
		}
		ring_expect_free(&r);
		rf_exec_destroy(e);
	}
	leak_check();
}

typedef struct reenter {
	rf_exec *e;
	const blockset *bs;
	int nested_rc;
	size_t nested_calls, calls;
} reenter;

static int reenter_cb(void *user, const rf_block *blk)
{
	reenter *r = user;
	r->calls++;
	if (blk->index == 1)
		r->nested_rc = rf_exec_run(r->e, r->bs->n, bs_srcs(r->bs), r->bs->sizes, count_cb, &r->nested_calls);
	return 0;
}

Test(exec, reentrant_run_is_ebusy)
{
	rf_graph *g = NULL;
	cr_assert_eq(rf_graph_ring(4, 2, 1, &g), RF_OK);
	rf_exec *e = make_exec(g, 32);
	rf_graph_destroy(g);
	blockset bs;
	bs_random(&bs, 4, 32, 5);
	reenter r = {e, &bs, 12345, 0, 0};
	int rc = rf_exec_run(e, 4, bs_srcs(&bs), bs.sizes, reenter_cb, &r);
	cr_assert_eq(rc, RF_OK, "%s", rf_errmsg());
	cr_assert_eq(r.nested_rc, RF_EBUSY, "nested rf_exec_run: %s", rf_err_name(r.nested_rc));
	cr_assert_eq(r.nested_calls, 0);
	cr_assert_eq(r.calls, 4);
	bs_free(&bs);
	rf_exec_destroy(e);
	leak_check();
}
