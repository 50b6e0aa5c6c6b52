#!/usr/bin/env python3
"""Spec conformance for the rollout corrections: verl's own rollout-correction helper on stored tensors.

Writes data/fixtures/spec/verl_corr.safetensors (+ verl_corr.md) for tests/test_spec.c (case
verl_rollout_corr), which feeds the same log-probs to ratiocheck's statistics (rc_compute_stats,
src/check/stats.c) and compares its corrections (rc_corr_stats) with what verl computed.

verl is not installed: its wheel (pinned: VERL_VERSION, sha256 VERL_WHEEL_SHA256, Apache-2.0) is
fetched at generation time with `pip download verl==VERL_VERSION --no-deps` (or --wheel PATH), and
only two of its files are executed, unmodified, from the wheel: verl/utils/torch_functional.py
(masked_sum, masked_mean) and verl/trainer/ppo/rollout_corr_helper.py. The modules they import for
other purposes (Ray's DataProto, config dataclasses, tensordict, the device helpers) are replaced by
empty stand-ins; none of the functions called here uses them. Nothing of verl is committed.

verl calls per stored value (log_ratio = trainer - sampler, float64 from the stored float32):
  token_tis_clipfrac    compute_rollout_correction_weights(rollout_is="token", threshold 2.0)
                        ["rollout_is_ratio_fraction_high"]
  icepop_maskfrac       compute_rollout_correction_weights(rollout_is="token", threshold "0.5_5.0")
                        ["rollout_is_oob_ratio"]  (verl's decoupled_token_icepop preset bounds)
  seq_tis_clipfrac      compute_rollout_correction_weights(rollout_is="sequence", threshold 2.0)
                        ["rollout_is_ratio_fraction_high"]
  token_mis_maskfrac    compute_rollout_rejection_mask(rollout_rs="token_k1", "0.5_2.0"): share of valid tokens masked
  seq_mis_maskfrac      compute_rollout_rejection_mask(rollout_rs="seq_sum_k1", "0.5_2.0"): share of sequences masked
  seq_geo_rs_maskfrac   compute_rollout_rejection_mask(rollout_rs="seq_mean_k1", "0.999_1.001"): share of sequences masked
  chi2_token, chi2_seq, ppl_trainer (training_ppl), ppl_sampler (rollout_ppl), log_ppl_diff,
  log_ppl_abs_diff, ppl_ratio   compute_offpolicy_metrics(trainer, sampler, mask)

Where verl's value is not ratiocheck's exactly: masked_mean divides by (count + 1e-8) (means and
fractions low by a relative 1e-8 / count at most), and some fractions are `.float().mean()` (an exact
count ratio rounded once to float32: relative 2^-24). The C test allows a relative 2^-23 (plus
1e-15 absolute); both sides compute from the same float32 log-probs, in float64.

Usage:
    python3 tools/make_verl_corr_fixtures.py                 # writes data/fixtures/spec/verl_corr.*
    python3 tools/make_verl_corr_fixtures.py --wheel verl-0.9.1-py3-none-any.whl --out /tmp/spec
Pins: tools/requirements-spec-fixtures.txt (torch, safetensors, numpy; verl fetched as above).
"""

import argparse
import hashlib
import os
import platform
import subprocess
import sys
import tempfile
import types
import zipfile

os.environ["CUDA_VISIBLE_DEVICES"] = ""

import numpy as np  # noqa: E402
import safetensors  # noqa: E402
import torch  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from st_canonical import save_safetensors_canonical  # noqa: E402

VERL_VERSION = "0.9.1"
VERL_WHEEL = f"verl-{VERL_VERSION}-py3-none-any.whl"
VERL_WHEEL_SHA256 = "db6e6f2a8d9d5808d9ec32d357a42319fdc6967df688ff9d9810050f49bfdd14"
FILES = ["verl/utils/torch_functional.py", "verl/trainer/ppo/rollout_corr_helper.py"]
SEED = 20261205
B, G = 96, 24  # sequences, generated tokens per sequence (fewer where a sequence stops early)


