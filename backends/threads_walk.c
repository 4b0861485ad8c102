/* backends/threads_walk.c — how the threads backend walks a program (runtime/walk.h): its op handlers.
 * Queues have CUDA-stream semantics: a signal publishes "this queue has done everything up to v", a wait
 * holds its queue until another has published v. The first failing op wins a CAS on its program's
 * `first_rc`, then sets its `stop`: every walker of that program stops at its next op or wait, and a run
 * returns once every lane has left its walk. A run's queues and keyed copies (threads_keyed.c, one-block
 * programs) are walked with the same handlers, each with its own program state: a keyed copy never sees
 * a run's stop or failure, nor a run its. */
#include "backends/threads_int.h"
#include "base/error.h"
#include "io/file.h"
#include "runtime/trace.h"
#include "runtime/walk.h"

#include <stdio.h>
#include <string.h>

/* Record the run's first failure (rf__first_failure) and stop every queue. */
static void rf__threads_fail(rf__walker *wk, int rc)
{
	rf__threads_prog *ps = wk->ps;
	if (rf__first_failure(&ps->first_rc, rc)) {
		ps->fail_block = wk->run.failed_block;
		ps->fail_value = wk->run.failed_value;
		if (rc == RF_EIO)
			snprintf(ps->fail_msg, sizeof ps->fail_msg, "%s", wk->lane ? wk->lane->flight.msg : rf__errmsg_peek());
	}
	atomic_store(&ps->stop, 1);
	rf__ec_notify(&wk->t->ec);
}

static int rf__threads_stopped(const rf__walker *wk)
{
	return atomic_load_explicit(&wk->ps->stop, memory_order_relaxed) ||
	       atomic_load_explicit(wk->run.cancel, memory_order_relaxed);
}

/* Reap the lane's landed file copies (their signals go out in order); a failed one fails the run. */
static void rf__threads_progress(rf__walker *wk)
{
	if (wk->lane != NULL && rf__flight_reap(&wk->lane->flight) != RF_OK)
		rf__threads_fail(wk, RF_EIO);
}

/* A blocking read of a file copy on the walking thread; a keyed one is read as one no stream follows. */
static int rf__threads_read(rf__flight *f, const rf__run *run, const rf__fsrc *fs, size_t n, unsigned char *dst)
{
	return rf__flight_read(f, fs, n, dst, run->slot_stride, run->keyed != NULL ? RF__READER_ALONE : 0);
}

/* A file copy: a lane starts its reads and walks on; the caller reads it through. A keyed hint's read
 * lets go of its file once landed and marks its slot if it fails (the flight's record says so); one
 * that cannot start is marked at once. Either way its signal goes out, in order: a hint's failure is
 * its slot's, never its program's. */
static int rf__threads_file_copy(rf__walker *wk, rf__run *run, const rf__fsrc *fs, size_t b, unsigned slot,
		uint32_t node)
{
	size_t n = run->sizes[b];
	unsigned char *dst = rf__slot_ptr(run, slot);
	if (wk->lane == NULL)
		return rf__threads_read(run->io, run, fs, n, dst);
	rf__flight_rec rec = {.block = (int64_t)b, .slot = slot, .node = node, .queue = (uint8_t)wk->lane->q,
			      .traced = run->trace != NULL && run->keyed == NULL};
	if (run->keyed != NULL) {
		rec.unhold = fs->f;
		rec.flags = RF__READER_ALONE;
		rec.fail_at = run->keyed->failed;
		rec.fail_value = (int64_t)wk->ticket;
	}
	int rc = rf__flight_start(&wk->lane->flight, fs, n, dst, run->slot_stride, &rec);
	if (rc != RF_OK && run->keyed != NULL) {
		atomic_store_explicit(rec.fail_at, rec.fail_value, memory_order_release);
		rf__file_unhold(fs->f);
		return 0;
	}
	rf__threads_progress(wk);
	return rc == RF_OK ? RF__WALK_ASYNC : rc;
}

/* Block b's bytes into dst: from src (its staging slot), else from its source. A file is read by a lane
 * asynchronously into ring slot `slot`; at once into a staging slot, by the caller, or on a queue that
 * also computes (a compute may follow its copy there with no wait between them). */
static inline __attribute__((always_inline)) int rf__threads_move(void *c, rf__run *run, unsigned queue, size_t b,
		unsigned char *dst, const unsigned char *src, unsigned slot, uint32_t node)
{
	rf__walker *wk = c;
	if (rf__threads_stopped(c))
		return RF_ECANCELED;
	size_t n = run->sizes[b];
	if (n != 0 && wk->lane != NULL && rf__flight_busy(&wk->lane->flight)) /* write after write */
		rf__flight_wait_dst(&wk->lane->flight, dst, run->slot_stride);
	const rf__fsrc *fs = n != 0 && src == NULL && run->nfile > 0 ? &run->src[b].fs : NULL;
	if (fs != NULL && fs->f != NULL)
		return slot != RF__NO_STAGE && !((run->prog->compute_queues >> queue) & 1)
			       ? rf__threads_file_copy(c, run, fs, b, slot, node)
			       : rf__threads_read(wk->lane ? &wk->lane->flight : run->io, run, fs, n, dst);
	src = src != NULL ? src : run->srcs[b];
	if (n != 0) {
		rf__threads *t = wk->t;
		/* At depth 1 nothing overlaps: pieces and demotes would only lengthen the critical path. */
		if (run->prog->nslots >= 2)
			rf__piece_copy(&t->q[queue].job, dst, src, n, b, wk->ps->handoff);
		else
			memcpy(dst, src, n);
	}
	return 0;
}

