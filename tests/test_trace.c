/* tests/test_trace.c — traces and statistics after a cancel count exactly what ran; the trace file is
 * a valid JSON document whenever no run writes it, also with several pipelines on several threads or
 * processes tracing to one path; a path that is not a regular file fails the trace instead of hanging;
 * a file that is not a trace-event array is never written, and a write that fails half-way leaves the
 * file as it was. */
#include "ringfetch.h"

#include <criterion/criterion.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define NB 64

static const char *backend(void)
{
	const char *b = getenv("RF_TEST_BACKEND");
	return b && *b ? b : "cpu";
}

static unsigned char g_data[NB][128];
static const void *g_srcs[NB];
static size_t g_sizes[NB];

static void init_blocks(void)
{
	for (int i = 0; i < NB; i++) {
		memset(g_data[i], i, sizeof g_data[i]);
		g_srcs[i] = g_data[i];
		g_sizes[i] = sizeof g_data[i];
	}
}

static rf_pipeline *make(unsigned depth, unsigned kq)
{
	rf_pipeline_params pp = {0};
	pp.depth = depth;
	pp.slot_bytes = 128;
	pp.backend = backend();
	pp.copy_queues = kq;
	rf_pipeline *p = NULL;
	cr_assert_eq(rf_pipeline_create(&pp, &p), RF_OK, "%s", rf_errmsg());
	return p;
}

typedef struct probe {
	rf_pipeline *p;
	size_t computes, cancel_at;
} probe;

static int cb(void *user, const rf_block *b)
{
	probe *c = user;
	c->computes++;
	if (b->index == c->cancel_at)
		rf_pipeline_cancel(c->p);
	return 0;
}

static void tmp_path(char *buf, size_t cap, const char *what)
{
	snprintf(buf, cap, "/tmp/rf_test_trace_%ld_%s.json", (long)getpid(), what);
	unlink(buf);
}

/* Count occurrences of needle in the file. */
static size_t count_in(const char *path, const char *needle)
{
	FILE *f = fopen(path, "r");
	cr_assert_not_null(f, "%s", path);
	fseek(f, 0, SEEK_END);
	long n = ftell(f);
	rewind(f);
	char *buf = malloc((size_t)n + 1);
	cr_assert_eq(fread(buf, 1, (size_t)n, f), (size_t)n);
	buf[n] = 0;
	fclose(f);
	size_t k = 0;
	for (const char *s = buf; (s = strstr(s, needle)) != NULL; s++)
		k++;
	free(buf);
	return k;
}

/* The file is one valid JSON document (python3 -m json.tool; skipped where python3 is missing). */
static void assert_json(const char *path)
{
	if (system("command -v python3 >/dev/null 2>&1") != 0)
		return;
	char cmd[512];
	snprintf(cmd, sizeof cmd, "python3 -m json.tool '%s' >/dev/null", path);
	cr_assert_eq(system(cmd), 0, "%s is not valid JSON", path);
}

Test(trace, a_cancel_counts_only_the_computes_that_ran)
{
	init_blocks();
	for (unsigned kq = 1; kq <= 2; kq++) {
		rf_pipeline *p = make(4, kq);
		char path[128];
		tmp_path(path, sizeof path, "cancel");
		cr_assert_eq(rf_pipeline_collect_stats(p, 1), RF_OK);
		cr_assert_eq(rf_pipeline_trace(p, path), RF_OK);
		probe c = {p, 0, 9};
		cr_assert_eq(rf_pipeline_run(p, NB, g_srcs, g_sizes, cb, &c), RF_ECANCELED);
		cr_assert_eq(c.computes, 10u);
		rf_stats s;
		cr_assert_eq(rf_pipeline_stats(p, &s), RF_OK);
		cr_assert_eq(s.queue[0].computes, 10u, "stats count %llu computes for 10 callbacks",
			     (unsigned long long)s.queue[0].computes);
		uint64_t copies = 0;
		for (unsigned q = 0; q < s.nqueues; q++)
			copies += s.queue[q].copies;
		cr_assert_eq(count_in(path, "\"cat\":\"compute\""), 10u, "trace slices for computes that never ran");
		cr_assert_eq(count_in(path, "\"cat\":\"copy\""), (size_t)copies, "trace and stats disagree on copies");
		cr_assert_leq(copies, 10u + 4u, /* blocks up to 9 + depth: the prefetch before the refused compute */ "kq %u: %llu copies, past the lookahead", kq, (unsigned long long)copies);
		assert_json(path);
		rf_pipeline_destroy(p);
		unlink(path);
	}
}

