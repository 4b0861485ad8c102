/* backends/cuda_team.c — the host copy team of two-hop staging: threads that copy pageable blocks into
 * pinned slots, in pieces, several blocks at once (one core's memcpy cannot feed PCIe, and one block
 * at a time leaves the threads idle while each block's hand-offs are made). CUDA-free: it only copies
 * host memory, and tells the job's hop when a block is complete. */
#include "backends/cuda_int.h"
#include "base/alloc.h"
#include "base/error.h"
#include "base/thread.h"

#include <errno.h>
#include <string.h>
#include <unistd.h>

static void *rf__cu_helper(void *arg)
{
	rf__thread_block_signals();
	rf__cu_team *t = arg;
	pthread_mutex_lock(&t->mu);
	for (;;) {
		while (t->head == NULL && !t->stop)
			pthread_cond_wait(&t->go, &t->mu);
		if (t->stop)
			break;
		rf__cu_job *j = t->head;
		size_t off = (size_t)j->claimed++ * RF__CU_PIECE;
		if (j->claimed == j->parts && (t->head = j->next) == NULL)
			t->tail = NULL;
		size_t n = j->len - off < RF__CU_PIECE ? j->len - off : RF__CU_PIECE;
		pthread_mutex_unlock(&t->mu);
		memcpy(j->dst + off, j->src + off, n);
		pthread_mutex_lock(&t->mu);
		/* The last piece done: the job is the hop's again (it may reuse it once the walker took it). */
		if (++j->finished == j->parts) {
			pthread_mutex_unlock(&t->mu);
			rf__cu_hop_job_done(j);
			pthread_mutex_lock(&t->mu);
		}
	}
	pthread_mutex_unlock(&t->mu);
	return NULL;
}

void rf__cu_team_post(rf__cu_team *t, rf__cu_job *j)
{
	j->next = NULL;
	j->parts = (unsigned)((j->len + RF__CU_PIECE - 1) / RF__CU_PIECE);
	j->claimed = j->finished = 0;
	pthread_mutex_lock(&t->mu);
	if (t->tail != NULL)
		t->tail->next = j;
	else
		t->head = j;
	t->tail = j;
	if (j->parts == 1)
		pthread_cond_signal(&t->go);
	else
		pthread_cond_broadcast(&t->go);
	pthread_mutex_unlock(&t->mu);
}

void rf__cu_team_fini(rf__cu_team *t)
{
	pthread_mutex_lock(&t->mu);
	t->stop = 1;
	pthread_cond_broadcast(&t->go);
	pthread_mutex_unlock(&t->mu);
	for (unsigned i = 0; i < t->n; i++)
		pthread_join(t->th[i], NULL);
	t->n = 0;
	pthread_mutex_destroy(&t->mu);
	pthread_cond_destroy(&t->go);
}

/* Half the online CPUs (a pageable source's pages are read once; more threads only contend for memory
 * bandwidth), at least one, at most RF__CU_TEAM_MAX. Tests may fix it (a deterministic ring size). */
unsigned rf__cu_team_size(void)
{
	if (RF__TEST_HOOK(cuda_copy_threads) != 0)
		return RF__TEST_HOOK(cuda_copy_threads) < RF__CU_TEAM_MAX ? RF__TEST_HOOK(cuda_copy_threads) : RF__CU_TEAM_MAX;
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	unsigned want = cpus > 2 ? (unsigned)(cpus / 2) : 1;
	return want > RF__CU_TEAM_MAX ? RF__CU_TEAM_MAX : want;
}

/* Our threads run on the CPUs of the GPU's NUMA node (review defect 9: the copies read the caller's
 * pages and write the pinned ring there), when the process may use some of them; else they keep the
 * affinity they were created with. Never touches a thread we did not create. 1 when placed. */
int rf__cu_place(hwloc_topology_t topo, int node, const pthread_t *th, unsigned n)
{
	if (node < 0 || n == 0)
		return 0;
	hwloc_obj_t obj = hwloc_get_numanode_obj_by_os_index(topo, (unsigned)node);
	hwloc_cpuset_t cs = hwloc_bitmap_alloc();
	int ok = obj != NULL && cs != NULL;
	if (ok) {
		hwloc_bitmap_and(cs, obj->cpuset, hwloc_topology_get_allowed_cpuset(topo));
		ok = !hwloc_bitmap_iszero(cs);
		for (unsigned i = 0; ok && i < n; i++)
			ok = hwloc_set_thread_cpubind(topo, th[i], cs, 0) == 0;
	}
	hwloc_bitmap_free(cs);
	return ok;
}

int rf__cu_team_start(rf__cu_team *t, unsigned n, hwloc_topology_t topo, int node)
{
	pthread_mutex_init(&t->mu, NULL);
	pthread_cond_init(&t->go, NULL);
	t->head = t->tail = NULL;
	t->stop = 0;
	for (t->n = 0; t->n < n; t->n++) {
		int err = rf__fault() ? EAGAIN : pthread_create(&t->th[t->n], NULL, rf__cu_helper, t);
		if (err != 0) {
			rf__cu_team_fini(t);
			return rf__err(RF_ENOMEM, "cuda: cannot start a host copy thread: %s", strerror(err));
		}
	}
	t->node = rf__cu_place(topo, node, t->th, t->n) ? node : -1;
	return RF_OK;
}
