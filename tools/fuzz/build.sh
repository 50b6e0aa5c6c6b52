#!/bin/bash
# Build every libFuzzer harness tools/fuzz/fuzz_*.c, and the generated seeds.
#   tools/fuzz/build.sh [OUT]        (OUT defaults to /tmp/rc-fuzz)
#
# All project sources (every .c under src/ but the command line src/cli/ and the CUDA loader, models/*.c;
# src/engine/cuda_stub.c stands in for the CUDA backend) are compiled once with ASan + UBSan and libFuzzer's
# coverage instrumentation into OUT/librc_fuzz.a; each harness is linked
# against that archive and every library the project uses (jansson, HDF5,
# PCRE2, utf8proc, OpenBLAS, OpenMP through clang's libomp), so a new harness
# links whatever part of the project it calls.
#
# Needs clang with libFuzzer and libomp (Debian 12: apt-get install clang
# libclang-rt-14-dev libomp-14-dev; tools/install-deps.sh --ci), pkg-config, the
# -dev packages of tools/install-deps.sh, and python3 for the seeds.
# Environment: CC (default clang), FUZZ_JOBS (parallel compiles, default nproc).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${1:-/tmp/rc-fuzz}
CC=${CC:-clang}
JOBS=${FUZZ_JOBS:-$(nproc 2>/dev/null || echo 2)}
mkdir -p "$OUT/obj" "$OUT/include"
OUT=$(cd "$OUT" && pwd)

# the pkg-config names meson's dependency() calls resolve to (Debian's HDF5 is hdf5-serial)
pc_pkgs="jansson libpcre2-8 libutf8proc openblas"
if pkg-config --exists hdf5; then
  pc_pkgs="$pc_pkgs hdf5"
elif pkg-config --exists hdf5-serial; then
  pc_pkgs="$pc_pkgs hdf5-serial"
else
  echo "build.sh: HDF5 not found by pkg-config (apt-get install libhdf5-dev)" >&2
  exit 1
fi
# shellcheck disable=SC2086
pkg-config --exists --print-errors $pc_pkgs

# rc_build_config.h as meson.build's configure_file() writes it, CUDA off
version=$(sed -n "s/^ *version: *'\([^']*\)'.*/\1/p" "$ROOT/meson.build" | head -n 1)
cfg_new="$OUT/include/rc_build_config.h.new"
{
  echo "/* written by tools/fuzz/build.sh, like meson's configure_file() */"
  echo "#pragma once"
  echo "#define RC_HAVE_CUDA 0"
  echo "#define RC_HAVE_BLAS 1"
  echo "#define RC_SOURCE_DIR \"$ROOT\""
  echo "#define RC_VERSION \"$version\""
} >"$cfg_new"
if cmp -s "$cfg_new" "$OUT/include/rc_build_config.h"; then
  rm -f "$cfg_new"
else
  mv "$cfg_new" "$OUT/include/rc_build_config.h"
fi

# every folder of src/ and models/ that holds a header is an include folder,
# as in src/meson.build (found, so that a new folder needs no change here)
src_incs=$(find "$ROOT/src" "$ROOT/models" -name '*.h' -printf ' -I%h\n' | sort -u | tr -d '\n')
SAN="-fsanitize=address,undefined -fno-sanitize-recover=undefined"
# shellcheck disable=SC2086
# RC_GEMM_PORTABLE_ONLY: the plain-C GEMM only. The AVX-512 micro-kernels (three
# storage dtypes x 24 register tiles, all inlined) take clang with the sanitizers
# over 15 minutes to compile; the harnesses fuzz the readers, not GEMM speed.
CFLAGS="-std=c11 -D_POSIX_C_SOURCE=200809L -D_DEFAULT_SOURCE -DRC_GEMM_PORTABLE_ONLY -g -O1 -fno-omit-frame-pointer \
  -ffp-contract=off -fopenmp $SAN -I$OUT/include -I$ROOT $src_incs -I$ROOT/tools/fuzz \
  $(pkg-config --cflags $pc_pkgs)"
# shellcheck disable=SC2086
LIBS="$(pkg-config --libs $pc_pkgs) -fopenmp -lm -lpthread"

# --- the project as one instrumented archive -------------------------------
# every .c under src/ and models/ but the command line (src/cli/) and the CUDA
# loader (a CUDA build opens the kernels with it; here cuda_stub.c answers)
mapfile -t lib_srcs < <(find "$ROOT/src" "$ROOT/models" -name '*.c' ! -path '*/src/cli/*' ! -name cuda_loader.c | sort)
# rebuild an object when its source, any project header, this script or the
# generated config header is newer than it
newest_dep="$OUT/.deps-stamp"
touch -d "@0" "$newest_dep"
for h in $(find "$ROOT/src" "$ROOT/models" -name '*.h') "$0" "$OUT/include/rc_build_config.h"; do
  [ -e "$h" ] && [ "$h" -nt "$newest_dep" ] && touch -r "$h" "$newest_dep"
done
todo=()
objs=()
for f in "${lib_srcs[@]}"; do
  rel=${f#"$ROOT"/}
  o="$OUT/obj/${rel//\//_}.o"
  objs+=("$o")
  if [ ! -e "$o" ] || [ "$f" -nt "$o" ] || [ "$newest_dep" -nt "$o" ]; then
    todo+=("$f")
  fi
done
export CC CFLAGS ROOT OUT
if [ ${#todo[@]} -gt 0 ]; then
  echo "build.sh: compiling ${#todo[@]} project sources with $CC ($JOBS jobs)"
  printf '%s\n' "${todo[@]}" | xargs -P "$JOBS" -I{} sh -c '
    f="$1"; rel=${f#"$ROOT"/}; o="$OUT/obj/$(echo "$rel" | tr / _).o"
    # shellcheck disable=SC2086
    $CC $CFLAGS -fsanitize=fuzzer-no-link -c "$f" -o "$o.tmp" && mv "$o.tmp" "$o" || { echo "FAILED: $f" >&2; exit 255; }
  ' _ {}
fi
# objects of sources that no longer exist must not linger in the archive
rm -f "$OUT/librc_fuzz.a"
ar rcs "$OUT/librc_fuzz.a" "${objs[@]}"

# --- one executable per harness --------------------------------------------
harnesses=("$ROOT"/tools/fuzz/fuzz_*.c)
[ -e "${harnesses[0]}" ] || { echo "build.sh: no tools/fuzz/fuzz_*.c" >&2; exit 1; }
built=()
for h in "${harnesses[@]}"; do
  name=$(basename "$h" .c)
  # shellcheck disable=SC2086
  if ! $CC $CFLAGS -fsanitize=fuzzer -o "$OUT/$name.tmp" "$h" "$OUT/librc_fuzz.a" $LIBS; then
    echo "build.sh: FAILED to build $name" >&2
    exit 1
  fi
  mv "$OUT/$name.tmp" "$OUT/$name"
  built+=("$name")
done
printf '%s\n' "${built[@]}" >"$OUT/harnesses.txt"
# the fixture files stored as .xz (data/fixtures/.gitignore) unpacked, as meson's build does:
# the seeds and fuzz_model read data/fixtures
python3 "$ROOT/tools/fixtures/pack_fixtures.py" unpack
python3 "$ROOT/tools/fuzz/make_seeds.py" "$ROOT" "$OUT"
echo "build.sh: built ${built[*]} in $OUT"
