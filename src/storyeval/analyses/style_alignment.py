"""Aligning the texts of two styles by their documents, and the data splits of De Mattei et al.
(2021, section 2: "On the interaction of automatic evaluation and task framing in headline
style transfer").

The paper computes tf-idf vectors of every article of both newspapers, compares articles
published within a short interval of each other by cosine similarity, and keeps alignments
above a threshold: strongly aligned pairs above 0.5, weakly aligned ones above 0.185. The
strongly aligned pairs are split into SA (held out: the style transfer's test set) and A1-A3
(A3 "the lower end of the aligned pairs"); the weakly and non-aligned texts are R. The
classifiers train on parts of them (HH on A1; AH on R+A3+A1).

:func:`align_corpus` does that on a story file: the document of a text is its ``prompt`` (the
article; the text itself when there is none), pairs are matched one to one, greedily by
similarity, optionally only between texts whose ``date_field`` values are at most
``max_days`` apart; each text gets ``alignment`` (strong, weak or none), ``similarity`` (of
its pair), ``pair`` (strong pairs only: the HH classifier's positives) and ``split`` (SA, A1,
A2, A3 or R).

Examples
--------
>>> from storyeval.corpus import Story
>>> stories = [
...     Story("L1", "heavy rain floods the city centre", "Rain: city flooded", system="left"),
...     Story("R1", "the city centre floods after heavy rain", "Flood in town", system="right"),
...     Story("L2", "parliament votes the budget", "Budget passes", system="left"),
...     Story("R2", "budget vote in parliament today", "A vote", system="right"),
...     Story("R3", "a cat wins a prize", "Cat wins", system="right")]
>>> [(s.id, s.extra["alignment"], s.extra["split"]) for s in align_corpus(stories, held_out=0.0)]
[('L1', 'strong', 'A1'), ('R1', 'strong', 'A1'), ('L2', 'weak', 'R'), ('R2', 'weak', 'R'), ('R3', 'none', 'R')]
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace
from datetime import date
from typing import Any

from storyeval.base.errors import StoryevalError
from storyeval.corpus import Story
from storyeval.perturb.base import story_rng

SPLITS = ("SA", "A1", "A2", "A3", "R")


def _style(story: Story, style_field: str) -> str:
    from storyeval.analyses.classifier_eval import style_of

    value = style_of(story, style_field)
    if value is None:
        raise StoryevalError(f"story {story.id!r} has no style (field {style_field!r})")
    return value


def _days(story: Story, date_field: str) -> int:
    value = story.extra.get(date_field)
    try:
        return date.fromisoformat(str(value)[:10]).toordinal()
    except ValueError:
        raise StoryevalError(
            f"story {story.id!r}: {date_field} must be a date (YYYY-MM-DD); got {value!r}"
        ) from None


def _candidates(
    stories: Sequence[Story], left: list[int], right: list[int], weak: float, window: Any
) -> list[tuple[float, int, int]]:
    """(similarity, left, right) of every cross-style pair above ``weak`` (and in the date
    window), computed in chunks of the sparse tf-idf product."""
    from sklearn.feature_extraction.text import TfidfVectorizer

    documents = [s.prompt.strip() or s.story for s in stories]
    matrix = TfidfVectorizer(sublinear_tf=True).fit_transform(documents)
    a, b = matrix[left], matrix[right]
    found = []
    for start in range(0, len(left), 256):
        block = (a[start : start + 256] @ b.T).tocoo()
        for row, col, value in zip(block.row, block.col, block.data, strict=True):
            i, j = left[start + row], right[col]
            if value > weak and (window is None or window(i, j)):
                found.append((float(value), i, j))
    return found


def align_corpus(
    stories: Sequence[Story],
    *,
    style_field: str = "system",
    date_field: str | None = None,
    max_days: int = 2,
    strong: float = 0.5,
    weak: float = 0.185,
    held_out: float = 0.1,
    seed: int = 0,
) -> list[Story]:
    """The stories with their alignment and split (see the module docstring); ``held_out`` is
    the share of strongly aligned pairs set aside as SA."""
    if not 0 <= weak < strong <= 1:
        raise ValueError(f"thresholds need 0 <= weak < strong <= 1; got {weak}, {strong}")
    if not 0 <= held_out < 1:
        raise ValueError(f"held_out must be in [0, 1); got {held_out}")
    styles = [_style(s, style_field) for s in stories]
    names = sorted(set(styles))
    if len(names) != 2:
        raise StoryevalError(f"aligning needs two styles; the corpus has {', '.join(names)}")
    left = [i for i, s in enumerate(styles) if s == names[0]]
    right = [i for i, s in enumerate(styles) if s == names[1]]
    window = None
    if date_field is not None:
        days = [_days(s, date_field) for s in stories]
        window = lambda i, j: abs(days[i] - days[j]) <= max_days  # noqa: E731
    matched: dict[int, tuple[int, float]] = {}
    for value, i, j in sorted(_candidates(stories, left, right, weak, window), reverse=True):
        if i not in matched and j not in matched:
            matched[i], matched[j] = (j, value), (i, value)
    pairs = sorted(
        {(min(i, j), max(i, j), v) for i, (j, v) in matched.items()}, key=lambda p: p[:2]
    )
    strong_pairs = [p for p in pairs if p[2] > strong]
    split_of = _strong_splits(strong_pairs, held_out, seed)
    return [
        _aligned(story, index, matched, strong, split_of) for index, story in enumerate(stories)
    ]


def _strong_splits(
    pairs: list[tuple[int, int, float]], held_out: float, seed: int
) -> dict[tuple[int, int], str]:
    """SA: a seeded share of the strong pairs; the rest by similarity, highest first, in
    thirds A1, A2, A3."""
    order = list(range(len(pairs)))
    story_rng(seed, "style-alignment").shuffle(order)
    n_sa = round(held_out * len(pairs))
    split = {pairs[i][:2]: "SA" for i in order[:n_sa]}
    rest = sorted((pairs[i] for i in order[n_sa:]), key=lambda p: -p[2])
    for rank, pair in enumerate(rest):
        split[pair[:2]] = ("A1", "A2", "A3")[min(2, rank * 3 // max(1, len(rest)))]
    return split


def _aligned(
    story: Story,
    index: int,
    matched: dict[int, tuple[int, float]],
    strong: float,
    split_of: dict[tuple[int, int], str],
) -> Story:
    extra = dict(story.extra)
    if index in matched:
        other, value = matched[index]
        key = (min(index, other), max(index, other))
        extra["similarity"] = round(value, 6)
        if value > strong:
            extra.update(alignment="strong", pair=f"aligned-{key[0]}-{key[1]}", split=split_of[key])
        else:
            extra.update(alignment="weak", split="R")
    else:
        extra.update(alignment="none", similarity=math.nan, split="R")
    if isinstance(extra.get("similarity"), float) and math.isnan(extra["similarity"]):
        extra.pop("similarity")
    return replace(story, extra=extra)


def alignment_counts(stories: Sequence[Story]) -> dict[str, int]:
    """How many texts fell in each split."""
    values = [str(s.extra.get("split")) for s in stories]
    return {name: values.count(name) for name in SPLITS}
