/* memory/staging.h — internal: staging memory as the engine and the backends call it (the public side
 * is include/ringfetch/staging.h), and the accessors white-box tests use. */
#ifndef RF_MEMORY_STAGING_H
#define RF_MEMORY_STAGING_H

#include "ringfetch.h"
#include "base/align.h"

#include <stddef.h>

/* A parsed policy. All-zero is "auto", so a zeroed engine (rf_exec) gets the default. */
typedef enum rf__staging_kind {
	RF__STG_AUTO = 0,   /* resolved at allocation: the NUMA node of the calling thread */
	RF__STG_NODE,       /* bind to `node` (OS index) */
	RF__STG_INTERLEAVE, /* interleave over the allowed nodes */
	RF__STG_NONE,       /* ordinary memory */
	RF__STG_UNKNOWN     /* auto, when the caller's node is unknown: ordinary memory (never parsed) */
} rf__staging_kind;

typedef struct rf__staging_policy {
	rf__staging_kind kind;
	int node;   /* RF__STG_NODE only */
	int pinned; /* page-locked for DMA (by the pinner the CUDA backend installs); never parsed */
} rf__staging_policy;

/* How pinned arenas page-lock their mappings, set by the CUDA backend so that runtime/ never includes
 * CUDA. pin returns 0, or non-zero with *why a static sentence. Without a pinner, pinned allocations
 * fail (RF_ENOMEM, saying so). */
typedef struct rf__staging_pinner {
	int (*pin)(void *p, size_t len, const char **why);
	void (*unpin)(void *p);
} rf__staging_pinner;
void rf__staging_set_pinner(const rf__staging_pinner *pinner);

/* Alignment of a ring's memory: a page, so that it is a mapping of its own, placed page by page. */
#define RF__STAGING_SLOT_ALIGN RF__ALIGN_PINNED
/* The alignment of an embedder's staging block of `bytes`: a cache line, and a page (ready for DMA and
 * page-locking) from a page on. */
size_t rf__staging_align_for(size_t bytes);

/* Parse a policy string (NULL = auto) strictly; RF_EINVAL with a sentence prefixed by `who`.
 * Checks the syntax only: whether node N exists is checked when memory is allocated. */
int rf__staging_parse(const char *who, const char *text, rf__staging_policy *out);

/* Allocate bytes (> 0) aligned to align (a power of two <= 4096) under pol (NULL = auto).
 * RF_OK, RF_EINVAL (no such node), RF_ENOMEM, RF_EBACKEND (topology); see rf_staging_alloc. */
int rf__staging_alloc(const rf__staging_policy *pol, size_t bytes, size_t align, void **out);
/* The bytes to map for a ring of `bytes`: rounded up to whole huge pages where the kernel gives them
 * and that stays within cap (0: no cap); else bytes. */
size_t rf__staging_ring_len(size_t bytes, size_t cap);
/* Release what rf__staging_alloc returned (NULL is a no-op). */
void rf__staging_free(void *p);
/* Placement of staging memory at p; RF_EINVAL if p is not inside staging memory. */
int rf__staging_placement(const void *p, rf_placement *out);

#ifdef RF_TESTING /* for tests, in the testing build only (base/test_hooks.h) */
typedef struct rf__staging_stats {
	long live_allocs;         /* successful rf__staging_alloc minus rf__staging_free */
	size_t mapped_bytes;      /* bytes currently mapped through the extent hooks, all arenas */
	unsigned long hook_maps;  /* extent-hook mappings made so far */
	unsigned narenas;         /* arenas created so far */
} rf__staging_stats;

void rf__staging_get_stats(rf__staging_stats *out);
/* The jemalloc arena index serving staging memory at p, or -1 if p is not staging memory. */
int rf__staging_arena_of(const void *p);
#endif

#endif
