/* backends/threads_keyed.c — keyed copies on the threads backend. A hint's copy-then-signal is a work
 * item on a copy lane (runs start only once keyed copies are quiesced); a withdrawn one still signals, in
 * order, without copying. A ticket is finished when its lane's value has reached it or it was withdrawn.
 * Demand copies run inline: the caller waits for them anyway, and never behind a hint. */
#include "backends/threads_int.h"
#include "base/test_hooks.h"
#include "io/file.h"
#include "runtime/trace.h"

#include <string.h>

static int rf__threads_klane_of(const rf__threads *t, rf__kticket tk, unsigned *lane, int64_t *v)
{
	uint64_t l = tk >> RF__THREADS_KSHIFT;
	if (l == 0 || l > t->pool.n)
		return 0;
	*lane = (unsigned)l - 1;
	*v = (int64_t)(tk & RF__THREADS_KMASK);
	return 1;
}

/* The item: copy (a file's reads stay in flight), then the ticket's signal, in order behind every copy
 * the lane has in flight. */
static void rf__threads_kitem_fn(rf__work *w, void *ctx)
{
	rf__threads_kitem *it = (rf__threads_kitem *)w;
	rf__threads_lane *l = ctx;
	int64_t v = atomic_load_explicit(&it->value, memory_order_relaxed);
	/* A run's failed copy (reported by that run, now ended) must not hold back keyed signals. */
	l->flight.failed = 0;
	if (RF__TEST_HOOK(keyed_before_copy) != NULL)
		RF__TEST_HOOK(keyed_before_copy)(0);
	if (rf__work_claim(w)) { /* else withdrawn: the owner let go of its file then */
		if (RF__TEST_HOOK(keyed_before_copy) != NULL)
			RF__TEST_HOOK(keyed_before_copy)(1);
		/* Counted when the copy starts: a withdrawn hint never counts. */
		atomic_fetch_add_explicit(it->k.counter, it->k.bytes, memory_order_relaxed);
		/* An earlier read into this slot may not have landed yet. */
		rf__flight_wait_dst(&l->flight, it->k.dst, it->k.cap);
		rf__tspan sp = rf__trace_kstart(it->k.trace);
		if (it->k.src.fs.f == NULL) {
			memcpy(it->k.dst, it->k.src.p, it->k.bytes);
		} else {
			rf__flight_rec rec = {0};
			rec.unhold = it->k.src.fs.f;
			rec.fail_at = it->k.failed;
			rec.fail_value = (int64_t)(((uint64_t)l->q << RF__THREADS_KSHIFT) | (uint64_t)v);
			if (rf__flight_start(&l->flight, &it->k.src.fs, it->k.bytes, it->k.dst, it->k.cap, &rec) != RF_OK) {
				atomic_store_explicit(rec.fail_at, rec.fail_value, memory_order_release);
				rf__file_unhold(it->k.src.fs.f);
			}
		}
		/* A file read ends here once in flight: the next copy into the slot waits for it to land. */
		rf__trace_kcopy(it->k.trace, it->k.tev, sp, it->k.key, it->k.slot, it->k.lane);
	}
	rf__flight_signal(&l->flight, NULL, v);
}

static int rf__threads_ktest(void *ctx, rf__kticket tk)
{
	rf__threads *t = ctx;
	unsigned lane;
	int64_t v;
	if (!rf__threads_klane_of(t, tk, &lane, &v))
		return 1; /* an inline copy */
	if (atomic_load_explicit(&t->q[lane + 1].value, memory_order_acquire) >= v)
		return 1;
	const rf__threads_kitem *it = &t->lane[lane].kitem[(uint64_t)v % RF__THREADS_KRING];
	return atomic_load_explicit(&it->value, memory_order_relaxed) == v &&
	       atomic_load_explicit(&it->w.state, memory_order_acquire) == RF__WORK_CANCELED;
}

static int rf__threads_kdone(void *arg)
{
	const rf__kticket *x = arg;
	return rf__threads_ktest((void *)x[1], x[0]);
}

static int rf__threads_kwait(rf__threads *t, rf__kticket tk)
{
	rf__kticket x[2] = {tk, (rf__kticket)(uintptr_t)t};
	/* A lane with file reads in flight waits for the device: no spin. */
	unsigned lane;
	int64_t v;
	int io = rf__threads_klane_of(t, tk, &lane, &v) &&
		 atomic_load_explicit(&t->lane[lane].flight.inflight, memory_order_relaxed) != 0;
	rf__ec_wait(&t->ec, rf__threads_kdone, x, io ? 0 : t->spin_ns);
	return RF_OK;
}