Test(trace, the_file_is_valid_json_between_runs_and_across_pipelines)
{
	init_blocks();
	char path[128];
	tmp_path(path, sizeof path, "valid");
	for (int k = 0; k < 2; k++) {
		rf_pipeline *p = make(3, 1);
		cr_assert_eq(rf_pipeline_trace(p, path), RF_OK);
		for (int r = 0; r < 2; r++) {
			probe c = {p, 0, NB};
			cr_assert_eq(rf_pipeline_run(p, 8, g_srcs, g_sizes, cb, &c), RF_OK, "%s", rf_errmsg());
			assert_json(path);
		}
		cr_assert_eq(rf_pipeline_trace(p, NULL), RF_OK);
		assert_json(path);
		rf_pipeline_destroy(p);
	}
	cr_assert_eq(count_in(path, "process_name"), 4u, "one file across runs and pipelines");
	cr_assert_eq(count_in(path, "\"cat\":\"compute\""), 32u);
	unlink(path);
}

Test(trace, a_file_left_open_by_an_older_version_is_closed_on_append)
{
	init_blocks();
	char path[128];
	tmp_path(path, sizeof path, "legacy");
	FILE *f = fopen(path, "w");
	fputs("[\n{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":99,\"args\":{\"name\":\"old\"}},\n", f);
	fclose(f);
	rf_pipeline *p = make(2, 1);
	cr_assert_eq(rf_pipeline_trace(p, path), RF_OK);
	probe c = {p, 0, NB};
	cr_assert_eq(rf_pipeline_run(p, 4, g_srcs, g_sizes, cb, &c), RF_OK, "%s", rf_errmsg());
	assert_json(path);
	cr_assert_eq(count_in(path, "process_name"), 2u);
	rf_pipeline_destroy(p);
	unlink(path);
}

Test(trace, a_file_that_is_not_a_trace_array_is_refused)
{
	init_blocks();
	char path[128];
	tmp_path(path, sizeof path, "other");
	FILE *f = fopen(path, "w");
	fputs("not json at all\n", f);
	fclose(f);
	rf_pipeline *p = make(2, 1);
	cr_assert_eq(rf_pipeline_trace(p, path), RF_OK);
	probe c = {p, 0, NB};
	cr_assert_eq(rf_pipeline_run(p, 4, g_srcs, g_sizes, cb, &c), RF_EBACKEND);
	cr_assert_eq(c.computes, 4u, "the work ran; only the trace failed");
	cr_assert_eq(count_in(path, "not json at all"), 1u, "the file is left alone");
	rf_pipeline_destroy(p);
	unlink(path);
}

Test(trace, a_fifo_as_trace_path_fails_instead_of_hanging, .timeout = 30)
{
	init_blocks();
	char path[128];
	tmp_path(path, sizeof path, "fifo");
	cr_assert_eq(mkfifo(path, 0600), 0);
	rf_pipeline *p = make(2, 1);
	cr_assert_eq(rf_pipeline_trace(p, path), RF_OK);
	probe c = {p, 0, NB};
	cr_assert_eq(rf_pipeline_run(p, 4, g_srcs, g_sizes, cb, &c), RF_EBACKEND);
	cr_assert(strstr(rf_errmsg(), "regular file") != NULL, "%s", rf_errmsg());
	rf_pipeline_destroy(p);
	unlink(path);
}

typedef struct tracer {
	const char *path;
	int runs;
	int rc;
} tracer;

static void *trace_thread(void *arg)
{
	tracer *t = arg;
	rf_pipeline_params pp = {0};
	pp.depth = 3;
	pp.slot_bytes = 128;
	pp.backend = backend();
	rf_pipeline *p = NULL;
	t->rc = rf_pipeline_create(&pp, &p);
	if (t->rc == RF_OK)
		t->rc = rf_pipeline_trace(p, t->path);
	for (int r = 0; r < t->runs && t->rc == RF_OK; r++) {
		probe c = {p, 0, NB};
		t->rc = rf_pipeline_run(p, 16, g_srcs, g_sizes, cb, &c);
	}
	rf_pipeline_destroy(p);
	return NULL;
}

