/* tests/test_cuda_auto.c — depth = auto on a device backend (docs/cuda.md), against the
 * simulated CUDA (tests/cuda_sim.h): the host only enqueues there, so the copy and compute times a
 * traced run would see are enqueue times and the trace-based rule has nothing to learn from. Checked
 * here: the device ring holds exactly the ladder's deepest ring (4 lo slots, lo = K + 1: 2 with one
 * copy queue), the depth goes through the fixed ladder lo, 2 lo, 4 lo from the first run on (no
 * measuring run), one of them is kept, every run's payload is right, a memory budget caps the ladder,
 * describe names the ladder and no rule, every faulted create is clean; the CPU backends still measure
 * and apply the rule. One wall-clock test (suite cuda_auto_timing: its own ctest, label "timing",
 * serial): the rung whose runs are fastest is the one kept. */
#include <criterion/criterion.h>

#include "backends/cuda_api.h"
#include "cuda_sim.h"
#include "ringfetch.h"
#include "base/alloc.h"
#include "runtime/autodepth.h"
#include "runtime/backend.h"
#include "runtime/engine.h"
#include "cuda_check.h"
#include "support.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define SLOT 256 /* slot_bytes: budgets below are counted in it */

static void install(uint64_t seed, double step_prob)
{
	unsetenv("RINGFETCH_DEPTH");
	unsetenv("RINGFETCH_BACKEND");
	unsetenv("RINGFETCH_CONFIG");
	unsetenv("RINGFETCH_MEMORY_BUDGET");
	unsetenv("RINGFETCH_COPY_QUEUES");
	sim_use(seed, step_prob);
}

static int create_auto(const char *backend, unsigned kq, rf_pipeline **p)
{
	rf_pipeline_params pp = {0};
	pp.depth_auto = RF_DEPTH_AUTO;
	pp.slot_bytes = SLOT;
	pp.backend = backend;
	pp.memory = RF_MEMORY_DEVICE;
	pp.copy_queues = kq;
	*p = NULL;
	return rf_pipeline_create(&pp, p);
}

/* The device ring holds `slots` slots: the simulator's one device allocation (from its log) is that
 * many strides (slot_bytes rounded up to the backend's alignment), and the engine says so too. */
static void check_ring(const rf_pipeline *p, unsigned slots)
{
	size_t n, bytes = 0, found = 0;
	const char *const *l = sim_log(&n);
	for (size_t i = 0; i < n; i++) {
		int id;
		size_t b;
		if (sscanf(l[i], "malloc d%d n=%zu", &id, &b) == 2)
			bytes = b, found++;
	}
	const rf__engine *e = rf__pipeline_engine(p);
	cr_assert_eq(found, 1, "one device allocation expected, %zu seen", found);
	cr_assert_eq(bytes, slots * e->slot_stride, "a device ring of %zu bytes: %u slots of %zu expected", bytes,
		     slots, e->slot_stride);
	cr_assert_eq(e->nslots, slots);
}

/* One run with every block's payload checked on the device's schedule. */
static void run_ok(rf_pipeline *p, const blockset *bs, int r)
{
	check c;
	cr_assert_eq(run_checked(p, bs, &c), RF_OK, "run %d: %s", r, rf_errmsg());
	cr_assert_eq(c.checked, bs->n, "run %d: %zu of %zu computes checked", r, c.checked, bs->n);
	cr_assert_eq(c.bad, 0, "run %d at depth %u: block %zu corrupted", r, rf_pipeline_depth(p), c.first_bad);
	cr_assert_eq(sim_pending(), 0, "run %d: work left enqueued", r);
}

/* The ladder's runs: run r (0-based) uses ladder[r % n] for the first n x RF__AUTO_ROUNDS runs (the
 * first run is a probe run already), then one of the ladder is kept for good. Returns the kept one. */
