/* tests/test_files.c — the file-source contract (<ringfetch/file.h>) on a backend (RF_TEST_BACKEND),
 * against the shared library, oracle on: runs whose sources are file ranges (aligned, unaligned, mixed
 * with memory, several files), a file that shrinks (RF_EIO, the pipeline stays usable), keyed use from
 * files (hints, acquires, a failed hint counted wasted), close while copies may be in flight, the page
 * cache left cold by O_DIRECT reads, rf_graph_ring through rf_exec with reads in flight under the graph
 * oracle, and the bytes counted in rf_stats and said in describe (the rule for unaligned ranges once
 * the caller's or a copy lane's reader has decided it). */
#define _GNU_SOURCE /* mincore, usleep */
#include "support.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>

#define FSIZE (8u << 20)

static char g_path[64];
static unsigned char *g_ref; /* the file's bytes, as written */

/* A file of FSIZE pseudo-random bytes on the work tree's disk (O_DIRECT needs a real file system). */
static void make_file(void)
{
	snprintf(g_path, sizeof g_path, "rf_files_XXXXXX");
	int fd = mkstemp(g_path);
	cr_assert(fd >= 0);
	g_ref = malloc(FSIZE);
	uint64_t s = 0x9e3779b97f4a7c15ull ^ (uint64_t)getpid();
	for (size_t i = 0; i < FSIZE; i += 8) {
		s ^= s << 13, s ^= s >> 7, s ^= s << 17;
		memcpy(g_ref + i, &s, 8);
	}
	cr_assert_eq(write(fd, g_ref, FSIZE), (ssize_t)FSIZE);
	fsync(fd); /* clean pages: POSIX_FADV_DONTNEED drops only those */
	close(fd);
}

/* Also called by a test before it skips: a skipped test's .fini does not run. */
static void drop_file(void)
{
	if (g_path[0] != '\0')
		unlink(g_path);
	g_path[0] = '\0';
	free(g_ref);
	g_ref = NULL;
}

TestSuite(files, .init = make_file, .fini = drop_file);

static rf_pipeline *mk(unsigned depth, size_t slot_bytes, unsigned kq)
{
	rf_pipeline_params pp = {0};
	pp.depth = depth;
	pp.slot_bytes = slot_bytes;
	pp.copy_queues = kq;
	pp.backend = test_backend();
	rf_pipeline *p = NULL;
	cr_assert_eq(rf_pipeline_create(&pp, &p), RF_OK, "%s", rf_errmsg());
	return p;
}

/* The compute checks every block against what it expects (a copy of the expected bytes per block). */
typedef struct expect {
	const unsigned char **want;
	size_t n, bad_block, computed;
	int bad;
} expect;

static int file_check_cb(void *user, const rf_block *b)
{
	expect *e = user;
	e->computed++;
	if (memcmp(b->data, e->want[b->index], b->bytes) != 0 && !e->bad) {
		e->bad = 1;
		e->bad_block = b->index;
	}
	return 0;
}

static void run_checked(rf_pipeline *p, size_t n, const void **srcs, const size_t *sizes, const unsigned char **want)
{
	expect e = {want, n, 0, 0, 0};
	int rc = rf_pipeline_run(p, n, srcs, sizes, file_check_cb, &e);
	cr_assert_eq(rc, RF_OK, "%s: %s", rf_err_name(rc), rf_errmsg());
	cr_assert_eq(e.computed, n);
	cr_assert(!e.bad, "block %zu does not hold its bytes", e.bad_block);
}

Test(files, aligned_and_unaligned_blocks)
{
	rf_file *f;
	cr_assert_eq(rf_file_open(g_path, 0, &f), RF_OK, "%s", rf_errmsg());
	const unsigned char *d = rf_file_data(f);
	static const size_t offs[] = {0, 4096, 32, 8, 1, 4095, 65536 + 7, 1 << 20, (3 << 20) + 12345};
	static const size_t lens[] = {1 << 20, 65536, 1000, 4096, 1, 777777, 131072, 4095, 1 << 20};
	enum { N = sizeof offs / sizeof offs[0] };
	for (unsigned depth = 1; depth <= 3; depth++) {
		rf_pipeline *p = mk(depth, 1 << 20, 1);
		const void *srcs[N];
		const unsigned char *want[N];
		size_t sizes[N];
		for (size_t i = 0; i < N; i++) {
			srcs[i] = d + offs[i];
			want[i] = g_ref + offs[i];
			sizes[i] = lens[i];
		}
		run_checked(p, N, srcs, sizes, want);
		rf_stats st;
		cr_assert_eq(rf_pipeline_stats(p, &st), RF_OK);
		size_t total = 0;
		for (size_t i = 0; i < N; i++)
			total += lens[i];
		cr_assert_eq(st.file_bytes, total, "file_bytes %llu", (unsigned long long)st.file_bytes);
		cr_assert(strstr(rf_pipeline_describe(p), "files:") != NULL, "%s", rf_pipeline_describe(p));
		rf_pipeline_destroy(p);
	}
	cr_assert_eq(rf_file_close(f), RF_OK);
	leak_check();
}

Test(files, mixed_with_memory_and_several_files)
{
	rf_file *f1, *f2;
	cr_assert_eq(rf_file_open(g_path, 0, &f1), RF_OK, "%s", rf_errmsg());
	cr_assert_eq(rf_file_open(g_path, RF_FILE_BUFFERED, &f2), RF_OK, "%s", rf_errmsg());
	const unsigned char *d1 = rf_file_data(f1), *d2 = rf_file_data(f2);
	enum { N = 64 };
	static unsigned char mem[N][4096];
	const void *srcs[N];
	const unsigned char *want[N];
	size_t sizes[N];
	uint64_t s = 7;
	for (size_t i = 0; i < N; i++) {
		s = s * 6364136223846793005ull + 1442695040888963407ull;
		size_t len = 1 + (size_t)(s >> 33) % 200000, off = (size_t)(s >> 20) % (FSIZE - len);
		switch (i % 3) {
		case 0:
			srcs[i] = d1 + off, want[i] = g_ref + off;
			break;
		case 1:
			srcs[i] = d2 + off, want[i] = g_ref + off;
			break;
		default:
			len = 1 + len % sizeof mem[i];
			memset(mem[i], (int)i, len);
			srcs[i] = mem[i], want[i] = mem[i];
		}
		sizes[i] = len;
	}
	rf_pipeline *p = mk(4, 200000, 2);
	for (int r = 0; r < 3; r++)
		run_checked(p, N, srcs, sizes, want);
	rf_pipeline_destroy(p);
	cr_assert_eq(rf_file_close(f1), RF_OK);
	cr_assert_eq(rf_file_close(f2), RF_OK);
	leak_check();
}

/* The file's pages out of the page cache, so that its reads take a while to land. */
static void drop_cache(void)
{
	int fd = open(g_path, O_RDONLY);
	cr_assert(fd >= 0);
	posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
	close(fd);
}

/* Instantiate g (destroyed here) and run it `reps` times, every block checked (cold: the file dropped
 * from the page cache before each run). */
static void exec_checked(rf_graph *g, size_t slot_bytes, size_t n, const void **srcs, const size_t *sizes,
			 const unsigned char **want, int reps, int cold)
{
	rf_exec_params ep = {test_backend(), slot_bytes, 0, 0};
	rf_exec *e;
	cr_assert_eq(rf_exec_create(g, &ep, &e), RF_OK, "%s", rf_errmsg());
	rf_graph_destroy(g);
	for (int r = 0; r < reps; r++) {
		if (cold)
			drop_cache();
		expect x = {want, n, 0, 0, 0};
		cr_assert_eq(rf_exec_run(e, n, srcs, sizes, file_check_cb, &x), RF_OK, "%s", rf_errmsg());
		cr_assert_eq(x.computed, n);
		cr_assert(!x.bad, "block %zu does not hold its bytes", x.bad_block);
	}
	rf_exec_destroy(e);
}

