/* runtime/pipeline.c — rf_pipeline: the ring of `depth` slots as a periodic program on an engine. */
#include "base/alloc.h"
#include "runtime/config.h"
#include "runtime/pipeline_int.h"
#include "runtime/keyed.h"
#include "runtime/ktrace.h"
#include "base/error.h"
#include "runtime/trace.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int rf__pipeline_params_check(const rf_pipeline_params *pp, rf_pipeline **out)
{
	if (pp == NULL || out == NULL)
		return rf__err(RF_EINVAL, "rf_pipeline_create: %s is NULL", pp == NULL ? "params" : "out");
	if (pp->slot_bytes == 0)
		return rf__err(RF_EINVAL, "rf_pipeline_create: slot_bytes is 0");
	if (pp->depth > RF_MAX_DEPTH)
		return rf__err(RF_EINVAL, "rf_pipeline_create: depth %u is over RF_MAX_DEPTH (%u)", pp->depth,
			       RF_MAX_DEPTH);
	if (pp->depth_auto != 0 && (pp->depth_auto != RF_DEPTH_AUTO || pp->depth != 0))
		return rf__err(RF_EINVAL, "rf_pipeline_create: depth_auto %u with depth %u (RF_DEPTH_AUTO needs depth 0)",
			       pp->depth_auto, pp->depth);
	if (pp->flags != 0)
		return rf__err(RF_EINVAL, "rf_pipeline_create: flags must be 0 (got %#x)", pp->flags);
	for (size_t i = 0; i < sizeof pp->reserved / sizeof pp->reserved[0]; i++)
		if (pp->reserved[i] != 0)
			return rf__err(RF_EINVAL, "rf_pipeline_create: reserved[%zu] must be 0", i);
	/* params.memory, and a backend named here of the other kind (a configured one: in resolve). */
	const char *be;
	int rc = rf__backend_for_memory("rf_pipeline_create", pp->backend ? pp->backend : "auto", NULL,
					(int)pp->memory, &be);
	if (rc != RF_OK)
		return rc;
	if (pp->locality != RF_LOCALITY_CALLER && pp->locality != RF_LOCALITY_COPIER)
		return rf__err(RF_EINVAL, "rf_pipeline_create: locality %llu is neither RF_LOCALITY_CALLER (0) nor "
					  "RF_LOCALITY_COPIER (1)", (unsigned long long)pp->locality);
	if (pp->copy_queues >= RF_MAX_QUEUES)
		return rf__err(RF_EINVAL, "rf_pipeline_create: copy_queues %u is over %u", pp->copy_queues,
			       RF_MAX_QUEUES - 1);
	return RF_OK;
}

static void rf__pipeline_free(void *p)
{
	rf_pipeline *pl = p;
	for (unsigned i = 0; i < pl->probe.n; i++)
		if (i != pl->probe.cur)
			rf_program_destroy(pl->cprog[i]);
	rf__keyed_destroy(pl->eng.keyed); /* waits for keyed copies: before the slots go */
	rf__ktrace_close(pl->eng.ktrace, NULL); /* nobody to tell of a failed write: stop it first to know */
	rf__engine_fini(&pl->eng);
	free(pl);
}

/* rf__engine.before with keyed use: a run reuses every slot, no key stays (RF_EBUSY while one is held). */
static int rf__pipeline_before(void *owner, const char *who)
{
	rf__engine *e = &((rf_pipeline *)owner)->eng;
	int rc = rf__keyed_reset(e->keyed, who);
	if (rc == RF_OK && e->ktrace != NULL)
		rf__ktrace_add(e->ktrace, RF_KTRACE_RESET, 0, 0, UINT32_MAX);
	return rc;
}

/* The values to build with: explicit params, else configured (file < environment), else defaults. */
typedef struct rf__resolved {
	unsigned depth, kq, pins;
	const char *backend;
	rf__staging_policy staging;
	unsigned auto_max; /* non-zero: depth = auto, up to this depth */
	bool device;        /* the backend's slots are device memory (RF__CAP_DEVICE) */
	long long wait_ns;  /* the wait policy (rf__open_args.wait_spin_ns) */
	rf__config cfg;
} rf__resolved;

/* depth = auto: start at the shallowest ring that keeps every copy queue busy; allocate slots for the
 * deepest the budget allows (at most RF__AUTO_MAX_DEPTH, or the top of a device backend's ladder lo,
 * 2 lo, 4 lo: RF__AUTO_NCAND rungs), so that choosing later allocates nothing. */
