#!/usr/bin/env python3
"""Generate data/fixtures/dtype/: HF reference log-probs of bf16/fp16 models
under two transformers versions (5.24 = "current", 4.40 = the version of the
bug report transformers#31267).

Why two versions: GPT-NeoX's rotary embedding changed precision between them.

* transformers 4.40: ``GPTNeoXRotaryEmbedding`` keeps ``cos_cached``/``sin_cached``
  as fp32 buffers (``_set_cos_sin_cache`` ignores its dtype argument) and never
  casts them, so ``q_rot*cos`` promotes the rotary part of q and k to fp32;
  ``torch.cat`` with the bf16/fp16 pass-through part then gives fp32 q and k,
  the attention scores (``baddbmm``) and softmax run in fp32, and the
  probabilities are cast to the value dtype before ``@ v``. The KV cache keeps
  fp32 keys (bf16/fp16 values).
* transformers 5.24: cos/sin are computed in fp32 and cast to the model dtype
  (``cos.to(x.dtype)``); q and k stay bf16/fp16, scores are
  ``matmul(q, k^T) * scaling`` in the model dtype, softmax is taken in fp32 and
  cast back to the query dtype.

Llama's RoPE is already cast to the model dtype in 4.40, so llama outputs of
the two versions are expected to be identical.

How it works
------------
The driver runs under the main Python (transformers 5.24) and computes the
v5.24 outputs in-process. The v4.40 outputs are computed by re-running this
same file with ``--worker`` under a second interpreter (``--python440``, a
virtualenv with transformers 4.40.2). transformers 4.40 does not understand
the v5 ``rope_parameters`` config object, so the worker loads a copy of each
model folder whose config.json is rewritten into the 4.40 form
(``rotary_pct``/``rotary_emb_base``/``rope_theta``/``rope_scaling``, same
weights file). 4.40 has no ``rope_type: llama3``; for llama_gqa the worker
loads the model with ``rope_scaling: null`` and then overwrites every layer's
fp32 ``inv_freq`` buffer with the exact llama3 ``inv_freq`` of the 5.24 model
(written by the driver next to the config), so it computes the same model.

Every fixture model is loaded the way users load a half-precision model,
``from_pretrained(path, dtype=...)`` (5.24; ``torch_dtype=...`` in 4.40 --
the same argument under its old name), with ``attn_implementation="eager"``.
For the record the script also loads each model in fp32 and calls
``.to(dtype)`` (which casts the non-persistent RoPE buffers too); those runs
only contribute numbers to the README, not fixture files.

Usage::

    # main environment (transformers 5.24): tools/requirements-dtype-fixtures.txt
    # v4.40 environment: see the README in data/fixtures/dtype/
    python3 tools/make_dtype_fixtures.py --python440 /tmp/venv440/bin/python
    python3 tools/make_dtype_fixtures.py --python440 ... --out /tmp/dt   # elsewhere

Runs on the CPU with one thread and deterministic algorithms; two runs on the
same machine with the same versions give byte-identical files.
"""

import argparse
import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile

os.environ["CUDA_VISIBLE_DEVICES"] = ""  # CPU only, before torch is imported
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")

import numpy as np  # noqa: E402
import safetensors  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402
from safetensors import safe_open  # noqa: E402
from st_canonical import save_safetensors_canonical  # noqa: E402
from safetensors.torch import save as st_save  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURES = os.path.join(REPO_ROOT, "data", "fixtures")
DEFAULT_OUT = os.path.join(FIXTURES, "dtype")
DEFAULT_PY440 = "/tmp/venv440/bin/python"

MODELS = ["neox_parallel", "llama_gqa"]
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}
V5 = "v5.24"
V4 = "v4.40"
LOADINGS = ["from_pretrained", "fp32_then_to"]  # the first one makes the fixtures

TRACE_OPS = {"bmm", "baddbmm", "_softmax", "cat"}


# ----------------------------------------------------------------------------
# shared helpers (run under both transformers versions)
# ----------------------------------------------------------------------------

def tv_major():
    return int(transformers.__version__.split(".")[0])


def env_versions():
    out = dict(
        python=platform.python_version(),
        torch=torch.__version__,
        transformers=transformers.__version__,
        safetensors=safetensors.__version__,
        numpy=np.__version__,
        cpu_capability=torch.backends.cpu.get_cpu_capability(),
    )
    for mod in ("tokenizers", "huggingface_hub"):
        try:
            out[mod] = __import__(mod).__version__
        except Exception:  # pragma: no cover
            out[mod] = "absent"
    return out


