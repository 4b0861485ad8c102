# Asks an installed ringfetchConfigVersion.cmake what find_package would ask it, as find_package does.
# usage: cmake -DFILE=.../ringfetchConfigVersion.cmake -DWANT=1.0 -P version_check.cmake
# Prints "compatible" or "incompatible".
set(PACKAGE_FIND_NAME ringfetch)
set(PACKAGE_FIND_VERSION ${WANT})
string(REPLACE "." ";" _parts "${WANT}.0.0")
list(GET _parts 0 PACKAGE_FIND_VERSION_MAJOR)
list(GET _parts 1 PACKAGE_FIND_VERSION_MINOR)
list(GET _parts 2 PACKAGE_FIND_VERSION_PATCH)
include(${FILE})
if(PACKAGE_VERSION_COMPATIBLE AND NOT PACKAGE_VERSION_UNSUITABLE)
  message("compatible")
else()
  message("incompatible")
endif()
