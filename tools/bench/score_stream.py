#!/usr/bin/env python3
"""Peak memory and time of `ratiocheck score` as the rollout file grows.

Writes N-line JSONL files from the committed HF rollouts
(data/fixtures/score/hf_fp32.jsonl: 24 rollouts, prompts of 5 to 10 tokens),
each response cut to its first --resp-tokens tokens and the rollouts repeated
until the file has N lines, then runs `ratiocheck score` on each and reports
the peak RSS of the process (its own getrusage, measured in a fresh child so
that every row is one command's) and the wall time. Full scores for
--sizes, `--check-only` (read and check, no forward) for --check-only-sizes.
Memory that stays flat as N grows is what chunked scoring promises; a full
score's time grows linearly (README "Memory and speed").

    python3 tools/bench/score_stream.py --ratiocheck build/src/ratiocheck \\
        --sizes 2000,20000 --check-only-sizes 100000,1000000

Standard library only. The files go to a temporary folder (--keep DIR to keep
them there).
"""
import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def write_file(path, n, resp_tokens):
    """n lines: the fixture's rollouts, responses cut to resp_tokens, repeated."""
    src = os.path.join(ROOT, "data", "fixtures", "score", "hf_fp32.jsonl")
    rows = []
    with open(src) as f:
        for line in f:
            o = json.loads(line)
            k = min(resp_tokens, len(o["response_ids"]))
            rows.append(json.dumps({"prompt_ids": o["prompt_ids"], "response_ids": o["response_ids"][:k],
                                    "logprobs": o["logprobs"][:k], "temperature": o.get("temperature", 1.0),
                                    "logprobs_kind": o.get("logprobs_kind", "raw")}) + "\n")
    with open(path, "w") as f:
        for i in range(n):
            f.write(rows[i % len(rows)])
    return os.path.getsize(path)


def measure(cmd):
    """(exit code, peak RSS in MiB, wall seconds, stderr tail) of cmd, in a fresh child."""
    probe = ("import resource, subprocess, sys, time\n"
             "t = time.time()\n"
             "p = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)\n"
             "w = time.time() - t\n"
             "r = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss\n"
             "sys.stdout.write('%d %d %.3f\\n' % (p.returncode, r, w))\n"
             "sys.stderr.write(p.stderr.decode(errors='replace')[-400:])\n")
    p = subprocess.run([sys.executable, "-c", probe] + cmd, capture_output=True, text=True)
    code, rss_kib, wall = p.stdout.split()
    return int(code), int(rss_kib) / 1024.0, float(wall), p.stderr.strip()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ratiocheck", default=os.path.join(ROOT, "build", "src", "ratiocheck"))
    ap.add_argument("--model", default=os.path.join(ROOT, "data", "models", "pythia-rc-tiny"))
    ap.add_argument("--sizes", default="2000,20000", help="rollouts per file, full score")
    ap.add_argument("--check-only-sizes", default="100000,1000000", help="rollouts per file, --check-only")
    ap.add_argument("--resp-tokens", type=int, default=4, help="response tokens kept per rollout [4]")
    ap.add_argument("--chunk-rollouts", type=int, default=0, help="--chunk-rollouts for the full scores [default]")
    ap.add_argument("--dtype", default="bf16")
    ap.add_argument("--threads", type=int, default=0, help="--threads [all cores]")
    ap.add_argument("--keep", help="write the files here and keep them")
    a = ap.parse_args()
    tmp = a.keep or tempfile.mkdtemp(prefix="rc_score_stream.")
    os.makedirs(tmp, exist_ok=True)
    runs = [(int(n), False) for n in a.sizes.split(",") if n] + \
           [(int(n), True) for n in a.check_only_sizes.split(",") if n]
    print("%10s %-11s %9s %12s %10s %9s  %s" % ("rollouts", "mode", "file MB", "tokens", "peak MiB", "seconds",
                                               "exit"))
    ok = True
    try:
        for n, check_only in runs:
            path = os.path.join(tmp, "rollouts_%d.jsonl" % n)
            size = write_file(path, n, a.resp_tokens)
            with open(path) as f:  # prompt + response tokens in the file
                tokens = sum(len(o["prompt_ids"]) + len(o["response_ids"]) for o in map(json.loads, f))
            cmd = [a.ratiocheck, "score", "-q", "--model", a.model, "--rollouts", path, "--dtype", a.dtype]
            if a.threads:
                cmd += ["--threads", str(a.threads)]
            if check_only:
                cmd += ["--check-only"]
            else:
                cmd += ["--out", os.path.join(tmp, "out_%d.h5" % n), "--force"]
                if a.chunk_rollouts:
                    cmd += ["--chunk-rollouts", str(a.chunk_rollouts)]
            code, rss, wall, err = measure(cmd)
            ok &= code == 0
            print("%10d %-11s %9.1f %12d %10.1f %9.1f  %d%s" % (n, "check-only" if check_only else "score",
                                                               size / 1e6, tokens, rss, wall, code,
                                                               "" if code == 0 else "  " + err), flush=True)
            if not a.keep:
                os.unlink(path)
    finally:
        if not a.keep:
            shutil.rmtree(tmp, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
