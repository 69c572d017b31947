"""``storyeval pairwise-accuracy``: how often each metric prefers the text people preferred."""

from __future__ import annotations

from pathlib import Path

import typer

from storyeval.cli._common import user_errors
from storyeval.cli._tables import check_table_path, print_table, write_table


def pairwise_accuracy_command(
    scores: list[Path] = typer.Option(
        ..., "--scores", "-s", help="A score file (repeat for several)."
    ),
    comparisons: Path = typer.Option(
        ...,
        "--comparisons",
        "-c",
        help="People's preferences: comparisons.jsonl (e.g. of storyeval import wq or pairwise), "
        "each side a story id.",
    ),
    output: Path = typer.Option(..., "-o", "--output", help="Output table (.csv or .jsonl)."),
    cluster: str = typer.Option(
        "group",
        "--cluster",
        help="The comparisons' field whose pairs are resampled together (e.g. group: the "
        "author; prompt_id); 'none': every pair alone.",
    ),
    lower_is_better: list[str] = typer.Option(
        None, "--lower-is-better", help="A metric whose lower values are better (repeat)."
    ),
    metric: list[str] = typer.Option(None, "--metric", help="Only these metrics (repeat)."),
    n_boot: int = typer.Option(1000, "--n-boot", help="Bootstrap replicates (0: no interval)."),
    confidence: float = typer.Option(0.95, "--confidence", help="Interval coverage."),
    seed: int = typer.Option(0, "--seed", help="Bootstrap seed."),
    versus: str = typer.Option(
        None,
        "--versus",
        help="Test this metric against every other on the pairs both score (paired "
        "permutation test over clusters, one-sided, BH-adjusted); the table goes to --tests.",
    ),
    tests: Path = typer.Option(None, "--tests", help="Where --versus writes its tests."),
) -> None:
    """The share of people's pairs each metric orders as people did (a metric's tie counts
    half; people's ties are left out), with a bootstrap interval that resamples clusters of
    pairs (an author's paragraphs, a prompt's stories). The registry's direction of each
    metric is used (--lower-is-better for others)."""
    import pandas as pd

    from storyeval.corpus import read_scores
    from storyeval.meta.comparisons import read_comparisons
    from storyeval.meta.pairwise import accuracy_tests, pairwise_accuracy

    check_table_path(output)
    if (versus is None) != (tests is None):
        raise typer.BadParameter("--versus and --tests go together", param_hint="--versus")
    if tests is not None:
        check_table_path(tests)
    with user_errors():
        frame = pd.DataFrame(
            [{"item_id": s.item_id, "metric": s.metric, "value": s.value}
             for path in scores for s in read_scores(path)]
        )  # fmt: skip
        if metric:
            frame = frame[frame["metric"].isin(metric)]
        if frame.empty:
            raise ValueError("no score of the metrics asked for")
        result = pairwise_accuracy(
            frame,
            read_comparisons(comparisons),
            lower_is_better=lower_is_better or (),
            cluster=None if cluster == "none" else cluster,
            n_boot=n_boot,
            confidence=confidence,
            seed=seed,
        )
        compared = None
        if versus is not None:
            compared = accuracy_tests(
                frame, read_comparisons(comparisons), versus,
                lower_is_better=lower_is_better or (), cluster=None if cluster == "none" else cluster,
                n_boot=n_boot, confidence=confidence, seed=seed,
            )  # fmt: skip
    write_table(result, output)
    print_table(result, ["metric", "criterion", "estimate [ci]", "n", "n_clusters", "direction"])
    typer.echo(f"wrote {len(result)} rows to {output}")
    typer.echo(f"signature: {result['signature'].iloc[0]}" if len(result) else "no row")
    if compared is not None and tests is not None:
        write_table(compared, tests)
        shown = compared.rename(columns={"difference": "estimate"})
        print_table(shown, ["metric_a", "metric_b", "estimate [ci]", "p_value", "p_adjusted", "n"])
        typer.echo(f"wrote {len(compared)} tests to {tests}")


def register(app: typer.Typer) -> None:
    """Add the ``pairwise-accuracy`` command to the application."""
    app.command("pairwise-accuracy", rich_help_panel="Meta-evaluation")(pairwise_accuracy_command)
