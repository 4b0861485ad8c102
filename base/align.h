/* base/align.h — the one alignment rule: slots, staging blocks and mappings round up through these. */
#ifndef RF_BASE_ALIGN_H
#define RF_BASE_ALIGN_H

#include <stddef.h>
#include <stdint.h>

/* Slot strides: a cache line on the CPU (a copy never invalidates a line its neighbour's compute reads);
 * 256 bytes on the device (vectorised loads, TMA, DMA); a page for pinned host slots. */
#define RF__ALIGN_CPU 64u
#define RF__ALIGN_DEVICE 256u
#define RF__ALIGN_PINNED 4096u

/* n rounded up to a multiple of align (a power of two): a slot stride, a mapping's length; 0 for n = 0
 * or when that does not fit in size_t. */
static inline size_t rf__align_up(size_t n, size_t align)
{
	return n > SIZE_MAX - (align - 1) ? 0 : (n + align - 1) & ~(align - 1);
}

#endif
