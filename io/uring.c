/* io/uring.c — the reader's reads made (io/reader_int.h): the io_uring ring (set up again after a
 * shortage) and its doorbell's poll and registered region, or pread (always, built without liburing). */
#define _GNU_SOURCE
#include "io/reader_int.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

void rf__reader_pread(rf__reader *r, unsigned pi, int fd)
{
	rd_piece *p = &r->pieces[pi];
	int err;
	size_t got = rf__file_pread(fd, p->dst, p->len, p->off, &err);
	p->by_pread = 1;
	r->read_done(r, pi, got > 0 || err == 0 ? (long)got : -(long)err);
}

/* The doorbell rang: consume its count, so that the next wait waits afresh; only if still readable (a
 * blocking eventfd whose count someone else took would block the read). */
void rf__reader_bell_drain(rf__reader *r)
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

void rf__reader_ring_register(rf__reader *r)
{
#ifdef RF_HAVE_LIBURING
	if (r->uring && r->reg_base != NULL)
		io_uring_unregister_buffers(&r->ring);
#endif
	r->reg_base = NULL, r->reg_len = 0, r->reg_why[0] = '\0';
	if (r->want_len == 0)
		return;
#ifdef RF_HAVE_LIBURING
	if (r->uring) {
		struct iovec iov = {r->want_base, r->want_len};
		int rc = io_uring_register_buffers(&r->ring, &iov, 1);
		if (rc == 0) {
			r->reg_base = r->want_base, r->reg_len = r->want_len;
			return;
		}
		snprintf(r->reg_why, sizeof r->reg_why, "io_uring_register_buffers: %s%s", strerror(-rc),
			 rc == -ENOMEM || rc == -EPERM ? " (RLIMIT_MEMLOCK)" : "");
		return;
	}
#endif
	snprintf(r->reg_why, sizeof r->reg_why, "no io_uring");
}

#ifdef RF_HAVE_LIBURING
void rf__reader_uring_init(rf__reader *r)
{
	r->setup_again = 0;
	int rc = io_uring_queue_init(RD_SQ_ENTRIES, &r->ring, 0);
	if (rc < 0) {
		/* Out of descriptors or memory is a moment's shortage, not the system's word: try again later
		 * (rf__reader_uring_again); a refusal (EPERM, ENOSYS, io_uring_disabled) stands. */
		r->setup_again = rc == -EMFILE || rc == -ENFILE || rc == -ENOMEM || rc == -EAGAIN;
		r->setup_at = rf__now_ns() + RD_SETUP_AGAIN_NS;
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

/* io_uring_enter failed for good: pread from now on. The submissions the kernel has not taken are read
 * here (the ring is never submitted to again); reads it took still complete through the ring. */
static void rd_uring_broke(rf__reader *r, int err)
{
	snprintf(r->why, sizeof r->why, "io_uring failed: io_uring_enter: %s%s", strerror(err),
		 rf__file_transient(err) ? " (every try of " RF__FILE_TRIES_S ")" : "");
	r->uring = 0;
	r->gen++;
	unsigned k = io_uring_sq_ready(&r->ring), head = *r->ring.sq.khead;
	for (unsigned i = 0; i < k; i++) {
		const struct io_uring_sqe *sqe = &r->ring.sq.sqes[(head + i) & *r->ring.sq.kring_mask];
		if (sqe->user_data == RD_BELL)
			r->bell_armed = 0;
		else
			rf__reader_pread(r, (unsigned)sqe->user_data, sqe->fd);
	}
}

/* io_uring_enter answered -rc (rc < 0) or took what it was given (rc >= 0). EAGAIN / EBUSY / EINTR leave
 * the submissions queued for the next call, after a pause, RF__FILE_TRIES times in a row at most; anything
 * else, or one more of them, gives the ring up. */
static void rd_entered(rf__reader *r, int rc)
{
	if (rc >= 0) {
		r->enter_fails = 0;
		return;
	}
	if (rf__file_transient(-rc) && ++r->enter_fails < RF__FILE_TRIES) {
		rf__file_backoff(r->enter_fails);
		return;
	}
	rd_uring_broke(r, -rc);
}

void rf__reader_submit(rf__reader *r)
{
	if (!r->uring || io_uring_sq_ready(&r->ring) == 0)
		return;
	rd_entered(r, io_uring_submit(&r->ring));
}

void rf__reader_reap(rf__reader *r)
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
		r->read_done(r, (unsigned)ud, res);
	}
	io_uring_cq_advance(&r->ring, n);
	if (n > 0) /* the ring answers: an interrupted wait before this one was no refusal */
		r->enter_fails = 0;
	if (bell) {
		rf__reader_bell_drain(r);
		r->bell_rang = 1;
	}
}

