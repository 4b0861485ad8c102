/* backends/threads.c — one worker thread per queue, with CUDA-stream semantics: each queue runs its own
 * ops in order; a signal publishes "this queue has done everything up to value v"; a wait blocks its
 * queue until the other queue has published at least v.
 *
 * Queue 0 runs on the calling thread (in a ring it holds the computes): one thread hop less than a
 * dedicated compute worker, and an embedder keeps its thread-local state in the callback. Queues
 * 1 .. n-1 get a worker each, created once per pipeline (rf_pipeline_create), parked between runs.
 *
 * Events are one counter per queue. A waiter spins briefly (a copy of a small block lands in well
 * under a microsecond), yields for a while, then sleeps on the queue's condition variable. Lost wake-ups are excluded by
 * the usual pairing: the waiter registers (waiters++) and re-checks the counter under the mutex; the
 * signaller stores the counter and then reads `waiters` (both sequentially consistent), so either the
 * waiter sees the value or the signaller sees the waiter and broadcasts under the mutex.
 *
 * Failure: the first failing op (a compute returning non-zero, a cancel) wins a CAS on `first_rc`, then
 * sets `stop` and wakes every queue; every walker stops at its next op or wait, in-flight copies finish,
 * and the run returns once all workers are parked again. The next run resets the counters. */
#include "base/pause.h"
#include "base/alloc.h"
#include "base/error.h"
#include "backends/threads_keyed.h"
#include "memory/staging.h"
#include "memory/topology.h"
#include "runtime/walk.h"
#include "backends/threads_copy.h"
#include "backends/threads_place.h"
#include "runtime/config.h"
#include "base/thread.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* A waiter first spins with pause (RF__SPIN_PAUSES, a few microseconds), then yields the core for up to
 * RF__SPIN_NS, and only then sleeps. The yield phase matters: waking a sleeper takes a futex call on the
 * signalling side and several microseconds of scheduling on the sleeper's, during which the signaller
 * itself waits for the sleeper's next value; a short spin turns that into a chain of sleeps that never
 * ends (measured: 10-30 us per 1 KiB block instead of well under 1 us). */
#define RF__SPIN_PAUSES 256
#define RF__SPIN_NS 50000

typedef struct rf__tq {
	_Alignas(64) atomic_llong value; /* last value this queue signalled */
	atomic_int waiters;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	rf__tc_job job; /* this queue's current copy, open to helpers (backends/threads_copy.h) */
} rf__tq;

typedef struct rf__threads rf__threads;

typedef struct rf__worker {
	rf__threads *t;
	unsigned q;
	pthread_t tid;
	int core; /* logical index of the core it is counted on (backends/threads_place.c), -1: none */
} rf__worker;

struct rf__threads {
	unsigned nq;
	rf__tq *q;
	rf__worker *w; /* workers of queues 1 .. nq-1 (w[0] unused) */
	unsigned nworkers;
	/* Run control. Workers spin on gen for the wait policy's budget after a run, then sleep on start_cv
	 * (sleepers counts them); the caller spins on active the same way, then sleeps on done_cv
	 * (done_sleeping). Publish-then-check on both sides, sequentially consistent (see the top). */
	pthread_mutex_t mu;
	pthread_cond_t start_cv, done_cv;
	atomic_ulong gen;
	atomic_uint active;
	atomic_int sleepers, done_sleeping;
	atomic_int quit;
	rf__run *run;
	int64_t spin_ns; /* the wait policy between runs (rf__open_args.wait_spin_ns, resolved; 0 = sleep) */
	struct rf__tk *tk; /* keyed copy lanes (backends/threads_keyed.c) */
	/* failure */
	atomic_int stop;
	atomic_int first_rc;
	size_t fail_block;
	int fail_value;
	/* placement of the workers */
	hwloc_topology_t topo;
	char placement[512];
	/* The copy path (backends/threads_copy.h): cache handoff mode (config), the decision,
	 * and why, for describe. */
	int handoff_mode, handoff;
	size_t slot_bytes;
	unsigned nslots;
	char handoff_why[200];
	char worker_cpus[128]; /* the workers' explicit CPU set ("": the caller's binding) */
	/* Placement (backends/threads_place.c): the cores workers may take, the caller's core as last
	 * seen (avoided unless an explicit set names only it), a bitmap for the per-run look. */
	hwloc_obj_t cand[RF_MAX_QUEUES];
	unsigned ncand;
	hwloc_obj_t home;
	int avoid_home;
	hwloc_bitmap_t scratch;
	void *cand_sets; /* rf__tp_sets of cand (NULL: workers do not follow the caller) */
	const rf__staging_policy *staging; /* where the ring goes (owned by the engine); NULL = auto */
	pid_t pid; /* the process that started the workers: a child of fork() has none of them */
};

