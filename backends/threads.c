/* backends/threads.c — the threads backend (runtime/backend.h): queue 0 runs on the caller (one hop
 * less; an embedder keeps its thread-locals), queues 1 .. n-1 on the lanes of one pool, each walking its
 * queue of the program (threads_walk.c); a run starts the lanes' walks, walks queue 0 and returns once
 * every lane has left its walk. Keyed copies are threads_keyed.c's. */
#include "backends/threads_int.h"
#include "base/alloc.h"
#include "base/error.h"
#include "runtime/trace.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Within a run a waiter spins at least this long whatever the policy: a wake-up costs microseconds,
 * during which the signaller waits for the sleeper's next value; a shorter spin chains sleeps. */
#define RF__RUN_SPIN_NS 50000

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
