/* tests/test_cuda_record.c — the cuda backend's lowering, on any machine: the backend drives a
 * simulated CUDA runtime (tests/cuda_sim.h) that records every call and runs the enqueued work in
 * random legal orders. Checked here: the exact call sequence for small rings (direct and two-hop: the
 * staged ring), payload correctness under thousands of random schedules (RAW and WAR on both rings,
 * the hazard oracle on), negative controls (without the ring's WAR waits, without the staging slots'
 * — which the oracle refuses too), the staging lanes (runs switching sources, pieces over helpers,
 * cancel, a lane's failing event wait), rf_exec of plain and staged graphs, error paths (a failing
 * call, a sticky device error, no GPU), callback failure and cancel, back-pressure of the pinned ring,
 * pinned staging memory, and that nothing leaks. The real GPU runs are tests/test_cuda.c. */
#include <criterion/criterion.h>

#include "backends/cuda_api.h"
#include "cuda_sim.h"
#include "graph/graph_int.h"
#include "ringfetch.h"
#include "ringfetch/graph.h"
#include "ringfetch/staging.h"
#include "base/alloc.h"
#include "runtime/backend.h"
#include "memory/staging.h"
#include "cuda_check.h"
#include "support.h"

#include <stdatomic.h>


static rf_pipeline *make(unsigned depth, unsigned copy_queues, size_t slot_bytes)
{
	rf_pipeline_params pp = {0};
	pp.depth = depth;
	pp.slot_bytes = slot_bytes;
	pp.backend = "cuda";
	pp.memory = RF_MEMORY_DEVICE;
	pp.copy_queues = copy_queues;
	rf_pipeline *p = NULL;
	int rc = rf_pipeline_create(&pp, &p);
	cr_assert_eq(rc, RF_OK, "create depth %u K %u: %s", depth, copy_queues, rf_errmsg());
	return p;
}

/* ---- exact call sequences ---------------------------------------------------------------------- */

/* The enqueue calls of a run (memcpy / record / wait / hostfn lines), joined with '\n'. */
static char *run_lines_of(int event_syncs);
static char *run_lines(void)
{
	return run_lines_of(1);
}

/* The stream-ordering calls of the log (event_sync lines only when asked: the staging lanes' come
 * from threads of their own, interleaved with the walker's calls as the threads run). */
static char *run_lines_of(int event_syncs)
{
	size_t n;
	const char *const *l = sim_log(&n);
	size_t cap = 1, len = 0;
	for (size_t i = 0; i < n; i++)
		cap += strlen(l[i]) + 1;
	char *out = calloc(1, cap);
	cr_assert_not_null(out);
	for (size_t i = 0; i < n; i++) {
		if (strncmp(l[i], "memcpy", 6) && strncmp(l[i], "record", 6) && strncmp(l[i], "wait", 4) &&
		    strncmp(l[i], "hostfn", 6) && strncmp(l[i], "sync", 4) && (strncmp(l[i], "event_sync", 10) || !event_syncs))
			continue;
		len += (size_t)sprintf(out + len, "%s\n", l[i]);
	}
	return out;
}

Test(cuda_sequence, depth2_pinned_sources)
{
	sim_use(1, 0);
	rf_pipeline *p = make(2, 1, 16);
	uint64_t rng = 5;
	blockset bs;
	make_blocks_sized(&bs, 3, 16, SRC_PINNED, &rng, 16);
	sim_log_clear();
	check c;
	cr_assert_eq(run_checked(p, &bs, &c), RF_OK, "%s", rf_errmsg());
	char *got = run_lines();
	/* s0: the compute stream (queue 0), s1: the copy stream (queue 1); no host staging stream (built
	 * on the first pageable block only). Events e0..e11 belong to queue 0, e12..e23 to queue 1,
	 * e24.. to the enqueue window (recorded after each compute). Copies run ahead by the depth; a compute
	 * waits for its copy (RAW), and the copy into a slot waits for the compute that last read it (WAR).
	 * The last computes signal nothing: no copy waits for them. The run ends with one synchronisation
	 * of every stream, nothing in between. d0 is the device ring, h0..h2 the (pinned) sources; slots
	 * are slot_bytes rounded up to the backend's slot_align apart (256 B on the device: d0+256). */
	const char *want = "memcpy s1 d0+0 <- h0+0 n=16\n"
			   "record s1 e12\n"
			   "memcpy s1 d0+256 <- h1+0 n=16\n"
			   "record s1 e13\n"
			   "wait s0 e12\n"
			   "hostfn s0\n"
			   "record s0 e24\n"
			   "record s0 e0\n"
			   "wait s1 e0\n"
			   "memcpy s1 d0+0 <- h2+0 n=16\n"
			   "record s1 e14\n"
			   "wait s0 e13\n"
			   "hostfn s0\n"
			   "record s0 e25\n"
			   "wait s0 e14\n"
			   "hostfn s0\n"
			   "record s0 e26\n"
			   "sync s0\n"
			   "sync s1\n";
	if (strcmp(got, want) != 0)
		fprintf(stderr, "got:\n%s", got);
	cr_assert_str_eq(got, want);
	cr_assert_eq(c.checked, 3);
	cr_assert_eq(c.bad, 0);
	free(got);
	rf_pipeline_destroy(p);
	free_blocks(&bs, SRC_PINNED);
	leak_check();
}

