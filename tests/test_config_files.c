/*
 * tests/test_config_files.c — hostile configuration files (RINGFETCH_CONFIG): only regular files are
 * read, in bounded size and time, and never block; every malformed byte is RF_ECONFIG naming file:line;
 * an explicit bad staging policy is RF_EINVAL. White-box (static library): calls rf__config_load.
 * Each Criterion test runs in its own process, so setenv() stays local; the ones that used to hang or spin
 * have a short timeout.
 */
#include <criterion/criterion.h>

#include "ringfetch.h"
#include "runtime/config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static void clean_env(void)
{
	static const char *const vars[] = {"RINGFETCH_CONFIG", "RINGFETCH_COPY_QUEUES", "RINGFETCH_STAGING",
					   "RINGFETCH_TRACE",  "RINGFETCH_MEMORY_BUDGET", "RINGFETCH_DEPTH",
					   "RINGFETCH_BACKEND", "RINGFETCH_ORACLE"};
	for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++)
		unsetenv(vars[i]);
}

TestSuite(config_files, .init = clean_env, .timeout = 20);

static char g_path[64];

/* A temporary file holding exactly len bytes (NUL bytes included), named by RINGFETCH_CONFIG. */
static const char *bytes_file(const void *bytes, size_t len)
{
	snprintf(g_path, sizeof g_path, "/tmp/rf-cfgfile-XXXXXX");
	int fd = mkstemp(g_path);
	cr_assert_geq(fd, 0);
	cr_assert_eq(write(fd, bytes, len), (ssize_t)len);
	close(fd);
	setenv("RINGFETCH_CONFIG", g_path, 1);
	return g_path;
}

static const char *text_file(const char *text)
{
	return bytes_file(text, strlen(text));
}

