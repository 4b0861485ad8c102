/* graph/graph.c — the job graph: nodes on queues, explicit edges, the ring builder, and reading back. */
#include "base/alloc.h"
#include "graph/graph_int.h"
#include "graph/program.h"
#include "base/error.h"

#include <stdlib.h>

static const char *const rf__kind_names[] = {"copy", "wait", "compute", "stage"};

int rf_graph_create(unsigned flags, rf_graph **out)
{
	if (out == NULL)
		return rf__err(RF_EINVAL, "rf_graph_create: out is NULL");
	if (flags != 0)
		return rf__err(RF_EINVAL, "rf_graph_create: flags must be 0 (got %#x)", flags);
	rf_graph *g = rf__calloc(1, sizeof *g);
	if (g == NULL)
		return rf__err(RF_ENOMEM, "rf_graph_create: out of memory");
	for (unsigned q = 0; q < RF_MAX_QUEUES; q++)
		g->qlast[q] = RF__NONE;
	*out = g;
	return RF_OK;
}

void rf_graph_destroy(rf_graph *g)
{
	if (g == NULL)
		return;
	for (size_t i = 0; i < g->n; i++) {
		free(g->out[i].v);
		free(g->in[i].v);
	}
	free(g->nodes);
	free(g->out);
	free(g->in);
	free(g->qprev);
	free(g);
}

/* Grow every per-node array together so that they always have the same capacity (one grown is kept
 * even if the next fails: rf_graph_destroy frees it). */
static int rf__graph_reserve(rf_graph *g)
{
	size_t cap = g->cap ? g->cap * 2 : 64;
	void *p;
	if (g->n < g->cap)
		return RF_OK;
#define RF__GROW(a) ((p = rf__realloc((a), cap * sizeof *(a))) != NULL && ((a) = p, 1))
	if (!RF__GROW(g->nodes) || !RF__GROW(g->out) || !RF__GROW(g->in) || !RF__GROW(g->qprev))
		return RF_ENOMEM;
#undef RF__GROW
	g->cap = cap;
	return RF_OK;
}

int rf_graph_add_node(rf_graph *g, const rf_node_desc *desc, size_t *id)
{
	if (g == NULL || desc == NULL)
		return rf__err(RF_EINVAL, "rf_graph_add_node: %s is NULL", g == NULL ? "g" : "desc");
	if ((unsigned)desc->kind > RF_NODE_STAGE)
		return rf__err(RF_EINVAL, "rf_graph_add_node: unknown node kind %d", (int)desc->kind);
	if (desc->queue >= RF_MAX_QUEUES)
		return rf__err(RF_EINVAL, "rf_graph_add_node: queue %u >= RF_MAX_QUEUES (%u)", desc->queue,
			       RF_MAX_QUEUES);
	if (desc->kind != RF_NODE_WAIT && desc->slot >= RF_MAX_SLOTS)
		return rf__err(RF_EINVAL, "rf_graph_add_node: slot %u >= RF_MAX_SLOTS (%u)", desc->slot,
			       RF_MAX_SLOTS);
	if (desc->kind != RF_NODE_WAIT && desc->block >= RF__MAX_NBLOCKS)
		return rf__err(RF_EINVAL, "rf_graph_add_node: block %zu is too large (blocks are < %zu)", desc->block,
			       RF__MAX_NBLOCKS);
	if (desc->flags != 0)
		return rf__err(RF_EINVAL, "rf_graph_add_node: flags must be 0 (got %#x)", desc->flags);
	if (rf__graph_reserve(g) != RF_OK)
		return rf__err(RF_ENOMEM, "rf_graph_add_node: out of memory at node %zu", g->n);
	size_t i = g->n++;
	rf_node_desc d = *desc;
	unsigned *nslots = d.kind == RF_NODE_STAGE ? &g->nstage : &g->nslots;
	if (d.kind == RF_NODE_WAIT)
		d.block = 0, d.slot = 0;
	else if (d.slot >= *nslots)
		*nslots = d.slot + 1;
	if (d.kind != RF_NODE_WAIT && d.block >= g->nblocks)
		g->nblocks = d.block + 1;
	if (d.queue >= g->nqueues)
		g->nqueues = d.queue + 1;
	g->nodes[i] = d;
	g->out[i] = g->in[i] = (rf__idvec){0};
	g->qprev[i] = g->qlast[d.queue];
	g->qlast[d.queue] = i;
	if (id != NULL)
		*id = i;
	return RF_OK;
}

