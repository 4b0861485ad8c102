// bench/demo_kernel.cu — ringfetch-demo's device compute for RF_MEMORY_DEVICE pipelines (backend cuda):
// the same check as its host compute — sum the block's bytes and count those that are not the block's
// own pattern — as a kernel on the block's stream, into two counters in device memory.
#include <cuda_runtime_api.h>
#include <stddef.h>

__global__ void rfd_check(const unsigned char *p, size_t n, size_t block, unsigned long long *acc)
{
	unsigned long long sum = 0, bad = 0;
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
		unsigned char want = (unsigned char)(block * 2654435761u + i * 40503u);
		sum += p[i];
		bad += p[i] != want;
	}
	if (sum)
		atomicAdd(&acc[0], sum);
	if (bad)
		atomicAdd(&acc[1], bad);
}

extern "C" int rfd_check_launch(void *stream, const void *data, size_t n, size_t block, void *acc)
{
	unsigned blocks = (unsigned)((n + 255) / 256 < 1024 ? (n + 255) / 256 : 1024);
	rfd_check<<<blocks ? blocks : 1, 256, 0, (cudaStream_t)stream>>>((const unsigned char *)data, n, block,
									   (unsigned long long *)acc);
	return (int)cudaPeekAtLastError();
}

extern "C" int rfd_acc_alloc(void **acc)
{
	cudaError_t e = cudaMalloc(acc, 2 * sizeof(unsigned long long));
	if (e == cudaSuccess)
		e = cudaMemset(*acc, 0, 2 * sizeof(unsigned long long));
	return (int)e;
}

// Read the counters after the run (rf_pipeline_run has synchronised the streams) and free them.
extern "C" int rfd_acc_read_free(void *acc, unsigned long long out[2])
{
	cudaError_t e = cudaMemcpy(out, acc, 2 * sizeof(unsigned long long), cudaMemcpyDeviceToHost);
	cudaFree(acc);
	return (int)e;
}
