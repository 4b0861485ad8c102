/* bench/replay_main.c — ringfetch-replay: a keyed access trace (rf_pipeline_keyed_trace or
 * RINGFETCH_KEYED_TRACE) replayed under cache policies at several slot counts, with what ringfetch did
 * when it was recorded and Belady's MIN, the fewest misses any policy could have had (bench/replay.h).
 * Exit status: 0, 1 (the trace cannot be read), 2 (bad options). */
#include "options.h"
#include "replay.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAXSLOTS 64

static const char usage[] =
	"usage: ringfetch-replay TRACE [--slots N[,M..]] [--policy lru,slru,lfu,min] [--hints on|off]\n"
	"  TRACE      a keyed access trace (rf_pipeline_keyed_trace, RINGFETCH_KEYED_TRACE; docs/serving.md)\n"
	"  --slots    slot counts to replay at (default: the recording pipeline's)\n"
	"  --policy   policies, comma-separated: lru, slru, lfu, min (= belady; default: all four)\n"
	"  --hints    on (default): lru, slru and lfu bring hinted blocks in as ringfetch does (min never\n"
	"             uses hints); off: every policy replays the acquires alone\n"
	"Prints misses, bytes read (misses' and hints' reads) and hit rate (hits / acquires) for each\n"
	"slot count x policy; min is the bound: no policy misses fewer acquires at that slot count.\n";

static int fail(const char *what, const char *v)
{
	fprintf(stderr, "ringfetch-replay: %s \"%s\"\n(ringfetch-replay --help lists the options)\n", what, v);
	return 2;
}

static double mib(uint64_t b)
{
	return (double)b / 1048576.0;
}

static double pct(uint64_t a, uint64_t b)
{
	return b ? 100.0 * (double)a / (double)b : 0;
}

typedef struct args {
	const char *path;
	unsigned slots[MAXSLOTS], nslots;
	int want[RPL_NPOLICIES], hints;
} args;

/* A comma-separated list of counts or of policies: 0, or 2 with the message printed. */
static int parse_slots(args *a, const char *v)
{
	char buf[512], *save = NULL;
	snprintf(buf, sizeof buf, "%s", v);
	a->nslots = 0;
	for (char *s = strtok_r(buf, ",", &save); s; s = strtok_r(NULL, ",", &save)) {
		unsigned long long n;
		if (a->nslots == MAXSLOTS || rfb_parse_count(s, 1, 1u << 24, &n) != 0)
			return fail("--slots: expected up to 64 counts in 1..16777216, got", v);
		a->slots[a->nslots++] = (unsigned)n;
	}
	return a->nslots ? 0 : fail("--slots: expected counts, got", v);
}

static int parse_policies(args *a, const char *v)
{
	char buf[512], *save = NULL;
	snprintf(buf, sizeof buf, "%s", v);
	memset(a->want, 0, sizeof a->want);
	int any = 0;
	for (char *s = strtok_r(buf, ",", &save); s; s = strtok_r(NULL, ",", &save)) {
		rpl_policy p;
		if (rpl_policy_parse(s, &p) != 0)
			return fail("--policy: expected lru, slru, lfu, min or belady, got", s);
		a->want[p] = any = 1;
	}
	return any ? 0 : fail("--policy: expected policies, got", v);
}

/* 0, 1 (--help printed) or 2 (message printed). */
static int parse(int argc, char **argv, args *a)
{
	*a = (args){.want = {1, 1, 1, 1}, .hints = 1};
	for (int i = 1; i < argc; i++) {
		const char *o = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		int rc = 0;
		if (!strcmp(o, "--help") || !strcmp(o, "-h")) {
			fputs(usage, stdout);
			return 1;
		} else if (!strcmp(o, "--slots") && v) {
			rc = parse_slots(a, v), i++;
		} else if (!strcmp(o, "--policy") && v) {
			rc = parse_policies(a, v), i++;
		} else if (!strcmp(o, "--hints") && v) {
			if (strcmp(v, "on") != 0 && strcmp(v, "off") != 0)
				return fail("--hints: expected on or off, got", v);
			a->hints = v[1] == 'n', i++;
		} else if (o[0] == '-' || a->path != NULL) {
			return fail("unexpected argument", o);
		} else {
			a->path = o;
		}
		if (rc != 0)
			return rc;
	}
	return a->path ? 0 : fail("no trace given:", "");
}

