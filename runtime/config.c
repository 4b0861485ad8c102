/* runtime/config.c — configuration from the file and the environment, checked strictly (`depth = 8x`
 * is an error, not some other depth), both read through one table, rf__config_keys. The file's parser is
 * our own because the guarantees are about the bytes: only a regular file (opened O_NONBLOCK: a FIFO
 * cannot block), at most RF__CFG_MAX_BYTES, a read error never taken for EOF; every line blank, a
 * comment, a section header or `key = value` of any length, no continuation; anything else (a NUL or
 * control byte, no `=`, a duplicate, unknown key or section) is RF_ECONFIG naming file and line. */
#include "runtime/config.h"
#include "base/alloc.h"
#include "base/error.h"
#include "base/parse.h"
#include "io/file.h"
#include "memory/staging.h"
#include "runtime/ktrace.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int rf__parse_count(const char *s, unsigned max, unsigned *out)
{
	uint64_t v;
	if (rf__parse_uint(s, 1, max, &v) != 0)
		return -1;
	*out = (unsigned)v;
	return 0;
}

int rf__parse_depth(const char *s, unsigned *out)
{
	return rf__parse_count(s, RF_MAX_DEPTH, out);
}

const char *rf__parse_backend(const char *s)
{
	static const char *const names[] = {"cpu", "threads", "cuda", "auto"};
	for (size_t i = 0; s != NULL && i < sizeof names / sizeof names[0]; i++)
		if (strcmp(s, names[i]) == 0)
			return names[i];
	return NULL;
}

int rf__parse_copy_queues(const char *s, unsigned *out)
{
	return rf__parse_count(s, RF_MAX_QUEUES - 1, out);
}

int rf__parse_bytes(const char *s, unsigned long long *out)
{
	static const char units[] = "kmg"; /* either case: powers of 1024 */
	const uint64_t max = 1ull << 50;
	uint64_t v, mul = 1;
	const char *c, *u;
	if (rf__parse_decimal(s, max, &v, &c) != 0)
		return -1;
	if (*c != '\0' && (u = strchr(units, *c | 0x20)) != NULL)
		mul = 1ull << (10 * (u - units + 1)), c++;
	if (*c != '\0' || v == 0 || v > max / mul)
		return -1;
	*out = v * mul;
	return 0;
}

#define RF__WAITS "auto, sleep or spin:N (N us, 0..10000000)" /* the wait policies */

static int rf__parse_wait(const char *s, long long *ns)
{
	uint64_t us;
	if (!strcmp(s, "auto") || !strcmp(s, "sleep")) {
		*ns = s[0] == 'a' ? 0 : -1;
		return 0;
	}
	if (strncmp(s, "spin:", 5) != 0 || rf__parse_uint(s + 5, 0, 10000000u, &us) != 0)
		return -1;
	*ns = us == 0 ? -1 : (long long)us * 1000;
	return 0;
}

/* ---- the settings: one row each ------------------------------------------------------------------- */

/* A string that fits its field, non-empty. */
static int rf__set_string(char *dst, size_t cap, const char *v)
{
	size_t n = strlen(v);
	if (n == 0 || n >= cap)
		return -1;
	memcpy(dst, v, n + 1);
	return 0;
}

/* How a row's value is checked and stored. */
enum { RF__K_DEPTH, RF__K_BACKEND, RF__K_QUEUES, RF__K_STAGING, RF__K_TRACE, RF__K_BUDGET, RF__K_WAIT,
       RF__K_HANDOFF, RF__K_OVERLAP, RF__K_CPUS, RF__K_ORACLE, RF__K_KTRACE, RF__K_HINT };

/* Check value for a row of `kind` and store it: 0, or -1 when it is malformed (nothing stored). `from`
 * says where it came from ("memory_budget in FILE", "RINGFETCH_BACKEND"), for later messages. */
