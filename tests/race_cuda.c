/*
 * tests/race_cuda.c — the cuda backend's threads under stress, against the simulated CUDA runtime
 * (tests/cuda_sim.h), as a plain program so that it runs under ThreadSanitizer (Criterion cannot):
 * the walker and the staging lanes with their helpers (backends/cuda_stage.c) share staging slots'
 * states, pinned slots, piece jobs and queue values. Random staged rings (depth 2..5, 1..2 copy
 * queues), block sizes of one to several 256 KiB units, pinned / pageable / mixed sources, 1..4 staging
 * threads, several runs per pipeline (the pinned ring allocated in the middle of the first pageable
 * run), cancels from another thread at random moments, and keyed use between runs (hints staged by the
 * lanes, acquires staged by the caller). One run of each pipeline reads most blocks from a file (the
 * lanes' reads in flight, landing while the walker waits for them), and so do its keyed steps (bursts
 * of hints: a lane's reads in flight, their H2Ds enqueued by the lane as they land), some of them
 * naming the same bytes in a copy of the file cut to half since it was opened (past the half their
 * reads fail on a lane, and the acquire that follows names the whole file); so does one block of a run
 * before it now and then (RF_EIO). Every block is checked in stream order, where a kernel would read
 * it; after a canceled or failed run the next run must be whole.
 * Usage: race_cuda [--iterations N] [--seed S]. Exit 0 when every check passed.
 */
#include "ringfetch.h"
#include "base/test_hooks.h"
#include "cuda_sim.h"
#include "runtime/backend.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static unsigned long long rnd(unsigned long long *s, unsigned long long n)
{
	*s = *s * 6364136223846793005ull + 1442695040888963407ull;
	return n ? (*s >> 33) % n : 0;
}

static unsigned char pat(size_t block, size_t i, unsigned salt)
{
	return (unsigned char)(block * 131 + i * 7 + (i >> 12) + salt);
}

enum { PINNED, PAGEABLE, MIXED, FILES }; /* FILES: most blocks are ranges of a file, the rest MIXED */

typedef struct blocks {
	size_t n;
	unsigned salt;
	unsigned char **buf;
	int *pinned;
	const void **srcs;
	size_t *sizes;
	rf_file *file; /* FILES */
	char path[32];
	/* FILES: a copy of the file cut to half after it was opened (hints of its ranges past the half fail
	 * on a lane), and each block's offset in both */
	rf_file *shrunk;
	char spath[32];
	size_t *off, half; /* half: the copy's size */
} blocks;

/* The blocks' bytes written to a file, at unaligned offsets, some contiguous; most blocks then name
 * their range of it. */
static void blocks_to_file(blocks *b, unsigned long long *rng)
{
	size_t *off = calloc(b->n, sizeof *off), at = 0;
	snprintf(b->path, sizeof b->path, "race_cuda_XXXXXX");
	int fd = mkstemp(b->path), ok = fd >= 0 && off != NULL;
	for (size_t i = 0; ok && i < b->n; i++) {
		at += rnd(rng, 3) == 0 ? (size_t)rnd(rng, 5000) : 0;
		off[i] = at;
		ok = pwrite(fd, b->buf[i], b->sizes[i], (off_t)at) == (ssize_t)b->sizes[i];
		at += b->sizes[i];
	}
	ok = ok && ftruncate(fd, (off_t)at + 1) == 0;
	if (fd >= 0)
		close(fd);
	if (!ok || rf_file_open(b->path, 0, &b->file) != RF_OK) {
		fprintf(stderr, "race_cuda: the blocks' file: %s\n", rf_errmsg());
		exit(1);
	}
	snprintf(b->spath, sizeof b->spath, "race_cuda_short_XXXXXX");
	int sfd = mkstemp(b->spath);
	ok = sfd >= 0;
	for (size_t i = 0; ok && i < b->n; i++)
		ok = pwrite(sfd, b->buf[i], b->sizes[i], (off_t)off[i]) == (ssize_t)b->sizes[i];
	ok = ok && ftruncate(sfd, (off_t)at + 1) == 0 && rf_file_open(b->spath, 0, &b->shrunk) == RF_OK &&
	     ftruncate(sfd, (off_t)(b->half = at / 2)) == 0;
	if (sfd >= 0)
		close(sfd);
	if (!ok) {
		fprintf(stderr, "race_cuda: the file that shrinks: %s\n", rf_errmsg());
		exit(1);
	}
	const unsigned char *d = rf_file_data(b->file);
	for (size_t i = 0; i < b->n; i++)
		if (b->sizes[i] != 0 && rnd(rng, 4) != 0)
			b->srcs[i] = d + off[i];
	b->off = off;
}

