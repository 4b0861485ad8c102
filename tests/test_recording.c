/* tests/test_recording.c — a recording backend at the backend boundary: it executes like the cpu
 * backend but logs every op it is handed, so that the order the core issues work in can be checked
 * against the ring plan (lookahead) and the WAR rule (slot reuse only after a wait on the reader). */
#include "graph/program.h"
#include "memory/staging.h"
#include "runtime/walk.h"

#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

typedef struct rec {
	rf_op_kind kind;
	unsigned queue, wait_queue, slot;
	size_t block;
	int64_t value;
} rec;

static rec *g_log;
static size_t g_len, g_cap;

static void log_op(rec r)
{
	if (g_len == g_cap) {
		g_cap = g_cap ? 2 * g_cap : 1024;
		g_log = realloc(g_log, g_cap * sizeof *g_log);
		cr_assert_not_null(g_log);
	}
	g_log[g_len++] = r;
}

/* Where a copy of block b reads: its source, or the staging slot it was staged into. */
static const unsigned char *copy_src(const rf__run *run, size_t b, unsigned stage)
{
	return stage == RF__NO_STAGE ? (const unsigned char *)run->srcs[b] : rf__stage_ptr(run, stage);
}

static int rec_copy(void *c, rf__run *run, unsigned queue, size_t b, unsigned slot, unsigned stage, uint32_t node)
{
	(void)c;
	(void)node;
	log_op((rec){RF_OP_COPY, queue, 0, slot, b, 0});
	memcpy(rf__slot_ptr(run, slot), copy_src(run, b, stage), run->sizes[b]);
	return 0;
}

static int rec_stage(void *c, rf__run *run, unsigned queue, size_t b, unsigned stage, uint32_t node)
{
	(void)c;
	(void)node;
	log_op((rec){RF_OP_STAGE, queue, 0, stage, b, 0});
	memcpy(rf__stage_ptr(run, stage), run->srcs[b], run->sizes[b]);
	return 0;
}

static int rec_compute(void *c, rf__run *run, unsigned queue, size_t b, unsigned slot)
{
	(void)c;
	log_op((rec){RF_OP_COMPUTE, queue, 0, slot, b, 0});
	return rf__call_compute(run, b, slot, NULL);
}

static int rec_signal(void *c, unsigned q, int64_t v, size_t b)
{
	(void)c;
	log_op((rec){RF_OP_SIGNAL, q, 0, 0, b, v});
	return 0;
}

static int rec_wait(void *c, unsigned q, unsigned wq, int64_t v, size_t b)
{
	(void)c;
	log_op((rec){RF_OP_WAIT, q, wq, 0, b, v});
	return 0;
}

static const rf__walk_ops rec_walk = {rec_copy, rec_compute, rec_signal, rec_wait, rec_stage};

/* One walk over all queues in issue order keeps the interleaving. Copy and compute handlers are not
 * told their queue (a ring's copies sit on 1 + b % K, its computes on 0); signals and waits are. */
static int rec_run(void *ctx, rf__run *run)
{
	(void)ctx;
	return rf__walk(run, -1, 0, &rec_walk, NULL);
}

static int rec_probe(int device)
{
	(void)device;
	return RF_OK;
}

static int rec_open(const rf__open_args *a, void **ctx)
{
	(void)a;
	*ctx = NULL;
	return RF_OK;
}

static void rec_close(void *ctx)
{
	(void)ctx;
}

static int rec_slots_alloc(void *ctx, size_t bytes, void **mem)
{
	(void)ctx;
	return rf__staging_alloc(NULL, bytes, RF__STAGING_SLOT_ALIGN, mem); /* the default policy */
}

/* Designated: methods appended to the ops table later stay NULL here (optional ones). */
static const rf__backend_ops rec_backend = {.abi = RF__BACKEND_ABI, .name = "record", .caps = 0, .probe = rec_probe,
					    .open = rec_open, .close = rec_close, .slots_alloc = rec_slots_alloc,
					    .slots_free = rf__host_slots_free, .run = rec_run};

static void setup(void)
{
	cr_assert_eq(rf__backend_register(&rec_backend), RF_OK);
	g_len = 0;
}

static void teardown(void)
{
	free(g_log);
	g_log = NULL;
	g_len = g_cap = 0;
}

