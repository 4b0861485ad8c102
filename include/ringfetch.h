/*
 * ringfetch.h — stream blocks through a ring of N slots, the copy of the next blocks overlapping the
 * compute of the current one. Includes <ringfetch/file.h>, <ringfetch/graph.h>, <ringfetch/staging.h>.
 *
 * For every function: int results are 0 (RF_OK) or a negative RF_E* code, with rf_errmsg() naming what
 * was wrong; handles are opaque, destroy(NULL) is a no-op; reserved fields and flags must be zero
 * (RF_EINVAL). The library never prints, never exits, never returns memory the caller must free(), and
 * never changes the affinity, signal mask or scheduling of a thread it did not create.
 */
#ifndef RINGFETCH_H
#define RINGFETCH_H

#include <stddef.h>
#include <stdint.h>
/* RF_HAVE_CUDA, generated at build time; absent in an unconfigured source tree ("no CUDA"). */
#if defined(__has_include)
#if __has_include("ringfetch/config.h")
#include "ringfetch/config.h"
#endif
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ---- export and version ---------------------------------------------------------------------- */

#if defined(RINGFETCH_STATIC)
#define RF_EXTERN
#elif defined(__GNUC__)
#define RF_EXTERN __attribute__((visibility("default")))
#else
#define RF_EXTERN
#endif

#define RF_VERSION_MAJOR 1
#define RF_VERSION_MINOR 0
#define RF_VERSION_PATCH 0
#define RF_VERSION_HEX ((RF_VERSION_MAJOR << 16) | (RF_VERSION_MINOR << 8) | RF_VERSION_PATCH)

/** The RF_VERSION_HEX the library was built with (compare with the header's to catch a mismatch). */
RF_EXTERN unsigned rf_version(void);
/** The version as "MAJOR.MINOR.PATCH"; a static string. */
RF_EXTERN const char *rf_version_string(void);

/* ---- errors ---------------------------------------------------------------------------------- */

/* One table generates the codes, rf_strerror() and rf_err_name(). Values are stable. */
#define RF_ERROR_MAP(XX)                                                                           \
	XX(EINVAL, -1, "invalid argument")                                                         \
	XX(ENOMEM, -2, "out of memory")                                                            \
	XX(ENOSPC, -3, "buffer too small")                                                         \
	XX(ENODEV, -4, "no such backend or device")                                                \
	XX(ENOTSUP, -5, "operation not supported by this backend")                                 \
	XX(EBUSY, -6, "object is busy")                                                            \
	XX(ECANCELED, -7, "operation canceled")                                                    \
	XX(ECALLBACK, -8, "compute callback failed")                                               \
	XX(EBACKEND, -9, "backend failure")                                                        \
	XX(EHAZARD, -10, "data hazard in graph")                                                   \
	XX(ECONFIG, -11, "malformed configuration value")                                          \
	XX(EIO, -12, "I/O error")

typedef enum rf_errno {
	RF_OK = 0,
#define RF__XX_ENUM(name, value, text) RF_##name = (value),
	RF_ERROR_MAP(RF__XX_ENUM)
#undef RF__XX_ENUM
} rf_errno;

/** A static sentence for err ("success" for 0, "unknown error" for a code not in the table). Never NULL. */
RF_EXTERN const char *rf_strerror(int err);
/** The symbolic name of err ("RF_EINVAL", "RF_OK", "RF_UNKNOWN"). Never NULL. */
RF_EXTERN const char *rf_err_name(int err);
/** Detail of the calling thread's most recent failed rf_ call ("" if none yet); successful calls and
 * other threads leave it alone. Valid until this thread's next failing call. Never NULL. */
RF_EXTERN const char *rf_errmsg(void);

/* ---- the ring plan ----------------------------------------------------------------------------- */

/** Largest ring depth accepted anywhere in the library. */
#define RF_MAX_DEPTH 1024u

