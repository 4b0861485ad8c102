/* io/reader.h — internal: the reads of file copies, many in flight from one thread.
 *
 * A reader belongs to one thread at a time (a copy lane, the caller on "cpu", a host lane of "cuda");
 * only the doorbell (bell_fd) is written by others. rf__reader_start queues the reads of one copy
 * (a file range into a destination) and returns without waiting for the device; rf__reader_poll hands
 * back finished copies, in any order; rf__reader_wait sleeps until a copy may have finished or the
 * doorbell rang. Nothing allocates after rf__reader_create.
 *
 * How it reads:
 *  - io_uring (liburing): each copy is split into pieces, each piece one read, several in flight; the
 *    reads in flight are bounded (RF__RD_QD), pieces beyond that are submitted as earlier ones finish
 *    (by poll and wait). Reads into the registered region (rf__reader_register) are fixed-buffer reads.
 *    Where io_uring is refused (io_uring_setup fails: an old kernel, the io_uring_disabled sysctl, a
 *    seccomp filter) the reader uses pread: start reads the whole copy before it returns and poll hands
 *    it back. Never a failure; describe says which, and why.
 *  - O_DIRECT (the file's O_DIRECT descriptor) when the aligned window of the range can land in the
 *    destination: the destination is aligned to rf__file_dio_mem_align, and either the range starts on
 *    an rf__file_dio_align boundary or the caller accepts a shifted start (RF__RD_SHIFT_OK), and dst_cap
 *    holds the window [off rounded down, off + n rounded up). Otherwise buffered reads into dst, except
 *    that a range starting off the boundary without RF__RD_SHIFT_OK may be read as its window with
 *    O_DIRECT and moved down in place — whichever of the two the reader measured faster for copies of
 *    that size on this machine (rf__reader_rule).
 *  - Pieces: a copy is one read, cut only where the block layer would cut it anyway: at the largest
 *    request the file's device takes in one piece (rf__file_io_max: sysfs queue/max_sectors_kb). The
 *    device works on one large request in parallel; cutting it smaller costs a request each (on a
 *    virtual disk, an exit to the host) and buys nothing the reads of the next blocks do not.
 *  - A read that fails, or a short read that does not cover the range (the file shrank after open),
 *    fails that copy with RF_EIO; rf__reader_error names the path, the offset and errno's text. Bytes
 *    of a failed copy are never reported as read. The reader stays usable.
 *
 * Lifetimes: the destination of a copy must stay valid, and untouched by anyone else, until poll has
 * handed the copy back (or destroy returned); the file must stay open until then (the caller holds it,
 * io/file.h). */
#ifndef RF_IO_READER_H
#define RF_IO_READER_H

#include "io/file.h"

#include <stddef.h>
#include <stdint.h>

typedef struct rf__reader rf__reader;

/* Flags of rf__reader_start. */
#define RF__RD_SHIFT_OK 1u /* the data may start at dst + *shift (the aligned window fills dst) */

#define RF__RD_QD 32u                           /* reads in flight, at most (io_uring) */
#define RF__RD_PIECE_UNKNOWN ((size_t)1 << 20)  /* the largest piece when sysfs does not say */
#define RF__RD_PIECE_MAX ((size_t)4 << 20)      /* and the largest piece whatever it says */

/* Create a reader for up to max_copies copies in flight (1 .. 4096). bell_fd: an eventfd that other
 * threads write to wake rf__reader_wait, or -1 for none; the reader reads it (consuming its count) and
 * never closes it. RF_OK and *out; RF_EINVAL; RF_ENOMEM. io_uring being refused is not an error. */
int rf__reader_create(unsigned max_copies, int bell_fd, rf__reader **out);

/* Wait for every read in flight (their destinations stay written to until then), then free. NULL: no-op. */
void rf__reader_destroy(rf__reader *r);

/* Register [base, base + len) (the staging slots) as the ring's fixed buffer, replacing an earlier
 * registration; len 0 unregisters. Nothing may be in flight. A refusal (RLIMIT_MEMLOCK: ENOMEM or
 * EPERM; no io_uring) is not an error: reads into it are then plain reads, and describe says why.
 * RF_OK; RF_EINVAL (NULL r, base NULL with len > 0); RF_EBUSY (reads in flight). */
int rf__reader_register(rf__reader *r, void *base, size_t len);

