/*
 * tests/test_config.c — runtime/config.h: strict parsing of configured values and the precedence
 * explicit API value > environment > default, with RF_ECONFIG naming the variable and its value.
 * White-box (static library). Each Criterion test runs in its own process, so setenv() stays local.
 */
#include <criterion/criterion.h>

#include "ringfetch.h"
#include "runtime/backend.h"
#include "runtime/config.h"
#include "base/error.h"
#include "config_support.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int ok_cb(void *user, const rf_block *b)
{
	(void)user;
	(void)b;
	return 0;
}

#define DEPTH_SENTINEL 0xdeadbeefu

static void clean_env(void)
{
	unsetenv("RINGFETCH_CONFIG");
	unsetenv("RINGFETCH_COPY_QUEUES");
	unsetenv("RINGFETCH_STAGING");
	unsetenv("RINGFETCH_TRACE");
	unsetenv("RINGFETCH_MEMORY_BUDGET");
	unsetenv("RINGFETCH_DEPTH");
	unsetenv("RINGFETCH_BACKEND");
}

TestSuite(config, .init = clean_env);

/* ---- rf__parse_depth ----------------------------------------------------------------------------- */

Test(config, parse_depth_valid)
{
	static const struct {
		const char *s;
		unsigned v;
	} ok[] = {{"1", 1}, {"2", 2}, {"3", 3}, {"9", 9}, {"10", 10}, {"16", 16}, {"100", 100},
		  {"999", 999}, {"1000", 1000}, {"1023", 1023}, {"1024", 1024}};
	for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
		unsigned out = DEPTH_SENTINEL;
		cr_assert_eq(rf__parse_depth(ok[i].s, &out), 0, "\"%s\" rejected", ok[i].s);
		cr_assert_eq(out, ok[i].v, "\"%s\" parsed as %u", ok[i].s, out);
	}
	/* Every value of the range round-trips. */
	for (unsigned v = 1; v <= RF_MAX_DEPTH; v++) {
		char buf[16];
		snprintf(buf, sizeof buf, "%u", v);
		unsigned out = DEPTH_SENTINEL;
		cr_assert_eq(rf__parse_depth(buf, &out), 0, "\"%s\" rejected", buf);
		cr_assert_eq(out, v);
	}
}

Test(config, parse_depth_malformed)
{
	static const char *const bad[] = {
		"", "0", "00", "-1", "-0", "+2", " 2", "2 ", "\t2", "2\n", "1025", "1030", "2048", "9999", "99999",
		"4294967296", "4294967297", "18446744073709551617", "123456789012345678901234567890",
		"abc", "a1", "1a", "4x", "0x10", "0x2", "1e3", "2.0", "2,", "\xd9\xa3", "1 0", "--1", "2\x01",
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		unsigned out = DEPTH_SENTINEL;
		cr_assert_eq(rf__parse_depth(bad[i], &out), -1, "\"%s\" accepted (as %u)", bad[i], out);
		cr_assert_eq(out, DEPTH_SENTINEL, "\"%s\": *out written on failure (%u)", bad[i], out);
	}
	unsigned out = DEPTH_SENTINEL;
	cr_assert_eq(rf__parse_depth(NULL, &out), -1, "NULL accepted");
	cr_assert_eq(out, DEPTH_SENTINEL);
	/* A multiple of 2^32 plus a small number must not wrap into range. */
	cr_assert_eq(rf__parse_depth("4294967298", &out), -1, "2^32 + 2 accepted as %u", out);
	/* A valid number followed by garbage. */
	cr_assert_eq(rf__parse_depth("1024abc", &out), -1);
	cr_assert_eq(out, DEPTH_SENTINEL);
}

/* ---- rf__parse_backend ----------------------------------------------------------------------------- */

