/* backends/threads_keyed.c — keyed copy lanes of the threads backend (backends/threads_keyed.h).
 *
 * Hints: each lane is a ring of RF__TK_RING requests served in order by one worker thread. A request
 * is PENDING until the worker claims it (CAS to RUNNING) or the owner withdraws it (CAS to CANCELED):
 * whichever wins decides, so a withdrawn copy never touches the slot. `done` counts the requests the
 * worker has finished or skipped; a ticket is finished when done passed it or it was withdrawn.
 *
 * Demand copies (an acquire's miss) run inline on the caller: the caller waits for them anyway, the
 * bytes land in the cache of the core that computes on them, and they can never queue behind a hint.
 *
 * Waiting (worker for work, owner for a copy): spin with pause, then sched_yield, for the policy's
 * budget, then sleep on a condition variable. Lost wake-ups are excluded by the usual pairing: the
 * sleeper announces itself (sequentially consistent) under the mutex and re-checks; the other side
 * publishes (sequentially consistent) and then reads the announcement, signalling under the mutex. */
#include "base/pause.h"
#include "backends/threads_keyed.h"
#include "base/alloc.h"
#include "base/error.h"
#include "runtime/trace.h"
#include "base/thread.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#define RF__TK_RING 8u /* > RF__KEYED_HINTS_PER_LANE: withdrawn requests still take room until skipped */
#define RF__TK_SEQ_BITS 48
#define RF__TK_SEQ_MASK ((1ull << RF__TK_SEQ_BITS) - 1)

enum { RF__TK_PENDING = 1, RF__TK_RUNNING = 2, RF__TK_CANCELED = 3 };

typedef struct rf__tk_req {
	atomic_int state;
	atomic_ullong seq;
	const void *src;
	void *dst;
	size_t bytes;
} rf__tk_req;

typedef struct rf__tk_lane {
	_Alignas(64) atomic_ullong head; /* requests issued (owner) */
	_Alignas(64) atomic_ullong done; /* requests finished or skipped (worker) */
	atomic_int sleeping;             /* the worker sleeps waiting for head */
	atomic_int waiters;              /* the owner sleeps waiting for done */
	pthread_mutex_t mu;
	pthread_cond_t work_cv, done_cv;
	rf__tk_req ring[RF__TK_RING];
	struct rf__tk *k;
	pthread_t tid;
} rf__tk_lane;

struct rf__tk {
	unsigned n, started;
	int64_t spin_ns;
	atomic_int quit;
	rf__tk_lane *lane;
};

int rf__spin_until(int (*pred)(void *, uint64_t), void *arg, uint64_t x, int64_t budget_ns)
{
	int64_t t0 = 0;
	for (unsigned i = 0;; i++) {
		if (pred(arg, x))
			return 1;
		if (i < 256) {
			RF__PAUSE();
			continue;
		}
		int64_t now = rf__trace_now();
		if (t0 == 0)
			t0 = now;
		else if (now - t0 > budget_ns)
			return 0;
		sched_yield();
	}
}

static int rf__tk_has_work(void *arg, uint64_t seen)
{
	rf__tk_lane *l = arg;
	return atomic_load_explicit(&l->head, memory_order_acquire) > seen || atomic_load(&l->k->quit);
}

static void rf__tk_serve(rf__tk_lane *l, uint64_t s)
{
	rf__tk_req *r = &l->ring[s % RF__TK_RING];
	if (RF__TEST_HOOK(keyed_before_copy) != NULL)
		RF__TEST_HOOK(keyed_before_copy)(0);
	int pending = RF__TK_PENDING;
	if (atomic_compare_exchange_strong(&r->state, &pending, RF__TK_RUNNING)) {
		if (RF__TEST_HOOK(keyed_before_copy) != NULL)
			RF__TEST_HOOK(keyed_before_copy)(1);
		memcpy(r->dst, r->src, r->bytes);
	}
	atomic_store(&l->done, s + 1);
	if (atomic_load(&l->waiters) > 0) {
		pthread_mutex_lock(&l->mu);
		pthread_cond_broadcast(&l->done_cv);
		pthread_mutex_unlock(&l->mu);
	}
}

static void *rf__tk_main(void *arg)
{
	rf__thread_block_signals();
	rf__tk_lane *l = arg;
	rf__tk *k = l->k;
	for (uint64_t s = 0;;) {
		if (atomic_load_explicit(&l->head, memory_order_acquire) > s) {
			rf__tk_serve(l, s++);
			continue;
		}
		if (atomic_load(&k->quit))
			break;
		if (rf__spin_until(rf__tk_has_work, l, s, k->spin_ns))
			continue;
		pthread_mutex_lock(&l->mu);
		atomic_store(&l->sleeping, 1);
		while (!rf__tk_has_work(l, s))
			pthread_cond_wait(&l->work_cv, &l->mu);
		atomic_store(&l->sleeping, 0);
		pthread_mutex_unlock(&l->mu);
	}
	return NULL;
}