static int rf__pipeline_auto(const rf_pipeline_params *pp, rf__resolved *r)
{
	const rf__config *c = &r->cfg;
	unsigned lo = rf__ring_busy_depth(r->kq), cap = r->device ? lo << (RF__AUTO_NCAND - 1) : RF__AUTO_MAX_DEPTH;
	unsigned max = cap > lo ? cap : lo;
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

/* RINGFETCH_KEYED_TRACE: this process's first pipeline writes the path itself, later ones path.1, ... */
static int rf__pipeline_ktrace_env(rf_pipeline *p, const rf__config *c)
{
	char path[sizeof c->keyed_trace + 16];
	unsigned seq = rf__ktrace_next_seq();
	if (rf__ktrace_expand(c->keyed_trace, seq, path, sizeof path) != 0)
		return rf__err(RF_ECONFIG, "rf_pipeline_create: RINGFETCH_KEYED_TRACE=\"%.200s\" does not expand to a path "
					   "of at most %zu bytes", c->keyed_trace, sizeof path - 1);
	int rc = rf__ktrace_open("rf_pipeline_create", path, p->eng.nslots, p->eng.slot_bytes, &p->eng.ktrace);
	if (rc == RF_EIO)
		rc = rf__err(RF_ECONFIG, "rf_pipeline_create: RINGFETCH_KEYED_TRACE=\"%.200s\": %s", c->keyed_trace,
			     rf__errmsg_peek());
	return rc;
}

static int rf__pipeline_resolve(const rf_pipeline_params *pp, rf__resolved *r)
{
	rf__config *c = &r->cfg;
	int rc = rf__config_load(c, pp->depth == 0 && pp->depth_auto == 0, pp->backend == NULL, pp->copy_queues == 0,
				 pp->staging == NULL);
	if (rc != RF_OK)
		return rc;
	int want_auto = pp->depth_auto == RF_DEPTH_AUTO || (pp->depth == 0 && c->depth_auto);
	r->depth = pp->depth ? pp->depth : c->depth ? c->depth : 2;
	r->kq = pp->copy_queues ? pp->copy_queues : c->copy_queues ? c->copy_queues : 1;
	r->auto_max = 0;
	/* The backend first: depth = auto depends on its kind ("auto" is a concrete name from here on). */
	const char *from;
	r->backend = rf__config_backend(c, pp->backend, &from);
	if ((rc = rf__backend_for_memory("rf_pipeline_create", r->backend, from, (int)pp->memory, &r->backend)) != RF_OK)
		return rc;
	r->device = rf__backend_is_device(r->backend);
	/* Staging slots per copy queue when the backend's copies need a hop through host memory (cuda). */
	const rf__backend_ops *be;
	r->pins = 0;
	if (r->device && rf__backend_lookup(r->backend, pp->device, &be) == RF_OK && be->stage_slots != NULL)
		r->pins = be->stage_slots(pp->slot_bytes);
	if (want_auto && (rc = rf__pipeline_auto(pp, r)) != RF_OK)
		return rc;
	const char *staging = pp->staging ? pp->staging : c->staging[0] ? c->staging : NULL;
	if ((rc = rf__staging_parse("rf_pipeline_create", staging, &r->staging)) != RF_OK)
		return rc;
	if ((rc = rf__config_wait(pp->wait, c, &r->wait_ns)) != RF_OK)
		return rc;
	if (!rf__ring_depth_is_valid(r->depth, r->kq))
		return rf__err(RF_EINVAL, "rf_pipeline_create: %u copy queues need depth >= %u (depth is %u)", r->kq,
			       rf__ring_busy_depth(r->kq), r->depth);
	return rf__config_budget_check(c, "rf_pipeline_create", r->depth, pp->slot_bytes);
}

/* Whether a ring of depth d is built with locality: asked for (on threads, the one backend that honours
 * it) and deep enough that every queue has a slot of its own (shallower: the ring as planned). */
static int rf__ring_is_local(int local, unsigned d, unsigned kq)
{
	return local && d >= kq + 1;
}

/* A ring program of p's for depth d (test hooks included). */
static int rf__pipeline_program(const rf_pipeline *p, unsigned d, struct rf_program **out)
{
	if (rf__ring_is_local(p->local, d, p->copy_queues))
		return rf__ring_program_local(d, p->copy_queues, out);
	int rc = rf__ring_program(d, p->copy_queues, p->pins, out);
	if (rc == RF_OK && RF__TEST_HOOK(drop_war_wait))
		rf__prog_drop_war(*out, 0);
	if (rc == RF_OK && RF__TEST_HOOK(drop_staging_war))
		rf__prog_drop_war(*out, 1);
	return rc;
}

/* The backend may choose how to run runs (rf__run.vary) unless depth = auto is still comparing runs of
 * its own: measuring (the first run) or probing depths. */
static void rf__pipeline_vary(rf_pipeline *p)
{
	p->eng.vary = p->eng.measure == NULL && p->probe.n < 2;
}

/* Make cprog[i] the program the engine runs (the previous one stays in cprog[]). */
static void rf__auto_install(rf_pipeline *p, unsigned i)
{
	p->probe.cur = i;
	p->eng.prog = p->cprog[i];
	p->eng.local = rf__ring_is_local(p->local, p->probe.cand[i], p->copy_queues);
	atomic_store_explicit(&p->depth, p->probe.cand[i], memory_order_relaxed);
}

/* Probe d's candidates (rf__auto_candidates): their programs are built now and d installed; the runs
 * that follow try them in turn (rf__auto_after, which the measuring run does not reach). Out of memory:
 * nothing is probed, the starting ring stays. Returns how many candidates are in use (0: none). */
static unsigned rf__auto_begin_probing(rf_pipeline *p, unsigned d)
{
	unsigned cand[RF__AUTO_NCAND], n = rf__auto_candidates(d, p->eng.nslots, cand), built = 0, kept = 0;
	struct rf_program *start = p->eng.prog;
	unsigned depth = atomic_load_explicit(&p->depth, memory_order_relaxed);
	for (; built < n; built++) {
		struct rf_program **c = &p->cprog[built];
		kept |= cand[built] == depth;
		if (cand[built] == depth)
			*c = start;
		else if (rf__pipeline_program(p, cand[built], c) != RF_OK)
			break;
	}
	for (unsigned i = 0; built < n && i < built; i++)
		if (p->cprog[i] != start)
			rf_program_destroy(p->cprog[i]);
	if (built < n)
		return 0;
	if (!kept) /* the starting ring is not a candidate */
		rf_program_destroy(start);
	rf__auto_probe_start(&p->probe, cand, n);
	rf__auto_install(p, 0);
	if (n == 1)
		p->probe.n = 0;
	return n;
}

/* After each successful run while probing: note its speed (ns per byte, or per block for empty blocks)
 * against its candidate; when probing ends keep the fastest and release the other programs. */
static void rf__auto_after(void *owner)
{
	rf_pipeline *p = owner;
	if (p->probe.n < 2)
		return;
	const rf_stats *s = &p->eng.last;
	double x = (double)s->wall_ns / (double)(s->bytes ? s->bytes : s->blocks ? s->blocks : 1);
	if (!rf__cmp_note(&p->probe.cmp, x)) {
		rf__auto_install(p, rf__cmp_turn(&p->probe.cmp));
		return;
	}
	unsigned win = p->probe.cmp.best;
	char note[256];
	size_t len = (size_t)snprintf(note, sizeof note, "; probed");
	for (unsigned i = 0; i < p->probe.n && len < sizeof note; i++)
		len += (size_t)snprintf(note + len, sizeof note - len, " %u: %.3g ns/KiB%s", p->probe.cand[i],
					p->probe.cmp.fig[i] * 1024, i + 1 < p->probe.n ? "," : "");
	if (len < sizeof note)
		snprintf(note + len, sizeof note - len, "; depth %u", p->probe.cand[win]);
	rf__engine_describe_append(&p->eng, "%s", note);
	rf__auto_install(p, win);
	for (unsigned i = 0; i < p->probe.n; i++)
		if (i != win)
			rf_program_destroy(p->cprog[i]);
	p->cprog[0] = p->cprog[win];
	p->probe.n = 0;
	p->probe.cur = 0;
	rf__pipeline_vary(p);
}

/* After the first successful run of a depth = auto pipeline: pick the depth from its samples. */
static void rf__pipeline_measure(void *owner, const struct rf__trace *t)
{
	rf_pipeline *p = owner;
	rf__auto_samples a;
	rf__auto_summary x;
	unsigned d = 0, ran = p->eng.ran_deep ? p->eng.deep->nslots
					      : atomic_load_explicit(&p->depth, memory_order_relaxed);
	if (rf__auto_collect(t, ran, &a) == RF_OK)
		d = rf__auto_rule(&a, p->copy_queues, p->eng.nslots, &x);
	rf__auto_samples_free(&a);
	if (d == 0)
		return; /* nothing to learn from (no copies or computes, or no memory): the next run tries again */
	rf__reader *rd = atomic_load_explicit(&p->eng.io.rd, memory_order_relaxed);
	rf__reader_ahead ra;
	size_t piece = p->eng.ran_deep && rd != NULL ? rf__reader_reads_get(rd, &ra) : 0;
	if (piece != 0) {
		/* the rule's copy times are the reads' waits for room, not their cost: the reads' choice stands */
		const rf_stats *s = &p->eng.last;
		double block = (double)s->file_bytes / (double)(s->blocks ? s->blocks : 1);
		d = rf__auto_reads_depth((double)ra.on * (double)piece, block, rf__ring_busy_depth(p->copy_queues),
					 p->eng.nslots);
	}
	rf__auto_begin_probing(p, d);
	if (piece != 0) {
		char words[160];
		rf__reader_ahead_words(&ra, words, sizeof words);
		rf__engine_describe_append(&p->eng, "; depth auto: first run %u deep, %u x %zuK read in flight (%s): "
						    "depth %u", ran, ra.on, piece >> 10, words, d);
	} else {
		rf__engine_describe_append(&p->eng,
					   "; depth auto: rule %u (copy mean %.1f us, p90 %.1f us; refill p90 %.1f us; "
					   "compute mean %.1f us; at most %u)",
					   d, x.copy_mean / 1e3, x.copy_p90 / 1e3, x.refill_p90 / 1e3, x.compute_mean / 1e3,
					   p->eng.nslots);
	}
	p->eng.measure = NULL;
	rf__pipeline_vary(p);
}

/* depth = auto on a device backend, at create: no measuring run (a trace times the enqueue), the ladder
 * lo, 2 lo, 4 lo (within the slots) is probed by run time from the first run. */
static void rf__auto_device(rf_pipeline *p)
{
	unsigned d = atomic_load_explicit(&p->depth, memory_order_relaxed), n = rf__auto_begin_probing(p, d);
	if (n < 2) { /* candidates(d, max) are two or more whenever max > d */
		rf__engine_describe_append(&p->eng, "; depth auto (device): depth %u (%s)", d, p->eng.nslots > d ?
					   "out of memory for the ladder" : "the only one the slots allow");
		return;
	}
	char note[128];
	size_t len = (size_t)snprintf(note, sizeof note, "; depth auto (device): ladder");
	for (unsigned i = 0; i < n && len < sizeof note; i++)
		len += (size_t)snprintf(note + len, sizeof note - len, " %u%s", p->probe.cand[i], i + 1 < n ? "," : "");
	rf__engine_describe_append(&p->eng, "%s by run time", note);
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
	p->pins = r.pins;
	p->copy_queues = r.kq;
	p->local = params->locality == RF_LOCALITY_COPIER && strcmp(r.backend, "threads") == 0;
	if ((rc = rf__pipeline_program(p, r.depth, &prog)) != RF_OK)
		goto fail;
	p->eng.local = rf__ring_is_local(p->local, r.depth, r.kq);
	p->eng.staging = r.staging;
	p->eng.wait_spin_ns = r.wait_ns;
	p->eng.min_slots = r.auto_max;
	p->eng.io_online = r.auto_max != 0 && !r.device;
	p->eng.after = r.auto_max != 0 ? rf__auto_after : NULL;
	p->eng.measure = p->eng.io_online ? rf__pipeline_measure : NULL;
	if ((rc = rf__engine_init(&p->eng, "rf_pipeline_create", r.backend, params->device, prog,
				  params->slot_bytes, &r.cfg)) != RF_OK)
		goto fail;
	p->eng.release = rf__pipeline_free;
	p->eng.owner = p;
	/* the measuring run's ring for large file blocks; without it (no memory) it runs the start's */
	if (p->eng.measure != NULL && p->eng.nslots > r.depth &&
	    rf__pipeline_program(p, p->eng.nslots, &p->eng.deep) != RF_OK)
		p->eng.deep = NULL;
	uint64_t hint_bytes = params->hint_bytes ? params->hint_bytes : r.cfg.hint_bytes;
	if (p->eng.be->post != NULL && (rc = rf__keyed_create(&p->eng, hint_bytes, &p->eng.keyed)) != RF_OK) {
		rc = rf__err(rc, "rf_pipeline_create: %s", rf__errmsg_peek());
		goto fail_free;
	}
	p->eng.before = p->eng.keyed != NULL ? rf__pipeline_before : NULL;
	atomic_init(&p->depth, r.depth);
	if (r.auto_max != 0 && r.device)
		rf__auto_device(p);
	rf__pipeline_vary(p);
	if (p->local)
		rf__engine_describe_append(&p->eng, "; locality: each block computed by the thread that copied it "
						    "(RF_LOCALITY_COPIER)%s",
					   p->eng.local ? "" : ", from depth 2 (copy queues + 1) on");
	if (r.cfg.trace[0] != '\0' && (rc = rf__engine_trace(&p->eng, "rf_pipeline_create", r.cfg.trace)))
		goto fail_free;
	if (r.cfg.keyed_trace[0] != '\0' && p->eng.keyed != NULL && (rc = rf__pipeline_ktrace_env(p, &r.cfg)) != RF_OK)
		goto fail_free;
	*out = p;
	return RF_OK;
fail_free:
	rf__pipeline_free(p);
	return rc;
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
	return p ? atomic_load_explicit(&p->depth, memory_order_relaxed) : 0;
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
	if (atomic_load(&p->eng.state) != RF__IDLE)
		return rf__err(RF_EBUSY, "rf_pipeline_collect_stats: cannot change statistics while running");
	p->eng.collect_stats = on != 0;
	return RF_OK;
}

int rf_pipeline_stats(const rf_pipeline *p, rf_stats *out)
{
	if (p == NULL || out == NULL)
		return rf__err(RF_EINVAL, "rf_pipeline_stats: %s is NULL", p == NULL ? "p" : "out");
	/* stats_mu guards `published` only; locking it changes nothing a reader can see. */
	pthread_mutex_t *mu = (pthread_mutex_t *)&p->eng.stats_mu;
	pthread_mutex_lock(mu);
	*out = p->eng.published;
	pthread_mutex_unlock(mu);
	return RF_OK;
}

int rf_pipeline_cancel(rf_pipeline *p)
{
	if (p == NULL)
		return rf__err(RF_EINVAL, "rf_pipeline_cancel: p is NULL");
	atomic_store(&p->eng.cancel, 1); /* whatever the state: with no run, the next one is canceled */
	return RF_OK;
}

int rf_pipeline_cancel_clear(rf_pipeline *p)
{
	if (p == NULL)
		return rf__err(RF_EINVAL, "rf_pipeline_cancel_clear: p is NULL");
	if (atomic_load(&p->eng.state) != RF__IDLE)
		return rf__err(RF_EBUSY, "rf_pipeline_cancel_clear: a run is in progress");
	atomic_store(&p->eng.cancel, 0);
	return RF_OK;
}

int rf_pipeline_trace(rf_pipeline *p, const char *path)
{
	if (p == NULL)
		return rf__err(RF_EINVAL, "rf_pipeline_trace: p is NULL");
	if (path != NULL && path[0] == '\0')
		return rf__err(RF_EINVAL, "rf_pipeline_trace: empty path");
	int rc = RF_OK;
	if (p->eng.keyed != NULL) { /* the keyed copies traced so far belong to the file set now */
		if ((rc = rf__engine_keyed_begin(&p->eng, "rf_pipeline_trace")) != RF_OK)
			return rc;
		rc = rf__keyed_trace_flush(p->eng.keyed);
		rf__engine_keyed_end(&p->eng);
	}
	return rc != RF_OK ? rc : rf__engine_trace(&p->eng, "rf_pipeline_trace", path);
}

/* The staging layer knows every region it mapped; a device backend reports its pinned host ring. */
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

#ifdef RF_TESTING
const rf__engine *rf__pipeline_engine(const rf_pipeline *p)
{
	return &p->eng;
}
#endif

const char *rf_pipeline_describe(const rf_pipeline *p)
{
	return p ? rf__engine_describe(&p->eng) : "";
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
