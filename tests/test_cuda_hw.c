/* tests/test_cuda_hw.c — what only a real GPU can show (the GPU check): negative controls (a
 * dropped WAR wait and a dropped RAW wait must be caught by the payload check), a device other than the
 * current one and the caller's context restored ("none" included), concurrent pipelines on several
 * threads, back-pressure of a long pageable run (hundreds of staged copies), a faulting kernel (the sticky error path), cancel
 * from another thread during a run, depth = auto, a read-only registration, and whole-range DMA
 * checks of registered memory. Exits 77 without a GPU (SKIPPED), 1 with a driver older than the
 * runtime. Every test runs in its own process (Criterion), so a sticky error stays in its test. */
#include <criterion/criterion.h>

#include "backends/cuda_api.h"
#include "ringfetch.h"
#include "ringfetch/cuda.h"
#include "runtime/backend.h"
#include "support.h"

#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifdef RFT_HAVE_KERNELS
int rft_fault_launch(void *stream);
int rft_spin_launch(void *stream, long long cycles);
#endif

#define CU(expr)                                                                                            \
	do {                                                                                                \
		cudaError_t e_ = (expr);                                                                    \
		cr_assert_eq(e_, cudaSuccess, "%s: %s", #expr, cudaGetErrorString(e_));                     \
	} while (0)

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

typedef struct out {
	size_t slot;
	unsigned char *back; /* pinned, n * slot */
	unsigned sleep_us;
	atomic_int errors;
} out;

static void CUDART_CB sleeper(void *arg)
{
	struct timespec ts = {0, (long)(uintptr_t)arg * 1000};
	nanosleep(&ts, NULL);
}

/* What a kernel would do: read the slot on the block's stream (a D2H copy of it), optionally slowly. */
static int copy_back(void *user, const rf_block *b)
{
	out *o = user;
	cudaStream_t s = rf_block_stream(b);
	if (o->sleep_us && cudaLaunchHostFunc(s, sleeper, (void *)(uintptr_t)o->sleep_us) != cudaSuccess)
		atomic_fetch_add(&o->errors, 1);
	if (b->bytes && cudaMemcpyAsync(o->back + b->index * o->slot, b->data, b->bytes, cudaMemcpyDeviceToHost, s) !=
			       cudaSuccess)
		atomic_fetch_add(&o->errors, 1);
	return 0;
}

static rf_pipeline *make(unsigned depth, unsigned kq, size_t slot, int device)
{
	rf_pipeline_params pp = {0};
	pp.depth = depth;
	pp.copy_queues = kq;
	pp.slot_bytes = slot;
	pp.backend = "cuda";
	pp.memory = RF_MEMORY_DEVICE;
	pp.device = device;
	rf_pipeline *p = NULL;
	cr_assert_eq(rf_pipeline_create(&pp, &p), RF_OK, "%s", rf_errmsg());
	return p;
}

/* n blocks of slot bytes, each its own pattern; pinned (one cudaHostAlloc) or pageable. */
typedef struct src {
	size_t n, slot;
	int pinned;
	unsigned char *base;
	const void **srcs;
	size_t *sizes;
} src;

static void src_make(src *s, size_t n, size_t slot, int pinned, uint64_t seed)
{
	*s = (src){n, slot, pinned, NULL, calloc(n, sizeof(void *)), calloc(n, sizeof(size_t))};
	cr_assert(s->srcs && s->sizes);
	if (pinned)
		CU(cudaHostAlloc((void **)&s->base, n * slot, cudaHostAllocDefault));
	else
		cr_assert_not_null(s->base = malloc(n * slot));
	for (size_t i = 0; i < n; i++) {
		s->srcs[i] = s->base + i * slot;
		s->sizes[i] = slot;
		fill_pattern(s->base + i * slot, slot, i, seed);
	}
}

static void src_free(src *s)
{
	if (s->pinned)
		cudaFreeHost(s->base);
	else
		free(s->base);
	free(s->srcs);
	free(s->sizes);
}

/* Run and count the blocks whose copy-back differs from the source. */
static size_t run_count_bad(rf_pipeline *p, const src *s, unsigned sleep_us, int *rc)
{
	out o = {s->slot, NULL, sleep_us, 0};
	CU(cudaHostAlloc((void **)&o.back, s->n * s->slot, cudaHostAllocDefault));
	memset(o.back, 0, s->n * s->slot);
	*rc = rf_pipeline_run(p, s->n, s->srcs, s->sizes, copy_back, &o);
	size_t bad = 0;
	for (size_t i = 0; *rc == RF_OK && i < s->n; i++)
		bad += memcmp(o.back + i * s->slot, s->srcs[i], s->slot) != 0;
	cr_assert_eq(atomic_load(&o.errors), 0);
	cudaFreeHost(o.back);
	return bad;
}

static void run_ok(rf_pipeline *p, const src *s, unsigned sleep_us, const char *what)
{
	int rc;
	size_t bad = run_count_bad(p, s, sleep_us, &rc);
	cr_assert_eq(rc, RF_OK, "%s: %s", what, rf_errmsg());
	cr_assert_eq(bad, 0, "%s: %zu blocks corrupted", what, bad);
}

/* From threads other than the test's own, Criterion's asserts must not be used: count failures. */
static atomic_int g_thread_failures;
#define TCHECK(cond, ...)                                                                                   \
	do {                                                                                                \
		if (!(cond)) {                                                                              \
			fprintf(stderr, __VA_ARGS__);                                                       \
			fputc('\n', stderr);                                                                \
			atomic_fetch_add(&g_thread_failures, 1);                                            \
		}                                                                                           \
	} while (0)

static rf_pipeline *make_t(unsigned depth, unsigned kq, size_t slot, int device)
{
	rf_pipeline_params pp = {0};
	pp.depth = depth;
	pp.copy_queues = kq;
	pp.slot_bytes = slot;
	pp.backend = "cuda";
	pp.memory = RF_MEMORY_DEVICE;
	pp.device = device;
	rf_pipeline *p = NULL;
	int rc = rf_pipeline_create(&pp, &p);
	TCHECK(rc == RF_OK, "create: %s", rf_errmsg());
	return p;
}

static void src_make_t(src *s, size_t n, size_t slot, uint64_t seed)
{
	*s = (src){n, slot, 0, malloc(n * slot), calloc(n, sizeof(void *)), calloc(n, sizeof(size_t))};
	if (!s->base || !s->srcs || !s->sizes)
		abort();
	for (size_t i = 0; i < n; i++) {
		s->srcs[i] = s->base + i * slot;
		s->sizes[i] = slot;
		fill_pattern(s->base + i * slot, slot, i, seed);
	}
}

static void run_ok_t(rf_pipeline *p, const src *s, const char *what)
{
	out o = {s->slot, malloc(s->n * s->slot), 0, 0};
	if (o.back == NULL)
		abort();
	memset(o.back, 0, s->n * s->slot);
	int rc = rf_pipeline_run(p, s->n, s->srcs, s->sizes, copy_back, &o);
	TCHECK(rc == RF_OK, "%s: %s", what, rf_errmsg());
	/* copy_back's D2H into pageable memory is synchronous to the host as far as the stream goes;
	 * the run's end synchronised the stream, so the bytes are there. */
	size_t bad = 0;
	for (size_t i = 0; rc == RF_OK && i < s->n; i++)
		bad += memcmp(o.back + i * s->slot, s->srcs[i], s->slot) != 0;
	TCHECK(bad == 0 && atomic_load(&o.errors) == 0, "%s: %zu blocks corrupted", what, bad);
	free(o.back);
}

/* ---- negative controls --------------------------------------------------------------------------- */

Test(cuda_hw, negative_control_dropped_war_wait_is_caught)
{
	rf__test_hooks.drop_war_wait = 1;
	rf_pipeline *p = make(2, 1, 1 << 20, 0);
	rf__test_hooks.drop_war_wait = 0;
	src s;
	src_make(&s, 24, 1 << 20, 1, 1);
	int rc;
	size_t bad = run_count_bad(p, &s, 2000, &rc); /* slow computes: the next copy overtakes the read */
	cr_assert_eq(rc, RF_OK, "%s", rf_errmsg());
	cr_assert_gt(bad, 0, "without WAR waits no block was corrupted: the payload check cannot see the race");
	fprintf(stderr, "negative control (WAR dropped): %zu of %zu blocks corrupted\n", bad, s.n);
	rf_pipeline_destroy(p);
	src_free(&s);
}

Test(cuda_hw, negative_control_dropped_raw_wait_is_caught)
{
	rf__test_hooks.drop_raw_wait = 1;
	rf_pipeline *p = make(2, 1, 32 << 20, 0);
	src s;
	src_make(&s, 8, 32 << 20, 1, 2); /* big copies: the compute's read runs ahead of the copy */
	int rc;
	size_t bad = run_count_bad(p, &s, 0, &rc);
	rf__test_hooks.drop_raw_wait = 0;
	cr_assert_eq(rc, RF_OK, "%s", rf_errmsg());
	cr_assert_gt(bad, 0, "without RAW waits no block was corrupted: the payload check cannot see the race");
	fprintf(stderr, "negative control (RAW dropped): %zu of %zu blocks corrupted\n", bad, s.n);
	rf_pipeline_destroy(p);
	src_free(&s);
}

/* ---- devices and contexts ------------------------------------------------------------------------- */

static void *no_context_thread(void *arg)
{
	(void)arg;
	void *ctx = (void *)1;
	TCHECK(rf__cuda->ctx_get(&ctx) == 0 && ctx == NULL, "a fresh thread has a context");
	int n = 0;
	TCHECK(cudaGetDeviceCount(&n) == cudaSuccess, "cudaGetDeviceCount");
	rf_pipeline *p = make_t(2, 1, 1 << 16, n - 1);
	TCHECK(rf__cuda->ctx_get(&ctx) == 0 && ctx == NULL, "create left a context current on a thread that had none");
	rf_pipeline_destroy(p);
	TCHECK(rf__cuda->ctx_get(&ctx) == 0 && ctx == NULL, "destroy left a context current on a thread that had none");
	return NULL;
}

Test(cuda_hw, other_device_and_no_context_are_restored)
{
	pthread_t t;
	cr_assert_eq(pthread_create(&t, NULL, no_context_thread, NULL), 0);
	pthread_join(t, NULL);
	cr_assert_eq(atomic_load(&g_thread_failures), 0);
	int n = 0;
	CU(cudaGetDeviceCount(&n));
	if (n < 2) {
		fprintf(stderr, "one GPU: a device other than the current one is not tested here\n");
		return;
	}
	CU(cudaSetDevice(0));
	rf_pipeline *p = make(3, 1, 1 << 18, 1);
	int cur = -1;
	CU(cudaGetDevice(&cur));
	cr_assert_eq(cur, 0);
	src s;
	src_make(&s, 12, 1 << 18, 0, 4);
	run_ok(p, &s, 0, "device 1");
	CU(cudaGetDevice(&cur));
	cr_assert_eq(cur, 0);
	rf_pipeline_destroy(p);
	CU(cudaGetDevice(&cur));
	cr_assert_eq(cur, 0);
	src_free(&s);
}

/* ---- concurrency, back-pressure, faults, cancel, auto -------------------------------------------- */

static void *worker(void *arg)
{
	unsigned id = (unsigned)(uintptr_t)arg;
	rf_pipeline *p = make_t(3 + id % 3, id % 2 ? 2 : 1, 1 << 18, 0);
	if (p == NULL)
		return NULL;
	src b;
	src_make_t(&b, 30, 1 << 18, 20 + id);
	for (int r = 0; r < 4; r++)
		run_ok_t(p, &b, "a pipeline on its own thread");
	rf_pipeline_destroy(p);
	free(b.base);
	free(b.srcs);
	free(b.sizes);
	return NULL;
}

Test(cuda_hw, concurrent_pipelines_on_several_threads)
{
	pthread_t t[4];
	for (unsigned i = 0; i < 4; i++)
		cr_assert_eq(pthread_create(&t[i], NULL, worker, (void *)(uintptr_t)i), 0);
	for (unsigned i = 0; i < 4; i++)
		pthread_join(t[i], NULL);
	cr_assert_eq(atomic_load(&g_thread_failures), 0);
}

/* A deep ring, pageable sources and slow computes: 600 staged copies through a pinned ring of at most 16
 * slots, each staging lane waiting on each pinned slot's H2D (the hop's back-pressure) — and every
 * byte still arrives. */
Test(cuda_hw, back_pressure_beyond_64_staged_copies)
{
	rf_pipeline *p = make(96, 1, 4096, 0);
	src s;
	src_make(&s, 600, 4096, 0, 5);
	run_ok(p, &s, 200, "back-pressure");
	rf_pipeline_destroy(p);
	src_free(&s);
}

#ifdef RFT_HAVE_KERNELS
static int faulting(void *user, const rf_block *b)
{
	(void)user;
	return b->index == 3 && rft_fault_launch(b->stream) != 0 ? 1 : 0;
}

Test(cuda_hw, faulting_kernel_is_a_sticky_backend_error)
{
	rf_pipeline *p = make(2, 1, 1 << 16, 0);
	src s;
	src_make(&s, 10, 1 << 16, 0, 6);
	cr_assert_eq(rf_pipeline_run(p, s.n, s.srcs, s.sizes, faulting, NULL), RF_EBACKEND);
	cr_assert(strstr(rf_errmsg(), "illegal") != NULL || strstr(rf_errmsg(), "cuda") != NULL, "%s", rf_errmsg());
	cr_assert_eq(rf_pipeline_run(p, s.n, s.srcs, s.sizes, faulting, NULL), RF_EBACKEND);
	cr_assert(strstr(rf_errmsg(), "unusable") != NULL, "%s", rf_errmsg());
	rf_pipeline_destroy(p);
	src_free(&s);
}

static int spin_1ms(void *user, const rf_block *b)
{
	(void)user;
	return rft_spin_launch(b->stream, 2000000) != 0; /* ~1 ms at ~2 GHz */
}

typedef struct canceller {
	rf_pipeline *p;
	double delay;
} canceller;

static void *cancel_later(void *arg)
{
	canceller *c = arg;
	struct timespec ts = {0, (long)(c->delay * 1e9)};
	nanosleep(&ts, NULL);
	rf_pipeline_cancel(c->p);
	return NULL;
}

/* Cancel from another thread while the device is far behind: the run stops within the enqueue window
 * (depth + 32 blocks of ~1 ms), not after all 3000 blocks (~3 s). */
Test(cuda_hw, cancel_from_another_thread_stops_the_run)
{
	rf_pipeline *p = make(2, 1, 1 << 16, 0);
	src s;
	src_make(&s, 3000, 1 << 16, 1, 7);
	canceller c = {p, 0.05};
	pthread_t t;
	double t0 = now();
	cr_assert_eq(pthread_create(&t, NULL, cancel_later, &c), 0);
	int rc = rf_pipeline_run(p, s.n, s.srcs, s.sizes, spin_1ms, NULL);
	double took = now() - t0;
	pthread_join(t, NULL);
	cr_assert_eq(rc, RF_ECANCELED, "%s", rf_errmsg());
	cr_assert_lt(took, 0.5, "cancel took effect after %.3f s", took);
	run_ok(p, &s, 0, "after cancel");
	rf_pipeline_destroy(p);
	src_free(&s);
}
#endif

Test(cuda_hw, depth_auto_keeps_the_payload)
{
	setenv("RINGFETCH_DEPTH", "auto", 1);
	rf_pipeline_params pp = {0};
	pp.slot_bytes = 1 << 20;
	pp.backend = "cuda";
	pp.memory = RF_MEMORY_DEVICE;
	rf_pipeline *p = NULL;
	cr_assert_eq(rf_pipeline_create(&pp, &p), RF_OK, "%s", rf_errmsg());
	unsetenv("RINGFETCH_DEPTH");
	src a, b;
	src_make(&a, 40, 1 << 20, 1, 8);
	src_make(&b, 40, 1 << 20, 0, 9);
	for (int r = 0; r < 12; r++)
		run_ok(p, r % 2 ? &b : &a, r % 3 ? 0 : 100, "depth auto");
	fprintf(stderr, "depth auto chose %u\n", rf_pipeline_depth(p));
	rf_pipeline_destroy(p);
	src_free(&a);
	src_free(&b);
}

/* ---- keyed use with a caller's stream ------------------------------------------------------------ */

/* Acquire on the caller's stream (and on the legacy default stream), read the slot on that stream,
 * release, and let later keys reuse the slots: every read sees its key's bytes (RAW and WAR on the
 * device, no host wait). */
Test(cuda_hw, keyed_use_with_the_callers_stream)
{
	rf_pipeline *p = make(3, 1, 1 << 20, 0);
	src keys;
	src_make(&keys, 8, 1 << 20, 1, 13);
	cudaStream_t s;
	CU(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
	unsigned char *back;
	CU(cudaHostAlloc((void **)&back, 64u << 20, cudaHostAllocDefault));
	uint64_t rng = 14;
	size_t want[64];
	for (unsigned i = 0; i < 64; i++) {
		size_t k = (size_t)(rng_next(&rng) % 8);
		cudaStream_t on = i % 4 == 3 ? (cudaStream_t)0 : s;
		if (i % 5 == 0)
			(void)rf_pipeline_prefetch(p, (k + 1) % 8, keys.srcs[(k + 1) % 8], 1 << 20, 0);
		rf_block b;
		cr_assert_eq(rf_pipeline_acquire(p, k, keys.srcs[k], 1 << 20, on, 0, &b), RF_OK, "%s", rf_errmsg());
		CU(cudaMemcpyAsync(back + ((size_t)i << 20), b.data, 1 << 20, cudaMemcpyDeviceToHost, on));
		cr_assert_eq(rf_pipeline_release(p, &b), RF_OK, "%s", rf_errmsg());
		want[i] = k;
	}
	CU(cudaStreamSynchronize(s));
	CU(cudaDeviceSynchronize());
	for (unsigned i = 0; i < 64; i++)
		cr_assert(memcmp(back + ((size_t)i << 20), keys.srcs[want[i]], 1 << 20) == 0, "read %u (key %zu) corrupted",
			  i, want[i]);
	rf_pipeline_destroy(p);
	cudaFreeHost(back);
	CU(cudaStreamDestroy(s));
	src_free(&keys);
}

/* ---- registrations ------------------------------------------------------------------------------ */

/* A read-only mapping (an mmap'ed weight file) registers where the device supports read-only
 * registration, and is then copied directly. */
Test(cuda_hw, read_only_mapping_registers)
{
	int ro = 0;
	CU(cudaDeviceGetAttribute(&ro, cudaDevAttrHostRegisterReadOnlySupported, 0));
	char path[] = "/tmp/rft_weightsXXXXXX";
	int fd = mkstemp(path);
	cr_assert(fd >= 0);
	size_t len = 8 << 20;
	unsigned char *w = malloc(len);
	cr_assert_not_null(w);
	fill_pattern(w, len, 0, 11);
	cr_assert_eq(write(fd, w, len), (ssize_t)len);
	void *m = mmap(NULL, len, PROT_READ, MAP_SHARED, fd, 0);
	cr_assert_neq(m, MAP_FAILED);
	int rc = rf_cuda_host_register(m, len);
	fprintf(stderr, "read-only registration: %s (HostRegisterReadOnlySupported = %d)%s%s\n", rf_err_name(rc), ro,
		rc ? ": " : "", rc ? rf_errmsg() : "");
	if (ro)
		cr_assert_eq(rc, RF_OK, "%s", rf_errmsg());
	if (rc == RF_OK) {
		rf_pipeline *p = make(2, 1, 1 << 20, 0);
		src s = {8, 1 << 20, -1, m, calloc(8, sizeof(void *)), calloc(8, sizeof(size_t))};
		for (size_t i = 0; i < 8; i++)
			s.srcs[i] = (unsigned char *)m + (i << 20), s.sizes[i] = 1 << 20;
		run_ok(p, &s, 0, "read-only registered source");
		free(s.srcs);
		free(s.sizes);
		rf_pipeline_destroy(p);
		cr_assert_eq(rf_cuda_host_unregister(m), RF_OK);
	}
	munmap(m, len);
	close(fd);
	unlink(path);
	free(w);
}

/* The driver gives registered ranges whole (else every page is queried: slow, still correct), and a
 * source spanning two registrations with a hole between them is staged, and arrives intact. */
Test(cuda_hw, dma_checks_cover_whole_ranges)
{
	size_t len = 64 << 20;
	unsigned char *buf = aligned_alloc(4096, len);
	cr_assert_not_null(buf);
	cr_assert_eq(rf_cuda_host_register(buf, len), RF_OK, "%s", rf_errmsg());
	const void *start = NULL;
	size_t got = 0;
	CU(cudaSetDevice(0));
	cr_assert(rf__cuda->dma_range(buf + 12345, &start, &got));
	fprintf(stderr, "dma_range of a 64 MiB registration: start %+td, %zu bytes\n", (const unsigned char *)start - buf,
		got);
	cr_assert(start == buf && got >= len, "the driver did not give the registration's range");
	cr_assert_eq(rf_cuda_host_unregister(buf), RF_OK);
	/* [0, 1 MiB) and [2 MiB, 3 MiB) registered, the hole between them not. */
	fill_pattern(buf, 3 << 20, 0, 12);
	cr_assert_eq(rf_cuda_host_register(buf, 1 << 20), RF_OK, "%s", rf_errmsg());
	cr_assert_eq(rf_cuda_host_register(buf + (2 << 20), 1 << 20), RF_OK, "%s", rf_errmsg());
	rf_pipeline *p = make(2, 1, 3 << 20, 0);
	src s = {1, 3 << 20, -1, buf, calloc(1, sizeof(void *)), calloc(1, sizeof(size_t))};
	s.srcs[0] = buf;
	s.sizes[0] = 3 << 20;
	run_ok(p, &s, 0, "a source with a hole between two registrations");
	free(s.srcs);
	free(s.sizes);
	rf_pipeline_destroy(p);
	cr_assert_eq(rf_cuda_host_unregister(buf), RF_OK);
	cr_assert_eq(rf_cuda_host_unregister(buf + (2 << 20)), RF_OK);
	free(buf);
}

/* ---- main: SKIPPED without a GPU, FAIL with a driver older than the runtime ----------------------- */

#include "gpu_main.h"

int main(int argc, char *argv[])
{
	return rft_gpu_main(argc, argv, "test_cuda_hw");
}