def fetch_wheel(path):
    if path is None:
        d = tempfile.mkdtemp(prefix="rc_verl_")
        subprocess.run([sys.executable, "-m", "pip", "download", f"verl=={VERL_VERSION}", "--no-deps", "-q",
                        "-d", d], check=True)
        path = os.path.join(d, VERL_WHEEL)
    with open(path, "rb") as f:
        got = hashlib.sha256(f.read()).hexdigest()
    assert got == VERL_WHEEL_SHA256, f"{path}: sha256 {got}, pinned {VERL_WHEEL_SHA256}"
    return path


def load_verl(wheel):
    """Execute FILES from the wheel under their own module names; stand-ins for what they import
    and do not use in the functions called here."""
    def stub(name, **attrs):
        m = types.ModuleType(name)
        m.__path__ = []
        m.__dict__.update(attrs)
        sys.modules[name] = m
        return m

    class _Unused:
        def __init__(self, *a, **k):
            raise RuntimeError("stand-in: not used by the functions called here")

    stub("tensordict", TensorDict=_Unused)
    for n in ["verl", "verl.utils", "verl.trainer", "verl.trainer.ppo", "verl.trainer.config", "verl.workers",
              "verl.workers.config"]:
        stub(n)
    stub("verl.utils.device", get_device_name=lambda: "cpu", get_torch_device=lambda: torch.cpu)
    stub("verl.protocol", DataProto=_Unused)
    stub("verl.trainer.config.algorithm", RolloutCorrectionConfig=_Unused)
    stub("verl.workers.config.actor", PolicyLossConfig=_Unused)
    mods, shas = {}, {}
    with zipfile.ZipFile(wheel) as z:
        for fn in FILES:
            src = z.read(fn)
            shas[fn] = hashlib.sha256(src).hexdigest()
            name = fn[:-3].replace("/", ".")
            m = types.ModuleType(name)
            m.__file__ = f"{wheel}/{fn}"
            sys.modules[name] = m
            parent, _, leaf = name.rpartition(".")
            setattr(sys.modules[parent], leaf, m)
            exec(compile(src, m.__file__, "exec"), m.__dict__)
            mods[fn] = m
    return mods[FILES[1]], shas