typedef enum rf_step_kind {
	RF_STEP_PREFETCH, /* start the ring copy of `block` into `slot` (not a hint: rf_pipeline_prefetch) */
	RF_STEP_AWAIT,    /* wait until the copy of `block` has landed */
	RF_STEP_COMPUTE   /* run the compute of `block` over `slot` */
} rf_step_kind;

typedef struct rf_step {
	rf_step_kind kind;
	size_t block;
	unsigned slot; /* always block % depth */
} rf_step;

/**
 * The schedule of a ring of `depth` slots over `nblocks` blocks (a pure function):
 *   PREFETCH b for b = 0 .. min(depth-1, nblocks)-1; then for n in 0 .. nblocks-1:
 *   PREFETCH n+depth-1 (if < nblocks); AWAIT n; COMPUTE n
 * Depth 2 is the double buffer, depth 1 the sequential schedule. Writes 3*nblocks steps and sets *len
 * (len may be NULL); call with cap 0 (steps may be NULL) to learn the size.
 * \return RF_OK;
 *         RF_EINVAL if depth is 0 or > RF_MAX_DEPTH, steps is NULL with cap > 0, or 3*nblocks
 *                   overflows size_t;
 *         RF_ENOSPC if cap < 3*nblocks: nothing written, *len = steps needed (when len is not NULL).
 */
RF_EXTERN int rf_plan_ring(size_t nblocks, unsigned depth, rf_step *steps, size_t cap, size_t *len);

/* ---- the pipeline: what most embedders call --------------------------------------------------- */

typedef struct rf_pipeline rf_pipeline;

/** One block, resident in its slot: what a compute callback is given, and what an acquire holds. */
typedef struct rf_block {
	size_t index;     /* a run: the block's number (0 .. nblocks-1); keyed use: the key (not a block number) */
	unsigned slot;    /* the slot holding it: a run's index % depth; keyed use: the key's slot */
	const void *data; /* slot bytes: host pointer (cpu, threads) or device pointer (cuda) */
	size_t bytes;     /* sizes[index]; keyed use: the acquire's bytes */
	void *stream;     /* cudaStream_t for cuda (enqueue work there and return), NULL otherwise */
} rf_block;

/** The compute of one block: 0 on success, anything else fails the run (RF_ECALLBACK). It must return:
 * a longjmp or C++ exception out of it leaves the pipeline busy for good (docs/api.md). */
typedef int (*rf_compute_fn)(void *user, const rf_block *block);

/** Where block->data points (params.memory), for every use of a pipeline. */
typedef enum rf_memory {
	RF_MEMORY_HOST = 0,  /* host memory: backends "cpu" and "threads"; "auto" picks among them */
	RF_MEMORY_DEVICE = 1 /* device memory: backend "cuda"; "auto" picks it; no usable GPU: RF_ENODEV */
} rf_memory;

/** params.depth_auto (with depth 0): measure and choose the depth, as RINGFETCH_DEPTH=auto does
 * (docs/tuning.md). */
#define RF_DEPTH_AUTO 1u

/** params.locality, on "threads" (others ignore it; docs/tuning.md). CALLER (default): every compute
 * on the caller of rf_pipeline_run. COPIER: each block computed by the thread that copied it, one at a
 * time in block order; the callback then also runs on library threads (no thread-local state). */
#define RF_LOCALITY_CALLER 0u
#define RF_LOCALITY_COPIER 1u