Test(trace, four_threads_tracing_to_one_path_write_whole_runs)
{
	init_blocks();
	char path[128];
	tmp_path(path, sizeof path, "threads");
	enum { NT = 4, RUNS = 25 };
	tracer t[NT];
	pthread_t tid[NT];
	for (int i = 0; i < NT; i++) {
		t[i] = (tracer){path, RUNS, 0};
		cr_assert_eq(pthread_create(&tid[i], NULL, trace_thread, &t[i]), 0);
	}
	for (int i = 0; i < NT; i++) {
		pthread_join(tid[i], NULL);
		cr_assert_eq(t[i].rc, RF_OK, "thread %d: %s", i, rf_err_name(t[i].rc));
	}
	assert_json(path);
	cr_assert_eq(count_in(path, "process_name"), (size_t)NT * RUNS);
	cr_assert_eq(count_in(path, "\"cat\":\"compute\""), (size_t)NT * RUNS * 16);
	unlink(path);
}

/* The whole content of a file (NUL-terminated; *len its length). */
static char *slurp(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	cr_assert_not_null(f, "%s", path);
	fseek(f, 0, SEEK_END);
	long n = ftell(f);
	rewind(f);
	char *buf = malloc((size_t)n + 1);
	cr_assert_eq(fread(buf, 1, (size_t)n, f), (size_t)n);
	buf[n] = 0;
	fclose(f);
	*len = (size_t)n;
	return buf;
}

static void spill(const char *path, const char *content, size_t len)
{
	FILE *f = fopen(path, "wb");
	cr_assert_not_null(f, "%s", path);
	cr_assert_eq(fwrite(content, 1, len, f), len);
	fclose(f);
}

/* `depth` arrays nested inside an element object: [{"keep":[[...]]}] */
static char *nested(unsigned depth)
{
	char *s = malloc(2 * depth + 16);
	size_t n = (size_t)sprintf(s, "[{\"keep\":");
	for (unsigned i = 0; i < depth; i++)
		s[n++] = '[';
	for (unsigned i = 0; i < depth; i++)
		s[n++] = ']';
	strcpy(s + n, "}]");
	return s;
}

Test(trace, files_that_are_not_trace_arrays_are_left_alone)
{
	init_blocks();
	char *deep = nested(64); /* with its object: 65 levels, one past the bound */
	const char *bad[] = {
		"int main(void)\n{\n\treturn 0;\n}\n",            /* C: ends in '}' */
		"[ringfetch]\ndepth = 3\n\n[other]\n",            /* INI: starts with '[', ends in ']' */
		"{\"important\": true}\n",                        /* an object, not an array */
		"{\"traceEvents\": [{\"ph\":\"X\"}]}",             /* the other trace format */
		"[1, 2, 3]\n",                                    /* elements that are not objects */
		"[{\"a\":1}, \"b\"]",
		"[{\"a\":1}",                                     /* never closed */
		"[{\"name\":\"x\",\"ph\":\"X\",\"ts\":1",          /* cut inside an object */
		"[{\"name\":\"x\",\"ph\":\"X\",\"ts\":1}]\n[{\"b\":2}]\n", /* two arrays */
		"[{\"a\":1}] x",
		"[{\"a\":1}]]",
		"[{\"a\":1},]",
		"[{} {}]",
		"[{\"a\":1,}]",
		"[{\"a\" 1}]",
		"[{'a':1}]",
		"[{\"a\":01}]",
		"[{\"a\":1.}]",
		"[{\"a\":-}]",
		"[{\"a\":1e}]",
		"[{\"a\":tru}]",
		"[{\"a\":nul}]",
		"[{\"a\":\"\x01\"}]",                             /* a control character in a string */
		"[{\"a\":\"\\q\"}]",
		"[{\"a\":\"\\u12G4\"}]",
		"[{\"a\":\"\xc3\x28\"}]",                         /* not UTF-8 */
		"[{\"a\":\"\xed\xa0\x80\"}]",                     /* a UTF-16 surrogate in UTF-8 */
		"[{\"a\":\"\xe0\x80\xaf\"}]",                     /* an overlong form */
		"[{\"a\":\"\xf4\x90\x80\x80\"}]",                 /* past U+10FFFF */
		"\xef\xbb\xbf[{\"a\":1}]",                        /* a byte-order mark */
		deep,
	};
	/* With NUL bytes (lengths given): escapes and \u digits that are NUL, a NUL after the array. */
	static const char nul_escape[] = "[{\"a\":\"\\\0\"}]", nul_hex[] = "[{\"a\":\"\\u00\0\0\"}]",
			  nul_after[] = "[{\"a\":1}]\0";
	const struct {
		const char *s;
		size_t len;
	} with_nul[] = {{nul_escape, sizeof nul_escape - 1},
			{nul_hex, sizeof nul_hex - 1},
			{nul_after, sizeof nul_after - 1}};
	size_t nbad = sizeof bad / sizeof bad[0], nnul = sizeof with_nul / sizeof with_nul[0];
	char path[128];
	tmp_path(path, sizeof path, "bad");
	rf_pipeline *p = make(2, 1);
	for (size_t i = 0; i < nbad + nnul; i++) {
		const char *content = i < nbad ? bad[i] : with_nul[i - nbad].s;
		size_t clen = i < nbad ? strlen(bad[i]) : with_nul[i - nbad].len;
		spill(path, content, clen);
		cr_assert_eq(rf_pipeline_trace(p, path), RF_OK);
		probe c = {p, 0, NB};
		int rc = rf_pipeline_run(p, 4, g_srcs, g_sizes, cb, &c);
		cr_assert_eq(rc, RF_EBACKEND, "case %zu (%s): %s, the file was appended to", i, content, rf_err_name(rc));
		cr_assert(strstr(rf_errmsg(), "not a trace-event JSON array") != NULL, "case %zu: %s", i, rf_errmsg());
		cr_assert_eq(c.computes, 4u, "the work ran; only the trace failed");
		size_t len;
		char *now = slurp(path, &len);
		cr_assert(len == clen && memcmp(now, content, len) == 0, "case %zu: the file changed", i);
		free(now);
	}
	rf_pipeline_destroy(p);
	free(deep);
	unlink(path);
}

