/* graph/lower.c — lowering a validated graph to per-queue programs (rules: include/ringfetch/graph.h),
 * the periodic program of a ring, and reading programs back. */
#include "base/alloc.h"
#include "graph/graph_int.h"
#include "graph/program.h"
#include "base/error.h"

#include <stdlib.h>
#include <string.h>

/* An empty program with room for nops ops, or NULL. */
static struct rf_program *rf__prog_alloc(size_t nops)
{
	struct rf_program *p = rf__calloc(1, sizeof *p);
	if (p == NULL)
		return NULL;
	p->ops = rf__malloc((nops ? nops : 1) * sizeof *p->ops);
	p->qidx = rf__malloc((nops ? nops : 1) * sizeof *p->qidx);
	if (p->ops == NULL || p->qidx == NULL) {
		rf_program_destroy(p);
		return NULL;
	}
	return p;
}

void rf_program_destroy(rf_program *p)
{
	if (p == NULL)
		return;
	free(p->ops);
	free(p->qidx);
	free(p);
}

/* Fill qidx/qstart from ops[].queue, raise nqueues to cover them, set compute_queues. */
static void rf__prog_index(struct rf_program *p)
{
	size_t count[RF_MAX_QUEUES] = {0};
	unsigned nq = 0;
	p->compute_queues = 0;
	for (size_t i = 0; i < p->nops; i++) {
		count[p->ops[i].queue]++;
		p->compute_queues |= (uint64_t)(p->ops[i].kind == RF_OP_COMPUTE) << p->ops[i].queue;
		if (p->ops[i].queue + 1u > nq)
			nq = p->ops[i].queue + 1u;
	}
	p->nqueues = nq > p->nqueues ? nq : p->nqueues;
	p->qstart[0] = 0;
	for (unsigned q = 0; q < RF_MAX_QUEUES; q++)
		p->qstart[q + 1] = p->qstart[q] + count[q];
	size_t fill[RF_MAX_QUEUES];
	memcpy(fill, p->qstart, sizeof fill);
	for (size_t i = 0; i < p->nops; i++)
		p->qidx[fill[p->ops[i].queue]++] = i;
}

/* ---- generic lowering ------------------------------------------------------------------------------ */

/* l->p has room for every op: a wait per in-edge at most, then the node's op and its signal. */
typedef struct rf__lower {
	const rf_graph *g;
	struct rf_program *p;
	size_t nst;
	rf__stage_ent *st; /* the STAGE nodes by block: the staging slot a COPY reads */
	int64_t *sigval;     /* value signalled after node i, 0 = none */
	int64_t *waited;     /* waited[q * RF_MAX_QUEUES + wq]: highest value q already waited for */
	int64_t last[RF_MAX_QUEUES]; /* the value each queue signalled last (they count up from 1) */
} rf__lower;

static bool rf__has_foreign_consumer(const rf_graph *g, size_t x)
{
	for (uint32_t e = 0; e < g->out[x].n; e++)
		if (g->nodes[g->out[x].v[e]].queue != g->nodes[x].queue)
			return true;
	return false;
}

/* Waits before node x: per foreign queue, only the latest producer, and only if not already waited. */
static void rf__lower_waits(rf__lower *l, size_t x)
{
	const rf_graph *g = l->g;
	unsigned q = g->nodes[x].queue;
	int64_t need[RF_MAX_QUEUES] = {0};
	for (uint32_t e = 0; e < g->in[x].n; e++) {
		size_t p = g->in[x].v[e];
		unsigned wq = g->nodes[p].queue;
		if (wq != q && l->sigval[p] > need[wq])
			need[wq] = l->sigval[p];
	}
	for (unsigned wq = 0; wq < RF_MAX_QUEUES; wq++) {
		int64_t *done = &l->waited[q * RF_MAX_QUEUES + wq];
		if (need[wq] <= *done)
			continue;
		*done = need[wq];
		l->p->ops[l->p->nops++] = rf__op_wait(q, wq, need[wq], 0, 0, x);
	}
}

static void rf__lower_node(rf__lower *l, size_t x)
{
	const rf_node_desc *d = &l->g->nodes[x];
	struct rf_program *p = l->p;
	rf__lower_waits(l, x);
	if (d->kind != RF_NODE_WAIT) {
		int64_t b = (int64_t)d->block;
		const rf__stage_ent *e = rf__stage_find(l->st, l->nst, d->block);
		rf__op op = d->kind == RF_NODE_COPY    ? rf__op_copy(d->queue, d->slot, e ? e->slot : RF__NO_STAGE, b, x)
			    : d->kind == RF_NODE_STAGE ? rf__op_stage(d->queue, d->slot, b, x)
						       : rf__op_compute(d->queue, d->slot, b, x);
		p->ops[p->nops++] = op;
	}
	if (rf__has_foreign_consumer(l->g, x)) {
		l->sigval[x] = ++l->last[d->queue];
		p->ops[p->nops++] = rf__op_signal(d->queue, l->sigval[x], 0, 0, x);
	}
}

