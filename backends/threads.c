/* backends/threads.c — queues with CUDA-stream semantics on a pool of lanes: each queue runs its own ops
 * in order; a signal publishes "this queue has done everything up to value v"; a wait holds its queue
 * until the other queue has published at least v.
 *
 * Queue 0 runs on the calling thread (in a ring it holds the computes): one thread hop less than a
 * dedicated compute lane, and an embedder keeps its thread-local state in the callback. Queues
 * 1 .. n-1 are lanes of one pool (base/pool.h), started once per pipeline; a run posts each lane the
 * walk of its queue, and keyed copies are items on the same lanes (threads_keyed.c). Every wait — a
 * queue for another, the caller for the lanes, a lane for work — is the backend's one eventcount.
 *
 * Failure: the first failing op (a compute returning non-zero, a cancel) wins a CAS on `first_rc`, then
 * sets `stop` and wakes everyone; every walker stops at its next op or wait, copies in progress finish,
 * and the run returns once every lane has left its walk. */
#include "backends/threads_int.h"
#include "base/alloc.h"
#include "base/error.h"
#include "io/file.h"
#include "runtime/config.h"
#include "runtime/trace.h"
#include "runtime/walk.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Within a run a waiter spins at least this long whatever the policy: waking a sleeper takes a futex
 * call on the signalling side and several microseconds of scheduling on the sleeper's, during which the
 * signaller itself waits for the sleeper's next value; a shorter spin turns that into a chain of sleeps
 * (measured: 10-30 us per 1 KiB block instead of well under 1 us). */
#define RF__RUN_SPIN_NS 50000

/* Per-walker state: a private copy of the run (its failure fields are written by this walker only), and
 * the lane it walks on (NULL: the caller, queue 0), whose file copies may be in flight. */
typedef struct rf__walker {
	rf__threads *t;
	rf__run run;
	rf__tlane *lane;
} rf__walker;

/* Record the first failure of the run and stop every queue. A compute's failure outranks a cancel seen
 * first by another queue (a callback that destroys its pipeline and then fails): the caller must hear
 * about the block that failed, as on the cpu backend. */
static void rf__thr_fail(rf__walker *wk, int rc)
{
	rf__threads *t = wk->t;
	int prev = 0;
	if (atomic_compare_exchange_strong(&t->first_rc, &prev, rc) ||
	    (rc == RF_ECALLBACK && prev == RF_ECANCELED && atomic_compare_exchange_strong(&t->first_rc, &prev, rc))) {
		t->fail_block = wk->run.failed_block;
		t->fail_value = wk->run.failed_value;
		if (rc == RF_EIO)
			snprintf(t->fail_msg, sizeof t->fail_msg, "%s", wk->lane ? wk->lane->flight.msg : rf__errmsg_peek());
	}
	atomic_store(&t->stop, 1);
	rf__ec_notify(&t->ec);
}

static int rf__thr_stopped(const rf__walker *wk)
{
	return atomic_load_explicit(&wk->t->stop, memory_order_relaxed) ||
	       atomic_load_explicit(wk->run.cancel, memory_order_relaxed);
}

/* ---- the walk's ops ------------------------------------------------------------------------------- */

/* Reap the lane's landed file copies (their signals go out in order); a failed one fails the run. */
static void rf__thr_progress(rf__walker *wk)
{
	rf__tlane *l = wk->lane;
	if (l == NULL)
		return;
	rf__flight_progress(&l->flight);
	if (l->flight.failed && !l->reported) {
		l->reported = 1;
		rf__thr_fail(wk, RF_EIO);
	}
}

/* A file copy: a lane starts its reads and walks on (the slice is recorded when it lands); the caller
 * reads it through before it goes on. */
static int rf__thr_file_copy(rf__walker *wk, rf__run *run, const rf__fsrc *fs, size_t b, unsigned slot, uint32_t node)
{
	size_t n = run->sizes[b];
	unsigned char *dst = rf__slot_ptr(run, slot);
	if (wk->lane == NULL)
		return rf__flight_read(run->io, fs, n, dst, run->slot_stride);
	rf__flight_rec rec = {0};
	rec.block = (int64_t)b;
	rec.slot = slot;
	rec.node = node;
	rec.queue = (uint8_t)wk->lane->q;
	rec.traced = run->trace != NULL;
	if (rec.traced) {
		rec.t0 = rf__trace_now();
		rec.s0 = rf__trace_seq(run->trace);
	}
	int rc = rf__flight_start(&wk->lane->flight, fs, n, dst, run->slot_stride, &rec);
	rf__thr_progress(wk);
	return rc == RF_OK ? RF__WALK_ASYNC : rc;
}

