# Staging memory (memory/staging.c): white-box, so it links the static library (rf__ internals, the
# fault-injection hook). Included from tests/CMakeLists.txt.
rf_test(test_staging SOURCES test_staging.c)
rf_add_ctest(staging test_staging)

# Growth over 48 create/destroy and alloc/free cycles at 1 .. 65 MiB (RSS from /proc/self/statm), and the
# memory budget as a cap on what a ring maps. Heavy on page faults: a few seconds per size.
rf_test(test_staging_leak SOURCES test_staging_leak.c)
rf_add_ctest(staging_leak test_staging_leak)

# hwloc topologies that are not "this system" (HWLOC_XMLFILE, HWLOC_THISSYSTEM=0, HWLOC_SYNTHETIC).
rf_test(test_staging_topology SOURCES test_staging_topology.c)
rf_add_ctest(staging_topology test_staging_topology)
