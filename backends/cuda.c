/* backends/cuda.c — the CUDA backend: a lowered program becomes streams, events and stream waits.
 *
 * One stream per queue. The caller's thread walks the program in its global issue order (a
 * topological order) and only enqueues: copy -> cudaMemcpyAsync on the queue's stream, signal ->
 * cudaEventRecord, wait -> cudaStreamWaitEvent, compute -> the user's callback with the queue's stream
 * (it enqueues kernels and returns). The host never waits between blocks; rf_pipeline_run
 * synchronises once at the end. Because the walk is topological, every wait is enqueued after the
 * record it needs — cudaStreamWaitEvent captures the event's latest record at the time of the call,
 * so a wait enqueued first would wait for nothing.
 *
 * Events come from a pool per queue, reused round-robin. A wait for "queue W reached value v" uses
 * the oldest record still in W's pool whose value is >= v: the exact record when it is still there,
 * a later one (a stronger wait, never a weaker one) when the pool has moved on.
 *
 * Sources that DMA cannot read directly (pageable memory: cudaMemcpyAsync would copy synchronously
 * through a driver bounce buffer and overlap nothing) take two hops: a host function on the queue's
 * staging stream copies the block into a pinned, NUMA-local host ring (by a small team of threads:
 * one core's memcpy cannot feed PCIe), then the copy stream moves it to the device ring. Each hop has
 * its own RAW and WAR edges, all as events on streams: staged[s] (host copy done -> H2D may read pinned
 * slot s) and free[s] (H2D out of s done -> the next host copy may overwrite it).
 *
 * All CUDA calls go through rf__cuda (backends/cuda_api.h): this file includes no CUDA header, builds
 * without the toolkit, and its lowering is tested on machines without a GPU against a simulator. */
#include "backends/cuda_api.h"
#include "base/alloc.h"
#include "base/error.h"
#include "memory/staging.h"
#include "runtime/walk.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#ifndef RF_HAVE_CUDA
const rf__cuda_api *rf__cuda = NULL; /* no toolkit: no real CUDA; tests may still install a double */
#endif

#define RF__CU_EVENTS_MAX 256u          /* events per queue */
#define RF__CU_JOBS 64u                 /* host copies a staging stream may have enqueued ahead */
#define RF__CU_PIECE ((size_t)1 << 20)  /* a host copy is split into pieces of at least this */
#define RF__CU_TEAM_MAX 8u              /* threads copying one block (the host-func thread included) */

/* ---- the host copy team --------------------------------------------------------------------------- */

/* Threads that split a pageable -> pinned copy between them. The host function's thread (CUDA's) takes
 * part too. Pieces are claimed under `mu`; a job is published by bumping `gen`, and the caller returns
 * only when every piece is copied, so a helper never holds a stale job. `use` serialises host functions
 * of different staging streams, which CUDA may run concurrently. */
typedef struct rf__cu_team {
	pthread_mutex_t mu, use;
	pthread_cond_t go, done;
	pthread_t th[RF__CU_TEAM_MAX];
	unsigned n; /* helper threads started */
	uint64_t gen;
	int stop;
	unsigned char *dst;
	const unsigned char *src;
	size_t len, piece;
	unsigned parts, next, finished;
} rf__cu_team;

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

static void rf__cu_team_copy(rf__cu_team *t, void *dst, const void *src, size_t len)
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

static void rf__cu_team_fini(rf__cu_team *t)
{
	rf__cu_team_stop(t);
	pthread_mutex_destroy(&t->mu);
	pthread_mutex_destroy(&t->use);
	pthread_cond_destroy(&t->go);
	pthread_cond_destroy(&t->done);
}

/* Half the online CPUs copy (a pageable source's pages are read once; more threads only contend for
 * memory bandwidth), at most RF__CU_TEAM_MAX; on a 2-CPU machine the host-func thread copies alone. */
static int rf__cu_team_start(rf__cu_team *t)
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
	return RF_OK;
}

/* ---- per-pipeline state --------------------------------------------------------------------------- */

