"""``storyeval classify-eval``: classifier-based evaluation of style transfer (De Mattei et al. 2020)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from storyeval.cli._common import user_error

classify_app = typer.Typer(
    help="Classifier-based evaluation of style transfer (De Mattei et al. 2021): a "
    "style classifier, content checks (HH, AH) and the compliancy score.",
    no_args_is_help=True,
)

_CORPUS_HELP = (
    "The two-style corpus (.jsonl or .csv): `story` is the text, the style is in `system` (or "
    "--style-field), the source document in `prompt`, aligned texts share a `pair` value."
)


def _styles(text: str | None) -> list[str] | None:
    return [s.strip() for s in text.split(",")] if text else None


TRAIN_PAIR_FIELD = typer.Option(
    "pair", "--pair-field", help="Texts of the two styles with the same value are aligned."
)
TRAIN_STYLES = typer.Option(None, "--styles", help="The two styles A,B (if the corpus has more).")
TRAIN_CHECKS = typer.Option(
    "hh,ah", "--checks", help="Content checks to train: hh, ah, both or none."
)
TRAIN_MODEL = typer.Option(
    None,
    "--model",
    help="Base encoder: a hub name or a local directory (default: the offline one).",
)
TRAIN_MAX_STEPS = typer.Option(
    None, "--max-steps", min=1, help="Stop each classifier after N steps."
)
TRAIN_TEST_FRACTION = typer.Option(
    0.2,
    "--test-fraction",
    help="Share of the aligned groups held out to measure the classifiers.",
)
TRAIN_DEV_FRACTION = typer.Option(0.1, "--dev-fraction", help="Share held out for early stopping.")
TRAIN_SEED = typer.Option(42, "--seed", help="Seed of the split, the negative pairs and training.")
TRAIN_OVERWRITE = typer.Option(False, "--overwrite", help="Replace classifiers trained otherwise.")


TRAIN_PRESET = typer.Option(
    None,
    "--preset",
    help="demattei2021: the paper's settings per classifier (main: 32 tokens, batch 256, 6 "
    "epochs; HH: 64 tokens, batch 128, 2 epochs, on A1; AH: batch 8, 6 epochs, on R+A3+A1; lr "
    "1e-5) and SA as the test set (the corpus from `classify-eval align`).",
)
TRAIN_SET = typer.Option(
    None,
    "--set",
    help="A classifier's own setting, CLASSIFIER.KEY=VALUE (main, hh, ah; max_length, "
    "batch_size, epochs, learning_rate); repeat.",
)
TRAIN_ON = typer.Option(
    None, "--train-on", help="A classifier's data splits, CLASSIFIER=S1,S2 (e.g. hh=A1); repeat."
)
TRAIN_SPLIT_FIELD = typer.Option(
    None, "--split-field", help="The field holding each text's data split (`align` writes split)."
)
TRAIN_TEST_SPLIT = typer.Option("SA", "--test-split", help="The split held out as the test set.")


def _plan(preset: str | None, assignments: list[str], train_on: list[str]) -> Any:
    """The classifier plan of a preset, changed by --set and --train-on."""
    from storyeval.analyses.classifier_eval import ClassifierPlan

    plan = ClassifierPlan.preset(preset) if preset else ClassifierPlan()
    settings = {k: dict(v) for k, v in plan.settings.items()}
    splits = {k: list(v) for k, v in plan.train_on.items()}
    for item in assignments:
        key, _, value = item.partition("=")
        name, _, setting = key.partition(".")
        if not value or not setting:
            raise ValueError(f"--set takes CLASSIFIER.KEY=VALUE; got {item!r}")
        number = float(value)
        settings.setdefault(name, {})[setting] = (
            int(number) if number.is_integer() and setting != "learning_rate" else number
        )
    for item in train_on:
        name, _, value = item.partition("=")
        if not value:
            raise ValueError(f"--train-on takes CLASSIFIER=S1,S2; got {item!r}")
        splits[name] = [v.strip() for v in value.split(",") if v.strip()]
    return ClassifierPlan(settings, splits)


@classify_app.command("train")
def train(
    corpus: Path = typer.Argument(..., help=_CORPUS_HELP),
    output: Path = typer.Option(..., "-o", "--output", help="The directory for the classifiers."),
    style_field: str = typer.Option("system", "--style-field", help="The field holding the style."),
    pair_field: str = TRAIN_PAIR_FIELD,
    styles: str = TRAIN_STYLES,
    checks: str = TRAIN_CHECKS,
    model: str = TRAIN_MODEL,
    max_length: int = typer.Option(128, "--max-length", min=16, help="Longest text in tokens."),
    epochs: int = typer.Option(3, "--epochs", min=1, help="Passes over the data (at most)."),
    batch_size: int = typer.Option(16, "--batch-size", min=1, help="Examples per step."),
    learning_rate: float = typer.Option(2e-5, "--lr", help="Peak learning rate."),
    max_steps: int = TRAIN_MAX_STEPS,
    test_fraction: float = TRAIN_TEST_FRACTION,
    dev_fraction: float = TRAIN_DEV_FRACTION,
    seed: int = TRAIN_SEED,
    threads: int = typer.Option(None, "--threads", min=1, help="CPU threads for torch."),
    overwrite: bool = TRAIN_OVERWRITE,
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bars."),
    preset: str = TRAIN_PRESET,
    assignments: list[str] = TRAIN_SET,
    train_on: list[str] = TRAIN_ON,
    split_field: str = TRAIN_SPLIT_FIELD,
    test_split: str = TRAIN_TEST_SPLIT,
) -> None:
    """Train the main style classifier and the content checks on a two-style corpus, and print
    their precision, recall and F1 on held-out gold texts (the paper's Table 1) and the
    compliancy of the held-out aligned texts (the upper bound)."""
    import pandas as pd

    from storyeval.analyses.classifier_eval import train_classifiers
    from storyeval.base.errors import StoryevalError
    from storyeval.cli._tables import print_table
    from storyeval.corpus import read_stories
    from storyeval.learn.trainer import TrainingConfig

    if threads is not None:
        import torch

        torch.set_num_threads(threads)
    chosen = (
        []
        if checks.strip().lower() == "none"
        else [c.strip() for c in checks.split(",") if c.strip()]
    )
    try:
        training = TrainingConfig(
            epochs=epochs,
            batch_size=batch_size,
            learning_rate=learning_rate,
            max_steps=max_steps,
            seed=seed,
        )
        summary = train_classifiers(
            read_stories(corpus),
            output,
            style_field=style_field,
            pair_field=pair_field,
            styles=_styles(styles),
            checks=chosen,
            encoder=model,
            max_length=max_length,
            training=training,
            test_fraction=test_fraction,
            dev_fraction=dev_fraction,
            overwrite=overwrite,
            progress=not quiet,
            plan=_plan(preset, assignments or [], train_on or []),
            split_field=split_field or ("split" if preset else None),
            test_split=test_split,
        )
    except (StoryevalError, OSError, ValueError) as exc:
        raise user_error(exc) from None
    typer.echo("The classifiers on held-out gold data:")
    typer.echo(pd.DataFrame(summary["gold"]).round(3).to_string(index=False))
    typer.echo("Upper bound (the aligned human texts as transfers):")
    print_table(
        pd.DataFrame(summary["upper_bound"]), ["direction", "measure", "estimate [ci]", "n"]
    )
    for check, reason in summary["skipped"].items():
        typer.echo(f"skipped {check}: {reason}")
    typer.echo(f"wrote the classifiers to {output}")


@classify_app.command("evaluate")
def evaluate(
    outputs: Path = typer.Argument(
        ...,
        help="Transfer outputs (story file): `system`, and `source` naming the source text's id.",
    ),
    classifiers: Path = typer.Option(
        ..., "--classifiers", "-c", help="A `classify-eval train` directory."
    ),
    corpus: Path = typer.Option(
        ..., "--corpus", help="The corpus holding the source texts. " + _CORPUS_HELP
    ),
    output: Path = typer.Option(
        ..., "-o", "--output", help="The directory for the tables and report."
    ),
    source_field: str = typer.Option(
        "source", "--source-field", help="The field naming the source text."
    ),
    threshold: float = typer.Option(0.5, "--threshold", help="P(match) needed to pass HH and AH."),
    confidence: float = typer.Option(0.95, "--confidence", help="Interval coverage."),
    no_overlap: bool = typer.Option(
        False, "--no-overlap", help="Skip BLEU, ROUGE-L and BERTScore."
    ),
    no_gold: bool = typer.Option(False, "--no-gold", help="Leave out the gold upper bound."),
) -> None:
    """Check every output (style reversed, content kept, fits the document), and write per system
    and direction the shares and the compliancy score with intervals, beside BLEU, ROUGE-L and
    BERTScore against the source: summary.csv (the paper's Table 2), compliancy.csv, items.csv,
    classifiers.csv (Table 1) and classify-eval.md."""
    from storyeval.analyses.classifier_eval import (
        Classifiers,
        evaluate_transfers,
        write_classify_eval,
    )
    from storyeval.base.errors import StoryevalError
    from storyeval.cli._tables import reported_warnings
    from storyeval.corpus import read_stories

    try:
        with reported_warnings():
            result = evaluate_transfers(
                Classifiers.load(classifiers),
                read_stories(corpus),
                read_stories(outputs),
                source_field=source_field,
                threshold=threshold,
                confidence=confidence,
                overlap=not no_overlap,
                gold=not no_gold,
            )
        written = write_classify_eval(result, output)
    except (StoryevalError, OSError, ValueError) as exc:
        raise user_error(exc) from None
    typer.echo(result.summary.round(3).to_string(index=False))
    for kind, path in written.items():
        typer.echo(f"wrote {kind}: {path}")
    typer.echo(f"signature: {result.signature.render()}")


@classify_app.command("align")
def align(
    corpus: Path = typer.Argument(..., help=_CORPUS_HELP),
    output: Path = typer.Option(..., "-o", "--output", help="The aligned corpus to write."),
    style_field: str = typer.Option("system", "--style-field", help="The field holding the style."),
    date_field: str = typer.Option(
        None, "--date-field", help="Only align texts whose dates (YYYY-MM-DD) are close."
    ),
    max_days: int = typer.Option(2, "--max-days", min=0, help="Days apart at most (--date-field)."),
    strong: float = typer.Option(0.5, "--strong", help="Cosine above which a pair is strong."),
    weak: float = typer.Option(0.185, "--weak", help="Cosine above which a pair is weak."),
    held_out: float = typer.Option(
        0.1, "--held-out", help="Share of strong pairs set aside as SA."
    ),
    seed: int = typer.Option(0, "--seed", help="Seed of the SA draw."),
) -> None:
    """Align the two styles' texts by the tf-idf cosine of their documents (De Mattei et al.
    2021: strong pairs above 0.5, weak above 0.185) and assign the data splits SA, A1-A3 and R
    (fields alignment, similarity, pair, split)."""
    from storyeval.analyses.style_alignment import align_corpus, alignment_counts
    from storyeval.base.errors import StoryevalError
    from storyeval.corpus import read_stories, write_stories

    try:
        aligned = align_corpus(
            read_stories(corpus), style_field=style_field, date_field=date_field,
            max_days=max_days, strong=strong, weak=weak, held_out=held_out, seed=seed,
        )  # fmt: skip
        write_stories(output, aligned)
    except (StoryevalError, OSError, ValueError) as exc:
        raise user_error(exc) from None
    counts = alignment_counts(aligned)
    typer.echo(", ".join(f"{name}: {n}" for name, n in counts.items()))
    typer.echo(f"wrote {len(aligned)} texts to {output}")


def register(app: typer.Typer) -> None:
    """Add the ``classify-eval`` commands to the application."""
    app.add_typer(classify_app, name="classify-eval", rich_help_panel="Meta-evaluation")
