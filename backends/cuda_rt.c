/* backends/cuda_rt.c — the real rf__cuda_api: forwards to the CUDA runtime, linked statically (a binary
 * needs only the driver). Built only with CUDAToolkit; the one library file including a CUDA header. */
#include "backends/cuda_api.h"
#include "memory/topology.h"

#include <cuda.h>
#include <cuda_runtime_api.h>
#include <hwloc.h>
#include <hwloc/cudart.h>
#include <stdint.h>
#include <stdio.h>

typedef CUresult (*rt_ctx_get_fn)(CUcontext *);
typedef CUresult (*rt_ctx_set_fn)(CUcontext);
typedef CUresult (*rt_ptr_attr_fn)(void *, CUpointer_attribute, CUdeviceptr);

static void *rt_entry(const char *sym)
{
	void *fn = NULL;
	cudaError_t e;
#if CUDART_VERSION >= 12050
	e = cudaGetDriverEntryPointByVersion(sym, &fn, 12000, cudaEnableDefault, NULL);
#elif CUDART_VERSION >= 12000
	e = cudaGetDriverEntryPoint(sym, &fn, cudaEnableDefault, NULL);
#else
	e = cudaGetDriverEntryPoint(sym, &fn, cudaEnableDefault);
#endif
	if (e != cudaSuccess) {
		(void)cudaGetLastError(); /* our call's error, not the application's */
		return NULL;
	}
	return fn;
}

static int rt_ctx_get(void **ctx)
{
	static rt_ctx_get_fn fn;
	if (fn == NULL && (fn = (rt_ctx_get_fn)rt_entry("cuCtxGetCurrent")) == NULL)
		return (int)cudaErrorNotSupported;
	CUcontext c = NULL;
	if (fn(&c) != CUDA_SUCCESS)
		return (int)cudaErrorUnknown;
	*ctx = c;
	return 0;
}

static int rt_ctx_set(void *ctx)
{
	static rt_ctx_set_fn fn;
	if (fn == NULL && (fn = (rt_ctx_set_fn)rt_entry("cuCtxSetCurrent")) == NULL)
		return (int)cudaErrorNotSupported;
	return fn((CUcontext)ctx) == CUDA_SUCCESS ? 0 : (int)cudaErrorUnknown;
}

static int rt_device_name(int dev, char *buf, size_t cap)
{
	struct cudaDeviceProp prop;
	cudaError_t e = cudaGetDeviceProperties(&prop, dev);
	if (e != cudaSuccess)
		return (int)e;
	snprintf(buf, cap, "%s", prop.name);
	return 0;
}

/* cudaDevAttrHostNumaId; else the one node the device's local CPUs cover (hwloc, from sysfs: the full
 * cpuset when it cannot tell). -1 when neither gives exactly one node. */
static int rt_device_numa_node(int dev, int *node)
{
	*node = -1;
#if CUDART_VERSION >= 12020 /* cudaDevAttrHostNumaId is new in 12.2 */
	int id = -1;
	if (cudaDeviceGetAttribute(&id, cudaDevAttrHostNumaId, dev) == cudaSuccess && id >= 0) {
		*node = id;
		return 0;
	}
	(void)cudaGetLastError(); /* ours */
#endif
	hwloc_topology_t topo = rf__topo_acquire();
	if (topo == NULL)
		return 0;
	hwloc_cpuset_t cs = hwloc_bitmap_alloc();
	hwloc_nodeset_t ns = hwloc_bitmap_alloc();
	if (cs != NULL && ns != NULL && hwloc_cudart_get_device_cpuset(topo, dev, cs) == 0 &&
	    !hwloc_bitmap_isequal(cs, hwloc_topology_get_complete_cpuset(topo))) {
		hwloc_cpuset_to_nodeset(topo, cs, ns);
		if (hwloc_bitmap_weight(ns) == 1)
			*node = hwloc_bitmap_first(ns);
	}
	hwloc_bitmap_free(cs);
	hwloc_bitmap_free(ns);
	rf__topo_release(topo);
	return 0;
}

