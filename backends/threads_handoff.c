/* backends/threads_handoff.c — whether the threads backend demotes copied blocks to the shared cache
 * (CLDEMOTE), decided by measuring on the running machine instead of a window tuned on one (the
 * old fixed "L2/2 .. L2" window made 1 MiB blocks 30 % slower on another VM).
 *
 * The measurement is the handoff itself, at the pipeline's block size: a thread on a copy worker's core
 * copies a block (demoting it or not), then the creating thread (the computing one) reads it; a sample
 * is the copy time plus the read time, i.e. both cores' work for one block. Runs with and without
 * alternate (on, off, off, on, ...) so that drift hits both alike. Done once per process and block-size
 * class (powers of two), under a mutex; a few ms at the largest sizes, microseconds at small ones. */
#include "backends/threads_copy.h"
#include "base/alloc.h"
#include "backends/threads_place.h"
#include "base/error.h"
#include "memory/topology.h"
#include "runtime/trace.h"
#include "base/thread.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__)
#include <cpuid.h>
#endif

#define RF__HO_CLASSES 48
#define RF__HO_MAX_BYTES ((size_t)8 << 20) /* blocks above this are measured at this size */

int rf__ho_test_measure_anyway;

int rf__ho_cpu_has_cldemote(void)
{
#if defined(__x86_64__)
	unsigned a, b, c, d;
	if (__get_cpuid_count(7, 0, &a, &b, &c, &d) == 0)
		return 0;
	return (c >> 25) & 1;
#else
	return 0;
#endif
}

static void rf__ho_sort(int64_t *v, unsigned n)
{
	for (unsigned i = 1; i < n; i++)
		for (unsigned k = i; k > 0 && v[k - 1] > v[k]; k--) {
			int64_t x = v[k];
			v[k] = v[k - 1];
			v[k - 1] = x;
		}
}

static int64_t rf__ho_median(const int64_t *v, unsigned n)
{
	int64_t s[16];
	n = n > 16 ? 16 : n;
	memcpy(s, v, n * sizeof *s);
	rf__ho_sort(s, n);
	return n % 2 ? s[n / 2] : (s[n / 2 - 1] + s[n / 2]) / 2;
}

int rf__ho_decide(const int64_t *on, const int64_t *off, unsigned n)
{
	if (n == 0)
		return 0;
	int64_t mon = rf__ho_median(on, n), moff = rf__ho_median(off, n);
	return mon * 100 < moff * 97;
}

/* ---- the measurement ------------------------------------------------------------------------------ */

typedef struct rf__ho_bench {
	unsigned char *src, *dst;
	size_t n;
	unsigned nsamples;
	const int *modes;       /* demote or not, per sample */
	int64_t *copy_ns;       /* per sample, written by the copier before `ready` */
	_Atomic unsigned go, ready;
	hwloc_topology_t topo;
	hwloc_const_cpuset_t set;
	int pinned;
} rf__ho_bench;

static void rf__ho_spin(_Atomic unsigned *c, unsigned v)
{
	for (unsigned i = 0; atomic_load_explicit(c, memory_order_acquire) < v; i++)
		if (i > 4096)
			sched_yield(); /* a loaded machine: the other side may not be running */
}

static void *rf__ho_copier(void *arg)
{
	rf__thread_block_signals();
	rf__ho_bench *b = arg;
	b->pinned = hwloc_set_cpubind(b->topo, b->set, HWLOC_CPUBIND_THREAD) == 0;
	if (!b->pinned) { /* nothing worth measuring: release the reader at once */
		atomic_store_explicit(&b->ready, b->nsamples, memory_order_release);
		return NULL;
	}
	rf__tc_job job;
	rf__tc_job_init(&job);
	for (unsigned s = 0; s < b->nsamples; s++) {
		rf__ho_spin(&b->go, s + 1);
		/* alternate halves (4 KiB-aligned): not the last one read */
		const unsigned char *src = b->src + (s % 2) * ((b->n + 4095) & ~(size_t)4095);
		int64_t t0 = rf__trace_now();
		rf__tc_copy(&job, b->dst, src, b->n, 0, b->modes[s]);
		b->copy_ns[s] = rf__trace_now() - t0;
		atomic_store_explicit(&b->ready, s + 1, memory_order_release);
	}
	return NULL;
}

