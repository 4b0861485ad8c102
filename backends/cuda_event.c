/* backends/cuda_event.c — which event a signal records and a wait waits on, and the enqueue window.
 *
 * Events come from a pool per stream queue (2 * slots + 8, never shallower than the ring), reused
 * round-robin. A wait for "queue W reached v" uses the oldest record still in the pool with value >= v:
 * the exact one, or a later (stronger) one once the pool moved on. The enqueue window keeps the host at
 * most nwin computes ahead of the device, checking cancel there: otherwise it would enqueue a whole run
 * and sit in cudaStreamSynchronize, deaf to rf_pipeline_cancel. */
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
	/* Newest to oldest while still >= v; a record made meanwhile only puts a later one in. */
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

/* Wait for the compute nwin back, honour a cancel, call the user, then record compute c's event. */
int rf__cu_compute(void *c, rf__run *run, unsigned queue, size_t b, unsigned slot)
{
	rf__cu *cx = c;
	if (cx->ncomp >= cx->nwin) {
		int e = cx->api->event_synchronize(cx->win[(cx->ncomp - cx->nwin) % cx->nwin]);
		if (e != 0)
			return rf__cu_fail(cx->api, "cudaEventSynchronize (enqueue window)", e);
	}
	if (atomic_load_explicit(run->cancel, memory_order_relaxed) || atomic_load_explicit(&cx->stop, memory_order_relaxed))
		return RF_ECANCELED;
	int rc = rf__call_compute(run, b, slot, cx->q[queue].stream);
	if (rc != 0)
		return rc;
	void *ev = cx->win[cx->ncomp % cx->nwin];
	RF__CU_TRY(cx->api, "cudaEventRecord (enqueue window)", cx->api->event_record(ev, cx->q[queue].stream));
	cx->ncomp++;
	return 0;
}
