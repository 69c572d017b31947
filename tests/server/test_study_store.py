"""Persistence of studies on SQLite and on a real PostgreSQL server: quotas under concurrency,
idempotent submissions, isolation between participants, released reservations, timing, export."""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import pytest
from sqlalchemy import func, select

from storyeval.corpus import read_judgments
from storyeval.server import study_store as store
from storyeval.server.db import Database
from storyeval.server.participants import (
    create_participants,
    page_views,
    participant_by_token,
    record_view,
)
from storyeval.server.study_store import StudyVersionError


def _db(url: str) -> Database:
    db = Database(url, pool_size=8)
    db.create_all()
    return db


def _answers(study):  # type: ignore[no-untyped-def]
    return {c.name: 3 for c in study.criteria}


def test_register_is_idempotent_and_refuses_a_changed_study(db_url, make_likert):
    study = make_likert()
    db = _db(db_url)
    assert store.register_study(db, study, now=1.0) is True
    assert store.register_study(db, study, now=2.0) is False
    with db.read() as conn:
        n_slots = conn.execute(select(func.count()).select_from(store.slots)).scalar_one()
    assert n_slots == len(study.items) * study.raters_per_item
    changed = make_likert(per_system=5)  # same name, different items
    with pytest.raises(StudyVersionError, match="changed since data collection started"):
        store.register_study(db, changed, now=3.0)
    db.dispose()


def test_concurrent_participants_never_exceed_the_quota(db_url, make_likert):
    """24 participants start at once and answer at once; 8 items x 2 raters = 16 slots."""
    study = make_likert(per_system=4, per_participant=3, raters=2)
    db = _db(db_url)
    store.register_study(db, study, now=0.0)
    people = db.run(lambda conn: create_participants(conn, "study", study.name, 24, now=0.0))
    barrier = threading.Barrier(12)

    def begin(person):  # type: ignore[no-untyped-def]
        barrier.wait(timeout=30) if person.id % 2 == 0 else None
        return (
            db.run(
                lambda conn: store.start(
                    conn, study, participant_by_token(conn, person.token), time.time()
                )
            ).status
            == "started"
        )

    with ThreadPoolExecutor(max_workers=12) as pool:
        started = list(pool.map(begin, people))
    assert sum(started) >= 16 // 3  # enough people got work
    with db.read() as conn:
        rows = conn.execute(select(store.slots).where(store.slots.c.kind == "item")).all()
    held = [r for r in rows if r.participant_id is not None]
    assert len(held) == 16, "every slot is claimed exactly once"
    per_item = Counter(r.item_key for r in held)
    assert max(per_item.values()) == 2 and len(per_item) == 8
    assert len({(r.item_key, r.participant_id) for r in held}) == len(held), (
        "nobody gets an item twice"
    )
    assert max(Counter(r.participant_id for r in held).values()) <= 3

    def answer_all(person):  # type: ignore[no-untyped-def]
        saved = []
        with db.read() as conn:
            mine = store.participant_slots(conn, person.id)
        for slot in mine:
            result = db.run(
                lambda conn, s=slot: store.submit_page(
                    conn,
                    study,
                    participant_by_token(conn, person.token),
                    s.id,
                    _answers(study),
                    time.time(),
                )
            )
            saved.append(result.status)
        return saved

    with ThreadPoolExecutor(max_workers=12) as pool:
        statuses = [s for result in pool.map(answer_all, people) for s in result]
    assert statuses.count("saved") == 16
    with db.read() as conn:
        assert store.max_raters_per_item(conn, study.name) == 2
        n = conn.execute(select(func.count()).select_from(store.judgments)).scalar_one()
    assert n == 16 * len(study.criteria)
    db.dispose()


