/* backends/cuda.c — the CUDA backend: a lowered program becomes streams, events and stream waits.
 *
 * One stream per queue. The caller's thread walks the program in its global (topological) order and only
 * enqueues: copy -> cudaMemcpyAsync, signal -> cudaEventRecord, wait -> cudaStreamWaitEvent, compute ->
 * the user's callback with the queue's stream; rf_pipeline_run synchronises once at the end. The walk
 * must be topological: cudaStreamWaitEvent captures the event's latest record at the call, so a wait
 * enqueued before its record would wait for nothing. Host queues (STAGE ops) are walked by lanes
 * (cuda_stage.c); the walker waits for their signals on the host. Every entry point makes params.device
 * current and puts the caller's context back afterwards, "no context" included. */
#include "backends/cuda_int.h"
#include "base/alloc.h"
#include "base/error.h"
#include "runtime/walk.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int rf__cuda_probe(int device)
{
	const rf__cuda_api *api = rf__cuda;
	if (api == NULL)
		return rf__err(RF_ENODEV, "backend \"cuda\" is not built into this library (no CUDA toolkit at build time)");
	int n = 0, e = api->get_device_count(&n);
	if (e != 0) {
		(void)api->get_last_error();
		/* A driver that is there but older than the runtime is not "no GPU": say both. */
		int drv = 0, rt = api->runtime_version();
		if (rf__cuda_clear(api, api->driver_version(&drv)) != 0)
			drv = 0;
		if (drv > 0 && drv < rt)
			return rf__err(RF_ENODEV, "cuda: the CUDA driver (%d.%d, %d) is older than the "
				       "CUDA runtime this library was built with (%d.%d, %d): update the "
				       "driver; cudaGetDeviceCount: %s (%s)", drv / 1000, drv % 1000 / 10,
				       drv, rt / 1000, rt % 1000 / 10, rt, api->error_string(e),
				       api->error_name(e));
		return rf__err(RF_ENODEV, "cuda: no usable GPU: cudaGetDeviceCount: %s (%s)", api->error_string(e),
			       api->error_name(e));
	}
	if (n <= 0)
		return rf__err(RF_ENODEV, "cuda: no usable GPU: no CUDA device found");
	if (device < 0 || device >= n)
		return rf__err(RF_ENODEV, "cuda: device %d does not exist (%d device%s: 0..%d)", device, n,
			       n == 1 ? "" : "s", n - 1);
	return RF_OK;
}

/* Wait for everything enqueued on every stream; the first error (of cudaStreamSynchronize) wins. */
static int rf__cuda_drain(rf__cuda_ctx *cx)
{
	int first = 0;
	for (unsigned i = 0; cx->q != NULL && i < cx->nq; i++) {
		int e = cx->q[i].stream != NULL ? cx->api->stream_synchronize(cx->q[i].stream) : 0;
		first = first != 0 ? first : e;
	}
	return first;
}

/* Tear down whatever open built (partially built state included). Clears only errors it caused. */
static void rf__cuda_free(rf__cuda_ctx *cx)
{
	const rf__cuda_api *api = cx->api;
	rf__cuda_clear(api, rf__cuda_drain(cx));
	rf__cuda_pool_close(cx); /* first: a lane's queued item may still name keyed state */
	rf__cuda_keyed_free(cx);
	for (unsigned i = 0; cx->q != NULL && i < cx->nq; i++) {
		rf__cuda_queue *q = &cx->q[i];
		rf__cuda_events_free(api, q->ev, q->nev);
		if (q->stream != NULL)
			rf__cuda_clear(api, api->stream_destroy(q->stream));
		free(q->ev);
		free((void *)q->ev_val);
	}
	rf__cuda_events_free(api, cx->win, cx->nwin);
	rf__staging_free(atomic_load(&cx->pin));
	pthread_mutex_destroy(&cx->pin_mu);
	free(cx->win);
	free(cx->q);
	free(cx);
}