/* Block b's bytes into dst: from src (its staging slot), else from its source, a file's being read —
 * by a lane asynchronously into ring slot `slot`; at once into a staging slot (slot RF__NO_STAGE), by
 * the caller, or on a queue that also computes (the locality ring's, a graph's): on one queue a compute
 * may follow its copy with no wait between them. */
static int rf__thr_move(void *c, rf__run *run, unsigned queue, size_t b, unsigned char *dst, const unsigned char *src,
			unsigned slot, uint32_t node)
{
	rf__walker *wk = c;
	if (rf__thr_stopped(c))
		return RF_ECANCELED;
	size_t n = run->sizes[b];
	rf__fsrc fs;
	if (n != 0 && wk->lane != NULL && rf__flight_busy(&wk->lane->flight)) /* write after write */
		rf__flight_wait_dst(&wk->lane->flight, dst, run->slot_stride);
	if (n != 0 && src == NULL && run->nfile > 0 && rf__file_classify("", "", run->srcs[b], n, 0, &fs) == 1)
		return slot != RF__NO_STAGE && !((run->prog->compute_queues >> queue) & 1)
			       ? rf__thr_file_copy(c, run, &fs, b, slot, node)
			       : rf__flight_read(wk->lane ? &wk->lane->flight : run->io, &fs, n, dst, run->slot_stride);
	src = src != NULL ? src : run->srcs[b];
	if (n != 0) {
		rf__threads *t = wk->t;
		/* The piece copier and the handoff only at depth >= 2: at depth 1 nothing overlaps and the
		 * whole copy runs on one thread (the demotes would only lengthen the critical path). */
		if (run->prog->nslots >= 2)
			rf__piece_copy(&t->q[queue].job, dst, src, n, b, t->handoff);
		else
			memcpy(dst, src, n);
	}
	return 0;
}

/* ---- copies the caller takes over --------------------------------------------------------------------
 *
 * In a ring (rf_program.ring) the caller, about to compute block b, waits for the lane that copies it. If
 * that lane has not started the copy yet — it is busy with an earlier one, or not running at all (its
 * core is shared with other work, it was preempted) — the caller claims the copy and makes it itself:
 * it would only have waited, and the block then lies in the cache of the core that computes it. The
 * lane, reaching that copy later, finds it claimed and skips it (after the caller's copy has ended, so
 * that its signal still means "copied"). Both claim through one monotone word per lane: whoever raises
 * it to b owns copy b. Either side helps with the other's copy in pieces (base/piece.h): the caller with
 * one the lane has started, the lane — arriving late — with the caller's; and the caller first gives
 * the lane the few microseconds its help waits for a copy to appear, so a lane that was just about to
 * start (woken for the run) shares the copy rather than leaving all of it to the caller. */

/* Raise tq->claimed to b: 1 when this thread now owns copy b, 0 when the other side had it. */
static int rf__thr_claim(rf__tq *tq, size_t b)
{
	int64_t x = atomic_load_explicit(&tq->claimed, memory_order_relaxed);
	while (x < (int64_t)b)
		if (atomic_compare_exchange_weak_explicit(&tq->claimed, &x, (int64_t)b, memory_order_relaxed,
							  memory_order_relaxed))
			return 1;
	return 0;
}

/* The caller's side: copy block b for lane queue tq (its slice goes on the caller's own track: queue 0's
 * trace has room for a ring's copies, runtime/trace.c). */
