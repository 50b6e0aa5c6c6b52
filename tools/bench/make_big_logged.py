#!/usr/bin/env python3
"""A large rollout file that carries both sides, for timing `ratiocheck score` without a model
(docs/score.md "Both sides logged"): ROLLOUTS records of a 32-token prompt and RESPONSE generated
tokens, random ids below 50,000, sampler log-probs -Exp(2) rounded as float32, the trainer's the
same plus N(0, 0.01) noise (kept <= 0). Deterministic (seed 1234); stdlib only.

usage: make_big_logged.py OUT.jsonl [ROLLOUTS [RESPONSE]]   (default 4096 x 256: 1,048,576 tokens)
"""
import json
import random
import struct
import sys


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def main():
    out = sys.argv[1]
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 4096
    g = int(sys.argv[3]) if len(sys.argv) > 3 else 256
    rng = random.Random(1234)
    with open(out, "w") as f:
        for _ in range(n):
            prompt = [rng.randrange(50000) for _ in range(32)]
            resp = [rng.randrange(50000) for _ in range(g)]
            lp = [f32(-rng.expovariate(0.5)) for _ in range(g)]
            tr = [f32(min(0.0, x + rng.gauss(0.0, 0.01))) for x in lp]
            f.write(json.dumps({"prompt_ids": prompt, "response_ids": resp, "logprobs": lp,
                                "trainer_logprobs": tr}) + "\n")


if __name__ == "__main__":
    main()
