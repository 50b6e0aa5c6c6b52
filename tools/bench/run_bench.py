#!/usr/bin/env python3
"""ratiocheck against this machine's limits and against Hugging Face transformers, in one run.

What it does (tools/bench/README.md explains every column):
  1. builds tools/bench/ceilings.c with the system compiler against the OpenBLAS ratiocheck links
     (pkg-config openblas, -fopenmp) and measures the ceilings: sgemm GFLOP/s at each model's
     shapes (re-score M = sequences x (prompt + generated) rows, generation prefill M = batch x
     prompt, decode M = 1, 2, 4, ..., 64 and the decode batch) and memory bandwidth (STREAM triad);
     then, in a worker process with the same thread count, torch's bf16 matmul at the same shapes;
  2. builds (in --work, never committed) a pythia-160m-shaped GPT-NeoX and a Llama with
     SmolLM2-135M's shape, random weights from transformers' own classes, fp32 safetensors, and a
     prompt file (.ids, random token ids, --seqs / 2 prompts x 2 samples);
  3. for each model, repeat, dtype and kernel strategy runs ratiocheck (--json: seconds_generate,
     seconds_forward) and HF transformers on torch CPU doing the same job the seed's way
     (generate() with the KV cache and output_scores, sampled at temperature 1, then one full
     forward over prompt + generated tokens, log-probs from both), interleaved A, B, A, B, each
     in a fresh process whose peak RSS is read from wait4();
  4. prints every run, the time ratios ratiocheck / HF per phase and for the whole job, the whole
     job against the time of its GEMM FLOPs at the best rate measured per shape (the GEMM-FLOP
     time), each goal met or not (README.md: "The Goals table"), the load average before and
     after, a short table last, and writes a Markdown file (docs/bench.md).

    python3 tools/bench/run_bench.py [--models pythia160m,smollm135m] [--dtypes fp32,bf16]
        [--kernels engine,invariant,blas] [--seqs 64] [--len 128] [--prompt-len 16] [--repeats 1]
        [--threads N] [--ratiocheck build/src/ratiocheck] [--work /tmp/rc-bench]
        [--doc docs/bench.md] [--hf-runs paired|once|none] [--quick]

--quick: 2 layers, 4 sequences x 8 tokens, 8-token prompts, a 64 MiB triad, short GEMM timings, one
HF run per dtype, and the Markdown goes to WORK/bench-quick.md (never docs/): a smoke test.

Needs: python3 with torch and transformers (tools/fixtures/requirements.txt), a C compiler,
pkg-config and libopenblas-dev (tools/install-deps.sh), a built ratiocheck. The parent process
uses only the standard library; torch is imported in the worker processes it starts.
"""

import argparse
import functools
import json
import math
import os
import platform
import random
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
SEED = 20261212
DTYPE_BYTES = {"fp32": 4, "fp16": 2, "bf16": 2}
KERNELS = ("engine", "invariant", "blas")

# The two models: the published configs' shapes (random weights). "layers" is what --quick shrinks.
MODELS = {
    "pythia160m": dict(
        family="gpt_neox", title="pythia-160m-shaped GPT-NeoX", hidden=768, layers=12, heads=12, kv_heads=12,
        head_dim=64, intermediate=3072, vocab=50304, tied=False,
        config=dict(vocab_size=50304, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                    intermediate_size=3072, hidden_act="gelu", max_position_embeddings=2048,
                    initializer_range=0.02, layer_norm_eps=1e-5, use_parallel_residual=True, attention_bias=True,
                    tie_word_embeddings=False, bos_token_id=0, eos_token_id=0,
                    rope_parameters=dict(rope_type="default", rope_theta=10000.0, partial_rotary_factor=0.25))),
    "smollm135m": dict(
        family="llama", title="Llama with SmolLM2-135M's shape (GQA 9/3, tied)", hidden=576, layers=30, heads=9,
        kv_heads=3, head_dim=64, intermediate=1536, vocab=49152, tied=True,
        config=dict(vocab_size=49152, hidden_size=576, num_hidden_layers=30, num_attention_heads=9,
                    num_key_value_heads=3, head_dim=64, intermediate_size=1536, hidden_act="silu",
                    max_position_embeddings=8192, initializer_range=0.02, rms_norm_eps=1e-5,
                    tie_word_embeddings=True, attention_bias=False, mlp_bias=False, bos_token_id=1,
                    eos_token_id=2, rope_parameters=dict(rope_type="default", rope_theta=100000.0))),
}


def log(*a):
    print(*a, flush=True)


# =========================================================================== workers (torch)


def worker_make_models(jobs):
    """Random weights through transformers' own classes, saved as fp32 safetensors (one process
    for all models: torch is imported once)."""
    import torch
    import transformers

    for a in jobs:
        spec = MODELS[a["name"]]
        cfg_kw = dict(spec["config"], num_hidden_layers=a["layers"])
        torch.manual_seed(a["seed"])
        if spec["family"] == "gpt_neox":
            model = transformers.GPTNeoXForCausalLM(transformers.GPTNeoXConfig(**cfg_kw))
        else:
            model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**cfg_kw))
        model = model.eval().to(torch.float32)
        tmp = a["out"] + ".tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        model.save_pretrained(tmp)
        shutil.rmtree(a["out"], ignore_errors=True)
        os.replace(tmp, a["out"])
        del model
    print(json.dumps({"torch": torch.__version__, "transformers": transformers.__version__}))


def read_ids(path):
    with open(path) as f:
        return [[int(x) for x in ln.split()] for ln in f if ln.strip()]


def worker_hf(a):
    """The seed's way on torch CPU: generate with the KV cache and output_scores (sampled at
    temperature 1, EOS off, no logits processor), then one forward over prompt + generated."""
    import torch
    import transformers
    from transformers import AutoModelForCausalLM, GenerationConfig

    torch.set_num_threads(a["threads"])
    transformers.utils.logging.disable_progress_bar()
    dtype = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}[a["dtype"]]
    t0 = time.perf_counter()
    model = AutoModelForCausalLM.from_pretrained(a["model"], dtype=dtype).eval()
    t_load = time.perf_counter() - t0
    # EOS off at the source (tools/gpu/hf_seed.py explains why: otherwise generate() puts the
    # model's EOS back and min_new_tokens masks it in the scores).
    model.generation_config.eos_token_id = None
    G, samples = a["gen"], a["samples"]
    rows = [ids for ids in read_ids(a["prompts"]) for _ in range(samples)]
    P = len(rows[0])
    if any(len(r) != P for r in rows):
        raise SystemExit("hf worker: prompts of different lengths (run_bench.py writes equal ones)")
    gcfg = GenerationConfig(do_sample=True, temperature=1.0, top_k=0, top_p=1.0, max_new_tokens=G,
                            min_new_tokens=G, eos_token_id=None, pad_token_id=0, use_cache=True,
                            output_scores=True, return_dict_in_generate=True)
    x = torch.tensor(rows)
    mask = torch.ones_like(x)
    torch.manual_seed(a["seed"])
    with torch.no_grad():
        t0 = time.perf_counter()
        out = model.generate(input_ids=x, attention_mask=mask, generation_config=gcfg)
        seq = out.sequences
        new = seq[:, P:]
        scores = torch.stack(out.scores, dim=1)  # [S, G, V], float32 (generate upcasts)
        gen_lp = torch.log_softmax(scores.float(), dim=-1).gather(-1, new.unsqueeze(-1)).squeeze(-1)
        t_gen = time.perf_counter() - t0
        del out, scores
        if tuple(seq.shape) != (len(rows), P + G):
            raise SystemExit(f"hf worker: generate returned {tuple(seq.shape)}, expected {(len(rows), P + G)}")
        t0 = time.perf_counter()
        logits = model(input_ids=seq, attention_mask=torch.ones_like(seq), use_cache=False).logits
        fwd_lp = torch.log_softmax(logits[:, P - 1 : P + G - 1].float(), dim=-1).gather(-1, new.unsqueeze(-1))
        fwd_lp = fwd_lp.squeeze(-1)
        t_fwd = time.perf_counter() - t0
        del logits
    lr = fwd_lp.double() - gen_lp.double()
    r = lr.exp()
    print(json.dumps({
        "seconds_load": t_load, "seconds_generate": t_gen, "seconds_forward": t_fwd,
        "ratio_mean": float(r.mean()), "ratio_std": float(r.std(unbiased=False)),
        "max_abs_log_ratio": float(lr.abs().max()), "torch": torch.__version__,
        "transformers": transformers.__version__, "attn": model.config._attn_implementation,
        "torch_threads": torch.get_num_threads()}))


