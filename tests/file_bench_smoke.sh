#!/usr/bin/env bash
# Smoke test of the file benchmarks (docs/files.md): bad options exit 2; a tiny cold-file stream runs
# every contestant and writes its JSON; a tiny decode loop served from a file runs every contestant in
# its child process (inside a memory cgroup when the process may make one) with matching checksums.
# usage: file_bench_smoke.sh PATH/TO/ringfetch-file-bench PATH/TO/ringfetch-serve-file-bench OUTDIR [BUDGET]
# BUDGET (default 12M): the serving run's memory budget; sanitizer builds need far more (shadow memory).
set -u
fb=$1 sb=$2 out=$3 budget=${4:-12M}
fails=0 passes=0
check() { if eval "$2"; then passes=$((passes + 1)); else echo "FAIL: $1"; fails=$((fails + 1)); fi; }

for bad in "--size 100" "--depth 0" "--qd 1,2,3,4,5,6,7,8,9" "--reps 0" "--file-size 1M" "--bogus"; do
	"$fb" $bad >/dev/null 2>&1; rc=$?
	check "ringfetch-file-bench $bad exits 2 (got $rc)" "[ $rc -eq 2 ]"
done
for bad in "--budget 1M" "--reps 0" "--layers 0"; do
	"$sb" $bad >/dev/null 2>&1; rc=$?
	check "ringfetch-serve-file-bench $bad exits 2 (got $rc)" "[ $rc -eq 2 ]"
done

rm -rf "$out" && mkdir -p "$out"
"$fb" --file "$out/f.dat" --file-size 16M --size 64K,1M --depth 2 --qd 4 --reps 1 --no-fio --quiet \
	--json "$out/f.json" > "$out/f.txt" 2> "$out/f.err"
rc=$?
cat "$out/f.err" >&2
check "file bench exits 0 (got $rc)" "[ $rc -eq 0 ]"
# Per size: 6 contestants (mmap, pread, hand, reader, ringfetch, rf-auto) x 2 (with and without compute) + compute alone;
# a build without liburing has no hand io_uring loop, nor has a process that io_uring refuses (it says so).
n=26
ldd "$fb" 2>/dev/null | grep -q liburing || n=22
grep -q '^hand/4: io_uring_queue_init: .*its figures are left out' "$out/f.err" && n=22
check "file bench JSON has $n records" "[ \$(grep -c '\"method\"' \"$out/f.json\") -eq $n ]"
if command -v python3 >/dev/null; then
	check "file bench JSON parses" "python3 -c 'import json,sys; json.load(open(sys.argv[1]))' \"$out/f.json\""
fi
check "file bench removed its file" "[ ! -e \"$out/f.dat\" ]"
check "file bench says how ringfetch reads" "grep -q '^ringfetch on threads: ' \"$out/f.txt\""

"$sb" --file "$out/s.dat" --layers 3 --experts 4 --expert-size 1M --steps 2 --rounds 1 --reps 1 --budget "$budget" \
	--quiet --json "$out/s.json" > "$out/s.txt"
rc=$?
check "serve-file bench exits 0 (got $rc)" "[ $rc -eq 0 ]"
if command -v python3 >/dev/null; then
	check "serve-file bench JSON parses" "python3 -c 'import json,sys; json.load(open(sys.argv[1]))' \"$out/s.json\""
fi
check "serve-file bench JSON has 6 records" "[ \$(grep -c '\"contestant\"' \"$out/s.json\") -eq 6 ]"
check "serve-file bench prints the hint modes beside keyed" "grep -qE '^hints, keyed = 1: wrong [0-9.]+x' \"$out/s.txt\" && grep -q '^hints-route ' \"$out/s.txt\""
check "serve-file bench names the hint modes' bound" "grep -qE 'hints-wrong, hints-route: hint_bytes [0-9]+ KiB = [0-9]+ slot' \"$out/s.txt\""
check "serve-file bench says whether the budget holds" "grep -qE 'budget [0-9]+ MiB \((enforced|NOT enforced)' \"$out/s.txt\""

echo "$passes passed, $fails failed"
[ $fails -eq 0 ]
