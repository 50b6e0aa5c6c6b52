#!/usr/bin/env python3
"""Generate data/fixtures/tokenizers/: reference tokenizations for src/formats/tokenizer.c.

Builds one small tokenizer per tokenizer.json family ratiocheck supports, with HF
``tokenizers`` (PyPI) trainers on a small public-domain corpus (the first ~300 KB of
the King James Bible, tools/get_corpus.sh, plus a few hundred lines of the hard
strings below so that unusual characters get merges), copies the default model's own
tokenizer, and encodes a corpus of hard strings with every one of them:

    pythia_default        data/models/pythia-rc-tiny's tokenizer (not trained here)
    gpt2_bytelevel        ByteLevel pre-tokenizer/decoder/post-processor, no normalizer
    neox_nfc              GPT-NeoX: NFC + ByteLevel, whitespace-run added tokens
    llama3_split          Split(Llama-3 regex) + ByteLevel(use_regex false), ignore_merges,
                          <|begin_of_text|> BOS through TemplateProcessing
    qwen2_split           NFC + Split(Qwen2 regex) + ByteLevel, <|im_start|> etc.
    llama2_sentencepiece  Prepend/Replace "\u2581" normaliser, byte_fallback BPE, <s> BOS
    mistral_metaspace     Metaspace(prepend_scheme first, split false), byte_fallback BPE
    legacy_merges         gpt2_bytelevel with its merges written as "a b" strings

Writes (under --out, default data/fixtures/tokenizers/):

    corpus.jsonl                  the hard strings, one JSON string per line
    <name>/tokenizer.json         (+ tokenizer_config.json, written by transformers)
    <name>/expected.jsonl         per string: {"text", "ids", "ids_special",
                                  "decoded", "roundtrip"}
    README.md                     versions, configurations, round-trip counts

The expected values come from ``tokenizers.Tokenizer.from_file(<name>/tokenizer.json)``:
``encode(s, add_special_tokens=False).ids``, ``encode(s, add_special_tokens=True).ids``,
``decode(ids, skip_special_tokens=False)``. As a cross-check the script asserts that
transformers' ``AutoTokenizer`` on the same folder gives the same ids.

Usage:
    pip install -r tools/requirements-tokenizer-fixtures.txt
    python3 tools/make_tokenizer_fixtures.py                 # rewrites data/fixtures/tokenizers/
    python3 tools/make_tokenizer_fixtures.py --check         # regenerate in a temp dir, compare

Deterministic: training runs single-threaded (RAYON_NUM_THREADS=1, set before
tokenizers is imported), every tokenizer is trained twice and the two serialisations
must be identical, and ``--check`` compares a full regeneration with the committed
files byte for byte. The corpus file is checked against its recorded SHA-256.
"""

import os

# Before tokenizers is imported: rayon reads these when its thread pool starts.
os.environ["RAYON_NUM_THREADS"] = "1"
os.environ["TOKENIZERS_PARALLELISM"] = "false"
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import argparse  # noqa: E402
import copy  # noqa: E402
import filecmp  # noqa: E402
import hashlib  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import shutil  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402

from byte_level import bytes_to_unicode  # noqa: E402  (tools/byte_level.py)

import tokenizers  # noqa: E402
import transformers  # noqa: E402
from tokenizers import (  # noqa: E402
    AddedToken,
    Regex,
    Tokenizer,
    decoders,
    models,
    normalizers,
    pre_tokenizers,
    processors,
    trainers,
)
from transformers import AutoTokenizer, PreTrainedTokenizerFast  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_OUT = os.path.join(REPO, "data", "fixtures", "tokenizers")
DEFAULT_MODEL_DIR = os.path.join(REPO, "data", "models", "pythia-rc-tiny")
DEFAULT_CORPUS = "/tmp/ratiocheck-train/kjv.txt"

# Output of `bible -l0 Genesis1:1-Revelation22:21` from Debian bible-kjv 4.38
# (the same file tools/train_default_model.py trains on).
CORPUS_SHA256 = "6f74f5589333c56c263963e6347dba662bae2d96861302e690aaae0b4a855eda"
TRAIN_BYTES = 300_000  # the first ~300 KB (Genesis, Exodus, part of Leviticus)
LONG_LINE_START = 2_500_000  # the ~20 KB one-line corpus string comes from here (not trained on)
LONG_LINE_CHARS = 20_000
HARD_REPEAT = 3  # each short hard string is added this many times to the training lines
HARD_TRAIN_MAX_LEN = 200  # ... if it is at most this many characters long
MODEL_MAX_LENGTH = 2048  # written to tokenizer_config.json (transformers' default is 1e30,
#                          which no int64 JSON parser, jansson included, accepts)

LLAMA3_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
QWEN2_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
SPIECE = "\u2581"  # "▁"
BYTE_TOKENS = [f"<0x{b:02X}>" for b in range(256)]

ORDER = [
    "pythia_default",
    "gpt2_bytelevel",
    "neox_nfc",
    "llama3_split",
    "qwen2_split",
    "llama2_sentencepiece",
    "mistral_metaspace",
    "legacy_merges",
]


