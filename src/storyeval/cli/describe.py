"""``storyeval describe``: per-system corpus statistics."""

from __future__ import annotations

from pathlib import Path

import typer

from storyeval.cli._common import check_choice, user_errors


def describe(
    stories: Path = typer.Argument(..., help="A story file (.jsonl or .csv)."),
    output: Path = typer.Option(None, "-o", "--output", help="Write the table as CSV here."),
    split: str = typer.Option("pysbd", "--split", help="Sentence splitter: pysbd or spacy."),
) -> None:
    """Count stories, words and sentences per system."""
    from rich.console import Console
    from rich.table import Table

    from storyeval.base.io import atomic_write
    from storyeval.corpus import read_stories
    from storyeval.text import SPLIT_METHODS

    check_choice(split, SPLIT_METHODS, "--split")
    from storyeval.describe import describe_stories

    with user_errors():
        table = describe_stories(read_stories(stories), split_method=split)  # type: ignore[arg-type]
        if output is not None:
            with atomic_write(output, newline="") as fh:
                table.to_csv(fh, index=False)
    # statistics as rows, systems as columns: the names stay whole on an 80-column terminal
    view = Table(title=f"{stories}")
    view.add_column("statistic", justify="left", no_wrap=True)
    for system in table["system"]:
        view.add_column(str(system), justify="right", overflow="fold")
    for column in [c for c in table.columns if c not in ("signature", "system")]:
        view.add_row(
            column,
            *[f"{v:.1f}" if isinstance(v, float) else str(v) for v in table[column]],
        )
    console = Console()
    console.print(view)
    console.print(f"signature: {table['signature'].iloc[0]}")


def register(app: typer.Typer) -> None:
    """Add the ``describe`` command to the application."""
    app.command(rich_help_panel="Data")(describe)
