#!/usr/bin/env python3
"""Draws the modules (top-level folders) and their includes (arrows), read from
the sources themselves, and checks that the graph has no circle and that every
arrow points down the floors DESIGN.md §2 gives.

    scripts/module-graph.py            # the arrows, a line per module
    scripts/module-graph.py --dot      # Graphviz
    scripts/module-graph.py --check    # exit 1 on a circle or an arrow up

An arrow A -> B means some file under A/ has `#include "B/..."`. The floors,
from the bottom up, are the layering cmake/modules.cmake enforces at compile
time; this draws what the sources really do, for a reader.
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# Bottom floor first. A module may include only modules on lower floors.
FLOORS = [
    ["common"],
    ["kernels", "prefix_index", "eviction"],
    ["protocol", "tiers"],
    ["client", "engine"],
    ["daemon", "replay", "python"],  # python/: the binding over client/ (python/src)
    ["cli"],
]
FLOOR = {m: i for i, floor in enumerate(FLOORS) for m in floor}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([a-z_]+)/', re.M)


def edges() -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {m: {} for m in FLOOR}
    for module in FLOOR:
        for path in sorted((ROOT / module).rglob("*")):
            if path.suffix not in {".h", ".cc", ".cu", ".cuh"}:
                continue
            for dep in INCLUDE.findall(path.read_text(errors="replace")):
                if dep in FLOOR and dep != module:
                    out[module][dep] = out[module].get(dep, 0) + 1
    return out


def circle(graph: dict[str, dict[str, int]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(m: str) -> list[str] | None:
        state[m] = 1
        stack.append(m)
        for d in graph[m]:
            if state.get(d) == 1:
                return stack[stack.index(d):] + [d]
            if d not in state and (found := visit(d)):
                return found
        stack.pop()
        state[m] = 2
        return None

    for m in graph:
        if m not in state and (found := visit(m)):
            return found
    return None


def main() -> int:
    graph = edges()
    if "--dot" in sys.argv:
        print("digraph modules {\n  rankdir=BT;")
        for floor in FLOORS:
            print("  { rank=same; " + " ".join(floor) + " }")
        for m, deps in graph.items():
            for d, n in sorted(deps.items()):
                print(f'  {m} -> {d} [label="{n}"];')
        print("}")
    else:
        for floor in reversed(FLOORS):
            for m in floor:
                deps = ", ".join(f"{d} ({n})" for d, n in sorted(graph[m].items(),
                                                                 key=lambda e: FLOOR[e[0]]))
                print(f"{m:13} -> {deps or '(nothing)'}")
    problems = []
    if (c := circle(graph)):
        problems.append("circle: " + " -> ".join(c))
    for m, deps in graph.items():
        for d in deps:
            if FLOOR[d] >= FLOOR[m]:
                problems.append(f"arrow up or sideways: {m} -> {d}")
    for p in problems:
        print(p, file=sys.stderr)
    if "--check" in sys.argv and not problems:
        print(f"{len(FLOOR)} modules, {sum(len(d) for d in graph.values())} arrows: "
              "no circle, every arrow points down")
    return 1 if problems and "--check" in sys.argv else 0


if __name__ == "__main__":
    sys.exit(main())
