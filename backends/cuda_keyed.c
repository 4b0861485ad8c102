/* backends/cuda_keyed.c — keyed use (DESIGN.md "Keyed use") on cuda: a keyed copy is the staged ring's
 * block in small (stage if needed, copy on a lane's stream, signal), on the same lanes, streams, events.
 *
 * Lane l is copy queue l with its host lane and pinned slots (t = l + K i). Hints go on the copy queue's
 * stream, an acquire's copy on the lane's demand stream (never behind a hint not yet started). A copy's
 * ticket is an event recorded after its H2D, from a ring re-used only once known finished. By source:
 *   DMA-capable: the H2D from the source, at once;
 *   pageable, a hint: a stage item on the host lane copies it into a free pinned slot (after the H2D that
 *     last read it); the first keyed call that finds the stage done enqueues the H2D, in lane order;
 *   pageable, an acquire's: the caller stages it itself into the lane's slot 0, then the H2D.
 * Ordering of the H2D: WAW, its stream waits on the slot's previous ticket (req->after); WAR, on the
 * release events of the slot (one per releasing stream, RF__CU_KREL at most: a further stream first
 * waits on the oldest and takes its place), forgotten after; RAW, acquire makes the caller's stream
 * wait on the copy's event. A hint not yet started can be withdrawn. A stream being captured is refused
 * (RF_ENOTSUP) before anything is issued, and every CUDA call runs in thread-local capture mode. */
#include "backends/cuda_int.h"
#include "base/alloc.h"
#include "base/error.h"
#include "io/file.h"

#include <stdlib.h>
#include <string.h>

#define RF__CU_KREL 4u /* release events kept per slot */

/* A ticket's state. EIO: a hint's file read failed (no H2D; *failed says so); FAILED: its lane's event
 * wait failed (a device error). */
enum { RF__CK_STAGING = 1, RF__CK_STAGED, RF__CK_ISSUED, RF__CK_WITHDRAWN, RF__CK_EIO, RF__CK_FAILED };

typedef struct rf__cu_krel {
	void *stream;
	void *ev;
	int live;
} rf__cu_krel;

/* A ticket: its event, and the H2D it stands for while that waits for its stage. */
typedef struct rf__cu_kt {
	_Atomic rf__kticket num; /* the ticket it holds; 0: none or known finished */
	rf__kticket t;           /* the ticket it stands for (num is published once it is issued) */
	atomic_int state;        /* RF__CK_* */
	void *ev;
	unsigned slot, pin; /* pin: the staging slot it reads (RF__NO_STAGE: the source) */
	const void *src;
	const unsigned char *data; /* staged: where in the pinned ring its bytes are */
	void *dst;
	size_t bytes;
	rf__kticket after;
	_Atomic uint64_t *counter;
	_Atomic int64_t *failed; /* rf__kcopy.failed */
} rf__cu_kt;

/* A pinned slot's stage item, the last ticket staged into it and the last whose H2D read it. */
typedef struct rf__cu_kst {
	rf__work w;
	rf__cu_kt *kt;
	rf__fsrc fs; /* fs.f non-NULL: kt's source lies in this file (held until the read landed) */
	void *war; /* the event of the previous H2D out of the slot (NULL: none) */
	uint64_t seq;
	rf__kticket user, reader;
} rf__cu_kst;

struct rf__cu_keyed {
	unsigned nlanes, nslots, nt, pins;
	void **hint;             /* per lane: its copy queue's stream; then demand, its own */
	void **demand;
	rf__cu_kt *kt;           /* nt */
	void **ev;               /* the tickets' events, then the releases' */
	rf__cu_kst *kst;         /* per staging slot */
	rf__kticket *fifo;       /* per lane, pins entries: its hints waiting for their stage, in issue order */
	unsigned *fhead, *fn, *next_pin;
	rf__kticket next;        /* the last ticket issued */
	int dirty;               /* something issued or released since the last quiesce */
	int used;                /* a keyed copy was ever issued: callers' streams may read the slots */
	rf__cu_krel *rel;        /* nslots * RF__CU_KREL */
	rf__cu_range ranges[RF__CU_RANGES];
};

