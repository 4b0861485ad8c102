/* runtime/autodepth.c — the depth = auto rules (runtime/autodepth.h): pure functions of samples. */
#include "runtime/autodepth.h"
#include "base/alloc.h"
#include "base/error.h"
#include "runtime/trace.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

_Static_assert(RF__AUTO_NCAND <= RF__CMP_ARMS, "one comparator holds the candidates");

static int rf__cmp_i64(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
	return (x > y) - (x < y);
}

/* The 90th percentile of v[0..n) (n > 0; sorted in place). */
static double rf__p90(int64_t *v, size_t n)
{
	qsort(v, n, sizeof *v, rf__cmp_i64);
	return (double)v[(n * 9) / 10 < n ? (n * 9) / 10 : n - 1];
}

static double rf__mean(const int64_t *v, size_t n)
{
	double sum = 0;
	for (size_t i = 0; i < n; i++)
		sum += (double)v[i];
	return sum / (double)n;
}

unsigned rf__auto_rule(rf__auto_samples *s, unsigned kq, unsigned max, rf__auto_summary *sum)
{
	if (s->ncopy == 0 || s->ncompute == 0)
		return 0;
	rf__auto_summary x;
	x.copy_mean = rf__mean(s->copy, s->ncopy);
	x.compute_mean = rf__mean(s->compute, s->ncompute);
	x.copy_p90 = rf__p90(s->copy, s->ncopy);
	x.refill_p90 = s->nrefill ? rf__p90(s->refill, s->nrefill) : x.copy_p90;
	unsigned lo = rf__ring_busy_depth(kq), d;
	double m = x.compute_mean;
	if (m <= 0 || x.copy_mean >= m * kq) {
		d = lo + (x.copy_p90 > 1.5 * x.copy_mean);
	} else {
		double r = x.refill_p90 / m;
		d = r >= RF__AUTO_MAX_DEPTH ? RF__AUTO_MAX_DEPTH : 1 + (unsigned)r + ((double)(unsigned)r < r);
	}
	d = d < lo ? lo : d;
	*sum = x;
	return d > max ? max : d;
}

unsigned rf__auto_reads_depth(double inflight, double block, unsigned lo, unsigned max)
{
	double k = block > 0 && inflight > 0 ? ceil(inflight / block - 1e-9) : 0;
	unsigned d = k >= max ? max : 1 + (unsigned)k;
	d = d < lo ? lo : d;
	return d > max ? max : d;
}

/* A compute's end, by block: refill latencies pair each sampled copy with it. Block first: rf__cmp_i64
 * orders them by block (a pointer to a struct points to its first member). */
typedef struct rf__auto_end {
	int64_t block, t1;
} rf__auto_end;

int rf__auto_collect(const rf__trace *t, unsigned depth, rf__auto_samples *s)
{
	const size_t cap = RF__AUTO_SAMPLES;
	memset(s, 0, sizeof *s);
	rf__auto_end *ends = rf__malloc(cap * sizeof *ends);
	int64_t *v = rf__malloc(3 * cap * sizeof *v); /* copy, refill, compute: one block, freed by copy */
	if (ends == NULL || v == NULL) {
		free(ends);
		free(v);
		return rf__err(RF_ENOMEM, "depth auto: out of memory for samples");
	}
	s->copy = v;
	s->refill = v + cap;
	s->compute = v + 2 * cap;
	/* A full trace (tracing or the oracle on) holds every block: take the sampled ones only. */
	size_t nend = 0;
	for (unsigned q = 0; q < t->nq; q++)
		for (size_t i = 0; i < t->n[q] && nend < cap; i++) {
			const rf__tev *e = &t->ev[q][i];
			if (e->kind == RF_OP_COMPUTE && rf__trace_keeps(t, e->block)) {
				s->compute[s->ncompute++] = e->t1 - e->t0;
				ends[nend++] = (rf__auto_end){e->block, e->t1};
			}
		}
	qsort(ends, nend, sizeof *ends, rf__cmp_i64);
	for (unsigned q = 0; q < t->nq; q++)
		for (size_t i = 0; i < t->n[q] && s->ncopy < cap; i++) {
			const rf__tev *e = &t->ev[q][i];
			if (e->kind != RF_OP_COPY || !rf__trace_keeps(t, e->block))
				continue;
			s->copy[s->ncopy++] = e->t1 - e->t0;
			rf__auto_end key = {e->block - (int64_t)depth, 0};
			const rf__auto_end *f = NULL;
			if (key.block >= 0)
				f = bsearch(&key, ends, nend, sizeof *ends, rf__cmp_i64);
			if (f != NULL)
				s->refill[s->nrefill++] = e->t1 - f->t1;
		}
	free(ends);
	return RF_OK;
}

void rf__auto_samples_free(rf__auto_samples *s)
{
	free(s->copy);
	memset(s, 0, sizeof *s);
}

unsigned rf__auto_candidates(unsigned d, unsigned max, unsigned cand[RF__AUTO_NCAND])
{
	unsigned n = 0;
	for (unsigned k = 0, c = d; k < RF__AUTO_NCAND && c <= max; k++, c *= 2)
		cand[n++] = c;
	if (n < RF__AUTO_NCAND && cand[n - 1] < max && cand[n - 1] * 2 > max)
		cand[n++] = max;
	return n;
}

void rf__auto_probe_start(rf__auto_probe *pr, const unsigned *cand, unsigned n)
{
	memset(pr, 0, sizeof *pr);
	pr->n = n;
	memcpy(pr->cand, cand, n * sizeof *cand);
	rf__cmp_init(&pr->cmp, (rf__cmp_rule){.margin = 0.01}, n, RF__AUTO_ROUNDS, 0);
}
