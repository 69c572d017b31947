"""Adaptive assignment: the routing rules, the simulation of what it saves, and the real
server routing raters to contested items on SQLite and PostgreSQL."""

from __future__ import annotations

import json
import math
from collections import Counter
from pathlib import Path

import pytest
from sqlalchemy import select

from storyeval.human.adaptive import (
    ItemState,
    Moments,
    interval_width,
    moments_of,
    route,
    simulate_adaptive,
)
from storyeval.human.model import AdaptiveAssignment, StudyFileError
from storyeval.server import study_store as store
from storyeval.server.db import Database
from storyeval.server.participants import create_participants, participant_by_token

from .conftest import LIKERT, write_study

SETTINGS = AdaptiveAssignment(target_width=1.0, min_raters=2)


def _state(key: str, done: int, planned: int, width: float, anticipated: float) -> ItemState:
    return ItemState(key, done, planned, width, anticipated, done >= 2 and width <= 1.0)


def test_route_covers_every_item_before_refining_the_widest():
    states = {
        "a": _state("a", 2, 2, 2.0, 2.0),
        "b": _state("b", 1, 1, math.inf, 3.0),  # under min_raters: coverage first
        "c": _state("c", 2, 3, 4.0, 1.5),  # wide, one judgment pending
        "d": _state("d", 3, 3, 0.8, 0.8),  # settled
        "e": _state("e", 2, 4, 1.4, 0.9),  # pending judgments should settle it: waits
    }
    assert route(["a", "b", "c", "d", "e", "b"], states, SETTINGS) == ["b", "b", "a", "c"]
    assert route(["new"], {}, SETTINGS) == ["new"]


def test_interval_width_shrinks_chance_agreement_toward_the_pooled_variance():
    unanimous = moments_of([3, 3])
    assert unanimous == Moments(2, 6.0, 18.0) and unanimous.variance == 0
    wide = interval_width(unanimous, 2, pooled=1.0, prior_weight=2.0, confidence=0.95)
    assert wide == pytest.approx(2 * 1.959964 * math.sqrt((2 / 3) / 2), rel=1e-5)
    assert interval_width(unanimous, 2, pooled=1.0, prior_weight=0.0, confidence=0.95) == 0
    contested = moments_of([1, 5, 1, 5])
    own = 2 * 1.959964 * math.sqrt(contested.variance / 4)
    assert interval_width(contested, 4, pooled=0.1, prior_weight=2.0, confidence=0.95) == (
        pytest.approx(own, rel=1e-5)
    ), "a contested item keeps its own variance"
    assert interval_width(contested, 0, pooled=1.0, prior_weight=2.0, confidence=0.95) == math.inf


def test_the_simulation_saves_judgments_for_the_same_share_of_items_within_the_target():
    table = simulate_adaptive(
        AdaptiveAssignment(target_width=1.5, min_raters=3),
        n_items=60,
        raters_per_item=16,
        repeats=2,
        seed=3,
    )
    assert set(table["design"]) == {"adaptive", "fixed"} and len(table) == 4
    for _, rows in table.groupby("repeat"):
        adaptive = rows[rows["design"] == "adaptive"].iloc[0]
        fixed = rows[rows["design"] == "fixed"].iloc[0]
        assert fixed["within_target"] >= adaptive["within_target"]
        assert adaptive["judgments"] < 0.8 * fixed["judgments"], rows.to_string()
        assert adaptive["saving"] == pytest.approx(1 - adaptive["judgments"] / fixed["judgments"])


ADAPTIVE = """
  adaptive:
    min_raters: 2
    target_width: 3.0
"""


def _adaptive_study(study_dir: Path, name: str = "adaptive-test", extra: str = ADAPTIVE):  # type: ignore[no-untyped-def]
    text = LIKERT.format(name=name, per_system=4, per_participant=3, raters=6) + extra
    return write_study(study_dir, text, f"{name}.yaml")


