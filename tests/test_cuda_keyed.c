/* tests/test_cuda_keyed.c — keyed use on cuda, against the simulated CUDA: the caller's stream waits on
 * the copy (RAW) and the next copy into a slot waits on the release (WAR), on the device, with no host
 * wait in acquire or release for sources DMA can read; pageable sources are staged through the pinned
 * ring (a hint by its host lane, an acquire by the caller), and a staged copy's H2D never starts before
 * its stage (negative control: the keyed oracle refuses it), nor a later stage into the pinned slot before
 * an earlier hint's H2D read it, past a withdrawn hint; the legacy default stream (NULL) works; a
 * capturing stream is refused with nothing changed; the library's CUDA calls run in thread-local
 * capture mode; thousands of random serving steps under random device schedules keep every payload. */
#include <criterion/criterion.h>

#include "backends/cuda_api.h"
#include "cuda_sim.h"
#include "ringfetch.h"
#include "runtime/backend.h"
#include "support.h"

#include <stdlib.h>
#include <string.h>
#include <stdatomic.h>
#include <time.h>

static void install(uint64_t seed, double step_prob)
{
	sim_config c = {0};
	c.seed = seed;
	c.step_prob = step_prob;
	c.device_count = 1;
	c.numa_node = -1;
	c.log = 1;
	sim_install(&c);
}

static rf_pipeline *make_hints(unsigned depth, size_t slot, uint64_t hint_bytes)
{
	rf_pipeline_params pp = {0};
	pp.depth = depth;
	pp.hint_bytes = hint_bytes;
	pp.slot_bytes = slot;
	pp.backend = "cuda";
	pp.memory = RF_MEMORY_DEVICE;
	rf_pipeline *p = NULL;
	cr_assert_eq(rf_pipeline_create(&pp, &p), RF_OK, "%s", rf_errmsg());
	return p;
}

static rf_pipeline *make(unsigned depth, size_t slot)
{
	return make_hints(depth, slot, 0);
}

/* A "kernel": a host function on the acquiring stream that checks the slot when the device gets there. */
typedef struct probe {
	const unsigned char *slot, *want;
	size_t n;
	int *bad;
} probe;

static probe g_probes[20000];
static size_t g_np;

static void probe_fn(void *arg)
{
	probe *pr = arg;
	if (memcmp(pr->slot, pr->want, pr->n) != 0)
		(*pr->bad)++;
}

static void use(void *stream, const rf_block *b, const void *want, int *bad)
{
	cr_assert_lt(g_np, sizeof g_probes / sizeof g_probes[0]);
	probe *pr = &g_probes[g_np++];
	*pr = (probe){b->data, want, b->bytes, bad};
	cr_assert_eq(sim_launch(stream, probe_fn, pr), 0);
}

static int log_count(const char *prefix)
{
	size_t n;
	int c = 0;
	const char *const *l = sim_log(&n);
	for (size_t i = 0; i < n; i++)
		c += strncmp(l[i], prefix, strlen(prefix)) == 0;
	return c;
}

