/* backends/cuda_stage.c — two-hop staging on cuda: the host queues (STAGE nodes) as lanes of one pool,
 * the pinned ring they fill, and which sources need it.
 *
 * cudaMemcpyAsync from pageable memory copies synchronously through a driver bounce buffer, so the
 * cuda program is the staged ring (graph/lower.c). Each host queue is a lane (rf-stage-N) walking its
 * own ops with the one interpreter (runtime/walk.h) while the walker enqueues the streams' ops:
 *   STAGE b into t:  a source DMA can read is not copied (slot t's state says "read the source"); a
 *                    pageable one is copied into pinned slot t by the lane and its helpers (base/piece.h);
 *                    a file's range is read into it (its aligned window), the read left in flight while
 *                    the lane walks on (io/flight.h: a read per pinned slot at most); once it landed the
 *                    state says where its bytes begin, and the signal behind it goes out, in order.
 *   lane waits for a stream (the slot's WAR): until the walker recorded that signal, then its event.
 *   stream waits for a lane (the copy's RAW): the walker waits on the host, taking pieces meanwhile.
 * A lane whose waits and consumers are the one stream it feeds defers the event wait until a STAGE that
 * writes a pinned slot: runs of pinned sources then wait on no event on the host.
 *
 * The pinned ring is allocated on the first block that needs it (pipelines fed pinned or device memory
 * never page-lock one), on the GPU's NUMA node when allowed, slots on page boundaries. DMA-capable
 * sources are judged by whole ranges (a hole between two registrations is pageable), cached per thread. */
#include "backends/cuda_int.h"
#include "base/alloc.h"
#include "base/error.h"
#include "io/file.h"
#include "runtime/walk.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The pinner the staging layer page-locks pinned arenas with. */
static int rf__cuda_pin(void *p, size_t len, const char **why)
{
	int e = rf__cuda_clear(rf__cuda, rf__cuda->host_register(p, len));
	if (e != 0)
		*why = rf__cuda->error_string(e);
	return e;
}

static void rf__cuda_unpin(void *p)
{
	rf__cuda_clear(rf__cuda, rf__cuda->host_unregister(p));
}

static const rf__staging_pinner rf__cuda_pinner = {rf__cuda_pin, rf__cuda_unpin};

/* A pinned staging policy for `device`: "auto" becomes the GPU's NUMA node when known. */
void rf__cuda_policy(const rf__cuda_api *api, int device, const rf__staging_policy *in, rf__staging_policy *out,
		   int *numa_node)
{
	*out = in != NULL ? *in : (rf__staging_policy){RF__STG_AUTO, -1, 0};
	*numa_node = -1;
	if (rf__cuda_clear(api, api->device_numa_node(device, numa_node)) != 0)
		*numa_node = -1;
	if (out->kind == RF__STG_AUTO && *numa_node >= 0) {
		out->kind = RF__STG_NODE;
		out->node = *numa_node;
	}
	out->pinned = 1;
	rf__staging_set_pinner(&rf__cuda_pinner);
}

/* The ring under cx's policy; when "auto" chose a GPU node the process may not use (cpuset/mems: the
 * note is still ""), by the caller's node instead, said in placement. Under pin_mu. */
static int rf__cuda_ring_alloc(rf__cuda_ctx *cx, void **mem)
{
	size_t bytes = (size_t)cx->nstage * cx->pin_stride;
	int rc = rf__staging_alloc(&cx->pinned_policy, bytes, RF__STAGING_SLOT_ALIGN, mem);
	if (rc == RF_EINVAL && cx->placement_note != NULL && cx->placement_note[0] == '\0') {
		rf__staging_policy caller = {RF__STG_AUTO, -1, 1};
		if ((rc = rf__staging_alloc(&caller, bytes, RF__STAGING_SLOT_ALIGN, mem)) == RF_OK) {
			cx->pinned_policy = caller;
			cx->placement_note = "the GPU's NUMA node is outside this process's allowed nodes (cpuset/mems): "
					     "placed by the caller's node instead";
		}
	}
	if (rc != RF_OK)
		rf__err(rc, "cuda: a pageable block needs the pinned host ring (%u x %zu bytes), which "
			    "cannot be allocated: %s", cx->nstage, cx->pin_stride, rf__errmsg_peek());
	return rc;
}