static int rf__config_set(rf__config *c, int kind, const char *v, const char *from)
{
	rf__staging_policy pol;
	const char *b;
	int m;
	switch (kind) {
	case RF__K_DEPTH:
		if (strcmp(v, "auto") != 0 && rf__parse_depth(v, &c->depth) != 0)
			return -1;
		c->depth_auto = strcmp(v, "auto") == 0;
		c->depth = c->depth_auto ? 0 : c->depth;
		return 0;
	case RF__K_BACKEND:
		if ((b = rf__parse_backend(v)) == NULL)
			return -1;
		c->backend = b;
		/* A well-formed backend can still be wrong for the caller (a device backend for host memory):
		 * keep where it came from for that message. */
		if (strncmp(from, "RINGFETCH_", 10) == 0)
			snprintf(c->backend_from, sizeof c->backend_from, "%s=%s", from, b);
		else
			snprintf(c->backend_from, sizeof c->backend_from, "%s", from);
		return 0;
	case RF__K_QUEUES:
		return rf__parse_copy_queues(v, &c->copy_queues);
	case RF__K_STAGING: /* checked where the file line or the variable is known, not first at create */
		if (rf__staging_parse("config", v, &pol) != RF_OK)
			return -1;
		return rf__set_string(c->staging, sizeof c->staging, v);
	case RF__K_TRACE:
		return rf__set_string(c->trace, sizeof c->trace, v);
	case RF__K_KTRACE: { /* checked whole now: a bad '%' is RF_ECONFIG at create, not a surprise file */
		char path[sizeof c->keyed_trace];
		if (rf__ktrace_expand(v, 0, path, sizeof path) != 0)
			return -1;
		return rf__set_string(c->keyed_trace, sizeof c->keyed_trace, v);
	}
	case RF__K_BUDGET:
		if (rf__parse_bytes(v, &c->memory_budget) != 0)
			return -1;
		snprintf(c->budget_from, sizeof c->budget_from, "%s", from);
		return 0;
	case RF__K_WAIT:
		return rf__parse_wait(v, &c->wait_ns);
	case RF__K_HINT:
		return rf__parse_bytes(v, &c->hint_bytes);
	case RF__K_HANDOFF:
	case RF__K_OVERLAP: /* the same three words */
		if ((m = rf__parse_handoff(v)) < 0)
			return -1;
		*(kind == RF__K_HANDOFF ? &c->handoff : &c->overlap) = m;
		return 0;
	case RF__K_CPUS: /* checked here so that a typo is RF_ECONFIG, not whatever hwloc makes of it */
		if (rf__parse_cpu_list(v) != 0)
			return -1;
		return rf__set_string(c->worker_cpus, sizeof c->worker_cpus, v);
	default: /* RF__K_ORACLE */
		if (strcmp(v, "0") != 0 && strcmp(v, "1") != 0)
			return -1;
		c->oracle = v[0] == '1';
		return 0;
	}
}

/* The RF__WANT_* bits of rf__config_load: a variable with one is read only when the caller asks for it
 * (an explicit API value wins without the variable being consulted); 0 = always read. RINGFETCH_WAIT
 * is never asked for here: rf__config_wait reads it itself, after an explicit params.wait. */
enum { RF__WANT_DEPTH = 1, RF__WANT_BACKEND = 2, RF__WANT_COPY_QUEUES = 4, RF__WANT_STAGING = 8,
       RF__WANT_WAIT = 16 };

typedef struct rf__config_key {
	const char *name;   /* key in [ringfetch]; NULL: environment only */
	const char *env;    /* environment variable */
	unsigned want;      /* RF__WANT_* bit, or 0 */
	const char *expect; /* what a valid value is */
	int kind;           /* RF__K_* */
} rf__config_key;

