#!/usr/bin/env python3
"""Build a pythia-160m-shaped GPT-NeoX model for the GPU seed comparison.

Purpose
    ratiocheck's CUDA backend is checked against Hugging Face transformers on the same
    GPU and the same weights (tools/gpu/hf_seed.py).  The seed report
    (transformers #31267) used pythia-160m, which cannot be downloaded on the GPU
    machine, so this script builds a model of the same shape with transformers'
    own GPTNeoXConfig / GPTNeoXForCausalLM, with the tokenizer of the bundled model
    data/models/pythia-rc-tiny, and (optionally) trains it for a fixed number of
    seconds on the King James Bible so that its next-token distributions are peaked
    like a real LM's rather than near uniform.

Usage
    python3 tools/gpu/make_seed_model.py OUT_DIR [--device cuda|cpu] [--train-seconds S]
        [--corpus FILE_OR_DIR] [--seed N] [--small] [--batch B] [--lr LR] [--max-steps N]

Inputs
    data/models/pythia-rc-tiny/{tokenizer.json, tokenizer_config.json, config.json}
        the tokenizer (4000 tokens, <|endoftext|> = id 0 = bos = eos) and bos/eos ids.
    --corpus: the KJV text, any of
        - a plain text file: the output of `bible -l0 Genesis1:1-Revelation22:21`
          (tools/fixtures/get_corpus.sh; "Book N" heading lines, "  N verse" lines), or any
          other UTF-8 text (then split into documents at blank lines);
        - Debian's bible-kjv-text data file bible.data (it is *not* plain text: it is
          the Bible Retrieval System's windowed LZW format; decoded here in pure
          Python, ~1 s), or the .deb itself (bible-kjv-text_4.38_all.deb), or
        - a directory (e.g. the extracted .deb) searched for kjv*.txt / bible*.txt,
          then any *.txt, then usr/lib/bible.data, then *.deb.
        - any of these compressed with xz (FILE.xz), such as the excerpt in the
          repository, tools/gpu/kjv-excerpt.txt.xz (the default of tools/gpu/
          gpu_check.sh; see --write-corpus).
        The package bible-kjv-text contains no *.txt file: its text is
        ./usr/lib/bible.data (1.7 MB, LZW windows); ./usr/share/doc holds only the
        changelog and copyright.

Corpus excerpt
    python3 tools/gpu/make_seed_model.py --corpus bible-kjv-text_4.38_all.deb \
        --write-corpus tools/gpu/kjv-excerpt.txt.xz --corpus-bytes 1000000
    writes the title line and the whole chapters that fit in the first --corpus-bytes
    bytes of the decoded text, xz-compressed, and stops (no model); the file's size and
    SHA-256, and the first and last chapter, go to FILE.json beside it.

Outputs (OUT_DIR)
    config.json, generation_config.json, model.safetensors (float32),
    tokenizer.json (copied verbatim), tokenizer_config.json (copied, model_max_length
    set to the model's context), special_tokens_map.json (if the bundled model has one),
    make_seed_model.json (arguments, versions, loss curve, final loss/perplexity,
    peakedness on held-out text).

Model (full size; --small in brackets)
    GPT-NeoX, hidden 768 [64], 12 [2] layers, 12 [2] heads (head_dim 64 [32]),
    intermediate 3072 [256], rope_parameters {partial_rotary_factor 0.25,
    rope_theta 10000} (the transformers-5 names of rotary_pct / rotary_emb_base),
    max_position_embeddings 2048, layer_norm_eps 1e-5, parallel residual, exact GELU,
    untied embed_in / embed_out, vocab 50304 like pythia [4096], bos/eos from the
    bundled config.json.  162,322,944 parameters [624,384].  The tokenizer has 4000
    tokens; rows 4000..vocab-1 exist but no text maps to them (as in pythia, where
    the tokenizer has 50277 of its 50304 rows).

Initialisation and training
    transformers' own init (normal(0, 0.02) weights, zero biases, unit LayerNorms)
    under torch.manual_seed(--seed), always on the CPU, so the initial weights do not
    depend on --device.  With --train-seconds S > 0 and a corpus: AdamW (betas 0.9/0.95,
    weight decay 0.1 except biases/norms/embed_in, grad-norm clip 1.0), linear warmup
    then cosine decay to 10% over the time budget (or over --max-steps), batches of
    random 256-token windows (+1 target) from the training chapters (every 20th
    chapter is held out), bf16 autocast on cuda, fp32 on cpu.  Loss is printed every
    few seconds; at the end the loss / perplexity and the mean top-1 probability /
    entropy of the next-token distribution on held-out text (--eval-windows random
    256-token windows of the held-out chapters, fp32).

    With no training the model would be nearly uniform (logit std ~0.55 over 50304
    tokens: entropy ~10.7 of the maximal 10.83 nats).  Instead embed_out is scaled
    by one factor so that the logits over the vocabulary have standard deviation
    --logit-std (default 4.0) at the last position of the bundled prompts; with
    Gaussian logits of std s over V tokens the entropy is about ln V - s^2/2
    (2.8 nats for s = 4), i.e. distributions about as peaked as a real LM's, though
    not text-like.  The factor and the resulting entropy / top-1 probability are
    printed and stored.  Pass --logit-std 0 to keep the plain init.

Determinism
    The init, the data order and the sampled batches are fixed by --seed.  A
    time-limited run (--train-seconds) takes as many steps as fit in the time, so it
    is not step-for-step reproducible across machines; --max-steps N (with a large
    enough --train-seconds) fixes the step count and the LR schedule, and on one
    machine and software stack then gives the same weights up to GPU
    nondeterminism (atomics in some backward kernels).

Versions
    written for: Python 3.12, torch 2.11 (cu130), transformers 5.17, tokenizers 0.23,
    safetensors 0.8, numpy (the GPU image); tested on the CPU with Python 3.11.7,
    torch 2.15.0, transformers 5.24.0, tokenizers 0.23.3, safetensors 0.8.0,
    numpy 2.4.6.  See tools/gpu/requirements.txt.
"""

