#!/usr/bin/python3
"""`ratiocheck score` of a file that carries both sides (docs/score.md "Both sides logged"):
recompute every statistic with numpy straight from the JSONL's logged numbers (`logprobs`, the
sampler; `trainer_logprobs`, the trainer; r = exp(trainer - sampler) per token) and compare with
what ratiocheck printed (--json) and wrote (HDF5). The HDF5 file is then checked by
tools/checks/check_results.py as every results file is (its tensors first shown equal to the JSONL's).

Needs: numpy, h5py (Debian: python3-numpy python3-h5py; run with /usr/bin/python3).
Usage: check_logged.py FILE.jsonl RESULTS.h5 SCORE.json
       exit 0 when everything matches, 1 otherwise.
With a third column (score --model as well, /rollouts/logprob_ratiocheck): the pairs' summary
("three_columns" in the JSON) is recomputed from the JSONL and that column too.
"""
import json
import os
import sys

import h5py
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check_results as cr  # noqa: E402  (the same numpy definitions as every results file's check)


class Fake:
    """What check_results' numpy_* helpers read from a results file: the thresholds and each
    length's forward log-probs, here from the JSONL."""

    def __init__(self, attrs, fwd_by_len):
        self.attrs = attrs
        self._g = {f"len_{L:04d}": {"logprob_forward": fwd} for L, fwd in fwd_by_len.items()}

    def __getitem__(self, k):
        return self._g[k]


def load_jsonl(path):
    rows = [json.loads(line) for line in open(path) if line.strip()]
    S, G = len(rows), max(len(r["response_ids"]) for r in rows)
    gen = np.full((S, G), np.nan, np.float32)
    tr = np.full((S, G), np.nan, np.float32)
    n = np.zeros(S, np.int64)
    for i, r in enumerate(rows):
        k = len(r["response_ids"])
        assert len(r["logprobs"]) == k == len(r["trainer_logprobs"]), f"{path}: record {i + 1}: lengths differ"
        n[i] = k
        gen[i, :k] = np.asarray(r["logprobs"], np.float64).astype(np.float32)  # as the C reader rounds them
        tr[i, :k] = np.asarray(r["trainer_logprobs"], np.float64).astype(np.float32)
    return gen, tr, n


def len_stats(gen, gen_len, fwd, L, attrs):
    """Every statistic --json prints for one length, from the logged numbers."""
    valid = np.arange(L)[None, :] < np.minimum(gen_len, L)[:, None]
    lr = fwd[:, :L].astype(np.float64) - gen[:, :L].astype(np.float64)
    r = np.exp(lr)
    rv, lrv = r[valid], lr[valid]
    lo, hi = attrs["clip_eps_low"], attrs["clip_eps_high"]
    eps, cap = attrs["seq_eps"], attrs["seq_cap"]
    ntok = valid.sum(axis=1)
    has = ntok > 0
    S_ = np.where(valid, lr, 0.0).sum(axis=1)[has]
    M_ = S_ / ntok[has]
    same = (fwd[:, :L].view(np.uint32) == gen[:, :L].view(np.uint32)) & valid
    div = np.nonzero((~same & valid).any(axis=0))[0]
    out = {
        "count": valid.sum(), "mean": rv.mean(), "std": rv.std(), "min": rv.min(), "max": rv.max(),
        "k1": np.mean(-lrv), "k3": np.mean(rv - 1 - lrv), "clipfrac": np.mean((rv < 1 - lo) | (rv > 1 + hi)),
        "frac_gt_0.001": np.mean(np.abs(rv - 1) > 0.001), "frac_gt_0.01": np.mean(np.abs(rv - 1) > 0.01),
        "frac_gt_0.1": np.mean(np.abs(rv - 1) > 0.1), "mult_prob_err": np.mean(np.exp(np.abs(lrv))),
        "identical_frac": same.sum() / valid.sum(), "seq_count": has.sum(),
        "seq_log_ratio_sum_mean": S_.mean(), "seq_log_ratio_sum_std": S_.std(), "seq_log_ratio_sum_min": S_.min(),
        "seq_log_ratio_sum_max": S_.max(), "seq_log_ratio_mean_mean": M_.mean(), "seq_log_ratio_mean_std": M_.std(),
        "seq_log_ratio_mean_min": M_.min(), "seq_log_ratio_mean_max": M_.max(),
        "seq_ratio_min": np.exp(S_.min()), "seq_ratio_max": np.exp(S_.max()),
        "seq_frac_outside_band": np.mean(np.abs(np.exp(M_) - 1) > eps), "seq_frac_above_cap": np.mean(np.exp(S_) > cap),
        "first_divergent_position": div[0] if len(div) else -1,
    }
    # the first generated token (its sampler log-prob from the prefill) on its own
    first = valid[:, 0]
    if first.any():
        out.update(first_token_count=first.sum(), first_token_mean_abs_log_ratio=np.mean(np.abs(lr[first, 0])),
                   first_token_k3=np.mean(r[first, 0] - 1 - lr[first, 0]))
    out.update(cr.numpy_corrections(gen, gen_len, fwd[:, :L], L))
    return out


