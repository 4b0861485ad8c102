# Dependencies: hwloc and jemalloc through pkg-config, Criterion for tests, CUDA optional.
# hwloc places the threads backend's workers and binds staging memory; jemalloc serves staging memory
# from per-NUMA-node arenas (memory/staging.c, docs/staging.md).
find_package(PkgConfig REQUIRED)
find_package(Threads REQUIRED)
pkg_check_modules(HWLOC REQUIRED IMPORTED_TARGET hwloc)
pkg_check_modules(JEMALLOC REQUIRED IMPORTED_TARGET jemalloc)
if(RINGFETCH_TESTS)
  pkg_check_modules(CRITERION REQUIRED IMPORTED_TARGET criterion)
endif()
# CUDA: RINGFETCH_CUDA=AUTO (default) builds the cuda backend when the toolkit is found; ON requires
# it; OFF leaves it out.
set(RINGFETCH_CUDA AUTO CACHE STRING "Build the cuda backend: AUTO, ON or OFF")
set(RINGFETCH_HAVE_CUDA OFF)
if(NOT RINGFETCH_CUDA STREQUAL "OFF")
  if(RINGFETCH_CUDA STREQUAL "ON")
    find_package(CUDAToolkit REQUIRED)
  else()
    find_package(CUDAToolkit QUIET)
  endif()
  set(RINGFETCH_HAVE_CUDA ${CUDAToolkit_FOUND})
endif()
message(STATUS "ringfetch: cuda backend ${RINGFETCH_HAVE_CUDA}")

