/* tests/test_plan.c — rf_plan_ring: the ring schedule as a flat list of PREFETCH / AWAIT / COMPUTE steps.
 *
 * Exact sequences for small cases, then the schedule's invariants (each block once, slot = block % depth,
 * RAW / WAR order, lookahead, slot occupancy) over every depth 1..16 and many block counts, then the
 * two-call sizing protocol and argument checking. */
#include <criterion/criterion.h>

#include "ringfetch.h"
#include "base/error.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define P RF_STEP_PREFETCH
#define A RF_STEP_AWAIT
#define C RF_STEP_COMPUTE

static const char *kind_name(rf_step_kind k)
{
	switch (k) {
	case RF_STEP_PREFETCH:
		return "PREFETCH";
	case RF_STEP_AWAIT:
		return "AWAIT";
	case RF_STEP_COMPUTE:
		return "COMPUTE";
	}
	return "?";
}

/* Forget the previous detail so that a test can see that a failing call sets a new one. */
static void clear_errmsg(void)
{
	rf__err(RF_OK, "%s", "");
	cr_assert_str_empty(rf_errmsg());
}

/* Plan nblocks/depth into a fresh malloc'd array (exact size); *n gets the length. */
static rf_step *plan(size_t nblocks, unsigned depth, size_t *n)
{
	size_t need = 12345;
	int rc = rf_plan_ring(nblocks, depth, NULL, 0, &need);
	if (nblocks == 0)
		cr_assert_eq(rc, RF_OK, "N=0 D=%u: sizing call gave %d", depth, rc);
	else
		cr_assert_eq(rc, RF_ENOSPC, "N=%zu D=%u: sizing call gave %d", nblocks, depth, rc);
	cr_assert_eq(need, 3 * nblocks, "N=%zu D=%u: need %zu", nblocks, depth, need);
	rf_step *s = malloc((need ? need : 1) * sizeof *s);
	cr_assert_not_null(s);
	size_t len = 777;
	rc = rf_plan_ring(nblocks, depth, s, need, &len);
	cr_assert_eq(rc, RF_OK, "N=%zu D=%u: rc %d (%s)", nblocks, depth, rc, rf_errmsg());
	cr_assert_eq(len, 3 * nblocks);
	*n = len;
	return s;
}

static void expect_step(const rf_step *s, size_t i, rf_step_kind kind, size_t block, unsigned slot)
{
	cr_assert(s[i].kind == kind && s[i].block == block && s[i].slot == slot,
		  "step %zu: got %s b%zu s%u, want %s b%zu s%u", i, kind_name(s[i].kind), s[i].block, s[i].slot,
		  kind_name(kind), block, slot);
}

Test(plan, double_buffer_n4_exact)
{
	/* P0/0 P1/1 A0 C0/0 P2/0 A1 C1/1 P3/1 A2 C2/0 A3 C3/1 */
	static const struct {
		rf_step_kind k;
		size_t b;
		unsigned s;
	} want[] = {{P, 0, 0}, {P, 1, 1}, {A, 0, 0}, {C, 0, 0}, {P, 2, 0}, {A, 1, 1},
		    {C, 1, 1}, {P, 3, 1}, {A, 2, 0}, {C, 2, 0}, {A, 3, 1}, {C, 3, 1}};
	rf_step s[12];
	size_t len = 0;
	cr_assert_eq(rf_plan_ring(4, 2, s, 12, &len), RF_OK);
	cr_assert_eq(len, 12);
	for (size_t i = 0; i < 12; i++)
		expect_step(s, i, want[i].k, want[i].b, want[i].s);
}

Test(plan, depth1_sequential)
{
	size_t n;
	rf_step *s = plan(7, 1, &n);
	cr_assert_eq(n, 21);
	for (size_t b = 0; b < 7; b++) {
		expect_step(s, 3 * b + 0, P, b, 0);
		expect_step(s, 3 * b + 1, A, b, 0);
		expect_step(s, 3 * b + 2, C, b, 0);
	}
	free(s);
}

Test(plan, depth3_exact)
{
	/* prime P0 P1, then per n: P n+2 (if any), A n, C n */
	static const struct {
		rf_step_kind k;
		size_t b;
		unsigned s;
	} want[] = {{P, 0, 0}, {P, 1, 1}, {P, 2, 2}, {A, 0, 0}, {C, 0, 0}, {P, 3, 0}, {A, 1, 1},
		    {C, 1, 1}, {P, 4, 1}, {A, 2, 2}, {C, 2, 2}, {A, 3, 0}, {C, 3, 0}, {A, 4, 1}, {C, 4, 1}};
	size_t n;
	rf_step *s = plan(5, 3, &n);
	cr_assert_eq(n, sizeof want / sizeof want[0]);
	for (size_t i = 0; i < n; i++)
		expect_step(s, i, want[i].k, want[i].b, want[i].s);
	free(s);
}

