/* tests/race.c — seeded race hunting and stress for every backend, as a plain program so that it also
 * runs under ThreadSanitizer (Criterion cannot: its inheritable arena fails under TSan).
 *
 * Each iteration creates a pipeline with a random depth (1..16), copy queues (1..4, where valid),
 * slot size and block sizes (0 .. slot_bytes), streams random blocks, and checks in the compute:
 * block order, slot = index % depth, bytes, payload — once on entry and again after a random delay
 * (sleep or spin), so that a copy overwriting a slot under a running compute is caught. Copies are made
 * slow and fast in turn through a test hook. Some iterations fail the compute at a random block and
 * check RF_ECALLBACK, that nothing ran after it, and that the pipeline is reusable; some are canceled
 * from another thread at a random moment (RF_ECANCELED or RF_OK, then reusable).
 *
 * usage: test_race [--backend B] [--seed S] [--iterations N] [--seconds T] [--only I]
 *                  [--negative-control | --oracle-control] [--graphs]
 * On a failure it prints the line that replays it. --negative-control drops the WAR waits (test hook)
 * and succeeds only if the checks catch the resulting race: proof that they can fail. --oracle-control
 * does the same with checking computes turned off and RINGFETCH_ORACLE=1: only the hazard oracle
 * (runtime/oracle.c, reading the execution log) can catch it. With RINGFETCH_ORACLE=1 in the environment
 * every iteration is also checked by the oracle.
 * Output ends with the plain line "N passed, N failed".
 */
#include "runtime/backend.h"
#include "rng.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char *g_backend = "threads";
static int g_oracle_only; /* --oracle-control: computes check nothing; only the oracle can see the race */
static unsigned long long g_seed;
static int g_copy_mode; /* 0 fast, 1 slow copies (this iteration) */
static uint64_t g_copy_rng;

static uint64_t rnd(uint64_t *s, uint64_t n)
{
	return rng_below(s, n);
}

static void pause_ns(long ns)
{
	if (ns <= 0)
		return;
	if (ns < 20000) { /* spin: a sleep that short would oversleep by far */
		struct timespec t0, t;
		clock_gettime(CLOCK_MONOTONIC, &t0);
		do
			clock_gettime(CLOCK_MONOTONIC, &t);
		while ((t.tv_sec - t0.tv_sec) * 1000000000L + (t.tv_nsec - t0.tv_nsec) < ns);
		return;
	}
	struct timespec d = {0, ns};
	nanosleep(&d, NULL);
}

/* Called on the copying thread(s) before each copy. Several copy queues call it concurrently, so it
 * keeps no state: the delay is derived from the iteration's seed and the block number. */
static void slow_copy(size_t block)
{
	if (g_copy_mode) {
		uint64_t s = g_copy_rng ^ (block * 0x9e3779b97f4a7c15ull);
		pause_ns((long)rnd(&s, 40000));
	}
}

typedef struct ctx {
	unsigned depth;
	size_t next, calls, fail_at;
	const unsigned char *const *srcs;
	const size_t *sizes;
	uint64_t rng;
	unsigned long long seed;
	char why[200];
} ctx;

static unsigned char pat(unsigned long long seed, size_t block, size_t i)
{
	return (unsigned char)((seed >> (block % 48)) + block * 31u + i * 7u + (i >> 8));
}

static int check_bytes(ctx *c, const rf_block *b, const char *when)
{
	const unsigned char *p = b->data;
	for (size_t i = 0; i < b->bytes; i++) {
		if (p[i] != pat(c->seed, b->index, i)) {
			snprintf(c->why, sizeof c->why, "block %zu byte %zu wrong %s the compute (slot %u)", b->index,
				 i, when, b->slot);
			return 1;
		}
	}
	return 0;
}

