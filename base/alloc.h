/* base/alloc.h — every heap allocation of the library goes through these, so that a test can make
 * the k-th one fail (rf__fault_arm) and sweep k over create, instantiate and run: each failure must come
 * back as a clean error with nothing leaked. rf__fault() also guards thread creation, the hwloc topology
 * and every backend call. Unarmed, the check is one relaxed load; in the shipped library (built without
 * RF_TESTING) it is a constant 0. */
#ifndef RF_BASE_ALLOC_H
#define RF_BASE_ALLOC_H

#include <stddef.h>

void *rf__malloc(size_t n);
void *rf__calloc(size_t n, size_t m);
void *rf__realloc(void *p, size_t n);
void *rf__aligned_alloc(size_t align, size_t n);
char *rf__strdup(const char *s);

#ifdef RF_TESTING /* the testing build (base/test_hooks.h) */
/* 1 if this fallible step must fail now (the armed k-th step), else 0. */
int rf__fault(void);
/* Tests: make the k-th fallible step from now fail (k >= 1), or disarm (k = 0). */
void rf__fault_arm(long k);
/* Tests: how many fallible steps ran since the last arm. */
long rf__fault_steps(void);
#else
/* The shipped library injects no fault: a constant, so every check folds away, at -O0 too. */
#define rf__fault() 0
#endif

#endif
