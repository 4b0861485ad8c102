/* tests/test_keyed.c — the keyed contract (rf_pipeline_prefetch/acquire/release/evict/lookup/
 * keyed_stats), per backend (RF_TEST_BACKEND), with the hazard oracle on (RINGFETCH_ORACLE=1), and the
 * wait policy's settings. White-box only for the oracle's negative control (rf__test_hooks): the
 * suite links the static library. */
#include "runtime/backend.h"
#include "support.h"

#include <pthread.h>
#include <stdatomic.h>
#include <time.h>

#define SB 4096u
#define NKEYS 64u

static unsigned char g_src[NKEYS][SB];

static void init_srcs(uint64_t seed)
{
	for (unsigned i = 0; i < NKEYS; i++)
		fill_pattern(g_src[i], SB, i, seed);
}

static void setup(void)
{
	setenv("RINGFETCH_ORACLE", "1", 1);
	init_srcs(42);
}

/* A pipeline of depth slots of SB bytes; hint_bytes 0: hints unbounded (the default: the documented
 * LRU slot rule), else the bound on hints' bytes outstanding (the bounded policy). */
static rf_pipeline *mk_hints(unsigned depth, uint64_t hint_bytes)
{
	rf_pipeline_params pp = {0};
	pp.depth = depth;
	pp.slot_bytes = SB;
	pp.backend = test_backend();
	pp.hint_bytes = hint_bytes;
	rf_pipeline *p = NULL;
	cr_assert_eq(rf_pipeline_create(&pp, &p), RF_OK, "create: %s", rf_errmsg());
	return p;
}

static rf_pipeline *mk(unsigned depth)
{
	return mk_hints(depth, 0);
}

static rf_keyed_stats stats(const rf_pipeline *p)
{
	rf_keyed_stats s;
	memset(&s, 0xab, sizeof s);
	cr_assert_eq(rf_pipeline_keyed_stats(p, &s), RF_OK);
	for (int i = 0; i < 9; i++)
		cr_assert_eq(s.reserved[i], 0);
	return s;
}

static rf_block acq(rf_pipeline *p, uint64_t key, size_t bytes)
{
	rf_block b;
	int rc = rf_pipeline_acquire(p, key, g_src[key], bytes, NULL, 0, &b);
	cr_assert_eq(rc, RF_OK, "acquire %llu: %s", (unsigned long long)key, rf_errmsg());
	cr_assert_eq(b.index, key);
	cr_assert_eq(b.bytes, bytes);
	cr_assert_null(b.stream);
	cr_assert(memcmp(b.data, g_src[key], bytes) == 0, "key %llu: slot does not hold its bytes",
		  (unsigned long long)key);
	return b;
}

static void rel(rf_pipeline *p, const rf_block *b)
{
	cr_assert_eq(rf_pipeline_release(p, b), RF_OK, "release: %s", rf_errmsg());
}

static rf_key_state state_of(const rf_pipeline *p, uint64_t key, unsigned *slot)
{
	rf_key_state st;
	cr_assert_eq(rf_pipeline_lookup(p, key, &st, slot), RF_OK);
	return st;
}

static int same_stats(rf_keyed_stats a, rf_keyed_stats b)
{
	return memcmp(&a, &b, sizeof a) == 0;
}

TestSuite(keyed, .init = setup);

Test(keyed, miss_then_hit_same_slot)
{
	rf_pipeline *p = mk(4);
	rf_block a = acq(p, 7, 100);
	cr_assert_eq(a.slot, 0, "the lowest-numbered empty slot first");
	rf_keyed_stats s = stats(p);
	cr_assert(s.acquires == 1 && s.hits == 0 && s.bytes_copied == 100);
	cr_assert_eq(state_of(p, 7, NULL), RF_KEY_READY);
	rel(p, &a);
	rf_block b = acq(p, 7, 100);
	cr_assert_eq(b.slot, a.slot);
	cr_assert_eq(b.data, a.data, "a slot's address never changes");
	s = stats(p);
	cr_assert(s.acquires == 2 && s.hits == 1 && s.late == 0 && s.bytes_copied == 100);
	rel(p, &b);
	rf_block c = acq(p, 8, SB);
	cr_assert_eq(c.slot, 1);
	rel(p, &c);
	rf_pipeline_destroy(p);
}

Test(keyed, failed_calls_change_nothing)
{
	rf_pipeline *p = mk(2);
	rf_block held = acq(p, 1, 64);
	rf_keyed_stats s0 = stats(p);
	rf_block out, keep;
	memset(&out, 0x5a, sizeof out);
	keep = out;
	int dummy;
	cr_assert_eq(rf_pipeline_acquire(NULL, 2, g_src[2], 64, NULL, 0, &out), RF_EINVAL);
	cr_assert_eq(rf_pipeline_acquire(p, 2, NULL, 64, NULL, 0, &out), RF_EINVAL);
	cr_assert_eq(rf_pipeline_acquire(p, 2, g_src[2], 0, NULL, 0, &out), RF_EINVAL);
	cr_assert_eq(rf_pipeline_acquire(p, 2, g_src[2], SB + 1, NULL, 0, &out), RF_EINVAL);
	cr_assert_eq(rf_pipeline_acquire(p, 2, g_src[2], 64, NULL, 1, &out), RF_EINVAL);
	cr_assert_eq(rf_pipeline_acquire(p, 2, g_src[2], 64, &dummy, 0, &out), RF_EINVAL, "stream on a CPU backend");
	cr_assert_eq(rf_pipeline_acquire(p, 2, g_src[2], 64, NULL, 0, NULL), RF_EINVAL);
	cr_assert_eq(rf_pipeline_acquire(p, 1, g_src[1], 65, NULL, 0, &out), RF_EINVAL, "other bytes count");
	cr_assert(memcmp(&out, &keep, sizeof out) == 0, "*out untouched");
	cr_assert_eq(rf_pipeline_prefetch(NULL, 2, g_src[2], 64, 0), RF_EINVAL);
	cr_assert_eq(rf_pipeline_prefetch(p, 2, NULL, 64, 0), RF_EINVAL);
	cr_assert_eq(rf_pipeline_prefetch(p, 2, g_src[2], 0, 0), RF_EINVAL);
	cr_assert_eq(rf_pipeline_prefetch(p, 2, g_src[2], SB + 1, 0), RF_EINVAL);
	cr_assert_eq(rf_pipeline_prefetch(p, 2, g_src[2], 64, 4), RF_EINVAL);
	cr_assert_eq(rf_pipeline_prefetch(p, 1, g_src[1], 63, 0), RF_EINVAL);
	cr_assert_eq(rf_pipeline_release(NULL, &held), RF_EINVAL);
	cr_assert_eq(rf_pipeline_release(p, NULL), RF_EINVAL);
	rf_block bad = held;
	bad.slot = 1;
	cr_assert_eq(rf_pipeline_release(p, &bad), RF_EINVAL, "wrong slot");
	bad = held;
	bad.index = 2;
	cr_assert_eq(rf_pipeline_release(p, &bad), RF_EINVAL, "key not held");
	bad.slot = 99;
	cr_assert_eq(rf_pipeline_release(p, &bad), RF_EINVAL, "slot out of range");
	cr_assert_eq(rf_pipeline_evict(NULL, 1), RF_EINVAL);
	cr_assert_eq(rf_pipeline_evict(p, 1), RF_EBUSY, "held");
	rf_key_state st;
	cr_assert_eq(rf_pipeline_lookup(NULL, 1, &st, NULL), RF_EINVAL);
	cr_assert_eq(rf_pipeline_lookup(p, 1, NULL, NULL), RF_EINVAL);
	cr_assert_eq(rf_pipeline_keyed_stats(NULL, &s0), RF_EINVAL);
	cr_assert_eq(rf_pipeline_keyed_stats(p, NULL), RF_EINVAL);
	cr_assert(same_stats(stats(p), s0), "stats unchanged by failed calls");
	cr_assert_eq(state_of(p, 2, NULL), RF_KEY_ABSENT);
	unsigned slot = 77;
	cr_assert_eq(state_of(p, 1, &slot), RF_KEY_READY);
	cr_assert_eq(slot, held.slot);
	/* The LRU order is unchanged too: key 3 takes the empty slot 1, then key 4 must evict key 3 only
	 * after key 1 is released (key 1 was used before key 3). */
	rel(p, &held);
	rf_pipeline_destroy(p);
}

Test(keyed, lru_choice_and_refresh)
{
	rf_pipeline *p = mk(3);
	for (uint64_t k = 1; k <= 3; k++) {
		rf_block b = acq(p, k, 128);
		cr_assert_eq(b.slot, k - 1);
		rel(p, &b);
	}
	rf_block b1 = acq(p, 1, 128); /* key 1 used again: key 2 is now the LRU */
	rel(p, &b1);
	rf_block b4 = acq(p, 4, 128);
	cr_assert_eq(b4.slot, 1, "the least recently used slot not held (key 2's)");
	cr_assert_eq(state_of(p, 2, NULL), RF_KEY_ABSENT);
	rel(p, &b4);
	/* A prefetch of a resident key refreshes its use: key 3 (LRU now) survives, key 1 goes. */
	rf_keyed_stats s0 = stats(p);
	cr_assert_eq(rf_pipeline_prefetch(p, 3, g_src[3], 128, 0), RF_OK);
	rf_keyed_stats s1 = stats(p);
	cr_assert(s1.prefetches == s0.prefetches && s1.bytes_copied == s0.bytes_copied, "resident: no copy, no count");
	rf_block b5 = acq(p, 5, 128);
	cr_assert_eq(b5.slot, 0, "key 1's slot");
	cr_assert_eq(state_of(p, 1, NULL), RF_KEY_ABSENT);
	cr_assert_eq(state_of(p, 3, NULL), RF_KEY_READY);
	rel(p, &b5);
	rf_pipeline_destroy(p);
}

