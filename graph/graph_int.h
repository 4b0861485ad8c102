/* graph/graph_int.h — internal layout of rf_graph and its analyses (topological order, reachability).
 * Pure data: nothing here knows a backend, a thread or a device. */
#ifndef RF_GRAPH_INT_H
#define RF_GRAPH_INT_H

#include "ringfetch.h"

#include <stdbool.h>
#include <stdint.h>

/* A growable list of node ids (the out- or in-edges of one node). */
typedef struct rf__idvec {
	size_t *v;
	uint32_t n, cap;
} rf__idvec;

struct rf_graph {
	rf_node_desc *nodes;
	rf__idvec *out, *in; /* explicit edges only; queue order is implicit */
	size_t *qprev;       /* previous node on the same queue, or RF__NONE */
	size_t qlast[RF_MAX_QUEUES];
	size_t n, cap, nedges;
};

#define RF__NONE ((size_t)-1)

/* Topological order of the effective graph (explicit edges + queue order), smallest id first among
 * ready nodes, so a graph built in plan order keeps that order. On success *order (n ids) and *pos
 * (position of each id) are malloc'd; on a cycle returns RF_EINVAL naming a node on it. */
int rf__graph_topo(const rf_graph *g, size_t **order, size_t **pos);

/* The largest slot used + 1, the largest queue used + 1, the largest block used + 1 (0 if none). */
unsigned rf__graph_nslots(const rf_graph *g);
unsigned rf__graph_nqueues(const rf_graph *g);
size_t rf__graph_nblocks(const rf_graph *g);

/* The ring plan (rf_plan_ring) of nblocks blocks in a malloc'd array: *len = 3 * nblocks steps.
 * Returns RF_OK, RF_ENOMEM, or rf_plan_ring's RF_EINVAL. */
int rf__plan_alloc(size_t nblocks, unsigned depth, rf_step **steps, size_t *len);

/* The ring (rf_graph_ring, and the ring's periodic program): queue 0 computes, and block b is copied
 * on queue 1 + b % copy_queues. */
static inline unsigned rf__ring_copy_queue(int64_t b, unsigned copy_queues)
{
	return 1 + (unsigned)(((b % copy_queues) + copy_queues) % copy_queues);
}

/* "node 7 (compute b3 s1 on q0)" into buf, for error messages. */
const char *rf__node_str(const rf_graph *g, size_t id, char *buf, size_t cap);

#endif
