/* runtime/oracle.h — the hazard oracle: an independent check of a ring run's execution log. It shares
 * nothing with the plan, the graph, the lowering or the backends: it reads only what the walkers recorded
 * (which block ran where, and the order of every start and end in the run's one sequence) and checks the
 * ring's promises from first principles. Enabled per pipeline with RINGFETCH_ORACLE=1 (runtime/pipeline.c). */
#ifndef RF_RUNTIME_ORACLE_H
#define RF_RUNTIME_ORACLE_H

#include "runtime/trace.h"

/* Check a run over nblocks blocks that returned RF_OK: every block copied once and computed once, in
 * block order one at a time; each compute starts after its block's copy ended (RAW) and reads the slot
 * that copy filled; each copy into a slot starts after the compute of the slot's previous block ended
 * (WAR). A staged block (staged at most once) the same one hop back: its copy starts after its stage
 * ended (RAW), and its stage starts after the copy of the previous block staged in its staging slot
 * ended (WAR). On a device backend a copy's slice is its enqueue: the hop is checked at the host's
 * side. Returns RF_OK, or RF_EHAZARD with rf_errmsg naming the blocks; RF_ENOMEM. */
int rf__oracle_check(const rf__trace *t, size_t nblocks);

/* A hand-built graph's promises, flattened for checking runs of its rf_exec: for every COPY / COMPUTE
 * node, the COPY / COMPUTE nodes that must have ended before it starts — through its explicit edges, WAIT
 * nodes and the order of its queue. Built from the graph itself, never from the lowered program. */
typedef struct rf__oracle_graph {
	size_t n;
	uint8_t *work; /* 1 for COPY and COMPUTE nodes */
	size_t *start; /* the predecessors of v are pred[start[v] .. start[v + 1]) */
	size_t *pred;
} rf__oracle_graph;

int rf__oracle_graph_build(const struct rf_graph *g, rf__oracle_graph *out);
void rf__oracle_graph_free(rf__oracle_graph *og);
/* Every work node ran exactly once, after every one of its predecessors ended. RF_OK, RF_EHAZARD or
 * RF_ENOMEM. */
int rf__oracle_check_graph(const rf__trace *t, const rf__oracle_graph *og);

#endif
