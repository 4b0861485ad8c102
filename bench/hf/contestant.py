"""bench/hf/contestant.py — one contestant of the transformers benchmark, in this (fresh) process.

Started by bench/hf/run.py inside its memory cgroup. Loads the checkpoint the contestant's way, makes
the file cold, then decodes after a fixed prompt: a prefill, then one token per step for `--steps`
steps (the tokens of a fixed stream, or with --greedy each step's argmax), one torch thread, timing
each step. Writes a JSON report (per-step times, bytes read from storage during the decode from
/proc/self/io, ringfetch's stats, memory) and the logits of every step (the prefill's last position
first) as raw float32, for the driver's comparison with the whole model.

  ringfetch   ringfetch.transformers.from_pretrained(dir, budget): the experts served from the file;
  ringfetch-nohints   the same with prefetch=False (no hints for the next layer's experts);
  mmap        every tensor a zero-copy view of one mapping of the file (torch.frombuffer, assigned with
              load_state_dict(assign=True)), each expert's projections as the file holds them: the
              page cache and the page faults serve the experts (what llama.cpp does with its mmap);
  accelerate  transformers' from_pretrained(device_map="auto", max_memory={"cpu": budget},
              offload_folder=DIR): accelerate's disk offload as its users run it;
  whole       transformers' from_pretrained, the whole model in memory (no limit: the bound);
  baseline    imports what the others import and decodes a tiny model of the checkpoint's family built
              in memory, reading nothing of the checkpoint (the memory torch + transformers take).

usage: python contestant.py KIND MODEL_DIR --budget BYTES --steps N --out REPORT.json
                            [--logits OUT.f32] [--offload DIR] [--prompt-len L] [--threads 1] [--greedy]
"""
import argparse
import json
import os
import time
import warnings

# One compute thread: set before torch is imported so OpenMP's pool is made that size.
for _v in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ.setdefault(_v, "1")


def read_bytes():
    """Bytes this process (all its threads, io_uring's workers included) caused to be read from storage."""
    with open("/proc/self/io") as f:
        for line in f:
            if line.startswith("read_bytes:"):
                return int(line.split()[1])
    return 0


def memory_now():
    """This process's peak and current resident set (VmHWM, VmRSS: file pages it maps included) and its
    memory cgroup's split (v1 memory.stat total_rss / total_cache / total_mapped_file; v2 anon / file /
    file_mapped), in bytes."""
    out = {}
    with open("/proc/self/status") as f:
        for line in f:
            k, _, v = line.partition(":")
            if k in ("VmHWM", "VmRSS"):
                out[k] = int(v.split()[0]) * 1024
    with open("/proc/self/cgroup") as f:
        lines = [ln.rstrip("\n").split(":", 2) for ln in f]
    for hid, ctl, path in lines:
        if "memory" in ctl.split(","):
            stat, keys = f"/sys/fs/cgroup/memory{path}/memory.stat", ("total_rss", "total_cache", "total_mapped_file")
            break
    else:
        path = next((p for h, c, p in lines if h == "0" and c == ""), None)
        stat, keys = f"/sys/fs/cgroup{path}/memory.stat", ("anon", "file", "file_mapped")
    try:
        with open(stat) as f:
            for line in f:
                k, _, v = line.partition(" ")
                if k in keys:
                    out["cg_" + k.replace("total_", "")] = int(v)
    except OSError:
        pass
    return out


def cgroup_v1_dir():
    """This process's memory cgroup directory where it is cgroup v1 (None on v2 or without one)."""
    with open("/proc/self/cgroup") as f:
        for line in f:
            _, ctl, path = line.rstrip("\n").split(":", 2)
            if "memory" in ctl.split(","):
                return f"/sys/fs/cgroup/memory{path}"
    return None


def reset_peak():
    """The group's peak so far (the load's), then restart its count from now (v1: a write of 0 to
    memory.max_usage_in_bytes), so the driver's reading after exit is the decode's peak; None on v2."""
    d = cgroup_v1_dir()
    try:
        with open(f"{d}/memory.max_usage_in_bytes") as f:
            peak = int(f.read())
        with open(f"{d}/memory.max_usage_in_bytes", "w") as f:
            f.write("0")
        return peak
    except (OSError, TypeError, ValueError):
        return None


