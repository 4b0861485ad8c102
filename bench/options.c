/* bench/options.c — parsing ringfetch-bench's options. */
#include "options.h"

#include <ringfetch.h>

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

const char *rfb_usage(void)
{
	return "usage: ringfetch-bench [options]\n"
	       "  --backend LIST       cpu, threads, cuda, auto (default auto)\n"
	       "  --depth LIST         ring depths, 1..1024 or auto (default 1,2,3,4,8)\n"
	       "  --size LIST          block sizes with K/M/G suffixes, multiples of 4, <= 1G (default 64K,256K,1M,4M)\n"
	       "  --blocks N           blocks per run (default: about --bytes-per-rep of data, 64..100000)\n"
	       "  --bytes-per-rep B    data per measured run when --blocks is not given (default 32M)\n"
	       "  --copy-queues K      copy queues (default 1; needs depth >= K+1)\n"
	       "  --compute MODEL      sum | dsum | spin:NS_PER_KIB | ratio:R (default sum); dsum: the floats summed\n"
	       "                       as doubles, one dependency chain (arithmetic-bound: where a ring is hardest to win)\n"
	       "  --jitter J           0..1: block sizes vary in [size*(1-J), size], spin computes by +-J (default 0)\n"
	       "  --reps R             alternating repetitions, median reported (default 5)\n"
	       "  --seed S             seed for jitter (default 1)\n"
	       "  --baselines LIST     sequential,hand,starpu or none (default sequential,hand,starpu)\n"
	       "  --starpu-ncpu N      StarPU CPU workers (default cores-1, at least 1)\n"
	       "  --locality LIST      caller,copier: ringfetch computing on the caller (\"ringfetch\", default) and/or\n"
	       "                       each block on the thread that copied it (\"rf-local\", RF_LOCALITY_COPIER)\n"
	       "  --json FILE  --csv FILE  --plot FILE.png  --trace FILE.json  --dot FILE.dot\n"
	       "  --quiet              no progress line on stderr\n";
}

