"""Scoring stories with registered metrics: per-item scores, then per-system aggregates.

:func:`score_stories` is the library call behind ``storyeval score``. It

1. chooses the metrics (the default suite, or the names given) and validates the options;
2. checks each story has the inputs each metric needs (a reference, a prompt, a field named
   by an option): missing inputs raise :class:`~storyeval.errors.MissingInputError` naming the
   metric and the first offending line, or, with ``missing="skip"``, are skipped and counted;
3. lets every embedding metric announce the texts and layers it will read, encodes each
   distinct text once per encoder (one pass, batches sorted by length), then runs the metrics;
4. aggregates per system: mean, sd and a seeded bootstrap confidence interval of the item
   values, plus corpus-level statistics (corpus BLEU, corpus perplexity, ...) computed from
   per-item sufficient statistics, with bootstrap intervals that resample those statistics.
"""

from __future__ import annotations

import hashlib
import math
import time
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np

from storyeval.blocks import Executor, LocalExecutor, block_plan
from storyeval.corpus import Score, Story
from storyeval.errors import MissingInputError
from storyeval.metrics.context import ScoringContext, windowed_texts
from storyeval.metrics.registry import (
    MetricBatch,
    MetricOutput,
    MetricSpec,
    all_metrics,
    get_metric,
    parse_metric_list,
    resolve_options,
    unused_options,
)
from storyeval.signature import Signature
from storyeval.validation import check_choice, check_confidence

MissingPolicy = Literal["error", "skip"]
#: Metric model roles that run a neural network (their signatures say where and how).
NEURAL_ROLES = ("encoder", "causal-lm", "nsp", "checkpoint")
NO_SYSTEM = "(none)"

#: Columns of the per-system table, in order.
SYSTEM_COLUMNS = (
    "system",
    "metric",
    "statistic",
    "estimate",
    "ci_low",
    "ci_high",
    "sd",
    "n",
    "n_undefined",
    "n_missing",
    "method",
    "higher_is_better",
    "signature",
)


def prompt_id(story: Story) -> str:
    """The story's ``prompt_id`` field, or a stable id derived from its prompt text
    (``p-`` and 10 hex digits of a SHA-1), so stories sharing a prompt share it.

    >>> from storyeval.corpus import Story
    >>> a, b = Story("a", "Once upon a time.", "x"), Story("b", "Once upon a time.", "y")
    >>> prompt_id(a) == prompt_id(b), prompt_id(a)[:2]
    (True, 'p-')
    >>> prompt_id(Story("c", "Once.", "z", extra={"prompt_id": "s001"}))
    's001'
    """
    given = story.extra.get("prompt_id")
    if given is not None and str(given).strip():
        return str(given)
    digest = hashlib.sha1(" ".join(story.prompt.split()).encode("utf-8")).hexdigest()
    return f"p-{digest[:10]}"


@dataclass
class MetricRun:
    """What happened to one metric in a run."""

    name: str
    signature: Signature
    n_scored: int
    n_missing: int
    missing_reason: str
    seconds: float
    notes: list[str] = field(default_factory=list)


@dataclass
class ScoreRun:
    """The result of :func:`score_stories`.

    Attributes
    ----------
    scores : list of Score
        One per story and metric (value NaN where undefined), with ``system`` and
        ``prompt_id`` in ``extra``.
    systems : pandas.DataFrame
        Per-system aggregates; columns :data:`SYSTEM_COLUMNS`.
    metrics : dict of str to MetricRun
        Per metric: signature, number scored, number skipped for a missing input, seconds.
    skipped : dict of str to str
        Metrics of the default suite that were not run, and why.
    timings : dict of str to float
        Seconds spent encoding (``encoder``) and loading/computing each metric.
    details : dict
        ``(metric, statistic, system)`` -> further results of corpus-level metrics (e.g.
        MAUVE's divergence curves), for reports.
    """

    scores: list[Score]
    systems: Any
    metrics: dict[str, MetricRun]
    skipped: dict[str, str]
    timings: dict[str, float]
    context: ScoringContext | None = None
    details: dict[tuple[str, str, str], Any] = field(default_factory=dict)

    def frame(self) -> Any:
        """The per-item scores as a tidy DataFrame (item_id, metric, value, signature,
        system, prompt_id)."""
        import pandas as pd

        return pd.DataFrame(
            [{**s.to_dict(), "value": s.value} for s in self.scores],
            columns=["item_id", "metric", "value", "signature", "system", "prompt_id"],
        )


