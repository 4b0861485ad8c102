/* tests/test_cuda_files.c — file sources (<ringfetch/file.h>) on cuda, against the simulated CUDA: a
 * STAGE of a file's range reads the file into its pinned slot (the aligned window; the H2D starts where
 * the bytes landed) on the host lane, a keyed hint's read is its lane's and an acquire's the caller's.
 * Checked where a kernel would read them (a host function in stream order): every block's bytes, with
 * random device schedules — so the read lands before its H2D, and a pinned slot is read again only after
 * the H2D that read it ran — runs mixing files with pinned and pageable memory, many blocks through few
 * pinned slots, no H2D ever reading the file's mapping, a file that shrinks (RF_EIO naming the path,
 * the pipeline whole afterwards), keyed use of file ranges (a lane's hints' reads in flight together,
 * reads in flight at destroy), the staging lanes' readers in describe. */
#define _GNU_SOURCE /* usleep, truncate */
#include <criterion/criterion.h>

#include "cuda_check.h"
#include "ringfetch.h"
#include "graph/graph_int.h"
#include "runtime/backend.h"

#include <stdatomic.h>
#include <unistd.h>

#define FSIZE (4u << 20)

static char g_path[64];
static unsigned char *g_ref; /* the file's bytes, as written */

static void make_file(void)
{
	snprintf(g_path, sizeof g_path, "rf_cuda_files_XXXXXX");
	int fd = mkstemp(g_path);
	cr_assert(fd >= 0);
	g_ref = malloc(FSIZE);
	cr_assert_not_null(g_ref);
	fill_pattern(g_ref, FSIZE, 77, 5);
	cr_assert_eq(write(fd, g_ref, FSIZE), (ssize_t)FSIZE);
	close(fd);
}

static void drop_file(void)
{
	unlink(g_path);
	free(g_ref);
}

TestSuite(cuda_files, .init = make_file, .fini = drop_file);

static rf_pipeline *make(unsigned depth, size_t slot_bytes)
{
	rf_pipeline_params pp = {0};
	pp.depth = depth;
	pp.slot_bytes = slot_bytes;
	pp.backend = "cuda";
	pp.memory = RF_MEMORY_DEVICE;
	rf_pipeline *p = NULL;
	cr_assert_eq(rf_pipeline_create(&pp, &p), RF_OK, "%s", rf_errmsg());
	return p;
}

/* n blocks: file ranges at odd and aligned offsets, mixed (kind 1) with pinned and pageable memory. */
static void file_blocks(blockset *bs, size_t n, size_t slot, const unsigned char *d, int mixed, uint64_t *rng)
{
	bs_alloc(bs, n, rng_next(rng));
	for (size_t i = 0; i < n; i++) {
		uint64_t r = rng_next(rng);
		size_t len = 1 + (size_t)(r >> 8) % slot, off = (size_t)(r >> 32) % (FSIZE - slot);
		off = r % 3 == 0 ? off & ~(size_t)4095 : off;
		int kind = mixed ? (int)(r % 5) : 0; /* 0, 1, 2: file; 3: pinned; 4: pageable */
		bs->sizes[i] = len;
		if (kind < 3) {
			bs->srcs[i] = d + off;
			continue;
		}
		bs->bufs[i] = kind == 3 ? sim_host_alloc(len) : malloc(len);
		memcpy(bs->bufs[i], g_ref + off, len);
		bs->srcs[i] = bs->bufs[i];
	}
}

static void free_file_blocks(blockset *bs)
{
	for (size_t i = 0; i < bs->n; i++)
		if (bs->bufs[i] != NULL && sim_is_pinned(bs->bufs[i], 1))
			sim_host_free(bs->bufs[i]);
		else
			free(bs->bufs[i]);
	free(bs->srcs);
	free(bs->sizes);
	free(bs->bufs);
}

/* No H2D read the file's mapping: the simulator names a source it does not know "pageable". */
static int h2d_from_pageable(void)
{
	size_t n;
	const char *const *l = sim_log(&n);
	int k = 0;
	for (size_t i = 0; i < n; i++)
		k += strncmp(l[i], "memcpy", 6) == 0 && strstr(l[i], "<- pageable") != NULL;
	return k;
}

Test(cuda_files, runs_read_files_into_the_pinned_ring, .timeout = 120)
{
	rf_file *f;
	cr_assert_eq(rf_file_open(g_path, 0, &f), RF_OK, "%s", rf_errmsg());
	const unsigned char *d = rf_file_data(f);
	uint64_t rng = 3;
	for (int round = 0; round < 12; round++) {
		sim_use(rng_next(&rng) | 1, (double)(round % 4) / 4.0);
		rf__test_hooks.cuda_copy_threads = 1 + (unsigned)(round % 3);
		size_t slot = round % 2 ? 100000 : 4096;
		rf_pipeline *p = make(2 + (unsigned)(round % 3), slot);
		blockset bs;
		file_blocks(&bs, 30, slot, d, round % 3 == 2, &rng);
		sim_log_clear();
		check c;
		cr_assert_eq(run_checked(p, &bs, &c), RF_OK, "round %d: %s", round, rf_errmsg());
		cr_assert_eq(c.checked, bs.n);
		cr_assert_eq(c.bad, 0, "round %d: block %zu", round, c.first_bad);
		cr_assert_eq(sim_pending(), 0);
		if (round % 3 != 2)
			cr_assert_eq(h2d_from_pageable(), 0, "an H2D read the file's mapping");
		rf_stats st;
		cr_assert_eq(rf_pipeline_stats(p, &st), RF_OK);
		cr_assert_gt(st.file_bytes, 0);
		cr_assert(strstr(rf_pipeline_describe(p), "file sources read into it") != NULL, "%s", rf_pipeline_describe(p));
		rf_pipeline_destroy(p);
		free_file_blocks(&bs);
	}
	rf__test_hooks.cuda_copy_threads = 0;
	cr_assert_eq(rf_file_close(f), RF_OK, "%s", rf_errmsg());
	leak_check();
}

