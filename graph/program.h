/* graph/program.h — internal layout of a lowered program, shared by the lowering (graph/) and the
 * executors (runtime/, backends/).
 *
 * A program is a list of ops in one global issue order (a topological order: a single thread that
 * issues them in this order never waits on an op it has not issued yet), plus, per queue, the indices
 * of that queue's ops. It is *periodic*: the ops are a template for one iteration of `period` blocks,
 * run for iterations r = iter_begin .. iter_end(nblocks)-1, where in iteration r
 *     block = op.block + r * period,   aux = op.aux + r * period,   value = op.value + r * period,
 *     slot  = (op.slot + (r * period) mod nslots) mod nslots,   stage likewise mod nstage,
 * and an op runs only when both block and aux lie in [0, nblocks). A graph lowered by rf_graph_lower is
 * the degenerate case: period 0, one iteration, nothing skipped. A ring pipeline's program is the real
 * case: a few ops per block whatever nblocks is, so a run over a million blocks needs O(depth) memory.
 *
 *   COPY, COMPUTE, STAGE: block = the node's block, aux = block.
 *   SIGNAL: block = the producer's block, aux = the block of a consumer (skipped with its consumers).
 *   WAIT:   block = the block of the node it precedes, aux = the producer's block.
 */
#ifndef RF_GRAPH_PROGRAM_H
#define RF_GRAPH_PROGRAM_H

#include "ringfetch.h"

#include <stdbool.h>
#include <stdint.h>

/* The one block limit: block numbers are < RF__MAX_NBLOCKS everywhere (rf_graph_add_node, rf_graph_ring,
 * every run), so that a block plus its template offsets and the signal values derived from it never
 * overflow int64_t. A graph that could be built can be run. */
#define RF__MAX_NBLOCKS ((size_t)INT64_MAX / 8)
static inline int rf__nblocks_ok(size_t nblocks)
{
	return nblocks <= RF__MAX_NBLOCKS;
}
static inline int rf__block_ok(size_t block)
{
	return block < RF__MAX_NBLOCKS;
}

#define RF__NO_STAGE UINT32_MAX /* rf__op.stage of a COPY whose block is not staged */

typedef struct rf__op {
	uint8_t kind;   /* rf_op_kind */
	uint8_t queue;  /* executing queue */
	uint8_t wqueue; /* WAIT: queue waited on */
	uint8_t pad_;
	uint32_t slot;  /* COPY, COMPUTE: ring slot (offset, see above) */
	uint32_t stage; /* STAGE: the staging slot it fills; COPY: the one it reads, or RF__NO_STAGE */
	int64_t block;
	int64_t aux;
	int64_t value; /* SIGNAL, WAIT */
	size_t node;   /* node id (template id for a periodic program), for printing and tracing */
} rf__op;

struct rf_program {
	unsigned nqueues;
	unsigned nslots;
	unsigned nstage; /* staging slots (largest used + 1), numbered apart from the ring's */
	size_t nops;
	rf__op *ops;
	size_t *qidx;                      /* per-queue op indices, grouped by queue */
	size_t qstart[RF_MAX_QUEUES + 1];  /* queue q owns qidx[qstart[q] .. qstart[q+1]) */
	int64_t period;                    /* blocks per iteration; 0 = not periodic */
	int64_t iter_begin;
	size_t nblocks_min; /* a run must stream at least this many blocks (largest block used + 1) */
	/* 1 for rf__ring_program's rings: queue 0 computes block b in slot b % nslots after a RAW wait for
	 * value b + 1 of the queue that copies it, whose copy of b waits only for computes queue 0 has
	 * finished by then — so queue 0 may make that copy itself (backends/threads.c). */
	int ring;
	/* The queues that compute (bit q). A queue that also copies may compute a block right after its
	 * copy with no wait between them, so its file copies are read through, never left in flight. */
	uint64_t compute_queues;
};

/* Named constructors: each kind of op with the fields it uses (the table above). */
static inline rf__op rf__op_copy(unsigned queue, unsigned slot, unsigned stage, int64_t block, size_t node)
{
	return (rf__op){.kind = RF_OP_COPY, .queue = (uint8_t)queue, .slot = slot, .stage = stage, .block = block,
			.aux = block, .node = node};
}

static inline rf__op rf__op_compute(unsigned queue, unsigned slot, int64_t block, size_t node)
{
	return (rf__op){.kind = RF_OP_COMPUTE, .queue = (uint8_t)queue, .slot = slot, .stage = RF__NO_STAGE,
			.block = block, .aux = block, .node = node};
}

