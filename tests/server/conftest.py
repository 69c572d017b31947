"""Fixtures for the study-server tests: SQLite files and a private PostgreSQL server.

The PostgreSQL fixture starts a throwaway cluster (initdb + pg_ctl on a free loopback port, as
the ``postgres`` user when the tests run as root) once per session and stops it at the end. If
PostgreSQL is not installed the tests that need it FAIL with the reason: they are never
skipped silently.
"""

from __future__ import annotations

import itertools
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from storyeval.human.study import Study, load_study
from storyeval.server.simulate import ServerProcess

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
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


def launch_chromium(playwright: Any) -> Any:
    """Debian's Chromium (``/usr/bin/chromium``), headless, through Playwright."""
    return playwright.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)


@pytest.fixture
def live_server(tmp_path: Path):  # type: ignore[no-untyped-def]
    """Start ``storyeval serve`` (a real uvicorn process); stopped at the end of the test."""
    started: list[ServerProcess] = []

    def start(study_path: Path, db_url: str, *, links: int, workers: int = 1) -> ServerProcess:
        log = tmp_path / f"server-{len(started)}.log"
        server = ServerProcess(
            study_path, db_url, log, links=links, admin_token=LIVE_ADMIN, workers=workers
        )
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()
