/* runtime/keyed_cache.h — the keyed cache's data structures, private to runtime/keyed.c (its decisions)
 * and runtime/keyed_copy.c (its copies, which keyed.c calls, never the reverse): slots,
 * the key table (open addressing, at least 2n entries, backward-shift deletion: no tombstones), the LRU,
 * unacquired-hint and held-back lists (intrusive, by slot index, sentinel at index n), the empty-slot
 * bitmap. */
#ifndef RF_RUNTIME_KEYED_CACHE_H
#define RF_RUNTIME_KEYED_CACHE_H

#include "base/pause.h"
#include "runtime/keyed.h"
#include "runtime/oracle.h"
#include "runtime/trace.h"

#include <stdatomic.h>

enum { RF__K_EMPTY = 0, RF__K_HELDBACK = 1, RF__K_FILLED = 2 };
enum { RF__KLRU = 0, RF__KHB = 1, RF__KHINT = 2 }; /* the lists */

typedef struct rf__kslot {
	uint64_t key;
	rf__src src; /* as the hint or acquire resolved it; a held-back hint holds its file (rf_file_close:
	                RF_EBUSY) until it leaves the held-back list: its copy, issued, holds the file itself */
	size_t bytes;
	_Atomic uint64_t ticket; /* last copy issued into the slot, 0 once known finished (lookup reads it) */
	rf__kticket before;      /* the copy before it, when not known finished at issue: a withdrawn ticket
	                            gives way to it (a started copy may still be writing the slot) */
	unsigned refs;
	unsigned lane; /* its copies' lane, fixed: hints into one slot are ordered by it (backend.h (a)) */
	uint32_t home; /* rf__khash of key, kept from its insertion for its removal and the shifts around it */
	uint8_t state;
	uint8_t hint;   /* filled by a hint that no acquire has taken yet */
	uint8_t issued; /* that hint's copy was issued (wasted, not dropped, if it leaves unacquired) */
	/* RF__KLRU, RF__KHINT: the unheld keys, each in one of them (rf__klist; runtime/keyed.c says which),
	 * least recently used first; RF__KHB: held-back hints, in issue order */
	struct {
		unsigned prev, next;
	} ln[3];
} rf__kslot;

typedef struct rf__kflight {
	rf__kticket t;
	uint64_t key;
} rf__kflight;

struct rf__keyed {
	struct rf__engine *eng; /* its reader for file sources (rf__engine_io) */
	const rf__backend_ops *be;
	void *ctx;
	unsigned char *slots;
	size_t slot_bytes, slot_stride; /* capacity of a slot; distance between two slots' starts */
	unsigned n, nlanes, mask; /* slots, copy lanes, hash mask */
	int device, oracle;
	rf__kslot *s;   /* n + 1: s[n] is the sentinel of both lists */
	uint32_t *tab;  /* slot + 1, 0 = free */
	uint64_t *empty; /* bit set: slot empty */
	unsigned nwords, nheld, nheldback;
	rf__kflight *fl; /* nlanes * RF__KEYED_HINTS_PER_LANE hint copies in flight */
	unsigned *nfl;   /* per lane */
	rf__oracle_keyed orc; /* RINGFETCH_ORACLE=1 (holds NULL without) */
	_Atomic int64_t *failed; /* per slot: the last hint ticket whose file read failed there (0: none) */
	/* Hints' bounds (rf_pipeline_params.hint_bytes > 0: hints_bounded; else hint_cap and credit are
	 * SIZE_MAX, never reached, and the slot choice is the plain LRU rule): hint_bytes, the bytes of the
	 * unacquired hints (held back, in flight or landed, not yet acquired; in RF__KHINT when bounded),
	 * stays <= hint_cap; credit, the bytes of hints that may still be accepted (hint_cap at start, down
	 * by each accepted hint, back up by each hint acquired or never copied and by demand copies /
	 * RF__KEYED_WASTE_SHARE; at most hint_cap), is what bounds the bytes of wasted hint copies. */
	size_t hint_cap, hint_bytes, credit;
	int hints_bounded;
	/* Keyed copies' slices (traced or checked: RINGFETCH_TRACE, the oracle), tr_next the entry of the
	 * next copy issued (runtime/trace.h); made at create with the oracle, else at the first traced copy. */
	rf__trace tr;
	uint32_t tr_next;
	atomic_flag lock;   /* lookup vs changes of key <-> slot */
	_Atomic uint64_t st[7]; /* rf_keyed_stats fields in order */
};

enum { ST_ACQ, ST_HIT, ST_LATE, ST_PRE, ST_DROP, ST_WASTE, ST_BYTES };

/* Stats are written by the owner only: a relaxed load + store is enough and cheaper than an RMW. */
static inline void rf__kst_add(rf__keyed *k, int i, uint64_t v)
{
	atomic_store_explicit(&k->st[i], atomic_load_explicit(&k->st[i], memory_order_relaxed) + v,
			      memory_order_relaxed);
}