/* A graph that stages its blocks (STAGE nodes: two-hop staging) reads a file's range into the staging
 * slot, and the copy moves it on from there: the same bytes, on every backend. */
Test(files, staged_graph_reads_files_into_its_staging_slots)
{
	rf_file *f;
	cr_assert_eq(rf_file_open(g_path, 0, &f), RF_OK, "%s", rf_errmsg());
	const unsigned char *d = rf_file_data(f);
	enum { N = 24, S = 3, D = 2, SZ = 70000 };
	rf_graph *g;
	cr_assert_eq(rf_graph_create(0, &g), RF_OK);
	size_t st[N], cp[N], cm[N];
	for (size_t b = 0; b < N; b++) {
		rf_node_desc ds = {RF_NODE_STAGE, 2, b, b % S, 0}, dc = {RF_NODE_COPY, 1, b, b % D, 0},
			     dm = {RF_NODE_COMPUTE, 0, b, b % D, 0};
		cr_assert_eq(rf_graph_add_node(g, &ds, &st[b]), RF_OK);
		cr_assert_eq(rf_graph_add_node(g, &dc, &cp[b]), RF_OK);
		cr_assert_eq(rf_graph_add_node(g, &dm, &cm[b]), RF_OK);
		cr_assert_eq(rf_graph_add_edge(g, st[b], cp[b]), RF_OK);
		cr_assert_eq(rf_graph_add_edge(g, cp[b], cm[b]), RF_OK);
		if (b >= D)
			cr_assert_eq(rf_graph_add_edge(g, cm[b - D], cp[b]), RF_OK);
		if (b >= S)
			cr_assert_eq(rf_graph_add_edge(g, cp[b - S], st[b]), RF_OK);
	}
	const void *srcs[N];
	const unsigned char *want[N];
	size_t sizes[N];
	for (size_t i = 0; i < N; i++) {
		size_t off = i * 99991 + (i % 2 ? 0 : 4096 - i * 3);
		srcs[i] = d + off, want[i] = g_ref + off, sizes[i] = SZ - i * 7;
	}
	exec_checked(g, SZ, N, srcs, sizes, want, 2, 0);
	cr_assert_eq(rf_file_close(f), RF_OK);
	leak_check();
}

/* A queue that copies a file's range and then computes it itself (a graph's queue; the locality ring's
 * lanes) reads landed bytes: on one queue, program order means the reads land before the compute. With
 * kq = 1 every node is on queue 0 (on threads the caller walks it alone, its reads in flight); with kq = 2
 * blocks alternate between queue 0 and a lane, computes kept in order by edges; split: every copy on
 * queue 1 instead. */
static void same_queue_graph(unsigned kq, int split)
{
	rf_file *f;
	cr_assert_eq(rf_file_open(g_path, 0, &f), RF_OK, "%s", rf_errmsg());
	const unsigned char *d = rf_file_data(f);
	enum { N = 32, D = 4, SZ = 131072 };
	rf_graph *g;
	cr_assert_eq(rf_graph_create(0, &g), RF_OK);
	size_t cp[N], cm[N];
	for (size_t b = 0; b < N; b++) {
		unsigned q = (unsigned)(b % kq);
		rf_node_desc dc = {RF_NODE_COPY, split ? 1 : q, b, b % D, 0}, dm = {RF_NODE_COMPUTE, q, b, b % D, 0};
		cr_assert_eq(rf_graph_add_node(g, &dc, &cp[b]), RF_OK);
		cr_assert_eq(rf_graph_add_node(g, &dm, &cm[b]), RF_OK);
		cr_assert_eq(rf_graph_add_edge(g, cp[b], cm[b]), RF_OK);
		if (b >= 1)
			cr_assert_eq(rf_graph_add_edge(g, cm[b - 1], cm[b]), RF_OK);
		if (b >= D)
			cr_assert_eq(rf_graph_add_edge(g, cm[b - D], cp[b]), RF_OK);
	}
	const void *srcs[N];
	const unsigned char *want[N];
	size_t sizes[N];
	for (size_t i = 0; i < N; i++) /* aligned, so that the reads are O_DIRECT and slow to land */
		srcs[i] = d + i * SZ, want[i] = g_ref + i * SZ, sizes[i] = SZ;
	exec_checked(g, SZ, N, srcs, sizes, want, 4, 1);
	cr_assert_eq(rf_file_close(f), RF_OK);
	leak_check();
}

Test(files, a_queue_computes_what_it_copied_one_queue)
{
	same_queue_graph(1, 0);
}

Test(files, a_queue_computes_what_it_copied_two_queues)
{
	same_queue_graph(2, 0);
}

/* The common graph: copies on a lane, read in flight; the graph oracle names each copy's node. */
Test(files, a_graph_copies_on_a_lane_and_computes_on_the_caller)
{
	same_queue_graph(1, 1);
}

/* RF_LOCALITY_COPIER: each block computed by the thread that read it (threads; cpu ignores it). */
Test(files, locality_copier_computes_landed_bytes)
{
	rf_file *f;
	cr_assert_eq(rf_file_open(g_path, 0, &f), RF_OK, "%s", rf_errmsg());
	const unsigned char *d = rf_file_data(f);
	enum { N = 48, SZ = 131072 };
	const void *srcs[N];
	const unsigned char *want[N];
	size_t sizes[N];
	for (size_t i = 0; i < N; i++) { /* every third block from memory: a mixed run */
		srcs[i] = i % 3 == 0 ? (const void *)(g_ref + i * SZ) : (const void *)(d + i * SZ);
		want[i] = g_ref + i * SZ, sizes[i] = SZ;
	}
	for (unsigned depth = 3; depth <= 5; depth++) {
		rf_pipeline_params pp = {0};
		pp.depth = depth;
		pp.slot_bytes = SZ;
		pp.backend = test_backend();
		pp.locality = RF_LOCALITY_COPIER;
		rf_pipeline *p = NULL;
		cr_assert_eq(rf_pipeline_create(&pp, &p), RF_OK, "%s", rf_errmsg());
		for (int r = 0; r < 6; r++) {
			drop_cache();
			run_checked(p, N, srcs, sizes, want);
		}
		rf_pipeline_destroy(p);
	}
	cr_assert_eq(rf_file_close(f), RF_OK);
	leak_check();
}

Test(files, range_past_the_end_is_einval_before_any_work)
{
	rf_file *f;
	cr_assert_eq(rf_file_open(g_path, 0, &f), RF_OK);
	const unsigned char *d = rf_file_data(f);
	rf_pipeline *p = mk(2, 1 << 20, 1);
	const void *srcs[2] = {d, d + FSIZE - 100};
	size_t sizes[2] = {100, 101};
	expect e = {NULL, 2, 0, 0, 0};
	cr_assert_eq(rf_pipeline_run(p, 2, srcs, sizes, file_check_cb, &e), RF_EINVAL);
	cr_assert(strstr(rf_errmsg(), "block 1") != NULL, "%s", rf_errmsg());
	cr_assert_eq(e.computed, 0);
	rf_block b;
	cr_assert_eq(rf_pipeline_acquire(p, 1, d + FSIZE - 10, 11, NULL, 0, &b), RF_EINVAL);
	cr_assert_eq(rf_pipeline_prefetch(p, 1, d + FSIZE - 10, 11, 0), RF_EINVAL);
	rf_pipeline_destroy(p);
	cr_assert_eq(rf_file_close(f), RF_OK);
}

/* Ranges that overlap a file's mapping without lying inside the file are RF_EINVAL before any work, at
 * every entry point (run sources, keyed sources, rf_exec copy nodes): one that starts at the file's end,
 * in the last page's tail (zeros that are not in the file), and ones that start below the mapping and run
 * into it or over all of it. A range that ends at the file's last byte is still the file's. */
