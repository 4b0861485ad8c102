/* runtime/engine.c — the executor core shared by rf_pipeline and rf_exec. */
#include "base/align.h"
#include "base/alloc.h"
#include "base/error.h"
#include "base/pool.h"
#include "io/file.h"
#include "runtime/autodepth.h"
#include "runtime/engine.h"
#include "runtime/oracle.h"
#include "runtime/trace.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Lay the slots out for e->be (slot_align apart), open it and allocate them; on failure nothing is
 * left open. */
static int rf__engine_start(rf__engine *e, const char *who, rf__open_args *args)
{
	size_t align = e->be->slot_align ? e->be->slot_align : RF__SLOT_ALIGN_DEFAULT;
	size_t n = args->nslots, stride = rf__align_up(e->slot_bytes, align);
	int host = !(e->be->caps & RF__CAP_DEVICE);
	if (stride == 0 || stride > SIZE_MAX / n)
		return rf__err(RF_EINVAL, "%s: %zu slots of %zu bytes overflow size_t", who, n, e->slot_bytes);
	e->slot_stride = args->slot_stride = stride;
	e->slots_len = n * stride;
	if (host) /* a host ring: on whole huge pages when the budget allows */
		e->slots_len = rf__staging_ring_len(e->slots_len, e->budget);
	int rc = rf__backend_open(e->be, args, &e->ctx);
	if (rc != RF_OK)
		return rc;
	void *mem = NULL, *stage = NULL;
	e->stage_len = host ? (size_t)e->prog->nstage * stride : 0;
	if ((rc = rf__backend_slots_alloc(e->be, e->ctx, e->slots_len, &mem)) != RF_OK ||
	    (e->stage_len && (rc = rf__staging_alloc(&e->staging, e->stage_len, RF__STAGING_SLOT_ALIGN, &stage)) != RF_OK)) {
		rf__err(rc, "%s: %s slots: %s", who, mem ? "staging" : "ring", rf__errmsg_peek());
		rf__backend_slots_free(e->be, e->ctx, mem, e->slots_len);
		rf__backend_close(e->be, e->ctx);
		return rc;
	}
	e->slots = mem;
	e->stage = stage;
	return RF_OK;
}

