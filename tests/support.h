/*
 * tests/support.h — helpers shared by the suites that run against the shared library (test_exec.c,
 * the test_pipeline_*.c suites, test_noalloc.c, ...). Public headers, Criterion and libc only. Everything is static inline, so a suite
 * that leaves a helper unused gets no -Wunused-function.
 *
 * Callbacks never use Criterion asserts (they may run on a library thread): they record the first
 * violation with first_error() and the test asserts on it after the run.
 */
#ifndef RF_TESTS_SUPPORT_H
#define RF_TESTS_SUPPORT_H

#include <criterion/criterion.h>

#include "ringfetch.h"
#include "rng.h"

#include <sched.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Under AddressSanitizer, every test ends with leak_check(): "nothing is leaked" is part of the
 * contract (failed creates included), and neither LeakSanitizer's report at exit nor an assert in a
 * .fini hook would fail the test (Criterion has reported it by then). */
#if defined(__SANITIZE_ADDRESS__)
#define RF_TEST_LSAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define RF_TEST_LSAN 1
#endif
#endif
#ifdef RF_TEST_LSAN
#include <sanitizer/lsan_interface.h>
#endif

static inline void leak_check(void)
{
#ifdef RF_TEST_LSAN
	cr_assert_eq(__lsan_do_recoverable_leak_check(), 0, "memory leaked (see the LeakSanitizer report)");
#endif
}

/* ---- environment, seeds, patterns ------------------------------------------------------------------ */

/* How many lines of the file at path hold needle (a trace: one event a line). */
static inline size_t count_in_file(const char *path, const char *needle)
{
	FILE *f = fopen(path, "r");
	cr_assert_not_null(f, "cannot read %s", path);
	char line[512];
	size_t n = 0;
	while (fgets(line, sizeof line, f))
		n += strstr(line, needle) != NULL;
	fclose(f);
	return n;
}

/* The backend under test: RF_TEST_BACKEND, "cpu" when unset. */
static inline const char *test_backend(void)
{
	const char *b = getenv("RF_TEST_BACKEND");
	return (b != NULL && *b != '\0') ? b : "cpu";
}

/* RF_TEST_SEED=<n> replays a randomised run; otherwise a fresh seed. */
static inline uint64_t test_seed(void)
{
	const char *s = getenv("RF_TEST_SEED");
	if (s != NULL && *s != '\0')
		return strtoull(s, NULL, 0);
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return ((uint64_t)ts.tv_sec * 1000003u) ^ (uint64_t)ts.tv_nsec ^ ((uint64_t)getpid() << 40);
}

/* The bytes of a block: a stream derived from (index, seed) only. */
static inline void fill_pattern(unsigned char *buf, size_t n, size_t index, uint64_t seed)
{
	uint64_t st = mix64(seed ^ mix64((uint64_t)index + 1));
	for (size_t i = 0; i < n; i += 8) {
		uint64_t v = rng_next(&st);
		for (size_t k = 0; k < 8 && i + k < n; k++)
			buf[i + k] = (unsigned char)(v >> (8 * k));
	}
}

/* Does msg contain the decimal number v as a whole token (no digit or '-' glued to it)? */
static inline int has_number(const char *msg, long long v)
{
	char num[32];
	snprintf(num, sizeof num, "%lld", v);
	size_t len = strlen(num);
	for (const char *p = strstr(msg, num); p != NULL; p = strstr(p + 1, num)) {
		int before_ok = p == msg || !((p[-1] >= '0' && p[-1] <= '9') || p[-1] == '-');
		int after_ok = !(p[len] >= '0' && p[len] <= '9');
		if (before_ok && after_ok)
			return 1;
	}
	return 0;
}

/* ---- block sets -------------------------------------------------------------------------------- */

/* A run's inputs: block i is sizes[i] bytes of pattern (i, seed) in its own heap buffer of exactly
 * that size (so that ASan sees any over-read), or NULL for an empty block when null_empty is set. */