def test_a_study_file_checks_its_adaptive_section(study_dir):
    study = _adaptive_study(study_dir)
    assert study.config.assignment.adaptive == AdaptiveAssignment(min_raters=2, target_width=3.0)
    plain = write_study(
        study_dir,
        LIKERT.format(name="plain", per_system=4, per_participant=3, raters=6),
        "plain.yaml",
    )
    assert study.version != plain.version
    with pytest.raises(StudyFileError, match=r"min_raters: must be <= raters_per_item \(6\)"):
        _adaptive_study(study_dir, "bad", "\n  adaptive:\n    min_raters: 7\n    target_width: 1\n")
    with pytest.raises(StudyFileError, match="unknown criterion 'tension'"):
        _adaptive_study(
            study_dir, "bad2", "\n  adaptive:\n    target_width: 1\n    criteria: [tension]\n"
        )


def _run_until_full(db: Database, study, contested: set[str]) -> list[str]:  # type: ignore[no-untyped-def]
    """Participants one after another answer every item they get: the same 3 for clear items,
    1 and 5 in turn for contested ones; returns the start statuses."""
    seen: Counter[str] = Counter()
    statuses = []
    for step in range(60):
        now = 10.0 * step
        (person,) = db.run(lambda c, t=now: create_participants(c, "study", study.name, 1, now=t))
        started = db.run(
            lambda c, p=person, t=now: store.start(c, study, participant_by_token(c, p.token), t)
        )
        statuses.append(started.status)
        if started.status != "started":
            return statuses
        with db.read() as conn:
            mine = [s for s in store.participant_slots(conn, person.id) if s.kind == "item"]
        for slot in mine:
            value = 3
            if slot.item_key in contested:
                value = 1 if seen[slot.item_key] % 2 == 0 else 5
            seen[slot.item_key] += 1
            answers = {c.name: value for c in study.criteria}
            db.run(
                lambda c, s=slot, p=person, a=answers, t=now: store.submit_page(
                    c, study, participant_by_token(c, p.token), s.id, a, t + 1
                )
            )
    return statuses


def test_the_server_routes_raters_to_contested_items(db_url, study_dir, tmp_path):
    study = _adaptive_study(study_dir)
    db = Database(db_url, pool_size=4)
    db.create_all()
    store.register_study(db, study, now=0.0)
    keys = [item.key for item in study.items]
    contested = set(keys[::2])
    statuses = _run_until_full(db, study, contested)
    assert statuses[-1] == "full", statuses
    with db.read() as conn:
        rows = conn.execute(select(store.slots).where(store.slots.c.kind == "item")).all()
        progress = store.progress(conn, study)
    done = Counter(r.item_key for r in rows if r.status == "done")
    assert all(done[k] == 6 for k in contested), done
    assert all(2 <= done[k] < 6 for k in set(keys) - contested), done
    assert sum(done.values()) < 6 * len(keys)
    assert progress["slots_settled"] == 6 * len(keys) - sum(done.values())
    assert {r.status for r in rows} == {"done", "settled"}
    counts = store.export_to_directory(db, study, tmp_path / "export")
    routed = [
        json.loads(line)
        for line in (tmp_path / "export" / "routing.jsonl").read_text().splitlines()
    ]
    assert counts["routing.jsonl"] == len(routed) == sum(done.values())
    assert {r["phase"] for r in routed} == {"coverage", "refine"}
    refine = [r for r in routed if r["phase"] == "refine"]
    assert all(r["done_before"] >= 2 and r["width"] is not None for r in refine)
    assert sum(r["item"] in contested for r in refine) > len(refine) / 2
    db.dispose()


def test_simulate_adaptive_command_reads_a_study_and_writes_the_table(study_dir, tmp_path):
    from typer.testing import CliRunner

    from storyeval.cli import app

    study = _adaptive_study(study_dir)
    out = tmp_path / "sim.csv"
    result = CliRunner().invoke(
        app,
        ["study", "simulate-adaptive", str(study.path), "--repeats", "2", "-o", str(out)],
    )
    assert result.exit_code == 0, result.output
    assert "adaptive assignment saved" in result.output
    import pandas as pd

    table = pd.read_csv(out)
    assert set(table["items"]) == {len(study.items)} and len(table) == 4
    plain = study_dir / "plain.yaml"
    plain.write_text(study.path.read_text().replace(ADAPTIVE, "\n"), encoding="utf-8")
    refused = CliRunner().invoke(app, ["study", "simulate-adaptive", str(plain)])
    assert refused.exit_code != 0 and "no assignment.adaptive section" in refused.output


