/* tests/race_control.c — races on the control surface of a pipeline (cancel, stats, describe, traces),
 * as a plain program so that it also runs under ThreadSanitizer (Criterion cannot).
 *
 * usage: test_race_control --check NAME [--backend B] [--iterations N] [--seed S]
 *   lost-cancel     two threads run one pipeline at once; every run that starts cancels itself at
 *                   block 0. A run that then computes block 1 lost its cancel (to the other thread's
 *                   rf_pipeline_run returning RF_EBUSY).
 *   pending-cancel  a "request timeout" thread cancels at random moments, between runs as often as
 *                   during them, one cancel at a time; each must be consumed by exactly one run
 *                   returning RF_ECANCELED (none lost, none counted twice).
 *   stats-poll      a monitoring thread reads rf_pipeline_stats and rf_pipeline_describe without pause
 *                   while a depth = auto pipeline runs (and rewrites its describe line): every poll
 *                   succeeds, totals only grow, and each snapshot is consistent.
 * Output ends with the plain line "N passed, N failed"; exit status 0 only when nothing failed.
 */
#include "ringfetch.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define NBLOCKS 8

static const char *g_backend = "threads";
static unsigned long long g_iters = 2000, g_seed = 1;
static unsigned char g_src[NBLOCKS][64];
static const void *g_srcs[NBLOCKS];
static size_t g_sizes[NBLOCKS];

