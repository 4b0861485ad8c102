/* io/reader.c — the reads of file copies (io/reader.h): the reader object and its entry points.
 *
 * A copy is a window of the file (its range, or the range widened to the O_DIRECT alignment) cut into
 * pieces, one read each (io/pieces.c). Copies with pieces not yet issued wait in a FIFO (the pending
 * list); as a read finishes, the next piece of the oldest pending copy takes its place, so the device
 * sees up to RF__READER_QD reads. Every piece goes through rf__reader_issue: an io_uring submission
 * (io/uring.c), or a pread completed on the spot, so completion (short reads, errors, the move, the
 * timing) is one code path for both. Small copies in file order may be served from the read-ahead
 * window (io/window.c). */
#define _GNU_SOURCE /* MADV_HUGEPAGE */
#include "io/reader_int.h"
#include "base/alloc.h"
#include "base/error.h"

#include <inttypes.h>
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

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
	for (unsigned i = 0; i < RF__READER_QD; i++)
		r->free_pieces[i] = RF__READER_QD - 1 - i;
	r->nfree_pieces = RF__READER_QD;
	r->read_done = rf__reader_done;
	r->ahead_rule = rf__reader_ahead_rule;
	rf__reader_uring_init(r);
	*out = r;
	return RF_OK;
}

void rf__reader_destroy(rf__reader *r)
{
	if (r == NULL)
		return;
	rf__reader_uring_close(r);
	if (r->win.map != NULL)
		munmap(r->win.map, r->win.map_len);
	free(r->win.wait);
	free(r->copies);
	free(r->free_copies);
	free(r->done);
	free(r->pend);
	free(r);
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
			rf__reader_win_serve(r);
		rf__reader_top_up_pending(r);
		if (r->win.f != NULL)
			rf__reader_win_fill(r);
		/* a chunk read on the spot (pread), or chunks let go: serve and read ahead again */
		if (r->win.nwait == 0 || (r->win.landed == landed && r->win.nwait == nwait))
			return;
	}
}

/* Reap, issue what waits for room, submit. */
static void rd_progress(rf__reader *r)
{
	if (r->ring_open)
		rf__reader_reap(r);
	rd_top_up(r);
	rf__reader_submit(r);
}

int rf__reader_start(rf__reader *r, const rf__fsrc *s, size_t n, unsigned char *dst, size_t dst_cap,
		     unsigned flags, uint64_t tag)
{
	return rf__reader_start_ahead(r, s, n, dst, dst_cap, flags, tag, 0);
}

int rf__reader_start_ahead(rf__reader *r, const rf__fsrc *s, size_t n, unsigned char *dst, size_t dst_cap,
			   unsigned flags, uint64_t tag, size_t ahead)
{
	static const char who[] = "rf__reader_start";
	if (r == NULL || s == NULL || s->f == NULL || dst == NULL || n == 0 || dst_cap < n ||
	    (flags & ~(RF__READER_SHIFT_OK | RF__READER_ALONE)))
		return rf__err(RF_EINVAL, "%s: bad arguments", who);
	uint64_t size = rf_file_size(s->f);
	if (s->off > size || n > size - s->off)
		return rf__err(RF_EINVAL, "%s: %s: %zu bytes at offset %" PRIu64 " end past its %" PRIu64 " bytes", who,
			       s->f->path, n, s->off, size);
	if (r->nfree_copies == 0)
		return rf__err(RF_EBUSY, "%s: %u copies in flight", who, r->max_copies);
	if (r->setup_again && r->nfree_copies == r->max_copies && rf__now_ns() >= r->setup_at)
		rf__reader_uring_again(r);
	unsigned ci = r->free_copies[--r->nfree_copies];
	rd_copy *c = &r->copies[ci];
	*c = (rd_copy){.tag = tag, .f = s->f, .dst = dst, .win_off = s->off, .win_len = n, .end = s->off + n, .n = n,
		       .cap = dst_cap, .flags = flags};
	if (!rf__reader_win_take(r, ci, ahead))
		rf__reader_setup(r, ci);
	rd_top_up(r);
	rf__reader_submit(r);
	return RF_OK;
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
		rf__reader_explain(r, c);
	*shift = c->rc == RF_OK ? c->shift : 0;
	r->cnt.copies++;
	r->cnt.failed += c->rc != RF_OK;
	r->free_copies[r->nfree_copies++] = ci;
	return 1;
}

void rf__reader_wait(rf__reader *r)
{
	if (r->ring_open) /* what has come back already (a doorbell's ring too) is no reason to sleep */
		rd_progress(r);
	if (r->bell_rang) {
		r->bell_rang = 0;
		return;
	}
	int ring = r->ndone != 0 ? 0 : rf__reader_uring_wait(r);
	if (ring == 2) {
		rd_progress(r); /* take what woke us now: a ring reaped here is this wait's reason to return */
		r->bell_rang = 0;
	}
	if (r->ndone != 0 || ring != 0 || r->bell_fd < 0 || r->bell_dead)
		return;
	struct pollfd pf = {r->bell_fd, POLLIN, 0};
	if (poll(&pf, 1, -1) == 1)
		rf__reader_bell_drain(r);
}