static void blocks_make(blocks *b, size_t n, size_t slot, int kind, unsigned long long *rng)
{
	b->n = n;
	b->salt = (unsigned)rnd(rng, 256);
	b->buf = calloc(n, sizeof *b->buf);
	b->pinned = calloc(n, sizeof *b->pinned);
	b->srcs = calloc(n, sizeof *b->srcs);
	b->sizes = calloc(n, sizeof *b->sizes);
	for (size_t i = 0; i < n; i++) {
		b->sizes[i] = rnd(rng, 9) == 0 ? 0 : 1 + rnd(rng, slot);
		b->pinned[i] = kind == PINNED || (kind >= MIXED && rnd(rng, 2));
		size_t sz = b->sizes[i] ? b->sizes[i] : 1;
		b->buf[i] = b->pinned[i] ? sim_host_alloc(sz) : malloc(sz);
		for (size_t j = 0; j < b->sizes[i]; j++)
			b->buf[i][j] = pat(i, j, b->salt);
		b->srcs[i] = b->buf[i];
	}
	b->file = b->shrunk = NULL;
	b->off = NULL;
	if (kind == FILES)
		blocks_to_file(b, rng);
}

static int blocks_free(blocks *b)
{
	int fails = 0;
	if (b->file != NULL) { /* no copy holds it any more */
		fails = rf_file_close(b->file) != RF_OK;
		if (fails)
			fprintf(stderr, "race_cuda: closing the blocks' file: %s\n", rf_errmsg());
		unlink(b->path);
		if (rf_file_close(b->shrunk) != RF_OK) {
			fprintf(stderr, "race_cuda: closing the file that shrank: %s\n", rf_errmsg());
			fails++;
		}
		unlink(b->spath);
		free(b->off);
	}
	for (size_t i = 0; i < b->n; i++) {
		if (b->pinned[i])
			sim_host_free(b->buf[i]);
		else
			free(b->buf[i]);
	}
	free(b->buf);
	free(b->pinned);
	free(b->srcs);
	free(b->sizes);
	return fails;
}

/* The check runs as a host function in stream order (on whichever thread drives the simulated device). */
#define MAXBLK 512
typedef struct run_check {
	const blocks *b;
	atomic_size_t checked, bad;
	rf_block blk[MAXBLK];
	struct probe {
		struct run_check *rc;
		size_t i;
	} probe[MAXBLK];
} run_check;

static void probe_fn(void *arg)
{
	struct probe *pr = arg;
	run_check *rc = pr->rc;
	const rf_block *k = &rc->blk[pr->i];
	const unsigned char *d = k->data;
	int ok = k->bytes == rc->b->sizes[k->index];
	for (size_t j = 0; ok && j < k->bytes; j++)
		ok = d[j] == pat(k->index, j, rc->b->salt);
	if (!ok)
		atomic_fetch_add(&rc->bad, 1);
	atomic_fetch_add(&rc->checked, 1);
}

static int compute(void *user, const rf_block *blk)
{
	run_check *rc = user;
	size_t i = blk->index;
	rc->blk[i] = *blk;
	rc->probe[i] = (struct probe){rc, i};
	return sim_launch(blk->stream, probe_fn, &rc->probe[i]) == 0 ? 0 : 1;
}

typedef struct canceller {
	rf_pipeline *p;
	unsigned delay; /* sched_yield()s before the cancel */
} canceller;

static void *cancel_main(void *arg)
{
	canceller *c = arg;
	for (unsigned i = 0; i < c->delay; i++)
		sched_yield();
	rf_pipeline_cancel(c->p);
	return NULL;
}

static unsigned long long g_canceled, g_runs, g_keyed; /* runs a cancel stopped, runs, keyed acquires */
static unsigned long long g_short, g_eio; /* hints that named the copy that shrank; runs it failed */

/* Keyed use between runs: hints and acquires of the blocks as keys (staged when pageable), each
 * acquired block checked on the legacy default stream, where a kernel would read it. */
