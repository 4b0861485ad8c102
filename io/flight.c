/* io/flight.c — a lane's copies in flight and the signals behind them (io/flight.h). */
#define _GNU_SOURCE /* eventfd */
#include "io/flight.h"
#include "base/error.h"
#include "base/test_hooks.h"

#include <errno.h>
#include <math.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

void rf__flight_init(rf__flight *f, rf__ec *ec, unsigned bell_slot, _Atomic int64_t *value)
{
	memset(f, 0, sizeof *f);
	atomic_flag_clear(&f->lanes_lock);
	f->bell = -1;
	f->ec = ec;
	f->bell_slot = bell_slot;
	f->value = value;
}

/* The reader (the owner published it before posting the work that uses it). */
static rf__reader *rf__flight_rd(const rf__flight *f)
{
	return atomic_load_explicit(&((rf__flight *)f)->rd, memory_order_acquire);
}

static void rf__flight_lock(rf__flight *f)
{
	while (atomic_flag_test_and_set_explicit(&f->lanes_lock, memory_order_acquire))
		sched_yield(); /* held for a copy of a line */
}

static void rf__flight_unlock(rf__flight *f)
{
	atomic_flag_clear_explicit(&f->lanes_lock, memory_order_release);
}

/* f->why from the reader as it reads now, and the doorbell's absence; a lane tells the engine. */
static void rf__flight_describe(rf__flight *f, const rf__reader *rd)
{
	f->why_gen = rf__reader_gen(rd);
	rf__reader_describe(rd, f->why, sizeof f->why);
	size_t n = strlen(f->why);
	if (f->bell_why[0] != '\0' && n < sizeof f->why)
		snprintf(f->why + n, sizeof f->why - n, "; no doorbell (%s)", f->bell_why);
	rf__flight *e = f->report;
	if (e == NULL)
		return;
	rf__flight_lock(e);
	memcpy(e->lanes_why, f->why, sizeof e->lanes_why);
	e->lanes_no = f->bell_slot;
	atomic_fetch_add_explicit(&e->lanes_gen, 1, memory_order_release);
	rf__flight_unlock(e);
}

void rf__flight_lanes(rf__flight *f, char *buf, size_t cap, unsigned *lane)
{
	rf__flight_lock(f);
	snprintf(buf, cap, "%s", f->lanes_why);
	*lane = f->lanes_no;
	rf__flight_unlock(f);
}

int rf__flight_async(rf__flight *f)
{
	rf__reader *rd = rf__flight_rd(f);
	return rd != NULL && rf__reader_async(rd);
}

int rf__flight_open(rf__flight *f, void *base, size_t len)
{
	if (rf__flight_rd(f) != NULL)
		return RF_OK;
	/* Out of descriptors (EMFILE at a pipeline's first file use) is no reason to fail the run: without
	 * its bell the lane still hears of its reads (rf__flight_sleep), and the reader falls back to pread
	 * if io_uring_setup is short of descriptors too, and tries it again later. */
	f->bell_why[0] = '\0';
	if (f->ec != NULL && (f->bell = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) < 0)
		snprintf(f->bell_why, sizeof f->bell_why, "eventfd: %s", strerror(errno));
	rf__reader *rd;
	int rc = rf__reader_create(RF__FLIGHT_MAX, f->bell, &rd);
	if (rc != RF_OK) {
		if (f->bell >= 0)
			close(f->bell);
		f->bell = -1;
		return rc;
	}
	if (base != NULL && len > 0)
		(void)rf__reader_register(rd, base, len); /* a refusal is said in describe */
	rf__flight_describe(f, rd);
	if (f->ec != NULL)
		rf__ec_set_bell(f->ec, f->bell_slot, f->bell);
	atomic_store_explicit(&f->rd, rd, memory_order_release);
	return RF_OK;
}

void rf__flight_fini(rf__flight *f)
{
	rf__reader *rd = rf__flight_rd(f);
	if (rd == NULL)
		return;
	f->report = NULL; /* the engine may be going too: nothing more to say */
	while (rf__flight_busy(f))
		if (rf__flight_progress(f))
			rf__reader_wait(rd);
	rf__reader_destroy(rd);
	atomic_store_explicit(&f->rd, NULL, memory_order_relaxed);
	if (f->ec != NULL)
		rf__ec_set_bell(f->ec, f->bell_slot, -1);
	if (f->bell >= 0)
		close(f->bell);
	f->bell = -1;
}

