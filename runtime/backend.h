/* runtime/backend.h — the backend interface. Each backend exports one const ops table (in the manner
 * of SQLite's VFS: versioned by `abi`, methods only appended); the core calls backends only through
 * the rf__be_* wrappers below, which is where argument asserts, tracing and fault injection live. */
#ifndef RF_RUNTIME_BACKEND_H
#define RF_RUNTIME_BACKEND_H

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

/* Everything one run needs; the backend fills the failure fields. */
/* Per-queue time accounting of one run (rf_pipeline_collect_stats): written by that queue's walker only. */
typedef struct rf__qstats {
	int64_t busy_ns; /* inside copies and computes */
	int64_t wait_ns; /* inside waits */
	uint64_t copies, computes;
} rf__qstats;

typedef struct rf__run {
	const struct rf_program *prog;
	size_t nblocks;
	const void *const *srcs;
	const size_t *sizes;
	rf_compute_fn compute;
	void *user;
	unsigned char *slots; /* nslots * slot_stride, from slots_alloc */
	size_t slot_stride;   /* slot i starts at slots + i * slot_stride (slot_bytes rounded up) */
	const atomic_int *cancel;   /* non-zero: stop issuing new nodes (deferred destroy, cancel) */
	/* out */
	size_t failed_block; /* RF_ECALLBACK: the block whose compute failed */
	int failed_value;    /* RF_ECALLBACK: what the compute returned */
	struct rf__trace *trace; /* non-NULL: walkers record copy/compute slices (runtime/trace.h) */
	rf__qstats *stats;       /* non-NULL: walkers account time per queue (RF_MAX_QUEUES entries) */
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
	size_t slot_stride; /* slot_bytes rounded up to the backend's slot_align */
} rf__open_args;

/* Slots start this far apart at least (rf__backend_ops.slot_align 0): a cache line, so that slots
 * never share one and vector loads see aligned data whatever slot_bytes is. */
#define RF__SLOT_ALIGN_DEFAULT 64u

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
	/* Alignment of every slot's start (a power of two; 0 = RF__SLOT_ALIGN_DEFAULT): the slot stride is
	 * slot_bytes rounded up to it. The slot memory itself must be at least this aligned. */
	size_t slot_align;
} rf__backend_ops;

/* The backend called `name` ("auto" resolves to the first usable one), or NULL with RF_ENODEV set. */
int rf__backend_lookup(const char *name, int device, const rf__backend_ops **out);

/* Tests register extra backends (a recording backend, a fault-injecting one). Not thread-safe: call
 * before creating pipelines. Returns RF_OK or RF_ENOMEM when the table is full. */
int rf__backend_register(const rf__backend_ops *ops);

/* ---- wrappers: the only way the core reaches a backend ---------------------------------------- */

int rf__be_open(const rf__backend_ops *be, const rf__open_args *args, void **ctx);
void rf__be_close(const rf__backend_ops *be, void *ctx);
int rf__be_slots_alloc(const rf__backend_ops *be, void *ctx, size_t bytes, void **mem);
void rf__be_slots_free(const rf__backend_ops *be, void *ctx, void *mem, size_t bytes);
int rf__be_run(const rf__backend_ops *be, void *ctx, rf__run *run);
void rf__be_describe(const rf__backend_ops *be, void *ctx, char *buf, size_t cap);

/* Host slot memory from the staging layer under the default policy ("auto"), ctx ignored: for
 * backends without a policy of their own (test backends). cpu and threads pass their pipeline's. */
int rf__host_slots_alloc(void *ctx, size_t bytes, void **mem);
void rf__host_slots_free(void *ctx, void *mem, size_t bytes);

/* Test-only hooks (white-box tests link the static library and set them before creating pipelines;
 * they are never set in production, where each costs one predictable branch). */
typedef struct rf__test_hooks {
	void (*before_copy)(size_t block); /* called on the copying thread before each copy */
	int drop_war_wait;                 /* pipelines created while set lose their WAR waits */
	int drop_staging_war;              /* cuda: two-hop copies skip the pinned slot's WAR wait */
	/* Staging fault injection: consulted at each allocation step ("topology", "arena", "membind",
	 * "fallback", "pin", "mallocx"); non-zero makes the step fail. For "membind" the value is the errno the
	 * binding fails with: EPERM/ENOSYS/EXDEV/EINVAL are refusals (unbound fallback), others errors. */
	int (*fail_alloc_step)(const char *step);
} rf__test_hooks_t;
extern rf__test_hooks_t rf__test_hooks;

/* The built-in backends. */
extern const rf__backend_ops rf__backend_cpu;
extern const rf__backend_ops rf__backend_threads;
/* CUDA streams and events (backends/cuda.c). Always compiled, registered as a built-in only when the
 * toolkit was found (RF_HAVE_CUDA); tests drive it through a simulated CUDA (backends/cuda_api.h). */
extern const rf__backend_ops rf__backend_cuda;

#endif
