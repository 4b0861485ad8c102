/* backends/cpu.c — the synchronous backend: the caller walks the program's ops in global order and runs
 * each at once. Each wait is still checked against the signals seen, so that an issue order that could
 * deadlock (a lowering bug) is reported instead of computing on stale slots. The same walk, overlapped
 * (threads runs whose copies are all file reads): a file copy only starts its reads, its queue's signal
 * waits for them to land, a wait reaps reads; a ring's prefetches are in flight while n computes. */
#include "base/error.h"
#include "io/file.h"
#include "io/flight.h"
#include "memory/staging.h"
#include "runtime/walk.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct rf__cpu_walk {
	_Atomic int64_t seen[RF_MAX_QUEUES]; /* last value signalled per queue */
	int overlapped;                      /* file copies are started, not waited for */
	uint64_t after[RF_MAX_QUEUES];       /* overlapped: copies started up to each queue's last one */
	rf__run *run; /* overlapped: the run walked */
	size_t ra_end; /* overlapped: blocks up to here were found adjacent in memory, one after another */
	size_t ra_cap; /* overlapped: how far the reader's window may read ahead (0: no window this run) */
} rf__cpu_walk;

static int rf__cpu_seen(rf__cpu_walk *w, unsigned q, int64_t v)
{
	return atomic_load_explicit(&w->seen[q], memory_order_relaxed) >= v;
}

/* Bytes right after block b (a file range) that the walk copies next, in order: the blocks that follow
 * it in the mapping, one after the other, up to cap (the reader's window reads ahead no further).
 * Amortized O(1) per block: the end of the adjacent blocks found so far is kept. */
static size_t rf__cpu_ahead(rf__cpu_walk *w, const rf__run *run, size_t b, size_t cap)
{
	if (cap == 0)
		return 0;
	if (w->ra_end <= b)
		w->ra_end = b + 1;
	const unsigned char *from = (const unsigned char *)run->srcs[b] + run->sizes[b], *to;
	for (;;) {
		size_t e = w->ra_end;
		to = (const unsigned char *)run->srcs[e - 1] + run->sizes[e - 1];
		if ((size_t)(to - from) >= cap || e >= run->nblocks || run->sizes[e] == 0 || run->srcs[e] != to)
			break;
		w->ra_end = e + 1;
	}
	return (size_t)(to - from) < cap ? (size_t)(to - from) : cap;
}

/* Block b's bytes into dst: from src (its staging slot), else from its source — a file's read at once,
 * or started when overlapped, unless a stage's (its copy reads it right after) or on a computing queue. */
static int rf__cpu_move(rf__cpu_walk *w, rf__run *run, unsigned queue, size_t b, unsigned slot, unsigned char *dst,
			const unsigned char *src, uint32_t node)
{
	size_t n = run->sizes[b];
	if (n == 0)
		return 0;
	if (w->overlapped) /* write after write: an earlier read into this slot lands first */
		rf__flight_wait_dst(run->io, dst, run->slot_stride);
	if (src != NULL || run->nfile == 0 || run->src[b].fs.f == NULL) {
		memcpy(dst, src != NULL ? src : run->srcs[b], n);
		return 0;
	}
	if (!w->overlapped || slot == RF__NO_STAGE || ((run->prog->compute_queues >> queue) & 1))
		return rf__flight_read(run->io, &run->src[b].fs, n, dst, run->slot_stride, 0);
	rf__flight_rec rec = {.block = (int64_t)b, .slot = slot, .node = node, .queue = (uint8_t)queue,
			      .traced = run->trace != NULL,
			      .ahead = run->io->window_state > 0 ? rf__cpu_ahead(w, run, b, w->ra_cap) : 0};
	int rc = rf__flight_start(run->io, &run->src[b].fs, n, dst, run->slot_stride, &rec);
	if (rc != RF_OK)
		return rc;
	w->after[queue] = run->io->started;
	return RF__WALK_ASYNC;
}