struct rf__cu;

/* One pageable -> pinned copy, read by the host function when it runs. */
typedef struct rf__cu_job {
	struct rf__cu_queue *q;
	unsigned char *dst;
	const void *src;
	size_t len;
} rf__cu_job;

typedef struct rf__cu_queue {
	struct rf__cu *cx;
	void *stream;
	void **ev;       /* pool, recorded round-robin */
	int64_t *ev_val; /* value of each pool entry's latest record */
	unsigned nev;
	uint64_t nrec; /* records this run */
	/* Two-hop staging (queues that copy): */
	void *hstream;       /* host copies, as host functions */
	unsigned char *pin;  /* npin pinned slots of slot_bytes */
	unsigned npin;
	void **ev_staged, **ev_free; /* per pinned slot */
	rf__cu_job jobs[RF__CU_JOBS];
	uint64_t k; /* staged copies enqueued this run */
	atomic_uint_fast64_t started;  /* staged copies begun this run (by host functions) */
	atomic_uint_fast64_t consumed; /* staged copies done this run */
} rf__cu_queue;

typedef struct rf__cu {
	const rf__cuda_api *api;
	int device;
	unsigned nq;
	size_t slot_bytes;
	rf__cu_queue *q;
	rf__cu_team team;
	int team_started;
	int broken;           /* a device error made the context unusable */
	char broken_msg[200];
	char name[96];
	int numa_node;
	rf__staging_policy pinned_policy;
} rf__cu;

/* RF_EBACKEND naming the call and CUDA's words for the error. */
static int rf__cu_fail(const rf__cuda_api *api, const char *call, int err)
{
	(void)api->get_last_error(); /* a non-sticky error must not reach the application's next check */
	return rf__err(RF_EBACKEND, "cuda: %s failed: %s (%s)", call, api->error_string(err), api->error_name(err));
}

#define RF__CU_TRY(api, call, expr)                                                                         \
	do {                                                                                                \
		int e_ = (expr);                                                                            \
		if (e_ != 0)                                                                                \
			return rf__cu_fail((api), (call), e_);                                              \
	} while (0)

/* Make `device` current for the duration of a call, and put the caller's back afterwards: an embedder
 * may drive several GPUs from one thread. */
static int rf__cu_enter(const rf__cuda_api *api, int device, int *prev)
{
	*prev = -1;
	if (api->get_device(prev) != 0) {
		(void)api->get_last_error();
		*prev = -1;
	}
	if (*prev != device)
		RF__CU_TRY(api, "cudaSetDevice", api->set_device(device));
	return RF_OK;
}

static void rf__cu_leave(const rf__cuda_api *api, int device, int prev)
{
	if (prev >= 0 && prev != device)
		(void)api->set_device(prev);
}

/* ---- probe -------------------------------------------------------------------------------------- */

static int rf__cu_probe(int device)
{
	const rf__cuda_api *api = rf__cuda;
	if (api == NULL)
		return rf__err(RF_ENODEV, "backend \"cuda\" is not built into this library (no CUDA toolkit at build time)");
	int n = 0, e = api->get_device_count(&n);
	if (e != 0)
		return rf__err(RF_ENODEV, "cuda: no usable GPU: cudaGetDeviceCount: %s (%s)", api->error_string(e),
			       api->error_name(e));
	if (n <= 0)
		return rf__err(RF_ENODEV, "cuda: no usable GPU: no CUDA device found");
	if (device < 0 || device >= n)
		return rf__err(RF_ENODEV, "cuda: device %d does not exist (%d device%s: 0..%d)", device, n,
			       n == 1 ? "" : "s", n - 1);
	return RF_OK;
}

/* ---- open / close ------------------------------------------------------------------------------- */

/* The pinner the staging layer page-locks pinned arenas with. */
static int rf__cu_pin(void *p, size_t len, const char **why)
{
	int e = rf__cuda->host_register(p, len);
	if (e != 0) {
		*why = rf__cuda->error_string(e);
		(void)rf__cuda->get_last_error();
	}
	return e;
}