int rf__cuda_pin_ring(rf__cuda_ctx *cx, unsigned char **out)
{
	int rc = RF_OK;
	if ((*out = atomic_load_explicit(&cx->pin, memory_order_acquire)) != NULL)
		return RF_OK;
	pthread_mutex_lock(&cx->pin_mu);
	if ((*out = atomic_load_explicit(&cx->pin, memory_order_relaxed)) == NULL) {
		void *mem = NULL;
		rc = rf__cuda_ring_alloc(cx, &mem);
		atomic_store_explicit(&cx->pin, *out = mem, memory_order_release);
	}
	pthread_mutex_unlock(&cx->pin_mu);
	return rc;
}

/* Staging threads: half the online CPUs (more only contend for memory bandwidth), 1..RF__CUDA_STAGE_MAX. */
static unsigned rf__cuda_stage_threads(void)
{
	if (RF__TEST_HOOK(cuda_copy_threads) != 0)
		return RF__TEST_HOOK(cuda_copy_threads) < RF__CUDA_STAGE_MAX ? RF__TEST_HOOK(cuda_copy_threads) : RF__CUDA_STAGE_MAX;
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	unsigned want = cpus > 2 ? (unsigned)(cpus / 2) : 1;
	return want > RF__CUDA_STAGE_MAX ? RF__CUDA_STAGE_MAX : want;
}

/* Pinned slots per copy queue: two (one filling, one draining) plus enough for every staging thread to
 * have a piece in flight, at most RF__CUDA_NPIN_MAX; independent of depth (deep rings would page-lock GBs). */
unsigned rf__cuda_stage_slots(size_t slot_bytes)
{
	size_t pieces = (slot_bytes + RF__CUDA_PIECE - 1) / RF__CUDA_PIECE, threads = rf__cuda_stage_threads();
	size_t n = 2 + (threads + pieces - 1) / (pieces ? pieces : 1);
	return n > RF__CUDA_NPIN_MAX ? RF__CUDA_NPIN_MAX : (unsigned)n;
}

/* 1 when every byte of [p, p + n) is DMA-capable; `cache` is the calling thread's (an unused entry's
 * length 0 contains nothing). */
int rf__cuda_is_dma(rf__cuda_ctx *cx, rf__cuda_range *cache, const void *p, size_t n)
{
	uintptr_t at = (uintptr_t)p, end = at + n;
	while (at < end) {
		unsigned i = 0;
		while (i < RF__CUDA_RANGES && !(at >= cache[i].start && at - cache[i].start < cache[i].len))
			i++;
		if (i == RF__CUDA_RANGES) {
			const void *start;
			size_t len;
			if (!cx->api->dma_range((const void *)at, &start, &len) || len == 0 ||
			    (uintptr_t)start > at || (uintptr_t)start + len <= at)
				return 0;
			memmove(&cache[1], &cache[0], (RF__CUDA_RANGES - 1) * sizeof cache[0]);
			cache[0] = (rf__cuda_range){(uintptr_t)start, len};
			i = 0;
		}
		at = cache[i].start + cache[i].len;
	}
	return 1;
}

/* A read landed: the copy of its staging slot reads where its bytes begin (before the signal behind it,
 * or the keyed H2D behind it); NULL says it failed. A run's stage is a slice of its trace from its start
 * to its landing (a keyed hint's is traced by the keyed trace). */
static void rf__cuda_landed(void *ctx, rf__flight_rec *r, int phase)
{
	rf__cuda_lane *l = ctx;
	if (r->kind == RF_OP_STAGE && l->trace != NULL)
		rf__trace_copy(l->trace, r, phase);
	if (phase == RF__FLIGHT_LANDED)
		l->cx->sslot[r->slot] = r->rc == RF_OK ? r->dst + r->shift : NULL;
}

