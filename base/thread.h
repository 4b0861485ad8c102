/* base/thread.h — what every thread the library starts does first. */
#ifndef RF_BASE_THREAD_H
#define RF_BASE_THREAD_H

#include <pthread.h>
#include <signal.h>

/* Block every signal on the calling thread (one of ours): process-directed signals are the
 * application's business, and must never be delivered on a worker, a copy thread or a dispatcher. */
static inline void rf__thread_block_signals(void)
{
	sigset_t all;
	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, NULL);
}

#endif
