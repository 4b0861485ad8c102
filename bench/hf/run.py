#!/usr/bin/env python3
"""bench/hf/run.py — a transformers MoE checkpoint larger than its memory, decoded five ways (`make run-hf`).

The checkpoints (bench/hf/checkpoint.py) are made on first use and kept in OUT: a Mixtral and a Qwen3-MoE
of hidden 1024, 8 layers x 8 experts of 24 MiB (fp32), top-2; 1.6 GiB each, 1.5 GiB of it experts, one
safetensors file. Each contestant (bench/hf/contestant.py) runs in a fresh child process inside a fresh
memory cgroup (as root: cgroup v1 memory.limit_in_bytes or v2 memory.max; page cache is charged to it),
with the checkpoint dropped from the page cache before it starts and again after its load, one torch
thread, decoding one token per step after a fixed prompt (each step's input the next token of a fixed
stream, the same for every contestant; --greedy feeds each step its own argmax instead, which a
random-weight model soon turns into one token repeated, and its experts with it):

  ringfetch   ringfetch.transformers.from_pretrained(dir, BUDGET)
  ringfetch-nohints   the same, prefetch=False: what the hints for the next layer buy
  mmap        every tensor a zero-copy torch view of an mmap of the file (the llama.cpp way)
  accelerate  from_pretrained(device_map="auto", max_memory={"cpu": BUDGET}, offload_folder=...)
  whole       the whole model in memory, in a group with no limit: the bound

The limit is what torch + transformers take as the cgroup counts it (a child that imports them and
decodes a tiny model of the family, reading nothing of the checkpoint; run twice, the second counted)
+ the checkpoint's non-expert weights + BUDGET (256 MiB) + SLACK (96 MiB).
Where no cgroup can be made the run goes on unconstrained and every output says so.

Reported per family and contestant: ms/step (the median over every decode step of every repetition),
MiB read from storage per step (/proc/self/io read_bytes of the child, io_uring's workers included),
ringfetch's hit rate (model.ringfetch.stats() over the decode), the group's peak memory, load time;
ratios ringfetch / accelerate and ringfetch / mmap; the disk bound (bytes of the experts ringfetch had
to read per step / the best read rate the device gave here, cold, in the experts' own O_DIRECT reads
(pread threads, fio's io_uring, ringfetch's own reader; and what ringfetch's decode itself reached),
+ the whole model's ms/step);
and whether every contestant's argmax at every step equals the whole model's (ringfetch's also
within 1e-5 relative difference of its logits). Repetitions alternate the contestants' order.
Writes OUT/hf.json, OUT/hf.dat and OUT/hf.png (gnuplot). Exit status 0, 1 (a contestant failed or a
check did not hold), 2 (bad options).

usage: run.py [--quick] [--out DIR] [--families mixtral,qwen3_moe]
              [--contestants ringfetch,ringfetch-nohints,mmap,accelerate,whole]
              [--steps N] [--reps R] [--budget 256MiB] [--slack 96MiB] [--timeout S] [--greedy]
"""
import argparse
import json
import mmap
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from contestant import drop_cache, safetensors_header  # noqa: E402  (the contestant's own: no torch at import)

MiB = 1 << 20
CONTESTANTS = ["ringfetch", "ringfetch-nohints", "mmap", "accelerate", "whole"]
FAMILIES = ["mixtral", "qwen3_moe"]
# model.ringfetch.stats()'s counters (the rest are settings or ratios)
COUNTERS = ("hits", "misses", "late", "bytes_read", "prefetches", "wasted", "hinted", "hint_correct", "acquires")


def parse_size(s):
    s = s.strip()
    for suf, mul in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10), ("G", 1 << 30), ("M", 1 << 20),
                     ("K", 1 << 10)):
        if s.endswith(suf):
            return int(float(s[:-len(suf)]) * mul)
    return int(s)


def log(*a):
    print(*a, flush=True)


# ---- memory cgroups ------------------------------------------------------------------------------------

