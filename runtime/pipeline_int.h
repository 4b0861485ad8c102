/* runtime/pipeline_int.h — struct rf_pipeline, shared by runtime/pipeline.c (create, runs, depth = auto)
 * and runtime/pipeline_keyed.c (the keyed calls). */
#ifndef RF_RUNTIME_PIPELINE_INT_H
#define RF_RUNTIME_PIPELINE_INT_H

#include "runtime/autodepth.h"
#include "runtime/engine.h"

struct rf_pipeline {
	rf__engine eng;
	_Atomic unsigned depth; /* read by rf_pipeline_depth from any thread; depth = auto changes it */
	unsigned copy_queues;
	unsigned pins;     /* staging slots per copy queue: the backend's staged ring (0: the plain ring) */
	int local;         /* RF_LOCALITY_COPIER on a backend that honours it: rings from rf__ring_program_local */
	/* depth = auto (up to eng.nslots, the deepest ring the slots allow), probing (probe.n > 1): a program
	 * per candidate (built when the rule ran: switching allocates nothing); the engine runs
	 * cprog[probe.cur], the others are ours until probing ends. */
	rf__auto_probe probe;
	struct rf_program *cprog[RF__AUTO_NCAND];
};

#endif