int rf__cu_keyed_open(rf__cu *cx)
{
	const rf__cuda_api *api = cx->api;
	rf__cu_keyed *k = rf__calloc(1, sizeof *k);
	if (k == NULL)
		return rf__err(RF_ENOMEM, "cuda: out of memory");
	cx->keyed = k;
	k->nlanes = cx->ncopyq ? cx->ncopyq : 1;
	k->nslots = cx->nslots;
	k->nt = 2 * cx->nslots + 2 * k->nlanes * 2 + 8;
	k->pins = cx->nhost ? cx->nstage / k->nlanes : 0;
	if ((k->hint = rf__calloc(2 * (size_t)k->nlanes, sizeof *k->hint)) == NULL ||
	    (k->kt = rf__calloc(k->nt, sizeof *k->kt)) == NULL ||
	    (k->ev = rf__calloc(k->nt + (size_t)k->nslots * RF__CU_KREL, sizeof *k->ev)) == NULL ||
	    (k->kst = rf__calloc(cx->nstage ? cx->nstage : 1, sizeof *k->kst)) == NULL ||
	    (k->fifo = rf__calloc((size_t)k->nlanes * (k->pins ? k->pins : 1), sizeof *k->fifo)) == NULL ||
	    (k->fhead = rf__calloc(3 * (size_t)k->nlanes, sizeof *k->fhead)) == NULL ||
	    (k->rel = rf__calloc((size_t)k->nslots * RF__CU_KREL, sizeof *k->rel)) == NULL)
		return rf__err(RF_ENOMEM, "cuda: out of memory for keyed use");
	k->demand = k->hint + k->nlanes;
	k->fn = k->fhead + k->nlanes;
	k->next_pin = k->fn + k->nlanes;
	for (unsigned i = 0, j = 0; i < k->nlanes; i++) {
		while (j < cx->nq && !cx->q[j].copies)
			j++;
		RF__CU_TRY(api, "cudaStreamCreateWithFlags (keyed demand)", api->stream_create(&k->demand[i]));
		k->hint[i] = j < cx->nq ? cx->q[j++].stream : k->demand[i];
	}
	int rc = rf__cu_events_make(api, k->ev, k->nt + (size_t)k->nslots * RF__CU_KREL,
				    "cudaEventCreateWithFlags (keyed)");
	for (unsigned i = 0; i < k->nt; i++)
		k->kt[i].ev = k->ev[i];
	for (size_t i = 0; i < (size_t)k->nslots * RF__CU_KREL; i++)
		k->rel[i].ev = k->ev[k->nt + i];
	for (unsigned t = 0; t < cx->nstage; t++)
		k->kst[t].seq = UINT64_MAX;
	return rc;
}

void rf__cu_keyed_free(rf__cu *cx)
{
	rf__cu_keyed *k = cx->keyed;
	const rf__cuda_api *api = cx->api;
	if (k == NULL)
		return;
	for (unsigned i = 0; k->demand != NULL && i < k->nlanes; i++)
		if (k->demand[i] != NULL)
			rf__cu_clear(api, api->stream_destroy(k->demand[i]));
	rf__cu_events_free(api, k->ev, k->nt + (size_t)k->nslots * RF__CU_KREL);
	free(k->hint);
	free(k->kt);
	free(k->ev);
	free(k->kst);
	free(k->fifo);
	free(k->fhead);
	free(k->rel);
	free(k);
	cx->keyed = NULL;
}

static rf__cu_kt *rf__cu_kt_of(rf__cu_keyed *k, rf__kticket t)
{
	rf__cu_kt *e = &k->kt[t % k->nt];
	return atomic_load_explicit(&e->num, memory_order_acquire) == t ? e : NULL;
}

/* Around every keyed CUDA call: params.device current (a thread without a context would get device
 * 0's), thread-local capture mode. */
typedef struct rf__cu_kscope {
	rf__cu_saved saved;
	int mode, moded;
} rf__cu_kscope;

static int rf__cu_kbegin(rf__cu *cx, rf__cu_kscope *sc)
{
	int rc = rf__cu_enter(cx->api, cx->device, &sc->saved);
	if (rc == RF_OK)
		sc->moded = rf__cu_clear(cx->api, cx->api->capture_mode_local(&sc->mode)) == 0;
	return rc;
}

