#!/usr/bin/env bash
# The GPU check, in one go, on a machine with an NVIDIA GPU, the CUDA toolkit
# (nvcc, cuBLAS) and Python with torch, transformers, tokenizers, h5py; no
# network needed:
#
#   bash tools/gpu/fetch-debs.sh            # once, on a networked Debian 12 machine
#   bash tools/gpu/gpu_check.sh [OUTDIR]    # on the GPU machine (OUTDIR default $OUT or /tmp/rc-gpu)
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
OUTDIR=${1:-${OUT:-/tmp/rc-gpu}}
mkdir -p "$OUTDIR"
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
    BACKEND=cuda DEVICE=cuda LENS=20,40,50 SMALL= SUBSET= TRAIN=${RC_TRAIN_SECONDS:-60}
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
timeout 300 ninja -C "$BUILD" >"$OUTDIR/ninja.txt" 2>&1 || { tail -40 "$OUTDIR/ninja.txt"; exit 1; }
RC=$BUILD/src/ratiocheck
$RC --version

step "CUDA test suite (tests/test_cuda.c on the GPU)"
set +e
RC_SOURCE_DIR=$ROOT timeout 420 "$BUILD/tests/test_cuda" >"$OUTDIR/test_cuda.txt" 2>&1
suite_rc=$?
set -e
grep -E "^cuda" "$OUTDIR/test_cuda.txt" | sed -n '1,400p'
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
for k in engine invariant; do
    for dt in fp32 fp16 bf16; do
        timeout 240 $RC --model "$MODEL" --backend $BACKEND --kernels $k --dtype $dt --len $LENS --seed 0 $SUBSET \
            --out "$OUTDIR/rc_${k}_$dt.h5" --force --json -q >"$OUTDIR/rc_${k}_$dt.json"
        $PY - "$OUTDIR/rc_${k}_$dt.json" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
print("%-9s %-4s %s  gen %.2f s  fwd %.2f s  " % (r["kernels"], r["dtype"], r.get("device", ""), r["seconds_generate"], r["seconds_forward"]) +
      "  ".join("L=%d std %.2e min %.4f max %.4f" % (l["len"], l["std"], l["min"], l["max"]) for l in r["lens"]))
EOF
    done
done

step "HF transformers on the same GPU and weights (generate(output_scores) vs forward)"
timeout 300 $PY tools/gpu/hf_seed.py --model "$MODEL" --prompts data/prompts/default.txt --len $LENS \
    --dtype fp32,fp16,bf16 --samples 2 --seed 0 --device $DEVICE $SUBSET --json "$OUTDIR/hf.json"

BOUNDS=
if [ "$DEVICE" = cuda ]; then
    step "GPU bounds"
    timeout 120 $PY tools/gpu/measure_bounds.py --model "$MODEL" --json "$OUTDIR/bounds.json"
    BOUNDS="--bound-json $OUTDIR/bounds.json"
fi

step "side by side"
$PY tools/gpu/side_by_side.py --hf "$OUTDIR/hf.json" \
    --rc fp32="$OUTDIR/rc_engine_fp32.json" --rc fp16="$OUTDIR/rc_engine_fp16.json" --rc bf16="$OUTDIR/rc_engine_bf16.json" \
    --rc-invariant fp32="$OUTDIR/rc_invariant_fp32.json" --rc-invariant fp16="$OUTDIR/rc_invariant_fp16.json" \
    --rc-invariant bf16="$OUTDIR/rc_invariant_bf16.json" $BOUNDS | tee "$OUTDIR/summary.txt"
echo
echo "test_cuda exit status $suite_rc; total $(($(date +%s) - T0)) s; files in $OUTDIR"
exit $([ "$suite_rc" = 0 ] && echo 0 || echo 1)