/* A file's block is staged by a read left in flight: its stage is still one slice of the run's trace,
 * from the read's start to its landing, and the hazard oracle checks it against the H2D behind it. */
Test(cuda_files, a_staged_file_run_traces_every_stage, .timeout = 120)
{
	rf_file *f;
	cr_assert_eq(rf_file_open(g_path, 0, &f), RF_OK, "%s", rf_errmsg());
	const unsigned char *d = rf_file_data(f);
	uint64_t rng = 11;
	sim_use(7, 0.5);
	char path[64];
	snprintf(path, sizeof path, "rf-cuda-trace-%d.json", (int)getpid());
	unlink(path);
	rf_pipeline *p = make(3, 8192);
	cr_assert_eq(rf_pipeline_trace(p, path), RF_OK, "%s", rf_errmsg());
	blockset bs;
	file_blocks(&bs, 24, 8192, d, 0, &rng);
	check c;
	cr_assert_eq(run_checked(p, &bs, &c), RF_OK, "%s", rf_errmsg());
	cr_assert_eq(c.bad, 0, "block %zu", c.first_bad);
	cr_assert_eq(rf_pipeline_trace(p, NULL), RF_OK, "%s", rf_errmsg());
	cr_assert_eq(count_in_file(path, "\"name\":\"stage b"), (size_t)bs.n, "%s", path);
	cr_assert_eq(count_in_file(path, "\"name\":\"copy b"), (size_t)bs.n, "%s", path);
	rf_pipeline_destroy(p);
	free_file_blocks(&bs);
	unlink(path);
	cr_assert_eq(rf_file_close(f), RF_OK, "%s", rf_errmsg());
	leak_check();
}

/* ---- a staging lane keeps a read in flight per pinned slot ------------------------------------------ */

static atomic_uint g_most; /* the most copies a flight had in flight at once */

static void most_in_flight(unsigned n)
{
	unsigned m = atomic_load(&g_most);
	while (n > m && !atomic_compare_exchange_weak(&g_most, &m, n))
		;
}

static unsigned pinned_slots(rf_pipeline *p)
{
	const char *d = strstr(rf_pipeline_describe(p), "pinned ring of ");
	cr_assert_not_null(d, "%s", rf_pipeline_describe(p));
	return (unsigned)strtoul(d + strlen("pinned ring of "), NULL, 10);
}

static rf_pipeline *make_one_queue(unsigned depth, size_t slot_bytes)
{
	rf_pipeline_params pp = {0};
	pp.depth = depth;
	pp.slot_bytes = slot_bytes;
	pp.backend = "cuda";
	pp.memory = RF_MEMORY_DEVICE;
	pp.copy_queues = 1;
	rf_pipeline *p = NULL;
	cr_assert_eq(rf_pipeline_create(&pp, &p), RF_OK, "%s", rf_errmsg());
	return p;
}

/* A staged file run on one staging lane: the lane starts the read of each staging slot and walks on, so
 * that every pinned slot holds a read in flight (a slot is written again only after the H2D that read
 * it, which waits for its read: no more can be). The lane reaps only while it waits, so the most in
 * flight is exact, not a matter of how fast the disk is. Every block's bytes are checked where a kernel
 * reads them; a file that shrank under the reads in flight fails the run with RF_EIO, nothing wrong seen. */
Test(cuda_files, a_staging_lane_keeps_a_read_in_flight_per_pinned_slot, .timeout = 120)
{
	rf_file *f;
	cr_assert_eq(rf_file_open(g_path, 0, &f), RF_OK, "%s", rf_errmsg());
	const unsigned char *d = rf_file_data(f);
	rf__test_hooks.flight_started = most_in_flight;
	uint64_t rng = 8;
	for (unsigned threads = 1; threads <= 4; threads++) {
		sim_use(rng_next(&rng) | 1, (double)(threads % 3) / 3.0);
		rf__test_hooks.cuda_copy_threads = threads;
		rf_pipeline *p = make_one_queue(1 + threads, 16384);
		unsigned pins = pinned_slots(p);
		cr_assert_gt(pins, 2u);
		blockset bs;
		file_blocks(&bs, 10 * pins, 16384, d, 0, &rng);
		atomic_store(&g_most, 0);
		check c;
		cr_assert_eq(run_checked(p, &bs, &c), RF_OK, "%u threads: %s", threads, rf_errmsg());
		cr_assert_eq(c.checked, bs.n);
		cr_assert_eq(c.bad, 0, "%u threads: block %zu", threads, c.first_bad);
		cr_assert_eq(sim_pending(), 0);
		cr_assert_eq(atomic_load(&g_most), pins, "%u threads: %u reads in flight at most, %u pinned slots", threads,
			     atomic_load(&g_most), pins);
		rf_pipeline_destroy(p);
		free_file_blocks(&bs);
	}
	/* A shrunk file: reads past its new end fail while others are in flight. */
	char path[] = "rf_cuda_files_shrink_XXXXXX";
	int fd = mkstemp(path);
	cr_assert(fd >= 0);
	cr_assert_eq(write(fd, g_ref, FSIZE), (ssize_t)FSIZE);
	close(fd);
	rf_file *g;
	cr_assert_eq(rf_file_open(path, 0, &g), RF_OK, "%s", rf_errmsg());
	cr_assert_eq(truncate(path, FSIZE / 2), 0);
	rf__test_hooks.cuda_copy_threads = 3;
	sim_use(3, 0.5);
	rf_pipeline *p = make_one_queue(3, 65536);
	enum { N = 48 };
	blockset bs;
	bs_alloc(&bs, N, 1);
	for (size_t i = 0; i < N; i++) {
		bs.srcs[i] = (const unsigned char *)rf_file_data(g) + i * (FSIZE / N) + i; /* unaligned; from block 24 on past the end */
		bs.sizes[i] = 65536 - i;
	}
	atomic_store(&g_most, 0);
	check c;
	cr_assert_eq(run_checked(p, &bs, &c), RF_EIO, "%s", rf_errmsg());
	cr_assert(strstr(rf_errmsg(), path) != NULL, "names the path: %s", rf_errmsg());
	cr_assert_eq(c.bad, 0, "block %zu", c.first_bad);
	cr_assert_leq(c.checked, (size_t)N / 2);
	cr_assert_gt(atomic_load(&g_most), 1u);
	cr_assert_eq(sim_pending(), 0);
	bs.n = N / 2; /* the pipeline runs again */
	cr_assert_eq(run_checked(p, &bs, &c), RF_OK, "%s", rf_errmsg());
	cr_assert_eq(c.checked, N / 2);
	cr_assert_eq(c.bad, 0, "block %zu", c.first_bad);
	rf_pipeline_destroy(p);
	free(bs.srcs);
	free(bs.sizes);
	free(bs.bufs);
	rf__test_hooks.flight_started = NULL;
	rf__test_hooks.cuda_copy_threads = 0;
	cr_assert_eq(rf_file_close(g), RF_OK, "%s", rf_errmsg());
	cr_assert_eq(rf_file_close(f), RF_OK, "%s", rf_errmsg());
	unlink(path);
	leak_check();
}

