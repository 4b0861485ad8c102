/* base/piece.h — the one piece copier: the owner of a copy publishes it as pieces with one shared
 * cursor; threads waiting for it take pieces instead of spinning idle. The owner returns (and signals)
 * only once every piece is done, so every RAW/WAR guarantee holds: a helper copies only bytes of a copy
 * the owner has started. */
#ifndef RF_BASE_PIECE_H
#define RF_BASE_PIECE_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

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

/* Copies shorter than this are never split (rf__piece_size 0): one memcpy, no job published. */
#define RF__PIECE_WHOLE ((size_t)32 << 10)

/* The worker's side: publish n bytes as job j, copy pieces until none is left (demoted when `demote`),
 * wait until every piece a helper took is done. */
void rf__piece_copy_job(rf__piece_job *j, unsigned char *dst, const unsigned char *src, size_t n, size_t block,
			int demote);
/* The same, inline where the copy is one plain memcpy (most keyed and small-block copies). */
static inline void rf__piece_copy(rf__piece_job *j, unsigned char *dst, const unsigned char *src, size_t n,
				  size_t block, int demote)
{
	if (n < RF__PIECE_WHOLE && !demote) {
		memcpy(dst, src, n);
		return;
	}
	rf__piece_copy_job(j, dst, src, n, block, demote);
}

/* The waiter's side: while *value < v, pause-spin briefly for j's job of `block` to appear, then copy its
 * pieces until none is left. Returns the pieces copied; the caller then waits for the signal as usual. */
unsigned rf__piece_help(rf__piece_job *j, size_t block, const _Atomic int64_t *value, int64_t v);

#endif