/* ABI (docs/api.md): fields are appended in place of reserved[] words; zero always means "default". */
typedef struct rf_pipeline_params {
	unsigned depth;      /* ring slots; 0 = configured default: RINGFETCH_DEPTH, else 2 */
	size_t slot_bytes;   /* capacity of each slot (> 0) */
	const char *backend; /* "cpu", "threads", "cuda", "auto"; NULL = RINGFETCH_BACKEND, else "auto" */
	int device;          /* CUDA device ordinal (ignored by CPU backends) */
	unsigned flags;      /* must be 0 */
	unsigned copy_queues; /* copy queues, each on a lane of its own; 0 = 1. Block i's copy goes on queue
	                         i % copy_queues, so keeping K copies in flight needs depth >= K + 1 */
	const char *staging;  /* the staging memory the ring lives in (<ringfetch/staging.h>): "auto", "node:N",
	                         "interleave" or "none" (NULL: "auto"); read during rf_pipeline_create only */
	rf_memory memory;     /* RF_MEMORY_HOST (0) or RF_MEMORY_DEVICE; never read from the environment or
	                         the config file */
	unsigned depth_auto;  /* 0, or RF_DEPTH_AUTO (depth must be 0 then): choose the depth by measuring */
	const char *wait;     /* how library threads wait (docs/serving.md): "auto", "sleep", "spin:N" (N us,
	                         0..10000000); NULL = RINGFETCH_WAIT, else the file's `wait`, else "auto" */
	uint64_t locality;    /* RF_LOCALITY_CALLER (0) or RF_LOCALITY_COPIER (above); never read from the
	                         environment or the config file (it changes which thread calls compute) */
	uint64_t hint_bytes;  /* keyed use: bound on hints' bytes outstanding (hinted, not yet acquired);
	                         0 = RINGFETCH_HINT_BYTES, else the file's `hint_bytes`, else no bound (the
	                         keyed section's plain slot rule: lowest-numbered empty slot, else least
	                         recently used not held; no hint dropped); more than all the slots means
	                         all of them */
	uint64_t reserved[6]; /* must be zero */
} rf_pipeline_params;

/**
 * Create a pipeline: resolve the settings (params > RINGFETCH_* > the file named by RINGFETCH_CONFIG >
 * defaults; docs/deployment.md), allocate the ring (placed as params.staging says) and the backend's
 * lanes (threads, streams). Runs and keyed calls then allocate nothing in steady state (a traced run
 * and the first use of a file excepted). "auto" is "threads" (else "cpu") for host, "cuda" for device memory.
 *
 * \return RF_OK and *out;
 *         RF_EINVAL for NULL params or out, slot_bytes 0, depth > RF_MAX_DEPTH, depth_auto other
 *                   than 0 and RF_DEPTH_AUTO or with a depth, flags or a reserved word != 0,
 *                   copy_queues >= RF_MAX_QUEUES, copy_queues > depth - 1 when copy_queues > 1,
 *                   depth * slot_bytes overflowing, a malformed staging policy or one naming a NUMA
 *                   node this process cannot use, a malformed wait policy, memory other than
 *                   RF_MEMORY_HOST / RF_MEMORY_DEVICE, a backend of the other kind named in params;
 *         RF_ENODEV for an unknown backend name, or a backend not usable here (rf_errmsg says why),
 *                   RF_MEMORY_DEVICE without a usable GPU;
 *         RF_ECONFIG for a malformed configured value (rf_errmsg names the variable, or file:line, and
 *                    the value), a configured backend of the other kind, a ring over the configured
 *                    memory budget;
 *         RF_EBACKEND if the hwloc topology (needed to place the ring) cannot be loaded;
 *         RF_ENOMEM when memory runs out. On failure *out is untouched and nothing is leaked.
 */
RF_EXTERN int rf_pipeline_create(const rf_pipeline_params *params, rf_pipeline **out);

