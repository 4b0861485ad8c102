/* tests/test_fork.c — a pipeline inherited by a child of fork(): run and destroy return in the child
 * (threads: RF_EBACKEND, its workers live in the parent only; cpu: it simply works), never hang, and
 * the parent's pipeline is untouched. */
#include "ringfetch.h"

#include <criterion/criterion.h>
#include <signal.h>
#include <string.h>
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

/* Keyed use across fork(): a hint in flight at fork time (a gated lane would do; a large hint queue is
 * enough to have one), a hint issued in the child, an acquire, an evict, a run after keyed use, and
 * destroy: each returns in the child (an error code is fine), nothing spins, nothing hangs. */
static unsigned char g_big[16][1 << 20];

static int keyed_child(rf_pipeline *p, int hint_in_child)
{
	int rc[5];
	rc[0] = hint_in_child ? rf_pipeline_prefetch(p, 100, g_big[15], sizeof g_big[15], 0) : RF_OK;
	rf_block b;
	rc[1] = rf_pipeline_acquire(p, 101, g_big[14], sizeof g_big[14], NULL, 0, &b);
	if (rc[1] == RF_OK)
		rf_pipeline_release(p, &b);
	rc[2] = rf_pipeline_evict(p, 3);
	rc[3] = run4(p);
	rf_keyed_stats ks;
	rc[4] = rf_pipeline_keyed_stats(p, &ks);
	rf_key_state st;
	(void)rf_pipeline_lookup(p, 3, &st, NULL);
	rf_pipeline_destroy(p);
	/* Every call returned; the threaded backend refuses work it cannot do in the child. */
	return rc[4] == RF_OK && (rc[3] == RF_EBACKEND) && (rc[0] == RF_OK || rc[0] == RF_EBACKEND) ? 0 : 1;
}

static void keyed_fork_case(int hint_in_child)
{
	rf_pipeline_params pp = {0};
	pp.depth = 8;
	pp.slot_bytes = sizeof g_big[0];
	pp.backend = "threads";
	rf_pipeline *p = NULL;
	cr_assert_eq(rf_pipeline_create(&pp, &p), RF_OK, "%s", rf_errmsg());
	for (uint64_t k = 0; k < 8; k++) /* hints queued on the lane: some still in flight at fork */
		cr_assert_eq(rf_pipeline_prefetch(p, k, g_big[k], sizeof g_big[k], 0), RF_OK, "%s", rf_errmsg());
	pid_t pid = fork();
	cr_assert_neq(pid, -1);
	if (pid == 0) {
		alarm(20);
		_exit(keyed_child(p, hint_in_child));
	}
	int st = 0;
	cr_assert_eq(waitpid(pid, &st, 0), pid);
	cr_assert(!WIFSIGNALED(st), "the child was killed by signal %d (SIGALRM: it hung)", WTERMSIG(st));
	cr_assert_eq(WEXITSTATUS(st), 0, "a keyed call in the child returned an unexpected code");
	rf_block b; /* the parent's pipeline is whole */
	cr_assert_eq(rf_pipeline_acquire(p, 3, g_big[3], sizeof g_big[3], NULL, 0, &b), RF_OK, "%s", rf_errmsg());
	cr_assert_eq(memcmp(b.data, g_big[3], sizeof g_big[3]), 0);
	cr_assert_eq(rf_pipeline_release(p, &b), RF_OK);
	rf_pipeline_destroy(p);
}

Test(fork, keyed_hints_in_flight_at_fork)
{
	for (int i = 0; i < 8; i++)
		g_big[i][i] = (unsigned char)(i + 1);
	keyed_fork_case(0);
}

Test(fork, keyed_hint_in_the_child)
{
	keyed_fork_case(1);
}
