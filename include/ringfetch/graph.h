/*
 * ringfetch/graph.h — the job graph under every pipeline: build one by hand (or from a ring plan),
 * validate it, lower it to per-queue programs, instantiate it on a backend and run it.
 *
 * Lifecycle: rf_graph_create -> rf_graph_add_node / rf_graph_add_edge -> rf_graph_validate ->
 *            rf_exec_create (validates and lowers again, owns its own copy) -> rf_exec_run ... ->
 *            rf_exec_destroy; the graph can be destroyed as soon as the exec exists.
 *
 * Model. A node sits on a queue (a lane of execution: a worker thread, a CUDA stream, or the caller);
 * work on one queue runs in the order the nodes were added. An edge u -> v means "u finishes before v
 * starts". Slots are the ring's buffers, numbered 0 .. nslots-1 (nslots = largest slot used + 1).
 *   COPY    (queue, block, slot): copy srcs[block] (sizes[block] bytes) into slot — from the block's
 *           staging slot instead when the block is staged;
 *   COMPUTE (queue, block, slot): call compute with block `block` resident in `slot`;
 *   WAIT    (queue): the queue waits until every predecessor of the node has finished; it does no work;
 *   STAGE   (queue, block, slot): copy srcs[block] into staging slot `slot`: host memory of slot_bytes
 *           beside the ring, numbered apart from the ring's slots (nstage = largest used + 1). Two-hop
 *           staging: a source the ring's copy cannot read well (pageable memory, for a GPU) goes
 *           source -> staging slot -> ring slot. On "cpu" and "threads" a STAGE is a memcpy on its
 *           queue. On "cuda" staging slots are pinned (page-locked when the first block needs one) and
 *           a queue with STAGE nodes is a host thread, not a stream: it may hold only STAGE and WAIT
 *           nodes; a source DMA can read directly (pinned, registered, device memory) is not copied —
 *           its COPY reads it — and a file's bytes (rf_file_open) are not supported there yet.
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

/**
 * An empty graph. flags must be 0.
 * \return RF_OK; RF_EINVAL (out NULL, flags != 0); RF_ENOMEM.
 */
RF_EXTERN int rf_graph_create(unsigned flags, rf_graph **out);

/**
 * Append a node; its id (0, 1, 2, ... in order of addition) goes to *id (id may be NULL).
 * Queue order is the order of addition among the nodes of one queue.
 * block and slot are ignored for WAIT nodes (and read back as 0).
 * \return RF_OK; RF_EINVAL (g or desc NULL, unknown kind, queue >= RF_MAX_QUEUES, for COPY, COMPUTE
 *         and STAGE slot >= RF_MAX_SLOTS or block >= INT64_MAX / 8 — the one block limit, the same
 *         for rings and runs —, flags != 0); RF_ENOMEM.
 */
RF_EXTERN int rf_graph_add_node(rf_graph *g, const rf_node_desc *desc, size_t *id);

/**
 * Add the edge from -> to ("from finishes before to starts"). Adding an existing edge is a no-op.
 * Cycles are accepted here and rejected by rf_graph_validate.
 * \return RF_OK; RF_EINVAL (g NULL, an id out of range, from == to); RF_ENOMEM.
 */
RF_EXTERN int rf_graph_add_edge(rf_graph *g, size_t from, size_t to);

/** Remove the edge from -> to. \return RF_OK; RF_EINVAL (g NULL, no such edge). */
RF_EXTERN int rf_graph_remove_edge(rf_graph *g, size_t from, size_t to);

/**
 * The graph of a ring: nblocks blocks through `depth` slots, block b copied on queue 1 + b % copy_queues
 * into slot b % depth and computed on queue 0, in the order of rf_plan_ring. Edges, made explicit:
 *   RAW: copy(b) -> WAIT on queue 0 -> compute(b);
 *   WAR: compute(b - depth) -> WAIT on the copy queue -> copy(b)   (for b >= depth);
 * and, implicit as on every queue, the order of addition: computes in block order, and the copies of
 * one queue in block order.
 * Node ids follow plan order, so the ids of block b's nodes are easy to find with rf_graph_node().
 * The lowered program has 1 + min(nblocks, copy_queues) queues (queues no node uses do not count).
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
 * Check that the graph can run and cannot race:
 *  - it has no cycle (RF_EINVAL, rf_errmsg names a node on the cycle);
 *  - RAW: every COMPUTE of (block b, slot s) has the COPY of (b, s) among its ancestors;
 *  - WAR: every COPY into slot s of block b is ordered after every COMPUTE reading s for a block < b;
 *  - WAW: every COPY into slot s of block b is ordered after every COPY into s of a block < b;
 *  - a block is copied into a slot at most once;
 *  - staging slots likewise, their readers being the COPY nodes of the blocks staged there: a block is
 *    staged at most once; RAW: every COPY of a staged block has its STAGE among its ancestors; WAR:
 *    every STAGE into staging slot t of block b is ordered after every COPY of a block < b staged in t;
 *    WAW: after every STAGE into t of a block < b.
 * A violation is RF_EHAZARD, and rf_errmsg names the two nodes (ids, kinds, blocks, slot).
 * Cost: O(nodes + edges) bytes; time: a sort of the nodes, then per slot and block one search each
 * way between the block's copy, its computes and the next copy into the slot, bounded by the nodes
 * between them in topological order — linear for rings and fans (1 copy + 80k computes of one block:
 * about 10 ms here, tests/test_validate.c), O(nodes * (nodes + edges)) at worst.
 * \return RF_OK; RF_EINVAL (g NULL, cycle); RF_EHAZARD; RF_ENOMEM.
 */
