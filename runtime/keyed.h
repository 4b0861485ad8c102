/* runtime/keyed.h — keyed use of a pipeline's slots (rf_pipeline_prefetch/acquire/release/evict/lookup/
 * keyed_stats): a cache of blocks named by 64-bit keys, LRU, with refcounted holds and bounded hints.
 * It reaches the backend only through the rf__be_k* wrappers; only rf__keyed_create allocates.
 *
 * Threading: one owner thread at a time calls everything except lookup and stats, which any thread may
 * call (lookup takes a short spinlock that the owner takes only while it changes which key is in which
 * slot; stats are relaxed atomics). */
#ifndef RF_RUNTIME_KEYED_H
#define RF_RUNTIME_KEYED_H

#include "runtime/backend.h"

typedef struct rf__keyed rf__keyed;

/* A cache over the engine's slots (its backend's address space) and its backend instance. With its
 * oracle (RINGFETCH_ORACLE=1): RF_EHAZARD when an acquire's host slot differs from src (RAW) or a copy
 * would write a held slot (WAR). RF_OK or RF_ENOMEM. */
struct rf__engine;
int rf__keyed_create(struct rf__engine *eng, rf__keyed **out);
/* Wait for every keyed copy, drop every hold, free. NULL is a no-op. */
void rf__keyed_destroy(rf__keyed *k);

/* Is any block held? (rf_pipeline_run refuses to start.) */
int rf__keyed_held(const rf__keyed *k);
/* A run is about to reuse every slot: wait for the keyed copies, forget every key (unacquired hints
 * count as wasted or dropped). No block may be held. */
void rf__keyed_reset(rf__keyed *k);

/* The public calls, arguments not yet checked except p (see ringfetch.h for the contract). */
int rf__keyed_prefetch(rf__keyed *k, uint64_t key, const void *src, size_t bytes, unsigned flags);
int rf__keyed_acquire(rf__keyed *k, uint64_t key, const void *src, size_t bytes, void *stream, unsigned flags,
		      rf_block *out);
int rf__keyed_release(rf__keyed *k, const rf_block *block);
int rf__keyed_evict(rf__keyed *k, uint64_t key);
int rf__keyed_lookup(const rf__keyed *k, uint64_t key, rf_key_state *state, unsigned *slot);
void rf__keyed_stats(const rf__keyed *k, rf_keyed_stats *out);

/* Hint copies in flight per copy lane before further hints are held back. */
#define RF__KEYED_HINTS_PER_LANE 8u

#endif
