/* runtime/engine.h — what a pipeline and an exec share: a backend instance, slot memory, a lowered
 * program, and the run lifecycle (input checks, busy detection, deferred destroy). */
#ifndef RF_RUNTIME_ENGINE_H
#define RF_RUNTIME_ENGINE_H

#include "runtime/backend.h"
#include "memory/staging.h"

#include <stdatomic.h>

enum { RF__IDLE = 0, RF__RUNNING = 1, RF__DOOMED = 2 };

typedef struct rf__engine {
	const rf__backend_ops *be;
	void *ctx;
	struct rf_program *prog; /* owned */
	unsigned char *slots;
	size_t slot_bytes, slots_len;
	atomic_int state;  /* RF__IDLE / RF__RUNNING / RF__DOOMED */
	atomic_int cancel; /* read by backends between nodes */
	char describe[512]; /* rf_pipeline_describe */
	int collect_stats;  /* rf_pipeline_collect_stats */
	rf__qstats qstats[RF_MAX_QUEUES];
	rf_stats last;      /* rf_pipeline_stats */
	char *trace_path;   /* rf_pipeline_trace: Chrome trace appended after each run, or NULL */
	rf__staging_policy staging; /* where CPU backends put the slots; set by the owner before init
	                               (zero: "auto") */
	unsigned min_slots; /* allocate at least this many slots (set before init; 0 = the program's) */
	unsigned nslots;    /* slots allocated (set by init) */
	int64_t wait_spin_ns; /* the wait policy, passed to the backend (set before init; rf__open_args) */
	/* Keyed use (runtime/keyed.h), or NULL: a run refuses to start while it holds a block and empties
	 * it before the run reuses the slots. */
	struct rf__keyed *keyed;
	/* Non-NULL (RINGFETCH_ORACLE=1): check every successful run's execution log (runtime/oracle.h). */
	int (*oracle)(void *owner, const struct rf__trace *t, size_t nblocks);
	/* Called after a successful run with its recorded events (the run records them while set). */
	void (*measure)(void *owner, const struct rf__trace *t);
	/* Called after every successful run, before the engine is idle again (so never concurrently with
	 * a run, and before a deferred destroy releases the owner): may swap e->prog for one of at most
	 * the allocated slots. */
	void (*after)(void *owner);
	void (*release)(void *owner); /* frees the owner when a destroy was deferred to the run's end */
	void *owner;
} rf__engine;

/* Resolve `backend` (already through config), open it, allocate prog->nslots * slot_bytes of slots
 * (CPU backends: from the staging layer under e->staging, which the owner sets first; zero = auto).
 * Takes ownership of prog in every case. `who` prefixes error messages. */
int rf__engine_init(rf__engine *e, const char *who, const char *backend, int device,
		    struct rf_program *prog, size_t slot_bytes);

/* Check the inputs, then run the program; see rf_pipeline_run for the contract. */
int rf__engine_run(rf__engine *e, const char *who, size_t nblocks, const void *const *srcs,
		   const size_t *sizes, rf_compute_fn compute, void *user);

/* Trace every following run into path (copied), or stop tracing (NULL). RF_EBUSY while running. */
int rf__engine_trace(rf__engine *e, const char *who, const char *path);

/* A pipeline's engine (white-box tests: the ring's address and length). */
const rf__engine *rf__pipeline_engine(const rf_pipeline *p);

/* rf_pipeline_collect_stats / rf_pipeline_stats. */
int rf__engine_collect_stats(rf__engine *e, const char *who, int on);
int rf__engine_stats(const rf__engine *e, const char *who, rf_stats *out);

/* Ask the run in progress, if any, to stop issuing work (it returns RF_ECANCELED once drained). */
int rf__engine_cancel(rf__engine *e);

/* Returns 1 if the owner may be freed now, 0 if a run in progress will free it (deferred). */
int rf__engine_destroy_begin(rf__engine *e);
/* Release the backend, slots and program (the engine struct itself belongs to the owner). */
void rf__engine_fini(rf__engine *e);

#endif
