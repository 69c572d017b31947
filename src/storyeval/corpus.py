"""Story, judgment and score records: reading, validating and writing JSONL and CSV files.

JSONL is the canonical format (one JSON object per line); CSV is accepted and written too.
Readers check every record and raise :class:`~storyeval.base.errors.DataFileError` listing each
problem as ``FILE:LINE: reason``; writers are atomic.

Story records
    ``id``, ``prompt`` (leading context, may be empty or absent), ``story`` (the text
    evaluated), optional ``reference`` (a human continuation of the same prompt: a string or
    a list of strings), optional ``system``; any other fields are kept as they are.
Judgment records (long format)
    ``item_id``, ``rater_id``, ``criterion``, ``value`` (a finite number), optional
    ``time_s``, ``study``, ``condition``; other fields are kept.
Score records
    ``item_id``, ``metric``, ``value`` (a number, or null for an undefined score),
    ``signature``; other fields (e.g. ``system``) are kept.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import math
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeVar

from storyeval.base.errors import DataFileError, DataProblem
from storyeval.base.io import atomic_write
from storyeval.base.validation import check_choice

FileFormat = Literal["jsonl", "csv"]
RecordKind = Literal["stories", "judgments", "scores"]
RECORD_KINDS: tuple[str, ...] = ("stories", "judgments", "scores")

STORY_FIELDS = ("id", "prompt", "story", "reference", "system")
JUDGMENT_FIELDS = ("item_id", "rater_id", "criterion", "value", "time_s", "study", "condition")
SCORE_FIELDS = ("item_id", "metric", "value", "signature")
_REQUIRED_COLUMNS: dict[str, tuple[str, ...]] = {
    "stories": ("id", "story"),
    "judgments": ("item_id", "rater_id", "criterion", "value"),
    "scores": ("item_id", "metric", "value"),
}


class _RecordError(ValueError):
    """Raised by a record parser; the reader adds the file and line."""


@dataclass
class Story:
    """One story to evaluate (see the module docstring for the fields)."""

    id: str
    prompt: str
    story: str
    reference: str | list[str] | None = None
    system: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def references(self) -> list[str]:
        """The references as a list (empty when there is none)."""
        if self.reference is None:
            return []
        return [self.reference] if isinstance(self.reference, str) else list(self.reference)

    def to_dict(self) -> dict[str, Any]:
        """The record as written to a story file (absent optional fields left out)."""
        record: dict[str, Any] = {"id": self.id, "prompt": self.prompt, "story": self.story}
        if self.reference is not None:
            record["reference"] = self.reference
        if self.system is not None:
            record["system"] = self.system
        record.update(self.extra)
        return record


@dataclass
class Judgment:
    """One rater's rating of one item on one criterion."""

    item_id: str
    rater_id: str
    criterion: str
    value: float
    time_s: float | None = None
    study: str | None = None
    condition: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """The record as written to a judgment file (absent optional fields left out)."""
        record: dict[str, Any] = {
            "item_id": self.item_id,
            "rater_id": self.rater_id,
            "criterion": self.criterion,
            "value": self.value,
        }
        for key in ("time_s", "study", "condition"):
            if getattr(self, key) is not None:
                record[key] = getattr(self, key)
        record.update(self.extra)
        return record


@dataclass
class Score:
    """One metric value for one item, with the signature that produced it."""

    item_id: str
    metric: str
    value: float
    signature: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """The record as written to a score file (NaN as null)."""
        value: float | None = self.value if math.isfinite(self.value) else None
        record: dict[str, Any] = {"item_id": self.item_id, "metric": self.metric, "value": value}
        record["signature"] = self.signature
        record.update(self.extra)
        return record


# --------------------------------------------------------------------------- field parsing


def prompt_key(prompt: str) -> str | None:
    """The id of a prompt text: ``p`` and 12 hex digits of the SHA-1 of the text with its
    whitespace collapsed; ``None`` for an empty prompt. Every part of storyeval that needs a
    prompt id derives it here (score records, judgments, meta-evaluation, importers).

    >>> prompt_key("Once upon  a time") == prompt_key("Once upon a time"), prompt_key("   ")
    (True, None)
    >>> prompt_key("Once upon a time")
    'p678c96338602'
    """
    normalized = " ".join(str(prompt).split())
    if not normalized:
        return None
    return "p" + hashlib.sha1(normalized.encode("utf-8")).hexdigest()[:12]