static inline __attribute__((always_inline)) int rf__cpu_copy(void *c, rf__run *run, unsigned queue, size_t b, unsigned slot, unsigned stage, uint32_t node)
{
	/* The hot path, small enough to inline into the walk: a block in memory, not staged. */
	if (run->nfile == 0 && stage == RF__NO_STAGE) {
		size_t n = run->sizes[b];
		if (n != 0) /* an empty block's source may be NULL */
			memcpy(rf__slot_ptr(run, slot), run->srcs[b], n);
		return 0;
	}
	const unsigned char *src = stage == RF__NO_STAGE ? NULL : rf__stage_ptr(run, stage);
	return rf__cpu_move(c, run, queue, b, slot, rf__slot_ptr(run, slot), src, node);
}

static int rf__cpu_stage(void *c, rf__run *run, unsigned queue, size_t b, unsigned stage, uint32_t node)
{
	(void)node; /* read at once: the walk traces it */
	return rf__cpu_move(c, run, queue, b, RF__NO_STAGE, rf__stage_ptr(run, stage), NULL, 0);
}

static inline __attribute__((always_inline)) int rf__cpu_compute(void *c, rf__run *run, unsigned queue, size_t b, unsigned slot)
{
	(void)queue;
	(void)c;
	return rf__call_compute(run, b, slot, NULL);
}

/* The overlapped walk's signal goes out after its queue's own reads in flight (a compute's at once). */
static int rf__cpu_signal(void *c, unsigned q, int64_t v, size_t block)
{
	(void)block;
	rf__cpu_walk *w = c;
	rf__flight_signal_after(w->run->io, &w->seen[q], v, w->after[q]);
	return 0;
}

static int rf__cpu_never(unsigned q, unsigned wq, int64_t v)
{
	return rf__err(RF_EBACKEND, "queue %u would wait forever for q%u >= %lld", q, wq, (long long)v);
}

/* The overlapped walk's wait reaps the caller's reads until wq has signalled v (or nothing is left in
 * flight). */
static int rf__cpu_wait(void *c, unsigned q, unsigned wq, int64_t v, size_t block)
{
	(void)block;
	rf__cpu_walk *w = c;
	rf__flight *f = w->run->io;
	if (rf__cpu_seen(w, wq, v))
		return 0;
	while (!rf__cpu_seen(w, wq, v) && rf__flight_progress(f) && !f->failed && !rf__cpu_seen(w, wq, v))
		rf__flight_sleep(f);
	if (f->failed)
		return rf__err(RF_EIO, "%s", f->msg);
	return rf__cpu_seen(w, wq, v) ? 0 : rf__cpu_never(q, wq, v);
}

static const rf__walk_ops rf__cpu_overlapped_ops = {rf__cpu_copy, rf__cpu_compute, rf__cpu_signal, rf__cpu_wait,
						    rf__cpu_stage};

/* The plain walk's signal and wait: nothing is ever in flight. */
static inline __attribute__((always_inline)) int rf__cpu_signal_now(void *c, unsigned q, int64_t v, size_t block)
{
	(void)block;
	atomic_store_explicit(&((rf__cpu_walk *)c)->seen[q], v, memory_order_relaxed);
	return 0;
}

static inline __attribute__((always_inline)) int rf__cpu_wait_seen(void *c, unsigned q, unsigned wq, int64_t v, size_t block)
{
	(void)block;
	return rf__cpu_seen(c, wq, v) ? 0 : rf__cpu_never(q, wq, v);
}

static const rf__walk_ops rf__cpu_plain_ops = {rf__cpu_copy, rf__cpu_compute, rf__cpu_signal_now, rf__cpu_wait_seen,
					       rf__cpu_stage};

int rf__cpu_run(void *ctx, rf__run *run)
{
	(void)ctx;
	rf__cpu_walk w = {{0}, 0, {0}, NULL, 0, 0};
	return rf__walk(run, -1, 0, &rf__cpu_plain_ops, &w);
}

