"""Fail when modules of the package import each other in a cycle, or when two top-level parts
of the package depend on each other, directly or around a loop of parts.

Imports inside functions count (a lazy import still ties two modules together), and so do the
parent packages Python runs first: ``from a.b.c import x`` runs ``a/b/__init__.py`` before
``a/b/c.py``, so it depends on both. Parts are the subpackages of ``storyeval`` and its
root modules; a pair of parts that import each other (in any modules) is a mutual dependency,
reported with one import each way. A private name (``_name``) imported from another part is
reported too: what one part needs of another is public."""

from __future__ import annotations

import ast
import sys
from collections import defaultdict
from pathlib import Path

SOURCE = Path(__file__).resolve().parent.parent / "src"

#: The layers of the package, lowest first (docs/architecture.md draws them): a part imports
#: only from its own layer or those below, so that lower layers can be read, tested and
#: reused without the upper ones.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("foundations", ("base",)),
    ("records and models", ("corpus", "models", "engine", "entities", "text", "describe", "truncation")),
    ("producing and measuring", ("generate", "perturb", "rules", "metrics", "importers")),
    ("meta-evaluation", ("meta",)),
    ("people and judges", ("human", "collab", "judge")),
    ("trained models", ("learn", "tuning")),
    ("surfaces", ("functional", "server", "view", "analyses", "report", "cli", "__main__")),
)  # fmt: skip


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
        names += [parent for name in names for parent in parents(name)]
        found.update(
            n for n in names if n in known and n != module and not module.startswith(n + ".")
        )
    return found


def parents(name: str) -> list[str]:
    """The packages Python imports before ``name`` (``a.b`` and ``a`` for ``a.b.c``), below the
    top package itself (whose ``__init__`` every module shares)."""
    parts = name.split(".")
    return [".".join(parts[:k]) for k in range(2, len(parts))]


def part(module: str) -> str:
    """The top-level part of the package a module belongs to (``storyeval.metrics`` for
    ``storyeval.metrics.pipeline``; a root module is its own part)."""
    parts = module.split(".")
    return ".".join(parts[:2]) if len(parts) > 1 else module


def private_imports(known: dict[str, Path]) -> list[str]:
    """``module -> other.module._name`` for every private name imported across parts."""
    found = []
    for module, path in known.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.ImportFrom) or not node.module:
                continue
            if not node.module.startswith("storyeval") or part(node.module) == part(module):
                continue
            for alias in node.names:
                name = alias.name
                if name.startswith("_") and not (name.startswith("__") and name.endswith("__")):
                    found.append(f"{module} -> {node.module}.{name}")
    return found


def mutual_parts(graph: dict[str, set[str]]) -> list[tuple[str, str, str, str]]:
    """Pairs of parts that depend on each other, with one import edge each way."""
    edges: dict[tuple[str, str], tuple[str, str]] = {}
    for module, targets in graph.items():
        for target in targets:
            a, b = part(module), part(target)
            if a != b and a != "storyeval" and b != "storyeval":
                edges.setdefault((a, b), (module, target))
    found = []
    for (a, b), (m1, t1) in sorted(edges.items()):
        if a < b and (b, a) in edges:
            m2, t2 = edges[(b, a)]
            found.append((a, b, f"{m1} -> {t1}", f"{m2} -> {t2}"))
    return found


def part_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """Which parts import which, from the module graph (the top package aside)."""
    parts: dict[str, set[str]] = defaultdict(set)
    for module, targets in graph.items():
        for target in targets:
            a, b = part(module), part(target)
            if a != b and "storyeval" not in (a, b):
                parts[a].add(b)
                parts.setdefault(b, set())
    return parts


def part_path(graph: dict[str, set[str]], start: str, goal: str) -> list[str]:
    """One chain of module imports from part ``start`` to part ``goal`` (for the report)."""
    edges = {
        (part(m), part(t)): f"{m} -> {t}"
        for m, ts in graph.items()
        for t in ts
        if part(m) != part(t)
    }
    return [edges[(start, goal)]] if (start, goal) in edges else []


def layer_breaches(parts: dict[str, set[str]]) -> list[str]:
    """Imports from a higher layer, and parts no layer names."""
    layer_of = {f"storyeval.{name}": i for i, (_, names) in enumerate(LAYERS) for name in names}
    found = [
        f"{p} is in no layer (add it to LAYERS and docs/architecture.md)"
        for p in sorted(parts)
        if p not in layer_of
    ]
    for source, targets in sorted(parts.items()):
        for target in sorted(targets):
            if source in layer_of and target in layer_of and layer_of[target] > layer_of[source]:
                found.append(
                    f"{source} ({LAYERS[layer_of[source]][0]}) imports {target} "
                    f"({LAYERS[layer_of[target]][0]}), a higher layer"
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
    loops = cycles(part_graph(graph))
    for component in loops:
        chain = [e for a in component for b in component for e in part_path(graph, a, b)]
        print(f"parts in a loop: {', '.join(component)} ({'; '.join(chain)})")
    if not loops:
        print("no loop among the parts of the package")
    breaches = layer_breaches(part_graph(graph))
    for line in breaches:
        print(f"layer breach: {line}")
    if not breaches:
        print(f"every part imports only from its layer or below ({len(LAYERS)} layers)")
    mutual = mutual_parts(graph)
    for a, b, one, other in mutual:
        print(f"mutual dependency {a} <-> {b}: {one}; {other}")
    if not mutual:
        print("no two parts of the package depend on each other")
    private = private_imports(known)
    for line in private:
        print(f"private name imported from another part: {line}")
    return 1 if found or loops or breaches or mutual or private else 0


if __name__ == "__main__":
    sys.exit(main())
