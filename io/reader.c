/* io/reader.c — the reads of file copies (io/reader.h).
 *
 * A copy is a window of the file (its range, or the range widened to the O_DIRECT alignment) cut into
 * pieces, one read each. Copies with pieces not yet issued wait in a FIFO (the pending list); as a read
 * finishes, the next piece of the oldest pending copy takes its place, so the device sees up to
 * RF__RD_QD reads. Every piece goes through rd_issue: an io_uring submission, or a pread completed on
 * the spot, so completion (short reads, errors, the move, the timing) is one code path for both. */
#define _GNU_SOURCE /* O_DIRECT */
#include "io/reader.h"
#include "base/alloc.h"
#include "base/compare.h"
#include "base/error.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#ifdef RF_HAVE_LIBURING
#include <liburing.h>
#endif

#define RD_BELL UINT64_MAX /* user_data of the doorbell's poll */
#define RD_SQ_ENTRIES 64u  /* the reads in flight, the doorbell, and room to spare */
/* A read, or io_uring_enter, answered EAGAIN / EBUSY / EINTR is tried again after a short sleep (50 us,
 * doubling: about 6 ms over all tries), this many times in a row at most: a kernel (a
 * seccomp filter, a driver) that gives one of them for ever would otherwise spin the caller for ever.
 * Then the ring is given up for pread, a piece the ring keeps refusing is read with pread, and a pread
 * that keeps refusing fails its copy (RF_EIO). */
#define RD_TRIES 8u
#define RD_SETUP_AGAIN_S 0.2 /* the least time between two tries of an io_uring_setup short of resources */
#define RD_TRIES_S "8" /* RD_TRIES in words */

typedef struct rd_copy {
	uint64_t tag;
	rf_file *f;
	unsigned char *dst; /* the window's first byte lands here */
	uint64_t win_off;   /* file offset of the window */
	size_t win_len;     /* bytes of the window */
	uint64_t end;       /* file offset just past the range: what must arrive */
	size_t n, shift, piece, next; /* next: window bytes issued so far */
	unsigned out;                 /* pieces in flight */
	int rc;
	unsigned char direct, move, timed, pending, win;
	unsigned cls, method;
	size_t cap;      /* dst_cap, and the start's flags: for a window copy that is read on its own */
	unsigned flags;
	double t0;
	/* the first failure, put into words when poll hands the copy back */
	int err_no;           /* errno of a failed read, or 0 for a short one */
	uint64_t err_off;     /* its offset */
	uint64_t err_size;    /* short: the file's size then (UINT64_MAX: unknown) */
	size_t err_len, err_got;
} rd_copy;

/* The read-ahead window (rf__reader_window): chunks, each one request, in file order. */
#define RD_WIN_MAX 16u           /* chunks at most */
#define RD_CHUNK 0x80000000u     /* rd_piece.copy of a chunk's read (low bits: the chunk) */
#define RD_HUGE ((size_t)2 << 20) /* the window's mapping is aligned to a huge page */
enum { RD_CH_OUT = 1, RD_CH_IN, RD_CH_BAD };

typedef struct rd_chunk {
	uint64_t off, lim; /* the file range it was read for */
	uint64_t end;      /* its bytes are good up to here (<= lim: the file ended) */
	unsigned char state;
} rd_chunk;

typedef struct rd_win {
	unsigned char *mem; /* cap bytes, chunk i at mem + i * chunk */
	size_t cap, map_len;
	void *map;
	rf_file *f;         /* the file the chunks hold (NULL: none yet) */
	size_t chunk;       /* bytes per chunk for f */
	unsigned k;         /* chunks of the window for f */
	rd_chunk ch[RD_WIN_MAX];
	unsigned head, n, out; /* chunks held: ch[(head + i) % k], i < n, in file order; of them in flight */
	uint64_t next;      /* file offset of the next chunk to read */
	uint64_t limit;     /* read no further (the run's bytes as the caller said) */
	int final;          /* limit is where the run's contiguous bytes end, not only how far it was told */
	uint64_t expect;    /* where the next copy served from the window must start */
	unsigned *wait, wait_head, nwait; /* copies waiting for chunks, in file order (max_copies long) */
	uint64_t copies, read;
	uint64_t landed;    /* chunks landed so far (rd_top_up serves again when it moves) */
	int online;         /* the chunks in flight are chosen online (ahead) */
	size_t from;        /* online: the bytes the search starts from (the chunks a copy needs, if more) */
	rf__rd_ahead ahead; /* chunks read ahead at once: ahead.on (all k when not online) */
	double m_t0, m_last; /* the measurement in progress: its start, the last landing */
	double m_sum, m_sq;  /* the intervals between its landings: their sum, their squares' */
	uint64_t m_bytes, m_round; /* bytes landed in it, in its round so far */
	unsigned m_landed;
} rd_win;

typedef struct rd_piece {
	unsigned copy;
	uint64_t off;
	size_t len;
	unsigned char *dst;
	unsigned tries;   /* EAGAIN / EBUSY / EINTR answers in a row from the ring */
	int by_pread;     /* the last answer came from rd_pread (which retries on its own) */
} rd_piece;

struct rf__reader {
	unsigned max_copies;
	int bell_fd;
	int uring;       /* reads go through the ring */
	int ring_open;   /* the ring exists (it may outlive uring after a failure, for reads it owes) */
	int bell_armed;  /* a poll of bell_fd is in the ring */
	int bell_dead;   /* polling it failed: wait no longer counts on it */
	int bell_rang;   /* reaped a ring of the doorbell that no wait has returned for yet */
	unsigned enter_fails; /* io_uring_enter answered EAGAIN / EBUSY / EINTR, times in a row */
	int setup_again; /* io_uring_setup failed for want of a descriptor or memory: try again when idle */
	double setup_at; /* not before this time (rd_now) */
	unsigned gen;    /* bumped whenever what describe says changes */
	char why[160];   /* why pread: io_uring refused, or failed */
	char err[512];   /* the last RF_EIO */
	void *reg_base;  /* the registered region, when registered */
	size_t reg_len;
	void *want_base; /* the region asked for (registered once a ring exists) */
	size_t want_len;
	int reg_tried;
	char reg_why[96];
	rd_copy *copies;
	unsigned *free_copies, nfree_copies;
	/* FIFO of copies with pieces not yet issued, max_copies long; a failed copy stays listed (and
	 * unfinished) until it reaches the head */
	unsigned *pend, pend_head, npend;
	unsigned *done, done_head, ndone; /* FIFO of finished copies, max_copies long */
	rd_piece pieces[RF__RD_QD];
	unsigned free_pieces[RF__RD_QD], nfree_pieces;
	rf__rd_samples samples[RF__RD_CLASSES];
	rf__reader_counters cnt;
	rd_win win;
#ifdef RF_HAVE_LIBURING
	struct io_uring ring;
#endif
};

