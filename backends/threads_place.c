/* backends/threads_place.c — copy workers' cores (see threads_place.h). Before, each pipeline pinned
 * its workers round robin from the first core other than the caller's, so with 4 pipelines in one
 * process 3 of 4 copy workers shared one core. */
#define _GNU_SOURCE /* pthread_setaffinity_np, cpu_set_t: a re-pin that allocates nothing */
#include "backends/threads_place.h"
#include "backends/threads_int.h"
#include "base/alloc.h"
#include "base/error.h"
#include "memory/topology.h"

#include <errno.h>
#include <hwloc/glibc-sched.h>
#include <sched.h>
#include <stdio.h>
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

/* ---- the threads backend's lanes ------------------------------------------------------------------ */

/* Pin each lane to the core of the caller's binding (or of the configured set) other than the caller's
 * own that holds the fewest lanes of the process. The caller's thread is not ours: we never bind it.
 * What happened is recorded in t->placement, which rf_pipeline_describe shows; failing to pin is not
 * an error (the run is still correct), but it is never silent. */
void rf__thr_pin(rf__threads *t)
{
	int n = snprintf(t->placement, sizeof t->placement, "compute: caller's thread (not pinned by ringfetch)");
	if (t->pool.n == 0) {
		snprintf(t->placement + n, sizeof t->placement - (size_t)n, "; %s", t->handoff_why);
		return;
	}
	/* A topology failure is not the caller's failure (create still succeeds): keep its rf_errmsg. */
	char saved[256];
	snprintf(saved, sizeof saved, "%s", rf__errmsg_peek());
	if ((t->topo = rf__topo_acquire()) != NULL && (t->home = rf__tp_caller_core(t->topo)) != NULL)
		t->ncand = rf__tp_cores(t->topo, t->worker_cpus, t->cand, RF_MAX_QUEUES);
	unsigned others = 0;
	for (unsigned i = 0; i < t->ncand; i++)
		others += t->cand[i] != t->home;
	/* An explicit set that names only the caller's core is the deployer's call. */
	t->avoid_home = !(*t->worker_cpus && others == 0);
	if (t->ncand == 0 || (t->avoid_home && others == 0)) {
		snprintf(t->placement + n, sizeof t->placement - (size_t)n, "; copy workers not pinned: %s",
			 t->topo == NULL ? rf__errmsg_peek()
			 : t->home == NULL ? "the caller's core is unknown (no core objects in the topology)"
			 : *t->worker_cpus ? "no core of the machine in RINGFETCH_WORKER_CPUS / worker_cpus"
					   : "no core besides the caller's in its CPU binding");
		t->ncand = 0;
		rf__err(RF_OK, "%s", saved);
		n = (int)strlen(t->placement);
		snprintf(t->placement + n, sizeof t->placement - (size_t)n, "; %s", t->handoff_why);
		return;
	}
	/* For rf__thr_follow; either NULL: the lanes just do not follow the caller. */
	t->scratch = hwloc_bitmap_alloc();
	t->cand_sets = rf__tp_sets(t->topo, t->cand, t->ncand);
	if (*t->worker_cpus)
		n += snprintf(t->placement + n, sizeof t->placement - (size_t)n, "; copy workers on CPUs %s (configured)",
			      t->worker_cpus);
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
	if (n >= 0 && (size_t)n < sizeof t->placement)
		snprintf(t->placement + n, sizeof t->placement - (size_t)n, "; %s", t->handoff_why);
}

/* Per run: when the caller now runs on a lane's core (an unpinned caller migrates there: 4196 of 4992
 * computes in one measured run), move that lane to the least loaded other core. One sched_getcpu-backed
 * look per run when nothing changed; no allocation. */
void rf__thr_follow(rf__threads *t)
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
		if (c != NULL && rf__tp_move(t->pool.lane[i].tid, t->cand_sets, k)) {
			rf__tp_unpick(now->logical_index);
			t->lane[i].core = (int)c->logical_index;
		} else if (c != NULL) {
			rf__tp_unpick(c->logical_index);
		}
	}
}

/* In a child of fork() the process-wide tables' locks may be held by parent threads that do not exist
 * here: only what the child's memory holds is freed. */
void rf__thr_unpin(rf__threads *t, int owned)
{
	for (unsigned i = 0; owned && i + 1 < t->nq; i++)
		if (t->lane[i].core >= 0)
			rf__tp_unpick((unsigned)t->lane[i].core);
	hwloc_bitmap_free(t->scratch);
	free(t->cand_sets);
	if (owned)
		rf__topo_release(t->topo);
}
