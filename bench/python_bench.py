#!/usr/bin/env python3
"""bench/python_bench.py — what the Python layer costs over the C library (docs/python.md).

  1. acquire + release of a resident key from Python (backend threads, one call pair timed at a time,
     perf_counter_ns; p50 and p99, and the mean over batches, which has no timer in it);
  2. a run of 64 blocks of 1 MiB (threads, depth 2) with a numpy compute (the float32 sum of the
     block), against the same run driven from C (bench/python_ref.c, compiled here against
     BUILD/libringfetch.so: the same blocks and pipeline), its compute numpy's own sum called through
     an embedded interpreter (the same compute: the runs differ only in who drives the pipeline) and
     numpy's summation order written in C (what a C program would run), both checked to give numpy's
     sum bit for bit. Medians of three alternating batches of R runs; each side's median compute time
     is printed too;
  3. what a block costs the Python layer itself: runs of 64 blocks of 64 bytes, next to no compute,
     Python against C (ns per block).

usage: python_bench.py [--build build] [--reps R] [--json OUT]
Hold the benchmark lock when timing on a shared machine: flock /tmp/rf-bench.lock python3 python_bench.py
"""
import argparse
import json
import os
import subprocess
import sys
import sysconfig
import tempfile
import time

# OpenBLAS (numpy's BLAS) keeps a pool of threads that spin for work after numpy is imported; on a small
# machine they take CPU from the pipeline's lanes on both sides, and nothing here uses BLAS.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402

import ringfetch as rf


