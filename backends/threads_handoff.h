/* backends/threads_handoff.h — whether the threads backend's copy lanes demote what they copy to the
 * shared cache (CLDEMOTE, base/piece.h): forceable (RINGFETCH_HANDOFF, config key `handoff`: auto,
 * off, on), else decided from the pipeline's own runs (an arm of backends/threads_sched.h). */
#ifndef RF_BACKENDS_THREADS_HANDOFF_H
#define RF_BACKENDS_THREADS_HANDOFF_H

#include <stddef.h>
#include <stdint.h>

enum { RF__HO_AUTO = 0, RF__HO_OFF = 1, RF__HO_ON = 2 };

/* The decision rule, a pure function of measured samples (time per run, alternating runs with and
 * without the handoff): on iff the mean with it is below the mean without it by more than 3 %
 * (RF__SCH_MARGIN: noise on a quiet machine; a loaded one mostly says off, the safe side) — the rule
 * rf__sch_best applies to every arm. n: 1..16 (0: off). */
int rf__ho_decide(const int64_t *on, const int64_t *off, unsigned n);

/* Whether the CPU implements CLDEMOTE (CPUID.7.0:ECX[25]); elsewhere the hint is a no-op: 0. */
int rf__ho_cpu_has_cldemote(void);

/* The handoff of a threads pipeline at create: off where nothing overlaps (no copy queue, depth 1) or
 * the CPU has no cldemote; `mode` (rf__config_handoff's) when forced. Sets *on (the handoff of runs on
 * the lanes when it is not compared) and a description in why (for rf_pipeline_describe). Returns 1
 * when it is to be compared on the pipeline's runs (auto, with cldemote), else 0. */
int rf__ho_pipeline(int mode, unsigned nq, unsigned nslots, int *on, char *why, size_t cap);

#endif