@dataclass
class CorpusPresence:
    """What the stories of a corpus have, for choosing the default suite without holding the
    stories (an engine merges the presence of its partitions).

    >>> from storyeval.corpus import Story
    >>> p = corpus_presence([Story("a", "P.", "S.", reference="R.", system="x", extra={"o": "t"})])
    >>> p.has_reference, p.has_prompt, sorted(p.text_fields), sorted(p.systems)
    (True, True, ['id', 'o', 'prompt', 'reference', 'story', 'system'], ['x'])
    """

    has_reference: bool = False
    has_prompt: bool = False
    text_fields: set[str] = field(default_factory=set)
    systems: set[str] = field(default_factory=set)

    def merge(self, other: CorpusPresence) -> CorpusPresence:
        """The presence of both corpora."""
        return CorpusPresence(
            self.has_reference or other.has_reference,
            self.has_prompt or other.has_prompt,
            self.text_fields | other.text_fields,
            self.systems | other.systems,
        )


def corpus_presence(stories: Sequence[Story]) -> CorpusPresence:
    """The :class:`CorpusPresence` of ``stories``."""
    fields: set[str] = set()
    for story in stories:
        fields.update(
            key
            for key, value in story.to_dict().items()
            if isinstance(value, str) and value.strip()
        )
    return CorpusPresence(
        any(s.references for s in stories),
        any(s.prompt.strip() for s in stories),
        fields,
        {s.system for s in stories if s.system},
    )


def default_suite(
    stories: Sequence[Story] | CorpusPresence,
) -> tuple[list[str], dict[str, str]]:
    """The metrics that can run with the offline defaults on the fields present in
    ``stories`` (or a :class:`CorpusPresence`), and the reasons the others are left out.

    A metric needing a reference (prompt, field) runs when at least one story has one; the
    stories without it are then skipped and counted.
    """
    presence = stories if isinstance(stories, CorpusPresence) else corpus_presence(stories)
    chosen: list[str] = []
    skipped: dict[str, str] = {}
    for spec in all_metrics():
        if not spec.default:
            skipped[spec.name] = "not in the default suite (ask for it with --metrics)"
            continue
        ok, why = spec.runnable_offline()
        if not ok:
            skipped[spec.name] = why
            continue
        lacking = _missing_everywhere(spec, presence, spec.defaults())
        if lacking:
            skipped[spec.name] = lacking
            continue
        chosen.append(spec.name)
    return chosen, skipped


def _missing_everywhere(
    spec: MetricSpec, presence: CorpusPresence, options: Mapping[str, Any]
) -> str:
    if spec.needs_reference and not presence.has_reference:
        return "no story has a reference"
    if spec.needs_prompt and not presence.has_prompt:
        return "no story has a prompt"
    for key in spec.field_options:
        name = options.get(key)
        if not name or str(name) not in presence.text_fields:
            return f"no story has the field {name!r} (set {spec.name}.{key})"
    reference = options.get("reference_system")
    if reference is not None and reference not in presence.systems:
        return f"no story of the reference system {reference!r} (set {spec.name}.reference_system)"
    return ""


def _field_text(story: Story, name: Any) -> str:
    if not name:
        return ""
    value = story.to_dict().get(str(name))
    return value if isinstance(value, str) and value.strip() else ""


def _lacks(spec: MetricSpec, story: Story, options: Mapping[str, Any]) -> str:
    if spec.needs_reference and not story.references:
        return "has no 'reference'"
    if spec.needs_prompt and not story.prompt.strip():
        return "has an empty 'prompt'"
    for key in spec.field_options:
        name = options.get(key)
        if not _field_text(story, name):
            return f"has no field {name!r}"
    return ""


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
    :func:`storyeval.engine.dask.score_source` on a cluster): choose the metrics, check every
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

    from storyeval.io import write_bytes_atomic

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


