/* tests/test_reader.c — the file reader (io/reader.h): bytes at many offsets and sizes, aligned and
 * not, shifted and not, into registered and unregistered memory; many copies in flight; a file that
 * shrinks; the pread fallback under a seccomp filter that refuses io_uring; io_uring_enter and pread
 * answering EAGAIN / EBUSY / EINTR for ever (seccomp again: bounded tries, then pread or RF_EIO); no
 * descriptor left at a pipeline's first file use (RLIMIT_NOFILE); a refused registration; the
 * doorbell; O_DIRECT leaving the page cache cold (mincore); the unaligned-range rule on synthetic
 * samples; the signals a flight of copies holds back and what its owner's hook hears (io/flight.h).
 * Files live in the working directory (the build tree: a disk that takes O_DIRECT). */
#define _GNU_SOURCE
#include "base/test_hooks.h"
#include "io/file.h"
#include "io/reader.h"
#include "ringfetch.h"
#include "io/flight.h"
#include "seccomp_refuse.h"

#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <linux/capability.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static int have_io_uring(void);

static unsigned char byte_at(uint64_t i, unsigned seed)
{
	uint64_t z = (i >> 3) * 0x9e3779b97f4a7c15ull + seed;
	return (unsigned char)((z >> 29) ^ (i & 7) ^ (z >> 47));
}

/* A file of n bytes (byte i = byte_at(i, seed)) in the working directory. */
static char *make_file(size_t n, unsigned seed)
{
	char *path = strdup("rf_test_reader_XXXXXX");
	int fd = mkstemp(path);
	cr_assert(fd >= 0);
	unsigned char *b = malloc(1 << 20);
	for (size_t done = 0; done < n;) {
		size_t k = n - done < (1u << 20) ? n - done : (1u << 20);
		for (size_t i = 0; i < k; i++)
			b[i] = byte_at(done + i, seed);
		cr_assert_eq(write(fd, b, k), (ssize_t)k);
		done += k;
	}
	free(b);
	close(fd);
	return path;
}

static void drop(char *path)
{
	unlink(path);
	free(path);
}

static void *xalign(size_t a, size_t n)
{
	void *p = NULL;
	cr_assert_eq(posix_memalign(&p, a, n), 0);
	return p;
}

/* Poll until the copy tagged `tag` and no other comes back. */
static int finish_one(rf__reader *r, uint64_t want, size_t *shift)
{
	uint64_t tag;
	int rc;
	while (rf__reader_poll(r, &tag, &rc, shift) == 0)
		rf__reader_wait(r);
	cr_assert_eq(tag, want);
	return rc;
}

static int check_bytes(const unsigned char *d, uint64_t off, size_t n, unsigned seed)
{
	for (size_t i = 0; i < n; i++)
		if (d[i] != byte_at(off + i, seed))
			return 0;
	return 1;
}

/* One copy of [off, off + n) with the flags, into dst (cap bytes); checks the bytes. */
static void one_copy(rf__reader *r, rf_file *f, uint64_t off, size_t n, unsigned char *dst, size_t cap,
		     unsigned flags, unsigned seed)
{
	rf__fsrc s = {f, off};
	memset(dst, 0xee, cap);
	cr_assert_eq(rf__reader_start(r, &s, n, dst, cap, flags, off * 31 + n), RF_OK, "%s", rf_errmsg());
	size_t shift = 99;
	int rc = finish_one(r, off * 31 + n, &shift);
	cr_assert_eq(rc, RF_OK, "off %llu n %zu: %s", (unsigned long long)off, n, rf__reader_error(r));
	if (!(flags & RF__READER_SHIFT_OK))
		cr_assert_eq(shift, 0u);
	cr_assert(shift + n <= cap);
	cr_assert(check_bytes(dst + shift, off, n, seed), "wrong bytes: off %llu n %zu flags %u shift %zu",
		  (unsigned long long)off, n, flags, shift);
}

/* Offsets and sizes around every boundary that matters: alignment, pieces, the file's end. */
static void sweep(rf__reader *r, rf_file *f, size_t fsize, unsigned char *dst, size_t cap, unsigned flags,
		  unsigned seed)
{
	static const size_t sizes[] = {1, 7, 511, 512, 4095, 4096, 4097, 65536, 65537, 100000, 262144,
				       1048576, 1048576 + 4096, 3u << 20, 5u << 20};
	static const size_t offs[] = {0, 1, 8, 32, 511, 512, 4095, 4096, 4097, 65536 + 32, 1048576 + 4000};
	for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
		for (size_t j = 0; j < sizeof offs / sizeof offs[0]; j++) {
			size_t n = sizes[i];
			if (offs[j] + n <= fsize && n + 8192 <= cap)
				one_copy(r, f, offs[j], n, dst, cap, flags, seed);
			if (n + 8192 <= cap && n <= fsize) /* the same size ending at the file's end (a partial block) */
				one_copy(r, f, fsize - n - (j % 3), n, dst, cap, flags, seed);
		}
}

static const size_t FSIZE = (12u << 20) + 1234; /* not a multiple of any alignment */

Test(reader, ranges_aligned_and_not)
{
	char *path = make_file(FSIZE, 5);
	rf_file *f;
	cr_assert_eq(rf_file_open(path, 0, &f), RF_OK, "%s", rf_errmsg());
	cr_assert(f->dio_align != 0, "the test directory must take O_DIRECT (not a tmpfs)");
	rf__reader *r;
	cr_assert_eq(rf__reader_create(8, -1, &r), RF_OK);
	size_t cap = (6u << 20) + 16384;
	unsigned char *dst = xalign(4096, cap);
	sweep(r, f, FSIZE, dst, cap, 0, 5);
	sweep(r, f, FSIZE, dst, cap, RF__READER_SHIFT_OK, 5);
	sweep(r, f, FSIZE, dst + 1, cap - 1, 0, 5); /* an unaligned destination: buffered */
	/* Registered: fixed-buffer reads. */
	cr_assert_eq(rf__reader_register(r, dst, cap), RF_OK);
	rf__reader_counters c0, c1;
	rf__reader_counters_get(r, &c0);
	sweep(r, f, FSIZE, dst, cap, RF__READER_SHIFT_OK, 5);
	sweep(r, f, FSIZE, dst, cap, 0, 5);
	rf__reader_counters_get(r, &c1);
	char d[512];
	rf__reader_describe(r, d, sizeof d);
	if (strncmp(d, "io_uring", 8) == 0) {
		cr_assert(strstr(d, "slots registered") != NULL, "%s", d);
		cr_assert(c1.reads_fixed > c0.reads_fixed, "%s", d);
	}
	cr_assert_eq(c1.failed, 0u);
	if (have_io_uring()) {
		cr_assert(c1.reads_direct > c0.reads_direct, "%s", d);
		/* The unaligned copies without SHIFT_OK have been timed: some size classes are decided. */
		cr_assert(strstr(d, "unaligned ranges: ") != NULL, "%s", d);
	} else { /* preads go through the page cache: no O_DIRECT, so nothing to decide for unaligned ones */
		cr_assert_eq(c1.reads_direct, c0.reads_direct, "%s", d);
		cr_assert(strstr(d, "unaligned ranges: ") == NULL, "%s", d);
	}
	cr_assert_eq(rf__reader_inflight(r), 0u);
	rf__reader_destroy(r);
	free(dst);
	cr_assert_eq(rf_file_close(f), RF_OK);
	drop(path);
}

Test(reader, buffered_file_and_tiny_destination)
{
	char *path = make_file(FSIZE, 9);
	rf_file *f;
	cr_assert_eq(rf_file_open(path, RF_FILE_BUFFERED, &f), RF_OK, "%s", rf_errmsg());
	rf__reader *r;
	cr_assert_eq(rf__reader_create(2, -1, &r), RF_OK);
	size_t cap = (6u << 20) + 16384;
	unsigned char *dst = xalign(4096, cap);
	sweep(r, f, FSIZE, dst, cap, RF__READER_SHIFT_OK, 9);
	rf__reader_counters c;
	rf__reader_counters_get(r, &c);
	cr_assert_eq(c.reads_direct, 0u, "RF_FILE_BUFFERED: never O_DIRECT");
	cr_assert_eq(rf_file_close(f), RF_OK);
	/* dst_cap == n at an unaligned offset: no room for the window, so buffered, bytes exact. */
	cr_assert_eq(rf_file_open(path, 0, &f), RF_OK);
	for (size_t n = 1; n < 70000; n = n * 3 + 1)
		one_copy(r, f, 4096 * 3 + 17, n, dst, n, 0, 9);
	rf__reader_destroy(r);
	free(dst);
	cr_assert_eq(rf_file_close(f), RF_OK);
	drop(path);
}

/* Many copies in flight at once, each to its own destination, more than the ring takes: the rest wait
 * in the pending FIFO and start as reads come back. */
Test(reader, many_in_flight)
{
	char *path = make_file(FSIZE, 11);
	rf_file *f;
	cr_assert_eq(rf_file_open(path, 0, &f), RF_OK);
	enum { N = 48 };
	rf__reader *r;
	cr_assert_eq(rf__reader_create(N, -1, &r), RF_OK);
	size_t slot = 256u << 10;
	unsigned char *dst = xalign(4096, N * slot);
	cr_assert_eq(rf__reader_register(r, dst, N * slot), RF_OK);
	for (int round = 0; round < 4; round++) {
		uint64_t off[N];
		size_t n[N];
		int seen[N] = {0};
		memset(dst, 0, N * slot);
		for (unsigned i = 0; i < N; i++) {
			off[i] = ((uint64_t)(i * 7919 + round * 104729) % (FSIZE - slot)) & ~(uint64_t)(round & 1 ? 0 : 4095);
			n[i] = slot - 8192 - (i * 37 % 4096);
			rf__fsrc s = {f, off[i]};
			cr_assert_eq(rf__reader_start(r, &s, n[i], dst + i * slot, slot, RF__READER_SHIFT_OK, i), RF_OK);
		}
		rf__fsrc s = {f, 0};
		cr_assert_eq(rf__reader_start(r, &s, 10, dst, slot, 0, 99), RF_EBUSY);
		cr_assert_eq(rf__reader_inflight(r), (unsigned)N);
		for (unsigned k = 0; k < N; k++) {
			uint64_t tag;
			int rc;
			size_t shift;
			while (rf__reader_poll(r, &tag, &rc, &shift) == 0)
				rf__reader_wait(r);
			cr_assert(tag < N && !seen[tag]);
			seen[tag] = 1;
			cr_assert_eq(rc, RF_OK, "%s", rf__reader_error(r));
			cr_assert(check_bytes(dst + tag * slot + shift, off[tag], n[tag], 11), "copy %llu", (unsigned long long)tag);
		}
	}
	rf__reader_counters c;
	rf__reader_counters_get(r, &c);
	cr_assert_eq(c.copies, 4u * N);
	cr_assert(N > RF__READER_QD && c.reads >= 4u * N, "%llu reads for %llu copies", (unsigned long long)c.reads,
		  (unsigned long long)c.copies);
	rf__reader_destroy(r);
	free(dst);
	cr_assert_eq(rf_file_close(f), RF_OK);
	drop(path);
}