int rf__engine_init(rf__engine *e, const char *who, const char *backend, int device,
		    struct rf_program *prog, size_t slot_bytes, const rf__config *cfg)
{
	e->prog = prog;
	e->oracle = cfg->oracle;
	e->slot_bytes = slot_bytes;
	e->budget = (size_t)cfg->memory_budget;
	/* min_slots: room for a deeper program later (depth = auto). */
	e->nslots = prog->nslots > e->min_slots ? prog->nslots : e->min_slots;
	e->nslots += e->nslots == 0;
	int64_t spin = e->wait_spin_ns < 0 ? 0 : e->wait_spin_ns ? e->wait_spin_ns : RF__WAIT_AUTO_NS;
	rf__open_args args = {.nqueues = prog->nqueues ? prog->nqueues : 1, .device = device, .staging = &e->staging,
			      .prog = prog, .slot_bytes = slot_bytes, .nslots = e->nslots, .wait_spin_ns = spin,
			      .oracle = cfg->oracle, .handoff = cfg->handoff, .overlap = cfg->overlap,
			      .worker_cpus = cfg->worker_cpus, .files_report = &e->io, .klanes = &e->klanes};
	int rc = rf__backend_lookup(backend, device, &e->be);
	if (rc != RF_OK)
		goto fail;
	rc = rf__engine_start(e, who, &args);
	/* "auto" promised a backend that works here: a GPU that cannot host this pipeline (device or pinned
	 * memory) falls back to the CPU backends, and describe says why. */
	char why[200] = "";
	if (rc != RF_OK && strcmp(backend, "auto") == 0 && (e->be->caps & RF__CAP_DEVICE)) {
		snprintf(why, sizeof why, "%s", rf__errmsg_peek());
		if ((rc = rf__backend_lookup("threads", device, &e->be)) == RF_OK)
			rc = rf__engine_start(e, who, &args);
	}
	if (rc != RF_OK)
		goto fail;
	rf__backend_describe(e->be, e->ctx, e->desc_core, sizeof e->desc_core);
	_Static_assert(sizeof e->describe[0] >= sizeof e->desc_core, "a version holds the core");
	memcpy(e->describe[0], e->desc_core, sizeof e->desc_core);
	if (why[0] != '\0')
		rf__engine_describe_append(e, "; auto: cuda not used: %s", why);
	e->forks = rf__fork_count();
	rf__flight_init(&e->io, NULL, 0, NULL);
	pthread_mutex_init(&e->stats_mu, NULL);
	return RF_OK;
fail:
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

const char *rf__engine_describe(const rf__engine *e)
{
	return e->describe[atomic_load_explicit(&e->desc_cur, memory_order_acquire)];
}

/* Publish core + note as the next version, if one is left. */
static void rf__engine_describe_publish(rf__engine *e)
{
	unsigned k = atomic_load_explicit(&e->desc_cur, memory_order_relaxed);
	if (k + 1 >= RF__DESCRIBE_VERSIONS)
		return;
	char *d = e->describe[k + 1];
	size_t cap = sizeof e->describe[0], a = strlen(e->desc_core), f = strlen(e->desc_files),
	       b = strlen(e->desc_note);
	a = a < cap - 1 ? a : cap - 1;
	f = f < cap - 1 - a ? f : cap - 1 - a;
	b = b < cap - 1 - a - f ? b : cap - 1 - a - f; /* a long line loses the end of its note */
	memcpy(d, e->desc_core, a);
	memcpy(d + a, e->desc_files, f);
	memcpy(d + a + f, e->desc_note, b);
	d[a + f + b] = '\0';
	atomic_store_explicit(&e->desc_cur, k + 1, memory_order_release);
}

void rf__engine_describe_append(rf__engine *e, const char *fmt, ...)
{
	if (atomic_load_explicit(&e->desc_cur, memory_order_relaxed) + 1 >= RF__DESCRIBE_VERSIONS)
		return;
	size_t len = strlen(e->desc_core), cap = sizeof e->desc_core;
	if (len < cap) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(e->desc_core + len, cap - len, fmt, ap);
		va_end(ap);
	}
	rf__engine_describe_publish(e);
}

int rf__engine_io(rf__engine *e, const char *who)
{
	if (atomic_load_explicit(&e->io.rd, memory_order_relaxed) != NULL)
		return RF_OK;
	/* Device rings are read through the backend's pinned staging, not by this thread. */
	int host = !(e->be->caps & RF__CAP_DEVICE);
	/* The read-ahead window of the caller's walks (io/reader.h), within the memory budget with the ring. */
	size_t win = host ? e->io_online ? RF__ENGINE_WINDOW_ONLINE : RF__ENGINE_WINDOW : 0;
	if (e->budget != 0)
		win = e->budget > e->slots_len + win ? win : e->budget > e->slots_len ? e->budget - e->slots_len : 0;
	e->io.window = win >= RF__ENGINE_WINDOW / 4 ? win : 0;
	e->io.window_online = e->io_online;
	e->io.window_from = RF__ENGINE_WINDOW; /* more only where more pays */
	/* Larger blocks are large requests of their own, read straight into their slots: through the window
	 * they would cost a move each (measured: 4 MiB blocks read slower and at 1.4-1.6x the CPU per GB). */
	e->io.window_block = RF__ENGINE_WINDOW / 2;
	int rc = rf__flight_open(&e->io, host ? e->slots : NULL, host ? e->slots_len : 0);
	if (rc != RF_OK)
		return rf__err(rc, "%s: file reads: %s", who, rf__errmsg_peek());
	e->files_gen = e->io.why_gen + e->io.fill_gen - 1; /* written below */
	rf__engine_io_refresh(e);
	return RF_OK;
}