def prompt_id(story: Story) -> str | None:
    """The story's ``prompt_id`` field, else :func:`prompt_key` of its prompt (``None`` for a
    story with neither), so that stories continuing one prompt share it.

    >>> a, b = Story("a", "Once upon a time.", "x"), Story("b", "Once upon a time.", "y")
    >>> prompt_id(a) == prompt_id(b), prompt_id(Story("c", "", "z", extra={"prompt_id": "s001"}))
    (True, 's001')
    """
    given = story.extra.get("prompt_id")
    if given is not None and str(given).strip():
        return str(given)
    return prompt_key(story.prompt)


def prompt_group(story: Story) -> str:
    """The key study items are grouped by (stories continuing one prompt never go to one
    participant): the story's ``prompt_id`` field, else its prompt text. Study files store it,
    so it stays the text rather than :func:`prompt_id`'s digest."""
    return str(story.extra.get("prompt_id") or story.prompt)


#: The fields of a prompt record (prompts files for generation; see :func:`parse_prompt`).
PROMPT_FIELDS = ("id", "prompt", "story", "reference", "system")
#: Fields generated stories set themselves; a prompt record's own copies are not carried over.
RESERVED_FIELDS = frozenset(
    {
        "prompt_id",
        "signature",
        "attempts",
        "dropped_empty",
        "dropped_unfinished",
        "dropped_long",
        "dropped_copy",
        "dropped_offensive",
        "copy_overlap",
    }
)


def _prompt_text(record: Mapping[str, Any], key: str, *, required: bool) -> str | None:
    value = record.get(key)
    if value is None or (isinstance(value, str) and not value.strip()):
        if required:
            state = "missing" if value is None else "empty"
            raise ValueError(f"required field '{key}' is {state}")
        return None
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise ValueError(f"field '{key}' must be a string; got {type(value).__name__} {value!r}")
    return str(value)


def _prompt_reference(record: Mapping[str, Any]) -> str | list[str] | None:
    value = record.get("reference")
    if isinstance(value, list):
        if not value:
            return None
        if not all(isinstance(item, str) and item.strip() for item in value):
            raise ValueError("field 'reference' must be a string or a list of non-empty strings")
        return list(value)
    text = _prompt_text(record, "reference", required=False)
    if text is not None:
        return text
    return _prompt_text(record, "story", required=False)


def parse_prompt(item: Mapping[str, Any]) -> Story:
    """One prompt record as a :class:`Story` with an empty ``story`` (``ValueError`` on a
    missing or empty ``id`` or ``prompt``)."""
    record_id = _prompt_text(item, "id", required=True)
    prompt = _prompt_text(item, "prompt", required=True)
    reference = _prompt_reference(item)
    if record_id is None or prompt is None:
        raise ValueError("a prompt record needs 'id' and 'prompt'")
    extra = {
        key: value
        for key, value in item.items()
        if key not in PROMPT_FIELDS and key not in RESERVED_FIELDS
    }
    return Story(record_id, prompt, "", reference=reference, extra=extra)


def _text_field(
    record: Mapping[str, Any], key: str, *, required: bool, allow_empty: bool = False
) -> str | None:
    value = record.get(key)
    if value is None or (isinstance(value, str) and not value.strip() and not allow_empty):
        if required:
            state = "missing" if key not in record or value is None else "empty"
            raise _RecordError(f"required field '{key}' is {state}")
        return None
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise _RecordError(f"field '{key}' must be a string; got {type(value).__name__} {value!r}")
    return str(value)


