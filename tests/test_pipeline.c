/*
 * tests/test_pipeline.c — the core public contract of rf_pipeline_* (include/ringfetch.h), against
 * the shared library, exactly as an outside program would use it.
 *
 * Backend-agnostic: ctest runs this binary once per backend with RF_TEST_BACKEND set ("cpu" when
 * unset); every pipeline is created on that backend. Callbacks never use Criterion asserts (they may
 * run on a library thread): they record the first violation in their context, and the test asserts
 * on it after the run has returned.
 *
 * Randomised tests print their seed on failure; RF_TEST_SEED=<n> replays one.
 */
#include "support.h"

#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>

/* ---- helpers ------------------------------------------------------------------------------------- */

/* Random sizes in 0 .. slot_bytes, with the edges (0, 1, slot_bytes) drawn often. */
static void bs_random(blockset *b, size_t n, size_t slot_bytes, uint64_t seed)
{
	bs_alloc(b, n, seed);
	uint64_t st = seed ^ 0x5157u;
	for (size_t i = 0; i < n; i++) {
		uint64_t r = rng_next(&st);
		switch (r % 8) {
		case 0:
			b->sizes[i] = 0;
			break;
		case 1:
			b->sizes[i] = slot_bytes;
			break;
		case 2:
			b->sizes[i] = 1;
			break;
		default:
			b->sizes[i] = (size_t)((r >> 8) % (slot_bytes + 1));
		}
	}
	bs_fill(b, (int)(seed & 1));
}

/* The checking callback's context. */
typedef struct checker {
	const blockset *bs;
	unsigned depth;
	size_t next;       /* the block expected next */
	size_t calls;      /* computes seen */
	size_t fail_at;    /* return fail_value at this block (SIZE_MAX: never) */
	int fail_value;
	unsigned work;     /* yields + re-reads inside the callback, to widen WAR windows */
	size_t owner[RF_MAX_DEPTH]; /* per slot: the block last computed there (SIZE_MAX: none yet) */
	volatile unsigned sink;
	char err[320];     /* first violation, "" if none */
} checker;

static void ck_init(checker *c, const blockset *bs, unsigned depth)
{
	memset(c, 0, sizeof *c);
	c->bs = bs;
	c->depth = depth;
	c->fail_at = SIZE_MAX;
	for (unsigned s = 0; s < RF_MAX_DEPTH; s++)
		c->owner[s] = SIZE_MAX;
}

#define ck_fail(c, ...) first_error((c)->err, sizeof (c)->err, __VA_ARGS__)

/* Verify that block i's bytes are exactly what is in the slot; `when` names the moment. */
static void ck_bytes(checker *c, const rf_block *blk, const char *when)
{
	check_slot_bytes(c->err, sizeof c->err, blk, c->bs->srcs, when);
}

static int check_cb(void *user, const rf_block *blk)
{
	checker *c = user;
	c->calls++;
	size_t i = blk->index;
	if (i != c->next) {
		ck_fail(c, "compute called for block %zu, expected block %zu (call %zu)", i, c->next, c->calls);
	} else if (i >= c->bs->n) {
		ck_fail(c, "compute called for block %zu of a %zu-block run", i, c->bs->n);
	} else {
		unsigned slot = (unsigned)(i % c->depth);
		if (blk->slot != slot)
			ck_fail(c, "block %zu: slot %u, expected %u (depth %u)", i, blk->slot, slot, c->depth);
		if (blk->bytes != c->bs->sizes[i])
			ck_fail(c, "block %zu: bytes %zu, expected %zu", i, blk->bytes, c->bs->sizes[i]);
		if (blk->stream != NULL)
			ck_fail(c, "block %zu: stream %p is not NULL on a host backend", i, blk->stream);
		if (blk->slot < RF_MAX_DEPTH && blk->slot == slot) {
			/* The slot's previous occupant must be block i - depth (or none). */
			size_t prev = c->owner[slot], want = i >= c->depth ? i - c->depth : SIZE_MAX;
			if (prev != want)
				ck_fail(c, "block %zu: slot %u previously held block %zu, expected %zu", i, slot,
					prev, want);
			c->owner[slot] = i;
		}
		if (blk->bytes == c->bs->sizes[i]) {
			ck_bytes(c, blk, "at entry (RAW)");
			/* Work while the slot is ours: a copy landing in it now would be a WAR violation. */
			hold_slot(blk, c->work, &c->sink);
			ck_bytes(c, blk, "at exit (WAR: overwritten during compute)");
		}
	}
	c->next = i + 1;
	if (i == c->fail_at)
		return c->fail_value;
	return 0;
}

static rf_pipeline_params params_of(unsigned depth, size_t slot_bytes)
{
	rf_pipeline_params pp;
	memset(&pp, 0, sizeof pp);
	pp.depth = depth;
	pp.slot_bytes = slot_bytes;
	pp.backend = test_backend();
	return pp;
}

static rf_pipeline *make_pipeline(unsigned depth, size_t slot_bytes, unsigned copy_queues)
{
	rf_pipeline_params pp = params_of(depth, slot_bytes);
	pp.copy_queues = copy_queues;
	rf_pipeline *p = NULL;
	int rc = rf_pipeline_create(&pp, &p);
	cr_assert_eq(rc, RF_OK, "rf_pipeline_create(depth %u, slot_bytes %zu, copy_queues %u, backend %s): %s: %s",
		     depth, slot_bytes, copy_queues, pp.backend, rf_err_name(rc), rf_errmsg());
	cr_assert(p != NULL);
	return p;
}

