/* tests/no_io_uring.c — run a command the way a container's seccomp profile runs it: io_uring_setup
 * answered EPERM (Docker's default profile refuses the io_uring calls). The filter is inherited by
 * every child, so `no_io_uring ctest ...` or `no_io_uring python -m pytest ...` runs a whole suite with
 * every reader falling back to pread at run time (not only in a build without liburing).
 *   no_io_uring COMMAND [ARG ...]
 * Exits 125 when the filter cannot be installed, 127 when COMMAND cannot be run, else COMMAND's status. */
#define _GNU_SOURCE
#include "seccomp_refuse.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: no_io_uring COMMAND [ARG ...]\n");
		return 125;
	}
#ifndef RF_AUDIT_ARCH
	fprintf(stderr, "no_io_uring: no seccomp filter for this architecture\n");
	return 125;
#else
	refusal r = {__NR_io_uring_setup, EPERM};
	if (refuse(&r, 1) != 0) {
		fprintf(stderr, "no_io_uring: seccomp: %s\n", strerror(errno));
		return 125;
	}
	execvp(argv[1], argv + 1);
	fprintf(stderr, "no_io_uring: %s: %s\n", argv[1], strerror(errno));
	return 127;
#endif
}