Test(plan, empty_plan)
{
	for (unsigned d = 1; d <= 16; d++) {
		size_t len = 99;
		cr_assert_eq(rf_plan_ring(0, d, NULL, 0, &len), RF_OK, "D=%u", d);
		cr_assert_eq(len, 0);
		rf_step sentinel = {RF_STEP_COMPUTE, 4242, 42};
		rf_step s[2] = {sentinel, sentinel};
		len = 99;
		cr_assert_eq(rf_plan_ring(0, d, s, 2, &len), RF_OK);
		cr_assert_eq(len, 0);
		cr_assert(s[0].block == 4242 && s[0].slot == 42 && s[1].block == 4242, "N=0 wrote steps");
	}
	cr_assert_eq(rf_plan_ring(0, 1, NULL, 0, NULL), RF_OK);
}

Test(plan, single_block)
{
	const unsigned depths[] = {1, 2, 3, 4, 8, 16, 1023, RF_MAX_DEPTH};
	for (size_t i = 0; i < sizeof depths / sizeof depths[0]; i++) {
		rf_step s[3];
		size_t len = 0;
		cr_assert_eq(rf_plan_ring(1, depths[i], s, 3, &len), RF_OK, "D=%u", depths[i]);
		cr_assert_eq(len, 3);
		expect_step(s, 0, P, 0, 0);
		expect_step(s, 1, A, 0, 0);
		expect_step(s, 2, C, 0, 0);
	}
}

Test(plan, fewer_blocks_than_depth)
{
	/* N=3, D=8: everything is primed up front, then A/C pairs. */
	size_t n;
	rf_step *s = plan(3, 8, &n);
	cr_assert_eq(n, 9);
	expect_step(s, 0, P, 0, 0);
	expect_step(s, 1, P, 1, 1);
	expect_step(s, 2, P, 2, 2);
	for (size_t b = 0; b < 3; b++) {
		expect_step(s, 3 + 2 * b, A, b, (unsigned)b);
		expect_step(s, 4 + 2 * b, C, b, (unsigned)b);
	}
	free(s);
}

