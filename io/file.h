/* io/file.h — internal: files as sources (rf_file_*, <ringfetch/file.h>), and how the copy paths ask
 * whether a source range is a file's.
 *
 * Every open file is in one process-wide registry of mapped ranges. A copy path classifies its source
 * with rf__file_classify: a memory source costs one relaxed load when no file is open, and a seqlock
 * read (no atomic read-modify-write, no lock) otherwise; only a file source takes the registry's mutex,
 * to hold the file (a held file cannot be closed: rf_file_close returns RF_EBUSY). The holder lets go
 * with rf__file_unhold once no copy reads the file for it any more. */
#ifndef RF_IO_FILE_H
#define RF_IO_FILE_H

#include "ringfetch.h"

#include <stddef.h>
#include <stdint.h>

/* A file source: the file and the offset of the range's first byte in it. */
typedef struct rf__fsrc {
	rf_file *f;
	uint64_t off;
} rf__fsrc;

/* Is any file open in the process? A relaxed load: the fast path of every classification. */
int rf__file_any(void);

/* Classify [src, src + n) (n >= 1): 0 when it starts in no open file's mapping (memory); 1 when it lies
 * inside one (*out set; the file held when `hold`, to be let go with rf__file_unhold); RF_EINVAL when it
 * starts inside a file's mapping and ends past it (rf_errmsg: "<who>: <what>: ..."; `what` names the
 * source, e.g. "block 3"). */
int rf__file_classify(const char *who, const char *what, const void *src, size_t n, int hold, rf__fsrc *out);

/* Hold f once more / let go of one hold (any thread). A file with holds cannot be closed. */
void rf__file_hold(rf_file *f);
void rf__file_unhold(rf_file *f);

/* The descriptor to read with: the O_DIRECT one when `direct` and the file has one, else the buffered
 * one. */
int rf__file_fd(const rf_file *f, int direct);
/* Alignment O_DIRECT needs of the file offset and length, and of the destination address; 0 when the
 * file has no O_DIRECT descriptor (RF_FILE_BUFFERED, or the file system refused it). */
size_t rf__file_dio_align(const rf_file *f);
size_t rf__file_dio_mem_align(const rf_file *f);
const char *rf__file_path(const rf_file *f);
/* The largest single request of the device under the file (sysfs queue/max_sectors_kb, bounded by
 * queue/max_segments pages), read at open; 0 when sysfs does not say (no block device: tmpfs, overlay).
 * The reader (io/reader.h) sizes its pieces from it. */
size_t rf__file_io_max(const rf_file *f);

#endif