static void rf__flight_store(rf__flight *f, _Atomic int64_t *q, int64_t v)
{
	atomic_store_explicit(q, v, memory_order_release);
	if (f->ec != NULL)
		rf__ec_notify(f->ec);
}

/* Fire the queued signals whose copies have all landed, oldest first; the others stay queued in order. */
static void rf__flight_fire(rf__flight *f)
{
	if (f->failed) { /* a run's copy failed: nothing behind it may be announced */
		f->sn = 0;
		return;
	}
	unsigned k = 0;
	for (unsigned i = 0; i < f->sn; i++) {
		if (f->sig[i].after <= f->upto)
			rf__flight_store(f, f->sig[i].q, f->sig[i].v);
		else
			f->sig[k++] = f->sig[i];
	}
	f->sn = k;
}

/* Copy `tag` landed with rc. */
static void rf__flight_landed(rf__flight *f, uint64_t tag, int rc, size_t shift)
{
	rf__flight_rec *r = &f->rec[tag % RF__FLIGHT_MAX];
	r->done = 1;
	r->rc = rc;
	r->shift = shift;
	if (rc != RF_OK) {
		snprintf(f->last, sizeof f->last, "%s", rf__reader_error(rf__flight_rd(f)));
		if (r->fail_at != NULL) {
			atomic_store_explicit(r->fail_at, r->fail_value, memory_order_release);
		} else if (!f->failed) {
			f->failed = 1;
			snprintf(f->msg, sizeof f->msg, "%s", f->last);
		}
	}
	if (r->traced && f->hook != NULL)
		f->hook(f->hook_ctx, r, RF__FLIGHT_LANDED);
	if (r->unhold != NULL)
		rf__file_unhold(r->unhold);
	if (f->run_on && f->run_first == 0)
		f->run_first = rf__now_ns(), f->run_waited = 0; /* the first read: no depth hides it */
	f->run_copies += f->run_on && rc == RF_OK;
	while (f->upto < f->started && f->rec[f->upto % RF__FLIGHT_MAX].done)
		f->upto++;
	atomic_store_explicit(&f->inflight, (unsigned)(f->started - f->upto), memory_order_relaxed);
}

int rf__flight_progress(rf__flight *f)
{
	rf__reader *rd = rf__flight_rd(f);
	if (rd == NULL)
		return 0;
	uint64_t tag;
	int rc;
	size_t shift;
	while (rf__reader_poll(rd, &tag, &rc, &shift))
		rf__flight_landed(f, tag, rc, shift);
	rf__flight_fire(f);
	(void)rf__flight_refresh(f); /* what it landed may have changed how the reader reads */
	return rf__flight_busy(f);
}

int rf__flight_idle(rf__flight *f)
{
	if (rf__flight_progress(f))
		return RF__LANE_BUSY;
	if (f->idle_seen == f->started)
		return 0;
	f->idle_seen = f->started;
	return RF__LANE_READ;
}

int rf__flight_refresh(rf__flight *f)
{
	rf__reader *rd = rf__flight_rd(f);
	if (rd == NULL || rf__reader_gen(rd) == f->why_gen)
		return 0;
	rf__flight_describe(f, rd);
	return 1;
}

void rf__flight_sleep(void *arg)
{
	rf__flight *f = arg;
	rf__reader *rd = rf__flight_rd(f);
	/* A lane without its bell (no descriptor was left for it) would come straight back from a reader
	 * with no read in flight, and spin: it naps instead, and hears of the other queues within 100 us. */
	if (f->ec != NULL && f->bell < 0 && rf__reader_reads_out(rd) == 0) {
		struct timespec d = {0, 100000};
		nanosleep(&d, NULL);
		return;
	}
	int64_t t0 = f->run_on ? rf__now_ns() : 0;
	rf__reader_wait(rd);
	if (t0 != 0)
		f->run_waited += rf__now_ns() - t0;
}

