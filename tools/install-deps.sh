#!/bin/bash
# Install the Debian 12 packages ratiocheck needs to build and test.
# Runs apt-get directly as root, through sudo otherwise.
set -euo pipefail
PKGS=(
  build-essential meson ninja-build pkg-config
  libjansson-dev        # JSON (config.json, safetensors headers, tokenizer.json)
  libopenblas-dev       # CPU GEMM
  libhdf5-dev           # HDF5 output (serial)
  libpcre2-dev libutf8proc-dev  # tokenizer.json: pre-tokenizer regexes, NFC
  check libsubunit-dev  # unit tests
  python3-h5py python3-numpy  # tools/check_results.py (run by the tests with /usr/bin/python3)
  python3-matplotlib    # tools/plot_ratios.py (tests/check_plots.sh)
)
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
