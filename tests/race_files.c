/* tests/race_files.c — seeded stress of file sources through pipelines, as a plain program so that it
 * runs under ThreadSanitizer. Each iteration creates a pipeline (random backend cpu/threads, depth
 * 1..6 or depth = auto, copy queues, wait policy, locality) and alternates runs whose blocks mix ranges
 * of two open files (one O_DIRECT, one RF_FILE_BUFFERED; aligned and unaligned offsets, random lengths)
 * with memory blocks, now and then one past the end of a file that shrank (RF_EIO), and keyed phases of hints and acquires over file ranges, some hints naming the same bytes in
 * a copy of the file that shrank since it was opened (their reads fail on a lane, and the acquire that
 * follows names the whole file); every compute and every acquire checks the payload. Another thread
 * polls rf_pipeline_stats, keyed_stats and lookup all the time, and cancels a run now and then
 * (RF_ECANCELED, the cancel cleared after it); two more open and close dozens of
 * files at a time (the registry grows and shrinks under the classifications), and each iteration forks
 * a child that opens and closes a file while they do (in the plain build: see fork_child_opens_a_file).
 *
 * usage: race_files [--seed S] [--iterations N]
 * Output ends with the plain line "N passed, N failed"; a failure prints the line that replays it. */
#include "ringfetch.h"

#include <fcntl.h>
#include <sched.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define FSIZE (4u << 20)
#define MAXB (256u << 10)
#define NB 24

static unsigned char *g_ref;
static const unsigned char *g_map[3]; /* [2]: the copy that shrank to FSIZE / 2 */
static unsigned char g_mem[NB][4096];
static atomic_int g_stop, g_bad;
static unsigned long long g_bad_hints, g_wasted; /* hints into the shrunk copy; hints wasted */
static rf_pipeline *_Atomic g_p;
static atomic_int g_busy;

