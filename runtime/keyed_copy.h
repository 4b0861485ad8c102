/* runtime/keyed_copy.h — the keyed cache's copies (runtime/keyed_copy.c), as runtime/keyed.c calls them:
 * each slow path behind the inline test that nearly every call stops at. */
#ifndef RF_RUNTIME_KEYED_COPY_H
#define RF_RUNTIME_KEYED_COPY_H

#include "runtime/keyed_cache.h"

/* Make the trace that keyed copies' slices are kept in until written out: RF_OK or RF_ENOMEM. */
int rf__ktrace_make(rf__keyed *k);
/* 1 when the slot's last copy finished, 0 while it runs, -1 when it failed (a file read: said once the
 * read failed, which may be before the ticket finishes; the ticket is kept, so that every look says so
 * and the next copy into the slot is ordered after it). Inline for a ticket already known finished (0:
 * every inline copy, most slots most of the time), which asks nothing. */
int rf__kdone_ticket(rf__keyed *k, rf__kslot *s);
static inline int rf__kdone(rf__keyed *k, rf__kslot *s)
{
	return atomic_load_explicit(&s->ticket, memory_order_relaxed) == 0 ? 1 : rf__kdone_ticket(k, s);
}
/* Forget finished hint copies; returns the hints in flight on `lane`. */
unsigned rf__klane_count(rf__keyed *k, unsigned lane);
/* Slot i leaves the held-back list (its copy issued, or the hint gone): let go of the file it held. */
void rf__khb_leave(rf__keyed *k, unsigned i);
/* Issue a copy of key into slot (a demand copy, or a hint listed in flight on its lane), ordered after the
 * slot's unfinished last copy; the oracle's, the trace's or the backend's error, nothing issued then.
 * The oracle's WAR check is inline: as the first test of the copy's function, the compiler split it off
 * into a stub that saved registers only to pass the eight arguments on, on every copy. */
int rf__kissue_checked(rf__keyed *k, unsigned slot, const rf__src *src, size_t bytes, int demand, void *stream,
		       uint64_t key, rf__kticket *t);
static inline int rf__kissue(rf__keyed *k, unsigned slot, const rf__src *src, size_t bytes, int demand,
			     void *stream, uint64_t key, rf__kticket *t)
{
	int rc = rf__oracle_keyed_copy(&k->orc, slot, key);
	return rc != RF_OK ? rc : rf__kissue_checked(k, slot, src, bytes, demand, stream, key, t);
}
/* Issue held-back hints, oldest first, on lanes with room. A failure leaves the hint held back. Every
 * acquire and release ends here, nearly always with nothing held back: that test is inline. */
void rf__kpump_held(rf__keyed *k);
static inline void rf__kpump(rf__keyed *k)
{
	if (k->nheldback != 0)
		rf__kpump_held(k);
}
/* Before a copy into victim v: withdraw its pending hint copy where the backend can (so the new copy
 * never waits behind a hint that has not started). Returns 1 when one was withdrawn. Inline for a
 * finished ticket: nothing to withdraw (every miss asks). */
int rf__kwithdraw_ticket(rf__keyed *k, unsigned v);
static inline int rf__kwithdraw(rf__keyed *k, unsigned v)
{
	return atomic_load_explicit(&k->s[v].ticket, memory_order_relaxed) != 0 && rf__kwithdraw_ticket(k, v);
}
/* No copy may read `key`'s source once evict returns: its fill, or a hint copy whose slot was taken
 * for another key while it was in flight (still listed per lane). */
int rf__ksync_key(rf__keyed *k, uint64_t key);

#endif