# --------------------------------------------------------------------------- blocks


def corpus_wide(spec: MetricSpec, options: Mapping[str, Any]) -> bool:
    """Whether a metric's value of a story depends on the other stories of the run (system
    level, or idf weights computed on the corpus): such a metric runs on all stories at once."""
    return spec.level == "system" or bool(spec.corpus_wide and spec.corpus_wide(options))


@dataclass
class BlockTask:
    """The metrics to run on one block of stories (the unit of work of every engine)."""

    start: int
    end: int
    names: list[str]


def block_tasks(
    n_stories: int,
    specs: Mapping[str, MetricSpec],
    resolved: Mapping[str, Mapping[str, Any]],
    block_size: int,
) -> list[BlockTask]:
    """The blocks of a run: with one block, every metric on it (one shared encoder pass); with
    several, the per-story metrics on each block and the corpus-wide ones on all stories."""
    plan = block_plan(n_stories, block_size)
    if len(plan) == 1:
        return [BlockTask(0, n_stories, list(specs))]
    wide = [name for name, spec in specs.items() if corpus_wide(spec, resolved[name])]
    local = [name for name in specs if name not in wide]
    tasks = [BlockTask(start, end, local) for start, end in plan] if local else []
    return tasks + ([BlockTask(0, n_stories, wide)] if wide else [])


def run_block(
    stories: Sequence[Story],
    offset: int,
    names: Sequence[str],
    resolved: Mapping[str, Mapping[str, Any]],
    eligible: Mapping[str, Sequence[int]],
    context: ScoringContext,
) -> tuple[dict[str, MetricOutput], dict[str, float]]:
    """Run ``names`` on a block of stories (``stories[i]`` is story ``offset + i`` of the
    run; ``eligible`` holds run indices): each text encoded once, then every metric."""
    specs = {name: get_metric(name) for name in names}
    batches = {}
    for name in names:
        mine = [i - offset for i in eligible[name] if offset <= i < offset + len(stories)]
        batches[name] = MetricBatch([stories[i] for i in mine], context, list(stories))
    with windowed_texts() as encoded:
        timings = {"encoder": _encode_once(specs, batches, resolved, context)}
    outputs = {}
    for name, spec in specs.items():
        started = time.perf_counter()
        with windowed_texts() as windowed:
            outputs[name] = _compute(spec, batches[name], resolved[name])
        timings[name] = time.perf_counter() - started
        count = len(windowed) + (len(encoded) if spec.plan is not None else 0)
        if count:
            outputs[name].notes.append(
                f"{count} text(s) longer than the model's input were read in overlapping "
                "windows (never truncated)"
            )
    return outputs, timings


def merge_outputs(parts: Sequence[MetricOutput]) -> MetricOutput:
    """One metric's outputs of consecutive blocks as one output (values and statistics in
    block order; models, fields and omitted options from the first block that scored)."""
    scored = [p for p in parts if len(p.values)] or list(parts[:1])
    values = np.concatenate([np.asarray(p.values, dtype=np.float64) for p in parts])
    stats = None
    if any(p.stats is not None for p in parts):
        stats = np.vstack(
            [
                np.asarray(p.stats, dtype=np.float64)
                for p in parts
                if p.stats is not None and len(p.values)
            ]
        )
    notes = list(dict.fromkeys(note for p in parts for note in p.notes))
    first = scored[0]
    return MetricOutput(values, stats, dict(first.models), dict(first.fields), notes, first.omit)


def lacking_inputs(
    specs: Mapping[str, MetricSpec],
    stories: Sequence[Story],
    resolved: Mapping[str, Mapping[str, Any]],
    offset: int = 0,
) -> dict[str, list[tuple[int, str]]]:
    """Per metric, ``(index + offset, reason)`` of the stories lacking an input it needs."""
    result: dict[str, list[tuple[int, str]]] = {}
    for name, spec in specs.items():
        result[name] = [
            (offset + index, reason)
            for index, story in enumerate(stories)
            if (reason := _lacks(spec, story, resolved[name]))
        ]
    return result