/* Index of the first log line at or after `from` that starts with `what`; n when none. */
static size_t log_find(const char *what, size_t from)
{
	size_t n;
	const char *const *l = sim_log(&n);
	for (size_t i = from; i < n; i++)
		if (strncmp(l[i], what, strlen(what)) == 0)
			return i;
	return n;
}

Test(cuda_sequence, depth2_pageable_sources_take_two_hops)
{
	sim_use(1, 0);
	rf__test_hooks.cuda_copy_threads = 1; /* a 3-slot pinned ring: 2 + one thread's one piece */
	rf_pipeline *p = make(2, 1, 16);
	uint64_t rng = 5;
	blockset bs;
	make_blocks_sized(&bs, 4, 16, SRC_PAGEABLE, &rng, 16);
	sim_log_clear();
	check c;
	cr_assert_eq(run_checked(p, &bs, &c), RF_OK, "%s", rf_errmsg());
	char *got = run_lines_of(0);
	/* The staged ring: queue 2 (a host lane, no stream) stages block b into pinned slot b % 3 (r1:
	 * registered staging memory, page-locked on the first pageable block; slots a page apart); the walker
	 * waits on the host for each stage and enqueues the H2D from its pinned slot. The streams' calls are
	 * those of pinned sources, copies reading r1 instead: the hop adds no stream call and no event of its
	 * own. Block 3 reuses pinned slot 0. No host functions, no staging stream. */
	const char *want = "memcpy s1 d0+0 <- r1+0 n=16\n"
			   "record s1 e12\n"
			   "memcpy s1 d0+256 <- r1+4096 n=16\n"
			   "record s1 e13\n"
			   "wait s0 e12\n"
			   "hostfn s0\n"
			   "record s0 e24\n"
			   "record s0 e0\n"
			   "wait s1 e0\n"
			   "memcpy s1 d0+0 <- r1+8192 n=16\n"
			   "record s1 e14\n"
			   "wait s0 e13\n"
			   "hostfn s0\n"
			   "record s0 e25\n"
			   "record s0 e1\n"
			   "wait s1 e1\n"
			   "memcpy s1 d0+256 <- r1+0 n=16\n"
			   "record s1 e15\n"
			   "wait s0 e14\n"
			   "hostfn s0\n"
			   "record s0 e26\n"
			   "wait s0 e15\n"
			   "hostfn s0\n"
			   "record s0 e27\n"
			   "sync s0\n"
			   "sync s1\n";
	if (strcmp(got, want) != 0)
		fprintf(stderr, "got:\n%s", got);
	cr_assert_str_eq(got, want);
	/* WAR on pinned slot 0: the lane waited for block 0's H2D — the event its copy's signal recorded,
	 * e12 — before it staged block 3 there, so before the walker's H2D of block 3 out of it. That is the
	 * lane's one event wait: slots 1 and 2 were never reused. */
	size_t first = log_find("record s1 e12", 0), reuse = log_find("memcpy s1 d0+256 <- r1+0", 0), n_log,
	       sync = log_find("event_sync e12", first);
	(void)sim_log(&n_log);
	cr_assert_lt(first, n_log);
	cr_assert_lt(sync, reuse, "pinned slot 0 refilled without waiting for the H2D that read it");
	cr_assert_eq(log_find("event_sync", sync + 1), n_log, "a wait for a pinned slot that was never reused");
	cr_assert_eq(c.checked, 4);
	cr_assert_eq(c.bad, 0, "block %zu corrupted", c.first_bad);
	free(got);
	rf_pipeline_destroy(p);
	rf__test_hooks.cuda_copy_threads = 0;
	free_blocks(&bs, SRC_PAGEABLE);
	leak_check();
}

/* ---- random schedules --------------------------------------------------------------------------- */

/* One random configuration; returns the number of corrupted blocks seen, and the run's code in *rc.
 * fixed: every block that many bytes (else random sizes). */
static size_t random_case_rc(uint64_t *rng, int prefer_copies, int expect_ok, int *rc_out, size_t fixed)
{
	unsigned depth = 1 + (unsigned)(rng_next(rng) % 6);
	unsigned kq = 1 + (depth > 2 ? (unsigned)(rng_next(rng) % (depth - 1 < 3 ? depth - 1 : 3)) : 0);
	size_t slot = 1 + rng_next(rng) % 64;
	size_t n = rng_next(rng) % 40;
	int kind = (int)(rng_next(rng) % 3);
	sim_config cfg = {0};
	cfg.seed = rng_next(rng) | 1;
	cfg.step_prob = (double)(rng_next(rng) % 100) / 100.0;
	cfg.query_idle = (int)(rng_next(rng) % 2);
	cfg.prefer_copies = prefer_copies;
	cfg.device_count = 1;
	cfg.numa_node = -1;
	sim_install(&cfg);
	rf__test_hooks.cuda_copy_threads = 1 + (unsigned)(rng_next(rng) % 3);
	rf_pipeline *p = make(depth, kq, slot);
	blockset bs;
	make_blocks_sized(&bs, n, slot, kind, rng, fixed ? slot : 0);
	check c;
	int rc = run_checked(p, &bs, &c);
	if (expect_ok) {
		cr_assert_eq(rc, RF_OK, "depth %u K %u n %zu kind %d: %s", depth, kq, n, kind, rf_errmsg());
		cr_assert_eq(c.checked, n, "depth %u K %u n %zu kind %d: %zu computes checked", depth, kq, n, kind,
			     c.checked);
		cr_assert_eq(c.bad, 0, "depth %u K %u n %zu kind %d seed %llu: block %zu corrupted", depth, kq, n,
			     kind, (unsigned long long)cfg.seed, c.first_bad);
		cr_assert_eq(c.wrong_stream, 0);
		cr_assert_eq(sim_pending(), 0, "work left enqueued after the run");
	}
	if (rc_out != NULL)
		*rc_out = rc;
	rf_pipeline_destroy(p);
	free_blocks(&bs, kind);
	rf__test_hooks.cuda_copy_threads = 0;
	return c.bad;
}

