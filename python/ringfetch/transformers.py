"""Serve a Hugging Face transformers MoE model whose experts stay in their safetensors files.

    from ringfetch.transformers import from_pretrained
    model = from_pretrained("path/to/checkpoint", "2GiB")       # the experts' weights take at most 2 GiB
    out = model.generate(input_ids, max_new_tokens=32)          # the transformers model itself
    model.ringfetch.stats()                                     # hits, misses, bytes_read, prefetches, wasted
    model.ringfetch.close()                                     # also when the model is collected

Everything but the experts is loaded by transformers' own from_pretrained (its weight-name conversions,
dtype, tied weights, generation config). Every experts module whose projections are parameters with a
leading experts dimension (gate_up_proj [E, 2I, H], down_proj [E, H, I]: Mixtral, Qwen2-MoE, Qwen3-MoE,
OLMoE, ...) gets no parameters in memory: its routed experts are read from the checkpoint, with
O_DIRECT where the file allows it, into the slots of one keyed rf.Pipeline, which are their only copy in
memory, and computed from zero-copy views of the slots with the ops, in the order, of transformers' eager
experts loop (so the logits are those of the model loaded whole with experts_implementation="eager").
docs/transformers.md is the guide.

How the experts are served:
- Reads. An expert whose tensors are adjacent in its file (Mixtral's w1, w2, w3; Qwen's down, gate,
  up, as save_pretrained writes them) is one range, one key, one read; a fused checkpoint (3-D
  tensors) is read as its gate, up and down slices. Each range is widened to 4 KiB boundaries, so it is
  read with O_DIRECT straight into its slot: no page-cache copy, no move.
- Order. At each experts module the routed experts are looked up first: those in the slots are
  computed first, while the misses' reads (issued together) are in flight; the results are added in
  the eager loop's order (ascending expert), so the sums are the same: bit for bit where the same
  kernels run. (They do not quite where the checkpoint puts an expert's tensors on 8 but not 16 bytes
  -- half of all safetensors files, whose data start at 8 + the header's length, a multiple of 8: the
  slot keeps the file's alignment, and the BLAS takes another path for a matrix off 16 bytes; a
  last-bit difference, ~1e-7 relative.)
- Hints (prefetch=True). The next experts module's router is applied to the current hidden state and
  its likeliest experts are hinted; how many follows the hints' measured precision (hint_count):
  a wrong hint is a whole expert read for nothing. stats()["hint_accuracy"] says how they fare.
- Short slots. With fewer slots than one forward's experts, least-recently-used would evict, layer after
  layer, what the next forward needs first; the most routed experts keep their slots instead, and the
  others are evicted once used.
- The non-expert weights get memory of their own (transformers would leave them views of its mapping
  of the checkpoint, which a file shrinking later would turn into a SIGBUS).

Importing this module imports neither torch nor transformers; from_pretrained does.
"""
import functools
import heapq
import json
import os
import re
import threading
import weakref

from . import _ringfetch as _rf
from . import safetensors as _rst

__all__ = ["from_pretrained", "parse_budget", "ExpertServer"]

_UNITS = {"": 1, "B": 1, "K": 1 << 10, "KI": 1 << 10, "KB": 1000, "KIB": 1 << 10, "M": 1 << 20, "MI": 1 << 20,
          "MB": 1000 ** 2, "MIB": 1 << 20, "G": 1 << 30, "GI": 1 << 30, "GB": 1000 ** 3, "GIB": 1 << 30,
          "T": 1 << 40, "TI": 1 << 40, "TB": 1000 ** 4, "TIB": 1 << 40}
_BUDGET_RE = re.compile(r"^\s*([0-9]+(?:\.[0-9]*)?)\s*([A-Za-z]*)\s*$")

# The safetensors dtypes an expert's weights may have, as torch names them (looked up once torch is in).
_TORCH_DTYPES = {"F32": "float32", "F16": "float16", "BF16": "bfloat16", "F64": "float64"}

# The most slots one pipeline takes (RF_MAX_DEPTH).
_MAX_SLOTS = 1024

# Class patching during a load is process-wide: one load at a time.
_LOAD_LOCK = threading.Lock()


def parse_budget(budget):
    """Bytes from an int or a string: "256MiB", "2GiB", "1.5 GiB", "512MB", "1048576". Binary units (KiB,
    MiB, GiB, TiB; K, M, G, T) are powers of 1024, decimal ones (KB, MB, GB, TB) powers of 1000."""
    if isinstance(budget, bool) or not isinstance(budget, (int, str)):
        raise TypeError("memory_budget must be an int (bytes) or a string such as \"2GiB\", not %s"
                        % type(budget).__name__)
    if isinstance(budget, int):
        value = budget
    else:
        m = _BUDGET_RE.match(budget)
        unit = m.group(2).upper() if m else None
        if m is None or unit not in _UNITS:
            raise _rf.InvalidArgument("memory_budget %r is not a size (e.g. 268435456, \"256MiB\", \"2GiB\")"
                                      % (budget,))
        value = int(float(m.group(1)) * _UNITS[unit])
    if value <= 0:
        raise _rf.InvalidArgument("memory_budget must be positive, not %r" % (budget,))
    return value


def _fmt_bytes(n):
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return "%.1f %s" % (n / size, unit)
    return "%d B" % n


# ---------------------------------------------------------------------------------------------------------
# The checkpoint: its files and where each expert's bytes are.