static const rf__config_key rf__config_keys[] = {
	{"depth", "RINGFETCH_DEPTH", RF__WANT_DEPTH, "a depth in 1..1024 or auto", RF__K_DEPTH},
	{"backend", "RINGFETCH_BACKEND", RF__WANT_BACKEND, "one of cpu, threads, cuda, auto", RF__K_BACKEND},
	{"copy_queues", "RINGFETCH_COPY_QUEUES", RF__WANT_COPY_QUEUES, "a number of copy queues in 1..63",
	 RF__K_QUEUES},
	{"staging", "RINGFETCH_STAGING", RF__WANT_STAGING, "a staging policy (auto, node:N, interleave, none)",
	 RF__K_STAGING},
	{"trace", "RINGFETCH_TRACE", 0, "a file path (1..1023 bytes)", RF__K_TRACE},
	{"memory_budget", "RINGFETCH_MEMORY_BUDGET", 0, "a size in bytes (K, M, G suffixes)", RF__K_BUDGET},
	{"wait", "RINGFETCH_WAIT", RF__WANT_WAIT, RF__WAITS, RF__K_WAIT},
	{"handoff", "RINGFETCH_HANDOFF", 0, "auto, off or on", RF__K_HANDOFF},
	{"overlap", "RINGFETCH_OVERLAP", 0, "auto, off or on", RF__K_OVERLAP},
	{"worker_cpus", "RINGFETCH_WORKER_CPUS", 0, "a CPU list like 2-3,6 (CPUs and ranges lo-hi, lo <= hi)",
	 RF__K_CPUS},
	{NULL, "RINGFETCH_ORACLE", 0, "0 or 1", RF__K_ORACLE},
	{NULL, "RINGFETCH_KEYED_TRACE", 0, "a file path (1..1023 bytes; %p: the process id, %%: a %)", RF__K_KTRACE},
	{"hint_bytes", "RINGFETCH_HINT_BYTES", 0, "a size in bytes (K, M, G suffixes)", RF__K_HINT},
};
#define RF__NKEYS (sizeof rf__config_keys / sizeof rf__config_keys[0])

/* ---- the file: reading -------------------------------------------------------------------------- */

/* Far more than any real configuration; what bounds the time and memory a hostile file can cost. */
#define RF__CFG_MAX_BYTES (64u << 10)

/* The whole file in *text (rf__malloc'ed, NUL-terminated after *len bytes), or RF_ECONFIG saying why not.
 * One more byte than RF__CFG_MAX_BYTES is read to tell "too large". */
static int rf__config_read(const char *path, char **text, size_t *len)
{
	int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY), rc = RF_OK;
	struct stat st;
	char *buf = NULL;
	size_t n = 0;
	ssize_t r = 1;
	if (fd < 0 || fstat(fd, &st) != 0)
		rc = rf__err(RF_ECONFIG, "RINGFETCH_CONFIG=\"%.200s\": cannot %s the file: %s", path,
			     fd < 0 ? "open" : "stat", strerror(errno));
	else if (!S_ISREG(st.st_mode))
		rc = rf__err(RF_ECONFIG, "RINGFETCH_CONFIG=\"%.200s\" is %s: only a regular file is read", path,
			     rf__file_kind(st.st_mode));
	else if (st.st_size <= (off_t)RF__CFG_MAX_BYTES && (buf = rf__malloc(RF__CFG_MAX_BYTES + 1)) == NULL)
		rc = rf__err(RF_ENOMEM, "RINGFETCH_CONFIG: out of memory");
	while (buf != NULL && rc == RF_OK && n <= RF__CFG_MAX_BYTES && r != 0) {
		r = read(fd, buf + n, RF__CFG_MAX_BYTES + 1 - n);
		if (r < 0 && errno != EINTR)
			rc = rf__err(RF_ECONFIG, "RINGFETCH_CONFIG=\"%.200s\": cannot read the file: %s",
				     path, strerror(errno));
		n += r > 0 ? (size_t)r : 0;
	}
	if (rc == RF_OK && (buf == NULL || n > RF__CFG_MAX_BYTES))
		rc = rf__err(RF_ECONFIG, "RINGFETCH_CONFIG=\"%.200s\": the file is larger than %u bytes", path,
			     RF__CFG_MAX_BYTES);
	if (fd >= 0)
		close(fd);
	if (rc != RF_OK) {
		free(buf);
		return rc;
	}
	buf[n] = '\0';
	*text = buf;
	*len = n;
	return RF_OK;
}

/* ---- the file: parsing -------------------------------------------------------------------------- */

typedef struct rf__config_parse {
	rf__config *c;
	const char *path;
	unsigned line;
	int in_ringfetch;           /* inside [ringfetch] */
	unsigned section_line;      /* where [ringfetch] was, 0 = not yet */
	unsigned seen[RF__NKEYS];   /* line of each key, 0 = not yet */
	char section[64];           /* the current section's name, for messages */
} rf__config_parse;

static int rf__config_bad(const rf__config_parse *f, const char *fmt, ...) RF__PRINTF(2, 3);
static int rf__config_bad(const rf__config_parse *f, const char *fmt, ...)
{
	char what[400];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(what, sizeof what, fmt, ap);
	va_end(ap);
	return rf__err(RF_ECONFIG, "%.200s:%u: %s", f->path, f->line, what);
}

