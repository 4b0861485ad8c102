/*
 * tests/consumer/main.c — an outside program using the installed ringfetch: only <ringfetch.h> and
 * -lringfetch, found with find_package(ringfetch) or pkg-config (tests/consumer/check.sh builds it both
 * ways), and with add_subdirectory (tests/consumer/subdir). When the library was built with CUDA
 * (RF_HAVE_CUDA, from <ringfetch/config.h>) it includes <ringfetch/cuda.h> too, with nothing but what
 * the package gives (CUDA's include directory comes with ringfetch::ringfetch / the .pc Cflags). It plans a ring, streams blocks through a pipeline on each CPU backend and checks what the
 * computes saw. Exit status 0 on success, 1 on any failure (each one printed).
 */
#include <ringfetch.h>
#ifdef RF_HAVE_CUDA
#include <ringfetch/cuda.h>
#endif

#include <stdio.h>
#include <string.h>

#define NBLOCKS 37
#define SLOT_BYTES 256
#define DEPTH 3

static int failures;

#define CHECK(cond, ...)                                                                           \
	do {                                                                                       \
		if (!(cond)) {                                                                     \
			failures++;                                                                \
			fprintf(stderr, "consumer: FAIL %s:%d: ", __FILE__, __LINE__);             \
			fprintf(stderr, __VA_ARGS__);                                              \
			fprintf(stderr, " (rf_errmsg: %s)\n", rf_errmsg());                        \
		}                                                                                  \
	} while (0)

/* What the compute callback checks and counts. */
typedef struct seen {
	const unsigned char (*src)[SLOT_BYTES];
	const size_t *sizes;
	size_t next;     /* the block expected next */
	size_t bad;      /* computes that saw the wrong block, slot or bytes */
	unsigned long sum;
} seen;

static int compute(void *user, const rf_block *b)
{
	seen *s = user;
	if (b->index != s->next || b->slot != b->index % DEPTH || b->bytes != s->sizes[b->index] ||
	    memcmp(b->data, s->src[b->index], b->bytes) != 0)
		s->bad++;
	const unsigned char *d = b->data;
	for (size_t i = 0; i < b->bytes; i++)
		s->sum += d[i];
	s->next = b->index + 1;
	return 0;
}

static void check_plan(void)
{
	size_t len = 0;
	CHECK(rf_plan_ring(NBLOCKS, DEPTH, NULL, 0, &len) == RF_ENOSPC, "sizing call");
	CHECK(len == 3 * NBLOCKS, "plan length %zu", len);
	rf_step steps[3 * NBLOCKS];
	CHECK(rf_plan_ring(NBLOCKS, DEPTH, steps, 3 * NBLOCKS, &len) == RF_OK, "rf_plan_ring");
	size_t kinds[3] = {0, 0, 0};
	for (size_t i = 0; i < len; i++) {
		kinds[steps[i].kind]++;
		CHECK(steps[i].slot == steps[i].block % DEPTH, "step %zu: slot %u", i, steps[i].slot);
	}
	CHECK(kinds[RF_STEP_PREFETCH] == NBLOCKS && kinds[RF_STEP_AWAIT] == NBLOCKS &&
	              kinds[RF_STEP_COMPUTE] == NBLOCKS,
	      "step counts %zu/%zu/%zu", kinds[0], kinds[1], kinds[2]);
	/* Lookahead depth-1: the first DEPTH-1 steps prime the ring with blocks 0 .. DEPTH-2. */
	CHECK(steps[0].kind == RF_STEP_PREFETCH && steps[0].block == 0, "first step");
	CHECK(steps[len - 1].kind == RF_STEP_COMPUTE && steps[len - 1].block == NBLOCKS - 1, "last step");
	CHECK(rf_plan_ring(4, 0, NULL, 0, NULL) == RF_EINVAL, "depth 0 is RF_EINVAL");
}

static void check_pipeline(const char *backend)
{
	static unsigned char src[NBLOCKS][SLOT_BYTES];
	const void *srcs[NBLOCKS];
	size_t sizes[NBLOCKS];
	unsigned long want = 0;
	for (size_t i = 0; i < NBLOCKS; i++) {
		sizes[i] = (i * 53) % (SLOT_BYTES + 1); /* 0 .. SLOT_BYTES, both edges included */
		for (size_t j = 0; j < SLOT_BYTES; j++)
			src[i][j] = (unsigned char)(i * 31 + j * 7 + 1);
		for (size_t j = 0; j < sizes[i]; j++)
			want += src[i][j];
		srcs[i] = src[i];
	}

	rf_pipeline_params params = {.depth = DEPTH, .slot_bytes = SLOT_BYTES, .backend = backend};
	rf_pipeline *p = NULL;
	int rc = rf_pipeline_create(&params, &p);
	CHECK(rc == RF_OK && p != NULL, "rf_pipeline_create(%s): %s", backend, rf_err_name(rc));
	if (rc != RF_OK)
		return;
	CHECK(rf_pipeline_depth(p) == DEPTH, "depth %u", rf_pipeline_depth(p));
	CHECK(strcmp(rf_pipeline_backend(p), backend) == 0, "backend %s", rf_pipeline_backend(p));
	for (int run = 0; run < 2; run++) {
		seen s = {.src = (const unsigned char(*)[SLOT_BYTES])src, .sizes = sizes};
		rc = rf_pipeline_run(p, NBLOCKS, srcs, sizes, compute, &s);
		CHECK(rc == RF_OK, "rf_pipeline_run(%s) run %d: %s", backend, run, rf_err_name(rc));
		CHECK(s.next == NBLOCKS && s.bad == 0 && s.sum == want,
		      "%s run %d: %zu computes, %zu bad, sum %lu (want %lu)", backend, run, s.next, s.bad,
		      s.sum, want);
	}
	rf_pipeline_destroy(p);
}

int main(void)
{
	CHECK(rf_version() == RF_VERSION_HEX, "library version %#x, header %#x", rf_version(),
	      (unsigned)RF_VERSION_HEX);
	check_plan();
	check_pipeline("cpu");
	check_pipeline("threads");
	rf_pipeline_destroy(NULL);
#ifdef RF_HAVE_CUDA
	/* The CUDA API compiles and links: rf_cuda_* exist, CUDA's types are visible. */
	int (*reg)(const void *, size_t) = rf_cuda_host_register;
	cudaStream_t none = NULL;
	CHECK(reg != NULL && none == NULL, "rf_cuda_host_register");
	printf("consumer: RF_HAVE_CUDA 1\n");
#else
	printf("consumer: RF_HAVE_CUDA 0\n");
#endif
	if (failures) {
		fprintf(stderr, "consumer: %d failure(s)\n", failures);
		return 1;
	}
	printf("consumer: ok (ringfetch %s)\n", rf_version_string());
	return 0;
}
