/* backends/cuda_keyed.c — keyed use (DESIGN.md "Keyed use") on cuda: a keyed copy is the staged ring's
 * block in small (stage if needed, copy on a lane's stream, signal), on the same lanes, streams, events.
 *
 * Lane l is copy queue l with its host lane and pinned slots (t = l + K i). Hints go on the copy queue's
 * stream, an acquire's copy on the lane's demand stream (never behind a hint not yet started). A copy's
 * ticket is an event recorded after its H2D, from a ring re-used only once known finished. By source:
 *   DMA-capable: the H2D from the source, at once;
 *   pageable or in a file, a hint: its ticket entry is a work item on the host lane, which stages it into
 *     a free pinned slot (after the H2D that last read it) as a run's STAGE does: memory is copied, a
 *     file's read starts and the lane goes on to the next item, so that its hints' reads are in flight
 *     together (io/flight.h). The lane enqueues the H2Ds itself once their stages are done, in order
 *     (rf__cuda_kflush, between items);
 *   pageable or in a file, an acquire's: the caller stages it itself into the lane's slot 0 (a file's
 *     range with the caller's reader, rf__kcopy.io), then the H2D.
 * Ordering of the H2D: WAW, its stream waits on the slot's previous ticket (req->after); WAR, on the
 * release events of the slot (one per releasing stream, RF__CUDA_KREL at most: a further stream first
 * waits on the oldest and takes its place); RAW, acquire makes the caller's stream wait on the copy's
 * event. The owner enqueues the WAW and WAR waits at issue, a hint's before posting its item (so the lane
 * never reads release events): a previous copy not issued yet is an earlier hint of the same lane, before
 * it in the lane's FIFO and stream (the lane enqueues its hints' H2Ds in the order posted, whatever order
 * their reads land in). Releases are forgotten once the owner enqueued the H2D itself (a hint may be
 * withdrawn). The lane writes only the entry's rc and state (last); the owner reuses an entry once not
 * STAGING and, withdrawn, once the pool passed its item. A hint not yet started can be withdrawn. A
 * stream being captured is refused (RF_ENOTSUP) before anything is issued, and every CUDA call runs in
 * thread-local capture mode. */
#include "backends/cuda_int.h"
#include "base/alloc.h"
#include "base/error.h"
#include "io/file.h"
#include "runtime/oracle.h"
#include "runtime/trace.h"

#include <stdlib.h>
#include <string.h>

#define RF__CUDA_KREL 4u /* release events kept per slot */

/* A ticket's state. A hint whose file read failed is ISSUED with no H2D (*failed says so): its event is
 * recorded all the same, so that it finishes only once what it was ordered after has. FAILED: its lane
 * failed (rc: RF_EHAZARD, the oracle refused its H2D; else a CUDA call, a device error). */
enum { RF__CK_STAGING = 1, RF__CK_ISSUED, RF__CK_WITHDRAWN, RF__CK_FAILED };

typedef struct rf__cuda_krel {
	void *stream;
	void *ev;
	int live;
} rf__cuda_krel;

/* A ticket: its event, and a staged hint's work item (first: the item is the entry). The owner writes
 * the fields before it posts the item; the lane then writes only rc, state and its place in the lane's
 * hints whose H2D waits for their stage (next, tag). */
typedef struct rf__cuda_kt {
	rf__work w;
	struct rf__cuda_kt *next; /* the lane's next such hint */
	uint64_t tag;             /* its H2D waits for the lane's first `tag` reads to land */
	_Atomic rf__kticket num; /* the ticket it holds; 0: none or known finished */
	rf__kticket t;           /* the ticket it stands for (num is published once it is issued) */
	atomic_int state;        /* RF__CK_* */
	int rc;                  /* FAILED: why */
	void *ev, *s;            /* s: the stream of a staged hint's H2D */
	void *war;               /* staged hint: the event of the previous H2D out of its pinned slot (or NULL) */
	rf__kticket prev_reader; /* staged hint: the ticket that read its pinned slot before it (0: none) */
	unsigned pin;            /* the staging slot it reads (RF__NO_STAGE: the source) */
	rf__fsrc fs; /* staged hint, fs.f non-NULL: its source lies in this file (held until the read landed) */
	rf__kcopy req;           /* the copy asked for; req.trace, tev, key and lane: its slice (the H2D's enqueue) */
	unsigned lane;           /* req.lane among the lanes */
} rf__cuda_kt;

