"""Scoring stories with registered metrics: per-item scores, then per-system aggregates.

:func:`score_stories` is the library call behind ``storyeval score``. It

1. chooses the metrics (the default suite, or the names given) and validates the options;
2. checks each story has the inputs each metric needs (a reference, a prompt, a field named
   by an option): missing inputs raise :class:`~storyeval.base.errors.MissingInputError` naming the
   metric and the first offending line, or, with ``missing="skip"``, are skipped and counted;
3. lets every embedding metric announce the texts and layers it will read, encodes each
   distinct text once per encoder (one pass, batches sorted by length), then runs the metrics;
4. aggregates per system: mean, sd and a seeded bootstrap confidence interval of the item
   values, plus corpus-level statistics (corpus BLEU, corpus perplexity, ...) computed from
   per-item sufficient statistics, with bootstrap intervals that resample those statistics.
"""

from __future__ import annotations

import hashlib
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from storyeval.base.validation import check_choice, check_confidence
from storyeval.corpus import Score, Story
from storyeval.engine.blocks import Executor, LocalExecutor
from storyeval.metrics.aggregate import aggregate
from storyeval.metrics.block_work import (
    BlockTask,
    _score_records,
    block_tasks,
    eligibility,
    lacking_inputs,
    merge_outputs,
    run_block,
)
from storyeval.metrics.context import ScoringContext
from storyeval.metrics.registry import (
    MetricBatch,
    MetricOutput,
    MetricSpec,
    get_metric,
    parse_metric_list,
    resolve_options,
    unused_options,
)
from storyeval.metrics.runs import (
    NEURAL_ROLES,
    CorpusPresence,
    MetricRun,
    MissingPolicy,
    ScoreRun,
    corpus_presence,
    default_suite,
)


def score_stories(
    stories: Sequence[Story],
    metrics: str | Sequence[str] | None = None,
    *,
    options: Mapping[str, Any] | None = None,
    missing: MissingPolicy | None = None,
    bootstrap: int = 1000,
    confidence: float = 0.95,
    seed: int = 0,
    progress: bool = False,
    source: str | Path | None = None,
    lines: Mapping[str, int] | None = None,
    context: ScoringContext | None = None,
    device: str = "cpu",
    precision: str = "float32",
    block_size: int = 500,
    work_dir: str | Path | None = None,
) -> ScoreRun:
    """Score stories with registered metrics.

    Parameters
    ----------
    stories : sequence of Story
        The stories (e.g. from :func:`storyeval.corpus.read_stories`).
    metrics : str, sequence of str, or None
        Metric names (``"bleu,rougeL"`` or a list). ``None`` runs the default suite: every
        registered metric that can run with the offline defaults on the fields present.
    options : mapping, optional
        ``{"NAME.KEY": value}`` where NAME is a metric or a family; see
        :func:`storyeval.metrics.registry.resolve_options`.
    missing : {"error", "skip"}, optional
        What to do with a story lacking an input a metric needs. Default: ``"error"`` when
        metrics are named, ``"skip"`` for the default suite. Skipped stories are counted.
    bootstrap : int
        Bootstrap resamples for the per-system confidence intervals (0 for none).
    confidence : float
        Coverage of the intervals.
    seed : int
        Seed of the bootstrap (recorded in the aggregate signatures).
    progress : bool
        Show progress bars.
    source, lines : optional
        The file the stories came from and each story id's line, for error messages.
    context : ScoringContext, optional
        Reuse loaded models and encoded texts across calls.
    device, precision : str
        Where and in what precision the models run (``cpu``/``cuda``/``mps``/``auto``;
        ``float32``/``bfloat16``/``float16``), for a new context; recorded in the signatures
        of the metrics that run a model.
    block_size : int
        Stories are scored in consecutive blocks of this many (each with its own encoder
        pass, so memory stays bounded); metrics whose values depend on the whole corpus
        (self-BLEU, idf weights) run on all stories at once. The Dask engine scores the same
        blocks, so both give the same numbers.
    work_dir : path, optional
        With ``source``: each finished block is saved here, and a re-run of the same work
        (file, metrics, options and settings) reuses the saved blocks.

    Returns
    -------
    ScoreRun

    Raises
    ------
    UnknownMetricError, OptionError, MissingInputError, ModelLoadError

    Examples
    --------
    >>> from storyeval.corpus import Story
    >>> stories = [Story("a", "", "the cat sat on the mat", reference="the cat sat on a mat", system="x"),
    ...            Story("b", "", "a dog ran", reference="a dog ran away", system="x")]
    >>> run = score_stories(stories, "bleu,distinct1", bootstrap=0)
    >>> [(s.item_id, s.metric, round(s.value, 2)) for s in run.scores][:2]
    [('a', 'bleu', 53.73), ('b', 'bleu', 71.65)]
    >>> run.systems.set_index(["metric", "statistic"]).loc[("bleu", "corpus_bleu"), "estimate"].round(2)  # = sacrebleu.corpus_bleu
    np.float64(53.42)
    """
    if not stories:
        raise ValueError("stories must not be empty")
    executor = LocalExecutor(
        stories, lines or {}, str(source) if source is not None else "<stories>", progress
    )
    context = context or ScoringContext(progress=progress, device=device, precision=precision)
    return score_on(
        executor,
        metrics,
        options=options,
        missing=missing,
        bootstrap=bootstrap,
        confidence=confidence,
        seed=seed,
        block_size=block_size,
        scoring=context,
        work_dir=work_dir,
    )