/* The reader's side of a sample: what a compute that streams the block pays. */
static uint64_t rf__ho_read(const unsigned char *p, size_t n)
{
	uint64_t sum = 0;
	for (size_t i = 0; i + 8 <= n; i += 8) {
		uint64_t w;
		memcpy(&w, p + i, 8);
		sum += w;
	}
	return sum;
}

/* Measure pairs of samples with and without the handoff. RF_OK with on[] and off[] filled, or an error
 * (with why) when the measurement could not run. */
static int rf__ho_measure(hwloc_topology_t topo, hwloc_const_cpuset_t set, size_t n, unsigned pairs, int64_t *on,
			  int64_t *off, char *why, size_t cap)
{
	enum { WARM = 2 };
	int modes[2 * 8 + WARM];
	int64_t copy_ns[2 * 8 + WARM], total[2 * 8 + WARM];
	unsigned ns = 2 * pairs + WARM;
	for (unsigned s = 0; s < ns; s++) /* warm-up: off, on; then on, off, off, on, on, off, ... */
		modes[s] = s < WARM ? (int)s : (int)(((s - WARM) + (s - WARM) / 2) % 2 == 0);
	rf__ho_bench b = {.n = n, .nsamples = ns, .modes = modes, .copy_ns = copy_ns, .topo = topo, .set = set};
	atomic_init(&b.go, 0);
	atomic_init(&b.ready, 0);
	size_t cap1 = (n + 4095) & ~(size_t)4095; /* aligned_alloc wants a multiple of the alignment */
	b.src = rf__aligned_alloc(4096, 2 * cap1);
	b.dst = rf__aligned_alloc(4096, cap1);
	if (b.src == NULL || b.dst == NULL) {
		free(b.src);
		free(b.dst);
		snprintf(why, cap, "out of memory for %zu KiB of test buffers", 3 * n >> 10);
		return RF_ENOMEM;
	}
	memset(b.src, 0x5a, 2 * cap1);
	memset(b.dst, 0, n);
	pthread_t tid;
	int err = rf__fault() ? EAGAIN : pthread_create(&tid, NULL, rf__ho_copier, &b);
	if (err != 0) {
		free(b.src);
		free(b.dst);
		snprintf(why, cap, "cannot start the test thread: %s", strerror(err));
		return RF_ENOMEM;
	}
	volatile uint64_t sink = 0;
	for (unsigned s = 0; s < ns && atomic_load_explicit(&b.ready, memory_order_acquire) < ns; s++) {
		atomic_store_explicit(&b.go, s + 1, memory_order_release);
		rf__ho_spin(&b.ready, s + 1);
		int64_t t0 = rf__trace_now();
		sink += rf__ho_read(b.dst, n);
		total[s] = copy_ns[s] + rf__trace_now() - t0;
	}
	(void)sink;
	pthread_join(tid, NULL);
	free(b.src);
	free(b.dst);
	if (!b.pinned) {
		snprintf(why, cap, "the test thread could not be pinned to a copy worker's core");
		return RF_EINVAL;
	}
	unsigned kon = 0, koff = 0;
	for (unsigned s = WARM; s < ns; s++) {
		if (modes[s])
			on[kon++] = total[s];
		else
			off[koff++] = total[s];
	}
	return RF_OK;
}

/* ---- the process-wide decisions ------------------------------------------------------------------- */

static pthread_mutex_t rf__ho_mu = PTHREAD_MUTEX_INITIALIZER;
static struct {
	int known, on;
	int64_t with_ns, without_ns;
	size_t bytes;
	unsigned pairs;
} rf__ho_table[RF__HO_CLASSES];

static unsigned rf__ho_class(size_t n)
{
	unsigned c = 0;
	while (c + 1 < RF__HO_CLASSES && ((size_t)2 << c) <= n)
		c++;
	return c;
}

static void rf__ho_kib(char *buf, size_t cap, size_t n)
{
	if (n >= (1u << 20) && n % (1u << 20) == 0)
		snprintf(buf, cap, "%zu MiB", n >> 20);
	else if (n >= 1024)
		snprintf(buf, cap, "%zu KiB", n >> 10);
	else
		snprintf(buf, cap, "%zu B", n);
}