static void rf__cu_kleave(rf__cu *cx, rf__cu_kscope *sc)
{
	if (sc->moded)
		rf__cu_clear(cx->api, cx->api->capture_mode_restore(sc->mode));
	rf__cu_leave(cx->api, &sc->saved);
}

/* Any thread (lookup): an event query only. */
int rf__cu_ktest(void *ctx, rf__kticket t)
{
	rf__cu *cx = ctx;
	rf__cu_kt *e = rf__cu_kt_of(cx->keyed, t);
	int st = e != NULL ? atomic_load_explicit(&e->state, memory_order_acquire) : 0;
	if (e == NULL || rf__cu_kt_of(cx->keyed, t) == NULL || st == RF__CK_WITHDRAWN || st == RF__CK_EIO)
		return 1;
	if (st != RF__CK_ISSUED)
		return 0;
	rf__cu_kscope sc;
	if (rf__cu_kbegin(cx, &sc) != RF_OK)
		return 0; /* cannot ask: not known finished (a later wait reports the error) */
	int q = cx->api->event_query(e->ev);
	rf__cu_kleave(cx, &sc);
	/* Not ready (an error cudaEventQuery leaves), or a device error: the copy will never finish and the
	 * next call that waits reports it. */
	rf__cu_clear(cx->api, q);
	return q == 0 || cx->api->error_kind(q) != RF__CUE_NOT_READY;
}

/* The H2D of ticket entry e from `src` on stream s after the slot's previous copy (issued by now) and
 * its releases, then its event; counted in bytes_copied now. */
static int rf__cu_kh2d(rf__cu *cx, rf__cu_kt *e, const void *src, void *s)
{
	rf__cu_keyed *k = cx->keyed;
	const rf__cuda_api *api = cx->api;
	if (cx->oracle && e->pin != RF__NO_STAGE && memcmp(src, e->src, e->bytes) != 0)
		return rf__err(RF_EHAZARD, "keyed oracle: RAW: the copy of %zu bytes into slot %u would read pinned slot %u "
					   "before its stage filled it", e->bytes, e->slot, e->pin);
	rf__cu_kt *a = e->after != 0 ? rf__cu_kt_of(k, e->after) : NULL;
	int err = a != NULL && atomic_load(&a->state) == RF__CK_ISSUED ? api->stream_wait_event(s, a->ev) : 0;
	rf__cu_krel *rel = &k->rel[(size_t)e->slot * RF__CU_KREL];
	for (unsigned j = 0; err == 0 && j < RF__CU_KREL; j++)
		if (rel[j].live)
			err = api->stream_wait_event(s, rel[j].ev);
	if (err == 0)
		err = api->memcpy_async(e->dst, src, e->bytes, s);
	if (err == 0)
		err = api->event_record(e->ev, s);
	if (err != 0)
		return rf__cu_fail(api, "keyed copy (cudaStreamWaitEvent / cudaMemcpyAsync / cudaEventRecord)", err);
	for (unsigned j = 0; j < RF__CU_KREL; j++) /* ordered before this copy, and so before later ones */
		rel[j].live = 0;
	if (e->pin != RF__NO_STAGE)
		k->kst[e->pin].reader = e->t;
	atomic_fetch_add_explicit(e->counter, e->bytes, memory_order_relaxed);
	atomic_store_explicit(&e->state, RF__CK_ISSUED, memory_order_release);
	k->used = 1;
	return RF_OK;
}

/* Enqueue the H2D of every hint whose stage is done, in each lane's order (they may write the same
 * device slot). On the owner's thread, first in every keyed call. */
