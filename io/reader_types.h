/* io/reader_types.h — internal: the types, constants and pure rules of the reader (io/reader.h), apart
 * from its functions so that the files under io/reader.c (io/reader_int.h) use them without taking from it. */
#ifndef RF_IO_READER_TYPES_H
#define RF_IO_READER_TYPES_H

#include <stddef.h>
#include <stdint.h>

typedef struct rf__reader rf__reader;

#define RF__READER_SHIFT_OK 1u /* rf__reader_start flag: the data may start at dst + *shift */
#define RF__READER_QD 32u                           /* reads in flight, at most (io_uring) */
#define RF__READER_PIECE_UNKNOWN ((size_t)1 << 20)  /* the largest piece when sysfs does not say */
#define RF__READER_PIECE_MAX ((size_t)4 << 20)      /* and the largest piece whatever it says */

/* The window's figures: bytes mapped (0: none), chunk bytes for the last file, its chunks, of them read
 * ahead at once now, copies served from it, bytes read into it, bytes of it touched so far. */
typedef struct rf__reader_window_stats {
	size_t bytes, chunk;
	unsigned chunks, on;
	uint64_t copies, read;
	size_t touched;
} rf__reader_window_stats;

/* How many of the window's chunks are read ahead at once. Fixed (all of them) unless chosen online
 * (rf__reader_window_online): then a pure rule over the read rates measured at each setting, tested on
 * its own. Settings are powers of two from where the search starts, climbed as base/compare.h's
 * ladder: each measurement lasts RF__READER_AHEAD_ROUNDS rounds of chunks landed, each round timed; the
 * next setting doubles while the rate rises by more than the standard error of the difference (from
 * the spread of the rounds), and goes back to the last one that paid, for good, once it does not. */
#define RF__READER_AHEAD_SETTINGS 6u /* 1, 2, 4, 8, 16, 32 chunks */
/* A measurement at `on` chunks lasts this many rounds of `on` chunks landed: the fewest whose spread says
 * something (three degrees of freedom). */
#define RF__READER_AHEAD_ROUNDS 4u
typedef struct rf__reader_ahead {
	unsigned on;  /* chunks read ahead at once now */
	unsigned max; /* the window's chunks */
	int settled;
	double rate[RF__READER_AHEAD_SETTINGS]; /* bytes per second at 1 << i chunks (0: not measured) */
	double err[RF__READER_AHEAD_SETTINGS];  /* its standard error */
} rf__reader_ahead;
/* Start at the largest setting <= from (where the search starts), or at the smallest >= need (the chunks
 * one copy may need at once) if that is more: a setting below it reads as many all the same, so its
 * rate would be another's. Within max. */
void rf__reader_ahead_start(rf__reader_ahead *a, unsigned max, unsigned need, unsigned from);
/* A measurement at a->on read `rate` bytes per second, with standard error err: the next setting. */
unsigned rf__reader_ahead_rule(rf__reader_ahead *a, double rate, double err);
/* A measurement's rate and standard error: bytes landed in `seconds`, in n rounds (a round: as many
 * chunks landed as the setting reads ahead at once) whose own rates sum to sum, their squares to sumsq.
 * The rate is bytes / seconds; its error the rounds' standard deviation / sqrt(n) (batch means: chunks
 * that land together are one round, not many samples). */
void rf__reader_ahead_sample(uint64_t bytes, double seconds, unsigned n, double sum, double sumsq, double *rate,
			     double *err);
/* A copy is served from a window of `bytes` when n <= RF__READER_WIN_SMALL(bytes): two copies at least fit
 * in it. Whether that pays is the caller's to say (it passes `ahead` or not): where the window keeps
 * more bytes in flight than the caller's own copies do. */
#define RF__READER_WIN_SMALL(bytes) ((bytes) / 2)

typedef struct rf__reader_counters {
	uint64_t copies;       /* copies handed back, failed ones included */
	uint64_t failed;       /* of those, RF_EIO */
	uint64_t reads;        /* reads issued (pieces, resubmissions included) */
	uint64_t reads_direct; /* of those, with O_DIRECT */
	uint64_t reads_fixed;  /* of those, into the registered region */
} rf__reader_counters;

/* How a copy whose range starts off the O_DIRECT alignment, without RF__READER_SHIFT_OK, is read (a pure
 * rule, tested on its own). */
enum { RF__READER_MOVE = 0,     /* its O_DIRECT window into dst, then memmove down by the shift */
       RF__READER_BUFFERED = 1, /* buffered reads straight into dst */
       RF__READER_NMETHODS = 2 };

#define RF__READER_PROBES 5u  /* timed copies of each method per size class before the rule decides */
#define RF__READER_CLASSES 20u /* size classes: <= 4 KiB, <= 8 KiB, ... (powers of two), the last open-ended */

typedef struct rf__reader_samples {
	float ns_per_byte[RF__READER_NMETHODS][RF__READER_PROBES];
	unsigned n[RF__READER_NMETHODS]; /* samples taken (at most RF__READER_PROBES kept) */
} rf__reader_samples;

/* The method for the next copy of a class: while either has fewer than RF__READER_PROBES samples, the one
 * with fewer (so they alternate); then the lower median time per byte, kept by base/compare.h's pick with
 * no margin. Ties: RF__READER_MOVE (it leaves the page cache alone). */
int rf__reader_rule(const rf__reader_samples *s);
/* 1 when the rule has decided for s (both methods fully sampled). */
int rf__reader_rule_decided(const rf__reader_samples *s);
/* The size class of an n-byte copy. */
unsigned rf__reader_class(size_t n);
/* The piece size of an n-byte copy aligned to `align`; io_max: the device's largest request (0: unknown). */
size_t rf__reader_piece(size_t n, size_t align, size_t io_max);

#endif
