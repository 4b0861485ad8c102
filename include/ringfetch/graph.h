/*
 * ringfetch/graph.h — the job graph under every pipeline: build, validate, lower, instantiate, run.
 * Lifecycle: rf_graph_create -> add nodes and edges -> rf_graph_validate -> rf_exec_create (owns its
 * own program: the graph may be destroyed then) -> rf_exec_run ... -> rf_exec_destroy.
 *
 * A node sits on a queue; a queue runs its nodes in the order they were added. An edge u -> v means
 * "u finishes before v starts". Slots are numbered 0 .. nslots-1 (largest used + 1).
 *   COPY    (queue, block, slot): srcs[block] (or the block's staging buffer, if staged) into slot;
 *   COMPUTE (queue, block, slot): call compute with block resident in slot;
 *   WAIT    (queue): wait for every predecessor; no work;
 *   STAGE   (queue, block, slot): srcs[block] into staging buffer `slot` (host staging memory of
 *           slot_bytes, numbered apart from the slots). On "cuda" a queue with STAGE nodes runs on a host
 *           thread and may hold only STAGE and WAIT nodes; a file source reaches the device this way only.
 * docs/design.md and docs/api.md ("Custom graphs") explain the model and two-hop staging.
 */
#ifndef RINGFETCH_GRAPH_H
#define RINGFETCH_GRAPH_H

#include "../ringfetch.h"

#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

/** Most queues a graph may use (queue numbers 0 .. RF_MAX_QUEUES-1). */
#define RF_MAX_QUEUES 64u
/** Most slots a graph may use. */
#define RF_MAX_SLOTS RF_MAX_DEPTH

typedef struct rf_graph rf_graph;
typedef struct rf_program rf_program;
typedef struct rf_exec rf_exec;

typedef enum rf_node_kind { RF_NODE_COPY, RF_NODE_WAIT, RF_NODE_COMPUTE, RF_NODE_STAGE } rf_node_kind;

/** A node as added and as read back. block and slot are ignored (read back as 0) for WAIT. */
typedef struct rf_node_desc {
	rf_node_kind kind;
	unsigned queue;
	size_t block;
	unsigned slot;
	unsigned flags; /* must be 0 */
} rf_node_desc;

/* ---- building ---------------------------------------------------------------------------------- */

/** An empty graph. \return RF_OK; RF_EINVAL (out NULL, flags != 0); RF_ENOMEM. */
RF_EXTERN int rf_graph_create(unsigned flags, rf_graph **out);

/**
 * Append a node; its id (0, 1, 2, ... in order of addition) goes to *id (id may be NULL).
 * \return RF_OK; RF_EINVAL (g or desc NULL, unknown kind, queue >= RF_MAX_QUEUES, flags != 0, and
 *         except for WAIT: slot >= RF_MAX_SLOTS or block >= INT64_MAX / 8); RF_ENOMEM.
 */
RF_EXTERN int rf_graph_add_node(rf_graph *g, const rf_node_desc *desc, size_t *id);

/**
 * Add the edge from -> to; an existing edge is a no-op. Cycles are rejected by rf_graph_validate.
 * \return RF_OK; RF_EINVAL (g NULL, an id out of range, from == to); RF_ENOMEM.
 */
RF_EXTERN int rf_graph_add_edge(rf_graph *g, size_t from, size_t to);

/** Remove the edge from -> to. \return RF_OK; RF_EINVAL (g NULL, no such edge). */
RF_EXTERN int rf_graph_remove_edge(rf_graph *g, size_t from, size_t to);

