#!/usr/bin/env python3
"""The seed report's measurement with Hugging Face transformers: generation vs forward log-probs.

Purpose
    transformers #31267 (../shared/seeds/transformers-bf16-generation-vs-forward-logprobs.txt)
    sampled with `generate(..., output_scores=True, return_dict_in_generate=True)`, took the
    sampler's log-probs from the scores, recomputed them with one `model(...)` forward over
    prompt + completion, and looked at ratio = exp(forward - generation): pythia-160m in bf16
    gave 0.71..1.24.  This script does the same, per dtype, on the same weights and prompts
    ratiocheck uses, so ratiocheck's numbers can be put next to HF's (tools/gpu/side_by_side.py).

Usage
    python3 tools/gpu/hf_seed.py --model DIR [--prompts FILE] [--len 20,40,50]
        [--dtype fp32,fp16,bf16] [--samples 2] [--seed 0] [--device cuda|cpu]
        [--num-prompts N] [--json OUT.json] [--attn sdpa|eager] [--logprob-dtype fp32|same]
        [--max-batch 512] [--dump]

Inputs
    --model DIR: a Hugging Face folder (config.json, *.safetensors, tokenizer.json).
    --prompts: ratiocheck's prompt formats (src/formats/prompts.c): *.txt one prompt per line with
        the escapes \\n (newline) and \\\\ (backslash), '\\r' before '\\n' dropped, no empty
        lines except the final newline; *.ids one prompt per line as space-separated token
        ids; *.jsonl {"prompt": "..."} or {"tokens": [...]} per line.  Text is tokenized
        with DIR/tokenizer.json through the `tokenizers` library with
        add_special_tokens=True (the post-processor's BOS/EOS, as `tokenizer(text)` adds
        them; the bundled tokenizer adds none).  --num-prompts N: the first N prompts.

Method, for each dtype (fp32, fp16, bf16)
    - AutoModelForCausalLM.from_pretrained(DIR, dtype=dtype, attn_implementation=--attn),
      .eval(), torch.no_grad(); transformers' default attention (sdpa) unless --attn.
    - Each prompt is sampled --samples times (rows p0s0, p0s1, p1s0, ...).  Prompts are
      grouped by token length and each group is one batched generate() (split into
      chunks of at most --max-batch rows): no padding anywhere, attention_mask all ones.
    - generate(do_sample=True, temperature=1.0, top_k=0, top_p=1.0,
      max_new_tokens=min_new_tokens=max(--len), output_scores=True, output_logits=True,
      return_dict_in_generate=True), after torch.manual_seed(--seed) once per dtype.
      EOS is switched off by setting model.generation_config.eos_token_id = None: with
      transformers 5, eos_token_id=None passed to generate() (or in a GenerationConfig) is
      replaced by the model's own generation_config.eos_token_id, and min_new_tokens then
      masks EOS to -inf in the scores (the sampled distribution and the "generation"
      log-probs would be renormalised without EOS, a bias of log(1 - p(EOS)) in every
      ratio).  With EOS off, no logits processor is active and the scores are the raw
      logits; the script checks scores == logits bit for bit at every step and records it.
    - Generation log-prob of token t: log_softmax(scores[t].float())[token].  transformers'
      sampling loop already upcasts each step's logits to float32
      (`outputs.logits[:, -1].to(dtype=torch.float32)`), so this is the fp32 log-softmax
      of the dtype's logits.  --logprob-dtype same: the log-softmax in the model dtype
      instead (scores cast back to it, exact), as the seed's script did.
    - For each L in --len: one batched forward model(prompt + first L generated tokens,
      use_cache=False) per prompt-length group (all rows share one length: no padding),
      forward log-prob = log_softmax(logits.float()) at the generated tokens (positions
      plen-1 .. plen+L-2).
    - ratio = exp(forward - generation), in float64 from the float32 log-probs.

Outputs
    A compact table on stdout and --json: versions (python, torch, transformers,
    tokenizers, CUDA), GPU name, settings, and per dtype: load/generate seconds,
    generated tokens/s, scores_equal_logits, and per L the ratio statistics with
    ratiocheck's key names (count, mean, std (population, ddof=0), min, max, k1, k3,
    clipfrac (|r-1| > 0.2), frac_gt_0.001/0.01/0.1, identical_frac (forward and
    generation log-probs bitwise equal), first_divergent_position, max_abs_log_ratio,
    mult_prob_err) plus seconds_forward and forward tokens/s; cross_length: how much the
    same token's forward log-prob moves between the forward passes of two lengths.
    Times are wall-clock around the generate() / model() calls only, with
    torch.cuda.synchronize() before and after; an untimed warm-up comes first (per dtype
    and batch shape, a 2-token generate and a forward over prompt + max(--len) tokens).
    --dump adds the generated tokens and both log-probs (rows in prompt x sample order).

Versions
    written for: Python 3.12, torch 2.11 (cu130), transformers 5.17, tokenizers 0.23,
    safetensors 0.8, numpy (the GPU image); tested on the CPU with Python 3.11.7,
    torch 2.15.0, transformers 5.24.0, tokenizers 0.23.3, safetensors 0.8.0, numpy 2.4.6.
"""

