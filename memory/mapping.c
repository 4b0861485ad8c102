/* memory/mapping.c — the mappings under staging memory, and the jemalloc extent hooks that make them.
 *
 * A mapping is made with mmap, bound before first touch with hwloc_set_area_membind(BIND or INTERLEAVE,
 * BYNODESET|STRICT|NOCPUBIND) — STRICT, so that a refused binding is an error we see instead of silently
 * unbound memory — and touched, so that its pages exist, on that node, before anyone uses them. If the
 * kernel refuses binding (EPERM in a container without CAP_SYS_NICE, ENOSYS under seccomp, ...) or the
 * hwloc topology is not this system's, the mapping stays, unbound, and records why, so that placement is
 * always reported truthfully. Mappings are removed with munmap (which takes any page range: a head, a
 * tail, a split piece), never hwloc_free, which is free() when the topology is not this system's.
 *
 * Each mapping is a region; a table of regions per arena (sorted, disjoint) answers "where does this
 * pointer live" and lets the merge hook refuse to join extents of different regions (they may differ in
 * binding, and, with CUDA, in registration). Split is harmless. purge and decommit hooks are NULL:
 * jemalloc then returns idle extents through dalloc (unmapped whole), never leaving a bound region half
 * purged or a pinned one decommitted. */
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

atomic_size_t rf__stg_mapped;
atomic_ulong rf__stg_maps;

/* Why the last hook mapping on this thread failed: the hook runs inside mallocx on the allocating
 * thread, and jemalloc only reports NULL, so this is how the error message learns the cause. */
_Thread_local const char *rf__stg_hook_step;
_Thread_local int rf__stg_hook_errno;
_Thread_local const char *rf__stg_hook_detail; /* instead of strerror (a CUDA error) */

/* Who page-locks pinned arenas' memory: the CUDA backend sets it (runtime/ stays free of CUDA). */
static _Atomic(const rf__staging_pinner *) rf__stg_pinner;

void rf__staging_set_pinner(const rf__staging_pinner *pinner)
{
	atomic_store(&rf__stg_pinner, pinner);
}

/* Test fault injection: non-zero makes `step` fail (for "membind" the value is the errno seen). Both
 * the per-step hook and the k-th-step sweep (base/alloc.h) reach every step; the sweep's membind
 * fault is ENOMEM (an error, not a refusal to bind that would fall back). */
int rf__stg_fault(const char *step)
{
	if (rf__fault())
		return strcmp(step, "membind") == 0 ? ENOMEM : 1;
	return RF__TEST_HOOK(fail_alloc_step) != NULL ? RF__TEST_HOOK(fail_alloc_step)(step) : 0;
}

/* Remember why a hook failed, for the message rf__staging_alloc composes. */
void rf__stg_hook_fail(const char *step, int err)
{
	rf__stg_hook_step = step;
	rf__stg_hook_errno = err;
	rf__stg_hook_detail = NULL;
}

/* The page size, which is the granularity of binding and of touching. */
size_t rf__stg_page(void)
{
	long v = sysconf(_SC_PAGESIZE);
	return v > 0 ? (size_t)v : 4096;
}

/* The transparent huge page size when the kernel backs mappings that ask for huge pages (THP
 * "madvise" or "always"), else 0 ("never", or no THP in this kernel). Read once. */
size_t rf__stg_huge_page(void)
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
	if (sz > rf__stg_page() && (sz & (sz - 1)) == 0)
		v = (size_t)sz;
	atomic_store_explicit(&cached, v, memory_order_relaxed);
	return v;
}

/* ---- the region table (one per arena, under its mutex) ----------------------------------------- */

/* Index of the first region ending after x. */
static size_t rf__stg_upper(const rf__stg_arena *a, uintptr_t x)
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

/* The region holding address x, or NULL. */
rf__stg_region *rf__stg_find_region(rf__stg_arena *a, uintptr_t x)
{
	size_t i = rf__stg_upper(a, x);
	return i < a->nregions && a->regions[i].start <= x ? &a->regions[i] : NULL;
}

/* Insert r at index i. The table comes from the process allocator, never from a staging arena
 * (a hook must not allocate from the arena it serves). 0 when out of memory. */
