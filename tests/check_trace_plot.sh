#!/bin/bash
# The heatmap of a `ratiocheck trace` file (tools/plots/plot_ratios.py): a small bf16 run with an
# fp32 LM head on the trainer, traced, then plotted: PREFIX_trace.png at its size, and the first
# divergence the tool prints equal to /trace's attributes. Skips (77) unless /usr/bin/python3
# has h5py, numpy and matplotlib; fails instead with RC_CI_REQUIRED=1 (.ci/run).
set -u
RC="$1"
SRC="$2"
PY=/usr/bin/python3
TOOL="$SRC/tools/plots/plot_ratios.py"
if ! "$PY" -c 'import h5py, numpy, matplotlib' 2>/dev/null; then
  if [ "${RC_CI_REQUIRED:-0}" = 1 ]; then # CI (.ci/run): a missing module fails
    echo "FAIL: $PY cannot import h5py, numpy and matplotlib"
    exit 1
  fi
  echo "SKIP: $PY cannot import h5py, numpy and matplotlib"
  exit 77
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export MPLCONFIGDIR="$tmp/mplconfig"
status=0
fail() { echo "FAIL: $*"; status=1; }
plot() {  # plot NAME ARGS...: run the tool, keep stdout and stderr in $tmp/NAME.{out,err}
  local name=$1; shift
  "$PY" "$TOOL" "$@" > "$tmp/$name.out" 2> "$tmp/$name.err"
}
"$RC" --model "$SRC/data/models/pythia-rc-tiny" --backend cpu --prompts "$SRC/data/prompts/default.ids" -q \
  --num-prompts 4 --samples 2 --len 8 --sampler dtype=bf16 --trainer dtype=bf16,lm-head=fp32 \
  --out "$tmp/run.h5" > /dev/null || { echo "FAIL: ratiocheck run failed"; exit 1; }
# A trace file (ratiocheck trace): PREFIX_trace.png at its size, and the first divergence it
# prints equal to /trace's attributes.
"$RC" trace "$tmp/run.h5" --backend cpu --seq 3 -q --out "$tmp/trace.h5" > /dev/null || fail "ratiocheck trace failed"
plot trace "$tmp/trace.h5" --out "$tmp/trace" --prefix tr || fail "plot of a trace: $(cat "$tmp/trace.err")"
grep -qE "^wrote \S+/tr_trace\.png 1170x450$" "$tmp/trace.out" || fail "tr_trace.png not written at 1170x450"
"$PY" - "$tmp" <<'EOF' || status=1
import sys
import h5py
tmp = sys.argv[1]
a = h5py.File(f"{tmp}/trace.h5", "r")["trace"].attrs
s = lambda v: v.decode() if isinstance(v, bytes) else str(v)
want = (f"trace first_op={s(a['first_op'])} first_layer={int(a['first_layer'])} "
        f"first_sequence={int(a['first_sequence'])} first_position={int(a['first_position'])}")
ok = want in open(f"{tmp}/trace.out").read() and int(a["first_sequence"]) == 3
print("trace plot: " + ("ok" if ok else "MISMATCH: no line " + want))
sys.exit(0 if ok else 1)
EOF
[ $status -eq 0 ] && echo "trace plot: all checks passed"
exit $status
