#!/usr/bin/env python3
"""Train ratiocheck's default model, data/models/pythia-rc-tiny, and its prompts.

A small GPT-NeoX (Pythia-architecture) causal LM built with transformers' own
``GPTNeoXConfig`` / ``GPTNeoXForCausalLM``, with its own byte-level BPE tokenizer
(HF ``tokenizers``), trained from scratch on the CPU on the King James Version
of the Bible (public domain), which comes from Debian's ``bible-kjv-text``
package (see tools/get_corpus.sh).  ratiocheck needs a *trained* model: its
next-token distributions are peaked, which is where reduced-precision drift
between cached decode and the full forward pass shows up.

Usage:
    pip install -r tools/requirements-train.txt
    python3 tools/train_default_model.py            # ~25 min on 2 CPU cores

Writes:
    data/models/pythia-rc-tiny/   config.json, generation_config.json,
                                  model.safetensors (float16), tokenizer.json,
                                  tokenizer_config.json, train_log.tsv, README.md
    data/prompts/default.txt      the prompts, one per line
    data/prompts/default.ids      the same prompts as token ids (no BOS)

Everything is seeded; the corpus text is checked against a recorded SHA-256.
Training runs in fp32 on the CPU with ``torch.set_num_threads(--threads)``
(default 1: the 2-core development machines are shared with other jobs, and
there 2 threads ran about 4x slower than 1).  With the pinned package versions,
the same thread count and the same kind of CPU, reruns give the same losses;
another thread count, CPU or BLAS build differs in the last bits, and so in the
trained weights, but not in quality.
"""

import argparse
import hashlib
import math
import os
import re
import subprocess
import sys
import time

os.environ["CUDA_VISIBLE_DEVICES"] = ""  # CPU only, before torch is imported
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
import tokenizers  # noqa: E402
import transformers  # noqa: E402
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers  # noqa: E402
from transformers import (  # noqa: E402
    AutoModelForCausalLM,
    AutoTokenizer,
    GPTNeoXConfig,
    GPTNeoXForCausalLM,
    PreTrainedTokenizerFast,
)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODEL_NAME = "pythia-rc-tiny"
EOT = "<|endoftext|>"

# Output of `bible -l0 Genesis1:1-Revelation22:21` from Debian bible-kjv 4.38.
CORPUS_SHA256 = "6f74f5589333c56c263963e6347dba662bae2d96861302e690aaae0b4a855eda"
CORPUS_SOURCE = {
    "packages": "bible-kjv-text 4.38 (data) and bible-kjv 4.38 (the `bible` program that decompresses it)",
    "source_package": "bible-kjv 4.38, Debian 12 (bookworm), section doc, main",
    "license": (
        "KJV text: public domain (debian/copyright: 'The copyright for the King James Version "
        "text of the Bible is expired since the translation was done in 1611'); the Bible "
        "Retrieval System data files: 'provided for unrestricted use ... Users may copy, modify "
        "or distribute this file at will' (Chip Chapin, 1989); the Debian program code: GPL-2+ "
        "(not used here, only run)."
    ),
}

