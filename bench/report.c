/* bench/report.c — table, JSON, CSV and plot. */
#include "report.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

rfb_record *rfb_results_add(rfb_results *res)
{
	if (res->n == res->cap) {
		size_t cap = res->cap ? 2 * res->cap : 64;
		rfb_record *r = realloc(res->r, cap * sizeof *r);
		if (r == NULL)
			return NULL;
		res->r = r;
		res->cap = cap;
	}
	rfb_record *x = &res->r[res->n++];
	memset(x, 0, sizeof *x);
	x->speedup = x->vs_hand = x->vs_starpu = NAN;
	return x;
}

void rfb_results_free(rfb_results *res)
{
	free(res->r);
	memset(res, 0, sizeof *res);
}

static const rfb_record *rfb_find(const rfb_results *res, const char *method, size_t size, unsigned depth)
{
	for (size_t i = 0; i < res->n; i++)
		if (!strcmp(res->r[i].method, method) && res->r[i].size == size && (depth == 0 || res->r[i].depth == depth))
			return &res->r[i];
	return NULL;
}

void rfb_results_relate(rfb_results *res)
{
	for (size_t i = 0; i < res->n; i++) {
		rfb_record *x = &res->r[i];
		const rfb_record *seq = rfb_find(res, "sequential", x->size, 0);
		const rfb_record *hand = rfb_find(res, "hand", x->size, x->depth);
		const rfb_record *sp = rfb_find(res, "starpu", x->size, x->depth);
		if (seq)
			x->speedup = seq->us_per_block / x->us_per_block;
		if (hand)
			x->vs_hand = x->us_per_block / hand->us_per_block;
		if (sp)
			x->vs_starpu = x->us_per_block / sp->us_per_block;
	}
}

/* A ratio column: "1.23x", or "-" when not measured. */
static void rfb_ratio(FILE *f, int width, double v)
{
	if (isnan(v))
		fprintf(f, " %*s", width, "-");
	else
		fprintf(f, " %*.2fx", width - 1, v);
}

void rfb_print_table(const rfb_results *res, FILE *f)
{
	fprintf(f, "%-10s %-10s %5s %9s %7s %11s %8s %7s %8s %8s %9s  %s\n", "method", "backend", "depth", "size",
		"blocks", "us/block", "GB/s", "effic.", "speedup", "vs hand", "vs starpu", "ran");
	size_t last = 0;
	for (size_t i = 0; i < res->n; i++) {
		const rfb_record *x = &res->r[i];
		if (i > 0 && x->size != last)
			fputc('\n', f);
		last = x->size;
		char size[32];
		if (x->size >= (1u << 20) && x->size % (1u << 20) == 0)
			snprintf(size, sizeof size, "%zuM", x->size >> 20);
		else if (x->size >= 1024 && x->size % 1024 == 0)
			snprintf(size, sizeof size, "%zuK", x->size >> 10);
		else
			snprintf(size, sizeof size, "%zu", x->size);
		char depth[16];
		if (x->depth == 0)
			snprintf(depth, sizeof depth, "a:%u", x->auto_depth);
		else
			snprintf(depth, sizeof depth, "%u", x->depth);
		fprintf(f, "%-10s %-10s %5s %9s %7zu %11.2f %8.2f %6.1f%%", x->method, x->backend, depth, size,
			x->blocks, x->us_per_block, (double)x->size / (x->us_per_block * 1e3), 100 * x->efficiency);
		rfb_ratio(f, 7, x->speedup);
		rfb_ratio(f, 8, x->vs_hand);
		rfb_ratio(f, 9, x->vs_starpu);
		fprintf(f, "  %s\n", x->ran);
	}
}

/* JSON numbers: NAN becomes null. */
static void rfb_jnum(FILE *f, const char *key, double v, int last)
{
	if (isnan(v))
		fprintf(f, "\"%s\": null%s", key, last ? "" : ", ");
	else
		fprintf(f, "\"%s\": %.6g%s", key, v, last ? "" : ", ");
}

int rfb_write_json(const rfb_results *res, const rfb_opts *o, const char *machine_json, const char *path)
{
	FILE *f = fopen(path, "w");
	if (f == NULL)
		return -1;
	fprintf(f, "{\n  \"machine\": %s,\n  \"options\": {\"reps\": %u, \"seed\": %llu, \"jitter\": %g, "
		   "\"compute\": \"%s\", \"compute_arg\": %g, \"copy_queues\": %u},\n  \"records\": [\n",
		machine_json, o->reps, o->seed, o->jitter,
		rfb_compute_name(o->compute), o->compute_arg, o->copy_queues);
	for (size_t i = 0; i < res->n; i++) {
		const rfb_record *x = &res->r[i];
		fprintf(f, "    {\"method\": \"%s\", \"backend\": \"%s\", \"depth\": %u, \"auto_depth\": %u, "
			   "\"copy_queues\": %u, \"size\": %zu, \"blocks\": %zu, \"ran\": \"%s\", ",
			x->method, x->backend, x->depth, x->auto_depth, x->copy_queues, x->size, x->blocks, x->ran);
		rfb_jnum(f, "us_per_block", x->us_per_block, 0);
		rfb_jnum(f, "gb_per_s", (double)x->size / (x->us_per_block * 1e3), 0);
		rfb_jnum(f, "copy_us", x->copy_us, 0);
		rfb_jnum(f, "compute_us", x->compute_us, 0);
		rfb_jnum(f, "efficiency", x->efficiency, 0);
		rfb_jnum(f, "speedup_vs_sequential", x->speedup, 0);
		rfb_jnum(f, "ratio_vs_hand", x->vs_hand, 0);
		rfb_jnum(f, "ratio_vs_starpu", x->vs_starpu, 1);
		fprintf(f, "}%s\n", i + 1 < res->n ? "," : "");
	}
	fprintf(f, "  ]\n}\n");
	return fclose(f) == 0 ? 0 : -1;
}