int rf__tk_open(unsigned nlanes, int64_t spin_ns, rf__tk **out)
{
	rf__tk *k = rf__calloc(1, sizeof *k);
	if (k == NULL)
		return rf__err(RF_ENOMEM, "threads: keyed lanes: out of memory");
	k->n = nlanes ? nlanes : 1;
	k->spin_ns = spin_ns < 0 ? 0 : spin_ns;
	atomic_init(&k->quit, 0);
	if ((k->lane = rf__aligned_alloc(64, k->n * sizeof *k->lane)) == NULL) {
		free(k);
		return rf__err(RF_ENOMEM, "threads: keyed lanes: out of memory");
	}
	memset(k->lane, 0, k->n * sizeof *k->lane);
	for (unsigned i = 0; i < k->n; i++) {
		rf__tk_lane *l = &k->lane[i];
		l->k = k;
		pthread_mutex_init(&l->mu, NULL);
		pthread_cond_init(&l->work_cv, NULL);
		pthread_cond_init(&l->done_cv, NULL);
	}
	for (unsigned i = 0; i < k->n; i++) {
		int err = rf__fault() ? EAGAIN : pthread_create(&k->lane[i].tid, NULL, rf__tk_main, &k->lane[i]);
		if (err != 0) {
			rf__tk_close(k);
			return rf__err(RF_ENOMEM, "threads: cannot start keyed lane %u: %s", i, strerror(err));
		}
		k->started = i + 1;
	}
	*out = k;
	return RF_OK;
}

void rf__tk_close(rf__tk *k)
{
	if (k == NULL)
		return;
	atomic_store(&k->quit, 1);
	for (unsigned i = 0; i < k->n; i++) {
		rf__tk_lane *l = &k->lane[i];
		pthread_mutex_lock(&l->mu);
		pthread_cond_broadcast(&l->work_cv);
		pthread_mutex_unlock(&l->mu);
	}
	for (unsigned i = 0; i < k->started; i++)
		pthread_join(k->lane[i].tid, NULL);
	for (unsigned i = 0; i < k->n; i++) {
		pthread_mutex_destroy(&k->lane[i].mu);
		pthread_cond_destroy(&k->lane[i].work_cv);
		pthread_cond_destroy(&k->lane[i].done_cv);
	}
	free(k->lane);
	free(k);
}

unsigned rf__tk_lanes(const rf__tk *k)
{
	return k->n;
}

pthread_t rf__tk_thread(const rf__tk *k, unsigned l)
{
	return k->lane[l].tid;
}

int rf__tk_test(rf__tk *k, rf__kticket t)
{
	uint64_t lane = t >> RF__TK_SEQ_BITS, s = t & RF__TK_SEQ_MASK;
	if (lane == 0)
		return 1; /* an inline copy */
	rf__tk_lane *l = &k->lane[lane - 1];
	if (atomic_load(&l->done) > s)
		return 1;
	const rf__tk_req *r = &l->ring[s % RF__TK_RING];
	if (atomic_load(&r->seq) == s && atomic_load(&r->state) == RF__TK_CANCELED)
		return 1;
	return atomic_load(&l->done) > s; /* the request was reused meanwhile: then it was done */
}

static int rf__tk_pred_done(void *arg, uint64_t t)
{
	return rf__tk_test(arg, t);
}

int rf__tk_sync(rf__tk *k, rf__kticket t)
{
	if (rf__spin_until(rf__tk_pred_done, k, t, k->spin_ns))
		return RF_OK;
	rf__tk_lane *l = &k->lane[(t >> RF__TK_SEQ_BITS) - 1];
	pthread_mutex_lock(&l->mu);
	atomic_fetch_add(&l->waiters, 1);
	while (!rf__tk_test(k, t))
		pthread_cond_wait(&l->done_cv, &l->mu);
	atomic_fetch_sub(&l->waiters, 1);
	pthread_mutex_unlock(&l->mu);
	return RF_OK;
}

int rf__tk_cancel(rf__tk *k, rf__kticket t)
{
	uint64_t lane = t >> RF__TK_SEQ_BITS, s = t & RF__TK_SEQ_MASK;
	if (lane == 0)
		return 0;
	rf__tk_req *r = &k->lane[lane - 1].ring[s % RF__TK_RING];
	int pending = RF__TK_PENDING;
	return atomic_load(&r->seq) == s && atomic_compare_exchange_strong(&r->state, &pending, RF__TK_CANCELED);
}

int rf__tk_issue(rf__tk *k, const rf__kcopy *req, rf__kticket *out)
{
	if (req->demand) {
		if (req->after != 0)
			rf__tk_sync(k, req->after); /* a hint copy into this slot that already started */
		memcpy(req->dst, req->src, req->bytes);
		*out = 1;
		return RF_OK;
	}
	/* A hint: into the lane's ring. After `after` by construction: the core sends every hint into a
	 * slot down the same lane, and earlier demand copies finished inline. */
	rf__tk_lane *l = &k->lane[req->lane];
	uint64_t h = atomic_load_explicit(&l->head, memory_order_relaxed);
	if (h - atomic_load(&l->done) >= RF__TK_RING)
		return RF_ENOSPC;
	rf__tk_req *r = &l->ring[h % RF__TK_RING];
	r->src = req->src;
	r->dst = req->dst;
	r->bytes = req->bytes;
	atomic_store(&r->seq, h);
	atomic_store(&r->state, RF__TK_PENDING);
	atomic_store(&l->head, h + 1);
	if (atomic_load(&l->sleeping)) {
		pthread_mutex_lock(&l->mu);
		pthread_cond_signal(&l->work_cv);
		pthread_mutex_unlock(&l->mu);
	}
	*out = ((uint64_t)(req->lane + 1) << RF__TK_SEQ_BITS) | h;
	return RF_OK;
}

int rf__tk_quiesce(rf__tk *k)
{
	for (unsigned i = 0; i < k->n; i++) {
		rf__tk_lane *l = &k->lane[i];
		uint64_t h = atomic_load(&l->head);
		if (h > 0)
			rf__tk_sync(k, ((uint64_t)(i + 1) << RF__TK_SEQ_BITS) | (h - 1));
		/* A withdrawn last request counts as finished at once: wait for the worker to pass it too, so
		 * that it reads no request any more. */
		while (atomic_load(&l->done) < h)
			sched_yield();
	}
	return RF_OK;
}