def drop_cache(paths):
    """Make the files cold: write back what is dirty, then drop their clean pages from the page cache."""
    for p in paths:
        try:
            fd = os.open(p, os.O_RDONLY)
        except OSError:
            continue
        try:
            os.fdatasync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def checkpoint_files(model_dir):
    return sorted(os.path.join(model_dir, n) for n in os.listdir(model_dir) if n.endswith(".safetensors"))


def safetensors_header(path):
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        h = json.loads(f.read(n))
    h.pop("__metadata__", None)
    return 8 + n, h


# ---- the contestants' loaders ---------------------------------------------------------------------

def load_whole(model_dir, a):
    from transformers import AutoModelForCausalLM
    return AutoModelForCausalLM.from_pretrained(model_dir, experts_implementation="eager"), {}


def load_accelerate(model_dir, a):
    from transformers import AutoModelForCausalLM
    os.makedirs(a.offload, exist_ok=True)
    m = AutoModelForCausalLM.from_pretrained(model_dir, device_map="auto", max_memory={"cpu": a.budget},
                                             offload_folder=a.offload, experts_implementation="eager")
    dm = {k: str(v) for k, v in getattr(m, "hf_device_map", {}).items()}
    placed = {}
    for where in dm.values():
        placed[where] = placed.get(where, 0) + 1
    return m, {"device_map_modules": placed, "device_map": dm}


def load_ringfetch(model_dir, a, prefetch=True):
    from ringfetch.transformers import from_pretrained
    return from_pretrained(model_dir, a.budget, prefetch=prefetch, experts_implementation="eager"), {}


def load_ringfetch_nohints(model_dir, a):
    return load_ringfetch(model_dir, a, prefetch=False)


# The checkpoint's names for one expert's projections, by family: (gate, up, down) under the layer's
# experts prefix (Mixtral as save_pretrained writes it; Qwen MoE as its checkpoints hold it).
EXPERT_NAMES = {
    "mixtral": ("model.layers.{l}.block_sparse_moe.experts.{e}.", ("w1.weight", "w3.weight", "w2.weight")),
    "qwen3_moe": ("model.layers.{l}.mlp.experts.{e}.", ("gate_proj.weight", "up_proj.weight", "down_proj.weight")),
    "qwen2_moe": ("model.layers.{l}.mlp.experts.{e}.", ("gate_proj.weight", "up_proj.weight", "down_proj.weight")),
}
# What the in-memory model calls the rest, where the checkpoint's name differs.
RENAMES = {"mixtral": [(".block_sparse_moe.gate.", ".mlp.gate.")]}


def mmap_experts_forward(mod, gate, up, down):
    """The experts' forward over per-expert views: transformers' eager loop (MixtralExperts.forward),
    with gate_up_proj[e] as the two projections the checkpoint holds apart (no copy is made)."""
    import torch
    import torch.nn.functional as F

    def forward(hidden_states, top_k_index, top_k_weights):
        out = torch.zeros_like(hidden_states)
        with torch.no_grad():
            mask = F.one_hot(top_k_index, num_classes=mod.num_experts).permute(2, 1, 0)
            hit = torch.greater(mask.sum(dim=(-1, -2)), 0).nonzero()
        for e in hit[:, 0].tolist():
            pos, tok = torch.where(mask[e])
            x = hidden_states[tok]
            h = mod.act_fn(F.linear(x, gate[e])) * F.linear(x, up[e])
            h = F.linear(h, down[e]) * top_k_weights[tok, pos, None]
            out.index_add_(0, tok, h.to(out.dtype))
        return out
    return forward


