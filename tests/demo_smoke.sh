#!/usr/bin/env bash
# ringfetch-demo's command line: --help prints the usage on stdout and exits 0; --size takes the
# benchmarks' size suffixes (one parser, bench/options.c); bad options and values exit 2 with the usage.
# usage: demo_smoke.sh PATH/TO/ringfetch-demo
set -u
demo=$1
fails=0 passes=0
check() { if eval "$2"; then passes=$((passes + 1)); else echo "FAIL: $1"; fails=$((fails + 1)); fi; }
out=$(mktemp) err=$(mktemp)
trap 'rm -f "$out" "$err"' EXIT

for h in --help -h; do
	"$demo" $h >"$out" 2>"$err"; rc=$?
	check "$h exits 0 (got $rc)" "[ $rc -eq 0 ]"
	check "$h prints the usage on stdout" "grep -q '^usage: ringfetch-demo ' '$out' && grep -q -- '--size BYTES' '$out'"
	check "$h prints nothing on stderr" "[ ! -s '$err' ]"
done
for s in 4M:4194304 64K:65536 1.5M:1572864 4096:4096 1k:1024; do
	"$demo" --size "${s%%:*}" --blocks 8 >"$out" 2>&1; rc=$?
	check "--size ${s%%:*} exits 0 (got $rc)" "[ $rc -eq 0 ]"
	check "--size ${s%%:*} streams blocks of ${s#*:} bytes" "grep -Eq 'blocks +8 x ${s#*:} bytes' '$out'"
done
for bad in "--size 0" "--size 4Q" "--size 300M" "--size -1" "--size" "--blocks 1x" "--memory disk" "--bogus"; do
	"$demo" $bad >"$out" 2>"$err"; rc=$?
	check "$bad exits 2 (got $rc)" "[ $rc -eq 2 ]"
	check "$bad prints the usage on stderr" "grep -q '^usage: ringfetch-demo ' '$err'"
done
echo "$passes passed, $fails failed"
[ $fails -eq 0 ]
