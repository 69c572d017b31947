"""The holes found when the study server was attacked, each closed and checked against a real
server: open enrollment locked for good, a participant taken over with their external id, formula
injection in the links CSV, POSTs out of step with the participant's state, server errors on bad
input (PostgreSQL and NUL bytes, superscript digits, repeated fields, over-long answers)."""

from __future__ import annotations

import csv
import io
import re
import time
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select

from storyeval.server import study_store as store
from storyeval.server.app import create_app
from storyeval.server.db import Database
from storyeval.server.participants import participants
from storyeval.server.settings import Settings
from storyeval.server.study_session import StudySession

from .conftest import write_study

ADMIN = "hardening-admin-token-0123"

OPEN_STUDY = """
name: {name}
title: Open study
protocol: likert
stories: stories.jsonl
select: {{systems: [human, smollm2-p0.9], per_system: 2, seed: 1}}
criteria:
  - {{name: coherence, question: "How coherent?", scale: 5, labels: {{1: low, 5: high}}}}
assignment: {{items_per_participant: 2, raters_per_item: 1, reservation_minutes: {minutes}}}
questions:
  - {{name: comments, question: "Any comments?"}}
enrollment: {{open: true}}
"""


def open_study(study_dir: Path, name: str = "open", *, minutes: float = 0.03):  # type: ignore[no-untyped-def]
    return write_study(study_dir, OPEN_STUDY.format(name=name, minutes=minutes), f"{name}.yaml")


def join(  # type: ignore[no-untyped-def]
    base: str, name: str, pid: str | None = None, *, consent: bool = True
):
    """One browser (its own cookie jar) joining, and consenting unless told not to."""
    own = httpx.Client(base_url=base, timeout=10)
    params = {} if pid is None else {"pid": pid}
    joined = own.get(f"/join/study/{name}", params=params, follow_redirects=True)
    started = None
    if consent and joined.status_code == 200 and joined.url.path.endswith("/welcome"):
        token = joined.url.path.split("/")[2]
        started = own.post(f"/study/{token}/start", data={"consent": "yes"}, follow_redirects=True)
    return own, joined, started


@pytest.mark.slow
def test_anonymous_joins_cannot_lock_the_study(study_dir, tmp_path, live_server):
    """Two dozen anonymous joins that consent and leave: the rate limit stops most of them, the
    few reservations made expire (here after 1.8 s: reservation_minutes 0.03), and then a new
    joiner and a participant with an admin link both get items instead of "the study is full"."""
    study = open_study(study_dir)
    server = live_server(study.path, f"sqlite:///{tmp_path / 'lock.sqlite3'}", links=1)
    try:
        statuses = []
        for _ in range(24):
            _, joined, _started = join(server.base, study.name)
            statuses.append(joined.status_code)
        assert statuses.count(429) >= 10, statuses  # burst of 10, then 20 a minute
        with httpx.Client(base_url=server.base) as client:
            progress = client.get(f"/admin/{server.admin}/study/{study.name}/progress.json").json()
        assert progress["slots_open"] == 0, "the attack did reserve every slot"
        time.sleep(2.0)  # the attackers' reservations expire
        with httpx.Client(base_url=server.base, timeout=10) as admin_made:
            page = admin_made.get(server.links[0].replace(server.base, ""), follow_redirects=True)
            token = page.url.path.split("/")[2]
            page = admin_made.post(
                f"/study/{token}/start", data={"consent": "yes"}, follow_redirects=True
            )
            assert "/item/" in page.url.path, page.text[:300]
        with httpx.Client(base_url=server.base) as client:
            progress = client.get(f"/admin/{server.admin}/study/{study.name}/progress.json").json()
        assert progress["slots_reserved"] == 2
    finally:
        server.stop()


def test_expired_reservations_are_released_where_capacity_is_checked(study_dir, tmp_path):
    """In process with a clock: a fresh join sees released capacity (no "full" page)."""
    study = open_study(study_dir, "clocked", minutes=10)
    now = [1000.0]
    settings = Settings(
        database_url=f"sqlite:///{tmp_path / 'c.sqlite3'}", admin_token=ADMIN, enroll_burst=100
    )
    client = TestClient(create_app(settings, [StudySession(study)], clock=lambda: now[0]))
    for _ in range(2):  # two participants take the 4 slots and leave
        with TestClient(client.app) as other:
            page = other.get(f"/join/study/{study.name}")
            token = page.url.path.split("/")[2]
            other.post(f"/study/{token}/start", data={"consent": "yes"})
    assert "full" in client.get(f"/join/study/{study.name}").text
    now[0] += 10 * 60 + 1
    page = client.get(f"/join/study/{study.name}")
    assert page.url.path.endswith("/welcome"), page.text[:200]


