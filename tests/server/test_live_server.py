"""The real server: ``storyeval serve`` (uvicorn) in a subprocess, on SQLite and PostgreSQL,
with many simultaneous participants; and a SIGKILL in the middle of the load, after which every
acknowledged judgment must be in the database."""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from storyeval.server import study_store as store
from storyeval.server.db import Database
from storyeval.server.simulate import StudyBrowser

pytestmark = pytest.mark.slow


def study_file(
    folder: Path, name: str, *, per_system: int, per_participant: int, raters: int
) -> Path:
    path = folder / f"{name}.yaml"
    path.write_text(
        f"name: {name}\ntitle: Load\nprotocol: likert\nstories: stories.jsonl\n"
        f"select: {{systems: [human, smollm2-p0.9, smollm2-k40-t0.7], per_system: {per_system}}}\n"
        "criteria:\n  - {name: coherence, question: 'How coherent is it?', scale: 5, labels: {1: low, 5: high}}\n"
        "  - {name: relevance, question: 'How relevant is it?', scale: 5, labels: {1: low, 5: high}}\n"
        f"assignment: {{items_per_participant: {per_participant}, raters_per_item: {raters}, order: random}}\n",
        encoding="utf-8",
    )
    return path


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_many_simultaneous_participants_lose_nothing_and_exceed_no_quota(
    backend, study_dir, tmp_path, request, live_server
):
    from storyeval.human.study import load_study

    path = study_file(
        study_dir, f"load-{backend}", per_system=10, per_participant=3, raters=2
    )  # 60 slots
    study = load_study(path)
    if backend == "sqlite":
        url = f"sqlite:///{tmp_path / 'live.sqlite3'}"
    else:
        url = request.getfixturevalue("postgres_server").create_database(f"live_{os.getpid()}")
    server = live_server(path, url, links=30)  # 30 participants x 3 > 60 slots
    try:

        def participant(i: int):  # type: ignore[no-untyped-def]
            with httpx.Client(base_url=server.base, timeout=30) as client:
                return StudyBrowser(client, study, seed=i).run(server.links[i])

        with ThreadPoolExecutor(max_workers=15) as pool:
            outcomes = list(pool.map(participant, range(30)))
        acknowledged = {a.slot_id for o in outcomes for a in o.acknowledged}
        assert len(acknowledged) == 60, "every slot was answered exactly once"
        assert sum(o.full for o in outcomes) == 30 - sum(1 for o in outcomes if o.acknowledged)
        with httpx.Client(base_url=server.base) as client:
            lines = client.get(
                f"/admin/{server.admin}/study/{study.name}/export/judgments.jsonl"
            ).text.splitlines()
            progress = client.get(f"/admin/{server.admin}/study/{study.name}/progress.json").json()
    finally:
        server.stop()

    records = [json.loads(line) for line in lines]
    assert {r["page"] for r in records} == acknowledged
    assert len(records) == 60 * 2
    raters_per_item = Counter()
    for item_id, raters in _group(records).items():
        raters_per_item[item_id] = len(raters)
    assert max(raters_per_item.values()) == 2 and len(raters_per_item) == 30
    assert progress["slots_done"] == 60 and progress["slots_open"] == 0


def _group(records):  # type: ignore[no-untyped-def]
    groups: dict[str, set[str]] = {}
    for r in records:
        groups.setdefault(r["item_id"], set()).add(r["rater_id"])
    return groups


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_sigkill_under_load_loses_no_acknowledged_judgment(
    backend, study_dir, tmp_path, request, live_server
):
    """Two server processes (``--workers 2``) under load, killed together with SIGKILL."""
    from storyeval.human.study import load_study

    path = study_file(study_dir, "kill", per_system=60, per_participant=20, raters=3)  # 540 slots
    study = load_study(path)
    if backend == "sqlite":
        url = f"sqlite:///{tmp_path / 'kill.sqlite3'}"
    else:
        url = request.getfixturevalue("postgres_server").create_database(f"kill_{os.getpid()}")
    server = live_server(path, url, links=30, workers=2)
    acknowledged: list[int] = []
    lock = threading.Lock()

    def record(ack) -> None:  # type: ignore[no-untyped-def]
        with lock:  # noted the moment the server acknowledged the page
            acknowledged.append(ack.slot_id)

    def participant(i: int) -> None:
        # the server is killed under these participants: their last request fails
        with (
            httpx.Client(base_url=server.base, timeout=10) as client,
            contextlib.suppress(httpx.HTTPError, RuntimeError),
        ):
            StudyBrowser(client, study, seed=i, on_acknowledged=record).run(server.links[i])

    try:
        threads = [threading.Thread(target=participant, args=(i,)) for i in range(12)]
        for t in threads:
            t.start()
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and len(acknowledged) < 60:
            time.sleep(0.05)
        server.kill()  # SIGKILL in the middle of the load
        for t in threads:
            t.join(timeout=30)
    finally:
        server.stop()
    assert len(acknowledged) >= 20, "the load was running when the server was killed"
    db = Database(url)
    with db.read() as conn:
        stored, done = store.stored_and_done_slots(conn)
    missing = set(acknowledged) - stored
    assert not missing, f"{len(missing)} acknowledged pages are not in the database"
    assert stored == done
    with db.read() as conn:
        assert store.max_raters_per_item(conn, study.name) <= 3, "no item over its quota"
    db.dispose()
