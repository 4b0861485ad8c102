/* graph/program.h — internal layout of a lowered program, shared by the lowering (graph/) and the
 * executors (runtime/, backends/).
 *
 * The ops are in one global issue order (topological: one thread issuing them in order never waits on
 * an op it has not issued), with per-queue indices. A program is periodic: the ops are the template
 * of one iteration of `period` blocks, run for r = iter_begin .. iter_end(nblocks)-1, where
 *     block = op.block + r * period,   aux = op.aux + r * period,   value = op.value + r * period,
 *     slot  = (op.slot + (r * period) mod nslots) mod nslots,   stage likewise mod nstage,
 * and an op runs only when block and aux lie in [0, nblocks). rf_graph_lower's programs have period 0
 * (one iteration); a ring's template needs O(depth) memory whatever nblocks is.
 *   COPY, COMPUTE, STAGE: aux = block.   SIGNAL: aux = the block of a consumer (skipped with it).
 *   WAIT: block = the block of the node it precedes, aux = the producer's block.
 */
#ifndef RF_GRAPH_PROGRAM_H
#define RF_GRAPH_PROGRAM_H

#include "ringfetch.h"

#include <stdbool.h>
#include <stdint.h>

/* The one block limit, for graphs, rings and runs alike: a block plus its template offsets and the
 * signal values derived from it never overflow int64_t. */
#define RF__MAX_NBLOCKS ((size_t)INT64_MAX / 8)

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
	/* 1 for rf__ring_program's rings: queue 0's RAW wait for block b's copy is on a copy that waits
	 * only for computes queue 0 has finished, so queue 0 may make it itself (backends/threads.c). */
	int ring;
	/* The queues that compute (bit q): one that also copies may compute right after its copy with no
	 * wait between, so its file copies are read through, never left in flight. */
	uint64_t compute_queues;
};

/* Each kind of op with the fields it uses. */
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

/* The shallowest ring that keeps `copy_queues` copy queues busy: one block in flight on each and one
 * computing. */
static inline unsigned rf__ring_busy_depth(unsigned copy_queues)
{
	return copy_queues + 1;
}

/* Whether a ring of `depth` slots may use `copy_queues` copy queues: one at any depth, K > 1 from
 * rf__ring_busy_depth(K). The one rule for the ring builder, the pipeline and depth = auto. */
static inline bool rf__ring_depth_is_valid(unsigned depth, unsigned copy_queues)
{
	return copy_queues <= 1 || depth >= rf__ring_busy_depth(copy_queues);
}

/* The program of rf__graph_ring(nblocks, depth, copy_queues, pins): one iteration per copy_queues blocks. */
int rf__ring_program(unsigned depth, unsigned copy_queues, unsigned pins, struct rf_program **out);

/* The ring with locality (RF_LOCALITY_COPIER): W = copy_queues + 1 queues take blocks in turn, block b
 * on queue b % W copied there, then computed after compute(b - 1). depth >= W (else RF_EINVAL), so a
 * slot is free again when its queue copies into it. One iteration per W blocks. */
int rf__ring_program_local(unsigned depth, unsigned copy_queues, struct rf_program **out);

/* Testing build only (called behind RF__TEST_HOOK): drop every wait of a queue q != 0 on queue 0 (a
 * ring's slot WAR waits) or, with `staging`, of a queue that stages (the staging WAR waits). */
void rf__prog_drop_war(struct rf_program *p, int staging);

#endif
