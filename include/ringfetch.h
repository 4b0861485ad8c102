/*
 * ringfetch.h — stream blocks of bytes through a ring of N staging slots so that the transfer of the
 * next blocks overlaps the compute of the current one (the double buffer, generalised to any depth).
 *
 * This umbrella header carries the core contract: errors, the ring plan, the pipeline and the version.
 * The job-graph API (build, validate, lower, instantiate custom graphs) is in <ringfetch/graph.h>,
 * staging memory and ring placement in <ringfetch/staging.h>; this header includes both.
 *
 * Conventions, for every function below:
 *  - int-returning functions return 0 (RF_OK) on success or a negative RF_E* code; rf_errmsg() then
 *    holds a sentence naming what was wrong (which argument, block, node or variable).
 *  - Handles are opaque; every create has a destroy; destroy(NULL) is a no-op.
 *  - Reserved fields and flags must be zero; anything else is RF_EINVAL.
 *  - The library never prints, never calls exit(), and never returns memory the caller must free().
 *  - It never changes the affinity, signal mask or scheduling of a thread it did not create.
 */
#ifndef RINGFETCH_H
#define RINGFETCH_H

#include <stddef.h>
#include <stdint.h>
/* How the library was built (RF_HAVE_CUDA): generated at build time and installed with the headers;
 * absent from a source tree that was never configured, which then reads as "no CUDA". */
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
/**
 * Detail of the calling thread's most recent failed rf_ call ("" if none failed yet). Thread-local: a
 * failure on another thread does not change it, nor does a successful call. The pointer is valid until
 * this thread's next failing rf_ call; copy it to keep it. Never NULL.
 */
RF_EXTERN const char *rf_errmsg(void);

/* ---- the ring plan ----------------------------------------------------------------------------- */

/** Largest ring depth accepted anywhere in the library. */
#define RF_MAX_DEPTH 1024u

typedef enum rf_step_kind {
	RF_STEP_PREFETCH, /* start copying `block` into `slot` */
	RF_STEP_AWAIT,    /* wait until the copy of `block` has landed */
	RF_STEP_COMPUTE   /* run the compute of `block` over `slot` */
} rf_step_kind;

typedef struct rf_step {
	rf_step_kind kind;
	size_t block;
	unsigned slot; /* always block % depth */
} rf_step;

/**
 * The schedule of a ring of `depth` slots over `nblocks` blocks: a pure function of its two inputs.
 *
 *   prime:  PREFETCH b for b = 0 .. min(depth-1, nblocks)-1
 *   for n in 0 .. nblocks-1:
 *       PREFETCH n+depth-1 (if < nblocks);  AWAIT n;  COMPUTE n
 *
 * so the lookahead is depth-1 blocks: depth 2 is the classic double buffer, depth 1 the sequential,
 * no-overlap schedule. Writes the 3*nblocks steps into steps[0 .. 3*nblocks) and sets *len to
 * 3*nblocks (len may be NULL).
 *
 * Two-call sizing: call with cap 0 (steps may be NULL) to learn the size.
 * \return RF_OK;
 *         RF_EINVAL if depth is 0 or > RF_MAX_DEPTH, steps is NULL with cap > 0, or 3*nblocks
 *                   overflows size_t;
 *         RF_ENOSPC if cap < 3*nblocks: nothing written, *len = steps needed (when len is not NULL).
 */
RF_EXTERN int rf_plan_ring(size_t nblocks, unsigned depth, rf_step *steps, size_t cap, size_t *len);

/* ---- the pipeline: what most embedders call --------------------------------------------------- */

typedef struct rf_pipeline rf_pipeline;

/** What a compute callback is given: one block, resident in its slot. */
typedef struct rf_block {
	size_t index;     /* block number in this run */
	unsigned slot;    /* index % depth */
	const void *data; /* slot bytes: host pointer (cpu, threads) or device pointer (cuda) */
	size_t bytes;     /* sizes[index] */
	void *stream;     /* cudaStream_t for cuda (enqueue work there and return), NULL otherwise */
} rf_block;

/** The compute of one block. Return 0 on success; any other value fails the run (RF_ECALLBACK).
 * It must return: leaving it by longjmp, or by a C++ exception thrown through the library's C frames,
 * is not allowed — the pipeline stays marked running (every later call RF_EBUSY) and destroy leaks it. */
