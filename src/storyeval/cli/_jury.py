"""``storyeval jury``: several judges (or one judge's checklist items) weighted by a fit to
people's ratings; also the writer behind ``storyeval judge --fit-weights``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from storyeval.cli._common import aggregate_option, check_choice, criteria_map, user_errors

JURY_PEOPLE = typer.Option(
    ..., "--people", help="People's judgments of (some of) the judged stories."
)
JURY_CHECKLIST = typer.Option(
    False,
    "--checklist",
    help="Fit one judge's checklist items (each criterion a feature) to one people's rating "
    "instead of weighing judges.",
)
JURY_TARGET = typer.Option(
    None,
    "--target",
    help="--checklist: the people's criterion to predict (default: their only one, overall, "
    "else the mean of their criteria's z-scores).",
)
JURY_CRITERIA = typer.Option(
    None,
    "--criteria",
    help="JUDGE=PEOPLE: fit the judges' criterion to the people's of another name (repeat).",
)
JURY_STORIES = typer.Option(
    None, "--stories", help="The story file: folds by prompt (default: the judges' prompt_id)."
)


def jury(
    judgments: list[Path] = typer.Argument(
        ..., help="Judgment files of storyeval judge (several judges, or one with --checklist)."
    ),
    people: Path = JURY_PEOPLE,
    output: Path = typer.Option(
        ..., "-o", "--output", help="The fitted judgments (JSONL); tables are written beside."
    ),
    checklist: bool = JURY_CHECKLIST,
    target: str = JURY_TARGET,
    criteria: list[str] = JURY_CRITERIA,
    stories: Path = JURY_STORIES,
    aggregate: str = aggregate_option(),
    ridge: float = typer.Option(1.0, "--ridge", min=0.0, help="Ridge penalty (standardised)."),
    bootstrap: int = typer.Option(500, "--bootstrap", min=0, help="Bootstrap replicates."),
    seed: int = typer.Option(0, "--seed", help="Seed of the folds and the bootstrap."),
) -> None:
    """Weigh judges by people: a jury of several judges with non-negative per-judge weights
    fitted to people's ratings (Verga et al. 2024), or with --checklist one judge's yes/no
    items weighted by a fit (Lee et al. 2024). Each story's fitted score is out-of-fold for
    stories people rated (folds by prompt), so judge-eval on the output is honest. Writes the
    fitted judgments, OUTPUT.weights.csv, OUTPUT.evaluation.csv (fitted sum, equal weights and
    each judge or item alone against people) and, for a jury, OUTPUT.disagreement.csv."""
    from storyeval.corpus import read_judgments, read_stories
    from storyeval.judge.jury import fit_checklist, fit_jury
    from storyeval.meta.data import AGGREGATIONS, prompt_id

    check_choice(aggregate, AGGREGATIONS, "--aggregate")
    with user_errors():
        judged = [j for path in judgments for j in read_judgments(path)]
        rated = read_judgments(people)
        groups = {s.id: str(prompt_id(s)) for s in read_stories(stories)} if stories else None
        common: dict[str, Any] = dict(
            aggregate=aggregate, groups=groups, ridge=ridge, n_boot=bootstrap, seed=seed
        )
        if checklist:
            fitted = fit_checklist(judged, rated, target=target, **common)
        else:
            fitted = fit_jury(judged, rated, criteria=criteria_map(criteria or []), **common)
        write_fitted(fitted, output)


def write_fitted(fitted: Any, output: Path) -> None:
    """Write a fitted checklist or jury beside ``output`` and print its summary."""
    from storyeval.cli._tables import write_table
    from storyeval.corpus import write_judgments

    write_judgments(output, fitted.judgments)
    stem = output.with_suffix("")
    files = [output]
    for name, table in (
        ("weights", fitted.weights()),
        ("evaluation", fitted.evaluation()),
        ("disagreement", fitted.disagreement),
        ("agreement", fitted.agreement),
    ):
        if not table.empty:
            path = Path(f"{stem}.{name}.csv")
            write_table(table, path)
            files.append(path)
    _print(fitted)
    typer.echo(f"wrote {', '.join(str(f) for f in files)}")


def _print(fitted: Any) -> None:
    number = lambda v: f"{v:.3f}"  # noqa: E731
    typer.echo("weights (per unit of each judge's score or item; 95% bootstrap intervals):")
    typer.echo(fitted.weights().to_string(index=False, float_format=number))
    evaluation = fitted.evaluation()
    kendall = evaluation[evaluation["statistic"] == "kendall"]
    typer.echo("against people (Kendall's tau-b; out-of-fold for the fitted sum):")
    typer.echo(kendall.drop(columns="statistic").to_string(index=False, float_format=number))
    if not fitted.agreement.empty:
        shown = fitted.agreement[["criterion", "method", "estimate", "ci_low", "ci_high"]]
        typer.echo("agreement among the judges:")
        typer.echo(shown.to_string(index=False, float_format=number))
    for fit in fitted.fits.values():
        typer.echo(f"signature: {fit.signature.render()}")