def setup_torch():
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)
    torch.manual_seed(0)


def dname(dt):
    return str(dt).replace("torch.", "")


class OpTrace(TorchDispatchMode):
    """Records distinct (op, input float dtypes) -> output dtype signatures."""

    def __init__(self):
        super().__init__()
        self.sigs = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        name = func.overloadpacket.__name__
        if name in TRACE_OPS:
            ins = []

            def collect(a):
                if isinstance(a, torch.Tensor) and a.is_floating_point():
                    ins.append(dname(a.dtype))
                elif isinstance(a, (list, tuple)):
                    for x in a:
                        collect(x)

            collect(args)
            o = out[0] if isinstance(out, (list, tuple)) else out
            if isinstance(o, torch.Tensor) and o.is_floating_point():
                # collapse repeated equal inputs of cat to one/two entries
                key = (name, tuple(sorted(set(ins))), dname(o.dtype))
                self.sigs.add(key)
        return out


def first_key_value_cache(pkv):
    """(key dtype, value dtype) of layer 0 of a legacy tuple or a Cache object."""
    if hasattr(pkv, "layers"):  # transformers 5 DynamicCache
        return dname(pkv.layers[0].keys.dtype), dname(pkv.layers[0].values.dtype)
    if hasattr(pkv, "key_cache"):  # transformers 4.3x-4.4x DynamicCache
        return dname(pkv.key_cache[0].dtype), dname(pkv.value_cache[0].dtype)
    return dname(pkv[0][0].dtype), dname(pkv[0][1].dtype)


def load_model(model_dir, dtype, loading):
    from transformers import AutoModelForCausalLM

    kw = dict(attn_implementation="eager")
    if loading == "from_pretrained":
        # users: from_pretrained(path, dtype=torch.bfloat16) (v5) / torch_dtype= (v4)
        kw["dtype" if tv_major() >= 5 else "torch_dtype"] = dtype
        model, info = AutoModelForCausalLM.from_pretrained(model_dir, output_loading_info=True, **kw)
    elif loading == "fp32_then_to":
        kw["dtype" if tv_major() >= 5 else "torch_dtype"] = torch.float32
        model, info = AutoModelForCausalLM.from_pretrained(model_dir, output_loading_info=True, **kw)
        model = model.to(dtype)
    else:
        raise ValueError(loading)
    # the tied lm_head of llama may be reported missing; any other problem is fatal
    bad = {k: [x for x in v if "lm_head" not in str(x)] for k, v in info.items() if v}
    bad = {k: v for k, v in bad.items() if v}
    if bad:
        raise SystemExit(f"loading {model_dir}: {bad}")
    model.eval()
    return model


def rope_buffers(model):
    """name -> dtype of every RoPE-related buffer (inv_freq, cos/sin caches)."""
    out = {}
    for n, b in model.named_buffers():
        leaf = n.rsplit(".", 1)[-1]
        if "freq" in leaf or "cos" in leaf or "sin" in leaf:
            out[n] = dname(b.dtype)
    return out


def summarise_buffers(bufs):
    """Collapse per-layer names (layers.0/1/2) into one entry each."""
    import re

    out = {}
    for n, d in bufs.items():
        k = re.sub(r"\.layers\.\d+\.", ".layers.*.", n)
        out.setdefault(k, set()).add(d)
    return {k: "/".join(sorted(v)) for k, v in sorted(out.items())}


def patch_inv_freq(model, path):
    """Overwrite every rotary inv_freq buffer with the fp32 tensor stored at path."""
    with safe_open(path, "pt") as f:
        inv = f.get_tensor("inv_freq")
    assert inv.dtype == torch.float32
    n = 0
    for name, mod in model.named_modules():
        if hasattr(mod, "inv_freq") and isinstance(mod.inv_freq, torch.Tensor):
            assert mod.inv_freq.shape == inv.shape, (name, mod.inv_freq.shape, inv.shape)
            with torch.no_grad():
                mod.inv_freq.copy_(inv.to(mod.inv_freq.dtype))
            n += 1
    assert n > 0, "no inv_freq buffer found"
    return n


def read_tokens(name):
    with safe_open(os.path.join(FIXTURES, name, "reference.safetensors"), "pt") as f:
        return f.get_tensor("tokens"), f.get_tensor("lengths")