def load_mmap(model_dir, a):
    import mmap
    import torch
    from accelerate import init_empty_weights
    from transformers import AutoConfig, AutoModelForCausalLM

    cfg = AutoConfig.from_pretrained(model_dir)
    if cfg.model_type not in EXPERT_NAMES:
        raise SystemExit(f"mmap contestant: no layout known for model_type {cfg.model_type!r}")
    with init_empty_weights(include_buffers=False):
        model = AutoModelForCausalLM.from_config(cfg, experts_implementation="eager")
    dtypes = {"F32": torch.float32, "BF16": torch.bfloat16, "F16": torch.float16}
    views, maps = {}, []
    warnings.filterwarnings("ignore", message="The given buffer is not writable")
    for path in checkpoint_files(model_dir):
        start, hdr = safetensors_header(path)
        with open(path, "rb") as f:
            mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)  # PROT_READ, MAP_SHARED
        maps.append(mm)
        for name, t in hdr.items():
            b, e = t["data_offsets"]
            dt = dtypes[t["dtype"]]
            n = (e - b) // dt.itemsize
            views[name] = torch.frombuffer(mm, dtype=dt, count=n, offset=start + b).view(t["shape"])
    prefix, (g, u, d) = EXPERT_NAMES[cfg.model_type]
    sd = {}
    for name, v in views.items():
        if ".experts." in name:
            continue
        for old, new in RENAMES.get(cfg.model_type, []):
            name = name.replace(old, new)
        sd[name] = v
    missing, unexpected = model.load_state_dict(sd, strict=False, assign=True)
    experts_missing = [k for k in missing if ".experts." not in k]
    if experts_missing or unexpected:
        raise SystemExit(f"mmap contestant: names not matched: missing {experts_missing[:4]}, unexpected {unexpected[:4]}")
    for li, layer in enumerate(model.model.layers):
        mod = layer.mlp.experts
        fused = f"model.layers.{li}.mlp.experts.gate_up_proj"
        if fused in views:  # a checkpoint in the fused layout: the 3-D tensors are the views themselves
            mod.gate_up_proj = torch.nn.Parameter(views[fused], requires_grad=False)
            mod.down_proj = torch.nn.Parameter(views[f"model.layers.{li}.mlp.experts.down_proj"], requires_grad=False)
            continue
        ex = [prefix.format(l=li, e=e) for e in range(mod.num_experts)]
        gate = [views[p + g] for p in ex]
        up = [views[p + u] for p in ex]
        down = [views[p + d] for p in ex]
        del mod.gate_up_proj, mod.down_proj  # the meta placeholders: the views below replace them
        mod.forward = mmap_experts_forward(mod, gate, up, down)
    model.eval()
    model._bench_maps = maps  # keep the mappings alive as long as the views
    return model, {}


