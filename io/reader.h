/* io/reader.h — internal: the reads of file copies, many in flight from one thread.
 *
 * A reader belongs to one thread at a time (a copy lane, the caller on "cpu", a host lane of "cuda");
 * only the doorbell (bell_fd) is written by others. Nothing allocates after rf__reader_create.
 *  - io_uring: a copy is cut into pieces, one read each, at most RF__READER_QD in flight; the rest are
 *    submitted as reads finish (poll, wait); reads into the registered region are fixed-buffer reads.
 *    Where io_uring is refused (old kernel, io_uring_disabled, seccomp) start preads the whole copy
 *    through the page cache (its read-ahead keeps a stream's next reads in flight; the copy's pages are
 *    dropped once it lands) and poll hands it back: never a failure; describe says which and why; no
 *    read-ahead window is started. An io_uring_setup that failed for want of a descriptor or memory
 *    (EMFILE, ENFILE, ENOMEM, EAGAIN) is tried again by a start that finds nothing in flight, at most
 *    five times a second: a shortage does not last.
 *  - O_DIRECT (with io_uring) when the range's aligned window can land in dst: dst aligned to
 *    f->dio_mem_align, the range on a dio_align boundary or RF__READER_SHIFT_OK given, and dst_cap
 *    holding the window. A range off the boundary without RF__READER_SHIFT_OK is read buffered, or as
 *    its O_DIRECT window moved down in place, whichever was measured faster for its size
 *    (rf__reader_rule).
 *  - A piece is cut only where the block layer would cut anyway (f->io_max): smaller requests
 *    each cost a request and buy nothing the reads of the next blocks do not.
 *  - A failed read, or a short one (the file shrank), fails that copy with RF_EIO (rf__reader_error
 *    names path, offset and errno's text); the reader stays usable.
 *  - "Not now" (EAGAIN, EBUSY, EINTR) from a read or from io_uring_enter is tried again after a short
 *    sleep (50 us, doubling), 8 times in a row at most (about 6 ms): a kernel that answers one of them
 *    for ever must not spin the thread for ever. Then io_uring_enter's ring is given up for pread (for
 *    good; describe says why), a read the ring keeps refusing is made with pread, and a pread that
 *    keeps refusing fails its copy with RF_EIO ("... (every try of 8)").
 * dst must stay valid and untouched, and the file open, until poll has handed the copy back. */
#ifndef RF_IO_READER_H
#define RF_IO_READER_H

#include "io/file.h"

typedef struct rf__reader rf__reader;

#define RF__READER_SHIFT_OK 1u /* rf__reader_start flag: the data may start at dst + *shift */
/* rf__reader_start flag: no stream of copies follows this one (a keyed copy): without io_uring too it is
 * read O_DIRECT where it can, since the page cache's read-ahead would only read past it for nothing */
#define RF__READER_ALONE 2u
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

/* A reader for up to max_copies (1..4096) copies in flight. bell_fd: an eventfd others write to wake
 * rf__reader_wait (its count is consumed, it is never closed), or -1. RF_OK; RF_EINVAL; RF_ENOMEM. */
int rf__reader_create(unsigned max_copies, int bell_fd, rf__reader **out);

/* Wait for every read in flight (they write their destinations until then), then free. NULL: no-op. */
void rf__reader_destroy(rf__reader *r);

/* Register [base, base + len) (the slots) as the fixed buffer, replacing an earlier one; len 0
 * unregisters. A refusal (RLIMIT_MEMLOCK, no io_uring) is not an error: describe says why.
 * RF_OK; RF_EINVAL (NULL r, base NULL with len > 0); RF_EBUSY (reads in flight). */
int rf__reader_register(rf__reader *r, void *base, size_t len);

/* Queue and submit the reads of one copy: n >= 1 bytes of s->f from s->off to dst (dst_cap >= n
 * usable). flags: 0 or RF__READER_SHIFT_OK; tag comes back from poll. Never waits for the device (pread
 * mode reads before it returns). RF_OK; RF_EBUSY (max_copies in flight: poll first); RF_EINVAL (bad
 * arguments, a range past the file's size at open). Read failures come back from poll; a ring whose
 * submission fails for good is left for pread, its queued reads included. */
int rf__reader_start(rf__reader *r, const rf__fsrc *s, size_t n, unsigned char *dst, size_t dst_cap,
		     unsigned flags, uint64_t tag);