static size_t random_case(uint64_t *rng, int prefer_copies, int expect_ok)
{
	return random_case_rc(rng, prefer_copies, expect_ok, NULL, 0);
}

/* Pinned, pageable and mixed sources through the staged ring, with the hazard oracle checking every
 * run's trace — the staging hop's RAW (stage -> copy) and WAR (copy -> next stage of the slot) too. */
Test(cuda_sim, random_rings_keep_raw_and_war, .timeout = 120)
{
	uint64_t seed = test_seed(), rng = seed;
	fprintf(stderr, "cuda_sim random rings: RF_TEST_SEED=%llu\n", (unsigned long long)seed);
	setenv("RINGFETCH_ORACLE", "1", 1);
	sim_use(1, 0);
	for (int i = 0; i < 1500; i++)
		random_case(&rng, i % 2, 1);
	leak_check();
}

/* Negative control: the same schedules with the ring's WAR waits removed must corrupt blocks — the
 * simulator is able to see the race the waits prevent. */
Test(cuda_sim, negative_control_without_war_waits_corrupts, .timeout = 120)
{
	uint64_t rng = 42;
	sim_use(1, 0);
	rf__test_hooks.drop_war_wait = 1;
	size_t bad = 0;
	for (int i = 0; i < 300; i++)
		bad += random_case(&rng, 1, 0);
	rf__test_hooks.drop_war_wait = 0;
	cr_assert_gt(bad, 0, "no corruption without WAR waits: the simulator cannot see the race");
}

/* The same for the pinned ring: the staged ring without its staging slots' WAR waits. Host lanes then
 * refill pinned slots whose H2D has not run — corrupted blocks, and, more to the point, the hazard
 * oracle refuses such runs from their traces alone (a stage into a slot before the copy that read it).
 * Blocks of one size: a lane overwriting a staging slot's state under a copy that has yet to read it
 * makes that copy read another block's bytes, never past a buffer's end. */
Test(cuda_sim, negative_control_without_staging_war_corrupts, .timeout = 120)
{
	uint64_t rng = 43;
	sim_use(1, 0);
	rf__test_hooks.drop_staging_war = 1;
	size_t bad = 0;
	for (int i = 0; i < 300; i++)
		bad += random_case_rc(&rng, 1, 0, NULL, 1);
	cr_assert_gt(bad, 0, "no corruption without the pinned ring's WAR waits");
	setenv("RINGFETCH_ORACLE", "1", 1);
	int refused = 0, rc;
	for (int i = 0; i < 300; i++) {
		random_case_rc(&rng, 1, 0, &rc, 1);
		refused += rc == RF_EHAZARD;
		if (rc == RF_EHAZARD)
			cr_assert(strstr(rf_errmsg(), "staging slot") != NULL, "%s", rf_errmsg());
	}
	rf__test_hooks.drop_staging_war = 0;
	cr_assert_gt(refused, 0, "the oracle never saw a stage before the copy that last read its slot");
}

/* Many more staged copies than the pinned ring has slots, with a device that runs only when waited
 * for: the lane waits for each pinned slot's H2D (driving the device) before reusing it. */
Test(cuda_sim, staging_ring_back_pressure)
{
	sim_use(3, 0);
	rf_pipeline *p = make(4, 1, 32);
	uint64_t rng = 9;
	blockset bs;
	make_blocks(&bs, 300, 32, SRC_PAGEABLE, &rng);
	check c;
	cr_assert_eq(run_checked(p, &bs, &c), RF_OK, "%s", rf_errmsg());
	cr_assert_eq(c.checked, 300);
	cr_assert_eq(c.bad, 0, "block %zu corrupted", c.first_bad);
	rf_pipeline_destroy(p);
	free_blocks(&bs, SRC_PAGEABLE);
	leak_check();
}

/* ---- the staging lanes (backends/cuda_stage.c) --------------------------------------------------- */

static int run_kind(rf_pipeline *p, size_t n, size_t slot, int kind, uint64_t *rng)
{
	blockset bs;
	make_blocks(&bs, n, slot, kind, rng);
	check c;
	int rc = run_checked(p, &bs, &c);
	cr_assert_eq(rc, RF_OK, "%zu blocks of kind %d: %s", n, kind, rf_errmsg());
	cr_assert_eq(c.checked, n);
	cr_assert_eq(c.bad, 0, "kind %d: block %zu corrupted", kind, c.first_bad);
	cr_assert_eq(sim_pending(), 0, "work left enqueued after the run");
	free_blocks(&bs, kind);
	return rc;
}

/* One pipeline, runs of every kind in turn: pinned only (nothing page-locked yet), mixed (the pinned
 * ring allocated in the middle of the run, on a lane), pinned again, pageable, mixed. */
