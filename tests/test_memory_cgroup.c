/* tests/test_memory_cgroup.c — a keyed pipeline serving from a file stays inside a memory cgroup whose
 * limit is what docs/files.md ("What a pipeline costs in memory") says it costs, plus a margin.
 *
 * The parent writes a file of NBLOCKS blocks (more than the slots), makes a memory cgroup (v1
 * memory.limit_in_bytes or v2 memory.max; as root) and forks one child per case. The child joins the
 * group, measures what the group holds before the library is used (the process itself), then sets the
 * limit to that + the documented cost of its pipeline + a margin (2 MiB), and runs a keyed loop from
 * the file on "threads" (acquire / compute / release, with and without hints; O_DIRECT reads, which
 * leave no page of the file in the page cache (mincore), and one case of buffered ones; every byte checked),
 * long enough to cycle every key through the slots several times. The parent then checks that the child
 * exited 0 (not SIGKILLed), that the group saw no OOM kill, and that its peak stayed under the limit.
 * `--report` prints what the group held at each stage instead (how docs/files.md's figures were taken);
 * `--margin MIB` replaces the 2 MiB margin (sanitizer builds: their shadow memory is charged too).
 * Exit status: 0 passed, 1 failed, 77 skipped (no memory cgroup can be made here: not root, no memory
 * controller; or the file system of the working directory refuses O_DIRECT), each said on stdout. */
#define _GNU_SOURCE
#include "cgroup.h"
#include <ringfetch.h>

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#define MIB ((size_t)1 << 20)
/* The margin over the documented cost: the process's own stacks, libc's and the loop's pages (measured
 * under 0.5 MiB). Sanitizer builds pass --margin for the shadow memory and the allocator's quarantine. */
static size_t margin = 2 * MIB;

typedef struct tcase {
	const char *name;
	unsigned slots;
	size_t slot_bytes; /* also the block size: every block fills its slot */
	unsigned hints;    /* keys hinted ahead of each acquire */
	unsigned buffered; /* RF_FILE_BUFFERED: the page cache fills the group to its limit, reclaimed */
} tcase;

static const tcase cases[] = {
	{"12 slots of 1 MiB, no hints", 12, MIB, 0, 0},
	{"12 slots of 1 MiB, 4 hints ahead", 12, MIB, 4, 0},
	{"12 slots of 1 MiB, 4 hints ahead, buffered reads", 12, MIB, 4, 1},
	{"6 slots of 2 MiB + 8 KiB, 2 hints ahead", 6, 2 * MIB + 8192, 2, 0},
};
#define NCASES (sizeof cases / sizeof cases[0])
#define NBLOCKS 40u /* keys: more than any case's slots, so the loop keeps missing */
#define ROUNDS 6u   /* passes over a shuffled order of the keys */

static rfb_cgroup memcg; /* where the groups are made, and their control files */
static int report;

/* ---- the documented cost ------------------------------------------------------------------------ */

static size_t round_up(size_t v, size_t a) { return a ? (v + a - 1) / a * a : v; }

/* docs/files.md, "What a pipeline costs in memory": the ring (slots of slot_bytes rounded up to 64
 * bytes, the whole to a page, then to whole huge pages), plus RF_FIXED_COST for the first pipeline in a
 * process (jemalloc's metadata, the hwloc topology, the threads, the readers' io_uring rings and the
 * registered ring's bookkeeping), plus, for buffered reads only, their page cache (reclaimable). */
#define RF_FIXED_COST (4 * MIB)

static size_t documented_cost(const tcase *c)
{
	size_t ring = round_up((size_t)c->slots * round_up(c->slot_bytes, 64), 4096);
	ring = round_up(ring, rfb_huge_page_bytes());
	/* Buffered reads: the page cache of the reads in flight (a miss and the hints) is locked until each
	 * read lands, and cannot be reclaimed meanwhile; the rest of the page cache can. */
	size_t in_flight = c->buffered ? (c->hints + 1) * round_up(c->slot_bytes, 4096) : 0;
	return ring + RF_FIXED_COST + in_flight;
}

