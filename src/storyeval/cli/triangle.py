"""``storyeval triangle``: plan and analyse NLG triangle tests (González Corbelle et al. 2020, first paper)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import typer

from storyeval.cli._common import check_choice, exit_with

triangle_app = typer.Typer(
    help="Plan and analyse triangle tests (which of three texts was written by someone else?).",
    no_args_is_help=True,
)


def _check_tests(test: str) -> None:
    check_choice(test, ("difference", "similarity"), "--test")


@triangle_app.command("plan")
def plan(
    alpha: float = typer.Option(
        ..., "--alpha", help="Risk of concluding there is a difference when there is none."
    ),
    beta: float = typer.Option(..., "--beta", help="Risk of missing a difference of size --pd."),
    pd: float = typer.Option(
        ..., "--pd", help="Proportion of discriminators to detect (0.5 = 50%)."
    ),
    test: str = typer.Option("difference", "--test", help="difference or similarity."),
    as_json: bool = typer.Option(False, "--json", help="Print the whole plan as JSON."),
) -> None:
    """Print the number of judges needed (Table 1 of González Corbelle et al. (2020), exact binomial).

    Standard output is the number alone (or JSON with --json); the decision rule and the
    recommended minimum go to standard error.
    """
    from storyeval.human.triangle_stats import plan as make_plan

    _check_tests(test)
    try:
        result = make_plan(alpha, beta, pd, test=test)  # type: ignore[arg-type]
    except ValueError as exc:
        raise exit_with(f"error: {exc}") from None
    if as_json:
        typer.echo(json.dumps(result.to_dict(), indent=2))
        return
    typer.echo(result.judges)
    rule = (
        f"significant difference with >= {result.min_correct} correct answers"
        if test == "difference"
        else f"similar with <= {result.max_correct} correct answers"
        if result.max_correct is not None
        else "no count of correct answers can show similarity at this size"
    )
    typer.echo(
        f"{result.judges} judges for alpha={alpha:g}, beta={beta:g}, pd={pd:g} ({test} test): {rule}; "
        f"power {result.power:.3f}. The standard recommends at least {result.minimum_recommended} judges. "
        f"Balanced orders: {', '.join(f'{k} x{v}' for k, v in result.order_counts.items())}.\n{result.signature}",
        err=True,
    )


@triangle_app.command("analyse")
def analyse(
    judges: int = typer.Option(..., "--judges", help="Number of evaluations (triads judged)."),
    correct: int = typer.Option(
        ..., "--correct", help="Number of correct answers (odd text identified)."
    ),
    alpha: float = typer.Option(
        0.05, "--alpha", help="Significance level of the test of difference."
    ),
    beta: float = typer.Option(None, "--beta", help="Risk for the test of similarity (with --pd)."),
    pd: float = typer.Option(
        None, "--pd", help="Largest proportion of discriminators still called similar."
    ),
) -> None:
    """Print the analysis as JSON: min_correct, significant, p_value, pd_lower, pd_upper, and
    for a test of similarity (with --beta and --pd) max_correct and similar."""
    from storyeval.human.triangle_stats import analyse as run

    if (beta is None) != (pd is None):
        raise exit_with("error: a test of similarity needs both --beta and --pd")
    try:
        result = run(judges, correct, alpha=alpha, beta=beta, pd=pd)
    except ValueError as exc:
        raise exit_with(f"error: {exc}") from None
    typer.echo(json.dumps(result.to_dict(), indent=2))


@triangle_app.command("analyze", hidden=True)
def analyze(
    judges: int = typer.Option(..., "--judges"),
    correct: int = typer.Option(..., "--correct"),
    alpha: float = typer.Option(0.05, "--alpha"),
    beta: float = typer.Option(None, "--beta"),
    pd: float = typer.Option(None, "--pd"),
) -> None:
    """Alias of ``analyse``."""
    analyse(judges=judges, correct=correct, alpha=alpha, beta=beta, pd=pd)


@triangle_app.command("table")
def table(
    which: str = typer.Argument(
        ..., help="judges (Table 1), min-correct (Table 2) or max-correct (Table 3)."
    ),
    output: Path = typer.Option(None, "-o", "--output", help="Also write the table as CSV."),
) -> None:
    """Recompute one of the tables of González Corbelle et al. (2020) from the exact binomial distribution."""
    from storyeval.base.io import atomic_write
    from storyeval.human import triangle_stats as tri

    builders: dict[str, Callable[[], Any]] = {
        "judges": tri.judges_table,
        "min-correct": tri.min_correct_table,
        "max-correct": tri.max_correct_table,
    }
    check_choice(which, tuple(builders), "TABLE")
    frame = builders[which]()
    if which == "judges":
        wide = frame.pivot_table(
            index=["pd", "alpha"], columns="beta", values="judges", aggfunc="first"
        ).sort_index(ascending=[False, False])
        wide = wide[sorted(wide.columns, reverse=True)]
    elif which == "min-correct":
        wide = frame.pivot(index="judges", columns="alpha", values="min_correct")
        wide = wide[sorted(wide.columns, reverse=True)]
    else:
        wide = frame.pivot_table(
            index=["judges", "beta"], columns="pd", values="max_correct", aggfunc="first"
        )
    wide = wide.astype("object").where(wide.notna(), "-")
    typer.echo(wide.to_string())
    if output is not None:
        with atomic_write(output, newline="") as fh:
            frame.to_csv(fh, index=False)


@triangle_app.command("orders")
def orders(
    judges: int = typer.Option(..., "--judges", help="Number of judges (evaluations)."),
    seed: int = typer.Option(
        0, "--seed", help="Seed of the random permutation within each group of six."
    ),
) -> None:
    """Print the order of the triad for each judge, balanced in groups of six, and the counts."""
    from collections import Counter

    from storyeval.human.triangle_stats import TRIANGLE_ORDERS, balanced_orders

    try:
        sequence = balanced_orders(judges, seed=seed)
    except ValueError as exc:
        raise exit_with(f"error: {exc}") from None
    counts = Counter(sequence)
    typer.echo(" ".join(f"{order}:{counts.get(order, 0)}" for order in TRIANGLE_ORDERS))
    for i, order in enumerate(sequence, start=1):
        typer.echo(f"{i}\t{order}")


def register(app: typer.Typer) -> None:
    """Add the ``triangle`` commands to the application."""
    app.add_typer(triangle_app, name="triangle", rich_help_panel="Human studies")
