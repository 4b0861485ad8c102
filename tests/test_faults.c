/* tests/test_faults.c — make the k-th fallible step fail (every allocation, thread creation, the hwloc
 * topology, every backend call: base/alloc.h), for every k, over graph building, instantiation,
 * pipeline creation and runs: each failure is a clean negative RF_ code, the object is untouched,
 * destroyable or still usable, and (under ASan, where leak_check() is live) nothing leaks. */
#include "support.h"

#include "base/alloc.h"

#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

static int clean_error(int rc)
{
	return rc == RF_ENOMEM || rc == RF_EBACKEND;
}

static int ok_cb(void *user, const rf_block *b)
{
	size_t *calls = user;
	const unsigned char *p = b->data;
	for (size_t i = 0; i < b->bytes; i++)
		if (p[i] != (unsigned char)(b->index + i))
			return 1;
	(*calls)++;
	return 0;
}

enum { N = 24, SZ = 128 };
static unsigned char g_src[N][SZ];
static const void *g_srcs[N];
static size_t g_sizes[N];

static void fill(void)
{
	for (size_t b = 0; b < N; b++) {
		for (size_t i = 0; i < SZ; i++)
			g_src[b][i] = (unsigned char)(b + i);
		g_srcs[b] = g_src[b];
		g_sizes[b] = SZ;
	}
}

/* Sweep k over pipeline creation with these params. Returns the number of faults injected. */
static long sweep_create(const rf_pipeline_params *pp)
{
	long k;
	for (k = 1;; k++) {
		rf_pipeline *p = (rf_pipeline *)&k;
		rf__fault_arm(k);
		int rc = rf_pipeline_create(pp, &p);
		long steps = rf__fault_steps();
		rf__fault_arm(0);
		if (steps < k) { /* the k-th step never came: the whole create ran unfaulted */
			cr_assert_eq(rc, RF_OK, "unfaulted create: %s", rf_errmsg());
			rf_pipeline_destroy(p);
			return k - 1;
		}
		if (rc == RF_OK) { /* the faulted step was optional (e.g. pinning): still a working pipeline */
			size_t calls = 0;
			cr_assert_eq(rf_pipeline_run(p, N, g_srcs, g_sizes, ok_cb, &calls), RF_OK, "k=%ld: %s", k, rf_errmsg());
			cr_assert_eq(calls, N);
			rf_pipeline_destroy(p);
			continue;
		}
		cr_assert(clean_error(rc), "k=%ld: create returned %s", k, rf_err_name(rc));
		cr_assert_str_not_empty(rf_errmsg());
		cr_assert_eq(p, (rf_pipeline *)&k, "k=%ld: *out written on failure", k);
	}
}

/* Sweep k over runs of one pipeline; after each faulted run the next, unfaulted one must work. */
static long sweep_run(rf_pipeline *p)
{
	long k;
	for (k = 1;; k++) {
		size_t calls = 0;
		rf__fault_arm(k);
		int rc = rf_pipeline_run(p, N, g_srcs, g_sizes, ok_cb, &calls);
		long steps = rf__fault_steps();
		rf__fault_arm(0);
		if (steps < k) {
			cr_assert_eq(rc, RF_OK, "unfaulted run: %s", rf_errmsg());
			cr_assert_eq(calls, N);
			return k - 1;
		}
		cr_assert(rc == RF_OK || clean_error(rc), "k=%ld: run returned %s", k, rf_err_name(rc));
		calls = 0;
		cr_assert_eq(rf_pipeline_run(p, N, g_srcs, g_sizes, ok_cb, &calls), RF_OK, "k=%ld: not usable: %s", k,
			     rf_errmsg());
		cr_assert_eq(calls, N);
	}
}

Test(faults, pipeline_create_and_run_every_step)
{
	fill();
	static const struct {
		const char *backend;
		unsigned depth, kq;
		const char *env_depth;
	} cases[] = {{"cpu", 2, 1, NULL}, {"threads", 3, 1, NULL}, {"threads", 4, 2, NULL}, {"threads", 0, 1, "auto"}};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		if (cases[i].env_depth)
			setenv("RINGFETCH_DEPTH", cases[i].env_depth, 1);
		setenv("RINGFETCH_ORACLE", "1", 1); /* runs allocate their execution log: more steps to fail */
		rf_pipeline_params pp = {.depth = cases[i].depth, .slot_bytes = SZ, .backend = cases[i].backend,
					 .copy_queues = cases[i].kq};
		long nc = sweep_create(&pp);
		cr_assert_gt(nc, 3, "case %zu: only %ld fallible steps in create", i, nc);
		rf_pipeline *p;
		cr_assert_eq(rf_pipeline_create(&pp, &p), RF_OK, "%s", rf_errmsg());
		long nr = sweep_run(p);
		cr_assert_gt(nr, 0, "case %zu: no fallible step in a run", i);
		cr_log_info("%s depth %u K %u: %ld faults injected into create, %ld into a run", cases[i].backend,
			    cases[i].depth, cases[i].kq, nc, nr);
		rf_pipeline_destroy(p);
		unsetenv("RINGFETCH_DEPTH");
		unsetenv("RINGFETCH_ORACLE");
	}
	leak_check();
}

Test(faults, graph_lower_and_exec_every_step)
{
	fill();
	for (long k = 1;; k++) {
		rf_graph *g = NULL;
		rf_exec *e = NULL;
		rf__fault_arm(k);
		int rc = rf_graph_ring(N, 3, 1, &g);
		if (rc == RF_OK) {
			rf_exec_params xp = {.backend = k % 2 ? "cpu" : "threads", .slot_bytes = SZ};
			rc = rf_exec_create(g, &xp, &e);
		}
		long steps = rf__fault_steps();
		rf__fault_arm(0);
		if (rc != RF_OK)
			cr_assert(clean_error(rc), "k=%ld: %s", k, rf_err_name(rc));
		if (e != NULL) { /* whatever failed before, what exists works */
			size_t calls = 0;
			cr_assert_eq(rf_exec_run(e, N, g_srcs, g_sizes, ok_cb, &calls), RF_OK, "k=%ld: %s", k, rf_errmsg());
			cr_assert_eq(calls, N);
		}
		rf_exec_destroy(e);
		rf_graph_destroy(g);
		if (steps < k) {
			cr_assert_eq(rc, RF_OK);
			cr_assert_gt(k, 10, "only %ld fallible steps", k - 1);
			cr_log_info("graph + exec: %ld faults injected", k - 1);
			break;
		}
	}
	leak_check();
}
