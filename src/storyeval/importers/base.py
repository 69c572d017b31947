"""What every importer shares: the result records, the checks of the input file, and the
parsing of cells.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from storyeval.base.errors import DataProblem
from storyeval.base.signature import Signature
from storyeval.corpus import Judgment, Score, Story


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
    #: judgments by LLM judges that the release holds beside people's (written apart, so
    #: that people's file holds people only)
    judge_judgments: list[Judgment] = field(default_factory=list)


def file_digest(path: Path) -> str:
    """The first 12 hex digits of the SHA-256 of a file's bytes."""
    return hashlib.sha256(path.read_bytes()).hexdigest()[:12]


def import_signature(fmt: str, path: Path, column: str) -> str:
    """The signature of values imported from ``column`` of a file (format, file name and hash)."""
    return Signature(
        "imported",
        {"format": fmt, "file": path.name, "sha256": file_digest(path), "column": column},
    ).render()


def require_file(path: str | Path) -> Path:
    """The path of an existing file (a missing path or a directory is an error)."""
    file_path = Path(path)
    if not file_path.exists():
        raise FileNotFoundError(f"{file_path}: no such file")
    if file_path.is_dir():
        raise IsADirectoryError(f"{file_path}: is a directory, expected a file")
    return file_path


def utf8_lines(path: Path, problems: list[DataProblem]) -> list[tuple[int, str]]:
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


def parse_list(cell: Any) -> list[Any]:
    """A cell holding a JSON list (or a list already), as a list."""
    if cell is None:
        raise ValueError("the cell is empty")
    value = json.loads(cell) if isinstance(cell, str) else cell
    if not isinstance(value, list):
        raise ValueError(f"expected a JSON list, got {type(value).__name__}")
    return value


def to_number(value: Any) -> float:
    """A cell as a float: NaN for an empty or missing cell, an error for a non-number."""
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


class Records(Protocol):
    """Where an importer puts what it read (:class:`storyeval.importers.ImportResult`)."""

    stories: list[Story]
    judgments: list[Judgment]
    comparisons: list[dict[str, Any]]
    notes: list[str]


def to_rating(value: Any) -> float:
    """A rating cell as a finite float."""
    number = float(str(value).strip())
    if not math.isfinite(number):
        raise ValueError("not finite")
    return number
