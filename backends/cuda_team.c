/* backends/cuda_team.c — the host copy team of two-hop staging: threads that split one pageable ->
 * pinned memcpy (one core's memcpy cannot feed PCIe). CUDA-free: it only copies host memory. */
#include "backends/cuda_int.h"
#include "base/alloc.h"
#include "base/error.h"
#include "memory/topology.h"

#include <errno.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

/* Claim and copy pieces until none is left (mu held on entry and exit). */
static void rf__cu_team_work(rf__cu_team *t)
{
	while (t->next < t->parts) {
		size_t off = (size_t)t->next++ * t->piece;
		size_t n = t->len - off < t->piece ? t->len - off : t->piece;
		pthread_mutex_unlock(&t->mu);
		memcpy(t->dst + off, t->src + off, n);
		pthread_mutex_lock(&t->mu);
		if (++t->finished == t->parts)
			pthread_cond_signal(&t->done);
	}
}

static void *rf__cu_helper(void *arg)
{
	sigset_t all; /* process-directed signals are the application's business */
	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, NULL);
	rf__cu_team *t = arg;
	uint64_t seen = 0;
	pthread_mutex_lock(&t->mu);
	for (;;) {
		while (t->gen == seen && !t->stop)
			pthread_cond_wait(&t->go, &t->mu);
		if (t->stop)
			break;
		seen = t->gen;
		rf__cu_team_work(t);
	}
	pthread_mutex_unlock(&t->mu);
	return NULL;
}

void rf__cu_team_copy(rf__cu_team *t, void *dst, const void *src, size_t len)
{
	size_t parts = len / RF__CU_PIECE;
	if (parts > t->n + 1)
		parts = t->n + 1;
	if (parts <= 1) {
		memcpy(dst, src, len);
		return;
	}
	pthread_mutex_lock(&t->use);
	pthread_mutex_lock(&t->mu);
	t->dst = dst;
	t->src = src;
	t->len = len;
	t->piece = ((len + parts - 1) / parts + 4095) & ~(size_t)4095; /* page-aligned pieces */
	t->parts = (unsigned)((len + t->piece - 1) / t->piece);
	t->next = t->finished = 0;
	t->gen++;
	pthread_cond_broadcast(&t->go);
	rf__cu_team_work(t);
	while (t->finished < t->parts)
		pthread_cond_wait(&t->done, &t->mu);
	pthread_mutex_unlock(&t->mu);
	pthread_mutex_unlock(&t->use);
}

static void rf__cu_team_stop(rf__cu_team *t)
{
	pthread_mutex_lock(&t->mu);
	t->stop = 1;
	pthread_cond_broadcast(&t->go);
	pthread_mutex_unlock(&t->mu);
	for (unsigned i = 0; i < t->n; i++)
		pthread_join(t->th[i], NULL);
	t->n = 0;
}

void rf__cu_team_fini(rf__cu_team *t)
{
	rf__cu_team_stop(t);
	pthread_mutex_destroy(&t->mu);
	pthread_mutex_destroy(&t->use);
	pthread_cond_destroy(&t->go);
	pthread_cond_destroy(&t->done);
}

/* Half the online CPUs copy (a pageable source's pages are read once; more threads only contend for
 * memory bandwidth), at most RF__CU_TEAM_MAX; on a 2-CPU machine the calling thread copies alone. */
/* Our own helper threads run on the CPUs of the GPU's NUMA node (review defect 9: the copy reads the
 * caller's pages and writes the pinned ring there), when the process may use some of them; else they
 * keep the affinity they were created with. Never touches a thread we did not create. */
static void rf__cu_team_place(rf__cu_team *t, int node)
{
	t->node = -1;
	if (node < 0 || t->n == 0)
		return;
	hwloc_topology_t topo = rf__topo_acquire();
	if (topo == NULL) {
		(void)rf__errmsg_peek();
		return;
	}
	hwloc_obj_t obj = hwloc_get_numanode_obj_by_os_index(topo, (unsigned)node);
	hwloc_cpuset_t cs = hwloc_bitmap_alloc();
	if (obj != NULL && cs != NULL) {
		hwloc_bitmap_and(cs, obj->cpuset, hwloc_topology_get_allowed_cpuset(topo));
		int ok = !hwloc_bitmap_iszero(cs);
		for (unsigned i = 0; ok && i < t->n; i++)
			ok = hwloc_set_thread_cpubind(topo, t->th[i], cs, 0) == 0;
		t->node = ok ? node : -1;
	}
	hwloc_bitmap_free(cs);
	rf__topo_release(topo);
}

int rf__cu_team_start(rf__cu_team *t, int node)
{
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	unsigned want = cpus > 2 ? (unsigned)(cpus / 2) : 1;
	if (want > RF__CU_TEAM_MAX)
		want = RF__CU_TEAM_MAX;
	pthread_mutex_init(&t->mu, NULL);
	pthread_mutex_init(&t->use, NULL);
	pthread_cond_init(&t->go, NULL);
	pthread_cond_init(&t->done, NULL);
	for (t->n = 0; t->n + 1 < want; t->n++) {
		int err = rf__fault() ? EAGAIN : pthread_create(&t->th[t->n], NULL, rf__cu_helper, t);
		if (err != 0) {
			rf__cu_team_fini(t);
			return rf__err(RF_ENOMEM, "cuda: cannot start a host copy thread: %s", strerror(err));
		}
	}
	rf__cu_team_place(t, node);
	return RF_OK;
}