typedef int (*rf_compute_fn)(void *user, const rf_block *block);

/** Where block->data points (params.memory), for every use of a pipeline. */
typedef enum rf_memory {
	RF_MEMORY_HOST = 0,  /* host memory: backends "cpu" and "threads"; "auto" picks among them */
	RF_MEMORY_DEVICE = 1 /* device memory: backend "cuda"; "auto" picks it; no usable GPU: RF_ENODEV */
} rf_memory;

/** params.depth_auto = RF_DEPTH_AUTO (with params.depth 0): measure and choose the depth
 * (docs/tuning.md), as "auto" in RINGFETCH_DEPTH or the config file does. A field of its own, so that
 * every depth over RF_MAX_DEPTH stays RF_EINVAL. */
#define RF_DEPTH_AUTO 1u

/** params.locality: where a threads pipeline's computes may run (docs/tuning.md, "Locality").
 * RF_LOCALITY_CALLER (0, the default): every compute on the thread that called rf_pipeline_run.
 * RF_LOCALITY_COPIER: each block's compute on the thread that copied it — the caller and the copy
 * lanes take blocks in turn, each copying its block and then computing it — so that a compute reads
 * what its own core has just written (as StarPU schedules a ring). Computes still run one at a time,
 * in block order, each after the previous one returned, and every guarantee of rf_pipeline_run holds;
 * but the callback then also runs on the library's threads: it must not rely on thread-local state or
 * thread-affine APIs. The cost: a thread hop between consecutive computes. "cpu" (everything on the
 * caller) and "cuda" (computes only enqueue) ignore it. */
#define RF_LOCALITY_CALLER 0u
#define RF_LOCALITY_COPIER 1u

/* ABI: fields are only ever appended, by taking the place of reserved[] words (docs/api.md, "ABI
 * policy"); the struct's size never changes within a major version. Zero always means "default". */
typedef struct rf_pipeline_params {
	unsigned depth;      /* ring slots; 0 = configured default: RINGFETCH_DEPTH, else 2 */
	size_t slot_bytes;   /* capacity of each slot (> 0) */
	const char *backend; /* "cpu", "threads", "cuda", "auto"; NULL = RINGFETCH_BACKEND, else "auto" */
	int device;          /* CUDA device ordinal (ignored by CPU backends) */
	unsigned flags;      /* must be 0 */
	unsigned copy_queues; /* copy lanes; 0 = 1. Block i's copy goes on lane i % copy_queues, so keeping
	                         K copies in flight needs depth >= K + 1 */
	const char *staging;  /* where the ring lives (<ringfetch/staging.h>): "auto" (NULL), "node:N",
	                         "interleave" or "none"; read during rf_pipeline_create only */
	rf_memory memory;     /* RF_MEMORY_HOST (0) or RF_MEMORY_DEVICE; never read from the environment or
	                         the config file */
	unsigned depth_auto;  /* 0, or RF_DEPTH_AUTO (depth must be 0 then): choose the depth by measuring */
	const char *wait;     /* how the threads backend's threads wait (docs/serving.md): "auto" (spin up to
	                         2 ms after work, then sleep; a lane whose work waited for file reads sleeps
	                         at once), "sleep", or "spin:N" (N us, 0..10000000);
	                         NULL = RINGFETCH_WAIT, else the file's `wait`, else "auto" */
	uint64_t locality;    /* RF_LOCALITY_CALLER (0) or RF_LOCALITY_COPIER (above); never read from the
	                         environment or the config file (it changes which thread calls compute) */
	uint64_t reserved[7]; /* must be zero */
} rf_pipeline_params;

