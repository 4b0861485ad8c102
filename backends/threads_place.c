/* backends/threads_place.c — copy workers' cores (see threads_place.h). Before, each pipeline pinned
 * its workers round robin from the first core other than the caller's, so with 4 pipelines in one
 * process 3 of 4 copy workers shared one core. */
#define _GNU_SOURCE /* pthread_setaffinity_np, cpu_set_t: a re-pin that allocates nothing */
#include "backends/threads_place.h"
#include "base/alloc.h"

#include <hwloc/glibc-sched.h>
#include <sched.h>
#include <stdlib.h>

#include <pthread.h>
#include <string.h>

#define RF__TP_MAX_CORES 4096

static pthread_mutex_t rf__tp_mu = PTHREAD_MUTEX_INITIALIZER;
static unsigned rf__tp_count[RF__TP_MAX_CORES];

hwloc_obj_t rf__tp_caller_core(hwloc_topology_t topo)
{
	hwloc_obj_t core = NULL;
	hwloc_bitmap_t set = hwloc_bitmap_alloc();
	if (set != NULL && hwloc_get_last_cpu_location(topo, set, HWLOC_CPUBIND_THREAD) == 0) {
		hwloc_obj_t pu = hwloc_get_pu_obj_by_os_index(topo, (unsigned)hwloc_bitmap_first(set));
		core = pu ? hwloc_get_ancestor_obj_by_type(topo, HWLOC_OBJ_CORE, pu) : NULL;
	}
	hwloc_bitmap_free(set);
	return core;
}

int rf__tp_valid(const char *cpus)
{
	if (cpus == NULL || *cpus == '\0')
		return 0;
	for (const char *c = cpus; *c; c++) /* hwloc's parser is lenient: digits, ',' and '-' only */
		if (!(*c >= '0' && *c <= '9') && *c != ',' && *c != '-')
			return 0;
	hwloc_bitmap_t set = hwloc_bitmap_alloc();
	int ok = set != NULL && hwloc_bitmap_list_sscanf(set, cpus) == 0 && !hwloc_bitmap_iszero(set);
	hwloc_bitmap_free(set);
	return ok;
}

/* The process's cores, not the machine's: the caller's binding (taskset, cgroups, MPI binding). An
 * explicit set is the deployer's choice: a core counts when any of its CPUs is in it. */
unsigned rf__tp_cores(hwloc_topology_t topo, const char *cpus, hwloc_obj_t *out, unsigned cap)
{
	unsigned n = 0;
	int explicit = cpus != NULL && *cpus != '\0';
	hwloc_bitmap_t allowed = hwloc_bitmap_alloc();
	if (allowed == NULL || (explicit ? hwloc_bitmap_list_sscanf(allowed, cpus)
					 : hwloc_get_cpubind(topo, allowed, HWLOC_CPUBIND_THREAD)) != 0) {
		hwloc_bitmap_free(allowed);
		return 0;
	}
	int ncores = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_CORE);
	for (int i = 0; i < ncores && n < cap; i++) {
		hwloc_obj_t c = hwloc_get_obj_by_type(topo, HWLOC_OBJ_CORE, (unsigned)i);
		if (explicit ? hwloc_bitmap_intersects(c->cpuset, allowed) : hwloc_bitmap_isincluded(c->cpuset, allowed))
			out[n++] = c;
	}
	hwloc_bitmap_free(allowed);
	return n;
}

hwloc_obj_t rf__tp_pick(hwloc_obj_t *cores, unsigned n, hwloc_obj_t avoid)
{
	hwloc_obj_t best = NULL;
	pthread_mutex_lock(&rf__tp_mu);
	for (unsigned i = 0; i < n; i++) {
		unsigned li = cores[i]->logical_index;
		if (cores[i] != avoid && li < RF__TP_MAX_CORES &&
		    (best == NULL || rf__tp_count[li] < rf__tp_count[best->logical_index]))
			best = cores[i];
	}
	if (best != NULL)
		rf__tp_count[best->logical_index]++;
	pthread_mutex_unlock(&rf__tp_mu);
	return best;
}

hwloc_obj_t rf__tp_core_now(hwloc_topology_t topo, hwloc_bitmap_t scratch)
{
	if (topo == NULL || scratch == NULL || hwloc_get_last_cpu_location(topo, scratch, HWLOC_CPUBIND_THREAD) != 0)
		return NULL;
	int cpu = hwloc_bitmap_first(scratch);
	hwloc_obj_t pu = cpu >= 0 ? hwloc_get_pu_obj_by_os_index(topo, (unsigned)cpu) : NULL;
	return pu ? hwloc_get_ancestor_obj_by_type(topo, HWLOC_OBJ_CORE, pu) : NULL;
}

void rf__tp_unpick(unsigned logical_index)
{
	pthread_mutex_lock(&rf__tp_mu);
	if (logical_index < RF__TP_MAX_CORES && rf__tp_count[logical_index] > 0)
		rf__tp_count[logical_index]--;
	pthread_mutex_unlock(&rf__tp_mu);
}

unsigned rf__tp_load(unsigned logical_index)
{
	pthread_mutex_lock(&rf__tp_mu);
	unsigned v = logical_index < RF__TP_MAX_CORES ? rf__tp_count[logical_index] : 0;
	pthread_mutex_unlock(&rf__tp_mu);
	return v;
}

void *rf__tp_sets(hwloc_topology_t topo, hwloc_obj_t *cores, unsigned n)
{
	cpu_set_t *sets = n ? rf__malloc(n * sizeof *sets) : NULL;
	for (unsigned i = 0; sets != NULL && i < n; i++)
		if (hwloc_bitmap_last(cores[i]->cpuset) >= CPU_SETSIZE ||
		    hwloc_cpuset_to_glibc_sched_affinity(topo, cores[i]->cpuset, &sets[i], sizeof sets[i]) != 0) {
			free(sets);
			return NULL;
		}
	return sets;
}

int rf__tp_move(pthread_t tid, const void *sets, unsigned i)
{
	const cpu_set_t *s = sets;
	return pthread_setaffinity_np(tid, sizeof s[i], &s[i]) == 0;
}