void rf__ho_resolve(int mode, hwloc_topology_t topo, hwloc_const_cpuset_t worker_set, size_t slot_bytes, int *on,
		    char *why, size_t cap)
{
	*on = 0;
	if (mode != RF__HO_AUTO) {
		*on = mode == RF__HO_ON;
		snprintf(why, cap, "cache handoff %s (forced by configuration)", *on ? "on" : "off");
		return;
	}
	if (!rf__ho_cpu_has_cldemote() && !rf__ho_test_measure_anyway) {
		snprintf(why, cap, "cache handoff off (auto: this CPU has no cldemote)");
		return;
	}
	if (topo == NULL || worker_set == NULL) {
		snprintf(why, cap, "cache handoff off (auto: copy workers not pinned, nothing to measure)");
		return;
	}
	size_t n = slot_bytes > RF__HO_MAX_BYTES ? RF__HO_MAX_BYTES : slot_bytes < 64 ? 64 : slot_bytes;
	unsigned c = rf__ho_class(slot_bytes);
	unsigned pairs = n > ((size_t)1 << 20) ? 3 : 5;
	char size[32], err[160] = "";
	pthread_mutex_lock(&rf__ho_mu);
	if (!rf__ho_table[c].known) {
		int64_t with[8], without[8];
		if (rf__ho_measure(topo, worker_set, n, pairs, with, without, err, sizeof err) == RF_OK) {
			rf__ho_table[c].known = 1;
			rf__ho_table[c].on = rf__ho_decide(with, without, pairs);
			rf__ho_table[c].with_ns = rf__ho_median(with, pairs);
			rf__ho_table[c].without_ns = rf__ho_median(without, pairs);
			rf__ho_table[c].bytes = n;
			rf__ho_table[c].pairs = pairs;
		}
	}
	if (rf__ho_table[c].known) {
		*on = rf__ho_table[c].on;
		rf__ho_kib(size, sizeof size, rf__ho_table[c].bytes);
		snprintf(why, cap,
			 "cache handoff %s (auto: cldemote measured at %s blocks, copy + read %.1f us with, %.1f us "
			 "without, medians of %u)",
			 *on ? "on" : "off", size, (double)rf__ho_table[c].with_ns / 1e3,
			 (double)rf__ho_table[c].without_ns / 1e3, rf__ho_table[c].pairs);
	} else {
		snprintf(why, cap, "cache handoff off (auto: not measured: %s)", err);
	}
	pthread_mutex_unlock(&rf__ho_mu);
}

/* Decided before the workers exist (a new worker spins for its wait budget, which would disturb the
 * measurement), measured against the core the first worker is about to get. Only where runs overlap
 * (two slots or more: at depth 1 the whole copy runs where the compute does). */
void rf__ho_pipeline(int mode, const char *worker_cpus, unsigned nq, unsigned nslots, size_t slot_bytes, int *on,
		     char *why, size_t cap)
{
	*on = 0;
	if (nq < 2 || nslots < 2) {
		snprintf(why, cap, "cache handoff off (%s)", nq < 2 ? "no copy queue" : "depth 1");
		return;
	}
	char saved[256]; /* a topology failure is not the caller's failure: keep its rf_errmsg */
	snprintf(saved, sizeof saved, "%s", rf__errmsg_peek());
	hwloc_obj_t cores[RF_MAX_QUEUES], home = NULL, next = NULL;
	hwloc_topology_t topo = mode == RF__HO_AUTO ? rf__topo_acquire() : NULL;
	unsigned n = topo && (home = rf__tp_caller_core(topo)) ? rf__tp_cores(topo, worker_cpus, cores, RF_MAX_QUEUES) : 0;
	if (n > 0 && (next = rf__tp_pick(cores, n, home)) != NULL)
		rf__tp_unpick(next->logical_index); /* a peek: the pinning counts the real one */
	rf__ho_resolve(mode, topo, next ? next->cpuset : NULL, slot_bytes, on, why, cap);
	rf__topo_release(topo);
	rf__err(RF_OK, "%s", saved);
}
