#!/usr/bin/env python3
"""Generate data/fixtures/dtype/<model>_megatron_<bf16|fp16>_v5.24.safetensors:
reference log-probs of a pure-dtype model run with Megatron-LM's
``--fp32-residual-connection`` -- the trainer setting ratiocheck emulates with
``--trainer residual=fp32`` (README "Numerics: Megatron's fp32 flags",
docs/research/autocast.md section 3).

Megatron itself needs CUDA (and apex or Transformer Engine for its norms), so
the reference is HF transformers' model converted to the dtype (what
Megatron's Float16Module does to the parameters) with the residual stream
moved to fp32 exactly where Megatron-core moves it (HEAD d98e8a64):

* ``embeddings = embeddings.float()`` (language_model_embedding.py): a forward
  hook widens the embedding output to fp32 (exact);
* every residual add in fp32 (``residual = residual.float()``,
  transformer_layer.py; bias-dropout-add upcasts the sublayer output to the
  residual's dtype, fused_bias_dropout.py): HF's own ``residual + out`` does
  exactly that once the stream is fp32 (type promotion widens the bf16 output;
  GPT-NeoX's parallel residual ``mlp + attn + x`` adds the two bf16 outputs in
  bf16 first);
* norms read the fp32 stream, compute in fp32 and return the parameters'
  dtype: apex's mixed-dtype LayerNorm/RMSNorm allocate the output as
  ``empty_like(input, gamma.options().dtype(gamma.scalar_type()))`` with fp32
  statistics; here ``F.layer_norm(x, w.float(), b.float())`` resp. HF's
  RMSNorm on the fp32 input (gamma * x_hat in fp32), then ``.to(dtype)``;
* RoPE as the pure model (Megatron: ``cos_ = (cos(freqs) * mscale).to(t.dtype)``):
  the rotary module's cos/sin, which HF casts to the hidden states' dtype, are
  cast to the model dtype.

Not emulated here or in ratiocheck: Megatron's row-parallel layers return
their bias separately (added after the GEMM's rounding); HF adds it inside.
The fixtures' bias models (qwen2_bias has biases on q/k/v only, which
Megatron adds inside the column-parallel GEMM) are unaffected except
neox_*, whose dense / dense_4h_to_h biases keep HF's placement.

The script also checks the claim that ``--attention-softmax-in-fp32`` changes
nothing bitwise in torch: softmax of bf16/fp16 scores vs the scores upcast,
softmax in fp32, rounded (the flag's unfused path), on random rows and on the
eager scores of each model; and it prints, per model and dtype, the mean
|dlogp| between this run, the pure-dtype run and fp32.

Run with the pins of tools/requirements-dtype-fixtures.txt (environment 1):
    python3 tools/make_megatron_fixtures.py
"""
import json
import os
import platform
import sys

import torch
import torch.nn.functional as F
import transformers

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_autocast_fixtures import FIXTURES, OUT, load, logprobs, mean_abs, tokens_of  # noqa: E402
from st_canonical import save_safetensors_canonical  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODELS = ["llama_gqa", "qwen2_bias", "neox_parallel", "neox_sequential"]
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


def parts(model):
    """(embedding, layers, final norm, rotary module) of a fixture model"""
    if hasattr(model, "gpt_neox"):
        b = model.gpt_neox
        return b.embed_in, b.layers, b.final_layer_norm, b.rotary_emb
    b = model.model
    return b.embed_tokens, b.layers, b.norm, b.rotary_emb


def megatron_norm(mod, dt):
    """mixed-dtype norm: fp32 input, fp32 arithmetic, output in the weights' dtype"""
    if isinstance(mod, torch.nn.LayerNorm):
        def fwd(x):
            return F.layer_norm(x.float(), mod.normalized_shape, mod.weight.float(),
                                None if mod.bias is None else mod.bias.float(), mod.eps).to(dt)
    else:  # HF RMSNorm: on an fp32 input, x * rsqrt(mean(x^2) + eps) and weight * x_hat stay fp32
        orig = mod.forward

        def fwd(x):
            assert x.dtype == torch.float32
            return orig(x).to(dt)
    mod.forward = fwd


def fp32_residual(model, dt):
    emb, layers, final_norm, rotary = parts(model)
    emb.register_forward_hook(lambda m, i, o: o.float())
    rotary.register_forward_hook(lambda m, i, o: tuple(t.to(dt) for t in o))
    for layer in layers:
        megatron_norm(layer.input_layernorm, dt)
        megatron_norm(layer.post_attention_layernorm, dt)
    megatron_norm(final_norm, dt)
    return model


def softmax_flag_check(models_scores):
    """bitwise equal fraction: softmax(s) vs softmax(s.float()).to(s.dtype)"""
    torch.manual_seed(0)
    out = {}
    for dn, dt in DTYPES.items():
        rows = [torch.randn(4096, n) * scale for n in (7, 64, 1000) for scale in (1.0, 8.0, 40.0)]
        rows += [s.to(dt).float() for s in models_scores]
        eq = tot = 0
        for r in rows:
            x = r.to(dt)
            a = torch.softmax(x, dim=-1)
            b = torch.softmax(x.float(), dim=-1).to(dt)
            assert a.dtype == dt
            eq += int((a.view(torch.int16) == b.view(torch.int16)).sum())
            tot += a.numel()
        out[dn] = (eq, tot)
    return out


