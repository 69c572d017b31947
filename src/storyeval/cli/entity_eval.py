"""``storyeval entity-eval``: the mention generation and sentence selection tasks (Clark 2021,
chapter 3) for any causal LM, and the approximate mention detector they can run on."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from storyeval.cli._common import user_error

entity_app = typer.Typer(
    help="Entity evaluation tasks of Clark's thesis (chapter 3): mention generation (MAP) and "
    "pairwise sentence selection (accuracy), for any causal LM.",
    no_args_is_help=True,
)

_INPUT = typer.Argument(
    ...,
    help="Annotated texts (.jsonl with id, text, mentions), a CoNLL-2012 file (*conll) or a "
    "story file (mentions then detected approximately).",
)
_MODELS = typer.Option(
    None,
    "--model",
    "-m",
    help="A causal LM (hub name or local directory) or an ENGEN directory (repeat; default: the "
    "offline LM).",
)
_FORMAT = typer.Option("auto", "--format", help="auto, annotated, conll or stories.")
_OUTPUT = typer.Option(..., "-o", "--output", help="The directory for the tables.")
_LIMIT = typer.Option(
    None,
    "--limit",
    min=1,
    help="Evaluate the first N texts only (a quick look; the signature counts the texts).",
)


def _first(texts: list[Any], limit: int | None) -> list[Any]:
    """The first ``limit`` texts (all without a limit), saying what was left out."""
    if limit is None or len(texts) <= limit:
        return texts
    typer.echo(f"--limit {limit}: the first {limit} of {len(texts)} texts", err=True)
    return texts[:limit]


def _scorers(models: list[str] | None, texts: Any = ()) -> list[Any]:
    """A scorer per model: ENGEN directories (``storyeval train engen``) score all three
    mention tasks with the texts' annotations; any other name is a causal LM."""
    from storyeval.analyses.entity_eval import LanguageModelScorer
    from storyeval.tuning.engen import EngenScorer
    from storyeval.tuning.engen_generate import is_engen_directory

    names: list[str | None] = list(models) if models else [None]
    return [
        EngenScorer(str(name)).bind(texts)
        if is_engen_directory(name)
        else LanguageModelScorer(name, progress=True)
        for name in names
    ]


def _write(result: object, output: Path, items_name: str, summary_name: str) -> None:
    from storyeval.base.io import claim_output_directory, write_table

    claim_output_directory(output, "entity evaluation")
    write_table(output / items_name, result.items)  # type: ignore[attr-defined]
    write_table(output / summary_name, result.summary)  # type: ignore[attr-defined]


@entity_app.command("annotate")
def annotate(
    stories: Path = typer.Argument(..., help="A story file (.jsonl or .csv)."),
    output: Path = typer.Option(
        ..., "-o", "--output", help="The annotated texts to write (.jsonl)."
    ),
) -> None:
    """Detect mentions and coreference clusters in stories (approximate: spaCy entities, noun
    chunks and pronouns, greedy clustering) and write them as annotated texts to inspect or
    correct."""
    from storyeval.base.errors import StoryevalError
    from storyeval.corpus import read_stories
    from storyeval.entities import detect_mentions, write_annotated

    try:
        texts = detect_mentions((s.id, s.story) for s in read_stories(stories))
        write_annotated(output, texts)
    except (StoryevalError, OSError, ValueError) as exc:
        raise user_error(exc) from None
    mentions = sum(len(t.mentions) for t in texts)
    typer.echo(f"wrote {len(texts)} texts with {mentions} mentions to {output}")


@entity_app.command("mentions")
def mentions(
    texts: Path = _INPUT,
    output: Path = _OUTPUT,
    model: list[str] = _MODELS,
    fmt: str = _FORMAT,
    no_baseline: bool = typer.Option(
        False, "--no-baseline", help="Leave out the reverse-order baseline."
    ),
    limit: int = _LIMIT,
) -> None:
    """Mention generation: the MAP of the correct mention ranked against every earlier
    mention by the model's score (mention only; the reverse-order baseline on all three
    tasks). Writes mention_generation.csv and slots.csv."""
    from storyeval.analyses.entity_eval import mention_generation
    from storyeval.base.errors import StoryevalError
    from storyeval.entities import read_entity_texts

    try:
        annotated, source = read_entity_texts(texts, fmt=fmt, limit=limit)
        result = mention_generation(
            annotated,
            scorers=_scorers(model, annotated),
            baseline=not no_baseline,
            source=source,
        )
        _write(result, output, "slots.csv", "mention_generation.csv")
    except (StoryevalError, OSError, ValueError) as exc:
        raise user_error(exc) from None
    typer.echo(result.summary.round(3).to_string(index=False))
    for note in result.notes:
        typer.echo(f"note: {note}")
    typer.echo(f"wrote mention_generation.csv and slots.csv to {output}")
    typer.echo(f"signature: {result.signature.render()}")


@entity_app.command("selection")
def selection(
    texts: Path = _INPUT,
    output: Path = _OUTPUT,
    model: list[str] = _MODELS,
    fmt: str = typer.Option(
        "auto", "--format", help="auto, annotated, conll or stories (no mentions needed)."
    ),
    context: int = typer.Option(49, "--context", min=1, help="Sentences of context at most."),
    window: int = typer.Option(
        50, "--window", min=1, help="Distractors come from the next N sentences."
    ),
    rounds: int = typer.Option(5, "--rounds", min=1, help="Rounds of distractors."),
    min_context: int = typer.Option(
        1, "--min-context", min=1, help="Sentences of context at least."
    ),
    seed: int = typer.Option(
        0, "--seed", help="Seed of the distractors (the same for every model)."
    ),
    limit: int = _LIMIT,
) -> None:
    """Pairwise sentence selection: accuracy of preferring the true next sentence to a later
    one of the same text, per round, mean and sd over rounds, binomial test against chance.
    Writes sentence_selection.csv and decisions.csv."""
    from storyeval.analyses.entity_eval import sentence_selection, sentences_of
    from storyeval.base.errors import StoryevalError
    from storyeval.corpus import read_stories
    from storyeval.entities import entity_file_format, read_entity_texts

    try:
        kind = entity_file_format(texts) if fmt == "auto" else fmt
        loaded: list[Any]
        if kind == "stories":
            loaded = list(read_stories(texts))
        else:
            loaded = list(read_entity_texts(texts, fmt=kind)[0])
        loaded = _first(loaded, limit)
        result = sentence_selection(
            sentences_of(loaded),
            scorers=_scorers(model),
            context_sentences=context,
            distractor_window=window,
            rounds=rounds,
            seed=seed,
            min_context=min_context,
        )
        _write(result, output, "decisions.csv", "sentence_selection.csv")
        if len(result.comparisons):
            from storyeval.base.io import write_table

            write_table(output / "model_comparisons.csv", result.comparisons)
    except (StoryevalError, OSError, ValueError) as exc:
        raise user_error(exc) from None
    typer.echo(result.summary.round(3).to_string(index=False))
    if len(result.comparisons):
        typer.echo("two models on the same decisions (exact binomial test on the discordant ones):")
        typer.echo(result.comparisons.round(4).to_string(index=False))
    typer.echo(f"wrote sentence_selection.csv and decisions.csv to {output}")
    typer.echo(f"signature: {result.signature.render()}")


def register(app: typer.Typer) -> None:
    """Add the ``entity-eval`` commands to the application."""
    app.add_typer(entity_app, name="entity-eval", rich_help_panel="Meta-evaluation")