static void rf__thr_steal(rf__walker *wk, rf__tq *tq, size_t b)
{
	rf__run *run = &wk->run;
	unsigned slot = (unsigned)(b % run->prog->nslots);
	if (RF__TEST_HOOK(before_copy) != NULL)
		RF__TEST_HOOK(before_copy)(b);
	int64_t t0 = run->trace ? rf__trace_now() : 0;
	uint64_t s0 = run->trace ? rf__trace_seq(run->trace) : 0;
	if (run->sizes[b] != 0)
		rf__piece_copy(&tq->sjob, rf__slot_ptr(run, slot), run->srcs[b], run->sizes[b], b, 0);
	if (run->trace)
		rf__trace_add(run->trace, 0, RF_OP_COPY, (int64_t)b, slot, 0, t0, rf__trace_now(), s0);
	if (run->stats) /* counted, but not as the caller's busy time: it computed nothing meanwhile */
		run->stats[0].copies++;
	atomic_store_explicit(&tq->stolen, (int64_t)b, memory_order_release);
	rf__ec_notify(&wk->t->ec);
}

typedef struct rf__thr_steal_wait {
	rf__tq *tq;
	int64_t b;
} rf__thr_steal_wait;

static int rf__thr_stolen_done(void *arg)
{
	const rf__thr_steal_wait *w = arg;
	return atomic_load_explicit(&w->tq->stolen, memory_order_acquire) >= w->b;
}

/* The lane's side: copy b was the caller's. Help with its pieces (a lane that arrives while the caller
 * copies halves that copy), then wait for its end (the caller claims the blocks it waits for in order,
 * so `stolen` reaching b means copy b has ended). */
static int rf__thr_skip(rf__walker *wk, size_t b)
{
	rf__threads *t = wk->t;
	rf__tq *tq = &t->q[wk->lane->q];
	rf__piece_help(&tq->sjob, b, &tq->stolen, (int64_t)b);
	rf__thr_steal_wait w = {tq, (int64_t)b};
	rf__ec_wait(&t->ec, rf__thr_stolen_done, &w, t->run_spin_ns);
	return RF__WALK_ELSEWHERE;
}


static int rf__thr_copy(void *c, rf__run *run, unsigned queue, size_t b, unsigned slot, unsigned stage, uint32_t node)
{
	rf__walker *wk = c;
	/* Claimed first: a copy the caller made is done whatever happens next (a cancel after the last
	 * compute started must not fail the run on a lane that lags behind). */
	if (wk->lane != NULL && wk->t->steal && !rf__thr_claim(&wk->t->q[queue], b))
		return rf__thr_skip(wk, b);
	const unsigned char *src = stage == RF__NO_STAGE ? NULL : rf__stage_ptr(run, stage);
	return rf__thr_move(c, run, queue, b, rf__slot_ptr(run, slot), src, slot, node);
}

static int rf__thr_stage(void *c, rf__run *run, unsigned queue, size_t b, unsigned stage)
{
	return rf__thr_move(c, run, queue, b, rf__stage_ptr(run, stage), NULL, RF__NO_STAGE, 0);
}

static int rf__thr_compute(void *c, rf__run *run, unsigned queue, size_t b, unsigned slot)
{
	(void)queue;
	rf__walker *wk = c;
	if (atomic_load_explicit(&wk->t->stop, memory_order_relaxed))
		return RF_ECANCELED;
	return rf__call_compute(run, b, slot, NULL);
}

static int rf__thr_signal(void *c, unsigned q, int64_t v, size_t block)
{
	(void)block;
	rf__walker *wk = c;
	rf__threads *t = wk->t;
	if (wk->lane != NULL) { /* after the lane's copies in flight, in order */
		rf__flight_signal(&wk->lane->flight, NULL, t->q[q].base + v);
		return 0;
	}
	atomic_store_explicit(&t->q[q].value, t->q[q].base + v, memory_order_release);
	rf__ec_notify(&t->ec);
	return 0;
}

typedef struct rf__thr_until {
	rf__walker *wk;
	unsigned q;
	int64_t v;
} rf__thr_until;

static int rf__thr_reached(void *arg)
{
	const rf__thr_until *u = arg;
	rf__threads *t = u->wk->t;
	rf__thr_progress(u->wk); /* a waiting lane keeps its reads landing and its signals going out */
	return atomic_load_explicit(&t->q[u->q].value, memory_order_acquire) >= u->v ||
	       atomic_load_explicit(&t->stop, memory_order_relaxed);
}