@dataclass(frozen=True)
class ScoringSettings:
    """How a block scored away from this process loads its models: a fresh
    :class:`ScoringContext` per block (the models themselves are loaded once per process)."""

    device: str = "cpu"
    precision: str = "float32"

    def block_context(self, whole: bool) -> ScoringContext:
        """A context for one block."""
        return ScoringContext(device=self.device, precision=self.precision)

    def compute_fields(self) -> dict[str, str]:
        """Where and how the models run, for signatures."""
        from storyeval.models.devices import compute_fields

        return compute_fields(self.device, self.precision)


@dataclass
class BlockWork:
    """One block of a scoring run: its task, the run indices each of its metrics scores
    (stories lacking an input left out), whether it spans the whole run, and where a finished
    block is saved (a re-run reuses it)."""

    task: BlockTask
    wanted: dict[str, list[int]]
    whole: bool
    saved: str | None = None


def score_on(
    executor: Executor,
    metrics: str | Sequence[str] | None = None,
    *,
    options: Mapping[str, Any] | None = None,
    missing: MissingPolicy | None = None,
    bootstrap: int = 1000,
    confidence: float = 0.95,
    seed: int = 0,
    block_size: int = 500,
    scoring: ScoringContext | ScoringSettings | None = None,
    work_dir: str | Path | None = None,
    resources: Mapping[str, float] | None = None,
) -> ScoreRun:
    """Score the stories an executor holds (:func:`score_stories` in this process,
    :func:`storyeval.metrics.files.score_source` on a cluster): choose the metrics, check every
    story has their inputs, score the blocks of :func:`block_tasks` where the executor runs
    them, then aggregate here. ``scoring``: the live context of an in-process executor, or
    the settings a block elsewhere loads its models with; ``work_dir``: finished blocks are
    saved there and reused by a re-run of the same work (stories read from a file only)."""
    _check_run_settings(missing, bootstrap, confidence)
    scoring = scoring or (ScoringContext() if executor.in_process else ScoringSettings())
    names, policy, skipped = _choose_metrics(executor, metrics, missing)
    resolved = resolve_options(names, options)
    for target in unused_options(names, options):
        warnings.warn(f"option {target} applies to none of the metrics run", stacklevel=3)
    specs = {name: get_metric(name) for name in names}
    parts = executor.map_parts(partition_lacking, names, resolved)
    lacking = {name: [item for part in parts for item in part[name]] for name in names}
    n = executor.n_stories
    eligible, missing_count = eligibility(
        specs, resolved, lacking, n, policy, executor.locate, executor.where
    )
    tasks = block_tasks(n, specs, resolved, block_size)
    folder = _work_folder(work_dir, executor.where, names, resolved, scoring, block_size, policy)
    items = [
        BlockWork(
            task,
            {
                name: [i for i in eligible[name] if task.start <= i < task.end]
                for name in task.names
            },
            len(tasks) == 1 or task.end - task.start == n,
            None
            if folder is None
            else str(folder / f"block-{task.start}-{task.end}-{len(task.names)}.pkl"),
        )
        for task in tasks
    ]
    blocks = [range(task.start, task.end) for task in tasks]
    results = executor.map_blocks(
        score_block, blocks, resolved, scoring, items=items, resources=resources
    )
    outputs, timings = _merge_blocks(names, results)
    stubs = executor.stubs()
    context = scoring if isinstance(scoring, ScoringContext) else None
    batches = {
        name: MetricBatch([stubs[i] for i in eligible[name]], context, stubs)  # type: ignore[arg-type]
        for name in names
    }
    return finish_run(
        specs,
        resolved,
        batches,
        outputs,
        missing_count,
        skipped,
        timings,
        context,
        bootstrap=bootstrap,
        confidence=confidence,
        seed=seed,
        compute=scoring.compute_fields(),
    )


def _check_run_settings(missing: str | None, bootstrap: int, confidence: float) -> None:
    if missing is not None:
        check_choice(missing, ("error", "skip"), "missing")
    if bootstrap < 0:
        raise ValueError(f"bootstrap must be >= 0; got {bootstrap}")
    check_confidence(confidence)


def _choose_metrics(
    executor: Executor, metrics: str | Sequence[str] | None, missing: MissingPolicy | None
) -> tuple[list[str], MissingPolicy, dict[str, str]]:
    """The metrics to run (the default suite for the fields present when none are named),
    the missing-input policy, and why default metrics were left out."""
    if metrics is not None:
        return parse_metric_list(metrics), missing or "error", {}
    presence = CorpusPresence()
    for part in executor.map_parts(_part_presence):
        presence = presence.merge(part)
    names, skipped = default_suite(presence)
    return names, missing or "skip", skipped


