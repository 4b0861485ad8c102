/* runtime/pipeline.c — rf_pipeline: the ring of `depth` slots as a periodic program on an engine. */
#include "base/alloc.h"
#include "runtime/config.h"
#include "runtime/engine.h"
#include "runtime/keyed.h"
#include "base/error.h"
#include "runtime/oracle.h"
#include "runtime/trace.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* depth = auto never goes deeper than this (nor than the memory budget allows). */
#define RF__AUTO_MAX_DEPTH 16u
/* After the rule: up to this many candidate depths (the rule's d, 2d, 4d), each tried this many times
 * over the following runs, alternating, before the fastest is kept. */
#define RF__AUTO_NCAND 3u
#define RF__AUTO_ROUNDS 3u
_Static_assert(RF__AUTO_ROUNDS == 3, "rf__median3 takes the middle of three probe runs");

struct rf_pipeline {
	rf__engine eng;
	unsigned depth;
	unsigned copy_queues;
	unsigned auto_max; /* depth = auto: the deepest ring the slots allow; 0 when depth is fixed */
	/* depth = auto, probing (ncand > 1): candidate depths and their programs (built when the rule ran,
	 * so that switching allocates nothing); cprog[cur] is the one the engine runs, the others are
	 * ours until probing ends. runs[i][r]: candidate i's r-th probe run, ns per byte; best[i]: their
	 * median, once probing ends. */
	unsigned ncand, cur, probes, skip;
	unsigned cand[RF__AUTO_NCAND];
	struct rf_program *cprog[RF__AUTO_NCAND];
	double runs[RF__AUTO_NCAND][RF__AUTO_ROUNDS];
	double best[RF__AUTO_NCAND];
};

static int rf__pipeline_params_check(const rf_pipeline_params *pp, rf_pipeline **out)
{
	if (pp == NULL || out == NULL)
		return rf__err(RF_EINVAL, "rf_pipeline_create: %s is NULL", pp == NULL ? "params" : "out");
	if (pp->slot_bytes == 0)
		return rf__err(RF_EINVAL, "rf_pipeline_create: slot_bytes is 0");
	if (pp->depth > RF_MAX_DEPTH)
		return rf__err(RF_EINVAL, "rf_pipeline_create: depth %u is over RF_MAX_DEPTH (%u)", pp->depth,
			       RF_MAX_DEPTH);
	if (pp->flags != 0)
		return rf__err(RF_EINVAL, "rf_pipeline_create: flags must be 0 (got %#x)", pp->flags);
	for (size_t i = 0; i < sizeof pp->reserved / sizeof pp->reserved[0]; i++)
		if (pp->reserved[i] != 0)
			return rf__err(RF_EINVAL, "rf_pipeline_create: reserved[%zu] must be 0", i);
	if (pp->copy_queues >= RF_MAX_QUEUES)
		return rf__err(RF_EINVAL, "rf_pipeline_create: copy_queues %u is over %u", pp->copy_queues,
			       RF_MAX_QUEUES - 1);
	return RF_OK;
}

static void rf__pipeline_free(void *p)
{
	rf_pipeline *pl = p;
	for (unsigned i = 0; i < pl->ncand; i++)
		if (i != pl->cur)
			rf_program_destroy(pl->cprog[i]);
	rf__keyed_destroy(pl->eng.keyed); /* waits for keyed copies: before the slots go */
	rf__engine_fini(&pl->eng);
	free(pl);
}

/* The values to build with: explicit params, else configured (file < environment), else defaults. */
typedef struct rf__resolved {
	unsigned depth, kq;
	const char *backend;
	rf__staging_policy staging;
	unsigned auto_max; /* non-zero: depth = auto, up to this depth */
	long long wait_ns;  /* the wait policy (rf__open_args.wait_spin_ns) */
	rf__config cfg;
} rf__resolved;

/* depth = auto: start at the shallowest ring that keeps every copy queue busy; the slots are allocated
 * for the deepest ring the budget allows (capped at RF__AUTO_MAX_DEPTH), so choosing later allocates
 * nothing. */
