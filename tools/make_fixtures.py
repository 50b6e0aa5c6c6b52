#!/usr/bin/env python3
"""Generate the ratiocheck test fixtures under data/fixtures/.

Each fixture is a tiny, randomly initialised Hugging Face causal LM built with
HF's own model classes (Baichuan, which transformers lacks: the PyTorch reference
``tools/baichuan_ref.py`` of the published remote code, a PreTrainedModel subclass)
and written with ``save_pretrained`` (config.json +
model.safetensors, or shards + model.safetensors.index.json), plus a
``reference.safetensors`` holding HF's reference outputs (full-forward
log-probs and greedy, KV-cached ``generate`` log-probs, in fp32 and fp64).
The C tests read these files without Python.

Usage:
    pip install -r tools/requirements-fixtures.txt
    python3 tools/make_fixtures.py                 # writes data/fixtures/
    python3 tools/make_fixtures.py --out /tmp/fx   # somewhere else (e.g. to diff)
    python3 tools/make_fixtures.py --only llama_gqa

Everything is seeded and runs single-threaded on the CPU, so two runs with the
same package versions produce byte-identical files.

fp64 references ("true fp64")
-----------------------------
HF's modelling code is not pure fp64 after ``model.double()``: the eager
attention softmax is computed with ``dtype=torch.float32``, RMSNorm upcasts to
(and so, for fp64 inputs, *downcasts* to) float32, the rotary inv_freq is
computed in float32 and cos/sin are evaluated in float32, and ``generate``
casts the next-token logits to float32.  To get a reference for the fp64
computation of the *same* model, the fp64 runs here use the HF modules with
those four float32 round trips removed (see ``true_fp64``): softmax stays in
the input dtype, RMSNorm uses the identical formula without the casts, RoPE
inv_freq is recomputed in float64 from the config by the same formulas HF uses
(default / linear / llama3; checked against HF's float32 values), cos/sin are
evaluated in float64, and the per-step logits are taken from a hook on the
lm_head (before generate's float32 cast).  A TorchDispatchMode checks that no
floating-point tensor other than float64 is produced inside the model's
forward during those runs.  The difference to plain ``model.double()`` is
measured and written to the README.

Families without RoPE have their own float32 round trips, removed by one patch
function each (``FP64_FAMILY_PATCHES``):

- BLOOM (``_patch_bloom_f64``): ``modeling_bloom._get_alibi_slopes`` makes the
  ALiBi slopes with ``torch.full(..., dtype=torch.float32)``, so the bias of
  both paths (no mask: ``slopes * arange``; 2-D mask: ``build_alibi_tensor``;
  the references only use the first, as ``generate`` drops an all-ones mask)
  is computed in float32 and then cast; while the fp64 model's BloomModel.forward
  runs, that function is swapped for the same one in float64.  The eager
  softmax(dtype=float32) is handled like the other families'.
- MPT (``_patch_mpt_f64``): ``build_mpt_alibi_tensor`` uses ``.float()`` for
  the slope exponents, and ``MptAttention.forward`` runs
  ``softmax(attention_scores.float())``.  The fp64 model gets both in float64
  (the bias function as an instance attribute, the attention forward as HF's
  code minus the ``.float()``, checked bit-identical to HF's forward in fp32).
- GPT-2 (``_patch_gpt2_f64``): nothing to patch (its eager attention has no
  float32 softmax; ``reorder_and_upcast_attn``, which has, is asserted off).

Every replacement is checked against HF's own fp32 values (to < 1e-6 relative).
A model class from outside transformers (e.g. a reference implementation that
subclasses PreTrainedModel) can bring its own ``enable_true_fp64()`` method;
``make_true_fp64`` then calls it instead of the generic patches, and the
detector still has to stay silent.  Such a spec may also supply
``np_forward`` (its numpy implementation) and ``readme`` (README facts).

- Baichuan (``tools/baichuan_ref.py``): ``BaichuanForCausalLM.enable_true_fp64()``
  (RMSNorm without the fp32 cast, RoPE inv_freq/cos/sin in fp64, ALiBi slopes from the
  Python doubles, fp64 mask fill values, Baichuan-7B's softmax in fp64, NormHead's
  normalisation in fp64). ``_check_baichuan_f64`` checks the fp64 rotary tables and ALiBi
  bias against the fp32 ones (< 1e-6 relative). The numpy check has its own Baichuan
  forward (``_np_forward_baichuan``), which decides the variant from config.json keys.
"""

import argparse
import collections
import contextlib
import copy
import hashlib
import json
import math
import os
import platform
import shutil
import tempfile
import types
from unittest import mock

os.environ["CUDA_VISIBLE_DEVICES"] = ""  # CPU only, before torch is imported
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np  # noqa: E402
import safetensors  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
import transformers  # noqa: E402
from safetensors import safe_open  # noqa: E402
from st_canonical import save_safetensors_canonical  # noqa: E402
from torch.utils import _pytree as pytree  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402
from transformers import (  # noqa: E402
    BloomConfig,
    BloomForCausalLM,
    GenerationConfig,
    GPT2Config,
    GPT2LMHeadModel,
    GPTNeoXConfig,
    GPTNeoXForCausalLM,
    LlamaConfig,
    LlamaForCausalLM,
    MistralConfig,
    MistralForCausalLM,
    MptConfig,
    MptForCausalLM,
    Qwen2Config,
    Qwen2ForCausalLM,
)
from transformers.models.mixtral import modeling_mixtral  # noqa: E402
from transformers.models.bloom import modeling_bloom  # noqa: E402
from transformers.models.mpt import modeling_mpt  # noqa: E402

import baichuan_ref  # noqa: E402  (tools/: the PyTorch reference of the Baichuan remote code)

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_OUT = os.path.join(REPO_ROOT, "data", "fixtures")

N_GEN = 12                       # new tokens per greedy prompt
FWD_LENGTHS = [7, 24, 13, 1]     # full-forward sequences (one has length 1)
GEN_PROMPT_LENGTHS = [3, 9, 1, 6]
MIN_MARGIN = 1e-3                # required top1-top2 fp64 logit gap at every greedy step
SELF_CONSISTENCY_TOL_F64 = 1e-10 # cached decode vs no-cache forward, fp64
SELF_CONSISTENCY_TOL_F32 = 1e-4  # same, fp32 (sanity only)
NUMPY_SPEC_TOL = 1e-11           # independent numpy fp64 implementation vs fp64 references
PERTURB_STD = 0.1                # LN/RMSNorm weight = 1 + 0.1*randn, every bias = 0.1*randn
INIT_RANGE = 0.12               # std of HF's init: non-flat distributions with an fp32 noise floor (HF fp32 vs fp64) of at most 4e-6 (6.3e-6 for baichuan_13b)
MIN_CLIP_FRACTION = 0.01         # MPT clip_qkv must really clip: this share of the q/k/v values in the reference runs ...
MAX_CLIP_FRACTION = 0.50         # ... but not most of them
MIN_ROUTE_MARGIN = 1e-5          # MoE: the fp64 gap between the k-th and (k+1)-th router probability of every
                                 # token and layer, far above fp32 rounding of a probability (about 1e-7), so
                                 # that the fp32 and fp64 runs pick the same experts


# --------------------------------------------------------------------------
# Fixture definitions
# --------------------------------------------------------------------------

COMMON_TOKENS = dict(bos_token_id=1, eos_token_id=2, pad_token_id=None)

FIXTURES = [
    dict(
        name="neox_parallel",
        seed=1001,
        model_cls=GPTNeoXForCausalLM,
        config_cls=GPTNeoXConfig,
        config=dict(
            vocab_size=320,  # treated as "padded beyond the tokenizer"
            hidden_size=64,
            num_hidden_layers=3,
            num_attention_heads=4,
            intermediate_size=128,
            hidden_act="gelu",
            max_position_embeddings=64,
            initializer_range=INIT_RANGE,
            layer_norm_eps=1e-5,
            use_parallel_residual=True,
            attention_bias=True,
            tie_word_embeddings=False,
            rope_parameters=dict(rope_type="default", rope_theta=10000.0, partial_rotary_factor=0.25),
            **COMMON_TOKENS,
        ),
        save_dtype=torch.float32,
        max_shard_size=None,
        description="GPT-NeoX, parallel residual, rotary_pct 0.25, gelu, untied embed_out, vocab 320, fp32",
    ),
    dict(
        name="neox_sequential",
        seed=2004,
        model_cls=GPTNeoXForCausalLM,
        config_cls=GPTNeoXConfig,
        config=dict(
            vocab_size=288,
            hidden_size=64,
            num_hidden_layers=4,
            num_attention_heads=4,
            intermediate_size=128,
            hidden_act="gelu",
            max_position_embeddings=64,
            initializer_range=INIT_RANGE,
            layer_norm_eps=1e-6,
            use_parallel_residual=False,
            attention_bias=True,
            tie_word_embeddings=False,
            rope_parameters=dict(rope_type="default", rope_theta=1000.0, partial_rotary_factor=0.5),
            **COMMON_TOKENS,
        ),
        save_dtype=torch.float32,
        max_shard_size=None,
        description="GPT-NeoX, sequential residual, rotary_pct 0.5, rope base 1000, gelu, untied, vocab 288, fp32",
    ),
    dict(
        name="llama_gqa",
        seed=3003,
        model_cls=LlamaForCausalLM,
        config_cls=LlamaConfig,
        config=dict(
            vocab_size=256,
            hidden_size=64,
            num_hidden_layers=3,
            num_attention_heads=4,
            num_key_value_heads=2,
            head_dim=16,
            intermediate_size=128,
            hidden_act="silu",
            max_position_embeddings=512,
            initializer_range=INIT_RANGE,
            rms_norm_eps=1e-5,
            tie_word_embeddings=True,
            attention_bias=False,
            mlp_bias=False,
            rope_parameters=dict(
                rope_type="llama3",
                rope_theta=10000.0,
                factor=8.0,
                low_freq_factor=1.0,
                high_freq_factor=4.0,
                original_max_position_embeddings=64,
            ),
            **COMMON_TOKENS,
        ),
        save_dtype=torch.float32,
        max_shard_size=None,
        description="Llama, GQA 4q/2kv, head_dim 16, tied embeddings, llama3 rope scaling (factor 8, orig ctx 64), fp32",
    ),
    dict(
        name="qwen2_bias",
        seed=4004,
        model_cls=Qwen2ForCausalLM,
        config_cls=Qwen2Config,
        config=dict(
            vocab_size=300,
            hidden_size=64,
            num_hidden_layers=3,
            num_attention_heads=4,
            num_key_value_heads=2,
            intermediate_size=128,
            hidden_act="silu",
            max_position_embeddings=512,
            initializer_range=INIT_RANGE,
            rms_norm_eps=1e-6,
            tie_word_embeddings=True,
            use_sliding_window=False,
            sliding_window=None,
            rope_parameters=dict(rope_type="default", rope_theta=1000000.0),
            **COMMON_TOKENS,
        ),
        save_dtype=torch.float32,
        max_shard_size=200_000,  # bytes -> 3 shards + model.safetensors.index.json
        description="Qwen2, q/k/v bias, GQA 4q/2kv, tied embeddings, rope_theta 1e6, fp32, saved sharded",
    ),
    dict(
        name="mistral_headdim",
        seed=5005,
        model_cls=MistralForCausalLM,
        config_cls=MistralConfig,
        config=dict(
            vocab_size=264,
            hidden_size=64,
            num_hidden_layers=3,
            num_attention_heads=4,
            num_key_value_heads=2,
            head_dim=32,  # != hidden_size / num_attention_heads (16)
            intermediate_size=128,
            hidden_act="silu",
            max_position_embeddings=512,
            initializer_range=INIT_RANGE,
            rms_norm_eps=1e-5,
            tie_word_embeddings=False,
            sliding_window=None,
            rope_parameters=dict(rope_type="linear", rope_theta=10000.0, factor=2.0),
            **COMMON_TOKENS,
        ),
        save_dtype=torch.float32,
        max_shard_size=None,
        description="Mistral, explicit head_dim 32 (hidden 64, 4 heads), GQA 4q/2kv, linear rope x2, untied lm_head, fp32",
    ),
    dict(
        name="neox_bf16",
        seed=6011,
        model_cls=GPTNeoXForCausalLM,
        config_cls=GPTNeoXConfig,
        config=dict(
            vocab_size=320,
            hidden_size=64,
            num_hidden_layers=3,
            num_attention_heads=4,
            intermediate_size=128,
            hidden_act="gelu",
            max_position_embeddings=64,
            initializer_range=INIT_RANGE,
            layer_norm_eps=1e-5,
            use_parallel_residual=True,
            attention_bias=True,
            tie_word_embeddings=False,
            rope_parameters=dict(rope_type="default", rope_theta=10000.0, partial_rotary_factor=0.25),
            **COMMON_TOKENS,
        ),
        save_dtype=torch.bfloat16,
        max_shard_size=None,
        description="GPT-NeoX, parallel residual, weights stored in bf16; references are fp32/fp64 on the bf16-rounded weights",
    ),
    dict(
        name="gpt2_learned",
        seed=7001,
        model_cls=GPT2LMHeadModel,
        config_cls=GPT2Config,
        config=dict(
            vocab_size=272,
            n_embd=64,
            n_head=4,
            n_layer=3,
            n_positions=64,
            n_inner=128,  # explicit (None would mean 4*n_embd = 256)
            activation_function="gelu_new",
            initializer_range=INIT_RANGE,
            layer_norm_epsilon=1e-5,
            tie_word_embeddings=True,
            # dropouts stay at GPT-2's 0.1 defaults: inert in eval mode
            **COMMON_TOKENS,
        ),
        save_dtype=torch.float32,
        max_shard_size=None,
        description="GPT-2, learned position embeddings (wpe, 64 positions), Conv1D [in, out] weights, gelu_new, "
                    "n_inner 128, tied lm_head, fp32",
    ),
    dict(
        name="bloom_alibi",
        seed=8001,
        model_cls=BloomForCausalLM,
        config_cls=BloomConfig,
        config=dict(
            vocab_size=304,
            hidden_size=96,
            n_head=6,  # not a power of two: BLOOM's extra-slopes path
            n_layer=3,
            initializer_range=INIT_RANGE,
            layer_norm_epsilon=1e-5,
            apply_residual_connection_post_layernorm=False,
            slow_but_exact=False,
            pretraining_tp=1,
            tie_word_embeddings=True,
            **COMMON_TOKENS,
        ),
        save_dtype=torch.float32,
        max_shard_size=None,
        description="BLOOM, ALiBi with 6 heads (not a power of two), word_embeddings_layernorm, fused per-head "
                    "query_key_value, tied lm_head, fp32",
    ),
    dict(
        name="mpt_alibi",
        seed=9001,
        model_cls=MptForCausalLM,
        config_cls=MptConfig,
        config=dict(
            vocab_size=288,
            d_model=96,
            n_heads=6,  # not a power of two: MPT's interleaved slope order
            n_layers=3,
            expansion_ratio=4,  # HF's MptMLP hard-codes 4*d_model; 4 keeps config.json truthful
            max_seq_len=64,
            no_bias=True,
            initializer_range=INIT_RANGE,
            layer_norm_epsilon=1e-5,
            attn_config=dict(alibi=True, alibi_bias_max=12, clip_qkv=1.5),
            tie_word_embeddings=True,
            **COMMON_TOKENS,
        ),
        save_dtype=torch.float32,
        max_shard_size=None,
        description="MPT, ALiBi with 6 heads (not a power of two), clip_qkv 1.5, alibi_bias_max 12 in config.json "
                    "(HF 5.24 ignores it and uses 8), no biases, bias-free LayerNorms, tied lm_head, fp32",
    ),
    # ---- Baichuan (tools/baichuan_ref.py; transformers has no Baichuan class) ----------------
    dict(
        name="baichuan_7b",
        seed=10001,
        model_cls=baichuan_ref.BaichuanForCausalLM,
        config_cls=baichuan_ref.BaichuanConfig,
        baichuan_variant="baichuan-7b",
        config=dict(
            architectures=["BaiChuanForCausalLM"],  # Baichuan-7B's class name (capital C) -> RoPE
            vocab_size=280,
            hidden_size=64,
            num_hidden_layers=3,
            num_attention_heads=4,
            intermediate_size=176,
            hidden_act="silu",
            max_position_embeddings=64,
            initializer_range=INIT_RANGE,
            rms_norm_eps=1e-6,
            tie_word_embeddings=False,
            **COMMON_TOKENS,
        ),
        save_dtype=torch.float32,
        max_shard_size=None,
        description="Baichuan-7B (BaiChuanForCausalLM): RoPE over the whole head (base 10000), fused W_pack "
                    "[q | k | v], SwiGLU, plain untied lm_head, no biases, fp32",
        readme=dict(
            upstream="`models/modeling_baichuan.py` of github.com/baichuan-inc/Baichuan-7B at commit "
                     "5a3991504e33a5de7280bb8b20d4512e8c5b2ef4 (2023-06-19), whose inference branch is the Hub "
                     "file's (`baichuan-inc/Baichuan-7B` `modeling_baichuan.py`, revision "
                     "262c8cb58b6d3615c208d9230baa869fddee2adb as quoted by optimum-intel)",
            variant_marker="`\"architectures\": [\"BaiChuanForCausalLM\"]` (capital C: only Baichuan-7B's class) "
                           "→ RoPE (`max_position_embeddings: 64` is present too); no `norm_head`, no "
                           "`z_loss_weight`, vocab ≠ 125696 → plain lm_head",
        ),
    ),
    dict(
        name="baichuan_13b",
        seed=11001,
        model_cls=baichuan_ref.BaichuanForCausalLM,
        config_cls=baichuan_ref.BaichuanConfig,
        baichuan_variant="baichuan-13b",
        config=dict(
            architectures=["BaichuanForCausalLM"],
            vocab_size=296,
            hidden_size=96,
            num_hidden_layers=3,
            num_attention_heads=6,  # not a power of two (as the real 40): _get_interleave's extra slopes
            intermediate_size=192,
            hidden_act="silu",
            model_max_length=64,  # no max_position_embeddings -> ALiBi
            initializer_range=INIT_RANGE,
            rms_norm_eps=1e-6,
            tie_word_embeddings=False,
            **COMMON_TOKENS,
        ),
        save_dtype=torch.float32,
        max_shard_size=None,
        description="Baichuan-13B: ALiBi with 6 heads (not a power of two; bias slope·j on the key position), "
                    "fused W_pack [q | k | v], SwiGLU, plain untied lm_head, no biases, fp32",
        readme=dict(
            upstream="Baichuan-13B-Chat's `modeling_baichuan.py` as vendored in github.com/tingshua-yts/Baichuan-13B "
                     "`model/modeling_baichuan.py` at commit 24011150ea4b31d3b9440caf87f0ce8e2441d0a4 "
                     "(2023-08-09), the batch-padding version (Hub `baichuan-inc/Baichuan-13B-Chat` revision "
                     "a4a558127068f2ce965aa56aeb826bf501a68970 per ipex-llm); assumed equal to Baichuan-13B-Base's",
            variant_marker="`\"architectures\": [\"BaichuanForCausalLM\"]` with `model_max_length: 64` and no "
                           "`max_position_embeddings` → ALiBi; no `norm_head`, no `z_loss_weight`, vocab ≠ 125696 "
                           "→ plain lm_head (as the published Baichuan-13B config.json)",
        ),
    ),
    dict(
        name="baichuan2_7b",
        seed=12001,
        model_cls=baichuan_ref.BaichuanForCausalLM,
        config_cls=baichuan_ref.BaichuanConfig,
        baichuan_variant="baichuan2-7b",
        config=dict(
            architectures=["BaichuanForCausalLM"],
            vocab_size=312,
            hidden_size=64,
            num_hidden_layers=3,
            num_attention_heads=4,
            intermediate_size=176,
            hidden_act="silu",
            max_position_embeddings=64,  # -> RoPE
            model_max_length=64,  # as the published Baichuan2-7B config.json (both keys)
            z_loss_weight=0,  # Baichuan2's configuration class writes it -> NormHead
            initializer_range=INIT_RANGE,
            rms_norm_eps=1e-6,
            tie_word_embeddings=False,
            **COMMON_TOKENS,
        ),
        save_dtype=torch.float32,
        max_shard_size=None,
        description="Baichuan2-7B: RoPE over the whole head (base 10000, applied in fp32), fused W_pack "
                    "[q | k | v], SwiGLU, NormHead (lm_head rows L2-normalised), no biases, fp32",
        readme=dict(
            upstream="the Hub file `baichuan-inc/Baichuan2-7B-Base` `modeling_baichuan.py` as vendored in "
                     "github.com/mlpod/Baichuan2-CPU-DEBUG `model/modeling_baichuan.py` at commit "
                     "e4a6ea74600b71c0bcd4f0e982b36dea541a5a3e (2023-10-24; xformers import commented out, SDPA "
                     "unconditional; the reference uses SDPA's MATH backend); Hub revision "
                     "cb7fc748b78b7ea99772e4cf76db155729ce774e per ipex-llm",
            variant_marker="`\"architectures\": [\"BaichuanForCausalLM\"]` with `max_position_embeddings: 64` "
                           "(and `model_max_length: 64`) → RoPE; `z_loss_weight: 0` (the key Baichuan2's "
                           "configuration class writes) → NormHead",
        ),
    ),
    dict(
        name="baichuan2_13b",
        seed=13001,
        model_cls=baichuan_ref.BaichuanForCausalLM,
        config_cls=baichuan_ref.BaichuanConfig,
        baichuan_variant="baichuan2-13b",
        config=dict(
            architectures=["BaichuanForCausalLM"],
            vocab_size=264,
            hidden_size=96,
            num_hidden_layers=3,
            num_attention_heads=6,  # not a power of two (as the real 40)
            intermediate_size=192,
            hidden_act="silu",
            model_max_length=64,  # no max_position_embeddings -> ALiBi
            z_loss_weight=0,  # NormHead: the published config marks it only by vocab_size 125696
            initializer_range=INIT_RANGE,
            rms_norm_eps=1e-6,
            tie_word_embeddings=False,
            **COMMON_TOKENS,
        ),
        save_dtype=torch.float32,
        max_shard_size=None,
        description="Baichuan2-13B: ALiBi with 6 heads (not a power of two; bias slope·j on the key position), "
                    "fused W_pack [q | k | v], SwiGLU, NormHead (lm_head rows L2-normalised), no biases, fp32",
        readme=dict(
            upstream="`modeling_baichuan.py` of the Hub repo `baichuan-inc/Baichuan2-13B-Chat` at "
                     "c6f8592a60b4ad73c210b28dd2ab3cca51abbf93 (2023-09-12, \"fix NormHead eval\"; read through its "
                     "git mirror github.com/jrd77/Baichuan2-13B-Chat); assumed equal to Baichuan2-13B-Base's",
            variant_marker="`\"architectures\": [\"BaichuanForCausalLM\"]` with `model_max_length: 64` and no "
                           "`max_position_embeddings` → ALiBi; `z_loss_weight: 0` → NormHead. The published "
                           "Baichuan2-13B config.json marks NormHead only by `vocab_size: 125696`, which a tiny "
                           "model cannot have; `z_loss_weight: 0` is what Baichuan2's configuration class writes "
                           "when it re-saves a config (no `norm_head` key is used)",
        ),
    ),
]