Test(keyed, enospc_and_reacquire_when_all_held)
{
	rf_pipeline *p = mk(2);
	rf_block a = acq(p, 1, 64), b = acq(p, 2, 64);
	rf_keyed_stats s0 = stats(p);
	rf_block out;
	cr_assert_eq(rf_pipeline_acquire(p, 3, g_src[3], 64, NULL, 0, &out), RF_ENOSPC);
	cr_assert_eq(rf_pipeline_prefetch(p, 3, g_src[3], 64, 0), RF_ENOSPC);
	cr_assert(same_stats(stats(p), s0), "refused calls count nowhere");
	cr_assert_eq(state_of(p, 3, NULL), RF_KEY_ABSENT);
	rf_block a2 = acq(p, 1, 64); /* held twice */
	cr_assert_eq(a2.slot, a.slot);
	cr_assert_eq(rf_pipeline_prefetch(p, 2, g_src[2], 64, 0), RF_OK, "a held key: no copy");
	rel(p, &a);
	cr_assert_eq(rf_pipeline_evict(p, 1), RF_EBUSY, "still held once");
	rel(p, &a2);
	cr_assert_eq(rf_pipeline_release(p, &a2), RF_EINVAL, "released more often than held");
	rf_block c = acq(p, 3, 64);
	cr_assert_eq(c.slot, a.slot, "the only slot not held");
	rel(p, &b);
	rel(p, &c);
	rf_pipeline_destroy(p);
}

Test(keyed, evict_forgets_and_recopies)
{
	rf_pipeline *p = mk(2);
	rf_block a = acq(p, 5, 256);
	rel(p, &a);
	cr_assert_eq(rf_pipeline_evict(p, 5), RF_OK);
	cr_assert_eq(rf_pipeline_evict(p, 5), RF_OK, "absent: RF_OK");
	cr_assert_eq(state_of(p, 5, NULL), RF_KEY_ABSENT);
	fill_pattern(g_src[5], SB, 555, 9); /* the source changes after evict */
	rf_keyed_stats s0 = stats(p);
	rf_block b = acq(p, 5, 256); /* acq compares with the new bytes */
	rf_keyed_stats s1 = stats(p);
	cr_assert(s1.hits == s0.hits && s1.bytes_copied == s0.bytes_copied + 256);
	cr_assert_eq(b.slot, 0, "the evicted slot is empty again: lowest first");
	rel(p, &b);
	init_srcs(42);
	rf_pipeline_destroy(p);
}

Test(keyed, hints_are_counted)
{
	rf_pipeline *p = mk(8);
	for (uint64_t k = 10; k < 16; k++)
		cr_assert_eq(rf_pipeline_prefetch(p, k, g_src[k], 512, 0), RF_OK);
	rf_keyed_stats s = stats(p);
	cr_assert_eq(s.prefetches, 6);
	for (uint64_t k = 10; k < 16; k++) {
		unsigned slot = 99;
		rf_key_state st = state_of(p, k, &slot);
		cr_assert(st == RF_KEY_COPYING || st == RF_KEY_READY);
		cr_assert_eq(slot, k - 10, "slot chosen at the hint");
	}
	cr_assert_eq(rf_pipeline_prefetch(p, 10, g_src[10], 512, 0), RF_OK, "on its way: no copy, no count");
	cr_assert_eq(stats(p).prefetches, 6);
	for (uint64_t k = 10; k < 15; k++) {
		rf_block b = acq(p, k, 512);
		cr_assert_eq(b.slot, k - 10);
		rel(p, &b);
	}
	s = stats(p);
	/* Each of the 5 acquired hints is a hit, or it was held back and the acquire copied it (dropped). */
	cr_assert_eq(s.hits + s.dropped, 5);
	cr_assert_eq(s.wasted, 0);
	/* Every copy issued counts whole: the 5 acquired keys' data arrived through at least 5 copies; at most
	 * 6 hint copies plus one acquire copy per overtaken hint (dropped). */
	cr_assert(s.bytes_copied % 512 == 0 && s.bytes_copied >= 512u * 5 && s.bytes_copied <= 512u * (6 + s.dropped),
		  "bytes of issued copies: %llu", (unsigned long long)s.bytes_copied);
	/* Key 15 is never acquired: evicting it counts it as wasted (issued) or dropped (held back). */
	uint64_t before = s.wasted + s.dropped;
	cr_assert_eq(rf_pipeline_evict(p, 15), RF_OK);
	s = stats(p);
	cr_assert_eq(s.wasted + s.dropped, before + 1);
	cr_assert(s.late <= s.hits);
	rf_pipeline_destroy(p);
}

Test(keyed, hint_slot_chosen_again_is_dropped_or_wasted)
{
	rf_pipeline *p = mk(1);
	cr_assert_eq(rf_pipeline_prefetch(p, 1, g_src[1], 64, 0), RF_OK);
	cr_assert_eq(rf_pipeline_prefetch(p, 2, g_src[2], 64, 0), RF_OK, "takes the only slot");
	cr_assert_eq(state_of(p, 1, NULL), RF_KEY_ABSENT);
	rf_keyed_stats s = stats(p);
	cr_assert_eq(s.wasted + s.dropped, 1);
	rf_block b = acq(p, 2, 64);
	rel(p, &b);
	rf_pipeline_destroy(p);
}

/* ---- runs and keyed use ------------------------------------------------------------------------ */

typedef struct cbctx {
	rf_pipeline *p;
	int rc_acq, rc_pre, rc_rel, rc_evict, rc_stats, rc_lookup;
	rf_key_state st;
} cbctx;

static int keyed_from_callback(void *user, const rf_block *blk)
{
	cbctx *c = user;
	rf_block out = *blk;
	c->rc_acq = rf_pipeline_acquire(c->p, 1, g_src[1], 64, NULL, 0, &out);
	c->rc_pre = rf_pipeline_prefetch(c->p, 1, g_src[1], 64, 0);
	c->rc_rel = rf_pipeline_release(c->p, blk);
	c->rc_evict = rf_pipeline_evict(c->p, 1);
	rf_keyed_stats s;
	c->rc_stats = rf_pipeline_keyed_stats(c->p, &s);
	c->rc_lookup = rf_pipeline_lookup(c->p, 1, &c->st, NULL);
	return 0;
}

Test(keyed, runs_and_keyed_use)
{
	rf_pipeline *p = mk(2);
	rf_block a = acq(p, 1, 64);
	const void *srcs[2] = {g_src[3], g_src[4]};
	size_t sizes[2] = {64, 64};
	cbctx c = {p, 0, 0, 0, 0, 0, 0, RF_KEY_READY};
	cr_assert_eq(rf_pipeline_run(p, 2, srcs, sizes, keyed_from_callback, &c), RF_EBUSY, "a block is held");
	cr_assert_eq(state_of(p, 1, NULL), RF_KEY_READY);
	rel(p, &a);
	cr_assert_eq(rf_pipeline_run(p, 0, srcs, sizes, keyed_from_callback, &c), RF_OK);
	cr_assert_eq(rf_pipeline_run(p, 2, NULL, sizes, keyed_from_callback, &c), RF_EINVAL);
	cr_assert_eq(state_of(p, 1, NULL), RF_KEY_READY, "a run that fails its checks changes nothing");
	cr_assert_eq(rf_pipeline_prefetch(p, 2, g_src[2], 64, 0), RF_OK);
	rf_keyed_stats s0 = stats(p);
	cr_assert_eq(rf_pipeline_run(p, 2, srcs, sizes, keyed_from_callback, &c), RF_OK, "%s", rf_errmsg());
	cr_assert_eq(c.rc_acq, RF_EBUSY);
	cr_assert_eq(c.rc_pre, RF_EBUSY);
	cr_assert_eq(c.rc_rel, RF_EBUSY);
	cr_assert_eq(c.rc_evict, RF_EBUSY);
	cr_assert_eq(c.rc_stats, RF_OK);
	cr_assert_eq(c.rc_lookup, RF_OK);
	cr_assert_eq(c.st, RF_KEY_ABSENT, "lookup reports ABSENT during a run");
	cr_assert_eq(state_of(p, 1, NULL), RF_KEY_ABSENT, "a run leaves no key resident");
	cr_assert_eq(state_of(p, 2, NULL), RF_KEY_ABSENT);
	rf_keyed_stats s1 = stats(p);
	cr_assert_eq(s1.wasted + s1.dropped, s0.wasted + s0.dropped + 1, "the unacquired hint is counted");
	rf_block b = acq(p, 1, 64); /* copied again */
	cr_assert_eq(stats(p).hits, s1.hits);
	rel(p, &b);
	rf_pipeline_destroy(p);
}

