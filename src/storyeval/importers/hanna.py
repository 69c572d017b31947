"""HANNA (Chhun et al. 2022): the per-system CSV of mean ratings and metric values (``hanna``),
the raw per-annotator annotations (``hanna-raw``: ``hanna_stories_annotations.csv``), and the
LLM-written stories and LLM ratings (``hanna-llm``). See each importer's docstring for the
columns it reads.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from storyeval.base.errors import DataFileError, DataProblem
from storyeval.corpus import Judgment, Score, Story, iter_raw_records
from storyeval.importers.base import (
    ImportResult,
    Records,
    import_signature,
    parse_list,
    require_file,
    to_number,
    to_rating,
)

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

_HANNA_RATER = re.compile(r"^Human\s+(\d+)\s+(" + "|".join(HANNA_CRITERIA) + r")$")
_HANNA_TEXT_COLUMNS = ("Story", "Prompt")


def import_hanna(path: str | Path, *, mean_tolerance: float = 0.01) -> ImportResult:
    """Import a HANNA-style per-system CSV (see the module docstring).

    Parameters
    ----------
    path : str or Path
    mean_tolerance : float
        When per-rater columns exist, a mean column differing from the raters' mean by more
        than this is reported in the notes.

    Raises
    ------
    DataFileError
        ``FILE:LINE: reason`` for a missing or duplicate ``Model``, a cell that is not a JSON
        list of numbers, or lists of different lengths in one row.
    """
    file_path = require_file(path)
    result = ImportResult("hanna", str(file_path))
    problems: list[DataProblem] = []
    seen: dict[str, int] = {}
    rows: list[tuple[int, dict[str, Any]]] = []
    for number, record in iter_raw_records(file_path, fmt="csv", required=("Model",)):
        if isinstance(record, DataProblem):
            problems.append(record)
            continue
        rows.append((number, record))
    if problems:
        raise DataFileError(problems)
    if not rows:
        raise DataFileError.single(file_path, 1, "the file holds no system rows")
    layout = _HannaColumns.of([c for c in rows[0][1] if c != "Model"])
    signatures = {c: import_signature("hanna", file_path, c) for c in layout.metrics}
    mismatched = 0
    for number, record in rows:
        model = (record.get("Model") or "").strip()
        reason = "the Model cell is empty" if not model else ""
        if model in seen:
            reason = f"duplicate Model {model!r} (first on line {seen[model]})"
        if not reason:
            seen[model] = number
        parsed = reason if reason else _hanna_row(record, layout)
        if isinstance(parsed, str):
            problems.append(DataProblem(str(file_path), number, parsed))
            continue
        lists, numeric = parsed
        for position in range(len(next(iter(lists.values()), []))):
            cells = _HannaCells(model, position, lists, numeric)
            mismatched += _hanna_item(result, cells, layout, signatures, mean_tolerance)
    if problems:
        raise DataFileError(problems)
    if not result.judgments:
        raise DataFileError.single(
            file_path,
            1,
            f"no human rating column found (expected some of {', '.join(HANNA_CRITERIA)})",
        )
    result.notes.extend(_hanna_notes(result, layout, mismatched, mean_tolerance))
    return result


@dataclass(frozen=True)
class _HannaColumns:
    """The columns of a HANNA-style file by role."""

    all: list[str]
    raters: dict[str, re.Match[str] | None]
    means: list[str]
    texts: list[str]
    metrics: list[str]
    rated: set[str]

    @classmethod
    def of(cls, columns: list[str]) -> _HannaColumns:
        raters = {c: _HANNA_RATER.match(c) for c in columns}
        means = [c for c in columns if c in HANNA_CRITERIA]
        texts = [c for c in columns if c in _HANNA_TEXT_COLUMNS]
        metrics = [c for c in columns if c not in means and c not in texts and not raters[c]]
        rated = {m.group(2) for m in raters.values() if m}
        return cls(columns, raters, means, texts, metrics, rated)


@dataclass(frozen=True)
class _HannaCells:
    """One story's cells: the system's row and the story's position in its lists."""

    model: str
    position: int
    lists: dict[str, list[Any]]
    numeric: dict[str, list[float]]

    @property
    def prompt_id(self) -> str:
        return f"prompt-{self.position}"

    @property
    def item_id(self) -> str:
        return f"{self.prompt_id}:{self.model}"

    def value(self, column: str) -> float:
        return self.numeric[column][self.position]


def _hanna_row(
    record: dict[str, Any], layout: _HannaColumns
) -> tuple[dict[str, list[Any]], dict[str, list[float]]] | str:
    """A row's lists (every cell a JSON list, all of one length) and their numbers, or the
    reason it is invalid."""
    lists: dict[str, list[Any]] = {}
    errors = []
    for column in layout.all:
        try:
            lists[column] = parse_list(record.get(column))
        except (ValueError, json.JSONDecodeError) as exc:
            errors.append(f"column {column!r}: {exc}")
    if errors:
        return "; ".join(errors)
    if len({len(v) for v in lists.values()}) > 1:
        detail = ", ".join(f"{c!r}: {len(v)}" for c, v in list(lists.items())[:6])
        return f"the lists of one row must have the same length; got {detail}"
    numeric: dict[str, list[float]] = {}
    for column in layout.all:
        if column in layout.texts:
            continue
        try:
            numeric[column] = [to_number(v) for v in lists[column]]
        except ValueError as exc:
            errors.append(f"column {column!r}: {exc}")
    return "; ".join(errors) if errors else (lists, numeric)


