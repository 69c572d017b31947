"""Suggestions are generated under supervision: a call that hangs is reported to the writer as a
failed suggestion when the timeout passes (the writer can ask again), a worker thread that dies
is restarted with its request reported failed, and one writer's slow call does not delay the
others' suggestions. The generator is the real engine, slowed down, hung or killed on chosen
requests, on a two-layer model of SmolLM2's architecture (what is tested is the supervision,
not the text: the default model's eight generations took 20 s of a 2-core machine)."""

from __future__ import annotations

import dataclasses
import threading
import time
from typing import Any

import pytest
from fastapi.testclient import TestClient

from storyeval.collab.config import parse_writing_config
from storyeval.collab.session import SuggestionRequest, SuggestionResult, WritingSession
from storyeval.collab.worker import GenerationWorker, SuggestionEngine
from storyeval.server.app import create_app
from storyeval.server.settings import Settings
from storyeval.server.writing_session import WritingSessionPlugin

from .test_writing_app import ADMIN, new_writer, step, wait_ready, write_config

pytestmark = pytest.mark.slow


class Unreliable:
    """The real engine, except for chosen contexts: ``sleep`` seconds before answering (or
    fail at once when the test sets ``done``: its slow calls then neither keep it waiting nor
    generate while later tests run), ``hang`` (block until released), or ``die`` (raise
    SystemExit in the worker thread)."""

    def __init__(self, engine: Any, *, sleep: dict[str, float] | None = None) -> None:
        self.engine = engine
        self.sleep = sleep or {}
        self.release = threading.Event()
        self.done = threading.Event()

    def warm_up(self) -> dict[str, str]:
        models: dict[str, str] = self.engine.warm_up()
        return models

    def __call__(self, request: SuggestionRequest) -> SuggestionResult:
        for word, seconds in self.sleep.items():
            if word in request.context and self.done.wait(seconds):
                raise RuntimeError("the test is over")
        if "hang" in request.context:
            self.release.wait(60)
        if "die" in request.context:
            raise SystemExit("the generator took the thread down")
        result: SuggestionResult = self.engine(request)
        return result


@pytest.fixture
def config(tiny_models: dict[str, Any]) -> Any:
    return parse_writing_config(
        {
            "kind": "cyoa",
            "name": "t",
            "title": "T",
            "rounds": 1,
            "generators": [
                {
                    "name": name,
                    "model": str(tiny_models["lm"]),
                    "max_attempts": 3,
                    "decoding": {"max_new_tokens": 30},
                }
                for name in ("a", "b")
            ],
        }
    )


def _requests(config: Any, text: str) -> list[SuggestionRequest]:
    session = WritingSession.start(config, participant=text[:8], now=0.0)
    return session.submit_text(text, now=1.0)


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_a_hung_call_times_out_and_a_dead_worker_is_restarted(config):
    flaky = Unreliable(SuggestionEngine(config))
    results: dict[str, SuggestionResult] = {}
    arrived: dict[str, float] = {}
    lock = threading.Lock()

    def store(key: str, request: SuggestionRequest, result: SuggestionResult) -> None:
        with lock:
            results[key + request.request_id] = result
            arrived[key + request.request_id] = time.monotonic()

    # per_key=2: both of a writer's calls at once (this test is about supervision, not shares)
    worker = GenerationWorker(flaky, store, workers=2, per_key=2, timeout_s=3.0, check_every_s=0.1)
    hung = _requests(config, "The keeper's lamp would hang in the dark for hours.")
    died = _requests(config, "The sailor said the engine would die before dawn.")
    fine = _requests(config, "The lighthouse stood on the rocks above the bay.")
    started = time.monotonic()
    for key, requests in (("hung", hung), ("died", died), ("fine", fine)):
        for request in requests:
            assert worker.submit(key, request)
    assert worker.wait_idle(timeout=90)
    flaky.release.set()  # let the abandoned threads finish
    for request in hung:
        result = results["hung" + request.request_id]
        assert result.text is None and "within 3 s" in (result.error or "")
        assert arrived["hung" + request.request_id] - started < 10, "heard soon, not never"
    for request in died:
        result = results["died" + request.request_id]
        assert result.text is None and "stopped unexpectedly" in (result.error or "")
    for request in fine:
        assert results["fine" + request.request_id].text, "the other requests were generated"
    assert worker.timed_out == 2 and worker.restarted >= 4
    assert worker.alive == 2, "the pool is back to full strength"
    worker.close()