/* A new handle, NULL when creation failed (the backend destroys only those made). */
#define RT_CREATE(name, type, call)                                                                         \
	static int rt_##name(void **out)                                                                    \
	{                                                                                                   \
		type h;                                                                                     \
		cudaError_t e = call;                                                                       \
		*out = e == cudaSuccess ? (void *)h : NULL;                                                 \
		return (int)e;                                                                              \
	}
RT_CREATE(stream_create, cudaStream_t, cudaStreamCreateWithFlags(&h, cudaStreamNonBlocking))
RT_CREATE(event_create, cudaEvent_t, cudaEventCreateWithFlags(&h, cudaEventDisableTiming))

static int rt_stream_capturing(void *s, int *yes)
{
	enum cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
	cudaError_t e = cudaStreamIsCapturing((cudaStream_t)s, &st);
	*yes = st != cudaStreamCaptureStatusNone;
	return (int)e;
}

static int rt_capture_mode_local(int *saved)
{
	enum cudaStreamCaptureMode m = cudaStreamCaptureModeThreadLocal;
	cudaError_t e = cudaThreadExchangeStreamCaptureMode(&m);
	*saved = (int)m;
	return (int)e;
}

static int rt_capture_mode_restore(int saved)
{
	enum cudaStreamCaptureMode m = (enum cudaStreamCaptureMode)saved;
	return (int)cudaThreadExchangeStreamCaptureMode(&m);
}

/* Stream-ordered where the device has memory pools: cudaFree would synchronise the whole device. */
static int rt_pools(void)
{
	int dev = 0, on = 0;
	if (cudaGetDevice(&dev) != cudaSuccess ||
	    cudaDeviceGetAttribute(&on, cudaDevAttrMemoryPoolsSupported, dev) != cudaSuccess) {
		(void)cudaGetLastError(); /* ours */
		return 0;
	}
	return on;
}

/* Forwards that only cast between the table's CUDA-free types and CUDA's: (type, name, params, call).
 * Outputs are zeroed first where CUDA may leave them unset (cudaGetDeviceCount on an insufficient driver). */
#define RT_FORWARDS(X)                                                                                     \
	X(int, get_device_count, (int *n), (*n = 0, cudaGetDeviceCount(n)))                                 \
	X(int, driver_version, (int *v), (*v = 0, cudaDriverGetVersion(v)))                                 \
	X(int, get_device, (int *dev), cudaGetDevice(dev))                                                 \
	X(int, set_device, (int dev), cudaSetDevice(dev))                                                  \
	X(int, runtime_version, (void), CUDART_VERSION)                                                    \
	X(int, stream_destroy, (void *s), cudaStreamDestroy((cudaStream_t)s))                              \
	X(int, stream_synchronize, (void *s), cudaStreamSynchronize((cudaStream_t)s))                      \
	X(int, device_synchronize, (void), cudaDeviceSynchronize())                                        \
	X(int, event_destroy, (void *e), cudaEventDestroy((cudaEvent_t)e))                                 \
	X(int, event_record, (void *e, void *s), cudaEventRecord((cudaEvent_t)e, (cudaStream_t)s))         \
	X(int, event_synchronize, (void *e), cudaEventSynchronize((cudaEvent_t)e))                         \
	X(int, event_query, (void *e), cudaEventQuery((cudaEvent_t)e))                                     \
	X(int, stream_wait_event, (void *s, void *e),                                                      \
	  cudaStreamWaitEvent((cudaStream_t)s, (cudaEvent_t)e, 0))                                         \
	X(int, memcpy_async, (void *dst, const void *src, size_t n, void *s),                              \
	  cudaMemcpyAsync(dst, src, n, cudaMemcpyDefault, (cudaStream_t)s))                                \
	X(int, malloc_device, (void **p, size_t n, void *s),                                               \
	  rt_pools() ? cudaMallocAsync(p, n, (cudaStream_t)s) : cudaMalloc(p, n))                          \
	X(int, free_device, (void *p, void *s),                                                              \
	  rt_pools() ? cudaFreeAsync(p, (cudaStream_t)s) : cudaFree(p))                                     \
	X(int, host_unregister, (void *p), cudaHostUnregister(p))                                          \
	X(const char *, error_name, (int err), cudaGetErrorName((cudaError_t)err))                         \
	X(const char *, error_string, (int err), cudaGetErrorString((cudaError_t)err))                     \
	X(int, error_kind, (int err), err == cudaSuccess ? RF__CUE_OK                                     \
	  : err == cudaErrorNotReady ? RF__CUE_NOT_READY : err == cudaErrorMemoryAllocation ? RF__CUE_NOMEM \
	  : RF__CUE_OTHER)                                                                                 \
	X(int, get_last_error, (void), cudaGetLastError())                                                 \
	X(int, init_context, (void), cudaFree(NULL))

