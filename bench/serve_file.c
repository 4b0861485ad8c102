/* bench/serve_file.c — ringfetch-serve-file-bench: the MoE decode loop of ringfetch-serve-bench
 * (serve.h) with its experts in a file larger than the memory budget (docs/files.md).
 *
 * Contestants, each run in a fresh child process, alternating over the repetitions:
 *   mmap-direct   compute straight from a mapping of the file (page faults fetch the experts);
 *   pread         buffered pread of each routed expert into one buffer, then compute;
 *   keyed         ringfetch keyed on "threads": acquire, compute, release, src inside the rf_file's
 *                 mapping (the library reads the file for it);
 *   keyed-hints   the same, after hinting the layer's routed and the next layer's likeliest experts;
 *   hints-wrong   keyed, hinting after each layer's acquires as many of the next layer's experts as it
 *                 routes, all of them ones it does not route, least popular first (every hint wrong);
 *   hints-route   keyed, hinting the next layer's true route (recorded before the contestants run, by
 *                 the parent, from a mapping of the file: an oracle router).
 * hints-wrong and hints-route are printed beside keyed (no hints) as ratios: the cost of wrong hints
 * and the gain of right ones. They bound their hints (params.hint_bytes = hint_bound(): an eighth of
 * the slots, at least one), as a loop whose hints may be wrong should; keyed-hints leaves the library's
 * default (no bound unless configured).
 * Each child joins a memory cgroup limited to the budget when the process may create one (root: cgroup
 * v1 memory.limit_in_bytes, or v2 memory.max where the memory controller is delegated: bench/cgroup.h;
 * page cache is charged to it, so a mapping larger than the budget really is evicted), drops the file
 * from the page cache, runs one warm-up round and `rounds` measured rounds, and reports its tallies,
 * the bytes it read from storage (/proc/self/io read_bytes) and the group's peak memory. Where no
 * cgroup can be made, the output says the budget is not enforced.
 * Every compute is checked against the expert's sum, and every round's checksum against mmap-direct's.
 * Exit status: 0, 1 (a contestant or a check failed), 2 (bad options). */
#define _GNU_SOURCE
#include "cgroup.h"
#include "machine.h"
#include "serve.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

enum { C_MMAP, C_PREAD, C_KEYED, C_HINTS, C_WRONG, C_ROUTE, NC };
static const char *const cname[NC] = {"mmap-direct", "pread",       "keyed",
				      "keyed-hints", "hints-wrong", "hints-route"};

#define MAXREPS 16u
#define MAXROUNDS 16u

typedef struct report {
	int rc;
	rfs_tally t[MAXROUNDS];
	uint64_t read_bytes; /* over the measured rounds */
	rfs_bound bound;     /* keyed: its whole run's misses beside MIN's */
} report;

typedef struct fctx {
	rfs_opts o;
	rfs_model m;
	const char *path, *json;
	size_t budget;
	unsigned reps, quiet;
	rfb_cgroup cg;     /* cg.version 0: no cgroup (budget not enforced) */
	char cg_why[1024];
} fctx;

/* ---- memory cgroups (bench/cgroup.h) ------------------------------------------------------------- */

/* A fresh group limited to the budget: its path in out, 0; or -1 with cg_why set. */
static int cg_create(fctx *x, unsigned id, char *out, size_t cap)
{
	char name[64], v[32];
	snprintf(name, sizeof name, "ringfetch-serve-%d-%u", (int)getpid(), id);
	/* On v2 with no swap either, so that the limit is the budget. */
	if (rfb_cgroup_make(&x->cg, name, out, cap) != 0) {
		snprintf(x->cg_why, sizeof x->cg_why, "mkdir %s: %s", out, strerror(errno));
		return -1;
	}
	snprintf(v, sizeof v, "%zu", x->budget);
	if (rfb_cgroup_write(out, x->cg.limit, v) != 0) {
		snprintf(x->cg_why, sizeof x->cg_why, "%s/%s: %s", out, x->cg.limit, strerror(errno));
		rmdir(out);
		return -1;
	}
	return 0;
}

