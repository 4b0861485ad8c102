/* tests/test_oracle.c — the hazard oracles must be able to fail: synthetic execution logs that break
 * each rule are refused, and the logs of correct runs are accepted — the staging hop's too. */
#include "runtime/oracle.h"

#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* A log on two queues: queue 1 copies, queue 0 computes; events given as (kind, block, slot, s0, s1). */
typedef struct ev {
	int kind;
	long block;
	unsigned slot, node;
	unsigned long long s0, s1;
} ev;

static rf__tev g_ev[3][16];

/* Queue 1 copies, queue 0 computes, queue 2 stages. */
static void make_log(rf__trace *t, const ev *e, size_t n)
{
	memset(t, 0, sizeof *t);
	t->nq = 3;
	t->ev[0] = g_ev[0];
	t->ev[1] = g_ev[1];
	t->ev[2] = g_ev[2];
	for (size_t i = 0; i < n; i++) {
		unsigned q = e[i].kind == RF_OP_COPY ? 1 : e[i].kind == RF_OP_STAGE ? 2 : 0;
		rf__tev x = {0, 0, e[i].s0, e[i].s1, e[i].block, e[i].slot, e[i].node, (uint8_t)e[i].kind};
		t->ev[q][t->n[q]++] = x;
	}
}

#define C(b, s, a, z) {RF_OP_COPY, b, s, 0, a, z}
#define M(b, s, a, z) {RF_OP_COMPUTE, b, s, 0, a, z}
#define S(b, t, a, z) {RF_OP_STAGE, b, t, 0, a, z}

Test(oracle, ring_accepts_a_correct_depth2_run)
{
	/* P0 P1 C0 P2 C1 P3 C2 C3 with sequence numbers respecting RAW and WAR */
	ev e[] = {C(0, 0, 0, 1), C(1, 1, 2, 3), M(0, 0, 4, 5), C(2, 0, 6, 7), M(1, 1, 8, 9), C(3, 1, 10, 11),
		  M(2, 0, 12, 13), M(3, 1, 14, 15)};
	rf__trace t;
	make_log(&t, e, 8);
	cr_assert_eq(rf__oracle_check(&t, 4), RF_OK);
}

Test(oracle, ring_refuses_each_broken_rule)
{
	static const struct {
		ev e[4];
		size_t n, nblocks;
		const char *says;
	} bad[] = {
		{{C(0, 0, 0, 3), M(0, 0, 2, 4)}, 2, 1, "RAW"},                           /* compute before copy ended */
		{{C(0, 0, 0, 1), M(0, 1, 2, 3)}, 2, 1, "slot"},                          /* computes another slot */
		{{C(0, 0, 0, 1), M(0, 0, 2, 5), C(1, 0, 3, 4), M(1, 0, 6, 7)}, 4, 2, "WAR"}, /* refill under a reader */
		{{C(0, 0, 0, 1), C(1, 1, 2, 3), M(1, 1, 4, 5), M(0, 0, 5, 6)}, 4, 2, "compute of block 1"}, /* order */
		{{C(0, 0, 0, 1)}, 1, 1, "never computed"},
		{{C(0, 0, 0, 1), M(0, 0, 2, 3), M(0, 0, 4, 5)}, 3, 1, "twice"},
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		rf__trace t;
		make_log(&t, bad[i].e, bad[i].n);
		cr_assert_eq(rf__oracle_check(&t, bad[i].nblocks), RF_EHAZARD, "case %zu accepted", i);
		cr_assert(strstr(rf_errmsg(), bad[i].says) != NULL, "case %zu: %s", i, rf_errmsg());
	}
}

