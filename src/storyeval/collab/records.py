"""The sessions file: one JSON object per writing session (JSONL), as the study server exports
it and ``storyeval cyoa analyse`` reads it.

Each record::

    {"format": "storyeval-writing-session", "format_version": 1,
     "session_id": "cyoa-example/p00001", "kind": "cyoa" | "mil", "session": "cyoa-example",
     "participant": "p00001", "status": "complete" | "incomplete",
     "prompt": {"id": ..., "text": ..., "image": ...} | null,
     "generators": {"nucleus": {"model": ..., "decoding": {...}, ...}, "top-k": {...}},
     "turns": [
        {"index": 1, "round": 1, "author": "writer", "text": "...", "time_s": 41.2, ...},
        {"index": 2, "round": 1, "author": "suggestion",
         "suggestions": [{"generator": "top-k", "position": 1, "text": "...",
                          "signature": "continue|model:...", "seed": 123, "generation_s": 2.1},
                         {"generator": "nucleus", "position": 2, "text": "...", ...}],
         "events": [{"t": ..., "action": "choose" | "switch" | "push" | "submit",
                     "generator": "nucleus"}],
         "chosen": "nucleus", "switches": 0, "text": "the edited text the writer added", ...}],
     "story": "...", "survey": {"likert": [{"name": "happy", "statement": "...", "value": 4,
                                            "scale": 5}],
                                "questions": [{"name": "why_choose", "question": "...",
                                               "answer": "..."}]}}

Only the fields the analysis needs are required; timings and signatures are kept as they are.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from storyeval.base.errors import DataFileError, DataProblem
from storyeval.base.io import atomic_write
from storyeval.corpus import iter_raw_records

FORMAT = "storyeval-writing-session"


@dataclass(frozen=True)
class Suggestion:
    """One generator's suggestion in a round: its generator, its position on the page and its text."""

    generator: str
    position: int
    text: str


@dataclass(frozen=True)
class SuggestionTurn:
    """A turn that started from machine suggestions: what was offered, chosen and kept."""

    round: int
    suggestions: tuple[Suggestion, ...]
    chosen: str
    text: str
    switches: int = 0

    @property
    def chosen_text(self) -> str:
        """The text of the suggestion the writer chose."""
        return next(s.text for s in self.suggestions if s.generator == self.chosen)


@dataclass(frozen=True)
class WriterTurn:
    """A round's text written by the writer alone."""

    round: int
    text: str


@dataclass(frozen=True)
class LikertAnswer:
    """An answer to a Likert statement of the survey (value on a 1..scale scale)."""

    name: str
    statement: str
    value: int
    scale: int


@dataclass(frozen=True)
class OpenAnswer:
    """An answer to an open question of the survey."""

    name: str
    question: str
    answer: str


@dataclass(frozen=True)
class SessionRecord:
    """One writing session read from a sessions file (submitted turns only)."""

    session_id: str
    kind: str
    session: str
    participant: str
    status: str
    generators: tuple[str, ...]
    writer_turns: tuple[WriterTurn, ...]
    suggestion_turns: tuple[SuggestionTurn, ...]
    likert: tuple[LikertAnswer, ...]
    answers: tuple[OpenAnswer, ...]
    raw: Mapping[str, Any] = field(repr=False, compare=False, default_factory=dict)
    #: ``solo`` or ``mil`` for a machine-in-the-loop story (Clark 2021, ch. 2); None for CYOA
    condition: str | None = None
    #: the answer to "Would you use this system again?" (machine-in-the-loop writers)
    use_again: str | None = None

    @property
    def complete(self) -> bool:
        """Whether the writer finished the story and the survey."""
        return self.status == "complete"


class _Bad(ValueError):
    pass


