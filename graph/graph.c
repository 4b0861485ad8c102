/* graph/graph.c — the job graph: nodes on queues, explicit edges, the ring builder, and reading back. */
#include "base/alloc.h"
#include "graph/graph_int.h"
#include "graph/program.h"
#include "base/error.h"

#include <stdlib.h>
#include <string.h>

static const char *const rf__kind_names[] = {"copy", "wait", "compute"};

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

/* Grow every per-node array together so that they always have the same capacity. */
static int rf__graph_reserve(rf_graph *g)
{
	if (g->n < g->cap)
		return RF_OK;
	size_t cap = g->cap ? g->cap * 2 : 64;
	rf_node_desc *nodes = rf__realloc(g->nodes, cap * sizeof *nodes);
	if (nodes == NULL)
		return RF_ENOMEM;
	g->nodes = nodes;
	rf__idvec *out = rf__realloc(g->out, cap * sizeof *out);
	if (out == NULL)
		return RF_ENOMEM;
	g->out = out;
	rf__idvec *in = rf__realloc(g->in, cap * sizeof *in);
	if (in == NULL)
		return RF_ENOMEM;
	g->in = in;
	size_t *qprev = rf__realloc(g->qprev, cap * sizeof *qprev);
	if (qprev == NULL)
		return RF_ENOMEM;
	g->qprev = qprev;
	g->cap = cap;
	return RF_OK;
}

int rf_graph_add_node(rf_graph *g, const rf_node_desc *desc, size_t *id)
{
	if (g == NULL || desc == NULL)
		return rf__err(RF_EINVAL, "rf_graph_add_node: %s is NULL", g == NULL ? "g" : "desc");
	if ((unsigned)desc->kind > RF_NODE_COMPUTE)
		return rf__err(RF_EINVAL, "rf_graph_add_node: unknown node kind %d", (int)desc->kind);
	if (desc->queue >= RF_MAX_QUEUES)
		return rf__err(RF_EINVAL, "rf_graph_add_node: queue %u >= RF_MAX_QUEUES (%u)", desc->queue,
			       RF_MAX_QUEUES);
	if (desc->kind != RF_NODE_WAIT && desc->slot >= RF_MAX_SLOTS)
		return rf__err(RF_EINVAL, "rf_graph_add_node: slot %u >= RF_MAX_SLOTS (%u)", desc->slot,
			       RF_MAX_SLOTS);
	if (desc->kind != RF_NODE_WAIT && !rf__block_ok(desc->block))
		return rf__err(RF_EINVAL, "rf_graph_add_node: block %zu is too large (blocks are < %zu)", desc->block,
			       RF__MAX_NBLOCKS);
	if (desc->flags != 0)
		return rf__err(RF_EINVAL, "rf_graph_add_node: flags must be 0 (got %#x)", desc->flags);
	if (rf__graph_reserve(g) != RF_OK)
		return rf__err(RF_ENOMEM, "rf_graph_add_node: out of memory at node %zu", g->n);
	size_t i = g->n++;
	rf_node_desc d = *desc;
	if (d.kind == RF_NODE_WAIT)
		d.block = 0, d.slot = 0;
	g->nodes[i] = d;
	memset(&g->out[i], 0, sizeof g->out[i]);
	memset(&g->in[i], 0, sizeof g->in[i]);
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
		snprintf(buf, cap, "node %zu (%s b%zu s%u on q%u)", id, rf__kind_names[d->kind], d->block,
			 d->slot, d->queue);
	return buf;
}

unsigned rf__graph_nslots(const rf_graph *g)
{
	unsigned n = 0;
	for (size_t i = 0; i < g->n; i++)
		if (g->nodes[i].kind != RF_NODE_WAIT && g->nodes[i].slot + 1 > n)
			n = g->nodes[i].slot + 1;
	return n;
}

unsigned rf__graph_nqueues(const rf_graph *g)
{
	unsigned n = 0;
	for (size_t i = 0; i < g->n; i++)
		if (g->nodes[i].queue + 1 > n)
			n = g->nodes[i].queue + 1;
	return n;
}

size_t rf__graph_nblocks(const rf_graph *g)
{
	size_t n = 0;
	for (size_t i = 0; i < g->n; i++)
		if (g->nodes[i].kind != RF_NODE_WAIT && g->nodes[i].block + 1 > n)
			n = g->nodes[i].block + 1;
	return n;
}

/* ---- the ring builder: the plan's steps, made nodes and edges ---------------------------------------- */

static int rf__add(rf_graph *g, rf_node_kind kind, unsigned queue, const rf_step *s, size_t *id)
{
	rf_node_desc d = {kind, queue, s->block, s->slot, 0};
	return rf_graph_add_node(g, &d, id);
}