/* Two hops: blocks staged through one staging slot, copied through two ring slots. */
Test(oracle, staged_ring_accepts_a_correct_run_and_refuses_each_broken_hop)
{
	ev good[] = {S(0, 0, 0, 1), C(0, 0, 2, 3), S(1, 0, 4, 5), C(1, 1, 6, 7), M(0, 0, 8, 9), M(1, 1, 10, 11)};
	rf__trace t;
	make_log(&t, good, 6);
	cr_assert_eq(rf__oracle_check(&t, 2), RF_OK, "%s", rf_errmsg());
	static const struct {
		ev e[6];
		const char *says;
	} bad[] = {
		/* the copy of block 0 starts before its stage ended */
		{{S(0, 0, 0, 3), C(0, 0, 2, 4), S(1, 0, 5, 6), C(1, 1, 7, 8), M(0, 0, 9, 10), M(1, 1, 11, 12)},
		 "RAW: copy of block 0 started before its stage"},
		/* block 1 is staged into staging slot 0 while the copy of block 0 still reads it */
		{{S(0, 0, 0, 1), C(0, 0, 2, 5), S(1, 0, 3, 4), C(1, 1, 6, 7), M(0, 0, 8, 9), M(1, 1, 10, 11)},
		 "WAR: stage of block 1 into staging slot 0 started before the copy of block 0"},
		/* block 0 staged twice */
		{{S(0, 0, 0, 1), C(0, 0, 2, 3), S(0, 1, 4, 5), C(1, 1, 6, 7), M(0, 0, 8, 9), M(1, 1, 10, 11)},
		 "block 0 was staged twice"},
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		make_log(&t, bad[i].e, 6);
		cr_assert_eq(rf__oracle_check(&t, 2), RF_EHAZARD, "case %zu accepted", i);
		cr_assert(strstr(rf_errmsg(), bad[i].says) != NULL, "case %zu: %s", i, rf_errmsg());
	}
}

Test(oracle, graph_refuses_a_node_that_started_before_its_predecessor_ended)
{
	/* copy (node 0, q1) -> WAIT (node 1, q0) -> compute (node 2, q0) */
	rf_graph *g;
	cr_assert_eq(rf_graph_create(0, &g), RF_OK);
	rf_node_desc cp = {RF_NODE_COPY, 1, 0, 0, 0}, w = {RF_NODE_WAIT, 0, 0, 0, 0}, cm = {RF_NODE_COMPUTE, 0, 0, 0, 0};
	size_t a, b, c;
	cr_assert_eq(rf_graph_add_node(g, &cp, &a), RF_OK);
	cr_assert_eq(rf_graph_add_node(g, &w, &b), RF_OK);
	cr_assert_eq(rf_graph_add_node(g, &cm, &c), RF_OK);
	cr_assert_eq(rf_graph_add_edge(g, a, b), RF_OK);
	cr_assert_eq(rf_graph_add_edge(g, b, c), RF_OK);
	rf__oracle_graph og;
	cr_assert_eq(rf__oracle_graph_build(g, &og), RF_OK);
	cr_assert_eq(og.start[c + 1] - og.start[c], 1u, "the compute's one work predecessor, through the WAIT");
	cr_assert_eq(og.pred[og.start[c]], a);
	ev good[] = {{RF_OP_COPY, 0, 0, 0, 0, 1}, {RF_OP_COMPUTE, 0, 0, 2, 2, 3}};
	ev late[] = {{RF_OP_COPY, 0, 0, 0, 0, 3}, {RF_OP_COMPUTE, 0, 0, 2, 2, 4}};
	ev twice[] = {{RF_OP_COPY, 0, 0, 0, 0, 1}, {RF_OP_COPY, 0, 0, 0, 2, 3}};
	rf__trace t;
	make_log(&t, good, 2);
	cr_assert_eq(rf__oracle_check_graph(&t, &og), RF_OK, "%s", rf_errmsg());
	make_log(&t, late, 2);
	cr_assert_eq(rf__oracle_check_graph(&t, &og), RF_EHAZARD);
	cr_assert(strstr(rf_errmsg(), "node 2 started before node 0") != NULL, "%s", rf_errmsg());
	make_log(&t, twice, 2);
	cr_assert_eq(rf__oracle_check_graph(&t, &og), RF_EHAZARD);
	make_log(&t, good, 1);
	cr_assert_eq(rf__oracle_check_graph(&t, &og), RF_EHAZARD);
	cr_assert(strstr(rf_errmsg(), "never ran") != NULL, "%s", rf_errmsg());
	rf__oracle_graph_free(&og);
	rf_graph_destroy(g);
}

static size_t add(rf_graph *g, rf_node_kind kind, unsigned queue, size_t block, unsigned slot)
{
	rf_node_desc d = {kind, queue, block, slot, 0};
	size_t id;
	cr_assert_eq(rf_graph_add_node(g, &d, &id), RF_OK);
	return id;
}

/* A lane keeps several copies in flight: copies on one queue into different slots may overlap (each
 * starting after the one before it started); into one slot they may not, even with another between them;
 * what waits for them on another queue, or follows them on their own, still waits for their end. */
