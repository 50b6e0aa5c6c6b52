#!/usr/bin/env python3
"""Routing cases for the routing record and R3's replay (data/fixtures/routing/), computed with PyTorch.

Each case draws router inputs h (bf16) and a router weight W (bf16) and a second side's inputs h2 =
bf16(h + small noise) (the other side's hidden state), and records:

- the sampler's router logits, F.linear(h, W) in bf16, and the trainer's, F.linear(h2, W) in bf16
  (router=dtype) or F.linear(h2.float(), W.float()) in fp32 (router=fp32);
- each side's experts, torch.topk of the fp32 softmax of its logits (transformers' TopKRouter);
- the trainer's weights under R3's replay of the sampler's experts, as miles' replayed router computes
  them (radixark/miles, miles/backends/fsdp_utils/models/replay_routers.py: the fp32 softmax of the
  trainer's logits gathered at the replayed experts, renormalised when norm_topk_prob, cast to the
  logits' dtype);
- the routing statistics of docs/routing.md over the rows taken as [tokens, layers] (layers = meta[4]),
  with a log ratio per token drawn at random: per layer the tokens whose expert sets differ (flips), whose
  sets share no expert (miles' R3 mismatch, replay_base.py check_replay_result) and whose first flip is
  there; tokens with a flip; the sum of |common experts| over (token, layer) pairs; the mean |log r| of
  the tokens with and without a flip and the share of the sum of |log r| the former hold.

tests/test_routing.c feeds the logits and the experts to ratiocheck's ops and compares. Versions:
tools/requirements-fixtures.txt, written into the README beside the data.

    python3 tools/make_routing_fixtures.py            # writes data/fixtures/routing/
"""

import argparse
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from st_canonical import save_safetensors_canonical  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# name, experts, top-k, norm_topk_prob, hidden, rows, layers, trainer router in fp32, noise, seed
CASES = [
    ("e7k3_norm", 7, 3, True, 48, 240, 2, False, 0.02, 1),
    ("e60k4", 60, 4, False, 64, 300, 3, False, 0.01, 2),
    ("e128k8_norm_fp32", 128, 8, True, 96, 128, 4, True, 0.005, 3),
    ("e16k2_fp32", 16, 2, False, 32, 200, 2, True, 0.03, 4),
    ("e8k1", 8, 1, False, 32, 200, 2, False, 0.05, 5),  # top-1: every flip shares no expert
]


def topk(logits, k):
    return torch.topk(torch.softmax(logits, dim=-1, dtype=torch.float), k, dim=-1)


def run_case(name, E, k, norm, H, T, Lm, fp32, noise, seed):
    torch.manual_seed(seed)
    W = (torch.randn(E, H) / H ** 0.5).to(torch.bfloat16)
    h = torch.randn(T, H).to(torch.bfloat16)
    h2 = (h.float() + noise * torch.randn(T, H)).to(torch.bfloat16)
    ls = F.linear(h, W)
    lt = F.linear(h2.float(), W.float()) if fp32 else F.linear(h2, W)
    _, idx_s = topk(ls, k)
    _, idx_t = topk(lt, k)
    # R3: the trainer's own probabilities at the sampler's experts
    w = torch.softmax(lt, dim=-1, dtype=torch.float).gather(1, idx_s)
    if norm:
        w = w / w.sum(dim=-1, keepdim=True)
    w = w.to(lt.dtype)
    # statistics over [tokens, layers]
    G = T // Lm
    a, b = idx_s.view(G, Lm, k), idx_t.view(G, Lm, k)
    common = (a[..., :, None] == b[..., None, :]).any(-1).sum(-1)  # [G, Lm]
    flip = common < k
    tok_flip = flip.any(-1)
    first = torch.where(tok_flip, flip.int().argmax(-1), torch.full((G,), -1))
    lr = (torch.randn(G, dtype=torch.float64) * 0.01).float()
    x = lr.double().abs()
    xf, xs = x[tok_flip], x[~tok_flip]
    stats = torch.tensor([float(tok_flip.sum()), float(common.sum()),
                          float(xf.mean()) if xf.numel() else float("nan"),
                          float(xs.mean()) if xs.numel() else float("nan"),
                          float(xf.sum() / x.sum())], dtype=torch.float64)
    t = {
        f"{name}.logits_sampler": ls.float(),
        f"{name}.logits_trainer": lt.float(),
        f"{name}.experts_sampler": idx_s.to(torch.int32),
        f"{name}.experts_trainer": idx_t.to(torch.int32),
        f"{name}.replay_weights": w.float(),
        f"{name}.log_ratio": lr,
        f"{name}.layer_flips": flip.sum(0).to(torch.int32),
        f"{name}.layer_no_common": (common == 0).sum(0).to(torch.int32),
        f"{name}.layer_first": torch.stack([(first == m).sum() for m in range(Lm)]).to(torch.int32),
        f"{name}.stats": stats,
        f"{name}.meta": torch.tensor([E, k, int(norm), T, Lm, int(fp32)], dtype=torch.int32),
    }
    line = (f"| `{name}` | {E} | {k} | {norm} | {H} | {T} | {Lm} | {'fp32' if fp32 else 'bf16'} | "
            f"{int(tok_flip.sum())} of {G} | {int((common == 0).sum())} |")
    return t, line


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.path.join(REPO, "data", "fixtures", "routing"))
    args = ap.parse_args()
    torch.set_num_threads(1)
    os.makedirs(args.out, exist_ok=True)
    tensors, lines = {}, []
    for c in CASES:
        t, line = run_case(*c)
        tensors.update({k: v.contiguous() for k, v in t.items()})
        lines.append(line)
    meta = {"torch_version": torch.__version__, "numpy_version": np.__version__,
            "cases": ",".join(c[0] for c in CASES)}
    save_safetensors_canonical(tensors, os.path.join(args.out, "routing_ops.safetensors"), meta)
    with open(os.path.join(args.out, "README.md"), "w") as f:
        f.write("# Routing cases\n\n")
        f.write("Written by `python3 tools/make_routing_fixtures.py` (its docstring says what each tensor is) with "
                f"torch {torch.__version__}, numpy {np.__version__} (pins: `tools/requirements-fixtures.txt`), on "
                "the CPU, one thread. Checked by `tests/test_routing.c`.\n\n")
        f.write("| case | experts | top-k | norm_topk_prob | hidden | rows | layers | trainer's logits | "
                "tokens with a flip | (token, layer) pairs with no common expert |\n"
                "|---|---|---|---|---|---|---|---|---|---|\n")
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
