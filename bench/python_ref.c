/*
 * bench/python_ref.c — the C side of bench/python_bench.py: the run it makes from Python, driven from C.
 *
 * usage: python_ref BLOCKS SIZE DEPTH REPS [c|numpy]
 * Creates a "threads" pipeline of DEPTH slots of SIZE bytes, streams BLOCKS blocks of SIZE bytes of float32
 * whose compute is the float32 sum of the block, REPS times, and prints one line per run: the run's wall
 * time and the median time of one compute, in ns; then "sum" and the sum of block 0 (hex), which
 * python_bench.py checks against numpy's own sum of the same bytes, bit for bit. The sum is
 *   c      numpy's summation order written in C (pairwise(): what a C program would compute), or
 *   numpy  numpy's own, called through the CPython API of an embedded interpreter exactly as the Python
 *          side calls it (numpy.frombuffer(block, numpy.float32).sum()): the same compute on both sides,
 *          so that the Python run and this one differ only in who drives the pipeline. Built with
 *          -DRF_PYREF_NUMPY and the interpreter's headers and library; numpy from PYTHONPATH.
 * Built by bench/python_bench.py against libringfetch.
 */
#ifdef RF_PYREF_NUMPY
#define PY_SSIZE_T_CLEAN
#include <Python.h> /* first, as CPython asks: it sets the feature macros */
#else
#define _GNU_SOURCE /* madvise */
#endif
#include <ringfetch.h>

#include <stdio.h>
#include <math.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
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
	float sum0;
};

/* numpy's float32 sum of a contiguous array: blocks of up to 128 values summed with eight running
 * sums, the halves of anything longer summed apart and added (pairwise summation). */
static float pairwise(const float *a, size_t n)
{
	if (n < 8) {
		float s = 0;
		for (size_t i = 0; i < n; i++)
			s += a[i];
		return s;
	}
	if (n > 128) {
		size_t h = n / 2;
		h -= h % 8;
		return pairwise(a, h) + pairwise(a + h, n - h);
	}
	float r[8];
	for (int j = 0; j < 8; j++)
		r[j] = a[j];
	size_t i = 8;
	for (; i < n - n % 8; i += 8)
		for (int j = 0; j < 8; j++)
			r[j] += a[i + j];
	float s = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
	for (; i < n; i++)
		s += a[i];
	return s;
}

#ifdef RF_PYREF_NUMPY
static PyObject *np_frombuffer, *np_float32;

static int numpy_open(void)
{
	Py_Initialize();
	PyObject *np = PyImport_ImportModule("numpy");
	np_frombuffer = np ? PyObject_GetAttrString(np, "frombuffer") : NULL;
	np_float32 = np ? PyObject_GetAttrString(np, "float32") : NULL;
	Py_XDECREF(np);
	if (np_frombuffer == NULL || np_float32 == NULL) {
		PyErr_Print();
		return -1;
	}
	return 0;
}

/* numpy.frombuffer(block, numpy.float32).sum(), as the Python side's compute; NAN on an error. */
static float numpy_sum(const rf_block *b)
{
	PyObject *mv = PyMemoryView_FromMemory((char *)b->data, (Py_ssize_t)b->bytes, PyBUF_READ);
	PyObject *a = mv ? PyObject_CallFunctionObjArgs(np_frombuffer, mv, np_float32, NULL) : NULL;
	PyObject *s = a ? PyObject_CallMethod(a, "sum", NULL) : NULL;
	double v = s ? PyFloat_AsDouble(s) : (double)NAN;
	if (PyErr_Occurred())
		PyErr_Print();
	Py_XDECREF(s);
	Py_XDECREF(a);
	Py_XDECREF(mv);
	return (float)v;
}
#endif

static int use_numpy;

static int compute(void *user, const rf_block *b)
{
	struct run *r = user;
	long long t = now_ns();
	float s;
#ifdef RF_PYREF_NUMPY
	if (use_numpy)
		s = numpy_sum(b);
	else
#endif
		s = pairwise(b->data, b->bytes / sizeof(float));
	if (b->index == 0)
		r->sum0 = s;
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
	if (argc != 5 && !(argc == 6 && (!strcmp(argv[5], "c") || !strcmp(argv[5], "numpy")))) {
		fprintf(stderr, "usage: %s BLOCKS SIZE DEPTH REPS [c|numpy]\n", argv[0]);
		return 2;
	}
	use_numpy = argc == 6 && !strcmp(argv[5], "numpy");
#ifdef RF_PYREF_NUMPY
	if (use_numpy && numpy_open() != 0)
		return 1;
#else
	if (use_numpy) {
		fprintf(stderr, "python_ref: built without an embedded interpreter (RF_PYREF_NUMPY)\n");
		return 2;
	}
#endif
	size_t n = strtoul(argv[1], NULL, 10), size = strtoul(argv[2], NULL, 10);
	unsigned depth = (unsigned)strtoul(argv[3], NULL, 10);
	int reps = atoi(argv[4]);
	const void **srcs = calloc(n, sizeof *srcs);
	size_t *sizes = calloc(n, sizeof *sizes);
	long long *spent = calloc(n, sizeof *spent);
	if (!srcs || !sizes || !spent)
		return 1;
	/* The blocks are pieces of one allocation, as the Python side's are views of one numpy array: malloc,
	 * and huge pages asked for its page-aligned interior when it is 4 MiB or more, as numpy's allocator
	 * does. Sources placed alike on both sides, so that the copies cost both the same. */
	unsigned char *all = malloc(n * size);
	if (!all)
		return 1;
	if (n * size >= ((size_t)4 << 20)) {
		uintptr_t lo = ((uintptr_t)all + 4095) & ~(uintptr_t)4095, hi = ((uintptr_t)all + n * size) & ~(uintptr_t)4095;
		(void)madvise((void *)lo, hi - lo, MADV_HUGEPAGE);
	}
	for (size_t i = 0; i < n; i++) {
		float *f = (float *)(all + i * size);
		for (size_t j = 0; j < size / sizeof(float); j++)
			f[j] = (float)((i * 31 + j) % 97) * 0.37f - 17.9f; /* sums that round: the order shows */
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
	struct run r = {spent, 0, 0};
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
	printf("sum %a\n", (double)r.sum0);
	rf_pipeline_destroy(p);
	free(all);
	free(srcs);
	free(sizes);
	free(spent);
	return 0;
}
