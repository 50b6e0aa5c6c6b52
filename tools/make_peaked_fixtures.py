#!/usr/bin/env python3
"""Peaked fixtures: one tiny model per family path whose next-token distributions are as
sharp as a trained model's, with fp64 references and HF's own fp32 error beside them.

The fixtures of tools/make_fixtures.py are kept flat on purpose (their fp32 noise floor has to
fit a fixed 1e-5 bound), so their top-1 probabilities sit near 1/vocab (medians 0.031-0.064): there
log-probs hardly depend on the model. The fixtures written here start from the same family specs
(make_fixtures.FIXTURES: the same HF classes, config features and fp64 patches) at a smaller size,
then multiply the final norm's weight (and bias) by a factor s, i.e. the logits by s. s is the
first value of SCALES whose fp64 forward has a median top-1 probability of at least
TARGET_MEDIAN_TOP1 over all positions. A larger s makes every logit, and so every rounding error
in the last layers, larger: the fixture stores

  forward_logprobs_f64   the true fp64 forward (make_fixtures.make_true_fp64)
  forward_logprobs_f32   HF's fp32 forward of the same weights
  hf_f32_err             max |HF fp32 - fp64| over every position and vocabulary entry

and tests/test_peaked.c holds ratiocheck's fp32 engine to a multiple of hf_f32_err, recomputed
there from the two stored tensors (the multiple and why: docs/testing-spec-conformance.md).

Usage:
    pip install -r tools/requirements-fixtures.txt
    python3 tools/make_peaked_fixtures.py              # writes data/fixtures/peaked/
    python3 tools/make_peaked_fixtures.py --out /tmp/pk && diff /tmp/pk/SHA256SUMS data/fixtures/peaked/SHA256SUMS

Seeded, single-threaded, CPU only: the same package versions give the same bytes.
"""

import argparse
import copy
import json
import os
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_fixtures as mf  # noqa: E402  (sets CUDA_VISIBLE_DEVICES before torch)

import numpy as np  # noqa: E402
import torch  # noqa: E402
from safetensors import safe_open  # noqa: E402
from st_canonical import save_safetensors_canonical  # noqa: E402

DEFAULT_OUT = os.path.join(mf.REPO_ROOT, "data", "fixtures", "peaked")
FWD_LENGTHS = [10, 5]
SCALES = [1.0, 1.5, 2.0, 3.0, 4.0, 6.0, 8.0, 12.0, 16.0, 24.0, 32.0]
TARGET_MEDIAN_TOP1 = 0.4
INIT_RANGE = 0.15  # std of HF's init; the final-norm scale does the rest

# Smaller sizes, every family feature of the base spec kept (partial rotary, GQA, explicit
# head_dim != hidden / heads, biases, heads not a power of two, clip_qkv, NormHead, ...).
PEAKED = [
    dict(base="neox_parallel", config=dict(vocab_size=64, hidden_size=16, num_hidden_layers=2,
                                           num_attention_heads=2, intermediate_size=32)),
    dict(base="neox_sequential", config=dict(vocab_size=64, hidden_size=16, num_hidden_layers=2,
                                             num_attention_heads=2, intermediate_size=32)),
    dict(base="llama_gqa", config=dict(vocab_size=64, hidden_size=16, num_hidden_layers=2, num_attention_heads=4,
                                       num_key_value_heads=2, head_dim=4, intermediate_size=32)),
    dict(base="qwen2_bias", config=dict(vocab_size=64, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                                        num_key_value_heads=1, intermediate_size=32), max_shard_size=None),
    dict(base="mistral_headdim", config=dict(vocab_size=64, hidden_size=16, num_hidden_layers=2,
                                             num_attention_heads=4, num_key_value_heads=2, head_dim=8,
                                             intermediate_size=32)),
    dict(base="gpt2_learned", config=dict(vocab_size=64, n_embd=16, n_head=2, n_layer=2, n_positions=16,
                                          n_inner=32)),
    dict(base="bloom_alibi", config=dict(vocab_size=64, hidden_size=12, n_head=3, n_layer=2)),
    dict(base="mpt_alibi", config=dict(vocab_size=64, d_model=12, n_heads=3, n_layers=2, max_seq_len=32,
                                       attn_config=dict(alibi=True, alibi_bias_max=12, clip_qkv=0.5))),
    dict(base="baichuan_7b", config=dict(vocab_size=64, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                                         intermediate_size=32, max_position_embeddings=16)),
    dict(base="baichuan2_13b", config=dict(vocab_size=64, hidden_size=12, num_hidden_layers=2,
                                           num_attention_heads=3, intermediate_size=32, model_max_length=16)),
]
FINAL_NORMS = ("gpt_neox.final_layer_norm", "model.norm", "transformer.ln_f", "transformer.norm_f")


