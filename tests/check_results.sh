#!/bin/bash
# Statistics against an independent computation: run ratiocheck on the
# default model, then recompute every statistic from the stored tensors with
# numpy (tools/check_results.py). Skips (77) without Debian's python3-h5py.
set -u
RC="$1"
SRC="$2"
PY=/usr/bin/python3
if ! "$PY" -c 'import h5py, numpy' 2>/dev/null; then
  echo "SKIP: $PY cannot import h5py and numpy (apt-get install python3-h5py python3-numpy)"
  exit 77
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
status=0
run() {
  local name=$1; shift
  "$RC" --model "$SRC/data/models/pythia-rc-tiny" --prompts "$SRC/data/prompts/default.ids" -q \
    --out "$tmp/$name.h5" "$@" > "$tmp/$name.txt" || { echo "ratiocheck $* failed"; status=1; return; }
  echo "== $name: $*"
  "$PY" "$SRC/tools/check_results.py" "$tmp/$name.h5" || status=1
}
run bf16 --dtype bf16 --num-prompts 8 --samples 2 --len 8,16,24 --reference fp32
run fp16_eos --dtype fp16 --num-prompts 8 --samples 3 --len 10,20 --stop-at-eos --temperature 2 --top-p 0.9 --reference fp64 \
  --clip-eps-low 0.001 --clip-eps-high 0.002 --seq-eps 1e-4 --seq-cap 1.002  # each fraction > 0
run fp32_blas --dtype fp32 --kernels blas --num-prompts 4 --samples 2 --len 5,12 --forward-batch 3
exit $status
