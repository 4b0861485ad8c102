/* backends/cuda_int.h — what the cuda backend's files share: cuda.c (probe, open/close, the device
 * ring, the walk), cuda_event.c (event pools, waits, the enqueue window), cuda_stage.c (two-hop
 * staging of pageable sources), cuda_team.c (the CUDA-free host copy team), cuda_embed.c (the
 * embedder API). None of them includes a CUDA header: every call goes through rf__cuda. */
#ifndef RF_BACKENDS_CUDA_INT_H
#define RF_BACKENDS_CUDA_INT_H

#include "backends/cuda_api.h"
#include "memory/staging.h"
#include "runtime/backend.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#define RF__CU_PIECE ((size_t)256 << 10) /* a host copy is split into pieces of at least this */
#define RF__CU_TEAM_MAX 8u             /* threads copying one block (the calling thread included) */
#define RF__CU_WINDOW_MIN 32u          /* computes the host may enqueue ahead of the device (+ slots) */
#define RF__CU_DEVICE_ALIGN 256u       /* device slot stride (cudaMalloc's alignment) */
#define RF__CU_RANGES 8u               /* DMA-capable ranges remembered per pipeline */

/* ---- the host copy team (cuda_team.c): CUDA-free ------------------------------------------------ */

/* Threads that split a pageable -> pinned copy between them; the calling thread (the pipeline's walker)
 * takes part too. Pieces are claimed under `mu`; a job is published by bumping `gen`, and the caller
 * returns only when every piece is copied, so a helper never holds a stale job. `use` serialises
 * callers (one pipeline is used by one thread at a time; it is a guard). */
typedef struct rf__cu_team {
	pthread_mutex_t mu, use;
	pthread_cond_t go, done;
	pthread_t th[RF__CU_TEAM_MAX];
	unsigned n; /* helper threads started */
	int node;   /* the NUMA node whose CPUs they run on, -1: not placed */
	uint64_t gen;
	int stop;
	unsigned char *dst;
	const unsigned char *src;
	size_t len, piece;
	unsigned parts, next, finished;
} rf__cu_team;

int rf__cu_team_start(rf__cu_team *t, int node); /* helpers placed on node's CPUs (-1: not) */
void rf__cu_team_copy(rf__cu_team *t, void *dst, const void *src, size_t len);
void rf__cu_team_fini(rf__cu_team *t);

/* ---- per-pipeline state ------------------------------------------------------------------------- */

struct rf__cu;

typedef struct rf__cu_queue {
	struct rf__cu *cx;
	void *stream;
	void **ev;       /* pool, recorded round-robin */
	int64_t *ev_val; /* value of each pool entry's latest record */
	unsigned nev;
	uint64_t nrec; /* records this run */
	int copies;    /* the program copies on this queue (it may need a staging hop) */
	/* Two-hop staging, built on the first pageable block (cuda_stage.c): */
	unsigned char *pin; /* npin pinned slots of pin_stride bytes */
	unsigned npin;
	void **ev_free;     /* per pinned slot: recorded after the H2D that last read it */
	uint64_t k;         /* staged copies this run */
} rf__cu_queue;

typedef struct rf__cu_keyed rf__cu_keyed; /* cuda_keyed.c */

typedef struct rf__cu_range {
	uintptr_t start;
	size_t len;
} rf__cu_range;

typedef struct rf__cu {
	const rf__cuda_api *api;
	int device;
	unsigned nq, nslots, ncopyq;
	size_t slot_bytes, pin_stride;
	rf__cu_queue *q;
	rf__cu_team team;
	int team_started;
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
	rf__cu_range ranges[RF__CU_RANGES]; /* DMA-capable ranges seen, most recent first */
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
int rf__cu_stage_open(rf__cu *cx, rf__cu_queue *q);
void rf__cu_stage_free(rf__cu *cx, rf__cu_queue *q);
int rf__cu_copy_staged(rf__cu *cx, rf__cu_queue *q, void *dst, const void *src, size_t n);
int rf__cu_is_dma(rf__cu *cx, const void *p, size_t n);

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
