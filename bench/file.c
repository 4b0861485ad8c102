/* bench/file.c — ringfetch-file-bench: stream a file from disk through a compute, cold, and compare the
 * ways of doing it in one process, alternating (docs/files.md):
 *
 *   mmap       map the file and compute straight from the mapping (page faults and readahead fetch it:
 *              how llama.cpp reads weights);
 *   pread      buffered pread of each block into one buffer, then compute;
 *   hand/QD    a hand-written io_uring loop: O_DIRECT reads of whole blocks into QD registered buffers,
 *              QD reads in flight, computed in order, each buffer read again as soon as it is computed;
 *   reader/D   the library's file reader (io/reader.h) driven by a loop of D slots on one thread: what
 *              a copy lane does, without the pipeline around it;
 *   ringfetch/D  rf_file_open + rf_pipeline_run on "threads" at depth D, sources inside the mapping;
 *   rf-auto    the same with depth = auto, a fresh pipeline per pass: its first run is what is timed;
 *   fio/QD     fio's own sequential O_DIRECT io_uring read at that block size and depth (a subprocess,
 *              when fio is installed): the device's figure, printed beside.
 *
 * The compute is the benchmark's `sum` (bench/workload.c: every float of the block, checked against the
 * sum computed when the file was written). Each contestant runs again without it ("read alone"). The
 * file is dropped from the page cache (POSIX_FADV_DONTNEED, every mapping of it gone first) before every
 * pass, and checked cold with mincore. Reported: medians of GB/s, CPU seconds per GB (getrusage of the
 * whole process: its threads and io_uring's workers), and the overlap: how much of the shorter of (read
 * alone, compute alone) the pass hid, 1 = all of it.
 * Exit status: 0, 1 (a pass failed or a check failed), 2 (bad options). */
#define _GNU_SOURCE
#include "io/reader.h"
#include "machine.h"
#include "options.h"
#include "workload.h"

#include <ringfetch.h>

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#ifdef RF_HAVE_LIBURING
#include <liburing.h>
#endif

#define MAXL RFB_MAX_LIST
#define MAXQ 8u                            /* QDs, depths: at most 8 each */
#define MAXARMS (2 * (3 + 3 * MAXQ) + MAXQ) /* contestants per block size */

typedef struct fopts {
	const char *path;
	size_t file_size;
	size_t sizes[MAXL];
	unsigned nsizes;
	unsigned depths[MAXL], ndepths;
	unsigned qds[MAXL], nqds;
	unsigned reps;
	int fio, keep, quiet;
	const char *json;
} fopts;

enum { K_MMAP, K_PREAD, K_HAND, K_READER, K_RF, K_AUTO, K_FIO, K_COMPUTE, NKINDS };
static const char *const kind_name[NKINDS] = {"mmap", "pread", "hand", "reader", "ringfetch", "rf-auto", "fio", "compute"};

/* One contestant at one block size: its passes. */
typedef struct arm {
	int kind, compute;
	unsigned param; /* QD or depth */
	double gbs[64], cpu[64], resident[64];
	unsigned n;
} arm;

typedef struct ctx {
	const fopts *o;
	int fd;                /* buffered, for pread and the drop */
	int dfd;               /* O_DIRECT */
	float *expect[MAXL];   /* per size: each block's sum */
	size_t size, nblocks;  /* the block size being measured */
	unsigned si;
	rfb_work w;            /* srcs point into the current mapping */
	double compute_s[64];  /* compute alone over a resident block, per rep */
	char rf_describe[1024];
	char auto_describe[MAXL][1024]; /* per size: what depth = auto chose in its first pass */
	char reader_describe[512];
	char fio_why[160];
	char hand_why[160]; /* why the hand loop did not run (io_uring refused): its figures are left out */
} ctx;

/* ---- options ---------------------------------------------------------------------------------------- */

static const char usage[] =
	"usage: ringfetch-file-bench [options]\n"
	"  --file PATH       the file to stream (written, then removed; default ./ringfetch-file-bench.dat)\n"
	"  --file-size S     its size (default 1G)\n"
	"  --size LIST       block sizes (default 64K,256K,1M,4M)\n"
	"  --depth LIST      ring depths of ringfetch and the reader loop, at most 8 (default 2,4)\n"
	"  --qd LIST         reads in flight of the hand io_uring loop and fio, at most 8 (default 4,8,16,32)\n"
	"  --reps R          alternating repetitions, medians reported (default 3)\n"
	"  --no-fio          do not run fio\n"
	"  --keep            keep the file\n"
	"  --json FILE       results as JSON\n"
	"  --quiet           no progress on stderr\n";