def log(*a):
    print(*a, file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- the hard strings


def hard_strings(kjv_text):
    """The corpus of hard strings, in a fixed order. No NUL (see README)."""
    S = []

    def add(*xs):
        S.extend(xs)

    # plain text
    add("Hello, world!", "The quick brown fox jumps over the lazy dog.",
        "In the beginning God created the heaven and the earth.",
        "  1 And God said, Let there be light: and there was light.",
        "ALL CAPS WORDS", "MiXeD CaSe wOrDs", "snake_case_identifier", "camelCaseIdentifier",
        "int main(void) { return 0; }", "https://example.com/path?q=1&r=2#frag",
        "user@example.com", "C++ && C# || F#", "....", "!!!???", "---", "''", "\"quoted\"",
        "`backticks`", "$100.00", "100%", "a.b.c", "<html><body>x</body></html>",
        "back\\slash \\n not a newline")
    # contractions
    add("don't", "DON'T", "I'm", "I'M", "you're", "YOU'RE", "we've", "WE'VE", "he'll",
        "HE'LL", "she'd", "SHE'D", "it's", "IT'S", "can't", "won't", "they'll've",
        "'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S 'T 'RE 'VE 'M 'LL 'D",
        "' s", "rock 'n' roll", "O'Neil's dog's bone", "don\u2019t (curly)", "'sx 'llama 'dog",
        "ab'ssss", "''s", "x'y'z")
    # digits
    for n in range(1, 13):
        add("".join(str((i + 1) % 10) for i in range(n)))  # "1", "12", ..., "123456789012"
    add("3.14159", "1,000,000", "abc123def", "x1y22z333w4444", "2024-01-01T12:34:56Z",
        "0x1F 0b1010", "123abc", "a1b2c3d4", "12345 678 9",
        "\u0663\u0664\u0665 Arabic-Indic digits", "\u2460\u2461\u2462 circled",
        "\u00bd \u00be fractions", "\u216b roman", "\uff11\uff12\uff13 fullwidth",
        "\U0001d7d8\U0001d7d9 math digits")
    # whitespace
    for n in (2, 3, 4, 5, 8, 16, 23, 24, 25, 30):
        add(" " * n)
    add(" ", " a", "a ", "  a  ", "a  b", "a   b", "word     word", "\t", "\t\t", "a\tb",
        "\t \n", " \t \n ", "\n", "\n\n", "\n\n\n", "a\nb", "a\r\nb", "\r\n", "\r\n\r\n",
        "a\rb", "\r", "line1\r\nline2\rline3\nline4", "end   \n", "  \n  ",
        "\u00a0", "a\u00a0b", "\u3000ideographic space", "em\u2003space",
        "\x0b\x0c vt ff", "line\u2028separator", "next\u0085line")
    # whitespace runs next to words
    add("hello  world", "   leading", "trailing   ", "a" + " " * 24 + "b", "a" + " " * 25 + "b",
        "\n   indented", "    def f():\n        return 1\n", "x \t y", "word\t\tword",
        "  two leading", "one  two   three    four     five")
    # emoji
    add("\U0001f600", "\U0001f44d\U0001f3fd",
        "\U0001f468\u200d\U0001f469\u200d\U0001f467\u200d\U0001f466",
        "\U0001f1eb\U0001f1f7\U0001f1e9\U0001f1ea", "\U0001f3f3\ufe0f\u200d\U0001f308",
        "\u2764\ufe0f", "\U0001f642 hello \U0001f643", "a\U0001f600b",
        "\U0001f600\U0001f600\U0001f600", "\U0001f469\U0001f3fe\u200d\U0001f4bb", "#\ufe0f\u20e3",
        "\U0001f9d1\u200d\U0001f91d\u200d\U0001f9d1")
    # CJK
    add("\u4e2d\u6587\u6d4b\u8bd5", "\u4f60\u597d\uff0c\u4e16\u754c\uff01",
        "\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8",
        "\u3072\u3089\u304c\u306a \u30ab\u30bf\u30ab\u30ca", "\uff76\uff80\uff76\uff85",
        "\ud55c\uad6d\uc5b4 \ud14d\uc2a4\ud2b8", "\ud55c\uae00",
        "\u6f22\u5b57\u304b\u306a\u4ea4\u3058\u308a\u6587", "Hello\u4e16\u754c",
        "\u6771\u4eac2024\u5e74")
    # combining marks, NFC/NFD pairs
    add("\u00e9", "e\u0301", "\u00c5", "A\u030a", "\u212b", "caf\u00e9", "cafe\u0301",
        "\u00f1", "n\u0303", "\u0301 leading combining mark", "a\u0308\u0304",
        "\u1112\u1161\u11ab", "\ufb01ligature", "\u2126 ohm", "\u0344",
        "Ti\u1ebfng Vi\u1ec7t", "Tie\u0302\u0301ng Vie\u0323\u0302t",
        "Z\u0351\u036b\u0343\u036a\u0302\u036b\u033d\u034f\u0334\u0319\u0324\u031e\u0349a\u0356lgo",
        "\u00c5ngstr\u00f6m vs A\u030angstro\u0308m")
    # RTL
    add("\u0645\u0631\u062d\u0628\u0627 \u0628\u0627\u0644\u0639\u0627\u0644\u0645",
        "\u05e9\u05dc\u05d5\u05dd \u05e2\u05d5\u05dc\u05dd", "\u0627\u0644\u0639\u0631\u0628\u064a\u0629 123",
        "abc \u05e9\u05dc\u05d5\u05dd def", "\u200fRLM", "\u0645\u064f\u062d\u064e\u0645\u0651\u064e\u062f")
    # Greek, Cyrillic
    add("\u0395\u03bb\u03bb\u03b7\u03bd\u03b9\u03ba\u03ac \u03b3\u03c1\u03ac\u03bc\u03bc\u03b1\u03c4\u03b1",
        "\u041f\u0440\u0438\u0432\u0435\u0442, \u043c\u0438\u0440!", "\u0391\u0392\u0393 \u03b1\u03b2\u03b3",
        "\u0401 \u0451 \u0439", "\u03a3\u038a\u03a3\u03a5\u03a6\u039f\u03a3")
    # added / special tokens touching text (each family has some of these)
    add("<|endoftext|>Hello", "Hello<|endoftext|>", "a<|im_start|>b", "  <|endoftext|>  ",
        "<|endoftext|><|endoftext|>", "<|im_start|>user\nHi<|im_end|>\n",
        "<|begin_of_text|>Hi", "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>",
        "<s>Hello</s>", "<s> <s>", "x <s>y", "<unk>", "</s>x", "<|endoftext", "<|padding|>",
        "<|end_of_text|>", "<0x41>", "\u2581hello", "\u2581\u2581", "\u0120hello \u010a")
    # invalid-looking but valid UTF-8
    add("\ufffd", "\ufeffBOM", "a\u200bb", "\u200b", "\ufdd0", "\U0010ffff", "\uffff", "\ufffe",
        "\U0001d400\U0001d401\U0001d402",
        "\U0001d518\U0001d52b\U0001d526\U0001d520\U0001d52c\U0001d521\U0001d522",
        "soft\u00adhyphen", "word\u2060joiner", "\u202eoverride", "\x01\x1b[0m\x7f",
        "\U000e0001 tag", "\U00020000 CJK ext B")
    # long
    add("a" * 1000, "abc" * 350, "supercalifragilisticexpialidocious" * 30,
        "\u0436" * 1000, "\u65e5" * 300, "\U0001f600" * 100, "1234567890" * 50,
        " " * 1000, "\n" * 100, "ab " * 200)
    add(long_line(kjv_text))
    add(multi_line(kjv_text))
    # empty
    add("")
    assert "\x00" not in "".join(S)
    assert len(S) == len(set(S)), [s for s in S if S.count(s) > 1]
    return S


def _verses(kjv_text, start):
    out = []
    for line in kjv_text[start:].split("\n")[1:]:
        line = line.strip()
        if line and line[0].isdigit():
            out.append(line.split(" ", 1)[1])
    return out


def long_line(kjv_text):
    """~20 KB of corpus text on one line (verses joined with spaces), cut at a word."""
    s = ""
    for v in _verses(kjv_text, LONG_LINE_START):
        if len(s) + 1 + len(v) > LONG_LINE_CHARS:
            break
        s = (s + " " + v) if s else v
    return s


def multi_line(kjv_text):
    """~2 KB of the corpus as it is in the file (heading, "  N verse" lines)."""
    chunk = kjv_text[LONG_LINE_START + 100_000:]
    chunk = chunk[chunk.index("\n") + 1:]
    return chunk[:2000].rsplit("\n", 1)[0] + "\n"


# --------------------------------------------------------------------------- corpus


def get_corpus(path):
    if not os.path.exists(path):
        subprocess.run(["bash", os.path.join(REPO, "tools", "get_corpus.sh"), path], check=True)
    with open(path, "rb") as f:
        raw = f.read()
    sha = hashlib.sha256(raw).hexdigest()
    if sha != CORPUS_SHA256:
        raise SystemExit(f"corpus {path}: sha256 {sha}, expected {CORPUS_SHA256}")
    return raw.decode("utf-8")


def training_lines(kjv_text, hard, parity=None):
    """The KJV head, one item per line, then the short hard strings HARD_REPEAT times.

    parity 0 / 1: only the hard strings at even / odd corpus positions (the SentencePiece
    families: characters of the others are left out of the vocabulary and fall back to
    bytes; trainers.BpeTrainer's limit_alphabet would do that too, but it breaks ties
    between equally frequent characters in hash-map order, so it is not deterministic).
    """
    head = kjv_text[:TRAIN_BYTES]
    head = head[: head.rindex("\n")]
    lines = head.split("\n")
    short = [s for i, s in enumerate(hard)
             if 0 < len(s) <= HARD_TRAIN_MAX_LEN and (parity is None or i % 2 == parity)]
    lines += short * HARD_REPEAT
    return lines


# --------------------------------------------------------------------------- builders


B2U = bytes_to_unicode()


U2B = {c: b for b, c in B2U.items()}


def bytelevel_str(s):
    return "".join(B2U[b] for b in s.encode("utf-8"))


def unbytelevel(t):
    return bytes(U2B[c] for c in t).decode("utf-8")


def train_bpe(tok, lines, **trainer_kw):
    trainer = trainers.BpeTrainer(show_progress=False, **trainer_kw)
    tok.train_from_iterator(lines, trainer=trainer)
    return tok


def twice(build, lines):
    """Train twice; the two serialisations must be identical."""
    a = build(lines)
    b = build(lines)
    if a.to_str() != b.to_str():
        raise SystemExit("training is not deterministic: two runs gave different tokenizers")
    return a


def from_json(d):
    return Tokenizer.from_str(json.dumps(d, ensure_ascii=False))


def build_gpt2(lines):
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    train_bpe(tok, lines, vocab_size=1000, min_frequency=2,
              initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    # Like GPT-2: <|endoftext|> is the last entry of the model's vocabulary *and* an
    # added special token with the same id.
    d = json.loads(tok.to_str())
    eot = len(d["model"]["vocab"])
    d["model"]["vocab"]["<|endoftext|>"] = eot
    d["added_tokens"] = [dict(id=eot, content="<|endoftext|>", single_word=False, lstrip=False,
                              rstrip=False, normalized=False, special=True)]
    return from_json(d)


def build_neox(lines):
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    train_bpe(tok, lines, vocab_size=1200, min_frequency=2,
              special_tokens=["<|endoftext|>", "<|padding|>"],
              initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(add_prefix_space=False, trim_offsets=True)
    # GPT-NeoX-20B / pythia: runs of 24 down to 2 spaces are added tokens after the model
    # vocabulary, special false, normalized true (so they match in the NFC text).
    tok.add_tokens([AddedToken(" " * n, single_word=False, lstrip=False, rstrip=False,
                               normalized=True, special=False) for n in range(24, 1, -1)])
    return tok


# Whole pre-tokens put into llama3_split's vocabulary without merges that reach them
# (as in tiktoken-converted vocabularies): with ignore_merges they are one token each,
# without it BPE would split them. Only those not already in the trained vocabulary.
LLAMA3_WHOLE_WORDS = ["Hello", " world", " hello", "123", "999", "   ", " \U0001f642",
                      "\u65e5\u672c\u8a9e", " Hello", "\u4e16\u754c", " wOrDs", "DON"]
LLAMA3_TRAINED_VOCAB = 1500
LLAMA3_SPECIALS = ["<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>",
                   "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"]


def build_llama3(lines):
    tok = Tokenizer(models.BPE(ignore_merges=True))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    train_bpe(tok, lines, vocab_size=LLAMA3_TRAINED_VOCAB, min_frequency=2,
              initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    d = json.loads(tok.to_str())
    vocab = d["model"]["vocab"]
    for w in LLAMA3_WHOLE_WORDS:
        bl = bytelevel_str(w)
        if bl not in vocab:
            vocab[bl] = len(vocab)
    tok = from_json(d)
    # The special tokens live after the model vocabulary (like Llama 3's 128000+).
    tok.add_special_tokens([AddedToken(t, normalized=False, special=True) for t in LLAMA3_SPECIALS])
    bos = tok.token_to_id("<|begin_of_text|>")
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.Sequence([
        processors.ByteLevel(add_prefix_space=True, trim_offsets=False, use_regex=True),
        processors.TemplateProcessing(
            single="<|begin_of_text|> $A",
            pair="<|begin_of_text|> $A <|begin_of_text|>:1 $B:1",
            special_tokens=[("<|begin_of_text|>", bos)]),
    ])
    return tok


def build_qwen2(lines):
    tok = Tokenizer(models.BPE(ignore_merges=False))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
    ])
    train_bpe(tok, lines, vocab_size=1300, min_frequency=2,
              initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.add_special_tokens([AddedToken(t, normalized=False, special=True)
                            for t in ("<|endoftext|>", "<|im_start|>", "<|im_end|>")])
    tok.post_processor = processors.ByteLevel(add_prefix_space=False, trim_offsets=False,
                                              use_regex=False)
    # Qwen2's file has all three decoder flags false. tokenizers 0.23's Python
    # decoders.ByteLevel(...) ignores its keyword arguments (always writes true/true/true),
    # so set them in the JSON. (The ByteLevel decoder does not use them to decode.)
    d = json.loads(tok.to_str())
    d["decoder"] = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False,
                    "use_regex": False}
    return from_json(d)


def sentencepiece_vocab(trained):
    """<unk> <s> </s>, then <0x00>..<0xFF>, then the trained pieces (Llama-2's layout)."""
    d = json.loads(trained.to_str())
    old = sorted(d["model"]["vocab"].items(), key=lambda kv: kv[1])
    specials = ["<unk>", "<s>", "</s>"]
    assert [t for t, _ in old[:3]] == specials, old[:3]
    vocab = {t: i for i, t in enumerate(specials + BYTE_TOKENS)}
    for t, _ in old[3:]:
        assert t not in vocab, t
        vocab[t] = len(vocab)
    merges = [tuple(m) for m in d["model"]["merges"]]
    return vocab, merges


def sentencepiece_finish(tok):
    tok.add_special_tokens([AddedToken(t, normalized=False, special=True)
                            for t in ("<unk>", "<s>", "</s>")])
    tok.decoder = decoders.Sequence([
        decoders.Replace(SPIECE, " "), decoders.ByteFallback(), decoders.Fuse(),
        decoders.Strip(content=" ", left=1, right=0),
    ])
    tok.post_processor = processors.TemplateProcessing(
        single="<s>:0 $A:0", pair="<s>:0 $A:0 <s>:1 $B:1", special_tokens=[("<s>", 1)])
    return tok


def build_llama2(lines):
    # Training: the Llama-2 normaliser, and words = a run of "▁" with what follows up to
    # the next "▁" (so pieces never hold "▁" inside, but whitespace runs get merges).
    t = Tokenizer(models.BPE(unk_token="<unk>"))
    t.normalizer = normalizers.Sequence([normalizers.Prepend(SPIECE), normalizers.Replace(" ", SPIECE)])
    t.pre_tokenizer = pre_tokenizers.Split(Regex(SPIECE + "*[^" + SPIECE + "]+|" + SPIECE + "+"),
                                           behavior="isolated")
    train_bpe(t, lines, vocab_size=900, min_frequency=2,
              special_tokens=["<unk>", "<s>", "</s>"])
    vocab, merges = sentencepiece_vocab(t)
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, unk_token="<unk>", fuse_unk=True,
                               byte_fallback=True))
    tok.normalizer = normalizers.Sequence([normalizers.Prepend(SPIECE), normalizers.Replace(" ", SPIECE)])
    # no pre-tokenizer: the whole normalised text is one word for BPE
    return sentencepiece_finish(tok)


