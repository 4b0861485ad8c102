/* memory/staging.c — staging memory: NUMA-bound pages from hwloc, carved up by jemalloc.
 *
 * One jemalloc arena per (placement, pinned) pair, created on first use with custom extent hooks.
 * The alloc hook maps memory with hwloc_alloc_membind(BIND, BYNODESET|STRICT|NOCPUBIND) — STRICT, so
 * that a refused binding is an error we see instead of silently unbound memory — and touches every
 * page so that the pages exist, on that node, before anyone uses them. If the kernel refuses binding
 * (EPERM in a container without CAP_SYS_NICE, ENOSYS under seccomp, ...) the hook maps ordinary
 * memory instead and records why, per region, so that placement is always reported truthfully.
 *
 * Each mapping made by the hook is a region; a table of regions per arena (sorted, disjoint) answers
 * "where does this pointer live" and lets the merge hook refuse to join extents of different regions
 * (they may differ in binding, and, with CUDA, in registration). Split is harmless. dalloc/destroy
 * unmap with hwloc_free (munmap on Linux, which also takes a part of a mapping: a split piece).
 * purge and decommit hooks are NULL: jemalloc then returns idle extents through dalloc (unmapped
 * whole), never leaving a bound region half purged or a pinned one decommitted.
 *
 * Arenas, their records and the topology reference live as long as the process, like jemalloc's own
 * arenas: pipelines come and go, the arenas (and their cached extents) are reused. */
#include "memory/staging.h"
#include "base/alloc.h"
#include "runtime/backend.h"
#include "base/error.h"
#include "memory/topology.h"

#include "memory/je.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Why a region is unbound; 0: bound. Positive values are the errno of a refused binding. */
enum { RF__WHY_BOUND = 0, RF__WHY_NONE = -1, RF__WHY_UNKNOWN = -2 };

/* Largest growth step of an arena's mappings: the hook touches everything it maps, so jemalloc's
 * geometric growth of retained memory must not make it commit much more than was asked for. */
#define RF__STG_GROW_LIMIT ((size_t)4 << 20)

typedef struct rf__stg_region {
	uintptr_t start, end;
	int why;
} rf__stg_region;

/* A page-locked mapping (pinned arenas): registered whole by the alloc hook, and unregistered and
 * unmapped only when jemalloc gives the whole mapping back in one dalloc. cudaHostUnregister takes
 * only the base of a registration, so a piece cannot leave on its own: dalloc of a piece declines
 * ("keep it"), and jemalloc keeps the piece among its retained extents, merges it back with its
 * siblings and reuses it. Pinned memory therefore stays bounded by the arena's peak use. (Counting
 * returned pieces and unmapping when all were back would leak: jemalloc never returns the tail it
 * retains after splitting a growth mapping.) */
typedef struct rf__stg_pin {
	uintptr_t start;
	size_t len;
} rf__stg_pin;

typedef struct rf__stg_arena {
	extent_hooks_t hooks; /* first member: jemalloc passes &hooks back to every hook */
	struct rf__stg_arena *next;
	rf__staging_policy key;  /* resolved: NODE, INTERLEAVE, NONE or UNKNOWN */
	unsigned ind;            /* jemalloc arena index */
	hwloc_topology_t topo;
	hwloc_nodeset_t nodeset; /* NODE: {node}; INTERLEAVE: the allowed nodes; otherwise NULL */
	pthread_mutex_t mu;      /* guards the region table (hooks run concurrently) */
	rf__stg_region *regions; /* sorted by start, disjoint */
	size_t nregions, cap;
	rf__stg_pin *pins; /* pinned arenas: one per registered mapping (few: unsorted) */
	size_t npins, pincap;
} rf__stg_arena;

static pthread_mutex_t rf__stg_mu = PTHREAD_MUTEX_INITIALIZER; /* topology, arena list */
static hwloc_topology_t rf__stg_topo;
static rf__stg_arena *rf__stg_arenas;
static unsigned rf__stg_narenas;
static atomic_long rf__stg_live;
static atomic_size_t rf__stg_mapped;
static atomic_ulong rf__stg_maps;

/* Why the last hook mapping on this thread failed: the hook runs inside mallocx on the allocating
 * thread, and jemalloc only reports NULL, so this is how the error message learns the cause. */
static _Thread_local const char *rf__stg_hook_step;
static _Thread_local int rf__stg_hook_errno;
static _Thread_local const char *rf__stg_hook_detail; /* instead of strerror (a CUDA error) */