@torch.no_grad()
def run_case(model_dir, name, dtype_name, loading, inv_freq_path=None):
    """Full forward of each fixture sequence (batch 1, no padding).

    Returns (logprobs F32 [B, Tmax, V] NaN padded, info dict)."""
    setup_torch()
    dtype = DTYPES[dtype_name]
    model = load_model(model_dir, dtype, loading)
    info = dict(loading=loading, dtype=dtype_name)
    info["rope_buffers_after_load"] = summarise_buffers(rope_buffers(model))
    if inv_freq_path:
        info["inv_freq_patched_modules"] = patch_inv_freq(model, inv_freq_path)
        info["rope_buffers_after_patch"] = summarise_buffers(rope_buffers(model))
    info["param_dtypes"] = sorted({dname(p.dtype) for p in model.parameters()})
    tokens, lengths = read_tokens(name)
    B, tmax = tokens.shape
    V = model.config.vocab_size
    out = torch.full((B, tmax, V), float("nan"), dtype=torch.float32)
    logits_dtypes = set()
    for b in range(B):
        L = int(lengths[b])
        ids = tokens[b, :L].to(torch.long)[None]
        trace = OpTrace() if b == 1 else None
        if trace is not None:
            with trace:
                res = model(input_ids=ids, use_cache=False)
            info["attention_op_signatures"] = sorted(
                f"{op}({', '.join(ins)}) -> {o}" for op, ins, o in trace.sigs
            )
        else:
            res = model(input_ids=ids, use_cache=False)
        logits_dtypes.add(dname(res.logits.dtype))
        out[b, :L] = torch.log_softmax(res.logits[0].float(), dim=-1)
    info["logits_dtype"] = "/".join(sorted(logits_dtypes))
    # KV cache dtypes, and that the cached path is not used for the fixtures
    res = model(input_ids=tokens[1, : int(lengths[1])].to(torch.long)[None], use_cache=True)
    info["kv_cache_layer0_key_value_dtypes"] = "/".join(first_key_value_cache(res.past_key_values))
    return out, info


def worker_main(args):
    jobs = json.load(open(args.jobs))
    results = {}
    tensors = {}
    for j in jobs:
        lp, info = run_case(j["model_dir"], j["name"], j["dtype"], j["loading"], j.get("inv_freq"))
        tensors[j["key"]] = lp.contiguous()
        results[j["key"]] = info
        print(f"[worker {transformers.__version__}] {j['key']} done", file=sys.stderr)
    with open(args.worker_out + ".safetensors", "wb") as f:
        f.write(st_save(tensors))
    json.dump(dict(versions=env_versions(), results=results), open(args.worker_out + ".json", "w"), indent=1)


# ----------------------------------------------------------------------------
# driver (transformers 5.24)
# ----------------------------------------------------------------------------

def sha256(path):
    return hashlib.sha256(open(path, "rb").read()).hexdigest()


def v440_config(cfg):
    """Rewrite a transformers-5 config.json dict into the form 4.40 reads.

    Returns (new config dict, needs_inv_freq_patch, note)."""
    c = dict(cfg)
    rp = c.pop("rope_parameters")
    rtype = rp.get("rope_type", "default")
    theta = rp["rope_theta"]
    c["torch_dtype"] = c.get("dtype", "float32")
    c["rope_theta"] = theta
    patch = False
    if c["model_type"] == "gpt_neox":
        c["rotary_pct"] = rp.get("partial_rotary_factor", 1.0)
        c["rotary_emb_base"] = int(theta) if float(theta).is_integer() else theta
    if rtype == "default":
        c["rope_scaling"] = None
        note = "rope_scaling null"
    elif rtype in ("linear", "dynamic"):
        c["rope_scaling"] = {"type": rtype, "factor": float(rp["factor"])}
        note = f"rope_scaling {c['rope_scaling']}"
    elif rtype == "llama3":
        c["rope_scaling"] = None
        patch = True
        note = "rope_scaling null (4.40 has no llama3) + llama3 inv_freq of 5.24 injected into every layer"
    else:
        raise SystemExit(f"no 4.40 form for rope_type {rtype}")
    c["transformers_version"] = "4.40.2"
    return c, patch, note