static int rf__idvec_push(rf__idvec *v, size_t id)
{
	if (v->n == v->cap) {
		if (v->cap >= UINT32_MAX / 2)
			return RF_ENOMEM;
		uint32_t cap = v->cap ? v->cap * 2 : 2;
		size_t *nv = rf__realloc(v->v, cap * sizeof *nv);
		if (nv == NULL)
			return RF_ENOMEM;
		v->v = nv;
		v->cap = cap;
	}
	v->v[v->n++] = id;
	return RF_OK;
}

static void rf__idvec_remove(rf__idvec *v, size_t id)
{
	for (uint32_t i = 0; i < v->n; i++) {
		if (v->v[i] == id) {
			v->v[i] = v->v[--v->n];
			return;
		}
	}
}

int rf_graph_has_edge(const rf_graph *g, size_t from, size_t to)
{
	if (g == NULL || from >= g->n || to >= g->n)
		return 0;
	/* Scan the shorter of the two lists. */
	const rf__idvec *v = g->out[from].n <= g->in[to].n ? &g->out[from] : &g->in[to];
	size_t want = v == &g->out[from] ? to : from;
	for (uint32_t i = 0; i < v->n; i++)
		if (v->v[i] == want)
			return 1;
	return 0;
}

int rf_graph_add_edge(rf_graph *g, size_t from, size_t to)
{
	if (g == NULL)
		return rf__err(RF_EINVAL, "rf_graph_add_edge: g is NULL");
	if (from >= g->n || to >= g->n)
		return rf__err(RF_EINVAL, "rf_graph_add_edge: edge %zu -> %zu names a node >= %zu", from, to,
			       g->n);
	if (from == to)
		return rf__err(RF_EINVAL, "rf_graph_add_edge: self edge on node %zu", from);
	if (rf_graph_has_edge(g, from, to))
		return RF_OK;
	if (rf__idvec_push(&g->out[from], to) != RF_OK)
		return rf__err(RF_ENOMEM, "rf_graph_add_edge: out of memory");
	if (rf__idvec_push(&g->in[to], from) != RF_OK) {
		g->out[from].n--;
		return rf__err(RF_ENOMEM, "rf_graph_add_edge: out of memory");
	}
	g->nedges++;
	return RF_OK;
}

int rf_graph_remove_edge(rf_graph *g, size_t from, size_t to)
{
	if (g == NULL)
		return rf__err(RF_EINVAL, "rf_graph_remove_edge: g is NULL");
	if (!rf_graph_has_edge(g, from, to))
		return rf__err(RF_EINVAL, "rf_graph_remove_edge: no edge %zu -> %zu", from, to);
	rf__idvec_remove(&g->out[from], to);
	rf__idvec_remove(&g->in[to], from);
	g->nedges--;
	return RF_OK;
}

size_t rf_graph_nodes(const rf_graph *g)
{
	return g ? g->n : 0;
}

size_t rf_graph_edges(const rf_graph *g)
{
	return g ? g->nedges : 0;
}

int rf_graph_node(const rf_graph *g, size_t id, rf_node_desc *out)
{
	if (g == NULL || out == NULL)
		return rf__err(RF_EINVAL, "rf_graph_node: %s is NULL", g == NULL ? "g" : "out");
	if (id >= g->n)
		return rf__err(RF_EINVAL, "rf_graph_node: node %zu does not exist (%zu nodes)", id, g->n);
	*out = g->nodes[id];
	return RF_OK;
}