static int check_payload(void *user, const rf_block *b)
{
	(void)user;
	const unsigned char *p = b->data;
	for (size_t i = 0; i < b->bytes; i++)
		if (p[i] != (unsigned char)(b->index + i))
			return 1000 + (int)b->index;
	return 0;
}

static int check_payload_any(void *user, const rf_block *b)
{
	(void)user;
	(void)b;
	return 0;
}

static void run_ring(size_t n, unsigned depth, unsigned kq)
{
	enum { SZ = 24 };
	unsigned char *src = malloc(n * SZ + 1);
	const void **srcs = malloc((n + 1) * sizeof *srcs);
	size_t *sizes = malloc((n + 1) * sizeof *sizes);
	cr_assert(src && srcs && sizes);
	for (size_t b = 0; b < n; b++) {
		for (size_t i = 0; i < SZ; i++)
			src[b * SZ + i] = (unsigned char)(b + i);
		srcs[b] = src + b * SZ;
		sizes[b] = SZ;
	}
	rf_pipeline_params pp = {.depth = depth, .slot_bytes = SZ, .backend = "record", .copy_queues = kq};
	rf_pipeline *p;
	cr_assert_eq(rf_pipeline_create(&pp, &p), RF_OK, "%s", rf_errmsg());
	g_len = 0;
	cr_assert_eq(rf_pipeline_run(p, n, srcs, sizes, check_payload, NULL), RF_OK, "%s", rf_errmsg());
	rf_pipeline_destroy(p);
	free(src);
	free(srcs);
	free(sizes);
}

/* Position in the log of the first op matching (kind, block) with a queue filter (-1 = any). */
static size_t find(rf_op_kind kind, size_t block, int queue)
{
	for (size_t i = 0; i < g_len; i++)
		if (g_log[i].kind == kind && g_log[i].block == block && (queue < 0 || g_log[i].queue == (unsigned)queue))
			return i;
	return (size_t)-1;
}

TestSuite(recording, .init = setup, .fini = teardown);

/* The ops the core issues, read as plan steps (copy = PREFETCH, the wait before a compute on the
 * compute queue = AWAIT, compute = COMPUTE), are exactly rf_plan_ring's sequence. */
Test(recording, issue_order_is_the_plan)
{
	for (unsigned depth = 1; depth <= 16; depth++) {
		for (size_t n = 0; n <= 3 * depth + 5; n++) {
			run_ring(n, depth, 1);
			size_t len;
			rf_step *steps = malloc((3 * n + 1) * sizeof *steps);
			cr_assert_eq(rf_plan_ring(n, depth, steps, 3 * n, &len), RF_OK);
			size_t k = 0;
			for (size_t i = 0; i < g_len; i++) {
				rec r = g_log[i];
				rf_step_kind kind;
				if (r.kind == RF_OP_COPY)
					kind = RF_STEP_PREFETCH;
				else if (r.kind == RF_OP_COMPUTE)
					kind = RF_STEP_COMPUTE;
				else if (r.kind == RF_OP_WAIT && r.queue == 0)
					kind = RF_STEP_AWAIT;
				else
					continue;
				cr_assert_lt(k, len, "depth %u n %zu: more ops than plan steps", depth, n);
				cr_assert_eq(kind, steps[k].kind, "depth %u n %zu step %zu: kind", depth, n, k);
				cr_assert_eq(r.block, steps[k].block, "depth %u n %zu step %zu: block", depth, n, k);
				if (r.kind != RF_OP_WAIT)
					cr_assert_eq(r.slot, steps[k].slot, "depth %u n %zu step %zu: slot", depth, n, k);
				k++;
			}
			cr_assert_eq(k, len, "depth %u n %zu: %zu of %zu plan steps issued", depth, n, k, len);
			free(steps);
		}
	}
}

/* Lookahead: the prefetch of block n+depth-1 is issued before block n is awaited. */
Test(recording, prefetch_before_await)
{
	for (unsigned kq = 1; kq <= 3; kq++) {
		for (unsigned depth = kq == 1 ? 1 : kq + 1; depth <= 16; depth++) {
			size_t n = 4 * depth + 7;
			run_ring(n, depth, kq);
			for (size_t b = 0; b + depth - 1 < n; b++) {
				size_t pf = find(RF_OP_COPY, b + depth - 1, -1), aw = find(RF_OP_WAIT, b, 0);
				cr_assert_neq(pf, (size_t)-1);
				cr_assert_neq(aw, (size_t)-1, "no await of block %zu", b);
				cr_assert_lt(pf, aw, "K %u depth %u: prefetch of %zu after await of %zu", kq, depth,
					     b + depth - 1, b);
			}
		}
	}
}

