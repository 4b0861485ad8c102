/* runtime/backend.h — the backend interface. Each backend exports one const ops table (in the manner
 * of SQLite's VFS: versioned by `abi`, methods only appended); the core calls backends only through
 * the rf__be_* wrappers below, which is where argument asserts and fault injection (base/alloc.h, the
 * testing build) live. */
#ifndef RF_RUNTIME_BACKEND_H
#define RF_RUNTIME_BACKEND_H

#include "base/align.h"
#include "base/test_hooks.h"
#include "graph/program.h"
#include "ringfetch.h"
#include "ringfetch/staging.h"

#include <stdatomic.h>
#include <stdint.h>

#define RF__BACKEND_ABI 1

/* Capabilities. */
#define RF__CAP_OVERLAP 0x1u /* queues really run concurrently */
#define RF__CAP_DEVICE 0x2u  /* slots live in device memory; copies and computes are only enqueued by
                                the walk (traces and stats time the enqueue, not the device) */

/* Per-queue time accounting of one run (rf_pipeline_collect_stats): written by that queue's walker only. */
typedef struct rf__qstats {
	int64_t busy_ns; /* inside copies and computes */
	int64_t wait_ns; /* inside waits */
	uint64_t copies, computes;
} rf__qstats;

/* Everything one run needs; the backend fills the failure fields. */
typedef struct rf__run {
	const struct rf_program *prog;
	size_t nblocks;
	const void *const *srcs;
	const size_t *sizes;
	rf_compute_fn compute;
	void *user;
	unsigned char *slots; /* nslots * slot_stride, from slots_alloc */
	size_t slot_stride;   /* slot i starts at slots + i * slot_stride (slot_bytes rounded up) */
	unsigned char *stage; /* the program's nstage staging slots, slot_stride apart, on CPU backends (the
	                         engine's host memory); NULL on a device backend, which stages into its own */
	const atomic_int *cancel;   /* non-zero: stop issuing new nodes (deferred destroy, cancel) */
	/* out */
	size_t failed_block; /* RF_ECALLBACK: the block whose compute failed */
	int failed_value;    /* RF_ECALLBACK: what the compute returned */
	struct rf__trace *trace; /* non-NULL: walkers record copy/compute slices (runtime/trace.h) */
	rf__qstats *stats;       /* non-NULL: walkers account time per queue (RF_MAX_QUEUES entries) */
	/* File sources (io/file.h): how many blocks of this run are file ranges (the engine holds their
	 * files for the run), and the calling thread's reader for the copies it makes itself (opened by
	 * the engine when nfile > 0). A copy handler classifies its source (rf__file_classify, no hold). */
	size_t nfile;
	struct rf__flight *io;
	int files_only; /* every non-empty block is a file range: no copy needs a CPU */
	/* The run's bytes (the sum of sizes[]), and whether the backend may choose how to run it from its
	 * own measurements (backends/threads_sched.h): 0 while the owner compares runs itself (depth =
	 * auto measuring or probing) or runs a graph of its own (rf_exec), which the backend then runs as
	 * built. */
	uint64_t bytes;
	int vary;
	/* out: how the run placed its work (RF_SCHEDULE_INLINE, or RF_SCHEDULE_RING: as programmed), whether
	 * its copies demoted what they wrote (the cache handoff), and a note for rf_pipeline_describe when
	 * the backend's choice changed (NULL: none; valid until the backend's next run). */
	unsigned sched;
	int handoff;
	const char *note;
} rf__run;

typedef struct rf__open_args {
	unsigned nqueues;
	int device;
	/* Where CPU backends put their slots (memory/staging.h); NULL = "auto". Owned by the engine and
	 * valid until the backend is closed, so a backend may keep the pointer. */
	const struct rf__staging_policy *staging;
	const struct rf_program *prog; /* the program runs start with (a depth = auto pipeline may switch
	                                  to a deeper one of at most nslots slots between runs) */
	size_t slot_bytes;
	unsigned nslots; /* slots allocated: >= prog->nslots */
	/* The wait policy (params.wait, RINGFETCH_WAIT, `wait`; runtime/config.h): how long a waiting thread
	 * spins (pause, then yield) before it sleeps, in ns. 0: the default, "auto" (RF__WAIT_AUTO_NS).
	 * RF__WAIT_SLEEP: sleep at once between runs and
	 * keyed copies (within a run a short spin remains: see backends/threads.c). Backends without threads
	 * ignore it. */
	int64_t wait_spin_ns;
	size_t slot_stride; /* slot_bytes rounded up to the backend's slot_align */
	int oracle;         /* RINGFETCH_ORACLE=1: the backend checks what only it sees (cuda: a staged
	                       keyed copy's pinned slot holds its bytes when the H2D is enqueued) */
} rf__open_args;