/**
 * Stream blocks 0 .. nblocks-1 through the ring: block i (sizes[i] bytes at srcs[i]) is copied into
 * slot i % depth, then compute(user, &block) is called for it, in block order, exactly once each, on
 * the calling thread (cuda: it only enqueues on block->stream). When compute runs, block->data holds
 * exactly the bytes of srcs[i], and no copy writes that slot until it has returned. Returns when all
 * work has finished and is visible to the caller; srcs and sizes are read during the call only.
 *
 * \return RF_OK (also for nblocks 0, where nothing else is looked at);
 *         RF_EINVAL, before any work, for NULL p, srcs, sizes or compute with nblocks > 0, a size over
 *                   slot_bytes, a NULL src with a non-zero size, a src that overlaps the pipeline's own
 *                   ring (CPU backends; e.g. block->data of an earlier run), or nblocks > INT64_MAX / 8
 *                   (rf_errmsg names the block);
 *         RF_EBUSY if the pipeline is already running (another thread, or a callback re-entering);
 *         RF_ECALLBACK if compute returned non-zero at block k: no compute runs after k, copies in
 *                   flight are drained, rf_errmsg names k and the value; the pipeline stays usable;
 *         RF_ECANCELED if rf_pipeline_cancel (or rf_pipeline_destroy from a callback) stopped the run,
 *                   also a cancel left pending before the run started (no compute is called then);
 *         RF_ENOMEM if tracing is on (rf_pipeline_trace) and its event arrays cannot be allocated;
 *         RF_EBACKEND if the backend failed (rf_errmsg says how), or in a child of fork() for a pipeline
 *                   of the parent whose backend has threads ("cpu" pipelines keep working there).
 */
RF_EXTERN int rf_pipeline_run(rf_pipeline *p, size_t nblocks, const void *const *srcs,
                              const size_t *sizes, rf_compute_fn compute, void *user);

/** The ring depth runs use now (1 .. RF_MAX_DEPTH); 0 for NULL. With depth = auto it changes over the
 * first runs as the pipeline measures (docs/tuning.md). */
RF_EXTERN unsigned rf_pipeline_depth(const rf_pipeline *p);
/** The resolved backend name, e.g. "cpu" (never "auto"); a static string. "" for NULL. */
RF_EXTERN const char *rf_pipeline_backend(const rf_pipeline *p);
/** Slot capacity in bytes; 0 for NULL. */
RF_EXTERN size_t rf_pipeline_slot_bytes(const rf_pipeline *p);
/** Copy queues the pipeline was created with (>= 1); 0 for NULL. */
RF_EXTERN unsigned rf_pipeline_copy_queues(const rf_pipeline *p);
/** One line on how the pipeline runs (queues, threads, cores, what depth = auto chose, how files are
 * read now: docs/files.md). Any thread, any time; a returned string never changes and stays valid until
 * the pipeline is destroyed (a later call may return a newer line). "" for NULL. */
RF_EXTERN const char *rf_pipeline_describe(const rf_pipeline *p);

/** Time spent by one queue in the last run (collected only with rf_pipeline_collect_stats on). */
typedef struct rf_queue_stats {
	uint64_t busy_ns;  /* inside copies and computes */
	uint64_t wait_ns;  /* waiting for another queue */
	uint64_t copies, computes;
} rf_queue_stats;

/** How many queues rf_stats reports: every queue a pipeline or exec can have (RF_MAX_QUEUES). */
#define RF_STATS_QUEUES 64u

/** rf_stats.schedule: how a run placed its copies and computes. */
#define RF_SCHEDULE_RING 0u   /* copies on the copy queues' lanes, computes on the caller */
#define RF_SCHEDULE_INLINE 1u /* every copy and compute on the caller, nothing overlapping (docs/tuning.md) */
#define RF_SCHEDULE_LOCAL 2u  /* RF_LOCALITY_COPIER: each block copied and computed by one thread */