int rf__flight_start(rf__flight *f, const rf__fsrc *s, size_t n, unsigned char *dst, size_t cap,
		     const rf__flight_rec *rec)
{
	uint64_t tag = f->started;
	rf__reader *rd = rf__flight_rd(f);
	rf__flight_rec stamped = *rec; /* the slice starts before any wait for room */
	if (rec->traced && f->hook != NULL)
		f->hook(f->hook_ctx, &stamped, RF__FLIGHT_STARTS);
	for (;;) {
		if (f->started - f->upto < RF__FLIGHT_MAX) {
			int rc = rf__reader_start_ahead(rd, s, n, dst, cap, rec->flags, tag, rec->ahead);
			if (rc == RF_OK)
				break;
			if (rc != RF_EBUSY)
				return rf__err(rc, "file copy: %s", rf__errmsg_peek());
		}
		if (rf__flight_progress(f))
			rf__reader_wait(rd);
	}
	rf__flight_rec *r = &f->rec[tag % RF__FLIGHT_MAX];
	*r = stamped;
	r->dst = dst;
	r->len = n > cap ? n : cap;
	r->done = 0;
	f->started++;
	atomic_store_explicit(&f->inflight, (unsigned)(f->started - f->upto), memory_order_relaxed);
	if (f->run_on) {
		unsigned k = (unsigned)(f->started - f->upto);
		f->run_most = k > f->run_most ? k : f->run_most;
		f->run_block = n > f->run_block ? n : f->run_block;
	}
	if (RF__TEST_HOOK(flight_started) != NULL)
		RF__TEST_HOOK(flight_started)((unsigned)(f->started - f->upto));
	return RF_OK;
}

static int rf__flight_writes(const rf__flight *f, const unsigned char *dst, size_t len)
{
	for (uint64_t i = f->upto; i < f->started; i++) {
		const rf__flight_rec *r = &f->rec[i % RF__FLIGHT_MAX];
		if (!r->done && r->dst < dst + len && dst < r->dst + r->len)
			return 1;
	}
	return 0;
}

void rf__flight_wait_dst(rf__flight *f, const unsigned char *dst, size_t len)
{
	while (rf__flight_busy(f) && rf__flight_writes(f, dst, len))
		if (rf__flight_progress(f) && rf__flight_writes(f, dst, len))
			rf__reader_wait(rf__flight_rd(f));
}

void rf__flight_signal_after(rf__flight *f, _Atomic int64_t *q, int64_t v, uint64_t after)
{
	q = q != NULL ? q : f->value;
	/* Its copies have landed: at once (nothing queued for q is older: those wait for copies in flight). */
	if (after <= f->upto) {
		if (!f->failed)
			rf__flight_store(f, q, v);
		return;
	}
	/* A place gets at most one queued signal per copy of its own plus one: waiting for room happens
	 * only in a program that signals a place twice between its copies. */
	while (f->sn == RF__FLIGHT_MAX + 1)
		if (rf__flight_progress(f) && f->sn == RF__FLIGHT_MAX + 1)
			rf__reader_wait(rf__flight_rd(f));
	f->sig[f->sn].v = v;
	f->sig[f->sn].q = q;
	f->sig[f->sn++].after = after;
	rf__flight_fire(f);
}

void rf__flight_signal(rf__flight *f, _Atomic int64_t *q, int64_t v)
{
	rf__flight_signal_after(f, q, v, f->started);
}

void rf__flight_run_start(rf__flight *f, int first_small)
{
	rf__reader *rd = rf__flight_rd(f);
	if (rd == NULL)
		return;
	rf__reader_window_stats ws;
	rf__reader_window_get(rd, &ws);
	f->run_on = 1, f->run_first = 0, f->run_waited = 0, f->run_copies = 0, f->run_most = 0, f->run_block = 0;
	f->run_win0 = ws.copies;
	rf__reader_window_drop(rd);
	if (f->reads_online)
		rf__reader_reads_online(rd, 1, f->window_from);
	if (!first_small || f->window == 0 || f->window_state != 0 || rf__flight_busy(f))
		return;
	f->window_state = rf__reader_window(rd, f->window) == RF_OK ? 1 : -1;
	rf__reader_window_online(rd, f->window_online, f->window_from);
	rf__flight_describe(f, rd);
}