/* Check every invariant of the schedule for one (nblocks, depth). */
static void check_invariants(size_t N, unsigned D)
{
	size_t n;
	rf_step *s = plan(N, D, &n);
	size_t *pos_p = malloc((N ? N : 1) * sizeof(size_t));
	size_t *pos_a = malloc((N ? N : 1) * sizeof(size_t));
	size_t *pos_c = malloc((N ? N : 1) * sizeof(size_t));
	size_t *slot_owner = malloc((size_t)D * sizeof(size_t)); /* block+1 live in slot, 0 = free */
	cr_assert(pos_p && pos_a && pos_c && slot_owner);
	for (size_t b = 0; b < N; b++)
		pos_p[b] = pos_a[b] = pos_c[b] = SIZE_MAX;
	for (unsigned k = 0; k < D; k++)
		slot_owner[k] = 0;
	size_t live = 0, next_compute = 0;
	for (size_t i = 0; i < n; i++) {
		const rf_step *x = &s[i];
		cr_assert(x->kind == P || x->kind == A || x->kind == C, "N=%zu D=%u step %zu: kind %d", N, D, i,
			  (int)x->kind);
		cr_assert_lt(x->block, N, "N=%zu D=%u step %zu: block %zu", N, D, i, x->block);
		cr_assert_eq(x->slot, (unsigned)(x->block % D), "N=%zu D=%u step %zu: slot %u for block %zu", N, D,
			     i, x->slot, x->block);
		size_t b = x->block;
		if (x->kind == P) {
			cr_assert_eq(pos_p[b], SIZE_MAX, "N=%zu D=%u: block %zu prefetched twice", N, D, b);
			pos_p[b] = i;
			/* WAR: the previous reader of this slot has computed. */
			if (b >= D)
				cr_assert_neq(pos_c[b - D], SIZE_MAX,
					      "N=%zu D=%u: PREFETCH %zu at step %zu before COMPUTE %zu", N, D, b, i,
					      b - D);
			cr_assert_eq(slot_owner[x->slot], 0,
				     "N=%zu D=%u step %zu: slot %u still holds block %zu when %zu is prefetched", N, D,
				     i, x->slot, slot_owner[x->slot] - 1, b);
			slot_owner[x->slot] = b + 1;
			live++;
			cr_assert_leq(live, D, "N=%zu D=%u step %zu: %zu blocks in flight", N, D, i, live);
		} else if (x->kind == A) {
			cr_assert_eq(pos_a[b], SIZE_MAX, "N=%zu D=%u: block %zu awaited twice", N, D, b);
			cr_assert_neq(pos_p[b], SIZE_MAX, "N=%zu D=%u: AWAIT %zu before its PREFETCH", N, D, b);
			pos_a[b] = i;
			/* Lookahead: the prefetch of n+D-1 was issued before AWAIT n. */
			if (b + D - 1 < N)
				cr_assert_neq(pos_p[b + D - 1], SIZE_MAX,
					      "N=%zu D=%u: AWAIT %zu at step %zu before PREFETCH %zu", N, D, b, i,
					      b + D - 1);
		} else {
			cr_assert_eq(pos_c[b], SIZE_MAX, "N=%zu D=%u: block %zu computed twice", N, D, b);
			cr_assert_neq(pos_a[b], SIZE_MAX, "N=%zu D=%u: COMPUTE %zu before its AWAIT", N, D, b);
			cr_assert_eq(b, next_compute, "N=%zu D=%u: COMPUTE %zu out of order (want %zu)", N, D, b,
				     next_compute);
			next_compute++;
			pos_c[b] = i;
			cr_assert_eq(slot_owner[x->slot], b + 1, "N=%zu D=%u: COMPUTE %zu but slot %u holds %zu", N,
				     D, b, x->slot, slot_owner[x->slot] - 1);
			slot_owner[x->slot] = 0;
			live--;
		}
	}
	cr_assert_eq(next_compute, N);
	cr_assert_eq(live, 0);
	for (size_t b = 0; b < N; b++) {
		cr_assert(pos_p[b] < pos_a[b] && pos_a[b] < pos_c[b], "N=%zu D=%u: block %zu order P%zu A%zu C%zu",
			  N, D, b, pos_p[b], pos_a[b], pos_c[b]);
		/* The AWAIT of a block directly precedes its COMPUTE. */
		cr_assert_eq(pos_a[b] + 1, pos_c[b]);
		/* Maximal overlap: with D > 1 a block's prefetch is issued as early as the ring allows,
		 * i.e. right after COMPUTE b-D (or in the prime when b < D-1). */
		if (b >= D)
			cr_assert_eq(pos_p[b], pos_c[b - D] + 1, "N=%zu D=%u: PREFETCH %zu not right after COMPUTE %zu",
				     N, D, b, b - D);
		else if (b + 1 < D)
			cr_assert_eq(pos_p[b], b, "N=%zu D=%u: prime PREFETCH %zu at step %zu", N, D, b, pos_p[b]);
	}
	free(pos_p);
	free(pos_a);
	free(pos_c);
	free(slot_owner);
	free(s);
}

Test(plan, invariants_all_depths)
{
	static const size_t extra[] = {63, 64, 65, 100, 127, 128, 129, 257, 1000};
	for (unsigned D = 1; D <= 16; D++) {
		for (size_t N = 0; N <= 40; N++)
			check_invariants(N, D);
		for (size_t i = 0; i < sizeof extra / sizeof extra[0]; i++)
			check_invariants(extra[i], D);
	}
}

Test(plan, invariants_large_depths)
{
	static const unsigned depths[] = {31, 64, 100, 511, 1023, RF_MAX_DEPTH};
	static const size_t ns[] = {0, 1, 2, 30, 1023, 1024, 1025, 3000};
	for (size_t i = 0; i < sizeof depths / sizeof depths[0]; i++)
		for (size_t j = 0; j < sizeof ns / sizeof ns[0]; j++)
			check_invariants(ns[j], depths[i]);
}

Test(plan, pure_function)
{
	size_t n1, n2;
	rf_step *a = plan(33, 5, &n1);
	rf_step *b = plan(33, 5, &n2);
	cr_assert_eq(n1, n2);
	for (size_t i = 0; i < n1; i++)
		cr_assert(a[i].kind == b[i].kind && a[i].block == b[i].block && a[i].slot == b[i].slot);
	free(a);
	free(b);
}