/* Streams and event pools for the stream queues (host queues have neither), the enqueue window. */
static int rf__cuda_streams_open(rf__cuda_ctx *cx, const struct rf_program *p)
{
	unsigned nev = 2 * cx->nslots + 8;
	cx->nwin = cx->nslots + RF__CUDA_WINDOW_MIN;
	if ((cx->win = rf__calloc(cx->nwin, sizeof *cx->win)) == NULL)
		return rf__err(RF_ENOMEM, "cuda: out of memory");
	for (size_t i = 0; p != NULL && i < p->nops; i++)
		if (p->ops[i].kind == RF_OP_COPY && !cx->q[p->ops[i].queue].copies++)
			cx->ncopyq++;
	for (unsigned i = 0; i < cx->nq; i++) {
		rf__cuda_queue *q = &cx->q[i];
		int rc;
		if ((cx->hostq >> i) & 1)
			continue;
		q->nev = nev;
		if (rf__fault())
			return rf__err(RF_EBACKEND, "cuda: cudaStreamCreateWithFlags failed (injected fault)");
		RF__CUDA_TRY(cx->api, "cudaStreamCreateWithFlags", cx->api->stream_create(&q->stream));
		if ((q->ev = rf__calloc(nev, sizeof *q->ev)) == NULL ||
		    (q->ev_val = rf__calloc(nev, sizeof *q->ev_val)) == NULL)
			return rf__err(RF_ENOMEM, "cuda: out of memory");
		if ((rc = rf__cuda_events_make(cx->api, q->ev, nev, "cudaEventCreateWithFlags")) != RF_OK)
			return rc;
	}
	return rf__cuda_events_make(cx->api, cx->win, cx->nwin, "cudaEventCreateWithFlags (enqueue window)");
}

static int rf__cuda_open(const rf__open_args *args, void **ctx)
{
	const rf__cuda_api *api = rf__cuda;
	rf__cuda_saved saved;
	int rc;
	if ((rc = rf__cuda_probe(args->device)) != RF_OK)
		return rc;
	rf__cuda_ctx *cx = rf__calloc(1, sizeof *cx);
	if (cx == NULL)
		return rf__err(RF_ENOMEM, "cuda: out of memory");
	cx->api = api;
	cx->device = args->device;
	cx->nq = args->nqueues;
	cx->oracle = args->oracle;
	cx->nslots = args->nslots ? args->nslots : 1; /* depth = auto may deepen the ring up to this */
	cx->nstage = args->prog != NULL ? args->prog->nstage : 0;
	cx->spin_ns = args->wait_spin_ns;
	/* Pinned slots start on page boundaries: the H2D of each reads whole pages. */
	cx->pin_stride = rf__align_up(args->slot_bytes, RF__ALIGN_PINNED);
	pthread_mutex_init(&cx->pin_mu, NULL);
	rf__ec_init(&cx->ec);
	if ((rc = rf__cuda_enter(api, cx->device, &saved)) != RF_OK) {
		rf__cuda_free(cx); /* nothing made yet: no CUDA call */
		return rc;
	}
	if (rf__cuda_clear(api, api->device_name(cx->device, cx->name, sizeof cx->name)) != 0)
		snprintf(cx->name, sizeof cx->name, "?");
	rf__cuda_policy(api, cx->device, args->staging, &cx->pinned_policy, &cx->numa_node);
	/* "auto" turned into the GPU's node: a refusal of that node may fall back (rf__cuda_ring_alloc). */
	if ((args->staging == NULL || args->staging->kind == RF__STG_AUTO) && cx->pinned_policy.kind == RF__STG_NODE)
		cx->placement_note = "";
	if ((cx->q = rf__calloc(cx->nq, sizeof *cx->q)) == NULL)
		rc = rf__err(RF_ENOMEM, "cuda: out of memory");
	if (rc == RF_OK &&
	    (rc = rf__cuda_pool_open(cx, args->prog, args->files_report, &rf__cuda_lane_ops_keyed)) == RF_OK &&
	    (rc = rf__cuda_streams_open(cx, args->prog)) == RF_OK)
		rc = rf__cuda_keyed_open(cx, args->klanes);
	if (rc != RF_OK)
		rf__cuda_free(cx);
	else
		*ctx = cx;
	rf__cuda_leave(api, &saved);
	return rc;
}

