#!/usr/bin/env bash
# bench/gpu-bundle.sh DIR — build, here, a self-contained folder that runs the GPU check on a machine
# with only the NVIDIA driver and no package registry:
#   DIR/gpu-check.sh              the check (see bench/gpu-check.sh)
#   DIR/bin/                      test_cuda, test_cuda_hw, test_cuda_record, test_cuda_process,
#                                 test_cuda_auto, test_cuda_keyed, test_cuda_files, race_cuda,
#                                 ringfetch-gpu-bench (CUDA runtime linked
#                                 statically; RPATH $ORIGIN/../lib, as DT_RPATH so that it also serves
#                                 the libraries' own dependencies)
#   DIR/lib/                      every shared library they need except glibc's and the driver's
#   DIR/MANIFEST                  what was built, from which commit, on which machine
# The binaries need a glibc at least as new as this machine's (printed in MANIFEST). DIR must not
# exceed 64 MiB; the script fails if it does.
set -euo pipefail
DIR=${1:?usage: bench/gpu-bundle.sh DIR}
SRC=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${RF_BUNDLE_BUILD:-$SRC/build-gpu-bundle}
JOBS=${JOBS:-$(nproc)}

cmake -S "$SRC" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DRINGFETCH_CUDA=ON -DRINGFETCH_WERROR=ON \
  -DRINGFETCH_BENCH=ON -DRINGFETCH_TESTS=ON \
  '-DCMAKE_BUILD_RPATH=$ORIGIN/../lib' -DCMAKE_EXE_LINKER_FLAGS=-Wl,--disable-new-dtags >/dev/null
cmake --build "$BUILD" -j "$JOBS" --target test_cuda test_cuda_hw test_cuda_record test_cuda_process \
  test_cuda_auto test_cuda_keyed test_cuda_files race_cuda ringfetch-gpu-bench >/dev/null

rm -rf "$DIR"
mkdir -p "$DIR/bin" "$DIR/lib"
BINS=("$BUILD/tests/test_cuda" "$BUILD/tests/test_cuda_hw" "$BUILD/tests/test_cuda_record" "$BUILD/tests/test_cuda_process"
      "$BUILD/tests/test_cuda_auto" "$BUILD/tests/test_cuda_keyed" "$BUILD/tests/test_cuda_files"
      "$BUILD/tests/race_cuda" "$BUILD/bench/ringfetch-gpu-bench")
cp "${BINS[@]}" "$DIR/bin/"
cp "$SRC/bench/gpu-check.sh" "$DIR/gpu-check.sh"
chmod +x "$DIR/gpu-check.sh" "$DIR"/bin/*
# The simulated-CUDA programs need no symbols on the GPU machine (compute-sanitizer runs the others):
# stripped they are a quarter of the size, which keeps the bundle well under its 64 MiB.
if command -v strip >/dev/null; then
  strip "$DIR"/bin/test_cuda_record "$DIR"/bin/test_cuda_process "$DIR"/bin/test_cuda_auto \
    "$DIR"/bin/test_cuda_keyed "$DIR"/bin/test_cuda_files "$DIR"/bin/race_cuda
fi

# glibc's own libraries and the driver come from the target machine; everything else travels.
system_lib() {
  case "$1" in
    linux-vdso.so*|ld-linux*|libc.so*|libm.so*|libpthread.so*|libdl.so*|librt.so*|libresolv.so*|libutil.so*) return 0 ;;
    libcuda.so*|libnvidia*) return 0 ;;
  esac
  return 1
}
for b in "${BINS[@]}"; do
  ldd "$b" | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' | while read -r name path; do
    system_lib "$name" && continue
    [ -e "$DIR/lib/$name" ] || cp -L "$path" "$DIR/lib/$name"
  done
done

{
  echo "ringfetch GPU bundle"
  echo "commit: $(git -C "$SRC" rev-parse --short HEAD 2>/dev/null || echo unknown)$(git -C "$SRC" diff --quiet 2>/dev/null || echo ' (with local changes)')"
  echo "built: $(date -u +%Y-%m-%dT%H:%MZ) on $(uname -srm)"
  echo "needs: glibc >= $(ldd --version | head -1 | awk '{print $NF}'), an NVIDIA driver for CUDA $(nvcc --version | sed -n 's/.*release \([0-9.]*\).*/\1/p')"
  echo "bin: $(ls "$DIR/bin" | tr '\n' ' ')"
  echo "lib: $(ls "$DIR/lib" | tr '\n' ' ')"
} > "$DIR/MANIFEST"

bytes=$(du -sb "$DIR" | cut -f1)
echo "gpu-bundle: $DIR ($((bytes / 1024 / 1024)) MiB): $(ls "$DIR/bin" | wc -l) binaries, $(ls "$DIR/lib" | wc -l) libraries"
if [ "$bytes" -gt $((64 * 1024 * 1024)) ]; then
  echo "gpu-bundle: $DIR is over 64 MiB" >&2
  exit 1
fi
