"""Fail when modules of the package import each other in a cycle (imports inside functions
count too: a lazy import still ties the two modules together)."""

from __future__ import annotations

import ast
import sys
from collections import defaultdict
from pathlib import Path

SOURCE = Path(__file__).resolve().parent.parent / "src"


def module_names(root: Path) -> dict[str, Path]:
    files = (root / "storyeval").rglob("*.py")
    return {
        ".".join(p.relative_to(root).with_suffix("").parts).removesuffix(".__init__"): p
        for p in files
    }


def imports(module: str, path: Path, known: dict[str, Path]) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        names: list[str] = []
        if isinstance(node, ast.ImportFrom) and node.module:
            parts = module.split(".")
            base = (
                node.module if node.level == 0 else ".".join([*parts[: -node.level], node.module])
            )
            names = [base, *(f"{base}.{alias.name}" for alias in node.names)]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        found.update(
            n for n in names if n in known and n != module and not module.startswith(n + ".")
        )
    return found


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for other in graph[node]:
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in on_stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    sys.setrecursionlimit(10_000)
    for node in list(graph):
        if node not in index:
            visit(node)
    return found


def main() -> int:
    known = module_names(SOURCE)
    graph: dict[str, set[str]] = defaultdict(set)
    for module, path in known.items():
        graph[module] |= imports(module, path, known)
    found = cycles(graph)
    for component in found:
        print(f"import cycle of {len(component)} modules: {', '.join(component)}")
    if not found:
        print(f"no import cycle among {len(known)} modules")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
