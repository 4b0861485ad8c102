"""bench/hf/checkpoint.py — the benchmark's checkpoints: random-weight MoE models written by transformers.

Two families, the same shape: hidden 1024, 8 layers of 8 experts, top-2, an expert's three projections
1024 x 2048 in fp32 (24 MiB an expert, 1.5 GiB of experts, 1.6 GiB in all), vocabulary 4096, one
safetensors file as `save_pretrained` writes it. Mixtral is saved in its per-expert layout
(`block_sparse_moe.experts.N.w1/w2/w3`), Qwen3-MoE as `mlp.experts.N.gate_proj/up_proj/down_proj`: the
checkpoints users download. `--small` is a shape of a few MiB for smoke checks of the harness itself.

usage: python checkpoint.py FAMILY DIR [--small]       (run by bench/hf/run.py; imports torch)
"""
import argparse
import json
import os
import sys
import time

SHAPES = {
    # name: (hidden, expert intermediate, layers, experts, top_k, vocab, heads, kv heads)
    "full": (1024, 2048, 8, 8, 2, 4096, 16, 4),
    "small": (128, 256, 4, 8, 2, 512, 4, 2),
}


def config(family, shape):
    h, i, layers, experts, top_k, vocab, heads, kv = SHAPES[shape]
    common = dict(vocab_size=vocab, hidden_size=h, num_hidden_layers=layers, num_attention_heads=heads,
                  num_key_value_heads=kv, num_experts_per_tok=top_k, max_position_embeddings=4096,
                  tie_word_embeddings=False)
    if family == "mixtral":
        from transformers import MixtralConfig
        return MixtralConfig(intermediate_size=i, num_local_experts=experts, **common)
    if family == "qwen3_moe":
        from transformers import Qwen3MoeConfig
        return Qwen3MoeConfig(moe_intermediate_size=i, intermediate_size=2 * i, num_experts=experts,
                              head_dim=h // heads, decoder_sparse_step=1, mlp_only_layers=[],
                              norm_topk_prob=True, **common)
    raise SystemExit(f"checkpoint.py: unknown family {family!r} (mixtral, qwen3_moe)")


def make(family, out, shape):
    import torch
    from transformers import AutoModelForCausalLM
    torch.manual_seed(0)
    t0 = time.monotonic()
    cfg = config(family, shape)
    cfg.dtype = "float32"
    model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    tmp = out + ".partial"
    model.save_pretrained(tmp, max_shard_size="64GB")  # one file, as the benchmark's contract says
    del model
    os.rename(tmp, out)  # a directory that exists is a finished checkpoint
    return time.monotonic() - t0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("family", choices=["mixtral", "qwen3_moe"])
    ap.add_argument("dir")
    ap.add_argument("--small", action="store_true")
    a = ap.parse_args()
    secs = make(a.family, a.dir, "small" if a.small else "full")
    json.dump({"family": a.family, "dir": a.dir, "seconds": secs}, sys.stdout)
    print()


if __name__ == "__main__":
    main()
