#!/bin/bash
# Statistics against an independent computation: run ratiocheck on the
# default model, then recompute every statistic from the stored tensors with
# numpy (tools/checks/check_results.py). Skips (77) without Debian's python3-h5py;
# fails instead with RC_CI_REQUIRED=1 (.ci/run).
set -u
RC="$1"
SRC="$2"
PY=/usr/bin/python3
if ! "$PY" -c 'import h5py, numpy' 2>/dev/null; then
  if [ "${RC_CI_REQUIRED:-0}" = 1 ]; then # CI (.ci/run): a missing module fails
    echo "FAIL: $PY cannot import h5py and numpy (apt-get install python3-h5py python3-numpy)"
    exit 1
  fi
  echo "SKIP: $PY cannot import h5py and numpy (apt-get install python3-h5py python3-numpy)"
  exit 77
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
status=0
run() {
  local name=$1; shift
  "$RC" --model "$SRC/data/models/pythia-rc-tiny" --backend cpu --prompts "$SRC/data/prompts/default.ids" -q \
    --out "$tmp/$name.h5" "$@" > "$tmp/$name.txt" || { echo "ratiocheck $* failed"; status=1; return; }
  echo "== $name: $*"
  "$PY" "$SRC/tools/checks/check_results.py" "$tmp/$name.h5" || status=1
}
run bf16 --dtype bf16 --num-prompts 8 --samples 2 --len 8,16,24 --reference fp32
run fp16_eos --dtype fp16 --num-prompts 8 --samples 3 --len 10,20 --stop-at-eos --temperature 2 --top-p 0.9 --reference fp64 \
  --clip-eps-low 0.001 --clip-eps-high 0.002 --seq-eps 1e-4 --seq-cap 1.002  # each fraction > 0
# a build without OpenBLAS (meson -Dblas=disabled) refuses --kernels blas with exit 5 and says so:
# then fp32_blas and the cases tampering with its file are skipped
have_blas=1
if ! "$RC" --model "$SRC/data/models/pythia-rc-tiny" --backend cpu --kernels blas --prompts "$SRC/data/prompts/default.ids" \
     -q --num-prompts 1 --samples 1 --len 1 --out none > /dev/null 2> "$tmp/blas.err" &&
   grep -q 'no OpenBLAS (-Dblas=disabled)' "$tmp/blas.err"; then
  have_blas=0
  echo "== fp32_blas and its tampered cases (gspo, gspofail, seqlow): skipped, $(cat "$tmp/blas.err")"
else
  run fp32_blas --dtype fp32 --kernels blas --num-prompts 4 --samples 3 --len 5,12 --forward-batch 3
fi
run one_len --dtype bf16 --num-prompts 4 --samples 2 --len 6   # growth n/a: one length
# MoE: /routing (both sides' experts, the statistics of docs/routing.md) recomputed by numpy; the
# fixtures' 260-token vocabulary takes ids below it
printf '5 17 99 140 3\n250 8 61 33\n12 200 7\n77 78 79 80 81 82\n' > "$tmp/moe.ids"
moe() {
  local name=$1 model=$2; shift 2
  "$RC" --model "$SRC/data/fixtures/$model" --backend cpu --prompts "${MOE_IDS:-$tmp/moe.ids}" -q --out "$tmp/$name.h5" "$@" \
    > "$tmp/$name.txt" || { echo "ratiocheck $* failed"; status=1; return; }
  echo "== $name: $model $*"
  "$PY" "$SRC/tools/checks/check_results.py" "$tmp/$name.h5" || status=1
}
moe moe_flips qwen3_moe --samples 4 --len 12,24 --sampler dtype=bf16 --trainer dtype=fp32 --json
echo "== moe_flips: --json's routing object against /routing"
"$PY" - "$tmp/moe_flips.h5" "$tmp/moe_flips.txt" <<'PYEOF' || status=1
import json, sys
import h5py
import numpy as np
g, j = h5py.File(sys.argv[1], "r")["routing"], json.load(open(sys.argv[2]))["routing"]
bad = [k for k in ("tokens", "tokens_flip", "share_flip", "decision_share", "mean_overlap", "miles_mismatch",
                   "miles_layer", "miles_max", "verdict", "first_layer", "len", "abs_log_ratio_flip",
                   "abs_log_ratio_same", "share_abs_log_ratio_flip", "moe_layers", "top_k", "experts")
       if not (j[k] == g.attrs[k] or (isinstance(j[k], float) and np.isclose(j[k], g.attrs[k], rtol=1e-15)))]
