/*
 * tests/test_errors.c — the error table (RF_ERROR_MAP), rf_strerror / rf_err_name, the thread-local
 * rf_errmsg() detail (and the internal rf__err that sets it), and the version functions.
 * White-box (static library).
 */
#include <criterion/criterion.h>

#include "ringfetch.h"
#include "base/error.h"

#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct code_row {
	int code;
	const char *name;
	const char *text;
} code_row;

static const code_row rows[] = {
#define ROW(name, value, text) {RF_##name, "RF_" #name, text},
	RF_ERROR_MAP(ROW)
#undef ROW
};
#define NROWS (sizeof rows / sizeof rows[0])

/* ---- the table ----------------------------------------------------------------------------------- */

Test(errors, codes_are_distinct_and_negative)
{
	cr_assert_eq(NROWS, 12, "RF_ERROR_MAP has %zu codes", NROWS);
	cr_assert_eq(RF_OK, 0);
	for (size_t i = 0; i < NROWS; i++) {
		cr_assert_lt(rows[i].code, 0, "%s = %d is not negative", rows[i].name, rows[i].code);
		for (size_t j = 0; j < i; j++)
			cr_assert_neq(rows[i].code, rows[j].code, "%s and %s share %d", rows[i].name, rows[j].name,
				      rows[i].code);
	}
}

Test(errors, values_are_stable)
{
	/* The values are ABI: they must never change. */
	cr_assert_eq(RF_EINVAL, -1);
	cr_assert_eq(RF_ENOMEM, -2);
	cr_assert_eq(RF_ENOSPC, -3);
	cr_assert_eq(RF_ENODEV, -4);
	cr_assert_eq(RF_ENOTSUP, -5);
	cr_assert_eq(RF_EBUSY, -6);
	cr_assert_eq(RF_ECANCELED, -7);
	cr_assert_eq(RF_ECALLBACK, -8);
	cr_assert_eq(RF_EBACKEND, -9);
	cr_assert_eq(RF_EHAZARD, -10);
	cr_assert_eq(RF_ECONFIG, -11);
	cr_assert_eq(RF_EIO, -12);
}

Test(errors, strerror_per_code)
{
	const char *ok = rf_strerror(RF_OK);
	cr_assert_not_null(ok);
	cr_assert_str_eq(ok, "success");
	const char *unknown = rf_strerror(1);
	cr_assert_not_null(unknown);
	for (size_t i = 0; i < NROWS; i++) {
		const char *s = rf_strerror(rows[i].code);
		cr_assert_not_null(s, "rf_strerror(%s) is NULL", rows[i].name);
		cr_assert_str_eq(s, rows[i].text, "rf_strerror(%s) = \"%s\"", rows[i].name, s);
		cr_assert_str_neq(s, "", "rf_strerror(%s) is empty", rows[i].name);
		cr_assert_str_neq(s, ok, "rf_strerror(%s) reads like success", rows[i].name);
		cr_assert_str_neq(s, unknown, "rf_strerror(%s) reads like an unknown code", rows[i].name);
		for (size_t j = 0; j < i; j++)
			cr_assert_str_neq(s, rf_strerror(rows[j].code), "%s and %s have the same text", rows[i].name,
					  rows[j].name);
	}
}

Test(errors, strerror_unknown_codes)
{
	static const int unknown[] = {1, 2, 42, -13, -999, INT_MIN, INT_MAX, INT_MIN + 1};
	for (size_t i = 0; i < sizeof unknown / sizeof unknown[0]; i++) {
		const char *s = rf_strerror(unknown[i]);
		cr_assert_not_null(s, "rf_strerror(%d) is NULL", unknown[i]);
		cr_assert_str_eq(s, "unknown error", "rf_strerror(%d) = \"%s\"", unknown[i], s);
		const char *n = rf_err_name(unknown[i]);
		cr_assert_not_null(n, "rf_err_name(%d) is NULL", unknown[i]);
		cr_assert_str_eq(n, "RF_UNKNOWN", "rf_err_name(%d) = \"%s\"", unknown[i], n);
	}
}