/* A counter of bench/cgroup.h, 0 where the group has none. */
static uint64_t nz(int64_t v) { return v < 0 ? 0 : (uint64_t)v; }

/* What the group still holds after its process died (its page cache and kernel memory stay charged;
 * its anonymous memory is gone), printed when a child failed: an OOM kill then says whether page cache
 * or kernel memory shared the budget with the slots (docs/files.md). */
static void cg_explain(const fctx *x, const char *path, uint64_t peak)
{
	double mib = 1048576.0;
	const rfb_cgroup *cg = &x->cg;
	fprintf(stderr, "  its memory cgroup: %llu OOM kill(s), peak %.1f MiB of %zu; after the child: %.1f MiB "
			"(page cache %.1f, kernel %.1f)\n",
		(unsigned long long)nz(rfb_cgroup_oom_kills(cg, path)), peak / mib, x->budget >> 20,
		nz(rfb_cgroup_read(path, cg->usage)) / mib, nz(rfb_cgroup_page_cache(cg, path)) / mib,
		nz(rfb_cgroup_kernel(cg, path)) / mib);
}

/* The group's peak memory (bytes), then remove it (its process has exited). */
static uint64_t cg_destroy(const fctx *x, const char *path, int explain)
{
	uint64_t peak = nz(rfb_cgroup_read(path, x->cg.peak));
	if (explain)
		cg_explain(x, path, peak);
	rfb_cgroup_remove(path); /* once the exited child's pages have left */
	return peak;
}

/* ---- the child ---------------------------------------------------------------------------------- */

static uint64_t read_bytes_now(void)
{
	FILE *f = fopen("/proc/self/io", "re");
	char line[128];
	unsigned long long v = 0;
	while (f && fgets(line, sizeof line, f))
		if (sscanf(line, "read_bytes: %llu", &v) == 1)
			break;
	if (f)
		fclose(f);
	return v;
}

typedef struct pread_self {
	const rfs_model *m;
	int fd;
	unsigned char *buf;
	const unsigned char *base; /* the mapping the sources point into (never read) */
} pread_self;

static int pread_layer(void *self, rfs_layer *L, rfs_tally *t)
{
	pread_self *p = self;
	for (unsigned i = 0; i < L->n; i++) {
		off_t off = (off_t)((const unsigned char *)L->src[i] - p->base);
		size_t got = 0;
		while (got < L->bytes[i]) {
			ssize_t k = pread(p->fd, p->buf + got, L->bytes[i] - got, off + (off_t)got);
			if (k <= 0) {
				fprintf(stderr, "\npread: %s\n", k < 0 ? strerror(errno) : "end of file");
				return -1;
			}
			got += (size_t)k;
		}
		t->bytes_copied += L->bytes[i];
		rfs_compute(p->m, L, i, p->buf, t);
	}
	return 0;
}

/* The hint modes' bound on hints outstanding: an eighth of the keyed slots, at least one slot. */
static uint64_t hint_bound(const rfs_opts *o)
{
	unsigned n = o->slots / 8;
	return (uint64_t)(n > 0 ? n : 1) * o->expert_bytes;
}

