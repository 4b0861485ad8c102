/* tests/test_slots.c — every slot starts on a 64-byte boundary on the CPU backends, whatever slot_bytes
 * is (odd sizes included): slots are slot_bytes rounded up apart, so vector loads and DMA see aligned
 * data and no two slots share a cache line. */
#include "ringfetch.h"

#include <criterion/criterion.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static const char *backend(void)
{
	const char *b = getenv("RF_TEST_BACKEND");
	return b && *b ? b : "cpu";
}

typedef struct seen {
	const unsigned char *slot[16];
	size_t slot_bytes;
	const unsigned char *src;
	int bad;
	char why[200];
} seen;

static int check(void *user, const rf_block *b)
{
	seen *s = user;
	if ((uintptr_t)b->data % 64 != 0 && !s->bad++)
		snprintf(s->why, sizeof s->why, "block %zu: slot %u at %p is not 64-byte aligned", b->index, b->slot, b->data);
	if (s->slot[b->slot] == NULL)
		s->slot[b->slot] = b->data;
	if (s->slot[b->slot] != b->data && !s->bad++)
		snprintf(s->why, sizeof s->why, "slot %u moved", b->slot);
	if (memcmp(b->data, s->src + b->index, b->bytes) != 0 && !s->bad++)
		snprintf(s->why, sizeof s->why, "block %zu: wrong bytes", b->index);
	return 0;
}

Test(slots, every_slot_is_64_byte_aligned_for_odd_sizes)
{
	static const size_t sizes_to_try[] = {1, 3, 7, 63, 65, 100, 129, 4095, 4097};
	static unsigned char data[4097 + 64];
	for (size_t i = 0; i < sizeof data; i++)
		data[i] = (unsigned char)(i * 131 + 7);
	for (size_t k = 0; k < sizeof sizes_to_try / sizeof sizes_to_try[0]; k++) {
		for (unsigned depth = 2; depth <= 5; depth += 3) {
			size_t sb = sizes_to_try[k];
			rf_pipeline_params pp = {.depth = depth, .slot_bytes = sb, .backend = backend()};
			rf_pipeline *p = NULL;
			cr_assert_eq(rf_pipeline_create(&pp, &p), RF_OK, "%s", rf_errmsg());
			enum { N = 12 };
			const void *srcs[N];
			size_t sizes[N];
			for (int i = 0; i < N; i++)
				srcs[i] = data + i, sizes[i] = sb;
			seen s = {{0}, sb, data, 0, ""};
			cr_assert_eq(rf_pipeline_run(p, N, srcs, sizes, check, &s), RF_OK, "%s", rf_errmsg());
			cr_assert_eq(s.bad, 0, "slot_bytes %zu, depth %u: %s", sb, depth, s.why);
			for (unsigned a = 0; a < depth; a++)
				for (unsigned b = a + 1; b < depth; b++) {
					size_t gap = s.slot[a] < s.slot[b] ? (size_t)(s.slot[b] - s.slot[a]) : (size_t)(s.slot[a] - s.slot[b]);
					cr_assert_geq(gap, sb, "slots %u and %u overlap", a, b);
				}
			rf_pipeline_destroy(p);
		}
	}
}

typedef struct keep {
	const void *data;
} keep;

static int keep_first(void *user, const rf_block *b)
{
	keep *k = user;
	if (b->index == 0)
		k->data = b->data;
	return 0;
}

static int count(void *user, const rf_block *b)
{
	(void)b;
	(*(int *)user)++;
	return 0;
}

/* A source inside the pipeline's own ring (a slot from an earlier run) is refused before any work:
 * copying it would race with the refill of that slot. */
Test(slots, a_source_in_the_ring_is_refused)
{
	rf_pipeline_params pp = {.depth = 3, .slot_bytes = 100, .backend = backend()};
	rf_pipeline *p = NULL;
	cr_assert_eq(rf_pipeline_create(&pp, &p), RF_OK, "%s", rf_errmsg());
	static unsigned char data[4][100];
	const void *srcs[4] = {data[0], data[1], data[2], data[3]};
	size_t sizes[4] = {100, 100, 100, 100};
	keep k = {NULL};
	cr_assert_eq(rf_pipeline_run(p, 4, srcs, sizes, keep_first, &k), RF_OK);
	int calls = 0;
	srcs[2] = (const unsigned char *)k.data + 10;
	cr_assert_eq(rf_pipeline_run(p, 4, srcs, sizes, count, &calls), RF_EINVAL);
	cr_assert_eq(calls, 0);
	cr_assert(strstr(rf_errmsg(), "block 2") != NULL, "%s", rf_errmsg());
	srcs[2] = (const unsigned char *)k.data - 99; /* ends one byte into the ring */
	cr_assert_eq(rf_pipeline_run(p, 4, srcs, sizes, count, &calls), RF_EINVAL);
	sizes[2] = 0; /* an empty block reads nothing */
	cr_assert_eq(rf_pipeline_run(p, 4, srcs, sizes, count, &calls), RF_OK, "%s", rf_errmsg());
	rf_pipeline_destroy(p);
}
