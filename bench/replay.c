/* bench/replay.c — the trace and the policies of bench/replay.h. Every policy keeps its unheld resident
 * blocks in one structure (held blocks are in none, as in the keyed cache, so a victim is never held):
 * lru and slru intrusive lists, lfu and min an indexed binary heap; each step is O(1) or O(log n), and
 * min's next acquires come from one backward pass, so a trace of millions of calls replays in seconds. */
#include "replay.h"

#include <ringfetch.h>

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NONE UINT32_MAX

/* ---- the trace ------------------------------------------------------------------------------------ */

struct rpl_slot {
	uint64_t key;
	uint32_t id;  /* the key's live id, NONE when it has none */
	uint32_t gen; /* t->gen when id was set: older entries are dead (a reset) */
	int used;
};

static uint64_t hash64(uint64_t k)
{
	k ^= k >> 33;
	k *= 0xff51afd7ed558ccdull;
	k ^= k >> 33;
	k *= 0xc4ceb9fe1a85ec53ull;
	return k ^ (k >> 33);
}

void rpl_trace_init(rpl_trace *t, unsigned slots)
{
	memset(t, 0, sizeof *t);
	t->slots = slots;
	t->gen = 1;
}

void rpl_trace_free(rpl_trace *t)
{
	free(t->ev);
	free(t->map);
	free(t->idbytes);
	free(t->idrefs);
	free(t->next);
	memset(t, 0, sizeof *t);
}

int rpl_trace_reserve(rpl_trace *t, size_t n)
{
	if (t->n + n <= t->cap)
		return 0;
	size_t cap = t->cap ? t->cap : 1024;
	while (cap < t->n + n)
		cap *= 2;
	rpl_event *e = realloc(t->ev, cap * sizeof *e);
	if (e == NULL)
		return -1;
	t->ev = e, t->cap = cap;
	return 0;
}

/* The map's entry for key (inserted when absent, used = 1), or NULL out of memory. */
static struct rpl_slot *map_get(rpl_trace *t, uint64_t key)
{
	if (2 * (t->mapused + 1) > t->mapcap) {
		size_t cap = t->mapcap ? 2 * t->mapcap : 1024;
		struct rpl_slot *m = calloc(cap, sizeof *m);
		if (m == NULL)
			return NULL;
		for (size_t i = 0; i < t->mapcap; i++)
			if (t->map[i].used) {
				size_t j = hash64(t->map[i].key) & (cap - 1);
				while (m[j].used)
					j = (j + 1) & (cap - 1);
				m[j] = t->map[i];
			}
		free(t->map);
		t->map = m, t->mapcap = cap;
	}
	size_t j = hash64(key) & (t->mapcap - 1);
	while (t->map[j].used && t->map[j].key != key)
		j = (j + 1) & (t->mapcap - 1);
	if (!t->map[j].used) {
		t->map[j] = (struct rpl_slot){key, NONE, 0, 1};
		t->mapused++, t->keys++;
	}
	return &t->map[j];
}

static uint32_t live_id(const rpl_trace *t, const struct rpl_slot *s)
{
	return s->gen == t->gen ? s->id : NONE;
}

static int new_id(rpl_trace *t, uint64_t bytes, uint32_t *id)
{
	if (t->nids == t->idcap) {
		size_t cap = t->idcap ? 2 * t->idcap : 1024;
		uint64_t *b = realloc(t->idbytes, cap * sizeof *b);
		if (b != NULL)
			t->idbytes = b;
		uint32_t *r = b ? realloc(t->idrefs, cap * sizeof *r) : NULL;
		if (r == NULL)
			return -1;
		t->idrefs = r, t->idcap = cap;
	}
	if (t->nids == NONE - 1)
		return -1;
	t->idbytes[t->nids] = bytes;
	t->idrefs[t->nids] = 0;
	*id = t->nids++;
	return 0;
}