static void rf__cu_unpin(void *p)
{
	if (rf__cuda->host_unregister(p) != 0)
		(void)rf__cuda->get_last_error();
}

static const rf__staging_pinner rf__cu_pinner = {rf__cu_pin, rf__cu_unpin};

/* A pinned staging policy for `device`: "auto" becomes the NUMA node nearest the GPU when the driver
 * or sysfs knows it (else the caller's node, as for CPU pipelines). */
static void rf__cu_policy(const rf__cuda_api *api, int device, const rf__staging_policy *in,
			  rf__staging_policy *out, int *numa_node)
{
	*out = in != NULL ? *in : (rf__staging_policy){RF__STG_AUTO, -1, 0};
	*numa_node = -1;
	if (api->device_numa_node(device, numa_node) != 0)
		*numa_node = -1;
	if (out->kind == RF__STG_AUTO && *numa_node >= 0) {
		out->kind = RF__STG_NODE;
		out->node = *numa_node;
	}
	out->pinned = 1;
	rf__staging_set_pinner(&rf__cu_pinner);
}

/* Pinned slots per copying queue: enough to cover the ring's depth between them, at least two (one
 * filling while the other drains). */
static unsigned rf__cu_npin(unsigned ns, unsigned ncopyq)
{
	unsigned per = (ns + ncopyq - 1) / ncopyq;
	return per < 2 ? 2 : per;
}

static int rf__cu_queue_open(rf__cu *cx, rf__cu_queue *q, int copies, unsigned npin)
{
	const rf__cuda_api *api = cx->api;
	q->cx = cx;
	if (rf__fault())
		return rf__err(RF_EBACKEND, "cuda: cudaStreamCreateWithFlags failed (injected fault)");
	RF__CU_TRY(api, "cudaStreamCreateWithFlags", api->stream_create(&q->stream));
	if ((q->ev = rf__calloc(q->nev, sizeof *q->ev)) == NULL ||
	    (q->ev_val = rf__calloc(q->nev, sizeof *q->ev_val)) == NULL)
		return rf__err(RF_ENOMEM, "cuda: out of memory");
	for (unsigned i = 0; i < q->nev; i++)
		RF__CU_TRY(api, "cudaEventCreateWithFlags", api->event_create(&q->ev[i]));
	if (!copies)
		return RF_OK;
	RF__CU_TRY(api, "cudaStreamCreateWithFlags (host staging stream)", api->stream_create(&q->hstream));
	if ((q->ev_staged = rf__calloc(npin, sizeof *q->ev_staged)) == NULL ||
	    (q->ev_free = rf__calloc(npin, sizeof *q->ev_free)) == NULL)
		return rf__err(RF_ENOMEM, "cuda: out of memory");
	q->npin = npin;
	for (unsigned i = 0; i < npin; i++) {
		RF__CU_TRY(api, "cudaEventCreateWithFlags", api->event_create(&q->ev_staged[i]));
		RF__CU_TRY(api, "cudaEventCreateWithFlags", api->event_create(&q->ev_free[i]));
	}
	void *mem;
	int rc = rf__staging_alloc(&cx->pinned_policy, (size_t)npin * cx->slot_bytes, RF__STAGING_SLOT_ALIGN, &mem);
	if (rc != RF_OK)
		return rf__err(rc, "cuda: pinned host ring for pageable sources (%u x %zu bytes): %s", npin,
			       cx->slot_bytes, rf__errmsg_peek());
	q->pin = mem;
	return RF_OK;
}

