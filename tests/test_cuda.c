/* tests/test_cuda.c — the pipeline contract on a real GPU (backend "cuda").
 *
 * Without a usable GPU the binary prints why and exits 77, which ctest reports as SKIPPED (never as
 * passed). The lowering itself is tested everywhere by tests/test_cuda_record.c.
 *
 * Computes do what a kernel would: read the device slot on the given stream. Each compute enqueues a
 * device-to-host copy of its slot into a per-block result buffer on that stream (optionally behind a
 * host function that sleeps, to make computes slow and expose a missing WAR wait); after the run every
 * block's bytes are compared with its source. */
#include <criterion/criterion.h>

#include "ringfetch.h"
#include "ringfetch/cuda.h"
#include "ringfetch/graph.h"
#include "ringfetch/staging.h"
#include "support.h"

#include <stdbool.h>
#include <sys/wait.h>

#define CU(expr)                                                                                            \
	do {                                                                                                \
		cudaError_t e_ = (expr);                                                                    \
		cr_assert_eq(e_, cudaSuccess, "%s: %s", #expr, cudaGetErrorString(e_));                     \
	} while (0)

typedef struct results {
	size_t n, slot;
	unsigned char *out; /* pinned: n * slot bytes */
	unsigned sleep_us;  /* slow computes */
	int enqueue_errors;
} results;

static void CUDART_CB sleeper(void *arg)
{
	unsigned us = (unsigned)(uintptr_t)arg;
	struct timespec ts = {0, (long)us * 1000};
	nanosleep(&ts, NULL);
}

static int copy_back(void *user, const rf_block *b)
{
	results *r = user;
	cudaStream_t s = rf_block_stream(b);
	if (r->sleep_us && cudaLaunchHostFunc(s, sleeper, (void *)(uintptr_t)r->sleep_us) != cudaSuccess)
		r->enqueue_errors++;
	if (b->bytes && cudaMemcpyAsync(r->out + b->index * r->slot, b->data, b->bytes, cudaMemcpyDeviceToHost, s) !=
			       cudaSuccess)
		r->enqueue_errors++;
	return 0;
}

enum { PINNED, PAGEABLE, REGISTERED };

typedef struct blocks {
	blockset bs;
	int kind;
	unsigned char *base; /* PINNED/REGISTERED: one allocation holding every block */
} blocks;

static void blocks_make(blocks *b, size_t n, size_t slot, int kind, uint64_t seed)
{
	bs_alloc(&b->bs, n, seed);
	b->kind = kind;
	b->base = NULL;
	for (size_t i = 0; i < n; i++)
		b->bs.sizes[i] = i % 5 == 4 ? slot / 3 : slot;
	if (kind == PINNED)
		CU(cudaHostAlloc((void **)&b->base, n * slot, cudaHostAllocDefault));
	else if (kind == REGISTERED) {
		b->base = malloc(n * slot);
		cr_assert_not_null(b->base);
		cr_assert_eq(rf_cuda_host_register(b->base, n * slot), RF_OK, "%s", rf_errmsg());
	}
	for (size_t i = 0; i < n; i++) {
		unsigned char *p = b->base ? b->base + i * slot : malloc(slot);
		cr_assert_not_null(p);
		fill_pattern(p, b->bs.sizes[i], i, seed);
		b->bs.bufs[i] = p;
		b->bs.srcs[i] = p;
	}
}

static void blocks_free(blocks *b)
{
	if (b->kind == PINNED)
		cudaFreeHost(b->base);
	else if (b->kind == REGISTERED) {
		cr_assert_eq(rf_cuda_host_unregister(b->base), RF_OK, "%s", rf_errmsg());
		free(b->base);
	} else
		for (size_t i = 0; i < b->bs.n; i++)
			free(b->bs.bufs[i]);
	free(b->bs.srcs);
	free(b->bs.sizes);
	free(b->bs.bufs);
}

static void check_results(const blocks *b, const results *r, const char *what)
{
	cr_assert_eq(r->enqueue_errors, 0, "%s: the compute's enqueues failed", what);
	for (size_t i = 0; i < b->bs.n; i++)
		cr_assert(memcmp(r->out + i * r->slot, b->bs.srcs[i], b->bs.sizes[i]) == 0, "%s: block %zu corrupted",
			  what, i);
}

static void run_case(unsigned depth, unsigned kq, size_t slot, size_t n, int kind, unsigned sleep_us)
{
	char what[96];
	snprintf(what, sizeof what, "depth %u K %u slot %zu n %zu kind %d sleep %u", depth, kq, slot, n, kind, sleep_us);
	rf_pipeline_params pp = {0};
	pp.depth = depth;
	pp.copy_queues = kq;
	pp.slot_bytes = slot;
	pp.backend = "cuda";
	pp.memory = RF_MEMORY_DEVICE;
	rf_pipeline *p;
	cr_assert_eq(rf_pipeline_create(&pp, &p), RF_OK, "%s: %s", what, rf_errmsg());
	blocks b;
	blocks_make(&b, n, slot, kind, depth * 1000 + n);
	results r = {n, slot, NULL, sleep_us, 0};
	CU(cudaHostAlloc((void **)&r.out, n * slot, cudaHostAllocDefault));
	memset(r.out, 0, n * slot);
	cr_assert_eq(rf_pipeline_run(p, n, b.bs.srcs, b.bs.sizes, copy_back, &r), RF_OK, "%s: %s", what, rf_errmsg());
	check_results(&b, &r, what);
	cudaFreeHost(r.out);
	blocks_free(&b);
	rf_pipeline_destroy(p);
}

Test(cuda, payload_pinned_sources_all_depths)
{
	for (unsigned d = 1; d <= 6; d++)
		for (unsigned k = 1; k <= (d > 2 ? 2u : 1u); k++)
			run_case(d, k, 64 * 1024, 40, PINNED, 0);
}

Test(cuda, payload_pageable_sources_two_hops)
{
	for (unsigned d = 1; d <= 4; d++)
		run_case(d, 1, 3 << 20, 24, PAGEABLE, 0); /* > 1 MiB: the staging lane and its helpers split blocks */
	run_case(3, 2, 100 * 1000, 30, PAGEABLE, 0);
}

Test(cuda, payload_registered_sources)
{
	run_case(2, 1, 256 * 1024, 32, REGISTERED, 0);
}

/* Slow computes: a missing WAR wait would let the next copy into a slot overtake the compute's read. */
Test(cuda, war_holds_with_slow_computes)
{
	for (unsigned d = 1; d <= 3; d++) {
		run_case(d, 1, 1 << 20, 16, PINNED, 300);
		run_case(d, 1, 1 << 20, 12, PAGEABLE, 300);
	}
}

Test(cuda, pipeline_is_reusable_and_reports_pinned_placement)
{
	rf_pipeline_params pp = {0};
	pp.depth = 3;
	pp.slot_bytes = 1 << 16;
	pp.backend = "cuda";
	pp.memory = RF_MEMORY_DEVICE;
	rf_pipeline *p;
	cr_assert_eq(rf_pipeline_create(&pp, &p), RF_OK, "%s", rf_errmsg());
	rf_placement pl;
	/* The pinned host ring is built on the first pageable block. */
	cr_assert_eq(rf_pipeline_placement(p, &pl), RF_ENOTSUP, "%s", rf_errmsg());
	blocks pg;
	blocks_make(&pg, 4, 1 << 16, PAGEABLE, 6);
	results r0 = {4, 1 << 16, NULL, 0, 0};
	CU(cudaHostAlloc((void **)&r0.out, 4u << 16, cudaHostAllocDefault));
	cr_assert_eq(rf_pipeline_run(p, 4, pg.bs.srcs, pg.bs.sizes, copy_back, &r0), RF_OK, "%s", rf_errmsg());
	check_results(&pg, &r0, "pageable");
	cudaFreeHost(r0.out);
	blocks_free(&pg);
	cr_assert_eq(rf_pipeline_placement(p, &pl), RF_OK, "%s", rf_errmsg());
	cr_assert_eq(pl.pinned, 1);
	fprintf(stderr, "cuda placement: node %d bound %d pinned %d %s\n%s\n", pl.numa_node, pl.bound, pl.pinned,
		pl.reason, rf_pipeline_describe(p));
	blocks b;
	blocks_make(&b, 20, 1 << 16, PINNED, 5);
	for (int rep = 0; rep < 3; rep++) {
		results r = {20, 1 << 16, NULL, 0, 0};
		CU(cudaHostAlloc((void **)&r.out, 20u << 16, cudaHostAllocDefault));
		cr_assert_eq(rf_pipeline_run(p, 20, b.bs.srcs, b.bs.sizes, copy_back, &r), RF_OK, "%s", rf_errmsg());
		check_results(&b, &r, "reuse");
		cudaFreeHost(r.out);
	}
	blocks_free(&b);
	rf_pipeline_destroy(p);
}

static int fail_at_3(void *user, const rf_block *b)
{
	(void)user;
	return b->index == 3 ? 11 : 0;
}

Test(cuda, callback_failure_then_reuse)
{
	rf_pipeline_params pp = {0};
	pp.depth = 2;
	pp.slot_bytes = 4096;
	pp.backend = "cuda";
	pp.memory = RF_MEMORY_DEVICE;
	rf_pipeline *p;
	cr_assert_eq(rf_pipeline_create(&pp, &p), RF_OK, "%s", rf_errmsg());
	blocks b;
	blocks_make(&b, 8, 4096, PAGEABLE, 9);
	cr_assert_eq(rf_pipeline_run(p, 8, b.bs.srcs, b.bs.sizes, fail_at_3, NULL), RF_ECALLBACK);
	results r = {8, 4096, NULL, 0, 0};
	CU(cudaHostAlloc((void **)&r.out, 8 * 4096, cudaHostAllocDefault));
	cr_assert_eq(rf_pipeline_run(p, 8, b.bs.srcs, b.bs.sizes, copy_back, &r), RF_OK, "%s", rf_errmsg());
	check_results(&b, &r, "after a failed run");
	cudaFreeHost(r.out);
	blocks_free(&b);
	rf_pipeline_destroy(p);
}

Test(cuda, bad_device_is_enodev)
{
	int n = 0;
	CU(cudaGetDeviceCount(&n));
	rf_pipeline_params pp = {0};
	pp.depth = 2;
	pp.slot_bytes = 4096;
	pp.backend = "cuda";
	pp.memory = RF_MEMORY_DEVICE;
	pp.device = n;
	rf_pipeline *p = NULL;
	cr_assert_eq(rf_pipeline_create(&pp, &p), RF_ENODEV);
	cr_assert_null(p);
}

Test(cuda, exec_ring_graph_two_copy_queues)
{
	rf_graph *g;
	cr_assert_eq(rf_graph_ring(30, 4, 2, &g), RF_OK);
	rf_exec_params ep = {0};
	ep.slot_bytes = 1 << 18;
	ep.backend = "cuda";
	rf_exec *e;
	cr_assert_eq(rf_exec_create(g, &ep, &e), RF_OK, "%s", rf_errmsg());
	rf_graph_destroy(g);
	blocks b;
	blocks_make(&b, 30, 1 << 18, PINNED, 3);
	results r = {30, 1 << 18, NULL, 50, 0};
	CU(cudaHostAlloc((void **)&r.out, 30u << 18, cudaHostAllocDefault));
	cr_assert_eq(rf_exec_run(e, 30, b.bs.srcs, b.bs.sizes, copy_back, &r), RF_OK, "%s", rf_errmsg());
	check_results(&b, &r, "exec");
	cudaFreeHost(r.out);
	blocks_free(&b);
	rf_exec_destroy(e);
}

/* SKIPPED without a GPU, FAIL with a driver older than the runtime (tests/gpu_main.h). */
#include "gpu_main.h"

int main(int argc, char *argv[])
{
	return rft_gpu_main(argc, argv, "the cuda suite");
}
