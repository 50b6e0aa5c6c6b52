#!/bin/bash
# Pictures from result files (tools/plots/plot_ratios.py): build fp32 and bf16 results with the
# default model, plot one file and both, then check that every expected PNG exists, decodes
# and has the size the tool sets, that the statistics it prints equal the file's attributes,
# that the pictures are byte-for-byte reproducible, and that a file that is not a ratiocheck
# result gives exit 2 with one line on stderr. Skips (77) unless Debian's /usr/bin/python3
# has h5py, numpy and matplotlib (apt-get install python3-h5py python3-numpy python3-matplotlib);
# fails instead with RC_CI_REQUIRED=1 (.ci/run).
#
# A third argument runs one part (meson runs the three as tests plots_png, plots_inputs and
# plots_formats, in parallel): png (one file, two files, reproducibility, the printed
# statistics), inputs (files that are not results; a sweep file), formats (svg, pdf); none: all.
set -u
RC="$1"
SRC="$2"
PART="${3:-all}"
want() { [ "$PART" = all ] || [ "$PART" = "$1" ]; }
case "$PART" in all|png|inputs|formats) ;; *) echo "check_plots.sh: unknown part '$PART'"; exit 2;; esac
PY=/usr/bin/python3
TOOL="$SRC/tools/plots/plot_ratios.py"
if ! "$PY" -c 'import h5py, numpy, matplotlib' 2>/dev/null; then
  if [ "${RC_CI_REQUIRED:-0}" = 1 ]; then # CI (.ci/run): a missing module fails
    echo "FAIL: $PY cannot import h5py, numpy and matplotlib" \
         "(apt-get install python3-h5py python3-numpy python3-matplotlib)"
    exit 1
  fi
  echo "SKIP: $PY cannot import h5py, numpy and matplotlib" \
       "(apt-get install python3-h5py python3-numpy python3-matplotlib)"
  exit 77
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export MPLCONFIGDIR="$tmp/mplconfig"   # matplotlib's cache: never the user's home
status=0
fail() { echo "FAIL: $*"; status=1; }

for d in fp32 bf16; do
  [ "$d" = bf16 ] && ! want png && continue  # only the png part plots two files
  "$RC" --model "$SRC/data/models/pythia-rc-tiny" --backend cpu --prompts "$SRC/data/prompts/default.ids" -q \
    --dtype "$d" --num-prompts 8 --samples 2 --len 8,16,24 --out "$tmp/$d.h5" > /dev/null \
    || { echo "FAIL: ratiocheck --dtype $d failed"; exit 1; }
done

plot() {  # plot NAME ARGS...: run the tool, keep stdout and stderr in $tmp/NAME.{out,err}
  local name=$1; shift
  "$PY" "$TOOL" "$@" > "$tmp/$name.out" 2> "$tmp/$name.err"
  local rc=$?
  echo "== plot_ratios.py $* -> exit $rc"
  return $rc
}
if want png; then
plot one "$tmp/fp32.h5" --out "$tmp/one" --prefix one || fail "plot of one file: $(cat "$tmp/one.err")"
plot two "$tmp/fp32.h5" "$tmp/bf16.h5" --out "$tmp/two" --prefix two \
  || fail "plot of two files: $(cat "$tmp/two.err")"
plot again "$tmp/fp32.h5" "$tmp/bf16.h5" --out "$tmp/again" --prefix two \
  || fail "second plot of two files: $(cat "$tmp/again.err")"
