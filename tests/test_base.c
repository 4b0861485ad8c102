/*
 * tests/test_base.c — base/parse.h (the library's one decimal grammar, and CPU lists) and base/align.h
 * (the one alignment rule: slot strides, mappings). White-box (static library).
 */
#include <criterion/criterion.h>

#include "base/align.h"
#include "base/parse.h"

#include <stdint.h>

Test(base, parse_uint_is_strict)
{
	uint64_t v = 7;
	cr_assert_eq(rf__parse_uint("0", 0, 10, &v), 0);
	cr_assert_eq(v, 0);
	cr_assert_eq(rf__parse_uint("0010", 1, 10, &v), 0);
	cr_assert_eq(v, 10);
	cr_assert_eq(rf__parse_uint("18446744073709551615", 0, UINT64_MAX, &v), 0);
	cr_assert_eq(v, UINT64_MAX);
	static const char *const bad[] = {"", "11", "-1", "+1", " 1", "1 ", "0x1", "1a", "18446744073709551616"};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		v = 7;
		cr_assert_eq(rf__parse_uint(bad[i], 1, i + 1 == sizeof bad / sizeof bad[0] ? UINT64_MAX : 10, &v), -1,
			     "\"%s\" accepted", bad[i]);
		cr_assert_eq(v, 7, "written on failure");
	}
	cr_assert_eq(rf__parse_uint("0", 1, 10, &v), -1, "under lo");
	cr_assert_eq(rf__parse_uint(NULL, 0, 10, &v), -1);
	const char *end;
	cr_assert_eq(rf__parse_decimal("64K", 100, &v, &end), 0);
	cr_assert_eq(v, 64);
	cr_assert_str_eq(end, "K");
	cr_assert_eq(rf__parse_decimal("K", 100, &v, &end), -1);
	cr_assert_eq(rf__parse_decimal("9", 8, &v, &end), -1, "a digit over max");
}

Test(base, align_up)
{
	cr_assert_eq(rf__align_up(0, 64), 0);
	cr_assert_eq(rf__align_up(1, 64), 64);
	cr_assert_eq(rf__align_up(64, 64), 64);
	cr_assert_eq(rf__align_up(65, 4096), 4096);
	cr_assert_eq(rf__align_up(SIZE_MAX - 10, 64), 0, "overflow");
	cr_assert_eq(rf__align_up(0, RF__ALIGN_CPU), 0, "a slot stride of 0 bytes");
	cr_assert_eq(rf__align_up(1, RF__ALIGN_CPU), 64);
	cr_assert_eq(rf__align_up(1001, RF__ALIGN_DEVICE), 1024);
	cr_assert_eq(rf__align_up(4097, RF__ALIGN_PINNED), 8192);
	cr_assert_eq(rf__align_up(1u << 20, RF__ALIGN_PINNED), 1u << 20);
	cr_assert_eq(rf__align_up(SIZE_MAX, RF__ALIGN_CPU), 0, "overflow");
}

/* CPU lists (worker_cpus): hwloc's list syntax, strictly. */
static const char *const cpu_lists_good[] = {
	"0", "7", "0,1", "2-3,6", "0-0", "1-1", "0-3,8-11", "3,1,2", "1048575", "0-1048575", "0007",
	"1,1", "0-3,2-5",
};
static const char *const cpu_lists_bad[] = {
	"", "-", ",", "0,", ",0", "0,,1", "0--1", "-1", "1-", "0-", "1-0", "5-3", "1-1-1", "0-1-2",
	"0 ,1", " 0", "0 ", "0-1 ", "0x3", "a", "two", "1.5", "+1", "0;1", "1048576", "0-1048576",
	"99999999999999999999999",
};

Test(base, parse_cpu_list_is_strict)
{
	for (size_t i = 0; i < sizeof cpu_lists_good / sizeof cpu_lists_good[0]; i++)
		cr_assert_eq(rf__parse_cpu_list(cpu_lists_good[i]), 0, "\"%s\" refused", cpu_lists_good[i]);
	for (size_t i = 0; i < sizeof cpu_lists_bad / sizeof cpu_lists_bad[0]; i++)
		cr_assert_eq(rf__parse_cpu_list(cpu_lists_bad[i]), -1, "\"%s\" accepted", cpu_lists_bad[i]);
	cr_assert_eq(rf__parse_cpu_list(NULL), -1);
}
