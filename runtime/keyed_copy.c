/* runtime/keyed_copy.c — the keyed cache's copies (runtime/keyed_cache.h): issued through the backend
 * one lane per slot, hints in flight per lane and the held-back ones pumped onto lanes with room, a
 * copy's end (finished, failed read, withdrawn) and the copies' trace slices. runtime/keyed.c decides
 * which copy goes where; nothing here calls back into it. */
#include "runtime/keyed_copy.h"
#include "base/alloc.h"
#include "base/error.h"
#include "base/pool.h"
#include "io/file.h"
#include "runtime/engine.h"

#include <string.h>

#define RF__KTRACE_EVENTS 4096u /* keyed copies' slices kept before they are written out */

int rf__ktrace_make(rf__keyed *k)
{
	k->tr.nq = 1, k->tr.keyed = 1, k->tr.cap[0] = RF__KTRACE_EVENTS;
	k->tr.ev[0] = rf__calloc(RF__KTRACE_EVENTS, sizeof *k->tr.ev[0]);
	return k->tr.ev[0] != NULL ? RF_OK : RF_ENOMEM;
}

/* Checked before they are written (a hazard keeps them); a child of fork() writes none: they are the
 * parent's. */
int rf__keyed_trace_flush(rf__keyed *k)
{
	if (k->tr_next == 0)
		return RF_OK;
	rf__kop(k, RF__KOP_QUIESCE, 0, NULL);
	k->tr.n[0] = k->eng->forks == rf__fork_count() ? k->tr_next : 0;
	const char *path = k->eng->trace_path;
	int rc = k->oracle ? rf__oracle_keyed_log(&k->orc, &k->tr) : RF_OK;
	if (rc != RF_OK) /* kept: every later write-out (run, keyed call) finds the hazard again */
		return rc;
	rc = path != NULL && k->tr.n[0] > 0 ? rf__trace_write(&k->tr, path, k->be->name) : RF_OK;
	memset(k->tr.ev[0], 0, (size_t)k->tr_next * sizeof *k->tr.ev[0]);
	k->tr_next = 0;
	k->tr.n[0] = 0;
	return rc;
}

/* The trace for the next keyed copy (NULL: neither traced nor checked), with room for its slice: made
 * at the first traced copy, written out when full (a traced pipeline's keyed call then writes). */
static int rf__ktrace_room(rf__keyed *k, rf__trace **out)
{
	*out = NULL;
	if (!k->oracle && k->eng->trace_path == NULL)
		return RF_OK;
	if (k->tr.ev[0] == NULL && rf__ktrace_make(k) != RF_OK)
		return rf__err(RF_ENOMEM, "keyed: out of memory for the trace of keyed copies");
	int rc = k->tr_next == RF__KTRACE_EVENTS ? rf__keyed_trace_flush(k) : RF_OK;
	*out = rc == RF_OK ? &k->tr : NULL;
	return rc;
}

int rf__kdone_ticket(rf__keyed *k, rf__kslot *s)
{
	rf__kticket t = atomic_load_explicit(&s->ticket, memory_order_relaxed);
	if (rf__kread_failed(k, (unsigned)(s - k->s), t)) /* marked once its read failed, before it finishes */
		return -1;
	if (t != 0 && !rf__kop(k, RF__KOP_TEST, t, NULL))
		return 0;
	atomic_store_explicit(&s->ticket, 0, memory_order_relaxed);
	return 1;
}

unsigned rf__klane_count(rf__keyed *k, unsigned lane)
{
	rf__kflight *f = k->fl + (size_t)lane * RF__KEYED_HINTS_PER_LANE;
	unsigned n = k->nfl[lane], m = 0;
	for (unsigned i = 0; i < n; i++)
		if (!rf__kop(k, RF__KOP_TEST, f[i].t, NULL))
			f[m++] = f[i];
	k->nfl[lane] = m;
	return m;
}

void rf__khb_leave(rf__keyed *k, unsigned i)
{
	rf__kunlink(k, RF__KHB, i);
	if (k->s[i].src.fs.f != NULL)
		rf__file_unhold(k->s[i].src.fs.f);
}

