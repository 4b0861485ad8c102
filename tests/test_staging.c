/*
 * tests/test_staging.c — staging memory (memory/staging.c, include/ringfetch/staging.h): placement of
 * cpu and threads rings, checked against what the kernel says about the pages; policy parsing; the
 * embedder API; fault injection at every allocation step; thousands of alloc/free cycles through an
 * arena without growth. White-box (links the static library): reads the ring's address, the staging
 * counters and sets rf__test_hooks.fail_alloc_step.
 *
 * Criterion runs every test in a process of its own, so each starts with no topology and no arena:
 * that is what lets a fault at "topology" or "arena" be reached.
 */
#include "runtime/backend.h"
#include "runtime/engine.h"
#include "memory/staging.h"
#include "rng.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <hwloc.h>
#include "memory/je.h"
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

static const char *const backends[] = {"cpu", "threads"};

/* ---- helpers ------------------------------------------------------------------------------------- */

static rf_pipeline_params params_for(const char *backend, const char *staging)
{
	rf_pipeline_params pp = {0};
	pp.depth = 3;
	pp.slot_bytes = 1 << 20;
	pp.backend = backend;
	pp.staging = staging;
	return pp;
}

/* The test's own topology: what the kernel says, independently of the library's. */
static hwloc_topology_t topo_load(void)
{
	hwloc_topology_t t;
	cr_assert_eq(hwloc_topology_init(&t), 0);
	cr_assert_eq(hwloc_topology_load(t), 0);
	return t;
}

static int first_node(hwloc_topology_t t)
{
	return hwloc_bitmap_first(hwloc_topology_get_allowed_nodeset(t));
}

/* When placement says bound, every page of [p, p+len) must carry MPOL_BIND to exactly that node and
 * sit on it; when it says unbound, the reason must say why. */
static void check_placement_truth(const void *p, size_t len, const rf_placement *pl)
{
	cr_assert_eq(pl->pinned, 0);
	cr_assert_not_null(pl->reason);
	if (!pl->bound) {
		cr_assert_neq(pl->reason[0], '\0', "unbound memory must say why");
		return;
	}
	cr_assert_str_eq(pl->reason, "");
	hwloc_topology_t t = topo_load();
	hwloc_nodeset_t ns = hwloc_bitmap_alloc();
	hwloc_membind_policy_t pol;
	cr_assert_eq(hwloc_get_area_membind(t, p, len, ns, &pol, HWLOC_MEMBIND_BYNODESET), 0, "%s", strerror(errno));
	cr_assert_eq(pol, HWLOC_MEMBIND_BIND, "policy %d", (int)pol);
	cr_assert_eq(hwloc_bitmap_weight(ns), 1);
	cr_assert_eq(hwloc_bitmap_first(ns), pl->numa_node);
	cr_assert_eq(hwloc_get_area_memlocation(t, p, len, ns, HWLOC_MEMBIND_BYNODESET), 0);
	cr_assert_eq(hwloc_bitmap_first(ns), pl->numa_node, "pages are not on the node they are bound to");
	hwloc_bitmap_free(ns);
	hwloc_topology_destroy(t);
}

static int copy_sum(void *user, const rf_block *b)
{
	const unsigned char *d = b->data;
	for (size_t i = 0; i < b->bytes; i++)
		*(size_t *)user += d[i];
	return 0;
}

/* A short run, to show the ring is usable memory. */
static void run_some(rf_pipeline *p)
{
	static unsigned char src[4][4096];
	const void *srcs[4];
	size_t sizes[4], sum = 0;
	for (int i = 0; i < 4; i++) {
		memset(src[i], 1, sizeof src[i]);
		srcs[i] = src[i];
		sizes[i] = sizeof src[i];
	}
	cr_assert_eq(rf_pipeline_run(p, 4, srcs, sizes, copy_sum, &sum), RF_OK, "%s", rf_errmsg());
	cr_assert_eq(sum, 4 * 4096u);
}

/* ---- placement of CPU pipelines ------------------------------------------------------------------ */

