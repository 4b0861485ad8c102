# Dependencies: hwloc and jemalloc through pkg-config, Criterion for tests, CUDA optional.
# hwloc places the threads backend's workers (and, with the staging layer, memory). jemalloc is required
# now so that a machine that configures today builds the staging layer tomorrow; nothing calls it yet,
# so it is not linked until then.
find_package(PkgConfig REQUIRED)
find_package(Threads REQUIRED)
pkg_check_modules(HWLOC REQUIRED IMPORTED_TARGET hwloc)
pkg_check_modules(JEMALLOC REQUIRED IMPORTED_TARGET jemalloc)
if(RINGFETCH_TESTS)
  pkg_check_modules(CRITERION REQUIRED IMPORTED_TARGET criterion)
endif()
find_package(CUDAToolkit QUIET)
set(RINGFETCH_HAVE_CUDA ${CUDAToolkit_FOUND})

