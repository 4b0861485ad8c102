/*
 * ringfetch/file.h — files as sources of blocks (included by <ringfetch.h>; docs/files.md).
 *
 * [rf_file_data(f), rf_file_data(f) + rf_file_size(f)) is a read-only shared mapping of an open file.
 * Every copy ringfetch makes from inside it (runs, keyed use, rf_exec, every backend) reads the file
 * instead, straight into the destination slot; the library never faults the mapping in.
 *  - A source range that overlaps a file's mapping must lie inside the file's bytes: one that ends past
 *    the file's end, starts past it (in the mapping's last page, whose tail is not in the file), or
 *    starts below the mapping and runs into it is RF_EINVAL at the call that names it, before any work.
 *    Sources of one run may mix memory and several files.
 *  - A failed or short read (the file shrank) fails that run with RF_EIO after draining (no compute
 *    sees a partial block; the pipeline stays usable), or that acquire (the key stays absent). A failed
 *    hint leaves its key absent and counts as wasted. Never SIGBUS, never a block with stale bytes.
 *  - The bytes must not change while open (as for memory). On "cuda" an acquire of a file source may
 *    wait on the host (the read into a pinned staging buffer).
 *  - slot_bytes a multiple of 4096: every slot (host) and staging buffer (pinned) is 4 KiB aligned.
 */
#ifndef RINGFETCH_FILE_H
#define RINGFETCH_FILE_H

#include "../ringfetch.h"

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct rf_file rf_file;

/** rf_file_open flag: never O_DIRECT; every read goes through the page cache. */
#define RF_FILE_BUFFERED 1u

/**
 * Open the regular file at `path` read-only as a source of blocks, and map it. Never blocks on a FIFO
 * or a device. Thread-safe; a child of fork() (also one forked while another thread opens or closes
 * files) opens, reads from and closes files as its parent does.
 * \return RF_OK and *out; RF_EINVAL (path or out NULL, flags not 0 / RF_FILE_BUFFERED); RF_ENOTSUP
 *         (a directory, FIFO, device or socket; a pseudo file of proc, sysfs, debugfs and the like,
 *         whose size is not its bytes; an empty file: rf_errmsg() says which); RF_EIO (open, fstat or
 *         mmap failed: rf_errmsg() names the path and errno's text; also when the second, O_DIRECT
 *         descriptor cannot be opened, e.g. no descriptor left under RLIMIT_NOFILE: a file is read
 *         without O_DIRECT only where its file system refuses O_DIRECT, or with RF_FILE_BUFFERED, which
 *         opens one descriptor); RF_ENOMEM. On failure *out is untouched and nothing is left open.
 */
RF_EXTERN int rf_file_open(const char *path, unsigned flags, rf_file **out);

/** The start of the file's read-only mapping; NULL for NULL. */
RF_EXTERN const void *rf_file_data(const rf_file *f);

/** The file's size when it was opened; 0 for NULL. */
RF_EXTERN uint64_t rf_file_size(const rf_file *f);

/**
 * Read the `len` bytes at `offset` of the file into `dst` (any alignment; through the page cache), with
 * the descriptor the file was opened with: they are that file's bytes even where another file was since
 * renamed over its path (a header read by reopening the path may not be). Never touches the mapping.
 * A read answered EAGAIN, EBUSY or EINTR is tried again after a pause, as the copies' reads are (8 tries
 * in a row at most, then RF_EIO). Thread-safe with the file's copies and other reads; not with
 * rf_file_close of `f`.
 * \return RF_OK; RF_EINVAL (f NULL, dst NULL with len > 0, or [offset, offset + len) not inside the
 *         file's size at open); RF_EIO (the read failed, or came back short because the file shrank:
 *         rf_errmsg() names the path, the offset and errno's text).
 */
RF_EXTERN int rf_file_read(const rf_file *f, uint64_t offset, void *dst, size_t len);

/**
 * Unmap and close. The file must stay open while a pipeline may still copy from it: until its keys
 * are evicted or the pipeline is destroyed (hits read no source).
 * \return RF_OK, also for NULL; RF_EBUSY (nothing changes) while a copy from it is in flight, a keyed
 *         hint of it included that is held back (queued, its copy not yet issued: the copy lanes are
 *         busy). Such a hint lets go once its copy lands, or when its key is evicted, acquired, or
 *         dropped by a run, or its pipeline is destroyed.
 */
RF_EXTERN int rf_file_close(rf_file *f);

#ifdef __cplusplus
}
#endif

#endif /* RINGFETCH_FILE_H */
