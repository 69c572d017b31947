"""``storyeval robustness STORIES --metrics M1,M2 -o DIR``: invariance and discrimination tests."""

from __future__ import annotations

import sys
from pathlib import Path

import typer

from storyeval.cli._common import (
    compute_settings,
    device_option,
    precision_option,
    threads_option,
    user_error,
)


def robustness_command(
    stories: Path = typer.Argument(..., help="Good stories (.jsonl or .csv), e.g. human ones."),
    metric_names: list[str] = typer.Option(
        ..., "--metrics", "-m", help="Metric names, comma-separated or the option repeated."
    ),
    output: Path = typer.Option(..., "-o", "--output", help="The directory to write."),
    invariance: str = typer.Option(
        None,
        "--invariance",
        help="Quality-preserving tests (default: synonym, contraction, punctuation, typos; add "
        "paraphrase for LM rewrites, e.g. invariance,paraphrase; 'none' to skip).",
    ),
    discrimination: str = typer.Option(
        None,
        "--discrimination",
        help="Error-introducing tests (default: UNION's four and causal_reordering, "
        "antonym_swap, entity_swap, repeated_plot; 'none' to skip).",
    ),
    tolerance: float = typer.Option(
        0.1, "--tolerance", help="A change beyond this many sds of the metric counts as moved."
    ),
    typo_rate: float = typer.Option(0.05, "--typo-rate", help="Typo probability per word."),
    paraphrase_model: str = typer.Option(
        None,
        "--paraphrase-model",
        help="Instruction-tuned LM of the paraphrase test (default: the offline SmolLM2-135M).",
    ),
    paraphrase_similarity: float = typer.Option(
        0.85, "--paraphrase-similarity", help="Encoder cosine a rewrite needs to count."
    ),
    seed: int = typer.Option(0, "--seed", help="Seed of the perturbations."),
    option: list[str] = typer.Option(
        None, "--option", help="Metric option NAME.KEY=VALUE (repeat), as for `score`."
    ),
    progress: bool = typer.Option(True, "--progress/--no-progress", help="Progress bars."),
    device: str = device_option(),
    precision: str = precision_option(),
    threads: int = threads_option(),
) -> None:
    """Robustness of metrics (OpenMEVA): do quality-preserving changes leave a metric alone,
    and do errors lower it?

    Writes DIR/invariance.csv (per metric and test: mean change, share of stories moved more
    than --tolerance sds, interval), DIR/discrimination.csv (share of pairs where the
    original scores better, interval, sign test), DIR/robustness.png (heatmap),
    DIR/robustness.md and DIR/perturbed.jsonl.
    """
    from storyeval.analyses.robustness import robustness, write_robustness
    from storyeval.base.errors import StoryevalError
    from storyeval.cli._tables import print_table
    from storyeval.corpus import read_stories
    from storyeval.metrics.registry import parse_option_assignments

    device, precision = compute_settings(device, precision, threads)

    def tests(text: str | None) -> list[str] | None:
        if text is None:
            return None
        return [] if text.strip().lower() == "none" else text.split(",")

    try:
        result = robustness(
            read_stories(stories),
            ",".join(metric_names),
            invariance=tests(invariance),
            discrimination=tests(discrimination),
            seed=seed,
            tolerance=tolerance,
            typo_rate=typo_rate,
            paraphrase_model=paraphrase_model,
            paraphrase_similarity=paraphrase_similarity,
            options=parse_option_assignments(option or []),
            progress=progress and sys.stderr.isatty(),
            device=device,
            precision=precision,
        )
        written = write_robustness(result, output)
    except (StoryevalError, OSError, ValueError) as exc:
        raise user_error(exc) from None
    if len(result.discrimination):
        frame = result.discrimination.rename(columns={"group": "test"})
        print_table(frame, ["metric", "test", "estimate [ci]", "p", "n_pairs"], limit=60)
    if len(result.invariance):
        frame = result.invariance.rename(columns={"changed_share": "estimate"})
        print_table(frame, ["metric", "test", "estimate [ci]", "mean_change", "n_pairs"], limit=60)
    for kind, path in written.items():
        typer.echo(f"wrote {kind}: {path}")
    typer.echo(f"signature: {result.signature.render()}")


def register(app: typer.Typer) -> None:
    """Add the ``robustness`` command to the application."""
    app.command("robustness", rich_help_panel="Meta-evaluation")(robustness_command)
