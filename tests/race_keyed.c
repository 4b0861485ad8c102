/* tests/race_keyed.c — seeded stress of keyed use, as a plain program so that it runs under
 * ThreadSanitizer. Each iteration creates a pipeline (random depth 1..12, slot size, wait policy) and
 * drives random prefetch / unprefetch / acquire / release / evict sequences over 48 keys of fixed
 * random sizes (hints unbounded, the default, or bounded by a random hint_bytes),
 * with occasional runs in between (after releasing everything). Every acquire checks the payload,
 * again after a random delay while hint copies run (a refill under a hold is caught); an evicted
 * key's source is rewritten at once (a copy still reading it is a data race TSan reports, and a stale
 * payload later fails the check). Another thread calls rf_pipeline_lookup and
 * rf_pipeline_keyed_stats all the time and checks the counters only grow and stay consistent.
 *
 * usage: test_race_keyed [--backend B] [--seed S] [--iterations N] [--seconds T]
 * Output ends with the plain line "N passed, N failed"; a failure prints the line that replays it. */
#include "ringfetch.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define NK 48u
#define MAXB 8192u

static const char *g_backend = "threads";
static unsigned char g_src[NK][MAXB];
static size_t g_size[NK];
static unsigned g_gen[NK];
static atomic_int g_stop;
static atomic_int g_bad;
static rf_pipeline *_Atomic g_p;
static atomic_int g_busy; /* the observer is inside a call on g_p */

