// tests/cuda_hw_kernel.cu — kernels for tests/test_cuda_hw.c: one that faults (an illegal address:
// a sticky error for the whole context) and one that spins for a number of clock cycles.
#include <cuda_runtime_api.h>
#include <stdint.h>

__global__ void rft_fault(unsigned *p)
{
	*p = 1u; // p points nowhere the device may write
}

__global__ void rft_spin(long long cycles)
{
	long long t0 = clock64();
	while (clock64() - t0 < cycles) {
	}
}

extern "C" int rft_fault_launch(void *stream)
{
	rft_fault<<<1, 1, 0, (cudaStream_t)stream>>>((unsigned *)(uintptr_t)0x10);
	return (int)cudaPeekAtLastError();
}

extern "C" int rft_spin_launch(void *stream, long long cycles)
{
	rft_spin<<<1, 1, 0, (cudaStream_t)stream>>>(cycles);
	return (int)cudaPeekAtLastError();
}