/** What the last finished run of a pipeline did, and totals since create (rf_pipeline_stats). */
typedef struct rf_stats {
	size_t blocks;     /* nblocks of the last finished run that started work, whatever its result */
	uint64_t bytes;    /* sum of its sizes[] */
	uint64_t wall_ns;  /* from the start of its work to its return */
	int timed;         /* 1 when the fields below were collected (rf_pipeline_collect_stats) */
	unsigned nqueues;  /* entries of queue[] in use: the program's queues */
	rf_queue_stats queue[RF_STATS_QUEUES];
	uint64_t copy_ns;  /* busy time of every copy, all queues together */
	/* Exposed transfer: wall time with no compute running. Overlap efficiency: 1 - exposed / copy_ns
	 * clipped to [0, 1] (0 on "cpu", near 1 when copies hide entirely). */
	uint64_t exposed_ns;
	double overlap_efficiency;
	/* Totals since create, over every finished run that started work (whatever its result). */
	uint64_t runs;             /* how many */
	uint64_t total_blocks;     /* sum of their blocks */
	uint64_t total_bytes;      /* sum of their bytes */
	uint64_t total_wall_ns;    /* sum of their wall_ns */
	uint64_t timed_runs;       /* how many of them collected times (rf_pipeline_collect_stats) */
	uint64_t total_exposed_ns; /* sum of exposed_ns over the timed runs */
	uint64_t total_wait_ns;    /* sum of every queue's wait_ns over the timed runs */
	/* Blocks read from files (<ringfetch/file.h>): bytes of the last run's file blocks, and the sum. */
	uint64_t file_bytes;
	uint64_t total_file_bytes;
	/* The last run's RF_SCHEDULE_*; of `runs`, how many ran inline, how many with the cache handoff. */
	uint64_t schedule;
	uint64_t inline_runs;
	uint64_t handoff_runs;
	/* The caller's reads of file blocks in file order ahead of the slots (docs/files.md, "Read ahead"):
	 * the bytes read ahead at once in the last run (0: none; depth = auto chooses them online), and of
	 * the file blocks since create, how many were served from what was read ahead. */
	uint64_t ahead_bytes;
	uint64_t total_ahead_blocks;
	uint64_t reserved[9];      /* written as 0; fields are appended here within a major version */
} rf_stats;

/** Collect per-queue times in every following run (on != 0; two clock reads per copy, compute and
 * wait) or stop (0). \return RF_OK; RF_EINVAL (p NULL); RF_EBUSY (the pipeline is running). */
RF_EXTERN int rf_pipeline_collect_stats(rf_pipeline *p, int on);

/** p's last finished run and the totals since create (all zero before the first run): one consistent
 * snapshot, published when a run ends. Any thread, any time; never blocks on a run.
 * \return RF_OK; RF_EINVAL (p or out NULL). */
RF_EXTERN int rf_pipeline_stats(const rf_pipeline *p, rf_stats *out);

/**
 * Stop the run in progress on p (no compute starts after the one running; copies in flight finish),
 * or else the next run to start: it returns RF_ECANCELED. The cancel stays pending until exactly one
 * run returns RF_ECANCELED for it (later cancels merge into it); one arriving after a run's last
 * compute started waits for the next run. Any thread, any time, also from a compute callback of p.
 * \return RF_OK; RF_EINVAL (p NULL).
 */
RF_EXTERN int rf_pipeline_cancel(rf_pipeline *p);

/** Withdraw a pending cancel that no run has consumed (none pending: nothing happens). Call it from the
 * thread that runs p, between runs. \return RF_OK; RF_EINVAL (p NULL); RF_EBUSY (a run is in progress). */
RF_EXTERN int rf_pipeline_cancel_clear(rf_pipeline *p);

/**
 * Append a Chrome trace of every following run to the file at path (copied; NULL stops), and of the
 * keyed copies (one slice each, by key), written by the next run, by destroy at the latest, or by a
 * keyed call every 4096 copies. Each write is one under flock(2) (pipelines, threads and processes may
 * share a path). Only a blank
 * file or a JSON array of objects is appended to; any other file is left untouched and the run returns
 * RF_EBACKEND, as it does when a write fails half-way (the file is put back as it was). docs/api.md.
 * \return RF_OK; RF_EINVAL (p NULL, path ""); RF_EBUSY (the pipeline is running); RF_ENOMEM.
 */