def onednn_impls(fn):
    """Run fn() once with oneDNN's verbose output on, the process's stdout captured at the file
    descriptor (oneDNN prints from C); -> the distinct implementation names of the primitives it
    executed (e.g. "brg_matmul:avx512_core_amx"), [] when the call did not go through oneDNN."""
    import ctypes

    import torch

    libc = ctypes.CDLL(None)
    sys.stdout.flush()
    libc.fflush(None)
    saved = os.dup(1)
    with tempfile.TemporaryFile() as tmp:
        os.dup2(tmp.fileno(), 1)
        try:
            with torch.backends.mkldnn.verbose(torch.backends.mkldnn.VERBOSE_ON):
                fn()
            libc.fflush(None)
        finally:
            os.dup2(saved, 1)
            os.close(saved)
        tmp.seek(0)
        text = tmp.read().decode("utf-8", "replace")
    impls = []
    for ln in text.splitlines():
        f = ln.split(",")
        # onednn_verbose,[v1,][timestamp,]primitive,exec,cpu,KIND,IMPL,...
        if f and f[0] == "onednn_verbose" and "exec" in f:
            i = f.index("exec")
            if i + 3 < len(f) and f[i + 3] not in impls:
                impls.append(f"{f[i + 2]}:{f[i + 3]}" if f[i + 2] not in f[i + 3] else f[i + 3])
    return impls


def worker_torch_gemm(a):
    """torch's matmul at the given shapes, Y[M,N] = X[M,K] W[N,K]^T (what nn.Linear computes, W as
    stored), in a.dtype, a.threads threads: one untimed call, one with oneDNN's verbose output
    (which implementation runs), two more untimed, then calls until min_time has passed; GFLOP/s of the median call,
    the fastest, and all calls' FLOPs over their time (as ceilings.c)."""
    import torch

    torch.set_num_threads(a["threads"])
    dtype = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}[a["dtype"]]
    gen = torch.Generator().manual_seed(SEED)
    res = []
    for M, K, N in a["shapes"]:
        x = (torch.rand(M, K, generator=gen) - 0.5).to(dtype)
        w = (torch.rand(N, K, generator=gen) - 0.5).to(dtype)
        y = torch.empty(M, N, dtype=dtype)

        call = functools.partial(torch.mm, x, w.t(), out=y)
        call()  # warm-up: threads, oneDNN's primitive cache, the output's pages
        impls = onednn_impls(call)
        for _ in range(2):  # the verbose call's output is not timed; two more untimed calls after it
            call()
        rates, total = [], 0.0
        fl = 2.0 * M * K * N
        t_start = time.perf_counter()
        while True:
            t0 = time.perf_counter()
            call()
            dt = time.perf_counter() - t0
            total += dt
            rates.append(fl / max(dt, 1e-9) / 1e9)
            if time.perf_counter() - t_start >= a["min_time"]:
                break
        res.append({"M": M, "K": K, "N": N, "calls": len(rates), "seconds": total,
                    "gflops": statistics.median(rates), "gflops_best": max(rates),
                    "gflops_mean": fl * len(rates) / total / 1e9, "onednn": impls})
        del x, w, y, call
    print(json.dumps({"dtype": a["dtype"], "torch": torch.__version__, "threads": torch.get_num_threads(),
                      "cpu_capability": torch.backends.cpu.get_cpu_capability(),
                      "mkldnn": torch.backends.mkldnn.is_available(), "gemm": res}))


# =========================================================================== running children


def run_child(cmd, env=None):
    """Run cmd; -> (exit code, stdout, stderr, wall seconds, peak RSS bytes) with the child's own
    peak RSS from wait4() (not the maximum over all children, as RUSAGE_CHILDREN would give)."""
    with tempfile.TemporaryFile() as fo, tempfile.TemporaryFile() as fe:
        t0 = time.perf_counter()
        p = subprocess.Popen(cmd, stdout=fo, stderr=fe, env=env)
        try:
            _, status, ru = os.wait4(p.pid, 0)
        except BaseException:
            p.kill()
            p.wait()
            raise
        wall = time.perf_counter() - t0
        p.returncode = os.waitstatus_to_exitcode(status)
        fo.seek(0)
        fe.seek(0)
        out = fo.read().decode("utf-8", "replace")
        err = fe.read().decode("utf-8", "replace")
    return p.returncode, out, err, wall, ru.ru_maxrss * 1024  # Linux: ru_maxrss in KiB


def last_json(text):
    for ln in reversed(text.strip().splitlines()):
        ln = ln.strip()
        if ln.startswith("{"):
            return json.loads(ln)
    raise ValueError("no JSON object in the output")


def child_env(threads):
    env = dict(os.environ)
    env.update(OMP_NUM_THREADS=str(threads), OPENBLAS_NUM_THREADS=str(threads), TOKENIZERS_PARALLELISM="false",
               PYTHONUNBUFFERED="1")
    return env


def worker_cmd(kind, args):
    return [sys.executable, os.path.abspath(__file__), "--_worker", kind, json.dumps(args)]


# =========================================================================== model arithmetic


def linear_shapes(spec, layers):
    """[(name, K, N, count)]: every GEMM of one token through the model, W [N, K] as stored."""
    H, I, V = spec["hidden"], spec["intermediate"], spec["vocab"]
    q, kv = spec["heads"] * spec["head_dim"], spec["kv_heads"] * spec["head_dim"]
    if spec["family"] == "gpt_neox":
        body = [("qkv", H, q + 2 * kv, layers), ("attn_out", q, H, layers), ("mlp_in", H, I, layers),
                ("mlp_out", I, H, layers)]
    else:
        body = [("q", H, q, layers), ("k", H, kv, layers), ("v", H, kv, layers), ("o", q, H, layers),
                ("gate", H, I, layers), ("up", H, I, layers), ("down", I, H, layers)]
    return body, [("lm_head", H, V, 1)]