def make_compat_dir(name, tmp, model_v5_fp32):
    src = os.path.join(FIXTURES, name)
    dst = os.path.join(tmp, name)
    os.makedirs(dst)
    cfg = json.load(open(os.path.join(src, "config.json")))
    c, patch, note = v440_config(cfg)
    with open(os.path.join(dst, "config.json"), "w") as f:
        json.dump(c, f, indent=2, sort_keys=True)
    for fn in os.listdir(src):  # same weights (no generation_config: not needed)
        if fn.startswith("model.safetensors"):
            shutil.copyfile(os.path.join(src, fn), os.path.join(dst, fn))
    inv = None
    if patch:
        bufs = [b for n, b in model_v5_fp32.named_buffers() if n.endswith("rotary_emb.inv_freq")]
        assert len(bufs) == 1 and bufs[0].dtype == torch.float32
        inv = os.path.join(dst, "inv_freq_v5.safetensors")
        with open(inv, "wb") as f:
            f.write(st_save({"inv_freq": bufs[0].detach().clone().contiguous()}))
    return dst, inv, note, c


def run_worker(python, jobs, tmp, tag):
    jp = os.path.join(tmp, f"jobs_{tag}.json")
    json.dump(jobs, open(jp, "w"), indent=1)
    outp = os.path.join(tmp, f"out_{tag}")
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    subprocess.run(
        [python, os.path.abspath(__file__), "--worker", "--jobs", jp, "--worker-out", outp],
        check=True, env=env, cwd=tmp,
    )
    res = json.load(open(outp + ".json"))
    tens = {}
    with safe_open(outp + ".safetensors", "pt") as f:
        for k in f.keys():
            tens[k] = f.get_tensor(k)
    return res["versions"], res["results"], tens


def stats(a, b, lengths):
    """mean / max |a-b| over valid positions, argmax disagreements, bit-identical?"""
    m = torch.zeros(a.shape[:2], dtype=torch.bool)
    for i, L in enumerate(lengths.tolist()):
        m[i, :L] = True
    x, y = a[m].double(), b[m].double()
    d = (x - y).abs()
    return dict(
        mean=float(d.mean()),
        max=float(d.max()),
        argmax_diff=int((x.argmax(-1) != y.argmax(-1)).sum()),
        positions=int(m.sum()),
        identical=bool(torch.equal(a[m], b[m])),
    )


