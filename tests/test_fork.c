/* tests/test_fork.c — a pipeline inherited by a child of fork(): run and destroy return in the child
 * (threads: RF_EBACKEND, its workers live in the parent only; cpu: it simply works), never hang, and
 * the parent's pipeline is untouched. fork() while another thread opens and closes files: the child's
 * own file calls return. */
#include "ringfetch.h"

#include <criterion/criterion.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <stdlib.h>
#include <sys/resource.h>
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

/* ---- fork() while another thread opens and closes files ---------------------------------------------- */

/* fork() while another thread is inside rf_file_open or rf_file_close (the process-wide registry of
 * open files, its mutex and its seqlock): in the child, a classification (a run whose source is memory,
 * while files are open) and an open and close of a file return at once; none may block or spin. With
 * thousands of files open each open and close spends a while inside the registry (the array moves), so
 * that many of the forks land there: before the registry handled fork, the first such child hung (most
 * runs within the first few dozen forks). */
/* AddressSanitizer's allocator (GCC 12's libasan) takes no lock around fork(): a child forked while another
 * thread allocates can block in its own first malloc, a hang that is not the library's. */
#if defined(__SANITIZE_ADDRESS__)
#define RF_TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define RF_TEST_ASAN 1
#endif
#endif

static atomic_int g_churn_stop;
static const char *g_churn_path;

static void *churn(void *arg)
{
	(void)arg;
	while (!atomic_load(&g_churn_stop)) {
		rf_file *f;
		if (rf_file_open(g_churn_path, RF_FILE_BUFFERED, &f) == RF_OK)
			rf_file_close(f);
	}
	return NULL;
}

static int noop_sum(void *user, const rf_block *b)
{
	*(unsigned *)user += ((const unsigned char *)b->data)[0];
	return 0;
}

/* The child: a classification, then an open and close; 0 if all went right. SIGALRM if one hangs. */
static int fork_file_child(rf_pipeline *p, const char *path)
{
	alarm(20);
	static unsigned char mem[64] = {7};
	const void *srcs[1] = {mem};
	size_t sizes[1] = {sizeof mem};
	unsigned sum = 0;
	if (rf_pipeline_run(p, 1, srcs, sizes, noop_sum, &sum) != RF_OK || sum != 7)
		return 1;
	rf_file *f;
	if (rf_file_open(path, RF_FILE_BUFFERED, &f) != RF_OK)
		return 2;
	if (((const unsigned char *)rf_file_data(f))[0] != 'r')
		return 3;
	return rf_file_close(f) == RF_OK ? 0 : 4;
}

Test(fork, fork_while_another_thread_opens_and_closes_files, .timeout = 300)
{
#ifdef RF_TEST_ASAN
	cr_skip_test("AddressSanitizer's allocator is not fork-safe while other threads allocate");
#endif
	char path[] = "rf_fork_file_XXXXXX";
	int fd = mkstemp(path);
	cr_assert(fd >= 0);
	cr_assert_eq(write(fd, "ringfetch", 9), 9);
	close(fd);
	g_churn_path = path;
	/* One descriptor per file (RF_FILE_BUFFERED): raise the soft limit as far as the hard one allows. */
	struct rlimit rl;
	cr_assert_eq(getrlimit(RLIMIT_NOFILE, &rl), 0);
	struct rlimit old = rl;
	if (rl.rlim_max == RLIM_INFINITY || rl.rlim_max > 8192)
		rl.rlim_cur = 8192;
	else
		rl.rlim_cur = rl.rlim_max;
	cr_assert_eq(setrlimit(RLIMIT_NOFILE, &rl), 0);
	size_t nfiles = rl.rlim_cur > 4200 ? 4000 : rl.rlim_cur > 300 ? (size_t)rl.rlim_cur - 200 : 100;
	rf_file **fs = calloc(nfiles, sizeof *fs);
	cr_assert_not_null(fs);
	for (size_t i = 0; i < nfiles; i++)
		cr_assert_eq(rf_file_open(path, RF_FILE_BUFFERED, &fs[i]), RF_OK, "file %zu: %s", i, rf_errmsg());
	rf_pipeline_params pp = {0};
	pp.depth = 2;
	pp.slot_bytes = 64;
	pp.backend = "cpu";
	rf_pipeline *p = NULL;
	cr_assert_eq(rf_pipeline_create(&pp, &p), RF_OK, "%s", rf_errmsg());
	atomic_store(&g_churn_stop, 0);
	pthread_t th;
	cr_assert_eq(pthread_create(&th, NULL, churn, NULL), 0);
	int fails = 0, iter = 0;
	char why[128] = "";
	for (; iter < 200 && fails == 0; iter++) {
		pid_t pid = fork();
		cr_assert_neq(pid, -1);
		if (pid == 0)
			_exit(fork_file_child(p, path));
		int st = 0;
		cr_assert_eq(waitpid(pid, &st, 0), pid);
		if (WIFSIGNALED(st) || WEXITSTATUS(st) != 0) {
			fails++;
			snprintf(why, sizeof why, "%s %d", WIFSIGNALED(st) ? "killed by signal" : "exit code",
				 WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st));
		}
	}
	atomic_store(&g_churn_stop, 1);
	pthread_join(th, NULL);
	rf_pipeline_destroy(p);
	for (size_t i = 0; i < nfiles; i++)
		cr_assert_eq(rf_file_close(fs[i]), RF_OK);
	free(fs);
	setrlimit(RLIMIT_NOFILE, &old);
	unlink(path);
	cr_assert_eq(fails, 0, "fork %d of %zu open files: the child was %s (SIGALRM: its file call hung)", iter,
		     nfiles, why);
}
