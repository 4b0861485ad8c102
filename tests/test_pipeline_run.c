/*
 * tests/test_pipeline_run.c — the core public contract of rf_pipeline_* (include/ringfetch.h), against
 * the shared library, exactly as an outside program would use it: runs (tagged payloads at every depth
 * and size, callback failure).
 *
 * Backend-agnostic: ctest runs this binary once per backend with RF_TEST_BACKEND set ("cpu" when
 * unset); every pipeline is created on that backend. Callbacks never use Criterion asserts (they may
 * run on a library thread): they record the first violation in their context, and the test asserts
 * on it after the run has returned. The helpers (block sets, the checking callback) are in support.h.
 *
 * Randomised tests print their seed on failure; RF_TEST_SEED=<n> replays one.
 */
#include "support.h"

#include <limits.h>

/* ---- tagged payloads ----------------------------------------------------------------------------- */

Test(pipeline, tagged_payloads_every_depth_and_size)
{
	uint64_t seed = test_seed();
	static const size_t slot_sizes[] = {1, 64, 333};
	uint64_t run_id = 0;
	for (unsigned depth = 1; depth <= 16; depth++) {
		for (unsigned kq = 1; kq <= 3; kq++) {
			if (kq > 1 && depth < kq + 1)
				continue;
			for (size_t si = 0; si < sizeof slot_sizes / sizeof slot_sizes[0]; si++) {
				size_t sb = slot_sizes[si];
				rf_pipeline *p = make_pipeline(depth, sb, kq);
				cr_assert_eq(rf_pipeline_depth(p), depth);
				cr_assert_str_eq(rf_pipeline_backend(p), test_backend());
				cr_assert_eq(rf_pipeline_slot_bytes(p), sb);
				cr_assert_eq(rf_pipeline_copy_queues(p), kq);
				const size_t ns[] = {0, 1, depth - 1, depth, depth + 1, 2 * (size_t)depth + 3, 100};
				/* Several runs on one pipeline: nothing of a run may leak into the next. */
				for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++) {
					blockset bs;
					bs_random(&bs, ns[ni], sb, seed + run_id++);
					char what[128];
					snprintf(what, sizeof what, "depth %u copy_queues %u slot_bytes %zu nblocks %zu", depth,
						 kq, sb, ns[ni]);
					checked_run(p, &bs, (unsigned)(ns[ni] % 3), what);
					bs_free(&bs); /* the run has returned: freeing the sources must be safe */
				}
				rf_pipeline_destroy(p);
			}
		}
	}
	leak_check();
}

Test(pipeline, full_slots_and_empty_blocks)
{
	uint64_t seed = test_seed();
	for (unsigned depth = 1; depth <= 4; depth++) {
		rf_pipeline *p = make_pipeline(depth, 4096, 1);
		blockset bs;
		bs_uniform(&bs, 37, 4096, seed); /* every block exactly slot_bytes */
		checked_run(p, &bs, 1, "all blocks exactly slot_bytes");
		bs_free(&bs);
		bs_alloc(&bs, 9, seed + 1); /* every block empty, sources NULL */
		bs_fill(&bs, 1);
		checked_run(p, &bs, 0, "all blocks empty with NULL sources");
		bs_free(&bs);
		rf_pipeline_destroy(p);
	}
	leak_check();
}

Test(pipeline, max_depth_ring)
{
	uint64_t seed = test_seed();
	rf_pipeline *p = make_pipeline(RF_MAX_DEPTH, 16, 1);
	cr_assert_eq(rf_pipeline_depth(p), RF_MAX_DEPTH);
	blockset bs;
	bs_random(&bs, 2 * RF_MAX_DEPTH + 5, 16, seed);
	checked_run(p, &bs, 0, "depth RF_MAX_DEPTH");
	bs_free(&bs);
	bs_random(&bs, 7, 16, seed + 1); /* fewer blocks than slots */
	checked_run(p, &bs, 0, "depth RF_MAX_DEPTH, 7 blocks");
	bs_free(&bs);
	rf_pipeline_destroy(p);
	leak_check();
}

