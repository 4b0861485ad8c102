/* tests/cuda_sim.c — the simulated CUDA runtime (see cuda_sim.h for the model). */
#include "cuda_sim.h"
#include "rng.h"
#include "runtime/backend.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { OP_MEMCPY, OP_RECORD, OP_WAIT, OP_HOSTFN };

typedef struct sim_event {
	int id, live;
	uint64_t enq, done; /* records enqueued / run */
} sim_event;

typedef struct sim_op {
	int kind;
	void *dst;
	const void *src;
	size_t n;
	sim_event *ev;
	uint64_t gen;
	rf__cuda_host_fn fn;
	void *arg;
} sim_op;

typedef struct sim_stream {
	int id, live, capturing;
	sim_op *ops;
	size_t head, len, cap;
} sim_stream;

typedef struct sim_range {
	uintptr_t start;
	size_t len;
	int kind; /* 'd' device, 'r' registered, 'h' host-allocated (pinned) */
	int id;
	void *owned; /* memory the simulator allocated (d, h) */
} sim_range;

static sim_config g_cfg;
static uint64_t g_rng;
static sim_stream **g_streams;
static size_t g_nstreams, g_capstreams;
static sim_event **g_events;
static size_t g_nevents, g_capevents;
static sim_range *g_ranges;
static size_t g_nranges, g_capranges;
static int g_range_ids[128]; /* per kind: d0, d1, ... and h0, h1, ... */
static char **g_log;
static size_t g_nlog, g_caplog;
static long g_calls_seen;
static int g_sticky;
static size_t g_max_pending;
/* Contexts: per thread the current one (0 none, else device + 1, as cuCtxGetCurrent would say), and
 * which devices' primary contexts exist. Any call that needs a context and finds none creates device
 * 0's and makes it current, as the runtime does. */
#define SIM_MAX_DEV 16
static _Thread_local int t_ctx;
static _Thread_local int t_last_error;
static int g_ctx_made[SIM_MAX_DEV];
static char g_ctx_token[SIM_MAX_DEV];
/* One lock over the whole simulator: the backend calls it from the walker and from its staging
 * lanes, and the device's steps run inside whichever call drives them. Recursive, since
 * entry points call each other (and host functions may call back in). */
static pthread_mutex_t g_mu;
static pthread_once_t g_mu_once = PTHREAD_ONCE_INIT;
static void mu_make(void)
{
	pthread_mutexattr_t a;
	pthread_mutexattr_init(&a);
	pthread_mutexattr_settype(&a, PTHREAD_MUTEX_RECURSIVE);
	pthread_mutex_init(&g_mu, &a);
	pthread_mutexattr_destroy(&a);
}
static void sim_lock(void)
{
	pthread_once(&g_mu_once, mu_make);
	pthread_mutex_lock(&g_mu);
}
static void sim_unlock(void)
{
	pthread_mutex_unlock(&g_mu);
}

static void need_ctx(void)
{
	if (t_ctx == 0) {
		g_ctx_made[0] = 1;
		t_ctx = 1;
	}
}

/* A failing call leaves its error for cudaGetLastError, as the runtime does. */
static int failed(int e)
{
	if (e != 0)
		t_last_error = e;
	return e;
}

void sim_set_last_error(int e)
{
	t_last_error = e;
}

int sim_last_error(void)
{
	return t_last_error;
}

int sim_current_device(void)
{
	return t_ctx - 1;
}

void sim_set_no_context(void)
{
	t_ctx = 0;
}

int sim_context_made(int dev)
{
	return dev >= 0 && dev < SIM_MAX_DEV && g_ctx_made[dev];
}

size_t sim_max_pending(void)
{
	return g_max_pending;
}

void sim_reset_max_pending(void)
{
	g_max_pending = 0;
}

static void *xrealloc(void *p, size_t n)
{
	void *q = realloc(p, n);
	if (q == NULL) {
		fprintf(stderr, "cuda_sim: out of memory\n");
		abort();
	}
	return q;
}