void rf__reader_uring_again(rf__reader *r)
{
	rf__reader_uring_init(r); /* sets setup_again and setup_at again if it fails the same way */
	if (!r->uring)
		return;
	r->why[0] = '\0';
	r->gen++;
	rf__reader_ring_register(r);
}

int rf__reader_uring_queue(rf__reader *r, unsigned pi, int fd)
{
	/* Never NULL with a ring: RD_SQ_ENTRIES holds every piece and the doorbell. */
	struct io_uring_sqe *sqe = r->uring ? io_uring_get_sqe(&r->ring) : NULL;
	if (sqe == NULL)
		return 0;
	const rd_piece *p = &r->pieces[pi];
	int fixed = r->reg_base != NULL && p->dst >= (unsigned char *)r->reg_base &&
		    (size_t)(p->dst - (unsigned char *)r->reg_base) + p->len <= r->reg_len;
	if (fixed)
		io_uring_prep_read_fixed(sqe, fd, p->dst, (unsigned)p->len, p->off, 0);
	else
		io_uring_prep_read(sqe, fd, p->dst, (unsigned)p->len, p->off);
	r->cnt.reads_fixed += (uint64_t)fixed;
	io_uring_sqe_set_data64(sqe, pi);
	return 1;
}

/* The ring's part of rf__reader_wait: sleep in io_uring_enter until a read or the doorbell's poll
 * completes. 2 if it slept so, 1 if it waited otherwise or found nothing to wait for; 0 without a ring. */
int rf__reader_uring_wait(rf__reader *r)
{
	if (r->uring) {
		if (r->bell_fd >= 0 && !r->bell_armed && !r->bell_dead) {
			struct io_uring_sqe *sqe = io_uring_get_sqe(&r->ring);
			if (sqe != NULL) {
				io_uring_prep_poll_add(sqe, r->bell_fd, POLLIN);
				io_uring_sqe_set_data64(sqe, RD_BELL);
				r->bell_armed = 1;
			}
		}
		if (rf__reader_ring_reads(r) == 0 && !r->bell_armed)
			return 1;
		int rc = io_uring_submit_and_wait(&r->ring, 1);
		rd_entered(r, rc == -ETIME ? 0 : rc);
		return 2;
	}
	if (r->ring_open && rf__reader_ring_reads(r) != 0) { /* a broken ring still owes reads it took */
		struct io_uring_cqe *cqe;
		if (io_uring_wait_cqe(&r->ring, &cqe) < 0) /* they complete without us: no hot spin */
			rf__file_backoff(3);
		return 1;
	}
	return 0;
}

/* The kernel writes the destinations until each read completes: wait for them, then close. The
 * doorbell's poll references no memory of ours; exit cancels it. */
void rf__reader_uring_close(rf__reader *r)
{
	while (r->ring_open && rf__reader_ring_reads(r) != 0) {
		rf__reader_submit(r);
		struct io_uring_cqe *cqe;
		if (r->ring_open && rf__reader_ring_reads(r) != 0 && io_uring_wait_cqe(&r->ring, &cqe) < 0)
			rf__file_backoff(3);
		rf__reader_reap(r);
	}
	if (r->ring_open)
		io_uring_queue_exit(&r->ring);
}
#else /* built without liburing: no ring, ever (io/reader_int.h): pread only */
void rf__reader_uring_init(rf__reader *r)
{
	snprintf(r->why, sizeof r->why, "built without liburing");
}
#endif
