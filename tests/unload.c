/* tests/unload.c — libringfetch loaded and unloaded again and again, with and without use.
 *
 * usage: unload LIBPATH [--cycles N] [--threads K]
 *
 * An application (a plugin host, Python's ctypes) may dlopen the library, use it from several threads
 * and dlclose it, over and over. Two things must hold (docs/api.md, "Unloading"):
 *   - nothing crashes: a thread that used a pipeline or rf_staging_alloc and is still alive when the
 *     library is closed exits afterwards (its thread-specific data destructors run then), and the
 *     library is usable again after the next dlopen;
 *   - nothing grows: after a few warm-up cycles, neither the process's mappings (the sum of
 *     /proc/self/maps, reservations aside) nor its resident set grow with the number of cycles.
 * Phase 1 opens and closes the library N times without calling it; phase 2 does N cycles in which K
 * threads each run a pipeline on "cpu" and on "threads" and allocate staging memory (a page-sized
 * mapping and a small arena block), stay alive across the dlclose, and exit after it. The library is
 * reached only through dlsym, by path, exactly as a host would. A plain program: exit 0 on success, 1
 * on a failed check (a crash fails ctest by itself).
 *
 * Under AddressSanitizer the allocator's quarantine keeps freed memory mapped and resident for a while
 * (256 MiB by default): ctest runs this test with a zero quarantine then (ASAN_OPTIONS), and the bound
 * holds as it is. ThreadSanitizer maps memory of its own at every dlopen (2.25 MiB a cycle, hardly any
 * of it resident): under it the mappings are not bounded — it says so — and the resident set is. */
#define _GNU_SOURCE
#include <ringfetch.h>
#include <ringfetch/staging.h>

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MIB (1024.0 * 1024.0)

#if defined(__SANITIZE_THREAD__)
#define UNDER_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define UNDER_TSAN 1
#endif
#endif
#ifndef UNDER_TSAN
#define UNDER_TSAN 0
#endif

/* Growth allowed between the end of the warm-up and the last cycle. The code this test was written
 * against grew the mappings by 4 MiB per bare cycle and by more than 6 MiB per cycle of use. */
#define GROWTH_BOUND (8u << 20)
#define WARMUP 3

static int failures;
#define CHECK(cond, ...)                                                                           \
	do {                                                                                       \
		if (!(cond)) {                                                                     \
			failures++;                                                                \
			fprintf(stderr, "unload: FAIL: ");                                         \
			fprintf(stderr, __VA_ARGS__);                                              \
			fputc('\n', stderr);                                                       \
		}                                                                                  \
	} while (0)

/* The library's API as dlsym finds it. */
typedef struct api {
	void *handle;
	int (*create)(const rf_pipeline_params *, rf_pipeline **);
	int (*run)(rf_pipeline *, size_t, const void *const *, const size_t *, rf_compute_fn, void *);
	void (*destroy)(rf_pipeline *);
	int (*staging_alloc)(size_t, const char *, void **);
	void (*staging_free)(void *);
	const char *(*errmsg)(void);
	const char *(*err_name)(int);
} api;

static const char *libpath;

static int load(api *a)
{
	memset(a, 0, sizeof *a);
	a->handle = dlopen(libpath, RTLD_NOW | RTLD_LOCAL);
	if (a->handle == NULL) {
		fprintf(stderr, "unload: dlopen %s: %s\n", libpath, dlerror());
		return -1;
	}
	/* Object pointers to function pointers: POSIX guarantees dlsym's result converts. */
#define SYM(field, name)                                                                           \
	do {                                                                                       \
		void *s = dlsym(a->handle, name);                                                  \
		if (s == NULL) {                                                                   \
			fprintf(stderr, "unload: dlsym %s: %s\n", name, dlerror());               \
			return -1;                                                                 \
		}                                                                                  \
		memcpy(&a->field, &s, sizeof s);                                                   \
	} while (0)
	SYM(create, "rf_pipeline_create");
	SYM(run, "rf_pipeline_run");
	SYM(destroy, "rf_pipeline_destroy");
	SYM(staging_alloc, "rf_staging_alloc");
	SYM(staging_free, "rf_staging_free");
	SYM(errmsg, "rf_errmsg");
	SYM(err_name, "rf_err_name");
#undef SYM
	return 0;
}

