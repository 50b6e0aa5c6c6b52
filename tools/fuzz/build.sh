#!/bin/sh
# Build the libFuzzer harnesses and their seed corpora.
#   tools/fuzz/build.sh [OUT]        (OUT defaults to /tmp/rc-fuzz)
# Needs clang with libFuzzer (Debian: apt-get install -y clang libclang-rt-14-dev),
# jansson, and python3 for the seeds. See tools/fuzz/README.md.
set -eu
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${1:-/tmp/rc-fuzz}
CC=${CC:-clang}
mkdir -p "$OUT"
CFLAGS="-std=c11 -D_POSIX_C_SOURCE=200809L -D_DEFAULT_SOURCE -g -O1 -fno-omit-frame-pointer \
  -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
  -I$ROOT/src -I$ROOT/models -I$ROOT/tools/fuzz $(pkg-config --cflags jansson)"
LIBS="$(pkg-config --libs jansson) -lm"
LIB_ST="$ROOT/src/status.c $ROOT/src/util.c $ROOT/src/dtype.c $ROOT/src/json_util.c $ROOT/src/safetensors.c"
LIB_MODEL="$LIB_ST $ROOT/src/hf_config.c $ROOT/src/model.c $ROOT/models/registry.c \
  $ROOT/models/gpt_neox.c $ROOT/models/llama.c"
set -x
$CC $CFLAGS -o "$OUT/fuzz_safetensors" "$ROOT/tools/fuzz/fuzz_safetensors.c" $LIB_ST $LIBS
$CC $CFLAGS -o "$OUT/fuzz_st_index" "$ROOT/tools/fuzz/fuzz_st_index.c" $LIB_ST $LIBS
$CC $CFLAGS -o "$OUT/fuzz_config" "$ROOT/tools/fuzz/fuzz_config.c" $LIB_MODEL $LIBS
$CC $CFLAGS -o "$OUT/fuzz_model" "$ROOT/tools/fuzz/fuzz_model.c" $LIB_MODEL $LIBS
python3 "$ROOT/tools/fuzz/make_seeds.py" "$ROOT" "$OUT"
