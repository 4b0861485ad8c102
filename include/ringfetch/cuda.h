/*
 * ringfetch/cuda.h — the CUDA side of ringfetch: the only public header that includes a CUDA header.
 * Available when the library was built with the CUDA toolkit (else no cuda backend, no rf_cuda_*).
 *
 * The "cuda" backend (rf_pipeline_params.memory = RF_MEMORY_DEVICE, backend "cuda" or "auto"):
 *  - the ring's slots are device memory on params.device (cudaMallocAsync where the device has memory
 *    pools, else cudaMalloc; freed stream-ordered). rf_block.data is a device pointer, rf_block.stream
 *    the stream to enqueue the block's compute on. The callback enqueues its kernels and returns without
 *    synchronising; the bytes are there when that work runs, and the slot is not overwritten before it
 *    has finished.
 *  - rf_pipeline_run enqueues the run (cudaMemcpyAsync on one stream per copy queue, events and
 *    cudaStreamWaitEvent), at most depth + 32 computes ahead of the device (the reach of
 *    rf_pipeline_cancel), and synchronises once at the end: all work it and the callbacks enqueued is done.
 *  - Page-locked (cudaHostAlloc, cudaHostRegister, rf_cuda_host_register, rf_cuda_staging_alloc) or
 *    device sources are copied directly; only when all their bytes are (a gap between registrations is
 *    pageable). Pageable sources and files' bytes (rf_file_open) take two hops: STAGE ops on host lanes
 *    (rf-stage-N) fill pinned staging buffers on the GPU's NUMA node (else the caller's; placement says),
 *    page-locked on the first block that needs it: where that is refused, only runs with such a block
 *    fail, with the reason. Register long-lived sources once at set-up (pinning runs at a few GB/s).
 *  - rf_pipeline_placement() reports the pinned staging buffers (pinned = 1 when page-locked).
 *  - Errors: rf_errmsg() names the failed CUDA call and gives cudaGetErrorString(). A failure while
 *    enqueueing drains what was enqueued and leaves the pipeline usable. An error surfacing when the run
 *    synchronises (a faulting kernel) is sticky in CUDA: this and every later run returns RF_EBACKEND, and
 *    the context is dead for every pipeline on that device (docs/cuda.md).
 *  - Without a usable GPU rf_pipeline_create returns RF_ENODEV; rf_errmsg() says why (a driver older than
 *    the runtime built with is named as such, with both versions).
 *  - Traces and statistics time the host's enqueueing, not the device.
 *  - Keyed use: stream-ordered, no host wait. acquire makes `stream` (NULL: the legacy default stream)
 *    wait on the key's copy; release records an event the slot's next copy waits for. A stream being
 *    captured is refused (RF_ENOTSUP). rf_pipeline_destroy after keyed use synchronises params.device.
 * Every call leaves the thread's current context as it was, "none" included; callbacks run with
 * params.device current. The library clears only the CUDA errors its own calls caused.
 */
#ifndef RINGFETCH_CUDA_H
#define RINGFETCH_CUDA_H

#include "../ringfetch.h" /* and, through it, <ringfetch/config.h> (RF_HAVE_CUDA) */

#include <cuda_runtime_api.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/** The stream a cuda pipeline's compute callback must enqueue block `b`'s work on. */
static inline cudaStream_t rf_block_stream(const rf_block *b)
{
	return (cudaStream_t)b->stream;
}

/**
 * Page-lock [p, p + bytes) for DMA (cudaHostRegister, portable; a read-only mapping read-only where
 * supported), so that pipelines copy it directly. For long-lived sources: it costs a few copies.
 * \return RF_OK;
 *         RF_EINVAL if p is NULL or bytes is 0;
 *         RF_ENODEV if no GPU is usable (rf_errmsg says why);
 *         RF_EBACKEND if cudaHostRegister fails (e.g. already registered); rf_errmsg has CUDA's words.
 */
RF_EXTERN int rf_cuda_host_register(const void *p, size_t bytes);

/**
 * Undo rf_cuda_host_register(p, ...) (p must be the pointer registered).
 * \return RF_OK; RF_EINVAL if p is NULL or not registered; RF_ENODEV if no GPU is usable.
 */
RF_EXTERN int rf_cuda_host_unregister(const void *p);

/**
 * Allocate `bytes` of page-locked staging memory for `device`, on the GPU's NUMA node (policy
 * "auto"/NULL; else as in <ringfetch/staging.h>). Release it with rf_staging_free().
 * \return RF_OK and *out;
 *         RF_EINVAL if out is NULL, bytes is 0, or policy is malformed or names a node not usable;
 *         RF_ENODEV if `device` is not a usable GPU;
 *         RF_ENOMEM if memory cannot be had or page-locked (rf_errmsg names the step and CUDA's error).
 */
RF_EXTERN int rf_cuda_staging_alloc(size_t bytes, const char *policy, int device, void **out);

#ifdef __cplusplus
}
#endif

#endif /* RINGFETCH_CUDA_H */
