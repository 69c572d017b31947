"""``storyeval truncate``: cut stories as a paper cut its generated ones."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, cast

import typer

from storyeval.cli._common import check_choice, user_errors

if TYPE_CHECKING:
    from storyeval.truncation import Policy


def truncate_command(
    stories: Path = typer.Argument(..., help="A story file (.jsonl or .csv)."),
    output: Path = typer.Option(..., "-o", "--output", help="The cut stories (.jsonl or .csv)."),
    preset: str = typer.Option(
        None,
        "--preset",
        help="A paper's cut: karpinska2021 (at most 150 words, whole sentences, detokenized), "
        "union-wp (the sentence end nearest 200 words), clark2021-detection (texts of 100 "
        "words or more, cut at the end of the sentence reaching 100), clark2021-context (the "
        "last 60 words, from the start of the sentence holding the 60th; use --field prompt "
        "for contexts).",
    ),
    words: int = typer.Option(None, "--words", help="The cap in words (without --preset)."),
    policy: str = typer.Option(
        "at_most",
        "--policy",
        help="at_most, nearest, at_least or last_at_least (without --preset).",
    ),
    detokenize: bool = typer.Option(
        False, "--detokenize", help="Join tokenized text (did n't, home .) before counting."
    ),
    split: str = typer.Option(
        "pysbd", "--split", help="Sentence splitter: pysbd, spacy or tokens."
    ),
    field: str = typer.Option(
        "story", "--field", help="The field to cut: story, reference or prompt."
    ),
) -> None:
    """Cut every story at a sentence end as the paper cut the texts it compares (Karpinska et
    al. 2021; Guan and Huang 2020; Clark 2021, chapter 6), so human and generated texts have
    the same length. Each record keeps its words before and after and the cut's signature;
    texts a policy leaves out (too short) are counted and not written."""
    from storyeval.corpus import read_stories, write_stories
    from storyeval.text import SPLIT_METHODS
    from storyeval.truncation import cut_stories, outcome_summary, truncation_signature

    check_choice(split, SPLIT_METHODS, "--split")
    check_choice(field, ("story", "reference", "prompt"), "--field")
    policy, words, detokenize = _settings(preset, words, policy, detokenize)
    signature = truncation_signature(policy, words, detokenize, split).render()
    with user_errors():
        kept, counts = cut_stories(
            read_stories(stories),
            words=words,
            policy=policy,
            detokenize=detokenize,
            method=split,  # type: ignore[arg-type]
            field=field,
        )
        write_stories(output, kept)
    typer.echo(outcome_summary(counts))
    if counts["cut_inside"]:
        typer.echo(
            f"note: {counts['cut_inside']} had no sentence end within {words} words: cut inside the first sentence",
            err=True,
        )
    if counts["too_short"]:
        typer.echo(f"note: {counts['too_short']} shorter than {words} words: left out", err=True)
    typer.echo(f"wrote {len(kept)} stories to {output}")
    typer.echo(f"signature: {signature}")


def _settings(
    preset: str | None, words: int | None, policy: str, detokenize: bool
) -> tuple[Policy, int, bool]:
    """The policy, the words and whether to detokenize, from a preset or the options."""
    from storyeval.truncation import POLICIES, PRESETS

    if preset is not None:
        check_choice(preset, tuple(PRESETS), "--preset")
        if words is not None:
            raise typer.BadParameter(
                "--preset sets the words; give one or the other", param_hint="--words"
            )
        return PRESETS[preset]
    if words is None:
        raise typer.BadParameter("give --preset or --words", param_hint="--words")
    check_choice(policy, POLICIES, "--policy")
    return cast("Policy", policy), words, detokenize


def register(app: typer.Typer) -> None:
    """Add the ``truncate`` command to the application."""
    app.command("truncate", rich_help_panel="Data")(truncate_command)
