/* io/reader_int.h — internal to the reader (io/reader.h): its state and what its files share, in layers,
 * each file calling only those below it (what a lower one needs from above is passed down in the struct):
 *   io/reader.c  the reader object: io/reader.h's entry points;
 *   io/window.c  the read-ahead window;   io/pieces.c  a copy's pieces, retries, failures, the copy rule;
 *   io/ahead.c   the reads in flight chosen online: the ladder's rule, a setting measured as reads land;
 *   io/uring.c   reads made: the io_uring ring (submission, reaping, doorbell, registration) or pread. */
#ifndef RF_IO_READER_INT_H
#define RF_IO_READER_INT_H

#include "base/wait.h"
#include "io/file.h"
#include "io/reader.h"

#ifdef RF_HAVE_LIBURING
#include <liburing.h>
#endif
#define RD_BELL UINT64_MAX /* user_data of the doorbell's poll */
#define RD_SQ_ENTRIES 64u  /* the reads in flight, the doorbell, and room to spare */
#define RD_SETUP_AGAIN_NS 200000000 /* the least time between two tries of an io_uring_setup short of resources */

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
	unsigned char direct, move, timed, pending;
	unsigned char uncache; /* read through the page cache for want of the ring: its pages dropped after */
	unsigned cls, method;
	size_t cap;      /* dst_cap, and the start's flags: for a window copy that is read on its own */
	unsigned flags;
	int64_t t0; /* rf__now_ns at its start, when timed */
	/* the first failure, put into words when poll hands the copy back */
	int err_no;           /* errno of a failed read, or 0 for a short one */
	uint64_t err_off;     /* its offset */
	uint64_t err_size;    /* short: the file's size then (UINT64_MAX: unknown) */
	size_t err_len, err_got;
} rd_copy;

/* A measurement of a setting chosen online (rf__reader_ahead: the window's chunks, or the reads of copies
 * read on their own) in progress: rounds of `on` reads landed, each round timed. */
typedef struct rd_meas {
	int64_t t0, last;      /* its start (0: none in progress), the last round's end (ns) */
	double sum, sq;        /* the rounds' rates: their sum, their squares' */
	uint64_t bytes, round; /* bytes landed in it, in its round so far */
	unsigned landed;
} rd_meas;

/* The read-ahead window (rf__reader_window): chunks, each one request, in file order. */
#define RD_WIN_MAX 32u           /* chunks at most: each one read, as many as the ring keeps in flight */
#define RD_CHUNK 0x80000000u     /* rd_piece.copy of a chunk's read (low bits: the chunk) */
#define RD_HUGE ((size_t)2 << 20) /* the window's mapping is aligned to a huge page */
enum { RD_CH_OUT = 1, RD_CH_IN, RD_CH_BAD };

typedef struct rd_chunk {
	uint64_t off, lim; /* the file range it was read for */
	uint64_t end;      /* its bytes are good up to here (<= lim: the file ended) */
	unsigned char state;
	unsigned char buf; /* its memory: mem + buf * chunk */
} rd_chunk;

typedef struct rd_win {
	unsigned char *mem; /* cap bytes: k buffers of a chunk each */
	size_t cap, map_len;
	size_t touched;     /* bytes of mem faulted in so far (from its start) */
	/* buffers not held: given back ones (last in, first out) above the never used ones, so that a
	 * window that reads few chunks ahead touches few buffers' pages */
	unsigned char fbuf[RD_WIN_MAX];
	unsigned nfbuf, fresh; /* given back; the first buffer never used for this chunk size */
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
	rf__reader_ahead ahead; /* chunks read ahead at once: ahead.on (all k when not online) */
	rd_meas m;          /* the measurement of ahead.on in progress */
} rd_win;

typedef struct rd_piece {
	unsigned copy;
	uint64_t off;
	size_t len;
	unsigned char *dst;
	unsigned tries;   /* EAGAIN / EBUSY / EINTR answers in a row from the ring */
	int by_pread;     /* the last answer came from rf__reader_pread (which retries on its own) */
} rd_piece;

