/* backends/cpu.c — the synchronous backend: the caller's thread issues the program's ops in their
 * global (topological) order and executes each at once. Copies are memcpy; signals and waits need no
 * synchronisation, but a wait is still checked against the signals seen so far, so that an issue order
 * that could deadlock (a lowering bug) is reported instead of silently computing on stale slots. */
#include "runtime/backend.h"
#include "runtime/error.h"

#include <stdlib.h>
#include <string.h>

static int rf__cpu_probe(int device)
{
	(void)device;
	return RF_OK;
}

static int rf__cpu_open(const rf__open_args *args, void **ctx)
{
	(void)args;
	*ctx = NULL; /* no state: everything lives in the run */
	return RF_OK;
}

static void rf__cpu_close(void *ctx)
{
	(void)ctx;
}

static int rf__cpu_slots_alloc(void *ctx, size_t bytes, void **mem)
{
	(void)ctx;
	/* Cache-line aligned so that slots of a 64-byte multiple never share a line. */
	size_t rounded = (bytes + 63) & ~(size_t)63;
	if (rounded < bytes || (*mem = aligned_alloc(64, rounded)) == NULL)
		return rf__err(RF_ENOMEM, "cpu: cannot allocate %zu bytes of slots", bytes);
	return RF_OK;
}

static void rf__cpu_slots_free(void *ctx, void *mem, size_t bytes)
{
	(void)ctx;
	(void)bytes;
	free(mem);
}

static int rf__cpu_compute(rf__run *run, size_t b, unsigned slot)
{
	if (atomic_load_explicit(run->cancel, memory_order_relaxed))
		return RF_ECANCELED;
	rf_block blk = {b, slot, run->slots + (size_t)slot * run->slot_bytes, run->sizes[b], NULL};
	int v = run->compute(run->user, &blk);
	if (v != 0) {
		run->failed_block = b;
		run->failed_value = v;
		return RF_ECALLBACK;
	}
	return RF_OK;
}

static int rf__cpu_run(void *ctx, rf__run *run)
{
	(void)ctx;
	const struct rf_program *p = run->prog;
	const uint64_t n = run->nblocks;
	const int64_t period = p->period, iend = rf__prog_iter_end(p, run->nblocks);
	const unsigned ns = p->nslots ? p->nslots : 1;
	int64_t seen[RF_MAX_QUEUES] = {0};
	/* Slot of iteration r's block offset 0, kept incrementally: no division on the hot path. */
	int64_t base = p->iter_begin * period;
	unsigned rslot = (unsigned)(((base % ns) + ns) % ns), pstep = (unsigned)(period % ns);
	for (int64_t r = p->iter_begin; r < iend; r++, base += period) {
		for (size_t i = 0; i < p->nops; i++) {
			const rf__op *o = &p->ops[i];
			int64_t b = o->block + base, a = o->aux + base;
			if ((uint64_t)b >= n || (uint64_t)a >= n)
				continue;
			unsigned slot = o->slot + rslot;
			slot -= slot >= ns ? ns : 0;
			int rc;
			switch (o->kind) {
			case RF_OP_COPY:
				if (run->sizes[b] != 0)
					memcpy(run->slots + (size_t)slot * run->slot_bytes, run->srcs[b], run->sizes[b]);
				break;
			case RF_OP_COMPUTE:
				if ((rc = rf__cpu_compute(run, (size_t)b, slot)) != RF_OK)
					return rc;
				break;
			case RF_OP_SIGNAL:
				seen[o->queue] = o->value + base;
				break;
			case RF_OP_WAIT:
				if (seen[o->wqueue] < o->value + base)
					return rf__err(RF_EBACKEND, "queue %u would wait forever for q%u >= %lld (op %zu)",
						       o->queue, o->wqueue, (long long)(o->value + base), i);
				break;
			}
		}
		rslot += pstep;
		rslot -= rslot >= ns ? ns : 0;
	}
	return RF_OK;
}

const rf__backend_ops rf__backend_cpu = {
	.abi = RF__BACKEND_ABI,
	.name = "cpu",
	.caps = 0,
	.probe = rf__cpu_probe,
	.open = rf__cpu_open,
	.close = rf__cpu_close,
	.slots_alloc = rf__cpu_slots_alloc,
	.slots_free = rf__cpu_slots_free,
	.run = rf__cpu_run,
};
