/*
 * tests/quiet_or_skip.c — run a wall-clock test only on a machine quiet enough to time it.
 *
 * usage: quiet_or_skip PROGRAM [ARGS...]
 *
 * The timing suites (ctest label "timing") compare measured run times of schedules: they check that
 * the measuring loop keeps the faster arm on a machine where the arms' times mean something. Another
 * process that takes a core for itself stretches one arm and not the other, and the comparison then
 * measures the other process. So this wrapper samples /proc/stat for half a second while it sleeps
 * (every busy tick then belongs to someone else) and, when others kept more than a quarter of a core
 * busy, prints why and exits 77 — SKIPPED in ctest (SKIP_RETURN_CODE 77), never passed. Otherwise it
 * execs the test. The rules the loops apply are tested without a clock in the suites beside them.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <time.h>
#include <unistd.h>

/* Busy and total jiffies over every CPU; 0 when /proc/stat cannot be read. */
static int cpu_ticks(unsigned long long *busy, unsigned long long *total)
{
	unsigned long long v[8] = {0};
	FILE *f = fopen("/proc/stat", "r");
	if (f == NULL)
		return 0;
	int n = fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3], &v[4],
		       &v[5], &v[6], &v[7]);
	fclose(f);
	if (n < 4)
		return 0;
	/* user nice system idle iowait irq softirq steal: steal is another guest's use of our core. */
	*busy = v[0] + v[1] + v[2] + v[5] + v[6] + v[7];
	*total = *busy + v[3] + v[4];
	return 1;
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: %s PROGRAM [ARGS...]\n", argv[0]);
		return 2;
	}
	unsigned long long b0, t0, b1, t1;
	long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
	struct timespec half = {0, 500 * 1000 * 1000};
	if (ncpu > 0 && cpu_ticks(&b0, &t0) && nanosleep(&half, NULL) == 0 && cpu_ticks(&b1, &t1) && t1 > t0) {
		double others = (double)(b1 - b0) / (double)(t1 - t0) * (double)ncpu; /* in cores */
		if (others > 0.25) {
			printf("SKIP: other processes kept %.2f of %ld cores busy over 0.5 s; %s times schedules "
			       "against each other and needs a quiet machine\n", others, ncpu, argv[1]);
			return 77;
		}
	}
	execv(argv[1], argv + 1);
	perror(argv[1]);
	return 127;
}
