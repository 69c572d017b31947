"""Scoring, generating, perturbing and judging on a Dask cluster.

The driver (the process running ``storyeval ... --engine dask``) never holds the stories'
texts: workers read the file's partitions (:mod:`storyeval.engine.sources`), check them,
score blocks of stories and send back per-story values and sufficient statistics; the
driver checks the whole file (duplicate ids, bad lines, with the file's line numbers),
merges the blocks in order and computes the corpus-level statistics exactly as the local
engine does (:func:`storyeval.metrics.pipeline.finish_run`).

Every worker process loads each model once (storyeval's per-process model cache) and serves
every block and metric with it. A block that fails is retried (``retries``) without touching
the finished ones; with ``work_dir`` every finished block is written there at once
(atomically), and a re-run of the same command skips the blocks already written.

Examples
--------
Start a local cluster on 127.0.0.1 (one single-threaded worker per CPU), or join one::

    from storyeval.engine.dask import connect, score_source
    client = connect()                        # or connect("tcp://scheduler:8786")
    run = score_source("stories.jsonl", "bleu,bertscore_f", client=client)
"""

from __future__ import annotations

import hashlib
import json
import pickle
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from storyeval.corpus import Story
from storyeval.engine import EngineError, require_dask
from storyeval.engine.sources import (
    Partition,
    PartitionSpec,
    check_partitions,
    plan_partitions,
    read_partition,
)
from storyeval.metrics.pipeline import MissingPolicy

#: Seconds to wait for a scheduler before giving up.
CONNECT_TIMEOUT = 30


# --------------------------------------------------------------------------- the cluster


def connect(
    scheduler: str | None = None,
    *,
    workers: int | None = None,
    threads_per_worker: int = 1,
    memory_limit: str | None = None,
    gpus: int = 0,
) -> Any:
    """A Dask client: joined to ``scheduler`` (``tcp://host:8786``), or to a new local cluster
    on 127.0.0.1 with ``workers`` worker processes (default: one per usable CPU), each with
    ``threads_per_worker`` threads, no dashboard. With ``gpus``, the local cluster has one
    worker per GPU (``workers`` of them, default every GPU there is), each seeing only its own
    card (``CUDA_VISIBLE_DEVICES``) and offering the resource ``GPU: 1``.

    Raises
    ------
    EngineError
        Without the dask extra, or when the scheduler cannot be reached.
    """
    require_dask()
    import os

    from distributed import Client, LocalCluster

    from storyeval.models.devices import usable_cpus

    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # inherited by worker processes
    # Dask starts workers with OMP_NUM_THREADS=1, which puts MKL and oneDNN on their
    # single-thread code paths: their float32 results then differ from this process's in
    # the 8th digit. Workers of our own cluster start like this process; each task sets its
    # torch threads itself (num_cpus).
    import dask

    environ = dict(dask.config.get("distributed.nanny.pre-spawn-environ") or {})
    for key in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        environ.pop(key, None)
    # the statistical profiler samples every worker's stack every 10 ms (a few percent of a
    # model-bound task); storyeval's tasks are few and long, so it is off
    dask.config.set(
        {
            "distributed.nanny.pre-spawn-environ": environ,
            "distributed.worker.profile.enabled": False,
        }
    )
    if scheduler:
        try:
            return Client(scheduler, timeout=CONNECT_TIMEOUT)
        except OSError as exc:
            raise EngineError(f"cannot reach the Dask scheduler {scheduler}: {exc}") from None
    if gpus:
        return Client(gpu_cluster(workers, threads_per_worker, environ))
    cluster = LocalCluster(
        n_workers=workers or usable_cpus(),
        threads_per_worker=threads_per_worker,
        processes=True,
        host="127.0.0.1",
        dashboard_address=None,
        memory_limit=memory_limit or "auto",
    )
    return Client(cluster)