static int rf__thr_wait(void *c, unsigned q, unsigned wq, int64_t v, size_t block)
{
	(void)q;
	rf__walker *wk = c;
	rf__threads *t = wk->t;
	rf__tq *e = &t->q[wq];
	rf__thr_until u = {wk, wq, e->base + v};
	/* Rather than wait idle for the copy of `block`, take pieces of it (base/piece.h): the help waits a
	 * few microseconds for the lane to publish it. A ring's RAW wait whose lane has not even claimed the
	 * copy by then makes it instead (above): a lane that was about to start gets the copy shared, and
	 * one that is busy with an earlier copy or not running costs only that short look. */
	rf__piece_help(&e->job, block, &e->value, u.v);
	if (t->steal && wk->lane == NULL && wq > 0 && atomic_load_explicit(&e->value, memory_order_acquire) < u.v &&
	    !atomic_load_explicit(&t->stop, memory_order_relaxed) && rf__thr_claim(e, block)) {
		rf__thr_steal(wk, e, block);
		return 0;
	}
	/* A lane with reads in flight sleeps in its reader at once, woken by a read landing or by its bell;
	 * a thread waiting for a lane whose reads are in flight spins only briefly: either wait is the
	 * device's latency, which a spin would spend burning a core. */
	rf__tlane *l = wk->lane;
	while (l != NULL && rf__flight_busy(&l->flight) && !rf__thr_reached(&u))
		rf__ec_wait_bell(&t->ec, rf__thr_reached, &u, 0, l->flight.bell_slot, rf__flight_sleep, &l->flight);
	int io = wq > 0 && atomic_load_explicit(&t->lane[wq - 1].flight.inflight, memory_order_relaxed) != 0;
	rf__ec_wait(&t->ec, rf__thr_reached, &u, io ? 0 : t->run_spin_ns);
	return atomic_load_explicit(&e->value, memory_order_acquire) >= u.v ? 0 : RF_ECANCELED;
}

static const rf__walk_ops rf__thr_ops = {rf__thr_copy, rf__thr_compute, rf__thr_signal, rf__thr_wait, rf__thr_stage};

static int rf__thr_drained(void *arg)
{
	rf__walker *wk = arg;
	rf__thr_progress(wk);
	return !rf__flight_busy(&wk->lane->flight);
}

static void rf__thr_walk(rf__threads *t, rf__run *run, unsigned q, rf__tlane *lane)
{
	rf__walker wk = {t, *run, lane};
	int rc = rf__walk(&wk.run, (int)q, 0, &rf__thr_ops, &wk);
	if (rc != 0)
		rf__thr_fail(&wk, rc);
	/* The walk is over, its reads may not be: they write the ring and read the caller's files. */
	while (lane != NULL && !rf__thr_drained(&wk))
		rf__ec_wait_bell(&t->ec, rf__thr_drained, &wk, 0, lane->flight.bell_slot, rf__flight_sleep, &lane->flight);
}

/* A lane's item: the walk of its queue in the run in progress. */
static void rf__thr_walk_item(rf__work *w, void *ctx)
{
	(void)w;
	rf__tlane *l = ctx;
	rf__threads *t = l->t;
	/* The lane's own flight state, set on the lane's thread (it reaps between items too). */
	l->flight.failed = 0;
	l->reported = 0;
	l->flight.trace = t->run->trace;
	rf__thr_walk(t, t->run, l->q, l);
	l->flight.trace = NULL;
	atomic_fetch_sub_explicit(&t->active, 1, memory_order_release);
	rf__ec_notify(&t->ec);
}

static int rf__thr_all_done(void *arg)
{
	return atomic_load_explicit(&((rf__threads *)arg)->active, memory_order_acquire) == 0;
}

