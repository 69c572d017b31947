"""``storyeval score`` and ``storyeval metrics``: automatic metrics over a story file."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from storyeval.base.errors import StoryevalError
from storyeval.cli._common import (
    block_size_option,
    compute_settings,
    dask_client,
    device_option,
    engine_option,
    precision_option,
    scheduler_option,
    threads_option,
    user_error,
    workers_option,
)

if TYPE_CHECKING:
    from storyeval.metrics.runs import ScoreRun


SCORE_METRICS = typer.Option(
    None,
    "--metrics",
    "-m",
    help="Metric names, comma-separated or the option repeated (see `storyeval metrics`). "
    "Default: every metric that can run with the offline defaults on the fields present.",
)
SCORE_OUTPUT = typer.Option(
    None, "-o", "--output", help="Write one score per story and metric here (.jsonl or .csv)."
)
SCORE_PER_SYSTEM = typer.Option(
    None, "--per-system", help="Write the per-system table here (.csv or .jsonl)."
)
SCORE_OPTION = typer.Option(
    None,
    "--option",
    "-O",
    help="NAME.KEY=VALUE for a metric or a family, e.g. bertscore.layer=4 (repeatable).",
)
SCORE_SKIP_MISSING = typer.Option(
    False,
    "--skip-missing",
    help="Skip (and count) stories lacking an input a metric needs, instead of failing. "
    "Always on for the default suite.",
)
SCORE_PROGRESS = typer.Option(
    True, "--progress/--no-progress", help="Show progress bars (on a terminal)."
)
SCORE_NUM_CPUS = typer.Option(
    1, "--num-cpus", min=1, help="With --engine dask: torch threads per block task."
)
SCORE_NUM_GPUS = typer.Option(
    0,
    "--num-gpus",
    min=0,
    help="With --engine dask: GPUs per block task; a local cluster then runs one worker "
    "per GPU, each seeing only its card (a --scheduler's workers need --resources GPU=1).",
)


def score(
    stories: Path = typer.Argument(..., help="A story file (.jsonl or .csv)."),
    metric_names: list[str] = SCORE_METRICS,
    output: Path = SCORE_OUTPUT,
    per_system: Path = SCORE_PER_SYSTEM,
    option: list[str] = SCORE_OPTION,
    skip_missing: bool = SCORE_SKIP_MISSING,
    bootstrap: int = typer.Option(1000, "--bootstrap", help="Bootstrap resamples for the CIs."),
    confidence: float = typer.Option(0.95, "--confidence", help="Coverage of the CIs."),
    seed: int = typer.Option(0, "--seed", help="Seed of the bootstrap."),
    progress: bool = SCORE_PROGRESS,
    device: str = device_option(),
    precision: str = precision_option(),
    threads: int = threads_option(),
    engine: str = engine_option(),
    scheduler: str = scheduler_option(),
    workers: int = workers_option(),
    block_size: int = block_size_option(),
    num_cpus: int = SCORE_NUM_CPUS,
    num_gpus: float = SCORE_NUM_GPUS,
) -> None:
    """Score every story with automatic metrics; print and write per-system aggregates.

    Stories are scored in blocks; with --output, finished blocks are kept in OUTPUT.blocks/
    until the output is written, so a re-run of an interrupted command resumes. With
    --engine dask the file (a local path or any fsspec URL; JSONL, CSV or Parquet) is read
    and scored in blocks on a Dask cluster, with the local engine's numbers.
    """
    from storyeval.metrics.files import score_file
    from storyeval.metrics.registry import parse_option_assignments

    device, precision = compute_settings(device, precision, threads)
    client = dask_client(engine, scheduler, workers, num_gpus)
    metrics = ",".join(metric_names) if metric_names else None
    try:
        options = parse_option_assignments(option or [])
        settings = {
            "missing": "skip" if skip_missing else None,
            "bootstrap": bootstrap,
            "confidence": confidence,
            "seed": seed,
            "progress": progress and sys.stderr.isatty(),
            "device": device,
            "precision": precision,
            "block_size": block_size,
        }
        work = Path(f"{output}.blocks") if output is not None else None
        if client is None:
            run = score_file(stories, metrics, options=options, work_dir=work, **settings)
        else:
            from storyeval.metrics.files import score_source

            run = score_source(
                stories,
                metrics,
                client=client,
                options=options,
                num_cpus=num_cpus,
                num_gpus=num_gpus,
                work_dir=work,
                **settings,  # type: ignore[arg-type]
            )
    except (StoryevalError, FileNotFoundError, IsADirectoryError, ValueError) as exc:
        raise user_error(exc) from None
    finally:
        if client is not None:
            from storyeval.engine.dask import close

            close(client)
    from storyeval.corpus import write_records, write_scores

    try:
        if output is not None:
            write_scores(output, run.scores)
        if per_system is not None:
            write_records(per_system, _system_records(run.systems))
    except ValueError as exc:
        raise user_error(exc) from None
    if output is not None and Path(f"{output}.blocks").is_dir():
        import shutil

        shutil.rmtree(f"{output}.blocks", ignore_errors=True)  # written: nothing to resume
    _report(run, stories, output, per_system)


def _system_records(frame: object) -> list[dict[str, object]]:
    records = []
    for row in frame.to_dict(orient="records"):  # type: ignore[attr-defined]
        clean = {}
        for key, value in row.items():
            if isinstance(value, float) and not math.isfinite(value):
                value = None
            clean[key] = value
        records.append(clean)
    return records


#: Beyond this many systems the per-system table is not printed (it would run for pages)
MAX_SYSTEMS_SHOWN = 40


def _report(run: ScoreRun, stories: Path, output: Path | None, per_system: Path | None) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(width=max(Console().width, 110))
    for name, why in run.skipped.items():
        typer.echo(f"skipped {name}: {why}", err=True)
    for name, info in run.metrics.items():
        if info.n_missing:
            typer.echo(
                f"{name}: skipped {info.n_missing} stories without {info.missing_reason}; "
                f"scored {info.n_scored}",
                err=True,
            )
        for note in info.notes:
            typer.echo(f"{name}: {note}", err=True)
    frame = run.systems
    if frame["system"].nunique() > MAX_SYSTEMS_SHOWN:  # e.g. one system per story (WQ)
        typer.echo(
            f"{frame['system'].nunique()} systems: the per-system table is not printed "
            "(write it with --per-system FILE)"
        )
        frame = frame.iloc[0:0]
    table = Table(title=f"{stories}: per-system scores (mean of stories; corpus statistics)")
    for column in ("metric", "statistic", "system", "estimate", "95% CI", "n"):
        table.add_column(
            column, justify="left" if column in ("metric", "statistic", "system") else "right"
        )
    for row in frame.itertuples(index=False):
        if row.n == 0:  # the metric does not apply to this system's stories
            continue
        ci = "" if math.isnan(row.ci_low) else f"[{row.ci_low:.4g}, {row.ci_high:.4g}]"
        estimate = "undefined" if math.isnan(row.estimate) else f"{row.estimate:.4g}"
        table.add_row(row.metric, row.statistic, str(row.system), estimate, ci, str(row.n))
    if len(frame):
        console.print(table)
    typer.echo("signatures:")
    for info in run.metrics.values():
        typer.echo(f"  {info.signature.render()}")
    written = [str(p) for p in (output, per_system) if p is not None]
    if written:
        typer.echo(f"wrote {', '.join(written)}")


def _print_card(name: str) -> None:
    """Print a metric's card as Markdown on a terminal (plain text when piped)."""
    from rich.console import Console
    from rich.markdown import Markdown

    from storyeval.metrics.cards import render_card
    from storyeval.metrics.registry import get_metric

    try:
        text = render_card(get_metric(name))
    except (StoryevalError, ValueError) as exc:
        raise user_error(exc) from None
    if sys.stdout.isatty():
        Console().print(Markdown(text))
    else:
        typer.echo(text)


