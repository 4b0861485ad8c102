/* runtime/engine.h — what a pipeline and an exec share: a backend instance, slot memory, a lowered
 * program, and the run lifecycle (input checks, busy detection, deferred destroy). */
#ifndef RF_RUNTIME_ENGINE_H
#define RF_RUNTIME_ENGINE_H

#include "runtime/backend.h"
#include "runtime/config.h"
#include "io/flight.h"
#include "memory/staging.h"

#include <pthread.h>
#include <stdatomic.h>

/* How many times rf_pipeline_describe's line may change after create (later changes show in rf_stats). */
#define RF__DESCRIBE_VERSIONS 16

/* The engine's one state word: a run and a keyed call each take it (IDLE -> RUNNING / KEYED) for their
 * whole duration, so that any of them meeting another in progress returns RF_EBUSY and changes
 * nothing; a destroy meeting either marks it DOOMED and the call in progress releases the owner. */
enum { RF__IDLE = 0, RF__RUNNING = 1, RF__DOOMED = 2, RF__KEYED = 3 };

/* The read-ahead window of a host pipeline's caller (io/reader.h), mapped at its first run of small
 * contiguous file blocks: four requests of 1 MiB, the device's largest request on common NVMe and
 * virtio disks, so that the disk always has the next large request while one lands. */
#define RF__ENGINE_WINDOW ((size_t)4 << 20)
/* With depth = auto the bytes read ahead are chosen online (io/reader.h): room for as many requests as the
 * reader keeps in flight (RF__READER_QD) of 1 MiB; its pages are touched only as far as the choice reads
 * ahead. */
#define RF__ENGINE_WINDOW_ONLINE ((size_t)32 << 20)

typedef struct rf__engine {
	const rf__backend_ops *be;
	void *ctx;
	struct rf_program *prog; /* owned */
	unsigned char *slots;
	size_t slot_bytes, slot_stride, slots_len; /* stride: slot_bytes rounded up to the backend's slot_align */
	size_t budget; /* memory_budget (0: none): the ring and the read-ahead window share it */
	int io_online;  /* depth = auto on a host backend: the read-ahead is chosen online */
	uint64_t ahead_copies; /* blocks served from the read-ahead window, at the last run's end */
	unsigned char *stage; /* CPU backends: the program's staging slots (host memory beside the ring) */
	size_t stage_len;
	atomic_int state;  /* RF__IDLE / RF__RUNNING / RF__KEYED / RF__DOOMED */
	uint64_t forks;    /* rf__fork_count() at init: a child of fork() has none of the backend's threads */
	atomic_int cancel; /* read by backends between nodes; pending until a run returns RF_ECANCELED */
	/* rf_pipeline_describe: versions of the line, each written once and then published by desc_cur
	 * (release), so that a reader on another thread never sees one being written. */
	char describe[RF__DESCRIBE_VERSIONS][1024];
	atomic_uint desc_cur;
	char desc_core[768]; /* what the versions are made of: the notes appended, then the backend's latest */
	char desc_note[256]; /* schedule note (rf__run.note), replaced rather than appended */
	char desc_files[880]; /* "; files: ", how the calling thread's reader reads now (and whether its reads
	                       * kept a fixed depth's compute waiting), and a copy lane's reader if it reads
	                       * otherwise; replaced likewise */
	unsigned files_gen, lanes_gen; /* e->io's why_gen and lanes_gen when desc_files was written */
	int collect_stats;  /* rf_pipeline_collect_stats */
	rf__qstats qstats[RF_MAX_QUEUES];
	rf_stats last;      /* the run in progress (or the last one): the run thread's working copy */
	pthread_mutex_t stats_mu; /* guards `published`: the last finished run and the totals, any thread */
	rf_stats published;
	char *trace_path;   /* rf_pipeline_trace: Chrome trace appended after each run, or NULL */
	/* Set by the owner before init: where CPU backends put the slots (zero: "auto"), at least how many
	 * slots (0: the program's), the wait policy (runtime/config.h: 0 auto, -1 sleep, else ns of spin). */
	rf__staging_policy staging;
	unsigned min_slots;
	int64_t wait_spin_ns;
	unsigned nslots;    /* slots allocated (set by init) */
	unsigned klanes;    /* lanes keyed copies may use (the backend's, at open) */
	rf__flight io;      /* the calling thread's reader for its own file copies, opened at the first */
	rf__src *src;       /* a run's sources resolved (rf__run.src): src_cap, the longest run's nblocks */
	size_t src_cap;
	struct rf__keyed *keyed;   /* the owner's keyed use (runtime/keyed.h), or NULL: see `before` */
	struct rf__ktrace *ktrace; /* rf_pipeline_keyed_trace, or NULL: a reset is recorded there */
	/* RINGFETCH_ORACLE=1 (set by init): check every successful run's execution log (runtime/oracle.h),
	 * as a ring's, or against `graph`'s promises when non-NULL (rf_exec). */
	int oracle;
	const struct rf__oracle_graph *graph;
	/* depth = auto on a host backend: a ring of every slot (owned, NULL: none), run instead of prog by a
	 * measuring run whose blocks are all file ranges of at least the device's largest request (the
	 * read-ahead window would only move them): the slots let its reads run ahead of the compute and
	 * the reader chooses how many are in flight online (rf__flight.reads_online). Freed once measuring
	 * is over. ran_deep: the last run did (its `measure` reads the reader's choice). */
	struct rf_program *deep;
	int ran_deep;
	/* Called after a successful run with its events (those of about RF__AUTO_SAMPLES blocks, unless
	 * tracing or the oracle records them all). */
	void (*measure)(void *owner, const struct rf__trace *t);
	/* Called after every successful run that `measure` was not, before the engine is idle again (never
	 * concurrently with a run, before a deferred destroy releases the owner): may swap e->prog for one
	 * within the slots. */
	void (*after)(void *owner);
	/* Once a run is the engine's and its files held (NULL: none): not RF_OK refuses it, nothing changed. */
	int (*before)(void *owner, const char *who);
	void (*release)(void *owner); /* frees the owner when a destroy was deferred to the run's end */
	void *owner;
	int vary;  /* rf__run.vary: set by a pipeline once depth = auto has settled; 0 for rf_exec */
	int local; /* RF_LOCALITY_COPIER: runs as programmed are RF_SCHEDULE_LOCAL */
} rf__engine;

