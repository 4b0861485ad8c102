/* base/parse.h — the one decimal parser of the library: configuration values (runtime/config.c), CPU
 * lists and staging policies (memory/policy.c) read numbers through it, so that every number a user writes is
 * held to the same grammar: decimal digits only — no sign, no space, no base prefix, no empty string. */
#ifndef RF_BASE_PARSE_H
#define RF_BASE_PARSE_H

#include <stdint.h>

/* Parse the leading decimal digits of s (at least one) into *out, refusing values over max; *end is
 * set to the first byte after the digits. 0 on success; -1 if s is NULL, starts with no digit or the
 * value exceeds max (nothing is written then). For numbers followed by a suffix ("64K"). */
int rf__parse_decimal(const char *s, uint64_t max, uint64_t *out, const char **end);

/* The whole of s is a decimal number in [lo, hi]: 0 and *out; -1 otherwise (*out untouched). */
int rf__parse_uint(const char *s, uint64_t lo, uint64_t hi, uint64_t *out);

/* The largest CPU number a CPU list may name: far above any machine's (Linux's NR_CPUS is at most
 * 8192), low enough that a set built from the list stays small. */
#define RF__CPU_LIST_MAX 1048575u

/* s is a CPU list in hwloc's list syntax, finite ranges only (docs/deployment.md): items separated by
 * single commas, each a CPU number or a range lo-hi with lo <= hi, numbers in 0..RF__CPU_LIST_MAX — no
 * space, no empty item, no open range ("0-"). 0 if it is; -1 otherwise (NULL and "" included). */
int rf__parse_cpu_list(const char *s);

#endif
