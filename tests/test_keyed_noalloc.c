/* tests/test_keyed_noalloc.c — keyed calls allocate nothing after create (ringfetch.h: "no keyed call
 * allocates memory after create"): random prefetch / acquire / release / evict / lookup / keyed_stats
 * sequences, failures included, and runs in between, under an interposed allocator (the same
 * interposition as tests/test_noalloc.c, tests/alloc_count.h: the executable's malloc family comes first in symbol
 * resolution, for the shared library too). Not built under sanitizers. Public headers only. */
#include "support.h"

#include <criterion/criterion.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "alloc_count.h"

static int nop_cb(void *user, const rf_block *b)
{
	(void)user, (void)b;
	return 0;
}

Test(keyed_noalloc, keyed_calls_allocate_nothing)
{
	enum { SZ = 1024, NK = 24 };
	static unsigned char pool[NK][SZ];
	for (size_t i = 0; i < sizeof pool; i++)
		((unsigned char *)pool)[i] = (unsigned char)(i * 13);
	for (unsigned depth = 1; depth <= 6; depth++) {
		rf_pipeline_params pp = {.depth = depth, .slot_bytes = SZ, .backend = test_backend()};
		rf_pipeline *p;
		cr_assert_eq(rf_pipeline_create(&pp, &p), RF_OK, "%s", rf_errmsg());
		const void *srcs[2] = {pool[0], pool[1]};
		size_t sizes[2] = {SZ, SZ};
		cr_assert_eq(rf_pipeline_run(p, 2, srcs, sizes, nop_cb, NULL), RF_OK); /* warm up */
		rf_block held[8];
		unsigned nheld = 0;
		uint64_t s = test_seed();
		atomic_store(&calls, 0);
		atomic_store(&counting, 1);
		for (int step = 0; step < 3000; step++) {
			uint64_t k = rng_next(&s) % NK, r = rng_next(&s) % 100;
			rf_block b;
			rf_key_state st;
			rf_keyed_stats ks;
			if (r < 35 && nheld < 8 && rf_pipeline_acquire(p, k, pool[k], SZ, NULL, 0, &b) == RF_OK)
				held[nheld++] = b;
			else if (r < 65 && nheld > 0)
				rf_pipeline_release(p, &held[--nheld]);
			else if (r < 85)
				rf_pipeline_prefetch(p, k, pool[k], SZ, 0);
			else if (r < 92)
				rf_pipeline_evict(p, k);
			else if (r < 97)
				rf_pipeline_lookup(p, k, &st, NULL), rf_pipeline_keyed_stats(p, &ks);
			else if (nheld == 0)
				rf_pipeline_run(p, 2, srcs, sizes, nop_cb, NULL);
		}
		atomic_store(&counting, 0);
		cr_assert_eq(atomic_load(&calls), 0, "backend %s, depth %u: %ld allocator calls in keyed use",
			     test_backend(), depth, atomic_load(&calls));
		rf_pipeline_destroy(p);
	}
}

/* Recording a keyed trace allocates only when it starts: every keyed call, the buffer's writes
 * (2048 records a write) and a run's reset record included, allocates nothing. */
Test(keyed_noalloc, traced_keyed_calls_allocate_nothing)
{
	enum { SZ = 1024, NK = 24 };
	static unsigned char pool[NK][SZ];
	char path[] = "/tmp/rf-noalloc-trace-XXXXXX";
	int fd = mkstemp(path);
	cr_assert(fd >= 0);
	close(fd);
	rf_pipeline_params pp = {.depth = 4, .slot_bytes = SZ, .backend = test_backend()};
	rf_pipeline *p;
	cr_assert_eq(rf_pipeline_create(&pp, &p), RF_OK, "%s", rf_errmsg());
	const void *srcs[2] = {pool[0], pool[1]};
	size_t sizes[2] = {SZ, SZ};
	cr_assert_eq(rf_pipeline_run(p, 2, srcs, sizes, nop_cb, NULL), RF_OK);
	cr_assert_eq(rf_pipeline_keyed_trace(p, path, 0), RF_OK, "%s", rf_errmsg());
	rf_block held[4];
	unsigned nheld = 0;
	uint64_t s = test_seed();
	atomic_store(&calls, 0);
	atomic_store(&counting, 1);
	for (int step = 0; step < 10000; step++) { /* several buffers' worth of records */
		uint64_t k = rng_next(&s) % NK, r = rng_next(&s) % 100;
		rf_block b;
		if (r < 40 && nheld < 4 && rf_pipeline_acquire(p, k, pool[k], SZ, NULL, 0, &b) == RF_OK)
			held[nheld++] = b;
		else if (r < 75 && nheld > 0)
			rf_pipeline_release(p, &held[--nheld]);
		else if (r < 92)
			rf_pipeline_prefetch(p, k, pool[k], SZ, 0);
		else if (r < 98)
			rf_pipeline_evict(p, k);
		else if (nheld == 0)
			rf_pipeline_run(p, 2, srcs, sizes, nop_cb, NULL);
	}
	atomic_store(&counting, 0);
	cr_assert_eq(atomic_load(&calls), 0, "backend %s: %ld allocator calls in traced keyed use", test_backend(),
		     atomic_load(&calls));
	while (nheld > 0)
		rf_pipeline_release(p, &held[--nheld]);
	cr_assert_eq(rf_pipeline_keyed_trace(p, NULL, 0), RF_OK, "%s", rf_errmsg());
	rf_pipeline_destroy(p);
	unlink(path);
}
