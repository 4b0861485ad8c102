/* runtime/trace.c — a run's events as Chrome trace-event JSON: one process track per run, one thread
 * track per queue, one complete ("X") slice per copy, stage and compute.
 *
 * The file stays a closed JSON array between runs. Each run takes an exclusive flock (so runs of many
 * pipelines, threads or processes never interleave), checks that the file is blank or a trace-event
 * array (skipped while it is exactly as this thread left it), and writes ",", its events and "]"
 * over the closing bracket; a write that fails half-way puts the file back as it was. Only regular
 * files are written (opened non-blocking: a FIFO never hangs); anything else is left untouched. */
#define _DEFAULT_SOURCE /* flock */
#include "base/alloc.h"
#include "runtime/trace.h"
#include "base/error.h"
#include "io/flight.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

int rf__trace_begin(rf__trace *t, const struct rf_program *p, size_t nblocks, int sampled, unsigned group,
		    size_t samples)
{
	memset(t, 0, sizeof *t);
	t->nq = p->nqueues;
	t->group = group ? group : 1;
	t->every = samples ? (2 * (uint64_t)nblocks + samples - 1) / samples : 1;
	t->sampled = sampled && t->every > 2;
	int64_t iters = rf__prog_iter_end(p, nblocks) - p->iter_begin;
	/* Sampled: the kept blocks, plus a pair of groups of slack for where the pairs fall. */
	if (t->sampled && (uint64_t)iters > samples + 2 * t->group)
		iters = (int64_t)(samples + 2 * t->group);
	for (unsigned q = 0; q < p->nqueues; q++) {
		size_t per_iter = 0;
		for (size_t i = 0; i < p->nops; i++) {
			const rf__op *o = &p->ops[i];
			int timed = o->kind == RF_OP_COPY || o->kind == RF_OP_COMPUTE || o->kind == RF_OP_STAGE;
			/* queue 0 also records a ring's copies that its caller takes over (backends/threads.c) */
			per_iter += timed && (o->queue == q || (q == 0 && p->ring && o->kind == RF_OP_COPY));
		}
		size_t cap = per_iter * (size_t)(iters > 0 ? iters : 0);
		t->cap[q] = cap;
		if (cap > 0 && (t->ev[q] = rf__malloc(cap * sizeof *t->ev[q])) == NULL) {
			rf__trace_drop(t);
			return rf__err(RF_ENOMEM, "trace: cannot allocate %zu events for queue %u", cap, q);
		}
	}
	return RF_OK;
}

void rf__trace_copy(void *ctx, rf__flight_rec *r, int phase)
{
	rf__trace *t = ctx;
	if (phase == RF__FLIGHT_STARTS)
		r->t0 = rf__now_ns(), r->s0 = rf__trace_seq(t);
	else if (r->rc == RF_OK)
		rf__trace_add(t, r->queue, r->kind, r->block, r->slot, r->node, r->t0, rf__now_ns(), r->s0);
}

void rf__trace_flight(struct rf__flight *f, rf__trace *t)
{
	f->hook = t != NULL ? rf__trace_copy : NULL;
	f->hook_ctx = t;
}

void rf__trace_drop(rf__trace *t)
{
	for (unsigned q = 0; q < t->nq; q++) {
		free(t->ev[q]);
		t->ev[q] = NULL;
	}
}

/* The run's events as JSON array elements separated by ",\n" (no bracket, no trailing comma). Keyed
 * copies: one track per lane, slices named by key. */
static void rf__trace_events(const rf__trace *t, FILE *f, unsigned pid, const char *label)
{
	fprintf(f, "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%u,\"args\":{\"name\":\"%s %s %u\"}}", pid, label,
		t->keyed ? "keyed copies" : "run", pid);
	for (unsigned q = 0; q < t->nq; q++) {
		if (!t->keyed)
			fprintf(f, ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%u,\"tid\":%u,\"args\":{\"name\":\"queue %u\"}}",
				pid, q, q);
		for (size_t i = 0; i < t->n[q]; i++) {
			const rf__tev *e = &t->ev[q][i];
			const char *what = e->kind == RF_OP_COPY ? "copy" : e->kind == RF_OP_STAGE ? "stage" : "compute";
			if (e->t1 == 0)
				continue; /* a keyed copy withdrawn before it started */
			fprintf(f,
				",\n{\"name\":\"%s %s%llu\",\"cat\":\"%s\",\"ph\":\"X\",\"ts\":%.3f,\"dur\":%.3f,\"pid\":%u,"
				"\"tid\":%u,\"args\":{\"%s\":%llu,\"slot\":%u}}",
				what, t->keyed ? "k" : "b", (unsigned long long)e->block, what, (double)e->t0 / 1e3,
				(double)(e->t1 - e->t0) / 1e3, pid, t->keyed ? e->node : q, t->keyed ? "key" : "block",
				(unsigned long long)e->block, e->slot); /* blocks are never negative, keys unsigned */
		}
	}
}

