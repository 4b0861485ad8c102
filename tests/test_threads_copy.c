/*
 * tests/test_threads_copy.c — the threads backend's copy path (base/piece.h): the
 * cache handoff's decision rule on synthetic samples (no wall-clock assertion anywhere; the same rule
 * as every schedule's, tests/test_threads_sched.c), the piece
 * sizes of the cooperative copier, the handoff's configuration (RINGFETCH_HANDOFF, key `handoff`) and
 * what rf_pipeline_describe says. White-box (static library); each test runs in its own process.
 */
#include <criterion/criterion.h>

#include "ringfetch.h"
#include "base/piece.h"
#include "backends/threads_sched.h"
#include "base/test_hooks.h"
#include "runtime/config.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void clean_env(void)
{
	unsetenv("RINGFETCH_CONFIG");
	unsetenv("RINGFETCH_HANDOFF");
	unsetenv("RINGFETCH_DEPTH");
	unsetenv("RINGFETCH_BACKEND");
}

static char g_config[32]; /* the configuration file write_config made last, "" when none */

static void drop_config(void)
{
	if (g_config[0] != '\0')
		unlink(g_config);
	g_config[0] = '\0';
}

TestSuite(threads_copy, .init = clean_env, .fini = drop_config);

/* ---- the decision rule ------------------------------------------------------------------------------ */

/* The handoff's arm against the plain lanes, as the schedule compares them (threads_sched.h): on iff
 * the mean time with it beats the mean without by more than RF__SCH_RULE's margin. n: 0 (off) or more. */
static int ho_decide(const int64_t *on, const int64_t *off, unsigned n)
{
	if (n == 0)
		return 0;
	rf__cmp c;
	rf__cmp_init(&c, RF__SCH_RULE, 2, n, 0); /* "off" first: on must win by the margin */
	for (unsigned i = 0; i < n; i++)
		rf__cmp_note(&c, (double)off[i]), rf__cmp_note(&c, (double)on[i]);
	return c.best == 1;
}

Test(threads_copy, decide_on_when_clearly_faster)
{
	int64_t on[5] = {900, 910, 880, 905, 899}, off[5] = {1000, 1010, 990, 1005, 999};
	cr_assert_eq(ho_decide(on, off, 5), 1);
}

Test(threads_copy, decide_off_when_slower_equal_or_within_noise)
{
	int64_t slower[5] = {1300, 1290, 1310, 1305, 1299}, base[5] = {1000, 1010, 990, 1005, 999};
	cr_assert_eq(ho_decide(slower, base, 5), 0);
	cr_assert_eq(ho_decide(base, base, 5), 0);
	int64_t near[5] = {980, 990, 970, 985, 979}; /* 2 % faster: inside the 3 % margin */
	cr_assert_eq(ho_decide(near, base, 5), 0);
	cr_assert_eq(ho_decide(near, base, 0), 0, "no samples: off");
}

Test(threads_copy, decide_counts_every_run)
{
	/* The mean: a schedule held up now and then pays for it (what the caller waits for is the sum). */
	int64_t on[5] = {800, 3000, 810, 805, 790}, off[5] = {1000, 1010, 1020, 990, 1002};
	cr_assert_eq(ho_decide(on, off, 5), 0, "typical 805, mean 1241");
	int64_t on2[5] = {800, 1100, 810, 805, 790}, off2[5] = {1000, 1010, 1600, 990, 1002};
	cr_assert_eq(ho_decide(on2, off2, 5), 1, "861 vs 1120");
	int64_t on3[4] = {900, 960, 1, 100000}, off3[4] = {1000, 1000, 1000, 1000};
	cr_assert_eq(ho_decide(on3, off3, 4), 0, "one run 100x: the mean says off");
}

/* ---- pieces ------------------------------------------------------------------------------------------ */

Test(threads_copy, pieces)
{
	cr_assert_eq(rf__piece_size(0), 0);
	cr_assert_eq(rf__piece_size(1024), 0);
	cr_assert_eq(rf__piece_size((32 << 10) - 1), 0, "under two minimum pieces: copied whole");
	size_t sizes[] = {32 << 10, 64 << 10, 100000, 1 << 20, 4 << 20, (size_t)3 << 30, (size_t)1 << 40};
	for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
		size_t n = sizes[i], p = rf__piece_size(n);
		cr_assert(p >= 16 << 10 && p % 4096 == 0, "n=%zu piece=%zu", n, p);
		cr_assert((n + p - 1) / p <= 4096, "n=%zu: %zu pieces", n, (n + p - 1) / p);
		cr_assert((n + p - 1) / p >= 2, "n=%zu", n);
	}
	cr_assert_eq(rf__piece_size(1 << 20), 64 << 10, "1 MiB: 16 pieces");
}