Test(files, ranges_overlapping_a_mapping_outside_the_file_are_einval)
{
	enum { TSZ = 10000 }; /* not a multiple of a page: the mapping's last page has a tail */
	char path[] = "rf_files_tail_XXXXXX";
	int fd = mkstemp(path);
	cr_assert(fd >= 0);
	cr_assert_eq(write(fd, g_ref, TSZ), (ssize_t)TSZ);
	close(fd);
	rf_file *f;
	cr_assert_eq(rf_file_open(path, 0, &f), RF_OK, "%s", rf_errmsg());
	const unsigned char *d = rf_file_data(f);
	const unsigned char *bad[] = {d + TSZ, d + TSZ + 100, d - 16, d - 16, d - 4096};
	const size_t bad_n[] = {1, 100, 32, TSZ + 16, TSZ + 8192};
	enum { NBAD = sizeof bad / sizeof bad[0] };
	rf_pipeline *p = mk(2, 32768, 1);
	rf_graph *g;
	cr_assert_eq(rf_graph_ring(2, 2, 1, &g), RF_OK, "%s", rf_errmsg());
	rf_exec_params ep = {test_backend(), 32768, 0, 0};
	rf_exec *e;
	cr_assert_eq(rf_exec_create(g, &ep, &e), RF_OK, "%s", rf_errmsg());
	rf_graph_destroy(g);
	for (size_t i = 0; i < NBAD; i++) {
		const void *srcs[2] = {g_ref, bad[i]};
		size_t sizes[2] = {100, bad_n[i]};
		expect x = {NULL, 2, 0, 0, 0};
		cr_assert_eq(rf_pipeline_run(p, 2, srcs, sizes, file_check_cb, &x), RF_EINVAL, "range %zu", i);
		cr_assert(strstr(rf_errmsg(), "block 1") != NULL && strstr(rf_errmsg(), path) != NULL, "%s",
			  rf_errmsg());
		cr_assert_eq(x.computed, 0);
		cr_assert_eq(rf_exec_run(e, 2, srcs, sizes, file_check_cb, &x), RF_EINVAL, "range %zu", i);
		cr_assert(strstr(rf_errmsg(), "block 1") != NULL, "%s", rf_errmsg());
		cr_assert_eq(x.computed, 0);
		rf_block b;
		cr_assert_eq(rf_pipeline_acquire(p, 1, bad[i], bad_n[i], NULL, 0, &b), RF_EINVAL, "range %zu", i);
		cr_assert(strstr(rf_errmsg(), "rf_pipeline_acquire") != NULL && strstr(rf_errmsg(), path) != NULL,
			  "%s", rf_errmsg());
		cr_assert_eq(rf_pipeline_prefetch(p, 1, bad[i], bad_n[i], 0), RF_EINVAL, "range %zu", i);
		rf_key_state st;
		cr_assert_eq(rf_pipeline_lookup(p, 1, &st, NULL), RF_OK);
		cr_assert_eq(st, RF_KEY_ABSENT);
	}
	/* The file's own ranges, up to its last byte, still read right. */
	const void *srcs[2] = {d + TSZ - 1, d};
	size_t sizes[2] = {1, TSZ};
	const unsigned char *want[2] = {g_ref + TSZ - 1, g_ref};
	run_checked(p, 2, srcs, sizes, want);
	rf_block b;
	cr_assert_eq(rf_pipeline_acquire(p, 2, d + TSZ - 100, 100, NULL, 0, &b), RF_OK, "%s", rf_errmsg());
	cr_assert(memcmp(b.data, g_ref + TSZ - 100, 100) == 0);
	cr_assert_eq(rf_pipeline_release(p, &b), RF_OK);
	rf_exec_destroy(e);
	rf_pipeline_destroy(p);
	cr_assert_eq(rf_file_close(f), RF_OK, "%s", rf_errmsg());
	unlink(path);
	leak_check();
}

/* The file shrinks after open: a run reading past the new end fails with RF_EIO after draining, no
 * compute sees the block, the pipeline runs again; an acquire fails with RF_EIO and leaves the key
 * absent; a hint leaves it absent and counts as wasted. Never SIGBUS. */
Test(files, a_shrunk_file_is_eio_and_the_pipeline_stays_usable)
{
	rf_file *f;
	cr_assert_eq(rf_file_open(g_path, 0, &f), RF_OK);
	const unsigned char *d = rf_file_data(f);
	cr_assert_eq(truncate(g_path, FSIZE / 2), 0);
	rf_pipeline *p = mk(2, 1 << 20, 1);
	enum { N = 8 };
	const void *srcs[N];
	const unsigned char *want[N];
	size_t sizes[N];
	for (size_t i = 0; i < N; i++) {
		srcs[i] = d + i * (1 << 20);
		want[i] = g_ref + i * (1 << 20);
		sizes[i] = 1 << 20;
	}
	expect e = {want, N, 0, 0, 0};
	int rc = rf_pipeline_run(p, N, srcs, sizes, file_check_cb, &e);
	cr_assert_eq(rc, RF_EIO, "%s: %s", rf_err_name(rc), rf_errmsg());
	cr_assert(strstr(rf_errmsg(), g_path) != NULL, "names the path: %s", rf_errmsg());
	cr_assert(!e.bad, "a computed block held wrong bytes (block %zu)", e.bad_block);
	cr_assert_leq(e.computed, N / 2, "computed %zu blocks of a file half gone", e.computed);
	run_checked(p, N / 2, srcs, sizes, want); /* the first half is still there */
	rf_block b;
	cr_assert_eq(rf_pipeline_acquire(p, 7, srcs[7], sizes[7], NULL, 0, &b), RF_EIO);
	cr_assert(strncmp(rf_errmsg(), "rf_pipeline_acquire: ", 21) == 0 && strstr(rf_errmsg(), g_path) != NULL,
		  "named after the call, as its other errors are: %s", rf_errmsg());
	rf_key_state st;
	cr_assert_eq(rf_pipeline_lookup(p, 7, &st, NULL), RF_OK);
	cr_assert_eq(st, RF_KEY_ABSENT);
	rf_keyed_stats ks0, ks1;
	rf_pipeline_keyed_stats(p, &ks0);
	cr_assert_eq(rf_pipeline_prefetch(p, 6, srcs[6], sizes[6], 0), RF_OK, "%s", rf_errmsg());
	for (;;) { /* the hint's read fails on its lane (or at once on cpu): however long the lane takes */
		cr_assert_eq(rf_pipeline_lookup(p, 6, &st, NULL), RF_OK);
		if (st != RF_KEY_COPYING)
			break;
		usleep(1000);
	}
	cr_assert_eq(st, RF_KEY_ABSENT, "a failed hint leaves its key absent");
	cr_assert_eq(rf_pipeline_acquire(p, 6, srcs[6], sizes[6], NULL, 0, &b), RF_EIO);
	cr_assert(strncmp(rf_errmsg(), "rf_pipeline_acquire: ", 21) == 0, "%s", rf_errmsg());
	rf_pipeline_keyed_stats(p, &ks1);
	cr_assert_eq(ks1.wasted, ks0.wasted + 1, "the failed hint counts as wasted");
	cr_assert_eq(rf_pipeline_acquire(p, 1, srcs[1], sizes[1], NULL, 0, &b), RF_OK, "%s", rf_errmsg());
	cr_assert(memcmp(b.data, want[1], sizes[1]) == 0);
	cr_assert_eq(rf_pipeline_release(p, &b), RF_OK);
	rf_pipeline_destroy(p);
	cr_assert_eq(rf_file_close(f), RF_OK);
	leak_check();
}