void rf__engine_io_refresh(rf__engine *e)
{
	if (atomic_load_explicit(&e->io.rd, memory_order_relaxed) == NULL)
		return;
	rf__flight_refresh(&e->io);
	unsigned lg = atomic_load_explicit(&e->io.lanes_gen, memory_order_acquire), g = e->io.why_gen + e->io.fill_gen;
	if (g == e->files_gen && lg == e->lanes_gen)
		return;
	e->files_gen = g, e->lanes_gen = lg;
	char lane[sizeof e->io.lanes_why], d[sizeof e->desc_files];
	unsigned no = 0;
	rf__flight_lanes(&e->io, lane, sizeof lane, &no);
	/* A lane's reader that reads as the caller's does goes unsaid; one that does not is named. A fixed
	 * depth whose reads kept the compute waiting is said after the caller's reader (rf__flight.fill). */
	const char *sep = e->io.fill[0] != '\0' ? "; " : "";
	if (lane[0] != '\0' && strcmp(lane, e->io.why) != 0)
		snprintf(d, sizeof d, "; files: %s%s%s; copy lane %u: %s", e->io.why, sep, e->io.fill, no, lane);
	else
		snprintf(d, sizeof d, "; files: %s%s%s", e->io.why, sep, e->io.fill);
	if (strcmp(d, e->desc_files) == 0)
		return;
	memcpy(e->desc_files, d, sizeof d);
	rf__engine_describe_publish(e);
}

void rf__engine_fini(rf__engine *e)
{
	rf__flight_fini(&e->io);
	rf_program_destroy(e->deep);
	free(e->src);
	pthread_mutex_destroy(&e->stats_mu);
	free(e->trace_path);
	rf__backend_slots_free(e->be, e->ctx, e->slots, e->slots_len);
	rf__staging_free(e->stage);
	rf__backend_close(e->be, e->ctx);
	rf_program_destroy(e->prog);
}

/* Let go of the files of the run's blocks before `end` (e->src; none held when nfile is 0). */
static void rf__unhold_files(const rf__engine *e, size_t end, size_t nfile)
{
	for (size_t i = 0; nfile > 0 && i < end; i++)
		if (e->src[i].fs.f != NULL)
			rf__file_unhold(e->src[i].fs.f);
}

/* Once the run is ours, if a file is open: each block's source resolved into e->src (grown to the
 * longest run, kept; rf__run.src); with file blocks, the reader opened and their files held for the run
 * (rf_file_close is then RF_EBUSY; RF_EINVAL and none held if a file was closed since). */
static int rf__engine_files(rf__engine *e, const char *who, size_t nblocks, const void *const *srcs,
			    const size_t *sizes, size_t *nfile, uint64_t *file_bytes)
{
	if (!rf__file_any()) /* per run, not per block */
		return RF_OK;
	if (nblocks > e->src_cap) {
		rf__src *a = nblocks <= SIZE_MAX / sizeof *a ? rf__realloc(e->src, nblocks * sizeof *a) : NULL;
		if (a == NULL)
			return rf__err(RF_ENOMEM, "%s: out of memory for %zu blocks' sources", who, nblocks);
		e->src = a, e->src_cap = nblocks;
	}
	for (size_t i = 0; i < nblocks; i++) {
		e->src[i] = (rf__src){.p = srcs[i]};
		if (sizes[i] == 0)
			continue;
		int rc = rf__file_classify(who, "a block", srcs[i], sizes[i], &e->src[i]);
		if (rc < 0) { /* again, for the message only: naming every block would cost each run a format */
			char what[48];
			snprintf(what, sizeof what, "block %zu", i);
			int again = rf__file_classify(who, what, srcs[i], sizes[i], &e->src[i]);
			return again < 0 ? again : rc; /* the file closed in between: the first sentence stands */
		}
		*nfile += (size_t)rc;
		*file_bytes += rc ? sizes[i] : 0;
	}
	int rc = *nfile > 0 ? rf__engine_io(e, who) : RF_OK;
	for (size_t i = 0; *nfile > 0 && i < nblocks && rc == RF_OK; i++)
		if (e->src[i].fs.f != NULL && (rc = rf__file_hold(who, "a block", &e->src[i], sizes[i])) != RF_OK)
			rf__unhold_files(e, i, *nfile);
	return rc;
}