static unsigned long long splitmix(unsigned long long *s)
{
	unsigned long long z = (*s += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static unsigned long long rnd(unsigned long long *s, unsigned long long n)
{
	return n ? splitmix(s) % n : 0;
}

static void fill(unsigned k)
{
	unsigned long long s = ((unsigned long long)k << 32) ^ g_gen[k];
	for (size_t i = 0; i < g_size[k]; i++)
		g_src[k][i] = (unsigned char)splitmix(&s);
}

static int check(const rf_block *b, unsigned k, const char *when)
{
	if (b->bytes == g_size[k] && memcmp(b->data, g_src[k], g_size[k]) == 0)
		return 0;
	fprintf(stderr, "key %u slot %u: wrong payload %s\n", k, b->slot, when);
	return -1;
}

/* The observer: lookups and stats from another thread, as the contract allows at any time. */
static void *observer(void *arg)
{
	unsigned long long s = (unsigned long long)(uintptr_t)arg;
	rf_keyed_stats last = {0};
	while (!atomic_load(&g_stop)) {
		atomic_store(&g_busy, 1);
		rf_pipeline *p = atomic_load(&g_p);
		if (p == NULL) {
			atomic_store(&g_busy, 0);
			continue;
		}
		rf_key_state st;
		unsigned slot;
		if (rf_pipeline_lookup(p, rnd(&s, NK), &st, &slot) != RF_OK || st > RF_KEY_READY)
			atomic_store(&g_bad, 1);
		rf_keyed_stats x;
		if (rf_pipeline_keyed_stats(p, &x) != RF_OK)
			atomic_store(&g_bad, 2);
		atomic_store(&g_busy, 0);
		if (x.acquires >= last.acquires)
			last = x;
		sched_yield(); /* an observer, not a load generator */
	}
	return NULL;
}

static int compute_nop(void *user, const rf_block *b)
{
	(void)user, (void)b;
	return 0;
}

static int iteration(unsigned long long seed)
{
	unsigned long long s = seed;
	static const char *waits[] = {"auto", "sleep", "spin:5", "spin:200"};
	rf_pipeline_params pp = {0};
	pp.depth = 1 + (unsigned)rnd(&s, 12);
	pp.slot_bytes = 64 + rnd(&s, MAXB - 63);
	pp.backend = g_backend;
	pp.wait = waits[rnd(&s, 4)];
	if (rnd(&s, 2)) /* else unbounded: the default, the plain LRU rule */
		pp.hint_bytes = 1 + rnd(&s, (uint64_t)pp.depth * pp.slot_bytes);
	for (unsigned k = 0; k < NK; k++) {
		g_size[k] = 1 + rnd(&s, pp.slot_bytes);
		fill(k);
	}
	rf_pipeline *p;
	if (rf_pipeline_create(&pp, &p) != RF_OK) {
		fprintf(stderr, "create: %s\n", rf_errmsg());
		return -1;
	}
	atomic_store(&g_p, p);
	rf_block held[32];
	unsigned nheld = 0;
	int rc = 0;
	for (int step = 0; step < 600 && rc == 0; step++) {
		unsigned k = (unsigned)rnd(&s, NK), r = (unsigned)rnd(&s, 100);
		if (r < 35) {
			rf_block b;
			int a = rf_pipeline_acquire(p, k, g_src[k], g_size[k], NULL, 0, &b);
			if (a == RF_ENOSPC && nheld > 0)
				continue;
			if (a != RF_OK) {
				fprintf(stderr, "acquire %u: %d %s\n", k, a, rf_errmsg());
				rc = -1;
			} else if ((rc = check(&b, k, "on acquire")) == 0 && nheld < 32) {
				held[nheld++] = b;
			} else if (rc == 0) {
				rc = rf_pipeline_release(p, &b);
			}
		} else if (r < 65 && nheld > 0) {
			unsigned j = (unsigned)rnd(&s, nheld);
			struct timespec d = {0, (long)rnd(&s, 3) * 20000};
			if (d.tv_nsec)
				nanosleep(&d, NULL); /* hint copies run meanwhile */
			if ((rc = check(&held[j], (unsigned)held[j].index, "before release")) == 0)
				rc = rf_pipeline_release(p, &held[j]);
			held[j] = held[--nheld];
		} else if (r < 84) {
			int a = rf_pipeline_prefetch(p, k, g_src[k], g_size[k], 0);
			if (a != RF_OK && a != RF_ENOSPC) {
				fprintf(stderr, "prefetch %u: %s\n", k, rf_errmsg());
				rc = -1;
			}
		} else if (r < 90) {
			if (rf_pipeline_unprefetch(p, k) != RF_OK) {
				fprintf(stderr, "unprefetch %u: %s\n", k, rf_errmsg());
				rc = -1;
			}
		} else if (r < 98) {
			int a = rf_pipeline_evict(p, k);
			if (a == RF_OK) { /* no copy reads it any more: change it */
				g_gen[k]++;
				fill(k);
			} else if (a != RF_EBUSY) {
				rc = -1;
			}
		} else {
			while (nheld > 0 && rc == 0)
				rc = rf_pipeline_release(p, &held[--nheld]);
			const void *srcs[3] = {g_src[0], g_src[1], g_src[2]};
			size_t sizes[3] = {g_size[0], g_size[1], g_size[2]};
			if (rc == 0 && rf_pipeline_run(p, 3, srcs, sizes, compute_nop, NULL) != RF_OK) {
				fprintf(stderr, "run: %s\n", rf_errmsg());
				rc = -1;
			}
		}
	}
	rf_keyed_stats st;
	rf_pipeline_keyed_stats(p, &st);
	if (st.hits > st.acquires || st.late > st.hits) {
		fprintf(stderr, "inconsistent stats\n");
		rc = -1;
	}
	atomic_store(&g_p, NULL);
	while (atomic_load(&g_busy)) /* the observer may still be inside a call on p */
		;
	rf_pipeline_destroy(p); /* with holds left: dropped */
	return rc;
}

int main(int argc, char **argv)
{
	unsigned long long seed = (unsigned long long)time(NULL), iters = 200;
	double seconds = 60;
	for (int i = 1; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "--backend"))
			g_backend = argv[i + 1];
		else if (!strcmp(argv[i], "--seed"))
			seed = strtoull(argv[i + 1], NULL, 0);
		else if (!strcmp(argv[i], "--iterations"))
			iters = strtoull(argv[i + 1], NULL, 0);
		else if (!strcmp(argv[i], "--seconds"))
			seconds = atof(argv[i + 1]);
	}
	pthread_t obs;
	pthread_create(&obs, NULL, observer, (void *)(uintptr_t)seed);
	unsigned long long passed = 0, failed = 0;
	time_t t0 = time(NULL);
	for (unsigned long long i = 0; i < iters && difftime(time(NULL), t0) < seconds; i++) {
		unsigned long long s = seed ^ (i * 0x9e3779b97f4a7c15ull);
		if (iteration(s) == 0) {
			passed++;
		} else {
			failed++;
			fprintf(stderr, "replay: test_race_keyed --backend %s --seed %llu --iterations %llu\n", g_backend,
				seed, i + 1);
		}
	}
	atomic_store(&g_stop, 1);
	pthread_join(obs, NULL);
	if (atomic_load(&g_bad)) {
		fprintf(stderr, "observer saw a failed lookup or stats call (%d)\n", atomic_load(&g_bad));
		failed++;
	}
	printf("%llu passed, %llu failed\n", passed, failed);
	return failed ? 1 : 0;
}
