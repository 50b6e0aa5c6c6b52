#!/usr/bin/python3
"""Recompute every statistic of a ratiocheck HDF5 result file with numpy,
independently of the C code, and compare with what the file stores.

Needs: numpy, h5py (Debian: python3-numpy python3-h5py; run with /usr/bin/python3).
Usage: check_results.py FILE.h5      exit 0 when everything matches, 1 otherwise.
       check_results.py --report-json REPORT.json FILE.h5
                                     the verdict and the corrections of `ratiocheck report
                                     FILE.h5 --json` (saved in REPORT.json) against numpy
       --nonzero (either form)       also require every correction fraction (README
                                     "Corrections") to be > 0 at some length
"""
import sys

import h5py
import numpy as np

RTOL = 1e-9   # both sides compute in float64; only the summation order differs
failures = []
checks = 0


def close(name, got, want, rtol=RTOL, atol=1e-15):
    global checks
    checks += 1
    got = np.asarray(got, dtype=np.float64)
    want = np.asarray(want, dtype=np.float64)
    if got.shape != want.shape or not np.allclose(got, want, rtol=rtol, atol=atol, equal_nan=True):
        failures.append(f"{name}: file {got!r} vs numpy {want!r}")


def equal(name, got, want):
    global checks
    checks += 1
    if not np.array_equal(np.asarray(got), np.asarray(want), equal_nan=True):
        failures.append(f"{name}: stored array differs from numpy")


def checks_equal(name, got, want):
    global checks
    checks += 1
    if got != want:
        failures.append(f"{name}: file {got!r} vs numpy {want!r}")


# docs/verdict.md: token PPO FAIL past a published gate (NeMo-RL mean exp|log r| 1.05,
# prime-rl mismatch_kl = k3 0.015) or when more than 10% of the tokens would be clipped at
# step 0, WARN when any would be; sequence IS the same on the largest fraction any published
# sequence-level correction (TRL's cap, verl's sequence TIS, Seq-MIS, Geo-RS) would clip or
# mask, on both of its bounds; GSPO OK up to the ~15% clip fraction its paper reports in
# normal training, WARN up to half the sequences, FAIL beyond.
def level(frac):
    return "FAIL" if frac > 0.10 else "WARN" if frac > 0 else "OK"


def gspo_level(frac):
    return "FAIL" if frac > 0.50 else "WARN" if frac > 0.15 else "OK"


def numpy_verdict(f, gen, gen_len, lens):
    lo, hi = f.attrs.get("clip_eps_low", 0.2), f.attrs.get("clip_eps_high", 0.2)
    eps, cap = f.attrs.get("seq_eps", 3e-4), f.attrs.get("seq_cap", 3.0)
    worst = dict(clip=0.0, k3=0.0, mpe=0.0, above=0.0, outside=0.0)
    out = {}
    for L in lens:
        fwd = f[f"len_{L:04d}"]["logprob_forward"][...].astype(np.float64)
        valid = np.arange(L)[None, :] < np.minimum(gen_len, L)[:, None]
        lr = fwd - gen[:, :L].astype(np.float64)
        if valid.sum() == 0:
            continue
        r = np.exp(lr[valid])
        worst["clip"] = max(worst["clip"], np.mean((r < 1 - lo) | (r > 1 + hi)))
        worst["k3"] = max(worst["k3"], np.mean(r - 1 - lr[valid]))
        worst["mpe"] = max(worst["mpe"], np.mean(np.exp(np.abs(lr[valid]))))
        has = valid.sum(axis=1) > 0
        S = np.where(valid, lr, 0.0).sum(axis=1)[has]
        M = S / valid.sum(axis=1)[has]
        seq_corr = [np.mean(~(np.exp(S) <= cap)), np.mean(~(np.exp(S) <= 2.0)),
                    np.mean(outside(-S, np.log(0.5), np.log(2.0))), np.mean(outside(-M, np.log(0.999), np.log(1.001)))]
        worst["above"] = max(worst["above"], max(seq_corr))
        worst["outside"] = max(worst["outside"], np.mean(np.abs(np.exp(M) - 1) > eps))
        if L == max(lens):
            a = np.where(valid, np.abs(lr), -1.0)
            s, t = np.unravel_index(np.argmax(a), a.shape)
            Sall = np.where(has, np.where(valid, lr, 0.0).sum(axis=1), np.nan)
            q = int(np.nanargmax(np.abs(Sall)))
            out.update(len=L, worst_token_sequence=s, worst_token_position=t, worst_token_ratio=np.exp(lr[s, t]),
                       worst_sequence=q, worst_sequence_ratio=np.exp(Sall[q]))
    if worst["mpe"] > 1.05 or worst["k3"] > 0.015:
        out["token_ppo"] = "FAIL"
    else:
        out["token_ppo"] = level(worst["clip"])
    out["sequence_is"] = level(worst["above"])
    out["gspo"] = gspo_level(worst["outside"])
    return out


# README "Corrections" (docs/research/corrections.md): the published corrections at their
# defaults, recomputed from the tensors as each framework defines them. r = e^(new - old),
# S / M = sum / mean of log r over a sequence's tokens, p / p' = e^old / e^new.
TOKEN_FRACS = ["token_tis_clipfrac", "token_mis_maskfrac", "icepop_maskfrac", "token_cap3_frac",
               "dppo_maskfrac_high", "dppo_maskfrac_low", "prime_legacy_maskfrac"]
SEQ_FRACS = ["seq_tis_clipfrac", "seq_mis_maskfrac", "seq_geo_rs_maskfrac", "seq_cap3_frac"]
CORR_METRICS = ["chi2_token", "chi2_seq", "ppl_trainer", "ppl_sampler", "log_ppl_diff", "log_ppl_abs_diff",
                "ppl_ratio", "mean_abs_log_ratio", "max_abs_log_ratio"]