def _number_field(record: Mapping[str, Any], key: str, *, required: bool) -> float | None:
    value = record.get(key)
    if value is None or (isinstance(value, str) and not value.strip()):
        if required:
            state = "missing" if key not in record or value is None else "empty"
            raise _RecordError(f"required field '{key}' is {state}")
        return None
    if isinstance(value, bool):
        raise _RecordError(f"field '{key}' must be a number; got the boolean {value!r}")
    if isinstance(value, str):
        try:
            number = float(value.strip())
        except ValueError:
            raise _RecordError(f"field '{key}' must be a number; got {value!r}") from None
    elif isinstance(value, int | float):
        number = float(value)
    else:
        raise _RecordError(f"field '{key}' must be a number; got {type(value).__name__} {value!r}")
    if math.isnan(number):
        raise _RecordError(f"field '{key}' is NaN; a rating must be a finite number")
    if math.isinf(number):
        raise _RecordError(f"field '{key}' is infinite; a rating must be a finite number")
    return number


def _reference_field(record: Mapping[str, Any]) -> str | list[str] | None:
    value = record.get("reference")
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    if isinstance(value, str):
        stripped = value.strip()
        if stripped.startswith("[") and stripped.endswith("]"):  # a list written to a CSV cell
            try:
                decoded = json.loads(stripped)
            except json.JSONDecodeError:
                return value
            if isinstance(decoded, list):
                value = decoded
            else:
                return value
        else:
            return value
    if isinstance(value, list):
        if not value:
            return None
        if not all(isinstance(item, str) and item.strip() for item in value):
            raise _RecordError("field 'reference' must be a string or a list of non-empty strings")
        return list(value)
    raise _RecordError(
        f"field 'reference' must be a string or a list of strings; got {type(value).__name__}"
    )


def _extra(record: Mapping[str, Any], known: Sequence[str]) -> dict[str, Any]:
    return {key: value for key, value in record.items() if key not in known}


def parse_story(record: Mapping[str, Any]) -> Story:
    """Build a :class:`Story` from a mapping, raising ``ValueError`` on a bad field."""
    story_id = _text_field(record, "id", required=True)
    story = _text_field(record, "story", required=True)
    prompt = _text_field(record, "prompt", required=False, allow_empty=True) or ""
    assert story_id is not None and story is not None  # required=True guarantees it
    return Story(
        id=story_id,
        prompt=prompt,
        story=story,
        reference=_reference_field(record),
        system=_text_field(record, "system", required=False),
        extra=_extra(record, STORY_FIELDS),
    )


def parse_judgment(record: Mapping[str, Any]) -> Judgment:
    """Build a :class:`Judgment` from a mapping, raising ``ValueError`` on a bad field."""
    item_id = _text_field(record, "item_id", required=True)
    rater_id = _text_field(record, "rater_id", required=True)
    criterion = _text_field(record, "criterion", required=True)
    value = _number_field(record, "value", required=True)
    time_s = _number_field(record, "time_s", required=False)
    if time_s is not None and time_s < 0:
        raise _RecordError(f"field 'time_s' must be >= 0; got {time_s}")
    assert (
        item_id is not None and rater_id is not None and criterion is not None and value is not None
    )
    return Judgment(
        item_id=item_id,
        rater_id=rater_id,
        criterion=criterion,
        value=value,
        time_s=time_s,
        study=_text_field(record, "study", required=False),
        condition=_text_field(record, "condition", required=False),
        extra=_extra(record, JUDGMENT_FIELDS),
    )


def parse_score(record: Mapping[str, Any]) -> Score:
    """Build a :class:`Score`; a null value means an undefined score and becomes NaN."""
    item_id = _text_field(record, "item_id", required=True)
    metric = _text_field(record, "metric", required=True)
    if "value" not in record:
        raise _RecordError("required field 'value' is missing")
    raw = record["value"]
    value = math.nan if raw is None else _number_field(record, "value", required=True)
    assert item_id is not None and metric is not None and value is not None
    signature = record.get("signature") or ""
    if not isinstance(signature, str):
        raise _RecordError("field 'signature' must be a string")
    return Score(item_id, metric, value, signature, _extra(record, SCORE_FIELDS))


# --------------------------------------------------------------------------- raw reading


