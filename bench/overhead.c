/* bench/overhead.c — per-block runtime overhead of the cpu backend against the loop it replaces:
 *
 *     for (i = 0; i < n; i++) { memcpy(slot[i % 2], src[i], size); compute(user, &block_i); }
 *
 * Both sides stream the same blocks (64 bytes by default, depth 2) into the same compute callback.
 * They run alternately (A B A B ...) so that frequency drift and noise hit both; we report the
 * median ns/block of each and the median of the per-pair differences.
 *
 * usage: ringfetch-overhead [--blocks N] [--size BYTES] [--reps R] [--depth D]
 */
#include "options.h"

#include <ringfetch.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* The compute both sides call: read the block so the copy cannot be elided. */
static int consume(void *user, const rf_block *b)
{
	unsigned long long *acc = user;
	const unsigned char *p = b->data;
	for (size_t i = 0; i < b->bytes; i += 8)
		*acc += p[i];
	*acc += b->index;
	return 0;
}

static void hand_loop(size_t n, const void *const *srcs, const size_t *sizes, unsigned char *ring,
		      unsigned depth, size_t slot_bytes, unsigned long long *acc)
{
	for (size_t i = 0; i < n; i++) {
		unsigned s = (unsigned)(i % depth);
		unsigned char *slot = ring + (size_t)s * slot_bytes;
		memcpy(slot, srcs[i], sizes[i]);
		rf_block b = {i, s, slot, sizes[i], NULL};
		consume(acc, &b);
	}
}

int main(int argc, char **argv)
{
	unsigned long long n = 1u << 20, size = 64, reps = 15, depth = 2;
	for (int i = 1; i < argc; i += 2) {
		int ok = i + 1 < argc;
		if (ok && !strcmp(argv[i], "--blocks"))
			ok = rfb_parse_count(argv[i + 1], 1, 1u << 26, &n) == 0;
		else if (ok && !strcmp(argv[i], "--size"))
			ok = rfb_parse_count(argv[i + 1], 1, 1u << 20, &size) == 0;
		else if (ok && !strcmp(argv[i], "--reps"))
			ok = rfb_parse_count(argv[i + 1], 1, 1000, &reps) == 0;
		else if (ok && !strcmp(argv[i], "--depth"))
			ok = rfb_parse_count(argv[i + 1], 1, RF_MAX_DEPTH, &depth) == 0;
		else
			ok = 0;
		if (!ok) {
			fprintf(stderr, "usage: %s [--blocks 1..64M] [--size 1..1M] [--reps 1..1000] [--depth 1..%u]\n",
				argv[0], RF_MAX_DEPTH);
			return 2;
		}
	}
	/* 64 distinct sources, reused: the working set stays in cache on both sides, which is the point
	 * (we measure the runtime's own cost, not DRAM). */
	enum { NSRC = 64 };
	unsigned char *pool = malloc(NSRC * size), *ring = aligned_alloc(64, ((depth * size) + 63) & ~(size_t)63);
	const void **srcs = malloc(n * sizeof *srcs);
	size_t *sizes = malloc(n * sizeof *sizes);
	double *a = malloc(reps * sizeof *a), *b = malloc(reps * sizeof *b), *d = malloc(reps * sizeof *d);
	if (!pool || !ring || !srcs || !sizes || !a || !b || !d) {
		fprintf(stderr, "out of memory\n");
		return 1;
	}
	for (size_t i = 0; i < NSRC * size; i++)
		pool[i] = (unsigned char)(i * 131u);
	for (size_t i = 0; i < n; i++) {
		srcs[i] = pool + (i % NSRC) * size;
		sizes[i] = size;
	}
	rf_pipeline_params pp = {.depth = depth, .slot_bytes = size, .backend = "cpu"};
	rf_pipeline *p;
	int rc = rf_pipeline_create(&pp, &p);
	if (rc != RF_OK) {
		fprintf(stderr, "rf_pipeline_create: %s: %s\n", rf_strerror(rc), rf_errmsg());
		return 1;
	}
	unsigned long long acc_hand = 0, acc_rf = 0;
	for (unsigned r = 0; r < reps; r++) {
		double t0 = rfb_now() * 1e9;
		hand_loop(n, srcs, sizes, ring, depth, size, &acc_hand);
		double t1 = rfb_now() * 1e9;
		rc = rf_pipeline_run(p, n, srcs, sizes, consume, &acc_rf);
		double t2 = rfb_now() * 1e9;
		if (rc != RF_OK) {
			fprintf(stderr, "rf_pipeline_run: %s: %s\n", rf_strerror(rc), rf_errmsg());
			return 1;
		}
		a[r] = (t1 - t0) / (double)n;
		b[r] = (t2 - t1) / (double)n;
		d[r] = b[r] - a[r];
	}
	if (acc_hand != acc_rf) {
		fprintf(stderr, "checksum mismatch: hand %llu, ringfetch %llu\n", acc_hand, acc_rf);
		return 1;
	}
	double ma = rfb_median(a, reps), mb = rfb_median(b, reps), md = rfb_median(d, reps);
	printf("cpu backend overhead: %llu blocks of %llu B, depth %llu, %llu alternating reps\n", n, size, depth, reps);
	printf("  hand-written loop : %7.2f ns/block (median)\n", ma);
	printf("  rf_pipeline_run   : %7.2f ns/block (median)\n", mb);
	printf("  overhead          : %7.2f ns/block (median of paired differences), ratio %.2fx\n", md, mb / ma);
	rf_pipeline_destroy(p);
	free(pool);
	free(ring);
	free(srcs);
	free(sizes);
	free(a);
	free(b);
	free(d);
	return 0;
}
