#!/usr/bin/env python3
"""Fixtures for the model families added after the first set (Qwen3, OLMo 2 and 3, Gemma 2 and 3, Phi-3,
GLM-4) and for YaRN RoPE.

Four kinds of files, all from transformers' own code (versions: tools/requirements-fixtures.txt):

* ``data/fixtures/<name>/`` for each entry of ``FAMILY_FIXTURES``: exactly what
  ``tools/make_fixtures.py`` writes for its fixtures (``build_fixture``: HF's own model class at a
  tiny shape, random init, ``save_pretrained``; ``reference.safetensors`` with HF's fp32 and true-fp64
  full-forward and greedy KV-cached ``generate`` log-probs; every check of that script, including an
  independent numpy fp64 forward, here ``np_forward_<family>``).
* ``data/fixtures/dtype/<name>_<bf16|fp16>_v5.24.safetensors``: HF's bf16 / fp16 full forward of
  the same sequences, by ``tools/make_dtype_fixtures.py``'s ``make_v524`` (``from_pretrained(path,
  dtype=...)``, eager attention), the format ``tests/test_versions.c`` reads.
* ``data/fixtures/ops_gemma/gemma_ops.safetensors``: Gemma's soft-capping, scaled embedding and
  (1 + w) RMSNorm run by transformers' own modules / lines in fp32, bf16 and fp16 (``make_gemma_ops``).
* ``data/fixtures/rope_yarn/rope_yarn.safetensors`` and ``c<i>.json``: for several YaRN configurations,
  transformers' ``ROPE_INIT_FUNCTIONS["yarn"]`` inv_freq and attention factor, and the rotary
  module's cos / sin (fp32 and bf16) at a few positions; the configs themselves in the metadata.

``README-families.md`` and ``SHA256SUMS-families`` (top level of data/fixtures) describe and list
these folders; the README and SHA256SUMS of ``tools/make_fixtures.py`` are left alone.

Usage::

    python3 tools/make_family_fixtures.py              # everything
    python3 tools/make_family_fixtures.py --only qwen3_yarn --no-dtype
"""

import argparse
import json
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import make_fixtures as mf  # noqa: E402  (sets CPU only, imports torch)
import numpy as np  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402
from st_canonical import save_safetensors_canonical  # noqa: E402
from transformers import (Gemma2Config, Gemma2ForCausalLM, Gemma3ForCausalLM, Gemma3TextConfig,  # noqa: E402
                          Glm4Config, Glm4ForCausalLM, LlamaConfig, Olmo2Config, Olmo2ForCausalLM, Olmo3Config,
                          Olmo3ForCausalLM, Phi3Config, Phi3ForCausalLM, Qwen3Config, Qwen3ForCausalLM)
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS  # noqa: E402
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding  # noqa: E402


# --------------------------------------------------------------------------
# numpy fp64 forwards (independent of HF's modules; checked against the fp64 references)
# --------------------------------------------------------------------------

