/* bench/serve_contestants.c — the ways an expert's bytes can reach its compute in a decode loop.
 *
 *   sequential   memcpy into one buffer, then compute: the loop a serving stack starts from;
 *   direct       compute from the source itself: no copy at all. On a CPU-only machine the weights are
 *                already in the memory the compute reads, so this is the line any staging ring has to
 *                justify itself against ("do you need a ring at all");
 *   spin         a hand-written push/pop ring of `depth` slots and one copy thread that spins (pause,
 *                never yields) for the whole round: the strong baseline a careful engineer writes;
 *   layer        ringfetch, one rf_pipeline_run per layer over the routed experts;
 *   keyed        ringfetch keyed: acquire each routed expert, compute, release (the slots a cache);
 *   keyed-hints  the same, after prefetching the layer's routed experts (their copies start together)
 *                and the next layer's likeliest experts.
 * All call rfs_compute, which checks every sum against the source's. */
#include "replay.h"
#include "serve.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

/* ---- the hand-written spinning ring ---------------------------------------------------------- */

typedef struct spin_ring {
	unsigned char *slots;
	unsigned depth;
	size_t slot_bytes;
	const void *req_src[RFS_MAX_EXPERTS]; /* request i at i % RFS_MAX_EXPERTS: a layer's requests fit */
	size_t req_bytes[RFS_MAX_EXPERTS];
	size_t next; /* caller only: requests pushed so far */
	pthread_t thread;
	_Alignas(64) atomic_size_t pushed; /* requests published by the caller */
	_Alignas(64) atomic_size_t filled; /* requests copied into their slot */
	_Alignas(64) atomic_size_t popped; /* slots computed and given back */
	_Alignas(64) atomic_int stop;
} spin_ring;

static void spin_pause(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#endif
}

static void *spin_copier(void *arg)
{
	spin_ring *r = arg;
	for (size_t i = 0;; i++) {
		while (atomic_load_explicit(&r->pushed, memory_order_acquire) <= i) {
			if (atomic_load_explicit(&r->stop, memory_order_relaxed))
				return NULL;
			spin_pause();
		}
		while (i - atomic_load_explicit(&r->popped, memory_order_acquire) >= r->depth)
			spin_pause(); /* WAR: slot i % depth still holds request i - depth */
		memcpy(r->slots + (i % r->depth) * r->slot_bytes, r->req_src[i % RFS_MAX_EXPERTS],
		       r->req_bytes[i % RFS_MAX_EXPERTS]);
		atomic_store_explicit(&r->filled, i + 1, memory_order_release);
	}
}

static int spin_start(spin_ring *r)
{
	r->next = 0;
	atomic_store(&r->pushed, 0);
	atomic_store(&r->filled, 0);
	atomic_store(&r->popped, 0);
	atomic_store(&r->stop, 0);
	return pthread_create(&r->thread, NULL, spin_copier, r) == 0 ? 0 : -1;
}

static void spin_stop(spin_ring *r)
{
	atomic_store(&r->stop, 1);
	pthread_join(r->thread, NULL);
}

/* ---- the contestants ------------------------------------------------------------------------- */

struct rfs_contestant {
	const rfs_model *m;
	rfs_kind kind;
	rf_pipeline *p;       /* layer, keyed, keyed-hints */
	unsigned char *buf;   /* sequential: one expert */
	spin_ring *ring;      /* spin */
	rfs_layer *L;         /* layer: the callback's view of the layer being run */
	rfs_tally *t;
	int fault;            /* RFS_SERVE_FAULT names this contestant: it is fed a wrong expert */
	/* keyed: every RF_OK call, for rfs_contestant_bound (an append: the replay runs after the rounds) */
	struct kcall {
		uint64_t key;
		uint32_t op; /* rpl_op */
	} *log;
	size_t nlog, caplog;
	int hint_mode;        /* RFS_HINT_* */
	size_t at;            /* the route entry (step * layers + layer) of the layer being run */
};

void rfs_contestant_hint_mode(rfs_contestant *c, int mode)
{
	c->hint_mode = mode;
}

