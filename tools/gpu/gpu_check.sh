#!/usr/bin/env bash
# The GPU check on a bare GPU machine (NVIDIA GPU, CUDA toolkit with nvcc and cuBLAS, Python with
# torch, transformers, tokenizers; no network), in stages that each fit one 600 s device call:
#
#   bash tools/gpu/gpu_check.sh --stage size                 # here, before the call: what travels
#   bash tools/gpu/gpu_check.sh --stage build,suite,multi    # call 1: build + the CUDA test suite
#   bash tools/gpu/gpu_check.sh --stage seed,bounds          # call 2: HF side by side, GPU bounds
#
# (docs/gpu.md gives the device tool's command lines; `.debs` travels with the tree: carry it.)
#
# Stages (run in this order, whatever order --stage lists them in):
#   size    what would travel to the device machine: tracked and untracked-not-ignored files plus
#           the carried folders (RC_GPU_CARRY, default ".debs"; where .debs is absent, as in a clone,
#           the size tools/gpu/fetch-debs.sh recorded in tools/gpu/debs.size); over RC_GPU_TREE_MIB (default 60;
#           the device tool refuses above 64 MiB) the script stops here with exit 3 and the numbers.
#           Runs first by default where $OUT is unset (not on the device machine).
#   deps    C libraries the machine lacks, from .debs (tools/gpu/deps-env.sh; nothing is read when
#           the machine has them all). Always runs.
#   build   meson -Dcuda=enabled, then ninja: ratiocheck, the CUDA module, test_cuda, and the
#           fixture files stored as .xz unpacked (fixtures.stamp: tools/fixtures/pack_fixtures.py)
#   libs    ldd over the objects that link the CUDA runtime and cuBLAS (the module, test_cuda)
#           and ratiocheck; a missing library is named (and the toolkit's lib folder put on
#           LD_LIBRARY_PATH when that finds it); then one --backend cuda run, whose one-line error
#           (the loader's, with the dynamic linker's text) is the summary's when it fails
#   suite   tests/test_cuda.c on the GPU (RC_CUDA_SYNC=1), one process per test case (op_twins,
#           host, model); its "measured max" lines and its Check totals go to the summary
#   multi   several GPUs for one model (--gpus): test_cuda's case multi (every fixture split over
#           2 and 3 GPUs bitwise one GPU's) and ratiocheck --gpus 2 against --gpus 1 (the same
#           statistics to the digit; the bundled model, then the hybrid fixture qnext_hybrid);
#           skipped with a line saying so on a machine with one GPU
#   seed    a pythia-160m-shaped GPT-NeoX (make_seed_model.py, trained for RC_TRAIN_SECONDS on
#           tools/gpu/kjv-excerpt.txt.xz), the bundled prompts, --len 20,40,50, fp32/fp16/bf16:
#           ratiocheck (engine and invariant kernels), HF transformers (hf_seed.py) on the same GPU
#           and weights, side by side; then the sampler's fp8 settings on the GPU against the CPU
#   bounds  the GPU's bandwidth and GEMM bounds (measure_bounds.py), the side-by-side table again
#           with them
# build implies deps and libs; suite, multi, seed and bounds build first when no build is there.
#
# Each stage has a time limit (build 300 s, suite 400 s, multi 150 s, seed 420 s, bounds 150 s, the others
# 60-90 s; RC_GPU_LIMIT_<stage>=N overrides), cut to what is left of RC_GPU_BUDGET (default
# 570 s: one device call of 600 s), and each step inside has its own cap. A stage that fails or
# runs out of time is reported and the next one runs. Exit status: 0 every stage passed (or was
# skipped where a dry run has no GPU), 1 a stage failed, 3 the tree is too large, 2 usage.
#
# Output: OUTDIR = $OUT when set (the device tool brings back what is there), else the first
# argument, else /tmp/rc-gpu. log.txt (everything printed) and summary.txt (one line per stage,
# the lines that matter under it) are written as the stages run, so a call killed at its limit
# still returns both; test_cuda.txt (the suite's output) and seed.tgz (the seed and bounds
# stages' JSON files) beside them. Work files: RC_GPU_WORK (default /tmp/rc-gpu-work; the build
# in build/ is reused by a later call on the same machine).
#
# RC_GPU_DRYRUN=1: the same stages on a machine without a GPU (CPU backend, torch on the CPU,
# the --small model, 3 prompts, --len 4,8; the suite runs the host build tests/test_cuda_host's
# quick cases, multi the host build's case multi on 3 fake devices, bounds skips, libs loads the module against the fake driver tests/libcuda.so.1):
# a rehearsal of the script (tools/gpu/rehearse.sh,
# run by CI), not a measurement. RC_GPU_BUILD=DIR uses an existing build folder. RC_GPU_SIMULATE
# (rehearsals): "missing-lib" (the module needs a library no machine has), "fail:STAGE" (the
# stage fails), "hang:STAGE" (the stage sleeps past its limit), "one-gpu" (the multi stage sees one
# GPU); several, space-separated.
# no `set -e` or `set -u`: a failing command or an unset name inside a stage must end that stage,
# never the script (every stage checks its own steps)
set -o pipefail
cd "$(dirname "$0")/../.." || exit 2
ROOT=$PWD

