#!/usr/bin/env python3
"""Fail when a source file includes a header of a room above its own.

The rooms, lowest first (src/meson.build): base < formats < engine < results
< check < cli; models/ and kernels/ are part of engine (the model families
and the CUDA backend). A file may include headers of its own room and of the
rooms below it, never above. Also fails on a cycle between two modules (a
module: name.c with name.h and its internal name_impl.h) of the same room
through their includes, e.g.
status.c including util.h while util.h includes status.h.

Usage: check_layers.py [ROOT]   (ROOT: the source tree, default: this file's ../)
Prints one line per problem; exit 1 if there is any, 0 otherwise.
"""
import os
import re
import sys

ROOMS = ["base", "formats", "engine", "results", "check", "cli"]
DIRS = {"src/base": "base", "src/formats": "formats", "src/engine": "engine", "models": "engine",
        "kernels": "engine", "src/results": "results", "src/check": "check", "src/cli": "cli"}
# module pairs that include each other on purpose, with the reason
ALLOWED_CYCLES = {
    ("src/engine/forward", "src/engine/fp8w"):
        "fp8w.c is the forward pass's fp8-weight part: it takes forward.h's numerics and weights, forward.c calls it",
}
INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"', re.M)


def module(rel):
    """src/formats/tokenizer_impl.h, tokenizer.c and tokenizer.h are one module"""
    stem = rel.rsplit(".", 1)[0]
    return stem[:-len("_impl")] if stem.endswith("_impl") else stem


def main():
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", ".."))
    room_of = {}   # relative path -> room
    by_name = {}   # header base name -> relative path
    for d, room in DIRS.items():
        for f in sorted(os.listdir(os.path.join(root, d))):
            if f.endswith((".c", ".h", ".cu")):
                rel = f"{d}/{f}"
                room_of[rel] = room
                if f.endswith(".h"):
                    if f in by_name:
                        print(f"{rel}: header name also used by {by_name[f]} (includes would be ambiguous)")
                        return 1
                    by_name[f] = rel
    problems = []
    deps = {}  # module -> modules it includes (same room)
    for rel, room in sorted(room_of.items()):
        with open(os.path.join(root, rel), encoding="utf-8") as fh:
            text = fh.read()
        mod = module(rel)
        for inc in INCLUDE.findall(text):
            target = by_name.get(os.path.basename(inc))
            if target is None:
                continue  # generated (rc_build_config.h) or a test shim
            troom = room_of[target]
            if ROOMS.index(troom) > ROOMS.index(room):
                problems.append(f"{rel} ({room}) includes {inc} ({troom}): the dependency goes upwards "
                                f"({' < '.join(ROOMS)})")
            tmod = module(target)
            if troom == room and tmod != mod:
                deps.setdefault(mod, set()).add(tmod)
    # cycles between modules of one room
    seen_cycles = set()
    for start in sorted(deps):
        stack = [(start, [start])]
        while stack:
            node, path = stack.pop()
            for nxt in sorted(deps.get(node, ())):
                if nxt == start:
                    cyc = tuple(sorted(path))
                    if cyc not in seen_cycles and cyc not in ALLOWED_CYCLES:
                        seen_cycles.add(cyc)
                        problems.append("include cycle: " + " -> ".join(path + [start]))
                elif nxt not in path and len(path) < 8:
                    stack.append((nxt, path + [nxt]))
    for p in problems:
        print(p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
