// bench/gpu_compute.cu — ringfetch-bench's compute on the device, for pipelines whose blocks are device
// memory (backend cuda, params.memory = RF_MEMORY_DEVICE): the same workload check as the host
// compute (bench/workload.c), as kernels on the block's stream. Every float of a block is known: float
// 0 is the source's index, float j the pattern ((s * 7 + j) % 1000) * 0.5. Model "sum" checks them all
// (it reads the whole block, like the host sum); "spin"/"ratio" check float 0 and spin for the block's
// modelled time. Mismatches go to a counter in mapped pinned memory that a host function folds into
// the run's sink after the run's last block.
#include <cuda_runtime_api.h>
#include <stddef.h>

__global__ void rfb_dev_check(const float *f, size_t n, unsigned s, int all, unsigned *bad)
{
	unsigned wrong = 0;
	size_t end = all ? n : (n > 0 ? 1 : 0);
	for (size_t j = blockIdx.x * (size_t)blockDim.x + threadIdx.x; j < end; j += (size_t)gridDim.x * blockDim.x) {
		float want = j == 0 ? (float)s : (float)(((size_t)s * 7 + j) % 1000) * 0.5f;
		wrong += f[j] != want;
	}
	if (wrong)
		atomicAdd(bad, wrong);
}

__global__ void rfb_dev_spin(long long cycles)
{
	long long t0 = clock64();
	while (clock64() - t0 < cycles) {
	}
}

static unsigned *g_bad_host, *g_bad_dev;
static double g_hz;

extern "C" int rfb_gpu_init(void)
{
	if (g_bad_host != NULL)
		return 0;
	cudaError_t e = cudaHostAlloc((void **)&g_bad_host, sizeof *g_bad_host, cudaHostAllocMapped);
	if (e == cudaSuccess)
		e = cudaHostGetDevicePointer((void **)&g_bad_dev, g_bad_host, 0);
	int dev = 0, khz = 0;
	if (e == cudaSuccess)
		e = cudaGetDevice(&dev);
	if (e == cudaSuccess)
		e = cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, dev);
	if (e != cudaSuccess)
		return (int)e;
	*g_bad_host = 0;
	g_hz = (double)khz * 1e3;
	return 0;
}

extern "C" int rfb_gpu_check_launch(void *stream, const void *data, size_t bytes, unsigned s, int all, double spin_ns)
{
	size_t n = bytes / sizeof(float);
	unsigned blocks = all ? (unsigned)((n + 255) / 256 < 1024 ? (n + 255) / 256 : 1024) : 1;
	rfb_dev_check<<<blocks ? blocks : 1, 256, 0, (cudaStream_t)stream>>>((const float *)data, n, s, all, g_bad_dev);
	if (spin_ns > 0)
		rfb_dev_spin<<<1, 1, 0, (cudaStream_t)stream>>>((long long)(spin_ns * 1e-9 * g_hz));
	return (int)cudaPeekAtLastError();
}

static void CUDART_CB rfb_fold(void *arg)
{
	size_t *bad = (size_t *)arg;
	*bad += *(volatile unsigned *)g_bad_host;
	*(volatile unsigned *)g_bad_host = 0;
}

// After the run's last kernel, in stream order: mismatches into *bad (rf_pipeline_run waits for it).
extern "C" int rfb_gpu_fold_launch(void *stream, size_t *bad)
{
	return (int)cudaLaunchHostFunc((cudaStream_t)stream, rfb_fold, bad);
}
