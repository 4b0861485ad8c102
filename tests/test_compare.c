/* tests/test_compare.c — base/compare.h, the one comparator behind the threads schedule, depth = auto's
 * probe and the reader's read-ahead ladder: its statistic (mean and standard error), its rule (margin
 * and noise, preference order), its turns and the weight of earlier comparisons. Synthetic samples, no
 * clock. White-box (static library). */
#include <criterion/criterion.h>

#include "base/compare.h"

#include <math.h>

static const rf__cmp_rule times3 = {.margin = 0.03};      /* lower is better, by 3 % */
static const rf__cmp_rule rates_z1 = {.z = 1, .higher = 1}; /* higher is better, beyond the noise */

Test(compare, pick_keeps_the_earliest_unless_beaten_by_the_margin)
{
	double a[2] = {100, 90}, b[2] = {100, 98}, c[2] = {100, 100}, d[3] = {100, 80, 79}, e[3] = {100, 80, 70};
	cr_assert_eq(rf__cmp_pick(&times3, a, NULL, 2), 1u, "10 % lower");
	cr_assert_eq(rf__cmp_pick(&times3, b, NULL, 2), 0u, "2 %: within the margin");
	cr_assert_eq(rf__cmp_pick(&times3, c, NULL, 2), 0u, "a tie keeps the first");
	cr_assert_eq(rf__cmp_pick(&times3, d, NULL, 3), 1u, "the third must beat the kept one, not the first");
	cr_assert_eq(rf__cmp_pick(&times3, e, NULL, 3), 2u);
	cr_assert_eq(rf__cmp_pick(&times3, e, NULL, 1), 0u, "one arm: no choice");
	const rf__cmp_rule higher = {.margin = 0.03, .higher = 1};
	cr_assert_eq(rf__cmp_pick(&higher, a, NULL, 2), 0u, "higher is better: 90 does not beat 100");
	double f[2] = {100, 104};
	cr_assert_eq(rf__cmp_pick(&higher, f, NULL, 2), 1u);
}

Test(compare, a_gain_within_the_noise_does_not_count)
{
	/* 1 -> 2: a gain of 1 against errors of 1.1 and 0: the difference's error 1.1 */
	double fig[2] = {1, 2}, err[2] = {0, 1.1};
	cr_assert_eq(rf__cmp_pick(&rates_z1, fig, err, 2), 0u);
	/* errors of 0.5 each: the difference's 0.71, the gain counts */
	double err2[2] = {0.5, 0.5};
	cr_assert_eq(rf__cmp_pick(&rates_z1, fig, err2, 2), 1u);
	/* both must hold: beyond the noise but within the margin keeps the first */
	const rf__cmp_rule both = {.margin = 1.2, .z = 1, .higher = 1};
	cr_assert_eq(rf__cmp_pick(&both, fig, err2, 2), 0u, "a 100 %% gain within a 120 %% margin");
	cr_assert_eq(rf__cmp_pick(&rates_z1, fig, NULL, 2), 1u, "no errors given: the margin alone");
}

/* One comparison of narms arms: sample k of arm a is x[a][k / narms]. */
static int run(rf__cmp *c, const double x[][4])
{
	int ended = 0;
	for (unsigned k = 0; k < c->narms * c->rounds; k++) {
		cr_assert_eq(ended, 0, "the comparison ended at sample %u of %u", k, c->narms * c->rounds);
		unsigned a = rf__cmp_turn(c);
		ended = rf__cmp_note(c, x[a][k / c->narms]);
	}
	return ended;
}

Test(compare, turns_alternate_from_the_first_arm)
{
	rf__cmp c;
	rf__cmp_init(&c, times3, 3, 2, 1);
	unsigned seen[6], want[6] = {1, 2, 0, 1, 2, 0};
	for (unsigned k = 0; k < 6; k++) {
		seen[k] = rf__cmp_turn(&c);
		cr_assert_eq(rf__cmp_note(&c, 1), k == 5, "sample %u", k);
	}
	cr_assert_arr_eq(seen, want, sizeof want);
	cr_assert_eq(rf__cmp_turn(&c), 1u, "the next comparison starts where this one did");
	cr_assert_eq(c.compared, 1u);
	rf__cmp_init(&c, times3, 1, 3, 5);
	cr_assert_eq(rf__cmp_turn(&c), 0u, "one arm: always its turn");
}

