/* backends/cuda_keyed.c — keyed use (DESIGN.md "Keyed use", runtime/backend.h) on cuda, stream-ordered:
 * the host never waits for a copy in acquire or release.
 *
 * Per lane two streams of our own: hints go on the lane's hint stream, an acquire's copy on its demand
 * stream, so a demand copy never queues behind a hint that has not started. A copy is a ticket: an
 * event recorded after its cudaMemcpyAsync, from a ring of events (a ticket's event is re-used only once
 * the ticket is known finished; the ring is 2 * slots + lanes * hints + 8 deep, so that is all but
 * never a host wait). Ordering:
 *   WAW  the copy's stream waits on the slot's previous ticket (req->after);
 *   WAR  release(slot, stream) records an event on the releasing stream — one per releasing stream per
 *        slot, the latest replacing an earlier one of the same stream (RF__CU_KREL of them; beyond that
 *        the new stream first waits on the oldest, whose place it takes) — and the slot's next copy
 *        waits on each of them, then forgets them (later copies are ordered after this one);
 *   RAW  acquire makes the caller's stream (NULL: the legacy default stream; cudaStreamPerThread too)
 *        wait on the copy's event.
 * A stream being captured is refused (RF_ENOTSUP) before anything is issued, and every query runs in
 * thread-local capture mode, so another thread's capture is never disturbed. Sources are copied by DMA
 * directly (pageable ones synchronously, as cudaMemcpyAsync does: keyed sources are best registered). */
#include "backends/cuda_int.h"
#include "base/alloc.h"
#include "base/error.h"

#include <stdlib.h>
#include <string.h>

#define RF__CU_KREL 4u /* release events kept per slot */

typedef struct rf__cu_krel {
	void *stream;
	void *ev;
	int live;
} rf__cu_krel;

struct rf__cu_keyed {
	unsigned nlanes, nslots, nt;
	void **hint, **demand; /* per lane */
	void **tev;            /* ticket events, ring */
	_Atomic rf__kticket *tnum; /* which ticket each event records now; 0: none or known finished */
	rf__kticket next;          /* the last ticket issued */
	int dirty;                 /* something issued or released since the last quiesce */
	int used;                  /* a keyed copy was ever issued: callers' streams may read the slots */
	rf__cu_krel *rel;          /* nslots * RF__CU_KREL */
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
	if ((k->hint = rf__calloc(k->nlanes, sizeof *k->hint)) == NULL ||
	    (k->demand = rf__calloc(k->nlanes, sizeof *k->demand)) == NULL ||
	    (k->tev = rf__calloc(k->nt, sizeof *k->tev)) == NULL || (k->tnum = rf__calloc(k->nt, sizeof *k->tnum)) == NULL ||
	    (k->rel = rf__calloc((size_t)k->nslots * RF__CU_KREL, sizeof *k->rel)) == NULL)
		return rf__err(RF_ENOMEM, "cuda: out of memory for keyed use");
	for (unsigned i = 0; i < k->nlanes; i++) {
		RF__CU_TRY(api, "cudaStreamCreateWithFlags (keyed hints)", api->stream_create(&k->hint[i]));
		RF__CU_TRY(api, "cudaStreamCreateWithFlags (keyed demand)", api->stream_create(&k->demand[i]));
	}
	for (unsigned i = 0; i < k->nt; i++)
		RF__CU_TRY(api, "cudaEventCreateWithFlags (keyed copy)", api->event_create(&k->tev[i]));
	for (size_t i = 0; i < (size_t)k->nslots * RF__CU_KREL; i++)
		RF__CU_TRY(api, "cudaEventCreateWithFlags (keyed release)", api->event_create(&k->rel[i].ev));
	return RF_OK;
}

void rf__cu_keyed_free(rf__cu *cx)
{
	rf__cu_keyed *k = cx->keyed;
	const rf__cuda_api *api = cx->api;
	if (k == NULL)
		return;
	for (unsigned i = 0; k->hint != NULL && i < k->nlanes; i++) {
		if (k->hint[i] != NULL && api->stream_destroy(k->hint[i]) != 0)
			(void)api->get_last_error();
		if (k->demand != NULL && k->demand[i] != NULL && api->stream_destroy(k->demand[i]) != 0)
			(void)api->get_last_error();
	}
	for (unsigned i = 0; k->tev != NULL && i < k->nt; i++)
		if (k->tev[i] != NULL && api->event_destroy(k->tev[i]) != 0)
			(void)api->get_last_error();
	for (size_t i = 0; k->rel != NULL && i < (size_t)k->nslots * RF__CU_KREL; i++)
		if (k->rel[i].ev != NULL && api->event_destroy(k->rel[i].ev) != 0)
			(void)api->get_last_error();
	free(k->hint);
	free(k->demand);
	free(k->tev);
	free((void *)k->tnum);
	free(k->rel);
	free(k);
	cx->keyed = NULL;
}