static int rf__cu_kprogress(rf__cu *cx)
{
	rf__cu_keyed *k = cx->keyed;
	for (unsigned l = 0; l < k->nlanes; l++) {
		while (k->fn[l] > 0) {
			rf__kticket t = k->fifo[(size_t)l * k->pins + k->fhead[l]];
			rf__cu_kt *e = rf__cu_kt_of(k, t);
			int st = e ? atomic_load_explicit(&e->state, memory_order_acquire) : RF__CK_WITHDRAWN, rc = RF_OK;
			if (st == RF__CK_STAGING && !RF__TEST_HOOK(drop_keyed_stage_wait))
				break;
			if (st == RF__CK_FAILED) {
				cx->broken = 1;
				snprintf(cx->broken_msg, sizeof cx->broken_msg, "cudaEventSynchronize failed on a staging lane");
				return rf__err(RF_EBACKEND, "cuda: a keyed copy's stage failed: %s", cx->broken_msg);
			}
			if ((st == RF__CK_STAGED || st == RF__CK_STAGING) && (rc = rf__cu_kh2d(cx, e, e->data, k->hint[l])) != RF_OK)
				return rc;
			k->fhead[l] = (k->fhead[l] + 1) % k->pins;
			k->fn[l]--;
		}
	}
	return RF_OK;
}

static int rf__cu_kstaged(void *arg)
{
	const rf__cu_kt *e = arg;
	return atomic_load_explicit(&e->state, memory_order_acquire) != RF__CK_STAGING;
}

/* Ticket t is no longer waiting for its stage: wait for that (on the host), then issue it. */
static int rf__cu_kready(rf__cu *cx, rf__kticket t)
{
	rf__cu_kt *e = rf__cu_kt_of(cx->keyed, t);
	if (e != NULL && !RF__TEST_HOOK(drop_keyed_stage_wait))
		rf__ec_wait(&cx->ec, rf__cu_kstaged, e, cx->spin_ns);
	return rf__cu_kprogress(cx);
}

/* On the host lane: copy (or read) a hint's source into its pinned slot after the slot's previous H2D. */
static void rf__cu_kstage_fn(rf__work *w, void *ctx)
{
	rf__cu_kst *s = (rf__cu_kst *)w;
	rf__cu_lane *l = ctx;
	rf__cu *cx = l->cx;
	rf__cu_lane_enter(l);
	if (RF__TEST_HOOK(keyed_before_copy) != NULL)
		RF__TEST_HOOK(keyed_before_copy)(0);
	if (rf__work_claim(w)) {
		if (RF__TEST_HOOK(keyed_before_copy) != NULL)
			RF__TEST_HOOK(keyed_before_copy)(1);
		rf__cu_kt *e = s->kt;
		const rf__fsrc *fs = s->fs.f != NULL ? &s->fs : NULL;
		int st = RF__CK_STAGING, to = RF__CK_FAILED, rc;
		if (rf__cu_clear(cx->api, s->war != NULL ? cx->api->event_synchronize(s->war) : 0) == 0) {
			rc = rf__cu_fill(l, e->pin, e->src, fs, e->bytes, SIZE_MAX - 1 - e->pin, &e->data);
			to = rc == RF_OK ? RF__CK_STAGED : RF__CK_EIO;
		}
		if (to == RF__CK_EIO)
			atomic_store_explicit(e->failed, (int64_t)e->t, memory_order_release);
		if (s->fs.f != NULL) /* before the state says so: the file may be closed at once */
			rf__file_unhold(s->fs.f);
		atomic_compare_exchange_strong(&e->state, &st, to);
	}
	rf__ec_notify(&cx->ec);
}

/* A pinned slot of lane l and the event of the H2D that last read it (NULL: none). An acquire has slot 0
 * to itself (never waiting for a hint's stage); a hint takes a free other one, else RF__NO_STAGE. */
static unsigned rf__cu_kpin(rf__cu *cx, unsigned l, int demand, void **war)
{
	rf__cu_keyed *k = cx->keyed;
	for (unsigned i = 0; i < (demand ? 1 : k->pins - 1); i++) {
		unsigned t = l + k->nlanes * (demand ? 0 : 1 + (k->next_pin[l] + i) % (k->pins - 1));
		rf__cu_kst *s = &k->kst[t];
		rf__cu_kt *u = s->user ? rf__cu_kt_of(k, s->user) : NULL, *r = s->reader ? rf__cu_kt_of(k, s->reader) : NULL;
		int st = u ? atomic_load_explicit(&u->state, memory_order_acquire) : 0;
		if ((s->seq != UINT64_MAX && rf__lane_consumed(&cx->pool, l % cx->nhost) <= s->seq) || st == RF__CK_STAGING ||
		    st == RF__CK_STAGED)
			continue;
		*war = r != NULL ? r->ev : NULL;
		k->next_pin[l] += i + 1;
		return t;
	}
	return RF__NO_STAGE;
}

