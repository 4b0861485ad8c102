/* runtime/autodepth.h — the depth = auto controller (docs/tuning.md) as pure rules over samples: the
 * rule from a measured first run, then the probe of its candidates (a device backend: of the ladder).
 * Nothing here reads a clock or touches a pipeline; runtime/pipeline.c measures and swaps programs. */
#ifndef RF_RUNTIME_AUTODEPTH_H
#define RF_RUNTIME_AUTODEPTH_H

#include "base/compare.h"

#include <stddef.h>
#include <stdint.h>

struct rf__trace;

/* depth = auto never goes deeper than this (nor than the memory budget allows). */
#define RF__AUTO_MAX_DEPTH 16u
/* Candidate depths after the rule (d, 2d, 4d), and the runs each gets before the fastest is kept. */
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

/* The rule. A ring of depth d gives a refill d-1 computes of slack, so d = 1 + ceil(L90 / m), with L90
 * the 90th percentile refill latency and m the mean compute. When copies are the bottleneck (mean copy
 * >= kq x m) no depth helps: kq+1 keeps every copy queue busy, plus one slot when copy times are jittery
 * (p90 > 1.5 x mean). Within kq+1 .. max. Sorts the arrays in place. 0 (and *sum untouched) when there
 * is no copy or no compute to learn from. */
unsigned rf__auto_rule(rf__auto_samples *s, unsigned kq, unsigned max, rf__auto_summary *sum);

/* After a measuring run that read its file blocks ahead in every slot, with the reads in flight chosen
 * online (inflight bytes, in blocks of `block` bytes on average): the depth that keeps as many bytes
 * read ahead while a block computes, 1 + ceil(inflight / block), within lo .. max. */
unsigned rf__auto_reads_depth(double inflight, double block, unsigned lo, unsigned max);

/* The samples of a measuring run's events (a ring of `depth` slots), at most RF__AUTO_SAMPLES of each
 * kind. RF_OK or RF_ENOMEM; free with rf__auto_samples_free. */
int rf__auto_collect(const struct rf__trace *t, unsigned depth, rf__auto_samples *s);
void rf__auto_samples_free(rf__auto_samples *s);

/* Probing the rule's choice d against deeper rings: one comparison (base/compare.h) of the candidates'
 * runs, in turns from d, by their mean ns per byte (per block for empty blocks); a deeper ring must
 * beat a shallower one by more than 1 %. After each run, rf__cmp_note: 0 while probing goes on (the
 * next run's candidate: rf__cmp_turn), 1 when over (the depth kept: cmp.best). */
typedef struct rf__auto_probe {
	unsigned n;   /* candidates (1: nothing to probe) */
	unsigned cur; /* the candidate the engine runs */
	unsigned cand[RF__AUTO_NCAND];
	rf__cmp cmp;  /* cmp.fig: the means, once probing is over */
} rf__auto_probe;

/* Candidates for d <= max: d, 2d, 4d, and max when the next doubling would pass it (5, 10, 16 under
 * 16). Returns how many (>= 1). */
unsigned rf__auto_candidates(unsigned d, unsigned max, unsigned cand[RF__AUTO_NCAND]);

/* Start probing pr->cand[0 .. n). */
void rf__auto_probe_start(rf__auto_probe *pr, const unsigned *cand, unsigned n);

#endif