static int log_call(rfs_contestant *c, rpl_op op, uint64_t key)
{
	if (c->nlog == c->caplog) {
		size_t cap = c->caplog ? 2 * c->caplog : 4096;
		struct kcall *l = realloc(c->log, cap * sizeof *l);
		if (l == NULL) {
			fprintf(stderr, "\nkeyed: out of memory for the log of its calls\n");
			return -1;
		}
		c->log = l, c->caplog = cap;
	}
	c->log[c->nlog++] = (struct kcall){key, (uint32_t)op};
	return 0;
}

static int seq_layer(void *self, rfs_layer *L, rfs_tally *t)
{
	rfs_contestant *c = self;
	for (unsigned i = 0; i < L->n; i++) {
		memcpy(c->buf, L->src[i], L->bytes[i]);
		t->bytes_copied += L->bytes[i];
		rfs_compute(c->m, L, i, c->buf, t);
	}
	return 0;
}

static int direct_layer(void *self, rfs_layer *L, rfs_tally *t)
{
	rfs_contestant *c = self;
	for (unsigned i = 0; i < L->n; i++)
		rfs_compute(c->m, L, i, L->src[i], t);
	return 0;
}

/* Push the layer's requests at once (the copy thread starts on the first while the rest are queued),
 * then pop them in order: compute from the slot, give the slot back. */
static int spin_layer(void *self, rfs_layer *L, rfs_tally *t)
{
	spin_ring *r = ((rfs_contestant *)self)->ring;
	size_t base = r->next;
	for (unsigned i = 0; i < L->n; i++) {
		r->req_src[(base + i) % RFS_MAX_EXPERTS] = L->src[i];
		r->req_bytes[(base + i) % RFS_MAX_EXPERTS] = L->bytes[i];
		t->bytes_copied += L->bytes[i];
	}
	r->next = base + L->n;
	atomic_store_explicit(&r->pushed, base + L->n, memory_order_release);
	for (unsigned i = 0; i < L->n; i++) {
		while (atomic_load_explicit(&r->filled, memory_order_acquire) <= base + i)
			spin_pause();
		rfs_compute(((rfs_contestant *)self)->m, L, i, r->slots + ((base + i) % r->depth) * r->slot_bytes, t);
		atomic_store_explicit(&r->popped, base + i + 1, memory_order_release);
	}
	return 0;
}

static int layer_compute(void *user, const rf_block *b)
{
	rfs_contestant *c = user;
	rfs_compute(c->m, c->L, (unsigned)b->index, b->data, c->t);
	return 0;
}

static int layer_layer(void *self, rfs_layer *L, rfs_tally *t)
{
	rfs_contestant *c = self;
	c->L = L, c->t = t;
	int rc = rf_pipeline_run(c->p, L->n, L->src, L->bytes, layer_compute, c);
	if (rc != RF_OK) {
		fprintf(stderr, "\nlayer: rf_pipeline_run: %s: %s\n", rf_strerror(rc), rf_errmsg());
		return -1;
	}
	for (unsigned i = 0; i < L->n; i++)
		t->bytes_copied += L->bytes[i];
	return 0;
}

static int keyed_fail(const char *what, int rc)
{
	fprintf(stderr, "\nkeyed: %s: %s: %s\n", what, rf_strerror(rc), rf_errmsg());
	return -1;
}

static int keyed_layer(void *self, rfs_layer *L, rfs_tally *t)
{
	rfs_contestant *c = self;
	for (unsigned i = 0; i < L->n; i++) {
		rf_block b;
		int rc = rf_pipeline_acquire(c->p, L->key[i], L->src[i], L->bytes[i], NULL, 0, &b);
		if (rc != RF_OK)
			return keyed_fail("rf_pipeline_acquire", rc);
		rfs_compute(c->m, L, i, b.data, t);
		if ((rc = rf_pipeline_release(c->p, &b)) != RF_OK)
			return keyed_fail("rf_pipeline_release", rc);
		if (log_call(c, RPL_ACQUIRE, L->key[i]) != 0 || log_call(c, RPL_RELEASE, L->key[i]) != 0)
			return -1;
	}
	return 0;
}

