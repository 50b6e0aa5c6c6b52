#!/usr/bin/env python3
"""Spec conformance for the Baichuan fixtures: the upstream modelling files, run on the fixtures' weights.

tools/baichuan_ref.py is a re-implementation of Baichuan's published ``modeling_baichuan.py`` remote
code; the fixtures under data/fixtures/baichuan*/ (and data/fixtures/peaked/peaked_baichuan*) hold
its outputs. This script runs the upstream files themselves -- fetched at run time at pinned commits,
sha256-checked, never committed -- on each fixture's config.json and model.safetensors and compares
their fp32 log-probs with the fixture's ``forward_logprobs_f32`` (baichuan_ref's fp32 forward:
expected bit-identical) and their plain ``.double()`` forward with ``forward_logprobs_f64`` (the
true fp64 forward; upstream's .double() keeps fp32 round trips, so within HF's own fp32 error).

Upstream sources (UPSTREAM below, the copies tools/baichuan_ref.py names; Baichuan2-7B with
SDPA's MATH backend, as there): git repositories at a commit, fetched with
``git clone`` + ``git show COMMIT:PATH`` (or from a local clone given with --mirror OWNER/NAME=DIR).
Imports the files make for training or chat only (xformers, accelerate's init_empty_weights,
the chat streamer's helpers) get empty stand-ins; the inference path does not use them.

Usage:
    python3 tools/baichuan_upstream_check.py                     # clones the pinned repos (network)
    python3 tools/baichuan_upstream_check.py --mirror baichuan-inc/Baichuan-7B=/path/to/clone ...
    python3 tools/baichuan_ref.py --upstream                      # the same, from the reference's CLI
Exit status 0 when every fixture agrees, 1 otherwise; one line per fixture.
"""

import argparse
import contextlib
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import types

os.environ["CUDA_VISIBLE_DEVICES"] = ""

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
import transformers  # noqa: E402  (imported before the stand-ins: its dependency checks see the real packages)
from safetensors import safe_open  # noqa: E402
from safetensors.torch import load_file  # noqa: E402

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# variant -> (repository, commit, {file in the package: (path in the repo, sha256)}, model class,
#             (config module, config class), run the attention with SDPA's MATH backend)
UPSTREAM = {
    "baichuan-7b": ("baichuan-inc/Baichuan-7B", "5a3991504e33a5de7280bb8b20d4512e8c5b2ef4", {
        "modeling_baichuan.py": ("models/modeling_baichuan.py",
                                 "ebcda383f401a8bac3ce2071e29bc82d33c2d97219572177f586fa877c622a3d"),
        "configuration_baichuan.py": ("models/configuration_baichuan.py",
                                      "7970c898560181926560e12450dbe80790b171b36d581164b12dd00c38efd5d4"),
    }, "BaiChuanForCausalLM", ("configuration_baichuan", "BaiChuanConfig"), False),
    # the vendored copy imports its configuration from a sub-package "model"
    "baichuan-13b": ("tingshua-yts/Baichuan-13B", "24011150ea4b31d3b9440caf87f0ce8e2441d0a4", {
        "modeling_baichuan.py": ("model/modeling_baichuan.py",
                                 "46b48e61cdcda1f783d3fec3c5c1c32979e3e16a7664dadf34d5906fce64875f"),
        "model/configuration_baichuan.py": ("model/configuration_baichuan.py",
                                            "6ff61d96ca508b2f4f63e8dee3314baedab04a235e86ef352b7db19eff3c7cf4"),
    }, "BaichuanForCausalLM", ("model.configuration_baichuan", "BaichuanConfig"), False),
    "baichuan2-7b": ("mlpod/Baichuan2-CPU-DEBUG", "e4a6ea74600b71c0bcd4f0e982b36dea541a5a3e", {
        "modeling_baichuan.py": ("model/modeling_baichuan.py",
                                 "3eb73615acbe7fee0333427f4d4392cb016c61bdf7ff373a8cf1ec11cf9026f1"),
        "configuration_baichuan.py": ("model/configuration_baichuan.py",
                                      "74044836b36690483e02e97c3247291f08ec64af1f4e18289928ae60aae58481"),
        "generation_utils.py": ("model/generation_utils.py",
                                "a4067a97fadd3a4be73c886cb9cd1ab9f3e028d500ff51ae48d2c82e745ea07c"),
    }, "BaichuanForCausalLM", ("configuration_baichuan", "BaichuanConfig"), True),
    "baichuan2-13b": ("jrd77/Baichuan2-13B-Chat", "c6f8592a60b4ad73c210b28dd2ab3cca51abbf93", {
        "modeling_baichuan.py": ("modeling_baichuan.py",
                                 "ecf7e6da06e1cdb74a6243f74a305fe44f6752f89cc5063b5872c33c6f4afb72"),
        "configuration_baichuan.py": ("configuration_baichuan.py",
                                      "f8eb51ffa2a036cf4f9f3604b377220fd0f440307c9b0268e17deb632f32e64a"),
        "generation_utils.py": ("generation_utils.py",
                                "a4067a97fadd3a4be73c886cb9cd1ab9f3e028d500ff51ae48d2c82e745ea07c"),
    }, "BaichuanForCausalLM", ("configuration_baichuan", "BaichuanConfig"), False),
}
FIXTURES = {
    "baichuan_7b": "baichuan-7b",
    "peaked/peaked_baichuan_7b": "baichuan-7b",
    "baichuan_13b": "baichuan-13b",
    "baichuan2_7b": "baichuan2-7b",
    "baichuan2_13b": "baichuan2-13b",
    "peaked/peaked_baichuan2_13b": "baichuan2-13b",
}


