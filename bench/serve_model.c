/* bench/serve_model.c — the MoE decode loop's model: expert weights, the router, the compute, and the
 * round driver every contestant runs under. */
#include "serve.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

double rfs_now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

double rfs_cpu_now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
	return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static uint64_t mix(uint64_t z)
{
	z += 0x9e3779b97f4a7c15ull;
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* A uniform double in [0, 1) from the PRNG state s (advanced). */
static double unit(uint64_t *s)
{
	*s = mix(*s);
	return (double)(*s >> 11) / 9007199254740992.0;
}

/* The sum: 16 float lanes (four 16-byte vectors) so that it runs at memory speed, as a real expert's
 * matrix-vector pass would; the lanes are added in a fixed order, so the result is the same bits
 * wherever the bytes are. bytes is a multiple of 64. */
typedef float rfs_v4 __attribute__((vector_size(16)));

__attribute__((noinline)) static float rfs_sum(const void *p, size_t bytes)
{
	const unsigned char *b = p;
	rfs_v4 a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0};
	for (size_t i = 0; i < bytes; i += 64) {
		rfs_v4 x0, x1, x2, x3;
		memcpy(&x0, b + i, 16);
		memcpy(&x1, b + i + 16, 16);
		memcpy(&x2, b + i + 32, 16);
		memcpy(&x3, b + i + 48, 16);
		a0 += x0, a1 += x1, a2 += x2, a3 += x3;
	}
	rfs_v4 a = (a0 + a1) + (a2 + a3);
	return (a[0] + a[1]) + (a[2] + a[3]);
}

/* The arithmetic: a dependent xorshift chain, iters long (no memory traffic, nothing to vectorise). */
__attribute__((noinline)) static uint64_t rfs_arith(uint64_t x, uint64_t iters)
{
	x |= 1;
	for (uint64_t i = 0; i < iters; i++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
	}
	return x;
}

/* Iterations per microsecond: the fastest of a few timed chains (the least disturbed by a loaded
 * machine). Every contestant then runs the same count, so the calibration's noise is fair to all. */
static double calibrate(void)
{
	const uint64_t n = 200000;
	double best = 1e9;
	volatile uint64_t sink = 0;
	for (int k = 0; k < 7; k++) {
		double t0 = rfs_now();
		sink ^= rfs_arith((uint64_t)k + 1, n);
		double t = rfs_now() - t0;
		best = t < best ? t : best;
	}
	(void)sink;
	return (double)n / (best * 1e6);
}

static uint32_t float_bits(float f)
{
	uint32_t u;
	memcpy(&u, &f, sizeof u);
	return u;
}

/* Expert x's floats. */
static void fill_expert(size_t x, float *f, size_t nfl)
{
	for (size_t i = 0; i < nfl; i++)
		f[i] = (float)((x * 7 + i) % 1000) * 0.5f;
}

static void rank_experts(rfs_model *m);

int rfs_model_init(rfs_model *m, const rfs_opts *o)
{
	memset(m, 0, sizeof *m);
	m->o = o;
	size_t nexp = (size_t)o->layers * o->experts, nfl = o->expert_bytes / sizeof(float);
	m->pool = aligned_alloc(64, nexp * o->expert_bytes);
	m->expect = malloc(nexp * sizeof *m->expect);
	m->likely = malloc(nexp * sizeof *m->likely);
	m->weight = malloc(o->experts * sizeof *m->weight);
	if (!m->pool || !m->expect || !m->likely || !m->weight) {
		rfs_model_free(m);
		return -1;
	}
	for (size_t x = 0; x < nexp; x++) {
		float *f = (float *)(m->pool + x * o->expert_bytes);
		fill_expert(x, f, nfl);
		m->expect[x] = rfs_sum(f, o->expert_bytes);
	}
	rank_experts(m);
	return 0;
}

