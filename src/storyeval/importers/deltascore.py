"""DeltaScore's JSONL: ``title`` (the prompt), ``story``, ``model``, ``reference`` and the mean
rating of each aspect (numbers or numeric strings); every other field with a numeric value is an
aspect. The ratings are means, imported with ``rater_id`` ``mean``; ids are prefixed with the
file's name (the ids restart in every DeltaScore file).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from storyeval.base.errors import DataFileError, DataProblem
from storyeval.corpus import Judgment, Story, iter_raw_records
from storyeval.importers.base import (
    ImportResult,
    require_file,
    to_number,
)

_DELTASCORE_TEXT = ("title", "story", "model", "reference", "id")


def _is_numeric(value: Any) -> bool:
    if isinstance(value, bool):
        return False
    if isinstance(value, int | float):
        return True
    if isinstance(value, str):
        try:
            float(value.strip())
        except ValueError:
            return False
        return bool(value.strip())
    return False


def _deltascore_aspects(
    records: Sequence[tuple[int, dict[str, Any]]], aspects: Sequence[str] | None
) -> list[str]:
    """The rating fields: those given, else every non-text field with a number somewhere."""
    if aspects is not None:
        return list(aspects)
    found: dict[str, None] = {}
    for _, record in records:
        for key, value in record.items():
            if key not in _DELTASCORE_TEXT and _is_numeric(value):
                found[key] = None
    return list(found)


def _deltascore_ratings(
    record: Mapping[str, Any], aspects: Sequence[str]
) -> tuple[dict[str, float], list[str]]:
    """The record's ratings, and the reasons any of them is invalid."""
    ratings: dict[str, float] = {}
    reasons = []
    for aspect in aspects:
        if aspect not in record or record[aspect] is None or record[aspect] == "":
            continue
        try:
            value = to_number(record[aspect])
        except ValueError:
            reasons.append(f"aspect {aspect!r} must be a number; got {record[aspect]!r}")
            continue
        if not math.isfinite(value):
            reasons.append(f"aspect {aspect!r} is not finite")
            continue
        ratings[aspect] = value
    return ratings, reasons


def _deltascore_story(
    record: Mapping[str, Any], item_id: str, aspects: Sequence[str], prompt_id: str | None
) -> Story:
    extra = {k: v for k, v in record.items() if k not in _DELTASCORE_TEXT and k not in aspects}
    extra["prompt_id"] = prompt_id
    reference = record.get("reference")
    return Story(
        item_id,
        str(record["title"]),
        str(record["story"]),
        reference=str(reference) if isinstance(reference, str) and reference.strip() else None,
        system=str(record["model"]),
        extra=extra,
    )


def import_deltascore(path: str | Path, *, aspects: Sequence[str] | None = None) -> ImportResult:
    """Import DeltaScore-style JSONL (``title``, ``story``, ``model``, ``reference``, aspects).

    Item ids are ``FILESTEM:ID`` (``FILESTEM:d00001`` for records without an ``id``): the ids
    of DeltaScore's files restart in every file, so imports of several files can be pooled.

    Parameters
    ----------
    path : str or Path
    aspects : sequence of str, optional
        The rating fields; by default every field other than ``title``, ``story``, ``model``,
        ``reference`` and ``id`` whose value is a number or a numeric string in some record.

    Raises
    ------
    DataFileError
        ``FILE:LINE: reason`` for malformed JSON, a missing ``story``, ``title`` or ``model``,
        a non-numeric rating, or a duplicate ``id``.
    """
    from storyeval.corpus import prompt_key

    file_path = require_file(path)
    result = ImportResult("deltascore", str(file_path))
    problems: list[DataProblem] = []
    records: list[tuple[int, dict[str, Any]]] = []
    for number, record in iter_raw_records(file_path, fmt="jsonl"):
        if isinstance(record, DataProblem):
            problems.append(record)
        else:
            records.append((number, record))
    if problems:
        raise DataFileError(problems)
    if not records:
        raise DataFileError.single(file_path, 1, "the file holds no records")
    chosen = _deltascore_aspects(records, aspects)
    if not chosen:
        raise DataFileError.single(file_path, records[0][0], "no numeric rating field found")
    seen: dict[str, int] = {}
    for ordinal, (number, record) in enumerate(records, start=1):
        missing = [k for k in ("title", "story", "model") if not str(record.get(k) or "").strip()]
        local = str(record["id"]) if record.get("id") not in (None, "") else f"d{ordinal:05d}"
        item_id = f"{file_path.stem}:{local}"  # ids restart in every file: pooled imports collide
        if missing or item_id in seen:
            reason = (
                f"missing field(s) {', '.join(missing)}"
                if missing
                else f"duplicate id {item_id!r} (first on line {seen[item_id]})"
            )
            problems.append(DataProblem(str(file_path), number, reason))
            continue
        seen[item_id] = number
        ratings, reasons = _deltascore_ratings(record, chosen)
        problems += [DataProblem(str(file_path), number, reason) for reason in reasons]
        story = _deltascore_story(record, item_id, chosen, prompt_key(str(record["title"])))
        result.stories.append(story)
        judgment_extra = {"system": story.system, "prompt_id": story.extra["prompt_id"]}
        for aspect, value in ratings.items():
            extra = {**judgment_extra, "aggregate": "mean"}
            result.judgments.append(Judgment(item_id, "mean", aspect, value, extra=extra))
    if problems:
        raise DataFileError(problems)
    result.notes.append(f"aspects imported as mean ratings (rater_id 'mean'): {', '.join(chosen)}")
    return result
