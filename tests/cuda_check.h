/* tests/cuda_check.h — what the suites that drive the cuda backend against the simulated CUDA
 * (tests/cuda_sim.h) share: block sources of each kind (pinned: simulator-registered; pageable:
 * malloc; or a random mix) and the checking compute, which enqueues a host function on its stream that
 * compares the slot with the block's source when the simulated device gets there — exactly when a
 * kernel would read it. Criterion-based, header-only in the manner of support.h. */
#ifndef RF_TESTS_CUDA_CHECK_H
#define RF_TESTS_CUDA_CHECK_H

#include "cuda_sim.h"
#include "support.h"

/* The simulator with one device on NUMA node 0, the call log kept. */
static inline void sim_use(uint64_t seed, double step_prob)
{
	sim_config c = {0};
	c.seed = seed;
	c.step_prob = step_prob;
	c.device_count = 1;
	c.numa_node = 0;
	c.log = 1;
	sim_install(&c);
}

/* The compute callback enqueues a host function on its stream that checks the slot's bytes when the
 * device gets there (in stream order), i.e. exactly when a kernel would read them. */
typedef struct check {
	const blockset *bs;
	size_t next_expected;
	size_t checked, bad, first_bad;
	int fail_at;   /* >= 0: the compute of this block returns 7 */
	int cancel_at; /* >= 0: the compute of this block cancels the run */
	rf_pipeline *p;
	int wrong_stream;
} check;

typedef struct probe {
	check *c;
	rf_block b;
} probe;

static probe g_probes[4096];
static size_t g_nprobes;

static inline void probe_fn(void *arg)
{
	probe *pr = arg;
	check *c = pr->c;
	const blockset *bs = c->bs;
	size_t i = pr->b.index;
	int ok = pr->b.bytes == bs->sizes[i] && (bs->sizes[i] == 0 || memcmp(pr->b.data, bs->srcs[i], bs->sizes[i]) == 0);
	if (!ok && c->bad++ == 0)
		c->first_bad = i;
	c->checked++;
}

static inline int compute(void *user, const rf_block *b)
{
	check *c = user;
	if (sim_stream_id(b->stream) < 0)
		c->wrong_stream++;
	if (c->fail_at >= 0 && b->index == (size_t)c->fail_at)
		return 7;
	if (c->cancel_at >= 0 && b->index == (size_t)c->cancel_at)
		rf_pipeline_cancel(c->p);
	if (g_nprobes == sizeof g_probes / sizeof g_probes[0])
		return 99;
	probe *pr = &g_probes[g_nprobes++];
	pr->c = c;
	pr->b = *b;
	return sim_launch(b->stream, probe_fn, pr) == 0 ? 0 : 98;
}

/* Block sources: pinned (simulator-registered), pageable (malloc), or a random mix. */
enum { SRC_PINNED, SRC_PAGEABLE, SRC_MIXED };

static inline void make_blocks_sized(blockset *bs, size_t n, size_t slot_bytes, int kind, uint64_t *rng, size_t fixed)
{
	bs_alloc(bs, n, rng_next(rng));
	for (size_t i = 0; i < n; i++) {
		uint64_t r = rng_next(rng);
		bs->sizes[i] = fixed ? fixed : r % 7 == 0 ? 0 : 1 + (size_t)(r >> 8) % slot_bytes;
		int pinned = kind == SRC_PINNED || (kind == SRC_MIXED && (r >> 40) % 2);
		size_t sz = bs->sizes[i] ? bs->sizes[i] : 1;
		bs->bufs[i] = pinned ? sim_host_alloc(sz) : malloc(sz);
		cr_assert_not_null(bs->bufs[i]);
		fill_pattern(bs->bufs[i], bs->sizes[i], i, bs->seed);
		bs->srcs[i] = bs->bufs[i];
	}
}

static inline void make_blocks(blockset *bs, size_t n, size_t slot_bytes, int kind, uint64_t *rng)
{
	make_blocks_sized(bs, n, slot_bytes, kind, rng, 0);
}

static inline void free_blocks(blockset *bs, int kind)
{
	for (size_t i = 0; i < bs->n; i++) {
		if (kind == SRC_PAGEABLE)
			free(bs->bufs[i]);
		else if (kind == SRC_PINNED)
			sim_host_free(bs->bufs[i]);
		else {
			/* mixed: the simulator knows which ones it allocated */
			size_t n = 1;
			const void *p = bs->bufs[i];
			if (sim_is_pinned(p, n))
				sim_host_free(bs->bufs[i]);
			else
				free(bs->bufs[i]);
		}
	}
	free(bs->srcs);
	free(bs->sizes);
	free(bs->bufs);
}

static inline int run_checked(rf_pipeline *p, const blockset *bs, check *c)
{
	memset(c, 0, sizeof *c);
	c->bs = bs;
	c->fail_at = c->cancel_at = -1;
	c->p = p;
	g_nprobes = 0;
	return rf_pipeline_run(p, bs->n, bs->srcs, bs->sizes, compute, c);
}

#endif
