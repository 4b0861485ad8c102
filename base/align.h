/* base/align.h — the one alignment rule of the library: where slots, staging blocks and mappings are
 * rounded up, they go through rf__align_up, with the alignment their memory needs (below). */
#ifndef RF_BASE_ALIGN_H
#define RF_BASE_ALIGN_H

#include <stddef.h>

/* What slot strides are rounded up to: a cache line on the CPU (no two slots share one, so a copy into
 * one never invalidates a line the compute of its neighbour reads); a page for pinned host slots (DMA
 * and page-locking work on pages); 256 bytes on the device (vectorised loads, TMA and DMA). */
#define RF__ALIGN_CPU 64u
#define RF__ALIGN_DEVICE 256u
#define RF__ALIGN_PINNED 4096u

/* n rounded up to a multiple of align (a power of two); 0 if that does not fit in size_t (and n > 0). */
size_t rf__align_up(size_t n, size_t align);

/* The stride of ring slots of slot_bytes each, for memory that wants `align` (RF__ALIGN_*): slot k
 * starts at k * stride. 0 if slot_bytes is 0 or the stride overflows. */
size_t rf__slot_stride(size_t slot_bytes, size_t align);

#endif