/* Destroy with reads in flight waits for them (ASan would see a write into freed memory otherwise). */
Test(reader, destroy_waits)
{
	char *path = make_file(FSIZE, 2);
	rf_file *f;
	cr_assert_eq(rf_file_open(path, 0, &f), RF_OK);
	rf__reader *r;
	cr_assert_eq(rf__reader_create(4, -1, &r), RF_OK);
	unsigned char *dst = xalign(4096, 8u << 20);
	for (unsigned i = 0; i < 4; i++) {
		rf__fsrc s = {f, (uint64_t)i << 20};
		cr_assert_eq(rf__reader_start(r, &s, 2u << 20, dst + ((size_t)i << 21), 2u << 20, 0, i), RF_OK);
	}
	rf__reader_destroy(r);
	cr_assert(check_bytes(dst, 0, 2u << 20, 2));
	free(dst);
	cr_assert_eq(rf_file_close(f), RF_OK);
	drop(path);
}

Test(reader, bad_arguments)
{
	char *path = make_file(10000, 1);
	rf_file *f;
	cr_assert_eq(rf_file_open(path, 0, &f), RF_OK);
	rf__reader *r;
	cr_assert_eq(rf__reader_create(0, -1, &r), RF_EINVAL);
	cr_assert_eq(rf__reader_create(1, -1, NULL), RF_EINVAL);
	cr_assert_eq(rf__reader_create(1, -1, &r), RF_OK);
	unsigned char buf[64];
	rf__fsrc s = {f, 9990};
	cr_assert_eq(rf__reader_start(r, &s, 11, buf, 64, 0, 0), RF_EINVAL, "past the end");
	cr_assert_eq(rf__reader_start(r, &s, 10, buf, 9, 0, 0), RF_EINVAL, "dst_cap < n");
	cr_assert_eq(rf__reader_start(r, &s, 0, buf, 9, 0, 0), RF_EINVAL, "n 0");
	cr_assert_eq(rf__reader_start(r, &s, 1, buf, 9, 4, 0), RF_EINVAL, "flags");
	cr_assert_eq(rf__reader_register(r, NULL, 10), RF_EINVAL);
	cr_assert_eq(rf__reader_start(r, &s, 10, buf, 64, 0, 7), RF_OK);
	cr_assert_eq(rf__reader_register(r, buf, 64), RF_EBUSY);
	size_t shift;
	cr_assert_eq(finish_one(r, 7, &shift), RF_OK);
	cr_assert(check_bytes(buf, 9990, 10, 1));
	rf__reader_destroy(r);
	rf__reader_destroy(NULL);
	cr_assert_eq(rf_file_close(f), RF_OK);
	drop(path);
}

/* The file shrinks after open: a copy past the new end is RF_EIO with a sentence naming the path, the
 * offset and the new size; a copy inside it still works; nothing faults (the mapping is never read). */
static void shrink_check(unsigned flags_open)
{
	char *path = make_file(4u << 20, 3);
	rf_file *f;
	cr_assert_eq(rf_file_open(path, flags_open, &f), RF_OK);
	int fd = open(path, O_WRONLY);
	cr_assert(fd >= 0);
	cr_assert_eq(ftruncate(fd, (1u << 20) + 100), 0);
	close(fd);
	rf__reader *r;
	cr_assert_eq(rf__reader_create(4, -1, &r), RF_OK);
	unsigned char *dst = xalign(4096, 2u << 20);
	static const uint64_t offs[] = {101, 4096, 1u << 20, (2u << 20) + 33}; /* 101: one byte past */
	for (unsigned i = 0; i < 4; i++) {
		rf__fsrc s = {f, offs[i]};
		memset(dst, 0, 2u << 20);
		cr_assert_eq(rf__reader_start(r, &s, 1u << 20, dst, 2u << 20, RF__READER_SHIFT_OK, i), RF_OK);
		size_t shift;
		int rc = finish_one(r, i, &shift);
		cr_assert_eq(rc, RF_EIO, "offset %llu: a copy past the new end must fail", (unsigned long long)offs[i]);
		const char *e = rf__reader_error(r);
		cr_assert(strstr(e, path) != NULL && strstr(e, "offset") != NULL && strstr(e, "shrank to 1048676 bytes"),
			  "%s", e);
	}
	/* Two copies fail before either is polled: each one's sentence names an offset inside its own range. */
	static const uint64_t two[] = {(2u << 20) + 33, 3u << 20};
	for (unsigned i = 0; i < 2; i++) {
		rf__fsrc s = {f, two[i]};
		cr_assert_eq(rf__reader_start(r, &s, 256u << 10, dst + ((size_t)i << 20), 1u << 20, RF__READER_SHIFT_OK, 10 + i), RF_OK);
	}
	struct timespec ts = {0, 50 * 1000 * 1000};
	nanosleep(&ts, NULL); /* both come back before the first poll */
	for (unsigned k = 0; k < 2; k++) {
		uint64_t tag;
		int rc;
		size_t shift;
		while (rf__reader_poll(r, &tag, &rc, &shift) == 0)
			rf__reader_wait(r);
		cr_assert(tag == 10 || tag == 11);
		cr_assert_eq(rc, RF_EIO);
		const char *e = strstr(rf__reader_error(r), "offset ");
		cr_assert_not_null(e, "%s", rf__reader_error(r));
		unsigned long long at = strtoull(e + 7, NULL, 10), lo = two[tag - 10] & ~4095ull;
		cr_assert(at >= lo && at < two[tag - 10] + (256u << 10), "copy at %llu: the sentence says offset %llu: %s",
			  (unsigned long long)two[tag - 10], at, rf__reader_error(r));
	}
	one_copy(r, f, 10, (1u << 20) + 90, dst, 2u << 20, 0, 3); /* still inside: fine */
	rf__reader_counters c;
	rf__reader_counters_get(r, &c);
	cr_assert_eq(c.failed, 6u);
	rf__reader_destroy(r);
	free(dst);
	cr_assert_eq(rf_file_close(f), RF_OK);
	drop(path);
}

Test(reader, file_shrinks) { shrink_check(0); }
Test(reader, file_shrinks_buffered) { shrink_check(RF_FILE_BUFFERED); }

/* ---- the doorbell --------------------------------------------------------------------------------- */

typedef struct ringer {
	int fd;
	int delay_ms;
} ringer;

static void *ring_later(void *arg)
{
	ringer *g = arg;
	struct timespec ts = {0, (long)g->delay_ms * 1000000L};
	while (nanosleep(&ts, &ts) != 0 && errno == EINTR) /* the rest of it, after a signal */
		;
	uint64_t one = 1;
	cr_assert_eq(write(g->fd, &one, sizeof one), (ssize_t)sizeof one);
	return NULL;
}

static double now_s(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* wait sleeps until the bell rings from another thread, and a ring before the wait is not lost. */
static void bell_check(int efd_flags)
{
	int efd = eventfd(0, EFD_CLOEXEC | efd_flags);
	cr_assert(efd >= 0);
	rf__reader *r;
	cr_assert_eq(rf__reader_create(2, efd, &r), RF_OK);
	for (int k = 0; k < 3; k++) {
		ringer g = {efd, 150};
		pthread_t t;
		double t0 = now_s();
		cr_assert_eq(pthread_create(&t, NULL, ring_later, &g), 0);
		rf__reader_wait(r);
		double dt = now_s() - t0;
		pthread_join(t, NULL);
		char d[256];
		rf__reader_describe(r, d, sizeof d);
		cr_assert(dt >= 0.1, "wait returned after %.3f s, before the bell rang (%s)", dt, d);
	}
	uint64_t one = 1;
	cr_assert_eq(write(efd, &one, sizeof one), (ssize_t)sizeof one);
	double t0 = now_s();
	rf__reader_wait(r); /* rung already: returns at once */
	cr_assert(now_s() - t0 < 5);
	rf__reader_destroy(r);
	close(efd);
}

Test(reader, bell_wakes_wait) { bell_check(0); }
Test(reader, bell_wakes_wait_nonblocking) { bell_check(EFD_NONBLOCK); }

Test(reader, wait_returns_without_bell_or_reads)
{
	rf__reader *r;
	cr_assert_eq(rf__reader_create(2, -1, &r), RF_OK);
	rf__reader_wait(r); /* nothing to wait for: returns */
	rf__reader_destroy(r);
}

/* ---- the page cache stays cold under O_DIRECT ------------------------------------------------------ */

static size_t resident_pages(const void *map, size_t len)
{
	size_t np = (len + 4095) / 4096, n = 0;
	unsigned char *v = malloc(np);
	cr_assert_eq(mincore((void *)map, len, v), 0);
	for (size_t i = 0; i < np; i++)
		n += v[i] & 1;
	free(v);
	return n;
}

Test(reader, direct_reads_leave_the_page_cache_cold)
{
	size_t size = 8u << 20;
	char *path = make_file(size, 4);
	int fd = open(path, O_RDONLY);
	cr_assert_eq(fdatasync(fd), 0);
	cr_assert_eq(posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED), 0);
	rf_file *f;
	cr_assert_eq(rf_file_open(path, 0, &f), RF_OK);
	const void *map = rf_file_data(f);
	cr_assert_eq(resident_pages(map, size), 0u, "the file should start cold");
	rf__reader *r;
	cr_assert_eq(rf__reader_create(4, -1, &r), RF_OK);
	unsigned char *dst = xalign(4096, size);
	one_copy(r, f, 0, size, dst, size, 0, 4);
	/* preads read through the page cache and drop the pages of each copy once it landed */
	cr_assert_eq(resident_pages(map, size), 0u, "%s reads left pages in the page cache",
		     have_io_uring() ? "O_DIRECT" : "dropped");
	one_copy(r, f, 4096 + 100, (1u << 20), dst, 2u << 20, RF__READER_SHIFT_OK, 4);
	if (have_io_uring()) /* (the page cache's read-ahead past a pread copy stays, as for any buffered read) */
		cr_assert_eq(resident_pages(map, size), 0u, "O_DIRECT reads left pages in the page cache");
	/* The negative control: a buffered read of the same file fills the cache, and mincore sees it. */
	rf_file *b;
	cr_assert_eq(rf_file_open(path, RF_FILE_BUFFERED, &b), RF_OK);
	one_copy(r, b, 0, 1u << 20, dst, size, 0, 4);
	cr_assert(resident_pages(map, size) >= 256, "mincore should see the buffered read");
	rf__reader_destroy(r);
	free(dst);
	cr_assert_eq(rf_file_close(b), RF_OK);
	cr_assert_eq(rf_file_close(f), RF_OK);
	close(fd);
	drop(path);
}

/* ---- refusals: io_uring under seccomp, registration without CAP_IPC_LOCK -------------------------- */

#ifndef RF_AUDIT_ARCH
#error "tests/test_reader.c: the seccomp filter needs this architecture's AUDIT_ARCH"
#endif