Test(errors, err_name_per_code)
{
	cr_assert_str_eq(rf_err_name(RF_OK), "RF_OK");
	cr_assert_str_eq(rf_err_name(RF_EINVAL), "RF_EINVAL");
	cr_assert_str_eq(rf_err_name(RF_ECONFIG), "RF_ECONFIG");
	for (size_t i = 0; i < NROWS; i++) {
		const char *n = rf_err_name(rows[i].code);
		cr_assert_not_null(n);
		cr_assert_str_eq(n, rows[i].name, "rf_err_name(%d) = \"%s\"", rows[i].code, n);
	}
}

/* ---- rf_errmsg and rf__err --------------------------------------------------------------------------- */

static void *first_errmsg(void *arg)
{
	const char *m = rf_errmsg();
	snprintf(arg, 64, "%s", m ? m : "(NULL)");
	return NULL;
}

Test(errors, errmsg_is_empty_before_any_failure)
{
	/* A fresh thread has had no failing call. */
	char seen[64] = "unset";
	pthread_t t;
	cr_assert_eq(pthread_create(&t, NULL, first_errmsg, seen), 0);
	pthread_join(t, NULL);
	cr_assert_str_eq(seen, "", "a fresh thread's rf_errmsg() is \"%s\"", seen);
	cr_assert_not_null(rf_errmsg());
}

Test(errors, err_sets_detail_and_returns_code)
{
	cr_assert_eq(rf__err(RF_EBUSY, "pipeline %d is %s", 7, "busy"), RF_EBUSY);
	cr_assert_str_eq(rf_errmsg(), "pipeline 7 is busy");
	cr_assert_str_eq(rf__errmsg_peek(), "pipeline 7 is busy");
	cr_assert_eq(rf__err(RF_EINVAL, "second"), RF_EINVAL);
	cr_assert_str_eq(rf_errmsg(), "second");
	/* The current detail may be passed back in to be prefixed. */
	rf__err(RF_ENODEV, "inner reason");
	cr_assert_eq(rf__err(RF_ENODEV, "outer: %s", rf__errmsg_peek()), RF_ENODEV);
	cr_assert_str_eq(rf_errmsg(), "outer: inner reason");
	rf__err(RF_ENODEV, "%s%s", rf__errmsg_peek(), rf__errmsg_peek());
	cr_assert_str_eq(rf_errmsg(), "outer: inner reasonouter: inner reason");
}

Test(errors, err_truncates_long_details)
{
	char big[2000];
	memset(big, 'x', sizeof big - 1);
	big[sizeof big - 1] = '\0';
	cr_assert_eq(rf__err(RF_ENOMEM, "%s", big), RF_ENOMEM);
	size_t len = strlen(rf_errmsg());
	cr_assert_gt(len, 100, "detail truncated to %zu bytes", len);
	cr_assert_lt(len, sizeof big - 1, "detail not truncated");
	cr_assert_eq(strspn(rf_errmsg(), "x"), len);
	/* And it still works afterwards. */
	rf__err(RF_EINVAL, "short");
	cr_assert_str_eq(rf_errmsg(), "short");
}

Test(errors, public_failure_sets_errmsg)
{
	rf__err(RF_EINVAL, "stale");
	rf_step st[3];
	cr_assert_eq(rf_plan_ring(1, 0, st, 3, NULL), RF_EINVAL);
	cr_assert_str_neq(rf_errmsg(), "stale", "rf_plan_ring(depth 0) did not set a detail");
	cr_assert_str_neq(rf_errmsg(), "");
	rf_pipeline_params pp;
	memset(&pp, 0, sizeof pp);
	pp.depth = 2;
	pp.slot_bytes = 0;
	pp.backend = "cpu";
	rf_pipeline *p;
	cr_assert_eq(rf_pipeline_create(&pp, &p), RF_EINVAL);
	cr_assert(strstr(rf_errmsg(), "slot_bytes") != NULL, "%s", rf_errmsg());
}

