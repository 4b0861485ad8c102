/* memory/topology.c — one hwloc topology per process, reference counted under a mutex. */
#include "memory/topology.h"
#include "base/alloc.h"
#include "base/error.h"

#include <errno.h>
#include <pthread.h>
#include <string.h>

static pthread_mutex_t rf__topo_mu = PTHREAD_MUTEX_INITIALIZER;
static hwloc_topology_t rf__topo;
static unsigned rf__topo_refs;

hwloc_topology_t rf__topo_acquire(void)
{
	hwloc_topology_t t = NULL;
	pthread_mutex_lock(&rf__topo_mu);
	if (rf__topo_refs == 0 && rf__fault()) {
		rf__err(RF_EBACKEND, "hwloc_topology_init: injected fault");
	} else if (rf__topo_refs == 0 && hwloc_topology_init(&rf__topo) != 0) {
		rf__err(RF_EBACKEND, "hwloc_topology_init: %s", strerror(errno));
	} else if (rf__topo_refs == 0 && hwloc_topology_load(rf__topo) != 0) {
		int e = errno;
		hwloc_topology_destroy(rf__topo);
		rf__topo = NULL;
		rf__err(RF_EBACKEND, "hwloc_topology_load: %s", strerror(e));
	} else {
		rf__topo_refs++;
		t = rf__topo;
	}
	pthread_mutex_unlock(&rf__topo_mu);
	return t;
}

void rf__topo_release(hwloc_topology_t topo)
{
	if (topo == NULL)
		return;
	pthread_mutex_lock(&rf__topo_mu);
	if (--rf__topo_refs == 0) {
		hwloc_topology_destroy(rf__topo);
		rf__topo = NULL;
	}
	pthread_mutex_unlock(&rf__topo_mu);
}
