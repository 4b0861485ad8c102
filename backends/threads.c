/* backends/threads.c — queues with CUDA-stream semantics: a signal publishes "this queue has done
 * everything up to v", a wait holds its queue until another has published v. Queue 0 runs on the caller
 * (one hop less; an embedder keeps its thread-locals), queues 1 .. n-1 on the lanes of one pool. The
 * first failing op wins a CAS on its program's `first_rc`, then sets its `stop`: every walker of that
 * program stops at its next op or wait, and a run returns once every lane has left its walk. Keyed
 * copies (threads_keyed.c) are one-block programs walked with the same handlers, each with its own
 * program state: they never see a run's stop or failure, nor a run theirs. */
#include "backends/threads_int.h"
#include "base/alloc.h"
#include "base/error.h"
#include "io/file.h"
#include "runtime/trace.h"
#include "runtime/walk.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Within a run a waiter spins at least this long whatever the policy: a wake-up costs microseconds,
 * during which the signaller waits for the sleeper's next value; a shorter spin chains sleeps. */
#define RF__RUN_SPIN_NS 50000

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

static void rf__threads_walk(rf__threads *t, rf__run *run, unsigned q, rf__threads_lane *lane)
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

/* A lane's item: the walk of its queue in the run in progress. Its flight state is set here, on the
 * lane's thread (which reaps between items too). */
static void rf__threads_walk_item(rf__work *w, void *ctx)
{
	(void)w;
	rf__threads_lane *l = ctx;
	rf__threads *t = l->t;
	rf__flight_walk_start(&l->flight);
	rf__trace_flight(&l->flight, t->run->trace);
	rf__threads_walk(t, t->run, l->q, l);
	rf__trace_flight(&l->flight, NULL);
	atomic_fetch_sub_explicit(&t->active, 1, memory_order_release);
	rf__ec_notify(&t->ec);
}

static int rf__threads_all_done(void *arg)
{
	return atomic_load_explicit(&((rf__threads *)arg)->active, memory_order_acquire) == 0;
}

/* The run on the lanes: each lane walks its queue, the caller walks queue 0. */
static int rf__threads_lanes(rf__threads *t, rf__run *run)
{
	rf__threads_follow(t);
	for (unsigned i = 0; i < t->pool.n; i++)
		if (run->nfile > 0 && rf__flight_open(&t->lane[i].flight, t->ring, t->ring_len) != RF_OK)
			return rf__err(RF_ENOMEM, "threads: file reads of lane %u: %s", i, rf__errmsg_peek());
	t->run = run;
	t->rs.steal = run->prog->ring && run->prog->nstage == 0 && run->nfile == 0;
	for (unsigned i = 0; i < t->nq; i++) {
		atomic_store_explicit(&t->q[i].claimed, -1, memory_order_relaxed);
		atomic_store_explicit(&t->q[i].stolen, -1, memory_order_relaxed);
	}
	atomic_store(&t->active, t->pool.n);
	for (unsigned i = 0; i < t->pool.n; i++)
		if (rf__pool_post(&t->pool, i, &t->lane[i].walk) != RF_OK) /* keyed copies were quiesced */
			return rf__err(RF_EBACKEND, "threads: lane %u has no room for the run", i);
	rf__threads_walk(t, run, 0, NULL);
	rf__ec_wait(&t->ec, rf__threads_all_done, t, t->rs.spin_ns);
	rf__threads_kafter_run(t);
	int rc = atomic_load(&t->rs.first_rc);
	if (rc == RF_ECALLBACK) {
		run->failed_block = t->rs.fail_block;
		run->failed_value = t->rs.fail_value;
	}
	if (rc == RF_EIO)
		return rf__err(RF_EIO, "%s", t->rs.fail_msg);
	return rc;
}

/* After a comparison of the arms: what rf_pipeline_describe says about this shape. */
static void rf__threads_note(rf__threads *t, const rf__sch_class *c, rf__run *run)
{
	uint64_t n = run->nblocks ? run->nblocks : 1, mean = run->bytes / n;
	int len = snprintf(t->note, sizeof t->note, "; schedule for %llu %s blocks x %zu: %s (", (unsigned long long)
			   (mean >= 1024 ? mean >> 10 : mean), mean >= 1024 ? "KiB" : "B", run->nblocks,
			   rf__sch_name(c->choice));
	for (unsigned i = 0; i < t->sch.narms && len > 0 && (size_t)len < sizeof t->note; i++)
		len += snprintf(t->note + len, sizeof t->note - (size_t)len, "%s%s %.1f us", i ? ", " : "",
				rf__sch_name(t->sch.arms[i]), c->cmp.fig[i] * (double)run->bytes / 1e3);
	if (len > 0 && (size_t)len < sizeof t->note)
		snprintf(t->note + len, sizeof t->note - (size_t)len, " per run, means of %u; again in %u runs)",
			 RF__SCH_ROUNDS, c->interval);
	run->note = t->note;
}

