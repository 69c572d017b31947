"""Diagnostics of model prose as metrics (see :mod:`storyeval.diagnostics`): over-used
phrases against the human profile, repetition across a system's stories, the slop index, and
the variability of sentence and paragraph lengths."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from storyeval.metrics.registry import MetricBatch, MetricOption, MetricOutput, register_metric

_N = MetricOption("n", int, 3, "phrase length in words", minimum=1, maximum=10)
_MIN_STORIES = MetricOption(
    "min_stories", int, 3, "a phrase must occur in at least this many stories", minimum=2
)


@register_metric(
    "overused_phrase_rate",
    description="Share of the story's word n-grams that are over-used phrases of its system: "
    "found in many more of the system's stories than of the reference (human) stories",
    families=("prose",),
    higher_is_better=False,
    value_range=(0.0, 1.0),
    level="system",
    options=[
        MetricOption("reference_system", str, "human", "the system giving the human profile"),
        _N,
        _MIN_STORIES,
        MetricOption(
            "min_ratio",
            float,
            3.0,
            "over-used: share of stories >= this x the reference's",
            minimum=1.0,
        ),
    ],
)
def overused_phrase_rate(batch: MetricBatch, options: Mapping[str, Any]) -> MetricOutput:
    """Per story, the share of its n-grams among its system's over-used phrases."""
    from storyeval.diagnostics import ngrams, overused_phrase_sets, share_in, words
    from storyeval.errors import StoryevalError

    reference = str(options["reference_system"])
    try:
        sets, _ = overused_phrase_sets(
            batch.all_stories or batch.stories,
            n=int(options["n"]),
            reference_system=reference,
            min_stories=int(options["min_stories"]),
            min_ratio=float(options["min_ratio"]),
        )
    except ValueError as exc:
        raise StoryevalError(
            f"overused_phrase_rate: {exc} (set overused_phrase_rate.reference_system)"
        ) from None
    values = np.full(len(batch.stories), np.nan)
    for index, story in enumerate(batch.stories):
        chosen = sets.get(story.system or "(none)")
        if chosen is not None:
            values[index] = share_in(ngrams(words(story.story), int(options["n"])), chosen)
    undefined = sum(1 for s in batch.stories if (s.system or "(none)") == reference)
    notes = (
        [f"{undefined} stories of the reference system {reference!r}: undefined"]
        if undefined
        else []
    )
    return MetricOutput(values, notes=notes)


@register_metric(
    "cross_story_repetition",
    description="Share of the story's word n-grams found in other stories of its system "
    "(phrases a system repeats across stories)",
    families=("prose",),
    higher_is_better=False,
    value_range=(0.0, 1.0),
    level="system",
    options=[
        MetricOption("n", int, 4, "phrase length in words", minimum=1, maximum=10),
        _MIN_STORIES,
    ],
)
def cross_story_repetition(batch: MetricBatch, options: Mapping[str, Any]) -> MetricOutput:
    """Per story, the share of its n-grams used in at least ``min_stories - 1`` other
    stories of its system."""
    from storyeval.diagnostics import cross_story_shares

    values = np.full(len(batch.stories), np.nan)
    groups: dict[str, list[int]] = {}
    for index, story in enumerate(batch.stories):
        groups.setdefault(story.system or "(none)", []).append(index)
    notes = []
    for system, members in groups.items():
        if len(members) < int(options["min_stories"]):  # no phrase can recur that often
            notes.append(f"{system}: fewer than min_stories stories: undefined")
            continue
        shares = cross_story_shares(
            [batch.stories[i].story for i in members],
            n=int(options["n"]),
            min_stories=int(options["min_stories"]),
        )
        values[members] = shares
    return MetricOutput(values, notes=notes)


@register_metric(
    "slop_index",
    description="Share of the story's words on a list of words language models over-use in "
    "fiction ('tapestry', 'testament', 'palpable'; versioned, replaceable)",
    families=("prose",),
    higher_is_better=False,
    value_range=(0.0, 1.0),
    options=[
        MetricOption(
            "words", str, None, "a word list file (one word a line; default: storyeval's slop-v1)"
        )
    ],
)
def slop_index(batch: MetricBatch, options: Mapping[str, Any]) -> MetricOutput:
    """Per story, the share of its words on the slop list."""
    from storyeval.diagnostics import read_word_list, slop_share

    vocabulary, identity = read_word_list(options["words"])
    values = np.array([slop_share(s.story, vocabulary) for s in batch.stories])
    return MetricOutput(values, fields={"words": identity})


def _cv_metric(kind: str) -> Any:
    def compute(batch: MetricBatch, options: Mapping[str, Any]) -> MetricOutput:
        from storyeval.diagnostics import coefficient_of_variation, paragraphs, words

        values = []
        for story in batch.stories:
            if kind == "sentence":
                parts = batch.context.sentences(story.story, options["split"])
            else:
                parts = paragraphs(story.story)
            values.append(coefficient_of_variation([len(words(p)) for p in parts]))
        array = np.asarray(values, dtype=np.float64)
        notes = []
        if np.isnan(array).any():
            notes.append(
                f"{int(np.isnan(array).sum())} stories have fewer than two {kind}s: undefined"
            )
        return MetricOutput(array, notes=notes)

    return compute


register_metric(
    "sentence_length_cv",
    description="Coefficient of variation (sd / mean) of the story's sentence lengths in "
    "words: how much the rhythm varies",
    families=("prose",),
    higher_is_better=None,
    value_range=(0.0, None),
    options=[MetricOption("split", str, "pysbd", "sentence splitter", choices=("pysbd", "spacy"))],
)(_cv_metric("sentence"))

register_metric(
    "paragraph_length_cv",
    description="Coefficient of variation (sd / mean) of the story's paragraph lengths in "
    "words (paragraphs: blank-line blocks, else lines)",
    families=("prose",),
    higher_is_better=None,
    value_range=(0.0, None),
    default=False,
)(_cv_metric("paragraph"))