static int fail(char *err, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(char *err, size_t cap, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(err, cap, fmt, ap);
	va_end(ap);
	return 2;
}

const char *rfb_compute_name(rfb_compute_kind k)
{
	return k == RFB_SUM ? "sum" : k == RFB_DSUM ? "dsum" : k == RFB_SPIN ? "spin" : "ratio";
}

size_t rfb_parse_size(const char *s)
{
	char *end;
	errno = 0;
	double v = strtod(s, &end);
	double m = 1;
	if (end == s || errno != 0 || !(v > 0))
		return 0;
	if (*end == 'K' || *end == 'k')
		m = 1024.0, end++;
	else if (*end == 'M' || *end == 'm')
		m = 1024.0 * 1024, end++;
	else if (*end == 'G' || *end == 'g')
		m = 1024.0 * 1024 * 1024, end++;
	if (*end != '\0' || v * m > (double)RFB_MAX_SIZE || v * m < 1)
		return 0;
	return (size_t)(v * m);
}

/* Split a comma list into at most RFB_MAX_LIST items, calling one(item) for each. */
static int each_item(const char *list, const char *opt, char *err, size_t cap,
		     int (*one)(const char *item, void *ctx, char *err, size_t cap), void *ctx)
{
	char buf[512];
	if (strlen(list) >= sizeof buf || list[0] == '\0')
		return fail(err, cap, "%s: empty or too long list", opt);
	size_t len = strlen(list);
	if (list[0] == ',' || list[len - 1] == ',' || strstr(list, ",,") != NULL)
		return fail(err, cap, "%s: empty item in \"%s\"", opt, list);
	memcpy(buf, list, len + 1);
	unsigned n = 0;
	for (char *save, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		if (++n > RFB_MAX_LIST)
			return fail(err, cap, "%s: at most %d items", opt, RFB_MAX_LIST);
		int rc = one(tok, ctx, err, cap);
		if (rc != 0)
			return rc;
	}
	return 0;
}

static int one_backend(const char *s, void *ctx, char *err, size_t cap)
{
	static const char *const known[] = {"cpu", "threads", "cuda", "auto"};
	rfb_opts *o = ctx;
	for (unsigned i = 0; i < 4; i++)
		if (strcmp(s, known[i]) == 0) {
			o->backends[o->nbackends++] = known[i];
			return 0;
		}
	return fail(err, cap, "--backend: unknown backend \"%s\" (cpu, threads, cuda, auto)", s);
}

static int one_depth(const char *s, void *ctx, char *err, size_t cap)
{
	rfb_opts *o = ctx;
	char *end;
	if (!strcmp(s, "auto")) { /* RFB_DEPTH_AUTO: the library picks it on the first run */
		o->depths[o->ndepths++] = RFB_DEPTH_AUTO;
		return 0;
	}
	unsigned long v = strtoul(s, &end, 10);
	if (*s < '0' || *s > '9' || *end != '\0' || v < 1 || v > RF_MAX_DEPTH)
		return fail(err, cap, "--depth: \"%s\" is not a depth in 1..%u or auto", s, RF_MAX_DEPTH);
	o->depths[o->ndepths++] = (unsigned)v;
	return 0;
}

static int one_size(const char *s, void *ctx, char *err, size_t cap)
{
	rfb_opts *o = ctx;
	size_t v = rfb_parse_size(s);
	if (v == 0 || v % 4 != 0)
		return fail(err, cap, "--size: \"%s\" is not a size in 4..1G and a multiple of 4", s);
	o->sizes[o->nsizes++] = v;
	return 0;
}

static int one_baseline(const char *s, void *ctx, char *err, size_t cap)
{
	rfb_opts *o = ctx;
	if (!strcmp(s, "sequential"))
		o->baselines |= RFB_BASE_SEQUENTIAL;
	else if (!strcmp(s, "hand"))
		o->baselines |= RFB_BASE_HAND;
	else if (!strcmp(s, "starpu"))
		o->baselines |= RFB_BASE_STARPU;
	else if (strcmp(s, "none") != 0)
		return fail(err, cap, "--baselines: unknown baseline \"%s\" (sequential, hand, starpu, none)", s);
	return 0;
}

static int one_locality(const char *s, void *ctx, char *err, size_t cap)
{
	rfb_opts *o = ctx;
	if (!strcmp(s, "caller"))
		o->locality |= RFB_LOC_CALLER;
	else if (!strcmp(s, "copier"))
		o->locality |= RFB_LOC_COPIER;
	else
		return fail(err, cap, "--locality: unknown locality \"%s\" (caller, copier)", s);
	return 0;
}

static int parse_compute(rfb_opts *o, const char *v, char *err, size_t cap)
{
	char *end;
	if (!strcmp(v, "sum") || !strcmp(v, "dsum")) {
		o->compute = v[0] == 'd' ? RFB_DSUM : RFB_SUM;
		return 0;
	}
	int spin = !strncmp(v, "spin:", 5), ratio = !strncmp(v, "ratio:", 6);
	if (spin || ratio) {
		const char *num = v + (spin ? 5 : 6);
		errno = 0;
		double d = strtod(num, &end);
		if (end != num && *end == '\0' && errno == 0 && d >= 0 && d <= (spin ? 1e9 : 1000)) {
			o->compute = spin ? RFB_SPIN : RFB_RATIO;
			o->compute_arg = d;
			return 0;
		}
	}
	return fail(err, cap, "--compute: \"%s\" is not sum, dsum, spin:NS_PER_KIB (0..1e9) or ratio:R (0..1000)", v);
}

int rfb_parse_count(const char *s, unsigned long long lo, unsigned long long hi, unsigned long long *out)
{
	char *end;
	errno = 0;
	unsigned long long x = strtoull(s, &end, 10);
	if (*s < '0' || *s > '9' || *end != '\0' || errno != 0 || x < lo || x > hi)
		return -1;
	*out = x;
	return 0;
}

static int parse_ulong(const char *opt, const char *v, unsigned long long lo, unsigned long long hi,
		       unsigned long long *out, char *err, size_t cap)
{
	if (rfb_parse_count(v, lo, hi, out) != 0)
		return fail(err, cap, "%s: \"%s\" is not a whole number in %llu..%llu", opt, v, lo, hi);
	return 0;
}

static void defaults(rfb_opts *o)
{
	memset(o, 0, sizeof *o);
	o->backends[o->nbackends++] = "auto";
	static const unsigned d[] = {1, 2, 3, 4, 8};
	for (unsigned i = 0; i < 5; i++)
		o->depths[o->ndepths++] = d[i];
	static const size_t s[] = {64 << 10, 256 << 10, 1 << 20, 4 << 20};
	for (unsigned i = 0; i < 4; i++)
		o->sizes[o->nsizes++] = s[i];
	o->bytes_per_rep = 32u << 20;
	o->copy_queues = 1;
	o->reps = 5;
	o->seed = 1;
	o->baselines = RFB_BASE_SEQUENTIAL | RFB_BASE_HAND | RFB_BASE_STARPU;
	o->locality = RFB_LOC_CALLER;
}

/* One option with its value; returns 0, or 2 with err set. */
static int option(rfb_opts *o, const char *a, const char *v, char *err, size_t cap)
{
	unsigned long long x = 0;
	int rc = 0;
	if (!strcmp(a, "--backend"))
		o->nbackends = 0, rc = each_item(v, a, err, cap, one_backend, o);
	else if (!strcmp(a, "--depth"))
		o->ndepths = 0, rc = each_item(v, a, err, cap, one_depth, o);
	else if (!strcmp(a, "--size"))
		o->nsizes = 0, rc = each_item(v, a, err, cap, one_size, o);
	else if (!strcmp(a, "--baselines"))
		o->baselines = 0, rc = each_item(v, a, err, cap, one_baseline, o);
	else if (!strcmp(a, "--locality"))
		o->locality = 0, rc = each_item(v, a, err, cap, one_locality, o);
	else if (!strcmp(a, "--compute"))
		rc = parse_compute(o, v, err, cap);
	else if (!strcmp(a, "--blocks"))
		rc = parse_ulong(a, v, 1, 100000000, &x, err, cap), o->blocks = (size_t)x;
	else if (!strcmp(a, "--bytes-per-rep")) {
		if ((o->bytes_per_rep = rfb_parse_size(v)) == 0)
			rc = fail(err, cap, "%s: \"%s\" is not a size in 1..1G", a, v);
	} else if (!strcmp(a, "--copy-queues"))
		rc = parse_ulong(a, v, 1, RF_MAX_DEPTH - 1, &x, err, cap), o->copy_queues = (unsigned)x;
	else if (!strcmp(a, "--reps"))
		rc = parse_ulong(a, v, 1, 1000, &x, err, cap), o->reps = (unsigned)x;
	else if (!strcmp(a, "--seed"))
		rc = parse_ulong(a, v, 0, ~0ull, &x, err, cap), o->seed = x;
	else if (!strcmp(a, "--starpu-ncpu"))
		rc = parse_ulong(a, v, 1, 1024, &x, err, cap), o->starpu_ncpu = (unsigned)x;
	else if (!strcmp(a, "--jitter")) {
		char *end;
		o->jitter = strtod(v, &end);
		if (end == v || *end != '\0' || !(o->jitter >= 0 && o->jitter <= 1))
			rc = fail(err, cap, "--jitter: \"%s\" is not a number in 0..1", v);
	} else if (!strcmp(a, "--json"))
		o->json = v;
	else if (!strcmp(a, "--csv"))
		o->csv = v;
	else if (!strcmp(a, "--plot"))
		o->plot = v;
	else if (!strcmp(a, "--trace"))
		o->trace = v;
	else if (!strcmp(a, "--dot"))
		o->dot = v;
	else
		rc = fail(err, cap, "unknown option \"%s\"", a);
	return rc;
}

int rfb_parse(int argc, char **argv, rfb_opts *o, char *err, size_t cap)
{
	defaults(o);
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		if (!strcmp(a, "--help") || !strcmp(a, "-h"))
			return 1;
		if (!strcmp(a, "--quiet")) {
			o->quiet = 1;
			continue;
		}
		if (i + 1 >= argc)
			return fail(err, cap, "%s needs a value", a);
		int rc = option(o, a, argv[++i], err, cap);
		if (rc != 0)
			return rc;
	}
	for (unsigned i = 0; i < o->ndepths; i++)
		if (o->copy_queues > 1 && o->depths[i] != RFB_DEPTH_AUTO && o->depths[i] < o->copy_queues + 1)
			return fail(err, cap, "--copy-queues %u needs every depth >= %u (got %u)", o->copy_queues,
				    o->copy_queues + 1, o->depths[i]);
	return 0;
}

static int rfb_cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

double rfb_median(double *v, size_t n)
{
	qsort(v, n, sizeof *v, rfb_cmp_double);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

double rfb_now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}