/* A job copied by the worker's side alone (no helper) is an exact copy, whatever the size. */
Test(threads_copy, single_thread_copy_is_exact)
{
	size_t sizes[] = {1, 4095, 32 << 10, (32 << 10) + 1, 100003, 1 << 20};
	rf__piece_job j;
	rf__piece_init(&j);
	for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
		size_t n = sizes[i];
		unsigned char *src = malloc(n), *dst = calloc(1, n + 1);
		for (size_t k = 0; k < n; k++)
			src[k] = (unsigned char)(k * 7 + i);
		dst[n] = 0xee;
		rf__piece_copy(&j, dst, src, n, i, (int)(i % 2));
		cr_assert(memcmp(dst, src, n) == 0, "n=%zu", n);
		cr_assert_eq(dst[n], 0xee, "wrote past the end");
		_Atomic int64_t v = 0;
		cr_assert_eq(rf__piece_help(&j, i, &v, 1), 0, "a finished job has nothing left to help with");
		free(src);
		free(dst);
	}
}

/* The waiter finishes the copy it waits for: with the worker held right after publishing (the test
 * hook), the waiter takes every piece, and the worker's copy completes with nothing left to do. */
static atomic_int g_published, g_release;
static void hold(int where)
{
	if (where == 0) {
		atomic_store(&g_published, 1);
		while (!atomic_load(&g_release))
			sched_yield();
	}
}

typedef struct job_arg {
	rf__piece_job *j;
	unsigned char *dst;
	const unsigned char *src;
	size_t n;
	_Atomic int64_t value;
} job_arg;

static void *copier(void *p)
{
	job_arg *a = p;
	rf__piece_copy(a->j, a->dst, a->src, a->n, 7, 0);
	atomic_store(&a->value, 1);
	return NULL;
}

Test(threads_copy, waiter_takes_the_pieces_of_its_copy)
{
	size_t n = 1 << 20;
	unsigned char *src = malloc(n), *dst = calloc(1, n);
	for (size_t k = 0; k < n; k++)
		src[k] = (unsigned char)(k * 13);
	rf__piece_job j;
	rf__piece_init(&j);
	job_arg a = {&j, dst, src, n, 0};
	rf__test_hooks.piece_copy = hold;
	pthread_t tid;
	cr_assert_eq(pthread_create(&tid, NULL, copier, &a), 0);
	while (!atomic_load(&g_published))
		sched_yield();
	cr_assert_eq(rf__piece_help(&j, 8, &a.value, 1), 0, "another block's copy: not helped");
	cr_assert_eq(rf__piece_help(&j, 7, &a.value, 1), n / rf__piece_size(n), "every piece taken by the waiter");
	atomic_store(&g_release, 1);
	pthread_join(tid, NULL);
	rf__test_hooks.piece_copy = NULL;
	cr_assert_eq(atomic_load(&a.value), 1);
	cr_assert(memcmp(dst, src, n) == 0);
	free(src);
	free(dst);
}

/* ---- configuration and describe -------------------------------------------------------------------- */

Test(threads_copy, parse_handoff)
{
	cr_assert_eq(rf__parse_handoff("auto"), RF__MODE_AUTO);
	cr_assert_eq(rf__parse_handoff("off"), RF__MODE_OFF);
	cr_assert_eq(rf__parse_handoff("on"), RF__MODE_ON);
	cr_assert_eq(rf__parse_handoff("On"), -1);
	cr_assert_eq(rf__parse_handoff(""), -1);
	cr_assert_eq(rf__parse_handoff("on "), -1);
}

static rf_pipeline *make(size_t slot, unsigned depth, int *rc)
{
	rf_pipeline_params pp = {.depth = depth, .slot_bytes = slot, .backend = "threads"};
	rf_pipeline *p = NULL;
	*rc = rf_pipeline_create(&pp, &p);
	return p;
}

