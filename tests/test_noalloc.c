/* tests/test_noalloc.c — steady state allocates nothing: once a pipeline exists, runs with new sources
 * every time (a serving stack's decode steps, each choosing different experts) call no allocator.
 *
 * The executable interposes malloc, calloc, realloc, aligned_alloc, posix_memalign and free (its own
 * definitions come first in symbol resolution, for the shared library too) and forwards to glibc's
 * __libc_* entry points, counting calls while `counting` is set. Not built under sanitizers, which
 * interpose the allocator themselves. Links the shared library, public headers only. */
#include "support.h"

#include <criterion/criterion.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "alloc_count.h"

static int sum_cb(void *user, const rf_block *b)
{
	unsigned long long *acc = user;
	const unsigned char *p = b->data;
	for (size_t i = 0; i < b->bytes; i++)
		*acc += p[i];
	return 0;
}

/* The interposition works: a direct call is counted (otherwise the test below proves nothing). */
Test(noalloc, interposition_counts)
{
	atomic_store(&calls, 0);
	atomic_store(&counting, 1);
	void *p = malloc(64);
	free(p);
	atomic_store(&counting, 0);
	cr_assert_eq(atomic_load(&calls), 2);
}

Test(noalloc, runs_with_new_sources_allocate_nothing)
{
	enum { N = 256, SZ = 512, STEPS = 20 };
	static unsigned char pool[64][SZ];
	for (size_t i = 0; i < sizeof pool; i++)
		((unsigned char *)pool)[i] = (unsigned char)(i * 7);
	const void *srcs[N];
	size_t sizes[N];
	for (unsigned depth = 1; depth <= 4; depth++) {
		rf_pipeline_params pp = {.depth = depth, .slot_bytes = SZ, .backend = test_backend()};
		rf_pipeline *p;
		cr_assert_eq(rf_pipeline_create(&pp, &p), RF_OK, "%s", rf_errmsg());
		unsigned long long acc = 0;
		uint64_t s = test_seed();
		for (int step = 0; step < STEPS; step++) {
			for (size_t i = 0; i < N; i++) { /* each step streams different blocks */
				srcs[i] = pool[rng_next(&s) % 64];
				sizes[i] = rng_next(&s) % (SZ + 1);
			}
			atomic_store(&calls, 0);
			atomic_store(&counting, step > 0); /* the first run may warm up lazily */
			int rc = rf_pipeline_run(p, N, srcs, sizes, sum_cb, &acc);
			atomic_store(&counting, 0);
			cr_assert_eq(rc, RF_OK, "%s", rf_errmsg());
			cr_assert_eq(atomic_load(&calls), 0, "backend %s, depth %u, step %d: %ld allocator calls in a run",
				     test_backend(), depth, step, atomic_load(&calls));
		}
		/* Negative control: a traced run allocates its event arrays, and the count must see it —
		 * proof that the library's own calls go through the interposed allocator. */
		char path[] = "/tmp/rf-noalloc-XXXXXX";
		int fd = mkstemp(path);
		cr_assert_geq(fd, 0);
		close(fd);
		cr_assert_eq(rf_pipeline_trace(p, path), RF_OK);
		atomic_store(&calls, 0);
		atomic_store(&counting, 1);
		cr_assert_eq(rf_pipeline_run(p, N, srcs, sizes, sum_cb, &acc), RF_OK, "%s", rf_errmsg());
		atomic_store(&counting, 0);
		cr_assert_gt(atomic_load(&calls), 0, "a traced run's allocations were not seen");
		remove(path);
		rf_pipeline_destroy(p);
	}
}

/* Runs of small blocks in file order read ahead of the slots (a window mapped at the first such run):
 * later runs, of new ranges each time, allocate nothing. */
