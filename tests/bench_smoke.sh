#!/usr/bin/env bash
# Smoke test of ringfetch-bench: bad options exit 2 with a message; a tiny sweep writes JSON, CSV (one
# record per (backend, depth, size, method)), a PNG, a trace and a DOT file.
# usage: bench_smoke.sh PATH/TO/ringfetch-bench OUTDIR
set -u
bench=$1 out=$2
fails=0 passes=0
check() { if eval "$2"; then passes=$((passes + 1)); else echo "FAIL: $1"; fails=$((fails + 1)); fi; }

for bad in "--depth 0" "--depth 1,,2" "--depth 2000" "--size 0" "--size 3" "--size 2G" "--size 64Q" \
           "--backend gpu" "--compute spin" "--compute ratio:x" "--jitter 2" "--reps 0" "--bogus 1" \
           "--copy-queues 2 --depth 2" "--blocks" "--locality anywhere" "--compute dsum:2"; do
	msg=$("$bench" $bad 2>&1 >/dev/null); rc=$?
	check "'$bad' exits 2 (got $rc)" "[ $rc -eq 2 ]"
	check "'$bad' says why" "[ -n \"\$msg\" ]"
done

rm -rf "$out" && mkdir -p "$out"
"$bench" --backend cpu,threads --depth 1,2,3 --size 4K,64K --blocks 64 --reps 2 --baselines sequential,hand \
	--quiet --json "$out/s.json" --csv "$out/s.csv" --plot "$out/s.png" --trace "$out/t.json" \
	--dot "$out/g.dot" > "$out/table.txt"
rc=$?
check "tiny sweep exits 0 (got $rc)" "[ $rc -eq 0 ]"
# Records: 2 sizes x (2 backends x 3 depths ringfetch + 3 depths hand + 1 sequential) = 2 x 10 = 20.
check "JSON has 20 records" "[ \$(grep -c '\"method\"' \"$out/s.json\") -eq 20 ]"
check "CSV has a header and 20 rows" "[ \$(wc -l < \"$out/s.csv\") -eq 21 ]"
check "JSON names the machine" "grep -q '\"machine\"' \"$out/s.json\""
check "both backends measured" "grep -q '\"backend\": \"cpu\"' \"$out/s.json\" && grep -q '\"backend\": \"threads\"' \"$out/s.json\""
check "PNG written" "[ -s \"$out/s.png\" ] && head -c 8 \"$out/s.png\" | grep -q PNG"
check "trace has copy and compute slices" "grep -q '\"cat\":\"copy\"' \"$out/t.json\" && grep -q '\"cat\":\"compute\"' \"$out/t.json\""
check "DOT written" "grep -q '^digraph' \"$out/g.dot\""
if command -v python3 >/dev/null; then
	check "JSON parses" "python3 -c 'import json,sys; json.load(open(sys.argv[1]))' \"$out/s.json\""
	check "trace is a valid JSON document (python3 -m json.tool)" "python3 -m json.tool \"$out/t.json\" >/dev/null"
fi
# The arithmetic-bound model and both localities: every block's payload checked, a "ran" column.
"$bench" --backend threads --depth 2,3 --size 64K --blocks 16 --reps 2 --compute dsum --locality caller,copier \
	--baselines sequential --quiet --json "$out/d.json" > "$out/dsum.txt"
rc=$?
check "dsum sweep with both localities exits 0 (got $rc)" "[ $rc -eq 0 ]"
check "dsum: ringfetch and rf-local records (1 + 2 x 2)" "[ \$(grep -c '\"method\"' \"$out/d.json\") -eq 5 ] && grep -q '\"method\": \"rf-local\"' \"$out/d.json\""
check "dsum: the model is named" "grep -q '\"compute\": \"dsum\"' \"$out/d.json\""
check "the table says how runs ran" "grep -q ' ran\$' \"$out/dsum.txt\" && grep -Eq '(ring|inline|local)' \"$out/dsum.txt\""
echo "$passes passed, $fails failed"
[ $fails -eq 0 ]
