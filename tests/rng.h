/*
 * tests/rng.h — the one pseudo-random generator of the test programs: splitmix64, seeded and
 * reproducible (any seed works, 0 included). Plain C (no Criterion), so that race.c and the CUDA
 * simulator use it too.
 */
#ifndef RF_TESTS_RNG_H
#define RF_TESTS_RNG_H

#include <stdint.h>

static inline uint64_t mix64(uint64_t x)
{
	x ^= x >> 30;
	x *= 0xbf58476d1ce4e5b9ull;
	x ^= x >> 27;
	x *= 0x94d049bb133111ebull;
	x ^= x >> 31;
	return x;
}

/* The next number of the stream whose state is *s. */
static inline uint64_t rng_next(uint64_t *s)
{
	*s += 0x9e3779b97f4a7c15ull;
	return mix64(*s);
}

/* Uniform enough in 0 .. n-1 (0 when n is 0). */
static inline uint64_t rng_below(uint64_t *s, uint64_t n)
{
	return n ? rng_next(s) % n : 0;
}

#endif /* RF_TESTS_RNG_H */
