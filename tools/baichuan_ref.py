#!/usr/bin/env python3
"""PyTorch reference implementation of the Baichuan family (Baichuan-7B, Baichuan-13B,
Baichuan2-7B, Baichuan2-13B) for ratiocheck's fixtures.

transformers has no Baichuan class: the published checkpoints ship their own
``modeling_baichuan.py`` / ``configuration_baichuan.py`` (``trust_remote_code``).  This module
re-implements, written from scratch, what those files compute in their inference (``eval()``)
path -- the training-only xformers branches are not reproduced -- op by op in the same order and
dtypes, and wraps it in transformers 5.x classes (``save_pretrained`` / ``from_pretrained`` /
``generate`` with ``DynamicCache``):

    from baichuan_ref import BaichuanConfig, BaichuanForCausalLM
    model = BaichuanForCausalLM(BaichuanConfig(**cfg_dict, attn_implementation="eager"))

``python3 tools/baichuan_ref.py`` runs the self-test (CPU, a few seconds).

Upstream files followed
=======================
The Hub repositories are not in the source index used to write this; these copies were read:

* Baichuan-7B (``baichuan-inc/Baichuan-7B``): ``models/modeling_baichuan.py`` and
  ``models/configuration_baichuan.py`` of github.com/baichuan-inc/Baichuan-7B at commit
  5a3991504e33a5de7280bb8b20d4512e8c5b2ef4 (2023-06-19, "Update modeling_baichuan.py"), whose
  inference branch is the Hub file's: optimum-intel's model patcher quotes the Hub file at
  revision 262c8cb58b6d3615c208d9230baa869fddee2adb (``Attention.forward``, L181) with the same
  RoPE in the model dtype and ``softmax(..., dtype=torch.float32).to(query_states.dtype)``;
  ipex-llm cites Hub revision c1a5c7d5b7f50ecc51bb0e08150a9f12e5656756.  (The GitHub repo's
  initial commit 43b2ca19 still had ``softmax(attn_weights, dim=-1)`` without the fp32 upcast.)
* Baichuan-13B (``baichuan-inc/Baichuan-13B-Base``): Baichuan-13B-Chat's ``modeling_baichuan.py``
  vendored in github.com/tingshua-yts/Baichuan-13B ``model/modeling_baichuan.py`` (commit
  24011150ea4b31d3b9440caf87f0ce8e2441d0a4, 2023-08-09; only an import path and comments
  changed), with ``config/config.json`` and ``config/pytorch_model.bin.index.json`` of the Hub
  repo; the configuration class as vendored by vLLM (``transformers_utils/configs/baichuan_13b.py``).
  It is the version with batch-padding support; ipex-llm cites Baichuan-13B-Chat revision
  a4a558127068f2ce965aa56aeb826bf501a68970 for this code.  (Assumed, not checked: the Base repo
  ships the same modelling code as the Chat repo; likewise for Baichuan2-13B.)
* Baichuan2-13B (``baichuan-inc/Baichuan2-13B-Base``): github.com/jrd77/Baichuan2-13B-Chat is a
  git mirror of the Hub repo ``baichuan-inc/Baichuan2-13B-Chat`` (same commit hashes); followed:
  ``modeling_baichuan.py``, ``configuration_baichuan.py``, ``config.json`` and
  ``pytorch_model.bin.index.json`` at c6f8592a60b4ad73c210b28dd2ab3cca51abbf93 (2023-09-12, "fix
  NormHead eval", the revision ipex-llm cites).
* Baichuan2-7B (``baichuan-inc/Baichuan2-7B-Base``): the Hub files as vendored in
  github.com/mlpod/Baichuan2-CPU-DEBUG ``model/`` (commit e4a6ea74600b71c0bcd4f0e982b36dea541a5a3e,
  2023-10-24: ``modeling_baichuan.py`` with the xformers import commented out and the SDPA call
  made unconditional, ``configuration_baichuan.py``, ``config.json`` with the sizes shrunk) and,
  unmodified apart from comments, in the source-index file id 11964670224 ("Baichuan2-7B
  explained").  ipex-llm cites Hub revision cb7fc748b78b7ea99772e4cf76db155729ce774e; vLLM cites
  Baichuan2-7B-Chat revision 84603cde5ebffb6084e476cfaeceaf0b8b91fe54 for ``NormHead``.

Verified, not shipped: those four upstream files, run locally (torch 2.15, transformers 5.24)
with this module's weights, give logits BITWISE equal to this module's in fp32, bf16, fp16 and
fp64 (plain ``.double()``), without and with left padding, for prefill and 5 cached decode steps,
with 40 heads and with head_dim 128 -- Baichuan2-7B with SDPA forced to ``SDPBackend.MATH``.  The
one exception is listed under "Details" (Baichuan-7B past ``max_position_embeddings``).
Re-runnable: ``python3 tools/baichuan_ref.py --upstream`` (tools/baichuan_upstream_check.py) fetches
the four copies above at their commits (sha256-pinned, not committed) and runs them on the
fixtures' weights (fp32 forward): log-probs bit-identical to the fixtures' references.

Which variant a config means (the rule ratiocheck's C loader uses too)
====================================================================
The code a Hub folder runs is chosen by its ``auto_map``; a loader reading ``config.json`` has to
infer it.  The published files (13B columns: the Chat repos' config.json, assumed equal for the
Base repos; Baichuan-7B: its configuration class, its config.json was not seen):

================= ======================= ======================= ======================= =======================
key               Baichuan-7B             Baichuan-13B            Baichuan2-7B            Baichuan2-13B
================= ======================= ======================= ======================= =======================
architectures     ["BaiChuanForCausalLM"] ["BaichuanForCausalLM"] ["BaichuanForCausalLM"] ["BaichuanForCausalLM"]
auto_map config   ...BaiChuanConfig       ...BaichuanConfig       ...BaichuanConfig       ...BaichuanConfig
max_position_emb. 4096                    --                      4096                    --
model_max_length  --                      4096                    4096                    4096
vocab_size        64000                   64000                   125696                  125696
z_loss_weight     --                      --                      -- (class default 0)    -- (class default 0)
other             --                      _from_model_config      tokenizer_class,        tokenizer_class,
                                                                  _from_model_config      _from_model_config,
                                                                                          gradient_checkpointing false
sizes             4096/32 heads/32 layers 5120/40/40              4096/32/32              5120/40/40
================= ======================= ======================= ======================= =======================

All four: ``hidden_act "silu"``, ``initializer_range 0.02``, ``rms_norm_eps 1e-06``,
``pad/bos/eos 0/1/2``, ``tie_word_embeddings false``, ``model_type "baichuan"``,
``use_cache true``; intermediate 11008 (7B) / 13696 (13B).  Evidence: Baichuan-13B-Chat's
config.json (``"architectures": ["BaichuanForCausalLM"]``, ``"model_max_length": 4096``,
``"vocab_size": 64000``, no ``max_position_embeddings``); Baichuan2-13B-Chat's config.json at
c6f8592a (``"model_max_length": 4096``, ``"gradient_checkpointing": false``,
``"tokenizer_class": "BaichuanTokenizer"``, ``"vocab_size": 125696``, no
``max_position_embeddings``, no ``z_loss_weight``); Baichuan2-7B's config.json
(``"max_position_embeddings": 4096``, ``"model_max_length": 4096``, ``"vocab_size": 125696``, no
``z_loss_weight``); Baichuan-7B's ``BaiChuanConfig(vocab_size=64000, ...,
max_position_embeddings=4096, ...)`` and class ``BaiChuanForCausalLM`` (vLLM's registry
``"BaiChuanForCausalLM": ... # baichuan-7b``; lmdeploy's ``'AutoConfig':
'configuration_baichuan.BaiChuanConfig'``).  The Baichuan2 configuration classes (not the gen-1
ones) have ``z_loss_weight=0``, so a Baichuan2 config re-saved by transformers carries it.  The
code reads ``config.max_position_embeddings`` only in the RoPE files (``Attention.__init__``) and
``config.model_max_length`` in the ALiBi files (``self.max_cache_pos = config.model_max_length``).
vLLM decides RoPE vs ALiBi for ``BaichuanForCausalLM`` by ``config.hidden_size == 4096`` and
NormHead by ``config.vocab_size == 125696``.

The rule (``detect_variant(config_dict)``), which uses no sizes:

1. RoPE iff ``architectures[0] == "BaiChuanForCausalLM"`` (capital C: only Baichuan-7B's class)
   or the key ``max_position_embeddings`` is present; otherwise ALiBi (``"BaichuanForCausalLM"``
   or no ``architectures``, and no ``max_position_embeddings``).
2. NormHead: if the key ``norm_head`` is present its boolean decides; otherwise NormHead iff
   ``vocab_size == 125696`` or the key ``z_loss_weight`` is present.
3. ``BaiChuanForCausalLM`` -> Baichuan-7B (must be no NormHead); ``BaichuanForCausalLM`` + RoPE ->
   Baichuan2-7B (must be NormHead); ``BaichuanForCausalLM`` + ALiBi -> Baichuan2-13B with NormHead,
   Baichuan-13B without.  The two combinations no published folder has are refused.

What no published key decides reliably: Baichuan-13B vs Baichuan2-13B (and Baichuan2-7B's NormHead
in general).  Their published config.json files differ only by ``vocab_size`` (and the cosmetic
``tokenizer_class`` / ``gradient_checkpointing``); the vocabulary is the tokenizer's, not the
code's (a Baichuan2 fine-tune with an extended vocabulary would lose its NormHead under rule 2),
and tiny test models have other vocab sizes.  Smallest explicit key proposed: ``"norm_head":
true|false`` in config.json, overriding rule 2 (this module stores and writes it only when given;
``z_loss_weight`` also works as a marker for re-saved Baichuan2 configs).

Numerics (every rounding point, with the upstream line it follows)
=================================================================
"model dtype" = dtype of the parameters (= of ``inputs_embeds``).  Every torch op rounds its result
to its output dtype (bf16/fp16 elementwise ops compute in fp32 and round once per op), so e.g.
``q*cos + rotate_half(q)*sin`` in bf16 is ``bf16(bf16(q*cos) + bf16(rot*sin))``.

All variants
  * QKV: ``proj = self.W_pack(hidden_states)``; ``proj.unflatten(-1, (3, self.hidden_size))`` ->
    q = rows 0..H-1 of ``W_pack.weight``, k = rows H..2H-1, v = rows 2H..3H-1; head h is the
    contiguous slice ``[h*head_dim, (h+1)*head_dim)`` of each (``view(bsz, q_len, num_heads,
    head_dim).transpose(1, 2)``).  No biases anywhere.
  * RMSNorm (same in all four files): ``variance = hidden_states.to(torch.float32).pow(2).mean(-1,
    keepdim=True)``; ``hidden_states = hidden_states * torch.rsqrt(variance + eps)`` (model-dtype
    tensor times fp32 tensor -> fp32); ``if self.weight.dtype in [torch.float16, torch.bfloat16]:
    hidden_states = hidden_states.to(self.weight.dtype)``; ``return self.weight * hidden_states``.
    bf16/fp16: x/rms rounded to the model dtype, then the weight product rounded again; fp32: one
    rounding; fp64 model (``.double()``): variance and rsqrt in fp32 (removed by enable_true_fp64).
    eps = ``rms_norm_eps`` (1e-6).
  * MLP: ``down_proj(act_fn(gate_proj(x)) * up_proj(x))``, silu, model dtype.  Residual adds in
    the model dtype; final ``model.norm``; embedding lookup (padding_idx only affects init).

Baichuan-7B (RoPE, generation 1, plain head)
  * ``inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2).float().to(device) / dim))`` (fp32, base
    10000, dim = head_dim); ``t = torch.arange(max_seq_len_cached, dtype=self.inv_freq.dtype)``;
    ``freqs = torch.einsum("i,j->ij", t, self.inv_freq)``; ``emb = torch.cat((freqs, freqs),
    dim=-1)``; ``cos_cached = emb.cos()``, ``sin_cached = emb.sin()`` -- fp32, on the CPU, for
    ``max_position_embeddings`` rows; ``forward`` returns ``self.cos_cached[:, :, :seq_len,
    ...].to(dtype=x.dtype)``: cos/sin ROUNDED TO THE MODEL DTYPE.
  * ``q_embed = (q * cos) + (rotate_half(q) * sin)`` in the model dtype; ``rotate_half(x) =
    torch.cat((-x2, x1), dim=-1)`` with x1/x2 the first/second half (NeoX half split, not
    interleaved); ``cos[position_ids]`` (generate: ``attention_mask.cumsum(-1) - 1``; forward
    default ``arange(past, past + q_len)``).
  * Mask (BART-style ``_make_causal_mask`` + ``_expand_mask``): causal part ``torch.full((q, q),
    torch.tensor(torch.finfo(dtype).min))`` -- a float32 fill value, so ``-inf`` for an fp64 model
    -- zeroed on/below the diagonal, ``.to(dtype)``, zeros prepended for the cached positions;
    padding part ``inverted = 1.0 - mask`` filled with ``torch.finfo(dtype).min``; the two summed
    (``finfo.min + finfo.min`` overflows to ``-inf``); only the padding part when q_len == 1.
  * ``attn_weights = torch.matmul(query_states, key_states.transpose(2, 3)) / math.sqrt(self.head_dim)``
    (true division by a Python float, model dtype); ``attn_weights = attn_weights +
    attention_mask``; ``attn_weights = torch.max(attn_weights,
    torch.tensor(torch.finfo(attn_weights.dtype).min))`` (clamps -inf to finfo.min; the bound is a
    float32 0-dim tensor: ``-inf`` -- no clamp -- for fp64); ``nn.functional.softmax(attn_weights,
    dim=-1, dtype=torch.float32).to(query_states.dtype)``: softmax in FP32, probabilities ROUNDED
    to the model dtype; ``torch.matmul(attn_weights, value_states)`` in the model dtype.
  * ``lm_head = nn.Linear(hidden, vocab, bias=False)``.

Baichuan2-7B (RoPE, generation 2, NormHead)
  * ``self.inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2).float().to(device) / dim))``,
    ``t = torch.arange(self.max_seq_len_cached, ..., dtype=torch.float32)``, ``freqs =
    torch.outer(t, self.inv_freq)``, ``self.cos_cached = emb.cos()[None, None, :, :].to(torch.float32)``
    -- plain attributes, not buffers: FP32 whatever the model dtype (also after ``.double()``),
    returned without a cast.
  * ``q_embed = (q.float() * cos) + (rotate_half(q.float()) * sin)``; ``return q_embed.to(q.dtype),
    k_embed.to(k.dtype)``: RoPE in FP32, one rounding to the model dtype (an fp32 round trip for an
    fp64 model).
  * Mask: the same ``_make_causal_mask`` / ``_expand_mask`` as Baichuan-7B, passed as a float mask:
    ``F.scaled_dot_product_attention(query_states, key_states, value_states,
    attn_mask=attention_mask)`` (inside ``torch.backends.cuda.sdp_kernel(enable_flash=True,
    enable_math=True, enable_mem_efficient=True)``): no ``torch.max`` clamp, default scale.  SDPA
    picks a fused kernel at run time (CPU flash / CUDA memory-efficient: online softmax, different
    roundings); this reference is SDPA's MATH backend, bitwise (``sdpa_math``): bf16/fp16 q, k, v
    and mask upcast to FP32; ``q * s`` and ``k * s`` with ``s = sqrt(1/sqrt(head_dim))`` (Python
    double); scores = (q s)(k s)^T + mask; softmax fp32; @ v in fp32; ONE rounding of the output to
    the model dtype.  fp32/fp64 inputs: the same in their own dtype.
  * ``NormHead``: ``norm_weight = nn.functional.normalize(self.weight)``; ``return
    nn.functional.linear(hidden_states, norm_weight)``.  ``F.normalize`` = ``w /
    w.norm(2, dim=1, keepdim=True).clamp_min(1e-12)`` in the WEIGHT dtype (bf16 weights: the row
    norm is accumulated in fp32 and rounded to bf16, then each quotient rounded to bf16).  eps =
    1e-12 (F.normalize's default).  Upstream in ``eval()``: the first forward replaces the weight
    by its normalised copy (``elif self.first_flag: self.first_flag = False; self.weight.data =
    nn.functional.normalize(self.weight)``) and later forwards reuse it; ``train()`` normalises
    every call.  Same values; this reference normalises on every forward and never mutates the
    stored weight (``save_pretrained`` writes the raw rows, as the published checkpoints hold them).

Baichuan-13B and Baichuan2-13B (ALiBi, no position ids)
  * Slopes ``_get_interleave(n)`` in Python doubles: n a power of two: ``start = 2 ** (-(2 **
    -(math.log2(n) - 3)))`` (= 2**(-8/n)), ``ratio = start``, ``[start * ratio**i for i in
    range(n)]``; otherwise, p = 2**floor(log2 n): ``_get_interleave_power_of_2(p) +
    _get_interleave(2 * p)[0::2][: n - p]``.  40 heads: 2**(-(i+1)/4), i = 0..31, then
    2**(-(2k+1)/8), k = 0..7 (fp32-rounded values equal those of the exact powers).
    ``torch.Tensor(_get_interleave(n_head))`` rounds them to FP32.
  * The bias depends on the KEY position only: ``alibi[h, 0, j] = slope_h * j`` (fp32 slope times
    the int64 ``arange``, product rounded to fp32; j = 0-based absolute position in the cache), NOT
    ``slope * (j - i)``: it differs from the usual form by ``slope * i``, constant along a softmax
    row, so equivalent in exact arithmetic but not in bf16.  Baichuan-13B: ``alibi =
    slopes.unsqueeze(1).unsqueeze(1) * torch.arange(max_pos).unsqueeze(0).unsqueeze(0).expand(n_head,
    -1, -1)``; Baichuan2-13B: ``position_point = torch.arange(max_pos) - max_pos + 1`` minus
    ``torch.diag(position_point[0])`` (= -(max_pos-1)), i.e. the same ``arange(max_pos)``.
  * ``alibi_mask = torch.triu(_fill_with_neg_inf(torch.zeros([max_pos, max_pos])), 1)`` (fp32 -inf
    above the diagonal, 0 elsewhere) ``.unsqueeze(0) + alibi`` -> fp32 [H, max_pos, max_pos]
    (slope*j on/below the diagonal, -inf above); ``register_buffer("future_mask",
    _gen_alibi_mask(...).to(tensor))``: ROUNDED TO THE MODEL DTYPE; sliced ``[:n_head,
    :seq_length_with_past, :seq_length_with_past]``.  max_pos = ``model_max_length``; the values do
    not depend on it (this reference builds L x L, L = past + q_len).
  * 2-D ``attention_mask`` m: ``expanded_mask = attention_mask.to(alibi_mask.dtype)``;
    ``torch.tril(torch.gt(m[:, :, None] * m[:, None, :], 0)) * torch.eq(m[:, :, None] -
    m[:, None, :], 0)``; ``.to(alibi_mask.dtype)``; ``inverted_mask = 1.0 - expanded_mask``;
    ``inverted_mask.masked_fill(inverted_mask.to(torch.bool), torch.finfo(alibi_mask.dtype).min)``;
    ``attention_mask = inverted_mask + alibi_mask.unsqueeze(0)`` -- added in the model dtype
    (allowed: 0 + slope*j exactly; masked: finfo.min + slope*j, or -inf above the diagonal).
    Without a mask (generate drops an all-ones one): ``attention_mask = alibi_mask``.
  * ``attn_weights = torch.matmul(query_states, key_states.transpose(2, 3)) /
    math.sqrt(self.head_dim)`` (model dtype); ``if q_len == 1: attention_mask =
    attention_mask[:, :, -1:, :]`` (last row); ``attn_weights = attn_weights + attention_mask``
    (bias added AFTER the 1/sqrt(d) scaling, in the model dtype);
    ``attn_weights = torch.max(attn_weights, torch.tensor(torch.finfo(attn_weights.dtype).min))``;
    ``torch.nn.functional.softmax(attn_weights, dim=-1)``: softmax in the MODEL dtype;
    ``torch.matmul(attn_weights, value_states)``.
  * Head: Baichuan-13B ``torch.nn.Linear``; Baichuan2-13B ``NormHead`` as above.

Details
  * Attention is always the explicit math above (no SDPA / xformers / flash call), whatever
    ``attn_implementation`` says (``"eager"`` is what the fixtures use).
  * Multi-token steps on a non-empty cache (upstream handles only q_len == 1 with a cache) use the
    last q_len rows of the mask/bias, which is what upstream computes in the cases it handles.
  * Past ``max_position_embeddings``, Baichuan-7B rebuilds its rotary table from the
    ``inv_freq`` *buffer* (``t = torch.arange(..., dtype=self.inv_freq.dtype)``), which is in the
    model dtype after a ``.to(dtype)`` / ``.double()`` cast; this reference keeps fp32 there (as a
    model loaded with ``from_pretrained(torch_dtype=...)`` has).  Fixtures should stay within
    ``max_position_embeddings``.
  * Baichuan-7B upstream after a plain ``.double()`` gives NaN for every position of a
    left-padded row: ``finfo(float64).min`` becomes -inf in the fp32 softmax, fully masked padded
    query rows turn NaN and reach later layers as 0 * NaN.  Reproduced here; not with
    ``enable_true_fp64``.
  * Published Baichuan-7B checkpoints may hold ``model.layers.*.self_attn.rotary_emb.inv_freq``
    (a persistent buffer upstream); ignored on load, never written.

``enable_true_fp64()``, on a model already converted with ``.double()``, switches every internal
computation to float64 by the same formulas: RMSNorm without the fp32 cast, rotary inv_freq / t /
cos / sin in fp64 and applied in fp64 (both generations), ALiBi slopes from the Python doubles
(not their fp32 rounding) and ``slope * j`` / triu mask in fp64, mask fill values and the
``torch.max`` bound as fp64 ``finfo(float64).min``, the Baichuan-7B softmax in fp64 (the others
already run in the model dtype), NormHead's ``F.normalize`` in fp64 (as after ``.double()``).
"""