for f in "$tmp"/two/*.png; do
  cmp -s "$f" "$tmp/again/$(basename "$f")" || fail "$(basename "$f") differs between two runs"
done
# (stderr of a good run is not checked: matplotlib may log that it builds its font cache)

"$PY" - "$tmp" <<'EOF' || status=1
import os, re, struct, sys, zlib
import h5py
import numpy as np

tmp = sys.argv[1]
failures = []
checks = 0

def check(ok, msg):
    global checks
    checks += 1
    if not ok:
        failures.append(msg)

# sizes plot_ratios.py sets (dpi 90) for a run with three lengths
SIZES = {"hist": (1215, 540), "position": (990, 360), "lengths": (990, 360),
         "scatter": (990, 360), "strata": (1080, 405), "growth": (990, 405), "summary": (1440, 810),
         "overlay": (1080, 405)}
PER_FILE = ["hist", "position", "lengths", "scatter", "strata", "growth"]
expected = {"one": {f"one_{k}.png": SIZES[k] for k in PER_FILE + ["summary"]}}
two = {f"two_{k}.png": SIZES[k] for k in ["overlay", "summary"]}
for tag in ("fp32", "bf16"):
    two.update({f"two_{tag}_{k}.png": SIZES[k] for k in PER_FILE + ["summary"]})
expected["two"] = two

def png_size(path):
    """Decode the PNG (Pillow when there is one, else zlib and the chunk CRCs) -> (w, h)."""
    try:
        from PIL import Image
    except ImportError:
        Image = None
    if Image is not None:
        with Image.open(path) as im:
            im.load()
            return im.size
    data = open(path, "rb").read()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError("not a PNG signature")
    pos, idat, ihdr = 8, b"", None
    while pos < len(data):
        n, typ = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        (crc,) = struct.unpack(">I", data[pos + 8 + n:pos + 12 + n])
        if zlib.crc32(typ + body) != crc:
            raise ValueError(f"bad CRC in chunk {typ!r}")
        if typ == b"IHDR":
            ihdr = struct.unpack(">IIBBBBB", body)
        elif typ == b"IDAT":
            idat += body
        elif typ == b"IEND":
            break
        pos += 12 + n
    w, h, depth, ctype = ihdr[:4]
    channels = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}[ctype]
    raw = zlib.decompress(idat)
    if len(raw) != h * (1 + (w * channels * depth + 7) // 8):
        raise ValueError("image data has the wrong length")
    return w, h

STAT = re.compile(r"^(\S+) L=(\d+)((?: [a-z_0-9]+=\S+)+)$")
CROSS = re.compile(r"^(\S+) cross La=(\d+) Lb=(\d+)((?: [a-z_]+=\S+)+)$")
WROTE = re.compile(r"^wrote (\S+) (\d+)x(\d+)$")
STRATA = re.compile(r"^(\S+) strata (prob|entropy) L=(\d+) decile=(\d) ((?:[a-z_]+=\S+ ?)+)$")
GROWTH = re.compile(r"^(\S+) growth ((?:[a-z_]+=\S+ ?)+)$")
VERDICT = re.compile(r"^(\S+) verdict ((?:[a-z_]+=\S+ ?)+)$")

def close(a, b):
    # rtol 1e-8 covers the %.9g printing; atol 1e-15 the rounding noise of k3 = mean(r - 1 - log r)
    # near r = 1 (fp32 runs: terms ~1e-13 whose last bits depend on which exp() computed r),
    # the tolerance tools/checks/check_results.py uses too
    a, b = float(a), float(b)
    return bool(np.isclose(a, b, rtol=1e-8, atol=1e-15)) or (a != a and b != b)

for run, files in expected.items():
    outdir = os.path.join(tmp, run)
    produced = sorted(x for x in os.listdir(outdir))
    check(produced == sorted(files), f"{run}: files {produced}, expected {sorted(files)}")
    for name, size in files.items():
        path = os.path.join(outdir, name)
        if not os.path.exists(path):
            continue
        try:
            got = png_size(path)
            check(got == size, f"{run}/{name}: {got[0]}x{got[1]}, expected {size[0]}x{size[1]}")
        except Exception as e:   # noqa: BLE001 - any decoding failure is a test failure
            check(False, f"{run}/{name}: does not decode: {e}")
        check(os.path.getsize(path) < 150_000, f"{run}/{name}: {os.path.getsize(path)} bytes")
    seen_stats, seen_cross, wrote, seen_strata, seen_growth = set(), set(), {}, set(), set()
    seen_verdict = set()
    for line in open(os.path.join(tmp, run + ".out")).read().splitlines():
        m, c, w = STAT.match(line), CROSS.match(line), WROTE.match(line)
        sm, gm, vm = STRATA.match(line), GROWTH.match(line), VERDICT.match(line)
        if vm:  # the summary's verdict: each objective's level as /verdict has it
            path = vm.group(1)
            vals = dict(kv.split("=", 1) for kv in vm.group(2).split())
            with h5py.File(path, "r") as f:
                a = f["verdict"].attrs
                for k in ("token_ppo", "sequence_is", "gspo"):
                    got = a[k].decode() if isinstance(a[k], bytes) else str(a[k])
                    check(vals.get(k) == got, f"{run}: {path} verdict {k}: printed {vals.get(k)}, file {got}")
            seen_verdict.add(path)
        elif sm:  # a decile of /len_L/strata/KIND: every printed value equals the file's dataset
            path, kind, L, d = sm.group(1), sm.group(2), int(sm.group(3)), int(sm.group(4))
            vals = dict(kv.split("=", 1) for kv in sm.group(5).split())
            with h5py.File(path, "r") as f:
                g = f[f"len_{L:04d}/strata/{kind}"]
                check(L == max(int(x) for x in f.attrs["lengths"]), f"{run}: strata at L={L}, not the longest")
                for k, v in vals.items():
                    check(k in g and close(v, g[k][d]), f"{run}: {path} strata {kind} decile {d} {k}: printed {v}")
            seen_strata.add((path, kind, d))
        elif gm:  # the growth fit: equal to /growth's attributes
            path = gm.group(1)
            vals = dict(kv.split("=", 1) for kv in gm.group(2).split())
            with h5py.File(path, "r") as f:
                a = f["growth"].attrs
                for k, v in vals.items():
                    check(close(v, a[k]), f"{run}: {path} growth {k}: printed {v}, file {a[k]!r}")
            seen_growth.add(path)
        elif m:
            path, L = m.group(1), int(m.group(2))
            vals = dict(kv.split("=", 1) for kv in m.group(3).split())
            with h5py.File(path, "r") as f:
                a = f[f"len_{L:04d}"].attrs
                for k in ("count", "mean", "std", "min", "max", "clipfrac", "k3"):
                    check(k in vals, f"{run}: {path} L={L}: {k} not printed")
                for k, v in vals.items():
                    check(k in a, f"{run}: {path} L={L}: printed {k} is no attribute")
                    if k in a:
                        check(close(v, a[k]), f"{run}: {path} L={L} {k}: printed {v}, file {a[k]!r}")
            seen_stats.add((path, L))
        elif c:
            path, la, lb = c.group(1), int(c.group(2)), int(c.group(3))
            vals = dict(kv.split("=", 1) for kv in c.group(4).split())
            with h5py.File(path, "r") as f:
                g = f["cross_length"]
                idx = [i for i, (x, y) in enumerate(zip(g["len_a"][...], g["len_b"][...]))
                       if (x, y) == (la, lb)]
                check(len(idx) == 1, f"{run}: {path} cross {la}/{lb} not in /cross_length")
                for k, v in vals.items():
                    if idx and k in g:
                        check(close(v, g[k][idx[0]]),
                              f"{run}: {path} cross {la}/{lb} {k}: printed {v}, file {g[k][idx[0]]!r}")
            seen_cross.add((path, la, lb))
        elif w:
            wrote[os.path.basename(w.group(1))] = (int(w.group(2)), int(w.group(3)))
        else:
            check(False, f"{run}: unexpected output line {line!r}")
    check(wrote == files, f"{run}: 'wrote' lines {wrote}, expected {files}")
    inputs = [os.path.join(tmp, "fp32.h5")] + ([os.path.join(tmp, "bf16.h5")] if run == "two" else [])
    for path in inputs:
        with h5py.File(path, "r") as f:
            lens = [int(x) for x in f.attrs["lengths"]]
            pairs = list(zip(f["cross_length/len_a"][...], f["cross_length/len_b"][...]))
        for L in lens:
            check((path, L) in seen_stats, f"{run}: no statistics line for {path} L={L}")
        for la, lb in pairs:
            check((path, int(la), int(lb)) in seen_cross, f"{run}: no cross line {path} {la}/{lb}")
        for kind in ("prob", "entropy"):
            for d in range(10):
                check((path, kind, d) in seen_strata, f"{run}: no strata line {path} {kind} decile {d}")
        check(path in seen_growth, f"{run}: no growth line for {path}")
        check(path in seen_verdict, f"{run}: no verdict line for {path}")

for msg in failures:
    print("MISMATCH", msg)
print(f"{checks - len(failures)} passed, {len(failures)} failed")
sys.exit(1 if failures else 0)
EOF

fi

if want inputs; then
# Files that are not ratiocheck results: exit 2, one line on stderr, nothing on stdout,
# no picture written.
"$PY" -c 'import h5py, sys; f = h5py.File(sys.argv[1], "w"); f["x"] = [1, 2]; f.attrs["format"] = "other"' \
  "$tmp/other.h5"
"$PY" -c 'import h5py, sys; h5py.File(sys.argv[1], "w")["x"] = [1, 2]' "$tmp/noattr.h5"
echo "not an HDF5 file" > "$tmp/text.h5"
for bad in other.h5 noattr.h5 text.h5 missing.h5; do
  plot bad "$tmp/fp32.h5" "$tmp/$bad" --out "$tmp/bad"
  rc=$?
  [ "$rc" -eq 2 ] || fail "$bad: exit $rc, expected 2"
  [ "$(wc -l < "$tmp/bad.err")" -eq 1 ] || fail "$bad: stderr is not one line: $(cat "$tmp/bad.err")"
  grep -q "$bad" "$tmp/bad.err" || fail "$bad: the message does not name the file"
  [ -s "$tmp/bad.out" ] && fail "$bad: wrote to stdout: $(head -3 "$tmp/bad.out")"
  [ -e "$tmp/bad" ] && fail "$bad: created the output folder"
  echo "   $(cat "$tmp/bad.err")"
done

# A sweep file: PREFIX_sweep.png at its size, and the std / k3 printed per setting equal to
# the file's /sweep/NN/len_L attributes (recomputed by the tool from the row's log-probs).
"$RC" sweep --model "$SRC/data/models/pythia-rc-tiny" --backend cpu --prompts "$SRC/data/prompts/default.ids" -q --dtype bf16 \
  --num-prompts 4 --samples 2 --len 8,16 --out "$tmp/sweep.h5" --vary trainer:lm-head=fp32 \
  --vary both:kernels=invariant > /dev/null || fail "ratiocheck sweep failed"
plot sweep "$tmp/sweep.h5" --out "$tmp/sweep" --prefix sw || fail "plot of a sweep: $(cat "$tmp/sweep.err")"
"$PY" - "$tmp" <<'EOF' || status=1
import re, sys
import h5py
import numpy as np
tmp = sys.argv[1]
out = open(f"{tmp}/sweep.out").read()
bad = []
if not re.search(r"^wrote \S+/sw_sweep\.png 1170x450$", out, re.M):
    bad.append("sw_sweep.png not written at 1170x450")
with h5py.File(f"{tmp}/sweep.h5", "r") as f:
    sw = f["sweep"]
    for i in range(int(sw.attrs["settings"])):
        g = sw[f"{i:02d}"]
        name = g.attrs["name"]
        name = name.decode() if isinstance(name, bytes) else name
        a = g["len_0016"].attrs
        m = re.search(r"sweep '" + re.escape(name) + r"' std=(\S+) k3=(\S+)", out)
        if not m:
            bad.append(f"no line for {name}")
            continue
        for k, v in zip(("std", "k3"), m.groups()):
            if not np.isclose(float(v), a[k], rtol=1e-8, atol=1e-15):
                bad.append(f"{name}: {k} printed {v}, file {a[k]}")
for b in bad:
    print("MISMATCH", b)
print(f"sweep plot: {len(bad)} failed")
sys.exit(1 if bad else 0)
EOF
fi

if want formats; then
# --format svg / pdf: the same pictures as vector files, byte-for-byte reproducible
for fmt in svg pdf; do
  plot "$fmt" "$tmp/fp32.h5" --out "$tmp/$fmt" --prefix v --format "$fmt" || fail "--format $fmt: $(cat "$tmp/$fmt.err")"
  plot "${fmt}2" "$tmp/fp32.h5" --out "$tmp/${fmt}2" --prefix v --format "$fmt" || fail "--format $fmt again"
  for k in hist position lengths scatter strata growth summary; do
    f="$tmp/$fmt/v_$k.$fmt"
    [ -s "$f" ] || { fail "--format $fmt: v_$k.$fmt missing"; continue; }
    cmp -s "$f" "$tmp/${fmt}2/v_$k.$fmt" || fail "v_$k.$fmt differs between two runs"
  done
  [ "$(ls "$tmp/$fmt" | grep -vc "\.$fmt\$")" -eq 0 ] || fail "--format $fmt wrote other files: $(ls "$tmp/$fmt")"
done
head -c 4 "$tmp/pdf/v_hist.pdf" | grep -q '%PDF' || fail "v_hist.pdf is not a PDF"
grep -q '<svg' "$tmp/svg/v_hist.svg" || fail "v_hist.svg is not an SVG"
fi
[ $status -eq 0 ] && echo "plots ($PART): all checks passed"
exit $status
