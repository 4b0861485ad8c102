/* io/file.c — rf_file_open / data / size / close, and the registry of open files (io/file.h).
 *
 * A file is opened twice: buffered, and (unless RF_FILE_BUFFERED) O_DIRECT on the same inode, reopened
 * through /proc/self/fd so that a path replaced in between cannot give another file. The mapping only
 * gives the bytes addresses: the library never reads it.
 *
 * The registry is a sorted array of mappings under a seqlock: readers retry when a writer moved in
 * between and never write shared memory; writers (open, close) serialise on a mutex, which fork()
 * takes too (pthread_atfork), so that a child never inherits it locked. An outgrown array stays
 * allocated (a reader may still search it); arrays double, so that costs at most as much as the
 * largest. */
#define _GNU_SOURCE /* statx with the direct-I/O alignment, O_DIRECT */
#include "io/file.h"
#include "base/alloc.h"
#include "base/error.h"
#include "base/pause.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <linux/magic.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/sysmacros.h>
#include <time.h>
#include <unistd.h>

typedef struct rf__freg_ent {
	_Atomic uintptr_t lo, hi, end; /* the mapping [lo, end); the file's bytes [lo, hi) */
	_Atomic(rf_file *) f;
} rf__freg_ent;

typedef struct rf__freg_arr {
	struct rf__freg_arr *older; /* outgrown arrays, kept for readers still searching them */
	unsigned cap;
	rf__freg_ent e[];
} rf__freg_arr;

static struct {
	pthread_mutex_t mu;
	atomic_uint seq; /* odd while a writer changes the array */
	_Atomic(rf__freg_arr *) arr;
} rf__freg = {PTHREAD_MUTEX_INITIALIZER, 0, NULL};
atomic_uint rf__files_open; /* the array's entries */

/* fork() while another thread opens or closes a file would leave mu locked in the child (its owner
 * does not exist there) and, inside a write section, the seqlock odd: the child's next open would block
 * for ever and each classification spin. So the prepare handler takes mu: no writer is inside at fork
 * (every write section is under mu, so the seqlock is even), and parent and child let it go. Nothing
 * allocates or registers handlers while holding mu, so waiting for it here cannot deadlock with another
 * prepare handler (a malloc's, run before or after this one). */
static void rf__freg_fork_prepare(void)
{
	pthread_mutex_lock(&rf__freg.mu);
}

static void rf__freg_fork_release(void)
{
	pthread_mutex_unlock(&rf__freg.mu);
}

/* The handlers, registered by the first open; RF_ENOMEM (no open) while pthread_atfork cannot. */
static int rf__freg_fork_register(void)
{
	static pthread_mutex_t reg_mu = PTHREAD_MUTEX_INITIALIZER;
	static atomic_int done;
	if (atomic_load_explicit(&done, memory_order_acquire))
		return RF_OK;
	pthread_mutex_lock(&reg_mu);
	int rc = atomic_load_explicit(&done, memory_order_relaxed) ? 0
		 : pthread_atfork(rf__freg_fork_prepare, rf__freg_fork_release, rf__freg_fork_release);
	if (rc == 0)
		atomic_store_explicit(&done, 1, memory_order_release);
	pthread_mutex_unlock(&reg_mu);
	return rc == 0 ? RF_OK : RF_ENOMEM;
}

/* Where an address falls: the mapping that contains it (f, NULL if none), and the first mapping above
 * it (next, NULL if none). */
typedef struct rf__freg_hit {
	rf_file *f, *next;
	uintptr_t lo, hi, end; /* f's mapping [lo, end), its bytes [lo, hi) */
	uintptr_t next_lo;
} rf__freg_hit;

/* The registry is a seqlock whose data are loaded with acquire and stored with release rather than
 * fenced: the same guarantee (a reader that saw a writer's datum sees its opening increment when it
 * checks the sequence again, so it retries), in a form ThreadSanitizer models (it does not model fences,
 * and gcc refuses them under it with -Werror at -O2). Free on x86. */
#define RF__SEQ_LD memory_order_acquire
#define RF__SEQ_ST memory_order_release