static int rf__is_blank(char ch)
{
	return ch == ' ' || ch == '\t';
}

/* [s, e) without blanks at either end. */
static void rf__trim(char **s, char **e)
{
	while (*s < *e && rf__is_blank(**s))
		(*s)++;
	while (*e > *s && rf__is_blank((*e)[-1]))
		(*e)--;
}

/* A ';' or '#' after a blank starts a comment at the end of a value ("depth = 3   ; the default"). */
static char *rf__config_value_end(char *v, char *e)
{
	for (char *p = v; p < e; p++)
		if ((*p == ';' || *p == '#') && p > v && rf__is_blank(p[-1]))
			return p;
	return e;
}

/* "[name]": only [ringfetch] holds keys; another section may exist (files shared with other tools), but
 * a key in it is an error. */
static int rf__config_section(rf__config_parse *f, char *s, char *e)
{
	e = rf__config_value_end(s, e);
	rf__trim(&s, &e);
	if (e[-1] != ']' || e - s < 2)
		return rf__config_bad(f, "syntax error: a section header must end with ]");
	char *n = s + 1, *ne = e - 1;
	rf__trim(&n, &ne);
	snprintf(f->section, sizeof f->section, "%.*s", (int)(ne - n), n);
	f->in_ringfetch = strcmp(f->section, "ringfetch") == 0;
	if (f->in_ringfetch && f->section_line != 0)
		return rf__config_bad(f, "section [ringfetch] appears twice (first at line %u)", f->section_line);
	if (f->in_ringfetch)
		f->section_line = f->line;
	return RF_OK;
}

static void rf__config_key_names(char *buf, size_t cap)
{
	size_t n = 0;
	buf[0] = '\0';
	for (size_t i = 0; i < RF__NKEYS; i++)
		if (rf__config_keys[i].name != NULL && n < cap)
			n += (size_t)snprintf(buf + n, cap - n, "%s%s", n ? ", " : "", rf__config_keys[i].name);
}

/* "key = value", checked by the key's row; each key at most once. */
static int rf__config_assign(rf__config_parse *f, char *s, char *e)
{
	char *eq = memchr(s, '=', (size_t)(e - s));
	if (eq == NULL)
		return rf__config_bad(f, "syntax error: expected key = value, [section], a comment (; or #) or a blank line");
	char *k = s, *ke = eq, *v = eq + 1, *ve = rf__config_value_end(eq + 1, e);
	rf__trim(&k, &ke);
	rf__trim(&v, &ve);
	*ke = '\0';
	*ve = '\0';
	if (!f->in_ringfetch)
		return rf__config_bad(f, "key \"%.64s\" outside section [ringfetch]%s%.64s%s", k, f->section[0] ? " (in [" : "",
				   f->section, f->section[0] ? "])" : "");
	int i = 0;
	while (i < (int)RF__NKEYS && (rf__config_keys[i].name == NULL || strcmp(rf__config_keys[i].name, k) != 0))
		i++;
	if (i == (int)RF__NKEYS) {
		char names[160];
		rf__config_key_names(names, sizeof names);
		return rf__config_bad(f, "unknown key \"%.64s\" (%s)", k, names);
	}
	if (f->seen[i] != 0)
		return rf__config_bad(f, "duplicate key \"%s\" (first at line %u)", k, f->seen[i]);
	f->seen[i] = f->line;
	char from[160];
	if (rf__config_keys[i].kind == RF__K_BACKEND)
		snprintf(from, sizeof from, "%.140s:%u", f->path, f->line);
	else
		snprintf(from, sizeof from, "%s in %.140s", k, f->path);
	if (rf__config_set(f->c, rf__config_keys[i].kind, v, from) != 0)
		return rf__config_bad(f, "%s = \"%.100s\" is malformed (expected %s)", k, v, rf__config_keys[i].expect);
	return RF_OK;
}

/* One line [s, e), without its '\n' (a '\r' before it is allowed: files edited on Windows). Every byte
 * must be text: a NUL (which would end a C string early and hide what follows) or another control
 * byte is refused; tab is a blank, bytes from 0x80 (UTF-8) are text. */
