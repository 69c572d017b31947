"""``storyeval cyoa``: analyse (and export) collaborative-writing sessions."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer

from storyeval.cli._common import exit_with, user_error, user_errors

if TYPE_CHECKING:
    from storyeval.collab.records import SessionRecord

cyoa_app = typer.Typer(
    help="Collaborative writing (Choose Your Own Adventure, machine-in-the-loop): analyse and "
    "export writing sessions.",
    no_args_is_help=True,
)


@cyoa_app.command("analyse")
def analyse(
    sessions: Path = typer.Argument(
        ..., help="Sessions file (JSONL) exported by the study server."
    ),
    output: Path = typer.Option(
        ..., "-o", "--output", help="Directory for the CSV tables and report."
    ),
    include_incomplete: bool = typer.Option(
        False,
        "--include-incomplete",
        help="Also analyse the submitted turns of unfinished sessions.",
    ),
    confidence: float = typer.Option(0.95, "--confidence", help="Coverage of the intervals."),
) -> None:
    """Preferences (Table 4.1), edits (Table 4.2), generated vs human text (Table 4.3) and the
    Likert answers of CYOA (and MIL) sessions: writes preferences.csv, edits.csv,
    text_stats.csv, likert.csv, open_answers.csv, edit_items.csv and report.md."""
    from storyeval.collab.analysis import analyse_sessions, write_analysis

    if not 0 < confidence < 1:
        raise exit_with(f"error: --confidence must be between 0 and 1; got {confidence}")
    records = _read_story_sessions([sessions])
    with user_errors():
        result = analyse_sessions(
            records, include_incomplete=include_incomplete, confidence=confidence
        )
        written = write_analysis(result, output)
    prefs = result.preferences
    for _, row in prefs[(prefs["factor"] == "generator") & (prefs["round"] == "all")].iterrows():
        typer.echo(
            f"{row['session']}: {row['level']} chosen {int(row['chosen'])}/{int(row['n'])} "
            f"({100 * row['estimate']:.1f}%), binomial p = {row['p_value']:.3g}"
        )
    edits = result.edits
    tests = edits[(edits["round"] == "all") & edits["group"].str.contains(" vs ")]
    for _, row in tests.iterrows():
        means = edits[
            (edits["session"] == row["session"])
            & (edits["round"] == "all")
            & (edits["metric"] == row["metric"])
            & ~edits["group"].isin(["overall", row["group"]])
        ]
        shown = ", ".join(
            f"{g} {v:.3g}" for g, v in zip(means["group"], means["estimate"], strict=True)
        )
        typer.echo(
            f"{row['session']}: {row['metric']} {shown}; Mann-Whitney U p = {row['p_value']:.3g}"
        )
    typer.echo(
        f"{result.sessions} session(s); wrote {', '.join(p.name for p in written)} to {output}"
    )
    typer.echo(f"signature: {result.signature}")


@cyoa_app.command("export")
def export(
    session_file: Path = typer.Argument(
        ..., help="The CYOA, MIL or slogan session file (YAML) that was served."
    ),
    db: str = typer.Option(
        None,
        "--db",
        help="Database URL of the server (default: <session>.sqlite3 here, as storyeval serve).",
    ),
    output: Path = typer.Option(..., "-o", "--output", help="Write the sessions here (JSONL)."),
    complete_only: bool = typer.Option(
        False, "--complete-only", help="Leave out unfinished sessions."
    ),
) -> None:
    """Export the writing sessions of a session file from the server's database (the same
    records as the admin page's sessions.jsonl), without running the server."""
    from storyeval.base.errors import StoryevalError
    from storyeval.collab.config import load_writing_config
    from storyeval.collab.records import write_sessions
    from storyeval.server import writing_store
    from storyeval.server.db import Database

    try:
        config = load_writing_config(session_file)
        database = Database(db or f"sqlite:///{session_file.with_suffix('.sqlite3').name}")
        database.create_all()
        with database.read() as conn:
            records = writing_store.export(conn, config)
    except (StoryevalError, ValueError, OSError) as exc:
        raise user_error(exc) from None
    if complete_only:
        records = [r for r in records if r["status"] == "complete"]
    count = write_sessions(output, records)
    done = sum(1 for r in records if r["status"] == "complete")
    typer.echo(
        f"wrote {count} session(s) ({done} complete) of {config.kind} {config.name!r} to {output}"
    )


