/* memory/je.h — internal: the jemalloc API under its plain names, served by ringfetch's private copy
 * (prefix rf_je_, nothing exported: docs/staging.md). Maps exactly these names, not JEMALLOC_MANGLE:
 * that would also map malloc/free, and ringfetch's own malloc calls must stay libc's. Against an
 * unprefixed jemalloc the link fails; cmake/FindRingfetchJemalloc.cmake checks the prefix first. */
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