unsigned rf__flight_fill_depth(double elapsed, double waited, double ahead, size_t block)
{
	if (!(elapsed > 0) || !(ahead > 0) || block == 0 || waited < elapsed / 10)
		return 0;
	double fed = elapsed - waited, need = ahead / (double)block * elapsed / (fed > elapsed / 1e3 ? fed : elapsed / 1e3);
	return need >= RF__FLIGHT_MAX ? RF__FLIGHT_MAX + 1 : 1 + (unsigned)ceil(need - 1e-9);
}

/* With the read-ahead fixed: what the run's reads say of its depth, into f->fill (a run too short to say
 * leaves the last words). A ring of depth d keeps d - 1 blocks read ahead while it computes (d copies in
 * flight at most); a window its chunks. */
static void rf__flight_judge(rf__flight *f, rf__reader *rd)
{
	if (f->window_online || f->run_first == 0 || f->run_most < 2 || f->run_copies < 4 * (uint64_t)f->run_most)
		return;
	int64_t elapsed = rf__now_ns() - f->run_first, waited = f->run_waited;
	if (RF__TEST_HOOK(flight_run_end) != NULL)
		RF__TEST_HOOK(flight_run_end)(&elapsed, &waited);
	rf__reader_window_stats ws;
	rf__reader_window_get(rd, &ws);
	int win = ws.copies != f->run_win0;
	double ahead = win ? (double)ws.on * (double)ws.chunk : (double)(f->run_most - 1) * (double)f->run_block;
	unsigned d = rf__flight_fill_depth((double)elapsed, (double)waited, ahead, f->run_block);
	char w[sizeof f->fill] = "";
	int pct = elapsed > 0 ? (int)(100 * waited / elapsed) : 0;
	unsigned n = win ? ws.on : f->run_most - 1;
	size_t kib = (win ? ws.chunk : f->run_block) >> 10;
	if (d > RF__FLIGHT_MAX)
		snprintf(w, sizeof w, "the compute waited for reads %d%% of the run, %u x %zuK read ahead: depth = auto "
			 "would read further ahead", pct, n, kib);
	else if (d != 0)
		snprintf(w, sizeof w, "the compute waited for reads %d%% of the run, %u x %zuK read ahead: at the same "
			 "latency depth %u or more would keep them ahead (depth = auto measures what pays)", pct, n, kib, d);
	if (d == 0 && f->fill[0] == '\0')
		return;
	/* the same depth named: the words stand (their percentage would change the line every run) */
	if (d != 0 && f->fill[0] != '\0' && f->fill_depth == d)
		return;
	snprintf(f->fill, sizeof f->fill, "%s", w);
	f->fill_depth = d;
	f->fill_gen++;
}

void rf__flight_run_end(rf__flight *f, int ok)
{
	rf__reader *rd = rf__flight_rd(f);
	if (rd != NULL) {
		if (ok)
			rf__flight_judge(f, rd);
		rf__reader_window_release(rd);
		if (f->reads_online)
			rf__reader_reads_online(rd, 0, 0);
	}
	f->run_on = 0;
}

int rf__flight_read_shifted(rf__flight *f, const rf__fsrc *s, size_t n, unsigned char *dst, size_t cap,
			    unsigned flags, size_t *shift)
{
	rf__flight_rec rec = {.flags = flags};
	uint64_t tag = f->started;
	int rc = rf__flight_start(f, s, n, dst, cap, &rec);
	if (rc != RF_OK)
		return rc;
	const rf__flight_rec *r = &f->rec[tag % RF__FLIGHT_MAX];
	while (!r->done)
		if (rf__flight_progress(f) && !r->done)
			rf__reader_wait(rf__flight_rd(f));
	*shift = r->shift;
	if (r->rc == RF_OK)
		return RF_OK;
	f->failed = 0; /* a blocking read reports its own failure; the flight stays usable */
	return rf__err(r->rc, "%s", f->last);
}
