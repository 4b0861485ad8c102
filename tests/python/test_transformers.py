"""ringfetch.transformers: tiny random-weight MoE checkpoints made here (no hub), served with their experts
in the files; logits equal to the checkpoint loaded whole with experts_implementation="eager" (prefill,
every decode step, greedy generate), both layouts, fp32 and bf16, hints on and off; stats; bad input."""
import gc
import inspect
import json
import os
import re
import shutil
import subprocess
import sys
import threading

import pytest

import ringfetch as rf

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
from ringfetch.transformers import from_pretrained, parse_budget  # noqa: E402



@pytest.fixture(autouse=True, scope="module")
def one_torch_thread():
    """One torch thread: small matrices on a busy machine, and the same kernels on both sides."""
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


CONFIGS = {
    "mixtral": lambda: transformers.MixtralConfig(
        vocab_size=96, hidden_size=64, intermediate_size=80, num_hidden_layers=3, num_attention_heads=4,
        num_key_value_heads=2, num_local_experts=8, num_experts_per_tok=2, max_position_embeddings=64,
        initializer_range=0.1),
    "qwen3_moe": lambda: transformers.Qwen3MoeConfig(
        vocab_size=96, hidden_size=64, intermediate_size=80, moe_intermediate_size=48, num_hidden_layers=3,
        num_attention_heads=4, num_key_value_heads=2, num_experts=6, num_experts_per_tok=2,
        decoder_sparse_step=1, mlp_only_layers=[], max_position_embeddings=64, initializer_range=0.1),
    "qwen2_moe": lambda: transformers.Qwen2MoeConfig(
        vocab_size=96, hidden_size=64, intermediate_size=80, moe_intermediate_size=48,
        shared_expert_intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        num_experts=4, num_experts_per_tok=2, decoder_sparse_step=1, mlp_only_layers=[],
        max_position_embeddings=64, initializer_range=0.1, eos_token_id=1, bos_token_id=0),
    "olmoe": lambda: transformers.OlmoeConfig(
        vocab_size=96, hidden_size=64, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, num_experts=4, num_experts_per_tok=2, max_position_embeddings=64,
        initializer_range=0.1, eos_token_id=1, bos_token_id=0, pad_token_id=2),
    # shared experts beside the routed ones, a grouped sigmoid router with a correction bias
    "deepseek_v3": lambda: transformers.DeepseekV3Config(
        vocab_size=96, hidden_size=64, intermediate_size=80, moe_intermediate_size=48, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=4, n_shared_experts=1, n_routed_experts=4,
        num_experts_per_tok=2, n_group=1, topk_group=1, first_k_dense_replace=0, kv_lora_rank=16,
        q_lora_rank=16, qk_rope_head_dim=8, qk_nope_head_dim=8, v_head_dim=16, head_dim=8,
        max_position_embeddings=64, initializer_range=0.1),
    # a router that takes its block's e_score_correction_bias as a second argument
    "minimax_m2": lambda: transformers.MiniMaxM2Config(
        vocab_size=96, hidden_size=64, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, num_local_experts=4, num_experts_per_tok=2,
        max_position_embeddings=64, initializer_range=0.1, bos_token_id=0, eos_token_id=1),
    # zero (identity) experts, mapped onto real experts with weight 0: a row may name an expert twice
    "longcat_flash": lambda: transformers.LongcatFlashConfig(
        vocab_size=96, hidden_size=64, num_layers=2, num_attention_heads=4, num_key_value_heads=4,
        ffn_hidden_size=80, expert_ffn_hidden_size=48, moe_topk=4, n_routed_experts=4, zero_expert_num=4,
        kv_lora_rank=16, q_lora_rank=16, qk_rope_head_dim=8, qk_nope_head_dim=8, v_head_dim=16, head_dim=8,
        max_position_embeddings=64, initializer_range=0.1, bos_token_id=0, eos_token_id=1),
    "glm4_moe": lambda: transformers.Glm4MoeConfig(
        vocab_size=96, hidden_size=64, intermediate_size=80, moe_intermediate_size=48, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16, n_shared_experts=1, n_routed_experts=4,
        num_experts_per_tok=2, n_group=1, topk_group=1, first_k_dense_replace=0,
        max_position_embeddings=64, initializer_range=0.1, bos_token_id=0, eos_token_id=1, pad_token_id=2),
    "phimoe": lambda: transformers.PhimoeConfig(
        vocab_size=96, hidden_size=64, intermediate_size=80, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, num_local_experts=4, num_experts_per_tok=2, max_position_embeddings=64,
        initializer_range=0.1, bos_token_id=0, eos_token_id=1),
}

