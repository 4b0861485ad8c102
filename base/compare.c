/* base/compare.c — the comparator (base/compare.h). */
#include "base/compare.h"

#include <math.h>

unsigned rf__cmp_pick(const rf__cmp_rule *r, const double *fig, const double *err, unsigned n)
{
	unsigned w = 0;
	for (unsigned i = 1; i < n; i++) {
		double gain = r->higher ? fig[i] - fig[w] : fig[w] - fig[i];
		double noise = err ? sqrt(err[i] * err[i] + err[w] * err[w]) : 0;
		if (gain > r->margin * fig[w] && gain > r->z * noise)
			w = i;
	}
	return w;
}

void rf__cmp_init(rf__cmp *c, rf__cmp_rule rule, unsigned narms, unsigned rounds, unsigned first)
{
	*c = (rf__cmp){.rule = rule, .narms = narms, .rounds = rounds, .first = first % narms};
}

unsigned rf__cmp_turn(const rf__cmp *c)
{
	return (c->first + c->k) % c->narms;
}

int rf__cmp_note(rf__cmp *c, double x)
{
	unsigned arm = rf__cmp_turn(c);
	c->sum[arm] += x;
	c->sq[arm] += x * x;
	if (++c->k < c->narms * c->rounds)
		return 0;
	double n = c->weight += c->rounds;
	for (unsigned i = 0; i < c->narms; i++) {
		double m = c->sum[i] / n, var = n > 1 ? (c->sq[i] - n * m * m) / (n - 1) : 0;
		c->fig[i] = m;
		c->err[i] = var > 0 ? sqrt(var / n) : 0;
		c->sum[i] /= 2, c->sq[i] /= 2; /* the next comparison's samples count twice these */
	}
	c->weight /= 2;
	c->best = rf__cmp_pick(&c->rule, c->fig, c->err, c->narms);
	c->k = 0;
	c->compared++;
	return 1;
}
