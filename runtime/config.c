/* runtime/config.c — configuration values from the environment, checked strictly: a deployment that
 * sets RINGFETCH_DEPTH=8x wants to hear about it, not to run at some other depth. */
#include "runtime/config.h"
#include "base/error.h"

#include <ini.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RF__DEFAULT_DEPTH 2u

/* A count in 1..max, written in decimal digits only (no sign, no space, no base prefix). */
static int rf__parse_count(const char *s, unsigned max, unsigned *out)
{
	unsigned v = 0;
	if (s == NULL || *s == '\0')
		return -1;
	for (const char *c = s; *c; c++) {
		if (*c < '0' || *c > '9')
			return -1;
		v = v * 10 + (unsigned)(*c - '0');
		if (v > max)
			return -1;
	}
	if (v == 0)
		return -1;
	*out = v;
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
	unsigned long long v = 0, mul = 1;
	const char *c = s;
	if (s == NULL || *s < '0' || *s > '9')
		return -1;
	for (; *c >= '0' && *c <= '9'; c++) {
		v = v * 10 + (unsigned)(*c - '0');
		if (v > (1ull << 50))
			return -1;
	}
	if (*c == 'K' || *c == 'k')
		mul = 1ull << 10, c++;
	else if (*c == 'M' || *c == 'm')
		mul = 1ull << 20, c++;
	else if (*c == 'G' || *c == 'g')
		mul = 1ull << 30, c++;
	if (*c != '\0' || v == 0 || v > (1ull << 50) / mul)
		return -1;
	*out = v * mul;
	return 0;
}

/* A CPU list: digits, ',' and '-' only, starting with a digit (hwloc parses it later). */
static int rf__parse_cpu_list(const char *s)
{
	if (s == NULL || *s < '0' || *s > '9')
		return -1;
	for (; *s; s++)
		if ((*s < '0' || *s > '9') && *s != ',' && *s != '-')
			return -1;
	return 0;
}

/* ---- the file ----------------------------------------------------------------------------------- */

typedef struct rf__ini {
	rf__config *c;
	const char *path;
	int error;        /* the first problem found, RF_OK while none */
	char what[300];   /* its description (the line comes from ini_parse's return value) */
} rf__ini;

static int rf__ini_bad(rf__ini *st, const char *fmt, ...) RF__PRINTF(2, 3);
static int rf__ini_bad(rf__ini *st, const char *fmt, ...)
{
	if (st->error == RF_OK) {
		va_list ap;
		va_start(ap, fmt);
		st->error = RF_ECONFIG;
		vsnprintf(st->what, sizeof st->what, fmt, ap);
		va_end(ap);
	}
	return 0; /* tells inih this line is an error: ini_parse returns the first such line */
}

#define RF__MALFORMED "%s = \"%.100s\" is malformed"

/* One key of [ringfetch]; values are parsed as strictly as the environment's. */
static int rf__ini_key(rf__ini *st, const char *name, const char *value)
{
	rf__config *c = st->c;
	if (!strcmp(name, "depth")) {
		if ((c->depth_auto = !strcmp(value, "auto")) != 0)
			return 1;
		return rf__parse_depth(value, &c->depth) == 0 ? 1 : rf__ini_bad(st, RF__MALFORMED, name, value);
	}
	if (!strcmp(name, "handoff")) {
		int m = rf__parse_handoff(value);
		c->handoff = m + 1;
		return m >= 0 ? 1 : rf__ini_bad(st, RF__MALFORMED, name, value);
	}
	if (!strcmp(name, "worker_cpus")) {
		if (rf__parse_cpu_list(value) != 0 || strlen(value) >= sizeof c->worker_cpus)
			return rf__ini_bad(st, RF__MALFORMED, name, value);
		memcpy(c->worker_cpus, value, strlen(value) + 1);
		return 1;
	}
	if (!strcmp(name, "backend"))
		return (c->backend = rf__parse_backend(value)) != NULL ? 1 : rf__ini_bad(st, RF__MALFORMED, name, value);
	if (!strcmp(name, "copy_queues"))
		return rf__parse_copy_queues(value, &c->copy_queues) == 0 ? 1 : rf__ini_bad(st, RF__MALFORMED, name, value);
	if (!strcmp(name, "memory_budget")) {
		if (rf__parse_bytes(value, &c->memory_budget) != 0)
			return rf__ini_bad(st, RF__MALFORMED, name, value);
		snprintf(c->budget_from, sizeof c->budget_from, "memory_budget in %.140s", st->path);
		return 1;
	}
	if (!strcmp(name, "wait")) {
		c->wait_set = 1;
		return rf__parse_wait(value, &c->wait_ns) == 0 ? 1 : rf__ini_bad(st, RF__MALFORMED, name, value);
	}
	if (!strcmp(name, "staging") || !strcmp(name, "trace")) {
		char *dst = name[0] == 's' ? c->staging : c->trace;
		size_t cap = name[0] == 's' ? sizeof c->staging : sizeof c->trace;
		if (*value == '\0' || strlen(value) >= cap)
			return rf__ini_bad(st, "%s = \"%.100s\" is empty or too long", name, value);
		memcpy(dst, value, strlen(value) + 1);
		return 1;
	}
	return rf__ini_bad(st, "unknown key \"%s\" (depth, backend, copy_queues, staging, trace, memory_budget, wait, handoff, worker_cpus)", name);
}