def test_submissions_are_idempotent_even_when_concurrent(db_url, make_likert):
    study = make_likert()
    db = _db(db_url)
    store.register_study(db, study, now=0.0)
    person = db.run(lambda conn: create_participants(conn, "study", study.name, 1, now=0.0))[0]
    db.run(lambda conn: store.start(conn, study, participant_by_token(conn, person.token), 1.0))
    with db.read() as conn:
        first, second, third = store.participant_slots(conn, person.id)[:3]

    def submit(slot_id, answers):  # type: ignore[no-untyped-def]
        return db.run(
            lambda conn: store.submit_page(
                conn, study, participant_by_token(conn, person.token), slot_id, answers, 5.0
            )
        ).status

    assert submit(first.id, _answers(study)) == "saved"
    assert submit(first.id, _answers(study)) == "duplicate", "a replay is acknowledged"
    assert submit(first.id, {c.name: 1 for c in study.criteria}) == "answered"
    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(lambda _: submit(second.id, _answers(study)), range(4)))
    assert sorted(results) == ["duplicate", "duplicate", "duplicate", "saved"]
    with ThreadPoolExecutor(max_workers=4) as pool:  # other answers at once: one is stored
        results = list(
            pool.map(lambda v: submit(third.id, {c.name: v for c in study.criteria}), (1, 2, 4, 5))
        )
    assert sorted(results) == ["answered", "answered", "answered", "saved"]
    with db.read() as conn:
        values = conn.execute(select(store.judgments.c.slot_id, store.judgments.c.value)).all()
    assert len(values) == 3 * len(study.criteria)
    assert {v for s, v in values if s == first.id} == {3.0}, "the first answer wins"
    assert len({v for s, v in values if s == third.id}) == 1
    db.dispose()


def test_a_participant_cannot_read_or_write_another_participants_items(db_url, make_likert):
    study = make_likert()
    db = _db(db_url)
    store.register_study(db, study, now=0.0)
    alice, bob = db.run(lambda conn: create_participants(conn, "study", study.name, 2, now=0.0))
    for person in (alice, bob):
        db.run(
            lambda conn, p=person: store.start(
                conn, study, participant_by_token(conn, p.token), 1.0
            )
        )
    with db.read() as conn:
        alices = store.participant_slots(conn, alice.id)
        assert store.slot_of(conn, bob.id, alices[0].id) is None
    result = db.run(
        lambda conn: store.submit_page(
            conn, study, participant_by_token(conn, bob.token), alices[0].id, _answers(study), 2.0
        )
    )
    assert result.status == "missing"
    with db.read() as conn:
        assert conn.execute(select(func.count()).select_from(store.judgments)).scalar_one() == 0
        assert store.slot_of(conn, alice.id, alices[0].id).status == "reserved"
    db.dispose()


def test_reservations_of_participants_who_left_are_released(db_url, make_likert):
    study = make_likert(per_system=2, per_participant=4, raters=1)  # 4 items, 4 slots
    reservation_s = study.config.assignment.reservation_s
    assert reservation_s == (5 + 4) * 60, "by default 5 minutes plus one per item"
    db = _db(db_url)
    store.register_study(db, study, now=0.0)
    leaver, newcomer = db.run(
        lambda conn: create_participants(conn, "study", study.name, 2, now=0.0)
    )
    db.run(lambda conn: store.start(conn, study, participant_by_token(conn, leaver.token), 10.0))
    with db.read() as conn:
        first = store.participant_slots(conn, leaver.id)[0]
    db.run(
        lambda conn: store.submit_page(
            conn, study, participant_by_token(conn, leaver.token), first.id, _answers(study), 20.0
        )
    )
    later = 20.0 + reservation_s + 1
    assert (
        db.run(
            lambda conn: store.start(conn, study, participant_by_token(conn, newcomer.token), later)
        ).status
        == "started"
    )
    with db.read() as conn:
        kept = store.participant_slots(conn, leaver.id)
        taken = store.participant_slots(conn, newcomer.id)
    assert [s.id for s in kept] == [first.id] and kept[0].status == "done", (
        "answered work is never released"
    )
    assert len(taken) == 3 and first.item_key not in {s.item_key for s in taken}
    late = db.run(
        lambda conn: store.submit_page(
            conn,
            study,
            participant_by_token(conn, leaver.token),
            taken[0].id,
            _answers(study),
            later + 5,
        )
    )
    assert late.status == "missing"
    db.dispose()


