"""``storyeval mauve STORIES -o DIR``: MAUVE of each system's stories against people's."""

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


def mauve_command(
    stories: Path = typer.Argument(..., help="Stories of several systems (.jsonl or .csv)."),
    output: Path = typer.Option(..., "-o", "--output", help="The directory to write."),
    reference_system: str = typer.Option(
        "human", "--reference-system", help="The system whose stories are people's."
    ),
    features: str = typer.Option(
        "encoder", "--features", help="encoder (mean-pooled states) or causal-lm (last token)."
    ),
    model: str = typer.Option(
        None,
        "--model",
        help="Encoder or causal LM: hub name or local directory (default: offline).",
    ),
    seeds: int = typer.Option(5, "--seeds", help="k-means seeds (mean and interval across them)."),
    seed: int = typer.Option(25, "--seed", help="The first k-means seed."),
    buckets: int = typer.Option(None, "--buckets", help="k-means clusters (default: n/10)."),
    option: list[str] = typer.Option(
        None, "--option", "-O", help="mauve.KEY=VALUE (repeat; `storyeval metrics --options`)."
    ),
    progress: bool = typer.Option(True, "--progress/--no-progress", help="Progress bars."),
    device: str = device_option(),
    precision: str = precision_option(),
    threads: int = threads_option(),
) -> None:
    """MAUVE and MAUVE* of each system against the reference system, over several k-means
    seeds: DIR/mauve.csv (estimate, interval across seeds, n), DIR/curves.csv and
    DIR/divergence.png (the divergence curves), DIR/mauve.md and DIR/mauve.json (signatures).
    Add it to a meta-evaluation report with `storyeval report --mauve DIR`."""
    from storyeval.analyses.distribution import mauve_by_system, write_mauve
    from storyeval.base.errors import StoryevalError
    from storyeval.cli._tables import print_table
    from storyeval.corpus import read_stories
    from storyeval.metrics.registry import parse_option_assignments

    device, precision = compute_settings(device, precision, threads)
    try:
        settings: dict[str, object] = {
            "mauve.reference_system": reference_system,
            "mauve.features": features,
            "mauve.seeds": seeds,
            "mauve.seed": seed,
        }
        if model is not None:
            settings["mauve.model"] = model
        if buckets is not None:
            settings["mauve.num_buckets"] = buckets
        settings.update(parse_option_assignments(option or []))
        table = mauve_by_system(
            read_stories(stories),
            options=settings,
            progress=progress and sys.stderr.isatty(),
            device=device,
            precision=precision,
        )
        written = write_mauve(table, output)
    except (StoryevalError, OSError, ValueError) as exc:
        raise user_error(exc) from None
    for note in table.notes:
        typer.echo(f"warning: {note}", err=True)
    print_table(table.frame, ["system", "statistic", "estimate [ci]", "sd", "n"], limit=60)
    for kind, path in written.items():
        typer.echo(f"wrote {kind}: {path}")
    for signature in table.signatures.values():
        typer.echo(f"signature: {signature}")


def register(app: typer.Typer) -> None:
    """Add the ``mauve`` command to the application."""
    app.command("mauve", rich_help_panel="Metrics")(mauve_command)