/* A file block of at least its device's largest request is large requests of its own: the read-ahead
 * window would only move it (measured: the same speed, at 1.2x the CPU per GB at 1 MiB). */
static int rf__engine_block_is_large(const rf__engine *e, size_t n)
{
	const rf_file *f = e->src[0].fs.f;
	return n >= (f != NULL && f->io_max != 0 ? f->io_max : RF__READER_PIECE_UNKNOWN);
}

static int rf__check_inputs(const rf__engine *e, const char *who, size_t nblocks, const void *const *srcs,
			    const size_t *sizes, rf_compute_fn compute, uint64_t *bytes, size_t *nonempty)
{
	if (nblocks < e->prog->nblocks_min)
		return rf__err(RF_EINVAL, "%s: the graph uses blocks up to %zu but nblocks is %zu", who,
			       e->prog->nblocks_min - 1, nblocks);
	if (srcs == NULL || sizes == NULL || compute == NULL)
		return rf__err(RF_EINVAL, "%s: %s is NULL with nblocks %zu", who,
			       srcs == NULL ? "srcs" : sizes == NULL ? "sizes" : "compute", nblocks);
	if (nblocks > RF__MAX_NBLOCKS)
		return rf__err(RF_EINVAL, "%s: nblocks %zu is over %zu", who, nblocks, RF__MAX_NBLOCKS);
	/* A source must not overlap the ring or its staging slots: a copy from a slot races with its refill
	 * (the ring's edges cover only the slots' own blocks). A device backend's are another address space
	 * (empty ranges). Integers: unrelated objects. */
	const int host = !(e->be->caps & RF__CAP_DEVICE);
	const uintptr_t rlo = (uintptr_t)e->slots, rhi = host ? rlo + e->slots_len : rlo;
	const uintptr_t slo = (uintptr_t)e->stage, shi = host ? slo + e->stage_len : slo;
	uint64_t sum = *bytes; /* in registers: the outputs may alias sizes[] as far as the compiler knows */
	size_t nz = *nonempty;
	for (size_t i = 0; i < nblocks; i++) {
		if (sizes[i] > e->slot_bytes)
			return rf__err(RF_EINVAL, "%s: block %zu is %zu bytes, over slot_bytes %zu", who, i,
				       sizes[i], e->slot_bytes);
		if (srcs[i] == NULL && sizes[i] != 0)
			return rf__err(RF_EINVAL, "%s: block %zu has a NULL source and %zu bytes", who, i, sizes[i]);
		uintptr_t s = (uintptr_t)srcs[i], t = s + sizes[i];
		if (sizes[i] != 0 && ((s < rhi && t > rlo) || (s < shi && t > slo)))
			return rf__err(RF_EINVAL, "%s: block %zu's source lies in the pipeline's own ring (copy it out "
						  "first: a slot is refilled while later blocks are copied)", who, i);
		sum += sizes[i];
		nz += sizes[i] != 0;
	}
	*bytes = sum;
	*nonempty = nz;
	return RF_OK;
}

