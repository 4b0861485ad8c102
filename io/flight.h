/* io/flight.h — a lane's asynchronous copies (file reads, io/reader.h) and the signals queued
 * behind them.
 *
 * A file copy starts its reads and returns, so one lane keeps several copies in flight. A signal
 * ("this queue has done everything up to here") issued while copies are in flight is queued and
 * stored (then the eventcount notified) once every copy started before it has landed, in order. A
 * thread waiting on the lane calls rf__flight_progress and sleeps in the reader (rf__flight_sleep),
 * woken by the lane's bell. A failed run copy (RF_EIO) stops the lane: its later signals are dropped,
 * so no compute sees a block that did not land. A failed keyed copy sets *fail_at = fail_value and its
 * signal still goes out, in order. What a landed copy means to its owner (a trace slice, where a
 * staging slot's bytes begin) is the owner's hook's to record: the flight knows nothing above io/. */
#ifndef RF_IO_FLIGHT_H
#define RF_IO_FLIGHT_H

#include "base/pool.h"
#include "base/wait.h"
#include "io/file.h"
#include "io/reader.h"

#include <stdatomic.h>
#include <stdint.h>

#define RF__FLIGHT_MAX 64u /* copies one lane keeps in flight */

/* What to do when a copy lands: tell the owner's hook (a trace slice), let go of the file, mark a keyed
 * failure. */
typedef struct rf__flight_rec {
	int64_t t0; /* the hook's: stamped when the copy starts (RF__FLIGHT_STARTS) */
	uint64_t s0;
	int64_t block; /* the owner's names of the copy, for its hook */
	uint32_t slot, node;
	uint8_t queue;
	uint8_t kind;              /* RF_OP_COPY (0) or RF_OP_STAGE: what its trace slice says */
	uint8_t traced;            /* tell f->hook when it starts and when it lands */
	rf_file *unhold;           /* let go of this file once landed (NULL: the caller holds it) */
	_Atomic int64_t *fail_at;  /* keyed: set to fail_value when the copy fails */
	int64_t fail_value;
	unsigned char *dst;        /* where it writes (set by rf__flight_start) */
	size_t len;
	unsigned flags;            /* rf__reader_start's (RF__READER_SHIFT_OK) */
	size_t shift;              /* once landed: its bytes begin at dst + shift */
	uint8_t done;
	int rc;
	size_t ahead; /* bytes of the same file the walk copies next, in order (rf__reader_start_ahead) */
} rf__flight_rec;

/* The owner's hook on its traced copies: phase RF__FLIGHT_STARTS before any wait for room (r: the
 * copy's record, to stamp), RF__FLIGHT_LANDED once it landed (r->rc says how). The flight's thread. */
enum { RF__FLIGHT_STARTS, RF__FLIGHT_LANDED };
typedef void rf__flight_hook(void *ctx, rf__flight_rec *r, int phase);

