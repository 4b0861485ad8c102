/* tests/test_file.c — rf_file_open / data / size / close, and how copy paths classify sources
 * (io/file.h): errors, FIFOs and devices that must not block, the mapping, ranges that cross a file's
 * end, holds that make close RF_EBUSY (keyed hints held back included), many files, and files opened and
 * closed while others classify. */
#include "base/test_hooks.h"
#include "io/file.h"
#include "memory/staging.h"
#include "ringfetch.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* A file of n bytes, byte i = (i * 7 + seed) & 255, in the work tree's disk (tmpfs refuses O_DIRECT). */
static char *make_file(size_t n, unsigned seed)
{
	char *path = strdup("rf_test_file_XXXXXX");
	int fd = mkstemp(path);
	cr_assert(fd >= 0);
	unsigned char *b = malloc(n ? n : 1);
	for (size_t i = 0; i < n; i++)
		b[i] = (unsigned char)((i * 7 + seed) & 255);
	cr_assert_eq(write(fd, b, n), (ssize_t)n);
	free(b);
	close(fd);
	return path;
}

static void drop(char *path)
{
	unlink(path);
	free(path);
}

Test(file, open_maps_the_bytes)
{
	char *path = make_file(100000, 3);
	rf_file *f = NULL;
	cr_assert_eq(rf_file_open(path, 0, &f), RF_OK, "%s", rf_errmsg());
	cr_assert_eq(rf_file_size(f), 100000u);
	const unsigned char *d = rf_file_data(f);
	cr_assert_not_null(d);
	for (size_t i = 0; i < 100000; i += 997)
		cr_assert_eq(d[i], (unsigned char)((i * 7 + 3) & 255));
	cr_assert_eq(rf_file_close(f), RF_OK);
	drop(path);
}

Test(file, bad_arguments)
{
	rf_file *f = (rf_file *)0x1;
	cr_assert_eq(rf_file_open(NULL, 0, &f), RF_EINVAL);
	cr_assert_eq(rf_file_open("x", 0, NULL), RF_EINVAL);
	char *path = make_file(10, 0);
	cr_assert_eq(rf_file_open(path, 2, &f), RF_EINVAL);
	cr_assert(strstr(rf_errmsg(), "flags") != NULL, "%s", rf_errmsg());
	cr_assert_eq(f, (rf_file *)0x1, "*out changed on failure");
	cr_assert_eq(rf_file_close(NULL), RF_OK);
	cr_assert_null(rf_file_data(NULL));
	cr_assert_eq(rf_file_size(NULL), 0u);
	drop(path);
}

/* rf_file_read: the bytes of the file opened, at any offset and length inside it; a range outside it
 * EINVAL; after the file shrank EIO; after another file was renamed over the path, still the first's. */
Test(file, read_gives_the_opened_files_bytes)
{
	char *path = make_file(100000, 5);
	rf_file *f = NULL;
	cr_assert_eq(rf_file_open(path, 0, &f), RF_OK, "%s", rf_errmsg());
	unsigned char b[5000];
	cr_assert_eq(rf_file_read(f, 12345, b, sizeof b), RF_OK, "%s", rf_errmsg());
	for (size_t i = 0; i < sizeof b; i++)
		cr_assert_eq(b[i], (unsigned char)(((12345 + i) * 7 + 5) & 255), "byte %zu", i);
	cr_assert_eq(rf_file_read(f, 100000 - 3, b, 3), RF_OK, "%s", rf_errmsg());
	cr_assert_eq(rf_file_read(f, 100000, NULL, 0), RF_OK, "%s", rf_errmsg());
	cr_assert_eq(rf_file_read(f, 100000 - 3, b, 4), RF_EINVAL);
	cr_assert(strstr(rf_errmsg(), "not inside") != NULL, "%s", rf_errmsg());
	cr_assert_eq(rf_file_read(f, UINT64_MAX, b, 2), RF_EINVAL);
	cr_assert_eq(rf_file_read(f, 0, NULL, 1), RF_EINVAL);
	cr_assert_eq(rf_file_read(NULL, 0, b, 1), RF_EINVAL);

	int wfd = open(path, O_WRONLY); /* to shrink the opened file once another is renamed over it */
	cr_assert(wfd >= 0);
	char *other = make_file(100000, 9);
	cr_assert_eq(rename(other, path), 0);
	cr_assert_eq(rf_file_read(f, 0, b, 100), RF_OK, "%s", rf_errmsg());
	for (size_t i = 0; i < 100; i++)
		cr_assert_eq(b[i], (unsigned char)((i * 7 + 5) & 255), "byte %zu: not the opened file's", i);
	free(other);
	cr_assert_eq(ftruncate(wfd, 1000), 0);
	close(wfd);
	cr_assert_eq(rf_file_read(f, 500, b, 100), RF_OK, "%s", rf_errmsg());
	cr_assert_eq(rf_file_read(f, 990, b, 100), RF_EIO);
	cr_assert(strstr(rf_errmsg(), "shrank") != NULL, "%s", rf_errmsg());
	cr_assert_eq(rf_file_close(f), RF_OK);
	drop(path);
}