_made = {}


def checkpoint(tmp_path_factory, family, layout="experts", dtype="float32", shard=None):
    """A save_pretrained directory of a random model of `family` (cached per test session): layout
    "experts" as transformers writes it (one tensor per expert and projection), "fused" written here (the
    3-D parameters as they are in memory); shard: save_pretrained's max_shard_size."""
    key = (family, layout, dtype, shard)
    if key in _made:
        return _made[key]
    torch.manual_seed(sum(map(ord, family)))
    model = transformers.AutoModelForCausalLM.from_config(CONFIGS[family]()).to(getattr(torch, dtype))
    d = tmp_path_factory.mktemp("%s-%s-%s-%s" % key)
    if layout == "experts":
        model.save_pretrained(d, max_shard_size=shard) if shard else model.save_pretrained(d)
    else:
        from safetensors.torch import save_file

        model.config.save_pretrained(d)
        sd = {k: v.detach().contiguous().clone() for k, v in model.state_dict().items()}
        assert any(v.dim() == 3 for v in sd.values())
        save_file(sd, os.path.join(d, "model.safetensors"), metadata={"format": "pt"})
    _made[key] = str(d)
    return str(d)


def eager(path, **kw):
    return transformers.AutoModelForCausalLM.from_pretrained(path, experts_implementation="eager", **kw).eval()


def decode(model, prompt, steps):
    """Prefill logits, then one greedy decode step at a time through the KV cache: [logits], tokens."""
    # transformers 5.25 renames the forward's past_key_values to cache
    name = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
    out = []
    with torch.no_grad():
        r = model(prompt, use_cache=True)
        out.append(r.logits[0])
        toks = []
        for _ in range(steps + 1):
            past = r.cache if getattr(r, "cache", None) is not None else r.past_key_values
            tok = r.logits[:, -1:].argmax(-1)
            toks.append(int(tok))
            if len(toks) > steps:
                break
            r = model(tok, use_cache=True, **{name: past})
            out.append(r.logits[0])
    return out, toks


def assert_same_logits(got, want):
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype
        assert torch.equal(g.argmax(-1), w.argmax(-1))
        rel = ((g.float() - w.float()).abs().max() / w.float().abs().max()).item()
        assert rel <= 1e-5, rel


PROMPT = torch.tensor([[3, 17, 42, 8, 60, 5, 23]])


@pytest.mark.parametrize("family", ["mixtral", "qwen3_moe"])
@pytest.mark.parametrize("layout", ["experts", "fused"])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("prefetch", [True, False])
def test_logits_equal_eager(tmp_path_factory, family, layout, dtype, prefetch):
    path = checkpoint(tmp_path_factory, family, layout, dtype)
    want, want_toks = decode(eager(path), PROMPT, 6)
    # a budget of 2 x top_k experts: slots are reused within and across steps
    budget = re.search(r"minimum, (\d+) bytes", _budget_error(path)).group(1)
    for mb in (int(budget), "64MiB"):
        model = from_pretrained(path, mb, prefetch=prefetch)
        assert model.dtype == getattr(torch, dtype)
        got, toks = decode(model, PROMPT, 6)
        assert toks == want_toks
        assert_same_logits(got, want)
        st = model.ringfetch.stats()
        assert st["misses"] > 0 and st["hits"] + st["misses"] == st["acquires"] // st["blocks_per_expert"]
        assert (st["prefetches"] > 0) == prefetch and (st["hinted"] > 0) == prefetch
        assert st["blocks_per_expert"] == (1 if layout == "experts" else 3)   # fused: gate, up, down apart
        model.ringfetch.close()