/* Stage req's source for entry e (a file's range when fs->f, held until the read), then its H2D: a hint's
 * on the host lane (RF_ENOSPC when no pinned slot is free), an acquire's here. */
static int rf__cu_kstage(rf__cu *cx, const rf__kcopy *req, rf__cu_kt *e, rf__kticket t, void *s, rf__fsrc *fs)
{
	rf__cu_keyed *k = cx->keyed;
	unsigned char *pin;
	void *war = NULL;
	int rc = rf__cu_pin_ring(cx, &pin) == RF_OK ? RF_OK : rf__err(RF_EBACKEND, "%s", rf__errmsg_peek());
	unsigned l = req->lane % k->nlanes, pt = rc == RF_OK ? rf__cu_kpin(cx, l, req->demand, &war) : RF__NO_STAGE;
	if (rc != RF_OK || pt == RF__NO_STAGE)
		return rc != RF_OK ? rc : RF_ENOSPC;
	rf__cu_kst *st = &k->kst[pt];
	e->pin = pt;
	st->user = t;
	e->data = pin + (size_t)pt * cx->pin_stride;
	if (req->demand) {
		int err = war != NULL ? cx->api->event_synchronize(war) : 0;
		if (err != 0)
			return rf__cu_fail(cx->api, "cudaEventSynchronize (keyed staging slot free)", err);
		if (fs->f == NULL)
			memcpy(pin + (size_t)pt * cx->pin_stride, req->src, req->bytes);
		else if ((rc = rf__cu_read(cx, &cx->krd, fs, req->bytes, pin + (size_t)pt * cx->pin_stride, &e->data)) != RF_OK)
			return rc;
		return rf__cu_kh2d(cx, e, e->data, s);
	}
	unsigned lane = l % cx->nhost;
	*st = (rf__cu_kst){.w.fn = rf__cu_kstage_fn, .kt = e, .fs = *fs, .war = war,
			   .seq = rf__lane_posted(&cx->pool, lane), .user = t, .reader = st->reader};
	atomic_store_explicit(&e->state, RF__CK_STAGING, memory_order_relaxed);
	atomic_store_explicit(&e->num, t, memory_order_release);
	if (rf__pool_post(&cx->pool, lane, &st->w) != RF_OK) {
		atomic_store_explicit(&e->num, 0, memory_order_relaxed);
		st->seq = UINT64_MAX;
		return RF_ENOSPC;
	}
	k->fifo[(size_t)l * k->pins + (k->fhead[l] + k->fn[l]) % k->pins] = t;
	k->fn[l]++;
	fs->f = NULL; /* the item lets go of the file */
	return RF_OK;
}

/* When entry e's copy was issued: `stream` waits on its event, or (host) the calling thread does. */
static int rf__cu_kon(rf__cu *cx, rf__cu_kt *e, void *stream, int host)
{
	int err = 0;
	if (e != NULL && atomic_load(&e->state) == RF__CK_ISSUED)
		err = host ? cx->api->event_synchronize(e->ev) : cx->api->stream_wait_event(stream, e->ev);
	const char *call = host ? "cudaEventSynchronize (keyed copy)" : "cudaStreamWaitEvent (acquire)";
	return err != 0 ? rf__cu_fail(cx->api, call, err) : RF_OK;
}

/* Every owner-thread entry point: the scope, finished stages' H2Ds enqueued; with `what` (the caller's
 * name), RF_ENOTSUP when `stream` is being captured (a keyed copy cannot be part of a graph). */
static int rf__cu_kenter(rf__cu *cx, rf__cu_kscope *sc, void *stream, const char *what)
{
	int yes = 0, e, rc;
	if (cx->broken)
		return rf__err(RF_EBACKEND, "cuda: pipeline unusable after a device error: %s", cx->broken_msg);
	if ((rc = rf__cu_kbegin(cx, sc)) != RF_OK)
		return rc;
	rc = rf__cu_kprogress(cx);
	if (rc == RF_OK && what != NULL && (e = cx->api->stream_capturing(stream, &yes)) != 0)
		rc = rf__cu_fail(cx->api, "cudaStreamIsCapturing", e);
	else if (rc == RF_OK && yes)
		rc = rf__err(RF_ENOTSUP, "cuda: %s: the stream is being captured (keyed copies cannot be "
			     "captured)", what);
	if (rc != RF_OK)
		rf__cu_kleave(cx, sc);
	return rc;
}

