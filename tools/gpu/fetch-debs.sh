#!/bin/bash
# Download, on a networked Debian 12 (bookworm) amd64 machine, the .deb files that let
# ratiocheck build on an offline machine that lacks the -dev packages (tools/gpu/deps-env.sh
# unpacks them there).
#
# Usage: bash tools/gpu/fetch-debs.sh [DIR]      (DIR defaults to .debs at the repository root)
#        FETCH_DEBS_SLIM=0 bash tools/gpu/fetch-debs.sh    the Debian files as they are (no repacking)
#        FETCH_DEBS_IMAGE_BASE=0 bash tools/gpu/fetch-debs.sh   fetch IMAGE_BASE (below) too
#        FETCH_DEBS_BLAS=1 bash tools/gpu/fetch-debs.sh   OpenBLAS too (and its libgfortran5 /
#                                         libquadmath0), for a build with meson's default -Dblas=enabled
#
# The folder travels to the GPU machine with the working tree (64 MiB in all), so it holds only
# what a bare CUDA image lacks, for the GPU check's build (meson -Dblas=disabled: no OpenBLAS):
# 33 packages, 3.9 MiB from the archive of 2026-12-05 (37 packages, 8.8 MiB with FETCH_DEBS_BLAS=1;
# bash tools/gpu/gpu_check.sh --stage size measures what travels).
#
# Fetching into the default .debs also writes tools/gpu/debs.size (committed): the folder's byte
# count, which the size stage adds where .debs is absent (a clone, CI).
#
# No root needed (`apt-get download`).  Idempotent: a file already in DIR whose SHA256 is the one
# recorded in DIR/MANIFEST (and, for a download, apt's) is kept; .deb files no longer wanted are
# removed; DIR/MANIFEST is rewritten.
#
# What is fetched, per capability ("group"):
#   - the -dev package(s) meson's dependency() needs: headers, the .so link symlink, the .pc file;
#   - their runtime library packages;
#   - the Depends/Pre-Depends closure of those runtime packages (not of the -dev packages, whose
#     other dependencies -- e.g. libhdf5-dev -> libcurl4-openssl-dev, libssl-dev, the Fortran and
#     C++ HDF5 libraries -- are not needed to compile and link C), minus BASE below.
# deps-env.sh uses a closure library only when the machine does not already have its soname, so
# a generous closure costs download size, never correctness.
#
# BASE (never fetched): what every Linux with gcc/g++ has -- glibc, libgcc, libstdc++, libgomp
# (gcc's own runtime), libcrypt; gcc-12-base is documentation only -- plus packages that are
# dependencies only on paper for ratiocheck: libsasl2-modules-db and libdb5.3 (an OpenLDAP SASL
# plugin for sasldb authentication, dlopen'ed, never linked), readline-common (/etc/inputrc).
#
# IMAGE_BASE (not fetched unless FETCH_DEBS_IMAGE_BASE=0): libraries that any Debian 12 or Ubuntu
# 24.04 image with Python 3 and apt has -- OpenSSL 3 (python3's ssl module), GnuTLS 3 and its
# nettle / hogweed / gmp / p11-kit / tasn1 / ffi (apt's https), zlib, zstd (apt, libsystemd) --
# all needed only below HDF5's libcurl4.  deps-env.sh stops with the missing sonames where a
# machine lacks one of them.  Everything else is fetched (with FETCH_DEBS_BLAS=1, OpenBLAS's
# libgfortran5 and libquadmath0 too).
#
# Slimming (default; FETCH_DEBS_SLIM=0 turns it off): every package is repacked without what a
# build never reads: static libraries (lib*.a; check's libcheck*.a is kept: Check is
# static-only), Fortran modules (*.mod), manual pages, info files and documentation other than
# the copyright files, and OpenBLAS's separate libblas.so.3 / liblapack.so.3 (ratiocheck links
# libopenblas.so.0, which holds both).  A repacked file is named NAME_VERSION_ARCH.slim.deb;
# MANIFEST records the SHA256 of both the Debian original and the repacked file.
#
# Check: every DT_NEEDED soname of every ELF file in the fetched packages must be provided by a
# fetched package or by BASE, else the script fails.
set -euo pipefail
export LC_ALL=C

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
DIR="${1:-$REPO/.debs}"
SLIM="${FETCH_DEBS_SLIM:-1}"

