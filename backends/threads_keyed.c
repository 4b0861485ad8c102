/* backends/threads_keyed.c — keyed copies on the threads backend. A keyed copy is a one-block program
 * walked with a run's handlers (threads_walk.c), so that its copy, file read, flight record and trace slice
 * are a run's copy's. A hint's program, COPY then the SIGNAL of its ticket, is a work item on a copy lane
 * (runs start only once keyed copies are quiesced); a withdrawn one still signals, in order, without
 * copying. A ticket is its lane's queue value: finished when the lane's value has reached it or it was
 * withdrawn. Demand copies are the caller's own programs, a WAIT for the slot's previous copy (a hint
 * that started) then the COPY: the caller waits for them anyway, and never behind a hint. */
#include "backends/threads_int.h"
#include "base/test_hooks.h"
#include "io/file.h"

#include <string.h>

/* A keyed program's cancel flag: never set (cancel covers runs, not keyed use). */
static const atomic_int rf__threads_never = 0;

static int rf__threads_klane_of(const rf__threads *t, rf__kticket tk, unsigned *lane, int64_t *v)
{
	uint64_t l = tk >> RF__THREADS_KSHIFT;
	if (l == 0 || l > t->pool.n)
		return 0;
	*lane = (unsigned)l - 1;
	*v = (int64_t)(tk & RF__THREADS_KMASK);
	return 1;
}

/* p's one-block run over its request, walked by lane l (NULL: the caller) under program state ps; a
 * hint claims `item` before its copy (NULL: nothing to claim). Its ops are set here but for their slot
 * and values: a hint's COPY then SIGNAL on its lane's queue, the caller's WAIT then COPY on queue 0. */
static void rf__threads_kprog_init(rf__threads_kprog *p, rf__threads *t, rf__threads_lane *l, rf__threads_prog *ps,
				   rf__work *item, size_t stride)
{
	*p = (rf__threads_kprog){
		.ops = {l != NULL ? rf__op_copy(l->q, 0, RF__NO_STAGE, 0, 0) : rf__op_wait(0, 0, 0, 0, 0, 0),
			l != NULL ? rf__op_signal(l->q, 0, 0, 0, 0) : rf__op_copy(0, 0, RF__NO_STAGE, 0, 0)},
		.prog = {.nqueues = t->nq, .nslots = t->nslots, .nops = 2, .nblocks_min = 1},
		.wk = {.t = t, .lane = l, .ps = ps, .item = item,
		       .run = {.nblocks = 1, .slot_stride = stride, .cancel = &rf__threads_never}},
	};
	p->prog.ops = p->ops;
	p->wk.run.prog = &p->prog;
}

/* Keyed programs never steal, demote or count from a run's base; they wait under the keyed policy. */
static void rf__threads_kps_init(rf__threads_prog *ps, const rf__threads *t)
{
	*ps = (rf__threads_prog){.tickets = 1, .spin_ns = t->spin_ns};
}

void rf__threads_kopen(rf__threads *t, size_t stride)
{
	for (unsigned i = 0; i < t->pool.n; i++) {
		rf__threads_lane *l = &t->lane[i];
		rf__threads_kps_init(&l->kps, t);
		for (unsigned j = 0; j < RF__THREADS_KRING; j++)
			rf__threads_kprog_init(&l->kitem[j].p, t, l, &l->kps, &l->kitem[j].w, stride);
	}
	rf__threads_kps_init(&t->kps, t);
	rf__threads_kprog_init(&t->kown, t, NULL, &t->kps, NULL, stride);
}

void rf__threads_kslots(rf__threads *t)
{
	for (unsigned i = 0; i < t->pool.n; i++)
		for (unsigned j = 0; j < RF__THREADS_KRING; j++)
			t->lane[i].kitem[j].p.wk.run.slots = t->ring;
	t->kown.wk.run.slots = t->ring;
}

/* p's run over request k, valid until the copy is done (its ops are the caller's to set). */
static void rf__threads_kset(rf__threads_kprog *p, const rf__kcopy *k)
{
	rf__run *r = &p->wk.run;
	r->keyed = k;
	r->srcs = &k->src.p;
	r->sizes = &k->bytes;
	r->src = &k->src;
	r->nfile = k->src.fs.f != NULL;
	r->trace = k->trace;
	r->io = k->io;
}