/* One checked run: every block in order, exactly once, with its bytes, in its slot. */
static void checked_run(rf_pipeline *p, const blockset *bs, unsigned work, const char *what)
{
	checker *c = malloc(sizeof *c);
	cr_assert(c != NULL);
	ck_init(c, bs, rf_pipeline_depth(p));
	c->work = work;
	int rc = rf_pipeline_run(p, bs->n, bs_srcs(bs), bs->sizes, check_cb, c);
	cr_assert_eq(rc, RF_OK, "%s: rf_pipeline_run(%zu blocks) = %s: %s [seed %llu]", what, bs->n,
		     rf_err_name(rc), rf_errmsg(), (unsigned long long)bs->seed);
	cr_assert_str_empty(c->err, "%s: %s [seed %llu]", what, c->err, (unsigned long long)bs->seed);
	cr_assert_eq(c->calls, bs->n, "%s: %zu computes for %zu blocks [seed %llu]", what, c->calls, bs->n,
		     (unsigned long long)bs->seed);
	free(c);
}

static void unset_config_env(void)
{
	unsetenv("RINGFETCH_DEPTH");
	unsetenv("RINGFETCH_BACKEND");
}

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
				ck_init(&c, &bs, depth);
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

/* ---- bad inputs ------------------------------------------------------------------------------------ */

typedef struct bad_fixture {
	rf_pipeline *p;
	blockset bs;
	size_t calls;
} bad_fixture;

static void bad_setup(bad_fixture *f, size_t n)
{
	f->p = make_pipeline(2, 32, 1);
	bs_uniform(&f->bs, n, 32, 42);
	f->calls = 0;
}

static void bad_teardown(bad_fixture *f)
{
	bs_free(&f->bs);
	rf_pipeline_destroy(f->p);
}

/* Running f's blocks, of which block `bad` is `why`, is RF_EINVAL before any compute, and the message
 * names the block. */
static void assert_bad_block_einval(bad_fixture *f, size_t bad, const char *why)
{
	int rc = rf_pipeline_run(f->p, f->bs.n, bs_srcs(&f->bs), f->bs.sizes, count_cb, &f->calls);
	cr_assert_eq(rc, RF_EINVAL, "block %zu %s: %s", bad, why, rf_err_name(rc));
	cr_assert_eq(f->calls, 0, "block %zu %s: compute called %zu times", bad, why, f->calls);
	cr_assert(has_number(rf_errmsg(), (long long)bad), "errmsg \"%s\" does not name block %zu", rf_errmsg(),
		  bad);
}

Test(pipeline, null_arguments_are_einval_before_any_work)
{
	bad_fixture f;
	bad_setup(&f, 4);
	const void *const *srcs = bs_srcs(&f.bs);
	int rc = rf_pipeline_run(NULL, 4, srcs, f.bs.sizes, count_cb, &f.calls);
	cr_assert_eq(rc, RF_EINVAL, "NULL p: %s", rf_err_name(rc));
	cr_assert_str_neq(rf_errmsg(), "");
	rc = rf_pipeline_run(f.p, 4, NULL, f.bs.sizes, count_cb, &f.calls);
	cr_assert_eq(rc, RF_EINVAL, "NULL srcs: %s", rf_err_name(rc));
	cr_assert(strstr(rf_errmsg(), "srcs") != NULL, "errmsg \"%s\" does not name srcs", rf_errmsg());
	rc = rf_pipeline_run(f.p, 4, srcs, NULL, count_cb, &f.calls);
	cr_assert_eq(rc, RF_EINVAL, "NULL sizes: %s", rf_err_name(rc));
	cr_assert(strstr(rf_errmsg(), "sizes") != NULL, "errmsg \"%s\" does not name sizes", rf_errmsg());
	rc = rf_pipeline_run(f.p, 4, srcs, f.bs.sizes, NULL, &f.calls);
	cr_assert_eq(rc, RF_EINVAL, "NULL compute: %s", rf_err_name(rc));
	cr_assert(strstr(rf_errmsg(), "compute") != NULL, "errmsg \"%s\" does not name compute", rf_errmsg());
	cr_assert_eq(f.calls, 0, "compute was called %zu times on invalid input", f.calls);
	/* The pipeline is unharmed. */
	checked_run(f.p, &f.bs, 0, "after invalid calls");
	bad_teardown(&f);
	leak_check();
}

Test(pipeline, oversized_block_is_einval_before_any_work)
{
	const size_t N = 6;
	for (size_t bad = 0; bad < N; bad++) {
		bad_fixture f;
		bad_setup(&f, N);
		free(f.bs.bufs[bad]);
		f.bs.bufs[bad] = calloc(1, 33);
		f.bs.srcs[bad] = f.bs.bufs[bad];
		f.bs.sizes[bad] = 33; /* slot_bytes + 1 */
		assert_bad_block_einval(&f, bad, "over slot_bytes");
		bad_teardown(&f);
	}
	/* Far over, and SIZE_MAX. */
	bad_fixture f;
	bad_setup(&f, 3);
	f.bs.sizes[2] = SIZE_MAX;
	int rc = rf_pipeline_run(f.p, 3, bs_srcs(&f.bs), f.bs.sizes, count_cb, &f.calls);
	cr_assert_eq(rc, RF_EINVAL, "size SIZE_MAX: %s", rf_err_name(rc));
	cr_assert_eq(f.calls, 0);
	f.bs.sizes[2] = 32;
	bad_teardown(&f);
	leak_check();
}

Test(pipeline, null_source_with_bytes_is_einval)
{
	const size_t N = 5;
	for (size_t bad = 0; bad < N; bad++) {
		bad_fixture f;
		bad_setup(&f, N);
		f.bs.srcs[bad] = NULL;
		assert_bad_block_einval(&f, bad, "NULL source with 32 bytes");
		bad_teardown(&f);
	}
	leak_check();
}

Test(pipeline, null_source_with_zero_bytes_is_fine)
{
	bad_fixture f;
	bad_setup(&f, 5);
	free(f.bs.bufs[2]);
	f.bs.bufs[2] = NULL;
	f.bs.srcs[2] = NULL;
	f.bs.sizes[2] = 0;
	free(f.bs.bufs[4]);
	f.bs.bufs[4] = NULL;
	f.bs.srcs[4] = NULL;
	f.bs.sizes[4] = 0;
	checked_run(f.p, &f.bs, 0, "NULL sources with 0 bytes");
	bad_teardown(&f);
	leak_check();
}

