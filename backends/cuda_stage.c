/* backends/cuda_stage.c — building the two-hop staging of sources DMA cannot read directly, and
 * telling which those are. How the hop runs (a dispatcher thread per copying queue, the copy team,
 * an event per pinned slot) is cuda_hop.c's comment.
 *
 * The hop is built on a queue's first pageable block, not at create (review defect 6): pipelines fed
 * only pinned or device memory never page-lock a ring nor start threads, and where page-locking is
 * refused (confidential computing, cudaDevAttrHostRegisterSupported = 0, low memory) only runs with
 * pageable blocks fail, with the reason. The pinned ring is placed on the GPU's NUMA node when the
 * process may use it (defect 5), and its slots start on page boundaries (defect 4).
 *
 * Which sources are DMA-capable: whole ranges, not the first and last byte (two registrations with a
 * hole between them are pageable in the hole, defect 12), remembered per classifying thread so that a
 * source seen before costs no driver call. */
#include "backends/cuda_int.h"
#include "base/alloc.h"
#include "base/error.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- pinned memory ------------------------------------------------------------------------------ */

/* The pinner the staging layer page-locks pinned arenas with. */
static int rf__cu_pin(void *p, size_t len, const char **why)
{
	int e = rf__cuda->host_register(p, len);
	if (e != 0) {
		*why = rf__cuda->error_string(e);
		(void)rf__cuda->get_last_error();
	}
	return e;
}

static void rf__cu_unpin(void *p)
{
	if (rf__cuda->host_unregister(p) != 0)
		(void)rf__cuda->get_last_error();
}

static const rf__staging_pinner rf__cu_pinner = {rf__cu_pin, rf__cu_unpin};

/* A pinned staging policy for `device`: "auto" becomes the NUMA node nearest the GPU when the driver
 * or sysfs knows it (else the caller's node, as for CPU pipelines). */
void rf__cu_policy(const rf__cuda_api *api, int device, const rf__staging_policy *in, rf__staging_policy *out,
		   int *numa_node)
{
	*out = in != NULL ? *in : (rf__staging_policy){RF__STG_AUTO, -1, 0};
	*numa_node = -1;
	if (api->device_numa_node(device, numa_node) != 0) {
		(void)api->get_last_error();
		*numa_node = -1;
	}
	if (out->kind == RF__STG_AUTO && *numa_node >= 0) {
		out->kind = RF__STG_NODE;
		out->node = *numa_node;
	}
	out->pinned = 1;
	rf__staging_set_pinner(&rf__cu_pinner);
}

/* Pinned memory under cx's policy. When "auto" chose the GPU's node and this process may not use it
 * (a container's cpuset/mems, defect 5), fall back to the caller's node and say so in placement. */
int rf__cu_pinned_alloc(rf__cu *cx, size_t bytes, size_t align, void **out)
{
	int rc = rf__staging_alloc(&cx->pinned_policy, bytes, align, out);
	int from_auto = cx->pinned_policy.kind == RF__STG_NODE && cx->numa_node >= 0 &&
			cx->pinned_policy.node == cx->numa_node && cx->placement_note != NULL;
	if (rc == RF_EINVAL && from_auto) {
		rf__staging_policy caller = {RF__STG_AUTO, -1, 1};
		rc = rf__staging_alloc(&caller, bytes, align, out);
		if (rc == RF_OK) {
			cx->pinned_policy = caller;
			cx->placement_note = "the GPU's NUMA node is outside this process's allowed nodes (cpuset/mems): "
					     "placed by the caller's node instead";
		}
	}
	return rc;
}

/* Pinned slots per copying queue: two (one filling while the other drains), plus enough that every
 * thread of the team has a piece of some block to copy (a block is ceil(slot / RF__CU_PIECE) pieces),
 * at most RF__CU_NPIN_MAX. Independent of the ring's depth (review defect 8: depth = auto's 16 slots
 * of 64 MiB would have been 1 GiB page-locked): 3 slots for blocks of 2 MiB or more with 8 threads. */
static unsigned rf__cu_npin(size_t slot_bytes, unsigned threads)
{
	size_t pieces = (slot_bytes + RF__CU_PIECE - 1) / RF__CU_PIECE;
	size_t n = 2 + (threads + pieces - 1) / (pieces ? pieces : 1);
	return n > RF__CU_NPIN_MAX ? RF__CU_NPIN_MAX : (unsigned)n;
}