def final_norm(model):
    mods = dict(model.named_modules())
    hits = [n for n in FINAL_NORMS if n in mods]
    assert len(hits) == 1, hits
    return hits[0], mods[hits[0]]


def describe(base, config, scale):
    """The fixture's sizes, from its config (the family features are the base fixture's)."""
    h = config.hidden_size
    heads = config.num_attention_heads
    kv = getattr(config, "num_key_value_heads", None) or heads
    hd = getattr(config, "head_dim", None) or h // heads
    return (f"{config.model_type}, the features of {base} at hidden {h}, {config.num_hidden_layers} layers, "
            f"{heads} heads ({kv} kv) of {hd}, vocab {config.vocab_size}; final norm x{scale:g}")


def fp64_forward(model64, seqs):
    with mf.checked_fp64_forward(model64):
        return mf.forward_logprobs(model64, seqs, torch.float64)


def top1_median(lps):
    return torch.cat(lps).max(-1).values.exp().median().item()


def build(pk, out_root):
    base = next(s for s in mf.FIXTURES if s["name"] == pk["base"])
    name = "peaked_" + pk["base"]
    seed = base["seed"] + 500
    out_dir = os.path.join(out_root, name)
    if os.path.isdir(out_dir):
        shutil.rmtree(out_dir)
    os.makedirs(out_dir)
    cfg = copy.deepcopy(base["config"])
    cfg.update(pk["config"])
    cfg["initializer_range"] = INIT_RANGE

    torch.manual_seed(seed)
    config = base["config_cls"](**cfg, attn_implementation="eager")
    model = base["model_cls"](config).eval()
    mf.perturb_norms_and_biases(model, seed + 1)
    norm_name, norm = final_norm(model)
    w0 = {k: p.detach().clone() for k, p in norm.named_parameters(recurse=False)}

    g = torch.Generator().manual_seed(seed + 2)
    seqs = [torch.randint(0, cfg["vocab_size"], (L,), generator=g).tolist() for L in FWD_LENGTHS]

    def with_scale(s):
        with torch.no_grad():
            for k, p in norm.named_parameters(recurse=False):
                p.copy_(w0[k] * s)

    # pick the scale on the true fp64 forward of the in-memory model
    chosen = None
    tried = []
    for s in SCALES:
        with_scale(s)
        m64 = copy.deepcopy(model).double().eval()
        inv = [m for m in model.modules() if "RotaryEmbedding" in type(m).__name__]
        mf.make_true_fp64(m64, inv[0].inv_freq.detach().clone() if inv else None)
        med = top1_median(fp64_forward(m64, seqs))
        tried.append((s, med))
        if med >= TARGET_MEDIAN_TOP1:
            chosen = s
            break
    assert chosen is not None, f"{name}: no scale reaches median top-1 {TARGET_MEDIAN_TOP1}: {tried}"

    model.save_pretrained(out_dir)
    ref32 = base["model_cls"].from_pretrained(out_dir, dtype=torch.float32, attn_implementation="eager").eval()
    rope = [m for m in ref32.modules() if "RotaryEmbedding" in type(m).__name__]
    ref64 = copy.deepcopy(ref32).double().eval()
    mf.make_true_fp64(ref64, rope[0].inv_freq.detach().clone() if rope else None)
    clip = mf.ClipCounter(ref32)
    with clip:
        fwd32 = mf.forward_logprobs(ref32, seqs, torch.float32)
    fwd64 = fp64_forward(ref64, seqs)
    hf_err = max((a.double() - b).abs().max().item() for a, b in zip(fwd32, fwd64))
    for lp in fwd32 + fwd64:
        assert torch.isfinite(lp).all()
    if clip.clip:  # MPT's clip_qkv must really clip, as in make_fixtures
        assert mf.MIN_CLIP_FRACTION <= clip.fraction() <= mf.MAX_CLIP_FRACTION, clip.fraction()
    top1 = torch.cat(fwd64).max(-1).values.exp()

    tensors = {
        "tokens": mf.pad_tokens(seqs),
        "lengths": torch.tensor(FWD_LENGTHS, dtype=torch.int32),
        "forward_logprobs_f32": mf.pad_logprobs(fwd32, torch.float32),
        "forward_logprobs_f64": mf.pad_logprobs(fwd64, torch.float64),
        "hf_f32_err": torch.tensor([hf_err], dtype=torch.float64),
    }
    v = mf.versions()
    meta = {
        "fixture": name,
        "base_fixture": pk["base"],
        "description": describe(pk["base"], config, chosen),
        "seed": str(seed),
        "initializer_range": repr(INIT_RANGE),
        "final_norm": norm_name,
        "final_norm_scale": repr(chosen),
        "top1_median_f64": repr(top1.median().item()),
        "top1_max_f64": repr(top1.max().item()),
        "hf_f32_err": repr(hf_err),
        "fp64_mode": mf.fp64_mode_text(ref64),
        "python_version": v["python"],
        "torch_version": v["torch"],
        "transformers_version": v["transformers"],
        "safetensors_version": v["safetensors"],
        "numpy_version": v["numpy"],
    }
    ref_path = os.path.join(out_dir, "reference.safetensors")
    save_safetensors_canonical(tensors, ref_path, meta)

    # independent numpy fp64 implementation (make_fixtures' own) against the stored fp64 reference
    with open(os.path.join(out_dir, "config.json")) as f:
        wcfg = json.load(f)
    W = mf._np_load_weights(out_dir)
    np_fwd = base.get("np_forward") or mf.np_forward_logprobs
    np_err = 0.0
    with safe_open(ref_path, framework="pt") as f:
        R = {k: f.get_tensor(k).numpy() for k in f.keys()}
    for b, L in enumerate(R["lengths"]):
        lp = np_fwd(wcfg, W, R["tokens"][b, :L])
        np_err = max(np_err, float(np.abs(lp - R["forward_logprobs_f64"][b, :L]).max()))
    assert np_err < mf.NUMPY_SPEC_TOL, f"{name}: numpy fp64 differs by {np_err:.3g}"
    files = {fn: os.path.getsize(os.path.join(out_dir, fn)) for fn in sorted(os.listdir(out_dir))}
    return dict(name=name, base=pk["base"], scale=chosen, tried=tried, top1_median=top1.median().item(),
                top1_max=top1.max().item(), top1_min=top1.min().item(), hf_err=hf_err, np_err=np_err,
                clip=clip.fraction() if clip.clip else None, files=files,
                n_params=sum(p.numel() for p in ref32.parameters()), description=meta["description"])


