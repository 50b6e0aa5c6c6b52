#!/bin/bash
# Install the Debian 12 packages ratiocheck needs to build and test.
#   bash tools/install-deps.sh        the build, the tests, the default check
#   bash tools/install-deps.sh --ci   also what CI's fuzz stage needs: clang with
#       libFuzzer, ASan and UBSan (libclang-rt-14-dev) and LLVM's OpenMP runtime
#       (libomp-14-dev: the CPU backend uses OpenMP and clang's -fopenmp links
#       libomp). The sanitizer build of the tests uses gcc, whose runtimes come
#       with build-essential.
# Runs apt-get directly as root, through sudo otherwise.
set -euo pipefail
PKGS=(
  build-essential meson ninja-build pkg-config
  libjansson-dev        # JSON (config.json, safetensors headers, tokenizer.json)
  libopenblas-dev       # CPU GEMM
  libhdf5-dev           # HDF5 output (serial)
  libpcre2-dev libutf8proc-dev  # tokenizer.json: pre-tokenizer regexes, NFC
  check libsubunit-dev  # unit tests
  python3-h5py python3-numpy  # tools/checks/check_results.py (run by the tests with /usr/bin/python3)
  python3-matplotlib    # tools/plots/plot_ratios.py (tests/check_plots.sh)
)
if [ "${1:-}" = "--ci" ]; then
  PKGS+=(clang-14 clang libclang-rt-14-dev libomp-14-dev python3)
elif [ $# -gt 0 ]; then
  echo "usage: bash tools/install-deps.sh [--ci]" >&2
  exit 2
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing: ${missing[*]}"
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "all build dependencies are installed"
fi
