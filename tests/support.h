/*
 * tests/support.h — helpers shared by the suites that run against the shared library (test_exec.c,
 * test_pipeline.c). Public headers, Criterion and libc only. Everything is static inline, so a suite
 * that leaves a helper unused gets no -Wunused-function.
 *
 * Callbacks never use Criterion asserts (they may run on a library thread): they record the first
 * violation with first_error() and the test asserts on it after the run.
 */
#ifndef RF_TESTS_SUPPORT_H
#define RF_TESTS_SUPPORT_H

#include <criterion/criterion.h>

#include "ringfetch.h"

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

static inline uint64_t mix64(uint64_t x)
{
	x ^= x >> 30;
	x *= 0xbf58476d1ce4e5b9ull;
	x ^= x >> 27;
	x *= 0x94d049bb133111ebull;
	x ^= x >> 31;
	return x;
}

static inline uint64_t rng_next(uint64_t *s)
{
	*s += 0x9e3779b97f4a7c15ull;
	return mix64(*s);
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

#endif /* RF_TESTS_SUPPORT_H */