Test(cuda_stage, runs_switch_between_pinned_pageable_and_mixed, .timeout = 120)
{
	for (uint64_t seed = 1; seed <= 6; seed++) {
		sim_use(seed, 0.3);
		rf__test_hooks.cuda_copy_threads = 1 + (unsigned)(seed % 3);
		rf_pipeline *p = make(seed % 2 ? 4 : 3, seed % 2 ? 2 : 1, 48);
		uint64_t rng = seed * 7;
		rf_placement pl;
		run_kind(p, 200, 48, SRC_PINNED, &rng);
		cr_assert_eq(rf_pipeline_placement(p, &pl), RF_ENOTSUP, "a pinned host ring without pageable blocks");
		run_kind(p, 150, 48, SRC_MIXED, &rng);
		cr_assert_eq(rf_pipeline_placement(p, &pl), RF_OK, "%s", rf_errmsg());
		cr_assert_eq(pl.pinned, 1);
		run_kind(p, 300, 48, SRC_PINNED, &rng);
		run_kind(p, 200, 48, SRC_PAGEABLE, &rng);
		run_kind(p, 100, 48, SRC_MIXED, &rng);
		rf_pipeline_destroy(p);
	}
	rf__test_hooks.cuda_copy_threads = 0;
	leak_check();
}

/* Blocks of several pieces (600 KiB + 3: three of the ring's sizing unit; base/piece.h cuts them into
 * 16), over two lanes and their two helpers (a pinned ring of 2 + ceil(4 / 3) = 4 slots per queue), two
 * copy queues: every pinned slot of both queues is used. */
Test(cuda_stage, blocks_of_several_pieces_over_several_threads, .timeout = 120)
{
	sim_use(11, 0.2);
	rf__test_hooks.cuda_copy_threads = 4;
	size_t slot = ((size_t)600 << 10) + 3;
	rf_pipeline *p = make(3, 2, slot);
	cr_assert(strstr(rf_pipeline_describe(p), "2 staging queues on 4 threads") != NULL, "%s", rf_pipeline_describe(p));
	uint64_t rng = 12;
	run_kind(p, 40, slot, SRC_PAGEABLE, &rng);
	run_kind(p, 40, slot, SRC_MIXED, &rng);
	/* Every pinned slot the H2Ds read from, over both queues' rings: 2 x 4. */
	size_t nl, nslots = 0;
	const char *const *l = sim_log(&nl);
	char seen[16][48];
	for (size_t i = 0; i < nl; i++) {
		const char *from = strstr(l[i], "<- r");
		if (strncmp(l[i], "memcpy", 6) != 0 || from == NULL)
			continue;
		char key[48];
		from += 3;
		snprintf(key, sizeof key, "%.*s", (int)strcspn(from, " "), from);
		size_t j = 0;
		while (j < nslots && strcmp(seen[j], key) != 0)
			j++;
		if (j == nslots) {
			cr_assert_lt(nslots, 16, "more pinned slots than 16");
			memcpy(seen[nslots++], key, sizeof key);
		}
	}
	cr_assert_eq(nslots, 8, "%zu pinned slots in use, 2 queues x 4 expected", nslots);
	rf_pipeline_destroy(p);
	rf__test_hooks.cuda_copy_threads = 0;
	leak_check();
}

/* A cancel while the lanes stage ahead: the run stops (RF_ECANCELED), nothing of it is left enqueued
 * or copying, and the next run is whole. */
Test(cuda_stage, cancel_stops_the_lanes, .timeout = 60)
{
	sim_use(5, 0.3);
	rf__test_hooks.cuda_copy_threads = 2;
	rf_pipeline *p = make(3, 1, 64);
	uint64_t rng = 6;
	blockset bs;
	make_blocks(&bs, 400, 64, SRC_PAGEABLE, &rng);
	check c;
	memset(&c, 0, sizeof c);
	c.bs = &bs;
	c.p = p;
	c.fail_at = -1;
	c.cancel_at = 50;
	g_nprobes = 0;
	cr_assert_eq(rf_pipeline_run(p, bs.n, bs.srcs, bs.sizes, compute, &c), RF_ECANCELED, "%s", rf_errmsg());
	cr_assert_eq(sim_pending(), 0);
	cr_assert_eq(c.bad, 0);
	cr_assert_lt(c.checked, 400);
	cr_assert_eq(run_checked(p, &bs, &c), RF_OK, "%s", rf_errmsg());
	cr_assert_eq(c.checked, 400);
	cr_assert_eq(c.bad, 0);
	rf_pipeline_destroy(p);
	rf__test_hooks.cuda_copy_threads = 0;
	free_blocks(&bs, SRC_PAGEABLE);
	leak_check();
}

/* A lane's wait for a pinned slot fails (every event synchronisation of the run is a lane's: the enqueue
 * window's come later): the run fails naming the call, nothing is left behind, and the pipeline runs
 * again, whole. */