Test(cuda_keyed, acquire_and_release_are_stream_ordered_without_host_waits)
{
	install(1, 0);
	rf_pipeline *p = make(2, 4096);
	void *s;
	cr_assert_eq(sim_api.stream_create(&s), 0);
	unsigned char *src[3];
	for (int i = 0; i < 3; i++) {
		src[i] = sim_host_alloc(4096);
		memset(src[i], 'a' + i, 4096);
	}
	int bad = 0;
	g_np = 0;
	sim_log_clear();
	rf_block b0, b1, b2;
	cr_assert_eq(rf_pipeline_acquire(p, 10, src[0], 4096, s, 0, &b0), RF_OK, "%s", rf_errmsg());
	use(s, &b0, src[0], &bad);
	cr_assert_eq(rf_pipeline_acquire(p, 11, src[1], 4096, s, 0, &b1), RF_OK, "%s", rf_errmsg());
	use(s, &b1, src[1], &bad);
	cr_assert_eq(rf_pipeline_release(p, &b0), RF_OK, "%s", rf_errmsg());
	cr_assert_eq(rf_pipeline_release(p, &b1), RF_OK, "%s", rf_errmsg());
	/* key 12 evicts the least recently used (10): its copy must wait for the release on s. */
	cr_assert_eq(rf_pipeline_acquire(p, 12, src[2], 4096, s, 0, &b2), RF_OK, "%s", rf_errmsg());
	cr_assert_eq(b2.slot, b0.slot);
	use(s, &b2, src[2], &bad);
	cr_assert_eq(rf_pipeline_release(p, &b2), RF_OK, "%s", rf_errmsg());
	/* lookup (any thread; here one without a context) leaves the thread without one */
	sim_set_no_context();
	rf_key_state st;
	cr_assert_eq(rf_pipeline_lookup(p, 12, &st, NULL), RF_OK);
	cr_assert_eq(sim_current_device(), -1, "lookup left device %d current", sim_current_device());
	cr_assert_eq(log_count("sync"), 0, "acquire/release waited on the host");
	cr_assert_eq(log_count("event_sync"), 0, "acquire/release waited on the host");
	cr_assert_eq(sim_capture_mode_balance(), 0);
	cr_assert_eq(sim_api.stream_synchronize(s), 0);
	cr_assert_eq(bad, 0, "%d reads saw the wrong bytes", bad);
	/* Destroy with a block held: the device is synchronised before the ring goes (DESIGN.md). */
	rf_block h;
	cr_assert_eq(rf_pipeline_acquire(p, 11, src[1], 4096, s, 0, &h), RF_OK, "%s", rf_errmsg());
	use(s, &h, src[1], &bad);
	long syncs = sim_device_syncs();
	rf_pipeline_destroy(p);
	cr_assert_gt(sim_device_syncs(), syncs, "destroy with a block held did not synchronise the device");
	cr_assert_eq(bad, 0);
	cr_assert_eq(sim_api.stream_destroy(s), 0);
	for (int i = 0; i < 3; i++)
		sim_host_free(src[i]);
	leak_check();
}

Test(cuda_keyed, legacy_default_stream_and_capture_refusal)
{
	install(2, 0.3);
	rf_pipeline *p = make(2, 256);
	unsigned char *a = sim_host_alloc(256);
	memset(a, 7, 256);
	rf_block b;
	int bad = 0;
	g_np = 0;
	cr_assert_eq(rf_pipeline_acquire(p, 1, a, 256, NULL, 0, &b), RF_OK, "%s", rf_errmsg());
	use(NULL, &b, a, &bad);
	cr_assert_eq(rf_pipeline_release(p, &b), RF_OK, "%s", rf_errmsg());
	void *s;
	cr_assert_eq(sim_api.stream_create(&s), 0);
	sim_set_capturing(s, 1);
	rf_keyed_stats before, after;
	cr_assert_eq(rf_pipeline_keyed_stats(p, &before), RF_OK);
	cr_assert_eq(rf_pipeline_acquire(p, 2, a, 256, s, 0, &b), RF_ENOTSUP, "%s", rf_errmsg());
	cr_assert(strstr(rf_errmsg(), "captured") != NULL, "%s", rf_errmsg());
	cr_assert_eq(rf_pipeline_keyed_stats(p, &after), RF_OK);
	cr_assert_eq(memcmp(&before, &after, sizeof before), 0, "a refused acquire changed the stats");
	/* A hit whose copy finished needs no CUDA call on the stream: allowed. Its release would record
	 * an event on the capturing stream: refused until the capture ends. */
	cr_assert_eq(sim_api.stream_synchronize(NULL), 0);
	cr_assert_eq(sim_api.event_query != NULL, 1);
	cr_assert_eq(rf_pipeline_acquire(p, 1, a, 256, s, 0, &b), RF_OK, "%s", rf_errmsg());
	cr_assert_eq(rf_pipeline_release(p, &b), RF_ENOTSUP, "%s", rf_errmsg());
	sim_set_capturing(s, 0);
	cr_assert_eq(rf_pipeline_release(p, &b), RF_OK, "%s", rf_errmsg());
	cr_assert_eq(sim_capture_mode_balance(), 0);
	cr_assert_eq(sim_api.stream_synchronize(NULL), 0);
	cr_assert_eq(bad, 0);
	rf_pipeline_destroy(p);
	cr_assert_eq(sim_api.stream_destroy(s), 0);
	sim_host_free(a);
	leak_check();
}

