#!/usr/bin/env python3
"""Put HF transformers' and ratiocheck's PPO-ratio statistics side by side.

Purpose
    tools/gpu/hf_seed.py measures the seed report's generation-vs-forward ratio with
    Hugging Face transformers; `ratiocheck --json` measures it with ratiocheck, on the
    same model, prompts and lengths.  This script prints both as plain-text tables
    (aligned columns, < 100 columns): the ratio statistics per (dtype, L), the
    agreement details, the timings and, given --bound-json, the ideal times.

Usage
    python3 tools/gpu/side_by_side.py --hf HF.json --rc DTYPE=RC.json [DTYPE=RC.json ...]
        [--rc-invariant DTYPE=RC.json ...] [--bound-json BOUND.json]
    (DTYPE= may be left out: the dtype is then read from the ratiocheck JSON.)

Inputs
    HF.json: written by tools/gpu/hf_seed.py --json (one entry per dtype in "results").
    RC.json: one `ratiocheck run --json` object: "dtype", "kernels", "sequences", "lens":
        [{"len", "count", "mean", "std", "min", "max", "clipfrac", "identical_frac", "k3",
        "first_divergent_position", ...}], "seconds", and, where present,
        "seconds_generate", "seconds_forward", "backend", "gen_len".  Missing keys print "-".
    --rc-invariant: the same from `--kernels invariant` runs (shown in their own table).
    BOUND.json (optional): {"hbm_gbps", "bf16_tflops", "fp32_tflops", ["fp16_tflops"],
        "params", "weight_bytes": {"fp32": .., "fp16": .., "bf16": ..} (or one number)}.
        Ideal decode time = gen_len steps x weight bytes / HBM bandwidth (each step reads
        every weight once, all sequences in one batch; KV-cache and activation traffic
        ignored).  Ideal forward time = 2 x params x forward tokens / peak FLOP/s of the
        dtype (fp16 uses fp16_tflops, else bf16_tflops), summed over the lengths.

Outputs
    Text on stdout only.

Versions
    Python 3 standard library only (tested with 3.11.7; the GPU image has 3.12).
"""

import argparse
import json
import math
import os
import sys

DT_ORDER = {"fp32": 0, "fp16": 1, "bf16": 2}


def load(path):
    with open(path) as f:
        return json.load(f)


def parse_rc(items, what):
    """['bf16=a.json', 'b.json'] -> {dtype: (path, json)}"""
    out = {}
    for it in items or []:
        if "=" in it and it.split("=", 1)[0] in DT_ORDER:
            d, p = it.split("=", 1)
        else:
            d, p = None, it
        j = load(p)
        if isinstance(j, list):  # tolerate a list with one object
            j = j[0]
        d = d or j.get("dtype")
        if d not in DT_ORDER:
            sys.exit(f"{what} {it}: unknown dtype {d!r}")
        if j.get("dtype") not in (None, d):
            print(f"warning: {p} says dtype {j.get('dtype')!r}, given as {d}", file=sys.stderr)
        out[d] = (p, j)
    return out


def fnum(v, spec, width):
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-".rjust(width)
    try:
        return format(v, spec).rjust(width)
    except (TypeError, ValueError):
        return str(v).rjust(width)


def by_len(lens):
    return {int(x["len"]): x for x in lens or [] if "len" in x}


STAT_COLS = [("mean", ".6f", 8), ("std", ".2e", 8), ("min", ".5f", 7), ("max", ".5f", 7), ("clipfrac", ".4f", 6)]
STAT_HDR = ["mean", "std", "min", "max", "clip"]


def stat_block(st):
    if st is None:
        return " ".join("-".rjust(w) for _, _, w in STAT_COLS)
    return " ".join(fnum(st.get(k), spec, w) for k, spec, w in STAT_COLS)


def stat_hdr():
    return " ".join(h.rjust(w) for h, (_, _, w) in zip(STAT_HDR, STAT_COLS))


def rows_for(hf_res, rc):
    keys = set()
    for d, r in hf_res.items():
        keys |= {(d, L) for L in by_len(r.get("lens"))}
    for d, (_, j) in rc.items():
        keys |= {(d, L) for L in by_len(j.get("lens"))}
    return sorted(keys, key=lambda k: (DT_ORDER.get(k[0], 9), k[1]))