/* The run on the lanes: each lane walks its queue, the caller walks queue 0. */
static int rf__thr_lanes(rf__threads *t, rf__run *run)
{
	rf__thr_follow(t); /* placement: lanes off the caller's core (threads_place.c) */
	for (unsigned i = 0; i < t->pool.n; i++) {
		rf__tlane *l = &t->lane[i];
		if (run->nfile > 0 && rf__flight_open(&l->flight, t->ring, t->ring_len) != RF_OK)
			return rf__err(RF_ENOMEM, "threads: file reads of lane %u: %s", i, rf__errmsg_peek());
	}
	t->run = run;
	t->steal = run->prog->ring && run->prog->nstage == 0 && run->nfile == 0;
	for (unsigned i = 0; i < t->nq; i++) {
		atomic_store_explicit(&t->q[i].claimed, -1, memory_order_relaxed);
		atomic_store_explicit(&t->q[i].stolen, -1, memory_order_relaxed);
	}
	atomic_store(&t->active, t->pool.n);
	for (unsigned i = 0; i < t->pool.n; i++)
		if (rf__pool_post(&t->pool, i, &t->lane[i].walk) != RF_OK) /* keyed copies were quiesced */
			return rf__err(RF_EBACKEND, "threads: lane %u has no room for the run", i);
	rf__thr_walk(t, run, 0, NULL);
	rf__ec_wait(&t->ec, rf__thr_all_done, t, t->run_spin_ns);
	rf__tk_after_run(t);
	int rc = atomic_load(&t->first_rc);
	if (rc == RF_ECALLBACK) {
		run->failed_block = t->fail_block;
		run->failed_value = t->fail_value;
	}
	if (rc == RF_EIO)
		return rf__err(RF_EIO, "%s", t->fail_msg);
	return rc;
}

/* After a comparison of the arms (threads_sched.h): what rf_pipeline_describe says about this shape. */
static void rf__thr_note(rf__threads *t, const rf__sch_class *c, rf__run *run)
{
	uint64_t n = run->nblocks ? run->nblocks : 1, mean = run->bytes / n;
	int len = snprintf(t->note, sizeof t->note, "; schedule for %llu %s blocks x %zu: %s (", (unsigned long long)
			   (mean >= 1024 ? mean >> 10 : mean), mean >= 1024 ? "KiB" : "B", run->nblocks,
			   rf__sch_name(c->choice));
	for (unsigned i = 0; i < t->sch.narms && len > 0 && (size_t)len < sizeof t->note; i++)
		len += snprintf(t->note + len, sizeof t->note - (size_t)len, "%s%s %.1f us", i ? ", " : "",
				rf__sch_name(t->sch.arms[i]), c->fig[i] * (double)run->bytes / 1e3);
	if (len > 0 && (size_t)len < sizeof t->note)
		snprintf(t->note + len, sizeof t->note - (size_t)len, " per run, means of %u; again in %u runs)",
			 RF__SCH_ROUNDS, c->interval);
	run->note = t->note;
}

static int rf__thr_run(void *ctx, rf__run *run)
{
	rf__threads *t = ctx;
	if (!rf__pool_owned(&t->pool))
		return rf__err(RF_EBACKEND, "threads: the pipeline's worker threads do not survive fork(): run it in "
					    "the process that created it");
	for (unsigned i = 0; i < t->nq; i++)
		t->q[i].base = atomic_load_explicit(&t->q[i].value, memory_order_relaxed);
	atomic_store(&t->stop, 0);
	atomic_store(&t->first_rc, 0);
	if (run->prog->nslots <= 1) {
		/* Depth 1: the copy and the compute wait for each other, nothing overlaps; the cpu backend's
		 * walk of every queue in issue order on the caller saves two thread hops per block and the
		 * cross-thread signalling (measured: 0.91x of cpu's speed at 1 KiB blocks with it). */
		run->sched = RF_SCHEDULE_INLINE;
		return rf__cpu_walk_inline(run);
	}
	if (run->files_only && run->prog->compute_queues <= 1) { /* computes on queue 0 only (or none) */
		/* Every copy is a file read: nothing for a copy lane's CPU to do. The caller keeps the reads in
		 * flight itself while it computes, with no hand-off between threads on the critical path
		 * (measured: more than twice the throughput of lanes at depth 2, 1 MiB blocks, same run).
		 * Only where every compute is the caller's anyway (a graph's computes on other queues run on
		 * those queues' lanes, as rf_exec_run promises). The copies still overlap the computes:
		 * RF_SCHEDULE_RING. */
		return rf__cpu_walk_overlapped(run);
	}
	/* Which arm (threads_sched.h): chosen from this pipeline's own runs of the same shape, unless the
	 * owner compares runs itself (depth = auto settling) or the run reads files (the lanes keep several
	 * reads in flight: waiting on the device is what overlap always hides). */
	rf__sch_class *c = NULL;
	unsigned arm = t->overlap_mode == RF__OV_OFF ? RF__SCH_INLINE : RF__SCH_LANES;
	if (run->vary && run->nfile == 0)
		arm = rf__sch_pick(&t->sch, rf__sch_shape(run->bytes, run->nblocks), &c);
	t->handoff = arm == RF__SCH_HANDOFF || (arm == RF__SCH_LANES && t->handoff_fixed);
	int64_t t0 = c != NULL ? rf__now_ns() : 0;
	int rc;
	if (arm == RF__SCH_INLINE) {
		run->sched = RF_SCHEDULE_INLINE;
		rc = rf__cpu_walk_inline(run);
	} else {
		run->sched = RF_SCHEDULE_RING;
		run->handoff = t->handoff;
		rc = rf__thr_lanes(t, run);
	}
	if (c != NULL && rc == RF_OK) {
		double x = (double)(rf__now_ns() - t0) / (double)(run->bytes ? run->bytes : run->nblocks);
		if (rf__sch_note(&t->sch, c, arm, x))
			rf__thr_note(t, c, run);
	}
	return rc;
}

