/* runtime/backend.h — the backend interface. Each backend exports one const ops table (in the manner
 * of SQLite's VFS: versioned by `abi`, methods only appended); the core calls backends only through
 * the rf__backend_* wrappers below, which is where argument asserts and fault injection (base/alloc.h, the
 * testing build) live. */
#ifndef RF_RUNTIME_BACKEND_H
#define RF_RUNTIME_BACKEND_H

#include "base/align.h"
#include "base/test_hooks.h"
#include "graph/program.h"
#include "io/file.h"
#include "ringfetch.h"
#include "ringfetch/staging.h"

#include <stdatomic.h>
#include <stdint.h>

#define RF__BACKEND_ABI 2 /* 2: the keyed methods became one, post */

#define RF__CAP_OVERLAP 0x1u /* queues really run concurrently */
#define RF__CAP_DEVICE 0x2u  /* slots in device memory; the walk only enqueues (traces and stats time that) */

/* Per-queue time accounting of one run (rf_pipeline_collect_stats): written by that queue's walker only. */
typedef struct rf__qstats {
	int64_t busy_ns; /* inside copies and computes */
	int64_t wait_ns; /* inside waits */
	uint64_t copies, computes;
} rf__qstats;

struct rf__kcopy;

/* Everything one run needs; the backend fills the out fields. */
typedef struct rf__run {
	const struct rf_program *prog;
	size_t nblocks;
	const void *const *srcs;
	const size_t *sizes;
	rf_compute_fn compute;
	void *user;
	unsigned char *slots; /* nslots * slot_stride (slot_bytes rounded up), from slots_alloc */
	size_t slot_stride;
	unsigned char *stage; /* CPU backends: the program's nstage staging slots, slot_stride apart; NULL on
	                         a device backend, which stages into its own */
	const atomic_int *cancel;   /* non-zero: stop issuing new nodes (deferred destroy, cancel) */
	size_t failed_block; /* out, RF_ECALLBACK: the block whose compute failed */
	int failed_value;    /* out, RF_ECALLBACK: what the compute returned */
	struct rf__trace *trace; /* non-NULL: walkers record copy/compute slices (runtime/trace.h) */
	rf__qstats *stats;       /* non-NULL: walkers account time per queue (RF_MAX_QUEUES entries) */
	/* File sources (io/file.h): how many blocks are file ranges (held for the run), every block's source as
	 * the engine resolved it (src; NULL when nfile is 0) and the calling thread's reader for its own copies. */
	size_t nfile;
	const rf__src *src;
	struct rf__flight *io;
	int files_only; /* every non-empty block is a file range: no copy needs a CPU */
	/* The run's bytes, and whether the backend may choose how to run it from its own measurements
	 * (backends/threads_sched.h): 0 while the owner compares runs (depth = auto) and for rf_exec. */
	uint64_t bytes;
	int vary;
	/* out: how the run placed its work (RF_SCHEDULE_INLINE, or RF_SCHEDULE_RING: as programmed), whether
	 * its copies demoted what they wrote (cache handoff), and a describe note when the backend's choice
	 * changed (NULL: none; valid until the backend's next run). */
	unsigned sched;
	int handoff;
	const char *note;
	/* Non-NULL: a keyed copy's one-block program (block 0 is the request's src and bytes); its copy's
	 * slice goes into entry keyed->tev of `trace` (rf__trace_kslice), its stats nowhere. */
	const struct rf__kcopy *keyed;
} rf__run;