Test(pipeline, large_run_million_blocks)
{
	enum { NB = 1000000, NBUF = 17, BYTES = 64 };
	uint64_t seed = test_seed();
	rf_pipeline *p = make_pipeline(4, BYTES, 1);
	/* Sources alias 17 buffers (coprime with the depth, so neighbouring slots differ). */
	unsigned char *bufs[NBUF];
	for (size_t j = 0; j < NBUF; j++) {
		bufs[j] = malloc(BYTES);
		cr_assert(bufs[j] != NULL);
		fill_pattern(bufs[j], BYTES, j, seed);
	}
	blockset bs;
	bs_alloc(&bs, NB, seed);
	for (size_t i = 0; i < NB; i++) {
		bs.sizes[i] = BYTES;
		bs.srcs[i] = bufs[i % NBUF];
	}
	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	checked_run(p, &bs, 0, "1,000,000 blocks of 64 bytes");
	clock_gettime(CLOCK_MONOTONIC, &t1);
	double secs = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
	cr_assert_lt(secs, 30.0, "1,000,000 blocks took %.2f s", secs);
	free(bs.srcs);
	free(bs.sizes);
	free(bs.bufs);
	for (size_t j = 0; j < NBUF; j++)
		free(bufs[j]);
	rf_pipeline_destroy(p);
	leak_check();
}

/* ---- callback failure ---------------------------------------------------------------------------- */

Test(pipeline, callback_failure_stops_and_pipeline_stays_usable)
{
	uint64_t seed = test_seed();
	static const unsigned depths[] = {1, 2, 3, 4, 7};
	/* Any non-zero value fails the run with RF_ECALLBACK, also one that looks like an RF_ code. */
	static const int odd_values[] = {1, -1, INT_MAX, INT_MIN, RF_ECANCELED, RF_EBUSY, RF_ECALLBACK};
	const size_t N = 12;
	unsigned vi = 0;
	for (size_t di = 0; di < sizeof depths / sizeof depths[0]; di++) {
		unsigned depth = depths[di];
		for (unsigned kq = 1; kq <= 2; kq++) {
			if (kq > 1 && depth < kq + 1)
				continue;
			rf_pipeline *p = make_pipeline(depth, 100, kq);
			const size_t ks[] = {0, 1, depth - 1, depth, depth + 1, N - 1};
			for (size_t ki = 0; ki < sizeof ks / sizeof ks[0]; ki++) {
				size_t k = ks[ki];
				int value = (k % 2 == 0) ? 7000 + (int)k
							 : odd_values[vi++ % (sizeof odd_values / sizeof odd_values[0])];
				if (value == (int)k)
					value = 7000 + (int)k; /* keep the block and the value apart in the message */
				blockset bs;
				bs_random(&bs, N, 100, seed + 31 * k + depth);
				checker c;
				ck_ring(&c, &bs, depth);
				c.fail_at = k;
				c.fail_value = value;
				c.work = 1;
				int rc = rf_pipeline_run(p, N, bs_srcs(&bs), bs.sizes, check_cb, &c);
				/* Freed at once: a copy still in flight after the return would read freed memory. */
				bs_free(&bs);
				cr_assert_eq(rc, RF_ECALLBACK, "depth %u kq %u fail at %zu with %d: got %s: %s", depth, kq, k,
					     value, rf_err_name(rc), rf_errmsg());
				cr_assert_str_empty(c.err, "depth %u kq %u fail at %zu: %s [seed %llu]", depth, kq, k, c.err,
						    (unsigned long long)seed);
				cr_assert_eq(c.calls, k + 1,
					     "depth %u kq %u fail at %zu: %zu computes (none may follow block %zu)", depth, kq,
					     k, c.calls, k);
				const char *msg = rf_errmsg();
				cr_assert(has_number(msg, (long long)k), "rf_errmsg() does not name block %zu: \"%s\"", k,
					  msg);
				cr_assert(has_number(msg, value), "rf_errmsg() does not name the value %d: \"%s\"", value,
					  msg);

				/* The same pipeline, a full correct run. */
				bs_random(&bs, N + depth, 100, seed + 977 * k + depth);
				checked_run(p, &bs, 1, "run after a failed run");
				bs_free(&bs);
			}
			rf_pipeline_destroy(p);
		}
	}
	leak_check();
}

Test(pipeline, successful_calls_keep_the_last_failure_detail)
{
	rf_pipeline *p;
	cr_assert_eq(rf_pipeline_create(NULL, &p), RF_EINVAL);
	char before[512];
	snprintf(before, sizeof before, "%s", rf_errmsg());
	cr_assert_str_neq(before, "");
	p = make_pipeline(3, 64, 1);
	blockset bs;
	bs_random(&bs, 20, 64, test_seed());
	checked_run(p, &bs, 0, "successful run");
	bs_free(&bs);
	rf_pipeline_destroy(p);
	cr_assert_str_eq(rf_errmsg(), before, "a successful create/run/destroy changed rf_errmsg() to \"%s\"",
			 rf_errmsg());
	leak_check();
}

