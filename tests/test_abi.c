/*
 * tests/test_abi.c — the ABI of rf_pipeline_params is fixed within a major version (docs/api.md, "ABI
 * policy"): its size and every field's offset, pinned here at compile time (LP64, the platforms
 * ringfetch is built for) and again at run time; reserved words and flags must be zero. A change that
 * moves a field or grows the struct fails to compile: append a field by taking a reserved[] word,
 * and update this file with it. Links the shared library, public headers only.
 */
#include <ringfetch.h>

#include <criterion/criterion.h>
#include <stddef.h>
#include <limits.h>
#include <stdint.h>

#if UINTPTR_MAX == 0xFFFFFFFFFFFFFFFFu && UINT_MAX == 0xFFFFFFFFu
#define RF_ABI_LP64 1
/* The layout of this major. Offsets in bytes. */
_Static_assert(sizeof(rf_pipeline_params) == 128, "rf_pipeline_params must stay 128 bytes");
_Static_assert(offsetof(rf_pipeline_params, depth) == 0, "depth moved");
_Static_assert(offsetof(rf_pipeline_params, slot_bytes) == 8, "slot_bytes moved");
_Static_assert(offsetof(rf_pipeline_params, backend) == 16, "backend moved");
_Static_assert(offsetof(rf_pipeline_params, device) == 24, "device moved");
_Static_assert(offsetof(rf_pipeline_params, flags) == 28, "flags moved");
_Static_assert(offsetof(rf_pipeline_params, copy_queues) == 32, "copy_queues moved");
_Static_assert(offsetof(rf_pipeline_params, staging) == 40, "staging moved");
_Static_assert(offsetof(rf_pipeline_params, memory) == 48, "memory moved");
_Static_assert(offsetof(rf_pipeline_params, depth_auto) == 52, "depth_auto moved");
_Static_assert(offsetof(rf_pipeline_params, wait) == 56, "wait moved");
_Static_assert(offsetof(rf_pipeline_params, locality) == 64, "locality moved (it took reserved[0])");
_Static_assert(offsetof(rf_pipeline_params, hint_bytes) == 72, "hint_bytes moved (it took reserved[0])");
_Static_assert(offsetof(rf_pipeline_params, reserved) == 80, "reserved moved");
_Static_assert(sizeof(((rf_pipeline_params *)0)->reserved) == 6 * sizeof(uint64_t), "reserved is 6 words");
_Static_assert(sizeof(rf_memory) == sizeof(int), "rf_memory is an int-sized enum");
/* rf_stats of major 1: every queue, the file bytes, and reserved words that end it. */
_Static_assert(RF_STATS_QUEUES == 64u, "rf_stats reports 64 queues");
_Static_assert(offsetof(rf_stats, queue) == 32, "rf_stats.queue moved");
_Static_assert(offsetof(rf_stats, copy_ns) == 32 + 64 * 32, "rf_stats.copy_ns moved");
_Static_assert(offsetof(rf_stats, file_bytes) == 32 + 64 * 32 + 80, "rf_stats.file_bytes moved");
_Static_assert(sizeof(rf_stats) == 32 + 64 * 32 + 96 + 14 * 8, "rf_stats must stay this size");
/* Appended in 1.1 from its first reserved words: schedule, inline_runs, handoff_runs. */
_Static_assert(offsetof(rf_stats, schedule) == 32 + 64 * 32 + 96, "rf_stats.schedule took reserved[0]");
_Static_assert(offsetof(rf_stats, handoff_runs) == 32 + 64 * 32 + 96 + 16, "rf_stats.handoff_runs moved");
/* Appended in 1.1 from the next two: ahead_bytes, total_ahead_blocks. */
_Static_assert(offsetof(rf_stats, ahead_bytes) == 32 + 64 * 32 + 96 + 24, "rf_stats.ahead_bytes took reserved[0]");
_Static_assert(offsetof(rf_stats, total_ahead_blocks) == 32 + 64 * 32 + 96 + 32, "rf_stats.total_ahead_blocks moved");
_Static_assert(offsetof(rf_stats, reserved) == 32 + 64 * 32 + 96 + 40, "rf_stats.reserved moved");
#endif
_Static_assert(offsetof(rf_stats, reserved) + sizeof(((rf_stats *)0)->reserved) == sizeof(rf_stats),
               "rf_stats: reserved[] must be the last member");

/* The reserved words end the struct: appended fields come out of them, the size never changes. */
_Static_assert(offsetof(rf_pipeline_params, reserved) + sizeof(((rf_pipeline_params *)0)->reserved) ==
                   sizeof(rf_pipeline_params),
               "reserved[] must be the last member");
_Static_assert(RF_DEPTH_AUTO == 1u, "RF_DEPTH_AUTO is part of the ABI");
_Static_assert(RF_LOCALITY_CALLER == 0u && RF_LOCALITY_COPIER == 1u, "RF_LOCALITY_* are part of the ABI");
_Static_assert(RF_SCHEDULE_RING == 0u && RF_SCHEDULE_INLINE == 1u && RF_SCHEDULE_LOCAL == 2u,
               "RF_SCHEDULE_* are part of the ABI");

Test(abi, params_layout)
{
	cr_assert_eq(offsetof(rf_pipeline_params, reserved) + sizeof(((rf_pipeline_params *)0)->reserved),
	             sizeof(rf_pipeline_params));
#ifdef RF_ABI_LP64
	cr_assert_eq(sizeof(rf_pipeline_params), 128);
#else
	cr_skip_test("not an LP64 platform: only the relative checks apply");
#endif
}

Test(abi, version_macros_match_library)
{
	cr_assert_eq(rf_version() >> 16, (unsigned)RF_VERSION_MAJOR, "major: the SONAME's number");
	cr_assert_eq(rf_version(), (unsigned)RF_VERSION_HEX);
}

static rf_pipeline_params base(void)
{
	return (rf_pipeline_params){.depth = 2, .slot_bytes = 64, .backend = "cpu"};
}

/* Every reserved word is checked: a caller that sets a field this version does not know yet is told,
 * never silently ignored. */
Test(abi, reserved_words_must_be_zero)
{
	rf_pipeline *p = NULL;
	for (size_t i = 0; i < sizeof base().reserved / sizeof base().reserved[0]; i++) {
		rf_pipeline_params params = base();
		params.reserved[i] = 1;
		cr_assert_eq(rf_pipeline_create(&params, &p), RF_EINVAL, "reserved[%zu]", i);
		cr_assert_null(p);
	}
	rf_pipeline_params params = base();
	params.flags = 1;
	cr_assert_eq(rf_pipeline_create(&params, &p), RF_EINVAL, "flags");
	params = base();
	cr_assert_eq(rf_pipeline_create(&params, &p), RF_OK, "%s", rf_errmsg());
	rf_pipeline_destroy(p);
}