def detect_format(path: str | Path, fmt: FileFormat | None = None) -> FileFormat:
    """``jsonl`` or ``csv`` from a file's suffix (``.jsonl``/``.json`` or ``.csv``); anything else raises ``ValueError``."""
    if fmt is not None:
        check_choice(fmt, ("jsonl", "csv"), "fmt")
        return fmt
    suffix = Path(path).suffix.lower()
    if suffix == ".csv":
        return "csv"
    if suffix in (".jsonl", ".json", ".ndjson"):
        return "jsonl"
    raise ValueError(
        f"{path}: cannot tell the format from the extension {suffix!r}; use .jsonl or .csv"
    )


def _decode_lines(path: Path, raw: bytes) -> Iterator[tuple[int, str | DataProblem]]:
    if raw.startswith(b"\xef\xbb\xbf"):
        raw = raw[3:]
    for number, line in enumerate(raw.split(b"\n"), start=1):
        try:
            yield number, line.decode("utf-8").rstrip("\r")
        except UnicodeDecodeError as exc:
            yield (
                number,
                DataProblem(
                    str(path),
                    number,
                    f"undecodable byte 0x{line[exc.start]:02x} at column {exc.start + 1}; the file must be UTF-8",
                ),
            )


def _jsonl_records(path: Path, raw: bytes) -> Iterator[tuple[int, dict[str, Any] | DataProblem]]:
    for number, line in _decode_lines(path, raw):
        if isinstance(line, DataProblem):
            yield number, line
            continue
        if not line.strip():
            continue
        try:
            record = json.loads(line, parse_constant=_reject_constant)
        except json.JSONDecodeError as exc:
            yield (
                number,
                DataProblem(str(path), number, f"malformed JSON: {exc.msg} at column {exc.colno}"),
            )
            continue
        except _RecordError as exc:
            yield number, DataProblem(str(path), number, str(exc))
            continue
        except RecursionError:
            reason = "malformed JSON: nested too deeply (no record nests lists or objects so)"
            yield number, DataProblem(str(path), number, reason)
            continue
        if not isinstance(record, dict):
            yield (
                number,
                DataProblem(
                    str(path), number, f"expected a JSON object, got {type(record).__name__}"
                ),
            )
            continue
        yield number, record


def _reject_constant(name: str) -> float:
    raise _RecordError(f"{name} is not a valid value (JSON has no {name}; use null or a number)")


def csv_records(
    path: Path, raw: bytes, required: Sequence[str]
) -> Iterator[tuple[int, dict[str, Any] | DataProblem]]:
    """The numbered records of a CSV file's bytes (``(line, record)``), or a problem per bad line."""
    decoded = list(_decode_lines(path, raw))
    bad = [item for _, item in decoded if isinstance(item, DataProblem)]
    if bad:  # csv needs the whole text; report every undecodable line and stop
        yield from ((p.line, p) for p in bad)
        return
    text = "\n".join(str(item) for _, item in decoded)
    reader = csv.reader(io.StringIO(text))
    try:
        header = next(reader)
    except StopIteration:
        yield 1, DataProblem(str(path), 1, "the file is empty: expected a CSV header")
        return
    header = [name.strip() for name in header]
    missing = [name for name in required if name not in header]
    if missing:
        yield (
            1,
            DataProblem(
                str(path),
                1,
                f"CSV header lacks required column(s) {', '.join(missing)}; found {', '.join(header)}",
            ),
        )
        return
    duplicated = sorted({name for name in header if header.count(name) > 1})
    if duplicated:
        yield 1, DataProblem(str(path), 1, f"CSV header repeats column(s) {', '.join(duplicated)}")
        return
    previous_end = reader.line_num
    while True:
        try:
            row = next(reader)
        except StopIteration:
            return
        except csv.Error as exc:
            yield reader.line_num, DataProblem(str(path), reader.line_num, f"malformed CSV: {exc}")
            return
        start = previous_end + 1
        previous_end = reader.line_num
        if not any(cell.strip() for cell in row):
            continue
        if len(row) != len(header):
            yield (
                start,
                DataProblem(
                    str(path),
                    start,
                    f"expected {len(header)} CSV fields as in the header, got {len(row)}",
                ),
            )
            continue
        yield (
            start,
            {name: (cell if cell != "" else None) for name, cell in zip(header, row, strict=True)},
        )