/* Reap lane l's landed reads (their signals go out in order); a failed one fails the run. */
static void rf__cuda_lane_progress(rf__cuda_lane *l)
{
	if (rf__flight_reap(&l->flight) != RF_OK) {
		rf__err(RF_EIO, "cuda: %s", l->flight.msg);
		rf__cuda_run_fail(l->cx, RF_EIO);
	}
}

typedef struct rf__cuda_until {
	rf__cuda_ctx *cx;
	const rf__cuda_queue *w;
	int64_t v;
	rf__cuda_lane *l; /* a waiting lane, which keeps its reads landing (NULL: the walker) */
} rf__cuda_until;

/* A waiting lane reaps its reads only while what it waits for has not come: a wait already met costs a load. */
static int rf__cuda_reached(void *arg)
{
	rf__cuda_until *u = arg;
	for (int reaped = u->l == NULL;; reaped = 1) {
		if (atomic_load_explicit(&u->w->value, memory_order_acquire) >= u->v ||
		    atomic_load_explicit(&u->cx->stop, memory_order_relaxed))
			return 1;
		if (reaped)
			return 0;
		rf__cuda_lane_progress(u->l);
	}
}

/* Wait for queue w to reach v. A lane with reads in flight sleeps in its reader, woken by a read
 * landing or by its bell: what it waits for may be queued behind its own reads. */
static int rf__cuda_await(rf__cuda_ctx *cx, const rf__cuda_queue *w, int64_t v, rf__cuda_lane *l)
{
	rf__cuda_until u = {cx, w, v, l};
	while (l != NULL && rf__flight_busy(&l->flight) && !rf__cuda_reached(&u))
		rf__ec_wait_bell(&cx->ec, rf__cuda_reached, &u, 0, l->flight.bell_slot, rf__flight_sleep, &l->flight);
	rf__ec_wait(&cx->ec, rf__cuda_reached, &u, cx->spin_ns);
	return atomic_load_explicit(&w->value, memory_order_acquire) >= v ? RF_OK : RF__CUDA_STOP;
}

int rf__cuda_host_wait(rf__cuda_ctx *cx, unsigned wq, int64_t v, size_t block, rf__cuda_lane *l)
{
	rf__cuda_queue *w = &cx->q[wq];
	if (atomic_load_explicit(&w->value, memory_order_acquire) >= v)
		return RF_OK;
	rf__piece_help(&cx->lane[w->lane].job, block, &w->value, v);
	return rf__cuda_await(cx, w, v, l);
}

static int rf__cuda_event_wait(rf__cuda_ctx *cx, unsigned wq, int64_t v)
{
	int e = cx->api->event_synchronize(rf__cuda_event_for(&cx->q[wq], v));
	return e != 0 ? rf__cuda_fail(cx->api, "cudaEventSynchronize (staging slot free)", e) : RF_OK;
}

void rf__cuda_run_fail(rf__cuda_ctx *cx, int rc)
{
	if (rc != RF__CUDA_STOP && rf__first_failure(&cx->first_rc, rc))
		snprintf(cx->fail_msg, sizeof cx->fail_msg, "%s", rf__errmsg_peek());
	atomic_store(&cx->stop, 1);
	rf__ec_notify(&cx->ec);
}

