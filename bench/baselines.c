/* bench/baselines.c — the hand-written ring and StarPU, the two things ringfetch must beat. */
#include "baselines.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#ifdef RF_HAVE_STARPU
#include <starpu.h>
#endif

/* ---- the hand-written ring: what a careful engineer writes without a library ------------------- */

typedef struct hand {
	const rfb_work *w;
	unsigned depth;
	unsigned char *ring;
	_Alignas(64) atomic_size_t filled; /* blocks copied */
	_Alignas(64) atomic_size_t done;   /* blocks computed */
} hand;

/* Pure spin (pause only, never yields nor sleeps): the ring the copy-path targets compare against. Each
 * thread owns a core for the whole run, which is what a hand-written two-thread ring on a dedicated
 * machine does; on an oversubscribed machine it is slower, and that is the baseline's honest cost. */
static void spin_until(atomic_size_t *c, size_t v)
{
	while (atomic_load_explicit(c, memory_order_acquire) < v) {
#if defined(__x86_64__) || defined(__i386__)
		__builtin_ia32_pause();
#elif defined(__aarch64__)
		__asm__ __volatile__("yield");
#endif
	}
}

static void *hand_copier(void *arg)
{
	hand *h = arg;
	const rfb_work *w = h->w;
	for (size_t i = 0; i < w->n; i++) {
		if (i >= h->depth)
			spin_until(&h->done, i - h->depth + 1); /* WAR */
		memcpy(h->ring + (i % h->depth) * w->size, w->srcs[i], w->sizes[i]);
		atomic_store_explicit(&h->filled, i + 1, memory_order_release);
	}
	return NULL;
}

int rfb_hand_run(const rfb_work *w, unsigned depth, unsigned char *ring, rfb_sink *k)
{
	hand h = {w, depth, ring, 0, 0};
	pthread_t t;
	if (pthread_create(&t, NULL, hand_copier, &h) != 0)
		return -1;
	for (size_t i = 0; i < w->n; i++) {
		spin_until(&h.filled, i + 1); /* RAW */
		rf_block b = {i, (unsigned)(i % depth), ring + (i % depth) * w->size, w->sizes[i], NULL};
		rfb_compute(k, &b);
		atomic_store_explicit(&h.done, i + 1, memory_order_release);
	}
	pthread_join(t, NULL);
	return 0;
}

/* ---- StarPU ------------------------------------------------------------------------------------------ */

#ifdef RF_HAVE_STARPU
static void sp_copy(void *buffers[], void *arg)
{
	const void *src;
	size_t bytes;
	starpu_codelet_unpack_args(arg, &src, &bytes);
	memcpy((void *)STARPU_VECTOR_GET_PTR(buffers[0]), src, bytes);
}

static void sp_compute(void *buffers[], void *arg)
{
	rfb_sink *k;
	size_t index, bytes;
	starpu_codelet_unpack_args(arg, &k, &index, &bytes);
	rf_block b = {index, 0, (const void *)STARPU_VECTOR_GET_PTR(buffers[0]), bytes, NULL};
	rfb_compute(k, &b); /* in block order, one at a time: the "order" handle (see below) */
}

/* The compute task also takes an "order" handle in RW mode: computes then run one at a time in block
 * order, as rf_pipeline_run's contract (and a stateful compute, like the sink here) requires. Without
 * it StarPU would run the computes of different slots concurrently on its workers — faster, but a
 * different (and for this sink racy) pipeline. */
static struct starpu_codelet sp_copy_cl = {.cpu_funcs = {sp_copy}, .nbuffers = 1, .modes = {STARPU_W}};
static struct starpu_codelet sp_compute_cl = {.cpu_funcs = {sp_compute}, .nbuffers = 2,
					      .modes = {STARPU_R, STARPU_RW}};

int rfb_starpu_init(unsigned ncpu, char *why, size_t cap)
{
	struct starpu_conf conf;
	starpu_conf_init(&conf);
	conf.ncpus = (int)ncpu;
	conf.ncuda = 0;
	conf.nopencl = 0;
	int rc = starpu_init(&conf);
	if (rc != 0) {
		snprintf(why, cap, "starpu_init failed (%d)", rc);
		return -1;
	}
	/* StarPU's idle workers poll: keep them paused outside StarPU's own runs so that they do not
	 * steal a core from the other contestants (its runs therefore include the resume). */
	starpu_pause();
	return 0;
}

int rfb_starpu_run(const rfb_work *w, unsigned depth, unsigned char *ring, rfb_sink *k)
{
	starpu_data_handle_t h[RF_MAX_DEPTH], order;
	int token = 0;
	starpu_resume();
	starpu_variable_data_register(&order, STARPU_MAIN_RAM, (uintptr_t)&token, sizeof token);
	for (unsigned s = 0; s < depth; s++)
		starpu_vector_data_register(&h[s], STARPU_MAIN_RAM, (uintptr_t)(ring + s * w->size),
					    (uint32_t)(w->size / sizeof(float)), sizeof(float));
	int rc = 0;
	for (size_t i = 0; i < w->n && rc == 0; i++) {
		const void *src = w->srcs[i];
		size_t bytes = w->sizes[i];
		starpu_data_handle_t slot = h[i % depth];
		rc = starpu_task_insert(&sp_copy_cl, STARPU_W, slot, STARPU_VALUE, &src, sizeof src, STARPU_VALUE,
					&bytes, sizeof bytes, 0);
		if (rc == 0)
			rc = starpu_task_insert(&sp_compute_cl, STARPU_R, slot, STARPU_RW, order, STARPU_VALUE, &k, sizeof k,
						STARPU_VALUE, &i, sizeof i, STARPU_VALUE, &bytes, sizeof bytes, 0);
	}
	starpu_task_wait_for_all();
	for (unsigned s = 0; s < depth; s++)
		starpu_data_unregister(h[s]);
	starpu_data_unregister(order);
	starpu_pause();
	return rc;
}

void rfb_starpu_shutdown(void)
{
	starpu_resume();
	starpu_shutdown();
}
#else
int rfb_starpu_init(unsigned ncpu, char *why, size_t cap)
{
	(void)ncpu;
	snprintf(why, cap, "built without StarPU (Debian libstarpu-dev, pkg-config starpu-1.3)");
	return -1;
}

int rfb_starpu_run(const rfb_work *w, unsigned depth, unsigned char *ring, rfb_sink *k)
{
	(void)w, (void)depth, (void)ring, (void)k;
	return -1;
}

void rfb_starpu_shutdown(void)
{
}
#endif