/* A range that overlaps a file's mapping without lying inside the file (the last page's tail, from below
 * into it) is RF_EINVAL before any work: runs and keyed sources. */
Test(cuda_files, ranges_overlapping_a_mapping_outside_the_file_are_einval, .timeout = 120)
{
	enum { TSZ = 10000 };
	char path[] = "rf_cuda_files_tail_XXXXXX";
	int fd = mkstemp(path);
	cr_assert(fd >= 0);
	cr_assert_eq(write(fd, g_ref, TSZ), (ssize_t)TSZ);
	close(fd);
	rf_file *f;
	cr_assert_eq(rf_file_open(path, 0, &f), RF_OK, "%s", rf_errmsg());
	const unsigned char *d = rf_file_data(f);
	sim_use(5, 0.5);
	rf_pipeline *p = make(2, 32768);
	const unsigned char *bad[] = {d + TSZ, d + TSZ + 100, d - 16, d - 16};
	const size_t bad_n[] = {1, 100, 32, TSZ + 16};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		blockset bs;
		bs_alloc(&bs, 2, 1);
		bs.srcs[0] = d, bs.sizes[0] = 100;
		bs.srcs[1] = bad[i], bs.sizes[1] = bad_n[i];
		check c;
		cr_assert_eq(run_checked(p, &bs, &c), RF_EINVAL, "range %zu", i);
		cr_assert(strstr(rf_errmsg(), "block 1") != NULL && strstr(rf_errmsg(), path) != NULL, "%s",
			  rf_errmsg());
		cr_assert_eq(c.checked, 0);
		free(bs.srcs);
		free(bs.sizes);
		free(bs.bufs);
		rf_block b;
		cr_assert_eq(rf_pipeline_acquire(p, 1, bad[i], bad_n[i], NULL, 0, &b), RF_EINVAL, "range %zu", i);
		cr_assert_eq(rf_pipeline_prefetch(p, 1, bad[i], bad_n[i], 0), RF_EINVAL, "range %zu", i);
	}
	cr_assert_eq(sim_api.stream_synchronize(NULL), 0);
	rf_pipeline_destroy(p);
	cr_assert_eq(rf_file_close(f), RF_OK, "%s", rf_errmsg());
	unlink(path);
	leak_check();
}

/* Many file blocks through a 3-slot pinned ring, the device running only when waited for: each pinned
 * slot is read into again only after the H2D that read it ran. */
Test(cuda_files, pinned_slots_are_reused_only_after_their_h2d, .timeout = 120)
{
	rf_file *f;
	cr_assert_eq(rf_file_open(g_path, 0, &f), RF_OK, "%s", rf_errmsg());
	sim_use(9, 0);
	rf__test_hooks.cuda_copy_threads = 1;
	rf_pipeline *p = make(4, 8192);
	uint64_t rng = 4;
	blockset bs;
	file_blocks(&bs, 200, 8192, rf_file_data(f), 0, &rng);
	check c;
	cr_assert_eq(run_checked(p, &bs, &c), RF_OK, "%s", rf_errmsg());
	cr_assert_eq(c.checked, 200);
	cr_assert_eq(c.bad, 0, "block %zu", c.first_bad);
	rf_pipeline_destroy(p);
	free_file_blocks(&bs);
	rf__test_hooks.cuda_copy_threads = 0;
	cr_assert_eq(rf_file_close(f), RF_OK, "%s", rf_errmsg());
	leak_check();
}

/* The file shrinks: the run fails with RF_EIO naming the path once drained, no probe saw a wrong block,
 * the pipeline runs again; keyed use: an acquire past the end is RF_EIO with the key absent, a hint
 * leaves its key absent (its lane's read failed) and counts as wasted, and keys still there work. */