Test(file, not_regular_files_are_refused_without_blocking)
{
	rf_file *f = (rf_file *)0x1;
	cr_assert_eq(rf_file_open(".", 0, &f), RF_ENOTSUP);
	cr_assert(strstr(rf_errmsg(), "directory") != NULL, "%s", rf_errmsg());
	cr_assert_eq(rf_file_open("/dev/null", 0, &f), RF_ENOTSUP);
	cr_assert(strstr(rf_errmsg(), "device") != NULL, "%s", rf_errmsg());
	char fifo[] = "rf_test_fifo_XXXXXX";
	int fd = mkstemp(fifo);
	close(fd);
	unlink(fifo);
	cr_assert_eq(mkfifo(fifo, 0600), 0);
	cr_assert_eq(rf_file_open(fifo, 0, &f), RF_ENOTSUP); /* no writer: an open that blocked would hang here */
	cr_assert(strstr(rf_errmsg(), "FIFO") != NULL, "%s", rf_errmsg());
	unlink(fifo);
	char *empty = make_file(0, 0);
	cr_assert_eq(rf_file_open(empty, 0, &f), RF_ENOTSUP);
	cr_assert(strstr(rf_errmsg(), "empty") != NULL, "%s", rf_errmsg());
	drop(empty);
	/* A socket cannot be opened at all (ENXIO): still what it is, not an I/O error. */
	char sock[] = "rf_test_sock_XXXXXX";
	fd = mkstemp(sock);
	close(fd);
	unlink(sock);
	int s = socket(AF_UNIX, SOCK_STREAM, 0);
	cr_assert(s >= 0);
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	snprintf(sa.sun_path, sizeof sa.sun_path, "%s", sock);
	cr_assert_eq(bind(s, (struct sockaddr *)&sa, sizeof sa), 0);
	cr_assert_eq(rf_file_open(sock, 0, &f), RF_ENOTSUP, "%s", rf_errmsg());
	cr_assert(strstr(rf_errmsg(), "socket") != NULL, "%s", rf_errmsg());
	close(s);
	unlink(sock);
	/* Pseudo files: no size (proc) or a page that is not their size (sysfs); neither is "empty". */
	cr_assert_eq(rf_file_open("/proc/self/status", 0, &f), RF_ENOTSUP, "%s", rf_errmsg());
	cr_assert(strstr(rf_errmsg(), "pseudo file (proc)") != NULL && strstr(rf_errmsg(), "empty") == NULL, "%s",
		  rf_errmsg());
	if (access("/sys/kernel/mm/transparent_hugepage/enabled", R_OK) == 0) {
		cr_assert_eq(rf_file_open("/sys/kernel/mm/transparent_hugepage/enabled", 0, &f), RF_ENOTSUP, "%s",
			     rf_errmsg());
		cr_assert(strstr(rf_errmsg(), "pseudo file (sysfs)") != NULL, "%s", rf_errmsg());
	}
	cr_assert_eq(f, (rf_file *)0x1);
}

