/* memory/mapping.c — the mappings under staging memory, and the jemalloc extent hooks that make them.
 *
 * A mapping is mmap'd, bound before first touch (STRICT: a refused binding must be seen, not silently
 * left unbound), then touched. A refused binding (EPERM, ENOSYS, ...) or a topology that is not this
 * system's leaves it unbound, recording why. Mappings are removed with munmap, never hwloc_free: with a
 * topology that is not this system's that is free(), which cannot give back a head, a tail or a split
 * piece (it freed the whole block under us). Each mapping is a region in its arena's sorted table, so
 * that merge can refuse to join extents of regions that differ in binding or registration. purge and
 * decommit are NULL: idle extents leave through dalloc, never a bound region half purged or a pinned
 * one decommitted (docs/staging.md). */
/* MAP_ANONYMOUS is not POSIX (the build asks for _POSIX_C_SOURCE): ask glibc for it. */
#define _DEFAULT_SOURCE 1
#include "memory/staging_int.h"
#include "base/align.h"
#include "base/alloc.h"
#include "base/test_hooks.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

atomic_size_t rf__staging_mapped;
atomic_ulong rf__staging_maps;

_Thread_local const char *rf__staging_hook_step;
_Thread_local int rf__staging_hook_errno;
_Thread_local const char *rf__staging_hook_detail; /* instead of strerror (a CUDA error) */

/* Who page-locks pinned arenas' memory: the CUDA backend sets it (runtime/ stays free of CUDA). */
static _Atomic(const rf__staging_pinner *) rf__staging_current_pinner;

void rf__staging_set_pinner(const rf__staging_pinner *pinner)
{
	atomic_store(&rf__staging_current_pinner, pinner);
}

/* Both the per-step hook and the k-th-step sweep (base/alloc.h) reach every step; the sweep's membind
 * fault is ENOMEM (an error, not a refusal to bind that would fall back). */
int rf__staging_fault(const char *step)
{
	if (rf__fault())
		return strcmp(step, "membind") == 0 ? ENOMEM : 1;
	return RF__TEST_HOOK(fail_alloc_step) != NULL ? RF__TEST_HOOK(fail_alloc_step)(step) : 0;
}

void rf__staging_hook_fail(const char *step, int err, const char *detail)
{
	rf__staging_hook_step = step;
	rf__staging_hook_errno = err;
	rf__staging_hook_detail = detail;
}

size_t rf__staging_page(void)
{
	long v = sysconf(_SC_PAGESIZE);
	return v > 0 ? (size_t)v : 4096;
}

/* THP "madvise" or "always": the huge page size; "never" or no THP: 0. Read once. */
size_t rf__staging_huge_page(void)
{
	static _Atomic size_t cached = 1; /* 1: not read yet */
	size_t v = atomic_load_explicit(&cached, memory_order_relaxed);
	if (v != 1)
		return v;
	v = 0;
	char mode[128] = "";
	FILE *f = fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
	if (f != NULL) {
		if (fgets(mode, sizeof mode, f) == NULL)
			mode[0] = '\0';
		fclose(f);
	}
	unsigned long long sz = 0;
	if (mode[0] != '\0' && strstr(mode, "[never]") == NULL &&
	    (f = fopen("/sys/kernel/mm/transparent_hugepage/hpage_pmd_size", "r")) != NULL) {
		if (fscanf(f, "%llu", &sz) != 1)
			sz = 0;
		fclose(f);
	}
	if (sz > rf__staging_page() && (sz & (sz - 1)) == 0)
		v = (size_t)sz;
	atomic_store_explicit(&cached, v, memory_order_relaxed);
	return v;
}

/* ---- the region table (one per arena, under its mutex) ----------------------------------------- */

