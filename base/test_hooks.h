/* base/test_hooks.h — hooks for the white-box tests, only in the RF_TESTING object set. Shipped,
 * RF__TEST_HOOK(x) is a constant 0 of x's type: a hook read folds away and references nothing. */
#ifndef RF_BASE_TEST_HOOKS_H
#define RF_BASE_TEST_HOOKS_H

#include <stddef.h>
#include <stdint.h>

typedef struct rf__test_hooks {
	void (*before_copy)(size_t block); /* called on the copying thread before each copy and stage */
	int drop_war_wait;                 /* pipelines created while set lose their WAR waits */
	int drop_staging_war;              /* ... the staging slots' WAR waits (cuda's staged ring) */
	int drop_raw_wait;                 /* cuda: computes skip their wait for the copy (RAW) */
	int drop_keyed_stage_wait;         /* cuda: a staged keyed copy's H2D skips its wait for the stage */
	unsigned cuda_copy_threads;        /* cuda: non-zero fixes the staging threads (lanes + helpers) */
	/* Staging: non-zero fails that allocation step ("topology", "arena", "membind", "fallback", "pin",
	 * "mallocx"); for "membind" it is the errno (EPERM/ENOSYS/EXDEV/EINVAL: refusals, else errors). */
	int (*fail_alloc_step)(const char *step);
	int keyed_refill_held; /* slot choice ignores holds: the hazard oracle must catch it */
	int keyed_skip_waw;    /* threads: a demand copy skips its wait for the slot's previous copy */
	/* A lane, before it claims a keyed hint copy or stage (started 0) and after, before copying (1). */
	void (*keyed_before_copy)(int started);
	/* The piece copier, right after it publishes a job (0); a helper between claiming a piece and
	 * copying it (1): a stress test stalls there, so helpers get pieces even under TSan. */
	void (*piece_copy)(int where);
	/* A flight (io/flight.h) started a copy: the copies it has in flight now, that one included. */
	void (*flight_started)(unsigned in_flight);
	void (*classify)(const void *src, size_t n); /* io/file.c: each source resolved (rf__file_classify) */
	/* io/flight.c: a run's end, before its reads are judged (rf__flight_fill_depth): may replace the
	 * measured ns from the first landing to the end and of them slept for reads. */
	void (*flight_run_end)(int64_t *elapsed_ns, int64_t *waited_ns);
} rf__test_hooks_t;

/* Defined only with RF_TESTING; tests set it before creating pipelines. */
extern rf__test_hooks_t rf__test_hooks;

#ifdef RF_TESTING
#define RF__TEST_HOOK(name) (rf__test_hooks.name)
#else /* the unevaluated operand gives the type */
#define RF__TEST_HOOK(name) (0 ? rf__test_hooks.name : 0)
#endif

#endif
