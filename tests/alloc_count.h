/* tests/alloc_count.h — the executable's own malloc family, counting calls: included by the noalloc
 * suites (test_noalloc.c, test_keyed_noalloc.c), whose definitions then come first in symbol
 * resolution, for the shared library too, and forward to glibc's __libc_* entry points. Calls are
 * counted while `counting` is set. Include it in one translation unit per executable; not for
 * sanitizer builds, which interpose the allocator themselves. */
#ifndef RF_TESTS_ALLOC_COUNT_H
#define RF_TESTS_ALLOC_COUNT_H

#include <stdatomic.h>
#include <stddef.h>

extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void *__libc_memalign(size_t, size_t);
extern void __libc_free(void *);

static atomic_int counting;
static atomic_long calls, frees; /* calls: every allocator call; frees: free() alone */

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
	if (atomic_load_explicit(&counting, memory_order_relaxed))
		atomic_fetch_add_explicit(&frees, 1, memory_order_relaxed);
	count();
	__libc_free(p);
}

#endif
