/* backends/cuda_event.c — which event a signal records and a wait waits on, and the enqueue window.
 *
 * Events come from a pool per stream queue, reused round-robin. A wait for "queue W reached value v"
 * uses the oldest record still in W's pool whose value is >= v: the exact record when it is still
 * there, a later one (a stronger wait, never a weaker one) when the pool has moved on. The pool holds
 * 2 * slots + 8 records (never fewer than the ring is deep), so the exact record is there whenever the
 * ring's own edges ask for it. A signal on a stream that a host lane waits for is also published as the
 * queue's value (cuda_stage.c): the lane looks the event up the same way, from its own thread.
 *
 * The enqueue window: the host would otherwise enqueue a whole run in N x ~8 us and then sit in
 * cudaStreamSynchronize, deaf to rf_pipeline_cancel. Before enqueueing compute c it waits for compute
 * c - nwin to have run on the device (an event recorded after each compute) and checks cancel there, so
 * a cancel stops the run within nwin blocks of the device's progress. */
#include "backends/cuda_int.h"
#include "base/error.h"

int rf__cu_signal(void *c, unsigned queue, int64_t v, size_t block)
{
	(void)block;
	rf__cu *cx = c;
	rf__cu_queue *q = &cx->q[queue];
	uint64_t n = atomic_load_explicit(&q->nrec, memory_order_relaxed);
	unsigned i = (unsigned)(n % q->nev);
	RF__CU_TRY(cx->api, "cudaEventRecord", cx->api->event_record(q->ev[i], q->stream));
	atomic_store_explicit(&q->ev_val[i], v, memory_order_relaxed);
	atomic_store_explicit(&q->nrec, n + 1, memory_order_release);
	if (q->watched) {
		atomic_store_explicit(&q->value, v, memory_order_release);
		rf__ec_notify(&cx->ec);
	}
	return 0;
}

void *rf__cu_event_for(rf__cu_queue *w, int64_t v)
{
	/* Newest to oldest while still >= v: the weakest record that satisfies the wait. A record the walker
	 * makes meanwhile only replaces an entry by a later one. */
	uint64_t n = atomic_load_explicit(&w->nrec, memory_order_acquire), i = n - 1;
	uint64_t oldest = n > w->nev ? n - w->nev : 0;
	while (i > oldest && atomic_load_explicit(&w->ev_val[(i - 1) % w->nev], memory_order_relaxed) >= v)
		i--;
	return w->ev[i % w->nev];
}

int rf__cu_wait(void *c, unsigned queue, unsigned wqueue, int64_t v, size_t block)
{
	rf__cu *cx = c;
	if (queue == wqueue) /* stream order already */
		return 0;
	rf__cu_queue *q = &cx->q[queue], *w = &cx->q[wqueue];
	if (w->stream == NULL) /* a host queue: its lane's signal, on the host */
		return rf__cu_host_wait(cx, wqueue, v, block);
	if (RF__TEST_HOOK(drop_raw_wait) && !q->copies && w->copies) /* negative control only */
		return 0;
	uint64_t n = atomic_load_explicit(&w->nrec, memory_order_relaxed);
	if (n == 0 || atomic_load_explicit(&w->ev_val[(n - 1) % w->nev], memory_order_relaxed) < v)
		return rf__err(RF_EBACKEND, "cuda: queue %u would wait for q%u >= %lld, which is never recorded before it",
			       queue, wqueue, (long long)v);
	RF__CU_TRY(cx->api, "cudaStreamWaitEvent", cx->api->stream_wait_event(q->stream, rf__cu_event_for(w, v)));
	return 0;
}

/* Before enqueueing a compute: wait for the one nwin computes back, then honour a cancel. */
int rf__cu_window_enter(rf__cu *cx, const atomic_int *cancel)
{
	if (cx->ncomp >= cx->nwin) {
		int e = cx->api->event_synchronize(cx->win[(cx->ncomp - cx->nwin) % cx->nwin]);
		if (e != 0)
			return rf__cu_fail(cx->api, "cudaEventSynchronize (enqueue window)", e);
	}
	if (atomic_load_explicit(cancel, memory_order_relaxed) || atomic_load_explicit(&cx->stop, memory_order_relaxed))
		return RF_ECANCELED;
	return 0;
}

/* After enqueueing a compute on `queue`: mark it in the window. */
int rf__cu_window_leave(rf__cu *cx, unsigned queue)
{
	void *ev = cx->win[cx->ncomp % cx->nwin];
	RF__CU_TRY(cx->api, "cudaEventRecord (enqueue window)", cx->api->event_record(ev, cx->q[queue].stream));
	cx->ncomp++;
	return 0;
}