def test_one_writers_slow_call_does_not_delay_anothers_suggestions(tmp_path, tiny_models):
    """Writer A's generator takes 30 s per call; writer B's suggestions come while A's calls
    are still running (with one queue, B would wait for both of A's: 60 s). The bound is A's
    delay, not a fixed time, so a loaded machine generating B's slowly still passes (with the
    default model B's two generations took 12.6 s beside the other half of the test suite)."""
    config = write_config(tmp_path, rounds=1, generation={"workers": 4}, model=tiny_models["lm"])
    plugin = WritingSessionPlugin.from_file(config)
    slowed = Unreliable(plugin.engine, sleep={"storm": 30.0})
    plugin.engine = slowed
    app = create_app(
        Settings(database_url=f"sqlite:///{tmp_path / 'w.sqlite3'}", admin_token=ADMIN), [plugin]
    )
    client = TestClient(app)
    a, b = new_writer(app, plugin), new_writer(app, plugin)
    page_a = client.post(f"/cyoa/{a}/start", data={"consent": "yes"})
    page_b = client.post(f"/cyoa/{b}/start", data={"consent": "yes"})
    client.post(
        f"/cyoa/{a}/write", data={"step": step(page_a), "text": "The storm broke over the bay."}
    )
    time.sleep(0.2)  # A's two calls are running
    started = time.monotonic()
    client.post(
        f"/cyoa/{b}/write", data={"step": step(page_b), "text": "A gull landed on the rail."}
    )
    page = wait_ready(client, f"/cyoa/{b}", timeout=60)
    waited = time.monotonic() - started
    assert page.url.path.endswith("/choose") and waited < 30.0, waited
    assert plugin.worker is not None and plugin.worker.in_flight >= 1, "A is still generating"
    slowed.done.set()
    assert plugin.worker.wait_idle(timeout=60)


def test_a_slow_writer_holds_at_most_their_share_of_the_workers(config):
    """Two workers; writer A's two calls take 120 s each and arrive first; then four writers
    ask for two suggestions each. A's calls run one at a time (a share of one worker), the
    other writers are served in turn on the other worker, all before A's first call ends.
    (With one queue both workers took A's calls, and everyone waited 120 s.) The slow calls
    are long so that a busy machine, whose eight generations took over 30 s with the default
    model, still tells the two apart."""
    slow = Unreliable(SuggestionEngine(config), sleep={"glacier": 120.0})
    arrived: dict[str, float] = {}
    lock = threading.Lock()

    def store(key: str, request: SuggestionRequest, result: SuggestionResult) -> None:
        if result.text is None:  # only A's calls, cut short when the test is over
            assert key == "A" and slow.done.is_set(), result.error
            return
        with lock:
            arrived[f"{key}/{request.request_id}"] = time.monotonic()

    worker = GenerationWorker(slow, store, workers=2, timeout_s=300.0, check_every_s=0.1)
    assert worker.per_key == 1
    started = time.monotonic()
    for request in _requests(config, "The glacier moved an inch a year, and the village waited."):
        worker.submit("A", request)
    time.sleep(0.2)
    others = {
        f"W{i}": _requests(config, f"Writer {i} saw a gull over the harbour.") for i in range(4)
    }
    for key, requests in others.items():
        for request in requests:
            worker.submit(key, request)
    deadline = time.monotonic() + 115
    while time.monotonic() < deadline and sum(k[0] == "W" for k in arrived) < 8:
        time.sleep(0.05)
    waited = max(arrived[k] for k in arrived if k.startswith("W")) - started
    assert sum(k.startswith("W") for k in arrived) == 8
    assert waited < 120.0, f"the other writers waited {waited:.1f} s"
    assert not any(k.startswith("A/") for k in arrived), "A's first call is still running"
    slow.done.set()
    worker.close(wait=False)