static int rf__cu_hop_build(rf__cu *cx, rf__cu_hop *h)
{
	const rf__cuda_api *api = cx->api;
	unsigned npin = rf__cu_npin(cx->slot_bytes, cx->team.n);
	if ((h->ev_free = rf__calloc(npin, sizeof *h->ev_free)) == NULL ||
	    (h->job = rf__calloc(npin, sizeof *h->job)) == NULL || (h->done = rf__calloc(npin, sizeof *h->done)) == NULL)
		return rf__err(RF_ENOMEM, "cuda: out of memory");
	h->npin = npin; /* from here rf__cu_stage_free destroys the events made so far */
	for (unsigned i = 0; i < npin; i++) {
		int e = api->event_create(&h->ev_free[i]);
		if (e != 0)
			return rf__cu_fail(api, "cudaEventCreateWithFlags", e);
	}
	void *mem = NULL;
	int rc = rf__cu_pinned_alloc(cx, (size_t)npin * cx->pin_stride, RF__STAGING_SLOT_ALIGN, &mem);
	if (rc != RF_OK)
		return rf__err(rc, "cuda: pinned host ring for pageable sources (%u x %zu bytes): %s", npin, cx->pin_stride,
			       rf__errmsg_peek());
	h->pin = mem;
	if (pthread_mutex_init(&h->mu, NULL) != 0)
		return rf__err(RF_ENOMEM, "cuda: cannot make the staging dispatcher's mutex");
	if (pthread_cond_init(&h->wcv, NULL) != 0) {
		pthread_mutex_destroy(&h->mu);
		return rf__err(RF_ENOMEM, "cuda: cannot make the staging dispatcher's condition variable");
	}
	if (pthread_cond_init(&h->dcv, NULL) != 0) {
		pthread_cond_destroy(&h->wcv);
		pthread_mutex_destroy(&h->mu);
		return rf__err(RF_ENOMEM, "cuda: cannot make the staging dispatcher's condition variable");
	}
	h->sync_made = 1;
	int err = rf__fault() ? EAGAIN : pthread_create(&h->th, NULL, rf__cu_hop_main, h);
	if (err != 0)
		return rf__err(RF_ENOMEM, "cuda: cannot start the staging dispatcher thread: %s", strerror(err));
	h->th_started = 1;
	cx->nhop_threads++;
	return RF_OK;
}

/* Build queue q's staging hop (and the team, once per pipeline). On failure what was built is torn
 * down, and the pipeline remembers why, so that later pageable runs fail alike. */
int rf__cu_stage_open(rf__cu *cx, rf__cu_queue *q)
{
	if (cx->stage_failed)
		return rf__err(cx->stage_failed, "%s", cx->stage_msg);
	int rc = RF_OK;
	/* The topology places our threads (and the pinned ring, which needs it as much). */
	hwloc_topology_t topo = rf__topo_acquire();
	if (topo == NULL)
		rc = rf__err(RF_EBACKEND, "cuda: staging hop: %s", rf__errmsg_peek());
	if (rc == RF_OK && !cx->team_started) {
		if ((rc = rf__cu_team_start(&cx->team, rf__cu_team_size(), topo, cx->numa_node)) == RF_OK)
			cx->team_started = 1;
	}
	if (rc == RF_OK) {
		if ((q->hop = rf__calloc(1, sizeof *q->hop)) == NULL)
			rc = rf__err(RF_ENOMEM, "cuda: out of memory");
		else {
			q->hop->cx = cx;
			q->hop->queue = (unsigned)(q - cx->q);
			rc = rf__cu_hop_build(cx, q->hop);
		}
	}
	if (rc == RF_OK) /* the dispatcher too: the hop's threads all run near the GPU */
		(void)rf__cu_place(topo, cx->numa_node, &q->hop->th, 1);
	if (topo != NULL)
		rf__topo_release(topo);
	if (rc != RF_OK) {
		snprintf(cx->stage_msg, sizeof cx->stage_msg, "%s", rf__errmsg_peek());
		cx->stage_failed = rc;
		rf__cu_stage_free(cx, q);
	}
	return rc;
}

void rf__cu_stage_free(rf__cu *cx, rf__cu_queue *q)
{
	const rf__cuda_api *api = cx->api;
	rf__cu_hop *h = q->hop;
	if (h == NULL)
		return;
	rf__cu_hop_quit(h);
	if (h->sync_made) {
		pthread_cond_destroy(&h->dcv);
		pthread_cond_destroy(&h->wcv);
		pthread_mutex_destroy(&h->mu);
	}
	for (unsigned j = 0; h->ev_free != NULL && j < h->npin; j++)
		if (h->ev_free[j] != NULL && api->event_destroy(h->ev_free[j]) != 0)
			(void)api->get_last_error();
	rf__staging_free(h->pin);
	free(h->ev_free);
	free(h->job);
	free(h->done);
	free(h);
	q->hop = NULL;
}

/* ---- which sources DMA can read ------------------------------------------------------------------- */

static int rf__cu_known(const rf__cu_range *cache, uintptr_t p, uintptr_t *end)
{
	for (unsigned i = 0; i < RF__CU_RANGES; i++) {
		const rf__cu_range *r = &cache[i];
		if (r->len != 0 && p >= r->start && p - r->start < r->len) {
			*end = r->start + r->len;
			return 1;
		}
	}
	return 0;
}

static void rf__cu_remember(rf__cu_range *cache, uintptr_t start, size_t len)
{
	memmove(&cache[1], &cache[0], (RF__CU_RANGES - 1) * sizeof cache[0]);
	cache[0] = (rf__cu_range){start, len};
}

/* 1 when every byte of [p, p + n) is DMA-capable: walk the range by the ranges containing it. `cache`
 * is the calling thread's (the walker's per queue, or that queue's dispatcher's). */
int rf__cu_is_dma(rf__cu *cx, rf__cu_range *cache, const void *p, size_t n)
{
	uintptr_t at = (uintptr_t)p, end = at + n;
	while (at < end) {
		uintptr_t next;
		if (!rf__cu_known(cache, at, &next)) {
			const void *start;
			size_t len;
			if (!cx->api->dma_range((const void *)at, &start, &len) || len == 0 ||
			    (uintptr_t)start > at || (uintptr_t)start + len <= at)
				return 0;
			rf__cu_remember(cache, (uintptr_t)start, len);
			next = (uintptr_t)start + len;
		}
		at = next;
	}
	return 1;
}