/* One contestant's rounds, in this (child) process: 0, or -1 with a message printed. */
static int child_run(fctx *x, int kind, unsigned first_round, report *rep)
{
	rfs_model *m = &x->m;
	const rfs_opts *o = &x->o;
	size_t len = (size_t)o->layers * o->experts * o->expert_bytes;
	int fd = open(x->path, O_RDONLY | O_CLOEXEC);
	if (fd < 0 || posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED) != 0) {
		fprintf(stderr, "%s: %s\n", x->path, strerror(errno));
		return -1;
	}
	rf_file *f = NULL;
	rfs_contestant *c = NULL;
	pread_self ps = {m, fd, NULL, NULL};
	void *map = MAP_FAILED;
	int rc = 0;
	if (kind >= C_KEYED) {
		rc = rf_file_open(x->path, 0, &f) == RF_OK ? 0 : -1;
		if (rc == 0) {
			m->pool = (unsigned char *)rf_file_data(f);
			x->o.hint_bytes = kind >= C_WRONG ? hint_bound(&x->o) : 0; /* this child's pipeline only */
			c = rfs_contestant_create(m, kind == C_KEYED ? RFS_KEYED : RFS_KEYED_HINTS, "threads");
			rc = c ? 0 : -1;
		}
		if (c != NULL && kind >= C_WRONG)
			rfs_contestant_hint_mode(c, kind == C_WRONG ? RFS_HINT_WRONG : RFS_HINT_ROUTE);
	} else {
		map = mmap(NULL, len, PROT_READ, MAP_SHARED, fd, 0);
		rc = map == MAP_FAILED ? -1 : 0;
		if (rc == 0 && kind == C_MMAP) {
			m->pool = map;
			c = rfs_contestant_create(m, RFS_DIRECT, NULL);
			rc = c ? 0 : -1;
		} else if (rc == 0) {
			m->pool = map, ps.base = map;
			rc = (ps.buf = aligned_alloc(4096, (o->expert_bytes + 4095) & ~(size_t)4095)) ? 0 : -1;
		}
	}
	if (rc != 0)
		fprintf(stderr, "%s: set-up failed: %s\n", cname[kind], f == NULL && kind >= C_KEYED ? rf_errmsg() : strerror(errno));
	rfs_tally warm;
	for (unsigned r = 0; r <= o->rounds && rc == 0; r++) {
		if (r == 1)
			rep->read_bytes = read_bytes_now();
		rfs_tally *t = r == 0 ? &warm : &rep->t[r - 1];
		unsigned step = (first_round + r) * o->steps;
		if (kind == C_PREAD) {
			memset(t, 0, sizeof *t);
			rc = rfs_round(m, step, pread_layer, &ps, t);
		} else {
			rc = rfs_contestant_round(c, step, t);
		}
	}
	rep->read_bytes = rc == 0 ? read_bytes_now() - rep->read_bytes : 0;
	if (rc == 0 && c != NULL)
		rc = rfs_contestant_bound(c, &rep->bound);
	rfs_contestant_destroy(c);
	rf_file_close(f);
	if (map != MAP_FAILED)
		munmap(map, len);
	free(ps.buf);
	close(fd);
	m->pool = NULL;
	return rc;
}

/* Fork a child for one contestant's rounds inside a fresh cgroup; its report through a pipe. */
static int run_child(fctx *x, int kind, unsigned id, unsigned first_round, report *rep, uint64_t *peak)
{
	char cg[800] = "";
	int in_cg = x->cg.version != 0 && cg_create(x, id, cg, sizeof cg) == 0;
	if (x->cg.version != 0 && !in_cg) {
		fprintf(stderr, "memory cgroup: %s: the budget is not enforced\n", x->cg_why);
		x->cg.version = 0;
	}
	int pfd[2];
	if (pipe(pfd) != 0)
		return -1;
	fflush(NULL);
	pid_t pid = fork();
	if (pid == 0) {
		close(pfd[0]);
		report r;
		memset(&r, 0, sizeof r);
		if (in_cg && rfb_cgroup_join(cg) != 0) {
			fprintf(stderr, "%s/cgroup.procs: %s\n", cg, strerror(errno));
			r.rc = -1;
		} else {
			r.rc = child_run(x, kind, first_round, &r);
		}
		ssize_t n = write(pfd[1], &r, sizeof r);
		_exit(n == (ssize_t)sizeof r && r.rc == 0 ? 0 : 1);
	}
	close(pfd[1]);
	size_t got = 0;
	while (pid > 0 && got < sizeof *rep) {
		ssize_t n = read(pfd[0], (char *)rep + got, sizeof *rep - got);
		if (n <= 0)
			break;
		got += (size_t)n;
	}
	close(pfd[0]);
	int st = 0;
	if (pid > 0)
		waitpid(pid, &st, 0);
	int failed = pid < 0 || got != sizeof *rep || !WIFEXITED(st) || WEXITSTATUS(st) != 0;
	if (failed)
		fprintf(stderr, "%s: the child failed (%s)\n", cname[kind],
			WIFSIGNALED(st) ? strsignal(WTERMSIG(st)) : got != sizeof *rep ? "no report" : "see above");
	*peak = in_cg ? cg_destroy(x, cg, failed) : 0;
	if (failed)
		return -1;
	return 0;
}

