/*
 * tests/race_copy.c — stress of the threads backend's cooperative copy (base/piece.h,
 * ), a plain program so that it also runs under ThreadSanitizer:
 *  1. the piece copier alone: a worker copies jobs while two helpers take pieces of the same jobs; after
 *     each job's signal the consumer checks every byte (RAW), then releases the buffer for the next
 *     job (WAR: a helper still writing a piece of an old job would corrupt the check);
 *  2. whole pipelines on the threads backend with blocks big enough to be copied in pieces (32 KiB ..
 *     1 MiB, depth 2..4, 1..3 copy queues), every byte checked in the compute; run with
 *     RINGFETCH_ORACLE=1 (ctest does) so that the hazard oracle checks every run's order too, and with
 *     RINGFETCH_OVERLAP=on (ctest does) so that every run uses the lanes, where the caller also takes
 *     over copies the lane has not started.
 * Usage: race_copy [--iterations N] [--seed S]. Exit 0 when every check passed.
 */
#include "ringfetch.h"
#include "base/test_hooks.h"
#include "base/piece.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static unsigned long long rnd(unsigned long long *s, unsigned long long n)
{
	*s = *s * 6364136223846793005ull + 1442695040888963407ull;
	return n ? (*s >> 33) % n : 0;
}

static unsigned char pat(size_t block, size_t i)
{
	return (unsigned char)(block * 131 + i * 7 + (i >> 12));
}

/* ---- 1. the piece copier alone -------------------------------------------------------------------- */

#define JOBS 400
#define MAXN (300u << 10)

typedef struct bench {
	rf__piece_job job;
	unsigned char *dst;
	unsigned char *src[2];
	size_t sizes[JOBS];
	_Atomic int64_t value;  /* jobs copied (the worker's signal) */
	_Atomic long long consumed; /* jobs checked (the consumer's signal: the buffer may be rewritten) */
	atomic_uint helped;
	atomic_int failed;
} bench;

static void *worker(void *arg)
{
	bench *b = arg;
	for (size_t k = 0; k < JOBS; k++) {
		while (atomic_load(&b->consumed) < (long long)k) /* WAR */
			sched_yield();
		rf__piece_copy(&b->job, b->dst, b->src[k % 2], b->sizes[k], k, (int)(k % 3 == 0));
		atomic_store(&b->value, (long long)k + 1);
	}
	return NULL;
}

static void *helper(void *arg)
{
	bench *b = arg;
	for (size_t k = 0; k < JOBS; k++)
		while (atomic_load(&b->value) < (long long)k + 1 && !atomic_load(&b->failed)) {
			atomic_fetch_add(&b->helped, rf__piece_help(&b->job, k, &b->value, (long long)k + 1));
			sched_yield();
		}
	return NULL;
}

/* Stall the worker right after it publishes every other job (helpers then get pieces), and every
 * third helper between its claim and its copy (a piece that late must still be waited for). */
static atomic_uint g_stalls[2];
static void stall(int where)
{
	if (atomic_fetch_add(&g_stalls[where], 1) % (where ? 3 : 2) == 0)
		for (int i = 0; i < 20; i++)
			sched_yield();
}

static int piece_stress(unsigned long long seed)
{
	bench *b = calloc(1, sizeof *b);
	b->dst = malloc(MAXN);
	for (int i = 0; i < 2; i++) {
		b->src[i] = malloc(MAXN);
		for (size_t k = 0; k < MAXN; k++)
			b->src[i][k] = pat((size_t)i, k);
	}
	for (size_t k = 0; k < JOBS; k++)
		b->sizes[k] = rnd(&seed, 4) ? 32768 + rnd(&seed, MAXN - 32768) : rnd(&seed, MAXN);
	rf__piece_init(&b->job);
	pthread_t w, h[2];
	pthread_create(&w, NULL, worker, b);
	for (int i = 0; i < 2; i++)
		pthread_create(&h[i], NULL, helper, b);
	for (size_t k = 0; k < JOBS; k++) {
		while (atomic_load(&b->value) < (long long)k + 1) { /* RAW */
			atomic_fetch_add(&b->helped, rf__piece_help(&b->job, k, &b->value, (long long)k + 1));
			sched_yield();
		}
		memset(b->dst + b->sizes[k], 0, MAXN - b->sizes[k]);
		if (memcmp(b->dst, b->src[k % 2], b->sizes[k]) != 0) {
			fprintf(stderr, "race_copy: job %zu (%zu bytes) copied wrong\n", k, b->sizes[k]);
			atomic_store(&b->failed, 1);
		}
		memset(b->dst, 0xa5, b->sizes[k]); /* a late piece of this job would show in the next check */
		atomic_store(&b->consumed, (long long)k + 1);
	}
	pthread_join(w, NULL);
	for (int i = 0; i < 2; i++)
		pthread_join(h[i], NULL);
	int failed = atomic_load(&b->failed);
	printf("race_copy: pieces: %u jobs, %u pieces copied by helpers, %s\n", JOBS, atomic_load(&b->helped),
	       failed ? "FAILED" : "ok");
	free(b->dst);
	free(b->src[0]);
	free(b->src[1]);
	free(b);
	return failed;
}

