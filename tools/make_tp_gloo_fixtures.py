#!/usr/bin/env python3
"""Spec conformance for the TP reduce: torch.distributed's all_reduce (gloo backend) on stored partials.

Writes data/fixtures/tp/tp_gloo.safetensors and tp_gloo.md for tests/test_spec.c (case tp_gloo).
For each dtype (bf16, fp16), shape [M, N] and TP degree k, k CPU processes
(torch.multiprocessing, init_process_group("gloo", init_method="file://...")) each hold one partial
P_r [M, N] in the dtype and run dist.all_reduce(P_r, SUM); rank 0's result is stored with the
partials. Nothing here restates ratiocheck's rule: the output is what gloo computes.

What gloo's CPU ring does (gloo/allreduce.cc, ring(); checked by this script on every tensor, the
counts in tp_gloo.md): the tensor is cut into 2k segments of ceil(numel / 2k) elements, two per rank,
so element e is in chunk c = floor(e / (2 ceil(numel / 2k))), and its sum is P_{c-1} + P_{c-2} + ...
+ P_c (indices mod k, each add one rounding to the dtype): a ring in the opposite direction of the
rule ratiocheck's `ring` mode states for NCCL (chunk floor(e k / numel), P_{c+1} + ... + P_c). The
two give the same bits at k = 2 (every mode is RN(P0 + P1)) and at k = 3 when the chunks coincide
(2k divides numel; the first add is commutative, the last addend is the same). Those tensors are
stored and tests/test_spec.c (case tp_gloo) checks ratiocheck's reduce against them; for the others
(k = 3 with other sizes, k >= 4) the script records per mode how many elements differ.

Usage:
    pip install -r tools/requirements-tp-fixtures.txt
    python3 tools/make_tp_gloo_fixtures.py                # writes data/fixtures/tp/tp_gloo.*
    python3 tools/make_tp_gloo_fixtures.py --out /tmp/tp  # somewhere else (to diff)
Seeded; a few seconds per process group (spawned processes).
"""

import argparse
import os
import platform
import sys
import tempfile

os.environ["CUDA_VISIBLE_DEVICES"] = ""

import numpy as np  # noqa: E402
import safetensors  # noqa: E402
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_tp_fixtures import MODES, reduce  # noqa: E402  (the rule as make_tp_fixtures states it, for the record)
from st_canonical import save_safetensors_canonical  # noqa: E402

SEED = 20261205
# numel not a multiple of k too: the chunk boundaries floor(e k / numel) fall inside rows
SHAPES = [(7, 48), (5, 13), (20, 40), (3, 11), (6, 35), (9, 14)]
STORED_K = [2, 3]          # stored and checked in C where gloo's order and the `ring` rule agree ...
PROBED_K = [4, 6, 8]       # ... measured only (tp_gloo.md): gloo's ring runs the other way


def stored(k, numel):
    """k = 2: every mode is RN(P0 + P1). k = 3: the directions agree, and the chunks do when 2k | numel."""
    return k == 2 or (k == 3 and numel % (2 * k) == 0)
DTS = {"bf16": torch.bfloat16, "f16": torch.float16}


def _worker(rank, k, jobs, initf, q):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method="file://" + initf, rank=rank, world_size=k)
    out = []
    for raw, dtype, shape in jobs:
        t = torch.from_numpy(np.frombuffer(raw[rank], dtype=np.int16).copy()).view(dtype).reshape(shape)
        dist.all_reduce(t, op=dist.ReduceOp.SUM)
        out.append(t.view(torch.int16).numpy().tobytes())
    q.put((rank, out))
    dist.barrier()
    dist.destroy_process_group()


def gloo_all_reduce(part_lists):
    """dist.all_reduce(SUM) over k gloo ranks (one process group) for each list of k partials in
    part_lists, one call per list; every rank's results (they must agree)."""
    k = len(part_lists[0])
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    fd, initf = tempfile.mkstemp(prefix="rc_gloo_")
    os.close(fd)
    os.unlink(initf)
    jobs = [([p.contiguous().view(torch.int16).numpy().tobytes() for p in parts], parts[0].dtype,
             tuple(parts[0].shape)) for parts in part_lists]
    procs = [ctx.Process(target=_worker, args=(r, k, jobs, initf, q)) for r in range(k)]
    for p in procs:
        p.start()
    got = dict(q.get(timeout=600) for _ in range(k))
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0, p.exitcode
    if os.path.exists(initf):
        os.unlink(initf)
    res = []
    for j, parts in enumerate(part_lists):
        outs = [torch.from_numpy(np.frombuffer(got[r][j], dtype=np.int16).copy()).view(parts[0].dtype)
                .reshape(parts[0].shape) for r in range(k)]
        for o in outs[1:]:
            assert torch.equal(o.view(torch.int16), outs[0].view(torch.int16)), "gloo ranks disagree"
        res.append(outs[0])
    return res


