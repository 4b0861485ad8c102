/* base/error.h — internal: set the calling thread's rf_errmsg() detail and return the code. */
#ifndef RF_BASE_ERROR_H
#define RF_BASE_ERROR_H

#include "ringfetch.h"

#include <stdatomic.h>

#if defined(__GNUC__)
#define RF__PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#define RF__PRINTF(f, a)
#endif

/* Record a detail sentence for the calling thread and return err unchanged, so that call sites read
 * `return rf__err(RF_EINVAL, "slot_bytes is 0");`. */
int rf__err(int err, const char *fmt, ...) RF__PRINTF(2, 3);

/* A run's first failure wins a CAS on *first (0 while none), and a compute's failure (RF_ECALLBACK)
 * replaces a cancel another queue saw first (a callback that destroys its pipeline, then fails): the
 * caller hears of the block. 1 when rc became the run's. */
static inline int rf__first_failure(atomic_int *first, int rc)
{
	int prev = 0;
	return atomic_compare_exchange_strong(first, &prev, rc) ||
	       (rc == RF_ECALLBACK && prev == RF_ECANCELED && atomic_compare_exchange_strong(first, &prev, rc));
}

/* The current detail, for callers that prefix it with context ("while creating ...: <detail>"). */
#define rf__errmsg_peek() rf_errmsg()

#endif
