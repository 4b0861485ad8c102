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
  # backends/cuda_rt.c needs CUDA 11.3 (cudaGetDriverEntryPoint, cudaMallocAsync, cudaHostRegisterReadOnly);
  # newer attributes (cudaDevAttrHostNumaId, 12.2) are guarded by CUDART_VERSION there. An older
  # toolkit: AUTO leaves the backend out, ON fails here (not halfway through the build).
  set(RINGFETCH_CUDA_MIN 11.3)
  if(RINGFETCH_HAVE_CUDA AND CUDAToolkit_VERSION VERSION_LESS RINGFETCH_CUDA_MIN)
    if(RINGFETCH_CUDA STREQUAL "ON")
      message(FATAL_ERROR "ringfetch: RINGFETCH_CUDA=ON needs CUDA >= ${RINGFETCH_CUDA_MIN}, found ${CUDAToolkit_VERSION}")
    endif()
    message(STATUS "ringfetch: CUDA ${CUDAToolkit_VERSION} is older than ${RINGFETCH_CUDA_MIN}: no cuda backend")
    set(RINGFETCH_HAVE_CUDA OFF)
  endif()
endif()
message(STATUS "ringfetch: cuda backend ${RINGFETCH_HAVE_CUDA}")

# liburing: file sources are read through io_uring (io/reader.c); without it (RINGFETCH_IO_URING=OFF, or
# AUTO and not found) with pread, one read at a time, which the reader's describe line says.
set(RINGFETCH_HAVE_LIBURING OFF)
if(NOT RINGFETCH_IO_URING STREQUAL "OFF")
  if(RINGFETCH_IO_URING STREQUAL "ON")
    pkg_check_modules(LIBURING REQUIRED IMPORTED_TARGET liburing)
  else()
    pkg_check_modules(LIBURING QUIET IMPORTED_TARGET liburing)
  endif()
  set(RINGFETCH_HAVE_LIBURING ${LIBURING_FOUND})
endif()
message(STATUS "ringfetch: io_uring file reads ${RINGFETCH_HAVE_LIBURING}")

# ringfetch_deps: every dependency of the library's code in one INTERFACE target (the object library,
# the shared library PRIVATE-ly and the white-box static library link it). Not installed: the shared
# library's dependencies are its own (DT_NEEDED, or static and hidden inside it).
add_library(ringfetch_deps INTERFACE)
target_link_libraries(ringfetch_deps INTERFACE PkgConfig::HWLOC rf_jemalloc Threads::Threads)
if(RINGFETCH_HAVE_CUDA)
  target_compile_definitions(ringfetch_deps INTERFACE RF_HAVE_CUDA=1)
  target_link_libraries(ringfetch_deps INTERFACE CUDA::cudart_static)
endif()
if(RINGFETCH_HAVE_LIBURING)
  target_compile_definitions(ringfetch_deps INTERFACE RF_HAVE_LIBURING=1)
  target_link_libraries(ringfetch_deps INTERFACE PkgConfig::LIBURING)
endif()