Test(staging, pipeline_placement_cpu_and_threads)
{
	for (size_t b = 0; b < sizeof backends / sizeof backends[0]; b++) {
		rf_pipeline_params pp = params_for(backends[b], NULL);
		rf_pipeline *p;
		cr_assert_eq(rf_pipeline_create(&pp, &p), RF_OK, "%s: %s", backends[b], rf_errmsg());
		rf_placement pl;
		cr_assert_eq(rf_pipeline_placement(p, &pl), RF_OK, "%s", rf_errmsg());
		const rf__engine *e = rf__pipeline_engine(p);
		cr_assert_eq((uintptr_t)e->slots % 4096, 0, "the ring is page aligned");
		check_placement_truth(e->slots, e->slots_len, &pl);
		cr_log_info("%s: node %d bound %d pinned %d reason \"%s\"", backends[b], pl.numa_node, pl.bound,
			    pl.pinned, pl.reason);
		run_some(p);
		rf_pipeline_destroy(p);
	}
}

/* On a machine where binding works (CI: a one-node container where mbind is allowed), auto must bind
 * to the caller's node. */
Test(staging, auto_binds_to_the_callers_node)
{
	hwloc_topology_t t = topo_load();
	hwloc_bitmap_t cpus = hwloc_bitmap_alloc(), nodes = hwloc_bitmap_alloc();
	cr_assert_eq(hwloc_get_last_cpu_location(t, cpus, HWLOC_CPUBIND_THREAD), 0);
	hwloc_cpuset_to_nodeset(t, cpus, nodes);
	void *m;
	cr_assert_eq(rf_staging_alloc(1 << 16, "auto", &m), RF_OK, "%s", rf_errmsg());
	rf_placement pl;
	cr_assert_eq(rf_staging_placement(m, &pl), RF_OK);
	if (pl.bound)
		cr_assert(hwloc_bitmap_isset(nodes, (unsigned)pl.numa_node), "node %d", pl.numa_node);
	check_placement_truth(m, 1 << 16, &pl);
	rf_staging_free(m);
	hwloc_bitmap_free(cpus);
	hwloc_bitmap_free(nodes);
	hwloc_topology_destroy(t);
}

Test(staging, explicit_node_interleave_and_none)
{
	hwloc_topology_t t = topo_load();
	char node[32];
	snprintf(node, sizeof node, "node:%d", first_node(t));
	rf_pipeline_params pp = params_for("cpu", node);
	rf_pipeline *p;
	rf_placement pl;
	cr_assert_eq(rf_pipeline_create(&pp, &p), RF_OK, "%s", rf_errmsg());
	cr_assert_eq(rf_pipeline_placement(p, &pl), RF_OK);
	cr_assert(pl.bound == 0 || pl.numa_node == first_node(t));
	check_placement_truth(rf__pipeline_engine(p)->slots, rf__pipeline_engine(p)->slots_len, &pl);
	rf_pipeline_destroy(p);

	pp.staging = "none";
	cr_assert_eq(rf_pipeline_create(&pp, &p), RF_OK, "%s", rf_errmsg());
	cr_assert_eq(rf_pipeline_placement(p, &pl), RF_OK);
	cr_assert_eq(pl.bound, 0);
	cr_assert(strstr(pl.reason, "policy none") != NULL, "%s", pl.reason);
	run_some(p);
	rf_pipeline_destroy(p);

	pp.staging = "interleave";
	cr_assert_eq(rf_pipeline_create(&pp, &p), RF_OK, "%s", rf_errmsg());
	cr_assert_eq(rf_pipeline_placement(p, &pl), RF_OK);
	cr_assert_eq(pl.numa_node, pl.bound ? -1 : pl.numa_node);
	if (pl.bound) {
		hwloc_nodeset_t ns = hwloc_bitmap_alloc();
		hwloc_membind_policy_t pol;
		const rf__engine *e = rf__pipeline_engine(p);
		cr_assert_eq(hwloc_get_area_membind(t, e->slots, e->slots_len, ns, &pol, HWLOC_MEMBIND_BYNODESET), 0);
		cr_assert_eq(pol, HWLOC_MEMBIND_INTERLEAVE, "policy %d", (int)pol);
		hwloc_bitmap_free(ns);
	}
	rf_pipeline_destroy(p);
	hwloc_topology_destroy(t);
}