class Arith:
    """FLOPs and bytes of the job for one model (see README.md: "How the numbers are computed")."""

    def __init__(self, spec, layers, S, B, P, G, params_total):
        self.spec, self.L, self.S, self.B, self.P, self.G = spec, layers, S, B, P, G
        self.body_shapes, self.head_shapes = linear_shapes(spec, layers)
        self.body = sum(k * n * c for _, k, n, c in self.body_shapes)
        self.head = sum(k * n * c for _, k, n, c in self.head_shapes)
        self.params_total = params_total
        self.attn_unit = 4 * spec["heads"] * spec["head_dim"] * layers  # QK^T + PV per (query, key)
        self.kv_unit = 2 * spec["kv_heads"] * spec["head_dim"] * layers  # K and V elements per token

    def n_batches(self):
        return math.ceil(self.S / self.B)

    def batch_sizes(self):
        return [min(self.B, self.S - i * self.B) for i in range(self.n_batches())]

    # generation: prefill P tokens (one head row per sequence), then G - 1 decode steps
    def gen_flops(self):
        P, G = self.P, self.G
        per_seq = 2 * self.body * (P + G - 1) + 2 * self.head * G
        per_seq += self.attn_unit * (P * (P + 1) // 2 + sum(P + t for t in range(1, G)))
        return self.S * per_seq

    def fwd_flops(self):
        T = self.P + self.G
        return self.S * (2 * self.body * T + 2 * self.head * self.G + self.attn_unit * T * (T + 1) // 2)

    def gen_bytes(self, d):
        """Weights (GEMM weights at d bytes) once per pass, plus the KV cache each decode step reads."""
        w = (self.body + self.head) * d
        total = 0
        for b in self.batch_sizes():
            total += w  # prefill pass
            total += sum(w + b * self.kv_unit * (self.P + t) * d for t in range(1, self.G))
        return total

    def weights_bytes(self, d):
        return self.params_total * d

    def kv_cache_bytes(self, d):
        return self.S * (self.P + self.G) * self.kv_unit * d

    # the bounds from the measured ceilings
    def gen_bound_s(self, d, ceil, bw_gbps):
        t = 0.0
        for b in self.batch_sizes():
            t += (2 * self.body * self.P + self.attn_unit * self.P * (self.P + 1) // 2) * b / ceil("prefill_body", b) / 1e9
            t += 2 * self.head * b / ceil("decode_head", b) / 1e9
            for step in range(1, self.G):
                fl_body = b * (2 * self.body + self.attn_unit * (self.P + step))
                fl_head = b * 2 * self.head
                t_compute = (fl_body / ceil("decode_body", b) + fl_head / ceil("decode_head", b)) / 1e9
                t_memory = ((self.body + self.head) * d + b * self.kv_unit * (self.P + step) * d) / (bw_gbps * 1e9)
                t += max(t_compute, t_memory)
        return t

    def fwd_bound_s(self, ceil):
        T = self.P + self.G
        body = self.S * (2 * self.body * T + self.attn_unit * T * (T + 1) // 2)
        return (body / ceil("forward_body") + self.S * 2 * self.head * self.G / ceil("forward_head")) / 1e9

    def gemm_flops(self):
        """The linear layers' GEMM FLOPs of the job by shape: ({(M, K, N): FLOPs} of the generation,
        the same of the re-score). Generation, per decode batch b: the prompts' prefill (M = b x P)
        and their LM head (M = b), then G - 1 decode steps (body and head at M = b); re-score: the
        body at S x (P + G) rows, the head at S x G. Attention (no weights) is not counted."""
        gen, fwd = {}, {}

        def add(d, M, shapes, times):
            for _, k, n, c in shapes:
                d[(M, k, n)] = d.get((M, k, n), 0) + 2 * M * k * n * c * times

        for b in self.batch_sizes():
            add(gen, b * self.P, self.body_shapes, 1)
            add(gen, b, self.head_shapes, 1)
            add(gen, b, self.body_shapes + self.head_shapes, self.G - 1)
        add(fwd, self.S * (self.P + self.G), self.body_shapes, 1)
        add(fwd, self.S * self.G, self.head_shapes, 1)
        return gen, fwd


# GEMM rates that may stand for a dtype's GEMMs in the "GEMM-FLOP time": fp32 sgemm for every dtype
# (a bf16 / fp16 value is exact in fp32), torch's bf16 matmul for bf16 only (fp32 accumulation of
# bf16 products: what a bf16 job's GEMM can be, not an fp32 one's).
RATE_SOURCES = {"fp32": ("sgemm",), "bf16": ("sgemm", "torch_bf16"), "fp16": ("sgemm",)}
RATE_NAMES = {"sgemm": "OpenBLAS sgemm", "torch_bf16": "torch bf16 matmul"}


def gemm_floor(ar, dtype, rates):
    """The time the job's GEMM FLOPs take, each shape at the best rate measured for it among the
    dtype's sources (rates: {source: {(M, K, N): GFLOP/s}}): per phase the seconds, GFLOP, and the
    share of the FLOPs each source was the best rate for."""
    out = {}
    for phase, items in zip(("gen", "fwd"), ar.gemm_flops()):
        t, share = 0.0, {}
        for shape, fl in items.items():
            cand = [(rates[s][shape], s) for s in RATE_SOURCES[dtype] if shape in rates.get(s, {})]
            if not cand:
                return None
            g, s = max(cand)
            t += fl / g / 1e9
            share[s] = share.get(s, 0) + fl
        total = sum(items.values())
        out[phase] = {"seconds": t, "gflop": total / 1e9, "gflops": total / t / 1e9,
                      "best_share": {s: v / total for s, v in sorted(share.items())}}
    out["seconds"] = out["gen"]["seconds"] + out["fwd"]["seconds"]
    return out


def best_share_text(share):
    """{source: share of FLOPs} -> 'torch bf16 matmul' or 'torch bf16 matmul 87%, OpenBLAS sgemm 13%'."""
    items = sorted(share.items(), key=lambda kv: -kv[1])
    if len(items) == 1 or items[1][1] < 0.0005:
        return RATE_NAMES[items[0][0]]
    return ", ".join(f"{RATE_NAMES[s]} {100 * v:.0f}%" for s, v in items if v >= 0.0005)


def ceiling_requests(name, ar):
    """The GEMM shapes to time for a model: {(M, K, N)} with the parts they serve."""
    S, B, P, G = ar.S, ar.B, ar.P, ar.G
    want = set()
    ladder = sorted({m for m in (1, 2, 4, 8, 16, 32, 64) if m <= max(ar.batch_sizes())} | set(ar.batch_sizes()))
    for _, k, n, _ in ar.body_shapes:
        want.add((S * (P + G), k, n))
        for b in set(ar.batch_sizes()):
            want.add((b * P, k, n))
        for m in ladder:
            want.add((m, k, n))
    for _, k, n, _ in ar.head_shapes:
        want.add((S * G, k, n))
        for m in ladder:
            want.add((m, k, n))
    return want, ladder


class Ceil:
    """Weighted sgemm ceilings of one model: total flops / sum(flops_i / gflops_i) over its shapes."""

    def __init__(self, ar, gemm):
        self.ar, self.gemm = ar, gemm  # gemm: {(M, K, N): gflops}

    def weighted(self, shapes, M):
        fl = sum(2 * M * k * n * c for _, k, n, c in shapes)
        t = sum(2 * M * k * n * c / self.gemm[(M, k, n)] for _, k, n, c in shapes)
        return fl / t

    def __call__(self, part, b=None):
        ar = self.ar
        if part == "forward_body":
            return self.weighted(ar.body_shapes, ar.S * (ar.P + ar.G))
        if part == "forward_head":
            return self.weighted(ar.head_shapes, ar.S * ar.G)
        if part == "prefill_body":
            return self.weighted(ar.body_shapes, ar.B * ar.P if b is None else b * ar.P)
        if part == "decode_body":
            return self.weighted(ar.body_shapes, b)
        if part == "decode_head":
            return self.weighted(ar.head_shapes, b)
        raise KeyError(part)

    def model_at(self, M):
        return self.weighted(self.ar.body_shapes + self.ar.head_shapes, M)

    def forward(self):
        """Weighted over the whole re-score (body at S x (P + G) rows, head at S x G)."""
        ar = self.ar
        T = ar.P + ar.G
        fb, fh = 2 * ar.S * T * ar.body, 2 * ar.S * ar.G * ar.head
        return (fb + fh) / (fb / self("forward_body") + fh / self("forward_head"))


# =========================================================================== the bench


def build_ceilings(work):
    src = os.path.join(HERE, "ceilings.c")
    exe = os.path.join(work, "ceilings")
    cc = os.environ.get("CC", "cc")
    try:
        flags = subprocess.run(["pkg-config", "--cflags", "--libs", "openblas"], check=True, capture_output=True,
                               text=True).stdout.split()
    except (OSError, subprocess.CalledProcessError):
        flags = ["-lopenblas"]
    cflags = [f for f in flags if f.startswith("-I")]
    libs = [f for f in flags if not f.startswith("-I")]
    cmd = [cc, "-O2", "-std=c11", "-fopenmp"] + cflags + [src, "-o", exe] + libs
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise SystemExit(f"building ceilings failed: {' '.join(cmd)}\n{p.stderr}")
    return exe, " ".join(cmd)


def machine_info():
    cpu = platform.processor()
    try:
        with open("/proc/cpuinfo") as f:
            for ln in f:
                if ln.startswith("model name"):
                    cpu = ln.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    mem = None
    try:
        with open("/proc/meminfo") as f:
            for ln in f:
                if ln.startswith("MemTotal:"):
                    mem = int(ln.split()[1]) * 1024
    except OSError:
        pass
    return {"cpu": cpu, "cpus": os.cpu_count(), "mem_bytes": mem, "kernel": platform.release(),
            "python": platform.python_version()}


def write_prompts(path, n_prompts, P, vocab, seed):
    rng = random.Random(seed)
    with open(path, "w") as f:
        for _ in range(n_prompts):
            f.write(" ".join(str(rng.randrange(3, vocab)) for _ in range(P)) + "\n")


def model_params(model_dir):
    """Parameters stored in the model's safetensors (headers only)."""
    import struct

    n = 0
    for fn in sorted(os.listdir(model_dir)):
        if fn.endswith(".safetensors"):
            with open(os.path.join(model_dir, fn), "rb") as fh:
                (hlen,) = struct.unpack("<Q", fh.read(8))
                header = json.loads(fh.read(hlen))
            for k, v in header.items():
                if k != "__metadata__":
                    n += math.prod(v["shape"])
    return n


def derive(run, ar, ceil, bw, ceil_best=None, floor=None):
    """Per-run metrics from its times (None where a time is missing or zero). ceil_best: the
    ceilings at the best rate for the run's dtype; floor: gemm_floor() of its model and dtype."""
    d = DTYPE_BYTES[run["dtype"]]
    g, f = run.get("seconds_generate"), run.get("seconds_forward")
    ok = lambda x: x is not None and x > 0  # noqa: E731
    S, P, G = ar.S, ar.P, ar.G
    m = {}
    m["job_s"] = g + f if ok(g) and ok(f) else None
    m["gen_tok_s"] = S * G / g if ok(g) else None
    m["fwd_tok_s"] = S * (P + G) / f if ok(f) else None
    m["gen_gflops"] = ar.gen_flops() / g / 1e9 if ok(g) else None
    m["gen_gbps"] = ar.gen_bytes(d) / g / 1e9 if ok(g) else None
    m["gen_bound_pct"] = 100 * ar.gen_bound_s(d, ceil, bw) / g if ok(g) else None
    m["fwd_gflops"] = ar.fwd_flops() / f / 1e9 if ok(f) else None
    m["fwd_ceil_pct"] = 100 * ar.fwd_bound_s(ceil) / f if ok(f) else None
    m["gen_bound_best_pct"] = 100 * ar.gen_bound_s(d, ceil_best, bw) / g if ok(g) and ceil_best else None
    m["gemm_s"] = floor["seconds"] if floor else None
    m["job_over_gemm"] = m["job_s"] / floor["seconds"] if floor and m["job_s"] else None
    rss = run.get("peak_rss")
    m["rss_over_min"] = rss / (ar.weights_bytes(d) + ar.kv_cache_bytes(d)) if rss else None
    return m


GOAL_JOB_OVER_GEMM = 1.3  # the whole job <= 1.3 x the time of its GEMM FLOPs at the best rate
GOAL_DECODE_PCT = 70.0  # generation >= 70% of its bound
GOAL_RSS = 1.5  # peak RSS <= 1.5 x (weights + KV cache)


def goals(row, hf_row):
    """The goals of one ratiocheck summary row, each {"value", "target", "met"} (met None where a
    figure is missing): "hf": HF's job time / ratiocheck's >= 2, or >= 3 where the FLOP limit (HF's
    job time / the job's GEMM-FLOP time, the speed-up a job at the GEMM-FLOP time would have)
    allows 3; "gemm": job time / GEMM-FLOP time <= 1.3; "decode": gen % of bound >= 70; "rss":
    peak RSS / (W + KV) <= 1.5."""
    def goal(value, target, ok):
        return {"value": value, "target": target, "met": None if value is None else ok(value, target)}

    speedup = 1 / row["x_job"] if row.get("x_job") else None
    limit = hf_row["job_s"] / row["gemm_s"] if hf_row and hf_row.get("job_s") and row.get("gemm_s") else None
    g = {"hf": goal(speedup, 3.0 if limit is not None and limit >= 3 else 2.0, lambda v, t: v >= t)}
    g["hf"]["flop_limit"] = limit
    g["gemm"] = goal(row.get("job_over_gemm"), GOAL_JOB_OVER_GEMM, lambda v, t: v <= t)
    g["decode"] = goal(row.get("gen_bound_pct"), GOAL_DECODE_PCT, lambda v, t: v >= t)
    g["rss"] = goal(row.get("rss_over_min"), GOAL_RSS, lambda v, t: v <= t)
    return g


def met_text(met):
    return "-" if met is None else ("met" if met else "not met")


def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def fmt(x, spec=".1f", none="-"):
    return none if x is None else format(x, spec)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--models", default=",".join(MODELS), help=f"comma-separated: {', '.join(MODELS)}")
    ap.add_argument("--dtypes", default="fp32,bf16", help="comma-separated: fp32, bf16, fp16 [fp32,bf16]")
    ap.add_argument("--kernels", default=",".join(KERNELS), help="ratiocheck --kernels values [engine,invariant,blas]")
    ap.add_argument("--seqs", type=int, help="sequences: seqs/2 prompts x 2 samples [64; --quick 4]")
    ap.add_argument("--len", type=int, dest="gen", help="generated tokens (ratiocheck --len) [128; --quick 8]")
    ap.add_argument("--prompt-len", type=int, help="prompt tokens (random ids, all prompts equal) [16; --quick 8]")
    ap.add_argument("--batch", type=int, help="ratiocheck --batch: sequences decoded together [all, as HF]")
    ap.add_argument("--layers", type=int, help="override the models' layer count [theirs; --quick 2]")
    ap.add_argument("--repeats", type=int, default=1, help="rounds of every run [1]")
    ap.add_argument("--threads", type=int, default=os.cpu_count(), help="threads for every tool [all CPUs]")
    ap.add_argument("--ratiocheck", default=os.path.join(ROOT, "build", "src", "ratiocheck"))
    ap.add_argument("--ratiocheck-b", help="a second ratiocheck binary, run beside the first (A, B in even rounds, "
                    "B, A in odd ones) for every kernel strategy: its rows are the strategy's name + '@' + --label-b")
    ap.add_argument("--label-b", default="b", help="the second binary's label in the tables [b]")
    ap.add_argument("--work", default="/tmp/rc-bench", help="models, prompts, ceilings binary, JSON [/tmp/rc-bench]")
    ap.add_argument("--doc", help="Markdown output [docs/bench.md; --quick: WORK/bench-quick.md]")
    ap.add_argument("--no-doc", action="store_true", help="write no Markdown")
    ap.add_argument("--json", help="all measurements as JSON [WORK/bench.json]")
    ap.add_argument("--hf-runs", choices=["paired", "once", "none"],
                    help="HF after every ratiocheck run (A, B, A, B), once per dtype and round, or never "
                         "[paired; --quick once]")
    ap.add_argument("--triad-mib", type=int, help="MiB per triad array [1024; --quick 64]")
    ap.add_argument("--min-time", type=float, help="seconds per GEMM shape in ceilings [0.5; --quick 0.05]")
    ap.add_argument("--no-torch-gemm", action="store_true",
                    help="skip timing torch's bf16 matmul at the GEMM shapes (the GEMM-FLOP time is then sgemm's)")
    ap.add_argument("--seed", type=int, default=1, help="sampling seed of both tools [1]")
    ap.add_argument("--quick", action="store_true", help="tiny sizes: a smoke test of the harness")
    ap.add_argument("--_worker", nargs=2, help=argparse.SUPPRESS)
    a = ap.parse_args()

    if a._worker:
        kind, args = a._worker
        {"make_models": worker_make_models, "hf": worker_hf, "torch_gemm": worker_torch_gemm}[kind](json.loads(args))
        return

    q = a.quick
    S = a.seqs or (4 if q else 64)
    G = a.gen or (8 if q else 128)
    P = a.prompt_len or (8 if q else 16)
    B = min(a.batch or S, S)
    hf_runs = a.hf_runs or ("once" if q else "paired")
    triad_mib = a.triad_mib if a.triad_mib is not None else (64 if q else 1024)
    min_time = a.min_time if a.min_time is not None else (0.05 if q else 0.5)
    models = [m.strip() for m in a.models.split(",") if m.strip()]
    dtypes = [d.strip() for d in a.dtypes.split(",") if d.strip()]
    kernels = [k.strip() for k in a.kernels.split(",") if k.strip()]
    for m in models:
        if m not in MODELS:
            ap.error(f"--models: unknown {m!r} ({', '.join(MODELS)})")
    for d in dtypes:
        if d not in DTYPE_BYTES:
            ap.error(f"--dtypes: unknown {d!r} (fp32, bf16, fp16)")
    for k in kernels:
        if k not in KERNELS:
            ap.error(f"--kernels: unknown {k!r} ({', '.join(KERNELS)})")
    if S < 2 or S % 2:
        ap.error("--seqs: an even number >= 2 (seqs/2 prompts x 2 samples)")
    if G < 1 or P < 1 or B < 1 or a.repeats < 1 or a.threads < 1:
        ap.error("--len, --prompt-len, --batch, --repeats and --threads must be positive")
    if a.ratiocheck_b and not os.access(a.ratiocheck_b, os.X_OK):
        ap.error(f"--ratiocheck-b {a.ratiocheck_b}: not an executable")
    if not os.access(a.ratiocheck, os.X_OK):
        ap.error(f"--ratiocheck {a.ratiocheck}: not an executable (build it: meson setup build && ninja -C build)")
    work = os.path.abspath(a.work)
    os.makedirs(work, exist_ok=True)
    doc = None if a.no_doc else (a.doc or (os.path.join(work, "bench-quick.md") if q else
                                         os.path.join(ROOT, "docs", "bench.md")))
    json_path = a.json or os.path.join(work, "bench-quick.json" if q else "bench.json")
    rc = os.path.abspath(a.ratiocheck)
    rc_b = os.path.abspath(a.ratiocheck_b) if a.ratiocheck_b else None
    tools_rc = list(kernels) + ([k + "@" + a.label_b for k in kernels] if rc_b else [])
    env = child_env(a.threads)
    load_before = os.getloadavg()
    t_start = time.time()
    started = time.strftime("%Y-%m-%d %H:%M:%S %Z")
    rc_version = subprocess.run([rc, "--version"], capture_output=True, text=True).stdout.splitlines()[0]
    log(f"run_bench: {', '.join(models)} x {', '.join(dtypes)} x {', '.join(kernels)} (+ HF: {hf_runs}); "
        f"{S} sequences ({S // 2} prompts x 2 samples), prompt {P} + {G} generated tokens, batch {B}, "
        f"{a.threads} threads, {a.repeats} round(s); {rc_version}; load {load_before[0]:.2f} {load_before[1]:.2f} "
        f"{load_before[2]:.2f}")

    # ---- models and prompts
    layers_of = {m: a.layers or (2 if q else MODELS[m]["layers"]) for m in models}
    model_dirs, ariths, versions = {}, {}, {}
    prompts = os.path.join(work, f"prompts_{S // 2}x{P}.ids")
    write_prompts(prompts, S // 2, P, min(MODELS[m]["vocab"] for m in models), SEED)
    todo = []
    for m in models:
        d = os.path.join(work, "models", f"{m}-L{layers_of[m]}")
        model_dirs[m] = d
        if not os.path.exists(os.path.join(d, "model.safetensors")):
            log(f"building {m} ({layers_of[m]} layers, random weights, fp32) in {d}")
            todo.append({"name": m, "out": d, "layers": layers_of[m], "seed": SEED})
    if todo:
        code, out, err, wall, _ = run_child(worker_cmd("make_models", todo), env)
        if code != 0:
            raise SystemExit(f"building the models failed (exit {code}):\n{err[-3000:]}")
        versions.update(last_json(out))
    for m in models:
        ariths[m] = Arith(MODELS[m], layers_of[m], S, B, P, G, model_params(model_dirs[m]))

    # ---- ceilings
    exe, cc_cmd = build_ceilings(work)
    want, ladders = set(), {}
    for m in models:
        w, ladders[m] = ceiling_requests(m, ariths[m])
        want |= w
    shape_args = [f"s{i}:{M}:{K}:{N}" for i, (M, K, N) in enumerate(sorted(want))]
    log(f"ceilings: triad {triad_mib} MiB x 3, sgemm at {len(shape_args)} shapes ({min_time} s each)")
    t0 = time.time()
    code, out, err, _, _ = run_child([exe, "--threads", str(a.threads), "--triad-mib", str(triad_mib),
                                      "--min-time", str(min_time)] + shape_args, env)
    if code != 0:
        raise SystemExit(f"ceilings failed (exit {code}): {err[-2000:]}")
    ceil_json = json.loads(out)
    ceil_json["seconds"] = time.time() - t0
    gemm = {(g["M"], g["K"], g["N"]): g["gflops"] for g in ceil_json["gemm"] if g["kind"] == "sgemm"}
    bw = ceil_json["triad"]["gbps"]
    ceils = {m: Ceil(ariths[m], gemm) for m in models}
    log(f"  triad {bw:.1f} GB/s (best {ceil_json['triad']['gbps_best']:.1f}), read {ceil_json['read']['gbps']:.1f} GB/s; "
        + "; ".join(f"{m}: sgemm re-score {ceils[m].forward():.1f} GFLOP/s, decode M={B} "
                    f"{ceils[m].model_at(B):.1f}" for m in models)
        + f" ({ceil_json['seconds']:.0f} s)")

    # ---- torch's bf16 matmul at the same shapes, in a worker process (as HF runs), same threads
    rates = {"sgemm": gemm}
    torch_gemm = None
    if not a.no_torch_gemm:
        t0 = time.time()
        code, out, err, _, _ = run_child(worker_cmd("torch_gemm", {"shapes": sorted(want), "dtype": "bf16",
                                                                   "threads": a.threads, "min_time": min_time}), env)
        try:
            if code != 0:
                raise ValueError(f"exit {code}: {err.strip()[-800:]}")
            torch_gemm = last_json(out)
            torch_gemm["seconds"] = time.time() - t0
            rates["torch_bf16"] = {(g["M"], g["K"], g["N"]): g["gflops"] for g in torch_gemm["gemm"]}
        except (ValueError, KeyError) as e:
            log(f"  torch bf16 matmul: FAILED ({e}); the GEMM-FLOP time uses sgemm only")
            torch_gemm = {"error": str(e)}
    ceils_torch = {m: Ceil(ariths[m], rates["torch_bf16"]) for m in models} if "torch_bf16" in rates else {}
    best_rates = {dt: {sh: max(rates[s][sh] for s in RATE_SOURCES[dt] if s in rates) for sh in gemm}
                  for dt in dtypes}
    ceils_best = {(m, dt): Ceil(ariths[m], best_rates[dt]) for m in models for dt in dtypes}
    floors = {(m, dt): gemm_floor(ariths[m], dt, rates) for m in models for dt in dtypes}
    if ceils_torch:
        impls = sorted({i for g in torch_gemm["gemm"] for i in g["onednn"]})
        log(f"  torch bf16 matmul ({torch_gemm['cpu_capability']}; oneDNN: {', '.join(impls) or 'not used'}): "
            + "; ".join(f"{m}: re-score {ceils_torch[m].forward():.1f} GFLOP/s, decode M={B} "
                        f"{ceils_torch[m].model_at(B):.1f}" for m in models)
            + f" ({torch_gemm['seconds']:.0f} s)")
    for (m, dt), fl in floors.items():
        log(f"  GEMM-FLOP time {m} {dt}: generation {fl['gen']['seconds']:.2f} s ({best_share_text(fl['gen']['best_share'])})"
            f", re-score {fl['fwd']['seconds']:.2f} s ({best_share_text(fl['fwd']['best_share'])})")

    # ---- the runs: per model, round and dtype, A (ratiocheck, one kernel) then B (HF), ...
    runs = []

    def record(run):
        key = (run["model"], run["dtype"])
        run["metrics"] = derive(run, ariths[run["model"]], ceils[run["model"]], bw, ceils_best[key], floors[key])
        runs.append(run)
        mm = run["metrics"]
        if run.get("error"):
            log(f"  {run['model']:10s} {run['dtype']:4s} {run['tool']:12s} FAILED: {run['error']}")
            return
        log(f"  {run['model']:10s} {run['dtype']:4s} {run['tool']:12s} generate {run['seconds_generate']:8.2f} s "
            f"({fmt(mm['gen_tok_s'], '.0f')} tok/s, {fmt(mm['gen_gflops'])} GFLOP/s, {fmt(mm['gen_gbps'])} GB/s, "
            f"{fmt(mm['gen_bound_pct'])}% of bound)  forward {run['seconds_forward']:8.2f} s "
            f"({fmt(mm['fwd_tok_s'], '.0f')} tok/s, {fmt(mm['fwd_gflops'])} GFLOP/s, {fmt(mm['fwd_ceil_pct'])}% of sgemm)  "
            f"job {fmt(mm['job_over_gemm'], '.2f')} x GEMM-FLOP time  "
            f"wall {run['wall']:.1f} s  RSS {run['peak_rss'] / 2**30:.2f} GiB  "
            f"ratio mean {fmt(run.get('ratio_mean'), '.6f')}  load {run['load_before']:.2f}")

    def run_rc(m, dt, k, rnd, binary=None, label=None):
        cmd = [binary or rc, "--model", model_dirs[m], "--prompts", prompts, "--dtype", dt, "--kernels", k, "--len", str(G),
               "--samples", "2", "--batch", str(B), "--seed", str(a.seed), "--threads", str(a.threads),
               "--out", "none", "--json", "-q"]
        load = os.getloadavg()[0]
        code, out, err, wall, rss = run_child(cmd, env)
        run = {"model": m, "dtype": dt, "tool": label or k, "round": rnd, "wall": wall, "peak_rss": rss,
               "load_before": load, "command": shlex.join(cmd)}
        try:
            if code != 0:
                raise ValueError(f"exit {code}: {err.strip()[-500:]}")
            j = last_json(out)
            for key in ("seconds_generate", "seconds_forward", "seconds"):
                if key not in j:
                    raise ValueError(f"--json has no {key}")
                run[key] = float(j[key])
            st = j["lens"][-1]
            run.update(ratio_mean=st.get("mean"), ratio_std=st.get("std"), ratio_min=st.get("min"),
                       ratio_max=st.get("max"), identical_frac=st.get("identical_frac"), threads=j.get("threads"))
        except (ValueError, KeyError, IndexError, TypeError) as e:
            run["error"] = str(e)
        record(run)
        return run

    def run_hf(m, dt, rnd):
        args = {"model": model_dirs[m], "prompts": prompts, "dtype": dt, "gen": G, "samples": 2, "seed": a.seed,
                "threads": a.threads}
        load = os.getloadavg()[0]
        code, out, err, wall, rss = run_child(worker_cmd("hf", args), env)
        run = {"model": m, "dtype": dt, "tool": "hf", "round": rnd, "wall": wall, "peak_rss": rss,
               "load_before": load}
        try:
            if code != 0:
                raise ValueError(f"exit {code}: {err.strip()[-800:]}")
            j = last_json(out)
            run.update(j)
            run["seconds"] = j["seconds_generate"] + j["seconds_forward"]
            versions.update({k: j[k] for k in ("torch", "transformers")})
        except (ValueError, KeyError) as e:
            run["error"] = str(e)
        record(run)
        return run

    for m in models:
        log(f"{m}: {MODELS[m]['title']}, {layers_of[m]} layers, {ariths[m].params_total / 1e6:.1f}M parameters")
        for rnd in range(a.repeats):
            for dt in dtypes:
                order = kernels if rnd % 2 == 0 else kernels[::-1]  # balance drift over rounds
                hf_done = False
                for k in order:
                    if rc_b:  # the two binaries side by side, their order alternating by round
                        pair = [(None, None), (rc_b, k + "@" + a.label_b)]
                        for binary, label in (pair if rnd % 2 == 0 else pair[::-1]):
                            r_a = run_rc(m, dt, k, rnd, binary, label)
                    else:
                        r_a = run_rc(m, dt, k, rnd)
                    if hf_runs == "paired" or (hf_runs == "once" and not hf_done):
                        r_b = run_hf(m, dt, rnd)
                        hf_done = True
                    else:
                        r_b = None
                    r_a["paired_hf"] = len(runs) - 1 if r_b is not None else None
                if hf_runs != "none" and not kernels:
                    run_hf(m, dt, rnd)

    load_after = os.getloadavg()
    total_s = time.time() - t_start

    # ---- ratios: each ratiocheck run against its HF run (paired), else the round's HF run of its dtype
    def hf_for(i, r):
        if r.get("paired_hf") is not None:
            return runs[r["paired_hf"]]
        for x in runs:
            if x["tool"] == "hf" and x["model"] == r["model"] and x["dtype"] == r["dtype"] and x["round"] == r["round"]:
                return x
        return None

    for i, r in enumerate(runs):
        h = hf_for(i, r) if r["tool"] != "hf" else None
        r["vs_hf"] = None
        if h is not None and not h.get("error") and not r.get("error"):
            r["vs_hf"] = {"generate": r["seconds_generate"] / h["seconds_generate"],
                          "forward": r["seconds_forward"] / h["seconds_forward"],
                          "job": r["metrics"]["job_s"] / h["metrics"]["job_s"], "wall": r["wall"] / h["wall"]}

    # ---- summary rows (medians over rounds)
    rows = []
    for m in models:
        for dt in dtypes:
            for tool in tools_rc + (["hf"] if hf_runs != "none" else []):
                rs = [r for r in runs if r["model"] == m and r["dtype"] == dt and r["tool"] == tool]
                good = [r for r in rs if not r.get("error")]
                row = {"model": m, "dtype": dt, "tool": tool, "n": len(good), "failed": len(rs) - len(good)}
                for key in ("seconds_generate", "seconds_forward", "wall", "peak_rss"):
                    row[key] = med([r.get(key) for r in good])
                for key in ("job_s", "gen_tok_s", "fwd_tok_s", "gen_gflops", "gen_gbps", "gen_bound_pct",
                            "fwd_gflops", "fwd_ceil_pct", "rss_over_min", "gen_bound_best_pct", "gemm_s",
                            "job_over_gemm"):
                    row[key] = med([r["metrics"][key] for r in good])
                for key in ("generate", "forward", "job", "wall"):
                    row["x_" + key] = med([r["vs_hf"][key] for r in good if r.get("vs_hf")])
                row["ratio_mean"] = med([r.get("ratio_mean") for r in good])
                row["ratio_std"] = med([r.get("ratio_std") for r in good])
                rows.append(row)
    for row in rows:
        hf_row = next((h for h in rows if h["tool"] == "hf" and h["model"] == row["model"]
                       and h["dtype"] == row["dtype"]), None)
        row["goals"] = goals(row, hf_row) if row["tool"] != "hf" and row["n"] else None

    result = {"started": started, "seconds": total_s, "argv": sys.argv[1:], "machine": machine_info(),
              "load_before": load_before, "load_after": load_after, "ratiocheck": rc, "ratiocheck_b": rc_b,
              "ratiocheck_version": rc_version,
              "versions": versions, "settings": {"seqs": S, "prompts": S // 2, "samples": 2, "prompt_len": P,
                                                 "gen": G, "batch": B, "threads": a.threads, "repeats": a.repeats,
                                                 "hf_runs": hf_runs, "seed": a.seed, "quick": q,
                                                 "layers": layers_of},
              "ceilings": ceil_json, "ceilings_build": cc_cmd,
              "models": {m: {"params": ariths[m].params_total, "gemm_params_body": ariths[m].body,
                             "gemm_params_head": ariths[m].head, "gen_gflop": ariths[m].gen_flops() / 1e9,
                             "fwd_gflop": ariths[m].fwd_flops() / 1e9,
                             "sgemm_forward_gflops": ceils[m].forward(),
                             "sgemm_ladder": {M: ceils[m].model_at(M) for M in ladders[m]},
                             "torch_bf16_forward_gflops": ceils_torch[m].forward() if ceils_torch else None,
                             "torch_bf16_ladder": {M: ceils_torch[m].model_at(M) for M in ladders[m]}
                             if ceils_torch else None,
                             "gemm_floor": {dt: floors[(m, dt)] for dt in dtypes}} for m in models},
              "torch_gemm": torch_gemm,
              "runs": runs, "summary": rows}
    with open(json_path, "w") as f:
        json.dump(result, f, indent=1)
        f.write("\n")

    md = markdown(result, models, dtypes, ariths, ceils, ceils_torch, ladders, bw, doc)
    if doc:
        os.makedirs(os.path.dirname(os.path.abspath(doc)), exist_ok=True)
        with open(doc, "w") as f:
            f.write(md)

    # ---- the short table, last
    log("")
    log(f"load average before {load_before[0]:.2f} {load_before[1]:.2f} {load_before[2]:.2f}, after "
        f"{load_after[0]:.2f} {load_after[1]:.2f} {load_after[2]:.2f}; {total_s:.0f} s in all; "
        f"JSON {json_path}" + (f"; Markdown {doc}" if doc else ""))
    log(f"ceilings: triad {bw:.1f} GB/s; sgemm re-score " +
        ", ".join(f"{m} {ceils[m].forward():.1f}" for m in models) + " GFLOP/s")
    if ceils_torch:
        log("          torch bf16 matmul re-score " +
            ", ".join(f"{m} {ceils_torch[m].forward():.1f}" for m in models) + " GFLOP/s")
    hdr = (f"{'model':10} {'dtype':5} {'tool':9} {'gen s':>8} {'fwd s':>8} {'job s':>8} {'gen %bnd':>8} "
           f"{'fwd %sg':>7} {'RSS GiB':>7} {'RSS/min':>7} {'x HF gen':>8} {'fwd':>6} {'job':>6} {'x GEMM':>6}  goals")
    log(hdr)
    log("-" * len(hdr))
    for r in rows:
        if r["n"] == 0:
            log(f"{r['model']:10} {r['dtype']:5} {r['tool']:9} failed")
            continue
        gl = r.get("goals")
        log(f"{r['model']:10} {r['dtype']:5} {r['tool']:9} {fmt(r['seconds_generate'], '.2f'):>8} "
            f"{fmt(r['seconds_forward'], '.2f'):>8} {fmt(r['job_s'], '.2f'):>8} {fmt(r['gen_bound_pct']):>8} "
            f"{fmt(r['fwd_ceil_pct']):>7} {fmt(r['peak_rss'] and r['peak_rss'] / 2**30, '.2f'):>7} "
            f"{fmt(r['rss_over_min'], '.2f'):>7} {fmt(r['x_generate'], '.2f'):>8} {fmt(r['x_forward'], '.2f'):>6} "
            f"{fmt(r['x_job'], '.2f'):>6} {fmt(r['job_over_gemm'], '.2f'):>6}  "
            + (" ".join(f"{k} {met_text(g['met'])}" for k, g in gl.items()) if gl else ""))
    if any(r.get("error") for r in runs):
        sys.exit(1)


def markdown(res, models, dtypes, ariths, ceils, ceils_torch, ladders, bw, doc):
    s, c, mi = res["settings"], res["ceilings"], res["machine"]
    lb, la = res["load_before"], res["load_after"]
    out = []
    w = out.append
    w("# ratiocheck speed and memory against this machine's limits and HF transformers")
    w("")
    in_docs = bool(doc) and os.path.dirname(os.path.abspath(doc)) == os.path.join(ROOT, "docs")
    readme = "[tools/bench/README.md](../tools/bench/README.md)" if in_docs else "tools/bench/README.md"
    w(f"Generated by `python3 tools/bench/run_bench.py {shlex.join(res['argv'])}` on {res['started']} "
      f"({res['seconds'] / 60:.0f} minutes; do not edit by hand); {readme} explains every column.")
    w("")
    w(f"Machine: {mi['cpu']}, {mi['cpus']} CPUs, {fmt(mi['mem_bytes'] and mi['mem_bytes'] / 2**30)} GiB, Linux "
      f"{mi['kernel']}; {s['threads']} threads for every tool. **Load average** (1/5/15 min) before "
      f"{lb[0]:.2f} / {lb[1]:.2f} / {lb[2]:.2f}, after {la[0]:.2f} / {la[1]:.2f} / {la[2]:.2f}: on a shared "
      "machine read the times as ratios between runs made side by side.")
    w("")
    w(f"{res['ratiocheck_version']}; HF: torch {res['versions'].get('torch', '?')}, transformers "
      f"{res['versions'].get('transformers', '?')}, python {mi['python']}; {c['openblas_config']}.")
    w("")
    w(f"Job: {s['seqs']} sequences ({s['prompts']} prompts of {s['prompt_len']} random token ids x 2 samples), "
      f"{s['gen']} generated tokens each (`--len {s['gen']}`), sampled at temperature 1, decoded {s['batch']} at a "
      f"time, then one re-score over prompt + {s['gen']} tokens for all sequences. HF does the same job the seed's "
      "way: `generate(do_sample=True, output_scores=True)` with the KV cache, then one `model(...)` forward, "
      f"log-probs from both. Runs interleaved ratiocheck, HF, ratiocheck, HF ({s['hf_runs']}), {s['repeats']} "
      "round(s); the table gives medians over rounds.")
    w("")
    w("## Ceilings (measured in this run)")
    w("")
    w(f"Memory bandwidth: STREAM triad {c['triad']['gbps']:.1f} GB/s (median of 5; best "
      f"{c['triad']['gbps_best']:.1f}), read-only {c['read']['gbps']:.1f} GB/s, {c['triad']['mib_per_array']} MiB "
      "arrays.")
    w("")
    tg = res.get("torch_gemm") or {}
    if ceils_torch:
        impls = sorted({i for g in tg["gemm"] for i in g["onednn"]})
        no_dnn = sorted({g["M"] for g in tg["gemm"] if not g["onednn"]})
        w("sgemm through the same OpenBLAS, and torch's bf16 matmul (`torch.mm(x, w.t())` on bf16 tensors, fp32 "
          f"accumulation, bf16 output; torch {tg['torch']}, CPU capability {tg['cpu_capability']}, {tg['threads']} "
          f"threads, in a Python worker as HF runs; oneDNN implementation: {', '.join(impls) or 'none'}"
          + (f"; not through oneDNN at M = {', '.join(map(str, no_dnn))}" if no_dnn and impls else "")
          + "), both `Y = X W^T` and the median call, weighted over each model's GEMM shapes (GFLOP/s at M rows):")
    else:
        why = f" (torch's bf16 matmul failed: {tg['error'][:200]})" if tg.get("error") else ""
        w("sgemm through the same OpenBLAS (`Y = X W^T`, median call), weighted over each model's GEMM shapes "
          f"(GFLOP/s at M rows){why}:")
    w("")
    allM = sorted({M for m in models for M in ladders[m]})
    w("| model | GEMM | re-score | " + " | ".join(f"M={M}" for M in allM) + " |")
    w("|---|---|---:|" + "---:|" * len(allM))
    for m in models:
        for name, cm in (("sgemm", ceils[m]), ("torch bf16", ceils_torch.get(m))):
            if cm is None:
                continue
            cells = [fmt(cm.model_at(M)) if M in ladders[m] else "" for M in allM]
            w(f"| {m} | {name} | {cm.forward():.1f} | " + " | ".join(cells) + " |")
    w("")
    w("**GEMM-FLOP time**: the job's linear-layer GEMM FLOPs, each shape at the best rate measured above for "
      "it (fp32 and fp16: sgemm; bf16: the faster of sgemm and torch's bf16 matmul), attention not counted:")
    w("")
    w("| model | dtype | generation GFLOP | s | best rate | re-score GFLOP | s | best rate | job s |")
    w("|---|---|---:|---:|---|---:|---:|---|---:|")
    for m in models:
        for dt in dtypes:
            fl = res["models"][m]["gemm_floor"][dt]
            if fl is None:
                continue
            w(f"| {m} | {dt} | {fl['gen']['gflop']:.1f} | {fl['gen']['seconds']:.2f} | "
              f"{best_share_text(fl['gen']['best_share'])} ({fl['gen']['gflops']:.1f} GFLOP/s) | "
              f"{fl['fwd']['gflop']:.1f} | {fl['fwd']['seconds']:.2f} | "
              f"{best_share_text(fl['fwd']['best_share'])} ({fl['fwd']['gflops']:.1f} GFLOP/s) | {fl['seconds']:.2f} |")
    w("")
    w("## Results")
    w("")
    for m in models:
        ar = ariths[m]
        sp = MODELS[m]
        w(f"**{m}**: {sp['title']}, hidden {sp['hidden']}, {ar.L} layers, {sp['heads']} heads "
          f"({sp['kv_heads']} KV), vocab {sp['vocab']}, {ar.params_total / 1e6:.1f}M parameters (GEMM weights "
          f"{(ar.body + ar.head) / 1e6:.1f}M); generation {ar.gen_flops() / 1e9:.1f} GFLOP, re-score "
          f"{ar.fwd_flops() / 1e9:.1f} GFLOP.")
        w("")
    w("| model | dtype | tool | gen s | gen tok/s | gen GFLOP/s | gen GB/s | gen % of bound | fwd s | fwd tok/s | "
      "fwd GFLOP/s | fwd % of sgemm | job s | peak RSS GiB | RSS / (W+KV) | ratiocheck/HF gen | fwd | job |")
    w("|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in res["summary"]:
        if r["n"] == 0:
            w(f"| {r['model']} | {r['dtype']} | {r['tool']} | failed |" + " |" * 14)
            continue
        w(f"| {r['model']} | {r['dtype']} | {r['tool']} | {fmt(r['seconds_generate'], '.2f')} | "
          f"{fmt(r['gen_tok_s'], '.0f')} | {fmt(r['gen_gflops'])} | {fmt(r['gen_gbps'], '.2f')} | "
          f"{fmt(r['gen_bound_pct'])} | {fmt(r['seconds_forward'], '.2f')} | {fmt(r['fwd_tok_s'], '.0f')} | "
          f"{fmt(r['fwd_gflops'])} | {fmt(r['fwd_ceil_pct'])} | {fmt(r['job_s'], '.2f')} | "
          f"{fmt(r['peak_rss'] and r['peak_rss'] / 2**30, '.2f')} | {fmt(r['rss_over_min'], '.2f')} | "
          f"{fmt(r['x_generate'], '.2f', '')} | {fmt(r['x_forward'], '.2f', '')} | {fmt(r['x_job'], '.2f', '')} |")
    w("")
    w("## Goals")
    w("")
    w(f"Per ratiocheck row: HF's job time over ratiocheck's >= 2x, >= 3x where the FLOP limit (HF's job time over "
      f"the GEMM-FLOP time) is >= 3; the job <= {GOAL_JOB_OVER_GEMM}x its GEMM-FLOP time; generation >= "
      f"{GOAL_DECODE_PCT:.0f}% of its bound (gen % of bound; beside it the same bound with the compute part at the "
      f"best rate); peak RSS <= {GOAL_RSS}x (W+KV).")
    w("")
    w("| model | dtype | tool | HF / ratiocheck job | FLOP limit | target | met | job s | GEMM-FLOP s | "
      "job / GEMM-FLOP | met | gen % of bound (best rate) | met | RSS / (W+KV) | met |")
    w("|---|---|---|---:|---:|---:|---|---:|---:|---:|---|---:|---|---:|---|")
    for r in res["summary"]:
        if r["n"] == 0:
            continue
        g = r.get("goals")
        if g is None:  # HF: its job against the GEMM-FLOP time only
            w(f"| {r['model']} | {r['dtype']} | {r['tool']} | | | | | {fmt(r['job_s'], '.2f')} | "
              f"{fmt(r['gemm_s'], '.2f')} | {fmt(r['job_over_gemm'], '.2f')} | | {fmt(r['gen_bound_pct'])} "
              f"({fmt(r['gen_bound_best_pct'])}) | | {fmt(r['rss_over_min'], '.2f')} | |")
            continue
        w(f"| {r['model']} | {r['dtype']} | {r['tool']} | {fmt(g['hf']['value'], '.2f')} | "
          f"{fmt(g['hf']['flop_limit'], '.2f')} | {g['hf']['target']:.0f} | {met_text(g['hf']['met'])} | "
          f"{fmt(r['job_s'], '.2f')} | {fmt(r['gemm_s'], '.2f')} | {fmt(r['job_over_gemm'], '.2f')} | "
          f"{met_text(g['gemm']['met'])} | {fmt(r['gen_bound_pct'])} ({fmt(r['gen_bound_best_pct'])}) | "
          f"{met_text(g['decode']['met'])} | {fmt(r['rss_over_min'], '.2f')} | {met_text(g['rss']['met'])} |")
    w("")
    w("## Every run, in order")
    w("")
    w("| # | model | dtype | tool | round | load before | gen s | fwd s | wall s | peak RSS GiB | ratio mean | "
      "ratio std |")
    w("|---:|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for i, r in enumerate(res["runs"]):
        if r.get("error"):
            w(f"| {i + 1} | {r['model']} | {r['dtype']} | {r['tool']} | {r['round'] + 1} | {r['load_before']:.2f} | "
              f"failed: {r['error'][:120].replace('|', '/')} | | | | | |")
            continue
        w(f"| {i + 1} | {r['model']} | {r['dtype']} | {r['tool']} | {r['round'] + 1} | {r['load_before']:.2f} | "
          f"{r['seconds_generate']:.2f} | {r['seconds_forward']:.2f} | {r['wall']:.1f} | "
          f"{r['peak_rss'] / 2**30:.2f} | {fmt(r.get('ratio_mean'), '.6f')} | {fmt(r.get('ratio_std'), '.2e')} |")
    w("")
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    main()