struct rf__cuda_keyed {
	unsigned nlanes, nt, pins;
	size_t nrel;             /* nslots * RF__CUDA_KREL */
	void **hint;             /* per lane: its copy queue's stream; then demand, its own */
	void **demand;
	rf__cuda_kt *kt;           /* nt */
	void **ev;               /* the tickets' events, then the releases' */
	rf__kticket *reader;     /* per staging slot: the last ticket whose H2D reads it */
	unsigned *next_pin;      /* per lane */
	rf__kticket next;        /* the last ticket issued */
	int dirty;               /* something issued or released since the last quiesce */
	int used;                /* a keyed copy was ever issued: callers' streams may read the slots */
	rf__cuda_krel *rel;      /* nrel */
	rf__cuda_range ranges[RF__CUDA_RANGES];
};

int rf__cuda_keyed_open(rf__cuda_ctx *cx, unsigned *lanes)
{
	const rf__cuda_api *api = cx->api;
	rf__cuda_keyed *k = rf__calloc(1, sizeof *k);
	if (k == NULL)
		return rf__err(RF_ENOMEM, "cuda: out of memory");
	cx->keyed = k;
	k->nlanes = cx->ncopyq ? cx->ncopyq : 1;
	if (lanes != NULL)
		*lanes = k->nlanes;
	k->nrel = (size_t)cx->nslots * RF__CUDA_KREL;
	k->nt = 2 * cx->nslots + 2 * k->nlanes * 2 + 8;
	k->pins = cx->nhost ? cx->nstage / k->nlanes : 0;
	if ((k->hint = rf__calloc(2 * (size_t)k->nlanes, sizeof *k->hint)) == NULL ||
	    (k->kt = rf__calloc(k->nt, sizeof *k->kt)) == NULL ||
	    (k->ev = rf__calloc(k->nt + k->nrel, sizeof *k->ev)) == NULL ||
	    (k->reader = rf__calloc(cx->nstage ? cx->nstage : 1, sizeof *k->reader)) == NULL ||
	    (k->next_pin = rf__calloc(k->nlanes, sizeof *k->next_pin)) == NULL ||
	    (k->rel = rf__calloc(k->nrel, sizeof *k->rel)) == NULL)
		return rf__err(RF_ENOMEM, "cuda: out of memory for keyed use");
	k->demand = k->hint + k->nlanes;
	for (unsigned i = 0, j = 0; i < k->nlanes; i++) {
		while (j < cx->nq && !cx->q[j].copies)
			j++;
		RF__CUDA_TRY(api, "cudaStreamCreateWithFlags (keyed demand)", api->stream_create(&k->demand[i]));
		k->hint[i] = j < cx->nq ? cx->q[j++].stream : k->demand[i];
	}
	int rc = rf__cuda_events_make(api, k->ev, k->nt + k->nrel, "cudaEventCreateWithFlags (keyed)");
	for (unsigned i = 0; i < k->nt; i++)
		k->kt[i].ev = k->ev[i];
	for (size_t i = 0; i < k->nrel; i++)
		k->rel[i].ev = k->ev[k->nt + i];
	return rc;
}

void rf__cuda_keyed_free(rf__cuda_ctx *cx)
{
	rf__cuda_keyed *k = cx->keyed;
	const rf__cuda_api *api = cx->api;
	if (k == NULL)
		return;
	for (unsigned i = 0; k->demand != NULL && i < k->nlanes; i++)
		if (k->demand[i] != NULL)
			rf__cuda_clear(api, api->stream_destroy(k->demand[i]));
	rf__cuda_events_free(api, k->ev, k->nt + k->nrel);
	free(k->hint);
	free(k->kt);
	free(k->ev);
	free(k->reader);
	free(k->next_pin);
	free(k->rel);
	free(k);
	cx->keyed = NULL;
}

