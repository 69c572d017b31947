"""Diagnostics of model prose in one call: the prose metrics of every story, the over-used and
repeated phrases of every system, written as tables and a report (``storyeval diagnose``).
The counting is :mod:`storyeval.metrics.phrases`.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from storyeval.metrics.phrases import PHRASE_COLUMNS, overused_phrases, repeated_phrases

#: The diagnostics metrics, in report order.
DIAGNOSTIC_METRICS = (
    "overused_phrase_rate",
    "cross_story_repetition",
    "slop_index",
    "sentence_length_cv",
    "paragraph_length_cv",
)


def diagnose(
    stories: Sequence[Any],
    *,
    reference_system: str = "human",
    n: int = 3,
    repeat_n: int = 4,
    min_stories: int = 3,
    min_ratio: float = 3.0,
    words_file: str | Path | None = None,
    bootstrap: int = 1000,
    seed: int = 0,
) -> dict[str, Any]:
    """Every diagnostic of a corpus: ``{"systems": per-system table of the diagnostic
    metrics (:data:`storyeval.metrics.runs.SYSTEM_COLUMNS`), "overused": over-used phrases
    (:func:`overused_phrases`; empty without reference stories), "repeated": phrases repeated
    across stories (:func:`repeated_phrases`), "signatures": metric -> signature}``."""
    from storyeval.metrics.pipeline import score_stories

    has_reference = any(s.system == reference_system for s in stories)
    names = [m for m in DIAGNOSTIC_METRICS if has_reference or m != "overused_phrase_rate"]
    options: dict[str, Any] = {
        "cross_story_repetition.n": repeat_n,
        "prose.min_stories": min_stories,
    }
    if has_reference:
        options.update(
            {
                "overused_phrase_rate.reference_system": reference_system,
                "overused_phrase_rate.n": n,
                "overused_phrase_rate.min_ratio": min_ratio,
            }
        )
    if words_file is not None:
        options["slop_index.words"] = str(words_file)
    run = score_stories(stories, names, options=options, bootstrap=bootstrap, seed=seed)
    import pandas as pd

    overused = pd.DataFrame(columns=list(PHRASE_COLUMNS))
    if has_reference:
        overused = overused_phrases(
            stories,
            n=n,
            reference_system=reference_system,
            min_stories=min_stories,
            min_ratio=min_ratio,
        )
    return {
        "systems": run.systems,
        "overused": overused,
        "repeated": repeated_phrases(stories, n=repeat_n, min_stories=min_stories),
        "signatures": {name: info.signature.render() for name, info in run.metrics.items()},
        "notes": [f"{name}: {note}" for name, info in run.metrics.items() for note in info.notes],
    }


def diagnostics_markdown(result: dict[str, Any], *, top: int = 15) -> str:
    """The summary page of ``storyeval diagnose``: per-system diagnostics, the most
    over-used and most repeated phrases of each system, signatures."""
    from storyeval.base.markdown import Document

    doc = Document()
    doc.heading(1, "Diagnostics of the prose")
    doc.paragraph(
        "Per system: the share of each story's phrases over-used against the human profile, "
        "the share repeated across the system's stories, the slop index (share of words on "
        "the over-used word list) and the variability of sentence and paragraph lengths "
        "(coefficient of variation). Means of stories with bootstrap intervals."
    )
    doc.frame(result["systems"], ["metric", "system", "estimate", "ci_low", "ci_high", "n"])
    for title, key, columns in (
        (
            "Over-used phrases",
            "overused",
            ["system", "ngram", "stories", "reference_stories", "ratio"],
        ),
        (
            "Phrases repeated across stories",
            "repeated",
            ["system", "ngram", "stories", "occurrences"],
        ),
    ):
        doc.heading(2, title)
        frame = result[key]
        if len(frame):
            doc.frame(frame.groupby("system").head(top), columns)
        else:
            doc.paragraph("None found.")
    if result["notes"]:
        doc.heading(2, "Notes")
        doc.bullets(result["notes"])
    doc.heading(2, "Signatures")
    doc.bullets([f"`{sig}`" for sig in result["signatures"].values()])
    return doc.render()
