/*
 * tests/test_staging_leak.c — staging memory must not grow with the number of create/destroy or
 * alloc/free cycles, at any size, and a ring must stay within memory_budget.
 *
 * The regression: a ring of 8 MiB or more was a jemalloc large allocation; jemalloc mapped its size class
 * (80 MiB for 64 MiB + a page of padding) through the extent hooks, used part of it and retained the
 * touched tail, which no later large request could use, so every create mapped afresh: +16 MiB of RSS
 * per create/destroy of 4 x 16 MiB, +2 MiB per 8 MiB slots, the same through rf_staging_alloc and
 * rf_exec. Resident memory is measured from /proc/self/statm; each size runs 48 cycles after one warm-up
 * cycle and may grow RSS by less than 64 MiB in all. White-box (static library): reads the staging
 * counters for the budget check.
 */
#include "memory/staging.h"

#include <criterion/criterion.h>
#include <ringfetch.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CYCLES 48
#define MiB ((size_t)1 << 20)
#define GROWTH_LIMIT (64 * MiB)

TestSuite(staging_leak, .timeout = 300);

static size_t rss_bytes(void)
{
	FILE *f = fopen("/proc/self/statm", "r");
	cr_assert_not_null(f);
	unsigned long size, resident;
	cr_assert_eq(fscanf(f, "%lu %lu", &size, &resident), 2);
	fclose(f);
	return (size_t)resident * (size_t)sysconf(_SC_PAGESIZE);
}

/* RSS growth over CYCLES cycles of `cycle(arg)` (after one warm-up), asserted under GROWTH_LIMIT, and the
 * staging counters back where they started. */
static void expect_flat(const char *what, void (*cycle)(const void *), const void *arg)
{
	cycle(arg);
	size_t before = rss_bytes();
	rf__staging_stats s0, s1;
	rf__staging_get_stats(&s0);
	size_t peak = before;
	for (int i = 0; i < CYCLES; i++) {
		cycle(arg);
		size_t now = rss_bytes();
		peak = now > peak ? now : peak;
	}
	rf__staging_get_stats(&s1);
	size_t after = rss_bytes();
	cr_log_info("%s: RSS %zu -> %zu MiB (peak %zu), mapped %zu -> %zu MiB, %lu mappings", what, before / MiB,
		    after / MiB, peak / MiB, s0.mapped_bytes / MiB, s1.mapped_bytes / MiB, s1.hook_maps - s0.hook_maps);
	cr_assert_lt(after > before ? after - before : 0, GROWTH_LIMIT, "%s: RSS grew from %zu to %zu MiB in %d cycles",
		     what, before / MiB, after / MiB, CYCLES);
	cr_assert_leq(s1.mapped_bytes, s0.mapped_bytes, "%s: staging mappings grew from %zu to %zu bytes", what,
		      s0.mapped_bytes, s1.mapped_bytes);
	cr_assert_eq(s1.live_allocs, 0, "%s", what);
}

/* ---- rf_staging_alloc / rf_staging_free -------------------------------------------------------------- */

static void alloc_free(const void *arg)
{
	size_t bytes = *(const size_t *)arg;
	void *p = NULL;
	cr_assert_eq(rf_staging_alloc(bytes, "auto", &p), RF_OK, "%s", rf_errmsg());
	((volatile unsigned char *)p)[bytes - 1] = 1;
	rf_staging_free(p);
}

static void alloc_free_sizes(const size_t *sizes, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		char what[64];
		snprintf(what, sizeof what, "alloc/free of %zu bytes", sizes[i]);
		expect_flat(what, alloc_free, &sizes[i]);
	}
}

Test(staging_leak, alloc_free_power_of_two_sizes)
{
	static const size_t sizes[] = {8 * MiB, 16 * MiB, 64 * MiB};
	alloc_free_sizes(sizes, sizeof sizes / sizeof sizes[0]);
}

Test(staging_leak, alloc_free_odd_sizes)
{
	static const size_t sizes[] = {8 * MiB + 1, 9 * MiB + 4097, 24 * MiB - 12345, 65 * MiB + 7, 1 * MiB + 3};
	alloc_free_sizes(sizes, sizeof sizes / sizeof sizes[0]);
}

