#!/usr/bin/env python3
"""Fixtures of the mixture-of-experts families (Qwen2-MoE, Mixtral, Qwen3-MoE).

Each ``data/fixtures/<name>/`` is what ``tools/make_fixtures.py``'s ``build_fixture`` writes (HF's own
model class at a tiny shape with ``attn_implementation="eager"`` and ``experts_implementation="eager"``,
random init, ``save_pretrained``; ``reference.safetensors`` with HF's fp32 and true-fp64 full-forward and
greedy KV-cached ``generate`` log-probs; every check of that script, including the independent numpy fp64
forward ``np_forward_moe`` here and the router margin: no token's k-th and (k+1)-th fp64 router
probabilities closer than ``MIN_ROUTE_MARGIN``). A spec with ``save_fused_experts`` replaces the file
``save_pretrained`` wrote (one tensor per expert, the published layout) by the model's own state dict:
transformers v5's fused 3-D ``mlp.experts.gate_up_proj`` / ``down_proj`` (and Mixtral's ``mlp.gate``).
The fp64 model's routers are fp64 throughout (Qwen2-MoE / Qwen3-MoE: the softmax patch; Mixtral:
``_patch_mixtral_f64``).

``README-moe.md`` and ``SHA256SUMS-moe`` (top level of data/fixtures) describe and list these folders.
Versions: tools/requirements-fixtures.txt.

Usage::

    python3 tools/make_moe_fixtures.py              # everything
    python3 tools/make_moe_fixtures.py --only qwen2_moe   # one folder, no README / SHA256SUMS
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_fixtures as mf  # noqa: E402  (sets CPU only, imports torch)
import numpy as np  # noqa: E402
import torch  # noqa: E402
from transformers import (  # noqa: E402
    MixtralConfig,
    MixtralForCausalLM,
    Qwen2MoeConfig,
    Qwen2MoeForCausalLM,
    Qwen3MoeConfig,
    Qwen3MoeForCausalLM,
)


def _np_moe_mlp(cfg, W, p, h):
    """One MoE layer's MLP (Qwen2MoeSparseMoeBlock / MixtralSparseMoeBlock) in fp64, from either expert
    layout: one tensor per expert (published names) or transformers v5's fused 3-D tensors."""
    mixtral = cfg["model_type"] == "mixtral"
    # Qwen3MoeConfig writes num_experts as num_local_experts (its attribute_map); published configs say num_experts
    E = cfg["num_experts"] if "num_experts" in cfg else cfg["num_local_experts"]
    k = cfg["num_experts_per_tok"]
    fused = (p + "mlp.experts.gate_up_proj") in W
    if fused:
        gu, dn, router = W[p + "mlp.experts.gate_up_proj"], W[p + "mlp.experts.down_proj"], W[p + "mlp.gate.weight"]
        Im = gu.shape[1] // 2
        experts = [(gu[e, :Im], gu[e, Im:], dn[e]) for e in range(E)]
    elif mixtral:
        q = p + "block_sparse_moe."
        router = W[q + "gate.weight"]
        experts = [(W[q + f"experts.{e}.w1.weight"], W[q + f"experts.{e}.w3.weight"], W[q + f"experts.{e}.w2.weight"])
                   for e in range(E)]
    else:
        q = p + "mlp.experts."
        router = W[p + "mlp.gate.weight"]
        experts = [(W[q + f"{e}.gate_proj.weight"], W[q + f"{e}.up_proj.weight"], W[q + f"{e}.down_proj.weight"])
                   for e in range(E)]
    logits = h @ router.T
    pr = np.exp(logits - logits.max(-1, keepdims=True))
    pr = pr / pr.sum(-1, keepdims=True)
    order = np.argsort(-pr, axis=-1, kind="stable")
    srt = np.take_along_axis(pr, order, -1)
    mf.NP_ROUTE_MARGINS.append(float((srt[:, k - 1] - srt[:, k]).min()))
    top = order[:, :k]
    wts = np.take_along_axis(pr, top, -1)
    if mixtral or cfg.get("norm_topk_prob", False):
        wts = wts / wts.sum(-1, keepdims=True)
    out = np.zeros_like(h)
    for t in range(h.shape[0]):
        for j in range(k):
            g_, u_, d_ = experts[top[t, j]]
            g = h[t] @ g_.T
            out[t] += wts[t, j] * ((g / (1 + np.exp(-g)) * (h[t] @ u_.T)) @ d_.T)
    if (p + "mlp.shared_expert_gate.weight") in W:
        s = p + "mlp.shared_expert."
        g = mf._np_lin(h, W, s + "gate_proj")
        sh = mf._np_lin(g / (1 + np.exp(-g)) * mf._np_lin(h, W, s + "up_proj"), W, s + "down_proj")
        gate = h @ W[p + "mlp.shared_expert_gate.weight"].T  # [T, 1]
        out = out + sh / (1 + np.exp(-gate))
    return out


