/* tests/test_replay.c — the cache policies of bench/replay.h against brute force and against plain
 * reference simulations on small random traces, and the keyed trace (rf_pipeline_keyed_trace,
 * RINGFETCH_KEYED_TRACE) against the pipeline that recorded it: replayed with lru at its slot count,
 * a trace has exactly the misses rf_pipeline_keyed_stats counted. RF_TEST_SEED replays a run. */
#include "replay.h"
#include "support.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- random valid traces ---------------------------------------------------------------------------- */

typedef struct gen {
	unsigned keys, maxheld;  /* keys 0..keys-1; distinct keys held at once */
	unsigned pct_hint, pct_evict, pct_reset, pct_bytes; /* per mille-ish knobs, out of 100 */
} gen;

typedef struct op {
	rpl_op op;
	uint64_t key, bytes;
} op;

/* n calls a keyed user could make: releases only of held keys, evicts only of unheld ones, resets only
 * with nothing held, at most g->maxheld keys held at once. Returns the count. */
static size_t make_ops(const gen *g, uint64_t *s, op *o, size_t n, unsigned nacq_max)
{
	unsigned refs[64] = {0}, nheld = 0, nacq = 0;
	uint64_t bytes[64];
	for (unsigned k = 0; k < g->keys; k++)
		bytes[k] = 1;
	size_t m = 0;
	while (m < n && nacq < nacq_max) {
		unsigned r = (unsigned)rng_below(s, 100), k = (unsigned)rng_below(s, g->keys);
		if (r < g->pct_hint) {
			o[m++] = (op){RPL_PREFETCH, k, bytes[k]};
		} else if (r < g->pct_hint + g->pct_evict) {
			if (refs[k] == 0)
				o[m++] = (op){RPL_EVICT, k, 0};
		} else if (r < g->pct_hint + g->pct_evict + g->pct_reset) {
			if (nheld == 0)
				o[m++] = (op){RPL_RESET, 0, 0};
		} else if (r < 55 + g->pct_hint + g->pct_evict + g->pct_reset) { /* acquire */
			if (refs[k] == 0 && nheld == g->maxheld)
				continue;
			if (refs[k] == 0 && rng_below(s, 100) < g->pct_bytes)
				bytes[k] = bytes[k] == 1 ? 2 : 1; /* another byte count: a new block */
			o[m++] = (op){RPL_ACQUIRE, k, bytes[k]};
			nheld += refs[k]++ == 0;
			nacq++;
		} else { /* release a held key, if any */
			for (unsigned j = 0; j < g->keys; j++) {
				unsigned kk = (k + j) % g->keys;
				if (refs[kk] > 0) {
					o[m++] = (op){RPL_RELEASE, kk, bytes[kk]};
					nheld -= --refs[kk] == 0;
					break;
				}
			}
		}
	}
	return m;
}

/* The ops as text ("a3 r3 p1 e2 x"), for a failure's message. */
static const char *show(const op *o, size_t n)
{
	static char buf[4096];
	size_t k = 0;
	for (size_t i = 0; i < n && k + 32 < sizeof buf; i++)
		k += (size_t)snprintf(buf + k, sizeof buf - k, "%c%llu%s ", "arpex"[o[i].op], (unsigned long long)o[i].key,
				      o[i].bytes == 2 ? "'" : "");
	buf[k] = '\0';
	return buf;
}

static void build(rpl_trace *t, const op *o, size_t n)
{
	char err[200];
	rpl_trace_init(t, 0);
	for (size_t i = 0; i < n; i++)
		cr_assert_eq(rpl_trace_add(t, o[i].op, o[i].key, o[i].bytes, err, sizeof err), 0, "op %zu: %s", i, err);
}

/* ---- brute force: the fewest misses over every sequence of eviction choices -------------------------- */

typedef struct bstate {
	uint64_t key[8], bytes[8];
	unsigned refs[8], n;
} bstate;

static int bfind(const bstate *b, uint64_t key, uint64_t bytes)
{
	for (unsigned i = 0; i < b->n; i++)
		if (b->key[i] == key && b->bytes[i] == bytes)
			return (int)i;
	return -1;
}

static void bdrop(bstate *b, unsigned i)
{
	b->n--;
	b->key[i] = b->key[b->n], b->bytes[i] = b->bytes[b->n], b->refs[i] = b->refs[b->n];
}

