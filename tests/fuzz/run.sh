#!/usr/bin/env bash
# Run the libFuzzer targets deterministically and bounded (`make fuzz`):
#   tests/fuzz/run.sh FUZZ_BIN_DIR GRAPH_RUNS CONFIG_RUNS
# Each fuzzer starts from a scratch copy of its seed corpus (the repository is never written), with
# -seed=1 -runs=N, and fails on any crash, sanitizer report, leak or timeout (-timeout=10 s per input).
# Reproducers of a failure are kept in FUZZ_BIN_DIR/artifacts/; replay one with `FUZZER FILE`.
set -euo pipefail
bin=$1 graph_runs=$2 config_runs=$3
src=$(cd "$(dirname "$0")" && pwd)
scratch=$(mktemp -d "${TMPDIR:-/tmp}/ringfetch-fuzz.XXXXXX")
trap 'rm -rf "$scratch"' EXIT
mkdir -p "$bin/artifacts"
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}
# The fuzzers set and read the RINGFETCH_* variables themselves: start from none.
unset RINGFETCH_CONFIG RINGFETCH_DEPTH RINGFETCH_BACKEND RINGFETCH_COPY_QUEUES RINGFETCH_STAGING \
	RINGFETCH_TRACE RINGFETCH_MEMORY_BUDGET RINGFETCH_ORACLE RINGFETCH_WAIT
status=0
run() { # name runs max_len
	local name=$1 runs=$2 max_len=$3 t0 rc=0
	cp -r "$src/corpus/$name" "$scratch/$name"
	t0=$(date +%s)
	"$bin/fuzz_$name" -seed=1 -runs="$runs" -max_len="$max_len" -timeout=10 -print_final_stats=1 \
		-artifact_prefix="$bin/artifacts/$name-" "$scratch/$name" >"$scratch/$name.log" 2>&1 || rc=$?
	local execs
	execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$scratch/$name.log")
	if [ "$rc" -ne 0 ]; then
		tail -n 80 "$scratch/$name.log"
		echo "fuzz_$name: FAILED (exit $rc) after $(( $(date +%s) - t0 )) s; reproducer in $bin/artifacts/"
		status=1
	else
		echo "fuzz_$name: ok, ${execs:-?} executions in $(( $(date +%s) - t0 )) s," \
			"corpus $(ls "$scratch/$name" | wc -l) inputs"
	fi
}
run graph "$graph_runs" 512
run config "$config_runs" 256
exit $status
