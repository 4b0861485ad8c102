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

typedef struct rf__cuda_api {
	const char *what; /* "cudart" or the name of a test double */
	int (*get_device_count)(int *n);
	int (*get_device)(int *dev);
	int (*set_device)(int dev);
	/* Name of device dev ("NVIDIA H200"), and the nearest host NUMA node (-1 when none is known:
	 * cudaDevAttrHostNumaId, else the device's cpuset from sysfs mapped to a node by hwloc). */
	int (*device_name)(int dev, char *buf, size_t cap);
	int (*device_numa_node)(int dev, int *node);
	int (*stream_create)(void **s); /* non-blocking with respect to the legacy default stream */
	int (*stream_destroy)(void *s);
	int (*stream_synchronize)(void *s);
	int (*stream_query)(void *s); /* 0 idle, 600 (cudaErrorNotReady) busy, else an error */
	int (*event_create)(void **e); /* cudaEventDisableTiming */
	int (*event_destroy)(void *e);
	int (*event_record)(void *e, void *s);
	int (*stream_wait_event)(void *s, void *e);
	int (*memcpy_async)(void *dst, const void *src, size_t n, void *s); /* cudaMemcpyDefault */
	int (*launch_host_func)(void *s, rf__cuda_host_fn fn, void *arg);
	int (*malloc_device)(void **p, size_t n);
	int (*free_device)(void *p);
	int (*host_register)(void *p, size_t n); /* cudaHostRegisterPortable */
	int (*host_unregister)(void *p);
	/* 1 when [p, p + n) may be copied by DMA without staging (page-locked host memory, device or
	 * managed memory), 0 for pageable memory. Errors are reported as pageable (0). */
	int (*is_dma_capable)(const void *p, size_t n);
	const char *(*error_name)(int err);
	const char *(*error_string)(int err);
	int (*get_last_error)(void); /* clears a non-sticky error (cudaGetLastError) */
	int (*init_context)(void);   /* create the current device's primary context now (cudaFree(0)) */
} rf__cuda_api;

#define RF__CUDA_NOT_READY 600 /* cudaErrorNotReady */

/* The table the backend calls: &rf__cuda_api_real when the toolkit was found, else NULL (no "cuda"
 * backend). Tests may point it at a test double before creating pipelines; not thread-safe. */
extern const rf__cuda_api *rf__cuda;
extern const rf__cuda_api rf__cuda_api_real;

/* The embedder API of <ringfetch/cuda.h>, CUDA-free (backends/cuda.c); cuda_rt.c exports it under
 * the public names. */
int rf__cuda_host_register(const void *p, size_t bytes);
int rf__cuda_host_unregister(const void *p);
int rf__cuda_staging_alloc(size_t bytes, const char *policy, int device, void **out);

/* cudaGetDeviceCount failures that mean "no usable GPU here" rather than a broken installation. */
static inline int rf__cuda_is_nodev(int err)
{
	return err == 35 /* InsufficientDriver */ || err == 100 /* NoDevice */ || err == 3 /* InitializationError */ ||
	       err == 46 /* DevicesUnavailable */ || err == 803 /* SystemDriverMismatch */ ||
	       err == 804 /* CompatNotSupportedOnDevice */ || err == 34 /* StubLibrary */;
}

#endif
