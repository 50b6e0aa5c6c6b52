# shellcheck shell=bash
# Make ratiocheck's build dependencies available on an offline machine, from the Debian 12 .deb
# files that tools/gpu/fetch-debs.sh downloaded (no root, no dpkg, no network).
#
#   source tools/gpu/deps-env.sh [DEBS_DIR]        (DEBS_DIR defaults to .debs at the repo root)
#   meson setup build && ninja -C build && meson test -C build
#
# For each capability ("group" in DEBS_DIR/MANIFEST): pkgconfig (a pkg-config program), jansson,
# openblas, hdf5, pcre2, utf8proc, check, the machine's own copy is used when it has one
# (pkg-config --exists ...); the missing ones are unpacked into a prefix and exported (a group
# MANIFEST does not carry -- openblas unless fetch-debs.sh ran with FETCH_DEBS_BLAS=1 -- is left
# to the build: the GPU check builds with meson -Dblas=disabled).  When the
# machine has every group, nothing is read (DEBS_DIR and its MANIFEST may be absent) and nothing
# is exported but RC_DEPS_GROUPS="".
#   PKG_CONFIG_PATH  gets PREFIX/pc first: the .pc files of the unpacked groups only, their paths
#                    rewritten from /usr to PREFIX/root/usr;
#   PKG_CONFIG, PATH when the machine has no pkg-config: PREFIX/bin/pkg-config (Debian's pkgconf,
#                    through a wrapper that finds its libpkgconf);
#   LD_LIBRARY_PATH  gets PREFIX/lib first: links to the unpacked groups' runtime libraries, and to
#                    those of their dependencies (libcurl, libgfortran, ...) whose soname the
#                    machine lacks -- where it has one, its own (newer) copy stays in use, so
#                    python/torch in the same shell keep the libraries they were built against;
#   RC_DEPS_PREFIX, RC_DEPS_GROUPS (the groups unpacked).
# The update-alternatives links that Debian's maintainer scripts would make are recreated in the
# prefix: libopenblas.so.0, libblas.so.3, liblapack.so.3, libopenblas.so, cblas.h, openblas.pc
# (OpenBLAS lives in .../openblas-pthread/), and hdf5.pc -> hdf5-serial.pc.
#
# Settings (environment):
#   RC_DEPS_PREFIX=DIR    where to unpack (default /tmp/rc-deps); a non-empty DIR that this script
#                         did not create is refused
#   RC_DEPS_FORCE=1       unpack every group even where the machine has it (tests), or a list:
#                         RC_DEPS_FORCE="jansson hdf5"
#   RC_DEPS_CLOSURE=all   link every dependency library into PREFIX/lib, even those the machine has
#   RC_DEPS_QUIET=1       no summary line
# Safe to source under `set -euo pipefail`, and again (it unpacks again only when MANIFEST or the
# set of groups changed; exported paths are not duplicated).  Returns non-zero on failure, after
# one line "deps-env: ..." on stderr that says why (a missing MANIFEST, a file that differs from
# it, a library that an unpacked one needs and neither the machine nor DEBS_DIR has: see
# IMAGE_BASE in tools/gpu/fetch-debs.sh).
# Needs bash, coreutils, and python3 (or `ar` and `tar` with xz) to unpack.
# Source it again in every new shell before ninja or meson test: meson re-runs pkg-config when it
# regenerates, and the programs need LD_LIBRARY_PATH for the dependency libraries (meson also puts
# the prefix's library directories in the build tree's RUNPATH, not in installed files).

