#!/usr/bin/env python3
"""bench/python_bench.py — what the Python layer costs over the C library (docs/python.md).

  1. acquire + release of a resident key from Python (backend threads, one call pair timed at a time,
     perf_counter_ns; p50 and p99, and the mean over batches, which has no timer in it);
  2. a run of 64 blocks of 1 MiB (threads, depth 2) with a numpy compute (the float32 sum of the
     block), against the same run driven from C: ringfetch-bench with a compute of the same length
     (--compute spin:NS_PER_KIB: the median time the numpy compute took inside the Python runs).
     Medians of alternating repetitions.

usage: python_bench.py [--bench build/bench/ringfetch-bench] [--reps R] [--json OUT]
Hold the benchmark lock when timing on a shared machine: flock /tmp/rf-bench.lock python3 python_bench.py
"""
import argparse
import json
import os
import subprocess
import tempfile
import time

import numpy as np

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


def c_run(bench, ns_per_kib, nblocks):
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        subprocess.run([bench, "--backend", "threads", "--depth", "2", "--size", "1M", "--blocks", str(nblocks),
                        "--compute", "spin:%d" % round(ns_per_kib), "--baselines", "none", "--reps", "1", "--quiet",
                        "--json", out.name], check=True, stdout=subprocess.DEVNULL)
        rec = json.load(open(out.name))["records"][0]
    return rec["us_per_block"] * nblocks * 1e-6


def run_vs_c(bench, reps, nblocks=64, size=1 << 20):
    """The Python run, then the C run with a spinning compute as long as the numpy compute took inside
    the Python runs (median per block), alternating."""
    rng = np.random.default_rng(1)
    srcs = [rng.standard_normal(size // 4).astype(np.float32) for _ in range(nblocks)]
    py, c, spent = [], [], []
    with rf.Pipeline(size, depth=2, backend="threads") as p:
        python_run(p, srcs, [])
        for _ in range(reps):
            py.append(python_run(p, srcs, spent))
            if bench:
                c.append(c_run(bench, np.median(spent) / (size / 1024), nblocks))
    r = {"numpy_compute_us": float(np.median(spent)) / 1e3, "python_run_ms": float(np.median(py)) * 1e3}
    if c:
        r["c_run_ms"] = float(np.median(c)) * 1e3
        r["python_over_c"] = r["python_run_ms"] / r["c_run_ms"]
    return r


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--bench", default=os.path.join(here, "..", "build", "bench", "ringfetch-bench"),
                    help="ringfetch-bench, for the C-driven run (none: skip it)")
    ap.add_argument("--reps", type=int, default=9)
    ap.add_argument("--json")
    a = ap.parse_args()
    bench = a.bench if a.bench != "none" and os.path.exists(a.bench) else None
    ar = acquire_release()
    print("acquire+release, resident key, threads: p50 %.0f ns, p99 %.0f ns per pair (timer alone: %.0f ns); "
          "batch mean %.0f ns" % (ar["p50_ns"], ar["p99_ns"], ar["timer_p50_ns"], ar["batch_mean_ns"]))
    rr = run_vs_c(bench, a.reps)
    line = "run of 64 x 1 MiB, threads, depth 2, numpy sum (%.0f us a block): Python %.2f ms" % (
        rr["numpy_compute_us"], rr["python_run_ms"])
    if "c_run_ms" in rr:
        line += ", C (same compute cost) %.2f ms: Python/C = %.3f" % (rr["c_run_ms"], rr["python_over_c"])
    print(line)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"acquire_release": ar, "run": rr}, f, indent=1)


if __name__ == "__main__":
    main()
