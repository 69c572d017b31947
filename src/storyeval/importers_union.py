"""The side files of UNION's release, read beside its annotation file.

UNION's data release (Guan & Huang 2020) keeps, next to the annotated stories
(``ant_data.txt``; ``ant_data_all.txt`` with error types), the leading contexts
(``reference_ipt.txt``) and human continuations (``reference_opt.txt``), line N for story N,
and a ``metric_output`` directory with one file per metric, line N the score of story N.

Error types (``ant_data_all.txt``) are a fourth ``|||`` field: one token per annotator who
marked an error, the types of one annotator joined with ``,``, ``/``, ``+`` or ``;``. A type is
a number in the paper's order (1 repeated plots, 2 poor coherence, 3 conflicting logic,
4 chaotic scenes, 5 others) or a name (``repeated_plots``, ``repetition``, ``coherence``,
``conflicting``, ``chaotic``, ``others``...); ``0``, ``-`` and ``none`` mark no error. A story
has an error type when at least ``min_votes`` annotators marked it (the paper's rule: 3 of 7).
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from storyeval.corpus import Score
from storyeval.errors import DataFileError, DataProblem
from storyeval.signature import Signature

#: UNION's error types in the paper's order (Table 2).
ERROR_TYPES = (
    "repeated_plots",
    "poor_coherence",
    "conflicting_logic",
    "chaotic_scenes",
    "others",
)
_ERROR_ALIASES = {
    "repeated": "repeated_plots",
    "repetition": "repeated_plots",
    "repeat": "repeated_plots",
    "coherence": "poor_coherence",
    "incoherence": "poor_coherence",
    "incoherent": "poor_coherence",
    "conflicting": "conflicting_logic",
    "conflict": "conflicting_logic",
    "logic": "conflicting_logic",
    "chaotic": "chaotic_scenes",
    "chaos": "chaotic_scenes",
    "other": "others",
}
_NO_ERROR = {"0", "-", "none", "no", "_"}
_SEPARATORS = re.compile(r"[,/+;]")

#: The ``error_type`` of a story with no error type at the threshold and mostly positive
#: labels, and of one with mostly negative labels but no type agreed on.
REASONABLE = "reasonable"
UNAGREED = "unagreed"


def _error_type(code: str) -> str | None:
    """The canonical error type of one code, None for "no error"; ValueError if unknown."""
    key = code.strip().lower().replace(" ", "_").replace("-", "_")
    if key in _NO_ERROR:
        return None
    if key.isdigit() and 1 <= int(key) <= len(ERROR_TYPES):
        return ERROR_TYPES[int(key) - 1]
    if key in ERROR_TYPES:
        return key
    if key in _ERROR_ALIASES:
        return _ERROR_ALIASES[key]
    raise ValueError(
        f"unknown error type {code!r}; use 1-5 or one of {', '.join(ERROR_TYPES)} ('0' or '-' for none)"
    )


def error_votes(text: str) -> Counter[str]:
    """How many annotators marked each error type, from a ``|||`` error-type field."""
    votes: Counter[str] = Counter()
    for annotator in text.split():
        types = {_error_type(code) for code in _SEPARATORS.split(annotator) if code.strip()}
        votes.update(t for t in types if t is not None)
    return votes


def story_error_types(votes: Counter[str], labels: Sequence[str], min_votes: int) -> list[str]:
    """A story's error types: those with ``min_votes`` or more votes, else ``reasonable``
    (most labels 1) or ``unagreed``."""
    agreed = [t for t in ERROR_TYPES if votes[t] >= min_votes]
    if agreed:
        return agreed
    positive = sum(label == "1" for label in labels)
    return [REASONABLE if positive * 2 > len(labels) else UNAGREED]


def read_line_file(path: str | Path, expected: int, what: str) -> list[str]:
    """The lines of a "line N for story N" file, checked to hold ``expected`` of them."""
    file_path = Path(path)
    if not file_path.is_file():
        raise FileNotFoundError(f"{file_path}: no such file ({what})")
    lines = file_path.read_text(encoding="utf-8-sig").splitlines()
    while lines and not lines[-1].strip():
        lines.pop()
    if len(lines) != expected:
        raise DataFileError.single(
            file_path,
            min(len(lines), expected) + 1,
            f"{what}: {len(lines)} lines for {expected} stories (line N must be story N's)",
        )
    problems = [
        DataProblem(str(file_path), number, f"{what}: the line is empty")
        for number, line in enumerate(lines, start=1)
        if not line.strip()
    ]
    if problems:
        raise DataFileError(problems)
    return [line.strip() for line in lines]


def _metric_value(text: str) -> float:
    value = float(text)
    if math.isinf(value):
        raise ValueError("infinite")
    return value


def read_metric_outputs(directory: str | Path, story_ids: Sequence[str]) -> list[Score]:
    """Scores from UNION's ``metric_output`` directory: one ``*.txt`` file per metric (the
    file's stem is the metric name), line N the score of story N, or ``ID ||| score`` lines."""
    folder = Path(directory)
    if not folder.is_dir():
        raise NotADirectoryError(f"{folder}: not a directory (metric outputs)")
    files = sorted(folder.glob("*.txt"))
    if not files:
        raise FileNotFoundError(f"{folder}: no *.txt metric output file")
    scores: list[Score] = []
    problems: list[DataProblem] = []
    for path in files:
        found, file_problems = _metric_file(path, story_ids)
        scores += found
        problems += file_problems
    if problems:
        raise DataFileError(problems)
    return scores


def _metric_file(path: Path, story_ids: Sequence[str]) -> tuple[list[Score], list[DataProblem]]:
    lines = path.read_text(encoding="utf-8-sig").splitlines()
    while lines and not lines[-1].strip():
        lines.pop()
    known = set(story_ids)
    signature = Signature(
        "imported", {"format": "union-metric-output", "file": path.name, "column": path.stem}
    ).render()
    scores: list[Score] = []
    problems: list[DataProblem] = []
    keyed = any("|||" in line for line in lines)
    if not keyed and len(lines) != len(story_ids):
        reason = f"{len(lines)} scores for {len(story_ids)} stories (line N must be story N's)"
        return [], [DataProblem(str(path), min(len(lines), len(story_ids)) + 1, reason)]
    for number, line in enumerate(lines, start=1):
        item_id, _, value_text = line.rpartition("|||") if keyed else ("", "", line)
        item_id = item_id.strip() if keyed else story_ids[number - 1]
        try:
            value = _metric_value(value_text.strip())
        except ValueError:
            problems.append(DataProblem(str(path), number, f"not a number: {value_text.strip()!r}"))
            continue
        if item_id not in known:
            problems.append(DataProblem(str(path), number, f"unknown story id {item_id!r}"))
            continue
        scores.append(Score(item_id, path.stem, value, signature))
    return scores, problems
