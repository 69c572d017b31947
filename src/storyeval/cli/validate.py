"""``storyeval validate``: check a story, judgment or score file."""

from __future__ import annotations

from pathlib import Path

import typer

from storyeval.cli._common import check_choice, user_error


def validate(
    file: Path = typer.Argument(..., help="A story, judgment or score file (.jsonl or .csv)."),
    kind: str = typer.Option(
        None, "--kind", help="stories, judgments or scores (default: detected)."
    ),
) -> None:
    """Check a data file: exit 0 with a one-line summary, or exit 2 with FILE:LINE: reason lines."""
    from storyeval.base.errors import DataFileError
    from storyeval.corpus import RECORD_KINDS, detect_kind, read_any

    if kind is not None:
        check_choice(kind, RECORD_KINDS, "--kind")
    try:
        resolved = kind or detect_kind(file)
        records = read_any(file, kind=resolved)  # type: ignore[arg-type]
    except DataFileError as exc:
        for problem in exc.problems:
            typer.echo(str(problem), err=True)
        raise typer.Exit(2) from None
    except (ValueError, OSError) as exc:
        raise user_error(exc) from None
    singular = {"stories": "story", "judgments": "judgment", "scores": "score"}
    noun = singular.get(resolved, resolved) if len(records) == 1 else resolved
    typer.echo(f"{file}: {len(records)} {noun}, valid")


def register(app: typer.Typer) -> None:
    """Add the ``validate`` command to the application."""
    app.command(rich_help_panel="Data")(validate)