import argparse
import hashlib
import inspect
import io
import json
import lzma
import math
import os
import re
import shutil
import struct
import sys
import tarfile
import time

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402
import tokenizers  # noqa: E402
import transformers  # noqa: E402
from tokenizers import Tokenizer  # noqa: E402
from transformers import GPTNeoXConfig, GPTNeoXForCausalLM  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUNDLED = os.path.join(REPO, "data", "models", "pythia-rc-tiny")
CTX = 256  # training sequence length


def log(*a):
    print(*a, flush=True)


# --------------------------------------------------------------------------- corpus
#
# Debian's bible-kjv-text ships the text as usr/lib/bible.data in the Bible Retrieval
# System format (bible-kjv's tsl.h / tsl.c / compresslib.c):
#   "EC" "02", an 80-byte description, big-endian int32 window size and window count,
#   (count + 1) big-endian int32 file offsets of the windows, then the windows, each an
#   independent unix-compress (LZW, 9..16 bit codes, block mode) stream without header
#   that decompresses to one window-size piece of the text (the last one shorter).
# The text is one line per verse, "Ge1:1 In the beginning ...", after a title line.


def _lzw_window(buf, maxbits=16):
    """Decompress one window: a port of compresslib.c cmp_decompress()/getcode()."""
    INIT_BITS, FIRST, CLEAR = 9, 257, 256
    maxmaxcode = 1 << maxbits
    prefix = [0] * maxmaxcode
    suffix = bytearray(maxmaxcode)
    suffix[:256] = bytes(range(256))
    st = {"n_bits": INIT_BITS, "maxcode": (1 << INIT_BITS) - 1, "free_ent": FIRST, "clear": False}
    out = bytearray()

    def codes():
        pos, chunk, offset, size = 0, 0, 0, 0
        while True:
            # compress reads codes n_bits bytes (8 codes) at a time; when the code width
            # changes, the rest of the current chunk is skipped.
            if st["clear"] or offset >= size or st["free_ent"] > st["maxcode"]:
                if st["free_ent"] > st["maxcode"]:
                    st["n_bits"] += 1
                    st["maxcode"] = maxmaxcode if st["n_bits"] == maxbits else (1 << st["n_bits"]) - 1
                if st["clear"]:
                    st["n_bits"], st["maxcode"], st["clear"] = INIT_BITS, (1 << INIT_BITS) - 1, False
                n = min(st["n_bits"], len(buf) - pos)
                if n <= 0:
                    return
                chunk = int.from_bytes(buf[pos : pos + n], "little")
                pos += n
                offset, size = 0, (n << 3) - (st["n_bits"] - 1)
            yield (chunk >> offset) & ((1 << st["n_bits"]) - 1)
            offset += st["n_bits"]

    g = codes()
    oldcode = next(g, -1)
    if oldcode < 0:
        return bytes(out)
    finchar = oldcode
    out.append(finchar)
    for code in g:
        if code == CLEAR:
            prefix[:256] = [0] * 256
            st["clear"], st["free_ent"] = True, FIRST - 1
            code = next(g, -1)
            if code < 0:
                break
        incode = code
        stack = bytearray()
        if code >= st["free_ent"]:  # the KwKwK case
            stack.append(finchar)
            code = oldcode
        while code >= 256:
            stack.append(suffix[code])
            code = prefix[code]
        finchar = suffix[code]
        stack.append(finchar)
        stack.reverse()
        out += stack
        if st["free_ent"] < maxmaxcode:
            prefix[st["free_ent"]] = oldcode
            suffix[st["free_ent"]] = finchar
            st["free_ent"] += 1
        oldcode = incode
    return bytes(out)


