/* runtime/backend.c — the backend registry and the wrappers the core calls backends through. */
#include "runtime/backend.h"
#include "base/alloc.h"
#include "base/error.h"

#include <assert.h>
#include <stdio.h>
#include <string.h>

/* Built-ins in order of preference for "auto" (the best usable one wins). */
static const rf__backend_ops *const rf__builtin[] = {
#ifdef RF_HAVE_CUDA
	&rf__backend_cuda,
#endif
	&rf__backend_threads, &rf__backend_cpu};
#define RF__NBUILTIN (sizeof rf__builtin / sizeof rf__builtin[0])

#ifdef RF_TESTING
rf__test_hooks_t rf__test_hooks;
static const rf__backend_ops *rf__extra[8];
static unsigned rf__nextra;

int rf__backend_register(const rf__backend_ops *ops)
{
	if (ops == NULL || ops->abi != RF__BACKEND_ABI)
		return rf__err(RF_EINVAL, "backend register: NULL ops or ABI mismatch");
	if (rf__nextra == sizeof rf__extra / sizeof rf__extra[0])
		return rf__err(RF_ENOMEM, "backend register: table full");
	rf__extra[rf__nextra++] = ops;
	return RF_OK;
}
#endif

static const rf__backend_ops *rf__find(const char *name)
{
	for (unsigned i = 0; i < RF__NBUILTIN; i++)
		if (strcmp(rf__builtin[i]->name, name) == 0)
			return rf__builtin[i];
#ifdef RF_TESTING
	for (unsigned i = 0; i < rf__nextra; i++)
		if (strcmp(rf__extra[i]->name, name) == 0)
			return rf__extra[i];
#endif
	return NULL;
}

static int rf__probe(const rf__backend_ops *be, int device)
{
	return be->probe == NULL ? RF_OK : be->probe(device);
}

int rf__backend_lookup(const char *name, int device, const rf__backend_ops **out)
{
	if (strcmp(name, "auto") == 0) {
		for (unsigned i = 0; i < RF__NBUILTIN; i++)
			if (rf__probe(rf__builtin[i], device) == RF_OK) {
				*out = rf__builtin[i];
				return RF_OK;
			}
		return rf__err(RF_ENODEV, "backend \"auto\": no usable backend");
	}
	const rf__backend_ops *be = rf__find(name);
	if (be == NULL) {
		if (strcmp(name, "cuda") == 0)
			return rf__err(RF_ENODEV, "backend \"%s\" is not built into this library", name);
		return rf__err(RF_ENODEV, "unknown backend \"%s\" (known: cpu, threads, cuda, auto)", name);
	}
	int rc = rf__probe(be, device);
	if (rc != RF_OK)
		return rc;
	*out = be;
	return RF_OK;
}

/* RF_MEMORY_HOST or _DEVICE as rf__backend_is_device tells; -1 for "auto" and unknown names. */
static int rf__backend_kind(const char *name)
{
	if (strcmp(name, "cpu") == 0 || strcmp(name, "threads") == 0)
		return RF_MEMORY_HOST;
	if (strcmp(name, "cuda") == 0)
		return RF_MEMORY_DEVICE;
	const rf__backend_ops *be = rf__find(name);
	if (be == NULL)
		return -1;
	return (be->caps & RF__CAP_DEVICE) ? RF_MEMORY_DEVICE : RF_MEMORY_HOST;
}

static const char *rf__memory_name(int memory)
{
	return memory == RF_MEMORY_DEVICE ? "RF_MEMORY_DEVICE" : "RF_MEMORY_HOST";
}