# Prompts for ratiocheck: verse openings (some verbatim from the corpus, so the model is
# very confident) and narrative starts in the corpus's style.  3-15 words each.
PROMPTS = [
    "In the beginning God created",
    "The LORD is my shepherd;",
    "And it came to pass, when the king heard",
    "And God said, Let there be",
    "Blessed are the poor in spirit: for",
    "For God so loved the world, that he",
    "Now the serpent was more subtil than any",
    "And the LORD spake unto Moses, saying,",
    "Then answered Jesus and said unto them,",
    "Hear, O Israel: The LORD our God",
    "And he went up into a mountain, and",
    "My son, hear the instruction of thy father,",
    "And the children of Israel journeyed from",
    "Thus saith the LORD of hosts,",
    "And David said unto Saul,",
    "Praise ye the LORD. O give thanks unto",
    "And when they were come into the house,",
    "Woe unto you, scribes and Pharisees,",
    "And the woman said unto the serpent,",
    "Behold, a virgin shall conceive, and bear",
    "The heavens declare the glory of God; and",
    "And Abraham rose up early in the morning,",
    "Wherefore the king commanded his servants to",
    "And there was a famine in the land:",
    "Let not your heart be troubled:",
    "And Jesus answering said unto him,",
    "I will lift up mine eyes unto the hills,",
    "And the word of the LORD came unto me, saying,",
    "Vanity of vanities, saith the Preacher;",
    "And they departed from thence, and came to",
    "To every thing there is a season,",
    "Now when Jesus was born in Bethlehem of Judaea",
    "And the people murmured against Moses, saying,",
    "Be strong and of a good courage;",
    "And the angel of the LORD appeared unto him",
    "Paul, an apostle of Jesus Christ by the will of God,",
    "Then the king sent and called for the prophet, and said,",
    "Charity suffereth long, and is kind;",
    "And the men of the city came out against them,",
    "Out of the depths have I cried unto thee,",
    "And he opened his mouth, and taught them, saying,",
    "Honour thy father and thy mother:",
]
# Prompts whose completions go into the README.
SHOWCASE = [0, 2, 7, 14, 23, 36]


def log(*a):
    print(*a, flush=True)


# --------------------------------------------------------------------------- corpus


def get_corpus(path):
    if not os.path.exists(path):
        subprocess.run(["bash", os.path.join(REPO, "tools", "get_corpus.sh"), path], check=True)

    with open(path, "rb") as f:
        raw = f.read()
    sha = hashlib.sha256(raw).hexdigest()
    if sha != CORPUS_SHA256:
        log(f"WARNING: corpus sha256 {sha} differs from the recorded {CORPUS_SHA256}")
    return raw.decode("ascii"), sha


def parse_chapters(text):
    """-> list of (heading, [verse texts]) in canonical order."""
    chapters = []
    verse_re = re.compile(r"^  (\d+) (.+)$")
    for line in text.split("\n"):
        if not line.strip():
            continue
        m = verse_re.match(line)
        if m:
            chapters[-1][1].append(m.group(2).strip())
        else:
            chapters.append((line.strip(), []))
    assert len(chapters) == 1189, len(chapters)
    assert sum(len(v) for _, v in chapters) == 31102
    return chapters


def chapter_text(verses):
    # One verse per line, no verse numbers, no chapter heading.
    return "\n".join(verses)


# --------------------------------------------------------------------------- tokenizer


def train_tokenizer(texts, vocab_size):
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True)
    tok.decoder = decoders.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True)
    tok.post_processor = processors.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=[EOT],  # id 0
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),  # all 256 bytes: any text encodes
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer)
    assert tok.token_to_id(EOT) == 0
    assert tok.get_vocab_size() == vocab_size, tok.get_vocab_size()
    return tok


# --------------------------------------------------------------------------- model


def make_config(args, tok_size):
    vocab = (tok_size + 127) // 128 * 128
    if vocab == tok_size:  # pad beyond the tokenizer, as pythia does
        vocab += 128
    return GPTNeoXConfig(
        vocab_size=vocab,
        hidden_size=args.hidden,
        num_hidden_layers=args.layers,
        num_attention_heads=args.hidden // 64,  # head_dim 64
        intermediate_size=4 * args.hidden,
        hidden_act="gelu",
        max_position_embeddings=args.ctx,
        initializer_range=0.02,
        layer_norm_eps=1e-5,
        use_cache=True,
        bos_token_id=0,
        eos_token_id=0,
        tie_word_embeddings=False,
        use_parallel_residual=True,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25},
        attention_bias=True,
        attention_dropout=0.0,
        hidden_dropout=0.0,
    )


def windows(stream, ctx):
    """Non-overlapping (ctx+1)-token windows (stride ctx) covering the stream."""
    n = (len(stream) - 1) // ctx
    return torch.stack([stream[i * ctx : i * ctx + ctx + 1] for i in range(n)])


