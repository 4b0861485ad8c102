/* memory/je.h — internal: the jemalloc API under its plain names, served by ringfetch's private copy.
 *
 * ringfetch links a jemalloc of its own (cmake/jemalloc.sh, cmake/FindRingfetchJemalloc.cmake), built
 * with the symbol prefix rf_je_, no initial-exec TLS and nothing exported: it never replaces the
 * process's malloc and the library stays loadable with dlopen. Code includes this header instead of
 * <jemalloc/jemalloc.h> and keeps writing mallocx, dallocx, mallctl...: the macros below map exactly
 * those names to the prefixed functions. Not JEMALLOC_MANGLE: that would also map malloc/free, and
 * ringfetch's own malloc calls must stay libc's. The MALLOCX_* flags and extent_hooks_t carry no
 * prefix. Built against another jemalloc (unprefixed), the rf_je_ names do not
 * exist and the link fails; cmake/FindRingfetchJemalloc.cmake checks the header's prefix first. */
#ifndef RF_MEMORY_JE_H
#define RF_MEMORY_JE_H

#include <jemalloc/jemalloc.h>

#define mallocx rf_je_mallocx
#define rallocx rf_je_rallocx
#define xallocx rf_je_xallocx
#define sallocx rf_je_sallocx
#define dallocx rf_je_dallocx
#define sdallocx rf_je_sdallocx
#define nallocx rf_je_nallocx
#define mallctl rf_je_mallctl
#define mallctlnametomib rf_je_mallctlnametomib
#define mallctlbymib rf_je_mallctlbymib

#endif
