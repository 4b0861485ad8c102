/* runtime/pipeline.c — rf_pipeline: the ring of `depth` slots as a periodic program on an engine. */
#include "runtime/config.h"
#include "runtime/engine.h"
#include "runtime/error.h"

#include <stdlib.h>

struct rf_pipeline {
	rf__engine eng;
	unsigned depth;
	unsigned copy_queues;
};

static int rf__pipeline_params_check(const rf_pipeline_params *pp, rf_pipeline **out)
{
	if (pp == NULL || out == NULL)
		return rf__err(RF_EINVAL, "rf_pipeline_create: %s is NULL", pp == NULL ? "params" : "out");
	if (pp->slot_bytes == 0)
		return rf__err(RF_EINVAL, "rf_pipeline_create: slot_bytes is 0");
	if (pp->depth > RF_MAX_DEPTH)
		return rf__err(RF_EINVAL, "rf_pipeline_create: depth %u is over RF_MAX_DEPTH (%u)", pp->depth,
			       RF_MAX_DEPTH);
	if (pp->flags != 0)
		return rf__err(RF_EINVAL, "rf_pipeline_create: flags must be 0 (got %#x)", pp->flags);
	if (pp->copy_queues >= RF_MAX_QUEUES)
		return rf__err(RF_EINVAL, "rf_pipeline_create: copy_queues %u is over %u", pp->copy_queues,
			       RF_MAX_QUEUES - 1);
	return RF_OK;
}

static void rf__pipeline_free(void *p)
{
	rf_pipeline *pl = p;
	rf__engine_fini(&pl->eng);
	free(pl);
}

/* The values to build with: explicit params, else configured (file < environment), else defaults. */
typedef struct rf__resolved {
	unsigned depth, kq;
	const char *backend;
	rf__staging_policy staging;
	rf__config cfg;
} rf__resolved;

static int rf__pipeline_resolve(const rf_pipeline_params *pp, rf__resolved *r)
{
	rf__config *c = &r->cfg;
	int rc = rf__config_load(c, pp->depth == 0, pp->backend == NULL, pp->copy_queues == 0, pp->staging == NULL);
	if (rc != RF_OK)
		return rc;
	r->depth = pp->depth ? pp->depth : c->depth ? c->depth : 2;
	r->kq = pp->copy_queues ? pp->copy_queues : c->copy_queues ? c->copy_queues : 1;
	r->backend = pp->backend ? pp->backend : c->backend ? c->backend : "auto";
	const char *staging = pp->staging ? pp->staging : c->staging[0] ? c->staging : NULL;
	if ((rc = rf__staging_parse("rf_pipeline_create", staging, &r->staging)) != RF_OK)
		return rc;
	if (r->kq > 1 && r->depth < r->kq + 1)
		return rf__err(RF_EINVAL, "rf_pipeline_create: %u copy queues need depth >= %u (depth is %u)", r->kq,
			       r->kq + 1, r->depth);
	if (c->memory_budget != 0 && pp->slot_bytes > c->memory_budget / r->depth)
		return rf__err(RF_ECONFIG, "rf_pipeline_create: a ring of %u x %zu bytes exceeds %s (%llu bytes)",
			       r->depth, pp->slot_bytes, c->budget_from, c->memory_budget);
	return RF_OK;
}