/**
 * Create a pipeline: resolve depth, backend and the other settings, allocate depth * slot_bytes of ring
 * memory and the backend's queues and threads. Runs and keyed calls then allocate nothing in steady
 * state (a traced run, and the first run or keyed call naming a file, set up what they need).
 *
 * Settings: explicit params > environment (RINGFETCH_*) > the INI file named by RINGFETCH_CONFIG >
 * defaults; a value left at 0 / NULL in params is taken from the configuration (docs/deployment.md
 * lists every variable and key; depth = auto: docs/tuning.md; the hazard oracle, RINGFETCH_ORACLE=1:
 * docs/api.md). Backends: "cpu" runs everything on the caller's thread (no overlap); "threads" runs
 * computes on the caller's thread and each copy queue on a worker thread of the pipeline; "cuda"
 * streams into device memory (<ringfetch/cuda.h>). params.memory, never the machine, picks the kind:
 * "auto" is "threads" (else "cpu") for RF_MEMORY_HOST and "cuda" for RF_MEMORY_DEVICE. CPU rings are
 * NUMA-placed by the staging layer as params.staging says (rf_pipeline_placement tells where, or why
 * not).
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
 * slot i % depth, then compute(user, &block) is called for it, in block order, exactly once each.
 * When compute runs, block->data holds exactly the sizes[i] bytes of srcs[i] and no copy writes that
 * slot until compute has returned. Returns when all work has finished; the caller may then reuse or
 * free srcs. srcs and sizes are read during the call only.
 *
 * Threads: computes run on the calling thread with every backend; copies run on the calling thread
 * ("cpu"), on the pipeline's copy workers ("threads"), or on CUDA streams ("cuda": the callback only
 * enqueues its kernels on block->stream, see <ringfetch/cuda.h>). Everything the copies and callbacks
 * wrote (or enqueued) is done and visible to the caller when this returns.
 *
 * \return RF_OK (also for nblocks 0, where nothing else is looked at);
 *         RF_EINVAL, before any work, for NULL p, srcs, sizes or compute with nblocks > 0, a size over
 *                   slot_bytes, a NULL src with a non-zero size, a src that overlaps the pipeline's own
 *                   ring (e.g. block->data of an earlier run: copy it out first; CPU backends — a
 *                   device ring is never a host source), or nblocks > INT64_MAX / 8 (the one
 *                   block limit of <ringfetch/graph.h>) (rf_errmsg names the block);
 *         RF_EBUSY if the pipeline is already running (another thread, or a callback re-entering);
 *         RF_ECALLBACK if compute returned non-zero at block k: no compute runs after k, copies in
 *                   flight are drained, rf_errmsg names k and the value; the pipeline stays usable;
 *         RF_ECANCELED if rf_pipeline_cancel (or rf_pipeline_destroy from a callback) stopped the run,
 *                   also a cancel left pending before the run started (no compute is called then);
 *         RF_ENOMEM if tracing is on (rf_pipeline_trace) and its event arrays cannot be allocated;
 *         RF_EBACKEND if the backend failed (rf_errmsg says how), or, in a child of fork(), for a
 *                   pipeline created in the parent whose backend has worker threads ("threads": they do
 *                   not survive fork(); "cpu" pipelines keep working in the child).
 */
RF_EXTERN int rf_pipeline_run(rf_pipeline *p, size_t nblocks, const void *const *srcs,
                              const size_t *sizes, rf_compute_fn compute, void *user);

/** The ring depth (1 .. RF_MAX_DEPTH): the one runs use now; 0 for NULL. With depth = auto: the starting
 * depth until the first run has finished, then the rule's choice d; the next 9 successful runs try d,
 * 2d and 4d (within the slots) in turn, and from then on the fastest of them is kept (docs/tuning.md).
 * On cuda the first 9 successful runs try the ladder lo, 2lo, 4lo (lo = the starting depth) instead. */
RF_EXTERN unsigned rf_pipeline_depth(const rf_pipeline *p);
/** The resolved backend name, e.g. "cpu" (never "auto"); a static string. "" for NULL. */
RF_EXTERN const char *rf_pipeline_backend(const rf_pipeline *p);
/** Slot capacity in bytes; 0 for NULL. */
RF_EXTERN size_t rf_pipeline_slot_bytes(const rf_pipeline *p);
/** Copy lanes the pipeline was created with (>= 1); 0 for NULL. */
RF_EXTERN unsigned rf_pipeline_copy_queues(const rf_pipeline *p);
/**
 * One line on how the pipeline runs: its backend's queues, worker threads, and the core each worker is
 * pinned to — or why it is not (one core, hwloc failed, binding refused); with depth = auto, what it
 * measured and chose. Any thread, any time: the string a call returns never changes (a later note
 * makes a new string, returned by later calls). Valid until the pipeline is destroyed; "" for NULL.
 */
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
#define RF_SCHEDULE_RING 0u   /* copies on the copy lanes (or CUDA streams), computes on the caller */
#define RF_SCHEDULE_INLINE 1u /* every copy and compute on the caller, in block order, nothing overlapping:
                                 "cpu", and "threads" at depth 1, with overlap = off, or when its own
                                 runs showed that overlapping did not pay (docs/tuning.md) */