int rf__cpu_walk_overlapped(rf__run *run)
{
	rf__cpu_walk w = {{0}, 1, {0}, run, 0, 0};
	rf__flight *f = run->io;
	f->failed = 0;
	rf__trace_flight(f, run->trace);
	/* The read-ahead window pays for blocks that follow one another in a file where it keeps twice the
	 * bytes in flight that the ring's own reads (depth - 1 blocks) do, or more; not where the owner
	 * reads them straight into the slots. */
	size_t n0 = run->sizes[0];
	int ahead = !f->straight && run->nblocks >= 2 && n0 != 0 && rf__reader_window_serves(f->window, n0) &&
		    n0 <= f->window_block && (size_t)(run->prog->nslots - 1) * n0 * 2 <= f->window &&
		    run->srcs[1] == (const unsigned char *)run->srcs[0] + n0;
	w.ra_cap = ahead ? f->window : 0;
	rf__flight_run_start(f, ahead);
	int rc = rf__walk(run, -1, 0, &rf__cpu_overlapped_ops, &w);
	/* Nothing may still write the ring or read the caller's files on return. */
	while (rf__flight_progress(f))
		rf__flight_sleep(f);
	rf__flight_run_end(f, rc == RF_OK && !f->failed);
	rf__trace_flight(f, NULL);
	if (rc == RF_OK && f->failed)
		rc = rf__err(RF_EIO, "%s", f->msg);
	f->failed = 0;
	return rc;
}

static int rf__cpu_open(const rf__open_args *args, void **ctx)
{
	/* The context is the staging policy (the engine's, outliving us): all slots_alloc needs. */
	*ctx = (void *)args->staging;
	return RF_OK;
}

static void rf__cpu_describe(void *ctx, char *buf, size_t cap)
{
	(void)ctx;
	snprintf(buf, cap, "cpu: copies and computes inline on the caller's thread, no worker threads");
}

void rf__host_slots_free(void *ctx, void *mem, size_t bytes)
{
	(void)ctx;
	(void)bytes;
	rf__staging_free(mem);
}

/* The ring, under the pipeline's staging policy (ctx). */
static int rf__cpu_slots_alloc(void *ctx, size_t bytes, void **mem)
{
	return rf__staging_alloc(ctx, bytes, RF__STAGING_SLOT_ALIGN, mem);
}

/* Keyed copies: inline, so every ticket is 0 (finished on return); nothing to wait for or record. */
int rf__cpu_kpost(void *ctx, const rf__kcopy *req, rf__kticket *out)
{
	(void)ctx;
	if (req->op != RF__KOP_COPY)
		return RF_OK;
	const rf__src *s = &req->src;
	int rc = s->fs.f != NULL ? rf__file_hold("keyed copy", "src", s, req->bytes) : RF_OK;
	if (rc != RF_OK)
		return rc;
	atomic_fetch_add_explicit(req->counter, req->bytes, memory_order_relaxed);
	*out = 0;
	rf__tspan sp = rf__trace_kstart(req->trace);
	if (s->fs.f == NULL)
		memcpy(req->dst, s->p, req->bytes);
	else
		rc = rf__flight_read(req->io, &s->fs, req->bytes, req->dst, req->cap, RF__READER_ALONE);
	rf__trace_kcopy(req->trace, req->tev, sp, req->key, req->slot, req->lane);
	if (s->fs.f != NULL)
		rf__file_unhold(s->fs.f);
	return rc;
}

const rf__backend_ops rf__backend_cpu = {
	.abi = RF__BACKEND_ABI,
	.name = "cpu",
	.caps = 0,
	.open = rf__cpu_open,
	.slots_alloc = rf__cpu_slots_alloc,
	.slots_free = rf__host_slots_free,
	.run = rf__cpu_run,
	.describe = rf__cpu_describe,
	.post = rf__cpu_kpost,
};