/* Min misses of o[i..n) from state b, with `slots` slots; UINT64_MAX when no choice can go on. */
static uint64_t brute(const op *o, size_t i, size_t n, bstate b, unsigned slots)
{
	for (; i < n; i++) {
		int j;
		switch (o[i].op) {
		case RPL_ACQUIRE:
			for (unsigned x = 0; x < b.n; x++) /* another byte count: the resident copy is dead weight */
				if (b.key[x] == o[i].key && b.bytes[x] != o[i].bytes)
					b.key[x] = UINT64_MAX - i;
			if ((j = bfind(&b, o[i].key, o[i].bytes)) >= 0) {
				b.refs[j]++;
				break;
			}
			if (b.n < slots) {
				b.key[b.n] = o[i].key, b.bytes[b.n] = o[i].bytes, b.refs[b.n++] = 1;
				uint64_t r = brute(o, i + 1, n, b, slots);
				return r == UINT64_MAX ? r : r + 1;
			} else {
				uint64_t best = UINT64_MAX;
				for (unsigned v = 0; v < b.n; v++) {
					if (b.refs[v] > 0)
						continue;
					bstate c = b;
					c.key[v] = o[i].key, c.bytes[v] = o[i].bytes, c.refs[v] = 1;
					uint64_t r = brute(o, i + 1, n, c, slots);
					if (r != UINT64_MAX && r + 1 < best)
						best = r + 1;
				}
				return best;
			}
		case RPL_RELEASE:
			for (unsigned x = 0; x < b.n; x++)
				if (b.key[x] == o[i].key && b.refs[x] > 0) {
					b.refs[x]--;
					break;
				}
			break;
		case RPL_EVICT:
			for (unsigned x = 0; x < b.n; x++)
				if (b.key[x] == o[i].key) {
					bdrop(&b, x);
					break;
				}
			break;
		case RPL_RESET:
			b.n = 0;
			break;
		default:
			break;
		}
	}
	return 0;
}

Test(replay, min_equals_brute_force)
{
	uint64_t seed = test_seed(), s = seed;
	for (int trial = 0; trial < 600; trial++) {
		unsigned slots = 2 + (unsigned)rng_below(&s, 2);
		gen g = {.keys = 3 + (unsigned)rng_below(&s, 4), .maxheld = 1 + (unsigned)rng_below(&s, slots),
			 .pct_hint = 0, .pct_evict = trial % 3 == 0 ? 5 : 0, .pct_reset = trial % 5 == 0 ? 3 : 0,
			 .pct_bytes = trial % 4 == 0 ? 20 : 0};
		op o[40];
		size_t n = make_ops(&g, &s, o, 40, 12);
		rpl_trace t;
		build(&t, o, n);
		rpl_result r;
		cr_assert_eq(rpl_simulate(&t, RPL_MIN, slots, 0, &r), 0, "seed %llu", (unsigned long long)seed);
		bstate b = {.n = 0};
		uint64_t best = brute(o, 0, n, b, slots);
		cr_assert_eq(r.misses, best, "seed %llu, trial %d, %u slots: min %llu misses, brute force %llu: %s",
			     (unsigned long long)seed, trial, slots, (unsigned long long)r.misses,
			     (unsigned long long)best, show(o, n));
		/* the bound: no other policy misses fewer (hints off: the acquires alone) */
		for (int p = 0; p < RPL_MIN; p++) {
			rpl_result x;
			cr_assert_eq(rpl_simulate(&t, (rpl_policy)p, slots, 0, &x), 0);
			cr_assert_geq(x.misses, r.misses, "seed %llu: %s below min", (unsigned long long)seed,
				      rpl_policy_name((rpl_policy)p));
		}
		rpl_trace_free(&t);
	}
}

/* ---- reference simulations: the documented rules, by linear scans ------------------------------------ */

typedef struct ref {
	int used;
	uint64_t key, bytes, last, freq;
	unsigned refs, seg;
} ref;

/* The victim among unheld blocks: lru: oldest use; slru: probation's oldest, else protected's; lfu:
 * fewest acquires, then oldest use. -1 when every block is held; an empty slot first. */