static int rf__threads_kcancel(void *ctx, rf__kticket tk)
{
	rf__threads *t = ctx;
	unsigned lane;
	int64_t v;
	if (!rf__threads_klane_of(t, tk, &lane, &v))
		return 0;
	rf__threads_kitem *it = &t->lane[lane].kitem[(uint64_t)v % RF__THREADS_KRING];
	if (atomic_load_explicit(&it->value, memory_order_relaxed) != v || !rf__work_cancel(&it->w))
		return 0;
	if (it->k.src.fs.f != NULL) /* it will never read its file: let go now (a close may follow at once) */
		rf__file_unhold(it->k.src.fs.f);
	return 1;
}

static int rf__threads_kissue(void *ctx, const rf__kcopy *req, rf__kticket *out)
{
	rf__threads *t = ctx;
	if (req->demand || t->pool.n == 0) {
		if (req->after != 0 && !RF__TEST_HOOK(keyed_skip_waw)) /* a hint copy into it that started */
			rf__threads_kwait(t, req->after);
		return rf__cpu_kpost(NULL, req, out);
	}
	int file = req->src.fs.f != NULL, rc = file ? rf__file_hold("keyed copy", "src", &req->src, req->bytes) : RF_OK;
	if (rc != RF_OK)
		return rc;
	/* A hint: after `after` by construction (every hint into a slot goes down one lane). */
	rf__threads_lane *l = &t->lane[req->lane];
	int64_t v = l->kposted + 1;
	rf__threads_kitem *it = &l->kitem[(uint64_t)v % RF__THREADS_KRING];
	if (it->w.fn != NULL && rf__lane_consumed(&t->pool, req->lane) <= it->seq)
		rc = RF_ENOSPC; /* the item this one reuses is still queued */
	else if (file)
		rc = rf__flight_open(&l->flight, t->ring, t->ring_len);
	if (rc == RF_OK) {
		it->w.fn = rf__threads_kitem_fn;
		it->k = *req;
		atomic_store_explicit(&it->value, v, memory_order_relaxed);
		it->seq = rf__lane_posted(&t->pool, req->lane);
		rc = rf__pool_post(&t->pool, req->lane, &it->w); /* RF_OK or RF_ENOSPC */
	}
	if (rc != RF_OK) {
		if (file)
			rf__file_unhold(req->src.fs.f);
		return rc;
	}
	l->kposted = v;
	*out = ((uint64_t)(req->lane + 1) << RF__THREADS_KSHIFT) | (uint64_t)v;
	return RF_OK;
}

/* Every lane has signalled its last keyed ticket and passed every item (none is read any more). */
static int rf__threads_kquiet(void *arg)
{
	rf__threads *t = arg;
	for (unsigned i = 0; i < t->pool.n; i++)
		if (atomic_load_explicit(&t->q[i + 1].value, memory_order_acquire) < t->lane[i].kposted ||
		    rf__lane_consumed(&t->pool, i) < rf__lane_posted(&t->pool, i))
			return 0;
	return 1;
}

static int rf__threads_kquiesce(rf__threads *t)
{
	if (!rf__pool_owned(&t->pool))
		return RF_OK; /* a child of fork(): no lane runs here, nothing will ever finish */
	rf__ec_wait(&t->ec, rf__threads_kquiet, t, t->spin_ns);
	return RF_OK;
}

int rf__threads_kpost(void *ctx, const rf__kcopy *op, rf__kticket *out)
{
	if (op->op == RF__KOP_COPY)
		return rf__threads_kissue(ctx, op, out);
	if (op->op == RF__KOP_TEST || op->op == RF__KOP_CANCEL)
		return (op->op == RF__KOP_TEST ? rf__threads_ktest : rf__threads_kcancel)(ctx, op->after);
	if (op->op == RF__KOP_QUIESCE)
		return rf__threads_kquiesce(ctx);
	/* Every wait is the host's; host slots are read on the caller's own thread: a release records none. */
	return op->op == RF__KOP_RELEASE ? RF_OK : rf__threads_kwait(ctx, op->after);
}

void rf__threads_kafter_run(rf__threads *t)
{
	for (unsigned i = 0; i < t->pool.n; i++)
		t->lane[i].kposted = atomic_load_explicit(&t->q[i + 1].value, memory_order_relaxed);
}