Test(file, missing_file_is_an_io_error_naming_it)
{
	rf_file *f;
	cr_assert_eq(rf_file_open("/nonexistent/rf_weights.bin", 0, &f), RF_EIO);
	cr_assert(strstr(rf_errmsg(), "/nonexistent/rf_weights.bin") != NULL, "%s", rf_errmsg());
	cr_assert(strstr(rf_errmsg(), "No such file") != NULL, "%s", rf_errmsg());
}

Test(file, o_direct_where_the_disk_takes_it)
{
	char *path = make_file(8192, 1);
	rf_file *f, *b;
	cr_assert_eq(rf_file_open(path, 0, &f), RF_OK);
	cr_assert_eq(rf_file_open(path, RF_FILE_BUFFERED, &b), RF_OK);
	/* The work tree is on a disk that takes O_DIRECT (ext4 here); a page is always enough alignment. */
	size_t a = f->dio_align;
	cr_assert(a >= 512 && a <= 4096 && (a & (a - 1)) == 0, "dio align %zu", a);
	cr_assert_neq(rf__file_fd(f, 1), rf__file_fd(f, 0));
	cr_assert_eq(b->dio_align, 0u);
	cr_assert_eq(rf__file_fd(b, 1), rf__file_fd(b, 0));
	cr_assert_eq(rf_file_close(f), RF_OK);
	cr_assert_eq(rf_file_close(b), RF_OK);
	drop(path);
}

/* One descriptor left under RLIMIT_NOFILE: the buffered descriptor opens, the O_DIRECT one cannot. The open
 * fails, naming it (RF_EIO, nothing left open), instead of a file that reads everything through the page
 * cache while describe says O_DIRECT; RF_FILE_BUFFERED, which needs one descriptor, opens. In a child,
 * so that the limit stays there. */
static int one_fd_left_child(const char *path)
{
	int probe = open("/dev/null", O_RDONLY); /* the lowest free descriptor */
	if (probe < 0)
		return 10;
	close(probe);
	struct rlimit rl;
	if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
		return 11;
	rl.rlim_cur = (rlim_t)probe + 1;
	if (setrlimit(RLIMIT_NOFILE, &rl) != 0)
		return 12;
	rf_file *f = (rf_file *)0x1;
	int rc = rf_file_open(path, 0, &f);
	if (rc == RF_OK)
		return 1; /* O_DIRECT dropped without a word */
	if (rc != RF_EIO || f != (rf_file *)0x1)
		return 2;
	if (strstr(rf_errmsg(), "O_DIRECT") == NULL || strstr(rf_errmsg(), path) == NULL ||
	    strstr(rf_errmsg(), strerror(EMFILE)) == NULL)
		return 3;
	int again = open("/dev/null", O_RDONLY); /* the failed open left no descriptor behind */
	if (again != probe)
		return 4;
	close(again);
	if (rf_file_open(path, RF_FILE_BUFFERED, &f) != RF_OK || rf__file_fd(f, 1) != rf__file_fd(f, 0))
		return 5;
	if (((const unsigned char *)rf_file_data(f))[10] != (unsigned char)((10 * 7 + 6) & 255))
		return 6;
	return rf_file_close(f) == RF_OK ? 0 : 7;
}

Test(file, no_descriptor_for_o_direct_fails_the_open_naming_it)
{
	char *path = make_file(8192, 6);
	rf_file *f;
	cr_assert_eq(rf_file_open(path, 0, &f), RF_OK, "%s", rf_errmsg());
	int direct = f->dio_align != 0;
	cr_assert_eq(rf_file_close(f), RF_OK);
	if (!direct) {
		drop(path);
		cr_skip_test("the work tree's file system takes no O_DIRECT");
	}
	fflush(NULL);
	pid_t pid = fork();
	cr_assert_neq(pid, -1);
	if (pid == 0)
		_exit(one_fd_left_child(path));
	int st = 0;
	cr_assert_eq(waitpid(pid, &st, 0), pid);
	drop(path);
	cr_assert(WIFEXITED(st), "the child was killed by signal %d", WTERMSIG(st));
	cr_assert_eq(WEXITSTATUS(st), 0, "step %d failed (1: RF_OK with O_DIRECT silently dropped)",
		     WEXITSTATUS(st));
}

