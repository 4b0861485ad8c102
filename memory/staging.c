/* memory/staging.c — staging memory: arenas, allocation and freeing, placement, the public API.
 *
 * One jemalloc arena per (placement, pinned), created on first use with mapping.c's extent hooks and
 * kept, with the topology reference, for the life of the process, like jemalloc's own arenas. Small
 * blocks are carved from it; page-aligned and large ones are mappings of their own (rf__staging_is_direct). */
#include "memory/staging_int.h"
#include "base/align.h"
#include "base/error.h"
#include "memory/topology.h"

#include "memory/je.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Largest growth step of an arena: the hook touches all it maps, so jemalloc's geometric growth must
 * not commit much more than was asked for. */
#define RF__STG_GROW_LIMIT ((size_t)4 << 20)

#define RF__STG_DIRECT_MIN ((size_t)64 << 10)

static pthread_mutex_t rf__staging_mu = PTHREAD_MUTEX_INITIALIZER; /* topology, arena list */
static hwloc_topology_t rf__staging_topo;
static rf__staging_arena *rf__staging_arenas;
static unsigned rf__staging_narenas;
static atomic_long rf__staging_live;

/* ---- arenas ---------------------------------------------------------------------------------- */

/* The arena already serving key, if any (rf__staging_mu held): arenas are few, a list is enough. */
static rf__staging_arena *rf__staging_find_arena(const rf__staging_policy *key)
{
	for (rf__staging_arena *a = rf__staging_arenas; a != NULL; a = a->next)
		if (a->key.kind == key->kind && a->key.node == key->node && a->key.pinned == key->pinned)
			return a;
	return NULL;
}

/* The nodeset the hooks bind to: NODE {node}, INTERLEAVE the allowed nodes, else none. */
static int rf__staging_nodeset(rf__staging_arena *a)
{
	if (a->key.kind == RF__STG_INTERLEAVE)
		a->nodeset = hwloc_bitmap_dup(hwloc_topology_get_allowed_nodeset(a->topo));
	else if (a->key.kind == RF__STG_NODE && (a->nodeset = hwloc_bitmap_alloc()) != NULL)
		hwloc_bitmap_only(a->nodeset, (unsigned)a->key.node);
	if ((a->key.kind == RF__STG_NODE || a->key.kind == RF__STG_INTERLEAVE) && a->nodeset == NULL)
		return rf__err(RF_ENOMEM, "staging: out of memory");
	return RF_OK;
}

/* arenas.create with our hooks; then cap the growth step (best effort: a tuning knob). */
static int rf__staging_jemalloc_arena(rf__staging_arena *a)
{
	if (rf__staging_fault("arena"))
		return rf__err(RF_ENOMEM, "staging: cannot create a jemalloc arena (injected fault)");
	extent_hooks_t *hp = &a->hooks;
	size_t sz = sizeof a->ind;
	rf__staging_hook_step = NULL;
	int e = mallctl("arenas.create", &a->ind, &sz, &hp, sizeof hp);
	if (e != 0)
		return rf__err(RF_ENOMEM, "staging: jemalloc arenas.create failed (%s)%s%s", strerror(e),
			       rf__staging_hook_step ? ": " : "", rf__staging_hook_step ? rf__staging_hook_step : "");
	char name[64];
	size_t limit = RF__STG_GROW_LIMIT;
	snprintf(name, sizeof name, "arena.%u.retain_grow_limit", a->ind);
	(void)mallctl(name, NULL, NULL, &limit, sizeof limit);
	return RF_OK;
}

/* Create and publish the arena for key (rf__staging_mu held). */
static int rf__staging_arena_new(const rf__staging_policy *key, rf__staging_arena **out)
{
	int rc;
	rf__staging_arena *a = calloc(1, sizeof *a);
	if (a == NULL)
		return rf__err(RF_ENOMEM, "staging: out of memory");
	a->hooks = rf__staging_hooks;
	a->key = *key;
	a->topo = rf__staging_topo;
	pthread_mutex_init(&a->mu, NULL);
	if ((rc = rf__staging_nodeset(a)) != RF_OK || (rc = rf__staging_jemalloc_arena(a)) != RF_OK)
		goto fail;
	a->next = rf__staging_arenas;
	rf__staging_arenas = a;
	rf__staging_narenas++;
	*out = a;
	return RF_OK;
fail:
	hwloc_bitmap_free(a->nodeset);
	pthread_mutex_destroy(&a->mu);
	free(a->regions);
	free(a);
	return rc;
}

/* The arena serving pol for the calling thread, created on first use. The topology is loaded on first
 * use too, and its reference kept for the life of the arenas. */
