/* runtime/config.h — configured values: built-in defaults < config file (RINGFETCH_CONFIG=path, INI,
 * section [ringfetch]) < environment (RINGFETCH_*) < explicit API values (applied by the caller).
 * The file is checked whole whenever it is read (only a regular file of at most 64 KiB); anything wrong
 * in it is RF_ECONFIG naming the file, the line and the value. A variable is checked when its value is
 * consulted (an explicit API value wins without reading it); a malformed one is RF_ECONFIG naming it. */
#ifndef RF_RUNTIME_CONFIG_H
#define RF_RUNTIME_CONFIG_H

#include <stddef.h>

/* Parsers: 0 on success, -1 if malformed. A depth: decimal digits, 1 .. RF_MAX_DEPTH; a count of copy
 * queues: 1 .. RF_MAX_QUEUES-1; bytes with an optional K, M or G suffix (powers of 1024): 1 .. 2^50. */
int rf__parse_depth(const char *s, unsigned *out);
int rf__parse_copy_queues(const char *s, unsigned *out);
int rf__parse_bytes(const char *s, unsigned long long *out);
/* A backend name (cpu, threads, cuda, auto): the static canonical name, or NULL. */
const char *rf__parse_backend(const char *s);

/* The configured values (0 / NULL / "" = not configured at that level). */
typedef struct rf__config {
	unsigned depth;
	int depth_auto;      /* depth = auto: measured on the first run (runtime/pipeline.c) */
	const char *backend; /* static canonical name */
	char backend_from[160]; /* where backend came from: "RINGFETCH_BACKEND=cuda" or "path:line" */
	unsigned copy_queues;
	char staging[64];
	int handoff; /* rf__parse_handoff's value (unset: 0, auto) */
	int overlap;
	char worker_cpus[128]; /* the copy workers' OS CPUs, e.g. "2-3,6" ("" unset: the caller's binding) */
	char trace[1024];
	char keyed_trace[1024]; /* RINGFETCH_KEYED_TRACE, as given (%p expanded at create) */
	unsigned long long memory_budget;
	char budget_from[160]; /* where memory_budget came from, for messages */
	int oracle;            /* RINGFETCH_ORACLE=1: check every run's execution log (slow; debugging) */
	long long wait_ns;     /* the file's `wait`: 0 auto (also unset), -1 sleep, else ns of spinning */
	unsigned long long hint_bytes; /* keyed hints' bound (rf_pipeline_params.hint_bytes); 0 unset */
} rf__config;

/* The wait policy, "auto" (0), "sleep" (-1) or "spin:N" (N us in 0 .. 10000000, spin:0 = sleep):
 * explicit (params.wait, non-NULL; malformed: RF_EINVAL) wins; else RINGFETCH_WAIT (malformed:
 * RF_ECONFIG naming it); else the file's `wait`, already loaded into c; else auto. */
int rf__config_wait(const char *explicit_wait, const rf__config *c, long long *ns);

/* The threads backend's cache handoff and overlap modes (backends/threads_sched.h, RF__MODE_*):
 * "auto" 0, "off" 1, "on" 2; -1 if malformed. Overlap auto compares runs on the lanes with runs
 * inline and keeps the faster; off runs inline on the caller, on runs on the lanes. */
int rf__parse_handoff(const char *s); /* either mode */

/* Read RINGFETCH_CONFIG's file (when set) and the environment variables for the values the caller did
 * not give explicitly (want_* non-zero). RF_OK, RF_ECONFIG, or RF_ENOMEM (no buffer for the file). */
int rf__config_load(rf__config *c, int want_depth, int want_backend, int want_copy_queues, int want_staging);

/* RF_OK if a ring of nslots slots of slot_bytes fits c's memory budget (none configured: always);
 * else RF_ECONFIG "<who>: a ring of N x B bytes exceeds <where the budget came from> (<budget> bytes)". */
int rf__config_budget_check(const rf__config *c, const char *who, unsigned nslots, size_t slot_bytes);

/* The backend: explicit (non-NULL) wins; else c's (RINGFETCH_BACKEND, file or env); else "auto".
 * *from: NULL when explicit or the default, else c->backend_from. */
const char *rf__config_backend(const rf__config *c, const char *explicit_backend, const char **from);

#endif
