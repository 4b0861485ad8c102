/* backends/threads_place.c — copy workers' cores (see threads_place.h). */
#define _GNU_SOURCE /* pthread_setaffinity_np, cpu_set_t: a re-pin that allocates nothing */
#include "backends/threads_place.h"
#include "backends/threads_int.h"
#include "base/alloc.h"
#include "base/error.h"
#include "memory/topology.h"

#include <errno.h>
#include <hwloc/glibc-sched.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RF__TP_MAX_CORES 4096

static pthread_mutex_t rf__tp_mu = PTHREAD_MUTEX_INITIALIZER;
static unsigned rf__tp_count[RF__TP_MAX_CORES];

/* The cores a worker may take, the caller's own included: the process's (its caller's binding:
 * taskset, cgroups, MPI), or those with any CPU in the deployer's explicit set `cpus`. 0: none, or the
 * binding cannot be read. */
static unsigned rf__tp_cores(hwloc_topology_t topo, const char *cpus, hwloc_obj_t *out, unsigned cap)
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

/* The core the calling thread last ran on, or NULL; `scratch` is preallocated (called per run). */
static hwloc_obj_t rf__tp_core_now(hwloc_topology_t topo, hwloc_bitmap_t scratch)
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

#ifdef RF_TESTING
unsigned rf__tp_load(unsigned logical_index)
{
	pthread_mutex_lock(&rf__tp_mu);
	unsigned v = logical_index < RF__TP_MAX_CORES ? rf__tp_count[logical_index] : 0;
	pthread_mutex_unlock(&rf__tp_mu);
	return v;
}
#endif

/* The CPU sets of cores[0 .. n-1], for re-pinning without allocating (hwloc's cpubind allocates). NULL:
 * out of memory, or CPUs beyond the C library's cpu_set_t (the lanes then do not follow the caller). */
static cpu_set_t *rf__tp_sets(hwloc_topology_t topo, hwloc_obj_t *cores, unsigned n)
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

/* Pin each lane (never the caller's thread); returns the length of t->placement. */
static int rf__threads_place(rf__threads *t, int n, const char *cpus)
{
	/* A topology failure is not the caller's failure (create still succeeds): keep its rf_errmsg. */
	char saved[256];
	snprintf(saved, sizeof saved, "%s", rf__errmsg_peek());
	if ((t->topo = rf__topo_acquire()) != NULL) {
		t->scratch = hwloc_bitmap_alloc();
		if ((t->home = rf__tp_core_now(t->topo, t->scratch)) != NULL)
			t->ncand = rf__tp_cores(t->topo, cpus, t->cand, RF_MAX_QUEUES);
	}
	unsigned others = 0;
	for (unsigned i = 0; i < t->ncand; i++)
		others += t->cand[i] != t->home;
	/* An explicit set that names only the caller's core is the deployer's call. */
	t->avoid_home = !(*cpus && others == 0);
	if (t->ncand == 0 || (t->avoid_home && others == 0)) {
		snprintf(t->placement + n, sizeof t->placement - (size_t)n, "; copy workers not pinned: %s",
			 t->topo == NULL ? rf__errmsg_peek()
			 : t->home == NULL ? "the caller's core is unknown (no core objects in the topology)"
			 : *cpus ? "no core of the machine in RINGFETCH_WORKER_CPUS / worker_cpus"
					   : "no core besides the caller's in its CPU binding");
		t->ncand = 0;
		rf__err(RF_OK, "%s", saved);
		return (int)strlen(t->placement);
	}
	t->cand_sets = rf__tp_sets(t->topo, t->cand, t->ncand);
	if (*cpus)
		n += snprintf(t->placement + n, sizeof t->placement - (size_t)n, "; copy workers on CPUs %s (configured)",
			      cpus);
	for (unsigned i = 0; i < t->pool.n; i++) {
		hwloc_obj_t core = rf__tp_pick(t->cand, t->ncand, t->avoid_home ? t->home : NULL);
		int ok = hwloc_set_thread_cpubind(t->topo, t->pool.lane[i].tid, core->cpuset, 0) == 0;
		int e = errno;
		if (ok)
			t->lane[i].core = (int)core->logical_index;
		else
			rf__tp_unpick(core->logical_index);
		if (n < 0 || (size_t)n >= sizeof t->placement)
			continue;
		size_t room = sizeof t->placement - (size_t)n;
		if (ok)
			n += snprintf(t->placement + n, room, "; q%u: core %u", i + 1, core->logical_index);
		else
			n += snprintf(t->placement + n, room, "; q%u: not pinned (%s)", i + 1, strerror(e));
	}
	return n;
}

/* Pin each lane to the core of the caller's binding (or of the configured set), other than the caller's,
 * that holds the fewest lanes of the process. Recorded in t->placement for describe: failing to pin is
 * not an error (the run is still correct), but never silent. */
void rf__threads_pin(rf__threads *t, const char *cpus)
{
	int n = snprintf(t->placement, sizeof t->placement, "compute: caller's thread (not pinned by ringfetch)");
	if (t->pool.n > 0)
		n = rf__threads_place(t, n, cpus);
	if (n >= 0 && (size_t)n < sizeof t->placement)
		snprintf(t->placement + n, sizeof t->placement - (size_t)n, "; %s", t->handoff_why);
}

/* Per run: when the caller now runs on a lane's core (an unpinned caller migrates), move that lane to
 * the least loaded other core. One look per run when nothing changed; no allocation. */
void rf__threads_follow(rf__threads *t)
{
	if (t->scratch == NULL || t->cand_sets == NULL || !t->avoid_home)
		return;
	hwloc_obj_t now = rf__tp_core_now(t->topo, t->scratch);
	if (now == NULL || now == t->home)
		return;
	t->home = now;
	for (unsigned i = 0; i < t->pool.n; i++) {
		if (t->lane[i].core != (int)now->logical_index)
			continue;
		hwloc_obj_t c = rf__tp_pick(t->cand, t->ncand, now);
		unsigned k = 0;
		while (c != NULL && t->cand[k] != c)
			k++;
		if (c != NULL && pthread_setaffinity_np(t->pool.lane[i].tid, sizeof(cpu_set_t),
						      (cpu_set_t *)t->cand_sets + k) == 0) {
			rf__tp_unpick(now->logical_index);
			t->lane[i].core = (int)c->logical_index;
		} else if (c != NULL) {
			rf__tp_unpick(c->logical_index);
		}
	}
}

/* In a child of fork() the process-wide tables' locks may be held by parent threads that do not exist
 * here: only what the child's memory holds is freed. */
void rf__threads_unpin(rf__threads *t, int owned)
{
	for (unsigned i = 0; owned && i + 1 < t->nq; i++)
		if (t->lane[i].core >= 0)
			rf__tp_unpick((unsigned)t->lane[i].core);
	hwloc_bitmap_free(t->scratch);
	free(t->cand_sets);
	if (owned)
		rf__topo_release(t->topo);
}