def np_inv_freq(rp, head_dim, max_pos=None):
    """default / yarn / longrope (short factors) inv_freq and attention factor in fp64 (transformers' formulas)."""
    dim = int(head_dim * rp.get("partial_rotary_factor", 1.0))
    base = float(rp["rope_theta"])
    inv = 1.0 / base ** (np.arange(0, dim, 2, dtype=np.float64) / dim)
    if rp["rope_type"] == "default":
        return inv, 1.0
    if rp["rope_type"] == "longrope":
        orig = rp["original_max_position_embeddings"]
        factor = rp.get("factor") or max_pos / orig
        att = rp.get("attention_factor")
        if att is None:
            att = 1.0 if factor <= 1 else math.sqrt(1 + math.log(factor) / math.log(orig))
        return inv / np.asarray(rp["short_factor"], dtype=np.float64), float(att)
    assert rp["rope_type"] == "yarn", rp
    factor = float(rp["factor"])
    orig = rp["original_max_position_embeddings"]
    bf, bs = rp.get("beta_fast") or 32, rp.get("beta_slow") or 1

    def corr(n):
        return dim * math.log(orig / (n * 2 * math.pi)) / (2 * math.log(base))

    lo, hi = corr(bf), corr(bs)
    if rp.get("truncate", True):
        lo, hi = math.floor(lo), math.ceil(hi)
    lo, hi = max(lo, 0), min(hi, dim - 1)
    if lo == hi:
        hi += 0.001
    ramp = np.clip((np.arange(dim // 2, dtype=np.float64) - lo) / (hi - lo), 0, 1)
    inv = inv / factor * ramp + inv * (1 - ramp)

    def mscale(s, m=1.0):
        return 1.0 if s <= 1 else 0.1 * m * math.log(s) + 1.0

    att = rp.get("attention_factor")
    if att is None:
        ms, msa = rp.get("mscale"), rp.get("mscale_all_dim")
        att = mscale(factor, ms) / mscale(factor, msa) if ms and msa else mscale(factor)
    return inv, float(att)


def np_rope(x, inv, att):  # x [T, H, D], the whole head rotated (rotate_half layout), cos/sin times att
    T, half = x.shape[0], len(inv)
    ang = np.arange(T, dtype=np.float64)[:, None] * inv[None, :]
    cos = np.concatenate([np.cos(ang)] * 2, -1)[:, None, :] * att
    sin = np.concatenate([np.sin(ang)] * 2, -1)[:, None, :] * att
    rot = np.concatenate([-x[..., half:], x[..., :half]], -1)
    return x * cos + rot * sin


def np_rope_partial(x, inv, att, interleaved=False):
    """RoPE on the first 2 * len(inv) dims of each head: rotate_half's layout (Phi-3), or GLM's interleaved
    pairs (dims 2j, 2j + 1 rotated by frequency j); the rest of the head passes through."""
    rd = 2 * len(inv)
    r, rest = x[..., :rd], x[..., rd:]
    if interleaved:
        T = x.shape[0]
        ang = np.arange(T, dtype=np.float64)[:, None] * inv[None, :]
        c, s = np.cos(ang)[:, None, :] * att, np.sin(ang)[:, None, :] * att
        a, b = r[..., 0::2], r[..., 1::2]
        out = np.empty_like(r)
        out[..., 0::2], out[..., 1::2] = a * c - b * s, b * c + a * s
        r = out
    else:
        r = np_rope(r, inv, att)
    return np.concatenate([r, rest], -1)


def np_attn(q, k, v, scale, window=None, softcap=None):  # q [T,H,D], k/v [T,KV,D]; window: key j visible iff j > i - window
    T, H, _ = q.shape
    rep = H // k.shape[1]
    k, v = np.repeat(k, rep, axis=1), np.repeat(v, rep, axis=1)
    s = np.einsum("thd,shd->hts", q, k) * scale
    if softcap:
        s = softcap * np.tanh(s / softcap)
    i, j = np.arange(T)[:, None], np.arange(T)[None, :]
    masked = (j > i) | ((j <= i - window) if window else False)
    s = np.where(masked[None], -np.inf, s)
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    return np.einsum("hts,shd->thd", p, v).reshape(T, -1)


def np_rms(x, w, eps):
    return w * (x / np.sqrt((x * x).mean(-1, keepdims=True) + eps))


def np_forward_qwen3(cfg, W, ids):
    """Qwen3ForCausalLM: Llama plus per-head q_norm / k_norm before RoPE and sliding-window layers."""
    T = len(ids)
    H, KV, D = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
    eps = cfg["rms_norm_eps"]
    assert cfg["hidden_act"] == "silu"
    inv, att = np_inv_freq(cfg["rope_parameters"], D)
    window = cfg["sliding_window"] if cfg["use_sliding_window"] else None
    x = W["model.embed_tokens.weight"][ids]
    for layer in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{layer}."
        win = window if cfg["layer_types"][layer] == "sliding_attention" else None
        h = np_rms(x, W[p + "input_layernorm.weight"], eps)
        q = mf._np_lin(h, W, p + "self_attn.q_proj").reshape(T, H, D)
        k = mf._np_lin(h, W, p + "self_attn.k_proj").reshape(T, KV, D)
        v = mf._np_lin(h, W, p + "self_attn.v_proj").reshape(T, KV, D)
        q = np_rope(np_rms(q, W[p + "self_attn.q_norm.weight"], eps), inv, att)
        k = np_rope(np_rms(k, W[p + "self_attn.k_norm.weight"], eps), inv, att)
        x = x + mf._np_lin(np_attn(q, k, v, D ** -0.5, win), W, p + "self_attn.o_proj")
        h = np_rms(x, W[p + "post_attention_layernorm.weight"], eps)
        g = mf._np_lin(h, W, p + "mlp.gate_proj")
        x = x + mf._np_lin(g / (1 + np.exp(-g)) * mf._np_lin(h, W, p + "mlp.up_proj"), W, p + "mlp.down_proj")
    x = np_rms(x, W["model.norm.weight"], eps)
    head = W["model.embed_tokens.weight"] if cfg["tie_word_embeddings"] else W["lm_head.weight"]
    return mf._np_log_softmax(x @ head.T)


def np_forward_olmo2(cfg, W, ids):
    """Olmo2ForCausalLM: norms after attention and MLP (none before), q/k norm over the whole projection."""
    T = len(ids)
    H = cfg["num_attention_heads"]
    KV = cfg.get("num_key_value_heads") or H
    D = cfg.get("head_dim") or cfg["hidden_size"] // H
    eps = cfg["rms_norm_eps"]
    assert cfg["hidden_act"] == "silu"
    inv, att = np_inv_freq(cfg["rope_parameters"], D)
    x = W["model.embed_tokens.weight"][ids]
    for layer in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{layer}."
        q = np_rms(mf._np_lin(x, W, p + "self_attn.q_proj"), W[p + "self_attn.q_norm.weight"], eps)
        k = np_rms(mf._np_lin(x, W, p + "self_attn.k_proj"), W[p + "self_attn.k_norm.weight"], eps)
        v = mf._np_lin(x, W, p + "self_attn.v_proj").reshape(T, KV, D)
        q, k = np_rope(q.reshape(T, H, D), inv, att), np_rope(k.reshape(T, KV, D), inv, att)
        a = mf._np_lin(np_attn(q, k, v, D ** -0.5), W, p + "self_attn.o_proj")
        x = x + np_rms(a, W[p + "post_attention_layernorm.weight"], eps)
        g = mf._np_lin(x, W, p + "mlp.gate_proj")
        m = mf._np_lin(g / (1 + np.exp(-g)) * mf._np_lin(x, W, p + "mlp.up_proj"), W, p + "mlp.down_proj")
        x = x + np_rms(m, W[p + "post_feedforward_layernorm.weight"], eps)
    x = np_rms(x, W["model.norm.weight"], eps)
    head = W["model.embed_tokens.weight"] if cfg["tie_word_embeddings"] else W["lm_head.weight"]
    return mf._np_log_softmax(x @ head.T)


def np_forward_olmo3(cfg, W, ids):
    """Olmo3ForCausalLM: OLMo2's forward, sliding-window layers (layer_types), RoPE per layer type."""
    T = len(ids)
    H = cfg["num_attention_heads"]
    KV = cfg.get("num_key_value_heads") or H
    D = cfg.get("head_dim") or cfg["hidden_size"] // H
    eps = cfg["rms_norm_eps"]
    assert cfg["hidden_act"] == "silu"
    ropes = {lt: np_inv_freq(cfg["rope_parameters"][lt], D) for lt in ("full_attention", "sliding_attention")}
    x = W["model.embed_tokens.weight"][ids]
    for layer in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{layer}."
        lt = cfg["layer_types"][layer]
        inv, att = ropes[lt]
        win = cfg["sliding_window"] if lt == "sliding_attention" else None
        q = np_rms(mf._np_lin(x, W, p + "self_attn.q_proj"), W[p + "self_attn.q_norm.weight"], eps)
        k = np_rms(mf._np_lin(x, W, p + "self_attn.k_proj"), W[p + "self_attn.k_norm.weight"], eps)
        v = mf._np_lin(x, W, p + "self_attn.v_proj").reshape(T, KV, D)
        q, k = np_rope(q.reshape(T, H, D), inv, att), np_rope(k.reshape(T, KV, D), inv, att)
        a = mf._np_lin(np_attn(q, k, v, D ** -0.5, win), W, p + "self_attn.o_proj")
        x = x + np_rms(a, W[p + "post_attention_layernorm.weight"], eps)
        g = mf._np_lin(x, W, p + "mlp.gate_proj")
        m = mf._np_lin(g / (1 + np.exp(-g)) * mf._np_lin(x, W, p + "mlp.up_proj"), W, p + "mlp.down_proj")
        x = x + np_rms(m, W[p + "post_feedforward_layernorm.weight"], eps)
    x = np_rms(x, W["model.norm.weight"], eps)
    head = W["model.embed_tokens.weight"] if cfg["tie_word_embeddings"] else W["lm_head.weight"]
    return mf._np_log_softmax(x @ head.T)


def np_forward_phi3(cfg, W, ids):
    """Phi3ForCausalLM: fused qkv_proj and gate_up_proj, partial rotary, longrope (short factors), a sliding
    window on every layer."""
    T = len(ids)
    H = cfg["num_attention_heads"]
    KV = cfg.get("num_key_value_heads") or H
    D = cfg["hidden_size"] // H
    eps = cfg["rms_norm_eps"]
    assert cfg["hidden_act"] == "silu"
    inv, att = np_inv_freq(cfg["rope_parameters"], D, cfg["max_position_embeddings"])
    win = cfg.get("sliding_window")
    I = cfg["intermediate_size"]
    x = W["model.embed_tokens.weight"][ids]
    for layer in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{layer}."
        h = np_rms(x, W[p + "input_layernorm.weight"], eps)
        qkv = h @ W[p + "self_attn.qkv_proj.weight"].T
        q = qkv[:, :H * D].reshape(T, H, D)
        k = qkv[:, H * D:(H + KV) * D].reshape(T, KV, D)
        v = qkv[:, (H + KV) * D:].reshape(T, KV, D)
        q, k = np_rope_partial(q, inv, att), np_rope_partial(k, inv, att)
        x = x + mf._np_lin(np_attn(q, k, v, D ** -0.5, win), W, p + "self_attn.o_proj")
        h = np_rms(x, W[p + "post_attention_layernorm.weight"], eps)
        gu = h @ W[p + "mlp.gate_up_proj.weight"].T
        g, u = gu[:, :I], gu[:, I:]
        x = x + mf._np_lin(u * (g / (1 + np.exp(-g))), W, p + "mlp.down_proj")
    x = np_rms(x, W["model.norm.weight"], eps)
    head = W["model.embed_tokens.weight"] if cfg["tie_word_embeddings"] else W["lm_head.weight"]
    return mf._np_log_softmax(x @ head.T)


def np_forward_glm4(cfg, W, ids):
    """Glm4ForCausalLM: four norms per layer, partial rotary in GLM's interleaved layout, fused gate_up_proj,
    q/k/v biases."""
    T = len(ids)
    H, KV, D = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
    eps = cfg["rms_norm_eps"]
    assert cfg["hidden_act"] == "silu"
    inv, att = np_inv_freq(cfg["rope_parameters"], D)
    I = cfg["intermediate_size"]
    x = W["model.embed_tokens.weight"][ids]
    for layer in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{layer}."
        h = np_rms(x, W[p + "input_layernorm.weight"], eps)
        q = mf._np_lin(h, W, p + "self_attn.q_proj").reshape(T, H, D)
        k = mf._np_lin(h, W, p + "self_attn.k_proj").reshape(T, KV, D)
        v = mf._np_lin(h, W, p + "self_attn.v_proj").reshape(T, KV, D)
        q, k = np_rope_partial(q, inv, att, True), np_rope_partial(k, inv, att, True)
        a = mf._np_lin(np_attn(q, k, v, D ** -0.5), W, p + "self_attn.o_proj")
        x = x + np_rms(a, W[p + "post_self_attn_layernorm.weight"], eps)
        h = np_rms(x, W[p + "post_attention_layernorm.weight"], eps)
        gu = h @ W[p + "mlp.gate_up_proj.weight"].T
        g, u = gu[:, :I], gu[:, I:]
        m = mf._np_lin(u * (g / (1 + np.exp(-g))), W, p + "mlp.down_proj")
        x = x + np_rms(m, W[p + "post_mlp_layernorm.weight"], eps)
    x = np_rms(x, W["model.norm.weight"], eps)
    head = W["model.embed_tokens.weight"] if cfg["tie_word_embeddings"] else W["lm_head.weight"]
    return mf._np_log_softmax(x @ head.T)


def np_forward_gemma(cfg, W, ids):
    """Gemma2ForCausalLM / Gemma3ForCausalLM: (1 + w) RMSNorms, four per layer, embedding times
    sqrt(hidden), gelu_pytorch_tanh gating, query_pre_attn_scalar, soft-capping (Gemma 2: scores and
    logits; Gemma 3: logits only, when set), per-head (1 + w) q/k norm and two RoPEs (Gemma 3)."""
    T = len(ids)
    H, KV, D = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
    eps = cfg["rms_norm_eps"]
    g3 = cfg["model_type"] == "gemma3_text"
    assert cfg["hidden_activation"] == "gelu_pytorch_tanh"

    def rms(x, w):
        return np_rms(x, 1.0 + w, eps)

    def gelu_tanh(x):
        return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))

    rp = cfg["rope_parameters"]
    ropes = {}
    for lt in ("full_attention", "sliding_attention"):
        p_lt = rp[lt] if g3 else rp
        inv, att = np_inv_freq(dict(p_lt, rope_type="default"), D)
        if p_lt.get("rope_type", "default") == "linear":
            inv = inv / float(p_lt["factor"])
        else:
            assert p_lt.get("rope_type", "default") == "default"
        ropes[lt] = (inv, att)
    acap = None if g3 else cfg["attn_logit_softcapping"]
    x = W["model.embed_tokens.weight"][ids] * math.sqrt(cfg["hidden_size"])
    for layer in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{layer}."
        lt = cfg["layer_types"][layer]
        win = cfg["sliding_window"] if lt == "sliding_attention" else None
        h = rms(x, W[p + "input_layernorm.weight"])
        q = mf._np_lin(h, W, p + "self_attn.q_proj").reshape(T, H, D)
        k = mf._np_lin(h, W, p + "self_attn.k_proj").reshape(T, KV, D)
        v = mf._np_lin(h, W, p + "self_attn.v_proj").reshape(T, KV, D)
        if g3:
            q, k = rms(q, W[p + "self_attn.q_norm.weight"]), rms(k, W[p + "self_attn.k_norm.weight"])
        q, k = np_rope(q, *ropes[lt]), np_rope(k, *ropes[lt])
        a = mf._np_lin(np_attn(q, k, v, cfg["query_pre_attn_scalar"] ** -0.5, win, acap), W, p + "self_attn.o_proj")
        x = x + rms(a, W[p + "post_attention_layernorm.weight"])
        h = rms(x, W[p + "pre_feedforward_layernorm.weight"])
        m = mf._np_lin(gelu_tanh(mf._np_lin(h, W, p + "mlp.gate_proj")) * mf._np_lin(h, W, p + "mlp.up_proj"), W,
                       p + "mlp.down_proj")
        x = x + rms(m, W[p + "post_feedforward_layernorm.weight"])
    x = rms(x, W["model.norm.weight"])
    head = W["model.embed_tokens.weight"] if cfg["tie_word_embeddings"] else W["lm_head.weight"]
    z = x @ head.T
    if cfg.get("final_logit_softcapping"):
        c = cfg["final_logit_softcapping"]
        z = c * np.tanh(z / c)
    return mf._np_log_softmax(z)


# --------------------------------------------------------------------------
# the fixtures
# --------------------------------------------------------------------------

FAMILY_FIXTURES = [
    dict(
        name="qwen3_yarn",
        seed=11011,
        model_cls=Qwen3ForCausalLM,
        config_cls=Qwen3Config,
        config=dict(
            vocab_size=128,
            hidden_size=32,
            num_hidden_layers=3,
            num_attention_heads=4,
            num_key_value_heads=2,
            head_dim=18,  # != hidden / heads (8); 9 rotary pairs
            intermediate_size=48,
            hidden_act="silu",
            max_position_embeddings=128,
            initializer_range=mf.INIT_RANGE,
            rms_norm_eps=1e-6,
            tie_word_embeddings=True,
            attention_bias=False,
            use_sliding_window=True,
            sliding_window=6,
            max_window_layers=1,  # layer 0 full, layers 1 and 2 sliding
            rope_parameters=dict(rope_type="yarn", rope_theta=10000.0, factor=4.0,
                                 original_max_position_embeddings=32),
            **mf.COMMON_TOKENS,
        ),
        save_dtype=torch.float32,
        max_shard_size=None,
        np_forward=np_forward_qwen3,
        description="Qwen3, q_norm/k_norm per head, GQA 4q/2kv, head_dim 18 (hidden 32), sliding window 6 on "
                    "layers 1-2 (max_window_layers 1), yarn rope (factor 4, orig ctx 32), tied, fp32",
    ),
    dict(
        name="olmo2_postnorm",
        seed=12012,
        model_cls=Olmo2ForCausalLM,
        config_cls=Olmo2Config,
        config=dict(
            vocab_size=136,
            hidden_size=40,
            num_hidden_layers=3,
            num_attention_heads=4,
            num_key_value_heads=2,
            intermediate_size=56,
            hidden_act="silu",
            max_position_embeddings=128,
            initializer_range=mf.INIT_RANGE,
            rms_norm_eps=1e-6,
            tie_word_embeddings=False,
            attention_bias=False,
            rope_parameters=dict(rope_type="default", rope_theta=500000.0),
            **mf.COMMON_TOKENS,
        ),
        save_dtype=torch.float32,
        max_shard_size=None,
        np_forward=np_forward_olmo2,
        description="OLMo2, post-attention / post-feedforward norms, q/k norm over the whole projection, GQA 4q/2kv, "
                    "head_dim 10 (hidden 40), rope_theta 5e5, untied, fp32",
    ),
    dict(
        name="gemma2_softcap",
        seed=13013,
        model_cls=Gemma2ForCausalLM,
        config_cls=Gemma2Config,
        config=dict(
            vocab_size=112,
            hidden_size=32,
            num_hidden_layers=3,  # layer_types default: sliding, full, sliding
            num_attention_heads=4,
            num_key_value_heads=2,
            head_dim=14,  # != hidden / heads (8); 7 rotary pairs
            intermediate_size=48,
            hidden_activation="gelu_pytorch_tanh",
            max_position_embeddings=128,
            initializer_range=mf.INIT_RANGE,
            rms_norm_eps=1e-6,
            tie_word_embeddings=True,
            attention_bias=False,
            query_pre_attn_scalar=20,  # scores * 20 ** -0.5, not head_dim ** -0.5
            sliding_window=5,
            attn_logit_softcapping=1.5,  # small enough to bend the scores of a tiny model
            final_logit_softcapping=4.0,
            rope_parameters=dict(rope_type="default", rope_theta=10000.0),
            **mf.COMMON_TOKENS,
        ),
        save_dtype=torch.float32,
        max_shard_size=None,
        np_forward=np_forward_gemma,
        description="Gemma 2, (1 + w) norms (four per layer), sqrt(hidden) embedding scale, gelu_pytorch_tanh, "
                    "GQA 4q/2kv, head_dim 14 (hidden 32), query_pre_attn_scalar 20, attention softcap 1.5, "
                    "final softcap 4, sliding window 5 on layers 0 and 2, tied, fp32",
    ),
    dict(
        name="gemma3_local",
        seed=14014,
        model_cls=Gemma3ForCausalLM,
        config_cls=Gemma3TextConfig,
        config=dict(
            vocab_size=120,
            hidden_size=32,
            num_hidden_layers=3,
            num_attention_heads=4,
            num_key_value_heads=2,
            head_dim=18,  # != hidden / heads (8); 9 rotary pairs
            intermediate_size=40,
            hidden_activation="gelu_pytorch_tanh",
            max_position_embeddings=128,
            initializer_range=mf.INIT_RANGE,
            rms_norm_eps=1e-6,
            tie_word_embeddings=True,
            attention_bias=False,
            query_pre_attn_scalar=24,
            sliding_window=6,
            sliding_window_pattern=3,  # layer_types: sliding, sliding, full
            rope_parameters=dict(full_attention=dict(rope_type="linear", factor=4.0, rope_theta=1000000.0),
                                 sliding_attention=dict(rope_type="default", rope_theta=10000.0)),
            **mf.COMMON_TOKENS,
        ),
        save_dtype=torch.float32,
        max_shard_size=None,
        np_forward=np_forward_gemma,
        description="Gemma 3 (text), per-head (1 + w) q/k norm, local RoPE (theta 1e4) on the sliding layers and "
                    "linear-scaled RoPE (factor 4, theta 1e6) on the full one (layer 2), sliding window 6 on layers 0 "
                    "and 1, GQA 4q/2kv, head_dim 18 (hidden 32), query_pre_attn_scalar 24, tied, fp32",
    ),
    dict(
        name="olmo3_sliding",
        seed=13013,
        model_cls=Olmo3ForCausalLM,
        config_cls=Olmo3Config,
        config=dict(
            vocab_size=120,
            hidden_size=40,
            num_hidden_layers=3,
            num_attention_heads=4,
            num_key_value_heads=2,
            intermediate_size=44,
            hidden_act="silu",
            max_position_embeddings=128,
            initializer_range=mf.INIT_RANGE,
            rms_norm_eps=1e-6,
            tie_word_embeddings=False,
            attention_bias=False,
            sliding_window=5,
            layer_types=["sliding_attention", "full_attention", "sliding_attention"],
            rope_parameters=dict(
                full_attention=dict(rope_type="yarn", rope_theta=500000.0, factor=4.0,
                                    original_max_position_embeddings=16),
                sliding_attention=dict(rope_type="default", rope_theta=10000.0)),
            **mf.COMMON_TOKENS,
        ),
        save_dtype=torch.float32,
        max_shard_size=None,
        np_forward=np_forward_olmo3,
        description="OLMo3, OLMo2's post-norms and whole-projection q/k norm, GQA 4q/2kv, head_dim 10 (hidden 40), "
                    "layers sliding/full/sliding with window 5, RoPE per layer type (full: yarn factor 4, orig ctx 16, "
                    "theta 5e5; sliding: default, theta 1e4), untied, fp32",
    ),
    dict(
        name="phi3_longrope",
        seed=14014,
        model_cls=Phi3ForCausalLM,
        config_cls=Phi3Config,
        config=dict(
            vocab_size=128,
            hidden_size=48,
            num_hidden_layers=2,
            num_attention_heads=2,
            num_key_value_heads=1,
            intermediate_size=40,
            hidden_act="silu",
            max_position_embeddings=128,
            original_max_position_embeddings=32,
            initializer_range=mf.INIT_RANGE,
            rms_norm_eps=1e-5,
            tie_word_embeddings=False,
            sliding_window=6,
            rope_parameters=dict(
                rope_type="longrope", rope_theta=10000.0, partial_rotary_factor=0.75,
                short_factor=[1.0, 1.05, 1.1, 1.3, 1.6, 2.0, 2.5, 3.1, 3.9],
                long_factor=[1.0, 1.2, 1.5, 2.0, 2.8, 4.0, 5.5, 7.5, 10.0]),
            **mf.COMMON_TOKENS,
        ),
        save_dtype=torch.float32,
        max_shard_size=None,
        np_forward=np_forward_phi3,
        description="Phi-3, fused qkv_proj and gate_up_proj, GQA 2q/1kv, head_dim 24, partial rotary 0.75 (18 dims), "
                    "longrope (short factors, attention factor from max/original positions 128/32), sliding window 6 "
                    "on every layer, untied, fp32",
    ),
    dict(
        name="glm4_partial",
        seed=15015,
        model_cls=Glm4ForCausalLM,
        config_cls=Glm4Config,
        config=dict(
            vocab_size=128,
            hidden_size=36,
            num_hidden_layers=3,
            num_attention_heads=4,
            num_key_value_heads=2,
            head_dim=12,  # != hidden / heads (9); 6 rotary dims, interleaved pairs
            intermediate_size=44,
            hidden_act="silu",
            max_position_embeddings=128,
            initializer_range=mf.INIT_RANGE,
            rms_norm_eps=1e-5,
            tie_word_embeddings=False,
            attention_bias=True,
            rope_parameters=dict(rope_type="default", rope_theta=10000.0, partial_rotary_factor=0.5),
            **mf.COMMON_TOKENS,
        ),
        save_dtype=torch.float32,
        max_shard_size=None,
        np_forward=np_forward_glm4,
        description="GLM-4, four norms per layer, partial rotary 0.5 in GLM's interleaved layout, fused gate_up_proj, "
                    "q/k/v biases, GQA 4q/2kv, head_dim 12 (hidden 36), untied, fp32",
    ),
]


# --------------------------------------------------------------------------
# YaRN against transformers' rope functions
# --------------------------------------------------------------------------

YARN_CONFIGS = [
    # Qwen2.5 / Qwen3 long context (the published recipe: factor 4 over 32768)
    dict(head_dim=128, max_position_embeddings=131072,
         rope_parameters=dict(rope_type="yarn", rope_theta=1000000.0, factor=4.0,
                              original_max_position_embeddings=32768)),
    dict(head_dim=64, max_position_embeddings=32768,
         rope_parameters=dict(rope_type="yarn", rope_theta=10000.0, factor=8.0,
                              original_max_position_embeddings=4096)),
    # gpt-oss style: no truncation
    dict(head_dim=64, max_position_embeddings=131072,
         rope_parameters=dict(rope_type="yarn", rope_theta=150000.0, factor=32.0, beta_fast=32.0, beta_slow=1.0,
                              truncate=False, original_max_position_embeddings=4096)),
    # DeepSeek style: mscale / mscale_all_dim
    dict(head_dim=64, max_position_embeddings=163840,
         rope_parameters=dict(rope_type="yarn", rope_theta=10000.0, factor=40.0, beta_fast=32, beta_slow=1,
                              mscale=1.0, mscale_all_dim=0.707, original_max_position_embeddings=4096)),
    # explicit attention_factor, partial rotary, other betas
    dict(head_dim=80, max_position_embeddings=16384,
         rope_parameters=dict(rope_type="yarn", rope_theta=500000.0, factor=2.0, attention_factor=1.25,
                              beta_fast=16.0, beta_slow=2.0, partial_rotary_factor=0.5,
                              original_max_position_embeddings=8192)),
    # the qwen3_yarn fixture's
    dict(head_dim=18, max_position_embeddings=128,
         rope_parameters=dict(rope_type="yarn", rope_theta=10000.0, factor=4.0,
                              original_max_position_embeddings=32)),
]
YARN_POSITIONS = [0, 1, 2, 7, 31, 100, 1023, 4095, 4096, 32767, 100000]


def make_rope_yarn(out_root):
    d = os.path.join(out_root, "rope_yarn")
    os.makedirs(d, exist_ok=True)
    tensors, configs = {}, []
    pos = torch.tensor([YARN_POSITIONS], dtype=torch.long)
    for i, extra in enumerate(YARN_CONFIGS):
        kw = dict(vocab_size=64, hidden_size=64, num_hidden_layers=1, num_attention_heads=4,
                  num_key_value_heads=4, intermediate_size=64)
        kw.update(extra)
        cfg = LlamaConfig(**kw)
        inv, att = ROPE_INIT_FUNCTIONS["yarn"](cfg)
        rot = LlamaRotaryEmbedding(cfg)
        assert torch.equal(rot.inv_freq, inv) and rot.attention_scaling == att
        tensors[f"c{i}.inv_freq"] = inv.to(torch.float32).contiguous()
        # the line of _compute_yarn_parameters that everything else derives from (torch's fp32 pow)
        rp = cfg.rope_parameters
        dim = int(cfg.head_dim * rp.get("partial_rotary_factor", 1.0))
        tensors[f"c{i}.pos_freqs"] = (rp["rope_theta"] ** (torch.arange(0, dim, 2).to(dtype=torch.float) / dim)).contiguous()
        tensors[f"c{i}.attention_factor"] = torch.tensor([att], dtype=torch.float64)
        # the module's forward before the attention factor (LlamaRotaryEmbedding.forward's first lines)
        freqs = pos[..., None].float() * rot.inv_freq.to(dtype=torch.float)
        emb = torch.cat((freqs, freqs), dim=-1)
        tensors[f"c{i}.cos_raw"] = emb.cos()[0].contiguous()
        tensors[f"c{i}.sin_raw"] = emb.sin()[0].contiguous()
        for dt, nm in ((torch.float32, "f32"), (torch.bfloat16, "bf16")):
            cos, sin = rot(torch.zeros(1, dtype=dt), pos)
            tensors[f"c{i}.cos_{nm}"] = cos[0].to(torch.float32).contiguous()
            tensors[f"c{i}.sin_{nm}"] = sin[0].to(torch.float32).contiguous()
        configs.append(json.loads(cfg.to_json_string(use_diff=False)))
        with open(os.path.join(d, f"c{i}.json"), "w") as f:
            f.write(cfg.to_json_string(use_diff=False))
    tensors["positions"] = torch.tensor(YARN_POSITIONS, dtype=torch.int32)
    v = mf.versions()
    meta = dict(configs=json.dumps(configs), n_configs=str(len(configs)), torch_version=v["torch"],
                transformers_version=v["transformers"],
                description="c<i>.inv_freq: transformers.modeling_rope_utils.ROPE_INIT_FUNCTIONS['yarn'](config)[0] "
                            "(fp32); c<i>.pos_freqs: its pos_freqs line (base ** (arange(0, dim, 2).float() / dim), fp32); "
                            "c<i>.attention_factor: its [1] (a Python float, stored as fp64); "
                            "c<i>.cos_raw / sin_raw: emb.cos() / emb.sin() of LlamaRotaryEmbedding.forward (fp32, before the "
                            "attention factor); c<i>.cos_<dt> / sin_<dt>: LlamaRotaryEmbedding(config)(x of dtype dt, positions) "
                            "[len(positions), head_dim*partial] as fp32 values; configs: LlamaConfig.to_json_string("
                            "use_diff=False) of each, in order (also c<i>.json beside this file)")
    save_safetensors_canonical(tensors, os.path.join(d, "rope_yarn.safetensors"), meta)
    return len(configs)


# --------------------------------------------------------------------------
# Gemma's ops against PyTorch (op level)
# --------------------------------------------------------------------------

GEMMA_OP_DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}
GEMMA_CAPS = [30.0, 50.0, 1.5, 7.3]  # Gemma 2's final / attention caps, the fixture's, one not a dtype value
GEMMA_EMBED_HIDDEN = [48, 3072]  # a small width, and one whose sqrt rounds far in bf16 (55.4256 -> 55.5)


