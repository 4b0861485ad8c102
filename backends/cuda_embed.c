/* backends/cuda_embed.c — the embedder API behind <ringfetch/cuda.h>, CUDA-free (cuda_rt.c wraps it
 * under the public names). Every call leaves the caller's current context as it found it — "none"
 * included — and clears only CUDA errors it caused. */
#include "backends/cuda_int.h"
#include "base/error.h"

int rf__cuda_host_register(const void *p, size_t bytes)
{
	if (p == NULL || bytes == 0)
		return rf__err(RF_EINVAL, "rf_cuda_host_register: %s", p == NULL ? "p is NULL" : "bytes is 0");
	/* A registration belongs to no device (Portable) but needs a context: the current one, else
	 * device 0's, given back afterwards. */
	rf__cu_saved saved;
	int rc = rf__cu_probe(0);
	if (rc != RF_OK || (rc = rf__cu_enter(rf__cuda, -1, &saved)) != RF_OK)
		return rf__err(rc, "rf_cuda_host_register: %s", rf__errmsg_peek());
	int e = rf__cu_clear(rf__cuda, rf__cuda->host_register((void *)p, bytes));
	rf__cu_leave(rf__cuda, &saved);
	if (e != 0)
		return rf__err(RF_EBACKEND, "rf_cuda_host_register: cudaHostRegister(%p, %zu) failed: %s (%s)", p, bytes,
			       rf__cuda->error_string(e), rf__cuda->error_name(e));
	return RF_OK;
}

int rf__cuda_host_unregister(const void *p)
{
	if (p == NULL)
		return rf__err(RF_EINVAL, "rf_cuda_host_unregister: p is NULL");
	int rc = rf__cu_probe(0);
	if (rc != RF_OK)
		return rf__err(rc, "rf_cuda_host_unregister: %s", rf__errmsg_peek());
	int e = rf__cu_clear(rf__cuda, rf__cuda->host_unregister((void *)p));
	if (e != 0)
		return rf__err(RF_EINVAL, "rf_cuda_host_unregister: cudaHostUnregister(%p) failed: %s (%s)", p,
			       rf__cuda->error_string(e), rf__cuda->error_name(e));
	return RF_OK;
}

int rf__cuda_staging_alloc(size_t bytes, const char *policy, int device, void **out)
{
	if (out == NULL || bytes == 0)
		return rf__err(RF_EINVAL, "rf_cuda_staging_alloc: %s", out == NULL ? "out is NULL" : "bytes is 0");
	rf__staging_policy in, pol;
	int rc = rf__staging_parse("rf_cuda_staging_alloc", policy, &in);
	if (rc != RF_OK)
		return rc;
	/* The registration belongs to the current device's context: make it `device`'s, and create that
	 * context now — not inside the arena's extent hook, which runs under jemalloc's locks. */
	int node;
	rf__cu_saved saved;
	if ((rc = rf__cu_probe(device)) != RF_OK || (rc = rf__cu_enter(rf__cuda, device, &saved)) != RF_OK)
		return rf__err(rc, "rf_cuda_staging_alloc: %s", rf__errmsg_peek());
	int e = rf__cuda->init_context();
	if (e != 0) {
		rf__cu_fail(rf__cuda, "cudaFree(0) (context creation)", e);
		rf__cu_leave(rf__cuda, &saved);
		return rf__err(RF_ENODEV, "rf_cuda_staging_alloc: %s", rf__errmsg_peek());
	}
	rf__cu_policy(rf__cuda, device, &in, &pol, &node);
	rc = rf__staging_alloc(&pol, bytes, rf__staging_align_for(bytes), out);
	rf__cu_leave(rf__cuda, &saved);
	if (rc != RF_OK)
		return rf__err(rc, "rf_cuda_staging_alloc: %s", rf__errmsg_peek());
	return RF_OK;
}