/* Tear down whatever open built (partially built state included). */
static void rf__cu_free(rf__cu *cx)
{
	const rf__cuda_api *api = cx->api;
	for (unsigned i = 0; cx->q != NULL && i < cx->nq; i++) {
		rf__cu_queue *q = &cx->q[i];
		if (q->stream != NULL)
			(void)api->stream_synchronize(q->stream);
		if (q->hstream != NULL)
			(void)api->stream_synchronize(q->hstream);
		for (unsigned j = 0; q->ev != NULL && j < q->nev; j++)
			if (q->ev[j] != NULL)
				(void)api->event_destroy(q->ev[j]);
		for (unsigned j = 0; q->ev_staged != NULL && j < q->npin; j++) {
			if (q->ev_staged[j] != NULL)
				(void)api->event_destroy(q->ev_staged[j]);
			if (q->ev_free != NULL && q->ev_free[j] != NULL)
				(void)api->event_destroy(q->ev_free[j]);
		}
		if (q->stream != NULL)
			(void)api->stream_destroy(q->stream);
		if (q->hstream != NULL)
			(void)api->stream_destroy(q->hstream);
		rf__staging_free(q->pin);
		free(q->ev);
		free(q->ev_val);
		free(q->ev_staged);
		free(q->ev_free);
	}
	(void)api->get_last_error();
	if (cx->team_started)
		rf__cu_team_fini(&cx->team);
	free(cx->q);
	free(cx);
}

static int rf__cu_open(const rf__open_args *args, void **ctx)
{
	const rf__cuda_api *api = rf__cuda;
	int prev, rc;
	if ((rc = rf__cu_probe(args->device)) != RF_OK)
		return rc;
	rf__cu *cx = rf__calloc(1, sizeof *cx);
	if (cx == NULL)
		return rf__err(RF_ENOMEM, "cuda: out of memory");
	cx->api = api;
	cx->device = args->device;
	cx->nq = args->nqueues;
	cx->slot_bytes = args->slot_bytes;
	if ((rc = rf__cu_enter(api, cx->device, &prev)) != RF_OK) {
		free(cx);
		return rc;
	}
	if (api->device_name(cx->device, cx->name, sizeof cx->name) != 0)
		snprintf(cx->name, sizeof cx->name, "?");
	rf__cu_policy(api, cx->device, args->staging, &cx->pinned_policy, &cx->numa_node);
	/* Which queues copy, and so need a staging hop. */
	const struct rf_program *p = args->prog;
	int copies[RF_MAX_QUEUES] = {0};
	unsigned ncopyq = 0;
	for (size_t i = 0; p != NULL && i < p->nops; i++)
		if (p->ops[i].kind == RF_OP_COPY && !copies[p->ops[i].queue]++)
			ncopyq++;
	unsigned ns = args->nslots ? args->nslots : 1; /* depth = auto may deepen the ring up to this */
	unsigned nev = 2 * ns + 8 < RF__CU_EVENTS_MAX ? 2 * ns + 8 : RF__CU_EVENTS_MAX;
	if ((cx->q = rf__calloc(cx->nq, sizeof *cx->q)) == NULL) {
		rc = rf__err(RF_ENOMEM, "cuda: out of memory");
		goto fail;
	}
	for (unsigned i = 0; i < cx->nq; i++)
		cx->q[i].nev = nev;
	for (unsigned i = 0; i < cx->nq; i++)
		if ((rc = rf__cu_queue_open(cx, &cx->q[i], copies[i], ncopyq ? rf__cu_npin(ns, ncopyq) : 0)) != RF_OK)
			goto fail;
	if (ncopyq > 0) {
		if ((rc = rf__cu_team_start(&cx->team)) != RF_OK)
			goto fail;
		cx->team_started = 1;
	}
	rf__cu_leave(api, cx->device, prev);
	*ctx = cx;
	return RF_OK;
fail:
	rf__cu_free(cx);
	rf__cu_leave(api, args->device, prev);
	return rc;
}

static void rf__cu_close(void *ctx)
{
	rf__cu *cx = ctx;
	int prev;
	int entered = rf__cu_enter(cx->api, cx->device, &prev) == RF_OK;
	int dev = cx->device;
	const rf__cuda_api *api = cx->api;
	rf__cu_free(cx);
	if (entered)
		rf__cu_leave(api, dev, prev);
}

/* ---- slots: the device ring ---------------------------------------------------------------------- */

