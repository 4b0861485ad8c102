/* bench/serve.c — ringfetch-serve-bench: a MoE decode loop, served by every contestant in
 * one process (serve.h has the model, serve_contestants.c the contestants), alternating: one warm-up
 * round each, then `rounds` rounds in which every contestant runs the same `steps` decode steps (a new
 * stretch of the routing trace each round), starting with a different contestant each round. Reports
 * medians per step, and ratios to the sequential loop and to the spinning ring measured in the same run.
 *
 * Every compute's sum is checked against the source's, and every round's checksum (the tokens' hidden
 * states, which fold in every expert output and so decide the routing) against the direct line's of
 * the same round: a contestant that computed anything wrong fails the run instead of winning it.
 * Exit status: 0, 1 (a contestant failed or a check failed), 2 (bad options). */
#include "machine.h"
#include "serve.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct entry {
	rfs_kind kind;
	rfs_contestant *c;
	rfs_tally *t; /* per measured round */
	uint64_t checksum;
	int checksum_ok;
} entry;

typedef struct bench {
	const rfs_opts *o;
	const rfs_model *m;
	entry e[RFS_NKINDS * RFB_MAX_LIST];
	size_t n, direct;
	double t0;
} bench;

static int add_contestants(bench *b)
{
	const rfs_opts *o = b->o;
	for (unsigned k = 0; k < RFS_NKINDS; k++) {
		if (!(o->contestants & (1u << k)))
			continue;
		unsigned nb = RFS_IS_RINGFETCH(k) ? o->nbackends : 1;
		for (unsigned i = 0; i < nb; i++) {
			entry *x = &b->e[b->n];
			x->kind = (rfs_kind)k;
			x->checksum_ok = 1;
			x->t = calloc(o->rounds, sizeof *x->t);
			x->c = x->t ? rfs_contestant_create(b->m, x->kind, o->backends[i]) : NULL;
			if (x->c == NULL) {
				free(x->t);
				return -1;
			}
			if (k == RFS_DIRECT)
				b->direct = b->n;
			b->n++;
		}
	}
	return 0;
}

static void progress(const bench *b, unsigned round)
{
	if (b->o->quiet || rfs_now() - b->t0 < 2)
		return;
	fprintf(stderr, "\r[%3u%%] round %u/%u   ", 100 * round / (b->o->rounds + 1), round, b->o->rounds);
	fflush(stderr);
}

/* Between two contestants: long enough for an idle pipeline's workers to stop spinning (wait "auto"
 * spins up to 2 ms after its last call, docs/serving.md), so that they do not run into the next
 * contestant's round, whose threads would then share the cores with them. Not timed. */
static void settle(void)
{
	struct timespec ts = {0, 5 * 1000 * 1000};
	nanosleep(&ts, NULL);
}

/* Round 0 is the warm-up (steps 0 .. steps-1, not recorded); round r >= 1 is measured round r-1. */
static int one_round(bench *b, unsigned round)
{
	rfs_tally warm[RFS_NKINDS * RFB_MAX_LIST];
	for (size_t j = 0; j < b->n; j++) {
		entry *x = &b->e[(j + round) % b->n];
		rfs_tally *t = round == 0 ? &warm[(j + round) % b->n] : &x->t[round - 1];
		settle();
		if (rfs_contestant_round(x->c, round * b->o->steps, t) != 0) {
			fprintf(stderr, "%s (%s): round %u failed\n", rfs_kind_name(x->kind), rfs_contestant_backend(x->c),
				round);
			return -1;
		}
	}
	int ok = 1;
	for (size_t j = 0; j < b->n; j++) {
		const rfs_tally *t = round == 0 ? &warm[j] : &b->e[j].t[round - 1];
		const rfs_tally *ref = round == 0 ? &warm[b->direct] : &b->e[b->direct].t[round - 1];
		b->e[j].checksum = t->checksum;
		if (t->checksum != ref->checksum) {
			b->e[j].checksum_ok = ok = 0;
			fprintf(stderr, "%s (%s): round %u: checksum %016llx, the direct line's %016llx\n",
				rfs_kind_name(b->e[j].kind), rfs_contestant_backend(b->e[j].c), round,
				(unsigned long long)t->checksum, (unsigned long long)ref->checksum);
		}
	}
	return ok ? 0 : -1;
}

/* Median over the rounds of f(tally) per step. */
static double median_of(const bench *b, const entry *x, double (*f)(const rfs_tally *t, const rfs_opts *o))
{
	double v[1000];
	for (unsigned r = 0; r < b->o->rounds; r++)
		v[r] = f(&x->t[r], b->o);
	return rfb_median(v, b->o->rounds);
}

static double f_ms(const rfs_tally *t, const rfs_opts *o) { return t->wall_s * 1e3 / o->steps; }
static double f_compute(const rfs_tally *t, const rfs_opts *o) { return t->compute_s * 1e3 / o->steps; }
static double f_cpu(const rfs_tally *t, const rfs_opts *o) { return t->cpu_s * 1e3 / o->steps; }
static double f_exposed(const rfs_tally *t, const rfs_opts *o) { return (t->wall_s - t->compute_s) * 1e3 / o->steps; }
static double f_mib(const rfs_tally *t, const rfs_opts *o) { return (double)t->bytes_copied / 1048576.0 / o->steps; }
static double f_hit(const rfs_tally *t, const rfs_opts *o)
{
	(void)o;
	return t->acquires ? (double)t->hits / (double)t->acquires : 0;
}
static double f_late(const rfs_tally *t, const rfs_opts *o) { return (double)t->late / o->steps; }
static double f_wasted(const rfs_tally *t, const rfs_opts *o) { return (double)t->wasted / o->steps; }
static double f_dropped(const rfs_tally *t, const rfs_opts *o) { return (double)t->dropped / o->steps; }