import math
import os
import sys

import torch
import torch.nn.functional as F
from torch import nn
from transformers import DynamicCache, GenerationMixin, PretrainedConfig, PreTrainedModel
from transformers import initialization as init
from transformers.activations import ACT2FN
from transformers.modeling_outputs import BaseModelOutputWithPast, CausalLMOutputWithPast

# ----------------------------------------------------------------------------------------
# Variants and the config rule
# ----------------------------------------------------------------------------------------

ARCH_GEN1_7B = "BaiChuanForCausalLM"  # Baichuan-7B's class name (capital C)
ARCH_BAICHUAN = "BaichuanForCausalLM"  # Baichuan-13B, Baichuan2-7B, Baichuan2-13B
BAICHUAN2_VOCAB_SIZE = 125696

VARIANTS = {
    # name: (position encoding, NormHead, generation, architectures[0] written by save_pretrained)
    "baichuan-7b": ("rope", False, 1, ARCH_GEN1_7B),
    "baichuan-13b": ("alibi", False, 1, ARCH_BAICHUAN),
    "baichuan2-7b": ("rope", True, 2, ARCH_BAICHUAN),
    "baichuan2-13b": ("alibi", True, 2, ARCH_BAICHUAN),
}


def detect_variant(cfg):
    """Variant name for a config.json dict (or a BaichuanConfig), by the rule in the module doc."""
    if not isinstance(cfg, dict):
        cfg = cfg.to_dict()
    archs = cfg.get("architectures") or [ARCH_BAICHUAN]
    arch = archs[0]
    if arch not in (ARCH_GEN1_7B, ARCH_BAICHUAN):
        raise ValueError(f"not a Baichuan architecture: {arch!r}")
    rope = arch == ARCH_GEN1_7B or "max_position_embeddings" in cfg
    if cfg.get("norm_head") is not None:
        norm_head = bool(cfg["norm_head"])
    else:
        norm_head = cfg.get("vocab_size") == BAICHUAN2_VOCAB_SIZE or "z_loss_weight" in cfg
    if arch == ARCH_GEN1_7B:
        if norm_head:
            raise ValueError("BaiChuanForCausalLM (Baichuan-7B) has no NormHead; drop norm_head/z_loss_weight")
        return "baichuan-7b"
    if rope:
        if not norm_head:
            raise ValueError(
                "BaichuanForCausalLM with max_position_embeddings is Baichuan2-7B, which has a NormHead; "
                "set \"norm_head\": true (or use architectures [\"BaiChuanForCausalLM\"] for Baichuan-7B)"
            )
        return "baichuan2-7b"
    return "baichuan2-13b" if norm_head else "baichuan-13b"