def experts_modules(model):
    """How many modules of a model loaded whole hold experts as 3-D parameters (leading: the experts)."""
    return sum(1 for m in model.modules() if any(
        p.dim() == 3 and p.shape[0] == getattr(m, "num_experts", None) for p in m.parameters(recurse=False)))


@pytest.mark.parametrize("family", ["deepseek_v3", "minimax_m2", "longcat_flash", "glm4_moe", "phimoe"])
@pytest.mark.parametrize("layout", ["experts", "fused"])
def test_more_families(tmp_path_factory, family, layout):
    """Other transformers families whose experts are fused 3-D parameters: every such module served,
    every decode step (one token: the one-row path) as eager's."""
    path = checkpoint(tmp_path_factory, family, layout)
    ref = eager(path)
    want, want_toks = decode(ref, PROMPT, 5)
    model = from_pretrained(path, "16MiB")
    assert len(model.ringfetch._layers) == experts_modules(ref) > 0
    got, toks = decode(model, PROMPT, 5)
    assert toks == want_toks
    assert_same_logits(got, want)
    assert model.ringfetch.stats()["misses"] > 0
    model.ringfetch.close()


@pytest.mark.parametrize("family", ["mixtral", "qwen3_moe", "qwen2_moe", "olmoe", "deepseek_v3", "minimax_m2",
                                    "longcat_flash", "glm4_moe", "phimoe"])
def test_generate_token_for_token(tmp_path_factory, family):
    path = checkpoint(tmp_path_factory, family)
    ref = eager(path)
    model = from_pretrained(path, "16MiB", backend="threads")
    prompt = torch.tensor([[5, 9, 11, 40], [7, 7, 30, 2]])
    with torch.no_grad():
        want = ref.generate(prompt, max_new_tokens=8, do_sample=False, pad_token_id=0)
        got = model.generate(prompt, max_new_tokens=8, do_sample=False, pad_token_id=0)
        assert_same_logits([model(prompt).logits], [ref(prompt).logits])
    assert torch.equal(got, want)
    assert model.ringfetch.describe().startswith(
        "ringfetch.transformers: %s, %d experts modules" % (family, experts_modules(ref)))


@pytest.mark.parametrize("family", ["mixtral", "qwen3_moe"])
def test_router_logits_and_aux_loss(tmp_path_factory, family):
    """The hints' router calls are not the model's: output_router_logits and the aux loss are eager's."""
    path = checkpoint(tmp_path_factory, family)
    with torch.no_grad():
        want = eager(path)(PROMPT, output_router_logits=True)
        got = from_pretrained(path, "64MiB", prefetch=True)(PROMPT, output_router_logits=True)
    assert len(got.router_logits) == len(want.router_logits)
    assert_same_logits(got.router_logits, want.router_logits)
    assert torch.allclose(got.aux_loss, want.aux_loss, rtol=1e-5, atol=0)


def test_sharded_checkpoint(tmp_path_factory, backend):
    path = checkpoint(tmp_path_factory, "mixtral", shard="60KB")
    files = [f for f in os.listdir(path) if f.endswith(".safetensors")]
    assert len(files) > 3 and os.path.exists(os.path.join(path, "model.safetensors.index.json"))
    want, want_toks = decode(eager(path), PROMPT, 4)
    model = from_pretrained(path, "8MiB", backend=backend)
    assert model.ringfetch.pipeline.backend == backend
    got, toks = decode(model, PROMPT, 4)
    assert toks == want_toks
    assert_same_logits(got, want)
    assert "%d file(s)" % len(files) in model.ringfetch.describe()