typedef struct blockset {
	size_t n;
	uint64_t seed;
	const void **srcs;
	size_t *sizes;
	unsigned char **bufs;
} blockset;

/* n blocks, sizes and sources still zero / NULL. */
static inline void bs_alloc(blockset *b, size_t n, uint64_t seed)
{
	memset(b, 0, sizeof *b);
	b->n = n;
	b->seed = seed;
	b->srcs = calloc(n ? n : 1, sizeof *b->srcs);
	b->sizes = calloc(n ? n : 1, sizeof *b->sizes);
	b->bufs = calloc(n ? n : 1, sizeof *b->bufs);
	cr_assert(b->srcs && b->sizes && b->bufs, "out of memory");
}

/* Every block gets its own exact-size buffer of its pattern (empty ones NULL if null_empty). */
static inline void bs_fill(blockset *b, int null_empty)
{
	for (size_t i = 0; i < b->n; i++) {
		if (b->sizes[i] == 0 && null_empty) {
			b->srcs[i] = NULL;
			continue;
		}
		b->bufs[i] = malloc(b->sizes[i] ? b->sizes[i] : 1);
		cr_assert(b->bufs[i] != NULL, "out of memory");
		fill_pattern(b->bufs[i], b->sizes[i], i, b->seed);
		b->srcs[i] = b->bufs[i];
	}
}

static inline void bs_uniform(blockset *b, size_t n, size_t bytes, uint64_t seed)
{
	bs_alloc(b, n, seed);
	for (size_t i = 0; i < n; i++)
		b->sizes[i] = bytes;
	bs_fill(b, 0);
}

/* n blocks of random sizes in 0 .. slot_bytes, the edges (0, 1, slot_bytes) drawn often; empty blocks
 * have NULL sources for odd seeds. */
static inline void bs_random(blockset *b, size_t n, size_t slot_bytes, uint64_t seed)
{
	bs_alloc(b, n, seed);
	uint64_t st = seed ^ 0x5157u;
	for (size_t i = 0; i < n; i++) {
		uint64_t r = rng_next(&st);
		switch (r % 8) {
		case 0:
			b->sizes[i] = 0;
			break;
		case 1:
			b->sizes[i] = slot_bytes;
			break;
		case 2:
			b->sizes[i] = 1;
			break;
		default:
			b->sizes[i] = (size_t)((r >> 8) % (slot_bytes + 1));
		}
	}
	bs_fill(b, (int)(seed & 1));
}

static inline void bs_free(blockset *b)
{
	for (size_t i = 0; b->bufs != NULL && i < b->n; i++)
		free(b->bufs[i]);
	free(b->bufs);
	free(b->srcs);
	free(b->sizes);
	memset(b, 0, sizeof *b);
}

static inline const void *const *bs_srcs(const blockset *b)
{
	return (const void *const *)b->srcs;
}

/* ---- callback checks ------------------------------------------------------------------------------- */

/* A compute callback that only counts its calls in *(size_t *)user. */
static inline int count_cb(void *user, const rf_block *blk)
{
	(void)blk;
	(*(size_t *)user)++;
	return 0;
}

