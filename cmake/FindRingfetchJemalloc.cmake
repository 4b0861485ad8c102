# FindRingfetchJemalloc.cmake — ringfetch's private jemalloc (built by cmake/jemalloc.sh; `make deps`).
#
# Input:  RINGFETCH_JEMALLOC_ROOT  the prefix cmake/jemalloc.sh installed into (default: .cache/jemalloc
#                                  in ringfetch's source tree, where `make deps` puts it).
#         RINGFETCH_BUILD_JEMALLOC run cmake/jemalloc.sh at configure time when it is missing.
# Output: the IMPORTED STATIC target rf_jemalloc (libjemalloc_pic.a + its headers), RingfetchJemalloc_FOUND.
#
# Only that prefix is searched (NO_DEFAULT_PATH): Debian's libjemalloc-dev in /usr is unprefixed and
# built with initial-exec TLS, so a library linked to it cannot be dlopen'ed (Python ctypes) and
# brings a second malloc into the process. There is deliberately no fallback to it (docs/api.md,
# "Embedding"). The header must carry the rf_je_ prefix that memory/je.h maps to.
if(NOT RINGFETCH_JEMALLOC_ROOT)
  set(RINGFETCH_JEMALLOC_ROOT "${PROJECT_SOURCE_DIR}/.cache/jemalloc")
endif()

# RINGFETCH_BUILD_JEMALLOC=ON: build it here, at configure time, when it is missing (for FetchContent /
# add_subdirectory users without `make deps`; same script, same cache).
if(RINGFETCH_BUILD_JEMALLOC AND NOT EXISTS "${RINGFETCH_JEMALLOC_ROOT}/lib/libjemalloc_pic.a")
  message(STATUS "ringfetch: building the private jemalloc into ${RINGFETCH_JEMALLOC_ROOT} (cmake/jemalloc.sh)")
  execute_process(COMMAND bash "${CMAKE_CURRENT_LIST_DIR}/jemalloc.sh" "${RINGFETCH_JEMALLOC_ROOT}"
    RESULT_VARIABLE _rf_je_rc)
  if(NOT _rf_je_rc EQUAL 0)
    message(FATAL_ERROR "ringfetch: cmake/jemalloc.sh ${RINGFETCH_JEMALLOC_ROOT} failed (${_rf_je_rc})")
  endif()
endif()

find_path(RF_JEMALLOC_INCLUDE_DIR jemalloc/jemalloc.h PATHS "${RINGFETCH_JEMALLOC_ROOT}/include"
  NO_DEFAULT_PATH NO_CACHE)
find_library(RF_JEMALLOC_LIBRARY NAMES libjemalloc_pic.a PATHS "${RINGFETCH_JEMALLOC_ROOT}/lib"
  NO_DEFAULT_PATH NO_CACHE)

set(_rf_je_why "")
if(NOT RF_JEMALLOC_INCLUDE_DIR OR NOT RF_JEMALLOC_LIBRARY)
  set(_rf_je_why "no jemalloc/jemalloc.h and lib/libjemalloc_pic.a under ${RINGFETCH_JEMALLOC_ROOT}")
else()
  file(STRINGS "${RF_JEMALLOC_INCLUDE_DIR}/jemalloc/jemalloc.h" _rf_je_prefixed REGEX "define je_mallocx rf_je_mallocx")
  if(NOT _rf_je_prefixed)
    set(_rf_je_why "${RF_JEMALLOC_INCLUDE_DIR}/jemalloc/jemalloc.h is not built with --with-jemalloc-prefix=rf_je_")
  endif()
endif()

include(FindPackageHandleStandardArgs)
if(_rf_je_why)
  set(RingfetchJemalloc_FOUND FALSE)
  if(RingfetchJemalloc_FIND_REQUIRED)
    message(FATAL_ERROR "ringfetch: private jemalloc not found: ${_rf_je_why}.\n"
      "Build it once (needs apt-get source access to Debian's jemalloc package, about 1-3 min):\n"
      "  make deps                                   (as root; installs the other packages too)\n"
      "or\n"
      "  ${CMAKE_CURRENT_LIST_DIR}/jemalloc.sh ${RINGFETCH_JEMALLOC_ROOT}\n"
      "or point -DRINGFETCH_JEMALLOC_ROOT=DIR at a prefix that script built,\n"
      "or configure with -DRINGFETCH_BUILD_JEMALLOC=ON to run that script now.")
  endif()
  return()
endif()
find_package_handle_standard_args(RingfetchJemalloc REQUIRED_VARS RF_JEMALLOC_LIBRARY RF_JEMALLOC_INCLUDE_DIR)

if(NOT TARGET rf_jemalloc)
  add_library(rf_jemalloc STATIC IMPORTED)
  set_target_properties(rf_jemalloc PROPERTIES
    IMPORTED_LOCATION "${RF_JEMALLOC_LIBRARY}"
    INTERFACE_INCLUDE_DIRECTORIES "${RF_JEMALLOC_INCLUDE_DIR}")
  # What jemalloc itself calls: pthreads, libm, dlsym.
  find_package(Threads REQUIRED)
  target_link_libraries(rf_jemalloc INTERFACE Threads::Threads m ${CMAKE_DL_LIBS})
endif()
