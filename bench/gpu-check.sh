#!/usr/bin/env bash
# gpu-check.sh — the GPU check, run from a bundle made by bench/gpu-bundle.sh (at most 4 minutes: each
# step has a timeout, 20 + 20 + 50 + 2 x 35 + 80 s = 4 min at worst):
#   1. is a GPU usable? If not: say why and exit 77;
#   2. the simulated-CUDA suite and the CUDA test suite (tests/test_cuda.c);
#   3. one pipeline run (ringfetch-gpu-bench --verify) under compute-sanitizer --tool racecheck and
#      --tool synccheck, when compute-sanitizer is installed (else: NOT RUN, said loudly);
#   4. ringfetch-gpu-bench: pinned H2D peak vs ringfetch at depths 1-4 over 1-64 MiB blocks, overlap
#      efficiency with a compute kernel as long as the copy, pageable sources through two-hop staging.
# Prints one line per step and the benchmark's table; exit status 0 when every step that ran passed.
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
BIN=$HERE/bin
status=0
step() { printf '\n== %s\n' "$*"; }

step "GPU"
out=$(timeout 20 "$BIN/ringfetch-gpu-bench" --verify 2>&1); rc=$?
echo "$out"
if [ $rc -eq 77 ]; then
  echo "gpu-check: no usable GPU here: SKIPPED (nothing was tested)"
  exit 77
fi
[ $rc -eq 0 ] || { echo "gpu-check: FAILED: verify run"; status=1; }
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,pcie.link.gen.current,pcie.link.width.current --format=csv,noheader

step "simulated-CUDA suite (test_cuda_record)"
timeout 20 "$BIN/test_cuda_record" --jobs 4 2>&1 | tail -2 || { echo "gpu-check: FAILED: test_cuda_record"; status=1; }

step "CUDA suite (test_cuda)"
RINGFETCH_ORACLE=1 timeout 50 "$BIN/test_cuda" --jobs 4 --timeout 45 2>&1 | grep -v '^\[----\]' | tail -6
[ "${PIPESTATUS[0]}" -eq 0 ] || { echo "gpu-check: FAILED: test_cuda"; status=1; }

step "compute-sanitizer"
CS=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer /usr/local/cuda*/compute-sanitizer/compute-sanitizer 2>/dev/null | head -1)
if [ -z "$CS" ]; then
  echo "gpu-check: compute-sanitizer NOT FOUND on this machine: racecheck and synccheck NOT RUN"
else
  for tool in racecheck synccheck; do
    if timeout 35 "$CS" --tool "$tool" --error-exitcode 3 "$BIN/ringfetch-gpu-bench" --verify 2>&1 | tail -3; then
      echo "compute-sanitizer --tool $tool: passed"
    else
      echo "gpu-check: FAILED: compute-sanitizer --tool $tool"; status=1
    fi
  done
fi

step "benchmark (ringfetch-gpu-bench)"
timeout 80 "$BIN/ringfetch-gpu-bench" --sizes 1M,4M,16M,64M --depths 1,2,3,4 --bytes 512M --reps 5 || {
  echo "gpu-check: FAILED: benchmark"; status=1; }

printf '\ngpu-check: %s\n' "$([ $status -eq 0 ] && echo 'all steps that ran passed' || echo 'FAILURES above')"
exit $status
