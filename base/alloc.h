/* base/alloc.h — every heap allocation of the library goes through these, so that a test can make the
 * k-th fallible step fail (rf__fault_arm: allocations, thread creation, the topology, backend calls)
 * and check that each failure comes back as a clean error with nothing leaked. */
#ifndef RF_BASE_ALLOC_H
#define RF_BASE_ALLOC_H

#include <stddef.h>

void *rf__malloc(size_t n);
void *rf__calloc(size_t n, size_t m);
void *rf__realloc(void *p, size_t n);
void *rf__aligned_alloc(size_t align, size_t n);
char *rf__strdup(const char *s);

#ifdef RF_TESTING /* the testing build (base/test_hooks.h) */
int rf__fault(void);       /* 1 if this fallible step is the armed k-th one, else 0 */
void rf__fault_arm(long k); /* make the k-th fallible step from now fail (k >= 1), or disarm (k = 0) */
long rf__fault_steps(void); /* fallible steps since the last arm */
#else
#define rf__fault() 0 /* shipped: a constant, so every check folds away */
#endif

#endif
