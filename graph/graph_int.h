/* graph/graph_int.h — internal layout of rf_graph and its analyses. Pure data: nothing here knows a
 * backend, a thread or a device. */
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
	/* Largest ring slot, staging slot, queue and block used, + 1 (0 if none). */
	unsigned nslots, nstage, nqueues;
	size_t nblocks;
};

#define RF__NONE ((size_t)-1)

/* Topological order of the effective graph (explicit edges + queue order), smallest id first among
 * ready nodes. *order (n ids) and *pos (position of each id) are malloc'd; a cycle is RF_EINVAL naming
 * a node on it. */
int rf__graph_topo(const rf_graph *g, size_t **order, size_t **pos);

/* x mod m for blocks that may be negative (relative to a template's iteration). */
static inline unsigned rf__mod(int64_t x, unsigned m)
{
	return (unsigned)(((x % m) + m) % m);
}

/* The ring: queue 0 computes, block b is copied on queue 1 + b % copy_queues and, in a staged ring,
 * staged on queue 1 + copy_queues + b % copy_queues. */
static inline unsigned rf__ring_copy_queue(int64_t b, unsigned copy_queues)
{
	return 1 + rf__mod(b, copy_queues);
}

static inline unsigned rf__ring_stage_queue(int64_t b, unsigned copy_queues)
{
	return copy_queues + rf__ring_copy_queue(b, copy_queues);
}

/* The steps of a staged ring in issue order: the ring's plan over `depth` slots merged with its staging
 * ring's plan over `sdepth` staging slots. The staging ring's COMPUTE b is the ring's PREFETCH b, so
 * the staging steps up to it come right before that PREFETCH and it is not listed. sdepth 0: the plain
 * ring. *steps is malloc'd (*len entries); RF_OK, RF_ENOMEM, or rf_plan_ring's RF_EINVAL. */
typedef struct rf__sstep {
	rf_step s;
	int staging; /* a step of the staging ring (PREFETCH: a STAGE; AWAIT: the copy waits for it) */
} rf__sstep;
int rf__plan_staged(size_t nblocks, unsigned depth, unsigned sdepth, rf__sstep **steps, size_t *len);

/* rf_graph_ring, staged when pins > 0 (block b staged into staging slot b % (copy_queues * pins)). */
int rf__graph_ring(size_t nblocks, unsigned depth, unsigned copy_queues, unsigned pins, rf_graph **out);

/* The STAGE nodes of a graph sorted by block, to find the staging slot a COPY reads. */
typedef struct rf__stage_ent {
	size_t block, id;
	unsigned slot;
} rf__stage_ent;
/* *out malloc'd (NULL with *n 0 when none): RF_OK or RF_ENOMEM (rf_errmsg not set). */
int rf__graph_stages(const rf_graph *g, rf__stage_ent **out, size_t *n);
/* The entry of `block` in the sorted stages, or NULL (the first of several). */
const rf__stage_ent *rf__stage_find(const rf__stage_ent *e, size_t n, size_t block);

/* "node 7 (compute b3 s1 on q0)" into buf, for error messages. */
const char *rf__node_str(const rf_graph *g, size_t id, char *buf, size_t cap);

#endif
