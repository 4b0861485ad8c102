/* backends/cuda.c — the CUDA backend: a lowered program becomes streams, events and stream waits.
 *
 * One stream per queue. The caller's thread walks the program in its global issue order (a
 * topological order) and only enqueues: copy -> cudaMemcpyAsync on the queue's stream, signal ->
 * cudaEventRecord, wait -> cudaStreamWaitEvent, compute -> the user's callback with the queue's stream
 * (it enqueues kernels and returns). The host runs at most a window of computes ahead of the device
 * (cuda_event.c) and rf_pipeline_run synchronises once at the end. Because the walk is topological,
 * every wait is enqueued after the record it needs — cudaStreamWaitEvent captures the event's latest
 * record at the time of the call, so a wait enqueued first would wait for nothing.
 *
 * Pageable sources take two hops through a pinned host ring (cuda_hop.c): a dispatcher thread per
 * copying queue has the copy team fill pinned slots ahead of the walker, which enqueues the H2D from
 * there; no host functions. Every entry point makes
 * params.device current and puts the caller's context back afterwards, "no context" included.
 *
 * All CUDA calls go through rf__cuda (backends/cuda_api.h): this file includes no CUDA header, builds
 * without the toolkit, and its lowering is tested on machines without a GPU against a simulator. */
#include "backends/cuda_int.h"
#include "base/alloc.h"
#include "base/error.h"
#include "runtime/walk.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef RF_HAVE_CUDA
const rf__cuda_api *rf__cuda = NULL; /* no toolkit: no real CUDA; tests may still install a double */
#endif

int rf__cu_fail(const rf__cuda_api *api, const char *call, int err)
{
	(void)api->get_last_error(); /* the error this call left must not reach the application's next check */
	return rf__err(RF_EBACKEND, "cuda: %s failed: %s (%s)", call, api->error_string(err), api->error_name(err));
}

/* Make `device` current for the duration of a call, and put the caller's context back afterwards: an
 * embedder may drive several GPUs from one thread, or none from this one (review defect 3: a thread
 * without a context must not be left with one, least of all device 0's). */
int rf__cu_enter(const rf__cuda_api *api, int device, rf__cu_saved *saved)
{
	saved->ctx = NULL;
	saved->valid = api->ctx_get(&saved->ctx) == 0;
	if (!saved->valid)
		(void)api->get_last_error();
	int cur = -1;
	if (saved->valid && saved->ctx != NULL && api->get_device(&cur) != 0) {
		(void)api->get_last_error();
		cur = -1;
	}
	if (cur != device)
		RF__CU_TRY(api, "cudaSetDevice", api->set_device(device));
	return RF_OK;
}

void rf__cu_leave(const rf__cuda_api *api, const rf__cu_saved *saved)
{
	if (saved->valid && api->ctx_set(saved->ctx) != 0)
		(void)api->get_last_error();
}

/* ---- probe -------------------------------------------------------------------------------------- */

static void rf__cu_version(int v, char *buf, size_t cap)
{
	snprintf(buf, cap, "%d.%d", v / 1000, v % 1000 / 10);
}

