/*
 * tests/test_exec_budget.c — the memory budget (RINGFETCH_MEMORY_BUDGET, `memory_budget` in the config
 * file) caps rf_exec_create's ring as it caps rf_pipeline_create's: a graph whose slots do not fit is
 * RF_ECONFIG naming where the budget came from, before anything is allocated. It used to be ignored.
 */
#include <criterion/criterion.h>
#include <ringfetch.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int exec_with(unsigned depth, size_t slot_bytes, rf_exec **out)
{
	rf_graph *g;
	cr_assert_eq(rf_graph_ring(6, depth, 1, &g), RF_OK, "%s", rf_errmsg());
	rf_exec_params ep = {.backend = "cpu", .slot_bytes = slot_bytes};
	*out = NULL;
	int rc = rf_exec_create(g, &ep, out);
	rf_graph_destroy(g);
	return rc;
}

Test(exec_budget, environment)
{
	setenv("RINGFETCH_MEMORY_BUDGET", "8K", 1);
	rf_exec *e;
	cr_assert_eq(exec_with(4, 4096, &e), RF_ECONFIG, "a 16 KiB ring under an 8 KiB budget: %s", rf_errmsg());
	cr_assert_null(e);
	cr_assert(strstr(rf_errmsg(), "RINGFETCH_MEMORY_BUDGET") != NULL, "%s", rf_errmsg());
	cr_assert(strstr(rf_errmsg(), "rf_exec_create") != NULL, "%s", rf_errmsg());
	cr_assert_eq(exec_with(2, 4096, &e), RF_OK, "an 8 KiB ring fits: %s", rf_errmsg());
	rf_exec_destroy(e);
	cr_assert_eq(exec_with(3, 2730, &e), RF_OK, "3 x 2730 = 8190 bytes: %s", rf_errmsg());
	rf_exec_destroy(e);
	cr_assert_eq(exec_with(3, 2731, &e), RF_ECONFIG, "3 x 2731 = 8193 bytes > 8192");
}

Test(exec_budget, file)
{
	char path[] = "/tmp/rf-execbudget-XXXXXX";
	int fd = mkstemp(path);
	cr_assert_geq(fd, 0);
	const char *text = "[ringfetch]\nmemory_budget = 1M\n";
	cr_assert_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
	close(fd);
	setenv("RINGFETCH_CONFIG", path, 1);
	rf_exec *e;
	cr_assert_eq(exec_with(3, 512 << 10, &e), RF_ECONFIG, "%s", rf_errmsg());
	cr_assert(strstr(rf_errmsg(), path) != NULL, "%s", rf_errmsg());
	cr_assert_eq(exec_with(2, 512 << 10, &e), RF_OK, "%s", rf_errmsg());
	rf_exec_destroy(e);
	remove(path);
}