/* ---- 2. pipelines ---------------------------------------------------------------------------------- */

typedef struct chk {
	size_t next;
	const size_t *sizes;
	char why[200];
} chk;

static int check(void *u, const rf_block *b)
{
	chk *c = u;
	const unsigned char *p = b->data;
	if (b->index != c->next++ || b->bytes != c->sizes[b->index]) {
		snprintf(c->why, sizeof c->why, "block %zu out of order or wrong size", b->index);
		return 1;
	}
	for (size_t i = 0; i < b->bytes; i++)
		if (p[i] != pat(b->index, i)) {
			snprintf(c->why, sizeof c->why, "block %zu byte %zu wrong (of %zu)", b->index, i, b->bytes);
			return 1;
		}
	return 0;
}

static int pipeline_once(unsigned long long *s)
{
	size_t slot = (32u << 10) + rnd(s, 1u << 20), n = 1 + rnd(s, 24);
	unsigned depth = 2 + (unsigned)rnd(s, 3), kq = 1 + (unsigned)rnd(s, depth - 1); /* kq <= depth - 1 */
	unsigned char **srcs = calloc(n, sizeof *srcs);
	size_t *sizes = calloc(n, sizeof *sizes);
	for (size_t b = 0; b < n; b++) {
		sizes[b] = rnd(s, 3) ? slot : rnd(s, slot + 1);
		srcs[b] = malloc(sizes[b] + 1);
		for (size_t i = 0; i < sizes[b]; i++)
			srcs[b][i] = pat(b, i);
	}
	rf_pipeline_params pp = {.depth = depth, .slot_bytes = slot, .backend = "threads", .copy_queues = kq};
	rf_pipeline *p = NULL;
	int bad = 0;
	if (rf_pipeline_create(&pp, &p) != RF_OK) {
		fprintf(stderr, "race_copy: create: %s\n", rf_errmsg());
		bad = 1;
	}
	for (int r = 0; r < 2 && !bad; r++) {
		chk c = {0, sizes, ""};
		int rc = rf_pipeline_run(p, n, (const void *const *)srcs, sizes, check, &c);
		if (rc != RF_OK || c.next != n) {
			fprintf(stderr, "race_copy: slot %zu depth %u queues %u: %s %s %s\n", slot, depth, kq,
				rf_err_name(rc), c.why, rf_errmsg());
			bad = 1;
		}
	}
	rf_pipeline_destroy(p);
	for (size_t b = 0; b < n; b++)
		free(srcs[b]);
	free(srcs);
	free(sizes);
	return bad;
}

int main(int argc, char **argv)
{
	unsigned long long seed = 12345;
	unsigned iters = 60;
	for (int i = 1; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "--iterations"))
			iters = (unsigned)strtoul(argv[i + 1], NULL, 10);
		else if (!strcmp(argv[i], "--seed"))
			seed = strtoull(argv[i + 1], NULL, 10);
	}
	printf("race_copy: seed %llu\n", seed);
	rf__test_hooks.piece_copy = stall;
	int bad = piece_stress(seed);
	unsigned failed = 0;
	for (unsigned i = 0; i < iters; i++)
		failed += (unsigned)pipeline_once(&seed);
	printf("race_copy: pipelines: %u runs, %u failed\n", iters, failed);
	return bad || failed ? 1 : 0;
}