def build_mistral(lines):
    # Training: Metaspace with split (no piece holds "▁" after its start); the file gets
    # split false, as transformers' LlamaConverter / LlamaTokenizer (legacy=False) write.
    t = Tokenizer(models.BPE(unk_token="<unk>"))
    t.pre_tokenizer = pre_tokenizers.Metaspace(replacement=SPIECE, prepend_scheme="always", split=True)
    train_bpe(t, lines, vocab_size=1000, min_frequency=2,
              special_tokens=["<unk>", "<s>", "</s>"])
    vocab, merges = sentencepiece_vocab(t)
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, unk_token="<unk>", fuse_unk=True,
                               byte_fallback=True))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement=SPIECE, prepend_scheme="first", split=False)
    return sentencepiece_finish(tok)


# name, builder, which hard strings it trains on (None: all; 0/1: even/odd positions)
BUILDERS = [
    ("gpt2_bytelevel", build_gpt2, None),
    ("neox_nfc", build_neox, None),
    ("llama3_split", build_llama3, None),
    ("qwen2_split", build_qwen2, None),
    ("llama2_sentencepiece", build_llama2, 0),
    ("mistral_metaspace", build_mistral, 1),
]


def legacy_merges_json(gpt2_path):
    with open(gpt2_path, encoding="utf-8") as f:
        d = json.load(f)
    for a, b in d["model"]["merges"]:
        assert " " not in a and " " not in b, (a, b)
    d["model"]["merges"] = [f"{a} {b}" for a, b in d["model"]["merges"]]
    return d


