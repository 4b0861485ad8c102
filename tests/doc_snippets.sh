#!/usr/bin/env bash
# The C snippets of the docs compile and run as written: every ```c block of each DOC is a whole program,
# built against the library of this build tree with the strict flags of tests/consumer (C11, -Wall
# -Wextra -Wpedantic -Werror, plus SANFLAGS in sanitizer builds), then run; it must exit 0.
# usage: doc_snippets.sh CC SOURCE_DIR BUILD_INCLUDE_DIR LIBRINGFETCH WORK_DIR "SANFLAGS" DOC...
set -u
[ $# -ge 7 ] || { echo "usage: $0 CC SOURCE_DIR BUILD_INCLUDE_DIR LIBRINGFETCH WORK_DIR SANFLAGS DOC..." >&2; exit 2; }
cc=$1 src=$2 binc=$3 lib=$4 work=$5 sanflags=$6
shift 6
rm -rf "$work" && mkdir -p "$work" || exit 2
libdir=$(cd "$(dirname "$lib")" && pwd)
fails=0 passes=0 n=0
for doc in "$@"; do
	# One file per block: snippet-N.c, and where it starts in the doc.
	awk -v dir="$work" -v doc="$doc" '
		/^```c$/ { n++; f = sprintf("%s/snippet-%d.c", dir, n); printf "%s:%d\n", doc, NR + 1 > (f ".where"); inb = 1; next }
		/^```/ && inb { inb = 0; close(f); next }
		inb { print > f }' "$src/$doc"
	for f in "$work"/snippet-*.c; do
		[ -e "$f" ] || continue
		n=$((n + 1))
		where=$(cat "$f.where")
		exe=${f%.c}
		if ! $cc -std=c11 -Wall -Wextra -Wpedantic -Werror $sanflags -I"$src/include" -I"$binc" "$f" -o "$exe" \
			-L"$libdir" -lringfetch -Wl,-rpath,"$libdir" >"$exe.log" 2>&1; then
			echo "FAIL: $where does not compile:"; cat "$exe.log"; fails=$((fails + 1))
		elif ! (cd "$work" && "$exe") >"$exe.run" 2>&1; then
			echo "FAIL: $where does not run (exit status $?):"; cat "$exe.run"; fails=$((fails + 1))
		else
			echo "ok: $where"; passes=$((passes + 1))
		fi
		mv "$f" "$f.done"
	done
done
[ $n -gt 0 ] || { echo "FAIL: no C snippet found in $*"; exit 1; }
echo "$passes passed, $fails failed"
[ $fails -eq 0 ]