Test(plan, sizing_two_call)
{
	size_t len = 0;
	clear_errmsg();
	cr_assert_eq(rf_plan_ring(10, 2, NULL, 0, &len), RF_ENOSPC);
	cr_assert_eq(len, 30);
	cr_assert_str_not_empty(rf_errmsg());

	/* cap one short: ENOSPC, nothing written, *len = steps needed. */
	rf_step buf[31];
	const rf_step sentinel = {RF_STEP_AWAIT, 0xdeadbeef, 0xabcdu};
	for (size_t i = 0; i < 31; i++)
		buf[i] = sentinel;
	for (size_t cap = 1; cap < 30; cap++) {
		len = 0;
		clear_errmsg();
		cr_assert_eq(rf_plan_ring(10, 2, buf, cap, &len), RF_ENOSPC, "cap %zu", cap);
		cr_assert_eq(len, 30, "cap %zu", cap);
		cr_assert_str_not_empty(rf_errmsg());
		for (size_t i = 0; i < 31; i++)
			cr_assert(buf[i].kind == sentinel.kind && buf[i].block == sentinel.block &&
					  buf[i].slot == sentinel.slot,
				  "cap %zu: step %zu written on ENOSPC", cap, i);
	}
	/* ENOSPC with len NULL is still ENOSPC. */
	cr_assert_eq(rf_plan_ring(10, 2, buf, 5, NULL), RF_ENOSPC);
	cr_assert_eq(buf[0].block, sentinel.block);

	/* exact cap: writes exactly 30 steps and not the 31st. */
	len = 0;
	cr_assert_eq(rf_plan_ring(10, 2, buf, 30, &len), RF_OK);
	cr_assert_eq(len, 30);
	cr_assert(buf[30].kind == sentinel.kind && buf[30].block == sentinel.block && buf[30].slot == sentinel.slot,
		  "wrote past 3*nblocks");
	expect_step(buf, 0, P, 0, 0);
	expect_step(buf, 29, C, 9, 1);

	/* larger cap: fine, same steps, nothing past 3N. */
	for (size_t i = 0; i < 31; i++)
		buf[i] = sentinel;
	len = 0;
	cr_assert_eq(rf_plan_ring(10, 2, buf, 31, &len), RF_OK);
	cr_assert_eq(len, 30);
	cr_assert_eq(buf[30].block, sentinel.block);
	expect_step(buf, 29, C, 9, 1);

	/* len NULL on success. */
	rf_step b3[3];
	cr_assert_eq(rf_plan_ring(1, 3, b3, 3, NULL), RF_OK);
	expect_step(b3, 2, C, 0, 0);
}

Test(plan, sizing_largest_nblocks)
{
	/* nblocks = SIZE_MAX / 3 does not overflow: sizing works. */
	size_t len = 0;
	cr_assert_eq(rf_plan_ring(SIZE_MAX / 3, 2, NULL, 0, &len), RF_ENOSPC);
	cr_assert_eq(len, (SIZE_MAX / 3) * 3);
}

Test(plan, bad_depth)
{
	rf_step s[6];
	size_t len = 4242;
	clear_errmsg();
	cr_assert_eq(rf_plan_ring(2, 0, s, 6, &len), RF_EINVAL);
	cr_assert_str_not_empty(rf_errmsg());
	clear_errmsg();
	cr_assert_eq(rf_plan_ring(2, RF_MAX_DEPTH + 1, s, 6, &len), RF_EINVAL);
	cr_assert_str_not_empty(rf_errmsg());
	clear_errmsg();
	cr_assert_eq(rf_plan_ring(0, 0, NULL, 0, &len), RF_EINVAL);
	cr_assert_str_not_empty(rf_errmsg());
	clear_errmsg();
	cr_assert_eq(rf_plan_ring(2, UINT32_MAX, s, 6, NULL), RF_EINVAL);
	cr_assert_str_not_empty(rf_errmsg());

	len = 0;
	cr_assert_eq(rf_plan_ring(2, RF_MAX_DEPTH, s, 6, &len), RF_OK);
	cr_assert_eq(len, 6);
	expect_step(s, 0, P, 0, 0);
	expect_step(s, 1, P, 1, 1);
	expect_step(s, 2, A, 0, 0);
}

Test(plan, steps_null_with_cap)
{
	size_t len = 4242;
	clear_errmsg();
	cr_assert_eq(rf_plan_ring(2, 2, NULL, 6, &len), RF_EINVAL);
	cr_assert_str_not_empty(rf_errmsg());
	clear_errmsg();
	cr_assert_eq(rf_plan_ring(0, 2, NULL, 1, &len), RF_EINVAL);
	cr_assert_str_not_empty(rf_errmsg());
}

Test(plan, nblocks_overflow)
{
	size_t len = 4242;
	clear_errmsg();
	cr_assert_eq(rf_plan_ring(SIZE_MAX / 3 + 1, 2, NULL, 0, &len), RF_EINVAL);
	cr_assert_str_not_empty(rf_errmsg());
	clear_errmsg();
	cr_assert_eq(rf_plan_ring(SIZE_MAX, 1, NULL, 0, &len), RF_EINVAL);
	cr_assert_str_not_empty(rf_errmsg());
}
