/* tests/test_embed_malloc.c — linking libringfetch leaves the process's allocator alone.
 *
 * ringfetch carries a private jemalloc (prefix rf_je_, static, symbols hidden: cmake/jemalloc.sh).
 * In a program linked with the shared library, malloc must still be libc's, no jemalloc symbol may be
 * visible to the dynamic linker, and no libjemalloc may be loaded — while the staging ring (served by
 * jemalloc arenas with ringfetch's extent hooks) still works. Under sanitizers malloc belongs to the
 * sanitizer runtime: then only "not ringfetch's, not a jemalloc" is checked (argument --interposed).
 * A plain program (exit 0 / 1), public headers only. */
#define _GNU_SOURCE
#include <ringfetch.h>

#include <dlfcn.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures;
#define CHECK(cond, ...)                                                                           \
	do {                                                                                       \
		if (!(cond)) {                                                                     \
			failures++;                                                                \
			fprintf(stderr, "embed_malloc: FAIL: ");                                   \
			fprintf(stderr, __VA_ARGS__);                                              \
			fputc('\n', stderr);                                                       \
		}                                                                                  \
	} while (0)

static int jemallocs;
static int count_jemalloc(struct dl_phdr_info *info, size_t size, void *data)
{
	(void)size;
	(void)data;
	if (info->dlpi_name != NULL && strstr(info->dlpi_name, "jemalloc") != NULL) {
		fprintf(stderr, "embed_malloc: loaded: %s\n", info->dlpi_name);
		jemallocs++;
	}
	return 0;
}

static const char *owner(void *addr)
{
	Dl_info info;
	if (dladdr(addr, &info) == 0 || info.dli_fname == NULL)
		return "?";
	return info.dli_fname;
}

static int compute(void *user, const rf_block *b)
{
	const unsigned char *d = b->data;
	for (size_t i = 0; i < b->bytes; i++)
		if (d[i] != (unsigned char)(b->index + i))
			return 1;
	++*(size_t *)user;
	return 0;
}

int main(int argc, char **argv)
{
	int interposed = argc > 1 && strcmp(argv[1], "--interposed") == 0;

	/* A staging ring first: the private jemalloc is initialised and its arenas are in use. */
	enum { N = 16, B = 4096 };
	static unsigned char src[N][B];
	const void *srcs[N];
	size_t sizes[N], seen = 0;
	for (size_t i = 0; i < N; i++) {
		for (size_t j = 0; j < B; j++)
			src[i][j] = (unsigned char)(i + j);
		srcs[i] = src[i];
		sizes[i] = B;
	}
	rf_pipeline_params params = {.depth = 3, .slot_bytes = B, .backend = "cpu"};
	rf_pipeline *p = NULL;
	int rc = rf_pipeline_create(&params, &p);
	CHECK(rc == RF_OK, "rf_pipeline_create: %s (%s)", rf_err_name(rc), rf_errmsg());
	if (rc == RF_OK) {
		rc = rf_pipeline_run(p, N, srcs, sizes, compute, &seen);
		CHECK(rc == RF_OK && seen == N, "rf_pipeline_run: %s, %zu computes", rf_err_name(rc), seen);
	}

	/* Where malloc and free resolve to, for this program (and so for the library). */
	const char *m = owner((void *)malloc), *f = owner((void *)free);
	const char *lib = owner((void *)rf_pipeline_create);
	printf("malloc from %s, free from %s, ringfetch %s\n", m, f, lib);
	CHECK(strcmp(m, lib) != 0 && strcmp(f, lib) != 0, "malloc/free resolve into libringfetch (%s)", lib);
	CHECK(strstr(m, "jemalloc") == NULL && strstr(f, "jemalloc") == NULL, "malloc is a jemalloc (%s)", m);
	if (!interposed) {
		CHECK(strstr(m, "libc.so") != NULL, "malloc comes from %s, not libc", m);
		CHECK(strstr(f, "libc.so") != NULL, "free comes from %s, not libc", f);
	}
	/* A malloc'ed block is libc's: free it through libc (a jemalloc pointer would crash here). */
	void *q = malloc(100);
	CHECK(q != NULL, "malloc(100)");
	free(q);

	/* Nothing of jemalloc is visible to the dynamic linker, prefixed or not. */
	static const char *const names[] = {"rf_je_mallocx", "rf_je_mallctl", "rf_je_malloc", "mallocx",
	                                    "mallctl",       "je_mallocx",    "sdallocx"};
	for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
		CHECK(dlsym(RTLD_DEFAULT, names[i]) == NULL, "%s is visible (from %s)", names[i],
		      owner(dlsym(RTLD_DEFAULT, names[i])));
	dl_iterate_phdr(count_jemalloc, NULL);
	CHECK(jemallocs == 0, "%d jemalloc librar%s loaded", jemallocs, jemallocs == 1 ? "y" : "ies");

	rf_pipeline_destroy(p);
	if (failures)
		return 1;
	printf("embed_malloc: ok\n");
	return 0;
}