static inline void rf__klock(const rf__keyed *k)
{
	while (atomic_flag_test_and_set_explicit((atomic_flag *)&k->lock, memory_order_acquire))
		RF__PAUSE();
}

static inline void rf__kunlock(const rf__keyed *k)
{
	atomic_flag_clear_explicit((atomic_flag *)&k->lock, memory_order_release);
}

static inline uint32_t rf__khash(uint64_t key, unsigned mask)
{
	key ^= key >> 33;
	key *= 0xff51afd7ed558ccdull;
	key ^= key >> 33;
	return (uint32_t)key & mask;
}

static inline unsigned rf__kfind(const rf__keyed *k, uint64_t key)
{
	for (uint32_t i = rf__khash(key, k->mask);; i = (i + 1) & k->mask) {
		uint32_t e = k->tab[i];
		if (e == 0)
			return k->n;
		if (k->s[e - 1].key == key)
			return e - 1;
	}
}

static inline void rf__ktab_insert(rf__keyed *k, unsigned slot)
{
	uint32_t i = k->s[slot].home = rf__khash(k->s[slot].key, k->mask);
	while (k->tab[i] != 0)
		i = (i + 1) & k->mask;
	k->tab[i] = slot + 1;
}

/* Backward-shift deletion of slot v's key: later entries of the probe run move into the hole when
 * their home allows. */
static inline void rf__ktab_remove(rf__keyed *k, unsigned v)
{
	uint32_t i = k->s[v].home;
	while (k->tab[i] != v + 1)
		i = (i + 1) & k->mask;
	for (uint32_t j = (i + 1) & k->mask; k->tab[j] != 0; j = (j + 1) & k->mask) {
		uint32_t home = k->s[k->tab[j] - 1].home;
		if (((j - home) & k->mask) >= ((j - i) & k->mask)) {
			k->tab[i] = k->tab[j];
			i = j;
		}
	}
	k->tab[i] = 0;
}

static inline void rf__kunlink(rf__keyed *k, int l, unsigned i)
{
	k->s[k->s[i].ln[l].prev].ln[l].next = k->s[i].ln[l].next;
	k->s[k->s[i].ln[l].next].ln[l].prev = k->s[i].ln[l].prev;
	if (l == RF__KHB)
		k->nheldback--;
}

/* Link i into list l between a and b (neighbours, the sentinel n included). */
static inline void rf__klink(rf__keyed *k, int l, unsigned i, unsigned a, unsigned b)
{
	k->s[i].ln[l].prev = a;
	k->s[i].ln[l].next = b;
	k->s[a].ln[l].next = i;
	k->s[b].ln[l].prev = i;
	if (l == RF__KHB)
		k->nheldback++;
}

static inline void rf__kpush(rf__keyed *k, int l, unsigned i) /* at the tail */
{
	rf__klink(k, l, i, k->s[k->n].ln[l].prev, k->n);
}

/* The list an unheld key is in (from its hint flag: ask before changing it). */
static inline int rf__klist(const rf__keyed *k, unsigned i)
{
	return k->hints_bounded && k->s[i].hint ? RF__KHINT : RF__KLRU;
}

static inline void rf__kempty_set(rf__keyed *k, unsigned i, int on)
{
	if (on)
		k->empty[i / 64] |= 1ull << (i % 64);
	else
		k->empty[i / 64] &= ~(1ull << (i % 64));
}

static inline unsigned char *rf__kdata(const rf__keyed *k, unsigned slot)
{
	return k->slots + (size_t)slot * k->slot_stride;
}

/* A WAIT op on ticket t (RF__KOP_TEST, CANCEL, WAIT, WAIT_STREAM, QUIESCE: runtime/backend.h). */
static inline int rf__kop(const rf__keyed *k, unsigned mode, rf__kticket t, void *stream)
{
	return rf__backend_kwait(k->be, k->ctx, mode, t, stream);
}

/* Whether ticket t, finished, was a hint's failed file read into slot i (the backend stored it). */
static inline int rf__kread_failed(const rf__keyed *k, unsigned i, rf__kticket t)
{
	return t != 0 && (uint64_t)atomic_load_explicit(&k->failed[i], memory_order_acquire) == t;
}

/* Hint credit back (an acquired hint, or one never copied; demand copies' share), at most hint_cap. */
static inline void rf__kcredit(rf__keyed *k, size_t bytes)
{
	if (k->hints_bounded)
		k->credit = bytes < k->hint_cap - k->credit ? k->credit + bytes : k->hint_cap;
}

/* An accepted hint takes its bytes of credit (accepted only when they are there). */
static inline void rf__kdebit(rf__keyed *k, size_t bytes)
{
	if (k->hints_bounded)
		k->credit -= bytes;
}

#endif