/* A pipeline inherited across fork() has no workers in the child (and its locks may be held by parent
 * threads that do not exist here): runs fail and close only frees memory, instead of waiting forever. */
static int rf__thr_inherited(const rf__threads *t)
{
	return getpid() != t->pid;
}

static void rf__thr_follow(rf__threads *t); /* placement, per run (below rf__thr_pin) */

/* Per-walker state: a private copy of the run (its failure fields are written by this walker only). */
typedef struct rf__walker {
	rf__threads *t;
	rf__run run;
} rf__walker;

static void rf__thr_wake_all(rf__threads *t)
{
	for (unsigned i = 0; i < t->nq; i++) {
		pthread_mutex_lock(&t->q[i].mu);
		pthread_cond_broadcast(&t->q[i].cv);
		pthread_mutex_unlock(&t->q[i].mu);
	}
}

/* Record the first failure of the run and stop every queue. A compute's failure outranks a cancel seen
 * first by another queue (a callback that destroys its pipeline and then fails): the caller must hear
 * about the block that failed, as on the cpu backend. */
static void rf__thr_fail(rf__walker *wk, int rc)
{
	rf__threads *t = wk->t;
	int prev = 0;
	if (atomic_compare_exchange_strong(&t->first_rc, &prev, rc) ||
	    (rc == RF_ECALLBACK && prev == RF_ECANCELED &&
	     atomic_compare_exchange_strong(&t->first_rc, &prev, rc))) {
		t->fail_block = wk->run.failed_block;
		t->fail_value = wk->run.failed_value;
	}
	atomic_store(&t->stop, 1);
	rf__thr_wake_all(t);
}

static int rf__thr_stopped(const rf__walker *wk)
{
	return atomic_load_explicit(&wk->t->stop, memory_order_relaxed) ||
	       atomic_load_explicit(wk->run.cancel, memory_order_relaxed);
}

/* `run` is the walker's private copy (wk->run). */
static int rf__thr_copy(void *c, rf__run *run, unsigned queue, size_t b, unsigned slot)
{
	if (rf__thr_stopped(c))
		return RF_ECANCELED;
	size_t n = run->sizes[b];
	if (n != 0) {
		unsigned char *dst = rf__slot_ptr(run, slot);
		rf__threads *t = ((rf__walker *)c)->t;
		/* Cooperative copy and handoff only at depth >= 2: at depth 1 nothing overlaps and the whole
		 * copy runs on one thread (the demotes would only lengthen the critical path). */
		if (run->prog->nslots >= 2)
			rf__tc_copy(&t->q[queue].job, dst, run->srcs[b], n, b, t->handoff);
		else
			memcpy(dst, run->srcs[b], n);
	}
	return 0;
}

static int rf__thr_compute(void *c, rf__run *run, unsigned queue, size_t b, unsigned slot)
{
	(void)queue;
	if (atomic_load_explicit(&((rf__walker *)c)->t->stop, memory_order_relaxed))
		return RF_ECANCELED;
	return rf__call_compute(run, b, slot, NULL);
}

static int rf__thr_signal(void *c, unsigned q, int64_t v, size_t block)
{
	(void)block;
	rf__tq *e = &((rf__walker *)c)->t->q[q];
	atomic_store(&e->value, v);
	if (atomic_load(&e->waiters) > 0) {
		pthread_mutex_lock(&e->mu);
		pthread_cond_broadcast(&e->cv);
		pthread_mutex_unlock(&e->mu);
	}
	return 0;
}

/* Spin (pause, then yield) until the value is there, the run stops, or the spin budget is spent.
 * Returns 1 when the value is there, 0 otherwise. */
static int rf__thr_spin(rf__threads *t, rf__tq *e, int64_t v)
{
	int64_t t0 = 0;
	for (unsigned i = 0;; i++) {
		if (atomic_load_explicit(&e->value, memory_order_acquire) >= v)
			return 1;
		if (atomic_load_explicit(&t->stop, memory_order_relaxed))
			return 0;
		if (i < RF__SPIN_PAUSES) {
			RF__PAUSE();
		} else {
			int64_t now = rf__trace_now();
			if (t0 == 0)
				t0 = now;
			else if (now - t0 > (t->spin_ns > RF__SPIN_NS ? t->spin_ns : RF__SPIN_NS))
				return 0;
			sched_yield();
		}
	}
}

