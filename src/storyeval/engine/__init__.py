"""Where the work runs, in one place: blocks of stories and the executors that run them, in
this process (``local``, :class:`storyeval.engine.blocks.LocalExecutor`) or on a Dask cluster
(``dask``, :class:`storyeval.engine.dask.DaskExecutor`), and the partitioned reading of story
files (:mod:`storyeval.engine.sources`).

The engine knows nothing of what runs: scoring, judging, generating and perturbing are each
written once over blocks of consecutive stories (``score_on``, ``judge_on``, ``generate_on``,
``perturb_on``) and take an executor. Stories are scored in blocks of ``block_size``
consecutive stories (:func:`storyeval.metrics.block_work.block_tasks`), each block in a fresh
scoring context, and the corpus-level statistics are computed once, from the per-story values
and sufficient statistics gathered after the map. So the Dask engine gives the local engine's
numbers, bit for bit, whatever the number of workers.

Dask is an optional extra (``pip install 'storyeval[dask]'``): it is the engine research
labs already run on SLURM/PBS (dask-jobqueue), Kubernetes (dask-kubernetes) or a plain
scheduler. Without an address, :func:`connect` starts a local cluster bound to 127.0.0.1 with
one single-threaded worker process per CPU.
"""

from __future__ import annotations

from storyeval.base.errors import StoryevalError, StoryevalWarning
from storyeval.base.validation import check_choice

ENGINES = ("local", "dask")


class EngineError(StoryevalError):
    """The engine cannot run the work (a missing extra, an unreachable scheduler)."""


class EngineWarning(StoryevalWarning):
    """The engine runs, but slower or differently than it could (how its workers started)."""


def require_dask() -> None:
    """Raise a clear error when the ``dask`` extra is not installed."""
    try:
        import dask  # noqa: F401
        import distributed  # noqa: F401
    except ImportError:
        raise EngineError(
            "--engine dask needs the dask extra: pip install 'storyeval[dask]' "
            "(dask and distributed)"
        ) from None


def check_engine(engine: str) -> str:
    """``engine`` if it is one of :data:`ENGINES` (and, for Dask, installed)."""
    check_choice(engine, ENGINES, "engine", error=EngineError)
    if engine == "dask":
        require_dask()
    return engine
