/* bench/latency.c — the serving loop's per-call latencies, the figures docs/serving.md sets targets for:
 *
 *   hit    rf_pipeline_acquire + rf_pipeline_release of a resident key (timed over batches of 64 pairs,
 *          so that the clock's own cost does not swamp a ~100 ns call)
 *   miss   acquire + release of a key that is not resident (a 64 B block by default): every call copies,
 *          with nothing else in flight
 *   run    rf_pipeline_run of 2 blocks of that size, with an empty compute
 *
 * for each backend asked (cpu, threads), calls spaced back to back as a decode loop's would be. Prints
 * one line per (backend, figure): p50 and p99 in ns over --iters samples. Every block's bytes are
 * checked, so a wrong copy cannot look fast.
 *
 * usage: ringfetch-latency [--backends cpu,threads] [--size BYTES] [--iters N] [--wait POLICY]
 */
#include "options.h"

#include <ringfetch.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NKEYS 64u  /* distinct sources; the pipeline has 8 slots, so rotating keys always miss */
#define BATCH 64u  /* hit pairs per timed sample */

typedef struct lat_ctx {
	unsigned char *src[NKEYS];
	size_t size;
	unsigned bad;
} lat_ctx;

static int check_block(lat_ctx *c, const rf_block *b, size_t key)
{
	if (b->bytes != c->size || memcmp(b->data, c->src[key % NKEYS], c->size) != 0) {
		c->bad++;
		return 1;
	}
	return 0;
}

static int empty_compute(void *user, const rf_block *b)
{
	return check_block(user, b, b->index);
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

static void report(const char *backend, const char *what, double *ns, size_t n)
{
	qsort(ns, n, sizeof *ns, cmp_double);
	printf("%-8s %-5s p50 %10.0f ns   p99 %10.0f ns   (%zu samples)\n", backend, what, ns[n / 2],
	       ns[(n * 99) / 100 < n ? (n * 99) / 100 : n - 1], n);
}

/* One resident key, acquired and released BATCH times per sample. */
static int time_hits(rf_pipeline *p, lat_ctx *c, double *ns, size_t iters)
{
	rf_block b;
	if (rf_pipeline_acquire(p, 0, c->src[0], c->size, NULL, 0, &b) != RF_OK || rf_pipeline_release(p, &b) != RF_OK)
		return -1;
	for (size_t i = 0; i < iters; i++) {
		double t0 = rfb_now();
		for (unsigned k = 0; k < BATCH; k++) {
			if (rf_pipeline_acquire(p, 0, c->src[0], c->size, NULL, 0, &b) != RF_OK)
				return -1;
			rf_pipeline_release(p, &b);
		}
		ns[i] = (rfb_now() - t0) * 1e9 / BATCH;
		if (check_block(c, &b, 0))
			return -1;
	}
	return 0;
}

/* A new key every call (keys rotate over more sources than slots): each acquire copies. */
static int time_misses(rf_pipeline *p, lat_ctx *c, double *ns, size_t iters)
{
	rf_block b;
	for (size_t i = 0; i < iters; i++) {
		uint64_t key = 1000 + i;
		double t0 = rfb_now();
		if (rf_pipeline_acquire(p, key, c->src[key % NKEYS], c->size, NULL, 0, &b) != RF_OK)
			return -1;
		int bad = check_block(c, &b, key);
		rf_pipeline_release(p, &b);
		ns[i] = (rfb_now() - t0) * 1e9;
		if (bad)
			return -1;
	}
	return 0;
}

static int time_runs(rf_pipeline *p, lat_ctx *c, double *ns, size_t iters)
{
	const void *srcs[2] = {c->src[0], c->src[1]};
	size_t sizes[2] = {c->size, c->size};
	for (size_t i = 0; i < iters; i++) {
		double t0 = rfb_now();
		if (rf_pipeline_run(p, 2, srcs, sizes, empty_compute, c) != RF_OK)
			return -1;
		ns[i] = (rfb_now() - t0) * 1e9;
	}
	return 0;
}

static int measure(const char *backend, lat_ctx *c, size_t iters, const char *wait)
{
	rf_pipeline_params pp = {.depth = 8, .slot_bytes = c->size, .backend = backend, .wait = wait};
	rf_pipeline *p;
	int rc = rf_pipeline_create(&pp, &p);
	if (rc != RF_OK) {
		fprintf(stderr, "%s: rf_pipeline_create: %s: %s\n", backend, rf_strerror(rc), rf_errmsg());
		return -1;
	}
	double *ns = malloc(iters * sizeof *ns);
	int bad = ns == NULL;
	if (!bad && !(bad = time_hits(p, c, ns, iters)))
		report(backend, "hit", ns, iters);
	if (!bad && !(bad = time_misses(p, c, ns, iters)))
		report(backend, "miss", ns, iters);
	if (!bad && !(bad = time_runs(p, c, ns, iters)))
		report(backend, "run", ns, iters);
	if (bad)
		fprintf(stderr, "%s: failed (%u wrong blocks): %s\n", backend, c->bad, rf_errmsg());
	free(ns);
	rf_pipeline_destroy(p);
	return bad ? -1 : 0;
}

int main(int argc, char **argv)
{
	unsigned long long size = 64, iters = 20000;
	const char *backends = "cpu,threads", *wait = NULL;
	for (int i = 1; i < argc; i += 2) {
		int ok = i + 1 < argc;
		if (ok && !strcmp(argv[i], "--size"))
			ok = rfb_parse_count(argv[i + 1], 1, 1u << 20, &size) == 0;
		else if (ok && !strcmp(argv[i], "--iters"))
			ok = rfb_parse_count(argv[i + 1], 1, 10000000, &iters) == 0;
		else if (ok && !strcmp(argv[i], "--backends"))
			backends = argv[i + 1];
		else if (ok && !strcmp(argv[i], "--wait"))
			wait = argv[i + 1];
		else
			ok = 0;
		if (!ok) {
			fprintf(stderr, "usage: %s [--backends cpu,threads] [--size 1..1M] [--iters 1..10M] [--wait POLICY]\n",
				argv[0]);
			return 2;
		}
	}
	lat_ctx c = {.size = (size_t)size};
	for (unsigned k = 0; k < NKEYS; k++) {
		if ((c.src[k] = malloc(c.size)) == NULL)
			return 1;
		for (size_t j = 0; j < c.size; j++)
			c.src[k][j] = (unsigned char)(k * 131 + j * 7 + 1);
	}
	printf("ringfetch-latency: ringfetch %s, %llu-byte blocks, %llu samples per figure (hit: batches of %u)\n",
	       rf_version_string(), size, iters, BATCH);
	int rc = 0;
	char list[64];
	snprintf(list, sizeof list, "%s", backends);
	for (char *save = NULL, *b = strtok_r(list, ",", &save); b != NULL; b = strtok_r(NULL, ",", &save))
		rc |= measure(b, &c, (size_t)iters, wait);
	for (unsigned k = 0; k < NKEYS; k++)
		free(c.src[k]);
	return rc ? 1 : 0;
}
