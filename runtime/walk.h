/* runtime/walk.h — the one interpreter of lowered programs: it expands the periodic template (block,
 * value and slot per iteration), skips ops outside [0, nblocks) and calls a backend's handler for each
 * op in program order. Static inline, so that a constant handler table is inlined (the cpu backend's
 * hot loop is this function with memcpy and the callback in it). */
#ifndef RF_RUNTIME_WALK_H
#define RF_RUNTIME_WALK_H

#include "runtime/backend.h"
#include "runtime/trace.h"

/* A copy handler's returns: the copy only started (a file read in flight; the backend records and
 * accounts it when it lands; a keyed copy's slice ends here), or another thread made, traced and
 * accounted it (or, for a keyed copy, nobody will: it was withdrawn). */
#define RF__WALK_ASYNC 1
#define RF__WALK_ELSEWHERE 2

typedef struct rf__walk_ops {
	/* stage: the staging slot the copy reads (rf__stage_ptr), RF__NO_STAGE when the block is not staged;
	 * node: the op's node (the trace names it; a copy that lands later records its own slice) */
	int (*copy)(void *c, rf__run *run, unsigned queue, size_t block, unsigned slot, unsigned stage, uint32_t node);
	int (*compute)(void *c, rf__run *run, unsigned queue, size_t block, unsigned slot);
	/* block: SIGNAL, the producer's block; WAIT, the block of the node it precedes (for logs, traces). */
	int (*signal)(void *c, unsigned queue, int64_t value, size_t block);
	int (*wait)(void *c, unsigned queue, unsigned wait_queue, int64_t value, size_t block);
	/* copy srcs[block] into staging slot `stage` (node: as for copy) */
	int (*stage)(void *c, rf__run *run, unsigned queue, size_t block, unsigned stage, uint32_t node);
} rf__walk_ops;

/* After a timed copy, stage or compute (trace or stats on): record the slice and account the busy time
 * (a stage counts as a copy). A keyed copy's slice is its entry of the keyed copies' trace. */
static inline void rf__walk_timed(rf__run *run, const rf__op *o, int64_t b, unsigned slot, int64_t t0, uint64_t s0)
{
	unsigned q = o->queue;
	uint8_t kind = o->kind;
	int64_t t1 = rf__now_ns();
	if (run->keyed != NULL) {
		const rf__kcopy *k = run->keyed;
		if (run->trace)
			rf__trace_kslice(run->trace, k->tev, (rf__tspan){t0, s0}, t1, k->key, k->slot, k->lane);
		return;
	}
	if (run->trace)
		rf__trace_add(run->trace, q, kind, b, slot, (uint32_t)o->node, t0, t1, s0);
	if (run->stats) {
		run->stats[q].busy_ns += t1 - t0;
		if (kind == RF_OP_COMPUTE)
			run->stats[q].computes++;
		else
			run->stats[q].copies++;
	}
}

/* One op of block b, its slot and staging slot resolved, value offset `base`: its handler, and the slice
 * and time accounting around it. The walk's step, always inlined into it. */
static inline __attribute__((always_inline)) int rf__walk_op(rf__run *run, const rf__op *o, int64_t b, int64_t base,
							     unsigned slot, unsigned st, int timed, const rf__walk_ops *h,
							     void *c)
{
	int rc = 0;
	switch (o->kind) {
	case RF_OP_COPY:
	case RF_OP_STAGE: {
		int64_t t0 = timed ? rf__now_ns() : 0;
		uint64_t s0 = run->trace ? rf__trace_seq(run->trace) : 0;
		if (RF__TEST_HOOK(before_copy) != NULL && run->keyed == NULL)
			RF__TEST_HOOK(before_copy)((size_t)b);
		if (o->kind == RF_OP_STAGE)
			rc = h->stage(c, run, o->queue, (size_t)b, slot = st, (uint32_t)o->node);
		else
			rc = h->copy(c, run, o->queue, (size_t)b, slot, st, (uint32_t)o->node);
		if (rc == 0) {
			if (timed)
				rf__walk_timed(run, o, b, slot, t0, s0);
		} else if (rc == RF__WALK_ASYNC) {
			rc = 0;
			if (run->keyed != NULL && timed) /* its slice ends once its reads are in flight */
				rf__walk_timed(run, o, b, slot, t0, s0);
			else if (run->stats)
				run->stats[o->queue].copies++;
		} else if (rc == RF__WALK_ELSEWHERE) {
			rc = 0;
		} else if (timed && rc != RF_ECANCELED) { /* canceled: the copy never ran */
			rf__walk_timed(run, o, b, slot, t0, s0);
		}
		break;
	}
	case RF_OP_COMPUTE: {
		int64_t t0 = timed ? rf__now_ns() : 0;
		uint64_t s0 = run->trace ? rf__trace_seq(run->trace) : 0;
		rc = h->compute(c, run, o->queue, (size_t)b, slot);
		if (timed && rc != RF_ECANCELED) /* canceled: the callback was not called */
			rf__walk_timed(run, o, b, slot, t0, s0);
		break;
	}
	case RF_OP_SIGNAL:
		rc = h->signal(c, o->queue, o->value + base, (size_t)b);
		break;
	case RF_OP_WAIT: {
		int64_t t0 = run->stats ? rf__now_ns() : 0;
		rc = h->wait(c, o->queue, o->wqueue, o->value + base, (size_t)b);
		if (run->stats)
			run->stats[o->queue].wait_ns += rf__now_ns() - t0;
		break;
	}
	}
	return rc;
}

