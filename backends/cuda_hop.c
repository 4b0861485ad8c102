/* backends/cuda_hop.c — two-hop staging that runs ahead of the walker (review defect 9).
 *
 * A pageable source cannot be DMA'd asynchronously (cudaMemcpyAsync would copy it synchronously through
 * a driver bounce buffer), so it goes pageable -> pinned slot (host threads) -> device slot (the copy
 * stream). Done by the walker itself, one block at a time, each block costs the hand-offs to the copy
 * threads on the critical path and leaves them idle in between: on an H200 that capped the hop at
 * 18.6 % of the pinned peak for 1 MiB blocks. Here each copying queue has a dispatcher thread that walks
 * the queue's copies ahead of the walker (the same program, the same walk: runtime/walk.h):
 *
 *   dispatcher, copy i:  classify the source (DMA-capable or pageable: cuda_stage.c's range cache);
 *                        pageable, k-th staged copy, pinned slot ps = k % npin: wait until the walker
 *                        has enqueued the H2D of staged copy k - npin (the last reader of ps), then for
 *                        that H2D itself (ev_free[ps]: a host wait, WAR on the pinned slot), then post
 *                        the host copy to the team (cuda_team.c: pieces, several blocks at once);
 *                        publish verdict i.
 *   walker, copy i:      take verdict i; DMA: cudaMemcpyAsync from the source; staged: wait until job k
 *                        is done (RAW on the pinned slot, on the host), cudaMemcpyAsync from pinned slot
 *                        ps, record ev_free[ps]; then say so (consumed, enq).
 *
 * So up to npin staged blocks are in flight (copying on the host, or waiting for the copy engine) while
 * the walker enqueues DMA-capable copies and computes without waiting for anything but the job of the
 * block it is at. The dispatcher classifies at most RF__CU_VERDICTS copies ahead. It makes no CUDA call
 * but cudaEventSynchronize and the pointer queries (its thread has the pipeline's device current, in
 * thread-local capture mode); no host functions are queued on CUDA's callback thread (review defects 9
 * and 11). Deadlock freedom: the dispatcher waits only for the walker's progress on earlier copies and
 * for H2Ds already enqueued; the walker waits only for verdicts and jobs of copies the dispatcher is
 * at or past, and every wait also ends when the other side stops (an error, a cancel, the run's end).
 *
 * The first run that meets a pageable block on a queue builds the hop there (cuda_stage.c) and starts
 * the dispatcher past the copies the walker already made (`skip`); later runs use it from the start.
 */
#include "backends/cuda_int.h"
#include "base/error.h"
#include "base/thread.h"
#include "runtime/walk.h"

#include <stdio.h>
#include <string.h>

#define RF__CU_STOP 1 /* the dispatcher's walk ends because the run's did: not an error */

/* ---- the dispatcher ------------------------------------------------------------------------------ */

/* Sleep until *have >= want or the run stops (mu held). RF__CU_STOP when stopped. */
static int rf__hop_await(rf__cu_hop *h, const uint64_t *have, uint64_t *waiting_for, uint64_t want)
{
	while (!h->stop && *have < want) {
		*waiting_for = want;
		pthread_cond_wait(&h->dcv, &h->mu);
	}
	*waiting_for = UINT64_MAX;
	return h->stop ? RF__CU_STOP : 0;
}

static void rf__hop_publish(rf__cu_hop *h, uint64_t i, rf__cu_verdict v, int posted)
{
	pthread_mutex_lock(&h->mu);
	h->v[i % RF__CU_VERDICTS] = v;
	h->nverdict = i + 1;
	h->posted += (uint64_t)posted;
	if (h->walker_waiting)
		pthread_cond_signal(&h->wcv);
	pthread_mutex_unlock(&h->mu);
}