import argparse
import json
import os
import platform
import sys
import time

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np  # noqa: E402
import torch  # noqa: E402
import tokenizers  # noqa: E402
import transformers  # noqa: E402
from tokenizers import Tokenizer  # noqa: E402
from transformers import AutoModelForCausalLM, GenerationConfig  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
THRESHOLDS = (0.001, 0.01, 0.1)  # frac_gt_* as ratiocheck
CLIP = 0.2


def log(*a):
    print(*a, flush=True)


# --------------------------------------------------------------------------- prompts


def unescape(line):
    """src/formats/prompts.c: '\\n' -> newline, '\\\\' -> backslash, any other backslash stays."""
    out, i = [], 0
    while i < len(line):
        if line[i] == "\\" and i + 1 < len(line) and line[i + 1] in "n\\":
            out.append("\n" if line[i + 1] == "n" else "\\")
            i += 2
        else:
            out.append(line[i])
            i += 1
    return "".join(out)


def load_prompts(path, tok):
    """-> list of (text or None, token ids)."""
    with open(path, "rb") as f:
        raw = f.read().decode("utf-8")
    lines = raw.split("\n")
    if lines and lines[-1] == "":
        lines.pop()  # the final newline
    prompts = []
    for no, ln in enumerate(lines, 1):
        if ln.endswith("\r"):
            ln = ln[:-1]
        if path.endswith(".ids"):
            ids = [int(x) for x in ln.split()]
            text = None
        elif path.endswith(".jsonl"):
            if not ln.strip():
                continue
            o = json.loads(ln)
            text = o.get("prompt")
            ids = tok.encode(text, add_special_tokens=True).ids if text is not None else [int(x) for x in o["tokens"]]
        else:
            text = unescape(ln)
            if not text:
                sys.exit(f"{path}:{no}: empty prompt")
            ids = tok.encode(text, add_special_tokens=True).ids
        if not ids:
            sys.exit(f"{path}:{no}: the prompt has no tokens")
        prompts.append((text, ids))
    if not prompts:
        sys.exit(f"{path}: no prompts")
    return prompts


# --------------------------------------------------------------------------- statistics


def ratio_stats(fwd, gen):
    """fwd, gen: float32 arrays [S, L] of log-probs -> dict with ratiocheck's key names."""
    f64, g64 = fwd.astype(np.float64), gen.astype(np.float64)
    lr = f64 - g64
    r = np.exp(lr)
    ident = fwd.view(np.int32) == gen.view(np.int32)
    div_cols = np.nonzero(~ident.all(axis=0))[0]
    n = r.size
    st = {
        "count": int(n),
        "mean": float(r.mean()),
        "std": float(r.std()),  # population (ddof=0), as ratiocheck
        "min": float(r.min()),
        "max": float(r.max()),
        "k1": float((-lr).mean()),
        "k3": float((r - 1.0 - lr).mean()),
        "clipfrac": float((np.abs(r - 1.0) > CLIP).mean()),
    }
    for t in THRESHOLDS:
        st[f"frac_gt_{t:g}"] = float((np.abs(r - 1.0) > t).mean())
    st["mult_prob_err"] = float(np.exp(np.abs(lr)).mean())
    st["identical_frac"] = float(ident.mean())
    st["first_divergent_position"] = int(div_cols[0]) if len(div_cols) else -1
    st["max_abs_log_ratio"] = float(np.abs(lr).max())
    q = np.quantile(r, [0.001, 0.01, 0.5, 0.99, 0.999])
    st["quantiles"] = {"0.001": float(q[0]), "0.01": float(q[1]), "0.5": float(q[2]), "0.99": float(q[3]),
                       "0.999": float(q[4])}
    return st


