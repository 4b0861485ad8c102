/* runtime/keyed.c — the keyed cache over a pipeline's slots (runtime/keyed.h).
 *
 * Held slots are in no list. With hints unbounded (hint_bytes 0, the default) every unheld slot is in
 * the LRU list, so its head is the least recently used slot not held (the documented rule). With hints
 * bounded an unheld slot is in the hint list (no acquire took its key since its hint) or the LRU list
 * (an acquire did), each least recently used first, so that a demand miss finds the oldest unacquired
 * hint, and else the least recently used slot not held, at a list's head. Empty slots are a bitmap
 * (lowest-numbered empty slot: count trailing zeros). Every call checks everything, decides, issues the
 * backend's copy (the one step that can fail late), then commits, so a failed call changes nothing,
 * except that a victim whose pending hint copy was withdrawn is then forgotten. */
#include "runtime/keyed_copy.h"
#include "base/alloc.h"
#include "base/error.h"
#include "io/file.h"
#include "runtime/engine.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int rf__keyed_create(struct rf__engine *eng, uint64_t hint_bytes, rf__keyed **out)
{
	rf__keyed *k = rf__calloc(1, sizeof *k);
	if (k == NULL)
		return rf__err(RF_ENOMEM, "keyed: out of memory");
	unsigned cap = 2, nslots = eng->nslots;
	while (cap < 2 * nslots)
		cap *= 2;
	k->eng = eng, k->be = eng->be, k->ctx = eng->ctx, k->slots = eng->slots, k->n = nslots;
	k->slot_bytes = eng->slot_bytes, k->slot_stride = eng->slot_stride;
	k->mask = cap - 1;
	k->nlanes = eng->klanes ? eng->klanes : 1;
	k->device = (k->be->caps & RF__CAP_DEVICE) != 0;
	k->oracle = eng->oracle;
	k->nwords = (nslots + 63) / 64;
	k->s = rf__calloc(nslots + 1u, sizeof *k->s);
	k->tab = rf__calloc(cap, sizeof *k->tab);
	k->empty = rf__calloc(k->nwords, sizeof *k->empty);
	k->fl = rf__calloc((size_t)k->nlanes * RF__KEYED_HINTS_PER_LANE, sizeof *k->fl);
	k->nfl = rf__calloc(k->nlanes, sizeof *k->nfl);
	k->failed = rf__calloc(nslots, sizeof *k->failed);
	if (k->s == NULL || k->tab == NULL || k->empty == NULL || k->fl == NULL || k->nfl == NULL ||
	    k->failed == NULL) {
		rf__keyed_destroy(k);
		return rf__err(RF_ENOMEM, "keyed: out of memory for %u slots", nslots);
	}
	for (int l = RF__KLRU; l <= RF__KHINT; l++)
		k->s[nslots].ln[l].prev = k->s[nslots].ln[l].next = nslots;
	for (unsigned i = 0; i < nslots; i++) {
		rf__kempty_set(k, i, 1);
		k->s[i].lane = i % k->nlanes;
	}
	if (k->oracle && (rf__ktrace_make(k) != RF_OK || rf__oracle_keyed_make(&k->orc, nslots) != RF_OK)) {
		rf__keyed_destroy(k);
		return rf__err(RF_ENOMEM, "keyed: out of memory for the oracle's log");
	}
	uint64_t all = (uint64_t)nslots * k->slot_bytes; /* more than the slots could never be outstanding */
	k->hints_bounded = hint_bytes != 0;
	k->hint_cap = k->credit = hint_bytes == 0 ? SIZE_MAX : (size_t)(hint_bytes < all ? hint_bytes : all);
	atomic_flag_clear(&k->lock);
	*out = k;
	return RF_OK;
}

