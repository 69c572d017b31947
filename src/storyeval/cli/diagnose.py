"""``storyeval diagnose STORIES -o DIR``: diagnostics of model prose."""

from __future__ import annotations

from pathlib import Path

import typer

from storyeval.cli._common import user_error


def diagnose_command(
    stories: Path = typer.Argument(..., help="Stories of one or more systems (.jsonl or .csv)."),
    output: Path = typer.Option(..., "-o", "--output", help="The directory to write."),
    reference_system: str = typer.Option(
        "human", "--reference-system", help="The system whose stories give the human profile."
    ),
    n: int = typer.Option(3, "-n", help="Length of the over-used phrases, in words."),
    repeat_n: int = typer.Option(4, "--repeat-n", help="Length of repeated phrases, in words."),
    min_stories: int = typer.Option(
        3, "--min-stories", help="A phrase must occur in at least this many stories."
    ),
    min_ratio: float = typer.Option(
        3.0, "--min-ratio", help="Over-used: share of stories >= this x the reference's share."
    ),
    words: Path = typer.Option(
        None, "--words", help="A slop word list (one word a line) instead of storyeval's slop-v1."
    ),
    bootstrap: int = typer.Option(1000, "--bootstrap", help="Bootstrap resamples for the CIs."),
    seed: int = typer.Option(0, "--seed", help="Seed of the bootstrap."),
    build_list: Path = typer.Option(
        None,
        "--build-list",
        help="Also write a slop list: words and phrases (1-3 words) over-represented in the "
        "other systems' stories against the reference system's (log-odds z >= 3.09, used 5+ "
        "times); slop_index.words=FILE and --words read it.",
    ),
) -> None:
    """Over-used phrases against the human profile, phrases repeated across a system's
    stories, the slop index and sentence/paragraph-length variability.

    Writes DIR/diagnostics.csv (per system and metric: mean, interval, n, signature),
    DIR/overused_phrases.csv (system, phrase, stories, share, reference share, ratio),
    DIR/repeated_phrases.csv and DIR/diagnostics.md.
    """
    from storyeval.analyses.diagnostics import diagnose, diagnostics_markdown
    from storyeval.base.errors import StoryevalError
    from storyeval.base.io import (
        check_output_directory,
        claim_output_directory,
        write_table,
        write_text_atomic,
    )
    from storyeval.corpus import read_stories

    try:
        check_output_directory(output, "diagnosis", inputs=[stories])
        result = diagnose(
            read_stories(stories),
            reference_system=reference_system,
            n=n,
            repeat_n=repeat_n,
            min_stories=min_stories,
            min_ratio=min_ratio,
            words_file=words,
            bootstrap=bootstrap,
            seed=seed,
        )
        claim_output_directory(output, "diagnosis", inputs=[stories])
        write_table(output / "diagnostics.csv", result["systems"])
        write_table(output / "overused_phrases.csv", result["overused"])
        write_table(output / "repeated_phrases.csv", result["repeated"])
        write_text_atomic(output / "diagnostics.md", diagnostics_markdown(result))
        if build_list is not None:
            _write_list(stories, reference_system, build_list)
    except (StoryevalError, OSError, ValueError) as exc:
        raise user_error(exc) from None
    for note in result["notes"]:
        typer.echo(f"note: {note}", err=True)
    from storyeval.cli._tables import print_table

    print_table(result["systems"], ["metric", "system", "estimate [ci]", "n"], limit=40)
    top = result["overused"].groupby("system").head(5)
    if len(top):
        typer.echo("\nmost over-used phrases (share of stories vs the reference's):")
        typer.echo(
            top[["system", "ngram", "stories", "reference_stories", "ratio"]].to_string(index=False)
        )
    typer.echo(
        f"wrote {output}/diagnostics.csv, overused_phrases.csv, repeated_phrases.csv, diagnostics.md"
    )


def register(app: typer.Typer) -> None:
    """Add the ``diagnose`` command to the application."""
    app.command("diagnose", rich_help_panel="Metrics")(diagnose_command)


def _write_list(stories: Path, reference_system: str, target: Path) -> None:
    """The slop list of the corpus (see --build-list)."""
    from storyeval.base.io import write_text_atomic
    from storyeval.corpus import read_stories
    from storyeval.metrics.phrases import build_slop_list, slop_list_text

    read = read_stories(stories)
    human = [s.story for s in read if s.system == reference_system]
    model = [s.story for s in read if s.system != reference_system]
    if not human:
        raise ValueError(f"no story of the reference system {reference_system!r}")
    entries = build_slop_list(model, human)
    write_text_atomic(target, slop_list_text(entries, source=stories.name))
    shown = ", ".join(entries["entry"].head(12))
    typer.echo(f"wrote {len(entries)} over-represented words and phrases to {target}: {shown}")