static int rf__engine_exec(rf__engine *e, const char *who, struct rf_program *prog, size_t nblocks,
			   const void *const *srcs, const size_t *sizes, rf_compute_fn compute, void *user, size_t nfile,
			   int files_only)
{
	rf__run run = {.prog = prog, .nblocks = nblocks, .srcs = srcs, .sizes = sizes, .compute = compute,
		       .user = user, .slots = e->slots, .slot_stride = e->slot_stride, .stage = e->stage,
		       .cancel = &e->cancel, .nfile = nfile, .src = nfile ? e->src : NULL, .io = nfile ? &e->io : NULL,
		       .files_only = files_only, .bytes = e->last.bytes, .vary = e->vary,
		       .sched = (e->be->caps & RF__CAP_OVERLAP) ? RF_SCHEDULE_RING : RF_SCHEDULE_INLINE};
	if (e->collect_stats) {
		memset(e->qstats, 0, sizeof e->qstats);
		run.stats = e->qstats;
	}
	/* A cancel left pending between runs stops this one before any work. */
	if (atomic_load(&e->cancel))
		return rf__err(RF_ECANCELED, "%s: canceled before it started (a pending rf_pipeline_cancel)", who);
	rf__trace trace;
	if (e->trace_path != NULL || e->measure != NULL || e->oracle) {
		int sampled = e->trace_path == NULL && !e->oracle; /* measuring only: bounded memory */
		if (rf__trace_begin(&trace, prog, nblocks, sampled, prog->nslots, RF__AUTO_SAMPLES))
			return rf__err(RF_ENOMEM, "%s: %s", who, rf__errmsg_peek());
		run.trace = &trace;
	}
	int64_t t0 = rf__now_ns();
	int rc = rf__backend_run(e->be, e->ctx, &run);
	e->last.wall_ns = (uint64_t)(rf__now_ns() - t0);
	e->last.schedule = run.sched == RF_SCHEDULE_RING && e->local ? RF_SCHEDULE_LOCAL : run.sched;
	e->last.handoff_runs = run.handoff != 0; /* this run's share of the total (rf__stats_publish) */
	if (run.note != NULL) { /* a new version, the backend's schedule note replaced */
		snprintf(e->desc_note, sizeof e->desc_note, "%s", run.note);
		rf__engine_describe_publish(e);
	}
	if (run.trace != NULL) {
		int orc = !e->oracle || rc != RF_OK ? RF_OK
			  : e->graph != NULL ? rf__oracle_check_graph(&trace, e->graph)
					     : rf__oracle_check(&trace, nblocks);
		if (orc != RF_OK) { /* RF_EHAZARD, or RF_ENOMEM for the oracle's own tables */
			rf__trace_drop(&trace);
			return rf__err(orc, "%s: %s", who, rf__errmsg_peek());
		}
		if (e->measure != NULL && rc == RF_OK)
			e->measure(e->owner, &trace);
		int trc = e->trace_path != NULL ? rf__trace_write(&trace, e->trace_path, e->be->name) : RF_OK;
		rf__trace_drop(&trace);
		if (rc == RF_OK && trc != RF_OK)
			return rf__err(trc, "%s: run succeeded, but %s", who, rf__errmsg_peek());
	}
	switch (rc) {
	case RF_OK:
		return RF_OK;
	case RF_ECALLBACK:
		return rf__err(RF_ECALLBACK, "%s: compute failed at block %zu (returned %d)", who,
			       run.failed_block, run.failed_value);
	case RF_ECANCELED:
		return rf__err(RF_ECANCELED, "%s: run canceled", who);
	case RF_EIO:
		return rf__err(RF_EIO, "%s: %s", who, rf__errmsg_peek());
	default:
		return rf__err(rc, "%s: backend %s: %s", who, e->be->name, rf__errmsg_peek());
	}
}

_Static_assert(RF_STATS_QUEUES == RF_MAX_QUEUES, "rf_stats reports every queue a program can have");