/* ---- pipelines and execs --------------------------------------------------------------------------- */

typedef struct ring_case {
	const char *backend;
	unsigned depth;
	size_t slot_bytes;
} ring_case;

static void pipeline_cycle(const void *arg)
{
	const ring_case *c = arg;
	rf_pipeline_params pp = {.depth = c->depth, .slot_bytes = c->slot_bytes, .backend = c->backend};
	rf_pipeline *p;
	cr_assert_eq(rf_pipeline_create(&pp, &p), RF_OK, "%s", rf_errmsg());
	rf_pipeline_destroy(p);
}

Test(staging_leak, pipeline_create_destroy)
{
	static const ring_case cases[] = {
		{"cpu", 4, 16 * MiB}, {"cpu", 4, 8 * MiB}, {"threads", 3, 8 * MiB + 4096 + 1}, {"cpu", 2, 21 * MiB + 3}};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		char what[96];
		snprintf(what, sizeof what, "%s pipeline of %u x %zu bytes", cases[i].backend, cases[i].depth,
			 cases[i].slot_bytes);
		expect_flat(what, pipeline_cycle, &cases[i]);
	}
}

static void exec_cycle(const void *arg)
{
	const ring_case *c = arg;
	rf_graph *g;
	cr_assert_eq(rf_graph_ring(8, c->depth, 1, &g), RF_OK, "%s", rf_errmsg());
	rf_exec_params ep = {.backend = c->backend, .slot_bytes = c->slot_bytes};
	rf_exec *e;
	cr_assert_eq(rf_exec_create(g, &ep, &e), RF_OK, "%s", rf_errmsg());
	rf_exec_destroy(e);
	rf_graph_destroy(g);
}

Test(staging_leak, exec_create_destroy)
{
	static const ring_case cases[] = {{"cpu", 4, 16 * MiB}, {"threads", 2, 8 * MiB + 1}};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		char what[96];
		snprintf(what, sizeof what, "%s exec of %u x %zu bytes", cases[i].backend, cases[i].depth,
			 cases[i].slot_bytes);
		expect_flat(what, exec_cycle, &cases[i]);
	}
}

/* ---- the budget is a cap ----------------------------------------------------------------------------- */

/* A ring exactly at the budget maps no more than the budget (rounded up to a page): jemalloc's size class
 * for 65 MiB is 80 MiB. */
Test(staging_leak, a_ring_stays_within_the_budget)
{
	static const struct {
		unsigned depth;
		size_t slot_bytes;
		const char *budget;
		size_t budget_bytes;
	} cases[] = {{5, 13 * MiB, "65M", 65 * MiB}, {3, 3 * MiB + 1024, "9219K", 9219 * 1024}, {4, 16 * MiB, "64M", 64 * MiB}};
	void *warm; /* the arena's own metadata is mapped on first use: not the ring's */
	cr_assert_eq(rf_staging_alloc(64, "auto", &warm), RF_OK, "%s", rf_errmsg());
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		setenv("RINGFETCH_MEMORY_BUDGET", cases[i].budget, 1);
		rf__staging_stats s0, s1;
		rf__staging_get_stats(&s0);
		rf_pipeline_params pp = {.depth = cases[i].depth, .slot_bytes = cases[i].slot_bytes, .backend = "cpu"};
		rf_pipeline *p;
		cr_assert_eq(rf_pipeline_create(&pp, &p), RF_OK, "%s", rf_errmsg());
		rf__staging_get_stats(&s1);
		size_t grew = s1.mapped_bytes - s0.mapped_bytes, page = (size_t)sysconf(_SC_PAGESIZE);
		cr_log_info("ring %u x %zu under budget %s: %zu bytes mapped", cases[i].depth, cases[i].slot_bytes,
			    cases[i].budget, grew);
		cr_assert_leq(grew, (cases[i].budget_bytes + page - 1) / page * page, "ring %u x %zu: %zu bytes mapped "
			      "for a budget of %zu", cases[i].depth, cases[i].slot_bytes, grew, cases[i].budget_bytes);
		rf_pipeline_destroy(p);
	}
	unsetenv("RINGFETCH_MEMORY_BUDGET");
	rf_staging_free(warm);
}

