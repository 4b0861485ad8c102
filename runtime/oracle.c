/* runtime/oracle.c — see oracle.h. Deliberately naive: per-block tables and direct comparisons. */
#include "runtime/alloc.h"
#include "runtime/oracle.h"
#include "runtime/error.h"

#include <stdlib.h>

typedef struct rf__seen {
	const rf__tev *copy, *compute;
} rf__seen;

/* Index every event by block; a block seen twice (or out of range) is a violation. */
static int rf__oracle_index(const rf__trace *t, size_t nblocks, rf__seen *by)
{
	for (unsigned q = 0; q < t->nq; q++)
		for (size_t i = 0; i < t->n[q]; i++) {
			const rf__tev *e = &t->ev[q][i];
			if (e->block < 0 || (size_t)e->block >= nblocks)
				return rf__err(RF_EHAZARD, "oracle: an op ran for block %lld of %zu", (long long)e->block, nblocks);
			const rf__tev **slot = e->kind == RF_OP_COPY ? &by[e->block].copy : &by[e->block].compute;
			if (*slot != NULL)
				return rf__err(RF_EHAZARD, "oracle: block %lld was %s twice", (long long)e->block,
					       e->kind == RF_OP_COPY ? "copied" : "computed");
			*slot = e;
		}
	return RF_OK;
}

static int rf__oracle_block(const rf__seen *by, size_t b, const size_t *last_in_slot)
{
	const rf__tev *cp = by[b].copy, *cm = by[b].compute;
	if (cp == NULL || cm == NULL)
		return rf__err(RF_EHAZARD, "oracle: block %zu was %s", b, cp == NULL ? "never copied" : "never computed");
	if (cm->slot != cp->slot)
		return rf__err(RF_EHAZARD, "oracle: block %zu computed over slot %u but copied into slot %u", b, cm->slot,
			       cp->slot);
	if (cm->s0 < cp->s1)
		return rf__err(RF_EHAZARD, "oracle: RAW: compute of block %zu started before its copy ended", b);
	if (b > 0 && cm->s0 < by[b - 1].compute->s1)
		return rf__err(RF_EHAZARD, "oracle: compute of block %zu started before block %zu's ended", b, b - 1);
	size_t prev = last_in_slot[b];
	if (prev != (size_t)-1 && cp->s0 < by[prev].compute->s1)
		return rf__err(RF_EHAZARD, "oracle: WAR: copy of block %zu into slot %u started before the compute of "
					   "block %zu (its previous reader) ended", b, cp->slot, prev);
	return RF_OK;
}

int rf__oracle_check(const rf__trace *t, size_t nblocks)
{
	rf__seen *by = rf__calloc(nblocks ? nblocks : 1, sizeof *by);
	size_t *last_in_slot = rf__malloc((nblocks ? nblocks : 1) * sizeof *last_in_slot);
	size_t *owner = NULL;
	int rc = by && last_in_slot ? rf__oracle_index(t, nblocks, by) : rf__err(RF_ENOMEM, "oracle: out of memory");
	/* The previous block of the same slot, from the copies' own slots (not from any depth). */
	unsigned nslots = 0;
	for (size_t b = 0; rc == RF_OK && b < nblocks; b++)
		if (by[b].copy != NULL && by[b].copy->slot + 1 > nslots)
			nslots = by[b].copy->slot + 1;
	if (rc == RF_OK && (owner = rf__malloc((nslots ? nslots : 1) * sizeof *owner)) == NULL)
		rc = rf__err(RF_ENOMEM, "oracle: out of memory");
	for (unsigned s = 0; rc == RF_OK && s < nslots; s++)
		owner[s] = (size_t)-1;
	for (size_t b = 0; rc == RF_OK && b < nblocks; b++) {
		if (by[b].copy == NULL)
			break; /* reported by rf__oracle_block */
		last_in_slot[b] = owner[by[b].copy->slot];
		owner[by[b].copy->slot] = b;
	}
	for (size_t b = 0; rc == RF_OK && b < nblocks; b++)
		rc = rf__oracle_block(by, b, last_in_slot);
	free(by);
	free(last_in_slot);
	free(owner);
	return rc;
}
