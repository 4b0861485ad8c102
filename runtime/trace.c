/* runtime/trace.c — writing a run's events as Chrome trace-event JSON. The file is a JSON array left
 * open, which the format allows, so that every run can append to it: one process track per run (named
 * after the pipeline and the run number), one thread track per queue, one complete ("X") slice per
 * copy and compute. */
#include "base/alloc.h"
#include "runtime/trace.h"
#include "base/error.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

int rf__trace_begin(rf__trace *t, const struct rf_program *p, size_t nblocks)
{
	memset(t, 0, sizeof *t);
	atomic_init(&t->seq, 0);
	t->nq = p->nqueues;
	int64_t iters = rf__prog_iter_end(p, nblocks) - p->iter_begin;
	for (unsigned q = 0; q < p->nqueues; q++) {
		size_t per_iter = 0;
		for (size_t i = p->qstart[q]; i < p->qstart[q + 1]; i++) {
			uint8_t k = p->ops[p->qidx[i]].kind;
			per_iter += k == RF_OP_COPY || k == RF_OP_COMPUTE;
		}
		size_t cap = per_iter * (size_t)(iters > 0 ? iters : 0);
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

static void rf__trace_events(const rf__trace *t, FILE *f, unsigned pid)
{
	for (unsigned q = 0; q < t->nq; q++) {
		fprintf(f, "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%u,\"tid\":%u,\"args\":{\"name\":\"queue %u\"}},\n",
			pid, q, q);
		for (size_t i = 0; i < t->n[q]; i++) {
			const rf__tev *e = &t->ev[q][i];
			const char *what = e->kind == RF_OP_COPY ? "copy" : "compute";
			fprintf(f,
				"{\"name\":\"%s b%lld\",\"cat\":\"%s\",\"ph\":\"X\",\"ts\":%.3f,\"dur\":%.3f,\"pid\":%u,"
				"\"tid\":%u,\"args\":{\"block\":%lld,\"slot\":%u}},\n",
				what, (long long)e->block, what, (double)e->t0 / 1e3, (double)(e->t1 - e->t0) / 1e3, pid, q,
				(long long)e->block, e->slot);
		}
	}
}

int rf__trace_end(rf__trace *t, const char *path, const char *label)
{
	static atomic_uint next_pid = 1; /* one process track per traced run, across pipelines and threads */
	FILE *f = fopen(path, "a");
	if (f == NULL) {
		int e = errno;
		rf__trace_drop(t);
		return rf__err(RF_EBACKEND, "trace: cannot open %s: %s", path, strerror(e));
	}
	if (ftell(f) == 0)
		fputs("[\n", f);
	unsigned pid = atomic_fetch_add_explicit(&next_pid, 1, memory_order_relaxed);
	fprintf(f, "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%u,\"args\":{\"name\":\"%s run %u\"}},\n", pid,
		label, pid);
	rf__trace_events(t, f, pid);
	int bad = ferror(f);
	bad |= fclose(f) != 0;
	rf__trace_drop(t);
	return bad ? rf__err(RF_EBACKEND, "trace: writing %s failed", path) : RF_OK;
}
