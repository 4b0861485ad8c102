/* backends/threads_int.h — what threads.c (runs), threads_walk.c (the op handlers), threads_keyed.c
 * (keyed copies) and threads_place.c (where lanes run) share. Queue 0 is the caller; lane i of the pool
 * serves queue i + 1. A queue's progress is one monotone counter, `value`: a run's signal v stores
 * base + v (base: the value when the run started), a keyed copy stores its ticket. */
#ifndef RF_BACKENDS_THREADS_INT_H
#define RF_BACKENDS_THREADS_INT_H

#include "base/piece.h"
#include "backends/threads_sched.h"
#include "base/pool.h"
#include "base/wait.h"
#include "io/flight.h"
#include "memory/staging.h"
#include "runtime/backend.h"

#include <hwloc.h>
#include <stdatomic.h>

/* Keyed copies queued per lane (> RF__KEYED_HINTS_PER_LANE: withdrawn ones take room until passed). */
#define RF__THREADS_KRING 8u
/* A keyed hint's ticket: (lane + 1) << RF__THREADS_KSHIFT | the value the lane stores when the copy is done
 * (a copy made inline is ticket 0). */
#define RF__THREADS_KSHIFT 48
#define RF__THREADS_KMASK ((1ull << RF__THREADS_KSHIFT) - 1)

typedef struct rf__tq {
	_Alignas(64) _Atomic int64_t value; /* what this queue has done (monotone) */
	int64_t base;                       /* value at the start of the current run */
	rf__piece_job job;                  /* its current copy, open to helpers */
	/* Copies the caller takes over (rf__threads_steal): the last block claimed by either side, the last
	 * one the caller copied, and the caller's copy in progress, open to the lane's help. */
	_Alignas(64) _Atomic int64_t claimed;
	_Atomic int64_t stolen;
	rf__piece_job sjob;
} rf__tq;

typedef struct rf__threads rf__threads;
struct rf__threads_lane;

/* What the walkers of one program share besides its rf__run: what stops them, its first failure, and
 * how they copy and wait. A run's queues share the run's; each keyed copy's walker has its own, so that
 * a keyed copy never sees or sets a run's stop or failure, nor a run a keyed copy's. */
typedef struct rf__threads_prog {
	atomic_int stop;
	atomic_int first_rc;
	size_t fail_block;
	int fail_value;
	char fail_msg[240]; /* RF_EIO: the failed read's sentence */
	int steal;   /* the caller may take over copies it would wait for (a ring program, no file source) */
	int handoff; /* copies demote what they wrote (the cache handoff) */
	int tickets; /* signal and wait values are keyed tickets' (absolute), not counted from the run's base */
	int64_t spin_ns; /* how long its waits spin before they sleep */
} rf__threads_prog;

/* A private copy of the run (its failure fields are this walker's), its lane (NULL: the caller) and its
 * program's shared state. A keyed hint's walker also names its work item (claimed before the copy: a
 * withdrawn hint copies nothing) and its ticket (what its slot's failure mark says). */
typedef struct rf__walker {
	rf__threads *t;
	rf__run run;
	struct rf__threads_lane *lane;
	rf__threads_prog *ps;
	rf__work *item;
	rf__kticket ticket;
} rf__walker;

/* A keyed copy as a one-block program over its request: a hint's COPY then SIGNAL of its ticket on its
 * lane's queue; a copy on the caller's queue, its WAIT for the slot's previous copy (if any) then COPY.
 * The walker's run reads block 0 from k and writes slot k.slot; prepared once, filled per copy. */
typedef struct rf__threads_kprog {
	rf__kcopy k;          /* the request as issued: a file source (k.src.fs.f) is held until it lands */
	rf__op ops[2];
	struct rf_program prog;
	rf__walker wk;
} rf__threads_kprog;

/* A keyed hint: its program as a work item of a lane. */
typedef struct rf__threads_kitem {
	rf__work w;
	rf__threads_kprog p;
	_Atomic int64_t value; /* the lane's value once done (read by lookups on any thread) */
	uint64_t seq;         /* its position in the lane's inbox (reuse: once consumed) */
} rf__threads_kitem;

typedef struct rf__threads_lane {
	rf__threads *t;
	unsigned q;          /* the queue it serves */
	rf__work walk;       /* the current run's walk of queue q */
	rf__threads_kitem kitem[RF__THREADS_KRING];
	rf__threads_prog kps; /* its keyed hints' program state (one at a time) */
	int64_t kposted;     /* the value of the last keyed copy posted (owner) */
	int core;            /* logical index of the core it is counted on, -1: none */
	rf__flight flight;   /* its file copies in flight and the signals behind them */
} rf__threads_lane;

struct rf__threads {
	unsigned nq;
	rf__tq *q;
	rf__threads_lane *lane; /* nq - 1 */
	rf__pool pool;
	rf__ec ec;
	int64_t spin_ns;     /* the wait policy after runs and keyed copies (0: sleep at once) */
	rf__run *run;        /* the run in progress */
	rf__threads_prog rs; /* its program state (its spin_ns: the wait policy within a run) */
	atomic_uint active; /* lanes still walking it */
	rf__threads_prog kps;   /* the keyed copies the caller makes (demand copies; every one without lanes) */
	rf__threads_kprog kown; /* ... and the program of the one it makes now */
	int handoff_fixed;   /* the handoff of runs on the lanes when it is not one of the compared arms */
	char handoff_why[320]; /* the handoff and overlap policies, for describe */
	int overlap_mode;
	rf__sch sch;     /* the schedules compared (threads_sched.h) */
	char note[256];  /* the last comparison, for describe */
	unsigned nslots;
	hwloc_topology_t topo;
	char placement[512];
	hwloc_obj_t cand[RF_MAX_QUEUES];
	unsigned ncand;
	hwloc_obj_t home;
	int avoid_home;
	hwloc_bitmap_t scratch;
	void *cand_sets;
	const rf__staging_policy *staging;
	unsigned char *ring; /* the slots (registered with the lanes' readers) */
	size_t ring_len;
};

/* Placement (threads_place.c): pin the lanes (at open, within the CPU list `cpus`, "": the caller's
 * binding), follow the caller (per run), let go (close). */
void rf__threads_pin(rf__threads *t, const char *cpus);
void rf__threads_follow(rf__threads *t);
void rf__threads_unpin(rf__threads *t, int owned);

/* The walks (threads_walk.c). A run's queue q, on lane (NULL: the caller); a failure stops the run. */
void rf__threads_walk(rf__threads *t, rf__run *run, unsigned q, rf__threads_lane *lane);
/* A keyed copy's program, on its lane or the caller, with a run's handlers: RF_OK, or a copy's failure on
 * the caller (a hint's failed read on a lane is marked in its slot; its signal still goes out). */
int rf__threads_walk_keyed(rf__walker *wk);
/* Prepare the keyed copies' programs (threads_keyed.c), at open once the lanes are set up, and give
 * them the slots once allocated. */
void rf__threads_kopen(rf__threads *t, size_t slot_stride);
void rf__threads_kslots(rf__threads *t);

/* The backend's k* methods (threads_keyed.c). */
int rf__threads_kpost(void *ctx, const rf__kcopy *op, rf__kticket *out);
/* After a run: keyed tickets continue from where the run left the lanes' values. */
void rf__threads_kafter_run(rf__threads *t);

#endif
