/* runtime/oracle.h — the hazard oracle (RINGFETCH_ORACLE=1): an independent check of a run's execution
 * log. It shares nothing with the plan, graph, lowering or backends: from what the walkers recorded
 * (which block ran where, the order of every start and end) it checks the promises from first principles. */
#ifndef RF_RUNTIME_ORACLE_H
#define RF_RUNTIME_ORACLE_H

#include "io/file.h"
#include "runtime/trace.h"

/* A ring run over nblocks that returned RF_OK: every block copied and computed once, in block order one
 * at a time; a compute starts after its copy ended (RAW) and reads the slot it filled; a copy starts
 * after the compute of its slot's previous block ended (WAR). A staged block likewise one hop back
 * (copy after stage; stage after the copy of its staging slot's previous block). RF_OK, RF_EHAZARD
 * naming the blocks, or RF_ENOMEM. */
int rf__oracle_check(const rf__trace *t, size_t nblocks);

/* A hand-built graph's promises for its rf_exec's runs: for every COPY / COMPUTE / STAGE node the work
 * nodes that must end before it starts (through edges, WAIT nodes and queue order), from the graph, not
 * the program. A queue may keep several copies in flight (a lane's file reads), so within one queue a
 * COPY before a COPY into another ring slot (no path between them through another queue) need only have
 * started first; and what waits on another queue for a node waits for everything its queue did before
 * it too (a queue's signal goes out once all of its earlier work has ended), which keeps a lane's copies
 * in flight honest. */
enum {
	RF__ORC_QUEUE_END = 0, /* u, and everything before it on its queue, ended before v started */
	RF__ORC_START = 1,     /* u started before v */
	RF__ORC_END = 2,       /* u ended before v started (the same queue) */
};
typedef struct rf__oracle_graph {
	size_t n;
	uint8_t *work;  /* 1 for COPY, COMPUTE and STAGE nodes */
	size_t *start;  /* the predecessors of v are pred[start[v] .. start[v + 1]) */
	size_t *pred;
	uint8_t *how;   /* per pred entry: RF__ORC_* */
	size_t *qwork;  /* the work node before v on its queue, or RF__NONE */
} rf__oracle_graph;

int rf__oracle_graph_build(const struct rf_graph *g, rf__oracle_graph *out);
void rf__oracle_graph_free(rf__oracle_graph *og);
/* Every work node ran exactly once, after every one of its predecessors ended (or started, for the
 * exception); the copies into each ring slot, in block order, each after the one before ended (WAW).
 * RF_OK, RF_EHAZARD or RF_ENOMEM. */
int rf__oracle_check_graph(const rf__trace *t, const rf__oracle_graph *og);

/* Keyed use (runtime/keyed.c): the holds, counted from acquire and release alone (so that a slot
 * choice that ignored one is caught), and a scratch row for the copies' log; holds NULL: no oracle. */
typedef struct rf__oracle_keyed {
	unsigned n;
	unsigned *holds;
	size_t *last;
} rf__oracle_keyed;

int rf__oracle_keyed_make(rf__oracle_keyed *o, unsigned nslots); /* RF_OK or RF_ENOMEM */
void rf__oracle_keyed_free(rf__oracle_keyed *o);
/* A hold taken (+1) or let go (-1) on slot; 0: every hold on it dropped (a reset). Inline, as the next
 * one: every hit and release passes here, and without the oracle it is one test. */
static inline void rf__oracle_keyed_hold(rf__oracle_keyed *o, unsigned slot, int delta)
{
	if (o->holds != NULL)
		o->holds[slot] = delta == 0 || (delta < 0 && o->holds[slot] == 0) ? 0 : o->holds[slot] + (unsigned)delta;
}
/* WAR: before a copy of key into slot, which no hold may be on. RF_OK or RF_EHAZARD (the sentence:
 * rf__oracle_keyed_war). */
int rf__oracle_keyed_war(const rf__oracle_keyed *o, unsigned slot, uint64_t key);
static inline int rf__oracle_keyed_copy(const rf__oracle_keyed *o, unsigned slot, uint64_t key)
{
	return o->holds == NULL || o->holds[slot] == 0 ? RF_OK : rf__oracle_keyed_war(o, slot, key);
}
/* 1 when data holds src's bytes: a file's read through its descriptor (never its mapping, which faults
 * past the end of a file that shrank), a range the file no longer holds taken as held; else 0. */
int rf__oracle_src_holds(const void *data, const rf__src *src, size_t bytes);
/* RAW: an acquire on a host backend returns slot (at data) holding exactly key's bytes at src
 * (rf__oracle_src_holds). */
int rf__oracle_keyed_acquire(const void *data, const rf__src *src, size_t bytes, uint64_t key, unsigned slot);
/* WAW, from the keyed copies' slices (runtime/trace.h, keyed; every copy finished): each copy into a
 * slot starts after the copy issued into it before ended. RF_OK or RF_EHAZARD. */
int rf__oracle_keyed_log(rf__oracle_keyed *o, const rf__trace *t);

#endif