#define RT_FWD(type, name, params, call)                                                                   \
	static type rt_##name params                                                                       \
	{                                                                                                  \
		return (type)(call);                                                                       \
	}
RT_FORWARDS(RT_FWD)

/* Portable; a read-only mapping (PROT_READ, e.g. an mmap'ed weight file) cannot be registered for
 * device writes: retry it read-only where the device supports that. */
static int rt_host_register(void *p, size_t n)
{
	cudaError_t e = cudaHostRegister(p, n, cudaHostRegisterPortable);
	if (e == cudaSuccess)
		return 0;
	int dev = 0, ro = 0;
	if (cudaGetDevice(&dev) == cudaSuccess &&
	    cudaDeviceGetAttribute(&ro, cudaDevAttrHostRegisterReadOnlySupported, dev) == cudaSuccess && ro) {
		(void)cudaGetLastError(); /* the first attempt's, ours */
		if (cudaHostRegister(p, n, cudaHostRegisterPortable | cudaHostRegisterReadOnly) == 0)
			return 0;
	}
	return (int)e;
}

/* The whole allocation or registration containing p, from the driver; else only p's page is vouched
 * for and the caller walks on page by page. */
static int rt_dma_range(const void *p, const void **start, size_t *len)
{
	static rt_ptr_attr_fn attr;
	struct cudaPointerAttributes a;
	if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
		(void)cudaGetLastError(); /* ours */
		return 0;
	}
	if (a.type != cudaMemoryTypeHost && a.type != cudaMemoryTypeDevice && a.type != cudaMemoryTypeManaged)
		return 0;
	CUdeviceptr base = 0;
	size_t size = 0;
	if (attr == NULL)
		attr = (rt_ptr_attr_fn)rt_entry("cuPointerGetAttribute");
	if (attr != NULL && attr(&base, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, (CUdeviceptr)(uintptr_t)p) == CUDA_SUCCESS &&
	    attr(&size, CU_POINTER_ATTRIBUTE_RANGE_SIZE, (CUdeviceptr)(uintptr_t)p) == CUDA_SUCCESS && size > 0 &&
	    (uintptr_t)base <= (uintptr_t)p && (uintptr_t)p - (uintptr_t)base < size) {
		*start = (const void *)(uintptr_t)base;
		*len = size;
		return 1;
	}
	uintptr_t page = (uintptr_t)p & ~(uintptr_t)4095;
	*start = (const void *)page;
	*len = 4096;
	return 1;
}

#define RT_SET(type, name, params, call) .name = rt_##name,
static const rf__cuda_api rf__cuda_api_real = {
	RT_FORWARDS(RT_SET)
	.ctx_get = rt_ctx_get,
	.ctx_set = rt_ctx_set,
	.device_name = rt_device_name,
	.device_numa_node = rt_device_numa_node,
	.stream_create = rt_stream_create,
	.event_create = rt_event_create,
	.stream_capturing = rt_stream_capturing,
	.capture_mode_local = rt_capture_mode_local,
	.capture_mode_restore = rt_capture_mode_restore,
	.host_register = rt_host_register,
	.dma_range = rt_dma_range,
};

const rf__cuda_api *rf__cuda = &rf__cuda_api_real;

/* <ringfetch/cuda.h>: the public names, type-checked against the header. */
#include "ringfetch/cuda.h"

int rf_cuda_host_register(const void *p, size_t bytes)
{
	return rf__cuda_host_register(p, bytes);
}

int rf_cuda_host_unregister(const void *p)
{
	return rf__cuda_host_unregister(p);
}

int rf_cuda_staging_alloc(size_t bytes, const char *policy, int device, void **out)
{
	return rf__cuda_staging_alloc(bytes, policy, device, out);
}
