#!/usr/bin/env python3
"""Spec conformance for the `vllm` rollout format: OpenAI completions responses serialised by the
openai Python library itself.

No sampler runs here (vLLM and SGLang have no CPU install in this environment; see
docs/testing-spec-conformance.md), so the responses cannot be captured from a server. What the real
client library can do is define and write the response objects: this script builds, for the
rollouts of data/fixtures/score/hf_fp32.jsonl (HF generate's tokens and log-probs), one
``openai.types.Completion`` per prompt with ``Completion.model_validate`` (the library's pydantic
schema: field names, types, the finish_reason literals) and writes ``model_dump_json()`` per line to
data/fixtures/spec/openai_completions_fp32.jsonl. The token ids ride where vLLM puts them:
``logprobs.tokens`` as "token_id:N" (vLLM's --return-tokens-as-token-ids) and the extra field
``prompt_token_ids`` (vLLM's return_token_ids), which the library keeps as an extra field.
tests/test_spec.c (case openai_completion) reads it with `--rollouts-format vllm` and compares every
id and log-prob with the same rollouts read from hf_fp32.jsonl.

Usage:
    pip install openai==3.63.0
    python3 tools/make_openai_fixtures.py [--out DIR]
"""
import argparse
import json
import os
import platform

import openai
from openai.types import Completion

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(ROOT, "data", "fixtures", "spec"))
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    rows = [json.loads(x) for x in open(os.path.join(ROOT, "data", "fixtures", "score", "hf_fp32.jsonl"))]
    groups = []
    for r in rows:  # consecutive rollouts of one prompt -> one response with several choices
        if groups and groups[-1][0]["prompt_ids"] == r["prompt_ids"]:
            groups[-1].append(r)
        else:
            groups.append([r])
    lines = []
    for i, g in enumerate(groups):
        resp = Completion.model_validate({
            "id": f"cmpl-{i}", "object": "text_completion", "created": 0, "model": "pythia-rc-tiny",
            "choices": [{"index": j, "text": "", "finish_reason": "length",
                         "logprobs": {"text_offset": list(range(len(r["response_ids"]))),
                                      "token_logprobs": r["logprobs"],
                                      "tokens": [f"token_id:{t}" for t in r["response_ids"]],
                                      "top_logprobs": None}} for j, r in enumerate(g)],
            "prompt_token_ids": g[0]["prompt_ids"],
        })
        assert resp.model_extra == {"prompt_token_ids": g[0]["prompt_ids"]}
        lines.append(resp.model_dump_json(exclude_none=True))
    path = os.path.join(args.out, "openai_completions_fp32.jsonl")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    with open(os.path.join(args.out, "openai_completions_fp32.md"), "w") as f:
        f.write(f"# openai_completions_fp32.jsonl\n\nWritten by `tools/make_openai_fixtures.py` (do not edit) with "
                f"openai {openai.__version__} (pydantic models `openai.types.Completion`), Python "
                f"{platform.python_version()}: {len(groups)} responses, {len(rows)} choices, from "
                f"`data/fixtures/score/hf_fp32.jsonl`.\n")
    print(f"{path}: {len(groups)} responses, {len(rows)} choices (openai {openai.__version__})")


if __name__ == "__main__":
    main()
