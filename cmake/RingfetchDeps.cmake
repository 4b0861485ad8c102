# Dependencies: hwloc and jemalloc through pkg-config, Criterion for tests, CUDA optional.
# hwloc and jemalloc are required now so that a machine that configures today builds the staging layer
# tomorrow; the core (plan, graph, cpu backend) calls neither, so neither is linked until staging lands.
find_package(PkgConfig REQUIRED)
find_package(Threads REQUIRED)
pkg_check_modules(HWLOC REQUIRED IMPORTED_TARGET hwloc)
pkg_check_modules(JEMALLOC REQUIRED IMPORTED_TARGET jemalloc)
if(RINGFETCH_TESTS)
  pkg_check_modules(CRITERION REQUIRED IMPORTED_TARGET criterion)
endif()
find_package(CUDAToolkit QUIET)
set(RINGFETCH_HAVE_CUDA ${CUDAToolkit_FOUND})

