"""Fixtures for the study-server tests: SQLite files and a private PostgreSQL server.

The PostgreSQL fixture starts a throwaway cluster (initdb + pg_ctl on a free loopback port, as
the ``postgres`` user when the tests run as root) once per session and stops it at the end. If
PostgreSQL is not installed the tests that need it FAIL with the reason: they are never
skipped silently.
"""

from __future__ import annotations

import itertools
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from storyeval.human.study import Study, load_study
from storyeval.server.pgtemp import free_port

_counter = itertools.count(1)


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[object]:
    from storyeval.server.pgtemp import PostgresUnavailable, TemporaryPostgres

    try:
        server = TemporaryPostgres(fsync=False).start()
    except PostgresUnavailable as exc:
        pytest.fail(
            f"PostgreSQL is required for these tests and could not start: {exc}", pytrace=False
        )
    yield server
    server.stop()


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh, empty database of each backend."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'study.sqlite3'}"
    server = request.getfixturevalue("postgres_server")
    return server.create_database(f"t{next(_counter)}")  # type: ignore[attr-defined]


@pytest.fixture
def study_dir(tmp_path: Path, examples_dir: Path) -> Path:
    """A folder with a copy of the example corpus, for study files written by tests."""
    target = tmp_path / "study"
    target.mkdir()
    shutil.copy(examples_dir / "stories.jsonl", target / "stories.jsonl")
    return target


def write_study(folder: Path, text: str, name: str = "study.yaml") -> Study:
    path = folder / name
    path.write_text(text, encoding="utf-8")
    return load_study(path)


LIKERT = """
name: {name}
title: Test study
protocol: likert
stories: stories.jsonl
select:
  systems: [human, smollm2-p0.9]
  per_system: {per_system}
  seed: 1
criteria:
  - name: coherence
    question: How well do the sentences fit together?
    scale: 5
    labels: {{1: lowest, 5: highest}}
  - name: relevance
    question: How relevant is the story to the prompt?
    scale: 5
    labels: {{1: lowest, 5: highest}}
assignment:
  items_per_participant: {per_participant}
  raters_per_item: {raters}
  order: balanced
"""


@pytest.fixture
def make_likert(study_dir: Path):  # type: ignore[no-untyped-def]
    def make(
        name: str = "likert-test", *, per_system: int = 4, per_participant: int = 3, raters: int = 2
    ) -> Study:
        text = LIKERT.format(
            name=name, per_system=per_system, per_participant=per_participant, raters=raters
        )
        return write_study(study_dir, text, f"{name}.yaml")

    return make


LIVE_ADMIN = "live-admin-token-0123456789"


class LiveServer:
    """``storyeval serve`` in a subprocess, with ``links`` participant links created at start."""

    def __init__(self, study_path: Path, db_url: str, tmp_path: Path, *, links: int) -> None:
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.admin = LIVE_ADMIN
        self.links_file = tmp_path / f"links-{self.port}.txt"
        self.log = open(tmp_path / f"server-{self.port}.log", "w")  # noqa: SIM115
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "storyeval",
                "serve",
                str(study_path),
                "--db",
                db_url,
                "--port",
                str(self.port),
                "--admin-token",
                LIVE_ADMIN,
                "--links",
                str(links),
                "--links-file",
                str(self.links_file),
                "--base-url",
                self.base,
            ],
            stdout=self.log,
            stderr=subprocess.STDOUT,
            env={**os.environ, "OMP_NUM_THREADS": "1"},
        )
        import httpx

        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError((tmp_path / f"server-{self.port}.log").read_text())
            try:
                if httpx.get(f"{self.base}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.1)
        else:
            raise RuntimeError("the server did not start")
        self.links = self.links_file.read_text().split()

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=10)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.kill()
        self.log.close()


@pytest.fixture
def live_server(tmp_path: Path):  # type: ignore[no-untyped-def]
    """Start ``storyeval serve`` (a real uvicorn process); stopped at the end of the test."""
    started: list[LiveServer] = []

    def start(study_path: Path, db_url: str, *, links: int) -> LiveServer:
        server = LiveServer(study_path, db_url, tmp_path, links=links)
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()