def _checkpoint_files(model_dir):
    """The safetensors files of a save_pretrained directory, and {tensor name: file} from its index json
    (None for a single file). FileNotFoundError for a missing directory, file or shard."""
    from transformers.utils import SAFE_WEIGHTS_INDEX_NAME, SAFE_WEIGHTS_NAME

    if not os.path.isdir(model_dir):
        raise FileNotFoundError("ringfetch.transformers: %s is not a directory (a checkpoint written by "
                                "save_pretrained)" % model_dir)
    index = os.path.join(model_dir, SAFE_WEIGHTS_INDEX_NAME)
    if os.path.isfile(index):
        with open(index, "rb") as f:
            try:
                weight_map = json.load(f)["weight_map"]
                if not isinstance(weight_map, dict) or not all(
                        isinstance(k, str) and isinstance(v, str) for k, v in weight_map.items()):
                    raise TypeError
            except (ValueError, KeyError, TypeError):
                raise _rf.InvalidArgument("%s: not a safetensors index (a JSON object with a \"weight_map\" "
                                          "of tensor names to file names)" % index) from None
        files = []
        for shard in sorted(set(weight_map.values())):
            path = os.path.join(model_dir, shard)
            if os.path.basename(shard) != shard or not os.path.isfile(path):
                raise FileNotFoundError("%s names the shard %s, which is not in %s" % (index, shard, model_dir))
            files.append(path)
        return files, {name: os.path.join(model_dir, shard) for name, shard in weight_map.items()}
    single = os.path.join(model_dir, SAFE_WEIGHTS_NAME)
    if os.path.isfile(single):
        return [single], None
    raise FileNotFoundError("ringfetch.transformers: %s holds neither %s nor %s (experts are served from "
                            "safetensors checkpoints)" % (model_dir, SAFE_WEIGHTS_NAME, SAFE_WEIGHTS_INDEX_NAME))


def _reference_experts_code():
    """The code object of transformers' eager experts loop (MixtralExperts.forward, undecorated): a class
    whose eager forward has this very code computes what _Layer.forward reproduces."""
    from transformers.models.mixtral.modeling_mixtral import MixtralExperts

    f = MixtralExperts.forward
    return getattr(f, "__wrapped__", f).__code__


def _same_code(a, b):
    return (a.co_code == b.co_code and a.co_names == b.co_names and a.co_consts == b.co_consts
            and a.co_varnames == b.co_varnames)


def _find_experts(meta_model):
    """[(module name, module)] of the experts modules to serve; ValueError when there are none, naming
    the model_type and what was looked for (and what was found instead, if anything looked close)."""
    ref = _reference_experts_code()
    found, near = [], []
    for name, mod in meta_model.named_modules():
        params = dict(mod.named_parameters(recurse=False))
        e = getattr(mod, "num_experts", None)
        up = params.get("gate_up_proj")
        down = params.get("down_proj")
        if not isinstance(e, int) or up is None or down is None or up.dim() != 3 or down.dim() != 3:
            continue
        if up.shape[0] != e or down.shape[0] != e:
            continue
        fwd = type(mod).forward
        code = getattr(getattr(fwd, "__wrapped__", fwd), "__code__", None)
        plain = (set(params) == {"gate_up_proj", "down_proj"} and not getattr(mod, "is_transposed", False)
                 and getattr(mod, "has_gate", True) and not getattr(mod, "has_bias", False)
                 and not getattr(mod, "has_post_expert_norm", False) and getattr(mod, "is_concatenated", True)
                 and up.shape[1] % 2 == 0 and up.shape[2] == down.shape[1] and down.shape[2] * 2 == up.shape[1])
        if code is not None and _same_code(code, ref) and plain:
            found.append((name, mod))
        else:
            near.append("%s (%s)" % (name, type(mod).__name__))
    if not found:
        cfg = meta_model.config
        msg = ("ringfetch.transformers: model_type %r (%s) has no experts module to serve: looked for modules "
               "with parameters gate_up_proj [E, 2I, H] and down_proj [E, H, I] (a leading experts dimension) "
               "computed by transformers' eager experts loop, as in MixtralExperts, Qwen2MoeExperts, "
               "Qwen3MoeExperts, OlmoeExperts" % (cfg.model_type, type(meta_model).__name__))
        if near:
            msg += "; found %s, which compute(s) otherwise" % ", ".join(near[:3])
        raise ValueError(msg)
    return found


def _converter_parts(converter, pattern):
    """For a transformers WeightConverter fusing per-expert checkpoint tensors into a 3-D parameter:
    (part, nparts) of `pattern` -- the tensor is rows [part] of the expert's slice of the parameter, the
    parts concatenated in source-pattern order. None for a conversion this module cannot serve from the
    file as it is (transposes, interleaving, quantization)."""
    from transformers.core_model_loading import Concatenate, MergeModulelist

    ops = list(getattr(converter, "operations", []) or [])
    kinds = [type(op) for op in ops]
    if getattr(converter, "quantization_operation", None) is not None:
        return None
    if kinds == [MergeModulelist] and ops[0].dim == 0 and len(converter.source_patterns) == 1:
        return 0, 1
    if kinds == [MergeModulelist, Concatenate] and ops[0].dim == 0 and ops[1].dim == 1:
        return converter.source_patterns.index(pattern), len(converter.source_patterns)
    return None


def _pattern_regex(pattern):
    """A converter's source pattern ("mlp.experts.*.gate_proj.weight") as a regex whose group is the
    expert's number."""
    return re.compile(re.escape(pattern).replace(r"\*", r"(\d+)") + "$")


class _Piece:
    """Rows [row0, row1) of expert e's slice of one 3-D parameter, at `offset` in a file."""
    __slots__ = ("param", "row0", "row1", "path", "offset", "nbytes", "dtype", "shape")

    def __init__(self, param, row0, row1, path, offset, nbytes, dtype, shape):
        self.param, self.row0, self.row1 = param, row0, row1
        self.path, self.offset, self.nbytes, self.dtype, self.shape = path, offset, nbytes, dtype, shape