static int rf__cu_slots_alloc(void *ctx, size_t bytes, void **mem)
{
	rf__cu *cx = ctx;
	const rf__cuda_api *api = cx->api;
	int prev, rc = rf__cu_enter(api, cx->device, &prev);
	if (rc != RF_OK)
		return rc;
	int e = api->malloc_device(mem, bytes);
	rf__cu_leave(api, cx->device, prev);
	if (e == 2 /* cudaErrorMemoryAllocation */) {
		(void)api->get_last_error();
		return rf__err(RF_ENOMEM, "cuda: cudaMalloc of %zu bytes on device %d: %s", bytes, cx->device,
			       api->error_string(e));
	}
	if (e != 0)
		return rf__cu_fail(api, "cudaMalloc", e);
	return RF_OK;
}

static void rf__cu_slots_free(void *ctx, void *mem, size_t bytes)
{
	(void)bytes;
	rf__cu *cx = ctx;
	int prev;
	if (rf__cu_enter(cx->api, cx->device, &prev) != RF_OK)
		return;
	if (cx->api->free_device(mem) != 0)
		(void)cx->api->get_last_error();
	rf__cu_leave(cx->api, cx->device, prev);
}

/* ---- the walk: ops become CUDA calls ----------------------------------------------------------- */

static int rf__cu_signal(void *c, unsigned queue, int64_t v, size_t block)
{
	(void)block;
	rf__cu *cx = c;
	rf__cu_queue *q = &cx->q[queue];
	unsigned i = (unsigned)(q->nrec % q->nev);
	RF__CU_TRY(cx->api, "cudaEventRecord", cx->api->event_record(q->ev[i], q->stream));
	q->ev_val[i] = v;
	q->nrec++;
	return 0;
}

static int rf__cu_wait(void *c, unsigned queue, unsigned wqueue, int64_t v, size_t block)
{
	(void)block;
	rf__cu *cx = c;
	if (queue == wqueue) /* stream order already */
		return 0;
	rf__cu_queue *q = &cx->q[queue], *w = &cx->q[wqueue];
	if (w->nrec == 0 || w->ev_val[(w->nrec - 1) % w->nev] < v)
		return rf__err(RF_EBACKEND, "cuda: queue %u would wait for q%u >= %lld, which is never recorded before it",
			       queue, wqueue, (long long)v);
	/* Newest to oldest while still >= v: the weakest record that satisfies the wait. */
	uint64_t i = w->nrec - 1, oldest = w->nrec > w->nev ? w->nrec - w->nev : 0;
	while (i > oldest && w->ev_val[(i - 1) % w->nev] >= v)
		i--;
	RF__CU_TRY(cx->api, "cudaStreamWaitEvent", cx->api->stream_wait_event(q->stream, w->ev[i % w->nev]));
	return 0;
}

static int rf__cu_compute(void *c, rf__run *run, unsigned queue, size_t b, unsigned slot)
{
	rf__cu *cx = c;
	return rf__call_compute(run, b, slot, cx->q[queue].stream);
}

/* The host function of one staged copy: runs on CUDA's callback thread, in staging-stream order. It
 * must not call CUDA. */
static void rf__cu_hostcopy(void *arg)
{
	rf__cu_job *j = arg;
	rf__cu_queue *q = j->q;
	atomic_fetch_add_explicit(&q->started, 1, memory_order_acq_rel);
	rf__cu_team_copy(&q->cx->team, j->dst, j->src, j->len);
	atomic_fetch_add_explicit(&q->consumed, 1, memory_order_release); /* j may be rewritten from here */
}

/* Wait until the host functions of queue q have consumed `need` jobs, so that a job entry may be
 * rewritten. Only reached when the caller has enqueued RF__CU_JOBS staged copies ahead of the host
 * copies themselves — the device is far behind, and waiting here is back-pressure. Checks the staging
 * stream for errors instead of waiting forever on a stream that died. */
