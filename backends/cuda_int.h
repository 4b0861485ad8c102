/* backends/cuda_int.h — what the cuda backend's files share: cuda.c (probe, open/close, the device
 * ring, the walk), cuda_event.c (event pools, waits, the enqueue window), cuda_stage.c (building the
 * two-hop staging of pageable sources, DMA ranges), cuda_hop.c (its dispatcher thread and the walker's
 * side), cuda_team.c (the CUDA-free host copy team), cuda_keyed.c (keyed use), cuda_embed.c (the
 * embedder API). None of them includes a CUDA header: every call goes through rf__cuda. */
#ifndef RF_BACKENDS_CUDA_INT_H
#define RF_BACKENDS_CUDA_INT_H

#include "backends/cuda_api.h"
#include "memory/staging.h"
#include "memory/topology.h"
#include "runtime/backend.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#define RF__CU_PIECE ((size_t)256 << 10) /* host copies are split into pieces of this (page multiple) */
#define RF__CU_TEAM_MAX 8u             /* host copy threads per pipeline */
#define RF__CU_NPIN_MAX 16u            /* pinned slots per copying queue */
#define RF__CU_VERDICTS 64u            /* copies the dispatcher may classify ahead of the walker */
#define RF__CU_WINDOW_MIN 32u          /* computes the host may enqueue ahead of the device (+ slots) */
#define RF__CU_DEVICE_ALIGN 256u       /* device slot stride (cudaMalloc's alignment) */
#define RF__CU_RANGES 8u               /* DMA-capable ranges remembered per classifying thread */

struct rf__cu;
struct rf__cu_queue;
struct rf__cu_hop;

typedef struct rf__cu_range {
	uintptr_t start;
	size_t len;
} rf__cu_range;

/* ---- the host copy team (cuda_team.c): CUDA-free ------------------------------------------------ */

/* One pageable block to copy into one pinned slot, in pieces of RF__CU_PIECE. Filled by a dispatcher
 * before it is posted; the team's threads claim pieces under the team's mutex; the thread that
 * finishes the last piece calls rf__cu_hop_job_done. */
typedef struct rf__cu_job {
	struct rf__cu_job *next; /* the team's FIFO of jobs with pieces left to claim */
	struct rf__cu_hop *hop;
	unsigned char *dst;
	const unsigned char *src;
	size_t len;
	unsigned parts, claimed, finished;
	unsigned ps; /* the pinned slot */
	uint64_t k;  /* the staged copy's number in its run */
} rf__cu_job;

/* Threads that copy the pieces of every posted job, oldest job first: several blocks of several
 * queues are in flight at once, each split across the threads. */
typedef struct rf__cu_team {
	pthread_mutex_t mu;
	pthread_cond_t go;
	pthread_t th[RF__CU_TEAM_MAX];
	unsigned n; /* threads started */
	int node;   /* the NUMA node whose CPUs they run on, -1: not placed */
	int stop;
	rf__cu_job *head, *tail;
} rf__cu_team;

unsigned rf__cu_team_size(void); /* threads a team gets on this machine */
/* n threads, placed on node's CPUs (-1: not placed) as topo says. */
int rf__cu_team_start(rf__cu_team *t, unsigned n, hwloc_topology_t topo, int node);
void rf__cu_team_post(rf__cu_team *t, rf__cu_job *j);
void rf__cu_team_fini(rf__cu_team *t); /* no job may be pending */
/* Bind our threads th[0..n) to node's CPUs that the process may use; 1 when done, 0 when not (none
 * allowed, node < 0, binding refused: they keep their affinity). */
int rf__cu_place(hwloc_topology_t topo, int node, const pthread_t *th, unsigned n);

/* ---- the staging hop of one copying queue (cuda_stage.c builds it, cuda_hop.c runs it) ---------- */

/* What the dispatcher decided for one copy of its queue. */
enum { RF__CU_V_DMA = 1, RF__CU_V_STAGED = 2 };
typedef struct rf__cu_verdict {
	size_t block;
	uint64_t k;  /* STAGED: the staged copy's number; its job fills pinned slot ps */
	unsigned kind, ps;
} rf__cu_verdict;

/* The dispatcher (a thread of its own) walks the queue's copies ahead of the walker: it classifies each
 * source (DMA-capable or pageable) and, for a pageable one, waits until the pinned slot it will fill
 * is free (the H2D that last read it has run) and posts the host copy to the team. The walker takes
 * the verdicts in order: a DMA copy it enqueues directly, a staged one once its job is done, from the
 * pinned slot. `mu` guards everything below it; the walker and the dispatcher each sleep on a
 * condition variable of their own and are woken only when the other crossed what they wait for. */
typedef struct rf__cu_hop {
	struct rf__cu *cx;
	unsigned queue;
	unsigned char *pin; /* npin pinned slots of cx->pin_stride bytes */
	unsigned npin;
	void **ev_free;   /* per pinned slot: recorded after the H2D that last read it */
	rf__cu_job *job;  /* per pinned slot: its job */
	uint64_t *done;   /* per pinned slot: k + 1 of the last job finished there (this run) */
	pthread_t th;
	int th_started, sync_made;
	pthread_mutex_t mu;
	pthread_cond_t wcv, dcv; /* the walker's, the dispatcher's */
	uint64_t gen;        /* bumped to hand the dispatcher a run */
	int quit, stop;      /* thread exit; the run's walk is over (the dispatcher stops) */
	int busy;            /* the dispatcher is walking */
	int active;          /* a run of this queue goes through the dispatcher */
	rf__run run;         /* its look-ahead copy of the run */
	uint64_t skip;       /* copies of this run the walker handled before the dispatcher started */
	int err;             /* the dispatcher stopped with this error (msg) */
	char msg[240];
	rf__cu_verdict v[RF__CU_VERDICTS];
	uint64_t nverdict, consumed; /* copies classified, and taken by the walker */
	uint64_t enq;                /* staged copies whose H2D the walker enqueued */
	uint64_t wait_consumed, wait_enq; /* the dispatcher sleeps until these (UINT64_MAX: not) */
	int walker_waiting;
	uint64_t posted, finished; /* jobs, this run */
	/* The dispatcher's own: */
	uint64_t ncopy, nstaged;
	int setdev_err;
	rf__cu_range ranges[RF__CU_RANGES];
} rf__cu_hop;

