"""Atomic file writing: an interrupted or failed run never leaves a half-written file."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import IO, Any, TextIO, cast


@contextlib.contextmanager
def _replaced_on_success(path: str | Path, mode: str, **open_kwargs: Any) -> Iterator[IO[Any]]:
    """Open a temporary file beside ``path``; fsync it and rename it over ``path`` when the
    body succeeds, remove it when the body raises."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, mode, **open_kwargs) as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp_name, 0o644)
        os.replace(tmp_name, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp_name)
        raise


@contextlib.contextmanager
def atomic_write(
    path: str | Path, *, encoding: str = "utf-8", newline: str | None = None
) -> Iterator[TextIO]:
    """Open a text file for writing through a temporary file, renamed into place at the end.

    The rename is atomic on POSIX, so readers see either the old file or the complete new
    one. If the body raises (or the process is interrupted), ``path`` is left untouched and
    the temporary file is removed.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> target = pathlib.Path(tempfile.mkdtemp()) / "out.txt"
    >>> with atomic_write(target) as fh:
    ...     _ = fh.write("hello")
    >>> target.read_text()
    'hello'
    """
    with _replaced_on_success(path, "w", encoding=encoding, newline=newline) as fh:
        yield cast(TextIO, fh)


def write_text_atomic(path: str | Path, text: str) -> None:
    """Write a whole text file atomically."""
    with atomic_write(path) as fh:
        fh.write(text)


def write_bytes_atomic(path: str | Path, data: bytes) -> None:
    """Write a whole binary file atomically."""
    with _replaced_on_success(path, "wb") as fh:
        fh.write(data)


#: The file each command that writes a directory leaves in it, naming the kind of output:
#: the command may later replace that directory, and nothing else
OUTPUT_MARKER = ".storyeval-output"


def check_output_directory(
    path: str | Path, kind: str, *, inputs: Iterable[str | Path] = ()
) -> Path:
    """Check that ``path`` may receive an output of ``kind``: it is absent, empty, or a
    previous output of the same kind (its :data:`OUTPUT_MARKER` says so), and it is none of
    ``inputs`` and holds none of them.

    Raises
    ------
    OutputDirectoryError
        Naming the directory and what it holds; nothing is written or removed.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> folder = pathlib.Path(tempfile.mkdtemp())
    >>> _ = (folder / "thesis.tex").write_text("x")
    >>> check_output_directory(folder, "report")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    storyeval.base.errors.OutputDirectoryError: ... holds files that are not an output of storyeval's report ...
    """
    from storyeval.base.errors import OutputDirectoryError

    target = Path(path)
    if target.exists() and not target.is_dir():
        raise OutputDirectoryError(f"{target}: exists and is not a directory")
    resolved = target.resolve()
    for item in inputs:
        source = Path(item).resolve()
        if source == resolved or resolved in source.parents:
            raise OutputDirectoryError(
                f"{target}: is or holds the input {item}; write the output to another directory"
            )
    if not target.is_dir() or not any(target.iterdir()):
        return target
    owner = _owner(target)
    if owner != kind:
        what = f"storyeval's {owner}" if owner else "a storyeval output (no marker file)"
        raise OutputDirectoryError(
            f"{target}: holds files that are not an output of storyeval's {kind} (it is "
            f"{what}); nothing was changed: choose a new or empty directory"
        )
    return target


def _owner(target: Path) -> str | None:
    """The kind of output a directory is: its marker's, or for a model storyeval saved before
    the markers, ``KIND model`` from its ``storyeval.json``."""
    import json

    marker = target / OUTPUT_MARKER
    if marker.is_file():
        return marker.read_text(encoding="utf-8").strip()
    meta = target / "storyeval.json"
    try:
        kind = json.loads(meta.read_text(encoding="utf-8")).get("kind") if meta.is_file() else None
    except (OSError, ValueError, AttributeError):
        return None
    return f"{kind} model" if isinstance(kind, str) else None


def claim_output_directory(
    path: str | Path, kind: str, *, inputs: Iterable[str | Path] = ()
) -> Path:
    """Create ``path`` (or accept it: :func:`check_output_directory`) as an output of
    ``kind`` and mark it so; returns the directory."""
    target = check_output_directory(path, kind, inputs=inputs)
    target.mkdir(parents=True, exist_ok=True)
    marker = target / OUTPUT_MARKER
    if not marker.is_file():
        write_text_atomic(marker, kind + "\n")
    return target