usage() { echo "usage: bash tools/gpu/gpu_check.sh [--stage size,deps,build,libs,suite,multi,seed,bounds] [OUTDIR]" >&2; exit 2; }
ASKED=""
ARG_OUT=""
while [ $# -gt 0 ]; do
    case "$1" in
        --stage) [ $# -ge 2 ] || usage; ASKED="$ASKED,$2"; shift 2 ;;
        --stage=*) ASKED="$ASKED,${1#--stage=}"; shift ;;
        -h|--help) sed -n '2,/^# no .set -e/p' "$0" | sed '$d'; exit 0 ;;
        -*) usage ;;
        *) ARG_OUT=$1; shift ;;
    esac
done
[ -n "$ASKED" ] || ASKED=build,suite,multi
ALL_STAGES="size deps build libs suite multi seed bounds"
declare -A WANT=()
for s in ${ASKED//,/ }; do
    case " $ALL_STAGES " in *" $s "*) WANT[$s]=1 ;; *) echo "gpu_check.sh: unknown stage '$s'" >&2; usage ;; esac
done

OUTDIR=${OUT:-${ARG_OUT:-/tmp/rc-gpu}}
mkdir -p "$OUTDIR" || exit 2
WORK=${RC_GPU_WORK:-/tmp/rc-gpu-work}
mkdir -p "$WORK/out" || exit 2
RES=$WORK/out
LOG=$OUTDIR/log.txt
SUMMARY=$OUTDIR/summary.txt
: >"$SUMMARY"
exec > >(tee -a "$LOG") 2>&1
TEE_PID=$!
# the end: close the pipe to tee and let it write the last lines before the call returns
finish() {
    exec 1>&- 2>&-
    wait "$TEE_PID" 2>/dev/null
    exit "$1"
}
T0=$(date +%s)
BUDGET=${RC_GPU_BUDGET:-570}
DRY=${RC_GPU_DRYRUN:-0}
SIM=" ${RC_GPU_SIMULATE:-} "
PY=${PYTHON:-python3}
export PYTHONUNBUFFERED=1
BUILD=${RC_GPU_BUILD:-$WORK/build}
RC=$BUILD/src/ratiocheck
MODEL=$WORK/seed160m
if [ "$DRY" = 1 ]; then
    BACKEND=cpu DEVICE=cpu LENS=4,8 SMALL=--small SUBSET="--num-prompts 3" TRAIN=${RC_TRAIN_SECONDS:-5}
    MODEL=$WORK/seed-small
else
    BACKEND=cuda DEVICE=cuda LENS=20,40,50 SMALL='' SUBSET='' TRAIN=${RC_TRAIN_SECONDS:-45}
fi

# summary.txt: written line by line as the stages run
sum() { printf '%s\n' "$*" >>"$SUMMARY"; }
elapsed() { echo $(($(date +%s) - T0)); }
# tmo CAP CMD...: CMD under `timeout`, for at most CAP s and what is left of the stage
tmo() {
    local cap=$1 left
    shift
    left=$((STAGE_END - $(date +%s)))
    [ "$cap" -lt "$left" ] && left=$cap
    if [ "$left" -lt 3 ]; then
        echo "(no time left in the stage for: $*)"
        return 124
    fi
    timeout -k 5 "$left" "$@"
}
simulated() { [[ "$SIM" == *" $1 "* ]]; }
# step NAME CAP CMD...: tmo CAP CMD, its output also in $RES/NAME.txt; on failure the summary gets
# "NAME FAILED (exit N): its last line"
step() {
    local name=$1 cap=$2 rc
    shift 2
    tmo "$cap" "$@" 2>&1 | tee "$RES/$name.txt"
    rc=${PIPESTATUS[0]}
    [ "$rc" = 0 ] || sum "  $name FAILED (exit $rc): $(grep -v '^\s*$' "$RES/$name.txt" | tail -1 | cut -c1-300)"
    return "$rc"
}