/* e zeroed by the owner (all-zero is the idle state), the fields above set. Resolve `backend` (already
 * through config), open it, allocate the slots (CPU backends: from the staging layer under e->staging;
 * a host ring rounded up within cfg's memory budget) and, on CPU backends, prog->nstage staging slots.
 * cfg: the owner's configuration (the oracle, the threads backend's settings), read during the call.
 * Takes ownership of prog in every case. `who` prefixes error messages. */
int rf__engine_init(rf__engine *e, const char *who, const char *backend, int device,
		    struct rf_program *prog, size_t slot_bytes, const rf__config *cfg);
/* Check the inputs, then run the program; see rf_pipeline_run for the contract. */
int rf__engine_run(rf__engine *e, const char *who, size_t nblocks, const void *const *srcs,
		   const size_t *sizes, rf_compute_fn compute, void *user);
/* Trace every following run into path (copied), or stop tracing (NULL). RF_EBUSY while running. */
int rf__engine_trace(rf__engine *e, const char *who, const char *path);

#ifdef RF_TESTING
/* A pipeline's engine (white-box tests: the ring's address and length). */
const rf__engine *rf__pipeline_engine(const rf_pipeline *p);
#endif

/* The current describe line (any thread), and a new version of it with fmt appended (the run thread,
 * or before the engine is shared; dropped once RF__DESCRIBE_VERSIONS versions exist). */
const char *rf__engine_describe(const rf__engine *e);
void rf__engine_describe_append(rf__engine *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* A keyed call's entry and exit: RF_OK with the state taken (then rf__engine_keyed_end), or RF_EBUSY
 * (a run or another keyed call is in progress, or called from a compute callback) / RF_EBACKEND (a
 * child of fork() with a backend whose threads stayed in the parent), nothing taken. */
int rf__engine_keyed_begin(rf__engine *e, const char *who);
void rf__engine_keyed_end(rf__engine *e);

/* Open the calling thread's reader if it is not yet (the first file source); the describe line then
 * says how files are read. RF_OK or RF_ENOMEM. The run thread or a keyed call. */
int rf__engine_io(rf__engine *e, const char *who);
/* A new describe version if how that reader, or a copy lane's (rf__flight.report), reads has changed
 * (io_uring given up or set up again, a class of unaligned ranges decided). The run thread after a run,
 * a keyed call before it ends. */
void rf__engine_io_refresh(rf__engine *e);

/* Returns 1 if the owner may be freed now, 0 if a run or keyed call in progress will free it. */
int rf__engine_destroy_begin(rf__engine *e);
/* Release the backend, slots and program (the engine struct itself belongs to the owner). */
void rf__engine_fini(rf__engine *e);

#endif