#define RF__WAIT_SLEEP ((int64_t)-1)
#define RF__WAIT_AUTO_NS ((int64_t)2000000) /* "auto": spin up to 2 ms (docs/serving.md) */

/* ---- keyed use (runtime/keyed.c) ----------------------------------------------------------------
 *
 * The keyed cache (rf_pipeline_prefetch/acquire/release/evict) decides everything backend-independent:
 * which slot a key goes to (LRU), which copies to issue and when (hints bounded per lane, held back,
 * dropped), holds, stats, the oracle. The backend only moves bytes and orders them. Its contract:
 *
 *  - kissue(req) starts a copy of req->bytes from req->src into slot req->slot on copy lane req->lane
 *    (< klanes) and returns a ticket (never 0) without waiting for the copy — except where the backend
 *    copies inline (cpu; threads for demand copies), then the ticket is finished on return.
 *    Ordering the backend must provide, and nothing more:
 *      (a) the copy starts after every copy issued earlier into the same slot (WAW): req->after is the
 *          slot's previous ticket when the core does not know it finished (0 otherwise); hints into one
 *          slot always go on the same lane (the core maps slot -> lane), so a FIFO lane orders them;
 *      (b) the copy starts after the work released on the slot since its previous fill (WAR): every
 *          krelease(slot, stream) since then. CPU backends: releases come after the host's compute, so
 *          there is nothing to do. cuda: release records an event on `stream` (one per releasing
 *          stream, the latest replacing an earlier one of the same stream) and the copy's lane stream
 *          waits on each of them and on req->after's event, on the device, no host wait;
 *      (c) req->demand (an acquire's copy) must never queue behind a hint copy that has not started:
 *          threads copies it inline on the caller; cuda puts it on a demand stream of its own per lane
 *          (or a higher-priority one) so that it never sits behind queued hints.
 *    The backend adds req->bytes to *req->counter when the copy starts. Failures issue nothing:
 *    RF_EBACKEND; RF_ENOSPC for a hint (demand 0) when the lane has no room for it right now (the core
 *    holds the hint back and tries again later); RF_ENOTSUP for a demand copy whose stream is being
 *    captured (cuda checks this here, before issuing, so that kwait on the same stream cannot fail).
 *  - ktest(t): 1 when the copy has finished writing the slot and reading src, 0 while not yet. Any
 *    thread (lookup calls it): must not take locks that a copy holds while copying; cuda: an event
 *    query in thread-local capture mode, so that it never disturbs another thread's stream capture.
 *  - kcancel(t) (optional, NULL = never): withdraw a copy that has not started; 1 when withdrawn (it
 *    will never read src nor write the slot; ktest(t) returns 1 from then on), 0 when it started.
 *    The core then orders the slot's next copy after the copy issued before the withdrawn one (kept
 *    as rf__kslot.before), which may have started.
 *  - kwait(t, stream): the acquirer's wait. CPU backends (stream NULL): return once ktest(t) would be 1.
 *    cuda: make `stream` wait on the copy's event (cudaStreamWaitEvent), no host wait; a stream being
 *    captured: RF_ENOTSUP, nothing changed.
 *  - ksync(t): a host wait until the copy finished (evict: "returns when no copy reads that source").
 *  - krelease(slot, stream): the caller let go of a hold; see (b). CPU backends: NULL (nothing to do).
 *  - kquiesce(): a host wait until every keyed copy issued has finished and every released work is
 *    ordered before later copies (cuda: synchronise the copy streams and the release events' streams,
 *    or make the run's streams wait on them). Called before a run starts (the run reuses every slot),
 *    when keyed state is reset and before destroy.
 *  - klanes(): the number of copy lanes keyed copies may use (>= 1).
 *  - kresult(slot, t) (optional, NULL = never fails): for a finished copy t into slot, RF_OK, or
 *    RF_EIO when it was a file read that failed (the slot's bytes are then not the key's). Any thread.
 *  File sources (io/file.h): a copy whose src lies in an open file reads the file (the backend holds
 *  the file from issue until the copy lands); a demand copy that fails returns RF_EIO from kissue
 *  (rf_errmsg set), a hint's failure shows in kresult.
 * The k* methods are called by one thread at a time (the pipeline's owner), except ktest. None of them
 * allocates memory: what they need is allocated in open (nslots is known there). */
