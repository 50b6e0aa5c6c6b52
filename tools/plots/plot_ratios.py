#!/usr/bin/python3
"""Pictures of ratiocheck result files (HDF5): ratio histograms, drift by position and across
lengths, generation vs forward log-probs, and a comparison of several runs.

Usage: plot_ratios.py FILE.h5 [FILE.h5 ...] [--out DIR] [--prefix NAME] [--format png|pdf|svg]

One file writes, in DIR (default: the current folder):
  PREFIX_hist.png      ratio histogram per length L (log counts, PPO clip band [0.8, 1.2] and
                       the [0.9, 1.1] band marked), and |r - 1| on a log axis below it
  PREFIX_position.png  mean and max |log r| against the generated position, one line per L
  PREFIX_lengths.png   |forward log-prob at La - at Lb| of the same token, per position
  PREFIX_scatter.png   forward - generation log-prob against the generation log-prob, and
                       |log r| by token-probability bin
  PREFIX_strata.png    mean and max |log r| by decile of the sampler's token probability and of
                       its entropy at the longest length (README "Strata")
  PREFIX_growth.png    var(S) of the sequence log-ratio against L with the power-law fit, the
                       sqrt(L) and L slopes and the sequence IS cap (README "Growth"), and the
                       mean |log r| per position at the longest length
  PREFIX_summary.png   one page: the main panels and a table of the statistics
  PREFIX_sweep.png     (a `ratiocheck sweep` file) |r - 1| of every setting overlaid, and the
                       ratio std per setting against the base's
  PREFIX_trace.png     (a `ratiocheck trace` file, with /trace) layer x op heatmaps of the
                       fraction of elements that differ between the sides and of their
                       relative L2 difference, the first divergent op framed
PREFIX defaults to the file name without .h5 / .ratiocheck.h5.

Several files (e.g. fp32, fp16 and bf16 runs of the same model and prompts) write the
per-file pictures as PREFIX_TAG_*.png (TAG: the dtype, or dtype-kernels, ... whatever tells the
files apart), PREFIX_overlay.png (the ratio histograms overlaid at the largest length all files
share) and PREFIX_summary.png (the runs side by side). PREFIX defaults to "compare". The
per-position pictures of several files share one y-range, so they compare at a glance.

For every file and every L it prints one line with the statistics it shows, recomputed from the
stored log-probs exactly as ratiocheck defines them (they equal the file's attributes):
  FILE L=20 count=1680 mean=1.00015718 std=0.00359866464 min=... max=... clipfrac=0 k3=...
       identical_frac=...
and one line per pair of lengths (equal to /cross_length):
  FILE cross La=20 Lb=40 count=1680 max_abs=... mean_abs=...
one line per decile of each strata kind at the longest length (equal to /len_L/strata/KIND):
  FILE strata prob L=50 decile=0 count=420 lo=... hi=... mean_abs_log_ratio=... max_abs_log_ratio=...
and the growth fit (equal to /growth's attributes; nan when there is none):
  FILE growth points=3 exponent=... log_coef=... cap_length=...
then one line "wrote PATH WIDTHxHEIGHT" per picture.

The pictures are deterministic (Agg backend, fixed sizes at 90 dpi, no time stamp or software
tag in the PNG; with Pillow, which Debian's matplotlib depends on, they are stored as 256-colour
palette PNGs of 20-70 KB). Needs numpy, h5py and matplotlib (Debian: python3-numpy python3-h5py
python3-matplotlib, run with /usr/bin/python3).
Exit status: 0 success, 2 bad arguments, a missing file or a file that is not a ratiocheck
result (one line on stderr), 1 anything else.
"""
import argparse
import os
import re
import sys

PROG = "plot_ratios.py"
FORMAT = "png"  # --format
SHARED_Y = {}   # several files: per-position key -> (smallest positive, largest) over all files
DPI = 90
FONT, TITLE = 10, 12  # points: the smallest text, and titles
# Figure sizes in inches: multiples of 1/4 inch, so that size * DPI is an exact integer.
HIST_COL_W, HIST_BLOCK_H, HIST_MAX_COLS = 4.5, 6.0, 3
POSITION_SIZE = (11.0, 4.0)
LENGTHS_SIZE = (11.0, 4.0)
SCATTER_SIZE = (11.0, 4.0)
OVERLAY_SIZE = (12.0, 4.5)
SWEEP_SIZE = (13.0, 5.0)
SUMMARY_SIZE = (16.0, 9.0)  # wide enough for the 10 pt table
STRATA_SIZE = (12.0, 4.5)
GROWTH_SIZE = (11.0, 4.5)
STRATA_KINDS = ("prob", "entropy")
TRACE_SIZE = (13.0, 5.0)
PROB_BINS = [0.0, 0.01, 0.1, 0.5, 0.9, 1.0]
PROB_BIN_LABELS = ["<0.01", "0.01-0.1", "0.1-0.5", "0.5-0.9", ">=0.9"]  # [lo, hi) bins; the last [0.9, 1]
DEV_LO = 1e-10          # |r - 1| axis: values below are drawn in the first bin
SCATTER_MAX_POINTS = 20000
STAT_KEYS = ["count", "mean", "std", "min", "max", "clipfrac", "k3", "identical_frac"]


class InputError(Exception):
    """A file that cannot be read as a ratiocheck result: exit 2 with one line."""


def fail(msg, code=2):
    print(f"{PROG}: error: {msg}", file=sys.stderr)
    sys.exit(code)


