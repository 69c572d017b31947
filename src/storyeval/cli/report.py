"""``storyeval report``: the meta-evaluation report (HTML + Markdown + figures + CSVs)."""

from __future__ import annotations

from pathlib import Path

import typer

from storyeval.cli._common import user_error


def report_command(
    scores: list[Path] = typer.Option(..., "--scores", "-s", help="Score file(s) (repeat)."),
    judgments: list[Path] = typer.Option(
        ..., "--judgments", "-j", help="Judgment file(s) (repeat)."
    ),
    output: Path = typer.Option(..., "-o", "--output", help="Output directory."),
    stories: Path = typer.Option(
        None, "--stories", help="Story file: system and prompt_id per item."
    ),
    method: list[str] = typer.Option(
        None, "--method", "-m", help="pearson, spearman, kendall (repeat; default: all three)."
    ),
    level: list[str] = typer.Option(
        None, "--level", "-l", help="pooled, story, system (repeat; default: all the data allow)."
    ),
    matrix_method: str = typer.Option(
        "pearson", "--matrix-method", help="Method of the criteria x metrics matrix."
    ),
    aggregate: str = typer.Option(
        "mean", "--aggregate", help="Rater aggregation: mean, median, majority."
    ),
    metric: list[str] = typer.Option(None, "--metric", help="Only these metrics (repeat)."),
    criterion: list[str] = typer.Option(None, "--criterion", help="Only these criteria (repeat)."),
    n_boot: int = typer.Option(1000, "--n-boot", help="Bootstrap replicates."),
    seed: int = typer.Option(0, "--seed"),
    title: str = typer.Option("storyeval meta-evaluation report", "--title"),
) -> None:
    """Write OUT/index.html and OUT/report.md with heatmaps, scatter plots, agreement, the human
    ceiling, Williams tests, signatures, and the CSVs behind them."""
    from storyeval.corpus import read_judgments
    from storyeval.meta import LEVELS, METHODS, load_meta_table
    from storyeval.meta.data import AGGREGATIONS
    from storyeval.report import build_report

    for value, choices, hint in (
        *((m, METHODS, "--method") for m in method or []),
        *((v, LEVELS, "--level") for v in level or []),
        (matrix_method, METHODS, "--matrix-method"),
        (aggregate, AGGREGATIONS, "--aggregate"),
    ):
        if value not in choices:
            raise typer.BadParameter(
                f"must be one of {', '.join(choices)}; got {value!r}", param_hint=hint
            )
    if output.exists() and not output.is_dir():
        raise typer.BadParameter(f"{output} exists and is not a directory", param_hint="-o")
    try:
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            table = load_meta_table(
                scores,
                judgments,
                stories=stories,
                aggregation=aggregate,
                metrics=metric or None,
                criteria=criterion or None,
            )
        records = []
        for path in judgments:
            records.extend(read_judgments(path))
        result = build_report(
            table,
            records,
            output,
            methods=list(dict.fromkeys(method)) if method else ["pearson", "spearman", "kendall"],
            levels=list(dict.fromkeys(level)) if level else None,
            matrix_method=matrix_method,
            n_boot=n_boot,
            seed=seed,
            title=title,
            inputs={
                "scores": scores,
                "judgments": judgments,
                "stories": [stories] if stories else [],
            },
        )
    except (ValueError, OSError) as exc:
        raise user_error(exc) from None
    typer.echo(f"wrote {result.directory / 'index.html'} and {result.directory / 'report.md'}")
    csvs = sorted(name for name in result.files if name.endswith(".csv"))
    figures = sorted(name for name in result.files if name.startswith("figures/"))
    typer.echo(f"tables: {', '.join(csvs)}")
    typer.echo(f"figures: {len(figures)} in {result.directory / 'figures'}")
    if result.notes:
        typer.echo(f"{len(result.notes)} warning(s), listed at the end of the report", err=True)


def register(app: typer.Typer) -> None:
    app.command("report", rich_help_panel="Meta-evaluation")(report_command)