/* A hint's item on its lane: its program. A run's failed read, left on the lane's flight (reported by
 * that run, now ended), must not hold back its signal; a hint's own failure is its slot's (marked there
 * by its copy). */
static void rf__threads_kitem_fn(rf__work *w, void *ctx)
{
	rf__threads_lane *l = ctx;
	rf__flight_walk_start(&l->flight);
	(void)rf__threads_walk_keyed(&((rf__threads_kitem *)w)->p.wk);
}

static int rf__threads_ktest(void *ctx, rf__kticket tk)
{
	rf__threads *t = ctx;
	unsigned lane;
	int64_t v;
	if (!rf__threads_klane_of(t, tk, &lane, &v))
		return 1; /* an inline copy */
	if (atomic_load_explicit(&t->q[lane + 1].value, memory_order_acquire) >= v)
		return 1;
	const rf__threads_kitem *it = &t->lane[lane].kitem[(uint64_t)v % RF__THREADS_KRING];
	return atomic_load_explicit(&it->value, memory_order_relaxed) == v &&
	       atomic_load_explicit(&it->w.state, memory_order_acquire) == RF__WORK_CANCELED;
}

static int rf__threads_kdone(void *arg)
{
	const rf__kticket *x = arg;
	return rf__threads_ktest((void *)x[1], x[0]);
}

static int rf__threads_kwait(rf__threads *t, rf__kticket tk)
{
	rf__kticket x[2] = {tk, (rf__kticket)(uintptr_t)t};
	/* A lane with file reads in flight waits for the device: no spin. */
	unsigned lane;
	int64_t v;
	int io = rf__threads_klane_of(t, tk, &lane, &v) &&
		 atomic_load_explicit(&t->lane[lane].flight.inflight, memory_order_relaxed) != 0;
	rf__ec_wait(&t->ec, rf__threads_kdone, x, io ? 0 : t->spin_ns);
	return RF_OK;
}

static int rf__threads_kcancel(void *ctx, rf__kticket tk)
{
	rf__threads *t = ctx;
	unsigned lane;
	int64_t v;
	if (!rf__threads_klane_of(t, tk, &lane, &v))
		return 0;
	rf__threads_kitem *it = &t->lane[lane].kitem[(uint64_t)v % RF__THREADS_KRING];
	if (atomic_load_explicit(&it->value, memory_order_relaxed) != v || !rf__work_cancel(&it->w))
		return 0;
	if (it->p.k.src.fs.f != NULL) /* it will never read its file: let go now (a close may follow at once) */
		rf__file_unhold(it->p.k.src.fs.f);
	return 1;
}

/* A copy the caller makes (a demand copy; every copy without lanes): ticket 0, finished on return.
 * Inline, its walk the last call: a miss from memory is set up and walked with no frame of its own. */
static inline int rf__threads_kown(rf__threads *t, const rf__kcopy *req, rf__kticket *out)
{
	rf__threads_kprog *p = &t->kown;
	rf__threads_kset(p, req); /* the request outlives the copy: no copy of it */
	unsigned lane = 0;
	int64_t v = 0;
	/* After a hint copy into the slot that started (one not started was withdrawn): its lane's value. */
	int wait = req->after != 0 && !RF__TEST_HOOK(keyed_skip_waw) && rf__threads_klane_of(t, req->after, &lane, &v);
	if (wait) {
		p->ops[0].wqueue = (uint8_t)(lane + 1);
		p->ops[0].value = v;
	}
	p->ops[1].slot = req->slot;
	p->prog.ops = p->ops + (wait ? 0 : 1);
	p->prog.nops = wait ? 2 : 1;
	*out = 0;
	return rf__threads_walk_keyed(&p->wk);
}

/* rf__threads_kown from a file, held for the copy. */
static __attribute__((noinline)) int rf__threads_kown_file(rf__threads *t, const rf__kcopy *req, rf__kticket *out)
{
	int rc = rf__file_hold("keyed copy", "src", &req->src, req->bytes);
	if (rc != RF_OK)
		return rc;
	rc = rf__threads_kown(t, req, out);
	rf__file_unhold(req->src.fs.f);
	return rc;
}