bad += [k for k, d in (("layers", "layer"), ("layer_flips", "layer_flips"), ("layer_first", "layer_first"),
                       ("layer_no_common", "layer_no_common")) if list(j[k]) != list(g[d][...])]
print("JSON routing object:", "differs in " + ", ".join(bad) if bad else "equal to /routing")
sys.exit(1 if bad else 0)
PYEOF
# trace's first routing flip (the route op's captured rows) against the run's /routing record (the
# routing hook's), by numpy: one-token prompts, so every position both sides compute predicts a
# generated token and is in the record; forward order: layer, then position, then expert
seq 3 60 > "$tmp/one.ids"
"$RC" --model "$SRC/data/fixtures/qwen3_moe" --backend cpu --prompts "$tmp/one.ids" --samples 1 --len 12 -q \
  --out "$tmp/flip.h5" --sampler dtype=bf16 --trainer dtype=fp32 > /dev/null || { echo "flip run failed"; status=1; }
"$RC" trace "$tmp/flip.h5" --backend cpu --seq 0,3,7,11,20,31,40,50 --out none --json > "$tmp/flip.json" \
  || { echo "flip trace failed"; status=1; }
echo "== trace's first routing flip against /routing"
"$PY" - "$tmp/flip.h5" "$tmp/flip.json" <<'PYEOF' || status=1
import json, sys
import h5py
import numpy as np
f, j = h5py.File(sys.argv[1], "r"), json.load(open(sys.argv[2]))
g = f["routing"]
a, b, layer = g["sampler_experts"][...], g["trainer_experts"][...], g["layer"][...]
assert (f["prompts/lengths"][...] == 1).all()
want = None
for m in range(a.shape[2]):  # MoE layers in order; position = generated token index (prompts of 1)
    for s in j["sequences"]:
        for t in range(a.shape[1]):
            if a[s, t, 0, 0] < 0:
                break
            d = sorted(set(a[s, t, m]) ^ set(b[s, t, m]))
            if d:
                if want is None or t < want["position"] or (t == want["position"] and d[0] < want["expert"]):
                    want = {"layer": int(layer[m]), "sequence": s, "position": t, "expert": int(d[0]),
                            "chosen_by": "sampler" if d[0] in set(a[s, t, m]) else "trainer"}
                break
    if want is not None:
        break
got = j["first_flip"]
print("trace:", got, "record:", want)
sys.exit(0 if got == want and want is not None else 1)
PYEOF
moe moe_replay qwen2_moe --samples 3 --len 8,20 --stop-at-eos --temperature 1.5 --sampler dtype=fp16 \
  --trainer dtype=bf16,routing=replay,router=fp32,prefill-chunk=3
# GLM-4.5's grouped sigmoid router (vocabulary 250): the record of both sides, and under the trainer's replay
printf '5 17 99 140 3\n200 8 61 33\n12 200 7\n77 78 79 80 81 82\n' > "$tmp/glm.ids"
MOE_IDS="$tmp/glm.ids" moe moe_glm4 glm4_moe --samples 4 --len 12,24 --sampler dtype=bf16 --trainer dtype=fp32
MOE_IDS="$tmp/glm.ids" moe moe_glm4_replay glm4_moe --samples 3 --len 8,20 --temperature 1.5 --sampler dtype=bf16 \
  --trainer dtype=fp32,routing=replay