typedef struct rf__flight {
	_Atomic(rf__reader *) rd; /* NULL until rf__flight_open (the owner publishes it to the lane) */
	int bell;        /* eventfd: the lane's bell slot in ec */
	unsigned bell_slot;
	rf__ec *ec;
	_Atomic int64_t *value; /* the queue's value */
	uint64_t started, upto; /* copies started; the oldest not yet landed */
	uint64_t idle_seen;     /* `started` at the last rf__flight_idle */
	rf__flight_rec rec[RF__FLIGHT_MAX];
	/* queued signals, oldest first: value, where, and the copies that land first (`after` grows per
	 * place, so firing in order keeps each place's order) */
	struct {
		int64_t v;
		_Atomic int64_t *q;
		uint64_t after;
	} sig[RF__FLIGHT_MAX + 1];
	unsigned sn;
	int failed;          /* a run's copy failed: drop the signals behind it */
	int reported;        /* and rf__flight_reap said so */
	char msg[240];       /* its sentence */
	char last[240];      /* the sentence of the last failed copy (a blocking read's) */
	rf__flight_hook *hook;   /* told of traced copies (a run's trace, while a run is in progress) */
	void *hook_ctx;
	atomic_uint inflight;   /* copies in flight, for other threads deciding how to wait */
	char why[320];       /* how the reader reads (describe), once open; rf__flight_refresh renews it */
	unsigned why_gen;    /* rf__reader_gen when `why` was written */
	char bell_why[80];   /* why there is no bell ("" when there is, or none was wanted) */
	/* A lane's flight: the engine's, told whenever `why` is written (NULL: none). Set by the backend
	 * at open; bell_slot names the lane. */
	struct rf__flight *report;
	/* The engine's flight: `why` of the lane whose reader changed last, and a count of such reports,
	 * under lanes_lock (lanes report from their threads; the engine reads from its own). */
	atomic_flag lanes_lock;
	char lanes_why[320];
	unsigned lanes_no;
	atomic_uint lanes_gen; /* bumped (release) after each report; read without the lock to see if any */
	/* The read-ahead window (rf__reader_window) a walk of small contiguous file blocks may map, in bytes
	 * (0: none; set by the owner before the first run), and whether it was mapped (1) or refused (-1). */
	size_t window;
	int window_state;
	int window_online; /* its chunks in flight chosen online (depth = auto), from window_from bytes */
	size_t window_from;
	size_t window_block; /* the largest block read ahead (a larger one is large requests of its own) */
	/* Set by the owner for the next run: its blocks are read straight into their slots, never through
	 * the window (straight), and their reads in flight chosen online from window_from bytes
	 * (reads_online: rf__reader_reads_online, the cap lifted at the run's end). */
	int straight, reads_online;
	/* A run on the flight's thread (rf__flight_run_start .. rf__flight_run_end), and whether its reads kept
	 * its compute waiting: from the first copy's landing (no depth hides the first read), the time slept
	 * for reads, the copies landed, the most in flight at once and the largest. */
	int run_on;
	int64_t run_first, run_waited;
	uint64_t run_copies, run_win0; /* run_win0: the window's copies at the run's start */
	unsigned run_most;
	size_t run_block;
	/* With the read-ahead fixed (not depth = auto): what the last run long enough to say found, in words
	 * for describe ("" when its reads kept up), and a count of its changes. */
	char fill[200];
	unsigned fill_depth, fill_gen; /* fill_depth: the depth it names (RF__FLIGHT_MAX + 1: more than a lane keeps) */
} rf__flight;

/* A run's reads against its compute (a pure rule, tested on its own): elapsed ns from its first copy's
 * landing to its end, of which it slept `waited` ns for reads, with `ahead` bytes read ahead of the
 * compute while it computed, in blocks of `block` bytes. The depth whose reads ahead (depth - 1 blocks) would keep
 * the compute fed at the same latency per read (Little's law: in flight = rate x latency, and the rate the
 * compute would take is elapsed / (elapsed - waited) times the one measured): the least depth that
 * holds, rounded up; 0 when the compute waited under a tenth of the time (the reads were not what held
 * it) or there is nothing to go by. */
unsigned rf__flight_fill_depth(double elapsed, double waited, double ahead, size_t block);

/* No reader yet. value: the queue's counter; ec/bell_slot: where the lane sleeps. */
void rf__flight_init(rf__flight *f, rf__ec *ec, unsigned bell_slot, _Atomic int64_t *value);
/* Make the reader and the bell if not yet there, registering [base, base + len) (the ring). RF_OK,
 * RF_ENOMEM (the reader's memory). A bell that cannot be made (EMFILE) is done without: the lane naps
 * instead of sleeping on it, and `why` says so. On the owner's thread, while the lane is idle. */
int rf__flight_open(rf__flight *f, void *base, size_t len);
/* Rewrite `why` if what the reader would say has changed since (a class's rule decided, io_uring given
 * up or set up again): 1 if it did, 0 if not or not open. The reader's thread. */
int rf__flight_refresh(rf__flight *f);
/* The engine's flight f: the lane whose reader changed last (its `why` into buf, cap bytes, its number
 * into *lane); buf "" before any. Any thread. f->lanes_gen says whether a report came since. */
void rf__flight_lanes(rf__flight *f, char *buf, size_t cap, unsigned *lane);
/* Wait for every copy in flight, free the reader and the bell. */
void rf__flight_fini(rf__flight *f);