void rf__keyed_destroy(rf__keyed *k)
{
	if (k == NULL)
		return;
	if (k->s != NULL) {
		rf__kop(k, RF__KOP_QUIESCE, 0, NULL);
		rf__keyed_trace_flush(k); /* nobody to tell of a failure */
		for (unsigned i = 0; i < k->n; i++) /* held-back hints' files */
			if (k->s[i].state == RF__K_HELDBACK && k->s[i].src.fs.f != NULL)
				rf__file_unhold(k->s[i].src.fs.f);
	}
	rf__trace_drop(&k->tr);
	free(k->s);
	free(k->tab);
	free(k->empty);
	free(k->fl);
	free(k->nfl);
	rf__oracle_keyed_free(&k->orc);
	free((void *)k->failed);
	free(k);
}

enum { RF__KFOR_DEMAND, RF__KFOR_HINT, RF__KFOR_HINT_OVER };

/* The slot for a new key; k->n if none (every slot held). Hints unbounded: the hint list is empty and
 * RF__KFOR_HINT_OVER never asked for, so this is the lowest-numbered empty slot, else the LRU list's
 * head. Hints bounded: the lowest-numbered empty one first (not for a hint over hint_cap). Then:
 *  - a demand miss (and a hint over hint_cap, which must take an unacquired hint's bytes): the oldest
 *    unacquired hint that needs no wait, else (demand) the least recently used acquired slot not held,
 *    else the oldest unacquired hint (its copy is being made: the new copy is ordered after it);
 *  - a hint within hint_cap: the least recently used acquired slot not held (a hint never displaces
 *    another hint while there is room for both), else as a demand miss.
 * *withdrawn: a pending hint copy of the chosen slot was withdrawn here (it will never land). */
static unsigned rf__kchoose_full(rf__keyed *k, int why, int *withdrawn, unsigned lru)
{
	unsigned v;
	if (why == RF__KFOR_HINT && lru != k->n)
		return lru;
	/* Needing no wait: held back, its copy finished, or its copy withdrawn here. */
	for (v = k->s[k->n].ln[RF__KHINT].next; v != k->n; v = k->s[v].ln[RF__KHINT].next) {
		if (k->s[v].state == RF__K_HELDBACK || rf__kdone(k, &k->s[v]) != 0)
			return v;
		if (rf__kwithdraw(k, v)) {
			*withdrawn = 1;
			return v;
		}
	}
	if (why != RF__KFOR_HINT_OVER && lru != k->n)
		return lru;
	if ((v = k->s[k->n].ln[RF__KHINT].next) == k->n && RF__TEST_HOOK(keyed_refill_held))
		for (unsigned i = 0; i < k->n; i++)
			if (k->s[i].refs > 0)
				return i; /* negative control: refill a held slot */
	return v;
}

/* The rule above, inline up to its common answer, where no unacquired hint is there to prefer (hints
 * unbounded, the default, always): an empty slot, else the LRU list's head. */
static inline __attribute__((always_inline)) unsigned rf__kchoose(rf__keyed *k, int why, int *withdrawn)
{
	*withdrawn = 0;
	for (unsigned w = 0; w < k->nwords && why != RF__KFOR_HINT_OVER; w++)
		if (k->empty[w] != 0)
			return w * 64 + (unsigned)__builtin_ctzll(k->empty[w]);
	unsigned lru = k->s[k->n].ln[RF__KLRU].next;
	if (why != RF__KFOR_HINT_OVER && lru != k->n && k->s[k->n].ln[RF__KHINT].next == k->n)
		return lru;
	return rf__kchoose_full(k, why, withdrawn, lru);
}

/* The key in slot v leaves: count an unacquired hint, unlink, clear; the ticket stays, so the next
 * copy is ordered after it. Under the lock. */