@contextlib.contextmanager
def atomic_directory(
    path: str | Path, kind: str, *, inputs: Iterable[str | Path] = (), owned: bool = False
) -> Iterator[Path]:
    """Build a directory under a temporary name and move it to ``path`` when the body succeeds.

    An existing directory at ``path`` is replaced only after the new one is complete, so a
    failure leaves the old directory (or nothing) in place, never a partial one; and only when
    it is empty or a previous output of ``kind`` (see :func:`check_output_directory`): a
    directory of anything else, or one holding an input, is refused before anything is built.
    ``owned``: the caller owns the place (a folder inside its own output, a cache), which is
    then replaced unchecked.
    """
    inputs = list(inputs)
    target = Path(path) if owned else check_output_directory(path, kind, inputs=inputs)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent))
    try:
        yield tmp
        (tmp / OUTPUT_MARKER).write_text(kind + "\n", encoding="utf-8")
        if not owned:
            check_output_directory(target, kind, inputs=inputs)  # not changed meanwhile
        if target.exists():
            old = Path(
                tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".old", dir=target.parent)
            )
            old.rmdir()
            os.replace(target, old)
            os.replace(tmp, target)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


# ----------------------------------------------------------------------------- tables

FORMULA_PREFIXES = ("=", "+", "-", "@", "\t", "\r")
"""Cell prefixes that spreadsheet programs run as formulas (OWASP "CSV injection")."""


def escape_formula(value: Any) -> Any:
    """A text cell that a spreadsheet would read as a formula, made inert with a leading
    apostrophe (OWASP's recommendation); other values unchanged.

    >>> escape_formula("=HYPERLINK(\\"http://x\\")"), escape_formula("-3"), escape_formula(-3)
    ('\\'=HYPERLINK("http://x")', "'-3", -3)
    """
    if isinstance(value, str) and value.startswith(FORMULA_PREFIXES):
        return "'" + value
    return value


def csv_text(
    rows: Iterable[Sequence[Any]], *, header: Sequence[str], escape_formulas: bool = False
) -> str:
    """Rows as CSV text (``None`` as an empty cell); with ``escape_formulas`` every text cell
    that a spreadsheet would run is made inert (for files people open in a spreadsheet)."""
    import csv
    import io as _io

    buffer = _io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(header)
    for row in rows:
        cells = ["" if v is None else v for v in row]
        writer.writerow([escape_formula(v) for v in cells] if escape_formulas else cells)
    return buffer.getvalue()


def _json_value(value: Any) -> Any:
    import math

    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    if hasattr(value, "item"):
        value = value.item()
        return None if isinstance(value, float) and math.isnan(value) else value
    if str(value) in ("<NA>", "NaT"):
        return None
    return value


def table_text(frame: Any, *, fmt: str = "csv", escape_formulas: bool = False) -> str:
    """A DataFrame as CSV (full precision, empty cells for missing values) or JSONL (one object
    per row, ``null`` for missing values)."""
    import json

    if fmt == "jsonl":
        lines = [
            json.dumps(
                {str(k): _json_value(v) for k, v in record.items()},
                ensure_ascii=False,
                allow_nan=False,
            )
            for record in frame.to_dict("records")
        ]
        return "\n".join(lines) + ("\n" if lines else "")
    if fmt != "csv":
        raise ValueError(f"fmt must be csv or jsonl; got {fmt!r}")
    if escape_formulas:
        frame = frame.apply(lambda column: column.map(escape_formula))
    text: str = frame.to_csv(index=False)
    return text


def write_table(path: str | Path, frame: Any, *, escape_formulas: bool = False) -> Path:
    """Write a DataFrame atomically: JSONL for ``.jsonl``, else CSV (see :func:`table_text`).
    Returns the path."""
    target = Path(path)
    fmt = "jsonl" if target.suffix.lower() == ".jsonl" else "csv"
    write_text_atomic(target, table_text(frame, fmt=fmt, escape_formulas=escape_formulas))
    return target