static int rf__staging_arena_get(const rf__staging_policy *pol, rf__staging_arena **out)
{
	rf__staging_policy key;
	int rc = RF_OK;
	pthread_mutex_lock(&rf__staging_mu);
	if (rf__staging_topo == NULL && rf__staging_fault("topology"))
		rc = rf__err(RF_EBACKEND, "staging: cannot load the hwloc topology (injected fault)");
	else if (rf__staging_topo == NULL && (rf__staging_topo = rf__topo_acquire()) == NULL)
		rc = rf__err(RF_EBACKEND, "staging: %s", rf__errmsg_peek());
	if (rc == RF_OK)
		rc = rf__staging_resolve(rf__staging_topo, pol, &key);
	if (rc == RF_OK && (*out = rf__staging_find_arena(&key)) == NULL)
		rc = rf__staging_arena_new(&key, out);
	pthread_mutex_unlock(&rf__staging_mu);
	return rc;
}

/* ---- allocation ------------------------------------------------------------------------------ */

/* Blocks from jemalloc: small ones only. jemalloc rounds a large request up to its size class and
 * retains the touched, resident tail, which no later large request can use: tails piled up with every
 * big ring created, and a ring could exceed memory_budget by a quarter (docs/staging.md). */
static int rf__staging_is_direct(size_t bytes, size_t align)
{
	return align >= rf__staging_page() || bytes >= RF__STG_DIRECT_MIN;
}

/* A carve from the arena. No thread cache: a cached block would stay with this thread instead of
 * returning to the arena. Zeroed: reused extents must not leak a previous owner's bytes. */
static void *rf__staging_mallocx(const rf__staging_arena *a, size_t bytes, size_t align)
{
	return mallocx(bytes, MALLOCX_ARENA(a->ind) | MALLOCX_TCACHE_NONE | MALLOCX_ZERO |
				      MALLOCX_LG_ALIGN(__builtin_ctzll(align)));
}

/* A block of its own: its bytes rounded up to a page, bound and touched like the arena's, unmapped
 * whole when freed. From one huge page on it is aligned to one and asks for huge pages (the engine
 * rounds a ring up to whole huge pages itself: rf__staging_ring_len). */
static void *rf__staging_direct_alloc(rf__staging_arena *a, size_t bytes)
{
	size_t page = rf__staging_page(), len = rf__align_up(bytes, page), huge = rf__staging_huge_page();
	if (huge != 0 && len >= huge)
		return rf__staging_new_mapping(a, len, huge, RF__STG_DIRECT_HUGE);
	return rf__staging_new_mapping(a, len, page, RF__STG_DIRECT);
}

/* The arena holding staging address p, its region copied to *reg, or NULL. */
static rf__staging_arena *rf__staging_lookup(const void *p, rf__staging_region *reg)
{
	rf__staging_arena *a;
	pthread_mutex_lock(&rf__staging_mu);
	for (a = rf__staging_arenas; a != NULL; a = a->next) {
		pthread_mutex_lock(&a->mu);
		rf__staging_region *r = rf__staging_find_region(a, (uintptr_t)p);
		if (r != NULL)
			*reg = *r;
		pthread_mutex_unlock(&a->mu);
		if (r != NULL)
			break;
	}
	pthread_mutex_unlock(&rf__staging_mu);
	return a;
}

/* RF_ENOMEM naming the step that failed inside mallocx (jemalloc itself only says NULL). */
static int rf__staging_alloc_failed(const rf__staging_arena *a, size_t bytes)
{
	char where[32] = "unbound";
	if (a->key.kind == RF__STG_NODE)
		snprintf(where, sizeof where, "NUMA node %d", a->key.node);
	else if (a->key.kind == RF__STG_INTERLEAVE)
		snprintf(where, sizeof where, "interleaved");
	if (rf__staging_hook_step == NULL)
		return rf__err(RF_ENOMEM, "staging: cannot allocate %zu bytes (%s): jemalloc mallocx returned NULL",
			       bytes, where);
	return rf__err(RF_ENOMEM, "staging: cannot allocate %zu bytes (%s%s): %s failed: %s", bytes, where,
		       a->key.pinned ? ", pinned" : "", rf__staging_hook_step,
		       rf__staging_hook_detail != NULL ? rf__staging_hook_detail : strerror(rf__staging_hook_errno));
}

/* Arena lookup under the lock, carving outside it: mallocx has its own locks, and hooks may run. */
int rf__staging_alloc(const rf__staging_policy *pol, size_t bytes, size_t align, void **out)
{
	rf__staging_arena *a;
	int rc = rf__staging_arena_get(pol, &a);
	if (rc != RF_OK)
		return rc;
	/* The hook's failure note is cleared first, so that a NULL is explained by this very call. */
	rf__staging_hook_step = NULL;
	void *p = NULL;
	if (rf__staging_fault("mallocx"))
		rf__staging_hook_fail("carving the block (injected fault)", ENOMEM, NULL);
	else
		p = rf__staging_is_direct(bytes, align) ? rf__staging_direct_alloc(a, bytes) : rf__staging_mallocx(a, bytes, align);
	if (p == NULL)
		return rf__staging_alloc_failed(a, bytes);
	atomic_fetch_add(&rf__staging_live, 1);
	*out = p;
	return RF_OK;
}