Test(oracle, graph_lets_a_queues_copies_overlap_unless_they_fill_one_slot)
{
	rf_graph *g;
	cr_assert_eq(rf_graph_create(0, &g), RF_OK);
	size_t c0 = add(g, RF_NODE_COPY, 1, 0, 0), c1 = add(g, RF_NODE_COPY, 1, 1, 1), c2 = add(g, RF_NODE_COPY, 1, 2, 0);
	size_t w = add(g, RF_NODE_WAIT, 0, 0, 0), m1 = add(g, RF_NODE_COMPUTE, 0, 1, 1), m2 = add(g, RF_NODE_COMPUTE, 0, 2, 0);
	cr_assert_eq(rf_graph_add_edge(g, c1, w), RF_OK);
	cr_assert_eq(rf_graph_add_edge(g, c2, w), RF_OK);
	cr_assert_eq(rf_graph_validate(g), RF_OK, "%s", rf_errmsg());
	rf__oracle_graph og;
	cr_assert_eq(rf__oracle_graph_build(g, &og), RF_OK);
	cr_assert_eq(og.start[c1 + 1] - og.start[c1], 1u);
	cr_assert(og.pred[og.start[c1]] == c0 && og.how[og.start[c1]] == RF__ORC_START, "c1 need only start after c0");
	for (size_t k = og.start[m1]; k < og.start[m1 + 1]; k++)
		cr_assert(og.how[k] == RF__ORC_QUEUE_END, "a compute waits for the end of what it follows");
#define E(kind, b, s, node, a, z) {kind, b, s, (unsigned)(node), a, z}
	ev good[] = {E(RF_OP_COPY, 0, 0, c0, 0, 2), E(RF_OP_COPY, 1, 1, c1, 1, 4), E(RF_OP_COPY, 2, 0, c2, 3, 5),
		     E(RF_OP_COMPUTE, 1, 1, m1, 6, 7), E(RF_OP_COMPUTE, 2, 0, m2, 8, 9)};
	ev waw[] = {E(RF_OP_COPY, 0, 0, c0, 0, 5), E(RF_OP_COPY, 1, 1, c1, 1, 2), E(RF_OP_COPY, 2, 0, c2, 3, 4),
		    E(RF_OP_COMPUTE, 1, 1, m1, 6, 7), E(RF_OP_COMPUTE, 2, 0, m2, 8, 9)};
	ev order[] = {E(RF_OP_COPY, 0, 0, c0, 1, 2), E(RF_OP_COPY, 1, 1, c1, 0, 4), E(RF_OP_COPY, 2, 0, c2, 3, 5),
		      E(RF_OP_COMPUTE, 1, 1, m1, 6, 7), E(RF_OP_COMPUTE, 2, 0, m2, 8, 9)};
	ev raw[] = {E(RF_OP_COPY, 0, 0, c0, 0, 2), E(RF_OP_COPY, 1, 1, c1, 1, 7), E(RF_OP_COPY, 2, 0, c2, 3, 5),
		    E(RF_OP_COMPUTE, 1, 1, m1, 6, 8), E(RF_OP_COMPUTE, 2, 0, m2, 9, 10)};
	rf__trace t;
	make_log(&t, good, 5);
	cr_assert_eq(rf__oracle_check_graph(&t, &og), RF_OK, "%s", rf_errmsg());
	make_log(&t, waw, 5);
	cr_assert_eq(rf__oracle_check_graph(&t, &og), RF_EHAZARD);
	cr_assert(strstr(rf_errmsg(), "WAW") != NULL && strstr(rf_errmsg(), "slot 0") != NULL, "%s", rf_errmsg());
	make_log(&t, order, 5);
	cr_assert_eq(rf__oracle_check_graph(&t, &og), RF_EHAZARD);
	cr_assert(strstr(rf_errmsg(), "before it on its queue") != NULL, "%s", rf_errmsg());
	make_log(&t, raw, 5);
	cr_assert_eq(rf__oracle_check_graph(&t, &og), RF_EHAZARD);
	cr_assert(strstr(rf_errmsg(), "node 4 started before node 1") != NULL, "%s", rf_errmsg());
	rf__oracle_graph_free(&og);
	rf_graph_destroy(g);

	/* What waits for a copy on another queue waits for the copies before it on that queue too: a lane's
	 * signal goes out once all of them have landed, not just the last (here the compute reads c0's slot
	 * and is ordered after it only through c1). */
	cr_assert_eq(rf_graph_create(0, &g), RF_OK);
	c0 = add(g, RF_NODE_COPY, 1, 0, 0);
	c1 = add(g, RF_NODE_COPY, 1, 1, 1);
	w = add(g, RF_NODE_WAIT, 0, 0, 0);
	m1 = add(g, RF_NODE_COMPUTE, 0, 0, 0);
	cr_assert_eq(rf_graph_add_edge(g, c1, w), RF_OK);
	cr_assert_eq(rf_graph_validate(g), RF_OK, "%s", rf_errmsg());
	cr_assert_eq(rf__oracle_graph_build(g, &og), RF_OK);
	{
		ev ok[] = {E(RF_OP_COPY, 0, 0, c0, 0, 3), E(RF_OP_COPY, 1, 1, c1, 1, 2), E(RF_OP_COMPUTE, 0, 0, m1, 4, 5)};
		ev soon[] = {E(RF_OP_COPY, 0, 0, c0, 0, 6), E(RF_OP_COPY, 1, 1, c1, 1, 2), E(RF_OP_COMPUTE, 0, 0, m1, 3, 4)};
		make_log(&t, ok, 3);
		cr_assert_eq(rf__oracle_check_graph(&t, &og), RF_OK, "%s", rf_errmsg());
		make_log(&t, soon, 3);
		cr_assert_eq(rf__oracle_check_graph(&t, &og), RF_EHAZARD);
		cr_assert(strstr(rf_errmsg(), "node 3 started before node 1 (which it must follow) and the work before it "
					      "on its queue ended") != NULL, "%s", rf_errmsg());
	}
	rf__oracle_graph_free(&og);
	rf_graph_destroy(g);

	/* A compute on the copy's own queue reads the slot: it waits for the copy's end. */
	cr_assert_eq(rf_graph_create(0, &g), RF_OK);
	c0 = add(g, RF_NODE_COPY, 1, 0, 0);
	m1 = add(g, RF_NODE_COMPUTE, 1, 0, 0);
	cr_assert_eq(rf__oracle_graph_build(g, &og), RF_OK);
	ev early[] = {E(RF_OP_COPY, 0, 0, c0, 0, 3), E(RF_OP_COMPUTE, 0, 0, m1, 1, 2)};
	make_log(&t, early, 2);
	cr_assert_eq(rf__oracle_check_graph(&t, &og), RF_EHAZARD);
	cr_assert(strstr(rf_errmsg(), "node 1 started before node 0") != NULL, "%s", rf_errmsg());
#undef E
	rf__oracle_graph_free(&og);
	rf_graph_destroy(g);
}

