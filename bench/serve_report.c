/* bench/serve_report.c — the serving benchmark's table, JSON, CSV and plot. */
#include "serve.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* "1.23x", "45.6%", or "-" when not measured. */
static void cell(FILE *f, int width, double v, double scale, const char *unit)
{
	char s[32];
	if (isnan(v))
		snprintf(s, sizeof s, "-");
	else
		snprintf(s, sizeof s, "%.2f%s", v * scale, unit);
	fprintf(f, " %*s", width, s);
}

void rfs_print_table(const rfs_record *r, size_t n, FILE *f)
{
	fprintf(f, "%-12s %-8s %5s %9s %17s %7s %7s %9s %9s %9s %9s %7s %6s %6s\n", "contestant", "backend", "slots",
		"ms/step", "(fastest..slowest)", "vs seq", "vs spin", "computing", "exposed", "cpu", "MiB/step", "hit",
		"late", "wasted");
	for (size_t i = 0; i < n; i++) {
		const rfs_record *x = &r[i];
		char range[40];
		snprintf(range, sizeof range, "(%.2f..%.2f)", x->ms_min, x->ms_max);
		fprintf(f, "%-12s %-8s %5u %9.3f %17s", rfs_kind_name(x->kind), x->backend, x->slots, x->ms_step, range);
		cell(f, 7, x->vs_seq, 1, "x");
		cell(f, 7, x->vs_spin, 1, "x");
		fprintf(f, " %9.3f %9.3f %9.3f %9.2f", x->compute_ms, x->exposed_ms, x->cpu_ms, x->mb_step);
		cell(f, 7, x->hit_rate, 100, "%");
		cell(f, 6, x->late_step, 1, "");
		cell(f, 6, x->wasted_step, 1, "");
		fprintf(f, "%s\n", x->checksum_ok ? "" : "  CHECKSUM DIFFERS");
	}
}

void rfs_print_bounds(const rfs_record *r, size_t n, FILE *f)
{
	int any = 0;
	for (size_t i = 0; i < n; i++) {
		const rfs_bound *b = &r[i].bound;
		if (!b->have)
			continue;
		if (!any++)
			fprintf(f, "each keyed pipeline's whole run (warm-up round included) beside Belady's MIN on the same "
				   "acquires at the same slots\n(MIN reads only on its misses; no policy, hinted or not, reads "
				   "fewer blocks; bench/replay.h):\n"
				   "  %-12s %-8s %5s %10s %10s %10s %10s %13s %10s\n", "contestant", "backend", "slots",
				"acquires", "misses", "reads", "MIN", "reads vs MIN", "lru reads");
		char vs[24] = "-";
		if (b->min_misses > 0)
			snprintf(vs, sizeof vs, "%.2fx", (double)b->reads / (double)b->min_misses);
		fprintf(f, "  %-12s %-8s %5u %10llu %10llu %10llu %10llu %13s %10llu\n", rfs_kind_name(r[i].kind),
			r[i].backend, b->slots, (unsigned long long)b->acquires, (unsigned long long)b->misses,
			(unsigned long long)b->reads, (unsigned long long)b->min_misses, vs,
			(unsigned long long)b->lru_reads);
	}
}

static void jnum(FILE *f, const char *key, double v)
{
	if (isnan(v))
		fprintf(f, ", \"%s\": null", key);
	else
		fprintf(f, ", \"%s\": %.6g", key, v);
}

static void jint(FILE *f, const char *key, int have, uint64_t v)
{
	if (have)
		fprintf(f, ", \"%s\": %llu", key, (unsigned long long)v);
	else
		fprintf(f, ", \"%s\": null", key);
}

int rfs_write_json(const rfs_record *r, size_t n, const rfs_opts *o, const rfs_model *m, const char *machine,
		   const char *path)
{
	FILE *f = fopen(path, "w");
	if (f == NULL)
		return -1;
	fprintf(f, "{\n  \"machine\": %s,\n", machine);
	fprintf(f, "  \"model\": {\"layers\": %u, \"experts\": %u, \"expert_bytes\": %zu, \"topk\": %u, \"batch\": %u, "
		   "\"skew\": %g, \"compute_us\": %g, \"arith_iters\": %llu, \"arith_iters_per_us\": %.4g, "
		   "\"steps\": %u, \"rounds\": %u, \"depth\": %u, \"slots\": %u, \"hint_next\": %u, \"seed\": %llu, "
		   "\"wait\": \"%s\"},\n",
		o->layers, o->experts, o->expert_bytes, o->topk, o->batch, o->skew, o->compute_us,
		(unsigned long long)m->iters, m->iters_per_us, o->steps, o->rounds, o->depth, o->slots, o->hint_next,
		o->seed, o->wait ? o->wait : "default");
	fprintf(f, "  \"records\": [\n");
	for (size_t i = 0; i < n; i++) {
		const rfs_record *x = &r[i];
		fprintf(f, "    {\"contestant\": \"%s\", \"backend\": \"%s\", \"slots\": %u", rfs_kind_name(x->kind),
			x->backend, x->slots);
		jnum(f, "ms_per_step", x->ms_step);
		jnum(f, "ms_per_step_fastest", x->ms_min);
		jnum(f, "ms_per_step_slowest", x->ms_max);
		jnum(f, "computing_ms_per_step", x->compute_ms);
		jnum(f, "exposed_ms_per_step", x->exposed_ms);
		jnum(f, "cpu_ms_per_step", x->cpu_ms);
		jnum(f, "mib_copied_per_step", x->mb_step);
		jnum(f, "hit_rate", x->hit_rate);
		jnum(f, "late_per_step", x->late_step);
		jnum(f, "wasted_per_step", x->wasted_step);
		jnum(f, "dropped_per_step", x->dropped_step);
		jnum(f, "ratio_vs_sequential", x->vs_seq);
		jnum(f, "ratio_vs_spin", x->vs_spin);
		jint(f, "run_acquires", x->bound.have, x->bound.acquires);
		jint(f, "run_misses", x->bound.have, x->bound.misses);
		jint(f, "run_reads", x->bound.have, x->bound.reads);
		jint(f, "run_min_misses", x->bound.have, x->bound.min_misses);
		jint(f, "run_lru_replay_reads", x->bound.have, x->bound.lru_reads);
		fprintf(f, ", \"checksum\": \"%016llx\", \"checksum_ok\": %s}%s\n", (unsigned long long)x->checksum,
			x->checksum_ok ? "true" : "false", i + 1 < n ? "," : "");
	}
	fprintf(f, "  ]\n}\n");
	return fclose(f) == 0 ? 0 : -1;
}