static rf__cuda_kt *rf__cuda_kt_of(rf__cuda_keyed *k, rf__kticket t)
{
	rf__cuda_kt *e = &k->kt[t % k->nt];
	return atomic_load_explicit(&e->num, memory_order_acquire) == t ? e : NULL;
}

/* Around every keyed CUDA call: params.device current (a thread without a context would get device
 * 0's), thread-local capture mode. */
static int rf__cuda_kbegin(rf__cuda_ctx *cx, rf__cuda_saved *sc)
{
	int rc = rf__cuda_enter(cx->api, cx->device, sc);
	if (rc == RF_OK)
		sc->moded = rf__cuda_clear(cx->api, cx->api->capture_mode_local(&sc->mode)) == 0;
	return rc;
}

/* Any thread (lookup): an event query only. */
static int rf__cuda_ktest(rf__cuda_ctx *cx, rf__kticket t)
{
	rf__cuda_kt *e = rf__cuda_kt_of(cx->keyed, t);
	int st = e != NULL ? atomic_load_explicit(&e->state, memory_order_acquire) : 0;
	if (e == NULL || rf__cuda_kt_of(cx->keyed, t) == NULL || st == RF__CK_WITHDRAWN)
		return 1;
	if (st != RF__CK_ISSUED)
		return 0;
	rf__cuda_saved sc;
	if (rf__cuda_kbegin(cx, &sc) != RF_OK)
		return 0; /* cannot ask: not known finished (a later wait reports the error) */
	int q = cx->api->event_query(e->ev);
	rf__cuda_leave(cx->api, &sc);
	/* Not ready (an error cudaEventQuery leaves), or a device error: the copy will never finish and the
	 * next call that waits reports it. */
	rf__cuda_clear(cx->api, q);
	return q == 0 || cx->api->error_kind(q) != RF__CUE_NOT_READY;
}

static int rf__cuda_kraw(const rf__cuda_kt *e)
{
	return rf__err(RF_EHAZARD, "keyed oracle: RAW: the copy of %zu bytes into slot %u would read pinned slot %u "
				   "before its stage filled it", e->req.bytes, e->req.slot, e->pin);
}

/* Stream s waits for what the H2D into `slot` follows (owner thread, before that H2D is enqueued): the
 * slot's previous copy once issued (WAW), the slot's releases (WAR). */
static int rf__cuda_korder(rf__cuda_ctx *cx, unsigned slot, rf__kticket after, void *s)
{
	rf__cuda_keyed *k = cx->keyed;
	const rf__cuda_api *api = cx->api;
	rf__cuda_kt *a = after != 0 ? rf__cuda_kt_of(k, after) : NULL;
	int err = a != NULL && atomic_load(&a->state) == RF__CK_ISSUED ? api->stream_wait_event(s, a->ev) : 0;
	rf__cuda_krel *rel = &k->rel[(size_t)slot * RF__CUDA_KREL];
	for (unsigned j = 0; err == 0 && j < RF__CUDA_KREL; j++)
		if (rel[j].live)
			err = api->stream_wait_event(s, rel[j].ev);
	return err != 0 ? rf__cuda_fail(api, "cudaStreamWaitEvent (keyed copy)", err) : RF_OK;
}

/* The H2D of ticket entry e from `src` on stream s, then its event; counted in bytes_copied now. On the
 * owner's thread, or a staged hint's lane (the state last). */
static int rf__cuda_kcopy(rf__cuda_ctx *cx, rf__cuda_kt *e, const void *src, void *s)
{
	const rf__cuda_api *api = cx->api;
	if (cx->oracle && e->pin != RF__NO_STAGE && !rf__oracle_src_holds(src, &e->req.src, e->req.bytes))
		return rf__cuda_kraw(e);
	rf__tspan sp = rf__trace_kstart(e->req.trace);
	int err = api->memcpy_async(e->req.dst, src, e->req.bytes, s);
	if (err == 0)
		err = api->event_record(e->ev, s);
	rf__trace_kcopy(e->req.trace, e->req.tev, sp, e->req.key, e->req.slot, e->lane);
	if (err != 0)
		return rf__cuda_fail(api, "keyed copy (cudaMemcpyAsync / cudaEventRecord)", err);
	atomic_fetch_add_explicit(e->req.counter, e->req.bytes, memory_order_relaxed);
	atomic_store_explicit(&e->state, RF__CK_ISSUED, memory_order_release);
	return RF_OK;
}

