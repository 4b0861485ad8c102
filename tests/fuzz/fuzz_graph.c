/* tests/fuzz/fuzz_graph.c — libFuzzer target for the job-graph API (<ringfetch/graph.h>).
 *
 * The input is a program: each op byte picks an API call, the bytes after it its arguments (missing
 * bytes read as 0). Calls include invalid ones (unknown kinds, queues >= RF_MAX_QUEUES, slots >=
 * RF_MAX_SLOTS, huge blocks, flags, out-of-range and self edges, removal of absent edges).
 *
 * A shadow model (nodes, explicit edges) is kept beside the graph, and an independent reference
 * validator — written from the header's rules, sharing no code with graph/ — decides what
 * rf_graph_validate must return. Checked, abort() on violation:
 *  - every return code is RF_OK or one of the RF_E* codes, and rf_errmsg() is non-empty after a failure;
 *  - node/edge counts, rf_graph_node and rf_graph_has_edge agree with the model;
 *  - rf_graph_validate agrees with the reference (OK / RF_EINVAL cycle / RF_EHAZARD), STAGE nodes and
 *    their staging slots included;
 *  - validate OK <=> lower OK; the lowered program uses only existing nodes, each COPY/COMPUTE/STAGE
 *    node exactly once on its own queue in queue order, signals count up from 1, and a simulation of the
 *    program (queues stepping, WAIT blocking until the awaited signal) finishes without deadlock and
 *    runs every node after all of its work ancestors;
 *  - rf_graph_dot two-call sizing is exact and never writes past cap (buffers are exact-size mallocs);
 *  - small graphs (<= 64 nodes, blocks < 64) run on the "cpu" backend: every compute sees exactly the
 *    bytes of its block, each COMPUTE node runs once, a failing callback gives RF_ECALLBACK and the
 *    exec stays usable.
 * Everything created is destroyed (LSan checks).
 */
