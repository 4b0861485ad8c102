/* backends/threads_place.c — copy workers' cores (see threads_place.h). Before, each pipeline pinned
 * its workers round robin from the first core other than the caller's, so with 4 pipelines in one
 * process 3 of 4 copy workers shared one core (issue 17). */
#include "backends/threads_place.h"

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
unsigned rf__tp_cores(hwloc_topology_t topo, hwloc_obj_t home, const char *cpus, hwloc_obj_t *out, unsigned cap)
{
	unsigned n = 0;
	int explicit = cpus != NULL && *cpus != '\0';
	hwloc_bitmap_t allowed = hwloc_bitmap_alloc();
	if (allowed == NULL || (explicit ? hwloc_bitmap_list_sscanf(allowed, cpus)
					 : hwloc_get_cpubind(topo, allowed, HWLOC_CPUBIND_THREAD)) != 0) {
		hwloc_bitmap_free(allowed);
		return 0;
	}
	int ncores = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_CORE), home_ok = 0;
	for (int i = 0; i < ncores && n < cap; i++) {
		hwloc_obj_t c = hwloc_get_obj_by_type(topo, HWLOC_OBJ_CORE, (unsigned)i);
		int in = explicit ? hwloc_bitmap_intersects(c->cpuset, allowed) : hwloc_bitmap_isincluded(c->cpuset, allowed);
		if (in && c == home)
			home_ok = 1;
		else if (in)
			out[n++] = c;
	}
	if (n == 0 && explicit && home_ok && home != NULL && cap > 0)
		out[n++] = home; /* the set names only the caller's core: the deployer's call */
	hwloc_bitmap_free(allowed);
	return n;
}

hwloc_obj_t rf__tp_pick(hwloc_obj_t *cores, unsigned n)
{
	hwloc_obj_t best = NULL;
	pthread_mutex_lock(&rf__tp_mu);
	for (unsigned i = 0; i < n; i++) {
		unsigned li = cores[i]->logical_index;
		if (li < RF__TP_MAX_CORES &&
		    (best == NULL || rf__tp_count[li] < rf__tp_count[best->logical_index]))
			best = cores[i];
	}
	if (best == NULL && n > 0)
		best = cores[0];
	else if (best != NULL)
		rf__tp_count[best->logical_index]++;
	pthread_mutex_unlock(&rf__tp_mu);
	return best;
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