/* Index of the first region ending after x. */
static size_t rf__staging_upper(const rf__staging_arena *a, uintptr_t x)
{
	size_t lo = 0, hi = a->nregions;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (a->regions[mid].end <= x)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

rf__staging_region *rf__staging_find_region(rf__staging_arena *a, uintptr_t x)
{
	size_t i = rf__staging_upper(a, x);
	return i < a->nregions && a->regions[i].start <= x ? &a->regions[i] : NULL;
}

/* Insert r at index i. The table comes from the process allocator, never from a staging arena
 * (a hook must not allocate from the arena it serves). 0 when out of memory. */
static int rf__staging_insert(rf__staging_arena *a, size_t i, rf__staging_region r)
{
	if (a->nregions == a->cap) {
		size_t cap = a->cap ? 2 * a->cap : 16;
		rf__staging_region *n = realloc(a->regions, cap * sizeof *n);
		if (n == NULL)
			return 0;
		a->regions = n;
		a->cap = cap;
	}
	memmove(&a->regions[i + 1], &a->regions[i], (a->nregions - i) * sizeof *a->regions);
	a->regions[i] = r;
	a->nregions++;
	return 1;
}

/* Forget [start, start+len), which lies inside one region (merges never cross regions): the whole
 * region, a prefix, a suffix, or a middle piece (the region splits in two). 0 (the memory stays) if
 * that split needs a table entry that cannot be had, or, with `whole`, if it is not a whole region. */
static int rf__staging_region_cut(rf__staging_arena *a, uintptr_t start, size_t len, int whole)
{
	uintptr_t end = start + len;
	int ok = 1;
	pthread_mutex_lock(&a->mu);
	size_t i = rf__staging_upper(a, start);
	rf__staging_region *r = i < a->nregions && a->regions[i].start <= start ? &a->regions[i] : NULL;
	if (r != NULL && r->start == start && r->end == end) {
		memmove(r, r + 1, (a->nregions - i - 1) * sizeof *r);
		a->nregions--;
	} else if (whole) {
		ok = 0;
	} else if (r != NULL && r->start == start) {
		r->start = end;
	} else if (r != NULL && r->end == end) {
		r->end = start;
	} else if (r != NULL) {
		rf__staging_region tail = {end, r->end, r->why, 0};
		r->end = start;
		if (!(ok = rf__staging_insert(a, i + 1, tail)))
			a->regions[i].end = tail.end;
	}
	pthread_mutex_unlock(&a->mu);
	return ok;
}

/* ---- extent hooks --------------------------------------------------------------------------- */

/* Kernel answers that mean "you may not bind here" (fall back, report) rather than "no memory". */
static int rf__staging_refused(int err)
{
	return err == EPERM || err == ENOSYS || err == EXDEV || err == EINVAL || err == EOPNOTSUPP ||
	       err == EACCES;
}

/* Bind a fresh, untouched mapping as the arena's policy asks, strictly; *why: bound, or why not. An
 * arena that does not bind, a topology that is not this system's (it may name nodes this machine does
 * not have) or a refusal leaves it unbound: 0. Any other failure: -1 with the failure note set. */
static int rf__staging_bind(rf__staging_arena *a, void *p, size_t len, int *why)
{
	if (a->key.kind != RF__STG_NODE && a->key.kind != RF__STG_INTERLEAVE) {
		*why = a->key.kind == RF__STG_NONE ? RF__WHY_NONE : RF__WHY_UNKNOWN;
		return 0;
	}
	if (!hwloc_topology_is_thissystem(a->topo)) {
		*why = RF__WHY_NOT_THIS_SYSTEM;
		return 0;
	}
	hwloc_membind_policy_t pol = a->key.kind == RF__STG_NODE ? HWLOC_MEMBIND_BIND : HWLOC_MEMBIND_INTERLEAVE;
	int e = rf__staging_fault("membind");
	if (e == 0 && hwloc_set_area_membind(a->topo, p, len, a->nodeset, pol, HWLOC_MEMBIND_BYNODESET |
					     HWLOC_MEMBIND_STRICT | HWLOC_MEMBIND_NOCPUBIND) == 0) {
		*why = RF__WHY_BOUND;
		return 0;
	}
	e = e != 0 ? e : errno;
	if (rf__staging_refused(e)) { /* a refusal, not a shortage: the memory stays, unbound, and says why */
		*why = e;
		return 0;
	}
	rf__staging_hook_fail("binding memory (hwloc_set_area_membind)", e, NULL);
	return -1;
}

/* Map size bytes at alignment align (a power of two), bound as the arena's policy asks (rf__staging_bind).
 * Alignments above a page (jemalloc's metadata wants 2 MiB) map the excess and give back the head and
 * tail before binding. NULL with the hook's failure note set. */
static void *rf__staging_map(rf__staging_arena *a, size_t size, size_t align, int huge, int *why)
{
	size_t page = rf__staging_page(), extra = align > page ? align - page : 0;
	if (size == 0 || size + extra < size) { /* 0: rounding a block up to a page overflowed */
		rf__staging_hook_fail("mapping memory (size overflows)", ENOMEM, NULL);
		return NULL;
	}
	if (rf__staging_fault("fallback")) {
		rf__staging_hook_fail("mapping memory (injected fault)", ENOMEM, NULL);
		return NULL;
	}
	void *raw = mmap(NULL, size + extra, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (raw == MAP_FAILED) {
		rf__staging_hook_fail("mapping memory (mmap)", errno, NULL);
		return NULL;
	}
	uintptr_t r = (uintptr_t)raw, p = rf__align_up(r, align);
	if (p > r)
		(void)munmap(raw, p - r);
	if (p + size < r + size + extra)
		(void)munmap((void *)(p + size), r + extra - p);
	/* Before binding and touching, so that first touch faults huge pages in: an O_DIRECT read into
	 * a huge page is one DMA segment, not one per 4 KiB page (docs/files.md). A refusal costs speed. */
	if (huge)
		(void)madvise((void *)p, size, MADV_HUGEPAGE);
	if (rf__staging_bind(a, (void *)p, size, why) == 0)
		return (void *)p;
	(void)munmap((void *)p, size);
	return NULL;
}

/* Pinned arenas: page-lock a fresh mapping (after binding and touching: the pages exist, on their
 * node). 0 with the hook's failure note set when it cannot be locked: pinned memory that is not pinned
 * would be a silent fallback to pageable copies. */
static int rf__staging_pin(void *p, size_t len)
{
	const rf__staging_pinner *pin = atomic_load(&rf__staging_current_pinner);
	const char *detail = NULL;
	if (pin == NULL) {
		rf__staging_hook_fail("page-locking", ENOSYS, "no CUDA backend in this library to page-lock with");
		return 0;
	}
	if (rf__staging_fault("pin") || pin->pin(p, len, &detail) != 0) {
		rf__staging_hook_fail("page-locking (cudaHostRegister)", ENOMEM, detail != NULL ? detail : "injected fault");
		return 0;
	}
	return 1;
}

/* Unmap a whole mapping, unregistering it first in a pinned arena (every mapping there is pinned, and
 * a piece of one never comes here: see rf__staging_arena.regions). */
static void rf__staging_unmap(rf__staging_arena *a, void *p, size_t len)
{
	const rf__staging_pinner *pin = atomic_load(&rf__staging_current_pinner);
	if (a->key.pinned && pin != NULL)
		pin->unpin(p);
	(void)munmap(p, len);
}

void *rf__staging_new_mapping(rf__staging_arena *a, size_t size, size_t align, int direct)
{
	int why;
	void *p = rf__staging_map(a, size, align, direct == RF__STG_DIRECT_HUGE, &why);
	if (p == NULL)
		return NULL;
	/* First touch places the pages: now, under the binding, not later on whatever thread copies. */
	for (size_t i = 0, page = rf__staging_page(); i < size; i += page)
		((volatile unsigned char *)p)[i] = 0;
	if (a->key.pinned && !rf__staging_pin(p, size)) {
		(void)munmap(p, size);
		return NULL;
	}
	rf__staging_region r = {(uintptr_t)p, (uintptr_t)p + size, why, direct};
	pthread_mutex_lock(&a->mu);
	int ok = rf__staging_insert(a, rf__staging_upper(a, r.start), r);
	pthread_mutex_unlock(&a->mu);
	if (!ok) {
		rf__staging_unmap(a, p, size);
		rf__staging_hook_fail("recording the region", ENOMEM, NULL);
		return NULL;
	}
	atomic_fetch_add(&rf__staging_mapped, size);
	atomic_fetch_add(&rf__staging_maps, 1);
	return p;
}

int rf__staging_unmap_mapping(rf__staging_arena *a, void *p, size_t len, int whole)
{
	if (!rf__staging_region_cut(a, (uintptr_t)p, len, whole))
		return 0;
	rf__staging_unmap(a, p, len);
	atomic_fetch_sub(&rf__staging_mapped, len);
	return 1;
}

/* extent alloc: a new mapping for jemalloc to carve. */
static void *rf__staging_hook_alloc(extent_hooks_t *h, void *new_addr, size_t size, size_t align, bool *zero,
				bool *commit, unsigned ind)
{
	(void)ind;
	if (new_addr != NULL) /* growing in place at a given address: decline, jemalloc maps elsewhere */
		return NULL;
	void *p = rf__staging_new_mapping((rf__staging_arena *)h, size, align, RF__STG_CARVED);
	if (p == NULL)
		return NULL;
	*zero = true; /* fresh mappings are zero, and touching wrote zeros */
	*commit = true;
	return p;
}

/* extent dalloc: forget and unmap. Returning true (keep it) for a piece of a pinned mapping, or if the
 * table cannot split. */
static bool rf__staging_hook_dalloc(extent_hooks_t *h, void *addr, size_t size, bool committed, unsigned ind)
{
	(void)committed;
	(void)ind;
	rf__staging_arena *a = (rf__staging_arena *)h;
	return !rf__staging_unmap_mapping(a, addr, size, a->key.pinned);
}

/* extent destroy (arena teardown): the same as dalloc, without the option to keep the memory. */
static void rf__staging_hook_destroy(extent_hooks_t *h, void *addr, size_t size, bool committed, unsigned ind)
{
	(void)rf__staging_hook_dalloc(h, addr, size, committed, ind);
}

/* extent split: pieces stay inside their region, nothing to record. */
static bool rf__staging_hook_split(extent_hooks_t *h, void *addr, size_t size, size_t size_a, size_t size_b,
			       bool committed, unsigned ind)
{
	(void)h, (void)addr, (void)size, (void)size_a, (void)size_b, (void)committed, (void)ind;
	return false;
}

/* extent merge: only within one region (true = refuse). Regions differ in binding (and, with CUDA,
 * in registration), and each is unmapped on its own. */
static bool rf__staging_hook_merge(extent_hooks_t *h, void *addr_a, size_t size_a, void *addr_b, size_t size_b,
			       bool committed, unsigned ind)
{
	(void)size_a, (void)committed, (void)ind;
	rf__staging_arena *a = (rf__staging_arena *)h;
	pthread_mutex_lock(&a->mu);
	rf__staging_region *r = rf__staging_find_region(a, (uintptr_t)addr_a);
	bool refuse = r == NULL || (uintptr_t)addr_b < r->start || (uintptr_t)addr_b + size_b > r->end;
	pthread_mutex_unlock(&a->mu);
	return refuse;
}

const extent_hooks_t rf__staging_hooks = {
	.alloc = rf__staging_hook_alloc,
	.dalloc = rf__staging_hook_dalloc,
	.destroy = rf__staging_hook_destroy,
	.commit = NULL,       /* everything is committed at alloc */
	.decommit = NULL,     /* never decommit bound or pinned memory */
	.purge_lazy = NULL,   /* idle extents leave through dalloc, whole */
	.purge_forced = NULL,
	.split = rf__staging_hook_split,
	.merge = rf__staging_hook_merge,
};