def test_the_design_statement_describes_adaptive_assignment(study_dir, tmp_path):
    from storyeval.human.statement import write_statement

    study = _adaptive_study(study_dir)
    write_statement(study, tmp_path / "statement.md")
    text = (tmp_path / "statement.md").read_text()
    assert "Raters per item: adaptive, 2 to 6" in text and "narrower than 3" in text


COLLUDED = """
  adaptive:
    min_raters: 2
    target_width: 1.0
"""
CHECK = """
attention_checks:
  - id: check
    position: 1
    text:
      story: To show that you are reading, please select 1 for both questions.
    expect: {coherence: [1], relevance: [1]}
"""


def _answer_everything(db: Database, study, answers_for, step: int) -> str:  # type: ignore[no-untyped-def]
    """One more participant answers every page they get (``answers_for(slot)``: the answers);
    returns their start status."""
    now = 10.0 * step
    (person,) = db.run(lambda c: create_participants(c, "study", study.name, 1, now=now))
    started = db.run(lambda c: store.start(c, study, participant_by_token(c, person.token), now))
    if started.status != "started":
        return str(started.status)
    with db.read() as conn:
        mine = list(store.participant_slots(conn, person.id))
    for slot in mine:
        given = answers_for(slot)
        db.run(
            lambda c, s=slot, a=given: store.submit_page(
                c, study, participant_by_token(c, person.token), s.id, a, now + 1
            )
        )
    return str(started.status)


def test_colluding_straight_liners_cannot_end_an_adaptive_study(db_url, study_dir):
    """The third attack's case: 12 items, 6 raters each, adaptive with target width 1.0. Eight
    raters answering 3 on everything settled all 12 items at 2 judgments each, so the ninth
    was told the study was full (the pooled variance of unanimous cells was 0, not the
    prior). Now straight-lined answers settle nothing: every item stays open and the ninth
    participant gets items; raters whose answers vary still settle items."""
    text = LIKERT.format(name="collusion", per_system=6, per_participant=6, raters=6) + COLLUDED
    study = write_study(study_dir, text, "collusion.yaml")
    assert len(study.items) == 12
    db = Database(db_url, pool_size=4)
    db.create_all()
    store.register_study(db, study, now=0.0)
    three = {c.name: 3 for c in study.criteria}
    statuses = [_answer_everything(db, study, lambda s: three, step) for step in range(8)]
    assert statuses == ["started"] * 8
    with db.read() as conn:
        progress = store.progress(conn, study)
    assert progress["slots_settled"] == 0
    assert _answer_everything(db, study, lambda s: three, 8) == "started"  # the ninth
    db.dispose()


def test_varied_answers_settle_and_a_pending_check_holds_them_back(db_url, study_dir):
    """Raters who vary their answers and pass their attention check settle clear items;
    the same raters before they answer their check settle nothing."""
    adaptive = "\n  adaptive:\n    min_raters: 2\n    target_width: 3.5\n"
    text = LIKERT.format(name="varied", per_system=2, per_participant=4, raters=10) + adaptive
    study = write_study(study_dir, text + CHECK, "varied.yaml")
    db = Database(db_url, pool_size=4)
    db.create_all()
    store.register_study(db, study, now=0.0)
    keys = [item.key for item in study.items]

    def honest(slot):  # type: ignore[no-untyped-def]
        if slot.kind == "check":
            return {c.name: 1 for c in study.criteria}
        value = 2 + keys.index(slot.item_key) % 3  # items differ, raters agree
        return {c.name: value for c in study.criteria}

    def skipping_the_check(slot):  # type: ignore[no-untyped-def]
        return {c.name: 2 for c in study.criteria} if slot.kind == "check" else honest(slot)

    for step in range(4):
        _answer_everything(db, study, skipping_the_check, step)  # every check failed
    with db.read() as conn:
        assert store.progress(conn, study)["slots_settled"] == 0
    for step in range(4, 8):
        _answer_everything(db, study, honest, step)
    with db.read() as conn:
        assert store.progress(conn, study)["slots_settled"] > 0
    db.dispose()
