"""ringfetch.transformers over the other MoE families of the installed transformers: a tiny random model of
each, saved with save_pretrained, served with its experts in the file; the prefill logits equal those of
the checkpoint loaded whole with experts_implementation="eager". A family whose experts compute otherwise
(gpt_oss: biases and its own activation) is refused by name, never served with other logits."""
import inspect

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
from ringfetch.transformers import from_pretrained  # noqa: E402
from test_transformers import one_torch_thread  # noqa: E402,F401 (one torch thread, as there)

# One small setting per name; each family's config takes the names it knows.
SMALL = dict(
    vocab_size=96, hidden_size=64, intermediate_size=80, moe_intermediate_size=48, num_hidden_layers=4,
    num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=64,
    initializer_range=0.1, num_experts=4, num_local_experts=4, n_routed_experts=4, num_experts_per_tok=2,
    n_group=1, topk_group=1, first_k_dense_replace=0, decoder_sparse_step=1, mlp_only_layers=[],
    moe_layer_freq=1, q_lora_rank=None, kv_lora_rank=16, qk_rope_head_dim=8, qk_nope_head_dim=8,
    v_head_dim=16, shared_expert_intermediate_size=64, n_shared_experts=1, linear_num_value_heads=2,
    linear_num_key_heads=2, linear_key_head_dim=16, linear_value_head_dim=16, full_attention_interval=2,
    attn_layer_period=2, attn_layer_offset=1, expert_layer_period=1, expert_layer_offset=0,
    bos_token_id=0, eos_token_id=1, pad_token_id=2)

FAMILIES = ["deepseek_v3", "glm4_moe", "qwen3_next", "minimax", "dots1", "ernie4_5_moe", "hunyuan_v1_moe",
            "flex_olmo", "phimoe", "granitemoe", "jamba"]
PROMPT = torch.tensor([[3, 17, 42, 8, 60, 5, 23]])


def tiny(family, tmp_path):
    if family not in transformers.models.auto.configuration_auto.CONFIG_MAPPING:
        pytest.skip("transformers %s has no %s" % (transformers.__version__, family))
    cls = transformers.AutoConfig.for_model(family).__class__
    names = inspect.signature(cls.__init__).parameters
    torch.manual_seed(sum(map(ord, family)))
    cfg = cls(**{k: v for k, v in SMALL.items() if k in names})
    model = transformers.AutoModelForCausalLM.from_config(cfg).float().eval()
    model.save_pretrained(tmp_path)
    return str(tmp_path)


@pytest.mark.parametrize("family", FAMILIES)
def test_family_logits_equal_eager(family, tmp_path):
    path = tiny(family, tmp_path)
    whole = transformers.AutoModelForCausalLM.from_pretrained(path, experts_implementation="eager").eval()
    with torch.no_grad():
        want = whole(PROMPT).logits
    model = from_pretrained(path, "64MiB")
    try:
        with torch.no_grad():
            got = model(PROMPT).logits
        st = model.ringfetch.stats()
        assert st["misses"] > 0 and st["bytes_read"] > 0, st  # its experts came through the slots
        assert torch.equal(got.argmax(-1), want.argmax(-1))
        rel = ((got - want).abs().max() / want.abs().max()).item()
        assert rel <= 1e-5, rel
    finally:
        model.ringfetch.close()


def test_gpt_oss_refused_by_name(tmp_path):
    path = tiny("gpt_oss", tmp_path)
    with pytest.raises(ValueError, match="model_type 'gpt_oss'.*GptOssExperts"):
        from_pretrained(path, "64MiB")