sum "GPU check $(date -u '+%Y-%m-%d %H:%M:%S UTC'), stages asked: ${ASKED#,}$([ "$DRY" = 1 ] && echo ' (RC_GPU_DRYRUN=1: a rehearsal without a GPU, not a measurement)')"
sum "machine: $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null | head -1 || true)$(command -v nvidia-smi >/dev/null || echo 'no nvidia-smi'); nvcc: $(nvcc --version 2>/dev/null | tail -1 || echo none)"
sum "python: $(timeout 60 "$PY" -c 'import sys, torch, transformers; print(sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda, "transformers", transformers.__version__, "gpu", torch.cuda.get_device_name(0) if torch.cuda.is_available() else None)' 2>&1 | tail -1)"

# ---------------------------------------------------------------- stages

stage_size() {
    local limit_mib=${RC_GPU_TREE_MIB:-60} carry=${RC_GPU_CARRY:-.debs} tree=0 n=0 c extra=0 line=""
    if ! git -C "$ROOT" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
        sum "  not a git checkout (on the device machine the tree has already travelled)"
        return 0
    fi
    # "SIZE PATH" per file that travels: the total, and the largest folders (two levels down)
    git -C "$ROOT" ls-files -z -co --exclude-standard |
        (cd "$ROOT" && xargs -0 -r stat -L -c '%s %n' 2>/dev/null) >"$RES/tree-sizes.txt"
    read -r n tree < <(awk '{n++; s+=$1} END {print n+0, s+0}' "$RES/tree-sizes.txt")
    for c in $carry; do
        local b=0
        if [ -e "$ROOT/$c" ]; then
            b=$(find -L "$ROOT/$c" -type f -printf '%s\n' | awk '{s+=$1} END {print s+0}')
            line="$line, $c $(awk -v b="$b" 'BEGIN {printf "%.1f", b/1048576}') MiB"
            if [ "$c" = .debs ] && [ -f "$ROOT/tools/gpu/debs.size" ] &&
                [ "$(grep -v '^#' "$ROOT/tools/gpu/debs.size" | head -1)" != "$b" ]; then
                line="$line (tools/gpu/debs.size records another size: rerun tools/gpu/fetch-debs.sh and commit it)"
            fi
        elif [ "$c" = .debs ] && [ -f "$ROOT/tools/gpu/debs.size" ]; then
            # a checkout without .debs (CI): the size fetch-debs.sh recorded when it fetched
            b=$(grep -v '^#' "$ROOT/tools/gpu/debs.size" | head -1)
            if ! [[ "$b" =~ ^[0-9]{1,12}$ ]]; then
                sum "  tools/gpu/debs.size: no byte count (rerun tools/gpu/fetch-debs.sh)"
                return 1
            fi
            line="$line, $c $(awk -v b="$b" 'BEGIN {printf "%.1f", b/1048576}') MiB as recorded in tools/gpu/debs.size"
        else
            line="$line, $c absent"
        fi
        extra=$((extra + b))
    done
    local total=$((tree + extra))
    local msg
    msg=$(awk -v t="$tree" -v n="$n" -v a="$total" -v l="$limit_mib" -v x="$line" \
        'BEGIN {printf "travels: %.1f MiB (%d files of the working tree %.1f MiB%s); limit %d MiB here, 64 MiB at the device tool", a/1048576, n, t/1048576, x, l}')
    echo "$msg"
    sum "  $msg"
    sum "  largest: $(awk '{p = $2; k = split(p, a, "/"); d = (k > 2) ? (a[1] "/" a[2]) : ((k > 1) ? a[1] : "(top)"); s[d] += $1}
        END {for (d in s) printf "%d %s\n", s[d], d}' "$RES/tree-sizes.txt" | sort -rn | head -6 |
        awk '{printf "%s%s %.1f", (NR > 1 ? ", " : ""), $2, $1 / 1048576} END {print " MiB"}')"
    if [ "$total" -gt $((limit_mib * 1048576)) ]; then
        sum "  REFUSED: over $limit_mib MiB; carry less (RC_GPU_CARRY) or ignore large untracked files"
        return 3
    fi
    return 0
}

stage_deps() {
    # shellcheck source=tools/gpu/deps-env.sh
    source tools/gpu/deps-env.sh "$ROOT/.debs" || { sum "  deps-env.sh failed (its line above)"; return 1; }
    sum "  unpacked from .debs: ${RC_DEPS_GROUPS:-nothing (the machine has every library)}"
    command -v meson >/dev/null && command -v ninja >/dev/null ||
        { sum "  meson or ninja missing (pip install meson ninja)"; return 1; }
}