/* ---- the driver ---------------------------------------------------------------------------------- */

typedef struct recorder {
	const rfs_model *m;
	unsigned *n, *e;
	size_t at, cap;
} recorder;

static int record_layer(void *self, rfs_layer *L, rfs_tally *t)
{
	recorder *r = self;
	const rfs_opts *o = r->m->o;
	for (unsigned i = 0; i < L->n; i++)
		rfs_compute(r->m, L, i, L->src[i], t);
	if (r->at < r->cap) {
		r->n[r->at] = L->n;
		memcpy(r->e + r->at * o->experts, L->expert, L->n * sizeof *L->expert);
	}
	r->at++;
	return 0;
}

/* The routes of every step the children run (and one more), from a mapping of the file, for the
 * oracle hints of hints-wrong and hints-route. 0, or -1 with a message printed. */
static int record_routes(fctx *x)
{
	const rfs_opts *o = &x->o;
	size_t len = (size_t)o->layers * o->experts * o->expert_bytes;
	size_t rounds = (size_t)x->reps * (o->rounds + 1) + 2, cap = rounds * o->steps * o->layers;
	int fd = open(x->path, O_RDONLY | O_CLOEXEC);
	void *map = fd < 0 ? MAP_FAILED : mmap(NULL, len, PROT_READ, MAP_SHARED, fd, 0);
	recorder r = {&x->m, calloc(cap, sizeof(unsigned)), calloc(cap * o->experts, sizeof(unsigned)), 0, cap};
	int rc = map != MAP_FAILED && r.n && r.e ? 0 : -1;
	x->m.pool = map == MAP_FAILED ? NULL : map;
	for (size_t q = 0; q < rounds && rc == 0; q++) {
		rfs_tally t;
		memset(&t, 0, sizeof t);
		r.at = q * o->steps * o->layers;
		rc = rfs_round(&x->m, (unsigned)(q * o->steps), record_layer, &r, &t);
	}
	if (map != MAP_FAILED)
		munmap(map, len);
	if (fd >= 0) {
		posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
		close(fd);
	}
	x->m.pool = NULL;
	if (rc != 0) {
		fprintf(stderr, "recording the routes failed\n");
		free(r.n), free(r.e);
		return -1;
	}
	x->m.route_n = r.n, x->m.route_e = r.e, x->m.nroutes = cap;
	return 0;
}

static double med(double *v, unsigned n)
{
	return rfb_median(v, n);
}

static const char usage[] =
	"usage: ringfetch-serve-file-bench [options] [ringfetch-serve-bench model options]\n"
	"  --file PATH     the experts' file (written, then removed; default ./ringfetch-serve-file.dat)\n"
	"  --budget B      memory budget of each contestant's process (default 112M)\n"
	"  --reps R        fresh processes per contestant, alternating (default 3)\n"
	"  --json FILE     results as JSON\n"
	"  --quiet         no progress on stderr\n"
	"model options (ringfetch-serve-bench --help): defaults here --layers 16 --experts 8 --expert-size 2M\n"
	"  --topk 2 --steps 6 --rounds 2 --compute-us 40 --slots (as many experts as fit, the ring rounded up\n"
	"  to huge pages, in the budget less 16 MiB; half the budget under 32 MiB)\n";