Test(config, parse_backend)
{
	static const char *const ok[] = {"cpu", "threads", "cuda", "auto"};
	for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
		char copy[16];
		snprintf(copy, sizeof copy, "%s", ok[i]);
		const char *r = rf__parse_backend(copy);
		cr_assert_not_null(r, "\"%s\" rejected", ok[i]);
		cr_assert_str_eq(r, ok[i]);
		/* The canonical static name, not the caller's buffer. */
		cr_assert_neq((const void *)r, (const void *)copy, "\"%s\": returned the caller's buffer", ok[i]);
		cr_assert_eq(r, rf__parse_backend(ok[i]), "\"%s\": not one static name", ok[i]);
	}
	static const char *const bad[] = {"", "gpu", "CPU", "Cpu", "cpu ", " cpu", "cpux", "cp", "thread",
					  "threads\n", "cuda0", "auto,cpu", "nope"};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
		cr_assert_null(rf__parse_backend(bad[i]), "\"%s\" accepted", bad[i]);
	cr_assert_null(rf__parse_backend(NULL));
}

/* ---- depth (config_support.h) ------------------------------------------------------------------------ */

Test(config, depth_default_is_two)
{
	unsigned out = DEPTH_SENTINEL;
	cr_assert_eq(cfg_depth(0, &out), RF_OK, "%s", rf_errmsg());
	cr_assert_eq(out, 2);
}

Test(config, depth_from_environment)
{
	static const struct {
		const char *s;
		unsigned v;
	} ok[] = {{"1", 1}, {"5", 5}, {"1024", 1024}};
	for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
		setenv("RINGFETCH_DEPTH", ok[i].s, 1);
		unsigned out = DEPTH_SENTINEL;
		cr_assert_eq(cfg_depth(0, &out), RF_OK, "RINGFETCH_DEPTH=%s: %s", ok[i].s, rf_errmsg());
		cr_assert_eq(out, ok[i].v);
	}
}

Test(config, explicit_depth_wins)
{
	unsigned out = DEPTH_SENTINEL;
	cr_assert_eq(cfg_depth(7, &out), RF_OK);
	cr_assert_eq(out, 7);
	setenv("RINGFETCH_DEPTH", "3", 1);
	out = DEPTH_SENTINEL;
	cr_assert_eq(cfg_depth(7, &out), RF_OK);
	cr_assert_eq(out, 7, "explicit 7 with RINGFETCH_DEPTH=3 gave %u", out);
	/* A malformed variable is not even consulted when the value is explicit. */
	setenv("RINGFETCH_DEPTH", "abc", 1);
	out = DEPTH_SENTINEL;
	cr_assert_eq(cfg_depth(1, &out), RF_OK, "explicit 1 with RINGFETCH_DEPTH=abc: %s", rf_errmsg());
	cr_assert_eq(out, 1);
}

Test(config, malformed_depth_environment_is_econfig)
{
	static const char *const bad[] = {"",   "0",    "-1",  "+2",   " 2",   "2 ",
					  "1025", "99999", "abc", "0x10", "4x", "123456789012345678901234567890",
					  "%s%n%x"};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		setenv("RINGFETCH_DEPTH", bad[i], 1);
		unsigned out = DEPTH_SENTINEL;
		int rc = cfg_depth(0, &out);
		cr_assert_eq(rc, RF_ECONFIG, "RINGFETCH_DEPTH=\"%s\": %s", bad[i], rf_err_name(rc));
		cr_assert_eq(out, DEPTH_SENTINEL, "RINGFETCH_DEPTH=\"%s\": *out written (%u)", bad[i], out);
		const char *msg = rf_errmsg();
		cr_assert(strstr(msg, "RINGFETCH_DEPTH") != NULL, "errmsg does not name the variable: %s", msg);
		char quoted[64];
		snprintf(quoted, sizeof quoted, "\"%s\"", bad[i]);
		cr_assert(strstr(msg, quoted) != NULL, "errmsg does not show the value %s: %s", quoted, msg);
	}
}

Test(config, long_malformed_value_is_reported_truncated)
{
	char big[600];
	memset(big, '7', sizeof big - 1);
	big[sizeof big - 1] = '\0';
	setenv("RINGFETCH_DEPTH", big, 1);
	unsigned out = DEPTH_SENTINEL;
	cr_assert_eq(cfg_depth(0, &out), RF_ECONFIG);
	const char *msg = rf_errmsg();
	cr_assert(strstr(msg, "RINGFETCH_DEPTH") != NULL, "%s", msg);
	cr_assert(strstr(msg, "7777777777") != NULL, "the value's start is not shown: %s", msg);
	cr_assert_lt(strlen(msg), 512);
}