/* A direct block (a region of its own starting at p) is unmapped; otherwise dallocx finds the arena
 * from the pointer (no tcache, as in rf__staging_mallocx). */
void rf__staging_free(void *p)
{
	if (p == NULL)
		return;
	rf__staging_region r;
	rf__staging_arena *a = rf__staging_lookup(p, &r);
	if (a != NULL && r.direct && r.start == (uintptr_t)p)
		(void)rf__staging_unmap_mapping(a, p, r.end - r.start, 1);
	else
		dallocx(p, MALLOCX_TCACHE_NONE);
	atomic_fetch_sub(&rf__staging_live, 1);
}

/* ---- placement ------------------------------------------------------------------------------- */

/* Where unbound memory actually is: the node of its first page, if the kernel says; else -1. */
static int rf__staging_where(hwloc_topology_t topo, const void *p)
{
	int node = -1;
	hwloc_nodeset_t ns = hwloc_bitmap_alloc();
	if (ns != NULL && hwloc_get_area_memlocation(topo, p, 1, ns, HWLOC_MEMBIND_BYNODESET) == 0 &&
	    hwloc_bitmap_weight(ns) == 1)
		node = hwloc_bitmap_first(ns);
	hwloc_bitmap_free(ns);
	return node;
}

/* Bound memory is reported from the region record (bound to the arena's node, strictly); unbound
 * memory also says where its first page actually landed. */
int rf__staging_placement(const void *p, rf_placement *out)
{
	rf__staging_region r;
	rf__staging_arena *a = p != NULL ? rf__staging_lookup(p, &r) : NULL;
	if (a == NULL)
		return rf__err(RF_EINVAL, "staging placement: %p is not inside staging memory", p);
	out->bound = r.why == RF__WHY_BOUND;
	out->pinned = a->key.pinned;
	out->reason = rf__staging_reason(r.why);
	if (out->bound)
		out->numa_node = a->key.kind == RF__STG_NODE ? a->key.node : -1;
	else
		out->numa_node = rf__staging_where(a->topo, p);
	return RF_OK;
}

/* On huge pages an O_DIRECT read into a slot is one DMA segment, not one per 4 KiB page (docs/files.md),
 * and the TLB covers the ring: even a ring smaller than a huge page is rounded up to one. */
size_t rf__staging_ring_len(size_t bytes, size_t cap)
{
	size_t huge = rf__staging_huge_page(), len = huge != 0 ? rf__align_up(bytes, huge) : bytes;
	return len >= bytes && (cap == 0 || len <= cap) ? len : bytes;
}

/* ---- the public embedder API ----------------------------------------------------------------- */

size_t rf__staging_align_for(size_t bytes)
{
	return bytes >= RF__ALIGN_PINNED ? RF__ALIGN_PINNED : RF__ALIGN_CPU;
}

int rf_staging_alloc(size_t bytes, const char *policy, void **out)
{
	if (out == NULL || bytes == 0)
		return rf__err(RF_EINVAL, "rf_staging_alloc: %s", out == NULL ? "out is NULL" : "bytes is 0");
	rf__staging_policy pol;
	int rc = rf__staging_parse("rf_staging_alloc", policy, &pol);
	if (rc != RF_OK)
		return rc;
	if ((rc = rf__staging_alloc(&pol, bytes, rf__staging_align_for(bytes), out)) != RF_OK)
		return rf__err(rc, "rf_staging_alloc: %s", rf__errmsg_peek());
	return RF_OK;
}

void rf_staging_free(void *p)
{
	rf__staging_free(p);
}

int rf_staging_placement(const void *p, rf_placement *out)
{
	if (out == NULL)
		return rf__err(RF_EINVAL, "rf_staging_placement: out is NULL");
	int rc = rf__staging_placement(p, out);
	return rc == RF_OK ? RF_OK : rf__err(rc, "rf_staging_placement: %s", rf__errmsg_peek());
}

#ifdef RF_TESTING
/* The counters themselves are cheap enough to be always on. */
void rf__staging_get_stats(rf__staging_stats *out)
{
	out->live_allocs = atomic_load(&rf__staging_live);
	out->mapped_bytes = atomic_load(&rf__staging_mapped);
	out->hook_maps = atomic_load(&rf__staging_maps);
	pthread_mutex_lock(&rf__staging_mu);
	out->narenas = rf__staging_narenas;
	pthread_mutex_unlock(&rf__staging_mu);
}

int rf__staging_arena_of(const void *p)
{
	rf__staging_region r;
	rf__staging_arena *a = p != NULL ? rf__staging_lookup(p, &r) : NULL;
	return a != NULL ? (int)a->ind : -1;
}
#endif