/* Node `kind` on `queue` for step s, after node `pred` (an explicit edge, also within one queue). */
static int rf__add_after(rf_graph *g, rf_node_kind kind, unsigned queue, const rf_step *s, size_t pred,
			 size_t *id)
{
	int rc = rf__add(g, kind, queue, s, id);
	return rc != RF_OK ? rc : rf_graph_add_edge(g, pred, *id);
}

/* PREFETCH b: the copy on b's copy queue, preceded (b >= depth) by the WAR wait on compute(b - depth),
 * the previous reader of the slot. compute_id[] holds the ids of the last `depth` computes, by slot. */
static int rf__ring_prefetch(rf_graph *g, const rf_step *s, unsigned depth, unsigned kq,
			     const size_t *compute_id, size_t *copy_id)
{
	unsigned q = rf__ring_copy_queue((int64_t)s->block, kq);
	if (s->block < depth)
		return rf__add(g, RF_NODE_COPY, q, s, copy_id);
	size_t w;
	int rc = rf__add_after(g, RF_NODE_WAIT, q, s, compute_id[s->slot], &w);
	return rc != RF_OK ? rc : rf__add_after(g, RF_NODE_COPY, q, s, w, copy_id);
}

/* One node (two for a PREFETCH with a WAR wait) per step, in plan order; ids[] holds, by slot, the last
 * copy (ids[0 .. depth)) and compute (ids[depth .. 2 depth)) of each slot. AWAIT n is a WAIT on queue 0
 * after copy(n) (RAW); COMPUTE n follows its AWAIT. */
static int rf__ring_build(rf_graph *g, const rf_step *steps, size_t nsteps, unsigned depth, unsigned kq,
			  size_t *ids)
{
	size_t *copy_id = ids, *compute_id = ids + depth, await = 0;
	int rc = RF_OK;
	for (size_t i = 0; i < nsteps && rc == RF_OK; i++) {
		const rf_step *s = &steps[i];
		if (s->kind == RF_STEP_PREFETCH)
			rc = rf__ring_prefetch(g, s, depth, kq, compute_id, &copy_id[s->slot]);
		else if (s->kind == RF_STEP_AWAIT)
			rc = rf__add_after(g, RF_NODE_WAIT, 0, s, copy_id[s->slot], &await);
		else
			rc = rf__add_after(g, RF_NODE_COMPUTE, 0, s, await, &compute_id[s->slot]);
	}
	return rc;
}

static int rf__ring_check(size_t nblocks, unsigned depth, unsigned copy_queues)
{
	if (depth == 0 || depth > RF_MAX_DEPTH)
		return rf__err(RF_EINVAL, "rf_graph_ring: depth %u is outside 1..%u", depth, RF_MAX_DEPTH);
	if (copy_queues == 0 || copy_queues >= RF_MAX_QUEUES)
		return rf__err(RF_EINVAL, "rf_graph_ring: copy_queues %u is outside 1..%u", copy_queues,
			       RF_MAX_QUEUES - 1);
	if (!rf__ring_depth_is_valid(depth, copy_queues))
		return rf__err(RF_EINVAL,
			       "rf_graph_ring: %u copy queues need depth >= %u to keep them busy (depth is %u)",
			       copy_queues, rf__ring_busy_depth(copy_queues), depth);
	if (!rf__nblocks_ok(nblocks))
		return rf__err(RF_EINVAL, "rf_graph_ring: nblocks %zu is over %zu", nblocks, RF__MAX_NBLOCKS);
	return RF_OK;
}

int rf_graph_ring(size_t nblocks, unsigned depth, unsigned copy_queues, rf_graph **out)
{
	if (out == NULL)
		return rf__err(RF_EINVAL, "rf_graph_ring: out is NULL");
	int rc = rf__ring_check(nblocks, depth, copy_queues);
	if (rc != RF_OK)
		return rc;
	size_t *ids = rf__malloc(2 * (size_t)depth * sizeof *ids), nsteps;
	if (ids == NULL)
		return rf__err(RF_ENOMEM, "rf_graph_ring: out of memory");
	rf_graph *g = NULL;
	rf_step *steps = NULL;
	if ((rc = rf__plan_alloc(nblocks, depth, &steps, &nsteps)) != RF_OK ||
	    (rc = rf_graph_create(0, &g)) != RF_OK ||
	    (rc = rf__ring_build(g, steps, nsteps, depth, copy_queues, ids)) != RF_OK) {
		rf_graph_destroy(g);
		g = NULL;
	}
	free(steps);
	free(ids);
	if (rc == RF_OK)
		*out = g;
	return rc;
}
