/* io/file.h — internal: files as sources (rf_file_*, <ringfetch/file.h>), and how the copy paths ask
 * whether a source range is a file's.
 *
 * Every open file is in one process-wide registry of mapped ranges. Classifying a memory source costs
 * one relaxed load when no file is open, else a seqlock read (no atomic read-modify-write, no lock);
 * only holding a file source takes the registry's mutex. A held file cannot be closed (RF_EBUSY). */
#ifndef RF_IO_FILE_H
#define RF_IO_FILE_H

#include "ringfetch.h"

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

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

/* Is any file open in the process? A relaxed load: the fast path of every classification. */
int rf__file_any(void);

/* Classify [src, src + n) (n >= 1): 0 when it overlaps no open file's mapping (memory); 1 when it lies
 * inside a file's bytes (*out set; the file held when `hold`, to be let go with rf__file_unhold);
 * RF_EINVAL when it overlaps a mapping without lying inside the file: it ends past the file's end,
 * starts in the mapping's last page past the end, or starts below the mapping and runs into it
 * (rf_errmsg: "<who>: <what> ..."); RF_EINVAL too when `hold` and the file was closed meanwhile. */
int rf__file_classify(const char *who, const char *what, const void *src, size_t n, int hold, rf__fsrc *out);

/* Let go of one hold (any thread). */
void rf__file_unhold(rf_file *f);

/* The descriptor to read with: the O_DIRECT one when `direct` and the file has one. */
static inline int rf__file_fd(const rf_file *f, int direct)
{
	return direct && f->dfd >= 0 ? f->dfd : f->fd;
}

static inline size_t rf__file_dio_align(const rf_file *f)
{
	return f->dio_align;
}

#endif
