/*
 * tests/test_threads_place.c — where the threads backend's copy workers go (backends/threads_place.h,
 * ): spread by a process-wide count (synthetic cores, then real pipelines), released on
 * destroy, an explicit CPU set (RINGFETCH_WORKER_CPUS, config key worker_cpus) said in describe, and
 * RF_ECONFIG for a malformed one; a worker leaves the core its caller moved to. White-box (static library); each test runs in its own process.
 */
#include <criterion/criterion.h>

#include "ringfetch.h"
#include "backends/threads_place.h"
#include "runtime/config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void clean_env(void)
{
	unsetenv("RINGFETCH_CONFIG");
	unsetenv("RINGFETCH_WORKER_CPUS");
	unsetenv("RINGFETCH_HANDOFF");
}

TestSuite(threads_place, .init = clean_env);

Test(threads_place, pick_spreads_over_cores_and_unpick_releases)
{
	struct hwloc_obj objs[3];
	memset(objs, 0, sizeof objs);
	hwloc_obj_t cores[3];
	for (unsigned i = 0; i < 3; i++) {
		objs[i].logical_index = 100 + i; /* away from real cores other tests could count */
		cores[i] = &objs[i];
	}
	unsigned got[7];
	for (unsigned k = 0; k < 7; k++)
		got[k] = rf__tp_pick(cores, 3, NULL)->logical_index;
	/* 7 workers on 3 cores: 3, 2, 2, in the order of least loaded first */
	unsigned expect[7] = {100, 101, 102, 100, 101, 102, 100};
	for (unsigned k = 0; k < 7; k++)
		cr_assert_eq(got[k], expect[k], "pick %u: core %u", k, got[k]);
	cr_assert_eq(rf__tp_load(100), 3);
	cr_assert_eq(rf__tp_load(101), 2);
	rf__tp_unpick(101);
	rf__tp_unpick(101);
	cr_assert_eq(rf__tp_load(101), 0);
	cr_assert_eq(rf__tp_pick(cores, 3, NULL)->logical_index, 101, "the emptied core is taken next");
	cr_assert_eq(rf__tp_pick(cores, 3, cores[1])->logical_index, 102, "the avoided core is never taken");
	rf__tp_unpick(102);
	cr_assert_null(rf__tp_pick(cores, 1, cores[0]), "nothing but the avoided core: none");
	rf__tp_unpick(101);
	rf__tp_unpick(101); /* never below zero */
	cr_assert_eq(rf__tp_load(101), 0);
}

static rf_pipeline *make(int *rc)
{
	rf_pipeline_params pp = {.depth = 2, .slot_bytes = 4096, .backend = "threads"};
	rf_pipeline *p = NULL;
	*rc = rf_pipeline_create(&pp, &p);
	return p;
}

static unsigned total_load(void)
{
	unsigned s = 0;
	for (unsigned i = 0; i < 4096; i++)
		s += rf__tp_load(i);
	return s;
}

/* Several pipelines: each worker pinned is counted once, and destroy gives the count back. Where the
 * caller's binding offers two cores or more besides its own, no core holds two workers more than
 * another (the old round robin put every pipeline's first worker on the same core). */
Test(threads_place, pipelines_spread_and_release)
{
	rf_pipeline *p[4];
	int rc;
	for (int i = 0; i < 4; i++) {
		p[i] = make(&rc);
		cr_assert_eq(rc, RF_OK, "%s", rf_errmsg());
	}
	unsigned pinned = 0, max = 0, min = ~0u, used = 0;
	for (int i = 0; i < 4; i++)
		pinned += strstr(rf_pipeline_describe(p[i]), "q1: core ") != NULL;
	for (unsigned c = 0; c < 4096; c++) {
		unsigned l = rf__tp_load(c);
		if (l) {
			used++;
			max = l > max ? l : max;
			min = l < min ? l : min;
		}
	}
	fprintf(stderr, "%u of 4 workers pinned over %u core(s), load %u..%u\n%s\n", pinned, used, min, max,
		rf_pipeline_describe(p[0]));
	cr_assert_eq(total_load(), pinned);
	/* With one core besides the caller's, an unpinned caller that moves between creates legitimately
	 * sends workers to either core (each create avoids the caller's core of the moment): no balance
	 * to assert there. */
	if (used > 1 && sysconf(_SC_NPROCESSORS_ONLN) >= 3)
		cr_assert(max - min <= 1, "load %u..%u", min, max);
	for (int i = 0; i < 4; i++)
		rf_pipeline_destroy(p[i]);
	cr_assert_eq(total_load(), 0, "destroy releases the workers' cores");
}