/* Record a violation in err[size] unless one is recorded already; never leaves err empty. */
static inline void first_error(char *err, size_t size, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static inline void first_error(char *err, size_t size, const char *fmt, ...)
{
	if (err[0] != '\0')
		return;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(err, size, fmt, ap);
	va_end(ap);
	if (err[0] == '\0')
		snprintf(err, size, "(violation)");
}

/* Verify that blk's bytes are exactly srcs[blk->index]; `when` names the moment. */
static inline void check_slot_bytes(char *err, size_t size, const rf_block *blk, const void *const *srcs,
				    const char *when)
{
	size_t i = blk->index;
	if (blk->bytes == 0)
		return;
	if (blk->data == NULL) {
		first_error(err, size, "block %zu: data is NULL with %zu bytes", i, blk->bytes);
		return;
	}
	if (memcmp(blk->data, srcs[i], blk->bytes) != 0) {
		const unsigned char *d = blk->data, *s = srcs[i];
		size_t k = 0;
		while (d[k] == s[k])
			k++;
		first_error(err, size,
			    "block %zu (slot %u, %zu bytes): slot bytes differ from srcs[%zu] at offset %zu %s "
			    "(0x%02x vs 0x%02x)", i, blk->slot, blk->bytes, i, k, when, d[k], s[k]);
	}
}

/* Work while the slot is ours (yields and re-reads, `work` times): a copy landing in the slot
 * meanwhile would be a WAR violation, caught by checking the bytes again afterwards. */
static inline void hold_slot(const rf_block *blk, unsigned work, volatile unsigned *sink)
{
	for (unsigned w = 0; w < work; w++) {
		sched_yield();
		const unsigned char *d = blk->data;
		unsigned acc = 0;
		for (size_t k = 0; k < blk->bytes; k++)
			acc += d[k];
		*sink += acc;
	}
}

/* ---- the checking callback ------------------------------------------------------------------------ */

/* check_cb's context. Computes must arrive in the expected sequence (order[], or 0, 1, 2, ... for a
 * ring), each block in its slot (slot_of[], or block % depth), with exactly its bytes at entry (RAW) and
 * still after `work` yields and re-reads (a copy landing in the slot meanwhile = WAR); on a ring, a
 * slot's previous occupant must be block - depth. */
typedef struct checker {
	const blockset *bs;
	const size_t *order;     /* expected block sequence; NULL: 0, 1, 2, ... */
	size_t norder;           /* computes expected */
	const unsigned *slot_of; /* per block: its slot; NULL: block % depth */
	unsigned depth;          /* a ring's depth; 0 for a graph */
	size_t calls;            /* computes seen */
	size_t fail_at;          /* return fail_value at this block (SIZE_MAX: never) */
	int fail_value;
	unsigned work;           /* yields + re-reads inside the callback, to widen WAR windows */
	size_t owner[RF_MAX_DEPTH]; /* ring: per slot, the block last computed there (SIZE_MAX: none yet) */
	volatile unsigned sink;
	char err[320];           /* first violation, "" if none */
} checker;

#define ck_fail(c, ...) first_error((c)->err, sizeof (c)->err, __VA_ARGS__)

/* A ring run over bs: blocks in order, block b in slot b % depth. */
static inline void ck_ring(checker *c, const blockset *bs, unsigned depth)
{
	memset(c, 0, sizeof *c);
	c->bs = bs;
	c->norder = bs->n;
	c->depth = depth;
	c->fail_at = SIZE_MAX;
	for (unsigned s = 0; s < RF_MAX_DEPTH; s++)
		c->owner[s] = SIZE_MAX;
}

/* A graph run over bs: the computes are order[0 .. norder), block b in slot slot_of[b]. */
static inline void ck_order(checker *c, const blockset *bs, const size_t *order, size_t norder,
			    const unsigned *slot_of)
{
	memset(c, 0, sizeof *c);
	c->bs = bs;
	c->order = order;
	c->norder = norder;
	c->slot_of = slot_of;
	c->fail_at = SIZE_MAX;
}

static inline void ck_bytes(checker *c, const rf_block *blk, const char *when)
{
	check_slot_bytes(c->err, sizeof c->err, blk, c->bs->srcs, when);
}

/* On a ring, the slot's previous occupant must be block i - depth (or none). */
static inline void ck_owner(checker *c, size_t i, unsigned slot)
{
	size_t prev = c->owner[slot], want = i >= c->depth ? i - c->depth : SIZE_MAX;
	if (prev != want)
		ck_fail(c, "block %zu: slot %u previously held block %zu, expected %zu", i, slot, prev, want);
	c->owner[slot] = i;
}

/* The checks of one compute of the expected block i. */
static inline void ck_block(checker *c, const rf_block *blk, size_t i)
{
	unsigned slot = c->slot_of ? c->slot_of[i] : (unsigned)(i % c->depth);
	if (blk->slot != slot)
		ck_fail(c, "block %zu: slot %u, expected %u (depth %u)", i, blk->slot, slot, c->depth);
	if (blk->bytes != c->bs->sizes[i])
		ck_fail(c, "block %zu: bytes %zu, expected %zu", i, blk->bytes, c->bs->sizes[i]);
	if (blk->stream != NULL)
		ck_fail(c, "block %zu: stream %p is not NULL on a host backend", i, blk->stream);
	if (c->depth != 0 && blk->slot == slot && slot < RF_MAX_DEPTH)
		ck_owner(c, i, slot);
	if (blk->bytes == c->bs->sizes[i]) {
		ck_bytes(c, blk, "at entry (RAW)");
		hold_slot(blk, c->work, &c->sink);
		ck_bytes(c, blk, "at exit (WAR: overwritten during compute)");
	}
}

static inline int check_cb(void *user, const rf_block *blk)
{
	checker *c = user;
	size_t i = blk->index, k = c->calls++;
	size_t want = k >= c->norder ? SIZE_MAX : c->order ? c->order[k] : k;
	if (k >= c->norder)
		ck_fail(c, "compute %zu (block %zu) is one too many (%zu expected)", k, i, c->norder);
	else if (i != want)
		ck_fail(c, "compute %zu is block %zu, expected block %zu", k, i, want);
	else if (i >= c->bs->n)
		ck_fail(c, "compute called for block %zu of a %zu-block run", i, c->bs->n);
	else
		ck_block(c, blk, i);
	return i == c->fail_at ? c->fail_value : 0;
}

/* ---- pipelines --------------------------------------------------------------------------------------- */

static inline rf_pipeline_params params_of(unsigned depth, size_t slot_bytes)
{
	rf_pipeline_params pp;
	memset(&pp, 0, sizeof pp);
	pp.depth = depth;
	pp.slot_bytes = slot_bytes;
	pp.backend = test_backend();
	return pp;
}

static inline rf_pipeline *make_pipeline(unsigned depth, size_t slot_bytes, unsigned copy_queues)
{
	rf_pipeline_params pp = params_of(depth, slot_bytes);
	pp.copy_queues = copy_queues;
	rf_pipeline *p = NULL;
	int rc = rf_pipeline_create(&pp, &p);
	cr_assert_eq(rc, RF_OK, "rf_pipeline_create(depth %u, slot_bytes %zu, copy_queues %u, backend %s): %s: %s",
		     depth, slot_bytes, copy_queues, pp.backend, rf_err_name(rc), rf_errmsg());
	cr_assert(p != NULL);
	return p;
}

/* One checked run: every block in order, exactly once, with its bytes, in its slot. */
static inline void checked_run(rf_pipeline *p, const blockset *bs, unsigned work, const char *what)
{
	checker *c = malloc(sizeof *c);
	cr_assert(c != NULL);
	ck_ring(c, bs, rf_pipeline_depth(p));
	c->work = work;
	int rc = rf_pipeline_run(p, bs->n, bs_srcs(bs), bs->sizes, check_cb, c);
	cr_assert_eq(rc, RF_OK, "%s: rf_pipeline_run(%zu blocks) = %s: %s [seed %llu]", what, bs->n,
		     rf_err_name(rc), rf_errmsg(), (unsigned long long)bs->seed);
	cr_assert_str_empty(c->err, "%s: %s [seed %llu]", what, c->err, (unsigned long long)bs->seed);
	cr_assert_eq(c->calls, bs->n, "%s: %zu computes for %zu blocks [seed %llu]", what, c->calls, bs->n,
		     (unsigned long long)bs->seed);
	free(c);
}

/* The configuration variables a test sets, unset (so that the next one starts clean). */
static inline void unset_config_env(void)
{
	unsetenv("RINGFETCH_DEPTH");
	unsetenv("RINGFETCH_BACKEND");
}

#endif /* RF_TESTS_SUPPORT_H */