struct rf__reader {
	/* passed down by io/reader.c: what a read that came back goes to (rf__reader_done), the window's rule */
	void (*read_done)(rf__reader *r, unsigned pi, long res);
	unsigned (*ahead_rule)(rf__reader_ahead *a, double rate, double err); /* rf__reader_ahead_rule */
	unsigned max_copies;
	int bell_fd;
	int uring;       /* reads go through the ring */
	int ring_open;   /* the ring exists (it may outlive uring after a failure, for reads it owes) */
	int bell_armed;  /* a poll of bell_fd is in the ring */
	int bell_dead;   /* polling it failed: wait no longer counts on it */
	int bell_rang;   /* reaped a ring of the doorbell that no wait has returned for yet */
	unsigned enter_fails; /* io_uring_enter answered EAGAIN / EBUSY / EINTR, times in a row */
	int setup_again; /* io_uring_setup failed for want of a descriptor or memory: try again when idle */
	int64_t setup_at; /* not before this time (rf__now_ns) */
	unsigned gen;    /* bumped whenever what describe says changes */
	char why[160];   /* why pread: io_uring refused, or failed */
	char err[512];   /* the last RF_EIO */
	void *reg_base;  /* the registered region, when registered */
	size_t reg_len;
	void *want_base; /* the region asked for (registered once a ring exists) */
	size_t want_len;  /* 0: none asked for */
	char reg_why[96];
	rd_copy *copies;
	unsigned *free_copies, nfree_copies;
	/* FIFO of copies with pieces not yet issued, max_copies long; a failed copy stays listed (and
	 * unfinished) until it reaches the head */
	unsigned *pend, pend_head, npend;
	unsigned *done, done_head, ndone; /* FIFO of finished copies, max_copies long */
	rd_piece pieces[RF__READER_QD];
	unsigned free_pieces[RF__READER_QD], nfree_pieces;
	/* The reads of copies read on their own, chosen online (rf__reader_reads_online): while reads_online,
	 * at most reads.on of their pieces in flight, counted in pieces of reads_piece bytes (0: not started:
	 * the first such copy with O_DIRECT through the ring starts it). copy_out: their pieces in flight. */
	int reads_online;
	size_t reads_from, reads_piece;
	rf__reader_ahead reads;
	rd_meas reads_m;
	unsigned copy_out;
	rf__reader_samples samples[RF__READER_CLASSES];
	rf__reader_counters cnt;
	rd_win win;
#ifdef RF_HAVE_LIBURING
	struct io_uring ring;
#endif
};

/* io/pieces.c */
void rf__reader_setup(rf__reader *r, unsigned ci);   /* how copy ci is read on its own; onto the pending list */
void rf__reader_top_up_pending(rf__reader *r);       /* issue pending copies' pieces while reads may be added */
void rf__reader_issue(rf__reader *r, unsigned pi);   /* start piece pi: a submission, or a pread done now */
void rf__reader_piece_done(rf__reader *r, unsigned pi, long res); /* copy piece pi came back */
void rf__reader_retry(rf__reader *r, unsigned pi);   /* a refused read again, or by pread */
void rf__reader_rest(rf__reader *r, unsigned pi, long res); /* the rest of a partial read */
void rf__reader_finish(rf__reader *r, unsigned ci);  /* every piece back: queue copy ci for poll */
void rf__reader_explain(rf__reader *r, const rd_copy *c); /* failed copy c's sentence into r->err */
/* io/ahead.c */
void rf__reader_meas_start(rd_meas *m); /* a read of the setting measured is issued: its clock starts */
/* A read of the setting a->on measured landed `bytes`: each a->on reads a round, and after
 * RF__READER_AHEAD_ROUNDS rounds the rule (r->ahead_rule) sets the next a->on. */
void rf__reader_meas_landed(rf__reader *r, rf__reader_ahead *a, rd_meas *m, uint64_t bytes);
/* io/window.c */
void rf__reader_done(rf__reader *r, unsigned pi, long res); /* read pi came back: a chunk's, or a copy's piece */
void rf__reader_win_serve(rf__reader *r);
void rf__reader_win_fill(rf__reader *r);
void rf__reader_win_clear(rf__reader *r); /* let go of the chunks held (none in flight) */
int rf__reader_win_take(rf__reader *r, unsigned ci, size_t ahead);
/* io/uring.c: what comes back goes to r->read_done. Without liburing no ring; what needs one is a no-op. */
/* pread piece pi from fd to its end (or EOF, or an error) and complete it on the spot (r->read_done) */
void rf__reader_pread(rf__reader *r, unsigned pi, int fd);
void rf__reader_uring_init(rf__reader *r);  /* set up the ring, or say in r->why why not */
void rf__reader_bell_drain(rf__reader *r);  /* consume the doorbell's count */
/* let go of the region registered; the one asked for (r->want_*) registered with the ring, or why not */
void rf__reader_ring_register(rf__reader *r);
#ifdef RF_HAVE_LIBURING
/* an io_uring_setup short of resources, again (nothing in flight, nothing owed by a ring) */
void rf__reader_uring_again(rf__reader *r);
void rf__reader_uring_close(rf__reader *r); /* wait for the reads the ring owes, and close it */
int rf__reader_uring_queue(rf__reader *r, unsigned pi, int fd); /* piece pi as a submission: 1, or 0 (none) */
int rf__reader_uring_wait(rf__reader *r);   /* rf__reader_wait on a ring: 2 slept in it, 1 waited or need not */
void rf__reader_submit(rf__reader *r);      /* hand the queued submissions to the kernel */
void rf__reader_reap(rf__reader *r);        /* complete what the ring has handed back */
#else
#define rf__reader_uring_again(r) ((void)(r))
#define rf__reader_uring_close(r) ((void)(r))
#define rf__reader_uring_queue(r, pi, fd) ((void)(r), (void)(pi), (void)(fd), 0)
#define rf__reader_uring_wait(r) ((void)(r), 0)
#define rf__reader_submit(r) ((void)(r))
#define rf__reader_reap(r) ((void)(r))
#endif

static inline unsigned rf__reader_ring_reads(const rf__reader *r)
{
	return RF__READER_QD - r->nfree_pieces;
}

#endif