/* Refuse io_uring_setup with EPERM, as a container's seccomp profile does. */
static int refuse_io_uring(void)
{
	refusal r = {__NR_io_uring_setup, EPERM};
	return refuse(&r, 1);
}

#define NO_IO_URING 77 /* a child's exit status: the test needs io_uring, which this system refuses */

/* Run fn on the file at path in a forked child; its exit status (0 = pass, NO_IO_URING = skipped) is the
 * test's. Messages on stderr. A child that hangs is killed by its alarm (SIGALRM): a failure, not a stuck
 * suite. The file is dropped once the child is gone, before the verdict: a skip or a failure ends the
 * test there, and the file would stay behind. */
static void in_child(int (*fn)(const char *path), char *path)
{
	pid_t pid = fork();
	cr_assert(pid >= 0);
	if (pid == 0) {
		alarm(30);
		_exit(fn(path));
	}
	int st;
	pid_t waited = waitpid(pid, &st, 0);
	drop(path);
	cr_assert_eq(waited, pid);
	cr_assert(!WIFSIGNALED(st), "child killed by signal %d%s", WTERMSIG(st),
		  WTERMSIG(st) == SIGALRM ? " (its alarm: it hung)" : "");
	if (WIFEXITED(st) && WEXITSTATUS(st) == NO_IO_URING)
		cr_skip_test("this kernel or container refuses io_uring: nothing to take away from the reader");
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child failed: status %d", st);
}

/* How a reader made here reads: what its describe line begins with. */
static int reader_says(const char *prefix)
{
	rf__reader *r;
	if (rf__reader_create(1, -1, &r) != RF_OK)
		return 0;
	char d[512];
	rf__reader_describe(r, d, sizeof d);
	rf__reader_destroy(r);
	return strncmp(d, prefix, strlen(prefix)) == 0;
}

/* 1 if a reader made here reads through io_uring. */
static int have_io_uring(void)
{
	return reader_says("io_uring");
}

#define NO_LIBURING "pread (built without liburing)"

#define CHILD_CHECK(cond, ...)                                                                             \
	do {                                                                                               \
		if (!(cond)) {                                                                             \
			fprintf(stderr, __VA_ARGS__);                                                      \
			fputc('\n', stderr);                                                               \
			return 1;                                                                          \
		}                                                                                          \
	} while (0)

/* Copies through r: aligned, unaligned, shifted; 0 when every byte is right. */
static int child_copies(rf__reader *r, rf_file *f, unsigned seed)
{
	size_t cap = 3u << 20;
	unsigned char *dst = aligned_alloc(4096, cap);
	static const uint64_t offs[] = {0, 32, 4096, 12345};
	for (unsigned i = 0; i < 4; i++)
		for (unsigned fl = 0; fl < 2; fl++) {
			rf__fsrc s = {f, offs[i]};
			size_t n = (2u << 20) - 77, shift;
			CHILD_CHECK(rf__reader_start(r, &s, n, dst, cap, fl, i) == RF_OK, "start: %s", rf_errmsg());
			uint64_t tag;
			int rc;
			while (rf__reader_poll(r, &tag, &rc, &shift) == 0)
				rf__reader_wait(r);
			CHILD_CHECK(tag == i && rc == RF_OK, "copy %u: rc %d: %s", i, rc, rf__reader_error(r));
			CHILD_CHECK(check_bytes(dst + shift, offs[i], n, seed), "copy %u: wrong bytes", i);
		}
	free(dst);
	return 0;
}

static int pread_child(const char *path)
{
	const char *want = reader_says(NO_LIBURING) ? NO_LIBURING
						   : "pread (io_uring refused: io_uring_setup: Operation not permitted)";
	CHILD_CHECK(refuse_io_uring() == 0, "seccomp: %s", strerror(errno));
	int efd = eventfd(0, EFD_CLOEXEC);
	rf_file *f;
	rf__reader *r;
	CHILD_CHECK(rf_file_open(path, 0, &f) == RF_OK, "open: %s", rf_errmsg());
	CHILD_CHECK(rf__reader_create(4, efd, &r) == RF_OK, "create: %s", rf_errmsg());
	void *reg = aligned_alloc(4096, 1u << 20);
	CHILD_CHECK(rf__reader_register(r, reg, 1u << 20) == RF_OK, "register");
	if (child_copies(r, f, 6) != 0)
		return 1;
	char d[512];
	rf__reader_describe(r, d, sizeof d);
	CHILD_CHECK(strncmp(d, want, strlen(want)) == 0, "%s", d);
	CHILD_CHECK(strstr(d, "slots not registered") != NULL, "%s", d);
	/* The bell wakes a pread-mode wait too. */
	ringer g = {efd, 100};
	pthread_t t;
	double t0 = now_s();
	CHILD_CHECK(pthread_create(&t, NULL, ring_later, &g) == 0, "pthread_create");
	rf__reader_wait(r);
	pthread_join(t, NULL);
	CHILD_CHECK(now_s() - t0 >= 0.07, "pread wait returned before the bell");
	rf__reader_counters c;
	rf__reader_counters_get(r, &c);
	CHILD_CHECK(c.reads_direct == 0 && c.copies == 8 && c.failed == 0, "counters (preads: through the page cache)");
	rf__reader_destroy(r);
	free(reg);
	rf_file_close(f);
	return 0;
}

Test(reader, pread_when_io_uring_is_refused)
{
	char *path = make_file(4u << 20, 6);
	in_child(pread_child, path);
}

/* ---- a kernel that answers "not now" for ever: bounded retries, then pread, or RF_EIO ---------------- */

static int g_err; /* the errno the filter answers with (each test's child) */

typedef struct pattern {
	unsigned seed;
	const uint64_t *offs; /* block b holds the file's bytes from offs[b] */
	int bad;
} pattern;

static int pattern_cb(void *user, const rf_block *b)
{
	pattern *p = user;
	p->bad |= !check_bytes(b->data, p->offs[b->index], b->bytes, p->seed);
	return 0;
}

/* Through the public API on `backend`: a run of file blocks (one block from memory, so that "threads"
 * reads on its lanes too) and an acquire of a file range; both end with want (RF_OK: every byte right;
 * RF_EIO: rf_errmsg says errno's text). desc (cap bytes): the pipeline's describe line afterwards. */
static int reads_on(rf_pipeline *p, rf_file *f, unsigned seed, const char *backend, int want, char *desc,
		    size_t cap)
{
	enum { N = 6, SZ = 1 << 20 };
	const unsigned char *d = rf_file_data(f);
	static unsigned char mem[SZ];
	const void *srcs[N];
	size_t sizes[N];
	uint64_t offs[N];
	for (size_t b = 0; b < N; b++) { /* aligned and not; block 2 from memory (the file's bytes there) */
		offs[b] = b * SZ + (b % 2 ? 100 : 0);
		srcs[b] = b == 2 ? (const void *)mem : d + offs[b];
		sizes[b] = SZ - 200;
	}
	for (size_t i = 0; i < SZ; i++)
		mem[i] = byte_at(offs[2] + i, seed);
	pattern pt = {seed, offs, 0};
	int rc = rf_pipeline_run(p, N, srcs, sizes, pattern_cb, &pt);
	CHILD_CHECK(rc == want, "%s: run: %s (want %s): %s", backend, rf_err_name(rc), rf_err_name(want), rf_errmsg());
	if (want == RF_EIO)
		CHILD_CHECK(strstr(rf_errmsg(), strerror(g_err)) != NULL, "%s: run: %s", backend, rf_errmsg());
	rf_block blk;
	rc = rf_pipeline_acquire(p, 7, d + 3 * SZ + 32, SZ - 64, NULL, 0, &blk);
	CHILD_CHECK(rc == want, "%s: acquire: %s (want %s): %s", backend, rf_err_name(rc), rf_err_name(want),
		    rf_errmsg());
	if (want == RF_OK) {
		CHILD_CHECK(!pt.bad, "%s: a block held wrong bytes", backend);
		CHILD_CHECK(check_bytes(blk.data, 3 * SZ + 32, SZ - 64, seed), "%s: the acquired block's bytes", backend);
		CHILD_CHECK(rf_pipeline_release(p, &blk) == RF_OK, "release");
	} else {
		CHILD_CHECK(strstr(rf_errmsg(), strerror(g_err)) != NULL, "%s: acquire: %s", backend, rf_errmsg());
	}
	snprintf(desc, cap, "%s", rf_pipeline_describe(p));
	return 0;
}

/* reads_on a new pipeline (depth 3, 1 MiB slots and room) on backend, destroyed after. */
static int pipeline_reads(rf_file *f, unsigned seed, const char *backend, int want, char *desc, size_t cap)
{
	rf_pipeline_params pp = {0};
	pp.depth = 3;
	pp.slot_bytes = (1u << 20) + 8192;
	pp.backend = backend;
	rf_pipeline *p;
	CHILD_CHECK(rf_pipeline_create(&pp, &p) == RF_OK, "%s: create: %s", backend, rf_errmsg());
	int rc = reads_on(p, f, seed, backend, want, desc, cap);
	rf_pipeline_destroy(p);
	return rc;
}

/* The same on p, every read expected to land. */
static int pipeline_reads_on(rf_pipeline *p, rf_file *f, unsigned seed, const char *backend, char *desc, size_t cap)
{
	return reads_on(p, f, seed, backend, RF_OK, desc, cap);
}

/* io_uring_enter answers g_err for ever (io_uring_setup still works): the reader gives the ring up after
 * a few tries and reads with pread; every copy lands, the describe line says why. Without the bound,
 * the first wait spun for ever. */