def baseline(a, rep):
    """What torch + transformers take to decode, as the group counts it: the same imports, then a tiny
    model of the checkpoint's family (hidden 64, 2 layers) built in memory and decoded for a few steps, so
    the code the contestants run is loaded too; nothing of the checkpoint is read."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM
    try:
        import ringfetch.transformers  # noqa: F401
    except ImportError:
        import ringfetch  # noqa: F401
    cfg = AutoConfig.from_pretrained(a.model_dir)
    for k, v in dict(hidden_size=64, intermediate_size=128, moe_intermediate_size=128, num_hidden_layers=2,
                     num_attention_heads=4, num_key_value_heads=2, head_dim=16, vocab_size=256).items():
        if hasattr(cfg, k):
            setattr(cfg, k, v)
    model = AutoModelForCausalLM.from_config(cfg, experts_implementation="eager").eval()
    with torch.inference_mode():
        out = model(input_ids=torch.arange(a.prompt_len)[None] % 256, use_cache=True)
        for _ in range(3):
            out = model(input_ids=out.logits[:, -1:].argmax(-1), cache=out.cache, use_cache=True)
    with open(a.out, "w") as f:
        json.dump(rep, f)


LOADERS = {"whole": load_whole, "accelerate": load_accelerate, "ringfetch": load_ringfetch,
           "ringfetch-nohints": load_ringfetch_nohints, "mmap": load_mmap}


def ringfetch_stats(model):
    rf = getattr(model, "ringfetch", None)
    if rf is None:
        return None
    s = rf.stats()
    return {k: v for k, v in s.items() if isinstance(v, (int, float, str, bool))}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("kind", choices=["baseline", *LOADERS])
    ap.add_argument("model_dir")
    ap.add_argument("--budget", type=int, default=256 << 20)
    ap.add_argument("--steps", type=int, default=16)
    ap.add_argument("--prompt-len", type=int, default=16)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--offload", default=None)
    ap.add_argument("--greedy", action="store_true", help="feed each step the argmax of the one before")
    ap.add_argument("--out", required=True)
    ap.add_argument("--logits", default=None)
    a = ap.parse_args()

    rep = {"kind": a.kind, "pid": os.getpid()}
    t0 = time.monotonic()
    import torch
    import transformers  # noqa: F401  (what every contestant pays: part of the baseline)
    import accelerate  # noqa: F401
    import safetensors  # noqa: F401
    torch.set_num_threads(a.threads)
    rep["import_s"] = time.monotonic() - t0
    if a.kind == "baseline":
        baseline(a, rep)
        return

    files = checkpoint_files(a.model_dir)
    t0 = time.monotonic()
    model, extra = LOADERS[a.kind](a.model_dir, a)
    model.eval()
    rep["load_s"] = time.monotonic() - t0
    rep.update(extra)
    cold = list(files)
    if a.offload and os.path.isdir(a.offload):
        cold += [os.path.join(r, n) for r, _, ns in os.walk(a.offload) for n in ns]
    drop_cache(cold)  # the file cold at the start of the decode, for every contestant alike
    rep["load_peak"] = reset_peak()

    vocab = model.config.get_text_config().vocab_size
    g = torch.Generator().manual_seed(1234)
    prompt = torch.randint(0, vocab, (1, a.prompt_len), generator=g)
    # The token each step decodes: by default the next of a fixed stream (the same inputs for every
    # contestant, routes that vary as a text's do); --greedy: the argmax of the step before, which in a
    # random-weight model soon repeats one token, and with it the same experts at every step.
    stream = torch.randint(0, vocab, (a.steps,), generator=g).tolist()
    logits_out = open(a.logits, "wb") if a.logits else None
    stats0 = ringfetch_stats(model)
    rb0 = read_bytes()
    times, tokens = [], []
    with torch.inference_mode():
        t0 = time.perf_counter()
        out = model(input_ids=prompt, use_cache=True)
        rep["prefill_ms"] = (time.perf_counter() - t0) * 1e3
        rep["prefill_read_bytes"] = read_bytes() - rb0
        cache, last = out.cache, out.logits[0, -1].float()
        stats1 = ringfetch_stats(model)
        rb1 = read_bytes()
        for i in range(a.steps):
            tokens.append(int(last.argmax()))
            tok = tokens[-1] if a.greedy else stream[i]
            if logits_out:
                logits_out.write(last.numpy().tobytes())
            t0 = time.perf_counter()
            out = model(input_ids=torch.tensor([[tok]]), cache=cache, use_cache=True)
            times.append((time.perf_counter() - t0) * 1e3)
            cache, last = out.cache, out.logits[0, -1].float()
        tokens.append(int(last.argmax()))
        if logits_out:
            logits_out.write(last.numpy().tobytes())
            logits_out.close()
    rep["decode_read_bytes"] = read_bytes() - rb1
    rep["memory_end"] = memory_now()
    rep["step_ms"] = times
    rep["tokens"] = tokens
    rep["vocab"] = vocab
    stats2 = ringfetch_stats(model)
    if stats2 is not None:
        rep["stats_before_prefill"], rep["stats_after_prefill"], rep["stats_end"] = stats0, stats1, stats2
        try:
            rep["describe"] = model.ringfetch.describe()
        except Exception as e:  # a report without it, never a lost run
            rep["describe"] = f"describe() failed: {e}"
    with open(a.out, "w") as f:
        json.dump(rep, f)
    if stats2 is not None:
        model.ringfetch.close()


if __name__ == "__main__":
    main()