static int rf__cuda_kstaged(void *arg)
{
	const rf__cuda_kt *e = arg;
	return atomic_load_explicit(&e->state, memory_order_acquire) != RF__CK_STAGING;
}

/* Ticket t's lane is done with it (its H2D enqueued, or not to be), waited for on the host (a failure
 * there is this call's); then, once its copy was issued, `stream` waits on its event (how 1) or the
 * calling thread does (how 2). */
static int rf__cuda_kready(rf__cuda_ctx *cx, rf__kticket t, void *stream, int how)
{
	rf__cuda_kt *e = rf__cuda_kt_of(cx->keyed, t);
	if (e == NULL)
		return RF_OK;
	rf__ec_wait(&cx->ec, rf__cuda_kstaged, e, cx->spin_ns);
	int st = atomic_load_explicit(&e->state, memory_order_acquire), err = 0;
	if (st == RF__CK_ISSUED && how != 0)
		err = how == 2 ? cx->api->event_synchronize(e->ev) : cx->api->stream_wait_event(stream, e->ev);
	if (err != 0)
		return rf__cuda_fail(cx->api, how == 2 ? "cudaEventSynchronize (keyed copy)" : "cudaStreamWaitEvent (acquire)",
				   err);
	if (st != RF__CK_FAILED)
		return RF_OK;
	if (e->rc == RF_EHAZARD)
		return rf__cuda_kraw(e);
	cx->broken = 1;
	snprintf(cx->broken_msg, sizeof cx->broken_msg, "a CUDA call failed on a staging lane");
	return rf__err(RF_EBACKEND, "cuda: a keyed copy's stage failed: %s", cx->broken_msg);
}

/* A hint whose read failed: no H2D, its event on its stream. The copy it was ordered after may still be
 * writing the slot (its H2D on the same stream, or one the stream waits on): the next copy into the slot
 * waits for this event, and so for that one too. On its lane, the state last. */
static int rf__cuda_kno_copy(rf__cuda_ctx *cx, rf__cuda_kt *e)
{
	int err = cx->api->event_record(e->ev, e->s);
	if (err != 0)
		return rf__cuda_fail(cx->api, "cudaEventRecord (keyed copy, failed read)", err);
	atomic_store_explicit(&e->state, RF__CK_ISSUED, memory_order_release);
	return RF_OK;
}

/* On host lane l: the H2Ds of its hints whose stage is done, in order (a hint into a slot whose previous
 * hint is not enqueued yet relies on the stream's order: WAW); a failed read's hint has none. */
static void rf__cuda_kflush(rf__cuda_lane *l)
{
	rf__cuda_ctx *cx = l->cx;
	int any = 0;
	for (rf__cuda_kt *e = l->khead; e != NULL && e->tag <= l->flight.upto; e = l->khead, any = 1) {
		l->khead = e->next;
		const unsigned char *data = cx->sslot[e->pin];
		int rc = data != NULL ? rf__cuda_kcopy(cx, e, data, e->s) : rf__cuda_kno_copy(cx, e);
		if (rc != RF_OK) {
			e->rc = rc;
			atomic_store_explicit(&e->state, RF__CK_FAILED, memory_order_release);
		}
		atomic_fetch_sub_explicit(&l->kpend, 1, memory_order_release);
	}
	if (any)
		rf__ec_notify(&cx->ec);
}

/* The staging lanes between items (base/pool.h; cuda.c hands these to rf__cuda_pool_open): their file
 * reads land, and the H2Ds of the hints those free are enqueued. */
static int rf__cuda_lane_idle(void *ctx)
{
	rf__cuda_lane *l = ctx;
	int st = rf__flight_idle(&l->flight);
	rf__cuda_kflush(l);
	return st;
}

