"""Helpers for the meta-evaluation commands: writing tables, surfacing warnings, printing."""

from __future__ import annotations

import contextlib
import math
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import typer

from storyeval.base.markdown import MISSING

TABLE_SUFFIXES = (".csv", ".jsonl")


def check_table_path(path: Path) -> Path:
    """The output path of a table must end in .csv or .jsonl."""
    if path.suffix.lower() not in TABLE_SUFFIXES:
        raise typer.BadParameter(
            f"the output file must end in {' or '.join(TABLE_SUFFIXES)}; got {path.name!r}"
        )
    return path


def write_table(frame: Any, path: Path) -> None:
    """Write a DataFrame atomically as CSV or JSONL (:func:`storyeval.base.io.write_table`)."""
    from storyeval.base.io import write_table as write

    write(path, frame)


@contextlib.contextmanager
def reported_warnings() -> Iterator[None]:
    """Collect the warnings raised inside and print one line per kind to stderr."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield
    from storyeval.meta import MetaEvaluationWarning
    from storyeval.report import group_warnings

    texts = [
        f"{item.category.__name__}: {item.message}"
        for item in caught
        if issubclass(item.category, MetaEvaluationWarning)
    ]
    kinds = group_warnings(texts)  # one line per kind, the cases merged and counted
    for line in kinds:  # every kind: a hidden kind of warning is a hidden problem
        typer.echo(f"warning: {line}", err=True)


def format_estimate(row: Any) -> str:
    est = row["estimate"]
    if est is None or (isinstance(est, float) and math.isnan(est)):
        return MISSING
    text = f"{est:+.3f}"
    low, high = row.get("ci_low"), row.get("ci_high")
    if low is not None and high is not None and not (math.isnan(low) or math.isnan(high)):
        text += f" [{low:+.3f}, {high:+.3f}]"
    return text


def print_table(frame: Any, columns: Sequence[str], *, limit: int = 40) -> None:
    """Print the first rows of a table with the estimate and its interval in one column."""
    if frame.empty:
        typer.echo("(no rows)")
        return
    shown = frame.head(limit).copy()
    if "estimate" in shown.columns:
        shown["estimate [ci]"] = [format_estimate(r) for r in shown.to_dict("records")]
    if "p_value" in shown.columns:
        shown["p"] = [
            MISSING if p is None or (isinstance(p, float) and math.isnan(p)) else f"{p:.3g}"
            for p in shown["p_value"]
        ]
    keep = [c for c in columns if c in shown.columns]
    typer.echo(shown[keep].to_string(index=False))
    if len(frame) > limit:
        typer.echo(f"... {len(frame) - limit} more row(s) in the output file")