/* Start the reads of one copy (the lane's thread), waiting for room when RF__FLIGHT_MAX copies are in
 * flight. RF_OK; RF_EINVAL (the reader refused the range). */
int rf__flight_start(rf__flight *f, const rf__fsrc *s, size_t n, unsigned char *dst, size_t cap,
		     const rf__flight_rec *rec);
/* Wait until no read in flight writes [dst, dst + len): a read in flight has not written yet, and a
 * later copy into the same bytes must not overtake it. */
void rf__flight_wait_dst(rf__flight *f, const unsigned char *dst, size_t len);
/* Store v into *q (NULL: the lane's queue value) once every copy started so far has landed, then
 * notify the eventcount (if any). */
void rf__flight_signal(rf__flight *f, _Atomic int64_t *q, int64_t v);
/* The same, once the copies before the `after`-th (a value of f->started) have landed: a flight that
 * carries several queues' copies holds a signal back only behind its own queue's. `after` never
 * decreases from one call to the next for one q. */
void rf__flight_signal_after(rf__flight *f, _Atomic int64_t *q, int64_t v, uint64_t after);
/* Reap landed copies and fire the signals they free. 1 while copies are still in flight. */
int rf__flight_progress(rf__flight *f);
/* A lane's idle() (base/pool.h): progress, then RF__LANE_BUSY while copies are in flight, RF__LANE_READ
 * if copies were started since the last call (and all landed: a blocking read's did at once), else 0. */
int rf__flight_idle(rf__flight *f);
/* A lane's walk of a run starts: none of its copies has failed yet. */
static inline void rf__flight_walk_start(rf__flight *f)
{
	f->failed = 0;
	f->reported = 0;
}
/* A lane's reap between the steps of its walk (inline: a waiting lane's predicate calls it):
 * rf__flight_progress; RF_EIO the first time one of the run's copies is seen failed since
 * rf__flight_walk_start (the lane fails its run, once), else RF_OK. */
static inline int rf__flight_reap(rf__flight *f)
{
	rf__flight_progress(f);
	if (!f->failed || f->reported)
		return RF_OK;
	f->reported = 1;
	return RF_EIO;
}
/* Sleep until a copy may have landed or the bell rang (rf__ec_wait_bell's sleep). */
void rf__flight_sleep(void *f);
/* Whether the flight's reads are asynchronous (its reader reads through io_uring); 0 before it is open. */
int rf__flight_async(rf__flight *f);
/* Copies in flight (the lane's view). */
static inline int rf__flight_busy(const rf__flight *f)
{
	return f->started != f->upto;
}

/* A run's start on the flight's thread: what the window holds is forgotten (the file may have changed),
 * and the window is mapped if the run's blocks want one (small and contiguous: first_small) and it is
 * not yet. A refusal (no memory) leaves the reads as they were; describe says so. */
void rf__flight_run_start(rf__flight *f, int first_small);
/* A run's end, once its copies have landed: the window's reads ahead too (its files may be closed). With
 * the read-ahead fixed, f->fill says whether the reads of a run that went through (ok) kept its compute
 * waiting (rf__flight_fill_depth); one stopped early (a failed compute or read, a cancel) says nothing. */
void rf__flight_run_end(rf__flight *f, int ok);

/* A blocking read on the calling thread, with rf__reader_start's flags: *shift says where the bytes
 * begin (RF__READER_SHIFT_OK). RF_OK, or RF_EIO / RF_EINVAL with rf_errmsg set. */
int rf__flight_read_shifted(rf__flight *f, const rf__fsrc *s, size_t n, unsigned char *dst, size_t cap,
			    unsigned flags, size_t *shift);
/* The same where the bytes land at dst (flags without RF__READER_SHIFT_OK). */
static inline int rf__flight_read(rf__flight *f, const rf__fsrc *s, size_t n, unsigned char *dst, size_t cap,
				  unsigned flags)
{
	size_t shift;
	return rf__flight_read_shifted(f, s, n, dst, cap, flags, &shift);
}

#endif