static unsigned probe_through(rf_pipeline *p, const unsigned *ladder, unsigned n, uint64_t seed)
{
	uint64_t rng = seed;
	blockset bs;
	make_blocks(&bs, 40, SLOT, SRC_MIXED, &rng);
	for (unsigned r = 0; r < n * RF__AUTO_ROUNDS; r++) {
		cr_assert_eq(rf_pipeline_depth(p), ladder[r % n], "before run %u: depth %u, the ladder says %u (%s)", r,
			     rf_pipeline_depth(p), ladder[r % n], rf_pipeline_describe(p));
		run_ok(p, &bs, (int)r);
	}
	unsigned kept = rf_pipeline_depth(p), in = 0;
	for (unsigned i = 0; i < n; i++)
		in |= kept == ladder[i];
	cr_assert(in, "kept depth %u is not on the ladder (%s)", kept, rf_pipeline_describe(p));
	for (int r = 0; r < 3; r++) {
		run_ok(p, &bs, 100 + r);
		cr_assert_eq(rf_pipeline_depth(p), kept, "the kept depth stays");
	}
	free_blocks(&bs, SRC_MIXED);
	return kept;
}

/* describe: the ladder, the probe's figures and the kept depth; never the trace-based rule. */
static void check_describe(rf_pipeline *p, const char *ladder, unsigned kept)
{
	const char *d = rf_pipeline_describe(p);
	char want[128], end[32];
	snprintf(want, sizeof want, "; depth auto (device): ladder %s by run time", ladder);
	cr_assert(strstr(d, want) != NULL, "no \"%s\" in: %s", want, d);
	cr_assert(strstr(d, "; probed ") != NULL, "no probe figures in: %s", d);
	snprintf(end, sizeof end, "; depth %u", kept);
	size_t ld = strlen(d), le = strlen(end);
	cr_assert(ld >= le && strcmp(d + ld - le, end) == 0, "describe does not end with \"%s\": %s", end, d);
	cr_assert(strstr(d, "rule") == NULL, "the trace-based rule was used on a device backend: %s", d);
}

/* Create, check the ring, probe through the ladder, check describe. */
static void ladder_case(const char *backend, unsigned kq, const unsigned *ladder, unsigned n, const char *text,
			unsigned slots, uint64_t seed)
{
	install(seed, 0.3);
	rf_pipeline *p;
	cr_assert_eq(create_auto(backend, kq, &p), RF_OK, "%s", rf_errmsg());
	cr_assert_str_eq(rf_pipeline_backend(p), "cuda");
	check_ring(p, slots);
	cr_assert_eq(rf_pipeline_depth(p), ladder[0], "starts at the ladder's first rung");
	unsigned kept = probe_through(p, ladder, n, seed * 7 + 1);
	check_describe(p, text, kept);
	rf_pipeline_destroy(p);
	int streams, events, allocs, regs;
	sim_counts(&streams, &events, &allocs, &regs);
	cr_assert_eq(allocs, 0, "the device ring was freed");
	leak_check();
}

Test(cuda_auto, one_copy_queue_probes_2_4_8)
{
	const unsigned l[] = {2, 4, 8};
	ladder_case("cuda", 1, l, 3, "2, 4, 8", 8, 11);
}

Test(cuda_auto, two_copy_queues_probe_3_6_12)
{
	const unsigned l[] = {3, 6, 12};
	ladder_case("cuda", 2, l, 3, "3, 6, 12", 12, 12);
}

/* "auto" with device memory resolves to cuda before the depth is chosen: the same ladder. */
Test(cuda_auto, backend_auto_with_device_memory_is_the_device_ladder)
{
	const unsigned l[] = {2, 4, 8};
	ladder_case("auto", 1, l, 3, "2, 4, 8", 8, 13);
}

/* depth = auto from the environment (depth 0 in params), cuda from RINGFETCH_BACKEND. */
Test(cuda_auto, depth_auto_from_the_environment)
{
	install(14, 0.3);
	setenv("RINGFETCH_DEPTH", "auto", 1);
	setenv("RINGFETCH_BACKEND", "cuda", 1);
	rf_pipeline_params pp = {0};
	pp.slot_bytes = SLOT;
	pp.memory = RF_MEMORY_DEVICE;
	rf_pipeline *p = NULL;
	cr_assert_eq(rf_pipeline_create(&pp, &p), RF_OK, "%s", rf_errmsg());
	check_ring(p, 8);
	const unsigned l[] = {2, 4, 8};
	unsigned kept = probe_through(p, l, 3, 15);
	check_describe(p, "2, 4, 8", kept);
	rf_pipeline_destroy(p);
	leak_check();
}

/* A budget of fewer than 4 lo slots caps the ladder (the slot count itself is the last rung), and the
 * ring holds only those slots. */