/* Keyed serving from a file: hints put reads in flight, acquires hit, unaligned experts, bytes right. */
Test(files, keyed_hints_and_acquires)
{
	rf_file *f;
	cr_assert_eq(rf_file_open(g_path, 0, &f), RF_OK);
	const unsigned char *d = rf_file_data(f);
	enum { K = 32, SZ = 100000 };
	rf_pipeline *p = mk(12, SZ, 2);
	for (int step = 0; step < 20; step++) {
		for (uint64_t k = 0; k < 8; k++) {
			uint64_t key = (uint64_t)(step * 5 + k * 3) % K;
			(void)rf_pipeline_prefetch(p, key, d + key * (SZ + 8), SZ, 0);
		}
		/* The first hint of the step lands before its acquire (a hint still queued when its acquire comes
		 * is withdrawn, not a hit: on a loaded machine the lanes may not have run yet). */
		uint64_t first = (uint64_t)(step * 5) % K;
		rf_key_state st = RF_KEY_COPYING;
		while (rf_pipeline_lookup(p, first, &st, NULL) == RF_OK && st == RF_KEY_COPYING)
			usleep(1000); /* however long the lane takes to run */
		for (uint64_t k = 0; k < 6; k++) {
			uint64_t key = (uint64_t)(step * 5 + k * 3) % K;
			rf_block b;
			int rc = rf_pipeline_acquire(p, key, d + key * (SZ + 8), SZ, NULL, 0, &b);
			cr_assert_eq(rc, RF_OK, "%s", rf_errmsg());
			cr_assert(memcmp(b.data, g_ref + key * (SZ + 8), SZ) == 0, "step %d key %llu", step,
				  (unsigned long long)key);
			cr_assert_eq(rf_pipeline_release(p, &b), RF_OK);
		}
	}
	rf_keyed_stats ks;
	rf_pipeline_keyed_stats(p, &ks);
	cr_assert_gt(ks.hits, 0, "acquires %llu, prefetches %llu, wasted %llu, dropped %llu",
		     (unsigned long long)ks.acquires, (unsigned long long)ks.prefetches, (unsigned long long)ks.wasted,
		     (unsigned long long)ks.dropped);
	for (uint64_t k = 0; k < K; k++) /* evict returns once no copy reads the key's source */
		cr_assert_eq(rf_pipeline_evict(p, k), RF_OK);
	cr_assert_eq(rf_file_close(f), RF_OK, "%s", rf_errmsg());
	rf_pipeline_destroy(p);
	leak_check();
}

/* Random keyed serving where each key's bytes come from two sources of the same bytes, its file range
 * and a copy in memory, and half of the keys' ranges lie past the end of a file that shrank: their
 * hints fail on a lane while later hints and acquires of the same key name memory. Hints bounded or
 * not, some withdrawn, runs of such blocks in between. A failed read never serves its slot: every
 * acquire that succeeds holds the key's bytes until its release, and an acquire from a range past the
 * end is RF_EIO unless the key is there already; a run's blocks hold theirs, and a run with one past
 * the end is RF_EIO. */
Test(files, failed_hint_reads_never_serve_a_later_source)
{
	enum { NKEYS = 12, SZ = 40000 };
	rf_file *f;
	cr_assert_eq(rf_file_open(g_path, 0, &f), RF_OK, "%s", rf_errmsg());
	const unsigned char *d = rf_file_data(f);
	cr_assert_eq(truncate(g_path, FSIZE / 2), 0);
	uint64_t seed = test_seed(), rng = seed;
	fprintf(stderr, "files: RF_TEST_SEED=%llu\n", (unsigned long long)seed);
	size_t off[NKEYS];
	unsigned char *mem[NKEYS];
	for (unsigned k = 0; k < NKEYS; k++) { /* odd keys past the end */
		off[k] = (k % 2 ? FSIZE / 2 + 4096 : 0) + k * (SZ + 4099) + (rng_next(&rng) % 2 ? 0 : 13);
		cr_assert_not_null(mem[k] = malloc(SZ));
		memcpy(mem[k], g_ref + off[k], SZ);
	}
	int eio = 0, served = 0;
	for (int round = 0; round < 8; round++) {
		unsigned depth = 2 + (unsigned)(rng_next(&rng) % 5);
		unsigned kq = depth >= 3 ? 1 + (unsigned)(rng_next(&rng) % 2) : 1; /* two lanes: depth 3 or more */
		static const uint64_t bound[3] = {0, SZ, 3 * SZ};
		rf_pipeline_params pp = {0};
		pp.depth = depth, pp.slot_bytes = SZ, pp.copy_queues = kq, pp.backend = test_backend();
		pp.hint_bytes = bound[rng_next(&rng) % 3];
		rf_pipeline *p = NULL;
		cr_assert_eq(rf_pipeline_create(&pp, &p), RF_OK, "%s", rf_errmsg());
		rf_block held[8];
		unsigned hkey[8], nheld = 0;
		for (int step = 0; step < 300; step++) {
			unsigned key = (unsigned)(rng_next(&rng) % NKEYS), file = (unsigned)(rng_next(&rng) % 2);
			unsigned op = (unsigned)(rng_next(&rng) % 10);
			const void *src = file ? (const void *)(d + off[key]) : mem[key];
			if (op == 3) { /* the hint withdrawn: dropped if not started, else first to go */
				cr_assert_eq(rf_pipeline_unprefetch(p, key), RF_OK, "unprefetch: %s", rf_errmsg());
			} else if (op < 3) {
				int rc = rf_pipeline_prefetch(p, key, src, SZ, 0);
				cr_assert(rc == RF_OK || rc == RF_ENOSPC, "prefetch: %s", rf_errmsg());
			} else if (op < 7 && nheld + 1 < depth && nheld < 8) {
				int rc = rf_pipeline_acquire(p, key, src, SZ, NULL, 0, &held[nheld]);
				cr_assert(rc == RF_OK || rc == RF_ENOSPC || (rc == RF_EIO && file && key % 2),
					  "acquire of key %u (from %s): %s", key, file ? "the file" : "memory", rf_errmsg());
				eio += rc == RF_EIO;
				if (rc == RF_OK) {
					cr_assert(memcmp(held[nheld].data, g_ref + off[key], SZ) == 0,
						  "round %d step %d: key %u's bytes (from %s)", round, step, key,
						  file ? "the file" : "memory");
					hkey[nheld++] = key;
					served++;
				}
			} else if (op < 9 && nheld > 0) {
				unsigned i = (unsigned)(rng_next(&rng) % nheld);
				cr_assert(memcmp(held[i].data, g_ref + off[hkey[i]], SZ) == 0, "key %u changed while held",
					  hkey[i]);
				cr_assert_eq(rf_pipeline_release(p, &held[i]), RF_OK, "%s", rf_errmsg());
				held[i] = held[--nheld], hkey[i] = hkey[nheld];
			} else if (nheld == 0 && op == 9 && step % 2) {
				cr_assert_eq(rf_pipeline_evict(p, key), RF_OK, "evict: %s", rf_errmsg());
			} else if (nheld == 0) { /* a run: blocks of even keys from either source, one odd maybe */
				const void *srcs[4];
				const unsigned char *want[4];
				size_t sizes[4];
				int past = 0;
				for (unsigned b = 0; b < 4; b++) {
					unsigned rk = (unsigned)(rng_next(&rng) % NKEYS) & ~1u, in_file = (unsigned)(rng_next(&rng) % 2);
					if (b == 3 && rng_next(&rng) % 3 == 0)
						rk |= 1, in_file = 1, past = 1;
					srcs[b] = in_file ? (const void *)(d + off[rk]) : mem[rk];
					want[b] = g_ref + off[rk];
					sizes[b] = SZ;
				}
				expect e = {want, 4, 0, 0, 0};
				int rc = rf_pipeline_run(p, 4, srcs, sizes, file_check_cb, &e);
				cr_assert(rc == (past ? RF_EIO : RF_OK), "run%s: %s", past ? " with a block past the end" : "",
					  rf_errmsg());
				cr_assert(!e.bad, "run: block %zu does not hold its bytes", e.bad_block);
			}
		}
		while (nheld > 0)
			cr_assert_eq(rf_pipeline_release(p, &held[--nheld]), RF_OK, "%s", rf_errmsg());
		rf_pipeline_destroy(p);
	}
	cr_assert_gt(eio, 0, "no acquire read past the end");
	cr_assert_gt(served, 100);
	for (unsigned k = 0; k < NKEYS; k++)
		free(mem[k]);
	cr_assert_eq(rf_file_close(f), RF_OK, "%s", rf_errmsg());
	leak_check();
}