# --------------------------------------------------------------------------- saving


SPECIALS = {
    # name: kwargs for PreTrainedTokenizerFast (-> tokenizer_config.json)
    "gpt2_bytelevel": dict(bos_token="<|endoftext|>", eos_token="<|endoftext|>",
                           unk_token="<|endoftext|>"),
    "neox_nfc": dict(bos_token="<|endoftext|>", eos_token="<|endoftext|>",
                     unk_token="<|endoftext|>", pad_token="<|padding|>"),
    "llama3_split": dict(bos_token="<|begin_of_text|>", eos_token="<|end_of_text|>"),
    "qwen2_split": dict(eos_token="<|endoftext|>", pad_token="<|endoftext|>"),
    "llama2_sentencepiece": dict(bos_token="<s>", eos_token="</s>", unk_token="<unk>"),
    "mistral_metaspace": dict(bos_token="<s>", eos_token="</s>", unk_token="<unk>"),
}


def save(tok, out_dir, name):
    os.makedirs(out_dir, exist_ok=True)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, model_max_length=MODEL_MAX_LENGTH,
                                   **SPECIALS[name])
    fast.save_pretrained(out_dir)
    got = sorted(os.listdir(out_dir))
    if got != ["tokenizer.json", "tokenizer_config.json"]:
        raise SystemExit(f"{name}: save_pretrained wrote {got}")
    # transformers must have written the tokenizer as it is
    back = Tokenizer.from_file(os.path.join(out_dir, "tokenizer.json"))
    if back.to_str() != tok.to_str():
        raise SystemExit(f"{name}: save_pretrained changed tokenizer.json")