_STORY_SESSIONS = typer.Argument(
    ..., help="Story sessions (JSONL) from the admin page or `storyeval cyoa export`."
)


@cyoa_app.command("stories")
def stories(
    sessions: list[Path] = _STORY_SESSIONS,
    output: Path = typer.Option(..., "-o", "--output", help="Story file to write (.jsonl/.csv)."),
) -> None:
    """The finished stories as a story file (system = the condition of a machine-in-the-loop
    story, prompt_id = the prompt), the input of a Likert study that collects third-party
    ratings (Clark 2021, section 2.6.1)."""
    from storyeval.collab.mil_study import finished_stories
    from storyeval.corpus import write_stories

    found = finished_stories(_read_story_sessions(sessions))
    if not found:
        raise exit_with(f"error: {', '.join(map(str, sessions))}: no finished story yet")
    with user_errors():
        write_stories(output, found)
    typer.echo(f"wrote {len(found)} story(ies) to {output}")


_SLOGAN_FILES = typer.Option(
    None, "--slogans", help="Slogan sessions (JSONL) of the same study; repeat for several."
)
_RATINGS = typer.Option(
    None,
    "--ratings",
    help="Third-party judgments of the stories and slogans (item_id = the ids written by "
    "`cyoa stories` and `slogan-study stories`); repeat for several files.",
)
_AGREEMENT = typer.Option(
    "pearson", "--agreement-method", help="pearson (as the thesis) or spearman."
)


@cyoa_app.command("mil-study")
def mil_study(
    sessions: list[Path] = _STORY_SESSIONS,
    output: Path = typer.Option(..., "-o", "--output", help="Directory for the tables."),
    slogans: list[Path] = _SLOGAN_FILES,
    ratings: list[Path] = _RATINGS,
    agreement_method: str = _AGREEMENT,
    confidence: float = typer.Option(0.95, "--confidence", help="Coverage of the intervals."),
) -> None:
    """Clark (2021), chapter 2: Table 2.4 ("Would you use this system again?"), the writers'
    own ratings and the third-party ratings per condition with the thesis' t tests, and the
    Pearson correlation of own and third-party ratings (sections 2.6.4-2.6.5). Writes
    use_again.csv, self_ratings.csv, third_party.csv, self_vs_others.csv, writers.csv and
    report.md."""
    from storyeval.collab.mil_study import analyse_mil_study, write_mil_study
    from storyeval.collab.slogan_analysis import read_slogan_sessions
    from storyeval.corpus import read_judgments

    records = _read_story_sessions(sessions)
    with user_errors():
        slogan_records = [r for path in slogans or [] for r in read_slogan_sessions(path)]
        judged = [j for path in ratings or [] for j in read_judgments(path)]
        result = analyse_mil_study(
            records,
            slogan_records,
            ratings=judged,
            confidence=confidence,
            agreement_method=agreement_method,
        )
        write_mil_study(result, output)
    typer.echo('Table 2.4: "Would you use this system again?"')
    typer.echo(result.use_again.to_string(index=False))
    shown = result.self_ratings[["task", "question", "condition", "n", "mean", "student_p"]]
    typer.echo(shown.to_string(index=False, float_format=lambda v: f"{v:.3g}"))
    typer.echo(
        "wrote use_again.csv, self_ratings.csv, third_party.csv, self_vs_others.csv, "
        f"writers.csv, report.md to {output}"
    )


def _read_story_sessions(paths: list[Path]) -> list[SessionRecord]:
    from storyeval.base.errors import DataFileError
    from storyeval.collab.records import read_sessions

    records = []
    for path in paths:
        try:
            records += read_sessions(path)
        except DataFileError as exc:
            for problem in exc.problems:
                typer.echo(str(problem), err=True)
            raise typer.Exit(2) from None
        except OSError as exc:
            raise user_error(exc) from None
    return records


def register(app: typer.Typer) -> None:
    """Add the ``cyoa`` commands to the application."""
    app.add_typer(cyoa_app, name="cyoa", rich_help_panel="Collaborative writing")