static int rvictim(const ref *c, unsigned slots, rpl_policy pol)
{
	int v = -1;
	for (unsigned i = 0; i < slots; i++)
		if (!c[i].used)
			return (int)i;
	for (unsigned i = 0; i < slots; i++) {
		if (c[i].refs > 0)
			continue;
		if (v < 0) {
			v = (int)i;
			continue;
		}
		const ref *a = &c[i], *b = &c[v];
		int better = pol == RPL_LRU ? a->last < b->last :
			     pol == RPL_SLRU ? (a->seg != b->seg ? a->seg < b->seg : a->last < b->last) :
					       (a->freq != b->freq ? a->freq < b->freq : a->last < b->last);
		if (better)
			v = (int)i;
	}
	return v;
}

static rpl_result reference(const op *o, size_t n, rpl_policy pol, unsigned slots, int hints)
{
	ref c[16];
	memset(c, 0, sizeof c);
	rpl_result r = {0};
	unsigned prot_cap = slots * 4 / 5;
	for (size_t i = 0; i < n; i++) {
		uint64_t now = i + 1;
		int j = -1;
		if (o[i].op != RPL_RESET)
			for (unsigned x = 0; x < slots; x++) /* the key's live block (any byte count) */
				if (c[x].used && c[x].key == o[i].key)
					j = (int)x;
		if ((o[i].op == RPL_ACQUIRE || o[i].op == RPL_PREFETCH) && j >= 0 && c[j].bytes != o[i].bytes)
			c[j].key = UINT64_MAX - 1 - (uint64_t)j, j = -1; /* a new block: the old one is dead weight */
		switch (o[i].op) {
		case RPL_ACQUIRE:
			r.acquires++;
			if (j >= 0) {
				r.hits++;
				c[j].freq++;
				if (pol == RPL_SLRU && c[j].seg == 0 && prot_cap > 0) {
					c[j].seg = 1;
					unsigned np = 0;
					for (unsigned x = 0; x < slots; x++)
						np += c[x].used && c[x].seg == 1;
					int d = -1;
					for (unsigned x = 0; x < slots; x++)
						if (np > prot_cap && (int)x != j && c[x].used && c[x].seg == 1 && c[x].refs == 0 &&
						    (d < 0 || c[x].last < c[d].last))
							d = (int)x;
					if (d >= 0)
						c[d].seg = 0, c[d].last = now;
				}
			} else {
				r.misses++, r.miss_bytes += o[i].bytes;
				j = rvictim(c, slots, pol);
				cr_assert(j >= 0);
				c[j] = (ref){1, o[i].key, o[i].bytes, now, 1, 0, 0};
			}
			c[j].refs++;
			break;
		case RPL_RELEASE:
			if (--c[j].refs == 0)
				c[j].last = now;
			break;
		case RPL_PREFETCH:
			if (!hints)
				break;
			if (j >= 0) {
				if (c[j].refs == 0 && pol != RPL_LFU)
					c[j].last = now;
				break;
			}
			if ((j = rvictim(c, slots, pol)) < 0) {
				r.hints_dropped++;
				break;
			}
			c[j] = (ref){1, o[i].key, o[i].bytes, now, 0, 0, 0};
			r.hint_reads++, r.hint_bytes += o[i].bytes;
			break;
		case RPL_EVICT:
			if (j >= 0)
				c[j].used = 0;
			break;
		default:
			memset(c, 0, sizeof c);
			break;
		}
	}
	return r;
}