/* WAR: before the copy of block b into slot b % depth (b >= depth), its queue waits on the compute
 * queue for a value signalled after compute(b - depth). Returns the first block that breaks it, or -1. */
static long war_violation(size_t n, unsigned depth, unsigned kq)
{
	for (size_t b = depth; b < n; b++) {
		size_t cp = find(RF_OP_COPY, b, -1), rd = find(RF_OP_COMPUTE, b - depth, 0);
		if (cp == (size_t)-1 || rd == (size_t)-1 || cp < rd || g_log[rd + 1].kind != RF_OP_SIGNAL)
			return (long)b;
		int64_t v = g_log[rd + 1].value;
		unsigned cq = 1 + (unsigned)(b % kq);
		int guarded = 0;
		for (size_t i = rd; i < cp; i++)
			guarded |= g_log[i].kind == RF_OP_WAIT && g_log[i].queue == cq && g_log[i].wait_queue == 0 &&
				   g_log[i].value >= v;
		if (!guarded)
			return (long)b;
	}
	return -1;
}

Test(recording, war_wait_precedes_slot_reuse)
{
	for (unsigned kq = 1; kq <= 3; kq++) {
		for (unsigned depth = kq == 1 ? 1 : kq + 1; depth <= 12; depth++) {
			size_t n = 5 * depth + 3;
			run_ring(n, depth, kq);
			cr_assert_eq(war_violation(n, depth, kq), -1, "K %u depth %u: copy of block %ld not guarded",
				     kq, depth, war_violation(n, depth, kq));
		}
	}
}

/* Negative control: the same check on a ring program whose WAR wait was dropped must fail. */
Test(recording, war_check_catches_a_dropped_wait)
{
	enum { N = 20, D = 3, SZ = 8 };
	struct rf_program *p;
	cr_assert_eq(rf__ring_program(D, 1, 0, &p), RF_OK);
	size_t before = p->nops;
	rf__prog_drop_war(p, 0);
	cr_assert_eq(p->nops, before - 1, "the template has exactly one WAR wait");
	static unsigned char src[SZ], slots[D * SZ];
	const void *srcs[N];
	size_t sizes[N];
	for (size_t i = 0; i < N; i++)
		srcs[i] = src, sizes[i] = SZ;
	atomic_int cancel = 0;
	rf__run run = {.prog = p, .nblocks = N, .srcs = srcs, .sizes = sizes, .compute = check_payload_any,
		       .slots = slots, .slot_stride = SZ, .cancel = &cancel};
	cr_assert_eq(rf__walk(&run, -1, 0, &rec_walk, NULL), 0);
	cr_assert_eq(war_violation(N, D, 1), (long)D, "the first reuse of a slot must be reported");
	rf_program_destroy(p);
}

/* In steady state each block costs two signals and two waits (RAW and WAR), whatever the depth. */
Test(recording, signals_and_waits_per_block)
{
	for (unsigned depth = 1; depth <= 8; depth++) {
		size_t n = 200;
		run_ring(n, depth, 1);
		size_t sig = 0, wait = 0;
		for (size_t i = 0; i < g_len; i++) {
			sig += g_log[i].kind == RF_OP_SIGNAL;
			wait += g_log[i].kind == RF_OP_WAIT;
		}
		/* n copy signals + (n - depth) compute signals; n RAW waits + (n - depth) WAR waits. */
		cr_assert_eq(sig, 2 * n - depth, "depth %u: %zu signals", depth, sig);
		cr_assert_eq(wait, 2 * n - depth, "depth %u: %zu waits", depth, wait);
	}
}

/* The pipeline's program is a template of 6 ops per copy queue: its size does not depend on nblocks. */
Test(recording, ring_program_is_o_depth)
{
	for (unsigned kq = 1; kq <= 4; kq++) {
		struct rf_program *p;
		cr_assert_eq(rf__ring_program(kq + 7, kq, 0, &p), RF_OK);
		cr_assert_eq(p->nops, 6u * kq);
		cr_assert_eq(p->period, (int64_t)kq);
		rf_program_destroy(p);
	}
}