Test(cuda_auto, a_budget_caps_the_ladder)
{
	const unsigned five[] = {2, 4, 5};
	install(21, 0.3);
	setenv("RINGFETCH_MEMORY_BUDGET", "1280", 1); /* 5 slots of 256 B */
	rf_pipeline *p;
	cr_assert_eq(create_auto("cuda", 1, &p), RF_OK, "%s", rf_errmsg());
	check_ring(p, 5);
	unsigned kept = probe_through(p, five, 3, 22);
	check_describe(p, "2, 4, 5", kept);
	rf_pipeline_destroy(p);

	const unsigned three[] = {2, 3};
	install(23, 0.3);
	setenv("RINGFETCH_MEMORY_BUDGET", "768", 1); /* 3 slots */
	cr_assert_eq(create_auto("cuda", 1, &p), RF_OK, "%s", rf_errmsg());
	check_ring(p, 3);
	kept = probe_through(p, three, 2, 24);
	check_describe(p, "2, 3", kept);
	rf_pipeline_destroy(p);

	/* two copy queues (lo = 3) under 7 slots: 3, 6, 7 */
	const unsigned seven[] = {3, 6, 7};
	install(25, 0.3);
	setenv("RINGFETCH_MEMORY_BUDGET", "1792", 1);
	cr_assert_eq(create_auto("cuda", 2, &p), RF_OK, "%s", rf_errmsg());
	check_ring(p, 7);
	kept = probe_through(p, seven, 3, 26);
	check_describe(p, "3, 6, 7", kept);
	rf_pipeline_destroy(p);
	leak_check();
}

/* The budget rules stay: room for fewer than lo slots with two copy queues is RF_ECONFIG, and one slot
 * with one copy queue is the sequential ring, nothing to probe. */
Test(cuda_auto, budget_rules_stay)
{
	install(31, 0.3);
	setenv("RINGFETCH_MEMORY_BUDGET", "512", 1); /* 2 slots */
	rf_pipeline *p;
	cr_assert_eq(create_auto("cuda", 2, &p), RF_ECONFIG);
	cr_assert_null(p);
	cr_assert(strstr(rf_errmsg(), "RINGFETCH_MEMORY_BUDGET") != NULL, "%s", rf_errmsg());
	setenv("RINGFETCH_MEMORY_BUDGET", "256", 1); /* 1 slot */
	sim_log_clear();
	cr_assert_eq(create_auto("cuda", 1, &p), RF_OK, "%s", rf_errmsg());
	check_ring(p, 1);
	const unsigned one[] = {1};
	unsigned kept = probe_through(p, one, 1, 32);
	cr_assert_eq(kept, 1u);
	const char *d = rf_pipeline_describe(p);
	cr_assert(strstr(d, "; depth auto (device): depth 1 (the only one the slots allow)") != NULL, "%s", d);
	cr_assert(strstr(d, "rule") == NULL, "%s", d);
	rf_pipeline_destroy(p);
	leak_check();
}

/* Every fallible step of create failing in turn: a clean error with *out untouched, or a pipeline whose
 * runs are right at whatever depths it probes (without memory for the ladder's programs: depth 2
 * alone, and describe says so); nothing leaks. */
Test(cuda_auto, every_faulted_create_is_clean_or_works, .timeout = 120)
{
	install(51, 0.3);
	uint64_t rng = 52;
	blockset bs;
	make_blocks(&bs, 24, SLOT, SRC_MIXED, &rng);
	rf_pipeline_params pp = {0};
	pp.depth_auto = RF_DEPTH_AUTO;
	pp.slot_bytes = SLOT;
	pp.backend = "cuda";
	pp.memory = RF_MEMORY_DEVICE;
	long k, worked = 0, short_ladder = 0;
	for (k = 1;; k++) {
		rf_pipeline *p = (rf_pipeline *)&k;
		rf__fault_arm(k);
		int rc = rf_pipeline_create(&pp, &p);
		long steps = rf__fault_steps();
		rf__fault_arm(0);
		if (rc != RF_OK) {
			cr_assert(rc == RF_ENOMEM || rc == RF_EBACKEND, "k=%ld: create returned %s", k, rf_err_name(rc));
			cr_assert_eq(p, (rf_pipeline *)&k, "k=%ld: *out written on failure", k);
			continue;
		}
		for (int r = 0; r < 10; r++) {
			unsigned d = rf_pipeline_depth(p);
			cr_assert(d == 2 || d == 4 || d == 8, "k=%ld run %d: depth %u", k, r, d);
			run_ok(p, &bs, r);
		}
		const char *d = rf_pipeline_describe(p);
		cr_assert(strstr(d, "rule") == NULL, "%s", d);
		short_ladder += strstr(d, "; depth auto (device): depth 2 (out of memory for the ladder)") != NULL;
		rf_pipeline_destroy(p);
		worked++;
		if (steps < k) /* the k-th step never came: that create ran unfaulted */
			break;
	}
	cr_assert_gt(k, 3, "create has fallible steps");
	cr_assert_gt(worked, 0);
	cr_assert_gt(short_ladder, 0, "no create lost its ladder's programs: the sweep missed them");
	free_blocks(&bs, SRC_MIXED);
	leak_check();
}

