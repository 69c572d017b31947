"""``storyeval report``: the meta-evaluation report (HTML + Markdown + figures + CSVs)."""

from __future__ import annotations

from pathlib import Path

import typer

from storyeval.cli._common import (
    aggregate_option,
    check_choice,
    check_choices,
    criterion_option,
    judgments_option,
    metric_option,
    output_option,
    scores_option,
    stories_option,
    user_errors,
)

REPORT_COMMAND_METHOD = typer.Option(
    None, "--method", "-m", help="pearson, spearman, kendall (repeat; default: all three)."
)
REPORT_COMMAND_LEVEL = typer.Option(
    None,
    "--level",
    "-l",
    help="pooled, story, system, within_system (repeat; default: the first three the data allow).",
)
REPORT_COMMAND_MATRIX_METHOD = typer.Option(
    "pearson", "--matrix-method", help="Method of the criteria x metrics matrix."
)
REPORT_COMMAND_ROBUSTNESS = typer.Option(
    None, "--robustness", help="A `storyeval robustness` output directory to add as a section."
)
REPORT_COMMAND_MAUVE = typer.Option(
    None, "--mauve", help="A `storyeval mauve` output directory to add as a section."
)
REPORT_COMMAND_CURVES = typer.Option(
    None, "--curves", help="A `storyeval curves` output directory to add as a section."
)
REPORT_COMMAND_AUDIT = typer.Option(
    None, "--judge-audit", help="A `storyeval judge-audit` output directory to add as a section."
)


REPORT_COMMAND_VIEW = typer.Option(
    None,
    "--view-export",
    help="A `storyeval view --export` site of the same files: link each system and each "
    "metric x criterion cell to its stories there.",
)


def report_command(
    scores: list[Path] = scores_option(),
    judgments: list[Path] = judgments_option(),
    output: Path = output_option("Output directory."),
    stories: Path = stories_option(),
    method: list[str] = REPORT_COMMAND_METHOD,
    level: list[str] = REPORT_COMMAND_LEVEL,
    matrix_method: str = REPORT_COMMAND_MATRIX_METHOD,
    aggregate: str = aggregate_option(),
    metric: list[str] = metric_option(),
    criterion: list[str] = criterion_option(),
    n_boot: int = typer.Option(1000, "--n-boot", help="Bootstrap replicates."),
    seed: int = typer.Option(0, "--seed"),
    title: str = typer.Option("storyeval meta-evaluation report", "--title"),
    robustness: Path = REPORT_COMMAND_ROBUSTNESS,
    mauve: Path = REPORT_COMMAND_MAUVE,
    curves: Path = REPORT_COMMAND_CURVES,
    judge_audit: Path = REPORT_COMMAND_AUDIT,
    view_export: Path = REPORT_COMMAND_VIEW,
) -> None:
    """Write OUT/index.html and OUT/report.md with heatmaps, scatter plots, agreement, the human
    ceiling, Williams tests, signatures, and the CSVs behind them."""
    import warnings

    from storyeval.corpus import read_stories
    from storyeval.meta import ALL_LEVELS, METHODS, build_meta_table
    from storyeval.meta.data import AGGREGATIONS, read_judgment_files, read_score_files
    from storyeval.report import build_report

    methods = check_choices(method or METHODS, METHODS, "--method")
    levels = check_choices(level, ALL_LEVELS, "--level") if level else None
    check_choice(matrix_method, METHODS, "--matrix-method")
    check_choice(aggregate, AGGREGATIONS, "--aggregate")
    if output.exists() and not output.is_dir():
        raise typer.BadParameter(f"{output} exists and is not a directory", param_hint="-o")
    with user_errors():
        records = read_judgment_files(judgments)  # read once: the table and the agreement
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            table = build_meta_table(
                read_score_files(scores),
                records,
                stories=read_stories(stories) if stories is not None else None,
                aggregation=aggregate,
                metrics=metric or None,
                criteria=criterion or None,
            )
        result = build_report(
            table,
            records,
            output,
            methods=methods,
            levels=levels,
            matrix_method=matrix_method,
            n_boot=n_boot,
            seed=seed,
            title=title,
            robustness=robustness,
            mauve=mauve,
            curves=curves,
            judge_audit=judge_audit,
            view_export=view_export,
            inputs={
                "scores": scores,
                "judgments": judgments,
                "stories": [stories] if stories else [],
            },
            progress=lambda step: typer.echo(f"report: {step}...", err=True),
        )
    typer.echo(f"wrote {result.directory / 'index.html'} and {result.directory / 'report.md'}")
    csvs = sorted(name for name in result.files if name.endswith(".csv"))
    figures = sorted(name for name in result.files if name.startswith("figures/"))
    typer.echo(f"tables: {', '.join(csvs)}")
    typer.echo(f"figures: {len(figures)} in {result.directory / 'figures'}")
    if result.notes:
        from storyeval.report import group_warnings

        kinds = group_warnings(result.notes)
        typer.echo(
            f"{len(result.notes)} warning(s) of {len(kinds)} kind(s), listed at the end of the "
            "report:",
            err=True,
        )
        for line in kinds:
            typer.echo(f"  {line}", err=True)


def register(app: typer.Typer) -> None:
    """Add the ``report`` command to the application."""
    app.command("report", rich_help_panel="Meta-evaluation")(report_command)