Test(pipeline, zero_blocks_is_ok_with_everything_null)
{
	cr_assert_eq(rf_pipeline_run(NULL, 0, NULL, NULL, NULL, NULL), RF_OK);
	bad_fixture f;
	bad_setup(&f, 1);
	cr_assert_eq(rf_pipeline_run(f.p, 0, NULL, NULL, NULL, NULL), RF_OK);
	cr_assert_eq(rf_pipeline_run(f.p, 0, bs_srcs(&f.bs), f.bs.sizes, count_cb, &f.calls), RF_OK);
	cr_assert_eq(f.calls, 0, "compute called for a 0-block run");
	checked_run(f.p, &f.bs, 0, "after 0-block runs");
	bad_teardown(&f);
	leak_check();
}

/* ---- rf_pipeline_create ---------------------------------------------------------------------------- */

#define SENTINEL ((rf_pipeline *)(uintptr_t)0x5e5e5e50u)

static int try_create(const rf_pipeline_params *pp, rf_pipeline **out)
{
	*out = SENTINEL;
	int rc = rf_pipeline_create(pp, out);
	if (rc != RF_OK)
		cr_assert_eq(*out, SENTINEL, "*out changed on failure (%s)", rf_err_name(rc));
	return rc;
}

Test(pipeline, create_rejects_bad_params)
{
	rf_pipeline *p;
	rf_pipeline_params pp = params_of(2, 64);
	cr_assert_eq(rf_pipeline_create(NULL, &p), RF_EINVAL);
	cr_assert_eq(rf_pipeline_create(&pp, NULL), RF_EINVAL);

	pp = params_of(2, 0);
	cr_assert_eq(try_create(&pp, &p), RF_EINVAL, "slot_bytes 0");
	cr_assert(strstr(rf_errmsg(), "slot_bytes") != NULL, "errmsg: %s", rf_errmsg());

	pp = params_of(RF_MAX_DEPTH + 1, 64);
	cr_assert_eq(try_create(&pp, &p), RF_EINVAL, "depth RF_MAX_DEPTH + 1");
	cr_assert(has_number(rf_errmsg(), RF_MAX_DEPTH + 1), "errmsg: %s", rf_errmsg());
	pp = params_of(UINT_MAX - 1, 64); /* UINT_MAX is RF_DEPTH_AUTO */
	cr_assert_eq(try_create(&pp, &p), RF_EINVAL, "depth UINT_MAX - 1");

	for (unsigned bit = 0; bit < 32; bit += 7) {
		pp = params_of(2, 64);
		pp.flags = 1u << bit;
		cr_assert_eq(try_create(&pp, &p), RF_EINVAL, "flags %#x", pp.flags);
	}

	/* depth * slot_bytes overflowing size_t. */
	pp = params_of(2, SIZE_MAX / 2 + 1);
	cr_assert_eq(try_create(&pp, &p), RF_EINVAL, "2 slots of SIZE_MAX/2+1 bytes: %s", rf_errmsg());
	pp = params_of(RF_MAX_DEPTH, SIZE_MAX / RF_MAX_DEPTH + 1);
	cr_assert_eq(try_create(&pp, &p), RF_EINVAL, "1024 slots overflowing: %s", rf_errmsg());
	leak_check();
}

Test(pipeline, create_unknown_backend_is_enodev)
{
	rf_pipeline *p;
	static const char *const names[] = {"nope", "", "CPU", "cpu ", "gpu"};
	for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
		rf_pipeline_params pp = params_of(2, 64);
		pp.backend = names[i];
		int rc = try_create(&pp, &p);
		cr_assert_eq(rc, RF_ENODEV, "backend \"%s\": %s", names[i], rf_err_name(rc));
		cr_assert_str_neq(rf_errmsg(), "");
	}
	rf_pipeline_params pp = params_of(2, 64);
	pp.backend = "nope";
	try_create(&pp, &p);
	cr_assert(strstr(rf_errmsg(), "nope") != NULL, "errmsg does not name the backend: %s", rf_errmsg());
	leak_check();
}

Test(pipeline, cuda_is_usable_or_enodev)
{
	/* "cuda" is a known name: usable here, or RF_ENODEV saying why, never another code. */
	unset_config_env();
	rf_pipeline *p;
	rf_pipeline_params pp = params_of(2, 64);
	pp.backend = "cuda";
	int rc = try_create(&pp, &p);
	if (rc == RF_OK) {
		cr_assert_str_eq(rf_pipeline_backend(p), "cuda");
		rf_pipeline_destroy(p);
	} else {
		cr_assert_eq(rc, RF_ENODEV, "backend cuda: %s: %s", rf_err_name(rc), rf_errmsg());
		cr_assert_str_neq(rf_errmsg(), "");
	}
	/* Through the environment: well-formed, so never RF_ECONFIG. */
	setenv("RINGFETCH_BACKEND", "cuda", 1);
	pp.backend = NULL;
	int rc2 = try_create(&pp, &p);
	cr_assert_eq(rc2, rc, "RINGFETCH_BACKEND=cuda: %s, explicit \"cuda\": %s", rf_err_name(rc2), rf_err_name(rc));
	if (rc2 == RF_OK)
		rf_pipeline_destroy(p);
	leak_check();
}

Test(pipeline, create_copy_queues_need_depth)
{
	rf_pipeline *p;
	static const unsigned bad[][2] = {{2, 2}, {2, 1}, {3, 3}, {4, 4}, {5, 2}};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		rf_pipeline_params pp = params_of(bad[i][1], 64);
		pp.copy_queues = bad[i][0];
		int rc = try_create(&pp, &p);
		cr_assert_eq(rc, RF_EINVAL, "copy_queues %u depth %u: %s", bad[i][0], bad[i][1], rf_err_name(rc));
	}
	/* depth 0 resolves to the default 2, which is too shallow for 2 copy queues. */
	unset_config_env();
	rf_pipeline_params pp = params_of(0, 64);
	pp.copy_queues = 2;
	cr_assert_eq(try_create(&pp, &p), RF_EINVAL, "copy_queues 2 with default depth 2");
	/* Enough depth: fine, and copy_queues reads back. */
	pp = params_of(3, 64);
	pp.copy_queues = 2;
	cr_assert_eq(try_create(&pp, &p), RF_OK, "%s", rf_errmsg());
	cr_assert_eq(rf_pipeline_copy_queues(p), 2);
	rf_pipeline_destroy(p);
	pp = params_of(4, 64);
	pp.copy_queues = 0; /* 0 = 1 */
	cr_assert_eq(try_create(&pp, &p), RF_OK, "%s", rf_errmsg());
	cr_assert_eq(rf_pipeline_copy_queues(p), 1);
	rf_pipeline_destroy(p);
	leak_check();
}

