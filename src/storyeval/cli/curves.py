"""``storyeval curves STORIES --metrics M -o DIR``: metrics along long stories."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import typer

from storyeval.cli._common import (
    compute_settings,
    device_option,
    precision_option,
    threads_option,
    user_error,
)


def curves_command(
    stories: Path = typer.Argument(..., help="Long stories (.jsonl or .csv)."),
    metric_names: list[str] = typer.Option(
        ["perplexity,distinct2,slop_index"],
        "--metrics",
        "-m",
        help="Per-story metrics, no reference, comma-separated or the option repeated ('none': "
        "only --tension).",
    ),
    output: Path = typer.Option(..., "-o", "--output", help="The directory to write."),
    chapters: str = typer.Option(
        None,
        "--chapters",
        help="Regular expression of a chapter heading line (default: Chapter/Part/Book lines; "
        "'none' for windows only).",
    ),
    window_words: int = typer.Option(
        300, "--window-words", help="Window length in words when a story has no chapters."
    ),
    option: list[str] = typer.Option(None, "--option", "-O", help="NAME.KEY=VALUE (repeat)."),
    tension: str = typer.Option(
        None,
        "--tension",
        help="Also draw each story's tension curve: sample (the share of an LM's sampled "
        "endings after each sentence that miss the actual ending) or likelihood (the ending's "
        "surprisal after each sentence).",
    ),
    tension_samples: int = typer.Option(
        8, "--tension-samples", min=1, help="--tension sample: endings sampled per sentence."
    ),
    seed: int = typer.Option(0, "--seed", help="Seed of the sampled endings."),
    progress: bool = typer.Option(True, "--progress/--no-progress", help="Progress bars."),
    device: str = device_option(),
    precision: str = precision_option(),
    threads: int = threads_option(),
) -> None:
    """Score each chapter (or window) of each story and draw the metrics along the story:
    DIR/curves.csv (story, segment, word span, position, metric, value), DIR/curves.png,
    DIR/curves.md, DIR/curves.json (signatures). `storyeval report --curves DIR` adds them."""
    from storyeval.analyses.curves import CHAPTER_PATTERN, story_curves, write_curves
    from storyeval.base.errors import StoryevalError
    from storyeval.corpus import read_stories
    from storyeval.metrics.registry import parse_option_assignments

    device, precision = compute_settings(device, precision, threads)
    pattern = CHAPTER_PATTERN if chapters is None else (None if chapters == "none" else chapters)
    metrics = ",".join(metric_names)
    try:
        read = read_stories(stories)
        if metrics.strip().lower() in ("", "none"):
            if tension is None:
                raise ValueError("give --metrics, --tension or both")
            metrics = ""
        table, signatures = (
            _no_curves()
            if not metrics
            else story_curves(
                read,
                metrics,
                options=parse_option_assignments(option or []),
                chapter_pattern=pattern,
                window_words=window_words,
                progress=progress and sys.stderr.isatty(),
                device=device,
                precision=precision,
            )
        )
        if tension is not None:
            table, signatures = _with_tension(
                read, table, signatures, tension, tension_samples, seed
            )
        written = write_curves(table, signatures, output)
    except (StoryevalError, OSError, ValueError) as exc:
        raise user_error(exc) from None
    segments = table.groupby("item_id")["segment"].nunique()
    typer.echo(
        f"{len(segments)} stories, {int(segments.sum())} segments "
        f"(median {int(segments.median())} a story)"
    )
    for kind, path in written.items():
        typer.echo(f"wrote {kind}: {path}")


def _no_curves() -> tuple[Any, dict[str, str]]:
    import pandas as pd

    from storyeval.analyses.curves import CURVE_COLUMNS

    return pd.DataFrame(columns=list(CURVE_COLUMNS)), {}


def _with_tension(
    stories: list[Any], table: Any, signatures: dict[str, str], method: str, samples: int, seed: int
) -> tuple[Any, dict[str, str]]:
    """The curves with each story's tension curve added (``--tension``)."""
    import pandas as pd

    from storyeval.analyses.tension import TensionSettings, tension_curves

    settings = TensionSettings(method=method, samples=samples, seed=seed)  # type: ignore[arg-type]
    curve, signature = tension_curves(stories, settings=settings)
    signatures = {**signatures, signature.name: signature.render()}
    return pd.concat([table, curve], ignore_index=True), signatures


def register(app: typer.Typer) -> None:
    """Add the ``curves`` command to the application."""
    app.command("curves", rich_help_panel="Metrics")(curves_command)