def eager_scores(name):
    """the fp32 model's masked attention scores (the input of HF eager's softmax) on its reference
    sequences: a realistic input for the softmax check"""
    m = load(name, torch.float32)
    tokens, lengths = tokens_of(name)
    got = []
    orig = F.softmax

    def spy(x, *a, **k):
        if x.dim() == 4:
            got.append(x.detach().reshape(-1, x.shape[-1]).clone())
        return orig(x, *a, **k)
    try:
        F.softmax = spy
        with torch.no_grad():
            for b in range(int(tokens.shape[0])):
                L = int(lengths[b])
                m(input_ids=tokens[b:b + 1, :L].long(), use_cache=False)
    finally:
        F.softmax = orig
    assert got, "no attention softmax seen"
    return got


def write_readme(versions, rows, soft):
    import hashlib

    lines = ["# Megatron fp32-residual fixtures: log-probs of pure-dtype models with an fp32 residual stream", "",
             "Generated by `tools/make_megatron_fixtures.py` (this file too); do not edit by hand.",
             "Inputs: the fixture models `data/fixtures/<model>/` loaded in the dtype, and the tokens/lengths of",
             "their `reference.safetensors`. The residual stream is moved to fp32 where Megatron-core's",
             "`--fp32-residual-connection` moves it (the script's docstring cites the lines); norms read it in",
             "fp32 and return the dtype. Layout as the other files of this folder (README.md).",
             "Used by `tests/test_versions.c` (`test_megatron`).", "",
             "Versions: " + ", ".join(f"{k} {v}" for k, v in versions.items()), "",
             "| file | bytes | sha256 | vs HF pure | vs HF fp32 | HF pure vs fp32 |", "|---|---|---|---:|---:|---:|"]
    for path, a, b, c in rows:
        data = open(path, "rb").read()
        lines.append(f"| `{os.path.basename(path)}` | {len(data):,} | `{hashlib.sha256(data).hexdigest()[:16]}…` | "
                     f"{a:.3e} | {b:.3e} | {c:.3e} |")
    lines += ["", "(mean |Δ log-prob| over the valid positions and the vocabulary)", "",
              "`--attention-softmax-in-fp32`: torch's softmax of a bf16/fp16 row against the row upcast,",
              "softmax in fp32 and rounded back (random rows and the models' eager scores):", ""]
    for dn, (eq, tot) in soft.items():
        lines.append(f"- {dn}: {eq:,} of {tot:,} probabilities bitwise equal")
    lines.append("")
    with open(os.path.join(OUT, "README-megatron.md"), "w") as f:
        f.write("\n".join(lines))


def main():
    rows = []
    torch.manual_seed(0)
    torch.set_num_threads(1)
    versions = dict(python=platform.python_version(), torch=torch.__version__,
                    transformers=transformers.__version__)
    print(json.dumps(versions))
    scores = []
    for name in MODELS:
        scores += eager_scores(name)
    soft = softmax_flag_check(scores)
    for dn, (eq, tot) in soft.items():
        print(f"softmax-in-fp32 flag, {dn}: {eq} of {tot} probabilities bitwise equal")
    for name in MODELS:
        tokens, lengths = tokens_of(name)
        f32, _ = logprobs(load(name, torch.float32), tokens, lengths)
        for dn, dt in DTYPES.items():
            pure, _ = logprobs(load(name, dt), tokens, lengths)
            mg, logit_dt = logprobs(fp32_residual(load(name, dt), dt), tokens, lengths)
            assert logit_dt == str(dt).replace("torch.", ""), logit_dt
            meta = dict(
                generator="tools/make_megatron_fixtures.py",
                model=f"data/fixtures/{name}",
                loading=f"from_pretrained(path, dtype=torch.{str(dt).replace('torch.', '')}, "
                        "attn_implementation='eager')",
                megatron="--fp32-residual-connection: fp32 embedding output and residual adds; norms fp32 in, "
                         "dtype out; RoPE cos/sin in the dtype",
                logits_dtype=logit_dt,
                description="log_softmax(logits.float(), -1) of a full forward, batch 1, no padding, per "
                            "sequence; NaN past lengths[b]",
                **versions,
            )
            path = os.path.join(OUT, f"{name}_megatron_{dn}_v5.24.safetensors")
            save_safetensors_canonical({"logprobs": mg, "tokens": tokens, "lengths": lengths}, path, meta)
            a, b, c = mean_abs(mg, pure, lengths), mean_abs(mg, f32, lengths), mean_abs(pure, f32, lengths)
            rows.append((path, a, b, c))
            print(f"{name} {dn}: fp32-residual vs pure {a:.3e}, vs fp32 {b:.3e}, pure vs fp32 {c:.3e} "
                  f"(mean |dlogp|) -> {os.path.relpath(path, ROOT)}")
    write_readme(versions, rows, soft)


if __name__ == "__main__":
    main()