Test(pipeline, create_max_depth_works)
{
	rf_pipeline *p;
	rf_pipeline_params pp = params_of(RF_MAX_DEPTH, 8);
	cr_assert_eq(try_create(&pp, &p), RF_OK, "%s", rf_errmsg());
	cr_assert_eq(rf_pipeline_depth(p), RF_MAX_DEPTH);
	cr_assert_eq(rf_pipeline_slot_bytes(p), 8);
	rf_pipeline_destroy(p);
	leak_check();
}

Test(pipeline, getters_on_null_and_destroy_null)
{
	cr_assert_eq(rf_pipeline_depth(NULL), 0);
	cr_assert_not_null(rf_pipeline_backend(NULL));
	cr_assert_str_eq(rf_pipeline_backend(NULL), "");
	cr_assert_eq(rf_pipeline_slot_bytes(NULL), 0);
	cr_assert_eq(rf_pipeline_copy_queues(NULL), 0);
	cr_assert_not_null(rf_pipeline_describe(NULL));
	cr_assert_str_eq(rf_pipeline_describe(NULL), "");
	rf_pipeline_destroy(NULL);

	rf_pipeline *p = make_pipeline(3, 128, 2);
	cr_assert_eq(rf_pipeline_depth(p), 3);
	cr_assert_eq(rf_pipeline_slot_bytes(p), 128);
	cr_assert_eq(rf_pipeline_copy_queues(p), 2);
	cr_assert_str_eq(rf_pipeline_backend(p), test_backend());
	const char *d = rf_pipeline_describe(p);
	cr_assert_not_null(d);
	cr_assert_str_neq(d, "", "rf_pipeline_describe() is empty");
	const char *name = rf_pipeline_backend(p);
	rf_pipeline_destroy(p);
	/* "a static string": still readable after the pipeline is gone (ASan would see a dangling one). */
	cr_assert_str_eq(name, test_backend());
	leak_check();
}

Test(pipeline, default_depth_is_two)
{
	unset_config_env();
	rf_pipeline *p;
	rf_pipeline_params pp = params_of(0, 64);
	cr_assert_eq(try_create(&pp, &p), RF_OK, "%s", rf_errmsg());
	cr_assert_eq(rf_pipeline_depth(p), 2);
	blockset bs;
	bs_random(&bs, 9, 64, test_seed());
	checked_run(p, &bs, 0, "default depth");
	bs_free(&bs);
	rf_pipeline_destroy(p);
	leak_check();
}

Test(pipeline, depth_from_environment)
{
	unset_config_env();
	setenv("RINGFETCH_DEPTH", "5", 1);
	rf_pipeline *p;
	rf_pipeline_params pp = params_of(0, 64);
	cr_assert_eq(try_create(&pp, &p), RF_OK, "%s", rf_errmsg());
	cr_assert_eq(rf_pipeline_depth(p), 5);
	blockset bs;
	bs_random(&bs, 13, 64, test_seed());
	checked_run(p, &bs, 0, "RINGFETCH_DEPTH=5");
	bs_free(&bs);
	rf_pipeline_destroy(p);

	/* An explicit depth wins, and the environment is then not consulted at all. */
	pp = params_of(3, 64);
	cr_assert_eq(try_create(&pp, &p), RF_OK, "%s", rf_errmsg());
	cr_assert_eq(rf_pipeline_depth(p), 3);
	rf_pipeline_destroy(p);
	setenv("RINGFETCH_DEPTH", "abc", 1);
	cr_assert_eq(try_create(&pp, &p), RF_OK, "explicit depth with a malformed RINGFETCH_DEPTH: %s",
		     rf_errmsg());
	cr_assert_eq(rf_pipeline_depth(p), 3);
	rf_pipeline_destroy(p);
	leak_check();
}

/* With `var` set to `val`, creating from pp (which leaves the setting to the environment) is
 * RF_ECONFIG, and the message names the variable and shows the value. */
static void assert_env_econfig(const char *var, const char *val, const rf_pipeline_params *pp)
{
	setenv(var, val, 1);
	rf_pipeline *p;
	int rc = try_create(pp, &p);
	cr_assert_eq(rc, RF_ECONFIG, "%s=\"%s\": %s", var, val, rf_err_name(rc));
	const char *msg = rf_errmsg();
	cr_assert(strstr(msg, var) != NULL, "errmsg does not name the variable: %s", msg);
	if (val[0] != '\0')
		cr_assert(strstr(msg, val) != NULL, "errmsg does not show the value \"%s\": %s", val, msg);
	else
		cr_assert(strstr(msg, "\"\"") != NULL || strstr(msg, "empty") != NULL,
			  "errmsg does not show the empty value: %s", msg);
}

Test(pipeline, malformed_depth_environment_is_econfig)
{
	static const char *const vals[] = {"abc", "0", "-1", "99999", "", "4x", "1025", " 2", "+2", "0x10"};
	unset_config_env();
	for (size_t i = 0; i < sizeof vals / sizeof vals[0]; i++) {
		rf_pipeline_params pp = params_of(0, 64);
		assert_env_econfig("RINGFETCH_DEPTH", vals[i], &pp);
	}
	leak_check();
}