static double now_s(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* Loading fails with RF_ECONFIG, quickly, and rf_errmsg contains every needle; so does a create. */
static void expect_refused(const char *needle1, const char *needle2)
{
	rf__config c;
	double t0 = now_s();
	int rc = rf__config_load(&c, 1, 1, 1, 1);
	double dt = now_s() - t0;
	cr_assert_eq(rc, RF_ECONFIG, "got %s: %s", rf_err_name(rc), rf_errmsg());
	cr_assert(strstr(rf_errmsg(), needle1) != NULL, "\"%s\" lacks \"%s\"", rf_errmsg(), needle1);
	cr_assert(needle2 == NULL || strstr(rf_errmsg(), needle2) != NULL, "\"%s\" lacks \"%s\"", rf_errmsg(), needle2);
	cr_assert_lt(dt, 5.0, "took %.1f s", dt);
	rf_pipeline_params pp = {.depth = 2, .slot_bytes = 64, .backend = "cpu", .staging = "none"};
	rf_pipeline *p = NULL;
	cr_assert_eq(rf_pipeline_create(&pp, &p), RF_ECONFIG, "%s", rf_errmsg());
	cr_assert_null(p);
}

/* A file whose load fails with RF_ECONFIG at `line`, the message containing needle. */
static void expect_line(const void *bytes, size_t len, int line, const char *needle)
{
	const char *path = bytes_file(bytes, len);
	char where[96];
	snprintf(where, sizeof where, "%s:%d:", path, line);
	expect_refused(where, needle);
	remove(path);
	unsetenv("RINGFETCH_CONFIG");
}

#define EXPECT_LINE(lit, line, needle) expect_line(lit, sizeof lit - 1, line, needle)

/* ---- files that are not regular files --------------------------------------------------------------- */

Test(config_files, devices_are_refused_without_reading)
{
	/* /dev/zero used to spin at 100 % CPU forever in the INI parser. */
	setenv("RINGFETCH_CONFIG", "/dev/zero", 1);
	expect_refused("/dev/zero", "character device");
	setenv("RINGFETCH_CONFIG", "/dev/urandom", 1);
	expect_refused("/dev/urandom", "character device");
}

Test(config_files, a_fifo_never_blocks)
{
	/* No writer: an open without O_NONBLOCK would block forever. */
	char path[64];
	snprintf(path, sizeof path, "/tmp/rf-cfgfifo-%ld", (long)getpid());
	cr_assert_eq(mkfifo(path, 0600), 0, "%s", strerror(errno));
	setenv("RINGFETCH_CONFIG", path, 1);
	expect_refused(path, "FIFO");
	remove(path);
}

Test(config_files, a_directory_is_refused)
{
	/* Used to be RF_OK with the file silently ignored (the read error looked like EOF). */
	setenv("RINGFETCH_CONFIG", "/tmp", 1);
	expect_refused("/tmp", "directory");
}

Test(config_files, a_read_error_is_not_an_empty_file)
{
	/* A regular file to stat, whose read at offset 0 fails (EIO): used to be RF_OK. */
	setenv("RINGFETCH_CONFIG", "/proc/self/mem", 1);
	expect_refused("/proc/self/mem", "cannot read");
}

Test(config_files, size_is_bounded)
{
	size_t n = (64u << 10) + 1;
	char *big = malloc(n);
	cr_assert_not_null(big);
	memset(big, '\n', n);
	big[0] = ';';
	const char *path = bytes_file(big, n);
	expect_refused(path, "larger than");
	remove(path);
	bytes_file(big, n - 1); /* exactly the limit: read */
	rf__config c;
	cr_assert_eq(rf__config_load(&c, 1, 1, 1, 1), RF_OK, "%s", rf_errmsg());
	remove(g_path);
	free(big);
}

/* ---- malformed bytes ---------------------------------------------------------------------------------- */

Test(config_files, long_lines_are_never_split)
{
	/* ';' + 198 x 'a' + "depth = 7" used to set depth 7 from a comment (inih's 200-byte line buffer). */
	char text[1400];
	int n = snprintf(text, sizeof text, "[ringfetch]\n;");
	for (int i = 0; i < 198; i++)
		text[n++] = 'a';
	snprintf(text + n, sizeof text - (size_t)n, "depth = 7\n");
	text_file(text);
	rf__config c;
	cr_assert_eq(rf__config_load(&c, 1, 1, 1, 1), RF_OK, "%s", rf_errmsg());
	cr_assert_eq(c.depth, 0, "a comment set depth %u", c.depth);
	remove(g_path);
	/* a long value is one value */
	n = snprintf(text, sizeof text, "[ringfetch]\ntrace = /tmp/");
	for (int i = 0; i < 1000; i++)
		text[n++] = 'x';
	snprintf(text + n, sizeof text - (size_t)n, "\ndepth = 3\n");
	text_file(text);
	cr_assert_eq(rf__config_load(&c, 1, 1, 1, 1), RF_OK, "%s", rf_errmsg());
	cr_assert_eq(strlen(c.trace), 5 + 1000u);
	cr_assert_eq(c.depth, 3);
	remove(g_path);
	/* a value too long for its field, on a long line, is an error on that line */
	n = snprintf(text, sizeof text, "[ringfetch]\ntrace = /");
	for (int i = 0; i < 1200; i++)
		text[n++] = 'y';
	text[n] = '\0';
	expect_line(text, strlen(text), 2, "trace");
}

Test(config_files, nul_and_control_bytes)
{
	/* Text after a NUL byte used to be ignored. */
	EXPECT_LINE("[ringfetch]\ndepth = 3\0depth = 7\n", 2, "NUL");
	EXPECT_LINE("[ringfetch]\n\0\n", 2, "NUL");
	EXPECT_LINE("[ringfetch]\ndepth = 3\n; comment \0 hidden\n", 3, "NUL");
	EXPECT_LINE("[ringfetch]\nbackend = cpu\x01\n", 2, "control byte 0x01");
	EXPECT_LINE("[ringfetch]\x1b[0m\n", 1, "control byte 0x1b");
	EXPECT_LINE("[ringfetch]\ndepth = 3\r\r\n", 2, "control byte 0x0d");
	EXPECT_LINE("[ringfetch]\ndepth\x7f = 3\n", 2, "control byte 0x7f");
}

Test(config_files, duplicates_and_continuations)
{
	/* Duplicate keys used to take the last silently; an indented line used to continue the value. */
	EXPECT_LINE("[ringfetch]\ndepth = 3\nbackend = cpu\ndepth = 4\n", 4, "duplicate key \"depth\" (first at line 2)");
	EXPECT_LINE("[ringfetch]\ntrace = /tmp/a\n  b\n", 3, "syntax error");
	EXPECT_LINE("[ringfetch]\ndepth = 3\n[ringfetch]\n", 3, "appears twice");
	EXPECT_LINE("[ringfetch\ndepth = 3\n", 1, "syntax error");
	EXPECT_LINE("[ringfetch]\n= 3\n", 2, "unknown key \"\"");
	EXPECT_LINE("[ringfetch]\ndepth = 3 4\n", 2, "\"3 4\"");
	EXPECT_LINE("[ringfetch]\ndepth =\n", 2, "depth = \"\"");
}

Test(config_files, staging_is_checked_where_it_is_written)
{
	/* `staging = bogus` used to be RF_EINVAL from create, without file:line. */
	EXPECT_LINE("[ringfetch]\n\nstaging = bogus\n", 3, "staging = \"bogus\"");
	EXPECT_LINE("[ringfetch]\nstaging = node:\n", 2, "node:");
	/* the environment: RF_ECONFIG naming the variable */
	setenv("RINGFETCH_STAGING", "bogus", 1);
	rf__config c;
	cr_assert_eq(rf__config_load(&c, 1, 1, 1, 1), RF_ECONFIG);
	cr_assert(strstr(rf_errmsg(), "RINGFETCH_STAGING") != NULL, "%s", rf_errmsg());
	unsetenv("RINGFETCH_STAGING");
	/* an explicit policy: RF_EINVAL, on every CPU backend, and for depth = auto too */
	static const char *const backends[] = {"cpu", "threads", "auto"};
	for (size_t i = 0; i < sizeof backends / sizeof backends[0]; i++) {
		rf_pipeline_params pp = {.depth = 2, .slot_bytes = 64, .backend = backends[i], .staging = "bogus"};
		rf_pipeline *p = NULL;
		cr_assert_eq(rf_pipeline_create(&pp, &p), RF_EINVAL, "%s: %s", backends[i], rf_errmsg());
		cr_assert_null(p);
		cr_assert(strstr(rf_errmsg(), "bogus") != NULL, "%s", rf_errmsg());
	}
}

Test(config_files, what_is_accepted)
{
	/* CRLF line ends, comments after values and after the header, blanks, other (empty) sections */
	text_file("# deployment\r\n[other]\r\n\r\n[ ringfetch ]   ; the one section\r\n"
		  "  depth = 3   ; 1..1024\r\n\tbackend=cpu\r\nstaging = node:0 # first node\r\n"
		  "trace = /tmp/a;b#c\r\nmemory_budget = 16M");
	rf__config c;
	cr_assert_eq(rf__config_load(&c, 1, 1, 1, 1), RF_OK, "%s", rf_errmsg());
	cr_assert_eq(c.depth, 3);
	cr_assert_str_eq(c.backend, "cpu");
	cr_assert_str_eq(c.staging, "node:0");
	cr_assert_str_eq(c.trace, "/tmp/a;b#c");
	cr_assert_eq(c.memory_budget, 16ull << 20);
	remove(g_path);
	text_file("");
	cr_assert_eq(rf__config_load(&c, 1, 1, 1, 1), RF_OK, "%s", rf_errmsg());
	remove(g_path);
}
