#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""include_graph: the include graph of ckptfs's sources by layer, and its rules checked.

usage: scripts/include_graph.py [--root DIR] [--dot]

Reads every .hpp and .cpp under include/ and src/ of the repository (or of --root), follows their
#include lines to files of the same tree (<ckptfs/...> and "relative" ones), and checks:

  1. layers: a file includes only files of its own layer or of the layers it may use
       base     (errors, text, JSON)        -
       source   (bytes)                      base
       model    (storages, tensors, entries) base
       format   (readers: sources -> model;  base, source, model
                 writers: model -> bytes)
       view     (the tree over a model)      base, source, model, format (its writers)
       pack     (a model written back as     base, source, model, format, view (the bytes
                 one file: ckptfs pack)       as served, model.safetensors's layout)
       fuse     (the FUSE adapter)           base, source, model, view
       cli      (the command line)           every layer
     so that sources and formats lead to the model, the model to the views, and the views to one
     FUSE adapter (which never writes: no pack) and to pack; a directory of include/ckptfs/ or
     src/core/ that is no layer is reported;
  2. no cycles among modules (a module: the .hpp and .cpp of one name in one directory, so
     that a .cpp including a header whose module includes the .cpp's own header is a cycle);
  3. libfuse (<fuse*.h>, <linux/fuse.h>) is included by exactly one file, a header of the fuse
     layer, which no other header includes.

Prints the layers' edges (with --dot, a Graphviz graph of the files instead) and every broken
rule; exits 1 when a rule is broken, 0 otherwise. Standard library only.
"""

import argparse
import re
import sys
from pathlib import Path

LAYERS = ["base", "source", "model", "format", "view", "pack", "fuse", "cli"]
ALLOWED = {
    "base": set(),
    "source": {"base"},
    "model": {"base"},
    "format": {"base", "source", "model"},
    "view": {"base", "source", "model", "format"},
    "pack": {"base", "source", "model", "format", "view"},
    "fuse": {"base", "source", "model", "view"},
    "cli": {"base", "source", "model", "format", "view", "pack", "fuse"},
}
INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]', re.M)
LIBFUSE = re.compile(r"^(fuse[^/]*\.h|fuse3/.*|linux/fuse\.h)$")


def layer_of(rel):
    """The layer of a path relative to the root, or None for files outside the layers."""
    parts = rel.parts
    if parts[:2] == ("include", "ckptfs") and len(parts) > 3:
        return parts[2]
    if parts[:2] == ("src", "core") and len(parts) > 3:
        return parts[2]
    if parts[:1] == ("src",) and len(parts) > 2 and parts[1] in ("fuse", "cli"):
        return parts[1]
    return None


def read_graph(root):
    """{file: [included files of the tree]}, {file: [system headers]} for every source file."""
    files = sorted(p for d in ("include", "src") for p in (root / d).rglob("*")
                   if p.suffix in (".hpp", ".cpp", ".h") and p.is_file())
    edges, system = {}, {}
    for f in files:
        rel = f.relative_to(root)
        edges[rel], system[rel] = [], []
        for kind, name in INCLUDE.findall(f.read_text(encoding="utf-8", errors="replace")):
            if kind == '"':
                target = (f.parent / name).resolve()
                try:
                    edges[rel].append(target.relative_to(root.resolve()))
                except ValueError:
                    system[rel].append(name)
            elif name.startswith("ckptfs/"):
                edges[rel].append(Path("include") / name)
            else:
                system[rel].append(name)
    return edges, system


def module_of(rel):
    """include/ckptfs/view/tree.hpp and src/core/view/tree.cpp are one module, view/tree."""
    layer = layer_of(rel)
    return f"{layer}/{rel.stem}" if layer else str(rel.with_suffix(""))


def module_edges(edges):
    out = {}
    for f, targets in edges.items():
        m = module_of(f)
        out.setdefault(m, set())
        for t in targets:
            if module_of(t) != m:
                out[m].add(module_of(t))
    return {m: sorted(ts) for m, ts in out.items()}


def find_cycle(edges):
    """One cycle of the graph {node: [nodes]} as a list, or None."""
    state = {}  # file -> 1 while on the stack, 2 once done
    for start in edges:
        if state.get(start):
            continue
        stack = [(start, iter(edges.get(start, [])))]
        path = [start]
        state[start] = 1
        while stack:
            node, it = stack[-1]
            nxt = next(it, None)
            if nxt is None:
                state[node] = 2
                stack.pop()
                path.pop()
            elif state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            elif not state.get(nxt):
                state[nxt] = 1
                stack.append((nxt, iter(edges.get(nxt, []))))
                path.append(nxt)
    return None


def check(root):
    """(problems, {(from layer, to layer): count}, edges)."""
    edges, system = read_graph(root)
    problems = []
    layer_edges = {}
    for f, targets in edges.items():
        fl = layer_of(f)
        if fl is None or fl not in ALLOWED:
            problems.append(f"{f}: in no layer (expected include/ckptfs/LAYER/, src/core/LAYER/, "
                            f"src/fuse/ or src/cli/)")
            continue
        for t in targets:
            if t not in edges:
                problems.append(f"{f}: includes {t}, which does not exist")
                continue
            tl = layer_of(t)
            if tl is None or tl not in ALLOWED:
                continue  # reported as the file itself
            layer_edges[fl, tl] = layer_edges.get((fl, tl), 0) + 1
            if tl != fl and tl not in ALLOWED[fl]:
                problems.append(f"{f} ({fl}) includes {t} ({tl}): {fl} may use only "
                                f"{', '.join(sorted(ALLOWED[fl])) or 'itself'}")
    cycle = find_cycle(edges) or find_cycle(module_edges(edges))
    if cycle:
        problems.append("include cycle: " + " -> ".join(str(c) for c in cycle))
    libfuse = sorted(f for f, names in system.items() if any(LIBFUSE.match(n) for n in names))
    if len(libfuse) != 1:
        problems.append(f"libfuse is included by {len(libfuse)} files, not exactly one: "
                        f"{', '.join(map(str, libfuse)) or 'none'}")
    else:
        only = libfuse[0]
        if layer_of(only) != "fuse" or only.suffix != ".hpp":
            problems.append(f"libfuse is included by {only}, not by a header of the fuse layer")
        for f, targets in edges.items():
            if only in targets and f.suffix != ".cpp":
                problems.append(f"{f} includes {only}: only .cpp files may (libfuse stays out "
                                f"of every other header)")
    return problems, layer_edges, edges


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--root", default=str(Path(__file__).resolve().parent.parent),
                    help="the repository (default: this script's)")
    ap.add_argument("--dot", action="store_true", help="print the file graph for Graphviz")
    args = ap.parse_args()
    root = Path(args.root)
    problems, layer_edges, edges = check(root)
    if args.dot:
        print("digraph includes {")
        for f, targets in sorted(edges.items()):
            for t in targets:
                print(f'  "{f}" -> "{t}";')
        print("}")
    else:
        order = {name: i for i, name in enumerate(LAYERS)}
        for (a, b), n in sorted(layer_edges.items(), key=lambda e: (order[e[0][0]],
                                                                    order[e[0][1]])):
            print(f"{a} -> {b}: {n} include{'s' * (n != 1)}")
    for p in problems:
        print(f"include_graph: {p}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
