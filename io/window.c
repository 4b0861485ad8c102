/* io/window.c — the reader's read-ahead window (rf__reader_window, io/reader.h): chunks read ahead in
 * file order, each one request as large as the device takes, and the small copies served from them. */
#include "io/reader_int.h"

#include <string.h>

_Static_assert(RD_WIN_MAX <= 256, "rd_chunk.buf holds a buffer's number");
_Static_assert((1u << (RF__READER_AHEAD_SETTINGS - 1)) <= RD_WIN_MAX, "the top setting fits in the window");
_Static_assert(RD_WIN_MAX <= RF__READER_QD, "every chunk can be in flight at once");

/* Chunk pi came back with res. A refusal ("not now") is retried as a copy's piece is; a partial read
 * on the alignment reads the rest; anything else ends the chunk: its good bytes end where the read
 * ended (a short read: the file's end, or the file shrank; the copies past it are read on their own
 * and fail there, with their own words). */
static void rd_chunk_done(rf__reader *r, unsigned pi, long res)
{
	rd_piece *p = &r->pieces[pi];
	rd_win *w = &r->win;
	rd_chunk *h = &w->ch[p->copy & ~RD_CHUNK];
	if (res < 0 && rf__file_transient((int)-res) && !p->by_pread) {
		rf__reader_retry(r, pi);
		return;
	}
	if (res > 0 && (size_t)res < p->len && p->off + (uint64_t)res < h->lim &&
	    (size_t)res % w->f->dio_align == 0) {
		rf__reader_rest(r, pi, res);
		return;
	}
	if (res < 0) {
		h->state = RD_CH_BAD;
	} else {
		uint64_t got = p->off + (uint64_t)res;
		h->end = got < h->lim ? got : h->lim;
		h->state = RD_CH_IN;
		w->read += (uint64_t)res;
		if (w->online && !w->ahead.settled && w->m.t0 != 0)
			rf__reader_meas_landed(r, &w->ahead, &w->m, (uint64_t)res);
	}
	w->landed++;
	w->out--;
	r->free_pieces[r->nfree_pieces++] = pi;
}

/* Serve the waiting copies, oldest first, whose chunks have all landed: move their bytes into place, or
 * (a chunk failed or the file ended early) read them on their own. Then let go of the chunks no copy
 * still to come can want (copies come in file order). */
