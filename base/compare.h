/* base/compare.h — the one comparator: choose among arms (schedules, ring depths, reads in flight) by
 * measuring them; pure functions of the samples given (the callers time).
 *  - The statistic: an arm's figure is the mean of its samples with the mean's standard error (their
 *    standard deviation / sqrt(count)); a figure measured otherwise (a rate over a stretch) comes with
 *    its own error.
 *  - Keep the best (rf__cmp_pick): in preference order, arm i replaces the kept arm w only when better
 *    (lower; higher with `higher`) by more than margin x w's figure AND z x sqrt(err_i^2 + err_w^2).
 *  - Try the next, stop: a comparison (rf__cmp_note) takes `rounds` samples of each arm in turns from
 *    `first` (a drift of the machine falls on every arm alike), then keeps rf__cmp_pick's arm; the next
 *    comparison's samples count twice the earlier ones. A ladder (arms that pay only in order: more
 *    reads in flight) measures the next arm while the last one beats the one before it. */
#ifndef RF_BASE_COMPARE_H
#define RF_BASE_COMPARE_H

#define RF__CMP_ARMS 4u /* the most arms one rf__cmp holds */

typedef struct rf__cmp_rule {
	double margin; /* a fraction of the kept figure (figures >= 0) */
	double z;      /* standard errors of the difference (0: the margin alone) */
	int higher;    /* 1: higher figures are better (rates); 0: lower (times) */
} rf__cmp_rule;

/* The kept arm of n >= 1 figures with their errors (err NULL: none), by the rule. */
unsigned rf__cmp_pick(const rf__cmp_rule *r, const double *fig, const double *err, unsigned n);

typedef struct rf__cmp {
	rf__cmp_rule rule;
	unsigned narms, rounds, first; /* arms (1..RF__CMP_ARMS), samples of each per comparison, first turn */
	unsigned k, compared, best;    /* samples in this comparison; comparisons ended; the arm kept last */
	double sum[RF__CMP_ARMS], sq[RF__CMP_ARMS], weight; /* samples and squares, earlier comparisons' halved */
	double fig[RF__CMP_ARMS], err[RF__CMP_ARMS];        /* mean and standard error, at the last end */
} rf__cmp;

void rf__cmp_init(rf__cmp *c, rf__cmp_rule rule, unsigned narms, unsigned rounds, unsigned first);
unsigned rf__cmp_turn(const rf__cmp *c); /* the arm the next sample is for */
/* A sample x of rf__cmp_turn's arm: 1 when it ended a comparison (fig, err, best are new), else 0. */
int rf__cmp_note(rf__cmp *c, double x);

#endif
