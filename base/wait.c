/* base/wait.c — the eventcount (base/wait.h). */
#define _GNU_SOURCE /* syscall */
#include "base/wait.h"
#include "base/pause.h"

#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <sched.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

void rf__ec_init(rf__ec *ec)
{
	*ec = (rf__ec){0};
	for (unsigned i = 0; i < RF__EC_BELLS; i++)
		ec->bell[i] = -1;
}

void rf__ec_set_bell(rf__ec *ec, unsigned i, int fd)
{
	ec->bell[i] = fd;
}

void rf__ec_notify(rf__ec *ec)
{
	atomic_thread_fence(memory_order_seq_cst);
	if (atomic_load_explicit(&ec->sleepers, memory_order_relaxed) == 0)
		return;
	atomic_fetch_add_explicit(&ec->seq, 1, memory_order_seq_cst);
	syscall(SYS_futex, &ec->seq, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
	uint64_t armed = atomic_load_explicit(&ec->armed, memory_order_seq_cst);
	while (armed != 0) {
		unsigned i = (unsigned)__builtin_ctzll(armed);
		armed &= armed - 1;
		uint64_t one = 1;
		if (ec->bell[i] >= 0 && write(ec->bell[i], &one, sizeof one) < 0)
			(void)errno; /* a full eventfd counter already wakes its reader */
	}
}

/* Spin only: 1 when pred became true within spin_ns, else 0. */
static int rf__ec_spin(rf__ec_pred pred, void *arg, int64_t spin_ns)
{
	for (unsigned i = 0; i < RF__EC_PAUSES; i++) {
		if (pred(arg))
			return 1;
		RF__PAUSE();
	}
	if (spin_ns <= 0)
		return pred(arg);
	int64_t end = rf__now_ns() + spin_ns;
	do {
		if (pred(arg))
			return 1;
		sched_yield();
	} while (rf__now_ns() < end);
	return pred(arg);
}

/* Spin, then sleep until pred holds: announce, re-check, sleep unless the sequence moved (wait.h). */
static void rf__ec_block(rf__ec *ec, rf__ec_pred pred, void *arg, int64_t spin_ns, int bell, void (*sleep)(void *),
			 void *sarg)
{
	if (rf__ec_spin(pred, arg, spin_ns))
		return;
	while (!pred(arg)) {
		atomic_fetch_add_explicit(&ec->sleepers, 1, memory_order_seq_cst);
		if (bell >= 0)
			atomic_fetch_or_explicit(&ec->armed, 1ull << bell, memory_order_seq_cst);
		unsigned key = atomic_load_explicit(&ec->seq, memory_order_seq_cst);
		if (!pred(arg)) {
			if (sleep == NULL)
				syscall(SYS_futex, &ec->seq, FUTEX_WAIT_PRIVATE, key, NULL, NULL, 0);
			else if (atomic_load_explicit(&ec->seq, memory_order_seq_cst) == key)
				sleep(sarg);
		}
		if (bell >= 0)
			atomic_fetch_and_explicit(&ec->armed, ~(1ull << bell), memory_order_relaxed);
		atomic_fetch_sub_explicit(&ec->sleepers, 1, memory_order_relaxed);
	}
}

void rf__ec_wait(rf__ec *ec, rf__ec_pred pred, void *arg, int64_t spin_ns)
{
	rf__ec_block(ec, pred, arg, spin_ns, -1, NULL, NULL);
}

void rf__ec_wait_bell(rf__ec *ec, rf__ec_pred pred, void *arg, int64_t spin_ns, unsigned bell, void (*sleep)(void *),
		      void *sarg)
{
	rf__ec_block(ec, pred, arg, spin_ns, (int)bell, sleep, sarg);
}