int rfs_model_init_file(rfs_model *m, const rfs_opts *o, int fd)
{
	memset(m, 0, sizeof *m);
	m->o = o;
	size_t nexp = (size_t)o->layers * o->experts, nfl = o->expert_bytes / sizeof(float);
	float *f = aligned_alloc(4096, (o->expert_bytes + 4095) & ~(size_t)4095);
	m->expect = malloc(nexp * sizeof *m->expect);
	m->likely = malloc(nexp * sizeof *m->likely);
	m->weight = malloc(o->experts * sizeof *m->weight);
	int rc = f && m->expect && m->likely && m->weight ? 0 : -1;
	for (size_t x = 0; x < nexp && rc == 0; x++) {
		fill_expert(x, f, nfl);
		m->expect[x] = rfs_sum(f, o->expert_bytes);
		rc = write(fd, f, o->expert_bytes) == (ssize_t)o->expert_bytes ? 0 : -1;
	}
	free(f);
	if (rc != 0) {
		rfs_model_free(m);
		return -1;
	}
	rank_experts(m);
	return 0;
}

/* Popularity and the compute's calibration, once the weights exist. */
static void rank_experts(rfs_model *m)
{
	const rfs_opts *o = m->o;
	/* Popularity: rank r weighs 1 / (r + 1)^skew; which expert holds which rank is a per-layer
	 * shuffle (Fisher-Yates from the seed), so that no expert number is favoured everywhere. */
	for (unsigned r = 0; r < o->experts; r++)
		m->weight[r] = pow(r + 1.0, -o->skew);
	for (unsigned l = 0; l < o->layers; l++) {
		unsigned *perm = m->likely + (size_t)l * o->experts;
		uint64_t s = mix(o->seed ^ (0x5bd1e995ull * (l + 1)));
		for (unsigned e = 0; e < o->experts; e++)
			perm[e] = e;
		for (unsigned e = o->experts; e-- > 1;) {
			unsigned j = (unsigned)(unit(&s) * (e + 1));
			unsigned t = perm[e];
			perm[e] = perm[j], perm[j] = t;
		}
	}
	m->iters_per_us = calibrate();
	m->iters = (uint64_t)(o->compute_us * m->iters_per_us + 0.5);
}

void rfs_model_free(rfs_model *m)
{
	free(m->pool);
	free(m->expect);
	free(m->likely);
	free(m->weight);
	memset(m, 0, sizeof *m);
}

__attribute__((noinline)) void rfs_compute(const rfs_model *m, rfs_layer *L, unsigned i, const void *data,
					   rfs_tally *t)
{
	double t0 = rfs_now();
	float s = rfs_sum(data, L->bytes[i]);
	uint64_t a = rfs_arith(float_bits(s) ^ L->key[i], m->iters * L->tokens[i]);
	t->compute_s += rfs_now() - t0;
	t->bad += float_bits(s) != float_bits(m->expect[L->key[i]]);
	t->bad += L->done[i]++ != 0;
	t->computes++;
	L->sum[i] = s;
	L->arith[i] = a;
}

/* ---- routing and the round -------------------------------------------------------------------- */

/* Token b's router at layer l: topk distinct popularity ranks drawn from its hidden state, as experts
 * in draw order into pick[]. A rank drawn twice is drawn again (at most 64 times, then the most
 * popular rank not yet picked), so the result depends on the hidden state only. */
static void route(const rfs_model *m, unsigned l, uint64_t h, unsigned *pick)
{
	const rfs_opts *o = m->o;
	double total = 0;
	for (unsigned r = 0; r < o->experts; r++)
		total += m->weight[r];
	uint64_t s = h ^ (0xc2b2ae3d27d4eb4full * (l + 1));
	unsigned char taken[RFS_MAX_EXPERTS] = {0};
	for (unsigned k = 0; k < o->topk; k++) {
		unsigned r = o->experts;
		for (int tries = 0; tries < 64 && r == o->experts; tries++) {
			double u = unit(&s) * total;
			unsigned c = 0;
			while (c + 1 < o->experts && u >= m->weight[c])
				u -= m->weight[c++];
			r = taken[c] ? o->experts : c;
		}
		for (unsigned c = 0; r == o->experts; c++)
			r = taken[c] ? o->experts : c;
		taken[r] = 1;
		pick[k] = m->likely[(size_t)l * o->experts + r];
	}
}

