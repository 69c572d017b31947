"""Importers for the public story-rating data sets imported whole (registered in
:data:`storyeval.importers.IMPORTERS`).

Formats
-------
``hanna-raw``
    HANNA's raw annotations (``hanna_stories_annotations.csv``; columns documented in its
    README): one row per story and annotator with ``Story ID``, ``Prompt``, ``Human`` (the
    human story for the prompt: the reference), ``Story``, ``Model``, the six criteria
    (``Relevance`` ... ``Complexity``, 1-5), ``Worker ID``, ``Assignment ID``, ``Work time in
    seconds`` and ``Name``. Gives the stories with texts and references, one judgment per
    annotator and criterion (``rater_id`` = the worker, ``time_s`` = the work time divided by
    the six ratings it covers is *not* done: ``time_s`` is the assignment's work time, as the
    time filters of Karpinska et al. (2021) use it), so agreement, the human ceiling and time filtering work.
``openmeva``
    OpenMEVA's MAGS JSON: ``{id: {"prompt", "gold_response", "gen": {model: {"text",
    "score": [ratings]}}}}``. One story per id and model (``ID:MODEL``), the gold response as
    its reference, one judgment per rating (``rater_id`` ``a1``, ``a2``..., criterion
    ``overall``; the positions are slots, not people).
``pairwise``
    Pairwise preference files in the style of LitBench and WritingPreferenceBench (JSONL or
    CSV), one record per pair: ``prompt`` and either ``chosen_story``/``rejected_story`` (or
    ``chosen``/``rejected``), or ``story_a``/``story_b`` with ``preferred`` (``a``, ``b`` or
    ``tie``); optional ``id`` and ``criterion``. Gives both stories (``system`` = the story's
    own id, so a pairwise judge compares exactly the two) and one comparison per pair in the
    format of ``storyeval rank`` (``comparisons.jsonl``), for ranking and for judge
    evaluation.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

from storyeval.corpus import Judgment, Story, iter_raw_records
from storyeval.errors import DataFileError, DataProblem

HANNA_CRITERIA: tuple[str, ...] = (
    "Relevance",
    "Coherence",
    "Empathy",
    "Surprise",
    "Engagement",
    "Complexity",
)


HANNA_RAW_COLUMNS = (
    "Story ID",
    "Prompt",
    "Human",
    "Story",
    "Model",
    *HANNA_CRITERIA,
    "Worker ID",
)


class Records(Protocol):
    """Where an importer puts what it read (:class:`storyeval.importers.ImportResult`)."""

    stories: list[Story]
    judgments: list[Judgment]
    comparisons: list[dict[str, Any]]
    notes: list[str]


def _rating(value: Any) -> float:
    number = float(str(value).strip())
    if not math.isfinite(number):
        raise ValueError("not finite")
    return number


# --------------------------------------------------------------------------- HANNA raw


def import_hanna_raw(path: str | Path, result: Records) -> Records:
    """Import HANNA's raw per-annotator file (see the module docstring).

    Raises
    ------
    DataFileError
        ``FILE:LINE: reason`` for a missing column, an empty id or text, a rating that is not
        a number, or a story id whose texts differ between rows.
    """
    from storyeval.meta.data import prompt_key

    file_path = Path(path)
    problems: list[DataProblem] = []
    stories: dict[str, tuple[int, Story]] = {}
    for number, record in iter_raw_records(file_path, fmt="csv", required=HANNA_RAW_COLUMNS):
        if isinstance(record, DataProblem):
            problems.append(record)
            continue
        story_id = str(record.get("Story ID") or "").strip()
        worker = str(record.get("Worker ID") or "").strip()
        if not story_id or not worker or not str(record.get("Story") or "").strip():
            problems.append(
                DataProblem(
                    str(file_path), number, "Story ID, Worker ID and Story must not be empty"
                )
            )
            continue
        story = Story(
            story_id,
            str(record["Prompt"] or ""),
            str(record["Story"]),
            reference=str(record["Human"]) if str(record.get("Human") or "").strip() else None,
            system=str(record["Model"] or "").strip() or None,
            extra={"prompt_id": prompt_key(str(record["Prompt"] or "")) or story_id},
        )
        seen = stories.setdefault(story_id, (number, story))
        if seen[1].story != story.story or seen[1].system != story.system:
            problems.append(
                DataProblem(
                    str(file_path), number, f"story {story_id!r} differs from line {seen[0]}"
                )
            )
            continue
        time_s = _work_time(record.get("Work time in seconds"))
        extra = {
            "system": story.system,
            "prompt_id": story.extra["prompt_id"],
            "assignment": record.get("Assignment ID"),
        }
        for criterion in HANNA_CRITERIA:
            try:
                value = _rating(record[criterion])
            except (TypeError, ValueError):
                problems.append(
                    DataProblem(
                        str(file_path), number, f"{criterion}: not a rating: {record[criterion]!r}"
                    )
                )
                continue
            result.judgments.append(
                Judgment(
                    story_id,
                    worker,
                    criterion,
                    value,
                    time_s=time_s,
                    study="hanna",
                    extra=dict(extra),
                )
            )
    if problems:
        raise DataFileError(problems)
    if not stories:
        raise DataFileError.single(file_path, 1, "the file holds no annotations")
    result.stories = [story for _, story in stories.values()]
    workers = {j.rater_id for j in result.judgments}
    result.notes.append(
        f"{len(result.stories)} stories, {len(workers)} annotators, "
        f"{len(result.judgments) // len(HANNA_CRITERIA)} annotations"
    )
    return result


def _work_time(value: Any) -> float | None:
    try:
        seconds = float(str(value).strip())
    except (TypeError, ValueError):
        return None
    return seconds if math.isfinite(seconds) and seconds >= 0 else None


# --------------------------------------------------------------------------- OpenMEVA


def _line_of(text: str, key: str) -> int:
    """The line of the first ``"key":`` in a JSON text (1 when not found)."""
    position = text.find(json.dumps(key) + ":")
    return text.count("\n", 0, position) + 1 if position >= 0 else 1


def import_openmeva(path: str | Path, result: Records) -> Records:
    """Import OpenMEVA's MAGS JSON (see the module docstring).

    Raises
    ------
    DataFileError
        Malformed JSON (with its line), or an entry without ``prompt``, ``gen``, a text or a
        list of numeric scores (with the entry's line).
    """
    from storyeval.meta.data import prompt_key

    file_path = Path(path)
    text = file_path.read_text(encoding="utf-8")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise DataFileError.single(file_path, exc.lineno, f"malformed JSON: {exc.msg}") from None
    if not isinstance(data, dict):
        raise DataFileError.single(file_path, 1, "expected a JSON object of entries by id")
    problems: list[DataProblem] = []
    for entry_id, entry in data.items():
        line = _line_of(text, entry_id)
        reason = _openmeva_problem(entry)
        if reason:
            problems.append(DataProblem(str(file_path), line, f"entry {entry_id!r}: {reason}"))
            continue
        prompt = str(entry["prompt"])
        prompt_id = prompt_key(prompt) or str(entry_id)
        for model, generated in entry["gen"].items():
            item_id = f"{entry_id}:{model}"
            extra = {"prompt_id": prompt_id}
            result.stories.append(
                Story(
                    item_id,
                    prompt,
                    str(generated["text"]),
                    reference=entry.get("gold_response"),
                    system=str(model),
                    extra=extra,
                )
            )
            for slot, score in enumerate(generated["score"], start=1):
                result.judgments.append(
                    Judgment(
                        item_id,
                        f"a{slot}",
                        "overall",
                        float(score),
                        extra={"system": str(model), "prompt_id": prompt_id},
                    )
                )
    if problems:
        raise DataFileError(problems)
    if not result.stories:
        raise DataFileError.single(file_path, 1, "the file holds no generated stories")
    result.notes.append(
        "scores imported with rater_id a1, a2... (slots, not people), criterion 'overall'"
    )
    return result


def _openmeva_problem(entry: Any) -> str:
    if not isinstance(entry, dict):
        return "must be an object"
    if not isinstance(entry.get("prompt"), str) or not isinstance(entry.get("gen"), dict):
        return "needs 'prompt' (a string) and 'gen' (an object by model)"
    for model, generated in entry["gen"].items():
        if not isinstance(generated, dict) or not isinstance(generated.get("text"), str):
            return f"gen.{model}: needs 'text'"
        scores = generated.get("score")
        if not isinstance(scores, list) or not all(
            isinstance(s, int | float) and not isinstance(s, bool) and math.isfinite(s)
            for s in scores
        ):
            return f"gen.{model}.score: must be a list of numbers"
    return ""


# --------------------------------------------------------------------------- pairwise


def _pair_texts(record: Mapping[str, Any]) -> tuple[str, str, str] | str:
    """``(story_a, story_b, winner)`` with winner ``a``/``b``/``tie``, or a reason."""
    chosen = record.get("chosen_story", record.get("chosen"))
    rejected = record.get("rejected_story", record.get("rejected"))
    if chosen is not None or rejected is not None:
        if not str(chosen or "").strip() or not str(rejected or "").strip():
            return "chosen and rejected stories must not be empty"
        return str(chosen), str(rejected), "a"
    a, b = record.get("story_a"), record.get("story_b")
    preferred = str(record.get("preferred") or "").strip().lower()
    if not str(a or "").strip() or not str(b or "").strip():
        return "needs chosen_story/rejected_story, chosen/rejected, or story_a/story_b"
    if preferred not in ("a", "b", "tie"):
        return f"preferred must be a, b or tie; got {record.get('preferred')!r}"
    return str(a), str(b), preferred


def import_pairwise(path: str | Path, result: Records) -> Records:
    """Import a pairwise preference file (see the module docstring).

    Raises
    ------
    DataFileError
        ``FILE:LINE: reason`` for a record without a prompt, two stories and a preference,
        or a duplicate id.
    """
    from storyeval.meta.data import prompt_key

    file_path = Path(path)
    problems: list[DataProblem] = []
    seen: dict[str, int] = {}
    for number, record in iter_raw_records(file_path):
        if isinstance(record, DataProblem):
            problems.append(record)
            continue
        pair_id = str(record.get("id") or f"pair{number:06d}")
        parsed = _pair_texts(record)
        if isinstance(parsed, str) or pair_id in seen:
            reason = (
                parsed
                if isinstance(parsed, str)
                else f"duplicate id {pair_id!r} (first on line {seen[pair_id]})"
            )
            problems.append(DataProblem(str(file_path), number, reason))
            continue
        seen[pair_id] = number
        story_a, story_b, winner = parsed
        prompt = str(record.get("prompt") or "")
        prompt_id = prompt_key(prompt) or pair_id
        ids = (f"{pair_id}-a", f"{pair_id}-b")
        for story_id, text in zip(ids, (story_a, story_b), strict=True):
            result.stories.append(
                Story(
                    story_id,
                    prompt,
                    text,
                    system=story_id,
                    extra={"prompt_id": prompt_id, "pair": pair_id},
                )
            )
        result.comparisons.append(
            {
                "item_id": pair_id,
                "prompt_id": prompt_id,
                "system_a": ids[0],
                "system_b": ids[1],
                "winner": {"a": ids[0], "b": ids[1], "tie": "tie"}[winner],
                "rater_id": str(record.get("rater_id") or "dataset"),
                "criterion": str(record.get("criterion") or "preference"),
            }
        )
    if problems:
        raise DataFileError(problems)
    if not result.comparisons:
        raise DataFileError.single(file_path, 1, "the file holds no pairs")
    return result