def _read_raw(path: str | Path) -> tuple[Path, bytes]:
    file_path = Path(path)
    if not file_path.exists():
        raise FileNotFoundError(f"{file_path}: no such file")
    if file_path.is_dir():
        raise IsADirectoryError(f"{file_path}: is a directory, expected a file")
    return file_path, file_path.read_bytes()


def iter_raw_records(
    path: str | Path, *, fmt: FileFormat | None = None, required: Sequence[str] = ()
) -> Iterator[tuple[int, dict[str, Any] | DataProblem]]:
    """Yield ``(line, record)`` for each record of a JSONL or CSV file, or ``(line, problem)``
    for a line that cannot be read. Useful for importers of other formats."""
    file_path, raw = _read_raw(path)
    if detect_format(file_path, fmt) == "csv":
        yield from csv_records(file_path, raw, required)
    else:
        yield from _jsonl_records(file_path, raw)


T = TypeVar("T")


def _read_records(
    path: str | Path,
    kind: RecordKind,
    parse: Callable[[Mapping[str, Any]], T],
    key: Callable[[T], Any] | None,
    describe_key: str,
    fmt: FileFormat | None,
) -> list[T]:
    problems: list[DataProblem] = []
    records: list[T] = []
    first_line: dict[Any, int] = {}
    for number, item in iter_raw_records(path, fmt=fmt, required=_REQUIRED_COLUMNS[kind]):
        if isinstance(item, DataProblem):
            problems.append(item)
            continue
        try:
            record = parse(item)
        except _RecordError as exc:
            problems.append(DataProblem(str(path), number, str(exc)))
            continue
        if key is not None:
            record_key = key(record)
            if record_key in first_line:
                problems.append(
                    DataProblem(
                        str(path),
                        number,
                        f"duplicate {describe_key} {record_key!r} (first seen on line {first_line[record_key]})",
                    )
                )
                continue
            first_line[record_key] = number
        records.append(record)
    if problems:
        raise DataFileError(problems)
    if not records:
        raise DataFileError.single(path, 1, f"the file holds no {kind}")
    return records


def read_stories(path: str | Path, *, fmt: FileFormat | None = None) -> list[Story]:
    """Read and validate a story file (JSONL or CSV).

    Raises
    ------
    DataFileError
        Listing every bad line: malformed JSON, undecodable bytes, a missing or empty ``id``
        or ``story``, a duplicate id, a CSV header without ``id`` and ``story``.
    """
    return _read_records(path, "stories", parse_story, lambda s: s.id, "id", fmt)


def read_judgments(path: str | Path, *, fmt: FileFormat | None = None) -> list[Judgment]:
    """Read and validate a long-format judgment file (JSONL or CSV).

    A rater may rate an item on a criterion once per study and condition; a second rating is
    reported as a duplicate.
    """
    return _read_records(
        path,
        "judgments",
        parse_judgment,
        lambda j: (j.item_id, j.rater_id, j.criterion, j.study, j.condition),
        "judgment (item_id, rater_id, criterion, study, condition)",
        fmt,
    )


def read_scores(path: str | Path, *, fmt: FileFormat | None = None) -> list[Score]:
    """Read a score file (one record per item and metric)."""
    return _read_records(
        path, "scores", parse_score, lambda s: (s.item_id, s.metric), "score (item_id, metric)", fmt
    )


def detect_kind(path: str | Path, *, fmt: FileFormat | None = None) -> RecordKind:
    """Tell stories, judgments and scores apart by the fields of the first readable record.

    Raises
    ------
    DataFileError
        When no record is readable (naming the first unreadable line) or the first readable
        one has the fields of no kind.
    """
    problems: list[DataProblem] = []
    for number, item in iter_raw_records(path, fmt=fmt):
        if isinstance(item, DataProblem):
            problems.append(item)
            continue
        keys = set(item)
        if "story" in keys or ("id" in keys and "item_id" not in keys):
            return "stories"
        if keys & {"rater_id", "criterion"}:
            return "judgments"
        if "metric" in keys:
            return "scores"
        raise DataFileError.single(
            path,
            1 if detect_format(path, fmt) == "csv" else number,
            "cannot tell the record kind: a story needs 'id' and 'story', a judgment 'item_id', "
            f"'rater_id', 'criterion', 'value', a score 'item_id', 'metric', 'value'; found {', '.join(sorted(keys))}",
        )
    if problems:
        raise DataFileError(problems[:1])
    raise DataFileError.single(path, 1, "the file holds no readable records")


