/* backends/threads_sched.c — the threads backend's choice of schedule (backends/threads_sched.h). */
#include "backends/threads_sched.h"

#include <stdio.h>
#include <string.h>

#if defined(__x86_64__)
#include <cpuid.h>
#endif

_Static_assert(RF__SCH_NARMS <= RF__CMP_ARMS, "one comparator holds every arm");

uint32_t rf__sch_shape(uint64_t bytes, size_t nblocks)
{
	uint64_t n = nblocks ? nblocks : 1; /* log2 of the mean size and of the count */
	unsigned b = 63u - (unsigned)__builtin_clzll((bytes / n) | 1), k = 63u - (unsigned)__builtin_clzll(n);
	return 1u << 16 | (uint32_t)b << 8 | (k > 12 ? 12 : k);
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
	*c = (rf__sch_class){.shape = shape, .probing = 1, .interval = RF__SCH_RECHECK, .choice = s->arms[0]};
	rf__cmp_init(&c->cmp, RF__SCH_RULE, s->narms, RF__SCH_ROUNDS, 1); /* the second arm first */
	return c;
}

unsigned rf__sch_pick(rf__sch *s, uint32_t shape, rf__sch_class **cp)
{
	rf__sch_class *c = rf__sch_class_of(s, shape);
	c->used = ++s->clock;
	*cp = c;
	if (s->narms < 2)
		return s->arms[0];
	if (!c->probing && c->left == 0) /* time to compare again */
		c->probing = 1;
	if (c->probing)
		return s->arms[rf__cmp_turn(&c->cmp)];
	c->left--;
	return c->choice;
}

int rf__sch_note(rf__sch *s, rf__sch_class *c, unsigned arm, double x)
{
	if (s->narms < 2 || !c->probing || arm != s->arms[rf__cmp_turn(&c->cmp)] || !rf__cmp_note(&c->cmp, x))
		return 0;
	unsigned was = c->choice;
	c->choice = s->arms[c->cmp.best];
	/* The same choice again: look less often; a new one (or the first): look again soon. */
	if (c->cmp.compared == 1 || c->choice != was)
		c->interval = RF__SCH_RECHECK;
	else if (c->interval < RF__SCH_RECHECK_MAX)
		c->interval *= 2;
	c->left = c->interval;
	c->probing = 0;
	return 1;
}

/* Whether the CPU implements CLDEMOTE (CPUID.7.0:ECX[25]); elsewhere the hint is a no-op: 0. */
static int rf__sch_cldemote(void)
{
#if defined(__x86_64__)
	unsigned a, b, c, d;
	if (__get_cpuid_count(7, 0, &a, &b, &c, &d) == 0)
		return 0;
	return (c >> 25) & 1;
#else
	return 0;
#endif
}

int rf__sch_handoff(int mode, unsigned nq, unsigned nslots, int *on, char *why, size_t cap)
{
	*on = 0;
	if (nq < 2 || nslots < 2) {
		snprintf(why, cap, "cache handoff off (%s)", nq < 2 ? "no copy queue" : "depth 1");
		return 0;
	}
	if (mode != RF__MODE_AUTO) {
		*on = mode == RF__MODE_ON;
		snprintf(why, cap, "cache handoff %s (forced by configuration)", *on ? "on" : "off");
		return 0;
	}
	if (!rf__sch_cldemote()) {
		snprintf(why, cap, "cache handoff off (auto: this CPU has no cldemote)");
		return 0;
	}
	snprintf(why, cap, "cache handoff auto (compared with the lanes without it on the first runs)");
	return 1;
}
