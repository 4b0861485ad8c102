/* tests/test_trace.c — traces and statistics after a cancel count exactly what ran; the trace file is
 * a valid JSON document whenever no run writes it, also with several pipelines on several threads
 * tracing to one path; a path that is not a regular file fails the trace instead of hanging. */
#include "ringfetch.h"

#include <criterion/criterion.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
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