/* Around every keyed entry point: params.device current, thread-local capture mode. */
typedef struct rf__cu_kscope {
	rf__cu_saved saved;
	int mode, moded;
} rf__cu_kscope;

static int rf__cu_kenter(rf__cu *cx, rf__cu_kscope *sc)
{
	if (cx->broken)
		return rf__err(RF_EBACKEND, "cuda: pipeline unusable after a device error: %s", cx->broken_msg);
	int rc = rf__cu_enter(cx->api, cx->device, &sc->saved);
	if (rc != RF_OK)
		return rc;
	sc->moded = cx->api->capture_mode_local(&sc->mode) == 0;
	if (!sc->moded)
		(void)cx->api->get_last_error();
	return RF_OK;
}

static void rf__cu_kleave(rf__cu *cx, rf__cu_kscope *sc)
{
	if (sc->moded && cx->api->capture_mode_restore(sc->mode) != 0)
		(void)cx->api->get_last_error();
	rf__cu_leave(cx->api, &sc->saved);
}

/* RF_ENOTSUP when `stream` is being captured (a keyed copy cannot be part of a graph). */
static int rf__cu_kcapture(rf__cu *cx, void *stream, const char *what)
{
	int yes = 0, e = cx->api->stream_capturing(stream, &yes);
	if (e != 0)
		return rf__cu_fail(cx->api, "cudaStreamIsCapturing", e);
	if (yes)
		return rf__err(RF_ENOTSUP, "cuda: %s: the stream is being captured (keyed copies cannot be captured)", what);
	return RF_OK;
}

static void *rf__cu_kev(rf__cu_keyed *k, rf__kticket t)
{
	return atomic_load_explicit(&k->tnum[t % k->nt], memory_order_acquire) == t ? k->tev[t % k->nt] : NULL;
}

/* Before the device ring goes: callers' kernels may still read slots they held when they destroyed the
 * pipeline (DESIGN.md: "destroy with blocks held ... cuda: it synchronises params.device first"). */
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
	const rf__cuda_api *api = cx->api;
	rf__cu_kscope sc;
	int rc = rf__cu_kenter(cx, &sc);
	if (rc != RF_OK)
		return rc;
	if (req->demand && (rc = rf__cu_kcapture(cx, req->stream, "rf_pipeline_acquire")) != RF_OK)
		goto out;
	void *s = req->demand ? k->demand[req->lane % k->nlanes] : k->hint[req->lane % k->nlanes];
	rf__kticket t = k->next + 1;
	unsigned idx = (unsigned)(t % k->nt);
	rf__kticket old = atomic_load_explicit(&k->tnum[idx], memory_order_acquire);
	if (old != 0) { /* the ring came round to a ticket not known finished: wait for it (rare) */
		int e = api->event_synchronize(k->tev[idx]);
		if (e != 0) {
			rc = rf__cu_fail(api, "cudaEventSynchronize (keyed copy)", e);
			goto out;
		}
		atomic_store_explicit(&k->tnum[idx], 0, memory_order_release);
	}
	void *after = req->after ? rf__cu_kev(k, req->after) : NULL;
	int e = after != NULL ? api->stream_wait_event(s, after) : 0;
	rf__cu_krel *rel = &k->rel[(size_t)req->slot * RF__CU_KREL];
	for (unsigned j = 0; e == 0 && j < RF__CU_KREL; j++)
		if (rel[j].live)
			e = api->stream_wait_event(s, rel[j].ev);
	if (e == 0)
		e = api->memcpy_async(req->dst, req->src, req->bytes, s);
	if (e == 0)
		e = api->event_record(k->tev[idx], s);
	if (e != 0) {
		rc = rf__cu_fail(api, "keyed copy (cudaStreamWaitEvent / cudaMemcpyAsync / cudaEventRecord)", e);
		goto out;
	}
	for (unsigned j = 0; j < RF__CU_KREL; j++) /* ordered before this copy, and so before later ones */
		rel[j].live = 0;
	atomic_store_explicit(&k->tnum[idx], t, memory_order_release);
	atomic_fetch_add_explicit(req->counter, req->bytes, memory_order_relaxed);
	k->next = t;
	k->dirty = k->used = 1;
	*out = t;
out:
	rf__cu_kleave(cx, &sc);
	return rc;
}

/* Any thread (lookup): an event query only. */
int rf__cu_ktest(void *ctx, rf__kticket t)
{
	rf__cu *cx = ctx;
	void *ev = rf__cu_kev(cx->keyed, t);
	if (ev == NULL)
		return 1;
	/* params.device current (a thread without a context would get device 0's), capture mode local */
	rf__cu_saved saved;
	if (rf__cu_enter(cx->api, cx->device, &saved) != RF_OK)
		return 0; /* cannot ask: not known finished (a later wait reports the error) */
	int mode = 0, moded = cx->api->capture_mode_local(&mode) == 0;
	int e = cx->api->event_query(ev);
	if (moded)
		(void)cx->api->capture_mode_restore(mode);
	rf__cu_leave(cx->api, &saved);
	if (e != 0 && cx->api->error_kind(e) == RF__CUE_NOT_READY) {
		(void)cx->api->get_last_error(); /* ours (cudaEventQuery leaves cudaErrorNotReady) */
		return 0;
	}
	if (e != 0) /* a device error: the copy will never finish; the next call that waits reports it */
		(void)cx->api->get_last_error();
	return 1;
}