static int rf__cu_job_wait(rf__cu *cx, rf__cu_queue *q, uint64_t need)
{
	for (unsigned spin = 0; atomic_load_explicit(&q->consumed, memory_order_acquire) < need; spin++) {
		if (spin < 64) {
			sched_yield();
			continue;
		}
		int e = cx->api->stream_query(q->hstream);
		if (atomic_load_explicit(&q->consumed, memory_order_acquire) >= need)
			break;
		if (e != 0 && e != RF__CUDA_NOT_READY)
			return rf__cu_fail(cx->api, "cudaStreamQuery (host staging stream)", e);
		if (e == 0)
			return rf__err(RF_EBACKEND, "cuda: host staging stream idle with %llu of %llu copies done",
				       (unsigned long long)atomic_load(&q->consumed), (unsigned long long)need);
		struct timespec ts = {0, 20000};
		nanosleep(&ts, NULL);
	}
	return 0;
}

/* pageable src -> pinned slot (host function on the staging stream) -> device slot (copy stream). */
static int rf__cu_copy_staged(rf__cu *cx, rf__cu_queue *q, void *dst, const void *src, size_t n)
{
	const rf__cuda_api *api = cx->api;
	uint64_t k = q->k;
	unsigned ps = (unsigned)(k % q->npin);
	if (k >= RF__CU_JOBS) {
		int rc = rf__cu_job_wait(cx, q, k - RF__CU_JOBS + 1);
		if (rc != 0)
			return rc;
	}
	rf__cu_job *j = &q->jobs[k % RF__CU_JOBS];
	*j = (rf__cu_job){q, q->pin + (size_t)ps * cx->slot_bytes, src, n};
	if (k >= q->npin && !RF__TEST_HOOK(drop_staging_war)) /* WAR on the pinned slot: its previous H2D is done */
		RF__CU_TRY(api, "cudaStreamWaitEvent (pinned slot free)", api->stream_wait_event(q->hstream, q->ev_free[ps]));
	RF__CU_TRY(api, "cudaLaunchHostFunc (host staging copy)", api->launch_host_func(q->hstream, rf__cu_hostcopy, j));
	q->k++;
	RF__CU_TRY(api, "cudaEventRecord (pinned slot staged)", api->event_record(q->ev_staged[ps], q->hstream));
	/* RAW on the pinned slot, then the second hop, then mark the pinned slot free again. */
	RF__CU_TRY(api, "cudaStreamWaitEvent (pinned slot staged)", api->stream_wait_event(q->stream, q->ev_staged[ps]));
	RF__CU_TRY(api, "cudaMemcpyAsync (pinned -> device)", api->memcpy_async(dst, j->dst, n, q->stream));
	RF__CU_TRY(api, "cudaEventRecord (pinned slot free)", api->event_record(q->ev_free[ps], q->stream));
	return 0;
}

static int rf__cu_copy(void *c, rf__run *run, unsigned queue, size_t b, unsigned slot)
{
	rf__cu *cx = c;
	rf__cu_queue *q = &cx->q[queue];
	size_t n = run->sizes[b];
	if (n == 0)
		return 0;
	if (atomic_load_explicit(run->cancel, memory_order_relaxed))
		return RF_ECANCELED;
	void *dst = rf__slot_ptr(run, slot);
	if (cx->api->is_dma_capable(run->srcs[b], n)) {
		RF__CU_TRY(cx->api, "cudaMemcpyAsync", cx->api->memcpy_async(dst, run->srcs[b], n, q->stream));
		return 0;
	}
	if (q->pin == NULL)
		return rf__err(RF_EBACKEND, "cuda: block %zu is pageable but queue %u has no staging ring", b, queue);
	return rf__cu_copy_staged(cx, q, dst, run->srcs[b], n);
}

static const rf__walk_ops rf__cu_ops = {rf__cu_copy, rf__cu_compute, rf__cu_signal, rf__cu_wait};

/* After a device error a synchronisation may return while a host copy that had already started is
 * still reading the caller's source (CUDA skips host functions that have not started): wait for those
 * before the run returns and the caller frees its sources (bounded: 10 s, then the context is broken
 * for good anyway). */