Test(threads_place, explicit_cpu_set_is_used_and_described)
{
	setenv("RINGFETCH_WORKER_CPUS", "0", 1);
	int rc;
	rf_pipeline *p = make(&rc);
	cr_assert_eq(rc, RF_OK, "%s", rf_errmsg());
	const char *d = rf_pipeline_describe(p);
	fprintf(stderr, "%s\n", d);
	/* CPU 0 exists on every machine; unless the topology is unusable the worker goes to its core. */
	cr_assert(strstr(d, "copy workers on CPUs 0 (configured)") || strstr(d, "copy workers not pinned"), "%s", d);
	rf_pipeline_destroy(p);
	setenv("RINGFETCH_WORKER_CPUS", "100000", 1); /* no such CPU: not pinned, said so; not an error */
	p = make(&rc);
	cr_assert_eq(rc, RF_OK, "%s", rf_errmsg());
	cr_assert(strstr(rf_pipeline_describe(p), "copy workers not pinned"), "%s", rf_pipeline_describe(p));
	rf_pipeline_destroy(p);
}

Test(threads_place, malformed_cpu_set_is_econfig)
{
	int rc;
	const char *bad[] = {"", "a", "0-", "-1", "1 2", "0x3", "0--1", "0,,1", "1-1-1", "0,", "1-0"};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		setenv("RINGFETCH_WORKER_CPUS", bad[i], 1);
		rf_pipeline *p = make(&rc);
		cr_assert_eq(rc, RF_ECONFIG, "\"%s\": %s", bad[i], rf_err_name(rc));
		cr_assert_null(p);
		cr_assert(strstr(rf_errmsg(), "RINGFETCH_WORKER_CPUS") != NULL, "%s", rf_errmsg());
	}
	unsetenv("RINGFETCH_WORKER_CPUS");
	char path[] = "/tmp/rf_place_XXXXXX";
	int fd = mkstemp(path);
	const char *text = "[ringfetch]\nworker_cpus = two\n";
	cr_assert_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
	close(fd);
	setenv("RINGFETCH_CONFIG", path, 1);
	rf_pipeline *p = make(&rc);
	cr_assert_eq(rc, RF_ECONFIG);
	cr_assert_null(p);
	cr_assert(strstr(rf_errmsg(), "worker_cpus") != NULL, "%s", rf_errmsg());
	unlink(path);
}

static int ok_cb(void *u, const rf_block *b)
{
	(void)u;
	(void)b;
	return 0;
}

/* The caller moves onto its copy worker's core after create (here: binds itself there); the next run
 * moves the worker to another core. Needs two cores in this process's binding. */