# --------------------------------------------------------------------------- the measurement


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def gather_logprobs(logits, tokens, lp_dtype):
    """logits [B, T, V] (any dtype), tokens [B, T] -> float32 log-probs [B, T]."""
    x = logits.float() if lp_dtype is None else logits.to(lp_dtype)
    return torch.log_softmax(x, dim=-1).gather(-1, tokens.unsqueeze(-1)).squeeze(-1).float()


def run_dtype(args, dname, groups, n_rows, device):
    dtype = DTYPES[dname]
    lp_dtype = None if args.logprob_dtype == "fp32" else dtype
    G = max(args.lens)
    t0 = time.time()
    kw = {"attn_implementation": args.attn} if args.attn else {}
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=dtype, **kw).to(device).eval()
    sync(device)
    t_load = time.time() - t0
    # EOS off at the source (see the docstring): generate() would otherwise put it back.
    model.generation_config.eos_token_id = None
    pad = model.config.pad_token_id if model.config.pad_token_id is not None else (model.config.eos_token_id or 0)
    gcfg = GenerationConfig(do_sample=True, temperature=1.0, top_k=0, top_p=1.0, max_new_tokens=G,
                            min_new_tokens=G, eos_token_id=None, pad_token_id=pad, use_cache=True,
                            output_scores=True, output_logits=True, return_dict_in_generate=True)
    res = {"dtype": dname, "torch_dtype": str(dtype), "attn_implementation": model.config._attn_implementation,
           "param_dtype": str(next(model.parameters()).dtype), "seconds_load": t_load}

    with torch.no_grad():
        # Warm-up (untimed): kernels, cuBLAS handles, allocator; every batch shape once, with a
        # 2-token generate and a forward over prompt + max(len) positions.
        wcfg = GenerationConfig(**{**gcfg.to_dict(), "max_new_tokens": 2, "min_new_tokens": 2})
        for plen, rows in groups:
            for c in range(0, len(rows), args.max_batch):
                x = torch.tensor([ids for _, ids in rows[c : c + args.max_batch]], device=device)
                model.generate(input_ids=x, attention_mask=torch.ones_like(x), generation_config=wcfg)
                x = torch.cat([x, x[:, :1].expand(-1, G)], dim=1)
                model(input_ids=x, attention_mask=torch.ones_like(x), use_cache=False)
        sync(device)

        torch.manual_seed(args.seed)
        gen_lp = np.zeros((n_rows, G), np.float32)
        tokens = np.zeros((n_rows, G), np.int64)
        t_gen, scores_equal, n_gen_calls = 0.0, True, 0
        chunks = []
        for plen, rows in groups:
            for c in range(0, len(rows), args.max_batch):
                part = rows[c : c + args.max_batch]
                x = torch.tensor([ids for _, ids in part], device=device)
                sync(device)
                t = time.time()
                out = model.generate(input_ids=x, attention_mask=torch.ones_like(x), generation_config=gcfg)
                sync(device)
                t_gen += time.time() - t
                n_gen_calls += 1
                seq = out.sequences
                if seq.shape != (len(part), plen + G):
                    sys.exit(f"generate returned {tuple(seq.shape)}, expected {(len(part), plen + G)}")
                new = seq[:, plen:]
                scores = torch.stack(out.scores, dim=1)  # [B, G, V] float32
                scores_equal &= all(torch.equal(s, l) for s, l in zip(out.scores, out.logits))
                lp = gather_logprobs(scores, new, lp_dtype).cpu().numpy()
                idx = [r for r, _ in part]
                gen_lp[idx] = lp
                tokens[idx] = new.cpu().numpy()
                chunks.append((plen, idx, seq))
                del out, scores
        res.update({"seconds_generate": t_gen, "generate_calls": n_gen_calls, "generated_tokens": n_rows * G,
                    "generate_tokens_per_s": n_rows * G / t_gen, "scores_equal_logits": bool(scores_equal)})
        if not scores_equal:
            log(f"WARNING ({dname}): generate's scores differ from its raw logits: a logits processor was active")

        lens_out, fwd_all = [], {}
        for L in args.lens:
            fwd_lp = np.zeros((n_rows, L), np.float32)
            t_fwd, n_tok = 0.0, 0
            for plen, idx, seq in chunks:
                inp = seq[:, : plen + L]
                sync(device)
                t = time.time()
                logits = model(input_ids=inp, attention_mask=torch.ones_like(inp), use_cache=False).logits
                sync(device)
                t_fwd += time.time() - t
                n_tok += inp.numel()
                fwd_lp[idx] = gather_logprobs(logits[:, plen - 1 : plen + L - 1], inp[:, plen:], lp_dtype).cpu().numpy()
                del logits
            st = {"len": L, **ratio_stats(fwd_lp, gen_lp[:, :L]), "seconds_forward": t_fwd,
                  "forward_tokens": n_tok, "forward_tokens_per_s": n_tok / t_fwd}
            lens_out.append(st)
            fwd_all[L] = fwd_lp
        res["lens"] = lens_out
        res["seconds_forward"] = sum(x["seconds_forward"] for x in lens_out)
        cross = []
        for i, a in enumerate(args.lens):
            for b in args.lens[i + 1 :]:
                m = min(a, b)
                d = np.abs(fwd_all[a][:, :m].astype(np.float64) - fwd_all[b][:, :m])
                cross.append({"len_a": a, "len_b": b, "count": int(d.size), "max_abs": float(d.max()),
                              "mean_abs": float(d.mean())})
        res["cross_length"] = cross
        if args.dump:
            res["dump"] = {"tokens": tokens.tolist(), "logprob_gen": gen_lp.tolist(),
                           "logprob_fwd": {str(L): v.tolist() for L, v in fwd_all.items()}}
    del model
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return res