Test(keyed, destroy_with_holds)
{
	rf_pipeline *p = mk(3);
	acq(p, 1, 64);
	acq(p, 1, 64);
	cr_assert_eq(rf_pipeline_prefetch(p, 2, g_src[2], SB, 0), RF_OK);
	rf_pipeline_destroy(p);
	leak_check();
}

Test(keyed, depth_auto_uses_every_allocated_slot)
{
	rf_pipeline_params pp = {0};
	pp.depth = 0;
	pp.depth_auto = RF_DEPTH_AUTO;
	pp.slot_bytes = SB;
	pp.backend = test_backend();
	rf_pipeline *p = NULL;
	if (rf_pipeline_create(&pp, &p) != RF_OK)
		cr_skip_test("depth auto not available: %s", rf_errmsg());
	rf_block b[NKEYS];
	unsigned n = 0;
	rf_block out;
	while (n < NKEYS && rf_pipeline_acquire(p, n, g_src[n], 64, NULL, 0, &out) == RF_OK)
		b[n++] = out;
	cr_assert_geq(n, rf_pipeline_depth(p), "at least the ring's slots");
	cr_assert_eq(n, 16u, "depth = auto allocates 16 slots here; keyed use takes them all");
	for (unsigned i = 0; i < n; i++)
		rel(p, &b[i]);
	rf_pipeline_destroy(p);
}

/* ---- a model of the cache, against random call sequences ----------------------------------------- */

/* The slot-choice rules of <ringfetch.h>: unbounded (the default: lowest-numbered empty slot, else the
 * least recently used slot not held, hints or not), or bounded by hint_bytes, with the hints' credit
 * (every hint copy has then landed before the next call, so none is passed over for being copied, and
 * one that leaves unacquired is wasted). */
typedef struct model {
	uint64_t key[16];
	int used[16];
	int hint[16]; /* an unacquired hint */
	unsigned refs[16];
	unsigned long last[16], clock;
	unsigned n;
	size_t cap, credit, bytes;
	int bounded; /* hint_bytes = cap set */
} model;

static int m_find(const model *m, uint64_t key)
{
	for (unsigned i = 0; i < m->n; i++)
		if (m->used[i] && m->key[i] == key)
			return (int)i;
	return -1;
}

/* The least recently used unheld slot whose hint flag is `hint` (-1: either); -1 if none. */
static int m_lru(const model *m, int hint)
{
	int v = -1;
	for (unsigned i = 0; i < m->n; i++)
		if (m->used[i] && m->refs[i] == 0 && (hint < 0 || m->hint[i] == hint) &&
		    (v < 0 || m->last[i] < m->last[v]))
			v = (int)i;
	return v;
}

/* for_hint: 0 a demand miss, 1 a hint within the bound (every hint when unbounded), 2 a hint over it. */
static int m_choose(const model *m, int for_hint)
{
	for (unsigned i = 0; i < m->n && for_hint != 2; i++)
		if (!m->used[i])
			return (int)i;
	if (!m->bounded)
		return m_lru(m, -1);
	int hint = m_lru(m, 1), lru = m_lru(m, 0);
	if (for_hint == 1)
		return lru >= 0 ? lru : hint;
	if (for_hint == 2)
		return hint;
	return hint >= 0 ? hint : lru;
}

static size_t m_hint_bytes(const model *m)
{
	size_t b = 0;
	for (unsigned i = 0; i < m->n; i++)
		b += m->used[i] && m->hint[i] ? m->bytes : 0;
	return b;
}

static void m_credit(model *m, size_t b)
{
	if (m->bounded)
		m->credit = m->credit + b > m->cap ? m->cap : m->credit + b;
}

static void wait_landed(const rf_pipeline *p, uint64_t key)
{
	while (state_of(p, key, NULL) == RF_KEY_COPYING)
		sched_yield();
}

Test(keyed, random_sequences_follow_the_model)
{
	uint64_t seed = test_seed(), rs = seed;
	for (int round = 0; round < 20; round++) {
		model m;
		memset(&m, 0, sizeof m);
		m.n = 1 + (unsigned)(rng_next(&rs) % 6);
		m.bytes = 200;
		m.cap = m.credit = m.bytes * (1 + rng_next(&rs) % 3); /* 1..3 hints outstanding */
		m.bounded = round % 2; /* both rules in every run, whatever the seed */
		rf_pipeline *p = mk_hints(m.n, m.bounded ? m.cap : 0);
		rf_block held[64];
		unsigned nheld = 0;
		for (int step = 0; step < 400; step++) {
			uint64_t key = rng_next(&rs) % 12, r = rng_next(&rs) % 10;
			int i = m_find(&m, key);
			if (r < 4) { /* acquire */
				rf_block b;
				int rc = rf_pipeline_acquire(p, key, g_src[key], 200, NULL, 0, &b);
				int want = i >= 0 ? i : m_choose(&m, 0);
				if (want < 0) {
					cr_assert_eq(rc, RF_ENOSPC, "seed %llu", (unsigned long long)seed);
					continue;
				}
				cr_assert_eq(rc, RF_OK, "seed %llu: %s", (unsigned long long)seed, rf_errmsg());
				cr_assert_eq(b.slot, (unsigned)want, "seed %llu step %d: slot", (unsigned long long)seed, step);
				cr_assert(memcmp(b.data, g_src[key], 200) == 0, "seed %llu: payload", (unsigned long long)seed);
				if (i >= 0 && m.hint[i]) /* an acquired hint gives its credit back */
					m_credit(&m, m.bytes);
				else if (i < 0) /* a demand copy earns 1/32 of its bytes */
					m_credit(&m, m.bytes / 32);
				m.hint[want] = 0;
				m.key[want] = key, m.used[want] = 1, m.refs[want]++, m.last[want] = ++m.clock;
				if (nheld < 64)
					held[nheld++] = b;
				else
					rel(p, &b), m.refs[want]--;
			} else if (r < 7 && nheld > 0) { /* release */
				unsigned j = (unsigned)(rng_next(&rs) % nheld);
				rel(p, &held[j]);
				m.refs[held[j].slot]--, m.last[held[j].slot] = ++m.clock;
				held[j] = held[--nheld];
			} else if (r < 9) { /* prefetch */
				rf_keyed_stats s0 = stats(p);
				int rc = rf_pipeline_prefetch(p, key, g_src[key], 200, 0);
				int out_of_credit = m.bounded && i < 0 && m.credit < m.bytes;
				int over = m.bounded && m_hint_bytes(&m) + m.bytes > m.cap;
				int want = i >= 0 ? i : m_choose(&m, over ? 2 : 1);
				if (want >= 0 && out_of_credit) { /* dropped at once: no slot taken */
					cr_assert_eq(rc, RF_OK, "seed %llu", (unsigned long long)seed);
					rf_keyed_stats s1 = stats(p);
					cr_assert(s1.prefetches == s0.prefetches + 1 && s1.dropped == s0.dropped + 1 &&
							  s1.bytes_copied == s0.bytes_copied,
						  "seed %llu step %d: a hint out of credit is dropped", (unsigned long long)seed, step);
					continue;
				}
				cr_assert_eq(rc, want < 0 ? RF_ENOSPC : RF_OK, "seed %llu step %d", (unsigned long long)seed, step);
				if (want >= 0 && i < 0) {
					m.credit -= m.bounded ? m.bytes : 0;
					m.hint[want] = 1;
				}
				if (want >= 0)
					m.key[want] = key, m.used[want] = 1, m.last[want] = ++m.clock;
				if (m.bounded) /* unbounded, the rule does not depend on where a hint's copy is */
					wait_landed(p, key);
			} else { /* evict */
				int rc = rf_pipeline_evict(p, key);
				cr_assert_eq(rc, i >= 0 && m.refs[i] > 0 ? RF_EBUSY : RF_OK, "seed %llu", (unsigned long long)seed);
				if (rc == RF_OK && i >= 0)
					m.used[i] = 0;
			}
			for (uint64_t k = 0; k < 12; k++) {
				unsigned slot = 99;
				rf_key_state st = state_of(p, k, &slot);
				int mi = m_find(&m, k);
				cr_assert_eq(st != RF_KEY_ABSENT, mi >= 0, "seed %llu: key %llu", (unsigned long long)seed,
					     (unsigned long long)k);
				if (mi >= 0)
					cr_assert_eq(slot, (unsigned)mi);
			}
		}
		rf_keyed_stats s = stats(p);
		cr_assert(s.hits <= s.acquires && s.late <= s.hits);
		while (nheld > 0)
			rel(p, &held[--nheld]);
		rf_pipeline_destroy(p);
	}
}

/* ---- traces: every keyed copy is a slice --------------------------------------------------------- */

/* 12 rounds of a hint, its acquire (the hint's copy, or the acquire's own when it overtakes a hint not
 * yet started) and a miss: 24 keyed copies, 24 slices named by key in the trace file, written by the next
 * run or at the latest by destroy. */