/* A hint's copy, posted to its lane. Out of line: the demand path stays small. */
static __attribute__((noinline)) int rf__threads_khint(rf__threads *t, const rf__kcopy *req, rf__kticket *out)
{
	int file = req->src.fs.f != NULL, rc = file ? rf__file_hold("keyed copy", "src", &req->src, req->bytes) : RF_OK;
	if (rc != RF_OK)
		return rc;
	/* A hint: after `after` by construction (every hint into a slot goes down one lane). */
	rf__threads_lane *l = &t->lane[req->lane];
	int64_t v = l->kposted + 1;
	rf__threads_kitem *it = &l->kitem[(uint64_t)v % RF__THREADS_KRING];
	rf__kticket tk = ((uint64_t)(req->lane + 1) << RF__THREADS_KSHIFT) | (uint64_t)v;
	if (it->w.fn != NULL && rf__lane_consumed(&t->pool, req->lane) <= it->seq)
		rc = RF_ENOSPC; /* the item this one reuses is still queued */
	else if (file)
		rc = rf__flight_open(&l->flight, t->ring, t->ring_len);
	if (rc == RF_OK) {
		it->w.fn = rf__threads_kitem_fn;
		it->p.k = *req;
		rf__threads_kset(&it->p, &it->p.k);
		it->p.ops[0].slot = req->slot;
		it->p.ops[1].value = v;
		it->p.wk.ticket = tk;
		atomic_store_explicit(&it->value, v, memory_order_relaxed);
		it->seq = rf__lane_posted(&t->pool, req->lane);
		rc = rf__pool_post(&t->pool, req->lane, &it->w); /* RF_OK or RF_ENOSPC */
	}
	if (rc != RF_OK) {
		if (file)
			rf__file_unhold(req->src.fs.f);
		return rc;
	}
	l->kposted = v;
	*out = tk;
	return RF_OK;
}

static inline int rf__threads_kissue(void *ctx, const rf__kcopy *req, rf__kticket *out)
{
	rf__threads *t = ctx;
	if (!req->demand && t->pool.n > 0)
		return rf__threads_khint(t, req, out);
	return req->src.fs.f == NULL ? rf__threads_kown(t, req, out) : rf__threads_kown_file(t, req, out);
}

/* Every lane has signalled its last keyed ticket and passed every item (none is read any more). */
static int rf__threads_kquiet(void *arg)
{
	rf__threads *t = arg;
	for (unsigned i = 0; i < t->pool.n; i++)
		if (atomic_load_explicit(&t->q[i + 1].value, memory_order_acquire) < t->lane[i].kposted ||
		    rf__lane_consumed(&t->pool, i) < rf__lane_posted(&t->pool, i))
			return 0;
	return 1;
}

static int rf__threads_kquiesce(rf__threads *t)
{
	if (!rf__pool_owned(&t->pool))
		return RF_OK; /* a child of fork(): no lane runs here, nothing will ever finish */
	rf__ec_wait(&t->ec, rf__threads_kquiet, t, t->spin_ns);
	return RF_OK;
}

int rf__threads_kpost(void *ctx, const rf__kcopy *op, rf__kticket *out)
{
	if (op->op == RF__KOP_COPY)
		return rf__threads_kissue(ctx, op, out);
	if (op->op == RF__KOP_TEST || op->op == RF__KOP_CANCEL)
		return (op->op == RF__KOP_TEST ? rf__threads_ktest : rf__threads_kcancel)(ctx, op->after);
	if (op->op == RF__KOP_QUIESCE)
		return rf__threads_kquiesce(ctx);
	/* Every wait is the host's; host slots are read on the caller's own thread: a release records none. */
	return op->op == RF__KOP_RELEASE ? RF_OK : rf__threads_kwait(ctx, op->after);
}

void rf__threads_kafter_run(rf__threads *t)
{
	for (unsigned i = 0; i < t->pool.n; i++)
		t->lane[i].kposted = atomic_load_explicit(&t->q[i + 1].value, memory_order_relaxed);
}