CORR_KEYS = TOKEN_FRACS + SEQ_FRACS + CORR_METRICS


# Every attribute of /len_NNNN this script recomputes (below, with CORR_KEYS). The file's
# attributes come from one table in the C code (rc_len_fields in src/results/stats.c, the
# corrections' rc_corr_stats beside it); an attribute not in this list fails the check, so a
# metric added there is recomputed here too.
LEN_ATTRS = ["len", "count", "mean", "std", "min", "max",
             "quantile_0.1pct", "quantile_1pct", "quantile_50pct", "quantile_99pct", "quantile_99.9pct",
             "k1", "k3", "clipfrac", "frac_abs_ratio_minus_1_gt_0.001", "frac_abs_ratio_minus_1_gt_0.01",
             "frac_abs_ratio_minus_1_gt_0.1", "frac_abs_ratio_minus_1_gt_0.2", "mult_prob_err", "identical_frac",
             "seq_count", "seq_log_ratio_sum_mean", "seq_log_ratio_sum_std", "seq_log_ratio_sum_min",
             "seq_log_ratio_sum_max", "seq_log_ratio_mean_mean", "seq_log_ratio_mean_std", "seq_log_ratio_mean_min",
             "seq_log_ratio_mean_max", "seq_frac_outside_band", "seq_frac_above_cap",
             "ref_gen_mean_abs", "ref_gen_max_abs", "ref_fwd_mean_abs", "ref_fwd_max_abs", "first_divergent_position",
             "first_token_count", "first_token_mean_abs_log_ratio", "first_token_max_abs_log_ratio", "first_token_k3",
             "later_tokens_mean_abs_log_ratio"]
# --distribution (docs/statistics.md "Distribution"): only in a length with the per-token kl / tv / top1_agree
DIST_ATTRS = ["dist_count", "kl_mean", "kl_std", "kl_min", "kl_max", "tv_mean", "tv_std", "tv_min", "tv_max",
              "top1_agree"]
# a mixture-of-experts run (docs/routing.md): the routing record's statistics over the tokens t < L
ROUTING_ATTRS = ["routing_tokens", "routing_tokens_flip", "routing_share_flip", "routing_decision_share",
                 "routing_mean_overlap", "routing_miles_mismatch", "routing_miles_layer", "routing_first_layer",
                 "routing_abs_log_ratio_flip", "routing_abs_log_ratio_same", "routing_share_abs_log_ratio_flip"]


def check_dist(L, g, valid):
    """The whole-distribution summaries of one length from its per-token datasets."""
    a = g.attrs
    if "kl" not in g:
        checks_equal(f"L={L}: no distribution attributes without the kl dataset",
                     sorted(set(a.keys()) & set(DIST_ATTRS)), [])
        return
    kl, tv, top = g["kl"][...], g["tv"][...], g["top1_agree"][...]
    equal(f"L={L} top1_agree is -1 exactly where the token is not valid", top < 0, ~valid)
    equal(f"L={L} kl NaN exactly where the token is not valid", np.isnan(kl), ~valid)
    equal(f"L={L} tv NaN exactly where the token is not valid", np.isnan(tv), ~valid)
    kv, tvv, t1 = kl[valid], tv[valid], top[valid]
    close(f"L={L} dist_count", a["dist_count"], valid.sum())
    for name, v in (("kl", kv), ("tv", tvv)):
        close(f"L={L} {name}_mean", a[f"{name}_mean"], v.mean(), atol=1e-18)
        close(f"L={L} {name}_std", a[f"{name}_std"], v.std(), atol=1e-18)
        close(f"L={L} {name}_min", a[f"{name}_min"], v.min(), atol=0)
        close(f"L={L} {name}_max", a[f"{name}_max"], v.max(), atol=0)
    checks_equal(f"L={L} tv in [0, 1]", bool(np.all((tvv >= 0) & (tvv <= 1 + 1e-12))), True)
    close(f"L={L} top1_agree", a["top1_agree"], t1.mean())
    with np.errstate(all="ignore"):
        close(f"L={L} pos_kl_mean", g["pos_kl_mean"][...], np.nanmean(np.where(valid, kl, np.nan), axis=0),
              atol=1e-18)
        close(f"L={L} pos_tv_mean", g["pos_tv_mean"][...], np.nanmean(np.where(valid, tv, np.nan), axis=0),
              atol=1e-18)
        close(f"L={L} pos_top1_agree", g["pos_top1_agree"][...],
              np.nanmean(np.where(valid, top.astype(np.float64), np.nan), axis=0))


def outside(v, lo, hi):
    return ~((v >= lo) & (v <= hi))   # NaN counts as outside