static void rf__cu_settle_host_copies(rf__cu *cx)
{
	for (int i = 0; i < 100000; i++) {
		int busy = 0;
		for (unsigned k = 0; k < cx->nq; k++)
			busy |= atomic_load(&cx->q[k].started) != atomic_load(&cx->q[k].consumed);
		if (!busy)
			return;
		struct timespec ts = {0, 100000};
		nanosleep(&ts, NULL);
	}
}

/* Wait for everything enqueued: every stream, staging streams included. The first error wins. */
static int rf__cu_drain(rf__cu *cx, const char **call)
{
	int first = 0;
	for (unsigned i = 0; i < cx->nq; i++) {
		rf__cu_queue *q = &cx->q[i];
		int e = cx->api->stream_synchronize(q->stream);
		if (e != 0 && first == 0) {
			first = e;
			*call = "cudaStreamSynchronize";
		}
		if (q->hstream != NULL && (e = cx->api->stream_synchronize(q->hstream)) != 0 && first == 0) {
			first = e;
			*call = "cudaStreamSynchronize (host staging stream)";
		}
	}
	return first;
}

static int rf__cu_run(void *ctx, rf__run *run)
{
	rf__cu *cx = ctx;
	const rf__cuda_api *api = cx->api;
	if (cx->broken)
		return rf__err(RF_EBACKEND, "cuda: pipeline unusable after a device error: %s", cx->broken_msg);
	int prev, rc = rf__cu_enter(api, cx->device, &prev);
	if (rc != RF_OK)
		return rc;
	for (unsigned i = 0; i < cx->nq; i++) {
		rf__cu_queue *q = &cx->q[i];
		q->nrec = 0;
		q->k = 0;
		atomic_store(&q->started, 0);
		atomic_store(&q->consumed, 0);
	}
	rc = rf__walk(run, -1, &rf__cu_ops, cx);
	/* Drain even on failure: nothing we enqueued may still run (or read the caller's sources) once
	 * rf_pipeline_run has returned. */
	const char *call = NULL;
	int e = rf__cu_drain(cx, &call);
	if (e != 0) {
		rf__cu_settle_host_copies(cx);
		/* An error surfacing at synchronisation is asynchronous (a kernel fault, a bad address):
		 * CUDA keeps such errors sticky, so the context — and this pipeline — is unusable. */
		rf__cu_fail(api, call, e);
		snprintf(cx->broken_msg, sizeof cx->broken_msg, "%s", rf__errmsg_peek());
		cx->broken = 1;
		rc = RF_EBACKEND;
	}
	rf__cu_leave(api, cx->device, prev);
	return rc;
}

static int rf__cu_describe(void *ctx, char *buf, size_t cap)
{
	rf__cu *cx = ctx;
	unsigned ncopyq = 0, npin = 0;
	for (unsigned i = 0; i < cx->nq; i++)
		if (cx->q[i].pin != NULL)
			ncopyq++, npin = cx->q[i].npin;
	char node[24] = "unknown";
	if (cx->numa_node >= 0)
		snprintf(node, sizeof node, "%d", cx->numa_node);
	snprintf(buf, cap,
		 "cuda: device %d (%s, host NUMA node %s); %u stream%s (one per queue), %u events each, "
		 "reused round-robin; pageable sources staged through a pinned host ring of %u slot%s per "
		 "copy queue (%u queue%s) by %u host thread%s",
		 cx->device, cx->name, node, cx->nq, cx->nq == 1 ? "" : "s", cx->q[0].nev, npin, npin == 1 ? "" : "s",
		 ncopyq, ncopyq == 1 ? "" : "s", cx->team.n + 1, cx->team.n ? "s" : "");
	return RF_OK;
}

/* The pinned host ring (the first copying queue's; all are placed alike). */
static int rf__cu_placement(void *ctx, rf_placement *out)
{
	rf__cu *cx = ctx;
	for (unsigned i = 0; i < cx->nq; i++)
		if (cx->q[i].pin != NULL)
			return rf__staging_placement(cx->q[i].pin, out);
	return rf__err(RF_ENOTSUP, "cuda: this program copies nothing: no pinned host ring");
}