static void unload(api *a)
{
	CHECK(dlclose(a->handle) == 0, "dlclose: %s", dlerror());
	a->handle = NULL;
}

/* The process's mapped bytes (the lines of /proc/self/maps that are not bare reservations) and
 * resident bytes (/proc/self/statm). A reservation (---p) is address space only: glibc reserves 64 MiB
 * of it per malloc arena, and creates arenas as threads come and go, at moments of its own choosing. */
static size_t mapped_bytes(void)
{
	FILE *f = fopen("/proc/self/maps", "r");
	if (f == NULL)
		return 0;
	size_t total = 0;
	char line[4096];
	while (fgets(line, sizeof line, f) != NULL) {
		unsigned long lo, hi;
		char perms[8];
		if (sscanf(line, "%lx-%lx %7s", &lo, &hi, perms) == 3 && strcmp(perms, "---p") != 0)
			total += hi - lo;
	}
	fclose(f);
	return total;
}

static size_t resident_bytes(void)
{
	FILE *f = fopen("/proc/self/statm", "r");
	unsigned long size = 0, rss = 0;
	if (f != NULL) {
		if (fscanf(f, "%lu %lu", &size, &rss) != 2)
			rss = 0;
		fclose(f);
	}
	return (size_t)rss * (size_t)sysconf(_SC_PAGESIZE);
}

enum { NBLOCKS = 24, BLOCK = 16384 };
static unsigned char source[NBLOCKS][BLOCK];

static int compute(void *user, const rf_block *b)
{
	const unsigned char *d = b->data;
	if (b->bytes != BLOCK || memcmp(d, source[b->index], BLOCK) != 0)
		return 1;
	++*(size_t *)user;
	return 0;
}

/* One pipeline on `backend`, one run over every block, checked; 0 on success. */
static int use_pipeline(const api *a, const char *backend)
{
	const void *srcs[NBLOCKS];
	size_t sizes[NBLOCKS], seen = 0;
	for (size_t i = 0; i < NBLOCKS; i++) {
		srcs[i] = source[i];
		sizes[i] = BLOCK;
	}
	rf_pipeline_params params = {.depth = 3, .slot_bytes = BLOCK, .backend = backend};
	rf_pipeline *p = NULL;
	int rc = a->create(&params, &p);
	if (rc != RF_OK) {
		fprintf(stderr, "unload: rf_pipeline_create(%s): %s (%s)\n", backend, a->err_name(rc), a->errmsg());
		return -1;
	}
	rc = a->run(p, NBLOCKS, srcs, sizes, compute, &seen);
	if (rc != RF_OK || seen != NBLOCKS)
		fprintf(stderr, "unload: rf_pipeline_run(%s): %s, %zu computes (%s)\n", backend, a->err_name(rc),
			seen, a->errmsg());
	a->destroy(p);
	return rc == RF_OK && seen == NBLOCKS ? 0 : -1;
}

/* Staging memory: one page-sized mapping of its own and one small block from a jemalloc arena (which
 * gives this thread jemalloc's thread-specific data). */
static int use_staging(const api *a)
{
	void *big = NULL, *small = NULL;
	int rc = a->staging_alloc(1u << 20, NULL, &big);
	int rc2 = a->staging_alloc(200, NULL, &small);
	if (rc != RF_OK || rc2 != RF_OK)
		fprintf(stderr, "unload: rf_staging_alloc: %s / %s (%s)\n", a->err_name(rc), a->err_name(rc2),
			a->errmsg());
	else
		memset(small, 0x5a, 200);
	a->staging_free(big);
	a->staging_free(small);
	return rc == RF_OK && rc2 == RF_OK ? 0 : -1;
}

/* A user thread: uses the library, then stays alive until the main thread has closed it. */
typedef struct user {
	pthread_t tid;
	const api *a;
	pthread_barrier_t *used, *closed;
	int failed;
} user;