# group|role|packages   role: dev (compile/link files), lib (runtime the group needs),
#                       data (a data file); the closure gets role "closure".
ROOTS=(
  "pkgconfig|lib|pkgconf-bin libpkgconf3"
  "pkgconfig|dev|pkgconf"
  "jansson|dev|libjansson-dev"
  "jansson|lib|libjansson4"
  "hdf5|dev|libhdf5-dev"
  "hdf5|lib|libhdf5-103-1 libhdf5-hl-100"
  "pcre2|dev|libpcre2-dev"
  "pcre2|lib|libpcre2-8-0"
  "utf8proc|dev|libutf8proc-dev"
  "utf8proc|lib|libutf8proc2"
  "check|dev|check libsubunit-dev"
  "check|lib|libsubunit0"
)
# (the seed model's corpus is in the repository: tools/gpu/kjv-excerpt.txt.xz)
# OpenBLAS only on request: the GPU check builds with meson -Dblas=disabled (its CUDA suite compares
# CUDA with the CPU engine / invariant kernels, never with --kernels blas)
if [ "${FETCH_DEBS_BLAS:-0}" = 1 ]; then
  ROOTS+=("openblas|dev|libopenblas-pthread-dev" "openblas|lib|libopenblas0-pthread")
fi
BASE=" libc6 libc-bin libgcc-s1 libstdc++6 gcc-12-base libgomp1 libcrypt1
       libsasl2-modules-db libdb5.3 readline-common debconf dpkg "
BASE_SONAMES=" libc.so.6 libm.so.6 libpthread.so.0 libdl.so.2 librt.so.1 libresolv.so.2
       ld-linux-x86-64.so.2 libutil.so.1 libanl.so.1 libgcc_s.so.1 libstdc++.so.6 libgomp.so.1
       libcrypt.so.1 "
IMAGE_BASE=" libssl3 libgnutls30 libnettle8 libhogweed6 libgmp10 libp11-kit0 libtasn1-6 libffi8
       zlib1g libzstd1 "
IMAGE_BASE_SONAMES=" libssl.so.3 libcrypto.so.3 libgnutls.so.30 libnettle.so.8 libhogweed.so.6
       libgmp.so.10 libp11-kit.so.0 libtasn1.so.6 libffi.so.8 libz.so.1 libzstd.so.1 "
if [ "${FETCH_DEBS_IMAGE_BASE:-1}" != 0 ]; then
  BASE="$BASE $IMAGE_BASE"
  BASE_SONAMES="$BASE_SONAMES $IMAGE_BASE_SONAMES"
fi
BASE=" $(echo $BASE) "                # one line, single spaces
BASE_SONAMES=" $(echo $BASE_SONAMES) "

command -v apt-get >/dev/null && command -v apt-cache >/dev/null ||
  { echo "fetch-debs.sh: needs apt-get and apt-cache (Debian 12)" >&2; exit 1; }
if [ -r /etc/os-release ] && ! grep -q '^VERSION_CODENAME=bookworm' /etc/os-release; then
  echo "fetch-debs.sh: warning: not Debian 12 (bookworm); deps-env.sh's layout assumptions" \
       "(openblas-pthread/, hdf5/serial/) were checked against bookworm's packages" >&2
fi

# "PKG DEP" lines: one choice per dependency group (Depends/Pre-Depends) of each package given:
# the first alternative that is a real package, or for a virtual one its first provider
# (apt-cache lists providers indented under it).  One apt-cache call for many packages: apt-cache
# is slow (about 1 s a call) where its binary cache is disabled.
deps_of() {
  apt-cache depends --no-recommends --no-suggests --no-conflicts --no-breaks --no-replaces \
    --no-enhances "$@" | awk '
      /^[^ ]/ { pkg = $1; chosen = 0; pending_end = 0; next }
      /^ *\|?(Depends|PreDepends):/ {
        if (pending_end) { chosen = 0; pending_end = 0 }
        alt = ($1 ~ /^\|/); p = $2; virt = (p ~ /^</)
        if (!virt && !chosen) { print pkg, p; chosen = 1 }
        if (!alt) { if (virt) pending_end = 1; else chosen = 0 }
        next
      }
      /^    [^ ]/ { if (virt && !chosen) { print pkg, $1; chosen = 1 } }
    ' | sed 's/:any$//'
}