static void print_recorded(const rpl_trace *t, const char *path)
{
	const rpl_recorded *r = &t->rec;
	printf("%s: %zu calls over %.3f s, %llu keys, at most %u held at once; recorded on %u slots of %llu KiB\n",
	       path, t->n, (double)t->duration_ns / 1e9, (unsigned long long)t->keys, t->peak_held, t->slots,
	       (unsigned long long)(t->slot_bytes >> 10));
	printf("ringfetch: %llu acquires, %llu misses (%llu of them hinted keys not yet copied), hit rate %.2f%%; "
	       "%.1f MiB read by misses, %.1f MiB by %llu hints\n",
	       (unsigned long long)r->acquires, (unsigned long long)r->misses, (unsigned long long)r->hinted,
	       pct(r->hits, r->acquires), mib(r->miss_bytes), mib(r->prefetch_bytes), (unsigned long long)r->prefetches);
}

/* The rows of one slot count: 0, or 1 out of memory. */
static int print_slots(rpl_trace *t, const args *a, unsigned slots)
{
	rpl_result best;
	int have_min = rpl_simulate(t, RPL_MIN, slots, 0, &best) == 0;
	for (int p = 0; p < RPL_NPOLICIES; p++) {
		if (!a->want[p])
			continue;
		rpl_result x = best;
		int s = p == RPL_MIN ? (have_min ? 0 : -1) : rpl_simulate(t, (rpl_policy)p, slots, a->hints, &x);
		if (s == -1) {
			printf("%8u %-6s %12s   (cannot replay: the trace holds %u keys at once)\n", slots,
			       rpl_policy_name((rpl_policy)p), "-", t->peak_held);
			continue;
		}
		if (s != 0) {
			fprintf(stderr, "ringfetch-replay: out of memory\n");
			return 1;
		}
		char hr[24] = "-", vs[24] = "-";
		if (p != RPL_MIN && a->hints)
			snprintf(hr, sizeof hr, "%llu", (unsigned long long)x.hint_reads);
		if (have_min && best.misses > 0)
			snprintf(vs, sizeof vs, "%.3fx", (double)x.misses / (double)best.misses);
		printf("%8u %-6s %12llu %12.1f %8.2f%% %12s %10s\n", slots, rpl_policy_name((rpl_policy)p),
		       (unsigned long long)x.misses, mib(x.miss_bytes + x.hint_bytes), pct(x.hits, x.acquires), hr, vs);
	}
	return 0;
}

int main(int argc, char **argv)
{
	args a;
	int rc = parse(argc, argv, &a);
	if (rc != 0)
		return rc == 1 ? 0 : 2;
	rpl_trace t;
	char err[512];
	if (rpl_trace_load(&t, a.path, err, sizeof err) != 0) {
		fprintf(stderr, "ringfetch-replay: %s\n", err);
		return 1;
	}
	if (a.nslots == 0 && t.slots == 0) {
		fprintf(stderr, "ringfetch-replay: %s names no slot count: give --slots\n", a.path);
		rpl_trace_free(&t);
		return 2;
	}
	if (a.nslots == 0)
		a.slots[a.nslots++] = t.slots;
	if (t.trailing)
		fprintf(stderr, "ringfetch-replay: %s: %llu bytes of a partial last record ignored\n", a.path,
			(unsigned long long)t.trailing);
	print_recorded(&t, a.path);
	printf("%8s %-6s %12s %12s %9s %12s %10s\n", "slots", "policy", "misses", "MiB read", "hit rate",
	       "hint reads", "vs min");
	for (unsigned k = 0; k < a.nslots && rc == 0; k++)
		rc = print_slots(&t, &a, a.slots[k]);
	rpl_trace_free(&t);
	return rc;
}
