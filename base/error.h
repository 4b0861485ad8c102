/* base/error.h — internal: set the calling thread's rf_errmsg() detail and return the code. */
#ifndef RF_BASE_ERROR_H
#define RF_BASE_ERROR_H

#include "ringfetch.h"

#if defined(__GNUC__)
#define RF__PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#define RF__PRINTF(f, a)
#endif

/* Record a detail sentence for the calling thread and return err unchanged, so that call sites read
 * `return rf__err(RF_EINVAL, "slot_bytes is 0");`. */
int rf__err(int err, const char *fmt, ...) RF__PRINTF(2, 3);

/* The current detail, for callers that prefix it with context ("while creating ...: <detail>"). */
#define rf__errmsg_peek() rf_errmsg()

#endif
