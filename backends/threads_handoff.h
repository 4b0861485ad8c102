/* backends/threads_handoff.h — whether the threads backend's copy lanes demote what they copy to the
 * shared cache (CLDEMOTE, base/piece.h): forceable (RINGFETCH_HANDOFF, config key `handoff`: auto,
 * off, on), else decided from the pipeline's own runs (an arm of backends/threads_sched.h). */
#ifndef RF_BACKENDS_THREADS_HANDOFF_H
#define RF_BACKENDS_THREADS_HANDOFF_H

#include <stddef.h>

enum { RF__HO_AUTO = 0, RF__HO_OFF = 1, RF__HO_ON = 2 };

/* The handoff of a threads pipeline at create: off where nothing overlaps (no copy queue, depth 1) or
 * the CPU has no cldemote; `mode` (rf__config.handoff) when forced. Sets *on (the handoff of runs on
 * the lanes when it is not compared) and a description in why (for rf_pipeline_describe). Returns 1
 * when it is to be compared on the pipeline's runs (auto, with cldemote), else 0. */
int rf__ho_pipeline(int mode, unsigned nq, unsigned nslots, int *on, char *why, size_t cap);

#endif