/* ---- backend (config_support.h) ---------------------------------------------------------------------- */

Test(config, backend_default_is_auto)
{
	const char *out = NULL;
	cr_assert_eq(cfg_backend(NULL, &out), RF_OK);
	cr_assert_str_eq(out, "auto");
}

Test(config, backend_from_environment)
{
	static const char *const ok[] = {"cpu", "threads", "cuda", "auto"};
	for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
		setenv("RINGFETCH_BACKEND", ok[i], 1);
		const char *out = NULL;
		cr_assert_eq(cfg_backend(NULL, &out), RF_OK, "RINGFETCH_BACKEND=%s: %s", ok[i], rf_errmsg());
		cr_assert_str_eq(out, ok[i]);
		/* The result must outlive the environment string. */
		setenv("RINGFETCH_BACKEND", "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx", 1);
		cr_assert_str_eq(out, ok[i], "result points into the environment");
	}
}

Test(config, explicit_backend_wins)
{
	const char *out = NULL;
	setenv("RINGFETCH_BACKEND", "cuda", 1);
	cr_assert_eq(cfg_backend("threads", &out), RF_OK);
	cr_assert_str_eq(out, "threads");
	setenv("RINGFETCH_BACKEND", "gpu", 1);
	out = NULL;
	cr_assert_eq(cfg_backend("cpu", &out), RF_OK, "explicit cpu with RINGFETCH_BACKEND=gpu: %s",
		     rf_errmsg());
	cr_assert_str_eq(out, "cpu");
}

Test(config, malformed_backend_environment_is_econfig)
{
	static const char *const bad[] = {"gpu", "", "CPU", " cpu", "cpu ", "cpu,threads", "nope", "%s%n"};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		setenv("RINGFETCH_BACKEND", bad[i], 1);
		const char *out = "sentinel";
		int rc = cfg_backend(NULL, &out);
		cr_assert_eq(rc, RF_ECONFIG, "RINGFETCH_BACKEND=\"%s\": %s", bad[i], rf_err_name(rc));
		const char *msg = rf_errmsg();
		cr_assert(strstr(msg, "RINGFETCH_BACKEND") != NULL, "errmsg does not name the variable: %s", msg);
		char quoted[64];
		snprintf(quoted, sizeof quoted, "\"%s\"", bad[i]);
		cr_assert(strstr(msg, quoted) != NULL, "errmsg does not show the value %s: %s", quoted, msg);
	}
}

/* ---- the config file and the other variables ---------------------------------------------------- */

/* Write text to a fresh temporary file and point RINGFETCH_CONFIG at it; the path goes to path[64]. */
static void config_file(char *path, const char *text)
{
	snprintf(path, 64, "/tmp/rf-config-XXXXXX");
	int fd = mkstemp(path);
	cr_assert_geq(fd, 0);
	FILE *f = fdopen(fd, "w");
	cr_assert_not_null(f);
	fputs(text, f);
	fclose(f);
	setenv("RINGFETCH_CONFIG", path, 1);
}

Test(config, parse_bytes)
{
	unsigned long long v = 0;
	cr_assert_eq(rf__parse_bytes("4096", &v), 0);
	cr_assert_eq(v, 4096);
	cr_assert_eq(rf__parse_bytes("64K", &v), 0);
	cr_assert_eq(v, 65536);
	cr_assert_eq(rf__parse_bytes("3m", &v), 0);
	cr_assert_eq(v, 3ull << 20);
	cr_assert_eq(rf__parse_bytes("2G", &v), 0);
	cr_assert_eq(v, 2ull << 30);
	static const char *const bad[] = {"", "0", "K", "-1", "1.5M", "4KB", " 4", "4 ", "1T", "99999999999999999999"};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
		cr_assert_eq(rf__parse_bytes(bad[i], &v), -1, "\"%s\" accepted", bad[i]);
	unsigned q = 0;
	cr_assert_eq(rf__parse_copy_queues("3", &q), 0);
	cr_assert_eq(q, 3);
	cr_assert_eq(rf__parse_copy_queues("0", &q), -1);
	cr_assert_eq(rf__parse_copy_queues("64", &q), -1);
}

