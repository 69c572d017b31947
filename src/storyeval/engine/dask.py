"""The Dask executor: scoring, generating, perturbing and judging on a cluster.

:class:`DaskExecutor` is the cluster's :class:`~storyeval.engine.blocks.Executor`: each operation
(:func:`~storyeval.metrics.pipeline.score_on`, :func:`~storyeval.judge.core.judge_on`,
:func:`~storyeval.generate.core.generate_on`, :func:`~storyeval.perturb.engine.perturb_on`)
is written once and runs its blocks on the workers here, in this process on the local
engine. The driver (the process running ``storyeval ... --engine dask``) never holds the
stories' texts: workers read the file's partitions (:mod:`storyeval.engine.sources`), check
them, run the blocks and send back per-story results; the driver checks the whole file
(duplicate ids, bad lines, with the file's line numbers), merges the blocks in order and
computes the corpus-level statistics exactly as the local engine does.

Every worker process loads each model once (storyeval's per-process model cache) and serves
every block and metric with it. A block that fails is retried (``retries``) without touching
the finished ones; with ``work_dir`` every finished block is written there at once
(atomically), and a re-run of the same command skips the blocks already written.

Examples
--------
Start a local cluster on 127.0.0.1 (one single-threaded worker per CPU), or join one::

    from storyeval.engine.dask import connect
    from storyeval.metrics.files import score_source
    client = connect()                        # or connect("tcp://scheduler:8786")
    run = score_source("stories.jsonl", "bleu,bertscore_f", client=client)

Each operation reads its source with :func:`read_source` (``score_source`` in
:mod:`storyeval.metrics.files`, ``judge_source``, ``generate_source`` and ``perturb_source``
beside ``judge_on``, ``generate_on`` and ``perturb_on``).
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from storyeval.corpus import Story
from storyeval.engine import EngineError, EngineWarning, require_dask
from storyeval.engine.blocks import Block
from storyeval.engine.sources import (
    Partition,
    PartitionSpec,
    check_partitions,
    plan_partitions,
    read_partition,
)

#: Seconds to wait for a scheduler before giving up.
CONNECT_TIMEOUT = 30

#: glibc's mmap threshold for workers: the ceiling of its dynamic threshold on 64-bit
#: systems (32 MiB, ``DEFAULT_MMAP_THRESHOLD_MAX``).
MMAP_THRESHOLD = str(32 * 2**20)


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
    import dask

    environ = worker_environ()
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


def worker_environ() -> dict[str, Any]:
    """The environment Dask's nanny sets before it starts a worker process: Dask's own, less
    the thread caps, plus a fixed glibc mmap threshold.

    Dask starts workers with ``OMP_NUM_THREADS=1``, which puts MKL and oneDNN on their
    single-thread code paths: their float32 results then differ from this process's in the
    8th digit, so they are left out (each task sets its torch threads itself, ``num_cpus``).
    Dask also sets ``MALLOC_TRIM_THRESHOLD_`` so that workers give freed memory back; setting
    any malloc tunable switches off glibc's dynamic mmap threshold, and every tensor over
    128 KiB is then mapped and page-faulted afresh (a worker scored perplexity 1.33x slower
    than this process). :data:`MMAP_THRESHOLD` keeps such tensors on the heap, as the
    dynamic threshold would, unless the environment already sets one.
    """
    import os

    import dask

    environ = dict(dask.config.get("distributed.nanny.pre-spawn-environ") or {})
    for key in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        environ.pop(key, None)
    if "MALLOC_MMAP_THRESHOLD_" not in os.environ:
        environ.setdefault("MALLOC_MMAP_THRESHOLD_", MMAP_THRESHOLD)
    return environ


def maps_every_tensor() -> bool:
    """Whether this process's allocator maps every large block afresh: glibc started with a
    malloc tunable (``MALLOC_TRIM_THRESHOLD_``, as Dask's nanny sets it) but no fixed mmap
    threshold (see :func:`worker_environ`)."""
    import os
    import platform

    tuned = any(
        key in os.environ
        for key in ("MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_", "MALLOC_MMAP_MAX_")
    )
    return (
        platform.libc_ver()[0] == "glibc" and tuned and "MALLOC_MMAP_THRESHOLD_" not in os.environ
    )


def check_worker_allocators(client: Any) -> None:
    """Warn (:class:`~storyeval.engine.EngineWarning`) when workers of ``client`` were
    started so that every tensor allocation maps fresh memory (:func:`maps_every_tensor`):
    workers started by hand or by a cluster manager with Dask's defaults."""
    slow = sorted(address for address, flag in client.run(maps_every_tensor).items() if flag)
    if slow:
        warnings.warn(
            EngineWarning(
                f"{len(slow)} Dask worker(s) ({', '.join(slow[:3])}) run with a malloc "
                "tunable such as MALLOC_TRIM_THRESHOLD_ but no MALLOC_MMAP_THRESHOLD_: glibc maps "
                "every tensor afresh and model metrics run about 1.1-1.3x slower; start "
                f"workers with MALLOC_MMAP_THRESHOLD_={MMAP_THRESHOLD} in their environment"
            ),
            stacklevel=3,
        )


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


R = TypeVar("R")


# --------------------------------------------------------------------------- worker side


@dataclass
class PartitionSummary:
    """What the driver learns of a partition without its texts."""

    n_lines: int
    ids: list[str]
    lines: list[int]
    problems: list[tuple[int, str]]
    systems: list[str | None]
    prompt_ids: list[str | None]


def summarize(partition: Partition) -> PartitionSummary:
    """A partition's ids, lines, problems, systems and prompt ids."""
    from storyeval.corpus import prompt_id

    stories = partition.stories
    return PartitionSummary(
        partition.n_lines,
        [s.id for s in stories],
        partition.lines,
        partition.problems,
        [s.system for s in stories],
        [prompt_id(s) for s in stories],
    )


def block_stories(pieces: Sequence[tuple[Partition, int, int]]) -> list[Story]:
    """The stories of a block of consecutive stories: slices of consecutive partitions."""
    result: list[Story] = []
    for partition, start, end in pieces:
        result += partition.stories[start:end]
    return result


def gather_stories(pieces: Sequence[tuple[Partition, list[int]]]) -> list[Story]:
    """The stories at the given positions of their partitions, in the order given."""
    return [partition.stories[i] for partition, positions in pieces for i in positions]


def on_partition(partition: Partition, offset: int, function: Callable[..., R], *shared: Any) -> R:
    """``function(stories, offset, *shared)`` on a partition's stories."""
    return function(partition.stories, offset, *shared)


def configured(threads: int, function: Callable[..., R], *args: Any) -> R:
    """``function(*args)`` with ``threads`` torch threads on this worker."""
    from storyeval.models.devices import configure_threads

    configure_threads(threads)
    return function(*args)


# --------------------------------------------------------------------------- the driver


@dataclass
class DaskExecutor:
    """The :class:`~storyeval.engine.blocks.Executor` of a Dask cluster: a story file's partitions
    held by the workers (futures), what the driver knows of them, and the work's resources.

    Parameters
    ----------
    client : distributed.Client
        From :func:`connect`.
    url : str
        The file (for error messages).
    partitions : list of Future
        The file's partitions on the workers.
    summaries : list of PartitionSummary
        Their ids, lines, systems and prompt ids.
    progress : bool
        Show a progress bar over blocks.
    threads : int
        Torch threads per task.
    """

    client: Any
    url: str
    partitions: list[Any]
    summaries: list[PartitionSummary]
    progress: bool = False
    threads: int = 1

    @property
    def in_process(self) -> bool:
        """Functions run on the workers."""
        return False

    @property
    def where(self) -> str:
        """The file error messages name."""
        return self.url

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

    def map_parts(self, function: Callable[..., R], *shared: Any) -> list[R]:
        """``function(stories, offset, *shared)`` on each partition, on its worker."""
        futures = [
            self.client.submit(on_partition, part, offset, function, *shared, retries=2)
            for part, offset in zip(self.partitions, self.offsets(), strict=True)
        ]
        return list(self.client.gather(futures))

    def map_blocks(
        self,
        function: Callable[..., R],
        blocks: Sequence[Block],
        *shared: Any,
        items: Sequence[Any] | None = None,
        resources: Mapping[str, float] | None = None,
        label: str = "blocks",
    ) -> list[R]:
        """``function(stories, item, *shared)`` on each block, on the workers (the shared
        arguments sent to every worker once); the results in block order."""
        shared_futures = self.client.scatter(list(shared), broadcast=True) if shared else []
        futures = []
        for k, block in enumerate(blocks):
            stories = self.client.submit(*self._block_reader(block), retries=2)
            item = items[k] if items is not None else k
            futures.append(
                self.client.submit(
                    configured,
                    self.threads,
                    function,
                    stories,
                    item,
                    *shared_futures,
                    retries=2,
                    resources=dict(resources or {}) or None,
                    pure=False,
                )
            )
        _progress(futures, label, self.progress)
        return list(self.client.gather(futures))

    def _block_reader(self, block: Block) -> tuple[Any, ...]:
        """The task reading a block's stories from the partitions holding them."""
        if isinstance(block, range) and block.step == 1:
            return (block_stories, self.pieces(block.start, block.stop))
        return (gather_stories, self.index_pieces(block))

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
    client: Any,
    url: str | Path,
    *,
    blocksize: int = 64 * 2**20,
    kind: str = "stories",
    progress: bool = False,
    threads: int = 1,
) -> DaskExecutor:
    """Read a story file on the cluster and check it whole.

    Raises
    ------
    DataFileError
        For bad lines or duplicate ids, with the file's line numbers.
    """
    check_worker_allocators(client)
    specs: list[PartitionSpec] = plan_partitions(str(url), blocksize=blocksize, kind=kind)
    futures = [client.submit(read_partition, spec, retries=2, pure=False) for spec in specs]
    summaries = client.gather([client.submit(summarize, f, retries=2) for f in futures])
    check_partitions(str(url), [(s.n_lines, s.ids, s.lines, s.problems) for s in summaries])
    return DaskExecutor(client, str(url), futures, summaries, progress, threads)


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