static void rd_register(rf__reader *r);

_Static_assert(RF__RD_PROBES % 2 == 1, "rd_median takes the middle sample");
_Static_assert(RD_TRIES == 8, "RD_TRIES_S says RD_TRIES");

static float rd_median(const float *v) /* of RF__RD_PROBES samples, by insertion sort */
{
	float s[RF__RD_PROBES];
	memcpy(s, v, sizeof s);
	for (unsigned i = 1; i < RF__RD_PROBES; i++)
		for (unsigned j = i; j > 0 && s[j - 1] > s[j]; j--) {
			float t = s[j];
			s[j] = s[j - 1];
			s[j - 1] = t;
		}
	return s[RF__RD_PROBES / 2];
}

int rf__reader_rule_decided(const rf__rd_samples *s)
{
	return s->n[RF__RD_MOVE] >= RF__RD_PROBES && s->n[RF__RD_BUFFERED] >= RF__RD_PROBES;
}

int rf__reader_rule(const rf__rd_samples *s)
{
	if (!rf__reader_rule_decided(s))
		return s->n[RF__RD_BUFFERED] < s->n[RF__RD_MOVE] ? RF__RD_BUFFERED : RF__RD_MOVE;
	float mv = rd_median(s->ns_per_byte[RF__RD_MOVE]), bf = rd_median(s->ns_per_byte[RF__RD_BUFFERED]);
	return bf < mv ? RF__RD_BUFFERED : RF__RD_MOVE;
}

unsigned rf__reader_class(size_t n)
{
	unsigned c = 0;
	for (size_t lim = 4096; n > lim && c + 1 < RF__RD_CLASSES; lim <<= 1)
		c++;
	return c;
}

size_t rf__reader_piece(size_t n, size_t align, size_t io_max)
{
	size_t hi = io_max ? io_max : RF__RD_PIECE_UNKNOWN;
	hi = hi > RF__RD_PIECE_MAX ? RF__RD_PIECE_MAX : hi;
	hi = hi / align * align;
	hi = hi < align ? align : hi;
	size_t p = (n + align - 1) / align * align;
	return p > hi ? hi : p;
}

static double rd_now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* An answer that says "not now" rather than "no": worth another try (RD_TRIES). */
static int rd_transient(int err)
{
	return err == EAGAIN || err == EBUSY || err == EINTR;
}

/* The sleep before try k + 1 (k >= 1 tries made). */
static void rd_backoff(unsigned k)
{
	long us = 50L << (k > 7 ? 7 : k - 1);
	struct timespec d = {0, (us > 5000 ? 5000 : us) * 1000L};
	nanosleep(&d, NULL);
}

#ifdef RF_HAVE_LIBURING
/* Set up the ring, or say in r->why why not (the reader then reads with pread). */
static void rd_uring_init(rf__reader *r)
{
	r->setup_again = 0;
	int rc = io_uring_queue_init(RD_SQ_ENTRIES, &r->ring, 0);
	if (rc < 0) {
		/* Out of descriptors or memory is a moment's shortage, not the system's word: try again later
		 * (rd_uring_again); a refusal (EPERM, ENOSYS, io_uring_disabled) stands. */
		r->setup_again = rc == -EMFILE || rc == -ENFILE || rc == -ENOMEM || rc == -EAGAIN;
		r->setup_at = rd_now() + RD_SETUP_AGAIN_S;
		snprintf(r->why, sizeof r->why, "io_uring refused: io_uring_setup: %s%s", strerror(-rc),
			 r->setup_again ? "; tried again when idle, at most five times a second" : "");
		return;
	}
	/* A kernel without the read opcodes (before 5.6) is as good as none. */
	struct io_uring_probe *p = io_uring_get_probe_ring(&r->ring);
	int ok = p != NULL && io_uring_opcode_supported(p, IORING_OP_READ) &&
		 io_uring_opcode_supported(p, IORING_OP_READ_FIXED) && io_uring_opcode_supported(p, IORING_OP_POLL_ADD);
	if (p != NULL)
		io_uring_free_probe(p);
	if (!ok) {
		io_uring_queue_exit(&r->ring);
		snprintf(r->why, sizeof r->why, "io_uring refused: %s",
			 p == NULL ? "the opcode probe failed" : "no IORING_OP_READ on this kernel");
		return;
	}
	r->uring = 1;
	r->ring_open = 1;
}
#endif

int rf__reader_create(unsigned max_copies, int bell_fd, rf__reader **out)
{
	if (out == NULL || max_copies == 0 || max_copies > 4096)
		return rf__err(RF_EINVAL, "rf__reader_create: %s", out == NULL ? "out is NULL" : "max_copies not in 1..4096");
	rf__reader *r = rf__calloc(1, sizeof *r);
	if (r == NULL)
		return rf__err(RF_ENOMEM, "rf__reader_create: out of memory");
	r->copies = rf__calloc(max_copies, sizeof *r->copies);
	r->free_copies = rf__calloc(max_copies, sizeof *r->free_copies);
	r->done = rf__calloc(max_copies, sizeof *r->done);
	r->pend = rf__calloc(max_copies, sizeof *r->pend);
	r->win.wait = rf__calloc(max_copies, sizeof *r->win.wait);
	if (r->copies == NULL || r->free_copies == NULL || r->done == NULL || r->pend == NULL || r->win.wait == NULL) {
		rf__reader_destroy(r); /* no ring yet */
		return rf__err(RF_ENOMEM, "rf__reader_create: out of memory");
	}
	r->max_copies = max_copies;
	r->bell_fd = bell_fd;
	for (unsigned i = 0; i < max_copies; i++)
		r->free_copies[i] = max_copies - 1 - i;
	r->nfree_copies = max_copies;
	for (unsigned i = 0; i < RF__RD_QD; i++)
		r->free_pieces[i] = RF__RD_QD - 1 - i;
	r->nfree_pieces = RF__RD_QD;
#ifdef RF_HAVE_LIBURING
	rd_uring_init(r);
#else
	snprintf(r->why, sizeof r->why, "built without liburing");
#endif
	*out = r;
	return RF_OK;
}