def alibi_slopes(n):
    """``_get_interleave(n)`` of the Baichuan ALiBi files, as Python doubles."""

    def power_of_two(m):
        start = 2 ** (-(2 ** -(math.log2(m) - 3)))
        ratio = start
        return [start * ratio**i for i in range(m)]

    if math.log2(n).is_integer():
        return power_of_two(n)
    p = 2 ** math.floor(math.log2(n))
    return power_of_two(p) + alibi_slopes(2 * p)[0::2][: n - p]


# ----------------------------------------------------------------------------------------
# Config
# ----------------------------------------------------------------------------------------


class BaichuanConfig(PretrainedConfig):
    """One config class for the four variants, with the published keys.

    ``max_position_embeddings``, ``model_max_length``, ``z_loss_weight``, ``gradient_checkpointing``
    and ``norm_head`` are stored (and written to config.json) only when given: their presence is
    what tells the variants apart (see ``detect_variant``).  Defaults are Baichuan-13B-Base's sizes.
    """

    model_type = "baichuan"
    keys_to_ignore_at_inference = ["past_key_values"]
    OPTIONAL_KEYS = (
        "max_position_embeddings", "model_max_length", "z_loss_weight", "gradient_checkpointing", "norm_head"
    )

    def __init__(
        self,
        vocab_size=64000,
        hidden_size=5120,
        intermediate_size=13696,
        num_hidden_layers=40,
        num_attention_heads=40,
        hidden_act="silu",
        initializer_range=0.02,
        rms_norm_eps=1e-6,
        use_cache=True,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
        tie_word_embeddings=False,
        **kwargs,
    ):
        self.vocab_size = vocab_size
        self.hidden_size = hidden_size
        self.intermediate_size = intermediate_size
        self.num_hidden_layers = num_hidden_layers
        self.num_attention_heads = num_attention_heads
        self.hidden_act = hidden_act
        self.initializer_range = initializer_range
        self.rms_norm_eps = rms_norm_eps
        self.use_cache = use_cache
        for key in self.OPTIONAL_KEYS:
            if key in kwargs:
                setattr(self, key, kwargs.pop(key))
        super().__init__(
            pad_token_id=pad_token_id,
            bos_token_id=bos_token_id,
            eos_token_id=eos_token_id,
            tie_word_embeddings=tie_word_embeddings,
            **kwargs,
        )

    @property
    def baichuan_variant(self):
        return detect_variant(self.to_dict())


