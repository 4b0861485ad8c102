/* tests/test_fork.c — a pipeline inherited by a child of fork(): run and destroy return in the child
 * (threads: RF_EBACKEND, its workers live in the parent only; cpu: it simply works), never hang, and
 * the parent's pipeline is untouched. */
#include "ringfetch.h"

#include <criterion/criterion.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

static int noop(void *user, const rf_block *b)
{
	(void)user;
	(void)b;
	return 0;
}

static int run4(rf_pipeline *p)
{
	static unsigned char data[4][64];
	const void *srcs[4] = {data[0], data[1], data[2], data[3]};
	size_t sizes[4] = {64, 64, 64, 64};
	return rf_pipeline_run(p, 4, srcs, sizes, noop, NULL);
}

/* Forks; the child runs and destroys p and exits with 0 if run returned `want` (a watchdog kills a hang). */
static void check_child(rf_pipeline *p, int want)
{
	pid_t pid = fork();
	cr_assert_neq(pid, -1);
	if (pid == 0) {
		alarm(20);
		int rc = run4(p);
		rf_pipeline_destroy(p);
		_exit(rc == want ? 0 : 10 + (-rc));
	}
	int st = 0;
	cr_assert_eq(waitpid(pid, &st, 0), pid);
	cr_assert(!WIFSIGNALED(st), "the child was killed by signal %d (SIGALRM: it hung)", WTERMSIG(st));
	cr_assert_eq(WEXITSTATUS(st), 0, "the child's run returned %d, not %s", -(WEXITSTATUS(st) - 10),
		     rf_err_name(want));
}

static void fork_case(const char *backend, unsigned kq, int want)
{
	rf_pipeline_params pp = {0};
	pp.depth = 4;
	pp.slot_bytes = 64;
	pp.backend = backend;
	pp.copy_queues = kq;
	rf_pipeline *p = NULL;
	cr_assert_eq(rf_pipeline_create(&pp, &p), RF_OK, "%s", rf_errmsg());
	cr_assert_eq(run4(p), RF_OK);
	check_child(p, want);
	cr_assert_eq(run4(p), RF_OK, "the parent's pipeline still runs: %s", rf_errmsg());
	rf_pipeline_destroy(p);
}

Test(fork, threads_pipeline_in_a_child_fails_instead_of_hanging)
{
	fork_case("threads", 1, RF_EBACKEND);
	fork_case("threads", 3, RF_EBACKEND);
}

Test(fork, cpu_pipeline_in_a_child_still_runs)
{
	fork_case("cpu", 1, RF_OK);
}