def test_a_writer_whose_suggestion_timed_out_can_ask_again(tmp_path, tiny_models):
    # a short timeout for the hung calls (one writer's two run one after the other), then a
    # long one for the retry
    config = write_config(
        tmp_path, rounds=1, generation={"timeout_s": 2, "workers": 2}, model=tiny_models["lm"]
    )
    plugin = WritingSessionPlugin.from_file(config)
    flaky = Unreliable(plugin.engine)
    plugin.engine = flaky
    app = create_app(
        Settings(database_url=f"sqlite:///{tmp_path / 'w.sqlite3'}", admin_token=ADMIN), [plugin]
    )
    client = TestClient(app)
    writer = new_writer(app, plugin)
    page = client.post(f"/cyoa/{writer}/start", data={"consent": "yes"})
    page = client.post(
        f"/cyoa/{writer}/write",
        data={"step": step(page), "text": "The lamp would hang there until dawn."},
    )
    page = wait_ready(client, f"/cyoa/{writer}", timeout=60)
    assert page.url.path.endswith("/failed"), page.url.path
    flaky.release.set()  # the generator answers again
    assert plugin.worker is not None and plugin.worker.wait_idle(timeout=30)
    plugin.worker.timeout_s = 120.0
    time.sleep(2)  # the abandoned calls finish (Python cannot stop a thread)
    page = client.post(f"/cyoa/{writer}/retry", data={"step": step(page)})
    page = wait_ready(client, f"/cyoa/{writer}", timeout=60)
    with app.state.storyeval.db.read() as conn:
        from storyeval.server import writing_store

        session = next(s for _, s in writing_store.sessions_of(conn, plugin.config))
    errors = [s.get("error") for t in session.turns for s in t.get("suggestions", [])]
    assert page.url.path.endswith("/choose"), errors
    assert plugin.worker is not None and plugin.worker.timed_out == 2


def test_with_one_worker_a_slow_writers_next_call_waits_for_the_others_turn(config):
    """The third attack: with ``generation.workers: 1`` a slow writer's two calls (each cut
    off by the timeout) ran back to back while another writer, who asked during the first,
    waited for both (21 s: two timeouts). Now the writers take turns: the other writer is
    served as soon as the first slow call ends, before the slow writer's second call."""
    order: list[str] = []
    release = threading.Event()

    def engine(request: SuggestionRequest) -> SuggestionResult:
        order.append(request.request_id)
        if request.request_id.startswith("slow"):
            release.wait(10)  # hangs: cut off by the timeout
        now = time.time()
        return SuggestionResult("A suggestion.", "", request.seed, now, now)

    delivered: dict[str, float] = {}
    worker = GenerationWorker(
        engine, lambda key, r, result: delivered.setdefault(r.request_id, time.monotonic()),
        workers=1, timeout_s=0.6, check_every_s=0.05,
    )  # fmt: skip
    template = _requests(config, "A slow writer's long context.")[0]
    started = time.monotonic()
    for name in ("slow-1", "slow-2"):
        worker.submit("slow", dataclasses.replace(template, request_id=name))
    time.sleep(0.1)  # the first slow call runs
    worker.submit("quick", dataclasses.replace(template, request_id="quick-1"))
    deadline = time.monotonic() + 10
    while "quick-1" not in delivered and time.monotonic() < deadline:
        time.sleep(0.02)
    assert order[:3] == ["slow-1", "quick-1", "slow-2"], order
    assert delivered["quick-1"] - started < 1.2  # one timeout, not two
    release.set()
    worker.close(wait=False)