int rf_graph_lower(const rf_graph *g, rf_program **out)
{
	if (g == NULL || out == NULL)
		return rf__err(RF_EINVAL, "rf_graph_lower: %s is NULL", g == NULL ? "g" : "out");
	int rc = rf_graph_validate(g);
	if (rc != RF_OK)
		return rc;
	size_t *order, *pos;
	if ((rc = rf__graph_topo(g, &order, &pos)) != RF_OK)
		return rc;
	rf__lower l = {g, rf__prog_alloc(g->nedges + 2 * g->n), 0, NULL, rf__calloc(g->n + 1, sizeof(int64_t)),
		       rf__calloc((size_t)RF_MAX_QUEUES * RF_MAX_QUEUES, sizeof(int64_t)), {0}};
	rc = (l.p && l.sigval && l.waited && rf__graph_stages(g, &l.st, &l.nst) == RF_OK) ? RF_OK : RF_ENOMEM;
	for (size_t i = 0; i < g->n && rc == RF_OK; i++)
		rf__lower_node(&l, order[i]);
	free(order);
	free(pos);
	free(l.st);
	free(l.sigval);
	free(l.waited);
	if (rc != RF_OK) {
		rf_program_destroy(l.p);
		return rf__err(RF_ENOMEM, "rf_graph_lower: out of memory");
	}
	l.p->nqueues = g->nqueues;
	l.p->nslots = g->nslots;
	l.p->nstage = g->nstage;
	l.p->nblocks_min = g->nblocks;
	rf__prog_index(l.p);
	*out = l.p;
	return RF_OK;
}

/* ---- the periodic program of a ring: the plan's steps, lowered once --------------------------------- */

typedef struct rf__ring_tmpl {
	struct rf_program *p;
	size_t cap;
	unsigned depth, sdepth, kq;
	int64_t base; /* the iteration's first block: template blocks and values are relative to it */
	size_t node;  /* template id of the current block's ops (the index of its first op), for traces */
} rf__ring_tmpl;

/* The ops of one plan step as rf_graph_lower lowers rf__graph_ring's nodes for it, in the template's
 * terms (graph/program.h): blocks relative to the iteration, values "block + 1" (each queue signals at
 * most once per block, in block order, so its values increase).
 *   PREFETCH b: WAR wait on compute(b - D); copy; signal (for AWAIT b and the WAR wait of stage(b + S))
 *   AWAIT n:    RAW wait on copy(n)'s queue;   COMPUTE n: compute; signal (for the WAR wait of n + D)
 *   staged, S staging slots: PREFETCH x: WAR wait on copy(x - S); stage; signal
 *                            AWAIT b: the copy queue's RAW wait on stage(b) */
static int rf__tmpl_step(rf__ring_tmpl *t, const rf__sstep *st)
{
	const rf_step *s = &st->s;
	int64_t b = (int64_t)s->block - t->base, d = t->depth, S = t->sdepth;
	unsigned slot = rf__mod(b, t->depth), cq = rf__ring_copy_queue(b, t->kq), hq = rf__ring_stage_queue(b, t->kq);
	unsigned stage = S ? rf__mod(b, t->sdepth) : RF__NO_STAGE;
	if (t->p->nops + (s->kind == RF_STEP_PREFETCH ? 3 : s->kind == RF_STEP_AWAIT ? 1 : 2) > t->cap)
		return rf__err(RF_EINVAL, "ring program: the plan has more steps per block than a ring lowers");
	rf__op *o = t->p->ops + t->p->nops;
	if (st->staging && s->kind == RF_STEP_PREFETCH) {
		*o++ = rf__op_wait(hq, cq, b - S + 1, b, b - S, t->node);
		*o++ = rf__op_stage(hq, stage, b, t->node);
		*o++ = rf__op_signal(hq, b + 1, b, b, t->node);
	} else if (st->staging) {
		*o++ = rf__op_wait(cq, hq, b + 1, b, b, t->node);
	} else if (s->kind == RF_STEP_PREFETCH) {
		*o++ = rf__op_wait(cq, 0, b - d + 1, b, b - d, t->node);
		*o++ = rf__op_copy(cq, slot, stage, b, t->node);
		*o++ = rf__op_signal(cq, b + 1, b, b, t->node);
	} else if (s->kind == RF_STEP_AWAIT) {
		*o++ = rf__op_wait(0, cq, b + 1, b, b, t->node);
	} else {
		*o++ = rf__op_compute(0, slot, b, t->node);
		*o++ = rf__op_signal(0, b + 1, b, b + d, t->node);
	}
	t->p->nops = (size_t)(o - t->p->ops);
	if (!st->staging && s->kind == RF_STEP_COMPUTE)
		t->node = t->p->nops;
	return RF_OK;
}