def _need(mapping: Mapping[str, Any], key: str, kind: type | tuple[type, ...], where: str) -> Any:
    if key not in mapping or mapping[key] is None:
        raise _Bad(f"{where}{key}: required field is missing")
    value = mapping[key]
    if isinstance(value, bool) and kind is not bool:
        raise _Bad(f"{where}{key}: must be {_names(kind)}; got {value!r}")
    if not isinstance(value, kind):
        raise _Bad(f"{where}{key}: must be {_names(kind)}; got {type(value).__name__}")
    return value


def _names(kind: type | tuple[type, ...]) -> str:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    words = {
        str: "a string",
        int: "an integer",
        list: "a list",
        dict: "an object",
        float: "a number",
    }
    return " or ".join(words.get(k, k.__name__) for k in kinds)


def _turn(turn: Any, label: str, generators: tuple[str, ...]) -> WriterTurn | SuggestionTurn | None:
    """One submitted turn (None for the open turn of an incomplete session)."""
    where = f"{label}."
    if not isinstance(turn, dict):
        raise _Bad(f"{label}: must be an object")
    author = _need(turn, "author", str, where)
    round_number = _need(turn, "round", int, where)
    if round_number < 1:
        raise _Bad(f"{where}round: must be >= 1; got {round_number}")
    text = turn.get("text")
    if text is None or turn.get("submitted_at", 0) is None:
        return None
    if not isinstance(text, str):
        raise _Bad(f"{where}text: must be a string")
    if author == "writer":
        return WriterTurn(round_number, text)
    if author != "suggestion":
        raise _Bad(f"{where}author: must be writer or suggestion; got {author!r}")
    items = [
        _suggestion(item, f"{where}suggestions[{i}]", generators)
        for i, item in enumerate(_need(turn, "suggestions", list, where))
    ]
    if sorted(s.generator for s in items) != sorted(generators):
        raise _Bad(
            f"{where}suggestions: need one suggestion from each generator {list(generators)}"
        )
    chosen = _need(turn, "chosen", str, where)
    if chosen not in generators:
        raise _Bad(f"{where}chosen: {chosen!r} is not one of {list(generators)}")
    switches = turn.get("switches", 0)
    if not isinstance(switches, int) or isinstance(switches, bool) or switches < 0:
        raise _Bad(f"{where}switches: must be a non-negative integer")
    return SuggestionTurn(round_number, tuple(items), chosen, text, switches)


def _suggestion(item: Any, label: str, generators: tuple[str, ...]) -> Suggestion:
    where = f"{label}."
    if not isinstance(item, dict):
        raise _Bad(f"{label}: must be an object")
    name = _need(item, "generator", str, where)
    if name not in generators:
        raise _Bad(
            f"{where}generator: {name!r} is not one of the session's generators {list(generators)}"
        )
    return Suggestion(
        name, int(_need(item, "position", int, where)), _need(item, "text", str, where)
    )


def _survey(survey: Any) -> tuple[list[LikertAnswer], list[OpenAnswer]]:
    likert: list[LikertAnswer] = []
    answers: list[OpenAnswer] = []
    if survey is None:
        return likert, answers
    if not isinstance(survey, dict):
        raise _Bad("survey: must be an object or null")
    for index, item in enumerate(survey.get("likert") or []):
        where = f"survey.likert[{index}]."
        value = _need(item, "value", int, where)
        scale = _need(item, "scale", int, where)
        if not 1 <= value <= scale:
            raise _Bad(f"{where}value: must be between 1 and {scale}; got {value}")
        name = _need(item, "name", str, where)
        likert.append(LikertAnswer(name, str(item.get("statement", "")), value, scale))
    for index, item in enumerate(survey.get("questions") or []):
        where = f"survey.questions[{index}]."
        name = _need(item, "name", str, where)
        answers.append(
            OpenAnswer(name, str(item.get("question", "")), str(item.get("answer") or ""))
        )
    return likert, answers


