#!/usr/bin/env python3
"""The Baichuan-13B seed report on the PPO ratio: ratiocheck on ALiBi models with long prompts.

The report (Baichuan-13B #140, https://github.com/baichuan-inc/Baichuan-13B/issues/140) is about attention: in bf16 the
ALiBi bias added to the scores loses the scores' precision. tools/experiments/seed_alibi_attention.py
measures that on one attention call. This script asks the RL question: how far from 1 does it
push the PPO ratio exp(forward - generation) when a sampler (KV-cached decoding) and a trainer
(one full forward) both run the model in bf16, and what does each fix buy?

Models (random weights, seeded, stored in bf16 as the published checkpoints are; one layer so
that a 4k-token prompt runs on a 2-core CPU in minutes):
  baichuan13b  Baichuan-13B's attention: 40 heads x 128, ALiBi with its 40-head slopes
               (tools/fixtures/baichuan_ref.py writes the published config keys and tensor names)
  bloom        BLOOM-7b1's attention: 32 heads x 128 (transformers' BloomForCausalLM; its embedding
               LayerNorm weight scaled by 0.05 so that a random one-layer model does not simply
               copy its input token)
Prompts: one prompt of L random token ids per length (seeded); 2 samples of 16 tokens each.
Every run: --dtype bf16 --kernels blas (OpenBLAS GEMMs, as PyTorch on a CPU) --reference fp32
(each path also measured against an fp32 re-scoring of the same tokens). Variants:
  model        --dtype bf16: the bias as the family's code builds it
  upcast       --dtype bf16 --upcast softmax: scores, bias and softmax in fp32
  rowmax       --dtype bf16 --alibi-bias rowmax: the bias minus its row max (slope x (key - query))

Usage:
    python3 tools/experiments/seed_alibi_ratio.py [--ratiocheck build/src/ratiocheck] [--work /tmp/rc-seed-alibi]
        [--lengths 1024,2048,4096] [--models baichuan13b,bloom] [--variants model,upcast,rowmax]
        [--threads N] [--label TEXT] [--reuse] [--doc docs/experiments/seed-baichuan-ratio.md | --no-doc]
Every run's result is kept in WORK/results.json with the label of the ratiocheck that made it
(--label, default: this checkout's commit); --reuse skips the runs already there, so a long
run can be completed in parts. The document is written from the kept results and names the
label of each row.
Needs torch and transformers (tools/experiments/requirements.txt) and a built ratiocheck.
Takes about 40 minutes on a 2-core machine with the default lengths.
"""

import argparse
import json
import os
import platform
import random
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tools", "fixtures"))  # baichuan_ref

SEED = 20261202
GEN = 16
SAMPLES = 2
VOCAB = 4096

VARIANTS = {
    "model": [],
    "upcast": ["--upcast", "softmax"],
    "rowmax": ["--alibi-bias", "rowmax"],
}


def make_models(work, names):
    import torch

    paths = {}
    for name in names:
        out = os.path.join(work, name)
        paths[name] = out
        if os.path.exists(os.path.join(out, "model.safetensors")):
            continue
        torch.manual_seed(SEED)
        if name == "baichuan13b":
            from baichuan_ref import BaichuanConfig, BaichuanForCausalLM

            cfg = BaichuanConfig(architectures=["BaichuanForCausalLM"], vocab_size=VOCAB, hidden_size=5120,
                                 intermediate_size=2048, num_hidden_layers=1, num_attention_heads=40,
                                 hidden_act="silu", model_max_length=8192, initializer_range=0.02,
                                 rms_norm_eps=1e-6, tie_word_embeddings=False, bos_token_id=1, eos_token_id=2,
                                 pad_token_id=0, attn_implementation="eager")
            model = BaichuanForCausalLM(cfg)
        elif name == "bloom":
            from transformers import BloomConfig, BloomForCausalLM

            cfg = BloomConfig(vocab_size=VOCAB, hidden_size=4096, n_layer=1, n_head=32, layer_norm_epsilon=1e-5,
                              initializer_range=0.02, bos_token_id=1, eos_token_id=2, pad_token_id=0)
            model = BloomForCausalLM(cfg)
            # BLOOM normalises its embeddings (word_embeddings_layernorm): with HF's init the
            # residual stream starts at unit scale, one random layer adds little to it, and the
            # tied head then predicts the input token with probability ~1 (measured: argmax ==
            # input at every position), which would hide any drift. Scaled by 0.05 the layer
            # dominates: next-token entropy 7.5 nats, top-1 probability ~1% (measured).
            with torch.no_grad():
                model.transformer.word_embeddings_layernorm.weight.mul_(0.05)
        else:
            raise SystemExit(f"unknown model {name!r} (baichuan13b, bloom)")
        model.eval().to(torch.bfloat16).save_pretrained(out)
    return paths


def make_prompt(work, length):
    path = os.path.join(work, f"prompt{length}.ids")
    rng = random.Random(SEED + length)
    with open(path, "w") as f:
        f.write(" ".join(str(rng.randrange(3, VOCAB)) for _ in range(length)) + "\n")
    return path


