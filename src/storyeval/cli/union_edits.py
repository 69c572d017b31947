"""``storyeval union-edits STORIES --model DIR -o SCORES``: UNION's editing behaviour
(Guan & Huang 2020, Appendix D)."""

from __future__ import annotations

from pathlib import Path

import typer

from storyeval.cli._common import user_error


def union_edits_command(
    stories: Path = typer.Argument(..., help="Stories (.jsonl or .csv)."),
    model: Path = typer.Option(..., "--model", help="A UNION model (`storyeval train union`)."),
    output: Path = typer.Option(..., "-o", "--output", help="Score file to write (.jsonl/.csv)."),
) -> None:
    """Whether UNION's reconstruction head edits each story (Appendix D): writes the scores
    union_edited (1: some token of the story is predicted otherwise) and union_changed (the
    share of tokens changed), with the edited text, for `storyeval correlate` (Spearman) and
    `storyeval drift subsets --by error_type --include-with-each reasonable` (per error type)."""
    from storyeval.base.errors import StoryevalError
    from storyeval.base.signature import Signature
    from storyeval.corpus import read_stories, write_scores
    from storyeval.learn.union_edits import edit_scores, union_edits
    from storyeval.learn.union_scoring import load_union

    try:
        found = read_stories(stories)
        scorer = load_union(model)
        edits = union_edits(scorer, found)
        fields = {**scorer.signature.fields, "behaviour": "edits"}
        signature = Signature("union_edits", fields).render()
        write_scores(output, edit_scores(edits, found, signature))
    except (StoryevalError, ValueError, OSError) as exc:
        raise user_error(exc) from None
    edited = sum(e.edited for e in edits)
    typer.echo(f"UNION edited {edited} of {len(edits)} stories; wrote {output}")
    typer.echo(f"signature: {signature}")


def register(app: typer.Typer) -> None:
    """Add the ``union-edits`` command to the application."""
    app.command("union-edits", rich_help_panel="Metrics")(union_edits_command)
