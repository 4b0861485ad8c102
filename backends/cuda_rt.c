/* backends/cuda_rt.c — the real rf__cuda_api: thin forwards to the CUDA runtime (linked statically,
 * CUDA::cudart_static, so a binary needs only the driver). Built only when CMake finds CUDAToolkit;
 * the one translation unit of the library that includes a CUDA header besides <ringfetch/cuda.h>. */
#include "backends/cuda_api.h"
#include "memory/topology.h"

#include <cuda.h>
#include <cuda_runtime_api.h>
#include <hwloc.h>
#include <hwloc/cudart.h>
#include <stdint.h>
#include <stdio.h>

static int rt_get_device_count(int *n)
{
	*n = 0; /* cudaGetDeviceCount leaves it unchanged on cudaErrorInsufficientDriver */
	return (int)cudaGetDeviceCount(n);
}

static int rt_get_device(int *dev)
{
	return (int)cudaGetDevice(dev);
}

static int rt_set_device(int dev)
{
	return (int)cudaSetDevice(dev);
}

/* ---- the driver entry points the runtime does not cover -------------------------------------------- */

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

static int rt_driver_version(int *v)
{
	*v = 0;
	return (int)cudaDriverGetVersion(v);
}

static int rt_runtime_version(void)
{
	return CUDART_VERSION;
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

/* cudaDevAttrHostNumaId first (the driver knows); else the device's local CPUs from sysfs
 * (hwloc_cudart_get_device_cpuset, which returns the full cpuset when it cannot tell) and the one
 * node those CPUs cover. -1 when neither gives exactly one node. */
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

static int rt_stream_create(void **s)
{
	cudaStream_t st;
	cudaError_t e = cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking);
	*s = e == cudaSuccess ? (void *)st : NULL;
	return (int)e;
}

static int rt_stream_destroy(void *s)
{
	return (int)cudaStreamDestroy((cudaStream_t)s);
}

static int rt_stream_synchronize(void *s)
{
	return (int)cudaStreamSynchronize((cudaStream_t)s);
}

static int rt_device_synchronize(void)
{
	return (int)cudaDeviceSynchronize();
}

static int rt_stream_query(void *s)
{
	return (int)cudaStreamQuery((cudaStream_t)s);
}

static int rt_event_create(void **ev)
{
	cudaEvent_t e;
	cudaError_t rc = cudaEventCreateWithFlags(&e, cudaEventDisableTiming);
	*ev = rc == cudaSuccess ? (void *)e : NULL;
	return (int)rc;
}

static int rt_event_destroy(void *e)
{
	return (int)cudaEventDestroy((cudaEvent_t)e);
}

static int rt_event_record(void *e, void *s)
{
	return (int)cudaEventRecord((cudaEvent_t)e, (cudaStream_t)s);
}

static int rt_event_synchronize(void *e)
{
	return (int)cudaEventSynchronize((cudaEvent_t)e);
}

static int rt_event_query(void *e)
{
	return (int)cudaEventQuery((cudaEvent_t)e);
}

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

static int rt_stream_wait_event(void *s, void *e)
{
	return (int)cudaStreamWaitEvent((cudaStream_t)s, (cudaEvent_t)e, 0);
}

static int rt_memcpy_async(void *dst, const void *src, size_t n, void *s)
{
	return (int)cudaMemcpyAsync(dst, src, n, cudaMemcpyDefault, (cudaStream_t)s);
}

static int rt_launch_host_func(void *s, rf__cuda_host_fn fn, void *arg)
{
	return (int)cudaLaunchHostFunc((cudaStream_t)s, fn, arg);
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

static int rt_malloc_device(void **p, size_t n, void *s)
{
	if (rt_pools())
		return (int)cudaMallocAsync(p, n, (cudaStream_t)s);
	return (int)cudaMalloc(p, n);
}

static int rt_free_device(void *p, void *s)
{
	if (rt_pools())
		return (int)cudaFreeAsync(p, (cudaStream_t)s);
	return (int)cudaFree(p);
}

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
		cudaError_t e2 = cudaHostRegister(p, n, cudaHostRegisterPortable | cudaHostRegisterReadOnly);
		if (e2 == cudaSuccess)
			return 0;
	}
	return (int)e;
}

static int rt_host_unregister(void *p)
{
	return (int)cudaHostUnregister(p);
}

/* The allocation or registration containing p, from the driver (whole ranges, not the first and last
 * byte). When the driver cannot give the range, only p's page is vouched for: the caller walks
 * on page by page. */
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

static const char *rt_error_name(int err)
{
	return cudaGetErrorName((cudaError_t)err);
}

static const char *rt_error_string(int err)
{
	return cudaGetErrorString((cudaError_t)err);
}

static int rt_error_kind(int err)
{
	switch ((cudaError_t)err) {
	case cudaSuccess:
		return RF__CUE_OK;
	case cudaErrorNotReady:
		return RF__CUE_NOT_READY;
	case cudaErrorMemoryAllocation:
		return RF__CUE_NOMEM;
	/* cudaGetDeviceCount failures that mean "no usable GPU here" rather than a broken installation */
	case cudaErrorInsufficientDriver:
	case cudaErrorNoDevice:
	case cudaErrorInitializationError:
	case cudaErrorDevicesUnavailable:
	case cudaErrorSystemDriverMismatch:
	case cudaErrorCompatNotSupportedOnDevice:
	case cudaErrorStubLibrary:
		return RF__CUE_NODEV;
	default:
		return RF__CUE_OTHER;
	}
}

static int rt_get_last_error(void)
{
	return (int)cudaGetLastError();
}

static int rt_init_context(void)
{
	return (int)cudaFree(NULL);
}

const rf__cuda_api rf__cuda_api_real = {
	.what = "cudart",
	.get_device_count = rt_get_device_count,
	.get_device = rt_get_device,
	.set_device = rt_set_device,
	.ctx_get = rt_ctx_get,
	.ctx_set = rt_ctx_set,
	.driver_version = rt_driver_version,
	.runtime_version = rt_runtime_version,
	.device_name = rt_device_name,
	.device_numa_node = rt_device_numa_node,
	.stream_create = rt_stream_create,
	.stream_destroy = rt_stream_destroy,
	.stream_synchronize = rt_stream_synchronize,
	.device_synchronize = rt_device_synchronize,
	.stream_query = rt_stream_query,
	.event_create = rt_event_create,
	.event_destroy = rt_event_destroy,
	.event_record = rt_event_record,
	.event_synchronize = rt_event_synchronize,
	.event_query = rt_event_query,
	.stream_capturing = rt_stream_capturing,
	.capture_mode_local = rt_capture_mode_local,
	.capture_mode_restore = rt_capture_mode_restore,
	.stream_wait_event = rt_stream_wait_event,
	.memcpy_async = rt_memcpy_async,
	.launch_host_func = rt_launch_host_func,
	.malloc_device = rt_malloc_device,
	.free_device = rt_free_device,
	.host_register = rt_host_register,
	.host_unregister = rt_host_unregister,
	.dma_range = rt_dma_range,
	.error_name = rt_error_name,
	.error_string = rt_error_string,
	.error_kind = rt_error_kind,
	.get_last_error = rt_get_last_error,
	.init_context = rt_init_context,
};

const rf__cuda_api *rf__cuda = &rf__cuda_api_real;

/* ---- <ringfetch/cuda.h>: the public names, type-checked against the header --------------------- */

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
