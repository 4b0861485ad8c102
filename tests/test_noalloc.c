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

extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void *__libc_memalign(size_t, size_t);
extern void __libc_free(void *);

static atomic_int counting;
static atomic_long calls;

static void count(void)
{
	if (atomic_load_explicit(&counting, memory_order_relaxed))
		atomic_fetch_add_explicit(&calls, 1, memory_order_relaxed);
}

void *malloc(size_t n)
{
	count();
	return __libc_malloc(n);
}

void *calloc(size_t n, size_t m)
{
	count();
	return __libc_calloc(n, m);
}

void *realloc(void *p, size_t n)
{
	count();
	return __libc_realloc(p, n);
}

void *aligned_alloc(size_t a, size_t n)
{
	count();
	return __libc_memalign(a, n);
}

int posix_memalign(void **out, size_t a, size_t n)
{
	count();
	void *p = __libc_memalign(a, n);
	if (p == NULL)
		return 12; /* ENOMEM */
	*out = p;
	return 0;
}

void free(void *p)
{
	count();
	__libc_free(p);
}

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
