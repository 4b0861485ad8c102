/* bench/baselines.h — what ringfetch is measured against, on the same workload:
 *   hand    a hand-written two-thread ring (a copy thread and the caller, two atomic counters);
 *   starpu  StarPU 1.3 with implicit data dependencies (copy task writes slot handle i % depth,
 *           compute task reads it), when built with StarPU. */
#ifndef RFB_BASELINES_H
#define RFB_BASELINES_H

#include "workload.h"

/* Stream w through `ring` (depth slots of w->size bytes). 0 on success. */
int rfb_hand_run(const rfb_work *w, unsigned depth, unsigned char *ring, rfb_sink *k);

/* StarPU: init once (ncpu workers; returns 0 if usable), run, shutdown. Without StarPU at build time
 * init returns -1 and says why in `why`. */
int rfb_starpu_init(unsigned ncpu, char *why, size_t cap);
int rfb_starpu_run(const rfb_work *w, unsigned depth, unsigned char *ring, rfb_sink *k);
void rfb_starpu_shutdown(void);

#endif