declare -A GROUP=() ROLE=() EDGES=()
ORDER=()
add_pkg() {  # pkg group role
  local p="$1" g="$2" r="$3"
  if [ -z "${ROLE[$p]+x}" ]; then ROLE[$p]="$r"; GROUP[$p]="$g"; ORDER+=("$p"); return; fi
  case " ${GROUP[$p]} " in *" $g "*) ;; *) GROUP[$p]="${GROUP[$p]} $g" ;; esac
  if [ "${ROLE[$p]}" = closure ] && [ "$r" != closure ]; then ROLE[$p]="$r"; fi
}

for entry in "${ROOTS[@]}"; do
  IFS='|' read -r g r pkgs <<<"$entry"
  for p in $pkgs; do add_pkg "$p" "$g" "$r"; done
done

# the dependency graph below the lib/data roots, breadth first, one apt-cache call per level
frontier=()
for entry in "${ROOTS[@]}"; do
  IFS='|' read -r g r pkgs <<<"$entry"
  [ "$r" = dev ] || frontier+=($pkgs)
done
declare -A EXPANDED=()
while [ ${#frontier[@]} -gt 0 ]; do
  for p in "${frontier[@]}"; do EXPANDED[$p]=1; EDGES[$p]=""; done
  next=()
  while read -r p d; do
    case "$BASE" in *" $d "*) continue ;; esac
    EDGES[$p]+=" $d"
    [ -n "${EXPANDED[$d]+x}" ] || next+=("$d")
  done < <(deps_of "${frontier[@]}")
  frontier=($(printf '%s\n' ${next[@]+"${next[@]}"} | sort -u))
done
# closure per group
for entry in "${ROOTS[@]}"; do
  IFS='|' read -r g r pkgs <<<"$entry"
  [ "$r" = dev ] && continue
  queue=($pkgs)
  declare -A seen=()
  while [ ${#queue[@]} -gt 0 ]; do
    p="${queue[0]}"; queue=("${queue[@]:1}")
    [ -n "${seen[$p]+x}" ] && continue
    seen[$p]=1
    for d in ${EDGES[$p]:-}; do add_pkg "$d" "$g" closure; queue+=("$d"); done
  done
  unset seen
done

# candidate version, file name and SHA256 of every package, one apt-cache call
declare -A VER=() ARCHOF=() SHA=()
while IFS='|' read -r p v a s; do VER[$p]="$v"; ARCHOF[$p]="$a"; SHA[$p]="$s"; done < <(
  apt-cache show --no-all-versions "${ORDER[@]}" | awk '
    /^Package:/ { p = $2 } /^Version:/ { v = $2 } /^Architecture:/ { a = $2 } /^SHA256:/ { s = $2 }
    /^$/ { if (p != "") print p "|" v "|" a "|" s; p = "" }
    END { if (p != "") print p "|" v "|" a "|" s }')
for p in "${ORDER[@]}"; do
  [ -n "${VER[$p]:-}" ] || { echo "fetch-debs.sh: no candidate version for $p" >&2; exit 1; }
done

mkdir -p "$DIR"
cd "$DIR"
# what the previous run recorded: file -> sha256 (repacked files are trusted only through this)
declare -A OLDSHA=() OLDORIG=()
if [ -f MANIFEST ]; then
  while read -r pv size groups role file sha orig; do
    case "$pv" in '#'*|'') continue ;; esac
    OLDSHA[$file]="$sha"; OLDORIG[$file]="${orig:-$sha}"
  done < MANIFEST
fi
sha_of() { sha256sum "$1" | cut -d' ' -f1; }

declare -A FILE=() WANT=()
todo=()
for p in "${ORDER[@]}"; do
  orig="${p}_${VER[$p]//:/%3a}_${ARCHOF[$p]}.deb"
  f="$orig"
  if [ "$SLIM" = 1 ]; then f="${orig%.deb}.slim.deb"; fi
  FILE[$p]="$f"; WANT[$f]=1
  if [ -f "$f" ] && [ "$f" != "$orig" ] && [ "${OLDORIG[$f]:-}" = "${SHA[$p]}" ] &&
     [ "${OLDSHA[$f]:-}" = "$(sha_of "$f")" ]; then
    continue                                        # repacked earlier from the same original
  fi
  if [ -f "$orig" ] && [ "$(sha_of "$orig")" = "${SHA[$p]}" ]; then continue; fi
  rm -f "$orig"
  todo+=("$p=${VER[$p]}")
done
if [ ${#todo[@]} -gt 0 ]; then
  echo "downloading ${#todo[@]} packages"
  # apt-get download warns when run as root that _apt cannot write here; harmless
  apt-get download -q "${todo[@]}" >/dev/null 2> >(grep -v -e 'unsandboxed' -e '^N: ' >&2 || true)
fi
for p in "${ORDER[@]}"; do
  orig="${p}_${VER[$p]//:/%3a}_${ARCHOF[$p]}.deb"
  f="${FILE[$p]}"
  if [ -f "$orig" ]; then
    [ "$(sha_of "$orig")" = "${SHA[$p]}" ] ||
      { echo "fetch-debs.sh: $orig: SHA256 differs from apt's" >&2; exit 1; }
  fi
  [ "$f" = "$orig" ] && { [ -f "$f" ] || { echo "fetch-debs.sh: $f missing" >&2; exit 1; }; continue; }
  if [ ! -f "$orig" ]; then                          # the repacked file is current
    [ -f "$f" ] || { echo "fetch-debs.sh: $f missing" >&2; exit 1; }
    continue
  fi
  # repack without what a build never reads (dpkg-deb keeps the control data; md5sums is rewritten)
  rp="$(mktemp -d)"
  dpkg-deb -R "$orig" "$rp/pkg"
  find "$rp/pkg" \( -type f -o -type l \) \( \( -name 'lib*.a' ! -name 'libcheck*' \) -o -name '*.mod' -o \
       -path '*/usr/share/man/*' -o -path '*/usr/share/info/*' -o \
       \( -path '*/usr/share/doc/*' ! -name copyright \) -o \
       -path '*/openblas-pthread/libblas.so*' -o -path '*/openblas-pthread/liblapack.so*' -o \
       -path '*/openblas-pthread/pkgconfig/blas-openblas.pc' -o \
       -path '*/openblas-pthread/pkgconfig/lapack-openblas.pc' \) -delete
  find "$rp/pkg" -mindepth 1 -depth -type d -empty ! -path "$rp/pkg/DEBIAN*" -delete
  if [ -f "$rp/pkg/DEBIAN/md5sums" ]; then
    (cd "$rp/pkg" && find . -path ./DEBIAN -prune -o -type f -printf '%P\n' | sort |
       xargs -r -d '\n' md5sum > DEBIAN/md5sums)
  fi
  isz="$(du -sk --exclude=DEBIAN "$rp/pkg" | cut -f1)"
  sed -i "s/^Installed-Size:.*/Installed-Size: $isz/" "$rp/pkg/DEBIAN/control"
  SOURCE_DATE_EPOCH=0 dpkg-deb -Zxz -z9 --root-owner-group -b "$rp/pkg" "$f.tmp" >/dev/null
  mv "$f.tmp" "$f"
  rm -rf "$rp" "$orig"
  echo "repacked $f"
done
# drop .deb files no longer wanted
for f in *.deb; do
  [ -e "$f" ] || continue
  [ -n "${WANT[$f]+x}" ] || { echo "removing stale $f"; rm -f "$f"; }
done

# DT_NEEDED check over everything fetched
if command -v readelf >/dev/null && command -v dpkg-deb >/dev/null; then
  tmp="$(mktemp -d)"; trap 'rm -rf "$tmp"' EXIT
  for p in "${ORDER[@]}"; do dpkg-deb -x "${FILE[$p]}" "$tmp/root"; done
  provided=" $BASE_SONAMES "
  while IFS= read -r -d '' so; do provided+="$(basename "$so") "; done \
    < <(find "$tmp/root" \( -type f -o -type l \) -name 'lib*.so.*' -print0)
  missing=""
  while IFS= read -r -d '' elf; do
    [ "$(head -c4 "$elf" | od -An -c | tr -d ' ')" = '177ELF' ] || continue
    for n in $(readelf -d "$elf" 2>/dev/null | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'); do
      case "$provided" in *" $n "*) ;; *) missing+="  ${elf#"$tmp/root"} needs $n"$'\n' ;; esac
    done
  done < <(find "$tmp/root" -type f \( -name '*.so*' -o -path '*/bin/*' \) -print0)
  if [ -n "$missing" ]; then
    printf 'fetch-debs.sh: unresolved DT_NEEDED sonames:\n%s' "$missing" >&2
    exit 1
  fi
  echo "DT_NEEDED check: every soname needed by a fetched ELF file is fetched or in BASE"
else
  echo "fetch-debs.sh: warning: readelf or dpkg-deb missing, DT_NEEDED check skipped" >&2
fi

lines=()
total=0
for p in "${ORDER[@]}"; do
  f="${FILE[$p]}"
  size="$(stat -c %s "$f")"
  total=$((total + size))
  sha="$(sha_of "$f")"
  extra=""
  [ "$sha" = "${SHA[$p]}" ] || extra=" ${SHA[$p]}"
  lines+=("$p=${VER[$p]} $size ${GROUP[$p]// /,} ${ROLE[$p]} $f $sha$extra")
done
{
  echo "# ratiocheck offline build dependencies, written by tools/gpu/fetch-debs.sh"
  echo "# from: $(. /etc/os-release 2>/dev/null; echo "${PRETTY_NAME:-unknown}"), $(dpkg --print-architecture 2>/dev/null || echo amd64)"
  echo "# not fetched (BASE):$BASE"
  echo "# columns: package=version size(bytes) groups role file sha256 [sha256 of the Debian original, when repacked]"
  echo "# roles: dev = compile/link files, lib = runtime the group needs, closure = dependency of"
  echo "#        a lib (deps-env.sh uses it only where the machine lacks its soname), data"
  printf '%s\n' "${lines[@]}"
  echo "# total $total bytes in ${#lines[@]} packages"
} > MANIFEST.tmp
mv MANIFEST.tmp MANIFEST

printf '%-26s %-32s %9s  %-24s %s\n' PACKAGE VERSION BYTES GROUPS ROLE
for l in "${lines[@]}"; do
  read -r pv s g r f _ <<<"$l"
  [[ "$f" == *.slim.deb ]] && r="$r (repacked)"
  printf '%-26s %-32s %9s  %-24s %s\n' "${pv%%=*}" "${pv#*=}" "$s" "$g" "$r"
done
echo "total: $total bytes ($(awk -v t="$total" 'BEGIN{printf "%.2f MiB", t/1048576}')) in ${#lines[@]} packages, in $DIR"

# the folder's size as gpu_check.sh --stage size counts it (every file, MANIFEST included), recorded
# in the repository for a checkout without .debs (CI): its size stage adds this figure
if [ "$(cd "$DIR" && pwd -P)" = "$(cd "$REPO" && pwd -P)/.debs" ]; then
  bytes="$(find -L "$DIR" -type f -printf '%s\n' | awk '{s += $1} END {print s + 0}')"
  {
    echo "# bytes in .debs, every file (the sum gpu_check.sh --stage size counts), written by tools/gpu/fetch-debs.sh"
    echo "$bytes"
  } > "$HERE/debs.size"
  echo "recorded $bytes bytes in tools/gpu/debs.size (commit it)"
fi