/* ---- the child: a keyed loop from the file ---------------------------------------------------- */

static uint64_t word(uint64_t key, size_t i) { return key * 0x9e3779b97f4a7c15ull ^ (i * 0xff51afd7ed558ccdull); }

static int write_file(const char *path, size_t block)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	uint64_t *b = malloc(block);
	int rc = fd >= 0 && b ? 0 : -1;
	for (uint64_t k = 0; k < NBLOCKS && rc == 0; k++) {
		for (size_t i = 0; i < block / 8; i++)
			b[i] = word(k, i);
		rc = write(fd, b, block) == (ssize_t)block ? 0 : -1;
	}
	if (rc == 0)
		rc = fsync(fd);
	free(b);
	if (fd >= 0 && close(fd) != 0)
		rc = -1;
	return rc;
}

static void stage(const char *cg, const char *what, int64_t base)
{
	if (report)
		printf("    %-34s %7.2f MiB over the process (kernel memory %.2f MiB)\n", what,
		       (double)(rfb_cgroup_read(cg, memcg.usage) - base) / (double)MIB,
		       (double)rfb_cgroup_kernel(&memcg, cg) / (double)MIB);
}

#define FAIL(...) (fprintf(stderr, __VA_ARGS__), fputc('\n', stderr), 1)

/* How many pages of the file (mapped at map, len bytes) the page cache holds: mincore(2). */
static size_t cached_pages(const void *map, size_t len)
{
	size_t np = (len + 4095) / 4096, n = 0;
	unsigned char *v = malloc(np);
	if (v == NULL || mincore((void *)map, len, v) != 0) {
		free(v);
		return SIZE_MAX;
	}
	for (size_t i = 0; i < np; i++)
		n += v[i] & 1;
	free(v);
	return n;
}