/* The next layer's true route (or the experts of the next layer it does not route), as hints. */
static int hint_next_route(rfs_contestant *c, int wrong)
{
	const rfs_model *m = c->m;
	const rfs_opts *o = m->o;
	size_t e = c->at + 1;
	if (e >= m->nroutes)
		return 0;
	unsigned l = (unsigned)(e % o->layers), n = m->route_n[e];
	const unsigned *r = m->route_e + e * o->experts;
	unsigned char routed[RFS_MAX_EXPERTS] = {0};
	for (unsigned i = 0; i < n; i++)
		routed[r[i]] = 1;
	for (unsigned i = 0, x = 0, given = 0; given < n && (wrong ? x < o->experts : i < n); given += 1) {
		unsigned ex;
		if (wrong) { /* the least popular first: wrong now, and the least likely to be right later */
			while (x < o->experts && routed[m->likely[(size_t)l * o->experts + o->experts - 1 - x]])
				x++;
			if (x == o->experts)
				break;
			ex = m->likely[(size_t)l * o->experts + o->experts - 1 - x++];
		} else {
			ex = r[i++];
		}
		uint64_t key = (uint64_t)l * o->experts + ex;
		int rc = rf_pipeline_prefetch(c->p, key, m->pool + key * o->expert_bytes, o->expert_bytes, 0);
		if (rc != RF_OK && rc != RF_ENOSPC)
			return keyed_fail("rf_pipeline_prefetch", rc);
		if (rc == RF_OK && log_call(c, RPL_PREFETCH, key) != 0)
			return -1;
	}
	return 0;
}

/* Hint modes with the recorded routes: acquire the layer's experts (demand first), hint the next
 * layer, then compute and release (the hints' reads overlap this layer's compute). */
static int keyed_route_layer(rfs_contestant *c, rfs_layer *L, rfs_tally *t)
{
	rf_block b[RFS_MAX_EXPERTS];
	unsigned got = 0;
	int rc = RF_OK;
	for (; got < L->n && rc == RF_OK; got++)
		if ((rc = rf_pipeline_acquire(c->p, L->key[got], L->src[got], L->bytes[got], NULL, 0, &b[got])) != RF_OK)
			break;
	int fail = rc != RF_OK ? keyed_fail("rf_pipeline_acquire", rc) : 0;
	for (unsigned i = 0; i < got && fail == 0; i++)
		fail = log_call(c, RPL_ACQUIRE, L->key[i]);
	if (fail == 0)
		fail = hint_next_route(c, c->hint_mode == RFS_HINT_WRONG);
	for (unsigned i = 0; i < got; i++) {
		if (fail == 0)
			rfs_compute(c->m, L, i, b[i].data, t);
		if ((rc = rf_pipeline_release(c->p, &b[i])) != RF_OK && fail == 0)
			fail = keyed_fail("rf_pipeline_release", rc);
		else if (rc == RF_OK && log_call(c, RPL_RELEASE, L->key[i]) != 0)
			fail = -1;
	}
	c->at++;
	return fail;
}

/* Hints first: the routed experts (so that their copies are issued together, not one acquire at a
 * time) and the next layer's likeliest (so that they may land while this layer computes). A hint
 * refused for want of a free slot (RF_ENOSPC) is simply not given: nothing is held here, so it does
 * not happen with these loops, but a hint is never worth failing the step for. */
