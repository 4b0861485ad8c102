/*
 * tests/test_staging_topology.c — staging memory with hwloc topologies that do not describe "this
 * system": HWLOC_XMLFILE (this machine's own topology, exported: common on HPC clusters), HWLOC_THISSYSTEM=0
 * and HWLOC_SYNTHETIC. hwloc then allocates with malloc and hwloc_free is free(), and the staging hooks
 * used to trim a mapping's head and tail with hwloc_free: the block was freed under them and the touch
 * that followed wrote freed memory (ASan: heap-use-after-free in the first touch), in rf_pipeline_create
 * and rf_staging_alloc alike. Now: no crash, and memory is bound when hwloc can bind (HWLOC_THISSYSTEM=1
 * with the XML), otherwise unbound with a placement that says why.
 *
 * The variables must be set before the process's topology is first loaded: Criterion runs every test in
 * a process of its own, and each test sets them first.
 */
#include <criterion/criterion.h>
#include <hwloc.h>
#include <ringfetch.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

TestSuite(staging_topology, .timeout = 120);

static char g_xml[64];

static void remove_xml(void)
{
	if (g_xml[0] != '\0')
		remove(g_xml);
}

/* This machine's topology, exported to XML the way a cluster's admin would (lstopo foo.xml). */
static const char *export_own_topology(void)
{
	hwloc_topology_t t;
	cr_assert_eq(hwloc_topology_init(&t), 0);
	cr_assert_eq(hwloc_topology_load(t), 0);
	snprintf(g_xml, sizeof g_xml, "/tmp/rf-topo-%ld.xml", (long)getpid());
	cr_assert_eq(hwloc_topology_export_xml(t, g_xml, 0), 0);
	hwloc_topology_destroy(t);
	atexit(remove_xml);
	return g_xml;
}

static int check_sum(void *user, const rf_block *b)
{
	const unsigned char *d = b->data;
	for (size_t i = 0; i < b->bytes; i++)
		*(size_t *)user += d[i];
	return 0;
}

/* The placement is truthful: bound, or unbound with a reason; and when the topology is not this system's,
 * the reason says so. */
static void check_placement(const rf_placement *pl, int expect_not_this_system)
{
	cr_assert_not_null(pl->reason);
	if (pl->bound) {
		cr_assert(!expect_not_this_system, "bound memory from a topology that is not this system's");
		cr_assert_str_eq(pl->reason, "");
		return;
	}
	cr_assert_neq(pl->reason[0], '\0', "unbound memory must say why");
	if (expect_not_this_system)
		cr_assert(strstr(pl->reason, "does not describe this system") != NULL ||
			  strstr(pl->reason, "unknown") != NULL, "%s", pl->reason);
}

/* Blocks of every path (carved by jemalloc, mapped on their own), written whole, placed truthfully. */
static void staging_allocs(const char *policy, int not_this_system)
{
	static const size_t sizes[] = {1, 64, 4095, 4096, 100000, 1 << 20, 16 << 20, (64 << 20) + 3};
	for (int round = 0; round < 3; round++)
		for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
			unsigned char *p = NULL;
			cr_assert_eq(rf_staging_alloc(sizes[i], policy, (void **)&p), RF_OK, "%zu bytes, %s: %s", sizes[i],
				     policy ? policy : "auto", rf_errmsg());
			memset(p, 0xa5, sizes[i]);
			rf_placement pl;
			cr_assert_eq(rf_staging_placement(p + sizes[i] - 1, &pl), RF_OK, "%s", rf_errmsg());
			check_placement(&pl, not_this_system);
			rf_staging_free(p);
		}
}

/* cpu and threads pipelines create, run and destroy (or fail cleanly: never crash). */
static void pipelines(int not_this_system)
{
	static const char *const backends[] = {"cpu", "threads"};
	static unsigned char src[8][8192];
	const void *srcs[8];
	size_t sizes[8];
	for (int i = 0; i < 8; i++) {
		memset(src[i], 1, sizeof src[i]);
		srcs[i] = src[i];
		sizes[i] = sizeof src[i];
	}
	for (size_t b = 0; b < 2; b++) {
		rf_pipeline_params pp = {.depth = 3, .slot_bytes = 16 << 20, .backend = backends[b]};
		rf_pipeline *p;
		cr_assert_eq(rf_pipeline_create(&pp, &p), RF_OK, "%s: %s", backends[b], rf_errmsg());
		rf_placement pl;
		cr_assert_eq(rf_pipeline_placement(p, &pl), RF_OK);
		check_placement(&pl, not_this_system);
		size_t sum = 0;
		cr_assert_eq(rf_pipeline_run(p, 8, srcs, sizes, check_sum, &sum), RF_OK, "%s", rf_errmsg());
		cr_assert_eq(sum, 8 * 8192u);
		rf_pipeline_destroy(p);
	}
}

/* The first NUMA node of the machine, by the test's own (real) topology, as "node:N". */
static const char *first_node_policy(void)
{
	static char policy[32];
	hwloc_topology_t t;
	cr_assert_eq(hwloc_topology_init(&t), 0);
	cr_assert_eq(hwloc_topology_load(t), 0);
	snprintf(policy, sizeof policy, "node:%d", hwloc_bitmap_first(hwloc_topology_get_allowed_nodeset(t)));
	hwloc_topology_destroy(t);
	return policy;
}

Test(staging_topology, xml_file_of_this_machine)
{
	const char *policy = first_node_policy();
	setenv("HWLOC_XMLFILE", export_own_topology(), 1);
	staging_allocs(NULL, 1);
	staging_allocs(policy, 1);
	staging_allocs("interleave", 1);
	staging_allocs("none", 0);
	pipelines(1);
}

Test(staging_topology, xml_file_declared_this_system_binds)
{
	/* HWLOC_THISSYSTEM=1 asserts that the XML is this machine: hwloc binds again, and so do we (unless
	 * the kernel refuses, which the placement then says). */
	const char *policy = first_node_policy();
	setenv("HWLOC_XMLFILE", export_own_topology(), 1);
	setenv("HWLOC_THISSYSTEM", "1", 1);
	staging_allocs(policy, 0);
	void *p;
	cr_assert_eq(rf_staging_alloc(8 << 20, policy, &p), RF_OK, "%s", rf_errmsg());
	rf_placement pl;
	cr_assert_eq(rf_staging_placement(p, &pl), RF_OK);
	cr_assert(pl.bound || strstr(pl.reason, "refused") != NULL || strstr(pl.reason, "unavailable") != NULL,
		  "neither bound nor refused by the kernel: %s", pl.reason);
	cr_log_info("HWLOC_XMLFILE + HWLOC_THISSYSTEM=1, %s: bound %d (%s)", policy, pl.bound, pl.reason);
	rf_staging_free(p);
	pipelines(0);
}

Test(staging_topology, thissystem_0)
{
	setenv("HWLOC_THISSYSTEM", "0", 1);
	staging_allocs(NULL, 1);
	staging_allocs(first_node_policy(), 1);
	staging_allocs("interleave", 1);
	pipelines(1);
}

Test(staging_topology, synthetic)
{
	setenv("HWLOC_SYNTHETIC", "pack:2 numa:2 core:2 pu:1", 1);
	staging_allocs(NULL, 1);
	staging_allocs("node:3", 1); /* a node of the synthetic machine */
	staging_allocs("interleave", 1);
	void *p = NULL;
	cr_assert_eq(rf_staging_alloc(4096, "node:4", &p), RF_EINVAL, "no node 4 in the synthetic topology");
	cr_assert_null(p);
	pipelines(1);
}