static int keyed_steps(rf_pipeline *p, const blocks *b, unsigned depth, unsigned long long *rng, const char *what)
{
	static run_check rc;
	memset(&rc, 0, sizeof rc);
	rc.b = b;
	rf_block held[8];
	unsigned nheld = 0;
	size_t nacq = 0;
	int fails = 0;
	for (int step = 0; step < 60 && fails == 0; step++) {
		size_t i = (size_t)rnd(rng, b->n < MAXBLK ? b->n : MAXBLK);
		if (b->sizes[i] == 0)
			continue;
		unsigned op = (unsigned)rnd(rng, 4);
		int r = RF_OK;
		if (op == 0) { /* a burst of hints: a lane's file reads in flight together */
			for (size_t j = i, end = i + 1 + (size_t)rnd(rng, 4); r == RF_OK && j < end && j < b->n && j < MAXBLK; j++) {
				/* a file block's bytes now and then from the copy that shrank: past its end the
				 * hint's read fails, and the acquire that follows names the whole file */
				const void *src = b->shrunk != NULL && b->srcs[j] != b->buf[j] && rnd(rng, 3) == 0
							  ? (const void *)((const unsigned char *)rf_file_data(b->shrunk) + b->off[j])
							  : b->srcs[j];
				if (b->sizes[j] != 0 && (r = rf_pipeline_prefetch(p, j, src, b->sizes[j], 0)) == RF_ENOSPC)
					r = RF_OK;
				g_short += r == RF_OK && b->sizes[j] != 0 && src != b->srcs[j];
			}
		} else if (op < 3 && nheld + 1 < depth) {
			rf_block *k = &held[nheld];
			r = rf_pipeline_acquire(p, i, b->srcs[i], b->sizes[i], NULL, 0, k);
			if (r == RF_OK) {
				size_t a = nacq++; /* a probe of its own: the key may come back in another slot */
				rc.blk[a] = *k;
				rc.probe[a] = (struct probe){&rc, a};
				fails += sim_launch(NULL, probe_fn, &rc.probe[a]) != 0;
				nheld++;
				g_keyed++;
			}
			r = r == RF_ENOSPC ? RF_OK : r;
		} else if (nheld > 0) {
			r = rf_pipeline_release(p, &held[--nheld]);
		}
		if (r != RF_OK) {
			fprintf(stderr, "race_cuda: %s: keyed step failed: %d %s\n", what, r, rf_errmsg());
			fails++;
		}
	}
	while (nheld > 0)
		fails += rf_pipeline_release(p, &held[--nheld]) != RF_OK;
	for (size_t i = 0; i < b->n && i < MAXBLK; i++) /* the sources are freed next: no copy may read them */
		fails += rf_pipeline_evict(p, i) != RF_OK;
	if (sim_api.stream_synchronize(NULL) != 0 || atomic_load(&rc.bad) != 0) {
		fprintf(stderr, "race_cuda: %s: %zu keyed reads saw the wrong bytes\n", what, atomic_load(&rc.bad));
		fails++;
	}
	return fails;
}

/* One run; with a canceller racing it when `cancel`. Returns the number of failures seen. */
/* A run of the file blocks with one of them from the copy that shrank, past its end: RF_EIO naming that
 * file; the blocks computed before it hold their bytes, and nothing is left enqueued. */
static int one_failed_run(rf_pipeline *p, const blocks *b, unsigned long long *rng, const char *what)
{
	size_t i = (size_t)rnd(rng, b->n);
	while (i < b->n && (b->srcs[i] == b->buf[i] || b->off[i] + b->sizes[i] <= b->half))
		i++;
	if (i == b->n)
		return 0;
	const void **srcs = malloc(b->n * sizeof *srcs);
	if (srcs == NULL)
		return 1;
	memcpy(srcs, b->srcs, b->n * sizeof *srcs);
	srcs[i] = (const unsigned char *)rf_file_data(b->shrunk) + b->off[i];
	static run_check rc;
	memset(&rc, 0, sizeof rc);
	rc.b = b;
	int r = rf_pipeline_run(p, b->n, srcs, b->sizes, compute, &rc), fails = 0;
	free(srcs);
	g_eio += r == RF_EIO;
	if (r != RF_EIO || strstr(rf_errmsg(), b->spath) == NULL) {
		fprintf(stderr, "race_cuda: %s: a run with block %zu past the end: %d %s\n", what, i, r, rf_errmsg());
		fails++;
	}
	if (sim_api.stream_synchronize(NULL) != 0 || atomic_load(&rc.bad) != 0 || sim_pending() != 0) {
		fprintf(stderr, "race_cuda: %s: a failed run: %zu blocks corrupted or work left enqueued\n", what,
			atomic_load(&rc.bad));
		fails++;
	}
	return fails;
}