def test_time_from_page_delivery_and_gap_between_submissions(db_url, make_likert):
    """An item page counts as served when the server sends the participant to it (at consent
    for the first, at the previous answer for the next; a reload does not reset it), or at
    its first GET when the participant arrives otherwise (here after leaving the study)."""
    study = make_likert()
    db = _db(db_url)
    store.register_study(db, study, now=0.0)
    person = db.run(lambda conn: create_participants(conn, "study", study.name, 1, now=0.0))[0]
    db.run(lambda conn: store.start(conn, study, participant_by_token(conn, person.token), 100.0))
    with db.read() as conn:
        a, b, c = store.participant_slots(conn, person.id)[:3]

    def submit(slot, t):  # type: ignore[no-untyped-def]
        return db.run(
            lambda conn: store.submit_page(
                conn, study, participant_by_token(conn, person.token), slot.id, _answers(study), t
            )
        )

    db.run(lambda conn: record_view(conn, person.id, store.page_key(a.id), 160.0))  # a reload
    submit(a, 147.5)
    submit(b, 171.0)
    # the view of c was recorded at b's answer: remove it, as if the participant had closed
    # the browser before it loaded and come back through their link later
    db.run(
        lambda conn: conn.execute(
            page_views.delete().where(page_views.c.page == store.page_key(c.id))
        )
    )
    db.run(lambda conn: record_view(conn, person.id, store.page_key(c.id), 300.0))
    submit(c, 312.0)
    with db.read() as conn:
        records = store.export_judgments(conn, study.name)
    times = {(j.item_id, j.extra["gap_s"]): j.time_s for j in records}
    assert times == {
        (a.item_key, 47.5): 47.5,
        (b.item_key, 23.5): 23.5,
        (c.item_key, 141.0): 12.0,
    }
    db.dispose()


def test_export_writes_the_long_format_and_the_definition(db_url, make_likert, tmp_path):
    study = make_likert()
    db = _db(db_url)
    store.register_study(db, study, now=0.0)
    person = db.run(lambda conn: create_participants(conn, "study", study.name, 1, now=0.0))[0]
    db.run(lambda conn: store.start(conn, study, participant_by_token(conn, person.token), 1.0))
    with db.read() as conn:
        slot = store.participant_slots(conn, person.id)[0]
    db.run(
        lambda conn: store.submit_page(
            conn, study, participant_by_token(conn, person.token), slot.id, _answers(study), 9.0
        )
    )
    counts = store.export_to_directory(db, study, tmp_path / "export")
    judgments = read_judgments(tmp_path / "export" / "judgments.jsonl")
    assert counts["judgments.jsonl"] == len(judgments) == len(study.criteria)
    assert {j.study for j in judgments} == {study.name}
    assert all(
        j.extra["study_version"] == study.version and j.rater_id == "p00001" for j in judgments
    )
    definition = json.loads((tmp_path / "export" / "study.json").read_text())
    assert definition["version"] == study.version and definition["protocol"] == "likert"
    people = [
        json.loads(line)
        for line in (tmp_path / "export" / "participants.jsonl").read_text().splitlines()
    ]
    assert people[0]["items"] == 1 and people[0]["reserved"] == 2 and "token" not in people[0]
    db.dispose()


def test_a_participant_never_gets_two_stories_of_one_prompt(db_url, study_dir):
    """Human and model continuations of the same prompt (and, side by side, the same reference
    beside two systems) go to different participants, so the export has no duplicate ratings."""
    from .conftest import write_study

    study = write_study(
        study_dir,
        "name: prompts\ntitle: T\nprotocol: side_by_side\nstories: stories.jsonl\n"
        "select: {ids: [s001-smollm2-p0.9, s001-smollm2-k40-t0.7, s002-smollm2-p0.9, s002-smollm2-k40-t0.7,"
        " s003-smollm2-p0.9, s003-smollm2-k40-t0.7]}\n"
        "criteria: [{name: c, question: q, scale: 5, labels: {1: low, 5: high}}]\n"
        "assignment: {items_per_participant: 3, raters_per_item: 2}\n",
        "prompts.yaml",
    )
    db = _db(db_url)
    store.register_study(db, study, now=0.0)
    people = db.run(lambda conn: create_participants(conn, "study", study.name, 5, now=0.0))
    started = [
        db.run(
            lambda conn, p=p: store.start(conn, study, participant_by_token(conn, p.token), 1.0)
        ).status
        for p in people
    ]
    assert started == ["started"] * 4 + ["full"]  # 3 prompts x 4 slots: 4 people, one each
    with db.read() as conn:
        rows = conn.execute(
            select(store.slots).where(store.slots.c.participant_id.is_not(None))
        ).all()
    assert len(rows) == 12
    for person in people[:4]:
        mine = [r for r in rows if r.participant_id == person.id]
        assert len({r.group_key for r in mine}) == len(mine) == 3
    db.dispose()
