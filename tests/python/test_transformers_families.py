"""ringfetch.transformers over the other MoE families of the installed transformers: a tiny random model of
each, saved with save_pretrained, served with its experts in the file; the prefill logits and those of
each greedy decode step through the cache (one token: the one-row path, with hints) equal those of the
checkpoint loaded whole with experts_implementation="eager". A family whose experts compute otherwise is
refused by name, never served with other logits. (test_transformers.py checks the families of its
CONFIGS more closely: both layouts, bf16, generate.)"""
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
from ringfetch.transformers import from_pretrained  # noqa: E402
from test_transformers import assert_same_logits, decode, one_torch_thread  # noqa: E402,F401

# One small setting per name; each family's config takes the names it knows.
SMALL = dict(
    vocab_size=96, hidden_size=64, intermediate_size=80, moe_intermediate_size=48, num_hidden_layers=4,
    num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=64,
    initializer_range=0.1, num_experts=4, num_local_experts=4, n_routed_experts=4, moe_num_experts=4,
    num_experts_per_tok=2, moe_k=2, n_group=1, topk_group=1, first_k_dense_replace=0, decoder_sparse_step=1,
    mlp_only_layers=[], moe_layer_freq=1, q_lora_rank=16, kv_lora_rank=16, qk_rope_head_dim=8,
    qk_nope_head_dim=8, v_head_dim=16, shared_expert_intermediate_size=64, n_shared_experts=1,
    linear_num_value_heads=2, linear_num_key_heads=2, linear_key_head_dim=16, linear_value_head_dim=16,
    full_attention_interval=2, attn_layer_period=2, attn_layer_offset=1, expert_layer_period=1,
    expert_layer_offset=0, bos_token_id=0, eos_token_id=1, pad_token_id=2)

# granitemoehybrid's default is no attention layer, which its own decode refuses
EXTRA = {"granitemoehybrid": dict(layer_types=["linear_attention", "full_attention"] * 2)}
FAMILIES = ["afmoe", "axk1", "cohere2_moe", "deepseek_v2", "dots1", "ernie4_5_moe", "exaone_moe", "flex_olmo",
            "flint", "glm4_moe_lite", "granitemoe", "granitemoe_swa", "granitemoehybrid", "granitemoeshared",
            "hunyuan_v1_moe", "hy_v3", "inkling", "jamba", "kolibri1", "laguna", "lara_mini", "mellum",
            "mimo_v2_flash", "minicpm5_moe", "minimax", "qwen3_next", "solar_open"]
# Their experts' forward is not transformers' eager loop (gpt_oss, by name below: biases, a clamped SwiGLU)
REFUSED = ["aria", "deepseek_v4", "ergo", "hy_v4", "jetmoe", "minimax_m3_vl", "nemotron_h"]
PROMPT = torch.tensor([[3, 17, 42, 8, 60, 5, 23]])


def tiny(family, tmp_path):
    """A tiny random model of `family` (its causal LM: aria's is aria_text), saved to tmp_path."""
    auto = transformers.models.auto
    names = [t for t in auto.modeling_auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES
             if t.startswith(family) and t in auto.configuration_auto.CONFIG_MAPPING]
    if not names:
        pytest.skip("transformers %s has no causal LM for %s" % (transformers.__version__, family))
    cls = auto.configuration_auto.CONFIG_MAPPING[min(names, key=len)]
    known = cls().to_dict()
    kw = {k: v for k, v in SMALL.items() if k in known}
    if "qk_rope_head_dim" in known and "head_dim" in known:
        kw["head_dim"] = kw["qk_rope_head_dim"]     # attention with a latent KV: head_dim is the rope part
    if "layer_types" in known:
        kw["layer_types"] = None                    # derived from the layer counts above
    kw.update(EXTRA.get(family, {}))
    torch.manual_seed(sum(map(ord, family)))
    model = transformers.AutoModelForCausalLM.from_config(cls(**kw)).float().eval()
    model.save_pretrained(tmp_path)
    return str(tmp_path)


@pytest.mark.parametrize("family", FAMILIES)
def test_family_logits_equal_eager(family, tmp_path):
    path = tiny(family, tmp_path)
    whole = transformers.AutoModelForCausalLM.from_pretrained(path, experts_implementation="eager").eval()
    want, want_toks = decode(whole, PROMPT, 3)
    model = from_pretrained(path, "64MiB")
    try:
        got, toks = decode(model, PROMPT, 3)
        st = model.ringfetch.stats()
        assert st["misses"] > 0 and st["bytes_read"] > 0, st  # its experts came through the slots
        assert toks == want_toks
        assert_same_logits(got, want)
    finally:
        model.ringfetch.close()


def test_gpt_oss_refused_by_name(tmp_path):
    path = tiny("gpt_oss", tmp_path)
    with pytest.raises(ValueError, match="model_type 'gpt_oss'.*GptOssExperts"):
        from_pretrained(path, "64MiB")


@pytest.mark.parametrize("family", REFUSED)
def test_family_refused(family, tmp_path):
    path = tiny(family, tmp_path)
    with pytest.raises(ValueError, match="model_type '%s.*' .*has no experts module to serve" % family):
        from_pretrained(path, "64MiB")