def make_gemma_ops(out_root):
    """data/fixtures/ops_gemma/gemma_ops.safetensors: for fp32, bf16 and fp16, the soft-capping line of
    Gemma2ForCausalLM (logits / cap; tanh; * cap) and of eager_attention_forward (the same three ops),
    Gemma2TextScaledWordEmbedding's forward (embed * embed_scale.to(dtype)) at several widths, and
    Gemma2RMSNorm / Gemma3RMSNorm's forward with its fp32 intermediate (the normalised x before the
    (1 + w) multiply)."""
    from transformers.models.gemma2.modeling_gemma2 import Gemma2RMSNorm, Gemma2TextScaledWordEmbedding
    from transformers.models.gemma3.modeling_gemma3 import Gemma3RMSNorm

    d = os.path.join(out_root, "ops_gemma")
    os.makedirs(d, exist_ok=True)
    g = torch.Generator().manual_seed(15015)
    t = {}
    for nm, dt in GEMMA_OP_DTYPES.items():
        x = (torch.randn(1024, generator=g) * 25.0).to(dt)
        t[f"softcap.{nm}.x"] = x.float()
        for i, cap in enumerate(GEMMA_CAPS):
            y = x / cap  # Gemma2ForCausalLM.forward's lines, in the tensor's dtype
            y = torch.tanh(y)
            y = y * cap
            t[f"softcap.{nm}.out{i}"] = y.float()
        for H in GEMMA_EMBED_HIDDEN:
            emb = Gemma2TextScaledWordEmbedding(2, H, None, embed_scale=H ** 0.5)
            with torch.no_grad():
                emb.weight.copy_(torch.randn(2, H, generator=g) * 0.1)
            emb = emb.to(dt)
            ids = torch.tensor([[1, 0, 1]])
            with torch.no_grad():
                out = emb(ids)[0]
            t[f"embed.{nm}.h{H}.table"] = emb.weight.detach().float().contiguous()
            t[f"embed.{nm}.h{H}.out"] = out.float().contiguous()
            t[f"embed.{nm}.h{H}.scale"] = emb.embed_scale.to(dt).float().reshape(1)
        for cls in (Gemma2RMSNorm, Gemma3RMSNorm):
            H = 40
            norm = cls(H, eps=1e-6)
            with torch.no_grad():
                norm.weight.copy_(torch.randn(H, generator=g) * 0.5)
            norm = norm.to(dt)
            xn = (torch.randn(9, H, generator=g) * 3.0).to(dt)
            with torch.no_grad():
                out = norm(xn)
                normed = norm._norm(xn.float())  # the fp32 intermediate of forward
            c = cls.__name__
            t[f"{c}.{nm}.x"] = xn.float().contiguous()
            t[f"{c}.{nm}.w"] = norm.weight.detach().float().contiguous()
            t[f"{c}.{nm}.normed"] = normed.contiguous()
            t[f"{c}.{nm}.out"] = out.float().contiguous()
    t["softcap.caps"] = torch.tensor(GEMMA_CAPS, dtype=torch.float64)
    t["embed.hidden"] = torch.tensor(GEMMA_EMBED_HIDDEN, dtype=torch.int32)
    t["embed.ids"] = torch.tensor([1, 0, 1], dtype=torch.int32)
    v = mf.versions()
    meta = dict(torch_version=v["torch"], transformers_version=v["transformers"],
                description=make_gemma_ops.__doc__.replace("\n", " "))
    save_safetensors_canonical(t, os.path.join(d, "gemma_ops.safetensors"), meta)