/* The copy failed (the first failure is the one reported); no more of its pieces are issued. */
static void rd_fail(rf__reader *r, unsigned ci, const rd_piece *p, int err_no, size_t got, uint64_t size)
{
	rd_copy *c = &r->copies[ci];
	if (c->rc == RF_OK) {
		c->rc = RF_EIO;
		c->err_no = err_no, c->err_off = p->off, c->err_len = p->len, c->err_got = got, c->err_size = size;
	}
	c->next = c->win_len;
}

/* The sentence of failed copy c, into r->err. */
static void rd_explain(rf__reader *r, const rd_copy *c)
{
	const char *path = c->f->path;
	if (c->err_no != 0)
		snprintf(r->err, sizeof r->err, "%s: read of %zu bytes at offset %" PRIu64 ": %s%s", path, c->err_len,
			 c->err_off, strerror(c->err_no), rd_transient(c->err_no) ? " (every try of " RD_TRIES_S ")" : "");
	else if (c->err_size != UINT64_MAX)
		snprintf(r->err, sizeof r->err, "%s: short read at offset %" PRIu64 ": file shrank to %" PRIu64 " bytes",
			 path, c->err_off, c->err_size);
	else
		snprintf(r->err, sizeof r->err, "%s: short read at offset %" PRIu64 ": %zu of %zu bytes", path, c->err_off,
			 c->err_got, c->err_len);
}

/* Every piece of copy ci has come back: move the bytes down if read as its window, time it while the
 * rule measures its class, queue it for poll. */
static void rd_finish(rf__reader *r, unsigned ci)
{
	rd_copy *c = &r->copies[ci];
	if (c->rc == RF_OK && c->move) {
		memmove(c->dst, c->dst + c->shift, c->n);
		c->shift = 0;
	}
	if (c->rc == RF_OK && c->timed) {
		rf__rd_samples *s = &r->samples[c->cls];
		unsigned k = s->n[c->method];
		if (k < RF__RD_PROBES) {
			s->ns_per_byte[c->method][k] = (float)((rd_now() - c->t0) * 1e9 / (double)c->n);
			s->n[c->method] = k + 1;
			r->gen += (unsigned)rf__reader_rule_decided(s); /* the class has its rule: describe lists it */
		}
	}
	r->done[(r->done_head + r->ndone) % r->max_copies] = ci;
	r->ndone++;
}

static void rd_issue(rf__reader *r, unsigned pi);
static void rd_pread(rf__reader *r, unsigned pi);

/* A refused read ("not now", res = -EAGAIN ...) of piece pi: the same read again after a pause, or,
 * once the ring has refused it RD_TRIES times, by pread (which retries on its own). */
static void rd_retry(rf__reader *r, unsigned pi)
{
	rd_piece *p = &r->pieces[pi];
	if (++p->tries < RD_TRIES) {
		rd_backoff(p->tries);
		rd_issue(r, pi);
	} else {
		rd_pread(r, pi);
	}
}

/* A partial read of res bytes (on the alignment): the rest of piece pi, as its own read. */
static void rd_rest(rf__reader *r, unsigned pi, long res)
{
	rd_piece *p = &r->pieces[pi];
	p->off += (uint64_t)res;
	p->dst += res;
	p->len -= (size_t)res;
	p->tries = 0;
	rd_issue(r, pi);
}

/* Piece pi came back with res (bytes, or -errno). */
static void rd_chunk_done(rf__reader *r, unsigned pi, long res);

static void rd_piece_done(rf__reader *r, unsigned pi, long res)
{
	rd_piece *p = &r->pieces[pi];
	if (p->copy & RD_CHUNK) {
		rd_chunk_done(r, pi, res);
		return;
	}
	unsigned ci = p->copy;
	rd_copy *c = &r->copies[ci];
	if (res < 0 && rd_transient((int)-res) && c->rc == RF_OK && !p->by_pread) {
		rd_retry(r, pi);
		return;
	}
	uint64_t want = p->off + p->len < c->end ? p->off + p->len : c->end;
	if (res >= 0 && p->off + (uint64_t)res < want && c->rc == RF_OK) {
		size_t a = c->direct ? rf__file_dio_align(c->f) : 1;
		if (res > 0 && (size_t)res % a == 0) {
			rd_rest(r, pi, res);
			return;
		}
		struct stat st;
		int shrank = fstat(rf__file_fd(c->f, 0), &st) == 0 && (uint64_t)st.st_size < c->end;
		rd_fail(r, ci, p, 0, (size_t)res, shrank ? (uint64_t)st.st_size : UINT64_MAX);
	} else if (res < 0) {
		rd_fail(r, ci, p, (int)-res, 0, 0);
	}
	r->free_pieces[r->nfree_pieces++] = pi;
	if (--c->out == 0 && c->next == c->win_len && !c->pending)
		rd_finish(r, ci);
}

/* pread the piece to its end (or EOF, or an error) and complete it on the spot. */
static void rd_pread(rf__reader *r, unsigned pi)
{
	rd_piece *p = &r->pieces[pi];
	int fd = (p->copy & RD_CHUNK) ? rf__file_fd(r->win.f, 1) : rf__file_fd(r->copies[p->copy].f, r->copies[p->copy].direct);
	size_t got = 0;
	long res = 0;
	unsigned tries = 0;
	while (got < p->len) {
		ssize_t k = pread(fd, p->dst + got, p->len - got, (off_t)(p->off + got));
		if (k < 0 && rd_transient(errno) && ++tries < RD_TRIES) {
			rd_backoff(tries);
			continue;
		}
		if (k <= 0) {
			res = k < 0 ? -errno : 0;
			break;
		}
		got += (size_t)k;
		tries = 0;
	}
	p->by_pread = 1;
	rd_piece_done(r, pi, got > 0 || res == 0 ? (long)got : res);
}

/* Start the read of piece pi (filled in): a submission queued in the ring, or a pread done now. */
static void rd_issue(rf__reader *r, unsigned pi)
{
	rd_piece *p = &r->pieces[pi];
	int chunk = (p->copy & RD_CHUNK) != 0;
	rf_file *f = chunk ? r->win.f : r->copies[p->copy].f;
	int direct = chunk || r->copies[p->copy].direct;
	r->cnt.reads++;
	r->cnt.reads_direct += (unsigned)direct;
	p->by_pread = 0;
#ifdef RF_HAVE_LIBURING
	if (r->uring) {
		/* Never NULL: RD_SQ_ENTRIES holds every piece and the doorbell (else: pread below). */
		struct io_uring_sqe *sqe = io_uring_get_sqe(&r->ring);
		if (sqe != NULL) {
			int fd = rf__file_fd(f, direct);
			int fixed = r->reg_base != NULL && p->dst >= (unsigned char *)r->reg_base &&
				    (size_t)(p->dst - (unsigned char *)r->reg_base) + p->len <= r->reg_len;
			if (fixed)
				io_uring_prep_read_fixed(sqe, fd, p->dst, (unsigned)p->len, p->off, 0);
			else
				io_uring_prep_read(sqe, fd, p->dst, (unsigned)p->len, p->off);
			r->cnt.reads_fixed += (uint64_t)fixed;
			io_uring_sqe_set_data64(sqe, pi);
			return;
		}
	}
#endif
	rd_pread(r, pi);
}

