/* backends/threads_handoff.c — whether the threads backend demotes copied blocks to the shared cache
 * (CLDEMOTE). A synthetic probe at create measured something other than what the pipeline does (a
 * copy and one read on an idle machine, not the ring's copies and computes): it is off unless the
 * configuration forces it, and the decision rule (rf__ho_decide) is a pure function of samples taken
 * by alternating on the pipeline's own runs. */
#include "backends/threads_handoff.h"

#include <stdio.h>
#include <string.h>

#if defined(__x86_64__)
#include <cpuid.h>
#endif

#define RF__HO_CLASSES 48
#define RF__HO_MAX_BYTES ((size_t)8 << 20) /* blocks above this are measured at this size */

int rf__ho_cpu_has_cldemote(void)
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

static void rf__ho_sort(int64_t *v, unsigned n)
{
	for (unsigned i = 1; i < n; i++)
		for (unsigned k = i; k > 0 && v[k - 1] > v[k]; k--) {
			int64_t x = v[k];
			v[k] = v[k - 1];
			v[k - 1] = x;
		}
}

static int64_t rf__ho_median(const int64_t *v, unsigned n)
{
	int64_t s[16];
	n = n > 16 ? 16 : n;
	memcpy(s, v, n * sizeof *s);
	rf__ho_sort(s, n);
	return n % 2 ? s[n / 2] : (s[n / 2 - 1] + s[n / 2]) / 2;
}

int rf__ho_decide(const int64_t *on, const int64_t *off, unsigned n)
{
	if (n == 0)
		return 0;
	int64_t mon = rf__ho_median(on, n), moff = rf__ho_median(off, n);
	return mon * 100 < moff * 97;
}

/* ---- the measurement ------------------------------------------------------------------------------ */

void rf__ho_pipeline(int mode, unsigned nq, unsigned nslots, int *on, char *why, size_t cap)
{
	*on = 0;
	if (nq < 2 || nslots < 2) {
		snprintf(why, cap, "cache handoff off (%s)", nq < 2 ? "no copy queue" : "depth 1");
		return;
	}
	if (mode != RF__HO_AUTO) {
		*on = mode == RF__HO_ON;
		snprintf(why, cap, "cache handoff %s (forced by configuration)", *on ? "on" : "off");
		return;
	}
	snprintf(why, cap, "cache handoff off (auto%s)", rf__ho_cpu_has_cldemote() ? "" : ": this CPU has no cldemote");
}