static void rf__cuda_close(void *ctx)
{
	rf__cuda_ctx *cx = ctx;
	rf__cuda_saved saved;
	const rf__cuda_api *api = cx->api;
	int entered = rf__cuda_enter(api, cx->device, &saved) == RF_OK;
	rf__cuda_free(cx);
	if (entered)
		rf__cuda_leave(api, &saved);
}

/* The first stream queue's stream (NULL: the legacy default stream, for a program without one). */
static void *rf__cuda_stream0(const rf__cuda_ctx *cx)
{
	for (unsigned i = 0; i < cx->nq; i++)
		if (cx->q[i].stream != NULL)
			return cx->q[i].stream;
	return NULL;
}

/* Stream-ordered on the first stream: no device-wide synchronisation on free. */
static int rf__cuda_slots_alloc(void *ctx, size_t bytes, void **mem)
{
	rf__cuda_ctx *cx = ctx;
	const rf__cuda_api *api = cx->api;
	rf__cuda_saved saved;
	int rc = rf__cuda_enter(api, cx->device, &saved);
	if (rc != RF_OK)
		return rc;
	void *s0 = rf__cuda_stream0(cx);
	int e = api->malloc_device(mem, bytes, s0);
	if (e == 0 && (e = api->stream_synchronize(s0)) != 0) {
		(void)api->free_device(*mem, s0);
		*mem = NULL;
	}
	rf__cuda_leave(api, &saved);
	if (e != 0 && api->error_kind(e) == RF__CUE_NOMEM) {
		(void)api->get_last_error();
		return rf__err(RF_ENOMEM, "cuda: cudaMalloc of %zu bytes on device %d: %s", bytes, cx->device,
			       api->error_string(e));
	}
	if (e != 0)
		return rf__cuda_fail(api, "cudaMallocAsync", e);
	return RF_OK;
}

static void rf__cuda_slots_free(void *ctx, void *mem, size_t bytes)
{
	(void)bytes;
	rf__cuda_ctx *cx = ctx;
	rf__cuda_saved saved;
	if (rf__cuda_enter(cx->api, cx->device, &saved) != RF_OK)
		return;
	rf__cuda_clear(cx->api, rf__cuda_keyed_settle(cx));
	if (cx->api->free_device(mem, rf__cuda_stream0(cx)) != 0 || cx->api->stream_synchronize(rf__cuda_stream0(cx)) != 0)
		(void)cx->api->get_last_error();
	rf__cuda_leave(cx->api, &saved);
}

/* A staged block's copy reads what its STAGE left in the staging slot: the pinned slot, or the source
 * itself when DMA can read it. */
static int rf__cuda_copy(void *c, rf__run *run, unsigned queue, size_t b, unsigned slot, unsigned stage, uint32_t node)
{
	(void)node;
	rf__cuda_ctx *cx = c;
	size_t n = run->sizes[b];
	if (n == 0)
		return 0;
	if (atomic_load_explicit(run->cancel, memory_order_relaxed) || atomic_load_explicit(&cx->stop, memory_order_relaxed))
		return RF_ECANCELED;
	const void *src = stage == RF__NO_STAGE ? run->srcs[b] : cx->sslot[stage];
	if (stage == RF__NO_STAGE && run->nfile > 0 && run->src[b].fs.f != NULL)
		return rf__err(RF_ENOTSUP, "cuda: block %zu lies in a file: a file's bytes reach the device through a STAGE "
					   "node (the pipeline's staged ring has them)", b);
	RF__CUDA_TRY(cx->api, "cudaMemcpyAsync", cx->api->memcpy_async(rf__slot_ptr(run, slot), src, n, cx->q[queue].stream));
	return 0;
}

/* Which event a signal records and a wait waits on. Events come from a pool per stream queue (2 * slots
 * + 8, never shallower than the ring), reused round-robin. A wait for "queue W reached v" uses the oldest
 * record still in the pool with value >= v: the exact one, or a later (stronger) one once the pool moved
 * on. The enqueue window keeps the host at most nwin computes ahead of the device, checking cancel
 * there: otherwise it would enqueue a whole run and sit in cudaStreamSynchronize, deaf to
 * rf_pipeline_cancel. */