static unsigned long long splitmix(unsigned long long *s)
{
	unsigned long long z = (*s += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static unsigned long long rnd(unsigned long long *s, unsigned long long n)
{
	return n ? splitmix(s) % n : 0;
}

typedef struct blocks {
	const void *srcs[NB];
	const unsigned char *want[NB];
	size_t sizes[NB];
} blocks;

static int check_cb(void *user, const rf_block *b)
{
	const blocks *bl = user;
	if (memcmp(b->data, bl->want[b->index], b->bytes) != 0) {
		fprintf(stderr, "block %zu: wrong payload\n", b->index);
		atomic_store(&g_bad, 1);
		return 1;
	}
	return 0;
}

/* A source: a range of file 0 or 1, or memory; its expected bytes. */
static void pick(unsigned long long *s, size_t cap, const void **src, const unsigned char **want, size_t *n)
{
	unsigned kind = (unsigned)rnd(s, 3);
	size_t len = 1 + (size_t)rnd(s, cap);
	if (kind == 2) {
		unsigned k = (unsigned)rnd(s, NB);
		len = 1 + len % sizeof g_mem[k];
		*src = g_mem[k], *want = g_mem[k];
	} else {
		size_t off = rnd(s, 4) == 0 ? (size_t)rnd(s, FSIZE / 4096) * 4096 : (size_t)rnd(s, FSIZE);
		if (off + len > FSIZE)
			off = FSIZE - len;
		*src = g_map[kind] + off, *want = g_ref + off;
	}
	*n = len;
}

static void *observer(void *arg)
{
	(void)arg;
	unsigned long long s = 5;
	while (!atomic_load(&g_stop)) {
		atomic_store(&g_busy, 1);
		rf_pipeline *p = atomic_load(&g_p);
		if (p != NULL) {
			rf_stats st;
			rf_keyed_stats ks;
			rf_key_state k;
			rf_pipeline_stats(p, &st);
			rf_pipeline_keyed_stats(p, &ks);
			rf_pipeline_lookup(p, 3, &k, NULL);
			(void)rf_pipeline_describe(p);
			if (rnd(&s, 200) == 0)
				rf_pipeline_cancel(p);
		}
		atomic_store(&g_busy, 0);
		sched_yield();
	}
	return NULL;
}

static const char *g_path;

/* Opens and closes up to 40 files at a time, buffered and O_DIRECT, until stopped. */
static void *churn(void *arg)
{
	(void)arg;
	rf_file *f[40];
	static atomic_uint seeds;
	unsigned long long s = 99 + atomic_fetch_add(&seeds, 1);
	while (!atomic_load(&g_stop)) {
		unsigned n = 1 + (unsigned)rnd(&s, 40), k = 0;
		for (; k < n; k++)
			if (rf_file_open(g_path, rnd(&s, 2) ? RF_FILE_BUFFERED : 0, &f[k]) != RF_OK) {
				fprintf(stderr, "churn: rf_file_open: %s\n", rf_errmsg());
				atomic_store(&g_bad, 1);
				break;
			}
		while (k > 0)
			if (rf_file_close(f[--k]) != RF_OK) {
				fprintf(stderr, "churn: rf_file_close: %s\n", rf_errmsg());
				atomic_store(&g_bad, 1);
			}
	}
	return NULL;
}

/* No fork() under a sanitizer: AddressSanitizer's allocator (GCC 12's libasan) takes no lock around it
 * (a child forked while another thread allocates can block in its own first malloc), and under
 * ThreadSanitizer the private jemalloc's prefork handler takes more mutexes than its deadlock detector
 * tracks (a CHECK failure). The forks run in the plain build; the threads around them in both. */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define RF_RACE_NO_FORK 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define RF_RACE_NO_FORK 1
#endif
#endif

/* A child of fork() (taken while the other threads open, close and classify) opens and closes a file. */
static int fork_child_opens_a_file(void)
{
#ifdef RF_RACE_NO_FORK
	return 0;
#endif
	pid_t pid = fork();
	if (pid < 0)
		return -1;
	if (pid == 0) {
		alarm(20); /* a registry left locked in the child would hang here */
		rf_file *f;
		if (rf_file_open(g_path, RF_FILE_BUFFERED, &f) != RF_OK)
			_exit(1);
		int ok = memcmp(rf_file_data(f), g_ref, 64) == 0;
		_exit(rf_file_close(f) == RF_OK && ok ? 0 : 2);
	}
	int st = 0;
	if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
		fprintf(stderr, "fork: the child's rf_file_open / close failed or hung (status %#x)\n", st);
		return -1;
	}
	return 0;
}

static int iteration(unsigned long long seed)
{
	unsigned long long s = seed;
	static const char *waits[] = {"auto", "sleep", "spin:20"};
	rf_pipeline_params pp = {0};
	if (rnd(&s, 4) == 0)
		pp.depth_auto = RF_DEPTH_AUTO;
	else
		pp.depth = 1 + (unsigned)rnd(&s, 6);
	pp.copy_queues = pp.depth >= 3 ? 1 + (unsigned)rnd(&s, 2) : 1;
	pp.slot_bytes = 4096 + (size_t)rnd(&s, MAXB);
	pp.backend = rnd(&s, 3) ? "threads" : "cpu";
	pp.wait = waits[rnd(&s, 3)];
	pp.locality = strcmp(pp.backend, "threads") == 0 && rnd(&s, 3) == 0 ? RF_LOCALITY_COPIER : 0;
	rf_pipeline *p;
	if (rf_pipeline_create(&pp, &p) != RF_OK) {
		fprintf(stderr, "create: %s\n", rf_errmsg());
		return -1;
	}
	atomic_store(&g_p, p);
	int rc = 0;
	for (int phase = 0; phase < 6 && rc == 0; phase++) {
		if (phase % 2 == 0) {
			blocks bl;
			size_t n = 1 + (size_t)rnd(&s, NB);
			for (size_t i = 0; i < n; i++)
				pick(&s, pp.slot_bytes, &bl.srcs[i], &bl.want[i], &bl.sizes[i]);
			size_t past = rnd(&s, 4) == 0 ? (size_t)rnd(&s, n) : NB; /* its bytes in the copy that shrank */
			if (past < n)
				bl.srcs[past] = g_map[2] + FSIZE / 2 + (size_t)rnd(&s, FSIZE / 2 - bl.sizes[past] + 1),
				bl.want[past] = g_ref + ((const unsigned char *)bl.srcs[past] - g_map[2]);
			int r = rf_pipeline_run(p, n, bl.srcs, bl.sizes, check_cb, &bl);
			if (r != RF_OK && r != RF_ECANCELED && !(r == RF_EIO && past < n)) {
				fprintf(stderr, "run: %s: %s\n", rf_err_name(r), rf_errmsg());
				rc = -1;
			}
			rf_pipeline_cancel_clear(p); /* one that came after the run ended */
			continue;
		}
		/* Keyed: keys 0..7 name fixed file ranges of this phase. */
		const void *ks[8];
		const unsigned char *kw[8];
		size_t kn[8];
		const void *kbad[8]; /* the same bytes in the copy that shrank, where they run past its end */
		for (int k = 0; k < 8; k++) {
			pick(&s, pp.slot_bytes, &ks[k], &kw[k], &kn[k]);
			int file = ks[k] != (const void *)kw[k]; /* memory is its own expected bytes */
			size_t off = file ? (size_t)(kw[k] - g_ref) : 0;
			kbad[k] = file && off + kn[k] > FSIZE / 2 ? (const void *)(g_map[2] + off) : NULL;
		}
		for (int op = 0; op < 40 && rc == 0; op++) {
			unsigned k = (unsigned)rnd(&s, 8);
			if (rnd(&s, 2)) {
				int bad = kbad[k] != NULL && rnd(&s, 2);
				g_bad_hints += bad && rf_pipeline_prefetch(p, k, bad ? kbad[k] : ks[k], kn[k], 0) == RF_OK;
				if (!bad)
					(void)rf_pipeline_prefetch(p, k, ks[k], kn[k], 0);
				continue;
			}
			rf_block b;
			int r = rf_pipeline_acquire(p, k, ks[k], kn[k], NULL, 0, &b);
			if (r == RF_ENOSPC)
				continue;
			if (r != RF_OK || memcmp(b.data, kw[k], kn[k]) != 0) {
				fprintf(stderr, "acquire %u: %s %s\n", k, rf_err_name(r), r == RF_OK ? "wrong payload" : rf_errmsg());
				rc = -1;
			}
			if (r == RF_OK)
				rf_pipeline_release(p, &b);
		}
		for (unsigned k = 0; k < 8; k++) /* the next phase names other ranges under the same keys */
			rf_pipeline_evict(p, k);
	}
	if (rc == 0)
		rc = fork_child_opens_a_file();
	atomic_store(&g_p, NULL);
	while (atomic_load(&g_busy))
		sched_yield();
	rf_keyed_stats kst;
	rf_pipeline_keyed_stats(p, &kst);
	g_wasted += kst.wasted;
	rf_pipeline_destroy(p);
	return rc || atomic_load(&g_bad) ? -1 : 0;
}

int main(int argc, char **argv)
{
	unsigned long long seed = 1, iters = 100;
	for (int i = 1; i + 1 < argc; i += 2) {
		if (strcmp(argv[i], "--seed") == 0)
			seed = strtoull(argv[i + 1], NULL, 0);
		else if (strcmp(argv[i], "--iterations") == 0)
			iters = strtoull(argv[i + 1], NULL, 0);
	}
	char path[] = "rf_race_files_XXXXXX";
	int fd = mkstemp(path);
	if (fd < 0)
		return 2;
	g_ref = malloc(FSIZE);
	unsigned long long s = 42;
	for (size_t i = 0; i < FSIZE; i++)
		g_ref[i] = (unsigned char)splitmix(&s);
	for (size_t i = 0; i < NB; i++)
		memset(g_mem[i], (int)(i * 11), sizeof g_mem[i]);
	if (write(fd, g_ref, FSIZE) != (ssize_t)FSIZE)
		return 2;
	fsync(fd);
	close(fd);
	rf_file *f[2];
	if (rf_file_open(path, 0, &f[0]) != RF_OK || rf_file_open(path, RF_FILE_BUFFERED, &f[1]) != RF_OK) {
		fprintf(stderr, "rf_file_open: %s\n", rf_errmsg());
		return 2;
	}
	g_map[0] = rf_file_data(f[0]);
	g_map[1] = rf_file_data(f[1]);
	g_path = path;
	char spath[] = "rf_race_files_short_XXXXXX";
	rf_file *shrunk;
	if ((fd = mkstemp(spath)) < 0 || write(fd, g_ref, FSIZE) != (ssize_t)FSIZE ||
	    rf_file_open(spath, 0, &shrunk) != RF_OK || ftruncate(fd, FSIZE / 2) != 0) {
		fprintf(stderr, "the file that shrinks: %s\n", rf_errmsg());
		return 2;
	}
	close(fd);
	g_map[2] = rf_file_data(shrunk);
	pthread_t th, ch[2];
	pthread_create(&th, NULL, observer, NULL);
	for (int i = 0; i < 2; i++) /* two: the registry grows under both at first */
		pthread_create(&ch[i], NULL, churn, NULL);
	unsigned long long passed = 0, failed = 0;
	for (unsigned long long i = 0; i < iters; i++) {
		unsigned long long it_seed = seed + i;
		if (iteration(it_seed) == 0) {
			passed++;
		} else {
			failed++;
			printf("FAILED: replay with race_files --seed %llu --iterations 1\n", it_seed);
		}
	}
	atomic_store(&g_stop, 1);
	pthread_join(th, NULL);
	for (int i = 0; i < 2; i++)
		pthread_join(ch[i], NULL);
	int closed = rf_file_close(f[0]) == RF_OK && rf_file_close(f[1]) == RF_OK && rf_file_close(shrunk) == RF_OK;
	unlink(path);
	unlink(spath);
	free(g_ref);
	if (!closed) {
		printf("a file could not be closed after every pipeline was destroyed: %s\n", rf_errmsg());
		failed++;
	}
#ifdef RF_RACE_NO_FORK
	printf("no fork() checks under a sanitizer (see fork_child_opens_a_file)\n");
#endif
	printf("%llu hints named bytes past the end of the copy that shrank; %llu hints wasted\n", g_bad_hints, g_wasted);
	printf("%llu passed, %llu failed\n", passed, failed);
	return failed ? 1 : 0;
}