/* Walk the ops of `queue` (or, when queue < 0, of every queue whose bit is clear in `skip`, in global
 * issue order); stops at the first handler that returns non-zero and returns that. Always inlined: a
 * backend walking from two places would otherwise get one out-of-line copy whose handlers are calls. */
static inline __attribute__((always_inline)) int rf__walk(rf__run *run, int queue, uint64_t skip, const rf__walk_ops *h, void *c)
{
	const struct rf_program *p = run->prog;
	const uint64_t n = run->nblocks;
	const int64_t period = p->period, iend = rf__prog_iter_end(p, run->nblocks);
	const unsigned ns = p->nslots ? p->nslots : 1, nt = p->nstage ? p->nstage : 1;
	const size_t *idx = queue < 0 ? NULL : p->qidx + p->qstart[queue];
	const size_t nops = queue < 0 ? p->nops : p->qstart[queue + 1] - p->qstart[queue];
	const int timed = run->trace != NULL || run->stats != NULL;
	/* Slots of iteration r's block offset 0, kept incrementally: no division on the hot path. */
	int64_t base = p->iter_begin * period;
	unsigned rslot = (unsigned)(((base % (int64_t)ns) + ns) % ns), pstep = (unsigned)(period % ns);
	unsigned rst = (unsigned)(((base % (int64_t)nt) + nt) % nt), tstep = (unsigned)(period % nt);
	for (int64_t r = p->iter_begin; r < iend; r++, base += period) {
		for (size_t i = 0; i < nops; i++) {
			const rf__op *o = &p->ops[idx ? idx[i] : i];
			int64_t b = o->block + base, a = o->aux + base;
			if ((uint64_t)b >= n || (uint64_t)a >= n || (skip != 0 && ((skip >> o->queue) & 1)))
				continue;
			/* Slots only where an op has one (signals and waits, half the ops, have none). */
			unsigned slot = 0, st = RF__NO_STAGE;
			if (o->kind == RF_OP_COPY || o->kind == RF_OP_COMPUTE || o->kind == RF_OP_STAGE) {
				slot = o->slot + rslot;
				slot -= slot >= ns ? ns : 0;
				if (o->stage != RF__NO_STAGE) {
					st = o->stage + rst;
					st -= st >= nt ? nt : 0;
				}
			}
			int rc = rf__walk_op(run, o, b, base, slot, st, timed, h, c);
			if (rc != 0)
				return rc;
		}
		rslot += pstep;
		rslot -= rslot >= ns ? ns : 0;
		rst += tstep;
		rst -= rst >= nt ? nt : 0;
	}
	return 0;
}

/* The walk of a one-block program whose ops name their slots outright (a keyed copy's: block 0, period
 * 0, no staging slot, every op run): the same steps in order, without the template's expansion. */
static inline __attribute__((always_inline)) int rf__walk_block(rf__run *run, const rf__walk_ops *h, void *c)
{
	const struct rf_program *p = run->prog;
	const int timed = run->trace != NULL || run->stats != NULL;
	for (size_t i = 0; i < p->nops; i++) {
		const rf__op *o = &p->ops[i];
		int rc = rf__walk_op(run, o, 0, 0, o->slot, RF__NO_STAGE, timed, h, c);
		if (rc != 0)
			return rc;
	}
	return 0;
}

static inline unsigned char *rf__slot_ptr(const rf__run *run, unsigned slot)
{
	return run->slots + (size_t)slot * run->slot_stride;
}

/* Host staging slots (CPU backends). */
static inline unsigned char *rf__stage_ptr(const rf__run *run, unsigned stage)
{
	return run->stage + (size_t)stage * run->slot_stride;
}

/* The call of a compute with the failure bookkeeping every backend needs. */
static inline int rf__call_compute(rf__run *run, size_t b, unsigned slot, void *stream)
{
	if (atomic_load_explicit(run->cancel, memory_order_relaxed))
		return RF_ECANCELED;
	rf_block blk = {b, slot, rf__slot_ptr(run, slot), run->sizes[b], stream};
	int v = run->compute(run->user, &blk);
	if (v != 0) {
		run->failed_block = b;
		run->failed_value = v;
		return RF_ECALLBACK;
	}
	return RF_OK;
}

#endif