/* Random serving steps: prefetches, acquires on two streams (one of them NULL), releases, evictions,
 * runs in between; every read checked in stream order; random device schedules. */
Test(cuda_keyed, random_serving_keeps_every_payload, .timeout = 120)
{
	uint64_t seed = test_seed(), rng = seed;
	fprintf(stderr, "cuda keyed: RF_TEST_SEED=%llu\n", (unsigned long long)seed);
	for (int round = 0; round < 40; round++) {
		install(rng_next(&rng) | 1, (double)(rng_next(&rng) % 100) / 100.0);
		sim_cfg()->log = 0;
		sim_cfg()->query_idle = (int)(rng_next(&rng) % 2);
		unsigned depth = 2 + (unsigned)(rng_next(&rng) % 4);
		size_t slot = 64;
		rf_pipeline *p = make(depth, slot);
		enum { NKEYS = 12 };
		unsigned char *src[NKEYS];
		for (int i = 0; i < NKEYS; i++) {
			src[i] = rng_next(&rng) % 2 ? sim_host_alloc(slot) : malloc(slot);
			fill_pattern(src[i], slot, (size_t)i, seed);
		}
		void *streams[2] = {NULL, NULL};
		cr_assert_eq(sim_api.stream_create(&streams[1]), 0);
		rf_block held[8];
		int nheld = 0, bad = 0;
		g_np = 0;
		for (int step = 0; step < 300; step++) {
			unsigned key = (unsigned)(rng_next(&rng) % NKEYS);
			unsigned op = (unsigned)(rng_next(&rng) % 10);
			if (op < 3) {
				int rc = rf_pipeline_prefetch(p, key, src[key], slot, 0);
				cr_assert(rc == RF_OK || rc == RF_ENOSPC, "prefetch: %s", rf_errmsg());
			} else if (op < 7 && nheld < (int)depth - 1 && nheld < 8) {
				void *s = streams[rng_next(&rng) % 2];
				int rc = rf_pipeline_acquire(p, key, src[key], slot, s, 0, &held[nheld]);
				cr_assert(rc == RF_OK || rc == RF_ENOSPC, "acquire: %s", rf_errmsg());
				if (rc == RF_OK) {
					use(s, &held[nheld], src[key], &bad);
					held[nheld++].stream = s;
				}
			} else if (op < 9 && nheld > 0) {
				int i = (int)(rng_next(&rng) % (unsigned)nheld);
				cr_assert_eq(rf_pipeline_release(p, &held[i]), RF_OK, "%s", rf_errmsg());
				held[i] = held[--nheld];
			} else if (nheld == 0 && g_np < 19000) {
				int rc = rf_pipeline_evict(p, key);
				cr_assert_eq(rc, RF_OK, "evict: %s", rf_errmsg());
			}
		}
		while (nheld > 0)
			cr_assert_eq(rf_pipeline_release(p, &held[--nheld]), RF_OK, "%s", rf_errmsg());
		rf_pipeline_destroy(p);
		cr_assert_eq(sim_api.stream_synchronize(NULL), 0);
		cr_assert_eq(sim_api.stream_synchronize(streams[1]), 0);
		cr_assert_eq(bad, 0, "round %d: %d reads saw the wrong bytes", round, bad);
		cr_assert_eq(sim_capture_mode_balance(), 0);
		cr_assert_eq(sim_api.stream_destroy(streams[1]), 0);
		for (int i = 0; i < NKEYS; i++)
			if (sim_is_pinned(src[i], 1))
				sim_host_free(src[i]);
			else
				free(src[i]);
	}
	leak_check();
}

static atomic_int g_staging;

static void slow_stage(int started)
{
	struct timespec t = {0, 20000000};
	if (started) {
		atomic_store(&g_staging, 1);
		nanosleep(&t, NULL);
	}
}

static void mark_stage(int started)
{
	if (started)
		atomic_store(&g_staging, 1);
}

/* Pageable sources: a hint is staged by the key's host lane and its H2D issued by the next keyed call
 * that finds the stage done; an acquire of another pageable key stages it on the caller. Both payloads
 * are right where a kernel on the acquiring stream reads them, and the stream synchronisations are
 * the test's own: the keyed calls wait only for stages, on the host. */
