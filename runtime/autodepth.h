/* runtime/autodepth.h — the depth = auto controller as pure rules over samples (docs/tuning.md), apart
 * from the shell in runtime/pipeline.c that measures runs and swaps ring programs:
 *
 *   1. the first run at the starting depth is measured, sampled (at most RF__AUTO_SAMPLES blocks,
 *      spread over the run, whatever nblocks), and rf__auto_rule turns the samples into a depth d;
 *   2. the candidates d, 2d, 4d (within the slots) are each run RF__AUTO_ROUNDS times, in turn, and
 *      rf__auto_probe_next keeps the fastest by median.
 *
 * On a device backend (RF__CAP_DEVICE) step 1 is skipped: the host only enqueues there, so a traced
 * run times the enqueue, not the device. Its slots hold rf__auto_ladder_top(lo) (or what the budget
 * allows) and step 2 probes lo, 2 lo, 4 lo from the first run on, by run time (a run ends with the
 * device synchronised, so its wall time is the device's).
 *
 * Nothing here reads a clock or touches a pipeline, so tests drive it with synthetic samples. */
#ifndef RF_RUNTIME_AUTODEPTH_H
#define RF_RUNTIME_AUTODEPTH_H

#include <stddef.h>
#include <stdint.h>

struct rf__trace;

/* depth = auto never goes deeper than this (nor than the memory budget allows). */
#define RF__AUTO_MAX_DEPTH 16u
/* After the rule: up to this many candidate depths (the rule's d, 2d, 4d), each tried this many times
 * over the following runs, alternating, before the fastest is kept. */
#define RF__AUTO_NCAND 3u
#define RF__AUTO_ROUNDS 3u
/* A measuring run records the events of at most about this many blocks (runtime/trace.h, sampled). */
#define RF__AUTO_SAMPLES 4096u

/* What a measuring run saw, in ns: copy durations, refill latencies (from the end of the compute that
 * freed a slot to the end of the copy that refilled it) and compute durations. */
typedef struct rf__auto_samples {
	int64_t *copy, *refill, *compute;
	size_t ncopy, nrefill, ncompute;
} rf__auto_samples;

/* The figures the rule decided on (for rf_pipeline_describe). */
typedef struct rf__auto_summary {
	double copy_mean, copy_p90, refill_p90, compute_mean;
} rf__auto_summary;

/*
 * The rule: f(samples) -> depth. A ring of depth d gives a refill d-1 computes of slack, so
 * d = 1 + ceil(L90 / m), with L90 the 90th percentile refill latency and m the mean compute: the extra
 * slots absorb slow or late copies. When copies are the bottleneck (mean copy >= kq x m) no depth makes
 * them faster: keep every copy queue busy (kq+1), plus one slot when copy times are jittery (p90 > 1.5 x
 * mean). Never below kq+1 (2 for one queue), never above max. Sorts the arrays in place.
 * Returns 0 (and leaves *sum alone) when there is nothing to learn from: no copy or no compute.
 */
unsigned rf__auto_rule(rf__auto_samples *s, unsigned kq, unsigned max, rf__auto_summary *sum);

/* The samples of a measuring run's events (a ring of `depth` slots): bounded by the trace's sampling,
 * at most RF__AUTO_SAMPLES of each kind. RF_OK or RF_ENOMEM; free with rf__auto_samples_free. */
int rf__auto_collect(const struct rf__trace *t, unsigned depth, rf__auto_samples *s);
void rf__auto_samples_free(rf__auto_samples *s);

/* Probing the rule's choice d against deeper rings. */
typedef struct rf__auto_probe {
	unsigned n;                 /* candidates (1: nothing to probe) */
	unsigned cur;               /* the candidate the next run uses */
	unsigned probes;            /* probe runs noted so far */
	unsigned cand[RF__AUTO_NCAND];
	double runs[RF__AUTO_NCAND][RF__AUTO_ROUNDS]; /* ns per byte (per block for empty blocks) */
	double best[RF__AUTO_NCAND];                  /* medians, once probing is over */
} rf__auto_probe;

/* Candidates for the rule's d under `max` slots: d, 2d, 4d, and max itself when the next doubling
 * would pass it (e.g. 5, 10, 16 under 16). Returns how many (>= 1; d <= max). */
unsigned rf__auto_candidates(unsigned d, unsigned max, unsigned cand[RF__AUTO_NCAND]);

/* The deepest rung of the ladder lo, 2 lo, 4 lo that device backends probe: the slots they need. */
static inline unsigned rf__auto_ladder_top(unsigned lo)
{
	return lo << (RF__AUTO_NCAND - 1);
}

/* Start probing pr->cand[0 .. n). */
void rf__auto_probe_start(rf__auto_probe *pr, const unsigned *cand, unsigned n);

/* A probe run of candidate pr->cur took x. Returns 1 while probing goes on (pr->cur is the candidate
 * for the next run), 0 when it is over: *win is then the index of the fastest candidate by median (a
 * deeper ring must beat a shallower one by 1 %: fewer slots in flight is the tie-break). */
int rf__auto_probe_next(rf__auto_probe *pr, double x, unsigned *win);

#endif