/* A seqlock read. */
static void rf__freg_find(uintptr_t a, rf__freg_hit *out)
{
	for (;;) {
		unsigned s1 = atomic_load_explicit(&rf__freg.seq, memory_order_acquire);
		if (s1 & 1u) {
			RF__PAUSE();
			continue;
		}
		rf__freg_arr *arr = atomic_load_explicit(&rf__freg.arr, memory_order_acquire);
		unsigned n = atomic_load_explicit(&rf__files_open, RF__SEQ_LD);
		rf__freg_hit h = {0};
		if (arr != NULL) {
			n = n < arr->cap ? n : arr->cap;
			unsigned lo = 0, up = n; /* first entry with lo > a */
			while (lo < up) {
				unsigned mid = lo + (up - lo) / 2;
				if (atomic_load_explicit(&arr->e[mid].lo, RF__SEQ_LD) <= a)
					lo = mid + 1;
				else
					up = mid;
			}
			if (lo > 0 && a < (h.end = atomic_load_explicit(&arr->e[lo - 1].end, RF__SEQ_LD))) {
				h.f = atomic_load_explicit(&arr->e[lo - 1].f, RF__SEQ_LD);
				h.lo = atomic_load_explicit(&arr->e[lo - 1].lo, RF__SEQ_LD);
				h.hi = atomic_load_explicit(&arr->e[lo - 1].hi, RF__SEQ_LD);
			}
			if (lo < n) {
				h.next = atomic_load_explicit(&arr->e[lo].f, RF__SEQ_LD);
				h.next_lo = atomic_load_explicit(&arr->e[lo].lo, RF__SEQ_LD);
			}
		}
		if (atomic_load_explicit(&rf__freg.seq, memory_order_relaxed) == s1) {
			*out = h;
			return;
		}
	}
}

static void rf__freg_write_begin(void)
{
	atomic_fetch_add_explicit(&rf__freg.seq, 1, memory_order_relaxed); /* the data's stores: RF__SEQ_ST */
}

static void rf__freg_write_end(void)
{
	atomic_fetch_add_explicit(&rf__freg.seq, 1, memory_order_release);
}

static void rf__freg_set(rf__freg_ent *d, uintptr_t lo, uintptr_t hi, uintptr_t end, rf_file *f)
{
	atomic_store_explicit(&d->lo, lo, RF__SEQ_ST);
	atomic_store_explicit(&d->hi, hi, RF__SEQ_ST);
	atomic_store_explicit(&d->end, end, RF__SEQ_ST);
	atomic_store_explicit(&d->f, f, RF__SEQ_ST);
}

static void rf__freg_move(rf__freg_ent *d, const rf__freg_ent *s)
{
	rf__freg_set(d, atomic_load_explicit(&s->lo, memory_order_relaxed),
		     atomic_load_explicit(&s->hi, memory_order_relaxed),
		     atomic_load_explicit(&s->end, memory_order_relaxed),
		     atomic_load_explicit(&s->f, memory_order_relaxed));
}

/* Insert f's range: takes and lets go of mu. RF_ENOMEM when the array cannot grow. An array is
 * allocated with mu let go (nothing allocates under it: rf__freg_fork_prepare). */
static int rf__freg_insert(rf_file *f)
{
	rf__freg_arr *spare = NULL, *arr;
	unsigned n;
	pthread_mutex_lock(&rf__freg.mu);
	for (;;) {
		arr = atomic_load_explicit(&rf__freg.arr, memory_order_relaxed);
		n = atomic_load_explicit(&rf__files_open, memory_order_relaxed);
		if (arr != NULL && n < arr->cap)
			break;
		unsigned cap = arr ? arr->cap * 2 : 16;
		if (spare != NULL && spare->cap == cap) {
			spare->older = arr;
			for (unsigned i = 0; i < n; i++)
				rf__freg_move(&spare->e[i], &arr->e[i]);
			atomic_store_explicit(&rf__freg.arr, spare, memory_order_release);
			arr = spare;
			spare = NULL;
			break;
		}
		pthread_mutex_unlock(&rf__freg.mu); /* another open may grow it meanwhile: then look again */
		free(spare);
		if ((spare = rf__calloc(1, sizeof *spare + cap * sizeof spare->e[0])) == NULL)
			return RF_ENOMEM;
		spare->cap = cap;
		pthread_mutex_lock(&rf__freg.mu);
	}
	uintptr_t lo = (uintptr_t)f->map;
	unsigned i = n;
	rf__freg_write_begin();
	for (; i > 0 && atomic_load_explicit(&arr->e[i - 1].lo, memory_order_relaxed) > lo; i--)
		rf__freg_move(&arr->e[i], &arr->e[i - 1]);
	rf__freg_set(&arr->e[i], lo, lo + (uintptr_t)f->size, lo + f->map_len, f);
	atomic_store_explicit(&rf__files_open, n + 1, RF__SEQ_ST);
	rf__freg_write_end();
	pthread_mutex_unlock(&rf__freg.mu);
	free(spare);
	return RF_OK;
}

