#!/usr/bin/env python3
"""Make data/fixtures/align/: rollouts logged with the settings misdeclared, for score's
alignment hypotheses (src/check/align.h; tests/test_score.c case align on the bundled model,
tests/test_real.c case align on SmolLM2-135M-Instruct).

For each model (the bundled data/models/pythia-rc-tiny; with --real DIR also the folder
tools/get_real_model.py prints, written with the prefix smollm2_) loaded in fp32 with
``AutoModelForCausalLM.from_pretrained(dir, dtype=torch.float32, attn_implementation="eager")``,
the prompts of tools/make_score_fixtures.py (bundled) or tools/make_score_fixtures_real.py
(SmolLM2) each get SAMPLES continuations from ``model.generate(do_sample=True, temperature=T,
top_k=0, top_p=1, output_logits=True, return_dict_in_generate=True)`` (seed SEED + prompt, no
EOS stop) for T = 0.7 and 1.3, and each token is logged with ``log_softmax(logits / T)`` of
generate's raw logits (what an engine's processed log-probs are at temperature T, no top-k /
top-p). Written per T (07, 13), PREFIX "" or "smollm2_":
  PREFIXtTT_nokey.jsonl     prompt_ids, response_ids, logprobs: no setting stated (read as raw)
  PREFIXtTT_key.jsonl       the same with "temperature": T (no "logprobs_kind": read as raw)
  PREFIXtTT_declared.jsonl  the same with "temperature": T and "logprobs_kind": "processed"
and once per model, another tokenizer's ids: each temperature-1 rollout's response text
(``tokenizer.decode(ids, skip_special_tokens=True)`` of the model's own tokenizer) encoded with
data/fixtures/tokenizers/llama2_sentencepiece (a 1,156-token SentencePiece-style BPE, every id
inside either model's vocabulary), logged with the rollout's own raw log-probs in order,
cycled to the new length (only the ids are foreign):
  PREFIXothertok_notext.jsonl    prompt_ids, response_ids (the other tokenizer's), logprobs
  PREFIXothertok_text.jsonl      the same with "response_text" (the text they encode)
versions.json records the versions and settings.

Run from the repository root (versions in tools/requirements-score-fixtures.txt; one thread,
deterministic algorithms):
    python3 tools/make_align_fixtures.py --real "$(python3 tools/get_real_model.py | tail -1)"
"""
import argparse
import json
import os

import numpy as np
import tokenizers
import torch
import transformers
from transformers import AutoModelForCausalLM, AutoTokenizer

import make_score_fixtures as msf  # tools/
import make_score_fixtures_real as msr  # tools/

ROOT = msf.ROOT
OUT = os.path.join(ROOT, "data", "fixtures", "align")
OTHER = os.path.join(ROOT, "data", "fixtures", "tokenizers", "llama2_sentencepiece", "tokenizer.json")
SEED = 4321
SAMPLES = 2
TEMPS = ((0.7, "07"), (1.3, "13"))


def sample_at(model, prompt_list, length_of, T):
    model.generation_config.eos_token_id = None
    out = []
    for i, p in enumerate(prompt_list):
        n = length_of(i)
        torch.manual_seed(SEED + i)
        with torch.no_grad():
            g = model.generate(torch.tensor([p]), attention_mask=torch.ones(1, len(p), dtype=torch.long),
                               do_sample=True, temperature=T, top_k=0, top_p=1.0, max_new_tokens=n,
                               num_return_sequences=SAMPLES, output_logits=True, return_dict_in_generate=True,
                               pad_token_id=0)
        for s in range(SAMPLES):
            resp = [int(x) for x in g.sequences[s, len(p):]]
            assert len(resp) == n, (len(resp), n)
            lps = [float(torch.log_softmax(g.logits[t][s].float() / T, dim=-1)[resp[t]]) for t in range(n)]
            out.append({"prompt_ids": p, "response_ids": resp, "logprobs": lps})
    return out


def write(path, rows):
    with open(path, "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")


def one_model(prefix, model_dir, prompt_list, length_of, other):
    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32, attn_implementation="eager").eval()
    counts = {}
    for T, tag in TEMPS:
        rs = sample_at(model, prompt_list, length_of, T)
        write(os.path.join(OUT, f"{prefix}t{tag}_nokey.jsonl"), rs)
        write(os.path.join(OUT, f"{prefix}t{tag}_key.jsonl"), [dict(r, temperature=T) for r in rs])
        write(os.path.join(OUT, f"{prefix}t{tag}_declared.jsonl"),
              [dict(r, temperature=T, logprobs_kind="processed") for r in rs])
        counts[f"t{tag}"] = sum(len(r["response_ids"]) for r in rs)
    base = msf.sample_rollouts(model, tok, prompt_list, length_of, SAMPLES, SEED)
    notext, text = [], []
    for r in base:
        ids = other.encode(r["text"], add_special_tokens=False).ids
        if not ids:
            continue
        lps = [r["logprobs"][k % len(r["logprobs"])] for k in range(len(ids))]
        rec = {"prompt_ids": r["prompt_ids"], "response_ids": ids, "logprobs": lps}
        notext.append(rec)
        text.append(dict(rec, response_text=r["text"]))
    write(os.path.join(OUT, f"{prefix}othertok_notext.jsonl"), notext)
    write(os.path.join(OUT, f"{prefix}othertok_text.jsonl"), text)
    counts["othertok"] = sum(len(r["response_ids"]) for r in notext)
    return counts


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--real", help="SmolLM2-135M-Instruct's folder (tools/get_real_model.py prints it)")
    args = ap.parse_args()
    msf.setup_torch()
    os.makedirs(OUT, exist_ok=True)
    other = tokenizers.Tokenizer.from_file(OTHER)
    info = {"generator": "tools/make_align_fixtures.py", "torch": torch.__version__,
            "transformers": transformers.__version__, "tokenizers": tokenizers.__version__,
            "numpy": np.__version__, "seed": SEED, "samples": SAMPLES, "temperatures": [t for t, _ in TEMPS],
            "other_tokenizer": "data/fixtures/tokenizers/llama2_sentencepiece", "models": {}}
    info["models"]["pythia-rc-tiny"] = one_model("", msf.MODEL, msf.prompts(), msf.lengths, other)
    if args.real:
        info["models"]["SmolLM2-135M-Instruct"] = one_model("smollm2_", args.real, msr.prompts(), msr.lengths, other)
    with open(os.path.join(OUT, "versions.json"), "w") as f:
        json.dump(info, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
