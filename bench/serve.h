/* bench/serve.h — ringfetch-serve-bench: a MoE decode loop served by several contestants in one process.
 *
 * The model: `layers` layers of `experts` experts of `expert_bytes` each, in host memory. A
 * decode step runs the layers in order; at each layer every token's router picks `topk` distinct
 * experts from a skewed (Zipf-like) popularity, drawing from the token's hidden state, and the hidden
 * state after the layer depends on the outputs of the experts it ran. So layer l+1's experts are known
 * only once layer l has been computed: a serving loop calls the library once per layer, never once per
 * step. An expert's compute reads every byte (a float sum, the "output") then does `compute_us` of
 * dependent integer arithmetic per token routed to it.
 *
 * Contestants differ only in how an expert's bytes reach the compute (serve_contestants.c); the routing,
 * the compute and the checks are shared, so every contestant computes the same sums in the same order
 * and follows the same routing trace, or fails. */
#ifndef RFS_SERVE_H
#define RFS_SERVE_H

#include "options.h"

#include <ringfetch.h>

#include <stdint.h>
#include <stdio.h>

#define RFS_MAX_EXPERTS 256u /* per layer */
#define RFS_MAX_LAYERS 1024u
#define RFS_MAX_BATCH 64u

/* The contestants, in table order; bit (1u << kind) in rfs_opts.contestants. */
typedef enum rfs_kind {
	RFS_SEQUENTIAL,  /* memcpy into a buffer, then compute from it, one thread */
	RFS_DIRECT,      /* compute straight from the source: no copy (and the reference for the checks) */
	RFS_SPIN,        /* a hand-written push/pop ring of `depth` slots, one copy thread that spins */
	RFS_LAYER,       /* ringfetch: one rf_pipeline_run per layer over the routed experts */
	RFS_KEYED,       /* ringfetch keyed: acquire, compute, release per routed expert */
	RFS_KEYED_HINTS, /* the same, after prefetching this layer's routed and next layer's likely experts */
	RFS_NKINDS
} rfs_kind;

#define RFS_ALL_CONTESTANTS ((1u << RFS_NKINDS) - 1)
/* Contestants that run once per backend (the others are plain C and run once). */
#define RFS_IS_RINGFETCH(k) ((k) == RFS_LAYER || (k) == RFS_KEYED || (k) == RFS_KEYED_HINTS)

typedef struct rfs_opts {
	unsigned layers, experts, topk, batch;
	size_t expert_bytes;
	double skew;       /* Zipf exponent of the router's popularity */
	double compute_us; /* arithmetic per expert and routed token, after the sum */
	unsigned steps;    /* decode steps per round */
	unsigned rounds;   /* measured rounds (one warm-up round before them is not measured) */
	unsigned depth;    /* slots of the spin ring and of the per-layer pipeline */
	unsigned slots;    /* slots of the keyed pipelines */
	unsigned hint_next; /* keyed-hints: how many of the next layer's likeliest experts are hinted */
	const char *wait;   /* params.wait of the ringfetch pipelines (NULL: the library's default) */
	uint64_t hint_bytes; /* params.hint_bytes of the keyed pipelines (0: the library's default, no bound
	                        unless configured); ringfetch-serve-file-bench sets it for its hint modes */
	const char *backends[RFB_MAX_LIST];
	unsigned nbackends;
	unsigned contestants; /* RFS_* bits; RFS_DIRECT is always added (the reference) */
	unsigned long long seed;
	const char *json, *csv, *plot;
	int quiet;
} rfs_opts;

/* Defaults, then argv. Returns 0, 1 for --help, or 2 with a one-line reason in err. */
int rfs_parse(int argc, char **argv, rfs_opts *o, char *err, size_t errcap);
const char *rfs_usage(void);
const char *rfs_kind_name(rfs_kind k);

/* ---- the model (serve_model.c) ------------------------------------------------------------------ */

typedef struct rfs_model {
	const rfs_opts *o;
	unsigned char *pool; /* layers * experts sources of expert_bytes, expert (l, e) at (l * experts + e) */
	float *expect;       /* per expert: its sum, computed from the source at set-up (the direct line's) */
	unsigned *likely;    /* per layer: experts from most to least popular */
	double *weight;      /* per popularity rank: the router's relative weight, 1 / (rank + 1)^skew */
	uint64_t iters;      /* arithmetic iterations per routed token (compute_us, calibrated once) */
	double iters_per_us;
	/* The true routes, where a driver recorded them in advance (ringfetch-serve-file-bench): for entry
	 * step * layers + layer (< nroutes), route_n[entry] distinct experts at route_e + entry * experts. */
	const unsigned *route_n, *route_e;
	size_t nroutes;
} rfs_model;

/* One layer as a contestant sees it: the distinct experts routed (ascending), where their bytes are,
 * and, for hints, the next layer's likeliest experts. The contestant fills sum/arith through
 * rfs_compute for every routed expert exactly once. */
typedef struct rfs_layer {
	unsigned layer, n;
	unsigned expert[RFS_MAX_EXPERTS];
	unsigned tokens[RFS_MAX_EXPERTS]; /* tokens routed to each */
	uint64_t key[RFS_MAX_EXPERTS];    /* layer * experts + expert */
	const void *src[RFS_MAX_EXPERTS];
	size_t bytes[RFS_MAX_EXPERTS];
	unsigned nnext;
	uint64_t next_key[RFS_MAX_EXPERTS];
	const void *next_src[RFS_MAX_EXPERTS];
	/* results */
	float sum[RFS_MAX_EXPERTS];
	uint64_t arith[RFS_MAX_EXPERTS];
	unsigned done[RFS_MAX_EXPERTS];
} rfs_layer;

