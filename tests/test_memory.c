/* tests/test_memory.c — params.memory (DESIGN.md, "Keyed use"): "auto" never hands
 * device pointers to a host compute, a backend of the other kind is RF_EINVAL from params and
 * RF_ECONFIG naming the variable or file:line from the configuration, a bad value is RF_EINVAL, and
 * device memory without a usable GPU is RF_ENODEV. Runs on every machine (cuda built or not, GPU or
 * not): none of these checks needs a device. */
#include <criterion/criterion.h>

#include "ringfetch.h"
#include "ringfetch/graph.h"
#include "support.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void clean_env(void)
{
	unsetenv("RINGFETCH_DEPTH");
	unsetenv("RINGFETCH_BACKEND");
	unsetenv("RINGFETCH_CONFIG");
}

static rf_pipeline_params params(const char *backend, int memory)
{
	rf_pipeline_params pp;
	memset(&pp, 0, sizeof pp);
	pp.depth = 2;
	pp.slot_bytes = 64;
	pp.staging = "none";
	pp.backend = backend;
	pp.memory = (rf_memory)memory;
	return pp;
}

static int create(const char *backend, int memory, rf_pipeline **p)
{
	rf_pipeline_params pp = params(backend, memory);
	*p = NULL;
	return rf_pipeline_create(&pp, p);
}

Test(memory, value_other_than_host_or_device_is_einval)
{
	clean_env();
	static const int bad[] = {2, 3, -1, 1000};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		static const char *const be[] = {"cpu", "auto", "cuda", NULL};
		for (size_t j = 0; j < 4; j++) {
			rf_pipeline *p;
			int rc = create(be[j], bad[i], &p);
			cr_assert_eq(rc, RF_EINVAL, "memory %d backend %s: %s", bad[i], be[j] ? be[j] : "NULL",
				     rf_err_name(rc));
			cr_assert_null(p);
			cr_assert(strstr(rf_errmsg(), "memory") != NULL, "%s", rf_errmsg());
		}
	}
	leak_check();
}

/* Named in params: RF_EINVAL, also for cuda where it is not built or no GPU is usable (this machine). */
Test(memory, backend_of_the_other_kind_in_params_is_einval)
{
	clean_env();
	rf_pipeline *p;
	cr_assert_eq(create("cuda", RF_MEMORY_HOST, &p), RF_EINVAL, "%s", rf_errmsg());
	cr_assert(strstr(rf_errmsg(), "RF_MEMORY_DEVICE") != NULL, "%s", rf_errmsg());
	cr_assert_eq(create("threads", RF_MEMORY_DEVICE, &p), RF_EINVAL, "%s", rf_errmsg());
	cr_assert(strstr(rf_errmsg(), "RF_MEMORY_HOST") != NULL, "%s", rf_errmsg());
	cr_assert_eq(create("cpu", RF_MEMORY_DEVICE, &p), RF_EINVAL, "%s", rf_errmsg());
	cr_assert_null(p);
	/* The check comes before the environment is read: a malformed variable does not hide it. */
	setenv("RINGFETCH_DEPTH", "abc", 1);
	rf_pipeline_params pp = params("cuda", RF_MEMORY_HOST);
	pp.depth = 0;
	cr_assert_eq(rf_pipeline_create(&pp, &p), RF_EINVAL, "%s", rf_errmsg());
	clean_env();
	leak_check();
}

/* From the environment: RF_ECONFIG naming the variable, so RINGFETCH_BACKEND=cuda cannot turn a host
 * deployment into one that dereferences device pointers. */
Test(memory, backend_of_the_other_kind_from_the_environment_is_econfig)
{
	clean_env();
	rf_pipeline *p;
	setenv("RINGFETCH_BACKEND", "cuda", 1);
	cr_assert_eq(create(NULL, RF_MEMORY_HOST, &p), RF_ECONFIG, "%s", rf_errmsg());
	cr_assert(strstr(rf_errmsg(), "RINGFETCH_BACKEND") != NULL, "%s", rf_errmsg());
	cr_assert_null(p);
	/* An explicit backend wins without reading the variable. */
	cr_assert_eq(create("cpu", RF_MEMORY_HOST, &p), RF_OK, "%s", rf_errmsg());
	rf_pipeline_destroy(p);
	setenv("RINGFETCH_BACKEND", "threads", 1);
	cr_assert_eq(create(NULL, RF_MEMORY_DEVICE, &p), RF_ECONFIG, "%s", rf_errmsg());
	cr_assert(strstr(rf_errmsg(), "RINGFETCH_BACKEND") != NULL, "%s", rf_errmsg());
	/* "auto" from the environment is fine for host memory and picks a host backend. */
	setenv("RINGFETCH_BACKEND", "auto", 1);
	cr_assert_eq(create(NULL, RF_MEMORY_HOST, &p), RF_OK, "%s", rf_errmsg());
	cr_assert_str_neq(rf_pipeline_backend(p), "cuda");
	rf_pipeline_destroy(p);
	clean_env();
	leak_check();
}

