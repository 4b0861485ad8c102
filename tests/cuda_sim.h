/*
 * tests/cuda_sim.h — a simulated CUDA runtime behind backends/cuda_api.h, for testing the cuda
 * backend's lowering on machines without a GPU.
 *
 * It keeps CUDA's semantics, not its speed: each stream is a FIFO of enqueued operations; an event
 * remembers how many records were enqueued on it and how many have run; cudaStreamWaitEvent captures
 * the event's latest record *at the time of the call* (a wait enqueued before any record waits for
 * nothing, as in CUDA); a stream's head runs only when the record it waits for has run. Enqueued work
 * runs in a random legal order: some random steps at every API call (the device running while the host
 * enqueues), the rest at synchronisation. "Device memory" is host memory the simulator allocated, so a
 * test reads slots directly from host functions that run in stream order.
 *
 * Every call is appended to a log (one line each, handles numbered in creation order) that tests
 * compare against the expected lowering. Single-threaded apart from host functions, which run on the
 * calling thread inside a step (the backend's staging lanes call in from threads of their own).
 */
#ifndef RF_TESTS_CUDA_SIM_H
#define RF_TESTS_CUDA_SIM_H

#include "backends/cuda_api.h"

#include <stdint.h>

#define SIM_ERR_DEADLOCK 999 /* a synchronisation that can never finish */
#define SIM_NOT_READY 600    /* cudaErrorNotReady */

typedef struct sim_config {
	uint64_t seed;
	double step_prob;   /* chance of running random steps at each API call (0: only at sync) */
	int prefer_copies;  /* schedule streams other than the first-created one first (stress WAR) */
	int device_count;   /* what cudaGetDeviceCount reports */
	int count_error;    /* non-zero: cudaGetDeviceCount fails with this */
	const char *fail_call; /* fail the fail_nth call whose log line starts with this (e.g. "memcpy") */
	long fail_nth;
	int fail_error;        /* ... with this error (default 1, cudaErrorInvalidValue) */
	int sync_error;        /* non-zero: the next stream synchronisation reports this once, then stays
	                          sticky (every later sync and query reports it too) */
	int register_error;    /* non-zero: cudaHostRegister fails with this */
	int numa_node;         /* cudaDevAttrHostNumaId; -1 none */
	int driver_version;    /* cudaDriverGetVersion: 0 = 13000, -1 = no driver (reports 0) */
	int runtime_version;   /* CUDART_VERSION: 0 = 13000 */
	int log;               /* keep the call log */
	int query_idle;        /* cudaEventQuery runs no step: only a synchronisation moves the device */
} sim_config;

extern const rf__cuda_api sim_api;

/* Reset the simulator (freeing what it holds) and install it as rf__cuda; where the library was built
 * without the CUDA toolkit, also register its "cuda" backend (once). */
void sim_install(const sim_config *cfg);
sim_config *sim_cfg(void);
/* Calls of the fail_call kind seen so far (a run that made fewer than fail_nth saw no failure). */
long sim_fail_seen(void);

/* The call log: lines, and how many. */
const char *const *sim_log(size_t *n);
void sim_log_clear(void);
/* Print the log to stderr (for failing tests). */
void sim_log_dump(void);

/* Work still enqueued on any stream; live streams, events, device allocations, registrations. */
size_t sim_pending(void);
void sim_counts(int *streams, int *events, int *dev_allocs, int *registrations);

/* The model of contexts and errors: the calling thread's current device (-1: no context), making it
 * have none, whether device dev's primary context was ever created (since sim_install), the calling
 * thread's pending error (what cudaGetLastError would return) and setting it (an embedder's own). */
int sim_current_device(void);
void sim_set_no_context(void);
int sim_context_made(int dev);
int sim_last_error(void);
void sim_set_last_error(int e);

/* Stream capture: mark a stream (NULL: the legacy default stream) as being captured; the calls to
 * enter thread-local capture mode minus the calls that restored it (0 when balanced). */
void sim_set_capturing(void *stream, int on);
int sim_capture_mode_balance(void);
/* cudaDeviceSynchronize calls so far. */
long sim_device_syncs(void);
/* cudaMemcpyAsync calls so far (any thread; a test waits on it without stepping the device). */
long sim_memcpys(void);

/* Most operations ever pending at once on all streams (since install or the last reset). */
size_t sim_max_pending(void);
void sim_reset_max_pending(void);

/* Registered ranges: is [p, p + n) inside one simulated pinned range; register / drop a range like
 * cudaHostRegister would (for building holes); driver range queries made so far. */
int sim_is_pinned(const void *p, size_t n);
void sim_register_range(void *p, size_t n);
void sim_unregister_range(void *p);
long sim_range_queries(void);

/* Fake page-locked host memory: registered with the simulator like cudaHostAlloc memory. */
void *sim_host_alloc(size_t n);
void sim_host_free(void *p);

/* Enqueue a host function on a stream given to a compute callback. */
int sim_launch(void *stream, rf__cuda_host_fn fn, void *arg);

/* Stream index (creation order) of a handle, -1 if unknown. */
int sim_stream_id(const void *stream);

#endif