static int rf__threads_run(void *ctx, rf__run *run)
{
	rf__threads *t = ctx;
	if (!rf__pool_owned(&t->pool))
		return rf__err(RF_EBACKEND, "threads: the pipeline's worker threads do not survive fork(): run it in "
					    "the process that created it");
	for (unsigned i = 0; i < t->nq; i++)
		t->q[i].base = atomic_load_explicit(&t->q[i].value, memory_order_relaxed);
	atomic_store(&t->rs.stop, 0);
	atomic_store(&t->rs.first_rc, 0);
	if (run->prog->nslots <= 1) {
		/* Depth 1: nothing overlaps; the cpu backend's walk saves two thread hops per block. */
		run->sched = RF_SCHEDULE_INLINE;
		return rf__cpu_run(NULL, run);
	}
	/* Every copy a file read and every compute the caller's (a graph's computes on other queues run on
	 * their lanes): the caller keeps the reads in flight itself, no hand-off on the critical path. Not
	 * where its reads are preads (no io_uring): each is done before the caller could compute; the lanes
	 * read while it computes. */
	if (run->files_only && run->prog->compute_queues <= 1 && (run->io == NULL || rf__flight_async(run->io)))
		return rf__cpu_walk_overlapped(run);
	/* The arm: from this pipeline's own runs of this shape, unless the owner compares runs itself
	 * (depth = auto) or the run reads files (overlap always hides the device's wait). */
	rf__sch_class *c = NULL;
	unsigned arm = t->overlap_mode == RF__MODE_OFF ? RF__SCH_INLINE : RF__SCH_LANES;
	if (run->vary && run->nfile == 0)
		arm = rf__sch_pick(&t->sch, rf__sch_shape(run->bytes, run->nblocks), &c);
	t->rs.handoff = arm == RF__SCH_HANDOFF || (arm == RF__SCH_LANES && t->handoff_fixed);
	int64_t t0 = c != NULL ? rf__now_ns() : 0;
	int rc;
	if (arm == RF__SCH_INLINE) {
		run->sched = RF_SCHEDULE_INLINE;
		rc = rf__cpu_run(NULL, run);
	} else {
		run->sched = RF_SCHEDULE_RING;
		run->handoff = t->rs.handoff;
		rc = rf__threads_lanes(t, run);
	}
	if (c != NULL && rc == RF_OK) {
		double x = (double)(rf__now_ns() - t0) / (double)(run->bytes ? run->bytes : run->nblocks);
		if (rf__sch_note(&t->sch, c, arm, x))
			rf__threads_note(t, c, run);
	}
	return rc;
}

static void rf__threads_close(void *ctx)
{
	rf__threads *t = ctx;
	int owned = rf__pool_owned(&t->pool);
	rf__pool_stop(&t->pool);
	rf__threads_unpin(t, owned);
	for (unsigned i = 0; owned && i + 1 < t->nq; i++)
		rf__flight_fini(&t->lane[i].flight);
	free(t->q);
	free(t->lane);
	free(t);
}

/* A lane between items: its file copies land and their signals go out; it sleeps in its reader. */
static int rf__threads_lane_idle(void *ctx)
{
	return rf__flight_idle(&((rf__threads_lane *)ctx)->flight);
}

static void rf__threads_lane_sleep(void *ctx)
{
	rf__flight_sleep(&((rf__threads_lane *)ctx)->flight);
}

static const rf__lane_ops rf__threads_lane_ops = {rf__threads_lane_idle, rf__threads_lane_sleep};