def write_json_pretty(path, d):
    """The layout tokenizers' own pretty writer uses (2-space indent, raw UTF-8)."""
    with open(path, "w", encoding="utf-8") as f:
        f.write(json.dumps(d, ensure_ascii=False, indent=2))


# --------------------------------------------------------------------------- expected


def expected_rows(tok, strings):
    rows = []
    for s in strings:
        ids = tok.encode(s, add_special_tokens=False).ids
        ids_special = tok.encode(s, add_special_tokens=True).ids
        decoded = tok.decode(ids, skip_special_tokens=False)
        rows.append({"text": s, "ids": ids, "ids_special": ids_special, "decoded": decoded,
                     "roundtrip": decoded == s})
    return rows


def cross_check_transformers(folder, rows, name):
    """transformers' AutoTokenizer on the folder must give the same ids."""
    at = AutoTokenizer.from_pretrained(folder)
    for r in rows:
        a = at(r["text"], add_special_tokens=False)["input_ids"]
        b = at(r["text"], add_special_tokens=True)["input_ids"]
        if a != r["ids"] or b != r["ids_special"]:
            raise SystemExit(f"{name}: transformers disagrees with tokenizers on {r['text'][:40]!r}")


def stats(name, tok, rows):
    d = json.loads(tok.to_str())
    m = d["model"]
    vocab = m["vocab"]
    st = {
        "model_vocab": len(vocab),
        "vocab_with_added": tok.get_vocab_size(with_added_tokens=True),
        "merges": len(m["merges"]),
        "roundtrip": sum(r["roundtrip"] for r in rows),
        "n": len(rows),
        "tokens": sum(len(r["ids"]) for r in rows),
        "not_roundtrip": [r["text"] for r in rows if not r["roundtrip"]],
        "ids_special_differs": sum(r["ids"] != r["ids_special"] for r in rows),
    }
    added_ids = {a["id"] for a in d["added_tokens"]}
    st["with_added"] = sum(any(i in added_ids for i in r["ids"]) for r in rows)
    if m.get("byte_fallback"):
        lo, hi = vocab["<0x00>"], vocab["<0xFF>"]
        st["with_byte_fallback"] = sum(any(lo <= i <= hi for i in r["ids"]) for r in rows)
    if m.get("ignore_merges"):
        d2 = copy.deepcopy(d)
        d2["model"]["ignore_merges"] = False
        t2 = from_json(d2)
        st["ignore_merges_matters"] = sum(
            t2.encode(r["text"], add_special_tokens=False).ids != r["ids"] for r in rows)
    return st


# --------------------------------------------------------------------------- README


def component_json(d, key):
    return json.dumps(d.get(key), ensure_ascii=False, indent=2)