def fetch(variant, mirrors, dest):
    repo, commit, files = UPSTREAM[variant][:3]
    src = mirrors.get(repo)
    if src is None:
        src = tempfile.mkdtemp(prefix="rc_upstream_")
        subprocess.run(["git", "clone", "-q", "--filter=blob:none", "--no-checkout", f"https://github.com/{repo}",
                        src], check=True)
    git_dir = src if os.path.isdir(os.path.join(src, "objects")) else os.path.join(src, ".git")
    if not os.path.isdir(git_dir):
        git_dir = src
    for name, (path, sha) in files.items():
        data = subprocess.run(["git", "--git-dir", git_dir, "show", f"{commit}:{path}"], check=True,
                              capture_output=True).stdout
        got = hashlib.sha256(data).hexdigest()
        assert got == sha, f"{repo}@{commit}:{path}: sha256 {got}, pinned {sha}"
        os.makedirs(os.path.dirname(os.path.join(dest, name)), exist_ok=True)
        if os.path.dirname(name):
            open(os.path.join(dest, os.path.dirname(name), "__init__.py"), "a").close()
        with open(os.path.join(dest, name), "wb") as f:
            f.write(data)


@contextlib.contextmanager
def stand_ins():
    """Modules the upstream files import for training or chat only."""
    saved = {k: sys.modules.get(k) for k in ("xformers", "xformers.ops", "accelerate")}

    def unused(*a, **k):
        raise RuntimeError("stand-in: not on the inference path")

    x = types.ModuleType("xformers")
    x.ops = types.SimpleNamespace(memory_efficient_attention=unused, LowerTriangularMask=unused)
    sys.modules["xformers"], sys.modules["xformers.ops"] = x, x.ops
    if saved["accelerate"] is None:
        a = types.ModuleType("accelerate")
        a.init_empty_weights = contextlib.nullcontext
        sys.modules["accelerate"] = a
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                sys.modules.pop(k, None)
            else:
                sys.modules[k] = v


def import_upstream(variant, pkg_dir):
    import importlib

    name = "rc_upstream_" + variant.replace("-", "_")
    sys.path.insert(0, os.path.dirname(pkg_dir))
    with stand_ins():
        mod = importlib.import_module(os.path.basename(pkg_dir) + ".modeling_baichuan")
        cfg_name, cfg_cls = UPSTREAM[variant][4]
        cfg_mod = importlib.import_module(os.path.basename(pkg_dir) + "." + cfg_name)
    sys.path.pop(0)
    return getattr(mod, UPSTREAM[variant][3]), getattr(cfg_mod, cfg_cls), name


