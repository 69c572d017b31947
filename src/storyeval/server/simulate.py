"""Simulated participants: complete a study over HTTP, as a browser without JavaScript would.

Used by the tests (in-process and against a real server) and by the load benchmark. A
simulated participant follows the server's redirects, answers each page with a policy, and
records every page the server *acknowledged* (a 303 redirect after a POST means the answers
were committed), so a test can check that nothing acknowledged was lost.
:class:`ServerProcess` runs the real server (``storyeval serve``) for them.
"""

from __future__ import annotations

import contextlib
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
    """What one simulated participant did: judgments acknowledged, errors, latencies."""

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

    def start(self, link: str) -> Outcome:
        """A new outcome for the participant link ``link``; :meth:`plan` fills it."""
        self._outcome = Outcome("")
        return self._outcome

    def plan(self, path: str, response: Any) -> tuple[str, str, dict[str, str] | None] | None:
        """The browser's next request ``(method, path, form)`` on page ``path``, or ``None``
        when the study is over (the outcome says how)."""
        outcome = self._outcome
        if not outcome.token and path.startswith("/study/"):
            outcome.token = path.split("/")[2]
        token = outcome.token
        outcome.pages += 1
        refused = response.status_code == 422 and _ITEM.match(path) is not None
        if response.status_code != 200 and not refused:  # a refused answer is answered again
            raise RuntimeError(f"{path}: HTTP {response.status_code}: {response.text[:300]}")
        if path.endswith("/welcome"):
            return "POST", f"/study/{token}/start", {"consent": "yes"}
        if path.endswith("/full"):
            outcome.full = True
            return None
        if path.endswith("/done"):
            match = re.search(r'id="completion-code">([^<]+)<', response.text)
            outcome.completion_code = match.group(1) if match else None
            return None
        if path.endswith("/feedback"):
            return "GET", f"/study/{token}/", None
        if _TRAINING.match(path):
            answers = self.answer("training", self.keys, self.rng)
            return "POST", path, {k: str(v) for k, v in answers.items()}
        if path.endswith("/explain"):
            return "POST", path, {"explanation": "It reads like that to me."}
        if _ITEM.match(path) is not None:
            kind = "check" if "To show that you are reading" in response.text else "item"
            self._answers = self.answer(kind, self.keys, self.rng)
            return "POST", path, {k: str(v) for k, v in self._answers.items()}
        if path.endswith("/more"):
            return "POST", f"/study/{token}/more", {"action": "continue" if self.more else "finish"}
        if path.endswith("/questions"):
            return "POST", path, {q.name: "No comment." for q in self.study.config.questions}
        raise RuntimeError(f"unexpected page {path}")

    def note_submission(self, path: str, posted: Any, latency: float) -> None:
        """Record an item page the server acknowledged (a 303 after the POST)."""
        match = _ITEM.match(path)
        if match is None:
            return
        if posted.status_code == 303:
            ack = Acknowledged(int(match.group(1)), self._answers, latency)
            self._outcome.acknowledged.append(ack)
            if self.on_acknowledged is not None:
                self.on_acknowledged(ack)
        elif posted.status_code != 422:
            raise RuntimeError(f"{path}: HTTP {posted.status_code} on submit")

    def run(self, link: str, *, max_pages: int = 500) -> Outcome:
        """Complete the study from a participant link (``/p/<token>`` or a full URL) with a
        synchronous client."""
        outcome = self.start(link)
        response = self.client.get(urlsplit(link).path, follow_redirects=True)
        for _ in range(max_pages):
            path = urlsplit(str(response.url)).path
            step = self.plan(path, response)
            if step is None:
                return outcome
            method, target, data = step
            if method == "GET":
                response = self.client.get(target, follow_redirects=True)
                continue
            if _ITEM.match(target) and self.think_time_s:
                time.sleep(self.think_time_s)
            started = time.perf_counter()
            posted = self.client.post(target, data=data or {}, follow_redirects=False)
            self.note_submission(target, posted, time.perf_counter() - started)
            response = self._follow(posted)
        raise RuntimeError(f"the study did not end within {max_pages} pages")

    def _follow(self, response: Any) -> Any:
        if response.status_code in (301, 302, 303, 307, 308):
            return self.client.get(
                urlsplit(response.headers["location"]).path, follow_redirects=True
            )
        return response


@dataclass
class PlainResponse:
    """The parts of an HTTP response :class:`StudyBrowser` reads (httpx-compatible names)."""

    status_code: int
    headers: dict[str, str]
    text: str
    url: str