Test(replay, lru_slru_lfu_equal_reference)
{
	uint64_t seed = test_seed(), s = seed;
	for (int trial = 0; trial < 3000; trial++) {
		unsigned slots = 1 + (unsigned)rng_below(&s, 8);
		gen g = {.keys = 2 + (unsigned)rng_below(&s, 14), .maxheld = 1 + (unsigned)rng_below(&s, slots),
			 .pct_hint = (unsigned)rng_below(&s, 25), .pct_evict = (unsigned)rng_below(&s, 6),
			 .pct_reset = trial % 7 == 0 ? 2 : 0, .pct_bytes = trial % 5 == 0 ? 10 : 0};
		op o[300];
		size_t n = make_ops(&g, &s, o, 300, 300);
		rpl_trace t;
		build(&t, o, n);
		for (int p = 0; p < RPL_MIN; p++)
			for (int hints = 0; hints <= 1; hints++) {
				rpl_result x, want = reference(o, n, (rpl_policy)p, slots, hints);
				cr_assert_eq(rpl_simulate(&t, (rpl_policy)p, slots, hints, &x), 0);
				cr_assert(x.acquires == want.acquires && x.hits == want.hits && x.misses == want.misses &&
						  x.miss_bytes == want.miss_bytes && x.hint_reads == want.hint_reads &&
						  x.hints_dropped == want.hints_dropped,
					  "seed %llu, trial %d, %s, %u slots, hints %d: misses %llu (reference %llu), hint reads "
					  "%llu (%llu), dropped %llu (%llu): %s",
					  (unsigned long long)seed, trial, rpl_policy_name((rpl_policy)p), slots, hints,
					  (unsigned long long)x.misses, (unsigned long long)want.misses,
					  (unsigned long long)x.hint_reads, (unsigned long long)want.hint_reads,
					  (unsigned long long)x.hints_dropped, (unsigned long long)want.hints_dropped, show(o, n));
			}
		rpl_trace_free(&t);
	}
}

Test(replay, bad_traces_and_slot_counts)
{
	rpl_trace t;
	char err[200];
	rpl_trace_init(&t, 0);
	cr_assert_eq(rpl_trace_add(&t, RPL_RELEASE, 7, 1, err, sizeof err), -1);
	cr_assert(strstr(err, "not held") != NULL, "%s", err);
	cr_assert_eq(rpl_trace_add(&t, RPL_ACQUIRE, 7, 0, err, sizeof err), -1);
	cr_assert_eq(rpl_trace_add(&t, RPL_ACQUIRE, 7, 1, err, sizeof err), 0);
	cr_assert_eq(rpl_trace_add(&t, RPL_ACQUIRE, 8, 1, err, sizeof err), 0);
	cr_assert_eq(rpl_trace_add(&t, RPL_EVICT, 7, 0, err, sizeof err), -1);
	cr_assert_eq(rpl_trace_add(&t, RPL_RESET, 0, 0, err, sizeof err), -1);
	cr_assert_eq(rpl_trace_add(&t, RPL_ACQUIRE, 7, 2, err, sizeof err), -1);
	cr_assert_eq(t.peak_held, 2);
	rpl_result r;
	cr_assert_eq(rpl_simulate(&t, RPL_LRU, 1, 1, &r), -1, "2 keys held at once need 2 slots");
	cr_assert_eq(rpl_simulate(&t, RPL_LRU, 0, 1, &r), -1);
	cr_assert_eq(rpl_simulate(&t, RPL_MIN, 2, 0, &r), 0);
	cr_assert_eq(r.misses, 2);
	rpl_trace_free(&t);

	char path[] = "/tmp/rf-replay-bad-XXXXXX";
	int fd = mkstemp(path);
	cr_assert(fd >= 0);
	cr_assert_eq(write(fd, "not a trace at all, just text....", 33), 33);
	close(fd);
	cr_assert_eq(rpl_trace_load(&t, path, err, sizeof err), -1);
	cr_assert(strstr(err, "RFKTRACE") != NULL, "%s", err);
	cr_assert_eq(rpl_trace_load(&t, "/nonexistent/trace", err, sizeof err), -1);
	cr_assert(strstr(err, "No such file") != NULL, "%s", err);
	/* a record of an unknown kind */
	struct {
		char magic[8];
		uint32_t v[4];
		uint64_t sb;
		uint64_t rec[3];
		uint32_t kind[2];
	} f = {"RFKTRACE", {1, 32, 4, 0}, 4096, {1, 4096, 0}, {99, 0}};
	fd = open(path, O_WRONLY | O_TRUNC);
	cr_assert_eq(write(fd, &f, sizeof f), (ssize_t)sizeof f);
	close(fd);
	cr_assert_eq(rpl_trace_load(&t, path, err, sizeof err), -1);
	cr_assert(strstr(err, "unknown kind 99") != NULL, "%s", err);
	unlink(path);
}

/* ---- recorded from a pipeline ------------------------------------------------------------------------- */

static int nop_cb(void *user, const rf_block *b)
{
	(void)user, (void)b;
	return 0;
}

typedef struct cb_ctx {
	rf_pipeline *p;
	const char *path;
	int rc_start, rc_stop;
} cb_ctx;