def read_any(
    path: str | Path, *, kind: RecordKind | None = None, fmt: FileFormat | None = None
) -> list[Any]:
    """Read a file of the given (or detected) kind."""
    kind = kind or detect_kind(path, fmt=fmt)
    readers: dict[str, Callable[..., list[Any]]] = {
        "stories": read_stories,
        "judgments": read_judgments,
        "scores": read_scores,
    }
    check_choice(kind, RECORD_KINDS, "kind")
    return readers[kind](path, fmt=fmt)


# --------------------------------------------------------------------------- writing


def _write_records(
    path: str | Path,
    records: Iterable[Mapping[str, Any]],
    leading: Sequence[str],
    fmt: FileFormat | None,
) -> int:
    rows = [dict(record) for record in records]
    if detect_format(path, fmt) == "jsonl":
        with atomic_write(path) as fh:
            for row in rows:
                fh.write(json.dumps(row, ensure_ascii=False, allow_nan=False) + "\n")
        return len(rows)
    with atomic_write(path, newline="") as fh:
        fh.write(records_csv(rows, leading=leading))
    return len(rows)


def records_csv(
    records: Iterable[Mapping[str, Any]],
    *,
    leading: Sequence[str] = (),
    escape_formulas: bool = False,
) -> str:
    """Flat records as CSV text: the ``leading`` columns first (those present), then every
    other field in order of appearance; lists and dicts as JSON, missing and non-finite values
    as empty cells. ``escape_formulas`` makes cells a spreadsheet would run inert (for files
    people download and open)."""
    from storyeval.base.io import csv_text

    rows = [dict(record) for record in records]
    columns = [name for name in leading if any(name in row for row in rows)]
    for row in rows:
        columns += [name for name in row if name not in columns]
    return csv_text(
        ([_csv_cell(row.get(name)) for name in columns] for row in rows),
        header=columns,
        escape_formulas=escape_formulas,
    )


def _csv_cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, list | dict):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, float) and not math.isfinite(value):
        return ""
    return str(value)


def write_stories(
    path: str | Path, stories: Iterable[Story], *, fmt: FileFormat | None = None
) -> int:
    """Write stories atomically (JSONL or CSV by extension); returns the number written."""
    return _write_records(path, (s.to_dict() for s in stories), STORY_FIELDS, fmt)


def write_judgments(
    path: str | Path, judgments: Iterable[Judgment], *, fmt: FileFormat | None = None
) -> int:
    """Write long-format judgments atomically; returns the number written."""
    return _write_records(path, (j.to_dict() for j in judgments), JUDGMENT_FIELDS, fmt)


def write_scores(
    path: str | Path, scores: Iterable[Score], *, fmt: FileFormat | None = None
) -> int:
    """Write scores atomically (undefined values become null); returns the number written."""
    return _write_records(path, (s.to_dict() for s in scores), SCORE_FIELDS, fmt)


def write_records(
    path: str | Path, records: Iterable[Mapping[str, Any]], *, fmt: FileFormat | None = None
) -> int:
    """Write arbitrary flat records atomically as JSONL or CSV."""
    return _write_records(path, records, (), fmt)


# --------------------------------------------------------------------------- data frames


def judgments_frame(judgments: Sequence[Judgment]) -> Any:
    """A tidy pandas DataFrame with one row per judgment; optional columns always present."""
    import pandas as pd

    frame = pd.DataFrame([j.to_dict() for j in judgments])
    for column in JUDGMENT_FIELDS:
        if column not in frame.columns:
            frame[column] = None
    return frame
