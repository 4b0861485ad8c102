/* backends/cuda_api.h — the CUDA runtime calls the cuda backend makes, as a table of functions with
 * CUDA-free types (handles are void *, errors are the cudaError_t value as an int, 0 = success).
 *
 * Why a table: backends/cuda.c contains the whole lowering to streams, events and stream waits but
 * never includes a CUDA header, so it builds everywhere and its tests run on machines without a GPU:
 * tests/test_cuda_record.c swaps in a table that records every call and simulates streams (FIFO per
 * stream, events that capture their latest record, waits that block a stream) in a random but legal
 * order. The real table (backends/cuda_rt.c, built only when the CUDA toolkit is found) forwards to
 * the CUDA runtime, statically linked. */
#ifndef RF_BACKENDS_CUDA_API_H
#define RF_BACKENDS_CUDA_API_H

#include <stddef.h>

typedef void (*rf__cuda_host_fn)(void *arg);

/* What a CUDA error means to the backend. The error numbers themselves stay in the table's
 * implementation (cuda_rt.c maps cudaError_t, a test double its own): nothing else compares them. */
enum rf__cuda_errkind {
	RF__CUE_OK = 0,
	RF__CUE_NOT_READY, /* cudaErrorNotReady: a query found work still pending */
	RF__CUE_NOMEM,     /* cudaErrorMemoryAllocation */
	RF__CUE_NODEV,     /* no usable GPU here (no device, no or too old a driver, stub library, ...) */
	RF__CUE_OTHER
};

typedef struct rf__cuda_api {
	const char *what; /* "cudart" or the name of a test double */
	int (*get_device_count)(int *n);
	int (*get_device)(int *dev); /* says 0 when the thread has no current context */
	int (*set_device)(int dev);  /* makes dev's primary context current (creating it) */
	/* The calling thread's current context (NULL: none) and setting it back exactly (NULL: none),
	 * through the driver (cuCtxGetCurrent / cuCtxSetCurrent via cudaGetDriverEntryPoint): the runtime
	 * alone cannot say "no context", and restoring with cudaSetDevice(0) would create device 0's. */
	int (*ctx_get)(void **ctx);
	int (*ctx_set)(void *ctx);
	/* Versions as CUDA encodes them (1000 * major + 10 * minor): the driver's (0 when none is
	 * installed) and the runtime's this library was built with (CUDART_VERSION). */
	int (*driver_version)(int *v);
	int (*runtime_version)(void);
	/* Name of device dev ("NVIDIA H200"), and the nearest host NUMA node (-1 when none is known:
	 * cudaDevAttrHostNumaId where the toolkit has it, else the device's cpuset mapped by hwloc). */
	int (*device_name)(int dev, char *buf, size_t cap);
	int (*device_numa_node)(int dev, int *node);
	int (*stream_create)(void **s); /* non-blocking with respect to the legacy default stream */
	int (*stream_destroy)(void *s);
	int (*stream_synchronize)(void *s);
	int (*device_synchronize)(void); /* the current device (cudaDeviceSynchronize) */
	int (*stream_query)(void *s); /* 0 idle, a RF__CUE_NOT_READY error busy, else an error */
	int (*event_create)(void **e); /* cudaEventDisableTiming */
	int (*event_destroy)(void *e);
	int (*event_record)(void *e, void *s);
	int (*event_synchronize)(void *e);
	int (*event_query)(void *e); /* 0 done, a RF__CUE_NOT_READY error pending, else an error */
	/* Stream capture: is s (NULL = the legacy default stream) being captured (1/0)? And the calling
	 * thread's capture mode, exchanged: the library's own calls run in thread-local mode
	 * (cudaThreadExchangeStreamCaptureMode), so they never disturb another thread's capture. */
	int (*stream_capturing)(void *s, int *yes);
	int (*capture_mode_local)(int *saved);
	int (*capture_mode_restore)(int saved);
	int (*stream_wait_event)(void *s, void *e);
	int (*memcpy_async)(void *dst, const void *src, size_t n, void *s); /* cudaMemcpyDefault */
	int (*launch_host_func)(void *s, rf__cuda_host_fn fn, void *arg);
	/* Device memory, stream-ordered on s where the device has memory pools (cudaMallocAsync /
	 * cudaFreeAsync: no device-wide synchronisation on free), else cudaMalloc / cudaFree. */
	int (*malloc_device)(void **p, size_t n, void *s);
	int (*free_device)(void *p, void *s);
	/* cudaHostRegisterPortable; a read-only mapping (an mmap'ed weight file) is registered with
	 * cudaHostRegisterReadOnly where the device supports it. */
	int (*host_register)(void *p, size_t n);
	int (*host_unregister)(void *p);
	/* Is p in memory DMA can read without staging (page-locked host, device or managed memory)? 1 and
	 * the range [*start, *start + *len) that contains p and is all of that kind (the whole allocation
	 * or registration when the driver says, else at least up to p's page end); 0 for pageable memory.
	 * Errors read as pageable. */
	int (*dma_range)(const void *p, const void **start, size_t *len);
	const char *(*error_name)(int err);
	const char *(*error_string)(int err);
	int (*error_kind)(int err);   /* enum rf__cuda_errkind */
	int (*get_last_error)(void);  /* clears a non-sticky error (cudaGetLastError) */
	int (*init_context)(void);    /* create the current device's primary context now (cudaFree(0)) */
} rf__cuda_api;

/* The table the backend calls: &rf__cuda_api_real when the toolkit was found, else NULL (no "cuda"
 * backend). Tests may point it at a test double before creating pipelines; not thread-safe. */
extern const rf__cuda_api *rf__cuda;
extern const rf__cuda_api rf__cuda_api_real;

/* The embedder API of <ringfetch/cuda.h>, CUDA-free (backends/cuda_embed.c); cuda_rt.c exports it
 * under the public names. */
int rf__cuda_host_register(const void *p, size_t bytes);
int rf__cuda_host_unregister(const void *p);
int rf__cuda_staging_alloc(size_t bytes, const char *policy, int device, void **out);

#endif
