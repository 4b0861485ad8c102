/*
 * ringfetch/staging.h — staging memory (host slots, staging buffers) and NUMA-local buffers for embedders.
 *
 * Policies (rf_pipeline_params.staging and `policy` below), exact spelling, anything else RF_EINVAL:
 *   "auto" (or NULL)  the NUMA node of the calling thread's current core;
 *   "node:N"          the NUMA node with OS index N;
 *   "interleave"      pages interleaved over every node the process may use;
 *   "none"            ordinary unbound memory.
 * Page-locked (pinned) memory is for the CUDA side only (<ringfetch/cuda.h>); a mapping that cannot be
 * page-locked there is an allocation error. Elsewhere pinned == 0 is no shortfall. See docs/staging.md.
 */
#ifndef RINGFETCH_STAGING_H
#define RINGFETCH_STAGING_H

#include "../ringfetch.h"

#ifdef __cplusplus
extern "C" {
#endif

/** Where some staging memory landed. */
typedef struct rf_placement {
	int numa_node;      /* the node bound to; unbound: the node of its first page if known; else -1 */
	int bound;          /* 1 when the pages are bound as the policy asked */
	int pinned;         /* 1 when page-locked for DMA (cuda pipelines, rf_cuda_staging_alloc) */
	const char *reason; /* "" when bound; else why not. Static, never NULL. */
} rf_placement;

/**
 * Where the pipeline's slots live (one allocation); for a cuda pipeline, its pinned staging buffers.
 * Thread-safe, also while the pipeline runs.
 * \return RF_OK and *out;
 *         RF_EINVAL if p or out is NULL;
 *         RF_ENOTSUP if the pipeline's backend does not take its ring from the staging layer.
 */
RF_EXTERN int rf_pipeline_placement(const rf_pipeline *p, rf_placement *out);

/**
 * Allocate `bytes` of staging memory under `policy` (NULL = "auto"): bound, touched, zero-filled,
 * aligned to 64 bytes, and to a page when bytes >= 4096. The caller owns it and releases it with
 * rf_staging_free(), never free(). Thread-safe. A refused binding (or a topology that is not this
 * system's) is no error: the memory is unbound and rf_staging_placement() says why.
 * \return RF_OK and *out;
 *         RF_EINVAL if out is NULL, bytes is 0, or policy is malformed or names a NUMA node this
 *                   process cannot use (rf_errmsg lists the nodes there are);
 *         RF_ENOMEM if memory (or a jemalloc arena) cannot be had; rf_errmsg names the step;
 *         RF_EBACKEND if the hwloc topology cannot be loaded.
 * On failure *out is untouched and nothing is leaked.
 */
RF_EXTERN int rf_staging_alloc(size_t bytes, const char *policy, void **out);

/** Release memory from rf_staging_alloc(). NULL is a no-op. Any thread may free. */
RF_EXTERN void rf_staging_free(void *p);

/**
 * Where the staging memory at p (inside a live rf_staging_alloc() block or a pipeline's ring) landed.
 * Thread-safe; for freed memory the result is unspecified.
 * \return RF_OK and *out;
 *         RF_EINVAL if out is NULL, or p is not inside staging memory.
 */
RF_EXTERN int rf_staging_placement(const void *p, rf_placement *out);

#ifdef __cplusplus
}
#endif

#endif /* RINGFETCH_STAGING_H */
