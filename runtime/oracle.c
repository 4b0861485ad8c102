/* runtime/oracle.c — see oracle.h. Deliberately naive: per-block tables and direct comparisons. */
#include "base/alloc.h"
#include "runtime/oracle.h"
#include "graph/graph_int.h"
#include "base/error.h"

#include <stdlib.h>
#include <string.h>

typedef struct rf__seen {
	const rf__tev *copy, *compute, *stage;
} rf__seen;

/* Index every event by block; a block seen twice (or out of range) is a violation. *n: past the largest
 * slot, ring or staging, any event names. */
static int rf__oracle_index(const rf__trace *t, size_t nblocks, rf__seen *by, unsigned *n)
{
	static const char *const did[] = {"copied", "computed", "", "", "staged"};
	for (unsigned q = 0; q < t->nq; q++)
		for (size_t i = 0; i < t->n[q]; i++) {
			const rf__tev *e = &t->ev[q][i];
			if (e->block < 0 || (size_t)e->block >= nblocks)
				return rf__err(RF_EHAZARD, "oracle: an op ran for block %lld of %zu", (long long)e->block, nblocks);
			rf__seen *s = &by[e->block];
			const rf__tev **slot = e->kind == RF_OP_COPY ? &s->copy : e->kind == RF_OP_STAGE ? &s->stage : &s->compute;
			if (*slot != NULL)
				return rf__err(RF_EHAZARD, "oracle: block %lld was %s twice", (long long)e->block, did[e->kind]);
			*slot = e;
			*n = e->slot + 1 > *n ? e->slot + 1 : *n;
		}
	return RF_OK;
}

/* Block b, after blocks 0 .. b-1. owner[s], owner[n + s]: 1 + the last block copied into ring slot s,
 * staged into staging slot s (0: none), from the events' own slots (not from any depth); b is noted. */
static int rf__oracle_block(const rf__seen *by, size_t b, size_t *owner, unsigned n)
{
	const rf__tev *cp = by[b].copy, *cm = by[b].compute, *st = by[b].stage;
	if (cp == NULL || cm == NULL)
		return rf__err(RF_EHAZARD, "oracle: block %zu was %s", b, cp == NULL ? "never copied" : "never computed");
	if (cm->slot != cp->slot)
		return rf__err(RF_EHAZARD, "oracle: block %zu computed over slot %u but copied into slot %u", b, cm->slot,
			       cp->slot);
	if (cm->s0 < cp->s1)
		return rf__err(RF_EHAZARD, "oracle: RAW: compute of block %zu started before its copy ended", b);
	if (b > 0 && cm->s0 < by[b - 1].compute->s1)
		return rf__err(RF_EHAZARD, "oracle: compute of block %zu started before block %zu's ended", b, b - 1);
	size_t prev = owner[cp->slot] - 1, sprev = st != NULL ? owner[n + st->slot] - 1 : (size_t)-1;
	owner[cp->slot] = b + 1;
	if (st != NULL)
		owner[n + st->slot] = b + 1;
	if (prev != (size_t)-1 && cp->s0 < by[prev].compute->s1)
		return rf__err(RF_EHAZARD, "oracle: WAR: copy of block %zu into slot %u started before the compute of "
					   "block %zu (its previous reader) ended", b, cp->slot, prev);
	if (st != NULL && cp->s0 < st->s1)
		return rf__err(RF_EHAZARD, "oracle: RAW: copy of block %zu started before its stage into staging slot %u "
					   "ended", b, st->slot);
	if (st != NULL && sprev != (size_t)-1 && st->s0 < by[sprev].copy->s1)
		return rf__err(RF_EHAZARD, "oracle: WAR: stage of block %zu into staging slot %u started before the copy "
					   "of block %zu (its previous reader) ended", b, st->slot, sprev);
	return RF_OK;
}

int rf__oracle_check(const rf__trace *t, size_t nblocks)
{
	unsigned n = 1;
	rf__seen *by = rf__calloc(nblocks ? nblocks : 1, sizeof *by);
	int rc = by ? rf__oracle_index(t, nblocks, by, &n) : RF_ENOMEM;
	size_t *owner = rc == RF_OK ? rf__calloc(2 * (size_t)n, sizeof *owner) : NULL;
	if (by == NULL || (rc == RF_OK && owner == NULL))
		rc = rf__err(RF_ENOMEM, "oracle: out of memory");
	for (size_t b = 0; rc == RF_OK && b < nblocks; b++)
		rc = rf__oracle_block(by, b, owner, n);
	free(owner);
	free(by);
	return rc;
}