Test(cuda_files, a_shrunk_file_is_eio_and_the_pipeline_stays_usable, .timeout = 120)
{
	rf_file *f;
	cr_assert_eq(rf_file_open(g_path, 0, &f), RF_OK, "%s", rf_errmsg());
	const unsigned char *d = rf_file_data(f);
	cr_assert_eq(truncate(g_path, FSIZE / 2), 0);
	sim_use(2, 0.3);
	enum { N = 8, SZ = 1 << 19 };
	rf_pipeline *p = make(2, SZ);
	blockset bs;
	bs_alloc(&bs, N, 1);
	for (size_t i = 0; i < N; i++) {
		bs.srcs[i] = d + i * SZ;
		bs.sizes[i] = SZ;
	}
	check c;
	cr_assert_eq(run_checked(p, &bs, &c), RF_EIO, "%s", rf_errmsg());
	cr_assert(strstr(rf_errmsg(), g_path) != NULL, "names the path: %s", rf_errmsg());
	cr_assert_eq(c.bad, 0, "block %zu", c.first_bad);
	cr_assert_eq(sim_pending(), 0);
	bs.n = N / 2;
	cr_assert_eq(run_checked(p, &bs, &c), RF_OK, "%s", rf_errmsg());
	cr_assert_eq(c.checked, N / 2);
	cr_assert_eq(c.bad, 0);
	rf_block b;
	cr_assert_eq(rf_pipeline_acquire(p, 7, d + 7 * SZ, SZ, NULL, 0, &b), RF_EIO, "%s", rf_errmsg());
	cr_assert(strncmp(rf_errmsg(), "rf_pipeline_acquire: ", 21) == 0 && strstr(rf_errmsg(), g_path) != NULL,
		  "%s", rf_errmsg());
	rf_key_state st = RF_KEY_READY;
	cr_assert_eq(rf_pipeline_lookup(p, 7, &st, NULL), RF_OK);
	cr_assert_eq(st, RF_KEY_ABSENT);
	rf_keyed_stats k0, k1;
	rf_pipeline_keyed_stats(p, &k0);
	cr_assert_eq(rf_pipeline_prefetch(p, 6, d + 6 * SZ, SZ, 0), RF_OK, "%s", rf_errmsg());
	for (;;) { /* the hint's read fails on its lane, however long the lane takes */
		cr_assert_eq(rf_pipeline_lookup(p, 6, &st, NULL), RF_OK);
		if (st != RF_KEY_COPYING)
			break;
		usleep(1000);
	}
	cr_assert_eq(st, RF_KEY_ABSENT, "a failed hint leaves its key absent");
	cr_assert_eq(rf_pipeline_acquire(p, 6, d + 6 * SZ, SZ, NULL, 0, &b), RF_EIO);
	rf_pipeline_keyed_stats(p, &k1);
	cr_assert_eq(k1.wasted, k0.wasted + 1, "the failed hint counts as wasted");
	g_nprobes = 0;
	c.bs = &bs;
	c.bad = c.checked = 0;
	cr_assert_eq(rf_pipeline_acquire(p, 1, d + SZ, SZ, NULL, 0, &b), RF_OK, "%s", rf_errmsg());
	g_probes[0] = (probe){&c, b};
	cr_assert_eq(sim_launch(NULL, probe_fn, &g_probes[0]), 0);
	cr_assert_eq(rf_pipeline_release(p, &b), RF_OK);
	cr_assert_eq(sim_api.stream_synchronize(NULL), 0);
	cr_assert_eq(c.checked, 1);
	cr_assert_eq(c.bad, 0);
	rf_pipeline_destroy(p);
	free(bs.srcs);
	free(bs.sizes);
	free(bs.bufs);
	cr_assert_eq(rf_file_close(f), RF_OK, "%s", rf_errmsg());
	leak_check();
}

/* Keyed serving from a file: hints read by the lanes, acquires by the caller, unaligned ranges; every
 * acquired block checked on its stream where a kernel would read it. */
Test(cuda_files, keyed_hints_and_acquires, .timeout = 120)
{
	rf_file *f;
	cr_assert_eq(rf_file_open(g_path, 0, &f), RF_OK, "%s", rf_errmsg());
	const unsigned char *d = rf_file_data(f);
	enum { K = 24, SZ = 50000 };
	sim_use(6, 0.4);
	rf_pipeline *p = make(6, SZ);
	blockset bs;
	bs_alloc(&bs, K, 1);
	for (size_t k = 0; k < K; k++) {
		bs.srcs[k] = d + k * (SZ + 8);
		bs.sizes[k] = SZ;
	}
	check c;
	memset(&c, 0, sizeof c);
	c.bs = &bs;
	g_nprobes = 0;
	for (int step = 0; step < 20; step++) {
		for (uint64_t k = 0; k < 4; k++) {
			uint64_t key = (uint64_t)(step * 5 + k * 3) % K;
			(void)rf_pipeline_prefetch(p, key, bs.srcs[key], SZ, 0);
		}
		for (uint64_t k = 0; k < 3; k++) {
			uint64_t key = (uint64_t)(step * 5 + k * 3 + 1) % K;
			rf_block b;
			cr_assert_eq(rf_pipeline_acquire(p, key, bs.srcs[key], SZ, NULL, 0, &b), RF_OK, "%s", rf_errmsg());
			g_probes[g_nprobes] = (probe){&c, b};
			cr_assert_eq(sim_launch(NULL, probe_fn, &g_probes[g_nprobes++]), 0);
			cr_assert_eq(rf_pipeline_release(p, &b), RF_OK);
		}
	}
	cr_assert_eq(sim_api.stream_synchronize(NULL), 0);
	cr_assert_eq(c.checked, 60);
	cr_assert_eq(c.bad, 0, "key %zu", c.first_bad);
	for (uint64_t k = 0; k < K; k++) /* evict returns once no copy reads the key's source */
		cr_assert_eq(rf_pipeline_evict(p, k), RF_OK);
	cr_assert_eq(rf_file_close(f), RF_OK, "%s", rf_errmsg());
	rf_pipeline_destroy(p);
	free(bs.srcs);
	free(bs.sizes);
	free(bs.bufs);
	leak_check();
}

static atomic_long g_classified;

static void count_classify(const void *src, size_t n)
{
	(void)src, (void)n;
	atomic_fetch_add(&g_classified, 1);
}

/* A run's sources are resolved by the engine, once per block, and the staging lanes and copies read
 * what it resolved (before: four lookups of each file block, the STAGE's the fourth); a keyed call's
 * once, by the keyed cache (before: twice for a miss). */
