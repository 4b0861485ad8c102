/* backends/cuda_int.h — what the cuda backend's files share; none includes a CUDA header.
 *
 * A stream queue (copies, computes) has a CUDA stream and a pool of events; the walker enqueues its ops
 * on the caller's thread. A host queue (STAGE nodes) is walked by a lane of the backend's pool
 * (rf-stage-N), which copies pageable sources into pinned slots. Each queue's progress is one monotone
 * value (the last signal published or recorded), waited for on the backend's one eventcount; a lane
 * that waits for a stream then waits for the event that signal recorded. */
#ifndef RF_BACKENDS_CUDA_INT_H
#define RF_BACKENDS_CUDA_INT_H

#include "backends/cuda_api.h"
#include "base/piece.h"
#include "base/pool.h"
#include "base/wait.h"
#include "io/flight.h"
#include "memory/staging.h"
#include "memory/topology.h"
#include "runtime/walk.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#define RF__CUDA_PIECE ((size_t)256 << 10) /* the pinned ring's sizing unit (rf__cuda_stage_slots) */
#define RF__CUDA_STAGE_MAX 8u            /* host staging threads per pipeline: lanes + helpers */
#define RF__CUDA_NPIN_MAX 16u            /* pinned slots per copy queue */
#define RF__CUDA_WINDOW_MIN 32u          /* computes the host may enqueue ahead of the device (+ slots) */
#define RF__CUDA_RANGES 8u               /* DMA-capable ranges remembered per classifying thread */
#define RF__CUDA_STOP (-1000)            /* a walk stopped because the run stopped (not an error of its own) */

struct rf__cuda_ctx;
struct rf__cuda_kt; /* cuda_keyed.c: a keyed copy's ticket */

typedef struct rf__cuda_range {
	uintptr_t start;
	size_t len;
} rf__cuda_range;

/* A lane of the staging pool (index < nhost: walks host queue q and stages keyed hints), or a helper
 * taking pieces of lane q's copies. */
typedef struct rf__cuda_lane {
	struct rf__cuda_ctx *cx;
	unsigned index, q;         /* q: the host queue it walks (lanes), or its owner lane (helpers) */
	rf__work walk;             /* lanes: the run's walk of queue q; helpers: the help item */
	rf__piece_job job;         /* lanes: its current staging copy, open to helpers and waiters */
	size_t help_block;         /* helpers: the block of the copy to help with */
	uint64_t help_seq;         /* helpers: the help item's position in the helper's queue */
	int defer;                 /* this run's program lets its stream waits wait for a write (below) */
	unsigned pend_q;           /* the deferred wait: stream pend_q reaching pend (0: none) */
	int64_t pend;
	int entered;               /* device current and capture mode thread-local, once per thread */
	rf__flight flight;         /* its file reads into the pinned ring, in flight (opened on the first) */
	struct rf__trace *trace;   /* lanes: the run's trace while the lane walks it (its stages' slices) */
	struct rf__cuda_kt *khead, *ktail; /* lanes: its staged hints whose H2D is not enqueued yet, in order */
	atomic_uint kpend;         /* how many (the owner's quiesce waits for none) */
	rf__cuda_range ranges[RF__CUDA_RANGES];
} rf__cuda_lane;

typedef struct rf__cuda_queue {
	_Alignas(64) _Atomic int64_t value; /* the last signal published (host) or recorded (stream), this run */
	void *stream;                    /* NULL: a host queue */
	void **ev;                       /* stream: pool, recorded round-robin */
	_Atomic int64_t *ev_val;         /* value of each pool entry's latest record */
	unsigned nev;
	atomic_ullong nrec;              /* records this run */
	int copies;                      /* the program copies on this queue */
	int watched;                     /* a host queue waits on this stream: its records are published */
	unsigned lane;                   /* host: the lane that walks it */
} rf__cuda_queue;

typedef struct rf__cuda_keyed rf__cuda_keyed; /* cuda_keyed.c */

typedef struct rf__cuda_ctx {
	const rf__cuda_api *api;
	int device;
	unsigned nq, nslots, ncopyq, nstage;
	size_t pin_stride;
	rf__cuda_queue *q;
	uint64_t hostq;        /* queues walked by lanes (the program's STAGE queues) */
	const struct rf_program *seen; /* the program hostq and the deferrals were derived from */
	rf__pool pool;
	rf__ec ec;
	rf__cuda_lane *lane;     /* pool.n: nhost lanes, then the helpers */
	unsigned nhost, nhelp;
	int64_t spin_ns;
	char placed[120];      /* where the lanes run (describe) */
	_Atomic(unsigned char *) pin; /* the pinned ring: nstage slots of pin_stride, made on first need */
	pthread_mutex_t pin_mu;
	const void **sslot;    /* per staging slot: where its copy reads (pinned slot or source; NULL: a read failed) */
	rf__run *run;          /* the run in progress */
	atomic_int stop, first_rc;
	atomic_uint active;    /* lanes still walking */
	char fail_msg[240];    /* a lane's failure, said again on the caller's thread */
	int broken;            /* a device error made the context unusable */
	char broken_msg[200];
	char name[96];
	int numa_node;
	const char *placement_note; /* static: why the pinned ring is not where "auto" wanted it */
	rf__staging_policy pinned_policy;
	int oracle;
	void **win;     /* the enqueue window: compute c waits for compute c - nwin */
	unsigned nwin;
	uint64_t ncomp; /* computes enqueued this run */
	rf__cuda_keyed *keyed;
} rf__cuda_ctx;