/* Keyed copies after a run that failed (its compute), one that was canceled and one whose read failed:
 * misses and hints, from memory and from the file, on every copy lane, hold their bytes; every hint
 * lands (none is left copying, none failed), is a hit, counts its bytes once and nothing as wasted. A
 * keyed copy sees no run's stop or failure (on threads it is walked with a run's own copy handler). */
enum { KR_SZ = 65536, KR_N = 8 };
static unsigned char g_kr_mem[KR_N + 6][KR_SZ];

static int kr_fail_cb(void *user, const rf_block *b)
{
	(void)user;
	return b->index == 2 ? 7 : 0;
}

static int kr_cancel_cb(void *user, const rf_block *b)
{
	if (b->index == 2)
		cr_assert_eq(rf_pipeline_cancel(user), RF_OK);
	return 0;
}

static int kr_ok_cb(void *user, const rf_block *b)
{
	const unsigned char *const *want = user;
	return memcmp(b->data, want[b->index], b->bytes) != 0;
}

/* Misses (memory, file) then hints (memory, file, file, memory: slots 2, 3, 0, 1, so each kind on each of
 * two lanes), all of keys not seen before (base + 0 .. 5; base % 100 <= 90). */
static void keyed_after_a_bad_run(rf_pipeline *p, const unsigned char *d, uint64_t base)
{
	static const int from_file[6] = {0, 1, 0, 1, 1, 0};
	const void *src[6];
	const unsigned char *want[6];
	for (unsigned i = 0; i < 6; i++) {
		size_t off = (size_t)((base + i) % 100) * (KR_SZ + 8) + 4096; /* within the file's 8 MiB */
		src[i] = from_file[i] ? (const void *)(d + off) : (const void *)g_kr_mem[KR_N + i];
		want[i] = from_file[i] ? g_ref + off : g_kr_mem[KR_N + i];
		if (!from_file[i])
			fill_pattern(g_kr_mem[KR_N + i], KR_SZ, base + i, 7);
	}
	rf_keyed_stats ks0, ks1;
	cr_assert_eq(rf_pipeline_keyed_stats(p, &ks0), RF_OK);
	rf_block b;
	for (unsigned i = 0; i < 2; i++) {
		cr_assert_eq(rf_pipeline_acquire(p, base + i, src[i], KR_SZ, NULL, 0, &b), RF_OK, "miss %u: %s", i,
			     rf_errmsg());
		cr_assert(memcmp(b.data, want[i], KR_SZ) == 0, "miss %u: wrong bytes", i);
		cr_assert_eq(rf_pipeline_release(p, &b), RF_OK);
	}
	for (unsigned i = 2; i < 6; i++)
		cr_assert_eq(rf_pipeline_prefetch(p, base + i, src[i], KR_SZ, 0), RF_OK, "hint %u: %s", i, rf_errmsg());
	for (unsigned i = 2; i < 6; i++) {
		rf_key_state st = RF_KEY_COPYING;
		while (st == RF_KEY_COPYING) { /* however long the lane takes to run */
			cr_assert_eq(rf_pipeline_lookup(p, base + i, &st, NULL), RF_OK);
			if (st == RF_KEY_COPYING)
				usleep(1000);
		}
		cr_assert_eq(st, RF_KEY_READY, "hint %u (%s) did not land: state %d", i, from_file[i] ? "file" : "memory",
			     (int)st);
	}
	for (unsigned i = 2; i < 6; i++) {
		cr_assert_eq(rf_pipeline_acquire(p, base + i, src[i], KR_SZ, NULL, 0, &b), RF_OK, "hit %u: %s", i,
			     rf_errmsg());
		cr_assert(memcmp(b.data, want[i], KR_SZ) == 0, "hint %u: wrong bytes", i);
		cr_assert_eq(rf_pipeline_release(p, &b), RF_OK);
	}
	cr_assert_eq(rf_pipeline_keyed_stats(p, &ks1), RF_OK);
	cr_assert_eq(ks1.acquires, ks0.acquires + 6);
	cr_assert_eq(ks1.hits, ks0.hits + 4, "every landed hint is a hit");
	cr_assert_eq(ks1.wasted, ks0.wasted, "no hint failed or went unused");
	cr_assert_eq(ks1.bytes_copied, ks0.bytes_copied + 6 * KR_SZ, "each copy counted once");
}

Test(files, keyed_copies_after_failed_canceled_and_eio_runs)
{
	rf_file *f, *shrunk;
	cr_assert_eq(rf_file_open(g_path, 0, &f), RF_OK);
	const unsigned char *d = rf_file_data(f);
	char spath[64];
	snprintf(spath, sizeof spath, "rf_files_shrunk_XXXXXX");
	int fd = mkstemp(spath);
	cr_assert(fd >= 0);
	cr_assert_eq(write(fd, g_ref, 1 << 20), (ssize_t)(1 << 20));
	close(fd);
	cr_assert_eq(rf_file_open(spath, 0, &shrunk), RF_OK);
	cr_assert_eq(truncate(spath, KR_SZ), 0);
	rf_pipeline *p = mk(4, KR_SZ, 2);
	/* Runs on the copy lanes: memory and file blocks in turn (a run of file blocks only is the caller's). */
	const void *srcs[KR_N];
	const unsigned char *want[KR_N];
	size_t sizes[KR_N];
	for (size_t i = 0; i < KR_N; i++) {
		fill_pattern(g_kr_mem[i], KR_SZ, i, 3);
		srcs[i] = i % 2 ? (const void *)(d + i * KR_SZ + 8) : (const void *)g_kr_mem[i];
		want[i] = i % 2 ? g_ref + i * KR_SZ + 8 : g_kr_mem[i];
		sizes[i] = KR_SZ;
	}
	const void *bad[KR_N];
	memcpy(bad, srcs, sizeof bad);
	for (size_t i = 3; i < KR_N; i += 2) /* past the shrunk file's end: RF_EIO on a lane */
		bad[i] = (const unsigned char *)rf_file_data(shrunk) + i * KR_SZ;
	uint64_t base = 100;
	for (int kind = 0; kind < 3; kind++, base += 6) {
		int rc = kind == 0   ? rf_pipeline_run(p, KR_N, srcs, sizes, kr_fail_cb, NULL)
			 : kind == 1 ? rf_pipeline_run(p, KR_N, srcs, sizes, kr_cancel_cb, p)
				     : rf_pipeline_run(p, KR_N, bad, sizes, kr_ok_cb, (void *)want);
		int expect_rc = kind == 0 ? RF_ECALLBACK : kind == 1 ? RF_ECANCELED : RF_EIO;
		cr_assert_eq(rc, expect_rc, "bad run %d: %s: %s", kind, rf_err_name(rc), rf_errmsg());
		keyed_after_a_bad_run(p, d, base);
		rc = rf_pipeline_run(p, KR_N, srcs, sizes, kr_ok_cb, (void *)want);
		cr_assert_eq(rc, RF_OK, "a run after keyed use (bad run %d): %s: %s", kind, rf_err_name(rc), rf_errmsg());
		keyed_after_a_bad_run(p, d, base + 40); /* and keyed copies after a good run */
	}
	rf_pipeline_destroy(p);
	cr_assert_eq(rf_file_close(shrunk), RF_OK);
	unlink(spath);
	cr_assert_eq(rf_file_close(f), RF_OK);
	leak_check();
}

/* The ids of this process's threads whose names start with `prefix`, at most max of them: how many. */
static unsigned thread_ids(const char *prefix, long *tid, unsigned max)
{
	DIR *d = opendir("/proc/self/task");
	cr_assert_not_null(d);
	unsigned n = 0;
	struct dirent *e;
	while (n < max && (e = readdir(d)) != NULL) {
		char path[300], comm[64] = "";
		snprintf(path, sizeof path, "/proc/self/task/%s/comm", e->d_name);
		FILE *f = fopen(path, "r");
		if (f == NULL)
			continue;
		if (fgets(comm, sizeof comm, f) == NULL)
			comm[0] = '\0';
		fclose(f);
		if (strncmp(comm, prefix, strlen(prefix)) == 0)
			tid[n++] = atol(e->d_name);
	}
	closedir(d);
	return n;
}