/* Queue 0 computes (in a ring, and by convention); every copy anywhere counts as transfer. */
static void rf__stats_summarise(rf__engine *e)
{
	rf_stats *s = &e->last;
	unsigned nq = e->prog->nqueues;
	s->timed = 1;
	s->nqueues = nq < RF_STATS_QUEUES ? nq : RF_STATS_QUEUES;
	for (unsigned q = 0; q < nq; q++) {
		const rf__qstats *x = &e->qstats[q];
		s->queue[q] = (rf_queue_stats){.busy_ns = (uint64_t)x->busy_ns, .wait_ns = (uint64_t)x->wait_ns,
					       .copies = x->copies, .computes = x->computes};
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

/* The finished run becomes rf_pipeline_stats' "last run", and is added to the totals. */
static void rf__stats_publish(rf__engine *e)
{
	rf_stats *s = &e->last, *t = &e->published;
	uint64_t wait = 0;
	for (unsigned q = 0; s->timed && q < s->nqueues; q++)
		wait += s->queue[q].wait_ns;
	pthread_mutex_lock(&e->stats_mu);
	rf_stats totals = *t;
	*t = *s;
	t->runs = totals.runs + 1;
	t->total_blocks = totals.total_blocks + s->blocks;
	t->total_bytes = totals.total_bytes + s->bytes;
	t->total_wall_ns = totals.total_wall_ns + s->wall_ns;
	t->timed_runs = totals.timed_runs + (s->timed != 0);
	t->total_exposed_ns = totals.total_exposed_ns + (s->timed ? s->exposed_ns : 0);
	t->total_wait_ns = totals.total_wait_ns + wait;
	t->total_file_bytes = totals.total_file_bytes + s->file_bytes;
	t->total_ahead_blocks = s->total_ahead_blocks ? s->total_ahead_blocks : totals.total_ahead_blocks;
	t->inline_runs = totals.inline_runs + (s->schedule == RF_SCHEDULE_INLINE);
	t->handoff_runs = totals.handoff_runs + s->handoff_runs;
	pthread_mutex_unlock(&e->stats_mu);
}

/* Take the state for a run or a keyed call. Nothing here may touch `cancel` before the CAS is won: a
 * caller that loses it (RF_EBUSY) would erase the cancel of the run that won; the flag is cleared when
 * a run ends instead. */
static int rf__engine_take(rf__engine *e, const char *who, int to)
{
	/* A backend with threads (or a device) does not survive fork(): its threads stayed in the parent. */
	if (e->forks != rf__fork_count() && (e->be->caps & RF__CAP_OVERLAP))
		return rf__err(RF_EBACKEND, "%s: the pipeline was created before fork() and backend %s's threads "
					    "stayed in the parent: use it there, destroy it here", who, e->be->name);
	int idle = RF__IDLE;
	if (atomic_compare_exchange_strong_explicit(&e->state, &idle, to, memory_order_acquire, memory_order_relaxed))
		return RF_OK;
	return rf__err(RF_EBUSY, "%s: %s (one thread at a time, no re-entry from a compute callback)", who,
		       idle == RF__KEYED ? "a keyed call is in progress" : "a run is in progress");
}

/* Give the state taken back; DOOMED instead: destroyed while the call was in progress, the owner is
 * ours to release. */
static void rf__engine_give(rf__engine *e, int from)
{
	if (!atomic_compare_exchange_strong_explicit(&e->state, &from, RF__IDLE, memory_order_release,
						     memory_order_relaxed))
		e->release(e->owner);
}

int rf__engine_keyed_begin(rf__engine *e, const char *who)
{
	return rf__engine_take(e, who, RF__KEYED);
}

void rf__engine_keyed_end(rf__engine *e)
{
	if (atomic_load_explicit(&e->io.rd, memory_order_relaxed) != NULL) /* read no file yet: nothing new */
		rf__engine_io_refresh(e); /* the call's misses may have changed how files are read */
	rf__engine_give(e, RF__KEYED);
}

int rf__engine_run(rf__engine *e, const char *who, size_t nblocks, const void *const *srcs,
		   const size_t *sizes, rf_compute_fn compute, void *user)
{
	if (nblocks == 0 && e->prog->nblocks_min == 0)
		return RF_OK;
	uint64_t bytes = 0, file_bytes = 0;
	size_t nfile = 0, nonempty = 0;
	int rc = rf__check_inputs(e, who, nblocks, srcs, sizes, compute, &bytes, &nonempty);
	if (rc == RF_OK)
		rc = rf__engine_take(e, who, RF__RUNNING);
	if (rc != RF_OK)
		return rc;
	if ((rc = rf__engine_files(e, who, nblocks, srcs, sizes, &nfile, &file_bytes)) != RF_OK)
		goto idle;
	/* The owner's checks only once the run is ours: a racing run's cannot overlap them. */
	if (e->before != NULL && (rc = e->before(e->owner, who)) != RF_OK) {
		rf__unhold_files(e, nblocks, nfile);
		goto idle;
	}
	e->last = (rf_stats){.blocks = nblocks, .bytes = bytes, .file_bytes = file_bytes};
	int measuring = e->measure != NULL, files_only = nfile > 0 && nfile == nonempty;
	/* depth = auto reads blocks of a request or more straight into the slots, the first run in all of them */
	e->io.straight = files_only && e->io_online && rf__engine_block_is_large(e, sizes[0]);
	e->ran_deep = measuring && e->deep != NULL && files_only && (e->be->caps & RF__CAP_OVERLAP) &&
		      (e->io.straight || e->io.window == 0);
	e->io.reads_online = e->ran_deep;
	rc = rf__engine_exec(e, who, e->ran_deep ? e->deep : e->prog, nblocks, srcs, sizes, compute, user, nfile,
			     files_only);
	e->io.reads_online = 0, e->io.straight = 0;
	if (e->deep != NULL && e->measure == NULL) { /* measured: never run again */
		rf_program_destroy(e->deep);
		e->deep = NULL;
	}
	rf__unhold_files(e, nblocks, nfile);
	if (nfile > 0) {
		rf__engine_io_refresh(e);
		rf__reader *rd = atomic_load_explicit(&e->io.rd, memory_order_relaxed);
		if (rd != NULL) {
			rf__reader_window_stats ws;
			rf__reader_window_get(rd, &ws);
			e->last.ahead_bytes = ws.copies != e->ahead_copies ? (uint64_t)ws.on * ws.chunk : 0;
			rf__reader_ahead ra;
			size_t piece = rf__reader_reads_get(rd, &ra);
			if (e->ran_deep && piece != 0) /* the slots read ahead: the reads in flight it chose */
				e->last.ahead_bytes = (uint64_t)ra.on * piece;
			e->last.total_ahead_blocks = ws.copies; /* a running count: published as is */
			e->ahead_copies = ws.copies;
		}
	}
	if (e->collect_stats)
		rf__stats_summarise(e);
	rf__stats_publish(e);
	if (rc == RF_OK && !measuring && e->after != NULL && atomic_load(&e->state) == RF__RUNNING)
		e->after(e->owner);
	/* A cancel is consumed by the run it stopped; one that came too late to stop anything (the last
	 * compute had started) stays pending for the next run. */
	if (rc == RF_ECANCELED)
		atomic_store(&e->cancel, 0);
idle:
	rf__engine_give(e, RF__RUNNING); /* a refused run too */
	return rc;
}

int rf__engine_destroy_begin(rf__engine *e)
{
	/* Raise cancel before the CAS: once the CAS succeeds the run may release the engine at any moment,
	 * so nothing may touch it after. On an idle engine the flag does not matter: it is freed now. */
	atomic_store(&e->cancel, 1);
	int s = atomic_load(&e->state);
	while (s == RF__RUNNING || s == RF__KEYED)
		if (atomic_compare_exchange_weak(&e->state, &s, RF__DOOMED))
			return 0;
	/* DOOMED: a second destroy from the same callback; the call in progress still owns the release. */
	return s == RF__DOOMED ? 0 : 1;
}