#include <ringfetch.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_NODES 256   /* add_node is skipped beyond this: keeps the reference cheap */
#define EXEC_NODES 64   /* exec only graphs this small */
#define EXEC_BLOCKS 64  /* ... with every block below this */
#define SLOT_BYTES 64
#define WORDS ((MAX_NODES + 63) / 64)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                                                \
	do {                                                                                       \
		if (!(cond)) {                                                                     \
			fprintf(stderr, "fuzz_graph: invariant failed at %s:%d: %s (rf_errmsg: %s)\n", \
				__FILE__, __LINE__, #cond, rf_errmsg());                           \
			abort();                                                                   \
		}                                                                                  \
	} while (0)

/* ---- input ------------------------------------------------------------------------------------ */

typedef struct reader {
	const uint8_t *p;
	size_t n, i;
} reader;

static unsigned u8(reader *r)
{
	return r->i < r->n ? r->p[r->i++] : 0;
}

/* ---- return-code checks ----------------------------------------------------------------------- */

static int rc_known(int rc)
{
	return rc == RF_OK || (rc <= RF_EINVAL && rc >= RF_ECONFIG);
}

static int chk(int rc)
{
	CHECK(rc_known(rc));
	if (rc != RF_OK)
		CHECK(rf_errmsg()[0] != '\0');
	return rc;
}

/* ---- the shadow model ------------------------------------------------------------------------- */

typedef struct model {
	size_t n;
	rf_node_desc nodes[MAX_NODES];
	uint64_t edge[MAX_NODES][WORDS]; /* explicit edges from -> to */
	size_t nedges;
} model;

static int has(const uint64_t *set, size_t i)
{
	return (int)((set[i / 64] >> (i % 64)) & 1u);
}

static void put(uint64_t *set, size_t i)
{
	set[i / 64] |= (uint64_t)1 << (i % 64);
}

/* Ancestors (strict) of every node in the effective graph (explicit edges plus queue order: each node
 * after the previous node of its queue); 0 with anc filled, or -1 on a cycle. Kahn's algorithm. */
static int ref_ancestors(const model *m, uint64_t (*anc)[WORDS])
{
	size_t qprev[MAX_NODES], qlast[RF_MAX_QUEUES], indeg[MAX_NODES], order[MAX_NODES], head = 0, tail = 0;
	for (unsigned q = 0; q < RF_MAX_QUEUES; q++)
		qlast[q] = SIZE_MAX;
	for (size_t v = 0; v < m->n; v++) {
		qprev[v] = qlast[m->nodes[v].queue];
		qlast[m->nodes[v].queue] = v;
	}
	memset(anc, 0, sizeof(uint64_t) * WORDS * m->n);
	for (size_t v = 0; v < m->n; v++) {
		indeg[v] = 0;
		for (size_t u = 0; u < m->n; u++)
			indeg[v] += has(m->edge[u], v) || qprev[v] == u;
		if (indeg[v] == 0)
			order[tail++] = v;
	}
	while (head < tail) {
		size_t u = order[head++];
		for (size_t v = 0; v < m->n; v++) {
			if (!has(m->edge[u], v) && qprev[v] != u)
				continue;
			for (size_t w = 0; w < WORDS; w++)
				anc[v][w] |= anc[u][w];
			put(anc[v], u);
			if (--indeg[v] == 0)
				order[tail++] = v;
		}
	}
	return tail == m->n ? 0 : -1;
}

/* The STAGE node of block b (the first), or SIZE_MAX. */
static size_t ref_stage_of(const model *m, size_t b)
{
	for (size_t u = 0; u < m->n; u++)
		if (m->nodes[u].kind == RF_NODE_STAGE && m->nodes[u].block == b)
			return u;
	return SIZE_MAX;
}

/* What rf_graph_validate must return, from the header's rules alone. */
static int ref_validate(const model *m, uint64_t (*anc)[WORDS])
{
	if (ref_ancestors(m, anc) != 0)
		return RF_EINVAL;
	for (size_t v = 0; v < m->n; v++) {
		const rf_node_desc *d = &m->nodes[v];
		if (d->kind == RF_NODE_COMPUTE) { /* RAW */
			int ok = 0;
			for (size_t u = 0; u < m->n && !ok; u++)
				ok = has(anc[v], u) && m->nodes[u].kind == RF_NODE_COPY &&
				     m->nodes[u].block == d->block && m->nodes[u].slot == d->slot;
			if (!ok)
				return RF_EHAZARD;
		}
		if (d->kind == RF_NODE_STAGE) {
			for (size_t u = 0; u < m->n; u++) {
				const rf_node_desc *e = &m->nodes[u];
				if (u != v && e->kind == RF_NODE_STAGE && e->block == d->block)
					return RF_EHAZARD; /* a block staged twice */
				if (e->kind == RF_NODE_STAGE && e->slot == d->slot && e->block < d->block && !has(anc[v], u))
					return RF_EHAZARD; /* WAW on the staging slot */
				size_t es = e->kind == RF_NODE_COPY ? ref_stage_of(m, e->block) : SIZE_MAX;
				if (es != SIZE_MAX && m->nodes[es].slot == d->slot && e->block < d->block && !has(anc[v], u))
					return RF_EHAZARD; /* WAR: a copy of an earlier block staged in this slot */
			}
			continue;
		}
		if (d->kind != RF_NODE_COPY)
			continue;
		size_t sv = ref_stage_of(m, d->block);
		if (sv != SIZE_MAX && !has(anc[v], sv))
			return RF_EHAZARD; /* RAW on the staging slot */
		for (size_t u = 0; u < m->n; u++) {
			const rf_node_desc *e = &m->nodes[u];
			if (u == v || e->kind == RF_NODE_WAIT || e->kind == RF_NODE_STAGE || e->slot != d->slot)
				continue;
			if (e->kind == RF_NODE_COPY && e->block == d->block)
				return RF_EHAZARD; /* a block copied into a slot twice */
			if (e->block < d->block && !has(anc[v], u))
				return RF_EHAZARD; /* WAR (e a compute) or WAW (e a copy) */
		}
	}
	return RF_OK;
}

/* ---- lowering checks -------------------------------------------------------------------------- */

static void check_program(const model *m, uint64_t (*anc)[WORDS], const rf_program *p)
{
	unsigned nq = rf_program_queues(p);
	unsigned maxq = 0;
	for (size_t v = 0; v < m->n; v++)
		if (m->nodes[v].queue + 1 > maxq)
			maxq = m->nodes[v].queue + 1;
	CHECK(nq == maxq);
	CHECK(nq <= RF_MAX_QUEUES);
	CHECK(rf_program_ops(p, nq) == 0);
	rf_op dummy;
	CHECK(chk(rf_program_op(p, nq, 0, &dummy)) == RF_EINVAL);
	CHECK(chk(rf_program_op(p, 0, rf_program_ops(p, 0), &dummy)) == RF_EINVAL);
	CHECK(chk(rf_program_op(p, 0, 0, NULL)) == RF_EINVAL);

	size_t total = 0;
	for (unsigned q = 0; q < nq; q++)
		total += rf_program_ops(p, q);
	rf_op *ops = malloc(sizeof *ops * (total + 1));
	size_t *start = malloc(sizeof *start * (nq + 1));
	CHECK(ops != NULL && start != NULL);
	size_t k = 0, seen[MAX_NODES] = {0}, counted[5] = {0};
	for (unsigned q = 0; q < nq; q++) {
		start[q] = k;
		uint64_t signals = 0;
		size_t last_node = 0;
		int any = 0;
		for (size_t i = 0; i < rf_program_ops(p, q); i++, k++) {
			rf_op *o = &ops[k];
			CHECK(chk(rf_program_op(p, q, i, o)) == RF_OK);
			CHECK(o->queue == q);
			CHECK(o->node < m->n);
			CHECK((unsigned)o->kind <= RF_OP_STAGE);
			counted[o->kind]++;
			const rf_node_desc *d = &m->nodes[o->node];
			switch (o->kind) {
			case RF_OP_COPY:
			case RF_OP_COMPUTE:
			case RF_OP_STAGE:
				CHECK(d->kind == (o->kind == RF_OP_COPY ? RF_NODE_COPY : o->kind == RF_OP_STAGE ? RF_NODE_STAGE
														: RF_NODE_COMPUTE));
				CHECK(d->queue == q && d->block == o->block && d->slot == o->slot);
				CHECK(seen[o->node]++ == 0);
				CHECK(!any || o->node > last_node); /* queue order */
				last_node = o->node, any = 1;
				break;
			case RF_OP_SIGNAL:
				CHECK(d->queue == q);
				CHECK(o->value == ++signals);
				break;
			case RF_OP_WAIT:
				CHECK(d->queue == q);
				CHECK(o->wait_queue < nq && o->wait_queue != q);
				CHECK(o->value >= 1);
				break;
			}
		}
	}
	start[nq] = k;
	for (size_t v = 0; v < m->n; v++)
		CHECK(seen[v] == (m->nodes[v].kind == RF_NODE_WAIT ? 0u : 1u));
	CHECK(rf_program_count(p, RF_OP_COPY) == counted[RF_OP_COPY]);
	CHECK(rf_program_count(p, RF_OP_COMPUTE) == counted[RF_OP_COMPUTE]);
	CHECK(rf_program_count(p, RF_OP_SIGNAL) == counted[RF_OP_SIGNAL]);
	CHECK(rf_program_count(p, RF_OP_WAIT) == counted[RF_OP_WAIT]);
	CHECK(rf_program_count(p, RF_OP_STAGE) == counted[RF_OP_STAGE]);

	/* Simulate: round robin over queues; a WAIT blocks until wait_queue has signalled value. A work
	 * op may run only once every work ancestor of its node has run. No deadlock allowed. */
	size_t pc[RF_MAX_QUEUES] = {0};
	uint64_t sig[RF_MAX_QUEUES] = {0};
	uint64_t done[WORDS] = {0};
	for (;;) {
		int progress = 0, finished = 1;
		for (unsigned q = 0; q < nq; q++) {
			while (start[q] + pc[q] < start[q + 1]) {
				const rf_op *o = &ops[start[q] + pc[q]];
				if (o->kind == RF_OP_WAIT) {
					if (sig[o->wait_queue] < o->value)
						break;
				} else if (o->kind == RF_OP_SIGNAL) {
					sig[q] = o->value;
				} else {
					for (size_t u = 0; u < m->n; u++)
						if (has(anc[o->node], u) && m->nodes[u].kind != RF_NODE_WAIT)
							CHECK(has(done, u)); /* a dependency ran first */
					put(done, o->node);
				}
				pc[q]++, progress = 1;
			}
			if (start[q] + pc[q] < start[q + 1])
				finished = 0;
		}
		if (finished)
			break;
		CHECK(progress); /* otherwise the lowered program deadlocks */
	}
	free(ops);
	free(start);
}

/* ---- exec ------------------------------------------------------------------------------------- */

typedef struct run_ctx {
	const uint8_t *const *srcs;
	const size_t *sizes;
	size_t nblocks, calls, fail_at; /* fail_at: 1-based call that returns non-zero; 0 none */
	unsigned slots;
} run_ctx;

static int on_compute(void *user, const rf_block *b)
{
	run_ctx *c = user;
	CHECK(b->index < c->nblocks);
	CHECK(b->slot < c->slots);
	CHECK(b->bytes == c->sizes[b->index]);
	CHECK(b->stream == NULL);
	CHECK(b->bytes == 0 || memcmp(b->data, c->srcs[b->index], b->bytes) == 0);
	c->calls++;
	return c->fail_at != 0 && c->calls == c->fail_at ? 7 : 0;
}

static void try_exec(const model *m, const rf_graph *g, reader *r)
{
	size_t computes = 0, maxblock = 0;
	unsigned slots = 0;
	if (m->n > EXEC_NODES)
		return;
	for (size_t v = 0; v < m->n; v++) {
		if (m->nodes[v].kind == RF_NODE_WAIT)
			continue;
		if (m->nodes[v].block >= EXEC_BLOCKS)
			return;
		if (m->nodes[v].block + 1 > maxblock)
			maxblock = m->nodes[v].block + 1;
		if (m->nodes[v].slot + 1 > slots)
			slots = m->nodes[v].slot + 1;
		computes += m->nodes[v].kind == RF_NODE_COMPUTE;
	}
	unsigned opt = u8(r);
	rf_exec_params ep = {"cpu", SLOT_BYTES, 0, (opt & 0x80) ? 1u : 0u};
	rf_exec *e = NULL;
	int rc = chk(rf_exec_create(g, &ep, &e));
	if (ep.flags != 0 || m->n == 0) {
		CHECK(rc == RF_EINVAL && e == NULL);
		return;
	}
	if (rc != RF_OK) {
		/* validate said OK; what else may refuse? slot memory on a broken host only */
		CHECK(rc == RF_EBACKEND || rc == RF_ENOMEM);
		return;
	}
	CHECK(strcmp(rf_exec_backend(e), "cpu") == 0);

	size_t nblocks = maxblock + (opt & 3);
	uint8_t *buf[EXEC_BLOCKS + 4];
	size_t sizes[EXEC_BLOCKS + 4];
	for (size_t b = 0; b < nblocks; b++) {
		sizes[b] = (b * 13 + opt) % (SLOT_BYTES + 1);
		buf[b] = malloc(sizes[b] + 1);
		CHECK(buf[b] != NULL);
		for (size_t i = 0; i < sizes[b]; i++)
			buf[b][i] = (uint8_t)(b * 31 + i * 7 + opt);
	}
	run_ctx c = {(const uint8_t *const *)buf, sizes, nblocks, 0, 0, slots};
	/* a first run that fails at some compute, when asked: RF_ECALLBACK, and the exec stays usable */
	if ((opt & 0x40) && computes > 0) {
		c.fail_at = 1 + (opt >> 2) % computes;
		rc = chk(rf_exec_run(e, nblocks, (const void *const *)buf, sizes, on_compute, &c));
		CHECK(rc == RF_ECALLBACK);
		CHECK(c.calls == c.fail_at);
		c.calls = 0, c.fail_at = 0;
	}
	rc = chk(rf_exec_run(e, nblocks, (const void *const *)buf, sizes, on_compute, &c));
	CHECK(rc == RF_OK);
	CHECK(c.calls == computes);
	/* nblocks below the largest block used is refused before any work */
	if (maxblock > 0) {
		c.calls = 0;
		rc = chk(rf_exec_run(e, maxblock - 1, (const void *const *)buf, sizes, on_compute, &c));
		CHECK(rc == RF_EINVAL && c.calls == 0);
	}
	/* a size over slot_bytes is refused before any work */
	if (nblocks > 0) {
		size_t big[EXEC_BLOCKS + 4];
		memcpy(big, sizes, sizeof sizes[0] * nblocks);
		big[nblocks - 1] = SLOT_BYTES + 1;
		uint8_t *tmp = buf[nblocks - 1];
		buf[nblocks - 1] = malloc(SLOT_BYTES + 1);
		CHECK(buf[nblocks - 1] != NULL);
		memset(buf[nblocks - 1], 0, SLOT_BYTES + 1);
		c.calls = 0;
		rc = chk(rf_exec_run(e, nblocks, (const void *const *)buf, big, on_compute, &c));
		CHECK(rc == RF_EINVAL && c.calls == 0);
		free(buf[nblocks - 1]);
		buf[nblocks - 1] = tmp;
	}
	for (size_t b = 0; b < nblocks; b++)
		free(buf[b]);
	rf_exec_destroy(e);
}

/* ---- one input -------------------------------------------------------------------------------- */

static size_t pick_block(unsigned b)
{
	switch (b >> 5) {
	case 7:
		return (size_t)INT64_MAX / 8 - 1 + (b & 1); /* the largest accepted (blocks < INT64_MAX / 8), and one more */
	case 6:
		return b & 1 ? SIZE_MAX : (size_t)1 << 40;
	default:
		return b & 15;
	}
}

static unsigned pick_slot(unsigned b)
{
	switch (b >> 5) {
	case 7:
		return RF_MAX_SLOTS - 1 + (b & 1);
	case 6:
		return b & 1 ? UINT32_MAX : 100;
	default:
		return b & 7;
	}
}

static unsigned pick_queue(unsigned b)
{
	switch (b >> 5) {
	case 7:
		return RF_MAX_QUEUES - 1 + (b & 1);
	case 6:
		return b & 1 ? UINT32_MAX : 1000;
	default:
		return b & 3;
	}
}

static size_t pick_id(const model *m, unsigned b)
{
	if (b == 255)
		return SIZE_MAX;
	return b % (m->n + 2); /* sometimes one or two past the end */
}

static void check_reads(const model *m, const rf_graph *g)
{
	CHECK(rf_graph_nodes(g) == m->n);
	CHECK(rf_graph_edges(g) == m->nedges);
	rf_node_desc d;
	for (size_t v = 0; v < m->n; v++) {
		CHECK(chk(rf_graph_node(g, v, &d)) == RF_OK);
		CHECK(d.kind == m->nodes[v].kind && d.queue == m->nodes[v].queue && d.flags == 0);
		CHECK(d.block == m->nodes[v].block && d.slot == m->nodes[v].slot);
	}
	CHECK(chk(rf_graph_node(g, m->n, &d)) == RF_EINVAL);
	CHECK(chk(rf_graph_node(g, 0, NULL)) == RF_EINVAL);
}

static void do_dot(const rf_graph *g, unsigned b)
{
	size_t need = 0;
	CHECK(chk(rf_graph_dot(g, NULL, 0, &need)) == RF_ENOSPC);
	CHECK(need >= 1);
	size_t cap = b < 128 ? b % (need + 1) : need - (b & 1); /* small, exact, or one short */
	char *buf = malloc(cap ? cap : 1);
	CHECK(buf != NULL);
	size_t len = 0;
	int rc = chk(rf_graph_dot(g, cap ? buf : NULL, cap, &len));
	if (cap >= need) {
		CHECK(rc == RF_OK && len == need && strlen(buf) + 1 == need);
		CHECK(strncmp(buf, "digraph", 7) == 0);
	} else {
		CHECK(rc == RF_ENOSPC && len == need);
	}
	free(buf);
	CHECK(chk(rf_graph_dot(g, NULL, 4, &len)) == RF_EINVAL);
	CHECK(chk(rf_graph_dot(g, NULL, 0, NULL)) == RF_EINVAL);
}

static model M;
static uint64_t ANC[MAX_NODES][WORDS];

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	reader r = {data, size, 0};
	model *m = &M;
	memset(m, 0, sizeof *m);

	rf_graph *g = NULL;
	CHECK(chk(rf_graph_create(1, &g)) == RF_EINVAL && g == NULL);
	CHECK(chk(rf_graph_create(0, NULL)) == RF_EINVAL);
	CHECK(chk(rf_graph_create(0, &g)) == RF_OK && g != NULL);

	while (r.i < r.n) {
		unsigned op = u8(&r) % 8;
		switch (op) {
		case 0:
		case 1: { /* add_node (twice as likely) */
			unsigned kb = u8(&r), qb = u8(&r), bb = u8(&r), sb = u8(&r);
			rf_node_desc d = {(rf_node_kind)(kb % 5 < 4 ? kb % 5 : (kb >> 3) + 4), pick_queue(qb),
					  pick_block(bb), pick_slot(sb), (kb & 0x80) && (kb & 0x40) ? 1u : 0u};
			int valid = (unsigned)d.kind <= RF_NODE_STAGE && d.queue < RF_MAX_QUEUES && d.flags == 0 &&
				    (d.kind == RF_NODE_WAIT ||
				     (d.slot < RF_MAX_SLOTS && d.block < (size_t)INT64_MAX / 8));
			if (valid && m->n >= MAX_NODES)
				break;
			size_t id = SIZE_MAX;
			int rc = chk(rf_graph_add_node(g, &d, (kb & 0x20) ? NULL : &id));
			CHECK(rc == (valid ? RF_OK : RF_EINVAL));
			if (rc != RF_OK)
				break;
			CHECK((kb & 0x20) || id == m->n);
			if (d.kind == RF_NODE_WAIT)
				d.block = 0, d.slot = 0;
			m->nodes[m->n++] = d;
			break;
		}
		case 2: { /* add_edge */
			size_t from = pick_id(m, u8(&r)), to = pick_id(m, u8(&r));
			int rc = chk(rf_graph_add_edge(g, from, to));
			if (from >= m->n || to >= m->n || from == to) {
				CHECK(rc == RF_EINVAL);
				break;
			}
			CHECK(rc == RF_OK);
			if (!has(m->edge[from], to))
				put(m->edge[from], to), m->nedges++;
			CHECK(rf_graph_has_edge(g, from, to) == 1);
			break;
		}
		case 3: { /* remove_edge */
			size_t from = pick_id(m, u8(&r)), to = pick_id(m, u8(&r));
			int exists = from < m->n && to < m->n && has(m->edge[from], to);
			CHECK(rf_graph_has_edge(g, from, to) == exists);
			int rc = chk(rf_graph_remove_edge(g, from, to));
			CHECK(rc == (exists ? RF_OK : RF_EINVAL));
			if (exists)
				m->edge[from][to / 64] &= ~((uint64_t)1 << (to % 64)), m->nedges--;
			CHECK(rf_graph_has_edge(g, from, to) == 0);
			break;
		}
		case 4: /* reads */
			check_reads(m, g);
			break;
		case 5:
			do_dot(g, u8(&r));
			break;
		case 6:
		case 7: { /* validate, lower, and maybe exec */
			int want = ref_validate(m, ANC);
			int rc = chk(rf_graph_validate(g));
			if (getenv("FUZZ_VERBOSE") != NULL) /* replaying one input: say what validate said */
				fprintf(stderr, "validate: %zu nodes, %zu edges: %s %s\n", m->n, m->nedges,
					rf_err_name(rc), rf_errmsg());
			if (rc != want) {
				fprintf(stderr, "fuzz_graph: validate returned %s, reference %s (%zu nodes)\n",
					rf_err_name(rc), rf_err_name(want), m->n);
				abort();
			}
			rf_program *p = NULL;
			int lrc = chk(rf_graph_lower(g, &p));
			CHECK(lrc == rc);
			if (lrc != RF_OK) {
				CHECK(p == NULL);
			} else {
				CHECK(p != NULL);
				check_program(m, ANC, p);
				rf_program_destroy(p);
				if (op == 7)
					try_exec(m, g, &r);
			}
			break;
		}
		}
	}
	check_reads(m, g);
	rf_graph_destroy(g);
	return 0;
}