/* What one contestant's round measured (summed over its steps). */
typedef struct rfs_tally {
	double wall_s, compute_s, cpu_s; /* cpu_s: CPU time of the whole process, all its threads */
	uint64_t bytes_copied, computes, bad;
	uint64_t acquires, hits, late, prefetches, dropped, wasted; /* keyed only */
	uint64_t checksum; /* fold of every token's hidden state after every step */
} rfs_tally;

int rfs_model_init(rfs_model *m, const rfs_opts *o);
/* The same model with its experts written to fd (expert x at x * expert_bytes) instead of kept in
 * memory: pool stays NULL until the caller points it at a mapping of the file (and back to NULL before
 * rfs_model_free). 0, or -1 (out of memory, or the write failed). */
int rfs_model_init_file(rfs_model *m, const rfs_opts *o, int fd);
void rfs_model_free(rfs_model *m);

/* The compute of routed expert i of L from `data` (its bytes, wherever they are): the sum, checked
 * against the source's, then the arithmetic. Times itself into t->compute_s; counts a wrong sum or a
 * second compute of the same expert in t->bad. Never inlined: every contestant runs the same code. */
void rfs_compute(const rfs_model *m, rfs_layer *L, unsigned i, const void *data, rfs_tally *t);

/* A contestant's round is driven by rfs_round: for each step, for each layer, route (from the tokens'
 * hidden states), call layer_fn, check that every routed expert was computed once, fold the outputs into
 * the hidden states. Returns 0, or -1 (layer_fn failed or a check failed; message printed). */
typedef int (*rfs_layer_fn)(void *self, rfs_layer *L, rfs_tally *t);
int rfs_round(const rfs_model *m, unsigned first_step, rfs_layer_fn fn, void *self, rfs_tally *t);

double rfs_now(void);
/* CPU time of the process (all threads), seconds. */
double rfs_cpu_now(void);

/* ---- the contestants (serve_contestants.c) ------------------------------------------------------- */

typedef struct rfs_contestant rfs_contestant;

/* Create one contestant (backend: for the ringfetch ones). NULL with a message printed on failure. */
rfs_contestant *rfs_contestant_create(const rfs_model *m, rfs_kind kind, const char *backend);
/* One round of o->steps steps from first_step; fills t (zeroed first). 0 or -1 (message printed). */
int rfs_contestant_round(rfs_contestant *c, unsigned first_step, rfs_tally *t);
/* keyed-hints with the model's recorded routes: instead of this layer's and the next layer's likeliest
 * experts, after acquiring the layer's experts it hints the next layer's true route (RFS_HINT_ROUTE) or
 * as many of the next layer's experts that are not routed there, least popular first (RFS_HINT_WRONG). */
enum { RFS_HINT_LIKELY = 0, RFS_HINT_ROUTE = 1, RFS_HINT_WRONG = 2 };
void rfs_contestant_hint_mode(rfs_contestant *c, int mode);
/* The resolved backend ("threads", "cpu") or "-" for the plain C contestants; a static string. */
const char *rfs_contestant_backend(const rfs_contestant *c);
/* Slots the contestant stages through (0 for sequential and direct). */
unsigned rfs_contestant_slots(const rfs_contestant *c);
void rfs_contestant_destroy(rfs_contestant *c);

/* A keyed contestant's misses and reads since create (warm-up included) beside the fewest any policy
 * could have had on the same acquires at the same slots (Belady's MIN, bench/replay.h: its reads are
 * its misses, and no schedule, hinted or not, reads fewer blocks), and the reads of lru's replay of its
 * calls (misses and hints' reads: equal to ringfetch's reads when no hint was held back). */
typedef struct rfs_bound {
	int have; /* 0: not a keyed contestant */
	unsigned slots;
	uint64_t acquires, misses, reads; /* reads: copies issued, hints' included */
	uint64_t min_misses, lru_reads;
} rfs_bound;
/* 0 (out->have 0 for the others), or -1 (out of memory, or the calls' log is not a valid trace:
 * message printed). */
int rfs_contestant_bound(rfs_contestant *c, rfs_bound *out);

/* ---- the report (serve_report.c) ------------------------------------------------------------------ */

typedef struct rfs_record {
	rfs_kind kind;
	const char *backend;
	unsigned slots;
	double ms_step, ms_min, ms_max; /* median, fastest and slowest round */
	double exposed_ms;              /* median per step of wall time not inside a compute */
	double compute_ms;              /* median per step of time inside computes */
	double cpu_ms;                  /* median per step of the process's CPU time (every thread) */
	double mb_step;                 /* MiB copied per step */
	double hit_rate;                /* hits / acquires; NAN for the contestants without a cache */
	double late_step, wasted_step, dropped_step; /* keyed: per step; NAN otherwise */
	double vs_seq, vs_spin;         /* median over rounds of time / sequential's (spin's) in the same
	                                   round; NAN when not measured */
	uint64_t checksum;              /* the last round's */
	int checksum_ok;                /* every round's checksum equal to the direct line's */
	rfs_bound bound;                /* keyed: misses over the run beside MIN's */
} rfs_record;

void rfs_print_table(const rfs_record *r, size_t n, FILE *f);
/* The keyed contestants' misses beside MIN's (r[i].bound; those without `have` skipped), indented. */
void rfs_print_bounds(const rfs_record *r, size_t n, FILE *f);
int rfs_write_json(const rfs_record *r, size_t n, const rfs_opts *o, const rfs_model *m, const char *machine,
		   const char *path);
int rfs_write_csv(const rfs_record *r, size_t n, const char *path);
/* A PNG through gnuplot: ms per step per contestant, split into computing and exposed time. */
int rfs_write_plot(const rfs_record *r, size_t n, const char *path, char *why, size_t cap);

#endif