static int compute(void *user, const rf_block *b)
{
	ctx *c = user;
	c->calls++;
	if (c->why[0])
		return -2;
	if (b->index != c->next || b->slot != b->index % c->depth || b->bytes != c->sizes[b->index] ||
	    b->stream != NULL) {
		snprintf(c->why, sizeof c->why, "block %zu (expected %zu): slot %u, %zu bytes (expected %zu)",
			 b->index, c->next, b->slot, b->bytes, c->sizes[b->index]);
		return -2;
	}
	c->next++;
	if (!g_oracle_only && check_bytes(c, b, "on entry to"))
		return -2;
	pause_ns((long)rnd(&c->rng, 3) == 0 ? (long)rnd(&c->rng, 60000) : (long)rnd(&c->rng, 2000));
	if (!g_oracle_only && check_bytes(c, b, "at the end of"))
		return -2;
	return b->index == c->fail_at ? 7 : 0;
}

/* A canceller: waits a few microseconds, then cancels the pipeline's run (whatever it has reached). */
typedef struct canceller {
	rf_pipeline *p;
	long delay_ns;
} canceller;

static void *cancel_soon(void *arg)
{
	canceller *k = arg;
	pause_ns(k->delay_ns);
	rf_pipeline_cancel(k->p);
	return NULL;
}

/* One iteration; returns 0 if every check held, else prints why. */
static int iteration(unsigned long long iter, int negative)
{
	uint64_t s = g_seed * 1000003ull + iter;
	unsigned kq = 1 + (unsigned)rnd(&s, 4);
	unsigned depth = 1 + (unsigned)rnd(&s, 16);
	if (kq > 1 && depth < kq + 1)
		depth = kq + 1 + (unsigned)rnd(&s, 16 - kq);
	if (negative)
		kq = 1, depth = 1 + (unsigned)rnd(&s, 3);
	size_t slot = 1 + rnd(&s, rnd(&s, 4) ? 512 : 65536);
	size_t n = rnd(&s, 4) ? rnd(&s, 3 * depth + 8) : rnd(&s, 200);
	if (negative && n < depth + 4)
		n = depth + 4;
	unsigned char **srcs = calloc(n + 1, sizeof *srcs);
	size_t *sizes = calloc(n + 1, sizeof *sizes);
	ctx c = {depth, 0, 0, (size_t)-1, (const unsigned char *const *)srcs, sizes, s ^ 0x55, s, ""};
	g_copy_mode = (int)(iter & 1);
	g_copy_rng = s;
	for (size_t b = 0; b < n; b++) {
		sizes[b] = rnd(&s, 5) == 0 ? 0 : (rnd(&s, 2) ? slot : rnd(&s, slot + 1));
		srcs[b] = sizes[b] || rnd(&s, 2) ? malloc(sizes[b] + 1) : NULL;
		for (size_t i = 0; i < sizes[b]; i++)
			srcs[b][i] = pat(c.seed, b, i);
	}
	rf_pipeline_params pp = {.depth = depth, .slot_bytes = slot, .backend = g_backend, .copy_queues = kq};
	rf_pipeline *p = NULL;
	int rc = rf_pipeline_create(&pp, &p), bad = 0;
	if (rc != RF_OK) {
		printf("iteration %llu: rf_pipeline_create: %s: %s\n", iter, rf_strerror(rc), rf_errmsg());
		bad = 1;
		goto out;
	}
	int failing = !negative && n > 0 && rnd(&s, 6) == 0;
	int canceling = !negative && !failing && n > 0 && rnd(&s, 8) == 0;
	if (failing)
		c.fail_at = rnd(&s, n);
	canceller k = {p, (long)rnd(&s, 200000)};
	pthread_t kt;
	if (canceling && pthread_create(&kt, NULL, cancel_soon, &k) != 0)
		canceling = 0;
	rc = rf_pipeline_run(p, n, (const void *const *)srcs, sizes, compute, &c);
	if (canceling)
		pthread_join(kt, NULL);
	/* A cancel that came after the run's last compute started stays pending for the next run: withdraw
	 * it, as a serving loop does once a request's timer is disarmed (rf_pipeline_cancel_clear). */
	if (canceling && rc != RF_ECANCELED)
		rf_pipeline_cancel_clear(p);
	if (g_oracle_only) { /* caught only if the oracle itself reported the WAR race */
		bad = rc == RF_EHAZARD && strstr(rf_errmsg(), "WAR") != NULL;
		if (bad)
			printf("iteration %llu: the oracle caught it: %s\n", iter, rf_errmsg());
		else if (rc != RF_OK)
			printf("iteration %llu: unexpected %s: %s\n", iter, rf_err_name(rc), rf_errmsg());
		goto out;
	}
	if (c.why[0]) {
		printf("iteration %llu (depth %u, K %u, %zu blocks, slot %zu): %s\n", iter, depth, kq, n, slot, c.why);
		bad = 1;
	} else if (failing && (rc != RF_ECALLBACK || c.calls != c.fail_at + 1)) {
		printf("iteration %llu: fail at %zu: rc %s, %zu computes\n", iter, c.fail_at, rf_err_name(rc), c.calls);
		bad = 1;
	} else if (canceling && !((rc == RF_OK && c.calls == n) || (rc == RF_ECANCELED && c.calls <= n))) {
		printf("iteration %llu: canceled run: rc %s, %zu of %zu computes\n", iter, rf_err_name(rc), c.calls, n);
		bad = 1;
	} else if (!failing && !canceling && (rc != RF_OK || c.calls != n)) {
		printf("iteration %llu: rc %s (%s), %zu of %zu computes\n", iter, rf_err_name(rc), rf_errmsg(), c.calls, n);
		bad = 1;
	} else if (failing || canceling) {
		/* Reusable after a failure or a cancel: the same pipeline streams everything. */
		ctx again = c;
		again.next = again.calls = 0;
		again.fail_at = (size_t)-1;
		rc = rf_pipeline_run(p, n, (const void *const *)srcs, sizes, compute, &again);
		if (rc != RF_OK || again.calls != n || again.why[0]) {
			printf("iteration %llu: rerun after failure: rc %s, %zu computes, %s\n", iter, rf_err_name(rc),
			       again.calls, again.why);
			bad = 1;
		}
	}
out:
	rf_pipeline_destroy(p);
	for (size_t b = 0; b < n; b++)
		free(srcs[b]);
	free(srcs);
	free(sizes);
	return bad;
}

