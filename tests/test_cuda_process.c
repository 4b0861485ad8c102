/* tests/test_cuda_process.c — what the cuda backend promises the process it runs in (docs/cuda.md),
 * against the simulated CUDA (tests/cuda_sim.h) where the simulator can show it: driver/runtime
 * versions, a thread with no current context and several devices, the GPU's NUMA node outside the
 * process's nodes, the enqueue window, the event pool as deep as the ring, registered ranges with a
 * hole and the range cache, and the application's pending CUDA error left alone. What only a GPU shows
 * is in tests/test_cuda.c and tests/test_cuda_hw.c. */
#include <criterion/criterion.h>

#include "backends/cuda_api.h"
#include "cuda_sim.h"
#include "ringfetch.h"
#include "runtime/backend.h"
#include "support.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void install(int ndev)
{
	sim_config c = {0};
	c.seed = 7;
	c.device_count = ndev;
	c.numa_node = 0;
	c.log = 1;
	sim_install(&c);
}

static rf_pipeline_params params(unsigned depth, size_t slot, int device)
{
	rf_pipeline_params pp;
	memset(&pp, 0, sizeof pp);
	pp.depth = depth;
	pp.slot_bytes = slot;
	pp.backend = "cuda";
	pp.memory = RF_MEMORY_DEVICE;
	pp.device = device;
	return pp;
}

typedef struct sums {
	size_t n;
} sums;

static int count(void *user, const rf_block *b)
{
	(void)b;
	((sums *)user)->n++;
	return 0;
}

/* n sources of `bytes` each: pinned (simulator-registered) or pageable. */
static void **sources(size_t n, size_t bytes, int pinned)
{
	void **s = calloc(n, sizeof *s);
	cr_assert_not_null(s);
	for (size_t i = 0; i < n; i++) {
		s[i] = pinned ? sim_host_alloc(bytes) : malloc(bytes);
		cr_assert_not_null(s[i]);
		memset(s[i], (int)i, bytes);
	}
	return s;
}

static void free_sources(void **s, size_t n, int pinned)
{
	for (size_t i = 0; i < n; i++)
		pinned ? sim_host_free(s[i]) : free(s[i]);
	free(s);
}

static int run(rf_pipeline *p, void **srcs, size_t n, size_t bytes)
{
	size_t *sizes = malloc(n * sizeof *sizes);
	cr_assert_not_null(sizes);
	for (size_t i = 0; i < n; i++)
		sizes[i] = bytes;
	sums s = {0};
	int rc = rf_pipeline_run(p, n, (const void *const *)srcs, sizes, count, &s);
	free(sizes);
	if (rc == RF_OK)
		cr_assert_eq(s.n, n);
	return rc;
}

/* A driver older than the runtime is not "no GPU": the message names both versions. */
Test(cuda_process, driver_older_than_the_runtime_names_both_versions)
{
	install(1);
	sim_cfg()->count_error = 35; /* CudaErrorInsufficientDriver */
	sim_cfg()->driver_version = 12020;
	rf_pipeline_params pp = params(2, 64, 0);
	rf_pipeline *p = NULL;
	cr_assert_eq(rf_pipeline_create(&pp, &p), RF_ENODEV);
	cr_assert(strstr(rf_errmsg(), "older") != NULL && strstr(rf_errmsg(), "12.2") != NULL &&
		  strstr(rf_errmsg(), "13.0") != NULL, "%s", rf_errmsg());
	/* No driver at all: no usable GPU, no versions to compare. */
	sim_cfg()->driver_version = -1;
	cr_assert_eq(rf_pipeline_create(&pp, &p), RF_ENODEV);
	cr_assert(strstr(rf_errmsg(), "no usable GPU") != NULL, "%s", rf_errmsg());
	leak_check();
}

/* A thread with no current context keeps none, and device 0's primary context is never
 * created by using device 1; a thread on device 0 stays on device 0. */
