"""The two human-judged sets of Clark et al. (2019) / Clark (2021), Table 5.3, from their public
formats: the intrinsic study of sentence mover's similarity reruns on them.

``asap``
    The Hewlett Foundation's Automated Student Assessment Prize essays (Kaggle,
    ``training_set_rel3.tsv``: tab-separated, Windows-1252 or UTF-8, columns ``essay_id``,
    ``essay_set``, ``essay``, ``rater1_domain1``, ``rater2_domain1``, ``rater3_domain1``,
    ``domain1_score`` ...). One essay set (the thesis: set 3, scores 0-3, essays of 5-15
    sentences: ``min_sentences=5, max_sentences=15``); each essay becomes a story (system
    ``student``, prompt_id ``asap-set-N``) and its score a judgment on ``score``: the resolved
    ``domain1_score`` (rater ``resolved``) or each rater's (``score="raters"``). The reference
    essay (the thesis' top-scoring sample, Appendix B.3) is a text file given as
    ``references``; it becomes every essay's reference.
``chaganty``
    Chaganty et al.'s (2018) human judgments of CNN/Daily Mail summaries from four systems
    (JSONL or a JSON list): per record an ``id``, the ``system``, the article (``input``) and
    the summary (``output``), each a string or an object with ``contents`` or ``text``, the
    reference summary (``reference``, ``references`` or ``highlights``; or from a
    ``references`` JSONL of ``{"id", "reference"}``), and ``answers`` (or ``ratings``): per
    criterion (``overall``, ``grammar``, ``redundancy``, ...; scale -1 to 1) the list of the
    annotators' values. Non-numeric answers (post-edits) are left out with a note. The thesis
    keeps summaries judged by two or more people (``min_raters=2``) and averages them.

Examples
--------
>>> import pathlib, tempfile
>>> folder = pathlib.Path(tempfile.mkdtemp())
>>> _ = (folder / "lqual.jsonl").write_text('{"id": "a1", "system": "pointer", "input": '
...     '{"contents": "The cat sat."}, "output": "A cat sat.", "reference": "The cat sat.", '
...     '"answers": {"overall": [1, 0], "edit": ["A cat sat."]}}\\n')
>>> result = import_chaganty(folder / "lqual.jsonl")
>>> [(j.rater_id, j.criterion, j.value) for j in result.judgments]
[('a1', 'overall', 1.0), ('a2', 'overall', 0.0)]
>>> result.stories[0].reference, result.stories[0].system
('The cat sat.', 'pointer')
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from storyeval.base.errors import DataFileError, DataProblem
from storyeval.corpus import Judgment, Story, iter_raw_records
from storyeval.importers.base import ImportResult, require_file, to_number

ASAP_COLUMNS = ("essay_id", "essay_set", "essay", "domain1_score")
ASAP_RATERS = ("rater1_domain1", "rater2_domain1", "rater3_domain1")


def _decoded(path: Path) -> str:
    raw = path.read_bytes().removeprefix(b"\xef\xbb\xbf")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:  # the Kaggle release is Windows-1252
        return raw.decode("cp1252", errors="replace")


def import_asap(
    path: str | Path,
    *,
    essay_set: int = 3,
    references: str | Path | None = None,
    score: str = "resolved",
    min_sentences: int | None = None,
    max_sentences: int | None = None,
) -> ImportResult:
    """Import one essay set of ASAP's ``training_set_rel3.tsv`` (see the module docstring)."""
    from storyeval.base.validation import check_choice
    from storyeval.text import split_sentences

    check_choice(score, ("resolved", "raters"), "score")
    file_path = require_file(path)
    reader = csv.DictReader(io.StringIO(_decoded(file_path)), delimiter="\t")
    missing = [c for c in ASAP_COLUMNS if c not in (reader.fieldnames or [])]
    if missing:
        raise DataFileError([DataProblem(str(file_path), 1, f"missing column(s) {missing}")])
    reference = (
        Path(references).read_text(encoding="utf-8").strip() if references is not None else None
    )
    result = ImportResult("asap", str(file_path))
    problems: list[DataProblem] = []
    skipped = 0
    for line, row in enumerate(reader, start=2):
        if str(row["essay_set"]).strip() != str(essay_set):
            continue
        essay = (row["essay"] or "").strip()
        count = len(split_sentences(essay))
        if (min_sentences is not None and count < min_sentences) or (
            max_sentences is not None and count > max_sentences
        ):
            skipped += 1
            continue
        try:
            story, judgments = _asap_essay(row, essay, essay_set, reference, score)
        except ValueError as exc:
            problems.append(DataProblem(str(file_path), line, str(exc)))
            continue
        result.stories.append(story)
        result.judgments += judgments
    if problems:
        raise DataFileError(problems)
    if not result.stories:
        raise DataFileError([DataProblem(str(file_path), 1, f"no essay of set {essay_set}")])
    if skipped:
        result.notes.append(f"{skipped} essay(s) of set {essay_set} outside the sentence range")
    if reference is None:
        result.notes.append("no reference essay given (--references): reference metrics need one")
    return result