void rf__reader_win_serve(rf__reader *r)
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
				memcpy(c->dst + (a - off), w->mem + (size_t)h->buf * w->chunk + (a - h->off), (size_t)(b - a));
			}
			w->copies++;
			rf__reader_finish(r, ci);
		} else { /* read on its own, where a failure is put into words */
			rf__reader_setup(r, ci);
		}
		while (w->n > 0 && w->ch[w->head].state != RD_CH_OUT && w->ch[w->head].lim <= end) {
			w->fbuf[w->nfbuf++] = w->ch[w->head].buf;
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

void rf__reader_win_clear(rf__reader *r)
{
	rd_win *w = &r->win;
	for (; w->n > 0; w->n--, w->head = (w->head + 1) % w->k)
		w->fbuf[w->nfbuf++] = w->ch[w->head].buf;
	w->head = 0;
}

/* A buffer for the next chunk (the window holds fewer than k): one given back, else one never used,
 * its pages faulted in now (a read into pages not yet there would wait for them inside the ring). */
static unsigned rd_win_buf(rd_win *w)
{
	if (w->nfbuf > 0)
		return w->fbuf[--w->nfbuf];
	unsigned b = w->fresh++;
	size_t to = (size_t)(b + 1) * w->chunk;
	for (; w->touched < to; w->touched += 4096)
		w->mem[w->touched] = 0;
	return b;
}

/* Read chunks ahead while the window has room: whole chunks while the run goes on past them, the last
 * one up to where the run ends. */
void rf__reader_win_fill(rf__reader *r)
{
	rd_win *w = &r->win;
	while (w->f != NULL && w->n < w->k && (w->n < w->ahead.on || rd_win_short(r)) && w->next < w->limit &&
	       r->nfree_pieces > 0) {
		if (!w->final && w->next + w->chunk > w->limit)
			return; /* a partial chunk would leave the next one off the alignment */
		size_t a = w->f->dio_align;
		uint64_t lim = w->next + w->chunk < w->limit ? w->next + w->chunk : w->limit;
		size_t len = (size_t)((lim - w->next + a - 1) / a * a);
		unsigned i = (w->head + w->n) % w->k, b = rd_win_buf(w);
		w->ch[i] = (rd_chunk){w->next, lim, w->next, RD_CH_OUT, (unsigned char)b};
		w->n++;
		w->out++;
		if (w->online && !w->ahead.settled)
			rf__reader_meas_start(&w->m); /* a measurement starts with its first read */
		unsigned pi = r->free_pieces[--r->nfree_pieces];
		r->pieces[pi] = (rd_piece){RD_CHUNK | i, w->next, len, w->mem + (size_t)b * w->chunk, 0, 0};
		w->next = lim;
		rf__reader_issue(r, pi);
	}
}

int rf__reader_window_serves(size_t bytes, size_t n)
{
	return n <= bytes / 2;
}

/* Copy ci (filled in by start) is served from the window if it is small, of a file O_DIRECT reads, and
 * either continues the window's run or starts a new one (none of the old chunks still in flight).
 * 1 if taken. */
int rf__reader_win_take(rf__reader *r, unsigned ci, size_t ahead)
{
	rd_win *w = &r->win;
	rd_copy *c = &r->copies[ci];
	rf_file *f = c->f;
	size_t a = f->dio_align;
	if (w->mem == NULL || a == 0 || (c->flags & RF__READER_SHIFT_OK))
		return 0;
	if (!r->uring && w->n == 0) /* preads: the page cache's own read-ahead reads ahead (rf__reader_setup) */
		return 0;
	int cont = w->f == f && c->win_off == w->expect && w->expect < w->limit;
	if (!cont) {
		if (ahead == 0 || w->out != 0 || w->nwait != 0)
			return 0;
		/* a chunk is one request as large as the device takes, and the window at least four of them */
		size_t piece = rf__reader_piece(w->cap / 4, a, f->io_max);
		size_t al = a > 4096 ? a : 4096, chunk = piece / al * al;
		if (chunk == 0)
			return 0;
		unsigned k = (unsigned)(w->cap / chunk);
		k = k > RD_WIN_MAX ? RD_WIN_MAX : k;
		if (k < 2 || !rf__reader_window_serves(k * chunk, c->n))
			return 0;
		if (w->f != f || w->chunk != chunk)
			r->gen++; /* describe names the chunk size */
		if (w->chunk != chunk || w->k != k) { /* a new setting to choose: the old one was for other chunks */
			/* from the chunks one copy may need at once (it may cross a chunk's boundary) */
			unsigned need = (unsigned)((c->n + chunk - 1) / chunk) + 1, from = (unsigned)(w->from / chunk);
			rf__reader_ahead_start(&w->ahead, k, need, from);
			if (!r->uring) /* preads, one at a time: a chunk further ahead overlaps nothing */
				w->ahead.on = need < k ? need : k, w->ahead.settled = 1;
			else if (!w->online)
				w->ahead.on = k, w->ahead.settled = 1;
		}
		w->m = (rd_meas){0}; /* one stream's */
		rf__reader_win_clear(r);
		if (w->chunk != chunk) /* the buffers are of another size now */
			w->nfbuf = 0, w->fresh = 0;
		w->f = f, w->chunk = chunk, w->k = k;
		w->next = c->win_off / a * a;
		w->limit = c->win_off;
		w->final = 0;
	} else if (!rf__reader_window_serves(w->k * w->chunk, c->n)) {
		return 0;
	}
	uint64_t size = rf_file_size(f), lim = c->end + (ahead < w->cap ? ahead : w->cap);
	lim = lim > size ? size : lim;
	if (lim > w->limit || (cont && ahead < w->cap)) {
		w->limit = lim > w->limit ? lim : w->limit;
		w->final = ahead < w->cap || lim == size;
	}
	w->expect = c->end;
	w->wait[(w->wait_head + w->nwait++) % r->max_copies] = ci;
	return 1;
}

/* A read came back (the ring's or pread's report, r->read_done): a chunk's is the window's, a copy's piece
 * goes to io/pieces.c. */
void rf__reader_done(rf__reader *r, unsigned pi, long res)
{
	if (r->pieces[pi].copy & RD_CHUNK)
		rd_chunk_done(r, pi, res);
	else
		rf__reader_piece_done(r, pi, res);
}