int rf__backend_for_memory(const char *who, const char *name, const char *from, int memory, const char **out)
{
	if (memory != RF_MEMORY_HOST && memory != RF_MEMORY_DEVICE)
		return rf__err(RF_EINVAL, "%s: memory %d is neither RF_MEMORY_HOST (0) nor RF_MEMORY_DEVICE (1)", who,
			       memory);
	if (strcmp(name, "auto") == 0) {
		if (memory == RF_MEMORY_DEVICE) {
			*out = "cuda"; /* the only device backend: no usable GPU is its probe's RF_ENODEV */
			return RF_OK;
		}
		/* The best usable host backend: "auto" never hands device pointers to a host compute. */
		for (unsigned i = 0; i < RF__NBUILTIN; i++)
			if (!(rf__builtin[i]->caps & RF__CAP_DEVICE) &&
			    rf__probe(rf__builtin[i], -1) == RF_OK) {
				*out = rf__builtin[i]->name;
				return RF_OK;
			}
		return rf__err(RF_ENODEV, "%s: backend \"auto\": no usable host backend", who);
	}
	int kind = rf__backend_kind(name);
	if (kind >= 0 && kind != memory) {
		const char *need = rf__memory_name(kind);
		if (from == NULL)
			return rf__err(RF_EINVAL, "%s: backend \"%s\" needs params.memory = %s (memory is %s)", who, name,
				       need, rf__memory_name(memory));
		return rf__err(RF_ECONFIG,
			       "%s: %s sets backend \"%s\", which needs memory = %s, but this caller computes on %s "
			       "(params.memory = %s)",
			       who, from, name, need, memory == RF_MEMORY_DEVICE ? "device memory" : "host memory",
			       rf__memory_name(memory));
	}
	*out = name;
	return RF_OK;
}

bool rf__backend_is_device(const char *name)
{
	return rf__backend_kind(name) == RF_MEMORY_DEVICE;
}

/* Every wrapper that can fail is a fault-injection point (base/alloc.h), asserts its arguments. */
static int rf__backend_fault(const rf__backend_ops *be, const char *call)
{
	return rf__err(RF_EBACKEND, "backend %s: %s: injected fault", be->name, call);
}

int rf__backend_open(const rf__backend_ops *be, const rf__open_args *args, void **ctx)
{
	assert(args->nqueues >= 1 && args->nqueues <= RF_MAX_QUEUES);
	if (rf__fault())
		return rf__backend_fault(be, "open");
	if (args->klanes != NULL) /* unless the backend says more */
		*args->klanes = 1;
	return be->open(args, ctx);
}

void rf__backend_close(const rf__backend_ops *be, void *ctx)
{
	if (be->close != NULL)
		be->close(ctx);
}

int rf__backend_slots_alloc(const rf__backend_ops *be, void *ctx, size_t bytes, void **mem)
{
	assert(bytes > 0);
	if (rf__fault())
		return rf__backend_fault(be, "slots_alloc");
	return be->slots_alloc(ctx, bytes, mem);
}

void rf__backend_slots_free(const rf__backend_ops *be, void *ctx, void *mem, size_t bytes)
{
	if (mem != NULL)
		be->slots_free(ctx, mem, bytes);
}

int rf__backend_run(const rf__backend_ops *be, void *ctx, rf__run *run)
{
	assert(run->prog != NULL && run->slots != NULL);
	if (rf__fault())
		return rf__backend_fault(be, "run");
	return be->run(ctx, run);
}

void rf__backend_describe(const rf__backend_ops *be, void *ctx, char *buf, size_t cap)
{
	if (be->describe != NULL)
		be->describe(ctx, buf, cap);
	else
		snprintf(buf, cap, "%s", be->name);
}

/* ---- keyed use ---------------------------------------------------------------------------------- */

int rf__backend_kissue(const rf__backend_ops *be, void *ctx, rf__kcopy *req, rf__kticket *out)
{
	assert(req->bytes > 0 && req->src.p != NULL);
	if (rf__fault())
		return rf__backend_fault(be, "keyed copy");
	req->op = RF__KOP_COPY;
	return be->post(ctx, req, out);
}

int rf__backend_krelease_device(const rf__backend_ops *be, void *ctx, unsigned slot, void *stream)
{
	if (rf__fault())
		return rf__backend_fault(be, "keyed release");
	return be->post(ctx, &(rf__kcopy){.op = RF__KOP_RELEASE, .slot = slot, .stream = stream}, NULL);
}

