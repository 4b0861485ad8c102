/* memory/staging_int.h — internal to memory/: what policy.c (policies, placement sentences), mapping.c
 * (mappings, the region table, the extent hooks) and staging.c (arenas, allocation, the API) share. */
#ifndef RF_MEMORY_STAGING_INT_H
#define RF_MEMORY_STAGING_INT_H

#include "memory/staging.h"

#include <hwloc.h>
#include "memory/je.h"
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Why a region is unbound; 0: bound. Positive values are the errno of a refused binding. */
enum { RF__WHY_BOUND = 0, RF__WHY_NONE = -1, RF__WHY_UNKNOWN = -2, RF__WHY_NOT_THIS_SYSTEM = -3 };

typedef struct rf__staging_region {
	uintptr_t start, end;
	int why;
	int direct; /* one block of its own, never seen by jemalloc (rf__staging_direct_alloc) */
} rf__staging_region;

typedef struct rf__staging_arena {
	extent_hooks_t hooks; /* first member: jemalloc passes &hooks back to every hook */
	struct rf__staging_arena *next;
	rf__staging_policy key;  /* resolved: NODE, INTERLEAVE, NONE or UNKNOWN */
	unsigned ind;            /* jemalloc arena index */
	hwloc_topology_t topo;
	hwloc_nodeset_t nodeset; /* NODE: {node}; INTERLEAVE: the allowed nodes; otherwise NULL */
	pthread_mutex_t mu;      /* guards the region table (hooks run concurrently) */
	/* Sorted by start, disjoint. In a pinned arena each is one page-locked mapping, registered whole
	 * when made and unregistered only when it goes back whole. cudaHostUnregister takes only the base
	 * of a registration, so dalloc of a piece declines: jemalloc keeps it, merges it back with its
	 * siblings and reuses it, which bounds pinned memory by the arena's peak use. (Unmapping once all
	 * pieces were back would leak: jemalloc never returns the tail it retains after splitting a growth
	 * mapping.) */
	rf__staging_region *regions;
	size_t nregions, cap;
} rf__staging_arena;

/* ---- policy.c ----------------------------------------------------------------------------------- */
/* A parsed policy (NULL = auto) as an arena key on this machine; RF_EINVAL (naming the nodes there
 * are) when node:N is not usable. */
int rf__staging_resolve(hwloc_topology_t topo, const rf__staging_policy *pol, rf__staging_policy *key);
/* The placement sentence for a region's `why` (static strings). */
const char *rf__staging_reason(int why);

/* ---- mapping.c ---------------------------------------------------------------------------------- */
/* Why the last mapping on this thread failed: jemalloc only returns NULL, so the hooks note the cause
 * here, on the allocating thread, for the message rf__staging_alloc composes. */
extern _Thread_local const char *rf__staging_hook_step;
extern _Thread_local int rf__staging_hook_errno;
extern _Thread_local const char *rf__staging_hook_detail;
/* Bytes mapped now, and mappings made so far, all arenas (for rf__staging_get_stats). */
extern atomic_size_t rf__staging_mapped;
extern atomic_ulong rf__staging_maps;
/* The hooks every arena is created with (copied into rf__staging_arena.hooks). */
extern const extent_hooks_t rf__staging_hooks;

/* Fault injection at a named step: non-zero makes it fail (for "membind", the errno seen). */
int rf__staging_fault(const char *step);
/* Note why a step failed: err, or the detail instead of strerror(err) when not NULL. */
void rf__staging_hook_fail(const char *step, int err, const char *detail);
/* The page size: the granularity of mapping, binding and touching. */
size_t rf__staging_page(void);
/* The transparent huge page size, or 0 when the kernel gives no huge pages to mappings that ask. */
size_t rf__staging_huge_page(void);
/* The region of arena a holding address x, or NULL (a->mu held). */
rf__staging_region *rf__staging_find_region(rf__staging_arena *a, uintptr_t x);
/* A mapping carved by jemalloc, a block of its own, or one of its own on transparent huge pages. */
enum { RF__STG_CARVED = 0, RF__STG_DIRECT = 1, RF__STG_DIRECT_HUGE = 2 };
/* A new mapping of size bytes at alignment align: bound as a's policy asks (or unbound, recorded why),
 * touched, page-locked for pinned arenas, recorded as a region. NULL with the failure note set. */
void *rf__staging_new_mapping(rf__staging_arena *a, size_t size, size_t align, int direct);
/* Forget [p, p+len) (rf__staging_region_cut; with `whole`, only a whole region) and unmap it; 0 when it
 * stays mapped. */
int rf__staging_unmap_mapping(rf__staging_arena *a, void *p, size_t len, int whole);

#endif