def _hanna_item(
    result: ImportResult,
    cells: _HannaCells,
    layout: _HannaColumns,
    signatures: dict[str, str],
    tolerance: float,
) -> int:
    """Add one story's text, scores and judgments; return 1 when a mean rating disagrees
    with its raters' ratings (those are imported instead), else 0."""
    where = {"system": cells.model, "prompt_id": cells.prompt_id}
    if "Story" in layout.texts:
        story_text = cells.lists["Story"][cells.position]
        prompt_text = cells.lists["Prompt"][cells.position] if "Prompt" in layout.texts else ""
        if isinstance(story_text, str) and story_text.strip():
            extra = {"prompt_id": cells.prompt_id}
            story = Story(
                cells.item_id, str(prompt_text or ""), story_text, system=cells.model, extra=extra
            )
            result.stories.append(story)
    for column in layout.metrics:
        result.scores.append(
            Score(cells.item_id, column, cells.value(column), signatures[column], dict(where))
        )
    for column, match in layout.raters.items():
        if match and math.isfinite(cells.value(column)):
            rater = f"Human {match.group(1)}"
            result.judgments.append(
                Judgment(
                    cells.item_id, rater, match.group(2), cells.value(column), extra=dict(where)
                )
            )
    mismatched = 0
    for criterion in layout.means:
        value = cells.value(criterion)
        if criterion in layout.rated:
            raters = [
                cells.value(c)
                for c, m in layout.raters.items()
                if m and m.group(2) == criterion and math.isfinite(cells.value(c))
            ]
            mean = sum(raters) / len(raters) if raters else value
            mismatched += int(math.isfinite(value) and abs(mean - value) > tolerance)
        elif math.isfinite(value):
            extra = {**where, "aggregate": "mean"}
            result.judgments.append(Judgment(cells.item_id, "mean", criterion, value, extra=extra))
    return mismatched


def _hanna_notes(
    result: ImportResult, layout: _HannaColumns, mismatched: int, tolerance: float
) -> list[str]:
    notes = []
    if not result.stories:
        notes.append(
            "no story texts in the file (no Story column): stories.jsonl is not written; the "
            "score and judgment records carry system and prompt_id"
        )
    if mismatched:
        notes.append(
            f"{mismatched} mean rating(s) differ from the mean of the per-rater columns by more "
            f"than {tolerance}; the per-rater ratings were imported"
        )
    only_means = [c for c in layout.means if c not in layout.rated]
    if only_means:
        notes.append(
            f"criteria {', '.join(only_means)} have only mean ratings (rater_id 'mean'): no "
            "agreement can be computed for them"
        )
    return notes


def import_hanna_raw(path: str | Path, result: Records) -> Records:
    """Import HANNA's raw per-annotator file (see the module docstring).

    Raises
    ------
    DataFileError
        ``FILE:LINE: reason`` for a missing column, an empty id or text, a rating that is not
        a number, or a story id whose texts differ between rows.
    """
    from storyeval.corpus import prompt_key

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
                value = to_rating(record[criterion])
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


_RATER_COLUMNS = ("llm", "rater", "evaluator", "annotator")
_EVAL_PROMPT_COLUMNS = ("eval prompt", "prompt id", "eval prompt id", "prompting", "template")


def _key(name: str) -> str:
    return " ".join(name.replace("_", " ").split()).lower()


def _columns(header: list[str]) -> dict[str, str]:
    """Our names of the file's columns (``story_id``, ``rater``, a criterion...) -> theirs."""
    by_key = {_key(column): column for column in header}
    found: dict[str, str] = {}
    for ours, candidates in (
        ("story_id", ("story id",)),
        ("prompt", ("prompt",)),
        ("story", ("story",)),
        ("model", ("model",)),
        ("human", ("human",)),
        ("rater", _RATER_COLUMNS),
        ("eval_prompt", _EVAL_PROMPT_COLUMNS),
    ):
        for candidate in candidates:
            if candidate in by_key:
                found[ours] = by_key[candidate]
                break
    for criterion in HANNA_CRITERIA:
        if _key(criterion) in by_key:
            found[criterion] = by_key[_key(criterion)]
    return found


def _checked_columns(file_path: Path, header: list[str]) -> tuple[dict[str, str], list[str]]:
    """The columns (see :func:`_columns`) and the criteria rated; a header without what the
    format needs is a :class:`DataFileError` on line 1."""
    columns = _columns(header)
    criteria = [c for c in HANNA_CRITERIA if c in columns]
    if "story_id" not in columns:
        raise DataFileError.single(file_path, 1, "no 'Story ID' column")
    if "story" not in columns and not criteria:
        raise DataFileError.single(
            file_path, 1, f"neither a Story column nor a rating ({', '.join(HANNA_CRITERIA)})"
        )
    if criteria and "rater" not in columns:
        raise DataFileError.single(
            file_path, 1, "ratings without a rater column (LLM, Rater, Evaluator or Annotator)"
        )
    return columns, criteria


