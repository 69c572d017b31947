"""Generating suggestions off the request path.

The study server never calls a model inside a request: when a writer submits a turn, the
handler stores the suggestion requests and hands them to a :class:`GenerationWorker`, whose
threads run the models and write each result back through a callback. The writer's browser
polls a waiting page; other writers' pages are served meanwhile (torch releases the GIL while
it computes, and model calls hold only :data:`storyeval.generate.GENERATION_LOCK`).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from storyeval.collab.config import CyoaConfig, GeneratorSpec, MilConfig, resolve_path
from storyeval.collab.session import SuggestionRequest, SuggestionResult

log = logging.getLogger("storyeval.collab")

Engine = Callable[[SuggestionRequest], SuggestionResult]
ResultCallback = Callable[[str, SuggestionRequest, SuggestionResult], None]


class SuggestionEngine:
    """Turns the generators of a session file into suggestions.

    Each generator continues the context with its model and decoding settings, keeps whole
    sentences within its character cap, and generates again when the text is empty, has no
    complete sentence, or (optionally) contains an offensive word. When every attempt stopped
    before a sentence ended (``max_new_tokens`` too small), the last unfinished text is offered
    rather than nothing (``complete`` False in the log). The result carries the signature of the
    model and every setting, and the seed.
    """

    def __init__(self, config: CyoaConfig | MilConfig, *, config_path: str | Path | None = None):
        self.config = config
        self.specs: dict[str, GeneratorSpec] = {g.name: g for g in config.generators}
        self._filters: dict[str, Any] = {}
        for spec in config.generators:
            if spec.offensive_words is not None:
                from storyeval.generate import WordListFilter

                base = config_path if config_path is not None else Path.cwd() / "x"
                self._filters[spec.name] = WordListFilter.from_file(
                    resolve_path(base, spec.offensive_words)
                )
            elif spec.offensive_filter:
                from storyeval.generate import WordListFilter

                self._filters[spec.name] = WordListFilter.default()

    def warm_up(self) -> dict[str, str]:
        """Load every generator's model now (the first suggestion is then fast); returns the
        model identities."""
        from storyeval.models import load_causal_lm

        return {name: load_causal_lm(spec.model).identity for name, spec in self.specs.items()}

    def __call__(self, request: SuggestionRequest) -> SuggestionResult:
        from storyeval.generate import continue_text

        spec = self.specs[request.generator]
        started = time.time()
        try:
            result = continue_text(
                request.context,
                model=spec.model,
                decoding=spec.decoding.config(),
                seed=request.seed,
                max_chars=self.config.suggestion_cap(spec),
                max_sentences=spec.max_sentences,
                word_filter=self._filters.get(spec.name),
                max_attempts=spec.max_attempts,
                name="suggest",
                accept_unfinished=True,
            )
        except Exception as exc:  # reported to the writer as a failed suggestion
            log.warning("generator %s failed on %s: %s", spec.name, request.request_id, exc)
            return SuggestionResult(
                text=None,
                signature="",
                seed=request.seed,
                started_at=started,
                finished_at=time.time(),
                error=str(exc).splitlines()[0] if str(exc) else type(exc).__name__,
            )
        return SuggestionResult(
            text=result.text,
            signature=result.signature,
            seed=request.seed,
            started_at=started,
            finished_at=time.time(),
            attempts=result.attempts,
            dropped=result.dropped,
            complete=result.complete,
        )


class GenerationWorker:
    """Daemon threads that run suggestion requests from a queue and report each result.

    Parameters
    ----------
    engine : callable
        ``engine(request) -> SuggestionResult`` (e.g. a :class:`SuggestionEngine`).
    on_result : callable
        ``on_result(key, request, result)``, called from a worker thread; ``key`` is what the
        caller passed to :meth:`submit` (e.g. the participant id).
    workers : int
        Threads. Model calls are serialised by the generation lock, so more than one thread
        helps only when results are slow to store or generators are slow to load.

    Notes
    -----
    The threads are daemons: stopping the server abandons a generation in progress. The
    session state still says the suggestion is pending, so the server queues it again when
    it starts (:meth:`WritingSession.pending_requests`).
    """

    def __init__(self, engine: Engine, on_result: ResultCallback, *, workers: int = 1) -> None:
        if workers < 1:
            raise ValueError(f"workers must be >= 1; got {workers}")
        self._engine = engine
        self._on_result = on_result
        self._queue: queue.Queue[tuple[str, SuggestionRequest] | None] = queue.Queue()
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._in_flight: set[tuple[str, str]] = set()
        self._closed = False
        self.completed = 0
        self.failed = 0
        self._threads = [
            threading.Thread(target=self._loop, name=f"storyeval-gen-{i}", daemon=True)
            for i in range(workers)
        ]
        for thread in self._threads:
            thread.start()

    @property
    def in_flight(self) -> int:
        """Requests queued or running."""
        with self._lock:
            return len(self._in_flight)

    def submit(self, key: str, request: SuggestionRequest) -> bool:
        """Queue ``request``; returns False if the same request is already queued or running."""
        marker = (key, request.request_id)
        with self._lock:
            if self._closed:
                raise RuntimeError("the generation worker is closed")
            if marker in self._in_flight:
                return False
            self._in_flight.add(marker)
        self._queue.put((key, request))
        return True

    def _loop(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            key, request = item
            try:
                self._run(key, request)
            finally:
                with self._lock:
                    self._in_flight.discard((key, request.request_id))
                    self._idle.notify_all()

    def _run(self, key: str, request: SuggestionRequest) -> None:
        try:
            result = self._engine(request)
        except Exception as exc:  # an engine that raises still produces a (failed) result
            now = time.time()
            result = SuggestionResult(None, "", request.seed, now, now, error=str(exc) or repr(exc))
        try:
            self._on_result(key, request, result)
        except Exception:
            log.exception("could not store the suggestion %s for %s", request.request_id, key)
            return
        with self._lock:
            self.completed += 1
            if result.text is None:
                self.failed += 1

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Block until nothing is queued or running; returns False on timeout."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._lock:
            while self._in_flight:
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return False
                self._idle.wait(remaining)
        return True

    def close(self, *, wait: bool = True, timeout: float | None = None) -> None:
        """Stop accepting requests; with ``wait``, let the queued ones finish first."""
        with self._lock:
            self._closed = True
        if wait:
            self.wait_idle(timeout)
        for _ in self._threads:
            self._queue.put(None)