Test(config, file_values_and_precedence)
{
	char path[64];
	config_file(path, "; a deployment's ring\n[ringfetch]\ndepth = 3\nbackend = cpu\ncopy_queues = 2\n"
			  "staging = none\ntrace = /tmp/x.json\nmemory_budget = 16M\n");
	rf__config c;
	cr_assert_eq(rf__config_load(&c, 1, 1, 1, 1), RF_OK, "%s", rf_errmsg());
	cr_assert_eq(c.depth, 3);
	cr_assert_str_eq(c.backend, "cpu");
	cr_assert_eq(c.copy_queues, 2);
	cr_assert_str_eq(c.staging, "none");
	cr_assert_str_eq(c.trace, "/tmp/x.json");
	cr_assert_eq(c.memory_budget, 16ull << 20);
	/* environment over file, API over both */
	setenv("RINGFETCH_DEPTH", "5", 1);
	unsigned depth = 0;
	cr_assert_eq(cfg_depth(0, &depth), RF_OK);
	cr_assert_eq(depth, 5);
	cr_assert_eq(cfg_depth(7, &depth), RF_OK);
	cr_assert_eq(depth, 7);
	unsetenv("RINGFETCH_DEPTH");
	cr_assert_eq(cfg_depth(0, &depth), RF_OK);
	cr_assert_eq(depth, 3);
	/* a pipeline built from it */
	rf_pipeline_params pp = {.slot_bytes = 4096};
	rf_pipeline *p;
	cr_assert_eq(rf_pipeline_create(&pp, &p), RF_OK, "%s", rf_errmsg());
	cr_assert_eq(rf_pipeline_depth(p), 3);
	cr_assert_str_eq(rf_pipeline_backend(p), "cpu");
	cr_assert_eq(rf_pipeline_copy_queues(p), 2);
	rf_placement pl;
	cr_assert_eq(rf_pipeline_placement(p, &pl), RF_OK);
	cr_assert_eq(pl.bound, 0, "staging = none");
	rf_pipeline_destroy(p);
	remove(path);
}

Test(config, file_errors_name_file_line_and_value)
{
	static const struct {
		const char *text, *needle;
		int line;
	} bad[] = {
		{"[ringfetch]\ndepth = 0\n", "\"0\"", 2},
		{"[ringfetch]\n\ndepth = abc\n", "\"abc\"", 3},
		{"[ringfetch]\nbackend = gpu\n", "\"gpu\"", 2},
		{"[ringfetch]\ncopy_queues = 99\n", "\"99\"", 2},
		{"[ringfetch]\nmemory_budget = lots\n", "\"lots\"", 2},
		{"[ringfetch]\ndepht = 2\n", "unknown key \"depht\"", 2},
		{"depth = 2\n", "outside section", 1},
		{"[other]\ndepth = 2\n", "outside section", 2},
		{"[ringfetch]\ndepth = 2\nthis is not ini\n", "syntax error", 3},
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		char path[64];
		config_file(path, bad[i].text);
		rf__config c;
		int rc = rf__config_load(&c, 1, 1, 1, 1);
		cr_assert_eq(rc, RF_ECONFIG, "case %zu: %s", i, rf_err_name(rc));
		char where[96];
		snprintf(where, sizeof where, "%s:%d:", path, bad[i].line);
		cr_assert(strstr(rf_errmsg(), where) != NULL, "case %zu: \"%s\" lacks %s", i, rf_errmsg(), where);
		cr_assert(strstr(rf_errmsg(), bad[i].needle) != NULL, "case %zu: \"%s\" lacks %s", i, rf_errmsg(),
			  bad[i].needle);
		/* The file is checked whole: even an explicit depth does not skip it. */
		rf_pipeline_params pp = {.depth = 2, .slot_bytes = 64, .backend = "cpu"};
		rf_pipeline *p = NULL;
		cr_assert_eq(rf_pipeline_create(&pp, &p), RF_ECONFIG, "case %zu", i);
		remove(path);
	}
	setenv("RINGFETCH_CONFIG", "/nonexistent/ringfetch.ini", 1);
	rf__config c;
	cr_assert_eq(rf__config_load(&c, 1, 1, 1, 1), RF_ECONFIG);
	cr_assert(strstr(rf_errmsg(), "/nonexistent/ringfetch.ini") != NULL, "%s", rf_errmsg());
	setenv("RINGFETCH_CONFIG", "", 1);
	cr_assert_eq(rf__config_load(&c, 1, 1, 1, 1), RF_ECONFIG);
	cr_assert(strstr(rf_errmsg(), "RINGFETCH_CONFIG") != NULL, "%s", rf_errmsg());
}