/* Remove f's range (mu held). */
static void rf__freg_remove(rf_file *f)
{
	rf__freg_arr *arr = atomic_load_explicit(&rf__freg.arr, memory_order_relaxed);
	unsigned n = atomic_load_explicit(&rf__files_open, memory_order_relaxed), i = 0;
	while (i < n && atomic_load_explicit(&arr->e[i].f, memory_order_relaxed) != f)
		i++;
	if (i == n)
		return;
	rf__freg_write_begin();
	for (; i + 1 < n; i++)
		rf__freg_move(&arr->e[i], &arr->e[i + 1]);
	atomic_store_explicit(&rf__files_open, n - 1, RF__SEQ_ST);
	rf__freg_write_end();
}

int rf__file_classify_mapped(const char *who, const char *what, const void *src, size_t n, rf__src *out)
{
	if (RF__TEST_HOOK(classify) != NULL) /* then it comes here with no file open too: the search finds none */
		RF__TEST_HOOK(classify)(src, n);
	uintptr_t a = (uintptr_t)src;
	rf__freg_hit h;
	rf__freg_find(a, &h);
	if (h.f == NULL) {
		/* Memory, unless it runs into the next mapping: its first bytes would be copied from memory
		 * and the rest from the file's pages (or their tail), which is neither source. */
		if (h.next != NULL && n > h.next_lo - a)
			return rf__err(RF_EINVAL, "%s: %s starts %" PRIuPTR " bytes before file %s and runs into its "
						  "mapping: a source lies inside one file or in no file at all", who, what,
				       h.next_lo - a, h.next->path);
		*out = (rf__src){.p = src};
		return 0;
	}
	if (a >= h.hi) /* the rest of the mapping's last page: zeros that are not in the file */
		return rf__err(RF_EINVAL, "%s: %s starts %" PRIuPTR " bytes past the end of file %s (in its mapping's "
					  "last page, which holds no bytes of the file)", who, what, a - h.hi,
			       h.f->path);
	if (n > h.hi - a)
		return rf__err(RF_EINVAL, "%s: %s starts inside file %s at offset %" PRIuPTR " and ends %zu bytes past "
					  "its end", who, what, h.f->path, a - h.lo, n - (size_t)(h.hi - a));
	*out = (rf__src){.p = src, .fs = {.f = h.f, .off = (uint64_t)(a - h.lo)}};
	return 1;
}

int rf__file_hold(const char *who, const char *what, const rf__src *s, size_t n)
{
	/* Found again under the mutex: a close in between removed the range (or it is another file's now). */
	uintptr_t a = (uintptr_t)s->p;
	rf__freg_hit h;
	pthread_mutex_lock(&rf__freg.mu);
	rf__freg_find(a, &h);
	int same = h.f == s->fs.f && a < h.hi && n <= h.hi - a;
	if (same)
		atomic_fetch_add_explicit(&s->fs.f->holds, 1, memory_order_relaxed);
	pthread_mutex_unlock(&rf__freg.mu);
	return same ? RF_OK : rf__err(RF_EINVAL, "%s: %s lies in a file closed while it was named", who, what);
}

void rf__file_unhold(rf_file *f)
{
	/* release: the copy's reads of f happen before a close that sees no hold. */
	atomic_fetch_sub_explicit(&f->holds, 1, memory_order_release);
}

