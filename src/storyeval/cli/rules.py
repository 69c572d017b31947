"""``storyeval rules``: controlled test data from a grammar, and rule conformance of outputs."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

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
    from storyeval.base.errors import StoryevalError
    from storyeval.corpus import write_records
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
    from storyeval.rules import conformance, load_grammar

    def compute(items: list[tuple[str, str, str]]) -> dict[str, Any]:
        loaded = load_grammar(grammar)
        return conformance(loaded, items, distribution=distribution, confidence=confidence)

    _conformance_tables(compute, outputs, output, ["system", "measure", "estimate [ci]", "n"])


def _conformance_tables(
    compute: Callable[[list[tuple[str, str, str]]], dict[str, Any]],
    outputs: Path,
    output: Path,
    columns: list[str],
) -> None:
    """Read the outputs, compute the tables, write each as CSV, print the systems table."""
    from storyeval.base.errors import StoryevalError
    from storyeval.base.io import claim_output_directory, write_table
    from storyeval.cli._tables import print_table
    from storyeval.corpus import read_stories

    try:
        stories = read_stories(outputs)
        tables = compute([(s.id, s.system or "(none)", s.story) for s in stories])
        claim_output_directory(output, "conformance tables", inputs=[outputs])
        for name, frame in tables.items():
            write_table(output / f"{name}.csv", frame)
    except (StoryevalError, OSError, ValueError) as exc:
        raise user_error(exc) from None
    print_table(tables["systems"].rename(columns={"rate": "estimate"}), columns)
    typer.echo(f"wrote {', '.join(f'{n}.csv' for n in tables)} to {output}")


_DATA_GRAMMAR = typer.Argument(
    ..., help="A data-to-text grammar YAML file, or the built-in name (people)."
)


@rules_app.command("data")
def data(
    grammar: str = _DATA_GRAMMAR,
    output: Path = typer.Option(..., "-o", "--output", help="The directory for the splits."),
    train: int = typer.Option(500, "--train", min=1, help="Training records."),
    validation: int = typer.Option(100, "--validation", min=0, help="Validation records."),
    test: int = typer.Option(100, "--test", min=0, help="Test records."),
    template_overlap: float = typer.Option(
        1.0, "--template-overlap", help="Share of validation/test templates also in training."
    ),
    entity_overlap: float = typer.Option(
        1.0, "--entity-overlap", help="Share of validation/test entity values also in training."
    ),
    holdout: float = typer.Option(
        0.5, "--holdout", help="Share of templates and values kept out of training (overlap < 1)."
    ),
    noise: float = typer.Option(
        0.0, "--noise", help="Share of training records with one error (drop, swap or add)."
    ),
    distribution: str = typer.Option("uniform", "--distribution", help="A distribution."),
    seed: int = typer.Option(0, "--seed", help="Same grammar, settings and seed: same data."),
) -> None:
    """Data-to-text splits from a grammar with an input side: records of facts (the prompt is
    the linearised input) rendered by templates, with controlled template and entity overlap
    between train and validation/test, noise in training, aggregation (separate, conjunction,
    insertion). Writes train/validation/test.jsonl, splits.json (settings, what was held out,
    the overlap measured) and template_ratios.csv (unique-to-total templates per predicate)."""
    import json

    from storyeval.base.errors import StoryevalError
    from storyeval.base.io import claim_output_directory, write_table, write_text_atomic
    from storyeval.corpus import write_records
    from storyeval.rules.data2text import load_data_grammar, make_splits, template_ratios

    try:
        loaded = load_data_grammar(grammar)
        sizes = {"train": train, "validation": validation, "test": test}
        splits, statement = make_splits(
            loaded, {k: v for k, v in sizes.items() if v}, template_overlap=template_overlap,
            entity_overlap=entity_overlap, holdout=holdout, noise=noise,
            distribution=distribution, seed=seed,
        )  # fmt: skip
        claim_output_directory(output, "data-to-text splits", inputs=[grammar])
        for split, records in splits.items():
            write_records(output / f"{split}.jsonl", records)
        write_text_atomic(output / "splits.json", json.dumps(statement, indent=2) + "\n")
        ratios = template_ratios([r for records in splits.values() for r in records])
        write_table(output / "template_ratios.csv", ratios)
    except (StoryevalError, OSError, ValueError) as exc:
        raise user_error(exc) from None
    for split, measured in statement["measured"].items():
        typer.echo(
            f"{split}: {measured['records']} records, {measured['facts']} facts, template "
            f"overlap {measured['template_overlap']:.2f}, entity overlap "
            f"{measured['entity_overlap']:.2f}, noisy {sum(measured['noisy_records'].values())}"
        )
    typer.echo(
        f"wrote {', '.join(f'{s}.jsonl' for s in splits)}, splits.json, template_ratios.csv to {output}"
    )


@rules_app.command("conform")
def conform(
    grammar: str = _DATA_GRAMMAR,
    outputs: Path = typer.Argument(..., help="System outputs: a story file, ids of the records."),
    records: Path = typer.Option(..., "--records", help="The records (e.g. DIR/test.jsonl)."),
    output: Path = typer.Option(..., "-o", "--output", help="The directory for the tables."),
    confidence: float = typer.Option(0.95, "--confidence", help="Interval coverage."),
) -> None:
    """Check every output against its own record: which facts it expresses and with which
    template, and which entity values it mentions that the record does not hold. Writes
    systems.csv (fact recall, complete and faithful records per system and split),
    predicates.csv, templates.csv, records.csv and facts.csv."""
    from storyeval.rules.data2text import data_conformance, load_data_grammar, read_data_records

    def compute(items: list[tuple[str, str, str]]) -> dict[str, Any]:
        loaded = load_data_grammar(grammar)
        known = read_data_records(records, loaded)
        return data_conformance(loaded, items, known, confidence=confidence)

    columns = ["system", "split", "measure", "estimate [ci]", "n"]
    _conformance_tables(compute, outputs, output, columns)


@rules_app.command("import-webnlg")
def import_webnlg_command(
    files: list[Path] = typer.Argument(..., help="Enriched WebNLG XML files."),
    output: Path = typer.Option(..., "-o", "--output", help="The data grammar to write (.yaml)."),
    ratios: Path = typer.Option(
        None, "--ratios", help="Also write the template ratio per predicate (.csv)."
    ),
) -> None:
    """A data grammar from the enriched WebNLG corpus (Castro Ferreira et al. 2018): each
    predicate's templates from its one-triple entries, entity realisations from the
    references, a `corpus` distribution weighting templates by frequency; prints the
    unique-to-total template ratio per predicate (van Miltenburg et al. 2020, Table 1)."""
    from storyeval.base.errors import StoryevalError
    from storyeval.base.io import write_table, write_text_atomic
    from storyeval.rules.data2text import grammar_yaml, import_webnlg

    try:
        grammar, table = import_webnlg(files)
        write_text_atomic(output, grammar_yaml(grammar))
        if ratios is not None:
            write_table(ratios, table)
    except (StoryevalError, OSError, ValueError) as exc:
        raise user_error(exc) from None
    for row in table.itertuples():
        typer.echo(
            f"{row.predicate}: {row.unique} unique of {row.total} templates ({row.ratio:.2f})"
        )
    typer.echo(f"wrote {output} ({len(grammar.predicates)} predicates)")


@rules_app.command("grammars")
def grammars() -> None:
    """List the built-in grammars."""
    from storyeval.rules import GRAMMARS

    for name in GRAMMARS:
        typer.echo(f"{name}: {GRAMMARS.get(name)}")
    from storyeval.rules.data2text import PEOPLE

    typer.echo(f"people (data-to-text: storyeval rules data): {PEOPLE}")


def register(app: typer.Typer) -> None:
    """Add the ``rules`` commands to the application."""
    app.add_typer(rules_app, name="rules", rich_help_panel="Meta-evaluation")
