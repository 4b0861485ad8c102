/* runtime/engine.c — the executor core shared by rf_pipeline and rf_exec. */
#include "base/alloc.h"
#include "runtime/engine.h"
#include "runtime/keyed.h"
#include "base/error.h"
#include "runtime/trace.h"

#include <stdlib.h>
#include <string.h>

#include <stdint.h>

/* Open `be` and allocate the slots; on failure nothing is left open. */
static int rf__engine_start(rf__engine *e, const char *who, const rf__open_args *args)
{
	int rc = rf__be_open(e->be, args, &e->ctx);
	if (rc != RF_OK)
		return rc;
	void *mem = NULL;
	if ((rc = rf__be_slots_alloc(e->be, e->ctx, e->slots_len, &mem)) != RF_OK) {
		rf__err(rc, "%s: ring slots: %s", who, rf__errmsg_peek());
		rf__be_close(e->be, e->ctx);
		return rc;
	}
	e->slots = mem;
	return RF_OK;
}

int rf__engine_init(rf__engine *e, const char *who, const char *backend, int device,
		    struct rf_program *prog, size_t slot_bytes)
{
	int rc;
	e->prog = prog;
	e->slot_bytes = slot_bytes;
	/* min_slots (set by the owner before init): room for a deeper program later (depth = auto). */
	unsigned nslots = prog->nslots > e->min_slots ? prog->nslots : e->min_slots;
	if (nslots > 0 && slot_bytes > SIZE_MAX / nslots) {
		rc = rf__err(RF_EINVAL, "%s: %u slots of %zu bytes overflow size_t", who, nslots, slot_bytes);
		goto fail_prog;
	}
	e->slots_len = (size_t)(nslots ? nslots : 1) * slot_bytes;
	if ((rc = rf__backend_lookup(backend, device, &e->be)) != RF_OK)
		goto fail_prog;
	rf__open_args args = {prog->nqueues ? prog->nqueues : 1, device, &e->staging, prog, slot_bytes,
			     nslots ? nslots : 1, e->wait_spin_ns};
	e->nslots = nslots ? nslots : 1;
	rc = rf__engine_start(e, who, &args);
	/* "auto" promised a backend that works here: a GPU that probes usable but cannot host this
	 * pipeline (device memory, pinned memory) falls back to the CPU backends, and describe says why. */
	char why[200] = "";
	if (rc != RF_OK && strcmp(backend, "auto") == 0 && (e->be->caps & RF__CAP_DEVICE)) {
		snprintf(why, sizeof why, "%s", rf__errmsg_peek());
		if ((rc = rf__backend_lookup("threads", device, &e->be)) == RF_OK)
			rc = rf__engine_start(e, who, &args);
	}
	if (rc != RF_OK)
		goto fail_prog;
	rf__be_describe(e->be, e->ctx, e->describe, sizeof e->describe);
	if (why[0] != '\0') {
		size_t len = strlen(e->describe);
		snprintf(e->describe + len, sizeof e->describe - len, "; auto: cuda not used: %s", why);
	}
	atomic_init(&e->state, RF__IDLE);
	atomic_init(&e->cancel, 0);
	return RF_OK;
fail_prog:
	rf_program_destroy(prog);
	e->prog = NULL;
	return rc;
}

int rf__engine_trace(rf__engine *e, const char *who, const char *path)
{
	if (atomic_load(&e->state) != RF__IDLE)
		return rf__err(RF_EBUSY, "%s: cannot change tracing while running", who);
	char *copy = NULL;
	if (path != NULL && (copy = rf__strdup(path)) == NULL)
		return rf__err(RF_ENOMEM, "%s: out of memory", who);
	free(e->trace_path);
	e->trace_path = copy;
	return RF_OK;
}

void rf__engine_fini(rf__engine *e)
{
	free(e->trace_path);
	rf__be_slots_free(e->be, e->ctx, e->slots, e->slots_len);
	rf__be_close(e->be, e->ctx);
	rf_program_destroy(e->prog);
}

