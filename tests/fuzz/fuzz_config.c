/* tests/fuzz/fuzz_config.c — libFuzzer target for configuration strings: RINGFETCH_DEPTH and
 * RINGFETCH_BACKEND (runtime/config.c, directly and through rf_pipeline_create), staging policies
 * (rf_staging_alloc) and ringfetch-bench's command line (rfb_parse).
 *
 * Input: the first byte is a separator; the rest, split on it, gives strings s[0], s[1], ... (at most
 * MAX_STRINGS). s[0] is the depth value, s[1] the backend value, s[2] the staging policy; every string
 * also goes through all three parsers; the strings from s[3] on are ringfetch-bench's argv.
 *
 * The raw input is also a config file (RINGFETCH_CONFIG): accepted only when the line grammar allows
 * it (text bytes only, each line blank / comment / header / key = value, no key twice), refused only
 * with RF_ECONFIG naming the file and one of its lines.
 *
 * Each parser is compared against a reference written here from the documented grammar:
 *   depth    decimal digits only (leading zeros allowed), value 1 .. RF_MAX_DEPTH;
 *   backend  exactly "cpu", "threads", "cuda" or "auto";
 *   RINGFETCH_DEPTH also takes "auto" (depth measured on the first run, starting at 2);
 *   staging  exactly "auto", "none", "interleave" or "node:" + decimal digits fitting an int;
 *   CPU list items N or N-M separated by single commas (decimal, 0 .. RF__CPU_LIST_MAX, N <= M).
 * abort() on a disagreement, an unknown return code, or an empty rf_errmsg after a failure.
 */
#include "options.h"
#include "runtime/config.h"
#include "../config_support.h"
#include "memory/staging.h"
#include "base/parse.h"

#include <ringfetch.h>