int rf__cu_probe(int device)
{
	const rf__cuda_api *api = rf__cuda;
	if (api == NULL)
		return rf__err(RF_ENODEV, "backend \"cuda\" is not built into this library (no CUDA toolkit at build time)");
	int n = 0, e = api->get_device_count(&n);
	if (e != 0) {
		(void)api->get_last_error();
		/* A driver that is there but older than the runtime is not "no GPU" (defect 2): say both. */
		int drv = 0, rt = api->runtime_version();
		if (api->driver_version(&drv) != 0) {
			(void)api->get_last_error();
			drv = 0;
		}
		if (drv > 0 && drv < rt) {
			char d[16], r[16];
			rf__cu_version(drv, d, sizeof d);
			rf__cu_version(rt, r, sizeof r);
			return rf__err(RF_ENODEV,
				       "cuda: the CUDA driver (%s, %d) is older than the CUDA runtime this library was built "
				       "with (%s, %d): update the driver; cudaGetDeviceCount: %s (%s)",
				       d, drv, r, rt, api->error_string(e), api->error_name(e));
		}
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

/* ---- open / close ------------------------------------------------------------------------------- */

static int rf__cu_queue_open(rf__cu *cx, rf__cu_queue *q)
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
	return RF_OK;
}

/* Tear down whatever open built (partially built state included). Clears only errors it caused. */
static void rf__cu_free(rf__cu *cx)
{
	const rf__cuda_api *api = cx->api;
	for (unsigned i = 0; cx->q != NULL && i < cx->nq; i++) {
		rf__cu_queue *q = &cx->q[i];
		if (q->stream != NULL && api->stream_synchronize(q->stream) != 0)
			(void)api->get_last_error();
	}
	for (unsigned i = 0; cx->q != NULL && i < cx->nq; i++) {
		rf__cu_queue *q = &cx->q[i];
		for (unsigned j = 0; q->ev != NULL && j < q->nev; j++)
			if (q->ev[j] != NULL && api->event_destroy(q->ev[j]) != 0)
				(void)api->get_last_error();
		rf__cu_stage_free(cx, q);
		if (q->stream != NULL && api->stream_destroy(q->stream) != 0)
			(void)api->get_last_error();
		free(q->ev);
		free(q->ev_val);
	}
	rf__cu_keyed_free(cx);
	for (unsigned i = 0; cx->win != NULL && i < cx->nwin; i++)
		if (cx->win[i] != NULL && api->event_destroy(cx->win[i]) != 0)
			(void)api->get_last_error();
	free(cx->win);
	if (cx->team_started)
		rf__cu_team_fini(&cx->team);
	free(cx->q);
	free(cx);
}

static int rf__cu_open(const rf__open_args *args, void **ctx)
{
	const rf__cuda_api *api = rf__cuda;
	rf__cu_saved saved;
	int rc;
	if ((rc = rf__cu_probe(args->device)) != RF_OK)
		return rc;
	rf__cu *cx = rf__calloc(1, sizeof *cx);
	if (cx == NULL)
		return rf__err(RF_ENOMEM, "cuda: out of memory");
	cx->api = api;
	cx->device = args->device;
	cx->nq = args->nqueues;
	cx->slot_bytes = args->slot_bytes;
	/* Pinned slots start on page boundaries (defect 4): the H2D of each reads whole pages. */
	cx->pin_stride = rf__slot_stride(args->slot_bytes, RF__ALIGN_PINNED);
	if ((rc = rf__cu_enter(api, cx->device, &saved)) != RF_OK) {
		free(cx);
		return rc;
	}
	if (api->device_name(cx->device, cx->name, sizeof cx->name) != 0) {
		(void)api->get_last_error();
		snprintf(cx->name, sizeof cx->name, "?");
	}
	rf__cu_policy(api, cx->device, args->staging, &cx->pinned_policy, &cx->numa_node);
	/* "auto" turned into the GPU's node: a refusal of that node may fall back (rf__cu_pinned_alloc). */
	if ((args->staging == NULL || args->staging->kind == RF__STG_AUTO) && cx->pinned_policy.kind == RF__STG_NODE)
		cx->placement_note = "";
	/* Which queues copy, and so may need a staging hop (built on their first pageable block). */
	const struct rf_program *p = args->prog;
	cx->nslots = args->nslots ? args->nslots : 1; /* depth = auto may deepen the ring up to this */
	unsigned nev = 2 * cx->nslots + 8;
	cx->nwin = cx->nslots + RF__CU_WINDOW_MIN;
	if ((cx->q = rf__calloc(cx->nq, sizeof *cx->q)) == NULL || (cx->win = rf__calloc(cx->nwin, sizeof *cx->win)) == NULL) {
		rc = rf__err(RF_ENOMEM, "cuda: out of memory");
		goto fail;
	}
	for (size_t i = 0; p != NULL && i < p->nops; i++)
		if (p->ops[i].kind == RF_OP_COPY && !cx->q[p->ops[i].queue].copies++)
			cx->ncopyq++;
	for (unsigned i = 0; i < cx->nq; i++)
		cx->q[i].nev = nev;
	for (unsigned i = 0; i < cx->nq; i++)
		if ((rc = rf__cu_queue_open(cx, &cx->q[i])) != RF_OK)
			goto fail;
	for (unsigned i = 0; i < cx->nwin; i++) {
		int e = api->event_create(&cx->win[i]);
		if (e != 0) {
			rc = rf__cu_fail(api, "cudaEventCreateWithFlags (enqueue window)", e);
			goto fail;
		}
	}
	if ((rc = rf__cu_keyed_open(cx)) != RF_OK)
		goto fail;
	rf__cu_leave(api, &saved);
	*ctx = cx;
	return RF_OK;
fail:
	rf__cu_free(cx);
	rf__cu_leave(api, &saved);
	return rc;
}

static void rf__cu_close(void *ctx)
{
	rf__cu *cx = ctx;
	rf__cu_saved saved;
	const rf__cuda_api *api = cx->api;
	int entered = rf__cu_enter(api, cx->device, &saved) == RF_OK;
	rf__cu_free(cx);
	if (entered)
		rf__cu_leave(api, &saved);
}

/* ---- slots: the device ring ---------------------------------------------------------------------- */

/* Stream-ordered on queue 0's stream (defect 14): no device-wide synchronisation on free. */
static int rf__cu_slots_alloc(void *ctx, size_t bytes, void **mem)
{
	rf__cu *cx = ctx;
	const rf__cuda_api *api = cx->api;
	rf__cu_saved saved;
	int rc = rf__cu_enter(api, cx->device, &saved);
	if (rc != RF_OK)
		return rc;
	int e = api->malloc_device(mem, bytes, cx->q[0].stream);
	if (e == 0 && (e = api->stream_synchronize(cx->q[0].stream)) != 0) {
		(void)api->free_device(*mem, cx->q[0].stream);
		*mem = NULL;
	}
	rf__cu_leave(api, &saved);
	if (e != 0 && api->error_kind(e) == RF__CUE_NOMEM) {
		(void)api->get_last_error();
		return rf__err(RF_ENOMEM, "cuda: cudaMalloc of %zu bytes on device %d: %s", bytes, cx->device,
			       api->error_string(e));
	}
	if (e != 0)
		return rf__cu_fail(api, "cudaMallocAsync", e);
	return RF_OK;
}

static void rf__cu_slots_free(void *ctx, void *mem, size_t bytes)
{
	(void)bytes;
	rf__cu *cx = ctx;
	rf__cu_saved saved;
	if (rf__cu_enter(cx->api, cx->device, &saved) != RF_OK)
		return;
	if (rf__cu_keyed_settle(cx) != 0)
		(void)cx->api->get_last_error();
	if (cx->api->free_device(mem, cx->q[0].stream) != 0 || cx->api->stream_synchronize(cx->q[0].stream) != 0)
		(void)cx->api->get_last_error();
	rf__cu_leave(cx->api, &saved);
}

/* ---- the walk: ops become CUDA calls ----------------------------------------------------------- */

static int rf__cu_compute(void *c, rf__run *run, unsigned queue, size_t b, unsigned slot)
{
	rf__cu *cx = c;
	int rc = rf__cu_window_enter(cx, run->cancel);
	if (rc == 0)
		rc = rf__call_compute(run, b, slot, cx->q[queue].stream);
	if (rc == 0)
		rc = rf__cu_window_leave(cx, queue);
	return rc;
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
	q->ncopy++;
	if (q->hop == NULL) {
		if (rf__cu_is_dma(cx, q->ranges, run->srcs[b], n)) {
			RF__CU_TRY(cx->api, "cudaMemcpyAsync", cx->api->memcpy_async(dst, run->srcs[b], n, q->stream));
			return 0;
		}
		/* The queue's first pageable block: build its hop and hand the rest of this run's copies of
		 * the queue, this one included, to the dispatcher. */
		int rc = rf__cu_stage_open(cx, q);
		if (rc != RF_OK)
			return rf__err(rc, "cuda: a pageable block needs the staging hop, which cannot be built: %s",
				       rf__errmsg_peek());
		rf__cu_hop_start(q->hop, run, q->ncopy - 1);
	}
	return rf__cu_hop_take(cx, q, b, dst, run->srcs[b], n);
}

static const rf__walk_ops rf__cu_ops = {rf__cu_copy, rf__cu_compute, rf__cu_signal, rf__cu_wait};

/* Wait for everything enqueued on every stream. The first error wins. */
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
	}
	return first;
}