# --------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------

def set_determinism():
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:
        pass
    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    try:
        import huggingface_hub.utils as hub_utils

        hub_utils.disable_progress_bars()
    except Exception:
        pass


def is_norm_module(m):
    name = type(m).__name__
    return isinstance(m, torch.nn.LayerNorm) or "LayerNorm" in name or "RMSNorm" in name


def perturb_norms_and_biases(model, seed):
    """HF inits norm weights to 1 (Gemma's to 0) and all biases to 0; make them non-trivial."""
    g = torch.Generator().manual_seed(seed)
    counts = collections.Counter()
    with torch.no_grad():
        for mname, m in model.named_modules():
            norm = is_norm_module(m)
            for pname, p in m.named_parameters(recurse=False):
                if norm and pname == "weight":
                    # around HF's init: 1, or 0 for Gemma's (1 + w) norms
                    centre = 0.0 if type(m).__name__ in ("Gemma2RMSNorm", "Gemma3RMSNorm") else 1.0
                    p.copy_(centre + PERTURB_STD * torch.randn(p.shape, generator=g, dtype=torch.float32))
                    counts["norm_weight"] += 1
                elif pname == "bias":
                    p.copy_(PERTURB_STD * torch.randn(p.shape, generator=g, dtype=torch.float32))
                    counts["norm_bias" if norm else "bias"] += 1
    return counts


