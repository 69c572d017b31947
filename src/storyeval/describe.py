"""Corpus statistics: how many stories each system wrote and how long they are."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from storyeval.base.signature import Signature
from storyeval.corpus import Story
from storyeval.text import SplitMethod, count_words, split_sentences


def describe_stories(stories: Sequence[Story], *, split_method: SplitMethod = "pysbd") -> Any:
    """One row per system (``system`` is ``(none)`` when absent) with columns ``system``,
    ``n_stories``, ``n_with_reference``, ``mean_words``, ``sd_words``, ``mean_sentences``,
    ``mean_prompt_words``, and a ``signature`` column.

    Examples
    --------
    >>> from storyeval.corpus import Story
    >>> table = describe_stories([Story("a", "Once.", "It rained. It stopped.", system="x")])
    >>> row = table.iloc[0]
    >>> (row["system"], int(row["n_stories"]), float(row["mean_words"]), float(row["mean_sentences"]))
    ('x', 1, 4.0, 2.0)
    """
    import pandas as pd

    if not stories:
        raise ValueError("stories must not be empty")
    rows = [
        {
            "system": s.system or "(none)",
            "words": count_words(s.story),
            "sentences": len(split_sentences(s.story, method=split_method)),
            "prompt_words": count_words(s.prompt),
            "has_reference": bool(s.references),
        }
        for s in stories
    ]
    frame = pd.DataFrame(rows)
    table = (
        frame.groupby("system", sort=True)
        .agg(
            n_stories=("words", "size"),
            n_with_reference=("has_reference", "sum"),
            mean_words=("words", "mean"),
            sd_words=("words", "std"),
            mean_sentences=("sentences", "mean"),
            mean_prompt_words=("prompt_words", "mean"),
        )
        .reset_index()
    )
    table["n_with_reference"] = table["n_with_reference"].astype(int)
    table["signature"] = Signature("describe", {"split": split_method, "n": len(stories)}).render()
    return table