/* 1 when thread tid is running or waiting to run (state R in /proc/self/task/<tid>/stat), else 0. */
static int thread_runnable(long tid)
{
	char path[64], line[512] = "";
	snprintf(path, sizeof path, "/proc/self/task/%ld/stat", tid);
	FILE *f = fopen(path, "r");
	cr_assert_not_null(f, "%s: %s", path, strerror(errno));
	if (fgets(line, sizeof line, f) == NULL)
		line[0] = '\0';
	fclose(f);
	const char *p = strrchr(line, ')'); /* the name before it may hold anything */
	return p != NULL && p[1] == ' ' && p[2] == 'R';
}

/* A lane whose hints are file reads sleeps between them instead of spinning the wait policy's budget
 * (2 ms) after each for the next: a read's latency dwarfs a wake-up, and the spin was a core's worth of
 * CPU in a serving loop that hints every layer. Looked at 5 times in the 1 to 1.5 ms after each hint
 * landed, a spinning lane is running, or runnable where the machine is busy; a sleeping one is asleep.
 * (Their CPU time would say the same on a quiet machine, but on a busy one a wake-up costs more.) */
Test(files, a_lane_sleeps_between_file_hints)
{
	rf_file *f;
	cr_assert_eq(rf_file_open(g_path, 0, &f), RF_OK);
	const unsigned char *d = rf_file_data(f);
	enum { N = 20, SZ = 65536, GAP_US = 4000, LOOKS = 5, LOOK_US = 200, LANES = 8 };
	rf_pipeline *p = mk(4, SZ + 8192, 2);
	long tid[LANES];
	unsigned lanes = 0, looks = 0, runnable = 0;
	for (uint64_t i = 0; i < N; i++) {
		cr_assert_eq(rf_pipeline_prefetch(p, i, d + i * SZ, SZ, 0), RF_OK, "%s", rf_errmsg());
		rf_key_state st = RF_KEY_COPYING;
		while (rf_pipeline_lookup(p, i, &st, NULL) == RF_OK && st == RF_KEY_COPYING)
			usleep(100); /* however long the lane takes to run */
		cr_assert_eq(st, RF_KEY_READY, "key %llu never landed", (unsigned long long)i);
		if (i == 0)
			lanes = thread_ids("rf-copy-", tid, LANES);
		for (unsigned j = 0; i > 0 && lanes > 0 && j < LOOKS; j++, looks++) {
			usleep(LOOK_US);
			unsigned any = 0; /* whichever lane took the hint */
			for (unsigned l = 0; l < lanes; l++)
				any |= (unsigned)thread_runnable(tid[l]);
			runnable += any;
		}
		usleep(GAP_US);
	}
	cr_assert_eq(rf_file_close(f), RF_OK, "%s", rf_errmsg());
	rf_pipeline_destroy(p);
	if (lanes == 0) {
		drop_file();
		cr_skip_test("backend %s has no copy lane", test_backend());
	}
	cr_log_info("a copy lane was running or runnable at %u of %u looks", runnable, looks);
	cr_assert_lt(runnable, looks / 2, "a copy lane was running or runnable at %u of %u looks, %d us apart after "
		     "each file hint landed: it spins for the next one", runnable, looks, LOOK_US);
	leak_check();
}

/* O_DIRECT reads leave the page cache cold (mincore on a fresh mapping of the file). */
Test(files, direct_reads_leave_the_page_cache_cold)
{
	int fd = open(g_path, O_RDONLY);
	cr_assert(fd >= 0);
	posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
	rf_file *f;
	cr_assert_eq(rf_file_open(g_path, 0, &f), RF_OK);
	const unsigned char *d = rf_file_data(f);
	enum { N = 4 };
	const void *srcs[N];
	const unsigned char *want[N];
	size_t sizes[N];
	for (size_t i = 0; i < N; i++) {
		srcs[i] = d + i * (1 << 20);
		want[i] = g_ref + i * (1 << 20);
		sizes[i] = 1 << 20;
	}
	rf_pipeline *p = mk(2, 1 << 20, 1);
	run_checked(p, N, srcs, sizes, want);
	rf_pipeline_destroy(p);
	void *m = mmap(NULL, 4 << 20, PROT_READ, MAP_SHARED, fd, 0);
	cr_assert(m != MAP_FAILED);
	unsigned char vec[(4 << 20) / 4096];
	cr_assert_eq(mincore(m, 4 << 20, vec), 0);
	size_t resident = 0;
	for (size_t i = 0; i < sizeof vec; i++)
		resident += vec[i] & 1;
	munmap(m, 4 << 20);
	close(fd);
	cr_assert_lt(resident, sizeof vec / 8, "%zu of %zu pages in the page cache after O_DIRECT reads", resident,
		     sizeof vec);
	cr_assert_eq(rf_file_close(f), RF_OK);
}

/* Small blocks one after another in the file, aligned and not (a ring of the default depth): every
 * block holds its bytes; on threads the caller's reads run ahead of the slots in large requests
 * (describe says so) and leave the page cache cold. */
static void small_blocks(rf_pipeline *p, const unsigned char *d, size_t off0, size_t n, size_t nb)
{
	const void **srcs = malloc(nb * sizeof *srcs);
	const unsigned char **want = malloc(nb * sizeof *want);
	size_t *sizes = malloc(nb * sizeof *sizes);
	for (size_t i = 0; i < nb; i++) {
		srcs[i] = d + off0 + i * n;
		want[i] = g_ref + off0 + i * n;
		sizes[i] = n;
	}
	run_checked(p, nb, srcs, sizes, want);
	free(srcs);
	free(want);
	free(sizes);
}

static int on_threads(void)
{
	return strcmp(test_backend(), "threads") == 0;
}

/* Whether p's reads are preads (no io_uring): through the page cache, no window, no unaligned rule. */
static int by_pread(rf_pipeline *p)
{
	return strstr(rf_pipeline_describe(p), "files: pread (") != NULL;
}

/* Aligned small blocks in file order are read ahead with O_DIRECT: the page cache stays empty. Only
 * then the unaligned ones (bytes checked): for those the reader measures whether O_DIRECT + move or a
 * buffered read is faster here (docs/files.md), and on a busy disk buffered may win, filling the cache. */
static size_t resident_pages(int fd)
{
	void *m = mmap(NULL, FSIZE, PROT_READ, MAP_SHARED, fd, 0);
	cr_assert(m != MAP_FAILED);
	unsigned char *vec = malloc(FSIZE / 4096);
	cr_assert_eq(mincore(m, FSIZE, vec), 0);
	size_t resident = 0;
	for (size_t i = 0; i < FSIZE / 4096; i++)
		resident += vec[i] & 1;
	free(vec);
	munmap(m, FSIZE);
	return resident;
}

Test(files, small_blocks_in_file_order_are_read_ahead_of_the_slots)
{
	int fd = open(g_path, O_RDONLY);
	cr_assert(fd >= 0);
	posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
	rf_file *f;
	cr_assert_eq(rf_file_open(g_path, 0, &f), RF_OK);
	const unsigned char *d = rf_file_data(f);
	rf_pipeline *p = mk(0, 1 << 18, 0);
	small_blocks(p, d, 0, 65536, FSIZE / 65536);
	size_t resident = resident_pages(fd);
	cr_assert_lt(resident, FSIZE / 4096 / 8, "%zu pages in the page cache", resident);
	small_blocks(p, d, 32, 65536 + 8, 60);
	small_blocks(p, d, 4097, 100000, 40);
	cr_assert_eq(on_threads() && !by_pread(p), strstr(rf_pipeline_describe(p), "read-ahead ") != NULL, "%s",
		     rf_pipeline_describe(p));
	rf_pipeline_destroy(p);
	close(fd);
	cr_assert_eq(rf_file_close(f), RF_OK);
	leak_check();
}