def describe(name):
    return {
        "pythia_default": "Copy of `data/models/pythia-rc-tiny/tokenizer.json` and "
                          "`tokenizer_config.json` (the default model's own byte-level BPE, "
                          "trained by `tools/train_default_model.py`); not trained here.",
        "gpt2_bytelevel": "GPT-2 style: ByteLevel pre-tokenizer (GPT-2 regex, add_prefix_space "
                          "false), no normaliser, ByteLevel decoder and post-processor. Trained "
                          "vocab 1000 (256 byte symbols + merges), then `<|endoftext|>` appended "
                          "as the last entry of `model.vocab` *and* as a special added token with "
                          "the same id (as in GPT-2's file).",
        "neox_nfc": "GPT-NeoX / pythia style: NFC normaliser, ByteLevel pre-tokenizer, "
                    "`<|endoftext|>` (0) and `<|padding|>` (1) special and in `model.vocab`; "
                    "runs of 24 down to 2 spaces as non-special added tokens with "
                    "`normalized: true` after the model vocabulary, as in "
                    "EleutherAI/gpt-neox-20b (ids 50254..50276 there). They are matched in the "
                    "normalised text, longest first, before the ByteLevel split.",
        "llama3_split": "Llama-3 style: no normaliser; Sequence[Split(Llama-3 regex, Isolated), "
                        "ByteLevel(use_regex false)]; BPE with `ignore_merges: true`; a few whole "
                        "pre-tokens added to `model.vocab` with no merges reaching them (listed "
                        "below; the summary's last column counts the strings where that "
                        "matters); special tokens after the model vocabulary; "
                        "post-processor Sequence[ByteLevel, TemplateProcessing(`<|begin_of_text|> "
                        "$A`)] so `add_special_tokens=True` prepends the BOS.",
        "qwen2_split": "Qwen2 style: NFC normaliser; Sequence[Split(Qwen2 regex: single digits), "
                       "ByteLevel(use_regex false)]; `<|endoftext|>`, `<|im_start|>`, `<|im_end|>` "
                       "special added tokens after the model vocabulary; no BOS.",
        "llama2_sentencepiece": "Llama-2 style (transformers' legacy LlamaConverter): normaliser "
                                "Sequence[Prepend(\"\u2581\"), Replace(\" \", \"\u2581\")], no "
                                "pre-tokenizer (the whole text is one BPE word), BPE with "
                                "`byte_fallback`, `fuse_unk`, unk `<unk>`; ids 0-2 `<unk>` `<s>` "
                                "`</s>`, 3-258 `<0x00>`..`<0xFF>`, then the trained pieces; "
                                "decoder Sequence[Replace, ByteFallback, Fuse, Strip(left 1)]; "
                                "`<s>` BOS via TemplateProcessing. The normaliser runs on each "
                                "stretch of text between added tokens, so each gets its own "
                                "\u2581 (`\"<s>Hello\"` -> `<s>` `\u2581H`...; decoded `\"<s> "
                                "Hello\"`).",
        "mistral_metaspace": "Mistral / Llama (transformers' LlamaTokenizer with legacy=False, "
                             "the form of Mistral's newer files): no normaliser, pre-tokenizer "
                             "Metaspace(\"\u2581\", prepend_scheme \"first\", split false), BPE "
                             "`byte_fallback`, same id layout and decoder as llama2_sentencepiece. "
                             "\"first\": the \u2581 is prepended only to the first stretch of the "
                             "text, not after an added token (`\"x <s>y\"` ends in `<s>` `y`), "
                             "and not when the text already starts with a space (`\" a\"` and "
                             "`\"a\"` both give `\u2581a`): decoding then loses one leading space, "
                             "which is most of its non-round-trips.",
        "legacy_merges": "`gpt2_bytelevel/tokenizer.json` with `model.merges` rewritten as "
                         "`\"a b\"` strings (the pre-0.20 form); everything else identical, and "
                         "every expected id equals gpt2_bytelevel's (checked).",
    }[name]