static int rf__ini_handler(void *user, const char *section, const char *name, const char *value)
{
	rf__ini *st = user;
	if (strcmp(section, "ringfetch") != 0)
		return rf__ini_bad(st, "key \"%s\" outside section [ringfetch] (in [%s])", name, section);
	return rf__ini_key(st, name, value);
}

static int rf__config_file(rf__config *c)
{
	const char *path = getenv("RINGFETCH_CONFIG");
	if (path == NULL)
		return RF_OK;
	if (*path == '\0')
		return rf__err(RF_ECONFIG, "RINGFETCH_CONFIG is set but empty");
	rf__ini st = {c, path, RF_OK, ""};
	int line = ini_parse(path, rf__ini_handler, &st);
	if (line < 0)
		return rf__err(RF_ECONFIG, "RINGFETCH_CONFIG=\"%.200s\": cannot %s the file", path,
			       line == -1 ? "open" : "read");
	if (line > 0)
		return rf__err(RF_ECONFIG, "%.200s:%d: %s", path, line, st.error ? st.what : "syntax error");
	return RF_OK;
}

/* ---- the environment ---------------------------------------------------------------------------- */

static int rf__env_bad(const char *var, const char *value, const char *expect)
{
	return rf__err(RF_ECONFIG, "%s=\"%.64s\" is not %s", var, value, expect);
}

static int rf__config_env(rf__config *c, int want_depth, int want_backend, int want_kq, int want_staging)
{
	const char *v;
	if (want_depth && (v = getenv("RINGFETCH_DEPTH")) != NULL) {
		if ((c->depth_auto = !strcmp(v, "auto")) != 0)
			c->depth = 0;
		else if (rf__parse_depth(v, &c->depth) != 0)
			return rf__env_bad("RINGFETCH_DEPTH", v, "a depth in 1..1024 or auto");
	}
	if (want_backend && (v = getenv("RINGFETCH_BACKEND")) != NULL && (c->backend = rf__parse_backend(v)) == NULL)
		return rf__env_bad("RINGFETCH_BACKEND", v, "one of cpu, threads, cuda, auto");
	if (want_kq && (v = getenv("RINGFETCH_COPY_QUEUES")) != NULL && rf__parse_copy_queues(v, &c->copy_queues) != 0)
		return rf__env_bad("RINGFETCH_COPY_QUEUES", v, "a number of copy queues in 1..63");
	if (want_staging && (v = getenv("RINGFETCH_STAGING")) != NULL) {
		if (*v == '\0' || strlen(v) >= sizeof c->staging)
			return rf__env_bad("RINGFETCH_STAGING", v, "a staging policy (auto, node:N, interleave, none)");
		memcpy(c->staging, v, strlen(v) + 1);
	}
	if ((v = getenv("RINGFETCH_TRACE")) != NULL) {
		if (*v == '\0' || strlen(v) >= sizeof c->trace)
			return rf__env_bad("RINGFETCH_TRACE", v, "a file path");
		memcpy(c->trace, v, strlen(v) + 1);
	}
	if ((v = getenv("RINGFETCH_ORACLE")) != NULL) {
		if (strcmp(v, "0") != 0 && strcmp(v, "1") != 0)
			return rf__env_bad("RINGFETCH_ORACLE", v, "0 or 1");
		c->oracle = v[0] == '1';
	}
	if ((v = getenv("RINGFETCH_MEMORY_BUDGET")) != NULL) {
		if (rf__parse_bytes(v, &c->memory_budget) != 0)
			return rf__env_bad("RINGFETCH_MEMORY_BUDGET", v, "a size in bytes (K, M, G suffixes)");
		snprintf(c->budget_from, sizeof c->budget_from, "RINGFETCH_MEMORY_BUDGET");
	}
	return RF_OK;
}