typedef struct rf__open_args {
	unsigned nqueues;
	int device;
	/* Where CPU backends put their slots (memory/staging.h); NULL = "auto". Owned by the engine, valid
	 * until close: a backend may keep the pointer. */
	const struct rf__staging_policy *staging;
	const struct rf_program *prog; /* the first program (depth = auto may switch to one of <= nslots) */
	size_t slot_bytes;
	unsigned nslots; /* slots allocated: >= prog->nslots */
	/* The wait policy (runtime/config.h) resolved: ns a waiting thread spins (pause, then yield) before
	 * it sleeps; 0 sleeps at once between runs and keyed copies (a short spin remains within a run).
	 * Backends without threads ignore it. */
	int64_t wait_spin_ns;
	size_t slot_stride; /* slot_bytes rounded up to the backend's slot_align */
	int oracle;         /* RINGFETCH_ORACLE=1: the backend checks what only it sees (cuda: a staged
	                       keyed copy's pinned slot holds its bytes when the H2D is enqueued) */
	/* The threads backend's configuration (runtime/config.h), read once by the owner: the handoff and
	 * overlap modes (0: auto) and the copy workers' CPU list ("": the caller's binding), valid during
	 * open. Other backends ignore them. */
	int handoff, overlap;
	const char *worker_cpus;
	/* The engine's reader's flight (io/flight.h): a backend's lanes that read files report to it
	 * how their readers read (rf__flight.report), for describe. Valid until close. */
	struct rf__flight *files_report;
	unsigned *klanes; /* out: lanes keyed copies may use (>= 1; rf__backend_open sets 1 first) */
} rf__open_args;

#define RF__WAIT_AUTO_NS ((int64_t)2000000) /* "auto": spin up to 2 ms (docs/serving.md) */

/* ---- keyed use (runtime/keyed.c) ----------------------------------------------------------------
 * The keyed cache decides everything backend-independent (slot per key, which copies to issue and when,
 * holds, stats); the backend moves bytes and orders them. Every keyed operation is one op posted to it
 * (rf__backend_ops.post), on the owner's thread (TEST from any thread too), none allocating:
 *  - RF__KOP_COPY: a one-block program, a COPY of req->bytes from req->src into slot req->slot on lane
 *    req->lane (< rf__open_args.klanes), posted without waiting; *out is its ticket, a queue value that
 *    only grows (threads: what its lane's queue reaches once the copy is done; cuda: its event's number;
 *    never 0), or 0 when the backend copied inline (cpu; threads' demand copies). Ordered after (a) the
 *    slot's previous copy, req->after unless known finished (0): WAW; hints into one slot share a lane,
 *    so a FIFO lane suffices; (b) the work released on the slot since its previous fill: WAR (CPU
 *    backends: nothing to do; cuda: the lane stream waits, on the device, on each release's event and on
 *    req->after's). (c) A demand copy (req->demand) never queues behind a
 *    hint not yet started: threads copies it inline, cuda on a demand stream of its own per lane. The
 *    backend adds req->bytes to *req->counter when the copy starts. RF_EBACKEND issues nothing; RF_ENOSPC:
 *    a hint's lane has no room now (the core retries later); RF_ENOTSUP: a demand copy whose stream is
 *    being captured. From an open file (io/file.h) the backend holds the file until the copy lands; a
 *    failed demand read is RF_EIO, a hint's stores its ticket in *req->failed before TEST says 1.
 *  - RF__KOP_RELEASE: the caller let go of a hold on req->slot (its work on req->stream); cuda records
 *    an event there (one per stream, the latest replacing the earlier), which (b) waits on.
 * The WAIT ops name a ticket in req->after (never 0: the wrappers answer for finished copies) except
 * QUIESCE: TEST returns 1 once the copy wrote the slot and read src (taking no lock a copy holds; cuda:
 * an event query in thread-local capture mode), else 0; CANCEL (optional) withdraws a copy not yet
 * started: 1 (it never reads src nor writes the slot; TEST is 1 from then on; the slot's next copy is
 * ordered after the one before it), else 0; WAIT, a host wait until it finished (no copy reads its
 * source on return); WAIT_STREAM, the acquirer's: req->stream waits for it on the device on cuda (a
 * captured stream is RF_ENOTSUP, nothing changed), the host on CPU backends; QUIESCE, a host wait until
 * every keyed copy finished and every release is ordered before later copies (before a run, on reset
 * and destroy). */
enum { RF__KOP_COPY, RF__KOP_RELEASE, RF__KOP_TEST, RF__KOP_CANCEL, RF__KOP_WAIT, RF__KOP_WAIT_STREAM,
       RF__KOP_QUIESCE };