def _budget_error(path):
    with pytest.raises(rf.InvalidArgument, match="under the minimum") as e:
        from_pretrained(path, 1)
    return str(e.value)


def test_budget(tmp_path_factory):
    path = checkpoint(tmp_path_factory, "mixtral")
    minimum = int(re.search(r"minimum, (\d+) bytes", _budget_error(path)).group(1))
    with pytest.raises(rf.InvalidArgument, match="minimum, %d bytes .*2 x top_k = 4 experts" % minimum):
        from_pretrained(path, minimum - 1)
    model = from_pretrained(path, minimum)
    assert model.ringfetch.slots == 4 and model.ringfetch.slots * model.ringfetch.slot_bytes <= minimum
    decode(model, PROMPT, 2)
    assert parse_budget("256MiB") == 256 << 20 and parse_budget("2GiB") == 2 << 30
    assert parse_budget("1.5 GiB") == 3 << 29 and parse_budget("512MB") == 512 * 10 ** 6
    assert parse_budget(4096) == 4096 and parse_budget("4096") == 4096
    for bad in ("", "12 parsecs", "-1MiB", "0", "MiB", "1e9"):
        with pytest.raises(rf.InvalidArgument):
            parse_budget(bad)
    for bad in (None, 1.5, True, b"1MiB"):
        with pytest.raises(TypeError):
            parse_budget(bad)
    with pytest.raises(rf.InvalidArgument):
        parse_budget(0)


def reads(st, n):
    """bytes_read is n experts' bytes, each read widened to 4 KiB boundaries (at most 8 KiB more)."""
    return n * st["expert_bytes"] <= st["bytes_read"] <= n * (st["expert_bytes"] + 8192 * st["blocks_per_expert"])


def test_stats(tmp_path_factory):
    path = checkpoint(tmp_path_factory, "mixtral")
    # without hints, every read is a miss: bytes_read = misses x an expert's bytes
    model = from_pretrained(path, "64MiB", prefetch=False)
    srv = model.ringfetch
    decode(model, PROMPT, 3)
    st = srv.stats()
    assert st["misses"] > 0 and st["prefetches"] == 0 and st["wasted"] == 0 and st["hint_accuracy"] is None
    assert reads(st, st["misses"])
    assert st["slots"] == 3 * 8            # a budget that holds every expert: nothing is read twice
    assert st["misses"] <= 3 * 8
    first = st["misses"]
    decode(model, PROMPT, 3)               # the same routes again: hits only
    st = srv.stats()
    assert st["misses"] == first and st["hits"] > 0 and reads(st, first)
    # with hints: every read is a miss or a hint
    model = from_pretrained(path, "64MiB", prefetch=True)
    decode(model, PROMPT, 3)
    st = model.ringfetch.stats()
    assert st["prefetches"] > 0 and 0 <= st["hint_correct"] <= st["hinted"]
    assert reads(st, st["misses"] + st["prefetches"])
    assert 0.0 <= st["hint_accuracy"] <= 1.0
    for k in ("hits", "misses", "bytes_read", "prefetches", "wasted"):
        assert isinstance(st[k], int)


def test_no_experts(tmp_path_factory):
    d = tmp_path_factory.mktemp("llama")
    cfg = transformers.LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=1,
                                   num_attention_heads=2, num_key_value_heads=1)
    transformers.AutoModelForCausalLM.from_config(cfg).save_pretrained(d)
    with pytest.raises(ValueError, match="model_type 'llama'.*gate_up_proj"):
        from_pretrained(str(d), "1GiB")