int rf__cuda_stage(rf__cuda_lane *l, const void *src, const rf__fsrc *fs, size_t n, size_t block, unsigned t,
		 const rf__flight_rec *rec)
{
	rf__cuda_ctx *cx = l->cx;
	unsigned char *pin;
	int rc = rf__cuda_pin_ring(cx, &pin);
	if (rc != RF_OK)
		return rc;
	/* The lane's flight, opened on its first file read: its reader and bell, the pinned ring registered. */
	if (fs != NULL && rf__flight_open(&l->flight, pin, (size_t)cx->nstage * cx->pin_stride) != RF_OK)
		return rf__err(RF_ENOMEM, "cuda: file reads of staging lane %u: %s", l->index, rf__errmsg_peek());
	unsigned char *dst = pin + (size_t)t * cx->pin_stride;
	if (fs != NULL) { /* the read starts and the lane walks on; its bytes are known once landed */
		rf__flight_rec r = *rec;
		/* traced: rf__cuda_landed is told; a keyed copy's ALONE kept */
		r.slot = t, r.traced = 1, r.flags = RF__READER_SHIFT_OK | (rec->flags & RF__READER_ALONE);
		if ((rc = rf__flight_start(&l->flight, fs, n, dst, cx->pin_stride, &r)) != RF_OK)
			return rf__err(rc, "cuda: %s", rf__errmsg_peek());
		return RF__WALK_ASYNC;
	}
	for (unsigned i = cx->nhost + l->index; rf__piece_size(n) != 0 && i < cx->nhost + cx->nhelp; i += cx->nhost) {
		rf__cuda_lane *h = &cx->lane[i];
		if (h->help_seq != UINT64_MAX && rf__lane_consumed(&cx->pool, i) <= h->help_seq)
			continue; /* still on an earlier copy */
		h->help_block = block;
		h->help_seq = rf__lane_posted(&cx->pool, i);
		(void)rf__pool_post(&cx->pool, i, &h->walk);
	}
	rf__piece_copy(&l->job, dst, src, n, block, 0);
	cx->sslot[t] = dst;
	return RF_OK;
}

static int rf__cuda_lane_stage(void *c, rf__run *run, unsigned queue, size_t b, unsigned t, uint32_t node)
{
	rf__cuda_lane *l = c;
	rf__cuda_ctx *cx = l->cx;
	if (atomic_load_explicit(&cx->stop, memory_order_relaxed) || atomic_load_explicit(run->cancel, memory_order_relaxed))
		return RF_ECANCELED;
	size_t n = run->sizes[b];
	const void *src = run->srcs[b];
	int file = n != 0 && run->nfile > 0 && run->src[b].fs.f != NULL, rc;
	if (n == 0 || (!file && rf__cuda_is_dma(cx, l->ranges, src, n))) {
		cx->sslot[t] = src; /* its copy reads the source: nothing to stage */
		return RF_OK;
	}
	if (l->pend != 0 && (rc = rf__cuda_event_wait(cx, l->pend_q, l->pend)) != RF_OK)
		return rc;
	l->pend = 0;
	rf__flight_rec rec = {.block = (int64_t)b, .node = node, .queue = (uint8_t)queue, .kind = RF_OP_STAGE};
	return rf__cuda_stage(l, src, file ? &run->src[b].fs : NULL, n, b, t, &rec);
}

static int rf__cuda_lane_wait(void *c, unsigned queue, unsigned wq, int64_t v, size_t block)
{
	(void)queue;
	rf__cuda_lane *l = c;
	if (l->cx->q[wq].stream == NULL)
		return rf__cuda_host_wait(l->cx, wq, v, block, l);
	/* The record first: the walker's copy has read the slot's state by then. */
	int rc = rf__cuda_await(l->cx, &l->cx->q[wq], v, l);
	if (rc != RF_OK || !l->defer)
		return rc != RF_OK ? rc : rf__cuda_event_wait(l->cx, wq, v);
	l->pend_q = wq;
	l->pend = v > l->pend ? v : l->pend;
	return RF_OK;
}

static int rf__cuda_lane_signal(void *c, unsigned queue, int64_t v, size_t block)
{
	(void)block;
	rf__cuda_lane *l = c; /* after the lane's reads in flight, in order */
	rf__flight_signal(&l->flight, &l->cx->q[queue].value, v);
	return RF_OK;
}

int rf__cuda_misplaced(void *c, rf__run *run, unsigned queue, size_t b, unsigned slot)
{
	(void)c, (void)run, (void)b, (void)slot;
	return rf__err(RF_EBACKEND, "cuda: queue %u: an op its side does not run (host queues only stage)",
		       queue);
}

static int rf__cuda_lane_copy(void *c, rf__run *run, unsigned queue, size_t b, unsigned slot, unsigned stage,
		uint32_t node)
{
	(void)stage;
	(void)node;
	return rf__cuda_misplaced(c, run, queue, b, slot);
}