def eligibility(
    specs: Mapping[str, MetricSpec],
    resolved: Mapping[str, Mapping[str, Any]],
    lacking: Mapping[str, Sequence[tuple[int, str]]],
    n_stories: int,
    policy: MissingPolicy,
    locate: Any,
    where: str,
) -> tuple[dict[str, list[int]], dict[str, tuple[int, str]]]:
    """Per metric, the indices of the stories that have its inputs, and how many lack them;
    a missing input is an error naming the file and line (``locate(index)`` gives the
    story's id and line), unless skipped."""
    eligible: dict[str, list[int]] = {}
    missing_count: dict[str, tuple[int, str]] = {}
    for name, spec in specs.items():
        found = sorted(lacking[name])
        needs = _needs_text(spec, resolved[name])
        if found and policy == "error":
            index, reason = found[0]
            story_id, line = locate(index)
            raise MissingInputError(
                f"metric {name} needs {needs}: {where}:{line}: story "
                f"{story_id!r} {reason} ({len(found)} of {n_stories} "
                "stories lack it); skip and count them with --skip-missing, or leave the metric out"
            )
        out = {index for index, _ in found}
        eligible[name] = [index for index in range(n_stories) if index not in out]
        missing_count[name] = (len(found), needs if found else "")
    return eligible, missing_count


def _encode_once(
    specs: Mapping[str, MetricSpec],
    batches: Mapping[str, MetricBatch],
    resolved: Mapping[str, Mapping[str, Any]],
    context: ScoringContext,
) -> float:
    """Every embedding metric announces what it will read; each encoder encodes each text
    once. Returns the seconds spent."""
    started = time.perf_counter()
    for name, spec in specs.items():
        if spec.plan is None or not batches[name].stories:
            continue
        for encoder_name, texts, layers in spec.plan(batches[name], resolved[name]):
            context.cache(encoder_name).request(texts, layers)
    for cache in context.caches:
        cache.run()
    return time.perf_counter() - started


def _compute(spec: MetricSpec, batch: MetricBatch, options: Mapping[str, Any]) -> MetricOutput:
    """Run one metric on its batch, checking it returned one value per story."""
    if not batch.stories:
        return MetricOutput(np.zeros(0))
    output = spec.compute(batch, options)
    values = np.asarray(output.values, dtype=np.float64)
    if values.shape != (len(batch.stories),):
        raise RuntimeError(
            f"metric {spec.name} returned {values.shape} values for {len(batch.stories)} stories"
        )
    output.values = values
    return output


def _score_records(
    name: str, stories: Sequence[Story], output: MetricOutput, signature: str
) -> list[Score]:
    return [
        Score(
            story.id,
            name,
            float(value),
            signature,
            {"system": story.system, "prompt_id": prompt_id(story)},
        )
        for story, value in zip(stories, output.values, strict=True)
    ]


def _needs_text(spec: MetricSpec, options: Mapping[str, Any]) -> str:
    needs = []
    if spec.needs_reference:
        needs.append("a reference")
    if spec.needs_prompt:
        needs.append("a prompt")
    needs += [f"the field {options.get(key)!r}" for key in spec.field_options]
    return " and ".join(needs) or "nothing"


# --------------------------------------------------------------------------- aggregation