/* ---- policy parsing -------------------------------------------------------------------------------- */

Test(staging, malformed_policies_are_rejected)
{
	static const char *const bad[] = {"", "garbage", "Node:0", "node:", "node:-1", "node:+1", "node: 1",
					  "node:1x", "node:0x1", "AUTO", "auto ", "interleave,", "node:99999999999"};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		rf_pipeline_params pp = params_for("cpu", bad[i]);
		rf_pipeline *p = (rf_pipeline *)&pp; /* must stay untouched */
		cr_assert_eq(rf_pipeline_create(&pp, &p), RF_EINVAL, "\"%s\"", bad[i]);
		cr_assert_eq(p, (rf_pipeline *)&pp);
		cr_assert(strstr(rf_errmsg(), "staging policy") != NULL && strstr(rf_errmsg(), "malformed") != NULL,
			  "\"%s\": %s", bad[i], rf_errmsg());
		void *m = NULL;
		cr_assert_eq(rf_staging_alloc(64, bad[i], &m), RF_EINVAL, "\"%s\"", bad[i]);
		cr_assert_null(m);
	}
}

Test(staging, node_out_of_range_is_einval)
{
	rf_pipeline_params pp = params_for("threads", "node:4095");
	rf_pipeline *p = NULL;
	cr_assert_eq(rf_pipeline_create(&pp, &p), RF_EINVAL);
	cr_assert_null(p);
	cr_assert(strstr(rf_errmsg(), "no NUMA node 4095") != NULL, "%s", rf_errmsg());
	cr_assert(strstr(rf_errmsg(), "rf_pipeline_create") != NULL, "%s", rf_errmsg());
	void *m = NULL;
	cr_assert_eq(rf_staging_alloc(64, "node:4095", &m), RF_EINVAL);
	cr_assert_null(m);
	rf__staging_stats st;
	rf__staging_get_stats(&st);
	cr_assert_eq(st.live_allocs, 0);
}

/* ---- the embedder API ------------------------------------------------------------------------------- */

Test(staging, alloc_free_placement_contract)
{
	void *m = NULL;
	rf_placement pl;
	cr_assert_eq(rf_staging_alloc(64, NULL, NULL), RF_EINVAL);
	cr_assert_eq(rf_staging_alloc(0, NULL, &m), RF_EINVAL);
	cr_assert(strstr(rf_errmsg(), "bytes is 0") != NULL, "%s", rf_errmsg());
	cr_assert_eq(rf_staging_placement(NULL, &pl), RF_EINVAL);
	cr_assert_eq(rf_staging_placement(&pl, &pl), RF_EINVAL, "a stack address is not staging memory");
	cr_assert(strstr(rf_errmsg(), "not inside staging memory") != NULL, "%s", rf_errmsg());
	rf_staging_free(NULL);

	size_t sizes[] = {1, 63, 64, 100, 4095, 4096, 5000, 1 << 20, (3 << 20) + 7};
	for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
		unsigned char *b;
		cr_assert_eq(rf_staging_alloc(sizes[i], NULL, (void **)&b), RF_OK, "%s", rf_errmsg());
		cr_assert_eq((uintptr_t)b % (sizes[i] >= 4096 ? 4096 : 64), 0, "alignment of %zu bytes", sizes[i]);
		for (size_t j = 0; j < sizes[i]; j++)
			cr_assert_eq(b[j], 0, "zero-filled");
		memset(b, 0xa5, sizes[i]);
		cr_assert_eq(rf_staging_placement(b + sizes[i] - 1, &pl), RF_OK, "interior pointer");
		cr_assert_eq(rf_staging_placement(NULL, NULL), RF_EINVAL);
		rf_staging_free(b);
	}
	rf__staging_stats st;
	rf__staging_get_stats(&st);
	cr_assert_eq(st.live_allocs, 0);
}