static inline rf__op rf__op_stage(unsigned queue, unsigned stage, int64_t block, size_t node)
{
	return (rf__op){.kind = RF_OP_STAGE, .queue = (uint8_t)queue, .stage = stage, .block = block, .aux = block,
			.node = node};
}

static inline rf__op rf__op_signal(unsigned queue, int64_t value, int64_t block, int64_t aux, size_t node)
{
	return (rf__op){.kind = RF_OP_SIGNAL, .queue = (uint8_t)queue, .stage = RF__NO_STAGE, .block = block,
			.aux = aux, .value = value, .node = node};
}

static inline rf__op rf__op_wait(unsigned queue, unsigned wait_queue, int64_t value, int64_t block, int64_t aux,
				 size_t node)
{
	return (rf__op){.kind = RF_OP_WAIT, .queue = (uint8_t)queue, .wqueue = (uint8_t)wait_queue,
			.stage = RF__NO_STAGE, .block = block, .aux = aux, .value = value, .node = node};
}

/* End of the iteration range for a run over nblocks blocks. */
static inline int64_t rf__prog_iter_end(const struct rf_program *p, size_t nblocks)
{
	if (p->period == 0)
		return 1;
	return (int64_t)((nblocks + (size_t)p->period - 1) / (size_t)p->period);
}

/* Allocate an empty program with room for nops ops (per-queue index built by rf__prog_index). */
struct rf_program *rf__prog_alloc(size_t nops);
/* Fill qidx/qstart from ops[].queue and set nqueues (qidx has room for every op: nothing to fail). */
void rf__prog_index(struct rf_program *p);

/* The shallowest ring that keeps `copy_queues` copy queues busy: one block in flight on each and one
 * computing (2 for one queue, the double buffer). */
static inline unsigned rf__ring_busy_depth(unsigned copy_queues)
{
	return copy_queues + 1;
}

/* Whether a ring of `depth` slots may use `copy_queues` copy queues: one queue works at any depth (depth
 * 1 is the sequential baseline), K > 1 queues need rf__ring_busy_depth(K). The one rule for the ring
 * builder, the pipeline and its depth = auto. */
static inline bool rf__ring_depth_is_valid(unsigned depth, unsigned copy_queues)
{
	return copy_queues <= 1 || depth >= rf__ring_busy_depth(copy_queues);
}

/* The program of a ring of `depth` slots with `copy_queues` (K) copy queues (1 + b % K carries block
 * b's copy into slot b % depth, queue 0 the computes): one iteration per K blocks. With pins > 0 the
 * ring is staged: block b is first copied into staging slot b % (K * pins) on host queue 1 + K + b % K,
 * and the staging slots are a ring of their own whose consumer is the copy (rf__plan_staged). */
int rf__ring_program(unsigned depth, unsigned copy_queues, unsigned pins, struct rf_program **out);

/* The ring with locality (RF_LOCALITY_COPIER): W = copy_queues + 1 queues (queue 0 the caller) take
 * blocks in turn, block b on queue b % W, each copying its block and then computing it after the
 * compute of block b - 1 (computes stay in block order, one at a time). depth >= W (RF_EINVAL
 * otherwise): a slot is then free again by the time its queue copies into it. One iteration per W blocks. */
int rf__ring_program_local(unsigned depth, unsigned copy_queues, struct rf_program **out);

/* Test-only negative controls: remove every wait of a non-compute queue (q != 0) on queue 0 — in a
 * ring, exactly the WAR waits of its slots — or, with `staging`, every wait of a queue that stages —
 * the WAR waits of the staging slots — and reindex. Defined only in the testing build (RF_TESTING); the
 * calls in the library sit behind RF__TEST_HOOK(drop_war_wait / drop_staging_war), constant 0 in the
 * shipped build. */
void rf__prog_drop_war(struct rf_program *p, int staging);

/* Expand a (periodic) program for nblocks into the flat op list a generic lowering would give, values
 * renumbered per queue from 1, and (stages non-NULL) the staging slot of each op (RF__NO_STAGE where
 * none). *out and *stages are malloc'd (*n entries). Not used by the runtime: it is how the tests
 * compare a ring's periodic program with the generic lowering of its explicit graph. */
#ifdef RF_TESTING
int rf__prog_expand(const struct rf_program *p, size_t nblocks, rf_op **out, unsigned **stages, size_t *n);
#endif

#endif
