"""Count the public definitions of the package without a docstring (``--list`` names them).

Public: a module-level function or class, or a method of a public class, whose name does not
start with an underscore, in a module whose path has no private part."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent / "src" / "storyeval"


KINDS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def documented_methods(paths: list[Path]) -> dict[str, tuple[set[str], list[str]]]:
    """Class name -> (its documented methods, its base-class names), over every module."""
    classes: dict[str, tuple[set[str], list[str]]] = {}
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef):
                methods = {
                    c.name for c in node.body if isinstance(c, KINDS) and ast.get_docstring(c)
                }
                bases = [
                    b.id if isinstance(b, ast.Name) else getattr(b, "attr", "") for b in node.bases
                ]
                classes[node.name] = (methods, bases)
    return classes


def inherited(name: str, bases: list[str], classes: dict[str, tuple[set[str], list[str]]]) -> bool:
    """A base class documents the method (an override inherits its documentation)."""
    seen: set[str] = set()
    todo = list(bases)
    while todo:
        base = todo.pop()
        if base in seen or base not in classes:
            continue
        seen.add(base)
        methods, more = classes[base]
        if name in methods:
            return True
        todo += more
    return False


def public_definitions(
    path: Path, classes: dict[str, tuple[set[str], list[str]]]
) -> list[tuple[str, int, bool]]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = []
    for node in tree.body:
        if not isinstance(node, KINDS) or node.name.startswith("_"):
            continue
        found.append((node.name, node.lineno, ast.get_docstring(node) is not None))
        if not isinstance(node, ast.ClassDef):
            continue
        bases = classes.get(node.name, (set(), []))[1]
        for child in node.body:
            if isinstance(child, KINDS) and not child.name.startswith("_"):
                documented = ast.get_docstring(child) is not None or inherited(
                    child.name, bases, classes
                )
                found.append((f"{node.name}.{child.name}", child.lineno, documented))
    return found


def main() -> int:
    missing = []
    total = 0
    paths = [
        path
        for path in sorted(ROOT.rglob("*.py"))
        if not any(
            part.startswith("_") and part != "__init__.py" for part in path.relative_to(ROOT).parts
        )
    ]
    classes = documented_methods(paths)
    for path in paths:
        for name, line, documented in public_definitions(path, classes):
            total += 1
            if not documented:
                missing.append(f"{path.relative_to(ROOT.parent)}:{line}: {name}")
    if "--list" in sys.argv:
        print("\n".join(missing))
    print(f"{total - len(missing)} of {total} public definitions have a docstring")
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
