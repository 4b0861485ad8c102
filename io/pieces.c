/* io/pieces.c — a copy's pieces (io/reader_int.h): how a copy is read, its pieces issued as room
 * allows, completed (a partial read's rest, a refusal tried again, a pread when the ring will not),
 * its failure put into words, its bytes moved into place and timed for the rule. */
#define _GNU_SOURCE /* O_DIRECT */
#include "io/reader_int.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* An answer that says "not now" rather than "no": worth another try (RD_TRIES). */
int rf__rd_transient(int err)
{
	return err == EAGAIN || err == EBUSY || err == EINTR;
}

/* The sleep before try k + 1 (k >= 1 tries made). */
void rf__rd_backoff(unsigned k)
{
	long us = 50L << (k > 7 ? 7 : k - 1);
	struct timespec d = {0, (us > 5000 ? 5000 : us) * 1000L};
	nanosleep(&d, NULL);
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
void rf__rd_explain(rf__reader *r, const rd_copy *c)
{
	const char *path = c->f->path;
	if (c->err_no != 0)
		snprintf(r->err, sizeof r->err, "%s: read of %zu bytes at offset %" PRIu64 ": %s%s", path, c->err_len,
			 c->err_off, strerror(c->err_no),
			 rf__rd_transient(c->err_no) ? " (every try of " RD_TRIES_S ")" : "");
	else if (c->err_size != UINT64_MAX)
		snprintf(r->err, sizeof r->err, "%s: short read at offset %" PRIu64 ": file shrank to %" PRIu64 " bytes",
			 path, c->err_off, c->err_size);
	else
		snprintf(r->err, sizeof r->err, "%s: short read at offset %" PRIu64 ": %zu of %zu bytes", path, c->err_off,
			 c->err_got, c->err_len);
}

/* Every piece of copy ci has come back: move the bytes down if read as its window, time it while the
 * rule measures its class, queue it for poll. */
void rf__rd_finish(rf__reader *r, unsigned ci)
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
			s->ns_per_byte[c->method][k] = (float)((double)(rf__now_ns() - c->t0) / (double)c->n);
			s->n[c->method] = k + 1;
			r->gen += (unsigned)rf__reader_rule_decided(s); /* the class has its rule: describe lists it */
		}
	}
	r->done[(r->done_head + r->ndone) % r->max_copies] = ci;
	r->ndone++;
}

/* A refused read ("not now", res = -EAGAIN ...) of piece pi: the same read again after a pause, or,
 * once the ring has refused it RD_TRIES times, by pread (which retries on its own). */
void rf__rd_retry(rf__reader *r, unsigned pi)
{
	rd_piece *p = &r->pieces[pi];
	if (++p->tries < RD_TRIES) {
		rf__rd_backoff(p->tries);
		rf__rd_issue(r, pi);
	} else {
		rf__rd_pread(r, pi);
	}
}

/* A partial read of res bytes (on the alignment): the rest of piece pi, as its own read. */
void rf__rd_rest(rf__reader *r, unsigned pi, long res)
{
	rd_piece *p = &r->pieces[pi];
	p->off += (uint64_t)res;
	p->dst += res;
	p->len -= (size_t)res;
	p->tries = 0;
	rf__rd_issue(r, pi);
}

/* Piece pi came back with res (bytes, or -errno). */
void rf__rd_piece_done(rf__reader *r, unsigned pi, long res)
{
	rd_piece *p = &r->pieces[pi];
	if (p->copy & RD_CHUNK) {
		rf__rd_chunk_done(r, pi, res);
		return;
	}
	unsigned ci = p->copy;
	rd_copy *c = &r->copies[ci];
	if (res < 0 && rf__rd_transient((int)-res) && c->rc == RF_OK && !p->by_pread) {
		rf__rd_retry(r, pi);
		return;
	}
	uint64_t want = p->off + p->len < c->end ? p->off + p->len : c->end;
	if (res >= 0 && p->off + (uint64_t)res < want && c->rc == RF_OK) {
		size_t a = c->direct ? rf__file_dio_align(c->f) : 1;
		if (res > 0 && (size_t)res % a == 0) {
			rf__rd_rest(r, pi, res);
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
		rf__rd_finish(r, ci);
}

/* Piece pi's descriptor: a chunk's is O_DIRECT, a copy's as its copy reads. */
static int rd_fd(const rf__reader *r, const rd_piece *p)
{
	if (p->copy & RD_CHUNK)
		return rf__file_fd(r->win.f, 1);
	return rf__file_fd(r->copies[p->copy].f, r->copies[p->copy].direct);
}

/* pread the piece to its end (or EOF, or an error) and complete it on the spot. */
void rf__rd_pread(rf__reader *r, unsigned pi)
{
	rd_piece *p = &r->pieces[pi];
	int fd = rd_fd(r, p);
	size_t got = 0;
	long res = 0;
	unsigned tries = 0;
	while (got < p->len) {
		ssize_t k = pread(fd, p->dst + got, p->len - got, (off_t)(p->off + got));
		if (k < 0 && rf__rd_transient(errno) && ++tries < RD_TRIES) {
			rf__rd_backoff(tries);
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
	rf__rd_piece_done(r, pi, got > 0 || res == 0 ? (long)got : res);
}

/* Start the read of piece pi (filled in): a submission queued in the ring, or a pread done now. */
void rf__rd_issue(rf__reader *r, unsigned pi)
{
	rd_piece *p = &r->pieces[pi];
	r->cnt.reads++;
	r->cnt.reads_direct += (unsigned)((p->copy & RD_CHUNK) || r->copies[p->copy].direct);
	p->by_pread = 0;
	if (!rf__rd_uring_queue(r, pi, rd_fd(r, p)))
		rf__rd_pread(r, pi);
}

void rf__rd_top_up_pending(rf__reader *r)
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
			rf__rd_issue(r, pi);
		}
		if (c->next == c->win_len) {
			r->pend_head = (r->pend_head + 1) % r->max_copies;
			r->npend--;
			c->pending = 0;
			if (c->out == 0)
				rf__rd_finish(r, ci);
		}
	}
}

/* How copy ci (tag, f, dst, range, cap and flags filled in) is read on its own, and onto the pending
 * list with it. */
void rf__rd_setup(rf__reader *r, unsigned ci)
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
				c->t0 = c->timed ? rf__now_ns() : 0;
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