static int rf__cuda_signal(void *c, unsigned queue, int64_t v, size_t block)
{
	(void)block;
	rf__cuda_ctx *cx = c;
	rf__cuda_queue *q = &cx->q[queue];
	uint64_t n = atomic_load_explicit(&q->nrec, memory_order_relaxed);
	unsigned i = (unsigned)(n % q->nev);
	RF__CUDA_TRY(cx->api, "cudaEventRecord", cx->api->event_record(q->ev[i], q->stream));
	atomic_store_explicit(&q->ev_val[i], v, memory_order_relaxed);
	atomic_store_explicit(&q->nrec, n + 1, memory_order_release);
	if (q->watched) {
		atomic_store_explicit(&q->value, v, memory_order_release);
		rf__ec_notify(&cx->ec);
	}
	return 0;
}

static int rf__cuda_wait(void *c, unsigned queue, unsigned wqueue, int64_t v, size_t block)
{
	rf__cuda_ctx *cx = c;
	if (queue == wqueue) /* stream order already */
		return 0;
	rf__cuda_queue *q = &cx->q[queue], *w = &cx->q[wqueue];
	if (w->stream == NULL) /* a host queue: its lane's signal, on the host */
		return rf__cuda_host_wait(cx, wqueue, v, block, NULL);
	if (RF__TEST_HOOK(drop_raw_wait) && !q->copies && w->copies) /* negative control only */
		return 0;
	uint64_t n = atomic_load_explicit(&w->nrec, memory_order_relaxed);
	if (n == 0 || atomic_load_explicit(&w->ev_val[(n - 1) % w->nev], memory_order_relaxed) < v)
		return rf__err(RF_EBACKEND, "cuda: queue %u would wait for q%u >= %lld, which is never recorded before it",
			       queue, wqueue, (long long)v);
	RF__CUDA_TRY(cx->api, "cudaStreamWaitEvent", cx->api->stream_wait_event(q->stream, rf__cuda_event_for(w, v)));
	return 0;
}

/* Wait for the compute nwin back, honour a cancel, call the user, then record compute c's event. */
static int rf__cuda_compute(void *c, rf__run *run, unsigned queue, size_t b, unsigned slot)
{
	rf__cuda_ctx *cx = c;
	if (cx->ncomp >= cx->nwin) {
		int e = cx->api->event_synchronize(cx->win[(cx->ncomp - cx->nwin) % cx->nwin]);
		if (e != 0)
			return rf__cuda_fail(cx->api, "cudaEventSynchronize (enqueue window)", e);
	}
	if (atomic_load_explicit(run->cancel, memory_order_relaxed) || atomic_load_explicit(&cx->stop, memory_order_relaxed))
		return RF_ECANCELED;
	int rc = rf__call_compute(run, b, slot, cx->q[queue].stream);
	if (rc != 0)
		return rc;
	void *ev = cx->win[cx->ncomp % cx->nwin];
	RF__CUDA_TRY(cx->api, "cudaEventRecord (enqueue window)", cx->api->event_record(ev, cx->q[queue].stream));
	cx->ncomp++;
	return 0;
}

static int rf__cuda_misplaced_stage(void *c, rf__run *run, unsigned queue, size_t b, unsigned stage, uint32_t node)
{
	(void)node;
	return rf__cuda_misplaced(c, run, queue, b, stage);
}

/* Host queues' ops are their lanes': the walker skips them (rf__walk's skip mask). */
static const rf__walk_ops rf__cuda_ops = {rf__cuda_copy, rf__cuda_compute, rf__cuda_signal, rf__cuda_wait,
					rf__cuda_misplaced_stage};

static int rf__cuda_lanes_done(void *arg)
{
	return atomic_load_explicit(&((rf__cuda_ctx *)arg)->active, memory_order_acquire) == 0;
}

/* Start the lanes, walk the streams' ops, wait for the lanes. The first failure of any is the run's
 * (its message said again here, on the caller's thread). */