/* Spin predicates (rf__spin_until) for the waits between runs: a new run (or quit) for a worker,
 * every worker done for the caller. */
static int rf__thr_started(void *arg, uint64_t seen)
{
	rf__threads *t = arg;
	return atomic_load_explicit(&t->gen, memory_order_acquire) != seen || atomic_load(&t->quit);
}

static int rf__thr_all_done(void *arg, uint64_t unused)
{
	(void)unused;
	return atomic_load_explicit(&((rf__threads *)arg)->active, memory_order_acquire) == 0;
}

static int rf__thr_wait(void *c, unsigned q, unsigned wq, int64_t v, size_t block)
{
	(void)q;
	rf__threads *t = ((rf__walker *)c)->t;
	rf__tq *e = &t->q[wq];
	/* Cooperative copy: rather than wait idle for the copy of `block`, take pieces of it. */
	rf__tc_help(&e->job, block, &e->value, v);
	if (rf__thr_spin(t, e, v))
		return 0;
	pthread_mutex_lock(&e->mu);
	atomic_fetch_add(&e->waiters, 1);
	while (atomic_load(&e->value) < v && !atomic_load(&t->stop))
		pthread_cond_wait(&e->cv, &e->mu);
	atomic_fetch_sub(&e->waiters, 1);
	pthread_mutex_unlock(&e->mu);
	return atomic_load(&e->value) >= v ? 0 : RF_ECANCELED;
}

static const rf__walk_ops rf__thr_ops = {rf__thr_copy, rf__thr_compute, rf__thr_signal, rf__thr_wait};

static void rf__thr_walk(rf__threads *t, rf__run *run, unsigned q)
{
	rf__walker wk = {t, *run};
	int rc = rf__walk(&wk.run, (int)q, &rf__thr_ops, &wk);
	if (rc != 0)
		rf__thr_fail(&wk, rc);
}

static void *rf__thr_main(void *arg)
{
	rf__thread_block_signals();
	rf__worker *w = arg;
	rf__threads *t = w->t;
	unsigned long seen = 0;
	for (;;) {
		if (!rf__spin_until(rf__thr_started, t, seen, t->spin_ns)) {
			pthread_mutex_lock(&t->mu);
			atomic_fetch_add(&t->sleepers, 1);
			while (atomic_load(&t->gen) == seen && !atomic_load(&t->quit))
				pthread_cond_wait(&t->start_cv, &t->mu);
			atomic_fetch_sub(&t->sleepers, 1);
			pthread_mutex_unlock(&t->mu);
		}
		if (atomic_load(&t->quit))
			break;
		seen = atomic_load(&t->gen);
		rf__thr_walk(t, t->run, w->q);
		if (atomic_fetch_sub(&t->active, 1) == 1 && atomic_load(&t->done_sleeping)) {
			pthread_mutex_lock(&t->mu);
			pthread_cond_signal(&t->done_cv);
			pthread_mutex_unlock(&t->mu);
		}
	}
	return NULL;
}

static int rf__thr_run(void *ctx, rf__run *run)
{
	rf__threads *t = ctx;
	if (rf__thr_inherited(t))
		return rf__err(RF_EBACKEND, "threads: the pipeline was created in process %ld, and its worker threads "
					    "do not survive fork(): run it there", (long)t->pid);
	for (unsigned i = 0; i < t->nq; i++)
		atomic_store_explicit(&t->q[i].value, 0, memory_order_relaxed);
	atomic_store(&t->stop, 0);
	atomic_store(&t->first_rc, 0);
	if (run->prog->nslots <= 1) {
		/* Depth 1: the copy and the compute wait for each other, nothing overlaps; the cpu backend's
		 * walk of every queue in issue order on the caller saves two thread hops per block and the
		 * cross-thread signalling (measured: 0.91x of cpu's speed at 1 KiB blocks with it). */
		return rf__cpu_walk_inline(run);
	}
	rf__thr_follow(t); /* placement: workers off the caller's core (backends/threads_place.c) */
	t->run = run;
	atomic_store(&t->active, t->nworkers);
	atomic_fetch_add(&t->gen, 1);
	if (atomic_load(&t->sleepers) > 0) {
		pthread_mutex_lock(&t->mu);
		pthread_cond_broadcast(&t->start_cv);
		pthread_mutex_unlock(&t->mu);
	}

	rf__thr_walk(t, run, 0);

	if (!rf__spin_until(rf__thr_all_done, t, 0, t->spin_ns > RF__SPIN_NS ? t->spin_ns : RF__SPIN_NS)) {
		pthread_mutex_lock(&t->mu);
		atomic_store(&t->done_sleeping, 1);
		while (atomic_load(&t->active) > 0)
			pthread_cond_wait(&t->done_cv, &t->mu);
		atomic_store(&t->done_sleeping, 0);
		pthread_mutex_unlock(&t->mu);
	}
	int rc = atomic_load(&t->first_rc);
	if (rc == RF_ECALLBACK) {
		run->failed_block = t->fail_block;
		run->failed_value = t->fail_value;
	}
	return rc;
}

