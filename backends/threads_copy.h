/* backends/threads_copy.h — the threads backend's copy path: the cooperative piece copier and the
 * cache handoff (CLDEMOTE) decision. Internal to backends/threads.c.
 *
 * Cooperative copy. A copy worker publishes each big copy as a job of pieces with one shared cursor;
 * the worker takes pieces from it, and so does any thread that waits for that copy's signal (in a ring,
 * the caller, about to compute the block) instead of spinning idle. The copy is complete when every
 * piece is done; only then does the worker return from the copy op and signal, as before, so every
 * RAW/WAR guarantee of the lowered program holds unchanged (the helper copies only bytes of a copy op
 * the worker has already started, i.e. after every wait that op's queue had before it). The pieces the
 * computing thread copies land in its own cache: those bytes are hot where they are read.
 *
 * Cache handoff. The worker's own pieces may be demoted (CLDEMOTE) from its core's caches to the shared
 * cache as they are written, so the computing core reads them without cross-core snoops. Whether that
 * helps depends on the machine, the block size and the compute: forceable (RINGFETCH_HANDOFF, config
 * key `handoff`: auto, off, on). */
#ifndef RF_BACKENDS_THREADS_COPY_H
#define RF_BACKENDS_THREADS_COPY_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

/* ---- cooperative copy ------------------------------------------------------------------------------ */

/* One queue's current copy job. `state` packs generation << 32 | pieces << 16 | next piece; pieces are
 * claimed by CAS on it (never past the count), so a claim also proves the job's fields are those of the
 * claimed generation: the worker rewrites them only after every claimed piece is done. */
typedef struct rf__tc_job {
	_Alignas(64) _Atomic uint64_t state;
	atomic_uint done;     /* pieces finished in the current generation */
	atomic_size_t block;  /* the block being copied (a hint for helpers; SIZE_MAX: none) */
	unsigned char *dst;   /* written by the worker before it publishes `state`, read after a claim */
	const unsigned char *src;
	size_t n, piece;
} rf__tc_job;

void rf__tc_job_init(rf__tc_job *j);

/* The piece size for an n-byte copy (0: not worth splitting, copy whole). A pure function. */
size_t rf__tc_piece(size_t n);

/* Copy n bytes as job j (the worker's side): publish the pieces, copy pieces until none is left (each
 * demoted to the shared cache when `demote`), wait until every piece taken by a helper is done. */
void rf__tc_copy(rf__tc_job *j, unsigned char *dst, const unsigned char *src, size_t n, size_t block, int demote);


/* The waiter's side: while *value < v, wait briefly (pause-spinning) for j's job of `block` to be
 * published, then take and copy its pieces until none is left. Returns the number of pieces copied;
 * the caller then waits for the signal as usual. */
unsigned rf__tc_help(rf__tc_job *j, size_t block, const _Atomic long long *value, int64_t v);

/* ---- cache handoff ------------------------------------------------------------------------------------ */

enum { RF__HO_AUTO = 0, RF__HO_OFF = 1, RF__HO_ON = 2 };

/* The decision rule, a pure function of measured samples (ns per block of copy + read, alternating
 * runs with and without the handoff): on iff the median with it is below the median without it by more
 * than 3 % (noise on a quiet machine; a loaded one mostly says off, the safe side). n >= 1. */
int rf__ho_decide(const int64_t *on, const int64_t *off, unsigned n);

/* Whether the CPU implements CLDEMOTE (CPUID.7.0:ECX[25]); elsewhere the hint is a no-op: 0. */
int rf__ho_cpu_has_cldemote(void);

/* The handoff of a threads pipeline at create: off where nothing overlaps (no copy queue, depth 1);
 * `mode` (rf__config_handoff's) when forced; else off. Sets *on and a description in why (for
 * rf_pipeline_describe). */
void rf__ho_pipeline(int mode, unsigned nq, unsigned nslots, int *on, char *why, size_t cap);

#endif
