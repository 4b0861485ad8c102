/* base/align.c — rounding up to an alignment (see align.h). */
#include "base/align.h"

#include <stdint.h>

size_t rf__align_up(size_t n, size_t align)
{
	if (n > SIZE_MAX - (align - 1))
		return 0;
	return (n + align - 1) & ~(align - 1);
}

size_t rf__slot_stride(size_t slot_bytes, size_t align)
{
	return slot_bytes == 0 ? 0 : rf__align_up(slot_bytes, align);
}