static int rf__pipeline_auto(const rf_pipeline_params *pp, rf__resolved *r)
{
	const rf__config *c = &r->cfg;
	unsigned lo = r->kq > 1 ? r->kq + 1 : 2, max = RF__AUTO_MAX_DEPTH > lo ? RF__AUTO_MAX_DEPTH : lo;
	if (c->memory_budget != 0 && c->memory_budget / pp->slot_bytes < max)
		max = (unsigned)(c->memory_budget / pp->slot_bytes);
	if (max == 0 || (r->kq > 1 && max < lo))
		return rf__err(RF_ECONFIG, "rf_pipeline_create: depth = auto: %s (%llu bytes) leaves room for %u slots of "
					   "%zu bytes, %u needed", c->budget_from, c->memory_budget, max, pp->slot_bytes,
			       r->kq > 1 ? lo : 1u);
	r->auto_max = max;
	r->depth = lo < max ? lo : max;
	return RF_OK;
}

static int rf__pipeline_resolve(const rf_pipeline_params *pp, rf__resolved *r)
{
	rf__config *c = &r->cfg;
	int rc = rf__config_load(c, pp->depth == 0, pp->backend == NULL, pp->copy_queues == 0, pp->staging == NULL);
	if (rc != RF_OK)
		return rc;
	r->depth = pp->depth ? pp->depth : c->depth ? c->depth : 2;
	r->kq = pp->copy_queues ? pp->copy_queues : c->copy_queues ? c->copy_queues : 1;
	r->auto_max = 0;
	if (pp->depth == 0 && c->depth_auto && (rc = rf__pipeline_auto(pp, r)) != RF_OK)
		return rc;
	r->backend = pp->backend ? pp->backend : c->backend ? c->backend : "auto";
	const char *staging = pp->staging ? pp->staging : c->staging[0] ? c->staging : NULL;
	if ((rc = rf__staging_parse("rf_pipeline_create", staging, &r->staging)) != RF_OK)
		return rc;
	if ((rc = rf__config_wait(pp->wait, c, &r->wait_ns)) != RF_OK)
		return rc;
	if (r->kq > 1 && r->depth < r->kq + 1)
		return rf__err(RF_EINVAL, "rf_pipeline_create: %u copy queues need depth >= %u (depth is %u)", r->kq,
			       r->kq + 1, r->depth);
	if (c->memory_budget != 0 && pp->slot_bytes > c->memory_budget / r->depth)
		return rf__err(RF_ECONFIG, "rf_pipeline_create: a ring of %u x %zu bytes exceeds %s (%llu bytes)",
			       r->depth, pp->slot_bytes, c->budget_from, c->memory_budget);
	return RF_OK;
}

static int rf__cmp_i64(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
	return (x > y) - (x < y);
}

/*
 * The depth = auto rule (docs/tuning.md). From the first run at the starting depth D0 we know, for each
 * block b >= D0, its refill latency L(b): from the end of compute(b - D0), which freed the slot, to the
 * end of copy(b) — the copy itself plus whatever it waited for (a busy copy queue, a sleeping worker's
 * wake-up). A ring of depth d gives that refill d-1 computes of slack, so d = 1 + ceil(L90 / m), with L90
 * the 90th percentile latency and m the mean compute time: the extra slots absorb slow or late copies.
 * When copies are the bottleneck (mean copy >= K x m) no depth makes them faster: keep every copy queue
 * busy (K+1), plus one slot when copy times are jittery (p90 > 1.5 x mean). Never below K+1 (2 for one
 * queue), never above auto_max.
 */
static unsigned rf__auto_rule(double c_mean, double c90, double l90, double m, unsigned kq, unsigned max)
{
	unsigned lo = kq > 1 ? kq + 1 : 2, d;
	if (m <= 0 || c_mean >= m * kq) {
		d = lo + (c90 > 1.5 * c_mean);
	} else {
		double x = l90 / m;
		d = 1 + (unsigned)x + ((double)(unsigned)x < x);
	}
	d = d < lo ? lo : d;
	return d > max ? max : d;
}

/* The 90th percentile of v[0..n) (sorted in place). */
static double rf__p90(int64_t *v, size_t n)
{
	qsort(v, n, sizeof *v, rf__cmp_i64);
	return (double)v[(n * 9) / 10 < n ? (n * 9) / 10 : n - 1];
}