static void rf__kforget(rf__keyed *k, unsigned v)
{
	rf__kslot *s = &k->s[v];
	if (s->state == RF__K_EMPTY)
		return;
	if (s->hint) {
		rf__kst_add(k, s->issued ? ST_WASTE : ST_DROP, 1);
		if (!s->issued) /* never copied: its credit comes back */
			rf__kcredit(k, s->bytes);
		if (s->refs == 0)
			k->hint_bytes -= s->bytes;
	}
	if (s->state == RF__K_HELDBACK)
		rf__khb_leave(k, v);
	if (s->refs == 0)
		rf__kunlink(k, rf__klist(k, v), v);
	else
		k->nheld--; /* only under the negative-control hook, or when a run/destroy drops holds */
	rf__ktab_remove(k, v);
	s->state = RF__K_EMPTY;
	s->hint = s->issued = 0;
	s->refs = 0;
}

/* The key in slot v leaves and the slot is empty. */
static void rf__kdrop(rf__keyed *k, unsigned v)
{
	rf__klock(k);
	rf__kforget(k, v);
	rf__kempty_set(k, v, 1);
	rf__kunlock(k);
}

/* Make slot v hold `key` (state given): a hint's (hint 1) not held, at the tail of its list (rf__klist);
 * an acquire's (hint 0) held once, so in no list (rather than pushed onto the LRU list only for the
 * hold to unlink it again). Under the lock. Inline into its two callers: a call of seven arguments
 * cost more than the stores it makes. */
static inline __attribute__((always_inline)) void rf__kinstall(rf__keyed *k, unsigned v, uint64_t key,
							       const rf__src *src, size_t bytes, int state, int hint)
{
	rf__kforget(k, v);
	rf__kslot *s = &k->s[v];
	s->key = key, s->src = *src, s->bytes = bytes, s->state = (uint8_t)state;
	s->hint = (uint8_t)hint;
	rf__kempty_set(k, v, 0);
	rf__ktab_insert(k, v);
	if (hint) {
		k->hint_bytes += bytes;
		rf__kpush(k, rf__klist(k, v), v);
	} else {
		s->refs = 1;
		k->nheld++;
		rf__oracle_keyed_hold(&k->orc, v, 1);
	}
}

/* An acquire takes unheld slot i: an unacquired hint's key moves to the LRU list, and its credit comes
 * back (it was asked for, or never copied). */
static void rf__kunhint_slow(rf__keyed *k, unsigned i)
{
	rf__kslot *s = &k->s[i];
	rf__kunlink(k, rf__klist(k, i), i); /* its list while the hint flag is still set */
	k->hint_bytes -= s->bytes;
	rf__kcredit(k, s->bytes);
	s->hint = 0;
	rf__kpush(k, RF__KLRU, i);
}

/* rf__kunhint_slow where slot i is an unheld hint (the test inline: every hit makes it). */
static inline void rf__kunhint(rf__keyed *k, unsigned i)
{
	if (k->s[i].hint && k->s[i].refs == 0)
		rf__kunhint_slow(k, i);
}

/* A failure of the copy under a keyed call (a file's read: "<path>: short read ..."), named after the
 * call as each of its other errors is. */
static int rf__kcall_err(const char *who, int rc)
{
	const char *m = rf__errmsg_peek();
	size_t n = strlen(who);
	if (strncmp(m, who, n) == 0 && m[n] == ':')
		return rc;
	return rf__err(rc, "%s: %s", who, m);
}

/* Inline into the two calls that check a source (prefetch, acquire): a few compares, no call. */
static inline __attribute__((always_inline)) int rf__kcheck(rf__keyed *k, const char *who, const void *src,
							    size_t bytes, unsigned flags, rf__src *rs)
{
	if (src == NULL)
		return rf__err(RF_EINVAL, "%s: src is NULL", who);
	if (bytes == 0 || bytes > k->slot_bytes)
		return rf__err(RF_EINVAL, "%s: bytes %zu is not in 1..slot_bytes (%zu)", who, bytes, k->slot_bytes);
	if (flags != 0)
		return rf__err(RF_EINVAL, "%s: flags must be 0 (got %#x)", who, flags);
	/* A source in the ring would be overwritten by the copy it feeds (or a refill while a hint reads
	 * it); device rings are another address space. Compared as integers: unrelated objects. */
	uintptr_t s = (uintptr_t)src, lo = (uintptr_t)k->slots, hi = lo + (size_t)k->n * k->slot_stride;
	if (!k->device && s < hi && s + bytes > lo)
		return rf__err(RF_EINVAL, "%s: src lies in the pipeline's own ring (copy it out first)", who);
	int file = rf__file_classify(who, "src", src, bytes, rs);
	return file <= 0 ? file : rf__engine_io(k->eng, who); /* RF_OK (memory), an error, or a file's */
}

