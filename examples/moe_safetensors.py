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

With --memory-mib N, the memory budget of the C serving benchmark (bench/serve_file.c): each loop runs
its steps in a fresh child process inside a fresh memory cgroup limited to N MiB (root: cgroup v1
memory.limit_in_bytes, or v2 memory.max; the page cache the child brings in is charged to the group, so
a file larger than N really is read from disk again), first ringfetch's child, then memmap's. The group's
peak memory is reported, and the group removed. Where no group can be made the output says that the
budget is NOT enforced, and the children run anyway. Unless --budget-mib says otherwise, ringfetch's slot
cache is what the budget leaves next to the child itself (slot_budget below).

usage: moe_safetensors.py [--path FILE] [--layers L] [--experts E] [--dim D] [--topk K] [--steps S]
                          [--budget-mib M] [--memory-mib N] [--cold] [--keep] [--json OUT]
"""
import argparse
import errno
import json
import os
import struct
import subprocess
import sys
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
        self.p = rf.Pipeline(slot_bytes(model), depth=slots, backend=backend)
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


def first_state(model):
    """The hidden state both loops start from."""
    return np.random.default_rng(2).standard_normal(model.dim).astype(np.float32)


def slot_bytes(model):
    """An expert and room for the aligned window around it: safetensors aligns tensors to 8 bytes only,
    and an O_DIRECT read covers whole blocks of the file system (docs/files.md, unaligned ranges). In a
    slot of exactly the expert's size only a buffered read fits, through the page cache."""
    return model.expert_bytes + 2 * os.statvfs(model.path).f_bsize


