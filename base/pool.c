/* base/pool.c — lanes of worker threads (base/pool.h). */
#define _GNU_SOURCE /* pthread_setname_np */
#include "base/pool.h"
#include "base/alloc.h"
#include "base/error.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

atomic_ullong rf__forks;
static pthread_once_t rf__fork_once = PTHREAD_ONCE_INIT;

static void rf__fork_child(void)
{
	atomic_fetch_add_explicit(&rf__forks, 1, memory_order_relaxed);
}

static void rf__fork_register(void)
{
	pthread_atfork(NULL, NULL, rf__fork_child);
}

int rf__pool_owned(const rf__pool *p)
{
	return p->forks == rf__fork_count();
}

static int rf__lane_has_work(void *arg)
{
	rf__lane *l = arg;
	return atomic_load_explicit(&l->head, memory_order_acquire) > atomic_load_explicit(&l->tail, memory_order_relaxed) ||
	       atomic_load_explicit(&l->pool->quit, memory_order_acquire);
}

/* Work, or progress on what an item left in flight. */
static int rf__lane_has_progress(void *arg)
{
	rf__lane *l = arg;
	return rf__lane_has_work(l) || l->pool->ops->idle(l->ctx) != RF__LANE_BUSY;
}

static void *rf__lane_main(void *arg)
{
	rf__lane *l = arg;
	rf__pool *p = l->pool;
	int worked = 0, io = 0;
	for (;;) {
		uint64_t t = atomic_load_explicit(&l->tail, memory_order_relaxed);
		if (atomic_load_explicit(&l->head, memory_order_acquire) > t) {
			rf__work *w = l->items[t % RF__LANE_ITEMS];
			w->fn(w, l->ctx);
			atomic_store_explicit(&l->tail, t + 1, memory_order_release);
			rf__ec_notify(p->ec); /* for waiters on the item's consumption (a reuse of it, quiesce) */
			worked = 1;
			io = 0;
			continue;
		}
		int st = p->ops != NULL && p->ops->idle != NULL ? p->ops->idle(l->ctx) : 0, async = st == RF__LANE_BUSY;
		if (!async && atomic_load_explicit(&p->quit, memory_order_acquire))
			break;
		io |= st == RF__LANE_READ;
		/* Spin only after work that did not wait for a device: a lane that never worked sleeps at
		 * once; one waiting for reads sleeps until they land, and for the next item too (most likely
		 * reads again, whose latency a wake-up hardly adds to). */
		int64_t spin = worked && !io && p->spin_ns > 0 ? p->spin_ns : 0;
		if (async) {
			rf__ec_wait_bell(p->ec, rf__lane_has_progress, l, 0, l->bell, p->ops->sleep, l->ctx);
			io = 1;
		} else {
			rf__ec_wait(p->ec, rf__lane_has_work, l, spin);
		}
		worked = async;
	}
	return NULL;
}

/* The one pthread_create of the library. Its threads block every signal (process-directed signals are
 * the application's): the mask is set around the create, so they never run with the caller's. */
static int rf__thread_start(pthread_t *t, const char *role, unsigned n, void *(*fn)(void *), void *arg)
{
	if (rf__fault())
		return EAGAIN;
	sigset_t all, old;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	int err = pthread_create(t, NULL, fn, arg);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (err == 0) {
		char name[16];
		snprintf(name, sizeof name, "rf-%.7s-%u", role, n);
		pthread_setname_np(*t, name);
	}
	return err;
}

int rf__pool_start(rf__pool *p, unsigned n, const char *role, rf__ec *ec, int64_t spin_ns, const rf__lane_ops *ops,
		   void *const *ctx)
{
	pthread_once(&rf__fork_once, rf__fork_register);
	memset(p, 0, sizeof *p);
	p->ec = ec;
	p->ops = ops;
	p->spin_ns = spin_ns;
	p->forks = rf__fork_count();
	if (n == 0)
		return RF_OK;
	if ((p->lane = rf__aligned_alloc(64, n * sizeof *p->lane)) == NULL)
		return rf__err(RF_ENOMEM, "out of memory for %u worker threads", n);
	memset(p->lane, 0, n * sizeof *p->lane);
	for (unsigned i = 0; i < n; i++) {
		rf__lane *l = &p->lane[i];
		l->pool = p;
		l->ctx = ctx != NULL ? ctx[i] : NULL;
		l->bell = i;
		int err = rf__thread_start(&l->tid, role, i, rf__lane_main, l);
		if (err != 0) {
			rf__pool_stop(p);
			return rf__err(RF_ENOMEM, "cannot start worker thread rf-%s-%u: %s", role, i, strerror(err));
		}
		p->n = i + 1;
	}
	return RF_OK;
}

void rf__pool_stop(rf__pool *p)
{
	if (rf__pool_owned(p) && p->n > 0) {
		atomic_store_explicit(&p->quit, 1, memory_order_release);
		rf__ec_notify(p->ec);
		for (unsigned i = 0; i < p->n; i++)
			pthread_join(p->lane[i].tid, NULL);
	}
	free(p->lane);
	p->lane = NULL;
	p->n = 0;
}

int rf__pool_post(rf__pool *p, unsigned i, rf__work *w)
{
	rf__lane *l = &p->lane[i];
	uint64_t h = atomic_load_explicit(&l->head, memory_order_relaxed);
	if (h - atomic_load_explicit(&l->tail, memory_order_acquire) >= RF__LANE_ITEMS)
		return RF_ENOSPC;
	atomic_store_explicit(&w->state, RF__WORK_PENDING, memory_order_relaxed);
	l->items[h % RF__LANE_ITEMS] = w;
	atomic_store_explicit(&l->head, h + 1, memory_order_release);
	rf__ec_notify(p->ec);
	return RF_OK;
}

uint64_t rf__lane_posted(const rf__pool *p, unsigned i)
{
	return atomic_load_explicit(&p->lane[i].head, memory_order_relaxed);
}

uint64_t rf__lane_consumed(const rf__pool *p, unsigned i)
{
	return atomic_load_explicit(&p->lane[i].tail, memory_order_acquire);
}

int rf__work_cancel(rf__work *w)
{
	int pending = RF__WORK_PENDING;
	return atomic_compare_exchange_strong(&w->state, &pending, RF__WORK_CANCELED);
}

int rf__work_claim(rf__work *w)
{
	int pending = RF__WORK_PENDING;
	return atomic_compare_exchange_strong(&w->state, &pending, RF__WORK_RUNNING);
}
