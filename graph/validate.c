/* graph/validate.c — topological order, cycle detection and RAW/WAR/WAW hazard detection by
 * reachability over the effective graph (explicit edges + the implicit order of each queue). */
#include "base/alloc.h"
#include "graph/graph_int.h"
#include "base/error.h"

#include <stdlib.h>
#include <string.h>

/* ---- a small binary min-heap of node ids --------------------------------------------------------- */

static void rf__heap_push(size_t *h, size_t *n, size_t x)
{
	size_t i = (*n)++;
	while (i > 0 && h[(i - 1) / 2] > x) {
		h[i] = h[(i - 1) / 2];
		i = (i - 1) / 2;
	}
	h[i] = x;
}

static size_t rf__heap_pop(size_t *h, size_t *n)
{
	size_t top = h[0], x = h[--(*n)], i = 0;
	for (;;) {
		size_t c = 2 * i + 1;
		if (c >= *n)
			break;
		if (c + 1 < *n && h[c + 1] < h[c])
			c++;
		if (h[c] >= x)
			break;
		h[i] = h[c];
		i = c;
	}
	if (*n > 0)
		h[i] = x;
	return top;
}

/* The next node on each node's queue (RF__NONE at the end): the graph keeps only the previous one. */
static void rf__qnext(const rf_graph *g, size_t *qnext)
{
	for (size_t i = 0; i < g->n; i++)
		qnext[i] = RF__NONE;
	for (size_t i = 0; i < g->n; i++)
		if (g->qprev[i] != RF__NONE)
			qnext[g->qprev[i]] = i;
}

/* Kahn's algorithm over the effective graph: a node's successors are its out-edges and qnext. */
static int rf__topo_kahn(const rf_graph *g, size_t *order, size_t *indeg, size_t *qnext, size_t *heap)
{
	size_t n = g->n, hn = 0, k = 0;
	rf__qnext(g, qnext);
	for (size_t i = 0; i < n; i++)
		if ((indeg[i] = g->in[i].n + (g->qprev[i] != RF__NONE)) == 0)
			rf__heap_push(heap, &hn, i);
	while (hn > 0) {
		size_t x = rf__heap_pop(heap, &hn);
		order[k++] = x;
		for (uint32_t e = 0; e < g->out[x].n; e++)
			if (--indeg[g->out[x].v[e]] == 0)
				rf__heap_push(heap, &hn, g->out[x].v[e]);
		if (qnext[x] != RF__NONE && --indeg[qnext[x]] == 0)
			rf__heap_push(heap, &hn, qnext[x]);
	}
	return k == n;
}

/* Every node left with indegree > 0 is on a cycle or downstream of one; walking predecessors that are
 * still blocked n times from any of them must end on the cycle itself. */
static size_t rf__cycle_node(const rf_graph *g, const size_t *indeg)
{
	size_t x = 0;
	while (indeg[x] == 0)
		x++;
	for (size_t step = 0; step < g->n; step++) {
		size_t p = g->qprev[x];
		if (p == RF__NONE || indeg[p] == 0) {
			for (uint32_t e = 0; e < g->in[x].n; e++)
				if (indeg[g->in[x].v[e]] > 0) {
					p = g->in[x].v[e];
					break;
				}
		}
		x = p;
	}
	return x;
}

int rf__graph_topo(const rf_graph *g, size_t **order_out, size_t **pos_out)
{
	size_t n = g->n, *tmp = NULL;
	size_t *order = rf__malloc((n ? n : 1) * sizeof *order);
	size_t *pos = rf__malloc((n ? n : 1) * sizeof *pos);
	int rc = RF_ENOMEM, sorted = 1;
	if (order == NULL || pos == NULL)
		goto out;
	/* Fast path: a graph built in a valid order (every edge to a later id) is its own order. */
	for (size_t i = 0; i < n; i++) {
		order[i] = i;
		for (uint32_t e = 0; e < g->out[i].n && sorted; e++)
			sorted = g->out[i].v[e] > i;
	}
	if (!sorted && (tmp = rf__malloc(3 * n * sizeof *tmp)) == NULL)
		goto out;
	if (!sorted && !rf__topo_kahn(g, order, tmp, tmp + n, tmp + 2 * n)) {
		char buf[96];
		rc = rf__err(RF_EINVAL, "graph has a cycle through %s",
			     rf__node_str(g, rf__cycle_node(g, tmp), buf, sizeof buf));
		goto out;
	}
	for (size_t i = 0; i < n; i++)
		pos[order[i]] = i;
	*order_out = order;
	*pos_out = pos;
	order = pos = NULL;
	rc = RF_OK;
out:
	free(tmp);
	free(order);
	free(pos);
	return rc == RF_ENOMEM ? rf__err(RF_ENOMEM, "graph analysis: out of memory (%zu nodes)", n) : rc;
}