Test(pipeline, backend_from_environment)
{
	unset_config_env();
	rf_pipeline *p;
	rf_pipeline_params pp = params_of(2, 64);
	pp.backend = NULL;
	setenv("RINGFETCH_BACKEND", "cpu", 1);
	cr_assert_eq(try_create(&pp, &p), RF_OK, "%s", rf_errmsg());
	cr_assert_str_eq(rf_pipeline_backend(p), "cpu");
	rf_pipeline_destroy(p);

	setenv("RINGFETCH_BACKEND", test_backend(), 1);
	cr_assert_eq(try_create(&pp, &p), RF_OK, "%s", rf_errmsg());
	cr_assert_str_eq(rf_pipeline_backend(p), test_backend());
	blockset bs;
	bs_random(&bs, 11, 64, test_seed());
	checked_run(p, &bs, 0, "backend from RINGFETCH_BACKEND");
	bs_free(&bs);
	rf_pipeline_destroy(p);

	/* An explicit backend wins over a malformed variable, which is then not consulted. */
	setenv("RINGFETCH_BACKEND", "gpu", 1);
	pp.backend = test_backend();
	cr_assert_eq(try_create(&pp, &p), RF_OK, "explicit backend with RINGFETCH_BACKEND=gpu: %s", rf_errmsg());
	cr_assert_str_eq(rf_pipeline_backend(p), test_backend());
	rf_pipeline_destroy(p);
	leak_check();
}

Test(pipeline, malformed_backend_environment_is_econfig)
{
	static const char *const vals[] = {"gpu", "", "CPU", "cpu,threads", "nope"};
	unset_config_env();
	for (size_t i = 0; i < sizeof vals / sizeof vals[0]; i++) {
		rf_pipeline_params pp = params_of(2, 64);
		pp.backend = NULL;
		assert_env_econfig("RINGFETCH_BACKEND", vals[i], &pp);
	}
	leak_check();
}

static int is_real_backend(const char *name)
{
	return strcmp(name, "cpu") == 0 || strcmp(name, "threads") == 0 || strcmp(name, "cuda") == 0;
}

Test(pipeline, auto_resolves_to_a_real_backend)
{
	unset_config_env();
	rf_pipeline *p;
	rf_pipeline_params pp = params_of(3, 64);
	pp.backend = "auto";
	cr_assert_eq(try_create(&pp, &p), RF_OK, "%s", rf_errmsg());
	const char *name = rf_pipeline_backend(p);
	cr_assert(is_real_backend(name), "\"auto\" resolved to \"%s\"", name);
	rf_pipeline_destroy(p);

	/* backend NULL, no RINGFETCH_BACKEND: "auto", resolved. */
	pp.backend = NULL;
	cr_assert_eq(try_create(&pp, &p), RF_OK, "%s", rf_errmsg());
	name = rf_pipeline_backend(p);
	cr_assert(is_real_backend(name), "default backend resolved to \"%s\"", name);
	if (strcmp(name, "cuda") != 0) {
		blockset bs;
		bs_random(&bs, 10, 64, test_seed());
		checked_run(p, &bs, 0, "auto backend");
		bs_free(&bs);
	}
	rf_pipeline_destroy(p);

	setenv("RINGFETCH_BACKEND", "auto", 1);
	cr_assert_eq(try_create(&pp, &p), RF_OK, "%s", rf_errmsg());
	cr_assert(is_real_backend(rf_pipeline_backend(p)), "RINGFETCH_BACKEND=auto resolved to \"%s\"",
		  rf_pipeline_backend(p));
	rf_pipeline_destroy(p);
	leak_check();
}

Test(pipeline, many_copy_queues)
{
	uint64_t seed = test_seed();
	static const unsigned depths[] = {64, 100, RF_MAX_DEPTH};
	for (size_t di = 0; di < sizeof depths / sizeof depths[0]; di++) {
		/* 63 copy lanes + the compute queue = RF_MAX_QUEUES */
		rf_pipeline *p = make_pipeline(depths[di], 32, 63);
		cr_assert_eq(rf_pipeline_copy_queues(p), 63);
		static const size_t ns[] = {1, 2, 62, 63, 64, 65, 127, 300, 2100};
		for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++) {
			blockset bs;
			bs_random(&bs, ns[ni], 32, seed + ni);
			char what[96];
			snprintf(what, sizeof what, "63 copy queues, depth %u, %zu blocks", depths[di], ns[ni]);
			checked_run(p, &bs, 0, what);
			bs_free(&bs);
		}
		rf_pipeline_destroy(p);
	}
	rf_pipeline *p;

	rf_pipeline_params pp = params_of(RF_MAX_DEPTH, 32);
	pp.copy_queues = 64; /* one queue too many */
	cr_assert_eq(try_create(&pp, &p), RF_EINVAL, "copy_queues 64");
	pp.copy_queues = UINT_MAX;
	cr_assert_eq(try_create(&pp, &p), RF_EINVAL, "copy_queues UINT_MAX");
	leak_check();
}

/* ---- re-entry, other threads, concurrency ---------------------------------------------------------- */

typedef struct reenter_ctx {
	checker ck;
	rf_pipeline *p;
	size_t at;
	int nested_rc;
	size_t nested_calls;
	int nested_done;
	int use_thread;
} reenter_ctx;

static void *other_thread_run(void *arg)
{
	reenter_ctx *r = arg;
	r->nested_rc = rf_pipeline_run(r->p, r->ck.bs->n, bs_srcs(r->ck.bs), r->ck.bs->sizes, count_cb,
				       &r->nested_calls);
	return NULL;
}

static int reenter_cb(void *user, const rf_block *blk)
{
	reenter_ctx *r = user;
	if (blk->index == r->at) {
		if (r->use_thread) {
			pthread_t t;
			if (pthread_create(&t, NULL, other_thread_run, r) == 0) {
				pthread_join(t, NULL);
				r->nested_done = 1;
			}
		} else {
			other_thread_run(r);
			r->nested_done = 1;
		}
	}
	return check_cb(&r->ck, blk);
}