Test(cuda_process, no_current_context_is_restored_and_device0_untouched)
{
	install(2);
	sim_set_no_context();
	rf_pipeline_params pp = params(2, 4096, 1);
	rf_pipeline *p = NULL;
	cr_assert_eq(rf_pipeline_create(&pp, &p), RF_OK, "%s", rf_errmsg());
	cr_assert_eq(sim_current_device(), -1, "create left device %d current", sim_current_device());
	void **pin = sources(5, 4096, 1), **pag = sources(5, 4096, 0);
	cr_assert_eq(run(p, pin, 5, 4096), RF_OK, "%s", rf_errmsg());
	cr_assert_eq(run(p, pag, 5, 4096), RF_OK, "%s", rf_errmsg());
	cr_assert_eq(sim_current_device(), -1, "run left device %d current", sim_current_device());
	rf_pipeline_destroy(p);
	cr_assert_eq(sim_current_device(), -1, "destroy left device %d current", sim_current_device());
	cr_assert(!sim_context_made(0), "device 0's primary context was created by a pipeline on device 1");
	cr_assert(sim_context_made(1));
	/* Rf_cuda_staging_alloc on device 1 from a thread without a context. */
	void *m = NULL;
	cr_assert_eq(rf__cuda_staging_alloc(1 << 16, NULL, 1, &m), RF_OK, "%s", rf_errmsg());
	rf_staging_free(m);
	cr_assert_eq(sim_current_device(), -1);
	cr_assert(!sim_context_made(0));
	/* A thread whose current device is 0 keeps it across a device-1 pipeline. */
	cr_assert_eq(sim_api.set_device(0), 0);
	cr_assert_eq(rf_pipeline_create(&pp, &p), RF_OK, "%s", rf_errmsg());
	cr_assert_eq(run(p, pin, 5, 4096), RF_OK, "%s", rf_errmsg());
	rf_pipeline_destroy(p);
	cr_assert_eq(sim_current_device(), 0);
	/* Rf_cuda_host_register from a thread without a context leaves it without one. */
	sim_set_no_context();
	static char buf[8192];
	cr_assert_eq(rf__cuda_host_register(buf, sizeof buf), RF_OK, "%s", rf_errmsg());
	cr_assert_eq(sim_current_device(), -1);
	cr_assert_eq(rf__cuda_host_unregister(buf), RF_OK);
	free_sources(pin, 5, 1);
	free_sources(pag, 5, 0);
	leak_check();
}

/* The GPU's NUMA node is one this process may not use (here: one that does not exist):
 * the pinned ring goes by the caller's node instead, and placement says why. */
Test(cuda_process, gpu_numa_node_outside_the_process_falls_back)
{
	install(1);
	sim_cfg()->numa_node = 4000;
	rf_pipeline_params pp = params(2, 8192, 0);
	rf_pipeline *p = NULL;
	cr_assert_eq(rf_pipeline_create(&pp, &p), RF_OK, "%s", rf_errmsg());
	void **pag = sources(4, 8192, 0);
	cr_assert_eq(run(p, pag, 4, 8192), RF_OK, "%s", rf_errmsg());
	rf_placement pl;
	cr_assert_eq(rf_pipeline_placement(p, &pl), RF_OK, "%s", rf_errmsg());
	cr_assert_eq(pl.pinned, 1);
	cr_assert(strstr(pl.reason, "outside this process") != NULL, "%s", pl.reason);
	/* An explicit node the process cannot use stays an error (the caller asked for it). */
	rf_pipeline_destroy(p);
	pp.staging = "node:4000";
	cr_assert_eq(rf_pipeline_create(&pp, &p), RF_OK, "%s", rf_errmsg());
	cr_assert_eq(run(p, pag, 4, 8192), RF_EINVAL, "%s", rf_errmsg());
	rf_pipeline_destroy(p);
	free_sources(pag, 4, 0);
	leak_check();
}

/* The host enqueues a bounded window ahead of the device, not the whole run. With a device
 * that runs only when waited for, the work pending at once stays bounded by the window. */
Test(cuda_process, enqueue_window_bounds_work_ahead_of_the_device)
{
	install(1);
	rf_pipeline_params pp = params(4, 256, 0);
	rf_pipeline *p = NULL;
	cr_assert_eq(rf_pipeline_create(&pp, &p), RF_OK, "%s", rf_errmsg());
	const size_t n = 3000;
	void **pin = sources(1, 256, 1);
	void **srcs = malloc(n * sizeof *srcs);
	cr_assert_not_null(srcs);
	for (size_t i = 0; i < n; i++)
		srcs[i] = pin[0];
	sim_cfg()->log = 0;
	sim_reset_max_pending();
	cr_assert_eq(run(p, srcs, n, 256), RF_OK, "%s", rf_errmsg());
	/* ~5 operations per block (copy, records, waits, the compute's work); window = depth + 32. */
	cr_assert_lt(sim_max_pending(), (size_t)(4 + 32 + 4) * 6, "%zu operations were pending at once",
		     sim_max_pending());
	cr_assert(strstr(rf_pipeline_describe(p), "at most 36 computes ahead") != NULL, "%s", rf_pipeline_describe(p));
	rf_pipeline_destroy(p);
	free(srcs);
	free_sources(pin, 1, 1);
	leak_check();
}

