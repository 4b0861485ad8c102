/* runtime/ktrace.c — the keyed access trace (runtime/ktrace.h). The buffer is allocated once, when the
 * trace starts, so that recording keeps the keyed calls' promise: nothing allocates after create. A
 * record costs a clock read and a 32-byte store; one write(2) every RF__KT_RECORDS records. */
#include "runtime/ktrace.h"
#include "base/alloc.h"
#include "base/error.h"
#include "base/wait.h"
#include "runtime/trace.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define RF__KT_RECORDS 2048u /* 64 KiB */

typedef struct rf__ktrec {
	uint64_t key, bytes, ns;
	uint32_t kind, slot;
} rf__ktrec;

typedef struct rf__kthdr {
	char magic[8];
	uint32_t version, record_bytes, slots, flags;
	uint64_t slot_bytes;
} rf__kthdr;

_Static_assert(sizeof(rf__ktrec) == 32 && sizeof(rf__kthdr) == 32, "the file format's sizes");

struct rf__ktrace {
	int fd;
	int err;       /* errno of the first failed write, 0 while none */
	pid_t pid;     /* the process that opened it: a child of fork() writes nothing of ours */
	unsigned n;    /* records buffered */
	uint64_t lost; /* records not written after a failure */
	int64_t t0;    /* rf__now_ns at the start: records say ns since, on the clock of a run's trace events */
	char *path;
	rf__ktrec *buf;
};

static void rf__kt_flush(rf__ktrace *t)
{
	if (t->err == 0 && t->n > 0)
		t->err = rf__write_all(t->fd, t->buf, (size_t)t->n * sizeof *t->buf, NULL) != 0 ? errno : 0;
	if (t->err != 0)
		t->lost += t->n;
	t->n = 0;
}

int rf__ktrace_open(const char *who, const char *path, unsigned nslots, size_t slot_bytes, rf__ktrace **out)
{
	rf__ktrace *t = rf__calloc(1, sizeof *t);
	if (t == NULL || (t->buf = rf__malloc(RF__KT_RECORDS * sizeof *t->buf)) == NULL ||
	    (t->path = rf__strdup(path)) == NULL) {
		if (t != NULL)
			free(t->buf);
		free(t);
		return rf__err(RF_ENOMEM, "%s: out of memory for a keyed trace", who);
	}
	/* O_NONBLOCK: a FIFO without a reader is ENXIO, not a wait; the writes themselves block. */
	t->fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOCTTY | O_NONBLOCK, 0666);
	int e = t->fd < 0 ? errno : 0;
	if (e == 0) {
		int fl = fcntl(t->fd, F_GETFL);
		e = fl < 0 || fcntl(t->fd, F_SETFL, fl & ~O_NONBLOCK) != 0 ? errno : 0;
	}
	rf__kthdr h = {"RFKTRACE", 1, (uint32_t)sizeof(rf__ktrec), nslots, 0, (uint64_t)slot_bytes};
	int hdr = e == 0;
	if (e == 0)
		e = rf__write_all(t->fd, &h, sizeof h, NULL) != 0 ? errno : 0;
	if (e != 0) {
		int rc = rf__err(RF_EIO, "%s: keyed trace \"%.200s\": cannot %s: %s", who, path,
				 hdr ? "write the header" : "create the file", strerror(e));
		if (t->fd >= 0)
			close(t->fd);
		free(t->path);
		free(t->buf);
		free(t);
		return rc;
	}
	t->pid = getpid();
	t->t0 = rf__now_ns();
	*out = t;
	return RF_OK;
}

void rf__ktrace_add(rf__ktrace *t, unsigned kind, uint64_t key, uint64_t bytes, unsigned slot)
{
	t->buf[t->n++] = (rf__ktrec){key, bytes, (uint64_t)(rf__now_ns() - t->t0), kind, slot};
	if (t->n == RF__KT_RECORDS)
		rf__kt_flush(t);
}

int rf__ktrace_close(rf__ktrace *t, const char *who)
{
	if (t == NULL)
		return RF_OK;
	int rc = RF_OK;
	if (t->pid == getpid()) {
		rf__kt_flush(t);
		if (close(t->fd) != 0 && t->err == 0)
			t->err = errno;
		if (t->err != 0 && who != NULL)
			rc = rf__err(RF_EIO, "%s: keyed trace \"%.200s\": a write failed: %s (%llu records lost)", who,
				     t->path, strerror(t->err), (unsigned long long)t->lost);
		else if (t->err != 0)
			rc = RF_EIO;
	} else {
		close(t->fd);
	}
	free(t->path);
	free(t->buf);
	free(t);
	return rc;
}

int rf__ktrace_expand(const char *pattern, unsigned seq, char *out, size_t cap)
{
	size_t n = 0;
	for (const char *c = pattern; *c != '\0'; c++) {
		char pid[24];
		const char *piece = pid;
		if (*c != '%')
			pid[0] = *c, pid[1] = '\0';
		else if (c[1] == '%')
			piece = "%", c++;
		else if (c[1] == 'p')
			snprintf(pid, sizeof pid, "%ld", (long)getpid()), c++;
		else
			return -1;
		size_t k = strlen(piece);
		if (n + k >= cap)
			return -1;
		memcpy(out + n, piece, k), n += k;
	}
	int k = seq > 0 ? snprintf(out + n, cap - n, ".%u", seq) : 0;
	if (n == 0 || k < 0 || (size_t)k >= cap - n)
		return -1;
	out[n + (size_t)k] = '\0';
	return 0;
}

unsigned rf__ktrace_next_seq(void)
{
	static atomic_uint seq;
	return atomic_fetch_add(&seq, 1);
}