class KeepAliveClient:
    """A minimal HTTP/1.1 client on one persistent socket, for load tests: several times
    cheaper per request than httpx or ``http.client`` (no header objects), so the load
    generator leaves the CPU to the server it measures. Follows redirects like a browser and
    keeps cookies; ``Content-Length`` bodies only (what the study server sends)."""

    def __init__(self, base_url: str, *, timeout: float = 30.0) -> None:
        parts = urlsplit(base_url)
        self.base = base_url.rstrip("/")
        self.host = parts.hostname or "127.0.0.1"
        self.port = parts.port or 80
        self.timeout = timeout
        self._socket: Any = None
        self._buffer = b""
        self._cookies: dict[str, str] = {}

    def _connect(self) -> Any:
        import socket

        if self._socket is None:
            self._socket = socket.create_connection((self.host, self.port), timeout=self.timeout)
            self._socket.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._buffer = b""
        return self._socket

    def _read_until(self, marker: bytes) -> bytes:
        while marker not in self._buffer:
            chunk = self._socket.recv(65536)
            if not chunk:
                raise ConnectionError("the server closed the connection")
            self._buffer += chunk
        head, _, self._buffer = self._buffer.partition(marker)
        return head

    def _read_exactly(self, size: int) -> bytes:
        while len(self._buffer) < size:
            chunk = self._socket.recv(65536)
            if not chunk:
                raise ConnectionError("the server closed the connection")
            self._buffer += chunk
        body, self._buffer = self._buffer[:size], self._buffer[size:]
        return body

    def _request(
        self,
        method: str,
        path: str,
        body: str | None,
        *,
        content_type: str = "application/x-www-form-urlencoded",
        headers: Mapping[str, str] | None = None,
    ) -> PlainResponse:
        lines = [f"{method} {path} HTTP/1.1", f"Host: {self.host}:{self.port}"]
        if self._cookies:
            lines.append("Cookie: " + "; ".join(f"{k}={v}" for k, v in self._cookies.items()))
        lines += [f"{name}: {value}" for name, value in (headers or {}).items()]
        payload = (body or "").encode("utf-8")
        if body is not None:
            lines += [f"Content-Type: {content_type}", f"Content-Length: {len(payload)}"]
        request = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + payload
        for attempt in (1, 2):
            try:
                self._connect().sendall(request)
                head = self._read_until(b"\r\n\r\n").decode("latin-1").split("\r\n")
                break
            except (ConnectionError, OSError):
                self.close()
                if attempt == 2 or method == "POST":
                    raise
        status = int(head[0].split(" ", 2)[1])
        received: dict[str, str] = {}
        for line in head[1:]:
            name, _, value = line.partition(":")
            key, value = name.strip().lower(), value.strip()
            if key == "set-cookie":
                cookie, _, rest = value.partition("=")
                self._cookies[cookie.strip()] = rest.split(";", 1)[0]
            received[key] = value
        text = self._read_exactly(int(received.get("content-length", "0"))).decode("utf-8")
        if received.get("connection", "").lower() == "close":
            self.close()
        return PlainResponse(status, received, text, self.base + path)

    def get(self, path: str, *, follow_redirects: bool = False) -> PlainResponse:
        """GET ``path`` on the open connection; returns status, headers and body."""
        response = self._request("GET", path, None)
        for _ in range(20):
            if not follow_redirects or response.status_code not in (301, 302, 303, 307, 308):
                return response
            response = self._request("GET", urlsplit(response.headers["location"]).path, None)
        raise RuntimeError(f"too many redirects from {path}")

    def post(
        self, path: str, *, data: Mapping[str, str], follow_redirects: bool = False
    ) -> PlainResponse:
        """POST a form to ``path`` on the open connection; returns status, headers and body."""
        from urllib.parse import urlencode

        response = self._request("POST", path, urlencode(dict(data)))
        if follow_redirects and response.status_code in (301, 302, 303):
            return self.get(urlsplit(response.headers["location"]).path, follow_redirects=True)
        return response

    def post_json(
        self, path: str, data: Any, *, headers: Mapping[str, str] | None = None
    ) -> PlainResponse:
        """POST ``data`` as JSON (what JavaScript front ends send)."""
        import json

        return self._request(
            "POST", path, json.dumps(data), content_type="application/json", headers=headers
        )

    def close(self) -> None:
        """Close the connection."""
        if self._socket is not None:
            self._socket.close()
            self._socket = None

    def __enter__(self) -> KeepAliveClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


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
        workers: int = 1,
        extra: tuple[str, ...] = (),
    ) -> None:
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
                "--workers",
                str(workers),
                *extra,
            ],
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env={**os.environ, "OMP_NUM_THREADS": "1"},
            start_new_session=True,  # its own process group: kill() reaches every worker
        )
        if not self._wait_until_healthy(timeout, log):
            self.stop()
            raise RuntimeError(f"the server did not start within {timeout:g} s: {log}")
        self.links = links_file.read_text().split()

    def _wait_until_healthy(self, timeout: float, log: Path) -> bool:
        """Poll ``/healthz`` until it answers 200 (True) or ``timeout`` passes (False). One
        client for every poll: a client per poll loads the CA bundle each time, a busy loop
        that took the CPU from the server it waited for."""
        import httpx

        deadline = time.monotonic() + timeout
        with httpx.Client(base_url=self.base, timeout=1) as client:
            while time.monotonic() < deadline:
                if self.process.poll() is not None:
                    self._log.close()
                    raise RuntimeError(log.read_text())
                try:
                    if client.get("/healthz").status_code == 200:
                        return True
                except httpx.HTTPError:
                    pass
                time.sleep(0.05)
        return False

    def _signal(self, number: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, number)

    def kill(self) -> None:
        """SIGKILL to the server and every worker process, as a crash would."""
        self._signal(signal.SIGKILL)
        self.process.wait(timeout=10)

    def stop(self) -> None:
        """Terminate (SIGKILL after 10 s) and close the log."""
        if self.process.poll() is None:
            self._signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.kill()
        self._signal(signal.SIGKILL)  # workers left behind, if any
        self._log.close()
