#!/usr/bin/env python3
"""tests/python/smoke.py - libringfetch hosted by Python through ctypes, as a binding would.

usage: smoke.py PATH/TO/libringfetch.so

Loads the shared library late with ctypes.CDLL (no LD_PRELOAD: the private jemalloc inside has no
initial-exec TLS), creates a "cpu" pipeline, streams blocks from Python bytes with a Python callback
that checks every block (index order, slot, length, bytes), reads the stats and destroys the pipeline.
Also checks that no jemalloc symbol became visible in the process. Standard library only; exit 0 on
success, 1 on failure. The ctypes structures mirror include/ringfetch.h (its ABI is fixed within a
major version: docs/api.md, "ABI policy")."""
import ctypes
import sys

RF_OK = 0


class Params(ctypes.Structure):  # rf_pipeline_params
    _fields_ = [
        ("depth", ctypes.c_uint),
        ("slot_bytes", ctypes.c_size_t),
        ("backend", ctypes.c_char_p),
        ("device", ctypes.c_int),
        ("flags", ctypes.c_uint),
        ("copy_queues", ctypes.c_uint),
        ("staging", ctypes.c_char_p),
        ("memory", ctypes.c_int),
        ("wait", ctypes.c_char_p),
        ("locality", ctypes.c_uint64),
        ("hint_bytes", ctypes.c_uint64),
        ("reserved", ctypes.c_uint64 * 6),
    ]


class Block(ctypes.Structure):  # rf_block
    _fields_ = [
        ("index", ctypes.c_size_t),
        ("slot", ctypes.c_uint),
        ("data", ctypes.c_void_p),
        ("bytes", ctypes.c_size_t),
        ("stream", ctypes.c_void_p),
    ]


class QueueStats(ctypes.Structure):  # rf_queue_stats
    _fields_ = [(n, ctypes.c_uint64) for n in ("busy_ns", "wait_ns", "copies", "computes")]


class Stats(ctypes.Structure):  # rf_stats
    _fields_ = [
        ("blocks", ctypes.c_size_t),
        ("bytes", ctypes.c_uint64),
        ("wall_ns", ctypes.c_uint64),
        ("timed", ctypes.c_int),
        ("nqueues", ctypes.c_uint),
        ("queue", QueueStats * 64),
        ("copy_ns", ctypes.c_uint64),
        ("exposed_ns", ctypes.c_uint64),
        ("overlap_efficiency", ctypes.c_double),
    ] + [(n, ctypes.c_uint64) for n in (
        "runs", "total_blocks", "total_bytes", "total_wall_ns", "timed_runs", "total_exposed_ns",
        "total_wait_ns", "file_bytes", "total_file_bytes", "schedule", "inline_runs",
        "handoff_runs")] + [("reserved", ctypes.c_uint64 * 11)]


COMPUTE = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(Block))