/* 1 when slot i's last copy was a hint's failed file read: its key then left (a wasted hint). Its ticket
 * stays the slot's last copy: the next one waits for it, and so for the copies it was ordered after. */
static int rf__kfailed(rf__keyed *k, unsigned i)
{
	if (rf__kdone(k, &k->s[i]) >= 0)
		return 0;
	rf__kdrop(k, i);
	return 1;
}

/* *i: the slot of key (k->n when absent, also after a failed hint read); RF_EINVAL for another size.
 * Inline, as rf__kcheck: every acquire and prefetch asks. */
static inline __attribute__((always_inline)) int rf__kfind_live(rf__keyed *k, const char *who, uint64_t key,
								 size_t bytes, unsigned *i)
{
	unsigned j = rf__kfind(k, key);
	if (j < k->n && k->s[j].refs == 0 && rf__kfailed(k, j))
		j = k->n;
	*i = j;
	if (j == k->n || k->s[j].bytes == bytes)
		return RF_OK;
	return rf__err(RF_EINVAL, "%s: key %llu is %zu bytes in slot %u, not %zu", who, (unsigned long long)key,
		       k->s[j].bytes, j, bytes);
}

int rf__keyed_prefetch(rf__keyed *k, uint64_t key, const void *src, size_t bytes, unsigned flags)
{
	static const char who[] = "rf_pipeline_prefetch";
	unsigned i;
	rf__src rs;
	int rc = rf__kcheck(k, who, src, bytes, flags, &rs);
	if (rc == RF_OK)
		rc = rf__kfind_live(k, who, key, bytes, &i);
	if (rc != RF_OK)
		return rc;
	if (i < k->n) {
		if (k->s[i].refs == 0) { /* refresh its use, in its list */
			rf__kunlink(k, rf__klist(k, i), i);
			rf__kpush(k, rf__klist(k, i), i);
		}
		rf__kpump(k);
		return RF_OK;
	}
	/* Bounded hints only: out of credit (hints have been wasted), or larger than the bound: dropped at
	 * once, no slot taken. */
	if (k->hints_bounded && bytes > k->credit) {
		if (k->nheld == k->n)
			return rf__err(RF_ENOSPC, "%s: every one of the %u slots is held", who, k->n);
		rf__kst_add(k, ST_PRE, 1);
		rf__kst_add(k, ST_DROP, 1);
		rf__kpump(k);
		return RF_OK;
	}
	int withdrawn;
	int over = k->hints_bounded && k->hint_bytes + bytes > k->hint_cap;
	unsigned v = rf__kchoose(k, over ? RF__KFOR_HINT_OVER : RF__KFOR_HINT, &withdrawn);
	if (v == k->n)
		return rf__err(RF_ENOSPC, "%s: every one of the %u slots is held", who, k->n);
	withdrawn |= rf__kwithdraw(k, v);
	rf__kticket t = 0;
	int state = RF__K_HELDBACK;
	/* Issue now only when the lane has room and no older hint waits for it (they go first). */
	if (k->nheldback == 0 && rf__klane_count(k, k->s[v].lane) < RF__KEYED_HINTS_PER_LANE) {
		rc = rf__kissue(k, v, &rs, bytes, 0, NULL, key, &t);
		if (rc == RF_OK)
			state = RF__K_FILLED;
		else if (rc == RF_EIO) /* a read made on the spot failed: a wasted hint, the key absent */
			goto failed_read;
		else if (rc != RF_ENOSPC)
			goto fail;
	} else if ((rc = rf__oracle_keyed_copy(&k->orc, v, key)) != RF_OK) {
		goto fail;
	}
	/* Held back, a hint names its source with no copy yet to hold it: the hint holds a file source
	 * itself, so that the file cannot be closed (and unmapped) before the copy is issued. */
	if (state == RF__K_HELDBACK && rs.fs.f != NULL && (rc = rf__file_hold(who, "src", &rs, bytes)) != RF_OK)
		goto fail;
	rf__klock(k);
	rf__kinstall(k, v, key, &rs, bytes, state, 1);
	k->s[v].issued = state == RF__K_FILLED;
	rf__kdebit(k, bytes); /* an issued copy's ticket: stored by rf__kissue */
	rf__kunlock(k);
	if (state == RF__K_HELDBACK)
		rf__kpush(k, RF__KHB, v);
	rf__kst_add(k, ST_PRE, 1);
	rf__kpump(k);
	return RF_OK;
failed_read: /* the slot was written: the victim cannot stay either */
	rf__kdrop(k, v);
	rf__kdebit(k, bytes);
	rf__kst_add(k, ST_PRE, 1);
	rf__kst_add(k, ST_WASTE, 1);
	rf__kpump(k);
	return RF_OK;
fail:
	if (withdrawn) /* its copy will never land: the victim cannot stay */
		rf__kdrop(k, v);
	return rc;
}