static void rf__thr_join(rf__threads *t)
{
	rf__tk_close(t->tk);
	t->tk = NULL;
	pthread_mutex_lock(&t->mu);
	atomic_store(&t->quit, 1);
	pthread_cond_broadcast(&t->start_cv);
	pthread_mutex_unlock(&t->mu);
	for (unsigned i = 1; i <= t->nworkers; i++)
		pthread_join(t->w[i].tid, NULL);
}

static void rf__thr_free(rf__threads *t)
{
	int own = !rf__thr_inherited(t);
	for (unsigned i = 0; i < t->nq && own; i++) {
		pthread_mutex_destroy(&t->q[i].mu);
		pthread_cond_destroy(&t->q[i].cv);
	}
	if (own) {
		pthread_mutex_destroy(&t->mu);
		pthread_cond_destroy(&t->start_cv);
		pthread_cond_destroy(&t->done_cv);
		for (unsigned i = 1; i < t->nq; i++) /* the placement table's lock, too, is the parent's */
			if (t->w[i].core >= 0)
				rf__tp_unpick((unsigned)t->w[i].core);
		rf__topo_release(t->topo); /* its lock could be held by a parent thread: the child keeps it */
	}
	hwloc_bitmap_free(t->scratch);
	free(t->cand_sets);
	free(t->q);
	free(t->w);
	free(t);
}


/* Pin each copy worker to the core of the caller's binding (or of the configured set) other than the
 * caller's own that holds the fewest copy workers of the process (backends/threads_place.c). The
 * caller's thread is not ours: we never bind it. What happened is recorded in t->placement, which
 * rf_pipeline_describe shows; failing to pin is not an error (the run is still correct), but it is
 * never silent. */
static void rf__thr_pin(rf__threads *t)
{
	int n = snprintf(t->placement, sizeof t->placement, "compute: caller's thread (not pinned by ringfetch)");
	if (t->nworkers == 0)
		return;
	/* A topology failure is not the caller's failure (create still succeeds): keep its rf_errmsg. */
	char saved[256];
	snprintf(saved, sizeof saved, "%s", rf__errmsg_peek());
	if ((t->topo = rf__topo_acquire()) != NULL && (t->home = rf__tp_caller_core(t->topo)) != NULL)
		t->ncand = rf__tp_cores(t->topo, t->worker_cpus, t->cand, RF_MAX_QUEUES);
	unsigned others = 0;
	for (unsigned i = 0; i < t->ncand; i++)
		others += t->cand[i] != t->home;
	/* An explicit set that names only the caller's core is the deployer's call. */
	t->avoid_home = !(*t->worker_cpus && others == 0);
	if (t->ncand == 0 || (t->avoid_home && others == 0)) {
		snprintf(t->placement + n, sizeof t->placement - (size_t)n, "; copy workers not pinned: %s",
			 t->topo == NULL ? rf__errmsg_peek()
			 : t->home == NULL ? "the caller's core is unknown (no core objects in the topology)"
			 : *t->worker_cpus ? "no core of the machine in RINGFETCH_WORKER_CPUS / worker_cpus"
					   : "no core besides the caller's in its CPU binding");
		t->ncand = 0;
		rf__err(RF_OK, "%s", saved);
		n = (int)strlen(t->placement);
		snprintf(t->placement + n, sizeof t->placement - (size_t)n, "; %s", t->handoff_why);
		return;
	}
	/* For rf__thr_follow; either NULL: the workers just do not follow the caller. */
	t->scratch = hwloc_bitmap_alloc();
	t->cand_sets = rf__tp_sets(t->topo, t->cand, t->ncand);
	if (*t->worker_cpus)
		n += snprintf(t->placement + n, sizeof t->placement - (size_t)n, "; copy workers on CPUs %s (configured)",
			      t->worker_cpus);
	for (unsigned i = 1; i <= t->nworkers; i++) {
		hwloc_obj_t core = rf__tp_pick(t->cand, t->ncand, t->avoid_home ? t->home : NULL);
		int ok = hwloc_set_thread_cpubind(t->topo, t->w[i].tid, core->cpuset, 0) == 0;
		int e = errno;
		if (ok)
			t->w[i].core = (int)core->logical_index;
		else
			rf__tp_unpick(core->logical_index);
		if (n < 0 || (size_t)n >= sizeof t->placement)
			continue;
		size_t room = sizeof t->placement - (size_t)n;
		if (ok)
			n += snprintf(t->placement + n, room, "; q%u: core %u", i, core->logical_index);
		else
			n += snprintf(t->placement + n, room, "; q%u: not pinned (%s)", i, strerror(e));
	}
	/* Keyed lane l shares the core of copy queue l + 1: both copy for the same caller, never at once
	 * in one loop (a run empties the keyed cache first). */
	for (unsigned l = 0; l < rf__tk_lanes(t->tk) && l < t->nworkers; l++)
		if (t->w[l + 1].core >= 0)
			hwloc_set_thread_cpubind(t->topo, rf__tk_thread(t->tk, l),
						 hwloc_get_obj_by_type(t->topo, HWLOC_OBJ_CORE, (unsigned)t->w[l + 1].core)->cpuset, 0);
	if (n >= 0 && (size_t)n < sizeof t->placement)
		snprintf(t->placement + n, sizeof t->placement - (size_t)n, "; %s", t->handoff_why);
}