static int trace_from_callback(void *user, const rf_block *b)
{
	cb_ctx *c = user;
	(void)b;
	c->rc_start = rf_pipeline_keyed_trace(c->p, c->path, 0);
	c->rc_stop = rf_pipeline_keyed_trace(c->p, NULL, 0);
	return 0;
}

static char *tmp_path(void)
{
	static char path[64];
	snprintf(path, sizeof path, "/tmp/rf-replay-XXXXXX");
	int fd = mkstemp(path);
	cr_assert(fd >= 0);
	close(fd);
	return path;
}

/* A random keyed workload: acquires (up to 3 held), releases, hints (when `hints`), evicts, and runs
 * (which empty the cache). Returns the stats. */
static rf_keyed_stats workload(rf_pipeline *p, uint64_t seed, int hints, int steps)
{
	enum { SZ = 4096, NK = 40 };
	static unsigned char pool[NK][SZ];
	for (size_t i = 0; i < sizeof pool; i++)
		((unsigned char *)pool)[i] = (unsigned char)(i * 7 + 1);
	rf_block held[3];
	unsigned nheld = 0;
	uint64_t s = seed;
	const void *srcs[2] = {pool[0], pool[1]};
	size_t sizes[2] = {SZ, SZ};
	for (int step = 0; step < steps; step++) {
		/* skewed keys: a hot few and a long tail, so that the policy's choices matter */
		uint64_t k = rng_below(&s, 3) ? rng_below(&s, 10) : rng_below(&s, NK), r = rng_below(&s, 100);
		rf_block b;
		if (r < 45 && nheld < 3) {
			int rc = rf_pipeline_acquire(p, k, pool[k], SZ, NULL, 0, &b);
			cr_assert(rc == RF_OK || rc == RF_ENOSPC, "%s", rf_errmsg());
			if (rc == RF_OK)
				held[nheld++] = b;
		} else if (r < 85 && nheld > 0) {
			unsigned j = (unsigned)rng_below(&s, nheld);
			cr_assert_eq(rf_pipeline_release(p, &held[j]), RF_OK);
			held[j] = held[--nheld];
		} else if (r < 95 && hints) {
			int rc = rf_pipeline_prefetch(p, k, pool[k], SZ, 0);
			cr_assert(rc == RF_OK || rc == RF_ENOSPC, "%s", rf_errmsg());
		} else if (r < 98) {
			int rc = rf_pipeline_evict(p, k);
			cr_assert(rc == RF_OK || rc == RF_EBUSY);
		} else if (nheld == 0) {
			cr_assert_eq(rf_pipeline_run(p, 2, srcs, sizes, nop_cb, NULL), RF_OK, "%s", rf_errmsg());
		}
	}
	while (nheld > 0)
		cr_assert_eq(rf_pipeline_release(p, &held[--nheld]), RF_OK);
	rf_keyed_stats st;
	cr_assert_eq(rf_pipeline_keyed_stats(p, &st), RF_OK);
	return st;
}

static void lru_reproduces(const char *backend, unsigned depth, int hints)
{
	uint64_t seed = test_seed();
	rf_pipeline_params pp = {.depth = depth, .slot_bytes = 4096, .backend = backend};
	rf_pipeline *p;
	cr_assert_eq(rf_pipeline_create(&pp, &p), RF_OK, "%s", rf_errmsg());
	char *path = tmp_path();
	cr_assert_eq(rf_pipeline_keyed_trace(p, path, 0), RF_OK, "%s", rf_errmsg());
	rf_keyed_stats st = workload(p, seed, hints, 20000);
	cr_assert_eq(rf_pipeline_keyed_trace(p, NULL, 0), RF_OK, "%s", rf_errmsg());
	rpl_trace t;
	char err[300];
	cr_assert_eq(rpl_trace_load(&t, path, err, sizeof err), 0, "%s", err);
	cr_assert_geq(t.slots, depth);
	cr_assert_eq(t.slot_bytes, 4096);
	cr_assert_eq(t.trailing, 0);
	/* what the records say ringfetch did is what it counted */
	cr_assert_eq(t.rec.acquires, st.acquires);
	cr_assert_eq(t.rec.hits, st.hits);
	cr_assert_eq(t.rec.prefetches, st.prefetches);
	if (strcmp(backend, "cpu") == 0) /* hints copy inline there: none is ever held back */
		cr_assert_eq(t.rec.hinted, 0);
	rpl_result r;
	cr_assert_eq(rpl_simulate(&t, RPL_LRU, t.slots, 1, &r), 0);
	cr_assert_eq(r.acquires, st.acquires);
	/* lru has ringfetch's residency: its misses are ringfetch's, less the acquires of hinted keys that
	 * ringfetch had not copied yet (resident for the cache, a copy for the counters) */
	cr_assert_eq(r.misses, st.acquires - st.hits - t.rec.hinted,
		     "seed %llu, %s, %u slots: lru replay %llu misses, ringfetch %llu (%llu hinted)",
		     (unsigned long long)seed, backend, t.slots, (unsigned long long)r.misses,
		     (unsigned long long)(st.acquires - st.hits), (unsigned long long)t.rec.hinted);
	cr_assert_gt(r.misses, 100, "the workload misses: the comparison means something");
	rpl_result m;
	cr_assert_eq(rpl_simulate(&t, RPL_MIN, t.slots, 0, &m), 0);
	cr_assert_leq(m.misses, r.misses);
	rpl_trace_free(&t);
	rf_pipeline_destroy(p);
	unlink(path);
}