# ----------------------------------------------------------------------------------------
# Modules
# ----------------------------------------------------------------------------------------


class BaichuanRMSNorm(nn.Module):
    def __init__(self, hidden_size, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps
        self.true_fp64 = False

    def forward(self, hidden_states):
        if self.true_fp64:
            variance = hidden_states.pow(2).mean(-1, keepdim=True)
            hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
            return self.weight * hidden_states
        variance = hidden_states.to(torch.float32).pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)  # -> fp32
        if self.weight.dtype in (torch.float16, torch.bfloat16):
            hidden_states = hidden_states.to(self.weight.dtype)
        return self.weight * hidden_states


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class BaichuanRotaryEmbedding(nn.Module):
    """cos/sin tables of the RoPE variants.  Upstream keeps one per layer; the values are the same,
    so one module serves all layers.  Tables are plain (non-buffer) tensors computed on the CPU in
    fp32 (fp64 after ``enable_true_fp64``), so ``.to(dtype)`` / ``.double()`` of the model never
    touch them; the generation-1 cast to the model dtype happens in ``apply``."""

    def __init__(self, head_dim, max_position_embeddings, generation, base=10000):
        super().__init__()
        self.dim = head_dim
        self.base = base
        self.max_position_embeddings = max_position_embeddings
        self.generation = generation
        self.true_fp64 = False
        self.inv_freq = self.compute_inv_freq(torch.float32)
        self._tables = {}

    def compute_inv_freq(self, dtype):
        return 1.0 / (self.base ** (torch.arange(0, self.dim, 2).to(dtype) / self.dim))

    def tables(self, seq_len, device):
        cdt = torch.float64 if self.true_fp64 else torch.float32
        n = max(self.max_position_embeddings, seq_len)  # upstream: max_seq_len_cached, grown to seq_len
        key = (cdt, n)
        if key not in self._tables:
            inv_freq = self.compute_inv_freq(cdt)
            t = torch.arange(n, dtype=cdt)
            freqs = torch.outer(t, inv_freq)  # = einsum("i,j->ij"): one product per entry
            emb = torch.cat((freqs, freqs), dim=-1)
            self._tables = {key: (emb.cos(), emb.sin())}
        cos, sin = self._tables[key]
        return cos.to(device), sin.to(device)

    def apply(self, q, k, position_ids, kv_len):
        cos, sin = self.tables(kv_len, q.device)
        if self.true_fp64:
            cos = cos[position_ids].unsqueeze(1)
            sin = sin[position_ids].unsqueeze(1)
            return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        if self.generation == 1:
            # Baichuan-7B: cos_cached[...].to(dtype=x.dtype); rotation in the model dtype
            cos = cos.to(q.dtype)[position_ids].unsqueeze(1)
            sin = sin.to(q.dtype)[position_ids].unsqueeze(1)
            return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        # Baichuan2-7B: fp32 tables, q.float()/k.float(), one rounding back
        cos = cos[position_ids].unsqueeze(1)
        sin = sin[position_ids].unsqueeze(1)
        qf, kf = q.float(), k.float()
        return (qf * cos + rotate_half(qf) * sin).to(q.dtype), (kf * cos + rotate_half(kf) * sin).to(k.dtype)


def sdpa_math(q, k, v, mask):
    """``F.scaled_dot_product_attention(q, k, v, attn_mask=mask)`` (default scale, no dropout, not
    causal) as PyTorch's MATH backend evaluates it: bf16/fp16 inputs are upcast to fp32 (q, k, v and
    the additive mask), q and k are each multiplied by ``sqrt(1/sqrt(head_dim))`` (a Python double),
    scores = q' @ k'^T + mask, softmax, @ v, and the output is rounded once to the input dtype;
    fp32/fp64 inputs are computed in their own dtype.  (The MATH backend uses ``_safe_softmax``,
    which differs from softmax only for rows that are entirely -inf, which these masks never
    produce.)  The self-test checks this bitwise against SDPBackend.MATH."""
    cdt = torch.float32 if q.dtype in (torch.float16, torch.bfloat16) else q.dtype
    sqrt_scale = math.sqrt(1.0 / math.sqrt(q.shape[-1]))
    attn = torch.matmul(q.to(cdt) * sqrt_scale, (k.to(cdt) * sqrt_scale).transpose(-2, -1))
    attn = attn + mask.to(cdt)
    attn = torch.softmax(attn, dim=-1)
    return torch.matmul(attn, v.to(cdt)).to(q.dtype)


class BaichuanMLP(nn.Module):
    def __init__(self, hidden_size, intermediate_size, hidden_act):
        super().__init__()
        self.gate_proj = nn.Linear(hidden_size, intermediate_size, bias=False)
        self.down_proj = nn.Linear(intermediate_size, hidden_size, bias=False)
        self.up_proj = nn.Linear(hidden_size, intermediate_size, bias=False)
        self.act_fn = ACT2FN[hidden_act]

    def forward(self, x):
        return self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))