def write_readme(out_root, summaries, n_yarn, dtype_rows):
    L = ["# Fixtures of the later families and of YaRN RoPE", "",
         "Written by `tools/make_family_fixtures.py` (do not edit by hand); the folders are listed with",
         "checksums in `SHA256SUMS-families`. Each family folder is built by `tools/make_fixtures.py`'s",
         "`build_fixture` (see `README.md` here for the scheme: HF's own class, `save_pretrained`,",
         "fp32 and true-fp64 references, greedy margins, the numpy fp64 cross-check); the numpy forward",
         "of each family is in `tools/make_family_fixtures.py`.", "",
         "```sh",
         "pip install -r tools/requirements-fixtures.txt",
         "python3 tools/make_family_fixtures.py",
         "(cd data/fixtures && sha256sum -c SHA256SUMS-families)",
         "```", "",
         "Versions: " + ", ".join(f"{k} {v}" for k, v in mf.versions().items()), "",
         "| fixture | description | params | min greedy margin (fp64) | max HF fp32 vs fp64 | numpy vs fp64 |",
         "|---|---|---|---|---|---|"]
    for s in summaries:
        L.append(f"| `{s['name']}` | {s['description']} | {s['n_params']} | {s['min_margin']:.3g} | "
                 f"{s['fwd_diff_32_64']:.3g} | {s['np_err']:.3g} |")
    L += ["", "`dtype/<name>_<bf16|fp16>_v5.24.safetensors`: HF's half-precision full forward of the same",
          "sequences (`tools/make_dtype_fixtures.py`'s `make_v524`: `from_pretrained(path, dtype=...)`, eager",
          "attention, `log_softmax(logits.float())`), distance to the fp32 and fp64 references (mean / max |dlogp|):", "",
          "| file | vs fp32 mean | vs fp32 max | vs fp64 mean | argmax flips vs fp32 |", "|---|---|---|---|---|"]
    for r in dtype_rows:
        L.append(f"| `{r['model']}_{r['dtype']}_v5.24` | {r['vs_f32']['mean']:.3g} | {r['vs_f32']['max']:.3g} | "
                 f"{r['vs_f64']['mean']:.3g} | {r['vs_f32']['argmax_diff']} of {r['vs_f32']['positions']} |")
    L += ["", f"`rope_yarn/rope_yarn.safetensors`: {n_yarn} YaRN configurations (`rope_yarn/c<i>.json`: each",
          "`LlamaConfig` as transformers writes it): transformers' `_compute_yarn_parameters` inv_freq and attention factor, and",
          "`LlamaRotaryEmbedding`'s cos / sin in fp32 and bf16 at positions " +
          ", ".join(map(str, YARN_POSITIONS)) + ".", "",
          "`ops_gemma/gemma_ops.safetensors`: " + " ".join(make_gemma_ops.__doc__.split()[1:]), ""]
    with open(os.path.join(out_root, "README-families.md"), "w") as f:
        f.write("\n".join(L))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=mf.DEFAULT_OUT)
    ap.add_argument("--only", action="append", help="only this family fixture (repeatable); no README/SHA256SUMS")
    ap.add_argument("--no-dtype", action="store_true", help="skip the bf16 / fp16 references")
    args = ap.parse_args()
    mf.set_determinism()
    specs = [s for s in FAMILY_FIXTURES if not args.only or s["name"] in args.only]
    summaries = []
    for spec in specs:
        s = mf.build_fixture(spec, args.out)
        summaries.append(s)
        print(f"{s['name']:16s} params={s['n_params']} min_margin={s['min_margin']:.4g} np={s['np_err']:.3g} "
              f"f32vs64={s['fwd_diff_32_64']:.3g}", flush=True)
    n_yarn = make_rope_yarn(args.out)
    make_gemma_ops(args.out)
    dtype_rows = []
    if not args.no_dtype:
        import make_dtype_fixtures as mdf

        mdf.V524_ONLY = [s["name"] for s in specs]
        mdf.FIXTURES = args.out
        mdf.setup_torch()
        _, dtype_rows = mdf.make_v524(os.path.join(args.out, "dtype"), mdf.env_versions())
    if not args.only:
        write_readme(args.out, summaries, n_yarn, dtype_rows)
        mf.write_sums(args.out, dirs=[s["name"] for s in FAMILY_FIXTURES] + ["rope_yarn", "ops_gemma"],
                      sums_name="SHA256SUMS-families")


if __name__ == "__main__":
    main()