Test(replay, lru_reproduces_cpu_pipeline) { lru_reproduces("cpu", 6, 1); }
Test(replay, lru_reproduces_cpu_pipeline_no_hints) { lru_reproduces("cpu", 9, 0); }
Test(replay, lru_reproduces_threads_pipeline_no_hints) { lru_reproduces("threads", 6, 0); }

/* With hints on "threads", some are held back: they count as hinted misses, and lru still agrees. */
Test(replay, lru_reproduces_threads_pipeline_hints) { lru_reproduces("threads", 6, 1); }

Test(replay, trace_call_errors)
{
	rf_pipeline_params pp = {.depth = 3, .slot_bytes = 4096, .backend = "cpu"};
	rf_pipeline *p;
	cr_assert_eq(rf_pipeline_create(&pp, &p), RF_OK, "%s", rf_errmsg());
	char *path = tmp_path();
	cr_assert_eq(rf_pipeline_keyed_trace(NULL, path, 0), RF_EINVAL);
	cr_assert_eq(rf_pipeline_keyed_trace(p, "", 0), RF_EINVAL);
	cr_assert_eq(rf_pipeline_keyed_trace(p, path, 1), RF_EINVAL);
	cr_assert_eq(rf_pipeline_keyed_trace(p, NULL, 0), RF_OK, "stop with none on");
	cr_assert_eq(rf_pipeline_keyed_trace(p, "/nonexistent-dir/trace", 0), RF_EIO);
	cr_assert(strstr(rf_errmsg(), "/nonexistent-dir/trace") != NULL, "%s", rf_errmsg());
	cr_assert_eq(rf_pipeline_keyed_trace(p, "/dev/full", 0), RF_EIO, "the header cannot be written");
	cr_assert(strstr(rf_errmsg(), "header") != NULL, "%s", rf_errmsg());
	/* a FIFO without a reader: RF_EIO at once, never a wait */
	char fifo[80];
	snprintf(fifo, sizeof fifo, "%s.fifo", path);
	cr_assert_eq(mkfifo(fifo, 0600), 0);
	cr_assert_eq(rf_pipeline_keyed_trace(p, fifo, 0), RF_EIO);
	unlink(fifo);
	static unsigned char blk[4096];
	const void *one[1] = {blk};
	size_t one_size[1] = {sizeof blk};
	cb_ctx cb = {p, path, 0, 0};
	cr_assert_eq(rf_pipeline_run(p, 1, one, one_size, trace_from_callback, &cb), RF_OK);
	cr_assert(cb.rc_start == RF_EBUSY && cb.rc_stop == RF_EBUSY, "from a compute callback: %d, %d", cb.rc_start,
		  cb.rc_stop);
	cr_assert_eq(rf_pipeline_keyed_trace(p, path, 0), RF_OK, "%s", rf_errmsg());
	cr_assert_eq(rf_pipeline_keyed_trace(p, path, 0), RF_EBUSY, "a second start");
	static unsigned char a[4096];
	rf_block b;
	cr_assert_eq(rf_pipeline_acquire(p, 1, a, sizeof a, NULL, 0, &b), RF_OK);
	cr_assert_eq(rf_pipeline_acquire(p, 1, a, 7, NULL, 0, &b), RF_EINVAL); /* failed: no record */
	cr_assert_eq(rf_pipeline_evict(p, 1), RF_EBUSY);                      /* failed: no record */
	cr_assert_eq(rf_pipeline_release(p, &b), RF_OK);
	cr_assert_eq(rf_pipeline_prefetch(p, 2, a, sizeof a, 0), RF_OK);
	cr_assert_eq(rf_pipeline_prefetch(p, 2, a, sizeof a, 0), RF_OK);
	cr_assert_eq(rf_pipeline_evict(p, 2), RF_OK);
	const void *srcs[1] = {a};
	size_t sizes[1] = {sizeof a};
	cr_assert_eq(rf_pipeline_run(p, 1, srcs, sizes, nop_cb, NULL), RF_OK);
	cr_assert_eq(rf_pipeline_keyed_trace(p, NULL, 0), RF_OK, "%s", rf_errmsg());
	/* the records, as documented */
	FILE *f = fopen(path, "rb");
	struct {
		char magic[8];
		uint32_t version, record_bytes, slots, flags;
		uint64_t slot_bytes;
	} h;
	struct {
		uint64_t key, bytes, ns;
		uint32_t kind, slot;
	} r[8];
	cr_assert_eq(fread(&h, sizeof h, 1, f), 1);
	cr_assert_eq(memcmp(h.magic, "RFKTRACE", 8), 0);
	cr_assert(h.version == 1 && h.record_bytes == 32 && h.slots >= 3 && h.flags == 0 && h.slot_bytes == 4096);
	cr_assert_eq(fread(r, sizeof r[0], 8, f), 6, "6 records: failed calls add none");
	fclose(f);
	static const unsigned kinds[6] = {RF_KTRACE_ACQUIRE_MISS, RF_KTRACE_RELEASE, RF_KTRACE_PREFETCH,
					  RF_KTRACE_PREFETCH_PRESENT, RF_KTRACE_EVICT, RF_KTRACE_RESET};
	static const uint64_t keys[6] = {1, 1, 2, 2, 2, 0};
	for (int i = 0; i < 6; i++) {
		cr_assert_eq(r[i].kind, kinds[i], "record %d: kind %u", i, r[i].kind);
		cr_assert_eq(r[i].key, keys[i], "record %d", i);
		cr_assert(i == 0 || r[i].ns >= r[i - 1].ns);
	}
	cr_assert_eq(r[0].bytes, 4096);
	cr_assert_eq(r[0].slot, b.slot);
	cr_assert_eq(r[4].slot, UINT32_MAX);
	/* a second trace on the same pipeline: the acquire of key 1 again is a miss (the run emptied it) */
	cr_assert_eq(rf_pipeline_keyed_trace(p, path, 0), RF_OK, "%s", rf_errmsg());
	cr_assert_eq(rf_pipeline_acquire(p, 1, a, sizeof a, NULL, 0, &b), RF_OK);
	cr_assert_eq(rf_pipeline_release(p, &b), RF_OK);
	cr_assert_eq(rf_pipeline_acquire(p, 1, a, sizeof a, NULL, 0, &b), RF_OK);
	rf_pipeline_destroy(p); /* stops the trace, a block still held */
	rpl_trace t;
	char err[300];
	cr_assert_eq(rpl_trace_load(&t, path, err, sizeof err), 0, "%s", err);
	cr_assert_eq(t.n, 3);
	cr_assert(t.rec.acquires == 2 && t.rec.hits == 1 && t.rec.misses == 1);
	rpl_trace_free(&t);
	unlink(path);
}