static void *user_main(void *arg)
{
	user *u = arg;
	u->failed = use_pipeline(u->a, "cpu") != 0 || use_pipeline(u->a, "threads") != 0 ||
		    use_staging(u->a) != 0;
	pthread_barrier_wait(u->used);
	pthread_barrier_wait(u->closed); /* the library is closed now; this thread exits afterwards */
	return NULL;
}

/* One cycle: load; with nthreads > 0, use from that many threads (and the main thread) and close while
 * they are alive; without, only load and close. */
static void cycle(unsigned nthreads)
{
	api a;
	if (load(&a) != 0)
		exit(1); /* said why */
	if (nthreads == 0) {
		unload(&a);
		return;
	}
	pthread_barrier_t used, closed;
	pthread_barrier_init(&used, NULL, nthreads + 1);
	pthread_barrier_init(&closed, NULL, nthreads + 1);
	user *users = calloc(nthreads, sizeof *users);
	if (users == NULL)
		abort();
	for (unsigned i = 0; i < nthreads; i++) {
		users[i] = (user){.a = &a, .used = &used, .closed = &closed};
		if (pthread_create(&users[i].tid, NULL, user_main, &users[i]) != 0)
			abort();
	}
	CHECK(use_staging(&a) == 0 && use_pipeline(&a, "cpu") == 0, "main thread's use failed");
	pthread_barrier_wait(&used);
	unload(&a);
	pthread_barrier_wait(&closed);
	for (unsigned i = 0; i < nthreads; i++) {
		pthread_join(users[i].tid, NULL);
		CHECK(!users[i].failed, "user thread %u's use failed", i);
	}
	free(users);
	pthread_barrier_destroy(&used);
	pthread_barrier_destroy(&closed);
}

/* WARMUP cycles, then `cycles` more; the mappings and the resident set may grow by GROWTH_BOUND at most
 * over the latter. */
static void phase(const char *name, unsigned cycles, unsigned nthreads)
{
	for (unsigned i = 0; i < WARMUP; i++)
		cycle(nthreads);
	size_t map0 = mapped_bytes(), rss0 = resident_bytes();
	for (unsigned i = 0; i < cycles; i++)
		cycle(nthreads);
	size_t map1 = mapped_bytes(), rss1 = resident_bytes();
	printf("unload: %s: %u cycles (%u threads): mapped %.1f -> %.1f MiB, resident %.1f -> %.1f MiB\n",
	       name, cycles, nthreads, map0 / MIB, map1 / MIB, rss0 / MIB, rss1 / MIB);
	if (UNDER_TSAN)
		printf("unload: %s: mappings not bounded under ThreadSanitizer (its own, at every dlopen)\n", name);
	else
		CHECK(map1 <= map0 + GROWTH_BOUND, "%s: mappings grew by %.1f MiB in %u cycles", name,
		      (map1 - map0) / MIB, cycles);
	CHECK(rss1 <= rss0 + GROWTH_BOUND, "%s: resident set grew by %.1f MiB in %u cycles", name,
	      (rss1 - rss0) / MIB, cycles);
}

int main(int argc, char **argv)
{
	unsigned cycles = 100, nthreads = 4;
	if (argc < 2) {
		fprintf(stderr, "usage: unload LIBPATH [--cycles N] [--threads K]\n");
		return 2;
	}
	libpath = argv[1];
	setvbuf(stdout, NULL, _IOLBF, 0); /* each figure out before a crash, if there is one */
	for (int i = 2; i + 1 < argc; i += 2) {
		if (strcmp(argv[i], "--cycles") == 0)
			cycles = (unsigned)strtoul(argv[i + 1], NULL, 10);
		else if (strcmp(argv[i], "--threads") == 0)
			nthreads = (unsigned)strtoul(argv[i + 1], NULL, 10);
	}
	for (size_t i = 0; i < NBLOCKS; i++)
		for (size_t j = 0; j < BLOCK; j++)
			source[i][j] = (unsigned char)(i * 31 + j);

	phase("load/unload, no use", cycles, 0);
	phase("load/use/unload", cycles, nthreads);
	if (failures) {
		fprintf(stderr, "unload: %d failure(s)\n", failures);
		return 1;
	}
	printf("unload: ok\n");
	return 0;
}
