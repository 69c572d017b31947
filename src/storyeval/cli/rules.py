"""``storyeval rules``: controlled test data from a grammar, and rule conformance of outputs."""

from __future__ import annotations

from pathlib import Path

import typer

from storyeval.cli._common import user_error

rules_app = typer.Typer(
    help="Rule-based controlled test data and rule conformance ('Evaluation rules!', van Miltenburg et al. (2020)).",
    no_args_is_help=True,
)

_GRAMMAR = typer.Argument(..., help="A grammar YAML file, or a built-in name (story).")


@rules_app.command("generate")
def generate(
    grammar: str = _GRAMMAR,
    output: Path = typer.Option(..., "-o", "--output", help="The story file to write (.jsonl)."),
    n: int = typer.Option(100, "-n", "--count", min=1, help="Stories to generate."),
    distribution: str = typer.Option(
        "uniform", "--distribution", help="A distribution of the grammar (e.g. uniform, skewed)."
    ),
    seed: int = typer.Option(0, "--seed", help="Same grammar, distribution and seed: same corpus."),
) -> None:
    """Generate stories from a grammar; each record lists the rule, realisation and slot
    values of every sentence (``rules``)."""
    from storyeval.corpus import write_records
    from storyeval.errors import StoryevalError
    from storyeval.rules import generate_corpus, load_grammar

    try:
        loaded = load_grammar(grammar)
        stories = generate_corpus(loaded, n, distribution=distribution, seed=seed)
        write_records(output, [story.to_record() for story in stories])
    except (StoryevalError, OSError, ValueError) as exc:
        raise user_error(exc) from None
    typer.echo(
        f"wrote {len(stories)} stories to {output} ({loaded.name}, {distribution}, seed {seed})"
    )


@rules_app.command("evaluate")
def evaluate(
    grammar: str = _GRAMMAR,
    outputs: Path = typer.Argument(..., help="System outputs: a story file (system field kept)."),
    output: Path = typer.Option(..., "-o", "--output", help="The directory for the tables."),
    distribution: str = typer.Option(
        None, "--distribution", help="Compare each rule's share with this distribution's."
    ),
    confidence: float = typer.Option(0.95, "--confidence", help="Interval coverage."),
) -> None:
    """Which rules each system's outputs reproduce: per system (sentence, story and order
    conformance), per rule (count, share, expected share) and per realisation, with
    Clopper-Pearson intervals. Writes systems.csv, rules.csv, realisations.csv, sentences.csv."""
    from storyeval.cli._tables import print_table
    from storyeval.corpus import read_stories
    from storyeval.errors import StoryevalError
    from storyeval.io import write_table
    from storyeval.rules import conformance, load_grammar

    try:
        loaded = load_grammar(grammar)
        stories = read_stories(outputs)
        tables = conformance(
            loaded,
            [(s.id, s.system or "(none)", s.story) for s in stories],
            distribution=distribution,
            confidence=confidence,
        )
        output.mkdir(parents=True, exist_ok=True)
        for name, frame in tables.items():
            write_table(output / f"{name}.csv", frame)
    except (StoryevalError, OSError, ValueError) as exc:
        raise user_error(exc) from None
    print_table(
        tables["systems"].rename(columns={"rate": "estimate"}),
        ["system", "measure", "estimate [ci]", "n"],
    )
    typer.echo(f"wrote {', '.join(f'{n}.csv' for n in tables)} to {output}")


@rules_app.command("grammars")
def grammars() -> None:
    """List the built-in grammars."""
    from storyeval.rules import GRAMMARS

    for name in GRAMMARS:
        typer.echo(f"{name}: {GRAMMARS.get(name)}")


def register(app: typer.Typer) -> None:
    """Add the ``rules`` commands to the application."""
    app.add_typer(rules_app, name="rules", rich_help_panel="Meta-evaluation")