static int parse(int argc, char **argv, fctx *x)
{
	static char slots[24];
	char *args[128] = {"ringfetch-serve-file-bench", "--layers", "16", "--experts", "8", "--expert-size", "2M",
			   "--topk", "2", "--steps", "6", "--rounds", "2", "--quiet"};
	int na = 14, have_slots = 0;
	x->path = "ringfetch-serve-file.dat";
	x->budget = (size_t)112 << 20;
	x->reps = 3;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		unsigned long long n;
		if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
			fputs(usage, stdout);
			exit(0);
		} else if (!strcmp(a, "--quiet")) {
			x->quiet = 1;
		} else if (!strcmp(a, "--file") && v) {
			x->path = v, i++;
		} else if (!strcmp(a, "--json") && v) {
			x->json = v, i++;
		} else if (!strcmp(a, "--budget") && v) {
			if ((x->budget = rfb_parse_size(v)) < ((size_t)8 << 20)) {
				fprintf(stderr, "--budget: at least 8M\n");
				return 2;
			}
			i++;
		} else if (!strcmp(a, "--reps") && v) {
			if (rfb_parse_count(v, 1, MAXREPS, &n) != 0) {
				fprintf(stderr, "--reps: 1..%u\n", MAXREPS);
				return 2;
			}
			x->reps = (unsigned)n, i++;
		} else if (na < 126) {
			have_slots |= !strcmp(a, "--slots");
			args[na++] = argv[i];
		}
	}
	char err[256];
	int rc = rfs_parse(na, args, &x->o, err, sizeof err);
	if (rc == 0 && !have_slots) {
		/* The ring takes the budget but 16 MiB (half the budget under 32 MiB): the pipeline's fixed cost
		 * (up to 4 MiB: jemalloc's metadata, the topology, threads, readers), the process (0.5-1 MiB) and
		 * the page cache of its binary and libraries (up to 6 MiB when they were evicted before the
		 * child faults them in), each charged to the group (docs/files.md, "What a pipeline costs in
		 * memory"). Slots are anonymous memory, which the group cannot reclaim, while page cache it can.
		 * The ring is rounded up to whole huge pages: the rounded ring must fit, not the slots alone. */
		size_t room = x->budget > ((size_t)32 << 20) ? x->budget - ((size_t)16 << 20) : x->budget / 2;
		size_t stride = (x->o.expert_bytes + 63) & ~(size_t)63, huge = rfb_huge_page_bytes();
		size_t s = room / stride;
		while (s > 2 && huge != 0 && ((s * stride + huge - 1) / huge) * huge > room)
			s--;
		size_t nexp = (size_t)x->o.layers * x->o.experts; /* more slots than experts would sit empty */
		s = s > nexp ? nexp : s > 1024 ? 1024 : s;
		snprintf(slots, sizeof slots, "%zu", s < 2 ? 2 : s);
		args[na++] = "--slots", args[na++] = slots;
		rc = rfs_parse(na, args, &x->o, err, sizeof err);
	}
	if (rc == 1) {
		fputs(usage, stdout);
		exit(0);
	}
	if (rc == 0 && x->o.rounds > MAXROUNDS)
		snprintf(err, sizeof err, "--rounds: at most %u", MAXROUNDS), rc = 2;
	if (rc != 0)
		fprintf(stderr, "ringfetch-serve-file-bench: %s\n", err);
	return rc;
}

