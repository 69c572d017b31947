"""Rendering of the meta-evaluation report: sections of paragraphs, figures and tables, as
Markdown (through :mod:`storyeval.base.markdown`, the one Markdown writer) and as an HTML page."""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from storyeval import __version__
from storyeval.base.markdown import MISSING, Document, fmt


@dataclass
class Table:
    """A table of the report (cells already formatted for people), its caption and the
    cells that link somewhere (``(row, column)`` positions to relative URLs)."""

    frame: pd.DataFrame
    caption: str = ""
    links: dict[tuple[int, int], str] = field(default_factory=dict)

    def cells(self) -> list[list[str]]:
        """The cells as text (Markdown links where a cell links)."""
        rows = [[str(v) for v in row] for row in self.frame.itertuples(index=False)]
        for (i, j), href in self.links.items():
            rows[i][j] = f"[{rows[i][j]}]({href})"
        return rows


@dataclass
class Figure:
    """A figure: its path relative to the report and its alternative text."""

    path: str
    alt: str


@dataclass
class Section:
    """One section: paragraphs, then figures, then tables."""

    title: str
    paragraphs: list[str] = field(default_factory=list)
    tables: list[Table] = field(default_factory=list)
    figures: list[Figure] = field(default_factory=list)


def fmt_p(value: Any) -> str:
    """A p-value with three significant digits."""
    if value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value)):
        return fmt(None)
    return f"{value:.3g}"


def estimate_cell(
    record: Mapping[str, Any], p_column: str = "p_adjusted", *, stars: bool = True
) -> str:
    """``estimate [low, high]`` with stars for adjusted p < .05 (*) and < .01 (**).

    >>> estimate_cell({"estimate": 0.41, "ci_low": 0.2, "ci_high": 0.6, "p_adjusted": 0.003})
    '0.410 [0.20, 0.60]**'
    """
    est = record.get("estimate")
    if est is None or (isinstance(est, float) and math.isnan(est)):
        return MISSING
    text = f"{est:.3f}"
    low, high = record.get("ci_low"), record.get("ci_high")
    if low is not None and high is not None and not (math.isnan(low) or math.isnan(high)):
        text += f" [{low:.2f}, {high:.2f}]"
    p = record.get(p_column, record.get("p_value"))
    if stars and isinstance(p, float) and not math.isnan(p):
        text += "**" if p < 0.01 else "*" if p < 0.05 else ""
    return text


def slug(text: str) -> str:
    """A file- and anchor-safe name."""
    return re.sub(r"[^A-Za-z0-9]+", "-", text).strip("-").lower() or "x"


def sha256(path: Path) -> str:
    """The first 16 hex digits of a file's SHA-256."""
    return hashlib.sha256(path.read_bytes()).hexdigest()[:16]


# --------------------------------------------------------------------------- rendering


def render_markdown(title: str, sections: Sequence[Section]) -> str:
    """The report as Markdown (the same content as :func:`render_html`)."""
    doc = Document()
    doc.heading(1, title)
    for section in sections:
        doc.heading(2, section.title)
        for paragraph in section.paragraphs:
            doc.paragraph(paragraph)
        for figure in section.figures:
            doc.paragraph(f"![{figure.alt}]({figure.path})")
        for table in section.tables:
            if table.caption:
                doc.paragraph(f"*{table.caption}*")
            doc.frame(pd.DataFrame(table.cells(), columns=table.frame.columns))
    return doc.render()


_CSS = """
body { font-family: system-ui, -apple-system, Segoe UI, Roboto, sans-serif; margin: 2rem auto;
       max-width: 1200px; padding: 0 1rem; color: #222; line-height: 1.45; }
h1 { font-size: 1.6rem; } h2 { font-size: 1.25rem; border-bottom: 1px solid #ccc;
       padding-bottom: .2rem; margin-top: 2rem; }
table { border-collapse: collapse; margin: .6rem 0 1.2rem; font-size: .85rem; }
caption { caption-side: top; text-align: left; font-style: italic; padding-bottom: .3rem; }
th, td { border: 1px solid #ccc; padding: .25rem .5rem; text-align: right; vertical-align: top; }
th { background: #f3f3f3; } td:first-child, th:first-child { text-align: left; }
td.sig { font-family: ui-monospace, monospace; font-size: .75rem; text-align: left;
         word-break: break-all; }
img { max-width: 100%; border: 1px solid #eee; margin: .4rem 0; }
nav a { margin-right: .8rem; } .note { color: #555; }
"""