class Cgroups:
    """Fresh memory cgroups under this process's own: v1 where the memory controller is mounted there,
    else v2; `why` says what is missing when neither can be written (then nothing is enforced)."""

    def __init__(self):
        self.version, self.parent, self.why = 0, None, None
        v1 = v2 = None
        with open("/proc/self/cgroup") as f:
            for line in f:
                hid, ctl, path = line.rstrip("\n").split(":", 2)
                if "memory" in ctl.split(","):
                    v1 = path
                elif hid == "0" and ctl == "":
                    v2 = path
        if v1 is not None and os.access(f"/sys/fs/cgroup/memory{v1}", os.W_OK):
            self.version, self.parent = 1, f"/sys/fs/cgroup/memory{v1}".rstrip("/")
        elif v2 is not None and os.access(f"/sys/fs/cgroup{v2}", os.W_OK) and \
                os.path.exists(f"/sys/fs/cgroup{v2}/cgroup.controllers"):
            self.version, self.parent = 2, f"/sys/fs/cgroup{v2}".rstrip("/")
        else:
            self.why = ("not root" if os.geteuid() != 0 else "no writable memory cgroup mounted") + \
                ": the memory limit is NOT enforced, contestants run unconstrained"

    def create(self, name, limit):
        """A fresh group (limit in bytes, or None for none); its path, or None (self.why says why)."""
        if not self.version:
            return None
        path = f"{self.parent}/{name}"
        try:
            os.mkdir(path)
            if limit is not None:
                self._write(path, "memory.limit_in_bytes" if self.version == 1 else "memory.max", str(limit))
                if self.version == 2:
                    self._write(path, "memory.swap.max", "0")
        except OSError as e:
            self.why = f"{path}: {e}: the memory limit is NOT enforced"
            self.version = 0
            try:
                os.rmdir(path)
            except OSError:
                pass
            return None
        return path

    @staticmethod
    def _write(path, name, value):
        with open(f"{path}/{name}", "w") as f:
            f.write(value)

    def peak(self, path):
        name = "memory.max_usage_in_bytes" if self.version == 1 else "memory.peak"
        try:
            with open(f"{path}/{name}") as f:
                return int(f.read())
        except OSError:
            return None

    def oom_kills(self, path):
        name = "memory.oom_control" if self.version == 1 else "memory.events"
        try:
            with open(f"{path}/{name}") as f:
                for line in f:
                    k, _, v = line.partition(" ")
                    if k == "oom_kill":
                        return int(v)
        except OSError:
            pass
        return 0

    def destroy(self, path):
        for _ in range(200):  # an exited child's pages may take a moment to leave the group
            try:
                os.rmdir(path)
                return
            except OSError:
                time.sleep(0.01)


# ---- the file and the device ----------------------------------------------------------------------------

def checkpoint_facts(model_dir):
    files = sorted(os.path.join(model_dir, n) for n in os.listdir(model_dir) if n.endswith(".safetensors"))
    cfg = json.load(open(os.path.join(model_dir, "config.json")))
    total = experts = 0
    for p in files:
        _, h = safetensors_header(p)
        for name, t in h.items():
            nb = t["data_offsets"][1] - t["data_offsets"][0]
            total += nb
            experts += nb if ".experts." in name else 0
    n_exp = cfg.get("num_local_experts") or cfg.get("num_experts")
    layers = cfg["num_hidden_layers"]
    return {"files": files, "file_bytes": sum(os.path.getsize(p) for p in files), "tensor_bytes": total,
            "expert_bytes_total": experts, "non_expert_bytes": total - experts,
            "expert_bytes": experts // (n_exp * layers), "experts": n_exp, "layers": layers,
            "top_k": cfg["num_experts_per_tok"], "hidden": cfg["hidden_size"], "model_type": cfg["model_type"]}


def expert_ranges(path):
    """Each expert's bytes in the file, (begin, end) absolute: its tensors' union (adjacent in these files)."""
    start, h = safetensors_header(path)
    ex = {}
    for name, t in h.items():
        if ".experts." not in name:
            continue
        key = name.split(".experts.")[0] + "." + name.split(".experts.")[1].split(".")[0]
        b, e = t["data_offsets"]
        lo, hi = ex.get(key, (b, e))
        ex[key] = (min(lo, b), max(hi, e))
    return sorted((start + b, start + e) for b, e in ex.values())


def spread(ranges, n):
    """n of the ranges in a fixed scattered order (every 5th, wrapping): no two neighbours in a row."""
    return [ranges[(i * 5) % len(ranges)] for i in range(min(n, len(ranges)))]


def rate_pread(path, ranges, inflight):
    """O_DIRECT preadv of each range's aligned window, `inflight` threads at a time (os.preadv drops the
    GIL), into page-aligned buffers: bytes per second."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
    wins = [(b // 4096 * 4096, -(-e // 4096) * 4096) for b, e in ranges]
    size = max(e - b for b, e in wins)
    bufs = [mmap.mmap(-1, size) for _ in range(inflight)]
    nxt, lock, err = [0], threading.Lock(), []

    def worker(buf):
        mv = memoryview(buf)
        while True:
            with lock:
                if nxt[0] >= len(wins) or err:
                    return
                b, e = wins[nxt[0]]
                nxt[0] += 1
            try:
                os.preadv(fd, [mv[:e - b]], b)
            except OSError as x:
                err.append(str(x))
    t0 = time.perf_counter()
    ts = [threading.Thread(target=worker, args=(b,)) for b in bufs]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    dt = time.perf_counter() - t0
    os.close(fd)
    if err:
        raise OSError(err[0])
    return sum(e - b for b, e in wins) / dt


def rate_fio(path, bs, depth, nbytes):
    """fio's io_uring O_DIRECT random reads of bs at depth: bytes per second, or None without fio."""
    if shutil.which("fio") is None:
        return None
    r = subprocess.run(["fio", "--name=rate", f"--filename={path}", "--readonly", "--rw=randread", f"--bs={bs}",
                        "--direct=1", "--ioengine=io_uring", f"--iodepth={depth}", f"--io_size={nbytes}",
                        "--output-format=json"], capture_output=True, text=True)
    try:
        return json.loads(r.stdout)["jobs"][0]["read"]["bw_bytes"]
    except (ValueError, KeyError, IndexError):
        return None


