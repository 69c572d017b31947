"""Diagnostics of model prose as metrics (the counting is :mod:`storyeval.metrics.phrases`): over-used
phrases against the human profile, repetition across a system's stories, the slop index, and
the variability of sentence and paragraph lengths."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Annotated, Literal

import numpy as np

from storyeval.base.errors import StoryevalError
from storyeval.metrics.cards import MetricCard
from storyeval.metrics.context import ScoringContext
from storyeval.metrics.function import INJECTED, Groups, Opt, Scores, Texts, metric, undefined_note

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
    card=MetricCard(
        measures="The share of a story's word n-grams (trigrams by default) that are "
        "over-used phrases of its system: n-grams found in at least `min_stories` of the "
        "system's stories and, as a share of stories, at least `min_ratio` times as often as "
        "in the reference (human) stories of the same corpus (each share smoothed by half a "
        "story). `storyeval diagnose` lists the phrases with their ratios.",
        read="0-1, lower = closer to the human phrase profile. Undefined (NaN) for the "
        "reference system's own stories. Level `system`: a story's value depends on the other "
        "stories of its system and on the reference stories.",
        papers="Over-used phrases of model prose are reported in creative-writing "
        "benchmarks (e.g. EQ-Bench Creative Writing's slop and repetition scores); no "
        "published values for this exact definition.",
        limits="Depends on corpus size: with few stories, few phrases reach `min_stories`. "
        "A prompt-driven phrase (the prompt's own words) can be over-used by every system; "
        "compare systems on the same prompts. Words only: punctuation and case are ignored.",
        refs="Paech (2023), EQ-Bench; Li et al. (2016) for distinct n-grams.",
    ),
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
    card=MetricCard(
        measures="The share of a story's word 4-grams (by default) that also occur in at "
        "least `min_stories` - 1 other stories of the same system: phrases a system reuses "
        "across stories (stock openings, refrains), which per-story repetition misses.",
        read="0-1, lower = each story's wording is its own. Level `system`.",
        papers="Repetition across samples is reported beside self-BLEU in studies of "
        "open-ended generation; no published values for this exact definition.",
        limits="Grows with the number of stories per system: compare systems with the same "
        "number of stories. Formulaic genres (fairy tales: 'once upon a time') repeat by "
        "design; compare with the human stories' value.",
        refs="Zhu et al. (2018), Texygen (Self-BLEU, the related corpus-level measure).",
    ),
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
    card=MetricCard(
        measures="The share of a story's words (lower-cased, punctuation dropped) on a list "
        "of words that instruction-tuned language models over-use in fiction ('tapestry', "
        "'testament', 'palpable', 'shimmering', ...). The list ships with storyeval "
        "(`slop-v1`, 133 word forms, written for the project) and is versioned in the "
        "signature; `slop_index.words=FILE` replaces it (then the file's name and hash are in "
        "the signature).",
        read="0-1 (in practice below 0.02), lower = fewer stock model words. Compare with "
        "the human stories of the same corpus.",
        papers="EQ-Bench Creative Writing (Paech) reports a 'slop' score from an "
        "over-used-word list; values are not comparable across lists.",
        limits="A fixed list misses new tics and flags legitimate uses ('whispered' in "
        "dialogue); a list is a convention, not a measurement of quality. Change the list "
        "only with a new version name.",
        refs="Paech (2023), EQ-Bench.",
    ),
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
    card=MetricCard(
        measures="The coefficient of variation (sd / mean, sd with n - 1) of the lengths in "
        "words of the story's sentences (pysbd, or spaCy with `split=spacy`): the variety of "
        "its rhythm ('burstiness').",
        read="Descriptive, 0 and up; people's stories usually vary sentence length more "
        "than a model's. Undefined with fewer than two sentences.",
        papers="Sentence-length variability is a standard stylometric measure; no values "
        "for the corpora of the seed documents.",
        limits="Depends on the sentence splitter (in the signature) and on dialogue "
        "formatting; very short stories give unstable values.",
        refs="Biber (1988), Variation across speech and writing.",
    ),
)
def sentence_length_cv(
    texts: Texts,
    *,
    split: Annotated[Literal["pysbd", "spacy"], Opt("sentence splitter")] = "pysbd",
    scoring: ScoringContext = INJECTED,
) -> ProseScores:
    """The coefficient of variation of each text's sentence lengths (in words)."""
    return _length_cv(texts, "sentence", split, scoring)