/* A number from the queue/ directory of the device holding st (sysfs), or 0. */
static unsigned long rf__file_queue(const struct stat *st, const char *name)
{
	char p[128];
	unsigned long v = 0;
	for (int i = 0; i < 2 && v == 0; i++) { /* the device, else the disk of a partition */
		snprintf(p, sizeof p, "/sys/dev/block/%u:%u/%squeue/%s", major(st->st_dev), minor(st->st_dev),
			 i ? "../" : "", name);
		FILE *fp = fopen(p, "re");
		if (fp == NULL)
			continue;
		if (fscanf(fp, "%lu", &v) != 1)
			v = 0;
		fclose(fp);
	}
	return v;
}

/* The largest request the block layer sends the device in one piece: max_sectors_kb, and no more than
 * max_segments pages (a user buffer's pages are not physically contiguous, so each is a segment). 0 when
 * sysfs does not say (no block device under the file system: tmpfs, overlay, network). */
static size_t rf__file_io_max_of(const struct stat *st)
{
	unsigned long kb = rf__file_queue(st, "max_sectors_kb"), segs = rf__file_queue(st, "max_segments");
	long page = sysconf(_SC_PAGESIZE);
	size_t v = (size_t)kb << 10;
	if (segs != 0 && page > 0 && segs * (unsigned long)page < v)
		v = (size_t)(segs * (unsigned long)page);
	return v;
}

/* The O_DIRECT descriptor and its alignment: what statx(STATX_DIOALIGN) reports, else the device's
 * logical block size, else a page. Where the file system refuses O_DIRECT (EINVAL at open, or statx's
 * alignment 0) dfd stays -1 and reads go through the page cache, as the describe line says ("O_DIRECT
 * where the file and the range allow it"). Any other failure (EMFILE: no descriptor left) fails the
 * open, RF_EIO naming it, instead of a file that silently reads everything through the page cache. */
static int rf__file_direct(const char *who, rf_file *f, const struct stat *st)
{
	char p[64];
	snprintf(p, sizeof p, "/proc/self/fd/%d", f->fd);
	const int oflags = O_RDONLY | O_DIRECT | O_CLOEXEC | O_NOCTTY | O_NONBLOCK;
	int d = open(p, oflags);
	if (d < 0 && errno == ENOENT) /* no /proc: the path again (the inode is checked below) */
		d = open(f->path, oflags);
	if (d < 0 && errno == EINVAL)
		return RF_OK;
	const char *op = "open";
	struct stat ds;
	if (d < 0 || (op = "fstat", fstat(d, &ds) != 0)) {
		int e = errno;
		if (d >= 0)
			close(d);
		return rf__err(e == ENOMEM ? RF_ENOMEM : RF_EIO, "%s: %s: the O_DIRECT descriptor: %s: %s "
								 "(RF_FILE_BUFFERED opens the file without it)", who,
			       f->path, op, strerror(e));
	}
	if (ds.st_dev != st->st_dev || ds.st_ino != st->st_ino) {
		close(d);
		return rf__err(RF_EIO, "%s: %s: the path names another file than it did a moment ago (replaced "
				       "while it was opened)", who, f->path);
	}
	int fl = fcntl(d, F_GETFL);
	if (fl < 0 || fcntl(d, F_SETFL, fl & ~O_NONBLOCK) != 0) {
		int e = errno;
		close(d);
		return rf__err(RF_EIO, "%s: %s: the O_DIRECT descriptor: fcntl: %s", who, f->path, strerror(e));
	}
	struct statx sx;
	int dio = statx(f->fd, "", AT_EMPTY_PATH, STATX_DIOALIGN, &sx) == 0 && (sx.stx_mask & STATX_DIOALIGN);
	if (dio && sx.stx_dio_offset_align == 0) { /* the file system says: no direct I/O for this file */
		close(d);
		return RF_OK;
	}
	size_t off = dio ? sx.stx_dio_offset_align : 0, mem = dio ? sx.stx_dio_mem_align : 0;
	if (off == 0)
		off = (size_t)rf__file_queue(st, "logical_block_size");
	if (off == 0 || (off & (off - 1)) != 0)
		off = 4096;
	if (mem == 0 || (mem & (mem - 1)) != 0)
		mem = off;
	f->dfd = d;
	f->dio_align = off;
	f->dio_mem_align = mem;
	return RF_OK;
}