/* Copy durations, refill latencies (see rf__auto_rule) and the compute sum, from a run's events. */
typedef struct rf__auto_sample {
	int64_t *copy, *lat, *compute_end;
	size_t nc, nl, nm;
	double csum, msum;
} rf__auto_sample;

static int rf__auto_collect(const struct rf__trace *t, unsigned depth, rf__auto_sample *a)
{
	size_t n = 0, nblocks = 0;
	for (unsigned q = 0; q < t->nq; q++)
		for (size_t i = 0; i < t->n[q]; i++, n++)
			if ((size_t)t->ev[q][i].block + 1 > nblocks)
				nblocks = (size_t)t->ev[q][i].block + 1;
	memset(a, 0, sizeof *a);
	a->copy = rf__malloc((n ? n : 1) * sizeof *a->copy);
	a->lat = rf__malloc((n ? n : 1) * sizeof *a->lat);
	a->compute_end = rf__calloc(nblocks ? nblocks : 1, sizeof *a->compute_end);
	if (a->copy == NULL || a->lat == NULL || a->compute_end == NULL)
		return -1;
	for (unsigned q = 0; q < t->nq; q++)
		for (size_t i = 0; i < t->n[q]; i++)
			if (t->ev[q][i].kind == RF_OP_COMPUTE) {
				a->compute_end[t->ev[q][i].block] = t->ev[q][i].t1;
				a->msum += (double)(t->ev[q][i].t1 - t->ev[q][i].t0);
				a->nm++;
			}
	for (unsigned q = 0; q < t->nq; q++)
		for (size_t i = 0; i < t->n[q]; i++) {
			const rf__tev *e = &t->ev[q][i];
			if (e->kind != RF_OP_COPY)
				continue;
			a->copy[a->nc++] = e->t1 - e->t0;
			a->csum += (double)(e->t1 - e->t0);
			if ((size_t)e->block >= depth && a->compute_end[e->block - depth] != 0)
				a->lat[a->nl++] = e->t1 - a->compute_end[e->block - depth];
		}
	return 0;
}

/* A ring program for depth d, as rf_pipeline_create builds them (test hooks included). */
static int rf__auto_program(const rf_pipeline *p, unsigned d, struct rf_program **out)
{
	int rc = rf__ring_program(d, p->copy_queues, out);
	if (rc == RF_OK && rf__test_hooks.drop_war_wait)
		rf__prog_drop_war(*out);
	return rc;
}

/* Make cprog[i] the program the engine runs (the previous one stays in cprog[cur]). */
static void rf__auto_install(rf_pipeline *p, unsigned i)
{
	p->cur = i;
	p->eng.prog = p->cprog[i];
	p->depth = p->cand[i];
}

/* The rule chose d: candidates d, 2d, 4d (within the slots), programs built now, d installed. The
 * runs that follow try them in turn (rf__auto_after). Without memory for the candidates: d alone, or
 * the starting ring if even d cannot be built. */
static void rf__auto_candidates(rf_pipeline *p, unsigned d)
{
	unsigned n = 0, built = 0;
	for (unsigned k = 0, c = d; k < RF__AUTO_NCAND && c <= p->auto_max; k++, c *= 2)
		p->cand[n++] = c;
	if (n < RF__AUTO_NCAND && p->cand[n - 1] < p->auto_max && p->cand[n - 1] * 2 > p->auto_max)
		p->cand[n++] = p->auto_max; /* e.g. 5, 10, 16 under 16 slots */
	struct rf_program *start = p->eng.prog;
	for (; built < n; built++)
		if (p->cand[built] == p->depth)
			p->cprog[built] = start;
		else if (rf__auto_program(p, p->cand[built], &p->cprog[built]) != RF_OK)
			break;
	if (built == 0)
		return; /* keep the starting ring */
	for (unsigned i = built; i-- > 1;) /* out of memory: d alone */
		if (built < n && p->cprog[i] != start)
			rf_program_destroy(p->cprog[i]);
	n = built < n ? 1 : n;
	int start_used = 0;
	for (unsigned i = 0; i < n; i++)
		start_used |= p->cprog[i] == start;
	if (!start_used)
		rf_program_destroy(start);
	p->ncand = n;
	p->probes = 0;
	p->skip = 1; /* the run that measured ran the starting ring */
	rf__auto_install(p, 0);
	if (n == 1)
		p->ncand = 0;
}

