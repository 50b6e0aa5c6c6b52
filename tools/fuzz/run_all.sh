#!/bin/bash
# Build every harness (tools/fuzz/build.sh), then run each one after the other
# for a bounded time over a scratch copy of its seed corpus.
#   tools/fuzz/run_all.sh [OUT]      (OUT defaults to /tmp/rc-fuzz)
#
# Environment:
#   FUZZ_SECONDS  seconds per harness (default 60)
#   FUZZ_ONLY     space-separated harness names to run (default: all built)
#   FUZZ_FLAGS    extra libFuzzer flags, appended
#
# Corpus of harness fuzz_NAME: tools/fuzz/corpus/NAME/ (or corpus/fuzz_NAME/),
# else the generated tools/fuzz/make_seeds.py folder OUT/seeds/NAME/ (st_index:
# seeds/index/), else an
# empty corpus (with a warning). It is copied to OUT/run/NAME/corpus, which
# libFuzzer grows; the committed corpus is never written.
#
# Prints one line per harness (name, executions, result) and exits 1 when any
# harness reports a crash, sanitizer error, leak, timeout or out-of-memory
# (its log OUT/run/NAME/log and the crashing input's path are printed), 2 when
# the build fails.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${1:-/tmp/rc-fuzz}
SECS=${FUZZ_SECONDS:-60}

if ! bash "$ROOT/tools/fuzz/build.sh" "$OUT"; then
  echo "run_all.sh: build failed" >&2
  exit 2
fi
OUT=$(cd "$OUT" && pwd)

export RC_SOURCE_DIR="$ROOT"
# Stop at the first UBSan report with a stack; ASan options as libFuzzer
# sets them (leak detection on).
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}"
export ASAN_OPTIONS="${ASAN_OPTIONS:-}"
# the CPU backend's OpenMP pool, if a harness reaches it: one thread is enough
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}

mapfile -t names <"$OUT/harnesses.txt"
if [ -n "${FUZZ_ONLY:-}" ]; then
  names=()
  for n in $FUZZ_ONLY; do names+=("fuzz_${n#fuzz_}"); done
fi

summary=()
failed=0
for h in "${names[@]}"; do
  short=${h#fuzz_}
  if [ ! -x "$OUT/$h" ]; then
    summary+=("$(printf '%-20s %12s  %s' "$h" "-" "NOT BUILT")")
    failed=1
    continue
  fi
  src=""
  for c in "$ROOT/tools/fuzz/corpus/$short" "$ROOT/tools/fuzz/corpus/$h" "$OUT/seeds/$short" \
    "$OUT/seeds/${short#st_}"; do
    if [ -d "$c" ]; then src=$c; break; fi
  done
  work="$OUT/run/$short"
  rm -rf "$work"
  mkdir -p "$work/corpus" "$work/artifacts"
  if [ -n "$src" ]; then
    cp -R "$src/." "$work/corpus/"
    case "$src" in
      "$ROOT"/tools/fuzz/corpus/*) ;;
      *) echo "run_all.sh: WARNING: no committed corpus for $h (tools/fuzz/corpus/$short/); using $src" >&2 ;;
    esac
  else
    echo "run_all.sh: WARNING: no corpus for $h (tools/fuzz/corpus/$short/ or make_seeds.py); starting empty" >&2
  fi
  # scratch files the harness writes (fuzz_common.h's FUZZ_TMP), on tmpfs when there is one
  base=/tmp
  [ -w /dev/shm ] && base=/dev/shm
  scratch=$(mktemp -d "$base/rc-fuzz-$short.XXXXXX")
  echo "run_all.sh: $h for ${SECS} s over $(find "$work/corpus" -type f | wc -l) inputs ($work/log)"
  start=$(date +%s)
  # shellcheck disable=SC2086
  FUZZ_TMP="$scratch" "$OUT/$h" -rss_limit_mb=2048 -malloc_limit_mb=2048 -timeout=10 \
    -max_total_time="$SECS" -print_final_stats=1 -artifact_prefix="$work/artifacts/" \
    ${FUZZ_FLAGS:-} "$work/corpus" >"$work/log" 2>&1
  rc=$?
  took=$(($(date +%s) - start))
  execs=$(grep -aoE 'stat::number_of_executed_units: *[0-9]+' "$work/log" | tail -n 1 | grep -oE '[0-9]+$')
  if [ -z "$execs" ]; then
    # killed before the final stats: the last status line
    execs=$(grep -aoE '^#[0-9]+' "$work/log" | tail -n 1 | tr -d '#')
  fi
  artifact=$(grep -aoE 'Test unit written to [^ ]+' "$work/log" |
    tail -n 1 | awk '{print $NF}')
  [ -z "$artifact" ] && artifact=$(find "$work/artifacts" -type f | head -n 1)
  if [ "$rc" -eq 0 ] && [ -z "$artifact" ]; then
    result="OK"
    rm -rf "$scratch"
  else
    kind="crash"
    if grep -aq 'ERROR: LeakSanitizer' "$work/log"; then kind="leak"
    elif grep -aq 'ERROR: libFuzzer: timeout' "$work/log"; then kind="timeout"
    elif grep -aqE 'ERROR: libFuzzer: out-of-memory' "$work/log"; then kind="out-of-memory"
    elif grep -aq 'runtime error:' "$work/log"; then kind="UBSan"
    elif grep -aq 'ERROR: AddressSanitizer' "$work/log"; then kind="ASan"
    fi
    result="FAIL ($kind, exit $rc): input ${artifact:-<none written>}, log $work/log, scratch $scratch"
    failed=1
    echo "----- $h: last lines of $work/log"
    grep -avE '^#[0-9]+.*(NEW|REDUCE|pulse|INITED)' "$work/log" | tail -n 60
    echo "-----"
  fi
  summary+=("$(printf '%-20s %12s execs %5d s  %s' "$h" "${execs:-?}" "$took" "$result")")
done

echo
echo "fuzz summary (${SECS} s per harness):"
printf '%s\n' "${summary[@]}"
exit "$failed"
