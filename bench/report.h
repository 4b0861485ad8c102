/* bench/report.h — the results of a sweep: one record per (backend, depth, size, method), printed as a
 * table and written as JSON, CSV and a gnuplot PNG. */
#ifndef RFB_REPORT_H
#define RFB_REPORT_H

#include "options.h"

#include <stdio.h>

typedef struct rfb_record {
	const char *backend; /* the resolved backend ("threads", "cpu") or "-" for baselines */
	const char *method;  /* "ringfetch", "rf-local", "sequential", "hand", "starpu" */
	unsigned depth, copy_queues; /* depth 0: auto (the depth it chose is auto_depth) */
	unsigned auto_depth;
	size_t size, blocks;
	double us_per_block;
	double copy_us, compute_us; /* measured alone, per block */
	double efficiency;          /* max(copy, compute) / us_per_block */
	double speedup;             /* sequential / this; NAN when no sequential baseline */
	double vs_hand, vs_starpu;  /* this / hand, this / starpu (same depth); NAN when not measured */
	char ran[48];               /* ringfetch: how its measured runs ran (rf_stats.schedule): "ring",
	                               "inline", "local", or "inline k/n" when mixed; "" for baselines */
} rfb_record;

typedef struct rfb_results {
	rfb_record *r;
	size_t n, cap;
} rfb_results;

rfb_record *rfb_results_add(rfb_results *res);
void rfb_results_free(rfb_results *res);
/* Fill speedup / vs_hand / vs_starpu from the other records of the same size (and depth). */
void rfb_results_relate(rfb_results *res);

void rfb_print_table(const rfb_results *res, FILE *f);
int rfb_write_json(const rfb_results *res, const rfb_opts *o, const char *machine_json, const char *path);
int rfb_write_csv(const rfb_results *res, const char *path);
/* A PNG through gnuplot: efficiency vs block size, one line per depth, baselines dashed. Returns 0,
 * or -1 with the reason in why (no gnuplot, ...). */
int rfb_write_plot(const rfb_results *res, const char *path, char *why, size_t cap);

#endif