/* A write that fails fails no keyed call; the stop says so, and what was written is a readable prefix. */
Test(replay, write_failure_reported_at_stop)
{
	signal(SIGXFSZ, SIG_IGN);
	struct rlimit lim = {32 + 100 * 32 + 16, RLIM_INFINITY}; /* the header, 100 records and half of one */
	rf_pipeline_params pp = {.depth = 3, .slot_bytes = 4096, .backend = "cpu"};
	rf_pipeline *p;
	cr_assert_eq(rf_pipeline_create(&pp, &p), RF_OK, "%s", rf_errmsg());
	char *path = tmp_path();
	cr_assert_eq(setrlimit(RLIMIT_FSIZE, &lim), 0);
	cr_assert_eq(rf_pipeline_keyed_trace(p, path, 0), RF_OK, "%s", rf_errmsg());
	static unsigned char a[4096];
	for (int i = 0; i < 5000; i++) { /* more than two buffers */
		rf_block b;
		cr_assert_eq(rf_pipeline_acquire(p, (uint64_t)i % 5, a, sizeof a, NULL, 0, &b), RF_OK);
		cr_assert_eq(rf_pipeline_release(p, &b), RF_OK);
	}
	cr_assert_eq(rf_pipeline_keyed_trace(p, NULL, 0), RF_EIO);
	cr_assert(strstr(rf_errmsg(), "records lost") != NULL && strstr(rf_errmsg(), path) != NULL, "%s", rf_errmsg());
	cr_assert_eq(rf_pipeline_keyed_trace(p, NULL, 0), RF_OK, "stopped: nothing more to say");
	rpl_trace t;
	char err[300];
	cr_assert_eq(rpl_trace_load(&t, path, err, sizeof err), 0, "%s", err);
	cr_assert_eq(t.n, 100);
	cr_assert_eq(t.trailing, 16);
	rpl_trace_free(&t);
	rf_pipeline_destroy(p);
	unlink(path);
}