Test(cuda_stage, lane_event_wait_error_fails_the_run_and_the_pipeline_recovers, .timeout = 60)
{
	for (long nth = 1; nth <= 3; nth++) {
		sim_use((uint64_t)nth, 0.2);
		rf__test_hooks.cuda_copy_threads = 1;
		rf_pipeline *p = make(2, 1, 32);
		uint64_t rng = 21;
		blockset bs;
		make_blocks(&bs, 20, 32, SRC_PAGEABLE, &rng);
		sim_cfg()->fail_call = "event_sync";
		sim_cfg()->fail_nth = nth;
		check c;
		cr_assert_eq(run_checked(p, &bs, &c), RF_EBACKEND);
		cr_assert(strstr(rf_errmsg(), "cudaEventSynchronize (staging slot free)") != NULL, "%s", rf_errmsg());
		cr_assert_eq(sim_pending(), 0);
		cr_assert_eq(c.bad, 0);
		cr_assert_eq(sim_last_error(), 0, "the error stayed pending on the caller's thread");
		sim_cfg()->fail_call = NULL;
		cr_assert_eq(run_checked(p, &bs, &c), RF_OK, "%s", rf_errmsg());
		cr_assert_eq(c.checked, 20);
		cr_assert_eq(c.bad, 0);
		rf_pipeline_destroy(p);
		free_blocks(&bs, SRC_PAGEABLE);
	}
	rf__test_hooks.cuda_copy_threads = 0;
	leak_check();
}

static void exec_check(rf_exec *e, size_t n, size_t slot, int kind, uint64_t seed)
{
	uint64_t rng = seed;
	blockset bs;
	make_blocks(&bs, n, slot, kind, &rng);
	check c;
	memset(&c, 0, sizeof c);
	c.bs = &bs;
	c.fail_at = c.cancel_at = -1;
	g_nprobes = 0;
	cr_assert_eq(rf_exec_run(e, n, bs.srcs, bs.sizes, compute, &c), RF_OK, "%s", rf_errmsg());
	cr_assert_eq(c.checked, n);
	cr_assert_eq(c.bad, 0);
	free_blocks(&bs, kind);
}

/* rf_exec of hand-built graphs on cuda: the ring with two copy queues (no STAGE: pageable sources go by
 * the driver's own staging), and the staged ring's explicit graph — its STAGE queues become lanes, the
 * graph oracle checking every run against the graph's edges. A queue that both stages and copies is
 * refused: a host lane cannot enqueue. */
Test(cuda_sim, exec_ring_graphs_plain_and_staged)
{
	setenv("RINGFETCH_ORACLE", "1", 1);
	sim_use(4, 0.3);
	rf_exec_params ep = {0};
	ep.slot_bytes = 24;
	ep.backend = "cuda";
	for (unsigned pins = 0; pins <= 3; pins += 3) {
		rf_graph *g;
		cr_assert_eq(rf__graph_ring(20, 4, 2, pins, &g), RF_OK);
		rf_exec *e;
		cr_assert_eq(rf_exec_create(g, &ep, &e), RF_OK, "%s", rf_errmsg());
		rf_graph_destroy(g);
		exec_check(e, 20, 24, SRC_MIXED, 11 + pins);
		exec_check(e, 20, 24, SRC_PAGEABLE, 12 + pins);
		rf_exec_destroy(e);
	}
	rf_graph *g;
	cr_assert_eq(rf_graph_create(0, &g), RF_OK);
	rf_node_desc st = {RF_NODE_STAGE, 1, 0, 0, 0}, cp = {RF_NODE_COPY, 1, 0, 0, 0}, cm = {RF_NODE_COMPUTE, 0, 0, 0, 0};
	size_t a, b, d;
	cr_assert_eq(rf_graph_add_node(g, &st, &a), RF_OK);
	cr_assert_eq(rf_graph_add_node(g, &cp, &b), RF_OK);
	cr_assert_eq(rf_graph_add_node(g, &cm, &d), RF_OK);
	cr_assert_eq(rf_graph_add_edge(g, b, d), RF_OK);
	rf_exec *e = NULL;
	cr_assert_eq(rf_exec_create(g, &ep, &e), RF_ENOTSUP, "%s", rf_errmsg());
	cr_assert(strstr(rf_errmsg(), "queue 1 stages") != NULL, "%s", rf_errmsg());
	ep.backend = "cpu"; /* the same graph is fine on a CPU backend */
	cr_assert_eq(rf_exec_create(g, &ep, &e), RF_OK, "%s", rf_errmsg());
	rf_exec_destroy(e);
	rf_graph_destroy(g);
	int s, ev, dv, r;
	sim_counts(&s, &ev, &dv, &r);
	cr_assert_eq(s + ev + dv, 0, "left %d streams, %d events, %d device allocations", s, ev, dv);
	leak_check();
}

/* ---- errors ---------------------------------------------------------------------------------- */

Test(cuda_errors, no_gpu_is_enodev_with_cuda_s_reason)
{
	sim_use(1, 0);
	sim_cfg()->count_error = 35;
	rf_pipeline_params pp = {0};
	pp.depth = 2;
	pp.slot_bytes = 64;
	pp.backend = "cuda";
	pp.memory = RF_MEMORY_DEVICE;
	rf_pipeline *p = NULL;
	cr_assert_eq(rf_pipeline_create(&pp, &p), RF_ENODEV);
	cr_assert_null(p);
	cr_assert(strstr(rf_errmsg(), "insufficient") != NULL && strstr(rf_errmsg(), "cudaGetDeviceCount") != NULL,
		  "%s", rf_errmsg());
	/* "auto" for device memory is cuda or nothing: the same reason. */
	pp.backend = "auto";
	cr_assert_eq(rf_pipeline_create(&pp, &p), RF_ENODEV);
	cr_assert(strstr(rf_errmsg(), "cudaGetDeviceCount") != NULL, "%s", rf_errmsg());
	/* "auto" for host memory: a CPU backend. */
	pp.memory = RF_MEMORY_HOST;
	cr_assert_eq(rf_pipeline_create(&pp, &p), RF_OK, "%s", rf_errmsg());
	cr_assert_str_neq(rf_pipeline_backend(p), "cuda");
	rf_pipeline_destroy(p);
	sim_cfg()->count_error = 0;
	pp.backend = "cuda";
	pp.memory = RF_MEMORY_DEVICE;
	pp.device = 3;
	p = NULL;
	cr_assert_eq(rf_pipeline_create(&pp, &p), RF_ENODEV);
	cr_assert(strstr(rf_errmsg(), "device 3") != NULL, "%s", rf_errmsg());
	leak_check();
}