/* A pipeline whose backend takes plain memory: placement says so instead of guessing. */
static int plain_alloc(void *ctx, size_t bytes, void **mem)
{
	(void)ctx;
	return (*mem = aligned_alloc(4096, (bytes + 4095) & ~(size_t)4095)) ? RF_OK : RF_ENOMEM;
}

static void plain_free(void *ctx, void *mem, size_t bytes)
{
	(void)ctx, (void)bytes;
	free(mem);
}

Test(staging, placement_of_a_non_staging_ring_is_enotsup)
{
	static rf__backend_ops plain;
	plain = rf__backend_cpu;
	plain.name = "plain";
	plain.slots_alloc = plain_alloc;
	plain.slots_free = plain_free;
	cr_assert_eq(rf__backend_register(&plain), RF_OK);
	rf_pipeline_params pp = params_for("plain", NULL);
	rf_pipeline *p;
	rf_placement pl;
	cr_assert_eq(rf_pipeline_create(&pp, &p), RF_OK, "%s", rf_errmsg());
	cr_assert_eq(rf_pipeline_placement(p, &pl), RF_ENOTSUP);
	cr_assert_eq(rf_pipeline_placement(NULL, &pl), RF_EINVAL);
	cr_assert_eq(rf_pipeline_placement(p, NULL), RF_EINVAL);
	rf_pipeline_destroy(p);
}

/* ---- fault injection -------------------------------------------------------------------------------- */

static const char *fail_step;
static int fail_errno;
static unsigned fail_hits;

static int fail_at(const char *step)
{
	if (fail_step == NULL || strcmp(step, fail_step) != 0)
		return 0;
	fail_hits++;
	return fail_errno;
}

static void inject(const char *step, int err)
{
	fail_step = step;
	fail_errno = err;
	fail_hits = 0;
	rf__test_hooks.fail_alloc_step = fail_at;
}

/* With `step` failing, both pipeline backends and rf_staging_alloc fail with `want`, *out untouched,
 * no staging allocation left alive; then, with the fault gone, everything works. */
static void expect_clean_failure(const char *step, int err, const char *policy, int want)
{
	for (size_t b = 0; b < sizeof backends / sizeof backends[0]; b++) {
		inject(step, err);
		rf_pipeline_params pp = params_for(backends[b], policy);
		rf_pipeline *p = NULL;
		int rc = rf_pipeline_create(&pp, &p);
		cr_assert_eq(rc, want, "%s on %s: got %s (%s)", step, backends[b], rf_err_name(rc), rf_errmsg());
		cr_assert_null(p);
		cr_assert_gt(fail_hits, 0, "step %s was never consulted", step);
		cr_assert(strstr(rf_errmsg(), "ring slots") != NULL, "%s", rf_errmsg());
		void *m = NULL;
		cr_assert_eq(rf_staging_alloc(1 << 20, policy, &m), want, "%s", rf_errmsg());
		cr_assert_null(m);
		rf__staging_stats st;
		rf__staging_get_stats(&st);
		cr_assert_eq(st.live_allocs, 0, "a failed create left staging memory alive");
	}
	rf__test_hooks.fail_alloc_step = NULL;
	rf_pipeline_params pp = params_for("threads", policy);
	rf_pipeline *p;
	cr_assert_eq(rf_pipeline_create(&pp, &p), RF_OK, "after %s: %s", step, rf_errmsg());
	run_some(p);
	rf_pipeline_destroy(p);
}

Test(staging, fault_topology)
{
	expect_clean_failure("topology", 1, NULL, RF_EBACKEND);
}

Test(staging, fault_arena_creation)
{
	expect_clean_failure("arena", 1, NULL, RF_ENOMEM);
}

