/* io/ahead.c — how many reads the reader keeps in flight, chosen online (io/reader.h,
 * rf__reader_ahead): the ladder's rule over the rates measured at each setting, and the measurement of a
 * setting as its reads land. The window's chunks (io/window.c) and the copies read on their own
 * (io/pieces.c) climb it alike. */
#include "io/reader_int.h"
#include "base/compare.h"

#include <math.h>

unsigned rf__reader_ahead_rule(rf__reader_ahead *a, double rate, double err)
{
	static const rf__cmp_rule pays = {.z = 1, .higher = 1}; /* more in flight: a rise beyond the noise */
	if (a->settled)
		return a->on;
	unsigned i = 0;
	while ((2u << i) <= a->on && i + 1 < RF__READER_AHEAD_SETTINGS)
		i++;
	a->rate[i] = rate;
	a->err[i] = err;
	unsigned lo = i > 0 && a->rate[i - 1] > 0 ? i - 1 : i; /* the setting kept before this one */
	unsigned w = lo + rf__cmp_pick(&pays, a->rate + lo, a->err + lo, i + 1 - lo);
	a->settled = w < i || i + 1 == RF__READER_AHEAD_SETTINGS || (2u << i) > a->max; /* back, for good; or top */
	a->on = a->settled ? 1u << w : 2u << i;
	return a->on;
}

void rf__reader_ahead_start(rf__reader_ahead *a, unsigned max, unsigned need, unsigned from)
{
	*a = (rf__reader_ahead){.on = 1, .max = max ? max : 1};
	while ((a->on * 2 <= from || a->on < need) && a->on * 2 <= a->max && a->on * 2 < (1u << RF__READER_AHEAD_SETTINGS))
		a->on *= 2;
	a->settled = a->on >= a->max;
}

void rf__reader_ahead_sample(uint64_t bytes, double seconds, unsigned n, double sum, double sumsq, double *rate,
			     double *err)
{
	*rate = seconds > 0 ? (double)bytes / seconds : 0;
	double mu = n > 1 ? sum / n : 0, var = n > 1 ? (sumsq - n * mu * mu) / (n - 1) : 0;
	*err = var > 0 ? sqrt(var / n) : 0;
}

void rf__reader_meas_start(rd_meas *m)
{
	if (m->landed == 0 && m->t0 == 0)
		m->t0 = m->last = rf__now_ns();
}

void rf__reader_meas_landed(rf__reader *r, rf__reader_ahead *a, rd_meas *m, uint64_t bytes)
{
	m->bytes += bytes;
	m->round += bytes;
	if (++m->landed % a->on != 0)
		return;
	int64_t t = rf__now_ns();
	double d = (double)(t - m->last) * 1e-9, x = d > 0 ? (double)m->round / d : 0; /* a round's rate */
	m->last = t, m->round = 0;
	m->sum += x, m->sq += x * x;
	if (m->landed < RF__READER_AHEAD_ROUNDS * a->on)
		return;
	double rate, err;
	rf__reader_ahead_sample(m->bytes, (double)(t - m->t0) * 1e-9, RF__READER_AHEAD_ROUNDS, m->sum, m->sq, &rate, &err);
	r->ahead_rule(a, rate, err);
	r->gen++; /* describe shows the rates so far */
	*m = (rd_meas){.t0 = a->settled ? 0 : t, .last = t};
}