/* With a usable GPU, "auto" for the default host memory must not pick cuda (a host
 * compute would dereference device pointers); for RF_MEMORY_DEVICE it picks cuda. */
Test(cuda_errors, auto_picks_cuda_only_for_device_memory)
{
#ifndef RF_HAVE_CUDA
	cr_skip_test("built without the CUDA toolkit: cuda is not a built-in backend");
#else
	sim_use(1, 0);
	rf_pipeline_params pp = {0};
	pp.depth = 2;
	pp.slot_bytes = 64;
	pp.backend = "auto";
	rf_pipeline *p = NULL;
	cr_assert_eq(rf_pipeline_create(&pp, &p), RF_OK, "%s", rf_errmsg());
	cr_assert_str_neq(rf_pipeline_backend(p), "cuda");
	rf_pipeline_destroy(p);
	pp.memory = RF_MEMORY_DEVICE;
	cr_assert_eq(rf_pipeline_create(&pp, &p), RF_OK, "%s", rf_errmsg());
	cr_assert_str_eq(rf_pipeline_backend(p), "cuda");
	rf_pipeline_destroy(p);
	leak_check();
#endif
}

/* A call failing while enqueueing: RF_EBACKEND naming the call and CUDA's words, everything already
 * enqueued drained, and the pipeline still usable. Every enqueue call kind, at several positions. */
Test(cuda_errors, failing_enqueue_call_drains_and_pipeline_stays_usable, .timeout = 60)
{
	const char *calls[] = {"memcpy", "record", "wait", "hostfn"};
	const char *names[] = {"cudaMemcpyAsync", "cudaEventRecord", "cudaStreamWaitEvent", "cudaLaunchHostFunc"};
	for (int k = 0; k < 4; k++) {
		for (long nth = 1; nth <= 12; nth += 5) {
			sim_use((uint64_t)nth, 0.2);
			rf_pipeline *p = make(3, 1, 32);
			uint64_t rng = 77;
			blockset bs;
			make_blocks(&bs, 10, 32, SRC_PAGEABLE, &rng);
			sim_cfg()->fail_call = calls[k];
			sim_cfg()->fail_nth = nth;
			check c;
			int rc = run_checked(p, &bs, &c);
			/* A host function the test itself enqueues may be the one that fails: then the
			 * compute reports it (98) as a callback failure. */
			if (rc == RF_OK) {
				cr_assert_lt(sim_fail_seen(), nth, "%s #%ld failed, but the run succeeded", calls[k], nth);
			} else if (rc == RF_ECALLBACK) {
				cr_assert_str_eq(calls[k], "hostfn");
			} else {
				cr_assert_eq(rc, RF_EBACKEND, "%s #%ld: %s", calls[k], nth, rf_errmsg());
				cr_assert(strstr(rf_errmsg(), names[k]) != NULL && strstr(rf_errmsg(), "invalid argument"),
					  "%s", rf_errmsg());
			}
			cr_assert_eq(sim_pending(), 0, "enqueued work left behind after a failed run");
			sim_cfg()->fail_call = NULL;
			cr_assert_eq(run_checked(p, &bs, &c), RF_OK, "run after a failure: %s", rf_errmsg());
			cr_assert_eq(c.bad, 0);
			cr_assert_eq(c.checked, 10);
			rf_pipeline_destroy(p);
			free_blocks(&bs, SRC_PAGEABLE);
		}
	}
	leak_check();
}

Test(cuda_errors, sticky_device_error_makes_the_pipeline_unusable)
{
	sim_use(1, 0);
	rf_pipeline *p = make(2, 1, 32);
	uint64_t rng = 3;
	blockset bs;
	make_blocks(&bs, 6, 32, SRC_PINNED, &rng);
	sim_cfg()->sync_error = 700;
	check c;
	cr_assert_eq(run_checked(p, &bs, &c), RF_EBACKEND);
	cr_assert(strstr(rf_errmsg(), "cudaStreamSynchronize") && strstr(rf_errmsg(), "illegal memory access"), "%s",
		  rf_errmsg());
	cr_assert_eq(run_checked(p, &bs, &c), RF_EBACKEND);
	cr_assert(strstr(rf_errmsg(), "unusable") != NULL, "%s", rf_errmsg());
	rf_pipeline_destroy(p);
	free_blocks(&bs, SRC_PINNED);
	leak_check();
}

