/* base/piece.c — the piece copier (base/piece.h). */
#include "base/pause.h"
#include "base/test_hooks.h"
#include "base/piece.h"

#include <sched.h>
#include <string.h>

#define RF__PIECE_MIN_PIECE (RF__PIECE_WHOLE / 2)
#define RF__PIECE_MAX_PIECES 4096u /* fits the 16-bit fields of rf__piece_job.state */
/* Pauses a waiter looks for a job to help (restarted after each piece) before its plain wait. */
#define RF__PIECE_HELP_PAUSES 256u

void rf__piece_init(rf__piece_job *j)
{
	*j = (rf__piece_job){.block = SIZE_MAX};
}

/* At least 16 KiB (a claim is one contended CAS, a piece microseconds of copying), about 16 pieces per
 * copy so that the last piece, copied alone, is small; multiples of 4 KiB, so pieces share no page. */
size_t rf__piece_size(size_t n)
{
	if (n < 2 * RF__PIECE_MIN_PIECE)
		return 0;
	size_t p = (n / 16 + 4095) & ~(size_t)4095;
	if (p < RF__PIECE_MIN_PIECE)
		p = RF__PIECE_MIN_PIECE;
	while ((n + p - 1) / p > RF__PIECE_MAX_PIECES)
		p *= 2;
	return p;
}

/* Push [p, p+n) from this core's caches to the shared cache (CLDEMOTE: a NOP where not implemented). */
static void rf__piece_demote(const unsigned char *p, size_t n)
{
#if defined(__x86_64__)
	for (size_t i = 0; i < n; i += 64)
		__asm__ __volatile__(".byte 0x0f, 0x1c, 0x00" ::"a"(p + i) : "memory"); /* cldemote (%rax) */
#else
	(void)p, (void)n;
#endif
}

/* Take the next piece of the current generation, if any. A successful acquire CAS reads from the release
 * sequence headed by the worker's publishing store, so the job's fields are visible. */
static int rf__piece_claim(rf__piece_job *j, unsigned *piece)
{
	uint64_t s = atomic_load_explicit(&j->state, memory_order_acquire);
	for (;;) {
		unsigned count = (unsigned)(s >> 16) & 0xffffu, next = (unsigned)s & 0xffffu;
		if (next >= count)
			return 0;
		if (atomic_compare_exchange_weak_explicit(&j->state, &s, s + 1, memory_order_acq_rel,
							  memory_order_acquire)) {
			*piece = next;
			return 1;
		}
	}
}

static void rf__piece_do_piece(rf__piece_job *j, unsigned i, int demote)
{
	size_t o = (size_t)i * j->piece, k = j->n - o < j->piece ? j->n - o : j->piece;
	memcpy(j->dst + o, j->src + o, k);
	if (demote)
		rf__piece_demote(j->dst + o, k);
	/* release: the piece's bytes happen before the worker sees it done (and so before its signal) */
	atomic_fetch_add_explicit(&j->done, 1, memory_order_release);
}

void rf__piece_copy_job(rf__piece_job *j, unsigned char *dst, const unsigned char *src, size_t n, size_t block,
			int demote)
{
	size_t piece = rf__piece_size(n);
	if (piece == 0) {
		memcpy(dst, src, n);
		if (demote)
			rf__piece_demote(dst, n);
		return;
	}
	unsigned count = (unsigned)((n + piece - 1) / piece);
	/* The previous generation is complete (seen with acquire below): nobody reads the fields now, and no
	 * claim of it can succeed (its cursor is at its count). */
	j->dst = dst;
	j->src = src;
	j->n = n;
	j->piece = piece;
	atomic_store_explicit(&j->done, 0, memory_order_relaxed);
	uint64_t gen = (atomic_load_explicit(&j->state, memory_order_relaxed) >> 32) + 1;
	atomic_store_explicit(&j->state, gen << 32 | (uint64_t)count << 16, memory_order_release);
	atomic_store_explicit(&j->block, block, memory_order_release);
	if (RF__TEST_HOOK(piece_copy) != NULL)
		RF__TEST_HOOK(piece_copy)(0);
	unsigned i;
	while (rf__piece_claim(j, &i))
		rf__piece_do_piece(j, i, demote);
	/* Helpers finish the pieces they took: at most one piece each, a few microseconds. */
	for (unsigned spins = 0; atomic_load_explicit(&j->done, memory_order_acquire) < count; spins++) {
		if (spins < 4096)
			RF__PAUSE();
		else
			sched_yield(); /* a preempted helper: give it the core back (oversubscribed machines) */
	}
	atomic_store_explicit(&j->block, SIZE_MAX, memory_order_relaxed);
}

unsigned rf__piece_help(rf__piece_job *j, size_t block, const _Atomic int64_t *value, int64_t v)
{
	unsigned helped = 0, i;
	/* Only the copy of `block`: helping a later one would delay this waiter's own next step. */
	for (unsigned spins = 0; spins < RF__PIECE_HELP_PAUSES; spins++) {
		if (atomic_load_explicit(value, memory_order_acquire) >= v)
			break;
		/* acquire: pairs with the release store of the hint, after the job's state is published */
		if (atomic_load_explicit(&j->block, memory_order_acquire) == block) {
			if (!rf__piece_claim(j, &i))
				break; /* every piece is taken: the worker signals once they are done */
			if (RF__TEST_HOOK(piece_copy) != NULL)
				RF__TEST_HOOK(piece_copy)(1);
			rf__piece_do_piece(j, i, 0); /* the helper is the reader: its pieces stay in its own cache */
			helped++;
			spins = 0;
			continue;
		}
		RF__PAUSE();
	}
	return helped;
}
