/* memory/policy.c — staging policies: parsing, resolving one to an arena key on this machine, and the
 * sentences rf_placement.reason gives for unbound memory. */
#include "memory/staging_int.h"
#include "base/error.h"
#include "base/parse.h"

#include <errno.h>
#include <string.h>

int rf__staging_parse(const char *who, const char *text, rf__staging_policy *out)
{
	rf__staging_policy p = {RF__STG_AUTO, -1, 0};
	uint64_t node = 0; /* node:N, N in the library's one decimal grammar (base/parse.h), fitting an int */
	if (text == NULL || strcmp(text, "auto") == 0)
		p.kind = RF__STG_AUTO;
	else if (strcmp(text, "none") == 0)
		p.kind = RF__STG_NONE;
	else if (strcmp(text, "interleave") == 0)
		p.kind = RF__STG_INTERLEAVE;
	else if (strncmp(text, "node:", 5) == 0 && rf__parse_uint(text + 5, 0, INT32_MAX, &node) == 0)
		p.kind = RF__STG_NODE;
	else
		return rf__err(RF_EINVAL,
			       "%s: staging policy \"%.64s\" is malformed (expected auto, none, interleave or node:N)",
			       who, text);
	p.node = p.kind == RF__STG_NODE ? (int)node : -1;
	*out = p;
	return RF_OK;
}

/* auto: the node of the core the calling thread last ran on (the compute thread of a CPU pipeline).
 * Unknown (no NUMA information, hwloc cannot tell) becomes UNKNOWN: ordinary memory, reported. */
static void rf__staging_caller_node(hwloc_topology_t topo, rf__staging_policy *key)
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
static int rf__staging_node_usable(hwloc_topology_t topo, int node)
{
	return hwloc_get_numanode_obj_by_os_index(topo, (unsigned)node) != NULL &&
	       hwloc_bitmap_isset(hwloc_topology_get_allowed_nodeset(topo), (unsigned)node);
}

int rf__staging_resolve(hwloc_topology_t topo, const rf__staging_policy *pol, rf__staging_policy *key)
{
	*key = pol != NULL ? *pol : (rf__staging_policy){RF__STG_AUTO, -1, 0};
	if (key->kind == RF__STG_AUTO)
		rf__staging_caller_node(topo, key);
	if (key->kind == RF__STG_NODE && !rf__staging_node_usable(topo, key->node)) {
		char list[64];
		hwloc_bitmap_list_snprintf(list, sizeof list, hwloc_topology_get_allowed_nodeset(topo));
		return rf__err(RF_EINVAL, "staging policy node:%d: no NUMA node %d usable by this process (nodes: %s)",
			       key->node, key->node, list);
	}
	if (key->kind != RF__STG_NODE)
		key->node = -1;
	return RF_OK;
}

/* Static sentences, so that rf_placement.reason never dangles. */
const char *rf__staging_reason(int why)
{
	switch (why) {
	case RF__WHY_BOUND:
		return "";
	case RF__WHY_NONE:
		return "policy none: ordinary unbound memory, placed by the kernel at first touch";
	case RF__WHY_UNKNOWN:
		return "policy auto: the calling thread's NUMA node is unknown (hwloc cannot tell): unbound memory";
	case RF__WHY_NOT_THIS_SYSTEM:
		return "the hwloc topology does not describe this system (HWLOC_XMLFILE, HWLOC_SYNTHETIC or "
		       "HWLOC_THISSYSTEM=0; set HWLOC_THISSYSTEM=1 if the XML is this machine's): hwloc cannot "
		       "bind: unbound memory";
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