def acquire_release(iters=200000, batch=1000):
    src = np.ones(64 << 10, np.uint8)
    with rf.Pipeline(64 << 10, depth=4, backend="threads") as p:
        with p.acquire(1, src):
            pass  # resident from now on
        acq, rel = p.acquire, p.release
        for _ in range(10000):
            rel(acq(1, src))
        ns = np.empty(iters, np.int64)
        clock = time.perf_counter_ns
        for i in range(iters):
            t = clock()
            rel(acq(1, src))
            ns[i] = clock() - t
        means = []
        for _ in range(iters // batch):
            t = clock()
            for _ in range(batch):
                rel(acq(1, src))
            means.append((clock() - t) / batch)
        # the timer's own cost, to read the per-call figures with
        tn = np.empty(iters, np.int64)
        for i in range(iters):
            t = clock()
            tn[i] = clock() - t
        assert p.keyed_stats()["hits"] >= iters
    return {"p50_ns": float(np.percentile(ns, 50)), "p99_ns": float(np.percentile(ns, 99)),
            "batch_mean_ns": float(np.median(means)), "timer_p50_ns": float(np.percentile(tn, 50))}


def python_run(p, srcs, spent):
    """One run with the numpy compute; spent collects each compute's own time (ns)."""
    clock = time.perf_counter_ns

    def compute(b):
        t = clock()
        np.frombuffer(b, np.float32).sum()
        spent.append(clock() - t)

    t = time.perf_counter()
    p.run(srcs, compute)
    return time.perf_counter() - t


def build_ref(builddir):
    """bench/python_ref.c, compiled against the C library of a build tree (-O2, as the build), with this
    interpreter embedded for its numpy compute where it has a shared libpython; (path, numpy?)."""
    here = os.path.dirname(os.path.abspath(__file__))
    exe = os.path.join(builddir, "python_ref")
    cmd = ["cc", "-O2", "-std=c11", "-o", exe, os.path.join(here, "python_ref.c"),
           "-I", os.path.join(here, "..", "include"), "-I", os.path.join(builddir, "include"),
           "-L", builddir, "-lringfetch", "-Wl,-rpath," + os.path.abspath(builddir), "-lm"]
    libdir, ld = sysconfig.get_config_var("LIBDIR"), sysconfig.get_config_var("LDVERSION")
    if sysconfig.get_config_var("Py_ENABLE_SHARED") and libdir and ld:
        embed = ["-DRF_PYREF_NUMPY", "-I", sysconfig.get_paths()["include"], "-L", libdir, "-lpython" + ld,
                 "-Wl,-rpath," + libdir]
        if subprocess.run(cmd + embed, capture_output=True).returncode == 0:
            return exe, True
    subprocess.run(cmd, check=True)
    return exe, False


def c_runs(ref, nblocks, size, reps, compute="c"):
    """reps C-driven runs in one process (after 15 settling runs): [(wall seconds, median compute ns)].
    compute: "c" (numpy's summation order written in C) or "numpy" (numpy's own sum, through an
    embedded interpreter). Checks that the C side computes what numpy does: its sum of block 0, bit for
    bit, is numpy's sum of the same floats (python_ref.c makes them; sums that round, so that the order
    of the additions shows)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    out = subprocess.run([ref, str(nblocks), str(size), "2", str(reps), compute], check=True,
                         capture_output=True, text=True, env=env)
    lines = out.stdout.splitlines()
    c_sum = float.fromhex(lines[-1].split()[1])
    block0 = (np.arange(size // 4) % 97).astype(np.float32) * np.float32(0.37) - np.float32(17.9)
    if c_sum != float(block0.sum()):
        raise SystemExit("python_ref's sum of block 0 is %r, numpy's %r: not the same compute"
                         % (c_sum, float(block0.sum())))
    return [(int(w) * 1e-9, int(s)) for w, s in (line.split() for line in lines[:-1])]


def run_vs_c(ref, reps, nblocks=64, size=1 << 20):
    """The Python run and the C-driven runs (bench/python_ref.c: the same blocks and pipeline), alternating;
    medians. The C side computes the block's sum twice over: with numpy's own sum called through an
    embedded interpreter (the same compute as the Python side: the two runs differ only in who drives
    the pipeline), where this interpreter can be embedded, and with numpy's summation order written in
    C (what a C program would run)."""
    # The blocks are views of one array, as python_ref.c's are pieces of one allocation: the sources are
    # placed alike on both sides, so that the copies cost both the same (separate arrays from numpy's
    # allocator land wherever malloc puts them, and a run's copies were measured 5-20 % slower from them).
    whole = np.random.default_rng(1).standard_normal(nblocks * size // 4).astype(np.float32)
    srcs = [whole[i * size // 4:(i + 1) * size // 4] for i in range(nblocks)]
    py, spent = [], []
    c = {"numpy": ([], []), "c": ([], [])} if ref and ref[1] else {"c": ([], [])} if ref else {}
    with rf.Pipeline(size, depth=2, backend="threads") as p:
        for _ in range(15):  # settling runs: the pipeline's schedule comparison, as on the C side
            python_run(p, srcs, [])
        for _ in range(3):  # alternating batches of runs: Python, then C
            for _ in range(reps):
                py.append(python_run(p, srcs, spent))
            for how, (walls, ns) in c.items():
                for wall, n in c_runs(ref[0], nblocks, size, reps, how):
                    walls.append(wall)
                    ns.append(n)
    r = {"numpy_compute_us": float(np.median(spent)) / 1e3, "python_run_ms": float(np.median(py)) * 1e3}
    for how, (walls, ns) in c.items():
        r["c_%s_compute_us" % how] = float(np.median(ns)) / 1e3
        r["c_%s_run_ms" % how] = float(np.median(walls)) * 1e3
        r["python_over_c_%s" % how] = r["python_run_ms"] / r["c_%s_run_ms" % how]
    return r


def per_block_overhead(ref, reps, nblocks=64, size=64):
    """What a block costs the Python layer alone: runs of 64 blocks of 64 bytes whose compute does next to
    nothing (Python: reads nbytes; C: sums 16 floats), Python against C; medians, ns per block."""
    srcs = [np.zeros(size // 4, np.float32) for _ in range(nblocks)]
    py, c = [], []
    with rf.Pipeline(size, depth=2, backend="threads") as p:
        for _ in range(3):
            for _ in range(reps * 10):
                t = time.perf_counter_ns()
                p.run(srcs, lambda b: b.nbytes)
                py.append(time.perf_counter_ns() - t)
            if ref:
                c += [w * 1e9 for w, _ in c_runs(ref[0], nblocks, size, reps * 10)]
    r = {"python_ns_per_block": float(np.median(py)) / nblocks}
    if c:
        r["c_ns_per_block"] = float(np.median(c)) / nblocks
    return r


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--build", default=os.path.join(here, "..", "build"),
                    help="a build tree with libringfetch.so, for the C-driven run (none: skip it)")
    ap.add_argument("--reps", type=int, default=9)
    ap.add_argument("--json")
    a = ap.parse_args()
    ref = None
    if a.build != "none" and os.path.exists(os.path.join(a.build, "libringfetch.so")):
        ref = build_ref(a.build)
    ar = acquire_release()
    print("acquire+release, resident key, threads: p50 %.0f ns, p99 %.0f ns per pair (timer alone: %.0f ns); "
          "batch mean %.0f ns" % (ar["p50_ns"], ar["p99_ns"], ar["timer_p50_ns"], ar["batch_mean_ns"]))
    rr = run_vs_c(ref, a.reps)
    line = "run of 64 x 1 MiB, threads, depth 2, float32 sum: Python (numpy, %.0f us a block) %.2f ms" % (
        rr["numpy_compute_us"], rr["python_run_ms"])
    for how, what in (("numpy", "numpy's sum, embedded"), ("c", "the same sum in C")):
        if "c_%s_run_ms" % how in rr:
            line += "; C with %s (%.0f us a block) %.2f ms: Python/C = %.3f" % (
                what, rr["c_%s_compute_us" % how], rr["c_%s_run_ms" % how], rr["python_over_c_%s" % how])
    print(line)
    ov = per_block_overhead(ref, a.reps)
    line = "runs of 64 x 64 B, next to no compute: Python %.0f ns a block" % ov["python_ns_per_block"]
    if "c_ns_per_block" in ov:
        line += ", C %.0f ns a block" % ov["c_ns_per_block"]
    print(line)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"acquire_release": ar, "run": rr, "per_block": ov}, f, indent=1)


if __name__ == "__main__":
    main()
