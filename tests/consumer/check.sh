#!/usr/bin/env bash
# The installed package, as an outside project sees it: install an already-built ringfetch build tree
# into a temporary prefix, check what was installed, then build tests/consumer/main.c against it twice,
# with find_package(ringfetch) and with pkg-config, and run both programs.
# usage: check.sh BUILD_DIR WORK_DIR      (WORK_DIR is emptied first)
#
# Sanitizer builds: a library built with RINGFETCH_SANITIZE depends on the sanitizer runtime, which must
# be the first library loaded (ASan refuses to start otherwise), so the consumer is then built with the
# same -fsanitize flags, as any program linking a sanitized library has to be.
set -u
[ $# -eq 2 ] || { echo "usage: $0 BUILD_DIR WORK_DIR" >&2; exit 2; }
build=$(cd "$1" && pwd) || exit 2
here=$(cd "$(dirname "$0")" && pwd)
work=$2
rm -rf "$work" && mkdir -p "$work" && work=$(cd "$work" && pwd) || exit 2
fails=0 passes=0
check() { if eval "$2"; then passes=$((passes + 1)); else echo "FAIL: $1"; fails=$((fails + 1)); fi; }
# run LOG CMD...: run a command with its output in $work/LOG; on failure show the end of that log.
run() {
	local log=$work/$1; shift
	"$@" >"$log" 2>&1 && return 0
	echo "--- $* failed; end of $log:"; tail -n 30 "$log"; return 1
}
cache() { sed -n "s/^$1:[A-Z]*=//p" "$build/CMakeCache.txt" | head -n 1; }

[ -f "$build/CMakeCache.txt" ] || { echo "FAIL: $build is not a CMake build tree"; echo "0 passed, 1 failed"; exit 1; }
cmake_bin=$(cache CMAKE_COMMAND); [ -x "$cmake_bin" ] || cmake_bin=cmake
cc=$(cache CMAKE_C_COMPILER); [ -n "$cc" ] || cc=cc
generator=$(cache CMAKE_GENERATOR)
pkg_config=$(cache PKG_CONFIG_EXECUTABLE); [ -x "$pkg_config" ] || pkg_config=pkg-config
src=$(cache CMAKE_HOME_DIRECTORY)
libdir_rel=$(cache CMAKE_INSTALL_LIBDIR); [ -n "$libdir_rel" ] || libdir_rel=lib
incdir_rel=$(cache CMAKE_INSTALL_INCLUDEDIR); [ -n "$incdir_rel" ] || incdir_rel=include
san=$(cache RINGFETCH_SANITIZE)
sanflags=""
if [ -n "$san" ]; then
	sanflags="-fsanitize=$san -fno-omit-frame-pointer"
	echo "note: built with RINGFETCH_SANITIZE=$san: the consumer is built with '$sanflags' too"
fi
ver=$(sed -n 's/^#define RF_VERSION_\(MAJOR\|MINOR\|PATCH\) \([0-9]*\).*/\2/p' "$src/include/ringfetch.h" | paste -sd.)
major=${ver%%.*}

prefix=$work/prefix
libdir=$prefix/$libdir_rel
incdir=$prefix/$incdir_rel

# ---- what is installed ------------------------------------------------------------------------------
check "cmake --install into $prefix" "run install.log '$cmake_bin' --install '$build' --prefix '$prefix'"
for h in $(cd "$src/include" && find . -name '*.h' | sort); do
	check "header ${h#./} installed" "cmp -s '$src/include/$h' '$incdir/$h'"
done
check "header ringfetch/config.h (generated) installed" "cmp -s '$build/include/ringfetch/config.h' '$incdir/ringfetch/config.h'"
if grep -q '^#define RF_HAVE_CUDA 1' "$build/include/ringfetch/config.h"; then cuda=1; else cuda=0; fi
echo "note: built with the cuda backend: $cuda"
check "libringfetch.so.$ver installed" "[ -f '$libdir/libringfetch.so.$ver' ] && [ ! -L '$libdir/libringfetch.so.$ver' ]"
check "libringfetch.so.$major -> libringfetch.so.$ver" "[ \"\$(readlink '$libdir/libringfetch.so.$major')\" = libringfetch.so.$ver ]"
check "libringfetch.so (namelink) installed" "[ -L '$libdir/libringfetch.so' ]"
if command -v readelf >/dev/null; then
	check "SONAME is libringfetch.so.$major" \
		"readelf -d '$libdir/libringfetch.so.$ver' | grep -q 'SONAME.*\[libringfetch\.so\.$major\]'"
fi
check "no static library installed" "[ -z \"\$(find '$prefix' -name '*.a')\" ]"
if command -v nm >/dev/null; then
	check "libringfetch exports no jemalloc symbol" \
		"! nm -D --defined-only '$libdir/libringfetch.so.$ver' | grep -E -q ' (rf_je|je_|mallocx|mallctl|malloc|free)'"
	check "libringfetch needs no libjemalloc" "! readelf -d '$libdir/libringfetch.so.$ver' | grep -q 'NEEDED.*jemalloc'"
fi
# What docs/api.md ("Linking") says the library needs at run time: hwloc, liburing (unless built without
# io_uring) and the C library; the .pc file's Requires.private must say the same.
uring=0
if command -v readelf >/dev/null; then
	needed=$(readelf -d "$libdir/libringfetch.so.$ver" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | paste -sd' ')
	echo "note: libringfetch needs: $needed"
	printf '%s\n' $needed | grep -q '^liburing\.so\.' && uring=1
	check "libringfetch needs libhwloc" "printf '%s\n' $needed | grep -q '^libhwloc\.so\.'"
	if [ -z "$san" ]; then
		check "libringfetch needs nothing but hwloc, liburing and the C library (got: $needed)" \
			"! printf '%s\n' $needed | grep -Ev '^(libhwloc\.so\.|liburing\.so\.2$|libc\.so\.6$|ld-linux|libm\.so\.6$|libdl\.so\.2$|librt\.so\.1$|libpthread\.so\.0$)'"
	fi
fi
pcfile=$libdir/pkgconfig/ringfetch.pc
if [ "$uring" = 1 ]; then
	check "ringfetch.pc links liburing statically (the library needs liburing.so.2)" \
		"grep -q '^Libs.private:.* -luring' '$pcfile'"
else
	check "ringfetch.pc names no liburing (the library does not need it)" "! grep -q uring '$pcfile'"
fi
# Its headers include neither hwloc's nor liburing's: a consumer needs no .pc file (-dev package) of theirs.
check "ringfetch.pc requires no other .pc file" "! grep -q '^Requires' '$pcfile'"
cmakedir_rel=$(cache RINGFETCH_INSTALL_CMAKEDIR); [ -n "$cmakedir_rel" ] || cmakedir_rel=$libdir_rel/cmake/ringfetch
pkgdir=$prefix/$cmakedir_rel
check "CMake package installed" "[ -f '$pkgdir/ringfetchConfig.cmake' ] && [ -f '$pkgdir/ringfetchConfigVersion.cmake' ] && [ -f '$pkgdir/ringfetchTargets.cmake' ]"
if [ "$cuda" = 1 ]; then
	# Only CUDA's headers (CUDA::toolkit links nothing), for <ringfetch/cuda.h>.
	check "ringfetch::ringfetch carries CUDA::toolkit and nothing else" \
		"[ \"\$(sed -n 's/^ *INTERFACE_LINK_LIBRARIES \"\\(.*\\)\"/\\1/p' '$pkgdir/ringfetchTargets.cmake')\" = CUDA::toolkit ]"
	check "ringfetch.pc Cflags carry CUDA's include directory" "grep -q '^Cflags: .* -I/' '$libdir/pkgconfig/ringfetch.pc'"
else
	check "ringfetch::ringfetch carries no link dependencies" "! grep -q INTERFACE_LINK_LIBRARIES '$pkgdir/ringfetchTargets.cmake'"
fi
for v in "0.1:incompatible" "1.0:compatible" "$ver:compatible" "$major:compatible" "$((major + 1)).0:incompatible"; do
	got=$("$cmake_bin" -DFILE="$pkgdir/ringfetchConfigVersion.cmake" -DWANT="${v%%:*}" -P "$here/version_check.cmake" 2>&1)
	check "find_package(ringfetch ${v%%:*}) is ${v#*:} with $ver (got '$got')" "[ '$got' = '${v#*:}' ]"
done

# ---- find_package ---------------------------------------------------------------------------------
cb=$work/cmake-build
if check "consumer configures with find_package" \
	"run cmake-configure.log '$cmake_bin' -S '$here' -B '$cb' ${generator:+-G '$generator'} -DCMAKE_C_COMPILER='$cc' \
	 -DCMAKE_PREFIX_PATH='$prefix' -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF -DCMAKE_C_FLAGS='$sanflags'"; then
	check "find_package found the package in the temporary prefix" \
		"grep -q '^ringfetch_DIR:PATH=$pkgdir\$' '$cb/CMakeCache.txt'"
	check "consumer builds with ringfetch::ringfetch" "run cmake-build.log '$cmake_bin' --build '$cb'"
	# No LD_LIBRARY_PATH: CMake gives the build-tree executable a RUNPATH to the imported library.
	check "find_package consumer runs" "run cmake-run.log env -u LD_LIBRARY_PATH '$cb/consumer'"
	check "find_package consumer says ok" "grep -q '^consumer: ok (ringfetch $ver)' '$work/cmake-run.log'"
	check "find_package consumer saw RF_HAVE_CUDA=$cuda" "grep -q '^consumer: RF_HAVE_CUDA $cuda' '$work/cmake-run.log'"
fi

# ---- pkg-config -----------------------------------------------------------------------------------
export PKG_CONFIG_PATH="$libdir/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
if check "pkg-config finds ringfetch $ver" "[ \"\$('$pkg_config' --modversion ringfetch 2>&1)\" = '$ver' ]"; then
	check "pkg-config prefix is the temporary prefix" \
		"[ \"\$(cd \"\$('$pkg_config' --variable=prefix ringfetch)\" && pwd -P)\" = \"\$(cd '$prefix' && pwd -P)\" ]"
	check "pkg-config --cflags --libs works with no other package's .pc file" \
		"PKG_CONFIG_LIBDIR='$libdir/pkgconfig' PKG_CONFIG_PATH= '$pkg_config' --cflags --libs ringfetch >/dev/null"
	libs=$("$pkg_config" --libs ringfetch)
	check "shared link needs only -lringfetch (got '$libs')" \
		"[ \"\$(printf '%s\n' $libs | grep -v '^-L')\" = -lringfetch ]"
	slibs=$("$pkg_config" --static --libs ringfetch)
	# jemalloc is private and inside libringfetch (static, hidden): never a dependency of a consumer.
	check "static link adds hwloc and pthread, not jemalloc (got '$slibs')" \
		"printf '%s\n' $slibs | grep -qx -- -lhwloc && printf '%s\n' $slibs | grep -qx -- -lpthread && ! printf '%s\n' $slibs | grep -q jemalloc"
	if [ "$uring" = 1 ]; then
		check "static link adds liburing (got '$slibs')" "printf '%s\n' $slibs | grep -qx -- -luring"
	fi
	# Every library the static link line names must be there to link against, and the program must run.
	pcsexe=$work/pc-static-consumer
	check "consumer builds with pkg-config --static" \
		"run pc-static-build.log '$cc' -std=c11 -Wall -Wextra -Wpedantic -Werror $sanflags \$('$pkg_config' --cflags --static ringfetch) \
		 '$here/main.c' -o '$pcsexe' \$('$pkg_config' --libs --static ringfetch)"
	check "pkg-config --static consumer runs" "run pc-static-run.log env LD_LIBRARY_PATH='$libdir' '$pcsexe'"
	check "pkg-config --static consumer says ok" "grep -q '^consumer: ok (ringfetch $ver)' '$work/pc-static-run.log'"
	pcexe=$work/pc-consumer
	check "consumer builds with pkg-config" \
		"run pc-build.log '$cc' -std=c11 -Wall -Wextra -Wpedantic -Werror $sanflags \$('$pkg_config' --cflags ringfetch) \
		 '$here/main.c' -o '$pcexe' \$('$pkg_config' --libs ringfetch)"
	check "pkg-config consumer loads the installed library" \
		"LD_LIBRARY_PATH='$libdir' ldd '$pcexe' | grep -q 'libringfetch\.so\.$major => $libdir/'"
	check "pkg-config consumer runs" "run pc-run.log env LD_LIBRARY_PATH='$libdir' '$pcexe'"
	check "pkg-config consumer says ok" "grep -q '^consumer: ok (ringfetch $ver)' '$work/pc-run.log'"
	check "pkg-config consumer saw RF_HAVE_CUDA=$cuda" "grep -q '^consumer: RF_HAVE_CUDA $cuda' '$work/pc-run.log'"
fi

echo "$passes passed, $fails failed"
[ $fails -eq 0 ]