Test(keyed, every_keyed_copy_is_a_slice_of_the_trace)
{
	char path[96];
	snprintf(path, sizeof path, "/tmp/rf_test_keyed_trace_%ld.json", (long)getpid());
	for (int by_run = 0; by_run < 2; by_run++) {
		unlink(path);
		setenv("RINGFETCH_ORACLE", by_run ? "0" : "1", 1); /* the slices' buffer made at create, or lazily */
		rf_pipeline *p = mk(4);
		cr_assert_eq(rf_pipeline_trace(p, path), RF_OK, "%s", rf_errmsg());
		for (unsigned i = 0; i < 12; i++) {
			cr_assert_eq(rf_pipeline_prefetch(p, 20 + i, g_src[20 + i], 512, 0), RF_OK, "%s", rf_errmsg());
			rf_block h = acq(p, 20 + i, 512), m = acq(p, i, 512);
			rel(p, &h);
			rel(p, &m);
		}
		cr_assert_eq(stats(p).bytes_copied, 24 * 512, "24 keyed copies");
		if (by_run) { /* the run writes them before it reuses the slots */
			const void *srcs[1] = {g_src[0]};
			size_t sizes[1] = {512};
			size_t n = 0;
			cr_assert_eq(rf_pipeline_run(p, 1, srcs, sizes, count_cb, &n), RF_OK, "%s", rf_errmsg());
			cr_assert_eq(count_in_file(path, "\"cat\":\"copy\",\"ph\":\"X\""), 24 + 1, "24 keyed copies and the run's");
		}
		rf_pipeline_destroy(p);
		cr_assert_eq(count_in_file(path, "\"args\":{\"key\":"), 24, "one slice per keyed copy");
		cr_assert_eq(count_in_file(path, "keyed copies"), 1, "one process track for them");
		unlink(path);
	}
}

/* Tracing stopped or moved to another file: the keyed copies traced so far go to the file they were
 * traced for, not nowhere and not the next file. */
Test(keyed, keyed_slices_go_to_the_trace_they_were_made_under)
{
	char a[96], b[96];
	snprintf(a, sizeof a, "/tmp/rf_test_keyed_trace_a_%ld.json", (long)getpid());
	snprintf(b, sizeof b, "/tmp/rf_test_keyed_trace_b_%ld.json", (long)getpid());
	for (int move = 0; move < 2; move++) {
		unlink(a), unlink(b);
		rf_pipeline *p = mk(4);
		cr_assert_eq(rf_pipeline_trace(p, a), RF_OK, "%s", rf_errmsg());
		for (unsigned i = 0; i < 6; i++) {
			rf_block m = acq(p, i, 512);
			rel(p, &m);
		}
		cr_assert_eq(rf_pipeline_trace(p, move ? b : NULL), RF_OK, "%s", rf_errmsg());
		cr_assert_eq(count_in_file(a, "\"args\":{\"key\":"), 6, "the six copies traced under the first file");
		for (unsigned i = 6; i < 9; i++) {
			rf_block m = acq(p, i, 512);
			rel(p, &m);
		}
		rf_pipeline_destroy(p);
		cr_assert_eq(count_in_file(a, "\"args\":{\"key\":"), 6, "nothing later in the first file");
		if (move)
			cr_assert_eq(count_in_file(b, "\"args\":{\"key\":"), 3, "the three later copies in the second");
		unlink(a), unlink(b);
	}
}

/* ---- the oracle must be able to fail -------------------------------------------------------------- */

Test(keyed, oracle_catches_a_refill_of_a_held_slot)
{
	rf_pipeline *p = mk(1);
	rf_block a = acq(p, 1, 64);
	rf__test_hooks.keyed_refill_held = 1;
	rf_block out;
	int rc = rf_pipeline_acquire(p, 2, g_src[2], 64, NULL, 0, &out);
	rf__test_hooks.keyed_refill_held = 0;
	cr_assert_eq(rc, RF_EHAZARD, "the oracle must refuse the refill (got %d: %s)", rc, rf_errmsg());
	cr_assert(strstr(rf_errmsg(), "WAR") != NULL, "%s", rf_errmsg());
	cr_assert(memcmp(a.data, g_src[1], 64) == 0, "the held block is intact");
	rel(p, &a);
	rf_pipeline_destroy(p);
	/* Without the oracle the hook really refills the held slot: the control controls something. */
	setenv("RINGFETCH_ORACLE", "0", 1);
	p = mk(1);
	a = acq(p, 1, 64);
	rf__test_hooks.keyed_refill_held = 1;
	rc = rf_pipeline_acquire(p, 2, g_src[2], 64, NULL, 0, &out);
	rf__test_hooks.keyed_refill_held = 0;
	cr_assert_eq(rc, RF_OK);
	cr_assert(memcmp(a.data, g_src[1], 64) != 0, "the held slot was overwritten");
	rf_pipeline_destroy(p);
}

/* ---- the wait policy ------------------------------------------------------------------------------ */

Test(keyed, wait_policy_settings)
{
	static const char *good[] = {"auto", "sleep", "spin:0", "spin:50", "spin:10000000"};
	static const char *bad[] = {"", "spin", "spin:", "spin:-1", "spin:x", "spin:10000001", "busy", "Sleep"};
	rf_pipeline_params pp = {0};
	pp.slot_bytes = 64;
	pp.backend = test_backend();
	rf_pipeline *p;
	for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
		pp.wait = good[i];
		cr_assert_eq(rf_pipeline_create(&pp, &p), RF_OK, "%s: %s", good[i], rf_errmsg());
		const void *srcs[2] = {g_src[0], g_src[1]};
		size_t sizes[2] = {64, 64};
		cr_assert_eq(rf_pipeline_run(p, 2, srcs, sizes, count_cb, &(size_t){0}), RF_OK);
		rf_pipeline_destroy(p);
	}
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		pp.wait = bad[i];
		cr_assert_eq(rf_pipeline_create(&pp, &p), RF_EINVAL, "\"%s\"", bad[i]);
	}
	pp.wait = NULL;
	setenv("RINGFETCH_WAIT", "spin:abc", 1);
	cr_assert_eq(rf_pipeline_create(&pp, &p), RF_ECONFIG);
	cr_assert(strstr(rf_errmsg(), "RINGFETCH_WAIT") != NULL, "%s", rf_errmsg());
	pp.wait = "sleep"; /* an explicit value wins without reading the variable */
	cr_assert_eq(rf_pipeline_create(&pp, &p), RF_OK);
	rf_pipeline_destroy(p);
	pp.wait = NULL;
	setenv("RINGFETCH_WAIT", "spin:20", 1);
	cr_assert_eq(rf_pipeline_create(&pp, &p), RF_OK);
	rf_pipeline_destroy(p);
	unsetenv("RINGFETCH_WAIT");
	char path[] = "/tmp/rf_keyed_cfg_XXXXXX";
	int fd = mkstemp(path);
	cr_assert_geq(fd, 0);
	FILE *f = fdopen(fd, "w");
	fprintf(f, "[ringfetch]\nwait = nap\n");
	fclose(f);
	setenv("RINGFETCH_CONFIG", path, 1);
	cr_assert_eq(rf_pipeline_create(&pp, &p), RF_ECONFIG);
	cr_assert(strstr(rf_errmsg(), ":2") != NULL, "file:line: %s", rf_errmsg());
	f = fopen(path, "w");
	fprintf(f, "[ringfetch]\nwait = spin:100\n");
	fclose(f);
	cr_assert_eq(rf_pipeline_create(&pp, &p), RF_OK, "%s", rf_errmsg());
	rf_pipeline_destroy(p);
	unsetenv("RINGFETCH_CONFIG");
	unlink(path);
}

/* A spinning wait policy spins after work, never right after create: an idle new pipeline costs no CPU
 * (it used to burn its lanes' whole budget — 2 s of CPU per 2 s idle at spin:10000000). */