def write_readme(out, info, corpus_n, lines_n):
    L = []
    a = L.append
    a("# Tokenizer fixtures")
    a("")
    a("Reference tokenizations for `src/formats/tokenizer.c`, generated by "
      "`tools/make_tokenizer_fixtures.py` with HF `tokenizers`; do not edit by hand (this "
      "README is generated too).")
    a("")
    a("## Regenerating")
    a("")
    a("```sh")
    a("pip install -r tools/requirements-tokenizer-fixtures.txt")
    a("bash tools/get_corpus.sh /tmp/ratiocheck-train/kjv.txt   # if not there (the script also calls it)")
    a("python3 tools/make_tokenizer_fixtures.py           # rewrites data/fixtures/tokenizers/")
    a("python3 tools/make_tokenizer_fixtures.py --check   # regenerates in a temp dir and compares")
    a("```")
    a("")
    a("Versions used:")
    a("")
    a(f"- python {platform.python_version()}")
    a(f"- tokenizers {tokenizers.__version__}")
    a(f"- transformers {transformers.__version__} (only for `tokenizer_config.json` and the "
      "cross-check)")
    a("")
    a("Training runs single-threaded (`RAYON_NUM_THREADS=1`); every tokenizer is trained twice "
      "and the two must serialise identically, and `--check` compares a whole regeneration with "
      "these files byte for byte.")
    a("")
    a(f"Training text: the first {TRAIN_BYTES:,} bytes of the King James Bible "
      "(`tools/get_corpus.sh`, Debian bible-kjv 4.38, public domain, SHA-256 checked), cut at a "
      f"line end, one training item per line, plus every corpus string of at most "
      f"{HARD_TRAIN_MAX_LEN} characters {HARD_REPEAT} times ({lines_n} items in all; "
      "llama2_sentencepiece only those at even corpus positions, mistral_metaspace only those "
      "at odd ones, so that characters missing from their vocabularies fall back to bytes). "
      "`min_frequency` 2 everywhere.")
    a("")
    a("## Files")
    a("")
    a(f"- `corpus.jsonl`: {corpus_n} strings, one JSON string per line (ASCII, `\\uXXXX` "
      "escapes). Contractions, digit runs of 1-12 and mixed, whitespace runs (1-30 and 1000 "
      "spaces), tabs, CR/LF/CRLF, Unicode spaces, emoji and ZWJ sequences, flags, skin tones, "
      "CJK, combining marks and NFC/NFD pairs, RTL, Greek/Cyrillic, added and special tokens "
      "touching text (of every family), valid but unusual code points (U+FFFD, BOM, ZWSP, "
      "noncharacters, U+10FFFF, astral letters, tags), words of 1000+ characters, a ~20 KB "
      "line of KJV text (not from the training part), a 2 KB multi-line chunk, the empty "
      "string. No NUL character (the prompt reader rejects it; a tokenizer could encode it).")
    a("- `<name>/tokenizer.json`: the tokenizer; `<name>/tokenizer_config.json`: bos/eos/unk/pad "
      "as transformers writes them (`PreTrainedTokenizerFast(...).save_pretrained`, "
      f"`model_max_length` {MODEL_MAX_LENGTH}); legacy_merges has gpt2_bytelevel's.")
    a("- `<name>/expected.jsonl`: one line per corpus string, in corpus order: "
      "`{\"text\", \"ids\", \"ids_special\", \"decoded\", \"roundtrip\"}` with "
      "`ids = encode(text, add_special_tokens=False).ids`, "
      "`ids_special = encode(text, add_special_tokens=True).ids`, "
      "`decoded = decode(ids, skip_special_tokens=False)`, `roundtrip = decoded == text`. "
      "`tokenizers.Tokenizer.from_file` on the committed `tokenizer.json`; transformers' "
      "`AutoTokenizer` on the folder gives the same ids (checked). ASCII JSON.")
    a("")
    a("## Notes for readers of these files")
    a("")
    a("- `corpus.jsonl` lines are bare JSON strings: jansson needs `JSON_DECODE_ANY` for them. "
      "`expected.jsonl` lines are objects. Astral characters are `\\uD8xx\\uDCxx` pairs.")
    a("- `tokenizer.json` files are raw UTF-8 as `tokenizers` writes them (not ASCII).")
    a("- Merges are `[\"a\", \"b\"]` pairs (what tokenizers >= 0.20 writes), except "
      "legacy_merges.")
    a("- Added tokens can be inside `model.vocab` with the same id (pythia_default, "
      "gpt2_bytelevel, the `<unk>`/`<s>`/`</s>` of the SentencePiece pair, neox_nfc's first two) "
      "or only in `added_tokens`, with ids after the model vocabulary (neox_nfc's space runs, "
      "llama3_split's and qwen2_split's special tokens): id -> text must look at both.")
    a("- Non-special added tokens decode to their content as is (neox_nfc's space runs).")
    a("- The Strip decoder is written with `start`/`stop` keys (the Python arguments are "
      "`left`/`right`); Metaspace with `prepend_scheme` and `split` (no `add_prefix_space`); "
      "Split patterns as `{\"Regex\": ...}`, Replace patterns as `{\"String\": ...}`.")
    a("- The ByteLevel flags of decoders and post-processors do not change decoding or ids "
      "here (no offsets are compared); the BPE `ignore_merges` flag does (llama3_split).")
    a("")
    a("## Summary")
    a("")
    a("| tokenizer | model vocab | with added | merges | round-trip | tokens (all strings) "
      "| strings with added tokens | ids_special differs | byte fallback used | ignore_merges changes |")
    a("|---|---|---|---|---|---|---|---|---|---|")
    for name in ORDER:
        s = info[name]["stats"]
        a(f"| `{name}` | {s['model_vocab']} | {s['vocab_with_added']} | {s['merges']} | "
          f"{s['roundtrip']} / {s['n']} | {s['tokens']} | {s['with_added']} | "
          f"{s['ids_special_differs']} | {s.get('with_byte_fallback', '-')} | "
          f"{s.get('ignore_merges_matters', '-')} |")
    a("")
    a("\"ignore_merges changes\": strings whose ids differ when the same file is loaded with "
      "`ignore_merges: false`.")
    a("")
    for name in ORDER:
        d, s = info[name]["json"], info[name]["stats"]
        m = d["model"]
        a(f"## `{name}`")
        a("")
        a(describe(name))
        a("")
        opts = {k: v for k, v in m.items() if k not in ("vocab", "merges")}
        merges_form = "`\"a b\"` strings" if m["merges"] and isinstance(m["merges"][0], str) \
            else "`[\"a\", \"b\"]` pairs"
        a(f"Model: `{json.dumps(opts, ensure_ascii=False)}`; {len(m['vocab'])} vocab entries, "
          f"{len(m['merges'])} merges as {merges_form}.")
        a("")
        for key in ("normalizer", "pre_tokenizer", "post_processor", "decoder"):
            a(f"{key}:")
            a("")
            a("```json")
            a(component_json(d, key))
            a("```")
            a("")
        a("Added tokens (id, content, special, normalized; lstrip/rstrip/single_word all false):")
        a("")
        for t in d["added_tokens"]:
            assert not (t["lstrip"] or t["rstrip"] or t["single_word"]), t
            a(f"- {t['id']} `{json.dumps(t['content'])}` special={str(t['special']).lower()} "
              f"normalized={str(t['normalized']).lower()}")
        a("")
        if name == "llama3_split":
            extra = sorted((i, t) for t, i in m["vocab"].items() if i >= LLAMA3_TRAINED_VOCAB)
            a("Whole pre-tokens in `model.vocab` that no merge produces (id, byte-level form, text): "
              + ", ".join(f"{i} `{t}` {json.dumps(unbytelevel(t))}" for i, t in extra) + ".")
            a("")
        cfg = info[name]["config"]
        a("tokenizer_config.json: " + ", ".join(
            f"{k} `{cfg[k]}`" for k in ("bos_token", "eos_token", "unk_token", "pad_token") if k in cfg))
        a("")
        a(f"Round-trip: {s['roundtrip']} of {s['n']} strings decode back to themselves.")
        if s["not_roundtrip"]:
            L[-1] += " The others:"
            a("")
            for t in s["not_roundtrip"]:
                r = json.dumps(t)
                a(f"- `{r[:70] + ('...' if len(r) > 70 else '')}`")
        a("")
    with open(os.path.join(out, "README.md"), "w", encoding="utf-8") as f:
        f.write("\n".join(L))