def ratio_table(title_a, title_b, keys, get_a, get_b):
    block_w = len(stat_hdr())
    lines = [f"{'':10}{title_a.center(block_w)} | {title_b.center(block_w)}",
             f"{'dtype':5} {'L':>4} {stat_hdr()} | {stat_hdr()}"]
    lines.append("-" * len(lines[-1]))
    prev = None
    for d, L in keys:
        if prev is not None and prev != d:
            lines.append("")
        prev = d
        lines.append(f"{d:5} {L:>4} {stat_block(get_a(d, L))} | {stat_block(get_b(d, L))}")
    return "\n".join(ln.rstrip() for ln in lines)


def agree_table(keys, get_a, get_b, name_a, name_b):
    cols = [("count", "d", 6), ("identical_frac", ".4f", 6), ("k3", ".2e", 8), ("first_divergent_position", "d", 5)]
    hdr = " ".join(h.rjust(w) for h, (_, _, w) in zip(["count", "ident", "k3", "1stdv"], cols))
    bw = len(hdr)
    lines = [f"{'':10}{name_a.center(bw)} | {name_b.center(bw)}", f"{'dtype':5} {'L':>4} {hdr} | {hdr}"]
    lines.append("-" * len(lines[-1]))

    def blk(st):
        if st is None:
            return " ".join("-".rjust(w) for _, _, w in cols)
        return " ".join(fnum(st.get(k), spec, w) for k, spec, w in cols)

    for d, L in keys:
        lines.append(f"{d:5} {L:>4} {blk(get_a(d, L))} | {blk(get_b(d, L))}")
    return "\n".join(ln.rstrip() for ln in lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hf", required=True, help="hf_seed.py --json output")
    ap.add_argument("--rc", nargs="+", action="extend", default=[], metavar="DTYPE=RC.json",
                    help="ratiocheck --json outputs (repeatable)")
    ap.add_argument("--rc-invariant", nargs="+", action="extend", default=[], metavar="DTYPE=RC.json",
                    help="ratiocheck --kernels invariant --json outputs")
    ap.add_argument("--bound-json", help="roofline numbers: hbm_gbps, bf16_tflops, fp32_tflops, params, weight_bytes")
    args = ap.parse_args()

    hf = load(args.hf)
    hf_res = {r["dtype"]: r for r in hf.get("results", [])}
    rc = parse_rc(args.rc, "--rc")
    inv = parse_rc(args.rc_invariant, "--rc-invariant")

    def hf_get(d, L):
        return by_len(hf_res[d].get("lens")).get(L) if d in hf_res else None

    def rc_get(src):
        return lambda d, L: by_len(src[d][1].get("lens")).get(L) if d in src else None

    # ---- header
    v = hf.get("versions", {})
    print(f"model: {hf.get('model', '-')}")
    print(f"HF:         transformers {v.get('transformers', '-')}, torch {v.get('torch', '-')}, "
          f"{hf.get('device', '-')}{' (' + hf['gpu'] + ')' if hf.get('gpu') else ''}, "
          f"attn {', '.join(sorted({r.get('attn_implementation', '-') for r in hf_res.values()})) or '-'}, "
          f"log-softmax {hf.get('logprob_dtype', '-')}")
    print(f"            {hf.get('num_prompts', '-')} prompts x {hf.get('samples', '-')} samples = "
          f"{hf.get('sequences', '-')} sequences, seed {hf.get('seed', '-')}, "
          f"scores==logits {all(r.get('scores_equal_logits', False) for r in hf_res.values())}")
    print(f"            {next((r['generate_calls'] for r in hf_res.values() if 'generate_calls' in r), '-')} "
          f"generate calls per dtype (one per prompt-length group: no padding)")
    for name, src in (("ratiocheck", rc), ("invariant", inv)):
        for d in sorted(src, key=DT_ORDER.get):
            p, j = src[d]
            line = (f"{name + ':':11} {d}: kernels {j.get('kernels', '-')}, backend {j.get('backend', '-')}, "
                    f"upcast {j.get('upcast', '-')}, log-softmax {j.get('logprob_dtype', '-')}, "
                    f"{j.get('sequences', '-')} seqs, seed {j.get('seed', '-')}")
            tail = f" ({os.path.basename(p)})"
            print(line + tail if len(line + tail) < 100 else line)
            if hf.get("sequences") is not None and j.get("sequences") not in (None, hf.get("sequences")):
                print(f"            note: {j.get('sequences')} sequences vs HF's {hf.get('sequences')}")
    print()

    # ---- ratio statistics
    print("PPO ratio exp(forward - generation) at step 0")
    keys = rows_for(hf_res, rc)
    print(ratio_table("HF transformers", "ratiocheck", keys, hf_get, rc_get(rc)))
    print()
    print("agreement (ident: forward == generation log-prob bitwise; 1stdv: first divergent position)")
    print(agree_table(keys, hf_get, rc_get(rc), "HF transformers", "ratiocheck"))
    if inv:
        print()
        print("ratiocheck --kernels invariant (expected: every ratio exactly 1)")
        ikeys = rows_for({}, inv)
        print(ratio_table("ratiocheck engine", "ratiocheck invariant", ikeys, rc_get(rc), rc_get(inv)))

    # ---- timing
    bound = load(args.bound_json) if args.bound_json else None
    print()
    print("timing (seconds; tok/s = generated tokens / generate seconds)")
    hdr = (f"{'dtype':5} {'tool':10} {'generate':>9} {'gen tok/s':>10} {'forward':>8} {'fwd tok/s':>10} "
           f"{'total':>8}")
    if bound:
        hdr += f" {'ideal gen':>9} {'ideal fwd':>9}"
    print(hdr)
    print("-" * len(hdr))
    gen_len = hf.get("gen_len") or max(hf.get("lens") or [0]) or None
    n_seq = hf.get("sequences")
    prompt_tokens = hf.get("prompt_tokens")
    lens_hf = hf.get("lens") or []

    def fwd_tokens(lens, nseq):
        if prompt_tokens is None or nseq != n_seq:
            return None
        return sum(prompt_tokens + nseq * L for L in lens)

    def ideal(d, lens, nseq, glen):
        if not bound:
            return None, None
        wb = bound.get("weight_bytes")
        if isinstance(wb, dict):
            wb = wb.get(d)
        if wb is None and bound.get("params"):
            wb = bound["params"] * {"fp32": 4, "fp16": 2, "bf16": 2}[d]
        t_gen = glen * wb / (bound["hbm_gbps"] * 1e9) if wb and bound.get("hbm_gbps") and glen else None
        peak = {"fp32": bound.get("fp32_tflops"), "fp16": bound.get("fp16_tflops") or bound.get("bf16_tflops"),
                "bf16": bound.get("bf16_tflops")}[d]
        ft = fwd_tokens(lens, nseq)
        t_fwd = 2 * bound["params"] * ft / (peak * 1e12) if peak and bound.get("params") and ft else None
        return t_gen, t_fwd

    dts = sorted(set(hf_res) | set(rc) | set(inv), key=DT_ORDER.get)
    for d in dts:
        entries = []
        if d in hf_res:
            r = hf_res[d]
            ft = fwd_tokens(lens_hf, n_seq)
            tot = (r.get("seconds_generate") or 0) + (r.get("seconds_forward") or 0)
            entries.append(("HF", r.get("seconds_generate"), r.get("generate_tokens_per_s"),
                            r.get("seconds_forward"), ft / r["seconds_forward"] if ft and r.get("seconds_forward")
                            else None, tot, lens_hf, n_seq, gen_len))
        for name, src in (("ratiocheck", rc), ("rc invar.", inv)):
            if d in src:
                j = src[d][1]
                lens = [int(x["len"]) for x in j.get("lens", []) if "len" in x]
                glen = j.get("gen_len") or (max(lens) if lens else None)
                nseq = j.get("sequences")
                sg, sf = j.get("seconds_generate"), j.get("seconds_forward")
                ft = fwd_tokens(lens, nseq)
                entries.append((name, sg, nseq * glen / sg if sg and nseq and glen else None, sf,
                                ft / sf if ft and sf else None, j.get("seconds"), lens, nseq, glen))
        for name, sg, gtps, sf, ftps, tot, lens, nseq, glen in entries:
            line = (f"{d:5} {name:10} {fnum(sg, '.4f', 9)} {fnum(gtps, '.0f', 10)} {fnum(sf, '.4f', 8)} "
                    f"{fnum(ftps, '.0f', 10)} {fnum(tot, '.3f', 8)}")
            if bound:
                ig, ifw = ideal(d, lens, nseq, glen)
                line += f" {fnum(ig, '.2e', 9)} {fnum(ifw, '.2e', 9)}"
            print(line)
    if bound:
        print()
        print(f"ideal: HBM {bound.get('hbm_gbps', '-')} GB/s, bf16 {bound.get('bf16_tflops', '-')} TFLOP/s, "
              f"fp32 {bound.get('fp32_tflops', '-')} TFLOP/s, {bound.get('params', '-')} parameters")
        print(f"  gen = {gen_len} decode steps x weight bytes / HBM bandwidth (one batch; KV, activations ignored)")
        print("  fwd = 2 x params x forward tokens / peak, over all L (tokens known for HF's sequences)")
    print()
    print("total: HF = generate + forward seconds; ratiocheck = its whole run (\"seconds\")")


if __name__ == "__main__":
    main()