static double cpu_seconds(void)
{
	struct timespec t;
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
	return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

Test(keyed, idle_pipeline_does_not_spin_after_create)
{
	rf_pipeline_params pp = {0};
	pp.depth = 3;
	pp.slot_bytes = 64;
	pp.copy_queues = 2;
	pp.backend = test_backend();
	pp.wait = "spin:10000000";
	rf_pipeline *p;
	cr_assert_eq(rf_pipeline_create(&pp, &p), RF_OK, "%s", rf_errmsg());
	double c0 = cpu_seconds();
	struct timespec d = {0, 300 * 1000000};
	nanosleep(&d, NULL);
	double used = cpu_seconds() - c0;
	rf_pipeline_destroy(p);
	cr_assert_lt(used, 0.05, "%.3f s of CPU in 0.3 s idle", used);
}

/* ---- hints on threads: held back, overtaken, late, withdrawn (a gate holds the lane worker) -------- */

static void nap_us(long us)
{
	struct timespec d = {us / 1000000, (us % 1000000) * 1000};
	nanosleep(&d, NULL);
}

static atomic_int g_gate; /* 0: the lane worker waits before each hint copy */
static atomic_int g_at_gate;
static atomic_int g_gate_phase; /* where the gate stands: 0 before the claim, 1 after (copy started) */

static void gate_hook(int started)
{
	if (started != atomic_load(&g_gate_phase))
		return;
	atomic_fetch_add(&g_at_gate, 1);
	while (!atomic_load(&g_gate)) /* until the test opens it, however long the machine keeps it away */
		nap_us(500);
	atomic_fetch_sub(&g_at_gate, 1);
}

static rf_pipeline *mk_gated_hints(unsigned depth, uint64_t hint_bytes)
{
	if (strcmp(test_backend(), "threads") != 0)
		cr_skip_test("hint lanes exist on threads only (cpu copies hints inline)");
	atomic_store(&g_gate, 0);
	atomic_store(&g_gate_phase, 0);
	rf__test_hooks.keyed_before_copy = gate_hook;
	return mk_hints(depth, hint_bytes); /* one copy lane: every hint queues on it */
}

static rf_pipeline *mk_gated(unsigned depth)
{
	return mk_gated_hints(depth, 0);
}

static void *open_gate_later(void *arg);

static void open_gate(rf_pipeline *p)
{
	atomic_store(&g_gate, 1);
	rf_pipeline_destroy(p);
	rf__test_hooks.keyed_before_copy = NULL;
}

Test(keyed, held_back_hint_is_overtaken_by_acquire)
{
	rf_pipeline *p = mk_gated(8);
	for (uint64_t k = 1; k <= 4; k++) /* 2 go to the lane (RF__KEYED_HINTS_PER_LANE), 2 are held back */
		cr_assert_eq(rf_pipeline_prefetch(p, k, g_src[k], 300, 0), RF_OK);
	for (uint64_t k = 1; k <= 4; k++)
		cr_assert_eq(state_of(p, k, NULL), RF_KEY_COPYING, "key %llu", (unsigned long long)k);
	rf_keyed_stats s0 = stats(p);
	cr_assert_eq(s0.prefetches, 4);
	cr_assert_eq(s0.bytes_copied, 0, "two hint copies queued, not started (gated); two held back");
	rf_block b = acq(p, 4, 300); /* held back: the acquire copies it itself, at once */
	cr_assert_eq(b.slot, 3);
	rf_keyed_stats s1 = stats(p);
	cr_assert(s1.hits == 0 && s1.dropped == 1 && s1.bytes_copied == 300, "not a hit; the hint is dropped");
	rf_block c = acq(p, 9, 300); /* a miss never waits behind the gated hint copies */
	cr_assert_eq(c.slot, 4);
	rel(p, &b);
	rel(p, &c);
	open_gate(p);
}

/* A hint queued but not started, then withdrawn (evict), never took bytes_copied up and down: a
 * counter read from another thread must never go down. */
Test(keyed, withdrawn_hint_never_moves_bytes_copied_down)
{
	rf_pipeline *p = mk_gated(8);
	cr_assert_eq(rf_pipeline_prefetch(p, 1, g_src[1], 300, 0), RF_OK);
	cr_assert_eq(rf_pipeline_prefetch(p, 2, g_src[2], 300, 0), RF_OK);
	rf_keyed_stats s0 = stats(p);
	cr_assert_eq(rf_pipeline_evict(p, 2), RF_OK); /* queued behind the gated one: withdrawn */
	rf_keyed_stats s1 = stats(p);
	cr_assert_geq(s1.bytes_copied, s0.bytes_copied, "bytes_copied went from %llu down to %llu",
		      (unsigned long long)s0.bytes_copied, (unsigned long long)s1.bytes_copied);
	cr_assert_eq(s1.dropped, s0.dropped + 1, "the withdrawn hint counts as dropped");
	open_gate(p);
}

Test(keyed, late_hit_waits_for_its_started_hint)
{
	rf_pipeline *p = mk_gated(4);
	atomic_store(&g_gate_phase, 1); /* the copy has started when it stalls */
	cr_assert_eq(rf_pipeline_prefetch(p, 1, g_src[1], 300, 0), RF_OK);
	while (atomic_load(&g_at_gate) == 0)
		nap_us(100);
	pthread_t th;
	pthread_create(&th, NULL, open_gate_later, NULL);
	rf_block b = acq(p, 1, 300); /* waits for the started copy */
	pthread_join(th, NULL);
	rf_keyed_stats s = stats(p);
	cr_assert(s.hits == 1 && s.acquires == 1 && s.late == 1 && s.bytes_copied == 300, "a late hit");
	rel(p, &b);
	open_gate(p);
}

Test(keyed, hint_not_started_is_overtaken_by_acquire)
{
	rf_pipeline *p = mk_gated(4);
	cr_assert_eq(rf_pipeline_prefetch(p, 1, g_src[1], 300, 0), RF_OK); /* stalls before it starts */
	while (atomic_load(&g_at_gate) == 0)
		nap_us(100);
	time_t t0 = time(NULL);
	rf_block b = acq(p, 1, 300); /* withdraws it and copies itself: no wait */
	cr_assert_lt(time(NULL) - t0, 5, "the acquire waited for a hint copy that had not started");
	rf_keyed_stats s = stats(p);
	cr_assert(s.hits == 0 && s.acquires == 1 && s.dropped == 1 && s.bytes_copied == 300,
		  "not a hit; the hint counts as dropped (overtaken) and its bytes, never copied, do not count");
	cr_assert_eq(b.slot, 0);
	rel(p, &b);
	open_gate(p);
}

Test(keyed, pending_hint_of_a_chosen_slot_is_withdrawn)
{
	rf_pipeline *p = mk_gated(1);
	cr_assert_eq(rf_pipeline_prefetch(p, 1, g_src[1], 300, 0), RF_OK); /* at the gate, not started */
	while (atomic_load(&g_at_gate) == 0)
		nap_us(100);
	time_t t0 = time(NULL);
	rf_block b = acq(p, 2, 300); /* takes the only slot: key 1's copy is withdrawn, not waited for */
	cr_assert_lt(time(NULL) - t0, 5, "the acquire waited for a hint copy that had not started");
	rf_keyed_stats s = stats(p);
	cr_assert(s.wasted == 0 && s.dropped == 1 && s.bytes_copied == 300,
		  "a hint withdrawn before its copy started counts as held back: dropped, its bytes not counted");
	cr_assert_eq(state_of(p, 1, NULL), RF_KEY_ABSENT);
	atomic_store(&g_gate, 1);
	nap_us(20000); /* the worker skips the withdrawn copy: the slot must still hold key 2 */
	cr_assert(memcmp(b.data, g_src[2], 300) == 0, "a withdrawn copy wrote the slot");
	rel(p, &b);
	open_gate(p);
}

static void *open_gate_later(void *arg)
{
	(void)arg;
	nap_us(100000);
	atomic_store(&g_gate, 1);
	return NULL;
}

/* A started hint copy into a slot, then a pending one into the same slot that gets withdrawn: the next
 * copy into the slot must still wait for the started one (tests/race_keyed.c found it did not). */
Test(keyed, withdrawn_hint_leaves_the_started_copy_waited_for)
{
	rf_pipeline *p = mk_gated(1);
	atomic_store(&g_gate_phase, 1);
	cr_assert_eq(rf_pipeline_prefetch(p, 1, g_src[1], 300, 0), RF_OK);
	while (atomic_load(&g_at_gate) == 0) /* key 1's copy has started, and stalls */
		nap_us(100);
	cr_assert_eq(rf_pipeline_prefetch(p, 2, g_src[2], 300, 0), RF_OK); /* same slot, queued behind it */
	pthread_t th;
	pthread_create(&th, NULL, open_gate_later, NULL);
	rf_block b = acq(p, 3, 300); /* withdraws key 2's copy; must wait for key 1's */
	pthread_join(th, NULL);
	nap_us(20000);
	cr_assert(memcmp(b.data, g_src[3], 300) == 0, "a started hint copy overwrote the acquired block");
	rel(p, &b);
	open_gate(p);
}

/* Negative control of the oracle's WAW check: a demand copy that does not wait for the started hint
 * copy into its slot (the hook) fills the slot while the hint does; the oracle finds it in the copies'
 * slices and the next run is refused. With the wait (no hook), the same steps pass. */
Test(keyed, oracle_catches_two_copies_filling_one_slot_at_once)
{
	for (int broken = 1; broken >= 0; broken--) {
		rf_pipeline *p = mk_gated(1);
		atomic_store(&g_gate_phase, 1);
		cr_assert_eq(rf_pipeline_prefetch(p, 1, g_src[1], 300, 0), RF_OK);
		while (atomic_load(&g_at_gate) == 0) /* key 1's copy has started, and stalls */
			nap_us(100);
		pthread_t th;
		if (!broken) /* the acquire waits for key 1's copy: let it go on */
			pthread_create(&th, NULL, open_gate_later, NULL);
		rf__test_hooks.keyed_skip_waw = broken;
		rf_block b = acq(p, 2, 300); /* the only slot */
		rf__test_hooks.keyed_skip_waw = 0;
		rel(p, &b);
		if (!broken)
			pthread_join(th, NULL);
		atomic_store(&g_gate, 1);
		const void *srcs[1] = {g_src[3]};
		size_t sizes[1] = {300}, n = 0;
		int rc = rf_pipeline_run(p, 1, srcs, sizes, count_cb, &n);
		if (broken) {
			cr_assert_eq(rc, RF_EHAZARD, "the oracle must refuse it (got %d: %s)", rc, rf_errmsg());
			cr_assert(strstr(rf_errmsg(), "keyed oracle: WAW") != NULL, "%s", rf_errmsg());
			rc = rf_pipeline_run(p, 1, srcs, sizes, count_cb, &n);
			cr_assert_eq(rc, RF_EHAZARD, "a hazard found stays found (got %d: %s)", rc, rf_errmsg());
		} else {
			cr_assert_eq(rc, RF_OK, "%s", rf_errmsg());
		}
		open_gate(p);
	}
}

/* evict returns only when no copy reads the source: a started hint copy is waited for. */
Test(keyed, evict_waits_for_a_started_copy)
{
	rf_pipeline *p = mk_gated(2);
	atomic_store(&g_gate_phase, 1);
	cr_assert_eq(rf_pipeline_prefetch(p, 1, g_src[1], 300, 0), RF_OK);
	while (atomic_load(&g_at_gate) == 0)
		nap_us(100);
	pthread_t th;
	pthread_create(&th, NULL, open_gate_later, NULL);
	cr_assert_eq(rf_pipeline_evict(p, 1), RF_OK);
	cr_assert_eq(atomic_load(&g_gate), 1, "evict returned while the copy was still stalled");
	cr_assert_eq(atomic_load(&g_at_gate), 0);
	pthread_join(th, NULL);
	cr_assert_eq(state_of(p, 1, NULL), RF_KEY_ABSENT);
	cr_assert_eq(stats(p).wasted, 1);
	open_gate(p);
}

/* An idle pipeline stops burning CPU once its wait budget is spent (auto: 2 ms). */
Test(keyed, idle_pipeline_burns_no_cpu)
{
	rf_pipeline *p = mk(2);
	const void *srcs[2] = {g_src[0], g_src[1]};
	size_t sizes[2] = {64, 64};
	for (int i = 0; i < 100; i++) {
		cr_assert_eq(rf_pipeline_run(p, 2, srcs, sizes, count_cb, &(size_t){0}), RF_OK);
		cr_assert_eq(rf_pipeline_prefetch(p, (uint64_t)i % 8, g_src[i % 8], 64, 0), RF_OK);
	}
	nap_us(100000); /* far past the spin budget */
	struct timespec a, b;
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &a);
	nap_us(300000);
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &b);
	long long ns = (b.tv_sec - a.tv_sec) * 1000000000LL + (b.tv_nsec - a.tv_nsec);
	cr_assert_lt(ns, 30000000LL, "%lld ns of CPU in 300 ms of idleness", ns);
	rf_pipeline_destroy(p);
}