Test(staging, fault_membind_out_of_memory)
{
	/* No arena yet: the failure hits jemalloc's metadata mapping inside arenas.create. */
	expect_clean_failure("membind", ENOMEM, "interleave", RF_ENOMEM);
}

Test(staging, fault_membind_after_the_arena_exists)
{
	/* The arena exists: a new mapping for a block larger than anything cached fails. */
	void *warm;
	cr_assert_eq(rf_staging_alloc(4096, "interleave", &warm), RF_OK, "%s", rf_errmsg());
	inject("membind", ENOMEM);
	void *m = NULL;
	cr_assert_eq(rf_staging_alloc(64 << 20, "interleave", &m), RF_ENOMEM);
	cr_assert_null(m);
	cr_assert(strstr(rf_errmsg(), "binding memory") != NULL, "%s", rf_errmsg());
	rf__test_hooks.fail_alloc_step = NULL;
	rf_staging_free(warm);
}

Test(staging, fault_fallback_mapping)
{
	expect_clean_failure("fallback", 1, "none", RF_ENOMEM);
}

Test(staging, fault_mallocx)
{
	expect_clean_failure("mallocx", 1, NULL, RF_ENOMEM);
}

/* A refused binding is not an error: ordinary memory, and the placement says why. */
Test(staging, binding_refused_falls_back_and_says_so)
{
	static const struct {
		int err;
		const char *word;
	} cases[] = {{EPERM, "EPERM"}, {ENOSYS, "ENOSYS"}, {EXDEV, "EXDEV"}, {EINVAL, "EINVAL"}};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		char policy[32];
		hwloc_topology_t t = topo_load();
		snprintf(policy, sizeof policy, "node:%d", first_node(t));
		hwloc_topology_destroy(t);
		inject("membind", cases[i].err);
		void *m;
		/* A size no earlier case left cached, so that the hook maps again. */
		cr_assert_eq(rf_staging_alloc((size_t)(8 + i) << 20, policy, &m), RF_OK, "%s", rf_errmsg());
		rf_placement pl;
		cr_assert_eq(rf_staging_placement(m, &pl), RF_OK);
		cr_assert_eq(pl.bound, 0);
		cr_assert(strstr(pl.reason, cases[i].word) != NULL && strstr(pl.reason, "unbound") != NULL, "%s",
			  pl.reason);
		rf__test_hooks.fail_alloc_step = NULL;
		rf_staging_free(m);
	}
	rf_pipeline_params pp = params_for("cpu", NULL);
	rf_pipeline *p;
	inject("membind", EPERM);
	cr_assert_eq(rf_pipeline_create(&pp, &p), RF_OK, "%s", rf_errmsg());
	rf__test_hooks.fail_alloc_step = NULL;
	rf_placement pl;
	cr_assert_eq(rf_pipeline_placement(p, &pl), RF_OK);
	cr_assert_eq(pl.bound, 0);
	cr_assert(strstr(pl.reason, "EPERM") != NULL, "%s", pl.reason);
	run_some(p);
	rf_pipeline_destroy(p);
}

/* ---- the arena under churn ------------------------------------------------------------------------ */


/* jemalloc's own count of the arena's active pages, refreshed. */
static size_t arena_pactive(int ind)
{
	uint64_t epoch = 1;
	size_t sz = sizeof epoch, pactive = 0;
	char name[64];
	cr_assert_eq(mallctl("epoch", &epoch, &sz, &epoch, sz), 0);
	snprintf(name, sizeof name, "stats.arenas.%d.pactive", ind);
	sz = sizeof pactive;
	cr_assert_eq(mallctl(name, &pactive, &sz, NULL, 0), 0);
	return pactive;
}