Test(file, classify_memory_file_and_crossing_ranges)
{
	char *path = make_file(65536, 2);
	rf_file *f;
	cr_assert_eq(rf_file_open(path, 0, &f), RF_OK);
	const unsigned char *d = rf_file_data(f);
	static unsigned char mem[64];
	rf__src s = {0};
	cr_assert_eq(rf__file_classify("t", "block 0", mem, sizeof mem, &s), 0);
	cr_assert_eq(rf__file_classify("t", "block 0", d, 65536, &s), 1);
	cr_assert_eq(s.fs.f, f);
	cr_assert_eq(s.fs.off, 0u);
	cr_assert_eq(rf__file_classify("t", "block 1", d + 4097, 100, &s), 1);
	cr_assert_eq(rf__file_hold("t", "block 1", &s, 100), RF_OK);
	cr_assert_eq(s.fs.off, 4097u);
	/* held: close refuses, and changes nothing */
	cr_assert_eq(rf_file_close(f), RF_EBUSY);
	cr_assert(strstr(rf_errmsg(), "in flight") != NULL, "%s", rf_errmsg());
	cr_assert_eq(rf_file_data(f), d);
	rf__file_unhold(f);
	cr_assert_eq(rf__file_classify("t", "block 2", d + 65535, 2, &s), RF_EINVAL);
	cr_assert(strstr(rf_errmsg(), "block 2") != NULL && strstr(rf_errmsg(), "1 bytes past") != NULL, "%s",
		  rf_errmsg());
	cr_assert_eq(rf__file_classify("t", "block 3", d + 65535, 1, &s), 1);
	cr_assert_eq(rf_file_close(f), RF_OK);
	cr_assert_eq(rf__file_classify("t", "block 0", d, 1, &s), 0, "a closed file is no source");
	drop(path);
}

/* A range that overlaps a file's mapping without lying inside the file: from the file's end into the last
 * page's tail, in the tail, from below the mapping into it or over it. Memory right next to the mapping
 * (below it, and past the mapping's end) is memory. */
Test(file, classify_ranges_overlapping_a_mapping_outside_the_file)
{
	char *path = make_file(10000, 4); /* not a page multiple: the last page has a tail */
	rf_file *f;
	cr_assert_eq(rf_file_open(path, 0, &f), RF_OK);
	const unsigned char *d = rf_file_data(f);
	long page = sysconf(_SC_PAGESIZE);
	size_t end = ((size_t)10000 + (size_t)page - 1) & ~((size_t)page - 1);
	rf__src s = {0};
	cr_assert_eq(rf__file_classify("t", "b", d + 10000, 1, &s), RF_EINVAL);
	cr_assert(strstr(rf_errmsg(), "0 bytes past the end of file") != NULL && strstr(rf_errmsg(), path) != NULL,
		  "%s", rf_errmsg());
	cr_assert_eq(rf__file_classify("t", "b", d + end - 1, 1, &s), RF_EINVAL, "the tail's last byte");
	cr_assert_eq(rf__file_classify("t", "b", d - 10, 20, &s), RF_EINVAL);
	cr_assert(strstr(rf_errmsg(), "10 bytes before file") != NULL, "%s", rf_errmsg());
	cr_assert_eq(rf__file_classify("t", "b", d - 10, 20000, &s), RF_EINVAL, "over the whole mapping");
	cr_assert_eq(rf__file_classify("t", "b", d - 10, 10, &s), 0, "ends where the mapping starts");
	cr_assert_eq(rf__file_classify("t", "b", d + end, 10, &s), 0, "starts where the mapping ends");
	cr_assert_eq(rf__file_classify("t", "b", d + 9990, 10, &s), 1);
	cr_assert_eq(rf__file_hold("t", "b", &s, 10), RF_OK);
	cr_assert_eq(s.fs.off, 9990u);
	rf__file_unhold(f);
	cr_assert_eq(rf_file_close(f), RF_OK);
	drop(path);
}