Test(cuda_keyed, pageable_sources_are_staged_through_the_pinned_ring)
{
	install(3, 0.5);
	rf_pipeline *p = make(3, 4096);
	void *s;
	cr_assert_eq(sim_api.stream_create(&s), 0);
	unsigned char *a = malloc(4096), *b = malloc(4096);
	memset(a, 'a', 4096);
	memset(b, 'b', 4096);
	int bad = 0;
	g_np = 0;
	sim_log_clear();
	atomic_store(&g_staging, 0);
	rf__test_hooks.keyed_before_copy = mark_stage;
	cr_assert_eq(rf_pipeline_prefetch(p, 1, a, 4096, 0), RF_OK, "%s", rf_errmsg());
	while (!atomic_load(&g_staging)) /* the lane has started the stage: the hint cannot be withdrawn */
		;
	rf__test_hooks.keyed_before_copy = NULL;
	rf_block ba, bb;
	cr_assert_eq(rf_pipeline_acquire(p, 2, b, 4096, s, 0, &bb), RF_OK, "%s", rf_errmsg());
	use(s, &bb, b, &bad);
	cr_assert_eq(rf_pipeline_acquire(p, 1, a, 4096, s, 0, &ba), RF_OK, "%s", rf_errmsg());
	use(s, &ba, a, &bad);
	rf_keyed_stats st;
	cr_assert_eq(rf_pipeline_keyed_stats(p, &st), RF_OK);
	cr_assert_eq(st.hits, 1, "the hint's key was a hit");
	cr_assert_eq(st.bytes_copied, 2 * 4096);
	cr_assert_eq(log_count("sync"), 0, "a keyed call synchronised a stream");
	size_t n;
	const char *const *l = sim_log(&n);
	int from_pinned = 0;
	for (size_t i = 0; i < n; i++)
		from_pinned += strncmp(l[i], "memcpy", 6) == 0 && strstr(l[i], "<- r") != NULL;
	cr_assert_eq(from_pinned, 2, "both H2Ds read the pinned ring");
	cr_assert_eq(rf_pipeline_release(p, &ba), RF_OK, "%s", rf_errmsg());
	cr_assert_eq(rf_pipeline_release(p, &bb), RF_OK, "%s", rf_errmsg());
	cr_assert_eq(sim_api.stream_synchronize(s), 0);
	cr_assert_eq(bad, 0, "%d reads saw the wrong bytes", bad);
	cr_assert_eq(sim_capture_mode_balance(), 0);
	rf_pipeline_destroy(p);
	cr_assert_eq(sim_api.stream_destroy(s), 0);
	free(a);
	free(b);
	leak_check();
}


/* The lane's second stage holds it until the test opens the gate (its first one ran whole). */
static atomic_int g_gate_calls, g_gate_open;

static void gate_second_stage(int started)
{
	if (!started || atomic_fetch_add(&g_gate_calls, 1) != 1)
		return;
	atomic_store(&g_staging, 1);
	struct timespec t = {0, 100000};
	while (!atomic_load(&g_gate_open))
		nanosleep(&t, NULL);
}

/* A hint withdrawn before its stage gives its pinned slot back to the slot's previous reader: the next
 * stage there waits for that reader's H2D, not for the withdrawn hint's event (never recorded). Two
 * pinned slots for hints: A's H2D from slot 1 stays pending (the device runs nothing until a wait);
 * Z holds the lane in slot 2; B takes slot 1 after A and is withdrawn; C then takes slot 1, and its
 * stage must not overwrite it before A's H2D has read it. */