/* ---- keyed use ------------------------------------------------------------------------------------- */

/* Keyed copies' slices in issue order: (key, slot, s0, s1); s1 0: withdrawn, never made. */
static void make_keyed_log(rf__trace *t, const unsigned long long (*e)[4], size_t n)
{
	memset(t, 0, sizeof *t);
	t->nq = 1;
	t->keyed = 1;
	t->ev[0] = g_ev[0];
	for (size_t i = 0; i < n; i++)
		t->ev[0][t->n[0]++] = (rf__tev){1, (int64_t)e[i][3], e[i][2], e[i][3], (int64_t)e[i][0],
						(uint32_t)e[i][1], 0, RF_OP_COPY};
}

Test(oracle, keyed_copies_into_one_slot_one_at_a_time)
{
	rf__oracle_keyed o;
	cr_assert_eq(rf__oracle_keyed_make(&o, 2), RF_OK);
	rf__trace t;
	/* slot 0: key 1 then key 3 after it ended; slot 1's key 2 overlaps them; key 4, withdrawn, is skipped */
	const unsigned long long good[][4] = {{1, 0, 0, 4}, {2, 1, 1, 6}, {3, 0, 5, 7}, {4, 0, 0, 0}, {5, 0, 8, 9}};
	make_keyed_log(&t, good, 5);
	cr_assert_eq(rf__oracle_keyed_log(&o, &t), RF_OK, "%s", rf_errmsg());
	/* key 3 started into slot 0 before key 1, issued before it, ended */
	const unsigned long long waw[][4] = {{1, 0, 0, 4}, {2, 1, 1, 2}, {3, 0, 3, 5}};
	make_keyed_log(&t, waw, 3);
	cr_assert_eq(rf__oracle_keyed_log(&o, &t), RF_EHAZARD);
	cr_assert(strstr(rf_errmsg(), "WAW: the copy of key 3 into slot 0") != NULL, "%s", rf_errmsg());
	/* issued later, made earlier: the order is the issue's */
	const unsigned long long swapped[][4] = {{1, 0, 5, 6}, {3, 0, 0, 1}};
	make_keyed_log(&t, swapped, 2);
	cr_assert_eq(rf__oracle_keyed_log(&o, &t), RF_EHAZARD);
	rf__oracle_keyed_free(&o);
}