def hist_size(n_lens):
    cols = max(1, min(n_lens, HIST_MAX_COLS))
    blocks = max(1, -(-n_lens // HIST_MAX_COLS))
    return (cols * HIST_COL_W, blocks * HIST_BLOCK_H)


def px(size):
    return (int(round(size[0] * DPI)), int(round(size[1] * DPI)))


# --------------------------------------------------------------------------- reading

def _str(v):
    if isinstance(v, bytes):
        return v.decode("utf-8", "replace")
    return str(v)


class Run:
    """One result file: settings, and per length the arrays and statistics the pictures use."""

    def __init__(self, path):
        import h5py
        import numpy as np
        self.path = path
        if not os.path.exists(path):
            raise InputError(f"{path}: no such file")
        if os.path.isdir(path):
            raise InputError(f"{path}: is a folder, not a ratiocheck result file")
        try:
            f = h5py.File(path, "r")
        except OSError as e:
            if not h5py.is_hdf5(path):
                raise InputError(f"{path}: not an HDF5 file (not a ratiocheck result)") from e
            raise InputError(f"{path}: cannot open: {e}") from e
        with f:
            fmt = f.attrs.get("format")
            if fmt is None or _str(fmt) != "ratiocheck-results":
                what = "no root attribute 'format'" if fmt is None else f"format is {_str(fmt)!r}"
                raise InputError(f"{path}: not a ratiocheck result file ({what}, "
                                 "expected 'ratiocheck-results')")
            ver = int(f.attrs.get("format_version", 0))
            if ver != 1:
                raise InputError(f"{path}: ratiocheck result format_version {ver}, "
                                 "this tool reads version 1")
            try:
                self._load(f, np)
            except (KeyError, ValueError, IndexError, TypeError) as e:
                raise InputError(f"{path}: malformed ratiocheck result file ({e})") from e

    def _load(self, f, np):
        a = f.attrs
        self.dtype = _str(a["dtype"])
        self.kernels = _str(a["kernels"])
        self.upcast = _str(a.get("upcast", "none"))
        self.model = os.path.basename(_str(a.get("model_path", "")).rstrip("/")) or "model"
        self.temperature = float(a.get("temperature", float("nan")))
        self.num_sequences = int(a["num_sequences"])
        self.num_prompts = int(a["num_prompts"])
        self.samples = int(a.get("samples", 0))
        self.lens = [int(x) for x in a["lengths"]]
        # the verdict as ratiocheck judged it (files before the verdict have none)
        self.verdict = ({k: (_str(v) if isinstance(v, (bytes, str)) else v)
                         for k, v in f["verdict"].attrs.items()} if "verdict" in f else {})
        gen = f["rollouts/logprob_gen"][...]
        gen_len = f["rollouts/lengths"][...].astype(np.int64)
        self.gen = gen
        self.gen_len = gen_len
        self.stats, self.attrs, self.fwd = {}, {}, {}
        self.lr, self.valid, self.pos = {}, {}, {}
        for L in self.lens:
            g = f[f"len_{L:04d}"]
            fwd = g["logprob_forward"][...]
            gl = gen[:, :L]
            if fwd.shape != gl.shape:
                raise ValueError(f"len_{L:04d}/logprob_forward has shape {fwd.shape}, "
                                 f"expected {gl.shape}")
            valid = np.arange(L)[None, :] < np.minimum(gen_len, L)[:, None]
            with np.errstate(invalid="ignore"):
                lr = fwd.astype(np.float64) - gl.astype(np.float64)
            self.fwd[L] = fwd
            self.lr[L] = lr
            self.valid[L] = valid
            self.attrs[L] = {k: g.attrs[k] for k in g.attrs}
            self.pos[L] = {k: g[k][...] for k in
                           ("pos_count", "pos_mean_abs_log_ratio", "pos_max_abs_log_ratio")}
            lrv = lr[valid]
            rv = np.exp(lrv)
            n = int(valid.sum())
            same = (fwd.view(np.uint32) == gl.view(np.uint32)) & valid
            if n:
                st = {"count": n, "mean": rv.mean(), "std": rv.std(), "min": rv.min(),
                      "max": rv.max(), "clipfrac": float(np.mean(np.abs(rv - 1) > 0.2)),
                      "k3": float(np.mean(rv - 1 - lrv)),
                      "identical_frac": float(same.sum()) / n}
            else:
                st = {"count": 0, **{k: float("nan") for k in STAT_KEYS[1:]}}
            self.stats[L] = st
        self.entropy = f["rollouts/entropy"][...] if "entropy" in f["rollouts"] else None
        self.seq_cap = float(a.get("seq_cap", 3.0))
        self.clip = (float(a.get("clip_eps_low", 0.2)), float(a.get("clip_eps_high", 0.2)))
        self.strata = {k: self._strata(np, max(self.lens), k) for k in STRATA_KINDS}
        self.growth = self._growth(np)
        self.sweep = self._load_sweep(f, np, gen_len) if "sweep" in f else []
        self.trace = self._load_trace(f, np) if "trace" in f else None
        c = f["cross_length"]
        self.cross = []
        for la, lb in zip(c["len_a"][...], c["len_b"][...]):
            la, lb = int(la), int(lb)
            m = min(la, lb)
            valid = np.arange(m)[None, :] < np.minimum(gen_len, m)[:, None]
            with np.errstate(invalid="ignore"):
                d = np.abs(self.fwd[la][:, :m].astype(np.float64)
                           - self.fwd[lb][:, :m].astype(np.float64))
            d = np.where(valid, d, 0.0)
            dv = d[valid]
            # per position over the valid sequences (NaN where none is valid)
            cnt = valid.sum(axis=0)
            with np.errstate(invalid="ignore", divide="ignore"):
                pos_mean = np.where(cnt > 0, d.sum(axis=0) / cnt, np.nan)
            pos_max = np.where(cnt > 0, d.max(axis=0, initial=0.0), np.nan)
            self.cross.append({"La": la, "Lb": lb, "count": int(dv.size),
                               "max_abs": float(dv.max()) if dv.size else float("nan"),
                               "mean_abs": float(dv.mean()) if dv.size else float("nan"),
                               "pos_mean": pos_mean, "pos_max": pos_max})

    def _load_sweep(self, f, np, gen_len):
        """`ratiocheck sweep`: per setting its name and, unless skipped, |r - 1| and the
        statistics at the longest length, recomputed from the row's own log-probs."""
        L = max(self.lens)
        rows = []
        sw = f["sweep"]
        for i in range(int(sw.attrs["settings"])):
            g = sw[f"{i:02d}"]
            row = {"name": _str(g.attrs["name"]), "skipped": _str(g.attrs["skipped"]),
                   "noise_floor": bool(g.attrs["noise_floor"])}
            if not row["skipped"]:
                gl = g["logprob_generation"][...][:, :L]
                fwd = g[f"len_{L:04d}/logprob_forward"][...]
                valid = np.arange(L)[None, :] < np.minimum(gen_len, L)[:, None]
                lrv = fwd.astype(np.float64)[valid] - gl.astype(np.float64)[valid]
                rv = np.exp(lrv)
                same = (fwd.view(np.uint32) == gl.view(np.uint32)) & valid
                row.update(dev=np.abs(np.expm1(lrv)), std=float(rv.std()), k3=float(np.mean(rv - 1 - lrv)),
                           identical_frac=float(same.sum()) / max(1, int(valid.sum())))
            rows.append(row)
        return rows

    def _strata(self, np, L, kind):
        """README "Strata": deciles of the token's log-prob (prob) or of the sampler's entropy,
        edges at the sorted values' index floor(k n / 10), ties to the higher decile; per decile
        count, range (p or nats), mean and max |log r|. None when the file has no entropy."""
        values = self.gen if kind == "prob" else self.entropy
        if values is None:
            return None
        lr = self.lr[L]
        v = values[:, :L].astype(np.float64)
        m = self.valid[L] & ~np.isnan(v) & ~np.isnan(lr)
        vals, lrs = v[m], lr[m]
        n = vals.size
        edges = np.sort(vals)[(np.arange(1, 10) * n) // 10] if n else np.full(9, np.nan)
        dec = np.searchsorted(edges, vals, side="right")
        out = []
        for k in range(10):
            x, y = np.abs(lrs[dec == k]), vals[dec == k]
            conv = np.exp if kind == "prob" else (lambda z: z)
            out.append({"count": int(x.size), "lo": float(conv(y.min())) if x.size else float("nan"),
                        "hi": float(conv(y.max())) if x.size else float("nan"),
                        "mean_abs_log_ratio": float(x.mean()) if x.size else float("nan"),
                        "max_abs_log_ratio": float(x.max()) if x.size else float("nan")})
        return {"L": L, "bins": out}

    def _growth(self, np):
        """README "Growth": var(S) per length and the least-squares fit of ln var on ln L."""
        Ls, var = [], []
        for L in self.lens:
            valid = self.valid[L]
            has = valid.sum(axis=1) > 0
            S = np.where(valid, self.lr[L], 0.0).sum(axis=1)[has]
            Ls.append(L)
            var.append(float(S.var()) if S.size else float("nan"))
        use = [i for i, v in enumerate(var) if np.isfinite(var[i]) and var[i] > 0 and
               int((self.valid[Ls[i]].sum(axis=1) > 0).sum()) > 1]
        g = {"len": Ls, "var": var, "points": len(use), "exponent": float("nan"),
             "log_coef": float("nan"), "cap_length": float("nan")}
        if len(use) >= 2:
            a, b = np.polyfit(np.log([Ls[i] for i in use]), np.log([var[i] for i in use]), 1)
            g.update(exponent=float(a), log_coef=float(b))
            if a > 0 and np.log(self.seq_cap) > 0:
                g["cap_length"] = float((np.log(self.seq_cap) ** 2 / np.exp(b)) ** (1 / a))
        return g

    def _load_trace(self, f, np):
        """`ratiocheck trace`: the layer x op tables of /trace and its first divergence."""
        t = f["trace"]
        ops = [_str(x) for x in t["ops"][...]]
        layers = [int(x) for x in t["layer"][...]]
        tr = {"ops": ops, "layers": layers, "count": t["count"][...], "attrs": {k: t.attrs[k] for k in t.attrs}}
        for k in ("equal_frac", "max_abs", "rel_l2", "max_ulp"):
            tr[k] = t[k][...].astype(np.float64)
            if tr[k].shape != (len(layers), len(ops)):
                raise ValueError(f"trace/{k} has shape {tr[k].shape}, expected {(len(layers), len(ops))}")
        return tr

    def dev(self, L):
        """|r - 1| of the valid tokens at length L, in float64."""
        import numpy as np
        return np.abs(np.expm1(self.lr[L][self.valid[L]]))

    def prob_bins(self, L):
        """Per token-probability bin: count, mean and max |log r|, share of sum |log r|."""
        import numpy as np
        v = self.valid[L]
        p = np.exp(self.gen[:, :L].astype(np.float64)[v])
        a = np.abs(self.lr[L][v])
        idx = np.clip(np.searchsorted(PROB_BINS, p, side="right") - 1, 0, len(PROB_BIN_LABELS) - 1)
        total = a.sum()
        out = []
        for b in range(len(PROB_BIN_LABELS)):
            sel = a[idx == b]
            out.append({"count": int(sel.size),
                        "mean": float(sel.mean()) if sel.size else float("nan"),
                        "max": float(sel.max()) if sel.size else float("nan"),
                        "share": float(sel.sum() / total) if total > 0 else float("nan")})
        return out


# --------------------------------------------------------------------------- labels

def fmt_g(x, digits=3):
    if x != x:
        return "n/a"
    if x == 0:
        return "0"
    return f"{x:.{digits}g}"


def short_g(x):
    """Two significant digits in at most 6 characters (tick labels side by side):
    0.015, 0.28, 5.6, 3.5e-4 (not 0.00035), 6.6e-6."""
    if x != x:
        return "n/a"
    if x == 0:
        return "0"
    if 0.01 <= abs(x) < 1e4:
        return f"{x:.2g}"
    m, e = f"{x:.1e}".split("e")
    return f"{m.rstrip('0').rstrip('.')}e{int(e)}"


def assign_labels(runs):
    def parts(r, level):
        p = [r.dtype, r.kernels]
        if r.upcast not in ("none", ""):
            p.append("upcast " + r.upcast)
        if len({x.model for x in runs}) > 1:
            p.append(r.model)
        if level >= 1:
            p.append(os.path.basename(r.path))
        return p

    labels = [" ".join(parts(r, 0)) for r in runs]
    if len(set(labels)) < len(labels):
        labels = [" ".join(parts(r, 1)) for r in runs]
    if len(set(labels)) < len(labels):
        labels = [f"{lab} #{i + 1}" for i, lab in enumerate(labels)]
    for r, lab in zip(runs, labels):
        r.label = lab
    # file-name tags: the shortest choice that tells the files apart
    for choice in (lambda r: r.dtype, lambda r: f"{r.dtype}-{r.kernels}",
                   lambda r: f"{r.dtype}-{r.kernels}-{r.upcast}", None):
        if choice is None:
            tags = [f"{i + 1}" for i in range(len(runs))]
        else:
            tags = [choice(r) for r in runs]
        tags = [re.sub(r"[^A-Za-z0-9._-]+", "_", t) for t in tags]
        if len(set(tags)) == len(tags):
            break
    for r, t in zip(runs, tags):
        r.tag = t


def run_title(r):
    return (f"{r.model}, {r.label}: {r.num_sequences} sequences "
            f"({r.num_prompts} prompts x {r.samples}), temperature {r.temperature:g}")


# --------------------------------------------------------------------------- drawing helpers

def new_figure(size):
    from matplotlib.figure import Figure
    return Figure(figsize=size, dpi=DPI, layout="constrained")


def save(fig, path, size):
    """Render with Agg and write a palette PNG (256 colours, no dithering: small files, and
    the same bytes every time); plain RGBA PNG when Pillow is missing. With --format pdf /
    svg: that vector format instead (path's .png replaced), without time stamps. Legends are
    cleared of the data first (clear_legends)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    if clear_legends(fig, canvas):
        canvas.draw()
    if FORMAT != "png":
        path = path[: -len(".png")] + "." + FORMAT
        meta = {"CreationDate": None, "Producer": None} if FORMAT == "pdf" else {"Date": None}
        fig.savefig(path, format=FORMAT, dpi=DPI, metadata=meta)
        print(f"wrote {path} {px(size)[0]}x{px(size)[1]}")
        return
    w, h = canvas.get_width_height()
    if (w, h) != px(size):
        raise RuntimeError(f"{path}: rendered {w}x{h}, expected {px(size)}")
    try:
        from PIL import Image
    except ImportError:
        Image = None
    if Image is not None:
        img = Image.frombuffer("RGBA", (w, h), bytes(canvas.buffer_rgba()), "raw", "RGBA", 0, 1)
        dither = getattr(getattr(Image, "Dither", Image), "NONE")
        img = img.convert("RGB").quantize(colors=256, dither=dither)
        img.save(path, format="PNG", optimize=True)
    else:
        fig.savefig(path, dpi=DPI, metadata={"Software": None})
    print(f"wrote {path} {w}x{h}")


def ratio_view(runs_lens):
    """x-range of the ratio histograms: the PPO clip band with a margin, widened to the data."""
    lo, hi = 0.75, 1.25
    for r, L in runs_lens:
        st = r.stats[L]
        if st["count"]:
            lo = min(lo, st["min"] - 0.02)
            hi = max(hi, st["max"] + 0.02)
    return lo, hi


def mark_bands(ax, lo, hi):
    """Shade where PPO clips (outside [0.8, 1.2]) and mark the [0.9, 1.1] band."""
    ax.axvspan(lo, 0.8, color="#d62728", alpha=0.08, lw=0)
    ax.axvspan(1.2, hi, color="#d62728", alpha=0.08, lw=0)
    h1 = ax.axvline(0.8, color="#d62728", ls="--", lw=1.0, label="PPO clip band [0.8, 1.2]")
    ax.axvline(1.2, color="#d62728", ls="--", lw=1.0)
    h2 = ax.axvline(0.9, color="#7f7f7f", ls=":", lw=1.2, label="[0.9, 1.1]")
    ax.axvline(1.1, color="#7f7f7f", ls=":", lw=1.2)
    return [h1, h2]


def label_ticks_up_to(ax, limit, minor_limit):
    """Label the y ticks only up to `limit`: the space above is room for legends, and
    tick labels there would suggest values that do not occur."""
    from matplotlib.ticker import Formatter, LogFormatterSciNotation

    class Upto(Formatter):
        def __init__(self, inner, limit):
            self.inner, self.limit = inner, limit

        def set_axis(self, axis):
            super().set_axis(axis)
            self.inner.set_axis(axis)

        def set_locs(self, locs):
            self.inner.set_locs(locs)

        def __call__(self, x, pos=None):
            return "" if x > self.limit * 1.0001 else self.inner(x, pos)

    y = ax.yaxis
    y.set_major_formatter(Upto(y.get_major_formatter(), limit))
    # label some minor ticks too when the axis spans only a few decades (else a single label)
    y.set_minor_formatter(Upto(LogFormatterSciNotation(labelOnlyBase=False,
                                                       minor_thresholds=(1.5, 0.6)),
                                   minor_limit))


def decade_above(v):
    import math
    return 10 ** math.ceil(math.log10(v) - 1e-9)


def headroom_log(ax, vmax, bottom, frac, minor_labels=True):
    """Log y-axis from `bottom` whose top `frac` (of the height) is left free for legends."""
    import math
    lb, lt = math.log10(bottom), math.log10(max(vmax, bottom * 1.0001))
    ax.set_yscale("log")
    ax.set_ylim(bottom, 10 ** (lt + (lt - lb) * frac / (1 - frac)))
    label_ticks_up_to(ax, decade_above(vmax), vmax * 1.2 if minor_labels else 0)
    ax._rc_headroom = (vmax, bottom)  # for clear_legends, once the layout is final


def clear_legends(fig, canvas):
    """Raise the top of each headroom_log axis until its legend sits above every data value.
    `frac` is an estimate; the legend's height as a fraction of the axis is known only once the
    figure is laid out, so this runs on the drawn figure. The legend is anchored to the axes,
    so moving the top moves the data down, below it. True when an axis changed."""
    import math
    changed = False
    renderer = canvas.get_renderer()
    for ax in fig.axes:
        hr, leg = getattr(ax, "_rc_headroom", None), ax.get_legend()
        if hr is None or leg is None or ax.get_yscale() != "log":
            continue
        vmax, bottom = hr
        free = leg.get_window_extent(renderer).transformed(ax.transAxes.inverted()).y0 - 0.03
        lb, lt = math.log10(bottom), math.log10(max(vmax, bottom * 1.0001))
        at = (lt - lb) / (math.log10(ax.get_ylim()[1]) - lb)  # where vmax sits (axes fraction)
        if at > free and free > 0.45:  # else the data would be squeezed flat: left as drawn
            ax.set_ylim(bottom, 10 ** (lb + (lt - lb) / free))
            changed = True
    return changed


def dev_bins():
    import numpy as np
    return np.logspace(np.log10(DEV_LO), 0, 101)


def mark_dev_thresholds(ax):
    from matplotlib.transforms import blended_transform_factory
    tr = blended_transform_factory(ax.transData, ax.transAxes)
    for x in (1e-3, 1e-2, 0.1):
        ax.axvline(x, color="#7f7f7f", ls=":", lw=1.0)
    ax.axvline(0.2, color="#d62728", ls="--", lw=1.0)
    for x, t, ha, col in ((1e-3, "1e-3", "right", "#555555"), (1e-2, "1e-2", "right", "#555555"),
                          (0.1, "0.1", "right", "#555555"), (0.2, "clip", "left", "#d62728")):
        ax.text(x, 0.99, t, rotation=90, va="top", ha=ha, fontsize=FONT, color=col, transform=tr)


def plot_ratio_hist(ax, items, lo, hi, step=False, title=None):
    """items: list of (values, label, color). Returns the max bin count."""
    import numpy as np
    bins = np.linspace(lo, hi, 201)
    maxc = 1
    # narrow distributions are drawn on top of wide ones, so that none hides another
    spread = [float(np.std(v)) if v.size else 0.0 for v, _, _ in items]
    for (vals, label, color), sd in zip(items, spread):
        if vals.size == 0:
            continue
        c, _ = np.histogram(np.clip(vals, lo, hi), bins=bins)
        maxc = max(maxc, int(c.max()))
        if step:
            z = 2 + sum(1 for o in spread if o > sd)
            ax.stairs(c, bins, color=color, lw=1.4, label=label, zorder=z)
        else:
            ax.stairs(c, bins, color=color, fill=True, alpha=0.85, label=label)
    ax.set_xlim(lo, hi)
    ax.set_xlabel(f"ratio r = exp(new - old), bins of {(hi - lo) / 200:.4g}")
    ax.set_ylabel("tokens per bin (log scale)")
    if title:
        ax.set_title(title)
    return maxc


def plot_dev_hist(ax, items, title=None):
    """items: (|r - 1| values, identical fraction, label, color), drawn on a log x-axis."""
    import numpy as np
    bins = dev_bins()
    maxc = 1
    handles = []
    for dev, ident, label, color in items:
        nz = dev[dev > 0]
        lab = f"{label} ({100 * ident:.1f}% exactly 1, not drawn)"
        if nz.size:
            c, _ = np.histogram(np.clip(nz, DEV_LO, 1.0), bins=bins)
            maxc = max(maxc, int(c.max()))
            handles.append(ax.stairs(c, bins, color=color, lw=1.4, label=lab))
        else:
            handles.append(ax.plot([], [], color=color, lw=1.4, label=lab)[0])
    ax.set_xscale("log")
    ax.set_xlim(DEV_LO, 1.0)
    headroom_log(ax, maxc, 0.5, 0.1 + 0.075 * len(items), minor_labels=False)
    if not any((dev > 0).any() for dev, *_ in items):
        ax.set_yticks([])
        ax.set_yticks([], minor=True)
        ax.text(0.5, 0.4, "every ratio is exactly 1:\nnothing to draw on a log scale",
                transform=ax.transAxes, ha="center", va="center", fontsize=FONT)
    ax.set_xlabel(f"|r - 1| (log scale; first bin: also < {DEV_LO:g})")
    ax.set_ylabel("tokens per bin (log scale)")
    mark_dev_thresholds(ax)
    if title:
        ax.set_title(title)
    ax.legend(handles=handles, loc="upper left", fontsize=FONT, frameon=True)


def stats_handles(st, L):
    from matplotlib.patches import Patch
    lines = [f"L={L}: {st['count']} tokens",
             f"mean {st['mean']:.6f}  std {fmt_g(st['std'])}",
             f"min {st['min']:.5f}  max {st['max']:.5f}",
             f"clipfrac {fmt_g(st['clipfrac'])}  k3 {fmt_g(st['k3'])}",
             f"identical {100 * st['identical_frac']:.1f}%"]
    return [Patch(color="none", label=t) for t in lines]


def ratio_hist_panel(ax, r, L, color, title):
    """One run's ratio histogram at L in PPO's view, stats in one legend, bands in another."""
    import numpy as np
    lo, hi = ratio_view([(r, L)])
    maxc = plot_ratio_hist(ax, [(np.exp(r.lr[L][r.valid[L]]), "ratio", color)], lo, hi,
                           title=title)
    headroom_log(ax, maxc, 0.5, 0.62, minor_labels=False)
    bands = mark_bands(ax, lo, hi)
    # one legend (the statistics, then the bands): two side by side overlap at legible sizes
    ax.legend(handles=stats_handles(r.stats[L], L) + bands, loc="upper left", fontsize=FONT,
              handlelength=1.2, handletextpad=0.3, borderaxespad=0.3)


def int_x(ax):
    from matplotlib.ticker import MaxNLocator
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))


def log_lines(ax, lines, what, ylabel, ncol=3, span=None):
    """lines: (y, label, color, linestyle), y against the position 0..len-1. Log y-axis;
    values that are exactly 0 are drawn on a marked floor line below the smallest positive one;
    all 0: linear axis and a note. The legend goes in the free space on top."""
    import math
    import numpy as np
    ys = [np.asarray(y, dtype=np.float64) for y, *_ in lines]
    allv = np.concatenate(ys) if ys else np.zeros(0)
    allv = allv[np.isfinite(allv)]
    rows = math.ceil(len(lines) / ncol)
    int_x(ax)
    ax.set_xlabel("generated position t (tokens)")
    if not (allv > 0).any():
        for y, (_, label, color, ls) in zip(ys, lines):
            ax.plot(np.arange(len(y)), y, color=color, ls=ls, lw=1.3, label=label)
        ax.set_ylim(-0.2, 1 + 0.3 * rows)
        ax.set_yticks([0])
        ax.set_ylabel(f"{ylabel} (nats)")
        ax.text(0.5, 0.4, f"{what} is exactly 0 everywhere\n(bitwise-identical log-probs)",
                transform=ax.transAxes, ha="center", va="center", fontsize=FONT)
        ax.legend(loc="upper center", ncol=ncol, fontsize=FONT)
        return
    vmin, vmax = allv[allv > 0].min(), allv.max()
    if span:  # several files: one y-range for all, so their pictures compare at a glance
        vmin, vmax = min(vmin, span[0]), max(vmax, span[1])
    bottom = min(vmin / 1.6, vmax / 12)
    zero = (allv == 0).any()
    if zero:
        floor = bottom
        bottom = floor / 2
    for y, (_, label, color, ls) in zip(ys, lines):
        yy = np.where(y > 0, y, floor if zero else np.nan)
        ax.plot(np.arange(len(y)), np.where(np.isfinite(y), yy, np.nan), color=color, ls=ls,
                lw=1.3, label=label)
    frac = 0.1 + 0.1 * rows
    headroom_log(ax, vmax, bottom, frac)
    if zero:
        ax.axhline(floor, color="#7f7f7f", lw=0.8, ls=":")
        ax.text(0.995, floor / 1.08, "dotted line: exactly 0", transform=ax.get_yaxis_transform(),
                ha="right", va="top", fontsize=FONT, color="#555555")
    ax.legend(loc="upper center", ncol=ncol, fontsize=FONT)
    ax.set_ylabel(f"{ylabel} (nats, log scale)")
    ax.margins(x=0.01)


def l_colors(lens):
    from matplotlib import colormaps
    cmap = colormaps["viridis"]
    n = len(lens)
    return {L: cmap(0.1 + 0.75 * (i / max(1, n - 1))) for i, L in enumerate(lens)}


FILE_COLORS = ["#1f77b4", "#ff7f0e", "#d62728", "#2ca02c", "#9467bd", "#8c564b", "#e377c2",
               "#17becf", "#bcbd22", "#7f7f7f"]


# --------------------------------------------------------------------------- panels

def panel_lengths(ax, lines, title, ylabel):
    """lines: (y, label, color, linestyle) per pair of lengths."""
    ax.set_title(title)
    if not lines:
        ax.text(0.5, 0.5, "only one length was scored:\nnothing to compare",
                transform=ax.transAxes, ha="center", va="center", fontsize=FONT)
        ax.set_xticks([])
        ax.set_yticks([])
        return
    ncol = 1 if max(len(lab) for _, lab, _, _ in lines) > 28 else min(len(lines), 2)
    log_lines(ax, lines, "the difference", ylabel, ncol=ncol)


def panel_prob_bins(ax, groups, title):
    """groups: (bins from Run.prob_bins, label, color). Bars: mean |log r| per bin,
    triangles: max; one run: the token count and share of the total |log r| under each bin."""
    import numpy as np
    n = len(groups)
    x = np.arange(len(PROB_BIN_LABELS))
    width = 0.8 / n
    vals = []
    for gi, (bins, label, color) in enumerate(groups):
        xs = x - 0.4 + width * (gi + 0.5)
        means = np.array([b["mean"] for b in bins])
        maxs = np.array([b["max"] for b in bins])
        vals += [means, maxs]
        ax.bar(xs, np.where(means > 0, means, np.nan), width=width * 0.9, color=color,
               alpha=0.8, label=f"{label} mean" if n > 1 else "mean |log r|")
        ax.plot(xs, np.where(maxs > 0, maxs, np.nan), ls="none", marker="v", ms=5,
                color=color, markeredgecolor="black", markeredgewidth=0.5,
                label=f"{label} max" if n > 1 else "max |log r|")
    v = np.concatenate(vals)
    v = v[np.isfinite(v)]
    if (v > 0).any():
        rows = 2 if n == 1 else n
        headroom_log(ax, v.max(), v[v > 0].min() / 3, 0.08 + 0.075 * rows)
    else:
        ax.set_ylim(-0.2, 1.5)
        ax.set_yticks([0])
        ax.text(0.5, 0.5, "|log r| is exactly 0 everywhere\n(bitwise-identical log-probs)",
                transform=ax.transAxes, ha="center", va="center", fontsize=FONT)
    if n == 1:
        ticks = []
        for lab, b in zip(PROB_BIN_LABELS, groups[0][0]):
            share = "-" if b["share"] != b["share"] or not b["count"] else \
                f"{100 * b['share']:.0f}%"
            ticks.append(f"{lab}\n{b['count']}\n{share}")
        ax.set_xticks(x, ticks)
        ax.set_xlabel("token probability p; tokens; share of the total |log r|")
    else:
        ax.set_xticks(x, PROB_BIN_LABELS)
        ax.set_xlabel("token probability p = exp(old)")
    ax.set_ylabel("|log r| (nats, log scale)" if (v > 0).any() else "|log r| (nats)")
    ax.set_title(title)
    ax.legend(fontsize=FONT, loc="upper center", ncol=2 if n == 1 else n,
              columnspacing=1.0, handletextpad=0.4)


def panel_table(ax, rows, header, title, fontsize):
    ax.axis("off")
    tab = ax.table(cellText=rows, colLabels=header, loc="upper center", cellLoc="right",
                   colLoc="right", edges="horizontal")
    tab.auto_set_font_size(False)
    tab.set_fontsize(fontsize)
    tab.auto_set_column_width(list(range(len(header))))
    tab.scale(1.0, 1.35)
    for (row, _col), cell in tab.get_celld().items():
        cell.set_linewidth(0.4)
        if row == 0:
            cell.set_text_props(weight="bold")
    ax.set_title(title)


def stats_row(st):
    return [str(st["count"]), f"{st['mean']:.6f}", fmt_g(st["std"]), f"{st['min']:.5f}",
            f"{st['max']:.5f}", fmt_g(st["clipfrac"]), fmt_g(st["k3"]),
            f"{st['identical_frac']:.3f}"]


STATS_HEADER = ["tokens", "mean", "std", "min", "max", "clipfrac", "k3", "identical"]


def table_rows(runs):
    rows = []
    for r in runs:
        for L in r.lens:
            rows.append(([r.tag] if len(runs) > 1 else []) + [str(L)] + stats_row(r.stats[L]))
    header = (["run"] if len(runs) > 1 else []) + ["L"] + STATS_HEADER
    return rows, header


def table_note(ax, runs, extra=()):
    """Cross-length drift under the table, and `extra` lines (the sequence-level numbers)."""
    lines = ["max |forward(La) - forward(Lb)| of the same token:"]
    for r in runs:
        if r.cross:
            parts = [f"{c['La']}/{c['Lb']}: {fmt_g(c['max_abs'])}" for c in r.cross]
            lines.append((f"{r.tag}  " if len(runs) > 1 else "  ") + ",  ".join(parts))
    if len(lines) == 1:
        lines = []
    lines += list(extra)
    if lines:
        ax.text(0.0, 0.0, "\n".join(lines), transform=ax.transAxes, ha="left", va="bottom",
                fontsize=FONT, family="monospace")


VERDICT_ROWS = [("token_ppo", "token PPO"), ("sequence_is", "sequence IS"), ("gspo", "GSPO"),
                ("routing", "routing")]  # routing: a mixture-of-experts run only
VERDICT_COLORS = {"OK": "#2ca02c", "WARN": "#ff7f0e", "FAIL": "#d62728"}


def verdict_line(r):
    """'verdict: token PPO OK, sequence IS OK, GSPO FAIL', or '' without one."""
    parts = [f"{lab} {r.verdict[k]}" for k, lab in VERDICT_ROWS if k in r.verdict]
    return "verdict: " + ", ".join(parts) if parts else ""


def seq_lines(r, L):
    """The sequence-level numbers at L: e^S and e^M ranges, the shares above the
    cap and outside GSPO's band."""
    import math
    a = r.attrs[L]
    if "seq_log_ratio_sum_min" not in a:
        return []
    def e(x):
        return fmt_g(math.exp(float(x)), 4)
    out = [f"per sequence at L={L} ({int(a.get('seq_count', r.num_sequences))} sequences):",
           f"  e^S (sequence ratio) {e(a['seq_log_ratio_sum_min'])} to {e(a['seq_log_ratio_sum_max'])}, "
           f"std of S {fmt_g(float(a['seq_log_ratio_sum_std']))}",
           f"  e^M (GSPO) {e(a['seq_log_ratio_mean_min'])} to {e(a['seq_log_ratio_mean_max'])}"]
    if "seq_frac_above_cap" in a:
        out.append(f"  above the IS cap {100 * float(a['seq_frac_above_cap']):.3g}%, outside GSPO's band "
                   f"{100 * float(a.get('seq_frac_outside_band', float('nan'))):.3g}%")
    return out


def panel_verdict(ax, r, L):
    """The verdict, objective by objective with its reason, and the sequence-level numbers."""
    import textwrap
    ax.axis("off")
    ax.set_title("Verdict and sequences")
    y = 0.98
    for k, lab in VERDICT_ROWS:
        if k not in r.verdict:
            continue
        level = str(r.verdict[k])
        ax.text(0.0, y, f"{lab}: {level}", transform=ax.transAxes, ha="left", va="top", fontsize=FONT,
                weight="bold", color=VERDICT_COLORS.get(level, "black"))
        why = textwrap.fill(str(r.verdict.get(k + "_reason", "")), 60)
        ax.text(0.0, y - 0.06, why, transform=ax.transAxes, ha="left", va="top", fontsize=FONT)
        y -= 0.08 + 0.055 * (why.count("\n") + 1)
    if not r.verdict:
        ax.text(0.0, y, "no verdict in this file (written before ratiocheck judged one)",
                transform=ax.transAxes, ha="left", va="top", fontsize=FONT)
        y -= 0.1
    lines = seq_lines(r, L)
    if lines:
        ax.text(0.0, max(y - 0.02, 0.0), "\n".join(lines), transform=ax.transAxes, ha="left", va="top",
                fontsize=FONT)


# --------------------------------------------------------------------------- pictures

def fig_hist(r, path):
    import math
    n = len(r.lens)
    size = hist_size(n)
    cols = max(1, min(n, HIST_MAX_COLS))
    blocks = max(1, math.ceil(n / HIST_MAX_COLS))
    fig = new_figure(size)
    gs = fig.add_gridspec(2 * blocks, cols)
    colors = l_colors(r.lens)
    for i, L in enumerate(r.lens):
        b, c = divmod(i, HIST_MAX_COLS)
        ratio_hist_panel(fig.add_subplot(gs[2 * b, c]), r, L, colors[L], f"ratio at L={L}")
        plot_dev_hist(fig.add_subplot(gs[2 * b + 1, c]),
                      [(r.dev(L), r.stats[L]["identical_frac"], f"L={L}", colors[L])],
                      title=f"|r - 1| at L={L} (log scale)")
    import textwrap  # a one- or two-column figure is narrower than the title: wrap it
    fig.suptitle(textwrap.fill(f"Ratio histograms: {run_title(r)}", 42 * cols))
    save(fig, path, size)


def position_lines(r, key, colors, suffix="", ls="-"):
    return [(r.pos[L][key], f"L={L}{suffix}", colors[L], ls) for L in r.lens]


def fig_position(r, path):
    fig = new_figure(POSITION_SIZE)
    ax1, ax2 = fig.subplots(1, 2)
    colors = l_colors(r.lens)
    for ax, key, what in ((ax1, "pos_mean_abs_log_ratio", "mean"),
                          (ax2, "pos_max_abs_log_ratio", "max")):
        log_lines(ax, position_lines(r, key, colors), "|log r|", f"{what} |log r|", span=SHARED_Y.get(key))
        ax.set_title(f"{what} |log r| over sequences, per position")
    fig.suptitle(f"Drift by position: {run_title(r)}")
    save(fig, path, POSITION_SIZE)


def cross_lines(r, key):
    from matplotlib import colormaps
    cmap = colormaps["plasma"]
    n = len(r.cross)
    return [(c[key], f"L={c['La']} vs {c['Lb']} (overall max {fmt_g(c['max_abs'])})",
             cmap(0.1 + 0.7 * (i / max(1, n - 1))), "-") for i, c in enumerate(r.cross)]


def fig_lengths(r, path):
    fig = new_figure(LENGTHS_SIZE)
    ax1, ax2 = fig.subplots(1, 2)
    for ax, key, what in ((ax1, "pos_mean", "mean"), (ax2, "pos_max", "max")):
        panel_lengths(ax, cross_lines(r, key), f"{what} over sequences, per position",
                      f"{what} |forward(La) - forward(Lb)|")
    fig.suptitle("Drift across lengths: the same token's forward log-prob when the forward "
                 f"pass covers La vs Lb generated tokens\n{run_title(r)}")
    save(fig, path, LENGTHS_SIZE)


def fig_scatter(r, path):
    import numpy as np
    fig = new_figure(SCATTER_SIZE)
    ax1, ax2 = fig.subplots(1, 2)
    L = max(r.lens)
    v = r.valid[L]
    x = r.gen[:, :L].astype(np.float64)[v]
    y = r.lr[L][v]
    step = max(1, -(-x.size // SCATTER_MAX_POINTS))
    ax1.scatter(x[::step], y[::step], s=4, alpha=0.35, color="#1f77b4", lw=0,
                label=f"{x[::step].size} tokens" + (f" (every {step}th)" if step > 1 else ""))
    ax1.axhline(0, color="black", lw=0.6)
    ax1.set_xlabel("generation log-prob (nats)")
    ax1.set_ylabel("forward - generation log-prob = log r (nats)")
    ax1.set_title(f"Forward minus generation log-prob, per token, at L={L}")
    if y.size and np.abs(y).max() > 0:
        m = np.abs(y).max() * 1.15
        ax1.set_ylim(-m, m)
    ax1.ticklabel_format(axis="y", style="sci", scilimits=(-3, 3))
    ax1.legend(fontsize=FONT, loc="lower left", markerscale=3)
    panel_prob_bins(ax2, [(r.prob_bins(L), r.label, "#1f77b4")],
                    f"|log r| by token probability at L={L}")
    fig.suptitle(run_title(r))
    save(fig, path, SCATTER_SIZE)


def panel_strata(ax, r, kind):
    """mean |log r| per decile (bars) and max (triangles) at the longest length; x: the decile
    with its range of p (prob) or entropy (nats)"""
    import numpy as np
    st = r.strata[kind]
    what = "token probability p" if kind == "prob" else "the sampler's entropy (nats)"
    ax.set_title(f"|log r| by decile of {what}" + (f", L={st['L']}" if st else ""))
    if st is None:
        ax.axis("off")
        ax.text(0.5, 0.5, "n/a: the file has no /rollouts/entropy\n(written before it)",
                transform=ax.transAxes, ha="center", va="center")
        return
    b = st["bins"]
    x = np.arange(10)
    means = np.array([d["mean_abs_log_ratio"] for d in b])
    maxs = np.array([d["max_abs_log_ratio"] for d in b])
    ax.bar(x, np.where(means > 0, means, np.nan), width=0.75, color="#1f77b4", alpha=0.85,
           label="mean |log r|")
    ax.plot(x, np.where(maxs > 0, maxs, np.nan), ls="none", marker="v", ms=7, color="#ff7f0e",
            markeredgecolor="black", markeredgewidth=0.5, label="max |log r|")
    v = np.concatenate([means, maxs])
    v = v[np.isfinite(v) & (v > 0)]
    span = SHARED_Y.get("strata")
    if v.size:
        lo, hi = v.min(), v.max()
        if span:
            lo, hi = min(lo, span[0]), max(hi, span[1])
        headroom_log(ax, hi, lo / 3, 0.22, minor_labels=False)
    else:
        ax.set_ylim(-0.2, 1.5)
        ax.set_yticks([0])
        ax.text(0.5, 0.5, "|log r| is exactly 0 everywhere", transform=ax.transAxes, ha="center")
    ticks = [f"{k}\n{short_g(d['lo'])}" if d["count"] else f"{k}\nempty" for k, d in enumerate(b)]
    ax.set_xticks(x, ticks)
    ax.set_xlabel("decile (0: " + ("least likely" if kind == "prob" else "most certain")
                  + "); its smallest " + ("p" if kind == "prob" else "entropy"))
    ax.set_ylabel("|log r| (nats, log scale)")
    ax.legend(loc="upper center", ncol=2)


def fig_strata(r, path):
    fig = new_figure(STRATA_SIZE)
    ax1, ax2 = fig.subplots(1, 2)
    panel_strata(ax1, r, "prob")
    panel_strata(ax2, r, "entropy")
    fig.suptitle(f"Strata: {run_title(r)}")
    save(fig, path, STRATA_SIZE)


def fig_growth(r, path):
    """var(S) against L (log-log) with the fit e^b L^a, slopes 1 (sqrt(L)) and 2 (L) through the
    first point, the cap's var (log cap)^2 and where the fit reaches it; right: mean |log r|
    per position at the longest length."""
    import numpy as np
    fig = new_figure(GROWTH_SIZE)
    ax1, ax2 = fig.subplots(1, 2)
    g = r.growth
    Ls = np.array(g["len"], dtype=np.float64)
    var = np.array(g["var"], dtype=np.float64)
    ok = np.isfinite(var) & (var > 0)
    ax1.plot(Ls[ok], var[ok], ls="none", marker="o", ms=7, color="#1f77b4", label="var(S) per length")
    capv = np.log(r.seq_cap) ** 2
    a, b, capL = g["exponent"], g["log_coef"], g["cap_length"]
    xmax = Ls.max() * 2
    if np.isfinite(capL) and capL < Ls.max() * 1e4:
        xmax = max(xmax, capL * 1.5)
    xs = np.geomspace(max(1.0, Ls.min() / 2), xmax, 100)
    if np.isfinite(a):
        ax1.plot(xs, np.exp(b) * xs ** a, color="#d62728", lw=1.6,
                 label=f"fit: var = {np.exp(b):.3g} L^{a:.2f}")
    if ok.any():
        x0, y0 = Ls[ok][0], var[ok][0]
        ax1.plot(xs, y0 * (xs / x0), color="#7f7f7f", ls=":", lw=1.2, label="slope 1: std ~ sqrt(L)")
        ax1.plot(xs, y0 * (xs / x0) ** 2, color="#7f7f7f", ls="--", lw=1.2, label="slope 2: std ~ L")
    ax1.axhline(capv, color="#2ca02c", lw=1.2, label=f"std(S) = log {r.seq_cap:g} (sequence IS cap)")
    if np.isfinite(capL) and capL <= xmax:
        ax1.axvline(capL, color="#2ca02c", ls=":", lw=1.2)
        ax1.text(capL, capv, f" L ~ {capL:.3g}", va="bottom", ha="left", color="#2ca02c")
    ax1.set_xscale("log")
    ax1.set_yscale("log")
    span = SHARED_Y.get("growth")
    ys = np.concatenate([var[ok], [capv]])
    lo, hi = ys.min(), ys.max()
    if span:
        lo, hi = min(lo, span[0]), max(hi, span[1])
    ax1.set_ylim(lo / 10, hi * 1e3)
    ax1.set_xlabel("L: generated tokens re-scored (log scale)")
    ax1.set_ylabel("var(S), S = sum of log r (log scale)")
    ax1.set_title("Variance of the sequence log-ratio against length"
                  + ("" if np.isfinite(a) else ": n/a (needs 2 lengths)"))
    ax1.legend(loc="upper left", ncol=1)
    L = max(r.lens)
    log_lines(ax2, [(r.pos[L]["pos_mean_abs_log_ratio"], f"L={L}", "#1f77b4", "-")], "|log r|",
              "mean |log r|", ncol=1, span=SHARED_Y.get("pos_mean_abs_log_ratio"))
    ax2.set_title(f"mean |log r| per position at L={L}")
    fig.suptitle(f"Growth: {run_title(r)}")
    save(fig, path, GROWTH_SIZE)


def common_len(runs):
    common = set(runs[0].lens)
    for r in runs[1:]:
        common &= set(r.lens)
    return max(common) if common else None


def draw_overlay(ax1, ax2, runs, L, short=False):
    import numpy as np
    lo, hi = ratio_view([(r, L) for r in runs])
    items = []
    for i, r in enumerate(runs):
        st = r.stats[L]
        lab = (f"{r.tag}: std {fmt_g(st['std'])}" if short else
               f"{r.label}: std {fmt_g(st['std'])}, [{st['min']:.4f}, {st['max']:.4f}]")
        items.append((np.exp(r.lr[L][r.valid[L]]), lab, FILE_COLORS[i % len(FILE_COLORS)]))
    maxc = plot_ratio_hist(ax1, items, lo, hi, step=True)
    headroom_log(ax1, maxc, 0.5, 0.1 + 0.075 * (len(runs) + 1), minor_labels=False)
    handles = ax1.get_legend_handles_labels()[0]
    bands = mark_bands(ax1, lo, hi)
    ax1.legend(handles=handles + bands, loc="upper left", fontsize=FONT)
    plot_dev_hist(ax2, [((r.dev(L)), r.stats[L]["identical_frac"], r.tag if short else r.label,
                         FILE_COLORS[i % len(FILE_COLORS)]) for i, r in enumerate(runs)])


def fig_overlay(runs, path):
    fig = new_figure(OVERLAY_SIZE)
    ax1, ax2 = fig.subplots(1, 2)
    L = common_len(runs)
    if L is None:
        for ax in (ax1, ax2):
            ax.axis("off")
        ax1.text(0.5, 0.5, "the files share no length L: nothing to overlay",
                 transform=ax1.transAxes, ha="center", va="center")
        save(fig, path, OVERLAY_SIZE)
        return
    draw_overlay(ax1, ax2, runs, L)
    ax1.set_title(f"ratio at L={L}, as PPO sees it (clip band marked)")
    ax2.set_title(f"|r - 1| at L={L} on a log scale: the spread by order of magnitude")
    models = sorted({r.model for r in runs})
    fig.suptitle(f"{', '.join(models)}: " + " vs ".join(r.label for r in runs)
                 + f", {runs[0].num_sequences} sequences, L={L}")
    save(fig, path, OVERLAY_SIZE)


def fig_sweep(r, path):
    """`ratiocheck sweep`: |r - 1| of every setting overlaid, and the ratio std per setting
    against the base's."""
    import numpy as np
    L = max(r.lens)
    rows = [x for x in r.sweep if not x["skipped"]]
    base = {"name": "base", "dev": r.dev(L), "std": r.stats[L]["std"], "k3": r.stats[L]["k3"],
            "identical_frac": r.stats[L]["identical_frac"]}
    fig = new_figure(SWEEP_SIZE)
    ax1, ax2 = fig.subplots(1, 2, gridspec_kw={"width_ratios": [1.2, 1]})
    items = [(base["dev"], base["identical_frac"], "base", "#000000")]
    items += [(x["dev"], x["identical_frac"], x["name"], FILE_COLORS[i % len(FILE_COLORS)])
              for i, x in enumerate(rows) if not x["noise_floor"]]
    bins = dev_bins()
    for dev, ident, label, color in items:  # many lines: no legend headroom, the legend beside
        nz = dev[dev > 0]
        c = np.histogram(np.clip(nz, DEV_LO, 1.0), bins=bins)[0] if nz.size else np.zeros(len(bins) - 1)
        ax1.stairs(c, bins, color=color, lw=1.8 if label == "base" else 1.1,
                   label=f"{label} ({100 * ident:.0f}% exactly 1)")
    ax1.set_xscale("log")
    ax1.set_xlim(DEV_LO, 1.0)
    ax1.set_yscale("symlog", linthresh=1)
    ax1.set_ylim(0, None)
    ax1.set_xlabel(f"|r - 1| (log scale; the first bin also holds 0 < |r - 1| < {DEV_LO:g})")
    ax1.set_ylabel("tokens per bin")
    ax1.set_title(f"|r - 1| at L={L}, every setting over the same rollouts")
    ax1.legend(loc="upper left", fontsize=FONT, frameon=True)
    names = ["base"] + [x["name"] for x in rows]
    stds = [base["std"]] + [x["std"] for x in rows]
    y = np.arange(len(names))[::-1]
    floor = max(min([v for v in stds if v > 0], default=1e-12) / 10, 1e-12)
    colors = ["#000000"] + ["#7f7f7f" if x["noise_floor"] else
                            FILE_COLORS[i % len(FILE_COLORS)] for i, x in enumerate(rows)]
    ax2.barh(y, [max(v, floor) for v in stds], color=colors, height=0.7)
    ax2.set_xscale("log")
    ax2.axvline(max(base["std"], floor), color="#000000", lw=0.8, ls="--")
    ax2.set_yticks(y)
    ax2.set_yticklabels(names, fontsize=FONT)
    for yy, v in zip(y, stds):
        ax2.text(max(v, floor), yy, f" {fmt_g(v)}" if v > 0 else " 0 (every ratio 1)", va="center", fontsize=FONT)
    ax2.set_xlabel("ratio std at L=%d (log scale; dashed: the base)" % L)
    ax2.set_title("one setting changed at a time")
    fig.suptitle(f"{r.model}: ratiocheck sweep, {r.num_sequences} sequences, L={L}")
    save(fig, path, SWEEP_SIZE)


def fig_trace(r, path):
    """`ratiocheck trace`: layer x op heatmaps (rows: the embedding, each layer, the final
    norm and logits; columns: the ops present), the share of elements that differ between the
    sampler and the trainer, and their relative L2 difference; the first divergence framed."""
    import numpy as np
    from matplotlib.colors import LogNorm
    from matplotlib.patches import Rectangle
    t = r.trace
    n_layers = int(t["attrs"]["layers"])
    cols = [j for j in range(len(t["ops"])) if (t["count"][:, j] > 0).any()]
    rows = [i for i in range(len(t["layers"])) if (t["count"][i, :] > 0).any()]
    names = ["embed" if t["layers"][i] < 0 else "final" if t["layers"][i] >= n_layers else str(t["layers"][i])
             for i in rows]
    diff = 1.0 - t["equal_frac"][np.ix_(rows, cols)]
    rel = t["rel_l2"][np.ix_(rows, cols)]
    fig = new_figure(TRACE_SIZE)
    axs = fig.subplots(1, 2)
    first = None
    if int(t["attrs"]["first_found"]):
        fl, fo = int(t["attrs"]["first_layer"]), _str(t["attrs"]["first_op"])
        first = (rows.index(t["layers"].index(fl)), cols.index(t["ops"].index(fo)))
    pos = rel[np.isfinite(rel) & (rel > 0)]
    panels = [(axs[0], np.ma.masked_invalid(diff), None, "share of elements that differ"),
              (axs[1], np.ma.masked_invalid(np.where(rel > 0, rel, np.nan)),
               LogNorm(vmin=float(pos.min()), vmax=float(pos.max())) if pos.size else None,
               "relative L2 difference (log; white: equal)")]
    for ax, data, norm, title in panels:
        im = ax.imshow(data, aspect="auto", cmap="viridis", norm=norm, vmin=None if norm else 0.0,
                       vmax=None if norm else max(float(np.nanmax(diff)) if np.isfinite(diff).any() else 1.0, 1e-9),
                       interpolation="nearest")
        fig.colorbar(im, ax=ax, shrink=0.9)
        ax.set_xticks(range(len(cols)))
        ax.set_xticklabels([t["ops"][j] for j in cols], rotation=60, ha="right")
        ax.set_yticks(range(len(rows)))
        ax.set_yticklabels(names)
        ax.set_ylabel("layer")
        ax.set_title(title)
        if first:
            ax.add_patch(Rectangle((first[1] - 0.5, first[0] - 0.5), 1, 1, fill=False, ec="#d62728", lw=2))
    a = t["attrs"]
    head = ("first divergence: none" if not first else
            f"first divergence (framed): layer {names[first[0]]}, {_str(a['first_op'])}, sequence "
            f"{int(a['first_sequence'])}, position {int(a['first_position'])}")
    fig.suptitle(f"{r.model}: ratiocheck trace at L={int(a['len'])}, sampler {_str(a['sampler'])} vs trainer "
                 f"{_str(a['trainer'])}\n{head}", fontsize=8)
    save(fig, path, TRACE_SIZE)


def fig_summary_one(r, path):
    fig = new_figure(SUMMARY_SIZE)
    axs = fig.subplots(2, 3)
    L = max(r.lens)
    colors = l_colors(r.lens)
    ratio_hist_panel(axs[0, 0], r, L, colors[L], f"Ratio at L={L} (clip band marked)")
    plot_dev_hist(axs[0, 1], [(r.dev(x), r.stats[x]["identical_frac"], f"L={x}", colors[x])
                              for x in r.lens], title="|r - 1| per length (log scale)")
    ax = axs[0, 2]
    log_lines(ax, position_lines(r, "pos_mean_abs_log_ratio", colors, " mean")
              + position_lines(r, "pos_max_abs_log_ratio", colors, " max", "--"), "|log r|",
              "|log r|")
    ax.set_title("Drift by position (solid: mean, dashed: max over sequences)")
    cross = cross_lines(r, "pos_max")
    if cross:
        panel_lengths(axs[1, 0], cross, "Drift across lengths (max over sequences)",
                      "max |forward(La) - forward(Lb)|")
    else:  # one length: nothing to compare across lengths, so the verdict takes the panel
        panel_verdict(axs[1, 0], r, L)
    panel_prob_bins(axs[1, 1], [(r.prob_bins(L), r.label, colors[L])],
                    f"|log r| by token probability at L={L}")
    rows, header = table_rows([r])
    panel_table(axs[1, 2], rows, header, "Ratio statistics per length", FONT)
    table_note(axs[1, 2], [r], [] if not cross else seq_lines(r, L))
    vl = verdict_line(r)
    fig.suptitle(f"ratiocheck summary: {run_title(r)}" + (f"\n{vl}" if vl and cross else ""),
                 fontsize=TITLE)
    save(fig, path, SUMMARY_SIZE)


def fig_summary_many(runs, path):
    fig = new_figure(SUMMARY_SIZE)
    axs = fig.subplots(2, 3)
    L = common_len(runs)
    models = sorted({r.model for r in runs})
    fig.suptitle(f"ratiocheck: {', '.join(models)}, " + " vs ".join(r.label for r in runs)
                 + f", {runs[0].num_sequences} sequences", fontsize=TITLE)
    if L is None:
        for ax in axs.ravel():
            ax.axis("off")
        axs[0, 0].text(0.0, 0.5, "the files share no length L: nothing to compare",
                       transform=axs[0, 0].transAxes)
        save(fig, path, SUMMARY_SIZE)
        return
    draw_overlay(axs[0, 0], axs[0, 1], runs, L, short=True)
    axs[0, 0].set_title(f"Ratio at L={L} (clip band marked)")
    axs[0, 1].set_title(f"|r - 1| at L={L} (log scale)")
    ax = axs[0, 2]
    log_lines(ax, [(r.pos[L]["pos_mean_abs_log_ratio"], r.tag, FILE_COLORS[i % 10], "-")
                   for i, r in enumerate(runs)], "|log r|", "mean |log r|")
    ax.set_title(f"Drift by position at L={L} (mean over sequences)")
    lines = []
    for i, r in enumerate(runs):
        if r.cross:
            c = max(r.cross, key=lambda c: (abs(c["La"] - c["Lb"]), -c["La"]))
            lines.append((c["pos_max"], f"{r.tag}: L={c['La']} vs {c['Lb']}",
                          FILE_COLORS[i % 10], "-"))
    panel_lengths(axs[1, 0], lines, "Drift across lengths (max)",
                  "max |forward(La) - forward(Lb)|")
    panel_prob_bins(axs[1, 1], [(r.prob_bins(L), r.tag, FILE_COLORS[i % 10])
                                for i, r in enumerate(runs)],
                    f"|log r| by token probability, L={L}")
    rows, header = table_rows(runs)
    panel_table(axs[1, 2], rows, header, "Ratio statistics per run and length",
                FONT)
    table_note(axs[1, 2], runs)
    save(fig, path, SUMMARY_SIZE)


# --------------------------------------------------------------------------- main

def print_stats(r):
    for L in r.lens:
        st = r.stats[L]
        parts = [f"count={st['count']}"] + [f"{k}={st[k]:.9g}" for k in STAT_KEYS[1:]]
        print(f"{r.path} L={L} " + " ".join(parts))
    for c in r.cross:
        print(f"{r.path} cross La={c['La']} Lb={c['Lb']} count={c['count']} "
              f"max_abs={c['max_abs']:.9g} mean_abs={c['mean_abs']:.9g}")
    for kind in STRATA_KINDS:
        st = r.strata[kind]
        for k, d in enumerate(st["bins"] if st else []):
            print(f"{r.path} strata {kind} L={st['L']} decile={k} count={d['count']} "
                  + " ".join(f"{n}={d[n]:.9g}" for n in ("lo", "hi", "mean_abs_log_ratio", "max_abs_log_ratio")))
    if r.verdict:  # what the summary shows: each objective's level (/verdict)
        print(f"{r.path} verdict " + " ".join(f"{k}={r.verdict[k]}" for k, _ in VERDICT_ROWS if k in r.verdict))
    g = r.growth
    print(f"{r.path} growth points={g['points']} exponent={g['exponent']:.9g} log_coef={g['log_coef']:.9g} "
          f"cap_length={g['cap_length']:.9g}")
    if r.trace is not None:
        a = r.trace["attrs"]
        print(f"{r.path} trace first_op={_str(a['first_op'])} first_layer={int(a['first_layer'])} "
              f"first_sequence={int(a['first_sequence'])} first_position={int(a['first_position'])}")
    for x in r.sweep:
        if x["skipped"]:
            print(f"{r.path} sweep {x['name']!r} skipped")
        else:
            print(f"{r.path} sweep {x['name']!r} std={x['std']:.9g} k3={x['k3']:.9g} "
                  f"identical_frac={x['identical_frac']:.9g}")


def default_prefix(paths):
    if len(paths) > 1:
        return "compare"
    base = os.path.basename(paths[0])
    for ext in (".ratiocheck.h5", ".h5", ".hdf5"):
        if base.endswith(ext) and len(base) > len(ext):
            return base[: -len(ext)]
    return base


def main(argv):
    ap = argparse.ArgumentParser(prog=PROG, description="Pictures of ratiocheck result files.",
                                 epilog="Writes PNGs and prints the statistics they show.")
    ap.add_argument("files", nargs="+", metavar="FILE.h5")
    ap.add_argument("--out", default=".", metavar="DIR", help="output folder [.]")
    ap.add_argument("--prefix", metavar="NAME",
                    help="file name prefix [the file's name; 'compare' for several files]")
    ap.add_argument("--format", choices=["png", "pdf", "svg"], default="png",
                    help="picture format [png; pdf and svg are vector files]")
    args = ap.parse_args(argv)
    global FORMAT
    FORMAT = args.format
    prefix = args.prefix if args.prefix is not None else default_prefix(args.files)
    if not prefix or "/" in prefix:
        fail(f"--prefix {prefix!r}: give a non-empty name without '/'")
    try:
        import h5py  # noqa: F401
        import numpy  # noqa: F401
    except ImportError as e:
        fail(f"{e.name} is not installed (Debian: apt-get install python3-h5py python3-numpy "
             "python3-matplotlib; run with /usr/bin/python3)", 1)
    runs = []
    for p in args.files:
        try:
            runs.append(Run(p))
        except InputError as e:
            fail(str(e))
    try:
        import matplotlib
    except ImportError:
        fail("matplotlib is not installed (Debian: apt-get install python3-matplotlib; run "
             "with /usr/bin/python3)", 1)
    matplotlib.use("Agg")
    # legible fonts: nothing below 10 pt, titles 12 pt
    matplotlib.rcParams.update({"svg.hashsalt": "ratiocheck", "font.size": FONT, "axes.titlesize": TITLE,
                                "axes.labelsize": FONT, "legend.fontsize": FONT, "xtick.labelsize": FONT,
                                "ytick.labelsize": FONT, "figure.titlesize": TITLE,
                                "path.simplify": True})
    try:
        os.makedirs(args.out, exist_ok=True)
    except OSError as e:
        fail(f"--out {args.out}: {e.strerror}", 1)
    assign_labels(runs)
    if len(runs) > 1:
        import numpy as np
        for key in ("pos_mean_abs_log_ratio", "pos_max_abs_log_ratio"):
            v = np.concatenate([np.asarray(r.pos[L][key], dtype=np.float64) for r in runs for L in r.lens])
            v = v[np.isfinite(v) & (v > 0)]
            if v.size:
                SHARED_Y[key] = (float(v.min()), float(v.max()))
        v = np.array([d[k] for r in runs for st in r.strata.values() if st for d in st["bins"]
                      for k in ("mean_abs_log_ratio", "max_abs_log_ratio")], dtype=np.float64)
        v = v[np.isfinite(v) & (v > 0)]
        if v.size:
            SHARED_Y["strata"] = (float(v.min()), float(v.max()))
        v = np.array([x for r in runs for x in r.growth["var"]], dtype=np.float64)
        v = v[np.isfinite(v) & (v > 0)]
        if v.size:
            SHARED_Y["growth"] = (float(v.min()), float(v.max()))
    for r in runs:
        print_stats(r)
    many = len(runs) > 1
    for r in runs:
        base = os.path.join(args.out, f"{prefix}_{r.tag}" if many else prefix)
        fig_hist(r, base + "_hist.png")
        fig_position(r, base + "_position.png")
        if r.cross:  # one length: nothing to compare across lengths, no picture
            fig_lengths(r, base + "_lengths.png")
        fig_scatter(r, base + "_scatter.png")
        fig_strata(r, base + "_strata.png")
        fig_growth(r, base + "_growth.png")
        if r.sweep:
            fig_sweep(r, base + "_sweep.png")
        if r.trace is not None:
            fig_trace(r, base + "_trace.png")
        if many:
            fig_summary_one(r, base + "_summary.png")
    base = os.path.join(args.out, prefix)
    if many:
        fig_overlay(runs, base + "_overlay.png")
        fig_summary_many(runs, base + "_summary.png")
    else:
        fig_summary_one(runs[0], base + "_summary.png")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