/* ---- open / close ----------------------------------------------------------------------------------- */

static void rf__thr_free(rf__threads *t)
{
	int owned = rf__pool_owned(&t->pool);
	rf__pool_stop(&t->pool);
	rf__thr_unpin(t, owned);
	for (unsigned i = 0; owned && i + 1 < t->nq; i++)
		rf__flight_fini(&t->lane[i].flight);
	free(t->q);
	free(t->lane);
	free(t->kfail);
	free(t);
}

/* A lane between items: its file copies land and their signals go out; it sleeps in its reader. */
static int rf__thr_lane_idle(void *ctx)
{
	return rf__flight_progress(&((rf__tlane *)ctx)->flight);
}

static void rf__thr_lane_sleep(void *ctx)
{
	rf__flight_sleep(&((rf__tlane *)ctx)->flight);
}

static const rf__lane_ops rf__thr_lane_ops = {rf__thr_lane_idle, rf__thr_lane_sleep};

/* The arms a pipeline's runs compare (threads_sched.h), and the policy for describe. */
static void rf__thr_arms(rf__threads *t)
{
	unsigned arms[RF__SCH_NARMS], n = 0;
	int ho = rf__ho_pipeline(t->handoff_mode, t->nq, t->nslots, &t->handoff_fixed, t->handoff_why,
				 sizeof t->handoff_why);
	if (t->overlap_mode != RF__OV_ON)
		arms[n++] = RF__SCH_INLINE;
	if (t->overlap_mode != RF__OV_OFF) {
		arms[n++] = RF__SCH_LANES;
		if (ho)
			arms[n++] = RF__SCH_HANDOFF;
	}
	rf__sch_init(&t->sch, arms, n);
	size_t len = strlen(t->handoff_why);
	if (t->nq < 2 || t->nslots < 2)
		return;
	snprintf(t->handoff_why + len, sizeof t->handoff_why - len, "; overlap %s",
		 t->overlap_mode == RF__OV_OFF  ? "off (forced by configuration: every run inline on the caller)"
		 : t->overlap_mode == RF__OV_ON ? "on (forced by configuration)"
						: "auto (each run shape's first runs compare the lanes with running inline "
						  "on the caller; the faster is kept and checked again now and then)");
}

static int rf__thr_describe(void *ctx, char *buf, size_t cap)
{
	rf__threads *t = ctx;
	snprintf(buf, cap, "threads: %u queue(s), %u worker thread(s) (rf-copy-N, keyed copies on the same); "
			   "wait: %s %lld us; %s",
		 t->nq, t->pool.n, t->spin_ns ? "spin" : "sleep", (long long)(t->spin_ns / 1000), t->placement);
	return RF_OK;
}