Test(file, many_files_each_found)
{
	enum { N = 100 };
	char *paths[N];
	rf_file *f[N];
	for (int i = 0; i < N; i++) {
		paths[i] = make_file(4096 + (size_t)i, (unsigned)i);
		cr_assert_eq(rf_file_open(paths[i], i % 2 ? RF_FILE_BUFFERED : 0, &f[i]), RF_OK, "%s", rf_errmsg());
	}
	for (int i = 0; i < N; i += 3) { /* close some, out of order */
		cr_assert_eq(rf_file_close(f[i]), RF_OK);
		f[i] = NULL;
	}
	for (int i = 0; i < N; i++) {
		if (f[i] == NULL)
			continue;
		rf__src s;
		const unsigned char *d = rf_file_data(f[i]);
		cr_assert_eq(rf__file_classify("t", "b", d + i, 4096, &s), 1);
		cr_assert_eq(s.fs.f, f[i]);
		cr_assert_eq(s.fs.off, (uint64_t)i);
		cr_assert_eq(d[i], (unsigned char)((i * 7 + i) & 255));
	}
	for (int i = 0; i < N; i++) {
		cr_assert_eq(rf_file_close(f[i]), RF_OK);
		drop(paths[i]);
	}
}

/* Four threads open 200 files each at once: the registry's array grows while other opens wait to grow
 * it too (each grows it with the lock let go, then looks again); every file is found afterwards. */
enum { PAR_T = 4, PAR_N = 200 };
static char *g_par_path;
static rf_file *g_par[PAR_T][PAR_N];

static void *open_many(void *arg)
{
	rf_file **f = arg;
	long bad = 0;
	for (int i = 0; i < PAR_N; i++)
		bad += rf_file_open(g_par_path, RF_FILE_BUFFERED, &f[i]) != RF_OK;
	return (void *)bad;
}

Test(file, files_opened_on_several_threads_are_each_found)
{
	g_par_path = make_file(4096, 8);
	pthread_t th[PAR_T];
	for (int t = 0; t < PAR_T; t++)
		cr_assert_eq(pthread_create(&th[t], NULL, open_many, g_par[t]), 0);
	for (int t = 0; t < PAR_T; t++) {
		void *bad;
		pthread_join(th[t], &bad);
		cr_assert_eq((long)bad, 0, "%ld opens failed", (long)bad);
	}
	for (int t = 0; t < PAR_T; t++)
		for (int i = 0; i < PAR_N; i++) {
			rf__src s;
			const unsigned char *d = rf_file_data(g_par[t][i]);
			cr_assert_eq(rf__file_classify("t", "b", d + 7, 100, &s), 1, "thread %d file %d", t, i);
			cr_assert_eq(s.fs.f, g_par[t][i]);
			cr_assert_eq(s.fs.off, 7u);
		}
	for (int t = 0; t < PAR_T; t++)
		for (int i = 0; i < PAR_N; i++)
			cr_assert_eq(rf_file_close(g_par[t][i]), RF_OK);
	drop(g_par_path);
}

/* Classifiers on two threads while the main thread opens and closes other files: every lookup of the
 * steady file finds it, every lookup of memory finds none (the seqlock's retry under real races). */
static atomic_int stop_churn;
static const unsigned char *steady;
static void *classify_loop(void *arg)
{
	(void)arg;
	static unsigned char mem[16];
	long bad = 0;
	while (!atomic_load(&stop_churn)) {
		rf__src s;
		bad += rf__file_classify("t", "b", steady + 100, 10, &s) != 1 || s.fs.off != 100;
		bad += rf__file_classify("t", "b", mem, sizeof mem, &s) != 0;
	}
	return (void *)bad;
}

Test(file, classify_while_files_open_and_close)
{
	char *path = make_file(4096, 9);
	rf_file *f;
	cr_assert_eq(rf_file_open(path, RF_FILE_BUFFERED, &f), RF_OK);
	steady = rf_file_data(f);
	pthread_t th[2];
	for (int i = 0; i < 2; i++)
		pthread_create(&th[i], NULL, classify_loop, NULL);
	char *other = make_file(4096, 1);
	for (int i = 0; i < 300; i++) {
		rf_file *g[4];
		for (int k = 0; k < 4; k++)
			cr_assert_eq(rf_file_open(other, RF_FILE_BUFFERED, &g[k]), RF_OK);
		for (int k = 0; k < 4; k++)
			cr_assert_eq(rf_file_close(g[k]), RF_OK);
	}
	atomic_store(&stop_churn, 1);
	for (int i = 0; i < 2; i++) {
		void *bad;
		pthread_join(th[i], &bad);
		cr_assert_eq((long)bad, 0, "%ld wrong classifications", (long)bad);
	}
	cr_assert_eq(rf_file_close(f), RF_OK);
	drop(other);
	drop(path);
}

