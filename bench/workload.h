/* bench/workload.h — what every contestant streams and computes: block i is a copy of source
 * i % nsrc (sizes possibly jittered), and the compute either sums the block's floats and checks the
 * sum against the source's (model "sum"; "dsum" sums them as doubles, an arithmetic-bound dependency
 * chain), or spins for a modelled time after checking the block's tag
 * (models "spin" and "ratio"). A wrong or torn slot fails the run in every model. */
#ifndef RFB_WORKLOAD_H
#define RFB_WORKLOAD_H

#include "options.h"

#include <ringfetch.h>

typedef struct rfb_work {
	size_t n, size, nsrc;
	const void **srcs;
	size_t *sizes;
	float *expect;       /* per block: the sum of its floats */
	double *compute_ns;  /* per block: modelled compute time (spin, ratio), 0 for sum */
	unsigned char *pool; /* nsrc sources of `size` bytes */
	rfb_compute_kind model;
	double *dexpect;     /* dsum: per block, the sum of its floats as doubles (NULL for other models) */
} rfb_work;

typedef struct rfb_sink {
	const rfb_work *w;
	double total;
	size_t bad;
	int nocheck; /* compute-only timing over one resident buffer: nothing to check against */
} rfb_sink;

/* Sources, sizes (jittered), expected sums. ratio models get their times from rfb_work_set_ratio. */
int rfb_work_init(rfb_work *w, const rfb_opts *o, size_t size, size_t nblocks);
/* ratio:R — compute time of every block = R * the mean measured copy time per block, +-J (jitter). */
void rfb_work_set_ratio(rfb_work *w, const rfb_opts *o, double copy_ns_per_block);
void rfb_work_free(rfb_work *w);

/* The compute every contestant calls (never inlined, so all run the same machine code). A block with a
 * stream is device memory (cuda): checked by kernels on that stream (bench/gpu_compute.cu, built with
 * nvcc; without it such a compute fails), never dereferenced on the host. */
int rfb_compute(void *sink, const rf_block *b);
/* params.memory for a backend name: RF_MEMORY_DEVICE for "cuda", else host ("auto" is then a CPU one). */
rf_memory rfb_memory_of(const char *backend);


#endif
