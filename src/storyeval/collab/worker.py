"""Generating suggestions off the request path, supervised.

The study server never calls a model inside a request: when a writer submits a turn, the
handler stores the suggestion requests and hands them to a :class:`GenerationWorker`, whose
threads run the models and write each result back through a callback. The writer's browser
polls a waiting page; other writers' pages are served meanwhile.

Supervision: a call that runs longer than the timeout is reported to the writer as a failed
suggestion (they can ask again) and its thread is replaced, so a hung model never holds a
writer or the pool; a worker thread that dies is restarted and its request reported failed,
with the cause in the log. Calls run in parallel (each samples from its own seeded random
generator, see :func:`storyeval.generate.continue_text`).

Fairness: each writer (the ``key`` of :meth:`GenerationWorker.submit`) has a queue of their
own; a free thread serves the waiting writer served longest ago (writers take turns: one who
was just served waits behind every writer waiting, even one who arrived while their call
ran), and one writer's calls run on at most ``per_key`` threads at once, so a writer whose
calls are slow (a long context, a slow generator) holds at most that share of the pool while
other writers' suggestions go on; with one thread, a slow writer's next call waits for the
others' turns.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field
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


@dataclass
class _Call:
    """A request being generated: by which thread, since when."""

    key: str
    request: SuggestionRequest
    thread: threading.Thread
    started: float


@dataclass
class _Stats:
    completed: int = 0
    failed: int = 0
    timed_out: int = 0
    restarted: int = 0
    errors: list[str] = field(default_factory=list)


class GenerationWorker:
    """Supervised threads that run suggestion requests from a queue and report each result.

    Parameters
    ----------
    engine : callable
        ``engine(request) -> SuggestionResult`` (e.g. a :class:`SuggestionEngine`).
    on_result : callable
        ``on_result(key, request, result)``, called from a worker thread; ``key`` is what the
        caller passed to :meth:`submit` (e.g. the participant id).
    workers : int
        Threads generating at once.
    per_key : int or None
        The most calls of one key (writer) running at once; default half the threads, at
        least one. Waiting calls are taken key by key in turn.
    timeout_s : float
        A call running longer is reported as a failed suggestion and its thread replaced
        (Python cannot stop a running thread: it is abandoned, and its late result dropped).
    check_every_s : float
        How often the supervisor looks for late calls and dead threads.

    Notes
    -----
    The threads are daemons: stopping the server abandons a generation in progress. The
    session state still says the suggestion is pending, so the server queues it again when
    it starts (:meth:`WritingSession.pending_requests`).
    """

    def __init__(
        self,
        engine: Engine,
        on_result: ResultCallback,
        *,
        workers: int = 2,
        per_key: int | None = None,
        timeout_s: float = 300.0,
        check_every_s: float | None = None,
    ) -> None:
        if workers < 1:
            raise ValueError(f"workers must be >= 1; got {workers}")
        if per_key is not None and per_key < 1:
            raise ValueError(f"per_key must be >= 1; got {per_key}")
        if timeout_s <= 0:
            raise ValueError(f"timeout_s must be > 0; got {timeout_s}")
        self._engine = engine
        self._on_result = on_result
        self.workers = workers
        self.per_key = min(per_key, workers) if per_key is not None else max(1, workers // 2)
        self.timeout_s = timeout_s
        self._check_every = check_every_s or min(1.0, timeout_s / 4)
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._ready = threading.Condition(self._lock)
        self._waiting: dict[str, deque[SuggestionRequest]] = {}
        self._turns: deque[str] = deque()  # keys with waiting calls, in arrival order
        self._served: dict[str, int] = {}  # when each key was last served (a take counter)
        self._takes = 0
        self._running_per_key: Counter[str] = Counter()
        self._in_flight: set[tuple[str, str]] = set()
        self._running: dict[threading.Thread, _Call | None] = {}
        self._retired: set[threading.Thread] = set()
        self._closed = False
        self._stopping = False
        self._stats = _Stats()
        self._serial = 0
        with self._lock:
            for _ in range(workers):
                self._spawn()
        self._supervisor = threading.Thread(
            target=self._supervise, name="storyeval-gen-supervisor", daemon=True
        )
        self._supervisor.start()

    # ------------------------------------------------------------------ public

    @property
    def in_flight(self) -> int:
        """Requests queued or running."""
        with self._lock:
            return len(self._in_flight)

    @property
    def completed(self) -> int:
        """Generation jobs that finished with a text."""
        return self._stats.completed

    @property
    def failed(self) -> int:
        """Generation jobs that raised."""
        return self._stats.failed

    @property
    def timed_out(self) -> int:
        """Generation jobs that exceeded ``generation.timeout_s``."""
        return self._stats.timed_out

    @property
    def restarted(self) -> int:
        """Worker threads started to replace a dead or abandoned one."""
        return self._stats.restarted

    @property
    def alive(self) -> int:
        """Worker threads alive and taking requests."""
        with self._lock:
            return sum(1 for t in self._running if t.is_alive())

    def submit(self, key: str, request: SuggestionRequest) -> bool:
        """Queue ``request``; returns False if the same request is already queued or running."""
        marker = (key, request.request_id)
        with self._lock:
            if self._closed:
                raise RuntimeError("the generation worker is closed")
            if marker in self._in_flight:
                return False
            self._in_flight.add(marker)
            self._waiting.setdefault(key, deque()).append(request)
            if key not in self._turns:
                self._turns.append(key)
            self._ready.notify()
        return True

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Block until nothing is queued or running; returns False on timeout."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._lock:
            while self._in_flight:
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return False
                self._idle.wait(remaining if remaining is not None else 1.0)
        return True

    def close(self, *, wait: bool = True, timeout: float | None = None) -> None:
        """Stop accepting requests; with ``wait``, let the queued ones finish first."""
        with self._lock:
            self._closed = True
        if wait:
            self.wait_idle(timeout)
        with self._lock:
            self._stopping = True
            self._ready.notify_all()

    # ------------------------------------------------------------------ threads

    def _spawn(self) -> None:
        """Start one worker thread (the lock is held)."""
        self._serial += 1
        thread = threading.Thread(
            target=self._loop, name=f"storyeval-gen-{self._serial}", daemon=True
        )
        self._running[thread] = None
        thread.start()

    def _next_call(self) -> tuple[str, SuggestionRequest] | None:
        """The next call to run: of the writers below their share, the one served longest ago
        (never served first, then in arrival order); the lock is held; waits while there is
        none; ``None`` once the worker stops."""
        while not self._stopping:
            eligible = [k for k in self._turns if self._running_per_key[k] < self.per_key]
            if eligible:
                key = min(eligible, key=lambda k: self._served.get(k, -1))
                self._turns.remove(key)
                calls = self._waiting[key]
                request = calls.popleft()
                if calls:
                    self._turns.append(key)  # the writer's next call waits for its turn
                else:
                    del self._waiting[key]
                self._running_per_key[key] += 1
                self._takes += 1
                self._served[key] = self._takes
                return key, request
            self._ready.wait()
        return None

    def _call_ended(self, key: str) -> None:
        """A call of ``key`` no longer occupies a thread (the lock is held)."""
        self._running_per_key[key] -= 1
        if self._running_per_key[key] <= 0:
            del self._running_per_key[key]
        self._ready.notify()

    def _loop(self) -> None:
        me = threading.current_thread()
        while True:
            with self._lock:
                item = self._next_call()
                if item is None:
                    self._running.pop(me, None)
                    return
                key, request = item
                self._running[me] = _Call(key, request, me, time.monotonic())
            result = self._generate(request)
            with self._lock:
                if me in self._retired:  # timed out: the writer was told; this thread ends
                    self._retired.discard(me)
                    log.info("dropped the late result of %s (timed out)", request.request_id)
                    return
                self._running[me] = None
                self._call_ended(key)
            self._deliver(key, request, result)

    def _generate(self, request: SuggestionRequest) -> SuggestionResult:
        try:
            return self._engine(request)
        except Exception as exc:  # an engine that raises still produces a (failed) result
            now = time.time()
            log.warning("generation of %s failed: %s", request.request_id, exc)
            return SuggestionResult(None, "", request.seed, now, now, error=str(exc) or repr(exc))

    def _deliver(self, key: str, request: SuggestionRequest, result: SuggestionResult) -> None:
        try:
            self._on_result(key, request, result)
        except Exception:
            log.exception("could not store the suggestion %s for %s", request.request_id, key)
        with self._lock:
            self._stats.completed += 1
            if result.text is None:
                self._stats.failed += 1
            self._in_flight.discard((key, request.request_id))
            self._idle.notify_all()

    # ------------------------------------------------------------------ supervision

    def _supervise(self) -> None:
        while True:
            time.sleep(self._check_every)
            with self._lock:
                if self._closed and not self._in_flight:
                    return
                late, dead = self._late_and_dead(time.monotonic())
            for call in late:
                with self._lock:  # counted before the result is delivered: a caller woken by
                    self._stats.timed_out += 1  # wait_idle reads a final count
                self._fail(call, f"the generator did not answer within {self.timeout_s:g} s")
            for call in dead:
                self._fail(call, "the generation worker stopped unexpectedly")

    def _late_and_dead(self, now: float) -> tuple[list[_Call], list[_Call]]:
        """Calls past the timeout and calls whose thread died; their threads are replaced
        (the lock is held)."""
        late: list[_Call] = []
        dead: list[_Call] = []
        for thread, call in list(self._running.items()):
            if not thread.is_alive():
                self._running.pop(thread)
                log.error("generation worker %s died; starting another", thread.name)
                if call is not None:
                    dead.append(call)
                    self._call_ended(call.key)
                self._stats.restarted += 1
                if not self._closed:
                    self._spawn()
            elif call is not None and now - call.started > self.timeout_s:
                log.warning(
                    "generation of %s timed out after %.0f s; abandoning its thread",
                    call.request.request_id,
                    now - call.started,
                )
                self._running.pop(thread)
                self._retired.add(thread)
                late.append(call)
                self._call_ended(call.key)
                self._stats.restarted += 1
                if not self._closed:
                    self._spawn()
        return late, dead

    def _fail(self, call: _Call, reason: str) -> None:
        now = time.time()
        result = SuggestionResult(None, "", call.request.seed, now, now, error=reason)
        self._deliver(call.key, call.request, result)