def numpy_corrections(gen, gen_len, fwd, L):
    valid = np.arange(L)[None, :] < np.minimum(gen_len, L)[:, None]
    old = np.where(valid, gen[:, :L].astype(np.float64), np.nan)
    new = np.where(valid, fwd.astype(np.float64), np.nan)
    lr = new - old
    with np.errstate(all="ignore"):
        r = np.exp(lr)
        dp = np.exp(new) - np.exp(old)
    rv, lrv, dpv = r[valid], lr[valid], dp[valid]
    ntok = valid.sum(axis=1)
    has = ntok > 0
    S = np.where(valid, lr, 0.0).sum(axis=1)
    with np.errstate(all="ignore"):
        M = S / ntok
    # prime-rl before 2026-03 (loss.py at bf71516c9154): token mask r outside [0.125, 8], geo mask
    # exp(mean log r) outside [0.1, 10], sequence mask max r > 100 (min r < 0 never); is_masked = OR
    seq_masked = outside(np.exp(M), 0.1, 10.0) | np.where(valid, ~(r <= 100.0), False).any(axis=1)
    prime = (outside(r, 0.125, 8.0) | seq_masked[:, None]) & valid
    # verl rollout_corr_helper.py: k1 = -log r; seq_sum_k1 / seq_mean_k1 kept when
    # log(lower) <= k1 statistic <= log(upper); chi2 with log r (and S) clamped to +-20
    k1_sum = np.where(valid, -lr, 0.0).sum(axis=1)[has]
    k1_mean = k1_sum / ntok[has]
    mean_new = np.where(valid, new, 0.0).sum(axis=1)[has] / ntok[has]
    mean_old = np.where(valid, old, 0.0).sum(axis=1)[has] / ntok[has]
    Sh = S[has]
    with np.errstate(all="ignore"):
        return {
            "token_tis_clipfrac": np.mean(~(rv <= 2.0)),
            "token_mis_maskfrac": np.mean(outside(rv, 0.5, 2.0)),
            "icepop_maskfrac": np.mean(outside(rv, 0.5, 5.0)),
            "token_cap3_frac": np.mean(~(rv <= 3.0)),
            "dppo_maskfrac_high": np.mean(dpv > 0.2),
            "dppo_maskfrac_low": np.mean(dpv < -0.2),
            "prime_legacy_maskfrac": prime.sum() / valid.sum(),
            "seq_tis_clipfrac": np.mean(~(np.exp(Sh) <= 2.0)),
            "seq_mis_maskfrac": np.mean(outside(k1_sum, np.log(0.5), np.log(2.0))),
            "seq_geo_rs_maskfrac": np.mean(outside(k1_mean, np.log(0.999), np.log(1.001))),
            "seq_cap3_frac": np.mean(~(np.exp(Sh) <= 3.0)),
            # verl: mean(exp(clamp(log r))^2) - 1, here as mean(expm1(2 clamp(log r))): the same value
            # without the cancellation of subtracting 1 from a mean near 1
            "chi2_token": np.mean(np.expm1(2.0 * np.clip(lrv, -20.0, 20.0))),
            "chi2_seq": np.mean(np.expm1(2.0 * np.clip(Sh, -20.0, 20.0))),
            "ppl_trainer": np.mean(np.exp(-mean_new)),
            "ppl_sampler": np.mean(np.exp(-mean_old)),
            "log_ppl_diff": np.mean(mean_old - mean_new),
            "log_ppl_abs_diff": np.mean(np.abs(mean_old - mean_new)),
            "ppl_ratio": np.mean(np.exp(mean_old - mean_new)),
            "mean_abs_log_ratio": np.mean(np.abs(lrv)),
            "max_abs_log_ratio": np.max(np.abs(lrv)),
        }


def check_corrections(where, got, want, nonzero_at):
    """got: the file's (or JSON's) value of each correction; want: numpy's. nonzero_at collects
    the fractions that are > 0 (for --nonzero)."""
    for k in CORR_KEYS:
        v = got.get(k)
        close(f"{where} {k}", np.nan if v is None else v, want[k], rtol=1e-9, atol=1e-12)
        if k in TOKEN_FRACS + SEQ_FRACS and want[k] > 0:
            nonzero_at.add(k)


def check_nonzero(nonzero_at):
    """--nonzero: every correction fraction must clip or mask something at some length, so that
    none of their checks above compared zeros only"""
    for k in TOKEN_FRACS + SEQ_FRACS:
        checks_equal(f"--nonzero: {k} > 0 at some length", k in nonzero_at, True)


# README "Strata": log r by decile of the sampler's token probability (binned on the stored
# log-prob) and of its entropy (/rollouts/entropy). Edges: the sorted values at index
# floor(k n / 10), k = 1..9; a token's decile = how many edges are <= its value (ties go up).
STRATUM_FIELDS = ["lo", "hi", "mean_log_ratio", "std_log_ratio", "mean_abs_log_ratio", "max_abs_log_ratio",
                  "clipfrac", "k3", "share_abs_log_ratio"]


