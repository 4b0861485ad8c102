/* memory/je.h — internal: the jemalloc calls ringfetch makes, under their plain names, served by its
 * private copy (prefix rf_je_, nothing exported: docs/staging.md). Maps these names, not JEMALLOC_MANGLE:
 * that would also map malloc/free, and ringfetch's own malloc calls must stay libc's. Against an
 * unprefixed jemalloc the link fails; cmake/FindRingfetchJemalloc.cmake checks the prefix first. */
#ifndef RF_MEMORY_JE_H
#define RF_MEMORY_JE_H

#include <jemalloc/jemalloc.h>

#define mallocx rf_je_mallocx
#define dallocx rf_je_dallocx
#define mallctl rf_je_mallctl

#endif
