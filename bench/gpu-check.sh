#!/usr/bin/env bash
# gpu-check.sh — the GPU check, run from a bundle made by bench/gpu-bundle.sh, in at most 5 minutes on
# one GPU (each step has a timeout: 20 + 6 x 30 + 2 x 60 + 2 x 40 + 2 x 25 + 150 s = 10 minutes at the
# very worst if every step hangs; about 3 minutes expected on an H200 when they pass, not yet measured):
#   1. is a GPU usable? No GPU: say why and exit 77 (SKIPPED). A driver older than the CUDA runtime
#      the bundle was built with: FAIL (exit 1) with both versions — never a skip;
#   2. the simulated-CUDA suites (test_cuda_record, test_cuda_process, test_cuda_auto, test_cuda_keyed,
#      test_cuda_files) and race_cuda
#      (the walker, staging dispatchers and copy team under stress: more cores here than in CI);
#   3. the CUDA suites on the GPU: test_cuda (payloads, WAR with slow computes, reuse, exec) and
#      test_cuda_hw (negative controls: a dropped WAR and a dropped RAW wait must be caught by the
#      payload check; a device other than the current one, and the current one restored; concurrent
#      pipelines on several threads; back-pressure beyond 64 staged copies; a faulting kernel; cancel;
#      depth = auto; read-only registration; whole-range DMA checks);
#   4. compute-sanitizer memcheck and initcheck over one test_cuda test, racecheck and synccheck over
#      ringfetch-gpu-bench --verify, when compute-sanitizer is there (its absence is reported: NOT RUN,
#      and the check says so in its last line);
#   5. ringfetch-gpu-bench: pinned H2D peak vs ringfetch at depths 1-4 (and copy_queues 2) over 64 KiB ..
#      64 MiB blocks, overlap efficiency with a compute kernel as long as the copy, pageable sources
#      through two-hop staging, host time per enqueued block; its targets are asserted (exit 3 = NOT
#      MET: the table is printed first).
# Exit status 0 when every step that ran passed, 1 otherwise, 77 when there is no GPU.
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
BIN=$HERE/bin
status=0
notrun=""
step() { printf '\n== %s\n' "$*"; }
fail() { echo "gpu-check: FAILED: $*"; status=1; }

step "GPU"
out=$(timeout 20 "$BIN/ringfetch-gpu-bench" --verify 2>&1); rc=$?
echo "$out"
if [ $rc -eq 77 ]; then
  echo "gpu-check: no usable GPU here: SKIPPED (nothing was tested)"
  exit 77
fi
if echo "$out" | grep -q "older than the CUDA runtime"; then
  echo "gpu-check: FAILED: the driver is too old for this bundle (see the versions above)"
  exit 1
fi
[ $rc -eq 0 ] || fail "verify run (exit $rc)"
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,pcie.link.gen.current,pcie.link.width.current --format=csv,noheader

step "simulated-CUDA suites (record, process, auto, keyed, files), race_cuda"
for t in test_cuda_record test_cuda_process test_cuda_auto test_cuda_keyed test_cuda_files; do
  timeout 30 "$BIN/$t" --jobs 4 2>&1 | tail -2
  [ "${PIPESTATUS[0]}" -eq 0 ] || fail "$t"
done
timeout 30 "$BIN/race_cuda" --iterations 300 2>&1 | tail -3
[ "${PIPESTATUS[0]}" -eq 0 ] || fail "race_cuda"

step "CUDA suites (test_cuda, test_cuda_hw)"
for t in test_cuda test_cuda_hw; do
  RINGFETCH_ORACLE=1 timeout 60 "$BIN/$t" --jobs 4 --timeout 55 2>&1 | grep -v '^\[----\]' | tail -8
  [ "${PIPESTATUS[0]}" -eq 0 ] || fail "$t"
done

step "compute-sanitizer"
CS=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer /usr/local/cuda*/compute-sanitizer/compute-sanitizer 2>/dev/null | head -1)
if [ -z "$CS" ]; then
  echo "gpu-check: compute-sanitizer NOT FOUND on this machine: memcheck, initcheck, racecheck, synccheck NOT RUN"
  notrun=" (compute-sanitizer NOT RUN: not installed)"
else
  for tool in memcheck initcheck; do
    # One suite, one process per test (Criterion forks): the sanitizer follows the children.
    if timeout 40 "$CS" --tool "$tool" --target-processes all --error-exitcode 3 "$BIN/test_cuda" --jobs 1 \
         --filter 'cuda/payload_registered_sources' 2>&1 | tail -3; then
      echo "compute-sanitizer --tool $tool (test_cuda: payload_registered_sources): passed"
    else
      fail "compute-sanitizer --tool $tool"
    fi
  done
  for tool in racecheck synccheck; do
    if timeout 25 "$CS" --tool "$tool" --error-exitcode 3 "$BIN/ringfetch-gpu-bench" --verify 2>&1 | tail -3; then
      echo "compute-sanitizer --tool $tool (ringfetch-gpu-bench --verify): passed"
    else
      fail "compute-sanitizer --tool $tool"
    fi
  done
fi

step "benchmark (ringfetch-gpu-bench)"
timeout 150 "$BIN/ringfetch-gpu-bench" --sizes 64K,256K,1M,4M,16M,64M --depths 1,2,3,4 --bytes 512M --reps 3
rc=$?
[ $rc -eq 0 ] || fail "benchmark (exit $rc$([ $rc -eq 3 ] && echo ': a target NOT MET'))"

printf '\ngpu-check: %s%s\n' "$([ $status -eq 0 ] && echo 'all steps that ran passed' || echo 'FAILURES above')" "$notrun"
exit $status