/* Per run: when the caller now runs on a copy worker's core (an unpinned caller migrates there: 4196 of
 * 4992 computes in one measured run), move that worker to the least loaded other core. One
 * sched_getcpu-backed look per run when nothing changed; no allocation. */
static void rf__thr_follow(rf__threads *t)
{
	if (t->scratch == NULL || t->cand_sets == NULL || !t->avoid_home)
		return;
	hwloc_obj_t now = rf__tp_core_now(t->topo, t->scratch);
	if (now == NULL || now == t->home)
		return;
	t->home = now;
	for (unsigned i = 1; i <= t->nworkers; i++) {
		if (t->w[i].core != (int)now->logical_index)
			continue;
		hwloc_obj_t c = rf__tp_pick(t->cand, t->ncand, now);
		unsigned k = 0;
		while (c != NULL && t->cand[k] != c)
			k++;
		if (c != NULL && rf__tp_move(t->w[i].tid, t->cand_sets, k)) {
			rf__tp_unpick(now->logical_index);
			t->w[i].core = (int)c->logical_index;
			if (i - 1 < rf__tk_lanes(t->tk)) /* its keyed lane goes with it (rf__thr_pin) */
				rf__tp_move(rf__tk_thread(t->tk, i - 1), t->cand_sets, k);
		} else if (c != NULL) {
			rf__tp_unpick(c->logical_index);
		}
	}
}

static int rf__thr_describe(void *ctx, char *buf, size_t cap)
{
	rf__threads *t = ctx;
	snprintf(buf, cap, "threads: %u queue(s), %u worker thread(s) + %u keyed lane worker(s); wait: %s %lld us; %s",
		 t->nq, t->nworkers, rf__tk_lanes(t->tk), t->spin_ns ? "spin" : "sleep", (long long)(t->spin_ns / 1000),
		 t->placement);
	return RF_OK;
}