def _cell(record: dict[str, Any], columns: dict[str, str], name: str) -> str:
    column = columns.get(name)
    return str(record.get(column) or "").strip() if column else ""


def import_hanna_llm(path: str | Path, result: Records) -> Records:
    """Import HANNA's LLM stories or LLM ratings (see the module docstring).

    Raises
    ------
    DataFileError
        ``FILE:LINE: reason`` for a file without ``Story ID``, ratings without a rater
        column, an empty story id or rater, a rating that is not a number, or a story whose
        text differs between rows.
    """
    from storyeval.corpus import prompt_key

    file_path = Path(path)
    records = list(iter_raw_records(file_path, fmt="csv"))
    problems = [record for _, record in records if isinstance(record, DataProblem)]
    rows = [(n, r) for n, r in records if not isinstance(r, DataProblem)]
    if problems:
        raise DataFileError(problems)
    if not rows:
        raise DataFileError.single(file_path, 1, "the file holds no rows")
    columns, criteria = _checked_columns(file_path, list(rows[0][1]))
    stories: dict[str, tuple[int, Story]] = {}
    repeats: dict[tuple[str, str], int] = {}
    missing = 0
    for number, record in rows:
        story_id = _cell(record, columns, "story_id")
        if not story_id:
            problems.append(DataProblem(str(file_path), number, "the Story ID is empty"))
            continue
        if "story" in columns:
            problem = _add_story(record, columns, story_id, number, stories, prompt_key)
            if problem:
                problems.append(DataProblem(str(file_path), number, problem))
                continue
        if not criteria:
            continue
        rater = _rater(record, columns)
        if not rater:
            problems.append(DataProblem(str(file_path), number, "the rater (LLM) is empty"))
            continue
        repeat = repeats.get((story_id, rater), 0)
        repeats[(story_id, rater)] = repeat + 1
        extra = _judgment_extra(record, columns, stories.get(story_id), repeat)
        extra["judge"] = rater
        if repeat:  # a judgment is one per rater, item and criterion: a repeat is a rater
            rater = f"{rater}#{repeat + 1}"
        for criterion in criteria:
            cell = _cell(record, columns, criterion)
            missing += not cell
            value = _rating_or_none(cell)
            if cell and value is None:
                reason = f"{criterion}: not a rating: {cell!r}"
                problems.append(DataProblem(str(file_path), number, reason))
            elif value is not None:
                result.judgments.append(
                    Judgment(story_id, rater, criterion, value, extra=dict(extra))
                )
    if problems:
        raise DataFileError(problems)
    result.stories = [story for _, story in stories.values()]
    _notes(result, criteria, missing)
    return result


def _rating_or_none(cell: str) -> float | None:
    try:
        return to_rating(cell) if cell else None
    except ValueError:
        return None


def _rater(record: dict[str, Any], columns: dict[str, str]) -> str:
    llm = _cell(record, columns, "rater")
    eval_prompt = _cell(record, columns, "eval_prompt")
    return f"{llm}|{eval_prompt}" if llm and eval_prompt else llm


def _add_story(
    record: dict[str, Any],
    columns: dict[str, str],
    story_id: str,
    number: int,
    stories: dict[str, tuple[int, Story]],
    prompt_key: Any,
) -> str | None:
    """Record the row's story; a reason when it is empty or differs from an earlier row."""
    text = _cell(record, columns, "story")
    if not text:
        return "the Story is empty"
    prompt = _cell(record, columns, "prompt")
    human = _cell(record, columns, "human")
    story = Story(
        story_id,
        prompt,
        text,
        reference=human or None,
        system=_cell(record, columns, "model") or None,
        extra={"prompt_id": prompt_key(prompt) or story_id},
    )
    first = stories.setdefault(story_id, (number, story))
    if first[1].story != story.story or first[1].system != story.system:
        return f"story {story_id!r} differs from line {first[0]}"
    return None


def _judgment_extra(
    record: dict[str, Any], columns: dict[str, str], story: tuple[int, Story] | None, repeat: int
) -> dict[str, Any]:
    extra: dict[str, Any] = {"rater_kind": "llm", "repeat": repeat}
    system = story[1].system if story else _cell(record, columns, "model")
    if system:
        extra["system"] = system
    if story is not None:
        extra["prompt_id"] = story[1].extra["prompt_id"]
    return extra


def _notes(result: Records, criteria: list[str], missing: int) -> None:
    if result.judgments:
        raters = sorted({j.extra["judge"] for j in result.judgments})
        shown = ", ".join(raters[:6]) + (" ..." if len(raters) > 6 else "")
        result.notes.append(
            f"{len(raters)} LLM rater(s) (LLM|eval prompt): {shown}; criteria: {', '.join(criteria)}"
        )
    if missing:
        result.notes.append(f"{missing} empty rating cell(s) left out (not imputed)")