Test(noalloc, file_runs_read_ahead_allocate_nothing)
{
	enum { SZ = 65536, NB = 96, STEPS = 6 };
	char path[] = "rf_noalloc_file_XXXXXX";
	int fd = mkstemp(path);
	cr_assert_geq(fd, 0);
	static unsigned char buf[SZ];
	for (unsigned i = 0; i < 2 * NB; i++) {
		memset(buf, (int)(i * 13 + 1), SZ);
		cr_assert_eq(write(fd, buf, SZ), SZ);
	}
	close(fd);
	rf_file *f;
	cr_assert_eq(rf_file_open(path, 0, &f), RF_OK, "%s", rf_errmsg());
	const unsigned char *d = rf_file_data(f);
	rf_pipeline_params pp = {.slot_bytes = SZ, .backend = test_backend()};
	rf_pipeline *p;
	cr_assert_eq(rf_pipeline_create(&pp, &p), RF_OK, "%s", rf_errmsg());
	static const void *srcs[NB];
	static size_t sizes[NB];
	unsigned long long acc = 0;
	for (int step = 0; step < STEPS; step++) {
		for (size_t i = 0; i < NB; i++) {
			srcs[i] = d + ((size_t)step * 8 + i) * SZ; /* a new range of the file each run */
			sizes[i] = SZ;
		}
		atomic_store(&calls, 0);
		atomic_store(&counting, step > 0);
		int rc = rf_pipeline_run(p, NB, srcs, sizes, sum_cb, &acc);
		atomic_store(&counting, 0);
		cr_assert_eq(rc, RF_OK, "%s", rf_errmsg());
		cr_assert_eq(atomic_load(&calls), 0, "backend %s, step %d: %ld allocator calls", test_backend(), step,
			     atomic_load(&calls));
	}
	rf_stats st;
	cr_assert_eq(rf_pipeline_stats(p, &st), RF_OK);
	/* (without io_uring the copy lanes pread a file run through the page cache: no window, nothing ahead) */
	if (strcmp(test_backend(), "threads") == 0 && strstr(rf_pipeline_describe(p), "files: pread (") == NULL)
		cr_assert_eq(st.total_ahead_blocks, (uint64_t)NB * STEPS, "the runs were read ahead: %llu blocks",
			     (unsigned long long)st.total_ahead_blocks);
	rf_pipeline_destroy(p);
	cr_assert_eq(rf_file_close(f), RF_OK);
	unlink(path);
}

static int slow_cb(void *user, const rf_block *b)
{
	struct timespec t0, t;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	do
		clock_gettime(CLOCK_MONOTONIC, &t);
	while ((t.tv_sec - t0.tv_sec) * 1000000000L + (t.tv_nsec - t0.tv_nsec) < 50000);
	return sum_cb(user, b);
}

/* depth = auto: the first run measures (it allocates its event arrays); the rule then builds every
 * candidate schedule at once, so the 9 probing runs that switch between them allocate nothing, and
 * the run that ends probing only frees the schedules that lost. Then nothing at all. */
Test(noalloc, depth_auto_probing_allocates_nothing)
{
	enum { N = 64, SZ = 4096, STEPS = 16 };
	static unsigned char pool[16][SZ];
	const void *srcs[N];
	size_t sizes[N];
	for (size_t i = 0; i < N; i++)
		srcs[i] = pool[i % 16], sizes[i] = SZ;
	setenv("RINGFETCH_DEPTH", "auto", 1);
	rf_pipeline_params pp = {.slot_bytes = SZ, .backend = test_backend()};
	rf_pipeline *p;
	cr_assert_eq(rf_pipeline_create(&pp, &p), RF_OK, "%s", rf_errmsg());
	unsigned long long acc = 0; /* (a 50 us compute per block keeps the rule's d small under load) */
	int ended = -1; /* the step after which probing ended */
	for (int step = 0; step < STEPS; step++) {
		atomic_store(&calls, 0);
		atomic_store(&frees, 0);
		atomic_store(&counting, step > 0);
		int rc = rf_pipeline_run(p, N, srcs, sizes, slow_cb, &acc);
		atomic_store(&counting, 0);
		cr_assert_eq(rc, RF_OK, "%s", rf_errmsg());
		long other = atomic_load(&calls) - atomic_load(&frees);
		cr_assert_eq(other, 0, "step %d (depth %u): %ld allocations in a run", step, rf_pipeline_depth(p), other);
		/* Probing takes 3 runs per candidate (2 or 3 candidates, depending on the rule's d and the
		 * slots): only the run that ends it may free, and only the losing schedules. */
		if (ended < 0 && strstr(rf_pipeline_describe(p), "probed") != NULL) {
			ended = step;
			cr_assert(step == 6 || step == 9, "probing ended after step %d", step);
		} else {
			cr_assert_eq(atomic_load(&frees), 0, "step %d: %ld frees in a run", step, atomic_load(&frees));
		}
	}
	/* (No probing only when the rule already chose the deepest ring the slots allow.) */
	cr_assert(ended >= 0 || rf_pipeline_depth(p) == 16, "%s", rf_pipeline_describe(p));
	rf_pipeline_destroy(p);
	unsetenv("RINGFETCH_DEPTH");
}