/* The median over the rounds of this contestant's time / ref's time in the same round: paired, so that
 * a slow stretch of a loaded machine hits both sides of each ratio. NAN without ref. */
static double paired_ratio(const bench *b, const entry *x, const entry *ref)
{
	double v[1000];
	if (ref == NULL)
		return NAN;
	for (unsigned r = 0; r < b->o->rounds; r++)
		v[r] = x->t[r].wall_s / ref->t[r].wall_s;
	return rfb_median(v, b->o->rounds);
}

static int records(const bench *b, rfs_record *r)
{
	int rc = 0;
	const entry *seq = NULL, *spin = NULL;
	for (size_t j = 0; j < b->n; j++) {
		seq = b->e[j].kind == RFS_SEQUENTIAL ? &b->e[j] : seq;
		spin = b->e[j].kind == RFS_SPIN ? &b->e[j] : spin;
	}
	for (size_t j = 0; j < b->n; j++) {
		const entry *x = &b->e[j];
		int keyed = x->kind == RFS_KEYED || x->kind == RFS_KEYED_HINTS;
		double lo = INFINITY, hi = 0;
		for (unsigned k = 0; k < b->o->rounds; k++) {
			double v = f_ms(&x->t[k], b->o);
			lo = v < lo ? v : lo, hi = v > hi ? v : hi;
		}
		r[j] = (rfs_record){.kind = x->kind,
				    .backend = rfs_contestant_backend(x->c),
				    .slots = rfs_contestant_slots(x->c),
				    .ms_step = median_of(b, x, f_ms),
				    .ms_min = lo,
				    .ms_max = hi,
				    .exposed_ms = median_of(b, x, f_exposed),
				    .compute_ms = median_of(b, x, f_compute),
				    .cpu_ms = median_of(b, x, f_cpu),
				    .mb_step = median_of(b, x, f_mib),
				    .hit_rate = keyed ? median_of(b, x, f_hit) : NAN,
				    .late_step = keyed ? median_of(b, x, f_late) : NAN,
				    .wasted_step = keyed ? median_of(b, x, f_wasted) : NAN,
				    .dropped_step = keyed ? median_of(b, x, f_dropped) : NAN,
				    .vs_seq = paired_ratio(b, x, seq),
				    .vs_spin = paired_ratio(b, x, spin),
				    .checksum = x->checksum,
				    .checksum_ok = x->checksum_ok};
		if (rfs_contestant_bound(x->c, &r[j].bound) != 0)
			rc = -1;
	}
	return rc;
}

static int outputs(const bench *b, const rfs_record *r)
{
	const rfs_opts *o = b->o;
	char machine[512], why[128];
	int rc = 0;
	rfb_machine_json(machine, sizeof machine, "");
	if (o->json && rfs_write_json(r, b->n, o, b->m, machine, o->json) != 0)
		fprintf(stderr, "cannot write %s\n", o->json), rc = 1;
	if (o->csv && rfs_write_csv(r, b->n, o->csv) != 0)
		fprintf(stderr, "cannot write %s\n", o->csv), rc = 1;
	if (o->plot && rfs_write_plot(r, b->n, o->plot, why, sizeof why) != 0)
		fprintf(stderr, "plot %s: %s\n", o->plot, why), rc = 1;
	return rc;
}

static int run(bench *b)
{
	int rc = add_contestants(b);
	for (unsigned round = 0; round <= b->o->rounds && rc == 0; round++) {
		progress(b, round);
		rc = one_round(b, round);
	}
	if (!b->o->quiet && rfs_now() - b->t0 >= 2)
		fprintf(stderr, "\r%40s\r", "");
	rfs_record r[RFS_NKINDS * RFB_MAX_LIST];
	if (rc == 0)
		rc = records(b, r);
	if (rc == 0) {
		const rfs_opts *o = b->o;
		printf("ringfetch-serve-bench %s: %u layers x %u experts of %zu KiB, top-%u, batch %u, skew %g, "
		       "compute = sum + %g us (%llu iterations) per expert and token\n"
		       "%u steps x %u alternating rounds, medians per decode step; vs seq, vs spin: medians of the "
		       "ratios within each round\n",
		       rf_version_string(), o->layers, o->experts, o->expert_bytes >> 10, o->topk, o->batch, o->skew,
		       o->compute_us, (unsigned long long)b->m->iters, o->steps, o->rounds);
		rfs_print_table(r, b->n, stdout);
		rfs_print_bounds(r, b->n, stdout);
		rc = outputs(b, r);
	}
	for (size_t j = 0; j < b->n; j++) {
		rfs_contestant_destroy(b->e[j].c);
		free(b->e[j].t);
	}
	return rc;
}

int main(int argc, char **argv)
{
	rfs_opts o;
	char err[256];
	int prc = rfs_parse(argc, argv, &o, err, sizeof err);
	if (prc == 1) {
		fputs(rfs_usage(), stdout);
		return 0;
	}
	if (prc != 0) {
		fprintf(stderr, "ringfetch-serve-bench: %s\n(ringfetch-serve-bench --help lists the options)\n", err);
		return 2;
	}
	rfs_model m;
	if (rfs_model_init(&m, &o) != 0) {
		fprintf(stderr, "out of memory for %u x %u experts of %zu bytes\n", o.layers, o.experts, o.expert_bytes);
		return 1;
	}
	bench b = {.o = &o, .m = &m, .t0 = rfs_now()};
	int rc = run(&b);
	rfs_model_free(&m);
	return rc == 0 ? 0 : 1;
}