def numpy_strata(f, gen, gen_len, fwd, L, values, is_prob):
    lo_eps, hi_eps = f.attrs.get("clip_eps_low", 0.2), f.attrs.get("clip_eps_high", 0.2)
    valid = np.arange(L)[None, :] < np.minimum(gen_len, L)[:, None]
    lr = fwd.astype(np.float64) - gen[:, :L].astype(np.float64)
    v = values[:, :L].astype(np.float64)
    m = valid & ~np.isnan(v) & ~np.isnan(lr)
    vals, lrs = v[m], lr[m]
    n = vals.size
    edges = np.sort(vals)[(np.arange(1, 10) * n) // 10] if n else np.full(9, np.nan)
    dec = np.searchsorted(edges, vals, side="right")
    total = np.abs(lrs).sum()
    out = {"count": n, "edges": edges, "bins": []}
    for k in range(10):
        x, y = lrs[dec == k], vals[dec == k]
        b = {"count": x.size}
        with np.errstate(all="ignore"):
            if x.size:
                r = np.exp(x)
                b.update(lo=np.exp(y.min()) if is_prob else y.min(), hi=np.exp(y.max()) if is_prob else y.max(),
                         mean_log_ratio=x.mean(), std_log_ratio=x.std(), mean_abs_log_ratio=np.abs(x).mean(),
                         max_abs_log_ratio=np.abs(x).max(), clipfrac=np.mean((r < 1 - lo_eps) | (r > 1 + hi_eps)),
                         k3=np.mean(r - 1 - x))
            else:
                b.update({k2: np.nan for k2 in STRATUM_FIELDS})
            b["share_abs_log_ratio"] = np.abs(x).sum() / total if total > 0 else np.nan
        out["bins"].append(b)
    return out


def check_strata(where, got, want):
    """got: {"count", "edges", "bins": [{field: value}]} from the file or the JSON; want: numpy's"""
    close(f"{where} count", got["count"], want["count"])
    close(f"{where} edges", got["edges"], want["edges"], atol=0)  # values of the tensors: exact
    for k in range(10):
        close(f"{where} decile {k} count", got["bins"][k]["count"], want["bins"][k]["count"])
        for name in STRATUM_FIELDS:
            v = got["bins"][k].get(name)
            close(f"{where} decile {k} {name}", np.nan if v is None else v, want["bins"][k][name], atol=1e-15)


def file_strata(g):
    """the stored strata group /len_NNNN/strata/KIND in check_strata's form"""
    return {"count": g.attrs["count"], "edges": g.attrs["edges"],
            "bins": [{"count": g["count"][k], **{n: g[n][k] for n in STRATUM_FIELDS}} for k in range(10)]}


def json_strata(j):
    return {"count": j["count"], "edges": [np.nan if e is None else e for e in j["edges"]], "bins": j["deciles"]}


# README "Growth": var(S) (population, over the sequences with a token) against L, fitted as
# var = e^b L^a by least squares of ln var on ln L (numpy.polyfit here: an SVD least-squares solve,
# not the C code's closed-form sums; they agree to ~1e-12, compared at 1e-7 because cap_length
# extrapolates: its relative error is the fit's divided by a, times ln of the extrapolation).
def numpy_growth(f, gen, gen_len, fwd_by_len, lens):
    cap = f.attrs.get("seq_cap", 3.0)
    xs, ys = [], []
    for L in lens:
        valid = np.arange(L)[None, :] < np.minimum(gen_len, L)[:, None]
        has = valid.sum(axis=1) > 0
        lr = fwd_by_len[L].astype(np.float64) - gen[:, :L].astype(np.float64)
        S = np.where(valid, lr, 0.0).sum(axis=1)[has]
        var = S.var() if S.size else np.nan
        if S.size > 1 and np.isfinite(var) and var > 0:
            xs.append(np.log(L))
            ys.append(np.log(var))
    out = {"points": len(xs), "exponent": np.nan, "log_coef": np.nan, "r2": np.nan, "cap": cap,
           "cap_length": np.nan, "looks_like": ""}
    if len(xs) < 2:
        return out
    a, b = np.polyfit(xs, ys, 1)
    x, y = np.array(xs), np.array(ys)
    if len(xs) >= 3 and np.sum((y - y.mean()) ** 2) > 0:
        out["r2"] = 1 - np.sum((y - (b + a * x)) ** 2) / np.sum((y - y.mean()) ** 2)
    out.update(exponent=a, log_coef=b,
               looks_like="slower than sqrt(L)" if a < 0.5 else "sqrt(L)" if a < 1.5 else "L" if a <= 2.5
               else "faster than L")
    if a > 0 and np.log(cap) > 0:
        out["cap_length"] = (np.log(cap) ** 2 / np.exp(b)) ** (1 / a)
    return out


def check_growth(where, got, want):
    close(f"{where} points", got["points"], want["points"])
    checks_equal(f"{where} looks_like", str(got["looks_like"]), want["looks_like"])
    for k in ("exponent", "log_coef", "r2", "cap", "cap_length"):
        v = got.get(k)
        close(f"{where} {k}", np.nan if v is None else v, want[k], rtol=1e-7, atol=1e-12)


def main(path, nonzero=False):
    f = h5py.File(path, "r")
    if f.attrs.get("format") != "ratiocheck-results":
        sys.exit(f"{path}: not a ratiocheck result file")
    gen = f["rollouts/logprob_gen"][...]
    gen_len = f["rollouts/lengths"][...]
    S, G = gen.shape
    ref = f["reference/logprob"][...] if "reference" in f else None
    ent = f["rollouts/entropy"][...] if "entropy" in f["rollouts"] else None
    if ent is not None and np.all(np.isnan(ent)):
        # `ratiocheck score`: logged log-probs carry no distribution, so no token has an entropy
        print("entropy: none known (all NaN: rollouts scored from logged log-probs)")
    elif ent is not None:
        # the sampler's entropy (nats): not recomputable from the file (the distribution is not
        # stored; tests/test_ratio.c checks rc_entropy against numpy), but defined exactly where
        # logprob_gen is, and >= 0 (up to the rounding of a sum of exp(log p) near 1)
        valid_g = np.arange(G)[None, :] < gen_len[:, None]
        equal("entropy NaN exactly where logprob_gen is", np.isnan(ent), np.isnan(gen))
        checks_equal("entropy >= -1e-6 on every valid token", bool(np.all(ent[valid_g] >= -1e-6)), True)
    lens = [int(x) for x in f.attrs["lengths"]]
    fwd_by_len = {}
    nonzero_at = set()
    levels = [0.001, 0.01, 0.5, 0.99, 0.999]
    qnames = ["quantile_0.1pct", "quantile_1pct", "quantile_50pct", "quantile_99pct", "quantile_99.9pct"]
    for L in lens:
        g = f[f"len_{L:04d}"]
        a = g.attrs
        fwd = g["logprob_forward"][...]
        fwd_by_len[L] = fwd
        gl = gen[:, :L]
        valid = np.arange(L)[None, :] < np.minimum(gen_len, L)[:, None]
        lr = fwd.astype(np.float64) - gl.astype(np.float64)
        r = np.exp(lr)
        rv, lrv = r[valid], lr[valid]
        close(f"L={L} count", a["count"], valid.sum())
        close(f"L={L} mean", a["mean"], rv.mean())
        close(f"L={L} std", a["std"], rv.std())
        close(f"L={L} min", a["min"], rv.min())
        close(f"L={L} max", a["max"], rv.max())
        for q, qn in zip(levels, qnames):
            close(f"L={L} {qn}", a[qn], np.quantile(rv, q))
        for th in ["0.001", "0.01", "0.1", "0.2"]:
            close(f"L={L} frac > {th}", a[f"frac_abs_ratio_minus_1_gt_{th}"], np.mean(np.abs(rv - 1) > float(th)))
        lo, hi = f.attrs.get("clip_eps_low", 0.2), f.attrs.get("clip_eps_high", 0.2)
        close(f"L={L} clipfrac", a["clipfrac"], np.mean((rv < 1 - lo) | (rv > 1 + hi)))
        # sequence level: S = sum of log r over a sequence's valid tokens, M = S / tokens
        ntok = valid.sum(axis=1)
        has = ntok > 0
        S_ = np.where(valid, lr, 0.0).sum(axis=1)
        with np.errstate(all="ignore"):
            M_ = S_ / ntok
        S_ = np.where(has, S_, np.nan)
        M_ = np.where(has, M_, np.nan)
        equal(f"L={L} seq_log_ratio_sum", np.isnan(g["seq_log_ratio_sum"][...]), np.isnan(S_))
        close(f"L={L} seq_log_ratio_sum values", g["seq_log_ratio_sum"][...], S_, rtol=1e-9, atol=1e-12)
        close(f"L={L} seq_log_ratio_mean values", g["seq_log_ratio_mean"][...], M_, rtol=1e-9, atol=1e-12)
        close(f"L={L} seq_count", a["seq_count"], has.sum())
        for name, v in (("sum", S_[has]), ("mean", M_[has])):
            close(f"L={L} seq_log_ratio_{name}_mean", a[f"seq_log_ratio_{name}_mean"], v.mean(), atol=1e-12)
            close(f"L={L} seq_log_ratio_{name}_std", a[f"seq_log_ratio_{name}_std"], v.std(), atol=1e-12)
            close(f"L={L} seq_log_ratio_{name}_min", a[f"seq_log_ratio_{name}_min"], v.min(), atol=1e-12)
            close(f"L={L} seq_log_ratio_{name}_max", a[f"seq_log_ratio_{name}_max"], v.max(), atol=1e-12)
        eps, cap = f.attrs.get("seq_eps", 3e-4), f.attrs.get("seq_cap", 3.0)
        geo, sr = np.exp(M_[has]), np.exp(S_[has])
        close(f"L={L} seq_frac_outside_band", a["seq_frac_outside_band"], np.mean((geo < 1 - eps) | (geo > 1 + eps)))
        close(f"L={L} seq_frac_above_cap", a["seq_frac_above_cap"], np.mean(sr > cap))
        close(f"L={L} k1", a["k1"], np.mean(-lrv))
        close(f"L={L} k3", a["k3"], np.mean(rv - 1 - lrv))
        close(f"L={L} mult_prob_err", a["mult_prob_err"], np.mean(np.exp(np.abs(lrv))))
        same = (fwd.view(np.uint32) == gl.view(np.uint32)) & valid
        close(f"L={L} identical_frac", a["identical_frac"], same.sum() / valid.sum())
        diff_pos = np.nonzero((~same & valid).any(axis=0))[0]
        close(f"L={L} first_divergent_position", a["first_divergent_position"],
              diff_pos[0] if len(diff_pos) else -1)
        # the first generated token on its own (t = 0), the later ones (1 <= t < L) beside it
        first, later = valid[:, 0], valid[:, 1:]
        close(f"L={L} first_token_count", a["first_token_count"], first.sum())
        with np.errstate(all="ignore"):
            close(f"L={L} first_token_mean_abs_log_ratio", a["first_token_mean_abs_log_ratio"],
                  np.mean(np.abs(lr[first, 0])) if first.any() else np.nan)
            close(f"L={L} first_token_max_abs_log_ratio", a["first_token_max_abs_log_ratio"],
                  np.max(np.abs(lr[first, 0])) if first.any() else np.nan)
            close(f"L={L} first_token_k3", a["first_token_k3"],
                  np.mean(r[first, 0] - 1 - lr[first, 0]) if first.any() else np.nan)
            close(f"L={L} later_tokens_mean_abs_log_ratio", a["later_tokens_mean_abs_log_ratio"],
                  np.mean(np.abs(lr[:, 1:][later])) if later.any() else np.nan)
        equal(f"L={L} ratio", g["ratio"][...], np.where(np.isnan(lr), np.nan, np.exp(lr)).astype(np.float32))
        equal(f"L={L} log_ratio", g["log_ratio"][...], fwd - gl)
        cnt = valid.sum(axis=0)
        close(f"L={L} pos_count", g["pos_count"][...], cnt)
        absl = np.where(valid, np.abs(lr), np.nan)
        with np.errstate(all="ignore"):
            close(f"L={L} pos_mean_abs_log_ratio", g["pos_mean_abs_log_ratio"][...], np.nanmean(absl, axis=0))
            close(f"L={L} pos_max_abs_log_ratio", g["pos_max_abs_log_ratio"][...], np.nanmax(absl, axis=0))
            close(f"L={L} pos_ratio_std", g["pos_ratio_std"][...],
                  np.nanstd(np.where(valid, r, np.nan), axis=0))
        check_dist(L, g, valid)
        if "routing" in f:
            check_len_routing(f, gen, gen_len, fwd, L, a)
        else:
            equal(f"L={L}: no routing attributes without /routing", [k for k in ROUTING_ATTRS if k in a], [])
        checks_equal(f"L={L}: every attribute recomputed here (LEN_ATTRS, CORR_KEYS, DIST_ATTRS, ROUTING_ATTRS)",
                     sorted(set(a.keys()) - set(LEN_ATTRS) - set(CORR_KEYS) - set(DIST_ATTRS) - set(ROUTING_ATTRS)),
                     [])
        check_corrections(f"L={L}", {k: a[k] for k in CORR_KEYS if k in a},
                          numpy_corrections(gen, gen_len, fwd, L), nonzero_at)
        check_strata(f"L={L} strata/prob", file_strata(g["strata/prob"]),
                     numpy_strata(f, gen, gen_len, fwd, L, gen, True))
        if ent is not None:
            check_strata(f"L={L} strata/entropy", file_strata(g["strata/entropy"]),
                         numpy_strata(f, gen, gen_len, fwd, L, ent, False))
        else:
            equal(f"L={L}: no strata/entropy without /rollouts/entropy", "entropy" in g["strata"], False)
        if ref is not None:
            rf = ref[:, :L].astype(np.float64)
            close(f"L={L} ref_gen_mean_abs", a["ref_gen_mean_abs"], np.abs(gl - rf)[valid].mean())
            close(f"L={L} ref_fwd_mean_abs", a["ref_fwd_mean_abs"], np.abs(fwd - rf)[valid].mean())
            close(f"L={L} ref_gen_max_abs", a["ref_gen_max_abs"], np.abs(gl - rf)[valid].max())
            close(f"L={L} ref_fwd_max_abs", a["ref_fwd_max_abs"], np.abs(fwd - rf)[valid].max())
    expected = numpy_verdict(f, gen, gen_len, lens)
    v = f["verdict"].attrs
    for obj in ("token_ppo", "sequence_is", "gspo"):
        checks_equal(f"verdict {obj}", v[obj], expected[obj])
    if "routing" in f:  # docs/verdict.md: miles' R3 check at the longest length, WARN past 1%
        Lm_ = max(lens)
        rs = numpy_routing(f, gen, gen_len, f[f"len_{Lm_:04d}/logprob_forward"][...], Lm_)
        checks_equal("verdict routing", v["routing"], "WARN" if rs["routing_miles_mismatch"] > 0.01 else "OK")
    else:
        equal("verdict: no routing line without /routing", "routing" in v, False)
    for key in ("len", "worst_token_sequence", "worst_token_position", "worst_sequence"):
        close(f"verdict {key}", v[key], expected[key])
    close("verdict worst_token_ratio", v["worst_token_ratio"], expected["worst_token_ratio"])
    close("verdict worst_sequence_ratio", v["worst_sequence_ratio"], expected["worst_sequence_ratio"])
    print("verdict:", ", ".join(f"{o} {expected[o]}" for o in ("token_ppo", "sequence_is", "gspo")))
    c = f["cross_length"]
    for i, (la, lb) in enumerate(zip(c["len_a"][...], c["len_b"][...])):
        m = min(la, lb)
        valid = np.arange(m)[None, :] < np.minimum(gen_len, m)[:, None]
        d = np.abs(fwd_by_len[la][:, :m].astype(np.float64) - fwd_by_len[lb][:, :m].astype(np.float64))[valid]
        close(f"cross {la}/{lb} max_abs", c["max_abs"][i], d.max())
        close(f"cross {la}/{lb} mean_abs", c["mean_abs"][i], d.mean())
        close(f"cross {la}/{lb} count", c["count"][i], d.size)
    gw = f["growth"]
    check_growth("growth", {**{k: gw.attrs[k] for k in ("exponent", "log_coef", "r2", "cap", "cap_length",
                                                          "looks_like")}, "points": gw.attrs["points"]},
                 numpy_growth(f, gen, gen_len, fwd_by_len, lens))
    equal("growth len", gw["len"][...], lens)
    close("growth seq_log_ratio_sum_var", gw["seq_log_ratio_sum_var"][...],
          [f[f"len_{L:04d}"].attrs["seq_log_ratio_sum_std"] ** 2 for L in lens])
    if "sweep" in f:
        check_sweep(f, gen, gen_len, lens, fwd_by_len)
    if "routing" in f:
        check_routing(f, gen, gen_len, fwd_by_len[lens[-1]], lens[-1])
    if nonzero:
        check_nonzero(nonzero_at)
    for msg in failures:
        print("MISMATCH", msg)
    print(f"{checks - len(failures)} passed, {len(failures)} failed")
    return 1 if failures else 0


def numpy_routing(f, gen, gen_len, fwd, L):
    """A length's routing statistics (the ROUTING_ATTRS) over the valid tokens t < L, |log r| at L."""
    g = f["routing"]
    a, b = g["sampler_experts"][...].astype(np.int64), g["trainer_experts"][...].astype(np.int64)
    S, G, Lm, k = a.shape
    layer = g["layer"][...]
    valid = (a[:, :, 0, 0] >= 0) & (b[:, :, 0, 0] >= 0) & (np.arange(G)[None, :] < L)
    common = (a[..., :, None] == b[..., None, :]).any(axis=-1).sum(axis=-1)  # [S, G, Lm]
    flip = (common < k) & valid[..., None]
    none = (common == 0) & valid[..., None]
    n = int(valid.sum())
    tok_flip = flip.any(axis=-1)
    first = np.where(tok_flip, flip.argmax(axis=-1), Lm)
    per_layer = none.sum(axis=(0, 1)) / n if n else np.full(Lm, np.nan)
    lr = np.full((S, G), np.nan)
    lr[:, :L] = fwd.astype(np.float64) - gen[:, :L].astype(np.float64)
    ok = valid & ~np.isnan(lr)
    x = np.abs(lr)
    xf, xs = x[ok & tok_flip], x[ok & ~tok_flip]
    tot = xf.sum() + xs.sum()
    return {"routing_tokens": n, "routing_tokens_flip": int(tok_flip.sum()),
            "routing_share_flip": tok_flip.sum() / n if n else np.nan,
            "routing_decision_share": flip.sum() / (n * Lm) if n else np.nan,
            "routing_mean_overlap": (common / k)[valid].mean() if n else np.nan,
            "routing_miles_mismatch": per_layer.max() if n else np.nan,
            "routing_miles_layer": int(layer[per_layer.argmax()]) if n else -1,
            "routing_first_layer": int(layer[first.min()]) if tok_flip.any() else -1,
            "routing_abs_log_ratio_flip": xf.mean() if xf.size else np.nan,
            "routing_abs_log_ratio_same": xs.mean() if xs.size else np.nan,
            "routing_share_abs_log_ratio_flip": xf.sum() / tot if tot > 0 else np.nan}


def check_len_routing(f, gen, gen_len, fwd, L, a):
    for key, want in numpy_routing(f, gen, gen_len, fwd, L).items():
        if isinstance(want, int):
            checks_equal(f"L={L} {key}", int(a[key]), want)
        else:
            close(f"L={L} {key}", a[key], want)


# docs/routing.md: a flip is a (token, layer) whose two top-k expert sets differ; miles' R3 check
# (radixark/miles, miles/utils/replay_base.py, check_replay_result) counts per layer the tokens whose
# sets share no expert and fails past 1% of them.
def check_routing(f, gen, gen_len, fwd, L):
    g = f["routing"]
    a, b = g["sampler_experts"][...].astype(np.int64), g["trainer_experts"][...].astype(np.int64)
    S, G, Lm, k = a.shape
    layer = g["layer"][...]
    valid = (a[:, :, 0, 0] >= 0) & (b[:, :, 0, 0] >= 0)
    equal("routing valid tokens", valid, np.arange(G)[None, :] < gen_len[:, None])
    # |A & B| per (token, layer): each sampler expert found among the trainer's
    common = (a[..., :, None] == b[..., None, :]).any(axis=-1).sum(axis=-1)  # [S, G, Lm]
    flip = (common < k) & valid[..., None]
    none = (common == 0) & valid[..., None]
    n = int(valid.sum())
    tok_flip = flip.any(axis=-1)
    first = np.where(tok_flip, flip.argmax(axis=-1), -1)
    equal("routing layer_flips", g["layer_flips"][...], flip.sum(axis=(0, 1)))
    equal("routing layer_no_common", g["layer_no_common"][...], none.sum(axis=(0, 1)))
    equal("routing layer_first", g["layer_first"][...], [(first == m).sum() for m in range(Lm)])
    equal("routing token_flips", g["token_flips"][...], np.where(valid, flip.sum(axis=-1), -1))
    checks_equal("routing tokens", int(g.attrs["tokens"]), n)
    checks_equal("routing tokens_flip", int(g.attrs["tokens_flip"]), int(tok_flip.sum()))
    close("routing share_flip", g.attrs["share_flip"], tok_flip.sum() / n if n else np.nan)
    close("routing decision_share", g.attrs["decision_share"], flip.sum() / (n * Lm) if n else np.nan)
    close("routing mean_overlap", g.attrs["mean_overlap"],
          (common / k)[valid].mean() if n else np.nan)
    per_layer = none.sum(axis=(0, 1)) / n if n else np.full(Lm, np.nan)
    close("routing miles_mismatch", g.attrs["miles_mismatch"], per_layer.max() if n else np.nan)
    checks_equal("routing miles_layer", int(g.attrs["miles_layer"]), int(layer[per_layer.argmax()]) if n else -1)
    checks_equal("routing verdict", g.attrs["verdict"], "WARN" if n and per_layer.max() > 0.01 else "OK")
    fl = np.where(first >= 0, first, Lm)
    checks_equal("routing first_layer", int(g.attrs["first_layer"]),
                 int(layer[fl.min()]) if tok_flip.any() else -1)
    checks_equal("routing len", int(g.attrs["len"]), L)
    lr = np.full((S, G), np.nan)
    lr[:, :L] = fwd.astype(np.float64) - gen[:, :L].astype(np.float64)
    ok = valid & ~np.isnan(lr)
    x = np.abs(lr)
    xf, xs = x[ok & tok_flip], x[ok & ~tok_flip]
    close("routing abs_log_ratio_flip", g.attrs["abs_log_ratio_flip"], xf.mean() if xf.size else np.nan)
    close("routing abs_log_ratio_same", g.attrs["abs_log_ratio_same"], xs.mean() if xs.size else np.nan)
    tot = xf.sum() + xs.sum()
    close("routing share_abs_log_ratio_flip", g.attrs["share_abs_log_ratio_flip"], xf.sum() / tot if tot > 0 else np.nan)
    w = [g["sampler_weights"][...], g["trainer_weights"][...]]
    for side, e in enumerate((a, b)):  # weights exactly where experts are
        equal(f"routing weights {side} defined", ~np.isnan(w[side]), e >= 0)


def row_stats(f, gen, gen_len, fwd, L):
    """The statistics a sweep row stores, from its tensors (numpy, float64)."""
    valid = np.arange(L)[None, :] < np.minimum(gen_len, L)[:, None]
    lr = fwd.astype(np.float64) - gen[:, :L].astype(np.float64)
    r = np.exp(lr)
    rv, lrv = r[valid], lr[valid]
    lo, hi = f.attrs.get("clip_eps_low", 0.2), f.attrs.get("clip_eps_high", 0.2)
    eps, cap = f.attrs.get("seq_eps", 3e-4), f.attrs.get("seq_cap", 3.0)
    ntok = valid.sum(axis=1)
    has = ntok > 0
    S_ = np.where(valid, lr, 0.0).sum(axis=1)[has]
    M_ = S_ / ntok[has]
    same = (fwd.view(np.uint32) == gen[:, :L].view(np.uint32)) & valid
    return {**numpy_corrections(gen, gen_len, fwd, L),
            "count": valid.sum(), "mean": rv.mean(), "std": rv.std(), "min": rv.min(), "max": rv.max(),
            "clipfrac": np.mean((rv < 1 - lo) | (rv > 1 + hi)), "k1": np.mean(-lrv), "k3": np.mean(rv - 1 - lrv),
            "mult_prob_err": np.mean(np.exp(np.abs(lrv))), "identical_frac": same.sum() / valid.sum(),
            "seq_log_ratio_sum_std": S_.std(),
            "seq_frac_outside_band": np.mean((np.exp(M_) < 1 - eps) | (np.exp(M_) > 1 + eps)),
            "seq_frac_above_cap": np.mean(np.exp(S_) > cap)}


def check_sweep(f, gen, gen_len, lens, fwd_by_len):
    """`ratiocheck sweep` files: every row's statistics from its own tensors, its
    identical_to_base flag from a bitwise comparison with the base, the noise floor
    identical, and /sweep's best = the row with the lowest k3 at the longest length
    (below the base's)."""
    sw = f["sweep"]
    n = int(sw.attrs["settings"])
    Lmax = max(lens)
    best, best_k3 = -1, row_stats(f, gen, gen_len, fwd_by_len[Lmax], Lmax)["k3"]
    other, other_k3 = -1, best_k3
    for i in range(n):
        g = sw[f"{i:02d}"]
        name = g.attrs["name"]
        if g.attrs["skipped"]:
            equal(f"sweep {name}: a skipped row holds no tensors", "logprob_generation" in g, False)
            continue
        inv = "kernels=invariant" in str(g.attrs["sampler"]) and "kernels=invariant" in str(g.attrs["trainer"]) \
            and str(f.attrs["kernels"]) != "invariant"
        close(f"sweep {name} batch_invariant", g.attrs["batch_invariant"], int(inv))
        rg = g["logprob_generation"][...]
        same = rg.tobytes() == gen.tobytes()
        for L in lens:
            a = g[f"len_{L:04d}"].attrs
            fwd = g[f"len_{L:04d}/logprob_forward"][...]
            same = same and fwd.tobytes() == fwd_by_len[L].tobytes()
            for k, v in row_stats(f, rg, gen_len, fwd, L).items():
                close(f"sweep {name} L={L} {k}", a[k], v, atol=1e-12)
        close(f"sweep {name} identical_to_base", g.attrs["identical_to_base"], int(same))
        if g.attrs["noise_floor"]:
            close(f"sweep {name}: the noise floor is identical", int(same), 1)
        else:
            k3 = row_stats(f, rg, gen_len, g[f"len_{Lmax:04d}/logprob_forward"][...], Lmax)["k3"]
            if k3 < best_k3:
                best, best_k3 = i, k3
            if not g.attrs["batch_invariant"] and k3 < other_k3:
                other, other_k3 = i, k3
    close("sweep best", sw.attrs["best"], best)
    close("sweep best without batch-invariant kernels", sw.attrs["best_without_invariant"], other)
    print(f"sweep: {n} rows, best: {sw.attrs['best_name'] if best >= 0 else 'none'}")


def check_report_json(json_path, path, nonzero=False):
    """The verdict and the corrections of `ratiocheck report FILE --json` (recomputed from the
    file's tensors) against numpy."""
    import json
    with open(json_path) as jf:
        j = json.load(jf)
    f = h5py.File(path, "r")
    gen = f["rollouts/logprob_gen"][...]
    gen_len = f["rollouts/lengths"][...]
    lens = [int(x) for x in f.attrs["lengths"]]
    want = numpy_verdict(f, gen, gen_len, lens)
    for obj in ("token_ppo", "sequence_is", "gspo"):
        checks_equal(f"report verdict {obj}", j["verdict"][obj]["level"], want[obj])
    if "routing" in f:  # miles' R3 check at the longest length (docs/verdict.md)
        Lm_ = max(lens)
        rs = numpy_routing(f, gen, gen_len, f[f"len_{Lm_:04d}/logprob_forward"][...], Lm_)
        checks_equal("report verdict routing", j["verdict"]["routing"]["level"],
                     "WARN" if rs["routing_miles_mismatch"] > 0.01 else "OK")
    else:
        equal("report verdict: no routing line without /routing", "routing" in j["verdict"], False)
    close("report verdict worst_token_ratio", j["verdict"]["worst_token"]["ratio"], want["worst_token_ratio"])
    close("report verdict worst_sequence_ratio", j["verdict"]["worst_sequence"]["seq_ratio"],
          want["worst_sequence_ratio"])
    print("verdict:", ", ".join(f"{o} {want[o]}" for o in ("token_ppo", "sequence_is", "gspo")))
    nonzero_at = set()
    ent = f["rollouts/entropy"][...] if "entropy" in f["rollouts"] else None
    fwd_by_len = {}
    for entry in j["lens"]:
        L = int(entry["len"])
        fwd = f[f"len_{L:04d}/logprob_forward"][...]
        fwd_by_len[L] = fwd
        check_corrections(f"report L={L}", entry, numpy_corrections(gen, gen_len, fwd, L), nonzero_at)
        check_strata(f"report L={L} strata prob", json_strata(entry["strata"]["prob"]),
                     numpy_strata(f, gen, gen_len, fwd, L, gen, True))
        if ent is None:  # an older file: no entropy, so no entropy strata
            checks_equal(f"report L={L} strata entropy is null", entry["strata"]["entropy"], None)
        else:
            check_strata(f"report L={L} strata entropy", json_strata(entry["strata"]["entropy"]),
                         numpy_strata(f, gen, gen_len, fwd, L, ent, False))
    check_growth("report growth", j["growth"], numpy_growth(f, gen, gen_len, fwd_by_len, lens))
    if nonzero:
        check_nonzero(nonzero_at)
    for msg in failures:
        print("MISMATCH", msg)
    print(f"{checks - len(failures)} passed, {len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    args = sys.argv[1:]
    nz = "--nonzero" in args
    args = [a for a in args if a != "--nonzero"]
    if len(args) == 3 and args[0] == "--report-json":
        sys.exit(check_report_json(args[1], args[2], nz))
    if len(args) != 1:
        sys.exit(__doc__)
    sys.exit(main(args[0], nz))