static void rf__cuda_lane_sleep(void *ctx)
{
	rf__flight_sleep(&((rf__cuda_lane *)ctx)->flight);
}

const rf__lane_ops rf__cuda_lane_ops_keyed = {rf__cuda_lane_idle, rf__cuda_lane_sleep};

/* On the host lane: stage a hint's source into its pinned slot after the slot's previous H2D (the owner
 * made its stream wait for the WAW and WAR before posting); its H2D is enqueued once the stage is done,
 * behind the lane's earlier hints (rf__cuda_kflush). A file's read is left in flight: the lane reaps
 * reads only between items, so a burst of hints has every read in flight at once. */
static void rf__cuda_kstage_fn(rf__work *w, void *ctx)
{
	rf__cuda_kt *e = (rf__cuda_kt *)w;
	rf__cuda_lane *l = ctx;
	rf__cuda_ctx *cx = l->cx;
	rf__cuda_lane_enter(l);
	if (RF__TEST_HOOK(keyed_before_copy) != NULL)
		RF__TEST_HOOK(keyed_before_copy)(0);
	if (rf__work_claim(w)) {
		if (RF__TEST_HOOK(keyed_before_copy) != NULL)
			RF__TEST_HOOK(keyed_before_copy)(1);
		int rc = RF_OK, file = e->fs.f != NULL;
		if (RF__TEST_HOOK(drop_keyed_stage_wait)) /* a negative control: the H2D without its stage */
			cx->sslot[e->pin] = atomic_load(&cx->pin) + (size_t)e->pin * cx->pin_stride;
		else if (rf__cuda_clear(cx->api, e->war != NULL ? cx->api->event_synchronize(e->war) : 0) != 0)
			e->rc = RF_EBACKEND;
		else /* a file's read lets go of the file and marks a failure once landed (io/flight.h) */
			rc = rf__cuda_stage(l, e->req.src.p, file ? &e->fs : NULL, e->req.bytes, SIZE_MAX - 1 - e->pin,
					  e->pin, &(rf__flight_rec){.unhold = e->fs.f, .flags = RF__READER_ALONE, .fail_at = e->req.failed,
							     .fail_value = (int64_t)e->t});
		if (rc < 0) { /* refused: failed as a read that landed so */
			cx->sslot[e->pin] = NULL;
			atomic_store_explicit(e->req.failed, (int64_t)e->t, memory_order_release);
		}
		if (file && rc != RF__WALK_ASYNC) /* before the state says so: the file may be closed at once */
			rf__file_unhold(e->fs.f);
		if (e->rc != RF_OK) {
			atomic_store_explicit(&e->state, RF__CK_FAILED, memory_order_release);
		} else {
			e->next = NULL;
			e->tag = l->flight.started;
			*(l->khead != NULL ? &l->ktail->next : &l->khead) = e;
			l->ktail = e;
			atomic_fetch_add_explicit(&l->kpend, 1, memory_order_relaxed);
			rf__cuda_kflush(l); /* a stage already done goes at once (nothing is reaped here) */
		}
	}
	rf__ec_notify(&cx->ec);
}

/* A pinned slot of lane l and the event of the H2D that last read it (NULL: none). An acquire has slot 0
 * to itself (never waiting for a hint's stage); a hint takes another one whose last hint's lane is done
 * with it, else RF__NO_STAGE. */
static unsigned rf__cuda_kpin(rf__cuda_ctx *cx, unsigned l, int demand, void **war)
{
	rf__cuda_keyed *k = cx->keyed;
	for (unsigned i = 0; i < (demand ? 1 : k->pins - 1); i++) {
		unsigned t = l + k->nlanes * (demand ? 0 : 1 + (k->next_pin[l] + i) % (k->pins - 1));
		rf__cuda_kt *r = k->reader[t] ? rf__cuda_kt_of(k, k->reader[t]) : NULL;
		if (r != NULL && atomic_load_explicit(&r->state, memory_order_acquire) == RF__CK_STAGING)
			continue;
		*war = r != NULL ? r->ev : NULL;
		k->next_pin[l] += i + 1;
		return t;
	}
	return RF__NO_STAGE;
}