static const rf__walk_ops rf__cuda_lane_ops = {rf__cuda_lane_copy, rf__cuda_misplaced, rf__cuda_lane_signal,
					     rf__cuda_lane_wait, rf__cuda_lane_stage};

/* Once per lane thread: the device current, and thread-local capture mode (another thread's global
 * capture must not turn its event waits into errors). */
void rf__cuda_lane_enter(rf__cuda_lane *l)
{
	const rf__cuda_api *api = l->cx->api;
	int mode;
	if (!l->entered)
		rf__cuda_clear(api, api->set_device(l->cx->device) != 0 || api->capture_mode_local(&mode) != 0);
	l->entered = 1;
}

static void rf__cuda_walk_item(rf__work *w, void *ctx)
{
	(void)w;
	rf__cuda_lane *l = ctx;
	rf__cuda_ctx *cx = l->cx;
	rf__cuda_lane_enter(l);
	l->pend = 0;
	rf__flight_walk_start(&l->flight);
	l->trace = cx->run->trace;
	int rc = rf__walk(cx->run, (int)l->q, 0, &rf__cuda_lane_ops, l);
	if (rc != 0)
		rf__cuda_run_fail(cx, rc);
	/* The walk is over, its reads may not be (they write the pinned ring and read the caller's files). */
	for (rf__cuda_lane_progress(l); rf__flight_busy(&l->flight); rf__cuda_lane_progress(l))
		rf__flight_sleep(&l->flight);
	l->trace = NULL;
	atomic_fetch_sub_explicit(&cx->active, 1, memory_order_release);
	rf__ec_notify(&cx->ec);
}

static void rf__cuda_help_item(rf__work *w, void *ctx)
{
	(void)w;
	static const _Atomic int64_t never = 0;
	rf__cuda_lane *h = ctx;
	rf__piece_help(&h->cx->lane[h->q].job, h->help_block, &never, 1);
}

/* The lanes run on the CPUs of the GPU's NUMA node when allowed (else as created; describe says why). */
static int rf__cuda_place(rf__cuda_ctx *cx)
{
	hwloc_topology_t topo = rf__topo_acquire();
	if (topo == NULL)
		return rf__err(RF_EBACKEND, "cuda: placing the staging threads: %s", rf__errmsg_peek());
	hwloc_obj_t obj = cx->numa_node >= 0 ? hwloc_get_numanode_obj_by_os_index(topo, (unsigned)cx->numa_node) : NULL;
	hwloc_cpuset_t cs = hwloc_bitmap_alloc();
	int ok = obj != NULL && cs != NULL;
	if (ok) {
		hwloc_bitmap_and(cs, obj->cpuset, hwloc_topology_get_allowed_cpuset(topo));
		ok = !hwloc_bitmap_iszero(cs);
		for (unsigned i = 0; ok && i < cx->pool.n; i++)
			ok = hwloc_set_thread_cpubind(topo, cx->pool.lane[i].tid, cs, 0) == 0;
	}
	if (ok)
		snprintf(cx->placed, sizeof cx->placed, "on the CPUs of NUMA node %d", cx->numa_node);
	else
		snprintf(cx->placed, sizeof cx->placed, "not placed: %s",
			 cx->numa_node < 0 ? "the GPU's NUMA node is unknown" : "binding refused");
	hwloc_bitmap_free(cs);
	rf__topo_release(topo);
	return RF_OK;
}