/* ---- exclusion between runs and keyed calls, from two threads ----------------------------------- */

/* Thread A acquires and checks large keys while thread B runs the same pipeline: each call returns
 * RF_OK or RF_EBUSY, and a held slot always holds its own key's bytes (a run that started while an
 * acquire copied used to overwrite it). */
#define RACE_BYTES (1u << 20)
static unsigned char g_race_a[RACE_BYTES], g_race_b[4][RACE_BYTES];
static atomic_int g_race_stop, g_race_runs;

typedef struct race_arg {
	rf_pipeline *p;
	long ok, busy, wrong, other;
} race_arg;

static int nop_compute(void *u, const rf_block *b)
{
	(void)u;
	(void)b;
	return 0;
}

static void *race_runner(void *arg)
{
	race_arg *a = arg;
	const void *srcs[4] = {g_race_b[0], g_race_b[1], g_race_b[2], g_race_b[3]};
	size_t sizes[4] = {RACE_BYTES, RACE_BYTES, RACE_BYTES, RACE_BYTES};
	while (!atomic_load(&g_race_stop)) {
		int rc = rf_pipeline_run(a->p, 4, srcs, sizes, nop_compute, NULL);
		a->ok += rc == RF_OK;
		atomic_fetch_add(&g_race_runs, rc == RF_OK);
		a->busy += rc == RF_EBUSY;
		a->other += rc != RF_OK && rc != RF_EBUSY;
	}
	return NULL;
}

Test(keyed, a_run_meeting_a_keyed_call_is_refused)
{
	memset(g_race_a, 0xa5, sizeof g_race_a);
	for (int i = 0; i < 4; i++)
		memset(g_race_b[i], 0x10 + i, sizeof g_race_b[i]);
	rf_pipeline_params pp = {0};
	pp.depth = 4;
	pp.slot_bytes = RACE_BYTES;
	pp.backend = test_backend();
	rf_pipeline *p = NULL;
	cr_assert_eq(rf_pipeline_create(&pp, &p), RF_OK, "%s", rf_errmsg());
	race_arg b = {p, 0, 0, 0, 0}, a = {p, 0, 0, 0, 0};
	atomic_store(&g_race_stop, 0);
	atomic_store(&g_race_runs, 0);
	pthread_t th;
	pthread_create(&th, NULL, race_runner, &b);
	time_t t0 = time(NULL);
	for (int i = 0; (a.ok < 200 || atomic_load(&g_race_runs) < 20) && time(NULL) - t0 < 20; i++) {
		rf_block blk;
		int rc = rf_pipeline_acquire(p, (uint64_t)i, g_race_a, RACE_BYTES, NULL, 0, &blk);
		if (rc == RF_EBUSY) {
			a.busy++;
			nap_us(20);
			continue;
		}
		if (rc != RF_OK) {
			a.other++;
			continue;
		}
		a.ok++;
		a.wrong += memcmp(blk.data, g_race_a, RACE_BYTES) != 0;
		while ((rc = rf_pipeline_release(p, &blk)) == RF_EBUSY)
			;
		a.other += rc != RF_OK;
		(void)rf_pipeline_evict(p, (uint64_t)i);
	}
	atomic_store(&g_race_stop, 1);
	pthread_join(th, NULL);
	rf_pipeline_destroy(p);
	cr_assert_eq(a.wrong, 0, "%ld of %ld held slots held the run's bytes", a.wrong, a.ok);
	cr_assert_eq(a.other + b.other, 0, "calls failed with codes other than RF_EBUSY");
	cr_assert(a.ok > 0 && b.ok > 0, "both sides got through sometimes (acquires %ld, runs %ld)", a.ok, b.ok);
}

/* bytes_copied read from another thread never goes down, whatever the hints do (withdrawn, overtaken). */
static atomic_int g_mono_stop;
static void *mono_watch(void *arg)
{
	rf_pipeline *p = arg;
	uint64_t last = 0, *bad = calloc(1, sizeof *bad);
	while (!atomic_load(&g_mono_stop)) {
		rf_keyed_stats s;
		rf_pipeline_keyed_stats(p, &s);
		*bad += s.bytes_copied < last;
		last = s.bytes_copied;
	}
	return bad;
}

Test(keyed, stats_never_go_down)
{
	rf_pipeline *p = mk(4);
	atomic_store(&g_mono_stop, 0);
	pthread_t th;
	pthread_create(&th, NULL, mono_watch, p);
	for (int i = 0; i < 20000; i++) {
		uint64_t k = (uint64_t)i % NKEYS;
		(void)rf_pipeline_prefetch(p, k, g_src[k], 42 + k, 0);
		(void)rf_pipeline_prefetch(p, (k + 1) % NKEYS, g_src[(k + 1) % NKEYS], 42 + (k + 1) % NKEYS, 0);
		rf_block b;
		if (rf_pipeline_acquire(p, k, g_src[k], 42 + k, NULL, 0, &b) == RF_OK)
			rf_pipeline_release(p, &b);
		if (i % 7 == 0)
			rf_pipeline_evict(p, (k + 1) % NKEYS);
	}
	atomic_store(&g_mono_stop, 1);
	uint64_t *bad;
	pthread_join(th, (void **)&bad);
	rf_pipeline_destroy(p);
	cr_assert_eq(*bad, 0, "bytes_copied went down %llu times", (unsigned long long)*bad);
	free(bad);
}

Test(keyed, a_source_inside_the_ring_is_refused)
{
	rf_pipeline *p = mk(4);
	rf_block b = acq(p, 1, 100);
	rf_block c;
	const unsigned char *in = b.data;
	cr_assert_eq(rf_pipeline_acquire(p, 2, in + 10, 50, NULL, 0, &c), RF_EINVAL);
	cr_assert(strstr(rf_errmsg(), "ring") != NULL, "%s", rf_errmsg());
	cr_assert_eq(rf_pipeline_prefetch(p, 3, in, 10, 0), RF_EINVAL);
	rel(p, &b);
	rf_pipeline_destroy(p);
}

/* ---- hints: slot choice, their bound, their credit, their withdrawal ------------------------------ */

/* Acquire and release key (a miss or a hit), so that it is an acquired block, not held. */
static void touch(rf_pipeline *p, uint64_t key)
{
	rf_block b = acq(p, key, 300);
	rel(p, &b);
}

static void hint(rf_pipeline *p, uint64_t key)
{
	cr_assert_eq(rf_pipeline_prefetch(p, key, g_src[key], 300, 0), RF_OK, "prefetch %llu: %s",
		     (unsigned long long)key, rf_errmsg());
	wait_landed(p, key);
}

/* How many of n wrong hints (keys first.., bytes each, never acquired) a fresh pipeline accepts: its
 * hints' credit starts at hint_bytes. */