/* Before the device ring goes: callers' kernels may still read slots held at destroy. */
int rf__cu_keyed_settle(rf__cu *cx)
{
	if (cx->keyed == NULL || !cx->keyed->used)
		return 0;
	return cx->api->device_synchronize();
}

int rf__cu_kissue(void *ctx, const rf__kcopy *req, rf__kticket *out)
{
	rf__cu *cx = ctx;
	rf__cu_keyed *k = cx->keyed;
	rf__cu_kscope sc;
	rf__fsrc fs = {NULL, 0};
	int rc = rf__cu_kenter(cx, &sc, req->stream, req->demand ? "rf_pipeline_acquire" : NULL);
	if (rc != RF_OK)
		return rc;
	/* A file's range is read into the pinned ring, never faulted in. */
	int file = rf__file_classify("cuda", "a keyed source", req->src, req->bytes, 1, &fs);
	if (file < 0 || (file == 1 && k->pins == 0)) {
		rc = file < 0 ? file : rf__err(RF_ENOTSUP, "cuda: a keyed source in a file needs staging queues");
		goto out;
	}
	unsigned l = req->lane % k->nlanes;
	void *s = req->demand ? k->demand[l] : k->hint[l];
	rf__kticket t = k->next + 1;
	rf__cu_kt *e = &k->kt[t % k->nt];
	rf__kticket old = atomic_load_explicit(&e->num, memory_order_acquire);
	if (old != 0 && (rc = rf__cu_kready(cx, old)) != RF_OK) /* the ring came round to an unfinished one (rare) */
		goto out;
	if (old != 0 && (rc = rf__cu_kon(cx, e, NULL, 1)) != RF_OK)
		goto out;
	atomic_store_explicit(&e->num, 0, memory_order_release);
	e->t = t, e->slot = req->slot, e->pin = RF__NO_STAGE, e->src = req->src, e->dst = req->dst;
	e->bytes = req->bytes, e->after = req->after, e->counter = req->counter, e->failed = req->failed;
	int dma = !file && (k->pins == 0 || rf__cu_is_dma(cx, k->ranges, req->src, req->bytes));
	/* Issued now (not by the lane's order): the slot's previous copy must be issued first. */
	if ((dma || req->demand) && req->after != 0 && (rc = rf__cu_kready(cx, req->after)) != RF_OK)
		goto out;
	rc = dma ? rf__cu_kh2d(cx, e, req->src, s) : rf__cu_kstage(cx, req, e, t, s, &fs);
	if (rc != RF_OK)
		goto out;
	atomic_store_explicit(&e->num, t, memory_order_release);
	k->next = t;
	k->dirty = 1;
	*out = t;
out:
	if (fs.f != NULL)
		rf__file_unhold(fs.f);
	rf__cu_kleave(cx, &sc);
	return rc;
}

/* Withdraw a hint whose stage has not started: its item does nothing, its H2D never happens. */
int rf__cu_kcancel(void *ctx, rf__kticket t)
{
	rf__cu *cx = ctx;
	rf__cu_kt *e = rf__cu_kt_of(cx->keyed, t);
	rf__cu_kst *s = e != NULL ? &cx->keyed->kst[e->pin] : NULL;
	if (e == NULL || atomic_load(&e->state) != RF__CK_STAGING || !rf__work_cancel(&s->w))
		return 0;
	if (s->fs.f != NULL) /* the item will not run: its hold is ours to let go */
		rf__file_unhold(s->fs.f);
	atomic_store_explicit(&e->state, RF__CK_WITHDRAWN, memory_order_release);
	return 1;
}