_rcd_main() {
  local debs="${1:-}" here repo P R manifest
  here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)" || return 1
  repo="$(cd "$here/../.." && pwd)" || return 1
  [ -n "$debs" ] || debs="$repo/.debs"
  P="${RC_DEPS_PREFIX:-/tmp/rc-deps}"
  P="${P%/}"
  case "$P" in /?*) ;; *) echo "deps-env: RC_DEPS_PREFIX must be an absolute path, not '/'" >&2; return 1 ;; esac
  R="$P/root"
  local all_groups="pkgconfig jansson openblas hdf5 pcre2 utf8proc check"

  # ---- what the machine has (ignoring what an earlier source of this script exported)
  local clean_path clean_pcp sys_pc=""
  clean_path="$(_rcd_strip "${PATH:-}" "$P/bin")"
  clean_pcp="$(_rcd_strip "${PKG_CONFIG_PATH:-}" "$P/pc")"
  if [ -n "${PKG_CONFIG:-}" ] && [[ "$PKG_CONFIG" != "$P/"* ]] &&
     PATH="$clean_path" command -v "${PKG_CONFIG%% *}" >/dev/null 2>&1; then
    sys_pc="$PKG_CONFIG"
  else
    sys_pc="$(PATH="$clean_path" command -v pkg-config 2>/dev/null || PATH="$clean_path" command -v pkgconf 2>/dev/null || true)"
  fi
  local force=" " g
  case "${RC_DEPS_FORCE:-}" in
    ''|0|no) ;;
    1|all|yes) force=" $all_groups " ;;
    *) force=" $(echo ${RC_DEPS_FORCE//,/ }) " ;;
  esac
  local -a sel=() fromsys=()
  for g in $all_groups; do
    if [[ "$force" != *" $g "* ]] && _rcd_have "$g" "$sys_pc" "$clean_path" "$clean_pcp"; then
      fromsys+=("$g")
    else
      sel+=("$g")
    fi
  done
  # Without a pkg-config of its own the machine has no usable .pc files either (any it has would
  # only be found through ours, with headers that may not match): unpack every library group.
  if [ -z "$sys_pc" ]; then
    read -r -a sel <<<"$all_groups"; fromsys=()
  fi
  if [ ${#sel[@]} -eq 0 ]; then
    [ -n "${RC_DEPS_QUIET:-}" ] || echo "deps-env: every dependency comes from the system (nothing unpacked)"
    export RC_DEPS_GROUPS=""
    return 0
  fi

  # ---- the MANIFEST: package=version size groups role file sha256 [orig-sha256]
  local d0="$debs"
  debs="$(cd "$debs" 2>/dev/null && pwd)" ||
    { echo "deps-env: the machine lacks ${sel[*]} and there is no directory $d0 (tools/gpu/fetch-debs.sh writes it)" >&2; return 1; }
  manifest="$debs/MANIFEST"
  [ -f "$manifest" ] ||
    { echo "deps-env: the machine lacks ${sel[*]} and $manifest is missing (run tools/gpu/fetch-debs.sh)" >&2; return 1; }
  local -a M_PKG=() M_GROUPS=() M_ROLE=() M_FILE=() M_SHA=()
  local pv groups role file sha rest
  while read -r pv _ groups role file sha rest; do
    case "$pv" in '#'*|'') continue ;; esac
    M_PKG+=("${pv%%=*}"); M_GROUPS+=("$groups"); M_ROLE+=("$role"); M_FILE+=("$file"); M_SHA+=("$sha")
  done < "$manifest"
  # a group MANIFEST does not carry (openblas: the GPU check builds with meson -Dblas=disabled) is
  # left to the build, which says what it lacks
  local -a insel=() absent=()
  for g in "${sel[@]}"; do
    if [[ " ${M_GROUPS[*]//,/ } " == *" $g "* ]]; then insel+=("$g"); else absent+=("$g"); fi
  done
  if [ ${#absent[@]} -gt 0 ]; then
    [ -n "${RC_DEPS_QUIET:-}" ] || echo "deps-env: not in $manifest, left to the build: ${absent[*]}"
  fi
  sel=(${insel[@]+"${insel[@]}"})
  if [ ${#sel[@]} -eq 0 ]; then
    export RC_DEPS_GROUPS=""
    return 0
  fi

  # ---- packages to unpack: those of a selected group
  local -a pk_root=() pk_clos=()
  local i
  for i in "${!M_PKG[@]}"; do
    local want=0
    for g in "${sel[@]}"; do [[ ",${M_GROUPS[$i]}," == *",$g,"* ]] && want=1; done
    [ "$want" = 1 ] || continue
    if [ "${M_ROLE[$i]}" = closure ]; then pk_clos+=("$i"); else pk_root+=("$i"); fi
  done

  # ---- unpack (only when MANIFEST or the selection changed)
  local key
  key="$(cksum < "$manifest" | cut -d' ' -f1) ${sel[*]}"
  if [ ! -f "$P/.rc-deps" ] || [ "$(cat "$P/.rc-deps")" != "$key" ]; then
    if [ -e "$P" ] && [ ! -f "$P/.rc-deps" ] && [ -n "$(ls -A "$P" 2>/dev/null)" ]; then
      echo "deps-env: $P exists, is not empty and was not made by deps-env.sh; set RC_DEPS_PREFIX" >&2
      return 1
    fi
    rm -rf "${P:?}/root" "${P:?}/closure" "${P:?}/lists" "${P:?}/lib" "${P:?}/pc" "${P:?}/bin" "${P:?}/.rc-deps"
    mkdir -p "$P/root" "$P/closure" "$P/lists" || return 1
    # the files must be the ones MANIFEST names (a truncated copy fails here, not in the build)
    if command -v sha256sum >/dev/null 2>&1; then
      for i in ${pk_root[@]+"${pk_root[@]}"} ${pk_clos[@]+"${pk_clos[@]}"}; do
        [ "$(sha256sum < "$debs/${M_FILE[$i]}" 2>/dev/null | cut -d' ' -f1)" = "${M_SHA[$i]}" ] ||
          { echo "deps-env: $debs/${M_FILE[$i]} is missing or differs from MANIFEST" >&2; return 1; }
      done
    fi
    local -a args=()
    for i in ${pk_root[@]+"${pk_root[@]}"}; do args+=("$R" "${M_PKG[$i]}" "$debs/${M_FILE[$i]}"); done
    for i in ${pk_clos[@]+"${pk_clos[@]}"}; do args+=("$P/closure" "${M_PKG[$i]}" "$debs/${M_FILE[$i]}"); done
    _rcd_unpack "$P/lists" "${args[@]}" || { echo "deps-env: unpacking failed" >&2; return 1; }
    _rcd_fixup "$R" || return 1
    echo "$key" > "$P/.rc-deps"
  fi

  # ---- PREFIX/lib, PREFIX/pc, PREFIX/bin (rebuilt every time: cheap, and follows the machine)
  rm -rf "${P:?}/lib" "${P:?}/pc" "${P:?}/bin"
  mkdir -p "$P/lib" "$P/pc" "$P/bin" || return 1
  local f b ml="$R/usr/lib/x86_64-linux-gnu"
  # runtime libraries of the selected groups
  for i in ${pk_root[@]+"${pk_root[@]}"}; do
    [ "${M_ROLE[$i]}" = lib ] || continue
    while IFS= read -r f; do
      case "$f" in */lib*.so.*) ln -sfn "$R/$f" "$P/lib/${f##*/}" ;; esac
    done < "$P/lists/${M_PKG[$i]}"
  done
  # alternatives-made names (openblas)
  for b in libopenblas.so.0 libblas.so.3 liblapack.so.3; do
    [ -e "$ml/$b" ] && ln -sfn "$ml/$b" "$P/lib/$b"
  done
  # dependency libraries the machine lacks
  local syslibs="" linked_clos=""
  syslibs="$(_rcd_syslibs "$P")"
  for i in ${pk_clos[@]+"${pk_clos[@]}"}; do
    while IFS= read -r f; do
      case "$f" in */lib*.so.*) ;; *) continue ;; esac
      b="${f##*/}"
      if [ "${RC_DEPS_CLOSURE:-}" != all ] && [[ "$syslibs" == *" $b "* ]]; then continue; fi
      ln -sfn "$P/closure/$f" "$P/lib/$b"
      [[ "$b" =~ ^lib.*\.so\.[0-9]+$ ]] && linked_clos+=" $b"
    done < "$P/lists/${M_PKG[$i]}"
  done
  # .pc files of the selected groups' dev packages, plus the alternatives-made names
  for i in ${pk_root[@]+"${pk_root[@]}"}; do
    [ "${M_ROLE[$i]}" = dev ] || continue
    while IFS= read -r f; do
      case "$f" in *.pc) ln -sfn "$R/$f" "$P/pc/${f##*/}" ;; esac
    done < "$P/lists/${M_PKG[$i]}"
  done
  for b in openblas.pc hdf5.pc blas.pc lapack.pc; do
    [ -e "$ml/pkgconfig/$b" ] && ln -sfn "$ml/pkgconfig/$b" "$P/pc/$b"
  done
  # pkg-config (the machine has none, or forced)
  local sel_s=" ${sel[*]} "
  if [[ "$sel_s" == *" pkgconfig "* ]]; then
    for b in pkg-config pkgconf; do
      printf '#!/bin/sh\nLD_LIBRARY_PATH="%s${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" exec "%s" "$@"\n' \
        "$P/lib" "$R/usr/bin/pkgconf" > "$P/bin/$b"
      chmod +x "$P/bin/$b"
    done
  fi

  # ---- exports
  export RC_DEPS_PREFIX="$P"
  export RC_DEPS_GROUPS="${sel[*]}"
  export PKG_CONFIG_PATH="$P/pc${clean_pcp:+:$clean_pcp}"
  local clean_ld
  clean_ld="$(_rcd_strip "${LD_LIBRARY_PATH:-}" "$P/lib")"
  export LD_LIBRARY_PATH="$P/lib${clean_ld:+:$clean_ld}"
  if [ -n "$(ls -A "$P/bin")" ]; then export PATH="$P/bin${clean_path:+:$clean_path}"; else export PATH="$clean_path"; fi
  if [[ "$sel_s" == *" pkgconfig "* ]]; then
    export PKG_CONFIG="$P/bin/pkg-config"
  elif [ -n "${PKG_CONFIG:-}" ] && [[ "$PKG_CONFIG" == "$P/"* ]]; then
    unset PKG_CONFIG
  fi

  # ---- checks: every unpacked runtime library loads (ldd), gcc has OpenMP
  local bad=""
  bad="$(_rcd_lddcheck "$P")"
  if [ -n "$bad" ] && [ "${RC_DEPS_CLOSURE:-}" != all ]; then
    # a library of the machine's was too old for a Debian 12 one: use all of ours
    echo "deps-env: with the machine's own dependency libraries: $bad; linking all of the prefix's" >&2
    for i in ${pk_clos[@]+"${pk_clos[@]}"}; do
      while IFS= read -r f; do
        case "$f" in */lib*.so.*) ln -sfn "$P/closure/$f" "$P/lib/${f##*/}" ;; esac
      done < "$P/lists/${M_PKG[$i]}"
    done
    bad="$(_rcd_lddcheck "$P")"
    linked_clos=" all (the machine's copies did not resolve)"
  fi
  if [ -n "$bad" ]; then
    echo "deps-env: libraries that neither the machine nor $debs has: $bad(a bare image lacks what tools/gpu/fetch-debs.sh's IMAGE_BASE assumes: fetch with FETCH_DEBS_IMAGE_BASE=0)" >&2
    return 1
  fi
  if ! printf 'int main(void){return 0;}\n' | ${CC:-cc} -fopenmp -x c - -o /dev/null >/dev/null 2>&1; then
    echo "deps-env: warning: '${CC:-cc} -fopenmp' does not link (gcc's libgomp: not in the .debs)" >&2
  fi

  if [ -z "${RC_DEPS_QUIET:-}" ]; then
    local sys_s="${fromsys[*]:-}"
    echo "deps-env: from $P: ${sel[*]}${linked_clos:+; dependency libraries from $P:$linked_clos}${sys_s:+; from the system: $sys_s}"
  fi
  return 0
}