/* The middle of three: one run disturbed by the machine (either way) does not decide. */
static double rf__median3(const double v[3])
{
	double lo = v[0] < v[1] ? v[0] : v[1], hi = v[0] < v[1] ? v[1] : v[0];
	return v[2] < lo ? lo : v[2] > hi ? hi : v[2];
}

/* After each successful run while probing: note the run's speed (ns per byte, or per block for empty
 * blocks) against the candidate it ran, move to the next one; after RF__AUTO_ROUNDS rounds keep the
 * fastest by median (a deeper ring must beat a shallower one by 1 %: fewer slots in flight is the tie-break) and
 * release the others. */
static void rf__auto_after(void *owner)
{
	rf_pipeline *p = owner;
	if (p->ncand < 2)
		return;
	if (p->skip) {
		p->skip = 0;
		return;
	}
	const rf_stats *s = &p->eng.last;
	double x = (double)s->wall_ns / (double)(s->bytes ? s->bytes : s->blocks ? s->blocks : 1);
	p->runs[p->cur][p->probes / p->ncand] = x;
	if (++p->probes < p->ncand * RF__AUTO_ROUNDS) {
		rf__auto_install(p, (p->cur + 1) % p->ncand);
		return;
	}
	for (unsigned i = 0; i < p->ncand; i++)
		p->best[i] = rf__median3(p->runs[i]);
	unsigned win = 0;
	for (unsigned i = 1; i < p->ncand; i++)
		if (p->best[i] < p->best[win] * 0.99)
			win = i;
	size_t len = strlen(p->eng.describe);
	len += (size_t)snprintf(p->eng.describe + len, sizeof p->eng.describe - len, "; probed");
	for (unsigned i = 0; i < p->ncand && len < sizeof p->eng.describe; i++)
		len += (size_t)snprintf(p->eng.describe + len, sizeof p->eng.describe - len, " %u: %.3g ns/KiB%s",
					p->cand[i], p->best[i] * 1024, i + 1 < p->ncand ? "," : "");
	if (len < sizeof p->eng.describe)
		snprintf(p->eng.describe + len, sizeof p->eng.describe - len, "; depth %u", p->cand[win]);
	rf__auto_install(p, win);
	for (unsigned i = 0; i < p->ncand; i++)
		if (i != win)
			rf_program_destroy(p->cprog[i]);
	p->ncand = 0;
	p->cur = 0;
}

/* After the first successful run of a depth = auto pipeline: pick the depth and rebuild the program. */
static void rf__pipeline_measure(void *owner, const struct rf__trace *t)
{
	rf_pipeline *p = owner;
	rf__auto_sample a;
	int ok = rf__auto_collect(t, p->depth, &a) == 0 && a.nc > 0 && a.nm > 0;
	if (ok) {
		double c_mean = a.csum / (double)a.nc, m = a.msum / (double)a.nm;
		double c90 = rf__p90(a.copy, a.nc), l90 = a.nl ? rf__p90(a.lat, a.nl) : c90;
		unsigned d = rf__auto_rule(c_mean, c90, l90, m, p->copy_queues, p->auto_max);
		rf__auto_candidates(p, d);
		p->eng.measure = NULL;
		size_t len = strlen(p->eng.describe);
		snprintf(p->eng.describe + len, sizeof p->eng.describe - len,
			 "; depth auto: rule %u (copy mean %.1f us, p90 %.1f us; refill p90 %.1f us; compute mean %.1f us; "
			 "at most %u)", d, c_mean / 1e3, c90 / 1e3, l90 / 1e3, m / 1e3, p->auto_max);
	}
	/* Nothing to learn from (no copies or computes, or no memory): try again on the next run. */
	free(a.copy);
	free(a.lat);
	free(a.compute_end);
}

static int rf__pipeline_oracle(void *owner, const struct rf__trace *t, size_t nblocks)
{
	(void)owner;
	return rf__oracle_check(t, nblocks);
}

