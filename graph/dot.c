/* graph/dot.c — Graphviz export: one cluster per queue, RAW edges solid, WAR edges dashed, the implicit
 * queue order dotted. Written through a bounded appender so that one pass both sizes and fills. */
#include "graph/graph_int.h"
#include "base/error.h"

#include <stdarg.h>
#include <string.h>

typedef struct rf__out {
	char *buf;
	size_t cap, len; /* len counts every byte wanted, written or not */
} rf__out;

static void rf__put(rf__out *o, const char *fmt, ...) RF__PRINTF(2, 3);
static void rf__put(rf__out *o, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	size_t room = o->len < o->cap ? o->cap - o->len : 0;
	int n = vsnprintf(room ? o->buf + o->len : NULL, room, fmt, ap);
	va_end(ap);
	if (n > 0)
		o->len += (size_t)n;
}

static void rf__dot_node(rf__out *o, const rf_graph *g, size_t i)
{
	static const char *const look[][2] = {[RF_NODE_COPY] = {"copy", "box"},
					       [RF_NODE_STAGE] = {"stage", "box, style=rounded"},
					       [RF_NODE_COMPUTE] = {"compute", "ellipse, style=filled, fillcolor=\"#e8f0ff\""}};
	const rf_node_desc *d = &g->nodes[i];
	if (d->kind == RF_NODE_WAIT)
		rf__put(o, "    n%zu [label=\"wait\", shape=diamond];\n", i);
	else
		rf__put(o, "    n%zu [label=\"%s b%zu\\n%c%u\", shape=%s];\n", i, look[d->kind][0], d->block,
			d->kind == RF_NODE_STAGE ? 't' : 's', d->slot, look[d->kind][1]);
}

/* An edge from a slot's reader into its next writer (or a WAIT that guards it) is the WAR half of the
 * slot's reuse: compute -> copy for ring slots, copy -> stage for staging slots. Everything else is RAW. */
static bool rf__is_war(const rf_graph *g, size_t from, size_t to)
{
	rf_node_kind f = g->nodes[from].kind, t = g->nodes[to].kind;
	if (t == RF_NODE_WAIT && g->out[to].n > 0)
		t = g->nodes[g->out[to].v[0]].kind;
	return (f == RF_NODE_COMPUTE && t == RF_NODE_COPY) || (f == RF_NODE_COPY && t == RF_NODE_STAGE);
}

int rf_graph_dot(const rf_graph *g, char *buf, size_t cap, size_t *len)
{
	if (g == NULL || len == NULL)
		return rf__err(RF_EINVAL, "rf_graph_dot: %s is NULL", g == NULL ? "g" : "len");
	if (buf == NULL && cap > 0)
		return rf__err(RF_EINVAL, "rf_graph_dot: buf is NULL but cap is %zu", cap);
	rf__out out = {buf, cap, 0}, *o = &out;
	rf__put(o, "digraph ringfetch {\n  rankdir=LR;\n  node [fontname=\"Helvetica\", fontsize=10];\n");
	for (unsigned q = 0; q < g->nqueues; q++) {
		if (g->qlast[q] == RF__NONE)
			continue; /* a queue number no node uses */
		rf__put(o, "  subgraph cluster_q%u {\n    label=\"queue %u\";\n", q, q);
		for (size_t i = 0; i < g->n; i++)
			if (g->nodes[i].queue == q)
				rf__dot_node(o, g, i);
		rf__put(o, "  }\n");
	}
	for (size_t i = 0; i < g->n; i++) {
		if (g->qprev[i] != RF__NONE)
			rf__put(o, "  n%zu -> n%zu [style=dotted, color=gray];\n", g->qprev[i], i);
		for (uint32_t e = 0; e < g->out[i].n; e++) {
			size_t t = g->out[i].v[e];
			rf__put(o, "  n%zu -> n%zu%s;\n", i, t, rf__is_war(g, i, t) ? " [style=dashed, color=red]" : "");
		}
	}
	rf__put(o, "}\n");
	*len = o->len + 1;
	if (o->len + 1 > cap) {
		if (cap > 0)
			buf[0] = '\0';
		return rf__err(RF_ENOSPC, "rf_graph_dot: %zu bytes needed, cap is %zu", o->len + 1, cap);
	}
	return RF_OK;
}