int rf__cu_kwait(void *ctx, rf__kticket t, void *stream)
{
	rf__cu *cx = ctx;
	rf__cu_kscope sc;
	int rc = rf__cu_kenter(cx, &sc);
	if (rc != RF_OK)
		return rc;
	if ((rc = rf__cu_kcapture(cx, stream, "rf_pipeline_acquire")) == RF_OK) {
		void *ev = rf__cu_kev(cx->keyed, t);
		int e = ev != NULL ? cx->api->stream_wait_event(stream, ev) : 0;
		if (e != 0)
			rc = rf__cu_fail(cx->api, "cudaStreamWaitEvent (acquire)", e);
	}
	rf__cu_kleave(cx, &sc);
	return rc;
}

int rf__cu_ksync(void *ctx, rf__kticket t)
{
	rf__cu *cx = ctx;
	rf__cu_kscope sc;
	int rc = rf__cu_kenter(cx, &sc);
	if (rc != RF_OK)
		return rc;
	void *ev = rf__cu_kev(cx->keyed, t);
	int e = ev != NULL ? cx->api->event_synchronize(ev) : 0;
	if (e != 0)
		rc = rf__cu_fail(cx->api, "cudaEventSynchronize (keyed copy)", e);
	rf__cu_kleave(cx, &sc);
	return rc;
}

int rf__cu_krelease(void *ctx, unsigned slot, void *stream)
{
	rf__cu *cx = ctx;
	rf__cu_keyed *k = cx->keyed;
	const rf__cuda_api *api = cx->api;
	rf__cu_kscope sc;
	int rc = rf__cu_kenter(cx, &sc);
	if (rc != RF_OK)
		return rc;
	if ((rc = rf__cu_kcapture(cx, stream, "rf_pipeline_release")) != RF_OK)
		goto out;
	rf__cu_krel *rel = &k->rel[(size_t)slot * RF__CU_KREL];
	unsigned j = 0, free_j = RF__CU_KREL;
	for (; j < RF__CU_KREL && !(rel[j].live && rel[j].stream == stream); j++)
		if (!rel[j].live && free_j == RF__CU_KREL)
			free_j = j;
	int e = 0;
	if (j == RF__CU_KREL) { /* a new releasing stream */
		j = free_j;
		if (j == RF__CU_KREL) { /* full: this stream takes over the oldest's wait */
			j = 0;
			e = api->stream_wait_event(stream, rel[0].ev);
		}
	}
	if (e == 0)
		e = api->event_record(rel[j].ev, stream);
	if (e != 0) {
		rc = rf__cu_fail(api, "cudaEventRecord (release)", e);
		goto out;
	}
	rel[j].stream = stream;
	rel[j].live = 1;
	k->dirty = 1;
out:
	rf__cu_kleave(cx, &sc);
	return rc;
}

/* Everything keyed finished, every release ordered: a host wait (runs, reset, destroy). */
int rf__cu_kquiesce(void *ctx)
{
	rf__cu *cx = ctx;
	rf__cu_keyed *k = cx->keyed;
	const rf__cuda_api *api = cx->api;
	rf__cu_saved saved;
	int first = 0;
	if (!k->dirty) /* nothing keyed since the last time: no host wait (runs start here) */
		return RF_OK;
	k->dirty = 0;
	int rc = rf__cu_enter(api, cx->device, &saved);
	if (rc != RF_OK)
		return rc; /* rf__cu_enter said why */
	for (unsigned i = 0; i < k->nlanes; i++) {
		int e = api->stream_synchronize(k->hint[i]);
		first = first ? first : e;
		e = api->stream_synchronize(k->demand[i]);
		first = first ? first : e;
	}
	for (size_t i = 0; i < (size_t)k->nslots * RF__CU_KREL; i++)
		if (k->rel[i].live) {
			int e = api->event_synchronize(k->rel[i].ev);
			first = first ? first : e;
			k->rel[i].live = 0;
		}
	for (unsigned i = 0; i < k->nt; i++)
		atomic_store_explicit(&k->tnum[i], 0, memory_order_release);
	rf__cu_leave(api, &saved);
	if (first != 0)
		return rf__cu_fail(api, "keyed quiesce (cudaStreamSynchronize / cudaEventSynchronize)", first);
	return RF_OK;
}

unsigned rf__cu_klanes(void *ctx)
{
	rf__cu *cx = ctx;
	return cx->keyed->nlanes;
}
