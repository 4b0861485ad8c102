/* base/parse.c — strict decimal numbers and CPU lists (see parse.h). Loose parsing (strtoul's sign,
 * space, base prefixes, silent wrap-around) turns typos into other numbers. */
#include "base/parse.h"

#include <stddef.h>

int rf__parse_decimal(const char *s, uint64_t max, uint64_t *out, const char **end)
{
	uint64_t v = 0;
	const char *c = s;
	if (s == NULL || *s < '0' || *s > '9')
		return -1;
	for (; *c >= '0' && *c <= '9'; c++) {
		unsigned d = (unsigned)(*c - '0');
		if (d > max || v > (max - d) / 10) /* v * 10 + d > max, without overflowing */
			return -1;
		v = v * 10 + d;
	}
	*out = v;
	*end = c;
	return 0;
}

int rf__parse_uint(const char *s, uint64_t lo, uint64_t hi, uint64_t *out)
{
	uint64_t v;
	const char *end;
	if (rf__parse_decimal(s, hi, &v, &end) != 0 || *end != '\0' || v < lo)
		return -1;
	*out = v;
	return 0;
}

int rf__parse_cpu_list(const char *s)
{
	if (s == NULL)
		return -1;
	for (;;) {
		uint64_t lo, hi;
		if (rf__parse_decimal(s, RF__CPU_LIST_MAX, &lo, &s) != 0)
			return -1;
		if (*s == '-' && (rf__parse_decimal(s + 1, RF__CPU_LIST_MAX, &hi, &s) != 0 || hi < lo))
			return -1;
		if (*s == '\0')
			return 0;
		if (*s++ != ',')
			return -1;
	}
}