/* Who page-locks pinned arenas' memory: the CUDA backend sets it (runtime/ stays free of CUDA). */
static _Atomic(const rf__staging_pinner *) rf__stg_pinner;

void rf__staging_set_pinner(const rf__staging_pinner *pinner)
{
	atomic_store(&rf__stg_pinner, pinner);
}

/* Test fault injection: non-zero makes `step` fail (for "membind" the value is the errno seen). Both
 * the per-step hook and the k-th-step sweep (base/alloc.h) reach every step; the sweep's membind
 * fault is ENOMEM (an error, not a refusal to bind that would fall back). */
static int rf__stg_fault(const char *step)
{
	if (rf__fault())
		return strcmp(step, "membind") == 0 ? ENOMEM : 1;
	return rf__test_hooks.fail_alloc_step != NULL ? rf__test_hooks.fail_alloc_step(step) : 0;
}

/* Remember why a hook failed, for the message rf__staging_alloc composes. */
static void rf__stg_hook_fail(const char *step, int err)
{
	rf__stg_hook_step = step;
	rf__stg_hook_errno = err;
	rf__stg_hook_detail = NULL;
}

/* The page size, which is the granularity of binding and of touching. */
static size_t rf__stg_page(void)
{
	long v = sysconf(_SC_PAGESIZE);
	return v > 0 ? (size_t)v : 4096;
}

/* ---- policy parsing and resolution ------------------------------------------------------------- */

/* Decimal digits only, no sign or space, fitting an int: anything looser hides typos. */
static int rf__stg_parse_node(const char *s, int *node)
{
	long v = 0;
	if (*s == '\0')
		return 0;
	for (; *s != '\0'; s++) {
		if (*s < '0' || *s > '9' || v > (INT32_MAX - 9) / 10)
			return 0;
		v = v * 10 + (*s - '0');
	}
	*node = (int)v;
	return 1;
}

int rf__staging_parse(const char *who, const char *text, rf__staging_policy *out)
{
	rf__staging_policy p = {RF__STG_AUTO, -1, 0};
	if (text == NULL || strcmp(text, "auto") == 0)
		p.kind = RF__STG_AUTO;
	else if (strcmp(text, "none") == 0)
		p.kind = RF__STG_NONE;
	else if (strcmp(text, "interleave") == 0)
		p.kind = RF__STG_INTERLEAVE;
	else if (strncmp(text, "node:", 5) == 0 && rf__stg_parse_node(text + 5, &p.node))
		p.kind = RF__STG_NODE;
	else
		return rf__err(RF_EINVAL,
			       "%s: staging policy \"%.64s\" is malformed (expected auto, none, interleave or node:N)",
			       who, text);
	*out = p;
	return RF_OK;
}

/* auto: the node of the core the calling thread last ran on (the compute thread of a CPU pipeline).
 * Unknown (no NUMA information, hwloc cannot tell) becomes UNKNOWN: ordinary memory, reported. */
static void rf__stg_caller_node(hwloc_topology_t topo, rf__staging_policy *key)
{
	hwloc_bitmap_t cpus = hwloc_bitmap_alloc(), nodes = hwloc_bitmap_alloc();
	key->kind = RF__STG_UNKNOWN;
	if (cpus != NULL && nodes != NULL && hwloc_get_last_cpu_location(topo, cpus, HWLOC_CPUBIND_THREAD) == 0 &&
	    hwloc_cpuset_to_nodeset(topo, cpus, nodes) == 0 && hwloc_bitmap_first(nodes) >= 0) {
		key->kind = RF__STG_NODE;
		key->node = hwloc_bitmap_first(nodes);
	}
	hwloc_bitmap_free(cpus);
	hwloc_bitmap_free(nodes);
}

/* A node exists and this process may allocate on it (cgroup cpuset.mems, hwloc's allowed set). */
static int rf__stg_node_usable(hwloc_topology_t topo, int node)
{
	return hwloc_get_numanode_obj_by_os_index(topo, (unsigned)node) != NULL &&
	       hwloc_bitmap_isset(hwloc_topology_get_allowed_nodeset(topo), (unsigned)node);
}