typedef uint64_t rf__kticket;
typedef struct rf__kcopy {
	unsigned lane;      /* < klanes() */
	unsigned slot;      /* < nslots */
	void *dst;          /* the slot's address (a device pointer on cuda) */
	const void *src;    /* host memory, valid until the ticket finished */
	size_t bytes;       /* 1 .. slot_bytes */
	int demand;         /* 1: an acquire's copy (see (c)); 0: a hint */
	rf__kticket after;  /* the slot's previous copy, not known finished (0: none) */
	void *stream;       /* demand on cuda: the acquiring stream (also passed to kwait); NULL otherwise */
	_Atomic uint64_t *counter; /* bytes_copied: the backend adds `bytes` when the copy starts (is
	                              enqueued, on cuda), so that the counter never goes down */
	struct rf__flight *io;     /* the calling thread's reader (opened), for a copy it makes itself */
	size_t cap;                /* bytes usable at dst (the slot's stride): room for a read's window */
} rf__kcopy;


/* Slots start this far apart at least (rf__backend_ops.slot_align 0): a cache line, so that slots
 * never share one and vector loads see aligned data whatever slot_bytes is. */
#define RF__SLOT_ALIGN_DEFAULT RF__ALIGN_CPU

typedef struct rf__backend_ops {
	unsigned abi;
	const char *name;
	unsigned caps;
	/* Is the backend usable here? RF_OK, or RF_ENODEV with rf_errmsg saying why. */
	int (*probe)(int device);
	/* Per pipeline/exec state: queues, workers, streams. */
	int (*open)(const rf__open_args *args, void **ctx);
	void (*close)(void *ctx);
	/* Slot memory in the backend's address space (host memory for CPU backends). */
	int (*slots_alloc)(void *ctx, size_t bytes, void **mem);
	void (*slots_free)(void *ctx, void *mem, size_t bytes);
	/* Execute the program over run->nblocks blocks and return when all work has finished:
	 * RF_OK, RF_ECALLBACK (failed_* set), RF_ECANCELED, RF_EBACKEND (rf_errmsg set). */
	int (*run)(void *ctx, rf__run *run);
	/* Optional: one line on how the instance is laid out (threads, pinning), for rf_pipeline_describe. */
	int (*describe)(void *ctx, char *buf, size_t cap);
	/* Optional: where the backend's host staging memory lives (cuda: the pinned host ring), for
	 * rf_pipeline_placement; NULL: the ring slots themselves are staging memory. */
	int (*placement)(void *ctx, rf_placement *out);
	/* Keyed use (abi 1, appended; see "keyed use" above). A backend without kissue refuses keyed calls
	 * (RF_ENOTSUP). */
	int (*kissue)(void *ctx, const rf__kcopy *req, rf__kticket *out);
	int (*ktest)(void *ctx, rf__kticket t);
	int (*kcancel)(void *ctx, rf__kticket t);
	int (*kwait)(void *ctx, rf__kticket t, void *stream);
	int (*ksync)(void *ctx, rf__kticket t);
	int (*krelease)(void *ctx, unsigned slot, void *stream);
	int (*kquiesce)(void *ctx);
	unsigned (*klanes)(void *ctx);
	/* Alignment of every slot's start (a power of two; 0 = RF__SLOT_ALIGN_DEFAULT): the slot stride is
	 * slot_bytes rounded up to it. The slot memory itself must be at least this aligned. */
	size_t slot_align;
	int (*kresult)(void *ctx, unsigned slot, rf__kticket t); /* appended: keyed file copies */
	/* Optional: a backend whose copies need a hop through host staging slots (cuda: sources in pageable
	 * memory) says how many per copy queue for slots of slot_bytes; a pipeline then runs the staged ring
	 * (rf__ring_program's pins). NULL: the plain ring. */
	unsigned (*stage_slots)(size_t slot_bytes);
} rf__backend_ops;

