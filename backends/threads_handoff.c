/* backends/threads_handoff.c — whether the threads backend demotes copied blocks to the shared cache
 * (CLDEMOTE). Unless forced, it is one arm of the schedules a pipeline compares on its own runs
 * (threads_sched.h): a synthetic probe measures something other than the pipeline's work. */
#include "backends/threads_handoff.h"

#include <stdio.h>
#include <string.h>

#if defined(__x86_64__)
#include <cpuid.h>
#endif

/* Whether the CPU implements CLDEMOTE (CPUID.7.0:ECX[25]); elsewhere the hint is a no-op: 0. */
static int rf__ho_cpu_has_cldemote(void)
{
#if defined(__x86_64__)
	unsigned a, b, c, d;
	if (__get_cpuid_count(7, 0, &a, &b, &c, &d) == 0)
		return 0;
	return (c >> 25) & 1;
#else
	return 0;
#endif
}

int rf__ho_pipeline(int mode, unsigned nq, unsigned nslots, int *on, char *why, size_t cap)
{
	*on = 0;
	if (nq < 2 || nslots < 2) {
		snprintf(why, cap, "cache handoff off (%s)", nq < 2 ? "no copy queue" : "depth 1");
		return 0;
	}
	if (mode != RF__HO_AUTO) {
		*on = mode == RF__HO_ON;
		snprintf(why, cap, "cache handoff %s (forced by configuration)", *on ? "on" : "off");
		return 0;
	}
	if (!rf__ho_cpu_has_cldemote()) {
		snprintf(why, cap, "cache handoff off (auto: this CPU has no cldemote)");
		return 0;
	}
	snprintf(why, cap, "cache handoff auto (compared with the lanes without it on the first runs)");
	return 1;
}