#define RF_SCHEDULE_LOCAL 2u  /* RF_LOCALITY_COPIER on "threads": each block copied and computed by one
                                 thread, the caller and the lanes taking blocks in turn */

/** What the last finished run of a pipeline did, and totals since create (rf_pipeline_stats). */
typedef struct rf_stats {
	size_t blocks;     /* nblocks of the last finished run that started work, whatever its result */
	uint64_t bytes;    /* sum of its sizes[] */
	uint64_t wall_ns;  /* from the start of its work to its return */
	int timed;         /* 1 when the fields below were collected (rf_pipeline_collect_stats) */
	unsigned nqueues;  /* entries of queue[] in use: the program's queues */
	rf_queue_stats queue[RF_STATS_QUEUES];
	uint64_t copy_ns;  /* busy time of every copy, all queues together */
	/* Exposed transfer: wall time during which no compute ran (queue 0 idle: waiting for copies, or,
	 * on "cpu", copying). Overlap efficiency: the share of copy time hidden behind computes,
	 * 1 - exposed / copy_ns clipped to [0, 1]: 0 on "cpu", near 1 when copies hide entirely. */
	uint64_t exposed_ns;
	double overlap_efficiency;
	/* Totals since create, over every finished run that started work (whatever its result). Appended
	 * in 0.1; the fields above describe the last of those runs. */
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
	/* How runs placed their work (appended in 1.1): the last run's RF_SCHEDULE_*, and of `runs`, how
	 * many ran RF_SCHEDULE_INLINE and how many copied with the cache handoff (cldemote) on. */
	uint64_t schedule;
	uint64_t inline_runs;
	uint64_t handoff_runs;
	uint64_t reserved[11];     /* written as 0; fields are appended here within a major version */
} rf_stats;

/**
 * Collect per-queue times in every following run (on != 0) or stop (0). Costs two clock reads per
 * copy, compute and wait (about 40 ns a block here); the always-on fields of rf_stats cost nothing.
 * \return RF_OK; RF_EINVAL (p NULL); RF_EBUSY (the pipeline is running).
 */
RF_EXTERN int rf_pipeline_collect_stats(rf_pipeline *p, int on);

/**
 * The statistics of p's last finished run and the totals since create (all zero before the first run).
 * Callable from any thread at any time, also while p runs (it then reports the run before): each call
 * copies one consistent snapshot, published when a run ends. Never blocks on a run.
 * \return RF_OK; RF_EINVAL (p or out NULL).
 */
RF_EXTERN int rf_pipeline_stats(const rf_pipeline *p, rf_stats *out);

/**
 * Stop the run in progress on p, or, when none is, the next run to start: a cancel stays pending until
 * a run returns RF_ECANCELED because of it, so a request timeout that fires between two runs of a
 * serving loop is never lost. A run in progress stops issuing work (no compute starts after the one
 * running, copies in flight finish) and returns RF_ECANCELED; a run that starts with a cancel pending
 * returns RF_ECANCELED at once, calling no compute. Each pending cancel is consumed by exactly one run
 * returning RF_ECANCELED; cancels made before it was consumed are merged into it. A cancel that
 * arrives after the last compute of a run has started does not change that run's result (RF_OK, or
 * its failure) and stays pending for the next run; so does one that arrives after a run ended.
 * A serving loop that arms a timeout per request therefore disarms it when the request ends and then
 * calls rf_pipeline_cancel_clear, so that a timeout that fired late cannot stop the next request.
 * The pipeline stays usable. Callable from any thread at any time, including a compute callback of p.
 * \return RF_OK; RF_EINVAL (p NULL).
 */
RF_EXTERN int rf_pipeline_cancel(rf_pipeline *p);

/**
 * Withdraw a pending cancel (see rf_pipeline_cancel) that no run has consumed; nothing happens when
 * none is pending. Call it from the thread that runs p, between runs.
 * \return RF_OK; RF_EINVAL (p NULL); RF_EBUSY (a run is in progress: its cancel cannot be withdrawn).
 */
RF_EXTERN int rf_pipeline_cancel_clear(rf_pipeline *p);

