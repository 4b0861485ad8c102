/* backends/cuda_ctx.c — beneath the cuda backend's other files, calling none: the call table, CUDA's
 * errors as the library's, the caller's context entered and left again, event pools. */
#include "backends/cuda_int.h"
#include "base/error.h"

#ifndef RF_HAVE_CUDA
const rf__cuda_api *rf__cuda = NULL; /* no toolkit: no real CUDA; tests may still install a double */
#endif

int rf__cuda_fail(const rf__cuda_api *api, const char *call, int err)
{
	(void)api->get_last_error(); /* the error this call left must not reach the application's next check */
	return rf__err(RF_EBACKEND, "cuda: %s failed: %s (%s)", call, api->error_string(err), api->error_name(err));
}

/* An embedder may drive several GPUs from one thread, or none from this one: a thread without a
 * context must not be left with one, least of all device 0's. device < 0: the current one, else 0. */
int rf__cuda_enter(const rf__cuda_api *api, int device, rf__cuda_saved *saved)
{
	*saved = (rf__cuda_saved){NULL, 0, 0, 0};
	saved->valid = rf__cuda_clear(api, api->ctx_get(&saved->ctx)) == 0;
	int cur = -1;
	if (saved->valid && saved->ctx != NULL && rf__cuda_clear(api, api->get_device(&cur)) != 0)
		cur = -1;
	if (device < 0)
		device = cur < 0 ? 0 : cur;
	if (cur != device)
		RF__CUDA_TRY(api, "cudaSetDevice", api->set_device(device));
	return RF_OK;
}

void rf__cuda_leave(const rf__cuda_api *api, const rf__cuda_saved *saved)
{
	if (saved->moded)
		rf__cuda_clear(api, api->capture_mode_restore(saved->mode));
	if (saved->valid)
		rf__cuda_clear(api, api->ctx_set(saved->ctx));
}

int rf__cuda_events_make(const rf__cuda_api *api, void **ev, size_t n, const char *call)
{
	for (size_t i = 0; i < n; i++)
		RF__CUDA_TRY(api, call, api->event_create(&ev[i]));
	return RF_OK;
}

void rf__cuda_events_free(const rf__cuda_api *api, void **ev, size_t n)
{
	for (size_t i = 0; ev != NULL && i < n; i++)
		if (ev[i] != NULL)
			rf__cuda_clear(api, api->event_destroy(ev[i]));
}

void *rf__cuda_event_for(rf__cuda_queue *w, int64_t v)
{
	/* Newest to oldest while still >= v; a record made meanwhile only puts a later one in. */
	uint64_t n = atomic_load_explicit(&w->nrec, memory_order_acquire), i = n - 1;
	uint64_t oldest = n > w->nev ? n - w->nev : 0;
	while (i > oldest && atomic_load_explicit(&w->ev_val[(i - 1) % w->nev], memory_order_relaxed) >= v)
		i--;
	return w->ev[i % w->nev];
}
