/* memory/topology.h — the process's one hwloc topology, loaded on first use and shared by every
 * pipeline (loading costs milliseconds: never per pipeline or per run). Reference counted: the last
 * release destroys it, so a program that destroys all its pipelines leaves nothing behind. */
#ifndef RF_MEMORY_TOPOLOGY_H
#define RF_MEMORY_TOPOLOGY_H

#include <hwloc.h>

/* The loaded topology (reference taken), or NULL with rf_errmsg set (RF_EBACKEND detail). */
hwloc_topology_t rf__topo_acquire(void);
/* Drop a reference taken by rf__topo_acquire (NULL is a no-op). */
void rf__topo_release(hwloc_topology_t topo);

#endif