def run_fixture(d, variant, model_cls, cfg_cls):
    with open(os.path.join(d, "config.json")) as f:
        cfg = json.load(f)
    keep = {k: v for k, v in cfg.items() if k not in ("architectures", "model_type", "transformers_version",
                                                        "auto_map", "dtype", "torch_dtype")}
    config = cfg_cls(**keep)
    config._attn_implementation = "eager"
    torch.manual_seed(0)
    model = model_cls(config).eval()
    sd = load_file(os.path.join(d, "model.safetensors"))
    missing, unexpected = model.load_state_dict(sd, strict=False)
    missing = [k for k in missing if not k.endswith(("inv_freq", "cos_cached", "sin_cached", "future_mask"))]
    assert not missing and not unexpected, (missing, unexpected)
    with safe_open(os.path.join(d, "reference.safetensors"), framework="pt") as f:
        R = {k: f.get_tensor(k) for k in ("tokens", "lengths", "forward_logprobs_f32", "forward_logprobs_f64")}
    d32 = d64 = ref_err = 0.0
    n_bitwise = n_total = 0
    m64 = None
    for b, L in enumerate(R["lengths"].tolist()):
        ids = R["tokens"][b, :L].long()[None]
        with torch.no_grad():
            lp32 = F.log_softmax(model(input_ids=ids).logits[0].float(), -1)
            if m64 is None:
                import copy
                m64 = copy.deepcopy(model).double()
            lp64 = F.log_softmax(m64(input_ids=ids).logits[0].double(), -1)
        want32 = R["forward_logprobs_f32"][b, :L]
        want64 = R["forward_logprobs_f64"][b, :L]
        n_bitwise += int((lp32 == want32).sum())
        n_total += lp32.numel()
        d32 = max(d32, (lp32.double() - want32.double()).abs().max().item())
        d64 = max(d64, (lp64 - want64).abs().max().item())
        ref_err = max(ref_err, (want32.double() - want64).abs().max().item())
    return dict(d32=d32, d64=d64, ref_err=ref_err, bitwise=n_bitwise, total=n_total)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mirror", action="append", default=[], help="OWNER/NAME=DIR: a local clone (or bare git dir)")
    ap.add_argument("--root", default=os.path.join(REPO_ROOT, "data", "fixtures"),
                    help="the fixture folder (default data/fixtures; e.g. a make_peaked_fixtures.py --out)")
    ap.add_argument("--only", action="append", help="only this fixture (its folder name; repeatable)")
    args = ap.parse_args(argv)
    mirrors = dict(m.split("=", 1) for m in args.mirror)
    torch.set_num_threads(1)
    transformers.logging.set_verbosity_error()
    ok = True
    root = tempfile.mkdtemp(prefix="rc_baichuan_upstream_")
    classes = {}
    ran = 0
    for variant in UPSTREAM:
        pkg = os.path.join(root, "up_" + variant.replace("-", "_"))
        os.makedirs(pkg)
        open(os.path.join(pkg, "__init__.py"), "w").close()
        fetch(variant, mirrors, pkg)
        classes[variant] = import_upstream(variant, pkg)[:2]
    for fx, variant in FIXTURES.items():
        if args.only and os.path.basename(fx) not in args.only:
            continue
        if args.only and not os.path.isdir(os.path.join(args.root, fx)):
            fx = os.path.basename(fx)  # a make_peaked_fixtures.py --out folder holds them at its top
        math_sdpa = UPSTREAM[variant][5]
        with (torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.MATH) if math_sdpa
              else contextlib.nullcontext()):
            r = run_fixture(os.path.join(args.root, fx), variant, *classes[variant])
        good = r["bitwise"] == r["total"] and r["d64"] <= r["ref_err"]
        ok &= good
        repo, commit = UPSTREAM[variant][:2]
        print(f"{os.path.relpath(os.path.join(args.root, fx), REPO_ROOT):44s} upstream {repo}@{commit[:12]}: fp32 {r['bitwise']}/{r['total']} log-probs bit-identical "
              f"(max diff {r['d32']:.3g}); .double() vs true fp64 {r['d64']:.3g} (HF fp32 error {r['ref_err']:.3g}) "
              f"{'ok' if good else 'DIFFERS'}", flush=True)
        ran += 1
    if ran == 0:
        print("no fixture matched --only", file=sys.stderr)
        return 1
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
