"""Curves along long stories: a metric per chapter or window, from the first to the last.

A long story is cut into **segments**: its chapters when it has chapter headings (lines such
as ``Chapter 3``, ``CHAPTER III: The Sea`` or ``Part Two``; any pattern can be given), else
windows of about ``window_words`` words that end at a sentence end. Every segment is scored
as a story of its own by the registered metrics, with the previous segment as its prompt (so
``bertscore_prompt`` and ``perplexity`` read the segment in the context of the one before;
the first segment's prompt is the story's). Metrics that need a reference do not apply.

The result is a tidy table (one row per story, segment and metric) and a figure: per metric,
each system's mean value at each tenth of the story's length.

Examples
--------
>>> text = "Chapter 1\\nIt rained. The town slept.\\nChapter 2\\nThe sun came out."
>>> [(s.index, s.title, s.text) for s in segments(text)]
[(0, 'Chapter 1', 'It rained. The town slept.'), (1, 'Chapter 2', 'The sun came out.')]
>>> [s.text for s in segments("One two. Three four. Five six.", window_words=4)]
['One two. Three four.', 'Five six.']
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from storyeval.base.errors import StoryevalError

#: Chapter headings: a line that starts with "chapter" or "part" and a number or word.
CHAPTER_PATTERN = r"^\s*(chapter|part|book)\b[^\n]{0,60}$"
CURVE_COLUMNS = (
    "item_id",
    "system",
    "segment",
    "title",
    "start_word",
    "end_word",
    "position",
    "metric",
    "value",
)


@dataclass(frozen=True)
class Segment:
    """One chapter or window of a story: its index, heading (chapters), word span and text."""

    index: int
    title: str
    start_word: int
    end_word: int
    text: str


def _chapters(text: str, pattern: re.Pattern[str]) -> list[tuple[str, str]]:
    """``(heading, body)`` of each chapter, when the text has at least two headings."""
    heads = list(pattern.finditer(text))
    if len(heads) < 2:
        return []
    parts = []
    for k, head in enumerate(heads):
        end = heads[k + 1].start() if k + 1 < len(heads) else len(text)
        body = text[head.end() : end].strip()
        if body:
            parts.append((head.group(0).strip(), body))
    return parts


def _windows(text: str, window_words: int) -> list[str]:
    """Consecutive runs of whole sentences of about ``window_words`` words."""
    from storyeval.text import split_sentences

    windows: list[str] = []
    current: list[str] = []
    size = 0
    for sentence in split_sentences(text):
        words = len(sentence.split())
        if current and size + words > window_words:
            windows.append(" ".join(current))
            current, size = [], 0
        current.append(sentence)
        size += words
    if current:
        windows.append(" ".join(current))
    return windows


def segments(
    text: str, *, chapter_pattern: str | None = CHAPTER_PATTERN, window_words: int = 300
) -> list[Segment]:
    """The chapters of ``text`` (when ``chapter_pattern`` finds two headings or more), else
    its windows of about ``window_words`` words, cut at sentence ends.

    Raises
    ------
    ValueError
        For ``window_words`` < 1 or an invalid pattern.
    """
    if window_words < 1:
        raise ValueError(f"window_words must be >= 1; got {window_words}")
    parts: list[tuple[str, str]] = []
    if chapter_pattern:
        try:
            compiled = re.compile(chapter_pattern, re.IGNORECASE | re.MULTILINE)
        except re.error as exc:
            raise ValueError(f"chapter pattern {chapter_pattern!r}: {exc}") from None
        parts = _chapters(text, compiled)
    if not parts:
        parts = [("", window) for window in _windows(text, window_words)]
    result = []
    start = 0
    for index, (title, body) in enumerate(parts):
        length = len(body.split())
        result.append(Segment(index, title, start, start + length, body))
        start += length
    return result


def story_curves(
    stories: Sequence[Any],
    metrics: str | Sequence[str],
    *,
    options: Any = None,
    chapter_pattern: str | None = CHAPTER_PATTERN,
    window_words: int = 300,
    progress: bool = False,
    device: str = "cpu",
    precision: str = "float32",
) -> tuple[Any, dict[str, str]]:
    """Score every segment of every story with ``metrics``; returns the tidy table (columns
    :data:`CURVE_COLUMNS`; ``position`` is the segment's midpoint as a share of the story's
    words) and each metric's signature (with the segmentation in it).

    Raises
    ------
    StoryevalError
        For a metric that needs a reference or is not per story.
    """
    import pandas as pd

    from storyeval.corpus import Story
    from storyeval.metrics.pipeline import score_stories
    from storyeval.metrics.registry import get_metric, parse_metric_list

    names = parse_metric_list(metrics)
    for name in names:
        spec = get_metric(name)
        if spec.needs_reference or spec.level != "item":
            raise StoryevalError(
                f"metric {name} cannot be drawn along a story: curves need per-story metrics "
                "without a reference"
            )
    pieces: list[Story] = []
    info: dict[str, tuple[Any, Segment, int]] = {}
    for story in stories:
        parts = segments(story.story, chapter_pattern=chapter_pattern, window_words=window_words)
        total = max(parts[-1].end_word, 1) if parts else 1
        for part in parts:
            key = f"{story.id}#{part.index}"
            context = story.prompt if part.index == 0 else parts[part.index - 1].text
            extra = {**story.extra, "prompt_id": story.extra.get("prompt_id", story.id)}
            pieces.append(Story(key, context, part.text, None, story.system, extra))
            info[key] = (story, part, total)
    if not pieces:
        raise StoryevalError("no story has any text to segment")
    run = score_stories(
        pieces,
        names,
        options=options or {},
        missing="skip",
        bootstrap=0,
        progress=progress,
        device=device,
        precision=precision,
    )
    rows = []
    for score in run.scores:
        story, part, total = info[score.item_id]
        rows.append(
            {
                "item_id": story.id,
                "system": story.system,
                "segment": part.index,
                "title": part.title,
                "start_word": part.start_word,
                "end_word": part.end_word,
                "position": (part.start_word + part.end_word) / 2 / total,
                "metric": score.metric,
                "value": score.value,
            }
        )
    how = f"chapters:{chapter_pattern}" if chapter_pattern else "none"
    signatures = {
        name: info_.signature.with_fields(segments=how, window_words=window_words).render()
        for name, info_ in run.metrics.items()
    }
    return pd.DataFrame(rows, columns=list(CURVE_COLUMNS)), signatures


def curve_plot(table: Any, *, bins: int = 10) -> bytes:
    """PNG: per metric, each system's mean value in each tenth of the stories' length."""
    import numpy as np

    from storyeval.base.plots import figure as _figure
    from storyeval.base.plots import png as _png

    metrics = sorted(table["metric"].unique())
    fig = _figure(4.2 * min(len(metrics), 3), 3.2 * ((len(metrics) + 2) // 3))
    edges = np.linspace(0, 1, bins + 1)
    for k, metric in enumerate(metrics):
        ax = fig.add_subplot((len(metrics) + 2) // 3, min(len(metrics), 3), k + 1)
        rows = table[table["metric"] == metric]
        for system, group in rows.groupby("system", sort=True):
            where = np.clip(np.digitize(group["position"], edges) - 1, 0, bins - 1)
            means = [group["value"][where == b].mean() for b in range(bins)]
            ax.plot(
                (edges[:-1] + edges[1:]) / 2, means, marker="o", markersize=3, label=str(system)
            )
        ax.set_title(metric, fontsize=9)
        ax.set_xlabel("position in the story", fontsize=8)
        ax.tick_params(labelsize=7)
        if k == 0:
            ax.legend(fontsize=7)
    return _png(fig)


def write_curves(table: Any, signatures: dict[str, str], directory: str | Path) -> dict[str, Path]:
    """Write ``curves.csv``, ``curves.png``, ``curves.md`` and ``curves.json`` (signatures)."""
    import json

    from storyeval.base.io import (
        claim_output_directory,
        write_bytes_atomic,
        write_table,
        write_text_atomic,
    )
    from storyeval.base.markdown import Document

    folder = claim_output_directory(directory, "curves")
    written = {
        "table": write_table(folder / "curves.csv", table),
        "figure": folder / "curves.png",
        "report": folder / "curves.md",
        "signatures": folder / "curves.json",
    }
    write_bytes_atomic(written["figure"], curve_plot(table))
    doc = Document()
    doc.heading(1, "Curves along the stories")
    doc.paragraph(
        "Each story cut into chapters (or windows of whole sentences), each segment scored "
        "with the previous one as its prompt; per system, the mean value in each tenth of the "
        "stories' length."
    )
    doc.lines(["![curves](curves.png)"])
    doc.bullets([f"`{s}`" for s in signatures.values()])
    write_text_atomic(written["report"], doc.render())
    write_text_atomic(written["signatures"], json.dumps(signatures, indent=2) + "\n")
    return written


def read_curves(directory: str | Path) -> tuple[Any, dict[str, str]]:
    """The table and signatures of a directory written by :func:`write_curves`."""
    import json

    import pandas as pd

    folder = Path(directory)
    if not (folder / "curves.csv").is_file():
        raise StoryevalError(f"{folder}: no curves.csv; write one with `storyeval curves`")
    saved = folder / "curves.json"
    signatures = json.loads(saved.read_text(encoding="utf-8")) if saved.is_file() else {}
    return pd.read_csv(folder / "curves.csv"), signatures
