/*
 * ringfetch/cuda.h — the CUDA side of ringfetch: the only public header that includes a CUDA header.
 * Available when the library was built with the CUDA toolkit (the "cuda" backend exists then; a build
 * without it has no cuda backend and no rf_cuda_* symbols).
 *
 * The "cuda" backend (rf_pipeline_params.memory = RF_MEMORY_DEVICE, with backend "cuda" or "auto"):
 *  - the ring's slots are device memory on params.device (cudaMallocAsync where the device has memory
 *    pools, else cudaMalloc; depth * slot_bytes, once per pipeline; freed stream-ordered, without
 *    synchronising the device); rf_block.data is a device pointer and rf_block.stream the stream to enqueue the block's
 *    compute on (rf_block_stream() below). The callback enqueues its kernels and returns; it must not
 *    synchronise that stream. The block's bytes are there when the enqueued work runs, and the slot
 *    is not overwritten before everything enqueued on that stream by the callback has finished.
 *  - rf_pipeline_run enqueues the run (copies as cudaMemcpyAsync on one stream per copy queue,
 *    ordering as events and cudaStreamWaitEvent), staying at most depth + 32 computes ahead of the
 *    device (so rf_pipeline_cancel takes effect within that many blocks), and synchronises once at the
 *    end: when it returns, all the work it and the callbacks enqueued on the given streams has finished.
 *  - Sources in page-locked memory (cudaHostAlloc, cudaHostRegister, rf_cuda_host_register,
 *    rf_cuda_staging_alloc) or device memory are copied directly. Pageable sources (plain malloc) take
 *    two hops: the library's staging threads (rf-stage-N, one per copy queue and helpers, started at
 *    create) copy them into a pinned host ring placed on the NUMA node nearest the GPU (the caller's
 *    node when the process may not use that one; placement says so), and the copy stream moves them on
 *    from there; a file's bytes (rf_file_open) are read into that ring. The ring is page-locked on the
 *    first block that needs it: where page-locking is refused, pipelines fed pinned or device memory
 *    work and a run with a pageable block fails with the reason. A source counts as page-locked only
 *    when all of its bytes are (registrations with a gap between them are pageable in the gap).
 *    Registering long-lived sources once (rf_cuda_host_register) avoids the extra hop; do it at set-up,
 *    pinning runs at only a few GB/s.
 *  - rf_pipeline_placement() reports the pinned host ring (pinned = 1 when page-locked).
 *  - Errors: every CUDA call is checked; rf_errmsg() names the call and gives cudaGetErrorString().
 *    A failure while enqueueing drains what was enqueued and leaves the pipeline usable. An error that
 *    surfaces when the run synchronises (a faulting kernel, an illegal address) is sticky in CUDA: the
 *    run returns RF_EBACKEND and so does every later run of that pipeline; destroy it. The CUDA context
 *    is then dead for every pipeline of the process on that device (docs/cuda.md).
 *  - rf_pipeline_create with "cuda" on a machine without a usable GPU returns RF_ENODEV and rf_errmsg()
 *    says why (the CUDA error; a driver older than the runtime the library was built with is named as
 *    such, with both versions).
 *  - Traces and statistics of a cuda pipeline time the host's enqueueing, not the device.
 *  - Keyed use (rf_pipeline_prefetch/acquire/release): stream-ordered, no host wait. acquire makes
 *    `stream` (NULL: the legacy default stream; cudaStreamPerThread too) wait on the key's copy;
 *    release records an event on the block's stream that the slot's next copy waits for. A stream
 *    being captured is refused (RF_ENOTSUP) wherever the call would enqueue on it. Keyed sources are
 *    copied by DMA directly: register them (rf_cuda_host_register), pageable ones copy synchronously.
 *    rf_pipeline_destroy after keyed use synchronises params.device before freeing the ring.
 * The calling thread's current context is left as it was by every ringfetch call — "none" included:
 * no call leaves a thread that had no context with one; callbacks run with params.device current.
 * The library clears only CUDA errors its own calls caused (cudaGetLastError), never the application's.
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
 * Page-lock [p, p + bytes) for DMA (cudaHostRegister, portable to every device; a read-only mapping
 * such as an mmap'ed weight file read-only where the device supports it), so that pipelines
 * copy it directly instead of through the pinned host ring. Meant for long-lived sources registered
 * once at set-up: registration costs about as much as copying the bytes a few times.
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
 * Allocate `bytes` of page-locked staging memory for `device`: bound to the NUMA node nearest the GPU
 * (policy "auto"/NULL; "node:N", "interleave", "none" as in <ringfetch/staging.h>), touched, then
 * registered with cudaHostRegister, from a jemalloc arena kept per (node, pinned). Release it with
 * rf_staging_free(); rf_staging_placement() reports pinned = 1.
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