static void reenter_case(int use_thread)
{
	uint64_t seed = test_seed();
	for (unsigned depth = 1; depth <= 3; depth++) {
		rf_pipeline *p = make_pipeline(depth, 48, 1);
		blockset bs;
		bs_random(&bs, 8, 48, seed + depth);
		reenter_ctx *r = calloc(1, sizeof *r);
		cr_assert(r != NULL);
		ck_init(&r->ck, &bs, depth);
		r->p = p;
		r->at = 3;
		r->nested_rc = 12345;
		r->use_thread = use_thread;
		int rc = rf_pipeline_run(p, bs.n, bs_srcs(&bs), bs.sizes, reenter_cb, r);
		cr_assert_eq(rc, RF_OK, "outer run: %s: %s", rf_err_name(rc), rf_errmsg());
		cr_assert(r->nested_done);
		cr_assert_eq(r->nested_rc, RF_EBUSY, "%s run of a running pipeline: %s (%d)",
			     use_thread ? "another thread's" : "re-entrant", rf_err_name(r->nested_rc), r->nested_rc);
		cr_assert_eq(r->nested_calls, 0, "the refused run called compute %zu times", r->nested_calls);
		cr_assert_str_empty(r->ck.err, "%s [seed %llu]", r->ck.err, (unsigned long long)seed);
		cr_assert_eq(r->ck.calls, bs.n);
		/* And afterwards the pipeline is idle again. */
		checked_run(p, &bs, 0, "after the refused nested run");
		free(r);
		bs_free(&bs);
		rf_pipeline_destroy(p);
	}
}

Test(pipeline, reentrant_run_from_callback_is_ebusy)
{
	reenter_case(0);
	leak_check();
}

Test(pipeline, run_from_another_thread_while_running_is_ebusy)
{
	reenter_case(1);
	leak_check();
}

/* A callback may run a whole run of another pipeline. */
typedef struct nested_other {
	checker ck;
	rf_pipeline *inner;
	const blockset *inner_bs;
	int inner_rc;
	char inner_err[320];
	size_t inner_calls;
} nested_other;

static int nested_other_cb(void *user, const rf_block *blk)
{
	nested_other *o = user;
	if (blk->index == 2) {
		checker *c = malloc(sizeof *c);
		if (c != NULL) {
			ck_init(c, o->inner_bs, rf_pipeline_depth(o->inner));
			o->inner_rc = rf_pipeline_run(o->inner, o->inner_bs->n, bs_srcs(o->inner_bs), o->inner_bs->sizes,
						      check_cb, c);
			snprintf(o->inner_err, sizeof o->inner_err, "%s", c->err);
			o->inner_calls = c->calls;
			free(c);
		}
	}
	return check_cb(&o->ck, blk);
}

Test(pipeline, callback_runs_another_pipeline)
{
	uint64_t seed = test_seed();
	rf_pipeline *outer = make_pipeline(3, 64, 1), *inner = make_pipeline(2, 64, 1);
	blockset obs, ibs;
	bs_random(&obs, 9, 64, seed);
	bs_random(&ibs, 17, 64, seed + 1);
	nested_other *o = calloc(1, sizeof *o);
	cr_assert(o != NULL);
	ck_init(&o->ck, &obs, 3);
	o->inner = inner;
	o->inner_bs = &ibs;
	o->inner_rc = 12345;
	int rc = rf_pipeline_run(outer, obs.n, bs_srcs(&obs), obs.sizes, nested_other_cb, o);
	cr_assert_eq(rc, RF_OK, "outer: %s: %s", rf_err_name(rc), rf_errmsg());
	cr_assert_str_empty(o->ck.err, "outer: %s [seed %llu]", o->ck.err, (unsigned long long)seed);
	cr_assert_eq(o->ck.calls, obs.n);
	cr_assert_eq(o->inner_rc, RF_OK, "inner run from a callback: %s", rf_err_name(o->inner_rc));
	cr_assert_str_empty(o->inner_err, "inner: %s [seed %llu]", o->inner_err, (unsigned long long)seed);
	cr_assert_eq(o->inner_calls, ibs.n);
	free(o);
	bs_free(&obs);
	bs_free(&ibs);
	rf_pipeline_destroy(outer);
	rf_pipeline_destroy(inner);
	leak_check();
}

typedef struct conc_arg {
	uint64_t seed;
	unsigned depth;
	int rc;
	char err[320];
} conc_arg;

static void *conc_worker(void *arg)
{
	conc_arg *a = arg;
	rf_pipeline_params pp = params_of(a->depth, 200);
	rf_pipeline *p;
	a->rc = rf_pipeline_create(&pp, &p);
	if (a->rc != RF_OK) {
		snprintf(a->err, sizeof a->err, "create: %s", rf_errmsg());
		return NULL;
	}
	checker *c = malloc(sizeof *c);
	for (int it = 0; it < 20 && a->rc == RF_OK && a->err[0] == '\0'; it++) {
		blockset bs;
		bs_random(&bs, 50 + (size_t)it, 200, a->seed + (uint64_t)it);
		ck_init(c, &bs, a->depth);
		c->work = 1;
		a->rc = rf_pipeline_run(p, bs.n, bs_srcs(&bs), bs.sizes, check_cb, c);
		if (a->rc != RF_OK)
			snprintf(a->err, sizeof a->err, "run: %s", rf_errmsg());
		else if (c->err[0] != '\0')
			snprintf(a->err, sizeof a->err, "%s", c->err);
		else if (c->calls != bs.n)
			snprintf(a->err, sizeof a->err, "%zu computes for %zu blocks", c->calls, bs.n);
		bs_free(&bs);
	}
	free(c);
	rf_pipeline_destroy(p);
	return NULL;
}

Test(pipeline, different_pipelines_run_concurrently)
{
	enum { NT = 4 };
	uint64_t seed = test_seed();
	pthread_t t[NT];
	conc_arg a[NT];
	for (unsigned i = 0; i < NT; i++) {
		memset(&a[i], 0, sizeof a[i]);
		a[i].seed = seed + 1000u * i;
		a[i].depth = 1 + i;
		cr_assert_eq(pthread_create(&t[i], NULL, conc_worker, &a[i]), 0);
	}
	for (unsigned i = 0; i < NT; i++)
		pthread_join(t[i], NULL);
	for (unsigned i = 0; i < NT; i++) {
		cr_assert_eq(a[i].rc, RF_OK, "thread %u: %s", i, a[i].err);
		cr_assert_str_empty(a[i].err, "thread %u: %s [seed %llu]", i, a[i].err, (unsigned long long)seed);
	}
	leak_check();
}

