# Warning flags for the project's own code (an interface target, linked PRIVATE-ly by what we build).
add_library(rf_warnings INTERFACE)
target_compile_options(rf_warnings INTERFACE -Wall -Wextra -Wshadow -Wstrict-prototypes
  -Wmissing-prototypes -Wpointer-arith -Wvla -Wformat=2)
if(RINGFETCH_WERROR)
  target_compile_options(rf_warnings INTERFACE -Werror)
endif()