@pytest.mark.slow
def test_an_external_id_binds_to_the_first_browser(study_dir, tmp_path, live_server):
    study = open_study(study_dir, "bound", minutes=60)
    server = live_server(study.path, f"sqlite:///{tmp_path / 'bind.sqlite3'}", links=1)
    try:
        alice, joined, _ = join(server.base, study.name, "PROLIFIC123")
        link = joined.url.path
        again = alice.get(f"/join/study/{study.name}?pid=PROLIFIC123", follow_redirects=True)
        assert again.url.path.split("/")[2] == link.split("/")[2], "the same browser resumes"
        with httpx.Client(base_url=server.base) as mallory:
            stolen = mallory.get(f"/join/study/{study.name}?pid=PROLIFIC123", follow_redirects=True)
            assert stolen.status_code == 403 and "another browser" in stolen.text
            assert link.split("/")[2] not in stolen.text
            long_a = "A" * 300
            too_long = mallory.get(f"/join/study/{study.name}?pid={long_a}")
            assert too_long.status_code == 400 and "longer than 256" in too_long.text
            nul = mallory.get(f"/join/study/{study.name}?pid=bad%00id")
            assert nul.status_code == 400
            twice = mallory.get(f"/join/study/{study.name}?pid=a&pid=b")
            assert twice.status_code == 400
        alice.close()
        db = Database(f"sqlite:///{tmp_path / 'bind.sqlite3'}")
        with db.read() as conn:
            ids = list(conn.execute(select(participants.c.external_id)).scalars())
        db.dispose()
        assert [i for i in ids if i] == ["PROLIFIC123"], "refused ids created nobody"
    finally:
        server.stop()


@pytest.mark.slow
def test_the_links_csv_makes_formulas_inert(study_dir, tmp_path, live_server):
    study = open_study(study_dir, "csv", minutes=60)
    server = live_server(study.path, f"sqlite:///{tmp_path / 'csv.sqlite3'}", links=1)
    try:
        for pid in ('=HYPERLINK("http://evil")', "+1", "-2", "@SUM(A1)", "plain"):
            join(server.base, study.name, pid, consent=False)[0].close()
        with httpx.Client(base_url=server.base) as client:
            download = client.get(f"/admin/{server.admin}/links/study/{study.name}.csv")
    finally:
        server.stop()
    assert download.status_code == 200
    rows = list(csv.DictReader(io.StringIO(download.text)))
    ids = {row["external_id"] for row in rows if row["external_id"]}
    assert ids == {'\'=HYPERLINK("http://evil")', "'+1", "'-2", "'@SUM(A1)", "plain"}
    assert all(row["link"].startswith("http") for row in rows)


def _participant(client: TestClient, study) -> str:  # type: ignore[no-untyped-def]
    page = client.post(
        f"/admin/{ADMIN}/links", data={"kind": "study", "name": study.name, "count": "1"}
    )
    link = re.findall(r"<code>(http[^<]+)</code>", page.text)[0]
    return str(client.get(link.split("testserver")[1]).url).split("/")[4]


def test_every_post_is_checked_against_the_current_step(make_likert, tmp_path):
    study = make_likert(per_participant=2, raters=2)
    settings = Settings(database_url=f"sqlite:///{tmp_path / 's.sqlite3'}", admin_token=ADMIN)
    client = TestClient(create_app(settings, [StudySession(study)]))
    token = _participant(client, study)
    first = client.post(f"/study/{token}/start", data={"consent": "yes"})
    slot_now = int(first.url.path.rsplit("/", 1)[1])
    with client.app.state.storyeval.db.read() as conn:
        mine = [
            s.id for s in store.participant_slots(conn, client.app.state.storyeval.known[token].id)
        ]
    later = next(s for s in mine if s != slot_now)
    answers = {c.name: "3" for c in study.criteria}
    skipped = client.post(f"/study/{token}/item/{later}", data=answers, follow_redirects=False)
    assert skipped.status_code == 409, "a page never shown cannot be answered"
    for slot in (slot_now, later):
        client.get(f"/study/{token}/item/{slot}")
        client.post(f"/study/{token}/item/{slot}", data=answers)
    done = client.get(f"/study/{token}/")
    assert done.url.path.endswith("/done") and "completion-code" in done.text
    with client.app.state.storyeval.db.read() as conn:
        before = conn.execute(select(func.count()).select_from(store.slots)).scalar_one()
        reserved = conn.execute(
            select(func.count()).select_from(store.slots).where(store.slots.c.status == "reserved")
        ).scalar_one()
    assert client.post(f"/study/{token}/more", data={"action": "continue"}).status_code == 409
    assert client.post(f"/study/{token}/start", data={"consent": "yes"}).status_code == 409
    assert client.post(f"/study/{token}/questions", data={"comments": "x"}).status_code == 409
    replay = client.post(f"/study/{token}/item/{later}", data=answers, follow_redirects=False)
    assert replay.status_code == 303, "a replay of an answer already stored is acknowledged"
    with client.app.state.storyeval.db.read() as conn:
        assert conn.execute(select(func.count()).select_from(store.slots)).scalar_one() == before
        assert (
            conn.execute(
                select(func.count())
                .select_from(store.slots)
                .where(store.slots.c.status == "reserved")
            ).scalar_one()
            == reserved
        )
        finished = conn.execute(select(participants.c.finished_at)).scalar_one()
        late = conn.execute(
            select(func.count())
            .select_from(store.judgments)
            .where(store.judgments.c.submitted_at > finished)
        ).scalar_one()
    assert late == 0, "nothing is stored after the participant finished"