static int parse_list(const char *s, unsigned *out, unsigned *n, unsigned lo, unsigned hi)
{
	char buf[256];
	snprintf(buf, sizeof buf, "%s", s);
	*n = 0;
	for (char *save, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
		unsigned long long v;
		if (*n == MAXL || rfb_parse_count(t, lo, hi, &v) != 0)
			return -1;
		out[(*n)++] = (unsigned)v;
	}
	return *n ? 0 : -1;
}

static int parse(int argc, char **argv, fopts *o)
{
	*o = (fopts){.path = "ringfetch-file-bench.dat", .file_size = (size_t)1 << 30, .sizes = {65536, 262144, 1 << 20, 4 << 20},
		     .nsizes = 4, .depths = {2, 4}, .ndepths = 2, .qds = {4, 8, 16, 32}, .nqds = 4, .reps = 3, .fio = 1};
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		unsigned long long x;
		if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
			fputs(usage, stdout);
			exit(0);
		} else if (!strcmp(a, "--no-fio")) {
			o->fio = 0;
		} else if (!strcmp(a, "--keep")) {
			o->keep = 1;
		} else if (!strcmp(a, "--quiet")) {
			o->quiet = 1;
		} else if (v == NULL) {
			fprintf(stderr, "ringfetch-file-bench: %s: unknown option or missing value\n%s", a, usage);
			return 2;
		} else if (!strcmp(a, "--file")) {
			o->path = v, i++;
		} else if (!strcmp(a, "--json")) {
			o->json = v, i++;
		} else if (!strcmp(a, "--file-size")) {
			if ((o->file_size = rfb_parse_size(v)) < ((size_t)16 << 20))
				goto bad;
			i++;
		} else if (!strcmp(a, "--size")) {
			char buf[256];
			snprintf(buf, sizeof buf, "%s", v);
			o->nsizes = 0;
			for (char *save, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
				size_t s = rfb_parse_size(t);
				if (o->nsizes == MAXL || s < 4096 || s % 4096 || s > ((size_t)64 << 20))
					goto bad;
				o->sizes[o->nsizes++] = s;
			}
			i++;
		} else if (!strcmp(a, "--depth")) {
			if (parse_list(v, o->depths, &o->ndepths, 1, 64) != 0 || o->ndepths > MAXQ)
				goto bad;
			i++;
		} else if (!strcmp(a, "--qd")) {
			if (parse_list(v, o->qds, &o->nqds, 1, 256) != 0 || o->nqds > MAXQ)
				goto bad;
			i++;
		} else if (!strcmp(a, "--reps")) {
			if (rfb_parse_count(v, 1, 64, &x) != 0)
				goto bad;
			o->reps = (unsigned)x, i++;
		} else {
			fprintf(stderr, "ringfetch-file-bench: unknown option %s\n%s", a, usage);
			return 2;
		}
		continue;
	bad:
		fprintf(stderr, "ringfetch-file-bench: %s: bad value \"%s\"\n", a, v);
		return 2;
	}
	for (unsigned i = 0; i < o->nsizes; i++)
		if (o->file_size / o->sizes[i] < 8) {
			fprintf(stderr, "ringfetch-file-bench: --file-size must hold at least 8 blocks of each size\n");
			return 2;
		}
	return 0;
}

/* ---- the file ---------------------------------------------------------------------------------------- */

/* The float sum the compute takes (bench/workload.c's, reached through rfb_compute). */
static float block_sum(const void *p, size_t bytes)
{
	rfb_work w = {.n = 1, .size = bytes, .nsrc = 1, .model = RFB_SUM};
	float e = 0;
	w.expect = &e;
	rfb_sink k = {&w, 0, 0, 1};
	rf_block b = {0, 0, p, bytes, NULL};
	rfb_compute(&k, &b);
	return (float)k.total;
}

/* A contestant's buffer: staging memory, as ringfetch's ring is, rounded up to whole 2 MiB pages as the
 * ring is (memory/staging.c: a block of a huge page or more is a fresh mapping on huge pages). Not
 * malloc's: memory it hands back may already be faulted in as 4 KiB pages, and an O_DIRECT read's
 * segments are its physically contiguous runs, which on a virtio disk decide its speed, so a loop on
 * 4 KiB pages would be measured against one on huge pages. */
static void *bench_buffer(size_t n)
{
	size_t huge = (size_t)2 << 20;
	void *p = NULL;
	return rf_staging_alloc((n + huge - 1) / huge * huge, "auto", &p) == RF_OK ? p : NULL;
}