# --------------------------------------------------------------------------- main


def generate(out, corpus_path, model_dir):
    kjv = get_corpus(corpus_path)
    hard = hard_strings(kjv)
    lines = training_lines(kjv, hard)
    corpora = {None: lines, 0: training_lines(kjv, hard, 0), 1: training_lines(kjv, hard, 1)}
    log(f"{len(hard)} corpus strings; {len(lines)} training items")

    if os.path.isdir(out):
        shutil.rmtree(out)
    os.makedirs(out)
    with open(os.path.join(out, "corpus.jsonl"), "w", encoding="ascii") as f:
        for s in hard:
            f.write(json.dumps(s, ensure_ascii=True) + "\n")

    # tokenizers
    d = os.path.join(out, "pythia_default")
    os.makedirs(d)
    for fn in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copyfile(os.path.join(model_dir, fn), os.path.join(d, fn))
    for name, build, parity in BUILDERS:
        log(f"training {name}")
        save(twice(build, corpora[parity]), os.path.join(out, name), name)
    d = os.path.join(out, "legacy_merges")
    os.makedirs(d)
    write_json_pretty(os.path.join(d, "tokenizer.json"),
                      legacy_merges_json(os.path.join(out, "gpt2_bytelevel", "tokenizer.json")))
    shutil.copyfile(os.path.join(out, "gpt2_bytelevel", "tokenizer_config.json"),
                    os.path.join(d, "tokenizer_config.json"))

    # expected
    info = {}
    for name in ORDER:
        folder = os.path.join(out, name)
        path = os.path.join(folder, "tokenizer.json")
        tok = Tokenizer.from_file(path)
        rows = expected_rows(tok, hard)
        cross_check_transformers(folder, rows, name)
        with open(os.path.join(folder, "expected.jsonl"), "w", encoding="ascii") as f:
            for r in rows:
                f.write(json.dumps(r, ensure_ascii=True) + "\n")
        with open(path, encoding="utf-8") as f:
            dj = json.load(f)
        with open(os.path.join(folder, "tokenizer_config.json"), encoding="utf-8") as f:
            cfg = json.load(f)
        info[name] = {"json": dj, "stats": stats(name, tok, rows), "rows": rows, "config": cfg}
        s = info[name]["stats"]
        log(f"{name}: vocab {s['vocab_with_added']}, round-trip {s['roundtrip']}/{s['n']}, "
            f"{s['tokens']} tokens")

    # legacy_merges: same tokenizer as gpt2_bytelevel
    g = Tokenizer.from_file(os.path.join(out, "gpt2_bytelevel", "tokenizer.json"))
    lm = Tokenizer.from_file(os.path.join(out, "legacy_merges", "tokenizer.json"))
    if g.to_str() != lm.to_str() or info["gpt2_bytelevel"]["rows"] != info["legacy_merges"]["rows"]:
        raise SystemExit("legacy_merges differs from gpt2_bytelevel")

    write_readme(out, info, len(hard), len(lines))
    total = 0
    for root, _, fns in os.walk(out):
        for fn in fns:
            total += os.path.getsize(os.path.join(root, fn))
    log(f"wrote {out}: {total:,} bytes")
    if total > 3_000_000:
        raise SystemExit(f"fixtures too big: {total:,} bytes")


def compare_trees(a, b):
    diffs = []

    def rec(dc, rel):
        for n in dc.left_only + dc.right_only + dc.funny_files:
            diffs.append(os.path.join(rel, n))
        for n in dc.common_files:
            if not filecmp.cmp(os.path.join(dc.left, n), os.path.join(dc.right, n), shallow=False):
                diffs.append(os.path.join(rel, n))
        for n, sub in dc.subdirs.items():
            rec(sub, os.path.join(rel, n))

    rec(filecmp.dircmp(a, b), "")
    return diffs


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=DEFAULT_OUT, help="output folder (replaced)")
    ap.add_argument("--corpus", default=DEFAULT_CORPUS,
                    help="KJV text from tools/get_corpus.sh (made there if missing)")
    ap.add_argument("--model-dir", default=DEFAULT_MODEL_DIR, help="pythia_default's source")
    ap.add_argument("--check", action="store_true",
                    help="regenerate into a temp dir and compare with --out byte for byte")
    args = ap.parse_args()
    if args.check:
        with tempfile.TemporaryDirectory() as tmp:
            t = os.path.join(tmp, "tokenizers")
            generate(t, args.corpus, args.model_dir)
            diffs = compare_trees(t, args.out)
        if diffs:
            raise SystemExit("differs from " + args.out + ": " + ", ".join(diffs))
        log(f"OK: a regeneration is byte-identical to {args.out}")
        return
    generate(args.out, args.corpus, args.model_dir)


if __name__ == "__main__":
    main()