def reverse_ring(parts):
    """gloo's ring (gloo/allreduce.cc, ring(): 2k segments of ceil(numel / 2k) elements, two per rank, for
    tensors below its segment-size limit), as measured: chunk c = floor(e / (2 ceil(numel / 2k))),
    summed P_{c-1} + P_{c-2} + ... + P_c (indices mod k)."""
    k = len(parts)
    flat = [p.reshape(-1) for p in parts]
    numel = flat[0].numel()
    owner = torch.arange(numel) // (2 * -(-numel // (2 * k)))
    out = torch.empty_like(flat[0])
    for c in range(k):
        sel = owner == c
        y = flat[(c - 1) % k][sel]
        for j in range(2, k + 1):
            y = y + flat[(c - j) % k][sel]
        out[sel] = y
    return out.reshape(parts[0].shape)


def ndiff(a, b):
    return int((a.view(torch.int16) != b.view(torch.int16)).sum())


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data",
                                                  "fixtures", "tp"))
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    torch.set_num_threads(1)
    tensors, rows = {}, []
    for k in STORED_K + PROBED_K:
        cases, part_lists = [], []
        for dname, dt in DTS.items():
            for si, (M, N) in enumerate(SHAPES):
                g = torch.Generator().manual_seed(SEED + 1000 * si + 10 * k + (0 if dname == "bf16" else 5))
                # ranks of different magnitudes, so that the order of the adds shows in the roundings
                part_lists.append([(torch.randn(M, N, generator=g) * 2.0 ** (r % 3)).to(dt) for r in range(k)])
                cases.append((dname, M, N))
        for (dname, M, N), parts, y in zip(cases, part_lists, gloo_all_reduce(part_lists)):
            diffs = {m: ndiff(y, reduce(parts, m)) for m in MODES}
            rev = ndiff(y, reverse_ring(parts))
            assert rev == 0, f"{dname} {M}x{N} tp{k}: gloo is not the reverse ring ({rev} differ)"
            if stored(k, M * N):
                assert diffs["ring"] == 0 and (k > 2 or max(diffs.values()) == 0), (dname, M, N, k, diffs)
                key = f"{dname}.m{M}n{N}.tp{k}"
                tensors[key + ".P"] = torch.stack(parts).contiguous()
                tensors[key + ".gloo"] = y.contiguous()
            rows.append((dname, M, N, k, diffs, rev))
    rows.sort()
    ver = {"python": platform.python_version(), "torch": torch.__version__, "numpy": np.__version__,
           "safetensors": safetensors.__version__, "gloo_available": str(dist.is_gloo_available())}
    meta = {"generator": "tools/make_tp_gloo_fixtures.py", "seed": str(SEED),
            "collective": "torch.distributed.all_reduce(SUM), backend gloo, world size k, CPU"}
    meta.update({f"version.{k}": v for k, v in ver.items()})
    path = os.path.join(args.out, "tp_gloo.safetensors")
    save_safetensors_canonical(tensors, path, meta)
    os.chmod(path, 0o644)
    L = ["# gloo all_reduce on stored partials", "",
         "Written by `tools/make_tp_gloo_fixtures.py` (do not edit). Versions: "
         + ", ".join(f"{k} {v}" for k, v in ver.items()) + ".", "",
         "`tp_gloo.safetensors`: per dtype, shape and k where gloo's order and the `ring` rule must agree (k = 2;",
         "k = 3 when 6 divides M N): `P` [k, M, N] (rank r's",
         "partial) and `gloo` [M, N] (rank 0's result of dist.all_reduce(SUM); every rank's is the same).",
         "Elements where gloo's result differs from each of make_tp_fixtures' modes, and from the",
         "reverse ring (chunks of 2 ceil(numel / 2k) elements: P_{c-1} + P_{c-2} + ... + P_c), which gloo",
         "matches everywhere:", "",
         "| dtype | M | N | k | fp32 | ring | chain | seq | reverse ring | stored |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for dname, M, N, k, d, rev in rows:
        L.append(f"| {dname} | {M} | {N} | {k} | {d['fp32']} | {d['ring']} | {d['chain']} | {d['seq']} | {rev} | "
                 f"{'yes' if stored(k, M * N) else 'no'} |")
    L.append("")
    with open(os.path.join(args.out, "tp_gloo.md"), "w") as f:
        f.write("\n".join(L))
    print("\n".join(L))


if __name__ == "__main__":
    main()