def test_missing_files(tmp_path_factory, tmp_path):
    with pytest.raises(FileNotFoundError):
        from_pretrained(str(tmp_path / "nowhere"), "1GiB")
    with pytest.raises(FileNotFoundError, match="safetensors"):
        from_pretrained(str(tmp_path), "1GiB")
    src = checkpoint(tmp_path_factory, "mixtral", shard="60KB")
    d = tmp_path / "sharded"
    shutil.copytree(src, d)
    index = json.loads((d / "model.safetensors.index.json").read_text())
    victim = sorted(set(index["weight_map"].values()))[1]
    os.remove(d / victim)
    with pytest.raises(FileNotFoundError, match=re.escape(victim)):
        from_pretrained(str(d), "1GiB")


def test_truncated_checkpoint(tmp_path_factory, tmp_path):
    """A checkpoint cut short after loading: the step that reads the lost bytes is rf.IOError, every
    time, never logits from stale bytes; the model closes cleanly."""
    d = tmp_path / "cut"
    shutil.copytree(checkpoint(tmp_path_factory, "mixtral"), d)
    model = from_pretrained(str(d), "64MiB")
    ckpt = d / "model.safetensors"
    import ringfetch.safetensors as rst

    with rst.open(ckpt) as f:
        first = min(f.info(k)[2] for k in f.keys() if ".experts." in k)
    os.truncate(ckpt, first + 100)          # every expert is cut (the rest of the model is in memory)
    for prefetch in (True, False):
        model.ringfetch.prefetch = prefetch
        with pytest.raises(rf.IOError):
            decode(model, PROMPT, 1)
    assert model.ringfetch.stats()["hits"] == 0
    model.ringfetch.close()
    # cut before loading: the header no longer fits the file, said at from_pretrained
    with pytest.raises(rf.InvalidArgument, match="truncated"):
        from_pretrained(str(d), "64MiB")


def test_one_forward_at_a_time(tmp_path_factory):
    """A second thread entering the model while a forward runs is rf.Busy; the first one's logits are
    right. Events, not timing, order the threads."""
    path = checkpoint(tmp_path_factory, "mixtral")
    want = eager(path)(PROMPT).logits
    model = from_pretrained(path, "64MiB")
    inside, go = threading.Event(), threading.Event()

    def hold(mod, args):
        if threading.current_thread().name == "first":
            inside.set()
            assert go.wait(60)

    h = model.model.layers[1].self_attn.register_forward_pre_hook(hold)
    box = {}

    def first():
        with torch.no_grad():
            box["logits"] = model(PROMPT).logits

    t = threading.Thread(target=first, name="first")
    t.start()
    assert inside.wait(60)
    with pytest.raises(rf.Busy):
        model(PROMPT)
    with pytest.raises(rf.Busy):
        model.model.layers[0].mlp.experts(torch.zeros(1, 64), torch.zeros(1, 2, dtype=torch.long),
                                          torch.ones(1, 2))
    with pytest.raises(rf.Busy):
        model.ringfetch.close()                              # not under a forward
    assert not model.ringfetch.closed
    go.set()
    t.join(60)
    h.remove()
    assert_same_logits([box["logits"]], [want])
    assert_same_logits([model(PROMPT).logits], [want])      # and the model is free again


def test_close_and_collect(tmp_path_factory):
    path = checkpoint(tmp_path_factory, "qwen3_moe")
    model = from_pretrained(path, "64MiB")
    srv = model.ringfetch
    assert not srv.closed and srv.pipeline is not None
    decode(model, PROMPT, 1)
    srv.close()
    assert srv.closed and "closed" in srv.describe()
    assert srv.stats()["misses"] > 0
    with pytest.raises(rf.InvalidArgument, match="closed"):
        model(PROMPT)
    srv.close()
    with pytest.raises(rf.NotSupported, match="device_map"):
        from_pretrained(path, "64MiB", device_map="auto")
    model = from_pretrained(path, "64MiB")
    with pytest.raises(rf.NotSupported, match="CPU"):
        model.model.layers[0].mlp.experts(torch.zeros(1, 64, device="meta"),
                                          torch.zeros(1, 2, dtype=torch.long), torch.ones(1, 2))
    srv = model.ringfetch
    decode(model, PROMPT, 1)
    del model
    gc.collect()
    assert srv.closed                      # the model collected closes its server (files, slots)