int rfb_write_csv(const rfb_results *res, const char *path)
{
	FILE *f = fopen(path, "w");
	if (f == NULL)
		return -1;
	fprintf(f, "method,backend,depth,auto_depth,copy_queues,size,blocks,us_per_block,gb_per_s,copy_us,compute_us,"
		   "efficiency,speedup_vs_sequential,ratio_vs_hand,ratio_vs_starpu,ran\n");
	for (size_t i = 0; i < res->n; i++) {
		const rfb_record *x = &res->r[i];
		fprintf(f, "%s,%s,%u,%u,%u,%zu,%zu,%.4f,%.4f,%.4f,%.4f,%.4f,", x->method, x->backend, x->depth,
			x->auto_depth, x->copy_queues, x->size, x->blocks, x->us_per_block, (double)x->size / (x->us_per_block * 1e3),
			x->copy_us, x->compute_us, x->efficiency);
		double v[3] = {x->speedup, x->vs_hand, x->vs_starpu};
		for (int j = 0; j < 3; j++) {
			if (!isnan(v[j]))
				fprintf(f, "%.4f", v[j]);
			fputc(',', f);
		}
		fprintf(f, "%s\n", x->ran);
	}
	return fclose(f) == 0 ? 0 : -1;
}

/* One gnuplot data block ($dN) per line of the plot: method at depth (0 = any). Returns the number of
 * points written, so that empty lines are left out of the plot command. */
static size_t rfb_plot_block(FILE *g, const rfb_results *res, const char *method, unsigned depth, int idx)
{
	size_t n = 0;
	fprintf(g, "$d%d << EOD\n", idx);
	for (size_t i = 0; i < res->n; i++) {
		const rfb_record *x = &res->r[i];
		if (!strcmp(x->method, method) && (depth == 0 || x->depth == depth)) {
			fprintf(g, "%.3f %.3f\n", (double)x->size / 1024, 100 * x->efficiency);
			n++;
		}
	}
	fprintf(g, "EOD\n");
	return n;
}

/* The depths of the ringfetch records, in order of first appearance. */
static unsigned rfb_depths(const rfb_results *res, unsigned *depths, unsigned cap)
{
	unsigned nd = 0;
	for (size_t i = 0; i < res->n; i++) {
		if (strcmp(res->r[i].method, "ringfetch") != 0)
			continue;
		unsigned d = res->r[i].depth, k = 0;
		while (k < nd && depths[k] != d)
			k++;
		if (k == nd && nd < cap)
			depths[nd++] = d;
	}
	return nd;
}

int rfb_write_plot(const rfb_results *res, const char *path, char *why, size_t cap)
{
	unsigned depths[64], nd = rfb_depths(res, depths, 64);
	/* Baselines are drawn at one depth: 2 if swept (the classic double buffer), else the first. */
	unsigned bdepth = nd ? depths[0] : 1;
	for (unsigned k = 0; k < nd; k++)
		if (depths[k] == 2)
			bdepth = 2;
	remove(path);
	FILE *g = popen("gnuplot 2>/dev/null", "w");
	if (g == NULL) {
		snprintf(why, cap, "cannot run gnuplot");
		return -1;
	}
	fprintf(g, "set terminal pngcairo size 1000,600 noenhanced\nset output '%s'\n", path);
	fprintf(g, "set logscale x 2\nset xlabel 'block size (KiB)'\nset ylabel 'overlap efficiency (%%)'\n"
		   "set title 'overlap efficiency = max(copy, compute) / measured time per block'\n"
		   "set key outside right\nset grid\n");
	static const char *const base[] = {"sequential", "hand", "starpu", "rf-local"};
	size_t npts[64 + 4];
	int idx = 0;
	for (unsigned k = 0; k < nd; k++, idx++)
		npts[idx] = rfb_plot_block(g, res, "ringfetch", depths[k], idx);
	for (int b = 0; b < 4; b++, idx++)
		npts[idx] = rfb_plot_block(g, res, base[b], b == 0 ? 0 : bdepth, idx);
	fprintf(g, "plot ");
	int first = 1;
	for (int i = 0; i < idx; i++) {
		if (npts[i] == 0)
			continue;
		if (i < (int)nd && depths[i] == 0)
			fprintf(g, "%s$d%d using 1:2 with linespoints lw 3 title 'ringfetch depth auto'", first ? "" : ", ", i);
		else if (i < (int)nd)
			fprintf(g, "%s$d%d using 1:2 with linespoints lw 2 title 'ringfetch depth %u'", first ? "" : ", ",
				i, depths[i]);
		else
			fprintf(g, "%s$d%d using 1:2 with linespoints dt 2 title '%s (depth %u)'", first ? "" : ", ", i,
				base[i - (int)nd], i == (int)nd ? 1 : bdepth);
		first = 0;
	}
	fprintf(g, "\n");
	int st = pclose(g);
	FILE *check = fopen(path, "rb");
	long sz = 0;
	if (check) {
		fseek(check, 0, SEEK_END);
		sz = ftell(check);
		fclose(check);
	}
	if (first || st != 0 || sz <= 0) {
		snprintf(why, cap, first ? "nothing to plot" : "gnuplot failed or is not installed (Debian gnuplot-nox)");
		return -1;
	}
	return 0;
}
