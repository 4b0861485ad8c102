#!/usr/bin/env python3
"""examples/moe_safetensors.py — a numpy MoE decode loop whose experts live in a safetensors file.

The model is written by the `safetensors` package (its real header and offsets): per layer a router
(d x experts, small, kept in memory) and `experts` expert matrices (d x d float32). Each decode step
runs every layer: the router picks the top-k experts from the hidden state, each chosen expert is
applied (x @ W, tanh, gated sum), the state is updated. Two ways to get the experts' bytes:

  ringfetch  rf.File over the safetensors file; memoryview(f)[begin:end] per expert (the offsets of
             the file's header) is a file source; a keyed pipeline (backend threads) serves them:
             prefetch the next layer's likely experts (guessed from the current state with the next
             layer's router), prefetch the routed ones (their reads in flight together), acquire them
             in turn, compute on the slot through numpy.frombuffer (zero-copy), release.
  memmap     numpy.memmap of the same file, the expert a view of the mapping: page faults on the
             compute thread bring its bytes in.

Both compute the same thing and must agree exactly. With --cold (default), every step of either loop
starts from a cold page cache (the file unmapped, then os.posix_fadvise DONTNEED: the kernel keeps pages
a mapping still maps) and, for ringfetch, an empty slot cache: each step reads its experts from disk,
as a model much larger than the memory budget would. The two loops alternate step by step (and which
goes first) and the medians are reported.

usage: moe_safetensors.py [--path FILE] [--layers L] [--experts E] [--dim D] [--topk K] [--steps S]
                          [--budget-mib M] [--cold] [--keep] [--json OUT]
"""
import argparse
import json
import os
import struct
import tempfile
import time

import numpy as np

import ringfetch as rf


def write_model(path, layers, experts, dim, seed=1):
    """The model as a safetensors file, written by the safetensors package, one layer at a time in
    memory; returns the file's size."""
    from safetensors.numpy import save_file

    rng = np.random.default_rng(seed)
    tensors = {}
    for layer in range(layers):
        tensors["layers.%d.router" % layer] = rng.standard_normal((dim, experts), dtype=np.float32)
        for e in range(experts):
            w = rng.standard_normal((dim, dim), dtype=np.float32)
            w *= np.float32(1.0 / np.sqrt(dim))
            tensors["layers.%d.experts.%d.w" % (layer, e)] = w
    save_file(tensors, path)
    with open(path, "rb") as f:
        os.fsync(f.fileno())
    return os.path.getsize(path)