/* cuda_ctx.c (below the others): RF_EBACKEND naming the call and CUDA's words for the error, cleared. */
int rf__cuda_fail(const rf__cuda_api *api, const char *call, int err);

/* Clear the error a call of ours left (e != 0): it must not reach the application's next check. */
static inline int rf__cuda_clear(const rf__cuda_api *api, int e)
{
	if (e != 0)
		(void)api->get_last_error();
	return e;
}

/* n events into ev (RF_EBACKEND naming `call`); destroy those made (NULL entries skipped). */
int rf__cuda_events_make(const rf__cuda_api *api, void **ev, size_t n, const char *call);
void rf__cuda_events_free(const rf__cuda_api *api, void **ev, size_t n);
void *rf__cuda_event_for(rf__cuda_queue *w, int64_t v); /* the oldest record in w's pool with value >= v */

#define RF__CUDA_TRY(api, call, expr)                                                                         \
	do {                                                                                                \
		int e_ = (expr);                                                                            \
		if (e_ != 0)                                                                                \
			return rf__cuda_fail((api), (call), e_);                                              \
	} while (0)

/* Make `device` current for a call and put the caller's context back afterwards — "none" included —
 * and the capture mode when `moded` (keyed calls run in thread-local mode). */
typedef struct rf__cuda_saved {
	void *ctx;
	int valid, mode, moded;
} rf__cuda_saved;
int rf__cuda_enter(const rf__cuda_api *api, int device, rf__cuda_saved *saved);
void rf__cuda_leave(const rf__cuda_api *api, const rf__cuda_saved *saved);

/* cuda_stage.c: pinned memory, DMA ranges, the staging pool */
void rf__cuda_policy(const rf__cuda_api *api, int device, const rf__staging_policy *in, rf__staging_policy *out,
		   int *numa_node);
int rf__cuda_pin_ring(rf__cuda_ctx *cx, unsigned char **out); /* the pinned ring, allocated on first need */
int rf__cuda_is_dma(rf__cuda_ctx *cx, rf__cuda_range *cache, const void *p, size_t n);
unsigned rf__cuda_stage_slots(size_t slot_bytes);
/* Host queues, lanes, helpers; report: where the lanes' readers say how they read (describe); between:
 * what a lane does between items (rf__cuda_lane_ops_keyed). */
int rf__cuda_pool_open(rf__cuda_ctx *cx, const struct rf_program *p, struct rf__flight *report,
		       const rf__lane_ops *between);
void rf__cuda_pool_close(rf__cuda_ctx *cx);
int rf__cuda_pool_prepare(rf__cuda_ctx *cx, const struct rf_program *p); /* per run: deferrals, watched streams */
void rf__cuda_lane_enter(rf__cuda_lane *l); /* once per lane thread */
/* On lane l, a STAGE into pinned slot t (a run's, or a keyed hint's): n bytes of src copied in pieces
 * shared with its helpers (and a waiting walker) as block `block`, cx->sslot[t] then set; or, fs
 * non-NULL, the read of that file range started and left in flight (RF__WALK_ASYNC): cx->sslot[t] says
 * where its bytes begin once it landed (NULL: it failed), and the signals the lane sends afterwards wait
 * for it. rec: the caller's part of the read's flight record (a keyed copy's file to let go of and
 * failure to mark). RF_OK, RF__WALK_ASYNC, or the pinned ring's or the reader's failure. */
int rf__cuda_stage(rf__cuda_lane *l, const void *src, const rf__fsrc *fs, size_t n, size_t block, unsigned t,
		 const rf__flight_rec *rec);
void rf__cuda_run_fail(rf__cuda_ctx *cx, int rc); /* a walk failed: the first failure wins, everyone stops */
/* A lane's copy or compute, the walker's stage: never called (rf__cuda_pool_open keeps host queues to
 * STAGE and WAIT ops, and the walker skips them). */
int rf__cuda_misplaced(void *c, rf__run *run, unsigned queue, size_t b, unsigned slot);
/* Wait for host queue wq to reach v, taking pieces of its copy of `block` meanwhile; l: the waiting lane
 * (NULL: the walker). */
int rf__cuda_host_wait(rf__cuda_ctx *cx, unsigned wq, int64_t v, size_t block, rf__cuda_lane *l);

/* cuda_keyed.c: keyed use (runtime/backend.h), stream-ordered; streams and events made in open. */
int rf__cuda_keyed_open(rf__cuda_ctx *cx, unsigned *lanes); /* *lanes: rf__open_args.klanes */
void rf__cuda_keyed_free(rf__cuda_ctx *cx);
int rf__cuda_keyed_settle(rf__cuda_ctx *cx); /* a device synchronisation when keyed use ever happened */
int rf__cuda_kpost(void *ctx, const rf__kcopy *op, rf__kticket *out);
/* A staging lane between items: its reads land, and the H2Ds of the hints they free are enqueued. */
extern const rf__lane_ops rf__cuda_lane_ops_keyed;

#endif