Test(config, other_variables)
{
	static const char *const vars[][2] = {{"RINGFETCH_COPY_QUEUES", "0"}, {"RINGFETCH_COPY_QUEUES", "x"},
					      {"RINGFETCH_MEMORY_BUDGET", "1T"}, {"RINGFETCH_STAGING", ""},
					      {"RINGFETCH_TRACE", ""}};
	for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
		clean_env();
		setenv(vars[i][0], vars[i][1], 1);
		rf__config c;
		cr_assert_eq(rf__config_load(&c, 1, 1, 1, 1), RF_ECONFIG, "%s=\"%s\"", vars[i][0], vars[i][1]);
		cr_assert(strstr(rf_errmsg(), vars[i][0]) != NULL, "%s", rf_errmsg());
	}
	clean_env();
	/* A budget the ring does not fit in, then one it does. */
	setenv("RINGFETCH_MEMORY_BUDGET", "8K", 1);
	rf_pipeline_params pp = {.depth = 4, .slot_bytes = 4096, .backend = "cpu"};
	rf_pipeline *p = NULL;
	cr_assert_eq(rf_pipeline_create(&pp, &p), RF_ECONFIG);
	cr_assert(strstr(rf_errmsg(), "RINGFETCH_MEMORY_BUDGET") != NULL, "%s", rf_errmsg());
	pp.depth = 2;
	cr_assert_eq(rf_pipeline_create(&pp, &p), RF_OK, "%s", rf_errmsg());
	rf_pipeline_destroy(p);
	/* RINGFETCH_TRACE: every run of a pipeline created while it is set is traced. */
	char path[] = "/tmp/rf-envtrace-XXXXXX";
	int fd = mkstemp(path);
	cr_assert_geq(fd, 0);
	close(fd);
	remove(path);
	setenv("RINGFETCH_TRACE", path, 1);
	cr_assert_eq(rf_pipeline_create(&pp, &p), RF_OK, "%s", rf_errmsg());
	static unsigned char src[64];
	const void *srcs[3] = {src, src, src};
	size_t sizes[3] = {64, 64, 64};
	cr_assert_eq(rf_pipeline_run(p, 3, srcs, sizes, ok_cb, NULL), RF_OK, "%s", rf_errmsg());
	rf_pipeline_destroy(p);
	FILE *f = fopen(path, "r");
	cr_assert_not_null(f, "RINGFETCH_TRACE did not produce %s", path);
	fclose(f);
	remove(path);
	/* RINGFETCH_COPY_QUEUES applies when the API leaves copy_queues at 0 */
	setenv("RINGFETCH_COPY_QUEUES", "2", 1);
	unsetenv("RINGFETCH_TRACE");
	unsetenv("RINGFETCH_MEMORY_BUDGET");
	pp.depth = 3;
	cr_assert_eq(rf_pipeline_create(&pp, &p), RF_OK, "%s", rf_errmsg());
	cr_assert_eq(rf_pipeline_copy_queues(p), 2);
	rf_pipeline_destroy(p);
}

/* ---- depth = auto ------------------------------------------------------------------------------ */

static void spin_us(long us)
{
	struct timespec t0, t;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	do
		clock_gettime(CLOCK_MONOTONIC, &t);
	while ((t.tv_sec - t0.tv_sec) * 1000000L + (t.tv_nsec - t0.tv_nsec) / 1000 < us);
}

static long g_compute_us, g_slow_copy_us, g_slow_every;
static char g_auto_said[256]; /* what the last auto pipeline measured, for failure messages */

static void shaped_copy(size_t block)
{
	if (g_slow_every && block % (size_t)g_slow_every == 0)
		spin_us(g_slow_copy_us);
}

static int shaped_compute(void *user, const rf_block *b)
{
	(void)user;
	(void)b;
	spin_us(g_compute_us);
	return 0;
}

