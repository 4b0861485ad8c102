/* backends/cuda_rt.c — the real rf__cuda_api: thin forwards to the CUDA runtime (linked statically,
 * CUDA::cudart_static, so a binary needs only the driver). Built only when CMake finds CUDAToolkit;
 * the one translation unit of the library that includes a CUDA header besides <ringfetch/cuda.h>. */
#include "backends/cuda_api.h"
#include "memory/topology.h"

#include <cuda_runtime_api.h>
#include <hwloc.h>
#include <hwloc/cudart.h>
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
	int id = -1;
	*node = -1;
	if (cudaDeviceGetAttribute(&id, cudaDevAttrHostNumaId, dev) == cudaSuccess && id >= 0) {
		*node = id;
		return 0;
	}
	(void)cudaGetLastError();
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

static int rt_malloc_device(void **p, size_t n)
{
	return (int)cudaMalloc(p, n);
}

static int rt_free_device(void *p)
{
	return (int)cudaFree(p);
}

static int rt_host_register(void *p, size_t n)
{
	return (int)cudaHostRegister(p, n, cudaHostRegisterPortable);
}

static int rt_host_unregister(void *p)
{
	return (int)cudaHostUnregister(p);
}

/* Both ends of the range: a registration may cover the first byte of a source and not its last. */
static int rt_is_dma_capable_1(const void *p)
{
	struct cudaPointerAttributes a;
	if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
		(void)cudaGetLastError();
		return 0;
	}
	return a.type == cudaMemoryTypeHost || a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged;
}

static int rt_is_dma_capable(const void *p, size_t n)
{
	if (n == 0)
		return 1;
	return rt_is_dma_capable_1(p) && rt_is_dma_capable_1((const char *)p + n - 1);
}

static const char *rt_error_name(int err)
{
	return cudaGetErrorName((cudaError_t)err);
}

static const char *rt_error_string(int err)
{
	return cudaGetErrorString((cudaError_t)err);
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
	.device_name = rt_device_name,
	.device_numa_node = rt_device_numa_node,
	.stream_create = rt_stream_create,
	.stream_destroy = rt_stream_destroy,
	.stream_synchronize = rt_stream_synchronize,
	.stream_query = rt_stream_query,
	.event_create = rt_event_create,
	.event_destroy = rt_event_destroy,
	.event_record = rt_event_record,
	.stream_wait_event = rt_stream_wait_event,
	.memcpy_async = rt_memcpy_async,
	.launch_host_func = rt_launch_host_func,
	.malloc_device = rt_malloc_device,
	.free_device = rt_free_device,
	.host_register = rt_host_register,
	.host_unregister = rt_host_unregister,
	.is_dma_capable = rt_is_dma_capable,
	.error_name = rt_error_name,
	.error_string = rt_error_string,
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
