#!/usr/bin/env python3
"""Check every relative link in README.md and docs/**/*.md (or the files given).

A link `[text](path)`, `[text](path#anchor)`, `[text](#anchor)` or an image `![alt](path)`
must name a file or folder inside the repository that exists, and an anchor must be a heading
of the Markdown file it points into (GitHub's anchors: lower case, punctuation dropped, spaces
as hyphens, a repeated heading gets -1, -2, ...). Links to http(s)://, mailto: and links inside
code spans or fenced code blocks are not checked. Prints one line per bad link,
`FILE:LINE: LINK: reason`, and exits 1 when there is any (0 otherwise).

`--pending PATH` (repeatable) accepts links to PATH (relative to the root) while that file does
not exist yet, for a page another branch adds; once it exists its links are checked as any
other, and a note says the option can go.

    python3 tools/checks/check_links.py [--root DIR] [--pending PATH]... [FILE.md ...]
"""
import argparse
import os
import re
import sys

LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)+?\1")


def github_anchor(heading):
    """The anchor GitHub gives a heading's text."""
    text = re.sub(r"<[^>]+>", "", heading)
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)  # a link in a heading: its text
    text = text.strip().lower()
    text = "".join(c for c in text if c.isalnum() or c in " -_")
    return text.replace(" ", "-")


def lines_outside_code(text):
    """(line number, line, line without code spans) for each line outside code blocks."""
    fence = None
    indented = False  # inside an indented code block (4 spaces after a blank line)
    prev_blank = True
    for n, line in enumerate(text.split("\n"), 1):
        blank = not line.strip()
        m = re.match(r"^\s{0,3}(```+|~~~+)", line)
        if m:
            if fence is None:
                fence = m.group(1)[0] * 3
            elif m.group(1).startswith(fence):
                fence = None
            prev_blank = False
            continue
        if fence is not None:
            continue
        if line.startswith("    ") and (prev_blank or indented):
            indented = True
        elif not blank:
            indented = False
        prev_blank = blank
        if indented or blank:
            continue
        yield n, line, CODE_SPAN.sub("", line)


def anchors_of(path, cache):
    if path not in cache:
        seen = {}
        found = set()
        with open(path, encoding="utf-8") as f:
            text = f.read()
        for _, line, _ in lines_outside_code(text):
            m = re.match(r"^(#{1,6})\s+(.*?)\s*#*\s*$", line)
            if not m:
                continue
            a = github_anchor(m.group(2))
            k = seen.get(a, 0)
            seen[a] = k + 1
            found.add(a if k == 0 else f"{a}-{k}")
        for m in re.finditer(r"<a\s+(?:name|id)=\"([^\"]+)\"", text):
            found.add(m.group(1))
        cache[path] = found
    return cache[path]


def check_file(path, root, cache, pending=()):
    bad = []
    with open(path, encoding="utf-8") as f:
        text = f.read()
    for n, _, line in lines_outside_code(text):
        for m in LINK.finditer(line):
            target = m.group(1)
            if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):
                continue  # http:, https:, mailto:
            where, _, anchor = target.partition("#")
            if where:
                dest = os.path.normpath(os.path.join(os.path.dirname(path), where))
                if os.path.relpath(dest, root).startswith(".."):
                    bad.append((n, target, "points outside the repository"))
                    continue
                if not os.path.exists(dest):
                    if os.path.relpath(dest, root) not in pending:
                        bad.append((n, target, "no such file"))
                    continue
            else:
                dest = path
            if anchor:
                if not dest.endswith(".md") or os.path.isdir(dest):
                    bad.append((n, target, "anchor into a file that is not Markdown"))
                elif anchor not in anchors_of(dest, cache):
                    bad.append((n, target, f"no heading with anchor #{anchor} in {os.path.relpath(dest, root)}"))
    return bad


def default_files(root):
    files = [os.path.join(root, "README.md")]
    for d, _, names in os.walk(os.path.join(root, "docs")):
        files += [os.path.join(d, x) for x in sorted(names) if x.endswith(".md")]
    return sorted(f for f in files if os.path.exists(f))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--root", default=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                    help="the repository root [this script's ..]")
    ap.add_argument("--pending", action="append", default=[], metavar="PATH",
                    help="a file another branch adds: links to it pass while it does not exist")
    ap.add_argument("files", nargs="*", help="Markdown files [README.md and docs/**/*.md]")
    a = ap.parse_args()
    root = os.path.abspath(a.root)
    files = [os.path.abspath(f) for f in a.files] or default_files(root)
    cache = {}
    pending = {os.path.normpath(p) for p in a.pending}
    for p in sorted(pending):
        if os.path.exists(os.path.join(root, p)):
            print(f"check_links: {p} exists now: --pending {p} is no longer needed", file=sys.stderr)
    nbad = 0
    nlinks = 0
    for f in files:
        for n, target, why in check_file(f, root, cache, pending):
            print(f"{os.path.relpath(f, root)}:{n}: {target}: {why}")
            nbad += 1
        with open(f, encoding="utf-8") as fh:
            nlinks += sum(len(LINK.findall(l)) for _, _, l in lines_outside_code(fh.read()))
    print(f"check_links: {len(files)} files, {nlinks} links, {nbad} bad", file=sys.stderr)
    return 1 if nbad else 0


if __name__ == "__main__":
    sys.exit(main())