int rf__config_load(rf__config *c, int want_depth, int want_backend, int want_copy_queues, int want_staging)
{
	memset(c, 0, sizeof *c);
	int rc = rf__config_file(c);
	if (rc == RF_OK)
		rc = rf__config_env(c, want_depth, want_backend, want_copy_queues, want_staging);
	return rc;
}

int rf__config_depth(unsigned explicit_depth, unsigned *out)
{
	if (explicit_depth != 0) {
		*out = explicit_depth;
		return RF_OK;
	}
	rf__config c;
	int rc = rf__config_load(&c, 1, 0, 0, 0);
	if (rc == RF_OK)
		*out = c.depth_auto ? 0 : c.depth ? c.depth : RF__DEFAULT_DEPTH;
	return rc;
}

int rf__config_backend(const char *explicit_backend, const char **out)
{
	if (explicit_backend != NULL) {
		*out = explicit_backend;
		return RF_OK;
	}
	rf__config c;
	int rc = rf__config_load(&c, 0, 1, 0, 0);
	if (rc == RF_OK)
		*out = c.backend ? c.backend : "auto";
	return rc;
}

/* ---- the threads backend's cache handoff (issue 17) -------------------------------------------------- */

int rf__parse_handoff(const char *s)
{
	return !strcmp(s, "auto") ? 0 : !strcmp(s, "off") ? 1 : !strcmp(s, "on") ? 2 : -1;
}

int rf__config_handoff(int *mode)
{
	rf__config c;
	int rc = rf__config_load(&c, 0, 0, 0, 0);
	if (rc != RF_OK)
		return rc;
	const char *v = getenv("RINGFETCH_HANDOFF");
	if (v != NULL) {
		if ((*mode = rf__parse_handoff(v)) < 0)
			return rf__env_bad("RINGFETCH_HANDOFF", v, "auto, off or on");
		return RF_OK;
	}
	*mode = c.handoff ? c.handoff - 1 : 0;
	return RF_OK;
}

int rf__config_worker_cpus(char *out, size_t cap)
{
	rf__config c;
	int rc = rf__config_load(&c, 0, 0, 0, 0);
	if (rc != RF_OK)
		return rc;
	const char *v = getenv("RINGFETCH_WORKER_CPUS");
	if (v != NULL && (rf__parse_cpu_list(v) != 0 || strlen(v) >= cap))
		return rf__env_bad("RINGFETCH_WORKER_CPUS", v, "a CPU list like 2-3,6");
	snprintf(out, cap, "%s", v != NULL ? v : c.worker_cpus);
	return RF_OK;
}

int rf__parse_wait(const char *s, long long *ns)
{
	if (!strcmp(s, "auto")) {
		*ns = 0;
		return 0;
	}
	if (!strcmp(s, "sleep")) {
		*ns = -1;
		return 0;
	}
	if (strncmp(s, "spin:", 5) != 0 || s[5] == '\0' || strlen(s + 5) > 8)
		return -1;
	long long us = 0;
	for (const char *p = s + 5; *p; p++) {
		if (*p < '0' || *p > '9')
			return -1;
		us = us * 10 + (*p - '0');
	}
	if (us > 10000000)
		return -1;
	*ns = us == 0 ? -1 : us * 1000;
	return 0;
}

int rf__config_wait(const char *explicit_wait, const rf__config *c, long long *ns)
{
	if (explicit_wait != NULL) {
		if (rf__parse_wait(explicit_wait, ns) != 0)
			return rf__err(RF_EINVAL, "rf_pipeline_create: wait \"%.64s\" is not auto, sleep or spin:N (N us, "
						  "0..10000000)", explicit_wait);
		return RF_OK;
	}
	const char *v = getenv("RINGFETCH_WAIT");
	if (v != NULL)
		return rf__parse_wait(v, ns) == 0 ? RF_OK : rf__env_bad("RINGFETCH_WAIT", v, "auto, sleep or spin:N (N us, 0..10000000)");
	*ns = c->wait_set ? c->wait_ns : 0;
	return RF_OK;
}