stage_build() {
    local opt=-Dcuda=enabled
    if [ "$DRY" = 1 ] && ! command -v nvcc >/dev/null; then opt=-Dcuda=auto; fi
    if [ ! -f "$BUILD/build.ninja" ]; then
        tmo 120 meson setup "$BUILD" "$opt" -Dblas=disabled -Dbuildtype=release >"$RES/meson-setup.txt" 2>&1 ||
            { tail -30 "$RES/meson-setup.txt"; sum "  meson setup failed: $(grep -m1 -iE 'error' "$RES/meson-setup.txt")"; return 1; }
    fi
    local t want=() have
    have=$(ninja -C "$BUILD" -t targets all 2>/dev/null | cut -d: -f1)
    # fixtures.stamp: the fixture files stored as .xz unpacked (tools/fixtures/pack_fixtures.py)
    local targets="fixtures.stamp src/ratiocheck kernels/libratiocheck_cuda.so tests/test_cuda tests/libcuda.so.1"
    [ "$DRY" = 1 ] && targets="$targets tests/test_cuda_host tests/ratiocheck_cuda_host"
    for t in $targets; do
        grep -qx "$t" <<<"$have" && want+=("$t")
    done
    tmo 300 ninja -C "$BUILD" "${want[@]}" >"$RES/ninja.txt" 2>&1 ||
        { tail -40 "$RES/ninja.txt"; sum "  ninja failed: $(grep -m1 -E 'error|FAILED' "$RES/ninja.txt")"; return 1; }
    "$RC" --version | head -1
    sum "  built: ${want[*]} in $BUILD"
    [ -f "$BUILD/kernels/libratiocheck_cuda.so" ] || sum "  no CUDA module: this build is CPU-only (configured without CUDA, or no nvcc)"
}

# "lib (needed by obj) ..." for every library ldd cannot find in the objects given
missing_libs() {
    local o
    for o in "$@"; do
        [ -e "$o" ] || continue
        ldd "$o" 2>/dev/null | awk -v o="${o##*/}" '/not found/ {printf "%s (needed by %s) ", $1, o}'
    done
}