def np_forward_moe(cfg, W, ids):
    """Qwen2-MoE / Mixtral / Qwen3-MoE: Llama's attention (Qwen2-MoE with q/k/v bias; Qwen3-MoE with per-head
    q_norm / k_norm before RoPE), MoE layers by Qwen2MoeDecoderLayer's rule (mlp_only_layers,
    decoder_sparse_step), else the dense SwiGLU."""
    T = len(ids)
    H, KV = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    D = cfg.get("head_dim") or cfg["hidden_size"] // H
    eps = cfg["rms_norm_eps"]
    assert cfg["hidden_act"] == "silu" and not cfg.get("sliding_window")
    inv = mf._np_inv_freq(cfg, D)
    x = W["model.embed_tokens.weight"][ids]
    mlp_only = cfg.get("mlp_only_layers") or []
    step = cfg.get("decoder_sparse_step", 1)
    for layer in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{layer}."
        h = mf._np_rms(x, W[p + "input_layernorm.weight"], eps)
        q = mf._np_lin(h, W, p + "self_attn.q_proj").reshape(T, H, D)
        k = mf._np_lin(h, W, p + "self_attn.k_proj").reshape(T, KV, D)
        if cfg["model_type"] == "qwen3_moe":
            q = mf._np_rms(q, W[p + "self_attn.q_norm.weight"], eps)
            k = mf._np_rms(k, W[p + "self_attn.k_norm.weight"], eps)
        q, k = mf._np_rope(q, inv), mf._np_rope(k, inv)
        v = mf._np_lin(h, W, p + "self_attn.v_proj").reshape(T, KV, D)
        x = x + mf._np_lin(mf._np_attn(q, k, v, D ** -0.5), W, p + "self_attn.o_proj")
        h = mf._np_rms(x, W[p + "post_attention_layernorm.weight"], eps)
        if cfg["model_type"] == "mixtral" or (layer not in mlp_only and (layer + 1) % step == 0):
            x = x + _np_moe_mlp(cfg, W, p, h)
        else:
            g = mf._np_lin(h, W, p + "mlp.gate_proj")
            x = x + mf._np_lin(g / (1 + np.exp(-g)) * mf._np_lin(h, W, p + "mlp.up_proj"), W, p + "mlp.down_proj")
    x = mf._np_rms(x, W["model.norm.weight"], eps)
    head = W["model.embed_tokens.weight"] if cfg["tie_word_embeddings"] else W["lm_head.weight"]
    return mf._np_log_softmax(x @ head.T)


