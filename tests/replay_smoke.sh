#!/usr/bin/env bash
# Smoke test of ringfetch-replay: bad options and unreadable traces exit 2 and 1 with a message; a trace
# recorded through RINGFETCH_KEYED_TRACE from a real serving loop (ringfetch-serve-bench's keyed
# contestant) replays, and lru at the recording pipeline's slot count has exactly the misses ringfetch
# had, with MIN's at most that.
# usage: replay_smoke.sh PATH/TO/ringfetch-replay PATH/TO/ringfetch-serve-bench OUTDIR
set -u
replay=$1 serve=$2 out=$3
fails=0 passes=0
check() { if eval "$2"; then passes=$((passes + 1)); else echo "FAIL: $1"; fails=$((fails + 1)); fi; }

rm -rf "$out" && mkdir -p "$out"
for bad in "" "--slots 0 x" "--slots 4,,x x" "--policy fifo x" "--hints maybe x" "a b" "--bogus x"; do
	msg=$("$replay" $bad 2>&1 >/dev/null); rc=$?
	check "'$bad' exits 2 (got $rc)" "[ $rc -eq 2 ]"
	check "'$bad' says why" "[ -n \"\$msg\" ]"
done
msg=$("$replay" "$out/none" 2>&1); rc=$?
check "a missing trace exits 1 naming it (got $rc)" "[ $rc -eq 1 ] && echo \"\$msg\" | grep -q none"
echo "not a trace" > "$out/text"
msg=$("$replay" "$out/text" 2>&1); rc=$?
check "a file that is no trace exits 1 (got $rc)" "[ $rc -eq 1 ] && echo \"\$msg\" | grep -q RFKTRACE"

# keyed only (no hints: lru is then exact), 12 slots for 4 x 6 experts
RINGFETCH_KEYED_TRACE="$out/t-%p" "$serve" --layers 4 --experts 6 --expert-size 4K --topk 2 --batch 2 --steps 6 \
	--rounds 2 --compute-us 1 --quiet --backend cpu --slots 12 --contestants keyed --json "$out/s.json" > "$out/s.txt"
rc=$?
check "the traced serving run exits 0 (got $rc)" "[ $rc -eq 0 ]"
trace=$(ls "$out"/t-* 2>/dev/null | head -1)
check "the variable wrote one trace" "[ \$(ls \"$out\"/t-* 2>/dev/null | wc -l) -eq 1 ] && [ -s \"$trace\" ]"
"$replay" "$trace" --slots 12,6,2 > "$out/r.txt"
rc=$?
check "replay exits 0 (got $rc)" "[ $rc -eq 0 ]"
check "replay prints 4 policies x 3 slot counts" "[ \$(grep -cE '^ +(12|6|2) (lru|slru|lfu|min) ' \"$out/r.txt\") -eq 12 ]"
misses=$(sed -n 's/^ringfetch: [0-9]* acquires, \([0-9]*\) misses.*/\1/p' "$out/r.txt")
lru=$(awk '$1 == 12 && $2 == "lru" {print $3}' "$out/r.txt")
min=$(awk '$1 == 12 && $2 == "min" {print $3}' "$out/r.txt")
json=$(grep -o '"run_misses": [0-9]*' "$out/s.json" | grep -o '[0-9]*$')
check "lru at 12 slots has ringfetch's misses ($lru, recorded $misses, the benchmark's $json)" \
	"[ -n \"$misses\" ] && [ \"$lru\" = \"$misses\" ] && [ \"$misses\" = \"$json\" ]"
check "min at most lru ($min <= $lru)" "[ -n \"$min\" ] && [ $min -le $lru ]"
"$replay" "$trace" --slots 12 --policy belady --hints off > "$out/r2.txt"
check "belady alone: one row, min's count" "[ \$(awk '\$2 == \"min\" {print \$3}' \"$out/r2.txt\") = \"$min\" ]"

echo "$passes passed, $fails failed"
[ $fails -eq 0 ]