def decode_bible_data(raw):
    """bible.data bytes -> the decompressed text (str)."""
    if raw[:4] != b"EC02":
        raise ValueError("not a Bible Retrieval System data file (magic EC02)")
    wsize, wnum = struct.unpack(">ii", raw[84:92])
    table = struct.unpack(">%di" % (wnum + 1), raw[92 : 92 + 4 * (wnum + 1)])
    parts = []
    for i in range(wnum):
        w = _lzw_window(raw[table[i] : table[i + 1]])
        if len(w) != wsize and i != wnum - 1:
            raise ValueError(f"bible.data window {i}: {len(w)} bytes, expected {wsize}")
        parts.append(w)
    return b"".join(parts).decode("ascii")


def _deb_member(path, want):
    """Read the file `want` (e.g. 'usr/lib/bible.data') out of a .deb (ar + data.tar.xz|gz)."""
    with open(path, "rb") as f:
        data = f.read()
    if data[:8] != b"!<arch>\n":
        raise ValueError(f"{path}: not a .deb (ar) archive")
    pos = 8
    while pos + 60 <= len(data):
        name = data[pos : pos + 16].decode().strip().rstrip("/")
        size = int(data[pos + 48 : pos + 58].decode().strip())
        body = data[pos + 60 : pos + 60 + size]
        pos += 60 + size + (size & 1)
        if name.startswith("data.tar"):
            if name.endswith(".xz"):
                body = lzma.decompress(body)
            elif name.endswith(".zst"):
                raise ValueError(f"{path}: zstd-compressed .deb, extract it with dpkg-deb -x first")
            mode = "r:gz" if name.endswith(".gz") else "r:"
            with tarfile.open(fileobj=io.BytesIO(body), mode=mode) as tf:
                for m in tf.getmembers():
                    if m.name.lstrip("./") == want:
                        return tf.extractfile(m).read()
    raise ValueError(f"{path}: no {want} inside")


def find_corpus_file(path):
    """A file or directory given by --corpus -> the path of the file to read."""
    if os.path.isfile(path):
        return path
    if not os.path.isdir(path):
        raise FileNotFoundError(path)
    found = []
    for root, _, files in os.walk(path):
        for f in files:
            found.append(os.path.join(root, f))
    found.sort()
    txt = [f for f in found if f.endswith(".txt")]
    for pick in (
        [f for f in txt if re.search(r"kjv|bible", os.path.basename(f), re.I)],
        txt,
        [f for f in found if os.path.basename(f) == "bible.data"],
        [f for f in found if f.endswith(".deb") and "bible-kjv-text" in os.path.basename(f)],
    ):
        if pick:
            return max(pick, key=os.path.getsize)
    raise FileNotFoundError(f"{path}: no *.txt, bible.data or bible-kjv-text .deb inside")


