/*
 * tests/test_pipeline_inputs.c — the core public contract of rf_pipeline_* (include/ringfetch.h), against
 * the shared library, exactly as an outside program would use it: bad inputs, rf_pipeline_create and its
 * configuration (parameters, environment, backends).
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
	pp = params_of(UINT_MAX, 64);
	cr_assert_eq(try_create(&pp, &p), RF_EINVAL, "depth UINT_MAX");

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
	pp.memory = RF_MEMORY_DEVICE;
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

