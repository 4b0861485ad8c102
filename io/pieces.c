/* io/pieces.c — a copy's pieces (io/reader_int.h): issued as room allows, completed, retried, failed in
 * words; its bytes moved into place and timed for the copy rule, and the rule. */
#include "io/reader_int.h"
#include "base/compare.h"

#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

_Static_assert(RF__READER_PROBES % 2 == 1, "rd_median takes the middle sample");

static float rd_median(const float *v) /* of RF__READER_PROBES samples, by insertion sort */
{
	float s[RF__READER_PROBES];
	memcpy(s, v, sizeof s);
	for (unsigned i = 1; i < RF__READER_PROBES; i++)
		for (unsigned j = i; j > 0 && s[j - 1] > s[j]; j--) {
			float t = s[j];
			s[j] = s[j - 1];
			s[j - 1] = t;
		}
	return s[RF__READER_PROBES / 2];
}

int rf__reader_rule_decided(const rf__reader_samples *s)
{
	return s->n[RF__READER_MOVE] >= RF__READER_PROBES && s->n[RF__READER_BUFFERED] >= RF__READER_PROBES;
}

int rf__reader_rule(const rf__reader_samples *s)
{
	if (!rf__reader_rule_decided(s))
		return s->n[RF__READER_BUFFERED] < s->n[RF__READER_MOVE] ? RF__READER_BUFFERED : RF__READER_MOVE;
	/* Medians, not the comparator's means: one stray copy (a fault, a preemption) must not decide. */
	static const rf__cmp_rule lower = {0};
	const double med[] = {rd_median(s->ns_per_byte[RF__READER_MOVE]),
			      rd_median(s->ns_per_byte[RF__READER_BUFFERED])};
	return (int)rf__cmp_pick(&lower, med, NULL, RF__READER_NMETHODS); /* a tie keeps RF__READER_MOVE */
}

unsigned rf__reader_class(size_t n)
{
	unsigned c = 0;
	for (size_t lim = 4096; n > lim && c + 1 < RF__READER_CLASSES; lim <<= 1)
		c++;
	return c;
}