/* Once ticket t is issued, `stream` waits on its event, or the host does. */
int rf__cu_kwait(void *ctx, rf__kticket t, void *stream, int host)
{
	rf__cu *cx = ctx;
	rf__cu_kscope sc;
	int rc = rf__cu_kenter(cx, &sc, stream, host ? NULL : "rf_pipeline_acquire");
	if (rc != RF_OK)
		return rc;
	if ((rc = rf__cu_kready(cx, t)) == RF_OK)
		rc = rf__cu_kon(cx, rf__cu_kt_of(cx->keyed, t), stream, host);
	rf__cu_kleave(cx, &sc);
	return rc;
}

int rf__cu_krelease(void *ctx, unsigned slot, void *stream)
{
	rf__cu *cx = ctx;
	rf__cu_keyed *k = cx->keyed;
	const rf__cuda_api *api = cx->api;
	rf__cu_kscope sc;
	int rc = rf__cu_kenter(cx, &sc, stream, "rf_pipeline_release");
	if (rc != RF_OK)
		return rc;
	rf__cu_krel *rel = &k->rel[(size_t)slot * RF__CU_KREL];
	unsigned j = 0, free_j = RF__CU_KREL;
	for (; j < RF__CU_KREL && !(rel[j].live && rel[j].stream == stream); j++)
		if (!rel[j].live && free_j == RF__CU_KREL)
			free_j = j;
	int e = 0;
	if (j == RF__CU_KREL && (j = free_j) == RF__CU_KREL) { /* a new stream, no room: take the oldest's */
		j = 0;
		e = api->stream_wait_event(stream, rel[0].ev);
	}
	if (e == 0 && (e = api->event_record(rel[j].ev, stream)) == 0) {
		rel[j].stream = stream;
		rel[j].live = 1;
		k->dirty = 1;
	} else {
		rc = rf__cu_fail(api, "cudaEventRecord (release)", e);
	}
	rf__cu_kleave(cx, &sc);
	return rc;
}

static int rf__cu_kitems_done(void *arg)
{
	rf__cu *cx = arg;
	for (unsigned i = 0; i < cx->nhost; i++)
		if (rf__lane_consumed(&cx->pool, i) < rf__lane_posted(&cx->pool, i))
			return 0;
	return 1;
}

/* Everything keyed finished, every release ordered: a host wait (runs, reset, destroy). */
int rf__cu_kquiesce(void *ctx)
{
	rf__cu *cx = ctx;
	rf__cu_keyed *k = cx->keyed;
	const rf__cuda_api *api = cx->api;
	rf__cu_saved saved;
	if (!k->dirty) /* nothing keyed since the last time: no host wait (runs start here) */
		return RF_OK;
	k->dirty = 0;
	int rc = rf__cu_enter(api, cx->device, &saved), first = 0;
	if (rc != RF_OK)
		return rc; /* rf__cu_enter said why */
	for (unsigned l = 0; l < k->nlanes && rc == RF_OK; l++)
		while (k->fn[l] > 0 && rc == RF_OK)
			rc = rf__cu_kready(cx, k->fifo[(size_t)l * k->pins + k->fhead[l]]);
	rf__ec_wait(&cx->ec, rf__cu_kitems_done, cx, cx->spin_ns); /* withdrawn items read nothing after this */
	for (unsigned i = 0; i < 2 * k->nlanes; i++) { /* hint and demand streams */
		int e = api->stream_synchronize(k->hint[i]);
		first = first ? first : e;
	}
	for (size_t i = 0; i < (size_t)k->nslots * RF__CU_KREL; i++)
		if (k->rel[i].live) {
			int e = api->event_synchronize(k->rel[i].ev);
			first = first ? first : e;
			k->rel[i].live = 0;
		}
	for (unsigned i = 0; i < k->nt; i++)
		atomic_store_explicit(&k->kt[i].num, 0, memory_order_release);
	for (unsigned t = 0; t < cx->nstage; t++)
		k->kst[t].user = k->kst[t].reader = 0;
	rf__cu_leave(api, &saved);
	if (rc == RF_OK && first != 0)
		rc = rf__cu_fail(api, "keyed quiesce (cudaStreamSynchronize / cudaEventSynchronize)", first);
	return rc;
}

unsigned rf__cu_klanes(void *ctx)
{
	rf__cu *cx = ctx;
	return cx->keyed->nlanes;
}
