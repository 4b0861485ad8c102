/*
 * bench/python_ref.c — the C side of bench/python_bench.py: the run it makes from Python, driven from C.
 *
 * usage: python_ref BLOCKS SIZE DEPTH REPS
 * Creates a "threads" pipeline of DEPTH slots of SIZE bytes, streams BLOCKS blocks of SIZE bytes of float32
 * whose compute is the float32 sum of the block (16 independent partial sums, as numpy's pairwise sum
 * reads a block: once, in order, vectorised), REPS times, and prints one line per run: the run's wall
 * time and the median time of one compute, in ns. Built by bench/python_bench.py against libringfetch.
 */
#define _POSIX_C_SOURCE 200809L
#include <ringfetch.h>

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static long long now_ns(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1000000000LL + t.tv_nsec;
}

struct run {
	long long *spent;
	volatile float sink;
};

static int compute(void *user, const rf_block *b)
{
	struct run *r = user;
	long long t = now_ns();
	const float *f = b->data;
	size_t n = b->bytes / sizeof(float);
	float acc[16] = {0};
	for (size_t i = 0; i + 16 <= n; i += 16)
		for (int j = 0; j < 16; j++)
			acc[j] += f[i + j];
	float s = 0;
	for (int j = 0; j < 16; j++)
		s += acc[j];
	r->sink = s;
	r->spent[b->index] = now_ns() - t;
	return 0;
}

static int cmp(const void *a, const void *b)
{
	long long x = *(const long long *)a, y = *(const long long *)b;
	return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
	if (argc != 5) {
		fprintf(stderr, "usage: %s BLOCKS SIZE DEPTH REPS\n", argv[0]);
		return 2;
	}
	size_t n = strtoul(argv[1], NULL, 10), size = strtoul(argv[2], NULL, 10);
	unsigned depth = (unsigned)strtoul(argv[3], NULL, 10);
	int reps = atoi(argv[4]);
	const void **srcs = calloc(n, sizeof *srcs);
	size_t *sizes = calloc(n, sizeof *sizes);
	long long *spent = calloc(n, sizeof *spent);
	if (!srcs || !sizes || !spent)
		return 1;
	for (size_t i = 0; i < n; i++) {
		float *f = malloc(size);
		if (!f)
			return 1;
		for (size_t j = 0; j < size / sizeof(float); j++)
			f[j] = (float)((i * 31 + j) % 97) - 48.0f;
		srcs[i] = f;
		sizes[i] = size;
	}
	rf_pipeline_params pp = {.depth = depth, .slot_bytes = size, .backend = "threads"};
	rf_pipeline *p;
	int rc = rf_pipeline_create(&pp, &p);
	if (rc != RF_OK) {
		fprintf(stderr, "python_ref: %s\n", rf_errmsg());
		return 1;
	}
	struct run r = {spent, 0};
	/* Settling runs first: a threads pipeline compares its schedules on its first runs of a shape
	 * (backends/threads_sched.h); the measured runs are the ones after that comparison. */
	for (int k = -15; k < reps; k++) {
		long long t = now_ns();
		rc = rf_pipeline_run(p, n, srcs, sizes, compute, &r);
		t = now_ns() - t;
		if (rc != RF_OK) {
			fprintf(stderr, "python_ref: %s\n", rf_errmsg());
			return 1;
		}
		qsort(spent, n, sizeof *spent, cmp);
		if (k >= 0)
			printf("%lld %lld\n", t, spent[n / 2]);
	}
	rf_pipeline_destroy(p);
	for (size_t i = 0; i < n; i++)
		free((void *)srcs[i]);
	free(srcs);
	free(sizes);
	free(spent);
	return 0;
}