Test(cuda_errors, callback_failure_and_cancel_drain_the_streams)
{
	sim_use(1, 0.5);
	rf_pipeline *p = make(3, 1, 32);
	uint64_t rng = 3;
	blockset bs;
	make_blocks(&bs, 12, 32, SRC_MIXED, &rng);
	check c;
	memset(&c, 0, sizeof c);
	c.bs = &bs;
	c.p = p;
	c.fail_at = 5;
	c.cancel_at = -1;
	g_nprobes = 0;
	cr_assert_eq(rf_pipeline_run(p, bs.n, bs.srcs, bs.sizes, compute, &c), RF_ECALLBACK);
	cr_assert(has_number(rf_errmsg(), 5), "%s", rf_errmsg());
	cr_assert_eq(sim_pending(), 0);
	cr_assert_eq(c.checked, 5);
	cr_assert_eq(c.bad, 0);
	c.fail_at = -1;
	c.cancel_at = 4;
	c.checked = 0;
	g_nprobes = 0;
	cr_assert_eq(rf_pipeline_run(p, bs.n, bs.srcs, bs.sizes, compute, &c), RF_ECANCELED, "%s", rf_errmsg());
	cr_assert_eq(sim_pending(), 0);
	cr_assert_eq(c.bad, 0);
	cr_assert_eq(run_checked(p, &bs, &c), RF_OK, "%s", rf_errmsg());
	cr_assert_eq(c.checked, 12);
	rf_pipeline_destroy(p);
	free_blocks(&bs, SRC_MIXED);
	leak_check();
}

/* Every fallible step of create + run + destroy (allocations, threads, CUDA object creation, staging)
 * failing in turn: a clean error, and nothing leaked (ASan/LSan) — streams and events included. */
Test(cuda_errors, kth_step_fault_sweep, .timeout = 120)
{
	sim_use(1, 0);
	uint64_t rng = 8;
	blockset bs;
	make_blocks(&bs, 8, 48, SRC_PAGEABLE, &rng);
	int swept = 0;
	for (long k = 1; k < 400; k++) {
		rf_pipeline_params pp = {0};
		pp.depth = 3;
		pp.slot_bytes = 48;
		pp.backend = "cuda";
		pp.memory = RF_MEMORY_DEVICE;
		rf_pipeline *p = NULL;
		rf__fault_arm(k);
		int rc = rf_pipeline_create(&pp, &p);
		check c;
		if (rc == RF_OK)
			rc = run_checked(p, &bs, &c);
		int fired = rf__fault_steps() >= k;
		rf__fault_arm(0);
		if (p != NULL)
			rf_pipeline_destroy(p);
		if (!fired)
			break;
		swept++;
		cr_assert_neq(rc, RF_OK, "step %ld failed but the call succeeded", k);
		cr_assert(rc == RF_ENOMEM || rc == RF_EBACKEND || rc == RF_ENODEV, "step %ld: %s", k, rf_errmsg());
		int s, e, d, r;
		sim_counts(&s, &e, &d, &r);
		cr_assert_eq(s, 0, "step %ld: %d streams leaked", k, s);
		cr_assert_eq(e, 0, "step %ld: %d events leaked", k, e);
		cr_assert_eq(d, 0, "step %ld: %d device allocations leaked", k, d);
	}
	cr_assert_gt(swept, 10);
	free_blocks(&bs, SRC_PAGEABLE);
	leak_check();
}

/* ---- pinned staging memory (the CUDA half of the staging layer) ----------------------------------- */

Test(cuda_staging, host_ring_is_pinned_and_placed_near_the_gpu)
{
	sim_use(1, 0);
	rf_pipeline *p = make(3, 1, 8192);
	rf_placement pl;
	/* Page-locked on the first pageable block: none yet. */
	cr_assert_eq(rf_pipeline_placement(p, &pl), RF_ENOTSUP, "%s", rf_errmsg());
	int s, e, dv, r;
	sim_counts(&s, &e, &dv, &r);
	cr_assert_eq(r, 0, "a pipeline that has seen no pageable block page-locked %d ranges", r);
	uint64_t rng = 3;
	blockset bs;
	make_blocks_sized(&bs, 4, 8192, SRC_PAGEABLE, &rng, 8192);
	check c;
	cr_assert_eq(run_checked(p, &bs, &c), RF_OK, "%s", rf_errmsg());
	free_blocks(&bs, SRC_PAGEABLE);
	cr_assert_eq(rf_pipeline_placement(p, &pl), RF_OK, "%s", rf_errmsg());
	cr_assert_eq(pl.pinned, 1);
	/* The simulated GPU sits on node 0 (cudaDevAttrHostNumaId): bound there when the kernel lets us. */
	if (pl.bound)
		cr_assert_eq(pl.numa_node, 0);
	else
		cr_assert_str_neq(pl.reason, "");
	const char *d = rf_pipeline_describe(p);
	cr_assert(strstr(d, "cuda: device 0 (Simulated GPU, host NUMA node 0)") != NULL, "%s", d);
	sim_counts(&s, &e, &dv, &r);
	cr_assert_gt(r, 0, "no cudaHostRegister seen");
	rf_pipeline_destroy(p);
	leak_check();
}

/* Pinned arenas register every mapping and unregister it only when jemalloc has given back all of
 * it; thousands of variable-size cycles stay bounded. */