int rf__write_all(int fd, const void *p, size_t n, off_t *off)
{
	const char *c = p;
	while (n > 0) {
		ssize_t k = off != NULL ? pwrite(fd, c, n, *off) : write(fd, c, n);
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0) {
			errno = k < 0 ? errno : EIO;
			return -1;
		}
		c += k, n -= (size_t)k;
		if (off != NULL)
			*off += k;
	}
	return 0;
}

/* ---- the check: is the file a trace-event array? -------------------------------------------------
 * A whole-file JSON syntax check (RFC 8259, UTF-8 included), read 64 KiB at a time: blank, or an array
 * of objects (values of any kind inside, nested at most RF__JSON_DEPTH deep), then only whitespace. An
 * array left open by an older version ("[" or a trailing "," then the end of the file) is accepted.
 * Memory is bounded, time linear (rf__trace_memo spares re-checking a file this thread wrote). */
#define RF__JSON_DEPTH 64

typedef struct rf__jrd {
	int fd;
	off_t size, off; /* file size; file offset of buf[0] */
	size_t pos, len;
	const char *why; /* the first error, at offset `bad` */
	off_t bad;
	off_t at;        /* rf__trace_check: where this run's events go, after `sep` */
	const char *sep;
	unsigned char buf[65536];
} rf__jrd;

static off_t rf__jat(const rf__jrd *r)
{
	return r->off + (off_t)r->pos;
}

static int rf__jfail(rf__jrd *r, const char *why)
{
	if (r->why == NULL) {
		r->why = why;
		r->bad = rf__jat(r);
	}
	return -1;
}

/* The next byte without taking it (reading the next part of the file when the buffer is used up); -1
 * at the end of the file, or on a read error (why set). */
static int rf__jpeek(rf__jrd *r)
{
	if (r->pos < r->len)
		return r->buf[r->pos];
	r->off += (off_t)r->len;
	r->pos = r->len = 0;
	if (r->off >= r->size)
		return -1;
	size_t want = r->size - r->off < (off_t)sizeof r->buf ? (size_t)(r->size - r->off) : sizeof r->buf;
	ssize_t n;
	while ((n = pread(r->fd, r->buf, want, r->off)) < 0 && errno == EINTR)
		;
	if (n <= 0)
		return rf__jfail(r, "cannot be read to the end");
	r->len = (size_t)n;
	return r->buf[0];
}

/* Take the next byte if it is one of `set` (a NUL byte never is): the byte, else 0. */
static int rf__jin(rf__jrd *r, const char *set)
{
	int c = rf__jpeek(r);
	if (c <= 0 || strchr(set, c) == NULL)
		return 0;
	r->pos++;
	return c;
}

static int rf__jskip_ws(rf__jrd *r)
{
	while (rf__jin(r, " \t\n\r"))
		;
	return rf__jpeek(r);
}

static int rf__jdigits(rf__jrd *r)
{
	int n = 0;
	while (rf__jin(r, "0123456789"))
		n++;
	return n;
}

static int rf__jnumber(rf__jrd *r)
{
	rf__jin(r, "-");
	int ok = rf__jin(r, "0") || rf__jdigits(r) > 0; /* a leading zero stands alone */
	if (ok && rf__jin(r, "."))
		ok = rf__jdigits(r) > 0;
	if (ok && rf__jin(r, "eE")) {
		rf__jin(r, "+-");
		ok = rf__jdigits(r) > 0;
	}
	return ok ? 0 : rf__jfail(r, "a malformed number");
}

static int rf__jword(rf__jrd *r, const char *word)
{
	for (; *word; word++, r->pos++)
		if (rf__jpeek(r) != (unsigned char)*word)
			return rf__jfail(r, "an unknown word");
	return 0;
}

/* One UTF-8 sequence whose lead byte c was taken (RFC 3629: no overlong forms, no surrogates). */
static int rf__jutf8(rf__jrd *r, int c)
{
	/* The bytes that follow the lead, and the range of the first of them. */
	int more = c >= 0xf0 ? 3 : c >= 0xe0 ? 2 : 1;
	int lo = c == 0xe0 ? 0xa0 : c == 0xf0 ? 0x90 : 0x80;
	int hi = c == 0xed ? 0x9f : c == 0xf4 ? 0x8f : 0xbf;
	if (c < 0xc2 || c > 0xf4)
		return rf__jfail(r, "a byte that is not UTF-8");
	for (int k = 0; k < more; k++, lo = 0x80, hi = 0xbf) {
		int d = rf__jpeek(r);
		if (d < lo || d > hi)
			return rf__jfail(r, "a byte that is not UTF-8");
		r->pos++;
	}
	return 0;
}