Test(cuda_files, each_source_is_resolved_once, .timeout = 120)
{
	rf_file *f;
	cr_assert_eq(rf_file_open(g_path, 0, &f), RF_OK, "%s", rf_errmsg());
	const unsigned char *d = rf_file_data(f);
	enum { K = 12, SZ = 20000 };
	uint64_t rng = 11;
	sim_use(8, 0.5);
	rf_pipeline *p = make(3, SZ);
	rf__test_hooks.classify = count_classify;
	for (int mixed = 0; mixed < 2; mixed++) {
		blockset bs;
		file_blocks(&bs, 30, SZ, d, mixed, &rng);
		check c;
		atomic_store(&g_classified, 0);
		cr_assert_eq(run_checked(p, &bs, &c), RF_OK, "%s", rf_errmsg());
		cr_assert_eq(c.bad, 0, "block %zu", c.first_bad);
		cr_assert_eq(atomic_load(&g_classified), (long)bs.n, "%ld lookups for %zu blocks",
			     atomic_load(&g_classified), bs.n);
		free_file_blocks(&bs);
	}
	blockset bs;
	bs_alloc(&bs, K, 1);
	for (size_t k = 0; k < K; k++)
		bs.srcs[k] = d + k * SZ + 3, bs.sizes[k] = SZ;
	check c;
	memset(&c, 0, sizeof c);
	c.bs = &bs;
	g_nprobes = 0;
	atomic_store(&g_classified, 0);
	for (uint64_t k = 0; k < K / 2; k++)
		cr_assert_eq(rf_pipeline_prefetch(p, k, bs.srcs[k], SZ, 0), RF_OK, "%s", rf_errmsg());
	for (uint64_t k = 0; k < K; k++) { /* hits, then misses */
		rf_block b;
		cr_assert_eq(rf_pipeline_acquire(p, k, bs.srcs[k], SZ, NULL, 0, &b), RF_OK, "%s", rf_errmsg());
		g_probes[g_nprobes] = (probe){&c, b};
		cr_assert_eq(sim_launch(NULL, probe_fn, &g_probes[g_nprobes++]), 0);
		cr_assert_eq(rf_pipeline_release(p, &b), RF_OK);
	}
	cr_assert_eq(sim_api.stream_synchronize(NULL), 0);
	cr_assert_eq(c.checked, K);
	cr_assert_eq(c.bad, 0, "key %zu", c.first_bad);
	cr_assert_eq(atomic_load(&g_classified), K / 2 + K, "%ld lookups for %d keyed calls",
		     atomic_load(&g_classified), K / 2 + K);
	rf__test_hooks.classify = NULL;
	rf_pipeline_destroy(p);
	free(bs.srcs);
	free(bs.sizes);
	free(bs.bufs);
	cr_assert_eq(rf_file_close(f), RF_OK, "%s", rf_errmsg());
	leak_check();
}

/* ---- keyed hints held back (not yet on a staging lane) keep their file open --------------------------- */

static atomic_int g_gate; /* 0: the staging lane waits before it claims each hint's stage */

static void gate_hook(int started)
{
	while (!started && !atomic_load(&g_gate)) /* until the test opens it, however busy the machine */
		usleep(500);
}

/* The staging lane is gated with pageable memory hints queued on it: hints of the file's ranges are held
 * back, no stage yet holding the file. Closing it is RF_EBUSY (nothing changes) until the hints leave:
 * evicted, acquired once the lane runs, or the pipeline destroyed. */
Test(cuda_files, held_back_hints_keep_their_file_open, .timeout = 120)
{
	enum { FILL = 8, N = 4, SZ = 8192 };
	unsigned char *mem[FILL];
	for (int i = 0; i < FILL; i++) {
		mem[i] = malloc(SZ);
		cr_assert_not_null(mem[i]);
		memset(mem[i], i, SZ);
	}
	for (int how = 0; how < 3; how++) {
		rf_file *f;
		cr_assert_eq(rf_file_open(g_path, 0, &f), RF_OK, "%s", rf_errmsg());
		const unsigned char *d = rf_file_data(f);
		sim_use(11 + (uint64_t)how, 0.5);
		atomic_store(&g_gate, 0);
		rf__test_hooks.keyed_before_copy = gate_hook;
		rf_pipeline_params pp = {0};
		pp.depth = 16;
		pp.slot_bytes = SZ;
		pp.backend = "cuda";
		pp.memory = RF_MEMORY_DEVICE;
		pp.copy_queues = 1;
		rf_pipeline *p = NULL;
		cr_assert_eq(rf_pipeline_create(&pp, &p), RF_OK, "%s", rf_errmsg());
		for (unsigned k = 0; k < FILL; k++)
			cr_assert_eq(rf_pipeline_prefetch(p, k, mem[k], SZ, 0), RF_OK, "%s", rf_errmsg());
		for (unsigned k = 0; k < N; k++)
			cr_assert_eq(rf_pipeline_prefetch(p, 100 + k, d + k * SZ, SZ, 0), RF_OK, "%s", rf_errmsg());
		cr_assert_eq(rf_file_close(f), RF_EBUSY, "case %d: closed with hints of it held back", how);
		cr_assert(strstr(rf_errmsg(), "held back") != NULL, "%s", rf_errmsg());
		if (how == 0) {
			for (unsigned k = 0; k < N; k++)
				cr_assert_eq(rf_pipeline_evict(p, 100 + k), RF_OK, "%s", rf_errmsg());
		} else if (how == 1) {
			atomic_store(&g_gate, 1);
			for (unsigned k = 0; k < N; k++) {
				rf_block b;
				cr_assert_eq(rf_pipeline_acquire(p, 100 + k, d + k * SZ, SZ, NULL, 0, &b), RF_OK, "%s",
					     rf_errmsg());
				cr_assert_eq(rf_pipeline_release(p, &b), RF_OK, "%s", rf_errmsg());
			}
		} else {
			atomic_store(&g_gate, 1);
			rf_pipeline_destroy(p);
			p = NULL;
		}
		cr_assert_eq(rf_file_close(f), RF_OK, "case %d: %s", how, rf_errmsg());
		atomic_store(&g_gate, 1);
		if (p != NULL) {
			cr_assert_eq(sim_api.stream_synchronize(NULL), 0);
			rf_pipeline_destroy(p);
		}
		rf__test_hooks.keyed_before_copy = NULL;
	}
	for (int i = 0; i < FILL; i++)
		free(mem[i]);
	leak_check();
}

/* rf_exec on cuda: a graph's STAGE nodes take file sources (the host lane reads the file into the
 * staging buffer, the copy moves it on to the device); a COPY that reads a file itself is RF_ENOTSUP. */
