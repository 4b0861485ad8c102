#!/usr/bin/env bash
# cmake/jemalloc.sh — build ringfetch's private jemalloc into PREFIX (once; later calls return at once).
# usage: cmake/jemalloc.sh PREFIX
#
# Why a private build (docs/api.md, "Embedding"): Debian's libjemalloc is unprefixed and uses
# initial-exec TLS, so a library linked to it cannot be dlopen'ed late (Python ctypes: "cannot allocate
# memory in static TLS block") and it puts a second malloc into the process. This one is built from
# Debian's own jemalloc source package, with
#   --with-jemalloc-prefix=rf_je_          public API renamed (rf_je_mallocx, ...): no malloc override
#   --with-private-namespace=rf_jei_       internal symbols renamed too
#   --disable-initial-exec-tls             global-dynamic TLS: loadable with dlopen
#   --without-export --disable-cxx         nothing exported, no operator new
# and only its static PIC library (libjemalloc_pic.a) and headers are installed; CMake links that
# library into libringfetch with its symbols hidden (cmake/FindRingfetchJemalloc.cmake).
#
# The source comes through apt-get source with a deb-src entry for the running suite in a PRIVATE apt
# state directory (PREFIX.src/apt): the system's apt sources, lists and cache are not touched. Needs
# network access to the Debian mirror the system uses and dpkg-dev (dpkg-source). RF_JEMALLOC_SRC=DIR
# skips the download and builds an already unpacked jemalloc source tree instead.
set -euo pipefail
[ $# -eq 1 ] || { echo "usage: $0 PREFIX" >&2; exit 2; }
prefix=$1
# Bump when the configuration below changes: a cached build with another stamp is rebuilt.
stamp="rf-jemalloc-1 prefix=rf_je_ ns=rf_jei_ no-ie-tls no-export no-cxx static-pic"
if [ -f "$prefix/lib/libjemalloc_pic.a" ] && [ -f "$prefix/include/jemalloc/jemalloc.h" ] &&
	[ "$(cat "$prefix/.rf-stamp" 2>/dev/null)" = "$stamp" ]; then
	exit 0
fi

mkdir -p "$prefix"
prefix=$(cd "$prefix" && pwd)
work=$prefix.src
rm -rf "$work" && mkdir -p "$work"
log=$work/build.log
fail() { echo "jemalloc.sh: $*" >&2; [ -f "$log" ] && { echo "--- end of $log:" >&2; tail -n 25 "$log" >&2; }; exit 1; }

if [ -n "${RF_JEMALLOC_SRC:-}" ]; then
	src=$(cd "$RF_JEMALLOC_SRC" && pwd) || fail "RF_JEMALLOC_SRC=$RF_JEMALLOC_SRC is not a directory"
else
	command -v apt-get >/dev/null || fail "no apt-get: build jemalloc by hand (see docs/api.md) or set RF_JEMALLOC_SRC"
	command -v dpkg-source >/dev/null || fail "dpkg-source missing (apt-get install dpkg-dev; make deps does it)"
	# The suite and mirror of the running system (bookworm here), as a deb-src entry of our own.
	. /etc/os-release
	suite=${VERSION_CODENAME:-bookworm}
	mirror=http://deb.debian.org/debian
	if [ -f /etc/apt/sources.list.d/debian.sources ]; then
		m=$(sed -n 's/^URIs: *\([^ ]*\).*/\1/p' /etc/apt/sources.list.d/debian.sources | grep -v security | head -n 1)
		[ -n "$m" ] && mirror=$m
	fi
	apt=$work/apt
	mkdir -p "$apt/sources.list.d" "$apt/lists/partial" "$apt/cache/archives/partial"
	keyring=/usr/share/keyrings/debian-archive-keyring.gpg
	{
		echo "Types: deb-src"
		echo "URIs: $mirror"
		echo "Suites: $suite"
		echo "Components: main"
		[ -f "$keyring" ] && echo "Signed-By: $keyring"
	} >"$apt/sources.list.d/rf-src.sources"
	opts=(-o "Dir::Etc::sourcelist=/dev/null" -o "Dir::Etc::sourceparts=$apt/sources.list.d"
		-o "Dir::State::Lists=$apt/lists" -o "Dir::Cache=$apt/cache" -o "APT::Sandbox::User=root" -qq)
	echo "jemalloc.sh: fetching Debian's jemalloc source ($suite, $mirror) into $work"
	apt-get "${opts[@]}" update >"$log" 2>&1 || fail "apt-get update (private deb-src list) failed"
	(cd "$work" && apt-get "${opts[@]}" source --download-only jemalloc) >>"$log" 2>&1 ||
		fail "apt-get source jemalloc failed"
	dsc=$(ls "$work"/jemalloc_*.dsc | head -n 1)
	(cd "$work" && dpkg-source -x "$dsc" jemalloc) >>"$log" 2>&1 || fail "dpkg-source -x $dsc failed"
	src=$work/jemalloc
fi

echo "jemalloc.sh: building $(cat "$src/VERSION" 2>/dev/null || echo '?') (static, prefixed rf_je_) into $prefix"
build=$work/build
mkdir -p "$build"
# As Debian's rules do on amd64/i386: 4 KiB pages, 2 MiB huge pages (not what the build machine reports).
page=""
case "$(uname -m)" in x86_64 | i?86) page="--with-lg-page=12" ;; *) page="--with-lg-page=16" ;; esac
(cd "$build" && "$src/configure" --prefix="$prefix" --with-version=VERSION \
	--with-jemalloc-prefix=rf_je_ --with-private-namespace=rf_jei_ --disable-initial-exec-tls \
	--without-export --disable-cxx --disable-shared --enable-static --disable-doc --disable-prof \
	$page --with-lg-hugepage=21 CFLAGS="-O2 -g -fPIC") >>"$log" 2>&1 || fail "configure failed"
jobs=$(nproc 2>/dev/null || echo 2)
make -C "$build" -j "$jobs" build_lib_static >>"$log" 2>&1 || fail "make build_lib_static failed"
make -C "$build" install_lib_static install_include >>"$log" 2>&1 || fail "make install failed"
[ -f "$prefix/lib/libjemalloc_pic.a" ] || fail "no libjemalloc_pic.a after install"
echo "$stamp" >"$prefix/.rf-stamp"
# Keep the log, drop the sources and objects (the cache is the installed prefix).
mv "$log" "$prefix/build.log"
rm -rf "$work"
echo "jemalloc.sh: done ($prefix)"