/* ---- per-pipeline state ------------------------------------------------------------------------- */

typedef struct rf__cu_queue {
	struct rf__cu *cx;
	void *stream;
	void **ev;       /* pool, recorded round-robin */
	int64_t *ev_val; /* value of each pool entry's latest record */
	unsigned nev;
	uint64_t nrec;  /* records this run */
	int copies;     /* the program copies on this queue (it may need a staging hop) */
	uint64_t ncopy; /* non-empty copies walked this run */
	rf__cu_hop *hop; /* built on the queue's first pageable block */
	rf__cu_range ranges[RF__CU_RANGES]; /* the walker's, while the queue has no hop */
} rf__cu_queue;

typedef struct rf__cu_keyed rf__cu_keyed; /* cuda_keyed.c */

typedef struct rf__cu {
	const rf__cuda_api *api;
	int device;
	unsigned nq, nslots, ncopyq;
	size_t slot_bytes, pin_stride;
	rf__cu_queue *q;
	rf__cu_team team;
	int team_started;
	unsigned nhop_threads; /* dispatcher threads started (describe) */
	int stage_failed;       /* building the staging hop failed (with this code): pageable runs fail alike */
	char stage_msg[240];
	int broken;             /* a device error made the context unusable */
	char broken_msg[200];
	char name[96];
	int numa_node;
	const char *placement_note; /* static: why the pinned ring is not where "auto" wanted it */
	rf__staging_policy pinned_policy;
	/* The enqueue window: the host waits for compute c - nwin before enqueueing compute c. */
	void **win;
	unsigned nwin;
	uint64_t ncomp; /* computes enqueued this run */
	rf__cu_keyed *keyed;
} rf__cu;

/* RF_EBACKEND naming the call and CUDA's words for the error (clears the error we caused). */
int rf__cu_fail(const rf__cuda_api *api, const char *call, int err);

#define RF__CU_TRY(api, call, expr)                                                                         \
	do {                                                                                                \
		int e_ = (expr);                                                                            \
		if (e_ != 0)                                                                                \
			return rf__cu_fail((api), (call), e_);                                              \
	} while (0)

/* Make `device` current for a call and put the caller's context back afterwards — "none" included. */
typedef struct rf__cu_saved {
	void *ctx;
	int valid;
} rf__cu_saved;
int rf__cu_enter(const rf__cuda_api *api, int device, rf__cu_saved *saved);
void rf__cu_leave(const rf__cuda_api *api, const rf__cu_saved *saved);

int rf__cu_probe(int device);

/* cuda_stage.c */
void rf__cu_policy(const rf__cuda_api *api, int device, const rf__staging_policy *in, rf__staging_policy *out,
		   int *numa_node);
int rf__cu_pinned_alloc(rf__cu *cx, size_t bytes, size_t align, void **out);
int rf__cu_stage_open(rf__cu *cx, rf__cu_queue *q); /* builds q->hop (and the team, once) */
void rf__cu_stage_free(rf__cu *cx, rf__cu_queue *q);
int rf__cu_is_dma(rf__cu *cx, rf__cu_range *cache, const void *p, size_t n);

/* cuda_hop.c */
void *rf__cu_hop_main(void *hop); /* the dispatcher thread */
void rf__cu_hop_start(rf__cu_hop *h, const rf__run *run, uint64_t skip);
int rf__cu_hop_take(rf__cu *cx, rf__cu_queue *q, size_t block, void *dst, const void *src, size_t n);
void rf__cu_hop_end(rf__cu_hop *h); /* the run's walk is over: stop the dispatcher, let jobs finish */
void rf__cu_hop_quit(rf__cu_hop *h); /* join the dispatcher thread (destroy) */
void rf__cu_hop_job_done(rf__cu_job *j);

/* cuda_event.c */
int rf__cu_signal(void *c, unsigned queue, int64_t v, size_t block);
int rf__cu_wait(void *c, unsigned queue, unsigned wqueue, int64_t v, size_t block);
int rf__cu_window_enter(rf__cu *cx, const atomic_int *cancel);
int rf__cu_window_leave(rf__cu *cx, unsigned queue);

/* cuda_keyed.c: keyed use (runtime/backend.h), stream-ordered; streams and events made in open. */
int rf__cu_keyed_open(rf__cu *cx);
void rf__cu_keyed_free(rf__cu *cx);
int rf__cu_keyed_settle(rf__cu *cx); /* a device synchronisation when keyed use ever happened */
int rf__cu_kissue(void *ctx, const rf__kcopy *req, rf__kticket *out);
int rf__cu_ktest(void *ctx, rf__kticket t);
int rf__cu_kwait(void *ctx, rf__kticket t, void *stream);
int rf__cu_ksync(void *ctx, rf__kticket t);
int rf__cu_krelease(void *ctx, unsigned slot, void *stream);
int rf__cu_kquiesce(void *ctx);
unsigned rf__cu_klanes(void *ctx);

#endif