/**
 * The graph of a ring, in the order of rf_plan_ring: block b copied on queue 1 + b % copy_queues into
 * slot b % depth, computed on queue 0. RAW: copy(b) -> WAIT on queue 0 -> compute(b); WAR (b >= depth):
 * compute(b - depth) -> WAIT on the copy queue -> copy(b). Node ids follow plan order; the lowered
 * program has 1 + min(nblocks, copy_queues) queues.
 * \return RF_OK and *out; RF_EINVAL (depth 0 or > RF_MAX_DEPTH, copy_queues 0 or >= RF_MAX_QUEUES,
 *         copy_queues > 1 with depth < copy_queues + 1, nblocks > INT64_MAX / 8, out NULL); RF_ENOMEM.
 */
RF_EXTERN int rf_graph_ring(size_t nblocks, unsigned depth, unsigned copy_queues, rf_graph **out);

/* ---- reading ----------------------------------------------------------------------------------- */

/** Number of nodes (0 for NULL). */
RF_EXTERN size_t rf_graph_nodes(const rf_graph *g);
/** Number of edges (0 for NULL). */
RF_EXTERN size_t rf_graph_edges(const rf_graph *g);
/** Read node id. \return RF_OK; RF_EINVAL (NULL argument, id out of range). */
RF_EXTERN int rf_graph_node(const rf_graph *g, size_t id, rf_node_desc *out);
/** 1 if the edge from -> to exists, 0 if not or on bad arguments. */
RF_EXTERN int rf_graph_has_edge(const rf_graph *g, size_t from, size_t to);

/**
 * Check that the graph can run and cannot race: no cycle (RF_EINVAL naming a node on it); per slot,
 * RAW (each COMPUTE of (b, s) has the COPY of (b, s) among its ancestors), WAR (each COPY into s is
 * after every COMPUTE of s for an earlier block), WAW (after every earlier COPY into s), each block
 * copied into a slot once; staging buffers likewise, their readers being the COPYs of the blocks staged
 * there, each block staged once. A violation is RF_EHAZARD, rf_errmsg naming the two nodes.
 * Linear for rings and fans, O(nodes * (nodes + edges)) time at worst.
 * \return RF_OK; RF_EINVAL (g NULL, cycle); RF_EHAZARD; RF_ENOMEM.
 */
RF_EXTERN int rf_graph_validate(const rf_graph *g);

/**
 * The graph in Graphviz DOT into buf. With cap too small (buf may then be NULL): RF_ENOSPC, *len the
 * bytes needed including the NUL; on success *len = strlen + 1.
 * \return RF_OK; RF_EINVAL (g or len NULL, buf NULL with cap > 0); RF_ENOSPC.
 */
RF_EXTERN int rf_graph_dot(const rf_graph *g, char *buf, size_t cap, size_t *len);

/** Release the graph. NULL is a no-op. */
RF_EXTERN void rf_graph_destroy(rf_graph *g);

/* ---- lowering ---------------------------------------------------------------------------------- */

/* A lowered program: per queue, the ops it executes. A node with consumers on other queues is followed
 * by one SIGNAL (values count up from 1 per queue); before a node its queue WAITs on each foreign queue
 * at most once, for the latest producer there, unless already waited for. */
typedef enum rf_op_kind { RF_OP_COPY, RF_OP_COMPUTE, RF_OP_SIGNAL, RF_OP_WAIT, RF_OP_STAGE } rf_op_kind;

typedef struct rf_op {
	rf_op_kind kind;
	unsigned queue;      /* the queue executing the op */
	size_t node;         /* COPY, COMPUTE, SIGNAL: the node; WAIT: the node it is waited before */
	size_t block;        /* COPY, COMPUTE, STAGE: the node's block */
	unsigned slot;       /* COPY, COMPUTE: the node's slot; STAGE: its staging buffer */
	unsigned wait_queue; /* WAIT: the queue waited on */
	uint64_t value;      /* SIGNAL: the value signalled; WAIT: the value awaited (>=) */
} rf_op;

/** Validate and lower g (the program is independent of g). \return RF_OK and *out; errors of
 * rf_graph_validate; RF_EINVAL (NULL argument); RF_ENOMEM. */