def _locate_experts(experts, files, weight_map, meta_model, hf_kwargs):
    """{(module name, param name): [[_Piece, ...] for each expert]} from the checkpoint's headers, through
    transformers' own weight-name conversion for this model (renamings, then the converters that fuse
    per-expert tensors), or straight from 3-D tensors of the parameters' names (a fused checkpoint)."""
    from transformers.conversion_mapping import get_model_conversion_mapping
    from transformers.core_model_loading import WeightConverter, WeightRenaming, apply_renamings, \
        rename_source_key

    mapping = get_model_conversion_mapping(meta_model, hf_kwargs.get("key_mapping"))
    renamings = [t for t in mapping if isinstance(t, WeightRenaming)]
    converters = [t for t in mapping if isinstance(t, WeightConverter)]
    by_pattern = {p: c for c in converters for p in c.source_patterns}
    meta_sd = meta_model.state_dict()
    targets = {}
    for name, mod in experts:
        for pname in ("gate_up_proj", "down_proj"):
            targets["%s.%s" % (name, pname) if name else pname] = (name, pname, getattr(mod, pname))
    pieces = {(t[0], t[1]): [[] for _ in range(t[2].shape[0])] for t in targets.values()}
    for path, sf in files.items():
        for key in sf.keys():
            if weight_map is not None and weight_map.get(key, path) != path:
                continue
            renamed, pattern = rename_source_key(key, renamings, converters, meta_model.base_model_prefix,
                                                 meta_sd)
            if renamed not in targets:
                continue
            mname, pname, param = targets[renamed]
            dtype, shape, offset, nbytes = sf.info(key)
            E, rows, cols = param.shape
            if pattern is None:     # a fused checkpoint: the 3-D tensor itself, one slice per expert
                if tuple(shape) != (E, rows, cols):
                    raise _rf.InvalidArgument("%s: tensor %r has shape %r, the model's %s has %r" % (
                        path, key, list(shape), renamed, list(param.shape)))
                per = nbytes // E
                nparts = 2 if pname == "gate_up_proj" else 1     # gate, up: the halves of a slice
                prow, pbytes = rows // nparts, per // nparts
                for e in range(E):
                    for part in range(nparts):
                        pieces[mname, pname][e].append(_Piece(pname, part * prow, (part + 1) * prow, path,
                                                              offset + e * per + part * pbytes, pbytes, dtype,
                                                              (prow, cols)))
                continue
            parts = _converter_parts(by_pattern[pattern], pattern)
            m = _pattern_regex(pattern).search(apply_renamings(key, renamings))
            if parts is None or m is None:
                raise ValueError("ringfetch.transformers: %s: tensor %r becomes %s through a conversion that "
                                 "cannot be served from the file as it is (%s)" % (
                                     path, key, renamed, by_pattern[pattern]))
            e = int(m.group(1))
            part, nparts = parts
            prow = rows // nparts
            if e >= E or len(shape) != 2 or tuple(shape) != (prow, cols) or prow * nparts != rows:
                raise _rf.InvalidArgument("%s: tensor %r (shape %r) is not part %d of %d of expert %d of %s %r"
                                          % (path, key, list(shape), part, nparts, e, renamed, list(param.shape)))
            pieces[mname, pname][e].append(
                _Piece(pname, part * prow, (part + 1) * prow, path, offset, nbytes, dtype, (prow, cols)))
    for (mname, pname), per_expert in pieces.items():
        rows = targets["%s.%s" % (mname, pname) if mname else pname][2].shape[1]
        for e, ps in enumerate(per_expert):
            ps.sort(key=lambda p: p.row0)
            covered = 0
            for p in ps:
                if p.row0 != covered:
                    break
                covered = p.row1
            if covered != rows or len({p.dtype for p in ps}) > 1:
                raise ValueError("ringfetch.transformers: the checkpoint does not hold all of expert %d of "
                                 "%s.%s (rows %d of %d found, in %d tensor(s))" % (e, mname, pname, covered,
                                                                                   rows, len(ps)))
            if ps[0].dtype not in _TORCH_DTYPES:
                raise ValueError("ringfetch.transformers: expert %d of %s.%s is %s in the checkpoint; served "
                                 "experts are %s" % (e, mname, pname, ps[0].dtype, "/".join(_TORCH_DTYPES)))
    return pieces


# ---------------------------------------------------------------------------------------------------------
# Loading everything else with transformers.

class _PatchExperts:
    """While transformers' from_pretrained builds and loads the model: the served experts classes keep no
    parameters (a meta placeholder of each, a plain attribute, so nothing of the experts is allocated or
    read), and the model class ignores the checkpoint's expert tensors, which have nowhere to go."""

    def __init__(self, classes, model_cls, unexpected):
        self.classes, self.model_cls, self.unexpected = classes, model_cls, unexpected
        self.saved = []

    def __enter__(self):
        import torch

        for cls in self.classes:
            init = cls.__dict__["__init__"] if "__init__" in cls.__dict__ else None

            def patched(mod, *a, _orig=cls.__init__, **kw):
                _orig(mod, *a, **kw)
                for pname in ("gate_up_proj", "down_proj"):
                    p = mod._parameters.pop(pname, None)
                    if p is not None:
                        mod.__dict__[pname] = torch.empty(p.shape, dtype=p.dtype, device="meta")

            self.saved.append((cls, "__init__", init))
            cls.__init__ = functools.wraps(cls.__init__)(patched)
        had = "_keys_to_ignore_on_load_unexpected" in self.model_cls.__dict__
        old = self.model_cls.__dict__.get("_keys_to_ignore_on_load_unexpected")
        self.saved.append((self.model_cls, "_keys_to_ignore_on_load_unexpected", old if had else None))
        self.model_cls._keys_to_ignore_on_load_unexpected = set(
            getattr(self.model_cls, "_keys_to_ignore_on_load_unexpected", None) or []) | {self.unexpected}
        return self

    def __exit__(self, *exc):
        for cls, attr, old in reversed(self.saved):
            if old is None:
                delattr(cls, attr)
            else:
                setattr(cls, attr, old)
        self.saved.clear()
        return False