/**
 * Record a Chrome trace (trace-event JSON, opens in Perfetto or chrome://tracing) of every following
 * run: one track per queue, one slice per copy, stage (two-hop staging) and compute that ran (one
 * skipped by a cancel has none), named by block. Each run adds its events to the file at `path`, one file across
 * runs: the file is a JSON array that is closed whenever no run is writing it (any JSON tool reads
 * it), and each run reopens it, inserts its events before the closing "]" and closes it again, in one
 * write under an exclusive flock(2) — so runs of several pipelines, threads or processes may trace to
 * one path and the file stays valid JSON. path is copied; it must name a regular file (or none yet): a
 * FIFO, device or directory fails the run's trace (opened non-blocking, never waiting for a reader).
 * NULL stops tracing. While tracing, a run allocates 56 bytes per copy and compute before it starts
 * (nothing during it), and after its work has finished formats its events in memory (about 150 bytes
 * each) and writes them.
 * \return RF_OK; RF_EINVAL (p NULL, path ""); RF_EBUSY (the pipeline is running); RF_ENOMEM.
 * A traced run whose work succeeded but whose file could not be written (not a regular file, not a
 * trace-event array, a write error) returns RF_EBACKEND. A trace-event array is a blank file or one
 * that parses whole as a JSON array of objects (checked once per process while only it writes the
 * file); anything else is left untouched. A write that fails half-way (a full disk, RLIMIT_FSIZE)
 * leaves the file as it was.
 */
RF_EXTERN int rf_pipeline_trace(rf_pipeline *p, const char *path);

/**
 * Release the pipeline, its ring memory and its backend queues. NULL is a no-op. Nothing else may use
 * p while destroy runs or after it: no run on another thread, and none of the "any thread, any time"
 * calls either (stats, describe, cancel, lookup, keyed_stats) — their "any time" ends where destroy
 * begins, and such a call during or after it is a use-after-free; stop monitoring and timeout threads
 * from using p first. Called from inside one of its own compute callbacks, the release is deferred
 * until that run returns (which then reports RF_ECANCELED for the blocks left).
 * In a child of fork() it returns without waiting for the parent's worker threads (freeing what the
 * child's copy of the memory holds).
 */
RF_EXTERN void rf_pipeline_destroy(rf_pipeline *p);

/* ---- keyed use: serving loops ------------------------------------------------------------------
 *
 * A serving loop does not know its blocks in advance: the router of layer l picks the experts of layer
 * l, some experts come back step after step, and the next layer's likely experts can be hinted early.
 * Keyed use serves it on the same pipeline (same slots, backends, staging, copy queues): the slots form
 * a cache of blocks named by the caller's 64-bit keys, filled just in time, evicted least-recently-used.
 *
 * Rules (docs/serving.md):
 *  - Keyed calls on one pipeline come from one thread at a time, like runs (keyed_stats, lookup and
 *    cancel from any thread, compute callbacks included; lookup reports ABSENT while a run is in
 *    progress). Any other keyed call from a compute callback of a run is RF_EBUSY. NULL p (or a NULL
 *    out/state pointer) is RF_EINVAL everywhere.
 *  - An acquire of a key whose hint is still held back issues the copy itself: it is not a hit, and the
 *    hint counts as dropped. An unacquired hint removed by evict or a run counts as wasted if its copy
 *    was issued, else as dropped. On "threads" a hint copy queued on its lane but not started yet is
 *    still withdrawable and counts as held back: an acquire (or a new key for its slot, or an evict)
 *    withdraws it, it counts as dropped, and its bytes leave bytes_copied (they were never copied). A prefetch refused with RF_ENOSPC counts nowhere.
 *  - Slot choice: the lowest-numbered empty slot, else the least recently used slot that is not held;
 *    "used" = its last acquire, release or prefetch. Keyed use uses every allocated slot (with depth =
 *    auto too). Keyed copies go on copy lanes the library chooses.
 *  - The bytes at src must stay valid and unchanged until rf_pipeline_evict(key) or rf_pipeline_destroy
 *    has returned (on cuda a copy may still read them after acquire returned). A hit reads no src and
 *    does not compare it. Change a key's bytes only after evicting it.
 *  - A failed call changes nothing: no slot, no LRU order, no stats; *out untouched.
 *  - rf_pipeline_run with a block held: RF_EBUSY. A run that starts work leaves no key resident; one
 *    that fails its checks or has nblocks 0 changes nothing. Cancel, rf_pipeline_stats and traces cover
 *    runs, not keyed use.
 *  - rf_pipeline_destroy with blocks held drops the holds (cuda: it synchronises params.device first).
 *  - Every RAW and WAR rule of runs holds for keyed use, on every backend; no keyed call allocates
 *    memory after create. On "threads" a miss with nothing in flight may be copied by the caller itself.
 *  - The library's own CUDA queries run in thread-local capture mode, so they never disturb another
 *    thread's stream capture.
 */