/* Stage req's source for entry e (a file's range when fs->f, held until the read), then its H2D: a hint's
 * on the host lane (RF_ENOSPC when no pinned slot is free), an acquire's here. */
static int rf__cuda_kstage(rf__cuda_ctx *cx, const rf__kcopy *req, rf__cuda_kt *e, void *s, rf__fsrc *fs)
{
	rf__cuda_keyed *k = cx->keyed;
	unsigned char *pin;
	void *war = NULL;
	int rc = rf__cuda_pin_ring(cx, &pin) == RF_OK ? RF_OK : rf__err(RF_EBACKEND, "%s", rf__errmsg_peek());
	unsigned l = req->lane % k->nlanes, pt = rc == RF_OK ? rf__cuda_kpin(cx, l, req->demand, &war) : RF__NO_STAGE;
	if (rc != RF_OK || pt == RF__NO_STAGE)
		return rc != RF_OK ? rc : RF_ENOSPC;
	unsigned char *data = pin + (size_t)pt * cx->pin_stride;
	e->pin = pt;
	if (req->demand) {
		int err = war != NULL ? cx->api->event_synchronize(war) : 0;
		if (err != 0)
			return rf__cuda_fail(cx->api, "cudaEventSynchronize (keyed staging slot free)", err);
		size_t shift = 0;
		if (fs->f == NULL)
			memcpy(data, req->src.p, req->bytes);
		else if ((rc = rf__flight_read_shifted(req->io, fs, req->bytes, data, cx->pin_stride,
						       RF__READER_SHIFT_OK | RF__READER_ALONE, &shift)) != RF_OK)
			return rc;
		k->reader[pt] = e->t;
		return rf__cuda_kcopy(cx, e, data + shift, s);
	}
	e->w.fn = rf__cuda_kstage_fn;
	e->s = s, e->war = war, e->fs = *fs;
	atomic_store_explicit(&e->state, RF__CK_STAGING, memory_order_relaxed);
	atomic_store_explicit(&e->num, e->t, memory_order_release);
	if (rf__pool_post(&cx->pool, l % cx->nhost, &e->w) != RF_OK) {
		atomic_store_explicit(&e->num, 0, memory_order_relaxed);
		return RF_ENOSPC;
	}
	e->prev_reader = k->reader[pt];
	k->reader[pt] = e->t;
	fs->f = NULL; /* the item lets go of the file */
	return RF_OK;
}

/* Every owner-thread entry point: the scope; with `what` (the caller's name), RF_ENOTSUP when `stream`
 * is being captured (a keyed copy cannot be part of a graph). */
static int rf__cuda_kenter(rf__cuda_ctx *cx, rf__cuda_saved *sc, void *stream, const char *what)
{
	int yes = 0, e, rc;
	if (cx->broken)
		return rf__err(RF_EBACKEND, "cuda: pipeline unusable after a device error: %s", cx->broken_msg);
	if ((rc = rf__cuda_kbegin(cx, sc)) != RF_OK)
		return rc;
	if (what != NULL && (e = cx->api->stream_capturing(stream, &yes)) != 0)
		rc = rf__cuda_fail(cx->api, "cudaStreamIsCapturing", e);
	else if (yes)
		rc = rf__err(RF_ENOTSUP, "cuda: %s: the stream is being captured (keyed copies cannot be "
			     "captured)", what);
	if (rc != RF_OK)
		rf__cuda_leave(cx->api, sc);
	return rc;
}

/* Before the device ring goes: callers' kernels may still read slots held at destroy. */
int rf__cuda_keyed_settle(rf__cuda_ctx *cx)
{
	if (cx->keyed == NULL || !cx->keyed->used)
		return 0;
	return cx->api->device_synchronize();
}

/* Every item passed and every staged hint's H2D enqueued (its read landed). */
static int rf__cuda_kitems_done(void *arg)
{
	rf__cuda_ctx *cx = arg;
	for (unsigned i = 0; i < cx->nhost; i++)
		if (rf__lane_consumed(&cx->pool, i) < rf__lane_posted(&cx->pool, i) ||
		    atomic_load_explicit(&cx->lane[i].kpend, memory_order_acquire) != 0)
			return 0;
	return 1;
}