int rf__kissue_checked(rf__keyed *k, unsigned slot, const rf__src *src, size_t bytes, int demand, void *stream,
		       uint64_t key, rf__kticket *t)
{
	rf__trace *tr;
	int rc = rf__ktrace_room(k, &tr);
	if (rc != RF_OK)
		return rc;
	rf__kslot *s = &k->s[slot];
	/* A failed read's ticket too: it finishes only once the copies it was ordered after have (one of
	 * them may still be writing the slot). */
	rf__kticket after = rf__kdone(k, s) > 0 ? 0 : atomic_load_explicit(&s->ticket, memory_order_relaxed);
	/* Every field by assignment: an initializer zeroes the whole request first (a string store over
	 * it, padding included), on every miss. rf__backend_kissue sets op. */
	rf__kcopy req;
	req.lane = s->lane, req.slot = slot, req.dst = rf__kdata(k, slot), req.src = *src, req.bytes = bytes;
	req.demand = demand, req.after = after, req.stream = stream, req.counter = &k->st[ST_BYTES];
	req.io = &k->eng->io, req.cap = k->slot_stride, req.failed = &k->failed[slot], req.trace = tr;
	req.tev = k->tr_next, req.key = key;
	rc = rf__backend_kissue(k->be, k->ctx, &req, t);
	/* Its entry is its own even when it failed: a read that failed was made and traced there, and an
	 * entry left for the next copy would carry that slice as the next copy's if it is never made. */
	k->tr_next += tr != NULL;
	if (rc != RF_OK)
		return rc;
	s->before = after;
	atomic_store_explicit(&s->ticket, *t, memory_order_relaxed);
	if (!demand && !rf__kop(k, RF__KOP_TEST, *t, NULL)) /* a hint in flight on its lane */
		k->fl[(size_t)req.lane * RF__KEYED_HINTS_PER_LANE + k->nfl[req.lane]++] =
			(rf__kflight){*t, key};
	return RF_OK;
}

void rf__kpump_held(rf__keyed *k)
{
	unsigned room = 0;
	for (unsigned l = 0; l < k->nlanes; l++)
		room += rf__klane_count(k, l) < RF__KEYED_HINTS_PER_LANE;
	for (unsigned i = k->s[k->n].ln[RF__KHB].next; i != k->n && room > 0;) {
		rf__kslot *s = &k->s[i];
		unsigned next = s->ln[RF__KHB].next, lane = s->lane;
		rf__kticket t;
		if (k->nfl[lane] < RF__KEYED_HINTS_PER_LANE &&
		    rf__kissue(k, i, &s->src, s->bytes, 0, NULL, s->key, &t) == RF_OK) {
			rf__khb_leave(k, i);
			rf__klock(k);
			s->state = RF__K_FILLED;
			s->issued = 1; /* its ticket: stored by rf__kissue */
			rf__kunlock(k);
			room -= k->nfl[lane] == RF__KEYED_HINTS_PER_LANE;
		}
		i = next;
	}
}

int rf__kwithdraw_ticket(rf__keyed *k, unsigned v)
{
	rf__kslot *s = &k->s[v];
	if (rf__kdone(k, s))
		return 0;
	if (!rf__kop(k, RF__KOP_CANCEL, atomic_load_explicit(&s->ticket, memory_order_relaxed), NULL))
		return 0;
	/* The copy before the withdrawn one may have started and still be writing the slot: the next copy
	 * must wait for it (tests/race_keyed.c). */
	atomic_store_explicit(&s->ticket, s->before, memory_order_relaxed);
	s->before = 0;
	s->issued = 0; /* it never copied a byte: dropped, not wasted, when its key goes */
	return 1;
}

int rf__ksync_key(rf__keyed *k, uint64_t key)
{
	for (unsigned l = 0; l < k->nlanes; l++) {
		const rf__kflight *f = k->fl + (size_t)l * RF__KEYED_HINTS_PER_LANE;
		for (unsigned j = 0; j < k->nfl[l]; j++) {
			int rc = f[j].key == key ? rf__kop(k, RF__KOP_WAIT, f[j].t, NULL) : RF_OK;
			if (rc != RF_OK)
				return rc;
		}
	}
	return RF_OK;
}
