/* backends/threads_place.h — where the threads backend's copy workers run: on cores inside the caller's
 * CPU binding, or inside an explicit set (RINGFETCH_WORKER_CPUS, config key worker_cpus: an hwloc list
 * of OS CPU numbers, e.g. "2-3,6"), away from the caller's core, and spread by a process-wide count of
 * the workers each core holds, so that several pipelines do not stack their workers on one core. */
#ifndef RF_BACKENDS_THREADS_PLACE_H
#define RF_BACKENDS_THREADS_PLACE_H

#include <hwloc.h>

/* Pick one of cores[0 .. n-1] other than `avoid` (NULL: none) for a worker: the one holding the fewest
 * workers of this process (ties: the first). Counts it; NULL when there is no such core.
 * rf__tp_unpick uncounts (a core's logical index). */
hwloc_obj_t rf__tp_pick(hwloc_obj_t *cores, unsigned n, hwloc_obj_t avoid);
void rf__tp_unpick(unsigned logical_index);

#ifdef RF_TESTING /* the testing build only: how many workers of this process are counted on a core */
unsigned rf__tp_load(unsigned logical_index);
#endif

#endif