/* The bytes read ahead in the stats; with depth = auto chosen online during the first run (the rates
 * measured so far in describe), at the defaults all of the window (with io_uring). */
Test(files, the_bytes_read_ahead_are_in_the_stats_and_depth_auto_chooses_them_online)
{
	rf_file *f;
	cr_assert_eq(rf_file_open(g_path, 0, &f), RF_OK);
	const unsigned char *d = rf_file_data(f);
	for (int autod = 0; autod < 2; autod++) {
		rf_pipeline_params pp = {0};
		pp.depth_auto = autod ? RF_DEPTH_AUTO : 0;
		pp.slot_bytes = 65536;
		pp.backend = test_backend();
		rf_pipeline *p = NULL;
		cr_assert_eq(rf_pipeline_create(&pp, &p), RF_OK, "%s", rf_errmsg());
		small_blocks(p, d, 0, 65536, FSIZE / 65536);
		rf_stats st;
		cr_assert_eq(rf_pipeline_stats(p, &st), RF_OK);
		const char *desc = rf_pipeline_describe(p);
		/* without io_uring the lanes pread through the page cache (its read-ahead): no window */
		int ahead = on_threads() && !by_pread(p);
		if (!ahead) {
			cr_assert_eq(st.ahead_bytes, 0u);
			cr_assert_eq(st.total_ahead_blocks, 0u);
		} else {
			cr_assert_gt(st.ahead_bytes, 0u, "%s", desc);
			cr_assert_eq(st.total_ahead_blocks, FSIZE / 65536, "%llu", (unsigned long long)st.total_ahead_blocks);
			cr_assert_eq(strstr(desc, "online") != NULL, autod, "%s", desc);
			if (!autod)
				cr_assert_geq(st.ahead_bytes, 2u << 20, "the defaults read ahead the whole window: %llu",
					      (unsigned long long)st.ahead_bytes);
		}
		small_blocks(p, d, 0, 65536, 16);
		rf_stats st2;
		cr_assert_eq(rf_pipeline_stats(p, &st2), RF_OK);
		cr_assert_eq(st2.total_ahead_blocks, st.total_ahead_blocks + (ahead ? 16u : 0u));
		rf_pipeline_destroy(p);
	}
	cr_assert_eq(rf_file_close(f), RF_OK);
	leak_check();
}

/* File blocks of at least the device's largest request (1 MiB where sysfs does not say), with depth =
 * auto: the first run reads them ahead in every slot, the reader choosing how many reads are in flight
 * as it goes (describe and ahead_bytes say what it chose), and the depth after it keeps as many bytes in
 * flight. Every block holds its bytes, in the first run and the later ones. Without io_uring (one read at
 * a time) there is nothing to choose, and the depth rule decides as for memory. */
static void auto_large_blocks(size_t n)
{
	rf_file *f;
	cr_assert_eq(rf_file_open(g_path, 0, &f), RF_OK);
	const unsigned char *d = rf_file_data(f);
	enum { NB = 24 };
	const size_t fit = FSIZE / n; /* the ranges that fit in the file, each read several times */
	const void *srcs[NB];
	const unsigned char *want[NB];
	size_t sizes[NB];
	for (size_t i = 0; i < NB; i++) {
		srcs[i] = d + i % fit * n;
		want[i] = g_ref + i % fit * n;
		sizes[i] = n;
	}
	rf_pipeline_params pp = {0};
	pp.depth_auto = RF_DEPTH_AUTO;
	pp.slot_bytes = n;
	pp.backend = test_backend();
	rf_pipeline *p = NULL;
	cr_assert_eq(rf_pipeline_create(&pp, &p), RF_OK, "%s", rf_errmsg());
	run_checked(p, NB, srcs, sizes, want);
	rf_stats st;
	cr_assert_eq(rf_pipeline_stats(p, &st), RF_OK);
	const char *desc = rf_pipeline_describe(p);
	int ring = strstr(desc, "files: pread (") == NULL;
	if (on_threads() && ring) {
		const char *at = strstr(desc, "first run ");
		unsigned deep = 0, depth = rf_pipeline_depth(p);
		cr_assert(at != NULL && sscanf(at, "first run %u deep, ", &deep) == 1 && deep > 2, "%s", desc);
		cr_assert(strstr(desc, " read in flight (cho") != NULL, "%s", desc); /* chosen, or choosing still */
		cr_assert_geq(st.ahead_bytes, n, "%llu", (unsigned long long)st.ahead_bytes);
		cr_assert_leq(st.ahead_bytes, 32u << 22, "%llu", (unsigned long long)st.ahead_bytes);
		cr_assert_eq(st.total_ahead_blocks, 0u, "nothing went through the read-ahead window");
		cr_assert(depth >= 2 && depth <= deep, "depth %u of %u slots", depth, deep);
	} else {
		cr_assert(strstr(desc, " deep, ") == NULL, "%s", desc);
		cr_assert_eq(st.ahead_bytes, 0u);
	}
	for (int k = 0; k < 3; k++)
		run_checked(p, NB, srcs, sizes, want);
	cr_assert_eq(rf_pipeline_stats(p, &st), RF_OK);
	cr_assert_eq(st.ahead_bytes, 0u, "later runs read ahead in their ring only");
	rf_pipeline_destroy(p);
	cr_assert_eq(rf_file_close(f), RF_OK);
	leak_check();
}

Test(files, depth_auto_reads_1m_blocks_ahead_in_the_slots_first) { auto_large_blocks(1u << 20); }
Test(files, depth_auto_reads_2m_blocks_ahead_in_the_slots_first) { auto_large_blocks((2u << 20) + 4096); }

/* Small blocks of a file that shrank: RF_EIO naming the path, no block computed past the new end, no
 * block with wrong bytes; the pipeline stays usable. */
Test(files, small_blocks_of_a_shrunk_file_are_eio)
{
	rf_file *f;
	cr_assert_eq(rf_file_open(g_path, 0, &f), RF_OK);
	const unsigned char *d = rf_file_data(f);
	cr_assert_eq(truncate(g_path, FSIZE / 2 + 100), 0);
	rf_pipeline *p = mk(0, 65536, 0);
	enum { N = FSIZE / 65536 };
	const void *srcs[N];
	const unsigned char *want[N];
	size_t sizes[N];
	for (size_t i = 0; i < N; i++) {
		srcs[i] = d + i * 65536;
		want[i] = g_ref + i * 65536;
		sizes[i] = 65536;
	}
	expect e = {want, N, 0, 0, 0};
	int rc = rf_pipeline_run(p, N, srcs, sizes, file_check_cb, &e);
	cr_assert_eq(rc, RF_EIO, "%s: %s", rf_err_name(rc), rf_errmsg());
	cr_assert(strstr(rf_errmsg(), g_path) != NULL && strstr(rf_errmsg(), "shrank") != NULL, "%s", rf_errmsg());
	cr_assert(!e.bad, "block %zu held wrong bytes", e.bad_block);
	cr_assert_leq(e.computed, N / 2, "computed %zu blocks", e.computed);
	run_checked(p, N / 2, srcs, sizes, want);
	rf_pipeline_destroy(p);
	cr_assert_eq(rf_file_close(f), RF_OK);
	leak_check();
}

/* A run that stopped halfway (its compute failed) leaves nothing a later run sees: the file rewritten,
 * runs that take up at each block around where it stopped read the new bytes. */
static int fail_at_cb(void *user, const rf_block *b)
{
	return b->index == *(const size_t *)user ? 7 : 0;
}