/* ---- hand-built graphs ----------------------------------------------------------------------------- */

/* One more predecessor u of v, growing pred[] and how[] together. */
static int rf__pred_add(rf__oracle_graph *og, size_t v, size_t u, int how, size_t *cap)
{
	size_t k = og->start[v + 1]++;
	if (k == *cap) {
		size_t *np = rf__realloc(og->pred, 2 * *cap * sizeof *np);
		if (np != NULL)
			og->pred = np;
		uint8_t *nh = np != NULL ? rf__realloc(og->how, 2 * *cap) : NULL;
		if (nh == NULL)
			return RF_ENOMEM;
		og->how = nh;
		*cap *= 2;
	}
	og->pred[k] = u;
	og->how[k] = (uint8_t)how;
	return RF_OK;
}

/* The work predecessors of v: walk back through explicit in-edges and queue order, passing through WAIT
 * nodes, stopping at (and collecting) COPY / COMPUTE / STAGE nodes. Reached by a path that leaves v's
 * queue, u must have ended with all its queue did before it (RF__ORC_QUEUE_END: v waited for a signal
 * behind them). By a path that never leaves v's queue ("local"): a COPY before a COPY v into another
 * ring slot need only have started before v (a queue keeps several copies in flight, and nothing v does
 * touches what it writes; whatever that copy had to follow, v follows through it, having started after
 * it), and so a STAGE before a STAGE into another staging slot; anything else must have ended
 * (RF__ORC_END); the copies into one slot, and the stages into one staging slot, are ordered apart
 * (rf__oracle_waw). A node reached both ways is noted both ways. seen[u] == v: u reached from outside;
 * seen_local[u] == v: reached locally. */
static int rf__work_preds(const struct rf_graph *g, size_t v, size_t *seen, size_t *seen_local, size_t *stack,
			  uint8_t *local, rf__oracle_graph *og, size_t *cap)
{
	const rf_node_desc *nv = &g->nodes[v];
	size_t sp = 0;
	stack[sp] = v;
	local[sp++] = 1;
	while (sp > 0) {
		size_t x = stack[--sp];
		int lx = local[sp];
		for (uint32_t e = 0; e <= g->in[x].n; e++) {
			size_t u = e < g->in[x].n ? g->in[x].v[e] : g->qprev[x];
			if (u == RF__NONE || seen[u] == v)
				continue;
			const rf_node_desc *nu = &g->nodes[u];
			int lu = lx && nu->queue == nv->queue;
			if (lu && seen_local[u] == v)
				continue;
			if (lu)
				seen_local[u] = v;
			else
				seen[u] = v;
			if (nu->kind == RF_NODE_WAIT) {
				stack[sp] = u; /* each node is pushed at most twice: 2n entries suffice */
				local[sp++] = (uint8_t)lu;
				continue;
			}
			int fills = (nv->kind == RF_NODE_COPY || nv->kind == RF_NODE_STAGE) && nu->kind == nv->kind;
			int how = !lu ? RF__ORC_QUEUE_END : fills && nu->slot != nv->slot ? RF__ORC_START : RF__ORC_END;
			if (rf__pred_add(og, v, u, how, cap) != RF_OK)
				return RF_ENOMEM;
		}
	}
	return RF_OK;
}

int rf__oracle_graph_build(const struct rf_graph *g, rf__oracle_graph *og)
{
	size_t n = g->n, cap = 2 * n + 16, m = n ? n : 1;
	memset(og, 0, sizeof *og);
	og->n = n;
	og->work = rf__calloc(m, 1);
	og->start = rf__calloc(n + 1, sizeof *og->start);
	og->pred = rf__malloc(cap * sizeof *og->pred);
	og->how = rf__malloc(cap);
	og->qwork = rf__malloc(m * sizeof *og->qwork);
	size_t *seen = rf__malloc(m * sizeof *seen), *seen_local = rf__malloc(m * sizeof *seen_local);
	size_t *stack = rf__malloc(2 * m * sizeof *stack);
	uint8_t *local = rf__malloc(2 * m);
	int rc = og->work && og->start && og->pred && og->how && og->qwork && seen && seen_local && stack && local
			 ? RF_OK
			 : RF_ENOMEM;
	for (size_t i = 0; i < n && rc == RF_OK; i++) { /* qprev < i: the one before is done */
		size_t p = g->qprev[i];
		seen[i] = seen_local[i] = RF__NONE;
		og->qwork[i] = p == RF__NONE || g->nodes[p].kind != RF_NODE_WAIT ? p : og->qwork[p];
	}
	for (size_t v = 0; v < n && rc == RF_OK; v++) {
		og->start[v + 1] = og->start[v];
		og->work[v] = g->nodes[v].kind != RF_NODE_WAIT;
		if (og->work[v])
			rc = rf__work_preds(g, v, seen, seen_local, stack, local, og, &cap);
	}
	free(seen);
	free(seen_local);
	free(stack);
	free(local);
	if (rc != RF_OK) {
		rf__oracle_graph_free(og);
		return rf__err(RF_ENOMEM, "oracle: out of memory");
	}
	return RF_OK;
}

