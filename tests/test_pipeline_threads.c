/*
 * tests/test_pipeline_threads.c — the core public contract of rf_pipeline_* (include/ringfetch.h), against
 * the shared library, exactly as an outside program would use it: re-entry, other threads, concurrency, and destroy
 * from inside the callback.
 *
 * Backend-agnostic: ctest runs this binary once per backend with RF_TEST_BACKEND set ("cpu" when
 * unset); every pipeline is created on that backend. Callbacks never use Criterion asserts (they may
 * run on a library thread): they record the first violation in their context, and the test asserts
 * on it after the run has returned. The helpers (block sets, the checking callback) are in support.h.
 *
 * Randomised tests print their seed on failure; RF_TEST_SEED=<n> replays one.
 */
#include "support.h"

#include <pthread.h>

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
		ck_ring(&r->ck, &bs, depth);
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
			ck_ring(c, o->inner_bs, rf_pipeline_depth(o->inner));
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
	ck_ring(&o->ck, &obs, 3);
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
		ck_ring(c, &bs, a->depth);
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
			ck_ring(&d->ck, &bs, depth);
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