const rf__backend_ops rf__backend_cuda = {
	.abi = RF__BACKEND_ABI,
	.name = "cuda",
	.caps = RF__CAP_OVERLAP | RF__CAP_DEVICE,
	.probe = rf__cu_probe,
	.open = rf__cu_open,
	.close = rf__cu_close,
	.slots_alloc = rf__cu_slots_alloc,
	.slots_free = rf__cu_slots_free,
	.run = rf__cu_run,
	.describe = rf__cu_describe,
	.placement = rf__cu_placement,
};

/* ---- the embedder API behind <ringfetch/cuda.h> (wrapped with CUDA types in cuda_rt.c) ------------ */

int rf__cuda_host_register(const void *p, size_t bytes)
{
	if (p == NULL || bytes == 0)
		return rf__err(RF_EINVAL, "rf_cuda_host_register: %s", p == NULL ? "p is NULL" : "bytes is 0");
	int rc = rf__cu_probe(0);
	if (rc != RF_OK)
		return rf__err(rc, "rf_cuda_host_register: %s", rf__errmsg_peek());
	int e = rf__cuda->host_register((void *)p, bytes);
	if (e != 0) {
		(void)rf__cuda->get_last_error();
		return rf__err(RF_EBACKEND, "rf_cuda_host_register: cudaHostRegister(%p, %zu) failed: %s (%s)", p, bytes,
			       rf__cuda->error_string(e), rf__cuda->error_name(e));
	}
	return RF_OK;
}

int rf__cuda_host_unregister(const void *p)
{
	if (p == NULL)
		return rf__err(RF_EINVAL, "rf_cuda_host_unregister: p is NULL");
	int rc = rf__cu_probe(0);
	if (rc != RF_OK)
		return rf__err(rc, "rf_cuda_host_unregister: %s", rf__errmsg_peek());
	int e = rf__cuda->host_unregister((void *)p);
	if (e != 0) {
		(void)rf__cuda->get_last_error();
		return rf__err(RF_EINVAL, "rf_cuda_host_unregister: cudaHostUnregister(%p) failed: %s (%s)", p,
			       rf__cuda->error_string(e), rf__cuda->error_name(e));
	}
	return RF_OK;
}

int rf__cuda_staging_alloc(size_t bytes, const char *policy, int device, void **out)
{
	if (out == NULL || bytes == 0)
		return rf__err(RF_EINVAL, "rf_cuda_staging_alloc: %s", out == NULL ? "out is NULL" : "bytes is 0");
	rf__staging_policy in, pol;
	int rc = rf__staging_parse("rf_cuda_staging_alloc", policy, &in);
	if (rc != RF_OK)
		return rc;
	if ((rc = rf__cu_probe(device)) != RF_OK)
		return rf__err(rc, "rf_cuda_staging_alloc: %s", rf__errmsg_peek());
	/* The registration belongs to the current device's context: make it `device`'s, and create that
	 * context now — not inside the arena's extent hook, which runs under jemalloc's locks. */
	int node, prev;
	if ((rc = rf__cu_enter(rf__cuda, device, &prev)) != RF_OK)
		return rf__err(rc, "rf_cuda_staging_alloc: %s", rf__errmsg_peek());
	int e = rf__cuda->init_context();
	if (e != 0) {
		rf__cu_fail(rf__cuda, "cudaFree(0) (context creation)", e);
		rf__cu_leave(rf__cuda, device, prev);
		return rf__err(RF_ENODEV, "rf_cuda_staging_alloc: %s", rf__errmsg_peek());
	}
	rf__cu_policy(rf__cuda, device, &in, &pol, &node);
	rc = rf__staging_alloc(&pol, bytes, bytes >= 4096 ? 4096 : 64, out);
	rf__cu_leave(rf__cuda, device, prev);
	if (rc != RF_OK)
		return rf__err(rc, "rf_cuda_staging_alloc: %s", rf__errmsg_peek());
	return RF_OK;
}