def rate_ringfetch(path, ranges, depth):
    """ringfetch's own reader on the same ranges (rf.Pipeline.run over rf.File slices, a compute that does
    nothing): the rate the library's reads reach on this disk with nothing else to do; None without it."""
    try:
        import ringfetch as rf
    except ImportError:
        return None
    slot = -(-(max(e - b for b, e in ranges) + 8192) // 4096) * 4096
    with rf.File(path) as f:
        m = memoryview(f)
        with rf.Pipeline(slot, depth=depth, backend="threads") as p:
            srcs = [m[b:e] for b, e in ranges]
            t0 = time.perf_counter()
            p.run(srcs, lambda blk: None)
            dt = time.perf_counter() - t0
            del srcs
        m.release()
    return sum(e - b for b, e in ranges) / dt


def device_rates(path, n):
    """The device's read rate, cold, in the experts' own requests, measured several ways: {how: B/s}."""
    ranges = spread(expert_ranges(path), n)
    nbytes = sum(e - b for b, e in ranges)
    bs = max(1 << 20, (max(e - b for b, e in ranges) // (1 << 20)) << 20)
    out = {}
    for how, fn in (("pread-qd1", lambda: rate_pread(path, ranges, 1)),
                    ("pread-qd4", lambda: rate_pread(path, ranges, 4)),
                    ("fio-io_uring-qd8", lambda: rate_fio(path, bs, 8, nbytes)),
                    ("fio-io_uring-qd32", lambda: rate_fio(path, bs, 32, nbytes)),
                    ("ringfetch-run-depth10", lambda: rate_ringfetch(path, ranges, 10))):
        drop_cache([path])
        try:
            v = fn()
        except Exception as e:  # a way that cannot run here is left out, and said so
            log(f"  device rate {how}: {e}")
            v = None
        if v:
            out[how] = v
    return out


# ---- one contestant in its child -----------------------------------------------------------------------

def run_child(cg, tag, limit, argv, timeout):
    """Run argv in a fresh group of `limit` bytes: (returncode, peak bytes or None, oom kills, wall s, cpu s
    (the child's user + system time), stderr without warnings)."""
    path = cg.create(tag, limit)

    def enter():
        if path is not None:
            with open(f"{path}/cgroup.procs", "w") as f:
                f.write(str(os.getpid()))
    t0, cpu0 = time.monotonic(), resource.getrusage(resource.RUSAGE_CHILDREN)
    p = subprocess.Popen(argv, preexec_fn=enter, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        _, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        _, err = p.communicate()
        err = (err or "") + f"\n(killed after {timeout} s)"
    wall, cpu1 = time.monotonic() - t0, resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = cpu1.ru_utime + cpu1.ru_stime - cpu0.ru_utime - cpu0.ru_stime
    peak = cg.peak(path) if path else None
    ooms = cg.oom_kills(path) if path else 0
    if path:
        cg.destroy(path)
    tail = "\n".join(line for line in (err or "").splitlines() if "Warning" not in line)[-1500:]
    return p.returncode, peak, ooms, wall, cpu, tail


def logits_compare(a_path, b_path, vocab):
    """Per step: greedy tokens equal, and max |a - b| / max |b| (the relative difference of the logits)."""
    import array
    a, b = array.array("f"), array.array("f")
    with open(a_path, "rb") as f:
        a.frombytes(f.read())
    with open(b_path, "rb") as f:
        b.frombytes(f.read())
    if len(a) != len(b) or len(a) % vocab:
        return {"steps": 0, "argmax_equal_steps": 0, "argmax_equal": False, "max_rel_diff": None,
                "why": "logits of different lengths"}
    steps = len(a) // vocab
    same, worst = 0, 0.0
    for s in range(steps):
        x, y = a[s * vocab:(s + 1) * vocab], b[s * vocab:(s + 1) * vocab]
        ax = max(range(vocab), key=x.__getitem__)
        ay = max(range(vocab), key=y.__getitem__)
        same += ax == ay
        scale = max(abs(v) for v in y) or 1.0
        worst = max(worst, max(abs(p - q) for p, q in zip(x, y)) / scale)
    return {"steps": steps, "argmax_equal_steps": same, "argmax_equal": same == steps, "max_rel_diff": worst}


# ---- the run -------------------------------------------------------------------------------------------

def machine():
    model = "?"
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    hyp = "hypervisor" in open("/proc/cpuinfo").read()
    osr = "?"
    try:
        for line in open("/etc/os-release"):
            if line.startswith("PRETTY_NAME="):
                osr = line.split("=", 1)[1].strip().strip('"')
    except OSError:
        pass
    return {"cpu": model, "cpus": os.cpu_count(), "virtual": hyp, "os": osr, "kernel": platform.release(),
            "mem_gib": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / (1 << 30), 1)}


def versions(py):
    code = ("import json, torch, transformers, accelerate, safetensors, ringfetch;"
            "print(json.dumps({m.__name__: getattr(m, '__version__', '?') for m in "
            "(torch, transformers, accelerate, safetensors, ringfetch)}))")
    r = subprocess.run([py, "-c", code], capture_output=True, text=True)
    return json.loads(r.stdout) if r.returncode == 0 else {"error": r.stderr.strip()[-300:]}


def median(xs):
    return statistics.median(xs) if xs else None


def summarize(runs, facts, whole_ms):
    """One family's contestant: medians over its repetitions."""
    ok = [r for r in runs if r.get("ok")]
    out = {"runs": len(runs), "ok": len(ok)}
    if not ok:
        out["error"] = runs[-1].get("error") if runs else "not run"
        return out
    steps = [t for r in ok for t in r["step_ms"]]
    out["ms_per_step"] = median(steps)
    out["ms_per_step_reps"] = [median(r["step_ms"]) for r in ok]
    out["mib_read_per_step"] = median([r["decode_read_bytes"] / len(r["step_ms"]) / MiB for r in ok])
    out["prefill_ms"] = median([r["prefill_ms"] for r in ok])
    out["load_s"] = median([r["load_s"] for r in ok])
    out["loadavg_at_start"] = [r["loadavg"] for r in runs]
    for k in ("VmHWM", "cg_rss", "cg_cache", "cg_mapped_file", "cg_anon", "cg_file", "cg_file_mapped"):
        v = [r["memory_end"][k] for r in ok if k in r.get("memory_end", {})]
        if v:
            out[f"{k}_mib"] = max(v) / MiB
    # the group's peak: over the decode where the child could restart the count after its load (v1),
    # else over its whole life; the load's own peak beside it
    peaks = [r["peak"] for r in ok if r.get("peak")]
    out["peak_mib"] = max(peaks) / MiB if peaks else None
    out["peak_is_decode_only"] = all(r.get("load_peak") is not None for r in ok)
    lp = [r["load_peak"] for r in ok if r.get("load_peak")]
    out["load_peak_mib"] = max(lp) / MiB if lp else None
    out["wall_s"] = sum(r["wall_s"] for r in ok)
    # CPU the child used during its decode over the decode's wall time: below 1 where it waited (on
    # the disk, or on a CPU the machine's other processes held)
    out["cpu_s"] = sum(r["cpu_s"] for r in ok)
    for k in ("device_map_modules", "device_map"):
        if k in ok[0]:
            out[k] = ok[0][k]
    if ok[0].get("stats_end") is not None:
        hits = misses = used = 0
        agg = {}
        for r in ok:
            s1, s2 = r["stats_after_prefill"], r["stats_end"]
            d = {k: s2[k] - s1[k] for k in COUNTERS if isinstance(s2.get(k), (int, float)) and k in s1}
            r["stats_decode"] = d
            hits += d.get("hits", 0)
            misses += d.get("misses", 0)
            # the bytes that had to come from the disk: what was read, less the hints never used (wasted
            # counts blocks, blocks_per_expert of them an expert)
            wasted_b = d.get("wasted", 0) * s2.get("expert_bytes", facts["expert_bytes"]) / s2.get("blocks_per_expert", 1)
            used += max(0, d.get("bytes_read", 0) - wasted_b)
            for k in ("prefetches", "late", "hinted", "hint_correct", "wasted"):
                agg[k] = agg.get(k, 0) + d.get(k, 0)
        out["hit_rate"] = hits / (hits + misses) if hits + misses else None
        out["hint_accuracy"] = agg["hint_correct"] / agg["hinted"] if agg.get("hinted") else None
        out["decode_counts"] = dict(agg, hits=hits, misses=misses)
        out["stats_decode_last"] = ok[-1]["stats_decode"]
        out["needed_mib_per_step"] = used / sum(len(r["step_ms"]) for r in ok) / MiB
        out["describe"] = ok[-1].get("describe")
    cmp_ = [r["vs_whole"] for r in ok if r.get("vs_whole")]
    if cmp_:
        out["argmax_equal"] = all(c["argmax_equal"] for c in cmp_)
        out["argmax_steps"] = f"{sum(c['argmax_equal_steps'] for c in cmp_)}/{sum(c['steps'] for c in cmp_)}"
        diffs = [c["max_rel_diff"] for c in cmp_]
        out["max_rel_diff"] = None if None in diffs else max(diffs)
    return out


def fmt(v, spec):
    return "-" if v is None else format(v, spec)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="a smoke check: checkpoints of a few MiB, 4 steps, 1 rep")
    ap.add_argument("--out", default="build/results/hf")
    ap.add_argument("--families", default=",".join(FAMILIES))
    ap.add_argument("--contestants", default=",".join(CONTESTANTS))
    ap.add_argument("--steps", type=int, default=None, help="decode steps per contestant (default 16; quick 4)")
    ap.add_argument("--reps", type=int, default=None, help="repetitions, orders alternating (default 2; quick 1)")
    ap.add_argument("--budget", default=None, help="the experts' memory (default 256MiB; quick 10 experts)")
    ap.add_argument("--slack", default="96MiB", help="the cgroup's room beyond imports + weights + budget")
    ap.add_argument("--timeout", type=int, default=300, help="seconds a contestant may take in all")
    ap.add_argument("--greedy", action="store_true",
                    help="feed each step its own argmax (default: a fixed token stream, see contestant.py)")
    ap.add_argument("--python", default=sys.executable)
    a = ap.parse_args()
    fams = [f for f in a.families.split(",") if f]
    cons = [c for c in a.contestants.split(",") if c]
    bad = [f for f in fams if f not in FAMILIES] + [c for c in cons if c not in CONTESTANTS]
    if bad or not fams or not cons:
        print(f"run.py: unknown or no family / contestant: {bad}", file=sys.stderr)
        return 2
    steps = a.steps or (4 if a.quick else 16)
    reps = a.reps or (1 if a.quick else 2)
    slack = parse_size(a.slack)
    out = os.path.abspath(a.out)
    os.makedirs(out, exist_ok=True)
    scratch = os.path.join(out, "scratch")
    shutil.rmtree(scratch, ignore_errors=True)
    os.makedirs(scratch)
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1",
               TOKENIZERS_PARALLELISM="false", TRANSFORMERS_VERBOSITY="error", HF_HUB_OFFLINE="1")
    os.environ.update(env)
    cg = Cgroups()
    load0 = os.getloadavg()
    t_start = time.monotonic()
    res = {"machine": machine(), "versions": versions(a.python), "steps": steps, "reps": reps,
           "inputs": "greedy" if a.greedy else "a fixed token stream",
           "quick": a.quick, "loadavg_start": load0, "families": {}}
    log(f"machine: {res['machine']['cpu']}, {res['machine']['cpus']} CPUs{' (virtual)' if res['machine']['virtual'] else ''}, "
        f"{res['machine']['os']}, Linux {res['machine']['kernel']}; load average {load0[0]:.2f} {load0[1]:.2f} {load0[2]:.2f}")
    log(f"versions: {res['versions']}")
    log(f"memory cgroup: {('v%d under ' % cg.version + cg.parent) if cg.version else cg.why}")

    # the checkpoints
    facts = {}
    for fam in fams:
        d = os.path.join(out, fam + ("-small" if a.quick else ""))
        if not os.path.isdir(d):
            log(f"making the {fam} checkpoint in {d} (once) ...")
            r = subprocess.run([a.python, os.path.join(HERE, "checkpoint.py"), fam, d] + (["--small"] if a.quick else []),
                               capture_output=True, text=True, env=dict(env, OMP_NUM_THREADS="2"))
            if r.returncode != 0:
                print(f"checkpoint.py {fam} failed:\n{r.stderr[-2000:]}", file=sys.stderr)
                return 1
        facts[fam] = f = checkpoint_facts(d)
        f["dir"] = d
        log(f"{fam}: {d}: {f['file_bytes'] / MiB:.0f} MiB in {len(f['files'])} file(s); experts "
            f"{f['layers']} x {f['experts']} of {f['expert_bytes'] / MiB:.2f} MiB = {f['expert_bytes_total'] / MiB:.0f} MiB, "
            f"top-{f['top_k']}; the rest {f['non_expert_bytes'] / MiB:.1f} MiB")

    # what torch + transformers take to decode, as the group counts it: twice, the second is what the
    # contestants see (shared libraries a group has already paged in are charged to it, not again)
    base_peak = None
    for i in range(2):
        rc, base_peak, _, _, _, err = run_child(cg, f"rf-hf-{os.getpid()}-baseline-{i}", None,
                                                [a.python, os.path.join(HERE, "contestant.py"), "baseline",
                                                 facts[fams[0]]["dir"], "--out", os.path.join(scratch, "baseline.json")],
                                                a.timeout)
        if rc != 0:
            print(f"the baseline failed:\n{err}", file=sys.stderr)
            return 1
        res.setdefault("baseline_runs_mib", []).append(base_peak / MiB if base_peak else None)
    res["baseline_mib"] = base_peak / MiB if base_peak else None
    log("baseline (torch, transformers, accelerate, safetensors, ringfetch imported, a tiny model decoded): "
        + " then ".join(fmt(v, ".0f") for v in res["baseline_runs_mib"]) + " MiB as the cgroup counts it")

    failed = False
    for fam in fams:
        f = facts[fam]
        budget = parse_size(a.budget) if a.budget else (10 * f["expert_bytes"] if a.quick else 256 * MiB)
        limit = int((base_peak or 0) + f["non_expert_bytes"] + budget + slack) if base_peak else None
        fres = res["families"][fam] = {"checkpoint": {k: v for k, v in f.items() if k != "files"},
                                       "budget_mib": budget / MiB, "limit_mib": limit / MiB if limit else None,
                                       "enforced": bool(cg.version and limit), "contestants": {}}
        log(f"\n{fam}: budget {budget / MiB:.0f} MiB; cgroup limit "
            + (f"{limit / MiB:.0f} MiB = imports {base_peak / MiB:.0f} + non-expert weights "
               f"{f['non_expert_bytes'] / MiB:.0f} + budget {budget / MiB:.0f} + {slack / MiB:.0f} (whole: no limit)"
               if limit else "NONE (not enforced)"))
        runs = {c: [] for c in cons}
        rates = {}
        for rep in range(reps):
            # the device's read rate now, beside the contestants (the disk is shared)
            for how, v in device_rates(f["files"][0], 16).items():
                rates.setdefault(how, []).append(v)
            log(f"  rep {rep} device, cold, the experts' reads: "
                + ", ".join(f"{how} {v[-1] / 1e9:.2f}" for how, v in rates.items()) + " GB/s")
            order = cons if rep % 2 == 0 else list(reversed(cons))
            for c in order:
                tag = f"rf-hf-{os.getpid()}-{fam}-{c}-{rep}"
                rpath = os.path.join(scratch, tag + ".json")
                lpath = os.path.join(scratch, tag + ".f32")
                offload = os.path.join(out, "offload-" + tag)
                argv = [a.python, os.path.join(HERE, "contestant.py"), c, f["dir"], "--budget", str(budget),
                        "--steps", str(steps), "--out", rpath, "--logits", lpath] + (["--greedy"] if a.greedy else [])
                if c == "accelerate":
                    argv += ["--offload", offload]
                drop_cache(f["files"])
                load_start = os.getloadavg()[0]
                rc, peak, ooms, wall, cpu, err = run_child(cg, tag, None if c == "whole" else limit, argv, a.timeout)
                shutil.rmtree(offload, ignore_errors=True)
                r = {"rep": rep, "peak": peak, "oom_kills": ooms, "wall_s": wall, "cpu_s": cpu, "loadavg": load_start}
                if rc == 0 and os.path.exists(rpath):
                    r.update(json.load(open(rpath)), ok=True, logits=lpath)
                else:
                    why = "killed by the OOM killer in its cgroup" if ooms else f"exit status {rc}"
                    r.update(ok=False, error=f"{why}: {err.strip().splitlines()[-1] if err.strip() else ''}")
                    failed = True
                runs[c].append(r)
                log(f"  rep {rep} {c:17s} " + (f"{median(r['step_ms']):8.1f} ms/step  {r['decode_read_bytes'] / len(r['step_ms']) / MiB:7.1f} MiB read/step  "
                                             f"peak {fmt(peak / MiB if peak else None, '.0f')} MiB  load {r['load_s']:.1f} s  ({wall:.0f} s)"
                                             if r["ok"] else f"FAILED: {r['error']}\n{err}"))
        # every contestant's tokens and logits against the whole model's, repetition by repetition
        if "whole" in runs:
            for c in cons:
                for r, w in zip(runs[c], runs["whole"]):
                    if c != "whole" and r.get("ok") and w.get("ok"):
                        r["vs_whole"] = logits_compare(r["logits"], w["logits"], r["vocab"])
        whole_ms = summarize(runs["whole"], f, None).get("ms_per_step") if "whole" in runs else None
        for c in cons:
            fres["contestants"][c] = s = summarize(runs[c], f, whole_ms)
            s["per_rep"] = [{k: v for k, v in r.items() if k not in ("logits", "tokens", "step_ms")} |
                            {"step_ms": [round(t, 3) for t in r.get("step_ms", [])]} for r in runs[c]]
        cs = fres["contestants"]
        rf_ms = cs.get("ringfetch", {}).get("ms_per_step")
        for other in ("accelerate", "mmap", "whole"):
            o = cs.get(other, {}).get("ms_per_step")
            if rf_ms and o:
                fres[f"ringfetch_over_{other}"] = rf_ms / o
        # what ringfetch's own reads reached during its decode is a rate the device gave too
        rf_ok = [r for r in runs.get("ringfetch", []) if r.get("ok") and r.get("step_ms")]
        if rf_ok:
            rates["ringfetch-decode"] = [r["decode_read_bytes"] / (sum(r["step_ms"]) / 1e3) for r in rf_ok]
        fres["device_read_gbps"] = {how: median(v) / 1e9 for how, v in rates.items()}
        rate = max(median(v) for v in rates.values()) if rates else None
        fres["device_rate_gbps"] = rate / 1e9 if rate else None
        need = cs.get("ringfetch", {}).get("needed_mib_per_step")
        if need is not None and whole_ms and rate:
            fres["disk_bound_ms"] = need * MiB / rate * 1e3 + whole_ms
            fres["ringfetch_over_disk_bound"] = rf_ms / fres["disk_bound_ms"] if rf_ms else None
        nh = cs.get("ringfetch-nohints", {}).get("ms_per_step")
        if rf_ms and nh:
            fres["ringfetch_over_ringfetch-nohints"] = rf_ms / nh
        for c in ("ringfetch", "ringfetch-nohints"):
            rfc = cs.get(c, {})
            if "argmax_equal" in rfc:  # the contract: argmax at every step, <= 1e-5 relative difference
                good = rfc["argmax_equal"] and rfc["max_rel_diff"] is not None and rfc["max_rel_diff"] <= 1e-5
                rfc["logits_match"] = good
                failed |= not good

        fres["enforced"] = bool(cg.version and limit)  # false where making a group failed on the way

    res["loadavg_end"] = os.getloadavg()
    res["seconds"] = time.monotonic() - t_start
    report(res, cons, fams, out)
    shutil.rmtree(scratch, ignore_errors=True)
    return 1 if failed else 0


def report(res, cons, fams, out):
    log("")
    for fam in fams:
        fr = res["families"][fam]
        log(f"{fam}: budget {fr['budget_mib']:.0f} MiB, cgroup {fmt(fr['limit_mib'], '.0f')} MiB"
            f"{'' if fr['enforced'] else ' (NOT enforced: unconstrained)'}; medians over {res['reps']} x {res['steps']} steps")
        log("  (peak: the group's during the decode, page cache included (load-peak: during the load); RSS: the"
            " process's peak resident set, shared libraries and mapped file pages included; cache: the group's"
            " page cache after the decode)")
        log(f"  {'contestant':17s} {'ms/step':>9s} {'MiB read/step':>14s} {'hit rate':>9s} {'peak MiB':>9s} {'load-peak':>9s} "
            f"{'RSS MiB':>8s} {'cache MiB':>9s} {'load s':>7s}  tokens = whole's")
        for c in cons:
            s = fr["contestants"][c]
            if not s.get("ok"):
                log(f"  {c:17s} FAILED: {s.get('error')}")
                continue
            tok = "bound" if c == "whole" else (f"{s['argmax_steps']}" + (f", max rel diff {fmt(s['max_rel_diff'], '.1e')}" if c.startswith("ringfetch") else "")) \
                if "argmax_steps" in s else "-"
            log(f"  {c:17s} {s['ms_per_step']:9.1f} {s['mib_read_per_step']:14.1f} {fmt(s.get('hit_rate'), '9.2f'):>9s} "
                f"{fmt(s['peak_mib'], '9.0f'):>9s} {fmt(s.get('load_peak_mib'), '9.0f'):>9s} {fmt(s.get('VmHWM_mib'), '8.0f'):>8s} "
                f"{fmt(s.get('cg_cache_mib', s.get('cg_file_mib')), '9.0f'):>9s} {s['load_s']:7.1f}  {tok}")
        ratios = [f"ringfetch / {o} = {fr[k]:.2f}x" for o, k in (("accelerate", "ringfetch_over_accelerate"),
                                                                ("mmap", "ringfetch_over_mmap"),
                                                                ("ringfetch-nohints", "ringfetch_over_ringfetch-nohints"),
                                                                ("whole", "ringfetch_over_whole")) if k in fr]
        if ratios:
            log("  " + "; ".join(ratios))
        for c in ("ringfetch", "ringfetch-nohints"):
            d = fr["contestants"].get(c, {}).get("decode_counts")
            if d:
                n = res["reps"] * res["steps"]
                log(f"  {c}: per step {d['hits'] / n:.1f} hits ({d['late'] / n:.1f} of them still reading), "
                    f"{d['misses'] / n:.1f} misses"
                    + (f"; {d['hinted'] / n:.1f} hinted, {fmt(fr['contestants'][c].get('hint_accuracy'), '.0%')} of them routed, "
                       f"{d['wasted'] / n:.1f} hint reads never used" if d.get("hinted") else ""))
        if "disk_bound_ms" in fr:
            rc = fr["contestants"]["ringfetch"]
            log(f"  disk bound: {rc['needed_mib_per_step']:.1f} MiB of experts to read per step / "
                f"{fr['device_rate_gbps']:.2f} GB/s (the best of " + ", ".join(f"{k} {v:.2f}" for k, v in fr["device_read_gbps"].items())
                + f") + whole {fr['contestants']['whole']['ms_per_step']:.1f} ms "
                f"= {fr['disk_bound_ms']:.1f} ms/step; ringfetch {fr['ringfetch_over_disk_bound']:.2f}x it")
        for c in ("ringfetch", "ringfetch-nohints"):
            rc = fr["contestants"].get(c, {})
            if "logits_match" in rc:
                log(f"  {c}'s logits: " + (f"equal to the whole model's (argmax at every step, max relative difference "
                                          f"{rc['max_rel_diff']:.1e} <= 1e-5)" if rc["logits_match"]
                                          else f"DIFFER from the whole model's (argmax equal at {rc['argmax_steps']} "
                                               f"steps, max relative difference {fmt(rc['max_rel_diff'], '.1e')})"))
        log("")
    la, lb = res["loadavg_start"], res["loadavg_end"]
    log(f"load average at the start {la[0]:.2f}, at the end {lb[0]:.2f} ({res['machine']['cpus']} CPUs); "
        f"{res['seconds']:.0f} s in all")
    with open(os.path.join(out, "hf.json"), "w") as f:
        json.dump(res, f, indent=1)
    plot(res, cons, fams, out)
    log(f"results in {out}/: hf.json, hf.dat" + (", hf.png" if os.path.exists(os.path.join(out, "hf.png")) else ""))


def plot(res, cons, fams, out):
    """ms/step per family and contestant (log scale), with the disk bound beside them: gnuplot, where it is."""
    dat = os.path.join(out, "hf.dat")
    cols = [c for c in cons if any(res["families"][fam]["contestants"][c].get("ms_per_step") for fam in fams)]
    vals_of = {c: [res["families"][fam]["contestants"][c].get("ms_per_step") for fam in fams] for c in cols}
    if any(res["families"][fam].get("disk_bound_ms") for fam in fams):
        cols.append("disk-bound")
        vals_of["disk-bound"] = [res["families"][fam].get("disk_bound_ms") for fam in fams]
    if not cols:
        return
    with open(dat, "w") as f:
        f.write("# family " + " ".join(cols) + "  (ms per decode step; NaN: not run or failed)\n")
        for fam in fams:
            vals = [vals_of[c][fams.index(fam)] for c in cols]
            f.write(fam + " " + " ".join("NaN" if v is None else f"{v:.3f}" for v in vals) + "\n")
    if shutil.which("gnuplot") is None:
        return
    m = res["machine"]
    fr0 = res["families"][fams[0]]
    nb = fr0["checkpoint"]["file_bytes"]
    size_txt = f"{nb / (1 << 30):.1f} GiB" if nb >= 1 << 30 else f"{nb / MiB:.0f} MiB"
    script = f"""
set terminal pngcairo size 900,520 font ",10" noenhanced
set output "{os.path.join(out, 'hf.png')}"
set title "Decoding one token per step: a {size_txt} MoE checkpoint in a {fmt(fr0['limit_mib'], '.0f')} MiB memory cgroup\\n{m['cpu']}, {m['cpus']} CPUs, one torch thread"
set style data histogram
set style histogram cluster gap 1
set style fill solid 0.8 border -1
set logscale y
set ylabel "ms per decode step (log scale)"
set key top left
set grid ytics
plot "{dat}" using 2:xtic(1) title "{cols[0]}"\
""" + "".join(f', "" using {j + 2} title "{c}"' for j, c in enumerate(cols) if j) + "\n"
    r = subprocess.run(["gnuplot"], input=script, text=True, capture_output=True)
    if r.returncode != 0:
        log(f"gnuplot: {r.stderr.strip()[-300:]}")


if __name__ == "__main__":
    sys.exit(main())
