/* bench/cgroup.h — memory cgroups for ringfetch-serve-file-bench and tests/test_memory_cgroup.c: where
 * this process may make a group, the control files of cgroup v1 and v2, the counters read from them,
 * and the transparent huge page size a ring is rounded up to. Plain files under /sys; no library call.
 * Groups are made only where the memory controller is already there for them: v1's memory hierarchy,
 * or on v2 a group whose cgroup.subtree_control already has "memory". Nothing here enables a
 * controller: that would change the machine's cgroup set-up. */
#ifndef RFB_CGROUP_H
#define RFB_CGROUP_H

#include <stddef.h>
#include <stdint.h>

typedef struct rfb_cgroup {
	int version;      /* 1 or 2; 0: no group can be made */
	char parent[600]; /* the directory groups are made in: this process's own group */
	/* The control files of the version (NULL when version is 0): usage memory.usage_in_bytes (v1) or
	 * memory.current (v2); peak memory.max_usage_in_bytes or memory.peak (absent on v2 before Linux
	 * 5.19); limit memory.limit_in_bytes or memory.max. */
	const char *usage, *peak, *limit;
} rfb_cgroup;

/* Where this process may make memory cgroups: as root only; v1's memory hierarchy when writable, else
 * the process's v2 group when writable and its subtree_control has "memory". 0 with *cg filled; -1
 * with cg->version 0 and a sentence in why (cap bytes): "not root: a memory cgroup cannot be made", or
 * that neither version offers one. */
int rfb_cgroup_detect(rfb_cgroup *cg, char *why, size_t cap);

/* A new group cg->parent/name, its path in out (cap bytes); on v2 its swap set to 0 (best effort), so
 * that a limit is on memory alone. 0, or -1 with mkdir's errno (EEXIST included: a stale group's
 * counters would not be this run's). */
int rfb_cgroup_make(const rfb_cgroup *cg, const char *name, char *out, size_t cap);

/* s written to dir/file in one write. 0, or -1 with errno. */
int rfb_cgroup_write(const char *dir, const char *file, const char *s);

/* The calling process moved into the group dir (its pid written to cgroup.procs). 0, or -1 with errno. */
int rfb_cgroup_join(const char *dir);

/* The group dir removed once its processes have exited; retried for up to 2 s while the kernel still
 * holds their charges (EBUSY). 0, or -1 with errno. */
int rfb_cgroup_remove(const char *dir);

/* The number dir/file starts with; -1 when the file is absent or starts with none. */
int64_t rfb_cgroup_read(const char *dir, const char *file);

/* The value of key in the flat-keyed file dir/file (`key value` lines: memory.stat, memory.events,
 * memory.oom_control); -1 when the file or the key is absent. */
int64_t rfb_cgroup_key(const char *dir, const char *file, const char *key);

/* Of the group dir, -1 where absent: its OOM kills (v1 memory.oom_control, v2 memory.events: oom_kill);
 * the times it reached its limit (v1 memory.failcnt, v2 memory.events: max); its kernel memory (v1
 * memory.kmem.usage_in_bytes, v2 memory.stat: kernel); its page cache (memory.stat: v1 cache, v2 file). */
int64_t rfb_cgroup_oom_kills(const rfb_cgroup *cg, const char *dir);
int64_t rfb_cgroup_limit_hits(const rfb_cgroup *cg, const char *dir);
int64_t rfb_cgroup_kernel(const rfb_cgroup *cg, const char *dir);
int64_t rfb_cgroup_page_cache(const rfb_cgroup *cg, const char *dir);

/* The transparent huge page size the library rounds a ring up to (docs/staging.md): hpage_pmd_size; 0
 * when THP is "never" or the kernel does not say. */
size_t rfb_huge_page_bytes(void);

#endif
