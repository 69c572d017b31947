"""``storyeval curves STORIES --metrics M -o DIR``: metrics along long stories."""

from __future__ import annotations

import sys
from pathlib import Path

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
    metrics: str = typer.Option(
        "perplexity,distinct2,slop_index",
        "--metrics",
        "-m",
        help="Per-story metrics, no reference.",
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
    progress: bool = typer.Option(True, "--progress/--no-progress", help="Progress bars."),
    device: str = device_option(),
    precision: str = precision_option(),
    threads: int = threads_option(),
) -> None:
    """Score each chapter (or window) of each story and draw the metrics along the story:
    DIR/curves.csv (story, segment, word span, position, metric, value), DIR/curves.png,
    DIR/curves.md, DIR/curves.json (signatures). `storyeval report --curves DIR` adds them."""
    from storyeval.analyses.curves import CHAPTER_PATTERN, story_curves, write_curves
    from storyeval.corpus import read_stories
    from storyeval.errors import StoryevalError
    from storyeval.metrics.registry import parse_option_assignments

    device, precision = compute_settings(device, precision, threads)
    pattern = CHAPTER_PATTERN if chapters is None else (None if chapters == "none" else chapters)
    try:
        table, signatures = story_curves(
            read_stories(stories),
            metrics,
            options=parse_option_assignments(option or []),
            chapter_pattern=pattern,
            window_words=window_words,
            progress=progress and sys.stderr.isatty(),
            device=device,
            precision=precision,
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


def register(app: typer.Typer) -> None:
    """Add the ``curves`` command to the application."""
    app.command("curves", rich_help_panel="Metrics")(curves_command)
