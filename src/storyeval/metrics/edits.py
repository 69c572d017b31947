"""Edit metrics between an original text (e.g. a machine suggestion) and its edited version.

Clark (2021, ch. 4, Table 4.2) measures how much of a suggestion a writer kept with three
metrics, all implemented here as library functions and registered as metrics that compare a
story (the edited text) with another field of the same record (the original, option
``original``, default field ``original``):

* :func:`levenshtein`: character insertions, deletions and substitutions (lower = more kept);
* :func:`jaccard`: shared word types over all word types (higher = more kept);
* :func:`user`: User Story Edit Ratings (Akoury et al. 2020): the longest common substring of
  the two token sequences, then recursively the longest common substrings to its left and
  to its right (Ratcliff/Obershelp matching); precision = matched tokens / original tokens,
  recall = matched tokens / edited tokens, and their F1.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Literal

import numpy as np

from storyeval.base.validation import check_choice
from storyeval.metrics.cards import CLARK, EDIT_LIMITS, MetricCard
from storyeval.metrics.function import Opt, Scores, Texts, metric
from storyeval.metrics.registry import MetricOption
from storyeval.text import tokenize_words


def levenshtein(a: Sequence[Any] | str, b: Sequence[Any] | str) -> int:
    """Edit distance: the fewest insertions, deletions and substitutions turning ``a`` into
    ``b`` (characters of strings, or items of sequences).

    Myers' (1999) bit-parallel algorithm in Hyyro's (2001) form for the global distance: one
    column of the dynamic programme is a pair of bit vectors (Python integers as wide as the
    shorter input), so two stories of 10,000 characters take milliseconds, not a minute.
    Exact: the tests check it against the plain dynamic programme.

    >>> levenshtein("kitten", "sitting"), levenshtein("", "abc"), levenshtein(["a", "b"], ["b"])
    (3, 3, 1)
    """
    if len(a) < len(b):
        a, b = b, a
    if not b:
        return len(a)
    matches: dict[Any, int] = {}  # each item of b: the bits of the positions holding it
    for position, item in enumerate(b):
        matches[item] = matches.get(item, 0) | (1 << position)
    full, last = (1 << len(b)) - 1, 1 << (len(b) - 1)
    plus, minus, distance = full, 0, len(b)  # vertical deltas of the first column: all +1
    for item in a:
        equal = matches.get(item, 0)
        vertical = equal | minus
        horizontal = (((equal & plus) + plus) ^ plus) | equal
        up = minus | (~(horizontal | plus) & full)
        down = plus & horizontal
        if up & last:
            distance += 1
        elif down & last:
            distance -= 1
        up = ((up << 1) | 1) & full  # the first row's horizontal delta is +1
        down = (down << 1) & full
        plus = down | (~(vertical | up) & full)
        minus = up & vertical
    return distance


def jaccard(a: str, b: str) -> float:
    """Jaccard similarity of the sets of lower-cased word tokens (NaN when both are empty).

    >>> jaccard("The cat sat.", "the cat ran")
    0.5
    """
    set_a = set(tokenize_words(a, lowercase=True, punctuation=False))
    set_b = set(tokenize_words(b, lowercase=True, punctuation=False))
    union = set_a | set_b
    return len(set_a & set_b) / len(union) if union else float("nan")


def _longest_common_substring(
    a: Sequence[Any], b: Sequence[Any], a_lo: int, a_hi: int, b_lo: int, b_hi: int
) -> tuple[int, int, int]:
    """The longest common run ``(i, j, size)`` of ``a[a_lo:a_hi]`` and ``b[b_lo:b_hi]``; ties go
    to the earliest start in ``a``, then in ``b`` (difflib's rule)."""
    best_i, best_j, best = a_lo, b_lo, 0
    lengths: dict[int, int] = {}
    positions: dict[Any, list[int]] = {}
    for j in range(b_lo, b_hi):
        positions.setdefault(b[j], []).append(j)
    for i in range(a_lo, a_hi):
        current: dict[int, int] = {}
        for j in positions.get(a[i], ()):
            size = lengths.get(j - 1, 0) + 1
            current[j] = size
            if size > best:
                best_i, best_j, best = i - size + 1, j - size + 1, size
        lengths = current
    return best_i, best_j, best


def matched_tokens(a: Sequence[Any], b: Sequence[Any]) -> int:
    """Tokens matched by recursive longest-common-substring matching (Ratcliff/Obershelp).

    >>> matched_tokens("a b c d".split(), "a x c d".split())
    3
    """
    total = 0
    stack = [(0, len(a), 0, len(b))]
    while stack:
        a_lo, a_hi, b_lo, b_hi = stack.pop()
        if a_lo >= a_hi or b_lo >= b_hi:
            continue
        i, j, size = _longest_common_substring(a, b, a_lo, a_hi, b_lo, b_hi)
        if size == 0:
            continue
        total += size
        stack.append((a_lo, i, b_lo, j))
        stack.append((i + size, a_hi, j + size, b_hi))
    return total


@dataclass(frozen=True)
class UserScore:
    """USER precision (share of the original kept), recall (share of the edited text that
    comes from the original) and F1; NaN where a denominator is zero."""

    precision: float
    recall: float
    f1: float


def user(edited: str, original: str, *, unit: str = "word") -> UserScore:
    """User Story Edit Ratings (Akoury et al. 2020) between an edited text and its original.

    Parameters
    ----------
    edited, original : str
        The text after the writer's edits, and the text as generated.
    unit : {"word", "char"}
        Match word tokens (punctuation included, case kept) or characters.

    Examples
    --------
    >>> score = user("The dog ran home quickly.", "The dog ran away.")
    >>> round(score.precision, 3), round(score.recall, 3), round(score.f1, 3)
    (0.8, 0.667, 0.727)
    """
    check_choice(unit, ("word", "char"), "unit")
    a = tokenize_words(original) if unit == "word" else list(original)
    b = tokenize_words(edited) if unit == "word" else list(edited)
    matched = matched_tokens(a, b)
    precision = matched / len(a) if a else float("nan")
    recall = matched / len(b) if b else float("nan")
    if a and b and precision + recall > 0:
        f1 = 2 * precision * recall / (precision + recall)
    elif a and b:
        f1 = 0.0
    else:
        f1 = float("nan")
    return UserScore(precision, recall, f1)


@dataclass(frozen=True)
class EditScores(Scores):
    """A value of each (edited, original) pair of texts."""


#: The record field the pipeline reads the originals from: an input's source, like the story
#: file, so it is no option of the functions (which take the originals) nor in the signature
ORIGINAL = MetricOption(
    "original",
    str,
    "original",
    "the record field holding the original (unedited) text",
    in_signature=False,
)


@metric(
    "levenshtein",
    description="Levenshtein edit distance (characters) from the original text to the story",
    families=("edits",),
    higher_is_better=False,
    value_range=(0.0, None),
    extra_options=(ORIGINAL,),
    card=MetricCard(
        measures="Levenshtein edit distance (character insertions, deletions, "
        "substitutions) from the original text (field named by `original`) to the story, "
        "optionally divided by the longer length.",
        read="Lower = the writer kept more of the suggestion. Library function: "
        "`storyeval.metrics.edits.levenshtein(a, b)`.",
        papers=f"{CLARK}, Table 4.2 (ED): FUSION 37.61, GPT2 29.49; Table 4.5: nucleus 34.65, "
        "top-k 36.69 (the thesis does not state its normalisation).",
        limits=EDIT_LIMITS + " Raw distances grow with text length; use `normalize=true` "
        "to compare texts of different lengths.",
        refs="Levenshtein (1966).",
    ),
)
def levenshtein_distance(
    texts: Texts,
    originals: Texts,
    *,
    normalize: Annotated[bool, Opt("divide by the longer text's length (0..1)")] = False,
) -> EditScores:
    """The character edit distance from each original to its edited text (the story).

    >>> levenshtein_distance(["kitten"], ["sitting"]).values.tolist()
    [3.0]
    """
    values = []
    for edited, source in zip(texts, originals, strict=True):
        distance = float(levenshtein(source, edited))
        if normalize:
            longest = max(len(source), len(edited))
            distance = distance / longest if longest else float("nan")
        values.append(distance)
    return EditScores(np.asarray(values, dtype=np.float64))


@metric(
    "jaccard",
    description="Jaccard similarity of the word sets of the story and the original text",
    families=("edits",),
    value_range=(0.0, 1.0),
    extra_options=(ORIGINAL,),
    card=MetricCard(
        measures="Jaccard similarity of the sets of lower-cased word tokens of the story "
        "and the original text.",
        read="0-1; higher = more of the vocabulary shared. Library function: "
        "`storyeval.metrics.edits.jaccard(a, b)`.",
        papers=f"{CLARK}, Table 4.2 (JS, x100): FUSION 51.13, GPT2 61.35; Table 4.5: "
        "nucleus 53.64, top-k 50.96.",
        limits=EDIT_LIMITS + " Ignores order and counts.",
        refs="Jaccard (1912).",
    ),
)
def jaccard_similarity(texts: Texts, originals: Texts) -> EditScores:
    """The Jaccard similarity of the word sets of each edited text and its original.

    >>> jaccard_similarity(["the cat sat"], ["the cat ran"]).values.tolist()
    [0.5]
    """
    values = [jaccard(edited, source) for edited, source in zip(texts, originals, strict=True)]
    return EditScores(np.asarray(values, dtype=np.float64))


@metric(
    "user",
    description="USER (Akoury et al. 2020): recursive longest-common-substring F1 between the "
    "story (edited) and the original text",
    families=("edits",),
    value_range=(0.0, 1.0),
    extra_options=(ORIGINAL,),
    card=MetricCard(
        measures="User Story Edit Ratings (Akoury et al. 2020): the longest common "
        "substring of the original and edited token sequences, then recursively the longest "
        "common substrings to its left and right (Ratcliff/Obershelp); precision = matched / "
        "original tokens, recall = matched / edited tokens, F1 (default; `component`).",
        read="0-1; higher = more of the suggestion survives in place. Library function: "
        "`storyeval.metrics.edits.user(edited, original)` returns precision, recall and F1.",
        papers=f"{CLARK}, Table 4.2 (USER, x100): FUSION 60.69, GPT2 71.77; Table 4.5: "
        "nucleus 63.64, top-k 62.18.",
        limits=EDIT_LIMITS + " Moved blocks count only once (the longest run wins).",
        refs="Akoury et al. (2020), STORIUM (EMNLP); Ratcliff & Metzener (1988).",
    ),
)
def user_scores(
    texts: Texts,
    originals: Texts,
    *,
    unit: Annotated[Literal["word", "char"], Opt("match words or characters")] = "word",
    component: Annotated[Literal["f", "p", "r"], Opt("F1, precision or recall")] = "f",
) -> EditScores:
    """USER (Akoury et al. 2020) of each edited text against its original (see :func:`user`).

    >>> user_scores(["The dog ran home quickly."], ["The dog ran away."]).values.round(3).tolist()
    [0.727]
    """
    attribute = {"f": "f1", "p": "precision", "r": "recall"}[component]
    values = [
        getattr(user(edited, source, unit=unit), attribute)
        for edited, source in zip(texts, originals, strict=True)
    ]
    return EditScores(np.asarray(values, dtype=np.float64))