RF_EXTERN int rf_graph_validate(const rf_graph *g);

/**
 * Write the graph in Graphviz DOT (one cluster per queue; RAW edges solid, WAR edges dashed, queue
 * order dotted) into buf. Two-call sizing: with cap too small (buf may be NULL then) returns RF_ENOSPC
 * and sets *len to the bytes needed including the terminating NUL; on success *len = strlen + 1.
 * \return RF_OK; RF_EINVAL (g or len NULL, buf NULL with cap > 0); RF_ENOSPC.
 */
RF_EXTERN int rf_graph_dot(const rf_graph *g, char *buf, size_t cap, size_t *len);

/** Release the graph. NULL is a no-op. */
RF_EXTERN void rf_graph_destroy(rf_graph *g);

/* ---- lowering ---------------------------------------------------------------------------------- */

/*
 * A lowered program: for every queue, the list of ops it executes. Rules:
 *  - an edge between two nodes of one queue costs nothing (queue order implies it);
 *  - a node with consumers on other queues is followed by one SIGNAL on its queue (one, however many
 *    consumers); signal values on a queue count up from 1;
 *  - before a node (or at a WAIT node) the queue WAITs on each foreign queue at most once, for the
 *    latest producer it depends on there (earlier ones are implied by that queue's order), and not at
 *    all when an earlier op of the same queue already waited for that value or a later one.
 * Events are (queue, value) pairs: a backend keeps one monotonically increasing counter per queue (or
 * reuses a small pool of CUDA events round robin), so a run allocates nothing per block.
 */
typedef enum rf_op_kind { RF_OP_COPY, RF_OP_COMPUTE, RF_OP_SIGNAL, RF_OP_WAIT, RF_OP_STAGE } rf_op_kind;

typedef struct rf_op {
	rf_op_kind kind;
	unsigned queue;      /* the queue executing the op */
	size_t node;         /* COPY, COMPUTE, SIGNAL: the node; WAIT: the node it is waited before */
	size_t block;        /* COPY, COMPUTE, STAGE: the node's block */
	unsigned slot;       /* COPY, COMPUTE: the node's slot; STAGE: its staging slot */
	unsigned wait_queue; /* WAIT: the queue waited on */
	uint64_t value;      /* SIGNAL: the value signalled; WAIT: the value awaited (>=) */
} rf_op;

/**
 * Validate and lower g. The program is independent of g afterwards.
 * \return RF_OK and *out; errors of rf_graph_validate; RF_EINVAL (NULL argument); RF_ENOMEM.
 */
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
 * Print the program, one queue per paragraph, one op per line ("  q1: copy    b3 -> s0 (node 6)";
 * a staged block's copy names its staging slot: "copy    b3 t1 -> s0").
 * \return RF_OK; RF_EINVAL (NULL argument); RF_EBACKEND if writing to f failed.
 */
RF_EXTERN int rf_program_print(const rf_program *p, FILE *f);
/** Release the program. NULL is a no-op. */
RF_EXTERN void rf_program_destroy(rf_program *p);

/* ---- instantiate and run ----------------------------------------------------------------------- */

typedef struct rf_exec_params {
	const char *backend; /* as rf_pipeline_params.backend with memory RF_MEMORY_HOST ("auto" is a host
	                        backend; a configured "cuda" is RF_ECONFIG), except that naming "cuda" here
	                        gives device memory */
	size_t slot_bytes;   /* capacity of each slot (> 0) */
	int device;          /* CUDA device ordinal */
	unsigned flags;      /* must be 0 */
} rf_exec_params;

/**
 * Instantiate g on a backend: validate, lower, allocate nslots * slot_bytes of slot memory (and, on
 * CPU backends, nstage * slot_bytes of staging memory) and the backend's queues. The exec keeps its
 * own program; g may be changed or destroyed afterwards.
 * \return RF_OK and *out; rf_graph_validate's errors; RF_EINVAL (NULL argument, slot_bytes 0, flags,
 *         an empty graph, nslots * slot_bytes overflowing); RF_ENODEV; RF_ECONFIG (RINGFETCH_BACKEND
 *         malformed, when consulted; the config file malformed; nslots * slot_bytes over the memory
 *         budget, RINGFETCH_MEMORY_BUDGET / memory_budget, as for rf_pipeline_create); RF_EBACKEND
 *         (hwloc topology for the slot memory); RF_ENOTSUP ("cuda": a queue with STAGE nodes that also
 *         copies or computes); RF_ENOMEM.
 */
RF_EXTERN int rf_exec_create(const rf_graph *g, const rf_exec_params *params, rf_exec **out);

/**
 * Run the instantiated graph once: STAGE nodes and the COPY nodes of unstaged blocks read srcs[block]
 * (sizes[block] bytes), COMPUTE nodes call compute. nblocks must exceed every block number in the graph. Input checks and error codes as for
 * rf_pipeline_run; a failing compute stops every queue from starting new nodes and the run returns
 * RF_ECALLBACK once in-flight work has drained. Computes on one queue run in that queue's order.
 * Unlike rf_pipeline_run, a NULL e is RF_EINVAL even with nblocks 0 (an exec always has a graph).
 * Threads: queue 0's nodes run on the calling thread; with the "threads" backend every other queue's
 * nodes — compute callbacks included — run on that queue's worker thread.
 * \return RF_OK; RF_EINVAL; RF_EBUSY; RF_ECALLBACK; RF_ECANCELED (rf_exec_destroy from a callback);
 *         RF_ENOMEM (tracing arrays); RF_EBACKEND.
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