Test(cuda_files, exec_stage_nodes_read_files, .timeout = 120)
{
	rf_file *f;
	cr_assert_eq(rf_file_open(g_path, 0, &f), RF_OK, "%s", rf_errmsg());
	const unsigned char *d = rf_file_data(f);
	sim_use(21, 0.3);
	uint64_t rng = 5;
	rf_exec_params ep = {.backend = "cuda", .slot_bytes = 8192};
	for (unsigned pins = 0; pins <= 3; pins += 3) {
		rf_graph *g;
		cr_assert_eq(rf__graph_ring(20, 4, 1, pins, &g), RF_OK);
		rf_exec *e;
		cr_assert_eq(rf_exec_create(g, &ep, &e), RF_OK, "%s", rf_errmsg());
		rf_graph_destroy(g);
		blockset bs;
		file_blocks(&bs, 20, 8192, d, 0, &rng);
		check c = {.bs = &bs, .fail_at = -1, .cancel_at = -1};
		g_nprobes = 0;
		int rc = rf_exec_run(e, bs.n, bs.srcs, bs.sizes, compute, &c);
		if (pins == 0) {
			cr_assert_eq(rc, RF_ENOTSUP, "%s", rf_errmsg());
			cr_assert(strstr(rf_errmsg(), "STAGE") != NULL, "%s", rf_errmsg());
		} else {
			cr_assert_eq(rc, RF_OK, "%s", rf_errmsg());
			cr_assert_eq(c.checked, bs.n);
			cr_assert_eq(c.bad, 0, "block %zu", c.first_bad);
		}
		rf_exec_destroy(e);
		free_file_blocks(&bs);
	}
	cr_assert_eq(rf_file_close(f), RF_OK, "%s", rf_errmsg());
	leak_check();
}

/* ---- keyed hints' reads in flight together, on the staging lane --------------------------------------- */

static atomic_uint g_claimed; /* hints whose stage the lane has started (they can no longer be withdrawn) */

static void gate_count_hook(int started)
{
	gate_hook(started);
	if (started)
		atomic_fetch_add(&g_claimed, 1);
}

/* A new file (path: a mkstemp template) of the suite's bytes, opened, then cut to half: a read of a range
 * past FSIZE / 2 fails. Its mapping. */
static const unsigned char *open_shrunk(char *path, rf_file **f)
{
	int fd = mkstemp(path);
	cr_assert(fd >= 0);
	cr_assert_eq(write(fd, g_ref, FSIZE), (ssize_t)FSIZE);
	close(fd);
	cr_assert_eq(rf_file_open(path, 0, f), RF_OK, "%s", rf_errmsg());
	cr_assert_eq(truncate(path, FSIZE / 2), 0);
	return rf_file_data(*f);
}

/* File hints queued together on one staging lane have their reads in flight together: the lane starts
 * each read and goes on to the next hint, and enqueues the H2Ds once the reads landed, in order. The gate
 * holds the lane until every hint is queued, and the lane reaps reads only between items, so the count
 * is exact, not a matter of the disk's speed. Every hinted key's bytes are checked where a kernel reads
 * them; a hint whose read fails (its range lies past the end of a file that shrank) comes back through
 * its ticket: its key is absent, it counts as wasted, and its acquire (the caller's read) is RF_EIO. */
Test(cuda_files, keyed_hints_keep_their_reads_in_flight_together, .timeout = 60)
{
	enum { SZ = 20000 };
	char path[] = "rf_cuda_files_hints_XXXXXX";
	rf_file *f;
	const unsigned char *d = open_shrunk(path, &f);
	rf__test_hooks.cuda_copy_threads = 6; /* 8 pinned slots: 7 for hints (the keyed cache queues 8 per lane) */
	for (int round = 0; round < 4; round++) {
		sim_use(31 + (uint64_t)round, (double)round / 4.0);
		rf_pipeline *p = make_one_queue(24, SZ);
		unsigned nh = pinned_slots(p) - 1; /* the lane's pinned slots but the acquires' own */
		cr_assert_geq(nh, 4u, "%s", rf_pipeline_describe(p));
		atomic_store(&g_gate, 0);
		atomic_store(&g_claimed, 0);
		rf__test_hooks.keyed_before_copy = gate_count_hook;
		rf__test_hooks.flight_started = most_in_flight;
		atomic_store(&g_most, 0);
		blockset bs;
		bs_alloc(&bs, nh, 1);
		for (unsigned k = 0; k < nh; k++) { /* unaligned ranges; the last one past the new end */
			size_t off = k + 1 < nh ? k * (SZ + 4099) + 7 * (unsigned)round : FSIZE / 2 + 4096;
			bs.srcs[k] = d + off, bs.sizes[k] = SZ;
			cr_assert_eq(rf_pipeline_prefetch(p, k, bs.srcs[k], SZ, 0), RF_OK, "%s", rf_errmsg());
		}
		atomic_store(&g_gate, 1);
		while (atomic_load(&g_claimed) < nh) /* an acquire would overtake a hint not yet started */
			usleep(200);
		rf_keyed_stats k0, k1;
		rf_pipeline_keyed_stats(p, &k0);
		check c;
		memset(&c, 0, sizeof c);
		c.bs = &bs;
		g_nprobes = 0;
		for (unsigned k = 0; k + 1 < nh; k++) {
			rf_block b;
			cr_assert_eq(rf_pipeline_acquire(p, k, bs.srcs[k], SZ, NULL, 0, &b), RF_OK, "%s", rf_errmsg());
			g_probes[g_nprobes] = (probe){&c, b};
			cr_assert_eq(sim_launch(NULL, probe_fn, &g_probes[g_nprobes++]), 0);
			cr_assert_eq(rf_pipeline_release(p, &b), RF_OK);
		}
		rf_block b;
		cr_assert_eq(rf_pipeline_acquire(p, nh - 1, bs.srcs[nh - 1], SZ, NULL, 0, &b), RF_EIO, "%s", rf_errmsg());
		cr_assert(strstr(rf_errmsg(), path) != NULL, "names the path: %s", rf_errmsg());
		rf_pipeline_keyed_stats(p, &k1);
		cr_assert_eq(k1.hits, k0.hits + nh - 1, "every good hint was a hit: %llu of %u",
			     (unsigned long long)(k1.hits - k0.hits), nh - 1);
		cr_assert_eq(k1.wasted, k0.wasted + 1, "the failed hint counts as wasted");
		rf_key_state st = RF_KEY_READY;
		cr_assert_eq(rf_pipeline_lookup(p, nh - 1, &st, NULL), RF_OK);
		cr_assert_eq(st, RF_KEY_ABSENT);
		cr_assert_eq(sim_api.stream_synchronize(NULL), 0);
		cr_assert_eq(c.checked, nh - 1);
		cr_assert_eq(c.bad, 0, "round %d: key %zu", round, c.first_bad);
		cr_assert_eq(atomic_load(&g_most), nh, "round %d: %u reads in flight at most, %u hints queued", round,
			     atomic_load(&g_most), nh);
		rf__test_hooks.flight_started = NULL;
		rf__test_hooks.keyed_before_copy = NULL;
		rf_pipeline_destroy(p);
		free(bs.srcs);
		free(bs.sizes);
		free(bs.bufs);
	}
	rf__test_hooks.cuda_copy_threads = 0;
	cr_assert_eq(rf_file_close(f), RF_OK, "%s", rf_errmsg());
	unlink(path);
	leak_check();
}