typedef uint64_t rf__kticket;
typedef struct rf__kcopy {
	unsigned op;        /* RF__KOP_*; COPY and RELEASE read the fields below, a WAIT only after, stream */
	unsigned lane;      /* < klanes */
	unsigned slot;      /* < nslots */
	void *dst;          /* the slot's address (a device pointer on cuda) */
	rf__src src;        /* as resolved: host memory (valid until the ticket finished) or a file's range */
	size_t bytes;       /* 1 .. slot_bytes */
	int demand;         /* 1: an acquire's copy (see (c)); 0: a hint */
	rf__kticket after;  /* the slot's previous copy, not known finished (0: none) */
	void *stream;       /* cuda: the acquiring (demand) or releasing stream; NULL otherwise */
	_Atomic uint64_t *counter; /* bytes_copied: the backend adds `bytes` when the copy starts (is
	                              enqueued, on cuda), so that the counter never goes down */
	struct rf__flight *io;     /* the calling thread's reader (opened), for a copy it makes itself */
	size_t cap;                /* bytes usable at dst (the slot's stride): room for a read's window */
	_Atomic int64_t *failed;   /* the slot's: a hint's failed file read stores the ticket here */
	/* Traced (non-NULL): whoever makes the copy records its slice into entry `tev` (rf__trace_kcopy); a
	 * withdrawn copy records none. */
	struct rf__trace *trace;
	uint32_t tev;
	uint64_t key;
} rf__kcopy;

/* Slots start this far apart at least (rf__backend_ops.slot_align 0): a cache line, so that slots
 * never share one and vector loads see aligned data whatever slot_bytes is. */
#define RF__SLOT_ALIGN_DEFAULT RF__ALIGN_CPU

typedef struct rf__backend_ops {
	unsigned abi;
	const char *name;
	unsigned caps;
	/* Is the backend usable here? RF_OK, or RF_ENODEV with rf_errmsg saying why; NULL: always. */
	int (*probe)(int device);
	int (*open)(const rf__open_args *args, void **ctx);
	void (*close)(void *ctx); /* NULL: nothing to let go */
	/* Slot memory in the backend's address space (host memory for CPU backends). */
	int (*slots_alloc)(void *ctx, size_t bytes, void **mem);
	void (*slots_free)(void *ctx, void *mem, size_t bytes);
	/* Execute the program over run->nblocks blocks and return when all work has finished:
	 * RF_OK, RF_ECALLBACK (failed_* set), RF_ECANCELED, RF_EBACKEND (rf_errmsg set). */
	int (*run)(void *ctx, rf__run *run);
	/* Optional: one line on how the instance is laid out (threads, pinning), for rf_pipeline_describe. */
	void (*describe)(void *ctx, char *buf, size_t cap);
	/* Optional: where the backend's host staging memory lives (cuda: the pinned host ring), for
	 * rf_pipeline_placement; NULL: the ring slots themselves are staging memory. */
	int (*placement)(void *ctx, rf_placement *out);
	/* Keyed use (see above); NULL: keyed calls are RF_ENOTSUP. out: COPY's ticket (NULL for the rest). */
	int (*post)(void *ctx, const rf__kcopy *op, rf__kticket *out);
	/* Alignment of every slot's start (a power of two; 0 = RF__SLOT_ALIGN_DEFAULT), which the slot
	 * memory must have too: the stride is slot_bytes rounded up to it. */
	size_t slot_align;
	/* Optional: host staging slots per copy queue a backend's copies hop through (cuda: pageable
	 * sources); a pipeline then runs the staged ring (rf__ring_program's pins). NULL: the plain ring. */
	unsigned (*stage_slots)(size_t slot_bytes);
} rf__backend_ops;

/* The backend called `name` ("auto": the first usable built-in) into *out: RF_OK, or RF_ENODEV (unknown,
 * not built in, or its probe failed) with rf_errmsg saying why. */
int rf__backend_lookup(const char *name, int device, const rf__backend_ops **out);

/* The backend to build for params.memory: "auto" becomes the best usable host backend, or "cuda" for
 * RF_MEMORY_DEVICE; a backend of the other kind (built in or not) is RF_EINVAL from params (from ==
 * NULL), RF_ECONFIG naming `from` (variable or file:line) from the configuration; memory not 0 / 1:
 * RF_EINVAL. Unknown names pass through (the lookup refuses them). *out: a static string or `name`. */