static int rf__check_inputs(const rf__engine *e, const char *who, size_t nblocks, const void *const *srcs,
			    const size_t *sizes, rf_compute_fn compute, uint64_t *bytes)
{
	if (srcs == NULL || sizes == NULL || compute == NULL)
		return rf__err(RF_EINVAL, "%s: %s is NULL with nblocks %zu", who,
			       srcs == NULL ? "srcs" : sizes == NULL ? "sizes" : "compute", nblocks);
	if (nblocks < e->prog->nblocks_min)
		return rf__err(RF_EINVAL, "%s: the graph uses blocks up to %zu but nblocks is %zu", who,
			       e->prog->nblocks_min - 1, nblocks);
	if (nblocks > (size_t)INT64_MAX / 4)
		return rf__err(RF_EINVAL, "%s: nblocks %zu is too large", who, nblocks);
	for (size_t i = 0; i < nblocks; i++) {
		if (sizes[i] > e->slot_bytes)
			return rf__err(RF_EINVAL, "%s: block %zu is %zu bytes, over slot_bytes %zu", who, i,
				       sizes[i], e->slot_bytes);
		if (srcs[i] == NULL && sizes[i] != 0)
			return rf__err(RF_EINVAL, "%s: block %zu has a NULL source and %zu bytes", who, i, sizes[i]);
		*bytes += sizes[i];
	}
	return RF_OK;
}

static int rf__engine_exec(rf__engine *e, const char *who, size_t nblocks, const void *const *srcs,
			   const size_t *sizes, rf_compute_fn compute, void *user)
{
	rf__run run = {e->prog, nblocks, srcs, sizes, compute, user, e->slots, e->slot_bytes, &e->cancel, 0, 0, NULL,
		       NULL};
	if (e->collect_stats) {
		memset(e->qstats, 0, sizeof e->qstats);
		run.stats = e->qstats;
	}
	rf__trace trace;
	if (e->trace_path != NULL || e->measure != NULL || e->oracle != NULL) {
		if (rf__trace_begin(&trace, e->prog, nblocks) != RF_OK)
			return rf__err(RF_ENOMEM, "%s: %s", who, rf__errmsg_peek());
		run.trace = &trace;
	}
	int64_t t0 = rf__trace_now();
	int rc = rf__be_run(e->be, e->ctx, &run);
	e->last.wall_ns = (uint64_t)(rf__trace_now() - t0);
	if (run.trace != NULL) {
		int orc = e->oracle != NULL && rc == RF_OK ? e->oracle(e->owner, &trace, nblocks) : RF_OK;
		if (orc != RF_OK) { /* RF_EHAZARD, or RF_ENOMEM for the oracle's own tables */
			rf__trace_drop(&trace);
			return rf__err(orc, "%s: %s", who, rf__errmsg_peek());
		}
		if (e->measure != NULL && rc == RF_OK)
			e->measure(e->owner, &trace);
		if (e->trace_path == NULL) {
			rf__trace_drop(&trace);
		} else {
			int trc = rf__trace_end(&trace, e->trace_path, e->be->name);
			if (rc == RF_OK && trc != RF_OK)
				return rf__err(trc, "%s: run succeeded, but %s", who, rf__errmsg_peek());
		}
	}
	switch (rc) {
	case RF_OK:
		return RF_OK;
	case RF_ECALLBACK:
		return rf__err(RF_ECALLBACK, "%s: compute failed at block %zu (returned %d)", who,
			       run.failed_block, run.failed_value);
	case RF_ECANCELED:
		return rf__err(RF_ECANCELED, "%s: run canceled", who);
	default:
		return rf__err(rc, "%s: backend %s: %s", who, e->be->name, rf__errmsg_peek());
	}
}