Test(cuda_staging, pinned_alloc_cycles_register_and_unregister, .timeout = 60)
{
	sim_use(1, 0);
	uint64_t rng = 1;
	void *live[16] = {0};
	for (int i = 0; i < 4000; i++) {
		unsigned j = (unsigned)(rng_next(&rng) % 16);
		if (live[j] != NULL) {
			rf_staging_free(live[j]);
			live[j] = NULL;
			continue;
		}
		size_t n = 1 + rng_next(&rng) % (3u << 20);
		cr_assert_eq(rf__cuda_staging_alloc(n, NULL, 0, &live[j]), RF_OK, "%s", rf_errmsg());
		rf_placement pl;
		cr_assert_eq(rf_staging_placement(live[j], &pl), RF_OK);
		cr_assert_eq(pl.pinned, 1);
		cr_assert(sim_is_pinned(live[j], n), "pinned staging block not registered end to end");
		memset(live[j], 0xab, n);
	}
	for (unsigned j = 0; j < 16; j++)
		rf_staging_free(live[j]);
	rf__staging_stats st;
	rf__staging_get_stats(&st);
	cr_assert_lt(st.mapped_bytes, (size_t)256 << 20, "pinned arena grew to %zu bytes", st.mapped_bytes);
	leak_check();
}

/* Regression: jemalloc maps more than asked and keeps the tail of a split growth mapping without ever
 * returning it, so unregistering "when every piece is back" leaked a whole registration per cycle.
 * Create/destroy and alloc/free churn of big pinned rings must reuse memory: registrations and mapped
 * bytes stop growing after the first cycles. */
Test(cuda_staging, pinned_churn_reuses_registrations, .timeout = 60)
{
	sim_use(1, 0);
	int s, e, d, r, r_after_warmup = 0;
	rf__staging_stats st, st_warm = {0};
	for (int i = 0; i < 40; i++) {
		void *m = NULL;
		cr_assert_eq(rf__cuda_staging_alloc((size_t)16 << 20, NULL, 0, &m), RF_OK, "%s", rf_errmsg());
		rf_staging_free(m);
		rf_pipeline *p = make(4, 1, (size_t)4 << 20); /* a 16 MiB pinned host ring */
		rf_pipeline_destroy(p);
		if (i == 4) {
			sim_counts(&s, &e, &d, &r_after_warmup);
			rf__staging_get_stats(&st_warm);
		}
	}
	sim_counts(&s, &e, &d, &r);
	rf__staging_get_stats(&st);
	cr_assert_leq(r, r_after_warmup, "registrations grew from %d to %d over 35 create/destroy cycles", r_after_warmup, r);
	cr_assert_leq(st.mapped_bytes, st_warm.mapped_bytes, "pinned mapped bytes grew from %zu to %zu", st_warm.mapped_bytes,
		      st.mapped_bytes);
	leak_check();
}

/* Page-locking refused (confidential computing, no HostRegister support, low memory): creating a
 * pipeline does not page-lock anything, pinned sources run, and a run with a
 * pageable block fails saying why — every time, not once. */
Test(cuda_staging, page_locking_failure_fails_only_pageable_runs)
{
	sim_use(1, 0);
	sim_cfg()->register_error = 2;
	void *m = NULL;
	cr_assert_eq(rf__cuda_staging_alloc(1 << 20, NULL, 0, &m), RF_ENOMEM);
	cr_assert_null(m);
	cr_assert(strstr(rf_errmsg(), "cudaHostRegister") != NULL, "%s", rf_errmsg());
	rf_pipeline *p = make(2, 1, 4096);
	uint64_t rng = 9;
	blockset pinned, pageable;
	make_blocks_sized(&pinned, 6, 4096, SRC_PINNED, &rng, 0);
	make_blocks_sized(&pageable, 6, 4096, SRC_PAGEABLE, &rng, 4000);
	check c;
	cr_assert_eq(run_checked(p, &pinned, &c), RF_OK, "%s", rf_errmsg());
	cr_assert_eq(c.bad, 0);
	for (int i = 0; i < 2; i++) {
		cr_assert_eq(run_checked(p, &pageable, &c), RF_ENOMEM, "%s", rf_errmsg());
		cr_assert(strstr(rf_errmsg(), "pinned host ring") != NULL && strstr(rf_errmsg(), "pageable") != NULL,
			  "%s", rf_errmsg());
		cr_assert_eq(sim_pending(), 0);
	}
	cr_assert_eq(run_checked(p, &pinned, &c), RF_OK, "%s", rf_errmsg());
	cr_assert_eq(c.bad, 0);
	rf_pipeline_destroy(p);
	free_blocks(&pinned, SRC_PINNED);
	free_blocks(&pageable, SRC_PAGEABLE);
	int s, e, d, r;
	sim_counts(&s, &e, &d, &r);
	cr_assert_eq(s + e + d, 0, "left %d streams, %d events, %d device allocations", s, e, d);
	leak_check();
}

Test(cuda_staging, register_api_arguments)
{
	sim_use(1, 0);
	cr_assert_eq(rf__cuda_host_register(NULL, 5), RF_EINVAL);
	char buf[64];
	cr_assert_eq(rf__cuda_host_register(buf, 0), RF_EINVAL);
	cr_assert_eq(rf__cuda_host_register(buf, sizeof buf), RF_OK);
	cr_assert(sim_is_pinned(buf, sizeof buf));
	cr_assert_eq(rf__cuda_host_register(buf, sizeof buf), RF_EBACKEND);
	cr_assert_eq(rf__cuda_host_unregister(buf), RF_OK);
	cr_assert_eq(rf__cuda_host_unregister(buf), RF_EINVAL);
	sim_cfg()->count_error = 100;
	cr_assert_eq(rf__cuda_host_register(buf, sizeof buf), RF_ENODEV);
	leak_check();
}