/* Turn a parsed policy into an arena key; node:N is checked against the machine here. */
static int rf__stg_resolve(hwloc_topology_t topo, const rf__staging_policy *pol, rf__staging_policy *key)
{
	*key = pol != NULL ? *pol : (rf__staging_policy){RF__STG_AUTO, -1, 0};
	if (key->kind == RF__STG_AUTO)
		rf__stg_caller_node(topo, key);
	if (key->kind == RF__STG_NODE && !rf__stg_node_usable(topo, key->node)) {
		char list[64];
		hwloc_bitmap_list_snprintf(list, sizeof list, hwloc_topology_get_allowed_nodeset(topo));
		return rf__err(RF_EINVAL, "staging policy node:%d: no NUMA node %d usable by this process (nodes: %s)",
			       key->node, key->node, list);
	}
	if (key->kind != RF__STG_NODE)
		key->node = -1;
	return RF_OK;
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
static rf__stg_region *rf__stg_find_region(rf__stg_arena *a, uintptr_t x)
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
static int rf__stg_region_add(rf__stg_arena *a, uintptr_t start, size_t len, int why)
{
	pthread_mutex_lock(&a->mu);
	int ok = rf__stg_insert(a, rf__stg_upper(a, start), (rf__stg_region){start, start + len, why});
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
		rf__stg_region tail = {end, r->end, r->why};
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

/* Bound memory, strictly: NULL with errno when hwloc or the kernel cannot honour the binding. */
static void *rf__stg_map_bound(rf__stg_arena *a, size_t len)
{
	int injected = rf__stg_fault("membind");
	if (injected != 0) {
		errno = injected;
		return NULL;
	}
	hwloc_membind_policy_t pol = a->key.kind == RF__STG_NODE ? HWLOC_MEMBIND_BIND : HWLOC_MEMBIND_INTERLEAVE;
	return hwloc_alloc_membind(a->topo, len, a->nodeset, pol,
				   HWLOC_MEMBIND_BYNODESET | HWLOC_MEMBIND_STRICT | HWLOC_MEMBIND_NOCPUBIND);
}

/* Ordinary page-aligned memory (mmap on Linux), freed by hwloc_free like the bound kind. */
static void *rf__stg_map_plain(rf__stg_arena *a, size_t len)
{
	if (rf__stg_fault("fallback")) {
		rf__stg_hook_fail("mapping unbound memory (injected fault)", ENOMEM);
		return NULL;
	}
	void *p = hwloc_alloc(a->topo, len);
	if (p == NULL)
		rf__stg_hook_fail("mapping unbound memory", errno);
	return p;
}

/* Map len bytes as the arena's policy asks; *why says whether they are bound, and if not, why. */
static void *rf__stg_map_raw(rf__stg_arena *a, size_t len, int *why)
{
	if (a->key.kind == RF__STG_NODE || a->key.kind == RF__STG_INTERLEAVE) {
		void *p = rf__stg_map_bound(a, len);
		if (p != NULL) {
			*why = RF__WHY_BOUND;
			return p;
		}
		int e = errno;
		if (!rf__stg_refused(e)) {
			rf__stg_hook_fail("binding memory (hwloc_alloc_membind)", e);
			return NULL;
		}
		*why = e;
	} else {
		*why = a->key.kind == RF__STG_NONE ? RF__WHY_NONE : RF__WHY_UNKNOWN;
	}
	return rf__stg_map_plain(a, len);
}

/* jemalloc may ask for more than page alignment (its metadata wants 2 MiB): map the excess and give
 * back the head and tail (partial munmap keeps the binding of what remains). */
static void *rf__stg_map(rf__stg_arena *a, size_t size, size_t align, int *why)
{
	size_t page = rf__stg_page(), extra = align > page ? align - page : 0;
	if (size + extra < size)
		return NULL;
	unsigned char *raw = rf__stg_map_raw(a, size + extra, why);
	if (raw == NULL)
		return NULL;
	uintptr_t r = (uintptr_t)raw, p = (r + align - 1) & ~(uintptr_t)(align - 1);
	if (p > r)
		hwloc_free(a->topo, raw, p - r);
	if (p + size < r + size + extra)
		hwloc_free(a->topo, (void *)(p + size), r + extra - p);
	return (void *)p;
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
		hwloc_free(a->topo, p, len);
	}
	return whole;
}

/* extent alloc: map (bound if possible), touch, page-lock (pinned arenas), record the region. */
static void *rf__stg_hook_alloc(extent_hooks_t *h, void *new_addr, size_t size, size_t align, bool *zero,
				bool *commit, unsigned ind)
{
	(void)ind;
	rf__stg_arena *a = (rf__stg_arena *)h;
	int why;
	if (new_addr != NULL) /* growing in place at a given address: decline, jemalloc maps elsewhere */
		return NULL;
	void *p = rf__stg_map(a, size, align, &why);
	if (p == NULL)
		return NULL;
	rf__stg_touch(p, size);
	if (a->key.pinned && !rf__stg_pin_add(a, p, size)) {
		hwloc_free(a->topo, p, size);
		return NULL;
	}
	if (!rf__stg_region_add(a, (uintptr_t)p, size, why)) {
		if (!a->key.pinned || !rf__stg_pin_release(a, p, size))
			hwloc_free(a->topo, p, size);
		rf__stg_hook_fail("recording the region", ENOMEM);
		return NULL;
	}
	atomic_fetch_add(&rf__stg_mapped, size);
	atomic_fetch_add(&rf__stg_maps, 1);
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
		hwloc_free(a->topo, addr, size);
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

static const extent_hooks_t rf__stg_hooks = {
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

/* ---- arenas ---------------------------------------------------------------------------------- */

/* The topology, loaded once (rf__stg_mu held); the reference is kept for the life of the arenas. */
static int rf__stg_topology(void)
{
	if (rf__stg_topo != NULL)
		return RF_OK;
	if (rf__stg_fault("topology"))
		return rf__err(RF_EBACKEND, "staging: cannot load the hwloc topology (injected fault)");
	if ((rf__stg_topo = rf__topo_acquire()) == NULL)
		return rf__err(RF_EBACKEND, "staging: %s", rf__errmsg_peek());
	return RF_OK;
}

/* The arena already serving key, if any (rf__stg_mu held): arenas are few, a list is enough. */
static rf__stg_arena *rf__stg_find_arena(const rf__staging_policy *key)
{
	for (rf__stg_arena *a = rf__stg_arenas; a != NULL; a = a->next)
		if (a->key.kind == key->kind && a->key.node == key->node && a->key.pinned == key->pinned)
			return a;
	return NULL;
}

/* The nodeset the hooks bind to. */
static int rf__stg_nodeset(rf__stg_arena *a)
{
	if (a->key.kind == RF__STG_NODE)
		a->nodeset = hwloc_bitmap_alloc();
	else if (a->key.kind == RF__STG_INTERLEAVE)
		a->nodeset = hwloc_bitmap_dup(hwloc_topology_get_allowed_nodeset(a->topo));
	else
		return RF_OK;
	if (a->nodeset == NULL)
		return rf__err(RF_ENOMEM, "staging: out of memory");
	if (a->key.kind == RF__STG_NODE)
		hwloc_bitmap_only(a->nodeset, (unsigned)a->key.node);
	return RF_OK;
}

/* arenas.create with our hooks; then cap the growth step (best effort: only a tuning knob). */
static int rf__stg_jemalloc_arena(rf__stg_arena *a)
{
	if (rf__stg_fault("arena"))
		return rf__err(RF_ENOMEM, "staging: cannot create a jemalloc arena (injected fault)");
	extent_hooks_t *hp = &a->hooks;
	size_t sz = sizeof a->ind;
	rf__stg_hook_step = NULL;
	int e = mallctl("arenas.create", &a->ind, &sz, &hp, sizeof hp);
	if (e != 0)
		return rf__err(RF_ENOMEM, "staging: jemalloc arenas.create failed (%s)%s%s", strerror(e),
			       rf__stg_hook_step ? ": " : "", rf__stg_hook_step ? rf__stg_hook_step : "");
	char name[64];
	size_t limit = RF__STG_GROW_LIMIT;
	snprintf(name, sizeof name, "arena.%u.retain_grow_limit", a->ind);
	(void)mallctl(name, NULL, NULL, &limit, sizeof limit);
	return RF_OK;
}

/* Create and publish the arena for key (rf__stg_mu held). */
static int rf__stg_arena_new(const rf__staging_policy *key, rf__stg_arena **out)
{
	int rc;
	rf__stg_arena *a = calloc(1, sizeof *a);
	if (a == NULL)
		return rf__err(RF_ENOMEM, "staging: out of memory");
	a->hooks = rf__stg_hooks;
	a->key = *key;
	a->topo = rf__stg_topo;
	pthread_mutex_init(&a->mu, NULL);
	if ((rc = rf__stg_nodeset(a)) != RF_OK)
		goto fail;
	if ((rc = rf__stg_jemalloc_arena(a)) != RF_OK)
		goto fail;
	a->next = rf__stg_arenas;
	rf__stg_arenas = a;
	rf__stg_narenas++;
	*out = a;
	return RF_OK;
fail:
	hwloc_bitmap_free(a->nodeset);
	pthread_mutex_destroy(&a->mu);
	free(a->regions);
	free(a);
	return rc;
}

/* The arena serving pol for the calling thread, created on first use. */
static int rf__stg_arena_get(const rf__staging_policy *pol, rf__stg_arena **out)
{
	rf__staging_policy key;
	pthread_mutex_lock(&rf__stg_mu);
	int rc = rf__stg_topology();
	if (rc == RF_OK)
		rc = rf__stg_resolve(rf__stg_topo, pol, &key);
	if (rc == RF_OK && (*out = rf__stg_find_arena(&key)) == NULL)
		rc = rf__stg_arena_new(&key, out);
	pthread_mutex_unlock(&rf__stg_mu);
	return rc;
}

/* ---- allocation ------------------------------------------------------------------------------ */

/* log2 of a power-of-two alignment: MALLOCX_ALIGN needs ffs(), which strict POSIX mode hides. */
static int rf__stg_lg(size_t align)
{
	int lg = 0;
	while (((size_t)1 << lg) < align)
		lg++;
	return lg;
}

/* The one place staging memory is carved: clears the hook's failure note first, so that a NULL can
 * be explained by what the hooks saw during this very call. */
static void *rf__stg_mallocx(const rf__stg_arena *a, size_t bytes, size_t align)
{
	rf__stg_hook_step = NULL;
	if (rf__stg_fault("mallocx")) {
		rf__stg_hook_fail("mallocx (injected fault)", ENOMEM);
		return NULL;
	}
	/* No thread cache: staging blocks are large and long-lived, and a cached block would stay
	 * attributed to this thread instead of returning to the arena. Zeroed: fresh extents are zero
	 * already (jemalloc skips those), reused ones must not leak a previous owner's bytes. */
	return mallocx(bytes, MALLOCX_ARENA(a->ind) | MALLOCX_TCACHE_NONE | MALLOCX_ZERO |
				      MALLOCX_LG_ALIGN(rf__stg_lg(align)));
}

/* A short name of an arena's placement, for messages. */
static const char *rf__stg_key_name(const rf__staging_policy *key, char *buf, size_t cap)
{
	switch (key->kind) {
	case RF__STG_NODE:
		snprintf(buf, cap, "NUMA node %d", key->node);
		return buf;
	case RF__STG_INTERLEAVE:
		return "interleaved";
	default:
		return "unbound";
	}
}

/* RF_ENOMEM naming the step that failed inside mallocx (jemalloc itself only says NULL). */
static int rf__stg_alloc_failed(const rf__stg_arena *a, size_t bytes)
{
	char buf[32];
	const char *where = rf__stg_key_name(&a->key, buf, sizeof buf);
	if (rf__stg_hook_step == NULL)
		return rf__err(RF_ENOMEM, "staging: cannot allocate %zu bytes (%s): jemalloc mallocx returned NULL",
			       bytes, where);
	return rf__err(RF_ENOMEM, "staging: cannot allocate %zu bytes (%s%s): %s failed: %s", bytes, where,
		       a->key.pinned ? ", pinned" : "", rf__stg_hook_step,
		       rf__stg_hook_detail != NULL ? rf__stg_hook_detail : strerror(rf__stg_hook_errno));
}

/* Arena lookup under the lock, carving outside it: mallocx has its own locks, and hooks may run. */
int rf__staging_alloc(const rf__staging_policy *pol, size_t bytes, size_t align, void **out)
{
	rf__stg_arena *a;
	int rc = rf__stg_arena_get(pol, &a);
	if (rc != RF_OK)
		return rc;
	void *p = rf__stg_mallocx(a, bytes, align);
	if (p == NULL)
		return rf__stg_alloc_failed(a, bytes);
	atomic_fetch_add(&rf__stg_live, 1);
	*out = p;
	return RF_OK;
}

/* dallocx finds the arena from the pointer; no tcache, as in rf__stg_mallocx. */
void rf__staging_free(void *p)
{
	if (p == NULL)
		return;
	dallocx(p, MALLOCX_TCACHE_NONE);
	atomic_fetch_sub(&rf__stg_live, 1);
}

/* ---- placement ------------------------------------------------------------------------------- */

/* The arena and region `why` of address p, if it is staging memory. */
static int rf__stg_lookup(const void *p, rf__stg_arena **out, int *why)
{
	int found = 0;
	pthread_mutex_lock(&rf__stg_mu);
	for (rf__stg_arena *a = rf__stg_arenas; a != NULL && !found; a = a->next) {
		pthread_mutex_lock(&a->mu);
		rf__stg_region *r = rf__stg_find_region(a, (uintptr_t)p);
		if (r != NULL) {
			found = 1;
			*why = r->why;
			*out = a;
		}
		pthread_mutex_unlock(&a->mu);
	}
	pthread_mutex_unlock(&rf__stg_mu);
	return found;
}

/* Static sentences, so that rf_placement.reason never dangles. */
static const char *rf__stg_reason(int why)
{
	switch (why) {
	case RF__WHY_BOUND:
		return "";
	case RF__WHY_NONE:
		return "policy none: ordinary unbound memory, placed by the kernel at first touch";
	case RF__WHY_UNKNOWN:
		return "policy auto: the calling thread's NUMA node is unknown (hwloc cannot tell): unbound memory";
	case EPERM:
		return "binding refused by the kernel (EPERM: not permitted, e.g. a container without "
		       "CAP_SYS_NICE): unbound memory";
	case ENOSYS:
		return "binding unavailable (ENOSYS: no mbind, or blocked by seccomp): unbound memory";
	case EXDEV:
		return "binding refused: hwloc cannot bind strictly as asked (EXDEV): unbound memory";
	case EINVAL:
		return "binding refused by the kernel (EINVAL: node not allowed, e.g. outside the cgroup's "
		       "cpuset.mems): unbound memory";
	default:
		return "binding refused by the kernel: unbound memory";
	}
}

/* Where unbound memory actually is: the node of its first page, if the kernel says; else -1. */
static int rf__stg_where(hwloc_topology_t topo, const void *p)
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
	rf__stg_arena *a;
	int why;
	if (p == NULL || !rf__stg_lookup(p, &a, &why))
		return rf__err(RF_EINVAL, "staging placement: %p is not inside staging memory", p);
	out->bound = why == RF__WHY_BOUND;
	out->pinned = a->key.pinned;
	out->reason = rf__stg_reason(why);
	if (out->bound)
		out->numa_node = a->key.kind == RF__STG_NODE ? a->key.node : -1;
	else
		out->numa_node = rf__stg_where(a->topo, p);
	return RF_OK;
}

/* ---- the public embedder API ----------------------------------------------------------------- */

/* Small blocks need only cache-line alignment; page alignment from 4 KiB keeps big ones DMA-ready. */
int rf_staging_alloc(size_t bytes, const char *policy, void **out)
{
	if (out == NULL || bytes == 0)
		return rf__err(RF_EINVAL, "rf_staging_alloc: %s", out == NULL ? "out is NULL" : "bytes is 0");
	rf__staging_policy pol;
	int rc = rf__staging_parse("rf_staging_alloc", policy, &pol);
	if (rc != RF_OK)
		return rc;
	if ((rc = rf__staging_alloc(&pol, bytes, bytes >= 4096 ? 4096 : 64, out)) != RF_OK)
		return rf__err(rc, "rf_staging_alloc: %s", rf__errmsg_peek());
	return RF_OK;
}

/* Public name of rf__staging_free (the internal one is what backends call, without the export). */
void rf_staging_free(void *p)
{
	rf__staging_free(p);
}

/* Checks the public arguments and prefixes the detail with the public name. */
int rf_staging_placement(const void *p, rf_placement *out)
{
	if (out == NULL)
		return rf__err(RF_EINVAL, "rf_staging_placement: out is NULL");
	int rc = rf__staging_placement(p, out);
	return rc == RF_OK ? RF_OK : rf__err(rc, "rf_staging_placement: %s", rf__errmsg_peek());
}

/* ---- for tests ------------------------------------------------------------------------------- */

/* Counters for tests (leaks, growth); cheap enough to be always on. */
void rf__staging_get_stats(rf__staging_stats *out)
{
	out->live_allocs = atomic_load(&rf__stg_live);
	out->mapped_bytes = atomic_load(&rf__stg_mapped);
	out->hook_maps = atomic_load(&rf__stg_maps);
	pthread_mutex_lock(&rf__stg_mu);
	out->narenas = rf__stg_narenas;
	pthread_mutex_unlock(&rf__stg_mu);
}

/* For tests reading jemalloc's per-arena statistics. */
int rf__staging_arena_of(const void *p)
{
	rf__stg_arena *a;
	int why;
	return p != NULL && rf__stg_lookup(p, &a, &why) ? (int)a->ind : -1;
}
