/* runtime/trace.h — per-run event recording for Chrome traces (Perfetto, chrome://tracing). Each
 * queue's walker appends to its own array (no sharing, no locks), sized before the run: recording
 * never allocates. */
#ifndef RF_RUNTIME_TRACE_H
#define RF_RUNTIME_TRACE_H

#include "base/wait.h"
#include "graph/program.h"

#include <stdatomic.h>
#include <stdio.h>
#include <sys/types.h>

typedef struct rf__tev {
	int64_t t0, t1;  /* ns, CLOCK_MONOTONIC */
	uint64_t s0, s1; /* positions of start and end in the run's one sequence (for the oracle) */
	int64_t block;
	uint32_t slot;  /* STAGE: the staging slot */
	uint32_t node; /* graph node id (rf_exec); template op for a ring; a keyed copy's lane */
	uint8_t kind;  /* RF_OP_COPY, RF_OP_COMPUTE or RF_OP_STAGE */
} rf__tev;

typedef struct rf__trace {
	unsigned nq;
	rf__tev *ev[RF_MAX_QUEUES];
	size_t n[RF_MAX_QUEUES], cap[RF_MAX_QUEUES]; /* events beyond cap are dropped (sampled traces) */
	/* Sampling (depth = auto's measuring run): of blocks in groups of `group` (the depth), kept are the
	 * groups g, g+1 with g % every == 0, so a slot's refill and the block that freed it stay together
	 * (every <= 2: all). Only a `sampled` trace drops the rest; a full one is filtered by its reader. */
	uint64_t group, every;
	int sampled;
	/* Keyed copies (runtime/keyed.c): one queue, entry i the i-th copy issued since the last write, filled
	 * by whichever thread makes it (rf__trace_kcopy); block is the key; t1 == 0: never made (withdrawn). */
	int keyed;
	/* Every start and end of a copy or compute takes the next number. Relaxed: the modification order
	 * follows happens-before (an op that ran after another gets larger numbers), and the counter adds
	 * no synchronisation that could hide a race from ThreadSanitizer. */
	atomic_ullong seq;
} rf__trace;

static inline uint64_t rf__trace_seq(rf__trace *t)
{
	return atomic_fetch_add_explicit(&t->seq, 1, memory_order_relaxed);
}

/* Is `block` one of the sampled blocks (see rf__trace.group)? */
static inline int rf__trace_keeps(const rf__trace *t, int64_t block)
{
	return t->every <= 2 || ((uint64_t)block / t->group) % t->every < 2;
}

static inline void rf__trace_add(rf__trace *t, unsigned q, uint8_t kind, int64_t block, unsigned slot,
				 uint32_t node, int64_t t0, int64_t t1, uint64_t s0)
{
	if ((t->sampled && !rf__trace_keeps(t, block)) || t->n[q] == t->cap[q])
		return;
	rf__tev e = {t0, t1, s0, rf__trace_seq(t), block, slot, node, kind};
	t->ev[q][t->n[q]++] = e;
}

/* A keyed copy's slice: its start (t0, s0) before the copy, then the rest into entry `at`, which the
 * owner gave this copy alone and reads once keyed copies are quiesced. t NULL: not traced. */
typedef struct rf__tspan {
	int64_t t0;
	uint64_t s0;
} rf__tspan;

static inline rf__tspan rf__trace_kstart(rf__trace *t)
{
	return t != NULL ? (rf__tspan){rf__now_ns(), rf__trace_seq(t)} : (rf__tspan){0, 0};
}

/* The same, ended at t1, into a trace that is on (a walk's keyed copy: runtime/walk.h). */
static inline void rf__trace_kslice(rf__trace *t, uint32_t at, rf__tspan sp, int64_t t1, uint64_t key,
				    unsigned slot, unsigned lane)
{
	t->ev[0][at] = (rf__tev){sp.t0, t1, sp.s0, rf__trace_seq(t), (int64_t)key, slot, lane, RF_OP_COPY};
}

static inline void rf__trace_kcopy(rf__trace *t, uint32_t at, rf__tspan sp, uint64_t key, unsigned slot,
				   unsigned lane)
{
	if (t != NULL)
		rf__trace_kslice(t, at, sp, rf__now_ns(), key, slot, lane);
}

/* Size the per-queue arrays for a run of prog over nblocks (a ring's queue 0 with room for every copy:
 * the threads backend's caller takes over copies): every event (sampled 0), or those of about `samples`
 * blocks in groups of `group` (sampled 1: memory independent of nblocks). RF_OK or RF_ENOMEM. */
int rf__trace_begin(rf__trace *t, const struct rf_program *prog, size_t nblocks, int sampled, unsigned group,
		    size_t samples);
/* Append the events to the file at path (created if needed; one write under an exclusive flock);
 * `label` names the process track. Only a blank file or a JSON array of objects (perhaps left open by
 * an older version) is written; a failed write leaves the file as it was. RF_OK; RF_EBACKEND (not a
 * regular file, not a trace-event array, the write failed); RF_ENOMEM. */
int rf__trace_write(const rf__trace *t, const char *path, const char *label);
/* Release the arrays without writing. */
void rf__trace_drop(rf__trace *t);
/* All n bytes of p into fd at *off (advanced), or at the file offset when off is NULL: a short write is
 * continued, EINTR retried. 0, or -1 with errno set (EIO when nothing more could be written). */
int rf__write_all(int fd, const void *p, size_t n, off_t *off);
/* Record the traced copies of flight f (io/flight.h) as slices of t (COPY, or STAGE as the record says),
 * from their start to their landing; t NULL: no more. The flight's thread, between its runs. */
struct rf__flight;
void rf__trace_flight(struct rf__flight *f, rf__trace *t);
/* That hook (ctx: the trace), for an owner whose flight has a hook of its own: a traced copy is stamped
 * as it starts, a slice once it landed (a failed one is no slice). */
struct rf__flight_rec;
void rf__trace_copy(void *ctx, struct rf__flight_rec *r, int phase);

#endif