def _part_presence(stories: Sequence[Story], offset: int) -> CorpusPresence:
    return corpus_presence(stories)


def partition_lacking(
    stories: Sequence[Story],
    offset: int,
    names: Sequence[str],
    resolved: Mapping[str, Mapping[str, Any]],
) -> dict[str, list[tuple[int, str]]]:
    """The stories of a part (run indices from ``offset``) lacking an input of each metric."""
    specs = {name: get_metric(name) for name in names}
    return lacking_inputs(specs, stories, resolved, offset)


def score_block(
    stories: Sequence[Story],
    work: BlockWork,
    resolved: Mapping[str, Mapping[str, Any]],
    scoring: ScoringContext | ScoringSettings,
) -> tuple[dict[str, MetricOutput], dict[str, float]]:
    """Score one block where the executor runs it; with ``work.saved``, reuse the block an
    earlier run saved there, else save it once computed."""
    import pickle

    from storyeval.base.io import write_bytes_atomic

    if work.saved is not None and Path(work.saved).is_file():
        with open(work.saved, "rb") as handle:
            outputs, timings = pickle.load(handle)
        return outputs, {**timings, "blocks_reused": 1.0}
    context = scoring.block_context(work.whole)
    computed = run_block(stories, work.task.start, work.task.names, resolved, work.wanted, context)
    if work.saved is not None:
        write_bytes_atomic(work.saved, pickle.dumps(computed))
    return computed


def _merge_blocks(
    names: Sequence[str], results: Sequence[tuple[dict[str, MetricOutput], dict[str, float]]]
) -> tuple[dict[str, MetricOutput], dict[str, float]]:
    """Each metric's block outputs as one output, and the blocks' seconds summed."""
    parts: dict[str, list[MetricOutput]] = {name: [] for name in names}
    timings: dict[str, float] = {}
    for outputs, seconds in results:
        for name, output in outputs.items():
            parts[name].append(output)
        for key, value in seconds.items():
            timings[key] = timings.get(key, 0.0) + value
    return {name: merge_outputs(found) for name, found in parts.items()}, timings


def _work_folder(
    work_dir: str | Path | None,
    where: str,
    names: Sequence[str],
    resolved: Any,
    scoring: ScoringContext | ScoringSettings,
    block_size: int,
    policy: str,
) -> Path | None:
    """The folder of this work's saved blocks: a hash of everything a block's result depends
    on (the file's size and time, the metrics, options and settings), so a re-run reuses
    only its own."""
    if work_dir is None:
        return None
    import json

    import fsspec

    from storyeval import __version__

    if where.startswith("<"):
        raise ValueError("work_dir needs stories read from a file")
    fs, path = fsspec.core.url_to_fs(where)
    info = fs.info(path)
    identity = {
        "url": where,
        "size": info.get("size"),
        "mtime": str(info.get("mtime") or info.get("LastModified") or ""),
        "names": list(names),
        "options": resolved,
        "settings": {"block_size": block_size, **scoring.compute_fields(), "policy": policy},
        "version": __version__,
    }
    key = hashlib.sha256(json.dumps(identity, sort_keys=True, default=str).encode()).hexdigest()
    folder = Path(work_dir) / key[:16]
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def finish_run(
    specs: Mapping[str, MetricSpec],
    resolved: Mapping[str, Mapping[str, Any]],
    batches: Mapping[str, MetricBatch],
    outputs: Mapping[str, MetricOutput],
    missing_count: Mapping[str, tuple[int, str]],
    skipped: dict[str, str],
    timings: dict[str, float],
    context: ScoringContext | None,
    *,
    bootstrap: int,
    confidence: float,
    seed: int,
    compute: Mapping[str, str] | None = None,
) -> ScoreRun:
    """Signatures, score records and per-system aggregates of computed metric outputs (the
    last step of every engine: the outputs may come from blocks scored anywhere).
    ``compute``: where and how the models ran (default: the context's)."""
    scores: list[Score] = []
    runs: dict[str, MetricRun] = {}
    where_run = dict(compute) if compute is not None else {}
    if compute is None and context is not None:
        where_run = context.compute_fields()
    for name, spec in specs.items():
        fields = dict(outputs[name].fields)
        if spec.model in NEURAL_ROLES:  # where and how the model ran
            for key, value in where_run.items():
                fields.setdefault(key, value)
        signature = spec.signature(resolved[name], outputs[name].models, fields, outputs[name].omit)
        if spec.level != "corpus":  # a corpus-level metric has no value per story
            scores += _score_records(name, batches[name].stories, outputs[name], signature.render())
        count, reason = missing_count[name]
        runs[name] = MetricRun(
            name,
            signature,
            len(batches[name].stories),
            count,
            reason,
            timings.get(name, 0.0),
            outputs[name].notes,
        )
    details: dict[tuple[str, str, str], Any] = {}
    systems = aggregate(
        specs,
        batches,
        outputs,
        runs,
        resolved,
        bootstrap=bootstrap,
        confidence=confidence,
        seed=seed,
        details=details,
    )
    return ScoreRun(scores, systems, runs, skipped, timings, context, details)