int rf_pipeline_create(const rf_pipeline_params *params, rf_pipeline **out)
{
	int rc = rf__pipeline_params_check(params, out);
	if (rc != RF_OK)
		return rc;
	rf__resolved r;
	if ((rc = rf__pipeline_resolve(params, &r)) != RF_OK)
		return rc;
	rf_pipeline *p = rf__calloc(1, sizeof *p);
	if (p == NULL)
		return rf__err(RF_ENOMEM, "rf_pipeline_create: out of memory");
	struct rf_program *prog;
	if ((rc = rf__ring_program(r.depth, r.kq, &prog)) != RF_OK)
		goto fail;
	if (rf__test_hooks.drop_war_wait)
		rf__prog_drop_war(prog);
	p->eng.staging = r.staging;
	p->eng.wait_spin_ns = r.wait_ns;
	p->eng.min_slots = r.auto_max;
	if (r.cfg.oracle)
		p->eng.oracle = rf__pipeline_oracle;
	p->auto_max = r.auto_max;
	if (r.auto_max != 0) {
		p->eng.measure = rf__pipeline_measure;
		p->eng.after = rf__auto_after;
	}
	if ((rc = rf__engine_init(&p->eng, "rf_pipeline_create", r.backend, params->device, prog,
				  params->slot_bytes)) != RF_OK)
		goto fail;
	p->eng.release = rf__pipeline_free;
	p->eng.owner = p;
	if (p->eng.be->kissue != NULL &&
	    (rc = rf__keyed_create(p->eng.be, p->eng.ctx, p->eng.slots, p->eng.nslots, p->eng.slot_bytes, r.cfg.oracle,
				   &p->eng.keyed)) != RF_OK) {
		rf__pipeline_free(p);
		return rf__err(rc, "rf_pipeline_create: %s", rf__errmsg_peek());
	}
	p->depth = r.depth;
	p->copy_queues = r.kq;
	if (r.cfg.trace[0] != '\0' && (rc = rf__engine_trace(&p->eng, "rf_pipeline_create", r.cfg.trace)) != RF_OK) {
		rf__pipeline_free(p);
		return rc;
	}
	*out = p;
	return RF_OK;
fail:
	free(p);
	return rc;
}

int rf_pipeline_run(rf_pipeline *p, size_t nblocks, const void *const *srcs, const size_t *sizes,
		    rf_compute_fn compute, void *user)
{
	if (nblocks == 0)
		return RF_OK;
	if (p == NULL)
		return rf__err(RF_EINVAL, "rf_pipeline_run: p is NULL");
	return rf__engine_run(&p->eng, "rf_pipeline_run", nblocks, srcs, sizes, compute, user);
}

unsigned rf_pipeline_depth(const rf_pipeline *p)
{
	return p ? p->depth : 0;
}

const char *rf_pipeline_backend(const rf_pipeline *p)
{
	return p ? p->eng.be->name : "";
}

size_t rf_pipeline_slot_bytes(const rf_pipeline *p)
{
	return p ? p->eng.slot_bytes : 0;
}

int rf_pipeline_collect_stats(rf_pipeline *p, int on)
{
	if (p == NULL)
		return rf__err(RF_EINVAL, "rf_pipeline_collect_stats: p is NULL");
	return rf__engine_collect_stats(&p->eng, "rf_pipeline_collect_stats", on);
}

int rf_pipeline_stats(const rf_pipeline *p, rf_stats *out)
{
	if (p == NULL || out == NULL)
		return rf__err(RF_EINVAL, "rf_pipeline_stats: %s is NULL", p == NULL ? "p" : "out");
	return rf__engine_stats(&p->eng, "rf_pipeline_stats", out);
}

int rf_pipeline_cancel(rf_pipeline *p)
{
	if (p == NULL)
		return rf__err(RF_EINVAL, "rf_pipeline_cancel: p is NULL");
	return rf__engine_cancel(&p->eng);
}

int rf_pipeline_trace(rf_pipeline *p, const char *path)
{
	if (p == NULL)
		return rf__err(RF_EINVAL, "rf_pipeline_trace: p is NULL");
	if (path != NULL && path[0] == '\0')
		return rf__err(RF_EINVAL, "rf_pipeline_trace: empty path");
	return rf__engine_trace(&p->eng, "rf_pipeline_trace", path);
}

/* Placement is a property of the ring's address: the staging layer knows every region it mapped. A
 * device ring (cuda) is not host memory: there the backend reports its pinned host ring. */