/* Queue and submit the reads of one copy: n >= 1 bytes of s->f from s->off (inside the file's size at
 * open) to dst, dst_cap >= n bytes usable there. flags: 0 or RF__RD_SHIFT_OK. tag comes back from poll.
 * Never waits for the device (pread mode: reads before it returns).
 * RF_OK; RF_EBUSY (max_copies copies are in flight: poll first); RF_EINVAL (bad arguments, a range past
 * the file's size at open). A read's failure comes back from poll, never from here; a ring whose
 * submission fails for good (io_uring_enter errors other than EAGAIN, EBUSY, EINTR) is left for pread,
 * its queued reads included, and describe says so. */
int rf__reader_start(rf__reader *r, const rf__fsrc *s, size_t n, unsigned char *dst, size_t dst_cap,
		     unsigned flags, uint64_t tag);

/* Hand back one finished copy (all its pieces done), any order: 1 with *tag, *rc (RF_OK or RF_EIO) and
 * *shift (the data start at dst + *shift; 0 without RF__RD_SHIFT_OK); 0 when none has finished. Never
 * blocks; reaps completions and submits pieces waiting for room. */
int rf__reader_poll(rf__reader *r, uint64_t *tag, int *rc, size_t *shift);

/* Block until a copy may have finished or bell_fd became readable (its count is consumed). Returns at
 * once when a finished copy waits for poll, or when there is neither a read in flight nor a bell.
 * Spurious returns allowed: call poll after it. */
void rf__reader_wait(rf__reader *r);

/* The sentence of the last copy poll handed back with RF_EIO (path, offset, errno's text, or "short
 * read ...: file shrank to N bytes"); "" before any. Valid until the next poll. */
const char *rf__reader_error(const rf__reader *r);

/* Copies started and not yet handed back by poll. */
unsigned rf__reader_inflight(const rf__reader *r);

/* One line: how copies are read, e.g. "io_uring, O_DIRECT where aligned (align 512), up to 32 reads in
 * flight, slots registered" or "pread (io_uring refused: io_uring_setup: Operation not permitted), ...". */
void rf__reader_describe(const rf__reader *r, char *buf, size_t cap);

typedef struct rf__reader_counters {
	uint64_t copies;        /* copies handed back, failed ones included */
	uint64_t failed;        /* of those, RF_EIO */
	uint64_t bytes;         /* bytes of the copies handed back with RF_OK (n each) */
	uint64_t reads;         /* reads issued (pieces, resubmissions included) */
	uint64_t reads_direct;  /* of those, with O_DIRECT */
	uint64_t reads_fixed;   /* of those, into the registered region */
	uint64_t bytes_direct;  /* bytes the reads returned, O_DIRECT and buffered */
	uint64_t bytes_buffered;
	uint64_t moved;         /* copies read as their O_DIRECT window, then moved down in place */
} rf__reader_counters;

/* The counters since create. Same thread as the reader's other calls. */
void rf__reader_counters_get(const rf__reader *r, rf__reader_counters *out);

/* ---- the rule for ranges that start off the alignment (a pure function, tested on its own) -------- */

/* How a copy whose range starts off the O_DIRECT alignment, without RF__RD_SHIFT_OK, is read. */
enum { RF__RD_MOVE = 0,     /* its O_DIRECT window into dst, then memmove down by the shift */
       RF__RD_BUFFERED = 1, /* buffered reads straight into dst */
       RF__RD_NMETHODS = 2 };

#define RF__RD_PROBES 5u  /* timed copies of each method per size class before the rule decides */
#define RF__RD_CLASSES 20u /* size classes: <= 4 KiB, <= 8 KiB, ... (powers of two), the last open-ended */

typedef struct rf__rd_samples {
	float ns_per_byte[RF__RD_NMETHODS][RF__RD_PROBES];
	unsigned n[RF__RD_NMETHODS]; /* samples taken (at most RF__RD_PROBES kept) */
} rf__rd_samples;

/* The method for the next copy of a class with these samples: while either method has fewer than
 * RF__RD_PROBES samples, the one with fewer (RF__RD_MOVE on a tie), so that the two alternate; then the
 * one with the lower median time per byte, RF__RD_MOVE on a tie (it leaves the page cache alone). */
int rf__reader_rule(const rf__rd_samples *s);
/* 1 when the rule has decided for s (both methods fully sampled). */
int rf__reader_rule_decided(const rf__rd_samples *s);
/* The size class of an n-byte copy. */
unsigned rf__reader_class(size_t n);
/* The piece size for an n-byte copy aligned to `align`, on a device whose largest request is io_max
 * (0: unknown). */
size_t rf__reader_piece(size_t n, size_t align, size_t io_max);

#endif