def render_html(title: str, sections: Sequence[Section]) -> str:
    """The report as one self-contained HTML page (figures linked beside it)."""
    from jinja2 import Environment

    env = Environment(autoescape=True)
    template = env.from_string(
        """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{{ title }}</title><style>{{ css }}</style></head>
<body>
<h1>{{ title }}</h1>
<nav>{% for s in sections %}<a href="#{{ s.anchor }}">{{ s.title }}</a>{% endfor %}</nav>
{% for s in sections %}
<section id="{{ s.anchor }}"><h2>{{ s.title }}</h2>
{% for p in s.paragraphs %}<p>{{ p }}</p>
{% endfor %}{% for f in s.figures %}<figure><img src="{{ f.path }}" alt="{{ f.alt }}"></figure>
{% endfor %}{% for t in s.tables %}<table>{% if t.caption %}<caption>{{ t.caption }}</caption>{% endif %}
<thead><tr>{% for c in t.columns %}<th>{{ c }}</th>{% endfor %}</tr></thead>
<tbody>{% for row in t.rows %}{% set r = loop.index0 %}<tr>{% for v in row %}<td{% if t.sig[loop.index0] %} class="sig"{% endif %}>{% if (r, loop.index0) in t.links %}<a href="{{ t.links[(r, loop.index0)] }}">{{ v }}</a>{% else %}{{ v }}{% endif %}</td>{% endfor %}</tr>
{% endfor %}</tbody></table>
{% endfor %}</section>
{% endfor %}
<p class="note">Generated by storyeval {{ version }}.</p>
</body></html>
"""
    )
    view = []
    for section in sections:
        tables = []
        for table in section.tables:
            columns = [str(c) for c in table.frame.columns]
            tables.append(
                {
                    "caption": table.caption,
                    "columns": columns,
                    "rows": [[str(v) for v in row] for row in table.frame.itertuples(index=False)],
                    "sig": ["signature" in c.lower() for c in columns],
                    "links": table.links,
                }
            )
        view.append(
            {
                "title": section.title,
                "anchor": slug(section.title),
                "paragraphs": section.paragraphs,
                "figures": section.figures,
                "tables": tables,
            }
        )
    return template.render(title=title, sections=view, css=_CSS, version=__version__)


_CASE = re.compile(r"\(([^()]*)\)")


def group_warnings(texts: Sequence[str], *, shown: int = 6) -> list[str]:
    """One line per kind of warning: messages that differ only in their first parenthesised
    case (``(metric ~ criterion, level, method)``) are merged into one line that counts the
    cases and, field by field, lists the values that vary (``a|b|c``), in order of appearance.

    >>> group_warnings(["x is undefined (a ~ q, s): 2 pairs", "x is undefined (b ~ q, s): 2 pairs", "y"])
    ['x is undefined (2 cases: a|b ~ q, s): 2 pairs', 'y']
    """
    groups: dict[str, list[str]] = {}
    for text in texts:
        match = _CASE.search(text)
        key = _CASE.sub("(\x00)", text, count=1) if match else text
        groups.setdefault(key, []).append(match.group(1) if match else "")
    lines = []
    for key, cases in groups.items():
        summary = (
            cases[0] if len(cases) == 1 else f"{len(cases)} cases: {_merge_cases(cases, shown)}"
        )
        lines.append(key.replace("\x00", summary))
    return lines


_FIELD_SEPARATOR = re.compile(r"(\s*(?:~|,)\s*)")


def _merge_cases(cases: Sequence[str], shown: int) -> str:
    """``a ~ q, s`` and ``b ~ q, s`` -> ``a|b ~ q, s``; cases of different shapes are listed."""
    split = [_FIELD_SEPARATOR.split(case) for case in cases]
    if len({len(parts) for parts in split}) != 1:
        listed = "; ".join(cases[:shown])
        return listed + ("; ..." if len(cases) > shown else "")
    merged = []
    for position, first in enumerate(split[0]):
        if position % 2:  # a separator
            merged.append(first)
            continue
        values = list(dict.fromkeys(parts[position] for parts in split))
        text = "|".join(values[:shown])
        if len(values) > shown:
            text += f"|... ({len(values)})"
        merged.append(text)
    return "".join(merged)


def link_view_export(sections: Sequence[Section], view: Path, report: Path) -> int:
    """Link the report's rows to a ``storyeval view --export`` site: each system (a table
    whose first column is ``system``) to its stories, each metric and criterion cell of the
    correlation tables to the stories where they disagree most. Only pages the export holds
    are linked; returns the number of links."""
    import os

    from storyeval.view.export import disagreement_url, page_file, system_url

    base = Path(os.path.relpath(view, report))
    count = 0
    for section in sections:
        for table in section.tables:
            columns = [str(c) for c in table.frame.columns]
            if not columns or columns[0] not in ("system", "metric"):
                continue
            for i, first in enumerate(table.frame.iloc[:, 0].astype(str)):
                targets = (
                    [(0, system_url(first))]
                    if columns[0] == "system"
                    else [(j, disagreement_url(first, name)) for j, name in enumerate(columns) if j]
                )
                for j, url in targets:
                    name = page_file(url)
                    if (view / name).exists():
                        table.links[(i, j)] = (base / name).as_posix()
                        count += 1
    return count