/* --graphs: a ring graph (random depth, copy queues, blocks) with random extra forward edges between any
 * nodes (more cross-queue ordering, never a cycle: ids grow along every queue and every edge), built by
 * hand through the graph API and run through rf_exec, computes checking their bytes as above. With
 * RINGFETCH_ORACLE=1 every run is also checked against the graph's edges. */
static int graph_iteration(unsigned long long iter)
{
	uint64_t s = g_seed * 7919ull + iter;
	unsigned kq = 1 + (unsigned)rnd(&s, 3);
	unsigned depth = kq == 1 ? 1 + (unsigned)rnd(&s, 8) : kq + 1 + (unsigned)rnd(&s, 6);
	size_t n = 1 + rnd(&s, 40), slot = 1 + rnd(&s, 2048);
	rf_graph *g = NULL;
	rf_exec *e = NULL;
	unsigned char **srcs = calloc(n, sizeof *srcs);
	size_t *sizes = calloc(n, sizeof *sizes);
	ctx c = {depth, 0, 0, (size_t)-1, (const unsigned char *const *)srcs, sizes, s ^ 0x77, s, ""};
	int bad = rf_graph_ring(n, depth, kq, &g) != RF_OK;
	size_t nodes = rf_graph_nodes(g), extra = rnd(&s, 2 * n + 1);
	for (size_t i = 0; !bad && i < extra; i++) {
		size_t u = rnd(&s, nodes), v = rnd(&s, nodes);
		if (u < v)
			bad |= rf_graph_add_edge(g, u, v) != RF_OK;
	}
	for (size_t b = 0; b < n; b++) {
		sizes[b] = rnd(&s, slot + 1);
		srcs[b] = malloc(sizes[b] + 1);
		for (size_t i = 0; i < sizes[b]; i++)
			srcs[b][i] = pat(c.seed, b, i);
	}
	rf_exec_params xp = {.backend = g_backend, .slot_bytes = slot};
	int rc = bad ? RF_EINVAL : rf_exec_create(g, &xp, &e);
	if (rc == RF_OK)
		rc = rf_exec_run(e, n, (const void *const *)srcs, sizes, compute, &c);
	if (rc != RF_OK || c.why[0] || c.calls != n) {
		printf("graph iteration %llu (depth %u, K %u, %zu blocks, %zu extra edges): %s %s %s\n", iter, depth, kq, n,
		       extra, rf_err_name(rc), rc != RF_OK ? rf_errmsg() : "", c.why);
		bad = 1;
	}
	rf_exec_destroy(e);
	rf_graph_destroy(g);
	for (size_t b = 0; b < n; b++)
		free(srcs[b]);
	free(srcs);
	free(sizes);
	return bad;
}