def write_readme(out_root, summaries):
    v = mf.versions()
    L = ["# Peaked fixtures", "",
         "Generated by `tools/make_peaked_fixtures.py` (do not edit; this README is generated too) with",
         f"Python {v['python']}, torch {v['torch']}, transformers {v['transformers']}, safetensors "
         f"{v['safetensors']}, numpy {v['numpy']} (pins: `tools/requirements-fixtures.txt`).", "",
         "One tiny model per family path of `tools/make_fixtures.py`, its final norm scaled so that the",
         f"median top-1 probability of the fp64 forward is at least {TARGET_MEDIAN_TOP1} (the first scale of "
         f"{SCALES} that reaches it).",
         "`hf_f32_err` is max |HF fp32 - true fp64| over all positions and the whole vocabulary: the yardstick",
         "`tests/test_peaked.c` holds ratiocheck's fp32 engine to (docs/testing-spec-conformance.md).", "",
         "| fixture | params | final-norm scale | top-1 p median / min / max (fp64) | HF fp32 err | numpy fp64 err | bytes |",
         "|---|---|---|---|---|---|---|"]
    for s in summaries:
        L.append(f"| {s['name']} | {s['n_params']} | {s['scale']:g} | {s['top1_median']:.3f} / {s['top1_min']:.3f} / "
                 f"{s['top1_max']:.3f} | {s['hf_err']:.3e} | {s['np_err']:.1e} | {sum(s['files'].values()):,} |")
    L += ["", "Per fixture: " + "; ".join(f"{s['name']}: {s['description']}" for s in summaries) + ".", "",
          "Reproduce: `python3 tools/make_peaked_fixtures.py --out /tmp/pk && diff /tmp/pk/SHA256SUMS "
          "data/fixtures/peaked/SHA256SUMS`.", ""]
    with open(os.path.join(out_root, "README.md"), "w") as f:
        f.write("\n".join(L))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=DEFAULT_OUT)
    ap.add_argument("--only", action="append")
    args = ap.parse_args()
    mf.set_determinism()
    os.makedirs(args.out, exist_ok=True)
    summaries = []
    for pk in PEAKED:
        if args.only and pk["base"] not in args.only and "peaked_" + pk["base"] not in args.only:
            continue
        s = build(pk, args.out)
        summaries.append(s)
        print(f"{s['name']:24s} params={s['n_params']:6d} bytes={sum(s['files'].values()):7,d} scale={s['scale']:g} "
              f"top1 med={s['top1_median']:.3f} min={s['top1_min']:.3f} max={s['top1_max']:.3f} "
              f"hf_f32_err={s['hf_err']:.3e} np={s['np_err']:.1e} clip={s['clip']}", flush=True)
    if not args.only:
        write_readme(args.out, summaries)
        mf.write_sums(args.out, dirs=[s["name"] for s in summaries])


if __name__ == "__main__":
    main()