#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_STRINGS 24

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                                                \
	do {                                                                                       \
		if (!(cond)) {                                                                     \
			fprintf(stderr, "fuzz_config: invariant failed at %s:%d: %s (rf_errmsg: %s)\n", \
				__FILE__, __LINE__, #cond, rf_errmsg());                           \
			abort();                                                                   \
		}                                                                                  \
	} while (0)

static int chk(int rc)
{
	CHECK(rc == RF_OK || (rc <= RF_EINVAL && rc >= RF_ECONFIG));
	if (rc != RF_OK)
		CHECK(rf_errmsg()[0] != '\0');
	return rc;
}

static const char *g_file_path;

static void remove_file(void)
{
	if (g_file_path != NULL)
		remove(g_file_path);
}

/* ---- references ------------------------------------------------------------------------------- */

/* 1 and *out if s is a depth; 0 if not. */
static int ref_depth(const char *s, unsigned *out)
{
	size_t n = strlen(s), i = 0;
	if (n == 0 || strspn(s, "0123456789") != n)
		return 0;
	while (i + 1 < n && s[i] == '0')
		i++; /* leading zeros */
	if (n - i > 4)
		return 0;
	unsigned v = (unsigned)strtoul(s + i, NULL, 10);
	if (v < 1 || v > RF_MAX_DEPTH)
		return 0;
	*out = v;
	return 1;
}

static const char *ref_backend(const char *s)
{
	if (!strcmp(s, "cpu"))
		return "cpu";
	if (!strcmp(s, "threads"))
		return "threads";
	if (!strcmp(s, "cuda"))
		return "cuda";
	if (!strcmp(s, "auto"))
		return "auto";
	return NULL;
}

/* 1 well formed, 0 malformed ("node:N" with N any int, leading zeros allowed). */
static int ref_staging(const char *s, rf__staging_kind *kind, int *node)
{
	if (!strcmp(s, "auto"))
		return *kind = RF__STG_AUTO, 1;
	if (!strcmp(s, "none"))
		return *kind = RF__STG_NONE, 1;
	if (!strcmp(s, "interleave"))
		return *kind = RF__STG_INTERLEAVE, 1;
	if (strncmp(s, "node:", 5) != 0)
		return 0;
	const char *d = s + 5;
	size_t n = strlen(d);
	if (n == 0 || strspn(d, "0123456789") != n)
		return 0;
	while (n > 1 && *d == '0')
		d++, n--;
	if (n > 10)
		return 0;
	unsigned long long v = strtoull(d, NULL, 10);
	if (v > INT_MAX)
		return 0;
	*kind = RF__STG_NODE, *node = (int)v;
	return 1;
}

/* 1 if s is a CPU list: comma-separated items, each N or N-M (decimal digits, leading zeros allowed,
 * values 0 .. RF__CPU_LIST_MAX, N <= M); no empty item, nothing else. */
static int ref_cpu_number(const char *s, size_t n, unsigned long *v)
{
	if (n == 0 || strspn(s, "0123456789") < n)
		return 0;
	while (n > 1 && *s == '0')
		s++, n--;
	if (n > 7)
		return 0;
	char d[8];
	memcpy(d, s, n);
	d[n] = '\0';
	*v = strtoul(d, NULL, 10);
	return *v <= RF__CPU_LIST_MAX;
}

static int ref_cpu_list(const char *s)
{
	for (;;) {
		size_t n = strcspn(s, ","); /* one item: [s, s + n) */
		const char *dash = memchr(s, '-', n);
		unsigned long lo, hi;
		if (dash == NULL ? !ref_cpu_number(s, n, &lo)
				 : !ref_cpu_number(s, (size_t)(dash - s), &lo) ||
					   !ref_cpu_number(dash + 1, n - (size_t)(dash - s) - 1, &hi) || hi < lo)
			return 0;
		if (s[n] == '\0')
			return 1;
		s += n + 1;
	}
}

/* ---- the checks ------------------------------------------------------------------------------- */

static void check_parsers(const char *s)
{
	unsigned want_d = 0, got_d = 12345;
	int ok = ref_depth(s, &want_d);
	int rc = rf__parse_depth(s, &got_d);
	CHECK(rc == 0 || rc == -1);
	CHECK((rc == 0) == ok);
	CHECK(ok ? got_d == want_d : got_d == 12345); /* *out untouched on failure */

	CHECK((rf__parse_cpu_list(s) == 0) == ref_cpu_list(s));

	const char *b = rf__parse_backend(s);
	CHECK(b == NULL ? ref_backend(s) == NULL : ref_backend(s) != NULL && !strcmp(b, ref_backend(s)));

	rf__staging_kind kind = RF__STG_UNKNOWN;
	int node = -1;
	int want = ref_staging(s, &kind, &node);
	rf__staging_policy pol = {RF__STG_UNKNOWN, -7, 0};
	rc = chk(rf__staging_parse("fuzz", s, &pol));
	if (want == 0)
		CHECK(rc == RF_EINVAL && pol.kind == RF__STG_UNKNOWN && pol.node == -7);
	else
		CHECK(rc == RF_OK && pol.kind == kind && (kind != RF__STG_NODE || pol.node == node));
}

static void check_staging_alloc(const char *s, size_t bytes)
{
	rf__staging_kind kind;
	int node;
	int want = ref_staging(s, &kind, &node);
	void *p = (void *)&p;
	int rc = chk(rf_staging_alloc(bytes, s, &p));
	if (want != 1 || kind == RF__STG_NODE) {
		/* malformed, or a node this machine may not have */
		CHECK(rc == RF_OK ? want == 1 : rc == RF_EINVAL && p == (void *)&p);
	} else {
		CHECK(rc == RF_OK || rc == RF_EBACKEND || rc == RF_ENOMEM);
	}
	if (rc == RF_OK) {
		const unsigned char *c = p;
		for (size_t i = 0; i < bytes; i++)
			CHECK(c[i] == 0); /* zero-filled */
		CHECK((uintptr_t)p % 64 == 0);
		rf_placement pl;
		CHECK(chk(rf_staging_placement(p, &pl)) == RF_OK && pl.reason != NULL);
		memset(p, 0xa5, bytes);
		rf_staging_free(p);
	}
}

static int one_block(void *user, const rf_block *b)
{
	CHECK(b->index == 0 && b->bytes == 48 && memcmp(b->data, "ringfetch fuzz_config", 21) == 0);
	++*(size_t *)user;
	return 0;
}

static void check_pipeline(const char *depth_s, const char *backend_s)
{
	unsigned want_depth = 0;
	int depth_auto = !strcmp(depth_s, "auto"); /* measured on the first run; starts at 2 */
	int depth_ok = depth_auto ? (want_depth = 2, 1) : ref_depth(depth_s, &want_depth);
	const char *want_backend = ref_backend(backend_s);
	if (want_backend != NULL && (!strcmp(want_backend, "cuda") || !strcmp(want_backend, "auto")))
		backend_s = "cpu", want_backend = "cpu"; /* keep runs cheap: no device probe, no workers */
	CHECK(setenv("RINGFETCH_DEPTH", depth_s, 1) == 0);
	CHECK(setenv("RINGFETCH_BACKEND", backend_s, 1) == 0);

	rf_pipeline_params pp;
	memset(&pp, 0, sizeof pp);
	pp.slot_bytes = 64;
	pp.staging = "none";
	rf_pipeline *p = (rf_pipeline *)&p;
	int rc = chk(rf_pipeline_create(&pp, &p));
	if (!depth_ok || want_backend == NULL) {
		CHECK(rc == RF_ECONFIG && p == (rf_pipeline *)&p);
		const char *msg = rf_errmsg();
		CHECK(strstr(msg, "RINGFETCH_DEPTH") != NULL || strstr(msg, "RINGFETCH_BACKEND") != NULL);
	} else {
		CHECK(rc == RF_OK);
		CHECK(rf_pipeline_depth(p) == want_depth);
		CHECK(!strcmp(rf_pipeline_backend(p), want_backend));
		/* a one-block run, to see the ring work at the configured depth */
		static const char src[48] = "ringfetch fuzz_config: one block through a ring";
		const void *srcs[1] = {src};
		size_t sizes[1] = {sizeof src};
		size_t calls = 0;
		CHECK(chk(rf_pipeline_run(p, 1, srcs, sizes, NULL, &calls)) == RF_EINVAL);
		CHECK(chk(rf_pipeline_run(p, 1, srcs, sizes, one_block, &calls)) == RF_OK && calls == 1);
		rf_pipeline_destroy(p);
	}
	/* both explicit: the environment is not consulted */
	pp.depth = 1;
	pp.backend = "cpu";
	p = NULL;
	CHECK(chk(rf_pipeline_create(&pp, &p)) == RF_OK);
	CHECK(rf_pipeline_depth(p) == 1);
	rf_pipeline_destroy(p);

	unsigned d = 0;
	const char *b = NULL;
	rc = chk(cfg_depth(0, &d));
	CHECK(depth_ok ? rc == RF_OK && d == (depth_auto ? 0 : want_depth) : rc == RF_ECONFIG);
	rc = chk(cfg_backend(NULL, &b));
	CHECK(want_backend ? rc == RF_OK && !strcmp(b, want_backend) : rc == RF_ECONFIG);
	CHECK(unsetenv("RINGFETCH_DEPTH") == 0 && unsetenv("RINGFETCH_BACKEND") == 0);
	CHECK(cfg_depth(0, &d) == RF_OK && d == 2);
	CHECK(cfg_backend(NULL, &b) == RF_OK && !strcmp(b, "auto"));
}

/* The value given to the last `opt VALUE` pair in argv (walked as rfb_parse does), or NULL. */
static const char *last_value(int argc, char **argv, const char *opt)
{
	const char *v = NULL;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--quiet"))
			continue;
		if (i + 1 < argc && !strcmp(argv[i], opt))
			v = argv[i + 1];
		i++;
	}
	return v;
}