static void rf__kout(const rf__keyed *k, unsigned i, void *stream, rf_block *out)
{
	*out = (rf_block){(size_t)k->s[i].key, i, rf__kdata(k, i), k->s[i].bytes, stream};
}

/* A hold on resident slot i (hit or a copy just issued). */
static void rf__khold(rf__keyed *k, unsigned i)
{
	rf__kslot *s = &k->s[i];
	rf__kunhint(k, i);
	if (s->refs++ == 0) {
		rf__kunlink(k, RF__KLRU, i);
		k->nheld++;
	}
	rf__oracle_keyed_hold(&k->orc, i, 1);
}

int rf__keyed_acquire(rf__keyed *k, uint64_t key, const void *src, size_t bytes, void *stream, unsigned flags,
		      rf_block *out)
{
	static const char who[] = "rf_pipeline_acquire";
	unsigned i;
	rf__src rs;
	int rc = rf__kcheck(k, who, src, bytes, flags, &rs);
	if (rc != RF_OK)
		return rc;
	if (out == NULL)
		return rf__err(RF_EINVAL, "%s: out is NULL", who);
	if (stream != NULL && !k->device)
		return rf__err(RF_EINVAL, "%s: stream must be NULL on backend %s", who, k->be->name);
	if ((rc = rf__kfind_live(k, who, key, bytes, &i)) != RF_OK)
		return rc;
	/* A hint whose copy has not started is overtaken (withdrawn, then copied here as if held back):
	 * waiting for it could mean waiting behind other hints on its lane. */
	int overtaken = i < k->n && k->s[i].state == RF__K_FILLED && k->s[i].hint && rf__kwithdraw(k, i);
	if (i < k->n && k->s[i].state == RF__K_FILLED && !overtaken) { /* a hit, possibly late */
		rf__kslot *s = &k->s[i];
		/* done < 0: the hint's read failed since rf__kfind_live looked (it was still running then) */
		int done = rf__kdone(k, s), late = done == 0;
		if (late && (rc = rf__kop(k, RF__KOP_WAIT_STREAM, atomic_load_explicit(&s->ticket, memory_order_relaxed),
					  stream)) != RF_OK)
			return rf__kcall_err(who, rc);
		if (done <= 0 && s->refs == 0 && rf__kfailed(k, i)) /* the hint's read failed: copy it now */
			return rf__keyed_acquire(k, key, src, bytes, stream, flags, out);
		if (k->oracle && !k->device &&
		    (rc = rf__oracle_keyed_acquire(rf__kdata(k, i), &rs, bytes, key, i)) != RF_OK)
			return rc;
		rf__khold(k, i);
		rf__kst_add(k, ST_ACQ, 1);
		rf__kst_add(k, ST_HIT, 1);
		rf__kst_add(k, ST_LATE, (uint64_t)late);
		rf__kout(k, i, stream, out);
		rf__kpump(k);
		return RF_OK;
	}
	/* A miss: a held-back or overtaken hint's own slot, else a new one. */
	int withdrawn = 0;
	unsigned v = i < k->n ? i : rf__kchoose(k, RF__KFOR_DEMAND, &withdrawn);
	if (v == k->n)
		return rf__err(RF_ENOSPC, "%s: every one of the %u slots is held by other keys", who, k->n);
	withdrawn |= rf__kwithdraw(k, v) || overtaken; /* a pending copy of the slot's previous key */
	rf__kticket t;
	if ((rc = rf__kissue(k, v, &rs, bytes, 1, stream, key, &t)) == RF_OK &&
	    (rc = rf__kop(k, RF__KOP_WAIT_STREAM, t, stream)) == RF_OK)
		rc = k->oracle && !k->device ? rf__oracle_keyed_acquire(rf__kdata(k, v), &rs, bytes, key, v) : RF_OK;
	if (rc != RF_OK) {
		if (withdrawn || rc == RF_EIO) /* nothing will land, or a failed read wrote part of the slot */
			rf__kdrop(k, v);
		return rf__kcall_err(who, rc);
	}
	rf__klock(k);
	if (i < k->n) { /* the held-back or withdrawn hint is overtaken: dropped */
		if (k->s[v].state == RF__K_HELDBACK)
			rf__khb_leave(k, v);
		rf__kst_add(k, ST_DROP, 1);
		rf__kunhint(k, v);
		k->s[v].issued = 0;
		k->s[v].state = RF__K_FILLED;
		k->s[v].src = rs;
	} else {
		rf__kinstall(k, v, key, &rs, bytes, RF__K_FILLED, 0); /* held */
	}
	rf__kcredit(k, bytes / RF__KEYED_WASTE_SHARE); /* a demand copy earns hints their share */
	atomic_store_explicit(&k->s[v].ticket, rf__kop(k, RF__KOP_TEST, t, NULL) ? 0 : t, memory_order_relaxed);
	rf__kunlock(k);
	if (i < k->n)
		rf__khold(k, v);
	rf__kst_add(k, ST_ACQ, 1);
	rf__kout(k, v, stream, out);
	rf__kpump(k);
	return RF_OK;
}