def rope_inv_freq_f64(config):
    """RoPE inverse frequencies in float64, same formulas as transformers' rope init functions."""
    rp = config.rope_parameters
    base = float(rp["rope_theta"])
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    dim = int(head_dim * rp.get("partial_rotary_factor", 1.0))
    inv = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim))
    rtype = rp.get("rope_type", "default")
    if rtype == "default":
        return inv
    if rtype == "linear":
        return inv / float(rp["factor"])
    if rtype == "llama3":
        factor = float(rp["factor"])
        lff = float(rp["low_freq_factor"])
        hff = float(rp["high_freq_factor"])
        old = float(rp["original_max_position_embeddings"])
        low_wl = old / lff
        high_wl = old / hff
        wl = 2 * math.pi / inv
        inv_l = torch.where(wl > low_wl, inv / factor, inv)
        smooth = (old / wl - lff) / (hff - lff)
        smoothed = (1 - smooth) * inv_l / factor + smooth * inv_l
        medium = ~(wl < high_wl) * ~(wl > low_wl)
        return torch.where(medium, smoothed, inv_l)
    if rtype == "yarn":
        # _compute_yarn_parameters: the correction range in Python floats (as HF), the blend in fp64
        factor = float(rp["factor"])
        orig = rp["original_max_position_embeddings"]
        beta_fast, beta_slow = rp.get("beta_fast") or 32, rp.get("beta_slow") or 1

        def corr(n):
            return (dim * math.log(orig / (n * 2 * math.pi))) / (2 * math.log(base))

        low, high = corr(beta_fast), corr(beta_slow)
        if rp.get("truncate", True):
            low, high = math.floor(low), math.ceil(high)
        low, high = max(low, 0), min(high, dim - 1)
        if low == high:
            high += 0.001
        ramp = ((torch.arange(dim // 2, dtype=torch.float64) - low) / (high - low)).clamp(0, 1)
        ef = 1 - ramp
        return inv / factor * (1 - ef) + inv * ef
    raise NotImplementedError(rtype)


def llama3_regimes(config):
    rp = config.rope_parameters
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    dim = int(head_dim * rp.get("partial_rotary_factor", 1.0))
    inv = 1.0 / (float(rp["rope_theta"]) ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim))
    wl = 2 * math.pi / inv
    old = float(rp["original_max_position_embeddings"])
    low_wl = old / float(rp["low_freq_factor"])
    high_wl = old / float(rp["high_freq_factor"])
    out = []
    for w in wl.tolist():
        out.append("high(unscaled)" if w < high_wl else ("low(/factor)" if w > low_wl else "medium(smoothed)"))
    return out, wl.tolist()


class LowPrecisionDetector(TorchDispatchMode):
    """Records every op that produces a floating tensor that is not float64."""

    def __init__(self):
        super().__init__()
        self.hits = collections.Counter()

    def __torch_dispatch__(self, func, types_, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in pytree.tree_leaves(out):
            if isinstance(t, torch.Tensor) and t.is_floating_point() and t.dtype != torch.float64:
                self.hits[f"{func}->{t.dtype}"] += 1
        return out


def _rms_forward_f64(self, hidden_states):
    # Identical to HF's *RMSNorm.forward minus the float32 round trip.
    variance = hidden_states.pow(2).mean(-1, keepdim=True)
    hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
    return self.weight * hidden_states


def _rope_forward_f64(self, x, position_ids):
    # Identical to HF's *RotaryEmbedding.forward, evaluated in float64.
    freqs = position_ids[..., None].to(torch.float64) * self.inv_freq.to(device=x.device, dtype=torch.float64)
    emb = torch.cat((freqs, freqs), dim=-1)
    cos = emb.cos() * self.attention_scaling
    sin = emb.sin() * self.attention_scaling
    return cos.to(dtype=x.dtype), sin.to(dtype=x.dtype)


# ---- family-specific float32 round trips (model types without RoPE) --------------

NO_ROPE_MODEL_TYPES = ("gpt2", "bloom", "mpt")


def _bloom_alibi_slopes_f64(num_heads, device):
    """modeling_bloom._get_alibi_slopes with dtype=torch.float64 instead of torch.float32 (same ops)."""
    closest_power_of_2 = 2 ** math.floor(math.log2(num_heads))
    base = torch.full((), 2 ** (-(2 ** -(math.log2(closest_power_of_2) - 3))), device=device, dtype=torch.float64)
    powers = torch.arange(1, 1 + closest_power_of_2, device=device, dtype=torch.int32)
    slopes = torch.pow(base, powers)
    if closest_power_of_2 != num_heads:
        extra_base = torch.full(
            (), 2 ** (-(2 ** -(math.log2(2 * closest_power_of_2) - 3))), device=device, dtype=torch.float64
        )
        num_remaining_heads = min(closest_power_of_2, num_heads - closest_power_of_2)
        extra_powers = torch.arange(1, 1 + 2 * num_remaining_heads, 2, device=device, dtype=torch.int32)
        slopes = torch.cat([slopes, torch.pow(extra_base, extra_powers)], dim=0)
    return slopes


def _rel_err(a32, b64):
    a = a32.double()
    return ((a - b64).abs().max() / b64.abs().max()).item()


def _patch_bloom_f64(model64):
    """BLOOM: the ALiBi slopes are made in float32 (modeling_bloom._get_alibi_slopes: torch.full(...,
    dtype=torch.float32)), so both bias paths (BloomModel.forward without a mask: slopes * arange;
    build_alibi_tensor with a 2D mask) produce a float32 bias that is then cast to the model dtype.
    While this instance's BloomModel.forward runs, the module-level _get_alibi_slopes is replaced by
    the same function in float64. Softmax(dtype=float32) is handled by fp64_softmax."""
    n = model64.config.n_head
    cpu = torch.device("cpu")
    s32 = modeling_bloom._get_alibi_slopes(n, cpu)
    assert s32.dtype == torch.float32
    s64 = _bloom_alibi_slopes_f64(n, cpu)
    mask = torch.ones(1, 64, dtype=torch.long)
    b32 = modeling_bloom.build_alibi_tensor(mask, n, torch.float32)
    with mock.patch.object(modeling_bloom, "_get_alibi_slopes", _bloom_alibi_slopes_f64):
        b64 = modeling_bloom.build_alibi_tensor(mask, n, torch.float64)
    assert b64.dtype == torch.float64
    rel_s, rel_b = _rel_err(s32, s64), _rel_err(b32, b64)
    assert rel_s < 1e-6 and rel_b < 1e-6, f"bloom fp64 alibi differs from HF fp32 ({rel_s}, {rel_b})"

    tr = model64.transformer
    orig_forward = tr.forward

    def forward(*args, **kwargs):
        with mock.patch.object(modeling_bloom, "_get_alibi_slopes", _bloom_alibi_slopes_f64):
            return orig_forward(*args, **kwargs)

    tr.forward = forward
    return dict(alibi_slopes=s64.tolist(), alibi_slopes_rel_err_f32=rel_s, alibi_bias_rel_err_f32=rel_b)


def _mpt_alibi_f64(num_heads, sequence_length, alibi_bias_max=8, device=None):
    """modeling_mpt.build_mpt_alibi_tensor with the exponents in float64 (HF: ``.float()``); same ops.
    Keeps HF's default alibi_bias_max=8 (MptModel.forward does not pass the config value)."""
    alibi = torch.arange(1 - sequence_length, 1, dtype=torch.int32, device=device).view(1, 1, 1, sequence_length)
    num_heads_power_of_2 = 2 ** math.ceil(math.log2(num_heads))
    base = torch.arange(1, num_heads_power_of_2 + 1, dtype=torch.int64, device=device).double()
    base = base * (alibi_bias_max / num_heads_power_of_2)
    slopes = 1.0 / torch.pow(2, base)
    slopes = slopes.view(1, num_heads_power_of_2, 1, 1)
    if num_heads_power_of_2 != num_heads:
        slopes = torch.concat([slopes[:, 1::2, ...], slopes[:, ::2, ...]], dim=1)[:, :num_heads, ...]
    alibi = alibi * slopes
    return alibi.squeeze(0)


def _mpt_attn_forward_f64(self, hidden_states, position_bias, cache=None, attention_mask=None, **kwargs):
    # modeling_mpt.MptAttention.forward with one change: the softmax runs on the scores in their own
    # dtype (HF: softmax(attention_scores.float())). Checked bit-identical to HF's forward in fp32.
    batch_size, seq_length = hidden_states.shape[:2]

    mixed_qkv = self.Wqkv(hidden_states)
    if self.clip_qkv:
        mixed_qkv = mixed_qkv.clamp(min=-self.clip_qkv, max=self.clip_qkv)

    query_states, key_states, value_states = mixed_qkv.chunk(3, dim=2)
    query_states = query_states.reshape(batch_size, seq_length, self.n_heads, self.head_dim).transpose(1, 2)
    key_states = key_states.reshape(batch_size, seq_length, self.n_heads, self.head_dim).transpose(1, 2)
    value_states = value_states.reshape(batch_size, seq_length, self.n_heads, self.head_dim).transpose(1, 2)

    if cache is not None:
        key_states, value_states = cache.update(key_states, value_states, self.layer_idx, kwargs=kwargs)

    attention_scores = torch.matmul(query_states, key_states.transpose(-1, -2)) * self.softmax_scale
    query_length = seq_length if cache is None else seq_length + cache.get_seq_length()

    if position_bias is not None:
        if len(position_bias.shape) != 3:
            raise ValueError(f"Expecting position_bias shape to be 3 dimensions, got {len(position_bias.shape)}")
        key_length = key_states.shape[-2]
        position_bias_query_index = max(0, position_bias.size(1) - query_length)
        position_bias_key_index = max(0, position_bias.size(2) - key_length)
        position_bias = position_bias[:, position_bias_query_index:, position_bias_key_index:]
        attention_scores = attention_scores + position_bias

    if attention_mask is not None:
        attention_scores = attention_scores.masked_fill(attention_mask, torch.finfo(query_states.dtype).min)

    attn_weights = F.softmax(attention_scores, dim=-1).to(value_states.dtype)
    attn_weights = F.dropout(attn_weights, p=self.attn_dropout_p, training=self.training)

    context_states = torch.matmul(attn_weights, value_states)
    context_states = context_states.permute(0, 2, 1, 3).contiguous().view(batch_size, seq_length, -1)
    attn_output = self.out_proj(context_states)
    return attn_output, attn_weights


def _patch_mpt_f64(model64):
    """MPT: build_mpt_alibi_tensor makes the slopes in float32 (``.float()``, then pow/reciprocal), and
    MptAttention.forward calls softmax(attention_scores.float()). The fp64 model gets the same two
    functions in float64 (instance attributes). Checks: the fp64 bias equals HF's fp32 bias to fp32
    precision, and the replacement attention forward is bit-identical to HF's on an fp32 copy."""
    cfg = model64.config
    n, S = cfg.n_heads, cfg.max_seq_len
    a32 = modeling_mpt.build_mpt_alibi_tensor(n, S)  # exactly how MptModel.forward calls it (default bias max)
    assert a32.dtype == torch.float32
    a64 = _mpt_alibi_f64(n, S)
    assert a64.dtype == torch.float64 and a64.shape == a32.shape
    rel = _rel_err(a32, a64)
    assert rel < 1e-6, f"mpt fp64 alibi differs from HF fp32 ({rel})"

    # the copied attention forward equals HF's in fp32 (where .float() is a no-op), bit for bit
    m32 = copy.deepcopy(model64).to(torch.float32)
    ids = (torch.arange(24) * 7 % cfg.vocab_size)[None]
    with torch.no_grad():
        ref = m32(ids, use_cache=False).logits
        for m in m32.modules():
            if isinstance(m, modeling_mpt.MptAttention):
                m.forward = types.MethodType(_mpt_attn_forward_f64, m)
        got = m32(ids, use_cache=False).logits
    assert torch.equal(ref, got), "patched MPT attention forward is not HF's forward in fp32"

    model64.transformer.build_mpt_alibi_tensor = _mpt_alibi_f64
    n_attn = 0
    for m in model64.modules():
        if isinstance(m, modeling_mpt.MptAttention):
            m.forward = types.MethodType(_mpt_attn_forward_f64, m)
            n_attn += 1
    assert n_attn == cfg.n_layers
    slopes = (-a64[:, 0, -2]).tolist()  # the bias one key before the last is -slope
    return dict(alibi_slopes=slopes, alibi_bias_rel_err_f32=rel, mpt_attention_patched=n_attn)


def _patch_gpt2_f64(model64):
    """GPT-2: nothing to patch. Its eager_attention_forward calls softmax without a dtype, LayerNorm,
    Conv1D (addmm), NewGELU and the mask follow the input dtype. Only reorder_and_upcast_attn
    (off here) would compute in float32."""
    assert not model64.config.reorder_and_upcast_attn
    return dict(gpt2_patches=0)


def _mixtral_router_forward_f64(self, hidden_states):
    """MixtralTopKRouter.forward without ``.float()`` on the router logits (same ops otherwise)."""
    hidden_states = hidden_states.reshape(-1, self.hidden_dim)
    router_logits = F.linear(hidden_states, self.weight)
    router_probs = torch.nn.functional.softmax(router_logits, dim=-1)
    router_top_value, router_indices = torch.topk(router_probs, self.top_k, dim=-1)
    router_top_value /= router_top_value.sum(dim=-1, keepdim=True)
    return router_logits, router_top_value, router_indices


def _patch_mixtral_f64(model64):
    """Mixtral: MixtralTopKRouter computes its softmax on ``router_logits.float()``; the fp64 model's routers
    run the same code in float64. The replacement is checked bit-identical to HF's forward in fp32."""
    n = 0
    g = torch.Generator().manual_seed(0)
    for m in model64.modules():
        if isinstance(m, modeling_mixtral.MixtralTopKRouter):
            r32 = copy.deepcopy(m).float()
            x = torch.randn(7, m.hidden_dim, generator=g)
            for a, b in zip(r32(x), _mixtral_router_forward_f64(r32, x)):
                assert torch.equal(a, b), "Mixtral router replacement differs from HF in fp32"
            m.forward = types.MethodType(_mixtral_router_forward_f64, m)
            n += 1
    assert n == model64.config.num_hidden_layers
    return dict(mixtral_routers_patched=n)


def _gemma_rms_forward_f64(self, x):
    # Gemma2RMSNorm / Gemma3RMSNorm.forward minus the float32 round trip: x * rsqrt(mean x^2 + eps) * (1 + w)
    return (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)) * (1.0 + self.weight)


def _gemma3_rope_forward_f64(self, x, position_ids, layer_type):
    # Gemma3RotaryEmbedding.forward evaluated in float64 (each layer type's own inv_freq and scaling)
    inv = getattr(self, f"{layer_type}_inv_freq")
    att = getattr(self, f"{layer_type}_attention_scaling")
    freqs = position_ids[..., None].to(torch.float64) * inv.to(device=x.device, dtype=torch.float64)
    emb = torch.cat((freqs, freqs), dim=-1)
    return (emb.cos() * att).to(dtype=x.dtype), (emb.sin() * att).to(dtype=x.dtype)


def _gemma_inv_freq_f64(rp, head_dim):
    inv = 1.0 / (float(rp["rope_theta"]) ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim))
    assert rp.get("rope_type", "default") in ("default", "linear"), rp
    return inv / float(rp["factor"]) if rp.get("rope_type") == "linear" else inv


def _patch_gemma_f64(model64):
    """Gemma 2 / 3: the (1 + w) RMSNorms in float64 (the generic patch is Llama's w * x), the embedding
    scale as the fp64 value of hidden_size ** 0.5 (HF keeps it as an fp32 buffer), and Gemma 3's two
    rotary tables (sliding / full layers) as fp64 values. Each replacement is checked against HF's
    forward in fp32 (norms: < 1e-6 relative to the output's largest magnitude, at least 1; tables: < 1e-6)."""
    cfg = model64.config
    n_rms = n_emb = n_rope = 0
    g = torch.Generator().manual_seed(0)
    for m in model64.modules():
        cname = type(m).__name__
        if cname in ("Gemma2RMSNorm", "Gemma3RMSNorm"):
            m32 = copy.deepcopy(m).float()
            x = torch.randn(5, m.weight.shape[0], generator=g)
            ref = type(m).forward(m32, x)
            mine = (_gemma_rms_forward_f64(m32, x.double())).float()
            # relative to the output's size: a pretrained model's (1 + w) reaches ~1600 (gemma-3-270m),
            # where one fp32 ulp of HF's output is ~1e-4
            rel = ((ref - mine).abs().max() / ref.abs().max().clamp(min=1.0)).item()
            assert rel < 1e-6, f"Gemma RMSNorm replacement differs from HF (relative {rel})"
            m.forward = types.MethodType(_gemma_rms_forward_f64, m)
            n_rms += 1
        elif "ScaledWordEmbedding" in cname:
            assert abs(m.embed_scale.item() - cfg.hidden_size ** 0.5) < 1e-6 * cfg.hidden_size ** 0.5
            m.embed_scale = torch.tensor(cfg.hidden_size ** 0.5, dtype=torch.float64)
            n_emb += 1
        elif cname == "Gemma3RotaryEmbedding":
            for lt in m.layer_types:
                inv64 = _gemma_inv_freq_f64(cfg.rope_parameters[lt], cfg.head_dim)
                hf = getattr(m, f"{lt}_inv_freq")
                assert ((hf.double() - inv64).abs() / inv64).max().item() < 1e-6, lt
                assert getattr(m, f"{lt}_attention_scaling") == 1.0
                setattr(m, f"{lt}_inv_freq", inv64.clone())
                setattr(m, f"{lt}_original_inv_freq", inv64.clone())
            m.forward = types.MethodType(_gemma3_rope_forward_f64, m)
            n_rope += 1
    assert n_emb == 1 and n_rms >= 4 * cfg.num_hidden_layers + 1
    return dict(gemma_rms_patched=n_rms, gemma_embed_scale_f64=n_emb, gemma3_rope_patched=n_rope)


FP64_FAMILY_PATCHES = {"bloom": _patch_bloom_f64, "mpt": _patch_mpt_f64, "gpt2": _patch_gpt2_f64,
                       "mixtral": _patch_mixtral_f64, "gemma2": _patch_gemma_f64, "gemma3_text": _patch_gemma_f64}
# families whose rotary module keeps one table per layer type (patched by their FP64_FAMILY_PATCHES entry)
OWN_ROPE_MODEL_TYPES = ("gemma3_text",)


def _check_baichuan_f64(model64, hf_inv_freq_f32):
    """Baichuan (tools/baichuan_ref.py) after its enable_true_fp64(): the fp64 rotary tables (RoPE
    variants) or the fp64 ALiBi bias + causal -inf mask (ALiBi variants) equal the fp32 ones the
    reference's fp32 path uses, to < 1e-6 relative (and the same -inf layout)."""
    inner = model64.model
    assert inner.true_fp64
    L = 64
    rot = inner.rotary_emb
    if rot is not None:
        assert inner.position == "rope" and hf_inv_freq_f32 is not None
        # (the module's inv_freq attribute is not a buffer: after from_pretrained it may be a meta tensor;
        # the tables are always recomputed by compute_inv_freq, so that is what is compared)
        assert hf_inv_freq_f32.shape == (rot.dim // 2,)
        inv32, inv64 = rot.compute_inv_freq(torch.float32), rot.compute_inv_freq(torch.float64)
        rel_inv = ((inv32.double() - inv64).abs() / inv64).max().item()
        cos64, sin64 = rot.tables(L, torch.device("cpu"))
        assert cos64.dtype == torch.float64
        rot32 = baichuan_ref.BaichuanRotaryEmbedding(rot.dim, rot.max_position_embeddings, rot.generation)
        cos32, sin32 = rot32.tables(L, torch.device("cpu"))
        assert cos32.dtype == torch.float32
        err_tab = max((cos32.double() - cos64).abs().max().item(), (sin32.double() - sin64).abs().max().item())
        assert rel_inv < 1e-6 and err_tab < 1e-6, f"baichuan fp64 rope differs from fp32 ({rel_inv}, {err_tab})"
        return dict(rope_inv_freq_rel_err_f32=rel_inv, rope_table_abs_err_f32=err_tab, rotary_dims=2 * inv64.numel())
    assert inner.position == "alibi" and hf_inv_freq_f32 is None
    H = model64.config.num_attention_heads
    cpu = torch.device("cpu")
    m64 = inner._alibi_mask(None, 1, L, torch.float64, cpu)
    # the reference's fp32 path (true_fp64 off) on the same config
    m32 = type(inner)._alibi_mask(types.SimpleNamespace(true_fp64=False, config=model64.config),
                                  None, 1, L, torch.float32, cpu)
    assert m64.dtype == torch.float64 and m32.dtype == torch.float32 and m64.shape == m32.shape == (H, L, L)
    fin = torch.isfinite(m64)
    assert torch.equal(fin, torch.isfinite(m32)) and torch.equal(fin[0], torch.ones(L, L, dtype=torch.bool).tril())
    rel = _rel_err(m32[fin], m64[fin])
    s64 = torch.tensor(baichuan_ref.alibi_slopes(H), dtype=torch.float64)
    rel_s = _rel_err(torch.tensor(baichuan_ref.alibi_slopes(H), dtype=torch.float32), s64)
    assert torch.equal(m64[:, -1, :], s64[:, None] * torch.arange(L, dtype=torch.float64)), "bias is not slope*j"
    assert rel < 1e-6 and rel_s < 1e-6, f"baichuan fp64 alibi differs from fp32 ({rel_s}, {rel})"
    return dict(alibi_slopes=s64.tolist(), alibi_slopes_rel_err_f32=rel_s, alibi_bias_rel_err_f32=rel)


FP64_CUSTOM_CHECKS = {"baichuan": _check_baichuan_f64}  # run after a class's own enable_true_fp64()


def make_true_fp64(model64, hf_inv_freq_f32=None):
    """Patch an fp64 model instance so that its forward is float64 throughout (see module doc).

    A model class that brings its own switch (a method ``enable_true_fp64()``, e.g. a reference
    implementation outside transformers) gets that called instead of the generic patches; it may
    return a dict for the summary."""
    if hasattr(model64, "enable_true_fp64"):
        info = dict(custom_enable_true_fp64=True, **(model64.enable_true_fp64() or {}))
        if model64.config.model_type in FP64_CUSTOM_CHECKS:
            info.update(FP64_CUSTOM_CHECKS[model64.config.model_type](model64, hf_inv_freq_f32))
        return info
    n_rope = n_rms = 0
    for m in model64.modules():
        cname = type(m).__name__
        if "RMSNorm" in cname:
            m.forward = types.MethodType(_rms_forward_f64, m)
            n_rms += 1
        elif "RotaryEmbedding" in cname and model64.config.model_type not in OWN_ROPE_MODEL_TYPES:
            assert hf_inv_freq_f32 is not None
            inv64 = rope_inv_freq_f64(model64.config)
            assert getattr(m, "rope_type", "default") in ("default", "linear", "llama3", "yarn"), m.rope_type
            # a Python float (YaRN's attention factor; 1.0 otherwise), multiplied into cos / sin in fp64 below
            assert m.attention_scaling == 1.0 or m.rope_type == "yarn"
            rel = ((hf_inv_freq_f32.double() - inv64).abs() / inv64).max().item()
            assert rel < 1e-6, f"fp64 inv_freq does not match HF's fp32 inv_freq (rel {rel})"
            m.inv_freq = inv64.clone()
            m.original_inv_freq = inv64.clone()
            m.forward = types.MethodType(_rope_forward_f64, m)
            n_rope += 1
    model_type = model64.config.model_type
    if model_type in NO_ROPE_MODEL_TYPES:
        assert n_rope == 0 and hf_inv_freq_f32 is None
    elif model_type not in OWN_ROPE_MODEL_TYPES:
        assert n_rope >= 1
    info = dict(rms_patched=n_rms, rope_patched=n_rope)
    if model_type in FP64_FAMILY_PATCHES:
        info.update(FP64_FAMILY_PATCHES[model_type](model64))
    return info


@contextlib.contextmanager
def fp64_softmax():
    """HF's eager attention calls softmax(..., dtype=torch.float32); keep fp64 inputs in fp64."""
    orig = torch.nn.functional.softmax

    def softmax(input, dim=None, _stacklevel=3, dtype=None):
        if dtype == torch.float32 and input.dtype == torch.float64:
            dtype = torch.float64
        return orig(input, dim=dim, _stacklevel=_stacklevel, dtype=dtype)

    torch.nn.functional.softmax = softmax
    try:
        yield
    finally:
        torch.nn.functional.softmax = orig


@contextlib.contextmanager
def checked_fp64_forward(model):
    """Softmax patch + assert that nothing inside model.forward produces a non-fp64 float tensor."""
    det = LowPrecisionDetector()

    def pre(mod, args, kwargs):
        det.__enter__()

    def post(mod, args, kwargs, out):
        det.__exit__(None, None, None)

    h1 = model.register_forward_pre_hook(pre, with_kwargs=True)
    h2 = model.register_forward_hook(post, with_kwargs=True)
    try:
        with fp64_softmax():
            yield det
    finally:
        h1.remove()
        h2.remove()
    assert not det.hits, f"low-precision ops inside fp64 forward: {dict(det.hits)}"


class ClipCounter:
    """Counts, while active, how many outputs of MPT's attn.Wqkv exceed clip_qkv in magnitude (i.e. are clamped)."""

    def __init__(self, model):
        ac = getattr(model.config, "attn_config", None)
        self.clip = getattr(ac, "clip_qkv", None) if ac is not None else None
        self.mods = [m.Wqkv for m in model.modules() if isinstance(m, modeling_mpt.MptAttention)] if self.clip else []
        if not self.mods:
            self.clip = None  # only HF's MptAttention is known to clamp its Wqkv output
        self.counts = [[0, 0] for _ in self.mods]
        self.handles = []

    def _hook(self, i):
        def hook(mod, args, out):
            self.counts[i][0] += int((out.abs() > self.clip).sum())
            self.counts[i][1] += out.numel()
        return hook

    def __enter__(self):
        self.handles = [m.register_forward_hook(self._hook(i)) for i, m in enumerate(self.mods)]
        return self

    def __exit__(self, *exc):
        for h in self.handles:
            h.remove()
        self.handles = []

    def total(self):
        return sum(n for _, n in self.counts)

    def fraction(self):
        return sum(c for c, _ in self.counts) / self.total()

    def per_layer(self):
        return [c / n for c, n in self.counts]


FP64_MODE_ROPE = "true fp64: HF modules with fp32 softmax/RMSNorm/RoPE round trips removed"
FP64_MODE = {
    "gpt2": "true fp64: HF modules unchanged (GPT-2's eager path has no fp32 round trip); step logits from an lm_head hook",
    "bloom": "true fp64: HF modules with the fp32 softmax and fp32 ALiBi slopes removed",
    "mpt": "true fp64: HF modules with the fp32 softmax (.float()) and fp32 ALiBi slopes removed",
}


def fp64_mode_text(model64):
    if hasattr(model64, "enable_true_fp64"):
        return "true fp64: the model class's own enable_true_fp64()"
    return FP64_MODE.get(model64.config.model_type, FP64_MODE_ROPE)


def count_low_precision_ops(model, ids):
    det = LowPrecisionDetector()
    with torch.no_grad(), det:
        model(ids)
    return sum(det.hits.values()), sorted(det.hits)


def forward_logprobs(model, ids_list, dtype):
    out = []
    with torch.no_grad():
        for ids in ids_list:
            logits = model(torch.tensor([ids], dtype=torch.long), use_cache=False).logits[0]
            assert logits.dtype == dtype, logits.dtype
            out.append(F.log_softmax(logits.to(dtype), dim=-1))
    return out


def greedy_generate(model, prompt, dtype):
    """HF generate (greedy, KV cache). Returns tokens, per-step logits in `dtype`, and checks."""
    captured = []
    head = model.get_output_embeddings()

    def hook(mod, args, out):
        captured.append(out[:, -1, :].detach().clone())

    h = head.register_forward_hook(hook)
    gc = GenerationConfig(
        do_sample=False,
        num_beams=1,
        use_cache=True,
        max_new_tokens=N_GEN,
        min_new_tokens=N_GEN,
        output_scores=True,
        output_logits=True,
        return_dict_in_generate=True,
        bos_token_id=None,
        eos_token_id=None,
        pad_token_id=None,
    )
    saved_gc = model.generation_config
    model.generation_config = gc  # no model-level defaults (eos etc.) can sneak in
    try:
        input_ids = torch.tensor([prompt], dtype=torch.long)
        with torch.no_grad():
            out = model.generate(input_ids, attention_mask=torch.ones_like(input_ids), generation_config=gc)
    finally:
        h.remove()
        model.generation_config = saved_gc
    seq = out.sequences[0]
    assert seq.shape[0] == len(prompt) + N_GEN, seq.shape
    assert seq[: len(prompt)].tolist() == prompt
    new = seq[len(prompt):]
    assert len(out.scores) == N_GEN and len(out.logits) == N_GEN
    assert len(captured) >= N_GEN, len(captured)
    logits = torch.stack([c[0] for c in captured[:N_GEN]])  # [N, V], model dtype
    cap = getattr(model.config, "final_logit_softcapping", None)
    if cap is not None:  # Gemma2/3ForCausalLM.forward's lines after lm_head (checked against generate below)
        logits = torch.tanh(logits / cap) * cap
    for i in range(N_GEN):
        # no logits processor changed anything
        assert torch.equal(out.scores[i], out.logits[i]), "logits processor altered scores"
        # hooked logits are what generate saw (after its float32 cast)
        assert torch.equal(logits[i].to(torch.float32), out.logits[i][0]), "hooked logits != generate logits"
        assert int(torch.argmax(logits[i])) == int(new[i]), "greedy token != argmax of logits"
    assert logits.dtype == dtype
    return new.to(torch.int32), logits


def pad_tokens(seqs):
    tmax = max(len(s) for s in seqs)
    t = torch.full((len(seqs), tmax), -1, dtype=torch.int32)
    for b, s in enumerate(seqs):
        t[b, : len(s)] = torch.tensor(s, dtype=torch.int32)
    return t


def pad_logprobs(lps, dtype):
    tmax = max(lp.shape[0] for lp in lps)
    V = lps[0].shape[1]
    t = torch.full((len(lps), tmax, V), float("nan"), dtype=dtype)
    for b, lp in enumerate(lps):
        t[b, : lp.shape[0]] = lp.to(dtype)
    return t


def file_sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        h.update(f.read())
    return h.hexdigest()


def versions():
    return dict(
        python=platform.python_version(),
        torch=torch.__version__,
        transformers=transformers.__version__,
        safetensors=safetensors.__version__,
        numpy=np.__version__,
    )


# --------------------------------------------------------------------------
# Independent check: plain-numpy fp64 implementation that reads only the files
# in the fixture folder (config.json + *.safetensors), like the C code will.
# It doubles as an executable statement of the math the references encode.
# --------------------------------------------------------------------------

_verf = np.vectorize(math.erf)


def _np_load_weights(d):
    W = {}
    for fn in sorted(os.listdir(d)):
        if fn.startswith("model") and fn.endswith(".safetensors"):
            with safe_open(os.path.join(d, fn), framework="pt") as f:
                for k in f.keys():
                    W[k] = f.get_tensor(k).to(torch.float64).numpy()  # bf16/fp32 -> fp64 exactly
    return W


def _np_inv_freq(cfg, head_dim):
    rp = cfg["rope_parameters"]
    dim = int(head_dim * rp.get("partial_rotary_factor", 1.0))
    inv = 1.0 / float(rp["rope_theta"]) ** (np.arange(0, dim, 2, dtype=np.float64) / dim)
    if rp["rope_type"] == "linear":
        inv = inv / rp["factor"]
    elif rp["rope_type"] == "llama3":
        f, lo, hi = rp["factor"], rp["low_freq_factor"], rp["high_freq_factor"]
        old = rp["original_max_position_embeddings"]
        out = []
        for x in inv:
            wl = 2 * math.pi / x
            if wl < old / hi:
                out.append(x)
            elif wl > old / lo:
                out.append(x / f)
            else:
                sm = (old / wl - lo) / (hi - lo)
                out.append((1 - sm) * x / f + sm * x)
        inv = np.array(out)
    else:
        assert rp["rope_type"] == "default"
    return inv


def _np_rope(x, inv):  # x [T, H, D]; rotate the first 2*len(inv) dims, "rotate_half" layout
    T, r = x.shape[0], 2 * len(inv)
    ang = np.arange(T, dtype=np.float64)[:, None] * inv[None, :]
    cos = np.concatenate([np.cos(ang)] * 2, -1)[:, None, :]
    sin = np.concatenate([np.sin(ang)] * 2, -1)[:, None, :]
    xr, xp = x[..., :r], x[..., r:]
    rot = np.concatenate([-xr[..., r // 2:], xr[..., : r // 2]], -1)
    return np.concatenate([xr * cos + rot * sin, xp], -1)


def _np_attn(q, k, v, scale, bias=None):  # q [T,H,D], k/v [T,KV,D], bias [H,1|T,T] -> [T, H*D]
    T, H, _ = q.shape
    rep = H // k.shape[1]
    k, v = np.repeat(k, rep, axis=1), np.repeat(v, rep, axis=1)
    s = np.einsum("thd,shd->hts", q, k) * scale
    if bias is not None:  # ALiBi: added to the already scaled scores
        s = s + bias
    s = s + np.triu(np.full((T, T), -np.inf), 1)[None]
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    return np.einsum("hts,shd->thd", p, v).reshape(T, -1)


def _np_ln(x, w, b, eps):
    m = x.mean(-1, keepdims=True)
    var = ((x - m) ** 2).mean(-1, keepdims=True)
    return (x - m) / np.sqrt(var + eps) * w + b


def _np_rms(x, w, eps):
    return w * (x / np.sqrt((x * x).mean(-1, keepdims=True) + eps))


def _np_lin(x, W, k):
    y = x @ W[k + ".weight"].T
    return y + W[k + ".bias"] if (k + ".bias") in W else y


def _np_log_softmax(z):
    m = z.max(-1, keepdims=True)
    return z - m - np.log(np.exp(z - m).sum(-1, keepdims=True))


def _np_gelu_tanh(x, c):
    """Tanh-approximated GELU, 0.5 x (1 + tanh(c (x + 0.044715 x^3))), with the family's constant c."""
    return 0.5 * x * (1.0 + np.tanh(c * (x + 0.044715 * x ** 3)))


def _np_gelu_erf(x):
    return 0.5 * x * (1 + _verf(x / math.sqrt(2)))


def _np_alibi_slopes_bloom(n):
    """ALiBi slopes as BLOOM builds them: with m = the largest power of two <= n, heads 1..m get
    2^(-8i/m); the remaining n - m heads get the odd-numbered slopes of a 2m-head model,
    2^(-8(2j-1)/(2m)), j = 1..n-m."""
    m = 2 ** int(math.floor(math.log2(n)))
    s = [2.0 ** (-8.0 * i / m) for i in range(1, m + 1)]
    s += [2.0 ** (-8.0 * (2 * j - 1) / (2 * m)) for j in range(1, n - m + 1)]
    return np.array(s, dtype=np.float64)


MPT_HF_ALIBI_BIAS_MAX = 8  # MptModel.forward calls build_mpt_alibi_tensor without the config value


def _np_alibi_slopes_mpt(n, bias_max):
    """ALiBi slopes as MPT builds them: with P = the smallest power of two >= n, slope_k = 2^(-k*bias_max/P),
    k = 1..P; if P != n the order is the even k first (k = 2, 4, ...), then the odd k, and the first n are used."""
    P = 2 ** int(math.ceil(math.log2(n)))
    s = [2.0 ** (-k * bias_max / P) for k in range(1, P + 1)]
    if P != n:
        s = (s[1::2] + s[0::2])[:n]
    return np.array(s, dtype=np.float64)


def _np_forward_gpt2(cfg, W, ids):
    T = len(ids)
    H, E = cfg["n_head"], cfg["n_embd"]
    D = E // H
    eps = cfg["layer_norm_epsilon"]
    assert cfg["activation_function"] == "gelu_new"  # tanh GELU with sqrt(2/pi)
    assert cfg["scale_attn_weights"] and not cfg["add_cross_attention"]
    assert "lm_head.weight" not in W  # GPT-2 always ties the head to wte

    def conv1d(z, k):  # Conv1D: weight stored [in, out], y = z @ W + b
        return z @ W[k + ".weight"] + W[k + ".bias"]

    x = W["transformer.wte.weight"][ids] + W["transformer.wpe.weight"][np.arange(T)]
    for layer in range(cfg["n_layer"]):
        p = f"transformer.h.{layer}."
        assert W[p + "attn.c_attn.weight"].shape == (E, 3 * E)
        h = _np_ln(x, W[p + "ln_1.weight"], W[p + "ln_1.bias"], eps)
        qkv = conv1d(h, p + "attn.c_attn")  # [T, 3E] = [q | k | v], each [H, D] head-major
        q, k, v = (qkv[:, i * E:(i + 1) * E].reshape(T, H, D) for i in range(3))
        scale = D ** -0.5
        if cfg["scale_attn_by_inverse_layer_idx"]:
            scale /= layer + 1
        x = x + conv1d(_np_attn(q, k, v, scale), p + "attn.c_proj")
        h = _np_ln(x, W[p + "ln_2.weight"], W[p + "ln_2.bias"], eps)
        x = x + conv1d(_np_gelu_tanh(conv1d(h, p + "mlp.c_fc"), math.sqrt(2.0 / math.pi)), p + "mlp.c_proj")
    x = _np_ln(x, W["transformer.ln_f.weight"], W["transformer.ln_f.bias"], eps)
    return _np_log_softmax(x @ W["transformer.wte.weight"].T)


BLOOM_GELU_C = 0.79788456  # BLOOM's bloom_gelu_forward: sqrt(2/pi) truncated to 8 digits


def _np_forward_bloom(cfg, W, ids, gelu_c=BLOOM_GELU_C):
    T = len(ids)
    H, E = cfg["n_head"], cfg["hidden_size"]
    D = E // H
    eps = cfg["layer_norm_epsilon"]
    assert not cfg["apply_residual_connection_post_layernorm"]
    assert cfg["pretraining_tp"] == 1 or not cfg["slow_but_exact"]
    assert "lm_head.weight" not in W  # tied to word_embeddings
    slopes = _np_alibi_slopes_bloom(H)
    bias = slopes[:, None, None] * np.arange(T, dtype=np.float64)[None, None, :]  # slope_h * key index
    x = W["transformer.word_embeddings.weight"][ids]
    x = _np_ln(x, W["transformer.word_embeddings_layernorm.weight"], W["transformer.word_embeddings_layernorm.bias"], eps)
    for layer in range(cfg["n_layer"]):
        p = f"transformer.h.{layer}."
        h = _np_ln(x, W[p + "input_layernorm.weight"], W[p + "input_layernorm.bias"], eps)
        # fused, per-head interleaved like gpt_neox: rows [h*3D, h*3D+D) = q_h, then k_h, then v_h
        qkv = _np_lin(h, W, p + "self_attention.query_key_value").reshape(T, H, 3, D)
        q, k, v = qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]
        x = x + _np_lin(_np_attn(q, k, v, 1.0 / math.sqrt(D), bias), W, p + "self_attention.dense")
        h = _np_ln(x, W[p + "post_attention_layernorm.weight"], W[p + "post_attention_layernorm.bias"], eps)
        x = x + _np_lin(_np_gelu_tanh(_np_lin(h, W, p + "mlp.dense_h_to_4h"), gelu_c), W, p + "mlp.dense_4h_to_h")
    x = _np_ln(x, W["transformer.ln_f.weight"], W["transformer.ln_f.bias"], eps)
    return _np_log_softmax(x @ W["transformer.word_embeddings.weight"].T)


def _np_forward_mpt(cfg, W, ids, alibi_bias_max=MPT_HF_ALIBI_BIAS_MAX):
    T = len(ids)
    H, E = cfg["n_heads"], cfg["d_model"]
    D = E // H
    eps = cfg["layer_norm_epsilon"]
    ac = cfg["attn_config"]
    assert ac["alibi"] and ac["attn_type"] == "multihead_attention" and not ac["qk_ln"] and not ac["prefix_lm"]
    assert cfg["logit_scale"] is None and cfg["no_bias"]
    assert not any(k.endswith(".bias") for k in W) and "lm_head.weight" not in W
    scale = ac["softmax_scale"] or 1.0 / math.sqrt(D)
    clip = ac["clip_qkv"]
    slopes = _np_alibi_slopes_mpt(H, alibi_bias_max)
    bias = slopes[:, None, None] * (np.arange(T, dtype=np.float64) - (T - 1))[None, None, :]  # 0 at the last key
    zero = np.zeros(E)
    x = W["transformer.wte.weight"][ids]
    for layer in range(cfg["n_layers"]):
        p = f"transformer.blocks.{layer}."
        assert W[p + "ffn.up_proj.weight"].shape == (cfg["expansion_ratio"] * E, E)
        h = _np_ln(x, W[p + "norm_1.weight"], zero, eps)
        qkv = h @ W[p + "attn.Wqkv.weight"].T  # [T, 3E] = [q | k | v] blocks (not per-head interleaved)
        if clip:
            qkv = np.clip(qkv, -clip, clip)
        q, k, v = (qkv[:, i * E:(i + 1) * E].reshape(T, H, D) for i in range(3))
        x = x + _np_attn(q, k, v, scale, bias) @ W[p + "attn.out_proj.weight"].T
        h = _np_ln(x, W[p + "norm_2.weight"], zero, eps)
        x = x + _np_gelu_erf(h @ W[p + "ffn.up_proj.weight"].T) @ W[p + "ffn.down_proj.weight"].T
    x = _np_ln(x, W["transformer.norm_f.weight"], zero, eps)
    return _np_log_softmax(x @ W["transformer.wte.weight"].T)


BAICHUAN2_VOCAB_SIZE = 125696  # Baichuan2's tokenizer; the published Baichuan2-13B config marks NormHead only by it
BAICHUAN_ROPE_BASE = 10000.0   # hard-coded in the RoPE modeling_baichuan.py files (no config key)


def _np_baichuan_variant(cfg):
    """(rope, norm_head) for a Baichuan config.json, by the rule of the C loader and
    tools/baichuan_ref.py (written again here, from the rule's text):
    RoPE iff architectures[0] == "BaiChuanForCausalLM" (Baichuan-7B's class) or the key
    max_position_embeddings is present, else ALiBi; NormHead iff an explicit "norm_head" says so,
    else iff the key z_loss_weight is present or vocab_size == 125696."""
    archs = cfg.get("architectures") or ["BaichuanForCausalLM"]
    assert archs[0] in ("BaiChuanForCausalLM", "BaichuanForCausalLM"), archs
    gen1_7b = archs[0] == "BaiChuanForCausalLM"
    rope = gen1_7b or "max_position_embeddings" in cfg
    if cfg.get("norm_head") is not None:
        norm_head = bool(cfg["norm_head"])
    else:
        norm_head = "z_loss_weight" in cfg or cfg["vocab_size"] == BAICHUAN2_VOCAB_SIZE
    assert not (gen1_7b and norm_head), "Baichuan-7B has no NormHead"
    assert gen1_7b or not rope or norm_head, "BaichuanForCausalLM + RoPE is Baichuan2-7B, which has a NormHead"
    return rope, norm_head


def _np_alibi_slopes_baichuan(n):
    """_get_interleave(n) of the Baichuan ALiBi files: n a power of two: start = 2^(-2^-(log2 n - 3))
    = 2^(-8/n), slopes start^1..start^n; otherwise, with p = 2^floor(log2 n), the p slopes of p heads
    followed by the even-indexed (0, 2, ...) slopes of 2p heads, first n - p of them."""
    def pow2(m):
        start = 2 ** (-(2 ** -(math.log2(m) - 3)))
        return [start * start ** i for i in range(m)]

    if math.log2(n).is_integer():
        return np.array(pow2(n), dtype=np.float64)
    p = 2 ** math.floor(math.log2(n))
    return np.array(pow2(p) + list(_np_alibi_slopes_baichuan(2 * p)[0::2][: n - p]), dtype=np.float64)


def _np_forward_baichuan(cfg, W, ids, norm_head=None):
    """Baichuan-7B / -13B, Baichuan2-7B / -13B in fp64. norm_head overrides the config rule (what-if)."""
    T = len(ids)
    H, E = cfg["num_attention_heads"], cfg["hidden_size"]
    D = E // H
    eps = cfg["rms_norm_eps"]
    assert H * D == E and cfg["hidden_act"] == "silu" and not cfg["tie_word_embeddings"]
    assert not any(k.endswith(".bias") for k in W), "Baichuan has no biases"
    rope, nh = _np_baichuan_variant(cfg)
    if norm_head is not None:
        nh = norm_head
    if rope:
        assert T <= cfg["max_position_embeddings"]
        inv = 1.0 / BAICHUAN_ROPE_BASE ** (np.arange(0, D, 2, dtype=np.float64) / D)  # whole head rotated
        bias = None
    else:
        assert T <= cfg["model_max_length"]
        slopes = _np_alibi_slopes_baichuan(H)
        bias = slopes[:, None, None] * np.arange(T, dtype=np.float64)[None, None, :]  # slope_h * key position j
    x = W["model.embed_tokens.weight"][ids]
    for layer in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{layer}."
        h = _np_rms(x, W[p + "input_layernorm.weight"], eps)
        assert W[p + "self_attn.W_pack.weight"].shape == (3 * E, E)
        qkv = h @ W[p + "self_attn.W_pack.weight"].T  # rows [0,E) = q, [E,2E) = k, [2E,3E) = v; heads contiguous
        q, k, v = (qkv[:, i * E:(i + 1) * E].reshape(T, H, D) for i in range(3))
        if rope:
            q, k = _np_rope(q, inv), _np_rope(k, inv)
        x = x + _np_attn(q, k, v, D ** -0.5, bias) @ W[p + "self_attn.o_proj.weight"].T
        h = _np_rms(x, W[p + "post_attention_layernorm.weight"], eps)
        g = h @ W[p + "mlp.gate_proj.weight"].T
        x = x + (g / (1 + np.exp(-g)) * (h @ W[p + "mlp.up_proj.weight"].T)) @ W[p + "mlp.down_proj.weight"].T
    x = _np_rms(x, W["model.norm.weight"], eps)
    head = W["lm_head.weight"]
    if nh:  # NormHead: each row divided by its L2 norm
        head = head / np.sqrt((head * head).sum(-1, keepdims=True))
    return _np_log_softmax(x @ head.T)


def np_forward_logprobs(cfg, W, ids, **opts):
    T = len(ids)
    if cfg["model_type"] == "baichuan":
        return _np_forward_baichuan(cfg, W, ids, **opts)
    if cfg["model_type"] == "gpt2":
        return _np_forward_gpt2(cfg, W, ids, **opts)
    if cfg["model_type"] == "bloom":
        return _np_forward_bloom(cfg, W, ids, **opts)
    if cfg["model_type"] == "mpt":
        return _np_forward_mpt(cfg, W, ids, **opts)
    assert not opts
    if cfg["model_type"] == "gpt_neox":
        H = cfg["num_attention_heads"]
        D = cfg["hidden_size"] // H
        eps = cfg["layer_norm_eps"]
        assert cfg["hidden_act"] == "gelu"  # exact (erf) GELU
        inv = _np_inv_freq(cfg, D)
        x = W["gpt_neox.embed_in.weight"][ids]
        for layer in range(cfg["num_hidden_layers"]):
            p = f"gpt_neox.layers.{layer}."

            def ln1(z):
                return _np_ln(z, W[p + "input_layernorm.weight"], W[p + "input_layernorm.bias"], eps)

            def ln2(z):
                return _np_ln(z, W[p + "post_attention_layernorm.weight"], W[p + "post_attention_layernorm.bias"], eps)

            def mlp(z):
                h = _np_lin(z, W, p + "mlp.dense_h_to_4h")
                return _np_lin(0.5 * h * (1 + _verf(h / math.sqrt(2))), W, p + "mlp.dense_4h_to_h")

            # fused QKV, per-head interleaved: row blocks [q_h | k_h | v_h] for h = 0..H-1
            qkv = _np_lin(ln1(x), W, p + "attention.query_key_value").reshape(T, H, 3 * D)
            q, k, v = _np_rope(qkv[..., :D], inv), _np_rope(qkv[..., D:2 * D], inv), qkv[..., 2 * D:]
            a = _np_lin(_np_attn(q, k, v, D ** -0.5), W, p + "attention.dense")
            if cfg["use_parallel_residual"]:
                x = x + a + mlp(ln2(x))
            else:
                x = x + a
                x = x + mlp(ln2(x))
        x = _np_ln(x, W["gpt_neox.final_layer_norm.weight"], W["gpt_neox.final_layer_norm.bias"], eps)
        return _np_log_softmax(x @ W["embed_out.weight"].T)
    # llama / qwen2 / mistral
    assert cfg["model_type"] in ("llama", "qwen2", "mistral"), f"no numpy implementation for {cfg['model_type']}"
    H, KV = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    D = cfg.get("head_dim") or cfg["hidden_size"] // H
    eps = cfg["rms_norm_eps"]
    assert cfg["hidden_act"] == "silu"
    inv = _np_inv_freq(cfg, D)
    x = W["model.embed_tokens.weight"][ids]
    for layer in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{layer}."
        h = _np_rms(x, W[p + "input_layernorm.weight"], eps)
        q = _np_rope(_np_lin(h, W, p + "self_attn.q_proj").reshape(T, H, D), inv)
        k = _np_rope(_np_lin(h, W, p + "self_attn.k_proj").reshape(T, KV, D), inv)
        v = _np_lin(h, W, p + "self_attn.v_proj").reshape(T, KV, D)
        x = x + _np_lin(_np_attn(q, k, v, D ** -0.5), W, p + "self_attn.o_proj")
        h = _np_rms(x, W[p + "post_attention_layernorm.weight"], eps)
        g = _np_lin(h, W, p + "mlp.gate_proj")
        x = x + _np_lin(g / (1 + np.exp(-g)) * _np_lin(h, W, p + "mlp.up_proj"), W, p + "mlp.down_proj")
    x = _np_rms(x, W["model.norm.weight"], eps)
    head = W["model.embed_tokens.weight"] if cfg["tie_word_embeddings"] else W["lm_head.weight"]
    if cfg["tie_word_embeddings"]:
        assert "lm_head.weight" not in W
    return _np_log_softmax(x @ head.T)


NP_ROUTE_MARGINS = []  # a numpy MoE forward's smallest gap between the k-th and (k+1)-th router probability, per
                       # call (tools/make_moe_fixtures.py); build_fixture checks it against MIN_ROUTE_MARGIN


def numpy_spec_check(out_dir, np_forward=None, strict=True, **opts):
    """Max |numpy fp64 - stored fp64 reference| over forward and generated log-probs.

    np_forward(cfg, W, ids, **opts) defaults to np_forward_logprobs. strict=False skips the
    structural asserts (used to measure how far a *different* formula would be)."""
    np_forward = np_forward or np_forward_logprobs
    with open(os.path.join(out_dir, "config.json")) as f:
        cfg = json.load(f)
    W = _np_load_weights(out_dir)
    R = {}
    with safe_open(os.path.join(out_dir, "reference.safetensors"), framework="pt") as f:
        for k in f.keys():
            R[k] = f.get_tensor(k).numpy()
    err = 0.0
    for b, L in enumerate(R["lengths"]):
        lp = np_forward(cfg, W, R["tokens"][b, :L], **opts)
        err = max(err, float(np.abs(lp - R["forward_logprobs_f64"][b, :L]).max()))
        if strict:
            assert np.isnan(R["forward_logprobs_f64"][b, L:]).all() and np.isnan(R["forward_logprobs_f32"][b, L:]).all()
            assert (R["tokens"][b, L:] == -1).all()
    for b, P in enumerate(R["gen_prompt_lengths"]):
        seq = np.concatenate([R["gen_prompts"][b, :P], R["gen_tokens_f64"][b, :-1]])
        lp = np_forward(cfg, W, seq, **opts)[P - 1:]
        err = max(err, float(np.abs(lp - R["gen_logprobs_f64"][b]).max()))
        if strict:
            assert (lp.argmax(-1) == R["gen_tokens_f64"][b]).all()
    return err


# --------------------------------------------------------------------------
# One fixture
# --------------------------------------------------------------------------

def build_fixture(spec, out_root):
    name, seed = spec["name"], spec["seed"]
    out_dir = os.path.join(out_root, name)
    if os.path.isdir(out_dir):
        shutil.rmtree(out_dir)
    os.makedirs(out_dir)

    # ---- build + perturb + save ------------------------------------------------
    torch.manual_seed(seed)
    config = spec["config_cls"](**copy.deepcopy(spec["config"]), attn_implementation="eager")
    model = spec["model_cls"](config).eval()
    assert model.config._attn_implementation == "eager"
    perturb_counts = perturb_norms_and_biases(model, seed + 1)

    save_model = model if spec["save_dtype"] == torch.float32 else copy.deepcopy(model).to(spec["save_dtype"])
    kw = {} if spec["max_shard_size"] is None else dict(max_shard_size=spec["max_shard_size"])
    save_model.save_pretrained(out_dir, **kw)
    if spec.get("save_fused_experts"):
        # transformers v5's in-memory names and 3-D expert tensors, as some converters save them
        # (save_pretrained writes the published one-tensor-per-expert layout back)
        sd = {k: v.detach().contiguous() for k, v in save_model.state_dict().items()
              if not (config.tie_word_embeddings and k == "lm_head.weight")}
        assert any(k.endswith("mlp.experts.gate_up_proj") for k in sd), "no fused expert tensors in the state dict"
        os.remove(os.path.join(out_dir, "model.safetensors"))
        save_safetensors_canonical(sd, os.path.join(out_dir, "model.safetensors"), {"format": "pt"})
    load_kw = spec.get("load_kwargs", {})

    # ---- reload from disk in fp32 (bf16 -> fp32 is exact widening) -------------
    ref32 = spec["model_cls"].from_pretrained(out_dir, dtype=torch.float32, attn_implementation="eager",
                                              **load_kw).eval()
    assert ref32.config._attn_implementation == "eager"
    mem = dict(model.named_parameters())
    for pname, p in ref32.named_parameters():
        expect = mem[pname].detach().to(spec["save_dtype"]).to(torch.float32)
        assert torch.equal(p.detach(), expect), f"reloaded {pname} differs"
    if config.tie_word_embeddings:
        assert ref32.get_output_embeddings().weight is ref32.get_input_embeddings().weight
    else:
        assert ref32.get_output_embeddings().weight is not ref32.get_input_embeddings().weight

    # Biases really non-zero?
    for pname, p in ref32.named_parameters():
        if pname.endswith("bias"):
            assert p.abs().min().item() > 0 and p.abs().max().item() > 1e-2, pname

    rope_mod = [m for m in ref32.modules() if "RotaryEmbedding" in type(m).__name__]
    assert len(rope_mod) <= 1
    # None: ALiBi / learned positions; Gemma 3: the full layers' table (one per layer type)
    hf_inv_freq = (getattr(rope_mod[0], "inv_freq", None) if rope_mod else None)
    if rope_mod and hf_inv_freq is None:
        hf_inv_freq = rope_mod[0].full_attention_inv_freq
    hf_inv_freq = hf_inv_freq.detach().clone() if hf_inv_freq is not None else None

    if "experts_implementation" in load_kw:
        assert ref32.config._experts_implementation == load_kw["experts_implementation"]
    ref64 = copy.deepcopy(ref32).double().eval()
    native64 = copy.deepcopy(ref32).double().eval()  # plain model.double(), for comparison only
    patch_info = make_true_fp64(ref64, hf_inv_freq)

    V = config.vocab_size
    g = torch.Generator().manual_seed(seed + 2)
    fwd_seqs = [torch.randint(0, V, (L,), generator=g).tolist() for L in FWD_LENGTHS]
    gen_prompts = [torch.randint(0, V, (L,), generator=g).tolist() for L in GEN_PROMPT_LENGTHS]

    clip32, clip64 = ClipCounter(ref32), ClipCounter(ref64)  # MPT clip_qkv; inert for the others

    # ---- full forward ----------------------------------------------------------
    with clip32:
        fwd32 = forward_logprobs(ref32, fwd_seqs, torch.float32)
    with checked_fp64_forward(ref64), clip64:
        fwd64 = forward_logprobs(ref64, fwd_seqs, torch.float64)
    fwd64_native = forward_logprobs(native64, fwd_seqs, torch.float64)
    n_lowp_native, lowp_ops_native = count_low_precision_ops(native64, torch.tensor([fwd_seqs[1]]))

    # ---- greedy generate -------------------------------------------------------
    gen_tok32, gen_lp32, gen_tok64, gen_lp64, margins = [], [], [], [], []
    sc64 = sc32 = 0.0
    for prompt in gen_prompts:
        with clip32:
            t32, l32 = greedy_generate(ref32, prompt, torch.float32)
        with checked_fp64_forward(ref64), clip64:
            t64, l64 = greedy_generate(ref64, prompt, torch.float64)
        top2 = torch.topk(l64, 2, dim=-1).values
        margins.append(top2[:, 0] - top2[:, 1])
        lp32 = F.log_softmax(l32, dim=-1)
        lp64 = F.log_softmax(l64, dim=-1)
        gen_tok32.append(t32)
        gen_tok64.append(t64)
        gen_lp32.append(lp32)
        gen_lp64.append(lp64)

        # self-consistency: no-cache forward over prompt + generated tokens
        full = prompt + t64.tolist()[:-1]
        P = len(prompt)
        with checked_fp64_forward(ref64):
            (f64,) = forward_logprobs(ref64, [full], torch.float64)
        sc64 = max(sc64, (f64[P - 1:] - lp64).abs().max().item())
        (f32,) = forward_logprobs(ref32, [prompt + t32.tolist()[:-1]], torch.float32)
        sc32 = max(sc32, (f32[P - 1:] - lp32).abs().max().item())

    margins = torch.stack(margins)  # [B, N] float64
    min_margin = margins.min().item()
    tokens_agree = all(torch.equal(a, b) for a, b in zip(gen_tok32, gen_tok64))

    assert min_margin > MIN_MARGIN, f"{name}: min greedy margin {min_margin:.3g} <= {MIN_MARGIN}; change seed"
    assert sc64 < SELF_CONSISTENCY_TOL_F64, f"{name}: fp64 cached vs forward {sc64:.3g}"
    assert sc32 < SELF_CONSISTENCY_TOL_F32, f"{name}: fp32 cached vs forward {sc32:.3g}"
    assert tokens_agree, f"{name}: fp32 and fp64 greedy tokens differ"
    clip_stats = None
    if clip32.clip:
        clip_stats = dict(clip=clip32.clip, f32=clip32.fraction(), f64=clip64.fraction(),
                          f64_per_layer=clip64.per_layer(), n_values=clip64.total())
        lo, hi = MIN_CLIP_FRACTION, MAX_CLIP_FRACTION
        for frac in (clip_stats["f32"], clip_stats["f64"]):
            assert lo <= frac <= hi, f"{name}: clip_qkv clips {frac:.3%} of q/k/v values, want [{lo:.0%}, {hi:.0%}]"
    for lp in fwd32 + fwd64 + gen_lp32 + gen_lp64:
        assert torch.isfinite(lp).all()

    # ---- statistics for the README ---------------------------------------------
    fwd_diff_32_64 = max((a.double() - b).abs().max().item() for a, b in zip(fwd32, fwd64))
    fwd_diff_native = max((a - b).abs().max().item() for a, b in zip(fwd64_native, fwd64))
    all_lp64 = torch.cat(fwd64 + gen_lp64)
    top_p = all_lp64.max(-1).values.exp()
    logit_std = torch.cat([l.std(-1) for l in gen_lp64]).mean().item()

    # ---- reference.safetensors ----------------------------------------------
    tensors = {
        "tokens": pad_tokens(fwd_seqs),
        "lengths": torch.tensor(FWD_LENGTHS, dtype=torch.int32),
        "forward_logprobs_f32": pad_logprobs(fwd32, torch.float32),
        "forward_logprobs_f64": pad_logprobs(fwd64, torch.float64),
        "gen_prompts": pad_tokens(gen_prompts),
        "gen_prompt_lengths": torch.tensor(GEN_PROMPT_LENGTHS, dtype=torch.int32),
        "gen_tokens_f32": torch.stack(gen_tok32).to(torch.int32),
        "gen_logprobs_f32": torch.stack(gen_lp32).to(torch.float32).contiguous(),
        "gen_tokens_f64": torch.stack(gen_tok64).to(torch.int32),
        "gen_logprobs_f64": torch.stack(gen_lp64).to(torch.float64).contiguous(),
        "gen_margin_f64": margins.to(torch.float64).contiguous(),
    }
    v = versions()
    metadata = {
        "fixture": name,
        "description": spec["description"],
        "seed": str(seed),
        "n_gen": str(N_GEN),
        "python_version": v["python"],
        "torch_version": v["torch"],
        "transformers_version": v["transformers"],
        "safetensors_version": v["safetensors"],
        "numpy_version": v["numpy"],
        "weights_dtype": str(spec["save_dtype"]).replace("torch.", ""),
        "fp64_mode": fp64_mode_text(ref64),
        "min_margin_f64": repr(min_margin),
        "selfcheck_cached_vs_forward_f64": repr(sc64),
        "selfcheck_cached_vs_forward_f32": repr(sc32),
    }
    ref_path = os.path.join(out_dir, "reference.safetensors")
    save_safetensors_canonical(tensors, ref_path, metadata)

    # read back
    with safe_open(ref_path, framework="pt") as f:
        assert f.metadata() == metadata
        for k, t in tensors.items():
            assert torch.equal(f.get_tensor(k).nan_to_num(7.0), t.nan_to_num(7.0)), k

    np_forward = spec.get("np_forward")  # optional numpy implementation for families not covered here
    NP_ROUTE_MARGINS.clear()
    np_err = numpy_spec_check(out_dir, np_forward)
    assert np_err < NUMPY_SPEC_TOL, f"{name}: numpy fp64 re-implementation differs by {np_err:.3g}"
    if NP_ROUTE_MARGINS:
        route_margin = min(NP_ROUTE_MARGINS)
        assert route_margin > MIN_ROUTE_MARGIN, f"{name}: router top-k margin {route_margin:.3g}; change seed"
    # What a plausible misreading would cost (both computed by the same numpy code, measured against the references)
    what_if = {}
    if config.model_type == "mpt":
        what_if["alibi_bias_max from config.json"] = numpy_spec_check(
            out_dir, strict=False, alibi_bias_max=ref32.config.attn_config.alibi_bias_max)
    if config.model_type == "bloom":
        what_if["GELU constant sqrt(2/pi) instead of 0.79788456"] = numpy_spec_check(
            out_dir, strict=False, gelu_c=math.sqrt(2.0 / math.pi))

    with open(os.path.join(out_dir, "config.json")) as f:
        written_cfg = json.load(f)
    if "baichuan_variant" in spec:
        # the variant the written config.json means, by the reference's rule and by the numpy code's own copy
        want = spec["baichuan_variant"]
        assert baichuan_ref.detect_variant(written_cfg) == want == ref32.variant, (want, written_cfg)
        rope, nh = _np_baichuan_variant(written_cfg)
        assert ("rope" if rope else "alibi", nh) == baichuan_ref.VARIANTS[want][:2], want
        what = ("a plain lm_head (NormHead's row normalisation left out)" if nh
                else "a NormHead (lm_head rows L2-normalised; the Baichuan2 head)")
        what_if[what] = numpy_spec_check(out_dir, strict=False, norm_head=not nh)

    files = {}
    for fn in sorted(os.listdir(out_dir)):
        files[fn] = os.path.getsize(os.path.join(out_dir, fn))

    summary = dict(
        name=name,
        seed=seed,
        description=spec["description"],
        arch=written_cfg.get("architectures", ["?"])[0],
        model_type=written_cfg["model_type"],
        layers=config.num_hidden_layers,
        hidden=config.hidden_size,
        heads=config.num_attention_heads,
        kv_heads=getattr(config, "num_key_value_heads", None) or config.num_attention_heads,
        head_dim=getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads,
        vocab=V,
        tied=bool(config.tie_word_embeddings),
        rope=written_cfg.get("rope_parameters"),
        rotary_dims=2 * hf_inv_freq.numel() if hf_inv_freq is not None else None,
        clip_stats=clip_stats,
        what_if=what_if,
        fp64_mode=metadata["fp64_mode"],
        weights_dtype=metadata["weights_dtype"],
        sharded=spec["max_shard_size"] is not None,
        files=files,
        n_params=sum(p.numel() for p in ref32.parameters()),
        min_margin=min_margin,
        sc64=sc64,
        sc32=sc32,
        np_err=np_err,
        fwd_diff_32_64=fwd_diff_32_64,
        fwd_diff_native=fwd_diff_native,
        n_lowp_native=n_lowp_native,
        lowp_ops_native=lowp_ops_native,
        patch_info=patch_info,
        perturb=dict(perturb_counts),
        top_p_median=top_p.median().item(),
        top_p_max=top_p.max().item(),
        logprob_std=logit_std,
        written_cfg=written_cfg,
    )
    if (written_cfg.get("rope_parameters") or {}).get("rope_type") == "llama3":
        summary["llama3_regimes"] = llama3_regimes(config)
    summary.update(family_summary(spec, config, written_cfg, summary))
    return summary


def _fmt_slopes(slopes):
    out = []
    for x in slopes:
        e = -math.log2(x)
        out.append(f"2^-{round(e)}" if abs(e - round(e)) < 1e-12 else f"{x:.8g}")
    return ", ".join(out)


def family_summary(spec, config, cfg, s):
    """README facts that differ per family: FFN width, activation, position encoding, family config."""
    mt = cfg["model_type"]
    pi = s["patch_info"]
    d = {}
    if mt == "gpt2":
        d = dict(
            intermediate=cfg["n_inner"] or 4 * cfg["n_embd"],
            act="gelu_new: tanh GELU, c = √(2/π)",
            pos="learned",
            pos_details=f"`wpe` [{cfg['n_positions']}, {cfg['n_embd']}] added to `wte`; positions 0..T−1",
            family_cfg=[f"activation_function={cfg['activation_function']}", f"n_inner={cfg['n_inner']}",
                        f"layer_norm_epsilon={cfg['layer_norm_epsilon']}",
                        f"scale_attn_weights={cfg['scale_attn_weights']}",
                        f"scale_attn_by_inverse_layer_idx={cfg['scale_attn_by_inverse_layer_idx']}",
                        f"reorder_and_upcast_attn={cfg['reorder_and_upcast_attn']}",
                        f"attn/resid/embd_pdrop={cfg['attn_pdrop']}/{cfg['resid_pdrop']}/{cfg['embd_pdrop']} (inert in eval)"],
            other_cfg=[f"n_positions={cfg['n_positions']}"],
        )
    elif mt == "bloom":
        d = dict(
            intermediate=4 * cfg["hidden_size"],
            act="tanh GELU, c = 0.79788456 (hard-coded; no config key)",
            pos="alibi",
            pos_details=f"slopes {_fmt_slopes(pi['alibi_slopes'])}; bias = slope·j (j = key index)",
            family_cfg=[f"layer_norm_epsilon={cfg['layer_norm_epsilon']}",
                        f"apply_residual_connection_post_layernorm={cfg['apply_residual_connection_post_layernorm']}",
                        f"pretraining_tp={cfg['pretraining_tp']}", f"slow_but_exact={cfg['slow_but_exact']}",
                        "word_embeddings_layernorm"],
            other_cfg=["no max positions (ALiBi)"],
        )
    elif mt == "mpt":
        ac = cfg["attn_config"]
        d = dict(
            intermediate=4 * cfg["d_model"],
            act="exact (erf) GELU (hard-coded; no config key)",
            pos="alibi",
            pos_details=f"slopes {_fmt_slopes(pi['alibi_slopes'])} (alibi_bias_max 8, as HF calls it); "
                        "bias = slope·(j − (K−1)) (K = number of keys)",
            family_cfg=[f"alibi_bias_max={ac['alibi_bias_max']} (ignored by HF 5.24, which uses 8)",
                        f"clip_qkv={ac['clip_qkv']}",
                        f"no_bias={cfg['no_bias']} (no linear biases, LayerNorms without bias)",
                        f"softmax_scale={ac['softmax_scale']} (→ 1/√head_dim)",
                        f"expansion_ratio={cfg['expansion_ratio']} (HF hard-codes 4)",
                        f"learned_pos_emb={cfg['learned_pos_emb']} (HF has no wpe)",
                        f"layer_norm_epsilon={cfg['layer_norm_epsilon']}"],
            other_cfg=[f"max_seq_len={cfg['max_seq_len']} (ALiBi table length; sequences must not be longer)"],
        )
    elif mt == "baichuan":
        rope, nh = _np_baichuan_variant(cfg)
        D = cfg["hidden_size"] // cfg["num_attention_heads"]
        markers = [f"architectures={cfg['architectures']}"]
        markers += [f"{k}={cfg[k]}" for k in ("max_position_embeddings", "model_max_length", "z_loss_weight",
                                              "norm_head") if k in cfg]
        if rope:
            pos_details = (f"base {BAICHUAN_ROPE_BASE:g} (hard-coded, no config key), rotate_half over the whole head "
                           f"(rotary dims {pi['rotary_dims']} = head_dim {D}); positions 0..T−1")
        else:
            pos_details = (f"slopes {_fmt_slopes(pi['alibi_slopes'])} (`_get_interleave`); bias = slope·j "
                           "(j = key position), added after the 1/√head_dim scaling")
        d = dict(
            intermediate=cfg["intermediate_size"],
            act="silu (SwiGLU)",
            pos="rope" if rope else "alibi",
            pos_details=pos_details,
            family_cfg=[f"variant {pi['baichuan_variant']}",
                        "NormHead (lm_head rows L2-normalised)" if nh else "plain lm_head"] + markers
                       + [f"rms_norm_eps={cfg['rms_norm_eps']}"],
            other_cfg=[f"{k}={cfg[k]}" for k in ("max_position_embeddings", "model_max_length") if k in cfg]
                      + [f"rms_norm_eps={cfg['rms_norm_eps']}", f"pad_token_id={cfg.get('pad_token_id')}"],
        )
    elif cfg.get("rope_parameters") is not None:
        rope = ", ".join(f"{k}={vv}" for k, vv in cfg["rope_parameters"].items())
        d = dict(
            intermediate=getattr(config, "intermediate_size", None),
            act={"gelu": "gelu (exact erf)"}.get(getattr(config, "hidden_act", None), getattr(config, "hidden_act", None)),
            pos="rope",
            pos_details=f"{rope}; rotary dims {s['rotary_dims']}",
        )
        if mt == "gpt_neox":
            fam = [f"use_parallel_residual={cfg.get('use_parallel_residual')}",
                   f"attention_bias={cfg.get('attention_bias')}", f"layer_norm_eps={cfg.get('layer_norm_eps')}"]
            other = list(fam)
        else:
            fam = [f"rms_norm_eps={cfg.get('rms_norm_eps')}"]
            if mt == "qwen2":
                fam.append("q/k/v bias (hard-coded)")
            elif "attention_bias" in cfg:
                fam.append(f"attention_bias={cfg['attention_bias']}")
            other = [f"rms_norm_eps={cfg.get('rms_norm_eps')}"]
            if "sliding_window" in cfg:
                fam.append(f"sliding_window={cfg.get('sliding_window')}")
                other.append(f"sliding_window={cfg.get('sliding_window')}")
        other.append(f"max_position_embeddings={cfg.get('max_position_embeddings')}")
        d.update(family_cfg=fam, other_cfg=other)
    else:
        d = dict(intermediate=getattr(config, "intermediate_size", None), act=getattr(config, "hidden_act", None),
                 pos="?", pos_details="?", family_cfg=[], other_cfg=[])
    d.update(spec.get("readme") or {})  # a spec can state what this function cannot know
    return d


# --------------------------------------------------------------------------
# README
# --------------------------------------------------------------------------

def fmt_size(n):
    return f"{n:,} B"


def write_readme(out_root, summaries):
    v = versions()
    L = []
    a = L.append
    a("# ratiocheck test fixtures")
    a("")
    a("Tiny randomly initialised Hugging Face causal LMs plus HF's reference outputs.")
    a("The `baichuan*` fixtures come from `tools/baichuan_ref.py` instead (transformers has no Baichuan")
    a("class; that file is a PyTorch re-implementation of the published `modeling_baichuan.py` remote")
    a("code, subclassing transformers' PreTrainedModel, so `save_pretrained` and `generate` are HF's).")
    a("Everything here is generated by `tools/make_fixtures.py`; do not edit by hand")
    a("(this README is generated too).")
    a("")
    a("## Regenerating")
    a("")
    a("```sh")
    a("pip install -r tools/requirements-fixtures.txt")
    a("python3 tools/make_fixtures.py            # rewrites data/fixtures/")
    a("python3 tools/make_fixtures.py --out /tmp/fx && diff /tmp/fx/SHA256SUMS data/fixtures/SHA256SUMS   # determinism check")
    a("(cd data/fixtures && sha256sum -c SHA256SUMS)                                  # checksums")
    a("python3 tools/make_fixtures.py --keep-existing   # on a CPU whose kernels round differently (see below)")
    a("```")
    a("")
    a("`SHA256SUMS` lists every file this script writes (the fixture folders below); other folders")
    a("here (`dtype/`, `ops/`, `tokenizers/`, ...) come from other generators and have their own READMEs.")
    a("")
    a("The script is seeded, runs on the CPU with one thread and deterministic torch")
    a("algorithms; with the versions below two runs on the same kind of CPU give byte-identical")
    a("files. It asserts its own checks (see below) and fails rather than writing questionable")
    a("references. On a CPU whose torch/MKL kernels round differently, the weights and configs are")
    a("still byte-identical but the references differ in the last bits (seen: up to ~4e-6 in fp32")
    a("and ~1e-14 in fp64 log-probs). `--keep-existing` then keeps each existing folder after")
    a("checking a fresh build against it (every other file identical, tokens identical, log-probs")
    a(f"within {KEEP_TOL_F32:g} fp32 / {KEEP_TOL_F64:g} fp64), builds the missing ones, and writes this")
    a("README and `SHA256SUMS` for the kept files (numbers stored in or recomputed from them).")
    a("")
    a("Versions used:")
    a("")
    for k in ("python", "torch", "transformers", "safetensors", "numpy"):
        a(f"- {k} {v[k]}")
    a("")
    a("## Layout")
    a("")
    a("Each `data/fixtures/<name>/` is exactly what `save_pretrained` wrote (`config.json`,")
    a("`generation_config.json`, `model.safetensors` or shards + `model.safetensors.index.json`),")
    a("plus `reference.safetensors`. `config.json` is left exactly as this transformers")
    a("version wrote it: for the RoPE families rope settings live in a `rope_parameters` object")
    a("(`rope_type`, `rope_theta`, `partial_rotary_factor` for gpt_neox, `factor`, ...);")
    a("there is no top-level `rope_theta`, `rope_scaling`, `rotary_pct` or `rotary_emb_base`.")
    a("gpt2/bloom/mpt configs use their own key names (`n_embd`/`n_head`/`n_layer`, `n_head`/`n_layer`,")
    a("`d_model`/`n_heads`/`n_layers`, MPT's attention settings in an `attn_config` object).")
    a("Tied models (`tie_word_embeddings: true`) store no lm_head weight. gpt2/bloom/mpt tensor")
    a("names carry the `transformer.` prefix that `save_pretrained` writes for the *ForCausalLM /")
    a("LMHeadModel classes.")
    a("baichuan configs are `BaichuanConfig` of `tools/baichuan_ref.py` with the published key names")
    a("(`architectures`, `max_position_embeddings` and/or `model_max_length`, `z_loss_weight`); they have")
    a("no rope settings (RoPE base 10000 is hard-coded upstream). Tensor names are the upstream ones")
    a("(`model.layers.N.self_attn.W_pack.weight`, untied `lm_head.weight`).")
    a("")
    irs = sorted({str(sp["config"]["initializer_range"]) for sp in FIXTURES})
    a(f"All models: attn_implementation \"eager\", initializer_range {'/'.join(irs)} (peaked but finite")
    a(f"distributions), every LayerNorm/RMSNorm weight = 1 + {PERTURB_STD}·N(0,1) and every bias")
    a(f"(including LayerNorm biases and Qwen2 q/k/v biases) = {PERTURB_STD}·N(0,1), drawn under the seed")
    a("after HF's own init (which sets norms to 1 and biases to 0).")
    a("")
    a("## Fixtures")
    a("")
    a("| fixture | class | layers | hidden | heads | kv heads | head_dim | inter | vocab | act | tied | position | weights | sharded | params |")
    a("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for s in summaries:
        a(f"| `{s['name']}` | {s['arch']} | {s['layers']} | {s['hidden']} | {s['heads']} | {s['kv_heads']} "
          f"| {s['head_dim']} | {s['intermediate']} | {s['vocab']} | {s['act']} | {s['tied']} | {s['pos']} "
          f"| {s['weights_dtype']} | {s['sharded']} | {s['n_params']:,} |")
    a("")
    a("Position encoding and the settings specific to each family (values as `config.json` has them,")
    a("with what HF actually does where that differs):")
    a("")
    a("| fixture | position | position details | family config |")
    a("|---|---|---|---|")
    for s in summaries:
        a(f"| `{s['name']}` | {s['pos']} | {s['pos_details']} | {', '.join(s['family_cfg'])} |")
    a("")
    for s in summaries:
        a(f"### `{s['name']}`")
        a("")
        a(f"{s['description']}. Seed {s['seed']}.")
        a("Other config: " + ", ".join(s["other_cfg"]) + ".")
        if s.get("upstream"):
            a("")
            a(f"Upstream code followed (through `tools/baichuan_ref.py`): {s['upstream']}.")
        if s.get("variant_marker"):
            a("")
            a(f"How config.json marks the variant: {s['variant_marker']}.")
        if s.get("clip_stats"):
            c = s["clip_stats"]
            per = ", ".join(f"{x:.1%}" for x in c["f64_per_layer"])
            a("")
            a(f"clip_qkv = {c['clip']}: in the reference runs (all forward sequences and generate steps)")
            a(f"{c['f32']:.2%} (fp32) / {c['f64']:.2%} (fp64) of the {c['n_values']:,} Wqkv outputs have |x| > {c['clip']}")
            a(f"and are clamped (fp64 per layer: {per}); asserted to lie in [{MIN_CLIP_FRACTION:.0%}, {MAX_CLIP_FRACTION:.0%}].")
        for what, err in (s.get("what_if") or {}).items():
            code = "`tools/baichuan_ref.py`" if s.get("model_type") == "baichuan" else "HF's code"
            a("")
            a(f"Using {what} in the numpy implementation would give max |Δ log-prob| = {err:.3g} against")
            a(f"the fp64 references (the references follow {code}).")
        if "llama3_regimes" in s:
            regs, wls = s["llama3_regimes"]
            parts = [f"i={i}: wavelen {w:.1f} → {r}" for i, (r, w) in enumerate(zip(regs, wls))]
            a("")
            a("llama3 rope frequency regimes (high_freq_wavelen = orig/high_freq_factor, "
              "low_freq_wavelen = orig/low_freq_factor): " + "; ".join(parts) + ".")
        a("")
        a("| file | bytes |")
        a("|---|---|")
        for fn, n in s["files"].items():
            a(f"| {fn} | {n:,} |")
        a(f"| **total** | {sum(s['files'].values()):,} |")
        a("")
    a("## reference.safetensors")
    a("")
    a(f"B = 4 sequences/prompts, Tmax = {max(FWD_LENGTHS)}, Pmax = {max(GEN_PROMPT_LENGTHS)}, N = {N_GEN} generated")
    a("tokens, V = vocab_size (the whole padded vocab). Row-major, little-endian.")
    a("")
    a("| tensor | dtype | shape | meaning |")
    a("|---|---|---|---|")
    a(f"| `tokens` | I32 | [B, Tmax] | full-forward sequences, lengths {FWD_LENGTHS}; ids uniform in [0, V) from the seed; padding = -1 |")
    a("| `lengths` | I32 | [B] | lengths of `tokens` rows |")
    a("| `forward_logprobs_f32` | F32 | [B, Tmax, V] | fp32 model, each sequence run alone (batch 1, no padding, no cache): `log_softmax(logits, -1)` at every position; position t = distribution of the token after tokens[0..t]. Padding cells NaN |")
    a("| `forward_logprobs_f64` | F64 | [B, Tmax, V] | same, fp64 model (\"true fp64\", below) |")
    a(f"| `gen_prompts` | I32 | [B, Pmax] | greedy prompts, lengths {GEN_PROMPT_LENGTHS}; padding = -1 |")
    a("| `gen_prompt_lengths` | I32 | [B] | prompt lengths |")
    a(f"| `gen_tokens_f32` | I32 | [B, N] | `model.generate(do_sample=False, use_cache=True, min_new_tokens=max_new_tokens={N_GEN})`, fp32 model, each prompt alone; EOS disabled |")
    a("| `gen_logprobs_f32` | F32 | [B, N, V] | log_softmax of the per-step fp32 logits; step i = the distribution that produced new token i |")
    a("| `gen_tokens_f64` | I32 | [B, N] | same with the fp64 model (identical to `gen_tokens_f32` in every fixture; asserted) |")
    a("| `gen_logprobs_f64` | F64 | [B, N, V] | log_softmax of the per-step fp64 logits |")
    a("| `gen_margin_f64` | F64 | [B, N] | top1 − top2 fp64 logit gap at each greedy step |")
    a("")
    a("`__metadata__` holds fixture, description, seed, n_gen, the python/torch/transformers/")
    a("safetensors/numpy versions, weights_dtype, fp64_mode and the check numbers below.")
    a("")
    a("For `neox_bf16` the references are for the fp32 (resp. fp64) computation on the")
    a("bf16-rounded weights: the bf16 checkpoint is loaded back with `dtype=torch.float32`")
    a("(exact widening). For every fixture the references are computed from the model")
    a("reloaded from the files in this folder, after checking it equals the in-memory model.")
    a("")
    a("### fp64 references (\"true fp64\")")
    a("")
    a("Plain `model.double()` in this transformers version is *not* fp64 throughout: eager")
    a("attention does `softmax(..., dtype=torch.float32)`, RMSNorm casts to float32, RoPE")
    a("inv_freq is computed and cos/sin evaluated in float32, and `generate` casts the step")
    a("logits to float32. The fp64 references therefore use the same HF modules with those")
    a("round trips removed: softmax stays fp64, RMSNorm is the same formula without the")
    a("casts, RoPE inv_freq is recomputed in fp64 by HF's formulas (default/linear/llama3;")
    a("checked to match HF's fp32 values to < 1e-6 relative) and cos/sin are fp64; step logits")
    a("are read from a hook on the lm_head. A TorchDispatchMode asserts that no non-fp64")
    a("floating tensor is created inside the model's forward in those runs. Everything else")
    a("(LayerNorm, GELU/SiLU, matmuls, causal mask) is HF's code unchanged. In fp32 the")
    a("HF code is used as is.")
    a("")
    a("Families without RoPE have their own float32 round trips, removed the same way")
    a("(one patch function per family in the script):")
    a("")
    a("- bloom (`_patch_bloom_f64`): `_get_alibi_slopes` builds the slopes with")
    a("  `torch.full(..., dtype=torch.float32)`, so both ALiBi paths (no attention mask:")
    a("  `slopes * arange(kv_length)`; 2-D mask: `build_alibi_tensor`) give a float32 bias that is")
    a("  then cast to the model dtype (the references take the first path: `generate` drops an")
    a("  all-ones attention mask); attention does `F.softmax(..., dtype=torch.float32)`. While")
    a("  the fp64 model's `BloomModel.forward` runs, `_get_alibi_slopes` is replaced by the same")
    a("  function in float64 (slopes and the bias built through `build_alibi_tensor` checked equal")
    a("  to HF's fp32 values to < 1e-6 relative); the softmax as for the other families.")
    a("- mpt (`_patch_mpt_f64`): `build_mpt_alibi_tensor` computes the exponents with `.float()`")
    a("  (then `pow`/reciprocal in float32) and `MptAttention.forward` runs")
    a("  `softmax(attention_scores.float())`. The fp64 model gets the same bias function in float64")
    a("  (checked against HF's fp32 bias to < 1e-6 relative) and the same attention forward minus the")
    a("  `.float()` (checked bit-identical to HF's forward on an fp32 copy of the model).")
    a("- gpt2 (`_patch_gpt2_f64`): nothing to remove. Its eager attention calls softmax without a")
    a("  dtype, and LayerNorm, Conv1D (`addmm`), NewGELU and the mask follow the input dtype; only")
    a("  `reorder_and_upcast_attn` (false here) would compute in float32. The detector confirms it.")
    a("")
    a("A model class from outside transformers may bring its own `enable_true_fp64()`; the script")
    a("then calls that instead of these patches, and still asserts the detector.")
    a("")
    a("- baichuan (`tools/baichuan_ref.py`, `BaichuanForCausalLM.enable_true_fp64()`): the reference's")
    a("  fp32 round trips after `.double()` are RMSNorm's `.to(torch.float32)`, the rotary inv_freq /")
    a("  cos / sin tables (fp32 in both generations; Baichuan2-7B also rotates q/k in fp32), the ALiBi")
    a("  slopes (`torch.Tensor(list)`: fp32) and `slope·j` / triu mask built in fp32, mask fill values")
    a("  and the `torch.max` bound (fp32 0-dim tensors) and Baichuan-7B's `softmax(..., dtype=torch.float32)`.")
    a("  `enable_true_fp64()` computes all of them in fp64 by the same formulas (slopes from the Python")
    a("  doubles of `_get_interleave`); `_check_baichuan_f64` checks the fp64 rotary inv_freq and tables,")
    a("  resp. the fp64 ALiBi bias (same -inf layout, bias = slope·j), against the fp32 ones to < 1e-6.")
    a("  NormHead's `F.normalize` follows the weight dtype (fp64 after `.double()`).")
    a("")
    a("## Checks (asserted by the script) and measured numbers")
    a("")
    a(f"- min greedy margin (fp64 top1 − top2 logit, over all B×N steps) > {MIN_MARGIN}")
    a(f"- fp64 self-consistency: max |cached `generate` step log-probs − no-cache forward over prompt+generated| < {SELF_CONSISTENCY_TOL_F64}")
    a(f"- same in fp32 < {SELF_CONSISTENCY_TOL_F32}")
    a("- `scores` == raw `logits` at every step (no logits processor active), greedy token = argmax")
    a("- fp32 and fp64 greedy tokens identical; all stored log-probs finite")
    a("- the reloaded model's parameters equal the in-memory model's (rounded to the stored dtype)")
    a("- an independent plain-numpy fp64 implementation (`np_forward_logprobs` in the script), reading")
    a("  only `config.json` + `*.safetensors` from the fixture folder, reproduces `forward_logprobs_f64`")
    a(f"  and `gen_logprobs_f64` to < {NUMPY_SPEC_TOL} and the greedy tokens exactly")
    a("- the fp64 replacements of HF's float32 computations (RoPE inv_freq, ALiBi slopes and bias) equal")
    a("  HF's fp32 values to < 1e-6 relative; MPT's replacement attention forward is bit-identical to HF's")
    a("  in fp32")
    a("- Baichuan: the variant `tools/baichuan_ref.py` builds (`detect_variant`) is the one the fixture is")
    a("  meant to be, and the numpy code's own copy of the config rule agrees with it")
    a("- MPT: the share of clamped q/k/v values (|x| > clip_qkv) in the reference runs is in")
    a(f"  [{MIN_CLIP_FRACTION:.0%}, {MAX_CLIP_FRACTION:.0%}], in fp32 and in fp64")
    a("")
    a("| fixture | min margin (fp64) | cached vs forward fp64 | cached vs forward fp32 | numpy fp64 vs ref fp64 | fwd fp32 vs fp64 | plain `.double()` vs true fp64 | median / max top-1 prob |")
    a("|---|---|---|---|---|---|---|---|")
    for s in summaries:
        a(f"| `{s['name']}` | {s['min_margin']:.4g} | {s['sc64']:.3g} | {s['sc32']:.3g} | {s['np_err']:.3g} "
          f"| {s['fwd_diff_32_64']:.3g} | {s['fwd_diff_native']:.3g} | {s['top_p_median']:.3f} / {s['top_p_max']:.4f} |")
    a("")
    a("All differences are max absolute differences of log-probs. \"fwd fp32 vs fp64\" is how far")
    a("HF's own fp32 computation is from the fp64 reference (a guide for fp32 tolerances).")
    a("\"plain `.double()` vs true fp64\" is how far unpatched `model.double()` would have been.")
    a("")
    a("## Notes for implementers (all verified by the numpy check)")
    a("")
    a("- gpt_neox: `attention.query_key_value` is fused and per-head interleaved: output rows")
    a("  `[h*3*D, h*3*D+D)` are q of head h, the next D rows k, the next D rows v. RoPE rotates")
    a("  the first `rotary_dims = int(head_dim * partial_rotary_factor)` dims of each head in the")
    a("  \"rotate_half\" layout (pairs (i, i + rotary_dims/2)); the rest pass through.")
    a("  Parallel residual: `x + attn(ln1(x)) + mlp(ln2(x))`; sequential: `x = x + attn(ln1(x));")
    a("  x = x + mlp(ln2(x))`. `hidden_act: gelu` is the exact erf GELU. LayerNorm has weight and bias.")
    a("- llama/qwen2/mistral: RoPE in the rotate_half layout over the full head_dim; query head h")
    a("  uses kv head `h // (num_attention_heads / num_key_value_heads)`; attention scale")
    a("  `head_dim**-0.5` with `head_dim` from config (mistral_headdim: 32, so q_proj is [128, 64]")
    a("  and o_proj is [64, 128]). qwen2 has q/k/v biases, no o_proj bias. RMSNorm:")
    a("  `w * x / sqrt(mean(x^2) + eps)`. MLP: `down(silu(gate(x)) * up(x))`.")
    a("- RoPE inv_freq: default `theta^(-2i/d)`; linear divides by `factor`; llama3 per")
    a("  `_np_inv_freq` in the script. Positions start at 0 for every sequence.")
    a("- Tied models have no `lm_head.weight` tensor; the head is the input embedding:")
    a("  `model.embed_tokens.weight` (llama/qwen2), `transformer.wte.weight` (gpt2, mpt),")
    a("  `transformer.word_embeddings.weight` (bloom).")
    a("- Causal masks: HF's eager masks hold `torch.finfo(dtype).min`, not -inf; gpt2 and bloom add")
    a("  the mask to the scores, mpt overwrites masked scores with it (`masked_fill`). Either way the")
    a("  masked probabilities are exactly 0, as with -inf.")
    a("- gpt2: `x = wte[ids] + wpe[0..T-1]`, then per layer `x += c_proj(attn(ln_1(x)))`,")
    a("  `x += mlp.c_proj(gelu_new(mlp.c_fc(ln_2(x))))`, final `ln_f`. Conv1D weights are stored")
    a("  **[in, out]** (`y = x @ W + b`; `c_attn.weight` is [n_embd, 3·n_embd]); `c_attn`'s output is")
    a("  `[q | k | v]`, each `n_embd` wide and split into heads `[H, D]`. Scores `q·k · D^-0.5`")
    a("  (no `scale_attn_by_inverse_layer_idx`), softmax in the input dtype. `gelu_new` =")
    a("  `0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))`. All LayerNorms have weight and bias.")
    a("- bloom: `x = LN_emb(word_embeddings[ids])` (`word_embeddings_layernorm`), then per layer")
    a("  `x += dense(attn(input_layernorm(x)))`, `x += dense_4h_to_h(gelu(dense_h_to_4h(post_attention_layernorm(x))))`")
    a("  (`apply_residual_connection_post_layernorm` false: residuals are the un-normalised x), final")
    a("  `ln_f`. `query_key_value` is fused and per-head interleaved like gpt_neox (view `[T, H, 3, D]`).")
    a("  Scores `= alibi + (q·k)/√D` (`baddbmm(alibi, q, kᵀ, beta=1, alpha=1/√D)`), alibi = slope_h·j for")
    a("  key index j (a per-row constant away from slope·(j−i), which softmax ignores). Slopes: with")
    a("  m = largest power of two ≤ H, 2^(−8i/m) for i = 1..m, then 2^(−4(2j−1)/m) for j = 1..H−m")
    a("  (6 heads: 2^-2, 2^-4, 2^-6, 2^-8, 2^-1, 2^-3). GELU: `x·0.5·(1 + tanh(0.79788456·x·(1 + 0.044715·x²)))`")
    a("  with that truncated constant (see the what-if number above).")
    a("- mpt: no biases anywhere and LayerNorms without bias (`norm_1`, `norm_2`, `norm_f`: weight only).")
    a("  Per layer `x += out_proj(attn(norm_1(x)))`, `x += down_proj(gelu_erf(up_proj(norm_2(x))))`.")
    a("  `Wqkv` output is clamped to ±clip_qkv *before* the split, then split into contiguous")
    a("  `[q | k | v]` blocks (not per-head interleaved). Scores `(q·k)·softmax_scale + alibi`,")
    a("  softmax_scale = 1/√head_dim when null. alibi = slope_h·(j − (K−1)) over the K keys (0 at")
    a("  the newest key). HF builds it with alibi_bias_max = **8** whatever `attn_config.alibi_bias_max`")
    a("  says, and ignores `expansion_ratio` (4·d_model), `no_bias`, `learned_pos_emb` and `logit_scale`.")
    a("  Slopes: P = smallest power of two ≥ H, 2^(−k·8/P) for k = 1..P, reordered even k first then")
    a("  odd k when P ≠ H, first H kept (6 heads: 2^-2, 2^-4, 2^-6, 2^-8, 2^-1, 2^-3). The ALiBi table")
    a("  has max_seq_len entries (HF cannot run longer sequences).")
    a("- baichuan (`_np_forward_baichuan`): no biases anywhere. Per layer `x += o_proj(attn(input_layernorm(x)))`,")
    a("  `x += down_proj(silu(gate_proj(h)) · up_proj(h))` with h = `post_attention_layernorm(x)`; final")
    a("  `model.norm`; RMSNorm `w · x / sqrt(mean(x²) + eps)`. `W_pack` [3E, E]: rows [0, E) are q, [E, 2E) k,")
    a("  [2E, 3E) v (contiguous blocks, not per-head interleaved); head h is the slice [h·D, (h+1)·D) of each.")
    a("  RoPE variants: rotate_half over the whole head_dim, inv_freq = 10000^(−2i/D) (hard-coded base),")
    a("  positions 0..T−1, scores `q·k/√D`. ALiBi variants: scores `q·k/√D + slope_h·j` with j the key")
    a("  position (not j − i; softmax makes them equal), slopes by `_get_interleave` (6 heads: 2^-2, 2^-4,")
    a("  2^-6, 2^-8, 2^-1, 2^-3; 40 heads: 2^-(i+1)/4 for i < 32, then 2^-(2k+1)/8). NormHead (Baichuan2):")
    a("  logits = h · (W / ‖W_row‖₂)ᵀ, each `lm_head.weight` row divided by its L2 norm; the file holds the")
    a("  raw rows. Which variant a config.json means (the C loader's rule, `_np_baichuan_variant`): RoPE iff")
    a("  `architectures[0] == \"BaiChuanForCausalLM\"` or `max_position_embeddings` is present, else ALiBi;")
    a("  NormHead iff an explicit `norm_head` says so, else iff `z_loss_weight` is present or")
    a("  `vocab_size == 125696`. The what-if numbers under each baichuan fixture show what getting NormHead")
    a("  wrong costs.")
    a("")
    L.append("")
    with open(os.path.join(out_root, "README.md"), "w") as f:
        f.write("\n".join(L))


def _is_top_level_index(fn):
    """SHA256SUMS*, README* at the top of the fixture folder: this script's or another generator's index files."""
    return fn.startswith("SHA256SUMS") or fn.startswith("README")


def write_sums(out_root, dirs=None, sums_name="SHA256SUMS"):
    """Checksums of the files under out_root/<dir> for each of `dirs` (default: every folder this
    script generates), never of top-level SHA256SUMS*/README* files or of a README.md anywhere.
    Folders written by other generators (dtype/, ops/, tokenizers/, ...) are not listed."""
    if dirs is None:
        dirs = [sp["name"] for sp in FIXTURES]
    lines = []
    walked = []
    for d in sorted(dirs):
        assert os.path.isdir(os.path.join(out_root, d)), d
        walked.extend(os.walk(os.path.join(out_root, d)))
    for root, _, fns in sorted(walked):
        for fn in sorted(fns):
            if fn == "README.md" or (os.path.samefile(root, out_root) and _is_top_level_index(fn)):
                continue
            p = os.path.join(root, fn)
            os.chmod(p, 0o644)  # safetensors writes 0600
            lines.append(f"{file_sha256(p)}  {os.path.relpath(p, out_root)}")
    lines.sort(key=lambda s: s.split("  ", 1)[1])
    with open(os.path.join(out_root, sums_name), "w") as f:
        f.write("\n".join(lines) + "\n")


KEEP_TOL_F32 = 2e-5   # --keep-existing: fresh vs kept fp32 log-probs (kernel rounding differs between CPUs)
KEEP_TOL_F64 = 1e-12  # same for fp64


def _valid_rows(R, key, lengths_key):
    return [R[key][b, :L] for b, L in enumerate(R[lengths_key].tolist())]


def adopt_existing(spec, fresh_dir, kept_dir, fresh_summary):
    """--keep-existing: keep the fixture folder already at kept_dir if a fresh build (fresh_dir) agrees
    with it: every file but reference.safetensors byte-identical, reference tensors with the same names,
    metadata keys, tokens and NaN layout, log-probs within rounding (the CPU's kernels decide the last
    bits). Returns the summary of the *kept* files: the numbers stored in or derived from them."""
    fresh_files, kept_files = sorted(os.listdir(fresh_dir)), sorted(os.listdir(kept_dir))
    assert fresh_files == kept_files, (fresh_files, kept_files)
    for fn in fresh_files:
        if fn != "reference.safetensors":
            with open(os.path.join(fresh_dir, fn), "rb") as a, open(os.path.join(kept_dir, fn), "rb") as b:
                assert a.read() == b.read(), f"{spec['name']}/{fn} differs from a fresh build"
    with safe_open(os.path.join(kept_dir, "reference.safetensors"), framework="pt") as f:
        meta = f.metadata()
        R = {k: f.get_tensor(k) for k in f.keys()}
    with safe_open(os.path.join(fresh_dir, "reference.safetensors"), framework="pt") as f:
        fresh_meta = f.metadata()
        F_ = {k: f.get_tensor(k) for k in f.keys()}
    assert sorted(R) == sorted(F_) and sorted(meta) == sorted(fresh_meta)
    diffs = {}
    for k, t in R.items():
        assert t.dtype == F_[k].dtype and t.shape == F_[k].shape, k
        if not t.is_floating_point():
            assert torch.equal(t, F_[k]), f"{spec['name']}: {k} differs from a fresh build"
            continue
        assert torch.equal(t.isnan(), F_[k].isnan()), k
        d = (t.double() - F_[k].double()).nan_to_num(0.0).abs().max().item()
        tol = KEEP_TOL_F32 if t.dtype == torch.float32 else KEEP_TOL_F64
        assert d <= tol, f"{spec['name']}: {k} differs from a fresh build by {d:.3g} > {tol}"
        diffs[k] = d

    s = dict(fresh_summary)
    s["files"] = {fn: os.path.getsize(os.path.join(kept_dir, fn)) for fn in kept_files}
    s["min_margin"] = float(meta["min_margin_f64"])
    s["sc64"] = float(meta["selfcheck_cached_vs_forward_f64"])
    s["sc32"] = float(meta["selfcheck_cached_vs_forward_f32"])
    fwd32 = _valid_rows(R, "forward_logprobs_f32", "lengths")
    fwd64 = _valid_rows(R, "forward_logprobs_f64", "lengths")
    gen64 = list(R["gen_logprobs_f64"])
    s["fwd_diff_32_64"] = max((a.double() - b).abs().max().item() for a, b in zip(fwd32, fwd64))
    top_p = torch.cat(fwd64 + gen64).max(-1).values.exp()
    s["top_p_median"], s["top_p_max"] = top_p.median().item(), top_p.max().item()
    s["logprob_std"] = torch.cat([l.std(-1) for l in gen64]).mean().item()
    s["np_err"] = numpy_spec_check(kept_dir, spec.get("np_forward"))
    assert s["np_err"] < NUMPY_SPEC_TOL
    s["kept_existing"] = dict(max_diff_to_fresh=diffs)
    return s


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=DEFAULT_OUT, help="output folder (default: data/fixtures)")
    ap.add_argument("--only", action="append", help="only this fixture (repeatable); README/SHA256SUMS not rewritten")
    ap.add_argument("--summary-json", help="also dump the per-fixture summaries here")
    ap.add_argument("--keep-existing", action="store_true",
                    help="keep fixture folders that already exist in --out when a fresh build agrees with them "
                         "(identical weights/configs, references within rounding): for CPUs whose kernels round "
                         "differently from the one that wrote them; README/SHA256SUMS then describe the kept files")
    args = ap.parse_args()

    set_determinism()
    os.makedirs(args.out, exist_ok=True)
    specs = [s for s in FIXTURES if not args.only or s["name"] in args.only]
    if args.only:
        missing = set(args.only) - {s["name"] for s in specs}
        assert not missing, f"unknown fixtures {missing}"
    summaries = []
    for spec in specs:
        kept_dir = os.path.join(args.out, spec["name"])
        if args.keep_existing and os.path.isdir(kept_dir):
            fresh_root = tempfile.mkdtemp(prefix="fixture-fresh-")
            try:
                s = adopt_existing(spec, os.path.join(fresh_root, spec["name"]), kept_dir,
                                   build_fixture(spec, fresh_root))
            finally:
                shutil.rmtree(fresh_root, ignore_errors=True)
            print(f"{spec['name']:16s} kept the existing folder; fresh build differs by at most "
                  + ", ".join(f"{k} {v:.3g}" for k, v in s["kept_existing"]["max_diff_to_fresh"].items() if v),
                  flush=True)
        else:
            s = build_fixture(spec, args.out)
        summaries.append(s)
        print(f"{s['name']:16s} params={s['n_params']:7d} files={sum(s['files'].values()):9,d} B "
              f"min_margin={s['min_margin']:.4g} sc64={s['sc64']:.3g} sc32={s['sc32']:.3g} np={s['np_err']:.3g} "
              f"f32vs64={s['fwd_diff_32_64']:.3g} native64={s['fwd_diff_native']:.3g} "
              f"top1p med={s['top_p_median']:.3f} max={s['top_p_max']:.4f}", flush=True)
    if not args.only:
        write_readme(args.out, summaries)
        write_sums(args.out)
    if args.summary_json:
        with open(args.summary_json, "w") as f:
            json.dump(summaries, f, indent=1, default=str)


if __name__ == "__main__":
    main()