static int rf__cu_run(void *ctx, rf__run *run)
{
	rf__cu *cx = ctx;
	const rf__cuda_api *api = cx->api;
	if (cx->broken)
		return rf__err(RF_EBACKEND, "cuda: pipeline unusable after a device error: %s", cx->broken_msg);
	rf__cu_saved saved;
	int rc = rf__cu_enter(api, cx->device, &saved);
	if (rc != RF_OK)
		return rc;
	for (unsigned i = 0; i < cx->nq; i++) {
		rf__cu_queue *q = &cx->q[i];
		q->nrec = 0;
		q->ncopy = 0;
		if (q->hop != NULL)
			rf__cu_hop_start(q->hop, run, 0);
	}
	cx->ncomp = 0;
	rc = rf__walk(run, -1, &rf__cu_ops, cx);
	for (unsigned i = 0; i < cx->nq; i++)
		if (cx->q[i].hop != NULL)
			rf__cu_hop_end(cx->q[i].hop);
	/* Drain even on failure: nothing we enqueued may still run (or read the caller's sources) once
	 * rf_pipeline_run has returned. */
	const char *call = NULL;
	int e = rf__cu_drain(cx, &call);
	if (e != 0) {
		/* An error surfacing at synchronisation is asynchronous (a kernel fault, a bad address):
		 * CUDA keeps such errors sticky, so the context — and every pipeline on it — is unusable. */
		rf__cu_fail(api, call, e);
		snprintf(cx->broken_msg, sizeof cx->broken_msg, "%s", rf__errmsg_peek());
		cx->broken = 1;
		rc = RF_EBACKEND;
	}
	rf__cu_leave(api, &saved);
	return rc;
}

