"""Simulated participants: complete a study over HTTP, as a browser without JavaScript would.

Used by the tests (in-process and against a real server) and by the load benchmark. A
simulated participant follows the server's redirects, answers each page with a policy, and
records every page the server *acknowledged* (a 303 redirect after a POST means the answers
were committed), so a test can check that nothing acknowledged was lost.
:class:`ServerProcess` runs the real server (``storyeval serve``) for them.
"""

from __future__ import annotations

import os
import random
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any
from urllib.parse import urlsplit

from storyeval.human.study import Study, answer_keys

Answerer = Callable[[str, Mapping[str, tuple[int, ...]], random.Random], dict[str, int]]
_ITEM = re.compile(r"^/study/[^/]+/item/(\d+)$")
_TRAINING = re.compile(r"^/study/[^/]+/training/(\d+)$")


def random_answers(
    _page: str, keys: Mapping[str, tuple[int, ...]], rng: random.Random
) -> dict[str, int]:
    """Answer every question at random."""
    return {key: rng.choice(values) for key, values in keys.items()}


@dataclass
class Acknowledged:
    """One page the server acknowledged: its slot id, the answers and the latency."""

    slot_id: int
    answers: dict[str, int]
    latency_s: float


@dataclass
class Outcome:
    token: str
    acknowledged: list[Acknowledged] = field(default_factory=list)
    completion_code: str | None = None
    full: bool = False
    pages: int = 0


class StudyBrowser:
    """Drive one participant through a study with an httpx-compatible client.

    Parameters
    ----------
    client
        ``httpx.Client`` (real server) or ``fastapi.testclient.TestClient`` (in process).
    study
        The study, for its answer keys and questions.
    answer
        A function ``(page_kind, keys, rng) -> answers``.
    think_time_s
        Seconds to wait on each item page before answering (real time, so the server's
        ``time_s`` can be checked).
    more
        Ask for more batches up to the study's cap (otherwise finish after the first).
    on_acknowledged
        Called as soon as the server acknowledges a page (before the next request).
    """

    def __init__(
        self,
        client: Any,
        study: Study,
        *,
        answer: Answerer = random_answers,
        seed: int = 0,
        think_time_s: float = 0.0,
        more: bool = False,
        on_acknowledged: Callable[[Acknowledged], None] | None = None,
    ) -> None:
        self.client = client
        self.study = study
        self.answer = answer
        self.rng = random.Random(seed)
        self.think_time_s = think_time_s
        self.more = more
        self.on_acknowledged = on_acknowledged
        self.keys = answer_keys(study.config)

    def _path(self, response: Any) -> str:
        return urlsplit(str(response.headers.get("location") or response.url)).path

    def _get(self, path: str) -> Any:
        return self.client.get(path, follow_redirects=True)

    def _post(self, path: str, data: Mapping[str, str]) -> Any:
        return self.client.post(path, data=dict(data), follow_redirects=False)

    def run(self, link: str, *, max_pages: int = 500) -> Outcome:
        """Complete the study from a participant link (``/p/<token>`` or a full URL)."""
        response = self._get(urlsplit(link).path)
        path = urlsplit(str(response.url)).path
        token = path.split("/")[2] if path.startswith("/study/") else ""
        outcome = Outcome(token)
        for _ in range(max_pages):
            outcome.pages += 1
            if response.status_code != 200:
                raise RuntimeError(f"{path}: HTTP {response.status_code}: {response.text[:300]}")
            if path.endswith("/welcome"):
                response = self._follow(self._post(f"/study/{token}/start", {"consent": "yes"}))
            elif path.endswith("/full"):
                outcome.full = True
                return outcome
            elif path.endswith("/done"):
                match = re.search(r'id="completion-code">([^<]+)<', response.text)
                outcome.completion_code = match.group(1) if match else None
                return outcome
            elif path.endswith("/feedback"):
                response = self._get(f"/study/{token}/")
            elif _TRAINING.match(path):
                answers = self.answer("training", self.keys, self.rng)
                response = self._follow(self._post(path, {k: str(v) for k, v in answers.items()}))
            elif path.endswith("/explain"):
                response = self._follow(
                    self._post(path, {"explanation": "It reads like that to me."})
                )
            elif (match := _ITEM.match(path)) is not None:
                if self.think_time_s:
                    time.sleep(self.think_time_s)
                kind = "check" if "To show that you are reading" in response.text else "item"
                answers = self.answer(kind, self.keys, self.rng)
                started = time.perf_counter()
                posted = self._post(path, {k: str(v) for k, v in answers.items()})
                latency = time.perf_counter() - started
                if posted.status_code == 303:
                    ack = Acknowledged(int(match.group(1)), answers, latency)
                    outcome.acknowledged.append(ack)
                    if self.on_acknowledged is not None:
                        self.on_acknowledged(ack)
                elif posted.status_code != 422:
                    raise RuntimeError(f"{path}: HTTP {posted.status_code} on submit")
                response = self._follow(posted)
            elif path.endswith("/more"):
                action = "continue" if self.more else "finish"
                response = self._follow(self._post(f"/study/{token}/more", {"action": action}))
            elif path.endswith("/questions"):
                data = {q.name: "No comment." for q in self.study.config.questions}
                response = self._follow(self._post(path, data))
            else:
                raise RuntimeError(f"unexpected page {path}")
            path = urlsplit(str(response.url)).path
        raise RuntimeError(f"the study did not end within {max_pages} pages")

    def _follow(self, response: Any) -> Any:
        if response.status_code in (301, 302, 303, 307, 308):
            return self._get(urlsplit(response.headers["location"]).path)
        return response


class ServerProcess:
    """``storyeval serve FILE`` in a subprocess on a free loopback port (uvicorn, one process),
    with ``links`` participant links created at start (``.links``); its output goes to
    ``log``. Waits until ``/healthz`` answers.

    Raises ``RuntimeError`` (with the server's log) when the server exits or does not answer
    within ``timeout`` seconds.
    """

    def __init__(
        self,
        session_file: Path,
        db_url: str,
        log: Path,
        *,
        links: int,
        admin_token: str,
        timeout: float = 60.0,
    ) -> None:
        import httpx

        from storyeval.server.pgtemp import free_port

        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.admin = admin_token
        self.log_path = log
        links_file = log.with_suffix(".links")
        self._log: IO[str] = open(log, "w")  # noqa: SIM115 (closed by stop)
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "storyeval",
                "serve",
                str(session_file),
                "--db",
                db_url,
                "--port",
                str(self.port),
                "--admin-token",
                admin_token,
                "--links",
                str(links),
                "--links-file",
                str(links_file),
                "--base-url",
                self.base,
            ],
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env={**os.environ, "OMP_NUM_THREADS": "1"},
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                self._log.close()
                raise RuntimeError(log.read_text())
            try:
                if httpx.get(f"{self.base}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.1)
        else:
            self.stop()
            raise RuntimeError(f"the server did not start within {timeout:g} s: {log}")
        self.links = links_file.read_text().split()

    def kill(self) -> None:
        """SIGKILL, as a crash would."""
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=10)

    def stop(self) -> None:
        """Terminate (SIGKILL after 10 s) and close the log."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.kill()
        self._log.close()