def fmt(x):
    return f"{x:.3e}" if x != 0 else "0"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=DEFAULT_OUT)
    ap.add_argument("--python440", default=DEFAULT_PY440,
                    help="python of a virtualenv with transformers 4.40.2")
    ap.add_argument("--crosscheck-python", default=None,
                    help="optional: python of a transformers 4.40.2 + older torch env; "
                         "its v4.40 outputs are compared with --python440's in the README only")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--jobs", help=argparse.SUPPRESS)
    ap.add_argument("--worker-out", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        return worker_main(args)

    assert transformers.__version__.startswith("5.24."), transformers.__version__
    setup_torch()
    os.makedirs(args.out, exist_ok=True)
    v5_env = env_versions()
    results = {V5: {}, V4: {}}
    logprobs = {V5: {}, V4: {}}
    refs = {}
    compat_notes = {}
    compat_cfgs = {}
    with tempfile.TemporaryDirectory(prefix="dtype_fx_") as tmp:
        jobs = []
        for name in MODELS:
            d = os.path.join(FIXTURES, name)
            with safe_open(os.path.join(d, "reference.safetensors"), "pt") as f:
                refs[name] = dict(
                    f32=f.get_tensor("forward_logprobs_f32"),
                    tokens=f.get_tensor("tokens"),
                    lengths=f.get_tensor("lengths"),
                )
            m32 = load_model(d, torch.float32, "from_pretrained")
            cdir, inv, note, ccfg = make_compat_dir(name, tmp, m32)
            compat_notes[name] = note
            compat_cfgs[name] = ccfg
            del m32
            for dt in DTYPES:
                for loading in LOADINGS:
                    key = f"{name}|{dt}|{loading}"
                    lp, info = run_case(d, name, dt, loading)
                    logprobs[V5][key] = lp
                    results[V5][key] = info
                    print(f"[{V5}] {key} done", file=sys.stderr)
                    jobs.append(dict(key=key, name=name, dtype=dt, loading=loading,
                                     model_dir=cdir, inv_freq=inv))
        v4_env, results[V4], logprobs[V4] = run_worker(args.python440, jobs, tmp, "v440")
        assert v4_env["transformers"].startswith("4.40."), v4_env
        cross = None
        if args.crosscheck_python:
            xj = [j for j in jobs if j["loading"] == "from_pretrained"]
            cenv, cres, clp = run_worker(args.crosscheck_python, xj, tmp, "cross")
            assert cenv["transformers"].startswith("4.40."), cenv
            cross = (cenv, cres, clp)

    # ---- fixture files ----
    files = []
    for ver, env in ((V5, v5_env), (V4, v4_env)):
        for name in MODELS:
            for dt in DTYPES:
                key = f"{name}|{dt}|from_pretrained"
                info = results[ver][key]
                lp = logprobs[ver][key]
                meta = dict(
                    fixture=f"{name}_{dt}_{ver}",
                    source_fixture=name,
                    dtype=dname(DTYPES[dt]),
                    transformers_version=env["transformers"],
                    torch_version=env["torch"],
                    python_version=env["python"],
                    cpu_capability=env["cpu_capability"],
                    attn_implementation="eager",
                    loading=("from_pretrained(path, dtype=%s)" if ver == V5 else
                             "from_pretrained(path, torch_dtype=%s)") % dname(DTYPES[dt]),
                    rope_buffers=json.dumps(info["rope_buffers_after_patch" if "rope_buffers_after_patch" in info
                                                 else "rope_buffers_after_load"], sort_keys=True),
                    kv_cache_key_value_dtypes=info["kv_cache_layer0_key_value_dtypes"],
                    description="log_softmax(logits.float(), -1) of a full forward, batch 1, no padding, "
                                "per sequence; NaN past lengths[b]",
                )
                if ver == V4:
                    meta["config_v440"] = compat_notes[name]
                path = os.path.join(args.out, f"{name}_{dt}_{ver}.safetensors")
                save_safetensors_canonical(
                    {"logprobs": lp, "tokens": refs[name]["tokens"], "lengths": refs[name]["lengths"]},
                    path, meta)
                files.append(path)

    # ---- comparisons ----
    table = []
    for name in MODELS:
        L = refs[name]["lengths"]
        f32 = refs[name]["f32"]
        for dt in DTYPES:
            k = f"{name}|{dt}|from_pretrained"
            a, b = logprobs[V4][k], logprobs[V5][k]
            table.append(dict(
                model=name, dtype=dt,
                v4_v5=stats(a, b, L), v4_f32=stats(a, f32, L), v5_f32=stats(b, f32, L),
            ))
    to_table = []
    for name in MODELS:
        L = refs[name]["lengths"]
        f32 = refs[name]["f32"]
        for dt in DTYPES:
            kf, kt = f"{name}|{dt}|from_pretrained", f"{name}|{dt}|fp32_then_to"
            to_table.append(dict(
                model=name, dtype=dt,
                v4=stats(logprobs[V4][kt], logprobs[V4][kf], L),
                v5=stats(logprobs[V5][kt], logprobs[V5][kf], L),
                v4to_v5=stats(logprobs[V4][kt], logprobs[V5][kf], L),
                v4to_f32=stats(logprobs[V4][kt], f32, L),
            ))
    cross_table = None
    if cross:
        cenv, cres, clp = cross
        cross_table = []
        for name in MODELS:
            L = refs[name]["lengths"]
            for dt in DTYPES:
                k = f"{name}|{dt}|from_pretrained"
                cross_table.append(dict(model=name, dtype=dt,
                                        vs_v4=stats(clp[k], logprobs[V4][k], L),
                                        vs_v5=stats(clp[k], logprobs[V5][k], L),
                                        vs_f32=stats(clp[k], refs[name]["f32"], L)))

    readme = render_readme(args, files, v5_env, v4_env, results, compat_notes, compat_cfgs,
                           table, to_table, cross, cross_table)
    with open(os.path.join(args.out, "README.md"), "w") as f:
        f.write(readme)
    print(readme)


def render_readme(args, files, v5_env, v4_env, results, compat_notes, compat_cfgs,
                  table, to_table, cross, cross_table):
    L = []
    a = L.append
    a("# dtype fixtures: HF bf16/fp16 outputs under transformers 5.24 and 4.40")
    a("")
    a("Generated by `tools/make_dtype_fixtures.py`; do not edit by hand (this README is")
    a("generated too). Reference outputs of the `neox_parallel` and `llama_gqa` fixture")
    a("models (`data/fixtures/<name>/`, fp32 weights) run in bf16 and fp16 by two")
    a("transformers versions, so a C test can check that ratiocheck's dtype emulation")
    a("reproduces each version's rounding behaviour (transformers#31267: GPT-NeoX RoPE")
    a("precision).")
    a("")
    a("## Files")
    a("")
    a("`<model>_<dtype>_<version>.safetensors`, each holding")
    a("")
    a("- `logprobs` F32 [B, Tmax, V]: `log_softmax(logits.float(), -1)` of a full forward")
    a("  (batch 1, no padding, `use_cache=False`) over sequence b, NaN for t >= lengths[b];")
    a("- `tokens` I32 [B, Tmax] (-1 padded) and `lengths` I32 [B], copied from the model's")
    a("  `reference.safetensors` (the same 4 sequences as `forward_logprobs_f32` there);")
    a("- `__metadata__` (sorted keys): versions, loading call, RoPE buffer dtypes, KV cache")
    a("  dtypes, and for v4.40 how the config was converted.")
    a("")
    a("| file | bytes | sha256 |")
    a("|---|---|---|")
    tot = 0
    for p in files:
        sz = os.path.getsize(p)
        tot += sz
        a(f"| `{os.path.basename(p)}` | {sz:,} | `{sha256(p)[:16]}…` |")
    a(f"| **total** | {tot:,} | |")
    a("")
    a("## Regenerating")
    a("")
    a("```sh")
    a("# main environment (transformers 5.24)")
    a("pip install -r tools/requirements-dtype-fixtures.txt")
    a("# transformers 4.40 environment: a virtualenv that reuses the main torch")
    a("python3 -m venv --system-site-packages /tmp/venv440")
    a("/tmp/venv440/bin/pip install $(sed -n 's/^#v4.40 //p' tools/requirements-dtype-fixtures.txt)")
    a("# optional cross-check env: transformers 4.40.2 with a torch of its time")
    a("python3 -m venv /tmp/venv440t23")
    a("/tmp/venv440t23/bin/pip install $(sed -n 's/^#v4.40-torch2.3 //p' tools/requirements-dtype-fixtures.txt)")
    a("python3 tools/make_dtype_fixtures.py --python440 /tmp/venv440/bin/python \\")
    a("    --crosscheck-python /tmp/venv440t23/bin/python      # rewrites data/fixtures/dtype/")
    a("# determinism check: same command with --out /tmp/dt, then")
    a("diff -r /tmp/dt data/fixtures/dtype")
    a("```")
    a("")
    a("One thread, deterministic algorithms, CPU only. bf16/fp16 CPU matmuls go through")
    a("oneDNN/ATen kernels chosen by the CPU's ISA (`cpu_capability` below); on the same")
    a("kind of CPU with the same versions two runs give byte-identical files, elsewhere")
    a("the last bits may differ.")
    a("")
    a("## Environments")
    a("")
    keys = ["python", "torch", "transformers", "tokenizers", "huggingface_hub", "safetensors", "numpy",
            "cpu_capability"]
    envs = [("v5.24 (main)", v5_env), ("v4.40 (`--python440`)", v4_env)]
    if cross:
        envs.append(("v4.40 + old torch (`--crosscheck-python`, README only)", cross[0]))
    a("| | " + " | ".join(e[0] for e in envs) + " |")
    a("|---|" + "---|" * len(envs))
    for k in keys:
        a(f"| {k} | " + " | ".join(str(e[1].get(k)) for e in envs) + " |")
    a("")
    a("The v4.40 environment is a `--system-site-packages` virtualenv: it has its own")
    a("transformers 4.40.2 / tokenizers / huggingface_hub and the main environment's torch,")
    a("safetensors and numpy, so the v4.40 and v5.24 fixtures differ only in transformers.")
    a("")
    a("## Loading")
    a("")
    a("Fixtures: the way users load a half-precision model, `AutoModelForCausalLM.from_pretrained(")
    a("path, dtype=torch.bfloat16, attn_implementation=\"eager\")` in 5.24 (`torch_dtype=` in 4.40,")
    a("the same argument under its old name; 5.24 deprecates `torch_dtype`). For comparison")
    a("each model was also loaded in fp32 and cast with `.to(dtype)` (numbers below, no files).")
    a("")
    a("transformers 4.40 reads no `rope_parameters`; it silently falls back to its defaults.")
    a("The v4.40 runs therefore load a temporary copy of each model folder (same")
    a("`model.safetensors`, no generation_config.json) whose config.json has `rope_parameters`")
    a("replaced by the 4.40 keys:")
    a("")
    for name in MODELS:
        c = compat_cfgs[name]
        ks = {k: c[k] for k in ("rotary_pct", "rotary_emb_base", "rope_theta", "rope_scaling", "torch_dtype")
              if k in c}
        a(f"- `{name}`: `{json.dumps(ks)}` — {compat_notes[name]}.")
    a("")
    a("transformers 4.40 has no `rope_type: llama3` (added in 4.43). For `llama_gqa` the 4.40")
    a("model is built with `rope_scaling: null` and then every layer's `inv_freq` buffer is")
    a("overwritten with the bit-exact fp32 llama3 `inv_freq` of the 5.24 model, so both")
    a("versions compute the same model. 4.40's llama `forward` upcasts `inv_freq` to fp32")
    a("and casts cos/sin to the activation dtype, exactly as 5.24 does.")
    a("")
    a("### RoPE buffer dtypes observed")
    a("")
    a("| version | model | dtype | loading | buffers (per-layer names collapsed) |")
    a("|---|---|---|---|---|")
    for ver in (V5, V4):
        for name in MODELS:
            for dt in DTYPES:
                for loading in LOADINGS:
                    info = results[ver][f"{name}|{dt}|{loading}"]
                    bufs = info.get("rope_buffers_after_patch", info["rope_buffers_after_load"])
                    s = "<br>".join(f"`{k}`: {v}" for k, v in bufs.items())
                    a(f"| {ver} | {name} | {dt} | {loading} | {s} |")
    a("")
    a("### Compute dtypes observed (sequence 1, `TorchDispatchMode`)")
    a("")
    a("Distinct `bmm`/`baddbmm`/`_softmax`/`cat` signatures (input float dtypes -> output),")
    a("logits dtype, and the dtypes of the KV cache's layer-0 keys/values (a separate")
    a("`use_cache=True` forward). Fixture loading only.")
    a("")
    a("| version | model | dtype | ops | logits | KV cache k/v |")
    a("|---|---|---|---|---|---|")
    for ver in (V5, V4):
        for name in MODELS:
            for dt in DTYPES:
                info = results[ver][f"{name}|{dt}|from_pretrained"]
                ops = "<br>".join(f"`{s}`" for s in info["attention_op_signatures"])
                a(f"| {ver} | {name} | {dt} | {ops} | {info['logits_dtype']} | "
                  f"{info['kv_cache_layer0_key_value_dtypes']} |")
    a("")
    a("## How far apart the versions are")
    a("")
    a("|Δlogprob| over all valid positions (B·T rows × V), in float64 from the stored F32.")
    a("`argmax≠`: positions whose top token differs. `f32` = `forward_logprobs_f32` of the")
    a("model's `reference.safetensors`.")
    a("")
    a("| model | dtype | v4.40 vs v5.24 mean | max | argmax≠ | identical | v4.40 vs f32 mean | max |"
      " v5.24 vs f32 mean | max |")
    a("|---|---|---|---|---|---|---|---|---|---|")
    for r in table:
        x, y, z = r["v4_v5"], r["v4_f32"], r["v5_f32"]
        a(f"| {r['model']} | {r['dtype']} | {fmt(x['mean'])} | {fmt(x['max'])} | "
          f"{x['argmax_diff']}/{x['positions']} | {'yes' if x['identical'] else 'no'} | "
          f"{fmt(y['mean'])} | {fmt(y['max'])} | {fmt(z['mean'])} | {fmt(z['max'])} |")
    a("")
    a("### Effect of loading in fp32 and calling `.to(dtype)` (no fixture files)")
    a("")
    a("`.to()` casts the non-persistent RoPE buffers too. Columns: `.to()` result vs the")
    a("fixture (`from_pretrained(dtype=)`) of the same version; the v4.40 `.to()` result vs")
    a("the v5.24 fixture; the v4.40 `.to()` result vs f32.")
    a("")
    a("| model | dtype | v5.24 .to vs fixture mean | max | v4.40 .to vs fixture mean | max |"
      " v4.40 .to vs v5.24 mean | max | v4.40 .to vs f32 mean | max |")
    a("|---|---|---|---|---|---|---|---|---|---|")
    for r in to_table:
        a(f"| {r['model']} | {r['dtype']} | {fmt(r['v5']['mean'])} | {fmt(r['v5']['max'])} | "
          f"{fmt(r['v4']['mean'])} | {fmt(r['v4']['max'])} | {fmt(r['v4to_v5']['mean'])} | "
          f"{fmt(r['v4to_v5']['max'])} | {fmt(r['v4to_f32']['mean'])} | {fmt(r['v4to_f32']['max'])} |")
    a("")
    if cross_table:
        a(f"### Cross-check: transformers 4.40.2 with torch {cross[0]['torch']} (no fixture files)")
        a("")
        a("The same v4.40 runs (fixture loading) under the older torch, against the v4.40")
        a("fixtures (torch " + v4_env["torch"] + "), the v5.24 fixtures and f32.")
        a("")
        a("| model | dtype | vs v4.40 fixture mean | max | identical | vs v5.24 mean | max |"
          " vs f32 mean | max |")
        a("|---|---|---|---|---|---|---|---|---|")
        for r in cross_table:
            a(f"| {r['model']} | {r['dtype']} | {fmt(r['vs_v4']['mean'])} | {fmt(r['vs_v4']['max'])} | "
              f"{'yes' if r['vs_v4']['identical'] else 'no'} | {fmt(r['vs_v5']['mean'])} | "
              f"{fmt(r['vs_v5']['max'])} | {fmt(r['vs_f32']['mean'])} | {fmt(r['vs_f32']['max'])} |")
        a("")
    else:
        a("(Cross-check with an older torch not run: no `--crosscheck-python`.)")
        a("")
    a("## Notes for the C test")
    a("")
    tb = {(r["model"], r["dtype"]): r for r in table}
    tt = {(r["model"], r["dtype"]): r for r in to_table}
    for dt in DTYPES:
        r = tb[("llama_gqa", dt)]["v4_v5"]
        a(f"- llama_gqa {dt}: v4.40 and v5.24 are {'bit-identical' if r['identical'] else 'NOT identical'}.")
    a("  Expected: llama's RoPE is cast to the model dtype in both versions (4.40's llama also")
    a("  returns fp32 logits, `logits.float()` inside the model, which the `.float()` here makes moot).")
    for dt in DTYPES:
        r = tb[("neox_parallel", dt)]["v4_v5"]
        a(f"- neox_parallel {dt}: v4.40 and v5.24 differ (mean {fmt(r['mean'])}, max {fmt(r['max'])}):"
          " fp32 q/k/scores in 4.40 vs bf16/fp16 in 5.24.")
    same = all(tt[("neox_parallel", dt)]["v4to_v5"]["identical"] for dt in DTYPES)
    a(f"- neox_parallel: 4.40 loaded in fp32 and cast with `.to(dtype)` is "
      f"{'bit-identical to' if same else 'NOT identical to (the explanation below does not hold!)'}"
      " the 5.24 fixture: `.to()` casts 4.40's")
    a("  `cos_cached`/`sin_cached` to the model dtype, so q/k stay in the model dtype; 4.40's")
    a("  `baddbmm(alpha=0.25)` equals 5.24's `matmul * 0.25` (power-of-two scale) and its")
    a("  model-dtype softmax equals 5.24's fp32 softmax rounded back. The fp32-RoPE behaviour of")
    a("  transformers#31267 therefore needs `from_pretrained(..., torch_dtype=...)`, which leaves")
    a("  the RoPE buffers fp32.")
    a("- 5.24 loaded in fp32 then `.to(dtype)` rounds `inv_freq` itself to the model dtype,")
    a("  which changes the rotation angles (see the `.to()` table); `from_pretrained(dtype=)` keeps")
    a("  it fp32. The fixtures use `from_pretrained(dtype=)`.")
    if cross_table:
        ct = {(r["model"], r["dtype"]): r["vs_v4"] for r in cross_table}
        bf = all(ct[(m, "bf16")]["identical"] for m in MODELS)
        fp = [ct[(m, "fp16")] for m in MODELS]
        a(f"- torch {cross[0]['torch']} vs {v4_env['torch']} under transformers 4.40.2: bf16 outputs are "
          f"{'bit-identical' if bf else 'NOT identical'}; fp16 outputs differ by up to "
          f"{fmt(max(x['max'] for x in fp))} (mean up to {fmt(max(x['mean'] for x in fp))}):")
        a("  torch's CPU fp16 GEMM is not exactly 'fp32 sum, one rounding' and its result changed")
        a("  between these torch versions (a few elements of a plain fp16 `a @ w.T` land on the")
        a("  neighbouring fp16 value), while bf16 GEMM matched fp32-sum-then-round bit for bit in")
        a("  both. fp16 comparisons need a tolerance of that size even for a perfect emulation;")
        a("  bf16 ones can be much tighter.")
    a("")
    return "\n".join(L)


if __name__ == "__main__":
    main()