def _own_the_weights(model):
    """transformers leaves loaded weights as views of its mapping of the checkpoint: a file that shrinks
    later would be a SIGBUS on the next access. Each parameter gets memory of its own (one at a time, ties
    kept: a tied parameter is one object)."""
    import torch

    with torch.no_grad():
        for p in model.parameters():       # each distinct parameter once
            if p.device.type == "cpu":
                p.data = p.data.clone(memory_format=torch.contiguous_format)


# ---------------------------------------------------------------------------------------------------------
# Serving.

class _OneCaller:
    """One thread at a time in a model's forward (re-entrant for that thread); another is rf.Busy."""

    def __init__(self):
        self._lock = threading.Lock()
        self._owner = None
        self._depth = 0

    def enter(self):
        me = threading.get_ident()
        if self._owner == me:
            self._depth += 1
            return
        if not self._lock.acquire(blocking=False):
            raise _rf.Busy("ringfetch.transformers: another thread is running this model; one forward "
                           "(one decode) at a time per model")
        self._owner, self._depth = me, 1

    def exit(self):
        self._depth -= 1
        if self._depth == 0:
            self._owner = None
            self._lock.release()


class _Layer:
    """One served experts module: its experts' keys, file sources and how to view their slots."""

    def __init__(self, name, pieces, top_k, sizes):
        import torch

        self._torch = torch
        self.name, self.top_k = name, top_k
        self.E = len(pieces["gate_up_proj"])
        self.server = self.act_fn = self.gate = self.block = self.param_dtype = None
        self.gate_args = ()
        self.keys, self.srcs, self.views = [], [], []
        self.ranges = [_plan_ranges(pieces["gate_up_proj"][e] + pieces["down_proj"][e], sizes)
                       for e in range(self.E)]
        self.expert_bytes = max(sum(p.nbytes for p in pieces["gate_up_proj"][e] + pieces["down_proj"][e])
                                for e in range(self.E))
        self._pieces = pieces
        self.next = None            # the next served layer (hints)
        self.predicted = None       # experts hinted for this layer from the previous one
        self.index = 0              # its place among the served layers
        self.counts = [0] * self.E  # times each expert was routed
        self.retain = set()         # experts kept in their slots after use (when the slots are short)

    def bind(self, files, first_key):
        """Keys from first_key on; file sources of each range; where each piece lies in its slot."""
        torch = self._torch
        key = first_key
        for e in range(self.E):
            ks, ss, vs = [], [], {"gate_up_proj": [], "down_proj": []}
            rng = self.ranges[e]
            for path, a, b in rng:
                ks.append(key)
                key += 1
                ss.append(files[path].file_source(a, b - a))
            for pname in ("gate_up_proj", "down_proj"):
                for r, off, p in _merge_views(self._pieces[pname][e], rng):
                    vs[pname].append((r, off, p.dtype, p.shape, getattr(torch, _TORCH_DTYPES[p.dtype])))
            if len(vs["down_proj"]) != 1:
                raise ValueError("ringfetch.transformers: %s: expert %d's down_proj is not one tensor in the "
                                 "checkpoint" % (self.name, e))
            self.keys.append(tuple(ks))
            self.srcs.append(tuple(ss))
            self.views.append((tuple(vs["gate_up_proj"]), vs["down_proj"][0]))
        self._pieces = None
        return key

    def attach(self, server, module, gate, block=None):
        """The loaded module: its activation, the dtype transformers gave its parameters (the slots' bytes
        are cast to it where the checkpoint's differs), and its router (for the hints). A router whose
        forward takes more than the hidden states gets them as its block passes them, the block's
        attributes of those names (MiniMax-M2's e_score_correction_bias); one whose arguments cannot be
        found so gives no hints."""
        self.server, self.act_fn, self.gate, self.gate_args = server, module.act_fn, None, ()
        self.block = block
        if gate is not None:
            args = _router_args(gate, block)
            if args is not None:
                self.gate, self.gate_args = gate, args
        self._token0 = self._torch.zeros(1, dtype=self._torch.long)
        self.param_dtype = (module.gate_up_proj.dtype, module.down_proj.dtype)

    def predict(self, hidden_states, n):
        """The n experts this layer's router ranks first for hidden_states (the previous layer's input),
        most likely first: for one token the router's own order, for several the most picked."""
        torch = self._torch
        # its forward, not the module's call: hooks on the router (transformers records router_logits
        # with them, for output_router_logits and the aux loss) must not see a call the model did not make
        out = self.gate.forward(hidden_states, *(getattr(self.block, a) for a in self.gate_args))
        idx = out[-1] if isinstance(out, tuple) else None
        if idx is None or not isinstance(idx, torch.Tensor) or idx.dtype.is_floating_point:
            return []
        # a router may rank indices past this module's experts (zero experts, which its block handles)
        if idx.dim() == 2 and idx.shape[0] == 1:
            return [e for e in idx[0].tolist() if 0 <= e < self.E][:n]
        idx = idx.reshape(-1)
        counts = torch.bincount(idx[(idx >= 0) & (idx < self.E)], minlength=self.E)
        return torch.topk(counts, min(n, self.E)).indices.tolist()

    def forward(self, hidden_states, top_k_index, top_k_weights):
        srv = self.server
        srv._caller.enter()
        try:
            with self._torch.no_grad():
                return self._forward(srv, hidden_states, top_k_index, top_k_weights)
        finally:
            srv._caller.exit()

    def _forward(self, srv, hidden_states, top_k_index, top_k_weights):
        torch = self._torch
        F = torch.nn.functional
        p = srv._pipeline
        if p is None:
            raise _rf.InvalidArgument("ringfetch.transformers: this model's experts server is closed")
        if hidden_states.device.type != "cpu":
            raise _rf.NotSupported("ringfetch.transformers: the experts are served to CPU compute; %s got "
                                   "hidden states on %s" % (self.name, hidden_states.device))
        E = self.E
        final = torch.zeros_like(hidden_states)
        # As transformers' eager loop: which experts are routed, and to which tokens (for one token, a
        # decode step, the same read off its row: the same rows, weights and sums, without the mask --
        # unless an expert is in the row twice, as where a block maps its zero experts onto real ones
        # with weight 0: the loop computes it once per place, each with its own weight).
        row = top_k_index[0].tolist() if top_k_index.shape[0] == 1 else None
        if row is not None and len(set(row)) == len(row):
            routed = sorted({e for e in row if 0 <= e < E})
            expert_mask = None
        else:
            expert_mask = F.one_hot(top_k_index, num_classes=E + 1).permute(2, 1, 0)
            routed = [e for e in torch.greater(expert_mask.sum(dim=(-1, -2)), 0).nonzero().view(-1).tolist()
                      if e < E]
        if self.predicted:
            right = len(self.predicted.intersection(routed))
            srv._hinted += len(self.predicted)
            srv._hint_correct += right
            srv._hint_precision += 0.05 * (right / len(self.predicted) - srv._hint_precision)
            if srv._retain_slots is not None:
                # a wrong hint's slot is free again once read (not waiting on a read still in flight)
                for e in self.predicted.difference(routed, self.retain):
                    if all(p.lookup(k)[0] == "ready" for k in self.keys[e]):
                        for k in self.keys[e]:
                            p.evict(k)
            self.predicted = None
        # Hits first (ready, then on their way), then the misses, their reads issued together.
        lookup = p.lookup
        ready, coming, absent = [], [], []
        for e in routed:
            states = [lookup(k)[0] for k in self.keys[e]]
            if "absent" in states:
                absent.append(e)
            elif "copying" in states:
                coming.append(e)
            else:
                ready.append(e)
        srv._hits += len(ready) + len(coming)
        srv._late += len(coming)
        srv._misses += len(absent)
        counts = self.counts
        for e in routed:
            counts[e] += 1
        if self.index == 0 and srv._retain_slots is not None:
            srv._plan_retention()
        hints = self.next is not None and srv.prefetch
        # misses' reads in flight at once: what the slots hold beside the hints and the expert in use
        window = max(1, srv.slots // srv.blocks_per_expert - (self.top_k if hints else 0) - 1)
        for e in absent[:window]:
            self._prefetch(p, e)
        guess = []
        if hints:
            nxt = self.next
            srv._forwards += 1
            n = hint_count(srv._hint_precision, srv._hinted, self.top_k, srv._forwards)
            guess = nxt.predict(hidden_states, n) if n else []
            nxt.predicted = set(guess)

        def issue_hints():
            # Once this layer's reads are in: the hints take the disk only while it would be idle (the
            # rest of this layer's compute, the next layer's attention), never from this layer's misses.
            for e in guess:
                if any(lookup(k)[0] == "absent" for k in nxt.keys[e]):
                    srv._prefetches += 1
                nxt._prefetch(p, e)

        order = ready + coming + absent
        last_read = order[-1] if (coming or absent) else None
        if guess and last_read is None:
            issue_hints()
        outs = {}
        for i, e in enumerate(order):
            then = issue_hints if guess and e == last_read else None
            if expert_mask is None:
                k = row.index(e)
                token_idx = self._token0
                outs[e] = (token_idx, self._expert(p, e, hidden_states[:1], top_k_weights[:1, k:k + 1], then))
            else:
                top_k_pos, token_idx = torch.where(expert_mask[e])
                outs[e] = (token_idx, self._expert(p, e, hidden_states[token_idx],
                                                   top_k_weights[token_idx, top_k_pos, None], then))
            if srv._retain_slots is not None and e not in self.retain:
                for k in self.keys[e]:      # streamed, not kept: its slot is free for the next read
                    p.evict(k)
            j = i - len(ready) - len(coming) + window
            if 0 <= j < len(absent):
                self._prefetch(p, absent[j])
        for e in routed:     # ascending, as the eager loop adds them
            token_idx, h = outs[e]
            final.index_add_(0, token_idx, h.to(final.dtype))
        return final

    def _prefetch(self, p, e):
        for k, s in zip(self.keys[e], self.srcs[e]):
            try:
                p.prefetch(k, s)
            except _rf.NoSpace:       # every slot held: a hint is only a hint
                return

    def _expert(self, p, e, state, weights, then=None):
        """act(x W_gate^T) * (x W_up^T), then W_down, times the routing weights: on views of the slots
        (then(), if given, once the expert's bytes are in, before the compute). The views live only in `w`, emptied before the blocks are released (a view alive at release is
        BufferError: a slot is never refilled under a tensor that reads it)."""
        torch = self._torch
        F = torch.nn.functional
        blocks, w = [], []
        try:
            for k, s in zip(self.keys[e], self.srcs[e]):
                blocks.append(p.acquire(k, s))
            if then is not None:
                then()
            gate_up, down = self.views[e]
            want = self.param_dtype
            for spec in gate_up:
                w.append(_typed_view(torch, blocks, spec, want[0]))
            if len(w) == 1:
                proj = F.linear(state, w[0])
            else:
                proj = torch.cat([F.linear(state, w[i]) for i in range(len(w))], dim=-1)
            w.clear()
            gate, up = proj.chunk(2, dim=-1)
            h = self.act_fn(gate) * up
            w.append(_typed_view(torch, blocks, down, want[1]))
            h = F.linear(h, w[0])
            return h * weights
        finally:
            w.clear()
            for b in blocks:
                p.release(b)


def _router_args(gate, block):
    """The names of the arguments after the hidden states with which `gate` (a router) is called, its
    block's attributes of those names; None where a required one is not there."""
    import inspect

    try:
        params = list(inspect.signature(gate.forward).parameters.values())
    except (TypeError, ValueError):
        return None
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if not positional:
        return () if any(p.kind == p.VAR_POSITIONAL for p in params) else None
    args = []
    for p in positional[1:]:
        if p.default is not p.empty:
            break
        if block is None or not hasattr(block, p.name):
            return None
        args.append(p.name)
    if any(p.kind == p.KEYWORD_ONLY and p.default is p.empty for p in params):
        return None
    return tuple(args)


def _typed_view(torch, blocks, spec, want):
    """A tensor over bytes [offset, offset + nbytes) of blocks[r] (Block.view: zero-copy, DLPack), cast
    to `want` (a copy) where transformers would have cast the parameter on loading."""
    r, off, dtype, shape, tdtype = spec
    t = torch.from_dlpack(blocks[r].view(dtype, shape, offset=off))
    return t if tdtype == want else t.to(want)


def hint_count(precision, hinted, top_k, forwards):
    """How many of the next layer's experts to hint, from the hints' measured precision (an average over
    the last few dozen layers): each wrong hint is a read of a whole expert for nothing, taking the
    disk from the reads a step waits for, while a right one only moves a read earlier. All top_k while
    they are mostly right (or not yet measured: the first 32 hints), the likeliest one while at least
    3 in 5 are, and otherwise none -- but one every 16th layer, to go on measuring."""
    if hinted < 32 or precision >= 0.8:
        return top_k
    if precision >= 0.6:
        return 1
    return 1 if forwards % 16 == 0 else 0


_ALIGN = 4096


def _plan_ranges(pieces, sizes):
    """An expert's pieces as the byte ranges to read, one key each: adjacent pieces of one file (gaps
    under 4 KiB read along) make one range, so an expert whose tensors sit together is one read. Where
    that leaves ranges of unequal sizes (a fused checkpoint: gate_up_proj[e] in one tensor, down_proj[e]
    in another), which would waste a quarter of the slots or more, each piece is a range of its own.

    Each range is then widened to 4 KiB boundaries (not past the end of its file): safetensors puts
    tensors on 8-byte boundaries only, and the reader would read an unaligned range either through the
    page cache (a second copy of the expert, charged to the same memory budget) or with O_DIRECT into
    the slot and then move it down by the misalignment (a pass over the whole expert). An aligned
    window is read straight into the slot, and the pieces are viewed at their offsets in it. (Pieces
    off 8-byte boundaries, which no safetensors writer makes, keep their exact ranges: a typed view
    needs an offset that is a multiple of its itemsize.)"""
    spans = sorted((p.path, p.offset, p.offset + p.nbytes) for p in pieces)
    out = []
    for path, a, b in spans:
        if out and out[-1][0] == path and 0 <= a - out[-1][2] < _ALIGN:
            out[-1] = (path, out[-1][1], max(out[-1][2], b))
        else:
            out.append((path, a, b))
    sizes_ = [b - a for _, a, b in out]
    if max(sizes_) * len(sizes_) * 4 > sum(sizes_) * 5:
        out = spans
    if all(p.offset % 8 == 0 for p in pieces):
        out = [(path, a - a % _ALIGN, min(-(-b // _ALIGN) * _ALIGN, sizes[path])) for path, a, b in out]
    return out


def _merge_views(pieces, ranges):
    """[(range index, offset in its slot, piece)] for the pieces of one parameter's expert slice, rows in
    order; consecutive rows that are also consecutive bytes of one range are one view (gate and up,
    adjacent, are one [2I, H] view, as the parameter is)."""
    out = []
    for p in sorted(pieces, key=lambda p: p.row0):
        end = p.offset + p.nbytes
        r = next(i for i, (path, a, b) in enumerate(ranges) if path == p.path and a <= p.offset and end <= b)
        if out:
            r0, off0, q = out[-1]
            if q.path == p.path and q.offset + q.nbytes == p.offset and q.row1 == p.row0 and \
                    end <= ranges[r0][2]:
                out[-1] = (r0, off0, _Piece(q.param, q.row0, p.row1, q.path, q.offset, q.nbytes + p.nbytes,
                                            q.dtype, (q.shape[0] + p.shape[0], q.shape[1])))
                continue
        out.append((r, p.offset - ranges[r][1], p))
    return out


class ExpertServer:
    """model.ringfetch: what serves the experts of a model loaded by from_pretrained."""

    def __init__(self, model_type, files, layers, budget, backend, prefetch):
        self.model_type = model_type
        self.prefetch = bool(prefetch)
        self.budget = budget
        self._files = files
        self._nfiles = len(files)
        self._layers = layers
        self._caller = _OneCaller()
        self._hits = self._misses = self._late = self._prefetches = 0
        self._hinted = self._hint_correct = 0
        self._hint_precision = 1.0
        self._forwards = 0
        self._pipeline = None
        self._last_keyed = {"acquires": 0, "hits": 0, "late": 0, "prefetches": 0, "dropped": 0, "wasted": 0,
                            "bytes_copied": 0}
        nkeys = sum(len(r) for layer in layers for r in layer.ranges)
        per_expert = max(len(r) for layer in layers for r in layer.ranges)
        largest = max(b - a for layer in layers for rng in layer.ranges for _, a, b in rng)
        aligned = all(a % _ALIGN == 0 for layer in layers for rng in layer.ranges for _, a, _ in rng)
        self._aligned = aligned
        top_k = max(layer.top_k for layer in layers)
        # An unaligned range needs room for its O_DIRECT window: two file-system blocks (docs/files.md).
        room = 0 if aligned else 2 * max(_ALIGN, min(os.statvfs(path).f_bsize for path in files))
        self.slot_bytes = -(-(largest + room) // _ALIGN) * _ALIGN
        need = min(2 * top_k * per_expert, nkeys)
        minimum = need * self.slot_bytes
        if budget < minimum:
            raise _rf.InvalidArgument(
                "ringfetch.transformers: memory_budget %d bytes (%s) is under the minimum, %d bytes (%s): "
                "2 x top_k = %d experts of the largest layer, in %d slots of %d bytes (%d per expert; a slot "
                "holds the largest read, widened to O_DIRECT's alignment)" % (
                    budget, _fmt_bytes(budget), minimum, _fmt_bytes(minimum), 2 * top_k, need,
                    self.slot_bytes, per_expert))
        self.slots = min(budget // self.slot_bytes, _MAX_SLOTS, nkeys)
        self.blocks_per_expert = per_expert
        self.expert_bytes = max(layer.expert_bytes for layer in layers)
        self.top_k = top_k
        # Slots short of one forward's experts (each layer's top_k, and the hints): least recently used
        # is then the worst choice -- the layers come round in order, so it evicts what the next forward
        # needs first and nothing is ever hit. Instead the most routed experts keep their slots (as many
        # as the slots hold beside the reads in flight) and the others are evicted once used.
        slots_e = self.slots // per_expert
        per_forward = sum(layer.top_k for layer in layers) + 2 * top_k
        self._retain_slots = max(0, slots_e - 2 * top_k) if slots_e < per_forward else None
        self._retain_age = 0
        for i, layer in enumerate(layers):
            layer.index = i
        try:
            key = 0
            for layer in layers:
                key = layer.bind(files, key)
            self._pipeline = _rf.Pipeline(self.slot_bytes, depth=self.slots, backend=backend)
        except BaseException:
            for layer in layers:
                layer.srcs = []
            raise

    def _plan_retention(self):
        """Which experts keep their slots: the most routed so far (ties: the earlier layer), chosen again
        at every forward for the first 16, then every 16th (a heap over every expert costs)."""
        self._retain_age += 1
        if self._retain_age > 16 and self._retain_age % 16:
            return
        ranked = heapq.nlargest(self._retain_slots, ((c, -i, e) for i, layer in enumerate(self._layers)
                                                     for e, c in enumerate(layer.counts) if c))
        for layer in self._layers:
            layer.retain = set()
        for _, neg_i, e in ranked:
            self._layers[-neg_i].retain.add(e)

    @property
    def closed(self):
        return self._pipeline is None

    @property
    def pipeline(self):
        """The keyed rf.Pipeline whose slots hold the experts (None once closed)."""
        return self._pipeline

    def stats(self):
        """Counts since from_pretrained, in experts (a routed expert of a layer at one forward is one):
        hits (its bytes were in the slots or on their way when it was routed; late: of those, on their
        way), misses (read when routed), prefetches (next-layer hints that issued a read), hinted /
        hint_correct / hint_accuracy (experts hinted, of those routed at that layer: precision), and from
        the pipeline: bytes_read (bytes of the reads issued, misses and hints), wasted (hint reads whose
        expert left its slot unused; counted in blocks: blocks_per_expert per expert), acquires, and
        keyed (rf.Pipeline.keyed_stats())."""
        p = self._pipeline
        keyed = p.keyed_stats() if p is not None else self._last_keyed
        return {
            "hits": self._hits, "misses": self._misses, "late": self._late,
            "bytes_read": keyed["bytes_copied"], "prefetches": self._prefetches, "wasted": keyed["wasted"],
            "hinted": self._hinted, "hint_correct": self._hint_correct,
            "hint_accuracy": self._hint_correct / self._hinted if self._hinted else None,
            "acquires": keyed["acquires"], "expert_bytes": self.expert_bytes,
            "blocks_per_expert": self.blocks_per_expert, "slots": self.slots, "slot_bytes": self.slot_bytes,
            "keyed": dict(keyed),
        }

    def describe(self):
        nexp = sum(layer.E for layer in self._layers)
        if not self.prefetch:
            hints = "off"
        else:
            hints = "the next layer's router on the current hidden state (%d of top-%d now; %s)" % (
                hint_count(self._hint_precision, self._hinted, self.top_k, 1), self.top_k,
                "precision %.2f" % (self._hint_correct / self._hinted) if self._hinted else "not measured yet")
        keep = ("every expert's slot reused least recently used first" if self._retain_slots is None else
                "slots short of a forward's experts: the %d most routed keep theirs, the rest are evicted once "
                "used" % self._retain_slots)
        head = ("ringfetch.transformers: %s, %d experts modules (%d experts), top-%d; experts of %s read from "
                "%d file(s), %d read(s) per expert, %s; %d slots of %s (%s of a %s budget); %s; hints: %s" % (
                    self.model_type, len(self._layers), nexp, self.top_k, _fmt_bytes(self.expert_bytes),
                    self._nfiles, self.blocks_per_expert,
                    "in 4 KiB-aligned windows" if self._aligned else "at their offsets (some off 8 bytes)",
                    self.slots, _fmt_bytes(self.slot_bytes),
                    _fmt_bytes(self.slots * self.slot_bytes), _fmt_bytes(self.budget), keep, hints))
        if self._pipeline is None:
            return head + "; closed"
        return head + "; pipeline: " + self._pipeline.describe()

    def close(self):
        """Free the slots and close the checkpoint's files; the model's experts cannot run after it.
        rf.Busy (nothing changes) while another thread runs the model."""
        self._caller.enter()
        try:
            p = self._pipeline
            if p is not None:
                self._last_keyed = p.keyed_stats()
                p.close()
                self._pipeline = None
        finally:
            self._caller.exit()
        for layer in self._layers:
            layer.srcs = []
        files, self._files = self._files, {}
        for f in files.values():
            try:
                f.close()
            except BufferError:     # a source still referenced (a traceback's frame): closed with it
                pass

    def __repr__(self):
        return "<ringfetch.transformers.ExpertServer %s, %d slots%s>" % (
            self.model_type, self.slots, ", closed" if self.closed else "")


def _wrap_forward(model, caller):
    orig = model.forward

    @functools.wraps(orig)
    def forward(*args, **kwargs):
        caller.enter()
        try:
            return orig(*args, **kwargs)
        finally:
            caller.exit()

    model.forward = forward


def from_pretrained(model_dir, memory_budget, *, backend=None, prefetch=True, **hf_kwargs):
    """A transformers MoE model from a save_pretrained directory, its experts served from the checkpoint's
    safetensors files through one keyed rf.Pipeline whose slots take at most memory_budget bytes (an int,
    or "256MiB", "2GiB"). backend: the pipeline's ("cpu", "threads"; None: the configured default).
    prefetch: hint the next layer's experts (its router applied to the current hidden state). hf_kwargs go
    to transformers' AutoModelForCausalLM.from_pretrained (dtype=, attn_implementation=, ...).

    Returns the model (model.ringfetch: its ExpertServer). Errors: FileNotFoundError (no such directory,
    no safetensors checkpoint, a shard its index names is missing); ValueError naming the model_type when
    it has no experts module to serve; rf.InvalidArgument for a budget under 2 x top_k experts of the
    largest layer (naming the minimum) or a checkpoint whose header does not hold together; rf.IOError,
    from a forward, when the file no longer holds an expert's bytes."""
    budget = parse_budget(memory_budget)
    if not isinstance(prefetch, bool):
        raise TypeError("prefetch must be True or False")
    device_map = hf_kwargs.get("device_map")
    if device_map not in (None, "cpu"):
        raise _rf.NotSupported("ringfetch.transformers: the experts are served to CPU compute; device_map "
                               "%r is not supported (None or \"cpu\")" % (device_map,))
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    model_dir = os.fspath(model_dir)
    paths, weight_map = _checkpoint_files(model_dir)
    config = hf_kwargs.get("config")
    if config is None:
        config = AutoConfig.from_pretrained(model_dir, trust_remote_code=hf_kwargs.get("trust_remote_code",
                                                                                         False))
    files = {}
    server = None
    try:
        for path in paths:
            files[path] = _rst.open(path)
        with torch.device("meta"):
            try:
                meta_model = AutoModelForCausalLM.from_config(config)
            except ValueError as e:
                raise ValueError("ringfetch.transformers: model_type %r: transformers builds no causal LM "
                                 "for it (%s); looked for MoE experts modules in one"
                                 % (getattr(config, "model_type", None), e)) from None
        experts = _find_experts(meta_model)
        pieces = _locate_experts(experts, files, weight_map, meta_model, hf_kwargs)
        names = ["%s.%s" % (n, p) if n else p for n, _ in experts for p in ("gate_up_proj", "down_proj")]
        unexpected = "^(?:%s)$" % "|".join(re.escape(n) for n in names)
        classes = sorted({type(m) for _, m in experts}, key=lambda c: c.__qualname__)
        top_k = getattr(config, "num_experts_per_tok", None) or 2
        sizes = {path: f.size for path, f in files.items()}
        layers = [_Layer(name, {p: pieces[name, p] for p in ("gate_up_proj", "down_proj")}, top_k, sizes)
                  for name, _ in experts]
        # The budget is checked, and the slots made, before transformers loads anything.
        server = ExpertServer(config.model_type, files, layers, budget, backend, prefetch)
        files = {}
        with _LOAD_LOCK, _PatchExperts(classes, type(meta_model), unexpected):
            model = AutoModelForCausalLM.from_pretrained(model_dir, **hf_kwargs)
        del meta_model
        _own_the_weights(model)
        for layer in layers:
            mod = model.get_submodule(layer.name)
            parent = model.get_submodule(layer.name.rsplit(".", 1)[0]) if "." in layer.name else None
            gate = getattr(parent, "gate", None) if parent is not None else None
            layer.attach(server, mod, gate if callable(gate) else None, parent)
        for a, b in zip(layers, layers[1:]):
            if b.gate is not None:
                a.next = b
    except BaseException:
        if server is not None:
            server.close()
        for f in files.values():
            f.close()
        raise
    for layer in layers:
        model.get_submodule(layer.name).forward = layer.forward
    _wrap_forward(model, server._caller)
    model.ringfetch = server
    weakref.finalize(model, server.close)
    return model
