#!/usr/bin/env bash
# The GPU check, in one go, on a machine with an NVIDIA GPU, the CUDA toolkit
# (nvcc, cuBLAS) and Python with torch, transformers, tokenizers, h5py; no
# network needed:
#
#   bash tools/gpu/fetch-debs.sh            # once, on a networked Debian 12 machine (writes .debs/)
#   bash tools/gpu/gpu_check.sh [OUTDIR]    # on the GPU machine, with .debs/ beside it
#
# Everything goes to OUTDIR (default /tmp/rc-gpu); when $OUT is set (the
# device tool), log.txt, summary.txt, test_cuda.txt and a tarball of the rest
# are copied there at the end, even after a failure (it returns <= 8 files).
#
# 1. builds ratiocheck with the CUDA backend (C libraries the machine lacks
#    come from the .deb files in .debs/, unpacked by tools/gpu/deps-env.sh);
# 2. runs the CUDA test suite (kernels vs their CPU twins, whole models vs
#    HF, invariant ratio 1);
# 3. the seed experiment: a pythia-160m-shaped GPT-NeoX (tools/gpu/
#    make_seed_model.py, trained for a minute on the KJV Bible so that its
#    distributions are peaked), the bundled prompts, --len 20,40,50, fp32 /
#    fp16 / bf16, with ratiocheck (engine and invariant kernels) and with HF
#    transformers (tools/gpu/hf_seed.py: generate(output_scores) vs forward)
#    on the same GPU and the same weights;
#    then the sampler's fp8 weights and fp8 KV cache on the GPU against the
#    same runs on the CPU;
# 4. measures the GPU's bandwidth and GEMM bounds (measure_bounds.py) and
#    prints both tables side by side with the timings (side_by_side.py); the
#    short table comes last.
# Everything it prints is also in OUTDIR (log.txt, *.json, summary.txt).
# Budget: under 8 minutes on an H200 (each step has its own time limit).
#
# RC_GPU_DRYRUN=1 runs the same steps on a machine without a GPU (CPU
# backend, torch on the CPU, the --small model, 3 prompts, --len 4,8): a
# rehearsal of the script itself, not a measurement.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
OUTDIR=${1:-/tmp/rc-gpu}
mkdir -p "$OUTDIR"
if [ -n "${OUT:-}" ] && [ "$OUT" != "$OUTDIR" ]; then
    trap 'cp -f "$OUTDIR"/log.txt "$OUTDIR"/summary.txt "$OUTDIR"/test_cuda.txt "$OUT"/ 2>/dev/null;
          tar czf "$OUT/rc-gpu.tgz" -C "$OUTDIR" --exclude="*.h5" . 2>/dev/null' EXIT
fi
WORK=${RC_GPU_WORK:-/tmp/rc-gpu-work}
mkdir -p "$WORK"
exec > >(tee -a "$OUTDIR/log.txt") 2>&1
T0=$(date +%s)
step() { echo; echo "== [$(($(date +%s) - T0)) s] $*"; }
PY=${PYTHON:-python3}
export PYTHONUNBUFFERED=1
if [ "${RC_GPU_DRYRUN:-0}" = 1 ]; then
    BACKEND=cpu DEVICE=cpu LENS=4,8 SMALL=--small SUBSET="--num-prompts 3" TRAIN=${RC_TRAIN_SECONDS:-5}
else
    BACKEND=cuda DEVICE=cuda LENS=20,40,50 SMALL= SUBSET= TRAIN=${RC_TRAIN_SECONDS:-45}
fi

step "machine"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || echo "(no nvidia-smi)"
nvcc --version | tail -1
$PY -c 'import torch, transformers; print("torch", torch.__version__, "cuda", torch.version.cuda, "transformers", transformers.__version__, "gpu", torch.cuda.get_device_name(0) if torch.cuda.is_available() else None)'

step "dependencies"
# shellcheck source=tools/gpu/deps-env.sh
source tools/gpu/deps-env.sh "$ROOT/.debs"

step "build (meson -Dcuda=enabled)"
BUILD=$WORK/build
if [ ! -f "$BUILD/build.ninja" ]; then
    timeout 300 meson setup "$BUILD" -Dcuda=enabled -Dbuildtype=release >"$OUTDIR/meson-setup.txt" 2>&1 ||
        { tail -30 "$OUTDIR/meson-setup.txt"; exit 1; }
fi
timeout 300 ninja -C "$BUILD" src/ratiocheck kernels/libratiocheck_cuda.so tests/test_cuda >"$OUTDIR/ninja.txt" 2>&1 ||
    { tail -40 "$OUTDIR/ninja.txt"; exit 1; }
RC=$BUILD/src/ratiocheck
# the CUDA runtime and cuBLAS at run time: the toolkit's own folders when the
# dynamic linker does not know them (the binaries have no run path for them)
if ldd "$RC" | grep -q "not found"; then
    CUDA_ROOT=$(dirname "$(dirname "$(readlink -f "$(command -v nvcc)")")")
    for d in "$CUDA_ROOT/lib64" "$CUDA_ROOT/lib" "$CUDA_ROOT/targets/x86_64-linux/lib"; do
        [ -d "$d" ] && export LD_LIBRARY_PATH="$d${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    done
fi
ldd "$RC" | grep "not found" && echo "warning: libraries not found (above)" || true
$RC --version