def _asap_essay(
    row: Mapping[str, str], essay: str, essay_set: int, reference: str | None, score: str
) -> tuple[Story, list[Judgment]]:
    essay_id = str(row["essay_id"]).strip()
    if not essay_id or not essay:
        raise ValueError("essay_id and essay are required")
    prompt_id = f"asap-set-{essay_set}"
    story = Story(
        id=f"asap-{essay_id}",
        prompt="",
        story=essay,
        reference=reference,
        system="student",
        extra={"prompt_id": prompt_id},
    )
    columns = {"resolved": ("domain1_score",), "raters": ASAP_RATERS}[score]
    judgments = []
    for column in columns:
        value = to_number(row.get(column))
        if math.isnan(value):
            if column == "domain1_score":
                raise ValueError("domain1_score is empty")
            continue
        rater = "resolved" if column == "domain1_score" else column.split("_")[0]
        extra = {"system": "student", "prompt_id": prompt_id}
        judgments.append(Judgment(story.id, rater, "score", value, extra=extra))
    return story, judgments


def _text(value: Any) -> str:
    if isinstance(value, Mapping):
        value = value.get("contents", value.get("text"))
    if isinstance(value, list):
        value = " ".join(str(v) for v in value)
    return "" if value is None else str(value).strip()


def import_chaganty(
    path: str | Path, *, references: str | Path | None = None, min_raters: int = 1
) -> ImportResult:
    """Import Chaganty et al.'s (2018) judged CNN/Daily Mail summaries (see the module
    docstring)."""
    if min_raters < 1:
        raise ValueError(f"min_raters must be at least 1; got {min_raters}")
    file_path = require_file(path)
    given = _reference_file(Path(references)) if references is not None else {}
    result = ImportResult("chaganty", str(file_path))
    problems: list[DataProblem] = []
    skipped: dict[str, int] = {"few raters": 0}
    left_out: set[str] = set()
    for line, record in _records(file_path):
        if isinstance(record, DataProblem):
            problems.append(record)
            continue
        try:
            _chaganty_record(record, given, min_raters, result, skipped, left_out)
        except ValueError as exc:
            problems.append(DataProblem(str(file_path), line, str(exc)))
    if problems:
        raise DataFileError(problems)
    if skipped["few raters"]:
        result.notes.append(
            f"{skipped['few raters']} summary(ies) judged by fewer than {min_raters} people "
            "left out"
        )
    if left_out:
        result.notes.append(f"non-numeric answers left out: {', '.join(sorted(left_out))}")
    return result


def _records(path: Path) -> Any:
    """JSONL records, or the items of a JSON list (numbered from 1)."""
    text = _decoded(path)
    if text.lstrip().startswith("["):
        try:
            items = json.loads(text)
        except json.JSONDecodeError as exc:
            return [(exc.lineno, DataProblem(str(path), exc.lineno, f"malformed JSON: {exc.msg}"))]
        return list(enumerate(items, start=1))
    return iter_raw_records(path, fmt="jsonl")


def _chaganty_record(
    record: Mapping[str, Any],
    given: Mapping[str, str],
    min_raters: int,
    result: ImportResult,
    skipped: dict[str, int],
    left_out: set[str],
) -> None:
    if not isinstance(record, Mapping):
        raise ValueError("expected a JSON object")
    item_id = str(record.get("id") or "").strip()
    summary = _text(record.get("output", record.get("summary")))
    output = record.get("output")
    system = record.get("system") or (output.get("system") if isinstance(output, Mapping) else None)
    if not item_id or not summary or not system:
        raise ValueError("id, system and output (the summary) are required")
    answers = record.get("answers", record.get("ratings"))
    if not isinstance(answers, Mapping) or not answers:
        raise ValueError("answers: expected an object of criterion -> list of values")
    reference = _text(
        record.get("reference", record.get("references", record.get("highlights")))
    ) or given.get(item_id)
    ratings = _numeric_answers(answers, left_out)
    if max((len(v) for v in ratings.values()), default=0) < min_raters:
        skipped["few raters"] += 1
        return
    prompt_id = f"cnndm-{_text(record.get('input_id')) or item_id}"
    result.stories.append(
        Story(
            id=item_id,
            prompt=_text(record.get("input", record.get("article"))),
            story=summary,
            reference=reference or None,
            system=str(system),
            extra={"prompt_id": prompt_id},
        )
    )
    for criterion, values in ratings.items():
        for position, value in enumerate(values, start=1):
            extra = {"system": str(system), "prompt_id": prompt_id}
            result.judgments.append(
                Judgment(item_id, f"a{position}", criterion, value, extra=extra)
            )


def _numeric_answers(answers: Mapping[str, Any], left_out: set[str]) -> dict[str, list[float]]:
    ratings: dict[str, list[float]] = {}
    for criterion, values in answers.items():
        listed = values if isinstance(values, list) else [values]
        try:
            numbers = [to_number(v) for v in listed]
        except ValueError:
            left_out.add(str(criterion))
            continue
        kept = [n for n in numbers if not math.isnan(n)]
        if kept:
            ratings[str(criterion)] = kept
    return ratings


def _reference_file(path: Path) -> dict[str, str]:
    found: dict[str, str] = {}
    problems: list[DataProblem] = []
    for line, record in iter_raw_records(path):
        if isinstance(record, DataProblem):
            problems.append(record)
        elif not isinstance(record, Mapping) or not record.get("id") or not record.get("reference"):
            problems.append(DataProblem(str(path), line, 'expected {"id": ..., "reference": ...}'))
        else:
            found[str(record["id"])] = _text(record["reference"])
    if problems:
        raise DataFileError(problems)
    return found
