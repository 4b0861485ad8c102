/* io/file.h — internal: files as sources (rf_file_*, <ringfetch/file.h>), and how the copy paths ask
 * whether a source range is a file's.
 *
 * Every open file is in one process-wide registry of mapped ranges. Classifying a memory source costs
 * one relaxed load when no file is open, else a seqlock read (no atomic read-modify-write, no lock);
 * only holding a file source takes the registry's mutex. A held file cannot be closed (RF_EBUSY). */
#ifndef RF_IO_FILE_H
#define RF_IO_FILE_H

#include "ringfetch.h"
#include "base/test_hooks.h"

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct rf_file {
	int fd;  /* buffered */
	int dfd; /* O_DIRECT, or -1 (RF_FILE_BUFFERED, or the file system refused it) */
	const unsigned char *map;
	uint64_t size;
	size_t map_len; /* the mapping's length: size rounded up to a page */
	size_t dio_align, dio_mem_align; /* O_DIRECT's of offset and length, of memory; 0 without dfd */
	size_t io_max;     /* the device's largest request (sysfs), 0 when unknown (tmpfs, overlay) */
	atomic_uint holds; /* copies that may still read the file */
	char path[];
};

/* A file source: the file and the offset of the range's first byte in it. */
typedef struct rf__fsrc {
	rf_file *f;
	uint64_t off;
} rf__fsrc;

/* A source resolved once (by the engine for a run's blocks, the keyed cache for a keyed call), read by
 * the copies with no other lookup: the caller's pointer, and its file's range (fs.f NULL: memory). */
typedef struct rf__src {
	const void *p;
	rf__fsrc fs;
} rf__src;

/* The files open in the process (io/file.c's registry, written under its lock). */
extern atomic_uint rf__files_open;

/* Is any file open in the process? A relaxed load: the fast path of every classification. */
static inline int rf__file_any(void)
{
	return atomic_load_explicit(&rf__files_open, memory_order_relaxed) != 0;
}

/* rf__file_classify when some file is open (or a test counts classifications): the registry's answer. */
int rf__file_classify_mapped(const char *who, const char *what, const void *src, size_t n, rf__src *out);

/* Resolve [src, src + n) (n >= 1) into *out, holding nothing: 0 memory (it overlaps no open file's
 * mapping), 1 inside a file's bytes; RF_EINVAL ("<who>: <what> ...") when it overlaps a mapping outside
 * the file: it ends past the file's end, starts in the mapping's last page, or runs into it from below.
 * Inline: with no file open (every keyed call of a pipeline fed from memory) it reads one counter. */
static inline int rf__file_classify(const char *who, const char *what, const void *src, size_t n, rf__src *out)
{
	if (RF__TEST_HOOK(classify) == NULL && !rf__file_any()) {
		*out = (rf__src){.p = src};
		return 0;
	}
	return rf__file_classify_mapped(who, what, src, n, out);
}

/* Hold the file of a resolved file source for a copy of its first n bytes (let go: rf__file_unhold):
 * RF_OK, or RF_EINVAL when it was closed since. Under the registry's mutex: a close cannot intervene. */
int rf__file_hold(const char *who, const char *what, const rf__src *s, size_t n);

/* Let go of one hold (any thread). */
void rf__file_unhold(rf_file *f);

/* What a file that is not a regular one is ("a FIFO", "a character device"), for messages. */
const char *rf__file_kind(mode_t mode);

/* The tries in a row of a read, or of io_uring_enter, answered EAGAIN / EBUSY / EINTR (io/reader.h: the
 * sleep between them, why there is a limit, and what follows the last). */
#define RF__FILE_TRIES 8u
#define RF__FILE_TRIES_S "8" /* RF__FILE_TRIES in words */
_Static_assert(RF__FILE_TRIES == 8, "RF__FILE_TRIES_S says RF__FILE_TRIES");
int rf__file_transient(int err);   /* "not now" (EAGAIN, EBUSY, EINTR): worth another try */
void rf__file_backoff(unsigned k); /* the sleep before try k + 1 (k >= 1 tries made) */

/* pread [off, off + len) of fd into dst until done, the file's end or an error, a "not now" tried again
 * as above. The bytes read; *err 0, or the errno of the read that failed. */
size_t rf__file_pread(int fd, void *dst, size_t len, uint64_t off, int *err);

/* The descriptor to read with: the O_DIRECT one when `direct` and the file has one. */
static inline int rf__file_fd(const rf_file *f, int direct)
{
	return direct && f->dfd >= 0 ? f->dfd : f->fd;
}

#endif