const char *rf__node_str(const rf_graph *g, size_t id, char *buf, size_t cap)
{
	const rf_node_desc *d = &g->nodes[id];
	if (d->kind == RF_NODE_WAIT)
		snprintf(buf, cap, "node %zu (wait on q%u)", id, d->queue);
	else
		snprintf(buf, cap, "node %zu (%s b%zu %c%u on q%u)", id, rf__kind_names[d->kind], d->block,
			 d->kind == RF_NODE_STAGE ? 't' : 's', d->slot, d->queue);
	return buf;
}

static int rf__stage_cmp(const void *a, const void *b)
{
	const rf__stage_ent *x = a, *y = b;
	return x->block != y->block ? (x->block < y->block ? -1 : 1) : (x->id > y->id) - (x->id < y->id);
}

int rf__graph_stages(const rf_graph *g, rf__stage_ent **out, size_t *n)
{
	size_t k = 0;
	*out = NULL;
	for (size_t i = 0; i < g->n; i++)
		k += g->nodes[i].kind == RF_NODE_STAGE;
	if (k > 0 && (*out = rf__malloc(k * sizeof **out)) == NULL)
		return RF_ENOMEM;
	k = 0;
	for (size_t i = 0; i < g->n; i++)
		if (g->nodes[i].kind == RF_NODE_STAGE)
			(*out)[k++] = (rf__stage_ent){g->nodes[i].block, i, g->nodes[i].slot};
	if (k > 1)
		qsort(*out, k, sizeof **out, rf__stage_cmp);
	*n = k;
	return RF_OK;
}

const rf__stage_ent *rf__stage_find(const rf__stage_ent *e, size_t n, size_t block)
{
	size_t lo = 0, hi = n;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (e[mid].block < block)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo < n && e[lo].block == block ? &e[lo] : NULL;
}

/* ---- the ring builder: the plan's steps, made nodes and edges ---------------------------------------- */

typedef struct rf__rb {
	rf_graph *g;
	unsigned depth, sdepth, kq;
	size_t *copy_id, *compute_id;  /* by ring slot: its last copy and compute */
	size_t *stage_id, *reader_id;  /* by staging slot: its last stage, and the copy that read it */
	size_t await, sawait;          /* the last AWAIT's WAIT node, of the ring and of the staging ring */
} rf__rb;

/* Node `kind` on `queue` for step s, after node `pred` (an explicit edge even within one queue; none
 * for RF__NONE). */
static int rf__add_after(rf_graph *g, rf_node_kind kind, unsigned queue, const rf_step *s, size_t pred, size_t *id)
{
	rf_node_desc d = {kind, queue, s->block, s->slot, 0};
	int rc = rf_graph_add_node(g, &d, id);
	return rc != RF_OK || pred == RF__NONE ? rc : rf_graph_add_edge(g, pred, *id);
}

/* A producer step (PREFETCH of either ring) on `queue`: for block >= `depth`, the WAR wait on `reader`
 * (the slot's previous reader) first. */
static int rf__ring_fill(rf_graph *g, rf_node_kind kind, unsigned queue, const rf_step *s, unsigned depth,
			 size_t reader, size_t *id)
{
	size_t w = RF__NONE;
	int rc = s->block < depth ? RF_OK : rf__add_after(g, RF_NODE_WAIT, queue, s, reader, &w);
	return rc != RF_OK ? rc : rf__add_after(g, kind, queue, s, w, id);
}

/* One node per step (two for a PREFETCH with a WAR wait), in plan order. PREFETCH b copies on b's copy
 * queue (after the staging AWAIT of b when staged); AWAIT n waits on queue 0 after copy(n); COMPUTE n
 * follows it. Staging ring: PREFETCH x stages x; AWAIT b waits on b's copy queue after stage(b). */