# colon list $1 without the entry $2
_rcd_strip() {
  local out="" e IFS=:
  for e in $1; do [ -n "$e" ] && [ "$e" != "$2" ] && out="${out:+$out:}$e"; done
  printf '%s' "$out"
}

# does the machine have group $1?  ($2 its pkg-config, $3 PATH and $4 PKG_CONFIG_PATH to use)
_rcd_have() {
  case "$1" in
    pkgconfig) [ -n "$2" ] ;;
    jansson)   _rcd_pcq "$2" "$3" "$4" 'jansson >= 2.11' ;;
    openblas)  _rcd_pcq "$2" "$3" "$4" openblas ;;
    hdf5)      _rcd_pcq "$2" "$3" "$4" hdf5 || _rcd_pcq "$2" "$3" "$4" hdf5-serial ;;
    pcre2)     _rcd_pcq "$2" "$3" "$4" libpcre2-8 ;;
    utf8proc)  _rcd_pcq "$2" "$3" "$4" libutf8proc ;;
    check)     _rcd_pcq "$2" "$3" "$4" check ;;
    *) return 1 ;;
  esac
}
# shellcheck disable=SC2086  # $1 may be "pkg-config --static" and the like
_rcd_pcq() { [ -n "$1" ] && PATH="$2" PKG_CONFIG_PATH="$3" $1 --exists "$4" >/dev/null 2>&1; }

