"""Story files read in partitions, from local paths or any fsspec URL (``s3://``, ``gs://``,
``hdfs://``, ``http://``, ...), so that no single process has to read a large corpus.

- **JSONL**: byte ranges of about ``blocksize`` bytes, each starting after a line break (the
  usual split of line-delimited files); line numbers in errors are the file's own.
- **Parquet**: one partition per row group (columns ``id``, ``story`` and the optional story
  fields; list-valued ``reference`` columns are kept as lists).
- **CSV**: one partition per file, because a quoted field may span lines, which makes byte
  ranges unsafe; use JSONL or Parquet for corpora too large for one worker.

Every record goes through :func:`storyeval.corpus.parse_story`, so a partition accepts and
rejects exactly what :func:`storyeval.corpus.read_stories` does.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from storyeval.base.errors import DataFileError, DataProblem
from storyeval.corpus import Story

FORMATS = ("jsonl", "csv", "parquet")


@dataclass(frozen=True)
class PartitionSpec:
    """Where one partition of a story file is: the URL, the format, a byte range (JSONL) or
    a row group (Parquet), and the kind of record (``stories``, or ``prompts`` for
    generation: ``id`` and ``prompt``, the ``story`` optional)."""

    url: str
    fmt: str
    index: int
    start: int = 0
    length: int = -1
    kind: str = "stories"


@dataclass
class Partition:
    """The stories of one partition, with each story's line (row) relative to the
    partition's first, the problems found, and how many lines the partition spans."""

    spec: PartitionSpec
    stories: list[Story]
    lines: list[int]
    problems: list[tuple[int, str]] = field(default_factory=list)
    n_lines: int = 0


def file_format(url: str) -> str:
    """``jsonl``, ``csv`` or ``parquet`` from the URL's suffix.

    >>> file_format("s3://bucket/stories.parquet"), file_format("stories.jsonl")
    ('parquet', 'jsonl')
    """
    lowered = url.lower().split("?", 1)[0]
    for suffix, fmt in ((".parquet", "parquet"), (".pq", "parquet"), (".csv", "csv")):
        if lowered.endswith(suffix):
            return fmt
    if lowered.endswith((".jsonl", ".json", ".ndjson")):
        return "jsonl"
    raise ValueError(f"{url}: cannot tell the format; use .jsonl, .csv or .parquet")


def plan_partitions(
    url: str, *, blocksize: int = 64 * 2**20, kind: str = "stories"
) -> list[PartitionSpec]:
    """The partitions of a story file (see the module docstring).

    Raises
    ------
    FileNotFoundError
        When the URL does not exist.
    """
    import fsspec

    fmt = file_format(url)
    fs, path = fsspec.core.url_to_fs(url)
    if not fs.exists(path):
        raise FileNotFoundError(f"{url}: no such file")
    if kind not in ("stories", "prompts"):
        raise ValueError(f"kind must be stories or prompts; got {kind!r}")
    if fmt == "csv":
        return [PartitionSpec(url, fmt, 0, kind=kind)]
    if fmt == "parquet":
        import pyarrow.parquet as pq

        with fs.open(path, "rb") as handle:
            groups = pq.ParquetFile(handle).num_row_groups
        return [PartitionSpec(url, fmt, g, g, kind=kind) for g in range(max(groups, 1))]
    size = int(fs.size(path))
    if blocksize < 1:
        raise ValueError(f"blocksize must be >= 1; got {blocksize}")
    starts = list(range(0, max(size, 1), blocksize))
    return [
        PartitionSpec(url, fmt, i, s, min(blocksize, size - s), kind) for i, s in enumerate(starts)
    ]


def _jsonl_lines(spec: PartitionSpec) -> tuple[list[bytes], bool]:
    """The complete lines that start inside the byte range, and whether the range began
    mid-line (its first partial line belongs to the previous partition)."""
    import fsspec

    with fsspec.open(spec.url, "rb") as handle:
        handle.seek(spec.start)
        skipped = False
        if spec.start > 0:
            handle.seek(spec.start - 1)
            if handle.read(1) != b"\n":
                handle.readline()  # the rest of a line that began before the range
                skipped = True
        lines: list[bytes] = []
        while handle.tell() < spec.start + spec.length or (spec.length == 0 and not lines):
            line = handle.readline()
            if not line:
                break
            lines.append(line)
    return lines, skipped


def read_partition(spec: PartitionSpec) -> Partition:
    """Read and validate one partition's stories."""
    if spec.fmt == "jsonl":
        return _read_jsonl(spec)
    if spec.fmt == "parquet":
        return _read_table(spec, _parquet_rows(spec))
    return _read_csv(spec)


