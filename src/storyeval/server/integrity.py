"""How a free-text answer was produced: the signals ``static/integrity.js`` records, checked and
read into flags.

Crowdsourced evaluations meet answers written by language models (33-46% of crowd workers
used them on a summarisation task: Veselovsky et al. 2023). For every free-text field of a
study, a writing session or a slogan session, the page counts keys typed and deleted, pastes
and drops and the characters they brought, the times the page lost focus while the answer was
being written, and the composition time (first to last input, and the time of input with no
pause over 5 s). Only these numbers are stored, never a keystroke or pasted content.

Flags (:func:`measure_typing`), each a reason to read the answer, not proof:

* ``pasted``: at least half of the answer's characters came by paste or drop;
* ``machine_like``: an answer of 20 characters or more that arrived with no key pressed and
  nothing pasted (a script filled the field), or typed faster than a person types (over 15
  characters a second of active composition);
* ``unmeasured`` is not a flag but a state: the page sent no counts (scripts off, an old page).

Limits: a participant can type out a machine's text by hand, or paste their own draft from an
editor; keys pressed elsewhere and autocorrection are not seen. Read the flagged answers.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from typing import Any

#: Every count's largest accepted value (far above any answer of at most 5,000 characters)
MAX_COUNT = 1_000_000
#: Characters a second of active composition above which an answer is not typed by a person
MAX_TYPING_RATE = 15.0
#: Shortest answer the flags judge (a few characters say nothing)
MIN_CHARS = 20
FLAGS = ("pasted", "machine_like")
_COUNTS = ("keys", "deletions", "pastes", "pasted_chars", "drops", "focus_losses")
_TIMES = ("composition_s", "active_s")


def measure_typing(raw: str | None, text: str) -> dict[str, Any] | None:
    """The checked signals of one answer with its ``flags``, from the page's hidden field
    ``raw`` (JSON from ``integrity.js``) and the answer ``text``; None when the page sent
    none or sent something malformed (the answer is then unmeasured, never refused).

    >>> typed = measure_typing('{"keys": 60, "deletions": 3, "pastes": 0, "pasted_chars": 0, '
    ...     '"drops": 0, "focus_losses": 0, "composition_s": 20.5, "active_s": 18.0}', "x" * 58)
    >>> typed["flags"], typed["chars"]
    ([], 58)
    >>> pasted = measure_typing('{"keys": 2, "pastes": 1, "pasted_chars": 300, '
    ...     '"composition_s": 1.0, "active_s": 0.5}', "y" * 300)
    >>> pasted["flags"]
    ['pasted']
    """
    if not raw:
        return None
    try:
        given = json.loads(raw)
    except (ValueError, RecursionError):
        return None
    if not isinstance(given, dict):
        return None
    signals: dict[str, Any] = {}
    for key in _COUNTS:
        value = given.get(key, 0)
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_COUNT:
            return None
        signals[key] = value
    for key in _TIMES:
        value = given.get(key, 0)
        if isinstance(value, bool) or not isinstance(value, int | float):
            return None
        if not math.isfinite(value) or not 0 <= value <= 86_400:
            return None
        signals[key] = round(float(value), 3)
    signals["chars"] = len(text)
    signals["flags"] = typing_flags(signals)
    return signals


def typing_flags(signals: Mapping[str, Any]) -> list[str]:
    """The flags of one answer's signals (see the module docstring)."""
    chars = int(signals.get("chars", 0))
    if chars < MIN_CHARS:
        return []
    flags = []
    brought = int(signals.get("pasted_chars", 0))
    if brought * 2 >= chars:
        flags.append("pasted")
    typed = int(signals.get("keys", 0))
    nothing = typed == 0 and not brought and not signals.get("pastes") and not signals.get("drops")
    active = float(signals.get("active_s", 0.0))
    too_fast = typed >= MIN_CHARS and active > 0 and typed / active > MAX_TYPING_RATE
    if nothing or (too_fast and "pasted" not in flags):
        flags.append("machine_like")
    return flags


def form_signals(form: Any, names: Iterable[str], texts: Mapping[str, str]) -> dict[str, Any]:
    """The measured signals of each named field of a submitted form (``integrity:NAME``
    beside the field), for the fields that have some."""
    found = {}
    for name in names:
        measured = measure_typing(form.get(f"integrity:{name}"), texts.get(name, ""))
        if measured is not None:
            found[name] = measured
    return found


def summarise(answers: Iterable[Mapping[str, Any] | None]) -> dict[str, Any]:
    """A participant's answers at a glance: how many were measured, pasted, machine-like, and
    the flags as one string for the admin pages (``pasted 2, machine_like 1``)."""
    measured = pasted = machine = unmeasured = 0
    for signals in answers:
        if not signals:
            unmeasured += 1
            continue
        measured += 1
        pasted += "pasted" in signals.get("flags", [])
        machine += "machine_like" in signals.get("flags", [])
    shown = ", ".join(f"{n} {c}" for n, c in (("pasted", pasted), ("machine_like", machine)) if c)
    return {
        "answers_measured": measured,
        "answers_unmeasured": unmeasured,
        "answers_pasted": pasted,
        "answers_machine_like": machine,
        "typing_flags": shown,
    }