static int rf__config_line(rf__config_parse *f, char *s, char *e)
{
	if (e > s && e[-1] == '\r')
		e--;
	for (const char *p = s; p < e; p++) {
		unsigned char ch = (unsigned char)*p;
		if (ch == '\0')
			return rf__config_bad(f, "a NUL byte at column %zu", (size_t)(p - s) + 1);
		if ((ch < 0x20 && ch != '\t') || ch == 0x7f)
			return rf__config_bad(f, "control byte 0x%02x at column %zu", ch, (size_t)(p - s) + 1);
	}
	rf__trim(&s, &e);
	if (s == e || *s == ';' || *s == '#')
		return RF_OK;
	return *s == '[' ? rf__config_section(f, s, e) : rf__config_assign(f, s, e);
}

static int rf__config_file(rf__config *c)
{
	const char *path = getenv("RINGFETCH_CONFIG");
	if (path == NULL)
		return RF_OK;
	if (*path == '\0')
		return rf__err(RF_ECONFIG, "RINGFETCH_CONFIG is set but empty");
	char *text = NULL;
	size_t len = 0;
	int rc = rf__config_read(path, &text, &len);
	if (rc != RF_OK)
		return rc;
	rf__config_parse f = {.c = c, .path = path};
	for (char *s = text, *end = text + len; rc == RF_OK && s < end; s++) {
		char *nl = memchr(s, '\n', (size_t)(end - s)), *e = nl != NULL ? nl : end;
		f.line++;
		rc = rf__config_line(&f, s, e);
		s = e;
	}
	free(text);
	return rc;
}

/* ---- the environment ---------------------------------------------------------------------------- */

static int rf__config_env(rf__config *c, unsigned want)
{
	for (size_t i = 0; i < RF__NKEYS; i++) {
		const rf__config_key *k = &rf__config_keys[i];
		const char *v;
		if ((k->want != 0 && (want & k->want) == 0) || (v = getenv(k->env)) == NULL)
			continue;
		if (rf__config_set(c, k->kind, v, k->env) != 0)
			return rf__err(RF_ECONFIG, "%s=\"%.64s\" is not %s", k->env, v, k->expect);
	}
	return RF_OK;
}

int rf__config_load(rf__config *c, int want_depth, int want_backend, int want_copy_queues, int want_staging)
{
	memset(c, 0, sizeof *c);
	unsigned want = (want_depth ? RF__WANT_DEPTH : 0) | (want_backend ? RF__WANT_BACKEND : 0) |
			(want_copy_queues ? RF__WANT_COPY_QUEUES : 0) | (want_staging ? RF__WANT_STAGING : 0);
	int rc = rf__config_file(c);
	if (rc == RF_OK)
		rc = rf__config_env(c, want);
	return rc;
}

int rf__config_budget_check(const rf__config *c, const char *who, unsigned nslots, size_t slot_bytes)
{
	if (c->memory_budget == 0 || nslots == 0 || slot_bytes <= c->memory_budget / nslots)
		return RF_OK;
	return rf__err(RF_ECONFIG, "%s: a ring of %u x %zu bytes exceeds %s (%llu bytes)", who, nslots, slot_bytes,
		       c->budget_from, c->memory_budget);
}

const char *rf__config_backend(const rf__config *c, const char *explicit_backend, const char **from)
{
	*from = explicit_backend == NULL && c->backend != NULL ? c->backend_from : NULL;
	return explicit_backend ? explicit_backend : c->backend ? c->backend : "auto";
}

int rf__config_wait(const char *explicit_wait, const rf__config *c, long long *ns)
{
	const char *v = explicit_wait != NULL ? explicit_wait : getenv("RINGFETCH_WAIT");
	if (v != NULL && rf__parse_wait(v, ns) != 0)
		return explicit_wait != NULL ? rf__err(RF_EINVAL, "rf_pipeline_create: wait \"%.64s\" is not %s", v, RF__WAITS)
					     : rf__err(RF_ECONFIG, "RINGFETCH_WAIT=\"%.64s\" is not %s", v, RF__WAITS);
	if (v == NULL)
		*ns = c->wait_ns;
	return RF_OK;
}

int rf__parse_handoff(const char *s)
{
	return !strcmp(s, "auto") ? 0 : !strcmp(s, "off") ? 1 : !strcmp(s, "on") ? 2 : -1;
}