/* One iteration = the steps for blocks n0 .. n0+K-1 past the primes, block n's being those after
 * COMPUTE n-1 up to COMPUTE n; n0 = K, so that a block keeps its queues relative to the iteration. A
 * plan of n0 + K + D + S - 2 blocks has them all. */
static int rf__ring_ops(rf__ring_tmpl *t)
{
	size_t n0 = t->kq, n1 = n0 + t->kq, nsteps = 0, computed = 0;
	rf__sstep *steps = NULL;
	int rc = rf__plan_staged(n1 + t->depth - 1 + (t->sdepth ? t->sdepth - 1 : 0), t->depth, t->sdepth, &steps, &nsteps);
	for (size_t i = 0; i < nsteps && rc == RF_OK; i++) {
		if (computed >= n0 && computed < n1)
			rc = rf__tmpl_step(t, &steps[i]);
		computed += !steps[i].staging && steps[i].s.kind == RF_STEP_COMPUTE;
	}
	free(steps);
	return rc;
}

int rf__ring_program(unsigned depth, unsigned copy_queues, unsigned pins, struct rf_program **out)
{
	/* Callers (rf_pipeline_create) have checked these; a zero would divide by zero below. */
	if (depth == 0 || copy_queues == 0 || (1 + (pins ? 2 : 1) * copy_queues) > RF_MAX_QUEUES ||
	    (size_t)copy_queues * pins > RF_MAX_SLOTS)
		return rf__err(RF_EINVAL, "ring program: depth %u, copy queues %u, %u staging slots each", depth,
			       copy_queues, pins);
	/* Six ops per block (WAR wait, copy, signal; RAW wait, compute, signal), four more when staged
	 * (WAR wait, stage, signal; RAW wait). */
	size_t per = pins ? 10 : 6, cap = per * copy_queues;
	rf__ring_tmpl t = {rf__prog_alloc(cap), cap, depth, copy_queues * pins, copy_queues, copy_queues, 0};
	if (t.p == NULL)
		return rf__err(RF_ENOMEM, "ring program: out of memory");
	int rc = rf__ring_ops(&t);
	/* Anything else: the plan's shape changed under this derivation, and the walker's skip rule fails. */
	if (rc == RF_OK && t.p->nops != t.cap)
		rc = rf__err(RF_EINVAL, "ring program: the plan gave %zu ops for %u blocks, not %zu", t.p->nops,
			     copy_queues, t.cap);
	if (rc != RF_OK) {
		rf_program_destroy(t.p);
		return rc;
	}
	struct rf_program *p = t.p;
	p->nqueues = 1 + (pins ? 2 : 1) * copy_queues;
	p->nslots = depth;
	p->nstage = t.sdepth;
	p->period = copy_queues;
	/* The first iteration is the one whose ops include block 0's first: the staged and primed blocks
	 * come from iterations with negative (skipped) computes. */
	int64_t lead = depth - 1 + (t.sdepth ? t.sdepth - 1 : 0);
	p->iter_begin = -((lead + copy_queues - 1) / copy_queues);
	p->ring = 1;
	rf__prog_index(p);
	*out = p;
	return RF_OK;
}

/* Block b's ops, on queue w = b % W: copy b into its slot; wait for compute(b - 1), on the queue before;
 * compute b; signal "b + 1" for compute(b + 1). Relative to the iteration (blocks 0 .. W-1). A slot's
 * previous reader, compute(b - D), is done before copy b starts without a wait of its own: the queue's
 * compute(b - W) came before it, and that waited for every earlier compute (D >= W). */
int rf__ring_program_local(unsigned depth, unsigned copy_queues, struct rf_program **out)
{
	unsigned w = copy_queues + 1;
	if (copy_queues == 0 || copy_queues >= RF_MAX_QUEUES || depth < w)
		return rf__err(RF_EINVAL, "local ring program: depth %u, copy queues %u", depth, copy_queues);
	struct rf_program *p = rf__prog_alloc(4 * (size_t)w);
	if (p == NULL)
		return rf__err(RF_ENOMEM, "local ring program: out of memory");
	rf__op *o = p->ops;
	for (unsigned q = 0; q < w; q++) {
		int64_t b = q;
		size_t node = (size_t)(o - p->ops);
		*o++ = rf__op_copy(q, q, RF__NO_STAGE, b, node);
		*o++ = rf__op_wait(q, (q + w - 1) % w, b, b, b - 1, node);
		*o++ = rf__op_compute(q, q, b, node);
		*o++ = rf__op_signal(q, b + 1, b, b + 1, node);
	}
	p->nops = (size_t)(o - p->ops);
	p->nqueues = w;
	p->nslots = depth;
	p->period = w;
	rf__prog_index(p);
	*out = p;
	return RF_OK;
}

