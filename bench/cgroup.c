/* bench/cgroup.c — memory cgroups (bench/cgroup.h). */
#include "cgroup.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

int rfb_cgroup_detect(rfb_cgroup *cg, char *why, size_t cap)
{
	memset(cg, 0, sizeof *cg);
	if (geteuid() != 0) {
		snprintf(why, cap, "not root: a memory cgroup cannot be made");
		return -1;
	}
	/* This process's groups: v1's memory controller line ("N:...memory...:/path"), v2's "0::/path". */
	FILE *f = fopen("/proc/self/cgroup", "re");
	char line[512], v1[400] = "", v2[400] = "";
	int has_v1 = 0, has_v2 = 0;
	while (f && fgets(line, sizeof line, f)) {
		line[strcspn(line, "\n")] = '\0';
		char *a = strchr(line, ':'), *b = a ? strchr(a + 1, ':') : NULL;
		if (b == NULL)
			continue;
		*b = '\0';
		if (strstr(a + 1, "memory") != NULL)
			has_v1 = 1, snprintf(v1, sizeof v1, "%s", b + 1);
		else if (line[0] == '0' && a[1] == '\0')
			has_v2 = 1, snprintf(v2, sizeof v2, "%s", b + 1);
	}
	if (f)
		fclose(f);
	char p[600];
	snprintf(p, sizeof p, "/sys/fs/cgroup/memory%s", v1);
	if (has_v1 && access(p, W_OK) == 0) {
		*cg = (rfb_cgroup){1, "", "memory.usage_in_bytes", "memory.max_usage_in_bytes",
				   "memory.limit_in_bytes"};
		snprintf(cg->parent, sizeof cg->parent, "%s", p);
		return 0;
	}
	/* v2: a child group of ours has the memory controller only if our group's subtree_control has it. */
	snprintf(p, sizeof p, "/sys/fs/cgroup%s", v2);
	char sub[640], ctl[256] = "";
	snprintf(sub, sizeof sub, "%s/cgroup.subtree_control", p);
	FILE *s = has_v2 ? fopen(sub, "re") : NULL;
	if (s) {
		if (fgets(ctl, sizeof ctl, s) == NULL)
			ctl[0] = '\0';
		fclose(s);
	}
	/* Not enabled for it here: that would change the machine's cgroup set-up. */
	if (s && strstr(ctl, "memory") != NULL && access(p, W_OK) == 0) {
		*cg = (rfb_cgroup){2, "", "memory.current", "memory.peak", "memory.max"};
		snprintf(cg->parent, sizeof cg->parent, "%s", p);
		return 0;
	}
	snprintf(why, cap, "no memory cgroup this process may make (v1 memory hierarchy not writable, "
			   "v2 memory controller not delegated)");
	return -1;
}

int rfb_cgroup_make(const rfb_cgroup *cg, const char *name, char *out, size_t cap)
{
	snprintf(out, cap, "%s/%s", cg->parent, name);
	if (mkdir(out, 0755) != 0)
		return -1;
	if (cg->version == 2)
		rfb_cgroup_write(out, "memory.swap.max", "0"); /* absent without swap accounting: none then */
	return 0;
}

int rfb_cgroup_write(const char *dir, const char *file, const char *s)
{
	char p[1024];
	snprintf(p, sizeof p, "%s/%s", dir, file);
	int fd = open(p, O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	ssize_t n = write(fd, s, strlen(s));
	int e = errno;
	close(fd);
	errno = e;
	return n == (ssize_t)strlen(s) ? 0 : -1;
}

int rfb_cgroup_join(const char *dir)
{
	char me[32];
	snprintf(me, sizeof me, "%d", (int)getpid());
	return rfb_cgroup_write(dir, "cgroup.procs", me);
}

int rfb_cgroup_remove(const char *dir)
{
	const struct timespec tick = {0, 10 * 1000 * 1000};
	int rc = rmdir(dir);
	for (int i = 0; i < 200 && rc != 0 && errno == EBUSY; i++) {
		nanosleep(&tick, NULL); /* an exited process's charges may take a moment to leave */
		rc = rmdir(dir);
	}
	return rc;
}

int64_t rfb_cgroup_read(const char *dir, const char *file)
{
	char p[1024];
	snprintf(p, sizeof p, "%s/%s", dir, file);
	FILE *f = fopen(p, "re");
	long long v = -1;
	if (f == NULL)
		return -1;
	if (fscanf(f, "%lld", &v) != 1)
		v = -1;
	fclose(f);
	return v;
}

int64_t rfb_cgroup_key(const char *dir, const char *file, const char *key)
{
	char p[1024], k[64];
	long long v;
	snprintf(p, sizeof p, "%s/%s", dir, file);
	FILE *f = fopen(p, "re");
	int64_t out = -1;
	while (f && fscanf(f, "%63s %lld", k, &v) == 2)
		if (strcmp(k, key) == 0) {
			out = v;
			break;
		}
	if (f)
		fclose(f);
	return out;
}

int64_t rfb_cgroup_oom_kills(const rfb_cgroup *cg, const char *dir)
{
	return rfb_cgroup_key(dir, cg->version == 1 ? "memory.oom_control" : "memory.events", "oom_kill");
}

int64_t rfb_cgroup_limit_hits(const rfb_cgroup *cg, const char *dir)
{
	return cg->version == 1 ? rfb_cgroup_read(dir, "memory.failcnt")
				: rfb_cgroup_key(dir, "memory.events", "max");
}

int64_t rfb_cgroup_kernel(const rfb_cgroup *cg, const char *dir)
{
	return cg->version == 1 ? rfb_cgroup_read(dir, "memory.kmem.usage_in_bytes")
				: rfb_cgroup_key(dir, "memory.stat", "kernel");
}

int64_t rfb_cgroup_page_cache(const rfb_cgroup *cg, const char *dir)
{
	return rfb_cgroup_key(dir, "memory.stat", cg->version == 1 ? "cache" : "file");
}

size_t rfb_huge_page_bytes(void)
{
	char s[128] = "";
	FILE *f = fopen("/sys/kernel/mm/transparent_hugepage/enabled", "re");
	if (f == NULL)
		return 0;
	if (fgets(s, sizeof s, f) == NULL)
		s[0] = '\0';
	fclose(f);
	if (s[0] == '\0' || strstr(s, "[never]") != NULL)
		return 0;
	int64_t h = rfb_cgroup_read("/sys/kernel/mm/transparent_hugepage", "hpage_pmd_size");
	return h > 0 ? (size_t)h : 0;
}
