"""Importers for public story-evaluation benchmark formats.

Each importer reads one file and returns canonical records (:class:`~storyeval.corpus.Story`,
:class:`~storyeval.corpus.Judgment`, :class:`~storyeval.corpus.Score`); :func:`write_import`
writes them as ``stories.jsonl``, ``judgments.jsonl`` and (when the file carries metric
values) ``scores.jsonl``. Judgment and score records carry the story's ``system`` and
``prompt_id`` so that the meta-evaluation can group them without the story file. Every
problem is reported as ``FILE:LINE: reason``.

Formats
-------
``union``
    UNION's annotated stories (Guan & Huang 2020): one story per line,
    ``ID ||| story text ||| 0/1 labels separated by spaces, one per annotator``. The text
    includes the leading context: its first ``context_sentences`` sentences become the
    ``prompt`` and the rest the ``story`` (the full text is kept as ``text``). Each label is a
    binary judgment on the criterion ``reasonable`` by annotator slot ``a1``, ``a2``... (the
    slots are positions, not people: use Krippendorff's alpha, not ICC, on them). The
    release's side files are read on request: the contexts (``reference_ipt.txt``, whole
    multi-sentence prompts), the human continuations (``reference_opt.txt``, as references),
    the ``metric_output`` directory (a score file per metric) and the error types of
    ``ant_data_all.txt`` (see :mod:`storyeval.importers_union`).
``hanna``
    A CSV with one row per system (column ``Model``; the human-written stories are the row
    ``Human``) whose other cells are JSON lists of per-story values, the list position being
    the prompt (``prompt_id`` = ``prompt-<position>``, from 0). ``Relevance``, ``Coherence``,
    ``Empathy``, ``Surprise``, ``Engagement``, ``Complexity`` hold the mean human rating per
    story; ``Human <n> <Criterion>`` columns, when present, one rater's ratings (then these
    are imported and the mean column is checked against them). Every other column is a metric,
    its name kept verbatim. Columns ``Story`` and ``Prompt`` holding lists of strings, when
    present, give the texts; without them no story file is written (the metric and judgment
    files carry ``system`` and ``prompt_id``).
``deltascore``
    JSONL with ``title`` (the prompt), ``story``, ``model``, ``reference`` and the mean rating
    of each aspect (numbers or numeric strings); every other field with a numeric value is an
    aspect. The ratings are means, imported with ``rater_id`` ``mean``.
``judgments``
    Our own long-format judgments (JSONL or CSV), validated and written as JSONL.
``hanna-raw``, ``openmeva``, ``pairwise``
    HANNA's raw annotations, OpenMEVA's MAGS JSON and LitBench-style pairwise preferences:
    see :mod:`storyeval.importers_more`.
``hanna-llm``
    HANNA's LLM-written stories and LLM ratings: see :mod:`storyeval.importers_llm`.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from storyeval.corpus import (
    Judgment,
    Score,
    Story,
    iter_raw_records,
    read_judgments,
    write_judgments,
    write_scores,
    write_stories,
)
from storyeval.errors import DataFileError, DataProblem
from storyeval.importers_more import HANNA_CRITERIA
from storyeval.io import write_text_atomic
from storyeval.registry import Registry, UnknownNameError
from storyeval.signature import Signature

_HANNA_RATER = re.compile(r"^Human\s+(\d+)\s+(" + "|".join(HANNA_CRITERIA) + r")$")
_HANNA_TEXT_COLUMNS = ("Story", "Prompt")


@dataclass
class ImportResult:
    """What an importer read: canonical records and notes for the user."""

    format: str
    source: str
    stories: list[Story] = field(default_factory=list)
    judgments: list[Judgment] = field(default_factory=list)
    scores: list[Score] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    comparisons: list[dict[str, Any]] = field(default_factory=list)


def _file_digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()[:12]


def _import_signature(fmt: str, path: Path, column: str) -> str:
    return Signature(
        "imported",
        {"format": fmt, "file": path.name, "sha256": _file_digest(path), "column": column},
    ).render()


def _require_file(path: str | Path) -> Path:
    file_path = Path(path)
    if not file_path.exists():
        raise FileNotFoundError(f"{file_path}: no such file")
    if file_path.is_dir():
        raise IsADirectoryError(f"{file_path}: is a directory, expected a file")
    return file_path


# --------------------------------------------------------------------------- UNION


def _utf8_lines(path: Path, problems: list[DataProblem]) -> list[tuple[int, str]]:
    """The numbered lines of a UTF-8 file (a BOM dropped); undecodable lines become problems."""
    raw = path.read_bytes()
    if raw.startswith(b"\xef\xbb\xbf"):
        raw = raw[3:]
    lines = []
    for number, line_bytes in enumerate(raw.split(b"\n"), start=1):
        try:
            lines.append((number, line_bytes.decode("utf-8").rstrip("\r")))
        except UnicodeDecodeError as exc:
            reason = f"undecodable byte at column {exc.start + 1}; the file must be UTF-8"
            problems.append(DataProblem(str(path), number, reason))
    return lines


def _union_line(line: str) -> tuple[str, str, list[str], str] | str | None:
    """``(id, text, labels, error types)`` of a UNION line, a reason why it is invalid, or
    None if blank. The error-type field (``ant_data_all.txt``) is optional."""
    if not line.strip():
        return None
    parts = line.split("|||")
    if len(parts) not in (3, 4):
        return (
            "expected 3 fields 'ID ||| story ||| labels' (or a 4th, the error types), "
            f"found {len(parts)}"
        )
    item_id, text, labels_text = (p.strip() for p in parts[:3])
    if not item_id:
        return "the ID field is empty"
    if not text:
        return "the story text is empty"
    labels = labels_text.split()
    if not labels:
        return "no annotator labels"
    bad = [label for label in labels if label not in ("0", "1")]
    if bad:
        return f"labels must be 0 or 1; got {', '.join(map(repr, bad[:3]))}"
    return item_id, text, labels, parts[3].strip() if len(parts) == 4 else ""


@dataclass
class _UnionRow:
    number: int
    item_id: str
    text: str
    labels: list[str]
    error_types: list[str] | None


def _union_rows(path: Path, min_votes: int) -> list[_UnionRow]:
    """The parsed lines of a UNION annotation file; every bad line is a problem."""
    from storyeval.importers_union import error_votes, story_error_types

    problems: list[DataProblem] = []
    rows: list[_UnionRow] = []
    seen: dict[str, int] = {}
    for number, line in _utf8_lines(path, problems):
        parsed = _union_line(line)
        if parsed is None:
            continue
        if isinstance(parsed, str):
            problems.append(DataProblem(str(path), number, parsed))
            continue
        item_id, text, labels, errors = parsed
        if item_id in seen:
            reason = f"duplicate ID {item_id!r} (first on line {seen[item_id]})"
            problems.append(DataProblem(str(path), number, reason))
            continue
        seen[item_id] = number
        types = None
        if len(line.split("|||")) == 4:
            try:
                types = story_error_types(error_votes(errors), labels, min_votes)
            except ValueError as exc:
                problems.append(DataProblem(str(path), number, str(exc)))
                continue
        rows.append(_UnionRow(number, item_id, text, labels, types))
    if problems:
        raise DataFileError(problems)
    if not rows:
        raise DataFileError.single(path, 1, "the file holds no stories")
    return rows


def _split_context(text: str, context_sentences: int) -> tuple[str, str] | None:
    """``(prompt, story)``: the first sentences as the prompt; None if too few sentences."""
    from storyeval.text import split_sentences

    if not context_sentences:
        return "", text
    sentences = split_sentences(text)
    if len(sentences) <= context_sentences:
        return None
    return " ".join(sentences[:context_sentences]), " ".join(sentences[context_sentences:])


def _strip_prompt(text: str, prompt: str) -> str | None:
    """The text after its leading ``prompt`` (whitespace-insensitive), None if it does not
    start with it."""
    words, prompt_words = text.split(), prompt.split()
    if words[: len(prompt_words)] != prompt_words:
        return None
    return " ".join(words[len(prompt_words) :])


def import_union(
    path: str | Path,
    *,
    context_sentences: int = 1,
    criterion: str = "reasonable",
    system: str | None = None,
    prompts: str | Path | None = None,
    references: str | Path | None = None,
    metric_outputs: str | Path | None = None,
    error_min_votes: int = 3,
) -> ImportResult:
    """Import UNION's ``ID ||| story ||| labels`` annotation file, with the release's side files.

    Parameters
    ----------
    path : str or Path
        ``ant_data.txt``, or ``ant_data_all.txt`` whose 4th field holds the annotators' error
        types (see :mod:`storyeval.importers_union`); each story then gets an ``error_type``
        field (the types at least ``error_min_votes`` annotators marked, else ``reasonable`` or
        ``unagreed``), for ``storyeval drift subsets --by error_type`` (Table 7).
    context_sentences : int
        Leading sentences that form the prompt (UNION's ROC stories start with one). 0 keeps
        the whole text as the story with an empty prompt. Ignored with ``prompts``.
    criterion : str
        The criterion name of the binary labels.
    system : str, optional
        Recorded as every story's ``system``.
    prompts : str or Path, optional
        ``reference_ipt.txt``: line N is story N's leading context, whole (several sentences
        for WritingPrompts); it is cut from the front of the story text.
    references : str or Path, optional
        ``reference_opt.txt``: line N is the human continuation of story N's context, kept as
        the story's ``reference``.
    metric_outputs : str or Path, optional
        The ``metric_output`` directory: a file per metric, line N the score of story N.
    error_min_votes : int
        Votes an error type needs (the paper: 3 of 7 annotators).

    Raises
    ------
    DataFileError
        ``FILE:LINE: reason`` for a line without three ``|||`` fields, an empty id or text, a
        label other than 0 or 1, an unknown error type, a duplicate id, or a side file whose
        line count differs from the number of stories.
    """
    file_path = _require_file(path)
    if context_sentences < 0:
        raise ValueError(f"context_sentences must be >= 0; got {context_sentences}")
    if error_min_votes < 1:
        raise ValueError(f"error_min_votes must be >= 1; got {error_min_votes}")
    rows = _union_rows(file_path, error_min_votes)
    result = ImportResult("union", str(file_path))
    _union_stories(result, rows, context_sentences, system, prompts, references)
    for row in rows:
        extra = {"system": system} if system else {}
        for slot, label in enumerate(row.labels, start=1):
            result.judgments.append(
                Judgment(row.item_id, f"a{slot}", criterion, float(label), extra=dict(extra))
            )
    if metric_outputs is not None:
        from storyeval.importers_union import read_metric_outputs

        result.scores = read_metric_outputs(metric_outputs, [row.item_id for row in rows])
        metrics = sorted({score.metric for score in result.scores})
        result.notes.append(f"metric outputs: {', '.join(metrics)}")
    counts = {len(row.labels) for row in rows}
    if len(counts) > 1:
        result.notes.append(
            f"stories have different numbers of labels ({', '.join(map(str, sorted(counts)))})"
        )
    _note_error_types(result, rows, error_min_votes)
    return result


def _union_stories(
    result: ImportResult,
    rows: list[_UnionRow],
    context_sentences: int,
    system: str | None,
    prompts: str | Path | None,
    references: str | Path | None,
) -> None:
    """The stories of the rows, their prompts from the contexts file or the first sentences."""
    from storyeval.importers_union import read_line_file

    contexts = read_line_file(prompts, len(rows), "contexts") if prompts is not None else None
    outputs = (
        read_line_file(references, len(rows), "references") if references is not None else None
    )
    whole_text = unmatched = 0
    for index, row in enumerate(rows):
        extra: dict[str, Any] = {"text": row.text}
        if row.error_types is not None:
            extra["error_type"] = row.error_types
        if contexts is not None:
            prompt = contexts[index]
            story = _strip_prompt(row.text, prompt)
            unmatched += story is None
            split: tuple[str, str] | None = (prompt, row.text if story is None else story)
        else:
            split = _split_context(row.text, context_sentences)
        if split is None:
            whole_text += 1
            split = ("", row.text)
        reference = outputs[index] if outputs is not None else None
        result.stories.append(
            Story(row.item_id, split[0], split[1], reference, system=system, extra=extra)
        )
    if whole_text:
        result.notes.append(
            f"{whole_text} stories have no more than {context_sentences} sentence(s): kept whole "
            "as the story with an empty prompt"
        )
    if unmatched:
        result.notes.append(
            f"{unmatched} stories do not start with their context line: kept whole as the story"
        )


def _note_error_types(result: ImportResult, rows: list[_UnionRow], min_votes: int) -> None:
    typed = [row.error_types for row in rows if row.error_types is not None]
    if not typed:
        return
    counts: dict[str, int] = {}
    for types in typed:
        for name in types:
            counts[name] = counts.get(name, 0) + 1
    shown = ", ".join(f"{name} {count}" for name, count in sorted(counts.items()))
    result.notes.append(f"error types (>= {min_votes} votes): {shown}")


# --------------------------------------------------------------------------- HANNA


def _parse_list(cell: Any) -> list[Any]:
    if cell is None:
        raise ValueError("the cell is empty")
    value = json.loads(cell) if isinstance(cell, str) else cell
    if not isinstance(value, list):
        raise ValueError(f"expected a JSON list, got {type(value).__name__}")
    return value


def _number(value: Any) -> float:
    if value is None:
        return math.nan
    if isinstance(value, bool):
        raise ValueError(f"expected a number, got {value!r}")
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        text = value.strip()
        if text.lower() in ("", "nan", "null", "none"):
            return math.nan
        return float(text)
    raise ValueError(f"expected a number, got {type(value).__name__} {value!r}")


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
    file_path = _require_file(path)
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
    signatures = {c: _import_signature("hanna", file_path, c) for c in layout.metrics}
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
            lists[column] = _parse_list(record.get(column))
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
            numeric[column] = [_number(v) for v in lists[column]]
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


# --------------------------------------------------------------------------- DeltaScore

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
            value = _number(record[aspect])
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
    from storyeval.meta.data import prompt_key

    file_path = _require_file(path)
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


# --------------------------------------------------------------------------- judgments


def import_judgments(path: str | Path) -> ImportResult:
    """Validate long-format judgments (JSONL or CSV) for writing as canonical JSONL."""
    file_path = _require_file(path)
    result = ImportResult("judgments", str(file_path))
    result.judgments = read_judgments(file_path)
    return result


class UnknownFormatError(UnknownNameError, ValueError):
    """An import format that no importer is registered for."""


#: Importers by format name: the built-ins, then the ``storyeval.importers`` entry points.
IMPORTERS: Registry[Callable[..., ImportResult]] = Registry(
    "import format", entry_point_group="storyeval.importers", error=UnknownFormatError
)
IMPORTERS.register("union", import_union)
IMPORTERS.register("hanna", import_hanna)
IMPORTERS.register("deltascore", import_deltascore)
IMPORTERS.register("judgments", import_judgments)


def _import_more(name: str) -> Callable[..., ImportResult]:
    def run(path: str | Path) -> ImportResult:
        import storyeval.importers_more as more

        result = ImportResult(name, str(path))
        getattr(more, f"import_{name.replace('-', '_')}")(path, result)
        return result

    return run


for _name in ("hanna-raw", "openmeva", "pairwise"):
    IMPORTERS.register(_name, _import_more(_name))


def _import_hanna_llm(path: str | Path) -> ImportResult:
    from storyeval.importers_llm import import_hanna_llm

    result = ImportResult("hanna-llm", str(path))
    import_hanna_llm(_require_file(path), result)
    return result


IMPORTERS.register("hanna-llm", _import_hanna_llm)


def import_file(fmt: str, path: str | Path, **options: Any) -> ImportResult:
    """Run the importer registered as ``fmt``."""
    return IMPORTERS.get(fmt)(path, **options)


def write_import(result: ImportResult, out_dir: str | Path) -> dict[str, Path]:
    """Write the records to ``out_dir`` (created if needed); returns the paths written.

    Every file is written atomically. ``stories.jsonl`` is written when there are stories,
    ``judgments.jsonl`` when there are judgments and ``scores.jsonl`` when there are scores.
    """
    directory = Path(out_dir)
    if directory.exists() and not directory.is_dir():
        raise NotADirectoryError(f"{directory}: exists and is not a directory")
    directory.mkdir(parents=True, exist_ok=True)
    written: dict[str, Path] = {}
    if result.stories:
        written["stories"] = directory / "stories.jsonl"
        write_stories(written["stories"], result.stories)
    if result.judgments:
        written["judgments"] = directory / "judgments.jsonl"
        write_judgments(written["judgments"], result.judgments)
    if result.scores:
        written["scores"] = directory / "scores.jsonl"
        write_scores(written["scores"], result.scores)
    if result.comparisons:
        written["comparisons"] = directory / "comparisons.jsonl"
        text = "".join(json.dumps(c) + "\n" for c in result.comparisons)
        write_text_atomic(written["comparisons"], text)
    return written
