/* runtime/ktrace.h — the keyed access trace (rf_pipeline_keyed_trace, RINGFETCH_KEYED_TRACE): each RF_OK
 * keyed call as one fixed-size record (the format: ringfetch.h, rf_keyed_trace_kind; docs/serving.md)
 * in a buffer allocated when the trace starts and written with write(2) when it is full and when the
 * trace stops. Adding a record never allocates and never fails: a write error stops the writing, and
 * the stop reports it. Only the thread that owns the pipeline for a keyed call or a run adds records. */
#ifndef RF_RUNTIME_KTRACE_H
#define RF_RUNTIME_KTRACE_H

#include <ringfetch.h>

typedef struct rf__ktrace rf__ktrace;

/* Create (or truncate) the file at path and write the header. RF_OK; RF_EIO (open or the header's
 * write failed, rf_errmsg naming who and the path); RF_ENOMEM. */
int rf__ktrace_open(const char *who, const char *path, unsigned nslots, size_t slot_bytes, rf__ktrace **out);
/* One record: kind is an rf_keyed_trace_kind, slot UINT32_MAX when there is none. */
void rf__ktrace_add(rf__ktrace *t, unsigned kind, uint64_t key, uint64_t bytes, unsigned slot);
/* Write what is buffered, close, free (NULL: RF_OK). RF_OK, or RF_EIO naming who (NULL: no message), the path, errno's
 * text and the records lost when a write (this one or an earlier one) or the close failed. In a child
 * of fork() the parent's buffered records are not written again: only the descriptor is closed. */
int rf__ktrace_close(rf__ktrace *t, const char *who);

/* RINGFETCH_KEYED_TRACE's value: a path in which "%p" is the process id and "%%" a '%'. 0 when it
 * expands (into out, cap bytes, NUL-terminated), -1 when malformed (another '%' sequence) or too long.
 * seq > 0 (the process's seq-th pipeline traced from the variable, from 0) appends ".seq". */
int rf__ktrace_expand(const char *pattern, unsigned seq, char *out, size_t cap);
/* The next pipeline number for RINGFETCH_KEYED_TRACE (0, 1, ...; process-wide, thread-safe). */
unsigned rf__ktrace_next_seq(void);

#endif
