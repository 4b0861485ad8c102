/* bench/workload.c — sources, jitter and the compute models. */
#include "workload.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

static unsigned long long rfb_rand(unsigned long long *s)
{
	unsigned long long z = (*s += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static double rfb_unit(unsigned long long *s)
{
	return (double)(rfb_rand(s) >> 11) / 9007199254740992.0;
}

__attribute__((noinline)) static float rfb_sum(const void *p, size_t bytes)
{
	const float *f = p;
	float s = 0;
	for (size_t i = 0; i < bytes / sizeof(float); i++)
		s += f[i];
	return s;
}

/* The arithmetic-bound model: every element converted and added to one double, a dependency chain of
 * one add per 4 bytes (3-4 cycles each), so the compute outweighs copying the block; cross-core reads
 * of the block (a ring computing what another core copied) slow it where the chain waits on them. */
__attribute__((noinline)) static double rfb_dsum(const void *p, size_t bytes)
{
	const float *f = p;
	double s = 0;
	for (size_t i = 0; i < bytes / sizeof(float); i++)
		s += (double)f[i];
	return s;
}

static void rfb_spin(double ns)
{
	double end = rfb_now() + ns * 1e-9;
	while (rfb_now() < end)
		;
}

#ifdef RFB_HAVE_GPU_KERNEL
int rfb_gpu_init(void);
int rfb_gpu_check_launch(void *stream, const void *data, size_t bytes, unsigned s, int all, double spin_ns);
int rfb_gpu_fold_launch(void *stream, size_t *bad);
#endif

rf_memory rfb_memory_of(const char *backend)
{
	return backend != NULL && strcmp(backend, "cuda") == 0 ? RF_MEMORY_DEVICE : RF_MEMORY_HOST;
}

/* Device memory (a cuda pipeline gives the block's stream): the same check as kernels on that stream
 * (bench/gpu_compute.cu), never a host dereference. Without nvcc there is no device compute: fail. */
static int rfb_compute_device(rfb_sink *k, const rf_block *b)
{
#ifdef RFB_HAVE_GPU_KERNEL
	const rfb_work *w = k->w;
	if (rfb_gpu_init() != 0)
		return 2;
	if (rfb_gpu_check_launch(b->stream, b->data, b->bytes, (unsigned)(b->index % w->nsrc), w->model == RFB_SUM || w->model == RFB_DSUM,
				 w->compute_ns[b->index]) != 0)
		return 3;
	if (!k->nocheck && b->index + 1 == w->n && rfb_gpu_fold_launch(b->stream, &k->bad) != 0)
		return 4;
	return 0;
#else
	(void)k, (void)b;
	return 5; /* built without nvcc: no device compute (RF_ECALLBACK) */
#endif
}

__attribute__((noinline)) int rfb_compute(void *user, const rf_block *b)
{
	rfb_sink *k = user;
	const rfb_work *w = k->w;
	if (b->stream != NULL)
		return rfb_compute_device(k, b);
	if (w->model == RFB_SUM) {
		float s = rfb_sum(b->data, b->bytes);
		k->bad += !k->nocheck && s != w->expect[b->index];
		k->total += s;
		return 0;
	}
	if (w->model == RFB_DSUM) {
		double s = rfb_dsum(b->data, b->bytes);
		k->bad += !k->nocheck && s != w->dexpect[b->index];
		k->total += s;
		return 0;
	}
	/* Tag check: the first float of each source is its index (a stale slot shows). */
	if (b->bytes >= sizeof(float)) {
		float tag;
		memcpy(&tag, b->data, sizeof tag);
		k->bad += !k->nocheck && tag != (float)(b->index % w->nsrc);
	}
	rfb_spin(w->compute_ns[b->index]);
	return 0;
}

int rfb_work_init(rfb_work *w, const rfb_opts *o, size_t size, size_t n)
{
	memset(w, 0, sizeof *w);
	/* Enough distinct sources to leave the caches for big blocks (256 MiB in all, 4 .. 4096 of them). */
	size_t nsrc = ((size_t)256 << 20) / size;
	nsrc = nsrc < 4 ? 4 : nsrc > 4096 ? 4096 : nsrc;
	*w = (rfb_work){n, size, nsrc, malloc(n * sizeof(void *)), malloc(n * sizeof(size_t)),
			malloc(n * sizeof(float)), calloc(n, sizeof(double)), malloc(nsrc * size), o->compute,
			o->compute == RFB_DSUM ? malloc(n * sizeof(double)) : NULL};
	if (!w->srcs || !w->sizes || !w->expect || !w->compute_ns || !w->pool || (o->compute == RFB_DSUM && !w->dexpect)) {
		rfb_work_free(w);
		return -1;
	}
	for (size_t s = 0; s < nsrc; s++) {
		float *f = (float *)(w->pool + s * size);
		f[0] = (float)s;
		for (size_t i = 1; i < size / sizeof(float); i++)
			f[i] = (float)((s * 7 + i) % 1000) * 0.5f;
	}
	unsigned long long seed = o->seed * 1000003ull + size;
	for (size_t i = 0; i < n; i++) {
		size_t bytes = size;
		if (o->jitter > 0) /* variable copy times: [size * (1 - J), size], multiple of 4 */
			bytes = ((size_t)((double)size * (1 - o->jitter * rfb_unit(&seed))) + 3) & ~(size_t)3;
		w->srcs[i] = w->pool + (i % nsrc) * size;
		w->sizes[i] = bytes;
		w->expect[i] = rfb_sum(w->srcs[i], bytes);
		if (w->dexpect != NULL)
			w->dexpect[i] = rfb_dsum(w->srcs[i], bytes);
		if (o->compute == RFB_SPIN)
			w->compute_ns[i] = o->compute_arg * (double)bytes / 1024 * (1 + o->jitter * (2 * rfb_unit(&seed) - 1));
	}
	return 0;
}

/* Relative to the mean measured copy time, not to each block's size: with --jitter the copies vary
 * (their sizes do) independently of the computes (which vary by their own +-J). */
void rfb_work_set_ratio(rfb_work *w, const rfb_opts *o, double copy_ns_per_block)
{
	unsigned long long seed = o->seed * 7919ull + w->size;
	for (size_t i = 0; i < w->n; i++)
		w->compute_ns[i] = o->compute_arg * copy_ns_per_block * (1 + o->jitter * (2 * rfb_unit(&seed) - 1));
}

void rfb_work_free(rfb_work *w)
{
	free(w->srcs);
	free(w->sizes);
	free(w->expect);
	free(w->compute_ns);
	free(w->pool);
	free(w->dexpect);
	memset(w, 0, sizeof *w);
}