static int one_run(rf_pipeline *p, const blocks *b, int cancel, unsigned long long *rng, const char *what)
{
	static run_check rc;
	memset(&rc, 0, sizeof rc);
	rc.b = b;
	pthread_t th;
	canceller c = {p, (unsigned)rnd(rng, 2000)};
	if (cancel && pthread_create(&th, NULL, cancel_main, &c) != 0)
		cancel = 0;
	int r = rf_pipeline_run(p, b->n, b->srcs, b->sizes, compute, &rc);
	if (cancel) {
		pthread_join(th, NULL);
		rf_pipeline_cancel_clear(p);
	}
	int fails = 0;
	g_runs++;
	g_canceled += r == RF_ECANCELED;
	if (r != RF_OK && !(cancel && r == RF_ECANCELED)) {
		fprintf(stderr, "race_cuda: %s: run failed: %d %s\n", what, r, rf_errmsg());
		fails++;
	}
	if (r == RF_OK && atomic_load(&rc.checked) != b->n) {
		fprintf(stderr, "race_cuda: %s: %zu of %zu blocks checked\n", what, atomic_load(&rc.checked), b->n);
		fails++;
	}
	if (atomic_load(&rc.bad) != 0) {
		fprintf(stderr, "race_cuda: %s: %zu blocks corrupted\n", what, atomic_load(&rc.bad));
		fails++;
	}
	if (sim_pending() != 0) {
		fprintf(stderr, "race_cuda: %s: work left enqueued after the run\n", what);
		fails++;
	}
	return fails;
}

int main(int argc, char **argv)
{
	unsigned long long seed = 1, iters = 40;
	for (int i = 1; i + 1 < argc; i += 2) {
		if (strcmp(argv[i], "--iterations") == 0)
			iters = strtoull(argv[i + 1], NULL, 10);
		else if (strcmp(argv[i], "--seed") == 0)
			seed = strtoull(argv[i + 1], NULL, 10);
	}
	unsigned long long rng = seed;
	int fails = 0;
	for (unsigned long long it = 0; it < iters && fails == 0; it++) {
		sim_config cfg = {0};
		cfg.seed = rnd(&rng, 1ull << 40) | 1;
		cfg.step_prob = (double)rnd(&rng, 100) / 100.0;
		cfg.query_idle = (int)rnd(&rng, 2);
		cfg.device_count = 1;
		cfg.numa_node = -1;
		sim_install(&cfg);
		rf__test_hooks.cuda_copy_threads = 1 + (unsigned)rnd(&rng, 4);
		unsigned depth = 2 + (unsigned)rnd(&rng, 4), kq = depth >= 3 && rnd(&rng, 2) ? 2 : 1;
		size_t slot = rnd(&rng, 3) == 0 ? ((size_t)256 << 10) * (1 + rnd(&rng, 3)) + rnd(&rng, 4096) : 1 + rnd(&rng, 8192);
		size_t n = 20 + rnd(&rng, slot > 65536 ? 40 : 300);
		rf_pipeline_params pp = {0};
		pp.depth = depth;
		pp.copy_queues = kq;
		pp.slot_bytes = slot;
		pp.backend = "cuda";
		pp.memory = RF_MEMORY_DEVICE;
		rf_pipeline *p = NULL;
		if (rf_pipeline_create(&pp, &p) != RF_OK) {
			fprintf(stderr, "race_cuda: create depth %u K %u slot %zu: %s\n", depth, kq, slot, rf_errmsg());
			return 1;
		}
		static const int kinds[4] = {MIXED, PINNED, PAGEABLE, FILES};
		for (int r = 0; r < 4 && fails == 0; r++) {
			char what[96];
			snprintf(what, sizeof what, "iteration %llu run %d (depth %u K %u slot %zu n %zu kind %d)", it, r,
				 depth, kq, slot, n, kinds[r]);
			blocks b;
			blocks_make(&b, n, slot, kinds[r], &rng);
			int cancel = rnd(&rng, 3) == 0;
			if (b.shrunk != NULL && rnd(&rng, 2) == 0) /* then the run below must be whole */
				fails += one_failed_run(p, &b, &rng, what);
			fails += one_run(p, &b, cancel, &rng, what);
			if (cancel && fails == 0)
				fails += one_run(p, &b, 0, &rng, what); /* whole after a cancel */
			if (fails == 0)
				fails += keyed_steps(p, &b, depth, &rng, what);
			fails += blocks_free(&b);
		}
		rf_pipeline_destroy(p);
	}
	rf__test_hooks.cuda_copy_threads = 0;
	if (fails == 0)
		printf("race_cuda: %llu iterations passed (seed %llu): %llu runs, %llu stopped by a cancel, %llu keyed "
		       "acquires, %llu hints from the copy that shrank, %llu runs failed by it\n", iters, seed, g_runs,
		       g_canceled, g_keyed, g_short, g_eio);
	return fails ? 1 : 0;
}