static void check_bench(int argc, char **argv, size_t errcap)
{
	rfb_opts o;
	char err[256];
	memset(err, 0, sizeof err);
	int rc = rfb_parse(argc, argv, &o, err, errcap);
	CHECK(rc == 0 || rc == 1 || rc == 2);
	CHECK(strnlen(err, sizeof err) < errcap);
	if (rc == 2) {
		CHECK(errcap <= 1 || err[0] != '\0');
		return;
	}
	if (rc == 1)
		return;
	CHECK(o.nbackends >= 1 && o.nbackends <= RFB_MAX_LIST);
	for (unsigned i = 0; i < o.nbackends; i++)
		CHECK(ref_backend(o.backends[i]) != NULL);
	CHECK(o.ndepths >= 1 && o.ndepths <= RFB_MAX_LIST);
	for (unsigned i = 0; i < o.ndepths; i++) { /* "auto" is RFB_DEPTH_AUTO (0): the pipeline chooses */
		CHECK(o.depths[i] == RFB_DEPTH_AUTO || (o.depths[i] >= 1 && o.depths[i] <= RF_MAX_DEPTH));
		CHECK(o.depths[i] == RFB_DEPTH_AUTO || o.copy_queues <= 1 || o.depths[i] >= o.copy_queues + 1);
	}
	CHECK(o.nsizes >= 1 && o.nsizes <= RFB_MAX_LIST);
	for (unsigned i = 0; i < o.nsizes; i++)
		CHECK(o.sizes[i] >= 4 && o.sizes[i] <= RFB_MAX_SIZE && o.sizes[i] % 4 == 0);
	CHECK(o.blocks <= 100000000);
	CHECK(o.bytes_per_rep >= 1 && o.bytes_per_rep <= RFB_MAX_SIZE);
	CHECK(o.copy_queues >= 1 && o.copy_queues < RF_MAX_DEPTH);
	CHECK(o.reps >= 1 && o.reps <= 1000);
	CHECK(o.jitter >= 0 && o.jitter <= 1);
	CHECK(o.compute <= RFB_RATIO);
	CHECK(o.compute == RFB_SUM || (o.compute_arg >= 0 && o.compute_arg <= 1e9));
	CHECK(o.compute != RFB_RATIO || o.compute_arg <= 1000);
	CHECK(o.starpu_ncpu <= 1024);
	CHECK((o.baselines & ~7u) == 0);

	/* --depth and --backend against the references, item by item */
	const char *dl = last_value(argc, argv, "--depth");
	if (dl != NULL) {
		char buf[512];
		CHECK(strlen(dl) < sizeof buf);
		strcpy(buf, dl);
		unsigned n = 0;
		for (char *save, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save), n++) {
			unsigned want;
			int ok = !strcmp(t, "auto") ? (want = RFB_DEPTH_AUTO, 1) : ref_depth(t, &want);
			CHECK(n < o.ndepths && ok && o.depths[n] == want);
		}
		CHECK(n == o.ndepths);
	}
	const char *bl = last_value(argc, argv, "--backend");
	if (bl != NULL) {
		char buf[512];
		CHECK(strlen(bl) < sizeof buf);
		strcpy(buf, bl);
		unsigned n = 0;
		for (char *save, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save), n++)
			CHECK(n < o.nbackends && !strcmp(o.backends[n], t));
		CHECK(n == o.nbackends);
	}
}

