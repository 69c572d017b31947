"""Diagnostics of model prose as metrics (the counting is :mod:`storyeval.metrics.phrases`): over-used
phrases against the human profile, repetition across a system's stories, the slop index, and
the variability of sentence and paragraph lengths."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Literal

import numpy as np

from storyeval.errors import StoryevalError
from storyeval.metrics.context import ScoringContext
from storyeval.metrics.function import Groups, Opt, Scores, Texts, metric, undefined_note

PhraseLength = Annotated[int, Opt("phrase length in words", minimum=1, maximum=10)]
MinStories = Annotated[int, Opt("a phrase must occur in at least this many stories", minimum=2)]


@dataclass(frozen=True)
class ProseScores(Scores):
    """A diagnostic of each text's prose (shares of words or phrases, length variability)."""


@metric(
    "overused_phrase_rate",
    description="Share of the story's word n-grams that are over-used phrases of its system: "
    "found in many more of the system's stories than of the reference (human) stories",
    families=("prose",),
    higher_is_better=False,
    value_range=(0.0, 1.0),
    level="system",
)
def overused_phrase_rate(
    texts: Texts,
    groups: Groups,
    *,
    reference_system: Annotated[str, Opt("the system giving the human profile")] = "human",
    n: PhraseLength = 3,
    min_stories: MinStories = 3,
    min_ratio: Annotated[
        float, Opt("over-used: share of stories >= this x the reference's", minimum=1.0)
    ] = 3.0,
) -> ProseScores:
    """Per text, the share of its n-grams among its group's over-used phrases: phrases found
    in at least ``min_stories`` of the group's texts and in ``min_ratio`` times the share of
    the reference group's texts (undefined for the reference group's own texts)."""
    from storyeval.corpus import Story
    from storyeval.metrics.phrases import ngrams, overused_phrase_sets, share_in, words

    stories = [
        Story(str(i), "", t, system=g) for i, (t, g) in enumerate(zip(texts, groups, strict=True))
    ]
    try:
        sets, _ = overused_phrase_sets(
            stories,
            n=n,
            reference_system=reference_system,
            min_stories=min_stories,
            min_ratio=min_ratio,
        )
    except ValueError as exc:
        raise StoryevalError(
            f"overused_phrase_rate: {exc} (set overused_phrase_rate.reference_system)"
        ) from None
    values = np.full(len(texts), np.nan)
    for index, (text, group) in enumerate(zip(texts, groups, strict=True)):
        chosen = sets.get(group or "(none)")
        if chosen is not None:
            values[index] = share_in(ngrams(words(text), n), chosen)
    undefined = sum(1 for g in groups if (g or "(none)") == reference_system)
    notes = (
        (f"{undefined} stories of the reference system {reference_system!r}: undefined",)
        if undefined
        else ()
    )
    return ProseScores(values, notes=notes)


@metric(
    "cross_story_repetition",
    description="Share of the story's word n-grams found in other stories of its system "
    "(phrases a system repeats across stories)",
    families=("prose",),
    higher_is_better=False,
    value_range=(0.0, 1.0),
    level="system",
)
def cross_story_repetition(
    texts: Texts, groups: Groups, *, n: PhraseLength = 4, min_stories: MinStories = 3
) -> ProseScores:
    """Per text, the share of its n-grams used in at least ``min_stories - 1`` other texts of
    its group."""
    from storyeval.metrics.phrases import cross_story_shares

    values = np.full(len(texts), np.nan)
    members_of: dict[str, list[int]] = {}
    for index, group in enumerate(groups):
        members_of.setdefault(group or "(none)", []).append(index)
    notes = []
    for group, members in members_of.items():
        if len(members) < min_stories:  # no phrase can recur that often
            notes.append(f"{group}: fewer than min_stories stories: undefined")
            continue
        values[members] = cross_story_shares(
            [texts[i] for i in members], n=n, min_stories=min_stories
        )
    return ProseScores(values, notes=tuple(notes))


@metric(
    "slop_index",
    description="Share of the story's words on a list of words language models over-use in "
    "fiction ('tapestry', 'testament', 'palpable'; versioned, replaceable)",
    families=("prose",),
    higher_is_better=False,
    value_range=(0.0, 1.0),
)
def slop_index(
    texts: Texts,
    *,
    words: Annotated[
        str | None, Opt("a word list file (one word a line; default: storyeval's slop-v1)")
    ] = None,
) -> ProseScores:
    """Per text, the share of its words on the slop list.

    >>> slop_index(["A rich tapestry of light.", "The dog ran."]).values.tolist()
    [0.2, 0.0]
    """
    from storyeval.metrics.phrases import read_word_list, slop_share

    vocabulary, identity = read_word_list(words)
    values = np.array([slop_share(text, vocabulary) for text in texts], dtype=np.float64)
    return ProseScores(values, fields={"words": identity})


def _length_cv(texts: Texts, kind: str, split: str, scoring: ScoringContext) -> ProseScores:
    from storyeval.metrics.phrases import coefficient_of_variation, paragraphs, words

    values = []
    for text in texts:
        parts = scoring.sentences(text, split) if kind == "sentence" else paragraphs(text)
        values.append(coefficient_of_variation([len(words(p)) for p in parts]))
    array = np.asarray(values, dtype=np.float64)
    return ProseScores(
        array, notes=tuple(undefined_note(array, f"stories have fewer than two {kind}s"))
    )


@metric(
    "sentence_length_cv",
    description="Coefficient of variation (sd / mean) of the story's sentence lengths in "
    "words: how much the rhythm varies",
    families=("prose",),
    higher_is_better=None,
    value_range=(0.0, None),
)
def sentence_length_cv(
    texts: Texts,
    *,
    split: Annotated[Literal["pysbd", "spacy"], Opt("sentence splitter")] = "pysbd",
    scoring: ScoringContext | None = None,
) -> ProseScores:
    """The coefficient of variation of each text's sentence lengths (in words)."""
    assert scoring is not None
    return _length_cv(texts, "sentence", split, scoring)


@metric(
    "paragraph_length_cv",
    description="Coefficient of variation (sd / mean) of the story's paragraph lengths in "
    "words (paragraphs: blank-line blocks, else lines)",
    families=("prose",),
    higher_is_better=None,
    value_range=(0.0, None),
    default=False,
)
def paragraph_length_cv(texts: Texts, *, scoring: ScoringContext | None = None) -> ProseScores:
    """The coefficient of variation of each text's paragraph lengths (in words)."""
    assert scoring is not None
    return _length_cv(texts, "paragraph", "pysbd", scoring)