size_t rf__reader_piece(size_t n, size_t align, size_t io_max)
{
	size_t hi = io_max ? io_max : RF__READER_PIECE_UNKNOWN;
	hi = hi > RF__READER_PIECE_MAX ? RF__READER_PIECE_MAX : hi;
	hi = hi / align * align;
	hi = hi < align ? align : hi;
	size_t p = (n + align - 1) / align * align;
	return p > hi ? hi : p;
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

void rf__reader_explain(rf__reader *r, const rd_copy *c)
{
	const char *path = c->f->path;
	if (c->err_no != 0)
		snprintf(r->err, sizeof r->err, "%s: read of %zu bytes at offset %" PRIu64 ": %s%s", path, c->err_len,
			 c->err_off, strerror(c->err_no),
			 rf__file_transient(c->err_no) ? " (every try of " RF__FILE_TRIES_S ")" : "");
	else if (c->err_size != UINT64_MAX)
		snprintf(r->err, sizeof r->err, "%s: short read at offset %" PRIu64 ": file shrank to %" PRIu64 " bytes",
			 path, c->err_off, c->err_size);
	else
		snprintf(r->err, sizeof r->err, "%s: short read at offset %" PRIu64 ": %zu of %zu bytes", path, c->err_off,
			 c->err_got, c->err_len);
}

/* Every piece of copy ci has come back: move the bytes down if read as its window, time it while the
 * rule measures its class, queue it for poll. */
void rf__reader_finish(rf__reader *r, unsigned ci)
{
	rd_copy *c = &r->copies[ci];
	if (c->uncache) {
		/* The page cache holds a file in folios of up to a huge page, and DONTNEED drops only those wholly
		 * inside the range: from RD_HUGE before the copy, so that the folio across its start goes too. */
		uint64_t from = c->win_off > RD_HUGE ? c->win_off - RD_HUGE : 0;
		(void)posix_fadvise(rf__file_fd(c->f, 0), (off_t)from, (off_t)(c->win_off + c->win_len - from),
				    POSIX_FADV_DONTNEED);
	}
	if (c->rc == RF_OK && c->move) {
		memmove(c->dst, c->dst + c->shift, c->n);
		c->shift = 0;
	}
	if (c->rc == RF_OK && c->timed) {
		rf__reader_samples *s = &r->samples[c->cls];
		unsigned k = s->n[c->method];
		if (k < RF__READER_PROBES) {
			s->ns_per_byte[c->method][k] = (float)((double)(rf__now_ns() - c->t0) / (double)c->n);
			s->n[c->method] = k + 1;
			r->gen += (unsigned)rf__reader_rule_decided(s); /* the class has its rule: describe lists it */
		}
	}
	r->done[(r->done_head + r->ndone) % r->max_copies] = ci;
	r->ndone++;
}

/* Piece pi's descriptor: a chunk's is O_DIRECT, a copy's as its copy reads. */
static int rd_fd(const rf__reader *r, const rd_piece *p)
{
	if (p->copy & RD_CHUNK)
		return rf__file_fd(r->win.f, 1);
	return rf__file_fd(r->copies[p->copy].f, r->copies[p->copy].direct);
}

/* A refused read ("not now", res = -EAGAIN ...) of piece pi: the same read again after a pause, or,
 * once the ring has refused it RF__FILE_TRIES times, by pread (which retries on its own). */
void rf__reader_retry(rf__reader *r, unsigned pi)
{
	rd_piece *p = &r->pieces[pi];
	if (++p->tries < RF__FILE_TRIES) {
		rf__file_backoff(p->tries);
		rf__reader_issue(r, pi);
	} else {
		rf__reader_pread(r, pi, rd_fd(r, p));
	}
}

/* A partial read of res bytes (on the alignment): the rest of piece pi, as its own read. */
void rf__reader_rest(rf__reader *r, unsigned pi, long res)
{
	rd_piece *p = &r->pieces[pi];
	p->off += (uint64_t)res;
	p->dst += res;
	p->len -= (size_t)res;
	p->tries = 0;
	rf__reader_issue(r, pi);
}

void rf__reader_piece_done(rf__reader *r, unsigned pi, long res)
{
	rd_piece *p = &r->pieces[pi];
	unsigned ci = p->copy;
	rd_copy *c = &r->copies[ci];
	if (res < 0 && rf__file_transient((int)-res) && c->rc == RF_OK && !p->by_pread) {
		rf__reader_retry(r, pi);
		return;
	}
	uint64_t want = p->off + p->len < c->end ? p->off + p->len : c->end;
	if (res >= 0 && p->off + (uint64_t)res < want && c->rc == RF_OK) {
		size_t a = c->direct ? c->f->dio_align : 1;
		if (res > 0 && (size_t)res % a == 0) {
			rf__reader_rest(r, pi, res);
			return;
		}
		struct stat st;
		int shrank = fstat(rf__file_fd(c->f, 0), &st) == 0 && (uint64_t)st.st_size < c->end;
		rd_fail(r, ci, p, 0, (size_t)res, shrank ? (uint64_t)st.st_size : UINT64_MAX);
	} else if (res < 0) {
		rd_fail(r, ci, p, (int)-res, 0, 0);
	}
	if (res > 0 && r->reads_piece != 0 && !r->reads.settled && r->reads_m.t0 != 0)
		rf__reader_meas_landed(r, &r->reads, &r->reads_m, (uint64_t)res);
	r->copy_out--;
	r->free_pieces[r->nfree_pieces++] = pi;
	if (--c->out == 0 && c->next == c->win_len && !c->pending)
		rf__reader_finish(r, ci);
}

void rf__reader_issue(rf__reader *r, unsigned pi)
{
	rd_piece *p = &r->pieces[pi];
	r->cnt.reads++;
	r->cnt.reads_direct += (unsigned)((p->copy & RD_CHUNK) || r->copies[p->copy].direct);
	p->by_pread = 0;
	int fd = rd_fd(r, p);
	if (!rf__reader_uring_queue(r, pi, fd))
		rf__reader_pread(r, pi, fd);
}

/* Whether another piece of a copy read on its own may go out: the reads in flight chosen online cap them. */
static int rd_copy_room(const rf__reader *r)
{
	return r->nfree_pieces > 0 && (!r->reads_online || r->reads_piece == 0 || r->copy_out < r->reads.on);
}

void rf__reader_top_up_pending(rf__reader *r)
{
	while (r->npend > 0 && rd_copy_room(r)) {
		unsigned ci = r->pend[r->pend_head];
		rd_copy *c = &r->copies[ci];
		if (c->next < c->win_len) {
			unsigned pi = r->free_pieces[--r->nfree_pieces];
			size_t len = c->win_len - c->next < c->piece ? c->win_len - c->next : c->piece;
			r->pieces[pi] = (rd_piece){ci, c->win_off + c->next, len, c->dst + c->next, 0, 0};
			c->next += len;
			c->out++;
			r->copy_out++;
			if (r->reads_online && r->reads_piece != 0 && !r->reads.settled)
				rf__reader_meas_start(&r->reads_m);
			rf__reader_issue(r, pi);
		}
		if (c->next == c->win_len) {
			r->pend_head = (r->pend_head + 1) % r->max_copies;
			r->npend--;
			c->pending = 0;
			if (c->out == 0)
				rf__reader_finish(r, ci);
		}
	}
}

/* How copy ci (tag, f, dst, range, cap and flags filled in) is read on its own, and onto the pending
 * list with it. */
void rf__reader_setup(rf__reader *r, unsigned ci)
{
	rd_copy *c = &r->copies[ci];
	const rf_file *f = c->f;
	size_t a = f->dio_align, ma = f->dio_mem_align;
	/* Without the ring a read is synchronous: O_DIRECT would give the disk one request at a time, while
	 * the page cache's read-ahead keeps the next reads of a stream in flight behind the caller's back. The
	 * pages read are dropped once the copy lands, so that the slot stays the bytes' one copy in memory,
	 * as with O_DIRECT (RF_FILE_BUFFERED, no O_DIRECT descriptor, keeps them). A copy no stream follows
	 * (RF__READER_ALONE) is read O_DIRECT still: read-ahead past it would be read for nothing. */
	int direct_ok = r->uring || (c->flags & RF__READER_ALONE);
	c->uncache = a != 0 && !direct_ok;
	if (a != 0 && direct_ok) {
		uint64_t wo = c->win_off / a * a, we = (c->win_off + c->n + a - 1) / a * a;
		size_t shift = (size_t)(c->win_off - wo), wl = (size_t)(we - wo);
		if (((uintptr_t)c->dst & (ma - 1)) == 0 && c->cap >= wl) {
			c->method = RF__READER_MOVE;
			if (shift != 0 && !(c->flags & RF__READER_SHIFT_OK)) {
				c->cls = rf__reader_class(c->n);
				c->method = (unsigned)rf__reader_rule(&r->samples[c->cls]);
				c->timed = !rf__reader_rule_decided(&r->samples[c->cls]);
				c->t0 = c->timed ? rf__now_ns() : 0;
				c->move = c->method == RF__READER_MOVE;
			}
			if (c->method == RF__READER_MOVE) {
				c->direct = 1;
				c->win_off = wo, c->win_len = wl, c->shift = shift;
			}
		}
	}
	c->piece = rf__reader_piece(c->win_len, c->direct ? a : 4096, f->io_max);
	if (r->reads_online && r->reads_piece == 0 && c->direct && r->uring) {
		/* the setting counts this copy's pieces: from the pieces it needs at once (a setting below would
		 * read as many all the same), or from reads_from bytes if that is more */
		size_t need = (c->win_len + c->piece - 1) / c->piece, from = r->reads_from / c->piece;
		rf__reader_ahead_start(&r->reads, RF__READER_QD, need < RF__READER_QD ? (unsigned)need : RF__READER_QD,
				       from < RF__READER_QD ? (unsigned)from : RF__READER_QD);
		r->reads_piece = c->piece;
		r->reads_m = (rd_meas){0};
		r->gen++;
	}
	r->pend[(r->pend_head + r->npend++) % r->max_copies] = ci;
	c->pending = 1;
}