const char *rf__file_kind(mode_t m)
{
	return S_ISDIR(m) ? "a directory" : S_ISFIFO(m) ? "a FIFO" : S_ISCHR(m) ? "a character device" :
	       S_ISBLK(m) ? "a block device" : S_ISSOCK(m) ? "a socket" : "not a regular file";
}

/* The name of a pseudo file system (its files' bytes are made as they are read: the size fstat gives,
 * 0 or a page, is not theirs, and they cannot be mapped), or NULL. */
static const char *rf__file_pseudo_fs(int fd)
{
	static const struct {
		unsigned long magic;
		const char *name;
	} fs[] = {{PROC_SUPER_MAGIC, "proc"},	    {SYSFS_MAGIC, "sysfs"},
		  {DEBUGFS_MAGIC, "debugfs"},	    {TRACEFS_MAGIC, "tracefs"},
		  {SECURITYFS_MAGIC, "securityfs"}, {CGROUP_SUPER_MAGIC, "cgroup"},
		  {CGROUP2_SUPER_MAGIC, "cgroup2"}, {BPF_FS_MAGIC, "bpf"}};
	struct statfs sf;
	if (fstatfs(fd, &sf) != 0)
		return NULL;
	for (size_t i = 0; i < sizeof fs / sizeof fs[0]; i++)
		if ((unsigned long)sf.f_type == fs[i].magic)
			return fs[i].name;
	return NULL;
}

/* Unmap, close and free f, as far as it got. */
static void rf__file_free(rf_file *f)
{
	if (f->map != NULL)
		munmap((void *)f->map, (size_t)f->size);
	if (f->dfd >= 0)
		close(f->dfd);
	if (f->fd >= 0)
		close(f->fd);
	free(f);
}

int rf_file_open(const char *path, unsigned flags, rf_file **out)
{
	static const char who[] = "rf_file_open";
	if (path == NULL || out == NULL)
		return rf__err(RF_EINVAL, "%s: %s is NULL", who, path == NULL ? "path" : "out");
	if (flags & ~RF_FILE_BUFFERED)
		return rf__err(RF_EINVAL, "%s: unknown flags %#x", who, flags & ~RF_FILE_BUFFERED);
	if (rf__freg_fork_register() != RF_OK)
		return rf__err(RF_ENOMEM, "%s: pthread_atfork: out of memory", who);
	size_t len = strlen(path);
	rf_file *f = rf__calloc(1, sizeof *f + len + 1);
	if (f == NULL)
		return rf__err(RF_ENOMEM, "%s: out of memory", who);
	memcpy(f->path, path, len + 1);
	f->dfd = -1;
	int rc;
	const char *op = "open";
	struct stat st;
	/* O_NONBLOCK: a FIFO or a device must not block the open; regular files ignore the flag. */
	if ((f->fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY)) < 0) {
		/* A socket (ENXIO), or a device without its driver, cannot be opened at all: say what it is. */
		int e = errno;
		if (stat(path, &st) != 0 || S_ISREG(st.st_mode)) {
			errno = e;
			goto fail_sys;
		}
	} else if (fstat(f->fd, &st) != 0) {
		op = "fstat";
		goto fail_sys;
	}
	if (!S_ISREG(st.st_mode)) {
		rc = rf__err(RF_ENOTSUP, "%s: %s is %s", who, path, rf__file_kind(st.st_mode));
		goto fail;
	}
	const char *pseudo = rf__file_pseudo_fs(f->fd);
	if (pseudo != NULL) {
		rc = rf__err(RF_ENOTSUP, "%s: %s is a pseudo file (%s): its bytes are made as they are read, its "
					 "size (%" PRIu64 ") is not theirs, and it cannot be mapped", who, path, pseudo,
			     (uint64_t)st.st_size);
		goto fail;
	}
	if (st.st_size == 0) {
		rc = rf__err(RF_ENOTSUP, "%s: %s is empty (0 bytes): nothing to read", who, path);
		goto fail;
	}
	/* Back to blocking: io_uring answers -EAGAIN instead of waiting for reads of an O_NONBLOCK file. */
	int fl = fcntl(f->fd, F_GETFL);
	op = "fcntl";
	if (fl < 0 || fcntl(f->fd, F_SETFL, fl & ~O_NONBLOCK) != 0)
		goto fail_sys;
	f->size = (uint64_t)st.st_size;
	f->io_max = rf__file_io_max_of(&st);
	if ((uint64_t)(size_t)f->size != f->size || f->size > (uint64_t)PTRDIFF_MAX) {
		rc = rf__err(RF_EIO, "%s: %s: %" PRIu64 " bytes do not fit the address space", who, path, f->size);
		goto fail;
	}
	void *m = mmap(NULL, (size_t)f->size, PROT_READ, MAP_SHARED | MAP_NORESERVE, f->fd, 0);
	if (m == MAP_FAILED) {
		rc = rf__err(errno == ENOMEM ? RF_ENOMEM : RF_EIO, "%s: %s: mmap of %" PRIu64 " bytes: %s", who, path,
			     f->size, strerror(errno));
		goto fail;
	}
	f->map = m;
	long pg = sysconf(_SC_PAGESIZE);
	size_t page = pg > 0 ? (size_t)pg : 4096;
	f->map_len = ((size_t)f->size + page - 1) & ~(page - 1); /* the last page's tail is mapped too */
	if (!(flags & RF_FILE_BUFFERED) && (rc = rf__file_direct(who, f, &st)) != RF_OK)
		goto fail;
	if (rf__freg_insert(f) != RF_OK) {
		rc = rf__err(RF_ENOMEM, "%s: out of memory", who);
		goto fail;
	}
	*out = f;
	return RF_OK;
