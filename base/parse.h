/* base/parse.h — the one decimal parser: every number a user writes (configuration, CPU lists, staging
 * policies) is decimal digits only — no sign, no space, no base prefix, no empty string. */
#ifndef RF_BASE_PARSE_H
#define RF_BASE_PARSE_H

#include <stdint.h>

/* The leading decimal digits of s (at least one) into *out, *end after them (for suffixes: "64K"). 0, or
 * -1 if s is NULL, starts with no digit or the value exceeds max (nothing written). */
int rf__parse_decimal(const char *s, uint64_t max, uint64_t *out, const char **end);

/* The whole of s is a decimal number in [lo, hi]: 0 and *out; -1 otherwise (*out untouched). */
int rf__parse_uint(const char *s, uint64_t lo, uint64_t hi, uint64_t *out);

/* The largest CPU number a list may name: far above any machine's, low enough to keep sets small. */
#define RF__CPU_LIST_MAX 1048575u

/* 0 if s is a CPU list in hwloc's syntax, finite ranges only: comma-separated CPU numbers or ranges lo-hi
 * (lo <= hi), in 0..RF__CPU_LIST_MAX, no space, no empty item; -1 otherwise (NULL and "" included). */
int rf__parse_cpu_list(const char *s);

#endif