/* The arms a pipeline's runs compare (handoff: the configured mode), and the policy for describe. */
static void rf__threads_arms(rf__threads *t, int handoff)
{
	unsigned arms[RF__SCH_NARMS], n = 0;
	int ho = rf__sch_handoff(handoff, t->nq, t->nslots, &t->handoff_fixed, t->handoff_why,
				 sizeof t->handoff_why);
	if (t->overlap_mode != RF__MODE_ON)
		arms[n++] = RF__SCH_INLINE;
	if (t->overlap_mode != RF__MODE_OFF) {
		arms[n++] = RF__SCH_LANES;
		if (ho)
			arms[n++] = RF__SCH_HANDOFF;
	}
	rf__sch_init(&t->sch, arms, n);
	size_t len = strlen(t->handoff_why);
	if (t->nq < 2 || t->nslots < 2)
		return;
	snprintf(t->handoff_why + len, sizeof t->handoff_why - len, "; overlap %s",
		 t->overlap_mode == RF__MODE_OFF  ? "off (forced by configuration: every run inline on the caller)"
		 : t->overlap_mode == RF__MODE_ON ? "on (forced by configuration)"
						: "auto (each run shape's first runs compare the lanes with running inline "
						  "on the caller; the faster is kept and checked again now and then)");
}

static void rf__threads_describe(void *ctx, char *buf, size_t cap)
{
	rf__threads *t = ctx;
	snprintf(buf, cap, "threads: %u queue(s), %u worker thread(s) (rf-copy-N, keyed copies on the same); "
			   "wait: %s %lld us; %s",
		 t->nq, t->pool.n, t->spin_ns ? "spin" : "sleep", (long long)(t->spin_ns / 1000), t->placement);
}

static int rf__threads_open(const rf__open_args *args, void **ctx)
{
	rf__threads *t = rf__calloc(1, sizeof *t);
	if (t == NULL)
		return rf__err(RF_ENOMEM, "threads: out of memory");
	t->nq = args->nqueues;
	t->staging = args->staging;
	t->nslots = args->nslots;
	t->overlap_mode = args->overlap;
	unsigned nl = t->nq > 1 ? t->nq - 1 : 0;
	t->q = rf__aligned_alloc(64, t->nq * sizeof *t->q);
	t->lane = rf__calloc(nl ? nl : 1, sizeof *t->lane);
	void **lctx = rf__calloc(nl ? nl : 1, sizeof *lctx);
	if (t->q == NULL || t->lane == NULL || lctx == NULL) {
		free(t->q);
		free(t->lane);
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
		t->lane[i].walk.fn = rf__threads_walk_item;
		t->lane[i].core = -1;
		rf__flight_init(&t->lane[i].flight, &t->ec, i, &t->q[i + 1].value);
		t->lane[i].flight.report = args->files_report; /* describe: how the lane's reader reads */
		lctx[i] = &t->lane[i];
	}
	rf__ec_init(&t->ec);
	t->spin_ns = args->wait_spin_ns;
	t->rs.spin_ns = t->spin_ns > RF__RUN_SPIN_NS ? t->spin_ns : RF__RUN_SPIN_NS;
	rf__threads_arms(t, args->handoff);
	int rc = rf__pool_start(&t->pool, nl, "copy", &t->ec, t->spin_ns, &rf__threads_lane_ops, lctx);
	free(lctx);
	if (rc != RF_OK) {
		rf__threads_close(t);
		return rf__err(rc, "threads: %s", rf__errmsg_peek());
	}
	rf__threads_pin(t, args->worker_cpus);
	rf__threads_kopen(t, args->slot_stride);
	if (args->klanes != NULL && t->pool.n > 0)
		*args->klanes = t->pool.n;
	*ctx = t;
	return RF_OK;
}

/* The ring, under the pipeline's staging policy: "auto" resolves on the calling thread, queue 0's. */
static int rf__threads_slots_alloc(void *ctx, size_t bytes, void **mem)
{
	rf__threads *t = ctx;
	int rc = rf__staging_alloc(t->staging, bytes, RF__STAGING_SLOT_ALIGN, mem);
	if (rc == RF_OK) {
		t->ring = *mem;
		t->ring_len = bytes;
		rf__threads_kslots(t);
	}
	return rc;
}

const rf__backend_ops rf__backend_threads = {
	.abi = RF__BACKEND_ABI,
	.name = "threads",
	.caps = RF__CAP_OVERLAP,
	.open = rf__threads_open,
	.close = rf__threads_close,
	.slots_alloc = rf__threads_slots_alloc,
	.slots_free = rf__host_slots_free,
	.run = rf__threads_run,
	.describe = rf__threads_describe,
	.post = rf__threads_kpost,
};
