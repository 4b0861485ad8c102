/* base/test_hooks.h — hooks for the white-box tests, as jemalloc's JET does it: the library is built
 * twice from the same sources, and only the testing object set (compiled with RF_TESTING, linked as
 * ringfetch_static) has the hooks and the test-only functions. In the shipped library RF__TEST_HOOK(x)
 * is a constant 0 / NULL of x's type, so a read of a hook — one on every copy of the hot loop — folds
 * away with the branch it guards, at every optimisation level, and references nothing. */
#ifndef RF_BASE_TEST_HOOKS_H
#define RF_BASE_TEST_HOOKS_H

#include <stddef.h>

typedef struct rf__test_hooks {
	void (*before_copy)(size_t block); /* called on the copying thread before each copy */
	int drop_war_wait;                 /* pipelines created while set lose their WAR waits */
	int drop_staging_war;              /* cuda: two-hop copies skip the pinned slot's WAR wait */
	int drop_raw_wait;                 /* cuda: computes skip their wait for the copy (RAW) */
	unsigned cuda_copy_threads;        /* cuda: non-zero fixes the host copy team's size */
	/* Staging fault injection: consulted at each allocation step ("topology", "arena", "membind",
	 * "fallback", "pin", "mallocx"); non-zero makes the step fail. For "membind" the value is the errno the
	 * binding fails with: EPERM/ENOSYS/EXDEV/EINVAL are refusals (unbound fallback), others errors. */
	int (*fail_alloc_step)(const char *step);
	/* Keyed negative control: slot choice ignores holds (a held slot may be refilled); the hazard
	 * oracle must catch it. */
	int keyed_refill_held;
	/* threads: called by a copy lane before it claims each keyed hint copy (started 0: still
	 * withdrawable) and after it claimed it, before copying (started 1). */
	void (*keyed_before_copy)(int started);
	/* threads: called with 0 by the piece copier right after it publishes a job, with 1 by a helper
	 * between claiming a piece and copying it (a stress test stalls there: helpers get pieces even
	 * under ThreadSanitizer, and a copy signalled before its helpers' pieces were done would be seen). */
	void (*piece_copy)(int where);
} rf__test_hooks_t;

/* Defined only with RF_TESTING (runtime/backend.c); tests set it before creating pipelines. */
extern rf__test_hooks_t rf__test_hooks;

#ifdef RF_TESTING
#define RF__TEST_HOOK(name) (rf__test_hooks.name)
#else
/* The unevaluated operand gives the type; the constant condition makes it 0 and references nothing. */
#define RF__TEST_HOOK(name) (0 ? rf__test_hooks.name : 0)
#endif

#endif