def gpu_cluster(workers: int | None, threads: int, environ: dict[str, str]) -> Any:
    """A local cluster of one worker per GPU (what dask-cuda's ``LocalCUDACluster`` does):
    worker ``i`` sees only GPU ``i`` and offers the resource ``GPU: 1``, so a task asking for
    one GPU runs alone on its card."""
    from distributed import Nanny, Scheduler, SpecCluster

    if workers is None:
        import torch

        workers = torch.cuda.device_count()
    if workers < 1:
        raise EngineError("--num-gpus needs a GPU: none is visible here (or give --workers N)")
    spec = {
        f"gpu-{index}": {
            "cls": Nanny,
            "options": {
                "nthreads": threads,
                "resources": {"GPU": 1},
                "env": {**environ, "CUDA_VISIBLE_DEVICES": str(index)},
                "host": "127.0.0.1",
            },
        }
        for index in range(workers)
    }
    scheduler = {"cls": Scheduler, "options": {"host": "127.0.0.1", "dashboard_address": None}}
    return SpecCluster(workers=spec, scheduler=scheduler)


def close(client: Any) -> None:
    """Close a client and, if it started one, its local cluster."""
    cluster = getattr(client, "cluster", None)
    client.close()
    if cluster is not None:
        cluster.close()


# --------------------------------------------------------------------------- worker side


@dataclass
class PartitionSummary:
    """What the driver learns of a partition without its texts."""

    n_lines: int
    ids: list[str]
    lines: list[int]
    problems: list[tuple[int, str]]
    systems: list[str | None]
    prompt_ids: list[str]
    presence: Any


def summarize(partition: Partition) -> PartitionSummary:
    """A partition's ids, lines, problems, systems, prompt ids and field presence."""
    from storyeval.metrics.pipeline import corpus_presence, prompt_id

    stories = partition.stories
    return PartitionSummary(
        partition.n_lines,
        [s.id for s in stories],
        partition.lines,
        partition.problems,
        [s.system for s in stories],
        [prompt_id(s) for s in stories],
        corpus_presence(stories),
    )


def block_stories(pieces: Sequence[tuple[Partition, int, int]]) -> list[Story]:
    """The stories of one block: slices of consecutive partitions."""
    result: list[Story] = []
    for partition, start, end in pieces:
        result += partition.stories[start:end]
    return result


def partition_lacking(
    partition: Partition, offset: int, names: Sequence[str], resolved: Mapping[str, Any]
) -> dict[str, list[tuple[int, str]]]:
    """The stories of a partition (run indices) lacking an input of each metric."""
    from storyeval.metrics.pipeline import lacking_inputs
    from storyeval.metrics.registry import get_metric

    specs = {name: get_metric(name) for name in names}
    return lacking_inputs(specs, partition.stories, resolved, offset)


def score_block(
    stories: list[Story],
    offset: int,
    names: Sequence[str],
    resolved: Mapping[str, Mapping[str, Any]],
    eligible: Mapping[str, Sequence[int]],
    device: str,
    precision: str,
    threads: int | None,
    saved: str | None,
) -> tuple[dict[str, Any], dict[str, float]]:
    """Score one block on a worker (models loaded once per worker process); with ``saved``,
    reuse the block written by an earlier run, else write it there once computed."""
    from storyeval.io import write_bytes_atomic
    from storyeval.metrics.context import ScoringContext
    from storyeval.metrics.pipeline import run_block
    from storyeval.models.devices import configure_threads

    if saved is not None and Path(saved).is_file():
        with open(saved, "rb") as handle:
            outputs, timings = pickle.load(handle)
        return outputs, {**timings, "blocks_reused": 1.0}
    configure_threads(threads or 1)
    context = ScoringContext(device=device, precision=precision)
    computed = run_block(stories, offset, names, resolved, eligible, context)
    if saved is not None:
        write_bytes_atomic(saved, pickle.dumps(computed))
    return computed


# --------------------------------------------------------------------------- the driver


