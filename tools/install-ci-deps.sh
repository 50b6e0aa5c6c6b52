#!/bin/bash
# The Debian 12 packages CI needs beyond tools/install-deps.sh: clang with
# libFuzzer, ASan and UBSan (libclang-rt-14-dev) and LLVM's OpenMP runtime
# (libomp-14-dev: the CPU backend uses OpenMP, and clang's -fopenmp links
# libomp) for tools/fuzz/. The sanitizer build of the tests uses gcc, whose
# ASan/UBSan runtimes come with build-essential. Runs apt-get directly as
# root, through sudo otherwise.
set -euo pipefail
PKGS=(clang-14 clang libclang-rt-14-dev libomp-14-dev python3)
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
  echo "all CI dependencies (clang, libFuzzer, sanitizers, libomp) are installed"
fi