static double seconds(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
	unsigned long long iters = 3000, only = (unsigned long long)-1;
	double budget = 120;
	int negative = 0, graphs = 0;
	g_seed = (unsigned long long)time(NULL);
	const char *env = getenv("RF_TEST_BACKEND");
	if (env && *env)
		g_backend = env;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (!strcmp(a, "--negative-control"))
			negative = 1;
		else if (!strcmp(a, "--oracle-control")) /* the negative control, seen by the oracle alone */
			negative = g_oracle_only = 1;
		else if (!strcmp(a, "--graphs"))
			graphs = 1;
		else if (v && !strcmp(a, "--backend"))
			g_backend = v, i++;
		else if (v && !strcmp(a, "--seed"))
			g_seed = strtoull(v, NULL, 0), i++;
		else if (v && !strcmp(a, "--iterations"))
			iters = strtoull(v, NULL, 0), i++;
		else if (v && !strcmp(a, "--seconds"))
			budget = strtod(v, NULL), i++;
		else if (v && !strcmp(a, "--only"))
			only = strtoull(v, NULL, 0), i++;
		else {
			fprintf(stderr, "usage: %s [--backend B] [--seed S] [--iterations N] [--seconds T] [--only I] "
					"[--negative-control]\n", argv[0]);
			return 2;
		}
	}
	if (g_oracle_only)
		setenv("RINGFETCH_ORACLE", "1", 1);
	rf__test_hooks.before_copy = slow_copy;
	rf__test_hooks.drop_war_wait = negative;
	printf("test_race: backend %s, seed %llu%s%s\n", g_backend, g_seed, negative ? ", WAR waits dropped" : "",
	       graphs ? ", hand-built graphs" : "");
	fflush(stdout);
	unsigned long long passed = 0, failed = 0;
	double t0 = seconds();
	for (unsigned long long it = 0; it < iters; it++) {
		if (only != (unsigned long long)-1 && it != only)
			continue;
		if (graphs ? graph_iteration(it) : iteration(it, negative)) {
			failed++;
			printf("  replay: %s%s --backend %s --seed %llu --only %llu%s\n", argv[0], graphs ? " --graphs" : "", g_backend, g_seed, it,
			       negative ? (g_oracle_only ? " --oracle-control" : " --negative-control") : "");
			if (negative || failed >= 5)
				break;
		} else {
			passed++;
		}
		if (seconds() - t0 > budget) {
			printf("time budget of %.0f s reached after %llu iterations\n", budget, it + 1);
			break;
		}
	}
	if (negative) {
		/* The control passes when the race was caught. */
		printf("negative control: %s after %llu clean iterations\n", failed ? "race caught" : "race NOT caught",
		       passed);
		printf("%d passed, %d failed\n", failed ? 1 : 0, failed ? 0 : 1);
		return failed ? 0 : 1;
	}
	printf("%llu passed, %llu failed\n", passed, failed);
	return failed ? 1 : 0;
}