void rf__oracle_graph_free(rf__oracle_graph *og)
{
	free(og->work);
	free(og->start);
	free(og->pred);
	free(og->how);
	free(og->qwork);
	memset(og, 0, sizeof *og);
}

/* By (ring slot, block). */
static int rf__tev_slot_cmp(const void *a, const void *b)
{
	const rf__tev *x = *(const rf__tev *const *)a, *y = *(const rf__tev *const *)b;
	if (x->slot != y->slot)
		return x->slot < y->slot ? -1 : 1;
	return (x->block > y->block) - (x->block < y->block);
}

/* WAW: the events of `kind` (copies into ring slots, or stages into staging slots) that fill one slot, in
 * block order (the order rf_graph_validate requires of them), each start after the one before ended.
 * The predecessors catch this between neighbours on a queue; this catches it between fills that others
 * came between (copies of one queue may overlap otherwise). */
static int rf__oracle_waw(const rf__tev **ev, size_t n, uint8_t kind)
{
	const rf__tev **cp = rf__malloc((n ? n : 1) * sizeof *cp);
	if (cp == NULL)
		return rf__err(RF_ENOMEM, "oracle: out of memory");
	size_t m = 0;
	for (size_t v = 0; v < n; v++)
		if (ev[v] != NULL && ev[v]->kind == kind)
			cp[m++] = ev[v];
	qsort((void *)cp, m, sizeof *cp, rf__tev_slot_cmp);
	int rc = RF_OK;
	for (size_t i = 1; i < m && rc == RF_OK; i++)
		if (cp[i]->slot == cp[i - 1]->slot && cp[i]->s0 < cp[i - 1]->s1)
			rc = rf__err(RF_EHAZARD, "oracle: WAW: node %u (block %lld) started filling %sslot %u before node %u "
						 "(block %lld) ended filling it", cp[i]->node, (long long)cp[i]->block,
				     kind == RF_OP_STAGE ? "staging " : "", cp[i]->slot, cp[i - 1]->node,
				     (long long)cp[i - 1]->block);
	free((void *)cp);
	return rc;
}

int rf__oracle_check_graph(const rf__trace *t, const rf__oracle_graph *og)
{
	const rf__tev **ev = rf__calloc(og->n ? og->n : 1, sizeof *ev);
	if (ev == NULL)
		return rf__err(RF_ENOMEM, "oracle: out of memory");
	int rc = RF_OK;
	for (unsigned q = 0; q < t->nq && rc == RF_OK; q++)
		for (size_t i = 0; i < t->n[q] && rc == RF_OK; i++) {
			const rf__tev *e = &t->ev[q][i];
			if (e->node >= og->n || !og->work[e->node] || ev[e->node] != NULL)
				rc = rf__err(RF_EHAZARD, "oracle: node %u ran twice or is not a copy/compute node", e->node);
			else
				ev[e->node] = e;
		}
	/* qend[v]: the last end among v and the work before it on its queue (node order is queue order). */
	uint64_t *qend = rc == RF_OK ? rf__malloc((og->n ? og->n : 1) * sizeof *qend) : NULL;
	if (rc == RF_OK && qend == NULL)
		rc = rf__err(RF_ENOMEM, "oracle: out of memory");
	for (size_t v = 0; v < og->n && rc == RF_OK; v++) {
		if (!og->work[v])
			continue;
		size_t p = og->qwork[v];
		if (ev[v] == NULL)
			rc = rf__err(RF_EHAZARD, "oracle: node %zu never ran", v);
		else
			qend[v] = p != RF__NONE && qend[p] > ev[v]->s1 ? qend[p] : ev[v]->s1;
	}
	for (size_t v = 0; v < og->n && rc == RF_OK; v++) {
		if (!og->work[v])
			continue;
		for (size_t k = og->start[v]; k < og->start[v + 1] && rc == RF_OK; k++) {
			size_t u = og->pred[k];
			int how = og->how[k];
			uint64_t s0 = ev[v]->s0;
			uint64_t need = how == RF__ORC_START ? ev[u]->s0 : how == RF__ORC_END ? ev[u]->s1 : qend[u];
			const char *also = how == RF__ORC_QUEUE_END && s0 >= ev[u]->s1 ? " and the work before it on its queue" : "";
			if (s0 < need)
				rc = rf__err(RF_EHAZARD, "oracle: node %zu started before node %zu (%s)%s %s", v, u,
					     how == RF__ORC_START ? "before it on its queue" : "which it must follow", also,
					     how == RF__ORC_START ? "started" : "ended");
		}
	}
	if (rc == RF_OK)
		rc = rf__oracle_waw(ev, og->n, RF_OP_COPY);
	if (rc == RF_OK)
		rc = rf__oracle_waw(ev, og->n, RF_OP_STAGE);
	free(qend);
	free((void *)ev);
	return rc;
}

