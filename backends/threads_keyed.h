/* backends/threads_keyed.h — keyed copy lanes of the threads backend (backends/threads_keyed.c): one
 * worker per lane serves hint copies in FIFO order; demand copies run inline on the caller. */
#ifndef RF_BACKENDS_THREADS_KEYED_H
#define RF_BACKENDS_THREADS_KEYED_H

#include "runtime/backend.h"

#include <pthread.h>

typedef struct rf__tk rf__tk;

/* Start nlanes lane workers that wait under the policy spin_ns (rf__open_args.wait_spin_ns, resolved:
 * > 0 spin budget, RF__WAIT_SLEEP). RF_OK or RF_ENOMEM (nothing left running). */
int rf__tk_open(unsigned nlanes, int64_t spin_ns, rf__tk **out);
void rf__tk_close(rf__tk *k); /* finishes the queued copies, joins the workers; NULL is a no-op */

/* The backend's k* methods (runtime/backend.h), ctx being the rf__tk. */
int rf__tk_issue(rf__tk *k, const rf__kcopy *req, rf__kticket *out);
int rf__tk_test(rf__tk *k, rf__kticket t);
int rf__tk_cancel(rf__tk *k, rf__kticket t);
int rf__tk_sync(rf__tk *k, rf__kticket t);
int rf__tk_quiesce(rf__tk *k);
unsigned rf__tk_lanes(const rf__tk *k);
/* The worker thread of lane l (threads.c pins it). */
pthread_t rf__tk_thread(const rf__tk *k, unsigned l);

/* Spin until pred(arg, x) holds or budget_ns passed: 256 pauses, then sched_yield; 1 if it holds.
 * Shared with backends/threads.c (the waits between runs). */
int rf__spin_until(int (*pred)(void *arg, uint64_t x), void *arg, uint64_t x, int64_t budget_ns);

#endif