Test(cuda_keyed, a_withdrawn_hint_leaves_its_pinned_slot_to_the_previous_reader)
{
	install(11, 0);
	sim_cfg()->query_idle = 1; /* A's H2D stays pending until a synchronisation */
	rf_pipeline *p = make(3, 4096); /* three pinned slots: one for acquires, two for hints */
	void *s;
	cr_assert_eq(sim_api.stream_create(&s), 0);
	unsigned char *src[4]; /* A, Z, B, C: pageable, so staged */
	for (int i = 0; i < 4; i++) {
		src[i] = malloc(4096);
		memset(src[i], 'A' + i, 4096);
	}
	int bad = 0;
	g_np = 0;
	atomic_store(&g_staging, 0);
	atomic_store(&g_gate_calls, 0);
	atomic_store(&g_gate_open, 0);
	rf__test_hooks.keyed_before_copy = gate_second_stage;
	cr_assert_eq(rf_pipeline_prefetch(p, 0, src[0], 4096, 0), RF_OK, "%s", rf_errmsg());
	cr_assert_eq(rf_pipeline_prefetch(p, 1, src[1], 4096, 0), RF_OK, "%s", rf_errmsg());
	struct timespec t = {0, 100000};
	while (!atomic_load(&g_staging)) /* Z's stage began: A's ran whole, its H2D enqueued */
		nanosleep(&t, NULL);
	cr_assert_eq(rf_pipeline_prefetch(p, 2, src[2], 4096, 0), RF_OK, "%s", rf_errmsg());
	cr_assert_eq(rf_pipeline_unprefetch(p, 2), RF_OK, "%s", rf_errmsg());
	rf_key_state st;
	cr_assert_eq(rf_pipeline_lookup(p, 2, &st, NULL), RF_OK);
	cr_assert_eq(st, RF_KEY_ABSENT, "B was withdrawn before its stage");
	cr_assert_eq(rf_pipeline_prefetch(p, 3, src[3], 4096, 0), RF_OK, "%s", rf_errmsg());
	long h2ds = sim_memcpys();
	atomic_store(&g_gate_open, 1);
	while (sim_memcpys() < h2ds + 2) /* Z's and C's H2Ds enqueued, so C's stage is done: no call steps the device */
		nanosleep(&t, NULL);
	rf_block b[3];
	const int keys[3] = {0, 1, 3};
	for (int i = 0; i < 3; i++) {
		cr_assert_eq(rf_pipeline_acquire(p, (uint64_t)keys[i], src[keys[i]], 4096, s, 0, &b[i]), RF_OK, "%s",
			     rf_errmsg());
		use(s, &b[i], src[keys[i]], &bad);
	}
	rf__test_hooks.keyed_before_copy = NULL;
	rf_keyed_stats ks;
	cr_assert_eq(rf_pipeline_keyed_stats(p, &ks), RF_OK);
	cr_assert_eq(ks.hits, 3, "A, Z and C were hits");
	cr_assert_eq(ks.dropped, 1, "B was dropped");
	for (int i = 0; i < 3; i++)
		cr_assert_eq(rf_pipeline_release(p, &b[i]), RF_OK, "%s", rf_errmsg());
	cr_assert_eq(sim_api.stream_synchronize(s), 0);
	cr_assert_eq(bad, 0, "%d reads saw the wrong bytes (C's stage overwrote A's pinned slot)", bad);
	rf_pipeline_destroy(p);
	cr_assert_eq(sim_api.stream_destroy(s), 0);
	for (int i = 0; i < 4; i++)
		free(src[i]);
	leak_check();
}


/* Every keyed copy, DMA or staged, hint or miss, is one slice of the trace (the enqueue of its H2D):
 * 12 hints acquired and 12 misses, 24 slices once the pipeline is destroyed. */
