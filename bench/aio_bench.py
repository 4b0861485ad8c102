#!/usr/bin/env python3
"""bench/aio_bench.py — a file streamed block by block through a compute, from Python: DeepSpeed's NVMe
path against ringfetch and the plain ways (docs/files.md, "Against DeepSpeed's NVMe reads").

Contestants, each pass over the whole file, cold (the file's pages dropped with POSIX_FADV_DONTNEED, no
mapping of it left), alternating pass by pass in one process, the order rotated from one round to the
next:
  deepspeed     DeepSpeed's async_io op as its swapper runs it: an aio_handle with the defaults of its
                `aio` config (block_size 1 MiB, queue_depth 8, one thread, overlap_events), two page-locked
                buffers (new_cpu_locked_tensor), block i + 1 read (async_pread, O_DIRECT) while block i
                is computed, then wait();
  deepspeed-qd32, deepspeed-t2, deepspeed-g4
                the same with queue_depth 32, with two threads (intra_op_parallelism 2), or with groups
                of 4 blocks double-buffered (4 reads in flight at once, as its swapper reads a set of
                partitions): the tuning its users try first; the best of the four is the baseline;
  pread         buffered readinto of each block into one bytearray (the kernel's read-ahead);
  mmap          compute straight from a mapping of the file (page faults and read-ahead);
  ringfetch     rf.File + Pipeline.run on "threads" at the default depth (2);
  rf-auto       the same with depth="auto", a fresh pipeline per pass: its first run is what is timed.
The compute is numpy's float32 sum of the block, the same call for every contestant; every pass's sums
must equal the others' bit for bit (else the benchmark stops, naming the contestant). Reported: GB/s
(medians), CPU seconds per GB (getrusage of the process: every contestant's threads are in it), and
ringfetch's ways against the best DeepSpeed configuration and against pread.

usage: aio_bench.py [--file PATH] [--mib N] [--size 64K,1M,4M] [--reps R] [--json OUT] [--no-deepspeed]
DeepSpeed is optional (pip install deepspeed; its async_io op needs libaio-dev and builds on first use):
without it, or where its op cannot be built, its contestants are left out and the output says why.
Hold the benchmark lock when timing on a shared machine: flock /tmp/rf-bench.lock python3 aio_bench.py
"""
import argparse
import json
import mmap
import os
import resource
import statistics
import sys
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # no BLAS pool spinning beside the readers

import numpy as np  # noqa: E402

import ringfetch as rf  # noqa: E402


def parse_size(s):
    s = s.strip().upper().removesuffix("B").removesuffix("I")
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(s[-1:], 1)
    return int(s[:-1] if s[-1:] in "KMG" else s) * mult


def compute(a):
    return float(a.sum(dtype=np.float32))


