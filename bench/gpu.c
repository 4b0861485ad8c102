/* bench/gpu.c — ringfetch-gpu-bench: what the cuda backend achieves on this GPU, side by side with
 * plain CUDA in one run.
 *
 * Per block size (default 64 KiB .. 64 MiB; about --bytes of data per measured run, and never fewer
 * than 64 blocks, so that the (n - 1) / n of a pipeline's fill and drain does not cap the overlap):
 *   peak      back-to-back cudaMemcpyAsync of pinned blocks on one stream: the plain pinned H2D rate;
 *   pageable  the same from pageable (malloc) memory: what a naive prefetcher gets;
 *   depth d   a ringfetch pipeline of depth d, empty computes: H2D GB/s and % of the peak;
 *             overlap: the same with a compute kernel whose time per block equals the block's copy time,
 *             efficiency = (T_copy + T_compute - wall) / min(T_copy, T_compute) (1: the smaller is hidden
 *             entirely; 0: none of it);
 *             two-hop: pageable sources through the pinned host ring, GB/s and % of the pinned peak;
 *             host us/blk: the caller's time per enqueued block (first to last compute callback of the
 *             H2D run over n - 1; the device's pace instead where a block's copy takes longer);
 *   depth d/2q  the same with copy_queues 2 (depths >= 3).
 * Every figure is the median of --reps runs. One table on stdout, then the targets, asserted: H2D
 * >= 95 % of the peak, overlap >= 95 %, two-hop >= 80 % of the peak, at depth >= 2 in every row.
 *
 * --verify: a short correctness run instead (pinned and pageable sources, a kernel reading each slot,
 * every slot copied back and compared); exit status 0 when every byte matched. This is what
 * gpu-check.sh runs under compute-sanitizer.
 *
 * usage: ringfetch-gpu-bench [--sizes 1M,4M,16M,64M] [--depths 1,2,3,4] [--bytes 1G] [--reps 5]
 *                            [--device N] [--verify]
 * Exit status: 0 (every target met), 1 (a CUDA or ringfetch error, --verify found a mismatch, or a
 *              driver older than the CUDA runtime: a failure, never a skip), 2 (usage), 3 (the table
 *              printed, a target NOT MET), 77 (no usable GPU).
 */
#include "options.h"

#include <ringfetch.h>
#include <ringfetch/cuda.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int rfb_spin_launch(void *stream, long long cycles, const void *data, size_t n);

#define MAXL 16

