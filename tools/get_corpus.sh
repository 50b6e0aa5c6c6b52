#!/bin/bash
# Obtain the training corpus of data/models/pythia-rc-tiny: the King James Version of the
# Bible (public domain), from Debian's packages `bible-kjv-text` (the compressed text,
# /usr/lib/bible.data) and `bible-kjv` (the `bible` program that decompresses it).
# Both come from Debian's source package bible-kjv (4.38 in Debian 12 "bookworm").
#
# Usage: bash tools/get_corpus.sh OUT.txt
#
# Writes the whole text, Genesis 1:1 to Revelation 22:21, as the `bible` program prints it:
# a "Book N" heading line per chapter, then one verse per line ("  N text"), unwrapped.
# Installs the packages with apt-get (as root, or through sudo) if they are missing.
set -euo pipefail
out="${1:?usage: get_corpus.sh OUT.txt}"

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
if ! dpkg-query -W -f='${Status}' bible-kjv 2>/dev/null | grep -q "install ok installed"; then
  echo "installing Debian packages bible-kjv, bible-kjv-text" >&2
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends bible-kjv bible-kjv-text >&2
fi
echo "bible-kjv-text $(dpkg-query -W -f='${Version}' bible-kjv-text)," \
     "bible-kjv $(dpkg-query -W -f='${Version}' bible-kjv)" >&2

mkdir -p "$(dirname "$out")"
# -l0: no line wrapping. stdin from /dev/null: the program is interactive otherwise.
bible -l0 "Genesis1:1-Revelation22:21" </dev/null >"$out.tmp"
mv "$out.tmp" "$out"
sha256sum "$out" >&2
