"""Helpers shared by the command modules (not a command module itself)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import typer

from storyeval.base.errors import DataFileError, StoryevalError


def exit_with(message: str, code: int = 2) -> typer.Exit:
    """Print ``message`` to stderr and return an :class:`typer.Exit` to raise."""
    typer.echo(message, err=True)
    return typer.Exit(code)


def user_error(exc: Exception) -> typer.Exit:
    """Turn an expected error into a one-line message and exit status 2: ``error: ...``,
    except a bad data file, whose ``FILE:LINE: reason`` lines stand alone."""
    prefix = "" if isinstance(exc, DataFileError) else "error: "
    return exit_with(f"{prefix}{exc}")


@contextlib.contextmanager
def user_errors() -> Iterator[None]:
    """Inside, the library's ``ValueError`` and ``OSError`` (a bad value, an unreadable or
    malformed file) become a message on stderr and exit status 2 (see :func:`user_error`)."""
    try:
        yield
    except (ValueError, OSError) as exc:
        raise user_error(exc) from None


def check_choices(values: Iterable[str], choices: Sequence[str], option: str) -> list[str]:
    """The values (duplicates dropped, order kept) if each is one of ``choices``, else a usage
    error naming ``option``."""
    chosen = list(dict.fromkeys(values))
    for value in chosen:
        if value not in choices:
            raise typer.BadParameter(
                f"must be one of {', '.join(choices)}; got {value!r}", param_hint=option
            )
    return chosen


def check_choice(value: str, choices: Sequence[str], option: str) -> str:
    """``value`` if it is one of ``choices``, else a usage error naming ``option``."""
    return check_choices([value], choices, option)[0]


# Options that several commands share, with the same names and help everywhere.

SCORES_HELP = "A score file from `storyeval score` (repeat for several)."
JUDGMENTS_HELP = "A long-format judgment file (repeat for several)."
STORIES_HELP = "A story file to look up the system and prompt_id of each item."


def scores_option() -> Any:
    return typer.Option(..., "--scores", "-s", help=SCORES_HELP)


def judgments_option() -> Any:
    return typer.Option(..., "--judgments", "-j", help=JUDGMENTS_HELP)


def stories_option() -> Any:
    return typer.Option(None, "--stories", help=STORIES_HELP)


def output_option(help_text: str = "Output table (.csv or .jsonl).") -> Any:
    return typer.Option(..., "-o", "--output", help=help_text)


def aggregate_option() -> Any:
    return typer.Option(
        "mean",
        "--aggregate",
        help="Rater aggregation: mean, median, majority, or a competence model's estimate: "
        "mace, dawid-skene (posterior mean label), ordinal (expected rating).",
    )


def metric_option() -> Any:
    return typer.Option(None, "--metric", help="Only these metrics (repeat).")


def criterion_option() -> Any:
    return typer.Option(None, "--criterion", help="Only these criteria (repeat).")


def device_option() -> Any:
    return typer.Option(
        "cpu", "--device", help="Where models run: cpu, cuda, cuda:N, mps or auto (a GPU if any)."
    )


def precision_option() -> Any:
    return typer.Option(
        "float32",
        "--precision",
        help="Matrix products in float32, bfloat16 (CPUs with AVX-512 BF16/AMX, GPUs) or "
        "float16 (GPUs); in the signatures.",
    )


def threads_option() -> Any:
    return typer.Option(
        None,
        "--threads",
        help="CPU threads for models (default: the CPUs free when the command starts).",
    )


def compute_settings(device: str, precision: str, threads: int | None) -> tuple[str, str]:
    """Check the device and precision, set the CPU threads; returns the resolved device and
    the precision (a bad value is a one-line error, exit 2)."""
    from storyeval.models.devices import check_precision, configure_threads, resolve_device

    try:
        resolved = resolve_device(device)
        check_precision(precision, resolved)
        configure_threads(threads)
    except ValueError as exc:
        raise user_error(exc) from None
    return resolved, precision


def engine_option() -> Any:
    return typer.Option(
        "local", "--engine", help="local (this process) or dask (a Dask cluster: storyeval[dask])."
    )


def scheduler_option() -> Any:
    return typer.Option(
        None,
        "--scheduler",
        help="With --engine dask: a scheduler address (tcp://host:8786); default: a local "
        "cluster on 127.0.0.1, one worker per CPU.",
    )


def workers_option() -> Any:
    return typer.Option(
        None, "--workers", min=1, help="With --engine dask and no --scheduler: worker processes."
    )


def block_size_option(default: int = 500, what: str = "stories") -> Any:
    return typer.Option(
        default,
        "--block-size",
        min=1,
        help=f"{what.capitalize()} per block, the unit of work (both engines score the same "
        "blocks, so they give the same numbers).",
    )


def dask_client(engine: str, scheduler: str | None, workers: int | None, gpus: float = 0) -> Any:
    """A Dask client for ``--engine dask`` (None for the local engine); with ``gpus`` a local
    cluster has one worker per GPU; a missing extra or an unreachable scheduler is a one-line
    error."""
    from storyeval.engine import check_engine

    try:
        if check_engine(engine) == "local":
            if scheduler is not None or workers is not None:
                raise ValueError("--scheduler and --workers go with --engine dask")
            return None
        from storyeval.engine.dask import connect

        return connect(scheduler, workers=workers, gpus=int(gpus > 0))
    except (ValueError, StoryevalError) as exc:
        raise user_error(exc) from None


def criteria_map(pairs: list[str]) -> dict[str, str]:
    """``JUDGE=PEOPLE`` options as a mapping."""
    mapping = {}
    for pair in pairs:
        source, sep, target = pair.partition("=")
        if not sep or not source.strip() or not target.strip():
            raise exit_with(
                f"error: --criteria takes JUDGE=PEOPLE, e.g. coherence=reasonable; got {pair!r}"
            )
        mapping[source.strip()] = target.strip()
    return mapping