def make_file(path, nbytes):
    """nbytes of float32 values in [0, 1), written and synced (DONTNEED drops only clean pages)."""
    rng = np.random.default_rng(7)
    with open(path, "wb") as f:
        left = nbytes
        while left > 0:
            n = min(left, 16 << 20)
            f.write(rng.random(n // 4, dtype=np.float32).tobytes())
            left -= n
        f.flush()
        os.fsync(f.fileno())


def drop_cache(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def run_pread(path, bs, n):
    buf = bytearray(bs)
    a = np.frombuffer(buf, np.float32)
    total = 0.0
    with open(path, "rb", buffering=0) as f:
        for _ in range(n):
            if f.readinto(buf) != bs:
                raise RuntimeError("pread: short read")
            total += compute(a)
    return total


def run_mmap(path, bs, n):
    with open(path, "rb") as f:
        mm = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)
    total = 0.0
    try:
        for i in range(n):
            total += compute(np.frombuffer(mm, np.float32, count=bs // 4, offset=i * bs))
    finally:
        mm.close()
    return total


def run_ringfetch(path, bs, n, depth):
    with rf.File(path) as f:
        m = memoryview(f)
        srcs = [m[i * bs:(i + 1) * bs] for i in range(n)]
        sums = []
        with rf.Pipeline(bs, depth=depth, backend="threads") as p:
            p.run(srcs, lambda b: sums.append(compute(np.frombuffer(b, np.float32))))
        del srcs
        m.release()
    total = 0.0
    for v in sums:
        total += v
    return total


class DeepSpeed:
    """DeepSpeed's aio_handle and its page-locked buffers, made once per configuration and block: two
    groups of `group` blocks, the next group's reads in flight while the current group is computed
    (its swapper's pattern: swap a set of partitions in, prefetch the next set, wait for all)."""

    def __init__(self, op, torch, bs, queue_depth, threads, group=1):
        self.h = op.aio_handle(1 << 20, queue_depth, False, True, threads)
        self.group = group
        self.bufs = [self.h.new_cpu_locked_tensor(bs, torch.empty(0, dtype=torch.uint8)) for _ in range(2 * group)]
        self.views = [b.numpy().view(np.float32) for b in self.bufs]

    def _read(self, path, bs, n, g):
        for j in range(self.group):
            i = g * self.group + j
            if i < n and self.h.async_pread(self.bufs[(g % 2) * self.group + j], path, i * bs) != 0:
                raise RuntimeError("deepspeed: async_pread failed")

    def run(self, path, bs, n):
        groups = (n + self.group - 1) // self.group
        total = 0.0
        self._read(path, bs, n, 0)
        for g in range(groups):
            self.h.wait()
            if g + 1 < groups:
                self._read(path, bs, n, g + 1)
            for j in range(min(self.group, n - g * self.group)):
                total += compute(self.views[(g % 2) * self.group + j])
        return total

    def close(self):
        for b in self.bufs:
            self.h.free_cpu_locked_tensor(b)
        self.bufs = self.views = None


def load_deepspeed():
    """(async_io op, torch) or (None, why)."""
    try:
        import torch
        from deepspeed.ops.op_builder import AsyncIOBuilder
    except Exception as e:  # not installed, or its import failed
        return None, f"deepspeed is not importable ({type(e).__name__}: {e})"
    try:
        b = AsyncIOBuilder()
        if not b.is_compatible(verbose=False):
            return None, "deepspeed's async_io op cannot be built here (it needs libaio-dev)"
        return (b.load(verbose=False), torch), None
    except Exception as e:
        return None, f"deepspeed's async_io op did not build ({type(e).__name__}: {e})"


def cpu_s():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--file", default=None, help="the file to stream (made, then removed; default in the cwd)")
    ap.add_argument("--mib", type=int, default=512, help="file size in MiB")
    ap.add_argument("--size", default="64K,1M,4M", help="block sizes")
    ap.add_argument("--reps", type=int, default=5, help="passes per contestant and block size")
    ap.add_argument("--json", default=None, help="write the medians here")
    ap.add_argument("--no-deepspeed", action="store_true", help="leave DeepSpeed's contestants out")
    args = ap.parse_args()
    path = args.file or f"rf-aio-bench-{os.getpid()}.bin"
    nbytes = args.mib << 20
    sizes = [parse_size(s) for s in args.size.split(",")]
    ds, why = (None, "--no-deepspeed") if args.no_deepspeed else load_deepspeed()
    make_file(path, nbytes)
    print(f"aio_bench: {args.mib} MiB file {path}, blocks {args.size}, {args.reps} passes each, cold, "
          f"numpy float32 sum per block; ringfetch {rf.__version__ if hasattr(rf, '__version__') else ''}".rstrip())
    if ds is None:
        print(f"deepspeed: left out: {why}")
    results = {}
    try:
        for bs in sizes:
            if nbytes % bs:
                sys.exit(f"aio_bench: {bs} does not divide the file's {nbytes} bytes")
            n = nbytes // bs
            ways = {
                "pread": lambda: run_pread(path, bs, n),
                "mmap": lambda: run_mmap(path, bs, n),
                "ringfetch": lambda: run_ringfetch(path, bs, n, 0),
                "rf-auto": lambda: run_ringfetch(path, bs, n, "auto"),
            }
            handles = []
            if ds is not None:
                op, torch = ds
                for name, qd, t, g in (("deepspeed", 8, 1, 1), ("deepspeed-qd32", 32, 1, 1), ("deepspeed-t2", 8, 2, 1),
                                       ("deepspeed-g4", 8, 1, 4)):
                    d = DeepSpeed(op, torch, bs, qd, t, g)
                    handles.append(d)
                    ways[name] = (lambda d=d: d.run(path, bs, n))
            gbs = {k: [] for k in ways}
            cpu = {k: [] for k in ways}
            order = list(ways.items())
            want = None  # every pass's sum of block sums, in block order: the same bytes, bit for bit
            for rep in range(args.reps):
                # each pass's order rotated: no contestant always follows the same one (a pass can leave
                # the disk slower or faster for the next, on this machine after O_DIRECT ones)
                for name, fn in order[rep % len(order):] + order[:rep % len(order)]:
                    drop_cache(path)
                    c0, t0 = cpu_s(), time.perf_counter()
                    got = fn()
                    t1, c1 = time.perf_counter(), cpu_s()
                    want = got if want is None else want
                    if got != want:
                        sys.exit(f"aio_bench: {name} at {bs} bytes computed {got!r}, the others {want!r}")
                    gbs[name].append(nbytes / (t1 - t0) / 1e9)
                    cpu[name].append((c1 - c0) / (nbytes / 1e9))
            for d in handles:
                d.close()
            med = {k: statistics.median(v) for k, v in gbs.items()}
            medcpu = {k: statistics.median(v) for k, v in cpu.items()}
            results[bs] = {"gbs": med, "cpu_s_per_gb": medcpu, "passes": gbs}
            print(f"\nblock {bs >> 10} KiB ({n} blocks): GB/s (median of {args.reps}; least, most), CPU s/GB (median)")
            for k in ways:
                print(f"  {k:15s} {med[k]:6.2f} ({min(gbs[k]):.2f}, {max(gbs[k]):.2f})   {medcpu[k]:5.2f}")
            ds_names = [k for k in ways if k.startswith("deepspeed")]
            for k in ("ringfetch", "rf-auto"):
                line = f"  {k} / pread {med[k] / med['pread']:.2f}x"
                if ds_names:
                    best = max(ds_names, key=lambda x: med[x])
                    line += f", / {best} (DeepSpeed's best here) {med[k] / med[best]:.2f}x"
                print(line)
    finally:
        os.unlink(path)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({str(k): v for k, v in results.items()}, f, indent=1)


if __name__ == "__main__":
    main()