/* ---- destroy from inside the callback -------------------------------------------------------------- */

typedef struct destroy_ctx {
	checker ck;
	rf_pipeline *p;
	size_t at;
	size_t after; /* computes seen after the destroy */
	int destroyed;
} destroy_ctx;

static int destroy_cb(void *user, const rf_block *blk)
{
	destroy_ctx *d = user;
	if (d->destroyed)
		d->after++;
	int rc = check_cb(&d->ck, blk);
	if (blk->index == d->at && !d->destroyed) {
		rf_pipeline_destroy(d->p);
		d->p = NULL;
		d->destroyed = 1;
	}
	return rc;
}

Test(pipeline, destroy_from_inside_the_callback)
{
	uint64_t seed = test_seed();
	const size_t N = 10;
	for (unsigned depth = 1; depth <= 5; depth++) {
		const size_t ks[] = {0, 1, depth - 1, depth, N - 2, N - 1};
		for (size_t ki = 0; ki < sizeof ks / sizeof ks[0]; ki++) {
			size_t k = ks[ki];
			rf_pipeline *p = make_pipeline(depth, 40, depth >= 3 && ki % 2 ? 2 : 1);
			blockset bs;
			bs_random(&bs, N, 40, seed + 10 * k + depth);
			destroy_ctx *d = calloc(1, sizeof *d);
			cr_assert(d != NULL);
			ck_init(&d->ck, &bs, depth);
			d->p = p;
			d->at = k;
			int rc = rf_pipeline_run(p, N, bs_srcs(&bs), bs.sizes, destroy_cb, d);
			bs_free(&bs);
			cr_assert(d->destroyed);
			if (k + 1 < N)
				cr_assert_eq(rc, RF_ECANCELED, "depth %u destroy at block %zu of %zu: %s: %s", depth, k, N,
					     rf_err_name(rc), rf_errmsg());
			else
				cr_assert(rc == RF_ECANCELED || rc == RF_OK, "depth %u destroy at the last block: %s: %s",
					  depth, rf_err_name(rc), rf_errmsg());
			cr_assert_eq(d->after, 0, "depth %u destroy at block %zu: %zu computes after the destroy", depth,
				     k, d->after);
			cr_assert_eq(d->ck.calls, k + 1);
			cr_assert_str_empty(d->ck.err, "%s [seed %llu]", d->ck.err, (unsigned long long)seed);
			free(d);
		}
	}
	leak_check();
}

/* ---- tracing ----------------------------------------------------------------------------------- */

static size_t count_in_file(const char *path, const char *needle)
{
	FILE *f = fopen(path, "r");
	cr_assert_not_null(f, "cannot read %s", path);
	char line[512];
	size_t n = 0;
	while (fgets(line, sizeof line, f))
		n += strstr(line, needle) != NULL;
	fclose(f);
	return n;
}

typedef struct trace_reentry {
	rf_pipeline *p;
	int rc;
} trace_reentry;

static int trace_reentry_cb(void *user, const rf_block *blk)
{
	(void)blk;
	trace_reentry *t = user;
	t->rc = rf_pipeline_trace(t->p, NULL);
	return 0;
}

/* Every copy and compute of every traced run becomes one slice; runs append; NULL stops. */
Test(pipeline, trace_records_every_copy_and_compute)
{
	char path[] = "/tmp/rf-trace-XXXXXX";
	int fd = mkstemp(path);
	cr_assert_geq(fd, 0);
	close(fd);
	remove(path);
	blockset bs;
	bs_uniform(&bs, 37, 256, test_seed());
	rf_pipeline *p = make_pipeline(3, 256, 1);
	cr_assert_eq(rf_pipeline_trace(p, path), RF_OK, "%s", rf_errmsg());
	checked_run(p, &bs, 0, "traced run 1");
	checked_run(p, &bs, 0, "traced run 2");
	cr_assert_eq(rf_pipeline_trace(p, NULL), RF_OK);
	checked_run(p, &bs, 0, "untraced run");
	cr_assert_eq(count_in_file(path, "\"cat\":\"copy\""), 2 * 37u);
	cr_assert_eq(count_in_file(path, "\"cat\":\"compute\""), 2 * 37u);
	cr_assert_eq(count_in_file(path, "\"process_name\""), 2u);
	cr_assert_eq(count_in_file(path, "["), 1u, "one opening bracket, however many runs");
	/* Changing the trace from inside a run is refused. */
	trace_reentry t = {p, 0};
	cr_assert_eq(rf_pipeline_run(p, bs.n, bs_srcs(&bs), bs.sizes, trace_reentry_cb, &t), RF_OK);
	cr_assert_eq(t.rc, RF_EBUSY);
	cr_assert_eq(rf_pipeline_trace(NULL, path), RF_EINVAL);
	cr_assert_eq(rf_pipeline_trace(p, ""), RF_EINVAL);
	rf_pipeline_destroy(p);
	bs_free(&bs);
	remove(path);
	leak_check();
}

/* ---- cancellation ------------------------------------------------------------------------------ */

typedef struct cancel_probe {
	rf_pipeline *p;
	size_t calls, at;
	atomic_int started;
} cancel_probe;

/* Cancels its own pipeline at block `at` (from inside the callback). */
static int cancel_self_cb(void *user, const rf_block *blk)
{
	cancel_probe *c = user;
	c->calls++;
	if (blk->index == c->at)
		cr_assert_eq(rf_pipeline_cancel(c->p), RF_OK);
	return 0;
}

