/* bench/options.h — ringfetch-bench's command line, parsed strictly: a sweep that silently ran
 * something other than what was asked would mislead the person choosing a depth. */
#ifndef RFB_OPTIONS_H
#define RFB_OPTIONS_H

#include <stddef.h>

#define RFB_MAX_LIST 16
#define RFB_MAX_SIZE ((size_t)1 << 30) /* 1 GiB per block */
#define RFB_DEPTH_AUTO 0u                /* --depth auto */

typedef enum rfb_compute_kind { RFB_SUM, RFB_SPIN, RFB_RATIO, RFB_DSUM } rfb_compute_kind;

/* The model's name as --compute spells it ("sum", "dsum", "spin", "ratio"). */
const char *rfb_compute_name(rfb_compute_kind k);

enum { RFB_BASE_SEQUENTIAL = 1, RFB_BASE_HAND = 2, RFB_BASE_STARPU = 4 };
/* --locality: "ringfetch" computes on the caller (the default contract); "rf-local" with
 * RF_LOCALITY_COPIER (each block computed by the thread that copied it). */
enum { RFB_LOC_CALLER = 1, RFB_LOC_COPIER = 2 };

typedef struct rfb_opts {
	const char *backends[RFB_MAX_LIST];
	unsigned nbackends;
	unsigned depths[RFB_MAX_LIST];
	unsigned ndepths;
	size_t sizes[RFB_MAX_LIST];
	unsigned nsizes;
	size_t blocks;        /* 0: chosen per size from bytes_per_rep */
	size_t bytes_per_rep; /* data streamed per measured run when blocks is 0 */
	unsigned copy_queues;
	rfb_compute_kind compute;
	double compute_arg; /* ns per KiB (spin) or R (ratio) */
	double jitter;      /* 0..1 */
	unsigned reps;
	unsigned long long seed;
	unsigned baselines; /* RFB_BASE_* */
	unsigned locality;  /* RFB_LOC_*: which ringfetch contestants (RF_LOCALITY_CALLER, _COPIER) */
	unsigned starpu_ncpu;
	const char *json, *csv, *plot, *trace, *dot;
	int quiet;
} rfb_opts;

/* Defaults, then argv. Returns 0, 1 for --help (usage printed to stdout), or 2 with a one-line reason
 * in err (the caller prints it and exits with status 2). */
int rfb_parse(int argc, char **argv, rfb_opts *o, char *err, size_t errcap);
/* The usage text. */
const char *rfb_usage(void);
/* A whole decimal number in lo..hi into *out: 0, or -1 if malformed or out of range. */
int rfb_parse_count(const char *s, unsigned long long lo, unsigned long long hi, unsigned long long *out);
/* "64K", "1M", "1.5M", "4096" -> bytes; 0 on a malformed or out-of-range value. */
size_t rfb_parse_size(const char *s);

/* The median of v[0..n) (n >= 1; sorts v in place): what every tool reports of its repetitions. */
double rfb_median(double *v, size_t n);
/* Seconds on the monotonic clock: what every tool times with. */
double rfb_now(void);

#endif
