/*
 * ringfetch/staging.h — where ring (staging) memory lives, and NUMA-local buffers for embedders.
 *
 * Every CPU pipeline's ring slots come from the staging layer: page-aligned memory bound with hwloc to
 * one NUMA node (BIND + STRICT, before first touch, then touched), served by a jemalloc arena per
 * (node, pinned). Placement is never silently wrong: when the kernel refuses binding (containers
 * without CAP_SYS_NICE, seccomp) the memory is ordinary memory and the placement says so, and why.
 *
 * Policies (rf_pipeline_params.staging, and the `policy` argument below), exact spelling:
 *   "auto"        (also NULL) the NUMA node of the calling thread's current core (for CPU pipelines:
 *                 the thread that creates the pipeline, which is the thread its computes run on);
 *   "node:N"      NUMA node with OS index N (as numactl and /sys/devices/system/node number them);
 *   "interleave"  pages interleaved over every NUMA node the process may use;
 *   "none"        ordinary unbound memory (the kernel places it at first touch).
 * Anything else ("", "Node:0", "node:", "node:-1", "node:1x", "node: 1") is RF_EINVAL.
 *
 * Page-locking for DMA (cudaHostRegister, after binding and touching) is for the CUDA side: the cuda
 * backend's pinned host ring and rf_cuda_staging_alloc() (<ringfetch/cuda.h>) come from pinned arenas
 * placed on the NUMA node nearest the GPU, and report pinned = 1. A mapping that cannot be page-locked
 * is an allocation error, never pageable memory passed off as pinned. CPU pipelines and
 * rf_staging_alloc do not ask for page-locked memory: pinned == 0 there is not a shortfall and does not
 * make `reason` non-empty.
 *
 * See docs/staging.md for how the node is chosen, what happens in containers, and what linking
 * jemalloc means for an embedding application.
 */
#ifndef RINGFETCH_STAGING_H
#define RINGFETCH_STAGING_H

#include "../ringfetch.h"

#ifdef __cplusplus
extern "C" {
#endif

/** Where some staging memory landed. */
typedef struct rf_placement {
	int numa_node;      /* OS index of the node the memory is bound to; for unbound memory the node its
	                       first page was found on, if the kernel says; -1 when unknown or interleaved */
	int bound;          /* 1 when the kernel bound the pages as the policy asked (to numa_node, or
	                       interleaved over every node for "interleave"); 0 otherwise */
	int pinned;         /* 1 when page-locked for DMA (cuda pipelines, rf_cuda_staging_alloc) */
	const char *reason; /* "" when bound; else a sentence saying why not ("policy none: ...",
	                       "binding refused by the kernel (EPERM ...): unbound memory"). A static
	                       string: valid for the life of the process. Never NULL. */
} rf_placement;

/**
 * Where the pipeline's ring slots live (all slots of a ring are one allocation, placed as one). For a
 * cuda pipeline, whose ring is device memory, this is its pinned host ring (the staging hop of
 * pageable sources): pinned = 1, on the NUMA node nearest the GPU when known.
 * Thread-safe; may be called while the pipeline runs.
 * \return RF_OK and *out;
 *         RF_EINVAL if p or out is NULL;
 *         RF_ENOTSUP if the pipeline's backend does not take its ring from the staging layer.
 */
RF_EXTERN int rf_pipeline_placement(const rf_pipeline *p, rf_placement *out);

/**
 * Allocate `bytes` of staging memory under `policy` (see the top of this header; NULL = "auto"):
 * NUMA-bound, already touched (resident), zero-filled, aligned to 64 bytes, and to 4096 (a page) when
 * bytes >= 4096. The caller owns it and releases it with rf_staging_free() — never free(). A block of
 * 4096 bytes or more is a mapping of its own (bytes rounded up to a page), returned to the system by
 * rf_staging_free(); smaller ones are carved from a jemalloc arena reserved for that (node, pinned)
 * pair, created on first use and kept for the life of the process (freed memory is reused, and
 * returned to the system by jemalloc's decay). Thread-safe.
 * \return RF_OK and *out;
 *         RF_EINVAL if out is NULL, bytes is 0, or policy is malformed or names a NUMA node this
 *                   process cannot use (rf_errmsg lists the nodes there are);
 *         RF_ENOMEM if memory (or a jemalloc arena) cannot be had; rf_errmsg names the step;
 *         RF_EBACKEND if the hwloc topology cannot be loaded.
 * A kernel that refuses binding is not an error, nor is an hwloc topology that does not describe this
 * system (HWLOC_XMLFILE, HWLOC_SYNTHETIC, HWLOC_THISSYSTEM=0: hwloc cannot bind from it): the memory
 * is unbound and rf_staging_placement() says why. On failure *out is untouched and nothing is leaked.
 */
RF_EXTERN int rf_staging_alloc(size_t bytes, const char *policy, void **out);

/** Release memory from rf_staging_alloc(). NULL is a no-op. Any thread may free. */
RF_EXTERN void rf_staging_free(void *p);

/**
 * Where the staging memory at p (any address inside a live rf_staging_alloc() block, or inside a
 * pipeline's ring) landed. Thread-safe. For memory already freed the result is unspecified (the region
 * may still be cached by the arena, and then RF_OK describes where it was).
 * \return RF_OK and *out;
 *         RF_EINVAL if out is NULL, or p is not inside staging memory.
 */
RF_EXTERN int rf_staging_placement(const void *p, rf_placement *out);

#ifdef __cplusplus
}
#endif

#endif /* RINGFETCH_STAGING_H */
