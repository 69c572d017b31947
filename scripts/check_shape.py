"""Check the shape rules `make check` enforces beyond lint and types.

1. **One list of metrics.** The metric registry (``storyeval.metrics.registry.METRICS``) is
   the only list of metrics in the package: no other module builds a registry of metrics, and
   no literal list, tuple, set or dict names six or more registered metrics (derive such lists
   from the registry instead, e.g. by family); a module's ``__all__`` is not such a list.
2. **Families declared once.** No run of 12 or more lines (blank and comment lines aside,
   whitespace ignored) stands twice in the metric modules (``storyeval/metrics`` and
   ``storyeval/learn/metrics.py``): a metric family is one function registered under several
   names.
3. **Modules stay readable.** No module of the package is over 1,000 lines.

Exits 1 and names each breach.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "src" / "storyeval"
sys.path.insert(0, str(ROOT / "src"))

MAX_MODULE_LINES = 1000
MIN_RUN = 12
MAX_LISTED_METRICS = 5
#: literal lists allowed to name metrics: none today
ALLOWED_LISTS: set[tuple[str, int]] = set()


def _metric_modules() -> list[Path]:
    return [*sorted((PACKAGE / "metrics").glob("*.py")), PACKAGE / "learn" / "metrics.py"]


def one_list_of_metrics(names: set[str]) -> list[str]:
    """Literal collections naming many registered metrics, and metric registries outside the
    registry module."""
    problems = []
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(ROOT).as_posix()
        tree = ast.parse(path.read_text(encoding="utf-8"))
        exports = {  # a module's __all__ names its functions, whatever they compute
            id(node.value)
            for node in ast.walk(tree)
            if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "__all__"
        }
        for node in ast.walk(tree):
            if id(node) in exports:
                continue
            if isinstance(node, ast.List | ast.Tuple | ast.Set):
                elements = node.elts
            elif isinstance(node, ast.Dict):
                elements = [k for k in node.keys if k is not None]
            elif (
                isinstance(node, ast.Call)
                and getattr(node.func, "id", "") == "Registry"
                and node.args
                and isinstance(node.args[0], ast.Constant)
                and node.args[0].value == "metric"
                and not relative.endswith("metrics/registry.py")
            ):
                problems.append(f"{relative}:{node.lineno}: a second registry of metrics")
                continue
            else:
                continue
            listed = {e.value for e in elements if isinstance(e, ast.Constant)} & names
            if len(listed) > MAX_LISTED_METRICS and (relative, node.lineno) not in ALLOWED_LISTS:
                problems.append(
                    f"{relative}:{node.lineno}: a hand-kept list of {len(listed)} metrics "
                    "(derive it from the registry)"
                )
    return problems


def _code_lines(path: Path) -> list[tuple[int, str]]:
    lines = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        text = " ".join(line.split())
        if text and not text.startswith("#"):
            lines.append((number, text))
    return lines


def repeated_runs(paths: list[Path], minimum: int = MIN_RUN) -> list[str]:
    """Runs of ``minimum`` code lines that stand in two places (the first of each pair)."""
    seen: dict[tuple[str, ...], tuple[str, int]] = {}
    found: dict[tuple[str, str], tuple[int, int]] = {}
    for path in paths:
        lines = _code_lines(path)
        name = path.relative_to(ROOT).as_posix()
        for start in range(len(lines) - minimum + 1):
            window = tuple(text for _, text in lines[start : start + minimum])
            if sum(len(t) > 3 for t in window) < minimum // 2:
                continue  # brackets and short keywords only
            here = (name, lines[start][0])
            first = seen.setdefault(window, here)
            if first != here and (first[0], name) not in found:
                found[(first[0], name)] = (first[1], here[1])
    return [
        f"{a}:{line_a} and {b}:{line_b}: the same {minimum}+ lines (declare it once)"
        for (a, b), (line_a, line_b) in sorted(found.items())
    ]


def long_modules(limit: int = MAX_MODULE_LINES) -> list[str]:
    """Modules over ``limit`` lines."""
    problems = []
    for path in sorted(PACKAGE.rglob("*.py")):
        count = len(path.read_text(encoding="utf-8").splitlines())
        if count > limit:
            problems.append(
                f"{path.relative_to(ROOT).as_posix()}: {count} lines (split it; at most {limit})"
            )
    return problems


def main() -> int:
    from storyeval.metrics import available_metrics

    problems = one_list_of_metrics(set(available_metrics()))
    problems += repeated_runs(_metric_modules())
    problems += long_modules()
    for problem in problems:
        print(problem)
    if problems:
        print(f"{len(problems)} shape problem(s)")
        return 1
    print("shape: one metric list, no repeated runs in the metric modules, modules <= 1,000 lines")
    return 0


if __name__ == "__main__":
    sys.exit(main())