static unsigned accepted_hints(rf_pipeline *p, uint64_t first, size_t bytes, unsigned n)
{
	for (uint64_t k = first; k < first + n; k++) {
		cr_assert_eq(rf_pipeline_prefetch(p, k, g_src[k], bytes, 0), RF_OK, "%s", rf_errmsg());
		wait_landed(p, k);
	}
	rf_keyed_stats s = stats(p);
	cr_assert_eq(s.bytes_copied, (s.prefetches - s.dropped) * bytes);
	return (unsigned)(s.prefetches - s.dropped);
}

static unsigned slot_of(const rf_pipeline *p, uint64_t key)
{
	unsigned slot = 99;
	cr_assert_neq(state_of(p, key, &slot), RF_KEY_ABSENT, "key %llu is absent", (unsigned long long)key);
	return slot;
}

Test(keyed, a_miss_evicts_an_unacquired_hint_before_any_acquired_block)
{
	rf_pipeline *p = mk_hints(4, SB); /* bounded: room for 13 hints of 300 bytes */
	touch(p, 1), touch(p, 2), touch(p, 3); /* slots 0, 1, 2; key 1 is the least recently used */
	hint(p, 10);                           /* slot 3, the empty one */
	cr_assert_eq(slot_of(p, 10), 3);
	touch(p, 1), touch(p, 2), touch(p, 3); /* every acquired block used after the hint */
	rf_block b = acq(p, 11, 300);          /* a miss: the hint's slot, not key 1's */
	cr_assert_eq(b.slot, 3, "the miss took slot %u, not the unacquired hint's", b.slot);
	cr_assert_eq(state_of(p, 10, NULL), RF_KEY_ABSENT);
	for (uint64_t k = 1; k <= 3; k++)
		cr_assert_neq(state_of(p, k, NULL), RF_KEY_ABSENT, "acquired key %llu was evicted", (unsigned long long)k);
	cr_assert_eq(stats(p).wasted, 1, "the hint copied, never acquired: wasted");
	rel(p, &b);
	/* A hint within the bound takes the least recently used acquired block (key 1), not another hint. */
	hint(p, 12);
	cr_assert_eq(slot_of(p, 12), 0);
	hint(p, 13);
	cr_assert_eq(slot_of(p, 13), 1, "a second hint displaced the first while both fit");
	cr_assert_neq(state_of(p, 12, NULL), RF_KEY_ABSENT);
	rf_pipeline_destroy(p);
}

Test(keyed, a_miss_passes_over_a_hint_whose_copy_is_being_made)
{
	rf_pipeline *p = mk_gated_hints(3, SB); /* bounded (unbounded, slot 0 is the LRU slot anyway) */
	touch(p, 1), touch(p, 2); /* slots 0, 1 (acquires copy inline: not gated) */
	atomic_store(&g_gate_phase, 1);
	cr_assert_eq(rf_pipeline_prefetch(p, 10, g_src[10], 300, 0), RF_OK); /* slot 2, started, stalled */
	while (atomic_load(&g_at_gate) == 0)
		nap_us(100);
	rf_block b = acq(p, 11, 300); /* the hint is being copied: waiting for it would be waiting behind it */
	cr_assert_eq(b.slot, 0, "the miss took slot %u", b.slot);
	cr_assert_eq(atomic_load(&g_at_gate), 1, "the miss returned only once the hint copy went on");
	cr_assert_eq(state_of(p, 10, NULL), RF_KEY_COPYING);
	rel(p, &b);
	open_gate(p);
}

static void miss_never_waits_behind_queued_hints(uint64_t hint_bytes)
{
	rf_pipeline *p = mk_gated_hints(8, hint_bytes);
	for (uint64_t k = 1; k <= 6; k++) /* queued on the only lane (and held back), none started */
		cr_assert_eq(rf_pipeline_prefetch(p, k, g_src[k], 300, 0), RF_OK);
	time_t t0 = time(NULL);
	rf_block b = acq(p, 20, 300);
	cr_assert_lt(time(NULL) - t0, 5, "the miss waited for the gated hints");
	cr_assert_eq(atomic_load(&g_gate), 0);
	rf_block c = acq(p, 6, 300); /* a hinted key not started yet: overtaken, copied here */
	cr_assert_lt(time(NULL) - t0, 5, "the acquire of a hinted key waited for the gated hints");
	rf_keyed_stats s = stats(p);
	cr_assert(s.hits == 0 && s.dropped == 1, "the overtaken hint is dropped");
	rel(p, &b);
	rel(p, &c);
	open_gate(p);
}

Test(keyed, a_miss_never_waits_behind_queued_hints) { miss_never_waits_behind_queued_hints(0); }
Test(keyed, a_miss_never_waits_behind_queued_hints_bounded) { miss_never_waits_behind_queued_hints(8 * SB); }

Test(keyed, hints_outstanding_stay_within_hint_bytes)
{
	rf_pipeline *p = mk_hints(64, 600); /* two hints of 300 bytes */
	hint(p, 10);
	hint(p, 11); /* the credit is spent too: earn it back with 34 misses (34 * 300 / 32 >= 300) */
	for (uint64_t k = 20; k < 54; k++)
		touch(p, k);
	hint(p, 12); /* over the bound: takes the oldest hint's slot although slots are empty */
	cr_assert_eq(state_of(p, 10, NULL), RF_KEY_ABSENT, "three hints outstanding, bound two");
	cr_assert_eq(slot_of(p, 12), 0);
	cr_assert_neq(state_of(p, 11, NULL), RF_KEY_ABSENT);
	rf_keyed_stats s = stats(p);
	cr_assert(s.prefetches == 3 && s.wasted == 1 && s.dropped == 0);
	touch(p, 11); /* acquired: no longer outstanding, room for another */
	hint(p, 13);
	cr_assert_neq(state_of(p, 12, NULL), RF_KEY_ABSENT);
	cr_assert_neq(state_of(p, 13, NULL), RF_KEY_ABSENT);
	rf_pipeline_destroy(p);
	/* A bound under one hint: every hint is dropped, nothing copied, no slot taken. */
	p = mk_hints(4, 100);
	cr_assert_eq(rf_pipeline_prefetch(p, 1, g_src[1], 300, 0), RF_OK);
	s = stats(p);
	cr_assert(s.prefetches == 1 && s.dropped == 1 && s.bytes_copied == 0);
	cr_assert_eq(state_of(p, 1, NULL), RF_KEY_ABSENT);
	rf_pipeline_destroy(p);
	/* An eighth of the slots (what a loop whose hints may be wrong might set). */
	p = mk_hints(16, 2 * SB);
	cr_assert_eq(accepted_hints(p, 1, SB, 5), 2, "16 slots: two of SB bytes");
	rf_pipeline_destroy(p);
	p = mk_hints(2, 1ull << 40); /* more than the slots: all of them */
	cr_assert_eq(accepted_hints(p, 1, SB, 5), 2);
	rf_pipeline_destroy(p);
	/* The default: no bound, every hint accepted (each takes the least recently used slot). */
	p = mk(4);
	cr_assert_eq(accepted_hints(p, 1, SB, 5), 5, "unbounded: no hint dropped");
	rf_pipeline_destroy(p);
}

Test(keyed, wasted_hints_run_out_of_credit_acquired_ones_do_not)
{
	rf_pipeline *p = mk_hints(16, 600);
	for (uint64_t k = 1; k <= 20; k++) /* all wrong: never acquired */
		hint(p, k);
	rf_keyed_stats s = stats(p);
	cr_assert_eq(s.prefetches, 20);
	cr_assert_eq(s.bytes_copied, 600, "wrong hints read %llu bytes, credit 600",
		     (unsigned long long)s.bytes_copied);
	cr_assert_eq(s.dropped, 18);
	/* Demand copies earn 1/32 of their bytes: 34 misses of 300 bytes earn 34 * 9 = 306, one hint. */
	for (uint64_t k = 30; k < 63; k++)
		touch(p, k);
	cr_assert_eq(rf_pipeline_prefetch(p, 21, g_src[21], 300, 0), RF_OK);
	cr_assert_eq(stats(p).dropped, 19, "33 misses (297 bytes of credit) allow no hint");
	touch(p, 63);
	hint(p, 22);
	s = stats(p);
	cr_assert(s.dropped == 19 && s.bytes_copied == 600 + 34 * 300 + 300, "the 34th miss earned one hint");
	rf_pipeline_destroy(p);
	/* Right hints give their credit back when acquired: never dropped. */
	p = mk_hints(16, 600);
	for (uint64_t k = 1; k <= 40; k++) {
		hint(p, k);
		touch(p, k);
	}
	s = stats(p);
	cr_assert(s.prefetches == 40 && s.dropped == 0 && s.hits == 40, "dropped %llu, hits %llu",
		  (unsigned long long)s.dropped, (unsigned long long)s.hits);
	rf_pipeline_destroy(p);
}