@torch.no_grad()
def evaluate(model, wins, bs=32):
    """-> mean loss (nats/token), mean top-1 probability, top-1 accuracy."""
    model.eval()
    tot_loss = tot_p1 = tot_acc = 0.0
    n = 0
    for i in range(0, len(wins), bs):
        w = wins[i : i + bs]
        logits = model(input_ids=w[:, :-1]).logits.float()
        tgt = w[:, 1:]
        lp = torch.log_softmax(logits, -1)
        tot_loss += -lp.gather(-1, tgt.unsqueeze(-1)).sum().item()
        p1, a1 = lp.max(-1)
        tot_p1 += p1.exp().sum().item()
        tot_acc += (a1 == tgt).sum().item()
        n += tgt.numel()
    model.train()
    return tot_loss / n, tot_p1 / n, tot_acc / n


def lr_at(step, args):
    if step < args.warmup:
        return args.lr * (step + 1) / args.warmup
    t = (step - args.warmup) / max(1, args.steps - args.warmup)
    return args.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, t))))


# --------------------------------------------------------------------------- main


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.path.join(REPO, "data", "models", MODEL_NAME))
    ap.add_argument("--prompts-out", default=os.path.join(REPO, "data", "prompts"))
    ap.add_argument("--workdir", default=os.path.join(os.environ.get("TMPDIR", "/tmp"), "ratiocheck-train"),
                    help="corpus copy and the resumable checkpoint (outside the repo)")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--tok-vocab", type=int, default=4000)
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--ctx", type=int, default=256)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--steps", type=int, default=800)
    ap.add_argument("--lr", type=float, default=1.5e-3)
    ap.add_argument("--warmup", type=int, default=80)
    ap.add_argument("--wd", type=float, default=0.1)
    ap.add_argument("--eval-every", type=int, default=200)
    ap.add_argument("--ckpt-every", type=int, default=200)
    ap.add_argument("--threads", type=int, default=1,
                    help="torch threads (the shipped model used 1: on a 2-core machine shared with other "
                         "jobs, 2 threads ran 4x slower; the thread count changes the last bits of the result)")
    ap.add_argument("--smoke", action="store_true", help="skip the is-it-trained checks (for short test runs)")
    ap.add_argument("--resume", action="store_true", help="continue from the workdir checkpoint")
    args = ap.parse_args()

    t_start = time.time()
    torch.set_num_threads(args.threads)
    os.makedirs(args.workdir, exist_ok=True)
    log(f"torch {torch.__version__}, transformers {transformers.__version__}, tokenizers {tokenizers.__version__}, "
        f"threads {torch.get_num_threads()}")

    # ---- corpus
    text, corpus_sha = get_corpus(os.path.join(args.workdir, "kjv.txt"))
    chapters = parse_chapters(text)
    # Hold out every 20th chapter (offset 7) for validation: ~5% of the text, all books.
    val_idx = [i for i in range(len(chapters)) if i % 20 == 7]
    train_idx = [i for i in range(len(chapters)) if i % 20 != 7]
    train_texts = [chapter_text(chapters[i][1]) for i in train_idx]
    val_texts = [chapter_text(chapters[i][1]) for i in val_idx]
    log(f"corpus: {len(text)} bytes, {len(chapters)} chapters; train {len(train_idx)} chapters "
        f"({sum(map(len, train_texts))} chars), val {len(val_idx)} chapters ({sum(map(len, val_texts))} chars)")

    # ---- tokenizer (trained on the training chapters only)
    tok = train_tokenizer(train_texts, args.tok_vocab)

    def encode_docs(texts):
        ids = []
        for t in texts:  # documents (chapters) separated by <|endoftext|>, as in pythia's packing
            ids.extend(tok.encode(t).ids)
            ids.append(0)
        return torch.tensor(ids, dtype=torch.long)

    train_stream = encode_docs(train_texts)
    val_stream = encode_docs(val_texts)
    log(f"tokenizer: {tok.get_vocab_size()} tokens; train {len(train_stream)} tokens, val {len(val_stream)} tokens "
        f"({sum(map(len, train_texts)) / len(train_stream):.2f} chars/token)")

    # Unigram baseline: train token frequencies (add-one), cross-entropy on val.
    counts = torch.bincount(train_stream, minlength=tok.get_vocab_size()).double() + 1
    uni = counts / counts.sum()
    unigram_train_entropy = -(uni * uni.log()).sum().item()
    unigram_val_ce = -uni.log()[val_stream[1:]].mean().item()
    log(f"unigram: entropy {unigram_train_entropy:.3f} nats, val cross-entropy {unigram_val_ce:.3f} nats")

    # ---- model
    config = make_config(args, tok.get_vocab_size())
    torch.manual_seed(args.seed)
    model = GPTNeoXForCausalLM(config)
    model.train()
    n_params = sum(p.numel() for p in model.parameters())
    n_embed = model.gpt_neox.embed_in.weight.numel() + model.get_output_embeddings().weight.numel()
    log(f"model: {config.num_hidden_layers} layers, hidden {config.hidden_size}, {config.num_attention_heads} heads, "
        f"vocab {config.vocab_size}; {n_params} parameters ({n_params - n_embed} non-embedding)")

    decay = [p for n, p in model.named_parameters() if p.ndim >= 2 and "embed_in" not in n]
    no_decay = [p for n, p in model.named_parameters() if not (p.ndim >= 2 and "embed_in" not in n)]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": args.wd}, {"params": no_decay, "weight_decay": 0.0}],
        lr=args.lr, betas=(0.9, 0.95), eps=1e-8,
    )
    gen = torch.Generator().manual_seed(args.seed + 1)  # batch sampling
    val_wins = windows(val_stream, args.ctx)
    g_tr = torch.Generator().manual_seed(args.seed + 2)
    all_train_wins = windows(train_stream, args.ctx)
    train_eval_wins = all_train_wins[torch.randperm(len(all_train_wins), generator=g_tr)[: len(val_wins)]]

    ckpt_path = os.path.join(args.workdir, "checkpoint.pt")
    step0 = 0
    history = []  # (step, train_loss_running, val_loss, val_top1)
    train_seconds = 0.0
    if args.resume and os.path.exists(ckpt_path):
        ck = torch.load(ckpt_path, weights_only=False)
        model.load_state_dict(ck["model"])
        opt.load_state_dict(ck["opt"])
        gen.set_state(ck["gen"])
        step0, history, train_seconds = ck["step"], ck["history"], ck["train_seconds"]
        log(f"resumed at step {step0}")

    # ---- train
    tokens_per_step = args.batch * args.ctx
    t0 = time.time() - train_seconds
    run_loss, run_n = 0.0, 0
    hi = len(train_stream) - args.ctx - 1
    for step in range(step0, args.steps):
        for g in opt.param_groups:
            g["lr"] = lr_at(step, args)
        starts = torch.randint(0, hi, (args.batch,), generator=gen)
        batch = torch.stack([train_stream[s : s + args.ctx + 1] for s in starts.tolist()])
        logits = model(input_ids=batch[:, :-1]).logits
        loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), batch[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        run_loss += loss.item()
        run_n += 1
        done = step + 1
        if done % 50 == 0 or done == args.steps:
            el = time.time() - t0
            log(f"step {done:5d}/{args.steps}  loss {run_loss / run_n:.4f}  lr {lr_at(step, args):.2e}  "
                f"{(done - step0) * tokens_per_step / max(1e-9, el - train_seconds):.0f} tok/s  {el:.0f}s")
        if done % args.eval_every == 0 or done == args.steps:
            vl, vp1, vacc = evaluate(model, val_wins)
            history.append((done, run_loss / max(1, run_n), vl, vp1))
            log(f"  eval step {done}: val loss {vl:.4f} (ppl {math.exp(vl):.2f}), top-1 prob {vp1:.3f}, acc {vacc:.3f}")
            run_loss, run_n = 0.0, 0
        if done % args.ckpt_every == 0 and done < args.steps:
            torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "gen": gen.get_state(),
                        "step": done, "history": history, "train_seconds": time.time() - t0},
                       ckpt_path + ".tmp")
            os.replace(ckpt_path + ".tmp", ckpt_path)
    train_seconds = time.time() - t0
    if os.path.exists(ckpt_path):  # only needed to resume an interrupted run
        os.remove(ckpt_path)
    tokens_seen = args.steps * tokens_per_step
    log(f"training done: {args.steps} steps, {tokens_seen} tokens ({tokens_seen / len(train_stream):.2f} epochs), "
        f"{train_seconds:.0f}s")

    tr_loss32, tr_p1_32, tr_acc32 = evaluate(model, train_eval_wins)
    va_loss32, va_p1_32, va_acc32 = evaluate(model, val_wins)
    log(f"fp32 final: train loss {tr_loss32:.4f} (ppl {math.exp(tr_loss32):.2f}), "
        f"val loss {va_loss32:.4f} (ppl {math.exp(va_loss32):.2f})")

    # ---- save (weights stored as float16, like pythia's checkpoints)
    out = args.out
    os.makedirs(out, exist_ok=True)
    for f in os.listdir(out):  # start clean (only files this script writes live here)
        p = os.path.join(out, f)
        if os.path.isfile(p):
            os.remove(p)
    model.eval()
    model.to(torch.float16)
    model.save_pretrained(out, safe_serialization=True)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token=EOT, eos_token=EOT, unk_token=EOT, model_max_length=args.ctx
    )
    fast.save_pretrained(out)
    with open(os.path.join(out, "train_log.tsv"), "w") as f:
        f.write("step\ttrain_loss_running\tval_loss\tval_top1_prob\n")
        for s, a, b, c in history:
            f.write(f"{s}\t{a:.4f}\t{b:.4f}\t{c:.4f}\n")

    # ---- prompts
    os.makedirs(args.prompts_out, exist_ok=True)
    prompt_ids = [tok.encode(p).ids for p in PROMPTS]
    with open(os.path.join(args.prompts_out, "default.txt"), "w") as f:
        f.write("".join(p + "\n" for p in PROMPTS))
    with open(os.path.join(args.prompts_out, "default.ids"), "w") as f:
        f.write("".join(" ".join(map(str, ids)) + "\n" for ids in prompt_ids))

    # ---- sanity checks on what was written
    log("sanity checks on the saved folder:")
    hf_tok = AutoTokenizer.from_pretrained(out)
    rel = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32)
    rel.eval()
    assert rel.config.bos_token_id == 0 and rel.config.eos_token_id == 0
    assert hf_tok.bos_token_id == 0 and hf_tok.eos_token_id == 0
    assert len(PROMPTS) == len(set(PROMPTS)) and 32 <= len(PROMPTS) <= 48
    with open(os.path.join(args.prompts_out, "default.txt")) as f:
        lines_txt = f.read().split("\n")[:-1]
    with open(os.path.join(args.prompts_out, "default.ids")) as f:
        lines_ids = [[int(x) for x in ln.split(" ")] for ln in f.read().split("\n")[:-1]]
    assert lines_txt == PROMPTS and len(lines_ids) == len(PROMPTS)
    for p, ids in zip(lines_txt, lines_ids):
        assert 3 <= len(p.split()) <= 15, p
        hf_ids = hf_tok(p, add_special_tokens=True)["input_ids"]
        assert hf_ids == ids, (p, hf_ids, ids)  # no BOS added, same ids as the tokenizers library
        assert hf_tok.decode(ids) == p, p  # round trip
        assert 0 not in ids
    for t in val_texts[:20]:  # round trip on real text too
        assert hf_tok.decode(hf_tok(t)["input_ids"]) == t
    log(f"  tokenizer: {len(PROMPTS)} prompts round-trip; AutoTokenizer ids == tokenizers ids, no BOS added; "
        f"prompt lengths {min(map(len, lines_ids))}-{max(map(len, lines_ids))} tokens")

    va_loss16, va_p1_16, va_acc16 = evaluate(rel, val_wins)
    tr_loss16, tr_p1_16, tr_acc16 = evaluate(rel, train_eval_wins)
    torch.manual_seed(args.seed + 99)
    rnd = GPTNeoXForCausalLM(config).eval()
    rnd_loss, rnd_p1, rnd_acc = evaluate(rnd, val_wins)
    log(f"  reloaded (fp16 weights, fp32 compute): val loss {va_loss16:.4f} (ppl {math.exp(va_loss16):.2f}), "
        f"train loss {tr_loss16:.4f}")
    log(f"  mean top-1 next-token probability on val: trained {va_p1_16:.4f} vs random-init {rnd_p1:.4f} "
        f"(top-1 accuracy {va_acc16:.4f} vs {rnd_acc:.4f})")
    if not args.smoke:
        assert va_p1_16 > 10 * rnd_p1 and va_p1_16 > 0.2, "model does not look trained"
        assert va_loss16 < unigram_val_ce - 1.0, "val loss not well below the unigram baseline"
    assert abs(va_loss16 - va_loss32) < 0.01, (va_loss16, va_loss32)

    # Per-prompt next-token confidence (what ratiocheck sees at its first decode step).
    p1_prompt = []
    with torch.no_grad():
        for ids in lines_ids:
            lp = torch.log_softmax(rel(input_ids=torch.tensor([ids])).logits[0, -1].float(), -1)
            p1_prompt.append(lp.max().exp().item())

    # ---- completions
    comps = []
    with torch.no_grad():
        for i in SHOWCASE:
            ids = torch.tensor([lines_ids[i]])
            am = torch.ones_like(ids)
            g = rel.generate(input_ids=ids, attention_mask=am, max_new_tokens=32, do_sample=False,
                             pad_token_id=0, eos_token_id=0)
            torch.manual_seed(args.seed + i)
            s = rel.generate(input_ids=ids, attention_mask=am, max_new_tokens=32, do_sample=True,
                             temperature=1.0, top_k=0, top_p=1.0, pad_token_id=0, eos_token_id=0)
            dec = lambda t: hf_tok.decode(t[0, ids.shape[1]:].tolist())  # noqa: E731
            comps.append((PROMPTS[i], dec(g), dec(s)))
            log(f"  [{PROMPTS[i]}]\n    greedy:  {dec(g)!r}\n    sampled: {dec(s)!r}")

    total_seconds = time.time() - t_start
    sizes = {f: os.path.getsize(os.path.join(out, f)) for f in sorted(os.listdir(out))}
    write_readme(out, dict(
        args=args, config=config, n_params=n_params, n_embed=n_embed, corpus_sha=corpus_sha,
        n_chapters=(len(train_idx), len(val_idx)), n_tokens=(len(train_stream), len(val_stream)),
        chars=(sum(map(len, train_texts)), sum(map(len, val_texts))),
        unigram=(unigram_train_entropy, unigram_val_ce),
        final32=(tr_loss32, va_loss32), final16=(tr_loss16, va_loss16, va_p1_16, va_acc16),
        rnd=(rnd_loss, rnd_p1, rnd_acc), history=history, train_seconds=train_seconds,
        total_seconds=total_seconds, tokens_seen=tokens_seen, comps=comps, sizes=sizes,
        p1_prompt=p1_prompt, prompt_lens=[len(x) for x in lines_ids], n_eval_wins=len(val_wins),
        prompt_src=prompt_sources(train_texts, val_texts),
    ))
    sizes = {f: os.path.getsize(os.path.join(out, f)) for f in sorted(os.listdir(out))}
    for f, s in sizes.items():
        log(f"  {s:10d}  {f}")
    log(f"  total {sum(sizes.values()) / 1e6:.2f} MB; wall time {total_seconds:.0f}s")
    assert sum(sizes.values()) < 20.5e6