stage_libs() {
    local module=$BUILD/kernels/libratiocheck_cuda.so
    if simulated missing-lib; then
        # a copy of the module (or of ratiocheck in a CPU-only build) needing a library no machine has
        local src=$module
        [ -f "$src" ] || src=$RC
        mkdir -p "$WORK/sim"
        "$PY" - "$src" "$WORK/sim/${src##*/}" <<'EOF' || return 1
import sys
d = open(sys.argv[1], "rb").read()
for lib in (b"libcublas.so.13", b"libjansson.so.4"):
    if b"\0" + lib + b"\0" in d:
        fake = lib[:-2] + b"99" if lib[-3:-2] == b"." else lib[:-1] + b"9"  # same length
        d = d.replace(b"\0" + lib + b"\0", b"\0" + fake + b"\0", 1)
        break
open(sys.argv[2], "wb").write(d)
EOF
        chmod +x "$WORK/sim/${src##*/}"
        [ "$src" = "$module" ] && module=$WORK/sim/${src##*/} || RC=$WORK/sim/${src##*/}
        echo "(simulated: $WORK/sim/${src##*/} needs a library that does not exist)"
    fi
    local objs=("$module" "$BUILD/tests/test_cuda" "$RC") miss
    miss=$(missing_libs "${objs[@]}")
    if [ -n "$miss" ] && command -v nvcc >/dev/null; then
        local root d
        root=$(dirname "$(dirname "$(readlink -f "$(command -v nvcc)")")")
        for d in "$root/lib64" "$root/lib" "$root/targets/x86_64-linux/lib"; do
            [ -d "$d" ] && export LD_LIBRARY_PATH="$d${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
        done
        sum "  missing at first: $miss-> LD_LIBRARY_PATH gets the toolkit's folders under $root"
        miss=$(missing_libs "${objs[@]}")
    fi
    local rp
    rp=$(readelf -d "$module" 2>/dev/null | sed -n 's/.*(RUNPATH).*\[\(.*\)\]/\1/p')
    [ -f "$module" ] && sum "  CUDA module: $module (run path: ${rp:-none})"
    if [ -n "$miss" ]; then
        echo "missing libraries: $miss"
        sum "  MISSING: $miss"
    fi
    # one run that loads the module: on a GPU it computes; in a dry run the fake driver
    # (tests/libcuda.so.1) lets the module load and its own probe answer "no usable driver"
    local out code
    if [ ! -f "$module" ]; then
        sum "  no CUDA module to load (CPU-only build)"
        [ "$DRY" = 1 ] && [ -z "$miss" ] && return 0
        return 1
    fi
    if [ "$DRY" = 1 ]; then
        out=$(LD_LIBRARY_PATH="$BUILD/tests${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" RATIOCHECK_CUDA_MODULE="$module" \
            tmo 60 "$RC" --model data/models/pythia-rc-tiny --len 4 --num-prompts 1 --out none --backend cuda -q 2>&1)
        code=$?
        echo "$out"
        if [ "$code" = 8 ] && grep -q "older than the CUDA" <<<"$out"; then
            sum "  the module loads (fake driver: its probe answered)"
        else
            sum "  --backend cuda: exit $code: $(tail -1 <<<"$out")"
            return 1
        fi
    else
        out=$(RATIOCHECK_CUDA_MODULE="$module" tmo 60 "$RC" --model data/models/pythia-rc-tiny --len 4 \
            --num-prompts 1 --out none --backend cuda --json -q 2>&1)
        code=$?
        if [ "$code" = 0 ]; then
            sum "  --backend cuda runs on $(sed -n 's/.*"device": "\([^"]*\)".*/\1/p' <<<"$out" | head -1)"
        else
            echo "$out"
            sum "  --backend cuda: exit $code: $(tail -1 <<<"$out")"
            return 1
        fi
    fi
    [ -z "$miss" ]
}

stage_suite() {
    local exe=$BUILD/tests/test_cuda cases="op_twins:150 host:60 model:400"
    if [ "$DRY" = 1 ] && [ -x "$BUILD/tests/test_cuda_host" ]; then
        # no GPU: the same suite over the host build of the CUDA sources, its quick cases
        exe=$BUILD/tests/test_cuda_host cases="op_twins:120 host:60"
        sum "  (dry run: tests/test_cuda_host, the host build, cases op_twins and host)"
    fi
    [ -x "$exe" ] || { sum "  no $exe (the build stage failed?)"; return 1; }
    # one process per test case (Check's CK_RUN_CASE), shortest first, each with its own cap:
    # a case that hangs or crashes leaves the others' results
    local case cap rc bad=0 t0
    : >"$OUTDIR/test_cuda.txt"
    for case in $cases; do
        cap=${case#*:} case=${case%%:*}
        echo "== CK_RUN_CASE=$case" >>"$OUTDIR/test_cuda.txt"
        t0=$(date +%s)
        # OMP_WAIT_POLICY=PASSIVE as meson's tests: the CPU twins' threads do not spin
        CK_RUN_CASE=$case RC_SOURCE_DIR=$ROOT RC_CUDA_SYNC=1 OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-PASSIVE} \
            tmo "$cap" "$exe" >>"$OUTDIR/test_cuda.txt" 2>&1
        rc=$?
        case $rc in
            0) sum "  $case: passed in $(($(date +%s) - t0)) s" ;;
            77) sum "  test_cuda skipped (exit 77: no GPU)"; [ "$DRY" = 1 ] && return 0; return 1 ;;
            124|137) sum "  $case: stopped at its time limit (exit $rc)"; bad=1 ;;
            *) sum "  $case: exit status $rc (1: failures)"; bad=1 ;;
        esac
    done
    grep -E "^cuda" "$OUTDIR/test_cuda.txt" | grep -vE "^cuda +(round|add|act|act_mul|embed|gather|kv_cache) " || true
    grep -aE "measured max" "$OUTDIR/test_cuda.txt" | sed 's/^/  /' >>"$SUMMARY"
    grep -aE "Checks:|:F:|:E:" "$OUTDIR/test_cuda.txt" | head -20 | sed 's/^/  /' | tee -a "$SUMMARY"
    return $bad
}