# --distribution: the KL / TV / top-1 summaries from the per-token datasets (fp16 log-probs, a trainer
# of its own, sequences stopped at EOS, the sampler's rows held 3 positions at a time)
RATIOCHECK_DIST_WINDOW=3 run dist --dtype fp16 --logprob-dtype same --trainer lm-head=fp32,micro-batch=3 \
  --num-prompts 5 --samples 2 --len 5,11,16 --stop-at-eos --temperature 2 --distribution
# The verdict's other outcomes, which no honest run of this small model reaches: copies of a
# file with forward log-probs moved, re-judged by `ratiocheck report --json` (which recomputes
# everything from the tensors) and by numpy, and the expected line checked:
#   nemo   bf16, +-0.3 on every token: mean exp|log r| 1.35 > NeMo-RL's 1.05 (token PPO FAIL)
#   k3     bf16, one token of the longest length +2.5: k3 0.023 > prime-rl's 0.015 while mean
#          exp|log r| stays 1.03 (token PPO FAIL by k3)
#   seqis  bf16, 3 of 16 sequences +0.15 on every token: e^S up to e^3.6 > 3 (sequence IS FAIL)
#   gspo   fp32, 3 of 12 sequences +1e-3 on every token: 25% outside the 3e-4 band, above the ~15%
#          GSPO's paper clips in normal training (GSPO WARN)
#   gspofail  fp32, 7 of 12: 58% outside, more than half (GSPO FAIL)
#   seqlow fp32, 2 of 12 sequences -0.1 on every token: e^S = e^-1.2 < 0.5 at L = 12, so verl's
#          Seq-MIS masks them from its lower bound on e^S (sequence IS FAIL, no cap exceeded)
#   noentropy  bf16, /rollouts/entropy deleted (a file written before it): still reads, the
#          entropy strata are null, the probability strata and growth as numpy's
#   corr   bf16, one token or sequence per published correction (README "Corrections") so that
#          every correction's fraction is > 0 at some length (--nonzero), and verl's +-20 clamp
tamper() {
  local name=$1 base=$2 mode=$3 expect=$4 flags=${5:-}
  "$PY" - "$tmp/$base.h5" "$tmp/$name.h5" "$mode" <<'PYEOF' || { status=1; return; }
import shutil, sys
import h5py
import numpy as np
shutil.copy(sys.argv[1], sys.argv[2])
mode = sys.argv[3]
with h5py.File(sys.argv[2], "r+") as f:
    lens = [int(L) for L in f.attrs["lengths"]]
    if mode == "noentropy":
        del f["rollouts/entropy"]
    if mode == "corr":  # two sampler probabilities, 0.9 and 0.3, for prime-rl's DPPO masks below
        d = f["rollouts/logprob_gen"]
        g = d[...]
        g[4, 0], g[4, 1] = np.log(0.9), np.log(0.3)
        d[...] = g
    gen = f["rollouts/logprob_gen"][...]
    for L in lens:
        d = f[f"len_{L:04d}/logprob_forward"]
        a = d[...]
        if mode == "nemo":
            a[:, ::2] += 0.3
            a[:, 1::2] -= 0.3
        elif mode == "k3" and L == max(lens):
            a[0, 0] += 2.5
        elif mode == "seqis":
            a[:3] += 0.15
        elif mode == "gspo":
            a[:3] += 1e-3
        elif mode == "gspofail":
            a[:7] += 1e-3
        elif mode == "seqlow":
            a[:2] -= 0.1
        elif mode == "corr":
            g = gen[:, :L]
            a[0, 0] = g[0, 0] + np.log(2.5)   # r = 2.5: token TIS, token MIS
            a[0, 1] = g[0, 1] + np.log(6.0)   # r = 6: IcePop, TRL's token cap 3
            a[0, 2] = g[0, 2] + np.log(0.3)   # r = 0.3: token MIS and IcePop from below
            a[1, 0] = g[1, 0] + np.log(10.0)  # r = 10: prime-rl's legacy token mask
            a[4, 0], a[4, 1] = np.log(0.5), np.log(0.55)  # p' - p = -0.4 and +0.25: DPPO low / high
            a[2] += 0.1    # e^S = e^0.8 at L = 8: sequence TIS, MIS, geometric RS; e^1.6 > 3 from L = 16
            a[3] -= 0.1    # e^S = e^-0.8 < 0.5: sequence MIS from below
            a[5, 0] -= 19  # e^M < 0.1 at L = 8: prime-rl's legacy geo mask takes the whole sequence
            a[6, 0] += 5   # r = 148 > 100: prime-rl's legacy sequence mask
            a[7, 0] += 25  # log r = 25 > 20: verl clamps it (and S) in chi2_token and chi2_seq
        d[...] = a
PYEOF
  "$RC" report "$tmp/$name.h5" --json > "$tmp/$name.json" || { echo "report of $name failed"; status=1; return; }
  echo "== tampered ($name): report --json"
  "$PY" "$SRC/tools/checks/check_results.py" $flags --report-json "$tmp/$name.json" "$tmp/$name.h5" || status=1
  grep -qF "$expect" "$tmp/$name.json" || { echo "tampered ($name): expected $expect"; status=1; }
}
tamper nemo bf16 nemo '"token_ppo": {"level": "FAIL", "reason": "mean exp|log r|'
tamper k3 bf16 k3 '"token_ppo": {"level": "FAIL", "reason": "k3 '
tamper seqis bf16 seqis '"sequence_is": {"level": "FAIL"'
[ "$have_blas" = 0 ] || tamper gspo fp32_blas gspo '"gspo": {"level": "WARN"'
[ "$have_blas" = 0 ] || tamper gspofail fp32_blas gspofail '"gspo": {"level": "FAIL"'
[ "$have_blas" = 0 ] || tamper seqlow fp32_blas seqlow '"sequence_is": {"level": "FAIL", "reason": "TRL sequence cap e^S > 3 0%; verl sequence TIS e^S > 2 0%; verl Seq-MIS e^-S [0.5, 2] 16.7% (0% below, 16.7% above)'
tamper noentropy bf16 noentropy '"entropy": null'
tamper corr bf16 corr '"token_ppo": {"level": "FAIL"' --nonzero
# a sweep: every row's statistics from its own tensors, the noise floor bitwise, the best row
echo "== sweep"
"$RC" sweep --model "$SRC/data/models/pythia-rc-tiny" --backend cpu --prompts "$SRC/data/prompts/default.ids" -q --dtype bf16 \
  --num-prompts 6 --samples 2 --len 8,16 --out "$tmp/sweep.h5" --vary trainer:lm-head=fp32 --vary both:lm-head=fp32 \
  --vary both:dtype=fp16 --vary sampler:batch=1 --vary both:kernels=invariant > "$tmp/sweep.txt" || { echo "ratiocheck sweep failed"; status=1; }
"$PY" "$SRC/tools/checks/check_results.py" "$tmp/sweep.h5" || status=1
# ratiocheck score: HF's logged rollouts of 6 to 24 tokens (the padded layout: every statistic
# over each rollout's own tokens), a reference, and a sweep over trainer settings
echo "== score"
"$RC" score --model "$SRC/data/models/pythia-rc-tiny" --backend cpu --rollouts "$SRC/data/fixtures/score/hf_bf16.jsonl" -q \
  --dtype bf16 --len 8,24 --reference fp32 --vary trainer:lm-head=fp32 --vary trainer:dtype=fp32 \
  --out "$tmp/score.h5" > "$tmp/score.txt" || { echo "ratiocheck score failed"; status=1; }
"$PY" "$SRC/tools/checks/check_results.py" "$tmp/score.h5" || status=1
exit $status