int rf__backend_for_memory(const char *who, const char *name, const char *from, int memory, const char **out);

/* Whether backend `name` keeps its slots in device memory (RF__CAP_DEVICE): built-ins by name (built
 * in or not), registered ones by their caps; false for "auto" and unknown names. */
bool rf__backend_is_device(const char *name);

#ifdef RF_TESTING
/* Extra backends for tests (not thread-safe: before creating pipelines). RF_OK, RF_EINVAL (NULL or
 * another ABI), RF_ENOMEM (table full). */
int rf__backend_register(const rf__backend_ops *ops);
#endif

/* ---- wrappers: the only way the core reaches a backend ---------------------------------------- */

int rf__backend_open(const rf__backend_ops *be, const rf__open_args *args, void **ctx);
void rf__backend_close(const rf__backend_ops *be, void *ctx);
int rf__backend_slots_alloc(const rf__backend_ops *be, void *ctx, size_t bytes, void **mem);
void rf__backend_slots_free(const rf__backend_ops *be, void *ctx, void *mem, size_t bytes);
int rf__backend_run(const rf__backend_ops *be, void *ctx, rf__run *run);
void rf__backend_describe(const rf__backend_ops *be, void *ctx, char *buf, size_t cap);
/* Keyed wrappers: a COPY and a RELEASE (fault injection); a WAIT op (mode RF__KOP_TEST ..
 * RF__KOP_QUIESCE) on ticket t, where t 0 is finished: TEST 1, CANCEL 0, the waits RF_OK. */
int rf__backend_kissue(const rf__backend_ops *be, void *ctx, rf__kcopy *req, rf__kticket *out);
int rf__backend_krelease_device(const rf__backend_ops *be, void *ctx, unsigned slot, void *stream);
/* Inline: CPU backends order a refill after a release by nothing ((b)), and every release asks. */
static inline int rf__backend_krelease(const rf__backend_ops *be, void *ctx, unsigned slot, void *stream)
{
	return be->caps & RF__CAP_DEVICE ? rf__backend_krelease_device(be, ctx, slot, stream) : RF_OK;
}
/* Inline: every keyed call asks about tickets, most of them 0 (copied inline or known finished). No
 * fault injection: an acquire's wait comes after its copy was issued, where a failure could no longer
 * leave everything unchanged. */
static inline int rf__backend_kwait(const rf__backend_ops *be, void *ctx, unsigned mode, rf__kticket t, void *stream)
{
	if (t == 0 && mode != RF__KOP_QUIESCE)
		return mode == RF__KOP_TEST;
	/* A WAIT op reads op, after and stream only: those three assigned, not the whole request zeroed
	 * (an initializer's string store) on every look at a hint in flight. */
	rf__kcopy op;
	op.op = mode, op.after = t, op.stream = stream;
	return be->post(ctx, &op, NULL);
}

/* Frees host slot memory from the staging layer (rf__staging_alloc); ctx and bytes ignored. */
void rf__host_slots_free(void *ctx, void *mem, size_t bytes);

/* The built-in backends. cuda is always compiled, built in only with the toolkit (RF_HAVE_CUDA);
 * tests drive it through a simulated CUDA (backends/cuda_api.h). */
extern const rf__backend_ops rf__backend_cpu;
extern const rf__backend_ops rf__backend_threads;
extern const rf__backend_ops rf__backend_cuda;
/* The cpu backend's run (ctx unused), a walk of the whole program on the calling thread: what "threads"
 * runs at depth 1, so that it costs what "cpu" costs; and the same with file reads in flight from the
 * calling thread (signals after they land), for runs whose every copy is a file read (run->io open). */
int rf__cpu_run(void *ctx, rf__run *run);
int rf__cpu_walk_overlapped(rf__run *run);
/* The cpu backend's keyed post: copies inline (ticket 0). */
int rf__cpu_kpost(void *ctx, const rf__kcopy *req, rf__kticket *out);

#endif