static int rf__jstring(rf__jrd *r)
{
	if (!rf__jin(r, "\""))
		return rf__jfail(r, "a string expected");
	for (;;) {
		/* Plain ASCII, the bulk of a trace, in one pass over the buffer. */
		while (r->pos < r->len && r->buf[r->pos] >= 0x20 && r->buf[r->pos] < 0x80 && r->buf[r->pos] != '"' &&
		       r->buf[r->pos] != '\\')
			r->pos++;
		int c = rf__jpeek(r);
		if (c < 0)
			return rf__jfail(r, "an unterminated string");
		r->pos++;
		if (c == '"')
			return 0;
		if (c < 0x20)
			return rf__jfail(r, "a control character in a string");
		if (c >= 0x80 && rf__jutf8(r, c) != 0)
			return -1;
		if (c != '\\')
			continue;
		if ((c = rf__jin(r, "\"\\/bfnrtu")) == 0)
			return rf__jfail(r, "a malformed escape");
		for (int k = 0; c == 'u' && k < 4; k++)
			if (!rf__jin(r, "0123456789abcdefABCDEF"))
				return rf__jfail(r, "a malformed \\u escape");
	}
}

/* Any value; an object or an array at nesting level `depth`. Level 0 is the trace array: its elements
 * are objects, it may end after "[" or "," (left open by an older version), and r->at, r->sep say where
 * the next run's events go and what precedes them: after "[" of an empty array, over the "]" that
 * closes a non-empty one, over the trailing "," of an open one. */
static int rf__jvalue(rf__jrd *r, int depth)
{
	int open = rf__jpeek(r), close = open == '{' ? '}' : ']';
	if (depth == 0 && open != '[')
		return rf__jfail(r, "it does not start with '['");
	if (open == '"')
		return rf__jstring(r);
	if (open == 't' || open == 'f' || open == 'n')
		return rf__jword(r, open == 't' ? "true" : open == 'f' ? "false" : "null");
	if (open == '-' || (open >= '0' && open <= '9'))
		return rf__jnumber(r);
	if (open != '{' && open != '[')
		return rf__jfail(r, open < 0 ? "the file ends inside the array" : "a value expected");
	if (depth > RF__JSON_DEPTH)
		return rf__jfail(r, "nesting deeper than 64");
	r->pos++;
	if (depth == 0)
		r->at = rf__jat(r);
	if (rf__jskip_ws(r) == close) {
		if (depth == 0)
			r->at = rf__jat(r);
		r->pos++;
		return 0;
	}
	for (;;) {
		if (depth == 0 && rf__jpeek(r) != '{')
			return rf__jpeek(r) < 0 ? 0 : rf__jfail(r, "an element that is not an object");
		if (open == '{') {
			if (rf__jstring(r) != 0)
				return -1;
			rf__jskip_ws(r);
			if (!rf__jin(r, ":"))
				return rf__jfail(r, "':' expected");
			rf__jskip_ws(r);
		}
		if (rf__jvalue(r, depth + 1) != 0)
			return -1;
		int c = rf__jskip_ws(r);
		if (depth == 0 && (c == ',' || c == close)) {
			r->at = rf__jat(r);
			r->sep = ",\n";
		}
		r->pos += c == ',' || c == close;
		if (c == close)
			return 0;
		if (c != ',')
			return rf__jfail(r, open == '{' ? "',' or '}' expected" : "',' or ']' expected");
		rf__jskip_ws(r);
	}
}

/* The whole check (above); a blank file's events go at 0, a new array. -1 with r->why. */
static int rf__trace_check(rf__jrd *r)
{
	r->at = 0;
	r->sep = "[\n";
	if (rf__jskip_ws(r) >= 0) {
		r->sep = "\n";
		if (rf__jvalue(r, 0) != 0)
			return -1;
	}
	if (rf__jskip_ws(r) >= 0)
		return rf__jfail(r, "text after the array");
	return r->why ? -1 : 0;
}

/* What this thread last left in a trace file: while it is exactly that (same file, size, mtime, ctime)
 * it is an array closed at `at`, not checked again; another writer changes the size or the ctime.
 * Per thread: no lock, and a file another thread wrote last is simply checked again. */
typedef struct rf__trace_memo {
	dev_t dev;
	ino_t ino;
	off_t size, at;
	struct timespec mtim, ctim;
} rf__trace_memo;

static _Thread_local rf__trace_memo rf__memo[4];
static _Thread_local unsigned rf__memo_next;

static int rf__same_time(struct timespec a, struct timespec b)
{
	return a.tv_sec == b.tv_sec && a.tv_nsec == b.tv_nsec;
}