unsigned rf__reader_reads_out(const rf__reader *r)
{
	return r->ring_open ? rf__reader_ring_reads(r) : 0;
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

/* Append to buf (cap bytes) at len, truncating; len counts what would have been written. */
#define RD_PUT(...)                                                                                        \
	do {                                                                                               \
		int k_ = snprintf(buf + len, len < cap ? cap - len : 0, __VA_ARGS__);                     \
		len += k_ > 0 ? (size_t)k_ : 0;                                                            \
	} while (0)

int rf__reader_async(const rf__reader *r)
{
	return r->uring;
}

void rf__reader_describe(const rf__reader *r, char *buf, size_t cap)
{
	size_t len = 0;
	if (cap == 0)
		return;
	if (r->uring)
		RD_PUT("io_uring, up to %u reads in flight, O_DIRECT where the file and the range allow it",
		       RF__READER_QD);
	else
		RD_PUT("pread (%s), one read at a time: a stream's through the page cache (its read-ahead), a "
		       "keyed copy's O_DIRECT where the file and the range allow it", r->why);
	if (r->win.mem != NULL && r->win.chunk != 0 && !r->uring) {
		RD_PUT(", read-ahead in %zuK requests (blocks in file order)", r->win.chunk >> 10);
	} else if (r->win.mem != NULL && r->win.chunk != 0) {
		const rf__reader_ahead *a = &r->win.ahead;
		RD_PUT(", read-ahead %u x %zuK in flight (blocks in file order", a->on, r->win.chunk >> 10);
		if (r->win.online) {
			RD_PUT("; ");
			len += rf__reader_ahead_words(a, buf + len, len < cap ? cap - len : 0);
		}
		RD_PUT(")");
	} else if (r->win.mem != NULL)
		RD_PUT(", read-ahead up to %zuK (blocks in file order)", r->win.cap >> 10);
	if (r->reads_online && r->reads_piece != 0) {
		RD_PUT(", reads of whole blocks %u x %zuK in flight (", r->reads.on, r->reads_piece >> 10);
		len += rf__reader_ahead_words(&r->reads, buf + len, len < cap ? cap - len : 0);
		RD_PUT(")");
	}
	if (r->reg_base != NULL)
		RD_PUT(", slots registered");
	else if (r->want_len > 0)
		RD_PUT(", slots not registered (%s)", r->reg_why);
	int first = 1;
	for (unsigned k = 0; k < RF__READER_CLASSES; k++) {
		if (!rf__reader_rule_decided(&r->samples[k]))
			continue;
		size_t lim = (size_t)4096 << k;
		int mib = lim >= ((size_t)1 << 20);
		RD_PUT("%s<=%zu%c %s", first ? ", unaligned ranges: " : ", ", lim >> (mib ? 20 : 10), mib ? 'M' : 'K',
		       rf__reader_rule(&r->samples[k]) == RF__READER_MOVE ? "O_DIRECT+move" : "buffered");
		first = 0;
	}
}

int rf__reader_register(rf__reader *r, void *base, size_t len)
{
	if (r == NULL || (base == NULL && len > 0))
		return rf__err(RF_EINVAL, "rf__reader_register: %s", r == NULL ? "r is NULL" : "base is NULL");
	unsigned inflight = r->max_copies - r->nfree_copies;
	if (rf__reader_ring_reads(r) != 0 || inflight != 0)
		return rf__err(RF_EBUSY, "rf__reader_register: %u copies in flight", inflight);
	r->want_base = base, r->want_len = len;
	r->gen++;
	rf__reader_ring_register(r);
	return RF_OK;
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
	const rd_win o = *w; /* what outlives a window */
	*w = (rd_win){.wait = o.wait, .copies = o.copies, .read = o.read, .online = o.online, .from = o.from};
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
	w->map = m, w->map_len = map_len, w->mem = mem, w->cap = bytes;
	return RF_OK;
}

void rf__reader_window_drop(rf__reader *r)
{
	rd_win *w = &r->win;
	w->expect = UINT64_MAX; /* no copy continues what is held: the next one starts afresh */
	if (w->out == 0 && w->nwait == 0)
		rf__reader_win_clear(r);
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
	rf__reader_win_clear(r);
	w->f = NULL, w->expect = UINT64_MAX;
}

void rf__reader_window_online(rf__reader *r, int on, size_t from)
{
	r->win.online = on != 0;
	r->win.from = from;
	r->win.chunk = 0, r->win.k = 0; /* the next window chooses afresh */
}

void rf__reader_reads_online(rf__reader *r, int on, size_t from)
{
	r->reads_online = on != 0;
	r->gen++; /* describe says whether reads are chosen */
	if (on)
		r->reads_from = from, r->reads_piece = 0;
	else
		rd_top_up(r); /* what the cap held back goes out now */
}

size_t rf__reader_reads_get(const rf__reader *r, rf__reader_ahead *a)
{
	*a = r->reads;
	return r->reads_piece;
}

size_t rf__reader_ahead_words(const rf__reader_ahead *a, char *buf, size_t cap)
{
	size_t len = 0;
	RD_PUT("%s online", a->settled ? "chosen" : "choosing");
	for (unsigned i = 0, first = 1; i < RF__READER_AHEAD_SETTINGS; i++)
		if (a->rate[i] > 0) {
			RD_PUT("%s %u: %.2f", first ? ", GB/s at" : ",", 1u << i, a->rate[i] * 1e-9);
			first = 0;
		}
	unsigned i = 0;
	while ((2u << i) <= a->on && i + 1 < RF__READER_AHEAD_SETTINGS)
		i++;
	if (a->settled && i + 1 < RF__READER_AHEAD_SETTINGS && a->rate[i + 1] > 0)
		RD_PUT("; more did not pay");
	return len;
}

void rf__reader_window_get(const rf__reader *r, rf__reader_window_stats *out)
{
	*out = (rf__reader_window_stats){r->win.mem ? r->win.cap : 0, r->win.chunk, r->win.k, r->win.ahead.on,
					 r->win.copies, r->win.read, r->win.touched};
}
