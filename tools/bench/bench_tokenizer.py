#!/usr/bin/env python3
"""Tokenizer encode speed: ratiocheck's C tokenizer next to HF `tokenizers`,
on the same ~10 MB text, in one run. A benchmark, not a test.

Needs: tokenizers (pip install -r tools/fixtures/requirements.txt),
a built ratiocheck (build/src/ratiocheck), and the KJV corpus
(bash tools/fixtures/get_corpus.sh, or any text file given with --text).

Usage: python3 tools/bench/bench_tokenizer.py [--model data/models/pythia-rc-tiny] [--text FILE] [--mb 10]
"""
import argparse
import os
import subprocess
import sys
import tempfile
import time

from tokenizers import Tokenizer


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="data/models/pythia-rc-tiny")
    ap.add_argument("--text", default="/tmp/ratiocheck-train/kjv.txt")
    ap.add_argument("--mb", type=float, default=10.0)
    ap.add_argument("--ratiocheck", default="build/src/ratiocheck")
    a = ap.parse_args()
    if not os.path.exists(a.text):
        sys.exit(f"{a.text}: no such file (bash tools/fixtures/get_corpus.sh makes the KJV text)")
    src = open(a.text, encoding="utf-8").read()
    n = int(a.mb * 1e6)
    text = (src * (n // len(src) + 1))[:n]
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False, encoding="utf-8") as f:
        f.write(text)
        path = f.name
    try:
        nbytes = len(text.encode("utf-8"))
        out = subprocess.run([a.ratiocheck, "tokenize", "--model", a.model, "--file", path],
                             check=True, capture_output=True, text=True).stdout.strip()
        print("ratiocheck (C, 1 thread):   ", out.split(": ", 1)[1])
        tok = Tokenizer.from_file(os.path.join(a.model, "tokenizer.json"))
        t0 = time.perf_counter()
        ids = tok.encode(text).ids
        dt = time.perf_counter() - t0
        print(f"HF tokenizers encode():      {nbytes} bytes, {len(ids)} tokens, {dt:.3f} s, {nbytes / 1e6 / dt:.2f} MB/s")
        lines = text.split("\n")
        t0 = time.perf_counter()
        tok.encode_batch(lines)
        dt = time.perf_counter() - t0
        print(f"HF tokenizers encode_batch(): per line, all cores, {nbytes / 1e6 / dt:.2f} MB/s")
        c_tokens = int(out.split(" bytes, ")[1].split(" tokens")[0])
        print("same token count:", c_tokens == len(ids))
    finally:
        os.unlink(path)


if __name__ == "__main__":
    main()