# " soname soname ... " the machine provides (ld.so cache, the usual directories, and the caller's
# LD_LIBRARY_PATH without PREFIX/lib)
_rcd_syslibs() {
  local out=" " d f ldc e IFS_save="$IFS"
  for ldc in ldconfig /sbin/ldconfig /usr/sbin/ldconfig; do
    if command -v "$ldc" >/dev/null 2>&1; then
      out+="$("$ldc" -p 2>/dev/null | awk '/=>/ && /x86-64/ {printf "%s ", $1}' || true)"
      break
    fi
  done
  local dirs="/lib/x86_64-linux-gnu /usr/lib/x86_64-linux-gnu /lib64 /usr/lib64 /usr/local/lib /usr/local/lib64 /usr/local/lib/x86_64-linux-gnu"
  IFS=:
  for e in ${LD_LIBRARY_PATH:-}; do [ -n "$e" ] && [ "$e" != "$1/lib" ] && dirs+=" $e"; done
  IFS="$IFS_save"
  for d in $dirs; do
    [ -d "$d" ] || continue
    for f in "$d"/lib*.so.*; do [ -e "$f" ] && out+="${f##*/} "; done
  done
  printf '%s' "$out"
}

# unpack .deb files without dpkg: _rcd_unpack LISTDIR (DEST NAME DEB)...; LISTDIR/NAME gets the
# package's paths (relative to DEST).  python3's stdlib when present (ar is parsed by hand; data.tar
# .xz/.gz/.bz2/plain, .zst through the zstd program), else ar + tar.
_rcd_unpack() {
  local lists="$1"; shift
  if command -v python3 >/dev/null 2>&1; then
    python3 - "$lists" "$@" <<'PY'
import io, os, subprocess, sys, tarfile
lists, rest = sys.argv[1], sys.argv[2:]
SKIP = ("usr/share/doc/", "usr/share/man/", "usr/share/lintian/", "usr/share/menu/", "usr/lib/menu/")
def members(path):
    with open(path, "rb") as fh:
        if fh.read(8) != b"!<arch>\n":
            raise SystemExit(f"{path}: not an ar archive")
        while True:
            hdr = fh.read(60)
            if len(hdr) < 60:
                return
            name = hdr[:16].decode().strip().rstrip("/")
            size = int(hdr[48:58].decode().strip())
            data = fh.read(size)
            if size % 2:
                fh.read(1)
            yield name, data
for i in range(0, len(rest), 3):
    dest, pkg, deb = rest[i:i + 3]
    data = None
    for name, blob in members(deb):
        if name.startswith("data.tar"):
            data = (name, blob)
            break
    if data is None:
        raise SystemExit(f"{deb}: no data.tar member")
    name, blob = data
    if name.endswith(".zst"):
        blob = subprocess.run(["zstd", "-dc"], input=blob, stdout=subprocess.PIPE, check=True).stdout
    tf = tarfile.open(fileobj=io.BytesIO(blob), mode="r:*")
    keep, paths = [], []
    for m in tf.getmembers():
        p = m.name[2:] if m.name.startswith("./") else m.name.lstrip("/")
        if not p or (p + "/").startswith(SKIP):
            continue
        m.name = p
        keep.append(m)
        if not m.isdir():
            paths.append(p)
    kw = {"filter": "tar"} if hasattr(tarfile, "tar_filter") else {}
    tf.extractall(dest, members=keep, **kw)
    with open(os.path.join(lists, pkg), "w") as out:
        out.write("".join(p + "\n" for p in paths))
PY
    return $?
  fi
  command -v ar >/dev/null 2>&1 && command -v tar >/dev/null 2>&1 ||
    { echo "deps-env: need python3, or ar and tar, to unpack .deb files" >&2; return 1; }
  local dest pkg deb mem tmp
  tmp="$(mktemp -d)" || return 1
  while [ $# -ge 3 ]; do
    dest="$1"; pkg="$2"; deb="$3"; shift 3
    mem="$(ar t "$deb" | awk '/^data\.tar/ {print; exit}')"
    [ -n "$mem" ] || { echo "deps-env: $deb: no data.tar" >&2; rm -rf "$tmp"; return 1; }
    (cd "$tmp" && ar x "$deb" "$mem") || { rm -rf "$tmp"; return 1; }
    case "$mem" in
      *.zst) zstd -dc "$tmp/$mem" > "$tmp/data.tar" && rm -f "$tmp/$mem" && mem=data.tar ;;
    esac
    tar -xf "$tmp/$mem" -C "$dest" --exclude='./usr/share/doc' --exclude='./usr/share/man' \
        --exclude='./usr/share/lintian' --exclude='./usr/share/menu' --exclude='./usr/lib/menu' ||
      { rm -rf "$tmp"; return 1; }
    tar -tf "$tmp/$mem" | sed -e 's#^\./##' -e '/\/$/d' -e '/^$/d' \
      -e '\#^usr/share/\(doc\|man\|lintian\|menu\)/#d' -e '\#^usr/lib/menu/#d' > "$lists/$pkg"
    rm -f "$tmp/$mem"
  done
  rm -rf "$tmp"
}

