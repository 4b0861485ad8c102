#!/usr/bin/env python3
"""tests/python/unload.py - libringfetch loaded, used from Python threads and unloaded, again and again.

usage: unload.py PATH/TO/libringfetch.so [CYCLES]

A binding that reloads its module (or a plugin host) loads the library with ctypes.CDLL and may close
it again with _ctypes.dlclose. Each cycle here loads the library, runs a "cpu" and a "threads" pipeline
with a Python callback and allocates staging memory from two Python threads that stay alive across the
dlclose and exit after it (their thread-specific data destructors run then), and closes it. After a
few warm-up cycles, the process's mappings and resident set must not grow (docs/api.md, "Unloading").
Standard library only; exit 0 on success, 1 on failure (a crash fails ctest by itself). The ctypes
structures come from smoke.py, next to this file."""
import ctypes
import os
import sys
import threading

import _ctypes

sys.dont_write_bytecode = True  # the source tree is never written
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from smoke import COMPUTE, RF_OK, Params  # noqa: E402  (the ABI mirror of include/ringfetch.h)

WARMUP = 3
# Growth allowed over the cycles after the warm-up. The mapped bytes of a Python process swing by about
# 8 MiB either way from cycle to cycle (glibc's per-thread arenas, Python's own); the code this test was
# written against added 8 MiB of mappings per cycle.
MAPPED_BOUND = 32 << 20
RESIDENT_BOUND = 8 << 20
NBLOCKS, BLOCK = 16, 8192
BLOCKS = [bytes((i * 31 + j) & 0xFF for j in range(BLOCK)) for i in range(NBLOCKS)]
SRCS = (ctypes.c_void_p * NBLOCKS)(*[ctypes.cast(ctypes.c_char_p(b), ctypes.c_void_p) for b in BLOCKS])
SIZES = (ctypes.c_size_t * NBLOCKS)(*[BLOCK] * NBLOCKS)


def mapped_bytes():
    """Mapped bytes but for bare reservations (---p): glibc reserves 64 MiB of address space per malloc
    arena, and creates arenas as threads come and go, at moments of its own choosing."""
    total = 0
    with open("/proc/self/maps") as f:
        for line in f:
            span, perms = line.split(None, 2)[:2]
            if perms != "---p":
                lo, hi = span.split("-")
                total += int(hi, 16) - int(lo, 16)
    return total


def resident_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def load(path):
    lib = ctypes.CDLL(path)
    lib.rf_err_name.restype = ctypes.c_char_p
    lib.rf_err_name.argtypes = [ctypes.c_int]
    lib.rf_errmsg.restype = ctypes.c_char_p
    lib.rf_pipeline_create.argtypes = [ctypes.POINTER(Params), ctypes.POINTER(ctypes.c_void_p)]
    lib.rf_pipeline_run.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_void_p),
                                    ctypes.POINTER(ctypes.c_size_t), COMPUTE, ctypes.c_void_p]
    lib.rf_pipeline_destroy.argtypes = [ctypes.c_void_p]
    lib.rf_pipeline_destroy.restype = None
    lib.rf_staging_alloc.argtypes = [ctypes.c_size_t, ctypes.c_char_p, ctypes.POINTER(ctypes.c_void_p)]
    lib.rf_staging_free.argtypes = [ctypes.c_void_p]
    lib.rf_staging_free.restype = None
    return lib


def use(lib):
    """One pipeline per CPU backend (every block checked in Python) and two staging allocations;
    returns a list of failures."""
    bad = []

    def err(rc):
        return "%s (%s)" % (lib.rf_err_name(rc).decode(), (lib.rf_errmsg() or b"").decode())

    for backend in (b"cpu", b"threads"):
        params = Params(depth=3, slot_bytes=BLOCK, backend=backend)
        p = ctypes.c_void_p()
        rc = lib.rf_pipeline_create(ctypes.byref(params), ctypes.byref(p))
        if rc != RF_OK:
            bad.append("rf_pipeline_create(%s): %s" % (backend.decode(), err(rc)))
            continue
        seen = []

        def compute(user, bp):
            b = bp.contents
            seen.append(b.bytes == BLOCK and ctypes.string_at(b.data, b.bytes) == BLOCKS[b.index])
            return 0

        cb = COMPUTE(compute)
        rc = lib.rf_pipeline_run(p, NBLOCKS, SRCS, SIZES, cb, None)
        if rc != RF_OK or len(seen) != NBLOCKS or not all(seen):
            bad.append("rf_pipeline_run(%s): %s, %d computes" % (backend.decode(), err(rc), len(seen)))
        lib.rf_pipeline_destroy(p)
    for size in (1 << 20, 200):
        mem = ctypes.c_void_p()
        rc = lib.rf_staging_alloc(size, None, ctypes.byref(mem))
        if rc != RF_OK:
            bad.append("rf_staging_alloc(%d): %s" % (size, err(rc)))
            continue
        ctypes.memset(mem, 0x5A, size)
        lib.rf_staging_free(mem)
    return bad


def cycle(path, failures):
    lib = load(path)
    used = threading.Barrier(3)
    closed = threading.Event()

    def user():
        failures.extend(use(lib))
        used.wait()
        closed.wait()  # the library is closed now; the thread exits afterwards

    threads = [threading.Thread(target=user) for _ in range(2)]
    for t in threads:
        t.start()
    used.wait()
    _ctypes.dlclose(lib._handle)
    closed.set()
    for t in threads:
        t.join()


def main():
    if len(sys.argv) not in (2, 3):
        print(__doc__.splitlines()[2], file=sys.stderr)
        return 2
    path = sys.argv[1]
    cycles = int(sys.argv[2]) if len(sys.argv) == 3 else 100
    failures = []
    for _ in range(WARMUP):
        cycle(path, failures)
    map0, rss0 = mapped_bytes(), resident_bytes()
    for _ in range(cycles):
        cycle(path, failures)
    map1, rss1 = mapped_bytes(), resident_bytes()
    mib = 1024.0 * 1024.0
    print("unload.py: %d cycles (2 threads): mapped %.1f -> %.1f MiB, resident %.1f -> %.1f MiB"
          % (cycles, map0 / mib, map1 / mib, rss0 / mib, rss1 / mib))
    if map1 > map0 + MAPPED_BOUND:
        failures.append("mappings grew by %.1f MiB" % ((map1 - map0) / mib))
    if rss1 > rss0 + RESIDENT_BOUND:
        failures.append("resident set grew by %.1f MiB" % ((rss1 - rss0) / mib))
    for f in failures:
        print("unload.py: FAIL:", f, file=sys.stderr)
    if failures:
        return 1
    print("unload.py: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