static void cnum(FILE *f, double v, const char *sep)
{
	if (!isnan(v))
		fprintf(f, "%.6g", v);
	fputs(sep, f);
}

int rfs_write_csv(const rfs_record *r, size_t n, const char *path)
{
	FILE *f = fopen(path, "w");
	if (f == NULL)
		return -1;
	fprintf(f, "contestant,backend,slots,ms_per_step,ms_per_step_fastest,ms_per_step_slowest,computing_ms_per_step,"
		   "exposed_ms_per_step,cpu_ms_per_step,mib_copied_per_step,hit_rate,late_per_step,wasted_per_step,dropped_per_step,"
		   "ratio_vs_sequential,ratio_vs_spin,checksum,checksum_ok\n");
	for (size_t i = 0; i < n; i++) {
		const rfs_record *x = &r[i];
		fprintf(f, "%s,%s,%u,", rfs_kind_name(x->kind), x->backend, x->slots);
		double v[] = {x->ms_step,   x->ms_min,    x->ms_max,       x->compute_ms,   x->exposed_ms,   x->cpu_ms,
			      x->mb_step,   x->hit_rate,  x->late_step,    x->wasted_step,  x->dropped_step,
			      x->vs_seq,    x->vs_spin};
		for (size_t j = 0; j < sizeof v / sizeof v[0]; j++)
			cnum(f, v[j], ",");
		fprintf(f, "%016llx,%d\n", (unsigned long long)x->checksum, x->checksum_ok);
	}
	return fclose(f) == 0 ? 0 : -1;
}

int rfs_write_plot(const rfs_record *r, size_t n, const char *path, char *why, size_t cap)
{
	remove(path);
	if (n == 0) {
		snprintf(why, cap, "nothing to plot");
		return -1;
	}
	FILE *g = popen("gnuplot 2>/dev/null", "w");
	if (g == NULL) {
		snprintf(why, cap, "cannot run gnuplot");
		return -1;
	}
	fprintf(g, "set terminal pngcairo size 1000,600 noenhanced\nset output '%s'\n", path);
	fprintf(g, "set title 'MoE decode loop: median time per step'\n"
		   "set ylabel 'ms per decode step'\nset style data histograms\nset style histogram rowstacked\n"
		   "set style fill solid 0.8 border -1\nset boxwidth 0.7\nset key top left\nset rmargin 14\nset grid ytics\n"
		   "set xtics rotate by -30\nset yrange [0:*]\nset offsets 0, 0, graph 0.25, 0\n");
	/* The two lines every ratio in the table is taken against, dashed across the bars. */
	for (size_t i = 0; i < n; i++)
		if (r[i].kind == RFS_SEQUENTIAL || r[i].kind == RFS_SPIN)
			fprintf(g, "set arrow from graph 0, first %.4f to graph 1, first %.4f nohead dt 2 lw 2 lc rgb '%s'\n"
				   "set label '%s' at graph 1, first %.4f offset 1, 0\n",
				r[i].ms_step, r[i].ms_step, r[i].kind == RFS_SEQUENTIAL ? "black" : "red",
				rfs_kind_name(r[i].kind), r[i].ms_step);
	fprintf(g, "$d << EOD\n");
	for (size_t i = 0; i < n; i++) {
		const rfs_record *x = &r[i];
		double exposed = x->ms_step - x->compute_ms; /* the two medians need not add up exactly */
		fprintf(g, "\"%s%s%s\" %.4f %.4f\n", rfs_kind_name(x->kind), strcmp(x->backend, "-") ? "/" : "",
			strcmp(x->backend, "-") ? x->backend : "", x->compute_ms, exposed > 0 ? exposed : 0);
	}
	fprintf(g, "EOD\nplot $d using 2:xtic(1) title 'computing', '' using 3 title 'exposed (copies, waits, routing)'\n");
	int st = pclose(g);
	FILE *check = fopen(path, "rb");
	long sz = 0;
	if (check) {
		fseek(check, 0, SEEK_END);
		sz = ftell(check);
		fclose(check);
	}
	if (st != 0 || sz <= 0) {
		snprintf(why, cap, "gnuplot failed or is not installed (Debian gnuplot-nox)");
		return -1;
	}
	return 0;
}
