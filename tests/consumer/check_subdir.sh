#!/usr/bin/env bash
# ringfetch as a sub-project: configure tests/consumer/subdir (add_subdirectory of this source tree),
# build its consumer, run it; then check that RINGFETCH_BUILD_JEMALLOC=OFF without a jemalloc is a clear
# configure error.
# usage: check_subdir.sh SOURCE_DIR WORK_DIR JEMALLOC_ROOT [C_COMPILER]   (WORK_DIR is emptied first)
set -u
[ $# -ge 3 ] || { echo "usage: $0 SOURCE_DIR WORK_DIR JEMALLOC_ROOT [C_COMPILER]" >&2; exit 2; }
src=$(cd "$1" && pwd) || exit 2
work=$2
jroot=$3
cc=${4:-cc}
here=$(cd "$(dirname "$0")" && pwd)
rm -rf "$work" && mkdir -p "$work" && work=$(cd "$work" && pwd) || exit 2
run() {
	local log=$work/$1; shift
	"$@" >"$log" 2>&1 && return 0
	echo "FAIL: $*; end of $log:"; tail -n 30 "$log"; exit 1
}
run configure.log cmake -S "$here/subdir" -B "$work/build" -DRINGFETCH_SOURCE_DIR="$src" \
	-DRINGFETCH_JEMALLOC_ROOT="$jroot" -DCMAKE_C_COMPILER="$cc" -DCMAKE_BUILD_TYPE=Release
run build.log cmake --build "$work/build" -j 2 --target consumer
run run.log "$work/build/consumer"
grep -q '^consumer: ok' "$work/run.log" || { echo "FAIL: consumer did not say ok"; cat "$work/run.log"; exit 1; }
# Without a private jemalloc and with RINGFETCH_BUILD_JEMALLOC=OFF, configuring stops with a clear error
# (it would otherwise build one: the default).
if cmake -S "$here/subdir" -B "$work/build-nojem" -DRINGFETCH_SOURCE_DIR="$src" \
	-DRINGFETCH_JEMALLOC_ROOT="$work/no-jemalloc" -DRINGFETCH_BUILD_JEMALLOC=OFF \
	-DCMAKE_C_COMPILER="$cc" >"$work/nojem.log" 2>&1; then
	echo "FAIL: configured without jemalloc and RINGFETCH_BUILD_JEMALLOC=OFF"; exit 1
fi
grep -q "RINGFETCH_BUILD_JEMALLOC is OFF" "$work/nojem.log" ||
	{ echo "FAIL: no clear error without jemalloc:"; tail -n 20 "$work/nojem.log"; exit 1; }
[ ! -e "$work/no-jemalloc" ] || { echo "FAIL: RINGFETCH_BUILD_JEMALLOC=OFF built something"; exit 1; }
echo "sub-project consumer: ok ($(cat "$work/run.log"))"
