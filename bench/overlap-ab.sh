#!/usr/bin/env bash
# The arithmetic-bound ring, before and after the threads backend chose its schedule from its own runs,
# measured side by side (docs/PERFORMANCE.md, "The arithmetic-bound ring"):
#   before = with BEFORE_LIB=DIR, this bench binary on the libringfetch.so.1 in DIR (built from the
#            commit before the change: its ringfetch rows only, no locality), else RINGFETCH_OVERLAP=on
#            (every run on the lanes, the caller still taking over copies it would wait for);
#   after  = the default (overlap auto: lanes or inline per run shape, the caller taking over copies).
# Each round runs ringfetch-bench once each way (the order alternating from round to round), every run
# holding /tmp/rf-bench.lock; within a run every contestant alternates with the sequential baseline.
# With LOAD=N, N busy loops run beside each benchmark run (started and stopped inside the lock): cores
# shared with other work, reproducibly.
# Prints, per row, the medians over the rounds of time per block and of the ratios measured inside each
# run (ringfetch / sequential, ringfetch / hand, StarPU / ringfetch), and the machine's load.
# usage: [BEFORE_LIB=DIR] [LOAD=N] bench/overlap-ab.sh BUILD_DIR ROUNDS OUTDIR [ringfetch-bench options]
set -eu
build=$1 rounds=$2 out=$3
shift 3
args=("$@")
[ ${#args[@]} -gt 0 ] || args=(--backend threads --compute dsum --depth 2,3,4 --size 64K,1M --locality caller,copier
	--baselines sequential,hand,starpu --starpu-ncpu 2 --reps 9)
mkdir -p "$out"
# One benchmark run under the lock, with LOAD busy loops beside it.
bench() {
	flock /tmp/rf-bench.lock bash -c '
		n=${LOAD:-0}; pids=""
		for i in $(seq 1 "$n"); do (while :; do :; done) & pids="$pids $!"; done
		"$@"; rc=$?
		[ -n "$pids" ] && kill $pids
		exit $rc' bench "$@"
}
lscpu | grep -E '^(Model name|L1d|L2|L3|CPU\(s\))' > "$out/machine.txt" || true
for r in $(seq 1 "$rounds"); do
	order="before after"
	[ $((r % 2)) -eq 0 ] && order="after before"
	for w in $order; do
		echo "round $r $w (LOAD=${LOAD:-0}): $(uptime)" | tee -a "$out/load.txt"
		if [ "$w" = before ] && [ -n "${BEFORE_LIB:-}" ]; then
			LD_LIBRARY_PATH=$BEFORE_LIB bench "$build/bench/ringfetch-bench" "${args[@]}" --locality caller \
				--quiet --json "$out/$w-$r.json" > "$out/$w-$r.txt" 2>/dev/null
		elif [ "$w" = before ]; then
			RINGFETCH_OVERLAP=on bench "$build/bench/ringfetch-bench" "${args[@]}" --quiet \
				--json "$out/$w-$r.json" > "$out/$w-$r.txt" 2>/dev/null
		else
			bench "$build/bench/ringfetch-bench" "${args[@]}" --quiet --json "$out/$w-$r.json" \
				> "$out/$w-$r.txt" 2>/dev/null
		fi
	done
done
echo "end: $(uptime)" | tee -a "$out/load.txt"
python3 - "$out" "$rounds" <<'EOF'
import json, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
rows = {}
for w in ("before", "after"):
    for r in range(1, rounds + 1):
        recs = json.load(open(f"{out}/{w}-{r}.json"))["records"]
        by = {(x["method"], x["depth"], x["size"]): x for x in recs}
        for (m, d, s), x in by.items():
            seq = by.get(("sequential", 1, s))
            sp = by.get(("starpu", d, s))
            hand = by.get(("hand", d, s))
            row = rows.setdefault((s, m, d, w), {"us": [], "seq": [], "sp": [], "hand": [], "ran": []})
            row["us"].append(x["us_per_block"])
            row["ran"].append(x.get("ran", ""))
            if seq: row["seq"].append(x["us_per_block"] / seq["us_per_block"])
            if sp and m in ("ringfetch", "rf-local"): row["sp"].append(sp["us_per_block"] / x["us_per_block"])
            if hand and m in ("ringfetch", "rf-local"): row["hand"].append(x["us_per_block"] / hand["us_per_block"])
med = lambda v: statistics.median(v) if v else float("nan")
print(f"medians over {rounds} rounds; ratios taken inside each run")
print(f"{'size':>8} {'method':<10} {'depth':>5} {'which':<6} {'us/block':>10} {'/ seq':>7} {'starpu/':>8} {'/ hand':>7}  ran")
for (s, m, d, w) in sorted(rows, key=lambda k: (k[0], k[1] != "sequential", k[1], k[2], k[3] != "before")):
    x = rows[(s, m, d, w)]
    if m in ("sequential", "hand", "starpu") and w == "before":
        continue
    name = f"{s >> 20}M" if s >= 1 << 20 else f"{s >> 10}K"
    which = w if m in ("ringfetch", "rf-local") else ""
    print(f"{name:>8} {m:<10} {d:>5} {which:<6} {med(x['us']):>10.2f} {med(x['seq']):>7.2f} {med(x['sp']):>8.2f} "
          f"{med(x['hand']):>7.2f}  {','.join(sorted(set(x['ran'])))}")
EOF