/* Copies the caller takes over: in a ring, a caller waiting for a copy its lane has not started claims
 * it and makes it (it would only have waited; the block lands where it is computed); the lane skips a
 * claimed copy once the caller's has ended, so its signal still means "copied". Whoever raises the
 * lane's `claimed` to b owns copy b: 1 for this thread, 0 when the other side had it. */
static int rf__threads_claim(rf__tq *tq, size_t b)
{
	int64_t x = atomic_load_explicit(&tq->claimed, memory_order_relaxed);
	while (x < (int64_t)b)
		if (atomic_compare_exchange_weak_explicit(&tq->claimed, &x, (int64_t)b, memory_order_relaxed,
							  memory_order_relaxed))
			return 1;
	return 0;
}

/* The caller's side: copy block b for lane queue tq (traced on queue 0's track, which has room). */
static void rf__threads_steal(rf__walker *wk, rf__tq *tq, size_t b)
{
	rf__run *run = &wk->run;
	unsigned slot = (unsigned)(b % run->prog->nslots);
	if (RF__TEST_HOOK(before_copy) != NULL)
		RF__TEST_HOOK(before_copy)(b);
	int64_t t0 = run->trace ? rf__now_ns() : 0;
	uint64_t s0 = run->trace ? rf__trace_seq(run->trace) : 0;
	if (run->sizes[b] != 0)
		rf__piece_copy(&tq->sjob, rf__slot_ptr(run, slot), run->srcs[b], run->sizes[b], b, 0);
	if (run->trace)
		rf__trace_add(run->trace, 0, RF_OP_COPY, (int64_t)b, slot, 0, t0, rf__now_ns(), s0);
	if (run->stats) /* counted, but not as the caller's busy time: it computed nothing meanwhile */
		run->stats[0].copies++;
	atomic_store_explicit(&tq->stolen, (int64_t)b, memory_order_release);
	rf__ec_notify(&wk->t->ec);
}

typedef struct rf__threads_steal_wait {
	rf__tq *tq;
	int64_t b;
} rf__threads_steal_wait;

static int rf__threads_stolen_done(void *arg)
{
	const rf__threads_steal_wait *w = arg;
	return atomic_load_explicit(&w->tq->stolen, memory_order_acquire) >= w->b;
}

/* The lane's side: copy b was the caller's. Help with its pieces, then wait for its end (the caller
 * claims in order, so `stolen` reaching b means copy b has ended). */
static int rf__threads_skip(rf__walker *wk, size_t b)
{
	rf__threads *t = wk->t;
	rf__tq *tq = &t->q[wk->lane->q];
	rf__piece_help(&tq->sjob, b, &tq->stolen, (int64_t)b);
	rf__threads_steal_wait w = {tq, (int64_t)b};
	rf__ec_wait(&t->ec, rf__threads_stolen_done, &w, wk->ps->spin_ns);
	return RF__WALK_ELSEWHERE;
}

/* A keyed copy starts: a hint claims its item (1), or finds it withdrawn (0: no copy; the owner let go
 * of its file then); a copy counts its bytes only once it starts. */
static int rf__threads_kstart(rf__walker *wk, const rf__kcopy *k)
{
	if (wk->item != NULL) {
		if (RF__TEST_HOOK(keyed_before_copy) != NULL)
			RF__TEST_HOOK(keyed_before_copy)(0);
		if (!rf__work_claim(wk->item))
			return 0;
		if (RF__TEST_HOOK(keyed_before_copy) != NULL)
			RF__TEST_HOOK(keyed_before_copy)(1);
	}
	atomic_fetch_add_explicit(k->counter, k->bytes, memory_order_relaxed);
	return 1;
}

/* Inlined with rf__threads_move into each walk: a keyed miss is this path and a memcpy, nothing more. */
static inline __attribute__((always_inline)) int rf__threads_copy(void *c, rf__run *run, unsigned queue, size_t b,
		unsigned slot, unsigned stage, uint32_t node)
{
	rf__walker *wk = c;
	/* Claimed first: a copy the caller made is done whatever happens next (a late cancel must not fail
	 * the run on a lagging lane). */
	if (wk->lane != NULL && wk->ps->steal && !rf__threads_claim(&wk->t->q[queue], b))
		return rf__threads_skip(wk, b);
	if (run->keyed != NULL && !rf__threads_kstart(wk, run->keyed))
		return RF__WALK_ELSEWHERE; /* withdrawn: no copy, no slice; its signal still goes out */
	const unsigned char *src = stage == RF__NO_STAGE ? NULL : rf__stage_ptr(run, stage);
	return rf__threads_move(c, run, queue, b, rf__slot_ptr(run, slot), src, slot, node);
}

