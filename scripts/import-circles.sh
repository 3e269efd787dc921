#!/usr/bin/env bash
# Import circles between files of one crate: pairs of files that each refer to the other
# (`crate::a` in b.rs and `crate::b` in a.rs; `super::x` is resolved the same way). A circle
# means neither file can be read, tested or moved without the other; edges should point one way.
#
#   scripts/import-circles.sh [DIR...]   default: every crates/*/src
#
# Prints one line per circle, `crate: a.rs <-> b.rs`, then a count. Always exits 0: it reports,
# it does not gate.
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ $# -eq 0 ]]; then set -- crates/*/src; fi
python3 - "$@" <<'PY'
import os, re, sys

# A path after `crate::` or `super::`, possibly a `{…}` group (nested groups included).
REF = re.compile(r"\b(crate|super)::")


def module_path(src, file):
    """The module path of a file, e.g. `http::events` for src/http/events.rs."""
    rel = os.path.relpath(file, src)[: -len(".rs")].split(os.sep)
    if rel[-1] in ("mod", "lib", "main"):
        rel = rel[:-1]
    return tuple(rel)


def expand(text, i):
    """The `::`-separated paths starting at text[i], expanding `{a, b::c}` groups."""
    out, cur, j = [], "", i
    while j < len(text):
        c = text[j]
        if c.isalnum() or c == "_" or c == ":":
            cur += c
            j += 1
        elif c == "{":
            depth, k = 1, j + 1
            while k < len(text) and depth:
                depth += {"{": 1, "}": -1}.get(text[k], 0)
                k += 1
            inner, parts, depth, start = text[j + 1 : k - 1], [], 0, 0
            for n, ch in enumerate(inner):
                if ch == "{":
                    depth += 1
                elif ch == "}":
                    depth -= 1
                elif ch == "," and depth == 0:
                    parts.append(inner[start:n])
                    start = n + 1
            parts.append(inner[start:])
            for p in parts:
                p = p.strip()
                if p:
                    out.extend(cur + q for q in expand(p, 0))
            return out
        else:
            break
    return out + ([cur] if cur else [])


def strip_comments(text):
    # A unit-test module's `super::` is the file itself, not its parent: leave those out.
    text = re.split(r"#\[cfg\(test\)\]\s*mod tests\b", text)[0]
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    return re.sub(r"//[^\n]*", "", text)


circles = 0
for src in sys.argv[1:]:
    crate = os.path.basename(os.path.dirname(os.path.abspath(src)))
    files = {}
    for root, _, names in os.walk(src):
        for n in sorted(names):
            if n.endswith(".rs"):
                f = os.path.join(root, n)
                files[module_path(src, f)] = f
    edges = {}
    for mod, f in files.items():
        with open(f, encoding="utf-8", errors="replace") as fh:
            text = strip_comments(fh.read())
        targets = set()
        for m in REF.finditer(text):
            # `super::` from a.rs or from a/mod.rs both name a's parent.
            base = () if m.group(1) == "crate" else mod[:-1]
            for p in expand(text, m.end()):
                parts = tuple(x for x in p.split("::") if x)
                # The longest prefix that names a file of this crate.
                for k in range(len(parts), 0, -1):
                    t = base + parts[:k]
                    if t in files and t != mod:
                        targets.add(t)
                        break
        edges[mod] = targets
    for a in sorted(edges):
        for b in sorted(edges[a]):
            if a < b and a in edges.get(b, ()):
                circles += 1
                fa = os.path.relpath(files[a], src)
                fb = os.path.relpath(files[b], src)
                print(f"{crate}: {fa} <-> {fb}")
print(f"{circles} import circle(s)")
PY
exit 0