Test(memory, backend_of_the_other_kind_from_the_config_file_is_econfig_with_file_and_line)
{
	clean_env();
	char path[] = "/tmp/rf_memory_cfgXXXXXX";
	int fd = mkstemp(path);
	cr_assert(fd >= 0);
	FILE *f = fdopen(fd, "w");
	cr_assert_not_null(f);
	fputs("; a deployment's file\n[ringfetch]\ndepth = 3\n\nbackend = cuda\n", f);
	fclose(f);
	setenv("RINGFETCH_CONFIG", path, 1);
	rf_pipeline *p;
	cr_assert_eq(create(NULL, RF_MEMORY_HOST, &p), RF_ECONFIG, "%s", rf_errmsg());
	char want[64];
	snprintf(want, sizeof want, "%s:5", path);
	cr_assert(strstr(rf_errmsg(), want) != NULL, "wanted \"%s\" in: %s", want, rf_errmsg());
	/* The environment overrides the file, and is what the message then names. */
	setenv("RINGFETCH_BACKEND", "cpu", 1);
	cr_assert_eq(create(NULL, RF_MEMORY_HOST, &p), RF_OK, "%s", rf_errmsg());
	rf_pipeline_destroy(p);
	cr_assert_eq(create(NULL, RF_MEMORY_DEVICE, &p), RF_ECONFIG, "%s", rf_errmsg());
	cr_assert(strstr(rf_errmsg(), "RINGFETCH_BACKEND") != NULL, "%s", rf_errmsg());
	unlink(path);
	clean_env();
	leak_check();
}

/* Device memory: cuda or nothing. Here (no GPU, or cuda not built) that is RF_ENODEV; on a GPU machine
 * it is a cuda pipeline. Never a host backend. */
Test(memory, device_memory_without_a_gpu_is_enodev)
{
	clean_env();
	static const char *const be[] = {"auto", "cuda", NULL};
	for (size_t i = 0; i < 3; i++) {
		rf_pipeline *p;
		int rc = create(be[i], RF_MEMORY_DEVICE, &p);
		if (rc == RF_OK) {
			cr_assert_str_eq(rf_pipeline_backend(p), "cuda");
			rf_pipeline_destroy(p);
			continue;
		}
		cr_assert_eq(rc, RF_ENODEV, "backend %s: %s: %s", be[i] ? be[i] : "NULL", rf_err_name(rc), rf_errmsg());
		cr_assert(strstr(rf_errmsg(), "cuda") != NULL, "%s", rf_errmsg());
	}
	leak_check();
}

Test(memory, host_memory_auto_and_default_pick_a_host_backend)
{
	clean_env();
	static const char *const be[] = {"auto", NULL};
	for (size_t i = 0; i < 2; i++) {
		rf_pipeline *p;
		cr_assert_eq(create(be[i], RF_MEMORY_HOST, &p), RF_OK, "%s", rf_errmsg());
		const char *name = rf_pipeline_backend(p);
		cr_assert(strcmp(name, "threads") == 0 || strcmp(name, "cpu") == 0, "%s", name);
		rf_pipeline_destroy(p);
	}
	leak_check();
}

/* rf_exec_params has no memory field: its computes take host memory unless the caller names "cuda". */
Test(memory, exec_auto_is_a_host_backend_and_a_configured_cuda_is_econfig)
{
	clean_env();
	rf_graph *g;
	cr_assert_eq(rf_graph_ring(4, 2, 1, &g), RF_OK);
	rf_exec_params ep = {0};
	ep.slot_bytes = 64;
	ep.backend = "auto";
	rf_exec *e = NULL;
	cr_assert_eq(rf_exec_create(g, &ep, &e), RF_OK, "%s", rf_errmsg());
	cr_assert_str_neq(rf_exec_backend(e), "cuda");
	rf_exec_destroy(e);
	ep.backend = NULL;
	setenv("RINGFETCH_BACKEND", "cuda", 1);
	e = NULL;
	cr_assert_eq(rf_exec_create(g, &ep, &e), RF_ECONFIG, "%s", rf_errmsg());
	cr_assert(strstr(rf_errmsg(), "RINGFETCH_BACKEND") != NULL, "%s", rf_errmsg());
	cr_assert_null(e);
	clean_env();
	rf_graph_destroy(g);
	leak_check();
}