static void rd_top_up_pending(rf__reader *r);
static void rd_progress(rf__reader *r);

void rf__reader_ahead_start(rf__rd_ahead *a, unsigned max, unsigned first)
{
	*a = (rf__rd_ahead){.on = 1, .max = max ? max : 1};
	while (a->on * 2 <= first && a->on * 2 <= a->max && a->on * 2 < (1u << RF__RD_AHEAD_SETTINGS))
		a->on *= 2;
	a->settled = a->on >= a->max;
}

void rf__reader_ahead_sample(uint64_t bytes, double seconds, unsigned n, double sum, double sumsq, double *rate,
			     double *err)
{
	*rate = seconds > 0 ? (double)bytes / seconds : 0;
	double mu = n > 1 ? sum / n : 0, var = n > 1 ? (sumsq - n * mu * mu) / (n - 1) : 0;
	*err = var > 0 ? sqrt(var / n) : 0;
}

unsigned rf__reader_ahead_rule(rf__rd_ahead *a, double rate, double err)
{
	static const rf__cmp_rule pays = {.z = 1, .higher = 1}; /* more in flight: a rise beyond the noise */
	if (a->settled)
		return a->on;
	unsigned i = 0;
	while ((2u << i) <= a->on && i + 1 < RF__RD_AHEAD_SETTINGS)
		i++;
	a->rate[i] = rate;
	a->err[i] = err;
	unsigned lo = i > 0 && a->rate[i - 1] > 0 ? i - 1 : i; /* the setting kept before this one */
	unsigned w = lo + rf__cmp_pick(&pays, a->rate + lo, a->err + lo, i + 1 - lo);
	a->settled = w < i || i + 1 == RF__RD_AHEAD_SETTINGS || (2u << i) > a->max; /* back, for good; or top */
	a->on = a->settled ? 1u << w : 2u << i;
	return a->on;
}

/* A chunk of `bytes` landed during a measurement: each `on` chunks a round, and after
 * RF__RD_AHEAD_ROUNDS rounds the rule decides. */
static void rd_win_measure(rf__reader *r, uint64_t bytes)
{
	rd_win *w = &r->win;
	w->m_bytes += bytes;
	w->m_round += bytes;
	if (++w->m_landed % w->ahead.on != 0)
		return;
	double t = rd_now(), d = t - w->m_last, x = d > 0 ? (double)w->m_round / d : 0; /* a round's rate */
	w->m_last = t, w->m_round = 0;
	w->m_sum += x, w->m_sq += x * x;
	if (w->m_landed < RF__RD_AHEAD_ROUNDS * w->ahead.on)
		return;
	double rate, err;
	rf__reader_ahead_sample(w->m_bytes, t - w->m_t0, RF__RD_AHEAD_ROUNDS, w->m_sum, w->m_sq, &rate, &err);
	rf__reader_ahead_rule(&w->ahead, rate, err);
	r->gen++; /* describe shows the rates so far */
	w->m_t0 = w->ahead.settled ? 0 : t, w->m_landed = 0, w->m_bytes = 0, w->m_sum = 0, w->m_sq = 0;
}

/* ---- the read-ahead window ---------------------------------------------------------------------- */

/* Chunk pi came back with res. A refusal ("not now") is retried as a copy's piece is; a partial read
 * on the alignment reads the rest; anything else ends the chunk: its good bytes end where the read
 * ended (a short read: the file's end, or the file shrank; the copies past it are read on their own
 * and fail there, with their own words). */
static void rd_chunk_done(rf__reader *r, unsigned pi, long res)
{
	rd_piece *p = &r->pieces[pi];
	rd_win *w = &r->win;
	rd_chunk *h = &w->ch[p->copy & ~RD_CHUNK];
	if (res < 0 && rd_transient((int)-res) && !p->by_pread) {
		rd_retry(r, pi);
		return;
	}
	if (res > 0 && (size_t)res < p->len && p->off + (uint64_t)res < h->lim &&
	    (size_t)res % rf__file_dio_align(w->f) == 0) {
		rd_rest(r, pi, res);
		return;
	}
	if (res < 0) {
		h->state = RD_CH_BAD;
	} else {
		uint64_t got = p->off + (uint64_t)res;
		h->end = got < h->lim ? got : h->lim;
		h->state = RD_CH_IN;
		w->read += (uint64_t)res;
		if (w->online && !w->ahead.settled && w->m_t0 != 0)
			rd_win_measure(r, (uint64_t)res);
	}
	w->landed++;
	w->out--;
	r->free_pieces[r->nfree_pieces++] = pi;
}

static void rd_setup(rf__reader *r, unsigned ci);

/* Serve the waiting copies, oldest first, whose chunks have all landed: move their bytes into place, or
 * (a chunk failed or the file ended early) read them on their own. Then let go of the chunks no copy
 * still to come can want (copies come in file order). */
static void rd_win_serve(rf__reader *r)
{
	rd_win *w = &r->win;
	while (w->nwait > 0) {
		unsigned ci = w->wait[w->wait_head];
		rd_copy *c = &r->copies[ci];
		uint64_t off = c->win_off, end = c->end, pos = off;
		int ready = 1, good = 1;
		for (unsigned j = 0; j < w->n && pos < end; j++) {
			const rd_chunk *h = &w->ch[(w->head + j) % w->k];
			if (h->lim <= pos)
				continue;
			if (h->state == RD_CH_OUT) {
				ready = 0;
				break;
			}
			if (h->state == RD_CH_BAD || h->off > pos || h->end < (h->lim < end ? h->lim : end)) {
				good = 0;
				break;
			}
			pos = h->lim < end ? h->lim : end;
		}
		if (good && ready && pos < end)
			ready = 0; /* its last chunk is not read yet */
		if (!ready && good)
			break;
		w->wait_head = (w->wait_head + 1) % r->max_copies;
		w->nwait--;
		if (good) {
			for (unsigned j = 0; j < w->n && pos > off; j++) {
				const rd_chunk *h = &w->ch[(w->head + j) % w->k];
				if (h->lim <= off || h->off >= end)
					continue;
				uint64_t a = off > h->off ? off : h->off, b = end < h->lim ? end : h->lim;
				unsigned i = (w->head + j) % w->k;
				memcpy(c->dst + (a - off), w->mem + (size_t)i * w->chunk + (a - h->off), (size_t)(b - a));
			}
			w->copies++;
			rd_finish(r, ci);
		} else { /* read on its own, where a failure is put into words */
			c->win = 0;
			rd_setup(r, ci);
		}
		while (w->n > 0 && w->ch[w->head].state != RD_CH_OUT && w->ch[w->head].lim <= end) {
			w->head = (w->head + 1) % w->k;
			w->n--;
		}
	}
}