/* A cpu pipeline with depth = auto, run once over n blocks with the given shape; returns its depth. */
static unsigned auto_depth_after(long compute_us, long slow_copy_us, long every, size_t n)
{
	g_compute_us = compute_us, g_slow_copy_us = slow_copy_us, g_slow_every = every;
	rf__test_hooks.before_copy = shaped_copy;
	setenv("RINGFETCH_DEPTH", "auto", 1);
	rf_pipeline_params pp = {.slot_bytes = 256, .backend = "cpu"};
	rf_pipeline *p;
	cr_assert_eq(rf_pipeline_create(&pp, &p), RF_OK, "%s", rf_errmsg());
	cr_assert_eq(rf_pipeline_depth(p), 2, "before the first run");
	static unsigned char src[256];
	const void *srcs[64];
	size_t sizes[64];
	for (size_t i = 0; i < n; i++)
		srcs[i] = src, sizes[i] = sizeof src;
	cr_assert_eq(rf_pipeline_run(p, n, srcs, sizes, shaped_compute, NULL), RF_OK, "%s", rf_errmsg());
	unsigned d = rf_pipeline_depth(p);
	cr_assert(strstr(rf_pipeline_describe(p), "depth auto") != NULL, "%s", rf_pipeline_describe(p));
	snprintf(g_auto_said, sizeof g_auto_said, "%s", strstr(rf_pipeline_describe(p), "depth auto"));
	/* Then the rule's d, 2d and 4d (within the slots) are tried over the next 3 x 3 runs and the
	 * fastest is kept for good. */
	for (int r = 0; r < 9; r++)
		cr_assert_eq(rf_pipeline_run(p, n, srcs, sizes, shaped_compute, NULL), RF_OK, "probe run %d", r);
	unsigned f = rf_pipeline_depth(p);
	cr_assert(f == d || f == 2 * d || f == 4 * d || f == 16 || (f > d && f <= 16), "probing kept %u (rule %u)", f, d);
	cr_assert(strstr(rf_pipeline_describe(p), "probed") != NULL || f == d, "%s", rf_pipeline_describe(p));
	for (int r = 0; r < 3; r++) {
		cr_assert_eq(rf_pipeline_run(p, n, srcs, sizes, shaped_compute, NULL), RF_OK, "a run at the kept depth");
		cr_assert_eq(rf_pipeline_depth(p), f, "kept once probing ended");
	}
	rf_pipeline_destroy(p);
	rf__test_hooks.before_copy = NULL;
	return d;
}

/* The rule itself is tested on synthetic samples (test_autodepth.c), with one wall-clock test apart;
 * here only what configuration decides: the budget, the file, an explicit depth. */
Test(config, depth_auto_budget_file_and_explicit_depth)
{
	/* the budget caps it: 3 slots of 256 bytes */
	setenv("RINGFETCH_MEMORY_BUDGET", "768", 1);
	unsigned d = auto_depth_after(20, 100, 5, 40);
	cr_assert(d >= 2 && d <= 3, "budget of 3 slots: depth %u: %s", d, g_auto_said);
	/* a budget under one slot cannot hold any ring */
	setenv("RINGFETCH_MEMORY_BUDGET", "100", 1);
	rf_pipeline_params pp = {.slot_bytes = 256, .backend = "cpu"};
	rf_pipeline *p = NULL;
	cr_assert_eq(rf_pipeline_create(&pp, &p), RF_ECONFIG);
	cr_assert(strstr(rf_errmsg(), "auto") != NULL, "%s", rf_errmsg());
	/* auto in the file too, and an explicit depth still wins */
	unsetenv("RINGFETCH_MEMORY_BUDGET");
	unsetenv("RINGFETCH_DEPTH");
	char path[64];
	config_file(path, "[ringfetch]\ndepth = auto\n");
	unsigned out = 99;
	cr_assert_eq(cfg_depth(0, &out), RF_OK, "%s", rf_errmsg());
	cr_assert_eq(out, 0u, "0 = auto");
	pp.depth = 4;
	cr_assert_eq(rf_pipeline_create(&pp, &p), RF_OK, "%s", rf_errmsg());
	cr_assert_eq(rf_pipeline_depth(p), 4);
	rf_pipeline_destroy(p);
	remove(path);
}