def read_header(path):
    """The safetensors header: name -> (begin, end, dtype, shape), begin/end absolute file offsets
    (8-byte little-endian header length, the JSON header, then the data, offsets relative to it)."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
    base = 8 + n
    return {name: (base + t["data_offsets"][0], base + t["data_offsets"][1], t["dtype"], tuple(t["shape"]))
            for name, t in header.items() if name != "__metadata__"}


class Model:
    def __init__(self, path):
        self.path = path
        self.tensors = read_header(path)
        self.layers = 1 + max(int(n.split(".")[1]) for n in self.tensors)
        self.experts = 1 + max(int(n.split(".")[3]) for n in self.tensors if ".experts." in n)
        b, e, dtype, shape = self.tensors["layers.0.experts.0.w"]
        assert dtype == "F32" and shape[0] == shape[1]
        self.dim = shape[0]
        self.expert_bytes = e - b
        # The routers are small: read them once (plain reads, not the mapping).
        self.routers = []
        with open(path, "rb") as f:
            for layer in range(self.layers):
                b, e, _, shape = self.tensors["layers.%d.router" % layer]
                f.seek(b)
                self.routers.append(np.frombuffer(f.read(e - b), np.float32).reshape(shape))

    def span(self, layer, e):
        b, end, _, _ = self.tensors["layers.%d.experts.%d.w" % (layer, e)]
        return b, end

    def key(self, layer, e):
        return layer * self.experts + e


def route(model, layer, x, k):
    logits = x @ model.routers[layer]
    top = np.argsort(-logits, kind="stable")[:k]
    g = np.exp(logits[top] - logits[top].max())
    return top, (g / g.sum()).astype(np.float32)


def apply_expert(x, w, gate, y):
    y += gate * np.tanh(x @ w)


def finish_layer(x, y):
    x = x + y
    return x / np.float32(np.linalg.norm(x) / np.sqrt(x.size))


def step_ringfetch(model, p, mv, x, k, hints):
    for layer in range(model.layers):
        if hints and layer + 1 < model.layers:
            # Hints from the file: the next layer's likely experts, guessed with its router now.
            guess, _ = route(model, layer + 1, x, hints)
            for e in guess:
                b, end = model.span(layer + 1, e)
                p.prefetch(model.key(layer + 1, e), mv[b:end])
        top, gates = route(model, layer, x, k)
        # The routed experts: all their reads in flight first (hints of certain use), then each acquired
        # in turn (a hit, or a late hit waiting on its own read, never a read after another).
        for e in top:
            b, end = model.span(layer, e)
            p.prefetch(model.key(layer, e), mv[b:end])
        y = np.zeros_like(x)
        for e, g in zip(top, gates):
            b, end = model.span(layer, e)
            blk = p.acquire(model.key(layer, e), mv[b:end])
            w = np.frombuffer(blk, np.float32).reshape(model.dim, model.dim)
            apply_expert(x, w, g, y)
            del w
            p.release(blk)
        x = finish_layer(x, y)
    return x


def step_memmap(model, mm, x, k):
    for layer in range(model.layers):
        top, gates = route(model, layer, x, k)
        y = np.zeros_like(x)
        for e, g in zip(top, gates):
            b, end = model.span(layer, e)
            w = mm[b:end].view(np.float32).reshape(model.dim, model.dim)
            apply_expert(x, w, g, y)
        x = finish_layer(x, y)
    return x


def drop_page_cache(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


class RingfetchLoop:
    """The experts served by a keyed pipeline from slices of an rf.File."""

    def __init__(self, model, slots, backend):
        self.model = model
        self.p = rf.Pipeline(model.expert_bytes, depth=slots, backend=backend)
        self.f = rf.File(model.path)
        self.mv = memoryview(self.f)

    def cold(self):
        # Empty the slot cache, and unmap the file before dropping its pages: the kernel keeps pages
        # that a mapping still maps.
        for key in range(self.model.layers * self.model.experts):
            self.p.evict(key)
        self.mv.release()
        self.f.close()
        drop_page_cache(self.model.path)
        self.f = rf.File(self.model.path)
        self.mv = memoryview(self.f)

    def step(self, x, k, hints):
        return step_ringfetch(self.model, self.p, self.mv, x, k, hints)

    def close(self):
        self.p.close()       # lets go of the keyed sources (slices of f)
        self.mv.release()
        self.f.close()


class MemmapLoop:
    """The experts as views of numpy.memmap of the file: page faults bring them in."""

    def __init__(self, model):
        self.model = model
        self.mm = np.memmap(model.path, np.uint8, "r")

    def cold(self):
        del self.mm          # unmapped first, as above
        drop_page_cache(self.model.path)
        self.mm = np.memmap(self.model.path, np.uint8, "r")

    def step(self, x, k, hints):
        return step_memmap(self.model, self.mm, x, k)

    def close(self):
        del self.mm


def run(path, steps=5, k=2, hints=3, budget_mib=256, cold=True, backend="threads"):
    """Both loops, alternating step by step (and which goes first); returns a dict of results
    (per-step times, agreement, ringfetch's keyed counters)."""
    model = Model(path)
    slots = max(k + hints + 1, (budget_mib << 20) // model.expert_bytes)
    slots = min(slots, model.layers * model.experts)
    x0 = np.random.default_rng(2).standard_normal(model.dim).astype(np.float32)
    loops = {"ringfetch": RingfetchLoop(model, slots, backend), "memmap": MemmapLoop(model)}
    times = {n: [] for n in loops}
    x = {n: x0 for n in loops}
    order = list(loops)
    try:
        for _ in range(steps):
            for n in order:
                if cold:
                    loops[n].cold()
                t = time.perf_counter()
                x[n] = loops[n].step(x[n], k, hints)
                times[n].append(time.perf_counter() - t)
            order.reverse()
        stats = loops["ringfetch"].p.keyed_stats()
        describe = loops["ringfetch"].p.describe()
    finally:
        for loop in loops.values():
            loop.close()
    med = {n: float(np.median(v)) for n, v in times.items()}
    return {
        "layers": model.layers, "experts": model.experts, "dim": model.dim, "topk": k, "hints": hints,
        "expert_bytes": model.expert_bytes, "slots": slots, "steps": steps, "cold": cold,
        "agree": bool(np.array_equal(x["ringfetch"], x["memmap"])), "x": x["ringfetch"],
        "step_s": med, "speedup": med["memmap"] / med["ringfetch"], "times": times,
        "keyed_stats": stats, "describe": describe,
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--path", help="the safetensors file (written if missing; default: a temporary file)")
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--experts", type=int, default=16)
    ap.add_argument("--dim", type=int, default=1024)
    ap.add_argument("--topk", type=int, default=2)
    ap.add_argument("--hints", type=int, default=3, help="experts hinted for the next layer (0: none)")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--budget-mib", type=int, default=256, help="ringfetch's slot cache, MiB")
    ap.add_argument("--cold", action=argparse.BooleanOptionalAction, default=True,
                    help="every step from a cold page cache and an empty slot cache (default on)")
    ap.add_argument("--keep", action="store_true", help="keep the temporary file")
    ap.add_argument("--json", help="write the results here")
    a = ap.parse_args()
    path = a.path or os.path.join(tempfile.gettempdir(), "ringfetch-moe-%d.safetensors" % os.getpid())
    made = False
    if not os.path.exists(path):
        size = write_model(path, a.layers, a.experts, a.dim)
        made = True
        print("wrote %s: %d layers x %d experts of %d x %d float32 (%.0f MiB)" %
              (path, a.layers, a.experts, a.dim, a.dim, size / 2**20))
    try:
        r = run(path, a.steps, a.topk, a.hints, a.budget_mib, a.cold)
    finally:
        if made and not a.keep and not a.path:
            os.unlink(path)
    print("%d layers x %d experts of %.1f MiB, top-%d, %d hinted, %d slots, %s, %d steps" %
          (r["layers"], r["experts"], r["expert_bytes"] / 2**20, r["topk"], r["hints"], r["slots"],
           "cold page cache each step" if r["cold"] else "warm", r["steps"]))
    print("%-10s %12s" % ("loop", "ms/step (median)"))
    for n in ("ringfetch", "memmap"):
        print("%-10s %12.1f" % (n, r["step_s"][n] * 1e3))
    print("speedup %.2fx; results agree: %s; keyed %s" % (r["speedup"], r["agree"], r["keyed_stats"]))
    if a.json:
        out = {k: v for k, v in r.items() if k != "x"}
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)
    return 0 if r["agree"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