# several GPUs for one model: the multi case of test_cuda over the machine's GPUs, and the CLI's --gpus 2
# against --gpus 1 on the bundled model; one GPU: skipped, saying so (the dry run: the host build's fake devices)
stage_multi() {
    local exe=$BUILD/tests/test_cuda n rc t0 env=""
    if [ "$DRY" = 1 ] && ! simulated one-gpu; then
        [ -x "$BUILD/tests/test_cuda_host" ] || { sum "  skipped: no GPU and no host build (tests/test_cuda_host)"; return 0; }
        exe=$BUILD/tests/test_cuda_host n=3 env="RCK_SHIM_DEVICES=3"
        sum "  (dry run: tests/test_cuda_host, the host build, on 3 fake devices)"
    else
        n=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
        simulated one-gpu && n=1
        if [ "${n:-0}" -lt 2 ]; then
            sum "  skipped: this machine has ${n:-0} GPU(s); the 2-GPU stage needs 2 (the split is checked on fake devices by the host build's case multi)"
            return 0
        fi
        sum "  $n GPUs: $(nvidia-smi -L 2>/dev/null | head -2 | cut -c1-60 | paste -sd ';' -)"
    fi
    [ -x "$exe" ] || { sum "  no $exe (the build stage failed?)"; return 1; }
    echo "== CK_RUN_CASE=multi" >>"$OUTDIR/test_cuda.txt"
    t0=$(date +%s)
    ([ -n "$env" ] && export "$env"
     CK_RUN_CASE=multi RC_SOURCE_DIR=$ROOT RC_CUDA_SYNC=1 OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-PASSIVE} \
         tmo 120 "$exe") >"$OUTDIR/test_multi.txt" 2>&1
    rc=$?
    cat "$OUTDIR/test_multi.txt" >>"$OUTDIR/test_cuda.txt"
    grep -aE "bitwise|skipped" "$OUTDIR/test_multi.txt" | head -6 | sed 's/^/  /' >>"$SUMMARY"
    grep -aE "Checks:|:F:|:E:" "$OUTDIR/test_multi.txt" | head -10 | sed 's/^/  /' | tee -a "$SUMMARY"
    [ $rc = 0 ] && sum "  multi: passed in $(($(date +%s) - t0)) s" || { sum "  multi: exit status $rc"; return 1; }
    # the CLI: --gpus 2 gives --gpus 1's statistics to the digit (a bf16 sampler, an fp32 trainer)
    local cli=$RC args="--num-prompts 4 --len 8,16 --samples 2 -q --backend cuda --json --out none --dtype bf16 --trainer dtype=fp32"
    [ "$DRY" = 1 ] && cli=$BUILD/tests/ratiocheck_cuda_host
    local a b
    a=$([ -n "$env" ] && export "$env"; tmo 60 "$cli" $args 2>&1 | sed -n 's/.*\("lens".*\)"seconds_generate".*/\1/p')
    b=$([ -n "$env" ] && export "$env"; tmo 60 "$cli" $args --gpus 2 2>&1 | sed -n 's/.*\("lens".*\)"seconds_generate".*/\1/p')
    if [ -n "$a" ] && [ "$a" = "$b" ]; then
        sum "  ratiocheck --gpus 2: the statistics of --gpus 1 to the digit"
    else
        sum "  ratiocheck --gpus 2: the statistics DIFFER from --gpus 1 (or a run failed; log.txt)"
        echo "--gpus 1: $a"; echo "--gpus 2: $b"
        return 1
    fi
    # a hybrid model (Gated DeltaNet layers: their states on their GPU), the sampler's state in the dtype
    # with its prefix cache: the same on 2 GPUs as on 1 (the fixture has no tokenizer: token-id prompts)
    local ids=$RES/qnext_prompts.ids hargs
    printf '3 17 40 90 7\n4 22 41 93 9\n5 27 42 96 11\n' >"$ids"
    hargs="--model data/fixtures/qnext_hybrid --prompts $ids --len 4,8 --samples 2 -q --backend cuda --json --out none --dtype bf16 --sampler state=dtype,prefix-cache=on"
    a=$([ -n "$env" ] && export "$env"; tmo 60 "$cli" $hargs 2>&1 | sed -n 's/.*\("lens".*\)"seconds_generate".*/\1/p')
    b=$([ -n "$env" ] && export "$env"; tmo 60 "$cli" $hargs --gpus 2 2>&1 | sed -n 's/.*\("lens".*\)"seconds_generate".*/\1/p')
    if [ -n "$a" ] && [ "$a" = "$b" ]; then
        sum "  ratiocheck qnext_hybrid --gpus 2: the statistics of --gpus 1 to the digit"
    else
        sum "  ratiocheck qnext_hybrid --gpus 2: the statistics DIFFER from --gpus 1 (or a run failed; log.txt)"
        echo "--gpus 1: $a"; echo "--gpus 2: $b"
        return 1
    fi
}

