/* backends/threads_sched.h — which schedule (arm) a threads pipeline runs: on the lanes, inline on the
 * caller (no thread hop), or on the lanes with the cache handoff (the copy lanes demote what they copy
 * to the shared cache: CLDEMOTE, base/piece.h). The fastest depends on the machine and the workload, so
 * each run shape's first runs compare the arms (base/compare.h, the lowest mean time per byte: the
 * caller waits for the sum, not the typical run), again after 16 runs, then 32, ... 1024 while the
 * choice holds, 16 when it changes: a synthetic probe would measure something other than the pipeline's
 * work. Pure functions of the samples: threads.c times the runs. */
#ifndef RF_BACKENDS_THREADS_SCHED_H
#define RF_BACKENDS_THREADS_SCHED_H

#include "base/compare.h"

#include <stddef.h>
#include <stdint.h>

/* overlap and handoff = auto | off | on (RINGFETCH_OVERLAP, RINGFETCH_HANDOFF, config keys of those
 * names: rf__parse_handoff). Overlap: compare, always inline, always lanes; handoff: below. */
enum { RF__MODE_AUTO = 0, RF__MODE_OFF = 1, RF__MODE_ON = 2 };

/* The arms. Listed in preference order: on a tie the earlier one is kept (inline uses one core). */
enum { RF__SCH_INLINE = 0, RF__SCH_LANES = 1, RF__SCH_HANDOFF = 2, RF__SCH_NARMS = 3 };

#define RF__SCH_ROUNDS 5u      /* runs of each arm per comparison, alternating; their mean decides */
#define RF__SCH_CLASSES 8u     /* run shapes remembered at once (least recently used replaced) */
#define RF__SCH_RECHECK 16u    /* runs of the kept arm before the first comparison again */
#define RF__SCH_RECHECK_MAX 1024u
/* A later arm must beat every earlier one by 3 % (a quiet machine's noise), by the mean alone. */
#define RF__SCH_RULE ((rf__cmp_rule){.margin = 0.03})

/* A run's shape, the key its samples are kept under: log2 of the mean block size and of the block count
 * (capped at 2^12), so that runs compared with each other move similar blocks. Never 0. */
uint32_t rf__sch_shape(uint64_t bytes, size_t nblocks);

typedef struct rf__sch_class {
	uint32_t shape;    /* 0: free */
	int probing;       /* 1 while the arms are being compared */
	unsigned choice;   /* the kept arm (an RF__SCH_* value) while not probing */
	unsigned left;     /* runs of the kept arm before the next comparison */
	unsigned interval; /* the current distance between comparisons */
	uint64_t used;     /* last use, for replacement */
	rf__cmp cmp;       /* the comparison, by arm slot (cmp.fig: mean time per byte) */
} rf__sch_class;

typedef struct rf__sch {
	unsigned narms;
	unsigned arms[RF__SCH_NARMS]; /* RF__SCH_* values, in preference order */
	uint64_t clock;
	rf__sch_class c[RF__SCH_CLASSES];
} rf__sch;

/* Compare these arms (RF__SCH_* values in preference order, 1..RF__SCH_NARMS of them). */
void rf__sch_init(rf__sch *s, const unsigned *arms, unsigned narms);

/* The arm the next run of this shape uses, and its class (for rf__sch_note). A comparison runs the arms
 * in turn, the second in preference order (the lanes) first. */
unsigned rf__sch_pick(rf__sch *s, uint32_t shape, rf__sch_class **c);

/* That run succeeded and took x (time per byte, or per block for empty blocks). Returns 1 when it ended
 * a comparison (c->choice and c->cmp.fig are new, worth describing), else 0. */
int rf__sch_note(rf__sch *s, rf__sch_class *c, unsigned arm, double x);
const char *rf__sch_name(unsigned arm); /* "inline", "lanes", "lanes + handoff" */

/* The handoff of a threads pipeline at create: off where nothing overlaps (no copy queue, depth 1) or
 * the CPU has no cldemote; `mode` (rf__config.handoff) when forced. Sets *on (the handoff of runs on
 * the lanes when it is not compared) and a description in why (for rf_pipeline_describe). Returns 1
 * when it is to be compared on the pipeline's runs (auto, with cldemote), else 0. */
int rf__sch_handoff(int mode, unsigned nq, unsigned nslots, int *on, char *why, size_t cap);

#endif
