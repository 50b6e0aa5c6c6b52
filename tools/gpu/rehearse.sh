#!/usr/bin/env bash
# The GPU check's rehearsal, without a GPU (CI runs it: .ci/run's gpu stage):
#
#   bash tools/gpu/rehearse.sh [BUILD_DIR]      (default: build; built with or without CUDA)
#
# runs tools/gpu/gpu_check.sh with RC_GPU_DRYRUN=1 over the existing build, each time into a
# fresh output folder standing in for the device tool's $OUT, and checks its summary.txt:
#   1. --stage size,build,suite,multi: every stage passes (the suite: the host build's
#      test_cuda_host, cases op_twins and host, where the build has it; multi: its case multi on 3
#      fake devices and the host CLI's --gpus 2 against --gpus 1); the size that would travel (under
#      the 60 MiB the script allows) and the stages are printed;
#   2. RC_GPU_SIMULATE=missing-lib: the CUDA module (ratiocheck in a CPU-only build) needs a
#      library that does not exist: the libs stage fails naming it (with the CUDA loader's one
#      line where there is a module), the suite stage still runs, the exit status is 1;
#   3. RC_GPU_SIMULATE="fail:build hang:suite one-gpu": the build stage fails, the suite stage hangs
#      and is stopped at its limit (3 s here), the stages after each still run, the multi stage is
#      skipped with its line for a machine of one GPU, exit status 1;
#   4. --stage seed,bounds (about 80 s on 2 cores) where python3 has torch and transformers and
#      RC_GPU_REHEARSE_SEED is not 0: the seed experiment on the CPU passes (else says skipped).
# Prints each summary; exit 0 when every check holds.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
BUILD=$(cd "${1:-build}" 2>/dev/null && pwd) || { echo "rehearse.sh: no build folder ${1:-build}" >&2; exit 2; }
[ -x "$BUILD/src/ratiocheck" ] || { echo "rehearse.sh: $BUILD/src/ratiocheck missing (ninja -C $BUILD)" >&2; exit 2; }
TMP=$(mktemp -d /tmp/rc-gpu-rehearse.XXXXXX)
trap 'rm -rf "$TMP"' EXIT
bad=0
check() { # check CASE FILE REGEX WHAT
    if grep -qE "$3" "$2"; then echo "  ok: $4"; else echo "  FAILED: $4 (no line matching '$3' in $2)"; bad=1; fi
}
# one rehearsal: CASE EXPECTED_EXIT ARGS... (environment from the caller)
rehearse() {
    local name=$1 want=$2
    shift 2
    mkdir -p "$TMP/$name"
    echo "=== $name: gpu_check.sh $*"
    OUT=$TMP/$name RC_GPU_WORK=$TMP/work RC_GPU_DRYRUN=1 RC_GPU_BUILD=$BUILD \
        bash tools/gpu/gpu_check.sh "$@" >"$TMP/$name.stdout" 2>&1
    local rc=$?
    sed 's/^/  | /' "$TMP/$name/summary.txt"
    if [ "$rc" = "$want" ]; then echo "  ok: exit status $rc"; else echo "  FAILED: exit status $rc, expected $want"; bad=1; fi
    [ -s "$TMP/$name/log.txt" ] || { echo "  FAILED: no log.txt in \$OUT"; bad=1; }
}
t0=$(date +%s)

rehearse pass 0 --stage size,build,suite,multi
S=$TMP/pass/summary.txt
check pass "$S" '^size +[0-9]+ s +ok' "the size stage passes"
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    check pass "$S" 'travels: [0-9.]+ MiB' "the travelling size is measured"
else
    echo "  (not a git checkout: the size that would travel is not measured)"
fi
for s in deps build libs suite multi; do check pass "$S" "^$s +[0-9]+ s +ok" "stage $s ok"; done
if [ -x "$BUILD/tests/test_cuda_host" ]; then
    check pass "$S" '^  op_twins: passed' "the suite's cases run one by one (the host build's op_twins)"
    check pass "$S" 'Checks: [0-9]+, Failures: 0, Errors: 0' "the suite's Check totals in the summary"
    check pass "$S" 'ratiocheck --gpus 2: the statistics of --gpus 1 to the digit' "the multi stage's CLI check"
fi
grep -E 'travels:' "$S" | sed 's/^ */  size: /'

RC_GPU_SIMULATE=missing-lib rehearse missing_lib 1 --stage build,suite
S=$TMP/missing_lib/summary.txt
check missing_lib "$S" '^libs +[0-9]+ s +FAILED' "the libs stage fails"
check missing_lib "$S" 'MISSING: lib[a-z0-9_]+\.so\.[0-9]+ \(needed by ' "the missing library is named"
if [ -f "$BUILD/kernels/libratiocheck_cuda.so" ]; then
    check missing_lib "$S" 'CUDA backend: a library of the CUDA module is missing: libcublas\.so\.99' "the loader's one line"
fi
check missing_lib "$S" '^suite +[0-9]+ s' "the suite stage still runs"

RC_GPU_SIMULATE="fail:build hang:suite one-gpu" RC_GPU_LIMIT_suite=3 rehearse failing_stage 1 --stage build,suite,multi
S=$TMP/failing_stage/summary.txt
check failing_stage "$S" '^build +[0-9]+ s +FAILED \(exit 1\)' "the failing build stage is reported"
check failing_stage "$S" '^libs +[0-9]+ s +ok' "the next stage runs"
check failing_stage "$S" '^suite +[0-9]+ s +FAILED: stopped at its time limit of 3 s' "the hanging stage is stopped at its limit"
check failing_stage "$S" '^multi +[0-9]+ s +ok' "the multi stage on one GPU passes"
check failing_stage "$S" 'skipped: this machine has 1 GPU\(s\); the 2-GPU stage needs 2' "and says it was skipped"
check failing_stage "$S" '^total [0-9]+ s: a stage FAILED' "the summary's last line"

if [ "${RC_GPU_REHEARSE_SEED:-1}" != 0 ] && python3 -c 'import torch, transformers, tokenizers, safetensors' 2>/dev/null; then
    rehearse seed 0 --stage seed,bounds
    S=$TMP/seed/summary.txt
    check seed "$S" '^seed +[0-9]+ s +ok' "the seed stage passes"
    check seed "$S" 'PPO ratio exp\(forward - generation\)' "the side-by-side table"
    check seed "$S" '^bounds +[0-9]+ s +ok' "the bounds stage (skipped without a GPU)"
else
    echo "=== seed: skipped (RC_GPU_REHEARSE_SEED=0, or python3 lacks torch / transformers)"
fi

echo "rehearsal: $([ $bad = 0 ] && echo passed || echo FAILED) in $(($(date +%s) - t0)) s"
exit $bad