/* Random sizes (1 B .. 1 MiB, mostly small), up to 32 alive, each filled and checked before it is freed. */
static void churn(unsigned cycles, uint64_t *seed, void **live, size_t *len)
{
	for (unsigned c = 0; c < cycles; c++) {
		unsigned k = (unsigned)(rng_next(seed) % 32);
		if (live[k] != NULL) {
			unsigned char *b = live[k];
			cr_assert(b[0] == (unsigned char)k && b[len[k] - 1] == (unsigned char)k, "block %u overwritten", k);
			rf_staging_free(live[k]);
			live[k] = NULL;
		}
		uint64_t r = rng_next(seed);
		len[k] = 1 + (size_t)(r >> 20) % ((r & 3) ? 4096 : (1 << 20));
		cr_assert_eq(rf_staging_alloc(len[k], "auto", &live[k]), RF_OK, "%s", rf_errmsg());
		memset(live[k], (int)k, len[k]);
	}
}

Test(staging, churn_does_not_grow)
{
	void *live[32] = {0};
	size_t len[32];
	uint64_t seed = 0x9e3779b97f4a7c15u;
	churn(2000, &seed, live, len);
	rf__staging_stats warm;
	rf__staging_get_stats(&warm);
	int ind = rf__staging_arena_of(live[0] ? live[0] : live[1]);
	cr_assert_geq(ind, 0);
	size_t pactive_warm = arena_pactive(ind);
	size_t peak_mapped = warm.mapped_bytes, peak_pactive = pactive_warm;
	for (int round = 0; round < 4; round++) {
		churn(2000, &seed, live, len);
		rf__staging_stats st;
		rf__staging_get_stats(&st);
		size_t pa = arena_pactive(ind);
		peak_mapped = st.mapped_bytes > peak_mapped ? st.mapped_bytes : peak_mapped;
		peak_pactive = pa > peak_pactive ? pa : peak_pactive;
	}
	cr_log_info("churn: mapped %zu -> peak %zu bytes, pactive %zu -> peak %zu pages, %lu hook maps",
		    warm.mapped_bytes, peak_mapped, pactive_warm, peak_pactive, warm.hook_maps);
	/* 32 live blocks of at most 1 MiB: 32 MiB alive at most. Allow jemalloc's size classes and
	 * caching on top, but no growth with the number of cycles. */
	cr_assert_leq(peak_mapped, (size_t)96 << 20, "mapped %zu", peak_mapped);
	cr_assert_leq(peak_mapped, 2 * warm.mapped_bytes + ((size_t)16 << 20), "grew from %zu to %zu",
		      warm.mapped_bytes, peak_mapped);
	cr_assert_leq(peak_pactive * 4096, (size_t)48 << 20, "pactive %zu pages", peak_pactive);
	for (int k = 0; k < 32; k++)
		rf_staging_free(live[k]);
	rf__staging_stats end;
	rf__staging_get_stats(&end);
	cr_assert_eq(end.live_allocs, 0);
	cr_assert_eq(end.narenas, 1, "one policy, one arena");
}

/* Hooks run concurrently: several threads allocating, checking and freeing at once. */
static void *churn_thread(void *arg)
{
	uint64_t seed = (uintptr_t)arg * 0x2545f4914f6cdd1du + 1;
	for (int i = 0; i < 500; i++) {
		size_t n = 1 + (size_t)(rng_next(&seed) % (256 << 10));
		unsigned char *b;
		if (rf_staging_alloc(n, (i & 1) ? "auto" : "none", (void **)&b) != RF_OK)
			return "alloc failed";
		memset(b, (int)i, n);
		rf_placement pl;
		if (rf_staging_placement(b + n / 2, &pl) != RF_OK || b[n - 1] != (unsigned char)i)
			return "placement or contents wrong";
		rf_staging_free(b);
	}
	return NULL;
}

Test(staging, concurrent_alloc_free)
{
	pthread_t t[4];
	for (uintptr_t i = 0; i < 4; i++)
		cr_assert_eq(pthread_create(&t[i], NULL, churn_thread, (void *)(i + 1)), 0);
	for (int i = 0; i < 4; i++) {
		void *r;
		pthread_join(t[i], &r);
		cr_assert_null(r, "%s", (const char *)r);
	}
	rf__staging_stats st;
	rf__staging_get_stats(&st);
	cr_assert_eq(st.live_allocs, 0);
}