def make_data():
    g = torch.Generator().manual_seed(SEED)
    valid = torch.randint(G // 3, G + 1, (B,), generator=g)
    valid[:B // 2] = G  # half run to the end
    sampler = -torch.rand(B, G, generator=g).pow(2) * 6.0 - 1e-3           # log-probs in (-6, 0)
    # log r: mostly small, some sequences with a drift, some heavy-tailed tokens (every correction fires)
    drift = torch.randn(B, 1, generator=g) * 0.02 * (torch.rand(B, 1, generator=g) < 0.5)
    lr = torch.randn(B, G, generator=g) * 0.05 + drift
    tail = torch.rand(B, G, generator=g) < 0.04
    lr = torch.where(tail, torch.randn(B, G, generator=g) * 1.2, lr)
    trainer = torch.clamp(sampler + lr, max=0.0)
    mask = (torch.arange(G)[None, :] < valid[:, None])
    sampler32 = sampler.float()
    trainer32 = torch.where(mask, trainer.float(), torch.tensor(float("nan")))
    return sampler32, trainer32, valid.to(torch.int32), mask


def verl_values(h, sampler32, trainer32, mask):
    m = mask.to(torch.float64)
    old = torch.nan_to_num(trainer32.double(), nan=0.0)  # verl: old_log_prob = the trainer's
    roll = sampler32.double()
    lr = (old - roll) * m
    n_tok = m.sum().item()
    out = {}
    _, mt = h.compute_rollout_correction_weights(lr, m, rollout_is="token", rollout_is_threshold=2.0)
    out["token_tis_clipfrac"] = mt["rollout_is_ratio_fraction_high"]
    _, mi = h.compute_rollout_correction_weights(lr, m, rollout_is="token", rollout_is_threshold="0.5_5.0")
    out["icepop_maskfrac"] = mi["rollout_is_oob_ratio"]
    _, ms = h.compute_rollout_correction_weights(lr, m, rollout_is="sequence", rollout_is_threshold=2.0)
    out["seq_tis_clipfrac"] = ms["rollout_is_ratio_fraction_high"]
    kept, _ = h.compute_rollout_rejection_mask(lr, m, rollout_rs="token_k1", rollout_rs_threshold="0.5_2.0")
    out["token_mis_maskfrac"] = (n_tok - kept.sum().item()) / n_tok
    kept, _ = h.compute_rollout_rejection_mask(lr, m, rollout_rs="seq_sum_k1", rollout_rs_threshold="0.5_2.0")
    out["seq_mis_maskfrac"] = (kept.sum(-1) == 0).double().mean().item()
    kept, _ = h.compute_rollout_rejection_mask(lr, m, rollout_rs="seq_mean_k1", rollout_rs_threshold="0.999_1.001")
    out["seq_geo_rs_maskfrac"] = (kept.sum(-1) == 0).double().mean().item()
    mo = h.compute_offpolicy_metrics(old, roll, m)
    for ours, theirs in [("chi2_token", "chi2_token"), ("chi2_seq", "chi2_seq"), ("ppl_trainer", "training_ppl"),
                         ("ppl_sampler", "rollout_ppl"), ("log_ppl_diff", "log_ppl_diff"),
                         ("log_ppl_abs_diff", "log_ppl_abs_diff"), ("ppl_ratio", "ppl_ratio")]:
        out[ours] = mo[theirs]
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data",
                                                  "fixtures", "spec"))
    ap.add_argument("--wheel", help=f"a downloaded {VERL_WHEEL} (default: pip download it)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    os.makedirs(args.out, exist_ok=True)
    h, shas = load_verl(fetch_wheel(args.wheel))
    sampler32, trainer32, valid, mask = make_data()
    vals = verl_values(h, sampler32, trainer32, mask)
    for k, v in vals.items():
        assert np.isfinite(v), k
    fracs = [k for k in vals if k.endswith("frac")]
    for k in fracs:  # every correction fires, none fires everywhere
        assert 0 < vals[k] < 1, (k, vals[k])
    tensors = {"logprob_gen": sampler32.contiguous(), "logprob_fwd": trainer32.contiguous(),
               "gen_valid": valid.contiguous()}
    tensors.update({f"verl.{k}": torch.tensor([v], dtype=torch.float64) for k, v in vals.items()})
    meta = {"generator": "tools/make_verl_corr_fixtures.py", "seed": str(SEED), "verl_version": VERL_VERSION,
            "verl_wheel_sha256": VERL_WHEEL_SHA256, "python": platform.python_version(), "torch": torch.__version__,
            "numpy": np.__version__, "safetensors": safetensors.__version__}
    meta.update({f"sha256.{fn}": s for fn, s in shas.items()})
    path = os.path.join(args.out, "verl_corr.safetensors")
    save_safetensors_canonical(tensors, path, meta)
    os.chmod(path, 0o644)
    L = ["# verl's rollout-correction helper on stored log-probs", "",
         "Written by `tools/make_verl_corr_fixtures.py` (do not edit): verl " + VERL_VERSION + " (wheel sha256 "
         + VERL_WHEEL_SHA256 + "), files executed from the wheel: "
         + ", ".join(f"`{fn}` (sha256 {s})" for fn, s in shas.items()) + ". "
         + f"Python {meta['python']}, torch {meta['torch']}, numpy {meta['numpy']}, safetensors {meta['safetensors']}.",
         "", f"{B} sequences of at most {G} tokens, {int(mask.sum())} valid tokens. "
         "`logprob_gen` (sampler, float32), `logprob_fwd` (trainer, NaN past `gen_valid`), and verl's value of",
         "each correction as `verl.<ratiocheck's name>` (float64):", "",
         "| ratiocheck name | verl's value |", "|---|---:|"]
    L += [f"| {k} | {v:.17g} |" for k, v in vals.items()]
    L.append("")
    with open(os.path.join(args.out, "verl_corr.md"), "w") as f:
        f.write("\n".join(L))
    print("\n".join(L))


if __name__ == "__main__":
    main()
