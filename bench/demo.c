/* bench/demo.c — the smallest complete use of the library: stream blocks through a ring on the
 * default backend (RINGFETCH_BACKEND / RINGFETCH_DEPTH apply), check every block's bytes in the
 * compute, and print what happened. (`make run` runs the sweep, ringfetch-bench.)
 *
 * usage: ringfetch-demo [--blocks N] [--size BYTES] [--memory host|device] [--help]
 *        (16 sources of BYTES each are allocated; BYTES takes the benchmarks' suffixes: 64K, 4M, 1.5M)
 *
 * --memory device: params.memory = RF_MEMORY_DEVICE, so "auto" is cuda (RF_ENODEV without a GPU) and
 * the compute is a kernel doing the same check on the device (bench/demo_kernel.cu; only when the
 * demo was built with nvcc). The host compute never sees device pointers: with the default host
 * memory, "auto" is a CPU backend even on a GPU machine.
 */
#include "options.h"

#include <ringfetch.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef RFD_HAVE_KERNEL
int rfd_check_launch(void *stream, const void *data, size_t n, size_t block, void *acc);
int rfd_acc_alloc(void **acc);
int rfd_acc_read_free(void *acc, unsigned long long out[2]);
#endif

typedef struct demo {
	size_t size;
	unsigned long long sum;
	size_t bad;
	void *acc; /* device memory: the device compute's counters (sum, bad) */
} demo;

static unsigned char pattern(size_t block, size_t i)
{
	return (unsigned char)(block * 2654435761u + i * 40503u);
}

/* Sum the bytes (the "compute") and verify the payload is the block's own. */
static int check_block(void *user, const rf_block *b)
{
	demo *d = user;
	const unsigned char *p = b->data;
	for (size_t i = 0; i < b->bytes; i++) {
		d->sum += p[i];
		d->bad += p[i] != pattern(b->index % 16, i);
	}
	return 0;
}

#ifdef RFD_HAVE_KERNEL
/* The same check as a kernel on the block's stream (device memory: never dereferenced here). */
static int check_block_device(void *user, const rf_block *b)
{
	demo *d = user;
	return rfd_check_launch(b->stream, b->data, b->bytes, b->index % 16, d->acc) != 0;
}
#endif

static const char usage[] =
	"usage: ringfetch-demo [--blocks N] [--size BYTES] [--memory host|device] [--help]\n"
	"  --blocks N      blocks to stream, 0..16777216 (default 4096)\n"
	"  --size BYTES    bytes per block, 1 byte .. 256M; suffixes K, M, G as in the benchmarks: 4096,\n"
	"                  64K, 4M, 1.5M (default 256K)\n"
	"  --memory M      host (default) or device (the cuda backend, the check as a kernel)\n"
	"RINGFETCH_BACKEND, RINGFETCH_DEPTH and the other RINGFETCH_* settings apply (docs/deployment.md).\n"
	"Exit status: 0 every block checked, 1 a failure, 2 bad options.\n";

int main(int argc, char **argv)
{
	unsigned long long n = 4096, size = 256 * 1024;
	rf_memory memory = RF_MEMORY_HOST;
	for (int i = 1; i < argc; i += 2) {
		if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
			fputs(usage, stdout);
			return 0;
		}
		int ok = i + 1 < argc;
		if (ok && !strcmp(argv[i], "--blocks"))
			ok = rfb_parse_count(argv[i + 1], 0, 1u << 24, &n) == 0;
		else if (ok && !strcmp(argv[i], "--size"))
			ok = (size = rfb_parse_size(argv[i + 1])) >= 1 && size <= (1u << 28);
		else if (ok && !strcmp(argv[i], "--memory"))
			ok = !strcmp(argv[i + 1], "host") || (memory = RF_MEMORY_DEVICE, !strcmp(argv[i + 1], "device"));
		else
			ok = 0;
		if (!ok) {
			fprintf(stderr, "ringfetch-demo: bad option or value: %s%s%s\n%s", argv[i], i + 1 < argc ? " " : "",
				i + 1 < argc ? argv[i + 1] : "", usage);
			return 2;
		}
	}
	/* 16 distinct source blocks, cycled: enough to make a stale slot visible. */
	unsigned char *src = malloc(16 * size);
	const void **srcs = malloc((n ? n : 1) * sizeof *srcs);
	size_t *sizes = malloc((n ? n : 1) * sizeof *sizes);
	if (!src || !srcs || !sizes) {
		fprintf(stderr, "out of memory\n");
		return 1;
	}
	for (size_t b = 0; b < 16; b++)
		for (size_t i = 0; i < size; i++)
			src[b * size + i] = pattern(b, i);
	for (size_t i = 0; i < n; i++) {
		srcs[i] = src + (i % 16) * size;
		sizes[i] = size;
	}