/* Both rules: unbounded, "first in line" is the LRU list's head; bounded, the hint list's. */
static void unprefetch_of_a_landed_hint(uint64_t hint_bytes)
{
	rf_pipeline *p = mk_hints(3, hint_bytes);
	touch(p, 5); /* slot 0 */
	hint(p, 1);  /* slot 1 */
	hint(p, 2);  /* slot 2 */
	cr_assert_eq(rf_pipeline_unprefetch(p, 2), RF_OK);
	cr_assert_eq(state_of(p, 2, NULL), RF_KEY_READY, "a hint that landed stays");
	rf_block b = acq(p, 9, 300); /* takes the withdrawn hint's slot, not the older hint's */
	cr_assert_eq(b.slot, 2);
	cr_assert_eq(state_of(p, 2, NULL), RF_KEY_ABSENT);
	cr_assert_neq(state_of(p, 1, NULL), RF_KEY_ABSENT);
	rf_keyed_stats s = stats(p);
	cr_assert(s.wasted == 1 && s.dropped == 0);
	/* Absent, held, or acquired since its hint: nothing changes. */
	rf_keyed_stats s0 = stats(p);
	cr_assert_eq(rf_pipeline_unprefetch(p, 40), RF_OK);
	cr_assert_eq(rf_pipeline_unprefetch(p, 9), RF_OK);
	cr_assert_eq(rf_pipeline_unprefetch(p, 5), RF_OK);
	cr_assert(same_stats(s0, stats(p)));
	cr_assert_neq(state_of(p, 9, NULL), RF_KEY_ABSENT);
	cr_assert_neq(state_of(p, 5, NULL), RF_KEY_ABSENT);
	rel(p, &b);
	cr_assert_eq(rf_pipeline_unprefetch(NULL, 1), RF_EINVAL);
	rf_pipeline_destroy(p);
}

Test(keyed, unprefetch_of_a_landed_hint_puts_it_first_in_line) { unprefetch_of_a_landed_hint(0); }
Test(keyed, unprefetch_of_a_landed_hint_puts_it_first_in_line_bounded) { unprefetch_of_a_landed_hint(3 * SB); }

static void unprefetch_not_started(uint64_t hint_bytes)
{
	rf_pipeline *p = mk_gated_hints(4, hint_bytes);
	cr_assert_eq(rf_pipeline_prefetch(p, 1, g_src[1], 300, 0), RF_OK); /* at the gate, not started */
	cr_assert_eq(rf_pipeline_prefetch(p, 2, g_src[2], 300, 0), RF_OK); /* queued behind it */
	while (atomic_load(&g_at_gate) == 0)
		nap_us(100);
	cr_assert_eq(rf_pipeline_unprefetch(p, 2), RF_OK);
	cr_assert_eq(rf_pipeline_unprefetch(p, 1), RF_OK);
	cr_assert_eq(state_of(p, 1, NULL), RF_KEY_ABSENT);
	cr_assert_eq(state_of(p, 2, NULL), RF_KEY_ABSENT);
	rf_keyed_stats s = stats(p);
	cr_assert(s.dropped == 2 && s.wasted == 0 && s.bytes_copied == 0, "withdrawn before the copy: dropped");
	rf_block b = acq(p, 3, 300); /* slot 0 again: the withdrawn copy must never write it */
	cr_assert_eq(b.slot, 0);
	atomic_store(&g_gate, 1);
	nap_us(20000);
	cr_assert(memcmp(b.data, g_src[3], 300) == 0, "a withdrawn hint copy wrote the slot");
	rel(p, &b);
	open_gate(p);
}

Test(keyed, unprefetch_drops_a_hint_whose_copy_has_not_started) { unprefetch_not_started(0); }
Test(keyed, unprefetch_drops_a_hint_whose_copy_has_not_started_bounded) { unprefetch_not_started(4 * SB); }

static void unprefetch_started(uint64_t hint_bytes)
{
	rf_pipeline *p = mk_gated_hints(4, hint_bytes);
	atomic_store(&g_gate_phase, 1);
	cr_assert_eq(rf_pipeline_prefetch(p, 1, g_src[1], 300, 0), RF_OK);
	while (atomic_load(&g_at_gate) == 0)
		nap_us(100);
	cr_assert_eq(rf_pipeline_unprefetch(p, 1), RF_OK); /* never waits */
	cr_assert_eq(state_of(p, 1, NULL), RF_KEY_COPYING);
	atomic_store(&g_gate, 1);
	wait_landed(p, 1);
	rf_keyed_stats s = stats(p);
	cr_assert(s.dropped == 0 && s.bytes_copied == 300);
	cr_assert_eq(rf_pipeline_evict(p, 1), RF_OK);
	cr_assert_eq(stats(p).wasted, 1);
	open_gate(p);
}

Test(keyed, unprefetch_of_a_started_hint_lets_it_land) { unprefetch_started(0); }
Test(keyed, unprefetch_of_a_started_hint_lets_it_land_bounded) { unprefetch_started(4 * SB); }

Test(keyed, hint_bytes_from_the_environment)
{
	setenv("RINGFETCH_HINT_BYTES", "1K", 1);
	rf_pipeline *p = mk(4);
	cr_assert_eq(accepted_hints(p, 1, 300, 6), 3, "1024 bytes: three hints of 300");
	rf_pipeline_destroy(p);
	p = mk_hints(4, 600); /* the params field wins */
	cr_assert_eq(accepted_hints(p, 1, 300, 6), 2);
	rf_pipeline_destroy(p);
	setenv("RINGFETCH_HINT_BYTES", "12Q", 1);
	rf_pipeline_params pp = {.depth = 4, .slot_bytes = SB, .backend = test_backend()};
	rf_pipeline *q = NULL;
	cr_assert_eq(rf_pipeline_create(&pp, &q), RF_ECONFIG);
	cr_assert(strstr(rf_errmsg(), "RINGFETCH_HINT_BYTES") != NULL, "%s", rf_errmsg());
	cr_assert_null(q);
	unsetenv("RINGFETCH_HINT_BYTES");
}

/* With hint_bytes unset (params, environment, file) hints follow the plain rule of <ringfetch.h>: a
 * prefetch of an absent key takes the lowest-numbered empty slot, else the least recently used slot
 * not held (hints and acquired keys alike, by last use), and no hint is dropped for want of credit. */
Test(keyed, unbounded_hints_follow_the_lru_rule)
{
	unsetenv("RINGFETCH_HINT_BYTES");
	rf_pipeline *p = mk(4);
	for (uint64_t k = 1; k <= 4; k++) /* not waited for: the slots are chosen now */
		cr_assert_eq(rf_pipeline_prefetch(p, k, g_src[k], 300, 0), RF_OK, "%s", rf_errmsg());
	for (uint64_t k = 1; k <= 4; k++) {
		unsigned slot = 99;
		rf_key_state st = state_of(p, k, &slot);
		cr_assert(st == RF_KEY_COPYING || st == RF_KEY_READY, "hint %llu: state %d", (unsigned long long)k, st);
		cr_assert_eq(slot, (unsigned)(k - 1), "hint %llu in slot %u", (unsigned long long)k, slot);
	}
	for (uint64_t k = 1; k <= 4; k++) { /* every hint acquired once landed: hits (one not started yet
					     * would be overtaken, a miss: <ringfetch.h>) */
		wait_landed(p, k);
		rf_block b = acq(p, k, 300);
		cr_assert_eq(b.slot, (unsigned)(k - 1));
		rel(p, &b);
	}
	rf_keyed_stats s = stats(p);
	cr_assert(s.prefetches == 4 && s.hits == 4 && s.dropped == 0 && s.wasted == 0 && s.bytes_copied == 4 * 300,
		  "prefetches %llu hits %llu dropped %llu", (unsigned long long)s.prefetches,
		  (unsigned long long)s.hits, (unsigned long long)s.dropped);
	/* The victim is the least recently used slot, whether a hint or an acquired key took it last. */
	hint(p, 10);                 /* LRU 1 2 3 4 (released in that order): key 1's slot 0 */
	cr_assert_eq(slot_of(p, 10), 0);
	cr_assert_eq(state_of(p, 1, NULL), RF_KEY_ABSENT);
	hint(p, 3);                  /* present: its use refreshed, LRU 2 4 10 3 */
	touch(p, 4);                 /* LRU 2 10 3 4 */
	hint(p, 11);                 /* key 2's slot 1 */
	cr_assert_eq(slot_of(p, 11), 1);
	rf_block b = acq(p, 12, 300); /* a miss: LRU 10 3 4 11: the unacquired hint 10's slot 0 */
	cr_assert_eq(b.slot, 0, "the miss took slot %u", b.slot);
	hint(p, 13);                 /* LRU 3 4 11 (12 held): key 3's slot 2 */
	cr_assert_eq(slot_of(p, 13), 2);
	touch(p, 11);                /* LRU 4 13 11 */
	rf_block c = acq(p, 14, 300); /* key 4's slot 3, an acquired key older than the hint 13 */
	cr_assert_eq(c.slot, 3);
	hint(p, 15);                 /* LRU 13 11: the hint 13's slot 2 */
	cr_assert_eq(slot_of(p, 15), 2);
	rel(p, &b);
	rel(p, &c);
	/* Wrong hints by the dozen: every one accepted, each copied, wasted as it is displaced. */
	rf_keyed_stats s0 = stats(p);
	for (uint64_t k = 20; k < 60; k++)
		hint(p, k);
	s = stats(p);
	cr_assert(s.prefetches - s0.prefetches == 40 && s.dropped == s0.dropped &&
			  s.bytes_copied - s0.bytes_copied == 40 * 300,
		  "unbounded hints dropped %llu", (unsigned long long)(s.dropped - s0.dropped));
	rf_pipeline_destroy(p);
}