def pairs(gen, yours, rc, gen_len, L, ref=None):
    valid = np.arange(L)[None, :] < np.minimum(gen_len, L)[:, None]
    cols = {"sampler_vs_your_trainer": (gen, yours), "sampler_vs_ratiocheck": (gen, rc),
            "your_trainer_vs_ratiocheck": (yours, rc)}
    out = {}
    for k, (a, b) in cols.items():
        a, b = a[:, :L], b[:, :L]
        d = (b.astype(np.float64) - a.astype(np.float64))[valid]
        out[k] = {"count": d.size, "mean": d.mean(), "std": d.std(), "mean_abs": np.abs(d).mean(),
                  "max_abs": np.abs(d).max(), "k3": np.mean(np.expm1(d) - d),
                  "mult_prob_err": np.mean(np.exp(np.abs(d))),
                  "identical_frac": np.mean(a.view(np.uint32)[valid] == b.view(np.uint32)[valid])}
    s, y = out["sampler_vs_ratiocheck"]["mean_abs"], out["your_trainer_vs_ratiocheck"]["mean_abs"]
    if ref is not None:  # with a reference, each side's distance from it decides
        both = valid & ~np.isnan(ref)
        s = np.abs(gen.astype(np.float64) - ref)[both].mean()
        y = np.abs(yours.astype(np.float64) - ref)[both].mean()
    # docs/score.md "Three columns": the side farther (from the reference, else from ratiocheck's
    # trainer) is off when the other is at least twice as close
    off = "none" if s == 0 and y == 0 else "sampler" if y <= 0.5 * s else "your_trainer" if s <= 0.5 * y else "both"
    return out, off


def main(jsonl, h5, score_json):
    gen, tr, n = load_jsonl(jsonl)
    j = json.load(open(score_json))
    f = h5py.File(h5, "r")
    attrs = {k: float(j[k]) for k in ("clip_eps_low", "clip_eps_high", "seq_eps", "seq_cap")}
    lens = [int(e["len"]) for e in j["lens"]]
    G = max(lens)
    S = gen.shape[0]
    gen_len = np.minimum(n, G)
    pad = max(0, G - gen.shape[1])
    gen = np.pad(gen, ((0, 0), (0, pad)), constant_values=np.nan)[:, :G]
    tr = np.pad(tr, ((0, 0), (0, pad)), constant_values=np.nan)[:, :G]
    valid = np.arange(G)[None, :] < gen_len[:, None]
    gen = np.where(valid, gen, np.float32(np.nan))
    tr = np.where(valid, tr, np.float32(np.nan))
    # the file's tensors are the logged numbers, bit for bit
    cr.equal("/rollouts/logprob_gen = the JSONL's logprobs", f["rollouts/logprob_gen"][...], gen)
    cr.equal("/rollouts/logprob_trainer = the JSONL's trainer_logprobs", f["rollouts/logprob_trainer"][...], tr)
    cr.equal("/rollouts/lengths", f["rollouts/lengths"][...], gen_len)
    cr.checks_equal("sequences", j["sequences"], S)
    fwd_by_len = {}
    for e in j["lens"]:
        L = int(e["len"])
        fwd = tr[:, :L]
        fwd_by_len[L] = fwd
        cr.equal(f"L={L} logprob_forward = trainer_logprobs", f[f"len_{L:04d}/logprob_forward"][...], fwd)
        for k, v in len_stats(gen, gen_len, tr, L, attrs).items():
            if k not in e:
                cr.failures.append(f"L={L}: {k} is not in the JSON")
                continue
            cr.close(f"L={L} {k} (JSON)", e[k], v, atol=1e-15)
    fake = Fake(attrs, fwd_by_len)
    want = cr.numpy_verdict(fake, gen, gen_len, lens)
    for obj in ("token_ppo", "sequence_is", "gspo"):
        cr.checks_equal(f"verdict {obj} (JSON)", j["verdict"][obj]["level"], want[obj])
    cr.close("verdict worst_token_ratio (JSON)", j["verdict"]["worst_token"]["ratio"], want["worst_token_ratio"])
    cr.check_growth("growth (JSON)", j["growth"], cr.numpy_growth(fake, gen, gen_len, fwd_by_len, lens))
    if "logprob_ratiocheck" in f["rollouts"]:
        rc = f["rollouts/logprob_ratiocheck"][...]
        cr.equal("logprob_ratiocheck NaN exactly where the others are", np.isnan(rc), np.isnan(gen))
        want_p, off = pairs(gen, tr, rc, gen_len, G, f["reference/logprob"][...] if "reference" in f else None)
        got = j["three_columns"]
        cr.checks_equal("three columns: off", got["off"], off)
        cr.checks_equal("three columns: off (HDF5)", f["threeway"].attrs["off"], off)
        for k, d in want_p.items():
            for m, v in d.items():
                cr.close(f"three columns {k} {m} (JSON)", got[k][m], v, atol=1e-15)
                cr.close(f"three columns {k} {m} (HDF5)", f["threeway"].attrs[f"{k}_{m}"], v, atol=1e-15)
        if "reference" in f:  # each column against the reference, over the same tokens
            ref = f["reference/logprob"][...]
            both = valid & ~np.isnan(ref)
            cols = {"sampler": gen, "your_trainer": tr, "ratiocheck": rc}
            cr.checks_equal("three columns: reference name", got["reference"]["name"], f.attrs["reference"])
            cr.close("three columns: reference count", got["reference"]["count"], both.sum())
            for k, col in cols.items():
                d = np.abs(col.astype(np.float64) - ref)[both]
                for m, v in (("mean_abs", d.mean()), ("max_abs", d.max())):
                    cr.close(f"three columns {k} ref {m} (JSON)", got["reference"][k][m], v, atol=1e-15)
                    cr.close(f"three columns {k} ref {m} (HDF5)", f["threeway"].attrs[f"{k}_ref_{m}"], v, atol=1e-15)
        else:
            cr.checks_equal("three columns: no reference", got["reference"], None)
        print(f"three columns: off = {off}")
    f.close()
    # and the results file as every results file is checked: its statistics from its tensors
    rc_ = cr.main(h5)
    return 1 if cr.failures or rc_ else 0


if __name__ == "__main__":
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    sys.exit(main(*sys.argv[1:]))
