# Dependencies: hwloc and jemalloc through pkg-config, Criterion for tests, CUDA optional.
# hwloc places the threads backend's workers and binds staging memory; jemalloc serves staging memory
# from per-NUMA-node arenas (memory/staging.c, docs/staging.md).
find_package(PkgConfig REQUIRED)
find_package(Threads REQUIRED)
pkg_check_modules(HWLOC REQUIRED IMPORTED_TARGET hwloc)
# jemalloc: a private, prefixed, static copy (cmake/FindRingfetchJemalloc.cmake, RINGFETCH_JEMALLOC_ROOT),
# never the system's.
list(APPEND CMAKE_MODULE_PATH ${CMAKE_CURRENT_LIST_DIR})
find_package(RingfetchJemalloc REQUIRED)
# libinih reads the config file (RINGFETCH_CONFIG, runtime/config.c).
pkg_check_modules(INIH REQUIRED IMPORTED_TARGET inih)
if(RINGFETCH_TESTS)
  pkg_check_modules(CRITERION REQUIRED IMPORTED_TARGET criterion)
endif()
# CUDA: RINGFETCH_CUDA=AUTO (default) builds the cuda backend when the toolkit is found; ON requires
# it; OFF leaves it out.
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


# ringfetch_deps: every dependency of the library's code in one INTERFACE target (the object library,
# the shared library PRIVATE-ly and the white-box static library link it). Not installed: the shared
# library's dependencies are its own (DT_NEEDED, or static and hidden inside it).
add_library(ringfetch_deps INTERFACE)
target_link_libraries(ringfetch_deps INTERFACE PkgConfig::HWLOC rf_jemalloc PkgConfig::INIH Threads::Threads)
if(RINGFETCH_HAVE_CUDA)
  target_compile_definitions(ringfetch_deps INTERFACE RF_HAVE_CUDA=1)
  target_link_libraries(ringfetch_deps INTERFACE CUDA::cudart_static)
endif()
