/* bench/replay.h — cache policies replayed over a keyed access trace (ringfetch-replay, the serving
 * benchmarks, tests/test_replay.c). Pure functions of the trace: no clock, no I/O except loading.
 *
 * The model is the keyed cache's (docs/serving.md, "Keyed use"): `slots` slots of one size each; an
 * acquire holds its key in a slot (a miss reads it first), a release lets go of one hold, a held key
 * is never evicted, evict forgets a key, a reset forgets every key. A key's later accesses after an
 * evict or a reset, or with another byte count, are a new block (a new id). Policies:
 *   lru     the least recently used unheld block goes; "used" = acquire, release, or hint (ringfetch's
 *           own rule with hint_bytes unset: replayed at the pipeline's slot count it has ringfetch's
 *           residency exactly; with hint_bytes set ringfetch evicts unacquired hints first and bounds
 *           them, which lru does not model)
 *   slru    segmented LRU: new blocks enter a probation segment; an acquire of a block in probation
 *           promotes it to a protected segment of slots * 4 / 5 (its LRU block demoted back); the
 *           victim is probation's LRU block, else protected's; release and hint refresh within a segment
 *   lfu     fewest acquires since the block came in, ties to the least recently used; a block brought
 *           in by a hint starts at 0 acquires
 *   min     Belady's MIN: the block whose next acquire is farthest (never: first). It is the offline
 *           optimum: no policy, with hints or without, misses fewer acquires at that slot count
 * Hints (prefetch records): with hints on, lru, slru and lfu bring an absent hinted block in (a read,
 * counted in hint_reads; dropped when every slot is held) and refresh a present one as said above;
 * min ignores hints (knowing the future, it needs none). With hints off every policy ignores them. */
#ifndef RPL_REPLAY_H
#define RPL_REPLAY_H

#include <stddef.h>
#include <stdint.h>

typedef enum rpl_op { RPL_ACQUIRE, RPL_RELEASE, RPL_PREFETCH, RPL_EVICT, RPL_RESET } rpl_op;
typedef enum rpl_policy { RPL_LRU, RPL_SLRU, RPL_LFU, RPL_MIN, RPL_NPOLICIES } rpl_policy;

typedef struct rpl_event {
	uint64_t bytes;
	uint32_t id; /* the block: a key between two evicts or resets, at one byte count */
	uint32_t op; /* rpl_op */
} rpl_event;

/* What the trace's record kinds say ringfetch itself did (zero for a trace built with rpl_trace_add). */
typedef struct rpl_recorded {
	uint64_t acquires, hits, misses, hinted; /* hinted: of the misses, acquires of keys with a hint's slot */
	uint64_t miss_bytes, prefetches, prefetch_bytes; /* prefetches: hints that found their key absent */
} rpl_recorded;

typedef struct rpl_trace {
	rpl_event *ev;
	size_t n, cap;
	uint32_t nids;
	unsigned slots;       /* the recording pipeline's (0: unknown) */
	uint64_t slot_bytes;  /* likewise */
	unsigned peak_held;   /* the most keys held at once: fewer slots cannot replay the trace */
	uint64_t duration_ns; /* the last record's time */
	uint64_t trailing;    /* bytes after the last whole record (a partial write), ignored */
	uint64_t keys;        /* distinct keys */
	rpl_recorded rec;
	/* the builder's map from key to its live id, and per id: bytes, holds */
	struct rpl_slot *map;
	size_t mapcap, mapused;
	uint32_t gen;
	uint64_t *idbytes;
	uint32_t *idrefs;
	size_t idcap;
	unsigned held;
	uint32_t *next; /* min: per event, the index of its id's next acquire (computed once, on demand) */
} rpl_trace;

typedef struct rpl_result {
	uint64_t acquires, hits, misses, miss_bytes;
	uint64_t hint_reads, hint_bytes, hints_dropped; /* hints applied: reads they made, hints with no room */
} rpl_result;

/* An empty trace (slots: the recording pipeline's, or 0). */
void rpl_trace_init(rpl_trace *t, unsigned slots);
/* Reserve room for n more events (0, or -1 out of memory). Optional: add grows as needed. */
int rpl_trace_reserve(rpl_trace *t, size_t n);
/* Append one call: 0, or -1 with a reason in err (a release of a key not held, an evict or a reset
 * while a key is held, an acquire with another byte count while held, bytes 0; out of memory). */
int rpl_trace_add(rpl_trace *t, rpl_op op, uint64_t key, uint64_t bytes, char *err, size_t cap);
/* Load a file written by rf_pipeline_keyed_trace (ringfetch.h): 0, or -1 with a reason in err. */
int rpl_trace_load(rpl_trace *t, const char *path, char *err, size_t cap);
void rpl_trace_free(rpl_trace *t);

/* Replay t under one policy with `slots` slots (hints: apply prefetch records, see above). 0; -1 when
 * slots is 0 or below t->peak_held (the trace cannot run there); -2 out of memory. */
int rpl_simulate(rpl_trace *t, rpl_policy pol, unsigned slots, int hints, rpl_result *out);

const char *rpl_policy_name(rpl_policy p);
/* "lru", "slru", "lfu", "min" or "belady": 0 and *out, or -1. */
int rpl_policy_parse(const char *s, rpl_policy *out);

#endif
