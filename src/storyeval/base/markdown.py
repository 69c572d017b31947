"""The one Markdown writer of storyeval's reports (the meta-evaluation report, the CYOA report,
design statements): sections, paragraphs, lists, quotes and tables, and one rendering of
numbers and missing values.

>>> doc = Document()
>>> doc.heading(1, "Results")
>>> doc.table(["metric", "tau"], [["bleu", 0.1234], ["union", float("nan")]])
>>> print(doc.render())
# Results
<BLANKLINE>
| metric | tau |
|---|---|
| bleu | 0.123 |
| union | n/a |
<BLANKLINE>
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

MISSING = "n/a"
"""How every human-readable output of storyeval shows a value that is undefined or absent (files
for machines use an empty CSV cell or JSON ``null``)."""


def is_missing(value: Any) -> bool:
    """``None``, NaN, pandas' NA and NaT."""
    if value is None:
        return True
    if isinstance(value, float):
        return math.isnan(value)
    return str(value) in ("<NA>", "NaT", "nan")


def fmt(value: Any, digits: int = 3) -> str:
    """A value for people: numbers with ``digits`` decimals (integers as they are), missing
    values as :data:`MISSING`.

    >>> fmt(0.12345), fmt(3), fmt(None), fmt(float("nan")), fmt("text")
    ('0.123', '3', 'n/a', 'n/a', 'text')
    """
    if is_missing(value):
        return MISSING
    if isinstance(value, bool):
        return "yes" if value else "no"
    if hasattr(value, "item") and not isinstance(value, str):
        value = value.item()
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def cell(value: Any, digits: int = 3) -> str:
    """A value for a Markdown table cell (pipes escaped, one line)."""
    return fmt(value, digits).replace("|", "\\|").replace("\n", " ")


def quote(text: str) -> str:
    """Text as a Markdown block quote."""
    return "\n".join("> " + line if line else ">" for line in text.strip().splitlines())


class Document:
    """Markdown built block by block; blocks are separated by one blank line."""

    def __init__(self) -> None:
        self._blocks: list[str] = []

    def heading(self, level: int, text: str) -> None:
        """A heading of ``level`` (1 = ``#``)."""
        self._blocks.append(f"{'#' * level} {text}")

    def paragraph(self, text: str) -> None:
        """A paragraph (or any preformatted block)."""
        self._blocks.append(text)

    def lines(self, lines: Iterable[str]) -> None:
        """Lines kept together as one block (a list, a table, a paragraph of several lines)."""
        block = "\n".join(lines)
        if block:
            self._blocks.append(block)

    def bullets(self, items: Iterable[str]) -> None:
        """A bulleted list."""
        self.lines(f"- {item}" for item in items)

    def quote(self, text: str) -> None:
        """A block quote (``> (none)`` for an empty text)."""
        self._blocks.append(quote(text) if text.strip() else "> (none)")

    def table(self, header: Sequence[str], rows: Iterable[Sequence[Any]], digits: int = 3) -> None:
        """A table; cells through :func:`cell` (numbers with ``digits`` decimals, missing as n/a)."""
        body = [
            "| " + " | ".join(header) + " |",
            "|" + "---|" * len(header),
            *("| " + " | ".join(cell(v, digits) for v in row) + " |" for row in rows),
        ]
        self.lines(body)

    def frame(self, frame: Any, columns: Sequence[str] | None = None, digits: int = 3) -> None:
        """A DataFrame as a table (``columns`` to choose and order them)."""
        shown = list(columns) if columns is not None else [str(c) for c in frame.columns]
        self.table(shown, ([row[c] for c in shown] for row in frame.to_dict("records")), digits)

    def extend(self, other: Document) -> None:
        """Append the blocks of another document."""
        self._blocks.extend(other._blocks)

    def render(self) -> str:
        """The document as Markdown text."""
        return "\n\n".join(self._blocks) + "\n"
