"""Fail when a function of the package is longer than 80 lines of code (docstrings, comments
and blank lines left out): a function that long is hard to read and to test.

Run: python scripts/check_function_length.py [--limit 80] [--report N]
"""

from __future__ import annotations

import argparse
import ast
import io
import sys
import tokenize
from pathlib import Path

SOURCE = Path(__file__).resolve().parent.parent / "src" / "storyeval"


def code_lines(source: str) -> set[int]:
    """The line numbers holding code: not blank, not only a comment, not in a docstring."""
    lines: set[int] = set()
    docstrings: set[int] = set()
    tree = ast.parse(source)
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr):
            value = body[0].value
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                docstrings.update(range(body[0].lineno, (body[0].end_lineno or 0) + 1))
    skip = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT}
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type in skip or token.type == tokenize.ENDMARKER:
            continue
        for line in range(token.start[0], token.end[0] + 1):
            if line not in docstrings:
                lines.add(line)
    return lines


def long_functions(root: Path, limit: int) -> list[tuple[int, str]]:
    """``(lines of code, "path:line name")`` of every function over ``limit``."""
    found = []
    for path in sorted(root.rglob("*.py")):
        source = path.read_text(encoding="utf-8")
        code = code_lines(source)
        for node in ast.walk(ast.parse(source)):
            if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            span = range(node.lineno, (node.end_lineno or node.lineno) + 1)
            count = sum(1 for line in span if line in code)
            if count > limit:
                where = f"{path.relative_to(root.parent.parent)}:{node.lineno} {node.name}"
                found.append((count, where))
    return sorted(found, reverse=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--limit", type=int, default=80)
    parser.add_argument("--report", type=int, default=0, help="also list the N longest")
    args = parser.parse_args()
    found = long_functions(SOURCE, args.limit)
    for count, where in found:
        print(f"{count:4d} lines of code: {where}")
    if args.report:
        for count, where in long_functions(SOURCE, 0)[: args.report]:
            print(f"  {count:4d} {where}")
    if found:
        print(f"{len(found)} function(s) over {args.limit} lines of code")
        return 1
    print(f"no function over {args.limit} lines of code")
    return 0


if __name__ == "__main__":
    sys.exit(main())