static int sum_cb(void *user, const rf_block *b)
{
	*(unsigned *)user += ((const unsigned char *)b->data)[0];
	return 0;
}

/* ---- every source is resolved once ------------------------------------------------------------------ */

static atomic_long g_classified;

static void count_classify(const void *src, size_t n)
{
	(void)src, (void)n;
	atomic_fetch_add(&g_classified, 1);
}

typedef struct same_ctx {
	const void *const *srcs;
	long bad;
} same_ctx;

static int same_cb(void *user, const rf_block *b)
{
	same_ctx *c = user;
	c->bad += b->bytes != 0 && memcmp(b->data, c->srcs[b->index], b->bytes) != 0;
	return 0;
}

/* A run's sources are resolved by the engine, once per non-empty block, and the copies read what it
 * resolved; a keyed call's once, by the keyed cache. Before, the engine looked each file block up three
 * times (check, hold, let go) and the backend's copy once more; a keyed miss twice, a held-back hint
 * three times. Runs mixing file ranges, memory and empty blocks, and runs of file ranges only (read in
 * flight), on each CPU backend and depth 1 and 3; then misses, hints (issued and held back) and hits. */
Test(file, each_source_is_resolved_once, .timeout = 120)
{
	enum { N = 24, SB = 4096 };
	char *path = make_file(2 * N * SB, 6);
	rf_file *f;
	cr_assert_eq(rf_file_open(path, 0, &f), RF_OK, "%s", rf_errmsg());
	const unsigned char *d = rf_file_data(f);
	static unsigned char mem[SB];
	const void *srcs[2][N];
	size_t sizes[2][N], nonempty[2] = {0, 0};
	for (size_t i = 0; i < N; i++) {
		srcs[0][i] = i % 4 == 3 ? (const void *)mem : d + i * SB + i; /* mixed */
		sizes[0][i] = i % 8 == 5 ? 0 : SB - i;
		srcs[1][i] = d + (N + i) * SB; /* file ranges only, in file order */
		sizes[1][i] = SB;
		nonempty[0] += sizes[0][i] != 0;
		nonempty[1]++;
	}
	const char *backends[] = {"cpu", "threads"};
	for (int be = 0; be < 2; be++)
		for (unsigned depth = 1; depth <= 3; depth += 2) {
			rf_pipeline_params pp = {.depth = depth, .slot_bytes = SB, .backend = backends[be]};
			rf_pipeline *p;
			cr_assert_eq(rf_pipeline_create(&pp, &p), RF_OK, "%s", rf_errmsg());
			rf__test_hooks.classify = count_classify;
			for (int set = 0; set < 2; set++) {
				same_ctx c = {srcs[set], 0};
				atomic_store(&g_classified, 0);
				cr_assert_eq(rf_pipeline_run(p, N, srcs[set], sizes[set], same_cb, &c), RF_OK, "%s",
					     rf_errmsg());
				cr_assert_eq(c.bad, 0);
				cr_assert_eq(atomic_load(&g_classified), (long)nonempty[set], "%s depth %u, set %d: %ld "
					     "lookups for %zu blocks", backends[be], depth, set, atomic_load(&g_classified),
					     nonempty[set]);
			}
			atomic_store(&g_classified, 0);
			long calls = 0;
			for (unsigned k = 0; k < 2 * depth + 4; k++, calls++) /* hints: issued, then held back */
				cr_assert_eq(rf_pipeline_prefetch(p, k, d + k * SB, SB, 0), RF_OK, "%s", rf_errmsg());
			for (unsigned k = 0; k < 2 * depth + 8; k++, calls++) { /* hits, misses */
				rf_block b;
				cr_assert_eq(rf_pipeline_acquire(p, k, d + k * SB, SB, NULL, 0, &b), RF_OK, "%s",
					     rf_errmsg());
				cr_assert_eq(memcmp(b.data, d + k * SB, SB), 0, "key %u", k);
				cr_assert_eq(rf_pipeline_release(p, &b), RF_OK);
			}
			cr_assert_eq(atomic_load(&g_classified), calls, "%s depth %u: %ld lookups for %ld keyed calls",
				     backends[be], depth, atomic_load(&g_classified), calls);
			rf__test_hooks.classify = NULL;
			rf_pipeline_destroy(p);
		}
	cr_assert_eq(rf_file_close(f), RF_OK, "%s", rf_errmsg());
	drop(path);
}