/* A slot's bytes where a kernel on the acquiring stream reads them, against the key's bytes. */
typedef struct kprobe {
	const unsigned char *slot, *want;
	size_t n;
	int *bad;
} kprobe;

static kprobe g_kprobes[8192];

static void kprobe_fn(void *arg)
{
	kprobe *pr = arg;
	if (memcmp(pr->slot, pr->want, pr->n) != 0)
		(*pr->bad)++;
}

/* Random keyed serving where each key's bytes come from three sources of the same bytes: its file range,
 * a pageable copy and a pinned one; half of the keys' ranges lie past the end of a file that shrank, so
 * their hints fail on a lane while later hints and acquires of the same key name memory (hints bounded
 * or not, some withdrawn), runs of such blocks in between. A failed read never serves its slot: every
 * acquire that succeeds reads the key's bytes where a kernel would, and an acquire from a range past
 * the end is RF_EIO, unless the key is there already; a run's blocks hold theirs, a run with one past
 * the end is RF_EIO. */
Test(cuda_files, failed_hint_reads_never_serve_a_later_source, .timeout = 120)
{
	enum { NKEYS = 12, SZ = 24000 };
	char path[] = "rf_cuda_files_fail_XXXXXX";
	rf_file *f;
	const unsigned char *d = open_shrunk(path, &f);
	uint64_t seed = test_seed(), rng = seed;
	fprintf(stderr, "cuda_files: RF_TEST_SEED=%llu\n", (unsigned long long)seed);
	size_t off[NKEYS];
	unsigned char *pageable[NKEYS], *pinned[NKEYS];
	for (unsigned k = 0; k < NKEYS; k++) { /* odd keys past the end */
		off[k] = (k % 2 ? FSIZE / 2 + 4096 : 0) + k * (SZ + 4099) + (rng_next(&rng) % 2 ? 0 : 13);
		pageable[k] = malloc(SZ);
		pinned[k] = sim_host_alloc(SZ);
		cr_assert(pageable[k] != NULL && pinned[k] != NULL);
		memcpy(pageable[k], g_ref + off[k], SZ);
		memcpy(pinned[k], g_ref + off[k], SZ);
	}
	int bad = 0, eio = 0, served = 0;
	size_t np = 0;
	for (int round = 0; round < 12; round++) {
		sim_use(rng_next(&rng) | 1, (double)(rng_next(&rng) % 100) / 100.0);
		sim_cfg()->log = 0;
		unsigned depth = 2 + (unsigned)(rng_next(&rng) % 5);
		static const uint64_t bound[3] = {0, SZ, 3 * SZ}; /* hints unbounded or not */
		rf_pipeline_params pp = {0};
		pp.depth = depth, pp.slot_bytes = SZ, pp.backend = "cuda", pp.memory = RF_MEMORY_DEVICE;
		pp.hint_bytes = bound[rng_next(&rng) % 3];
		pp.copy_queues = depth >= 3 ? 1 + (unsigned)(rng_next(&rng) % 2) : 1; /* hints on one lane or two */
		rf_pipeline *p = NULL;
		cr_assert_eq(rf_pipeline_create(&pp, &p), RF_OK, "%s", rf_errmsg());
		void *streams[2] = {NULL, NULL};
		cr_assert_eq(sim_api.stream_create(&streams[1]), 0);
		rf_block held[8];
		unsigned nheld = 0;
		for (int step = 0; step < 200; step++) {
			unsigned key = (unsigned)(rng_next(&rng) % NKEYS), kind = (unsigned)(rng_next(&rng) % 3);
			unsigned op = (unsigned)(rng_next(&rng) % 10);
			const void *src = kind == 0 ? (const void *)(d + off[key]) : kind == 1 ? pageable[key] : pinned[key];
			if (op == 3) { /* the hint withdrawn: dropped if not started, else first to go */
				cr_assert_eq(rf_pipeline_unprefetch(p, key), RF_OK, "unprefetch: %s", rf_errmsg());
			} else if (op < 3) {
				int rc = rf_pipeline_prefetch(p, key, src, SZ, 0);
				cr_assert(rc == RF_OK || rc == RF_ENOSPC, "prefetch: %s", rf_errmsg());
			} else if (op < 7 && nheld + 1 < depth && nheld < 8) {
				void *s = streams[rng_next(&rng) % 2];
				int rc = rf_pipeline_acquire(p, key, src, SZ, s, 0, &held[nheld]);
				cr_assert(rc == RF_OK || rc == RF_ENOSPC || (rc == RF_EIO && kind == 0 && key % 2),
					  "acquire of key %u (source %u): %s", key, kind, rf_errmsg());
				eio += rc == RF_EIO;
				if (rc == RF_OK) {
					cr_assert_lt(np, sizeof g_kprobes / sizeof g_kprobes[0]);
					g_kprobes[np] = (kprobe){held[nheld].data, g_ref + off[key], SZ, &bad};
					cr_assert_eq(sim_launch(s, kprobe_fn, &g_kprobes[np++]), 0);
					held[nheld++].stream = s;
					served++;
				}
			} else if (op < 9 && nheld > 0) {
				unsigned i = (unsigned)(rng_next(&rng) % nheld);
				cr_assert_eq(rf_pipeline_release(p, &held[i]), RF_OK, "%s", rf_errmsg());
				held[i] = held[--nheld];
			} else if (nheld == 0 && op == 9 && step % 2) {
				cr_assert_eq(rf_pipeline_evict(p, key), RF_OK, "evict: %s", rf_errmsg());
			} else if (nheld == 0) { /* a run: blocks of even keys from any source, one odd maybe */
				const void *srcs[4], *want[4];
				size_t sizes[4] = {SZ, SZ, SZ, SZ};
				int past = 0;
				for (unsigned b = 0; b < 4; b++) {
					unsigned rk = (unsigned)(rng_next(&rng) % NKEYS) & ~1u, rs = (unsigned)(rng_next(&rng) % 3);
					if (b == 3 && rng_next(&rng) % 3 == 0)
						rk |= 1, rs = 0, past = 1;
					srcs[b] = rs == 0 ? (const void *)(d + off[rk]) : rs == 1 ? pageable[rk] : pinned[rk];
					want[b] = g_ref + off[rk];
				}
				blockset ws = {4, 0, want, sizes, NULL};
				check c;
				memset(&c, 0, sizeof c);
				c.bs = &ws, c.fail_at = c.cancel_at = -1, c.p = p;
				g_nprobes = 0;
				int rc = rf_pipeline_run(p, 4, srcs, sizes, compute, &c);
				cr_assert(rc == (past ? RF_EIO : RF_OK), "run%s: %s", past ? " with a block past the end" : "",
					  rf_errmsg());
				cr_assert_eq(sim_api.device_synchronize(), 0); /* the probes ran: c is ours again */
				cr_assert(past || c.checked == 4, "run: %zu of 4 blocks checked", c.checked);
				cr_assert_eq(c.bad, 0, "run: block %zu does not hold its bytes", c.first_bad);
			}
		}
		while (nheld > 0)
			cr_assert_eq(rf_pipeline_release(p, &held[--nheld]), RF_OK, "%s", rf_errmsg());
		rf_pipeline_destroy(p);
		cr_assert_eq(sim_api.stream_synchronize(NULL), 0);
		cr_assert_eq(sim_api.stream_synchronize(streams[1]), 0);
		cr_assert_eq(bad, 0, "round %d: %d of %d reads saw the wrong bytes", round, bad, served);
		cr_assert_eq(sim_api.stream_destroy(streams[1]), 0);
		np = 0;
	}
	cr_assert_gt(eio, 0, "no acquire read past the end");
	cr_assert_gt(served, 100);
	for (unsigned k = 0; k < NKEYS; k++) {
		free(pageable[k]);
		sim_host_free(pinned[k]);
	}
	cr_assert_eq(rf_file_close(f), RF_OK, "%s", rf_errmsg());
	unlink(path);
	leak_check();
}