def metrics(
    as_json: bool = typer.Option(False, "--json", help="Print the registry as JSON."),
    show_options: bool = typer.Option(False, "--options", help="List every metric's options."),
    card: str = typer.Option(
        None, "--card", help="Print the card of this metric: what it measures, how to read it."
    ),
) -> None:
    """List the registered metrics: inputs, direction, range, level and options."""
    from rich.console import Console
    from rich.table import Table

    from storyeval.metrics.registry import all_metrics

    if card is not None:
        _print_card(card)
        return
    specs = all_metrics()
    if as_json:
        payload = [
            {
                "name": s.name,
                "description": s.description,
                "families": list(s.families),
                "inputs": list(s.inputs),
                "model": s.model,
                "higher_is_better": s.higher_is_better,
                "range": list(s.value_range),
                "level": s.level,
                "default_suite": s.default and s.runnable_offline()[0],
                "corpus_statistics": [c.name for c in s.corpus],
                "options": [
                    {
                        "name": o.name,
                        "type": o.type.__name__,
                        "default": o.default,
                        "choices": list(o.choices) if o.choices else None,
                        "required": o.required,
                        "help": o.help,
                    }
                    for o in s.options
                ],
            }
            for s in specs
        ]
        typer.echo(json.dumps(payload, indent=2))
        return
    table = Table(title="storyeval metrics")
    longest = max((len(spec.name) for spec in specs), default=4)
    table.add_column("name", no_wrap=True, min_width=longest)  # never cut a name to "bertscor…"
    for column in ("inputs", "model", "better", "range", "level", "default suite"):
        table.add_column(column, overflow="fold")
    for spec in specs:
        ok, why = spec.runnable_offline()
        suite = "yes" if spec.default and ok else ("no: " + (why or "ask for it by name"))
        table.add_row(
            spec.name,
            ", ".join(spec.inputs),
            spec.model or "-",
            spec.direction,
            spec.range_text,
            spec.level,
            suite,
        )
    console = Console(width=None if sys.stdout.isatty() else 200)  # piped: never cut
    console.print(table)
    if show_options:
        for spec in specs:
            console.print(
                f"\n{spec.name} ({', '.join(spec.families) or 'no family'}): {spec.description}",
                markup=False,
            )
            for option in spec.options:
                console.print(f"  {spec.name}.{option.describe()}", markup=False, highlight=False)


def register(app: typer.Typer) -> None:
    """Add the ``score`` and ``metrics`` commands to the application."""
    app.command(rich_help_panel="Metrics")(score)
    app.command(name="metrics", rich_help_panel="Metrics")(metrics)
