/* backends/cuda_stage.c — two-hop staging of sources DMA cannot read directly.
 *
 * Pageable memory: cudaMemcpyAsync would copy synchronously through a driver bounce buffer and overlap
 * nothing. So the walker itself — the caller's thread, with the copy team's threads placed on the
 * GPU's NUMA node (cuda_team.c), in 256 KiB pieces — copies the block into a pinned, NUMA-local host
 * ring, then enqueues the H2D from there on the copy stream. RAW on the pinned slot is program order
 * (the H2D is enqueued after the host copy returned); WAR is an event per pinned slot, free[s],
 * recorded after the H2D that read s, which the walker waits for before overwriting s (review
 * defect 9: no host functions on CUDA's callback thread — they were serialised there, cost 10-30 us of
 * dispatch each, and held up other pipelines' host functions for milliseconds; and defect 11: nothing
 * of ours can still be queued on CUDA's thread after a sticky error). The device keeps copying and
 * computing the blocks already enqueued while the walker copies the next one.
 *
 * The hop is built on a queue's first pageable block, not at create (review defect 6): pipelines fed
 * only pinned or device memory never page-lock a ring nor start threads, and where page-locking is
 * refused (confidential computing, cudaDevAttrHostRegisterSupported = 0, low memory) only runs with
 * pageable blocks fail, with the reason.
 *
 * Which sources are DMA-capable: whole ranges, not the first and last byte (two registrations with a
 * hole between them are pageable in the hole, defect 12), remembered per pipeline so that a source seen
 * before costs no driver call. */
#include "backends/cuda_int.h"
#include "base/alloc.h"
#include "base/error.h"

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

/* Pinned slots per copying queue: the ring's depth between them, at least two (one filling while the
 * other drains) and at most four: the hop is bound by the host copies, and depth = auto allocates up
 * to 16 slots it may never use (review defect 8: 16 pinned slots of 64 MiB would be 1 GiB). */
#define RF__CU_NPIN_MAX 4u
static unsigned rf__cu_npin(unsigned ns, unsigned ncopyq)
{
	unsigned per = (ns + ncopyq - 1) / ncopyq;
	return per < 2 ? 2 : per > RF__CU_NPIN_MAX ? RF__CU_NPIN_MAX : per;
}

/* Build queue q's staging hop (and the team, once per pipeline). On failure what was built stays for
 * rf__cu_stage_free, and the pipeline remembers why, so that later pageable runs fail alike. */
int rf__cu_stage_open(rf__cu *cx, rf__cu_queue *q)
{
	const rf__cuda_api *api = cx->api;
	if (cx->stage_failed)
		return rf__err(cx->stage_failed, "%s", cx->stage_msg);
	unsigned npin = rf__cu_npin(cx->nslots, cx->ncopyq ? cx->ncopyq : 1);
	int rc = RF_OK;
	void *mem = NULL;
	if ((q->ev_free = rf__calloc(npin, sizeof *q->ev_free)) == NULL)
		rc = rf__err(RF_ENOMEM, "cuda: out of memory");
	if (rc == RF_OK)
		q->npin = npin; /* from here rf__cu_stage_free destroys the events made so far */
	for (unsigned i = 0; rc == RF_OK && i < npin; i++) {
		int e = api->event_create(&q->ev_free[i]);
		if (e != 0)
			rc = rf__cu_fail(api, "cudaEventCreateWithFlags", e);
	}
	if (rc == RF_OK) {
		rc = rf__cu_pinned_alloc(cx, (size_t)npin * cx->pin_stride, RF__STAGING_SLOT_ALIGN, &mem);
		if (rc != RF_OK)
			rc = rf__err(rc, "cuda: pinned host ring for pageable sources (%u x %zu bytes): %s", npin,
				     cx->pin_stride, rf__errmsg_peek());
	}
	if (rc == RF_OK && !cx->team_started) {
		if ((rc = rf__cu_team_start(&cx->team, cx->numa_node)) == RF_OK)
			cx->team_started = 1;
	}
	if (rc != RF_OK) {
		rf__staging_free(mem);
		snprintf(cx->stage_msg, sizeof cx->stage_msg, "%s", rf__errmsg_peek());
		cx->stage_failed = rc;
		return rc;
	}
	q->pin = mem;
	return RF_OK;
}