typedef struct thread_arg {
	int id;
	int iters;
	char final[128];
	int mismatches;
} thread_arg;

static void *fail_in_thread(void *arg)
{
	thread_arg *a = arg;
	for (int i = 0; i < a->iters; i++) {
		char want[64];
		snprintf(want, sizeof want, "thread %d iteration %d", a->id, i);
		if (rf__err(RF_EBACKEND, "thread %d iteration %d", a->id, i) != RF_EBACKEND ||
		    strcmp(rf_errmsg(), want) != 0)
			a->mismatches++;
	}
	rf_step st[1];
	rf_plan_ring(5, 0, st, 1, NULL); /* a public failing call too */
	snprintf(a->final, sizeof a->final, "%s", rf_errmsg());
	return NULL;
}

Test(errors, errmsg_is_thread_local)
{
	rf__err(RF_ECONFIG, "main thread detail");
	const char *mine = rf_errmsg();
	thread_arg one = {1, 1, "", 0};
	pthread_t t;
	cr_assert_eq(pthread_create(&t, NULL, fail_in_thread, &one), 0);
	pthread_join(t, NULL);
	cr_assert_str_eq(rf_errmsg(), "main thread detail", "another thread's failure changed this thread's "
							    "detail to \"%s\"",
			 rf_errmsg());
	cr_assert_eq(rf_errmsg(), mine, "rf_errmsg() moved");
	cr_assert_str_neq(one.final, "", "the other thread saw no detail");
	cr_assert_str_neq(one.final, "main thread detail", "the other thread saw this thread's detail");
}

Test(errors, errmsg_thread_local_under_contention)
{
	enum { NT = 4 };
	thread_arg a[NT];
	pthread_t t[NT];
	rf__err(RF_ECONFIG, "main");
	for (int i = 0; i < NT; i++) {
		memset(&a[i], 0, sizeof a[i]);
		a[i].id = i;
		a[i].iters = 20000;
		cr_assert_eq(pthread_create(&t[i], NULL, fail_in_thread, &a[i]), 0);
	}
	for (int i = 0; i < 2000; i++)
		if (strcmp(rf_errmsg(), "main") != 0)
			cr_assert_fail("main thread's detail changed to \"%s\"", rf_errmsg());
	for (int i = 0; i < NT; i++)
		pthread_join(t[i], NULL);
	for (int i = 0; i < NT; i++)
		cr_assert_eq(a[i].mismatches, 0, "thread %d read another thread's detail %d times", i, a[i].mismatches);
	cr_assert_str_eq(rf_errmsg(), "main");
}

/* ---- version ------------------------------------------------------------------------------------------ */

Test(errors, version)
{
	cr_assert_eq(rf_version(), RF_VERSION_HEX, "rf_version() = %#x, header %#x", rf_version(),
		     (unsigned)RF_VERSION_HEX);
	cr_assert_eq(RF_VERSION_HEX, (unsigned)((RF_VERSION_MAJOR << 16) | (RF_VERSION_MINOR << 8) | RF_VERSION_PATCH));
	char want[32];
	snprintf(want, sizeof want, "%d.%d.%d", RF_VERSION_MAJOR, RF_VERSION_MINOR, RF_VERSION_PATCH);
	const char *s = rf_version_string();
	cr_assert_not_null(s);
	cr_assert_str_eq(s, want);
	cr_assert_eq(rf_version_string(), s, "rf_version_string() is not a static string");
	unsigned maj, min, pat;
	cr_assert_eq(sscanf(s, "%u.%u.%u", &maj, &min, &pat), 3);
	cr_assert_eq((maj << 16) | (min << 8) | pat, rf_version());
}