static int child(const tcase *c, const char *cg, const char *path)
{
	if (rfb_cgroup_join(cg) != 0)
		return FAIL("%s/cgroup.procs: %s", cg, strerror(errno));
	/* The order of the keys, and the pages the loop itself writes, before the baseline is taken. */
	unsigned order[ROUNDS][NBLOCKS];
	uint64_t s = 0x2545f4914f6cdd1dull;
	for (unsigned r = 0; r < ROUNDS; r++) {
		for (unsigned i = 0; i < NBLOCKS; i++)
			order[r][i] = i;
		for (unsigned i = NBLOCKS; i-- > 1;) {
			s ^= s << 13, s ^= s >> 7, s ^= s << 17;
			unsigned j = (unsigned)(s % (i + 1)), t = order[r][i];
			order[r][i] = order[r][j], order[r][j] = t;
		}
	}
	int64_t base = rfb_cgroup_read(cg, memcg.usage);
	size_t limit = (size_t)base + documented_cost(c) + margin;
	char v[32];
	snprintf(v, sizeof v, "%zu", limit);
	if (!report && rfb_cgroup_write(cg, memcg.limit, v) != 0)
		return FAIL("%s/%s = %s: %s", cg, memcg.limit, v, strerror(errno));
	if (!report)
		printf("    limit %.2f MiB = %.2f (the process) + %.2f (documented cost) + %.2f (margin)\n",
		       (double)limit / (double)MIB, (double)base / (double)MIB,
		       (double)documented_cost(c) / (double)MIB, (double)margin / (double)MIB);
	fflush(stdout);

	rf_file *f = NULL;
	if (rf_file_open(path, c->buffered ? RF_FILE_BUFFERED : 0, &f) != RF_OK)
		return FAIL("rf_file_open: %s", rf_errmsg());
	stage(cg, "rf_file_open", base);
	rf_pipeline_params pp = {.depth = c->slots, .slot_bytes = c->slot_bytes, .backend = "threads"};
	rf_pipeline *pl = NULL;
	if (rf_pipeline_create(&pp, &pl) != RF_OK)
		return FAIL("rf_pipeline_create: %s", rf_errmsg());
	stage(cg, "rf_pipeline_create", base);
	const unsigned char *data = rf_file_data(f);
	size_t block = c->slot_bytes, cached0 = cached_pages(data, NBLOCKS * block);
	int rc = 0;
	for (unsigned r = 0; r < ROUNDS && rc == 0; r++) {
		for (unsigned i = 0; i < NBLOCKS && rc == 0; i++) {
			for (unsigned h = 1; h <= c->hints && i + h < NBLOCKS; h++) {
				uint64_t k = order[r][i + h];
				int e = rf_pipeline_prefetch(pl, k, data + k * block, block, 0);
				if (e != RF_OK && e != RF_ENOSPC)
					rc = FAIL("rf_pipeline_prefetch: %s", rf_errmsg());
			}
			uint64_t k = order[r][i];
			rf_block b;
			if (rc == 0 && rf_pipeline_acquire(pl, k, data + k * block, block, NULL, 0, &b) != RF_OK)
				rc = FAIL("rf_pipeline_acquire(%llu): %s", (unsigned long long)k, rf_errmsg());
			if (rc != 0)
				break;
			const uint64_t *w = b.data;
			for (size_t j = 0; j < block / 8 && rc == 0; j++)
				if (w[j] != word(k, j))
					rc = FAIL("key %llu: word %zu differs from the file", (unsigned long long)k, j);
			if (rf_pipeline_release(pl, &b) != RF_OK)
				rc = FAIL("rf_pipeline_release: %s", rf_errmsg());
		}
		if (r == 0)
			stage(cg, "after one pass over the keys", base);
	}
	rf_keyed_stats ks;
	rf_pipeline_keyed_stats(pl, &ks);
	if (rc == 0 && ks.acquires != (uint64_t)ROUNDS * NBLOCKS)
		rc = FAIL("%llu acquires, %u expected", (unsigned long long)ks.acquires, ROUNDS * NBLOCKS);
	/* Keyed copies read with O_DIRECT (io_uring or pread alike) and leave the page cache as it was; the
	 * buffered case is the control: mincore sees the pages its reads left. */
	size_t cached = cached_pages(data, NBLOCKS * block);
	if (rc == 0 && (cached == SIZE_MAX || cached0 == SIZE_MAX))
		rc = FAIL("mincore: %s", strerror(errno));
	else if (rc == 0 && !c->buffered && cached > cached0)
		rc = FAIL("the reads are not O_DIRECT: the page cache holds %zu pages of the file, %zu before the "
			  "loop (%s)", cached, cached0, rf_pipeline_describe(pl));
	else if (rc == 0 && c->buffered && cached == 0)
		rc = FAIL("buffered reads left no page of the file in the page cache: mincore sees nothing");
	stage(cg, "after the loop", base);
	rf_pipeline_destroy(pl);
	rf_file_close(f);
	if (report)
		printf("    peak %.2f MiB over the process; documented cost %.2f MiB\n",
		       (double)(rfb_cgroup_read(cg, memcg.peak) - base) / (double)MIB,
		       (double)documented_cost(c) / (double)MIB);
	return rc;
}

/* ---- the parent ---------------------------------------------------------------------------------- */