def read_corpus_text(path):
    """-> (text, file read, kind, raw bytes of that file after any xz layer)."""
    f = find_corpus_file(path)
    with open(f, "rb") as fh:
        raw = fh.read()
    kind = "text"
    if raw[:6] == b"\xfd7zXZ\x00":
        raw = lzma.decompress(raw)
        kind = "xz:text"
    if raw[:8] == b"!<arch>\n":
        raw = _deb_member(f, "usr/lib/bible.data")
        kind = "deb"
    if raw[:4] == b"EC02":
        text = decode_bible_data(raw)
        kind = {"text": "bible.data", "xz:text": "xz:bible.data"}.get(kind, "deb:bible.data")
    else:
        text = raw.decode("utf-8")
    return text, f, kind, raw


def load_corpus(path):
    """-> (list of documents (str), description dict).  Chapters for the KJV, else paragraphs."""
    text, f, kind, raw = read_corpus_text(path)
    desc = {"path": os.path.abspath(f), "kind": kind, "bytes": len(raw),
            "sha256": hashlib.sha256(raw).hexdigest()}

    lines = text.split("\n")
    ref_re = re.compile(r"^(\d?[A-Za-z]+)(\d+):(\d+) (.*)$")  # bible.data: "1Sa3:4 text"
    verse_re = re.compile(r"^  (\d+) (.+)$")  # `bible -l0` output: "Genesis 1" + "  1 text"
    docs = []
    if sum(bool(ref_re.match(ln)) for ln in lines[:200]) > 100:
        key = None
        for ln in lines:
            m = ref_re.match(ln)
            if not m:
                continue  # the title line
            if (m.group(1), m.group(2)) != key:
                key = (m.group(1), m.group(2))
                docs.append([])
            docs[-1].append(m.group(4).strip())
        desc["format"] = "bible.data verses (book+chapter refs), one document per chapter"
    elif sum(bool(verse_re.match(ln)) for ln in lines[:200]) > 100:
        for ln in lines:
            if not ln.strip():
                continue
            m = verse_re.match(ln)
            if m:
                docs[-1].append(m.group(2).strip())
            else:
                docs.append([])  # a chapter heading
        desc["format"] = "`bible -l0` output, one document per chapter"
    else:
        for para in re.split(r"\n\s*\n", text):
            if para.strip():
                docs.append([para.strip()])
        desc["format"] = "plain text, one document per blank-line-separated paragraph"
    # One verse per line, no verse numbers or headings: as tools/fixtures/train_default_model.py.
    docs = ["\n".join(d) for d in docs if d]
    desc["documents"] = len(docs)
    desc["chars"] = sum(map(len, docs))
    return docs, desc


REF_RE = re.compile(r"^(\d?[A-Za-z]+)(\d+):(\d+) ")


def write_corpus(src, out, max_bytes):
    """The title line and the whole chapters within the first max_bytes bytes of the decoded
    KJV text (bible.data's "Ge1:1 text" lines), xz-compressed to out; out + ".json" describes it."""
    text, f, kind, _ = read_corpus_text(src)
    lines = text.split("\n")
    keep, size, chapter, first, last = [], 0, None, None, None
    for i, ln in enumerate(lines):
        m = REF_RE.match(ln)
        if m and (m.group(1), m.group(2)) != chapter:  # a chapter starts: does it fit whole?
            end = i + 1
            while end < len(lines) and (lambda r: r and (r.group(1), r.group(2)) == (m.group(1), m.group(2)))(
                    REF_RE.match(lines[end])):
                end += 1
            n = sum(len(x) + 1 for x in lines[i:end])
            if size + n > max_bytes:
                break
            chapter = (m.group(1), m.group(2))
            first = first or "%s%s" % chapter
            last = "%s%s" % chapter
            keep.extend(lines[i:end])
            size += n
        elif not m and chapter is None and ln.strip():
            keep.append(ln)  # the title line
            size += len(ln) + 1
    data = ("\n".join(keep) + "\n").encode("ascii")
    packed = lzma.compress(data, preset=9 | lzma.PRESET_EXTREME)
    with open(out, "wb") as fh:
        fh.write(packed)
    meta = {"source": os.path.basename(f), "source_kind": kind, "first_chapter": first, "last_chapter": last,
            "verses": sum(bool(REF_RE.match(x)) for x in keep), "text_bytes": len(data),
            "text_sha256": hashlib.sha256(data).hexdigest(), "xz_bytes": len(packed),
            "written_by": "python3 tools/gpu/make_seed_model.py --corpus %s --write-corpus %s --corpus-bytes %d"
                          % (os.path.basename(f), os.path.relpath(out, REPO), max_bytes)}
    with open(out + ".json", "w") as fh:
        json.dump(meta, fh, indent=1)
        fh.write("\n")
    log("wrote %s: %s" % (out, json.dumps(meta)))


