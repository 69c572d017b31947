"""``storyeval ppi``: per-system means from a judge on every item and people on a subset."""

from __future__ import annotations

from pathlib import Path

import typer

from storyeval.cli._common import user_errors
from storyeval.cli._tables import check_table_path, print_table, write_table


def ppi_command(
    humans: Path = typer.Option(
        ..., "--humans", help="People's judgments (long format), on a random subset of the items."
    ),
    judge: Path = typer.Option(
        ..., "--judge", help="The judge's judgments (long format) on every item."
    ),
    output: Path = typer.Option(..., "-o", "--output", help="Output table (.csv or .jsonl)."),
    by: str = typer.Option(
        "system", "--by", help="The judgments' field to estimate a mean per (system, condition)."
    ),
    criterion: list[str] = typer.Option(None, "--criterion", help="Only these criteria (repeat)."),
    per_criterion: bool = typer.Option(
        False, "--per-criterion", help="A mean per criterion and group (default: criteria pooled)."
    ),
    rater: str = typer.Option(
        None, "--rater", help="The judge's rater_id, when the judge file holds several."
    ),
    lam: float = typer.Option(
        None,
        "--lam",
        help="The judge's weight: 1 is the original PPI, 0 people alone (default: PPI++ power tuning).",
    ),
    confidence: float = typer.Option(0.95, "--confidence", help="Interval coverage."),
    interval: str = typer.Option(
        "t",
        "--interval",
        help="t: Student's t, unbiased variances (keeps its coverage with a few dozen people-"
        "judged items); normal: the papers' and ppi-python's plug-in normal interval.",
    ),
) -> None:
    """Prediction-powered means (Angelopoulos et al. 2023; PPI++, Angelopoulos, Duchi and
    Zrnic 2024): the judge's mean over every item, corrected by its error on the items people
    judged, beside people's mean alone. An item is one (item_id, criterion); people's value is
    the mean of its raters. The people-judged items must be a random subset of all items."""
    from storyeval.corpus import read_judgments
    from storyeval.meta.ppi import ppi_means_by, ppi_table

    check_table_path(output)
    with user_errors():
        frame, dropped = ppi_table(
            read_judgments(humans),
            read_judgments(judge),
            by=by,
            criteria=criterion or None,
            rater=rater,
        )
        groups = ["criterion", by] if per_criterion else [by]
        frame["cell"] = frame[groups].astype(str).agg(" / ".join, axis=1)
        result = ppi_means_by(
            frame, group="cell", confidence=confidence, lam=lam, interval=interval
        )
    write_table(result, output)
    print_table(
        result.rename(columns={"group": by}),
        [
            by,
            "estimate [ci]",
            "classical_estimate",
            "lam",
            "n_labeled",
            "n_unlabeled",
            "width_ratio",
        ],
    )
    if frame["human"].notna().all():
        typer.echo("people judged every item: nothing is left for the judge (people's means shown)")
    if dropped:
        typer.echo(f"{dropped} people-judged items have no judge answer: left out")
    typer.echo(f"wrote {len(result)} rows to {output}")
    typer.echo(f"signature: {result['signature'].iloc[0]}" if len(result) else "no row")


def register(app: typer.Typer) -> None:
    """Add the ``ppi`` command to the application."""
    app.command("ppi", rich_help_panel="Meta-evaluation")(ppi_command)
