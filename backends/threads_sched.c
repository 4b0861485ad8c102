/* backends/threads_sched.c — the threads backend's choice of schedule (backends/threads_sched.h). */
#include "backends/threads_sched.h"

#include <string.h>

static unsigned rf__sch_log2(uint64_t x)
{
	return 63u - (unsigned)__builtin_clzll(x | 1);
}

uint32_t rf__sch_shape(uint64_t bytes, size_t nblocks)
{
	uint64_t n = nblocks ? nblocks : 1;
	unsigned b = rf__sch_log2(bytes / n), k = rf__sch_log2(n);
	return 1u << 16 | (uint32_t)b << 8 | (k > 12 ? 12 : k);
}

double rf__sch_mean(const double *v, unsigned n)
{
	double sum = 0;
	for (unsigned i = 0; i < n; i++)
		sum += v[i];
	return sum / (double)(n ? n : 1);
}

unsigned rf__sch_best(const double *fig, unsigned n)
{
	unsigned w = 0;
	for (unsigned i = 1; i < n; i++)
		if (fig[i] < fig[w] * RF__SCH_MARGIN)
			w = i;
	return w;
}

void rf__sch_init(rf__sch *s, const unsigned *arms, unsigned narms)
{
	memset(s, 0, sizeof *s);
	s->narms = narms;
	memcpy(s->arms, arms, narms * sizeof *arms);
}

const char *rf__sch_name(unsigned arm)
{
	return arm == RF__SCH_INLINE ? "inline" : arm == RF__SCH_HANDOFF ? "lanes + handoff" : "lanes";
}

/* The class of `shape`: its own, else a free one, else the least recently used (forgotten). */
static rf__sch_class *rf__sch_class_of(rf__sch *s, uint32_t shape)
{
	rf__sch_class *c = NULL;
	for (unsigned i = 0; i < RF__SCH_CLASSES; i++) {
		rf__sch_class *x = &s->c[i];
		if (x->shape == shape)
			return x;
		if (c == NULL || (c->shape != 0 && (x->shape == 0 || x->used < c->used)))
			c = x;
	}
	memset(c, 0, sizeof *c);
	c->shape = shape;
	c->probing = 1;
	c->interval = RF__SCH_RECHECK;
	c->choice = s->arms[0];
	return c;
}

/* The arm of a comparison's k-th run: the arms in turn, the second in preference order first. */
static unsigned rf__sch_turn(const rf__sch *s, unsigned k)
{
	return s->arms[(1 + k) % s->narms];
}

unsigned rf__sch_pick(rf__sch *s, uint32_t shape, rf__sch_class **cp)
{
	rf__sch_class *c = rf__sch_class_of(s, shape);
	c->used = ++s->clock;
	*cp = c;
	if (s->narms < 2)
		return s->arms[0];
	if (!c->probing && c->left == 0) { /* time to compare again */
		c->probing = 1;
		c->probes = 0;
	}
	if (c->probing)
		return rf__sch_turn(s, c->probes);
	c->left--;
	return c->choice;
}

int rf__sch_note(rf__sch *s, rf__sch_class *c, unsigned arm, double x)
{
	if (s->narms < 2 || !c->probing || arm != rf__sch_turn(s, c->probes))
		return 0;
	c->x[(1 + c->probes) % s->narms][c->probes / s->narms] = x;
	if (++c->probes < s->narms * RF__SCH_ROUNDS)
		return 0;
	c->weight = c->weight / 2 + RF__SCH_ROUNDS;
	for (unsigned i = 0; i < s->narms; i++) {
		c->sum[i] = c->sum[i] / 2 + rf__sch_mean(c->x[i], RF__SCH_ROUNDS) * RF__SCH_ROUNDS;
		c->fig[i] = c->sum[i] / c->weight;
	}
	unsigned was = c->choice;
	c->choice = s->arms[rf__sch_best(c->fig, s->narms)];
	/* The same choice again: look less often; a new one (or the first): look again soon. */
	if (c->compared++ == 0 || c->choice != was)
		c->interval = RF__SCH_RECHECK;
	else if (c->interval < RF__SCH_RECHECK_MAX)
		c->interval *= 2;
	c->left = c->interval;
	c->probing = 0;
	c->probes = 0;
	return 1;
}