def aggregate(
    specs: Mapping[str, MetricSpec],
    batches: Mapping[str, MetricBatch],
    outputs: Mapping[str, MetricOutput],
    runs: Mapping[str, MetricRun],
    options: Mapping[str, Mapping[str, Any]],
    *,
    bootstrap: int,
    confidence: float,
    seed: int,
    details: dict[tuple[str, str, str], Any] | None = None,
) -> Any:
    """Per-system aggregates of a run (see :data:`SYSTEM_COLUMNS`).

    For each system and metric: the mean of the defined item values (statistic ``mean``, or
    the metric's ``item_statistic`` such as ``mean_item_perplexity``) with its sd and a
    percentile bootstrap interval over items, and each corpus statistic of the metric
    computed from summed sufficient statistics, with an interval from the same resamples.
    Corpus-level metrics (MAUVE) give each system's value against the reference system
    instead; their further results go into ``details`` when given.
    """
    import pandas as pd

    rows: list[dict[str, Any]] = []
    settings = _Bootstrap(bootstrap, confidence, seed)
    for name, spec in specs.items():
        batch, output, run = batches[name], outputs[name], runs[name]
        systems = [s.system or NO_SYSTEM for s in batch.stories]
        missing_by_system = _missing_by_system(batch, run)
        if spec.level == "corpus":
            rows += _against_reference(
                spec, batch, output, run, options[name], missing_by_system, details
            )
            continue
        for system in sorted(set(systems) | set(missing_by_system)):
            index = np.array([i for i, s in enumerate(systems) if s == system], dtype=np.int64)
            common = {
                "system": system,
                "metric": name,
                "n_missing": missing_by_system.get(system, 0),
                "higher_is_better": spec.higher_is_better,
            }
            item, sample_index = _item_row(spec, run, output, index, common, settings)
            rows.append(item)
            if output.stats is not None and len(index):
                stats = np.asarray(output.stats, dtype=np.float64)[index]
                common["n_undefined"] = item["n_undefined"]
                rows += _corpus_rows(
                    spec, run, stats, options[name], sample_index, common, settings
                )
    return pd.DataFrame(rows, columns=list(SYSTEM_COLUMNS))


@dataclass(frozen=True)
class _Bootstrap:
    """The bootstrap of the per-system intervals."""

    resamples: int
    confidence: float
    seed: int

    def method(self, low: float) -> str:
        """The method column of an interval (``none`` when there is none)."""
        if not self.resamples or math.isnan(low):
            return "none"
        return f"percentile bootstrap, {self.resamples} resamples, seed {self.seed}"


def _item_row(
    spec: MetricSpec,
    run: MetricRun,
    output: MetricOutput,
    index: np.ndarray,
    common: Mapping[str, Any],
    boot: _Bootstrap,
) -> tuple[dict[str, Any], np.ndarray | None]:
    """One system's mean of the defined item values with its sd and bootstrap interval, and
    the resamples' indices (shared with the corpus statistics)."""
    from storyeval.stats import bootstrap_indices, percentile_interval

    values = output.values[index] if len(index) else np.zeros(0)
    defined = np.isfinite(values)
    n = int(defined.sum())
    low = high = math.nan
    sample_index = None
    if boot.resamples and len(index) > 1:
        sample_index = bootstrap_indices(len(index), boot.resamples, boot.seed)
        if n > 1:
            resampled = values[sample_index]
            with np.errstate(invalid="ignore"):
                finite = np.isfinite(resampled)
                sums = np.where(finite, resampled, 0).sum(axis=1)
                counts = finite.sum(axis=1)
                means = np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)
            label = f"{common['metric']}, {common['system']}"
            low, high = percentile_interval(means, confidence=boot.confidence, label=label)
    signature = run.signature.with_fields(
        statistic=spec.item_statistic, n=n, bootstrap=boot.resamples, seed=boot.seed
    )
    row = {
        **common,
        "n_undefined": int(len(values) - n),
        "statistic": spec.item_statistic,
        "estimate": float(values[defined].mean()) if n else math.nan,
        "ci_low": low,
        "ci_high": high,
        "sd": float(values[defined].std(ddof=1)) if n > 1 else math.nan,
        "n": n,
        "method": boot.method(low),
        "signature": signature.render(),
    }
    return row, sample_index