int rf__cuda_pool_open(rf__cuda_ctx *cx, const struct rf_program *p, struct rf__flight *report,
		      const rf__lane_ops *between)
{
	uint64_t others = 0;
	for (size_t i = 0; p != NULL && i < p->nops; i++) {
		uint64_t bit = (uint64_t)1 << p->ops[i].queue;
		if (p->ops[i].kind == RF_OP_STAGE)
			cx->hostq |= bit;
		else if (p->ops[i].kind == RF_OP_COPY || p->ops[i].kind == RF_OP_COMPUTE)
			others |= bit;
	}
	if (cx->hostq & others)
		return rf__err(RF_ENOTSUP, "cuda: queue %u stages and also copies or computes (a queue with STAGE nodes is "
					   "a host thread: STAGE and WAIT nodes only)", (unsigned)__builtin_ctzll(cx->hostq & others));
	cx->nhost = (unsigned)__builtin_popcountll(cx->hostq);
	if (cx->nhost == 0)
		return RF_OK;
	unsigned threads = rf__cuda_stage_threads(), n;
	cx->nhelp = threads > cx->nhost ? threads - cx->nhost : 0;
	n = cx->nhost + cx->nhelp;
	void **ctx = rf__calloc(n, sizeof *ctx);
	if ((cx->lane = rf__calloc(n, sizeof *cx->lane)) == NULL || ctx == NULL ||
	    (cx->sslot = rf__calloc(cx->nstage ? cx->nstage : 1, sizeof *cx->sslot)) == NULL) {
		free(ctx);
		return rf__err(RF_ENOMEM, "cuda: out of memory");
	}
	for (unsigned i = 0, q = 0; i < n; i++) {
		rf__cuda_lane *l = &cx->lane[i];
		while (i < cx->nhost && !((cx->hostq >> q) & 1))
			q++;
		*l = (rf__cuda_lane){.cx = cx, .index = i, .q = i < cx->nhost ? q++ : (i - cx->nhost) % cx->nhost,
				   .help_seq = UINT64_MAX};
		l->walk.fn = i < cx->nhost ? rf__cuda_walk_item : rf__cuda_help_item;
		rf__piece_init(&l->job);
		rf__flight_init(&l->flight, &cx->ec, i, NULL);
		l->flight.hook = rf__cuda_landed, l->flight.hook_ctx = l;
		if (i < cx->nhost) {
			cx->q[l->q].lane = i;
			l->flight.report = report; /* describe: how the lane's reader reads */
		}
		ctx[i] = l;
	}
	int rc = rf__pool_start(&cx->pool, n, "stage", &cx->ec, cx->spin_ns, between, ctx);
	free(ctx);
	if (rc != RF_OK)
		return rf__err(rc, "cuda: %s", rf__errmsg_peek());
	return rf__cuda_place(cx);
}

void rf__cuda_pool_close(rf__cuda_ctx *cx)
{
	rf__pool_stop(&cx->pool);
	for (unsigned i = 0; cx->lane != NULL && i < cx->nhost + cx->nhelp; i++)
		rf__flight_fini(&cx->lane[i].flight);
	free(cx->lane);
	free((void *)cx->sslot);
	cx->lane = NULL;
	cx->sslot = NULL;
}

int rf__cuda_pool_prepare(rf__cuda_ctx *cx, const struct rf_program *p)
{
	if (p == cx->seen)
		return RF_OK;
	uint64_t host = 0, wmask[RF_MAX_QUEUES] = {0}, cmask[RF_MAX_QUEUES] = {0};
	for (size_t i = 0; i < p->nops; i++) {
		const rf__op *o = &p->ops[i];
		host |= (uint64_t)(o->kind == RF_OP_STAGE) << o->queue;
		if (o->kind == RF_OP_WAIT) {
			wmask[o->queue] |= (uint64_t)1 << o->wqueue;
			cmask[o->wqueue] |= (uint64_t)1 << o->queue;
		}
	}
	if (host != cx->hostq)
		return rf__err(RF_EBACKEND, "cuda: the program's host queues are not those the pipeline was made with");
	for (unsigned q = 0; q < cx->nq; q++)
		cx->q[q].watched = cx->q[q].stream != NULL && (cmask[q] & host) != 0;
	for (unsigned i = 0; i < cx->nhost; i++) {
		uint64_t m = wmask[cx->lane[i].q] | cmask[cx->lane[i].q];
		cx->lane[i].defer = __builtin_popcountll(m) == 1 && !(m & host);
	}
	cx->seen = p;
	return RF_OK;
}