# --------------------------------------------------------------------------- model


def make_config(small, vocab, bos, eos):
    h, layers, heads = (64, 2, 2) if small else (768, 12, 12)
    return GPTNeoXConfig(
        vocab_size=vocab,
        hidden_size=h,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        intermediate_size=4 * h,
        hidden_act="gelu",
        max_position_embeddings=2048,
        initializer_range=0.02,
        layer_norm_eps=1e-5,
        use_cache=True,
        bos_token_id=bos,
        eos_token_id=eos,
        tie_word_embeddings=False,
        use_parallel_residual=True,
        # transformers 5 spelling of rotary_pct=0.25, rotary_emb_base=10000
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25},
        attention_bias=True,
        attention_dropout=0.0,
        hidden_dropout=0.0,
    )


@torch.no_grad()
def next_token_stats(model, seqs, device, autocast):
    """Mean loss (if targets), top-1 probability and entropy over all positions of seqs.

    seqs: LongTensor [n, T+1] (inputs and shifted targets) -> dict."""
    model.eval()
    tot = {"loss": 0.0, "top1": 0.0, "entropy": 0.0, "n": 0}
    for i in range(0, len(seqs), 16):
        w = seqs[i : i + 16].to(device)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=autocast):
            logits = model(input_ids=w[:, :-1]).logits
        lp = torch.log_softmax(logits.float(), -1)
        tot["loss"] += -lp.gather(-1, w[:, 1:, None]).sum().item()
        tot["top1"] += lp.max(-1).values.exp().sum().item()
        tot["entropy"] += -(lp.exp() * lp).sum().item()
        tot["n"] += w[:, 1:].numel()
    model.train()
    n = max(1, tot["n"])
    return {"loss": tot["loss"] / n, "ppl": math.exp(min(50.0, tot["loss"] / n)),
            "top1_prob": tot["top1"] / n, "entropy": tot["entropy"] / n, "tokens": tot["n"]}


@torch.no_grad()
def last_position_stats(model, prompts, device):
    """Entropy / top-1 probability / logit std at the last position of each prompt (fp32)."""
    model.eval()
    ent, top1, lstd = [], [], []
    for ids in prompts:
        logits = model(input_ids=torch.tensor([ids], device=device)).logits[0, -1].float()
        lp = torch.log_softmax(logits, -1)
        ent.append(-(lp.exp() * lp).sum().item())
        top1.append(lp.max().exp().item())
        lstd.append(logits.std(unbiased=False).item())
    n = len(prompts)
    return {"entropy": sum(ent) / n, "top1_prob": sum(top1) / n, "logit_std": sum(lstd) / n}


def read_prompts(tok):
    with open(os.path.join(REPO, "data", "prompts", "default.txt"), encoding="utf-8") as f:
        return [tok.encode(ln).ids for ln in f.read().split("\n") if ln]


def windows(stream, ctx):
    n = (len(stream) - 1) // ctx
    return torch.stack([stream[i * ctx : i * ctx + ctx + 1] for i in range(n)])