@dataclass
class Source:
    """A story file read by the cluster: its partitions (futures on the workers) and what the
    driver knows of them."""

    url: str
    partitions: list[Any]
    summaries: list[PartitionSummary]

    @property
    def n_stories(self) -> int:
        """How many stories the file holds, over all partitions."""
        return sum(len(s.ids) for s in self.summaries)

    def offsets(self) -> list[int]:
        """Each partition's first story index in the run."""
        result, total = [], 0
        for summary in self.summaries:
            result.append(total)
            total += len(summary.ids)
        return result

    def locate(self, index: int) -> tuple[str, int]:
        """A story's id and line in the file."""
        line_offset = 0
        for summary in self.summaries:
            if index < len(summary.ids):
                return summary.ids[index], line_offset + summary.lines[index]
            index -= len(summary.ids)
            line_offset += summary.n_lines
        raise IndexError(index)

    def stubs(self) -> list[Story]:
        """Every story without its texts (id, system, prompt id), in run order."""
        return [
            Story(story_id, "", "", None, system, {"prompt_id": pid})
            for s in self.summaries
            for story_id, system, pid in zip(s.ids, s.systems, s.prompt_ids, strict=True)
        ]

    def index_pieces(self, indices: Sequence[int]) -> list[tuple[Any, list[int]]]:
        """The (partition future, positions) pieces of the run indices ``indices``, in order."""
        offsets = self.offsets()
        pieces: list[tuple[Any, list[int]]] = []
        for index in indices:
            k = max(i for i, start in enumerate(offsets) if start <= index)
            if pieces and pieces[-1][0] is self.partitions[k]:
                pieces[-1][1].append(index - offsets[k])
            else:
                pieces.append((self.partitions[k], [index - offsets[k]]))
        return pieces

    def pieces(self, start: int, end: int) -> list[tuple[Any, int, int]]:
        """The (partition future, slice) pieces of run indices ``start..end``."""
        pieces = []
        for future, offset, summary in zip(
            self.partitions, self.offsets(), self.summaries, strict=True
        ):
            lo, hi = max(start, offset), min(end, offset + len(summary.ids))
            if lo < hi:
                pieces.append((future, lo - offset, hi - offset))
        return pieces


def read_source(
    client: Any, url: str | Path, *, blocksize: int = 64 * 2**20, kind: str = "stories"
) -> Source:
    """Read a story file on the cluster and check it whole.

    Raises
    ------
    DataFileError
        For bad lines or duplicate ids, with the file's line numbers.
    """
    specs: list[PartitionSpec] = plan_partitions(str(url), blocksize=blocksize, kind=kind)
    futures = [client.submit(read_partition, spec, retries=2, pure=False) for spec in specs]
    summaries = client.gather([client.submit(summarize, f, retries=2) for f in futures])
    check_partitions(str(url), [(s.n_lines, s.ids, s.lines, s.problems) for s in summaries])
    return Source(str(url), futures, summaries)