@metric(
    "paragraph_length_cv",
    description="Coefficient of variation (sd / mean) of the story's paragraph lengths in "
    "words (paragraphs: blank-line blocks, else lines)",
    families=("prose",),
    higher_is_better=None,
    value_range=(0.0, None),
    default=False,
    card=MetricCard(
        measures="The coefficient of variation (sd / mean) of the lengths in words of the "
        "story's paragraphs (blocks separated by blank lines, else by line breaks).",
        read="Descriptive, 0 and up. Undefined (NaN) for stories of one paragraph, so it "
        "is not in the default suite; ask for it on long stories.",
        papers="No published values for story generation.",
        limits="Meaningful only when the texts keep their paragraph breaks (many data sets "
        "flatten them).",
        refs="Biber (1988), Variation across speech and writing.",
    ),
)
def paragraph_length_cv(texts: Texts, *, scoring: ScoringContext = INJECTED) -> ProseScores:
    """The coefficient of variation of each text's paragraph lengths (in words)."""
    return _length_cv(texts, "paragraph", "pysbd", scoring)


#: "not X, but Y" and its relatives: a contrast that denies one thing to assert another, a
#: construction language models over-use in fiction ("It wasn't fear. It was something else.").
_NOT_BUT = [
    re.compile(p, re.IGNORECASE)
    for p in (
        r"\bnot\s+(?:just|only|merely|simply)?\s*[^.!?;:]{1,60}?,?\s+but\s+(?:rather\s+)?",
        r"\b(?:it|this|that|he|she|they)(?:'s|\s+is|\s+was|\s+were)\s*n[o']t\s+[^.!?;:]{1,60}?"
        r"[.;,\u2014-]+\s*(?:it|this|that|he|she|they)(?:'s|\s+is|\s+was|\s+were)\s+",
        r"\b(?:was|is|were|are)\s*n[o']t\s+(?:about\s+)?[^.!?;:]{1,40}?[.;]\s+(?:it|this|that)\s+"
        r"(?:was|is)\s+(?:about\s+)?",
    )
]


def not_but_count(text: str) -> int:
    """The "not X, but Y" constructions of a text (contrasts that deny one thing to assert
    another), each counted once.

    >>> not_but_count("It wasn't fear. It was something older. She was not tired but angry.")
    2
    >>> not_but_count("She did not go. But he did.")
    0
    """
    spans: list[tuple[int, int]] = []
    for pattern in _NOT_BUT:
        for match in pattern.finditer(text):
            if not any(a < match.end() and match.start() < b for a, b in spans):
                spans.append(match.span())
    return len(spans)


@metric(
    "not_but_rate",
    description="'Not X, but Y' constructions per 1,000 words (a contrast language models "
    "over-use in fiction)",
    families=("prose",),
    higher_is_better=False,
    value_range=(0.0, None),
    default=False,
    card=MetricCard(
        measures="How often a story denies one thing to assert another: 'not X but Y', "
        "'not just X, but Y', 'It wasn't X. It was Y.', 'This isn't about X; it's about Y' "
        "(regular expressions over the text; each construction counted once), per 1,000 "
        "words.",
        read="0 for most human fiction, a few per 1,000 words in prose by instruction-tuned "
        "models. Compare with the human stories of the same corpus.",
        papers="Named among the tics of LLM fiction in EQ-Bench Creative Writing's slop "
        "analysis and by writers reviewing LLM prose; no published rate for this exact "
        "definition.",
        limits="Patterns, not a parser: a legitimate contrast counts as much as a tic, and "
        "unusual phrasings are missed. A short story's rate is noisy (one hit in 100 words "
        "is 10).",
        refs="Paech (2023), EQ-Bench.",
    ),
)
def not_but_rate(texts: Texts) -> ProseScores:
    """Per text, its "not X, but Y" constructions per 1,000 words (NaN for an empty text)."""
    values = np.array(
        [1000.0 * not_but_count(t) / len(t.split()) if t.split() else np.nan for t in texts]
    )
    return ProseScores(values)