#define CK(expr)                                                                                            \
	do {                                                                                                \
		cudaError_t e_ = (expr);                                                                    \
		if (e_ != cudaSuccess) {                                                                    \
			fprintf(stderr, "ringfetch-gpu-bench: %s: %s\n", #expr, cudaGetErrorString(e_));   \
			exit(1);                                                                            \
		}                                                                                           \
	} while (0)

#define RK(expr)                                                                                            \
	do {                                                                                                \
		int r_ = (expr);                                                                            \
		if (r_ != RF_OK) {                                                                          \
			fprintf(stderr, "ringfetch-gpu-bench: %s: %s\n", #expr, rf_errmsg());               \
			exit(1);                                                                            \
		}                                                                                           \
	} while (0)

typedef struct spin {
	long long cycles;
	unsigned char *back; /* --verify: per-block copy-back */
	size_t slot;
} spin;

typedef struct stamp {
	double first, last;
} stamp;

static int compute_none(void *u, const rf_block *b)
{
	stamp *t = u;
	if (t != NULL) {
		double x = rfb_now();
		if (b->index == 0)
			t->first = x;
		t->last = x;
	}
	return 0;
}

static int compute_spin(void *u, const rf_block *b)
{
	spin *s = u;
	if (rfb_spin_launch(b->stream, s->cycles, b->data, b->bytes) != 0)
		return 1;
	if (s->back != NULL && b->bytes &&
	    cudaMemcpyAsync(s->back + b->index * s->slot, b->data, b->bytes, cudaMemcpyDeviceToHost,
			    rf_block_stream(b)) != cudaSuccess)
		return 2;
	return 0;
}

/* Blocks: n pointers cycling through a pool of pool_bytes (pinned or pageable). */
typedef struct pool {
	unsigned char *mem;
	size_t bytes;
	int pinned;
} pool;

static void pool_make(pool *p, size_t bytes, int pinned)
{
	p->bytes = bytes;
	p->pinned = pinned;
	if (pinned)
		CK(cudaHostAlloc((void **)&p->mem, bytes, cudaHostAllocDefault));
	else if ((p->mem = malloc(bytes)) == NULL) {
		fprintf(stderr, "ringfetch-gpu-bench: out of memory (%zu bytes)\n", bytes);
		exit(1);
	}
	for (size_t i = 0; i < bytes; i++) /* touched, and not all zero */
		p->mem[i] = (unsigned char)(i * 131u + (i >> 12));
}

static void pool_free(pool *p)
{
	if (p->pinned)
		cudaFreeHost(p->mem);
	else
		free(p->mem);
}

static void blocks_of(const pool *p, size_t size, size_t n, const void **srcs, size_t *sizes)
{
	size_t per = p->bytes / size;
	for (size_t i = 0; i < n; i++) {
		srcs[i] = p->mem + (i % per) * size;
		sizes[i] = size;
	}
}

/* Plain cudaMemcpyAsync, back to back on one stream, into two alternating device buffers. */
static double plain_rate(void *dev, cudaStream_t s, const void **srcs, size_t size, size_t n)
{
	double t0 = rfb_now();
	for (size_t i = 0; i < n; i++)
		CK(cudaMemcpyAsync((unsigned char *)dev + (i % 2) * size, srcs[i], size, cudaMemcpyHostToDevice, s));
	CK(cudaStreamSynchronize(s));
	return (double)(size * n) / (rfb_now() - t0) / 1e9;
}

static double ring_wall(rf_pipeline *p, const void **srcs, const size_t *sizes, size_t n, rf_compute_fn fn, void *u)
{
	double t0 = rfb_now();
	RK(rf_pipeline_run(p, n, srcs, sizes, fn, u));
	return rfb_now() - t0;
}

/* Cycles per second of the spin kernel, measured: 20 kernels of 2e6 cycles back to back. */
static double spin_hz(cudaStream_t s)
{
	long long c = 2000000;
	CK(rfb_spin_launch(s, c, NULL, 0) == 0 ? cudaSuccess : cudaErrorLaunchFailure);
	CK(cudaStreamSynchronize(s));
	double t0 = rfb_now();
	for (int i = 0; i < 20; i++)
		CK(rfb_spin_launch(s, c, NULL, 0) == 0 ? cudaSuccess : cudaErrorLaunchFailure);
	CK(cudaStreamSynchronize(s));
	return 20.0 * (double)c / (rfb_now() - t0);
}

static rf_pipeline *make_k(unsigned depth, unsigned kq, size_t slot, int device)
{
	rf_pipeline_params pp = {0};
	pp.depth = depth;
	pp.copy_queues = kq;
	pp.slot_bytes = slot;
	pp.backend = "cuda";
	pp.memory = RF_MEMORY_DEVICE;
	pp.device = device;
	rf_pipeline *p;
	RK(rf_pipeline_create(&pp, &p));
	return p;
}

static rf_pipeline *make(unsigned depth, size_t slot, int device)
{
	return make_k(depth, 1, slot, device);
}

static int verify(int device)
{
	size_t slot = 1 << 20, n = 24;
	int bad = 0;
	for (int pinned = 1; pinned >= 0; pinned--) {
		pool src;
		pool_make(&src, slot * 8, pinned);
		const void *srcs[24];
		size_t sizes[24];
		blocks_of(&src, slot, n, srcs, sizes);
		for (unsigned depth = 1; depth <= 3; depth++) {
			rf_pipeline *p = make(depth, slot, device);
			spin s = {20000, NULL, slot};
			CK(cudaHostAlloc((void **)&s.back, n * slot, cudaHostAllocDefault));
			memset(s.back, 0, n * slot);
			RK(rf_pipeline_run(p, n, srcs, sizes, compute_spin, &s));
			for (size_t i = 0; i < n; i++)
				if (memcmp(s.back + i * slot, srcs[i], slot) != 0) {
					fprintf(stderr, "verify: %s depth %u block %zu corrupted\n",
						pinned ? "pinned" : "pageable", depth, i);
					bad = 1;
				}
			cudaFreeHost(s.back);
			rf_pipeline_destroy(p);
		}
		pool_free(&src);
	}
	printf("verify: %s\n", bad ? "MISMATCH" : "every block matched (pinned and pageable sources, depths 1-3)");
	return bad;
}

/* "1M,4M" into sizes, or "1,2,3" (1..RF_MAX_DEPTH) into counts; 1 when every item parsed. */
static int parse_list(const char *v, size_t *sizes, unsigned *counts, unsigned *n)
{
	char buf[256];
	snprintf(buf, sizeof buf, "%s", v);
	*n = 0;
	for (char *save = NULL, *t = strtok_r(buf, ",", &save); t != NULL; t = strtok_r(NULL, ",", &save)) {
		unsigned long long x;
		if (*n == MAXL)
			return 0;
		if (sizes != NULL && (sizes[*n] = rfb_parse_size(t)) == 0)
			return 0;
		if (counts != NULL) {
			if (rfb_parse_count(t, 1, RF_MAX_DEPTH, &x) != 0)
				return 0;
			counts[*n] = (unsigned)x;
		}
		(*n)++;
	}
	return *n > 0;
}

static void usage(FILE *f)
{
	fprintf(f, "usage: ringfetch-gpu-bench [--sizes 64K,256K,1M,4M,16M,64M] [--depths 1,2,3,4] [--bytes 1G] "
		   "[--reps 5] [--device N] [--verify]\n");
}

int main(int argc, char **argv)
{
	size_t sizes[MAXL] = {64u << 10, 256u << 10, 1u << 20, 4u << 20, 16u << 20, 64u << 20}, bytes = (size_t)1 << 30;
	unsigned depths[MAXL] = {1, 2, 3, 4}, nsizes = 6, ndepths = 4, reps = 5;
	int device = 0, do_verify = 0;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		unsigned long long x;
		if (strcmp(a, "--verify") == 0) {
			do_verify = 1;
			continue;
		}
		if (strcmp(a, "--help") == 0) {
			usage(stdout);
			return 0;
		}
		int ok = v != NULL;
		i++;
		if (ok && strcmp(a, "--sizes") == 0)
			ok = parse_list(v, sizes, NULL, &nsizes);
		else if (ok && strcmp(a, "--depths") == 0)
			ok = parse_list(v, NULL, depths, &ndepths);
		else if (ok && strcmp(a, "--bytes") == 0)
			ok = (bytes = rfb_parse_size(v)) != 0;
		else if (ok && strcmp(a, "--reps") == 0)
			ok = rfb_parse_count(v, 1, 63, &x) == 0 && (reps = (unsigned)x) > 0;
		else if (ok && strcmp(a, "--device") == 0)
			ok = rfb_parse_count(v, 0, 1023, &x) == 0 && ((device = (int)x) >= 0);
		else
			ok = 0;
		if (!ok) {
			fprintf(stderr, "ringfetch-gpu-bench: bad option %s %s\n", a, v ? v : "(missing value)");
			usage(stderr);
			return 2;
		}
	}
	int ndev = 0, drv = 0;
	cudaError_t e = cudaGetDeviceCount(&ndev);
	if (e != cudaSuccess && cudaDriverGetVersion(&drv) == cudaSuccess && drv > 0 && drv < CUDART_VERSION) {
		fprintf(stderr, "ringfetch-gpu-bench: FAIL: the CUDA driver (%d.%d, %d) is older than the CUDA runtime "
				"this was built with (%d.%d, %d): %s\n",
			drv / 1000, drv % 1000 / 10, drv, CUDART_VERSION / 1000, CUDART_VERSION % 1000 / 10, CUDART_VERSION,
			cudaGetErrorString(e));
		return 1;
	}
	if (e != cudaSuccess || ndev == 0) {
		fprintf(stderr, "ringfetch-gpu-bench: no usable GPU (%s)\n",
			e != cudaSuccess ? cudaGetErrorString(e) : "no CUDA device");
		return 77;
	}
	if (device >= ndev) {
		fprintf(stderr, "ringfetch-gpu-bench: device %d does not exist (%d devices)\n", device, ndev);
		return 2;
	}
	CK(cudaSetDevice(device));
	if (do_verify)
		return verify(device);

	struct cudaDeviceProp prop;
	CK(cudaGetDeviceProperties(&prop, device));
	size_t maxsz = 0;
	for (unsigned i = 0; i < nsizes; i++)
		maxsz = sizes[i] > maxsz ? sizes[i] : maxsz;
	size_t pool_bytes = bytes > 4 * maxsz ? bytes : 4 * maxsz;
	pool pin, pag;
	pool_make(&pin, pool_bytes, 1);
	pool_make(&pag, pool_bytes, 0);
	void *dev;
	CK(cudaMalloc(&dev, 2 * maxsz));
	cudaStream_t s;
	CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
	double hz = spin_hz(s);
	printf("ringfetch-gpu-bench: %s (device %d, %d copy engines), ringfetch %s; medians of %u runs, ~%zu MiB "
	       "per run\n",
	       prop.name, device, prop.asyncEngineCount, rf_version_string(), reps, bytes >> 20);
	printf("%-8s %-6s %6s %10s %7s %9s %12s %7s %11s\n", "size", "depth", "blocks", "H2D GB/s", "%peak", "overlap",
	       "pageable GB/s", "%peak", "host us/blk");
	double worst_h2d = 1e9, worst_ovl = 1e9, worst_hop = 1e9;
	for (unsigned si = 0; si < nsizes; si++) {
		size_t size = sizes[si], n = bytes / size < 64 ? 64 : bytes / size;
		const void **srcs = malloc(n * sizeof *srcs), **psrcs = malloc(n * sizeof *psrcs);
		size_t *sz = malloc(n * sizeof *sz);
		if (srcs == NULL || psrcs == NULL || sz == NULL)
			return 1;
		blocks_of(&pin, size, n, srcs, sz);
		blocks_of(&pag, size, n, psrcs, sz);
		double v[64], w[64];
		unsigned R = reps < 64 ? reps : 64;
		(void)plain_rate(dev, s, srcs, size, n < 8 ? n : 8); /* warm-up */
		for (unsigned r = 0; r < R; r++) {
			v[r] = plain_rate(dev, s, srcs, size, n);
			w[r] = plain_rate(dev, s, psrcs, size, n);
		}
		double peak = rfb_median(v, R), pageable = rfb_median(w, R);
		char label[32];
		if (size >= (1u << 20))
			snprintf(label, sizeof label, "%zu MiB", size >> 20);
		else
			snprintf(label, sizeof label, "%zu KiB", size >> 10);
		printf("%-8s %-6s %6zu %10.2f %6.1f%% %9s %12.2f %6.1f%% %11s\n", label, "plain", n, peak, 100.0, "-",
		       pageable, 100.0 * pageable / peak, "-");
		/* Compute time per block = copy time per block at the peak rate. */
		spin sp = {(long long)(hz * (double)size / (peak * 1e9)), NULL, size};
		double tcomp[64];
		for (unsigned r = 0; r < R; r++) {
			double t0 = rfb_now();
			for (size_t i = 0; i < n; i++)
				CK(rfb_spin_launch(s, sp.cycles, NULL, 0) == 0 ? cudaSuccess : cudaErrorLaunchFailure);
			CK(cudaStreamSynchronize(s));
			tcomp[r] = rfb_now() - t0;
		}
		double Tcomp = rfb_median(tcomp, R), Tcopy = (double)(size * n) / (peak * 1e9);
		for (unsigned row = 0; row < 2 * ndepths; row++) {
			unsigned depth = depths[row % ndepths], kq = row < ndepths ? 1 : 2;
			if (kq == 2 && depth < 3)
				continue; /* two copy queues need depth >= 3 */
			rf_pipeline *p = make_k(depth, kq, size, device);
			double a[64], b[64], c[64], h[64];
			(void)ring_wall(p, srcs, sz, n < 8 ? n : 8, compute_none, NULL);
			(void)ring_wall(p, psrcs, sz, n < 8 ? n : 8, compute_none, NULL);
			for (unsigned r = 0; r < R; r++) {
				stamp t = {0, 0};
				a[r] = (double)(size * n) / ring_wall(p, srcs, sz, n, compute_none, &t) / 1e9;
				h[r] = (t.last - t.first) / (double)(n - 1) * 1e6;
				double wall = ring_wall(p, srcs, sz, n, compute_spin, &sp);
				double eff = (Tcopy + Tcomp - wall) / (Tcopy < Tcomp ? Tcopy : Tcomp);
				b[r] = eff < 0 ? 0 : eff > 1 ? 1 : eff;
				c[r] = (double)(size * n) / ring_wall(p, psrcs, sz, n, compute_none, NULL) / 1e9;
			}
			double h2d = rfb_median(a, R), ovl = rfb_median(b, R), hop = rfb_median(c, R), host = rfb_median(h, R);
			char d[16];
			snprintf(d, sizeof d, kq == 1 ? "%u" : "%u/2q", depth);
			printf("%-8s %-6s %6zu %10.2f %6.1f%% %8.1f%% %12.2f %6.1f%% %11.2f\n", label, d, n, h2d,
			       100.0 * h2d / peak, 100.0 * ovl, hop, 100.0 * hop / peak, host);
			if (depth >= 2) {
				worst_h2d = h2d / peak < worst_h2d ? h2d / peak : worst_h2d;
				worst_ovl = ovl < worst_ovl ? ovl : worst_ovl;
				worst_hop = hop / peak < worst_hop ? hop / peak : worst_hop;
			}
			rf_pipeline_destroy(p);
		}
		free(srcs);
		free(psrcs);
		free(sz);
	}
	if (worst_h2d < 1e9)
		printf("targets at depth >= 2 (worst row): H2D %.1f%% of peak (target >= 95%%) %s; overlap %.1f%% "
		       "(>= 95%%) %s; two-hop pageable %.1f%% of pinned peak (>= 80%%) %s\n",
		       100 * worst_h2d, worst_h2d >= 0.95 ? "MET" : "NOT MET", 100 * worst_ovl,
		       worst_ovl >= 0.95 ? "MET" : "NOT MET", 100 * worst_hop, worst_hop >= 0.80 ? "MET" : "NOT MET");
	int met = worst_h2d >= 0.95 && worst_ovl >= 0.95 && worst_hop >= 0.80;
	cudaStreamDestroy(s);
	cudaFree(dev);
	pool_free(&pin);
	pool_free(&pag);
	return worst_h2d < 1e9 && !met ? 3 : 0;
}