def test_bad_input_is_a_4xx_and_changes_nothing(db_url, study_dir, tmp_path):
    """On SQLite and PostgreSQL (which refuses NUL bytes): a NUL in the token, in a free-text
    answer or in a field name; a repeated field; an over-long answer; a superscript digit."""
    study = write_study(
        study_dir,
        OPEN_STUDY.format(name="bad", minutes=60)
        .replace(
            "criteria:\n",
            "criteria:\n  - {name: relevance, question: 'How relevant?', scale: 5, "
            "labels: {1: low, 5: high}}\n",
        )
        .replace("items_per_participant: 2", "items_per_participant: 1"),
        "bad.yaml",
    )
    settings = Settings(database_url=db_url, admin_token=ADMIN)
    client = TestClient(create_app(settings, [StudySession(study)]))
    token = _participant(client, study)
    assert client.get("/study/abc%00def/item/1").status_code == 404
    assert client.get(f"/p/{token}%00").status_code == 404
    page = client.post(f"/study/{token}/start", data={"consent": "yes"})
    item = page.url.path
    for body, status in (
        ("coherence=3&coherence=5&relevance=3", 422),
        ("coherence=%C2%B3&relevance=3", 422),  # a superscript three
        ("coherence=3&relevance=3%00", 400),
        ("cohe%00rence=3&relevance=3", 400),
        ("coherence=3&relevance=%FF", 400),  # not UTF-8
    ):
        response = client.post(
            item, content=body, headers={"Content-Type": "application/x-www-form-urlencoded"}
        )
        assert response.status_code == status, (body, response.status_code, response.text[:200])
        assert "<html" in response.text  # the same error page as every other error
    with client.app.state.storyeval.db.read() as conn:
        assert conn.execute(select(func.count()).select_from(store.judgments)).scalar_one() == 0
    client.post(item, data={"coherence": "3", "relevance": "4"})
    questions = client.get(f"/study/{token}/").url.path
    assert questions.endswith("/questions")
    long = client.post(questions, data={"comments": "x" * 6000})
    assert long.status_code == 422 and "at most 5000 characters" in long.text
    nul = client.post(questions, data={"comments": "a\x00b"})
    assert nul.status_code == 400
    with client.app.state.storyeval.db.read() as conn:
        assert conn.execute(select(func.count()).select_from(store.responses)).scalar_one() == 0
    assert client.post(questions, data={"comments": "fine"}).status_code == 200
    with client.app.state.storyeval.db.read() as conn:
        assert conn.execute(select(store.responses.c.text)).scalars().all() == ["fine"]


RACE_STUDY = """
name: race
title: Race for the last items
protocol: likert
stories: stories.jsonl
select: {systems: [human, smollm2-p0.9], per_system: 1, seed: 1}
criteria:
  - {name: coherence, question: "How coherent?", scale: 5, labels: {1: low, 5: high}}
assignment: {items_per_participant: 1, max_items_per_participant: 2, raters_per_item: 1}
"""


def test_more_items_taken_by_others_since_the_offer_is_not_a_conflict(study_dir, tmp_path):
    """Two items, two participants. Alice answers one and is offered more; Bob takes the last
    item meanwhile; Alice's "continue" then closes her items (no 409 error page) and leads to
    her completion code; a second "continue" after the completion code is still a 409."""
    study = write_study(study_dir, RACE_STUDY, "race.yaml")
    settings = Settings(database_url=f"sqlite:///{tmp_path / 'r.sqlite3'}", admin_token=ADMIN)
    app = create_app(settings, [StudySession(study)])
    with TestClient(app) as alice, TestClient(app) as bob:
        token = _participant(alice, study)
        item = alice.post(f"/study/{token}/start", data={"consent": "yes"})
        alice.post(item.url.path, data={"coherence": "4"})
        offer = alice.get(f"/study/{token}/")
        assert offer.url.path.endswith("/more"), offer.url.path
        other = _participant(bob, study)
        assert "/item/" in bob.post(f"/study/{other}/start", data={"consent": "yes"}).url.path
        answer = alice.post(f"/study/{token}/more", data={"action": "continue"})
        assert answer.status_code == 200 and answer.url.path.endswith("/done"), answer.text[:300]
        assert "completion-code" in answer.text
        late = alice.post(f"/study/{token}/more", data={"action": "continue"})
        assert late.status_code == 409