/* ---- the config file ------------------------------------------------------------------------- */

/* What the documented file grammar says of a line [s, e) (its '\n' excluded): -1 a byte that is never
 * text (NUL; a control byte other than tab; '\r' except right before the '\n'), 0 blank or a comment,
 * 1 a section header, 2 a `key = value` assignment (*key, *klen set), 3 neither (a syntax error). */
static int ref_line(const uint8_t *s, const uint8_t *e, const uint8_t **key, size_t *klen)
{
	if (e > s && e[-1] == '\r')
		e--;
	for (const uint8_t *p = s; p < e; p++)
		if ((*p < 0x20 && *p != '\t') || *p == 0x7f)
			return -1;
	while (s < e && (*s == ' ' || *s == '\t'))
		s++;
	if (s == e || *s == ';' || *s == '#')
		return 0;
	if (*s == '[')
		return 1;
	const uint8_t *eq = memchr(s, '=', (size_t)(e - s));
	if (eq == NULL)
		return 3;
	const uint8_t *ke = eq;
	while (ke > s && (ke[-1] == ' ' || ke[-1] == '\t'))
		ke--;
	*key = s, *klen = (size_t)(ke - s);
	return 2;
}

/* Whether the grammar allows the file at all, line by line: every byte text, every line blank, a
 * comment, a header or an assignment, no key assigned twice. Values are not judged here (the value
 * parsers have their own references above): a necessary condition for RF_OK. */
static int ref_file_may_pass(const uint8_t *data, size_t size, unsigned *nlines)
{
	const uint8_t *keys[64];
	size_t klens[64], nkeys = 0;
	int ok = 1;
	*nlines = 0;
	for (const uint8_t *s = data, *end = data + size; s < end;) {
		const uint8_t *nl = memchr(s, '\n', (size_t)(end - s)), *e = nl ? nl : end;
		const uint8_t *k = NULL;
		size_t kl = 0;
		int kind = ref_line(s, e, &k, &kl);
		++*nlines;
		if (kind < 0 || kind == 3)
			ok = 0;
		for (size_t i = 0; kind == 2 && i < nkeys; i++)
			if (klens[i] == kl && memcmp(keys[i], k, kl) == 0)
				ok = 0;
		if (kind == 2 && nkeys < 64)
			keys[nkeys] = k, klens[nkeys++] = kl;
		s = e + 1;
	}
	return ok;
}