static int rf__threads_stage(void *c, rf__run *run, unsigned queue, size_t b, unsigned stage, uint32_t node)
{
	(void)node; /* read at once: the walk traces it */
	return rf__threads_move(c, run, queue, b, rf__stage_ptr(run, stage), NULL, RF__NO_STAGE, 0);
}

static int rf__threads_compute(void *c, rf__run *run, unsigned queue, size_t b, unsigned slot)
{
	(void)queue;
	rf__walker *wk = c;
	if (atomic_load_explicit(&wk->ps->stop, memory_order_relaxed))
		return RF_ECANCELED;
	return rf__call_compute(run, b, slot, NULL);
}

static int rf__threads_signal(void *c, unsigned q, int64_t v, size_t block)
{
	(void)block;
	rf__walker *wk = c;
	rf__threads *t = wk->t;
	v += wk->ps->tickets ? 0 : t->q[q].base;
	if (wk->lane != NULL) { /* after the lane's copies in flight, in order */
		rf__flight_signal(&wk->lane->flight, NULL, v);
		return 0;
	}
	atomic_store_explicit(&t->q[q].value, v, memory_order_release);
	rf__ec_notify(&t->ec);
	return 0;
}

typedef struct rf__threads_until {
	rf__walker *wk;
	unsigned q;
	int64_t v;
} rf__threads_until;

static int rf__threads_reached(void *arg)
{
	const rf__threads_until *u = arg;
	rf__threads *t = u->wk->t;
	rf__threads_progress(u->wk); /* a waiting lane keeps its reads landing and its signals going out */
	return atomic_load_explicit(&t->q[u->q].value, memory_order_acquire) >= u->v ||
	       atomic_load_explicit(&u->wk->ps->stop, memory_order_relaxed);
}

static int rf__threads_wait(void *c, unsigned q, unsigned wq, int64_t v, size_t block)
{
	(void)q;
	rf__walker *wk = c;
	rf__threads *t = wk->t;
	rf__threads_prog *ps = wk->ps;
	rf__tq *e = &t->q[wq];
	rf__threads_until u = {wk, wq, (ps->tickets ? 0 : e->base) + v};
	/* Rather than wait idle, take pieces of the copy of `block`; a ring's RAW wait whose lane has not
	 * claimed the copy by then makes it instead. */
	rf__piece_help(&e->job, block, &e->value, u.v);
	if (ps->steal && wk->lane == NULL && wq > 0 && atomic_load_explicit(&e->value, memory_order_acquire) < u.v &&
	    !atomic_load_explicit(&ps->stop, memory_order_relaxed) && rf__threads_claim(e, block)) {
		rf__threads_steal(wk, e, block);
		return 0;
	}
	/* A wait involving reads in flight is the device's latency: no long spin. A lane with reads sleeps
	 * in its reader, woken by a read landing or by its bell. */
	rf__threads_lane *l = wk->lane;
	while (l != NULL && rf__flight_busy(&l->flight) && !rf__threads_reached(&u))
		rf__ec_wait_bell(&t->ec, rf__threads_reached, &u, 0, l->flight.bell_slot, rf__flight_sleep, &l->flight);
	int io = wq > 0 && atomic_load_explicit(&t->lane[wq - 1].flight.inflight, memory_order_relaxed) != 0;
	rf__ec_wait(&t->ec, rf__threads_reached, &u, io ? 0 : ps->spin_ns);
	return atomic_load_explicit(&e->value, memory_order_acquire) >= u.v ? 0 : RF_ECANCELED;
}

static const rf__walk_ops rf__threads_ops = {rf__threads_copy, rf__threads_compute, rf__threads_signal,
		rf__threads_wait, rf__threads_stage};

void rf__threads_walk(rf__threads *t, rf__run *run, unsigned q, rf__threads_lane *lane)
{
	rf__walker wk = {t, *run, lane, &t->rs, NULL, 0};
	int rc = rf__walk(&wk.run, (int)q, 0, &rf__threads_ops, &wk);
	if (rc != 0)
		rf__threads_fail(&wk, rc);
	/* The walk is over, its reads may not be (they write the ring and read the caller's files). */
	for (rf__threads_progress(&wk); lane != NULL && rf__flight_busy(&lane->flight); rf__threads_progress(&wk))
		rf__flight_sleep(&lane->flight);
}

/* A keyed copy's program, walked with a run's handlers over its one block, from a clean program state. */
int rf__threads_walk_keyed(rf__walker *wk)
{
	atomic_store_explicit(&wk->ps->stop, 0, memory_order_relaxed);
	atomic_store_explicit(&wk->ps->first_rc, 0, memory_order_relaxed);
	return rf__walk_block(&wk->run, &rf__threads_ops, wk);
}
