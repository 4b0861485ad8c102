/* bench/crosscore.c — ringfetch-crosscore: what a block read costs when another core has just written
 * it, on the running machine — the cost a ring pays on every block (its computes read what the copy
 * lane wrote) and that running inline or with locality does not (docs/tuning.md, "Overlap or not").
 *
 * Per block size, alternating in each repetition: this thread copies a block into a buffer and reads it
 * (a scalar double sum over its floats, one dependency chain: the bench's dsum model); then a thread
 * pinned to another CPU copies a block into the same buffer and this thread reads it. Prints the
 * medians of both reads, of their ratio (paired in each repetition), and of both copies. No library
 * call: plain threads, so that the figure is the machine's.
 *
 * usage: ringfetch-crosscore [--size LIST] [--reps N] [--cpus A,B] (default 64K,256K,1M,4M; 41; the
 * first two CPUs this process may use)
 */
#define _GNU_SOURCE
#include "options.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NSRC 16 /* distinct sources per size, cycled: every copy reads from memory, not from cache */

typedef struct xc {
	size_t size;
	unsigned char *src, *dst;
	int cpu;
	atomic_int go, done; /* go: the block the other thread copies next (-1: quit); done: the last copied */
} xc;

__attribute__((noinline)) static double dsum(const void *p, size_t bytes)
{
	const float *f = p;
	double s = 0;
	for (size_t i = 0; i < bytes / sizeof(float); i++)
		s += (double)f[i];
	return s;
}

static int pin(int cpu)
{
	cpu_set_t s;
	CPU_ZERO(&s);
	CPU_SET(cpu, &s);
	return pthread_setaffinity_np(pthread_self(), sizeof s, &s);
}

static void *other(void *arg)
{
	xc *x = arg;
	pin(x->cpu);
	for (int seen = 0;;) {
		int g;
		while ((g = atomic_load(&x->go)) == seen)
			sched_yield();
		if (g < 0)
			return NULL;
		memcpy(x->dst, x->src + (size_t)(g % NSRC) * x->size, x->size);
		atomic_store(&x->done, g);
		seen = g;
	}
}

static int first_cpus(int *a, int *b)
{
	cpu_set_t s;
	if (sched_getaffinity(0, sizeof s, &s) != 0)
		return -1;
	int n = 0;
	for (int c = 0; c < CPU_SETSIZE && n < 2; c++)
		if (CPU_ISSET(c, &s))
			*(n++ ? b : a) = c;
	return n == 2 ? 0 : -1;
}

static int one_size(size_t size, unsigned reps, int me, int them)
{
	xc x = {size, malloc(NSRC * size), aligned_alloc(4096, (size + 4095) & ~(size_t)4095), them, 0, 0};
	double *same = malloc(4 * reps * sizeof *same), *cross = same + reps, *ratio = cross + reps, *cp = ratio + reps;
	double *ccp = malloc(reps * sizeof *ccp);
	if (!x.src || !x.dst || !same || !ccp)
		return -1;
	for (size_t i = 0; i < NSRC * size / sizeof(float); i++)
		((float *)x.src)[i] = (float)(i % 1000) * 0.5f;
	memset(x.dst, 0, size);
	pthread_t t;
	if (pin(me) != 0 || pthread_create(&t, NULL, other, &x) != 0)
		return -1;
	volatile double sink = 0;
	for (unsigned r = 0; r < reps; r++) {
		double t0 = rfb_now();
		memcpy(x.dst, x.src + (size_t)(r % NSRC) * size, size);
		double t1 = rfb_now();
		sink += dsum(x.dst, size);
		double t2 = rfb_now();
		atomic_store(&x.go, (int)r + 1);
		while (atomic_load(&x.done) != (int)r + 1)
			;
		double t3 = rfb_now();
		sink += dsum(x.dst, size);
		double t4 = rfb_now();
		cp[r] = (t1 - t0) * 1e6, same[r] = (t2 - t1) * 1e6, ccp[r] = (t3 - t2) * 1e6, cross[r] = (t4 - t3) * 1e6;
		ratio[r] = cross[r] / same[r];
	}
	atomic_store(&x.go, -1);
	pthread_join(t, NULL);
	char name[32];
	snprintf(name, sizeof name, size >= (1u << 20) ? "%zu MiB" : "%zu KiB", size >= (1u << 20) ? size >> 20 : size >> 10);
	printf("%8s  %10.1f  %10.1f  %6.2fx  %9.1f  %9.1f\n", name, rfb_median(same, reps), rfb_median(cross, reps),
	       rfb_median(ratio, reps), rfb_median(cp, reps), rfb_median(ccp, reps));
	(void)sink;
	free(x.src);
	free(x.dst);
	free(same);
	free(ccp);
	return 0;
}

int main(int argc, char **argv)
{
	static const char *def[] = {"64K", "256K", "1M", "4M"};
	const char *sizes[16];
	unsigned nsizes = 4, reps = 41;
	int me = -1, them = -1;
	memcpy(sizes, def, sizeof def);
	for (int i = 1; i + 1 < argc; i += 2) {
		unsigned long long v;
		if (!strcmp(argv[i], "--reps") && rfb_parse_count(argv[i + 1], 3, 100000, &v) == 0) {
			reps = (unsigned)v;
		} else if (!strcmp(argv[i], "--cpus") && sscanf(argv[i + 1], "%d,%d", &me, &them) == 2 && me >= 0 &&
			   them >= 0 && me != them) {
		} else if (!strcmp(argv[i], "--size")) {
			nsizes = 0;
			for (char *save, *tok = strtok_r(argv[i + 1], ",", &save); tok && nsizes < 16;
			     tok = strtok_r(NULL, ",", &save))
				sizes[nsizes++] = tok;
		} else {
			fprintf(stderr, "usage: %s [--size LIST] [--reps N] [--cpus A,B]\n", argv[0]);
			return 2;
		}
	}
	if (argc % 2 == 0) {
		fprintf(stderr, "usage: %s [--size LIST] [--reps N] [--cpus A,B]\n", argv[0]);
		return 2;
	}
	if (me < 0 && first_cpus(&me, &them) != 0) {
		fprintf(stderr, "ringfetch-crosscore: needs two CPUs\n");
		return 1;
	}
	printf("ringfetch-crosscore: a double sum over a block's floats right after a copy; reader on CPU %d, the other "
	       "copier on CPU %d; medians of %u alternating repetitions (us)\n", me, them, reps);
	printf("%8s  %10s  %10s  %7s  %9s  %9s\n", "block", "same core", "other core", "ratio", "copy here", "copy there");
	for (unsigned i = 0; i < nsizes; i++) {
		size_t s = rfb_parse_size(sizes[i]);
		if (s == 0 || s % 4 != 0 || one_size(s, reps, me, them) != 0) {
			fprintf(stderr, "ringfetch-crosscore: size \"%s\": not a multiple of 4 in 4..1G, or out of memory\n",
				sizes[i]);
			return 1;
		}
	}
	return 0;
}
