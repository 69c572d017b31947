"""Where the work runs: this process (``local``) or a Dask cluster (``dask``).

The two engines run the same code on the same units of work: stories are scored in blocks of
``block_size`` consecutive stories (:func:`storyeval.metrics.block_work.block_tasks`), each
block in a fresh scoring context, and the corpus-level statistics are computed once, from the
per-story values and sufficient statistics gathered after the map. So the Dask engine gives
the local engine's numbers, bit for bit, whatever the number of workers.

Dask is an optional extra (``pip install 'storyeval[dask]'``): it is the engine research
labs already run on SLURM/PBS (dask-jobqueue), Kubernetes (dask-kubernetes) or a plain
scheduler. Without an address, :func:`connect` starts a local cluster bound to 127.0.0.1 with
one single-threaded worker process per CPU.
"""

from __future__ import annotations

from storyeval.errors import StoryevalError, StoryevalWarning

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
    if engine not in ENGINES:
        raise EngineError(f"engine must be one of {', '.join(ENGINES)}; got {engine!r}")
    if engine == "dask":
        require_dask()
    return engine