Test(threads_copy, handoff_forced_by_env_and_described)
{
	int rc;
	setenv("RINGFETCH_HANDOFF", "on", 1);
	rf_pipeline *p = make(1 << 20, 2, &rc);
	cr_assert_eq(rc, RF_OK, "%s", rf_errmsg());
	cr_assert(strstr(rf_pipeline_describe(p), "cache handoff on (forced by configuration)"), "%s",
		  rf_pipeline_describe(p));
	rf_pipeline_destroy(p);
	setenv("RINGFETCH_HANDOFF", "off", 1);
	p = make(1 << 20, 2, &rc);
	cr_assert_eq(rc, RF_OK, "%s", rf_errmsg());
	cr_assert(strstr(rf_pipeline_describe(p), "cache handoff off (forced by configuration)"), "%s",
		  rf_pipeline_describe(p));
	rf_pipeline_destroy(p);
}

Test(threads_copy, handoff_auto_is_described)
{
	int rc;
	rf_pipeline *p = make(64 << 10, 2, &rc);
	cr_assert_eq(rc, RF_OK, "%s", rf_errmsg());
	const char *d = rf_pipeline_describe(p);
	/* Which one depends on the machine (measured, or no cldemote, or not pinned); never silent. */
	cr_assert(strstr(d, "cache handoff on (auto:") || strstr(d, "cache handoff off (auto:"), "%s", d);
	fprintf(stderr, "%s\n", d);
	rf_pipeline_destroy(p);
}

Test(threads_copy, malformed_handoff_is_econfig)
{
	int rc;
	setenv("RINGFETCH_HANDOFF", "yes", 1);
	rf_pipeline *p = make(4096, 2, &rc);
	cr_assert_eq(rc, RF_ECONFIG, "%s", rf_err_name(rc));
	cr_assert_null(p);
	cr_assert(strstr(rf_errmsg(), "RINGFETCH_HANDOFF") != NULL, "%s", rf_errmsg());
}

/* auto is off until measured on the pipeline's own runs (no synthetic probe at create), and says so. */
static int ok_cb(void *u, const rf_block *b)
{
	(void)u;
	(void)b;
	return 0;
}

Test(threads_copy, handoff_auto_is_off_and_says_why)
{
	int rc;
	rf_pipeline *p = make(256 << 10, 2, &rc);
	cr_assert_eq(rc, RF_OK, "%s", rf_errmsg());
	const char *d = rf_pipeline_describe(p);
	cr_assert(strstr(d, "cache handoff off (auto") != NULL, "%s", d);
	static unsigned char src[256 << 10];
	const void *srcs[4] = {src, src, src, src};
	size_t sizes[4] = {sizeof src, sizeof src, 1000, 0};
	cr_assert_eq(rf_pipeline_run(p, 4, srcs, sizes, ok_cb, NULL), RF_OK, "%s", rf_errmsg());
	rf_pipeline_destroy(p);
}

/* RINGFETCH_CONFIG names a new file holding text; the previous one goes, and the last at the test's end. */
static void write_config(const char *text)
{
	drop_config();
	snprintf(g_config, sizeof g_config, "/tmp/rf_handoff_XXXXXX");
	int fd = mkstemp(g_config);
	cr_assert(fd >= 0);
	cr_assert_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
	close(fd);
	setenv("RINGFETCH_CONFIG", g_config, 1);
}

Test(threads_copy, handoff_key_in_the_file_and_env_wins)
{
	int rc;
	rf__config c;
	write_config("[ringfetch]\nhandoff = on\n");
	cr_assert_eq(rf__config_load(&c, 0, 0, 0, 0), RF_OK, "%s", rf_errmsg());
	cr_assert_eq(c.handoff, RF__MODE_ON);
	setenv("RINGFETCH_HANDOFF", "off", 1);
	cr_assert_eq(rf__config_load(&c, 0, 0, 0, 0), RF_OK);
	cr_assert_eq(c.handoff, RF__MODE_OFF);
	unsetenv("RINGFETCH_HANDOFF");
	write_config("[ringfetch]\nhandoff = maybe\n");
	rf_pipeline *p = make(4096, 2, &rc);
	cr_assert_eq(rc, RF_ECONFIG);
	cr_assert_null(p);
	cr_assert(strstr(rf_errmsg(), "handoff") != NULL, "%s", rf_errmsg());
}