step "CUDA test suite (tests/test_cuda.c on the GPU)"
# RC_CUDA_SYNC=1: a kernel fault is charged to the kernel that made it
set +e
RC_SOURCE_DIR=$ROOT RC_CUDA_SYNC=1 timeout 420 "$BUILD/tests/test_cuda" >"$OUTDIR/test_cuda.txt" 2>&1
suite_rc=$?
set -e
grep -E "^cuda" "$OUTDIR/test_cuda.txt" | grep -vE "^cuda +(round|add|act|act_mul|embed|gather|kv_cache) " || true
grep -E "Checks:|:F:|:E:" "$OUTDIR/test_cuda.txt" || true
echo "test_cuda exit status $suite_rc (0 pass, 1 failures, 77 skipped)"

step "seed model: pythia-160m shape, trained briefly on the KJV Bible"
MODEL=$WORK/seed160m
if [ ! -f "$MODEL/model.safetensors" ]; then
    # the corpus is Debian's bible-kjv-text package itself (make_seed_model.py reads it)
    KJV=$(ls "$ROOT"/.debs/bible-kjv-text_*.deb 2>/dev/null | head -1 || true)
    timeout 240 $PY tools/gpu/make_seed_model.py "$MODEL" --device $DEVICE --train-seconds "$TRAIN" \
        ${KJV:+--corpus "$KJV"} --seed 0 $SMALL
fi
$RC inspect --model "$MODEL" | head -12

step "ratiocheck ($BACKEND): fp32 / fp16 / bf16, engine and invariant kernels"
# engine in every dtype; invariant (its speed cost, and ratio 1) in bf16 --
# the suite has already checked invariant ratios in every dtype
RC_FILES=()
for run in engine:fp32 engine:fp16 engine:bf16 invariant:bf16; do
    k=${run%%:*} dt=${run#*:}
    if timeout 240 $RC --model "$MODEL" --backend $BACKEND --kernels $k --dtype $dt --len $LENS --seed 0 $SUBSET \
        --out "$OUTDIR/rc_${k}_$dt.h5" --force --json -q >"$OUTDIR/rc_${k}_$dt.json"; then
        if [ $k = engine ]; then RC_FILES+=(--rc "$dt=$OUTDIR/rc_${k}_$dt.json"); else RC_FILES+=(--rc-invariant "$dt=$OUTDIR/rc_${k}_$dt.json"); fi
        $PY - "$OUTDIR/rc_${k}_$dt.json" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
print("%-9s %-4s %s  gen %.2f s  fwd %.2f s  " % (r["kernels"], r["dtype"], r.get("device", ""), r["seconds_generate"], r["seconds_forward"]) +
      "  ".join("L=%d std %.2e min %.4f max %.4f" % (l["len"], l["std"], l["min"], l["max"]) for l in r["lens"]))
EOF
    else
        echo "ratiocheck --kernels $k --dtype $dt FAILED (exit $?)"
    fi
done

step "the sampler's fp8 settings on $BACKEND vs the CPU (seed model, bf16, invariant kernels)"
# weights=fp8 (per tensor / per token, channel W8A16, 128 x 128 blocks: the
# seed model's sizes are multiples of 128) and the fp8 KV cache: the run on
# the device against the same run on the CPU (bitwise in the host build,
# tests/test_cuda.c; on a GPU not yet measured), 4 prompts, one length
for spec in weights=fp8 weights=fp8,weight-scale=channel,act=none weights=fp8,weight-scale=block kv-cache=fp8_e4m3; do
    tag=$(echo "$spec" | tr ',=' '__')
    ok=1
    for be in $BACKEND cpu; do
        timeout 150 $RC --model "$MODEL" --backend $be --kernels invariant --dtype bf16 --sampler "$spec" \
            --len 16 --num-prompts 4 --seed 0 --out none --json -q >"$OUTDIR/fp8_${tag}_$be.json" ||
            { echo "ratiocheck --backend $be --sampler $spec FAILED (exit $?)"; ok=0; }
    done
    [ $ok = 1 ] && $PY - "$spec" "$OUTDIR/fp8_${tag}_$BACKEND.json" "$OUTDIR/fp8_${tag}_cpu.json" <<'EOF' || true
import json, sys
d, c = (json.load(open(p)) for p in sys.argv[2:4])
ld, lc = d["lens"][0], c["lens"][0]
print("%-40s device std %.4e k3 %.3e  cpu std %.4e k3 %.3e  %s" % (sys.argv[1], ld["std"], ld["k3"], lc["std"], lc["k3"],
      "statistics identical" if d["lens"] == c["lens"] else "differ: |d std| %.2e" % abs(ld["std"] - lc["std"])))
EOF
done

step "HF transformers on the same GPU and weights (generate(output_scores) vs forward)"
timeout 300 $PY tools/gpu/hf_seed.py --model "$MODEL" --prompts data/prompts/default.txt --len $LENS \
    --dtype fp32,fp16,bf16 --samples 2 --seed 0 --device $DEVICE $SUBSET --json "$OUTDIR/hf.json" ||
    echo "hf_seed.py FAILED (exit $?)"

BOUNDS=
if [ "$DEVICE" = cuda ]; then
    step "GPU bounds"
    if timeout 120 $PY tools/gpu/measure_bounds.py --model "$MODEL" --json "$OUTDIR/bounds.json"; then
        BOUNDS="--bound-json $OUTDIR/bounds.json"
    else
        echo "measure_bounds.py FAILED"
    fi
fi

step "side by side"
$PY tools/gpu/side_by_side.py --hf "$OUTDIR/hf.json" "${RC_FILES[@]}" $BOUNDS | tee "$OUTDIR/summary.txt" ||
    echo "side_by_side.py FAILED"
echo
echo "test_cuda exit status $suite_rc; total $(($(date +%s) - T0)) s; files in $OUTDIR"
exit $([ "$suite_rc" = 0 ] && echo 0 || echo 1)