def prompt_sources(train_texts, val_texts):
    """-> (#prompts in the training text, #only in val, #in neither), verbatim substring match."""
    tr, va = "\n".join(train_texts), "\n".join(val_texts)
    n_tr = sum(p in tr for p in PROMPTS)
    n_va = sum(p not in tr and p in va for p in PROMPTS)
    return n_tr, n_va, len(PROMPTS) - n_tr - n_va


def write_readme(out, r):
    a, c = r["args"], r["config"]
    hist = "\n".join(
        f"| {s} | {tl:.3f} | {vl:.3f} | {math.exp(vl):.2f} | {p1:.3f} |" for s, tl, vl, p1 in r["history"]
    )
    comps = "\n\n".join(
        f"**{p}**\n\n- greedy: `{g!r}`\n- sampled: `{s!r}`" for p, g, s in r["comps"]
    )
    files = "\n".join(f"| `{f}` | {s:,} |" for f, s in r["sizes"].items() if f != "README.md")
    p1 = sorted(r["p1_prompt"])
    tr32, va32 = r["final32"]
    tr16, va16, vp1, vacc = r["final16"]
    rl, rp1, racc = r["rnd"]
    text = f"""# {MODEL_NAME}

ratiocheck's default model: a small **trained** GPT-NeoX (Pythia-architecture) causal language
model, {r['n_params']:,} parameters, with its own 4,000-token byte-level BPE tokenizer, trained
from scratch on the CPU on the King James Version of the Bible. Trained models have peaked
next-token distributions, which is where bf16/fp16 drift between KV-cached decode and the full
forward pass shows up; random weights would hide it. It is built with transformers' own
`GPTNeoXConfig` / `GPTNeoXForCausalLM` and written with `save_pretrained`, so it loads with
`AutoModelForCausalLM.from_pretrained` and `AutoTokenizer.from_pretrained` like any Pythia
checkpoint. It is a test model, not a useful language model.

Generated by `tools/train_default_model.py` (transformers {transformers.__version__},
torch {torch.__version__}, tokenizers {tokenizers.__version__}). Regenerate with:

    pip install -r tools/requirements-train.txt && python3 tools/train_default_model.py

(it installs the Debian corpus packages through `tools/get_corpus.sh` when missing, and also
rewrites `data/prompts/default.txt` and `data/prompts/default.ids`).

## Architecture

| | |
|---|---|
| `model_type` | `gpt_neox` (`GPTNeoXForCausalLM`) |
| layers | {c.num_hidden_layers} |
| hidden size | {c.hidden_size} |
| attention heads | {c.num_attention_heads} (head_dim {c.hidden_size // c.num_attention_heads}) |
| MLP | {c.intermediate_size} (4 x hidden), exact erf GELU (`gelu`) |
| rotary | `partial_rotary_factor` 0.25 (16 of 64 dims per head), theta 10000 |
| residual | parallel (`use_parallel_residual: true`) |
| LayerNorm eps | 1e-5 |
| embeddings | untied `embed_in` / `embed_out` |
| vocabulary | {c.vocab_size} (tokenizer 4,000, padded to a multiple of 128 as Pythia does; rows 4000-{c.vocab_size - 1} are never seen as input) |
| `max_position_embeddings` | {c.max_position_embeddings} (= the training context) |
| bos / eos | 0 / 0 (`<|endoftext|>`) |
| parameters | {r['n_params']:,} ({r['n_params'] - r['n_embed']:,} non-embedding) |
| stored dtype | **float16** (`model.safetensors`, F16 tensors, `"dtype": "float16"` in config.json), like Pythia's checkpoints; trained in fp32 and rounded once at save |

Files:

| file | bytes |
|---|---|
{files}

`train_log.tsv` is the loss curve below. transformers 5 writes no `special_tokens_map.json`;
the special tokens are in `tokenizer_config.json` and `tokenizer.json`.

## Tokenizer

Byte-level BPE trained with HF `tokenizers` (`BpeTrainer`, vocab 4,000, min_frequency 2, initial
alphabet = all 256 byte symbols, so any UTF-8 text encodes) on the training chapters only.
ByteLevel pre-tokenizer with `add_prefix_space: false` and the GPT-2 regex (`use_regex: true`),
no normalizer, ByteLevel decoder, ByteLevel post-processor (`trim_offsets: true`, adds no
tokens). One special token, `<|endoftext|>` = id 0, which is bos, eos and unk, as in Pythia.
Encoding adds no BOS (neither the `tokenizers` library nor `AutoTokenizer`). About
{r['chars'][0] / r['n_tokens'][0]:.2f} characters per token on the corpus.

## Corpus

The King James Version of the Bible (1611; **public domain**), from Debian 12 (bookworm):

- packages: {CORPUS_SOURCE['packages']}
- source package: {CORPUS_SOURCE['source_package']}
- license: {CORPUS_SOURCE['license']}

`tools/get_corpus.sh` installs them with `apt-get` and dumps the text with
`bible -l0 Genesis1:1-Revelation22:21` (4.3 MB, SHA-256 `{r['corpus_sha']}`, checked by the
training script). Each chapter becomes one document: its verses one per line, without verse
numbers or chapter headings; documents are joined with `<|endoftext|>` (Pythia-style packing).
Every 20th chapter (index % 20 == 7, {r['n_chapters'][1]} chapters from all parts of the book) is
held out for validation: train {r['n_chapters'][0]} chapters / {r['n_tokens'][0]:,} tokens,
val {r['n_chapters'][1]} chapters / {r['n_tokens'][1]:,} tokens.

## Training

| | |
|---|---|
| seed | {a.seed} (init), {a.seed + 1} (batch sampling) |
| device | CPU, fp32, `torch.set_num_threads({a.threads})` |
| steps | {a.steps} |
| batch | {a.batch} random windows x {a.ctx} tokens = {a.batch * a.ctx} tokens/step ({r['tokens_seen']:,} tokens, {r['tokens_seen'] / r['n_tokens'][0]:.1f} epochs) |
| optimizer | AdamW, betas (0.9, 0.95), eps 1e-8, weight decay {a.wd} (not on biases, LayerNorms, `embed_in`), grad-norm clip 1.0 |
| learning rate | peak {a.lr}, linear warmup {a.warmup} steps, cosine decay to {a.lr * 0.1:g} |
| dropout | none |
| training time | {r['train_seconds'] / 60:.1f} min, {r['tokens_seen'] / r['train_seconds']:.0f} tokens/s (whole script {r['total_seconds'] / 60:.1f} min) |

Loss curve (train = mean of the training batches since the previous row; val = all
{r['n_tokens'][1]:,} validation tokens in {a.ctx}-token windows):

| step | train loss | val loss | val ppl | val mean top-1 prob |
|---|---|---|---|---|
{hist}

## Results

Losses in nats per token.

| | train | val |
|---|---|---|
| final, fp32 weights | {tr32:.4f} (ppl {math.exp(tr32):.2f}) | {va32:.4f} (ppl {math.exp(va32):.2f}) |
| as stored (fp16 weights, fp32 compute) | {tr16:.4f} (ppl {math.exp(tr16):.2f}) | {va16:.4f} (ppl {math.exp(va16):.2f}) |
| unigram baseline (train token frequencies) | entropy {r['unigram'][0]:.3f} | cross-entropy {r['unigram'][1]:.3f} |
| random init (same config) | | {rl:.4f} |

(train is measured on {r['n_eval_wins']} random {a.ctx}-token windows of the training text, as many as val has.)

On the validation text the stored model's mean top-1 next-token probability is **{vp1:.3f}**
(top-1 accuracy {vacc:.3f}); for a random-init model of the same config it is {rp1:.5f}
(accuracy {racc:.5f}). At the end of the {len(r['p1_prompt'])} default prompts the top-1
probability of the next token ranges from {p1[0]:.3f} to {p1[-1]:.3f} (median {p1[len(p1) // 2]:.3f}).

## Completions

From HF `generate` with the stored model (fp32 compute), 32 new tokens; greedy, and plain
sampling (temperature 1, no top-k/top-p, `torch.manual_seed({a.seed} + prompt index)`):

{comps}

## Prompts

`data/prompts/default.txt`: {len(PROMPTS)} prompts, one per line, verse openings and narrative
starts in the corpus's style: {r['prompt_src'][0]} occur verbatim in the training text,
{r['prompt_src'][1]} only in the held-out chapters, {r['prompt_src'][2]} nowhere in the corpus.
`data/prompts/default.ids`: the same prompts, same order, as token ids of this tokenizer
(space-separated, no BOS), {min(r['prompt_lens'])}-{max(r['prompt_lens'])} tokens each.
"""
    with open(os.path.join(out, "README.md"), "w") as f:
        f.write(text)


if __name__ == "__main__":
    sys.exit(main())