Test(threads_place, worker_leaves_the_core_the_caller_moved_to)
{
	hwloc_topology_t topo;
	cr_assert_eq(hwloc_topology_init(&topo), 0);
	cr_assert_eq(hwloc_topology_load(topo), 0);
	hwloc_bitmap_t mine = hwloc_bitmap_alloc();
	cr_assert_eq(hwloc_get_cpubind(topo, mine, HWLOC_CPUBIND_THREAD), 0);
	unsigned usable = 0;
	for (int i = 0; i < hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_CORE); i++)
		usable += hwloc_bitmap_isincluded(hwloc_get_obj_by_type(topo, HWLOC_OBJ_CORE, (unsigned)i)->cpuset, mine);
	if (usable < 2) {
		cr_log_warn("skipped: fewer than two cores in this process's binding");
		hwloc_bitmap_free(mine);
		hwloc_topology_destroy(topo);
		return;
	}
	int rc;
	rf_pipeline *p = make(&rc);
	cr_assert_eq(rc, RF_OK, "%s", rf_errmsg());
	const char *d = strstr(rf_pipeline_describe(p), "q1: core ");
	cr_assert_not_null(d, "%s", rf_pipeline_describe(p));
	unsigned w = (unsigned)strtoul(d + 9, NULL, 10);
	cr_assert_eq(rf__tp_load(w), 1);
	hwloc_obj_t wc = hwloc_get_obj_by_type(topo, HWLOC_OBJ_CORE, w);
	cr_assert_eq(hwloc_set_cpubind(topo, wc->cpuset, HWLOC_CPUBIND_THREAD), 0);
	static unsigned char src[4096];
	const void *srcs[2] = {src, src};
	size_t sizes[2] = {sizeof src, sizeof src};
	cr_assert_eq(rf_pipeline_run(p, 2, srcs, sizes, ok_cb, NULL), RF_OK, "%s", rf_errmsg());
	cr_assert_eq(rf__tp_load(w), 0, "the worker is still counted on the caller's new core %u", w);
	cr_assert_eq(total_load(), 1);
	rf_pipeline_destroy(p);
	cr_assert_eq(total_load(), 0);
	hwloc_set_cpubind(topo, mine, HWLOC_CPUBIND_THREAD);
	hwloc_bitmap_free(mine);
	hwloc_topology_destroy(topo);
}

/* The list grammar through both ways of configuring it: the variable and the file's key. */
static void write_config(const char *path, const char *value)
{
	FILE *f = fopen(path, "w");
	cr_assert_not_null(f);
	fprintf(f, "[ringfetch]\nworker_cpus = %s\n", value);
	fclose(f);
}

Test(threads_place, cpu_lists_are_parsed_strictly_from_the_environment_and_the_file)
{
	static const char *const good[] = {"0", "2-3,6", "0-0", "1-1", "0-3,8-11", "3,1,2", "100000"};
	static const char *const bad[] = {"0--1", "0,,1", "1-1-1", "0,", "1-0", ",0", "0-", "5-3,1", "0-1-2",
					  "1048576", "0,1,"};
	char path[] = "/tmp/rf_place_XXXXXX";
	int fd = mkstemp(path);
	cr_assert_geq(fd, 0);
	close(fd);
	rf__config c;
	for (int via_file = 0; via_file <= 1; via_file++) {
		for (size_t i = 0; i < sizeof good / sizeof good[0] + sizeof bad / sizeof bad[0]; i++) {
			int ok = i < sizeof good / sizeof good[0];
			const char *v = ok ? good[i] : bad[i - sizeof good / sizeof good[0]];
			if (via_file) {
				write_config(path, v);
				setenv("RINGFETCH_CONFIG", path, 1);
			} else {
				setenv("RINGFETCH_WORKER_CPUS", v, 1);
			}
			int rc = rf__config_load(&c, 0, 0, 0, 0);
			if (ok) {
				cr_assert_eq(rc, RF_OK, "\"%s\" (%s): %s", v, via_file ? "file" : "variable", rf_errmsg());
				cr_assert_str_eq(c.worker_cpus, v);
			} else {
				cr_assert_eq(rc, RF_ECONFIG, "\"%s\" (%s) accepted", v, via_file ? "file" : "variable");
				cr_assert(strstr(rf_errmsg(), via_file ? "worker_cpus" : "RINGFETCH_WORKER_CPUS") != NULL,
					  "%s", rf_errmsg());
			}
			unsetenv("RINGFETCH_CONFIG");
			unsetenv("RINGFETCH_WORKER_CPUS");
		}
	}
	unlink(path);
}