static int enter_refused_child(const char *path)
{
	rf_file *f;
	rf__reader *r;
	CHILD_CHECK(rf_file_open(path, 0, &f) == RF_OK, "open: %s", rf_errmsg());
	if (!have_io_uring())
		return NO_IO_URING;
	CHILD_CHECK(rf__reader_create(4, -1, &r) == RF_OK, "create: %s", rf_errmsg());
	char d[512];
	refusal rs = {__NR_io_uring_enter, g_err};
	CHILD_CHECK(refuse(&rs, 1) == 0, "seccomp: %s", strerror(errno));
	if (child_copies(r, f, 9) != 0)
		return 1;
	rf__reader_describe(r, d, sizeof d);
	char want[160];
	snprintf(want, sizeof want, "pread (io_uring failed: io_uring_enter: %s (every try of 8))", strerror(g_err));
	CHILD_CHECK(strncmp(d, want, strlen(want)) == 0, "%s", d);
	rf__reader_counters c;
	rf__reader_counters_get(r, &c);
	CHILD_CHECK(c.copies == 8 && c.failed == 0, "counters: %llu copies, %llu failed", (unsigned long long)c.copies,
		    (unsigned long long)c.failed);
	rf__reader_destroy(r);
	/* describe says what the reads are now: pread since the ring gave up, not "io_uring". */
	char desc[1024];
	snprintf(want, sizeof want, "files: pread (io_uring failed: io_uring_enter: %s (every try of 8))",
		 strerror(g_err));
	if (pipeline_reads(f, 9, "cpu", RF_OK, desc, sizeof desc) != 0)
		return 1;
	CHILD_CHECK(strstr(desc, want) != NULL, "cpu: %s", desc);
	if (pipeline_reads(f, 9, "threads", RF_OK, desc, sizeof desc) != 0)
		return 1;
	CHILD_CHECK(strstr(desc, want) != NULL, "threads: %s", desc);
	/* Only the lanes read (a run mixing memory and file blocks, no acquire): the line names a lane. */
	rf_pipeline_params pp = {0};
	pp.depth = 3;
	pp.slot_bytes = (1u << 20) + 8192;
	pp.backend = "threads";
	rf_pipeline *p;
	CHILD_CHECK(rf_pipeline_create(&pp, &p) == RF_OK, "create: %s", rf_errmsg());
	const unsigned char *m = rf_file_data(f);
	unsigned char *mem = malloc(1u << 20);
	for (size_t i = 0; i < (1u << 20); i++)
		mem[i] = byte_at(i, 9);
	const void *srcs[4] = {mem, m + (1u << 20), m + (2u << 20), m + (3u << 20) + 8};
	size_t sizes[4] = {1u << 20, 1u << 20, 1u << 20, (1u << 20) - 8};
	uint64_t offs[4] = {0, 1u << 20, 2u << 20, (3u << 20) + 8};
	pattern pt = {9, offs, 0};
	CHILD_CHECK(rf_pipeline_run(p, 4, srcs, sizes, pattern_cb, &pt) == RF_OK && !pt.bad, "lanes' run: %s", rf_errmsg());
	snprintf(want, sizeof want, "; copy lane 0: pread (io_uring failed: io_uring_enter: %s (every try of 8))",
		 strerror(g_err));
	CHILD_CHECK(strstr(rf_pipeline_describe(p), want) != NULL, "threads, lanes: %s", rf_pipeline_describe(p));
	rf_pipeline_destroy(p);
	free(mem);
	rf_file_close(f);
	return 0;
}

static void enter_refused(int err)
{
	char *path = make_file(8u << 20, 9);
	g_err = err;
	in_child(enter_refused_child, path);
}

Test(reader, io_uring_enter_eagain_for_ever_falls_back_to_pread) { enter_refused(EAGAIN); }
Test(reader, io_uring_enter_ebusy_for_ever_falls_back_to_pread) { enter_refused(EBUSY); }
Test(reader, io_uring_enter_eintr_for_ever_falls_back_to_pread) { enter_refused(EINTR); }

/* io_uring refused and pread answering g_err for ever: each copy fails with RF_EIO after a few tries,
 * its message names the read and errno's text, the reader stays usable; through a pipeline the run and
 * the acquire are RF_EIO, and so is rf_file_read. Without the bound, the first copy was read again for
 * ever (and rf_file_read, on EINTR). */
static int pread_refused_child(const char *path)
{
	rf_file *f;
	rf__reader *r;
	CHILD_CHECK(rf_file_open(path, 0, &f) == RF_OK, "open: %s", rf_errmsg());
	refusal rs[2] = {{__NR_io_uring_setup, EPERM}, {__NR_pread64, g_err}};
	CHILD_CHECK(refuse(rs, 2) == 0, "seccomp: %s", strerror(errno));
	CHILD_CHECK(rf__reader_create(4, -1, &r) == RF_OK, "create: %s", rf_errmsg());
	size_t cap = 2u << 20;
	unsigned char *dst = aligned_alloc(4096, cap);
	for (unsigned i = 0; i < 3; i++) {
		rf__fsrc s = {f, i * 4096u + (i == 1 ? 32 : 0)};
		size_t shift;
		CHILD_CHECK(rf__reader_start(r, &s, 1u << 20, dst, cap, 0, i) == RF_OK, "start: %s", rf_errmsg());
		uint64_t tag;
		int rc;
		while (rf__reader_poll(r, &tag, &rc, &shift) == 0)
			rf__reader_wait(r);
		char want[200];
		snprintf(want, sizeof want, ": %s (every try of 8)", strerror(g_err));
		CHILD_CHECK(tag == i && rc == RF_EIO, "copy %u: rc %d", i, rc);
		CHILD_CHECK(strstr(rf__reader_error(r), path) != NULL && strstr(rf__reader_error(r), want) != NULL,
			    "copy %u: %s", i, rf__reader_error(r));
	}
	free(dst);
	rf__reader_destroy(r);
	unsigned char head[64];
	CHILD_CHECK(rf_file_read(f, 8, head, sizeof head) == RF_EIO && strstr(rf_errmsg(), path) != NULL &&
			    strstr(rf_errmsg(), strerror(g_err)) != NULL,
		    "rf_file_read: %s", rf_errmsg());
	char desc[1024];
	if (pipeline_reads(f, 10, "cpu", RF_EIO, desc, sizeof desc) != 0 ||
	    pipeline_reads(f, 10, "threads", RF_EIO, desc, sizeof desc) != 0)
		return 1;
	rf_file_close(f);
	return 0;
}

static void pread_refused(int err)
{
	char *path = make_file(8u << 20, 10);
	g_err = err;
	in_child(pread_refused_child, path);
}

Test(reader, pread_eagain_for_ever_is_eio) { pread_refused(EAGAIN); }
Test(reader, pread_eintr_for_ever_is_eio) { pread_refused(EINTR); }

/* ---- out of descriptors at the first file use ----------------------------------------------------- */

/* The io_uring instances this process has open (/proc/self/fd). */
static int io_urings(void)
{
	DIR *d = opendir("/proc/self/fd");
	if (d == NULL)
		return -1;
	int n = 0;
	struct dirent *e;
	while ((e = readdir(d)) != NULL) {
		char p[300], t[64];
		snprintf(p, sizeof p, "/proc/self/fd/%s", e->d_name);
		ssize_t k = readlink(p, t, sizeof t - 1);
		if (k > 0) {
			t[k] = '\0';
			n += strcmp(t, "anon_inode:[io_uring]") == 0;
		}
	}
	closedir(d);
	return n;
}

/* Reads of copies read on their own, chosen online: never more of their pieces in flight than the
 * setting (exactly the setting when more wait: a start never reaps; while reads land, no more than the
 * largest setting so far, as a setting that goes back lets the reads already out land), the bytes right,
 * the setting kept once the cap is lifted, and then every piece that fits goes out at once. Nothing is
 * chosen in pread mode (reads one at a time). */
Test(reader, reads_chosen_online_keep_at_most_the_setting_in_flight)
{
	char *path = make_file(FSIZE, 27);
	rf_file *f;
	cr_assert_eq(rf_file_open(path, 0, &f), RF_OK);
	enum { N = 12 };
	rf__reader *r;
	cr_assert_eq(rf__reader_create(N, -1, &r), RF_OK);
	const size_t slot = 1u << 20;
	unsigned char *dst = xalign(4096, N * slot);
	cr_assert_eq(rf__reader_register(r, dst, N * slot), RF_OK);
	rf__reader_reads_online(r, 1, 0);
	rf__reader_ahead a = {0};
	size_t piece = 0;
	unsigned most = 0; /* the largest setting so far */
	for (int round = 0; round < 6; round++) {
		memset(dst, 0, N * slot);
		for (unsigned i = 0; i < N; i++) {
			rf__fsrc src = {f, (uint64_t)(i + round) % 11 * slot};
			cr_assert_eq(rf__reader_start(r, &src, slot, dst + i * slot, slot, 0, i), RF_OK);
			piece = rf__reader_reads_get(r, &a);
			most = a.on > most ? a.on : most;
			cr_assert(piece == 0 || rf__reader_reads_out(r) <= a.on, "%u reads out, setting %u",
				  rf__reader_reads_out(r), a.on);
		}
		if (piece != 0) {
			unsigned total = N * (unsigned)((slot + piece - 1) / piece);
			cr_assert_eq(rf__reader_reads_out(r), total < a.on ? total : a.on);
		}
		for (unsigned k = 0; k < N; k++) {
			uint64_t tag;
			int rc;
			size_t shift;
			while (rf__reader_poll(r, &tag, &rc, &shift) == 0)
				rf__reader_wait(r);
			cr_assert_eq(rc, RF_OK, "%s", rf__reader_error(r));
			cr_assert(check_bytes(dst + tag * slot + shift, (tag + (uint64_t)round) % 11 * slot, slot, 27),
				  "copy %llu", (unsigned long long)tag);
			piece = rf__reader_reads_get(r, &a);
			most = a.on > most ? a.on : most;
			cr_assert(piece == 0 || rf__reader_reads_out(r) <= most, "%u reads out, setting %u, at most %u",
				  rf__reader_reads_out(r), a.on, most);
		}
	}
	char desc[512];
	rf__reader_describe(r, desc, sizeof desc);
	cr_assert_eq(piece != 0, have_io_uring(), "%s", desc);
	cr_assert_eq(strstr(desc, "reads of whole blocks ") != NULL, have_io_uring(), "%s", desc);
	cr_assert(piece == 0 || (a.on >= 2 && a.on <= RF__READER_QD), "%u", a.on); /* a copy needs two */
	rf__reader_reads_online(r, 0, 0);
	rf__reader_ahead kept;
	cr_assert_eq(rf__reader_reads_get(r, &kept), piece);
	cr_assert_eq(kept.on, a.on);
	rf__reader_describe(r, desc, sizeof desc);
	cr_assert(strstr(desc, "reads of whole blocks ") == NULL, "%s", desc);
	for (unsigned i = 0; i < N; i++) {
		rf__fsrc src = {f, (uint64_t)i * slot};
		cr_assert_eq(rf__reader_start(r, &src, slot, dst + i * slot, slot, 0, i), RF_OK);
	}
	if (piece != 0) {
		unsigned total = N * (unsigned)((slot + piece - 1) / piece);
		cr_assert_eq(rf__reader_reads_out(r), total < RF__READER_QD ? total : RF__READER_QD);
	}
	for (unsigned k = 0; k < N; k++) {
		uint64_t tag;
		int rc;
		size_t shift;
		while (rf__reader_poll(r, &tag, &rc, &shift) == 0)
			rf__reader_wait(r);
		cr_assert_eq(rc, RF_OK, "%s", rf__reader_error(r));
		cr_assert(check_bytes(dst + tag * slot + shift, tag * slot, slot, 27), "copy %llu", (unsigned long long)tag);
	}
	rf__reader_destroy(r);
	free(dst);
	cr_assert_eq(rf_file_close(f), RF_OK);
	drop(path);
}

/* RLIMIT_NOFILE leaves no descriptor when a pipeline first reads a file: the run and the acquire still
 * succeed (pread; a lane without its doorbell), the describe line says why, not RF_ENOMEM. Once
 * descriptors are back, the next run after a pause sets io_uring up again, on the caller and the lanes
 * alike, and describe says so. Before, the lanes' eventfd made the run RF_ENOMEM, and a reader that had
 * once fallen back stayed on pread for good. */
