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

v5.24-only references (``V524_ONLY``)
-------------------------------------
The seven fixtures added for the ALiBi report -- ``gpt2_learned`` (GPT2LMHeadModel),
``bloom_alibi`` (BloomForCausalLM), ``mpt_alibi`` (MptForCausalLM) and the four Baichuan
variants (``baichuan_7b``, ``baichuan_13b``, ``baichuan2_7b``, ``baichuan2_13b``) -- get
``<name>_<bf16|fp16>_v5.24.safetensors`` files only, computed in-process the same way (same
loading, tokens, lengths, file format). They check ratiocheck's per-family bf16/fp16 rounding
rules; no 4.40 worker runs for them (the two-version question of this directory is GPT-NeoX's
RoPE precision: none of these families has that RoPE, and Baichuan is no transformers class at
all). transformers has no Baichuan class: those four load ``tools/baichuan_ref.py``'s
``BaichuanForCausalLM`` (imported lazily, so the 4.40 worker never imports it). Baichuan2-7B's
published code calls ``F.scaled_dot_product_attention``; baichuan_ref computes it as SDPA's MATH
backend (``sdpa_math``), the forward runs inside ``sdpa_kernel(SDPBackend.MATH)`` anyway, and
the script re-runs that model with the real SDPA call (MATH backend forced) and requires
bit-identical log-probs.

``--v524-only`` computes and writes only these files and rewrites only the README section
between the ``V524_BEGIN``/``V524_END`` markers (appended if absent): the eight two-version
files and the rest of the README stay byte-identical (torch on another machine need not
reproduce their bytes). A full run (no option) writes everything, the seven included.

Usage::

    # main environment (transformers 5.24): tools/requirements-dtype-fixtures.txt
    # v4.40 environment: see the README in data/fixtures/dtype/
    python3 tools/make_dtype_fixtures.py --python440 /tmp/venv440/bin/python
    python3 tools/make_dtype_fixtures.py --python440 ... --out /tmp/dt   # elsewhere
    python3 tools/make_dtype_fixtures.py --v524-only     # only the seven v5.24-only families