static int rf__thr_open(const rf__open_args *args, void **ctx)
{
	rf__threads *t = rf__calloc(1, sizeof *t);
	if (t == NULL)
		return rf__err(RF_ENOMEM, "threads: out of memory");
	t->nq = args->nqueues;
	t->staging = args->staging;
	t->pid = getpid();
	t->slot_bytes = args->slot_bytes;
	t->nslots = args->nslots;
	int hrc = rf__config_handoff(&t->handoff_mode);
	if (hrc == RF_OK)
		hrc = rf__config_worker_cpus(t->worker_cpus, sizeof t->worker_cpus);
	if (hrc != RF_OK) {
		free(t);
		return hrc;
	}
	t->q = rf__aligned_alloc(64, t->nq * sizeof *t->q);
	t->w = rf__calloc(t->nq, sizeof *t->w);
	if (t->q == NULL || t->w == NULL) {
		free(t->q);
		free(t->w);
		free(t);
		return rf__err(RF_ENOMEM, "threads: out of memory");
	}
	for (unsigned i = 0; i < t->nq; i++) {
		atomic_init(&t->q[i].value, 0);
		atomic_init(&t->q[i].waiters, 0);
		pthread_mutex_init(&t->q[i].mu, NULL);
		pthread_cond_init(&t->q[i].cv, NULL);
		rf__tc_job_init(&t->q[i].job);
	}
	pthread_mutex_init(&t->mu, NULL);
	pthread_cond_init(&t->start_cv, NULL);
	pthread_cond_init(&t->done_cv, NULL);
	atomic_init(&t->gen, 0);
	atomic_init(&t->active, 0);
	atomic_init(&t->sleepers, 0);
	atomic_init(&t->done_sleeping, 0);
	atomic_init(&t->quit, 0);
	t->spin_ns = args->wait_spin_ns == RF__WAIT_SLEEP ? 0 : args->wait_spin_ns ? args->wait_spin_ns : RF__WAIT_AUTO_NS;
	atomic_init(&t->stop, 0);
	atomic_init(&t->first_rc, 0);
	for (unsigned i = 0; i < t->nq; i++)
		t->w[i].core = -1;
	/* The cache handoff, decided before the workers exist (backends/threads_handoff.c). */
	rf__ho_pipeline(t->handoff_mode, t->worker_cpus, t->nq, t->nslots, t->slot_bytes, &t->handoff, t->handoff_why,
			sizeof t->handoff_why);
	for (unsigned i = 1; i < t->nq; i++) {
		t->w[i].t = t;
		t->w[i].q = i;
		int err = rf__fault() ? EAGAIN : pthread_create(&t->w[i].tid, NULL, rf__thr_main, &t->w[i]);
		if (err != 0) {
			rf__thr_join(t);
			rf__thr_free(t);
			return rf__err(RF_ENOMEM, "threads: cannot start the worker of queue %u: %s", i, strerror(err));
		}
		t->nworkers = i;
	}
	int rc = rf__tk_open(t->nq > 1 ? t->nq - 1 : 1, t->spin_ns, &t->tk);
	if (rc != RF_OK) {
		rf__thr_join(t);
		rf__thr_free(t);
		return rc;
	}
	rf__thr_pin(t);
	*ctx = t;
	return RF_OK;
}

static void rf__thr_close(void *ctx)
{
	rf__threads *t = ctx;
	if (!rf__thr_inherited(t))
		rf__thr_join(t);
	rf__thr_free(t);
}

/* The ring comes from the staging layer under the pipeline's policy. "auto" resolves on the calling
 * thread, which is the compute thread (queue 0): the ring is placed next to its reader. */
static int rf__thr_slots_alloc(void *ctx, size_t bytes, void **mem)
{
	rf__threads *t = ctx;
	return rf__staging_alloc(t->staging, bytes, RF__STAGING_SLOT_ALIGN, mem);
}

static int rf__thr_probe(int device)
{
	(void)device;
	return RF_OK;
}

/* Keyed use: the lanes of backends/threads_keyed.c. */
#define RF__TK(ctx) (((rf__threads *)(ctx))->tk)
static int rf__thr_kissue(void *ctx, const rf__kcopy *req, rf__kticket *out) { return rf__tk_issue(RF__TK(ctx), req, out); }
static int rf__thr_ktest(void *ctx, rf__kticket t) { return rf__tk_test(RF__TK(ctx), t); }
static int rf__thr_kcancel(void *ctx, rf__kticket t) { return rf__tk_cancel(RF__TK(ctx), t); }
static int rf__thr_ksync(void *ctx, rf__kticket t) { return rf__tk_sync(RF__TK(ctx), t); }
static int rf__thr_kwait(void *ctx, rf__kticket t, void *stream) { return (void)stream, rf__tk_sync(RF__TK(ctx), t); }
static int rf__thr_kquiesce(void *ctx) { return rf__tk_quiesce(RF__TK(ctx)); }
static unsigned rf__thr_klanes(void *ctx) { return rf__tk_lanes(RF__TK(ctx)); }

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
	.kissue = rf__thr_kissue,
	.ktest = rf__thr_ktest,
	.kcancel = rf__thr_kcancel,
	.kwait = rf__thr_kwait,
	.ksync = rf__thr_ksync,
	.kquiesce = rf__thr_kquiesce,
	.klanes = rf__thr_klanes,
};