def test_import_ringfetch_imports_no_torch():
    code = ("import sys, ringfetch, ringfetch.safetensors, ringfetch.transformers; "
            "bad = [m for m in ('torch', 'transformers', 'numpy', 'safetensors') if m in sys.modules]; "
            "assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_dtype_other_than_the_checkpoints(tmp_path_factory):
    """dtype= as transformers takes it: the experts' bytes (bf16 in the file) cast as the parameters
    would have been on loading."""
    path = checkpoint(tmp_path_factory, "qwen3_moe", dtype="bfloat16")
    want, want_toks = decode(eager(path, dtype=torch.float32), PROMPT, 3)
    model = from_pretrained(path, "64MiB", dtype=torch.float32)
    assert model.dtype == torch.float32
    got, toks = decode(model, PROMPT, 3)
    assert toks == want_toks
    assert_same_logits(got, want)


def test_hint_count_rule():
    """The rule that sizes the hints, as a pure function of the measured precision."""
    from ringfetch.transformers import hint_count

    assert hint_count(0.0, 0, 2, 1) == 2              # nothing measured yet: hint them all
    assert hint_count(0.1, 31, 2, 1) == 2
    assert hint_count(0.9, 1000, 2, 1) == 2            # mostly right
    assert hint_count(0.7, 1000, 2, 1) == 1            # the likeliest only
    assert [hint_count(0.3, 1000, 2, f) for f in range(32)].count(1) == 2    # a probe every 16th
    assert hint_count(0.8, 1000, 4, 3) == 4


def test_short_slots_keep_the_most_routed(tmp_path_factory):
    """Slots fewer than one forward's experts: the most routed experts keep theirs (plain LRU would
    evict, layer after layer, what the next forward needs first); the logits stay exact."""
    path = checkpoint(tmp_path_factory, "mixtral")
    want, want_toks = decode(eager(path), PROMPT, 5)
    minimum = int(re.search(r"minimum, (\d+) bytes", _budget_error(path)).group(1))
    model = from_pretrained(path, minimum // 4 * 6, prefetch=False)    # 6 slots, 3 layers x top-2
    srv = model.ringfetch
    assert srv.slots == 6 and srv._retain_slots == 2
    got, toks = decode(model, PROMPT, 5)
    assert toks == want_toks
    assert_same_logits(got, want)
    kept = sum(len(layer.retain) for layer in srv._layers)
    assert kept == 2
    st = srv.stats()
    assert reads(st, st["misses"])
    srv._retain_age = 0
    srv._plan_retention()
    for layer in srv._layers:                          # what is kept is what was routed most
        for e in layer.retain:
            assert layer.counts[e] >= max(c for lay in srv._layers for i, c in enumerate(lay.counts)
                                          if i not in lay.retain)


def test_checkpoint_without_all_experts(tmp_path_factory, tmp_path):
    """An expert tensor missing or of the wrong shape is refused at from_pretrained (transformers would
    give the missing one random weights)."""
    from safetensors.torch import load_file, save_file

    src = checkpoint(tmp_path_factory, "mixtral")
    sd = load_file(os.path.join(src, "model.safetensors"))
    victim = "model.layers.1.block_sparse_moe.experts.3.w2.weight"
    for case in ("missing", "shape"):
        d = tmp_path / case
        shutil.copytree(src, d)
        broken = dict(sd)
        if case == "missing":
            del broken[victim]
        else:
            broken[victim] = broken[victim][:, :-1].contiguous()
        save_file(broken, str(d / "model.safetensors"), metadata={"format": "pt"})
        err = ValueError if case == "missing" else rf.InvalidArgument
        with pytest.raises(err, match="expert 3" if case == "missing" else re.escape(victim)):
            from_pretrained(str(d), "64MiB")
