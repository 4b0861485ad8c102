/* base/wait.h — the one way the library's threads wait for each other: an eventcount.
 *
 * A waiter waits for a predicate over atomics that other threads change, and every thread that changes
 * one calls rf__ec_notify afterwards. A waiter spins first (pauses, then sched_yield for `spin_ns`, the
 * wait policy), then sleeps: on a futex, or in its own sleep function (a thread that must also notice
 * io_uring completions), woken by a write to its bell (an eventfd).
 *
 * No lost wake-up: the waiter announces itself (sleepers, a seq_cst RMW), reads the sequence, re-checks
 * the predicate, and sleeps only if the sequence is unchanged; the notifier publishes its change, issues
 * a seq_cst fence and reads `sleepers`: either the waiter sees the change or the notifier sees the
 * waiter, bumps the sequence and rings the armed bells. With no sleeper a notify is a fence and a load. */
#ifndef RF_BASE_WAIT_H
#define RF_BASE_WAIT_H

#include <stdatomic.h>
#include <stdint.h>
#include <time.h>

#define RF__EC_PAUSES 256u /* pauses before the first yield: a few microseconds */
#define RF__EC_BELLS 64u   /* sleepers that may sleep on a bell at once (one per lane) */

typedef struct rf__ec {
	_Alignas(64) atomic_uint seq;
	atomic_uint sleepers;
	atomic_ullong armed;          /* bit i: bell i's owner sleeps on it */
	int bell[RF__EC_BELLS];       /* eventfds, -1 when none */
} rf__ec;

typedef int (*rf__ec_pred)(void *arg);

void rf__ec_init(rf__ec *ec);

/* Wake every sleeper. Call after the change they wait for is stored. */
void rf__ec_notify(rf__ec *ec);

/* Return once pred(arg) is non-zero: spin (pauses, then yields for spin_ns), then sleep on the futex. */
void rf__ec_wait(rf__ec *ec, rf__ec_pred pred, void *arg, int64_t spin_ns);

/* As rf__ec_wait, but the sleep is sleep(sarg), which must return when ec->bell[bell] (set with
 * rf__ec_set_bell) is written, and may return earlier. */
void rf__ec_wait_bell(rf__ec *ec, rf__ec_pred pred, void *arg, int64_t spin_ns, unsigned bell, void (*sleep)(void *),
		      void *sarg);

/* Give bell slot i an eventfd (-1: none). Before any waiter uses slot i. */
void rf__ec_set_bell(rf__ec *ec, unsigned i, int fd);

/* Monotonic nanoseconds (CLOCK_MONOTONIC): waits, run timing and trace events alike. */
static inline int64_t rf__now_ns(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

#endif
