"""Strict parsing of written judge answers: an answer is either exactly what was asked for or
a parse failure (counted and reported, never imputed)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from storyeval.judge.backends import JudgeAnswer

_MARKERS = ("score", "winner", "answer")


def parse_answer(text: str, labels: Sequence[str], *, analysed: bool) -> str | None:
    """The label a written answer gives, or None when it does not give exactly one.

    Without an analysis the whole answer (stripped of spaces, a final period and surrounding
    quotes or asterisks) must be one label. After an analysis the last non-empty line must be
    ``Score: X`` (or ``Winner: X``/``Answer: X``) with X a label. Nothing else is accepted: a
    number found elsewhere (e.g. the scale echoed from the prompt) is not an answer.

    >>> parse_answer(" 4.", ["1", "2", "3", "4", "5"], analysed=False)
    '4'
    >>> parse_answer("I would say 4", ["1", "2", "3", "4", "5"], analysed=False) is None
    True
    >>> parse_answer("Vivid but thin.\\nScore: 3", ["1", "2", "3", "4", "5"], analysed=True)
    '3'
    >>> parse_answer("Scale: 1-5. Score: 5 for sure", ["1", "2", "3", "4", "5"], analysed=True) is None
    True
    """
    lowered = {label.lower(): label for label in labels}
    if not analysed:
        return lowered.get(_clean(text).lower())
    lines = [line for line in text.strip().splitlines() if line.strip()]
    if not lines:
        return None
    match = re.fullmatch(r"\W*(\w+)\W*\s*[:=]\s*(.+)", lines[-1].strip())
    if match is None or match.group(1).lower() not in _MARKERS:
        return None
    return lowered.get(_clean(match.group(2)).lower())


def _clean(text: str) -> str:
    return text.strip().strip("*\"'`").rstrip(".").strip()


def yes_probability(answer: JudgeAnswer) -> float | None:
    """A yes/no answer (labels ``yes``, ``no``, in that order) as the probability of *yes*:
    the answer's probabilities renormalised over the two labels, or 1/0 for a written answer
    that is exactly one of them; ``None`` for anything else (never counted as either).

    >>> from storyeval.judge.backends import JudgeAnswer
    >>> yes_probability(JudgeAnswer((0.375, 0.125))), yes_probability(JudgeAnswer(None, "No."))
    (0.75, 0.0)
    >>> yes_probability(JudgeAnswer(None, "maybe")) is None
    True
    """
    if answer.probabilities is not None and sum(answer.probabilities) > 0:
        return float(answer.probabilities[0] / sum(answer.probabilities))
    label = parse_answer(answer.text or "", ("yes", "no"), analysed=False)
    return None if label is None else float(label == "yes")