def main():
    if len(sys.argv) != 2:
        print(__doc__.splitlines()[2], file=sys.stderr)
        return 2
    lib = ctypes.CDLL(sys.argv[1])
    failures = []

    def check(cond, what):
        if not cond:
            failures.append(what)
            print("smoke.py: FAIL:", what, file=sys.stderr)

    lib.rf_version.restype = ctypes.c_uint
    lib.rf_version_string.restype = ctypes.c_char_p
    lib.rf_err_name.restype = ctypes.c_char_p
    lib.rf_err_name.argtypes = [ctypes.c_int]
    lib.rf_errmsg.restype = ctypes.c_char_p
    lib.rf_pipeline_create.argtypes = [ctypes.POINTER(Params), ctypes.POINTER(ctypes.c_void_p)]
    lib.rf_pipeline_run.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_void_p),
                                    ctypes.POINTER(ctypes.c_size_t), COMPUTE, ctypes.c_void_p]
    lib.rf_pipeline_collect_stats.argtypes = [ctypes.c_void_p, ctypes.c_int]
    lib.rf_pipeline_stats.argtypes = [ctypes.c_void_p, ctypes.POINTER(Stats)]
    lib.rf_pipeline_depth.argtypes = [ctypes.c_void_p]
    lib.rf_pipeline_depth.restype = ctypes.c_uint
    lib.rf_pipeline_backend.argtypes = [ctypes.c_void_p]
    lib.rf_pipeline_backend.restype = ctypes.c_char_p
    lib.rf_pipeline_destroy.argtypes = [ctypes.c_void_p]
    lib.rf_pipeline_destroy.restype = None

    def err(rc):
        return "%s (%s)" % (lib.rf_err_name(rc).decode(), (lib.rf_errmsg() or b"").decode())

    print("smoke.py: ringfetch %s loaded into Python %s" % (lib.rf_version_string().decode(),
                                                          sys.version.split()[0]))
    # The private jemalloc is invisible to the process: ctypes.CDLL(None) searches the global scope.
    glob = ctypes.CDLL(None)
    for name in ("mallocx", "mallctl", "rf_je_mallocx", "rf_je_malloc"):
        check(not hasattr(glob, name), "%s is visible in the process" % name)

    # The layout tests/test_abi.c pins on the C side (LP64).
    check(ctypes.sizeof(Params) == 128, "sizeof(rf_pipeline_params) mirror is %d" % ctypes.sizeof(Params))

    depth, slot_bytes = 3, 1024
    # Python bytes objects as the sources: sizes 0 .. slot_bytes, both edges included.
    blocks = [bytes((i * 7 + j) & 0xFF for j in range((i * 131) % (slot_bytes + 1))) for i in range(41)]
    blocks[1] = bytes(slot_bytes)
    n = len(blocks)
    srcs = (ctypes.c_void_p * n)(*[ctypes.cast(ctypes.c_char_p(b), ctypes.c_void_p) for b in blocks])
    sizes = (ctypes.c_size_t * n)(*[len(b) for b in blocks])

    params = Params(depth=depth, slot_bytes=slot_bytes, backend=b"cpu")
    p = ctypes.c_void_p()
    rc = lib.rf_pipeline_create(ctypes.byref(params), ctypes.byref(p))
    check(rc == RF_OK and p.value, "rf_pipeline_create: " + err(rc))
    if rc != RF_OK:
        return 1
    check(lib.rf_pipeline_depth(p) == depth, "depth %d" % lib.rf_pipeline_depth(p))
    check(lib.rf_pipeline_backend(p) == b"cpu", "backend %r" % lib.rf_pipeline_backend(p))
    check(lib.rf_pipeline_collect_stats(p, 1) == RF_OK, "rf_pipeline_collect_stats")

    for run in range(2):
        seen = {"next": 0, "bad": []}

        def compute(user, bp):
            b = bp.contents
            i = b.index
            ok = (i == seen["next"] and i < n and b.slot == i % depth and b.bytes == len(blocks[i])
                  and ctypes.string_at(b.data, b.bytes) == blocks[i] and b.stream is None)
            if not ok:
                seen["bad"].append(i)
            seen["next"] = i + 1
            return 0

        cb = COMPUTE(compute)  # kept alive for the whole call
        rc = lib.rf_pipeline_run(p, n, srcs, sizes, cb, None)
        check(rc == RF_OK, "run %d: rf_pipeline_run: %s" % (run, err(rc)))
        check(seen["next"] == n and not seen["bad"],
              "run %d: %d computes, bad blocks %s" % (run, seen["next"], seen["bad"]))
        st = Stats()
        rc = lib.rf_pipeline_stats(p, ctypes.byref(st))
        check(rc == RF_OK, "rf_pipeline_stats: " + err(rc))
        check(st.blocks == n and st.bytes == sum(map(len, blocks)),
              "run %d: stats say %d blocks, %d bytes" % (run, st.blocks, st.bytes))
        check(st.timed == 1 and st.nqueues >= 1 and st.queue[0].computes == n and st.wall_ns > 0,
              "run %d: timed %d, nqueues %d, computes %d" % (run, st.timed, st.nqueues, st.queue[0].computes))
        check(st.schedule in (0, 1, 2) and st.inline_runs <= st.runs and st.reserved[0] == 0,
              "run %d: schedule %d, inline_runs %d of %d" % (run, st.schedule, st.inline_runs, st.runs))

    # A callback that fails stops the run with RF_ECALLBACK; the pipeline stays usable.
    cb = COMPUTE(lambda user, bp: 7 if bp.contents.index == 5 else 0)
    rc = lib.rf_pipeline_run(p, n, srcs, sizes, cb, None)
    check(lib.rf_err_name(rc) == b"RF_ECALLBACK", "failing callback gave %s" % err(rc))

    lib.rf_pipeline_destroy(p)
    if failures:
        print("smoke.py: %d failure(s)" % len(failures), file=sys.stderr)
        return 1
    print("smoke.py: ok (%d blocks checked in Python, twice)" % n)
    return 0


if __name__ == "__main__":
    sys.exit(main())
