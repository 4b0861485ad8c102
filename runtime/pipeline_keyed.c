/* runtime/pipeline_keyed.c — rf_pipeline's keyed calls (runtime/keyed.h), each recorded in the keyed
 * trace when one is on (runtime/ktrace.h). */
#include "base/error.h"
#include "runtime/keyed.h"
#include "runtime/ktrace.h"
#include "runtime/pipeline_int.h"

#include <string.h>

/* Keyed calls take the pipeline for their duration (runtime/engine.h): a run, another keyed call or
 * a compute callback of a run meeting one gets RF_EBUSY. rf__keyed_end passes the call's result on. */
static inline __attribute__((always_inline)) int rf__keyed_begin(rf_pipeline *p, const char *who)
{
	if (p == NULL)
		return rf__err(RF_EINVAL, "%s: p is NULL", who);
	if (p->eng.keyed == NULL)
		return rf__err(RF_ENOTSUP, "%s: backend %s has no keyed use", who, p->eng.be->name);
	return rf__engine_keyed_begin(&p->eng, who);
}

static int rf__keyed_end(rf_pipeline *p, int rc)
{
	rf__engine_keyed_end(&p->eng);
	return rc;
}

/* ---- the keyed trace ------------------------------------------------------------------------------ */

static unsigned rf__ktrace_slot(const rf_pipeline *p, uint64_t key)
{
	rf_key_state st;
	unsigned slot = UINT32_MAX;
	rf__keyed_lookup(p->eng.keyed, key, &st, &slot);
	return st == RF_KEY_ABSENT ? UINT32_MAX : slot;
}

int rf_pipeline_keyed_trace(rf_pipeline *p, const char *path, unsigned flags)
{
	static const char who[] = "rf_pipeline_keyed_trace";
	if (p != NULL && path != NULL && path[0] == '\0')
		return rf__err(RF_EINVAL, "%s: empty path", who);
	if (p != NULL && flags != 0)
		return rf__err(RF_EINVAL, "%s: flags must be 0 (got %#x)", who, flags);
	int rc = rf__keyed_begin(p, who);
	if (rc != RF_OK)
		return rc;
	if (path == NULL) {
		rc = rf__ktrace_close(p->eng.ktrace, who);
		p->eng.ktrace = NULL;
	} else if (p->eng.ktrace != NULL) {
		rc = rf__err(RF_EBUSY, "%s: a keyed trace is already being recorded (stop it first)", who);
	} else {
		rc = rf__ktrace_open(who, path, p->eng.nslots, p->eng.slot_bytes, &p->eng.ktrace);
	}
	return rf__keyed_end(p, rc);
}

/* With a trace on (one predictable branch when off), a call's record is classified from the cache's
 * counters around it. */
int rf_pipeline_prefetch(rf_pipeline *p, uint64_t key, const void *src, size_t bytes, unsigned flags)
{
	int rc = rf__keyed_begin(p, "rf_pipeline_prefetch");
	if (rc != RF_OK)
		return rc;
	if (p->eng.ktrace == NULL)
		return rf__keyed_end(p, rf__keyed_prefetch(p->eng.keyed, key, src, bytes, flags));
	rf_keyed_stats a, b;
	rf__keyed_stats(p->eng.keyed, &a);
	rc = rf__keyed_prefetch(p->eng.keyed, key, src, bytes, flags);
	rf__keyed_stats(p->eng.keyed, &b);
	if (rc == RF_OK)
		rf__ktrace_add(p->eng.ktrace, b.prefetches != a.prefetches ? RF_KTRACE_PREFETCH : RF_KTRACE_PREFETCH_PRESENT,
			       key, bytes, rf__ktrace_slot(p, key));
	return rf__keyed_end(p, rc);
}

int rf_pipeline_acquire(rf_pipeline *p, uint64_t key, const void *src, size_t bytes, void *stream,
			unsigned flags, rf_block *out)
{
	int rc = rf__keyed_begin(p, "rf_pipeline_acquire");
	if (rc != RF_OK)
		return rc;
	if (p->eng.ktrace == NULL)
		return rf__keyed_end(p, rf__keyed_acquire(p->eng.keyed, key, src, bytes, stream, flags, out));
	rf_keyed_stats a, b;
	int present = rf__ktrace_slot(p, key) != UINT32_MAX;
	rf__keyed_stats(p->eng.keyed, &a);
	rc = rf__keyed_acquire(p->eng.keyed, key, src, bytes, stream, flags, out);
	rf__keyed_stats(p->eng.keyed, &b);
	unsigned kind = b.hits != a.hits ? RF_KTRACE_ACQUIRE_HIT : present ? RF_KTRACE_ACQUIRE_HINTED
									    : RF_KTRACE_ACQUIRE_MISS;
	if (rc == RF_OK)
		rf__ktrace_add(p->eng.ktrace, kind, key, bytes, out->slot);
	return rf__keyed_end(p, rc);
}

int rf_pipeline_release(rf_pipeline *p, const rf_block *block)
{
	int rc = rf__keyed_begin(p, "rf_pipeline_release");
	if (rc != RF_OK)
		return rc;
	rc = rf__keyed_release(p->eng.keyed, block);
	if (rc == RF_OK && p->eng.ktrace != NULL)
		rf__ktrace_add(p->eng.ktrace, RF_KTRACE_RELEASE, (uint64_t)block->index, block->bytes, block->slot);
	return rf__keyed_end(p, rc);
}

int rf_pipeline_unprefetch(rf_pipeline *p, uint64_t key)
{
	int rc = rf__keyed_begin(p, "rf_pipeline_unprefetch");
	return rc != RF_OK ? rc : rf__keyed_end(p, rf__keyed_unprefetch(p->eng.keyed, key));
}

int rf_pipeline_evict(rf_pipeline *p, uint64_t key)
{
	int rc = rf__keyed_begin(p, "rf_pipeline_evict");
	if (rc != RF_OK)
		return rc;
	rc = rf__keyed_evict(p->eng.keyed, key);
	if (rc == RF_OK && p->eng.ktrace != NULL)
		rf__ktrace_add(p->eng.ktrace, RF_KTRACE_EVICT, key, 0, UINT32_MAX);
	return rf__keyed_end(p, rc);
}

int rf_pipeline_lookup(const rf_pipeline *p, uint64_t key, rf_key_state *state, unsigned *slot)
{
	if (p == NULL || state == NULL)
		return rf__err(RF_EINVAL, "rf_pipeline_lookup: %s is NULL", p == NULL ? "p" : "state");
	int st = atomic_load(&((rf_pipeline *)p)->eng.state);
	if (p->eng.keyed == NULL || (st != RF__IDLE && st != RF__KEYED)) {
		*state = RF_KEY_ABSENT; /* a run empties the cache before it reuses the slots */
		return RF_OK;
	}
	return rf__keyed_lookup(p->eng.keyed, key, state, slot);
}

int rf_pipeline_keyed_stats(const rf_pipeline *p, rf_keyed_stats *out)
{
	if (p == NULL || out == NULL)
		return rf__err(RF_EINVAL, "rf_pipeline_keyed_stats: %s is NULL", p == NULL ? "p" : "out");
	if (p->eng.keyed == NULL)
		memset(out, 0, sizeof *out);
	else
		rf__keyed_stats(p->eng.keyed, out);
	return RF_OK;
}
