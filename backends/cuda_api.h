/* backends/cuda_api.h — the CUDA runtime calls the cuda backend makes, as a table of functions with
 * CUDA-free types (handles are void *, errors the cudaError_t value as an int, 0 = success). The backend
 * includes no CUDA header, so it builds everywhere and its tests run without a GPU against a simulator
 * (tests/cuda_sim.c); the real table (cuda_rt.c, built with the toolkit) forwards to the CUDA runtime. */
#ifndef RF_BACKENDS_CUDA_API_H
#define RF_BACKENDS_CUDA_API_H

#include <stddef.h>

typedef void (*rf__cuda_host_fn)(void *arg);

/* What a CUDA error means to the backend; the numbers themselves stay in the table's implementation. */
enum rf__cuda_errkind {
	RF__CUE_OK = 0,
	RF__CUE_NOT_READY, /* cudaErrorNotReady: a query found work still pending */
	RF__CUE_NOMEM,     /* cudaErrorMemoryAllocation */
	RF__CUE_OTHER
};

typedef struct rf__cuda_api {
	int (*get_device_count)(int *n);
	int (*get_device)(int *dev); /* says 0 when the thread has no current context */
	int (*set_device)(int dev);  /* makes dev's primary context current (creating it) */
	/* The thread's current context (NULL: none), got and set back exactly through the driver: the
	 * runtime cannot say "no context", and restoring with cudaSetDevice(0) would create device 0's. */
	int (*ctx_get)(void **ctx);
	int (*ctx_set)(void *ctx);
	/* 1000 * major + 10 * minor: the driver's (0 when none) and the runtime's built with. */
	int (*driver_version)(int *v);
	int (*runtime_version)(void);
	int (*device_name)(int dev, char *buf, size_t cap);
	int (*device_numa_node)(int dev, int *node); /* the nearest host NUMA node; -1 when unknown */
	int (*stream_create)(void **s); /* non-blocking with respect to the legacy default stream */
	int (*stream_destroy)(void *s);
	int (*stream_synchronize)(void *s);
	int (*device_synchronize)(void); /* the current device */
	int (*event_create)(void **e); /* cudaEventDisableTiming */
	int (*event_destroy)(void *e);
	int (*event_record)(void *e, void *s);
	int (*event_synchronize)(void *e);
	int (*event_query)(void *e); /* 0 done, a RF__CUE_NOT_READY error pending, else an error */
	/* Is s (NULL: the legacy default stream) being captured (1/0)? The library's own calls run in
	 * thread-local capture mode (exchanged), so they never disturb another thread's capture. */
	int (*stream_capturing)(void *s, int *yes);
	int (*capture_mode_local)(int *saved);
	int (*capture_mode_restore)(int saved);
	int (*stream_wait_event)(void *s, void *e);
	int (*memcpy_async)(void *dst, const void *src, size_t n, void *s); /* cudaMemcpyDefault */
	/* Stream-ordered on s where the device has memory pools, else cudaMalloc / cudaFree. */
	int (*malloc_device)(void **p, size_t n, void *s);
	int (*free_device)(void *p, void *s);
	int (*host_register)(void *p, size_t n); /* portable; a read-only mapping read-only where supported */
	int (*host_unregister)(void *p);
	/* 1 when p is in memory DMA reads without staging (page-locked host, device, managed), with
	 * [*start, *start + *len) containing p and all of that kind (at least up to p's page end); 0 for
	 * pageable memory and on errors. */
	int (*dma_range)(const void *p, const void **start, size_t *len);
	const char *(*error_name)(int err);
	const char *(*error_string)(int err);
	int (*error_kind)(int err);   /* enum rf__cuda_errkind */
	int (*get_last_error)(void);  /* clears a non-sticky error (cudaGetLastError) */
	int (*init_context)(void);    /* create the current device's primary context now (cudaFree(0)) */
} rf__cuda_api;

/* The table the backend calls: the CUDA runtime's (cuda_rt.c) when the toolkit was found, else NULL (no
 * "cuda" backend). Tests may point it at a double before creating pipelines; not thread-safe. */
extern const rf__cuda_api *rf__cuda;

/* The embedder API of <ringfetch/cuda.h> (cuda.c); cuda_rt.c exports it under the public names. */
int rf__cuda_host_register(const void *p, size_t bytes);
int rf__cuda_host_unregister(const void *p);
int rf__cuda_staging_alloc(size_t bytes, const char *policy, int device, void **out);

#endif
