"""``storyeval slogan-study``: the final slogans for third-party rating, and the analysis of a
slogan-writing study (Clark 2021, section 2.6.5)."""

from __future__ import annotations

from pathlib import Path

import typer

from storyeval.cli._common import user_error

slogan_app = typer.Typer(
    help="Slogan-writing studies (solo vs machine in the loop): export the final slogans for "
    "rating, and analyse the sessions.",
    no_args_is_help=True,
)

_SESSIONS = typer.Argument(
    ..., help="Slogan sessions (JSONL) from the admin page or `storyeval cyoa export`."
)


@slogan_app.command("stories")
def stories(
    sessions: Path = _SESSIONS,
    output: Path = typer.Option(..., "-o", "--output", help="Story file to write (.jsonl/.csv)."),
) -> None:
    """The final slogans as a story file (system = condition, prompt_id = the prompt), the
    input of a Likert study that collects third-party ratings."""
    from storyeval.base.errors import StoryevalError
    from storyeval.collab.slogan_analysis import read_slogan_sessions, slogan_stories
    from storyeval.corpus import write_stories

    try:
        found = slogan_stories(read_slogan_sessions(sessions))
        if not found:
            raise StoryevalError(f"{sessions}: no final slogan yet")
        write_stories(output, found)
    except (StoryevalError, OSError, ValueError) as exc:
        raise user_error(exc) from None
    typer.echo(f"wrote {len(found)} slogan(s) to {output}")


@slogan_app.command("analyse")
def analyse(
    sessions: Path = _SESSIONS,
    output: Path = typer.Option(..., "-o", "--output", help="Directory for the tables."),
    ratings: Path = typer.Option(
        None, "--ratings", help="Third-party judgments of the slogans (item_id = slogan id)."
    ),
    include_incomplete: bool = typer.Option(
        False, "--include-incomplete", help="Also use the slogans of unfinished sessions."
    ),
    confidence: float = typer.Option(0.95, "--confidence", help="Coverage of the intervals."),
    agreement_method: str = typer.Option(
        "pearson",
        "--agreement-method",
        help="Correlation of writers' own and third-party ratings: pearson (as Clark 2021) "
        "or spearman.",
    ),
) -> None:
    """Per condition: survey means with tests, pulls and suggestion survival, third-party
    ratings. Writes survey.csv, pulls.csv, ratings.csv, writers.csv and report.md."""
    from storyeval.base.errors import StoryevalError
    from storyeval.collab.slogan_analysis import (
        analyse_slogan_sessions,
        read_slogan_sessions,
        write_slogan_analysis,
    )
    from storyeval.corpus import read_judgments

    try:
        records = read_slogan_sessions(sessions)
        judged = read_judgments(ratings) if ratings is not None else []
        result = analyse_slogan_sessions(
            records,
            ratings=judged,
            include_incomplete=include_incomplete,
            confidence=confidence,
            agreement_method=agreement_method,
        )
        write_slogan_analysis(result, output)
    except (StoryevalError, OSError, ValueError) as exc:
        raise user_error(exc) from None
    typer.echo(result.writers.to_string(index=False))
    if not result.pulls.empty:
        typer.echo(result.pulls.to_string(index=False, float_format=lambda v: f"{v:.2f}"))
    typer.echo(f"wrote survey.csv, pulls.csv, ratings.csv, writers.csv, report.md to {output}")


def register(app: typer.Typer) -> None:
    """Add the ``slogan-study`` commands to the application."""
    app.add_typer(slogan_app, name="slogan-study", rich_help_panel="Collaborative writing")