static int run_case(const tcase *c, unsigned id, const char *path)
{
	char name[64], cg[720];
	snprintf(name, sizeof name, "ringfetch-test-memory-%d-%u", (int)getpid(), id);
	if (rfb_cgroup_make(&memcg, name, cg, sizeof cg) != 0) { /* on v2, no swap: the limit is memory */
		printf("FAIL: %s: mkdir %s: %s\n", c->name, cg, strerror(errno));
		return 1;
	}
	printf("%s:\n", c->name);
	fflush(stdout);
	pid_t pid = fork();
	if (pid == 0)
		_exit(child(c, cg, path));
	int st = 0, bad = 0;
	if (pid < 0 || waitpid(pid, &st, 0) != pid) {
		printf("FAIL: %s: fork/waitpid: %s\n", c->name, strerror(errno));
		bad = 1;
	} else if (WIFSIGNALED(st)) {
		printf("FAIL: %s: the child was killed by %s%s\n", c->name, strsignal(WTERMSIG(st)),
		       WTERMSIG(st) == SIGKILL ? " (the OOM killer, most likely)" : "");
		bad = 1;
	} else if (WEXITSTATUS(st) != 0) {
		printf("FAIL: %s: the child failed (see above)\n", c->name);
		bad = 1;
	}
	int64_t peak = rfb_cgroup_read(cg, memcg.peak), limit = rfb_cgroup_read(cg, memcg.limit);
	int64_t kills = rfb_cgroup_oom_kills(&memcg, cg), hits = rfb_cgroup_limit_hits(&memcg, cg);
	if (!report && !bad) {
		if (kills > 0) {
			printf("FAIL: %s: %lld OOM kill(s) in the group\n", c->name, (long long)kills);
			bad = 1;
		} else if (peak < 0 && limit > 0 && hits >= 0) {
			/* v2 before Linux 5.19 has no memory.peak: memory.events' "max" counts the times the group
			 * reached its limit, which a group that stays under it never does. */
			if (hits > 0 && !c->buffered) {
				printf("FAIL: %s: the group reached its limit %lld times\n", c->name, (long long)hits);
				bad = 1;
			} else {
				printf("    the limit %.2f MiB reached %lld times (no memory.peak here), no OOM kill\n",
				       (double)limit / (double)MIB, (long long)hits);
			}
		} else if (peak < 0 || limit <= 0 || (peak >= limit && !c->buffered)) {
			printf("FAIL: %s: peak %lld bytes against the limit %lld\n", c->name, (long long)peak, (long long)limit);
			bad = 1;
		} else {
			printf("    peak %.2f MiB %s the limit %.2f MiB, no OOM kill\n", (double)peak / (double)MIB,
			       peak >= limit ? "at (page cache, reclaimed)" : "under", (double)limit / (double)MIB);
		}
	}
	rfb_cgroup_remove(cg);
	return bad;
}

int main(int argc, char **argv)
{
	for (int i = 1; i < argc; i++) {
		char *end = NULL;
		if (strcmp(argv[i], "--report") == 0) {
			report = 1;
		} else if (strcmp(argv[i], "--margin") == 0 && i + 1 < argc &&
			   (margin = (size_t)strtoul(argv[i + 1], &end, 10) * MIB, *end == '\0' && end != argv[i + 1])) {
			i++;
		} else {
			fprintf(stderr, "usage: %s [--report] [--margin MIB]\n", argv[0]);
			return 2;
		}
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	char why[256];
	if (rfb_cgroup_detect(&memcg, why, sizeof why) != 0) {
		printf("SKIP: %s\n", why);
		return 77;
	}
	/* In the working directory: the build tree's disk, which takes O_DIRECT (a tmpfs would not). */
	char path[64];
	snprintf(path, sizeof path, "test-memory-cgroup-%d.dat", (int)getpid());
	int fails = 0;
	for (size_t i = 0; i < NCASES && fails == 0; i++) {
		/* Every case's blocks are its slot size: one file per size. */
		if (i == 0 || cases[i].slot_bytes != cases[i - 1].slot_bytes) {
			if (write_file(path, cases[i].slot_bytes) != 0) {
				printf("FAIL: cannot write %s: %s\n", path, strerror(errno));
				unlink(path);
				return 1;
			}
			int d = open(path, O_RDONLY | O_DIRECT | O_CLOEXEC);
			if (d < 0) {
				printf("SKIP: %s: the working directory's file system refuses O_DIRECT (%s)\n", path,
				       strerror(errno));
				unlink(path);
				return 77;
			}
			posix_fadvise(d, 0, 0, POSIX_FADV_DONTNEED); /* cold: what the loop reads comes from the disk */
			close(d);
		}
		fails += run_case(&cases[i], (unsigned)i, path);
	}
	unlink(path);
	printf("%s: %zu case(s), cgroup v%d\n", fails ? "FAILED" : "passed", NCASES, memcg.version);
	return fails ? 1 : 0;
}