RC_FILES=()
stage_seed() {
    local ok=0 k dt
    if [ ! -f "$MODEL/model.safetensors" ]; then
        step make_seed_model 180 "$PY" tools/gpu/make_seed_model.py "$MODEL" --device $DEVICE --train-seconds "$TRAIN" \
            --corpus tools/gpu/kjv-excerpt.txt.xz --seed 0 $SMALL || return 1
        cp -f "$MODEL/make_seed_model.json" "$RES/" 2>/dev/null
    fi
    "$RC" inspect --model "$MODEL" | head -12
    "$PY" - "$MODEL/make_seed_model.json" <<'EOF' | tee -a "$SUMMARY"
import json, sys
d = json.load(open(sys.argv[1]))
t, h, p = d.get("training") or {}, d.get("held_out") or {}, d.get("last_prompt_position") or {}
print("  seed model: %s parameters, %s training steps in %.0f s; held-out loss %.3f, top-1 prob %.3f; "
      "at the prompts' last position entropy %.2f nats, top-1 prob %.3f"
      % (f"{d.get('parameters', 0):,}", t.get("steps", 0), t.get("seconds", 0), h.get("loss", float("nan")),
         h.get("top1_prob", float("nan")), p.get("entropy", float("nan")), p.get("top1_prob", float("nan"))))
EOF
    # engine in every dtype; invariant (its speed cost, and ratio 1) in bf16 -- the suite has
    # already checked invariant ratios in every dtype
    RC_FILES=()
    for run in engine:fp32 engine:fp16 engine:bf16 invariant:bf16; do
        k=${run%%:*} dt=${run#*:}
        if tmo 60 "$RC" --model "$MODEL" --backend $BACKEND --kernels "$k" --dtype "$dt" --len $LENS --seed 0 $SUBSET \
            --out "$RES/rc_${k}_$dt.h5" --force --json -q >"$RES/rc_${k}_$dt.json"; then
            if [ "$k" = engine ]; then RC_FILES+=(--rc "$dt=$RES/rc_${k}_$dt.json"); else RC_FILES+=(--rc-invariant "$dt=$RES/rc_${k}_$dt.json"); fi
            "$PY" - "$RES/rc_${k}_$dt.json" <<'EOF' | tee -a "$SUMMARY"
import json, sys
r = json.load(open(sys.argv[1]))
print("  %-9s %-4s %s  gen %.2f s  fwd %.2f s  " % (r["kernels"], r["dtype"], r.get("device", ""), r["seconds_generate"], r["seconds_forward"]) +
      "  ".join("L=%d std %.2e min %.4f max %.4f" % (l["len"], l["std"], l["min"], l["max"]) for l in r["lens"]))
EOF
        else
            sum "  ratiocheck --kernels $k --dtype $dt FAILED (exit $?)"
            ok=1
        fi
    done
    if step hf_seed 200 "$PY" tools/gpu/hf_seed.py --model "$MODEL" --prompts data/prompts/default.txt --len $LENS \
        --dtype fp32,fp16,bf16 --samples 2 --seed 0 --device $DEVICE $SUBSET --json "$RES/hf.json"; then
        # the table goes to the summary here unless the bounds stage prints it with the bounds
        if [ -n "${WANT[bounds]:-}" ] && [ "$DEVICE" = cuda ]; then side_by_side "" nosum; else side_by_side "" || ok=1; fi
    else
        ok=1
    fi
    # last, as the least important: what is left of the stage's time
    # the sampler's fp8 settings: weights=fp8 (per tensor / per token, channel W8A16, 128 x 128
    # blocks) and the fp8 KV cache, on the device against the same run on the CPU, 4 prompts
    local spec tag be both specs="weights=fp8 weights=fp8,weight-scale=channel,act=none weights=fp8,weight-scale=block kv-cache=fp8_e4m3"
    # 128 x 128 blocks need sizes that are multiples of 128: not the --small model's
    [ -n "$SMALL" ] && specs=${specs/ weights=fp8,weight-scale=block/}
    for spec in $specs; do
        tag=$(echo "$spec" | tr ',=' '__')
        both=1
        for be in $(printf '%s\n' $BACKEND cpu | uniq); do
            tmo 45 "$RC" --model "$MODEL" --backend "$be" --kernels invariant --dtype bf16 --sampler "$spec" \
                --len 16 --num-prompts 4 --seed 0 --out none --json -q >"$RES/fp8_${tag}_$be.json" ||
                { sum "  ratiocheck --backend $be --sampler $spec FAILED (exit $?)"; both=0; ok=1; }
        done
        [ $both = 1 ] && "$PY" - "$spec" "$RES/fp8_${tag}_$BACKEND.json" "$RES/fp8_${tag}_cpu.json" <<'EOF' | tee -a "$SUMMARY"
import json, sys
d, c = (json.load(open(p)) for p in sys.argv[2:4])
ld, lc = d["lens"][0], c["lens"][0]
print("  %-40s device std %.4e k3 %.3e  cpu std %.4e k3 %.3e  %s" % (sys.argv[1], ld["std"], ld["k3"], lc["std"], lc["k3"],
      "statistics identical" if d["lens"] == c["lens"] else "differ: |d std| %.2e" % abs(ld["std"] - lc["std"])))
EOF
    done
    return $ok
}

side_by_side() {
    [ -f "$RES/hf.json" ] || { sum "  no hf.json (the seed stage did not finish)"; return 1; }
    local args=()
    [ -n "$1" ] && args=(--bound-json "$1")
    local files=("$RES"/rc_*.json) f k dt
    RC_FILES=()
    for f in "${files[@]}"; do
        [ -s "$f" ] || continue
        k=${f##*/rc_}; k=${k%.json}; dt=${k#*_}; k=${k%%_*}
        if [ "$k" = engine ]; then RC_FILES+=(--rc "$dt=$f"); else RC_FILES+=(--rc-invariant "$dt=$f"); fi
    done
    tmo 60 "$PY" tools/gpu/side_by_side.py --hf "$RES/hf.json" "${RC_FILES[@]}" "${args[@]}" >"$RES/side_by_side.txt" ||
        { sum "  side_by_side.py FAILED (exit $?)"; return 1; }
    cat "$RES/side_by_side.txt"
    [ "${2:-}" = nosum ] || sed 's/^/  /' "$RES/side_by_side.txt" >>"$SUMMARY"
}

stage_bounds() {
    if [ "$DEVICE" != cuda ]; then
        sum "  skipped: no GPU (dry run)"
        return 0
    fi
    [ -f "$MODEL/model.safetensors" ] || { sum "  no seed model (the seed stage failed?)"; return 1; }
    if ! step measure_bounds 120 "$PY" tools/gpu/measure_bounds.py --model "$MODEL" --json "$RES/bounds.json"; then
        sum "  the table without the bounds:"
        [ -f "$RES/hf.json" ] && side_by_side ""
        return 1
    fi
    side_by_side "$RES/bounds.json"
}

# ---------------------------------------------------------------- the run

declare -A LIMIT=([size]=60 [deps]=90 [build]=300 [libs]=60 [suite]=400 [multi]=150 [seed]=420 [bounds]=150)
# what each asked stage needs
[ -n "${WANT[build]:-}" ] && WANT[libs]=1
if [ -n "${WANT[suite]:-}${WANT[multi]:-}${WANT[seed]:-}${WANT[bounds]:-}${WANT[libs]:-}" ] && [ ! -x "$RC" ]; then
    WANT[build]=1 WANT[libs]=1
fi
[ -n "${WANT[build]:-}${WANT[libs]:-}${WANT[suite]:-}${WANT[multi]:-}${WANT[seed]:-}${WANT[bounds]:-}" ] && WANT[deps]=1
[ -z "${OUT:-}" ] && [ -n "${WANT[build]:-}" ] && WANT[size]=1

failed=0
for s in $ALL_STAGES; do
    [ -n "${WANT[$s]:-}" ] || continue
    lim=${LIMIT[$s]}
    v=RC_GPU_LIMIT_$s
    [ -n "${!v:-}" ] && lim=${!v}
    left=$((BUDGET - $(elapsed) - 5))
    [ "$lim" -gt "$left" ] && lim=$left
    if [ "$left" -lt 10 ]; then
        echo; echo "== [$(elapsed) s] $s: skipped, the budget of $BUDGET s is spent"
        sum "$(printf '%-7s %5s  skipped: the budget of %d s (RC_GPU_BUDGET) is spent' "$s" - "$BUDGET")"
        failed=1
        continue
    fi
    echo; echo "== [$(elapsed) s] $s (limit $lim s)"
    sum "$(printf '%-7s        running (limit %d s) ...' "$s" "$lim")"
    STAGE_END=$(($(date +%s) + lim))
    t0=$(date +%s)
    if simulated "fail:$s"; then
        echo "(simulated: stage $s fails)"
        false
    elif simulated "hang:$s"; then
        echo "(simulated: stage $s hangs)"
        tmo 100000 sleep 100000
    else
        "stage_$s"
    fi
    rc=$?
    dt=$(($(date +%s) - t0))
    if [ $rc = 0 ]; then res=ok
    elif [ $rc = 124 ] || [ $rc = 137 ]; then res="FAILED: stopped at its time limit of $lim s"
    else res="FAILED (exit $rc)"
    fi
    echo "== [$(elapsed) s] $s: $res in $dt s"
    # the stage's line replaces its "running" line
    sed -i "s/^$(printf '%-7s' "$s")        running (limit $lim s) \.\.\.\$/$(printf '%-7s %4d s  %s' "$s" "$dt" "$res" | sed 's/[\/&]/\\&/g')/" "$SUMMARY"
    [ $rc = 0 ] || failed=1
    if [ "$s" = size ] && [ $rc = 3 ]; then
        echo "refused: the tree would not fit (summary: $SUMMARY)"
        finish 3
    fi
    if [ "$s" = seed ] || [ "$s" = bounds ]; then
        tar czf "$OUTDIR/seed.tgz" -C "$RES" --exclude='*.h5' . 2>/dev/null || true
    fi
done
sum "total $(elapsed) s: $([ $failed = 0 ] && echo 'every stage passed' || echo 'a stage FAILED'); files in $OUTDIR"
echo
echo "== summary ($SUMMARY)"
cat "$SUMMARY"
finish $failed
