/* tests/no_io_uring.c — run a command the way a container's seccomp profile runs it: io_uring_setup
 * answered EPERM (Docker's default profile refuses the io_uring calls). The filter is inherited by
 * every child, so `no_io_uring ctest ...` or `no_io_uring python -m pytest ...` runs a whole suite with
 * every reader falling back to pread at run time (not only in a build without liburing).
 *   no_io_uring COMMAND [ARG ...]
 * Exits 125 when the filter cannot be installed, 127 when COMMAND cannot be run, else COMMAND's status. */
#define _GNU_SOURCE
#include <errno.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#if defined(__x86_64__)
#define NO_URING_ARCH AUDIT_ARCH_X86_64
#elif defined(__aarch64__)
#define NO_URING_ARCH AUDIT_ARCH_AARCH64
#endif

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: no_io_uring COMMAND [ARG ...]\n");
		return 125;
	}
#ifndef NO_URING_ARCH
	fprintf(stderr, "no_io_uring: no seccomp filter for this architecture\n");
	return 125;
#else
	struct sock_filter prog[] = {
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, NO_URING_ARCH, 1, 0),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_io_uring_setup, 0, 1),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
	};
	struct sock_fprog fp = {(unsigned short)(sizeof prog / sizeof prog[0]), prog};
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 || syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &fp) != 0) {
		fprintf(stderr, "no_io_uring: seccomp: %s\n", strerror(errno));
		return 125;
	}
	execvp(argv[1], argv + 1);
	fprintf(stderr, "no_io_uring: %s: %s\n", argv[1], strerror(errno));
	return 127;
#endif
}