/* Write the file in 4 MiB chunks of distinct floats, and every block's expected sum for every size. */
static int write_file(ctx *c)
{
	const fopts *o = c->o;
	size_t chunk = (size_t)4 << 20, fsize = o->file_size / chunk * chunk;
	for (unsigned s = 0; s < o->nsizes; s++)
		if (chunk % o->sizes[s] != 0)
			chunk = o->sizes[s] > chunk ? o->sizes[s] : chunk; /* sizes above 4 MiB: chunks of that */
	fsize = o->file_size / chunk * chunk;
	int fd = open(o->path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	float *buf = aligned_alloc(4096, chunk);
	if (fd < 0 || buf == NULL) {
		fprintf(stderr, "%s: %s\n", o->path, strerror(errno));
		return -1;
	}
	for (unsigned s = 0; s < o->nsizes; s++)
		if ((c->expect[s] = malloc(fsize / o->sizes[s] * sizeof(float))) == NULL)
			return -1;
	for (size_t off = 0; off < fsize; off += chunk) {
		for (size_t i = 0; i < chunk / sizeof(float); i++)
			buf[i] = (float)(((off / sizeof(float) + i) * 2654435761u >> 7) % 1000) * 0.25f;
		for (unsigned s = 0; s < o->nsizes; s++)
			for (size_t b = 0; b < chunk / o->sizes[s]; b++)
				c->expect[s][off / o->sizes[s] + b] = block_sum((char *)buf + b * o->sizes[s], o->sizes[s]);
		if (write(fd, buf, chunk) != (ssize_t)chunk) {
			fprintf(stderr, "%s: write: %s\n", o->path, strerror(errno));
			return -1;
		}
	}
	free(buf);
	if (fdatasync(fd) != 0 || close(fd) != 0)
		return -1;
	((fopts *)o)->file_size = fsize;
	return 0;
}

/* Drop the file's pages (nothing maps it now) and say how much of it is still cached (0..1). */
static double drop_cache(ctx *c)
{
	posix_fadvise(c->fd, 0, 0, POSIX_FADV_DONTNEED);
	size_t len = c->o->file_size, np = (len + 4095) / 4096, n = 0;
	void *m = mmap(NULL, len, PROT_READ, MAP_SHARED, c->fd, 0);
	unsigned char *v = malloc(np);
	if (m == MAP_FAILED || v == NULL || mincore(m, len, v) != 0) {
		free(v);
		if (m != MAP_FAILED)
			munmap(m, len);
		return NAN;
	}
	for (size_t i = 0; i < np; i++)
		n += v[i] & 1;
	free(v);
	munmap(m, len);
	return (double)n / (double)np;
}

/* ---- the contestants ---------------------------------------------------------------------------------- */

/* The workload's view of the file: block i at base + i * size, expected sums of this size. */
static void point_work(ctx *c, const unsigned char *base)
{
	for (size_t i = 0; i < c->nblocks; i++) {
		c->w.srcs[i] = base + i * c->size;
		c->w.sizes[i] = c->size;
	}
}

static int sink_compute(rfb_sink *k, int compute, size_t i, const void *data, size_t bytes)
{
	if (!compute)
		return 0;
	rf_block b = {i, 0, data, bytes, NULL};
	return rfb_compute(k, &b);
}

static int run_mmap(ctx *c, int compute, unsigned param, rfb_sink *k)
{
	(void)param;
	size_t len = c->o->file_size;
	unsigned char *m = mmap(NULL, len, PROT_READ, MAP_SHARED, c->fd, 0);
	if (m == MAP_FAILED)
		return -1;
	volatile unsigned char touch = 0;
	for (size_t i = 0; i < c->nblocks; i++) {
		if (compute)
			sink_compute(k, 1, i, m + i * c->size, c->size);
		else /* read alone: fault every page in */
			for (size_t p = 0; p < c->size; p += 4096)
				touch ^= m[i * c->size + p];
	}
	(void)touch;
	munmap(m, len);
	return 0;
}

static int run_pread(ctx *c, int compute, unsigned param, rfb_sink *k)
{
	(void)param;
	unsigned char *buf = bench_buffer(c->size);
	int rc = buf ? 0 : -1;
	for (size_t i = 0; i < c->nblocks && rc == 0; i++) {
		size_t got = 0;
		while (got < c->size) {
			ssize_t n = pread(c->fd, buf + got, c->size - got, (off_t)(i * c->size + got));
			if (n <= 0) {
				rc = -1;
				break;
			}
			got += (size_t)n;
		}
		if (rc == 0)
			sink_compute(k, compute, i, buf, c->size);
	}
	rf_staging_free(buf);
	return rc;
}

#ifdef RF_HAVE_LIBURING
/* The hand loop: qd buffers registered, qd O_DIRECT reads of whole blocks in flight; block i is
 * computed once its read is back, then its buffer is read again for block i + qd. */
static int run_hand(ctx *c, int compute, unsigned qd, rfb_sink *k)
{
	size_t n = c->nblocks, sz = c->size;
	qd = qd > n ? (unsigned)n : qd;
	struct io_uring ring;
	int e = io_uring_queue_init(qd < 4 ? 4 : qd, &ring, 0);
	if (e != 0) { /* a seccomp profile, io_uring_disabled, an old kernel: no hand loop to compare with */
		snprintf(c->hand_why, sizeof c->hand_why, "io_uring_queue_init: %s", strerror(-e));
		return -1;
	}
	unsigned char *buf = bench_buffer((size_t)qd * sz);
	struct iovec *iov = calloc(qd, sizeof *iov);
	unsigned char *ready = calloc(qd, 1);
	int rc = buf && iov && ready ? 0 : -1;
	for (unsigned i = 0; i < qd && rc == 0; i++)
		iov[i] = (struct iovec){buf + (size_t)i * sz, sz};
	int fixed = rc == 0 && io_uring_register_buffers(&ring, iov, qd) == 0;
	for (size_t b = 0; b < qd && rc == 0; b++) {
		struct io_uring_sqe *sqe = io_uring_get_sqe(&ring);
		if (fixed)
			io_uring_prep_read_fixed(sqe, c->dfd, iov[b].iov_base, (unsigned)sz, b * sz, (int)b);
		else
			io_uring_prep_read(sqe, c->dfd, iov[b].iov_base, (unsigned)sz, b * sz);
		io_uring_sqe_set_data64(sqe, b);
	}
	if (rc == 0)
		io_uring_submit(&ring);
	for (size_t i = 0; i < n && rc == 0; i++) {
		unsigned s = (unsigned)(i % qd);
		while (!ready[s]) {
			struct io_uring_cqe *cqe;
			if (io_uring_wait_cqe(&ring, &cqe) != 0 || cqe->res != (int)sz) {
				rc = -1;
				break;
			}
			ready[io_uring_cqe_get_data64(cqe) % qd] = 1;
			io_uring_cqe_seen(&ring, cqe);
		}
		if (rc != 0)
			break;
		sink_compute(k, compute, i, iov[s].iov_base, sz);
		ready[s] = 0;
		if (i + qd < n) {
			struct io_uring_sqe *sqe = io_uring_get_sqe(&ring);
			uint64_t b = i + qd;
			if (fixed)
				io_uring_prep_read_fixed(sqe, c->dfd, iov[s].iov_base, (unsigned)sz, b * sz, (int)s);
			else
				io_uring_prep_read(sqe, c->dfd, iov[s].iov_base, (unsigned)sz, b * sz);
			io_uring_sqe_set_data64(sqe, b);
			io_uring_submit(&ring);
		}
	}
	io_uring_queue_exit(&ring); /* on failure: only after the reads in flight are cancelled */
	rf_staging_free(buf);
	free(iov);
	free(ready);
	return rc;
}
#endif

/* The reader under a D-slot loop on one thread: blocks 0..D-1 started, then block i computed once its
 * copy is back and block i + D started into its slot. */
static int run_reader(ctx *c, int compute, unsigned depth, rfb_sink *k)
{
	size_t n = c->nblocks, sz = c->size;
	rf_file *f = NULL;
	rf__reader *r = NULL;
	unsigned char *slots = bench_buffer((size_t)depth * sz);
	size_t *shift = calloc(depth, sizeof *shift);
	unsigned char *ready = calloc(depth, 1);
	int rc = slots && shift && ready && rf_file_open(c->o->path, 0, &f) == RF_OK &&
			 rf__reader_create(depth, -1, &r) == RF_OK ? 0 : -1;
	if (rc == 0)
		rf__reader_register(r, slots, (size_t)depth * sz);
	for (size_t b = 0; b < depth && b < n && rc == 0; b++) {
		rf__fsrc s = {f, b * sz};
		rc = rf__reader_start(r, &s, sz, slots + b * sz, sz, 0, b) == RF_OK ? 0 : -1;
	}
	for (size_t i = 0; i < n && rc == 0; i++) {
		unsigned s = (unsigned)(i % depth);
		while (!ready[s] && rc == 0) {
			uint64_t tag;
			int crc;
			size_t sh;
			if (rf__reader_poll(r, &tag, &crc, &sh) == 0) {
				rf__reader_wait(r);
				continue;
			}
			if (crc != RF_OK) {
				fprintf(stderr, "\nreader: %s\n", rf__reader_error(r));
				rc = -1;
			}
			ready[tag % depth] = 1;
			shift[tag % depth] = sh;
		}
		if (rc != 0)
			break;
		sink_compute(k, compute, i, slots + (size_t)s * sz + shift[s], sz);
		ready[s] = 0;
		if (i + depth < n) {
			rf__fsrc src = {f, (i + depth) * sz};
			rc = rf__reader_start(r, &src, sz, slots + (size_t)s * sz, sz, 0, i + depth) == RF_OK ? 0 : -1;
		}
	}
	if (r != NULL && c->reader_describe[0] == '\0')
		rf__reader_describe(r, c->reader_describe, sizeof c->reader_describe);
	rf__reader_destroy(r);
	rf_file_close(f);
	rf_staging_free(slots);
	free(shift);
	free(ready);
	return rc;
}

static int nocompute(void *user, const rf_block *b)
{
	(void)user, (void)b;
	return 0;
}

/* One pass of ringfetch through the public API only: the file opened for the pass (closing it unmaps, so
 * that the next drop can empty the cache), a pipeline made with pp, one run over every block; the first
 * describe line kept in desc (when desc is not NULL and still empty). */
static int rf_pass(ctx *c, const rf_pipeline_params *pp, int compute, rfb_sink *k, const char *who, char *desc,
		   size_t cap)
{
	rf_file *f = NULL;
	rf_pipeline *p = NULL;
	int rc = rf_file_open(c->o->path, 0, &f);
	if (rc == RF_OK)
		rc = rf_pipeline_create(pp, &p);
	if (rc == RF_OK) {
		point_work(c, rf_file_data(f));
		rc = rf_pipeline_run(p, c->nblocks, c->w.srcs, c->w.sizes, compute ? rfb_compute : nocompute, k);
	}
	if (rc != RF_OK)
		fprintf(stderr, "\n%s: %s: %s\n", who, rf_strerror(rc), rf_errmsg());
	if (p != NULL && desc != NULL && desc[0] == '\0')
		snprintf(desc, cap, "%s", rf_pipeline_describe(p));
	rf_pipeline_destroy(p);
	rf_file_close(f);
	return rc == RF_OK ? 0 : -1;
}

static int run_rf(ctx *c, int compute, unsigned depth, rfb_sink *k)
{
	rf_pipeline_params pp = {.depth = depth, .slot_bytes = c->size, .backend = "threads"};
	return rf_pass(c, &pp, compute, k, "ringfetch", c->rf_describe, sizeof c->rf_describe);
}

/* ringfetch with depth = auto: a fresh pipeline per pass, so that what is timed is its first run (the
 * one a user's first pass over a model gets). */
static int run_auto(ctx *c, int compute, unsigned unused, rfb_sink *k)
{
	(void)unused;
	rf_pipeline_params pp = {.depth_auto = RF_DEPTH_AUTO, .slot_bytes = c->size, .backend = "threads"};
	return rf_pass(c, &pp, compute, k, "ringfetch depth = auto", compute ? c->auto_describe[c->si] : NULL,
		       sizeof c->auto_describe[c->si]);
}

/* fio's sequential O_DIRECT io_uring read of the whole file: bytes per second, or NAN (why in fio_why). */
static double run_fio(ctx *c, unsigned qd)
{
	char cmd[1024], line[512];
	snprintf(cmd, sizeof cmd,
		 "fio --name=rf --filename='%s' --readonly --rw=read --bs=%zu --iodepth=%u --ioengine=io_uring "
		 "--direct=1 --size=%zu --numjobs=1 --output-format=json 2>&1",
		 c->o->path, c->size, qd, c->o->file_size);
	FILE *p = popen(cmd, "r");
	double bw = NAN;
	int in_read = 0;
	if (p == NULL) {
		snprintf(c->fio_why, sizeof c->fio_why, "popen: %s", strerror(errno));
		return NAN;
	}
	while (fgets(line, sizeof line, p)) {
		if (strstr(line, "\"read\" :") != NULL)
			in_read = 1;
		char *b = strstr(line, "\"bw_bytes\" :");
		if (in_read && b != NULL && isnan(bw))
			bw = strtod(b + 12, NULL);
	}
	int st = pclose(p);
	if (st != 0 || isnan(bw)) {
		snprintf(c->fio_why, sizeof c->fio_why, "fio failed (status %d)", st);
		return NAN;
	}
	return bw;
}

/* ---- the driver --------------------------------------------------------------------------------------- */

static double cpu_now(void)
{
	struct rusage u;
	getrusage(RUSAGE_SELF, &u);
	return (double)u.ru_utime.tv_sec + (double)u.ru_utime.tv_usec * 1e-6 + (double)u.ru_stime.tv_sec +
	       (double)u.ru_stime.tv_usec * 1e-6;
}

typedef int (*pass_fn)(ctx *c, int compute, unsigned param, rfb_sink *k);

static pass_fn fn_of(int kind)
{
	switch (kind) {
	case K_MMAP:
		return run_mmap;
	case K_PREAD:
		return run_pread;
#ifdef RF_HAVE_LIBURING
	case K_HAND:
		return run_hand;
#endif
	case K_READER:
		return run_reader;
	case K_RF:
		return run_rf;
	case K_AUTO:
		return run_auto;
	default:
		return NULL;
	}
}

static int one_pass(ctx *c, arm *a)
{
	double resident = drop_cache(c);
	if (a->kind == K_FIO) {
		double bw = run_fio(c, a->param);
		if (isnan(bw))
			return -1;
		a->gbs[a->n] = bw / 1e9, a->cpu[a->n] = NAN, a->resident[a->n++] = resident;
		return 0;
	}
	rfb_sink k = {&c->w, 0, 0, 0};
	double t0 = rfb_now(), u0 = cpu_now();
	int rc = fn_of(a->kind)(c, a->compute, a->param, &k);
	double t = rfb_now() - t0, u = cpu_now() - u0;
	if (rc != 0 && a->kind == K_HAND && c->hand_why[0] != '\0')
		return -1; /* said by the caller */
	if (rc != 0 || k.bad != 0) {
		fprintf(stderr, "\n%s/%u%s: %s (%zu wrong blocks)\n", kind_name[a->kind], a->param,
			a->compute ? "" : " read alone", rc ? "failed" : "payload check failed", k.bad);
		return -1;
	}
	double gb = (double)c->nblocks * (double)c->size / 1e9;
	a->gbs[a->n] = gb / t, a->cpu[a->n] = u / gb, a->resident[a->n++] = resident;
	return 0;
}

/* The compute alone, over one resident block: seconds for the whole file. */
static double compute_alone(ctx *c)
{
	unsigned char *buf = bench_buffer(c->size);
	if (pread(c->fd, buf, c->size, 0) != (ssize_t)c->size) {
		rf_staging_free(buf);
		return NAN;
	}
	rfb_sink k = {&c->w, 0, 0, 1};
	double t0 = rfb_now();
	for (size_t i = 0; i < c->nblocks; i++) {
		rf_block b = {i, 0, buf, c->size, NULL};
		rfb_compute(&k, &b);
	}
	double t = rfb_now() - t0;
	rf_staging_free(buf);
	return t;
}

static double med(const double *v, unsigned n)
{
	double s[64];
	memcpy(s, v, n * sizeof *s);
	return rfb_median(s, n);
}

typedef struct result {
	size_t size;
	int kind, compute;
	unsigned param;
	double gbs, cpu_gb, overlap, resident;
} result;

static int bench_size(ctx *c, unsigned si, result *res, size_t *nres, FILE *progress)
{
	const fopts *o = c->o;
	c->si = si;
	c->size = o->sizes[si];
	c->nblocks = o->file_size / c->size;
	c->w = (rfb_work){.n = c->nblocks, .size = c->size, .nsrc = 1, .model = RFB_SUM, .expect = c->expect[si]};
	c->w.srcs = malloc(c->nblocks * sizeof(void *));
	c->w.sizes = malloc(c->nblocks * sizeof(size_t));
	c->w.compute_ns = calloc(c->nblocks, sizeof(double));
	arm arms[MAXARMS];
	unsigned na = 0;
	for (int comp = 1; comp >= 0; comp--) {
		arms[na++] = (arm){K_MMAP, comp, 0, {0}, {0}, {0}, 0};
		arms[na++] = (arm){K_PREAD, comp, 0, {0}, {0}, {0}, 0};
#ifdef RF_HAVE_LIBURING
		for (unsigned q = 0; q < o->nqds; q++)
			arms[na++] = (arm){K_HAND, comp, o->qds[q], {0}, {0}, {0}, 0};
#endif
		for (unsigned d = 0; d < o->ndepths; d++) {
			arms[na++] = (arm){K_READER, comp, o->depths[d], {0}, {0}, {0}, 0};
			arms[na++] = (arm){K_RF, comp, o->depths[d], {0}, {0}, {0}, 0};
		}
		arms[na++] = (arm){K_AUTO, comp, 0, {0}, {0}, {0}, 0};
	}
	if (o->fio)
		for (unsigned q = 0; q < o->nqds; q++)
			arms[na++] = (arm){K_FIO, 0, o->qds[q], {0}, {0}, {0}, 0};
	int rc = 0;
	for (unsigned r = 0; r < o->reps && rc == 0; r++) {
		c->compute_s[r] = compute_alone(c);
		for (unsigned j = 0; j < na && rc == 0; j++) {
			arm *a = &arms[(j + r * 3) % na]; /* each repetition starts elsewhere */
			if (progress)
				fprintf(progress, "\r[size %zu K, rep %u/%u, %u/%u] %-10s   ", c->size >> 10, r + 1, o->reps, j + 1,
					na, kind_name[a->kind]), fflush(progress);
			c->hand_why[0] = '\0';
			rc = one_pass(c, a);
			if (rc != 0 && a->kind == K_FIO) { /* fio failing is no reason to stop */
				fprintf(stderr, "\nfio: %s: its figures are left out\n", c->fio_why);
				a->kind = -1, rc = 0;
			} else if (rc != 0 && a->kind == K_HAND && c->hand_why[0] != '\0') { /* nor io_uring refused */
				fprintf(stderr, "\nhand/%u: %s: its figures are left out\n", a->param, c->hand_why);
				a->kind = -1, rc = 0;
			}
		}
	}
	double tread = INFINITY; /* the fastest read alone of the whole file, any contestant but fio */
	for (unsigned j = 0; j < na && rc == 0; j++)
		if (arms[j].kind >= 0 && arms[j].kind != K_FIO && !arms[j].compute)
			tread = fmin(tread, (double)c->nblocks * (double)c->size / 1e9 / med(arms[j].gbs, arms[j].n));
	double tcomp = med(c->compute_s, o->reps);
	res[(*nres)++] = (result){c->size, K_COMPUTE, 1, 0, (double)c->nblocks * (double)c->size / 1e9 / tcomp, NAN, NAN, NAN};
	for (unsigned j = 0; j < na && rc == 0; j++) {
		arm *a = &arms[j];
		if (a->kind < 0)
			continue;
		double g = med(a->gbs, a->n), t = (double)c->nblocks * (double)c->size / 1e9 / g;
		double ov = a->compute ? (tread + tcomp - t) / fmin(tread, tcomp) : NAN;
		res[(*nres)++] = (result){c->size, a->kind, a->compute, a->param, g, a->kind == K_FIO ? NAN : med(a->cpu, a->n),
					  ov < 0 ? 0 : ov > 1 ? 1 : ov, med(a->resident, a->n)};
	}
	free(c->w.srcs);
	free(c->w.sizes);
	free(c->w.compute_ns);
	return rc;
}

static double find(const result *r, size_t n, size_t size, int kind, int compute, unsigned param, int best)
{
	double v = NAN;
	for (size_t i = 0; i < n; i++)
		if (r[i].size == size && r[i].kind == kind && r[i].compute == compute && (best || r[i].param == param))
			v = isnan(v) || r[i].gbs > v ? r[i].gbs : v;
	return v;
}

static double find_cpu(const result *r, size_t n, size_t size, int kind, int compute, unsigned param)
{
	for (size_t i = 0; i < n; i++)
		if (r[i].size == size && r[i].kind == kind && r[i].compute == compute && r[i].param == param)
			return r[i].cpu_gb;
	return NAN;
}

/* A ratio as printed: "-" where a side did not run (no hand loop without liburing, no fio). */
static const char *ratio(char *buf, double v)
{
	if (!isfinite(v) || v <= 0)
		return "-";
	snprintf(buf, 16, "%.2fx", v);
	return buf;
}

static void report(const ctx *c, const result *r, size_t n)
{
	const fopts *o = c->o;
	printf("ringfetch-file-bench %s: %zu MiB file, cold before every pass; %u alternating rep(s), medians\n",
	       rf_version_string(), o->file_size >> 20, o->reps);
	printf("ringfetch on threads: %s\nreader loop: %s\n", c->rf_describe, c->reader_describe);
	printf("%8s  %-10s %5s %8s %8s %9s %8s %9s\n", "block", "method", "qd/d", "compute", "GB/s", "CPU s/GB", "overlap",
	       "cached");
	for (size_t i = 0; i < n; i++) {
		char p[16] = "-";
		if (r[i].kind == K_HAND || r[i].kind == K_FIO || r[i].kind == K_READER || r[i].kind == K_RF)
			snprintf(p, sizeof p, "%u", r[i].param);
		if (r[i].kind == K_AUTO)
			snprintf(p, sizeof p, "auto");
		if (r[i].kind == K_COMPUTE) /* the compute alone, over a block in cache */
			printf("%7zuK  %-10s %5s %8s %8.3f %9s %8s %9s\n", r[i].size >> 10, "compute", "-", "alone", r[i].gbs,
			       "-", "-", "-");
		else
			printf("%7zuK  %-10s %5s %8s %8.3f %9.3f %8.2f %8.1f%%\n", r[i].size >> 10, kind_name[r[i].kind], p,
			       r[i].compute ? "sum" : "none", r[i].gbs, r[i].cpu_gb, r[i].overlap, r[i].resident * 100);
	}
	printf("\nratios, with the compute (hand = its best QD; not ours = the best of hand, pread and mmap):\n");
	for (unsigned s = 0; s < o->nsizes; s++) {
		size_t z = o->sizes[s];
		double hand = find(r, n, z, K_HAND, 1, 0, 1), fio = find(r, n, z, K_FIO, 0, 0, 1);
		double mm = find(r, n, z, K_MMAP, 1, 0, 1), pr = find(r, n, z, K_PREAD, 1, 0, 1);
		double best = fmax(fmax(isnan(hand) ? 0 : hand, pr), mm);
		double hcpu = INFINITY;
		for (size_t i = 0; i < n; i++)
			if (r[i].size == z && r[i].kind == K_HAND && r[i].compute && r[i].gbs == hand)
				hcpu = r[i].cpu_gb;
		static const struct { int kind; unsigned param; const char *name; } who[] = {
			{K_READER, 2, "reader d2"}, {K_RF, 2, "ringfetch d2"}, {K_AUTO, 0, "depth auto"}};
		for (unsigned k = 0; k < sizeof who / sizeof who[0]; k++) {
			double x = find(r, n, z, who[k].kind, 1, who[k].param, 0);
			double xa = find(r, n, z, who[k].kind, 0, who[k].param, 0);
			if (isnan(x))
				continue;
			char b[7][16];
			printf("%7zuK  %-12s  vs pread %s  vs not ours %s  vs hand %s  vs mmap %s  vs fio %s  "
			       "read alone vs fio %s  CPU/GB vs hand %s\n",
			       z >> 10, who[k].name, ratio(b[0], x / pr), ratio(b[1], x / best), ratio(b[2], x / hand),
			       ratio(b[3], x / mm), ratio(b[4], x / fio), ratio(b[5], xa / fio),
			       ratio(b[6], find_cpu(r, n, z, who[k].kind, 1, who[k].param) / hcpu));
		}
	}
	for (unsigned s = 0; s < o->nsizes; s++)
		if (c->auto_describe[s][0] != '\0')
			printf("depth = auto at %zuK, after its first run: %s\n", o->sizes[s] >> 10, c->auto_describe[s]);
}

static const char *num(char *buf, double v)
{
	if (isnan(v))
		return "null";
	snprintf(buf, 32, "%.4f", v);
	return buf;
}

static int write_json(const ctx *c, const result *r, size_t n)
{
	FILE *f = fopen(c->o->json, "w");
	if (f == NULL)
		return -1;
	char machine[512], b1[32], b2[32], b3[32];
	rfb_machine_json(machine, sizeof machine, "");
	fprintf(f, "{\"machine\": %s, \"file_mib\": %zu, \"reps\": %u,\n \"ringfetch\": \"%s\",\n \"reader\": \"%s\",\n "
		   "\"results\": [\n",
		machine, c->o->file_size >> 20, c->o->reps, c->rf_describe, c->reader_describe);
	for (size_t i = 0; i < n; i++)
		fprintf(f,
			"  {\"size\": %zu, \"method\": \"%s\", \"param\": %u, \"compute\": %s, \"gbs\": %.4f, "
			"\"cpu_s_per_gb\": %s, \"overlap\": %s, \"cached_fraction\": %s}%s\n",
			r[i].size, kind_name[r[i].kind], r[i].param, r[i].compute ? "true" : "false", r[i].gbs,
			num(b1, r[i].cpu_gb), num(b2, r[i].overlap), num(b3, r[i].resident), i + 1 < n ? "," : "");
	fprintf(f, "]}\n");
	return fclose(f);
}

int main(int argc, char **argv)
{
	fopts o;
	int prc = parse(argc, argv, &o);
	if (prc != 0)
		return prc;
	if (o.fio && system("fio --version >/dev/null 2>&1") != 0) {
		fprintf(stderr, "fio is not installed: its figures are left out (Debian: apt-get install fio)\n");
		o.fio = 0;
	}
	ctx c = {.o = &o, .fd = -1, .dfd = -1};
	if (write_file(&c) != 0)
		return 1;
	c.fd = open(o.path, O_RDONLY | O_CLOEXEC);
	c.dfd = open(o.path, O_RDONLY | O_CLOEXEC | O_DIRECT);
	if (c.fd < 0 || c.dfd < 0) {
		fprintf(stderr, "%s: %s (O_DIRECT needs a disk file system, not a tmpfs)\n", o.path, strerror(errno));
		return 1;
	}
	size_t cap = (size_t)o.nsizes * (MAXARMS + 1), nres = 0;
	result *res = calloc(cap, sizeof *res);
	int rc = 0;
	FILE *progress = o.quiet ? NULL : stderr;
	for (unsigned s = 0; s < o.nsizes && rc == 0; s++)
		rc = bench_size(&c, s, res, &nres, progress);
	if (progress)
		fprintf(progress, "\r%70s\r", "");
	if (rc == 0) {
		report(&c, res, nres);
		if (o.json && write_json(&c, res, nres) != 0)
			fprintf(stderr, "cannot write %s\n", o.json), rc = 1;
	}
	close(c.fd);
	close(c.dfd);
	if (!o.keep)
		unlink(o.path);
	for (unsigned s = 0; s < o.nsizes; s++)
		free(c.expect[s]);
	free(res);
	return rc == 0 ? 0 : 1;
}