static int keyed_hints_layer(void *self, rfs_layer *L, rfs_tally *t)
{
	rfs_contestant *c = self;
	if (c->hint_mode != RFS_HINT_LIKELY && c->m->route_n != NULL && 2 * L->n <= rf_pipeline_depth(c->p))
		return keyed_route_layer(c, L, t);
	if (c->hint_mode != RFS_HINT_LIKELY)
		c->at++;
	for (unsigned i = 0; i < L->n + L->nnext; i++) {
		int routed = i < L->n;
		uint64_t key = routed ? L->key[i] : L->next_key[i - L->n];
		const void *src = routed ? L->src[i] : L->next_src[i - L->n];
		int rc = rf_pipeline_prefetch(c->p, key, src, c->m->o->expert_bytes, 0);
		if (rc != RF_OK && rc != RF_ENOSPC)
			return keyed_fail("rf_pipeline_prefetch", rc);
		if (rc == RF_OK && log_call(c, RPL_PREFETCH, key) != 0)
			return -1;
	}
	return keyed_layer(self, L, t);
}

static const rfs_layer_fn layer_fns[RFS_NKINDS] = {seq_layer,   direct_layer, spin_layer,
						    layer_layer, keyed_layer,  keyed_hints_layer};

/* The negative control of the checks (tests/serve_smoke.sh): with RFS_SERVE_FAULT=<contestant> that
 * contestant is handed another expert's bytes for the first expert of every layer (as a stale slot or
 * a wrong key would), and the run must fail rather than report a time. */
static int faulty_layer(void *self, rfs_layer *L, rfs_tally *t)
{
	rfs_contestant *c = self;
	const rfs_opts *o = c->m->o;
	size_t nexp = (size_t)o->layers * o->experts;
	L->src[0] = c->m->pool + ((L->key[0] + 1) % nexp) * o->expert_bytes;
	return layer_fns[c->kind](self, L, t);
}

static int create_pipeline(rfs_contestant *c, const char *backend, unsigned depth)
{
	rf_pipeline_params pp = {.depth = depth, .slot_bytes = c->m->o->expert_bytes, .backend = backend,
				 .wait = c->m->o->wait, .hint_bytes = c->m->o->hint_bytes};
	int rc = rf_pipeline_create(&pp, &c->p);
	if (rc != RF_OK)
		fprintf(stderr, "%s on %s: rf_pipeline_create: %s: %s\n", rfs_kind_name(c->kind), backend,
			rf_strerror(rc), rf_errmsg());
	return rc == RF_OK ? 0 : -1;
}

rfs_contestant *rfs_contestant_create(const rfs_model *m, rfs_kind kind, const char *backend)
{
	const rfs_opts *o = m->o;
	rfs_contestant *c = calloc(1, sizeof *c);
	int rc = c ? 0 : -1;
	if (c) {
		const char *fault = getenv("RFS_SERVE_FAULT");
		c->m = m;
		c->kind = kind;
		c->fault = fault && !strcmp(fault, rfs_kind_name(kind));
	}
	if (rc == 0 && kind == RFS_SEQUENTIAL)
		rc = (c->buf = aligned_alloc(64, o->expert_bytes)) ? 0 : -1;
	if (rc == 0 && kind == RFS_SPIN) {
		rc = (c->ring = aligned_alloc(64, sizeof *c->ring)) ? 0 : -1;
		if (rc == 0) {
			memset(c->ring, 0, sizeof *c->ring);
			c->ring->depth = o->depth;
			c->ring->slot_bytes = o->expert_bytes;
			rc = (c->ring->slots = aligned_alloc(64, (size_t)o->depth * o->expert_bytes)) ? 0 : -1;
		}
	}
	if (rc != 0)
		fprintf(stderr, "%s: out of memory\n", rfs_kind_name(kind));
	if (rc == 0 && kind == RFS_LAYER)
		rc = create_pipeline(c, backend, o->depth);
	if (rc == 0 && (kind == RFS_KEYED || kind == RFS_KEYED_HINTS)) {
		/* room for the whole run's calls (warm-up round included), so that no round grows the log */
		size_t routed = o->topk * o->batch < o->experts ? o->topk * o->batch : o->experts;
		c->caplog = (size_t)(o->rounds + 1) * o->steps * o->layers * (3 * routed + o->hint_next);
		rc = (c->log = malloc(c->caplog * sizeof *c->log)) ? 0 : -1;
		if (rc != 0)
			fprintf(stderr, "%s: out of memory for the log of its calls\n", rfs_kind_name(kind));
		else
			rc = create_pipeline(c, backend, o->slots);
	}
	if (rc != 0) {
		rfs_contestant_destroy(c);
		return NULL;
	}
	return c;
}