def lr_factor(step, frac, warmup):
    """Linear warmup over `warmup` steps, then cosine from 1 to 0.1 over frac in [0, 1]."""
    if step < warmup:
        return (step + 1) / warmup
    return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, frac)))


def train(model, args, train_stream, val_wins, device, info):
    autocast = device.type == "cuda"
    decay = [p for n, p in model.named_parameters() if p.ndim >= 2 and "embed_in" not in n]
    no_decay = [p for n, p in model.named_parameters() if not (p.ndim >= 2 and "embed_in" not in n)]
    opt_kw = {"fused": True} if device.type == "cuda" else {}
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95), eps=1e-8, **opt_kw)
    gen = torch.Generator().manual_seed(args.seed + 1)  # batch positions, drawn on the CPU
    nmax = len(train_stream) - CTX - 1
    stream = train_stream.to(device)
    offs = torch.arange(CTX + 1, device=device)
    log(f"training: up to {args.train_seconds:g} s" + (f" / {args.max_steps} steps" if args.max_steps else "")
        + f", batch {args.batch} x {CTX} tokens, lr {args.lr:g}, warmup {args.warmup} steps, "
        f"{'bf16 autocast' if autocast else 'fp32'} on {device}")
    model.train()
    t0 = time.time()
    last_log, run_loss, run_n, step = t0, 0.0, 0, 0
    history = []
    while True:
        el = time.time() - t0
        if el >= args.train_seconds or (args.max_steps and step >= args.max_steps):
            break
        frac = step / args.max_steps if args.max_steps else el / args.train_seconds
        for g in opt.param_groups:
            g["lr"] = args.lr * lr_factor(step, frac, args.warmup)
        starts = torch.randint(0, nmax, (args.batch,), generator=gen).to(device)
        batch = stream[starts[:, None] + offs]  # [batch, CTX + 1] random windows
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=autocast):
            logits = model(input_ids=batch[:, :-1]).logits
        loss = torch.nn.functional.cross_entropy(logits.float().reshape(-1, logits.shape[-1]),
                                                 batch[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        run_loss += loss.item()  # synchronizes: keeps the time budget honest
        run_n += 1
        step += 1
        now = time.time()
        if now - last_log >= args.log_every or step == 1:
            history.append({"step": step, "seconds": round(now - t0, 2), "train_loss": run_loss / run_n,
                            "lr": opt.param_groups[0]["lr"]})
            log(f"  step {step:6d}  {now - t0:7.1f} s  train loss {run_loss / run_n:.4f}  "
                f"lr {opt.param_groups[0]['lr']:.2e}")
            run_loss, run_n, last_log = 0.0, 0, now
    secs = time.time() - t0
    if run_n:
        history.append({"step": step, "seconds": round(secs, 2), "train_loss": run_loss / run_n,
                        "lr": opt.param_groups[0]["lr"]})
    tokens = step * args.batch * CTX
    log(f"trained {step} steps in {secs:.1f} s ({tokens / max(secs, 1e-9):,.0f} tokens/s, "
        f"{tokens:,} tokens = {tokens / len(train_stream):.2f} epochs)")
    info["training"] = {"steps": step, "seconds": secs, "tokens": tokens, "batch": args.batch, "ctx": CTX,
                        "lr": args.lr, "warmup": args.warmup, "autocast_bf16": autocast, "history": history}
    del opt


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out_dir")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu", choices=["cuda", "cpu"])
    ap.add_argument("--train-seconds", type=float, default=0.0, help="training time budget [0: no training]")
    ap.add_argument("--max-steps", type=int, default=0, help="stop after N steps; the LR schedule uses N [time]")
    ap.add_argument("--corpus", help="KJV text file, bible.data, the bible-kjv-text .deb, or a folder with one")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--small", action="store_true", help="2 layers, hidden 64, vocab 4096 (CPU tests)")
    ap.add_argument("--vocab", type=int, help="vocab_size [50304; 4096 with --small]")
    ap.add_argument("--batch", type=int, help="sequences per step [64 on cuda, 8 on cpu]")
    ap.add_argument("--lr", type=float, help="peak learning rate [6e-4; 2e-3 with --small]")
    ap.add_argument("--warmup", type=int, default=30, help="linear warmup steps [30]")
    ap.add_argument("--log-every", type=float,
                    help="seconds between loss lines [train-seconds / 10, at least 0.5, at most 5]")
    ap.add_argument("--logit-std", type=float, default=4.0,
                    help="untrained model only: scale embed_out to this logit std (0: plain init) [4]")
    ap.add_argument("--eval-windows", type=int,
                    help="held-out 256-token windows for the final loss [64 on cuda, 8 on cpu]")
    ap.add_argument("--threads", type=int, help="torch CPU threads [torch default]")
    ap.add_argument("--write-corpus", metavar="FILE.xz",
                    help="write an excerpt of --corpus (whole chapters, --corpus-bytes) and stop; out_dir unused")
    ap.add_argument("--corpus-bytes", type=int, default=1000000, help="--write-corpus: text size bound [1000000]")
    args = ap.parse_args()
    if args.write_corpus:
        if not args.corpus:
            sys.exit("--write-corpus needs --corpus")
        write_corpus(args.corpus, args.write_corpus, args.corpus_bytes)
        return

    if args.device == "cuda" and not torch.cuda.is_available():
        sys.exit("--device cuda: no CUDA device visible to torch")
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    args.batch = args.batch or (64 if device.type == "cuda" else 8)
    args.lr = args.lr or (2e-3 if args.small else 6e-4)
    if args.log_every is None:
        args.log_every = min(5.0, max(0.5, args.train_seconds / 10))
    vocab = args.vocab or (4096 if args.small else 50304)
    t_start = time.time()
    versions = {"python": sys.version.split()[0], "torch": torch.__version__,
                "transformers": transformers.__version__, "tokenizers": tokenizers.__version__}
    log("versions: " + ", ".join(f"{k} {v}" for k, v in versions.items())
        + (f"; GPU {torch.cuda.get_device_name(0)}" if device.type == "cuda" else ""))

    tok_path = os.path.join(BUNDLED, "tokenizer.json")
    tok = Tokenizer.from_file(tok_path)
    with open(os.path.join(BUNDLED, "config.json")) as f:
        bcfg = json.load(f)
    bos, eos = bcfg.get("bos_token_id", 0), bcfg.get("eos_token_id", 0)
    if tok.get_vocab_size() > vocab:
        sys.exit(f"--vocab {vocab} is smaller than the tokenizer ({tok.get_vocab_size()})")
    info = {"args": vars(args), "versions": versions, "tokenizer": tok_path,
            "tokenizer_size": tok.get_vocab_size()}

    # ---- corpus
    train_stream = val_wins = None
    if args.corpus:
        docs, desc = load_corpus(args.corpus)
        info["corpus"] = desc
        val_idx = set(range(7, len(docs), 20)) if len(docs) >= 40 else {len(docs) - 1}

        def encode(ds):
            ids = []
            for d in ds:  # documents joined with <|endoftext|> (eos), as pythia packs them
                ids.extend(tok.encode(d).ids)
                ids.append(eos)
            return torch.tensor(ids, dtype=torch.long)

        t = time.time()
        train_stream = encode(d for i, d in enumerate(docs) if i not in val_idx)
        val_stream = encode(d for i, d in enumerate(docs) if i in val_idx)
        val_wins = windows(val_stream, CTX)
        n_eval = args.eval_windows if args.eval_windows is not None else (64 if device.type == "cuda" else 8)
        val_wins = val_wins[torch.randperm(len(val_wins), generator=torch.Generator().manual_seed(args.seed + 2))
                            [:n_eval]]
        log(f"corpus: {desc['path']} ({desc['kind']}, {desc['format']}): {desc['documents']} documents, "
            f"{desc['chars']:,} chars; train {len(train_stream):,} tokens, held out {len(val_stream):,} "
            f"({len(val_wins)} windows); tokenized in {time.time() - t:.1f} s")
        if len(train_stream) < 2 * CTX + 2:
            sys.exit("corpus too small")
    elif args.train_seconds > 0:
        sys.exit("--train-seconds needs --corpus")

    # ---- model: init on the CPU (device-independent), then move
    config = make_config(args.small, vocab, bos, eos)
    torch.manual_seed(args.seed)
    model = GPTNeoXForCausalLM(config).float()
    n_params = sum(p.numel() for p in model.parameters())
    log(f"model: {config.num_hidden_layers} layers, hidden {config.hidden_size}, {config.num_attention_heads} heads, "
        f"vocab {config.vocab_size}, {n_params:,} parameters")
    info["parameters"] = n_params
    model.to(device)
    prompts = read_prompts(tok)

    if args.train_seconds > 0:
        train(model, args, train_stream, val_wins, device, info)
    elif args.logit_std > 0:
        # Untrained: one scale factor on embed_out so the logits are spread like a real LM's.
        before = last_position_stats(model, prompts, device)
        scale = args.logit_std / before["logit_std"]
        with torch.no_grad():
            model.get_output_embeddings().weight.mul_(scale)
        log(f"no training: embed_out scaled by {scale:.3f} so the logit std at the last prompt position is "
            f"{args.logit_std:g} (was {before['logit_std']:.3f}; entropy {before['entropy']:.3f} nats, "
            f"top-1 prob {before['top1_prob']:.5f})")
        info["untrained_embed_out_scale"] = {"factor": scale, "target_logit_std": args.logit_std, "before": before}
    else:
        log("no training, plain init (near-uniform next-token distributions)")

    # ---- diagnostics (fp32)
    model.eval()
    info["last_prompt_position"] = last_position_stats(model, prompts, device)
    lp = info["last_prompt_position"]
    log(f"at the last position of the {len(prompts)} bundled prompts (fp32): entropy {lp['entropy']:.3f} nats "
        f"(uniform {math.log(vocab):.3f}), top-1 prob {lp['top1_prob']:.4f}, logit std {lp['logit_std']:.3f}")
    if val_wins is not None:
        ev = next_token_stats(model, val_wins, device, autocast=False)
        info["held_out"] = ev
        log(f"held-out text (fp32, {ev['tokens']:,} tokens): loss {ev['loss']:.4f} nats, perplexity {ev['ppl']:.2f}, "
            f"mean top-1 prob {ev['top1_prob']:.4f}, mean entropy {ev['entropy']:.3f} nats")

    # ---- save (float32)
    os.makedirs(args.out_dir, exist_ok=True)
    model = model.to("cpu").float()
    model.config.dtype = torch.float32
    kw = {}
    if "safe_serialization" in inspect.signature(model.save_pretrained).parameters:
        kw["safe_serialization"] = True  # transformers 4; transformers 5 always writes safetensors
    model.save_pretrained(args.out_dir, **kw)
    shutil.copyfile(tok_path, os.path.join(args.out_dir, "tokenizer.json"))
    tc = os.path.join(BUNDLED, "tokenizer_config.json")
    if os.path.exists(tc):
        with open(tc) as f:
            tcj = json.load(f)
        tcj["model_max_length"] = config.max_position_embeddings
        with open(os.path.join(args.out_dir, "tokenizer_config.json"), "w") as f:
            json.dump(tcj, f, indent=2)
            f.write("\n")
    stm = os.path.join(BUNDLED, "special_tokens_map.json")
    if os.path.exists(stm):
        shutil.copyfile(stm, os.path.join(args.out_dir, "special_tokens_map.json"))
    info["seconds"] = time.time() - t_start
    with open(os.path.join(args.out_dir, "make_seed_model.json"), "w") as f:
        json.dump(info, f, indent=1)
        f.write("\n")
    files = sorted(os.listdir(args.out_dir))
    for f in files:  # transformers 5 writes model.safetensors with mode 0600
        os.chmod(os.path.join(args.out_dir, f), 0o644)
    if "model.safetensors" not in files:
        sys.exit(f"save_pretrained wrote no model.safetensors: {files}")
    log(f"wrote {args.out_dir}: " + ", ".join(f"{f} ({os.path.getsize(os.path.join(args.out_dir, f)):,})"
                                              for f in files))
    log(f"total {info['seconds']:.1f} s")


if __name__ == "__main__":
    main()