/* Queue 0 computes (in a ring, and by convention); every copy anywhere counts as transfer. */
static void rf__stats_summarise(rf__engine *e)
{
	rf_stats *s = &e->last;
	unsigned nq = e->prog->nqueues;
	s->timed = 1;
	s->nqueues = nq < RF_STATS_QUEUES ? nq : RF_STATS_QUEUES;
	for (unsigned q = 0; q < nq; q++) {
		const rf__qstats *x = &e->qstats[q];
		if (q < RF_STATS_QUEUES) {
			rf_queue_stats y = {(uint64_t)x->busy_ns, (uint64_t)x->wait_ns, x->copies, x->computes};
			s->queue[q] = y;
		}
		if (x->copies > 0 && x->computes == 0)
			s->copy_ns += (uint64_t)x->busy_ns;
	}
	if (nq == 1) /* one queue doing both (cpu-style graphs): its copies are all exposed */
		s->copy_ns = 0;
	uint64_t compute0 = nq > 0 ? (uint64_t)e->qstats[0].busy_ns : 0;
	s->exposed_ns = s->wall_ns > compute0 ? s->wall_ns - compute0 : 0;
	double eff = s->copy_ns ? 1.0 - (double)s->exposed_ns / (double)s->copy_ns : 0.0;
	s->overlap_efficiency = eff < 0 ? 0 : eff > 1 ? 1 : eff;
}

int rf__engine_run(rf__engine *e, const char *who, size_t nblocks, const void *const *srcs,
		   const size_t *sizes, rf_compute_fn compute, void *user)
{
	if (nblocks == 0)
		return RF_OK;
	uint64_t bytes = 0;
	int rc = rf__check_inputs(e, who, nblocks, srcs, sizes, compute, &bytes);
	if (rc != RF_OK)
		return rc;
	int idle = RF__IDLE;
	if (atomic_load(&e->state) != RF__IDLE)
		return rf__err(RF_EBUSY, "%s: already running (one thread at a time, no re-entry from a callback)", who);
	if (e->keyed != NULL && rf__keyed_held(e->keyed))
		return rf__err(RF_EBUSY, "%s: a keyed block is held (release it first)", who);
	/* Clear a stale cancel before the run becomes visible as RUNNING: a cancel that sees RUNNING (see
	 * rf__engine_cancel) then always reaches this run. */
	atomic_store(&e->cancel, 0);
	if (!atomic_compare_exchange_strong(&e->state, &idle, RF__RUNNING))
		return rf__err(RF_EBUSY, "%s: already running (one thread at a time, no re-entry from a callback)", who);
	if (e->keyed != NULL) /* the run reuses every slot: no key stays resident */
		rf__keyed_reset(e->keyed);
	memset(&e->last, 0, sizeof e->last);
	e->last.blocks = nblocks;
	e->last.bytes = bytes;
	rc = rf__engine_exec(e, who, nblocks, srcs, sizes, compute, user);
	if (e->collect_stats)
		rf__stats_summarise(e);
	if (rc == RF_OK && e->after != NULL && atomic_load(&e->state) == RF__RUNNING)
		e->after(e->owner);
	int running = RF__RUNNING;
	if (!atomic_compare_exchange_strong(&e->state, &running, RF__IDLE)) {
		/* Destroyed from inside the run: it is ours to release now. */
		e->release(e->owner);
		return rc;
	}
	return rc;
}

int rf__engine_collect_stats(rf__engine *e, const char *who, int on)
{
	if (atomic_load(&e->state) != RF__IDLE)
		return rf__err(RF_EBUSY, "%s: cannot change statistics while running", who);
	e->collect_stats = on != 0;
	return RF_OK;
}

int rf__engine_stats(const rf__engine *e, const char *who, rf_stats *out)
{
	if (atomic_load(&((rf__engine *)e)->state) != RF__IDLE)
		return rf__err(RF_EBUSY, "%s: the pipeline is running", who);
	*out = e->last;
	return RF_OK;
}

int rf__engine_cancel(rf__engine *e)
{
	if (atomic_load(&e->state) == RF__RUNNING)
		atomic_store(&e->cancel, 1);
	return RF_OK;
}

int rf__engine_destroy_begin(rf__engine *e)
{
	/* Raise cancel before the CAS: once the CAS succeeds the run may release the engine at any moment,
	 * so nothing may touch it after. A stale cancel on an idle engine is cleared by the next run. */
	atomic_store(&e->cancel, 1);
	int running = RF__RUNNING;
	if (atomic_compare_exchange_strong(&e->state, &running, RF__DOOMED))
		return 0;
	/* DOOMED: a second destroy from the same callback; the run still owns the release. */
	return running == RF__DOOMED ? 0 : 1;
}