static int bad(char *err, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int bad(char *err, size_t cap, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(err, cap, fmt, ap);
	va_end(ap);
	return -1;
}

int rpl_trace_add(rpl_trace *t, rpl_op op, uint64_t key, uint64_t bytes, char *err, size_t cap)
{
	free(t->next); /* the trace changes: min's index is stale */
	t->next = NULL;
	if (rpl_trace_reserve(t, 1) != 0)
		return bad(err, cap, "out of memory (key %llu)", (unsigned long long)key);
	if (op == RPL_RESET) {
		if (t->held > 0)
			return bad(err, cap, "a reset while %u key(s) are held", t->held);
		t->gen++;
		t->ev[t->n++] = (rpl_event){0, NONE, RPL_RESET};
		return 0;
	}
	struct rpl_slot *s = map_get(t, key);
	if (s == NULL)
		return bad(err, cap, "out of memory (key %llu)", (unsigned long long)key);
	uint32_t id = live_id(t, s);
	switch (op) {
	case RPL_ACQUIRE:
	case RPL_PREFETCH:
		if (bytes == 0)
			return bad(err, cap, "key %llu with 0 bytes", (unsigned long long)key);
		if (id != NONE && t->idbytes[id] != bytes && t->idrefs[id] > 0)
			return bad(err, cap, "key %llu with another byte count while it is held", (unsigned long long)key);
		if (id == NONE || t->idbytes[id] != bytes) {
			if (new_id(t, bytes, &id) != 0)
				return bad(err, cap, "out of memory (key %llu)", (unsigned long long)key);
			s->id = id, s->gen = t->gen;
		}
		if (op == RPL_ACQUIRE && t->idrefs[id]++ == 0 && ++t->held > t->peak_held)
			t->peak_held = t->held;
		break;
	case RPL_RELEASE:
		if (id == NONE || t->idrefs[id] == 0)
			return bad(err, cap, "a release of key %llu, which is not held", (unsigned long long)key);
		t->held -= --t->idrefs[id] == 0;
		break;
	case RPL_EVICT:
		if (id != NONE && t->idrefs[id] > 0)
			return bad(err, cap, "an evict of key %llu, which is held", (unsigned long long)key);
		if (id == NONE)
			return 0; /* absent: nothing changes */
		s->id = NONE;
		break;
	default:
		return bad(err, cap, "unknown operation (key %llu)", (unsigned long long)key);
	}
	t->ev[t->n++] = (rpl_event){bytes, id, (uint32_t)op};
	return 0;
}

/* The file's header and records: ringfetch.h, rf_keyed_trace_kind. */
typedef struct rec {
	uint64_t key, bytes, ns;
	uint32_t kind, slot;
} rec;

/* Record number nrec of the file: into the trace, and what it says ringfetch did into t->rec. */
static int add_record(rpl_trace *t, const rec *r, uint64_t nrec, const char *path, char *err, size_t cap)
{
	static const int ops[] = {-1, RPL_ACQUIRE, RPL_ACQUIRE, RPL_ACQUIRE, RPL_PREFETCH, RPL_PREFETCH, RPL_RELEASE,
				  RPL_EVICT, RPL_RESET};
	char why[160];
	if (r->kind == 0 || r->kind >= sizeof ops / sizeof ops[0]) {
		snprintf(err, cap, "%s: record %llu: unknown kind %u", path, (unsigned long long)nrec, r->kind);
		return -1;
	}
	if (rpl_trace_add(t, (rpl_op)ops[r->kind], r->key, r->bytes, why, sizeof why) != 0) {
		snprintf(err, cap, "%s: record %llu: %s", path, (unsigned long long)nrec, why);
		return -1;
	}
	rpl_recorded *x = &t->rec;
	int miss = r->kind == RF_KTRACE_ACQUIRE_MISS || r->kind == RF_KTRACE_ACQUIRE_HINTED;
	x->acquires += ops[r->kind] == RPL_ACQUIRE;
	x->hits += r->kind == RF_KTRACE_ACQUIRE_HIT;
	x->misses += miss;
	x->hinted += r->kind == RF_KTRACE_ACQUIRE_HINTED;
	x->miss_bytes += miss ? r->bytes : 0;
	if (r->kind == RF_KTRACE_PREFETCH)
		x->prefetches++, x->prefetch_bytes += r->bytes;
	t->duration_ns = r->ns;
	return 0;
}

/* The header: 0, or -1 with the reason. */
static int read_header(rpl_trace *t, FILE *f, const char *path, char *err, size_t cap)
{
	struct {
		char magic[8];
		uint32_t version, record_bytes, slots, flags;
		uint64_t slot_bytes;
	} h;
	if (fread(&h, sizeof h, 1, f) != 1 || memcmp(h.magic, "RFKTRACE", 8) != 0) {
		snprintf(err, cap, "%s: not a keyed trace (no RFKTRACE header)", path);
		return -1;
	}
	if (h.version != 1 || h.record_bytes != sizeof(rec)) {
		snprintf(err, cap, "%s: trace version %u with %u-byte records (this reader: version 1, 32 bytes; or "
				   "another byte order)", path, h.version, h.record_bytes);
		return -1;
	}
	t->slots = h.slots, t->slot_bytes = h.slot_bytes;
	return 0;
}

int rpl_trace_load(rpl_trace *t, const char *path, char *err, size_t cap)
{
	enum { NBUF = 4096 };
	rpl_trace_init(t, 0);
	FILE *f = fopen(path, "rb");
	if (f == NULL) {
		snprintf(err, cap, "%s: %s", path, strerror(errno));
		return -1;
	}
	int rc = read_header(t, f, path, err, cap);
	rec *buf = rc == 0 ? malloc(NBUF * sizeof *buf) : NULL;
	if (rc == 0 && buf == NULL)
		rc = -1, snprintf(err, cap, "%s: out of memory", path);
	uint64_t nrec = 0;
	size_t got;
	while (rc == 0 && (got = fread(buf, 1, NBUF * sizeof *buf, f)) > 0) {
		/* fread is short only at the end (or on an error, checked below): a partial last record, as a
		 * failed write can leave, is ignored and reported */
		t->trailing = got % sizeof(rec);
		for (size_t i = 0; i < got / sizeof(rec) && rc == 0; i++)
			rc = add_record(t, &buf[i], nrec++, path, err, cap);
	}
	if (rc == 0 && ferror(f))
		rc = -1, snprintf(err, cap, "%s: read error", path);
	free(buf);
	fclose(f);
	if (rc != 0)
		rpl_trace_free(t);
	return rc;
}

/* ---- the policies --------------------------------------------------------------------------------- */

typedef struct sim {
	const rpl_trace *t;
	rpl_policy pol;
	unsigned slots, nres, nprot, prot_cap;
	uint64_t now;       /* the event's index: recency */
	uint8_t *res, *seg; /* resident; slru: 1 = protected */
	uint32_t *refs;
	/* lists (lru: list 0; slru: 0 probation, 1 protected), by id; head/tail NONE when empty */
	uint32_t *prev, *nxt, head[2], tail[2];
	/* heap (lfu: min (a, b) = (acquires, last use); min: a = UINT64_MAX - next acquire) */
	uint32_t *heap, *pos, nheap;
	uint64_t *a, *b;
} sim;

static void l_push(sim *s, int l, uint32_t id)
{
	s->prev[id] = s->tail[l], s->nxt[id] = NONE;
	if (s->tail[l] != NONE)
		s->nxt[s->tail[l]] = id;
	else
		s->head[l] = id;
	s->tail[l] = id;
}

static void l_unlink(sim *s, int l, uint32_t id)
{
	if (s->prev[id] != NONE)
		s->nxt[s->prev[id]] = s->nxt[id];
	else
		s->head[l] = s->nxt[id];
	if (s->nxt[id] != NONE)
		s->prev[s->nxt[id]] = s->prev[id];
	else
		s->tail[l] = s->prev[id];
}

static int h_less(const sim *s, uint32_t x, uint32_t y)
{
	return s->a[x] != s->a[y] ? s->a[x] < s->a[y] : s->b[x] < s->b[y];
}

static void h_set(sim *s, uint32_t i, uint32_t id)
{
	s->heap[i] = id, s->pos[id] = i;
}

static void h_up(sim *s, uint32_t i)
{
	uint32_t id = s->heap[i];
	while (i > 0 && h_less(s, id, s->heap[(i - 1) / 2])) {
		h_set(s, i, s->heap[(i - 1) / 2]);
		i = (i - 1) / 2;
	}
	h_set(s, i, id);
}

static void h_down(sim *s, uint32_t i)
{
	uint32_t id = s->heap[i];
	for (;;) {
		uint32_t c = 2 * i + 1;
		if (c >= s->nheap)
			break;
		if (c + 1 < s->nheap && h_less(s, s->heap[c + 1], s->heap[c]))
			c++;
		if (!h_less(s, s->heap[c], id))
			break;
		h_set(s, i, s->heap[c]);
		i = c;
	}
	h_set(s, i, id);
}

static void h_push(sim *s, uint32_t id)
{
	s->heap[s->nheap] = id;
	s->pos[id] = s->nheap++;
	h_up(s, s->nheap - 1);
}

static void h_remove(sim *s, uint32_t id)
{
	uint32_t i = s->pos[id], last = s->heap[--s->nheap];
	s->pos[id] = NONE;
	if (i == s->nheap)
		return;
	h_set(s, i, last);
	h_up(s, i);
	h_down(s, s->pos[last]);
}

static int uses_heap(const sim *s)
{
	return s->pol == RPL_LFU || s->pol == RPL_MIN;
}

/* An unheld resident block becomes evictable (it came in by a hint, or its last hold went at event i). */
static void ev_add(sim *s, uint32_t id, size_t i)
{
	if (s->pol == RPL_LRU)
		l_push(s, 0, id);
	else if (s->pol == RPL_SLRU)
		l_push(s, s->seg[id], id);
	else if (s->pol == RPL_LFU)
		s->b[id] = s->now, h_push(s, id);
	else
		s->a[id] = s->t->next[i] == NONE ? 0 : UINT64_MAX - s->t->next[i], h_push(s, id); /* never: first */
}

/* It is held, or leaves. */
static void ev_del(sim *s, uint32_t id)
{
	if (uses_heap(s))
		h_remove(s, id);
	else
		l_unlink(s, s->pol == RPL_SLRU ? s->seg[id] : 0, id);
}

static uint32_t victim(const sim *s)
{
	if (uses_heap(s))
		return s->nheap ? s->heap[0] : NONE;
	return s->head[0] != NONE || s->pol == RPL_LRU ? s->head[0] : s->head[1];
}

static void leave(sim *s, uint32_t id)
{
	if (s->refs[id] == 0)
		ev_del(s, id);
	if (s->pol == RPL_SLRU && s->seg[id])
		s->nprot--;
	s->res[id] = 0, s->seg[id] = 0, s->refs[id] = 0, s->nres--;
}

/* Room for one more block: 0, or -1 when every slot is held. */
static int make_room(sim *s)
{
	if (s->nres < s->slots)
		return 0;
	uint32_t v = victim(s);
	if (v == NONE)
		return -1;
	leave(s, v);
	return 0;
}

/* slru: an acquire of a block in probation (just held: in no list) moves it to protected. */
static void promote(sim *s, uint32_t id)
{
	if (s->seg[id] || s->prot_cap == 0)
		return;
	s->seg[id] = 1, s->nprot++;
	if (s->nprot > s->prot_cap && s->head[1] != NONE) {
		uint32_t d = s->head[1];
		l_unlink(s, 1, d);
		s->seg[d] = 0, s->nprot--;
		l_push(s, 0, d);
	}
}

static int next_index(rpl_trace *t)
{
	if (t->next != NULL || t->n == 0)
		return 0;
	uint32_t *last = malloc((t->nids ? t->nids : 1) * sizeof *last);
	t->next = malloc(t->n * sizeof *t->next);
	if (last == NULL || t->next == NULL || t->n >= NONE) {
		free(last), free(t->next), t->next = NULL;
		return -1;
	}
	for (uint32_t i = 0; i < t->nids; i++)
		last[i] = NONE;
	for (size_t i = t->n; i-- > 0;) {
		const rpl_event *e = &t->ev[i];
		t->next[i] = e->op == RPL_RESET ? NONE : last[e->id];
		if (e->op == RPL_ACQUIRE)
			last[e->id] = (uint32_t)i;
	}
	free(last);
	return 0;
}

/* An acquire of e->id: a hit, or a miss that brings it in. 0, or -1 when no slot is free (which cannot
 * happen at slots >= peak_held). */
static int on_acquire(sim *s, const rpl_event *e, rpl_result *out)
{
	uint32_t id = e->id;
	out->acquires++;
	if (s->res[id]) {
		out->hits++;
		if (s->refs[id] == 0)
			ev_del(s, id);
		if (s->pol == RPL_SLRU)
			promote(s, id);
	} else {
		out->misses++, out->miss_bytes += e->bytes;
		if (make_room(s) != 0)
			return -1;
		s->res[id] = 1, s->nres++, s->a[id] = 0;
	}
	s->a[id] += s->pol == RPL_LFU;
	s->refs[id]++;
	return 0;
}

/* A hint (applied): a present unheld block is used (lru, slru: to its list's tail), an absent one
 * comes in unheld when a slot can be had. */
static void on_hint(sim *s, const rpl_event *e, size_t i, rpl_result *out)
{
	uint32_t id = e->id;
	if (s->res[id]) {
		if (s->refs[id] == 0 && !uses_heap(s))
			ev_del(s, id), ev_add(s, id, i);
		return;
	}
	if (make_room(s) != 0) {
		out->hints_dropped++;
		return;
	}
	s->res[id] = 1, s->nres++, s->a[id] = 0;
	ev_add(s, id, i);
	out->hint_reads++, out->hint_bytes += e->bytes;
}

/* Event i of the trace. 0, or -1 (no slot for an acquire). */
static int step(sim *s, size_t i, int apply, rpl_result *out)
{
	const rpl_event *e = &s->t->ev[i];
	uint32_t id = e->id;
	switch (e->op) {
	case RPL_ACQUIRE:
		return on_acquire(s, e, out);
	case RPL_RELEASE:
		if (--s->refs[id] == 0)
			ev_add(s, id, i);
		return 0;
	case RPL_PREFETCH:
		if (apply)
			on_hint(s, e, i, out);
		return 0;
	case RPL_EVICT:
		if (s->res[id])
			leave(s, id);
		return 0;
	default: /* RPL_RESET: nothing is held, so every resident block is evictable */
		while ((id = victim(s)) != NONE)
			leave(s, id);
		return 0;
	}
}

static void sim_free(sim *s)
{
	free(s->res), free(s->seg), free(s->refs), free(s->prev), free(s->nxt), free(s->heap), free(s->pos);
	free(s->a), free(s->b);
}

int rpl_simulate(rpl_trace *t, rpl_policy pol, unsigned slots, int hints, rpl_result *out)
{
	memset(out, 0, sizeof *out);
	if (slots == 0 || slots < t->peak_held)
		return -1;
	if (pol == RPL_MIN && next_index(t) != 0)
		return -2;
	size_t n = t->nids ? t->nids : 1;
	sim s = {.t = t, .pol = pol, .slots = slots, .prot_cap = slots * 4 / 5, .head = {NONE, NONE},
		 .tail = {NONE, NONE}};
	s.res = calloc(n, 1), s.seg = calloc(n, 1), s.refs = calloc(n, sizeof *s.refs);
	s.prev = malloc(n * sizeof *s.prev), s.nxt = malloc(n * sizeof *s.nxt);
	s.heap = malloc(n * sizeof *s.heap), s.pos = malloc(n * sizeof *s.pos);
	s.a = calloc(n, sizeof *s.a), s.b = calloc(n, sizeof *s.b);
	int rc = s.res && s.seg && s.refs && s.prev && s.nxt && s.heap && s.pos && s.a && s.b ? 0 : -2;
	int apply = hints && pol != RPL_MIN; /* min knows the future: hints tell it nothing */
	for (size_t i = 0; i < t->n && rc == 0; i++, s.now++)
		rc = step(&s, i, apply, out);
	sim_free(&s);
	return rc;
}

static const char *const names[RPL_NPOLICIES] = {"lru", "slru", "lfu", "min"};

const char *rpl_policy_name(rpl_policy p)
{
	return (unsigned)p < RPL_NPOLICIES ? names[p] : "?";
}

int rpl_policy_parse(const char *s, rpl_policy *out)
{
	for (int i = 0; i < RPL_NPOLICIES; i++)
		if (strcmp(s, names[i]) == 0) {
			*out = (rpl_policy)i;
			return 0;
		}
	if (strcmp(s, "belady") == 0) {
		*out = RPL_MIN;
		return 0;
	}
	return -1;
}