int rf__keyed_release(rf__keyed *k, const rf_block *b)
{
	static const char who[] = "rf_pipeline_release";
	if (b == NULL)
		return rf__err(RF_EINVAL, "%s: block is NULL", who);
	if (b->slot >= k->n || k->s[b->slot].state != RF__K_FILLED || k->s[b->slot].refs == 0 ||
	    k->s[b->slot].key != (uint64_t)b->index)
		return rf__err(RF_EINVAL, "%s: key %llu is not held in slot %u", who, (unsigned long long)b->index,
			       b->slot);
	int rc = rf__backend_krelease(k->be, k->ctx, b->slot, b->stream);
	if (rc != RF_OK)
		return rc;
	rf__kslot *s = &k->s[b->slot];
	rf__oracle_keyed_hold(&k->orc, b->slot, -1);
	if (--s->refs == 0) {
		rf__kpush(k, RF__KLRU, b->slot);
		k->nheld--;
	}
	rf__kpump(k);
	return RF_OK;
}

int rf__keyed_evict(rf__keyed *k, uint64_t key)
{
	static const char who[] = "rf_pipeline_evict";
	unsigned i = rf__kfind(k, key);
	if (i < k->n && k->s[i].refs > 0)
		return rf__err(RF_EBUSY, "%s: key %llu is held", who, (unsigned long long)key);
	if (i < k->n && rf__kfailed(k, i))
		i = k->n;
	int rc = RF_OK;
	if (i < k->n && !rf__kwithdraw(k, i) && !rf__kdone(k, &k->s[i]))
		rc = rf__kop(k, RF__KOP_WAIT, atomic_load_explicit(&k->s[i].ticket, memory_order_relaxed), NULL);
	if (rc == RF_OK)
		rc = rf__ksync_key(k, key);
	if (rc != RF_OK)
		return rf__kcall_err(who, rc);
	if (i < k->n)
		rf__kdrop(k, i);
	rf__kpump(k);
	return RF_OK;
}