static unsigned long long splitmix(unsigned long long *s)
{
	unsigned long long z = (*s += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static void spin_ns(long ns)
{
	struct timespec t0, t;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	do
		clock_gettime(CLOCK_MONOTONIC, &t);
	while ((t.tv_sec - t0.tv_sec) * 1000000000L + (t.tv_nsec - t0.tv_nsec) < ns);
}

static rf_pipeline *make_pipeline(unsigned depth)
{
	rf_pipeline_params pp = {0};
	pp.depth = depth;
	pp.slot_bytes = 64;
	pp.backend = g_backend;
	rf_pipeline *p = NULL;
	int rc = rf_pipeline_create(&pp, &p);
	if (rc != RF_OK) {
		printf("create: %s: %s\n", rf_err_name(rc), rf_errmsg());
		exit(1);
	}
	return p;
}

/* ---- lost-cancel ------------------------------------------------------------------------------ */

typedef struct lc_run {
	rf_pipeline *p;
	atomic_ullong *failures;
	unsigned long long runs, busy;
} lc_run;

typedef struct lc_user {
	rf_pipeline *p;
	size_t computes;
} lc_user;

static int lc_compute(void *user, const rf_block *b)
{
	lc_user *u = user;
	u->computes++;
	if (b->index == 0) {
		rf_pipeline_cancel(u->p);
		for (int i = 0; i < 4; i++) /* widen the window in which the other thread may start a run */
			sched_yield();
	}
	return 0;
}

static void *lc_thread(void *arg)
{
	lc_run *r = arg;
	for (unsigned long long i = 0; i < g_iters; i++) {
		lc_user u = {r->p, 0};
		int rc = rf_pipeline_run(r->p, NBLOCKS, g_srcs, g_sizes, lc_compute, &u);
		if (rc == RF_EBUSY) {
			r->busy++;
			continue;
		}
		r->runs++;
		if (rc != RF_ECANCELED || u.computes != 1) {
			printf("lost-cancel: run returned %s after %zu computes (cancelled at block 0)\n", rf_err_name(rc),
			       u.computes);
			atomic_fetch_add(r->failures, 1);
		}
	}
	return NULL;
}

static int check_lost_cancel(void)
{
	rf_pipeline *p = make_pipeline(2);
	atomic_ullong failures = 0;
	enum { NT = 4 }; /* more threads than this machine's cores: preemption inside rf_pipeline_run */
	lc_run r[NT];
	pthread_t t[NT];
	unsigned long long runs = 0, busy = 0;
	for (int i = 0; i < NT; i++) {
		r[i] = (lc_run){p, &failures, 0, 0};
		pthread_create(&t[i], NULL, lc_thread, &r[i]);
	}
	for (int i = 0; i < NT; i++) {
		pthread_join(t[i], NULL);
		runs += r[i].runs;
		busy += r[i].busy;
	}
	rf_pipeline_destroy(p);
	printf("lost-cancel: %llu runs, %llu RF_EBUSY, %llu lost\n", runs, busy, (unsigned long long)failures);
	return failures != 0;
}

/* ---- pending-cancel --------------------------------------------------------------------------- */

typedef struct pc_state {
	rf_pipeline *p;
	atomic_ullong consumed; /* RF_ECANCELED results seen by the serving loop */
	atomic_int stop;
	unsigned long long issued, lost;
} pc_state;

static int pc_compute(void *user, const rf_block *b)
{
	(void)user;
	(void)b;
	spin_ns(2000);
	return 0;
}

/* The request timer: one cancel at a time, at a random moment, then wait (bounded) for its run. */
static void *pc_timer(void *arg)
{
	pc_state *s = arg;
	unsigned long long rng = g_seed;
	for (unsigned long long i = 0; i < g_iters; i++) {
		spin_ns((long)(splitmix(&rng) % 60000));
		unsigned long long before = atomic_load(&s->consumed);
		rf_pipeline_cancel(s->p);
		s->issued++;
		struct timespec t0, t;
		clock_gettime(CLOCK_MONOTONIC, &t0);
		while (atomic_load(&s->consumed) == before) {
			clock_gettime(CLOCK_MONOTONIC, &t);
			if (t.tv_sec - t0.tv_sec > 5) { /* runs keep going: this cancel was lost */
				printf("pending-cancel: cancel %llu was never consumed\n", i);
				s->lost++;
				break;
			}
			sched_yield();
		}
		if (atomic_load(&s->consumed) > before + 1) {
			printf("pending-cancel: one cancel was consumed by %llu runs\n", atomic_load(&s->consumed) - before);
			s->lost++;
		}
		if (s->lost)
			break;
	}
	atomic_store(&s->stop, 1);
	return NULL;
}

static int check_pending_cancel(void)
{
	pc_state s = {make_pipeline(2), 0, 0, 0, 0};
	pthread_t t;
	pthread_create(&t, NULL, pc_timer, &s);
	unsigned long long runs = 0;
	int bad = 0;
	while (!atomic_load(&s.stop)) {
		size_t n = 1 + (size_t)(runs % NBLOCKS);
		int rc = rf_pipeline_run(s.p, n, g_srcs, g_sizes, pc_compute, NULL);
		runs++;
		if (rc == RF_ECANCELED)
			atomic_fetch_add(&s.consumed, 1);
		else if (rc != RF_OK && !bad++)
			printf("pending-cancel: run returned %s: %s\n", rf_err_name(rc), rf_errmsg());
	}
	pthread_join(t, NULL);
	rf_pipeline_destroy(s.p);
	printf("pending-cancel: %llu runs, %llu cancels, %llu consumed, %llu lost\n", runs, s.issued,
	       (unsigned long long)atomic_load(&s.consumed), s.lost);
	return s.lost != 0 || bad;
}

/* ---- stats-poll ------------------------------------------------------------------------------- */

typedef struct sp_state {
	rf_pipeline *p;
	atomic_int stop;
	unsigned long long polls, refused, bad;
} sp_state;

static void *sp_poller(void *arg)
{
	sp_state *s = arg;
	uint64_t last_runs = 0;
	while (!atomic_load(&s->stop)) {
		rf_stats st;
		int rc = rf_pipeline_stats(s->p, &st);
		const char *d = rf_pipeline_describe(s->p);
		s->polls++;
		if (rc != RF_OK) {
			s->refused++;
			continue;
		}
		if (strlen(d) == 0 || st.runs < last_runs || st.total_blocks < st.runs || st.blocks > NBLOCKS ||
		    (st.runs > 0 && st.blocks == 0)) {
			if (!s->bad++)
				printf("stats-poll: inconsistent snapshot: runs %llu (before %llu), blocks %zu, total %llu\n",
				       (unsigned long long)st.runs, (unsigned long long)last_runs, st.blocks,
				       (unsigned long long)st.total_blocks);
		}
		last_runs = st.runs;
	}
	return NULL;
}

static int sp_compute(void *user, const rf_block *b)
{
	(void)user;
	(void)b;
	return 0;
}

static int check_stats_poll(void)
{
	rf_pipeline_params pp = {0};
	pp.depth = 0;
	pp.depth_auto = RF_DEPTH_AUTO;
	pp.slot_bytes = 64;
	pp.backend = g_backend;
	sp_state s = {NULL, 0, 0, 0, 0};
	int rc = rf_pipeline_create(&pp, &s.p);
	if (rc != RF_OK) {
		printf("create: %s: %s\n", rf_err_name(rc), rf_errmsg());
		return 1;
	}
	rf_pipeline_collect_stats(s.p, 1);
	pthread_t t;
	pthread_create(&t, NULL, sp_poller, &s);
	unsigned long long blocks = 0;
	for (unsigned long long i = 0; i < g_iters; i++) {
		size_t n = 1 + (size_t)(i % NBLOCKS);
		rf_pipeline_run(s.p, n, g_srcs, g_sizes, sp_compute, NULL);
		blocks += n;
	}
	atomic_store(&s.stop, 1);
	pthread_join(t, NULL);
	rf_stats st;
	rf_pipeline_stats(s.p, &st);
	int wrong = st.runs != g_iters || st.total_blocks != blocks || st.timed_runs != g_iters;
	if (wrong)
		printf("stats-poll: totals %llu runs, %llu blocks; expected %llu, %llu\n", (unsigned long long)st.runs,
		       (unsigned long long)st.total_blocks, g_iters, blocks);
	printf("stats-poll: %llu polls, %llu refused, %llu inconsistent; describe: %s\n", s.polls, s.refused, s.bad,
	       rf_pipeline_describe(s.p));
	rf_pipeline_destroy(s.p);
	return wrong || s.refused != 0 || s.bad != 0;
}

int main(int argc, char **argv)
{
	const char *check = NULL;
	for (int i = 1; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "--check"))
			check = argv[i + 1];
		else if (!strcmp(argv[i], "--backend"))
			g_backend = argv[i + 1];
		else if (!strcmp(argv[i], "--iterations"))
			g_iters = strtoull(argv[i + 1], NULL, 0);
		else if (!strcmp(argv[i], "--seed"))
			g_seed = strtoull(argv[i + 1], NULL, 0);
	}
	for (int b = 0; b < NBLOCKS; b++) {
		memset(g_src[b], b, sizeof g_src[b]);
		g_srcs[b] = g_src[b];
		g_sizes[b] = sizeof g_src[b];
	}
	int failed;
	if (check && !strcmp(check, "lost-cancel"))
		failed = check_lost_cancel();
	else if (check && !strcmp(check, "pending-cancel"))
		failed = check_pending_cancel();
	else if (check && !strcmp(check, "stats-poll"))
		failed = check_stats_poll();
	else {
		fprintf(stderr, "usage: %s --check lost-cancel|pending-cancel|stats-poll [--backend B] [--iterations N] [--seed S]\n",
			argv[0]);
		return 2;
	}
	printf("%d passed, %d failed\n", !failed, failed);
	return failed;
}