Test(files, a_run_after_a_stopped_run_reads_the_file_as_it_is_now)
{
	rf_file *f;
	cr_assert_eq(rf_file_open(g_path, 0, &f), RF_OK);
	const unsigned char *d = rf_file_data(f);
	rf_pipeline *p = mk(0, 65536, 0);
	enum { N = 64 };
	const void *srcs[N];
	const unsigned char *want[N];
	size_t sizes[N];
	unsigned char *now = malloc(N * 65536);
	for (size_t i = 0; i < N * 65536; i++)
		now[i] = (unsigned char)(g_ref[i] ^ 0x5a);
	int fd = open(g_path, O_WRONLY);
	cr_assert(fd >= 0);
	for (size_t stop = 3; stop < 6; stop++)
		for (size_t from = stop - 1; from < stop + 4; from++) {
			cr_assert_eq(pwrite(fd, g_ref, N * 65536, 0), (ssize_t)(N * 65536));
			fsync(fd);
			for (size_t i = 0; i < N; i++) {
				srcs[i] = d + i * 65536;
				sizes[i] = 65536;
			}
			cr_assert_eq(rf_pipeline_run(p, N, srcs, sizes, fail_at_cb, &stop), RF_ECALLBACK, "%s", rf_errmsg());
			cr_assert_eq(pwrite(fd, now, N * 65536, 0), (ssize_t)(N * 65536));
			fsync(fd);
			for (size_t i = 0; i < N - from; i++) {
				srcs[i] = d + (from + i) * 65536;
				want[i] = now + (from + i) * 65536;
			}
			run_checked(p, N - from, srcs, sizes, want);
		}
	close(fd);
	free(now);
	rf_pipeline_destroy(p);
	cr_assert_eq(rf_file_close(f), RF_OK);
	leak_check();
}

/* A run of small blocks that stopped early leaves no read of its file in flight: the file closes at
 * once (not RF_EBUSY), and the next run, of the file opened again, holds its bytes. */
Test(files, a_file_closes_after_a_stopped_run_of_small_blocks)
{
	rf_pipeline *p = mk(0, 65536, 0);
	enum { N = 64 };
	const void *srcs[N];
	const unsigned char *want[N];
	size_t sizes[N];
	for (int round = 0; round < 3; round++) {
		rf_file *f;
		cr_assert_eq(rf_file_open(g_path, 0, &f), RF_OK);
		const unsigned char *d = rf_file_data(f);
		for (size_t i = 0; i < N; i++) {
			srcs[i] = d + i * 65536;
			want[i] = g_ref + i * 65536;
			sizes[i] = 65536;
		}
		size_t stop = 2;
		cr_assert_eq(rf_pipeline_run(p, N, srcs, sizes, fail_at_cb, &stop), RF_ECALLBACK, "%s", rf_errmsg());
		cr_assert_eq(rf_file_close(f), RF_OK, "%s", rf_errmsg());
		cr_assert_eq(rf_file_open(g_path, 0, &f), RF_OK);
		d = rf_file_data(f);
		for (size_t i = 0; i < N; i++)
			srcs[i] = d + i * 65536;
		run_checked(p, N, srcs, sizes, want);
		cr_assert_eq(rf_file_close(f), RF_OK);
	}
	rf_pipeline_destroy(p);
	leak_check();
}

/* rf_graph_ring through rf_exec with file sources, the graph oracle on (RINGFETCH_ORACLE=1 in this
 * suite): a lane keeps the reads of the blocks ahead in flight, so a queue's copies overlap one another,
 * which the graph allows (they fill different slots, and what follows them waits for their signals). */
static void ring_graph_from_file(unsigned depth, unsigned kq)
{
	rf_file *f;
	cr_assert_eq(rf_file_open(g_path, 0, &f), RF_OK, "%s", rf_errmsg());
	const unsigned char *d = rf_file_data(f);
	enum { N = 40, SZ = 131072 };
	const void *srcs[N];
	const unsigned char *want[N];
	size_t sizes[N];
	for (size_t i = 0; i < N; i++) { /* aligned (O_DIRECT) and not (buffered or moved) */
		size_t off = i * SZ + (i % 3 == 1 ? 40 : 0);
		srcs[i] = d + off, want[i] = g_ref + off, sizes[i] = SZ - (i % 3 == 1 ? 40 : 0);
	}
	rf_graph *g;
	cr_assert_eq(rf_graph_ring(N, depth, kq, &g), RF_OK, "%s", rf_errmsg());
	exec_checked(g, SZ, N, srcs, sizes, want, 3, 1);
	cr_assert_eq(rf_file_close(f), RF_OK);
	leak_check();
}

Test(files, ring_graph_reads_ahead_under_the_oracle_one_lane)
{
	ring_graph_from_file(4, 1);
}

Test(files, ring_graph_reads_ahead_under_the_oracle_two_lanes)
{
	ring_graph_from_file(6, 2);
}

/* The describe line says how files are read now, not at the first read: once the reader has measured
 * the two ways of reading unaligned ranges for a size class, the line lists the rule it settled on. */
Test(files, describe_lists_the_unaligned_range_rule_once_decided)
{
	rf_file *f;
	cr_assert_eq(rf_file_open(g_path, 0, &f), RF_OK, "%s", rf_errmsg());
	const unsigned char *d = rf_file_data(f);
	enum { N = 16, SZ = 100000 };
	const void *srcs[N];
	const unsigned char *want[N];
	size_t sizes[N];
	for (size_t i = 0; i < N; i++) { /* off every alignment; the slots hold the O_DIRECT window */
		size_t off = i * (SZ + 4096) + 40;
		srcs[i] = d + off, want[i] = g_ref + off, sizes[i] = SZ;
	}
	rf_pipeline *p = mk(2, 31 * 4096, 1); /* 4 KiB-aligned slots, room for the window */
	run_checked(p, 1, srcs, sizes, want);
	const char *before = rf_pipeline_describe(p);
	cr_assert(strstr(before, "; files: ") != NULL, "%s", before);
	cr_assert(strstr(before, "unaligned ranges:") == NULL, "decided after one copy? %s", before);
	run_checked(p, N, srcs, sizes, want); /* five copies each way, and more */
	const char *after = rf_pipeline_describe(p);
	/* preads read through the page cache: no O_DIRECT window to weigh against a buffered read */
	cr_assert_eq(strstr(after, "unaligned ranges: <=128K ") != NULL, !by_pread(p), "%s", after);
	cr_assert(strstr(before, "; files: ") != NULL && strstr(before, "unaligned ranges:") == NULL,
		  "an earlier describe string changed: %s", before);
	rf_pipeline_destroy(p);
	cr_assert_eq(rf_file_close(f), RF_OK);
	leak_check();
}

/* The same when the copy lanes read (a run mixing memory and file blocks): on "threads" their readers
 * measure, and the line names the lane whose reader reads otherwise than the caller's. */
Test(files, describe_lists_a_copy_lanes_unaligned_range_rule)
{
	rf_file *f;
	cr_assert_eq(rf_file_open(g_path, 0, &f), RF_OK, "%s", rf_errmsg());
	const unsigned char *d = rf_file_data(f);
	enum { N = 24, SZ = 100000 };
	const void *srcs[N];
	const unsigned char *want[N];
	size_t sizes[N];
	for (size_t i = 0; i < N; i++) { /* every fourth block from memory */
		size_t off = i * (SZ + 4096) + 40;
		srcs[i] = i % 4 == 3 ? (const void *)(g_ref + off) : (const void *)(d + off);
		want[i] = g_ref + off, sizes[i] = SZ;
	}
	rf_pipeline *p = mk(3, 31 * 4096, 1);
	run_checked(p, N, srcs, sizes, want);
	const char *after = rf_pipeline_describe(p);
	cr_log_info("%s", after);
	cr_assert_eq(strstr(after, "unaligned ranges: <=128K ") != NULL, !by_pread(p), "%s", after);
	/* the lanes read, and their readers decided otherwise than the caller's (preads: nothing to decide) */
	if (strcmp(test_backend(), "threads") == 0 && strstr(after, "overlap off") == NULL && !by_pread(p))
		cr_assert(strstr(after, "; copy lane 0: io_uring") != NULL || strstr(after, "; copy lane 0: pread") != NULL,
			  "%s", after);
	rf_pipeline_destroy(p);
	cr_assert_eq(rf_file_close(f), RF_OK);
	leak_check();
}
