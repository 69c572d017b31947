"""UNION's public release (Guan and Huang 2020): the annotated stories (``ant_data.txt``: one story
per line, ``ID ||| story text ||| 0/1 labels``, one per annotator; the text includes the
leading context, whose first ``context_sentences`` sentences become the ``prompt``) and the
release's side files: the contexts (``reference_ipt.txt``), the human continuations
(``reference_opt.txt``, as references), the ``metric_output`` directory (a score file per
metric) and the error types of ``ant_data_all.txt``. Each label is a binary judgment on the
criterion ``reasonable`` by annotator slot ``a1``, ``a2``... (slots, not people: use
Krippendorff's alpha, not ICC, on them).
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from storyeval.base.errors import DataFileError, DataProblem
from storyeval.base.signature import Signature
from storyeval.corpus import Judgment, Score, Story
from storyeval.importers.base import (
    ImportResult,
    require_file,
    utf8_lines,
)

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


def _file_lines(path: str | Path, what: str) -> tuple[Path, list[str]]:
    """The lines of a side file, trailing blank lines left out."""
    file_path = Path(path)
    if not file_path.is_file():
        raise FileNotFoundError(f"{file_path}: no such file ({what})")
    lines = file_path.read_text(encoding="utf-8-sig").splitlines()
    while lines and not lines[-1].strip():
        lines.pop()
    return file_path, lines


def read_line_file(path: str | Path, expected: int, what: str) -> list[str]:
    """The lines of a "line N for story N" file, checked to hold ``expected`` of them."""
    file_path, lines = _file_lines(path, what)
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


@dataclass(frozen=True)
class SideLayout:
    """How a side file's lines map to the annotated stories: ``positional`` (line N is story
    N's) or ``by_id`` (a story's id is its line's index in the file, counted from ``base``:
    the release's layout, where ``reference_ipt.txt`` holds every test story and the 400
    annotated ones point into it)."""

    by_id: bool
    base: int = 0

    def describe(self) -> str:
        """For the import notes."""
        if not self.by_id:
            return "line N is story N's"
        return f"a story's id is its line number counted from {self.base}"


def side_layout(
    rows: Sequence[_UnionRow], n_lines: int, contexts: Sequence[str] | None = None
) -> SideLayout | None:
    """The layout of side files of ``n_lines`` lines: positional when they have one line per
    story; by id when every id is an integer and points at a line (counted from 0 or 1: with
    the contexts, the base under which more stories start with their context; else 0); None
    when neither fits."""
    if n_lines == len(rows):
        return SideLayout(False)
    if not all(row.item_id.isdigit() for row in rows):
        return None
    ids = [int(row.item_id) for row in rows]
    bases = [b for b in (0, 1) if all(0 <= i - b < n_lines for i in ids)]
    if not bases:
        return None
    if contexts is None or len(bases) == 1:
        return SideLayout(True, bases[0])
    matches = {
        b: sum(
            _strip_prompt(row.text, contexts[i - b]) is not None
            for row, i in zip(rows, ids, strict=True)
        )
        for b in bases
    }
    return SideLayout(True, max(bases, key=lambda b: (matches[b], -b)))


def read_side_file(
    path: str | Path, rows: Sequence[_UnionRow], what: str, layout: SideLayout | None = None
) -> tuple[list[str], SideLayout]:
    """A side file's line for each annotated story, in the layout found (or given)."""
    file_path, lines = _file_lines(path, what)
    layout = layout or side_layout(rows, len(lines), [line.strip() for line in lines])
    if layout is None:
        raise DataFileError.single(
            file_path,
            min(len(lines), len(rows)) + 1,
            f"{what}: {len(lines)} lines for {len(rows)} stories: line N must be story N's, or "
            "every story id must be the index of its line (the release's layout)",
        )
    if not layout.by_id:
        return read_line_file(file_path, len(rows), what), layout
    picked = []
    problems = []
    for row in rows:
        index = int(row.item_id) - layout.base
        if not 0 <= index < len(lines):
            problems.append(
                DataProblem(str(file_path), len(lines), f"{what}: no line for id {row.item_id}")
            )
            continue
        if not lines[index].strip():
            problems.append(DataProblem(str(file_path), index + 1, f"{what}: the line is empty"))
            continue
        picked.append(lines[index].strip())
    if problems:
        raise DataFileError(problems)
    return picked, layout


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

    problems: list[DataProblem] = []
    rows: list[_UnionRow] = []
    seen: dict[str, int] = {}
    for number, line in utf8_lines(path, problems):
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


