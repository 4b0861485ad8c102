// bench/gpu_kernel.cu — the benchmark's stand-in for a compute kernel: it reads a few bytes of the
// slot (so that the copy really must have landed) and then spins for a given number of clock cycles,
// giving a compute whose duration we choose (to match the copy time of a block).
#include <cuda_runtime_api.h>
#include <stddef.h>

__global__ void rfb_spin(long long cycles, const unsigned char *data, size_t n, unsigned *sink)
{
	long long t0 = clock64();
	unsigned acc = n ? data[((size_t)threadIdx.x * 4099u) % n] : 0u;
	while (clock64() - t0 < cycles) {
	}
	if (acc == 0xFFFFFFFFu)
		*sink = acc; // never taken: keeps the read
}

extern "C" int rfb_spin_launch(void *stream, long long cycles, const void *data, size_t n)
{
	rfb_spin<<<1, 32, 0, (cudaStream_t)stream>>>(cycles, (const unsigned char *)data, n, nullptr);
	return (int)cudaGetLastError();
}