static int rf__stg_insert(rf__stg_arena *a, size_t i, rf__stg_region r)
{
	if (a->nregions == a->cap) {
		size_t cap = a->cap ? 2 * a->cap : 16;
		rf__stg_region *n = realloc(a->regions, cap * sizeof *n);
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

/* Record a new mapping. 0 when out of memory. */
static int rf__stg_region_add(rf__stg_arena *a, uintptr_t start, size_t len, int why, int direct)
{
	pthread_mutex_lock(&a->mu);
	int ok = rf__stg_insert(a, rf__stg_upper(a, start), (rf__stg_region){start, start + len, why, direct});
	pthread_mutex_unlock(&a->mu);
	return ok;
}

/* Forget [start, start+len), which lies inside one region (merges never cross regions): the whole
 * region, a prefix, a suffix, or a middle piece (the region splits in two). 0 if that split needs a
 * table entry that cannot be had. */
static int rf__stg_region_cut(rf__stg_arena *a, uintptr_t start, size_t len)
{
	uintptr_t end = start + len;
	int ok = 1;
	pthread_mutex_lock(&a->mu);
	size_t i = rf__stg_upper(a, start);
	rf__stg_region *r = i < a->nregions && a->regions[i].start <= start ? &a->regions[i] : NULL;
	if (r != NULL && r->start == start && r->end == end) {
		memmove(r, r + 1, (a->nregions - i - 1) * sizeof *r);
		a->nregions--;
	} else if (r != NULL && r->start == start) {
		r->start = end;
	} else if (r != NULL && r->end == end) {
		r->end = start;
	} else if (r != NULL) {
		rf__stg_region tail = {end, r->end, r->why, 0};
		r->end = start;
		if (!(ok = rf__stg_insert(a, i + 1, tail)))
			a->regions[i].end = tail.end;
	}
	pthread_mutex_unlock(&a->mu);
	return ok;
}

/* ---- extent hooks --------------------------------------------------------------------------- */

/* Kernel answers that mean "you may not bind here" (fall back, report) rather than "no memory". */
static int rf__stg_refused(int err)
{
	return err == EPERM || err == ENOSYS || err == EXDEV || err == EINVAL || err == EOPNOTSUPP ||
	       err == EACCES;
}

/* Mappings are made and unmapped here, with mmap and munmap, never with hwloc_alloc / hwloc_free:
 * when the topology is not this system's (HWLOC_XMLFILE, HWLOC_SYNTHETIC, HWLOC_THISSYSTEM=0) hwloc
 * allocates with malloc and hwloc_free is free(), which cannot give back a head, a tail or a split
 * piece of a block (freeing those freed the whole block under us). munmap takes any page range. */
static void *rf__stg_os_map(size_t len)
{
	void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	return p == MAP_FAILED ? NULL : p;
}

static void rf__stg_os_unmap(void *p, size_t len)
{
	(void)munmap(p, len);
}

/* Bind [p, p+len) (fresh, untouched) as the arena's policy asks, strictly: 0, or -1 with errno when
 * hwloc or the kernel cannot honour the binding. */
static int rf__stg_bind(rf__stg_arena *a, void *p, size_t len)
{
	int injected = rf__stg_fault("membind");
	if (injected != 0) {
		errno = injected;
		return -1;
	}
	hwloc_membind_policy_t pol = a->key.kind == RF__STG_NODE ? HWLOC_MEMBIND_BIND : HWLOC_MEMBIND_INTERLEAVE;
	return hwloc_set_area_membind(a->topo, p, len, a->nodeset, pol,
				      HWLOC_MEMBIND_BYNODESET | HWLOC_MEMBIND_STRICT | HWLOC_MEMBIND_NOCPUBIND);
}

/* Map len bytes (a multiple of the page); NULL with the hook's failure note set. */
static void *rf__stg_map_plain(size_t len)
{
	if (rf__stg_fault("fallback")) {
		rf__stg_hook_fail("mapping memory (injected fault)", ENOMEM);
		return NULL;
	}
	void *p = rf__stg_os_map(len);
	if (p == NULL)
		rf__stg_hook_fail("mapping memory (mmap)", errno);
	return p;
}

/* Whether the arena binds: NODE and INTERLEAVE do, on a topology that describes this system (a topology
 * from XML or synthetic may name nodes this machine does not have: hwloc refuses to bind from it). */
static int rf__stg_binds(const rf__stg_arena *a, int *why)
{
	if (a->key.kind != RF__STG_NODE && a->key.kind != RF__STG_INTERLEAVE) {
		*why = a->key.kind == RF__STG_NONE ? RF__WHY_NONE : RF__WHY_UNKNOWN;
		return 0;
	}
	if (!hwloc_topology_is_thissystem(a->topo)) {
		*why = RF__WHY_NOT_THIS_SYSTEM;
		return 0;
	}
	return 1;
}

/* Map len bytes at alignment align (a power of two), bound as the arena's policy asks; *why says whether
 * they are bound, and if not, why. jemalloc may ask for more than page alignment (its metadata wants
 * 2 MiB): the excess is mapped and the head and tail given back before binding. */
static void *rf__stg_map(rf__stg_arena *a, size_t size, size_t align, int huge, int *why)
{
	size_t page = rf__stg_page(), extra = align > page ? align - page : 0;
	if (size + extra < size) {
		rf__stg_hook_fail("mapping memory (size overflows)", ENOMEM);
		return NULL;
	}
	int bind = rf__stg_binds(a, why);
	unsigned char *raw = rf__stg_map_plain(size + extra);
	if (raw == NULL)
		return NULL;
	uintptr_t r = (uintptr_t)raw, p = rf__align_up(r, align);
	if (p > r)
		rf__stg_os_unmap(raw, p - r);
	if (p + size < r + size + extra)
		rf__stg_os_unmap((void *)(p + size), r + extra - p);
	/* Before binding and touching, so that first touch faults huge pages in. An O_DIRECT read into a
	 * huge page is one physically contiguous segment instead of one per 4 KiB page: on a virtio disk
	 * that is what its throughput depends on (docs/files.md). A refusal changes nothing but speed. */
	if (huge)
		(void)madvise((void *)p, size, MADV_HUGEPAGE);
	if (!bind)
		return (void *)p;
	if (rf__stg_bind(a, (void *)p, size) == 0) {
		*why = RF__WHY_BOUND;
		return (void *)p;
	}
	int e = errno;
	if (rf__stg_refused(e)) { /* a refusal, not a shortage: the memory stays, unbound, and says why */
		*why = e;
		return (void *)p;
	}
	rf__stg_os_unmap((void *)p, size);
	rf__stg_hook_fail("binding memory (hwloc_set_area_membind)", e);
	return NULL;
}

/* First touch places the pages: do it now, under the binding, not later on whatever thread copies. */
static void rf__stg_touch(void *p, size_t len)
{
	volatile unsigned char *c = p;
	size_t page = rf__stg_page();
	for (size_t i = 0; i < len; i += page)
		c[i] = 0;
}

/* Pinned arenas: page-lock a fresh mapping (after binding and touching: the pages exist, on their
 * node) and remember it. 0 with the hook's failure note set when it cannot be locked: pinned memory
 * that is not pinned would be a silent fallback to pageable copies. */
static int rf__stg_pin_add(rf__stg_arena *a, void *p, size_t len)
{
	const rf__staging_pinner *pin = atomic_load(&rf__stg_pinner);
	const char *detail = NULL;
	if (pin == NULL) {
		rf__stg_hook_fail("page-locking", ENOSYS);
		rf__stg_hook_detail = "no CUDA backend in this library to page-lock with";
		return 0;
	}
	if (rf__stg_fault("pin") || pin->pin(p, len, &detail) != 0) {
		rf__stg_hook_fail("page-locking (cudaHostRegister)", ENOMEM);
		rf__stg_hook_detail = detail != NULL ? detail : "injected fault";
		return 0;
	}
	pthread_mutex_lock(&a->mu);
	int ok = 1;
	if (a->npins == a->pincap) {
		size_t cap = a->pincap ? 2 * a->pincap : 8;
		rf__stg_pin *n = realloc(a->pins, cap * sizeof *n);
		if (n == NULL)
			ok = 0;
		else
			a->pins = n, a->pincap = cap;
	}
	if (ok)
		a->pins[a->npins++] = (rf__stg_pin){(uintptr_t)p, len};
	pthread_mutex_unlock(&a->mu);
	if (!ok) {
		pin->unpin(p);
		rf__stg_hook_fail("recording the page-locked mapping", ENOMEM);
	}
	return ok;
}

/* Is [p, p+len) exactly one whole pinned mapping? */
static int rf__stg_pin_is_whole(rf__stg_arena *a, const void *p, size_t len)
{
	int whole = 0;
	pthread_mutex_lock(&a->mu);
	for (size_t i = 0; i < a->npins && !whole; i++)
		whole = a->pins[i].start == (uintptr_t)p && a->pins[i].len == len;
	pthread_mutex_unlock(&a->mu);
	return whole;
}

/* If [p, p+len) is a whole pinned mapping: forget it, unregister and unmap it, and return 1. A piece
 * of one: 0 (the caller declines the dalloc; see rf__stg_pin). */
static int rf__stg_pin_release(rf__stg_arena *a, void *p, size_t len)
{
	int whole = 0;
	pthread_mutex_lock(&a->mu);
	for (size_t i = 0; i < a->npins; i++)
		if (a->pins[i].start == (uintptr_t)p && a->pins[i].len == len) {
			a->pins[i] = a->pins[--a->npins];
			whole = 1;
			break;
		}
	pthread_mutex_unlock(&a->mu);
	if (whole) {
		const rf__staging_pinner *pin = atomic_load(&rf__stg_pinner);
		if (pin != NULL)
			pin->unpin(p);
		rf__stg_os_unmap(p, len);
	}
	return whole;
}

/* A new mapping: map (bound if possible), touch, page-lock (pinned arenas), record the region (direct:
 * one block of its own, see rf__stg_direct_alloc). NULL with the hook's failure note set. */
void *rf__stg_new_mapping(rf__stg_arena *a, size_t size, size_t align, int direct)
{
	int why;
	void *p = rf__stg_map(a, size, align, direct == RF__STG_DIRECT_HUGE, &why);
	if (p == NULL)
		return NULL;
	rf__stg_touch(p, size);
	if (a->key.pinned && !rf__stg_pin_add(a, p, size)) {
		rf__stg_os_unmap(p, size);
		return NULL;
	}
	if (!rf__stg_region_add(a, (uintptr_t)p, size, why, direct)) {
		if (!a->key.pinned || !rf__stg_pin_release(a, p, size))
			rf__stg_os_unmap(p, size);
		rf__stg_hook_fail("recording the region", ENOMEM);
		return NULL;
	}
	atomic_fetch_add(&rf__stg_mapped, size);
	atomic_fetch_add(&rf__stg_maps, 1);
	return p;
}

void rf__stg_unmap_mapping(rf__stg_arena *a, void *p, size_t len)
{
	if (!a->key.pinned || !rf__stg_pin_release(a, p, len))
		rf__stg_os_unmap(p, len);
	atomic_fetch_sub(&rf__stg_mapped, len);
}

/* extent alloc: a new mapping for jemalloc to carve. */
static void *rf__stg_hook_alloc(extent_hooks_t *h, void *new_addr, size_t size, size_t align, bool *zero,
				bool *commit, unsigned ind)
{
	(void)ind;
	if (new_addr != NULL) /* growing in place at a given address: decline, jemalloc maps elsewhere */
		return NULL;
	void *p = rf__stg_new_mapping((rf__stg_arena *)h, size, align, RF__STG_CARVED);
	if (p == NULL)
		return NULL;
	*zero = true; /* fresh mappings are zero, and touching wrote zeros */
	*commit = true;
	return p;
}

/* extent dalloc: forget and unmap. Returning true (keep it) only if the table cannot split. */
static bool rf__stg_hook_dalloc(extent_hooks_t *h, void *addr, size_t size, bool committed, unsigned ind)
{
	(void)committed;
	(void)ind;
	rf__stg_arena *a = (rf__stg_arena *)h;
	if (a->key.pinned && !rf__stg_pin_is_whole(a, addr, size))
		return true; /* a piece of a registration: jemalloc keeps it for reuse */
	if (!rf__stg_region_cut(a, (uintptr_t)addr, size))
		return true;
	if (!a->key.pinned || !rf__stg_pin_release(a, addr, size))
		rf__stg_os_unmap(addr, size);
	atomic_fetch_sub(&rf__stg_mapped, size);
	return false;
}

/* extent destroy (arena teardown): the same as dalloc, without the option to keep the memory. */
static void rf__stg_hook_destroy(extent_hooks_t *h, void *addr, size_t size, bool committed, unsigned ind)
{
	(void)rf__stg_hook_dalloc(h, addr, size, committed, ind);
}

/* extent split: pieces stay inside their region, nothing to record. */
static bool rf__stg_hook_split(extent_hooks_t *h, void *addr, size_t size, size_t size_a, size_t size_b,
			       bool committed, unsigned ind)
{
	(void)h, (void)addr, (void)size, (void)size_a, (void)size_b, (void)committed, (void)ind;
	return false;
}

/* extent merge: only within one region (true = refuse). Regions differ in binding (and, with CUDA,
 * in registration), and each is unmapped on its own. */
static bool rf__stg_hook_merge(extent_hooks_t *h, void *addr_a, size_t size_a, void *addr_b, size_t size_b,
			       bool committed, unsigned ind)
{
	(void)size_a, (void)committed, (void)ind;
	rf__stg_arena *a = (rf__stg_arena *)h;
	pthread_mutex_lock(&a->mu);
	rf__stg_region *r = rf__stg_find_region(a, (uintptr_t)addr_a);
	bool refuse = r == NULL || (uintptr_t)addr_b < r->start || (uintptr_t)addr_b + size_b > r->end;
	pthread_mutex_unlock(&a->mu);
	return refuse;
}

const extent_hooks_t rf__stg_hooks = {
	.alloc = rf__stg_hook_alloc,
	.dalloc = rf__stg_hook_dalloc,
	.destroy = rf__stg_hook_destroy,
	.commit = NULL,       /* everything is committed at alloc */
	.decommit = NULL,     /* never decommit bound or pinned memory */
	.purge_lazy = NULL,   /* idle extents leave through dalloc, whole */
	.purge_forced = NULL,
	.split = rf__stg_hook_split,
	.merge = rf__stg_hook_merge,
};