static int emfile_child(const char *path)
{
	if (!have_io_uring())
		return NO_IO_URING;
	rf_file *f;
	CHILD_CHECK(rf_file_open(path, 0, &f) == RF_OK, "open: %s", rf_errmsg());
	static const char *const backends[] = {"cpu", "threads"};
	for (unsigned i = 0; i < 2; i++) {
		rf_pipeline_params pp = {0};
		pp.depth = 3;
		pp.slot_bytes = (1u << 20) + 8192;
		pp.backend = backends[i];
		rf_pipeline *p;
		CHILD_CHECK(rf_pipeline_create(&pp, &p) == RF_OK, "create: %s", rf_errmsg());
		struct rlimit old, none;
		CHILD_CHECK(getrlimit(RLIMIT_NOFILE, &old) == 0, "getrlimit");
		int lowest = dup(0); /* the lowest free descriptor: a limit there leaves none */
		CHILD_CHECK(lowest >= 0, "dup");
		close(lowest);
		none = old;
		none.rlim_cur = (rlim_t)lowest;
		CHILD_CHECK(setrlimit(RLIMIT_NOFILE, &none) == 0, "setrlimit");
		CHILD_CHECK(dup(0) < 0 && errno == EMFILE, "a descriptor is still free");
		char desc[1024];
		g_err = EMFILE;
		int rc = pipeline_reads(f, 11, backends[i], RF_OK, desc, sizeof desc);
		CHILD_CHECK(setrlimit(RLIMIT_NOFILE, &old) == 0, "setrlimit back");
		if (rc != 0)
			return 1;
		CHILD_CHECK(strstr(desc, "files: pread (io_uring refused: io_uring_setup: Too many open files") != NULL,
			    "%s: %s", backends[i], desc);
		CHILD_CHECK(io_urings() == 0, "%s: %d io_uring instances under the limit", backends[i], io_urings());
		struct timespec pause = {0, 300 * 1000 * 1000}; /* past the reader's 0.2 s between setups */
		nanosleep(&pause, NULL);
		if (pipeline_reads_on(p, f, 11, backends[i], desc, sizeof desc) != 0)
			return 1;
		CHILD_CHECK(strstr(desc, "files: io_uring, up to") != NULL, "%s: %s", backends[i], desc);
		int want = i == 0 ? 1 : 2; /* the caller's reader; on threads a lane's too */
		CHILD_CHECK(io_urings() >= want, "%s: %d io_uring instances after the limit, not %d", backends[i],
			    io_urings(), want);
		rf_pipeline_destroy(p);
	}
	rf_file_close(f);
	return 0;
}

Test(reader, out_of_descriptors_at_the_first_file_use)
{
	char *path = make_file(8u << 20, 11);
	in_child(emfile_child, path);
}

/* Without CAP_IPC_LOCK, registered buffers are charged to RLIMIT_MEMLOCK: a 4 MiB region under a 64 KiB
 * limit is refused, and the reads into it still work, unregistered. */
static int memlock_child(const char *path)
{
	struct __user_cap_header_struct h = {_LINUX_CAPABILITY_VERSION_3, 0};
	struct __user_cap_data_struct d[2];
	CHILD_CHECK(syscall(SYS_capget, &h, d) == 0, "capget");
	d[CAP_IPC_LOCK / 32].effective &= ~(1u << (CAP_IPC_LOCK % 32));
	CHILD_CHECK(syscall(SYS_capset, &h, d) == 0, "capset: %s", strerror(errno));
	struct rlimit rl = {65536, 65536};
	CHILD_CHECK(setrlimit(RLIMIT_MEMLOCK, &rl) == 0, "setrlimit");
	rf_file *f;
	rf__reader *r;
	CHILD_CHECK(rf_file_open(path, 0, &f) == RF_OK, "open");
	CHILD_CHECK(rf__reader_create(4, -1, &r) == RF_OK, "create");
	char desc[512];
	rf__reader_describe(r, desc, sizeof desc);
	if (strncmp(desc, "io_uring", 8) != 0) { /* no io_uring here: nothing to register anyway */
		rf__reader_destroy(r);
		rf_file_close(f);
		return 0;
	}
	void *reg = aligned_alloc(4096, 4u << 20);
	CHILD_CHECK(rf__reader_register(r, reg, 4u << 20) == RF_OK, "register");
	rf__reader_describe(r, desc, sizeof desc);
	CHILD_CHECK(strstr(desc, "slots not registered (io_uring_register_buffers:") != NULL, "%s", desc);
	if (child_copies(r, f, 8) != 0)
		return 1;
	rf__reader_destroy(r);
	free(reg);
	rf_file_close(f);
	return 0;
}

Test(reader, registration_refused)
{
	char *path = make_file(4u << 20, 8);
	in_child(memlock_child, path);
}

/* ---- the pure parts --------------------------------------------------------------------------------- */

/* ---- the read-ahead window ---------------------------------------------------------------------- */

/* A stream of copies of n bytes from off0 to `end` (the last one partial), in file order, at
 * most two in flight (a ring of depth 3), each told how far the stream goes on, stop_after copies at
 * most. Each copy's bytes checked against seed; returns the copies made; *failed_at: the lowest offset
 * of a copy that failed (UINT64_MAX: none). */
static unsigned stream(rf__reader *r, rf_file *f, uint64_t off0, uint64_t end, size_t n, unsigned seed,
		       uint64_t *failed_at, unsigned stop_after)
{
	unsigned char *slot[3];
	uint64_t at[3];
	size_t len[3];
	int busy[3] = {0, 0, 0};
	for (int i = 0; i < 3; i++)
		slot[i] = xalign(4096, n + 8192);
	*failed_at = UINT64_MAX;
	uint64_t next = off0;
	unsigned started = 0, done = 0;
	while (done < started || (next < end && started < stop_after)) {
		while (started - done < 2 && next < end && started < stop_after && !busy[started % 3]) {
			unsigned k = started % 3;
			busy[k] = 1;
			size_t m = end - next < n ? (size_t)(end - next) : n;
			rf__fsrc s = {f, next};
			at[k] = next, len[k] = m;
			memset(slot[k], 0xee, n + 8192);
			cr_assert_eq(rf__reader_start_ahead(r, &s, m, slot[k], n + 8192, 0, started, (size_t)(end - next - m)),
				     RF_OK, "%s", rf_errmsg());
			next += m;
			started++;
		}
		size_t shift;
		uint64_t tag;
		int rc;
		while (rf__reader_poll(r, &tag, &rc, &shift) == 0) /* any order: copies read on their own */
			rf__reader_wait(r);
		cr_assert_lt(tag, started);
		unsigned k = (unsigned)(tag % 3);
		busy[k] = 0;
		if (rc != RF_OK && at[k] < *failed_at)
			*failed_at = at[k];
		if (rc == RF_OK)
			cr_assert(check_bytes(slot[k], at[k], len[k], seed), "wrong bytes: copy at %llu, %zu bytes",
				  (unsigned long long)at[k], len[k]);
		done++;
	}
	for (int i = 0; i < 3; i++)
		free(slot[i]);
	return done;
}

/* A reader with a read-ahead window of `window` bytes over a fresh file of fsize bytes (seed's pattern). */
typedef struct winfix {
	char *path;
	rf_file *f;
	rf__reader *r;
} winfix;

static winfix win_open(size_t fsize, unsigned seed, size_t window)
{
	winfix fx = {make_file(fsize, seed), NULL, NULL};
	cr_assert_eq(rf_file_open(fx.path, 0, &fx.f), RF_OK);
	cr_assert_eq(rf__reader_create(8, -1, &fx.r), RF_OK);
	cr_assert_eq(rf__reader_window(fx.r, window), RF_OK, "%s", rf_errmsg());
	return fx;
}

static void win_close(winfix *fx)
{
	rf__reader_destroy(fx->r);
	cr_assert_eq(rf_file_close(fx->f), RF_OK);
	drop(fx->path);
}

/* Small copies that follow one another in the file are read as a few large requests, aligned or not,
 * and every copy holds its bytes, the partial last one too. */