/* The event pool is never shallower than the ring (it was capped at 256 for depths up to
 * 1024). */
Test(cuda_process, event_pool_covers_the_ring_depth)
{
	install(1);
	rf_pipeline_params pp = params(600, 64, 0);
	rf_pipeline *p = NULL;
	cr_assert_eq(rf_pipeline_create(&pp, &p), RF_OK, "%s", rf_errmsg());
	char want[64];
	snprintf(want, sizeof want, "%u events each", 2 * 600 + 8);
	cr_assert(strstr(rf_pipeline_describe(p), want) != NULL, "%s", rf_pipeline_describe(p));
	void **pin = sources(700, 64, 1);
	cr_assert_eq(run(p, pin, 700, 64), RF_OK, "%s", rf_errmsg());
	rf_pipeline_destroy(p);
	free_sources(pin, 700, 1);
	leak_check();
}

/* A source covered by two adjacent registrations is DMA-capable end to end; with a hole
 * between them it is pageable (staged), though its first and last byte are registered. Ranges seen
 * before cost no driver query. */
Test(cuda_process, registered_ranges_are_checked_whole_and_cached)
{
	install(1);
	rf_pipeline_params pp = params(2, 3 * 4096, 0);
	rf_pipeline *p = NULL;
	cr_assert_eq(rf_pipeline_create(&pp, &p), RF_OK, "%s", rf_errmsg());
	unsigned char *buf = aligned_alloc(4096, 3 * 4096);
	cr_assert_not_null(buf);
	memset(buf, 0x5a, 3 * 4096);
	void *srcs[1] = {buf};
	/* Adjacent: [0, 2 pages) and [2 pages, 3 pages) */
	sim_register_range(buf, 2 * 4096);
	sim_register_range(buf + 2 * 4096, 4096);
	sim_log_clear();
	cr_assert_eq(run(p, srcs, 1, 3 * 4096), RF_OK, "%s", rf_errmsg());
	rf_placement pl;
	cr_assert_eq(rf_pipeline_placement(p, &pl), RF_ENOTSUP, "a source covered by two registrations was staged");
	long q = sim_range_queries();
	cr_assert_eq(run(p, srcs, 1, 3 * 4096), RF_OK, "%s", rf_errmsg());
	cr_assert_eq(sim_range_queries(), q, "a source seen before cost %ld more range queries", sim_range_queries() - q);
	rf_pipeline_destroy(p);
	/* A hole: [0, 1 page) and [2 pages, 3 pages) */
	sim_unregister_range(buf);
	sim_unregister_range(buf + 2 * 4096);
	sim_register_range(buf, 4096);
	sim_register_range(buf + 2 * 4096, 4096);
	cr_assert_eq(rf_pipeline_create(&pp, &p), RF_OK, "%s", rf_errmsg());
	sim_log_clear();
	cr_assert_eq(run(p, srcs, 1, 3 * 4096), RF_OK, "%s", rf_errmsg());
	cr_assert_eq(rf_pipeline_placement(p, &pl), RF_OK, "a source with an unregistered hole was copied by DMA directly");
	rf_pipeline_destroy(p);
	sim_unregister_range(buf);
	sim_unregister_range(buf + 2 * 4096);
	free(buf);
	leak_check();
}

/* An error the application left pending (cudaGetLastError) survives the library's
 * successful calls: create, runs (direct and staged), destroy. */
Test(cuda_process, the_applications_pending_error_is_left_alone)
{
	install(1);
	sim_set_last_error(77);
	rf_pipeline_params pp = params(3, 4096, 0);
	rf_pipeline *p = NULL;
	cr_assert_eq(rf_pipeline_create(&pp, &p), RF_OK, "%s", rf_errmsg());
	void **pin = sources(6, 4096, 1), **pag = sources(6, 4096, 0);
	cr_assert_eq(run(p, pin, 6, 4096), RF_OK, "%s", rf_errmsg());
	cr_assert_eq(run(p, pag, 6, 4096), RF_OK, "%s", rf_errmsg());
	rf_pipeline_destroy(p);
	cr_assert_eq(sim_last_error(), 77, "the application's pending error became %d", sim_last_error());
	free_sources(pin, 6, 1);
	free_sources(pag, 6, 0);
	leak_check();
}
