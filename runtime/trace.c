/* runtime/trace.c — writing a run's events as Chrome trace-event JSON: one process track per run
 * (named after the pipeline and the run number), one thread track per queue, one complete ("X") slice
 * per copy and compute.
 *
 * The file is a JSON array that is closed ("]") whenever no run is writing it, so JSON tools read it
 * as well as Perfetto does; each run reopens it: under an exclusive flock it finds the closing bracket
 * and writes ",", its events and a new "]" there. Runs of many pipelines (threads or processes) may
 * trace to one path: the lock makes each run's events one whole write, never interleaved. Only regular
 * files are written: a FIFO, device or directory is refused (opened non-blocking, so it never hangs). */
#define _DEFAULT_SOURCE /* flock */
#include "base/alloc.h"
#include "runtime/trace.h"
#include "base/error.h"

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
	atomic_init(&t->seq, 0);
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
			int timed = o->kind == RF_OP_COPY || o->kind == RF_OP_COMPUTE;
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

void rf__trace_drop(rf__trace *t)
{
	for (unsigned q = 0; q < t->nq; q++) {
		free(t->ev[q]);
		t->ev[q] = NULL;
	}
}

/* The run's events as JSON array elements separated by ",\n" (no bracket, no trailing comma). */
static void rf__trace_events(const rf__trace *t, FILE *f, unsigned pid, const char *label)
{
	fprintf(f, "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%u,\"args\":{\"name\":\"%s run %u\"}}", pid, label,
		pid);
	for (unsigned q = 0; q < t->nq; q++) {
		fprintf(f, ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%u,\"tid\":%u,\"args\":{\"name\":\"queue %u\"}}",
			pid, q, q);
		for (size_t i = 0; i < t->n[q]; i++) {
			const rf__tev *e = &t->ev[q][i];
			const char *what = e->kind == RF_OP_COPY ? "copy" : "compute";
			fprintf(f,
				",\n{\"name\":\"%s b%lld\",\"cat\":\"%s\",\"ph\":\"X\",\"ts\":%.3f,\"dur\":%.3f,\"pid\":%u,"
				"\"tid\":%u,\"args\":{\"block\":%lld,\"slot\":%u}}",
				what, (long long)e->block, what, (double)e->t0 / 1e3, (double)(e->t1 - e->t0) / 1e3, pid, q,
				(long long)e->block, e->slot);
		}
	}
}

static int rf__write_at(int fd, const char *buf, size_t len, off_t *off)
{
	while (len > 0) {
		ssize_t n = pwrite(fd, buf, len, *off);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return -1;
		buf += n;
		len -= (size_t)n;
		*off += n;
	}
	return 0;
}

/* Where this run's events go in a file of `size` bytes, and what precedes them there: after "[" of an
 * empty array, over the "]" that closes a non-empty one (or over the trailing "," of a file left open
 * by an older version). -1: the file does not end like a trace-event array. */
static int rf__trace_splice(int fd, off_t size, off_t *at, const char **sep)
{
	char tail[4096];
	off_t from = size > (off_t)sizeof tail ? size - (off_t)sizeof tail : 0;
	ssize_t n = pread(fd, tail, (size_t)(size - from), from);
	if (n != size - from)
		return -1;
	ssize_t i = n;
	while (i > 0 && strchr(" \t\r\n", tail[i - 1]) != NULL)
		i--;
	if (i == 0 && from == 0) { /* empty or blank: a new array */
		*at = 0;
		*sep = "[\n";
		return 0;
	}
	char c = i > 0 ? tail[i - 1] : 0;
	ssize_t j = i - 1;
	while (c == ']' && j > 0 && strchr(" \t\r\n", tail[j - 1]) != NULL)
		j--;
	*at = from + (c == '[' || c == '}' ? i : i - 1);
	if (c == ']' && j > 0 && tail[j - 1] == '[')
		*sep = "\n";
	else if (c == '[')
		*sep = "\n";
	else if (c == ']' || c == ',' || c == '}')
		*sep = ",\n";
	else
		return -1;
	return 0;
}

/* Append body (array elements) to the trace file at path, leaving it a closed array. */
static int rf__trace_append(const char *path, const char *body, size_t len)
{
	int fd = open(path, O_RDWR | O_CREAT | O_NONBLOCK | O_CLOEXEC, 0644);
	if (fd < 0)
		return rf__err(RF_EBACKEND, "trace: cannot open %s: %s", path, strerror(errno));
	struct stat st;
	int rc = RF_OK;
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
		rc = rf__err(RF_EBACKEND, "trace: %s is not a regular file", path);
		goto out;
	}
	while (flock(fd, LOCK_EX) != 0)
		if (errno != EINTR) {
			rc = rf__err(RF_EBACKEND, "trace: cannot lock %s: %s", path, strerror(errno));
			goto out;
		}
	off_t at;
	const char *sep;
	if (fstat(fd, &st) != 0 || rf__trace_splice(fd, st.st_size, &at, &sep) != 0) {
		rc = rf__err(RF_EBACKEND, "trace: %s does not end like a trace-event JSON array", path);
		goto out;
	}
	off_t end = at;
	if (rf__write_at(fd, sep, strlen(sep), &end) != 0 || rf__write_at(fd, body, len, &end) != 0 ||
	    rf__write_at(fd, "\n]\n", 3, &end) != 0 || (end < st.st_size && ftruncate(fd, end) != 0))
		rc = rf__err(RF_EBACKEND, "trace: writing %s failed: %s", path, strerror(errno));
out:
	close(fd); /* releases the lock */
	return rc;
}

int rf__trace_end(rf__trace *t, const char *path, const char *label)
{
	static atomic_uint next_pid = 1; /* one process track per traced run, across pipelines and threads */
	unsigned pid = atomic_fetch_add_explicit(&next_pid, 1, memory_order_relaxed);
	char *body = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&body, &len);
	if (f == NULL) {
		rf__trace_drop(t);
		return rf__err(RF_ENOMEM, "trace: out of memory formatting %s", path);
	}
	rf__trace_events(t, f, pid, label);
	rf__trace_drop(t);
	int bad = ferror(f);
	bad |= fclose(f) != 0;
	int rc = bad ? rf__err(RF_ENOMEM, "trace: out of memory formatting %s", path) : rf__trace_append(path, body, len);
	free(body);
	return rc;
}