def _parse(spec: PartitionSpec, numbered: list[tuple[int, Any]]) -> Partition:
    from storyeval.corpus import parse_prompt, parse_story

    parse = parse_prompt if spec.kind == "prompts" else parse_story
    stories, lines, problems = [], [], []
    for number, record in numbered:
        if isinstance(record, str):
            problems.append((number, record))
            continue
        try:
            stories.append(parse(record))
            lines.append(number)
        except ValueError as exc:
            problems.append((number, str(exc)))
    return Partition(spec, stories, lines, problems)


def _read_jsonl(spec: PartitionSpec) -> Partition:
    raw, _ = _jsonl_lines(spec)
    numbered: list[tuple[int, Any]] = []
    for number, line in enumerate(raw, start=1):
        try:
            text = line.decode("utf-8").rstrip("\r\n")
        except UnicodeDecodeError as exc:
            numbered.append((number, f"undecodable byte at column {exc.start + 1}; UTF-8 needed"))
            continue
        if spec.start == 0 and number == 1:
            text = text.removeprefix("\ufeff")
        if not text.strip():
            continue
        try:
            record = json.loads(text)
        except json.JSONDecodeError as exc:
            numbered.append((number, f"malformed JSON: {exc.msg} at column {exc.colno}"))
            continue
        if not isinstance(record, dict):
            numbered.append((number, f"expected a JSON object, got {type(record).__name__}"))
            continue
        numbered.append((number, record))
    partition = _parse(spec, numbered)
    partition.n_lines = len(raw)
    return partition


def _parquet_rows(spec: PartitionSpec) -> list[dict[str, Any]]:
    import fsspec
    import pyarrow.parquet as pq

    with fsspec.open(spec.url, "rb") as handle:
        table = pq.ParquetFile(handle).read_row_group(spec.start)
    return list(table.to_pylist())


def _read_table(spec: PartitionSpec, rows: list[dict[str, Any]]) -> Partition:
    clean = [{k: (v.tolist() if hasattr(v, "tolist") else v) for k, v in r.items()} for r in rows]
    partition = _parse(spec, list(enumerate(clean, start=1)))
    partition.n_lines = len(rows)
    return partition


def _read_csv(spec: PartitionSpec) -> Partition:
    import fsspec

    from storyeval.corpus import csv_records

    with fsspec.open(spec.url, "rb") as handle:
        raw = handle.read()
    numbered: list[tuple[int, Any]] = []
    required = ("id", "prompt") if spec.kind == "prompts" else ("id", "story")
    for number, item in csv_records(spec.url, raw, required):  # type: ignore[arg-type]
        numbered.append((number, item.reason if isinstance(item, DataProblem) else item))
    partition = _parse(spec, numbered)
    partition.n_lines = raw.count(b"\n") + 1
    return partition


def check_partitions(
    url: str,
    summaries: list[tuple[int, list[str], list[int], list[tuple[int, str]]]],
    kind: str = "stories",
) -> None:
    """Raise the problems and duplicate ids of all partitions with the file's own line
    numbers. ``summaries`` holds, per partition in order: its number of lines, its story ids,
    their relative lines and its problems.

    Raises
    ------
    DataFileError
        Listing every bad line (as :func:`storyeval.corpus.read_stories` would).
    """
    problems: list[DataProblem] = []
    first: dict[str, int] = {}
    offset = 0
    total = 0
    for n_lines, ids, lines, found in summaries:
        problems += [DataProblem(url, offset + line, reason) for line, reason in found]
        for story_id, line in zip(ids, lines, strict=True):
            where = offset + line
            if story_id in first:
                problems.append(
                    DataProblem(
                        url,
                        where,
                        f"duplicate id {story_id!r} (first seen on line {first[story_id]})",
                    )
                )
            else:
                first[story_id] = where
        offset += n_lines
        total += len(ids)
    if problems:
        raise DataFileError(sorted(problems, key=lambda p: p.line))
    if total == 0:
        raise DataFileError.single(url, 1, f"the file holds no {kind}")


def read_partitioned(url: str) -> tuple[list[Story], dict[str, int]]:
    """Every story of a file read partition by partition in this process, and each id's line
    (row), checked as :func:`storyeval.corpus.read_stories` checks a file."""
    parts = [read_partition(spec) for spec in plan_partitions(url)]
    check_partitions(
        url, [(p.n_lines, [s.id for s in p.stories], p.lines, p.problems) for p in parts]
    )
    stories: list[Story] = []
    lines: dict[str, int] = {}
    offset = 0
    for part in parts:
        stories += part.stories
        lines.update(
            {s.id: offset + line for s, line in zip(part.stories, part.lines, strict=True)}
        )
        offset += part.n_lines
    return stories, lines
