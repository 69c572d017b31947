"""Scoring a story file: in this process (:func:`score_file`) or on a Dask cluster
(:func:`score_source`), in the same blocks, so both give the same numbers.

A JSONL or CSV file is read in one go; Parquet, and any fsspec URL, partition by partition as
the Dask engine reads it (:mod:`storyeval.engine.sources`). Errors name the file and line.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from storyeval.metrics.pipeline import ScoringSettings, score_on, score_stories
from storyeval.metrics.runs import MissingPolicy, ScoreRun, story_lines


def score_file(
    path: str | Path, metrics: str | Sequence[str] | None = None, **kwargs: Any
) -> ScoreRun:
    """Read a story file (JSONL or CSV; Parquet, and any fsspec URL, through
    :mod:`storyeval.engine.sources`) and :func:`score_stories` it (errors name the file and
    line)."""
    from storyeval.corpus import read_stories

    text = str(path)
    if "://" in text or text.lower().endswith((".parquet", ".pq")):
        from storyeval.engine.sources import read_partitioned

        stories, lines = read_partitioned(text)
        return score_stories(stories, metrics, source=path, lines=lines, **kwargs)
    stories = read_stories(path)
    return score_stories(stories, metrics, source=path, lines=story_lines(path), **kwargs)


def score_source(
    source: str | Path,
    metrics: str | Sequence[str] | None = None,
    *,
    client: Any,
    options: Mapping[str, Any] | None = None,
    missing: MissingPolicy | None = None,
    bootstrap: int = 1000,
    confidence: float = 0.95,
    seed: int = 0,
    block_size: int = 500,
    device: str = "cpu",
    precision: str = "float32",
    num_cpus: int = 1,
    num_gpus: float = 0,
    work_dir: str | Path | None = None,
    progress: bool = False,
    read_blocksize: int = 64 * 2**20,
) -> ScoreRun:
    """Score a story file on a Dask cluster: :func:`~storyeval.metrics.pipeline.score_on`
    with this cluster's executor, so the same arguments give the same result as
    :func:`score_file`.

    Parameters
    ----------
    source : str or Path
        A JSONL, CSV or Parquet file: a local path or any fsspec URL the workers can read.
    client : distributed.Client
        From :func:`storyeval.engine.dask.connect`.
    block_size : int
        Stories per block (the unit of work; the same as the local engine's).
    num_cpus : int
        Torch threads per block task.
    num_gpus : float
        GPUs per block task (a Dask resource ``GPU``: start GPU workers with
        ``--resources GPU=1``); use with ``device="cuda"``.
    work_dir : path, optional
        Finished blocks are written here; a re-run of the same command skips them.
    read_blocksize : int
        Bytes per partition of a JSONL file.

    Raises
    ------
    DataFileError, MissingInputError, UnknownMetricError, OptionError, EngineError
    """
    from storyeval.engine.dask import read_source
    from storyeval.models.devices import check_precision

    check_precision(precision, device)
    executor = read_source(
        client, source, blocksize=read_blocksize, progress=progress, threads=num_cpus
    )
    return score_on(
        executor,
        metrics,
        options=options,
        missing=missing,
        bootstrap=bootstrap,
        confidence=confidence,
        seed=seed,
        block_size=block_size,
        scoring=ScoringSettings(device, precision),
        work_dir=work_dir,
        resources={"GPU": num_gpus} if num_gpus else None,
    )
