/* base/alloc.c — allocation wrappers and the k-th-step fault injection (see alloc.h). */
#include "base/alloc.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#ifdef RF_TESTING
static atomic_long rf__fault_at;    /* 0: disarmed */
static atomic_long rf__fault_count; /* steps since arming */

int rf__fault(void)
{
	long at = atomic_load_explicit(&rf__fault_at, memory_order_relaxed);
	if (at == 0)
		return 0;
	return atomic_fetch_add_explicit(&rf__fault_count, 1, memory_order_relaxed) + 1 == at;
}

void rf__fault_arm(long k)
{
	atomic_store(&rf__fault_count, 0);
	atomic_store(&rf__fault_at, k);
}

long rf__fault_steps(void)
{
	return atomic_load(&rf__fault_count);
}
#endif

void *rf__malloc(size_t n)
{
	return rf__fault() ? NULL : malloc(n);
}

void *rf__calloc(size_t n, size_t m)
{
	return rf__fault() ? NULL : calloc(n, m);
}

void *rf__realloc(void *p, size_t n)
{
	return rf__fault() ? NULL : realloc(p, n);
}

void *rf__aligned_alloc(size_t align, size_t n)
{
	return rf__fault() ? NULL : aligned_alloc(align, n);
}

char *rf__strdup(const char *s)
{
	return rf__fault() ? NULL : strdup(s);
}