/* The backend called `name` ("auto": the first usable built-in) into *out: RF_OK, or RF_ENODEV (unknown,
 * not built in, or its probe failed) with rf_errmsg saying why. */
int rf__backend_lookup(const char *name, int device, const rf__backend_ops **out);

/* The backend to build for params.memory (DESIGN.md, "Keyed use"): "auto" becomes the best usable host
 * backend for RF_MEMORY_HOST and "cuda" for RF_MEMORY_DEVICE; a named backend of the other kind is
 * RF_EINVAL when it came from params (from == NULL, also for backends not built into this library) and
 * RF_ECONFIG naming `from` (the variable, or file:line) when it came from the configuration. memory
 * other than 0 / 1: RF_EINVAL. Unknown names pass through (the lookup makes them RF_ENODEV). *out is
 * a static string or `name`. */
int rf__backend_for_memory(const char *who, const char *name, const char *from, int memory, const char **out);

/* Whether the backend called `name` keeps its slots in device memory (RF__CAP_DEVICE: its walk only
 * enqueues, so host clocks time the enqueue, not the work): built-ins by name, whether built into this
 * library or not, registered ones by their caps; false for "auto" and unknown names. */
bool rf__backend_is_device(const char *name);

#ifdef RF_TESTING
/* Tests register extra backends (a recording backend, a fault-injecting one); the testing build only.
 * Not thread-safe: call before creating pipelines. Returns RF_OK, RF_EINVAL (NULL or another ABI), or
 * RF_ENOMEM when the table is full. */
int rf__backend_register(const rf__backend_ops *ops);
#endif

/* ---- wrappers: the only way the core reaches a backend ---------------------------------------- */

int rf__be_open(const rf__backend_ops *be, const rf__open_args *args, void **ctx);
void rf__be_close(const rf__backend_ops *be, void *ctx);
int rf__be_slots_alloc(const rf__backend_ops *be, void *ctx, size_t bytes, void **mem);
void rf__be_slots_free(const rf__backend_ops *be, void *ctx, void *mem, size_t bytes);
int rf__be_run(const rf__backend_ops *be, void *ctx, rf__run *run);
void rf__be_describe(const rf__backend_ops *be, void *ctx, char *buf, size_t cap);
/* Keyed wrappers: fault injection on kissue/kwait/krelease; optional methods default sensibly. */
int rf__be_kissue(const rf__backend_ops *be, void *ctx, const rf__kcopy *req, rf__kticket *out);
int rf__be_ktest(const rf__backend_ops *be, void *ctx, rf__kticket t);
int rf__be_kcancel(const rf__backend_ops *be, void *ctx, rf__kticket t);
int rf__be_kwait(const rf__backend_ops *be, void *ctx, rf__kticket t, void *stream);
int rf__be_ksync(const rf__backend_ops *be, void *ctx, rf__kticket t);
int rf__be_krelease(const rf__backend_ops *be, void *ctx, unsigned slot, void *stream);
int rf__be_kquiesce(const rf__backend_ops *be, void *ctx);
unsigned rf__be_klanes(const rf__backend_ops *be, void *ctx);
int rf__be_kresult(const rf__backend_ops *be, void *ctx, unsigned slot, rf__kticket t);

/* Host slot memory from the staging layer under the default policy ("auto"), ctx ignored: for
 * backends without a policy of their own (test backends). cpu and threads pass their pipeline's. */
int rf__host_slots_alloc(void *ctx, size_t bytes, void **mem);
void rf__host_slots_free(void *ctx, void *mem, size_t bytes);

/* The built-in backends. */
extern const rf__backend_ops rf__backend_cpu;
extern const rf__backend_ops rf__backend_threads;
/* The cpu backend's walk of a whole program, in issue order, on the calling thread (backends/cpu.c):
 * what "threads" runs at depth 1, where nothing can overlap, so that it costs what "cpu" costs. */
int rf__cpu_walk_inline(rf__run *run);
/* The same walk with file copies overlapped (reads in flight from the calling thread, signals after
 * they land): what "threads" runs when every copy of a run is a file read (run->io open). */
int rf__cpu_walk_overlapped(rf__run *run);
/* CUDA streams and events (backends/cuda.c). Always compiled, registered as a built-in only when the
 * toolkit was found (RF_HAVE_CUDA); tests drive it through a simulated CUDA (backends/cuda_api.h). */
extern const rf__backend_ops rf__backend_cuda;

#endif