/* The line number rf_errmsg names after "path:", or 0. */
static unsigned msg_line(const char *msg, const char *path)
{
	const char *at = strstr(msg, path);
	if (at == NULL || at[strlen(path)] != ':')
		return 0;
	return (unsigned)strtoul(at + strlen(path) + 1, NULL, 10);
}

/* The raw input (after the separator byte) as a config file: the loader either accepts it — then the
 * grammar allows it and every value is in range — or refuses it with RF_ECONFIG naming the file and a
 * line of it (every refusal of a small regular file is about a line). */
static void check_file(const uint8_t *data, size_t size)
{
	static char path[64];
	if (path[0] == '\0') {
		snprintf(path, sizeof path, "/tmp/rf-fuzz-config-%ld.ini", (long)getpid());
		atexit(remove_file);
	}
	FILE *f = fopen(path, "wb");
	CHECK(f != NULL);
	CHECK(fwrite(data, 1, size, f) == size);
	CHECK(fclose(f) == 0);
	CHECK(setenv("RINGFETCH_CONFIG", path, 1) == 0);
	rf__config c;
	unsigned nlines;
	int may_pass = ref_file_may_pass(data, size, &nlines);
	int rc = chk(rf__config_load(&c, 1, 1, 1, 1));
	if (rc == RF_OK) {
		CHECK(may_pass);
		CHECK(c.depth_auto ? c.depth == 0 : c.depth <= RF_MAX_DEPTH);
		CHECK(c.copy_queues < RF_MAX_QUEUES);
		CHECK(c.backend == NULL || ref_backend(c.backend) != NULL);
		CHECK(strlen(c.staging) < sizeof c.staging && strlen(c.trace) < sizeof c.trace);
		rf__staging_kind kind;
		int node;
		CHECK(c.staging[0] == '\0' || ref_staging(c.staging, &kind, &node) == 1);
		CHECK(c.wait_ns == -1 || (c.wait_ns >= 0 && c.wait_ns <= 10000000000LL));
		CHECK(c.handoff >= 0 && c.handoff <= 2); /* auto (also unset), off, on */
		CHECK(strlen(c.worker_cpus) < sizeof c.worker_cpus && (c.worker_cpus[0] == '\0' || ref_cpu_list(c.worker_cpus)));
	} else {
		unsigned line = msg_line(rf_errmsg(), path);
		CHECK(rc == RF_ECONFIG && line >= 1 && line <= nlines);
	}
	CHECK(unsetenv("RINGFETCH_CONFIG") == 0);
	g_file_path = path;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1 || size > 4096)
		return 0;
	char sep = (char)data[0];
	char *text = malloc(size);
	if (text == NULL)
		return 0;
	memcpy(text, data + 1, size - 1);
	text[size - 1] = '\0';
	/* strings end at the separator, or at a NUL byte, which ends the string it is in */
	char *s[MAX_STRINGS + 1];
	int n = 0;
	char *c = text, *end = text + size - 1;
	while (n < MAX_STRINGS) {
		s[n++] = c;
		char *stop = c;
		while (stop < end && *stop != sep && *stop != '\0')
			stop++;
		if (stop >= end)
			break;
		int was_sep = *stop == sep;
		*stop = '\0';
		c = stop + 1;
		if (!was_sep) { /* skip to the next separator */
			while (c < end && *c != sep)
				c++;
			if (c >= end)
				break;
			c++;
		}
	}

	check_file(data + 1, size - 1);
	for (int i = 0; i < n; i++)
		check_parsers(s[i]);
	check_pipeline(s[0], n > 1 ? s[1] : "");
	for (int i = 0; i < n && i < 3; i++)
		check_staging_alloc(s[i], 1 + (size_t)(unsigned char)s[i][0] * 37);

	char *argv[MAX_STRINGS + 1];
	int argc = 0;
	argv[argc++] = "ringfetch-bench";
	for (int i = 3; i < n; i++)
		argv[argc++] = s[i];
	argv[argc] = NULL;
	check_bench(argc, argv, (size_t)(unsigned char)sep % 3 == 0 ? 8 : 256);

	free(text);
	return 0;
}