static int rf__thr_open(const rf__open_args *args, void **ctx)
{
	rf__threads *t = rf__calloc(1, sizeof *t);
	if (t == NULL)
		return rf__err(RF_ENOMEM, "threads: out of memory");
	t->nq = args->nqueues;
	t->staging = args->staging;
	t->slot_bytes = args->slot_bytes;
	t->nslots = args->nslots;
	int rc = rf__config_handoff(&t->handoff_mode);
	if (rc == RF_OK)
		rc = rf__config_overlap(&t->overlap_mode);
	if (rc == RF_OK)
		rc = rf__config_worker_cpus(t->worker_cpus, sizeof t->worker_cpus);
	if (rc != RF_OK) {
		free(t);
		return rc;
	}
	unsigned nl = t->nq > 1 ? t->nq - 1 : 0;
	t->q = rf__aligned_alloc(64, t->nq * sizeof *t->q);
	t->lane = rf__calloc(nl ? nl : 1, sizeof *t->lane);
	t->kfail = rf__calloc(t->nslots ? t->nslots : 1, sizeof *t->kfail);
	void **lctx = rf__calloc(nl ? nl : 1, sizeof *lctx);
	if (t->q == NULL || t->lane == NULL || t->kfail == NULL || lctx == NULL) {
		free(t->q);
		free(t->lane);
		free(t->kfail);
		free(lctx);
		free(t);
		return rf__err(RF_ENOMEM, "threads: out of memory");
	}
	for (unsigned i = 0; i < t->nq; i++) {
		atomic_init(&t->q[i].value, 0);
		atomic_init(&t->q[i].claimed, -1);
		atomic_init(&t->q[i].stolen, -1);
		t->q[i].base = 0;
		rf__piece_init(&t->q[i].job);
		rf__piece_init(&t->q[i].sjob);
	}
	for (unsigned i = 0; i < nl; i++) {
		t->lane[i].t = t;
		t->lane[i].q = i + 1;
		t->lane[i].walk.fn = rf__thr_walk_item;
		t->lane[i].core = -1;
		rf__flight_init(&t->lane[i].flight, &t->ec, i, &t->q[i + 1].value);
		lctx[i] = &t->lane[i];
	}
	rf__ec_init(&t->ec);
	atomic_init(&t->active, 0);
	atomic_init(&t->stop, 0);
	atomic_init(&t->first_rc, 0);
	t->spin_ns = args->wait_spin_ns == RF__WAIT_SLEEP ? 0 : args->wait_spin_ns ? args->wait_spin_ns : RF__WAIT_AUTO_NS;
	t->run_spin_ns = t->spin_ns > RF__RUN_SPIN_NS ? t->spin_ns : RF__RUN_SPIN_NS;
	rf__thr_arms(t);
	rc = rf__pool_start(&t->pool, nl, "copy", &t->ec, t->spin_ns, &rf__thr_lane_ops, lctx, 0);
	free(lctx);
	if (rc != RF_OK) {
		rf__thr_free(t);
		return rf__err(rc, "threads: %s", rf__errmsg_peek());
	}
	rf__thr_pin(t);
	*ctx = t;
	return RF_OK;
}

static void rf__thr_close(void *ctx)
{
	rf__thr_free(ctx);
}

/* The ring comes from the staging layer under the pipeline's policy. "auto" resolves on the calling
 * thread, which is the compute thread (queue 0): the ring is placed next to its reader. */
static int rf__thr_slots_alloc(void *ctx, size_t bytes, void **mem)
{
	rf__threads *t = ctx;
	int rc = rf__staging_alloc(t->staging, bytes, RF__STAGING_SLOT_ALIGN, mem);
	if (rc == RF_OK) {
		t->ring = *mem;
		t->ring_len = bytes;
	}
	return rc;
}

static int rf__thr_probe(int device)
{
	(void)device;
	return RF_OK;
}

const rf__backend_ops rf__backend_threads = {
	.abi = RF__BACKEND_ABI,
	.name = "threads",
	.caps = RF__CAP_OVERLAP,
	.probe = rf__thr_probe,
	.open = rf__thr_open,
	.close = rf__thr_close,
	.slots_alloc = rf__thr_slots_alloc,
	.slots_free = rf__host_slots_free,
	.run = rf__thr_run,
	.describe = rf__thr_describe,
	.kissue = rf__tk_issue,
	.ktest = rf__tk_test,
	.kcancel = rf__tk_cancel,
	.kwait = rf__tk_wait,
	.ksync = rf__tk_sync,
	.kquiesce = rf__tk_quiesce,
	.klanes = rf__tk_lanes,
	.kresult = rf__tk_result,
};
