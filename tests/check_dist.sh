#!/bin/bash
# --distribution against PyTorch on the rows ratiocheck compared: runs on the bundled model dump every
# compared pair of rows (RATIOCHECK_DIST_DUMP) with ratiocheck's KL / TV / top-1, and
# tools/checks/dist_ref.py recomputes each from the same rows in float64 (KL and TV within 1e-12 relative,
# top-1 equal). Skips (77) without a python3 that imports torch and numpy; fails instead with
# RC_CI_REQUIRED=1.
set -u
RC="$1"
SRC="$2"
PY=${RC_TORCH_PYTHON:-python3}
if ! "$PY" -c 'import torch, numpy' 2>/dev/null; then
  if [ "${RC_CI_REQUIRED:-0}" = 1 ]; then
    echo "FAIL: $PY cannot import torch and numpy (pip install -r tools/fixtures/requirements.txt)"
    exit 1
  fi
  echo "SKIP: $PY cannot import torch and numpy (pip install -r tools/fixtures/requirements.txt)"
  exit 77
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
status=0
check() {
  local name=$1; shift
  echo "== $name: $*"
  RATIOCHECK_DIST_DUMP="$tmp/$name.bin" "$RC" --model "$SRC/data/models/pythia-rc-tiny" --backend cpu \
    --prompts "$SRC/data/prompts/default.ids" -q --out none --num-prompts 3 --samples 2 --distribution "$@" \
    > "$tmp/$name.txt" || { echo "ratiocheck $* failed"; status=1; return; }
  "$PY" "$SRC/tools/checks/dist_ref.py" check "$tmp/$name.bin" || status=1
}
check bf16 --dtype bf16 --len 4,9
check fp16_same --dtype fp16 --logprob-dtype same --trainer dtype=fp32 --len 6
check topk_t07 --dtype bf16 --top-k 20 --temperature 0.7 --len 5 --stop-at-eos
RATIOCHECK_DIST_WINDOW=2 check fp32_window --dtype fp32 --len 3,7 --sampler batch=2
exit $status