Test(compare, the_figure_is_the_mean_with_its_standard_error)
{
	rf__cmp c;
	rf__cmp_init(&c, rates_z1, 2, 4, 0);
	const double x[2][4] = {{1, 3, 1, 3}, {5, 5, 5, 5}};
	cr_assert(run(&c, x));
	cr_assert_float_eq(c.fig[0], 2, 1e-12);
	cr_assert_float_eq(c.err[0], sqrt(4.0 / 3 / 4), 1e-12, "sd / sqrt(n): %g", c.err[0]);
	cr_assert_float_eq(c.fig[1], 5, 1e-12);
	cr_assert_float_eq(c.err[1], 0, 1e-12);
	cr_assert_eq(c.best, 1u);
	/* the mean, not the median: a run held up counts for what it cost */
	rf__cmp_init(&c, times3, 2, 4, 0);
	const double y[2][4] = {{100, 101, 99, 100}, {70, 400, 71, 72}};
	cr_assert(run(&c, y));
	cr_assert_eq(c.best, 0u, "typical 71, mean 153");
	/* one sample: no spread to speak of */
	rf__cmp_init(&c, times3, 2, 1, 0);
	const double z[2][4] = {{3}, {1}};
	cr_assert(run(&c, z));
	cr_assert(c.err[0] == 0 && c.err[1] == 0);
	cr_assert_eq(c.best, 1u);
}

Test(compare, earlier_comparisons_count_half_each_time)
{
	rf__cmp c;
	rf__cmp_init(&c, times3, 2, 4, 0);
	double x[2][4] = {{100, 100, 100, 100}, {80, 80, 80, 80}};
	cr_assert(run(&c, x));
	cr_assert_eq(c.best, 1u);
	/* one comparison that says arm 1 is 5 % slower does not undo a 20 % gain: (80 x 2 + 105 x 4) / 6 */
	for (unsigned k = 0; k < 4; k++)
		x[1][k] = 105;
	cr_assert(run(&c, x));
	cr_assert_float_eq(c.fig[1], (80 * 2.0 + 105 * 4) / (2 + 4), 1e-9);
	cr_assert_float_eq(c.fig[0], 100, 1e-9);
	cr_assert_eq(c.best, 1u);
	/* a second one that says so does */
	for (unsigned k = 0; k < 4; k++)
		x[1][k] = 120;
	cr_assert(run(&c, x));
	cr_assert_float_eq(c.fig[1], ((80 * 2.0 + 105 * 4) / 2 + 120 * 4) / (3 + 4), 1e-9);
	cr_assert_eq(c.best, 0u);
	cr_assert_eq(c.compared, 3u);
}

/* The ladder as the reader climbs it: the next arm while the last one is kept, stop at the first that
 * is not, keeping the one before it. */
static unsigned climb(const double *rate, const double *err, unsigned n)
{
	unsigned i = 0;
	while (i + 1 < n && rf__cmp_pick(&rates_z1, rate + i, err + i, 2) == 1)
		i++;
	return i;
}

Test(compare, a_ladder_stops_at_the_first_arm_that_does_not_pay)
{
	double knee[5] = {1, 2, 4, 4, 4}, rising[5] = {1, 2, 3, 4, 5}, e[5] = {0.05, 0.05, 0.05, 0.05, 0.05};
	cr_assert_eq(climb(knee, e, 5), 2u);
	cr_assert_eq(climb(rising, e, 5), 4u, "rising all the way");
	double noisy[5] = {1.5, 1.5, 1.5, 1.5, 1.5};
	cr_assert_eq(climb(rising, noisy, 5), 0u, "a rise of 1 with errors of 1.5 each does not pay");
}