def parse_session(record: Mapping[str, Any]) -> SessionRecord:
    """Validate one sessions-file record; raises ``ValueError`` naming the field at fault."""
    if record.get("format") != FORMAT:
        raise _Bad(f"format: must be {FORMAT!r}; got {record.get('format')!r}")
    session_id = _need(record, "session_id", str, "")
    kind = _need(record, "kind", str, "")
    if kind not in ("cyoa", "mil"):
        raise _Bad(f"kind: must be one of cyoa, mil; got {kind!r}")
    status = _need(record, "status", str, "")
    if status not in ("complete", "incomplete"):
        raise _Bad(f"status: must be one of complete, incomplete; got {status!r}")
    generators_map = _need(record, "generators", dict, "")
    generators = tuple(str(name) for name in generators_map)
    expected = 2 if kind == "cyoa" else 1
    if len(generators) != expected:
        raise _Bad(
            f"generators: a {kind} session has {expected} generator(s); got {len(generators)}"
        )
    writer: list[WriterTurn] = []
    suggested: list[SuggestionTurn] = []
    for index, turn in enumerate(_need(record, "turns", list, "")):
        parsed = _turn(turn, f"turns[{index}]", generators)
        if isinstance(parsed, WriterTurn):
            writer.append(parsed)
        elif parsed is not None:
            suggested.append(parsed)
    survey = record.get("survey")
    likert, answers = _survey(survey)
    if status == "complete" and survey is None:
        raise _Bad("survey: a complete session needs its survey answers")
    condition = _condition(record, kind)
    use_again = (survey or {}).get("use_again")
    if use_again is not None and not isinstance(use_again, str):
        raise _Bad("survey.use_again: must be text")
    return SessionRecord(
        session_id=session_id,
        kind=kind,
        session=str(record.get("session", "")),
        participant=str(record.get("participant", "")),
        status=status,
        generators=generators,
        writer_turns=tuple(writer),
        suggestion_turns=tuple(suggested),
        likert=tuple(likert),
        answers=tuple(answers),
        raw=dict(record),
        condition=condition,
        use_again=use_again,
    )


def _condition(record: Mapping[str, Any], kind: str) -> str | None:
    """A MIL story's condition (records written before conditions existed are ``mil``)."""
    if kind != "mil":
        return None
    condition = record.get("condition") or "mil"
    if condition not in ("solo", "mil"):
        raise _Bad(f"condition: must be solo or mil; got {condition!r}")
    return str(condition)


def read_sessions(path: str | Path) -> list[SessionRecord]:
    """Read and validate a sessions file (JSONL).

    Raises
    ------
    DataFileError
        Listing every bad line as ``FILE:LINE: field: reason`` (malformed JSON, a missing or
        wrong field, an unknown generator, a duplicate ``session_id``).
    """
    problems: list[DataProblem] = []
    records: list[SessionRecord] = []
    first: dict[str, int] = {}
    for number, item in iter_raw_records(path, fmt="jsonl"):
        if isinstance(item, DataProblem):
            problems.append(item)
            continue
        try:
            record = parse_session(item)
        except (_Bad, TypeError, ValueError) as exc:
            problems.append(DataProblem(str(path), number, str(exc)))
            continue
        if record.session_id in first:
            problems.append(
                DataProblem(
                    str(path),
                    number,
                    f"duplicate session_id {record.session_id!r} (first seen on line {first[record.session_id]})",
                )
            )
            continue
        first[record.session_id] = number
        records.append(record)
    if problems:
        raise DataFileError(problems)
    if not records:
        raise DataFileError.single(path, 1, "the file holds no writing sessions")
    return records


def write_sessions(path: str | Path, records: Iterable[Mapping[str, Any]]) -> int:
    """Write exported session records as JSONL, atomically; returns how many."""
    count = 0
    with atomic_write(path) as fh:
        for record in records:
            fh.write(json.dumps(record, ensure_ascii=False, allow_nan=False) + "\n")
            count += 1
    return count