static int rf__hop_copy(void *c, rf__run *run, unsigned queue, size_t b, unsigned slot)
{
	(void)queue;
	(void)slot;
	rf__cu_hop *h = c;
	rf__cu *cx = h->cx;
	size_t n = run->sizes[b];
	if (n == 0)
		return 0; /* the walker skips these too, uncounted */
	uint64_t i = h->ncopy++;
	if (i < h->skip)
		return 0;
	/* Room for verdict i. When full, sleep until half the verdicts are taken (one wake-up per
	 * RF__CU_VERDICTS / 2 copies, not one per copy). */
	pthread_mutex_lock(&h->mu);
	int rc = h->stop ? RF__CU_STOP : 0;
	if (rc == 0 && i >= h->consumed + RF__CU_VERDICTS)
		rc = rf__hop_await(h, &h->consumed, &h->wait_consumed, i + 1 - RF__CU_VERDICTS / 2);
	pthread_mutex_unlock(&h->mu);
	if (rc != 0)
		return rc;
	if (atomic_load_explicit(run->cancel, memory_order_relaxed))
		return rf__err(RF_ECANCELED, "canceled");
	if (rf__cu_is_dma(cx, h->ranges, run->srcs[b], n)) {
		rf__hop_publish(h, i, (rf__cu_verdict){b, 0, RF__CU_V_DMA, 0}, 0);
		return 0;
	}
	uint64_t k = h->nstaged++;
	unsigned ps = (unsigned)(k % h->npin);
	if (k >= h->npin) {
		pthread_mutex_lock(&h->mu);
		rc = rf__hop_await(h, &h->enq, &h->wait_enq, k - h->npin + 1);
		pthread_mutex_unlock(&h->mu);
		if (rc != 0)
			return rc;
		if (!RF__TEST_HOOK(drop_staging_war)) {
			int e = cx->api->event_synchronize(h->ev_free[ps]);
			if (e != 0)
				return rf__cu_fail(cx->api, "cudaEventSynchronize (pinned slot free)", e);
		}
	}
	rf__cu_job *j = &h->job[ps];
	j->hop = h;
	j->dst = h->pin + (size_t)ps * cx->pin_stride;
	j->src = run->srcs[b];
	j->len = n;
	j->ps = ps;
	j->k = k;
	rf__hop_publish(h, i, (rf__cu_verdict){b, k, RF__CU_V_STAGED, ps}, 1);
	rf__cu_team_post(&cx->team, j);
	return 0;
}

static int rf__hop_none(void *c, rf__run *run, unsigned queue, size_t b, unsigned slot)
{
	(void)c, (void)run, (void)queue, (void)b, (void)slot;
	return 0;
}

static int rf__hop_signal(void *c, unsigned queue, int64_t v, size_t block)
{
	(void)c, (void)queue, (void)v, (void)block;
	return 0;
}

static int rf__hop_wait(void *c, unsigned queue, unsigned wqueue, int64_t v, size_t block)
{
	(void)c, (void)queue, (void)wqueue, (void)v, (void)block;
	return 0;
}

static const rf__walk_ops rf__hop_ops = {rf__hop_copy, rf__hop_none, rf__hop_signal, rf__hop_wait};

void *rf__cu_hop_main(void *arg)
{
	rf__thread_block_signals();
	rf__cu_hop *h = arg;
	const rf__cuda_api *api = h->cx->api;
	/* Our own thread: the pipeline's device stays current on it, and another thread's global-mode
	 * stream capture must not turn our event waits into capture errors. */
	int mode;
	h->setdev_err = api->set_device(h->cx->device);
	if (h->setdev_err != 0 || api->capture_mode_local(&mode) != 0)
		(void)api->get_last_error();
	uint64_t seen = 0;
	pthread_mutex_lock(&h->mu);
	for (;;) {
		while (h->gen == seen && !h->quit)
			pthread_cond_wait(&h->dcv, &h->mu);
		if (h->quit)
			break;
		seen = h->gen;
		pthread_mutex_unlock(&h->mu);
		int rc = h->setdev_err != 0 ? rf__cu_fail(api, "cudaSetDevice (staging dispatcher)", h->setdev_err)
					    : rf__walk(&h->run, (int)h->queue, &rf__hop_ops, h);
		pthread_mutex_lock(&h->mu);
		if (rc != 0 && rc != RF__CU_STOP) {
			h->err = rc;
			snprintf(h->msg, sizeof h->msg, "%s", rf__errmsg_peek());
		}
		h->busy = 0;
		if (h->walker_waiting)
			pthread_cond_signal(&h->wcv);
	}
	pthread_mutex_unlock(&h->mu);
	return NULL;
}

/* A team thread finished job j: the walker may take its block. */
void rf__cu_hop_job_done(rf__cu_job *j)
{
	rf__cu_hop *h = j->hop;
	pthread_mutex_lock(&h->mu);
	h->done[j->ps] = j->k + 1;
	h->finished++;
	if (h->walker_waiting)
		pthread_cond_signal(&h->wcv);
	pthread_mutex_unlock(&h->mu);
}