/* ---- keyed use ------------------------------------------------------------------------------------- */

int rf__oracle_keyed_make(rf__oracle_keyed *o, unsigned nslots)
{
	o->n = nslots;
	o->holds = rf__calloc(nslots, sizeof *o->holds);
	o->last = rf__calloc(nslots, sizeof *o->last);
	return o->holds != NULL && o->last != NULL ? RF_OK : RF_ENOMEM;
}

void rf__oracle_keyed_free(rf__oracle_keyed *o)
{
	free(o->holds);
	free(o->last);
	memset(o, 0, sizeof *o);
}

int rf__oracle_keyed_war(const rf__oracle_keyed *o, unsigned slot, uint64_t key)
{
	return rf__err(RF_EHAZARD, "keyed oracle: WAR: a copy of key %llu into slot %u, which is held %u time(s)",
		       (unsigned long long)key, slot, o->holds[slot]);
}

int rf__oracle_src_holds(const void *data, const rf__src *src, size_t bytes)
{
	if (src->fs.f == NULL)
		return memcmp(data, src->p, bytes) == 0;
	unsigned char buf[4096]; /* read through the descriptor as the copies do: never the mapping */
	for (size_t at = 0; at < bytes;) {
		size_t n = bytes - at < sizeof buf ? bytes - at : sizeof buf;
		int err;
		if (rf__file_pread(src->fs.f->fd, buf, n, src->fs.off + at, &err) != n)
			return 1; /* the file no longer holds the range: nothing to compare with */
		if (memcmp((const unsigned char *)data + at, buf, n) != 0)
			return 0;
		at += n;
	}
	return 1;
}

int rf__oracle_keyed_acquire(const void *data, const rf__src *src, size_t bytes, uint64_t key, unsigned slot)
{
	if (rf__oracle_src_holds(data, src, bytes))
		return RF_OK;
	return rf__err(RF_EHAZARD, "keyed oracle: RAW: acquire of key %llu returned slot %u, which does not hold "
				   "its %zu bytes", (unsigned long long)key, slot, bytes);
}

int rf__oracle_keyed_log(rf__oracle_keyed *o, const rf__trace *t)
{
	memset(o->last, 0, (size_t)o->n * sizeof *o->last);
	for (size_t i = 0; i < t->n[0]; i++) {
		const rf__tev *e = &t->ev[0][i], *p;
		if (e->t1 == 0) /* withdrawn before it started */
			continue;
		if (e->slot >= o->n)
			return rf__err(RF_EHAZARD, "keyed oracle: a copy into slot %u of %u", e->slot, o->n);
		p = o->last[e->slot] != 0 ? &t->ev[0][o->last[e->slot] - 1] : NULL;
		o->last[e->slot] = i + 1;
		if (p != NULL && e->s0 < p->s1)
			return rf__err(RF_EHAZARD, "keyed oracle: WAW: the copy of key %llu into slot %u started before "
						   "the copy of key %llu into it, issued before, ended",
				       (unsigned long long)e->block, e->slot, (unsigned long long)p->block);
	}
	return RF_OK;
}