class BaichuanAttention(nn.Module):
    def __init__(self, config, layer_idx, position, generation):
        super().__init__()
        self.hidden_size = config.hidden_size
        self.num_heads = config.num_attention_heads
        self.head_dim = self.hidden_size // self.num_heads
        if self.head_dim * self.num_heads != self.hidden_size:
            raise ValueError(f"hidden_size {self.hidden_size} is not divisible by num_heads {self.num_heads}")
        self.layer_idx = layer_idx
        self.position = position
        self.generation = generation
        self.true_fp64 = False
        self.W_pack = nn.Linear(self.hidden_size, 3 * self.hidden_size, bias=False)
        self.o_proj = nn.Linear(self.num_heads * self.head_dim, self.hidden_size, bias=False)

    def _min_bound(self, dtype):
        # upstream: torch.tensor(torch.finfo(attn_weights.dtype).min) -- a float32 0-dim tensor
        if self.true_fp64:
            return torch.tensor(torch.finfo(dtype).min, dtype=dtype)
        return torch.tensor(torch.finfo(dtype).min)

    def forward(self, hidden_states, mask, rope, position_ids, cache):
        bsz, q_len, _ = hidden_states.shape
        proj = self.W_pack(hidden_states).unflatten(-1, (3, self.hidden_size))
        q = proj[..., 0, :].reshape(bsz, q_len, self.num_heads, self.head_dim).transpose(1, 2)
        k = proj[..., 1, :].reshape(bsz, q_len, self.num_heads, self.head_dim).transpose(1, 2)
        v = proj[..., 2, :].reshape(bsz, q_len, self.num_heads, self.head_dim).transpose(1, 2)
        past = cache.get_seq_length(self.layer_idx) if cache is not None else 0
        kv_len = past + q_len
        if rope is not None:
            q, k = rope.apply(q, k, position_ids, kv_len)
        if cache is not None:
            k, v = cache.update(k, v, self.layer_idx)

        if self.position == "rope" and self.generation == 2:
            out = sdpa_math(q, k, v, mask)  # F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        else:
            attn = torch.matmul(q, k.transpose(2, 3)) / math.sqrt(self.head_dim)
            if self.position == "alibi":
                mask = mask[..., -q_len:, :]  # upstream (q_len == 1): attention_mask[:, :, -1:, :]
            attn = attn + mask
            attn = torch.max(attn, self._min_bound(attn.dtype))
            if self.position == "rope":  # Baichuan-7B: fp32 softmax, rounded back
                if self.true_fp64:
                    attn = F.softmax(attn, dim=-1)
                else:
                    attn = F.softmax(attn, dim=-1, dtype=torch.float32).to(q.dtype)
            else:  # ALiBi files: softmax in the model dtype
                attn = F.softmax(attn, dim=-1)
            out = torch.matmul(attn, v)
        out = out.transpose(1, 2).reshape(bsz, q_len, self.hidden_size)
        return self.o_proj(out)


class BaichuanDecoderLayer(nn.Module):
    def __init__(self, config, layer_idx, position, generation):
        super().__init__()
        self.self_attn = BaichuanAttention(config, layer_idx, position, generation)
        self.mlp = BaichuanMLP(config.hidden_size, config.intermediate_size, config.hidden_act)
        self.input_layernorm = BaichuanRMSNorm(config.hidden_size, config.rms_norm_eps)
        self.post_attention_layernorm = BaichuanRMSNorm(config.hidden_size, config.rms_norm_eps)

    def forward(self, hidden_states, mask, rope, position_ids, cache):
        residual = hidden_states
        hidden_states = self.input_layernorm(hidden_states)
        hidden_states = self.self_attn(hidden_states, mask, rope, position_ids, cache)
        hidden_states = residual + hidden_states
        residual = hidden_states
        hidden_states = self.post_attention_layernorm(hidden_states)
        hidden_states = self.mlp(hidden_states)
        return residual + hidden_states


class NormHead(nn.Module):
    """Baichuan2's LM head: ``F.linear(h, F.normalize(weight))`` (rows L2-normalised, eps 1e-12,
    in the weight dtype).  Normalised on every forward (upstream caches the normalised copy in
    eval mode; same values); the parameter itself is never modified."""

    def __init__(self, hidden_size, vocab_size):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(vocab_size, hidden_size))

    def forward(self, hidden_states):
        return F.linear(hidden_states, F.normalize(self.weight))


# ----------------------------------------------------------------------------------------
# Models
# ----------------------------------------------------------------------------------------


class BaichuanPreTrainedModel(PreTrainedModel):
    config_class = BaichuanConfig
    base_model_prefix = "model"
    supports_gradient_checkpointing = False
    _no_split_modules = ["BaichuanDecoderLayer"]
    _supports_sdpa = False
    _supports_flash_attn = False
    _supports_flex_attn = False
    _keys_to_ignore_on_load_unexpected = [r"rotary_emb\.inv_freq", r"decoder\.version"]

    def _init_weights(self, module):
        if isinstance(module, NormHead):
            init.normal_(module.weight, mean=0.0, std=self.config.initializer_range)
        else:
            super()._init_weights(module)


class BaichuanModel(BaichuanPreTrainedModel):
    def __init__(self, config):
        super().__init__(config)
        self.variant = detect_variant(config.to_dict())
        position, _, generation, _ = VARIANTS[self.variant]
        self.position = position
        self.generation = generation
        self.true_fp64 = False
        self.padding_idx = config.pad_token_id
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size, self.padding_idx)
        self.layers = nn.ModuleList(
            [BaichuanDecoderLayer(config, i, position, generation) for i in range(config.num_hidden_layers)]
        )
        self.norm = BaichuanRMSNorm(config.hidden_size, config.rms_norm_eps)
        if position == "rope":
            max_pos = getattr(config, "max_position_embeddings", None) or 4096
            head_dim = config.hidden_size // config.num_attention_heads
            self.rotary_emb = BaichuanRotaryEmbedding(head_dim, max_pos, generation)
        else:
            self.rotary_emb = None
        self.post_init()

    def get_input_embeddings(self):
        return self.embed_tokens

    def set_input_embeddings(self, value):
        self.embed_tokens = value

    # -- masks --------------------------------------------------------------------------

    def _rope_mask(self, attention_mask, bsz, q_len, past, dtype, device):
        """_make_causal_mask + _expand_mask of the RoPE files: [bsz, 1, q_len, past + q_len]."""
        kv_len = past + q_len
        if attention_mask is None:
            attention_mask = torch.ones((bsz, kv_len), dtype=torch.bool, device=device)
        if attention_mask.dim() != 2 or attention_mask.shape != (bsz, kv_len):
            raise ValueError(f"attention_mask must be [batch, past + q_len] = {(bsz, kv_len)}")
        neg = torch.finfo(dtype).min
        expanded = attention_mask[:, None, None, :].expand(bsz, 1, q_len, kv_len).to(dtype)
        inverted = 1.0 - expanded
        mask = inverted.masked_fill(inverted.to(torch.bool), neg)
        if q_len > 1:
            if self.true_fp64:
                causal = torch.full((q_len, q_len), neg, dtype=dtype, device=device)
            else:  # torch.full(..., torch.tensor(finfo(dtype).min)): a float32 fill value
                causal = torch.full((q_len, q_len), torch.tensor(neg, device=device), device=device)
            idx = torch.arange(q_len, device=device)
            causal.masked_fill_(idx < (idx + 1).view(q_len, 1), 0)
            causal = causal.to(dtype)
            if past > 0:
                causal = torch.cat([torch.zeros(q_len, past, dtype=dtype, device=device), causal], dim=-1)
            mask = mask + causal[None, None]
        return mask

    def _alibi_mask(self, attention_mask, bsz, kv_len, dtype, device):
        """future_mask of the ALiBi files, [H, L, L] (no mask) or [bsz, H, L, L] (2-D mask)."""
        H = self.config.num_attention_heads
        cdt = torch.float64 if self.true_fp64 else torch.float32
        slopes = torch.tensor(alibi_slopes(H), dtype=cdt)  # torch.Tensor(list): fp32
        alibi = slopes[:, None, None] * torch.arange(kv_len)[None, None, :]  # [H, 1, L], int64 -> cdt
        future = torch.triu(torch.full((kv_len, kv_len), float("-inf"), dtype=cdt), 1)
        alibi_mask = (future[None] + alibi).to(device=device, dtype=dtype)  # .to(tensor)
        if attention_mask is None:
            return alibi_mask
        if attention_mask.dim() != 2 or attention_mask.shape != (bsz, kv_len):
            raise ValueError(f"attention_mask must be [batch, past + q_len] = {(bsz, kv_len)}")
        m = attention_mask.to(alibi_mask.dtype)
        allowed = torch.tril(torch.gt(m[:, :, None] * m[:, None, :], 0)) * torch.eq(m[:, :, None] - m[:, None, :], 0)
        expanded = allowed.unsqueeze(1).expand(bsz, 1, kv_len, kv_len).to(alibi_mask.dtype)
        inverted = 1.0 - expanded
        inverted = inverted.masked_fill(inverted.to(torch.bool), torch.finfo(alibi_mask.dtype).min)
        return inverted + alibi_mask.unsqueeze(0)

    # -- forward ------------------------------------------------------------------------

    def forward(
        self,
        input_ids=None,
        attention_mask=None,
        position_ids=None,
        cache=None,
        inputs_embeds=None,
        use_cache=None,
        output_hidden_states=None,
        return_dict=None,
        **kwargs,
    ):
        if cache is None:
            cache = kwargs.pop("past_key_values", None)
        if (input_ids is None) == (inputs_embeds is None):
            raise ValueError("give exactly one of input_ids / inputs_embeds")
        use_cache = self.config.use_cache if use_cache is None else use_cache
        if inputs_embeds is None:
            inputs_embeds = self.embed_tokens(input_ids)
        bsz, q_len = inputs_embeds.shape[:2]
        device, dtype = inputs_embeds.device, inputs_embeds.dtype
        if use_cache and cache is None:
            cache = DynamicCache(config=self.config)
        past = cache.get_seq_length() if cache is not None else 0
        kv_len = past + q_len

        if self.position == "alibi":
            mask = self._alibi_mask(attention_mask, bsz, kv_len, dtype, device)
            position_ids = None
        else:
            mask = self._rope_mask(attention_mask, bsz, q_len, past, dtype, device)
            if position_ids is None:
                position_ids = torch.arange(past, kv_len, dtype=torch.long, device=device).unsqueeze(0)
            position_ids = position_ids.view(-1, q_len).long()

        hidden_states = inputs_embeds
        all_hidden = () if output_hidden_states else None
        for layer in self.layers:
            if output_hidden_states:
                all_hidden += (hidden_states,)
            hidden_states = layer(hidden_states, mask, self.rotary_emb, position_ids, cache)
        hidden_states = self.norm(hidden_states)
        if output_hidden_states:
            all_hidden += (hidden_states,)
        return BaseModelOutputWithPast(
            last_hidden_state=hidden_states, cache=cache if use_cache else None, hidden_states=all_hidden
        )