static int rf__cuda_kissue(rf__cuda_ctx *cx, const rf__kcopy *req, rf__kticket *out)
{
	rf__cuda_keyed *k = cx->keyed;
	rf__fsrc fs = {NULL, 0};
	int rc = RF_OK;
	/* A file's range is read into the pinned ring, never faulted in. */
	int file = req->src.fs.f != NULL;
	if (file && (rc = k->pins == 0 ? rf__err(RF_ENOTSUP, "cuda: a keyed source in a file needs staging queues")
				      : rf__file_hold("cuda", "a keyed source", &req->src, req->bytes)) != RF_OK)
		goto out;
	fs = req->src.fs; /* a file's: held, let go below or by the item */
	unsigned l = req->lane % k->nlanes;
	void *s = req->demand ? k->demand[l] : k->hint[l];
	rf__kticket t = k->next + 1;
	rf__cuda_kt *e = &k->kt[t % k->nt];
	rf__kticket old = atomic_load_explicit(&e->num, memory_order_acquire);
	if (old != 0 && (rc = rf__cuda_kready(cx, old, NULL, 2)) != RF_OK) /* the ring came round to one (rare) */
		goto out;
	if (old != 0 && atomic_load(&e->state) == RF__CK_WITHDRAWN) /* its item names the entry till passed */
		rf__ec_wait(&cx->ec, rf__cuda_kitems_done, cx, cx->spin_ns);
	atomic_store_explicit(&e->num, 0, memory_order_release);
	e->t = t, e->rc = RF_OK, e->pin = RF__NO_STAGE, e->req = *req, e->lane = l;
	int dma = !file && (k->pins == 0 || rf__cuda_is_dma(cx, k->ranges, req->src.p, req->bytes));
	/* Issued now (not by the lane's order): the slot's previous copy must be issued first. */
	if ((dma || req->demand) && req->after != 0 && (rc = rf__cuda_kready(cx, req->after, NULL, 0)) != RF_OK)
		goto out;
	if ((rc = rf__cuda_korder(cx, req->slot, req->after, s)) != RF_OK)
		goto out;
	rc = dma ? rf__cuda_kcopy(cx, e, req->src.p, s) : rf__cuda_kstage(cx, req, e, s, &fs);
	if (rc != RF_OK)
		goto out;
	for (unsigned j = 0; (dma || req->demand) && j < RF__CUDA_KREL; j++) /* before this H2D and later ones */
		k->rel[(size_t)req->slot * RF__CUDA_KREL + j].live = 0;
	atomic_store_explicit(&e->num, t, memory_order_release);
	k->next = t;
	k->dirty = 1;
	k->used = 1;
	*out = t;
out:
	if (fs.f != NULL)
		rf__file_unhold(fs.f);
	return rc;
}

/* Withdraw a hint whose stage has not started: its item does nothing, its H2D never happens. */
static int rf__cuda_kcancel(rf__cuda_ctx *cx, rf__kticket t)
{
	rf__cuda_kt *e = rf__cuda_kt_of(cx->keyed, t);
	if (e == NULL || atomic_load(&e->state) != RF__CK_STAGING || !rf__work_cancel(&e->w))
		return 0;
	if (e->fs.f != NULL) /* the item will not run: its hold is ours to let go */
		rf__file_unhold(e->fs.f);
	atomic_store_explicit(&e->state, RF__CK_WITHDRAWN, memory_order_release);
	/* It never read its pinned slot: the slot's last reader is the one before it again, whose H2D may
	 * still be reading it (the next stage there must wait for that H2D, not for this event's record). */
	rf__cuda_keyed *k = cx->keyed;
	if (e->pin != RF__NO_STAGE && k->reader[e->pin] == e->t)
		k->reader[e->pin] = e->prev_reader;
	return 1;
}