/* Slow computes, so that a cancel from another thread lands mid-run. */
static int slow_cb(void *user, const rf_block *blk)
{
	(void)blk;
	cancel_probe *c = user;
	c->calls++;
	atomic_store(&c->started, 1);
	struct timespec d = {0, 2000000};
	nanosleep(&d, NULL);
	return 0;
}

static void *cancel_later(void *arg)
{
	cancel_probe *c = arg;
	while (!atomic_load(&c->started))
		sched_yield();
	struct timespec d = {0, 10000000};
	nanosleep(&d, NULL);
	cr_assert_eq(rf_pipeline_cancel(c->p), RF_OK);
	return NULL;
}

Test(pipeline, cancel_from_the_callback_stops_after_that_block)
{
	blockset bs;
	bs_uniform(&bs, 40, 64, test_seed());
	for (unsigned depth = 1; depth <= 4; depth++) {
		rf_pipeline *p = make_pipeline(depth, 64, 1);
		cancel_probe c = {p, 0, 7, 0};
		int rc = rf_pipeline_run(p, bs.n, bs_srcs(&bs), bs.sizes, cancel_self_cb, &c);
		cr_assert_eq(rc, RF_ECANCELED, "depth %u: %s", depth, rf_err_name(rc));
		cr_assert_eq(c.calls, 8u, "depth %u: %zu computes, none may follow block 7", depth, c.calls);
		checked_run(p, &bs, 0, "after a cancel"); /* usable, and the cancel is not remembered */
		rf_pipeline_destroy(p);
	}
	bs_free(&bs);
	leak_check();
}

Test(pipeline, cancel_from_another_thread_drains_and_returns_ecanceled)
{
	blockset bs;
	bs_uniform(&bs, 2000, 64, test_seed());
	rf_pipeline *p = make_pipeline(3, 64, 1);
	cancel_probe c = {p, 0, 0, 0};
	pthread_t t;
	cr_assert_eq(pthread_create(&t, NULL, cancel_later, &c), 0);
	int rc = rf_pipeline_run(p, bs.n, bs_srcs(&bs), bs.sizes, slow_cb, &c);
	pthread_join(t, NULL);
	cr_assert_eq(rc, RF_ECANCELED, "%s: %s", rf_err_name(rc), rf_errmsg());
	cr_assert_lt(c.calls, bs.n, "the run went to the end");
	checked_run(p, &bs, 0, "after a cancel from another thread");
	cr_assert_eq(rf_pipeline_cancel(NULL), RF_EINVAL);
	rf_pipeline_destroy(p);
	bs_free(&bs);
	leak_check();
}

/* ---- statistics -------------------------------------------------------------------------------- */

static int spin_cb(void *user, const rf_block *blk)
{
	(void)blk;
	rf_pipeline *p = user;
	rf_stats s;
	cr_assert_eq(rf_pipeline_stats(p, &s), RF_OK, "stats while running: the run before");
	cr_assert_eq(rf_pipeline_collect_stats(p, 0), RF_EBUSY, "collect while running");
	struct timespec t0, t;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	do
		clock_gettime(CLOCK_MONOTONIC, &t);
	while ((t.tv_sec - t0.tv_sec) * 1000000000L + (t.tv_nsec - t0.tv_nsec) < 20000);
	return 0;
}

Test(pipeline, stats_of_the_last_run)
{
	blockset bs;
	bs_uniform(&bs, 64, 4096, test_seed());
	uint64_t bytes = 0;
	for (size_t i = 0; i < bs.n; i++)
		bytes += bs.sizes[i];
	rf_pipeline *p = make_pipeline(3, 4096, 2);
	rf_stats s;
	cr_assert_eq(rf_pipeline_stats(p, &s), RF_OK);
	cr_assert_eq(s.blocks, 0u, "no run yet");
	checked_run(p, &bs, 0, "untimed");
	cr_assert_eq(rf_pipeline_stats(p, &s), RF_OK);
	cr_assert_eq(s.blocks, bs.n);
	cr_assert_eq(s.bytes, bytes);
	cr_assert_gt(s.wall_ns, 0u);
	cr_assert_eq(s.timed, 0);
	cr_assert_eq(rf_pipeline_collect_stats(p, 1), RF_OK);
	cr_assert_eq(rf_pipeline_run(p, bs.n, bs_srcs(&bs), bs.sizes, spin_cb, p), RF_OK, "%s", rf_errmsg());
	cr_assert_eq(rf_pipeline_stats(p, &s), RF_OK);
	cr_assert_eq(s.timed, 1);
	cr_assert_eq(s.nqueues, 3u, "queue 0 computes, two copy queues");
	cr_assert_eq(s.queue[0].computes, bs.n);
	cr_assert_eq(s.queue[0].copies, 0u);
	cr_assert_eq(s.queue[1].copies + s.queue[2].copies, bs.n);
	cr_assert_geq(s.queue[0].busy_ns, bs.n * 20000u, "64 computes of >= 20 us");
	cr_assert_leq(s.queue[0].busy_ns, s.wall_ns);
	cr_assert_gt(s.copy_ns, 0u);
	cr_assert_eq(s.exposed_ns, s.wall_ns - s.queue[0].busy_ns);
	cr_assert(s.overlap_efficiency >= 0 && s.overlap_efficiency <= 1, "%f", s.overlap_efficiency);
	if (strcmp(test_backend(), "cpu") == 0) /* nothing overlaps inline: every copy is exposed */
		cr_assert_eq(s.overlap_efficiency, 0.0);
	cr_assert_eq(rf_pipeline_collect_stats(p, 0), RF_OK);
	checked_run(p, &bs, 0, "untimed again");
	cr_assert_eq(rf_pipeline_stats(p, &s), RF_OK);
	cr_assert_eq(s.timed, 0);
	cr_assert_eq(rf_pipeline_stats(NULL, &s), RF_EINVAL);
	cr_assert_eq(rf_pipeline_stats(p, NULL), RF_EINVAL);
	cr_assert_eq(rf_pipeline_collect_stats(NULL, 1), RF_EINVAL);
	rf_pipeline_destroy(p);
	bs_free(&bs);
	leak_check();
}