/* The layer's distinct experts (ascending), with how many tokens chose each, and the hints. */
static void build_layer(const rfs_model *m, unsigned l, const unsigned *picks, rfs_layer *L, unsigned *index)
{
	const rfs_opts *o = m->o;
	unsigned count[RFS_MAX_EXPERTS] = {0};
	for (unsigned x = 0; x < o->batch * o->topk; x++)
		count[picks[x]]++;
	L->layer = l;
	L->n = 0;
	for (unsigned e = 0; e < o->experts; e++) {
		if (count[e] == 0)
			continue;
		unsigned i = L->n++;
		index[e] = i;
		L->expert[i] = e;
		L->tokens[i] = count[e];
		L->key[i] = (uint64_t)l * o->experts + e;
		L->src[i] = m->pool + L->key[i] * o->expert_bytes;
		L->bytes[i] = o->expert_bytes;
		L->done[i] = 0;
	}
	unsigned next = (l + 1) % o->layers; /* after the last layer: the first of the next step */
	L->nnext = o->hint_next;
	for (unsigned r = 0; r < o->hint_next; r++) {
		L->next_key[r] = (uint64_t)next * o->experts + m->likely[(size_t)next * o->experts + r];
		L->next_src[r] = m->pool + L->next_key[r] * o->expert_bytes;
	}
}

static int one_step(const rfs_model *m, unsigned step, rfs_layer_fn fn, void *self, rfs_tally *t, rfs_layer *L,
		    unsigned *picks)
{
	const rfs_opts *o = m->o;
	uint64_t h[RFS_MAX_BATCH];
	unsigned index[RFS_MAX_EXPERTS];
	for (unsigned b = 0; b < o->batch; b++)
		h[b] = mix(o->seed * 0x100000001b3ull ^ ((uint64_t)step << 8) ^ b);
	for (unsigned l = 0; l < o->layers; l++) {
		for (unsigned b = 0; b < o->batch; b++)
			route(m, l, h[b], picks + b * o->topk);
		build_layer(m, l, picks, L, index);
		if (fn(self, L, t) != 0)
			return -1;
		for (unsigned i = 0; i < L->n; i++)
			if (L->done[i] != 1) {
				fprintf(stderr, "\nstep %u layer %u: expert %u computed %u times\n", step, l, L->expert[i],
					L->done[i]);
				return -1;
			}
		/* The hidden state after the layer: the outputs of the token's experts, in its draw order. */
		for (unsigned b = 0; b < o->batch; b++)
			for (unsigned k = 0; k < o->topk; k++) {
				unsigned i = index[picks[b * o->topk + k]];
				h[b] = mix(h[b] ^ ((uint64_t)float_bits(L->sum[i]) << 32) ^ L->arith[i]);
			}
	}
	for (unsigned b = 0; b < o->batch; b++)
		t->checksum = mix(t->checksum ^ h[b]);
	return 0;
}

int rfs_round(const rfs_model *m, unsigned first_step, rfs_layer_fn fn, void *self, rfs_tally *t)
{
	const rfs_opts *o = m->o;
	rfs_layer *L = malloc(sizeof *L);
	unsigned *picks = malloc((size_t)o->batch * o->topk * sizeof *picks);
	int rc = L && picks ? 0 : -1;
	if (rc != 0)
		fprintf(stderr, "out of memory\n");
	double c0 = rfs_cpu_now(), t0 = rfs_now();
	for (unsigned s = 0; s < o->steps && rc == 0; s++)
		rc = one_step(m, first_step + s, fn, self, t, L, picks);
	t->wall_s = rfs_now() - t0;
	t->cpu_s = rfs_cpu_now() - c0;
	free(L);
	free(picks);
	if (rc == 0 && t->bad != 0) {
		fprintf(stderr, "\n%llu wrong sums or double computes\n", (unsigned long long)t->bad);
		rc = -1;
	}
	return rc;
}
