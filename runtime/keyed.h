/* runtime/keyed.h — keyed use of a pipeline's slots (rf_pipeline_prefetch/acquire/release/evict/lookup/
 * keyed_stats): a cache of blocks named by 64-bit keys, LRU, with refcounted holds and bounded hints.
 * It reaches the backend only through the rf__backend_k* wrappers (posted ops); only rf__keyed_create allocates.
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
 * would write a held slot (WAR). hint_bytes bounds hints' bytes outstanding (rf_pipeline_params.
 * hint_bytes, resolved: params, else RINGFETCH_HINT_BYTES, else the file's hint_bytes). 0: hints are
 * not bounded and the slot choice is the documented LRU rule (lowest-numbered empty slot, else the
 * least recently used slot not held; every unheld key in one LRU list, no hint ever dropped for
 * credit); > 0 (at most all the slots): the bounded policy, the hint list and the hints' credit.
 * RF_OK or RF_ENOMEM. */
struct rf__engine;
int rf__keyed_create(struct rf__engine *eng, uint64_t hint_bytes, rf__keyed **out);
/* Wait for every keyed copy, write their slices to the trace file, drop every hold, free. NULL is a
 * no-op. */
void rf__keyed_destroy(rf__keyed *k);

/* A run is about to reuse every slot: RF_EBUSY if a block is held (nothing changes; `who` names the
 * run), else wait for the keyed copies, write their slices to the trace file and forget every key
 * (unacquired hints count as wasted or dropped). RF_OK; RF_EBUSY; the trace's failure or the oracle's
 * RF_EHAZARD (runtime/oracle.h, WAW; nothing forgotten then). */
int rf__keyed_reset(rf__keyed *k, const char *who);

/* Wait for the keyed copies issued since the last write-out and write their slices to the trace file
 * set now (when one is; before the file changes, so that each goes to the file it was traced under):
 * RF_OK, the trace's failure, or the oracle's RF_EHAZARD. */
int rf__keyed_trace_flush(rf__keyed *k);

/* The public calls, arguments not yet checked except p (see ringfetch.h for the contract). */
int rf__keyed_prefetch(rf__keyed *k, uint64_t key, const void *src, size_t bytes, unsigned flags);
int rf__keyed_acquire(rf__keyed *k, uint64_t key, const void *src, size_t bytes, void *stream, unsigned flags,
		      rf_block *out);
int rf__keyed_release(rf__keyed *k, const rf_block *block);
int rf__keyed_evict(rf__keyed *k, uint64_t key);
int rf__keyed_unprefetch(rf__keyed *k, uint64_t key);
int rf__keyed_lookup(const rf__keyed *k, uint64_t key, rf_key_state *state, unsigned *slot);
void rf__keyed_stats(const rf__keyed *k, rf_keyed_stats *out);

/* Hint copies in flight per copy lane before further hints are held back. */
#define RF__KEYED_HINTS_PER_LANE 8u
/* Bounded hints (hint_bytes > 0): wasted hint copies (issued, never acquired) may read at most
 * 1 / RF__KEYED_WASTE_SHARE of the bytes demand copies read, beyond one hint_bytes at the start: a hint
 * is accepted only against credit that acquired hints give back and demand copies earn. 1/32 (3 %):
 * the reads of wrong hints, plus the misses of the blocks they displaced, stay within 5 % of a loop's
 * reads. */
#define RF__KEYED_WASTE_SHARE 32u

#endif