/* The chunks read so far do not reach the end of the oldest waiting copy: it needs more than the
 * setting allows (a copy across a chunk's boundary with one chunk read ahead), which it gets. */
static int rd_win_short(const rf__reader *r)
{
	const rd_win *w = &r->win;
	return w->nwait > 0 && w->next < r->copies[w->wait[w->wait_head]].end;
}

/* Read chunks ahead while the window has room: whole chunks while the run goes on past them, the last
 * one up to where the run ends. */
static void rd_win_fill(rf__reader *r)
{
	rd_win *w = &r->win;
	while (w->f != NULL && w->n < w->k && (w->n < w->ahead.on || rd_win_short(r)) && w->next < w->limit &&
	       r->nfree_pieces > 0) {
		if (!w->final && w->next + w->chunk > w->limit)
			return; /* a partial chunk would leave the next one off the alignment */
		size_t a = rf__file_dio_align(w->f);
		uint64_t lim = w->next + w->chunk < w->limit ? w->next + w->chunk : w->limit;
		size_t len = (size_t)((lim - w->next + a - 1) / a * a);
		unsigned i = (w->head + w->n) % w->k;
		w->ch[i] = (rd_chunk){w->next, lim, w->next, RD_CH_OUT};
		w->n++;
		w->out++;
		if (w->online && !w->ahead.settled && w->m_landed == 0 && w->m_t0 == 0)
			w->m_t0 = w->m_last = rd_now(); /* a measurement starts with its first read */
		unsigned pi = r->free_pieces[--r->nfree_pieces];
		r->pieces[pi] = (rd_piece){RD_CHUNK | i, w->next, len, w->mem + (size_t)i * w->chunk, 0, 0};
		w->next = lim;
		rd_issue(r, pi);
	}
}

/* Copy ci (filled in by start) is served from the window if it is small, of a file O_DIRECT reads, and
 * either continues the window's run or starts a new one (none of the old chunks still in flight).
 * 1 if taken. */
static int rd_win_take(rf__reader *r, unsigned ci, size_t ahead)
{
	rd_win *w = &r->win;
	rd_copy *c = &r->copies[ci];
	rf_file *f = c->f;
	size_t a = rf__file_dio_align(f);
	if (w->mem == NULL || a == 0 || (c->flags & RF__RD_SHIFT_OK))
		return 0;
	int cont = w->f == f && c->win_off == w->expect && w->expect < w->limit;
	if (!cont) {
		/* pread mode reads each copy before start returns: nothing to overlap, so no window */
		if (ahead == 0 || w->out != 0 || w->nwait != 0 || !r->uring)
			return 0;
		/* a chunk is one request as large as the device takes, and the window at least four of them */
		size_t piece = rf__reader_piece(w->cap / 4, a, f->io_max);
		size_t al = a > 4096 ? a : 4096, chunk = piece / al * al;
		if (chunk == 0)
			return 0;
		unsigned k = (unsigned)(w->cap / chunk);
		k = k > RD_WIN_MAX ? RD_WIN_MAX : k;
		if (k < 2 || c->n > RF__RD_WIN_SMALL(k * chunk))
			return 0;
		if (w->f != f || w->chunk != chunk)
			r->gen++; /* describe names the chunk size */
		if (w->chunk != chunk || w->k != k) { /* a new setting to choose: the old one was for other chunks */
			/* from the chunks one copy may need at once (it may cross a chunk's boundary) */
			unsigned need = (unsigned)((c->n + chunk - 1) / chunk) + 1, from = (unsigned)(w->from / chunk);
			rf__reader_ahead_start(&w->ahead, k, need > from ? need : from);
			if (!w->online)
				w->ahead.on = k, w->ahead.settled = 1;
		}
		w->m_t0 = 0, w->m_landed = 0, w->m_bytes = 0, w->m_round = 0, w->m_sum = 0, w->m_sq = 0; /* one stream's */
		w->f = f, w->chunk = chunk, w->k = k, w->head = 0, w->n = 0;
		w->next = c->win_off / a * a;
		w->limit = c->win_off;
		w->final = 0;
	} else if (c->n > RF__RD_WIN_SMALL(w->k * w->chunk)) {
		return 0;
	}
	uint64_t size = rf_file_size(f), lim = c->end + (ahead < w->cap ? ahead : w->cap);
	lim = lim > size ? size : lim;
	if (lim > w->limit || (cont && ahead < w->cap)) {
		w->limit = lim > w->limit ? lim : w->limit;
		w->final = ahead < w->cap || lim == size;
	}
	w->expect = c->end;
	c->win = 1;
	w->wait[(w->wait_head + w->nwait++) % r->max_copies] = ci;
	return 1;
}