Test(cuda_keyed, every_keyed_copy_is_a_slice_of_the_trace)
{
	install(5, 0.5);
	char path[96];
	snprintf(path, sizeof path, "/tmp/rf_test_cuda_keyed_trace_%ld.json", (long)getpid());
	unlink(path);
	rf_pipeline *p = make(4, 4096);
	cr_assert_eq(rf_pipeline_trace(p, path), RF_OK, "%s", rf_errmsg());
	void *s;
	cr_assert_eq(sim_api.stream_create(&s), 0);
	unsigned char *pinned = sim_host_alloc(24 * 4096), *pageable = malloc(24 * 4096);
	for (unsigned i = 0; i < 24 * 4096; i++)
		pinned[i] = pageable[i] = (unsigned char)(i / 4096 * 7 + 1);
	int bad = 0;
	g_np = 0;
	for (unsigned i = 0; i < 12; i++) {
		const unsigned char *src = (i % 2 ? pageable : pinned) + (size_t)i * 4096;
		const unsigned char *miss = (i % 2 ? pinned : pageable) + (size_t)(12 + i) * 4096;
		rf_block h, m;
		cr_assert_eq(rf_pipeline_prefetch(p, 100 + i, src, 4096, 0), RF_OK, "%s", rf_errmsg());
		cr_assert_eq(rf_pipeline_acquire(p, 100 + i, src, 4096, s, 0, &h), RF_OK, "%s", rf_errmsg());
		cr_assert_eq(rf_pipeline_acquire(p, i, miss, 4096, s, 0, &m), RF_OK, "%s", rf_errmsg());
		use(s, &h, src, &bad);
		use(s, &m, miss, &bad);
		cr_assert_eq(rf_pipeline_release(p, &h), RF_OK, "%s", rf_errmsg());
		cr_assert_eq(rf_pipeline_release(p, &m), RF_OK, "%s", rf_errmsg());
	}
	rf_keyed_stats st;
	cr_assert_eq(rf_pipeline_keyed_stats(p, &st), RF_OK);
	cr_assert_eq(st.bytes_copied, 24 * 4096, "24 keyed copies");
	cr_assert_eq(sim_api.stream_synchronize(s), 0);
	cr_assert_eq(bad, 0, "%d reads saw the wrong bytes", bad);
	rf_pipeline_destroy(p);
	cr_assert_eq(count_in_file(path, "\"args\":{\"key\":"), 24, "one slice per keyed copy");
	unlink(path);
	cr_assert_eq(sim_api.stream_destroy(s), 0);
	sim_host_free(pinned);
	free(pageable);
	leak_check();
}

/* Negative control: a staged hint's H2D issued without waiting for its stage (the keyed copy's RAW on
 * its pinned slot) is refused by the keyed oracle (RINGFETCH_ORACLE=1) — not left to a corrupted
 * payload. */
Test(cuda_keyed, negative_control_without_the_stage_wait_is_caught_by_the_oracle)
{
	setenv("RINGFETCH_ORACLE", "1", 1);
	install(4, 0);
	rf_pipeline *p = make(2, 4096);
	unsigned char *a = malloc(4096);
	memset(a, 'x', 4096);
	rf__test_hooks.keyed_before_copy = slow_stage;
	rf__test_hooks.drop_keyed_stage_wait = 1;
	rf_block b;
	cr_assert_eq(rf_pipeline_prefetch(p, 1, a, 4096, 0), RF_OK, "%s", rf_errmsg());
	while (!atomic_load(&g_staging)) /* the lane has started the stage: the hint cannot be withdrawn */
		;
	cr_assert_eq(rf_pipeline_acquire(p, 1, a, 4096, NULL, 0, &b), RF_EHAZARD, "%s", rf_errmsg());
	cr_assert(strstr(rf_errmsg(), "keyed oracle: RAW") != NULL, "%s", rf_errmsg());
	rf__test_hooks.drop_keyed_stage_wait = 0;
	/* the same with the wait: the oracle finds the bytes there */
	cr_assert_eq(rf_pipeline_prefetch(p, 2, a, 4096, 0), RF_OK, "%s", rf_errmsg());
	cr_assert_eq(rf_pipeline_acquire(p, 2, a, 4096, NULL, 0, &b), RF_OK, "%s", rf_errmsg());
	cr_assert_eq(rf_pipeline_release(p, &b), RF_OK, "%s", rf_errmsg());
	rf__test_hooks.keyed_before_copy = NULL;
	rf_pipeline_destroy(p);
	free(a);
	leak_check();
}

/* With 40 hint copies pending on the device, an acquire's copy waits for none of them: it goes on a
 * demand stream of its own, and neither it nor the acquiring stream waits on an event that a hint
 * stream recorded. Then the slot choice: a miss takes the oldest unacquired hint's slot. */
