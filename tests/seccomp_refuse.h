/* tests/seccomp_refuse.h — system calls answered with an errno by a seccomp filter, as a container's
 * profile or a flaky driver would answer them (tests/test_reader.c, tests/no_io_uring.c). Defines
 * RF_AUDIT_ARCH and refuse() only where the filter knows this architecture (x86_64, aarch64). */
#ifndef RF_TESTS_SECCOMP_REFUSE_H
#define RF_TESTS_SECCOMP_REFUSE_H

#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#if defined(__x86_64__)
#define RF_AUDIT_ARCH AUDIT_ARCH_X86_64
#elif defined(__aarch64__)
#define RF_AUDIT_ARCH AUDIT_ARCH_AARCH64
#endif

#ifdef RF_AUDIT_ARCH
/* A system call and the errno a seccomp filter answers it with. */
typedef struct refusal {
	int nr, err;
} refusal;

/* Answer each of the n (<= 4) calls with its errno, on every thread of the process (TSYNC: threads made
 * before, a pipeline's lanes, too) and in every child it makes. 0, or -1 with errno set. */
static inline int refuse(const refusal *rs, unsigned n)
{
	struct sock_filter prog[5 + 2 * 4];
	unsigned k = 0;
	prog[k++] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch));
	prog[k++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, RF_AUDIT_ARCH, 1, 0);
	prog[k++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
	prog[k++] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr));
	for (unsigned i = 0; i < n && i < 4; i++) {
		prog[k++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (unsigned)rs[i].nr, 0, 1);
		prog[k++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (unsigned)rs[i].err);
	}
	prog[k++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
	struct sock_fprog fp = {(unsigned short)k, prog};
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0)
		return -1;
	return (int)syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_TSYNC, &fp);
}
#endif

#endif