RF_EXTERN int rf_pipeline_trace(rf_pipeline *p, const char *path);

/**
 * Release the pipeline; NULL is a no-op. Nothing may use p during or after it (the "any thread" calls
 * included). From one of its own compute callbacks the release is deferred until that run returns
 * RF_ECANCELED. In a child of fork() it returns without waiting for the parent's worker threads.
 */
RF_EXTERN void rf_pipeline_destroy(rf_pipeline *p);

/* ---- keyed use: serving loops (docs/serving.md) --------------------------------------------------
 *
 * The ring's slots as an LRU cache of blocks named by the caller's 64-bit keys, copied on the runs' lanes.
 *  - One thread at a time per pipeline, like runs; keyed_stats, lookup and cancel from any thread
 *    (lookup reports ABSENT during a run). Other keyed calls from a compute callback: RF_EBUSY. NULL p
 *    or out/state: RF_EINVAL everywhere. A failed call changes nothing (slots, LRU order, stats, *out).
 *  - The bytes at src must stay valid and unchanged until rf_pipeline_evict(key) or destroy returned
 *    (on cuda a copy may read them after acquire returned). A hit neither reads nor compares src.
 *  - rf_pipeline_run with a block held: RF_EBUSY; a run that starts work leaves no key resident.
 *    Destroy drops the holds (cuda: after a device synchronise).
 *  - Every RAW and WAR rule of runs holds; no keyed call allocates after create. CUDA queries run in
 *    thread-local capture mode. Slot choice and hints' accounting: docs/serving.md.
 *  - Slot choice for a new key: the lowest-numbered empty slot, else the least recently used slot not
 *    held; "used" = its last acquire, release or prefetch. A prefetch of an absent key gets its slot
 *    chosen now, as an acquire's miss would (RF_ENOSPC only when every slot is held).
 *  - An acquire never waits behind a hint copy that has not started (it overtakes it).
 *  - With params.hint_bytes (or RINGFETCH_HINT_BYTES, or the file's hint_bytes) set, hints are
 *    bounded, and the two rules above change for them (docs/serving.md, "Hints' bound"; for a loop
 *    whose hints may be wrong). Slot choice: the lowest-numbered empty slot; else, for an acquire's
 *    miss, the least recently used slot whose key no acquire has taken since its hint (an unacquired
 *    hint: one whose copy is being made is passed over while another slot is free to take), else the
 *    least recently used slot not held. A hint takes the least recently used acquired slot not held
 *    (it never displaces another unacquired hint while both fit in hint_bytes; none such: as a miss),
 *    and when it would not fit, the oldest unacquired hint's slot (even with empty slots). Hints'
 *    bytes outstanding (held back, in flight or landed, not yet acquired) stay within hint_bytes. A
 *    hint is also dropped at once (RF_OK; counted in prefetches and dropped, no slot taken) when
 *    hints have been wasted: the bytes of hint copies wasted stay within one hint_bytes plus 1/32 of
 *    the bytes acquires copied. So wrong hints cost little; right ones, each acquired, are not held
 *    back by it.
 */

/**
 * A hint that `key` (bytes at src) will be acquired soon; returns without waiting (except on "cpu").
 * An absent key gets its slot now and its copy now or once its lane frees (or, with hint_bytes set,
 * when wasted hints have used up the hints' credit, is dropped at once: RF_OK, see above); a present
 * one only its use refreshed.
 * \return RF_OK;
 *         RF_EINVAL (p or src NULL, bytes 0 or > slot_bytes, a different bytes count than the resident
 *                   or incoming copy of key, flags != 0);
 *         RF_ENOSPC (every slot is held: the hint is dropped, nothing waits);
 *         RF_EBUSY (a run is in progress, or called from a compute callback); RF_EBACKEND.
 */
RF_EXTERN int rf_pipeline_prefetch(rf_pipeline *p, uint64_t key, const void *src, size_t bytes, unsigned flags);