def default_label():
    try:
        head = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", ROOT, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, check=True).stdout.strip()
        return head + ("-dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def run(rc, model, prompt, variant, threads):
    cmd = [rc, "--model", model, "--prompts", prompt, "--dtype", "bf16", "--kernels", "blas", "--reference", "fp32",
           "--len", str(GEN), "--samples", str(SAMPLES), "--seed", "1", "--out", "none", "--json", "-q"] + VARIANTS[variant]
    if threads:
        cmd += ["--threads", str(threads)]
    t0 = time.time()
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)}: exit {p.returncode}: {p.stderr.strip()}")
    d = json.loads(p.stdout)
    return d["lens"][0], time.time() - t0, " ".join(cmd[1:])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ratiocheck", default=os.path.join(ROOT, "build", "src", "ratiocheck"))
    ap.add_argument("--work", default="/tmp/rc-seed-alibi")
    ap.add_argument("--lengths", default="1024,2048,4096")
    ap.add_argument("--models", default="baichuan13b,bloom")
    ap.add_argument("--variants", default="model,upcast,rowmax")
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--doc", default=os.path.join(ROOT, "docs", "experiments", "seed-baichuan-ratio.md"))
    ap.add_argument("--no-doc", action="store_true")
    ap.add_argument("--label", default=None, help="which ratiocheck made the results (default: git commit)")
    ap.add_argument("--reuse", action="store_true", help="skip runs already in WORK/results.json")
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    lengths = [int(x) for x in a.lengths.split(",")]
    names = a.models.split(",")
    variants = a.variants.split(",")
    for v in variants:
        if v not in VARIANTS:
            raise SystemExit(f"unknown variant {v!r} ({', '.join(VARIANTS)})")
    label = a.label or default_label()
    cache_path = os.path.join(a.work, "results.json")
    cache = json.load(open(cache_path)) if os.path.exists(cache_path) else []
    t_start = time.time()
    paths = make_models(a.work, names)
    rows = []
    for name in names:
        for L in lengths:
            prompt = make_prompt(a.work, L)
            for v in variants:
                old = [c for c in cache if (c["model"], c["len"], c["variant"]) == (name, L, v)]
                if a.reuse and old:
                    c = old[-1]
                    rows.append((name, L, v, c["stats"], c["seconds"], c["label"]))
                    print(f"{name:12s} L={L:5d} {v:7s} kept from {cache_path} (label {c['label']})", flush=True)
                    continue
                st, secs, cmd = run(a.ratiocheck, paths[name], prompt, v, a.threads)
                cache = [c for c in cache if (c["model"], c["len"], c["variant"]) != (name, L, v)]
                cache.append(dict(model=name, len=L, variant=v, stats=st, seconds=secs, label=label))
                with open(cache_path, "w") as f:
                    json.dump(cache, f, indent=1)
                rows.append((name, L, v, st, secs, label))
                print(f"{name:12s} L={L:5d} {v:7s} ratio mean {st['mean']:.6f} std {st['std']:.3e} "
                      f"min {st['min']:.5f} max {st['max']:.5f} clipfrac {st['clipfrac']:.4f} "
                      f"identical {st['identical_frac']:.3f} |dlogp| vs fp32 gen {st['ref_gen_mean_abs']:.3e} "
                      f"fwd {st['ref_fwd_mean_abs']:.3e}  ({secs:.0f} s)", flush=True)
    import torch
    import transformers

    lines = []
    w = lines.append
    w("# The seed report on the PPO ratio: ALiBi models with long prompts in bf16")
    w("")
    w("Generated by `python3 tools/experiments/seed_alibi_ratio.py` (do not edit by hand); the attention-level")
    w("experiment is in [seed-baichuan-attention.md](seed-baichuan-attention.md).")
    w("")
    w(f"Models: random weights (seed {SEED}) stored in bf16, one layer, vocabulary {VOCAB}: "
      "`baichuan13b` has Baichuan-13B's attention (40 heads x 128, ALiBi slopes for 40 heads, "
      "bias slope x key position cast to bf16 and added in bf16 after / sqrt(128)); `bloom` has "
      "BLOOM-7b1's (32 heads x 128, bias fused into baddbmm). One prompt of L random tokens per "
      f"row, {SAMPLES} samples of {GEN} generated tokens, `--dtype bf16 --kernels blas --reference fp32`, CPU. "
      "The ratio compares the two bf16 paths with each other; the last two columns compare each "
      "path with an fp32 re-scoring of the same tokens (mean |log-prob - fp32 log-prob|): how wrong "
      "both paths are together, which the ratio alone cannot show.")
    w("")
    w("| model | prompt tokens | variant | ratio mean | std | min | max | clipfrac (eps 0.2) | "
      "mean abs dlogp vs fp32: generation | forward |")
    w("|---|---:|---|---:|---:|---:|---:|---:|---:|---:|")
    for name, L, v, st, secs, lab in rows:
        opt = " ".join(VARIANTS[v]) or "(none)"
        w(f"| {name} | {L} | {v}: `{opt}` | {st['mean']:.6f} | {st['std']:.3e} | {st['min']:.5f} | "
          f"{st['max']:.5f} | {st['clipfrac']:.4f} | {st['ref_gen_mean_abs']:.3e} | {st['ref_fwd_mean_abs']:.3e} |")
    w("")
    by_label = {}
    for name, L, v, st, secs, lab in rows:
        by_label.setdefault(lab, set()).add(name)
    made = "; ".join(f"{', '.join(sorted(ns))} by ratiocheck {lab}" for lab, ns in sorted(by_label.items()))
    w(f"Rows made {made} (the run's seconds per row are in the script's output and WORK/results.json); "
      f"torch {torch.__version__}, transformers {transformers.__version__}, python {platform.python_version()}; "
      f"{os.cpu_count()} CPUs.")
    text = "\n".join(lines) + "\n"
    print()
    print(text)
    if not a.no_doc:
        with open(a.doc, "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