static int rf__cuda_walk_all(rf__cuda_ctx *cx, rf__run *run)
{
	int rc = rf__cuda_pool_prepare(cx, run->prog);
	if (rc != RF_OK)
		return rc;
	for (unsigned i = 0; i < cx->nq; i++) {
		atomic_store_explicit(&cx->q[i].value, 0, memory_order_relaxed);
		atomic_store_explicit(&cx->q[i].nrec, 0, memory_order_relaxed);
	}
	cx->ncomp = 0;
	cx->run = run;
	atomic_store(&cx->stop, 0);
	atomic_store(&cx->first_rc, 0);
	atomic_store(&cx->active, cx->nhost);
	for (unsigned i = 0; i < cx->nhost; i++)
		if (rf__pool_post(&cx->pool, i, &cx->lane[i].walk) != RF_OK) /* keyed items were quiesced */
			return rf__err(RF_EBACKEND, "cuda: staging lane %u has no room for the run", i);
	rc = rf__walk(run, -1, cx->hostq, &rf__cuda_ops, cx);
	if (rc != 0)
		rf__cuda_run_fail(cx, rc);
	rf__ec_wait(&cx->ec, rf__cuda_lanes_done, cx, cx->spin_ns);
	rc = atomic_load(&cx->first_rc);
	return rc == 0 || rc == RF_ECALLBACK || rc == RF_ECANCELED ? rc : rf__err(rc, "%s", cx->fail_msg);
}

static int rf__cuda_run(void *ctx, rf__run *run)
{
	rf__cuda_ctx *cx = ctx;
	const rf__cuda_api *api = cx->api;
	if (cx->broken)
		return rf__err(RF_EBACKEND, "cuda: pipeline unusable after a device error: %s", cx->broken_msg);
	rf__cuda_saved saved;
	int rc = rf__cuda_enter(api, cx->device, &saved);
	if (rc != RF_OK)
		return rc;
	rc = rf__cuda_walk_all(cx, run);
	/* Drain even on failure: nothing enqueued may still read the caller's sources after the return. */
	int e = rf__cuda_drain(cx);
	if (e != 0) {
		/* An asynchronous error (a kernel fault, a bad address) is sticky in CUDA: the context, and
		 * every pipeline on it, is unusable. */
		rf__cuda_fail(api, "cudaStreamSynchronize", e);
		snprintf(cx->broken_msg, sizeof cx->broken_msg, "%s", rf__errmsg_peek());
		cx->broken = 1;
		rc = RF_EBACKEND;
	}
	rf__cuda_leave(api, &saved);
	return rc;
}

static void rf__cuda_describe(void *ctx, char *buf, size_t cap)
{
	rf__cuda_ctx *cx = ctx;
	unsigned ns = cx->nq - cx->nhost; /* host queues have no stream */
	char node[24] = "unknown", stage[320] = "stages nothing";
	if (cx->numa_node >= 0)
		snprintf(node, sizeof node, "%d", cx->numa_node);
	if (cx->nhost > 0)
		snprintf(stage, sizeof stage, "%u staging queue%s on %u thread%s (rf-stage-N, %s), pinned ring of %u slots "
					      "page-locked on the first pageable block; file sources read into it",
			 cx->nhost, cx->nhost == 1 ? "" : "s", cx->pool.n, cx->pool.n == 1 ? "" : "s", cx->placed, cx->nstage);
	snprintf(buf, cap,
		 "cuda: device %d (%s, host NUMA node %s); %u stream%s, %u events each, reused round-robin; the host "
		 "enqueues at most %u computes ahead; %s",
		 cx->device, cx->name, node, ns, ns == 1 ? "" : "s", 2 * cx->nslots + 8, cx->nwin, stage);
}

/* The pinned host ring, once allocated. */
static int rf__cuda_placement(void *ctx, rf_placement *out)
{
	rf__cuda_ctx *cx = ctx;
	unsigned char *pin = atomic_load_explicit(&cx->pin, memory_order_acquire);
	if (pin == NULL)
		return rf__err(RF_ENOTSUP, "cuda: no pinned host ring (allocated on the first pageable block%s)",
			       cx->nhost ? "; none yet" : "; this program stages nothing");
	int rc = rf__staging_placement(pin, out);
	if (rc == RF_OK && cx->placement_note != NULL && cx->placement_note[0] != '\0')
		out->reason = cx->placement_note;
	return rc;
}