int main(int argc, char **argv)
{
	static fctx x;
	int prc = parse(argc, argv, &x);
	if (prc != 0)
		return prc;
	const rfs_opts *o = &x.o;
	size_t file = (size_t)o->layers * o->experts * o->expert_bytes;
	int fd = open(x.path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0 || rfs_model_init_file(&x.m, &x.o, fd) != 0 || fdatasync(fd) != 0 || close(fd) != 0) {
		fprintf(stderr, "%s: cannot write the experts: %s\n", x.path, strerror(errno));
		unlink(x.path);
		return 1;
	}
	if (record_routes(&x) != 0) {
		unlink(x.path);
		return 1;
	}
	rfb_cgroup_detect(&x.cg, x.cg_why, sizeof x.cg_why);
	/* Keyed reads are O_DIRECT where the file system takes it; elsewhere they fill the page cache, and the
	 * pages of the reads in flight cannot be reclaimed until they land: the budget must hold them too
	 * (docs/files.md, "What a pipeline costs in memory"). Said, not hidden. */
	int dfd = open(x.path, O_RDONLY | O_DIRECT | O_CLOEXEC);
	int direct = dfd >= 0;
	if (dfd >= 0)
		close(dfd);
	else
		fprintf(stderr, "%s: O_DIRECT refused (%s): keyed reads go through the page cache, which shares the "
				"budget with the slots\n", x.path, strerror(errno));
	report *reps = calloc((size_t)NC * x.reps, sizeof *reps);
	double ms[NC] = {0};
	uint64_t peak[NC][MAXREPS] = {{0}};
	int rc = reps ? 0 : 1;
	for (unsigned r = 0; r < x.reps && rc == 0; r++)
		for (unsigned j = 0; j < NC && rc == 0; j++) {
			int k = (int)((j + r) % NC);
			if (!x.quiet)
				fprintf(stderr, "\r[rep %u/%u] %-12s", r + 1, x.reps, cname[k]), fflush(stderr);
			rc = run_child(&x, k, r * NC + (unsigned)k, 1 + r * (o->rounds + 1), &reps[k * x.reps + r], &peak[k][r]);
		}
	if (!x.quiet)
		fprintf(stderr, "\r%40s\r", "");
	/* Every contestant ran the same steps in repetition r: the checksums must agree with mmap-direct's. */
	for (unsigned r = 0; r < x.reps && rc == 0; r++)
		for (int k = 1; k < NC; k++)
			for (unsigned q = 0; q < o->rounds; q++)
				if (reps[k * x.reps + r].t[q].checksum != reps[C_MMAP * x.reps + r].t[q].checksum) {
					fprintf(stderr, "%s: rep %u round %u: checksum differs from mmap-direct's\n", cname[k], r, q);
					rc = 1;
				}
	if (rc == 0) {
		char machine[512];
		rfb_machine_json(machine, sizeof machine, "");
		printf("ringfetch-serve-file-bench %s: %u layers x %u experts of %zu KiB = %zu MiB file, top-%u, skew %g, "
		       "%g us per expert and token; budget %zu MiB (%s); keyed: %u slots on threads, %s reads; "
		       "hints-wrong, hints-route: hint_bytes %llu KiB = %llu slot(s), an eighth, at least one\n"
		       "%u fresh processes per contestant x %u rounds of %u steps, file cold at each start; medians\n",
		       rf_version_string(), o->layers, o->experts, o->expert_bytes >> 10, file >> 20, o->topk, o->skew,
		       o->compute_us, x.budget >> 20,
		       x.cg.version == 1   ? "enforced: cgroup v1 memory.limit_in_bytes"
		       : x.cg.version == 2 ? "enforced: cgroup v2 memory.max"
					   : "NOT enforced: no memory cgroup could be made",
		       o->slots, direct ? "O_DIRECT" : "buffered (no O_DIRECT here)",
		       (unsigned long long)(hint_bound(o) >> 10), (unsigned long long)(hint_bound(o) / o->expert_bytes),
		       x.reps, o->rounds, o->steps);
		printf("%-12s %9s %9s %12s %9s %10s %9s %9s\n", "contestant", "ms/step", "cpu ms", "MiB read/step",
		       "hit rate", "peak MiB", "vs mmap", "vs pread");
		rfs_bound bounds[NC];
		FILE *j = x.json ? fopen(x.json, "w") : NULL;
		if (j)
			fprintf(j, "{\"machine\": %s, \"file_mib\": %zu, \"budget_mib\": %zu, \"cgroup\": %d, \"results\": [\n",
				machine, file >> 20, x.budget >> 20, x.cg.version);
		for (int k = 0; k < NC; k++) {
			double v[MAXREPS * MAXROUNDS], cpu[MAXREPS * MAXROUNDS], mib[MAXREPS], hit[MAXREPS * MAXROUNDS], pk[MAXREPS];
			unsigned n = 0;
			for (unsigned r = 0; r < x.reps; r++) {
				const report *p = &reps[k * x.reps + r];
				for (unsigned q = 0; q < o->rounds; q++, n++) {
					v[n] = p->t[q].wall_s * 1e3 / o->steps;
					cpu[n] = p->t[q].cpu_s * 1e3 / o->steps;
					hit[n] = p->t[q].acquires ? (double)p->t[q].hits / (double)p->t[q].acquires : NAN;
				}
				mib[r] = (double)p->read_bytes / 1048576.0 / (o->rounds * o->steps);
				pk[r] = (double)peak[k][r] / 1048576.0;
			}
			ms[k] = med(v, n);
			double c = med(cpu, n), mb = med(mib, x.reps), h = k >= C_KEYED ? med(hit, n) : NAN, p = med(pk, x.reps);
			char hs[32] = "null", bs[160] = "";
			if (!isnan(h))
				snprintf(hs, sizeof hs, "%.3f", h);
			rfs_bound sum = {0};
			for (unsigned r = 0; r < x.reps; r++) {
				const rfs_bound *b = &reps[k * x.reps + r].bound;
				sum.acquires += b->acquires, sum.misses += b->misses, sum.reads += b->reads;
				sum.min_misses += b->min_misses;
			}
			if (k >= C_KEYED)
				snprintf(bs, sizeof bs, ", \"run_acquires\": %llu, \"run_misses\": %llu, \"run_reads\": %llu, "
					 "\"run_min_misses\": %llu", (unsigned long long)sum.acquires, (unsigned long long)sum.misses,
					 (unsigned long long)sum.reads, (unsigned long long)sum.min_misses);
			bounds[k] = sum;
			printf("%-12s %9.2f %9.2f %12.1f %9.3f %10.1f %9.2f %9.2f\n", cname[k], ms[k], c, mb, h, p,
			       ms[k] / ms[C_MMAP], k >= C_PREAD ? ms[k] / ms[C_PREAD] : NAN);
			if (j)
				fprintf(j,
					"  {\"contestant\": \"%s\", \"ms_step\": %.3f, \"cpu_ms_step\": %.3f, \"mib_read_step\": %.2f, "
					"\"hit_rate\": %s, \"peak_mib\": %.1f%s}%s\n",
					cname[k], ms[k], c, mb, hs, p, bs, k + 1 < NC ? "," : "");
		}
		/* The keyed processes' whole runs (warm-up included), summed over the repetitions, beside MIN's. */
		printf("keyed reads beside Belady's MIN on the same acquires at %u slots, each process's whole run "
		       "(warm-up included), summed over the repetitions (bench/replay.h):\n"
		       "  %-12s %10s %10s %10s %10s %13s\n", o->slots, "contestant", "acquires", "misses", "reads", "MIN",
		       "reads vs MIN");
		for (int k = C_KEYED; k < NC; k++) {
			const rfs_bound sum = bounds[k];
			printf("  %-12s %10llu %10llu %10llu %10llu %12.2fx\n", cname[k], (unsigned long long)sum.acquires,
			       (unsigned long long)sum.misses, (unsigned long long)sum.reads,
			       (unsigned long long)sum.min_misses,
			       sum.min_misses ? (double)sum.reads / (double)sum.min_misses : NAN);
		}
		if (j) {
			fprintf(j, "]}\n");
			rc = fclose(j) == 0 ? 0 : 1;
		}
	}
	if (rc == 0) {
		/* What the hints did, per step (summed over every repetition and round, then divided). */
		printf("%-12s %9s %9s %9s %9s %9s\n", "hints", "hinted", "dropped", "wasted", "hits", "late");
		for (int k = C_KEYED; k < NC; k++) {
			double v[5] = {0}, steps = (double)x.reps * o->rounds * o->steps;
			for (unsigned r = 0; r < x.reps; r++)
				for (unsigned q = 0; q < o->rounds; q++) {
					const rfs_tally *t = &reps[k * x.reps + r].t[q];
					v[0] += (double)t->prefetches, v[1] += (double)t->dropped, v[2] += (double)t->wasted;
					v[3] += (double)t->hits, v[4] += (double)t->late;
				}
			printf("%-12s %9.2f %9.2f %9.2f %9.2f %9.2f\n", cname[k], v[0] / steps, v[1] / steps, v[2] / steps,
			       v[3] / steps, v[4] / steps);
		}
		printf("hints, keyed = 1: wrong %.3fx (target <= 1.05), true route %.3fx (target <= 0.90)\n",
		       ms[C_WRONG] / ms[C_KEYED], ms[C_ROUTE] / ms[C_KEYED]);
	}
	x.m.pool = NULL;
	free((void *)x.m.route_n);
	free((void *)x.m.route_e);
	rfs_model_free(&x.m);
	free(reps);
	unlink(x.path);
	return rc == 0 ? 0 : 1;
}