/* A source resolved as a file's, then its file closed: a hold is RF_EINVAL, nothing held. */
Test(file, a_hold_after_close_is_einval)
{
	char *path = make_file(8192, 7);
	rf_file *f;
	cr_assert_eq(rf_file_open(path, 0, &f), RF_OK, "%s", rf_errmsg());
	rf__src s;
	cr_assert_eq(rf__file_classify("t", "block 4", (const unsigned char *)rf_file_data(f) + 100, 1000, &s), 1);
	cr_assert_eq(rf_file_close(f), RF_OK);
	cr_assert_eq(rf__file_hold("t", "block 4", &s, 1000), RF_EINVAL);
	cr_assert(strstr(rf_errmsg(), "block 4 lies in a file closed") != NULL, "%s", rf_errmsg());
	drop(path);
}

/* ---- keyed hints held back (not yet on a copy lane) keep their file open ------------------------------ */

static atomic_int g_gate; /* 0: the threads backend's copy lane waits before it claims each hint copy */

static void gate_hook(int started)
{
	struct timespec d = {0, 500000};
	while (!started && !atomic_load(&g_gate)) /* until the test opens it, however busy the machine */
		nanosleep(&d, NULL);
}

enum { HB_SB = 8192, HB_FILL = 8, HB_N = 4 };
static unsigned char g_hbmem[HB_FILL][HB_SB];

static void hb_acquire_all(rf_pipeline *p, const unsigned char *d, unsigned seed)
{
	for (unsigned k = 0; k < HB_N; k++) {
		rf_block b;
		cr_assert_eq(rf_pipeline_acquire(p, 100 + k, d + k * HB_SB, HB_SB, NULL, 0, &b), RF_OK, "%s",
			     rf_errmsg());
		const unsigned char *q = b.data;
		for (size_t i = 0; i < HB_SB; i += 511)
			cr_assert_eq(q[i], (unsigned char)(((k * HB_SB + i) * 7 + seed) & 255), "key %u byte %zu", 100 + k,
				     i);
		cr_assert_eq(rf_pipeline_release(p, &b), RF_OK);
	}
}

/* The copy lane is full of queued memory hints (gated): hints of a file's ranges are held back, no copy
 * yet holding the file. Closing it is RF_EBUSY (nothing changes: the hints later read the right bytes),
 * until each hint has left: its copy issued and landed, its key evicted, overtaken by an acquire, the
 * keys dropped by a run, or the pipeline destroyed. Before, close answered RF_OK and the lane then
 * copied from the unmapped range (SIGSEGV). */
