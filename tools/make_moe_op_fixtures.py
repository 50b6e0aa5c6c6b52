#!/usr/bin/env python3
"""Op-level cases of the MoE rule in bf16 (data/fixtures/moe_ops/), from transformers' own blocks.

For each case a Qwen2MoeSparseMoeBlock or MixtralSparseMoeBlock (experts_implementation "eager") runs
in bf16 on the CPU over random rows, and the script records, besides the block's output:

- the router logits (bf16, the router GEMM's output),
- torch.topk's experts and the routing weights as the router returns them (bf16 for Qwen2-MoE,
  fp32 for Mixtral),
- for every row t and top-k slot j, the output of expert idx[t, j] on row t before its weighting
  (the eager experts loop's ``current_hidden_states`` after down_proj), gathered by repeating HF's loop
  and checked to give HF's output bit for bit,
- Qwen2-MoE: the shared expert's output and its gate logit (bf16, module hooks).

tests/test_moe.c feeds the router logits to the routing op and the expert outputs to the
accumulation op (the GEMMs are checked elsewhere: docs/numerics.md) and compares with PyTorch bit
for bit. Versions: tools/requirements-fixtures.txt (the pinned torch / transformers), written into
the README beside the data.

    python3 tools/make_moe_op_fixtures.py            # writes data/fixtures/moe_ops/
"""

import argparse
import os
import sys

import numpy as np
import torch
import transformers
from transformers import MixtralConfig, Qwen2MoeConfig
from transformers.models.mixtral.modeling_mixtral import MixtralSparseMoeBlock
from transformers.models.qwen2_moe.modeling_qwen2_moe import Qwen2MoeSparseMoeBlock

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from st_canonical import save_safetensors_canonical  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# name, family, experts, top-k, norm_topk_prob, hidden, expert inner size, rows, seed
CASES = [
    ("qwen2_e6k3", "qwen2_moe", 6, 3, False, 64, 40, 37, 1),
    ("qwen2_e64k8_norm", "qwen2_moe", 64, 8, True, 96, 32, 53, 2),
    ("mixtral_e8k2", "mixtral", 8, 2, True, 64, 48, 41, 3),
    ("qwen2_e128k8_ties", "qwen2_moe", 128, 8, False, 32, 16, 300, 4),  # small hidden: bf16 logit ties
]


def make_block(family, E, k, norm, H, Im):
    if family == "mixtral":
        cfg = MixtralConfig(hidden_size=H, intermediate_size=Im, num_local_experts=E, num_experts_per_tok=k,
                            experts_implementation="eager")
        return MixtralSparseMoeBlock(cfg), cfg
    cfg = Qwen2MoeConfig(hidden_size=H, moe_intermediate_size=Im, shared_expert_intermediate_size=Im + 8,
                         num_experts=E, num_experts_per_tok=k, norm_topk_prob=norm, experts_implementation="eager")
    return Qwen2MoeSparseMoeBlock(cfg), cfg


def run_case(name, family, E, k, norm, H, Im, T, seed):
    torch.manual_seed(seed)
    block, cfg = make_block(family, E, k, norm, H, Im)
    assert cfg._experts_implementation == "eager"
    with torch.no_grad():
        for p in block.parameters():
            p.normal_(0.0, 0.5 / H ** 0.5 * 4)
    block = block.to(torch.bfloat16).eval()
    x = torch.randn(1, T, H).to(torch.bfloat16)
    rec = {}
    hooks = []
    if family == "qwen2_moe":
        hooks.append(block.shared_expert.register_forward_hook(lambda m, i, o: rec.__setitem__("shared", o)))
        hooks.append(block.shared_expert_gate.register_forward_hook(lambda m, i, o: rec.__setitem__("sgate", o)))
    with torch.no_grad():
        o = block(x)
        out = o[0] if isinstance(o, tuple) else o
        h = x.view(-1, H)
        logits, weights, idx = block.gate(h)
        # HF's eager experts loop, repeated to keep each expert's output before its weighting
        ex = block.experts
        y = torch.zeros(T, k, H, dtype=torch.bfloat16)
        final = torch.zeros_like(h)
        mask = torch.nn.functional.one_hot(idx, num_classes=E + 1).permute(2, 1, 0)
        hit = torch.greater(mask.sum(dim=(-1, -2)), 0).nonzero()
        for e in hit:
            e = e[0]
            if e == E:
                continue
            pos, tok = torch.where(mask[e])
            gate, up = torch.nn.functional.linear(h[tok], ex.gate_up_proj[e]).chunk(2, dim=-1)
            cur = torch.nn.functional.linear(ex.act_fn(gate) * up, ex.down_proj[e])
            y[tok, pos] = cur
            final.index_add_(0, tok, (cur * weights[tok, pos, None]).to(final.dtype))
        if family == "qwen2_moe":
            final = final + torch.sigmoid(rec["sgate"]) * rec["shared"]
        assert torch.equal(final.view(1, T, H), out), f"{name}: the repeated loop differs from HF's block"
    for hk in hooks:
        hk.remove()
    probs = torch.softmax(logits.float(), -1)
    srt = probs.sort(-1, descending=True).values
    boundary_ties = int((srt[:, k - 1] == srt[:, k]).sum())
    t = {
        f"{name}.x": x.view(T, H).float(),
        f"{name}.router_logits": logits.float(),
        f"{name}.topk_idx": idx.to(torch.int32),
        f"{name}.topk_w": weights.float(),
        f"{name}.expert_out": y.float(),
        f"{name}.out": out.view(T, H).float(),
        f"{name}.meta": torch.tensor([E, k, int(norm), H, T, int(family == "mixtral")], dtype=torch.int32),
    }
    if family == "qwen2_moe":
        t[f"{name}.shared_out"] = rec["shared"].view(T, H).float()
        t[f"{name}.shared_gate"] = rec["sgate"].view(T).float()
    return t, boundary_ties


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.path.join(REPO, "data", "fixtures", "moe_ops"))
    args = ap.parse_args()
    torch.set_num_threads(1)
    os.makedirs(args.out, exist_ok=True)
    tensors, lines = {}, []
    for c in CASES:
        t, ties = run_case(*c)
        tensors.update({k: v.contiguous() for k, v in t.items()})
        lines.append(f"| `{c[0]}` | {c[1]} | {c[2]} | {c[3]} | {c[4]} | {c[5]} | {c[6]} | {c[7]} | {ties} |")
    meta = {"torch_version": torch.__version__, "transformers_version": transformers.__version__,
            "numpy_version": np.__version__, "cases": ",".join(c[0] for c in CASES)}
    save_safetensors_canonical(tensors, os.path.join(args.out, "moe_ops_bf16.safetensors"), meta)
    with open(os.path.join(args.out, "README.md"), "w") as f:
        f.write("# MoE op cases (bf16)\n\n")
        f.write("Written by `python3 tools/make_moe_op_fixtures.py` (its docstring says what each tensor is) with "
                f"torch {torch.__version__}, transformers {transformers.__version__}, numpy {np.__version__} "
                "(pins: `tools/requirements-fixtures.txt`), on the CPU, one thread. Checked by `tests/test_moe.c`.\n\n")
        f.write("| case | block | experts | top-k | norm_topk_prob | hidden | expert inner | rows | "
                "rows with a tie at the k-th probability |\n|---|---|---|---|---|---|---|---|---|\n")
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