# after unpacking: .pc paths /usr -> ROOT/usr, and the links update-alternatives would make
_rcd_fixup() {
  local R="$1" f ml="$1/usr/lib/x86_64-linux-gnu" inc="$1/usr/include/x86_64-linux-gnu"
  while IFS= read -r -d '' f; do
    [ -L "$f" ] && continue
    sed -E -i "s#(^|[=[:space:]'\"]|-I|-L)/usr(/|\$|[[:space:]])#\\1$R/usr\\2#g" "$f" || return 1
  done < <(find "$R" -name '*.pc' -print0)
  _rcd_alt() {  # link target (relative to the link's directory)
    [ -e "$(dirname "$1")/$2" ] || return 0
    mkdir -p "$(dirname "$1")" && ln -sfn "$2" "$1"
  }
  local ob=openblas-pthread
  if [ -d "$ml/$ob" ]; then
    _rcd_alt "$ml/libopenblas.so.0" "$ob/libopenblas.so.0"
    _rcd_alt "$ml/libblas.so.3" "$ob/libblas.so.3"
    _rcd_alt "$ml/liblapack.so.3" "$ob/liblapack.so.3"
    _rcd_alt "$ml/libopenblas.so" "$ob/libopenblas.so"
    _rcd_alt "$ml/libblas.so" "$ob/libblas.so"
    _rcd_alt "$ml/liblapack.so" "$ob/liblapack.so"
    _rcd_alt "$ml/pkgconfig/openblas.pc" "../$ob/pkgconfig/openblas.pc"
    _rcd_alt "$ml/pkgconfig/blas.pc" "../$ob/pkgconfig/blas-openblas.pc"
    _rcd_alt "$ml/pkgconfig/lapack.pc" "../$ob/pkgconfig/lapack-openblas.pc"
    _rcd_alt "$ml/cmake/openblas/OpenBLASConfig.cmake" "../../$ob/cmake/openblas/OpenBLASConfig.cmake"
    _rcd_alt "$ml/cmake/openblas/OpenBLASConfigVersion.cmake" "../../$ob/cmake/openblas/OpenBLASConfigVersion.cmake"
    _rcd_alt "$inc/cblas.h" "$ob/cblas.h"
    _rcd_alt "$inc/cblas-openblas.h" "$ob/cblas.h"
    _rcd_alt "$inc/f77blas.h" "$ob/f77blas.h"
    _rcd_alt "$inc/openblas_config.h" "$ob/openblas_config.h"
  fi
  _rcd_alt "$ml/pkgconfig/hdf5.pc" "hdf5-serial.pc"
  unset -f _rcd_alt
  return 0
}

# "lib needs soname ...; " for every runtime library in PREFIX/lib (and the unpacked programs) that ldd
# cannot fully resolve; empty when all resolve or ldd is missing
_rcd_lddcheck() {
  command -v ldd >/dev/null 2>&1 || return 0
  local f out="" o
  for f in "$1"/lib/lib*.so.* "$1"/root/usr/bin/pkgconf; do
    [ -e "$f" ] || continue
    o="$(ldd "$f" 2>&1 | awk '/not found/ {printf "%s%s", (n++ ? " " : ""), $1}' || true)"
    [ -n "$o" ] && out+="${f##*/} needs $o; "
  done
  printf '%s' "$out"
}

# called in a || list: the caller's `set -e` does not apply inside (every step checks for itself)
_rcd_status=0
_rcd_main "$@" || _rcd_status=$?
unset -f _rcd_main _rcd_strip _rcd_have _rcd_pcq _rcd_syslibs _rcd_unpack _rcd_fixup _rcd_lddcheck
if [ "$_rcd_status" -ne 0 ]; then unset _rcd_status; return 1 2>/dev/null || exit 1; fi
unset _rcd_status