/**
 * Hold `key` in its slot, copying it first unless it is resident or on its way. *out: index = the key,
 * slot = the slot holding it, data (fixed per slot), bytes, stream. CPU backends: returns when the
 * bytes are in the slot; stream must be NULL. cuda: returns without a host wait; only work ordered
 * after this call on `stream` (a cudaStream_t of params.device, NULL = legacy default) may read
 * out->data. A held key acquired again is held twice (released twice). A held slot is never refilled.
 * \return RF_OK;
 *         RF_EINVAL (p, src or out NULL, bytes 0 or > slot_bytes, a different bytes count than the
 *                   resident or incoming copy, non-NULL stream on a CPU backend, flags != 0);
 *         RF_ENOSPC (every slot is held by other keys);
 *         RF_EBUSY (a run is in progress, or called from a compute callback);
 *         RF_ENOTSUP (a stream being captured);
 *         RF_EBACKEND (also every call after a sticky CUDA error).
 */
RF_EXTERN int rf_pipeline_acquire(rf_pipeline *p, uint64_t key, const void *src, size_t bytes, void *stream,
                                  unsigned flags, rf_block *out);

/**
 * Let go of one hold of the key block->index, which must be held in block->slot (RF_EINVAL otherwise; data and
 * bytes are not checked). It stays resident until its slot is chosen for another key. cuda: the slot's
 * next copy waits, on the device, for the work on block->stream before this call.
 * \return RF_OK; RF_EINVAL.
 */
RF_EXTERN int rf_pipeline_release(rf_pipeline *p, const rf_block *block);

/**
 * Withdraw the hint of `key` (the caller no longer expects to acquire it). An unacquired hint whose
 * copy has not started is dropped: no copy, the key absent (counted as dropped); one whose copy started
 * or landed stays resident, first in line for eviction (wasted if it then leaves unacquired). A key
 * that is absent, held, or acquired since its hint: nothing changes. Never waits.
 * \return RF_OK; RF_EINVAL (p NULL); RF_EBUSY (a run is in progress, or called from a compute callback).
 */
RF_EXTERN int rf_pipeline_unprefetch(rf_pipeline *p, uint64_t key);

/** Forget key (its source bytes will change); returns when no copy reads that source any more.
 * \return RF_OK, also when absent; RF_EINVAL (p NULL); RF_EBUSY while it is held or a run is on. */
RF_EXTERN int rf_pipeline_evict(rf_pipeline *p, uint64_t key);

typedef enum rf_key_state { RF_KEY_ABSENT = 0, RF_KEY_COPYING = 1, RF_KEY_READY = 2 } rf_key_state;

/** Where key stands, without waiting or changing LRU order or stats (slot may be NULL; set for COPYING
 * and READY). Any thread, until rf_pipeline_destroy begins. \return RF_OK; RF_EINVAL (p or state NULL). */
RF_EXTERN int rf_pipeline_lookup(const rf_pipeline *p, uint64_t key, rf_key_state *state, unsigned *slot);

typedef struct rf_keyed_stats {
	uint64_t acquires;     /* RF_OK acquires, re-acquires of held keys included */
	uint64_t hits;         /* of those, the acquire issued no copy */
	uint64_t late;         /* of the hits, the key's copy had not finished at the acquire */
	uint64_t prefetches;   /* RF_OK prefetches that found the key absent */
	uint64_t dropped;      /* RF_OK hints never copied (held back, then dropped or overtaken) */
	uint64_t wasted;       /* hint copies issued whose key left its slot before any acquire */
	uint64_t bytes_copied; /* bytes of keyed copies issued (enqueued, on cuda), since create */
	uint64_t reserved[9];  /* written as 0 */
} rf_keyed_stats;

/** The keyed counters since create; any thread until rf_pipeline_destroy begins. Each field is read
 * atomically, together not one snapshot. \return RF_OK; RF_EINVAL (p or out NULL). */