/* ---- RINGFETCH_KEYED_TRACE ------------------------------------------------------------------------------ */

Test(replay, environment_variable)
{
	char dir[] = "/tmp/rf-replay-env-XXXXXX", pat[128], want[128], want1[160];
	cr_assert(mkdtemp(dir) != NULL);
	snprintf(pat, sizeof pat, "%s/t-%%p-%%%%", dir);
	snprintf(want, sizeof want, "%s/t-%ld-%%", dir, (long)getpid());
	snprintf(want1, sizeof want1, "%s.1", want);
	setenv("RINGFETCH_KEYED_TRACE", pat, 1);
	rf_pipeline_params pp = {.depth = 2, .slot_bytes = 4096, .backend = "cpu"};
	rf_pipeline *p, *q;
	cr_assert_eq(rf_pipeline_create(&pp, &p), RF_OK, "%s", rf_errmsg());
	cr_assert_eq(rf_pipeline_create(&pp, &q), RF_OK, "%s", rf_errmsg());
	cr_assert_eq(rf_pipeline_keyed_trace(p, want, 0), RF_EBUSY, "the variable started one");
	static unsigned char a[4096];
	rf_block b;
	cr_assert_eq(rf_pipeline_acquire(p, 5, a, sizeof a, NULL, 0, &b), RF_OK);
	rf_pipeline_destroy(p);
	rf_pipeline_destroy(q);
	rpl_trace t;
	char err[300];
	cr_assert_eq(rpl_trace_load(&t, want, err, sizeof err), 0, "%s", err);
	cr_assert_eq(t.n, 1);
	rpl_trace_free(&t);
	cr_assert_eq(rpl_trace_load(&t, want1, err, sizeof err), 0, "the second pipeline's: %s", err);
	cr_assert_eq(t.n, 0);
	rpl_trace_free(&t);
	unlink(want), unlink(want1), rmdir(dir);

	setenv("RINGFETCH_KEYED_TRACE", "/tmp/x-%q", 1);
	cr_assert_eq(rf_pipeline_create(&pp, &p), RF_ECONFIG);
	cr_assert(strstr(rf_errmsg(), "RINGFETCH_KEYED_TRACE") != NULL, "%s", rf_errmsg());
	setenv("RINGFETCH_KEYED_TRACE", "", 1);
	cr_assert_eq(rf_pipeline_create(&pp, &p), RF_ECONFIG);
	setenv("RINGFETCH_KEYED_TRACE", "/nonexistent-dir/trace", 1);
	cr_assert_eq(rf_pipeline_create(&pp, &p), RF_ECONFIG);
	cr_assert(strstr(rf_errmsg(), "RINGFETCH_KEYED_TRACE=\"/nonexistent-dir/trace\"") != NULL, "%s", rf_errmsg());
	unsetenv("RINGFETCH_KEYED_TRACE");
}