/* ---- the walker's side --------------------------------------------------------------------------- */

void rf__cu_hop_start(rf__cu_hop *h, const rf__run *run, uint64_t skip)
{
	pthread_mutex_lock(&h->mu);
	h->run = *run;
	h->run.trace = NULL;
	h->run.stats = NULL;
	h->run.lookahead = 1;
	h->skip = skip;
	h->ncopy = h->nstaged = 0;
	h->nverdict = h->consumed = skip;
	h->enq = h->posted = h->finished = 0;
	h->wait_consumed = h->wait_enq = UINT64_MAX;
	memset(h->done, 0, h->npin * sizeof *h->done);
	h->err = 0;
	h->stop = 0;
	h->busy = 1;
	h->active = 1;
	h->gen++;
	pthread_cond_signal(&h->dcv);
	pthread_mutex_unlock(&h->mu);
}

/* Sleep until the dispatcher or a job moved (mu held). */
static void rf__hop_walker_sleep(rf__cu_hop *h)
{
	h->walker_waiting = 1;
	pthread_cond_wait(&h->wcv, &h->mu);
	h->walker_waiting = 0;
}

/* The walker's copy of a queue with a hop: the copy numbered q->ncopy - 1 this run. */
int rf__cu_hop_take(rf__cu *cx, rf__cu_queue *q, size_t block, void *dst, const void *src, size_t n)
{
	const rf__cuda_api *api = cx->api;
	rf__cu_hop *h = q->hop;
	uint64_t i = q->ncopy - 1;
	pthread_mutex_lock(&h->mu);
	while (h->nverdict <= i && h->busy)
		rf__hop_walker_sleep(h);
	if (h->nverdict <= i) {
		int err = h->err;
		pthread_mutex_unlock(&h->mu);
		if (err != 0)
			return rf__err(err, "%s", h->msg);
		return rf__err(RF_EBACKEND, "cuda: internal error: the staging dispatcher of queue %u ended before copy "
					    "%llu (block %zu)", (unsigned)(q - cx->q), (unsigned long long)i, block);
	}
	rf__cu_verdict v = h->v[i % RF__CU_VERDICTS];
	while (v.kind == RF__CU_V_STAGED && h->done[v.ps] != v.k + 1)
		rf__hop_walker_sleep(h);
	pthread_mutex_unlock(&h->mu);
	if (v.block != block) /* both walk the same program: a mismatch is a bug, never silently wrong data */
		return rf__err(RF_EBACKEND, "cuda: internal error: staging dispatcher at block %zu, walker at %zu", v.block,
			       block);
	int e;
	const char *call = "cudaMemcpyAsync";
	if (v.kind == RF__CU_V_DMA) {
		e = api->memcpy_async(dst, src, n, q->stream);
	} else {
		call = "cudaMemcpyAsync (pinned -> device)";
		e = api->memcpy_async(dst, h->pin + (size_t)v.ps * cx->pin_stride, n, q->stream);
		if (e == 0 && (e = api->event_record(h->ev_free[v.ps], q->stream)) != 0)
			call = "cudaEventRecord (pinned slot free)";
	}
	pthread_mutex_lock(&h->mu);
	h->consumed = i + 1;
	if (v.kind == RF__CU_V_STAGED && e == 0)
		h->enq = v.k + 1;
	if (h->consumed >= h->wait_consumed || h->enq >= h->wait_enq)
		pthread_cond_signal(&h->dcv);
	pthread_mutex_unlock(&h->mu);
	return e != 0 ? rf__cu_fail(api, call, e) : 0;
}

/* The walk is over (done, failed or canceled): stop the dispatcher and wait for it and for every job
 * it posted — they read the caller's sources, which are the caller's again once the run returns. */
void rf__cu_hop_end(rf__cu_hop *h)
{
	pthread_mutex_lock(&h->mu);
	if (h->active) {
		h->stop = 1;
		pthread_cond_signal(&h->dcv);
		while (h->busy || h->finished < h->posted)
			rf__hop_walker_sleep(h);
		h->active = 0;
	}
	pthread_mutex_unlock(&h->mu);
}

void rf__cu_hop_quit(rf__cu_hop *h)
{
	if (!h->th_started)
		return;
	pthread_mutex_lock(&h->mu);
	h->quit = 1;
	pthread_cond_signal(&h->dcv);
	pthread_mutex_unlock(&h->mu);
	pthread_join(h->th, NULL);
	h->th_started = 0;
}