fail_sys:
	rc = rf__err(RF_EIO, "%s: %s: %s: %s", who, path, op, strerror(errno));
fail:
	rf__file_free(f);
	return rc;
}

const void *rf_file_data(const rf_file *f)
{
	return f ? f->map : NULL;
}

uint64_t rf_file_size(const rf_file *f)
{
	return f ? f->size : 0;
}

int rf_file_read(const rf_file *f, uint64_t offset, void *dst, size_t len)
{
	if (f == NULL || (dst == NULL && len > 0))
		return rf__err(RF_EINVAL, "rf_file_read: %s is NULL", f == NULL ? "f" : "dst");
	if (offset > f->size || len > f->size - offset)
		return rf__err(RF_EINVAL, "rf_file_read: %s: [%" PRIu64 ", +%zu) is not inside its %" PRIu64 " bytes",
			       f->path, offset, len, f->size);
	int err;
	size_t got = rf__file_pread(f->fd, dst, len, offset, &err);
	if (got < len)
		return rf__err(RF_EIO, "rf_file_read: %s: at offset %" PRIu64 ": %s", f->path, offset + got,
			       err != 0 ? strerror(err) : "the file ends there (it shrank)");
	return RF_OK;
}

int rf__file_transient(int err)
{
	return err == EAGAIN || err == EBUSY || err == EINTR;
}

void rf__file_backoff(unsigned k)
{
	long us = 50L << (k > 7 ? 7 : k - 1);
	struct timespec d = {0, (us > 5000 ? 5000 : us) * 1000L};
	nanosleep(&d, NULL);
}

size_t rf__file_pread(int fd, void *dst, size_t len, uint64_t off, int *err)
{
	size_t got = 0;
	unsigned tries = 0;
	*err = 0;
	while (got < len) {
		ssize_t k = pread(fd, (unsigned char *)dst + got, len - got, (off_t)(off + got));
		if (k < 0 && rf__file_transient(errno) && ++tries < RF__FILE_TRIES) {
			rf__file_backoff(tries);
			continue;
		}
		if (k <= 0) {
			*err = k < 0 ? errno : 0;
			break;
		}
		got += (size_t)k;
		tries = 0;
	}
	return got;
}

int rf_file_close(rf_file *f)
{
	if (f == NULL)
		return RF_OK;
	pthread_mutex_lock(&rf__freg.mu);
	unsigned holds = atomic_load_explicit(&f->holds, memory_order_acquire);
	if (holds == 0)
		rf__freg_remove(f);
	pthread_mutex_unlock(&rf__freg.mu);
	if (holds != 0)
		return rf__err(RF_EBUSY, "rf_file_close: %s: %u cop%s from it may still be in flight or held back as "
					 "hints (evict their keys, or destroy the pipeline, first)", f->path, holds,
			       holds == 1 ? "y" : "ies");
	rf__file_free(f);
	return RF_OK;
}