MOE_FIXTURES = [
    dict(
        name="qwen2_moe",
        np_forward=np_forward_moe,
        seed=12012,
        model_cls=Qwen2MoeForCausalLM,
        config_cls=Qwen2MoeConfig,
        config=dict(
            vocab_size=280,
            hidden_size=64,
            num_hidden_layers=3,
            num_attention_heads=4,
            num_key_value_heads=2,
            intermediate_size=96,            # the dense MLP of mlp_only_layers
            moe_intermediate_size=40,
            shared_expert_intermediate_size=56,
            num_experts=6,
            num_experts_per_tok=3,
            norm_topk_prob=False,
            decoder_sparse_step=1,
            mlp_only_layers=[1],
            hidden_act="silu",
            max_position_embeddings=512,
            initializer_range=mf.INIT_RANGE,
            rms_norm_eps=1e-6,
            tie_word_embeddings=False,
            use_sliding_window=False,
            rope_parameters=dict(rope_type="default", rope_theta=1000000.0),
            experts_implementation="eager",
            **mf.COMMON_TOKENS,
        ),
        load_kwargs=dict(experts_implementation="eager"),
        save_dtype=torch.float32,
        max_shard_size=None,
        description="Qwen2-MoE, 6 experts top-3 (norm_topk_prob false), shared expert with its sigmoid gate, "
                    "layer 1 dense (mlp_only_layers), q/k/v bias, GQA 4q/2kv, one tensor per expert "
                    "(save_pretrained), eager experts, fp32",
    ),
    dict(
        name="mixtral_fused",
        np_forward=np_forward_moe,
        seed=13013,
        model_cls=MixtralForCausalLM,
        config_cls=MixtralConfig,
        config=dict(
            vocab_size=270,
            hidden_size=64,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            intermediate_size=48,            # each expert's
            num_local_experts=5,
            num_experts_per_tok=2,
            hidden_act="silu",
            max_position_embeddings=512,
            initializer_range=mf.INIT_RANGE,
            rms_norm_eps=1e-5,
            tie_word_embeddings=False,
            sliding_window=None,
            rope_parameters=dict(rope_type="default", rope_theta=10000.0),
            experts_implementation="eager",
            **mf.COMMON_TOKENS,
        ),
        load_kwargs=dict(experts_implementation="eager"),
        save_fused_experts=True,
        save_dtype=torch.float32,
        max_shard_size=None,
        description="Mixtral, 5 experts top-2 (renormalised, fp32 weights), GQA 4q/2kv, saved in transformers "
                    "v5's in-memory layout (fused 3-D mlp.experts.gate_up_proj / down_proj, mlp.gate), eager "
                    "experts, fp32",
    ),

    dict(
        name="qwen3_moe",
        np_forward=np_forward_moe,
        seed=14014,
        model_cls=Qwen3MoeForCausalLM,
        config_cls=Qwen3MoeConfig,
        config=dict(
            vocab_size=260,
            hidden_size=48,
            head_dim=20,
            num_hidden_layers=3,
            num_attention_heads=4,
            num_key_value_heads=2,
            intermediate_size=72,            # the dense MLP of mlp_only_layers
            moe_intermediate_size=24,
            num_experts=7,
            num_experts_per_tok=3,
            norm_topk_prob=True,
            decoder_sparse_step=1,
            mlp_only_layers=[0],
            hidden_act="silu",
            max_position_embeddings=512,
            initializer_range=mf.INIT_RANGE,
            rms_norm_eps=1e-6,
            tie_word_embeddings=False,
            use_sliding_window=False,
            rope_parameters=dict(rope_type="default", rope_theta=1000000.0),
            experts_implementation="eager",
            **mf.COMMON_TOKENS,
        ),
        load_kwargs=dict(experts_implementation="eager"),
        save_dtype=torch.float32,
        max_shard_size=None,
        description="Qwen3-MoE, 7 experts top-3 (norm_topk_prob true), layer 0 dense (mlp_only_layers), q_norm / "
                    "k_norm per head, head_dim 20 (hidden 48), GQA 4q/2kv, one tensor per expert, eager experts, fp32",
    ),
]


def write_readme(out_root, summaries):
    L = ["# Fixtures of the mixture-of-experts families", "",
         "Written by `tools/make_moe_fixtures.py` (do not edit by hand); the folders are listed with",
         "checksums in `SHA256SUMS-moe`. Each folder is built by `tools/make_fixtures.py`'s `build_fixture`",
         "(see `README.md` here for the scheme) with eager attention and eager experts; the numpy fp64 forward",
         "is `np_forward_moe` in `tools/make_moe_fixtures.py`.", "",
         "```sh",
         "pip install -r tools/requirements-fixtures.txt",
         "python3 tools/make_moe_fixtures.py",
         "(cd data/fixtures && sha256sum -c SHA256SUMS-moe)",
         "```", "",
         "Versions: " + ", ".join(f"{k} {v}" for k, v in mf.versions().items()), "",
         "| fixture | description | params | min greedy margin (fp64) | max HF fp32 vs fp64 | numpy vs fp64 |",
         "|---|---|---|---|---|---|"]
    for s in summaries:
        L.append(f"| `{s['name']}` | {s['description']} | {s['n_params']} | {s['min_margin']:.3g} | "
                 f"{s['fwd_diff_32_64']:.3g} | {s['np_err']:.3g} |")
    L.append("")
    with open(os.path.join(out_root, "README-moe.md"), "w") as f:
        f.write("\n".join(L))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=mf.DEFAULT_OUT)
    ap.add_argument("--only", action="append", help="only this fixture (repeatable); no README/SHA256SUMS")
    args = ap.parse_args()
    mf.set_determinism()
    specs = [s for s in MOE_FIXTURES if not args.only or s["name"] in args.only]
    summaries = []
    for spec in specs:
        s = mf.build_fixture(spec, args.out)
        summaries.append(s)
        print(f"{s['name']:16s} params={s['n_params']} min_margin={s['min_margin']:.4g} np={s['np_err']:.3g} "
              f"f32vs64={s['fwd_diff_32_64']:.3g}", flush=True)
    if not args.only:
        write_readme(args.out, summaries)
        mf.write_sums(args.out, dirs=[s["name"] for s in MOE_FIXTURES], sums_name="SHA256SUMS-moe")


if __name__ == "__main__":
    main()