@dataclass(frozen=True)
class UnionRelease:
    """The files of UNION's public release that the importer reads, found from a folder.

    Attributes
    ----------
    annotations : Path
        ``ant_data/ant_data.txt`` (or ``ant_data_all.txt``, with the error types).
    contexts, references : Path or None
        ``ant_data/reference_ipt.txt`` and ``reference_opt.txt`` when present.
    metric_outputs : Path or None
        The set's ``metric_output`` folder when present (read only when asked for: its files'
        layout is the user's to confirm).
    """

    annotations: Path
    contexts: Path | None
    references: Path | None
    metric_outputs: Path | None


def union_release_files(
    path: str | Path, *, dataset: str = "ROCStories", error_types: bool = False
) -> UnionRelease:
    """Find the annotated stories and their side files in UNION's release (Guan and Huang
    2020, github.com/thu-coai/UNION), laid out as ``Data/<set>/ant_data/`` (``ant_data.txt``,
    ``ant_data_all.txt``, ``reference.txt``, ``reference_ipt.txt``, ``reference_opt.txt``)
    beside ``ini_data/``, ``metric_output/`` and ``train_data/``.

    Parameters
    ----------
    path : str or Path
        The release's root (holding ``Data/``), ``Data/``, ``Data/<set>``, the ``ant_data``
        folder, or the annotation file itself.
    dataset : str
        The set under ``Data/`` when ``path`` is above it (``ROCStories`` or
        ``WritingPrompts``).
    error_types : bool
        Read ``ant_data_all.txt`` (with the annotators' error types) instead of
        ``ant_data.txt``.

    Raises
    ------
    FileNotFoundError
        When none of those places holds the annotation file (the message lists where it
        looked).
    """
    name = "ant_data_all.txt" if error_types else "ant_data.txt"
    given = Path(path)
    if given.is_file():
        folder, annotations = given.parent, given
    else:
        places = [given, given / "ant_data", given / dataset / "ant_data"]
        places.append(given / "Data" / dataset / "ant_data")
        found = next((place for place in places if (place / name).is_file()), None)
        if found is None:
            looked = ", ".join(str(place / name) for place in places)
            raise FileNotFoundError(
                f"{given}: not UNION's release layout (looked for {looked}); give the release's "
                "root, Data/<set>, its ant_data folder or the annotation file"
            )
        folder, annotations = found, found / name

    def side(file_name: str) -> Path | None:
        for place in (folder, folder.parent):
            if (place / file_name).is_file():
                return place / file_name
        return None

    outputs = next(
        (p / "metric_output" for p in (folder, folder.parent) if (p / "metric_output").is_dir()),
        None,
    )
    return UnionRelease(annotations, side("reference_ipt.txt"), side("reference_opt.txt"), outputs)


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
        types; or a folder of the release (its root, ``Data/<set>`` or ``ant_data``: see
        :func:`union_release_files`), whose ``ant_data.txt`` is read with its
        ``reference_ipt.txt`` and ``reference_opt.txt`` as ``prompts`` and ``references``
        unless those are given. With error types (see :func:`error_votes`), each story gets an
        ``error_type`` field (the types at least ``error_min_votes`` annotators marked, else ``reasonable`` or
        ``unagreed``), for ``storyeval drift subsets --by error_type`` (Table 7).
    context_sentences : int
        Leading sentences that form the prompt (UNION's ROC stories start with one). 0 keeps
        the whole text as the story with an empty prompt. Ignored with ``prompts``.
    criterion : str
        The criterion name of the binary labels.
    system : str, optional
        Recorded as every story's ``system``.
    prompts : str or Path, optional
        ``reference_ipt.txt``: the leading contexts, whole (several sentences for
        WritingPrompts); a story's context is cut from the front of its text. Either one line
        per annotated story (line N is story N's), or, as in the public release, every test
        story's context (4,909 lines for ROCStories), the annotated story's id being the index
        of its line (counted from 0 or 1: the count under which more stories start with their
        context; see :func:`side_layout`).
    references : str or Path, optional
        ``reference_opt.txt``: the human continuations, kept as the stories' ``reference``,
        in the same layout as the contexts.
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
    if Path(path).is_dir():
        release = union_release_files(path)
        path = release.annotations
        prompts = prompts if prompts is not None else release.contexts
        references = references if references is not None else release.references
    file_path = require_file(path)
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

    contexts = outputs = None
    layout: SideLayout | None = None
    if prompts is not None:
        contexts, layout = read_side_file(prompts, rows, "contexts")
    if references is not None:
        outputs, layout = read_side_file(references, rows, "references", layout)
    if layout is not None and layout.by_id:
        result.notes.append(f"side files: {layout.describe()}")
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