RF_EXTERN int rf_pipeline_keyed_stats(const rf_pipeline *p, rf_keyed_stats *out);

/* A keyed access trace (docs/serving.md, "Access traces"): a 32-byte header, then one 32-byte record per
 * RF_OK keyed call, host byte order (little-endian on every supported machine):
 *   header: char magic[8] = "RFKTRACE"; uint32_t version = 1; uint32_t record_bytes = 32;
 *           uint32_t slots (the pipeline's); uint32_t flags = 0; uint64_t slot_bytes;
 *   record: uint64_t key; uint64_t bytes; uint64_t ns (CLOCK_MONOTONIC since the trace started);
 *           uint32_t kind (below); uint32_t slot (UINT32_MAX: none). key, bytes: the call's (release:
 *           the block's index, its key, and bytes; reset: 0). ringfetch-replay reads it. */
typedef enum rf_keyed_trace_kind {
	RF_KTRACE_ACQUIRE_HIT = 1,      /* an acquire that issued no copy (late hits included) */
	RF_KTRACE_ACQUIRE_MISS = 2,     /* an acquire that copied a key that was absent */
	RF_KTRACE_ACQUIRE_HINTED = 3,   /* an acquire that copied a key whose hint had a slot but no copy
	                                   made yet (held back or overtaken): a miss, the key not absent */
	RF_KTRACE_PREFETCH = 4,         /* a hint that found the key absent (its slot chosen now; slot
	                                   UINT32_MAX: dropped at once by the hints' credit) */
	RF_KTRACE_PREFETCH_PRESENT = 5, /* a hint that found the key resident, held or on its way */
	RF_KTRACE_RELEASE = 6,
	RF_KTRACE_EVICT = 7,            /* also of an absent key */
	RF_KTRACE_RESET = 8             /* a run started work: every key left its slot */
} rf_keyed_trace_kind;

/**
 * Record p's keyed calls to a file (path non-NULL: start; NULL: stop). Start creates or truncates path
 * (mode 0666 less the umask; a FIFO without a reader is RF_EIO, never a wait) and allocates a 64 KiB
 * buffer here; from then on every RF_OK acquire, prefetch, release and evict, and every run that
 * empties the cache, adds a record without allocating (a failed call adds none), and the buffer is
 * written with write(2), on the thread of the keyed call that fills it, every 2048 records. Stop (or
 * rf_pipeline_destroy) writes the rest and closes the file. A write that fails (the disk full, EIO)
 * fails no keyed call: the trace stops writing, later records are lost, and the stop returns RF_EIO
 * saying why and how many records were lost (the file then holds the header and the records up to
 * the failure, the last one possibly cut short); destroy cannot report it: stop first to know. Off, a
 * keyed call pays one predictable branch. Keys resident when a trace starts are not recorded: start
 * it before the first keyed call (or after a run) for a replay of the cache from empty. The thread
 * rules of keyed calls apply (one thread at a time, not from a compute callback).
 * RINGFETCH_KEYED_TRACE=path starts one at rf_pipeline_create for each pipeline (docs/serving.md).
 * \return RF_OK (stop: also when none was on);
 *         RF_EINVAL (p NULL, path "", flags != 0);
 *         RF_EBUSY (start while a trace is on; a run or keyed call in progress; from a compute callback);
 *         RF_ENOTSUP (the backend has no keyed use);
 *         RF_EIO (start: the file cannot be created or its header written; stop: a write or the close
 *                 failed; the trace is stopped either way); RF_ENOMEM.
 */
RF_EXTERN int rf_pipeline_keyed_trace(rf_pipeline *p, const char *path, unsigned flags);

#ifdef __cplusplus
}
#endif

#include "ringfetch/file.h"
#include "ringfetch/graph.h"
#include "ringfetch/staging.h"

#endif /* RINGFETCH_H */