/* ---- reachability ---------------------------------------------------------------------------------- */

typedef struct rf__reach {
	const rf_graph *g;
	const size_t *pos;
	const size_t *qnext; /* the next node of each node's queue (RF__NONE at the end) */
	uint32_t *seen;      /* marked by the last search when == gen */
	uint32_t gen;
	size_t *stack;
} rf__reach;

/* Mark what x reaches forward (successors: out-edges and queue order) or backward (predecessors),
 * through nodes whose topological position is at most (forward) or at least (backward) `bound`: a node
 * placed beyond it cannot lie on a path to the targets, so a search stays within their window. */
static void rf__reach_mark(rf__reach *r, size_t x, bool fwd, size_t bound)
{
	const rf_graph *g = r->g;
	size_t sp = 0;
	if (++r->gen == 0) { /* generation stamps: no clearing between searches, but at wrap-around */
		memset(r->seen, 0, g->n * sizeof *r->seen);
		r->gen = 1;
	}
	r->stack[sp++] = x;
	r->seen[x] = r->gen;
	while (sp > 0) {
		x = r->stack[--sp];
		const rf__idvec *adj = fwd ? &g->out[x] : &g->in[x];
		for (uint32_t e = 0; e <= adj->n; e++) {
			size_t y = e < adj->n ? adj->v[e] : fwd ? r->qnext[x] : g->qprev[x];
			if (y == RF__NONE || r->seen[y] == r->gen)
				continue;
			if (fwd ? r->pos[y] > bound : r->pos[y] < bound)
				continue;
			r->seen[y] = r->gen;
			r->stack[sp++] = y; /* each node is pushed once per search: n slots suffice */
		}
	}
}

/* The index of the first of ids[0..k) the last search (from x) did not mark, or is x; else k. */
static size_t rf__first_unmarked(const rf__reach *r, const size_t *ids, size_t k, size_t x)
{
	for (size_t i = 0; i < k; i++)
		if (ids[i] == x || r->seen[ids[i]] != r->gen)
			return i;
	return k;
}

/* ---- hazards --------------------------------------------------------------------------------------- */

/* Slot accesses sorted by (namespace: ring slots, then staging slots; slot; block; writes first). The
 * writers of a ring slot are copies and its readers computes; those of a staging slot, stages and the
 * copies of the blocks staged there. */
typedef struct rf__access {
	unsigned ns, slot;
	int is_read;
	size_t block, id;
} rf__access;

static int rf__access_cmp(const void *a, const void *b)
{
	const rf__access *x = a, *y = b;
	if (x->ns != y->ns)
		return x->ns < y->ns ? -1 : 1;
	if (x->slot != y->slot)
		return x->slot < y->slot ? -1 : 1;
	if (x->block != y->block)
		return x->block < y->block ? -1 : 1;
	if (x->is_read != y->is_read)
		return x->is_read - y->is_read;
	return x->id < y->id ? -1 : x->id > y->id;
}

static int rf__hazard(const rf_graph *g, const char *what, unsigned ns, size_t a, size_t b)
{
	char sa[96], sb[96];
	return rf__err(RF_EHAZARD, "%s hazard%s: %s is not ordered before %s", what, ns ? " on a staging slot" : "",
		       rf__node_str(g, a, sa, sizeof sa), rf__node_str(g, b, sb, sizeof sb));
}

/*
 * Per slot, the accesses in block order form a sequence write(b0) reads(b0)... write(b1) reads(b1)...
 * It is enough to check each neighbouring requirement; transitivity covers the rest:
 *   RAW: write(bk) reaches every read of bk (and a read of bk without such a write reads garbage);
 *   WAR: every read of bk reaches write(bk+1);   WAW: write(bk) reaches write(bk+1).
 * One search answers for all the reads of a block (one each would walk the same window again: 1 copy
 * + 80k computes of one block took 14 s), forward for RAW, and back from write(bk+1) for WAR and WAW.
 * ids: scratch for the node ids of one block's reads (n entries suffice).
 */
