/* base/pool.h — the library's worker threads, and the only place it creates any. A pool is a set of
 * lanes; a lane is one thread (named rf-<role>-<n>, every signal blocked) serving a FIFO of work items,
 * posted by one thread at a time (the owner), each carrying its own function. An idle lane spins for the
 * wait policy's budget, then sleeps on the owner's eventcount. A pool inherited by a child of fork() has
 * no threads there. */
#ifndef RF_BASE_POOL_H
#define RF_BASE_POOL_H

#include "base/wait.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

enum { RF__WORK_PENDING = 0, RF__WORK_RUNNING = 1, RF__WORK_CANCELED = 2 };

/* A work item. `fn` runs on the lane's thread; one that may be withdrawn (rf__work_cancel) does its real
 * work only if rf__work_claim succeeds. The poster owns the item; the lane is done with it once its tail
 * has passed it (rf__lane_consumed). */
typedef struct rf__work {
	void (*fn)(struct rf__work *w, void *lane_ctx);
	atomic_int state;
} rf__work;

/* Between items, for asynchronous work an item left behind (file reads in flight): idle() progresses it
 * and returns RF__LANE_BUSY while some remains; the lane then sleeps in sleep(), which must return when
 * that work may have progressed or the lane's bell is written. RF__LANE_READ: none remains, but the items
 * since the last call read a device (a blocking read, or reads landed since): the lane sleeps for its
 * next item rather than spin, as after reads it waited for. 0: neither. NULL idle: items finish within fn. */
#define RF__LANE_BUSY 1
#define RF__LANE_READ 2
typedef struct rf__lane_ops {
	int (*idle)(void *ctx);
	void (*sleep)(void *ctx);
} rf__lane_ops;

#define RF__LANE_ITEMS 64u /* items a lane may have queued (posted and not yet consumed) */

typedef struct rf__lane {
	_Alignas(64) atomic_ullong head; /* items posted (owner) */
	_Alignas(64) atomic_ullong tail; /* items consumed (lane) */
	rf__work *items[RF__LANE_ITEMS];
	struct rf__pool *pool;
	void *ctx;
	unsigned bell;
	pthread_t tid;
} rf__lane;

typedef struct rf__pool {
	unsigned n;
	rf__lane *lane;
	rf__ec *ec;
	const rf__lane_ops *ops;
	int64_t spin_ns;
	atomic_int quit;
	uint64_t forks; /* rf__fork_count() when the threads started */
} rf__pool;

/* Start n lanes named rf-<role>-<i> (role: up to 7 characters), lane i with context ctx[i] (NULL: none)
 * and bell slot i, waiting on ec under the wait policy spin_ns; ops may be NULL. RF_OK, or RF_ENOMEM
 * with nothing left running. */
int rf__pool_start(rf__pool *p, unsigned n, const char *role, rf__ec *ec, int64_t spin_ns, const rf__lane_ops *ops,
		   void *const *ctx);
/* Stop and join every lane (queued items run first); in a child of fork() only free. */
void rf__pool_stop(rf__pool *p);

/* Queue w on lane i and wake it. RF_OK, or RF_ENOSPC when the lane has RF__LANE_ITEMS queued. */
int rf__pool_post(rf__pool *p, unsigned i, rf__work *w);
uint64_t rf__lane_posted(const rf__pool *p, unsigned i);   /* items of lane i posted so far */
uint64_t rf__lane_consumed(const rf__pool *p, unsigned i); /* ... and consumed */

int rf__work_cancel(rf__work *w); /* withdraw w if it has not started: 1 when withdrawn, else 0 */
int rf__work_claim(rf__work *w);  /* start w (in its fn): 1, or 0 when it was withdrawn first */

/* Whether the pool's threads exist in this process (not a child of fork() that inherited it). */
int rf__pool_owned(const rf__pool *p);
/* Times this process has been the child of a fork() since the library was loaded: one relaxed load
 * (inline: every run and keyed call asks). */
extern atomic_ullong rf__forks;
static inline uint64_t rf__fork_count(void)
{
	return atomic_load_explicit(&rf__forks, memory_order_relaxed);
}

#endif