Test(trace, trace_arrays_of_any_layout_are_appended_to)
{
	init_blocks();
	char *deep = nested(63); /* with its object: 64 levels, the bound */
	const char *good[] = {
		"",
		" \n\t\r\n",
		"[]",
		"[ \n ]\n",
		"[{\"keep\":1}]",
		"[\n{\"keep\":{\"x\":[1,-0.5e+3,0,2E-7,true,false,null,\"\\u00e9\\n\\\"\\/\",[],{}],"
		"\"\xc3\xa9\":\"\xf0\x9f\x98\x80\"}}\n]\n\n\n",
		"[\n{\"keep\":1},\n",                     /* left open by an older version */
		"[\n{\"keep\":1},\n{\"b\":2},\n \n",
		"[",
		deep,
	};
	char path[128];
	tmp_path(path, sizeof path, "good");
	rf_pipeline *p = make(2, 1);
	for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
		spill(path, good[i], strlen(good[i]));
		size_t kept = strstr(good[i], "keep") != NULL;
		cr_assert_eq(rf_pipeline_trace(p, path), RF_OK);
		probe c = {p, 0, NB};
		int rc = rf_pipeline_run(p, 4, g_srcs, g_sizes, cb, &c);
		cr_assert_eq(rc, RF_OK, "case %zu (%s): %s: %s", i, good[i], rf_err_name(rc), rf_errmsg());
		assert_json(path);
		cr_assert_eq(count_in(path, "keep"), kept, "case %zu: what was there is kept", i);
		cr_assert_eq(count_in(path, "process_name"), 1u, "case %zu: one run appended", i);
	}
	rf_pipeline_destroy(p);
	free(deep);
	unlink(path);
}

/* A write that fails half-way (here RLIMIT_FSIZE; a full disk alike) puts the file back as it was, and
 * the next run to that path works. */