static uint64_t rnd(void)
{
	return rng_next(&g_rng);
}

long sim_fail_seen(void)
{
	return g_calls_seen;
}

sim_config *sim_cfg(void)
{
	return &g_cfg;
}

/* ---- log --------------------------------------------------------------------------------------- */

static void logf_(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void logf_(const char *fmt, ...)
{
	if (!g_cfg.log)
		return;
	char buf[160];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(buf, sizeof buf, fmt, ap);
	va_end(ap);
	if (g_nlog == g_caplog) {
		g_caplog = g_caplog ? 2 * g_caplog : 256;
		g_log = xrealloc(g_log, g_caplog * sizeof *g_log);
	}
	g_log[g_nlog] = xrealloc(NULL, strlen(buf) + 1);
	strcpy(g_log[g_nlog++], buf);
}

const char *const *sim_log(size_t *n)
{
	*n = g_nlog;
	return (const char *const *)g_log;
}

void sim_log_clear(void)
{
	for (size_t i = 0; i < g_nlog; i++)
		free(g_log[i]);
	g_nlog = 0;
}

void sim_log_dump(void)
{
	for (size_t i = 0; i < g_nlog; i++)
		fprintf(stderr, "  %s\n", g_log[i]);
}

/* The call named `what` fails now (the fail_nth one of its kind)? */
static int should_fail(const char *what)
{
	if (g_cfg.fail_call == NULL || strncmp(what, g_cfg.fail_call, strlen(g_cfg.fail_call)) != 0)
		return 0;
	if (++g_calls_seen != g_cfg.fail_nth)
		return 0;
	logf_("  -> injected failure of %s", what);
	return g_cfg.fail_error ? g_cfg.fail_error : 1;
}

/* ---- memory ranges ------------------------------------------------------------------------------- */

static sim_range *find_range(const void *p)
{
	uintptr_t x = (uintptr_t)p;
	for (size_t i = 0; i < g_nranges; i++)
		if (x >= g_ranges[i].start && x < g_ranges[i].start + g_ranges[i].len)
			return &g_ranges[i];
	return NULL;
}

static sim_range *add_range(void *p, size_t n, int kind, void *owned)
{
	if (g_nranges == g_capranges) {
		g_capranges = g_capranges ? 2 * g_capranges : 64;
		g_ranges = xrealloc(g_ranges, g_capranges * sizeof *g_ranges);
	}
	g_ranges[g_nranges] = (sim_range){(uintptr_t)p, n, kind, g_range_ids[kind & 127]++, owned};
	return &g_ranges[g_nranges++];
}

static void drop_range(sim_range *r)
{
	free(r->owned);
	*r = g_ranges[--g_nranges];
}

/* "d0+4096", "r1+0", "pageable". */
static const char *where(const void *p, char *buf, size_t cap)
{
	sim_range *r = find_range(p);
	if (r == NULL)
		snprintf(buf, cap, "pageable");
	else
		snprintf(buf, cap, "%c%d+%zu", r->kind, r->id, (size_t)((uintptr_t)p - r->start));
	return buf;
}

void *sim_host_alloc(size_t n)
{
	void *p = calloc(1, n ? n : 1);
	if (p == NULL)
		abort();
	add_range(p, n ? n : 1, 'h', p);
	return p;
}

void sim_host_free(void *p)
{
	sim_range *r = find_range(p);
	if (r != NULL && r->kind == 'h')
		drop_range(r);
}

/* ---- scheduling ------------------------------------------------------------------------------- */

static int runnable(const sim_stream *s)
{
	if (!s->live || s->head == s->len)
		return 0;
	const sim_op *o = &s->ops[s->head];
	return o->kind != OP_WAIT || o->ev->done >= o->gen;
}

/* Run the head of one random runnable stream (copy streams first when asked). 0 if none can run. */
static int step(void)
{
	sim_stream *pick[256];
	size_t n = 0;
	for (size_t i = 0; i < g_nstreams && n < 256; i++)
		if (runnable(g_streams[i]) && !(g_cfg.prefer_copies && i == 0))
			pick[n++] = g_streams[i];
	if (n == 0 && g_nstreams > 0 && runnable(g_streams[0]))
		pick[n++] = g_streams[0];
	if (n == 0)
		return 0;
	sim_stream *s = pick[rnd() % n];
	sim_op o = s->ops[s->head++];
	switch (o.kind) {
	case OP_MEMCPY:
		memcpy(o.dst, o.src, o.n);
		break;
	case OP_RECORD:
		if (o.gen > o.ev->done)
			o.ev->done = o.gen;
		break;
	case OP_HOSTFN:
		o.fn(o.arg);
		break;
	default:
		break;
	}
	return 1;
}

static void maybe_steps(void)
{
	if (g_cfg.step_prob <= 0 || (double)(rnd() % 1000000) / 1e6 >= g_cfg.step_prob)
		return;
	for (unsigned i = 0, k = 1 + rnd() % 4; i < k && step(); i++)
		;
}

size_t sim_pending(void);

static void push(sim_stream *s, sim_op o)
{
	if (s->len == s->cap) {
		/* compact, then grow */
		if (s->head > 0)
			memmove(s->ops, s->ops + s->head, (s->len - s->head) * sizeof *s->ops);
		s->len -= s->head;
		s->head = 0;
		if (s->len == s->cap) {
			s->cap = s->cap ? 2 * s->cap : 64;
			s->ops = xrealloc(s->ops, s->cap * sizeof *s->ops);
		}
	}
	s->ops[s->len++] = o;
	size_t pending = sim_pending();
	if (pending > g_max_pending)
		g_max_pending = pending;
}

size_t sim_pending(void)
{
	size_t n = 0;
	for (size_t i = 0; i < g_nstreams; i++)
		n += g_streams[i]->len - g_streams[i]->head;
	return n;
}

void sim_counts(int *streams, int *events, int *dev_allocs, int *registrations)
{
	*streams = *events = *dev_allocs = *registrations = 0;
	for (size_t i = 0; i < g_nstreams; i++)
		*streams += g_streams[i]->live;
	for (size_t i = 0; i < g_nevents; i++)
		*events += g_events[i]->live;
	for (size_t i = 0; i < g_nranges; i++) {
		*dev_allocs += g_ranges[i].kind == 'd';
		*registrations += g_ranges[i].kind == 'r';
	}
}

int sim_stream_id(const void *stream)
{
	const sim_stream *s = stream;
	int id = -1;
	sim_lock();
	for (size_t i = 0; i < g_nstreams && id < 0; i++)
		if (g_streams[i] == s)
			id = s->id;
	sim_unlock();
	return id;
}

/* The legacy default stream (NULL): a stream of its own, created on first use. */
static sim_stream *g_legacy;
static int s_stream_create(void **out);

static sim_stream *S(void *sp)
{
	if (sp != NULL)
		return sp;
	if (g_legacy == NULL || !g_legacy->live) {
		void *p;
		if (s_stream_create(&p) != 0)
			abort();
		g_legacy = p;
	}
	return g_legacy;
}

void sim_set_capturing(void *stream, int on)
{
	S(stream)->capturing = on;
}

static _Thread_local int g_capture_mode_calls; /* per thread: the library's own lanes keep the local mode */

int sim_capture_mode_balance(void)
{
	return g_capture_mode_calls;
}

/* ---- the API ------------------------------------------------------------------------------------ */

static int s_get_device_count(int *n)
{
	logf_("cudaGetDeviceCount");
	if (g_cfg.count_error)
		return failed(g_cfg.count_error);
	*n = g_cfg.device_count;
	return 0;
}

static int s_get_device(int *d)
{
	*d = t_ctx ? t_ctx - 1 : 0; /* CUDA says 0 when the thread has no context */
	return 0;
}

static int s_set_device(int d)
{
	logf_("cudaSetDevice %d", d);
	if (d < 0 || d >= g_cfg.device_count || d >= SIM_MAX_DEV)
		return failed(101);
	g_ctx_made[d] = 1;
	t_ctx = d + 1;
	return 0;
}

static int s_ctx_get(void **ctx)
{
	*ctx = t_ctx ? &g_ctx_token[t_ctx - 1] : NULL;
	return 0;
}

static int s_ctx_set(void *ctx)
{
	t_ctx = ctx == NULL ? 0 : (int)((char *)ctx - g_ctx_token) + 1;
	return 0;
}

static int s_driver_version(int *v)
{
	*v = g_cfg.driver_version < 0 ? 0 : g_cfg.driver_version ? g_cfg.driver_version : 13000;
	return 0;
}

static int s_runtime_version(void)
{
	return g_cfg.runtime_version ? g_cfg.runtime_version : 13000;
}

static int s_device_name(int d, char *buf, size_t cap)
{
	(void)d;
	snprintf(buf, cap, "Simulated GPU");
	return 0;
}

static int s_device_numa_node(int d, int *node)
{
	(void)d;
	*node = g_cfg.numa_node;
	return 0;
}

static int s_stream_create(void **out)
{
	need_ctx();
	maybe_steps();
	int e = should_fail("stream_create");
	if (e)
		return failed(e);
	sim_stream *s = xrealloc(NULL, sizeof *s);
	*s = (sim_stream){(int)g_nstreams, 1, 0, NULL, 0, 0, 0};
	if (g_nstreams == g_capstreams) {
		g_capstreams = g_capstreams ? 2 * g_capstreams : 16;
		g_streams = xrealloc(g_streams, g_capstreams * sizeof *g_streams);
	}
	g_streams[g_nstreams++] = s;
	logf_("stream_create s%d", s->id);
	*out = s;
	return 0;
}

static int s_stream_synchronize(void *sp);

static int s_stream_destroy(void *sp)
{
	sim_stream *s = sp;
	logf_("stream_destroy s%d", s->id);
	/* CUDA lets pending work finish; so do we. */
	(void)s_stream_synchronize(sp);
	s->live = 0;
	return 0;
}

static int s_stream_synchronize(void *sp)
{
	sim_stream *s = S(sp);
	logf_("sync s%d", s->id);
	if (g_sticky)
		return failed(g_sticky);
	while (s->head < s->len)
		if (!step()) {
			logf_("  -> deadlock: s%d cannot finish", s->id);
			return failed(SIM_ERR_DEADLOCK);
		}
	if (g_cfg.sync_error) {
		g_sticky = g_cfg.sync_error;
		return failed(g_sticky);
	}
	return 0;
}

static int s_event_query(void *e)
{
	sim_event *ev = e;
	if (g_sticky)
		return failed(g_sticky);
	if (!g_cfg.query_idle)
		(void)step();
	return ev->done >= ev->enq ? 0 : SIM_NOT_READY;
}

static int s_stream_capturing(void *sp, int *yes)
{
	*yes = S(sp)->capturing;
	return 0;
}

static int s_capture_mode_local(int *saved)
{
	g_capture_mode_calls++;
	*saved = 0;
	return 0;
}

static int s_capture_mode_restore(int saved)
{
	(void)saved;
	g_capture_mode_calls--;
	return 0;
}

static long g_device_syncs;
static _Atomic long g_memcpys;

long sim_memcpys(void)
{
	return atomic_load(&g_memcpys);
}

long sim_device_syncs(void)
{
	return g_device_syncs;
}

static int s_device_synchronize(void)
{
	logf_("device_sync");
	g_device_syncs++;
	for (size_t i = 0; i < g_nstreams; i++)
		if (g_streams[i]->live) {
			int e = s_stream_synchronize(g_streams[i]);
			if (e != 0)
				return e;
		}
	return 0;
}

/* Run the device until the event's latest record (at the time of the call) has run. */
static int s_event_synchronize(void *e)
{
	sim_event *ev = e;
	logf_("event_sync e%d", ev->id);
	if (g_sticky)
		return failed(g_sticky);
	int err = should_fail("event_sync");
	if (err)
		return failed(err);
	uint64_t want = ev->enq;
	while (ev->done < want)
		if (!step()) {
			logf_("  -> deadlock: e%d cannot complete", ev->id);
			return failed(SIM_ERR_DEADLOCK);
		}
	return 0;
}

static int s_event_create(void **out)
{
	need_ctx();
	int e = should_fail("event_create");
	if (e)
		return failed(e);
	sim_event *ev = xrealloc(NULL, sizeof *ev);
	*ev = (sim_event){(int)g_nevents, 1, 0, 0};
	if (g_nevents == g_capevents) {
		g_capevents = g_capevents ? 2 * g_capevents : 64;
		g_events = xrealloc(g_events, g_capevents * sizeof *g_events);
	}
	g_events[g_nevents++] = ev;
	*out = ev;
	return 0;
}

static int s_event_destroy(void *e)
{
	((sim_event *)e)->live = 0;
	return 0;
}

static int s_event_record(void *e, void *sp)
{
	maybe_steps();
	sim_event *ev = e;
	sim_stream *s = S(sp);
	logf_("record s%d e%d", s->id, ev->id);
	need_ctx();
	int err = should_fail("record");
	if (err)
		return failed(err);
	push(s, (sim_op){.kind = OP_RECORD, .ev = ev, .gen = ++ev->enq});
	return 0;
}

static int s_stream_wait_event(void *sp, void *e)
{
	maybe_steps();
	sim_event *ev = e;
	sim_stream *s = S(sp);
	logf_("wait s%d e%d", s->id, ev->id);
	need_ctx();
	int err = should_fail("wait");
	if (err)
		return failed(err);
	if (ev->enq > 0) /* captures the latest record; none: waits for nothing */
		push(s, (sim_op){.kind = OP_WAIT, .ev = ev, .gen = ev->enq});
	return 0;
}

static int s_memcpy_async(void *dst, const void *src, size_t n, void *sp)
{
	maybe_steps();
	sim_stream *s = sp;
	char a[32], b[32];
	logf_("memcpy s%d %s <- %s n=%zu", s->id, where(dst, a, sizeof a), where(src, b, sizeof b), n);
	need_ctx();
	int err = should_fail("memcpy");
	if (err)
		return failed(err);
	push(s, (sim_op){.kind = OP_MEMCPY, .dst = dst, .src = src, .n = n});
	atomic_fetch_add(&g_memcpys, 1);
	return 0;
}

static int s_launch_host_func(void *sp, rf__cuda_host_fn fn, void *arg)
{
	maybe_steps();
	sim_stream *s = S(sp);
	logf_("hostfn s%d", s->id);
	need_ctx();
	int err = should_fail("hostfn");
	if (err)
		return failed(err);
	push(s, (sim_op){.kind = OP_HOSTFN, .fn = fn, .arg = arg});
	return 0;
}


static int s_malloc_device(void **p, size_t n, void *stream)
{
	(void)stream;
	need_ctx();
	int err = should_fail("malloc");
	if (err)
		return failed(err);
	void *m = calloc(1, n);
	if (m == NULL)
		return failed(2);
	sim_range *r = add_range(m, n, 'd', m);
	logf_("malloc d%d n=%zu", r->id, n);
	*p = m;
	return 0;
}

static int s_free_device(void *p, void *stream)
{
	(void)stream;
	need_ctx();
	sim_range *r = find_range(p);
	if (r == NULL || r->kind != 'd' || r->start != (uintptr_t)p)
		return failed(1);
	drop_range(r);
	return 0;
}

static int s_host_register(void *p, size_t n)
{
	need_ctx();
	if (g_cfg.register_error)
		return failed(g_cfg.register_error);
	if (find_range(p) != NULL || find_range((char *)p + n - 1) != NULL)
		return failed(712); /* cudaErrorHostMemoryAlreadyRegistered */
	add_range(p, n, 'r', NULL);
	return 0;
}

static int s_host_unregister(void *p)
{
	sim_range *r = find_range(p);
	if (r == NULL || r->kind != 'r' || r->start != (uintptr_t)p)
		return failed(713); /* cudaErrorHostMemoryNotRegistered */
	drop_range(r);
	return 0;
}

int sim_is_pinned(const void *p, size_t n)
{
	sim_lock();
	sim_range *a = find_range(p), *b = find_range((const char *)p + n - 1);
	sim_unlock();
	return a != NULL && a == b;
}

static long g_range_queries;

long sim_range_queries(void)
{
	return g_range_queries;
}

void sim_register_range(void *p, size_t n)
{
	add_range(p, n, 'r', NULL);
}

void sim_unregister_range(void *p)
{
	sim_range *r = find_range(p);
	if (r != NULL && r->kind == 'r')
		drop_range(r);
}

static int s_dma_range(const void *p, const void **start, size_t *len)
{
	g_range_queries++;
	sim_range *r = find_range(p);
	if (r == NULL)
		return 0;
	*start = (const void *)r->start;
	*len = r->len;
	return 1;
}

static const char *s_error_name(int e)
{
	switch (e) {
	case 1: return "cudaErrorInvalidValue";
	case 2: return "cudaErrorMemoryAllocation";
	case 35: return "cudaErrorInsufficientDriver";
	case 100: return "cudaErrorNoDevice";
	case 600: return "cudaErrorNotReady";
	case 700: return "cudaErrorIllegalAddress";
	case 712: return "cudaErrorHostMemoryAlreadyRegistered";
	case 713: return "cudaErrorHostMemoryNotRegistered";
	case SIM_ERR_DEADLOCK: return "simDeadlock";
	default: return "cudaErrorUnknown";
	}
}

static const char *s_error_string(int e)
{
	switch (e) {
	case 1: return "invalid argument";
	case 2: return "out of memory";
	case 35: return "CUDA driver version is insufficient for CUDA runtime version";
	case 100: return "no CUDA-capable device is detected";
	case 700: return "an illegal memory access was encountered";
	case SIM_ERR_DEADLOCK: return "simulated deadlock: a stream waits for a record that never runs";
	default: return "simulated error";
	}
}

static int s_error_kind(int e)
{
	switch (e) {
	case 0: return RF__CUE_OK;
	case SIM_NOT_READY: return RF__CUE_NOT_READY;
	case 2: return RF__CUE_NOMEM;
	default: return RF__CUE_OTHER;
	}
}

static int s_get_last_error(void)
{
	int e = t_last_error;
	t_last_error = g_sticky; /* a sticky error stays */
	return e;
}

static int s_init_context(void)
{
	need_ctx();
	return 0;
}

/* The table's entry points, each under the simulator's lock. */
#define SIM_LOCKED(name, params, args)                                                                    \
	static int l_##name params                                                                          \
	{                                                                                                  \
		sim_lock();                                                                                \
		int r = s_##name args;                                                                     \
		sim_unlock();                                                                              \
		return r;                                                                                  \
	}

SIM_LOCKED(get_device_count, (int *n), (n))
SIM_LOCKED(get_device, (int *d), (d))
SIM_LOCKED(set_device, (int d), (d))
SIM_LOCKED(ctx_get, (void **ctx), (ctx))
SIM_LOCKED(ctx_set, (void *ctx), (ctx))
SIM_LOCKED(driver_version, (int *v), (v))
SIM_LOCKED(device_name, (int d, char *buf, size_t cap), (d, buf, cap))
SIM_LOCKED(device_numa_node, (int d, int *node), (d, node))
SIM_LOCKED(stream_create, (void **out), (out))
SIM_LOCKED(stream_destroy, (void *sp), (sp))
SIM_LOCKED(stream_synchronize, (void *sp), (sp))
SIM_LOCKED(device_synchronize, (void), ())
SIM_LOCKED(event_create, (void **out), (out))
SIM_LOCKED(event_destroy, (void *e), (e))
SIM_LOCKED(event_record, (void *e, void *sp), (e, sp))
SIM_LOCKED(event_synchronize, (void *e), (e))
SIM_LOCKED(event_query, (void *e), (e))
SIM_LOCKED(stream_capturing, (void *sp, int *yes), (sp, yes))
SIM_LOCKED(capture_mode_local, (int *saved), (saved))
SIM_LOCKED(capture_mode_restore, (int saved), (saved))
SIM_LOCKED(stream_wait_event, (void *sp, void *e), (sp, e))
SIM_LOCKED(memcpy_async, (void *dst, const void *src, size_t n, void *sp), (dst, src, n, sp))
SIM_LOCKED(launch_host_func, (void *sp, rf__cuda_host_fn fn, void *arg), (sp, fn, arg))
SIM_LOCKED(malloc_device, (void **p, size_t n, void *stream), (p, n, stream))
SIM_LOCKED(free_device, (void *p, void *stream), (p, stream))
SIM_LOCKED(host_register, (void *p, size_t n), (p, n))
SIM_LOCKED(host_unregister, (void *p), (p))
SIM_LOCKED(dma_range, (const void *p, const void **start, size_t *len), (p, start, len))
SIM_LOCKED(error_kind, (int e), (e))
SIM_LOCKED(get_last_error, (void), ())
SIM_LOCKED(init_context, (void), ())
#undef SIM_LOCKED

int sim_launch(void *stream, rf__cuda_host_fn fn, void *arg)
{
	return l_launch_host_func(stream, fn, arg);
}

const rf__cuda_api sim_api = {
	.get_device_count = l_get_device_count,
	.get_device = l_get_device,
	.set_device = l_set_device,
	.ctx_get = l_ctx_get,
	.ctx_set = l_ctx_set,
	.driver_version = l_driver_version,
	.runtime_version = s_runtime_version,
	.device_name = l_device_name,
	.device_numa_node = l_device_numa_node,
	.stream_create = l_stream_create,
	.stream_destroy = l_stream_destroy,
	.stream_synchronize = l_stream_synchronize,
	.device_synchronize = l_device_synchronize,
	.event_create = l_event_create,
	.event_destroy = l_event_destroy,
	.event_record = l_event_record,
	.event_synchronize = l_event_synchronize,
	.event_query = l_event_query,
	.stream_capturing = l_stream_capturing,
	.capture_mode_local = l_capture_mode_local,
	.capture_mode_restore = l_capture_mode_restore,
	.stream_wait_event = l_stream_wait_event,
	.memcpy_async = l_memcpy_async,
	.malloc_device = l_malloc_device,
	.free_device = l_free_device,
	.host_register = l_host_register,
	.host_unregister = l_host_unregister,
	.dma_range = l_dma_range,
	.error_name = s_error_name,
	.error_string = s_error_string,
	.error_kind = l_error_kind,
	.get_last_error = l_get_last_error,
	.init_context = l_init_context,
};

void sim_install(const sim_config *cfg)
{
	sim_log_clear();
	for (size_t i = 0; i < g_nstreams; i++) {
		free(g_streams[i]->ops);
		free(g_streams[i]);
	}
	for (size_t i = 0; i < g_nevents; i++)
		free(g_events[i]);
	g_nstreams = g_nevents = 0;
	g_legacy = NULL;
	g_device_syncs = 0;
	atomic_store(&g_memcpys, 0);
	g_capture_mode_calls = 0;
	g_cfg = *cfg;
	g_rng = cfg->seed ? cfg->seed : 0x9e3779b97f4a7c15ull;
	g_calls_seen = 0;
	g_sticky = 0;
	g_max_pending = 0;
	g_range_queries = 0;
	t_ctx = 0;
	t_last_error = 0;
	memset(g_ctx_made, 0, sizeof g_ctx_made);
	rf__cuda = &sim_api;
#ifndef RF_HAVE_CUDA
	/* Built without the toolkit, the library has no "cuda" backend of its own to call us. */
	static int registered;
	if (!registered++ && rf__backend_register(&rf__backend_cuda) != RF_OK) {
		fprintf(stderr, "cuda_sim: cannot register the cuda backend: %s\n", rf_errmsg());
		abort();
	}
#endif
}
