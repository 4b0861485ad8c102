/* base/piece.h — the one piece copier: a copy split into pieces that several threads take at once.
 *
 * The thread that owns a copy (a copy lane, a staging lane) publishes it as a job of pieces with one
 * shared cursor and takes pieces from it; so does any thread that waits for that copy (in a ring, the
 * caller, about to compute the block) instead of spinning idle. The copy is complete when every piece
 * is done; only then does the owner return from the copy op and signal, so every RAW/WAR guarantee of
 * the lowered program holds unchanged (a helper copies only bytes of a copy op the owner has already
 * started, i.e. after every wait that op's queue had before it). The pieces the computing thread
 * copies land in its own cache: those bytes are hot where they are read.
 *
 * The owner's pieces may be demoted (CLDEMOTE) from its core's caches to the shared cache as they are
 * written, so that another core reads them without cross-core snoops (backends/threads_handoff.c). */
#ifndef RF_BASE_PIECE_H
#define RF_BASE_PIECE_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

/* One queue's current copy job. `state` packs generation << 32 | pieces << 16 | next piece; pieces are
 * claimed by CAS on it (never past the count), so a claim also proves the job's fields are those of the
 * claimed generation: the worker rewrites them only after every claimed piece is done. */
typedef struct rf__piece_job {
	_Alignas(64) _Atomic uint64_t state;
	atomic_uint done;     /* pieces finished in the current generation */
	atomic_size_t block;  /* the block being copied (a hint for helpers; SIZE_MAX: none) */
	unsigned char *dst;   /* written by the worker before it publishes `state`, read after a claim */
	const unsigned char *src;
	size_t n, piece;
} rf__piece_job;

void rf__piece_init(rf__piece_job *j);

/* The piece size for an n-byte copy (0: not worth splitting, copy whole). A pure function. */
size_t rf__piece_size(size_t n);

/* Copy n bytes as job j (the worker's side): publish the pieces, copy pieces until none is left (each
 * demoted to the shared cache when `demote`), wait until every piece taken by a helper is done. */
void rf__piece_copy(rf__piece_job *j, unsigned char *dst, const unsigned char *src, size_t n, size_t block, int demote);


/* The waiter's side: while *value < v, wait briefly (pause-spinning) for j's job of `block` to be
 * published, then take and copy its pieces until none is left. Returns the number of pieces copied;
 * the caller then waits for the signal as usual. */
unsigned rf__piece_help(rf__piece_job *j, size_t block, const _Atomic int64_t *value, int64_t v);

#endif