class BaichuanForCausalLM(BaichuanPreTrainedModel, GenerationMixin):
    _tied_weights_keys = {"lm_head.weight": "model.embed_tokens.weight"}

    def __init__(self, config):
        super().__init__(config)
        self.variant = detect_variant(config.to_dict())
        _, norm_head, _, _ = VARIANTS[self.variant]
        self.model = BaichuanModel(config)
        if norm_head:
            self.lm_head = NormHead(config.hidden_size, config.vocab_size)
        else:
            self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.post_init()

    def get_input_embeddings(self):
        return self.model.embed_tokens

    def set_input_embeddings(self, value):
        self.model.embed_tokens = value

    def get_output_embeddings(self):
        return self.lm_head

    def set_output_embeddings(self, new_embeddings):
        self.lm_head = new_embeddings

    def get_decoder(self):
        return self.model

    def forward(
        self,
        input_ids=None,
        attention_mask=None,
        position_ids=None,
        cache=None,
        inputs_embeds=None,
        labels=None,
        use_cache=None,
        output_hidden_states=None,
        return_dict=None,
        **kwargs,
    ):
        outputs = self.model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            cache=cache,
            inputs_embeds=inputs_embeds,
            use_cache=use_cache,
            output_hidden_states=output_hidden_states,
            **kwargs,
        )
        logits = self.lm_head(outputs.last_hidden_state)
        loss = None
        if labels is not None:  # upstream's loss (Baichuan2 adds z_loss_weight * mean(max logit^2))
            shift_logits = logits[..., :-1, :].reshape(-1, logits.shape[-1])
            shift_labels = labels[..., 1:].reshape(-1).to(logits.device)
            loss = F.cross_entropy(shift_logits, shift_labels)
            z = getattr(self.config, "z_loss_weight", None)
            if z is not None and VARIANTS[self.variant][2] == 2:
                loss = loss + z * (shift_logits.max(-1).values ** 2).mean()
        return CausalLMOutputWithPast(
            loss=loss, logits=logits, cache=outputs.cache, hidden_states=outputs.hidden_states
        )

    def save_pretrained(self, save_directory, *args, **kwargs):
        """As PreTrainedModel.save_pretrained, but config.json keeps the published architecture
        name of the variant (Baichuan-7B's is "BaiChuanForCausalLM")."""
        out = super().save_pretrained(save_directory, *args, **kwargs)
        self.config.architectures = [VARIANTS[self.variant][3]]
        self.config.save_pretrained(save_directory)
        return out

    def enable_true_fp64(self):
        """Make every internal computation float64 (model must already be ``.double()``)."""
        bad = [n for n, p in self.named_parameters() if p.dtype != torch.float64]
        if bad:
            raise ValueError(f"enable_true_fp64 needs a .double() model; not fp64: {bad[:3]}")
        n_rms = n_attn = 0
        for m in self.modules():
            if hasattr(m, "true_fp64"):
                m.true_fp64 = True
                n_rms += isinstance(m, BaichuanRMSNorm)
                n_attn += isinstance(m, BaichuanAttention)
            if isinstance(m, BaichuanRotaryEmbedding):
                m._tables = {}
        return dict(
            baichuan_variant=self.variant,
            rms_true_fp64=n_rms,
            attention_true_fp64=n_attn,
            rope_true_fp64=self.model.rotary_emb is not None,
            alibi_true_fp64=self.model.position == "alibi",
        )


# ----------------------------------------------------------------------------------------
# Self-test
# ----------------------------------------------------------------------------------------

TINY = {
    # Baichuan-7B: architectures BaiChuanForCausalLM, max_position_embeddings only
    "baichuan-7b": dict(
        architectures=[ARCH_GEN1_7B], vocab_size=300, hidden_size=64, intermediate_size=176,
        num_hidden_layers=3, num_attention_heads=4, hidden_act="silu", max_position_embeddings=64,
        initializer_range=0.12, rms_norm_eps=1e-6, use_cache=True, pad_token_id=0, bos_token_id=1,
        eos_token_id=2, tie_word_embeddings=False,
    ),
    # Baichuan-13B: model_max_length only, 6 heads (not a power of two, as the real 40)
    "baichuan-13b": dict(
        architectures=[ARCH_BAICHUAN], vocab_size=300, hidden_size=96, intermediate_size=256,
        num_hidden_layers=3, num_attention_heads=6, hidden_act="silu", model_max_length=64,
        initializer_range=0.12, rms_norm_eps=1e-6, use_cache=True, pad_token_id=0, bos_token_id=1,
        eos_token_id=2, tie_word_embeddings=False,
    ),
    # Baichuan2-7B: max_position_embeddings and model_max_length; NormHead marked by z_loss_weight
    # (the Baichuan2 config classes' key) since the vocab is not 125696
    "baichuan2-7b": dict(
        architectures=[ARCH_BAICHUAN], vocab_size=300, hidden_size=64, intermediate_size=176,
        num_hidden_layers=3, num_attention_heads=4, hidden_act="silu", max_position_embeddings=64,
        model_max_length=64, initializer_range=0.12, rms_norm_eps=1e-6, use_cache=True,
        pad_token_id=0, bos_token_id=1, eos_token_id=2, tie_word_embeddings=False, z_loss_weight=0,
    ),
    # Baichuan2-13B: model_max_length only (as published, with gradient_checkpointing false);
    # NormHead by the explicit key since the vocab is not 125696
    "baichuan2-13b": dict(
        architectures=[ARCH_BAICHUAN], vocab_size=300, hidden_size=96, intermediate_size=256,
        num_hidden_layers=3, num_attention_heads=6, hidden_act="silu", model_max_length=64,
        initializer_range=0.12, rms_norm_eps=1e-6, use_cache=True, pad_token_id=0, bos_token_id=1,
        eos_token_id=2, tie_word_embeddings=False, gradient_checkpointing=False, norm_head=True,
    ),
}