/* The CPU backends keep the measuring run and the rule: the first run measures at 2 (the depth does not
 * change before it ends), describe names the rule, and the slots are RF__AUTO_MAX_DEPTH. */
Test(cuda_auto, cpu_backends_keep_the_rule)
{
	install(41, 0);
	const char *const backends[] = {"cpu", "threads"};
	for (int b = 0; b < 2; b++) {
		rf_pipeline_params pp = {0};
		pp.depth_auto = RF_DEPTH_AUTO;
		pp.slot_bytes = 64;
		pp.backend = backends[b];
		rf_pipeline *p = NULL;
		cr_assert_eq(rf_pipeline_create(&pp, &p), RF_OK, "%s", rf_errmsg());
		cr_assert_eq(rf__pipeline_engine(p)->nslots, RF__AUTO_MAX_DEPTH);
		cr_assert_eq(rf_pipeline_depth(p), 2u);
		blockset bs;
		bs_uniform(&bs, 32, 64, 5);
		size_t calls = 0;
		cr_assert_eq(rf_pipeline_run(p, bs.n, bs_srcs(&bs), bs.sizes, count_cb, &calls), RF_OK, "%s", rf_errmsg());
		const char *d = rf_pipeline_describe(p);
		cr_assert(strstr(d, "; depth auto: rule ") != NULL, "%s: %s", backends[b], d);
		cr_assert(strstr(d, "(device)") == NULL, "%s: %s", backends[b], d);
		rf_pipeline_destroy(p);
		bs_free(&bs);
	}
	leak_check();
}

/* ---- the one wall-clock test (ctest cuda_auto_timing: label timing, RUN_SERIAL) ----------------- */

typedef struct slow_rungs {
	rf_pipeline *p;
	unsigned fast; /* runs at this depth are not slowed down */
} slow_rungs;

static void spin_ms(long ms)
{
	struct timespec t0, t;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	do
		clock_gettime(CLOCK_MONOTONIC, &t);
	while ((t.tv_sec - t0.tv_sec) * 1000L + (t.tv_nsec - t0.tv_nsec) / 1000000 < ms);
}

static int slow_but_one(void *user, const rf_block *b)
{
	const slow_rungs *s = user;
	if (b->index == 0 && rf_pipeline_depth(s->p) != s->fast)
		spin_ms(20);
	return 0;
}

/* Runs at every rung but 4 take 20 ms longer (their first compute spins), whatever the host's enqueue
 * times: the probe, by whole-run time, keeps 4 — not the first rung, not the deepest. */
Test(cuda_auto_timing, the_fastest_rung_by_run_time_is_kept)
{
	install(61, 0.3);
	rf_pipeline *p;
	cr_assert_eq(create_auto("cuda", 1, &p), RF_OK, "%s", rf_errmsg());
	uint64_t rng = 62;
	blockset bs;
	make_blocks(&bs, 40, SLOT, SRC_MIXED, &rng);
	slow_rungs s = {p, 4};
	for (unsigned r = 0; r < 3 * RF__AUTO_ROUNDS; r++)
		cr_assert_eq(rf_pipeline_run(p, bs.n, bs.srcs, bs.sizes, slow_but_one, &s), RF_OK, "%s", rf_errmsg());
	cr_assert_eq(rf_pipeline_depth(p), 4u, "%s", rf_pipeline_describe(p));
	check_describe(p, "2, 4, 8", 4);
	rf_pipeline_destroy(p);
	free_blocks(&bs, SRC_MIXED);
	leak_check();
}