#ifndef RFD_HAVE_KERNEL
	if (memory == RF_MEMORY_DEVICE) {
		fprintf(stderr, "ringfetch-demo: --memory device needs the device compute, built only with nvcc\n");
		return 1;
	}
#endif
	/* depth and backend: configured defaults (of the right kind for `memory`) */
	rf_pipeline_params pp = {.slot_bytes = size, .memory = memory};
	rf_pipeline *p;
	int rc = rf_pipeline_create(&pp, &p);
	if (rc != RF_OK) {
		fprintf(stderr, "rf_pipeline_create: %s: %s\n", rf_strerror(rc), rf_errmsg());
		return 1;
	}
	demo d = {size, 0, 0, NULL};
	rf_compute_fn fn = check_block;
#ifdef RFD_HAVE_KERNEL
	if (memory == RF_MEMORY_DEVICE) {
		if (rfd_acc_alloc(&d.acc) != 0) {
			fprintf(stderr, "ringfetch-demo: cannot allocate the device counters\n");
			return 1;
		}
		fn = check_block_device;
	}
#endif
	rf_pipeline_collect_stats(p, 1);
	double t0 = rfb_now();
	rc = rf_pipeline_run(p, n, srcs, sizes, fn, &d);
	double s = rfb_now() - t0;
#ifdef RFD_HAVE_KERNEL
	if (d.acc != NULL) {
		unsigned long long c[2] = {0, 0};
		if (rfd_acc_read_free(d.acc, c) != 0 && rc == RF_OK)
			rc = RF_EBACKEND;
		d.sum = c[0];
		d.bad = (size_t)c[1];
	}
#endif
	printf("ringfetch %s demo\n", rf_version_string());
	printf("  backend      %s\n  depth        %u\n  blocks       %llu x %llu bytes\n", rf_pipeline_backend(p),
	       rf_pipeline_depth(p), n, size);
	printf("  streamed     %.1f MiB in %.3f s (%.2f GB/s, %.2f us/block)\n", (double)n * (double)size / 1048576.0,
	       s, (double)n * (double)size / s / 1e9, s / (double)(n ? n : 1) * 1e6);
	rf_stats st;
	if (rf_pipeline_stats(p, &st) == RF_OK && st.timed)
		printf("  copies       %.1f ms in all; computes waited %.1f ms; exposed transfer %.1f ms; "
		       "overlap efficiency %.0f%%\n", (double)st.copy_ns / 1e6, (double)st.queue[0].wait_ns / 1e6,
		       (double)st.exposed_ns / 1e6, 100 * st.overlap_efficiency);
	printf("  placement    %s\n", rf_pipeline_describe(p));
	printf("  result       %s, checksum %llu, %zu wrong bytes\n", rc == RF_OK ? "ok" : rf_strerror(rc), d.sum, d.bad);
	rf_pipeline_destroy(p);
	free(src);
	free(srcs);
	free(sizes);
	return rc == RF_OK && d.bad == 0 ? 0 : 1;
}