/**
 * A hint that `key` (bytes at src) will be acquired soon; returns without waiting (except on "cpu",
 * which copies inline). If the key is absent its slot is chosen now; its copy is issued now or held
 * back (the library bounds the hint copies in flight per copy lane); a held-back hint is issued when a
 * lane frees, and dropped (no copy) if its slot is chosen again first. A key that is resident, held or
 * on its way: no copy, and its use is refreshed. flags must be 0.
 * \return RF_OK;
 *         RF_EINVAL (p or src NULL, bytes 0 or > slot_bytes, a different bytes count than the resident
 *                   or incoming copy of key, flags != 0);
 *         RF_ENOSPC (every slot is held: the hint is dropped, nothing waits);
 *         RF_EBUSY (a run is in progress, or called from a compute callback); RF_EBACKEND.
 */
RF_EXTERN int rf_pipeline_prefetch(rf_pipeline *p, uint64_t key, const void *src, size_t bytes, unsigned flags);

/**
 * Hold `key` in its slot, copying it first unless it is resident or on its way. An acquire's copy is
 * issued ahead of every held-back hint and never waits behind a hint copy that has not started.
 * *out: index = key, slot, data (the slot; the same address for a slot for the pipeline's lifetime),
 * bytes, stream. CPU backends: returns when the bytes are in the slot; stream must be NULL.
 * cuda: returns without waiting on the host; `stream` is a cudaStream_t of params.device with CUDA's
 * meaning (NULL = the legacy default stream; cudaStreamPerThread allowed); it is made to wait, on the
 * device, for the key's copy, and out->stream = stream; only work ordered after this call on that
 * stream may read out->data. Acquiring a held key again returns the same slot (held twice, released
 * twice), also when every slot is held. The slot is never refilled while held. flags must be 0.
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
 * Let go of one hold of block->index, which must be held in p in block->slot (RF_EINVAL otherwise;
 * data and bytes are not checked). The block stays resident (acquiring its key again copies nothing)
 * until its slot is chosen for another key. cuda: records an event on block->stream (the caller may set
 * it to the stream of params.device that carries its last work on the slot; work on other streams must
 * be joined into it first). The slot's next copy waits, on the device, for the work enqueued before each
 * release since the slot was filled, on each releasing stream, and for the slot's previous copy — and
 * for nothing else.
 * \return RF_OK; RF_EINVAL.
 */
RF_EXTERN int rf_pipeline_release(rf_pipeline *p, const rf_block *block);

/**
 * Forget key (its source bytes will change): the next acquire copies it again. Returns when no copy
 * reads that source any more.
 * \return RF_OK, also when it is absent; RF_EINVAL (p NULL); RF_EBUSY while it is held (or a run is in
 *         progress).
 */
RF_EXTERN int rf_pipeline_evict(rf_pipeline *p, uint64_t key);

typedef enum rf_key_state { RF_KEY_ABSENT = 0, RF_KEY_COPYING = 1, RF_KEY_READY = 2 } rf_key_state;

/**
 * Where key stands, without waiting and without changing LRU order or stats (slot may be NULL; it is
 * set for COPYING and READY). Lets a caller take hits first and misses after. Any thread, until
 * rf_pipeline_destroy begins (never during or after it).
 * \return RF_OK; RF_EINVAL (p or state NULL).
 */
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

/**
 * The keyed counters since create. Any thread, any time until rf_pipeline_destroy begins (never during
 * or after it). Each field is read atomically; together they are not one snapshot.
 * \return RF_OK; RF_EINVAL (p or out NULL).
 */
RF_EXTERN int rf_pipeline_keyed_stats(const rf_pipeline *p, rf_keyed_stats *out);

#ifdef __cplusplus
}
#endif

#include "ringfetch/file.h"
#include "ringfetch/graph.h"
#include "ringfetch/staging.h"

#endif /* RINGFETCH_H */