void rf__cu_stage_free(rf__cu *cx, rf__cu_queue *q)
{
	const rf__cuda_api *api = cx->api;
	for (unsigned j = 0; q->ev_free != NULL && j < q->npin; j++)
		if (q->ev_free[j] != NULL && api->event_destroy(q->ev_free[j]) != 0)
			(void)api->get_last_error();
	rf__staging_free(q->pin);
	free(q->ev_free);
	q->pin = NULL;
	q->ev_free = NULL;
	q->npin = 0;
}

/* ---- the staged copy ------------------------------------------------------------------------------ */

/* pageable src -> pinned slot (the walker and the copy team) -> device slot (copy stream). */
int rf__cu_copy_staged(rf__cu *cx, rf__cu_queue *q, void *dst, const void *src, size_t n)
{
	const rf__cuda_api *api = cx->api;
	if (q->pin == NULL) {
		int rc = rf__cu_stage_open(cx, q);
		if (rc != RF_OK)
			return rf__err(rc, "cuda: a pageable block needs the staging hop, which cannot be built: %s",
				       rf__errmsg_peek());
	}
	uint64_t k = q->k;
	unsigned ps = (unsigned)(k % q->npin);
	unsigned char *pin = q->pin + (size_t)ps * cx->pin_stride;
	/* WAR on the pinned slot: the H2D that read it last (npin blocks back) is done. A host wait, and the
	 * back-pressure of the hop: the walker cannot run further ahead of the copy engine than the ring. */
	if (k >= q->npin && !RF__TEST_HOOK(drop_staging_war)) {
		int e = api->event_synchronize(q->ev_free[ps]);
		if (e != 0)
			return rf__cu_fail(api, "cudaEventSynchronize (pinned slot free)", e);
	}
	rf__cu_team_copy(&cx->team, pin, src, n);
	RF__CU_TRY(api, "cudaMemcpyAsync (pinned -> device)", api->memcpy_async(dst, pin, n, q->stream));
	RF__CU_TRY(api, "cudaEventRecord (pinned slot free)", api->event_record(q->ev_free[ps], q->stream));
	q->k++;
	return 0;
}

/* ---- which sources DMA can read ------------------------------------------------------------------- */

static int rf__cu_known(const rf__cu *cx, uintptr_t p, uintptr_t *end)
{
	for (unsigned i = 0; i < RF__CU_RANGES; i++) {
		const rf__cu_range *r = &cx->ranges[i];
		if (r->len != 0 && p >= r->start && p - r->start < r->len) {
			*end = r->start + r->len;
			return 1;
		}
	}
	return 0;
}

static void rf__cu_remember(rf__cu *cx, uintptr_t start, size_t len)
{
	memmove(&cx->ranges[1], &cx->ranges[0], (RF__CU_RANGES - 1) * sizeof cx->ranges[0]);
	cx->ranges[0] = (rf__cu_range){start, len};
}

/* 1 when every byte of [p, p + n) is DMA-capable: walk the range by the ranges containing it. */
int rf__cu_is_dma(rf__cu *cx, const void *p, size_t n)
{
	uintptr_t at = (uintptr_t)p, end = at + n;
	while (at < end) {
		uintptr_t next;
		if (!rf__cu_known(cx, at, &next)) {
			const void *start;
			size_t len;
			if (!cx->api->dma_range((const void *)at, &start, &len) || len == 0 ||
			    (uintptr_t)start > at || (uintptr_t)start + len <= at)
				return 0;
			rf__cu_remember(cx, (uintptr_t)start, len);
			next = (uintptr_t)start + len;
		}
		at = next;
	}
	return 1;
}