def _selftest():
    import copy
    import json
    import tempfile

    from safetensors import safe_open
    from torch.utils import _pytree as pytree
    from torch.utils._python_dispatch import TorchDispatchMode
    from transformers import GenerationConfig
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    torch.set_num_threads(1)

    class LowPrecision(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.hits = {}

        def __torch_dispatch__(self, func, types_, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            for t in pytree.tree_leaves(out):
                if isinstance(t, torch.Tensor) and t.is_floating_point() and t.dtype != torch.float64:
                    self.hits[f"{func}->{t.dtype}"] = self.hits.get(f"{func}->{t.dtype}", 0) + 1
            return out

    hf_logging.disable_progress_bar()

    # ---- the config rule on the published config.json key sets ------------------------------
    common = dict(auto_map={"AutoConfig": "configuration_baichuan.BaichuanConfig",
                            "AutoModelForCausalLM": "modeling_baichuan.BaichuanForCausalLM"},
                  bos_token_id=1, eos_token_id=2, hidden_act="silu", initializer_range=0.02,
                  model_type="baichuan", pad_token_id=0, rms_norm_eps=1e-06, tie_word_embeddings=False,
                  torch_dtype="bfloat16", transformers_version="4.29.2", use_cache=True)
    pub = {
        "baichuan-7b": dict(common, architectures=[ARCH_GEN1_7B], hidden_size=4096, intermediate_size=11008,
                            max_position_embeddings=4096, num_attention_heads=32, num_hidden_layers=32,
                            vocab_size=64000),
        "baichuan-13b": dict(common, _from_model_config=True, architectures=[ARCH_BAICHUAN], hidden_size=5120,
                             intermediate_size=13696, model_max_length=4096, num_attention_heads=40,
                             num_hidden_layers=40, vocab_size=64000),
        "baichuan2-7b": dict(common, _from_model_config=True, architectures=[ARCH_BAICHUAN],
                             tokenizer_class="BaichuanTokenizer", hidden_size=4096, intermediate_size=11008,
                             max_position_embeddings=4096, model_max_length=4096, num_attention_heads=32,
                             num_hidden_layers=32, vocab_size=125696),
        "baichuan2-13b": dict(common, _from_model_config=True, architectures=[ARCH_BAICHUAN],
                              tokenizer_class="BaichuanTokenizer", gradient_checkpointing=False, hidden_size=5120,
                              intermediate_size=13696, model_max_length=4096, num_attention_heads=40,
                              num_hidden_layers=40, vocab_size=125696),
    }
    pub["baichuan-7b"]["auto_map"] = {"AutoConfig": "configuration_baichuan.BaiChuanConfig",
                                      "AutoModelForCausalLM": "modeling_baichuan.BaiChuanForCausalLM"}
    for name, d in pub.items():
        assert detect_variant(d) == name, (name, detect_variant(d))
        assert BaichuanConfig(**d).baichuan_variant == name
    small = dict(architectures=[ARCH_BAICHUAN], vocab_size=300, model_max_length=64)
    assert detect_variant(small) == "baichuan-13b"
    assert detect_variant(dict(small, norm_head=True)) == "baichuan2-13b"
    assert detect_variant(dict(small, z_loss_weight=0)) == "baichuan2-13b"
    assert detect_variant(dict(small, z_loss_weight=0, norm_head=False)) == "baichuan-13b"
    assert detect_variant(dict(pub["baichuan2-13b"], norm_head=False)) == "baichuan-13b"
    assert detect_variant(dict(small, max_position_embeddings=64, z_loss_weight=0)) == "baichuan2-7b"
    assert detect_variant({"vocab_size": 300}) == "baichuan-13b"
    for bad in (dict(small, max_position_embeddings=64), dict(pub["baichuan-7b"], norm_head=True),
                dict(small, architectures=["LlamaForCausalLM"])):
        try:
            detect_variant(bad)
        except ValueError:
            pass
        else:
            raise AssertionError(f"rule accepted {bad}")
    print("config rule: the four published key sets -> their variants; overrides and refusals ok")

    s40 = alibi_slopes(40)
    want = [2.0 ** (-(i + 1) / 4) for i in range(32)] + [2.0 ** (-(2 * k + 1) / 8) for k in range(8)]
    assert all(abs(a - b) <= 1e-14 * b for a, b in zip(s40, want)), "slopes(40)"
    assert torch.equal(torch.tensor(s40, dtype=torch.float32), torch.tensor(want, dtype=torch.float32))
    assert alibi_slopes(6) == [0.25, 0.0625, 0.015625, 0.00390625, 0.5, 0.125], alibi_slopes(6)
    print("ALiBi slopes: 40 heads = 2^-(i+1)/4 (i<32) + 2^-(2k+1)/8 (k<8) (equal after fp32 rounding); "
          "6 heads =", alibi_slopes(6))

    # ---- sdpa_math == F.scaled_dot_product_attention on the MATH backend, bitwise --------------
    from torch.nn.attention import SDPBackend, sdpa_kernel

    gq = torch.Generator().manual_seed(1)
    for hd in (16, 64, 128):
        for dt in (torch.bfloat16, torch.float16, torch.float32, torch.float64):
            q, k, v = (torch.randn(2, 3, 13, hd, generator=gq).to(dt) for _ in range(3))
            am = torch.ones(2, 13)
            am[1, :4] = 0
            inv = 1.0 - am[:, None, None, :].to(dt)
            mask = inv.masked_fill(inv.bool(), torch.finfo(dt).min) + torch.full(
                (13, 13), torch.finfo(dt).min, dtype=dt).triu(1)
            with sdpa_kernel(SDPBackend.MATH):
                ref = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
            assert torch.equal(sdpa_math(q, k, v, mask), ref), (hd, dt)
    print("sdpa_math == F.scaled_dot_product_attention(SDPBackend.MATH) bitwise "
          "(bf16/fp16/fp32/fp64, head_dim 16/64/128)")

    n_gen = 12
    for seed, (name, cfg_dict) in enumerate(TINY.items()):
        torch.manual_seed(1000 + seed)
        config = BaichuanConfig(**copy.deepcopy(cfg_dict), attn_implementation="eager")
        model = BaichuanForCausalLM(config).eval()
        assert model.variant == name, (model.variant, name)
        assert model.config._attn_implementation == "eager"
        assert model.get_output_embeddings() is model.lm_head
        with torch.no_grad():  # non-trivial norm weights
            for n, p in model.named_parameters():
                if "layernorm" in n or n == "model.norm.weight":
                    p.mul_(1 + 0.2 * torch.randn(p.shape))
        with tempfile.TemporaryDirectory() as d:
            model.save_pretrained(d)
            with open(os.path.join(d, "config.json")) as f:
                written = json.load(f)
            assert detect_variant(written) == name, written
            with safe_open(os.path.join(d, "model.safetensors"), "pt") as f:
                names = sorted(f.keys())
            ref32 = BaichuanForCausalLM.from_pretrained(d, dtype=torch.float32, attn_implementation="eager").eval()
            ref16 = BaichuanForCausalLM.from_pretrained(d, dtype=torch.bfloat16, attn_implementation="eager").eval()
        mem = dict(model.named_parameters())
        for n, p in ref32.named_parameters():
            assert torch.equal(p, mem[n]), f"{name}: reloaded {n} differs"
        assert ref32.config._attn_implementation == "eager" and ref32.variant == name
        expected = {"model.embed_tokens.weight", "model.norm.weight", "lm_head.weight"}
        for i in range(config.num_hidden_layers):
            for t in ("self_attn.W_pack", "self_attn.o_proj", "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj",
                      "input_layernorm", "post_attention_layernorm"):
                expected.add(f"model.layers.{i}.{t}.weight")
        assert set(names) == expected, sorted(set(names) ^ expected)
        keys = sorted(k for k in written if k not in ("transformers_version",))
        print(f"\n[{name}] config.json keys: {keys}")
        print(f"[{name}] architectures {written['architectures']}; tensors written ({len(names)}):")
        for n in names:
            if ".layers." not in n or ".layers.0." in n:
                print(f"    {n}")
        print(f"    (+ the same per layer for layers 1..{config.num_hidden_layers - 1})")

        ref64 = copy.deepcopy(ref32).double().eval()
        native64 = copy.deepcopy(ref32).double().eval()
        info = ref64.enable_true_fp64()

        g = torch.Generator().manual_seed(7 + seed)
        ids = torch.randint(3, config.vocab_size, (2, 17), generator=g)
        with torch.no_grad():
            l32 = ref32(ids, use_cache=False).logits
            det = LowPrecision()
            with det:
                l64 = ref64(ids, use_cache=False).logits
            ln64 = native64(ids, use_cache=False).logits
            l16 = ref16(ids, use_cache=False).logits
        assert not det.hits, f"{name}: non-fp64 tensors in the true-fp64 forward: {det.hits}"
        assert l32.dtype == torch.float32 and l64.dtype == torch.float64 and l16.dtype == torch.bfloat16
        lp32, lp64 = F.log_softmax(l32.double(), -1), F.log_softmax(l64, -1)
        lpn, lp16 = F.log_softmax(ln64, -1), F.log_softmax(l16.double(), -1)
        d32 = (lp32 - lp64).abs().max().item()
        dn = (lpn - lp64).abs().max().item()
        d16 = (lp16 - lp64).abs().max().item()
        scale = lp64.abs().max().item()
        assert d32 < 2e-5 * max(1.0, scale), f"{name}: fp32 vs true fp64 {d32}"
        assert 0 < d16 < 0.5, f"{name}: bf16 vs fp64 {d16}"
        det_native = LowPrecision()
        with torch.no_grad(), det_native:
            native64(ids[:, :5], use_cache=False)
        print(f"[{name}] enable_true_fp64 -> {info}; dispatch mode saw no non-fp64 float tensor")
        print(f"[{name}] max|logprob diff| vs true fp64: fp32 {d32:.2e}, plain .double() {dn:.2e}, bf16 {d16:.2e}"
              f"  (plain .double() makes {sum(det_native.hits.values())} non-fp64 tensors: "
              f"{sorted({k.split('->')[0].split('.')[1] for k in det_native.hits})})")

        # cached greedy generate == no-cache forward (fp64, true fp64), hooked lm_head logits
        for model_x, dtype, tol in ((ref64, torch.float64, 1e-10), (ref32, torch.float32, 1e-4)):
            captured = []
            h = model_x.get_output_embeddings().register_forward_hook(
                lambda m, a, o: captured.append(o[:, -1, :].clone()))
            gc = GenerationConfig(do_sample=False, num_beams=1, use_cache=True, max_new_tokens=n_gen,
                                  min_new_tokens=n_gen, output_logits=True, return_dict_in_generate=True,
                                  bos_token_id=None, eos_token_id=None, pad_token_id=None)
            prompt = ids[:1, :9]
            saved = model_x.generation_config
            model_x.generation_config = gc
            try:
                with torch.no_grad():
                    out = model_x.generate(prompt, attention_mask=torch.ones_like(prompt), generation_config=gc)
            finally:
                h.remove()
                model_x.generation_config = saved
            seq = out.sequences
            assert seq.shape[1] == 9 + n_gen
            hooked = torch.stack([c[0] for c in captured[:n_gen]])
            assert hooked.dtype == dtype
            for i in range(n_gen):
                assert torch.equal(hooked[i].float(), out.logits[i][0])
            with torch.no_grad():
                full = model_x(seq[:, :-1], use_cache=False).logits[0, 8:]
            lp_full = F.log_softmax(full.double(), -1)
            lp_gen = F.log_softmax(hooked.double(), -1)
            dd = (lp_full - lp_gen).abs().max().item()
            assert dd < tol, f"{name}: cached generate vs no-cache forward ({dtype}) {dd}"
            assert torch.equal(full.argmax(-1), seq[0, 9:]), f"{name}: greedy tokens differ from forward argmax"
            print(f"[{name}] greedy generate (cache) vs no-cache forward, {str(dtype)[6:]}: max|dlogprob| {dd:.1e}"
                  f"; tokens {seq[0, 9:].tolist()}")

        # left padding in a batch == each row alone (fp64 true)
        p0, p1 = ids[0, :7], ids[1, :11]
        batch = torch.full((2, 11), config.pad_token_id, dtype=torch.long)
        am = torch.zeros((2, 11), dtype=torch.long)
        batch[0, 4:], am[0, 4:] = p0, 1
        batch[1], am[1] = p1, 1
        gc = GenerationConfig(do_sample=False, use_cache=True, max_new_tokens=5, min_new_tokens=5,
                              bos_token_id=None, eos_token_id=None, pad_token_id=config.pad_token_id)
        with torch.no_grad():
            outb = ref64.generate(batch, attention_mask=am, generation_config=gc)
            out0 = ref64.generate(p0[None], attention_mask=torch.ones(1, 7, dtype=torch.long), generation_config=gc)
            fb = ref64(batch, attention_mask=am, use_cache=False).logits
            f0 = ref64(p0[None], use_cache=False).logits
        assert torch.equal(outb[0, 11:], out0[0, 7:]), f"{name}: left-padded generate differs"
        dpad = (F.log_softmax(fb[0, 4:], -1) - F.log_softmax(f0[0], -1)).abs().max().item()
        assert dpad < 1e-10, f"{name}: left-padded forward differs {dpad}"
        print(f"[{name}] left-padded batch == unpadded row: forward max|dlogprob| {dpad:.1e}, generate tokens equal")

    # A folder laid out like a published one (published-style config.json; Baichuan-7B's extra
    # rotary_emb.inv_freq tensors) loads, and gives the same logits
    from safetensors.torch import load_file, save_file

    for name in ("baichuan-7b", "baichuan2-13b"):
        torch.manual_seed(3)
        m = BaichuanForCausalLM(BaichuanConfig(**copy.deepcopy(TINY[name]))).eval()
        with tempfile.TemporaryDirectory() as d:
            m.save_pretrained(d)
            with open(os.path.join(d, "config.json")) as f:
                cj = json.load(f)
            cj.pop("dtype", None)
            cj.update(torch_dtype="float32", transformers_version="4.29.2", _from_model_config=True,
                      auto_map=pub[name]["auto_map"])
            with open(os.path.join(d, "config.json"), "w") as f:
                json.dump(cj, f)
            sd = load_file(os.path.join(d, "model.safetensors"))
            if name == "baichuan-7b":
                for i in range(m.config.num_hidden_layers):
                    sd[f"model.layers.{i}.self_attn.rotary_emb.inv_freq"] = m.model.rotary_emb.inv_freq.clone()
            save_file(sd, os.path.join(d, "model.safetensors"), metadata={"format": "pt"})
            m2 = BaichuanForCausalLM.from_pretrained(d, dtype=torch.float32).eval()
        ids = torch.randint(3, m.config.vocab_size, (1, 10), generator=torch.Generator().manual_seed(1))
        with torch.no_grad():
            assert torch.equal(m(ids).logits, m2(ids).logits), name
        assert m2.variant == name
    print("published-style folders (config.json keys, Baichuan-7B's rotary_emb.inv_freq tensors) load: ok")

    # NormHead really normalises; the stored weight stays raw
    torch.manual_seed(0)
    m = BaichuanForCausalLM(BaichuanConfig(**copy.deepcopy(TINY["baichuan2-13b"]))).eval()
    raw = m.lm_head.weight.detach().clone()
    h = torch.randn(1, 3, m.config.hidden_size)
    with torch.no_grad():
        got = m.lm_head(h)
    want = h @ (raw / raw.norm(dim=1, keepdim=True)).T
    assert torch.allclose(got, want, rtol=1e-5, atol=1e-6) and torch.equal(m.lm_head.weight, raw)
    print("\nNormHead: logits = h @ (W / ||W_row||)^T, stored weight unchanged: ok")
    print("all Baichuan self-tests passed")


if __name__ == "__main__":
    if "--upstream" in sys.argv[1:]:
        # run the upstream modelling files (fetched at pinned commits) on the Baichuan fixtures
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        import baichuan_upstream_check

        sys.exit(baichuan_upstream_check.main([a for a in sys.argv[1:] if a != "--upstream"]))
    sys.exit(_selftest())