def slot_count(model, k, hints, budget):
    """The keyed cache's slots in `budget` bytes: at least a layer's routed experts, the next layer's
    hints and one more; at most every expert."""
    slots = max(k + hints + 1, budget // slot_bytes(model))
    return min(slots, model.layers * model.experts)


def slot_budget(memory, rss, model, k, hints):
    """The slot cache (bytes) that fits in a budget of `memory` bytes next to a process that has held
    `rss` bytes before making its pipeline. The slots and the process's own memory are anonymous: without
    swap the kernel cannot reclaim them. So besides them the budget must leave room for what the process
    allocates once it runs (the pipeline's queues and reader rings: a few MiB) and for the page cache
    that buffered reads pass through, which the group is charged for too: room for the reads that can
    be in flight at once (a layer's k routed experts and the next layer's hints) and one block more.
    With less, the kernel would reclaim on every read, or kill the child."""
    return memory - rss - (k + hints + 1) * model.expert_bytes


def results(model, k, hints, slots, slot_rule, steps, cold, times, x, stats, describe, memory):
    """The dict run() and run_isolated() return (times and final states x by loop)."""
    med = {n: float(np.median(v)) for n, v in times.items()}
    return {
        "layers": model.layers, "experts": model.experts, "dim": model.dim, "topk": k, "hints": hints,
        "expert_bytes": model.expert_bytes, "slots": slots, "slot_rule": slot_rule, "steps": steps,
        "cold": cold, "agree": bool(np.array_equal(x["ringfetch"], x["memmap"])), "x": x["ringfetch"],
        "step_s": med, "speedup": med["memmap"] / med["ringfetch"], "times": times,
        "keyed_stats": stats, "describe": describe, "memory": memory,
    }


def run(path, steps=5, k=2, hints=3, budget_mib=256, cold=True, backend="threads"):
    """Both loops in this process, alternating step by step (and which goes first), no memory budget;
    returns a dict of results (per-step times, agreement, ringfetch's keyed counters)."""
    model = Model(path)
    slots = slot_count(model, k, hints, budget_mib << 20)
    x0 = first_state(model)
    loops = {"ringfetch": RingfetchLoop(model, slots, backend), "memmap": MemmapLoop(model)}
    times = {n: [] for n in loops}
    x = {n: x0 for n in loops}
    order = list(loops)
    try:
        for _ in range(steps):
            for n in order:
                if cold:  # every loop: the other one's mapping would keep the step's pages resident
                    for loop in loops.values():
                        loop.cold()
                t = time.perf_counter()
                x[n] = loops[n].step(x[n], k, hints)
                times[n].append(time.perf_counter() - t)
            order.reverse()
        stats = loops["ringfetch"].p.keyed_stats()
        describe = loops["ringfetch"].p.describe()
    finally:
        for loop in loops.values():
            loop.close()
    return results(model, k, hints, slots, "--budget-mib %d" % budget_mib, steps, cold, times, x, stats,
                   describe, {"budget_mib": None})


class MemoryGroup:
    """A fresh memory cgroup `name` limited to `limit` bytes, made in this process's own group as
    bench/serve_file.c does: cgroup v1 where the memory controller is mounted as v1, else v2. Raises
    OSError saying why where none can be made (not root, no memory controller). remove() it once its
    process has exited."""

    def __init__(self, name, limit):
        self.version, parent = self.parent()
        self.how = "cgroup v1 memory.limit_in_bytes" if self.version == 1 else "cgroup v2 memory.max"
        self.path = os.path.join(parent, name)
        self.procs = os.path.join(self.path, "cgroup.procs")
        os.mkdir(self.path)
        try:
            self.write("memory.limit_in_bytes" if self.version == 1 else "memory.max", limit)
            if os.path.exists(os.path.join(self.path, "memory.swap.max")):
                self.write("memory.swap.max", 0)   # v2: no swap either, so the limit is the budget
        except OSError:
            self.remove()
            raise

    @staticmethod
    def parent():
        """(version, directory) of this process's memory cgroup, where a group can be made in it: v1 (the
        memory controller's line of /proc/self/cgroup), else v2 (the 0:: line)."""
        v1 = v2 = None
        with open("/proc/self/cgroup") as f:
            for line in f:
                _, controllers, path = line.rstrip("\n").split(":", 2)
                if "memory" in controllers.split(","):
                    v1 = path
                elif controllers == "":
                    v2 = path
        # What proves the directory is a memory cgroup (and not, say, the tmpfs that v1 mounts live in):
        # v1, its limit file; v2, the controller handed down to the groups made in it.
        if v1 is not None:
            version, parent, proof = 1, "/sys/fs/cgroup/memory" + v1, "memory.limit_in_bytes"
            ok = os.path.exists(os.path.join(parent, proof))
        elif v2 is not None:
            version, parent, proof = 2, "/sys/fs/cgroup" + v2, "memory in cgroup.subtree_control"
            try:
                with open(os.path.join(parent, "cgroup.subtree_control")) as f:
                    ok = "memory" in f.read().split()
            except FileNotFoundError:
                ok = False
        else:
            raise OSError("no memory cgroup in /proc/self/cgroup")
        if not ok:
            raise OSError("%s: no %s, not a memory cgroup to make groups in" % (parent, proof))
        if not os.access(parent, os.W_OK):
            raise OSError("%s is not writable (not root?)" % parent)
        return version, parent

    def write(self, name, value):
        with open(os.path.join(self.path, name), "w") as f:
            f.write("%d" % value)

    def peak(self):
        """The most memory the group has held (bytes); None where the kernel does not say (v2 before
        Linux 5.19 has no memory.peak)."""
        try:
            with open(os.path.join(self.path, "memory.max_usage_in_bytes" if self.version == 1
                                   else "memory.peak")) as f:
                return int(f.read())
        except FileNotFoundError:
            return None

    def remove(self):
        # A process that has just exited may stay listed in the group for a moment (EBUSY).
        deadline = time.monotonic() + 1
        while True:
            try:
                os.rmdir(self.path)
                return
            except OSError as e:
                if e.errno != errno.EBUSY or time.monotonic() > deadline:
                    raise
            time.sleep(0.01)


def peak_rss():
    """The most memory this process has held resident so far (bytes): /proc/self/status VmHWM, which
    is this program's own since exec (getrusage's ru_maxrss is not: Linux carries the parent's peak
    over through fork and exec)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) << 10
    raise OSError("no VmHWM in /proc/self/status")


def run_child(params):
    """One loop's steps in this process, a child of run_isolated (params: its arguments), from a cold
    page cache (every step with cold); returns its results for JSON, the final state as hex bytes so
    that the parent compares it exactly."""
    model = Model(params["path"])
    k, hints = params["k"], params["hints"]
    x = first_state(model)
    out = {}
    if params["loop"] == "ringfetch":
        if params["budget_mib"] is not None:
            budget = params["budget_mib"] << 20
            out["slot_rule"] = "--budget-mib %d" % params["budget_mib"]
        else:
            rss = peak_rss()
            budget = slot_budget(params["memory_mib"] << 20, rss, model, k, hints)
            out["slot_rule"] = "%d MiB budget - %.1f MiB RSS before the pipeline - %d x %.1f MiB reads" % (
                params["memory_mib"], rss / 2**20, k + hints + 1, model.expert_bytes / 2**20)
        out["slots"] = slot_count(model, k, hints, budget)
        loop = RingfetchLoop(model, out["slots"], params["backend"])
    else:
        loop = MemmapLoop(model)
    times = []
    try:
        for i in range(params["steps"]):
            if params["cold"] or i == 0:
                loop.cold()
            t = time.perf_counter()
            x = loop.step(x, k, hints)
            times.append(time.perf_counter() - t)
        if params["loop"] == "ringfetch":
            out["keyed_stats"] = loop.p.keyed_stats()
            out["describe"] = loop.p.describe()
    finally:
        loop.close()
    out.update(times=times, x=x.tobytes().hex())
    return out


class ChildFailed(Exception):
    """A child of run_isolated failed: it said why on stderr, or it was killed."""


def run_in_child(params, group):
    """run_child(params) in a fresh child process, in `group` (a MemoryGroup, or None); its results."""
    cmd = [sys.executable, os.path.abspath(__file__), "--child", json.dumps(params)]
    if group is not None:
        # The shell joins the group, then becomes the interpreter: all of the child is charged to the
        # group, the interpreter and numpy included (what a process brought in before it moved would
        # stay charged to its old group).
        cmd = ["/bin/sh", "-c", 'echo $$ > "$1" && shift && exec "$@"', "sh", group.procs] + cmd
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE)
    try:
        out = proc.communicate()[0]
    finally:
        if proc.poll() is None:
            proc.kill()   # interrupted: the child must be gone before its group is removed
        proc.wait()
    if proc.returncode < 0:
        raise ChildFailed("the %s child was killed by signal %d (out of memory?)" % (params["loop"],
                                                                                     -proc.returncode))
    if proc.returncode > 0:
        raise ChildFailed("the %s child exited with status %d" % (params["loop"], proc.returncode))
    return json.loads(out)


def run_isolated(path, memory_mib, steps=5, k=2, hints=3, budget_mib=None, cold=True, backend="threads"):
    """Each loop in a fresh child process in a fresh memory cgroup of memory_mib MiB where one can be
    made (else unlimited, said on stderr and in the results), ringfetch's first; returns run()'s dict,
    the budget and the groups' peaks under "memory". budget_mib: the slot cache, None for what the
    budget leaves (slot_budget)."""
    model = Model(path)
    memory = {"budget_mib": memory_mib, "enforced": None, "why_not": None, "peak_mib": {}}
    children = {}
    for n in ("ringfetch", "memmap"):
        group = None
        if memory["why_not"] is None:
            try:
                group = MemoryGroup("ringfetch-moe-%d-%s" % (os.getpid(), n), memory_mib << 20)
                memory["enforced"] = group.how
            except OSError as e:
                memory["enforced"], memory["why_not"] = None, str(e)
                print("memory budget of %d MiB NOT enforced (%s): running anyway" % (memory_mib, e),
                      file=sys.stderr)
        params = {"loop": n, "path": path, "steps": steps, "k": k, "hints": hints, "cold": cold,
                  "budget_mib": budget_mib, "memory_mib": memory_mib, "backend": backend}
        try:
            children[n] = run_in_child(params, group)
        finally:
            if group is not None:
                peak = group.peak()
                memory["peak_mib"][n] = None if peak is None else peak / 2**20
                group.remove()
    r = children["ringfetch"]
    times = {n: c["times"] for n, c in children.items()}
    x = {n: np.frombuffer(bytes.fromhex(c["x"]), np.float32) for n, c in children.items()}
    return results(model, k, hints, r["slots"], r["slot_rule"], steps, cold, times, x, r["keyed_stats"],
                   r["describe"], memory)


def budget_line(memory):
    """Which memory budget the results ran under, and how it was enforced."""
    if memory["budget_mib"] is None:
        return "memory budget: none (one process; --memory-mib N to enforce one)"
    if memory["enforced"] is None:
        return "memory budget %d MiB NOT enforced (%s); a fresh child process per loop" % (
            memory["budget_mib"], memory["why_not"])
    return "memory budget %d MiB enforced: %s, a fresh group and child process per loop" % (
        memory["budget_mib"], memory["enforced"])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--path", help="the safetensors file (written if missing; default: a temporary file)")
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--experts", type=int, default=16)
    ap.add_argument("--dim", type=int, default=1024)
    ap.add_argument("--topk", type=int, default=2)
    ap.add_argument("--hints", type=int, default=3, help="experts hinted for the next layer (0: none)")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--budget-mib", type=int,
                    help="ringfetch's slot cache, MiB (default: 256, or what --memory-mib leaves)")
    ap.add_argument("--memory-mib", type=int,
                    help="each loop in a child process in a memory cgroup of this many MiB (default: none)")
    ap.add_argument("--cold", action=argparse.BooleanOptionalAction, default=True,
                    help="every step from a cold page cache and an empty slot cache (default on)")
    ap.add_argument("--keep", action="store_true", help="keep the temporary file")
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--child", help=argparse.SUPPRESS)   # run_in_child's: run_child's params as JSON
    a = ap.parse_args()
    if a.child:
        json.dump(run_child(json.loads(a.child)), sys.stdout)
        return 0
    if a.memory_mib is not None and a.memory_mib <= 0:
        ap.error("--memory-mib must be positive")
    path = a.path or os.path.join(tempfile.gettempdir(), "ringfetch-moe-%d.safetensors" % os.getpid())
    made = False
    if not os.path.exists(path):
        size = write_model(path, a.layers, a.experts, a.dim)
        made = True
        print("wrote %s: %d layers x %d experts of %d x %d float32 (%.0f MiB)" %
              (path, a.layers, a.experts, a.dim, a.dim, size / 2**20))
    try:
        if a.memory_mib is None:
            r = run(path, a.steps, a.topk, a.hints, 256 if a.budget_mib is None else a.budget_mib, a.cold)
        else:
            r = run_isolated(path, a.memory_mib, a.steps, a.topk, a.hints, a.budget_mib, a.cold)
    except ChildFailed as e:
        print(e, file=sys.stderr)
        return 1
    finally:
        if made and not a.keep and not a.path:
            os.unlink(path)
    mem = r["memory"]
    print("%d layers x %d experts of %.1f MiB, top-%d, %d hinted, %d slots, %s, %d steps" %
          (r["layers"], r["experts"], r["expert_bytes"] / 2**20, r["topk"], r["hints"], r["slots"],
           "cold page cache each step" if r["cold"] else "warm", r["steps"]))
    print(budget_line(mem))
    mib = r["expert_bytes"] / 2**20
    print("slot cache %d x %.1f MiB = %.0f MiB (%s)" % (r["slots"], mib, r["slots"] * mib, r["slot_rule"]))
    peaks = mem.get("peak_mib", {})
    print("%-10s %16s %14s" % ("loop", "ms/step (median)", "group peak MiB"))
    for n in ("ringfetch", "memmap"):
        peak = peaks.get(n)
        print("%-10s %16.1f %14s" % (n, r["step_s"][n] * 1e3, "-" if peak is None else "%.1f" % peak))
    print("speedup %.2fx; results agree: %s; keyed %s" % (r["speedup"], r["agree"], r["keyed_stats"]))
    if a.json:
        out = {k: v for k, v in r.items() if k != "x"}
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)
    return 0 if r["agree"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