static int keyed_snapshot(const rfs_contestant *c, rf_keyed_stats *s)
{
	int rc = rf_pipeline_keyed_stats(c->p, s);
	return rc == RF_OK ? 0 : keyed_fail("rf_pipeline_keyed_stats", rc);
}

int rfs_contestant_round(rfs_contestant *c, unsigned first_step, rfs_tally *t)
{
	int keyed = c->kind == RFS_KEYED || c->kind == RFS_KEYED_HINTS;
	rf_keyed_stats a = {0}, b = {0};
	memset(t, 0, sizeof *t);
	if (keyed && keyed_snapshot(c, &a) != 0)
		return -1;
	if (c->kind == RFS_SPIN && spin_start(c->ring) != 0) {
		fprintf(stderr, "spin: cannot start the copy thread\n");
		return -1;
	}
	c->at = (size_t)first_step * c->m->o->layers;
	int rc = rfs_round(c->m, first_step, c->fault ? faulty_layer : layer_fns[c->kind], c, t);
	if (c->kind == RFS_SPIN)
		spin_stop(c->ring);
	if (rc == 0 && keyed && keyed_snapshot(c, &b) != 0)
		rc = -1;
	if (rc == 0 && keyed) {
		t->bytes_copied = b.bytes_copied - a.bytes_copied;
		t->acquires = b.acquires - a.acquires;
		t->hits = b.hits - a.hits;
		t->late = b.late - a.late;
		t->prefetches = b.prefetches - a.prefetches;
		t->dropped = b.dropped - a.dropped;
		t->wasted = b.wasted - a.wasted;
	}
	return rc;
}

const char *rfs_contestant_backend(const rfs_contestant *c)
{
	return c->p ? rf_pipeline_backend(c->p) : "-";
}

unsigned rfs_contestant_slots(const rfs_contestant *c)
{
	if (c->kind == RFS_SPIN)
		return c->ring->depth;
	if (c->kind == RFS_SEQUENTIAL)
		return 1;
	return c->p ? rf_pipeline_depth(c->p) : 0;
}

int rfs_contestant_bound(rfs_contestant *c, rfs_bound *out)
{
	memset(out, 0, sizeof *out);
	if (c->kind != RFS_KEYED && c->kind != RFS_KEYED_HINTS)
		return 0;
	rf_keyed_stats st;
	if (keyed_snapshot(c, &st) != 0)
		return -1;
	rpl_trace t;
	char err[256];
	size_t bytes = c->m->o->expert_bytes;
	unsigned slots = rfs_contestant_slots(c);
	rpl_trace_init(&t, slots);
	int rc = rpl_trace_reserve(&t, c->nlog);
	for (size_t i = 0; i < c->nlog && rc == 0; i++)
		rc = rpl_trace_add(&t, (rpl_op)c->log[i].op, c->log[i].key, bytes, err, sizeof err);
	rpl_result min, lru;
	if (rc == 0 && (rpl_simulate(&t, RPL_MIN, slots, 0, &min) != 0 || rpl_simulate(&t, RPL_LRU, slots, 1, &lru) != 0))
		rc = -1, snprintf(err, sizeof err, "cannot replay at %u slots", slots);
	rpl_trace_free(&t);
	if (rc != 0) {
		fprintf(stderr, "%s: the replay of its calls: %s\n", rfs_kind_name(c->kind), err);
		return -1;
	}
	*out = (rfs_bound){1, slots, st.acquires, st.acquires - st.hits, st.bytes_copied / bytes, min.misses,
			   lru.misses + lru.hint_reads};
	return 0;
}

void rfs_contestant_destroy(rfs_contestant *c)
{
	if (c == NULL)
		return;
	rf_pipeline_destroy(c->p);
	free(c->log);
	free(c->buf);
	if (c->ring)
		free(c->ring->slots);
	free(c->ring);
	free(c);
}