Test(cuda_keyed, an_acquire_never_waits_behind_hints)
{
	install(7, 0); /* the device runs nothing until a synchronisation: every hint copy stays pending */
	rf_pipeline *p = make_hints(48, 4096, 48 * 4096); /* room for every hint */
	void *s;
	cr_assert_eq(sim_api.stream_create(&s), 0);
	enum { NH = 40 };
	unsigned char *src[NH + 1];
	for (int i = 0; i <= NH; i++) {
		src[i] = sim_host_alloc(4096);
		memset(src[i], 'a' + i, 4096);
	}
	rf_block old; /* an acquired block used before every hint: the least recently used slot */
	cr_assert_eq(rf_pipeline_acquire(p, 98, src[NH], 4096, s, 0, &old), RF_OK, "%s", rf_errmsg());
	cr_assert_eq(rf_pipeline_release(p, &old), RF_OK);
	sim_log_clear();
	for (int k = 0; k < NH; k++)
		cr_assert_eq(rf_pipeline_prefetch(p, (uint64_t)k, src[k], 4096, 0), RF_OK, "%s", rf_errmsg());
	size_t nhint;
	sim_log(&nhint);
	rf_block b;
	cr_assert_eq(rf_pipeline_acquire(p, 99, src[NH], 4096, s, 0, &b), RF_OK, "%s", rf_errmsg());
	size_t n;
	const char *const *l = sim_log(&n);
	int rec_stream[4096], hint_stream[64] = {0}, demand = -1, caller = sim_stream_id(s), copies = 0;
	for (size_t i = 0; i < sizeof rec_stream / sizeof rec_stream[0]; i++)
		rec_stream[i] = -1;
	for (size_t i = 0; i < n; i++) {
		int st, ev, h;
		if (sscanf(l[i], " record s%d e%d", &st, &ev) == 2 && ev >= 0 && ev < 4096)
			rec_stream[ev] = st;
		if (sscanf(l[i], " memcpy s%d d%*d+%*d <- h%d", &st, &h) == 2 && st >= 0 && st < 64) {
			if (i < nhint)
				hint_stream[st] = 1, copies++;
			else if (h == NH)
				demand = st;
		}
	}
	cr_assert_gt(copies, 0, "no hint copy was enqueued");
	cr_assert_geq(demand, 0, "the acquire's copy is not in the log");
	cr_assert_eq(hint_stream[demand], 0, "the acquire's copy went on hint stream s%d", demand);
	for (size_t i = nhint; i < n; i++) {
		int st, ev;
		if (sscanf(l[i], " wait s%d e%d", &st, &ev) == 2 && (st == demand || st == caller) && ev >= 0 &&
		    ev < 4096 && rec_stream[ev] >= 0 && rec_stream[ev] < 64)
			cr_assert_eq(hint_stream[rec_stream[ev]], 0, "s%d waits on e%d of hint stream s%d: %s", st, ev,
				     rec_stream[ev], l[i]);
	}
	rf_keyed_stats ks;
	cr_assert_eq(rf_pipeline_keyed_stats(p, &ks), RF_OK);
	cr_assert_eq(ks.hits, 0);
	/* The slot choice: every hint copy still pending, the miss took an empty slot; with them landed
	 * (synchronised) and no slot empty, a miss takes the oldest unacquired hint's slot. */
	cr_assert_eq(sim_api.stream_synchronize(s), 0);
	cr_assert_eq(rf_pipeline_release(p, &b), RF_OK);
	rf_block c;
	for (uint64_t k = 100; k < 100 + 48 - NH - 2; k++) { /* the empty slots */
		cr_assert_eq(rf_pipeline_acquire(p, k, src[NH], 4096, s, 0, &c), RF_OK, "%s", rf_errmsg());
		cr_assert_eq(rf_pipeline_release(p, &c), RF_OK);
	}
	cr_assert_eq(sim_api.device_synchronize(), 0);
	unsigned slot0 = 99;
	rf_key_state st0;
	cr_assert_eq(rf_pipeline_lookup(p, 0, &st0, &slot0), RF_OK);
	cr_assert_eq(st0, RF_KEY_READY);
	cr_assert_eq(rf_pipeline_acquire(p, 200, src[NH], 4096, s, 0, &c), RF_OK, "%s", rf_errmsg());
	cr_assert_eq(c.slot, slot0, "the miss took slot %u, not the oldest unacquired hint's (%u)", c.slot, slot0);
	cr_assert_eq(rf_pipeline_lookup(p, 98, &st0, NULL), RF_OK);
	cr_assert_eq(st0, RF_KEY_READY, "the least recently used acquired block was evicted before the hints");
	cr_assert_eq(rf_pipeline_release(p, &c), RF_OK);
	cr_assert_eq(sim_api.stream_synchronize(s), 0);
	rf_pipeline_destroy(p);
	cr_assert_eq(sim_api.stream_destroy(s), 0);
	for (int i = 0; i <= NH; i++)
		sim_host_free(src[i]);
	leak_check();
}
