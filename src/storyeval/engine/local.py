"""The local engine's file reading: a story file scored in this process, read in one go (JSONL,
CSV) or partition by partition (Parquet, any fsspec URL) as the Dask engine reads it."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from storyeval.corpus import Story
from storyeval.metrics.pipeline import score_stories
from storyeval.metrics.runs import ScoreRun, story_lines


def score_file(
    path: str | Path, metrics: str | Sequence[str] | None = None, **kwargs: Any
) -> ScoreRun:
    """Read a story file (JSONL or CSV; Parquet, and any fsspec URL, through
    :mod:`storyeval.engine.sources`) and :func:`score_stories` it (errors name the file and
    line)."""
    from storyeval.corpus import read_stories

    text = str(path)
    if "://" in text or text.lower().endswith((".parquet", ".pq")):
        stories, lines = read_partitioned(text)
        return score_stories(stories, metrics, source=path, lines=lines, **kwargs)
    stories = read_stories(path)
    return score_stories(stories, metrics, source=path, lines=story_lines(path), **kwargs)


def read_partitioned(url: str) -> tuple[list[Story], dict[str, int]]:
    """Every story of a file read partition by partition in this process, and each id's line
    (row), checked as :func:`storyeval.corpus.read_stories` checks a file."""
    from storyeval.engine.sources import check_partitions, plan_partitions, read_partition

    parts = [read_partition(spec) for spec in plan_partitions(url)]
    check_partitions(
        url, [(p.n_lines, [s.id for s in p.stories], p.lines, p.problems) for p in parts]
    )
    stories: list[Story] = []
    lines: dict[str, int] = {}
    offset = 0
    for part in parts:
        stories += part.stories
        lines.update(
            {s.id: offset + line for s, line in zip(part.stories, part.lines, strict=True)}
        )
        offset += part.n_lines
    return stories, lines
