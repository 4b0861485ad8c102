/* backends/threads_place.h — where the threads backend's copy workers run: cores chosen
 * inside the caller's CPU binding, or inside an explicit set (RINGFETCH_WORKER_CPUS, config key
 * worker_cpus: an hwloc list of OS CPU numbers, e.g. "2-3,6"), away from the caller's core, and spread
 * over those cores by a process-wide count of the workers each already holds, so that several
 * pipelines in one process do not stack their workers on one core. Internal to backends/threads.c. */
#ifndef RF_BACKENDS_THREADS_PLACE_H
#define RF_BACKENDS_THREADS_PLACE_H

#include <hwloc.h>
#include <pthread.h>

/* The core the calling thread last ran on, or NULL. */
hwloc_obj_t rf__tp_caller_core(hwloc_topology_t topo);

/* The cores a worker may take: those inside `cpus` (an hwloc list string; NULL or "": the calling
 * thread's CPU binding), the caller's own included (rf__tp_pick avoids it). Returns how many (<= cap),
 * 0 when none (or the binding cannot be read). */
unsigned rf__tp_cores(hwloc_topology_t topo, const char *cpus, hwloc_obj_t *out, unsigned cap);

/* Whether `cpus` is a well-formed, non-empty hwloc list ("0-3,8"). */
int rf__tp_valid(const char *cpus);

/* Pick one of cores[0 .. n-1] other than `avoid` (NULL: none) for a worker: the one holding the fewest
 * workers of this process (ties: the first). Counts it; NULL when there is no such core.
 * rf__tp_unpick uncounts (a core's logical index). */
hwloc_obj_t rf__tp_pick(hwloc_obj_t *cores, unsigned n, hwloc_obj_t avoid);
void rf__tp_unpick(unsigned logical_index);

/* The core the calling thread runs on now, from a preallocated bitmap (no allocation: called per
 * run), or NULL. */
hwloc_obj_t rf__tp_core_now(hwloc_topology_t topo, hwloc_bitmap_t scratch);

/* For re-pinning in steady state without allocating (hwloc's cpubind allocates): the CPU sets of
 * cores[0 .. n-1] prepared once (NULL: out of memory, or CPUs beyond the C library's cpu_set_t; the
 * caller then does not re-pin; free() it), and the move of thread `tid` to the i-th (1 on success). */
void *rf__tp_sets(hwloc_topology_t topo, hwloc_obj_t *cores, unsigned n);
int rf__tp_move(pthread_t tid, const void *sets, unsigned i);

/* Tests: how many workers of this process are counted on a core. */
unsigned rf__tp_load(unsigned logical_index);

#endif