#ifdef RF_TESTING
void rf__prog_drop_war(struct rf_program *p, int staging)
{
	uint64_t stages = 0; /* queues that stage */
	for (size_t i = 0; i < p->nops; i++)
		stages |= (uint64_t)(p->ops[i].kind == RF_OP_STAGE) << p->ops[i].queue;
	size_t k = 0;
	for (size_t i = 0; i < p->nops; i++) {
		const rf__op *o = &p->ops[i];
		int drop = o->kind == RF_OP_WAIT && (staging ? (stages >> o->queue) & 1 : o->queue != 0 && o->wqueue == 0);
		if (!drop)
			p->ops[k++] = *o;
	}
	p->nops = k;
	rf__prog_index(p);
}
#endif

/* ---- reading programs ------------------------------------------------------------------------------ */

unsigned rf_program_queues(const rf_program *p)
{
	return p ? p->nqueues : 0;
}

size_t rf_program_ops(const rf_program *p, unsigned q)
{
	if (p == NULL || q >= p->nqueues)
		return 0;
	return p->qstart[q + 1] - p->qstart[q];
}

int rf_program_op(const rf_program *p, unsigned q, size_t i, rf_op *out)
{
	if (p == NULL || out == NULL)
		return rf__err(RF_EINVAL, "rf_program_op: %s is NULL", p == NULL ? "p" : "out");
	if (q >= p->nqueues || i >= rf_program_ops(p, q))
		return rf__err(RF_EINVAL, "rf_program_op: queue %u has no op %zu", q, i);
	/* rf_graph_lower's ops: the fields a kind does not use are 0 (the constructors of graph/program.h). */
	const rf__op *o = &p->ops[p->qidx[p->qstart[q] + i]];
	*out = (rf_op){(rf_op_kind)o->kind, o->queue, o->node, (size_t)o->block,
		       o->kind == RF_OP_STAGE ? o->stage : o->slot, o->wqueue, (uint64_t)o->value};
	return RF_OK;
}

size_t rf_program_count(const rf_program *p, rf_op_kind kind)
{
	size_t n = 0;
	for (size_t i = 0; p != NULL && i < p->nops; i++)
		n += p->ops[i].kind == (uint8_t)kind;
	return n;
}

/* One op's line; fprintf's result. */
static int rf__print_op(const rf_program *p, unsigned q, size_t i, FILE *f)
{
	rf_op o;
	rf_program_op(p, q, i, &o);
	uint32_t from = p->ops[p->qidx[p->qstart[q] + i]].stage;
	unsigned long long v = o.value;
	char t[16] = "";
	if (o.kind == RF_OP_COPY && from != RF__NO_STAGE)
		snprintf(t, sizeof t, "t%u ", from);
	if (o.kind == RF_OP_COPY)
		return fprintf(f, "  q%u: copy    b%zu %s-> s%u (node %zu)\n", q, o.block, t, o.slot, o.node);
	if (o.kind == RF_OP_STAGE)
		return fprintf(f, "  q%u: stage   b%zu -> t%u (node %zu)\n", q, o.block, o.slot, o.node);
	if (o.kind == RF_OP_COMPUTE)
		return fprintf(f, "  q%u: compute b%zu @ s%u (node %zu)\n", q, o.block, o.slot, o.node);
	if (o.kind == RF_OP_SIGNAL)
		return fprintf(f, "  q%u: signal  q%u=%llu (node %zu)\n", q, q, v, o.node);
	return fprintf(f, "  q%u: wait    q%u>=%llu (before node %zu)\n", q, o.wait_queue, v, o.node);
}

int rf_program_print(const rf_program *p, FILE *f)
{
	if (p == NULL || f == NULL)
		return rf__err(RF_EINVAL, "rf_program_print: %s is NULL", p == NULL ? "p" : "f");
	int bad = 0;
	for (unsigned q = 0; q < p->nqueues; q++) {
		bad |= fprintf(f, "queue %u: %zu ops\n", q, rf_program_ops(p, q)) < 0;
		for (size_t i = 0; i < rf_program_ops(p, q); i++)
			bad |= rf__print_op(p, q, i, f) < 0;
	}
	if (bad || fflush(f) != 0)
		return rf__err(RF_EBACKEND, "rf_program_print: write failed");
	return RF_OK;
}
