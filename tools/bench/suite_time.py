#!/usr/bin/env python3
"""The default check and the quick test suite of two builds, side by side.

A speed goal such as "the default check (bundled model) and the test suites at least
3x faster than today" is a ratio between two builds on one machine, so both are
measured in one run, alternating A, B, A, B (A: the old build, B: the new one),
with the load average printed before each measurement:

  - the default check: `SRC/build/src/ratiocheck -q --out none` (the bundled model
    and prompts in bf16), run from SRC, wall time of the process;
  - the quick suite: `meson test -C SRC/build --suite quick --no-rebuild` (both
    builds must be up to date), wall time of the whole suite and each test's own
    duration from meson's JSON log. Meson runs the tests in parallel (as many as
    CPUs), as a developer runs them.

The suite of B may hold tests A does not have (added since): the table gives the
whole suite and the sum over the tests both have. Timeouts are multiplied by
--timeout-multiplier (default 10) so that a loaded machine does not kill a test
in one build and not the other; a test that fails still counts its time and is
listed.

    python3 tools/bench/suite_time.py --a /work/wt-old --b . [--rounds 2] [--md FILE]

Prints one line per measurement and a Markdown table last (also written to --md).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time


def load():
    return "%.2f / %.2f / %.2f" % os.getloadavg()


def timed(cmd, cwd, env=None):
    t0 = time.monotonic()
    p = subprocess.run(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return time.monotonic() - t0, p.returncode, p.stdout, p.stderr


def default_check(src, env):
    exe = os.path.join(src, "build", "src", "ratiocheck")
    wall, code, _, err = timed([exe, "-q", "--out", "none"], cwd=src, env=env)
    if code != 0:
        raise SystemExit(f"{exe}: exit {code}: {err.strip()[-500:]}")
    return wall


def quick_suite(src, tag, mult):
    logbase = f"suite_time_{tag}"
    cmd = ["meson", "test", "-C", os.path.join(src, "build"), "--suite", "quick", "--no-rebuild",
           "-t", str(mult), "--logbase", logbase]
    wall, code, out, _ = timed(cmd, cwd=src)
    tests = {}
    with open(os.path.join(src, "build", "meson-logs", logbase + ".json")) as f:
        for line in f:
            j = json.loads(line)
            tests[j["name"]] = (float(j["duration"]), j["result"])
    return wall, code, tests


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--a", required=True, help="source tree of build A (the old one), built in A/build")
    ap.add_argument("--b", required=True, help="source tree of build B (the new one), built in B/build")
    ap.add_argument("--rounds", type=int, default=2, help="A, B pairs of each measurement [2]")
    ap.add_argument("--checks", type=int, default=3, help="default checks per build and round [3]")
    ap.add_argument("--timeout-multiplier", type=float, default=10)
    ap.add_argument("--no-suite", action="store_true", help="only the default check")
    ap.add_argument("--check-env", action="append", default=[], metavar="KEY=VALUE",
                    help="set in the default check's environment (repeatable), e.g. OMP_WAIT_POLICY=passive "
                         "(meson's test environment sets it for the suite)")
    ap.add_argument("--md", help="also write the Markdown table here")
    a = ap.parse_args()
    check_env = dict(os.environ)
    for kv in a.check_env:
        k, _, v = kv.partition("=")
        check_env[k] = v
    src = {"A": os.path.abspath(a.a), "B": os.path.abspath(a.b)}
    rev = {k: subprocess.run(["git", "-C", v, "rev-parse", "--short", "HEAD"], capture_output=True,
                             text=True).stdout.strip() for k, v in src.items()}
    print(f"suite_time: A = {src['A']} ({rev['A']}), B = {src['B']} ({rev['B']}); {os.cpu_count()} CPUs; "
          f"load {load()}", flush=True)
    t_start = time.time()
    checks = {"A": [], "B": []}
    suites = {"A": [], "B": []}
    loads = []
    rounds_done = 0
    try:  # Ctrl-C (SIGINT) ends the run early: the table covers the complete A, B pairs measured so far
        for rnd in range(a.rounds):
            for k in ("A", "B"):
                for _ in range(a.checks):
                    l0 = os.getloadavg()[0]
                    w = default_check(src[k], check_env)
                    checks[k].append(w)
                    loads.append(l0)
                    print(f"round {rnd + 1} {k} default check {w:7.2f} s  (load {l0:.2f})", flush=True)
            if not a.no_suite:
                for k in ("A", "B"):
                    l0 = os.getloadavg()[0]
                    wall, code, tests = quick_suite(src[k], f"{k}{rnd + 1}", a.timeout_multiplier)
                    suites[k].append((wall, code, tests))
                    loads.append(l0)
                    bad = [n for n, (_, r) in tests.items() if r != "OK"]
                    print(f"round {rnd + 1} {k} quick suite {wall:7.1f} s, {len(tests)} tests, sum of test times "
                          f"{sum(d for d, _ in tests.values()):.1f} s (load {l0:.2f})"
                          + (f"; not OK: {', '.join(bad)}" if bad else ""), flush=True)
            rounds_done += 1
    except KeyboardInterrupt:
        print(f"interrupted after {rounds_done} complete round(s)", flush=True)
        if rounds_done == 0:
            return 1
        n = rounds_done * a.checks
        checks = {k: v[:n] for k, v in checks.items()}
        suites = {k: v[:rounds_done] for k, v in suites.items()}
    a.rounds = rounds_done
    minutes = (time.time() - t_start) / 60
    med = statistics.median
    lines = [f"Measured by `python3 tools/bench/suite_time.py --a {a.a} --b {a.b} --rounds {a.rounds} "
             f"--checks {a.checks}{''.join(' --check-env ' + kv for kv in a.check_env)}"
             f"{' --no-suite' if a.no_suite else ''}` on {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} ({minutes:.0f} minutes; "
             f"A = {rev['A']}, B = {rev['B']}), {os.cpu_count()} CPUs, measurements alternating A, B; "
             f"1-minute load average before each measurement {min(loads):.2f}-{max(loads):.2f} "
             f"(median {med(loads):.2f}).", "",
             "| measurement | A s (median) | B s (median) | A / B |", "|---|---:|---:|---:|"]
    ca, cb = med(checks["A"]), med(checks["B"])
    envs = "".join(f" {kv}" for kv in a.check_env)
    lines.append(f"| default check (`{envs.strip() + ' ' if envs else ''}ratiocheck -q --out none`), "
                 f"{len(checks['A'])} runs each | {ca:.2f} | {cb:.2f} | "
                 f"{ca / cb:.2f} |")
    if not a.no_suite:
        names_a = set(suites["A"][0][2])
        names_b = set(suites["B"][0][2])
        common = sorted(names_a & names_b)
        wa, wb = med([s[0] for s in suites["A"]]), med([s[0] for s in suites["B"]])
        lines.append(f"| quick suite, whole (A {len(names_a)} tests, B {len(names_b)}), wall | {wa:.1f} | {wb:.1f} | "
                     f"{wa / wb:.2f} |")
        sa = med([sum(s[2][n][0] for n in common) for s in suites["A"]])
        sb = med([sum(s[2][n][0] for n in common) for s in suites["B"]])
        lines.append(f"| quick suite, the {len(common)} tests both have, sum of their times | {sa:.1f} | {sb:.1f} | "
                     f"{sa / sb:.2f} |")
        for n in common:
            ta = med([s[2][n][0] for s in suites["A"]])
            tb = med([s[2][n][0] for s in suites["B"]])
            lines.append(f"| &nbsp; {n.split('/')[-1].strip()} | {ta:.1f} | {tb:.1f} | "
                         f"{ta / tb if tb > 0 else float('nan'):.2f} |")
        only_b = sorted(names_b - names_a)
        if only_b:
            tb = med([sum(s[2][n][0] for n in only_b) for s in suites["B"]])
            lines.append(f"| quick suite, B's {len(only_b)} tests A does not have "
                         f"({', '.join(n.split('/')[-1].strip() for n in only_b)}) | | {tb:.1f} | |")
        bad = sorted({f"{k}: {n.split('/')[-1].strip()} {r}" for k in ("A", "B") for s in suites[k]
                      for n, (_, r) in s[2].items() if r != "OK"})
        if bad:
            lines += ["", "Not OK in some run (their time counts): " + "; ".join(bad) + "."]
    lines.append(f"\nLoad average after: {load()}.")
    md = "\n".join(lines) + "\n"
    print("\n" + md)
    if a.md:
        with open(a.md, "w") as f:
            f.write(md)


if __name__ == "__main__":
    sys.exit(main())