def _corpus_rows(
    spec: MetricSpec,
    run: MetricRun,
    stats: np.ndarray,
    options: Mapping[str, Any],
    sample_index: np.ndarray | None,
    common: Mapping[str, Any],
    boot: _Bootstrap,
) -> list[dict[str, Any]]:
    """One system's corpus statistics (from its summed sufficient statistics), each with an
    interval from the item resamples."""
    from storyeval.stats import percentile_interval

    rows = []
    for corpus in spec.corpus:
        value = float(corpus.compute(stats, options))
        low = high = math.nan
        if sample_index is not None:
            samples = np.array([corpus.compute(stats[row], options) for row in sample_index])
            low, high = percentile_interval(
                samples, confidence=boot.confidence, label=f"{corpus.name}, {common['system']}"
            )
        signature = run.signature.with_fields(
            statistic=corpus.name, n=len(stats), bootstrap=boot.resamples, seed=boot.seed
        )
        rows.append(
            {
                **common,
                "statistic": corpus.name,
                "estimate": value,
                "ci_low": low,
                "ci_high": high,
                "sd": math.nan,
                "n": len(stats),
                "method": boot.method(low),
                "signature": signature.render(),
            }
        )
    return rows


def _missing_by_system(batch: MetricBatch, run: MetricRun) -> dict[str, int]:
    """Per system, the stories skipped for lacking an input of the metric."""
    counts: dict[str, int] = {}
    if run.n_missing:
        eligible_ids = {s.id for s in batch.stories}
        for story in batch.all_stories:
            if story.id not in eligible_ids:
                key = story.system or NO_SYSTEM
                counts[key] = counts.get(key, 0) + 1
    return counts


def _against_reference(
    spec: MetricSpec,
    batch: MetricBatch,
    output: MetricOutput,
    run: MetricRun,
    options: Mapping[str, Any],
    missing_by_system: Mapping[str, int],
    details: dict[tuple[str, str, str], Any] | None,
) -> list[dict[str, Any]]:
    """The rows of a corpus-level metric: each system against the reference system."""
    from storyeval.errors import StoryevalError

    reference = str(options["reference_system"])
    systems = [s.system or NO_SYSTEM for s in batch.stories]
    if not batch.stories:
        return []
    if output.stats is None:
        raise RuntimeError(f"metric {spec.name} is corpus-level but returned no statistics")
    stats = np.asarray(output.stats, dtype=np.float64)
    # each system's stories in id order: the value must not depend on the order of the file
    # (k-means initialisation does) nor on how an engine partitioned it
    by_id = sorted(range(len(systems)), key=lambda i: batch.stories[i].id)
    ref_index = [i for i in by_id if systems[i] == reference]
    if not ref_index:
        present = ", ".join(sorted(set(systems)))
        raise StoryevalError(
            f"metric {spec.name} compares each system with the reference system {reference!r}, "
            f"but no story has that system; set {spec.name}.reference_system to one of {present}"
        )
    others = sorted(set(systems) - {reference})
    if not others:
        raise StoryevalError(
            f"metric {spec.name} compares other systems with the reference system "
            f"{reference!r}, but every story is the reference's"
        )
    rows = []
    for system in others:
        index = [i for i in by_id if systems[i] == system]
        for statistic in spec.system_statistics:
            value = statistic.compute(
                stats[index],
                stats[ref_index],
                [batch.stories[i] for i in index],
                [batch.stories[i] for i in ref_index],
                options,
            )
            run.notes.extend(f"{system}: {note}" for note in value.notes)
            if details is not None:
                details[(spec.name, statistic.name, system)] = value.details
            signature = run.signature.with_fields(
                statistic=statistic.name, reference=reference, n=value.n, **dict(value.fields)
            )
            rows.append(
                {
                    "system": system,
                    "metric": spec.name,
                    "statistic": statistic.name,
                    "estimate": value.estimate,
                    "ci_low": value.ci_low,
                    "ci_high": value.ci_high,
                    "sd": value.sd,
                    "n": value.n,
                    "n_undefined": 0,
                    "n_missing": missing_by_system.get(system, 0),
                    "method": value.method,
                    "higher_is_better": spec.higher_is_better,
                    "signature": signature.render(),
                }
            )
    return rows


def story_lines(path: str | Path) -> dict[str, int]:
    """Map each story id of a JSONL/CSV file to the line it starts on (for error messages)."""
    from storyeval.corpus import iter_raw_records

    lines: dict[str, int] = {}
    for number, record in iter_raw_records(path, required=("id", "story")):
        if isinstance(record, dict) and record.get("id") is not None:
            lines.setdefault(str(record["id"]), number)
    return lines