Test(reader_window, small_copies_in_file_order_are_read_as_large_requests)
{
	winfix fx = win_open(FSIZE, 21, 4u << 20);
	rf__reader *r = fx.r;
	rf_file *f = fx.f;
	static const size_t sizes[] = {4096, 65536, 65536 + 8, 100000, 262144};
	static const uint64_t offs[] = {0, 32, 4096 + 1};
	for (unsigned i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
		for (unsigned j = 0; j < sizeof offs / sizeof offs[0]; j++) {
			rf__reader_counters c0, c1;
			rf__reader_window_stats w0, w1;
			rf__reader_counters_get(r, &c0);
			rf__reader_window_get(r, &w0);
			uint64_t bad;
			unsigned n = stream(r, f, offs[j], FSIZE, sizes[i], 21, &bad, UINT_MAX);
			cr_assert_eq(bad, UINT64_MAX, "copy at %llu failed: %s", (unsigned long long)bad, rf__reader_error(r));
			rf__reader_counters_get(r, &c1);
			rf__reader_window_get(r, &w1);
			if (!have_io_uring()) { /* preads: through the page cache (its read-ahead), not the window */
				cr_assert_eq(w1.copies, w0.copies, "%zu-byte copies: the window read without io_uring", sizes[i]);
				cr_assert_eq(c1.reads_direct, c0.reads_direct);
				continue;
			}
			cr_assert_eq(w1.copies - w0.copies, n, "%zu-byte copies from %llu: %llu of %u from the window", sizes[i],
				     (unsigned long long)offs[j], (unsigned long long)(w1.copies - w0.copies), n);
			uint64_t reads = c1.reads - c0.reads, most = FSIZE / w1.chunk + 2;
			cr_assert_leq(reads, most, "%zu-byte copies: %llu reads for %u copies (a window of %zu-byte chunks)",
				      sizes[i], (unsigned long long)reads, n, w1.chunk);
			cr_assert_eq(c1.reads_direct - c0.reads_direct, reads);
			cr_assert_leq(w1.read - w0.read, FSIZE - offs[j] + w1.chunk, "read no further than the stream goes");
		}
	char desc[512];
	rf__reader_describe(r, desc, sizeof desc);
	cr_assert(strstr(desc, have_io_uring() ? "read-ahead 4 x " : "through the page cache") != NULL, "%s", desc);
	win_close(&fx);
}

/* Chosen online, the window starts with one chunk read ahead: copies across a chunk's boundary get the
 * next one all the same (no stream stalls), and describe shows the rates measured. */
Test(reader_window, chosen_online_from_one_chunk_up)
{
	if (!have_io_uring())
		cr_skip_test("without io_uring there is no window: preads read through the page cache");
	winfix fx = win_open(FSIZE, 26, 16u << 20);
	rf__reader *r = fx.r;
	rf_file *f = fx.f;
	rf__reader_window_online(r, 1, 0);
	static const size_t sizes[] = {65536, 65536 + 8, 1u << 20};
	for (unsigned i = 0; i < 3; i++) {
		uint64_t bad;
		unsigned n = stream(r, f, i * 8, FSIZE, sizes[i], 26, &bad, UINT_MAX);
		cr_assert_eq(bad, UINT64_MAX, "%s", rf__reader_error(r));
		cr_assert_gt(n, 0u);
	}
	rf__reader_window_stats w;
	rf__reader_window_get(r, &w);
	cr_assert(w.on >= 1 && w.on <= w.chunks, "%u of %u", w.on, w.chunks);
	char desc[512];
	rf__reader_describe(r, desc, sizeof desc);
	cr_assert(strstr(desc, "online, GB/s at ") != NULL, "%s", desc);
	win_close(&fx);
}

/* A window's pages are touched as its chunks first use them: a stream that reads only a few chunks
 * ahead touches only those, and the next stream reuses them (the buffers last given back first). */
Test(reader_window, only_the_chunks_used_are_touched)
{
	if (!have_io_uring())
		cr_skip_test("without io_uring there is no window: preads read through the page cache");
	winfix fx = win_open(FSIZE, 27, 32u << 20);
	rf__reader *r = fx.r;
	rf_file *f = fx.f;
	rf__reader_window_stats w;
	rf__reader_window_get(r, &w);
	cr_assert_eq(w.touched, 0u, "nothing touched before a chunk is read");
	uint64_t bad;
	cr_assert_eq(stream(r, f, 0, 2u << 20, 65536, 27, &bad, UINT_MAX), 32u);
	cr_assert_eq(bad, UINT64_MAX, "%s", rf__reader_error(r));
	rf__reader_window_get(r, &w);
	cr_assert(w.copies == 32 && w.chunk > 0, "%llu copies from the window", (unsigned long long)w.copies);
	size_t most = ((2u << 20) / w.chunk + 2) * w.chunk; /* the chunks a 2 MiB stream can read, and one more */
	cr_assert(w.touched > 0 && w.touched <= most && w.touched < w.bytes, "%zu of %zu bytes touched (chunks of %zu)",
		  w.touched, w.bytes, w.chunk);
	size_t first = w.touched;
	rf__reader_window_drop(r);
	cr_assert_eq(stream(r, f, 0, 2u << 20, 65536, 27, &bad, UINT_MAX), 32u);
	cr_assert_eq(bad, UINT64_MAX);
	rf__reader_window_get(r, &w);
	cr_assert_eq(w.touched, first, "the same stream again: the same buffers");
	cr_assert_eq(stream(r, f, 0, FSIZE, 65536, 27, &bad, UINT_MAX), (FSIZE + 65535) / 65536);
	cr_assert_eq(bad, UINT64_MAX, "%s", rf__reader_error(r));
	rf__reader_window_get(r, &w);
	cr_assert_leq(w.touched, w.bytes);
	win_close(&fx);
}

/* Large copies, a stream that is not in file order, copies without `ahead` and shifted (device) copies
 * are read as before: on their own. */
Test(reader_window, other_copies_are_read_on_their_own)
{
	winfix fx = win_open(FSIZE, 22, 4u << 20);
	rf__reader *r = fx.r;
	rf_file *f = fx.f;
	unsigned char *dst = xalign(4096, 3u << 20);
	uint64_t bad;
	stream(r, f, 0, 9u << 20, 3u << 20, 22, &bad, UINT_MAX); /* more than half the window */
	cr_assert_eq(bad, UINT64_MAX);
	for (uint64_t off = 6u << 20; off > 0; off -= 65536) /* backwards */
		one_copy(r, f, off, 65536, dst, 1u << 20, 0, 22);
	one_copy(r, f, 65536, 65536, dst, 1u << 20, RF__READER_SHIFT_OK, 22);
	rf__reader_window_stats w;
	rf__reader_window_get(r, &w);
	cr_assert_eq(w.copies, 0u, "%llu copies from the window", (unsigned long long)w.copies);
	free(dst);
	win_close(&fx);
}

/* A file that shrank under the window: the copies inside its new size hold their bytes, the first past
 * it is RF_EIO in the words a copy read on its own gets, and the reader stays usable. */
Test(reader_window, a_file_that_shrank_is_eio)
{
	winfix fx = win_open(4u << 20, 23, 4u << 20);
	rf__reader *r = fx.r;
	rf_file *f = fx.f;
	cr_assert_eq(truncate(fx.path, (1u << 20) + 100), 0);
	uint64_t bad;
	unsigned n = stream(r, f, 0, 4u << 20, 65536, 23, &bad, UINT_MAX);
	cr_assert_eq(n, 64u);
	cr_assert_eq(bad, 1u << 20, "the copy at %llu failed first", (unsigned long long)bad);
	rf__reader_counters c;
	rf__reader_counters_get(r, &c);
	cr_assert_eq(c.failed, 48u, "every copy past the new end fails (%llu did)", (unsigned long long)c.failed);
	/* the last failure's words: a copy read on its own past the end */
	cr_assert(strstr(rf__reader_error(r), fx.path) != NULL && strstr(rf__reader_error(r), "shrank to 1048676 bytes"),
		  "%s", rf__reader_error(r));
	unsigned char *dst = xalign(4096, 1u << 20);
	one_copy(r, f, 100, 65536, dst, 1u << 20, 0, 23);
	free(dst);
	win_close(&fx);
}

/* What the window read ahead is never handed out after rf__reader_window_drop: a stream stopped
 * halfway, the file rewritten, the stream taken up where it stopped sees the new bytes. Without the
 * drop it would see bytes read before the write (checked too: the window really held them). */
static void rewrite(const char *path, size_t n, unsigned seed)
{
	int fd = open(path, O_WRONLY);
	cr_assert(fd >= 0);
	unsigned char *b = malloc(n);
	for (size_t i = 0; i < n; i++)
		b[i] = byte_at(i, seed);
	cr_assert_eq(pwrite(fd, b, n, 0), (ssize_t)n);
	fsync(fd);
	close(fd);
	free(b);
}

static void take_up(int drop_first, unsigned want_seed)
{
	winfix fx = win_open(4u << 20, 24, 4u << 20);
	rf__reader *r = fx.r;
	rf_file *f = fx.f;
	uint64_t bad;
	cr_assert_eq(stream(r, f, 0, 4u << 20, 65536, 24, &bad, 4), 4u); /* the window reads far ahead */
	rewrite(fx.path, 4u << 20, 25);
	if (drop_first)
		rf__reader_window_drop(r);
	stream(r, f, 4 * 65536, 4u << 20, 65536, want_seed, &bad, 8);
	cr_assert_eq(bad, UINT64_MAX);
	win_close(&fx);
}

Test(reader_window, a_dropped_window_hands_out_no_stale_bytes) { take_up(1, 25); }
Test(reader_window, an_undropped_window_held_the_bytes_read_ahead) { take_up(0, 24); }

/* ---- the read-ahead rule, on synthetic rates (no clock) ------------------------------------------ */

/* Feed the rule a device whose rate at c chunks in flight is rate_at(c), each measurement with standard
 * error `noise`; returns the setting it settles on (and how many measurements it took). */
static unsigned settle(unsigned max, double (*rate_at)(unsigned), double noise, unsigned *steps)
{
	rf__reader_ahead a;
	rf__reader_ahead_start(&a, max, 1, 1);
	unsigned k = 0;
	while (!a.settled && k < 20) {
		double r = rate_at(a.on);
		rf__reader_ahead_rule(&a, r, noise);
		k++;
	}
	cr_assert(a.settled, "the rule settles");
	cr_assert(a.on >= 1 && a.on <= max);
	*steps = k;
	return a.on;
}

static double knee4(unsigned c) /* rises to 4 chunks, flat after */
{
	return 1e9 * (c < 4 ? c : 4);
}

static double best2(unsigned c) /* best at 2, worse with more (a host that serves a few requests best) */
{
	return c == 1 ? 1.5e9 : c == 2 ? 2.5e9 : 2.0e9;
}

static double flat(unsigned c)
{
	(void)c;
	return 3e9;
}

static double rising(unsigned c)
{
	return 1e9 * c;
}

Test(reader_rule, more_in_flight_while_the_rate_rises_fewer_when_it_stops_paying)
{
	unsigned steps;
	cr_assert_eq(settle(16, knee4, 0.05e9, &steps), 4u, "flat past 4: 8 did not pay, back to 4");
	cr_assert_eq(steps, 4u, "1, 2, 4, 8: four measurements");
	cr_assert_eq(settle(16, best2, 0.05e9, &steps), 2u, "worse past 2: back to 2");
	cr_assert_eq(settle(16, flat, 0.05e9, &steps), 1u, "nothing gained by more: the least");
	cr_assert_eq(steps, 2u);
	cr_assert_eq(settle(16, rising, 0.05e9, &steps), 16u, "rising all the way: the window's all");
	cr_assert_eq(settle(4, rising, 0.05e9, &steps), 4u, "never more than the window holds");
	cr_assert_eq(steps, 3u);
	cr_assert_eq(settle(1, rising, 0.05e9, &steps), 1u);
	cr_assert_eq(steps, 0u, "one chunk: nothing to choose");
}

/* A measurement's rate and error from its rounds: even rounds, no error; rounds of 1, 3, 1, 3 GB/s the
 * standard error of their mean (sd 1.155 / sqrt(4)). */
Test(reader_rule, rate_and_error_from_the_rounds)
{
	double rate, err;
	rf__reader_ahead_sample(8u << 20, 4e-3, 4, 4 * 2e9, 4 * 4e18, &rate, &err);
	cr_assert_float_eq(rate, (8u << 20) / 4e-3, 1);
	cr_assert_float_eq(err, 0, 1e-3 * rate);
	rf__reader_ahead_sample(8u << 20, 4e-3, 4, 8e9, 20e18, &rate, &err);
	cr_assert_float_eq(err, sqrt(4e18 / 3 / 4), 1e3);
	rf__reader_ahead_sample(0, 0, 0, 0, 0, &rate, &err);
	cr_assert(rate == 0 && err == 0);
	rf__reader_ahead_sample(1 << 20, 1e-3, 1, 1e9, 1e18, &rate, &err);
	cr_assert(err == 0, "one round: no spread to speak of");
}

/* The search starts where it is told (the power of two at or below), or at the chunks one copy may need
 * at once if more (the power of two at or above: fewer would read as many all the same). */
Test(reader_rule, starts_at_the_chunks_a_copy_needs)
{
	rf__reader_ahead a;
	rf__reader_ahead_start(&a, 16, 2, 2);
	cr_assert_eq(a.on, 2u);
	rf__reader_ahead_start(&a, 16, 1, 3);
	cr_assert_eq(a.on, 2u, "from: the power of two below");
	rf__reader_ahead_start(&a, 16, 3, 1);
	cr_assert_eq(a.on, 4u, "need: the power of two above");
	rf__reader_ahead_start(&a, 16, 3, 4);
	cr_assert_eq(a.on, 4u);
	rf__reader_ahead_start(&a, 32, 6, 4);
	cr_assert_eq(a.on, 8u, "a block of five chunks and the next one: 8, not 4");
	rf__reader_ahead_start(&a, 16, 2, 5);
	cr_assert_eq(a.on, 4u);
	cr_assert(!a.settled);
	cr_assert_eq(rf__reader_ahead_rule(&a, 3e9, 0), 8u, "nothing below to compare with: up");
	cr_assert_eq(rf__reader_ahead_rule(&a, 3.05e9, 0.1e9), 4u, "no gain: back to where it started");
	cr_assert(a.settled);
	rf__reader_ahead_start(&a, 4, 9, 9);
	cr_assert_eq(a.on, 4u);
	cr_assert(a.settled, "the window's all from the start: nothing to choose");
	rf__reader_ahead_start(&a, 32, 1, 64);
	cr_assert_eq(a.on, 32u, "never past the top setting");
	cr_assert(a.settled);
}

/* A disk that wants many requests in flight (the rate rising up to 16 or 32 chunks): the ladder climbs
 * from where it starts as far as the window and the settings go, and stops where the rise stops. */
Test(reader_rule, climbs_to_what_a_deep_disk_wants)
{
	rf__reader_ahead a;
	rf__reader_ahead_start(&a, 32, 1, 4);
	static const double at[] = {1.9e9, 2.6e9, 3.4e9, 3.45e9}; /* 4, 8, 16, 32 chunks */
	unsigned k = 0;
	while (!a.settled && k < 4)
		rf__reader_ahead_rule(&a, at[k++], 0.05e9);
	cr_assert(a.settled);
	cr_assert_eq(a.on, 16u, "32 within the noise of 16: back to 16");
	cr_assert_eq(k, 4u);
	unsigned steps;
	cr_assert_eq(settle(32, rising, 0.05e9, &steps), 32u, "rising all the way: the top setting");
	cr_assert_eq(steps, 6u, "1, 2, 4, 8, 16, 32: the top is measured too (it may not pay)");
}

Test(reader_rule, a_rise_within_the_measurements_noise_does_not_count)
{
	unsigned steps;
	/* 1 -> 2 chunks gains 1 GB/s, but each rate's error is 1.5 GB/s: not a gain */
	cr_assert_eq(settle(16, rising, 1.5e9, &steps), 1u);
	/* the same gain with errors of 0.5 is one (the difference's error: 0.71) */
	cr_assert_eq(settle(16, knee4, 0.5e9, &steps), 4u);
	rf__reader_ahead a;
	rf__reader_ahead_start(&a, 16, 1, 1);
	cr_assert_eq(rf__reader_ahead_rule(&a, 1e9, 0), 2u);
	cr_assert_eq(rf__reader_ahead_rule(&a, 2e9, 1.1e9), 1u, "2.0 against 1.0, but with an error of 1.1");
	cr_assert(a.settled);
	cr_assert_eq(rf__reader_ahead_rule(&a, 9e9, 9e9), 1u, "settled for good");
	cr_assert_eq(a.rate[0], 1e9);
	cr_assert_eq(a.rate[1], 2e9);
}

static void add(rf__reader_samples *s, int m, float v)
{
	cr_assert(s->n[m] < RF__READER_PROBES);
	s->ns_per_byte[m][s->n[m]++] = v;
}

Test(reader_rule, alternates_then_takes_the_faster_median)
{
	rf__reader_samples s = {0};
	/* Probing: the method with fewer samples, O_DIRECT+move first on a tie. */
	for (unsigned k = 0; k < 2 * RF__READER_PROBES; k++) {
		cr_assert(!rf__reader_rule_decided(&s));
		int m = rf__reader_rule(&s);
		cr_assert_eq(m, k % 2 ? RF__READER_BUFFERED : RF__READER_MOVE, "copy %u", k);
		/* move: 1.0 ns/B with one outlier; buffered: 0.8 ns/B with two outliers */
		add(&s, m, m == RF__READER_MOVE ? (k == 0 ? 50.f : 1.0f) : (k == 1 || k == 3 ? 40.f : 0.8f));
	}
	cr_assert(rf__reader_rule_decided(&s));
	cr_assert_eq(rf__reader_rule(&s), RF__READER_BUFFERED, "medians 1.0 vs 0.8: buffered");
	/* Outliers do not decide: the medians do. */
	rf__reader_samples t = {0};
	for (unsigned k = 0; k < RF__READER_PROBES; k++) {
		add(&t, RF__READER_MOVE, k < 2 ? 100.f : 0.5f);
		add(&t, RF__READER_BUFFERED, 0.6f);
	}
	cr_assert_eq(rf__reader_rule(&t), RF__READER_MOVE);
	/* A tie keeps the page cache alone. */
	rf__reader_samples u = {0};
	for (unsigned k = 0; k < RF__READER_PROBES; k++) {
		add(&u, RF__READER_MOVE, 0.7f);
		add(&u, RF__READER_BUFFERED, 0.7f);
	}
	cr_assert_eq(rf__reader_rule(&u), RF__READER_MOVE);
	/* One method ahead (it finished more probes): the other catches up first. */
	rf__reader_samples v = {0};
	add(&v, RF__READER_MOVE, 1);
	add(&v, RF__READER_MOVE, 1);
	cr_assert_eq(rf__reader_rule(&v), RF__READER_BUFFERED);
}

Test(reader_rule, classes_and_pieces)
{
	cr_assert_eq(rf__reader_class(1), 0u);
	cr_assert_eq(rf__reader_class(4096), 0u);
	cr_assert_eq(rf__reader_class(4097), 1u);
	cr_assert_eq(rf__reader_class(65536), 4u);
	cr_assert_eq(rf__reader_class(1u << 20), 8u);
	cr_assert_eq(rf__reader_class((size_t)1 << 40), RF__READER_CLASSES - 1);
	/* A 1 MiB copy on a device that takes 4 MiB requests: one read. */
	cr_assert_eq(rf__reader_piece(1u << 20, 4096, 4u << 20), 1u << 20);
	/* ... and on one whose requests are split at 128 KiB: pieces of 128 KiB. */
	cr_assert_eq(rf__reader_piece(1u << 20, 4096, 128u << 10), 128u << 10);
	/* Small copies: one read, rounded up to the alignment. */
	cr_assert_eq(rf__reader_piece(65536, 4096, 4u << 20), 64u << 10);
	cr_assert_eq(rf__reader_piece(100, 512, 4u << 20), 512u);
	cr_assert_eq(rf__reader_piece(100000, 4096, 0), 102400u); /* rounded up to 4 KiB */
	/* Unknown device: at most RF__READER_PIECE_UNKNOWN; a huge reported limit: at most RF__READER_PIECE_MAX. */
	cr_assert_eq(rf__reader_piece(64u << 20, 4096, 0), RF__READER_PIECE_UNKNOWN);
	cr_assert_eq(rf__reader_piece(64u << 20, 4096, 1u << 30), RF__READER_PIECE_MAX);
	/* A limit that is not a multiple of the alignment (254 segments of 4 KiB) stays aligned. */
	cr_assert_eq(rf__reader_piece(64u << 20, 4096, 254u * 4096) % 4096, 0u);
}

/* A flight carrying two queues' copies holds a signal back only behind the copies it names: a signal
 * after none goes out while reads are in flight; one place's signals go out in order, each once the
 * copies before it have landed, whatever another place's signals wait for. */
Test(flight, signals_wait_only_for_the_copies_they_follow)
{
	enum { SZ = 1 << 20 };
	char *path = make_file(2 * SZ, 3);
	rf_file *f;
	cr_assert_eq(rf_file_open(path, 0, &f), RF_OK, "%s", rf_errmsg());
	unsigned char *buf = aligned_alloc(4096, 2 * SZ);
	rf__flight fl;
	_Atomic int64_t x = 0, y = 0, z = 0;
	rf__flight_init(&fl, NULL, 0, &x);
	cr_assert_eq(rf__flight_open(&fl, buf, 2 * SZ), RF_OK, "%s", rf_errmsg());
	int fd = open(path, O_RDONLY); /* cold, so that the reads are still in flight below */
	posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
	close(fd);
	rf__flight_rec rec = {0};
	rf__fsrc a = {f, 0}, b = {f, SZ};
	uint64_t before = fl.started;
	cr_assert_eq(rf__flight_start(&fl, &a, SZ, buf, SZ, &rec), RF_OK, "%s", rf_errmsg());
	rf__flight_signal_after(&fl, &x, 1, fl.started); /* x: behind copy a */
	cr_assert_eq(rf__flight_start(&fl, &b, SZ, buf + SZ, SZ, &rec), RF_OK, "%s", rf_errmsg());
	rf__flight_signal_after(&fl, &y, 7, before); /* y: behind nothing: at once */
	int in_flight = rf__flight_busy(&fl);
	cr_assert_eq(atomic_load(&y), 7, "a signal behind no copy waited for another queue's reads");
	rf__flight_signal_after(&fl, &x, 2, fl.started); /* x: behind copy b */
	rf__flight_signal(&fl, &z, 9);                   /* z: behind every copy */
	int64_t seen_x = 0;
	while (rf__flight_progress(&fl)) {
		int64_t v = atomic_load(&x);
		cr_assert_geq(v, seen_x, "x went back from %lld to %lld", (long long)seen_x, (long long)v);
		seen_x = v;
		if (atomic_load(&z) != 0)
			cr_assert_eq(v, 2, "z went out before x's last signal");
		rf__flight_sleep(&fl);
	}
	cr_assert_eq(atomic_load(&x), 2);
	cr_assert_eq(atomic_load(&z), 9);
	cr_log_info("reads still in flight when y went out: %s", in_flight ? "yes" : "no");
	for (size_t i = 0; i < 2 * SZ; i += 4093)
		cr_assert_eq(buf[i], byte_at(i, 3));
	rf__flight_fini(&fl);
	cr_assert_eq(rf_file_close(f), RF_OK);
	free(buf);
	drop(path);
}

/* The owner's hook hears of its traced copies only: each as it starts (stamped there, before its reads)
 * and once it landed, with how it went and, for a shifted read, where its bytes begin; the signal
 * behind a copy goes out after its hook. A failed copy lands with RF_EIO. */
typedef struct hook_log {
	int n;
	struct {
		int phase, rc;
		int64_t block, t0;
		size_t shift;
		int64_t signalled; /* the signal behind the copies, when the hook ran */
	} e[8];
	_Atomic int64_t *sig;
} hook_log;

static void log_hook(void *ctx, rf__flight_rec *r, int phase)
{
	hook_log *h = ctx;
	cr_assert_lt(h->n, 8);
	if (phase == RF__FLIGHT_STARTS)
		r->t0 = 1000 + r->block; /* the stamp comes back at landing */
	h->e[h->n].phase = phase, h->e[h->n].rc = r->rc, h->e[h->n].block = r->block, h->e[h->n].t0 = r->t0;
	h->e[h->n].shift = r->shift, h->e[h->n].signalled = atomic_load(h->sig);
	h->n++;
}

static void drain(rf__flight *fl)
{
	while (rf__flight_progress(fl))
		rf__flight_sleep(fl);
}

Test(flight, the_hook_hears_of_traced_copies_as_they_start_and_land)
{
	enum { SZ = 1 << 16, OFF = 1000 };
	char *path = make_file(4 * SZ, 5);
	rf_file *f;
	cr_assert_eq(rf_file_open(path, 0, &f), RF_OK, "%s", rf_errmsg());
	unsigned char *buf = aligned_alloc(4096, 4 * SZ);
	_Atomic int64_t sig = 0;
	hook_log h = {.sig = &sig};
	rf__flight fl;
	rf__flight_init(&fl, NULL, 0, &sig);
	cr_assert_eq(rf__flight_open(&fl, buf, 4 * SZ), RF_OK, "%s", rf_errmsg());
	fl.hook = log_hook, fl.hook_ctx = &h;
	rf__fsrc a = {f, OFF}, b = {f, 0}, c = {f, 3 * SZ};
	rf__flight_rec ra = {.block = 1, .traced = 1, .flags = RF__READER_SHIFT_OK}, rb = {.block = 2};
	cr_assert_eq(rf__flight_start(&fl, &a, SZ, buf, 2 * SZ, &ra), RF_OK, "%s", rf_errmsg());
	cr_assert_eq(h.n, 1, "stamped as it starts");
	cr_assert_eq(rf__flight_start(&fl, &b, SZ, buf + 2 * SZ, SZ, &rb), RF_OK, "%s", rf_errmsg());
	rf__flight_signal(&fl, NULL, 1);
	drain(&fl);
	cr_assert_eq(h.n, 2, "the traced copy: two calls; the untraced one: none");
	cr_assert(h.e[0].phase == RF__FLIGHT_STARTS && h.e[0].block == 1);
	cr_assert(h.e[1].phase == RF__FLIGHT_LANDED && h.e[1].block == 1 && h.e[1].rc == RF_OK);
	cr_assert_eq(h.e[1].t0, 1001, "the stamp made at the start");
	cr_assert_eq(h.e[1].signalled, 0, "the signal went out before its copy's hook");
	cr_assert_eq(atomic_load(&sig), 1);
	for (size_t i = 0; i < SZ; i += 997)
		cr_assert_eq(buf[h.e[1].shift + i], byte_at(OFF + i, 5), "byte %zu at dst + shift %zu", i, h.e[1].shift);
	cr_assert_eq(truncate(path, 3 * SZ), 0); /* copy c reads past the new end */
	rf__flight_rec rc = {.block = 3, .traced = 1};
	cr_assert_eq(rf__flight_start(&fl, &c, SZ, buf + 3 * SZ, SZ, &rc), RF_OK, "%s", rf_errmsg());
	rf__flight_signal(&fl, NULL, 2);
	drain(&fl);
	cr_assert_eq(h.n, 4);
	cr_assert(h.e[3].phase == RF__FLIGHT_LANDED && h.e[3].block == 3 && h.e[3].rc == RF_EIO);
	cr_assert(fl.failed && strstr(fl.msg, path) != NULL, "%s", fl.msg);
	cr_assert_eq(atomic_load(&sig), 1, "a run's failed copy stops the signals behind it");
	rf__flight_fini(&fl);
	cr_assert_eq(rf_file_close(f), RF_OK);
	free(buf);
	drop(path);
}

/* ---- a fixed depth's reads against its compute ------------------------------------------------- */

/* Little's law on synthetic figures (no clock): the rate the compute would take over the one measured,
 * times what was read ahead, in blocks, is what depth - 1 must hold. */
Test(reader_fill, the_depth_that_keeps_the_reads_ahead)
{
	cr_assert_eq(rf__flight_fill_depth(100e6, 50e6, 1u << 20, 1u << 20), 3u, "1 block ahead, twice the rate: 2");
	cr_assert_eq(rf__flight_fill_depth(100e6, 60e6, 3u << 20, 1u << 20), 9u, "3 blocks x 2.5 = 7.5: 8 ahead");
	cr_assert_eq(rf__flight_fill_depth(100e6, 20e6, 4u << 20, 1u << 20), 6u, "4 x 1.25 = 5, exactly");
	cr_assert_eq(rf__flight_fill_depth(100e6, 9e6, 1u << 20, 1u << 20), 0u, "under a tenth of the time: nothing said");
	cr_assert_eq(rf__flight_fill_depth(100e6, 10e6, 1u << 20, 1u << 20), 3u, "a tenth: 1.11 blocks, so 2");
	cr_assert_eq(rf__flight_fill_depth(100e6, 60e6, 4u << 20, 65536), RF__FLIGHT_MAX + 1u,
		     "more than a lane keeps in flight");
	cr_assert_eq(rf__flight_fill_depth(100e6, 100e6, 1u << 20, 1u << 20), RF__FLIGHT_MAX + 1u,
		     "it only waited: as far as it goes");
	cr_assert_eq(rf__flight_fill_depth(0, 0, 1u << 20, 1u << 20), 0u);
	cr_assert_eq(rf__flight_fill_depth(100e6, 50e6, 0, 1u << 20), 0u);
	cr_assert_eq(rf__flight_fill_depth(100e6, 50e6, 1u << 20, 0), 0u);
}

/* What a run's end measured, replaced (a test hook): the words do not depend on the disk's speed. */
static int64_t g_fill_elapsed, g_fill_waited;
static void fill_hook(int64_t *elapsed, int64_t *waited)
{
	*elapsed = g_fill_elapsed;
	*waited = g_fill_waited;
}

static int noop_compute(void *user, const rf_block *b)
{
	(void)user, (void)b;
	return 0;
}

static int fail_last_compute(void *user, const rf_block *b)
{
	(void)user;
	return b->index == 15 ? 7 : 0;
}

static void fill_run(rf_pipeline *p, const unsigned char *d, size_t block, size_t nb, int64_t elapsed, int64_t waited)
{
	const void **srcs = malloc(nb * sizeof *srcs);
	size_t *sizes = malloc(nb * sizeof *sizes);
	for (size_t i = 0; i < nb; i++)
		srcs[i] = d + i * block, sizes[i] = block;
	g_fill_elapsed = elapsed, g_fill_waited = waited;
	rf__test_hooks.flight_run_end = fill_hook;
	int rc = rf_pipeline_run(p, nb, srcs, sizes, noop_compute, NULL);
	rf__test_hooks.flight_run_end = NULL;
	cr_assert_eq(rc, RF_OK, "%s", rf_errmsg());
	free(srcs);
	free(sizes);
}

static rf_pipeline *fill_pipeline(unsigned depth, size_t slot_bytes)
{
	rf_pipeline_params pp = {.slot_bytes = slot_bytes, .backend = "threads"};
	if (depth != 0)
		pp.depth = depth;
	else
		pp.depth_auto = RF_DEPTH_AUTO;
	rf_pipeline *p = NULL;
	cr_assert_eq(rf_pipeline_create(&pp, &p), RF_OK, "%s", rf_errmsg());
	return p;
}

/* A fixed depth whose compute waited for its reads is told, in describe, the depth that would keep them
 * ahead at the same latency; one whose reads kept up is told nothing (and words said before go); depth =
 * auto, which measures, is told nothing. The ring of depth 4 reads blocks of 1 MiB on its own (no
 * window: more than it holds), and starts its four first copies before it waits for any (4 in flight). */
Test(reader_fill, describe_names_the_depth_that_would_keep_the_reads_ahead)
{
	if (!have_io_uring())
		cr_skip_test("without io_uring a file run's reads are the copy lanes' preads, not the caller's in flight");
	const size_t fsize = 16u << 20;
	char *path = make_file(fsize, 31);
	rf_file *f;
	cr_assert_eq(rf_file_open(path, 0, &f), RF_OK);
	const unsigned char *d = rf_file_data(f);
	rf_pipeline *p = fill_pipeline(4, 1u << 20);
	fill_run(p, d, 1u << 20, 16, 100000000, 60000000);
	const char *desc = rf_pipeline_describe(p);
	cr_assert(strstr(desc, "; the compute waited for reads 60% of the run, 3 x 1024K read ahead: at the same latency "
			       "depth 9 or more would keep them ahead (depth = auto measures what pays)") != NULL,
		  "%s", desc);
	fill_run(p, d, 1u << 20, 16, 100000000, 61000000);
	cr_assert_str_eq(rf_pipeline_describe(p), desc, "the same depth named: the line stands");
	fill_run(p, d, 1u << 20, 16, 100000000, 5000000);
	desc = rf_pipeline_describe(p);
	cr_assert(strstr(desc, "waited for reads") == NULL, "kept up: nothing said: %s", desc);
	fill_run(p, d, 1u << 20, 3, 100000000, 90000000);
	cr_assert(strstr(rf_pipeline_describe(p), "waited for reads") == NULL, "a run too short to say: %s",
		  rf_pipeline_describe(p));
	{ /* a run whose compute failed at its last block stopped early: its reads say nothing of the depth */
		const void *srcs[16];
		size_t sizes[16];
		for (size_t i = 0; i < 16; i++)
			srcs[i] = d + (i << 20), sizes[i] = 1u << 20;
		g_fill_elapsed = 100000000, g_fill_waited = 60000000;
		rf__test_hooks.flight_run_end = fill_hook;
		int rc = rf_pipeline_run(p, 16, srcs, sizes, fail_last_compute, NULL);
		rf__test_hooks.flight_run_end = NULL;
		cr_assert_eq(rc, RF_ECALLBACK, "%s", rf_errmsg());
		cr_assert(strstr(rf_pipeline_describe(p), "waited for reads") == NULL, "a failed run: %s",
			  rf_pipeline_describe(p));
	}
	rf_pipeline_destroy(p);
	/* small blocks through the fixed window: its chunks are what was read ahead */
	p = fill_pipeline(2, 65536);
	fill_run(p, d, 65536, 64, 100000000, 60000000);
	rf_stats st;
	cr_assert_eq(rf_pipeline_stats(p, &st), RF_OK);
	desc = rf_pipeline_describe(p);
	cr_assert_gt(st.ahead_bytes, 0u, "%s", desc);
	unsigned want = rf__flight_fill_depth(100e6, 60e6, (double)st.ahead_bytes, 65536);
	char w[160];
	if (want > RF__FLIGHT_MAX)
		snprintf(w, sizeof w, "read ahead: depth = auto would read further ahead");
	else
		snprintf(w, sizeof w, "read ahead: at the same latency depth %u or more", want);
	cr_assert(strstr(desc, "the compute waited for reads 60% of the run, ") != NULL && strstr(desc, w) != NULL,
		  "%s (%s)", desc, w);
	rf_pipeline_destroy(p);
	p = fill_pipeline(0, 1u << 20);
	fill_run(p, d, 1u << 20, 16, 100000000, 60000000);
	cr_assert(strstr(rf_pipeline_describe(p), "waited for reads") == NULL, "depth = auto: %s", rf_pipeline_describe(p));
	rf_pipeline_destroy(p);
	cr_assert_eq(rf_file_close(f), RF_OK);
	drop(path);
}