Runs on the CPU with one thread and deterministic algorithms; two runs on the
same machine with the same versions give byte-identical files.
"""

import argparse
import contextlib
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
# v5.24 only (no 4.40 worker): the families added for the ALiBi report
V524_ONLY = ["gpt2_learned", "bloom_alibi", "mpt_alibi",
             "baichuan_7b", "baichuan_13b", "baichuan2_7b", "baichuan2_13b"]
# fixtures whose reference calls F.scaled_dot_product_attention: run on the MATH backend
SDPA_MATH = {"baichuan2_7b"}
V524_BEGIN = "<!-- V524_BEGIN: written by tools/make_dtype_fixtures.py (--v524-only rewrites this section only) -->"
V524_END = "<!-- V524_END -->"
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}
V5 = "v5.24"
V4 = "v4.40"
LOADINGS = ["from_pretrained", "fp32_then_to"]  # the first one makes the fixtures

TRACE_OPS = {"bmm", "baddbmm", "_softmax", "cat"}
# the v5.24-only families: also the ALiBi / mask / clamp ops and any SDPA call
TRACE_OPS_V524 = TRACE_OPS | {"clamp", "maximum", "scaled_dot_product_attention",
                              "_scaled_dot_product_attention_math", "_scaled_dot_product_flash_attention_for_cpu"}


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

    def __init__(self, ops=TRACE_OPS):
        super().__init__()
        self.sigs = set()
        self.ops = ops

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        name = func.overloadpacket.__name__
        if name in self.ops:
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
    if pkv is None:
        return "none", "none"
    if hasattr(pkv, "layers"):  # transformers 5 DynamicCache
        return dname(pkv.layers[0].keys.dtype), dname(pkv.layers[0].values.dtype)
    if hasattr(pkv, "key_cache"):  # transformers 4.3x-4.4x DynamicCache
        return dname(pkv.key_cache[0].dtype), dname(pkv.value_cache[0].dtype)
    return dname(pkv[0][0].dtype), dname(pkv[0][1].dtype)


def model_class(model_dir):
    """AutoModelForCausalLM, or baichuan_ref's class for model_type "baichuan" (no
    transformers class; imported only then: it needs transformers 5)."""
    with open(os.path.join(model_dir, "config.json")) as f:
        mt = json.load(f).get("model_type")
    if mt == "baichuan":
        tools = os.path.dirname(os.path.abspath(__file__))
        if tools not in sys.path:
            sys.path.insert(0, tools)
        import baichuan_ref

        return baichuan_ref.BaichuanForCausalLM
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM


def model_class_name(model_dir):
    cls = model_class(model_dir)
    if cls.__name__ == "AutoModelForCausalLM":
        with open(os.path.join(model_dir, "config.json")) as f:
            return json.load(f)["architectures"][0]
    return f"{cls.__name__} (tools/baichuan_ref.py)"


def load_model(model_dir, dtype, loading):
    cls = model_class(model_dir)
    kw = dict(attn_implementation="eager")
    if loading == "from_pretrained":
        # users: from_pretrained(path, dtype=torch.bfloat16) (v5) / torch_dtype= (v4)
        kw["dtype" if tv_major() >= 5 else "torch_dtype"] = dtype
        model, info = cls.from_pretrained(model_dir, output_loading_info=True, **kw)
    elif loading == "fp32_then_to":
        kw["dtype" if tv_major() >= 5 else "torch_dtype"] = torch.float32
        model, info = cls.from_pretrained(model_dir, output_loading_info=True, **kw)
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


def attention_context(name):
    """SDPA's MATH backend for the fixtures whose reference calls F.scaled_dot_product_attention
    (the CPU flash kernel rounds differently); a no-op context otherwise."""
    if name in SDPA_MATH:
        from torch.nn.attention import SDPBackend, sdpa_kernel

        return sdpa_kernel(SDPBackend.MATH)
    return contextlib.nullcontext()


@torch.no_grad()
def run_case(model_dir, name, dtype_name, loading, inv_freq_path=None):
    """Full forward of each fixture sequence (batch 1, no padding).

    Returns (logprobs F32 [B, Tmax, V] NaN padded, info dict)."""
    with attention_context(name):
        return _run_case(model_dir, name, dtype_name, loading, inv_freq_path)


def _run_case(model_dir, name, dtype_name, loading, inv_freq_path=None):
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
        trace = OpTrace(TRACE_OPS_V524 if name in V524_ONLY else TRACE_OPS) if b == 1 else None
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
    pkv = getattr(res, "past_key_values", None)
    if pkv is None:
        pkv = getattr(res, "cache", None)  # baichuan_ref's output field
    info["kv_cache_layer0_key_value_dtypes"] = "/".join(first_key_value_cache(pkv))
    return out, info


@torch.no_grad()
def sdpa_crosscheck(model_dir, name, dtype_name, lp):
    """Baichuan2-7B: baichuan_ref computes the published F.scaled_dot_product_attention call with
    its own sdpa_math (SDPA's MATH backend, bitwise by its self-test). Re-run the fixture forward
    with the real call on the MATH backend and return whether the log-probs are bit-identical."""
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    model_class(model_dir)  # makes baichuan_ref importable
    import baichuan_ref

    orig = baichuan_ref.sdpa_math
    baichuan_ref.sdpa_math = lambda q, k, v, mask: F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    try:
        with sdpa_kernel(SDPBackend.MATH):
            lp2, _ = _run_case(model_dir, name, dtype_name, "from_pretrained")
    finally:
        baichuan_ref.sdpa_math = orig
    ok = bool(torch.equal(lp.isnan(), lp2.isnan()) and torch.equal(lp[~lp.isnan()], lp2[~lp2.isnan()]))
    return ok


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


def files_table(a, files):
    """README rows: each file's name, size and sha256 prefix, then the total."""
    a("| file | bytes | sha256 |")
    a("|---|---|---|")
    tot = 0
    for p in files:
        sz = os.path.getsize(p)
        tot += sz
        a(f"| `{os.path.basename(p)}` | {sz:,} | `{sha256(p)[:16]}…` |")
    a(f"| **total** | {tot:,} | |")


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


# ----------------------------------------------------------------------------
# v5.24-only families
# ----------------------------------------------------------------------------

def gemm_order_case(model_dir, name, dtype_name, acc):
    """README only: the fixture forward with every Linear / Conv1D / NormHead GEMM computed in
    ``acc`` (torch.float32: F.linear's fp32 kernel, another summation order; torch.float64: the
    sum without fp32 error) and rounded once to the dtype -- the same rounding rule ("sum, bias,
    one rounding"). Its distance from the fixture is the noise floor of any emulation that sums
    in its own order."""
    import torch.nn.functional as F
    from transformers.pytorch_utils import Conv1D

    def linear(self, x):
        b = None if self.bias is None else self.bias.to(acc)
        return F.linear(x.to(acc), self.weight.to(acc), b).to(x.dtype)

    def conv1d(self, x):
        y = torch.addmm(self.bias.to(acc), x.to(acc).view(-1, x.size(-1)), self.weight.to(acc)).to(x.dtype)
        return y.view(x.size()[:-1] + (self.nf,))

    def norm_head(self, h):
        return F.linear(h.to(acc), F.normalize(self.weight).to(acc)).to(h.dtype)

    patches = [(torch.nn.Linear, "forward", linear), (Conv1D, "forward", conv1d)]
    if model_class(model_dir).__module__ == "baichuan_ref":
        import baichuan_ref

        patches.append((baichuan_ref.NormHead, "forward", norm_head))
    saved = [(c, n, getattr(c, n)) for c, n, _ in patches]
    try:
        for c, n, f in patches:
            setattr(c, n, f)
        lp, _ = run_case(model_dir, name, dtype_name, "from_pretrained")
    finally:
        for c, n, f in saved:
            setattr(c, n, f)
    return lp


def make_v524(out_dir, v5_env):
    """Compute and write the V524_ONLY fixture files; return (files, rows) for the README."""
    files, rows = [], []
    for name in V524_ONLY:
        d = os.path.join(FIXTURES, name)
        with safe_open(os.path.join(d, "reference.safetensors"), "pt") as f:
            f32 = f.get_tensor("forward_logprobs_f32")
            f64 = f.get_tensor("forward_logprobs_f64")
            tokens, lengths = f.get_tensor("tokens"), f.get_tensor("lengths")
        cls_name = model_class_name(d)
        call = cls_name.split(" ")[0] if "baichuan_ref" in cls_name else "AutoModelForCausalLM"
        for dt in DTYPES:
            lp, info = run_case(d, name, dt, "from_pretrained")
            sdpa_same = None
            if name in SDPA_MATH:
                sdpa_same = sdpa_crosscheck(d, name, dt, lp)
                if not sdpa_same:
                    raise SystemExit(f"{name} {dt}: baichuan_ref.sdpa_math differs from "
                                     "F.scaled_dot_product_attention on the MATH backend")
            print(f"[{V5}] {name}|{dt}|from_pretrained done", file=sys.stderr)
            meta = dict(
                fixture=f"{name}_{dt}_{V5}",
                source_fixture=name,
                dtype=dname(DTYPES[dt]),
                transformers_version=v5_env["transformers"],
                torch_version=v5_env["torch"],
                python_version=v5_env["python"],
                cpu_capability=v5_env["cpu_capability"],
                attn_implementation="eager",
                model_class=cls_name,
                loading=f"{call}.from_pretrained(path, dtype={dname(DTYPES[dt])})",
                rope_buffers=json.dumps(info["rope_buffers_after_load"], sort_keys=True),
                kv_cache_key_value_dtypes=info["kv_cache_layer0_key_value_dtypes"],
                description="log_softmax(logits.float(), -1) of a full forward, batch 1, no padding, "
                            "per sequence; NaN past lengths[b]; transformers 5.24 only (no v4.40 file)",
            )
            if name in SDPA_MATH:
                meta["sdpa_backend"] = ("MATH: forward inside torch.nn.attention.sdpa_kernel(SDPBackend.MATH); "
                                        "baichuan_ref.sdpa_math bit-identical to F.scaled_dot_product_attention "
                                        "on the MATH backend for this file")
            path = os.path.join(out_dir, f"{name}_{dt}_{V5}.safetensors")
            save_safetensors_canonical({"logprobs": lp, "tokens": tokens, "lengths": lengths}, path, meta)
            files.append(path)
            g32 = gemm_order_case(d, name, dt, torch.float32)
            g64 = gemm_order_case(d, name, dt, torch.float64)
            rows.append(dict(model=name, dtype=dt, cls=cls_name, info=info, sdpa_same=sdpa_same,
                             vs_f32=stats(lp, f32, lengths), vs_f64=stats(lp, f64, lengths),
                             gemm32=stats(g32, lp, lengths), gemm64=stats(g64, lp, lengths)))
    return files, rows


def render_v524_section(files, rows, v5_env):
    L = []
    a = L.append
    a(V524_BEGIN)
    a("## v5.24-only references: GPT-2, BLOOM, MPT and Baichuan")
    a("")
    a("Written by the same script (a full run, or `--v524-only`, which recomputes only these")
    a("files and rewrites only this section, leaving the files and text above byte-identical).")
    a("The seven fixture models added for the ALiBi report, each in bf16 and fp16: same file")
    a("format, the same tokens/lengths scheme (the 4 sequences of each model's")
    a("`reference.safetensors`), the same loading (`from_pretrained(path, dtype=torch.bfloat16`")
    a("or `torch.float16`, `attn_implementation=\"eager\")`), full forward per sequence,")
    a("one thread, deterministic algorithms, CPU only.")
    a("")
    a("transformers 5.24 only, no v4.40 files: the two-version comparison above is about")
    a("GPT-NeoX's RoPE precision (transformers#31267); GPT-2 (learned positions), BLOOM and MPT")
    a("(ALiBi) have no rotary embedding, and Baichuan is not a transformers class at all (the")
    a("published remote code, the same under any transformers version), so 4.40 has no such")
    a("difference to study for them. These files check ratiocheck's per-family bf16/fp16")
    a("rounding rules (README.md, \"Numerics: the dtype model\", the family table) against the")
    a("families' current code.")
    a("")
    a("```sh")
    a("python3 tools/make_dtype_fixtures.py --v524-only      # main environment only, no 4.40 venv")
    a("```")
    a("")
    keys = ["python", "torch", "transformers", "safetensors", "numpy", "cpu_capability"]
    a("Environment: " + ", ".join(f"{k} {v5_env.get(k)}" for k in keys) + ".")
    a("")
    files_table(a, files)
    a("")
    a("### Classes and compute dtypes observed (sequence 1, `TorchDispatchMode`)")
    a("")
    a("Distinct signatures of `bmm`/`baddbmm`/`_softmax`/`cat`, and here also `clamp`,")
    a("`maximum` and any `scaled_dot_product_attention` call (input float dtypes -> output);")
    a("logits dtype; layer-0 KV cache dtypes of a separate `use_cache=True` forward.")
    a("")
    a("| model | class | dtype | ops | logits | KV cache k/v |")
    a("|---|---|---|---|---|---|")
    for r in rows:
        info = r["info"]
        ops = "<br>".join(f"`{s}`" for s in info["attention_op_signatures"])
        a(f"| {r['model']} | {r['cls']} | {r['dtype']} | {ops} | {info['logits_dtype']} | "
          f"{info['kv_cache_layer0_key_value_dtypes']} |")
    a("")
    a("### HF bf16/fp16 vs fp32 (the dtype error)")
    a("")
    a("|Δlogprob| over all valid positions (B·T rows × V), in float64 from the stored F32,")
    a("against `forward_logprobs_f32` (HF fp32) and `forward_logprobs_f64` of the model's")
    a("`reference.safetensors`; `argmax≠` vs f32. The \"vs f32\" mean is the scale")
    a("`tests/test_versions.c` measures ratiocheck's bf16/fp16 emulation against.")
    a("")
    a("| model | dtype | vs f32 mean | max | argmax≠ | vs f64 mean | max | GEMM fp32 order mean | max |"
      " GEMM fp64 mean | max |")
    a("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        x, y, z, w = r["vs_f32"], r["vs_f64"], r["gemm32"], r["gemm64"]
        a(f"| {r['model']} | {r['dtype']} | {fmt(x['mean'])} | {fmt(x['max'])} | "
          f"{x['argmax_diff']}/{x['positions']} | {fmt(y['mean'])} | {fmt(y['max'])} | "
          f"{fmt(z['mean'])} | {fmt(z['max'])} | {fmt(w['mean'])} | {fmt(w['max'])} |")
    a("")
    a("### Notes")
    a("")
    a("- Baichuan (`baichuan_7b`, `baichuan_13b`, `baichuan2_7b`, `baichuan2_13b`): transformers has")
    a("  no Baichuan class; the references are `tools/baichuan_ref.py`'s `BaichuanForCausalLM`, a")
    a("  PyTorch reimplementation of the published `modeling_baichuan.py` files (checked bitwise")
    a("  against them, revisions in its docstring), loaded with its `from_pretrained(path,")
    a("  dtype=...)`. It always computes the upstream's explicit attention math, whatever")
    a("  `attn_implementation` says.")
    sd = {r["dtype"]: r["sdpa_same"] for r in rows if r["model"] in SDPA_MATH}
    if sd:
        a("- `baichuan2_7b` runs SDPA: Baichuan2-7B's published code calls")
        a("  `F.scaled_dot_product_attention(q, k, v, attn_mask=mask)`, whose fused CPU flash")
        a("  kernel rounds differently from the MATH backend. This reference is the MATH backend:")
        a("  the forward runs inside `torch.nn.attention.sdpa_kernel(SDPBackend.MATH)`;")
        a("  baichuan_ref itself computes the call with `sdpa_math` (the MATH backend written out:")
        a("  fp32 q, k, v and mask, q and k scaled by d^-1/4, fp32 softmax, one rounding of the")
        a("  output), and the script re-ran the model with the real `F.scaled_dot_product_attention`")
        a("  call on the MATH backend: log-probs bit-identical ("
          + ", ".join(f"{dt}: {'yes' if v else 'NO'}" for dt, v in sd.items()) + ").")
    a("- MPT's config says `alibi_bias_max` 12; transformers 5.24's `MptModel` uses 8 whatever")
    a("  the config says (as ratiocheck does, README.md \"Supported models\").")
    a("- GPT-2 (`gelu_new`, `NewGELUActivation`): `torch.pow(input, 3.0)` on a bf16 tensor is")
    a("  `base * base * base` with BFloat16 operands, each product rounded: R(R(x·x)·x) (CPU")
    a("  `pow_tensor_scalar_optimized_kernel`; CUDA's kernel, by its source, multiplies the same")
    a("  way); on an fp16 tensor the CPU goes through `Vectorized<Half>::pow` in fp32, one")
    a("  rounding. These files found it: an emulation with one rounding in bf16 too is 0.51 x")
    a("  the bf16 dtype error away from `gpt2_learned_bf16`.")
    a("- `GEMM fp32 order` / `GEMM fp64` columns: the same HF forward with every Linear / Conv1D /")
    a("  NormHead GEMM computed as `F.linear(x.float(), w.float(), b.float()).to(dtype)` (torch's")
    a("  fp32 kernel: another summation order) or with `.double()` (no fp32 summation error), both")
    a("  the same rule \"sum, bias, one rounding\", against the file. A few bf16/fp16 elements")
    a("  land on the other side of a rounding boundary and propagate: how far depends on which")
    a("  elements happen to flip (0 for some orders, up to ~2e-3 mean in bf16), a floor that an")
    a("  emulation summing in its own fp32 order meets even when every rounding rule is right.")
    a(V524_END)
    a("")
    return "\n".join(L)


def splice_v524_section(readme_path, section):
    """Replace the marked section of an existing README (or append it); nothing else changes."""
    old = open(readme_path).read() if os.path.exists(readme_path) else ""
    if V524_BEGIN in old:
        i = old.index(V524_BEGIN)
        j = old.index(V524_END, i) + len(V524_END)
        new = old[:i] + section.rstrip("\n") + old[j:]
    else:
        new = old + ("\n" if old else "") + section
    with open(readme_path, "w") as f:
        f.write(new)
    return new


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=DEFAULT_OUT)
    ap.add_argument("--python440", default=DEFAULT_PY440,
                    help="python of a virtualenv with transformers 4.40.2")
    ap.add_argument("--crosscheck-python", default=None,
                    help="optional: python of a transformers 4.40.2 + older torch env; "
                         "its v4.40 outputs are compared with --python440's in the README only")
    ap.add_argument("--v524-only", action="store_true",
                    help="only the v5.24-only families (" + ", ".join(V524_ONLY) + "): write their "
                         "files and rewrite only their README section; no 4.40 worker, the other "
                         "files and README text untouched")
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
    if args.v524_only:
        files, rows = make_v524(args.out, v5_env)
        readme = splice_v524_section(os.path.join(args.out, "README.md"),
                                     render_v524_section(files, rows, v5_env))
        print(readme)
        return
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
    # the v5.24-only families: files, and their README section after the rest
    xfiles, xrows = make_v524(args.out, v5_env)
    readme = readme + "\n" + render_v524_section(xfiles, xrows, v5_env)
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
    files_table(a, files)
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