def fmt_table(results, lens):
    hdr = (f"{'dtype':5} {'L':>4} {'count':>6} {'mean':>10} {'std':>9} {'min':>8} {'max':>8} {'clip':>6} "
           f"{'ident':>6} {'max|logr|':>9} {'fwd s':>7}")
    out = [hdr, "-" * len(hdr)]
    for r in results:
        for st in r["lens"]:
            out.append(f"{r['dtype']:5} {st['len']:>4} {st['count']:>6} {st['mean']:>10.6f} {st['std']:>9.2e} "
                       f"{st['min']:>8.5f} {st['max']:>8.5f} {st['clipfrac']:>6.4f} {st['identical_frac']:>6.3f} "
                       f"{st['max_abs_log_ratio']:>9.2e} {st['seconds_forward']:>7.3f}")
    out.append("")
    hdr2 = f"{'dtype':5} {'load s':>7} {'generate s':>10} {'gen tok/s':>10} {'forward s':>9}  scores==logits  attn"
    out += [hdr2, "-" * len(hdr2)]
    for r in results:
        out.append(f"{r['dtype']:5} {r['seconds_load']:>7.2f} {r['seconds_generate']:>10.3f} "
                   f"{r['generate_tokens_per_s']:>10.0f} {r['seconds_forward']:>9.3f}  "
                   f"{str(r['scores_equal_logits']):14}  {r['attn_implementation']}")
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--prompts", default=os.path.join(REPO, "data", "prompts", "default.txt"))
    ap.add_argument("--len", default="20,40,50", help="forward lengths, comma-separated [20,40,50]")
    ap.add_argument("--dtype", default="fp32,fp16,bf16", help="comma-separated [fp32,fp16,bf16]")
    ap.add_argument("--samples", type=int, default=2, help="samples per prompt [2]")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu", choices=["cuda", "cpu"])
    ap.add_argument("--num-prompts", type=int, default=0, help="use the first N prompts [all]")
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--attn", choices=["sdpa", "eager"], help="attn_implementation [transformers' default]")
    ap.add_argument("--logprob-dtype", choices=["fp32", "same"], default="fp32",
                    help="log-softmax in fp32 from the dtype's logits, or in the model dtype [fp32]")
    ap.add_argument("--max-batch", type=int, default=512, help="rows per generate()/forward call [512]")
    ap.add_argument("--dump", action="store_true", help="also store tokens and log-probs in the JSON")
    ap.add_argument("--threads", type=int, help="torch CPU threads")
    args = ap.parse_args()

    args.lens = sorted({int(x) for x in args.len.split(",") if x.strip()})
    dnames = [d.strip() for d in args.dtype.split(",") if d.strip()]
    for d in dnames:
        if d not in DTYPES:
            sys.exit(f"--dtype: unknown {d!r} (fp32, fp16, bf16)")
    if not args.lens or min(args.lens) < 1:
        sys.exit("--len: positive lengths")
    if args.device == "cuda" and not torch.cuda.is_available():
        sys.exit("--device cuda: no CUDA device visible to torch")
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    transformers.utils.logging.disable_progress_bar()  # no "Loading weights" bars per dtype

    tok = Tokenizer.from_file(os.path.join(args.model, "tokenizer.json"))
    prompts = load_prompts(args.prompts, tok)
    if args.num_prompts > 0:
        prompts = prompts[: args.num_prompts]
    # rows: prompt p, sample s -> row p * samples + s; grouped by prompt length (no padding)
    by_len = {}
    for p, (_, ids) in enumerate(prompts):
        for s in range(args.samples):
            by_len.setdefault(len(ids), []).append((p * args.samples + s, ids))
    groups = sorted(by_len.items())
    n_rows = len(prompts) * args.samples

    info = {
        "tool": "hf_seed",
        "model": os.path.abspath(args.model),
        "prompts": os.path.abspath(args.prompts),
        "num_prompts": len(prompts),
        "samples": args.samples,
        "sequences": n_rows,
        "seed": args.seed,
        "lens": args.lens,
        "gen_len": max(args.lens),
        "prompt_lengths": sorted({len(ids) for _, ids in prompts}),
        "prompt_tokens": sum(len(ids) for _, ids in prompts) * args.samples,  # over all rows
        "prompt_length_groups": len(groups),
        "logprob_dtype": args.logprob_dtype,
        "device": args.device,
        "gpu": torch.cuda.get_device_name(device) if device.type == "cuda" else None,
        "versions": {"python": platform.python_version(), "torch": torch.__version__,
                     "transformers": transformers.__version__, "tokenizers": tokenizers.__version__,
                     "numpy": np.__version__, "cuda": torch.version.cuda,
                     "cudnn": torch.backends.cudnn.version() if device.type == "cuda" else None},
        "matmul": {"allow_tf32": torch.backends.cuda.matmul.allow_tf32,
                   "allow_fp16_reduced_precision_reduction":
                       torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction,
                   "allow_bf16_reduced_precision_reduction":
                       torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction},
        "method": ("generate(do_sample, temperature 1, top_k 0, top_p 1, min_new_tokens = max_new_tokens, "
                   "EOS off via model.generation_config.eos_token_id = None, output_scores) per prompt-length "
                   "group without padding; gen log-prob = log_softmax(scores) at the sampled token; forward = "
                   "model(prompt + first L tokens, use_cache=False) per group; ratio = exp(fwd - gen)"),
        "results": [],
    }
    log(f"hf_seed: {args.model}, {len(prompts)} prompts x {args.samples} samples = {n_rows} sequences, "
        f"{len(groups)} prompt-length groups, generate {max(args.lens)} tokens, L = {args.lens}; "
        f"torch {torch.__version__}, transformers {transformers.__version__}, device {args.device}"
        + (f" ({info['gpu']})" if info["gpu"] else ""))
    t_all = time.time()
    for d in dnames:
        r = run_dtype(args, d, groups, n_rows, device)
        info["results"].append(r)
        log(f"  {d}: generate {r['seconds_generate']:.3f} s ({r['generate_tokens_per_s']:.0f} tokens/s), "
            f"forwards {r['seconds_forward']:.3f} s, attn {r['attn_implementation']}, "
            f"scores==logits {r['scores_equal_logits']}")
    info["seconds"] = time.time() - t_all
    print()
    print(fmt_table(info["results"], args.lens))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(info, f, indent=1, allow_nan=True)
            f.write("\n")
        log(f"\nwrote {args.json}")


if __name__ == "__main__":
    main()
