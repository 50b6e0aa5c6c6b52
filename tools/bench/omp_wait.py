#!/usr/bin/env python3
"""OpenMP waiting, side by side: one ratiocheck command timed under several
waiting settings, the settings alternated in every round so that each sees
the same load, optionally beside busy processes (one spinning core each).

    python3 tools/bench/omp_wait.py --rounds 5                 # as the machine is now
    python3 tools/bench/omp_wait.py --rounds 5 --busy 1        # beside one busy process

Each setting runs with OMP_WAIT_POLICY, GOMP_SPINCOUNT and the re-exec
marker removed from the environment, then its own variables added; "default"
adds none (ratiocheck's own default, docs/cli.md "OpenMP waiting"). The
table gives the median wall time per setting and its ratio to the first
setting's median, and the load average before and after: read the ratios,
not the seconds, on a shared machine.
"""
import argparse
import os
import statistics
import subprocess
import sys
import time

ARMS = {
    "libgomp": {"GOMP_SPINCOUNT": "300000"},  # libgomp's own default (3 ms of spinning), set explicitly
    "default": {},  # ratiocheck's default
    "spin1000": {"GOMP_SPINCOUNT": "1000"},
    "spin10000": {"GOMP_SPINCOUNT": "10000"},
    "spin100000": {"GOMP_SPINCOUNT": "100000"},
    "passive": {"OMP_WAIT_POLICY": "PASSIVE"},
}
CLEARED = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "RATIOCHECK_GOMP_DEFAULT")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rc", default="build/src/ratiocheck", help="the ratiocheck executable")
    ap.add_argument("--args", default="-q --out none --backend cpu",
                    help="its arguments (default: the default check on the CPU)")
    ap.add_argument("--arms", default="libgomp,default,passive",
                    help="settings, comma-separated, the first the reference: " + ", ".join(ARMS))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--busy", type=int, default=0, help="busy processes beside (each spins one core)")
    a = ap.parse_args()
    arms = a.arms.split(",")
    for k in arms:
        if k not in ARMS:
            sys.exit(f"omp_wait.py: unknown setting {k} (one of {', '.join(ARMS)})")
    base = {k: v for k, v in os.environ.items() if k not in CLEARED}
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(a.busy)]
    load0 = os.getloadavg()
    times = {k: [] for k in arms}
    try:
        for r in range(a.rounds):
            order = arms if r % 2 == 0 else arms[::-1]  # alternate the order too
            for k in order:
                env = dict(base, **ARMS[k])
                t = time.perf_counter()
                p = subprocess.run([a.rc] + a.args.split(), env=env, stdout=subprocess.DEVNULL)
                dt = time.perf_counter() - t
                if p.returncode not in (0, 3):
                    sys.exit(f"omp_wait.py: {k}: exit {p.returncode}")
                times[k].append(dt)
                print(f"round {r + 1} {k:>10}: {dt:7.2f} s", file=sys.stderr, flush=True)
    finally:
        for b in busy:
            b.kill()
            b.wait()
    load1 = os.getloadavg()
    ref = statistics.median(times[arms[0]])
    print(f"`{a.rc} {a.args}`, {a.rounds} rounds alternated, beside {a.busy} busy process(es); "
          f"{os.cpu_count()} CPUs, load average before {load0[0]:.2f} / {load0[1]:.2f} / {load0[2]:.2f}, "
          f"after {load1[0]:.2f} / {load1[1]:.2f} / {load1[2]:.2f}")
    print("| setting | environment | median s | min s | max s | vs " + arms[0] + " |")
    print("|---|---|---:|---:|---:|---:|")
    for k in arms:
        ts = times[k]
        envs = " ".join(f"{n}={v}" for n, v in ARMS[k].items()) or "(none: ratiocheck's default)"
        print(f"| {k} | {envs} | {statistics.median(ts):.2f} | {min(ts):.2f} | {max(ts):.2f} | "
              f"{statistics.median(ts) / ref:.2f} |")


if __name__ == "__main__":
    main()