int rf_pipeline_create(const rf_pipeline_params *params, rf_pipeline **out)
{
	int rc = rf__pipeline_params_check(params, out);
	if (rc != RF_OK)
		return rc;
	rf__resolved r;
	if ((rc = rf__pipeline_resolve(params, &r)) != RF_OK)
		return rc;
	rf_pipeline *p = calloc(1, sizeof *p);
	if (p == NULL)
		return rf__err(RF_ENOMEM, "rf_pipeline_create: out of memory");
	struct rf_program *prog;
	if ((rc = rf__ring_program(r.depth, r.kq, &prog)) != RF_OK)
		goto fail;
	if (rf__test_hooks.drop_war_wait)
		rf__prog_drop_war(prog);
	p->eng.staging = r.staging;
	if ((rc = rf__engine_init(&p->eng, "rf_pipeline_create", r.backend, params->device, prog,
				  params->slot_bytes)) != RF_OK)
		goto fail;
	p->eng.release = rf__pipeline_free;
	p->eng.owner = p;
	p->depth = r.depth;
	p->copy_queues = r.kq;
	if (r.cfg.trace[0] != '\0' && (rc = rf__engine_trace(&p->eng, "rf_pipeline_create", r.cfg.trace)) != RF_OK) {
		rf__pipeline_free(p);
		return rc;
	}
	*out = p;
	return RF_OK;
fail:
	free(p);
	return rc;
}

int rf_pipeline_run(rf_pipeline *p, size_t nblocks, const void *const *srcs, const size_t *sizes,
		    rf_compute_fn compute, void *user)
{
	if (nblocks == 0)
		return RF_OK;
	if (p == NULL)
		return rf__err(RF_EINVAL, "rf_pipeline_run: p is NULL");
	return rf__engine_run(&p->eng, "rf_pipeline_run", nblocks, srcs, sizes, compute, user);
}

unsigned rf_pipeline_depth(const rf_pipeline *p)
{
	return p ? p->depth : 0;
}

const char *rf_pipeline_backend(const rf_pipeline *p)
{
	return p ? p->eng.be->name : "";
}

size_t rf_pipeline_slot_bytes(const rf_pipeline *p)
{
	return p ? p->eng.slot_bytes : 0;
}

int rf_pipeline_collect_stats(rf_pipeline *p, int on)
{
	if (p == NULL)
		return rf__err(RF_EINVAL, "rf_pipeline_collect_stats: p is NULL");
	return rf__engine_collect_stats(&p->eng, "rf_pipeline_collect_stats", on);
}

int rf_pipeline_stats(const rf_pipeline *p, rf_stats *out)
{
	if (p == NULL || out == NULL)
		return rf__err(RF_EINVAL, "rf_pipeline_stats: %s is NULL", p == NULL ? "p" : "out");
	return rf__engine_stats(&p->eng, "rf_pipeline_stats", out);
}

int rf_pipeline_cancel(rf_pipeline *p)
{
	if (p == NULL)
		return rf__err(RF_EINVAL, "rf_pipeline_cancel: p is NULL");
	return rf__engine_cancel(&p->eng);
}

int rf_pipeline_trace(rf_pipeline *p, const char *path)
{
	if (p == NULL)
		return rf__err(RF_EINVAL, "rf_pipeline_trace: p is NULL");
	if (path != NULL && path[0] == '\0')
		return rf__err(RF_EINVAL, "rf_pipeline_trace: empty path");
	return rf__engine_trace(&p->eng, "rf_pipeline_trace", path);
}

/* Placement is a property of the ring's address: the staging layer knows every region it mapped. */
int rf_pipeline_placement(const rf_pipeline *p, rf_placement *out)
{
	if (p == NULL || out == NULL)
		return rf__err(RF_EINVAL, "rf_pipeline_placement: %s is NULL", p == NULL ? "p" : "out");
	if (rf__staging_placement(p->eng.slots, out) != RF_OK)
		return rf__err(RF_ENOTSUP, "rf_pipeline_placement: the ring of backend %s is not staging memory",
			       p->eng.be->name);
	return RF_OK;
}

/* White-box tests check the ring's pages against the kernel: they need its address. */
const rf__engine *rf__pipeline_engine(const rf_pipeline *p)
{
	return &p->eng;
}

const char *rf_pipeline_describe(const rf_pipeline *p)
{
	return p ? p->eng.describe : "";
}

unsigned rf_pipeline_copy_queues(const rf_pipeline *p)
{
	return p ? p->copy_queues : 0;
}

void rf_pipeline_destroy(rf_pipeline *p)
{
	if (p != NULL && rf__engine_destroy_begin(&p->eng))
		rf__pipeline_free(p);
}
