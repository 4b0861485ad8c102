#!/usr/bin/env bash
# Smoke test of ringfetch-serve-bench (the MoE decode loop): bad options exit 2 with a message; a tiny
# run on both CPU backends writes a table, JSON, CSV and a PNG with one record per contestant, every
# contestant's checksum equal to the direct line's; a keyed cache smaller than a layer's experts still
# computes right; and a contestant fed a wrong expert (RFS_SERVE_FAULT, the negative control) fails the
# run instead of reporting a time.
# usage: serve_smoke.sh PATH/TO/ringfetch-serve-bench OUTDIR
set -u
bench=$1 out=$2
fails=0 passes=0
check() { if eval "$2"; then passes=$((passes + 1)); else echo "FAIL: $1"; fails=$((fails + 1)); fi; }

for bad in "--layers 0" "--layers 2000" "--experts 300" "--expert-size 100" "--expert-size 128M" "--topk 9" \
           "--hint-next 9" "--backend cuda" "--backend cpu,,threads" "--contestants bogus" "--skew -1" \
           "--compute-us x" "--rounds 0" "--slots 0" "--depth 2000" "--batch 65" "--bogus 1" "--steps"; do
	msg=$("$bench" $bad 2>&1 >/dev/null); rc=$?
	check "'$bad' exits 2 (got $rc)" "[ $rc -eq 2 ]"
	check "'$bad' says why" "[ -n \"\$msg\" ]"
done

rm -rf "$out" && mkdir -p "$out"
tiny="--layers 4 --experts 6 --expert-size 4K --topk 2 --batch 2 --steps 4 --rounds 3 --compute-us 2 --quiet"
"$bench" $tiny --backend cpu,threads --slots 8 --depth 3 --json "$out/s.json" --csv "$out/s.csv" \
	--plot "$out/s.png" > "$out/table.txt"
rc=$?
check "tiny run exits 0 (got $rc)" "[ $rc -eq 0 ]"
# Records: sequential, direct, spin + (layer, keyed, keyed-hints) x 2 backends = 9.
n=9
check "table has $n contestants" "[ \$(grep -cE '^(sequential|direct|spin|layer|keyed|keyed-hints) ' \"$out/table.txt\") -eq $n ]"
check "JSON has $n records" "[ \$(grep -c '\"contestant\"' \"$out/s.json\") -eq $n ]"
check "CSV has a header and $n rows" "[ \$(wc -l < \"$out/s.csv\") -eq $((n + 1)) ]"
check "no checksum differs" "! grep -q 'CHECKSUM DIFFERS' \"$out/table.txt\" && ! grep -q '\"checksum_ok\": false' \"$out/s.json\""
check "one checksum for all" "[ \$(grep -o '\"checksum\": \"[0-9a-f]*\"' \"$out/s.json\" | sort -u | wc -l) -eq 1 ]"
check "both backends measured" "grep -q '\"backend\": \"cpu\"' \"$out/s.json\" && grep -q '\"backend\": \"threads\"' \"$out/s.json\""
check "JSON names the machine and the model" "grep -q '\"machine\"' \"$out/s.json\" && grep -q '\"arith_iters\"' \"$out/s.json\""
check "PNG written" "[ -s \"$out/s.png\" ] && head -c 8 \"$out/s.png\" | grep -q PNG"
if command -v python3 >/dev/null; then
	check "JSON parses, ratios and keyed hit rates present, direct copies nothing" "python3 - \"$out/s.json\" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))['records']
assert all(x['ms_per_step'] > 0 and x['ratio_vs_sequential'] > 0 and x['ratio_vs_spin'] > 0 for x in r)
assert all((x['hit_rate'] is not None) == x['contestant'].startswith('keyed') for x in r)
assert all(x['mib_copied_per_step'] == 0 for x in r if x['contestant'] == 'direct')
assert all(x['mib_copied_per_step'] > 0 for x in r if x['contestant'] in ('sequential', 'spin', 'layer'))
EOF"
	check "JSON: keyed reads at least MIN's, and lru's replay of keyed reads what keyed read" "python3 - \"$out/s.json\" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))['records']
k = [x for x in r if x['contestant'].startswith('keyed')]
assert len(k) == 4 and all(x['run_acquires'] > 0 and 0 < x['run_min_misses'] <= x['run_reads'] for x in k)
assert all(x['run_lru_replay_reads'] == x['run_reads'] == x['run_misses'] for x in k if x['contestant'] == 'keyed')
assert all(x['run_min_misses'] is None for x in r if not x['contestant'].startswith('keyed'))
EOF"
fi
check "the table shows MIN beside the keyed misses" "grep -q \"Belady's MIN\" \"$out/table.txt\""

# A keyed cache of 2 slots under a batch that routes up to 4 experts a layer, hints included.
"$bench" $tiny --backend cpu,threads --slots 2 --hint-next 3 --contestants keyed,keyed-hints > "$out/small.txt"
rc=$?
check "2-slot keyed run exits 0 (got $rc)" "[ $rc -eq 0 ]"
check "2-slot keyed run: 5 contestants, checksums equal" \
	"[ \$(grep -cE '^(direct|keyed|keyed-hints) ' \"$out/small.txt\") -eq 5 ] && ! grep -q DIFFERS \"$out/small.txt\""

# Negative control: each contestant in turn computes a wrong expert; the run must fail, saying so.
for c in sequential spin layer keyed keyed-hints; do
	msg=$(RFS_SERVE_FAULT=$c "$bench" $tiny --backend threads --slots 8 2>&1 >/dev/null); rc=$?
	check "a wrong $c fails the run (got $rc)" "[ $rc -eq 1 ]"
	check "a wrong $c is named" "echo \"\$msg\" | grep -q \"^$c \""
done

echo "$passes passed, $fails failed"
[ $fails -eq 0 ]