def _work_key(url: str, names: Sequence[str], resolved: Any, settings: Mapping[str, Any]) -> str:
    """A hash of everything a block's result depends on, so a re-run reuses only its own."""
    import fsspec

    from storyeval import __version__

    fs, path = fsspec.core.url_to_fs(url)
    info = fs.info(path)
    identity = {
        "url": url,
        "size": info.get("size"),
        "mtime": str(info.get("mtime") or info.get("LastModified") or ""),
        "names": list(names),
        "options": resolved,
        "settings": dict(settings),
        "version": __version__,
    }
    text = json.dumps(identity, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _progress(futures: list[Any], label: str, enabled: bool) -> None:
    """Wait for ``futures`` with a one-line progress bar on stderr."""
    from distributed import as_completed

    if not enabled:
        for _ in as_completed(futures):
            pass
        return
    from tqdm.auto import tqdm

    with tqdm(total=len(futures), desc=label, unit="block", file=sys.stderr) as bar:
        for _ in as_completed(futures):
            bar.update(1)


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
) -> Any:
    """Score a story file on a Dask cluster; the same arguments and the same result as
    :func:`storyeval.engine.local.score_file` (a :class:`~storyeval.metrics.pipeline.ScoreRun`
    whose scores and per-system table equal the local engine's).

    Parameters
    ----------
    source : str or Path
        A JSONL, CSV or Parquet file: a local path or any fsspec URL the workers can read.
    client : distributed.Client
        From :func:`connect`.
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
    from storyeval.metrics.pipeline import (
        block_tasks,
        default_suite,
        eligibility,
        finish_run,
        merge_outputs,
    )
    from storyeval.metrics.registry import (
        MetricBatch,
        get_metric,
        parse_metric_list,
        resolve_options,
    )
    from storyeval.models.devices import check_precision, compute_fields

    if bootstrap < 0 or not 0 < confidence < 1:
        raise ValueError("bootstrap must be >= 0 and confidence in (0, 1)")
    if missing not in (None, "error", "skip"):
        raise ValueError(f"missing must be one of error, skip; got {missing!r}")
    check_precision(precision, device)
    url = str(source)
    data = read_source(client, url, blocksize=read_blocksize)
    skipped: dict[str, str] = {}
    if metrics is None:
        presence = data.summaries[0].presence
        for summary in data.summaries[1:]:
            presence = presence.merge(summary.presence)
        names, skipped = default_suite(presence)
        policy: MissingPolicy = missing or "skip"
    else:
        names = parse_metric_list(metrics)
        policy = missing or "error"
    resolved = resolve_options(names, options)
    specs = {name: get_metric(name) for name in names}
    n = data.n_stories
    lacking_parts = client.gather(
        [
            client.submit(partition_lacking, f, offset, names, resolved, retries=2)
            for f, offset in zip(data.partitions, data.offsets(), strict=True)
        ]
    )
    lacking = {name: [item for part in lacking_parts for item in part[name]] for name in names}
    eligible, missing_count = eligibility(
        specs,
        resolved,
        lacking,
        n,
        policy,
        data.locate,
        url,
    )
    tasks = block_tasks(n, specs, resolved, block_size)
    folder = None
    if work_dir is not None:
        settings = {
            "block_size": block_size,
            "device": device,
            "precision": precision,
            "policy": policy,
        }
        folder = Path(work_dir) / _work_key(url, names, resolved, settings)
        folder.mkdir(parents=True, exist_ok=True)
    futures = []
    resources = {"GPU": num_gpus} if num_gpus else None
    for task in tasks:
        stories = client.submit(block_stories, data.pieces(task.start, task.end), retries=2)
        wanted = {
            name: [i for i in eligible[name] if task.start <= i < task.end] for name in task.names
        }
        saved = (
            None
            if folder is None
            else str(folder / f"block-{task.start}-{task.end}-{len(task.names)}.pkl")
        )
        futures.append(
            client.submit(
                score_block,
                stories,
                task.start,
                task.names,
                resolved,
                wanted,
                device,
                precision,
                num_cpus,
                saved,
                retries=2,
                resources=resources,
                pure=False,
            )
        )
    _progress(futures, "blocks", progress)
    results = client.gather(futures)
    parts: dict[str, list[Any]] = {name: [] for name in names}
    timings: dict[str, float] = {}
    for outputs, seconds in results:
        for name, output in outputs.items():
            parts[name].append(output)
        for key, value in seconds.items():
            timings[key] = timings.get(key, 0.0) + value
    merged = {name: merge_outputs(found) for name, found in parts.items()}
    stubs = data.stubs()
    batches = {
        name: MetricBatch([stubs[i] for i in eligible[name]], None, stubs)  # type: ignore[arg-type]
        for name in names
    }
    return finish_run(
        specs,
        resolved,
        batches,
        merged,
        missing_count,
        skipped,
        timings,
        None,
        bootstrap=bootstrap,
        confidence=confidence,
        seed=seed,
        compute=compute_fields(device, precision),
    )


# --------------------------------------------------------------------------- map over stories


def map_blocks(
    client: Any,
    source: str | Path,
    function: Callable[[list[Story], int], list[Any]],
    *,
    block_size: int,
    progress: bool = False,
    read_blocksize: int = 64 * 2**20,
    resources: Mapping[str, float] | None = None,
    data: Source | None = None,
    kind: str = "stories",
    args: Sequence[Any] = (),
) -> list[Any]:
    """``function(stories, block_index)`` on every block of ``block_size`` consecutive
    records of a story file, on the cluster; the results concatenated in file order (what
    generation and perturbation use)."""
    from storyeval.blocks import block_plan

    data = data or read_source(client, source, blocksize=read_blocksize, kind=kind)
    futures = []
    for k, (start, end) in enumerate(block_plan(data.n_stories, block_size)):
        stories = client.submit(block_stories, data.pieces(start, end), retries=2)
        futures.append(
            client.submit(
                function,
                stories,
                k,
                *args,
                retries=2,
                resources=dict(resources or {}) or None,
                pure=False,
            )
        )
    _progress(futures, "blocks", progress)
    result: list[Any] = []
    for part in client.gather(futures):
        result += part
    return result


# --------------------------------------------------------------------------- judging


def judge_block(
    stories: list[Story],
    rubric: Any,
    spec: Any,
    settings: Any,
    cache_path: str | None,
    threads: int | None,
) -> Any:
    """Judge one block on a worker (the judges built once per worker process)."""
    from storyeval.judge.cache import JudgeCache
    from storyeval.judge.core import judge_stories
    from storyeval.models.devices import configure_threads

    configure_threads(threads or 1)
    cache = JudgeCache(cache_path) if cache_path else None
    try:
        return judge_stories(
            stories, rubric, spec.build(), settings=settings, cache=cache, finish=False
        )
    finally:
        if cache is not None:
            cache.close()


def judge_source(
    source: str | Path,
    rubric: Any,
    spec: Any,
    *,
    client: Any,
    settings: Any = None,
    cache_path: str | Path | None = None,
    block_size: int = 500,
    num_cpus: int = 1,
    progress: bool = False,
) -> Any:
    """Judge a story file on a Dask cluster in the blocks of
    :func:`storyeval.judge.core.judge_blocks` (so the result equals the local engine's).

    ``spec`` is a :class:`storyeval.judge.backends.BackendSpec`; ``cache_path`` an answer
    cache every worker can reach (a shared file system), or None.
    """
    from storyeval.judge.core import JudgeSettings, judge_blocks_plan, merge_judge_runs

    settings = settings or JudgeSettings()
    settings.check()
    data = read_source(client, source)
    stubs = data.stubs()
    plan = judge_blocks_plan(stubs, settings.mode, block_size)
    futures = []
    for block in plan:
        stories = client.submit(gather_stories, data.index_pieces(block), retries=2)
        futures.append(
            client.submit(
                judge_block,
                stories,
                rubric,
                spec,
                settings,
                str(cache_path) if cache_path else None,
                num_cpus,
                retries=2,
                pure=False,
            )
        )
    _progress(futures, "blocks", progress)
    return merge_judge_runs(client.gather(futures))


def gather_stories(pieces: Sequence[tuple[Partition, list[int]]]) -> list[Story]:
    """The stories at the given positions of their partitions, in the order given."""
    return [partition.stories[i] for partition, positions in pieces for i in positions]


# --------------------------------------------------------------------------- generating


def generate_block(
    stories: list[Story], block: int, settings: dict[str, Any], threads: int | None
) -> list[Story]:
    """Generate the continuations of one block of prompts on a worker."""
    from storyeval.generate import generate_stories
    from storyeval.models.devices import configure_threads

    configure_threads(threads or 1)
    return generate_stories(stories, block=block, **{**settings, "progress": False})


def generate_source(
    source: str | Path,
    *,
    client: Any,
    block_size: int = 500,
    num_cpus: int = 1,
    progress: bool = False,
    **settings: Any,
) -> list[Story]:
    """Generate from a prompts file on a Dask cluster: each block of ``block_size`` prompts is
    generated with the seed of its block (:func:`storyeval.generate.block_seed`), as the
    local engine does, so both give the same stories. ``settings`` are the keyword arguments
    of :func:`storyeval.generate.generate_stories` (``model``, ``decoding``, ``seed``, ...)."""
    import functools

    function = functools.partial(
        _generate_by_index, settings={**settings, "block_size": block_size}, threads=num_cpus
    )
    return map_blocks(
        client, source, function, block_size=block_size, progress=progress, kind="prompts"
    )


def _generate_by_index(
    stories: list[Story], block: int, *, settings: dict[str, Any], threads: int
) -> list[Story]:
    return generate_block(stories, block, settings, threads)


# --------------------------------------------------------------------------- perturbing


def count_partition(partition: Partition, delexicalize: bool) -> Any:
    """The perturbation-corpus counts of one partition (parsed with spaCy on the worker)."""
    from storyeval.models import load_spacy
    from storyeval.perturb.corpus import count_corpus

    nlp = load_spacy()
    stories = partition.stories
    if delexicalize:
        from storyeval.perturb.delex import Delexicalizer

        delex = Delexicalizer(nlp=nlp)
        stories = [delex.story(story) for story in stories]
    return count_corpus(((s.id, s.story) for s in stories), nlp)


_CORPORA: dict[str, Any] = {}


def perturb_block(
    stories: list[Story], block: int, counts: Any, *, key: str, settings: dict[str, Any]
) -> Any:
    """Perturb one block on a worker with the corpus of the whole file (built once per worker
    from the partitions' counts)."""
    from storyeval.models import load_spacy
    from storyeval.perturb import perturb_stories
    from storyeval.perturb.corpus import PerturbationCorpus

    nlp = load_spacy()
    if key not in _CORPORA:
        _CORPORA.clear()
        _CORPORA[key] = PerturbationCorpus([], nlp=nlp, counts=counts)
    run = perturb_stories(stories, corpus=_CORPORA[key], nlp=nlp, **settings)
    return [run]


def perturb_source(
    source: str | Path,
    *,
    client: Any,
    block_size: int = 500,
    progress: bool = False,
    **settings: Any,
) -> Any:
    """Perturb a story file on a Dask cluster. Workers parse their partitions and count the
    corpus's keywords, sentences and negation style; the counts are summed into the corpus
    every technique draws from (as :class:`storyeval.perturb.corpus.PerturbationCorpus` does
    in one process), and each story's draws depend only on the seed and its id, so the
    result equals the local engine's. ``settings`` are those of
    :func:`storyeval.perturb.perturb_stories`."""
    import functools
    import uuid

    from storyeval.errors import StoryevalError
    from storyeval.perturb.engine import PerturbationRun

    data = read_source(client, source)
    counts = client.gather(
        [
            client.submit(count_partition, f, bool(settings.get("delexicalize")), retries=2)
            for f in data.partitions
        ]
    )
    shared = client.scatter([counts], broadcast=True)[0]  # the whole list, on every worker
    function = functools.partial(perturb_block, key=uuid.uuid4().hex, settings=settings)
    runs = map_blocks(
        client,
        source,
        function,
        block_size=block_size,
        progress=progress,
        data=data,
        args=(shared,),
    )
    ids = {story_id for summary in data.summaries for story_id in summary.ids}
    stories, skipped = [], {}
    for run in runs:
        for story in run.stories:
            if story.id in ids:
                raise StoryevalError(
                    f"the output id {story.id!r} is also a source story id; rename the source story"
                )
            ids.add(story.id)
        stories += run.stories
        skipped.update(run.skipped)
    if not runs:
        raise StoryevalError("there are no stories to perturb")
    return PerturbationRun(stories, skipped, runs[0].signature)