/* Hints left in flight at destroy: the reads land, the file is let go, nothing leaks. */
Test(cuda_files, destroy_with_keyed_reads_in_flight, .timeout = 120)
{
	rf_file *f;
	cr_assert_eq(rf_file_open(g_path, 0, &f), RF_OK, "%s", rf_errmsg());
	const unsigned char *d = rf_file_data(f);
	rf__test_hooks.cuda_copy_threads = 4;
	for (int round = 0; round < 6; round++) {
		sim_use(41 + (uint64_t)round, (double)(round % 3) / 3.0);
		rf_pipeline *p = make_one_queue(12, 30000);
		for (unsigned k = 0; k < 12; k++)
			(void)rf_pipeline_prefetch(p, k, d + k * 30011, 30000, 0); /* RF_ENOSPC once the lane is full */
		rf_pipeline_destroy(p);
	}
	rf__test_hooks.cuda_copy_threads = 0;
	cr_assert_eq(rf_file_close(f), RF_OK, "no hint still holds the file: %s", rf_errmsg());
	leak_check();
}

/* The staging lanes' readers say how they read in describe, as the threads lanes' do: a staged file run
 * names the lane whose reader (the pinned ring registered with it) reads otherwise than the caller's. */
Test(cuda_files, describe_names_the_staging_lanes_reader, .timeout = 120)
{
	rf_file *f;
	cr_assert_eq(rf_file_open(g_path, 0, &f), RF_OK, "%s", rf_errmsg());
	sim_use(51, 0.5);
	rf_pipeline *p = make_one_queue(3, 16384);
	uint64_t rng = 12;
	blockset bs;
	file_blocks(&bs, 20, 16384, rf_file_data(f), 0, &rng);
	check c;
	cr_assert_eq(run_checked(p, &bs, &c), RF_OK, "%s", rf_errmsg());
	cr_assert_eq(c.bad, 0, "block %zu", c.first_bad);
	const char *desc = rf_pipeline_describe(p), *lane = strstr(desc, "; copy lane 0: ");
	cr_log_info("%s", desc);
	cr_assert_not_null(lane, "%s", desc);
	cr_assert(strncmp(lane, "; copy lane 0: io_uring", 23) == 0 || strncmp(lane, "; copy lane 0: pread", 20) == 0,
		  "%s", desc);
	cr_assert(strstr(lane, "slots registered") != NULL || strstr(lane, "slots not registered") != NULL, "%s", desc);
	rf_pipeline_destroy(p);
	free_file_blocks(&bs);
	cr_assert_eq(rf_file_close(f), RF_OK, "%s", rf_errmsg());
	leak_check();
}
