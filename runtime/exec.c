/* runtime/exec.c — rf_exec: a hand-built graph, validated, lowered and instantiated on a backend. */
#include "base/alloc.h"
#include "runtime/config.h"
#include "runtime/engine.h"
#include "base/error.h"
#include "runtime/oracle.h"

#include <stdlib.h>
#include <string.h>

struct rf_exec {
	rf__engine eng;
	rf__oracle_graph oracle; /* RINGFETCH_ORACLE=1: the graph's promises, checked after every run */
};

static void rf__exec_free(void *p)
{
	rf_exec *e = p;
	rf__engine_fini(&e->eng);
	rf__oracle_graph_free(&e->oracle);
	free(e);
}

int rf_exec_create(const rf_graph *g, const rf_exec_params *params, rf_exec **out)
{
	if (g == NULL || params == NULL || out == NULL)
		return rf__err(RF_EINVAL, "rf_exec_create: %s is NULL",
			       g == NULL ? "g" : params == NULL ? "params" : "out");
	if (params->slot_bytes == 0)
		return rf__err(RF_EINVAL, "rf_exec_create: slot_bytes is 0");
	if (params->flags != 0)
		return rf__err(RF_EINVAL, "rf_exec_create: flags must be 0 (got %#x)", params->flags);
	if (rf_graph_nodes(g) == 0)
		return rf__err(RF_EINVAL, "rf_exec_create: the graph is empty");
	rf__config cfg;
	const char *from;
	int rc = rf__config_load(&cfg, 0, params->backend == NULL, 0, 0);
	if (rc != RF_OK)
		return rc;
	const char *backend = rf__config_backend(&cfg, params->backend, &from);
	/* rf_exec_params has no memory field: computes take host memory unless the caller names "cuda"
	 * itself. So "auto" picks a host backend, and a configured "cuda" is RF_ECONFIG. */
	if (from != NULL || strcmp(backend, "cuda") != 0)
		rc = rf__backend_for_memory("rf_exec_create", backend, from, RF_MEMORY_HOST, &backend);
	if (rc != RF_OK)
		return rc;
	rf_program *prog;
	rf_exec *e = NULL;
	if ((rc = rf_graph_lower(g, &prog)) != RF_OK)
		return rc;
	/* The budget caps every ring, a hand-built graph's too: checked before anything is allocated. */
	rc = rf__config_budget_check(&cfg, "rf_exec_create", prog->nslots, params->slot_bytes);
	if (rc != RF_OK || (e = rf__calloc(1, sizeof *e)) == NULL) {
		rf_program_destroy(prog);
		return rc != RF_OK ? rc : rf__err(RF_ENOMEM, "rf_exec_create: out of memory");
	}
	/* The oracle's graph first: a failure then has no engine to undo. */
	if (cfg.oracle && (rc = rf__oracle_graph_build(g, &e->oracle)) == RF_OK)
		e->eng.graph = &e->oracle;
	if (rc != RF_OK)
		rf_program_destroy(prog); /* rf__engine_init takes it in every case */
	else
		rc = rf__engine_init(&e->eng, "rf_exec_create", backend, params->device, prog, params->slot_bytes,
				     &cfg);
	if (rc != RF_OK) {
		rf__oracle_graph_free(&e->oracle);
		free(e);
		return rc;
	}
	e->eng.release = rf__exec_free;
	e->eng.owner = e;
	*out = e;
	return RF_OK;
}

int rf_exec_run(rf_exec *e, size_t nblocks, const void *const *srcs, const size_t *sizes,
		rf_compute_fn compute, void *user)
{
	if (e == NULL)
		return rf__err(RF_EINVAL, "rf_exec_run: e is NULL");
	return rf__engine_run(&e->eng, "rf_exec_run", nblocks, srcs, sizes, compute, user);
}

const char *rf_exec_backend(const rf_exec *e)
{
	return e ? e->eng.be->name : "";
}

void rf_exec_destroy(rf_exec *e)
{
	if (e != NULL && rf__engine_destroy_begin(&e->eng))
		rf__exec_free(e);
}