static int rf__check_slot_run(rf__reach *r, const rf__access *a, size_t n, size_t *ids)
{
	const rf_graph *g = r->g;
	size_t w = RF__NONE, w_block = 0, nreads = 0, bad; /* ids[0 .. nreads): reads of w_block */
	for (size_t i = 0, j; i < n; i = j) {
		if (!a[i].is_read) {
			if (w != RF__NONE && w_block == a[i].block) {
				char s1[96], s2[96];
				return rf__err(RF_EHAZARD, "WAW hazard: %s and %s copy the same block into one slot",
					       rf__node_str(g, w, s1, sizeof s1), rf__node_str(g, a[i].id, s2, sizeof s2));
			}
			if (w != RF__NONE) {
				rf__reach_mark(r, a[i].id, false, r->pos[w]); /* w's reads lie after w */
				if (r->seen[w] != r->gen)
					return rf__hazard(g, "WAW", a[i].ns, w, a[i].id);
				if ((bad = rf__first_unmarked(r, ids, nreads, a[i].id)) < nreads)
					return rf__hazard(g, "WAR", a[i].ns, ids[bad], a[i].id);
			}
			w = a[i].id;
			w_block = a[i].block;
			nreads = 0;
			j = i + 1;
			continue;
		}
		if (w == RF__NONE || w_block != a[i].block) {
			char s[96];
			return rf__err(RF_EHAZARD, "RAW hazard: %s reads a slot no copy of its block fills",
				       rf__node_str(g, a[i].id, s, sizeof s));
		}
		size_t hi = 0;
		for (j = i; j < n && a[j].is_read && a[j].block == a[i].block; j++) {
			ids[j - i] = a[j].id;
			hi = r->pos[a[j].id] > hi ? r->pos[a[j].id] : hi;
		}
		nreads = j - i;
		rf__reach_mark(r, w, true, hi);
		if ((bad = rf__first_unmarked(r, ids, nreads, w)) < nreads)
			return rf__hazard(g, "RAW", a[i].ns, w, ids[bad]);
	}
	return RF_OK;
}

/* Every node's accesses, sorted: a COPY writes its ring slot and reads its block's staging slot, if
 * staged. A block staged twice is a hazard of its own. */
static int rf__accesses(const rf_graph *g, const rf__stage_ent *st, size_t nst, rf__access *acc, size_t *m)
{
	for (size_t i = 1; i < nst; i++)
		if (st[i].block == st[i - 1].block) {
			char s1[96], s2[96];
			return rf__err(RF_EHAZARD, "stage hazard: %s and %s stage the same block (a block is staged at most "
						   "once)", rf__node_str(g, st[i - 1].id, s1, sizeof s1),
				       rf__node_str(g, st[i].id, s2, sizeof s2));
		}
	for (size_t i = 0; i < g->n; i++) {
		const rf_node_desc *d = &g->nodes[i];
		if (d->kind == RF_NODE_WAIT)
			continue;
		acc[(*m)++] = (rf__access){d->kind == RF_NODE_STAGE, d->slot, d->kind == RF_NODE_COMPUTE, d->block, i};
		const rf__stage_ent *e = d->kind == RF_NODE_COPY ? rf__stage_find(st, nst, d->block) : NULL;
		if (e != NULL)
			acc[(*m)++] = (rf__access){1, e->slot, 1, d->block, i};
	}
	qsort(acc, *m, sizeof *acc, rf__access_cmp);
	return RF_OK;
}

static int rf__check_hazards(rf__reach *r)
{
	const rf_graph *g = r->g;
	size_t m = 0, nst = 0;
	rf__stage_ent *st = NULL;
	rf__access *acc = rf__malloc((2 * g->n + 1) * sizeof *acc);
	size_t *ids = rf__malloc((g->n ? g->n : 1) * sizeof *ids);
	int rc = acc == NULL || ids == NULL || rf__graph_stages(g, &st, &nst) != RF_OK
			 ? rf__err(RF_ENOMEM, "rf_graph_validate: out of memory")
			 : rf__accesses(g, st, nst, acc, &m);
	for (size_t i = 0, j; i < m && rc == RF_OK; i = j) {
		for (j = i; j < m && acc[j].slot == acc[i].slot && acc[j].ns == acc[i].ns; j++)
			;
		rc = rf__check_slot_run(r, acc + i, j - i, ids);
	}
	free(st);
	free(acc);
	free(ids);
	return rc;
}

int rf_graph_validate(const rf_graph *g)
{
	if (g == NULL)
		return rf__err(RF_EINVAL, "rf_graph_validate: g is NULL");
	size_t *order, *pos;
	int rc = rf__graph_topo(g, &order, &pos);
	if (rc != RF_OK)
		return rc;
	size_t n = g->n ? g->n : 1, *qnext = rf__malloc(2 * n * sizeof *qnext); /* and the search stack */
	rf__reach r = {g, pos, qnext, rf__calloc(n, sizeof(uint32_t)), 0, qnext ? qnext + n : NULL};
	if (r.seen == NULL || qnext == NULL) {
		rc = rf__err(RF_ENOMEM, "rf_graph_validate: out of memory");
	} else {
		rf__qnext(g, qnext);
		rc = rf__check_hazards(&r);
	}
	free(qnext);
	free(r.seen);
	free(order);
	free(pos);
	return rc;
}