static int rf__cuda_krelease(rf__cuda_ctx *cx, unsigned slot, void *stream)
{
	const rf__cuda_api *api = cx->api;
	rf__cuda_krel *rel = &cx->keyed->rel[(size_t)slot * RF__CUDA_KREL];
	unsigned j = 0, free_j = RF__CUDA_KREL;
	for (; j < RF__CUDA_KREL && !(rel[j].live && rel[j].stream == stream); j++)
		if (!rel[j].live && free_j == RF__CUDA_KREL)
			free_j = j;
	int e = 0;
	if (j == RF__CUDA_KREL && (j = free_j) == RF__CUDA_KREL) { /* a new stream, no room: take the oldest's */
		j = 0;
		e = api->stream_wait_event(stream, rel[0].ev);
	}
	if (e != 0 || (e = api->event_record(rel[j].ev, stream)) != 0)
		return rf__cuda_fail(api, "cudaEventRecord (release)", e);
	rel[j].stream = stream;
	rel[j].live = 1;
	cx->keyed->dirty = 1;
	return RF_OK;
}

/* Everything keyed finished, every release ordered: a host wait (runs, reset, destroy). */
static int rf__cuda_kquiesce(rf__cuda_ctx *cx)
{
	rf__cuda_keyed *k = cx->keyed;
	const rf__cuda_api *api = cx->api;
	rf__cuda_saved saved;
	if (!k->dirty) /* nothing keyed since the last time: no host wait (runs start here) */
		return RF_OK;
	k->dirty = 0;
	int rc = rf__cuda_enter(api, cx->device, &saved), first = 0;
	if (rc != RF_OK)
		return rc; /* rf__cuda_enter said why */
	/* Every staged hint's H2D enqueued (withdrawn items read nothing after this). */
	rf__ec_wait(&cx->ec, rf__cuda_kitems_done, cx, cx->spin_ns);
	for (unsigned i = 0; i < 2 * k->nlanes; i++) { /* hint and demand streams */
		int e = api->stream_synchronize(k->hint[i]);
		first = first ? first : e;
	}
	for (size_t i = 0; i < k->nrel; i++)
		if (k->rel[i].live) {
			int e = api->event_synchronize(k->rel[i].ev);
			first = first ? first : e;
			k->rel[i].live = 0;
		}
	for (unsigned i = 0; i < k->nt; i++)
		atomic_store_explicit(&k->kt[i].num, 0, memory_order_release);
	rf__cuda_leave(api, &saved);
	if (first != 0)
		return rf__cuda_fail(api, "keyed quiesce (cudaStreamSynchronize / cudaEventSynchronize)", first);
	return RF_OK;
}

/* TEST, CANCEL and QUIESCE as they are; the rest in the scope of an owner-thread call (rf__cuda_kenter):
 * a copy, a release, or a wait (once the ticket is issued, the acquirer's stream waits on its event, or
 * the host does). */
int rf__cuda_kpost(void *ctx, const rf__kcopy *op, rf__kticket *out)
{
	rf__cuda_ctx *cx = ctx;
	if (op->op == RF__KOP_TEST || op->op == RF__KOP_CANCEL)
		return (op->op == RF__KOP_TEST ? rf__cuda_ktest : rf__cuda_kcancel)(cx, op->after);
	if (op->op == RF__KOP_QUIESCE)
		return rf__cuda_kquiesce(cx);
	const char *who = op->op == RF__KOP_RELEASE ? "rf_pipeline_release"
			  : op->op == RF__KOP_WAIT_STREAM || (op->op == RF__KOP_COPY && op->demand) ? "rf_pipeline_acquire"
												    : NULL;
	rf__cuda_saved sc;
	int rc = rf__cuda_kenter(cx, &sc, op->stream, who);
	if (rc != RF_OK)
		return rc;
	if (op->op == RF__KOP_COPY)
		rc = rf__cuda_kissue(cx, op, out);
	else if (op->op == RF__KOP_RELEASE)
		rc = rf__cuda_krelease(cx, op->slot, op->stream);
	else
		rc = rf__cuda_kready(cx, op->after, op->stream, op->op == RF__KOP_WAIT ? 2 : 1);
	rf__cuda_leave(cx->api, &sc);
	return rc;
}