/* ---- huge pages ------------------------------------------------------------------------------------ */

static int keep_data(void *user, const rf_block *b)
{
	*(const void **)user = b->data;
	return 0;
}

/* The smaps line `key` of the mapping holding p, as a number; -1 when not found. */
static long smaps_field(const void *p, const char *key)
{
	FILE *f = fopen("/proc/self/smaps", "r");
	cr_assert_not_null(f);
	char line[512];
	int inside = 0;
	long v = -1;
	size_t klen = strlen(key);
	while (v < 0 && fgets(line, sizeof line, f) != NULL) {
		unsigned long lo, hi;
		if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2 && strchr(line, ':') > strchr(line, ' '))
			inside = (uintptr_t)p >= lo && (uintptr_t)p < hi;
		else if (inside && strncmp(line, key, klen) == 0 && line[klen] == ':')
			v = strtol(line + klen + 1, NULL, 10);
	}
	fclose(f);
	return v;
}

/* Where the kernel has transparent huge pages, a ring is a whole number of them and asks for them, so
 * that an O_DIRECT read into a slot is one segment (docs/files.md). */
Test(staging_leak, a_ring_asks_for_huge_pages)
{
	if (rf__staging_ring_len(1, 0) == 1)
		cr_skip_test("this kernel gives no transparent huge pages to mappings that ask (THP \"never\")");
	const void *data = NULL;
	static char src[2][4096];
	const void *srcs[2] = {src[0], src[1]};
	size_t sizes[2] = {4096, 4096};
	rf_pipeline_params pp = {.depth = 2, .slot_bytes = MiB, .backend = "cpu"};
	rf_pipeline *p;
	cr_assert_eq(rf_pipeline_create(&pp, &p), RF_OK, "%s", rf_errmsg());
	cr_assert_eq(rf_pipeline_run(p, 1, srcs, sizes, keep_data, &data), RF_OK, "%s", rf_errmsg());
	long eligible = smaps_field(data, "THPeligible"), huge = smaps_field(data, "AnonHugePages");
	cr_log_info("ring of 2 x 1 MiB: THPeligible %ld, AnonHugePages %ld kB", eligible, huge);
	cr_expect_eq(eligible, 1, "the ring's mapping is not eligible for huge pages");
	cr_expect_eq((uintptr_t)data % rf__staging_ring_len(1, 0), 0, "the ring is not aligned to a huge page");
	rf_pipeline_destroy(p);
}

/* A ring smaller than a huge page takes a whole one, unless that would exceed the memory budget. */
Test(staging_leak, a_small_ring_rounds_up_to_a_huge_page_within_the_budget)
{
	size_t huge = rf__staging_ring_len(1, 0);
	if (huge == 1)
		cr_skip_test("this kernel gives no transparent huge pages to mappings that ask (THP \"never\")");
	void *warm;
	cr_assert_eq(rf_staging_alloc(64, "auto", &warm), RF_OK, "%s", rf_errmsg());
	static const struct {
		const char *budget;
		size_t want;
	} cases[] = {{NULL, 0}, {"1M", 128 << 10}};
	for (size_t i = 0; i < 2; i++) {
		if (cases[i].budget != NULL)
			setenv("RINGFETCH_MEMORY_BUDGET", cases[i].budget, 1);
		else
			unsetenv("RINGFETCH_MEMORY_BUDGET");
		rf__staging_stats s0, s1;
		rf__staging_get_stats(&s0);
		rf_pipeline_params pp = {.depth = 2, .slot_bytes = 64 << 10, .backend = "cpu"};
		rf_pipeline *p;
		cr_assert_eq(rf_pipeline_create(&pp, &p), RF_OK, "%s", rf_errmsg());
		rf__staging_get_stats(&s1);
		size_t grew = s1.mapped_bytes - s0.mapped_bytes, want = cases[i].want ? cases[i].want : huge;
		cr_expect_eq(grew, want, "budget %s: a ring of 2 x 64 KiB mapped %zu bytes, not %zu",
			     cases[i].budget ? cases[i].budget : "none",
			     grew, want);
		rf_pipeline_destroy(p);
	}
	unsetenv("RINGFETCH_MEMORY_BUDGET");
	rf_staging_free(warm);
}