Test(trace, a_write_that_fails_half_way_leaves_the_file_as_it_was)
{
	init_blocks();
	char path[128];
	tmp_path(path, sizeof path, "fsize");
	rf_pipeline *p = make(3, 1);
	cr_assert_eq(rf_pipeline_trace(p, path), RF_OK);
	probe c = {p, 0, NB};
	cr_assert_eq(rf_pipeline_run(p, 8, g_srcs, g_sizes, cb, &c), RF_OK, "%s", rf_errmsg());
	size_t len0;
	char *before = slurp(path, &len0);

	/* Room for 200 more bytes: a run of 16 blocks writes about 5 KiB. */
	signal(SIGXFSZ, SIG_IGN);
	struct rlimit old, lim;
	cr_assert_eq(getrlimit(RLIMIT_FSIZE, &old), 0);
	lim = old;
	lim.rlim_cur = (rlim_t)len0 + 200;
	cr_assert_eq(setrlimit(RLIMIT_FSIZE, &lim), 0);
	int rc = rf_pipeline_run(p, 16, g_srcs, g_sizes, cb, &c);
	char msg[512];
	snprintf(msg, sizeof msg, "%s", rf_errmsg());
	cr_assert_eq(setrlimit(RLIMIT_FSIZE, &old), 0);
	cr_assert_eq(rc, RF_EBACKEND, "%s", rf_err_name(rc));
	cr_assert(strstr(msg, "as it was") != NULL, "%s", msg);

	size_t len1;
	char *after = slurp(path, &len1);
	cr_assert(len1 == len0 && memcmp(before, after, len0) == 0, "the file is not as it was (%zu bytes, was %zu)",
		  len1, len0);
	assert_json(path);
	cr_assert_eq(rf_pipeline_run(p, 8, g_srcs, g_sizes, cb, &c), RF_OK, "the next run: %s", rf_errmsg());
	assert_json(path);
	cr_assert_eq(count_in(path, "process_name"), 2u);
	free(before);
	free(after);
	rf_pipeline_destroy(p);
	unlink(path);
}

/* A file this thread wrote is not checked again while nobody else touches it; once another writer has
 * (here: the first byte overwritten in place, the size unchanged), it is. */
Test(trace, a_file_changed_by_another_writer_is_checked_again)
{
	init_blocks();
	char path[128];
	tmp_path(path, sizeof path, "changed");
	rf_pipeline *p = make(2, 1);
	cr_assert_eq(rf_pipeline_trace(p, path), RF_OK);
	probe c = {p, 0, NB};
	cr_assert_eq(rf_pipeline_run(p, 4, g_srcs, g_sizes, cb, &c), RF_OK, "%s", rf_errmsg());
	cr_assert_eq(rf_pipeline_run(p, 4, g_srcs, g_sizes, cb, &c), RF_OK, "%s", rf_errmsg());

	/* File times move with the kernel's clock tick (a few ms): let one pass first. */
	nanosleep(&(struct timespec){0, 50 * 1000 * 1000}, NULL);
	FILE *f = fopen(path, "r+b");
	cr_assert_not_null(f);
	fputc('x', f);
	fclose(f);
	size_t len0;
	char *before = slurp(path, &len0);
	cr_assert_eq(rf_pipeline_run(p, 4, g_srcs, g_sizes, cb, &c), RF_EBACKEND);
	size_t len1;
	char *after = slurp(path, &len1);
	cr_assert(len1 == len0 && memcmp(before, after, len0) == 0, "the file changed");

	before[0] = '[';
	spill(path, before, len0); /* a trace array again */
	cr_assert_eq(rf_pipeline_run(p, 4, g_srcs, g_sizes, cb, &c), RF_OK, "%s", rf_errmsg());
	assert_json(path);
	cr_assert_eq(count_in(path, "process_name"), 3u);

	/* Text appended after the array by someone else. */
	f = fopen(path, "ab");
	cr_assert_not_null(f);
	fputs("# a note\n", f);
	fclose(f);
	cr_assert_eq(rf_pipeline_run(p, 4, g_srcs, g_sizes, cb, &c), RF_EBACKEND);
	cr_assert_eq(count_in(path, "process_name"), 3u);
	free(before);
	free(after);
	rf_pipeline_destroy(p);
	unlink(path);
}

/* Processes, not threads: the flock and the check hold across them (each process checks the file
 * other processes wrote). */
Test(trace, three_processes_tracing_to_one_path_write_whole_runs)
{
	init_blocks();
	char path[128];
	tmp_path(path, sizeof path, "procs");
	enum { NP = 3, RUNS = 20 };
	pid_t pid[NP];
	for (int i = 0; i < NP; i++) {
		pid[i] = fork();
		cr_assert_geq(pid[i], 0);
		if (pid[i] == 0) {
			tracer t = {path, RUNS, 0};
			trace_thread(&t);
			_exit(t.rc == RF_OK ? 0 : 1);
		}
	}
	for (int i = 0; i < NP; i++) {
		int status;
		cr_assert_eq(waitpid(pid[i], &status, 0), pid[i]);
		cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "process %d failed", i);
	}
	assert_json(path);
	cr_assert_eq(count_in(path, "process_name"), (size_t)NP * RUNS);
	cr_assert_eq(count_in(path, "\"cat\":\"compute\""), (size_t)NP * RUNS * 16);
	unlink(path);
}
