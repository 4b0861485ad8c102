/* graph/plan.c — the ring schedule as a flat list of steps: a pure function of (nblocks, depth). This
 * is the one place the schedule is written: the ring graph (graph.c) and the ring's periodic program
 * (lower.c) are both made from these steps — a staged ring's from two plans merged (rf__plan_staged). */
#include "base/alloc.h"
#include "base/error.h"
#include "graph/graph_int.h"

#include <stdint.h>
#include <stdlib.h>

static rf_step rf__step(rf_step_kind kind, size_t block, unsigned depth)
{
	return (rf_step){kind, block, (unsigned)(block % depth)};
}

int rf_plan_ring(size_t nblocks, unsigned depth, rf_step *steps, size_t cap, size_t *len)
{
	if (depth == 0 || depth > RF_MAX_DEPTH)
		return rf__err(RF_EINVAL, "rf_plan_ring: depth %u is outside 1..%u", depth, RF_MAX_DEPTH);
	if (nblocks > SIZE_MAX / 3)
		return rf__err(RF_EINVAL, "rf_plan_ring: 3 * nblocks (%zu) overflows size_t", nblocks);
	if (steps == NULL && cap > 0)
		return rf__err(RF_EINVAL, "rf_plan_ring: steps is NULL but cap is %zu", cap);
	size_t need = 3 * nblocks;
	if (len != NULL)
		*len = need;
	if (cap < need)
		return rf__err(RF_ENOSPC, "rf_plan_ring: %zu steps needed, cap is %zu", need, cap);

	/* The lookahead is depth-1 blocks: prime that many, then keep the window full. */
	size_t ahead = depth - 1, k = 0;
	size_t prime = ahead < nblocks ? ahead : nblocks;
	for (size_t b = 0; b < prime; b++)
		steps[k++] = rf__step(RF_STEP_PREFETCH, b, depth);
	for (size_t n = 0; n < nblocks; n++) {
		if (n + ahead < nblocks)
			steps[k++] = rf__step(RF_STEP_PREFETCH, n + ahead, depth);
		steps[k++] = rf__step(RF_STEP_AWAIT, n, depth);
		steps[k++] = rf__step(RF_STEP_COMPUTE, n, depth);
	}
	return RF_OK;
}

static int rf__plan_alloc(size_t nblocks, unsigned depth, rf_step **steps, size_t *len)
{
	*steps = NULL;
	if (nblocks > SIZE_MAX / (6 * sizeof **steps) ||
	    (*steps = rf__malloc((3 * nblocks + 1) * sizeof **steps)) == NULL)
		return rf__err(RF_ENOMEM, "ring plan: %zu blocks: out of memory", nblocks);
	int rc = rf_plan_ring(nblocks, depth, *steps, 3 * nblocks, len);
	if (rc != RF_OK) {
		free(*steps);
		*steps = NULL;
	}
	return rc;
}

int rf__plan_staged(size_t nblocks, unsigned depth, unsigned sdepth, rf__sstep **out, size_t *len)
{
	rf_step *dev = NULL, *stg = NULL;
	size_t nd = 0, ns = 0, k = 0;
	*out = NULL;
	int rc = rf__plan_alloc(nblocks, depth, &dev, &nd);
	if (rc == RF_OK && sdepth > 0)
		rc = rf__plan_alloc(nblocks, sdepth, &stg, &ns);
	if (rc == RF_OK && (*out = rf__malloc((nd + ns + 1) * sizeof **out)) == NULL)
		rc = rf__err(RF_ENOMEM, "ring plan: %zu blocks: out of memory", nblocks);
	for (size_t i = 0, j = 0; i < nd && rc == RF_OK; i++) {
		/* The staging ring's COMPUTE b is this PREFETCH b (computes and prefetches go in block order). */
		for (; dev[i].kind == RF_STEP_PREFETCH && j < ns; j++) {
			if (stg[j].kind == RF_STEP_COMPUTE) {
				j++;
				break;
			}
			(*out)[k++] = (rf__sstep){stg[j], 1};
		}
		(*out)[k++] = (rf__sstep){dev[i], 0};
	}
	free(dev);
	free(stg);
	*len = k;
	return rc;
}