/* The memo of the file as it is now, or NULL: check it. */
static rf__trace_memo *rf__memo_find(const struct stat *st)
{
	for (unsigned i = 0; i < sizeof rf__memo / sizeof rf__memo[0]; i++) {
		rf__trace_memo *m = &rf__memo[i];
		if (m->size > 0 && m->dev == st->st_dev && m->ino == st->st_ino && m->size == st->st_size &&
		    rf__same_time(m->mtim, st->st_mtim) && rf__same_time(m->ctim, st->st_ctim))
			return m;
	}
	return NULL;
}

static int rf__trace_fail(const char *path, const char *what)
{
	return rf__err(RF_EBACKEND, "trace: cannot %s %s: %s", what, path, strerror(errno));
}

/* Append body (array elements) to the trace file at path (the file comment says how). */
static int rf__trace_append(const char *path, const char *body, size_t len)
{
	int fd = open(path, O_RDWR | O_CREAT | O_NONBLOCK | O_CLOEXEC, 0644);
	if (fd < 0)
		return rf__trace_fail(path, "open");
	struct stat st;
	int rc = RF_OK;
	char small[256], *tail = small;
	off_t at = 0;
	const char *sep = ",\n";
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
		rc = rf__err(RF_EBACKEND, "trace: %s is not a regular file", path);
		goto out;
	}
	int locked;
	while ((locked = flock(fd, LOCK_EX)) != 0 && errno == EINTR)
		;
	if (locked != 0 || fstat(fd, &st) != 0) { /* st again: now that no other writer can change it */
		rc = rf__trace_fail(path, locked != 0 ? "lock" : "stat");
		goto out;
	}
	rf__trace_memo *memo = rf__memo_find(&st);
	if (memo != NULL) {
		at = memo->at;
	} else {
		rf__jrd *r = rf__malloc(sizeof *r);
		if (r == NULL) {
			rc = rf__err(RF_ENOMEM, "trace: out of memory checking %s", path);
			goto out;
		}
		*r = (rf__jrd){.fd = fd, .size = st.st_size};
		if (rf__trace_check(r) != 0)
			rc = rf__err(RF_EBACKEND, "trace: %s is not a trace-event JSON array (byte %lld: %s)", path,
				     (long long)r->bad, r->why);
		at = r->at;
		sep = r->sep;
		free(r);
		if (rc != RF_OK)
			goto out;
	}
	/* What the append overwrites (a closing bracket and trailing whitespace, or a blank file), to put
	 * back if the write fails half-way (a full disk, RLIMIT_FSIZE). */
	size_t keep = (size_t)(st.st_size - at);
	if (keep > sizeof small && (tail = rf__malloc(keep)) == NULL) {
		rc = rf__err(RF_ENOMEM, "trace: out of memory appending to %s", path);
		goto out;
	}
	if (keep > 0 && pread(fd, tail, keep, at) != (ssize_t)keep) {
		rc = rf__trace_fail(path, "read");
		goto out;
	}
	off_t end = at;
	if (rf__write_all(fd, sep, strlen(sep), &end) != 0 || rf__write_all(fd, body, len, &end) != 0 ||
	    rf__write_all(fd, "\n]\n", 3, &end) != 0 || (end < st.st_size && ftruncate(fd, end) != 0)) {
		int err = errno;
		end = at;
		if (ftruncate(fd, st.st_size) == 0 && rf__write_all(fd, tail, keep, &end) == 0)
			rc = rf__err(RF_EBACKEND, "trace: writing %s failed: %s (the file is as it was)", path,
				     strerror(err));
		else
			rc = rf__err(RF_EBACKEND, "trace: writing %s failed: %s, and restoring it too: %s", path,
				     strerror(err), strerror(errno));
		goto out;
	}
	if (memo == NULL) {
		memo = &rf__memo[rf__memo_next];
		rf__memo_next = (rf__memo_next + 1) % (sizeof rf__memo / sizeof rf__memo[0]);
	}
	struct stat now;
	if (fstat(fd, &now) == 0) /* closed at the "]" of "\n]\n" */
		*memo = (rf__trace_memo){now.st_dev, now.st_ino, now.st_size, end - 2, now.st_mtim,
					 now.st_ctim};
out:
	if (tail != small)
		free(tail);
	close(fd); /* releases the lock */
	return rc;
}

int rf__trace_write(const rf__trace *t, const char *path, const char *label)
{
	static atomic_uint next_pid = 1; /* one process track per traced run, across pipelines and threads */
	unsigned pid = atomic_fetch_add_explicit(&next_pid, 1, memory_order_relaxed);
	char *body = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&body, &len);
	int bad = f == NULL;
	if (f != NULL) {
		rf__trace_events(t, f, pid, label);
		bad = ferror(f);
		bad |= fclose(f) != 0;
	}
	int rc = bad ? rf__err(RF_ENOMEM, "trace: out of memory formatting %s", path) : rf__trace_append(path, body, len);
	free(body);
	return rc;
}