RF_EXTERN int rf_graph_lower(const rf_graph *g, rf_program **out);
/** Number of queues (largest queue used + 1); 0 for NULL. */
RF_EXTERN unsigned rf_program_queues(const rf_program *p);
/** Number of ops of queue q (0 if p is NULL or q out of range). */
RF_EXTERN size_t rf_program_ops(const rf_program *p, unsigned q);
/** Read op i of queue q. \return RF_OK; RF_EINVAL (NULL argument, q or i out of range). */
RF_EXTERN int rf_program_op(const rf_program *p, unsigned q, size_t i, rf_op *out);
/** Count ops of one kind over all queues (0 for NULL). */
RF_EXTERN size_t rf_program_count(const rf_program *p, rf_op_kind kind);
/**
 * Print the program, one op per line ("  q1: copy    b3 -> s0 (node 6)", staged: "copy    b3 t1 -> s0").
 * \return RF_OK; RF_EINVAL (NULL argument); RF_EBACKEND if writing to f failed.
 */
RF_EXTERN int rf_program_print(const rf_program *p, FILE *f);
/** Release the program. NULL is a no-op. */
RF_EXTERN void rf_program_destroy(rf_program *p);

/* ---- instantiate and run ----------------------------------------------------------------------- */

typedef struct rf_exec_params {
	const char *backend; /* as rf_pipeline_params.backend with host memory; "cuda" named here gives
	                        device memory (a configured "cuda" is RF_ECONFIG) */
	size_t slot_bytes;   /* capacity of each slot (> 0) */
	int device;          /* CUDA device ordinal */
	unsigned flags;      /* must be 0 */
} rf_exec_params;

/**
 * Instantiate g on a backend: validate, lower, allocate the slots and (CPU backends) the staging buffers,
 * slot_bytes each, and the backend's lanes. g may be changed or destroyed afterwards.
 * \return RF_OK and *out; rf_graph_validate's errors; RF_EINVAL (NULL argument, slot_bytes 0, flags,
 *         an empty graph, nslots * slot_bytes overflowing); RF_ENODEV; RF_ECONFIG (as for
 *         rf_pipeline_create: a malformed configured value, the ring over the memory budget);
 *         RF_EBACKEND (hwloc topology); RF_ENOTSUP ("cuda": a queue with STAGE nodes that also copies
 *         or computes); RF_ENOMEM.
 */
RF_EXTERN int rf_exec_create(const rf_graph *g, const rf_exec_params *params, rf_exec **out);

/**
 * Run the graph once: STAGE and unstaged COPY nodes read srcs[block] (sizes[block] bytes), COMPUTE
 * nodes call compute; nblocks must exceed every block in the graph. Checks and errors as for
 * rf_pipeline_run (a failing compute stops every queue from starting nodes), but a NULL e is RF_EINVAL
 * even with nblocks 0. Computes on one queue run in its order. Queue 0 runs on the calling thread; with
 * "threads" every other queue's nodes, computes included, run on that queue's lane (a worker thread).
 * \return RF_OK; RF_EINVAL; RF_EBUSY; RF_ECALLBACK; RF_ECANCELED (rf_exec_destroy from a callback);
 *         RF_ENOTSUP ("cuda": an unstaged COPY of a file source); RF_ENOMEM (tracing arrays); RF_EBACKEND.
 */
RF_EXTERN int rf_exec_run(rf_exec *e, size_t nblocks, const void *const *srcs, const size_t *sizes,
                          rf_compute_fn compute, void *user);

/** The resolved backend name ("" for NULL). */
RF_EXTERN const char *rf_exec_backend(const rf_exec *e);
/** Release the exec. NULL is a no-op. Must not be called while another thread runs it; called from
 * one of its own compute callbacks, the release is deferred until that run returns RF_ECANCELED. */
RF_EXTERN void rf_exec_destroy(rf_exec *e);

#ifdef __cplusplus
}
#endif

#endif /* RINGFETCH_GRAPH_H */