Test(file, held_back_hints_keep_their_file_open, .timeout = 120)
{
	char *path = make_file(HB_N * HB_SB, 5);
	for (int how = 0; how < 5; how++) {
		rf_file *f;
		cr_assert_eq(rf_file_open(path, 0, &f), RF_OK, "%s", rf_errmsg());
		const unsigned char *d = rf_file_data(f);
		atomic_store(&g_gate, 0);
		rf__test_hooks.keyed_before_copy = gate_hook;
		rf_pipeline_params pp = {0};
		pp.depth = 16;
		pp.slot_bytes = HB_SB;
		pp.backend = "threads";
		rf_pipeline *p = NULL;
		cr_assert_eq(rf_pipeline_create(&pp, &p), RF_OK, "%s", rf_errmsg());
		for (unsigned k = 0; k < HB_FILL; k++) /* the lane's queue, full (gated) */
			cr_assert_eq(rf_pipeline_prefetch(p, k, g_hbmem[k], HB_SB, 0), RF_OK, "%s", rf_errmsg());
		for (unsigned k = 0; k < HB_N; k++) /* held back */
			cr_assert_eq(rf_pipeline_prefetch(p, 100 + k, d + k * HB_SB, HB_SB, 0), RF_OK, "%s", rf_errmsg());
		cr_assert_eq(rf_file_close(f), RF_EBUSY, "case %d: closed with hints of it held back", how);
		cr_assert(strstr(rf_errmsg(), path) != NULL && strstr(rf_errmsg(), "held back") != NULL, "%s",
			  rf_errmsg());
		cr_assert_eq(rf_file_data(f), d, "a refused close changes nothing");
		switch (how) {
		case 0: /* the lane takes them: they land (or are copied by the acquire), right bytes */
			atomic_store(&g_gate, 1);
			hb_acquire_all(p, d, 5);
			break;
		case 1: /* evicted while still held back */
			for (unsigned k = 0; k < HB_N; k++)
				cr_assert_eq(rf_pipeline_evict(p, 100 + k), RF_OK, "%s", rf_errmsg());
			break;
		case 2: /* overtaken: each acquire copies its key itself, the lane still gated */
			hb_acquire_all(p, d, 5);
			break;
		case 3: { /* a run drops every key */
			atomic_store(&g_gate, 1);
			const void *srcs[1] = {g_hbmem[0]};
			size_t sizes[1] = {64};
			unsigned sum = 0;
			cr_assert_eq(rf_pipeline_run(p, 1, srcs, sizes, sum_cb, &sum), RF_OK, "%s", rf_errmsg());
			break;
		}
		default: /* destroyed */
			atomic_store(&g_gate, 1);
			rf_pipeline_destroy(p);
			p = NULL;
		}
		cr_assert_eq(rf_file_close(f), RF_OK, "case %d: %s", how, rf_errmsg());
		atomic_store(&g_gate, 1);
		rf_pipeline_destroy(p);
		rf__test_hooks.keyed_before_copy = NULL;
	}
	drop(path);
}

/* A destroy that lands while a run is refused for its sources (here: from the resolution itself, as
 * another thread's destroy could) is the run's to finish: the pipeline is released, not left behind. */
static rf_pipeline *g_doom;

static void doom_on_classify(const void *src, size_t n)
{
	(void)src, (void)n;
	if (g_doom != NULL) {
		rf_pipeline *p = g_doom;
		g_doom = NULL;
		rf_pipeline_destroy(p); /* deferred: the run holds the pipeline */
	}
}

Test(file, a_destroy_during_a_refused_run_releases_the_pipeline)
{
	char *path = make_file(8192, 7);
	rf_file *f;
	cr_assert_eq(rf_file_open(path, 0, &f), RF_OK, "%s", rf_errmsg());
	const unsigned char *d = rf_file_data(f);
	const char *backends[] = {"cpu", "threads"};
	for (int be = 0; be < 2; be++) {
		rf__staging_stats before, after;
		rf__staging_get_stats(&before);
		rf_pipeline_params pp = {.depth = 2, .slot_bytes = 8192, .backend = backends[be]};
		rf_pipeline *p;
		cr_assert_eq(rf_pipeline_create(&pp, &p), RF_OK, "%s", rf_errmsg());
		const void *srcs[2] = {d + 4096, d};
		size_t sizes[2] = {8192, 4096}; /* block 0 runs past the file's end */
		g_doom = p;
		rf__test_hooks.classify = doom_on_classify;
		cr_assert_eq(rf_pipeline_run(p, 2, srcs, sizes, same_cb, &(same_ctx){srcs, 0}), RF_EINVAL);
		rf__test_hooks.classify = NULL;
		cr_assert_null(g_doom);
		rf__staging_get_stats(&after);
		cr_assert_eq(after.live_allocs, before.live_allocs, "%s: the destroyed pipeline's slots are still "
			     "allocated (%ld, before %ld)", backends[be], after.live_allocs, before.live_allocs);
	}
	cr_assert_eq(rf_file_close(f), RF_OK, "%s", rf_errmsg());
	drop(path);
}