Test(oracle, keyed_holds_and_acquires)
{
	rf__oracle_keyed o;
	cr_assert_eq(rf__oracle_keyed_make(&o, 2), RF_OK);
	rf__oracle_keyed_hold(&o, 1, 1);
	rf__oracle_keyed_hold(&o, 1, 1);
	cr_assert_eq(rf__oracle_keyed_copy(&o, 0, 7), RF_OK);
	cr_assert_eq(rf__oracle_keyed_copy(&o, 1, 7), RF_EHAZARD);
	cr_assert(strstr(rf_errmsg(), "WAR: a copy of key 7 into slot 1, which is held 2 time(s)") != NULL, "%s",
		  rf_errmsg());
	rf__oracle_keyed_hold(&o, 1, -1);
	cr_assert_eq(rf__oracle_keyed_copy(&o, 1, 7), RF_EHAZARD, "still held once");
	rf__oracle_keyed_hold(&o, 1, -1);
	cr_assert_eq(rf__oracle_keyed_copy(&o, 1, 7), RF_OK);
	rf__oracle_keyed_hold(&o, 0, 1);
	rf__oracle_keyed_hold(&o, 0, 0);
	cr_assert_eq(rf__oracle_keyed_copy(&o, 0, 7), RF_OK, "a reset drops the holds");
	const char a[4] = "abc", b[4] = "abd";
	const rf__src mem = {.p = "abc"};
	cr_assert_eq(rf__oracle_keyed_acquire(a, &mem, 4, 9, 0), RF_OK);
	cr_assert_eq(rf__oracle_keyed_acquire(b, &mem, 4, 9, 1), RF_EHAZARD);
	cr_assert(strstr(rf_errmsg(), "RAW: acquire of key 9 returned slot 1") != NULL, "%s", rf_errmsg());
	/* A file source is read through its descriptor, past a page; a range the file no longer holds (it
	 * shrank) is not compared, where its mapping would fault. */
	char path[] = "rf_oracle_XXXXXX";
	int fd = mkstemp(path);
	cr_assert(fd >= 0);
	static unsigned char bytes[3 * 4096 + 5], slot[3 * 4096 + 5];
	for (size_t i = 0; i < sizeof bytes; i++)
		bytes[i] = (unsigned char)(i * 7 + 1);
	cr_assert_eq(write(fd, bytes, sizeof bytes), (ssize_t)sizeof bytes);
	rf_file *f;
	cr_assert_eq(rf_file_open(path, RF_FILE_BUFFERED, &f), RF_OK, "%s", rf_errmsg());
	const rf__src file = {.p = (const unsigned char *)rf_file_data(f) + 3, .fs = {.f = f, .off = 3}};
	memcpy(slot, bytes + 3, sizeof slot - 3);
	cr_assert_eq(rf__oracle_keyed_acquire(slot, &file, sizeof slot - 3, 9, 2), RF_OK, "%s", rf_errmsg());
	slot[2 * 4096 + 1] ^= 1;
	cr_assert_eq(rf__oracle_keyed_acquire(slot, &file, sizeof slot - 3, 9, 2), RF_EHAZARD);
	cr_assert_eq(ftruncate(fd, 4096), 0);
	cr_assert_eq(rf__oracle_keyed_acquire(slot, &file, sizeof slot - 3, 9, 2), RF_OK, "%s", rf_errmsg());
	cr_assert_eq(rf_file_close(f), RF_OK);
	close(fd);
	unlink(path);
	rf__oracle_keyed_free(&o);
	/* without the oracle (never made) nothing is counted or refused */
	rf__oracle_keyed none = {0};
	rf__oracle_keyed_hold(&none, 0, 1);
	cr_assert_eq(rf__oracle_keyed_copy(&none, 0, 7), RF_OK);
}