int rf__keyed_unprefetch(rf__keyed *k, uint64_t key)
{
	unsigned i = rf__kfind(k, key);
	if (i < k->n && rf__kfailed(k, i))
		i = k->n; /* its read failed: gone already (wasted) */
	if (i == k->n || !k->s[i].hint || k->s[i].refs != 0)
		return RF_OK;
	/* Held back, or its copy withdrawn before it started: the key goes (dropped, its credit back). */
	if (k->s[i].state == RF__K_HELDBACK || rf__kwithdraw(k, i)) {
		rf__kdrop(k, i);
	} else { /* its copy started (or landed): it stays, at the head of its list (rf__klist) */
		int l = rf__klist(k, i);
		rf__kunlink(k, l, i);
		rf__klink(k, l, i, k->n, k->s[k->n].ln[l].next);
	}
	rf__kpump(k);
	return RF_OK;
}

int rf__keyed_lookup(const rf__keyed *k, uint64_t key, rf_key_state *state, unsigned *slot)
{
	rf__klock(k);
	unsigned i = rf__kfind(k, key);
	rf_key_state st = RF_KEY_ABSENT;
	if (i < k->n) {
		rf__kticket t = atomic_load_explicit(&k->s[i].ticket, memory_order_relaxed);
		if (rf__kread_failed(k, i, t))
			st = RF_KEY_ABSENT; /* its file read failed: the next acquire copies it again */
		else if (k->s[i].state == RF__K_HELDBACK || (t != 0 && !rf__kop(k, RF__KOP_TEST, t, NULL)))
			st = RF_KEY_COPYING;
		else
			st = RF_KEY_READY;
	}
	rf__kunlock(k);
	*state = st;
	if (slot != NULL && st != RF_KEY_ABSENT)
		*slot = i;
	return RF_OK;
}

void rf__keyed_stats(const rf__keyed *k, rf_keyed_stats *out)
{
	memset(out, 0, sizeof *out);
	uint64_t *f[7] = {&out->acquires, &out->hits, &out->late, &out->prefetches, &out->dropped, &out->wasted,
			  &out->bytes_copied};
	for (int i = 0; i < 7; i++)
		*f[i] = atomic_load_explicit(&((rf__keyed *)k)->st[i], memory_order_relaxed);
}

int rf__keyed_reset(rf__keyed *k, const char *who)
{
	if (k->nheld != 0)
		return rf__err(RF_EBUSY, "%s: a keyed block is held (release it first)", who);
	rf__kop(k, RF__KOP_QUIESCE, 0, NULL);
	int rc = rf__keyed_trace_flush(k);
	if (rc != RF_OK)
		return rf__err(rc, "%s: %s", who, rf__errmsg_peek());
	rf__klock(k);
	for (unsigned i = 0; i < k->n; i++) {
		rf__kforget(k, i);
		rf__kempty_set(k, i, 1);
		atomic_store_explicit(&k->s[i].ticket, 0, memory_order_relaxed);
		k->s[i].before = 0;
		rf__oracle_keyed_hold(&k->orc, i, 0);
	}
	rf__kunlock(k);
	for (unsigned l = 0; l < k->nlanes; l++)
		k->nfl[l] = 0;
	k->nheld = 0;
	return RF_OK;
}
