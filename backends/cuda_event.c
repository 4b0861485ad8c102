/* backends/cuda_event.c — which event a signal records and a wait waits on, and the enqueue window.
 *
 * Events come from a pool per queue, reused round-robin. A wait for "queue W reached value v" uses
 * the oldest record still in W's pool whose value is >= v: the exact record when it is still there,
 * a later one (a stronger wait, never a weaker one) when the pool has moved on. The pool holds at least
 * 2 * slots + 8 records (review defect 10: never fewer than the ring is deep), so the exact record
 * is there whenever the ring's own edges ask for it.
 *
 * The enqueue window (defect 7): the host would otherwise enqueue a whole run in N x ~8 us and then sit
 * in cudaStreamSynchronize, deaf to rf_pipeline_cancel. Before enqueueing compute c it waits for
 * compute c - nwin to have run on the device (an event recorded after each compute) and checks cancel
 * there, so a cancel stops the run within nwin blocks of the device's progress. */
#include "backends/cuda_int.h"
#include "base/error.h"

int rf__cu_signal(void *c, unsigned queue, int64_t v, size_t block)
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

int rf__cu_wait(void *c, unsigned queue, unsigned wqueue, int64_t v, size_t block)
{
	(void)block;
	rf__cu *cx = c;
	if (queue == wqueue) /* stream order already */
		return 0;
	rf__cu_queue *q = &cx->q[queue], *w = &cx->q[wqueue];
	if (RF__TEST_HOOK(drop_raw_wait) && !q->copies && w->copies) /* negative control only */
		return 0;
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

/* Before enqueueing a compute: wait for the one nwin computes back, then honour a cancel. */
int rf__cu_window_enter(rf__cu *cx, const atomic_int *cancel)
{
	if (cx->ncomp >= cx->nwin) {
		int e = cx->api->event_synchronize(cx->win[(cx->ncomp - cx->nwin) % cx->nwin]);
		if (e != 0)
			return rf__cu_fail(cx->api, "cudaEventSynchronize (enqueue window)", e);
	}
	if (atomic_load_explicit(cancel, memory_order_relaxed))
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