/* The read-ahead window: copies that follow one another in one file (a ring's blocks, up to half the window
 * each) are read ahead of the slots as large O_DIRECT requests into the window's memory, and each copy is
 * moved from there into its destination once its bytes have landed. The disk pays per request, and a ring of a
 * few slots keeps a few requests of a block each in flight; the window keeps up to `bytes` in flight in
 * requests as large as the device takes (f->io_max, at most a quarter of the window), read only as far as the
 * caller says the run goes (rf__reader_start_ahead's `ahead`), never past it. A chunk that fails or comes back
 * short leaves its copies to be read on their own (so RF_EIO names what failed). Without io_uring (pread) the
 * chunks are read one at a time, each when a copy needs it: large requests still, nothing read further ahead
 * (no read would overlap it), and the setting is not chosen online. The memory is mapped here, on
 * huge pages where the kernel gives them (each physically contiguous run of a destination is a request segment
 * to the disk), and its pages touched as chunks first use them: a window that reads few chunks ahead (chosen
 * online) touches few. bytes 0 frees it. RF_OK; RF_EBUSY (copies in flight); RF_ENOMEM. */
int rf__reader_window(rf__reader *r, size_t bytes);
/* Choose the chunks in flight online (on != 0) from the next window on, starting from `from` bytes
 * read ahead (or the chunks one copy needs, if more), or read with all of them (0). */
void rf__reader_window_online(rf__reader *r, int on, size_t from);
void rf__reader_window_get(const rf__reader *r, rf__reader_window_stats *out);
/* Whether a copy of n bytes is small enough to be served from a window of `bytes`: two copies at least
 * fit in it. Whether that pays is the caller's to say (it passes `ahead` or not): where the window keeps
 * more bytes in flight than the caller's own copies do. */
int rf__reader_window_serves(size_t bytes, size_t n);
/* The reads of copies read on their own (not from the window), chosen online (on != 0): from the next
 * such copy with O_DIRECT through the ring on, at most a setting's pieces are in flight, climbed from
 * `from` bytes (or the pieces that copy needs, if more) by rf__reader_ahead's rule, as the window's
 * chunks are; the copies beyond wait for room, in order. 0 lifts the cap and leaves the setting as
 * chosen, for rf__reader_reads_get. Without io_uring nothing is chosen (reads go one at a time). */
void rf__reader_reads_online(rf__reader *r, int on, size_t from);
/* The last such choice into *a; returns the bytes of its pieces (0: none started). */
size_t rf__reader_reads_get(const rf__reader *r, rf__reader_ahead *a);
/* "chosen online, GB/s at 4: 1.90, 8: 2.41; more did not pay" for a setting chosen online, into buf (cap
 * bytes, truncated); returns the length it would have (as snprintf). */
size_t rf__reader_ahead_words(const rf__reader_ahead *a, char *buf, size_t cap);
/* Forget what the window holds: no later copy is served from bytes read before this call (a run's
 * start: the file may have changed since the last run read ahead). */
void rf__reader_window_drop(rf__reader *r);
/* A run's end: wait for the window's reads still in flight (a run that stopped early leaves some) and
 * let go of its file, which the caller may close now. No-op while window copies wait (not all polled). */
void rf__reader_window_release(rf__reader *r);

/* rf__reader_start, and `ahead`: how many bytes of the same file right after [s->off, s->off + n) the
 * caller will copy next, in order, in copies of the same kind (pass at least the window's size when
 * more follow; 0 when none or unknown). With a window and a small copy, the window reads ahead that far. */
int rf__reader_start_ahead(rf__reader *r, const rf__fsrc *s, size_t n, unsigned char *dst, size_t dst_cap,
			   unsigned flags, uint64_t tag, size_t ahead);

/* Hand back one finished copy, any order: 1 with *tag, *rc (RF_OK or RF_EIO) and *shift (data start
 * at dst + *shift; 0 without RF__READER_SHIFT_OK); 0 when none has finished. Never waits for the device,
 * only the pauses between tries of a refused read and the preads of a ring given up. */
int rf__reader_poll(rf__reader *r, uint64_t *tag, int *rc, size_t *shift);

/* Block until a copy may have finished or the bell rang; at once when a finished copy waits for poll
 * or there is neither a read in flight nor a bell. Spurious returns allowed: poll after it. */
void rf__reader_wait(rf__reader *r);

/* The sentence of the last copy poll handed back with RF_EIO; "" before any. Valid until next poll. */
const char *rf__reader_error(const rf__reader *r);

/* One line: how copies are read now (io_uring or pread and why, O_DIRECT, registration, the rule each
 * size class of unaligned ranges has settled on). */
void rf__reader_describe(const rf__reader *r, char *buf, size_t cap);
/* A number that changes whenever the describe line would (the reader's thread): a class's rule decided,
 * the ring given up or set up again, a registration. */
unsigned rf__reader_gen(const rf__reader *r);
/* Whether reads go through the ring now (0: pread, each read done before start returns). */
int rf__reader_async(const rf__reader *r);
/* Reads in flight on a ring (what rf__reader_wait can wait for besides the bell); 0 in pread mode. */
unsigned rf__reader_reads_out(const rf__reader *r);

#ifdef RF_TESTING /* the testing build only: the counters since create (the reader's thread), and the
		   * copies started and not yet handed back by poll */
void rf__reader_counters_get(const rf__reader *r, rf__reader_counters *out);
unsigned rf__reader_inflight(const rf__reader *r);
#endif

#endif