int rf__reader_window(rf__reader *r, size_t bytes)
{
	if (r == NULL)
		return rf__err(RF_EINVAL, "rf__reader_window: r is NULL");
	if (r->nfree_copies != r->max_copies || r->win.out != 0)
		return rf__err(RF_EBUSY, "rf__reader_window: copies in flight");
	rd_win *w = &r->win;
	if (w->map != NULL)
		munmap(w->map, w->map_len);
	unsigned *wait = w->wait;
	uint64_t copies = w->copies, rd = w->read;
	int online = w->online;
	size_t from = w->from;
	*w = (rd_win){.wait = wait, .copies = copies, .read = rd, .online = online, .from = from};
	r->gen++;
	if (bytes == 0)
		return RF_OK;
	size_t len = (bytes + RD_HUGE - 1) / RD_HUGE * RD_HUGE, map_len = len + RD_HUGE;
	void *m = mmap(NULL, map_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (m == MAP_FAILED)
		return rf__err(RF_ENOMEM, "rf__reader_window: mmap of %zu bytes: %s", map_len, strerror(errno));
	unsigned char *mem = (unsigned char *)(((uintptr_t)m + RD_HUGE - 1) / RD_HUGE * RD_HUGE);
#ifdef MADV_HUGEPAGE
	(void)madvise(mem, len, MADV_HUGEPAGE); /* a refusal leaves 4 KiB pages: slower, not wrong */
#endif
	memset(mem, 0, len); /* its pages now, not during a run */
	w->map = m, w->map_len = map_len, w->mem = mem, w->cap = bytes;
	return RF_OK;
}

void rf__reader_window_drop(rf__reader *r)
{
	rd_win *w = &r->win;
	w->expect = UINT64_MAX; /* no copy continues what is held: the next one starts afresh */
	if (w->out == 0 && w->nwait == 0)
		w->n = 0, w->head = 0;
}

void rf__reader_window_release(rf__reader *r)
{
	rd_win *w = &r->win;
	if (w->nwait != 0)
		return;
	while (w->out != 0) {
		rd_progress(r);
		if (w->out != 0)
			rf__reader_wait(r);
	}
	w->f = NULL, w->n = 0, w->head = 0, w->expect = UINT64_MAX;
}

void rf__reader_window_online(rf__reader *r, int on, size_t from)
{
	r->win.online = on != 0;
	r->win.from = from;
	r->win.chunk = 0, r->win.k = 0; /* the next window chooses afresh */
}

void rf__reader_window_get(const rf__reader *r, rf__reader_window_stats *out)
{
	*out = (rf__reader_window_stats){r->win.mem ? r->win.cap : 0, r->win.chunk, r->win.k, r->win.ahead.on,
					 r->win.copies, r->win.read};
}

/* Issue pieces of the pending copies, oldest first, while reads may be added; a copy leaves the list
 * once all its pieces are issued (or it failed: then it finishes here if none is still out). Window
 * copies whose chunks landed are served first, and the window reads ahead with what room is left. */
static void rd_top_up(rf__reader *r)
{
	for (;;) {
		uint64_t landed = r->win.landed;
		unsigned nwait = r->win.nwait;
		if (nwait > 0)
			rd_win_serve(r);
		rd_top_up_pending(r);
		if (r->win.f != NULL)
			rd_win_fill(r);
		/* a chunk read on the spot (pread), or chunks let go: serve and read ahead again */
		if (r->win.nwait == 0 || (r->win.landed == landed && r->win.nwait == nwait))
			return;
	}
}

static void rd_top_up_pending(rf__reader *r)
{
	while (r->nfree_pieces > 0 && r->npend > 0) {
		unsigned ci = r->pend[r->pend_head];
		rd_copy *c = &r->copies[ci];
		if (c->next < c->win_len) {
			unsigned pi = r->free_pieces[--r->nfree_pieces];
			size_t len = c->win_len - c->next < c->piece ? c->win_len - c->next : c->piece;
			r->pieces[pi] = (rd_piece){ci, c->win_off + c->next, len, c->dst + c->next, 0, 0};
			c->next += len;
			c->out++;
			rd_issue(r, pi);
		}
		if (c->next == c->win_len) {
			r->pend_head = (r->pend_head + 1) % r->max_copies;
			r->npend--;
			c->pending = 0;
			if (c->out == 0)
				rd_finish(r, ci);
		}
	}
}

/* The doorbell rang: consume its count, so that the next wait waits afresh; only if still readable (a
 * blocking eventfd whose count someone else took would block the read). */
static void rd_bell_drain(rf__reader *r)
{
	struct pollfd pf = {r->bell_fd, POLLIN, 0};
	if (poll(&pf, 1, 0) == 1 && (pf.revents & POLLIN)) {
		uint64_t v;
		ssize_t k = read(r->bell_fd, &v, sizeof v);
		(void)k;
	} else if (pf.revents & (POLLERR | POLLNVAL)) {
		r->bell_dead = 1;
	}
}

#ifdef RF_HAVE_LIBURING
/* io_uring_enter failed for good: pread from now on. The submissions the kernel has not taken are read
 * here (the ring is never submitted to again); reads it took still complete through the ring. */
static void rd_uring_broke(rf__reader *r, int err)
{
	snprintf(r->why, sizeof r->why, "io_uring failed: io_uring_enter: %s%s", strerror(err),
		 rd_transient(err) ? " (every try of " RD_TRIES_S ")" : "");
	r->uring = 0;
	r->gen++;
	unsigned k = io_uring_sq_ready(&r->ring), head = *r->ring.sq.khead;
	for (unsigned i = 0; i < k; i++) {
		uint64_t ud = r->ring.sq.sqes[(head + i) & *r->ring.sq.kring_mask].user_data;
		if (ud == RD_BELL)
			r->bell_armed = 0;
		else
			rd_pread(r, (unsigned)ud);
	}
}

/* io_uring_enter answered -rc (rc < 0) or took what it was given (rc >= 0). EAGAIN / EBUSY / EINTR leave
 * the submissions queued for the next call, after a pause, RD_TRIES times in a row at most; anything
 * else, or one more of them, gives the ring up. */
static void rd_entered(rf__reader *r, int rc)
{
	if (rc >= 0) {
		r->enter_fails = 0;
		return;
	}
	if (rd_transient(-rc) && ++r->enter_fails < RD_TRIES) {
		rd_backoff(r->enter_fails);
		return;
	}
	rd_uring_broke(r, -rc);
}

/* Hand the queued submissions to the kernel. */
static void rd_submit(rf__reader *r)
{
	if (!r->uring || io_uring_sq_ready(&r->ring) == 0)
		return;
	rd_entered(r, io_uring_submit(&r->ring));
}

static void rd_reap(rf__reader *r)
{
	struct io_uring_cqe *cqe;
	unsigned head, n = 0;
	int bell = 0;
	io_uring_for_each_cqe(&r->ring, head, cqe)
	{
		uint64_t ud = io_uring_cqe_get_data64(cqe);
		long res = cqe->res;
		n++;
		if (ud == RD_BELL) {
			r->bell_armed = 0;
			bell = 1;
			r->bell_dead |= res < 0 && res != -EINTR && res != -EAGAIN && res != -ECANCELED;
			continue;
		}
		/* The CQE stays until the advance below: a retry the piece queues lands in the SQ only. */
		rd_piece_done(r, (unsigned)ud, res);
	}
	io_uring_cq_advance(&r->ring, n);
	if (n > 0) /* the ring answers: an interrupted wait before this one was no refusal */
		r->enter_fails = 0;
	if (bell) {
		rd_bell_drain(r);
		r->bell_rang = 1;
	}
}
#else
#define rd_submit(r) ((void)(r))
#define rd_reap(r) ((void)(r))
#endif

/* Reap, issue what waits for room, submit. */
static void rd_progress(rf__reader *r)
{
	if (r->ring_open)
		rd_reap(r);
	rd_top_up(r);
	rd_submit(r);
}

#ifdef RF_HAVE_LIBURING
/* io_uring_setup failed for want of resources: try again (nothing in flight, nothing owed by a ring). */
static void rd_uring_again(rf__reader *r)
{
	rd_uring_init(r); /* sets setup_again and setup_at again if it fails the same way */
	if (!r->uring)
		return;
	r->setup_again = 0;
	r->why[0] = '\0';
	r->gen++;
	if (r->reg_tried) {
		r->reg_why[0] = '\0';
		rd_register(r);
	}
}
#endif

int rf__reader_start(rf__reader *r, const rf__fsrc *s, size_t n, unsigned char *dst, size_t dst_cap,
		     unsigned flags, uint64_t tag)
{
	return rf__reader_start_ahead(r, s, n, dst, dst_cap, flags, tag, 0);
}

int rf__reader_start_ahead(rf__reader *r, const rf__fsrc *s, size_t n, unsigned char *dst, size_t dst_cap,
			   unsigned flags, uint64_t tag, size_t ahead)
{
	static const char who[] = "rf__reader_start";
	if (r == NULL || s == NULL || s->f == NULL || dst == NULL || n == 0 || dst_cap < n || (flags & ~RF__RD_SHIFT_OK))
		return rf__err(RF_EINVAL, "%s: bad arguments", who);
	uint64_t size = rf_file_size(s->f);
	if (s->off > size || n > size - s->off)
		return rf__err(RF_EINVAL, "%s: %s: %zu bytes at offset %" PRIu64 " end past its %" PRIu64 " bytes", who,
			       s->f->path, n, s->off, size);
	if (r->nfree_copies == 0)
		return rf__err(RF_EBUSY, "%s: %u copies in flight", who, r->max_copies);
#ifdef RF_HAVE_LIBURING
	if (r->setup_again && r->nfree_copies == r->max_copies && rd_now() >= r->setup_at)
		rd_uring_again(r);
#endif
	unsigned ci = r->free_copies[--r->nfree_copies];
	rd_copy *c = &r->copies[ci];
	*c = (rd_copy){.tag = tag, .f = s->f, .dst = dst, .win_off = s->off, .win_len = n, .end = s->off + n, .n = n,
		       .cap = dst_cap, .flags = flags};
	if (!rd_win_take(r, ci, ahead))
		rd_setup(r, ci);
	rd_top_up(r);
	rd_submit(r);
	return RF_OK;
}

/* How copy ci (tag, f, dst, range, cap and flags filled in) is read on its own, and onto the pending
 * list with it. */
static void rd_setup(rf__reader *r, unsigned ci)
{
	rd_copy *c = &r->copies[ci];
	const rf__fsrc sv = {c->f, c->win_off}, *s = &sv;
	size_t n = c->n, dst_cap = c->cap;
	unsigned char *dst = c->dst;
	unsigned flags = c->flags;
	size_t a = rf__file_dio_align(s->f), ma = s->f->dio_mem_align;
	if (a != 0) {
		uint64_t wo = s->off / a * a, we = (s->off + n + a - 1) / a * a;
		size_t shift = (size_t)(s->off - wo), wl = (size_t)(we - wo);
		if (((uintptr_t)dst & (ma - 1)) == 0 && dst_cap >= wl) {
			c->method = RF__RD_MOVE;
			if (shift != 0 && !(flags & RF__RD_SHIFT_OK)) {
				c->cls = rf__reader_class(n);
				c->method = (unsigned)rf__reader_rule(&r->samples[c->cls]);
				c->timed = !rf__reader_rule_decided(&r->samples[c->cls]);
				c->t0 = c->timed ? rd_now() : 0;
				c->move = c->method == RF__RD_MOVE;
			}
			if (c->method == RF__RD_MOVE) {
				c->direct = 1;
				c->win_off = wo, c->win_len = wl, c->shift = shift;
			}
		}
	}
	c->piece = rf__reader_piece(c->win_len, c->direct ? a : 4096, s->f->io_max);
	r->pend[(r->pend_head + r->npend++) % r->max_copies] = ci;
	c->pending = 1;
}

int rf__reader_poll(rf__reader *r, uint64_t *tag, int *rc, size_t *shift)
{
	if (r->ndone == 0)
		rd_progress(r);
	if (r->ndone == 0)
		return 0;
	unsigned ci = r->done[r->done_head];
	r->done_head = (r->done_head + 1) % r->max_copies;
	r->ndone--;
	rd_copy *c = &r->copies[ci];
	*tag = c->tag;
	*rc = c->rc;
	if (c->rc != RF_OK)
		rd_explain(r, c);
	*shift = c->rc == RF_OK ? c->shift : 0;
	r->cnt.copies++;
	r->cnt.failed += c->rc != RF_OK;
	r->free_copies[r->nfree_copies++] = ci;
	return 1;
}

static unsigned rd_reads_out(const rf__reader *r)
{
	return RF__RD_QD - r->nfree_pieces;
}

void rf__reader_wait(rf__reader *r)
{
#ifdef RF_HAVE_LIBURING
	if (r->ring_open) /* what has come back already (a doorbell's ring too) is no reason to sleep */
		rd_progress(r);
	if (r->bell_rang) {
		r->bell_rang = 0;
		return;
	}
#endif
	if (r->ndone != 0)
		return;
#ifdef RF_HAVE_LIBURING
	if (r->uring) {
		if (r->bell_fd >= 0 && !r->bell_armed && !r->bell_dead) {
			struct io_uring_sqe *sqe = io_uring_get_sqe(&r->ring);
			if (sqe != NULL) {
				io_uring_prep_poll_add(sqe, r->bell_fd, POLLIN);
				io_uring_sqe_set_data64(sqe, RD_BELL);
				r->bell_armed = 1;
			}
		}
		if (rd_reads_out(r) == 0 && !r->bell_armed)
			return;
		int rc = io_uring_submit_and_wait(&r->ring, 1);
		rd_entered(r, rc == -ETIME ? 0 : rc);
		rd_progress(r); /* take what woke us now: a ring reaped here is this wait's reason to return */
		r->bell_rang = 0;
		return;
	}
	if (r->ring_open && rd_reads_out(r) != 0) { /* a broken ring still owes reads it took */
		struct io_uring_cqe *cqe;
		if (io_uring_wait_cqe(&r->ring, &cqe) < 0) /* they complete without us: no hot spin */
			rd_backoff(3);
		return;
	}
#endif
	if (r->bell_fd < 0 || r->bell_dead)
		return;
	struct pollfd pf = {r->bell_fd, POLLIN, 0};
	if (poll(&pf, 1, -1) == 1)
		rd_bell_drain(r);
}

int rf__reader_register(rf__reader *r, void *base, size_t len)
{
	if (r == NULL || (base == NULL && len > 0))
		return rf__err(RF_EINVAL, "rf__reader_register: %s", r == NULL ? "r is NULL" : "base is NULL");
	unsigned inflight = r->max_copies - r->nfree_copies;
	if (rd_reads_out(r) != 0 || inflight != 0)
		return rf__err(RF_EBUSY, "rf__reader_register: %u copies in flight", inflight);
#ifdef RF_HAVE_LIBURING
	if (r->uring && r->reg_base != NULL)
		io_uring_unregister_buffers(&r->ring);
#endif
	r->reg_base = NULL, r->reg_len = 0;
	r->reg_tried = len > 0;
	r->reg_why[0] = '\0';
	r->want_base = base, r->want_len = len;
	r->gen++;
	if (len == 0)
		return RF_OK;
	rd_register(r);
	return RF_OK;
}

/* Register the region asked for with the ring, or say why not. */
static void rd_register(rf__reader *r)
{
	void *base = r->want_base;
	size_t len = r->want_len;
#ifdef RF_HAVE_LIBURING
	if (r->uring) {
		struct iovec iov = {base, len};
		int rc = io_uring_register_buffers(&r->ring, &iov, 1);
		if (rc == 0) {
			r->reg_base = base, r->reg_len = len;
			return;
		}
		snprintf(r->reg_why, sizeof r->reg_why, "io_uring_register_buffers: %s%s", strerror(-rc),
			 rc == -ENOMEM || rc == -EPERM ? " (RLIMIT_MEMLOCK)" : "");
		return;
	}
#endif
	snprintf(r->reg_why, sizeof r->reg_why, "no io_uring");
}

void rf__reader_destroy(rf__reader *r)
{
	if (r == NULL)
		return;
#ifdef RF_HAVE_LIBURING
	/* The kernel writes the destinations until each read completes: wait for them. The doorbell's poll
	 * references no memory of ours; exit cancels it. */
	while (r->ring_open && rd_reads_out(r) != 0) {
		rd_submit(r);
		struct io_uring_cqe *cqe;
		if (r->ring_open && rd_reads_out(r) != 0 && io_uring_wait_cqe(&r->ring, &cqe) < 0)
			rd_backoff(3);
		rd_reap(r);
	}
	if (r->ring_open)
		io_uring_queue_exit(&r->ring);
#endif
	if (r->win.map != NULL)
		munmap(r->win.map, r->win.map_len);
	free(r->win.wait);
	free(r->copies);
	free(r->free_copies);
	free(r->done);
	free(r->pend);
	free(r);
}

unsigned rf__reader_reads_out(const rf__reader *r)
{
	return r->ring_open ? rd_reads_out(r) : 0;
}

unsigned rf__reader_gen(const rf__reader *r)
{
	return r->gen;
}

const char *rf__reader_error(const rf__reader *r)
{
	return r->err;
}

#ifdef RF_TESTING
unsigned rf__reader_inflight(const rf__reader *r)
{
	return r->max_copies - r->nfree_copies;
}

void rf__reader_counters_get(const rf__reader *r, rf__reader_counters *out)
{
	*out = r->cnt;
}
#endif

void rf__reader_describe(const rf__reader *r, char *buf, size_t cap)
{
	size_t len = 0;
#define RD_PUT(...)                                                                                        \
	do {                                                                                               \
		int k_ = snprintf(buf + len, len < cap ? cap - len : 0, __VA_ARGS__);                     \
		len += k_ > 0 ? (size_t)k_ : 0;                                                            \
	} while (0)
	if (cap == 0)
		return;
	if (r->uring)
		RD_PUT("io_uring, up to %u reads in flight", RF__RD_QD);
	else
		RD_PUT("pread (%s), one read at a time", r->why);
	RD_PUT(", O_DIRECT where the file and the range allow it");
	if (r->win.mem != NULL && r->win.chunk != 0)
	{
		const rf__rd_ahead *a = &r->win.ahead;
		RD_PUT(", read-ahead %u x %zuK in flight (blocks in file order", a->on, r->win.chunk >> 10);
		if (r->win.online) {
			RD_PUT("; %s online", a->settled ? "chosen" : "choosing");
			for (unsigned i = 0, first = 1; i < RF__RD_AHEAD_SETTINGS; i++)
				if (a->rate[i] > 0) {
					RD_PUT("%s %u: %.2f", first ? ", GB/s at" : "", 1u << i, a->rate[i] * 1e-9);
					first = 0;
				}
			unsigned i = 0;
			while ((2u << i) <= a->on && i + 1 < RF__RD_AHEAD_SETTINGS)
				i++;
			if (a->settled && i + 1 < RF__RD_AHEAD_SETTINGS && a->rate[i + 1] > 0)
				RD_PUT("; more did not pay");
		}
		RD_PUT(")");
	}
	else if (r->win.mem != NULL)
		RD_PUT(", read-ahead up to %zuK (blocks in file order)", r->win.cap >> 10);
	if (r->reg_base != NULL)
		RD_PUT(", slots registered");
	else if (r->reg_tried)
		RD_PUT(", slots not registered (%s)", r->reg_why);
	int first = 1;
	for (unsigned k = 0; k < RF__RD_CLASSES; k++) {
		if (!rf__reader_rule_decided(&r->samples[k]))
			continue;
		size_t lim = (size_t)4096 << k;
		int mib = lim >= ((size_t)1 << 20);
		RD_PUT("%s<=%zu%c %s", first ? ", unaligned ranges: " : ", ", lim >> (mib ? 20 : 10),
		       mib ? 'M' : 'K',
		       rf__reader_rule(&r->samples[k]) == RF__RD_MOVE ? "O_DIRECT+move" : "buffered");
		first = 0;
	}
#undef RD_PUT
}