static int rf__cu_describe(void *ctx, char *buf, size_t cap)
{
	rf__cu *cx = ctx;
	unsigned nbuilt = 0, npin = 0;
	for (unsigned i = 0; i < cx->nq; i++)
		if (cx->q[i].hop != NULL)
			nbuilt++, npin = cx->q[i].hop->npin;
	char node[24] = "unknown", stage[200];
	if (cx->numa_node >= 0)
		snprintf(node, sizeof node, "%d", cx->numa_node);
	if (cx->stage_failed)
		snprintf(stage, sizeof stage, "pageable sources cannot be staged: %.150s", cx->stage_msg);
	else if (nbuilt == 0)
		snprintf(stage, sizeof stage, "pinned host ring for pageable sources: built on the first pageable block");
	else
		snprintf(stage, sizeof stage,
			 "pageable sources staged ahead through a pinned host ring of %u slots per copy queue (%u of "
			 "%u queue%s), %u dispatcher thread%s, %u copy thread%s",
			 npin, nbuilt, cx->ncopyq, cx->ncopyq == 1 ? "" : "s", cx->nhop_threads,
			 cx->nhop_threads == 1 ? "" : "s", cx->team.n, cx->team.n == 1 ? "" : "s");
	snprintf(buf, cap,
		 "cuda: device %d (%s, host NUMA node %s); %u stream%s (one per queue), %u events each, "
		 "reused round-robin; the host enqueues at most %u computes ahead; %s",
		 cx->device, cx->name, node, cx->nq, cx->nq == 1 ? "" : "s", cx->q[0].nev, cx->nwin, stage);
	return RF_OK;
}

/* The pinned host ring (the first copying queue's; all are placed alike). */
static int rf__cu_placement(void *ctx, rf_placement *out)
{
	rf__cu *cx = ctx;
	for (unsigned i = 0; i < cx->nq; i++)
		if (cx->q[i].hop != NULL) {
			int rc = rf__staging_placement(cx->q[i].hop->pin, out);
			if (rc == RF_OK && cx->placement_note != NULL && cx->placement_note[0] != '\0')
				out->reason = cx->placement_note;
			return rc;
		}
	return rf__err(RF_ENOTSUP, "cuda: no pinned host ring (built on the first pageable block%s)",
		       cx->ncopyq ? "; none yet" : "; this program copies nothing");
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
	.kissue = rf__cu_kissue,
	.ktest = rf__cu_ktest,
	.kcancel = NULL,
	.kwait = rf__cu_kwait,
	.ksync = rf__cu_ksync,
	.krelease = rf__cu_krelease,
	.kquiesce = rf__cu_kquiesce,
	.klanes = rf__cu_klanes,
	.slot_align = RF__ALIGN_DEVICE, /* vectorised loads, TMA and DMA want 256 B on the device */
};