int rf_pipeline_placement(const rf_pipeline *p, rf_placement *out)
{
	if (p == NULL || out == NULL)
		return rf__err(RF_EINVAL, "rf_pipeline_placement: %s is NULL", p == NULL ? "p" : "out");
	if (p->eng.be->placement != NULL) {
		int rc = p->eng.be->placement(p->eng.ctx, out);
		return rc == RF_OK ? RF_OK : rf__err(rc, "rf_pipeline_placement: %s", rf__errmsg_peek());
	}
	if (rf__staging_placement(p->eng.slots, out) != RF_OK)
		return rf__err(RF_ENOTSUP, "rf_pipeline_placement: the ring of backend %s is not staging memory",
			       p->eng.be->name);
	return RF_OK;
}

/* White-box tests check the ring's pages against the kernel: they need its address. */
const rf__engine *rf__pipeline_engine(const rf_pipeline *p)
{
	return &p->eng;
}

const char *rf_pipeline_describe(const rf_pipeline *p)
{
	return p ? p->eng.describe : "";
}

unsigned rf_pipeline_copy_queues(const rf_pipeline *p)
{
	return p ? p->copy_queues : 0;
}

void rf_pipeline_destroy(rf_pipeline *p)
{
	if (p != NULL && rf__engine_destroy_begin(&p->eng))
		rf__pipeline_free(p);
}

/* ---- keyed use: thin wrappers over runtime/keyed.c ------------------------------------------------- */

/* Keyed calls need an idle pipeline (not running, not from a compute callback) whose backend does
 * keyed copies. */
static int rf__keyed_ready(rf_pipeline *p, const char *who)
{
	if (p == NULL)
		return rf__err(RF_EINVAL, "%s: p is NULL", who);
	if (atomic_load(&p->eng.state) != RF__IDLE)
		return rf__err(RF_EBUSY, "%s: a run is in progress (or called from a compute callback)", who);
	if (p->eng.keyed == NULL)
		return rf__err(RF_ENOTSUP, "%s: backend %s has no keyed use", who, p->eng.be->name);
	return RF_OK;
}

int rf_pipeline_prefetch(rf_pipeline *p, uint64_t key, const void *src, size_t bytes, unsigned flags)
{
	int rc = rf__keyed_ready(p, "rf_pipeline_prefetch");
	return rc != RF_OK ? rc : rf__keyed_prefetch(p->eng.keyed, key, src, bytes, flags);
}

int rf_pipeline_acquire(rf_pipeline *p, uint64_t key, const void *src, size_t bytes, void *stream,
			unsigned flags, rf_block *out)
{
	int rc = rf__keyed_ready(p, "rf_pipeline_acquire");
	return rc != RF_OK ? rc : rf__keyed_acquire(p->eng.keyed, key, src, bytes, stream, flags, out);
}

int rf_pipeline_release(rf_pipeline *p, const rf_block *block)
{
	int rc = rf__keyed_ready(p, "rf_pipeline_release");
	return rc != RF_OK ? rc : rf__keyed_release(p->eng.keyed, block);
}

int rf_pipeline_evict(rf_pipeline *p, uint64_t key)
{
	int rc = rf__keyed_ready(p, "rf_pipeline_evict");
	return rc != RF_OK ? rc : rf__keyed_evict(p->eng.keyed, key);
}

int rf_pipeline_lookup(const rf_pipeline *p, uint64_t key, rf_key_state *state, unsigned *slot)
{
	if (p == NULL || state == NULL)
		return rf__err(RF_EINVAL, "rf_pipeline_lookup: %s is NULL", p == NULL ? "p" : "state");
	if (p->eng.keyed == NULL || atomic_load(&((rf_pipeline *)p)->eng.state) != RF__IDLE) {
		*state = RF_KEY_ABSENT; /* a run empties the cache before it reuses the slots */
		return RF_OK;
	}
	return rf__keyed_lookup(p->eng.keyed, key, state, slot);
}

int rf_pipeline_keyed_stats(const rf_pipeline *p, rf_keyed_stats *out)
{
	if (p == NULL || out == NULL)
		return rf__err(RF_EINVAL, "rf_pipeline_keyed_stats: %s is NULL", p == NULL ? "p" : "out");
	if (p->eng.keyed == NULL)
		memset(out, 0, sizeof *out);
	else
		rf__keyed_stats(p->eng.keyed, out);
	return RF_OK;
}
