# FindRingfetchJemalloc.cmake — ringfetch's private jemalloc (built by cmake/jemalloc.sh).
#
# Input:  RINGFETCH_JEMALLOC_ROOT  the prefix cmake/jemalloc.sh installs into. Empty (the default): the
#                                  source tree's .cache/jemalloc when `make deps` built it there, else a
#                                  per-user cache shared by every build tree, clone and `pip install`:
#                                  $XDG_CACHE_HOME/ringfetch (else ~/.cache/ringfetch) /jemalloc-KEY, KEY
#                                  naming the script's configuration (its stamp) and the processor.
#         RINGFETCH_BUILD_JEMALLOC run cmake/jemalloc.sh at configure time when it is missing (default
#                                  ON); OFF: a missing jemalloc is a configure error.
# Output: the IMPORTED STATIC target rf_jemalloc (libjemalloc_pic.a + its headers), RingfetchJemalloc_FOUND,
#         RINGFETCH_JEMALLOC_ROOT set (in the including scope) to the prefix used.
#
# Only that prefix is searched (NO_DEFAULT_PATH): Debian's libjemalloc-dev in /usr is unprefixed and
# built with initial-exec TLS, so a library linked to it cannot be dlopen'ed (Python) and brings a
# second malloc into the process. There is deliberately no fallback to it (docs/api.md, "Embedding").
# The header must carry the rf_je_ prefix that memory/je.h maps to.
set(_rf_je_script "${CMAKE_CURRENT_LIST_DIR}/jemalloc.sh")

# A prefix is complete when the script finished there: its stamp file matches the script's.
file(STRINGS "${_rf_je_script}" _rf_je_stamp REGEX "^stamp=" LIMIT_COUNT 1)
string(REGEX REPLACE "^stamp=\"(.*)\"$" "\\1" _rf_je_stamp "${_rf_je_stamp}")
function(_rf_je_complete prefix out)
  set(_ok FALSE)
  if(EXISTS "${prefix}/lib/libjemalloc_pic.a" AND EXISTS "${prefix}/.rf-stamp")
    file(READ "${prefix}/.rf-stamp" _s)
    string(STRIP "${_s}" _s)
    if(_s STREQUAL _rf_je_stamp)
      set(_ok TRUE)
    endif()
  endif()
  set(${out} ${_ok} PARENT_SCOPE)
endfunction()

if(NOT RINGFETCH_JEMALLOC_ROOT)
  _rf_je_complete("${PROJECT_SOURCE_DIR}/.cache/jemalloc" _rf_je_in_tree)
  if(_rf_je_in_tree)
    set(RINGFETCH_JEMALLOC_ROOT "${PROJECT_SOURCE_DIR}/.cache/jemalloc")
  else()
    if(DEFINED ENV{XDG_CACHE_HOME} AND IS_ABSOLUTE "$ENV{XDG_CACHE_HOME}")
      set(_rf_je_cache "$ENV{XDG_CACHE_HOME}/ringfetch")
    elseif(DEFINED ENV{HOME} AND IS_DIRECTORY "$ENV{HOME}")
      set(_rf_je_cache "$ENV{HOME}/.cache/ringfetch")
    else()
      set(_rf_je_cache "${PROJECT_BINARY_DIR}/ringfetch-cache")
    endif()
    string(SHA1 _rf_je_key "${_rf_je_stamp} ${CMAKE_SYSTEM_PROCESSOR}")
    string(SUBSTRING "${_rf_je_key}" 0 12 _rf_je_key)
    set(RINGFETCH_JEMALLOC_ROOT "${_rf_je_cache}/jemalloc-${_rf_je_key}")
  endif()
endif()

# Build it here when it is missing: once per prefix, under a lock, so that configures running at the
# same time (two build trees, pip and cmake) wait for one build instead of racing into one directory.
_rf_je_complete("${RINGFETCH_JEMALLOC_ROOT}" _rf_je_have)
if(NOT _rf_je_have AND RINGFETCH_BUILD_JEMALLOC)
  get_filename_component(_rf_je_parent "${RINGFETCH_JEMALLOC_ROOT}" DIRECTORY)
  file(MAKE_DIRECTORY "${_rf_je_parent}")
  file(LOCK "${RINGFETCH_JEMALLOC_ROOT}.lock" GUARD PROCESS TIMEOUT 3600 RESULT_VARIABLE _rf_je_lock)
  if(NOT _rf_je_lock EQUAL 0)
    message(FATAL_ERROR "ringfetch: cannot lock ${RINGFETCH_JEMALLOC_ROOT}.lock: ${_rf_je_lock}")
  endif()
  _rf_je_complete("${RINGFETCH_JEMALLOC_ROOT}" _rf_je_have)
  if(NOT _rf_je_have)
    message(STATUS "ringfetch: building the private jemalloc into ${RINGFETCH_JEMALLOC_ROOT} "
      "(cmake/jemalloc.sh: Debian's jemalloc source package, 1-3 min, once)")
    execute_process(COMMAND bash "${_rf_je_script}" "${RINGFETCH_JEMALLOC_ROOT}" RESULT_VARIABLE _rf_je_rc)
    if(NOT _rf_je_rc EQUAL 0)
      file(LOCK "${RINGFETCH_JEMALLOC_ROOT}.lock" RELEASE)
      message(FATAL_ERROR "ringfetch: could not build the private jemalloc into ${RINGFETCH_JEMALLOC_ROOT} "
        "(cmake/jemalloc.sh exited ${_rf_je_rc}; its reason is printed above). It needs Debian's jemalloc "
        "source package (apt-get source through the system's Debian mirror) and dpkg-dev; or set "
        "RF_JEMALLOC_SRC=DIR to an unpacked jemalloc source tree, or -DRINGFETCH_JEMALLOC_ROOT=DIR to a "
        "prefix that script built.")
    endif()
  endif()
  file(LOCK "${RINGFETCH_JEMALLOC_ROOT}.lock" RELEASE)
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
    set(_rf_je_off "")
    if(NOT RINGFETCH_BUILD_JEMALLOC)
      set(_rf_je_off "RINGFETCH_BUILD_JEMALLOC is OFF, so configuring does not build it. ")
    endif()
    message(FATAL_ERROR "ringfetch: private jemalloc not found: ${_rf_je_why}.\n"
      "${_rf_je_off}Build it once (needs apt-get\n"
      "source access to Debian's jemalloc package, about 1-3 min):\n"
      "  ${_rf_je_script} ${RINGFETCH_JEMALLOC_ROOT}\n"
      "or point -DRINGFETCH_JEMALLOC_ROOT=DIR at a prefix that script built,\n"
      "or configure with -DRINGFETCH_BUILD_JEMALLOC=ON (the default) to run that script now.")
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