static int rf__ring_step(rf__rb *r, const rf__sstep *st)
{
	const rf_step *s = &st->s;
	int64_t b = (int64_t)s->block;
	size_t id, t = r->sdepth ? s->block % r->sdepth : 0;
	int rc;
	if (st->staging && s->kind == RF_STEP_PREFETCH)
		return rf__ring_fill(r->g, RF_NODE_STAGE, rf__ring_stage_queue(b, r->kq), s, r->sdepth, r->reader_id[s->slot],
				     &r->stage_id[s->slot]);
	if (st->staging)
		return rf__add_after(r->g, RF_NODE_WAIT, rf__ring_copy_queue(b, r->kq), s, r->stage_id[s->slot], &r->sawait);
	switch (s->kind) {
	case RF_STEP_PREFETCH:
		rc = rf__ring_fill(r->g, RF_NODE_COPY, rf__ring_copy_queue(b, r->kq), s, r->depth, r->compute_id[s->slot], &id);
		if (rc == RF_OK && r->sdepth) {
			r->reader_id[t] = id;
			rc = rf_graph_add_edge(r->g, r->sawait, id);
		}
		r->copy_id[s->slot] = id;
		return rc;
	case RF_STEP_AWAIT:
		return rf__add_after(r->g, RF_NODE_WAIT, 0, s, r->copy_id[s->slot], &r->await);
	default:
		return rf__add_after(r->g, RF_NODE_COMPUTE, 0, s, r->await, &r->compute_id[s->slot]);
	}
}

static int rf__ring_check(size_t nblocks, unsigned depth, unsigned copy_queues, unsigned pins)
{
	if (depth == 0 || depth > RF_MAX_DEPTH)
		return rf__err(RF_EINVAL, "rf_graph_ring: depth %u is outside 1..%u", depth, RF_MAX_DEPTH);
	if (copy_queues == 0 || copy_queues >= RF_MAX_QUEUES || (pins && 2 * copy_queues >= RF_MAX_QUEUES))
		return rf__err(RF_EINVAL, "rf_graph_ring: copy_queues %u is outside 1..%u", copy_queues,
			       pins ? (RF_MAX_QUEUES - 1) / 2 : RF_MAX_QUEUES - 1);
	if (!rf__ring_depth_is_valid(depth, copy_queues))
		return rf__err(RF_EINVAL,
			       "rf_graph_ring: %u copy queues need depth >= %u to keep them busy (depth is %u)",
			       copy_queues, rf__ring_busy_depth(copy_queues), depth);
	if ((size_t)copy_queues * pins > RF_MAX_SLOTS)
		return rf__err(RF_EINVAL, "rf_graph_ring: %u x %u staging slots are over %u", copy_queues, pins, RF_MAX_SLOTS);
	if (nblocks > RF__MAX_NBLOCKS)
		return rf__err(RF_EINVAL, "rf_graph_ring: nblocks %zu is over %zu", nblocks, RF__MAX_NBLOCKS);
	return RF_OK;
}

int rf__graph_ring(size_t nblocks, unsigned depth, unsigned copy_queues, unsigned pins, rf_graph **out)
{
	if (out == NULL)
		return rf__err(RF_EINVAL, "rf_graph_ring: out is NULL");
	int rc = rf__ring_check(nblocks, depth, copy_queues, pins);
	if (rc != RF_OK)
		return rc;
	rf__rb r = {NULL, depth, copy_queues * pins, copy_queues, NULL, NULL, NULL, NULL, 0, 0};
	size_t *ids = rf__malloc(2 * ((size_t)depth + r.sdepth) * sizeof *ids), nsteps = 0;
	if (ids == NULL)
		return rf__err(RF_ENOMEM, "rf_graph_ring: out of memory");
	r.copy_id = ids, r.compute_id = ids + depth, r.stage_id = ids + 2 * depth, r.reader_id = r.stage_id + r.sdepth;
	rf__sstep *steps = NULL;
	if ((rc = rf__plan_staged(nblocks, depth, r.sdepth, &steps, &nsteps)) == RF_OK &&
	    (rc = rf_graph_create(0, &r.g)) == RF_OK)
		for (size_t i = 0; i < nsteps && rc == RF_OK; i++)
			rc = rf__ring_step(&r, &steps[i]);
	free(steps);
	free(ids);
	if (rc != RF_OK)
		rf_graph_destroy(r.g);
	else
		*out = r.g;
	return rc;
}

int rf_graph_ring(size_t nblocks, unsigned depth, unsigned copy_queues, rf_graph **out)
{
	return rf__graph_ring(nblocks, depth, copy_queues, 0, out);
}
