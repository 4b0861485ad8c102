/* tests/gpu_main.h — the main() of the suites that need a real GPU (test_cuda, test_cuda_hw): probe the
 * GPU in a child process (no CUDA state may cross into Criterion's test processes), then exit 77 when
 * there is none (ctest: SKIPPED), 1 when the driver is older than the runtime (a failure, never a
 * skip), else run the Criterion suite. Include it in one translation unit per executable. */
#ifndef RF_TESTS_GPU_MAIN_H
#define RF_TESTS_GPU_MAIN_H

#include <criterion/criterion.h>
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>

/* 0: usable; 77: no GPU; 1: a driver older than the runtime. why: the reason, for the message. */
static int rft_gpu_state(char *why, size_t cap)
{
	int fd[2];
	if (pipe(fd) != 0)
		return 77;
	pid_t pid = fork();
	if (pid == 0) {
		int n = 0, drv = 0;
		cudaError_t e = cudaGetDeviceCount(&n);
		char msg[200];
		int old = e != cudaSuccess && cudaDriverGetVersion(&drv) == cudaSuccess && drv > 0 && drv < CUDART_VERSION;
		int len = old ? snprintf(msg, sizeof msg, "the CUDA driver (%d.%d) is older than the runtime (%d.%d): %s",
					 drv / 1000, drv % 1000 / 10, CUDART_VERSION / 1000, CUDART_VERSION % 1000 / 10,
					 cudaGetErrorString(e))
			      : snprintf(msg, sizeof msg, "%s",
					 e != cudaSuccess ? cudaGetErrorString(e) : n == 0 ? "no CUDA device" : "");
		if (write(fd[1], msg, (size_t)len) < 0)
			_exit(2);
		_exit(e == cudaSuccess && n > 0 ? 0 : old ? 1 : 77);
	}
	close(fd[1]);
	ssize_t got = read(fd[0], why, cap - 1);
	why[got > 0 ? got : 0] = '\0';
	close(fd[0]);
	int st = 0;
	waitpid(pid, &st, 0);
	return WIFEXITED(st) ? WEXITSTATUS(st) : 77;
}

static int rft_gpu_main(int argc, char *argv[], const char *suite)
{
	char why[240];
	int st = rft_gpu_state(why, sizeof why);
	if (st == 1) {
		fprintf(stderr, "FAIL: %s: %s cannot run\n", why, suite);
		return 1;
	}
	if (st != 0) {
		fprintf(stderr, "SKIPPED: no usable GPU (%s): %s did not run\n", why, suite);
		return 77;
	}
	struct criterion_test_set *tests = criterion_initialize();
	int result = 0;
	if (criterion_handle_args(argc, argv, true))
		result = !criterion_run_all_tests(tests);
	criterion_finalize(tests);
	return result;
}

#endif