/* The embedder API (cuda_api.h): every call leaves the caller's current context as it found it — "none"
 * included — and clears only CUDA errors it caused. */
int rf__cuda_host_register(const void *p, size_t bytes)
{
	if (p == NULL || bytes == 0)
		return rf__err(RF_EINVAL, "rf_cuda_host_register: %s", p == NULL ? "p is NULL" : "bytes is 0");
	/* A registration belongs to no device (Portable) but needs a context: the current one, else
	 * device 0's, given back afterwards. */
	rf__cuda_saved saved;
	int rc = rf__cuda_probe(0);
	if (rc != RF_OK || (rc = rf__cuda_enter(rf__cuda, -1, &saved)) != RF_OK)
		return rf__err(rc, "rf_cuda_host_register: %s", rf__errmsg_peek());
	int e = rf__cuda_clear(rf__cuda, rf__cuda->host_register((void *)p, bytes));
	rf__cuda_leave(rf__cuda, &saved);
	if (e != 0)
		return rf__err(RF_EBACKEND, "rf_cuda_host_register: cudaHostRegister(%p, %zu) failed: %s (%s)", p, bytes,
			       rf__cuda->error_string(e), rf__cuda->error_name(e));
	return RF_OK;
}

int rf__cuda_host_unregister(const void *p)
{
	if (p == NULL)
		return rf__err(RF_EINVAL, "rf_cuda_host_unregister: p is NULL");
	int rc = rf__cuda_probe(0);
	if (rc != RF_OK)
		return rf__err(rc, "rf_cuda_host_unregister: %s", rf__errmsg_peek());
	int e = rf__cuda_clear(rf__cuda, rf__cuda->host_unregister((void *)p));
	if (e != 0)
		return rf__err(RF_EINVAL, "rf_cuda_host_unregister: cudaHostUnregister(%p) failed: %s (%s)", p,
			       rf__cuda->error_string(e), rf__cuda->error_name(e));
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
	/* The registration belongs to the current device's context: make it `device`'s, and create that
	 * context now — not inside the arena's extent hook, which runs under jemalloc's locks. */
	int node;
	rf__cuda_saved saved;
	if ((rc = rf__cuda_probe(device)) != RF_OK || (rc = rf__cuda_enter(rf__cuda, device, &saved)) != RF_OK)
		return rf__err(rc, "rf_cuda_staging_alloc: %s", rf__errmsg_peek());
	int e = rf__cuda->init_context();
	if (e != 0) {
		rf__cuda_fail(rf__cuda, "cudaFree(0) (context creation)", e);
		rf__cuda_leave(rf__cuda, &saved);
		return rf__err(RF_ENODEV, "rf_cuda_staging_alloc: %s", rf__errmsg_peek());
	}
	rf__cuda_policy(rf__cuda, device, &in, &pol, &node);
	rc = rf__staging_alloc(&pol, bytes, rf__staging_align_for(bytes), out);
	rf__cuda_leave(rf__cuda, &saved);
	if (rc != RF_OK)
		return rf__err(rc, "rf_cuda_staging_alloc: %s", rf__errmsg_peek());
	return RF_OK;
}

const rf__backend_ops rf__backend_cuda = {
	.abi = RF__BACKEND_ABI,
	.name = "cuda",
	.caps = RF__CAP_OVERLAP | RF__CAP_DEVICE,
	.probe = rf__cuda_probe,
	.open = rf__cuda_open,
	.close = rf__cuda_close,
	.slots_alloc = rf__cuda_slots_alloc,
	.slots_free = rf__cuda_slots_free,
	.run = rf__cuda_run,
	.describe = rf__cuda_describe,
	.placement = rf__cuda_placement,
	.post = rf__cuda_kpost,
	.slot_align = RF__ALIGN_DEVICE, /* vectorised loads, TMA and DMA want 256 B on the device */
	.stage_slots = rf__cuda_stage_slots,
};
