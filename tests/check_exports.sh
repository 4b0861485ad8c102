#!/usr/bin/env bash
# The shipped shared library carries no test code (base/test_hooks.h) and exports only the public API.
#   check_exports.sh LIBRINGFETCH_SO
# Fails if the library (its full symbol table, not only the dynamic one) defines a test-only symbol,
# if it exports any rf__ internal, or if it leaves an rf_ symbol undefined (a test-only function called
# from shipped code that the testing build alone defines).
set -u
lib=$1
test -f "$lib" || { echo "no library at $lib"; exit 1; }
fail=0
test_only='rf__test_hooks|rf__prog_drop_war|rf__staging_get_stats|rf__staging_arena_of|rf__pipeline_engine|rf__backend_register|rf__fault|rf__fault_arm|rf__fault_steps|rf__tp_load|rf__reader_counters_get|rf__reader_inflight'
if nm "$lib" | grep -Ew "($test_only)"; then
	echo "FAIL: test-only symbols in $lib (they belong in the RF_TESTING build, ringfetch_static)"
	fail=1
fi
if nm -D --defined-only "$lib" | awk '{print $NF}' | grep -E '^rf__'; then
	echo "FAIL: internal rf__ symbols exported from $lib"
	fail=1
fi
if nm -u "$lib" | awk '{print $NF}' | grep -E '^rf_'; then
	echo "FAIL: $lib references rf_ symbols it does not define"
	fail=1
fi
n=$(nm -D --defined-only "$lib" | awk '{print $NF}' | grep -c '^rf_')
if [ "$n" -eq 0 ]; then
	echo "FAIL: $lib exports no rf_ symbol (is this the library?)"
	fail=1
fi
[ $fail -eq 0 ] && echo "ok: $n rf_ symbols exported, no rf__ symbol, no test-only code"
exit $fail
