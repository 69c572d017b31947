"""What the admin sees and downloads of a study: progress, participant summaries and exports.

Participants who failed the comprehension check (``screened_out``) or declined consent
(``returned``) are listed with their status in ``participants.jsonl``; they produced no
judgments, and their comprehension answers are in ``comprehension.jsonl``, apart from the data.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, func, select

from storyeval.base.errors import StoryevalError
from storyeval.base.validation import check_choice
from storyeval.corpus import Judgment
from storyeval.human.model import Study
from storyeval.server.db import Database
from storyeval.server.integrity import summarise
from storyeval.server.participants import participants, rater_id
from storyeval.server.study_routing import export_routing
from storyeval.server.study_tables import (
    KIND,
    StudyVersionError,
    comprehension_answers,
    iso,
    judgments,
    members,
    responses,
    slots,
    stored_definition,
    studies,
    training_answers,
)


def export_judgments(
    conn: Connection, study_name: str, *, version: str | None = None
) -> list[Judgment]:
    """Every stored judgment of a study as long-format records (foundation ``Judgment``).

    ``time_s`` is the time from the page's first delivery to its submission; ``extra`` holds
    ``gap_s`` (seconds since the participant's previous submission), ``protocol``,
    ``study_version``, ``served_at`` / ``submitted_at`` (ISO 8601 UTC), the page's place in
    the participant's order (``sequence``: 1-based over all their pages; ``batch_position``)
    and protocol details.
    """
    if version is None:
        version = conn.execute(
            select(studies.c.version).where(studies.c.name == study_name)
        ).scalar_one_or_none()
    rows = conn.execute(
        select(judgments).where(judgments.c.study == study_name).order_by(judgments.c.id)
    ).all()
    records = []
    for row in rows:
        extra = {
            "gap_s": None if row.gap_s is None else round(float(row.gap_s), 3),
            "study_version": version,
            "served_at": iso(row.served_at),
            "submitted_at": iso(row.submitted_at),
            **json.loads(row.extra),
        }
        records.append(
            Judgment(
                item_id=row.item_id,
                rater_id=rater_id(int(row.participant_id)),
                criterion=row.criterion,
                value=float(row.value),
                time_s=round(float(row.time_s), 3),
                study=study_name,
                condition=row.condition,
                extra=extra,
            )
        )
    return records


def export_responses(conn: Connection, study_name: str) -> list[dict[str, Any]]:
    """Every free-text response of the study (item follow-ups and end questions)."""
    rows = conn.execute(
        select(responses).where(responses.c.study == study_name).order_by(responses.c.id)
    ).all()
    return [
        {
            "rater_id": rater_id(int(r.participant_id)),
            "study": study_name,
            "scope": "end" if r.scope == "end" else "item",
            "item_id": r.item_id,
            "question": r.question,
            "text": r.text,
            "time_s": None if r.time_s is None else round(float(r.time_s), 3),
            "submitted_at": iso(r.submitted_at),
            "integrity": json.loads(r.integrity) if r.integrity else None,
        }
        for r in rows
    ]


def export_training(conn: Connection, study_name: str) -> list[dict[str, Any]]:
    """Every answer to a training example, with whether it was correct."""
    rows = conn.execute(
        select(training_answers)
        .where(training_answers.c.study == study_name)
        .order_by(training_answers.c.participant_id, training_answers.c.idx)
    ).all()
    return [
        {
            "rater_id": rater_id(int(r.participant_id)),
            "study": study_name,
            "example": int(r.idx) + 1,
            "answer": json.loads(r.answer),
            "correct": None if r.correct is None else bool(r.correct),
            "time_s": None
            if r.served_at is None
            else round(float(r.submitted_at - r.served_at), 3),
        }
        for r in rows
    ]


def export_comprehension(conn: Connection, study_name: str) -> list[dict[str, Any]]:
    """Every comprehension-check attempt: rater, attempt (1-based), answers, passed."""
    rows = conn.execute(
        select(comprehension_answers)
        .where(comprehension_answers.c.study == study_name)
        .order_by(comprehension_answers.c.participant_id, comprehension_answers.c.attempt)
    ).all()
    return [
        {
            "rater_id": rater_id(int(r.participant_id)),
            "study": study_name,
            "attempt": int(r.attempt) + 1,
            "answers": json.loads(r.answers),
            "passed": bool(r.passed),
            "submitted_at": iso(r.submitted_at),
        }
        for r in rows
    ]


def export_attention_checks(conn: Connection, study_name: str) -> list[dict[str, Any]]:
    """The answers to attention checks, one record per check page, apart from the ratings."""
    by_page: dict[tuple[int, int], dict[str, Any]] = {}
    for row in conn.execute(
        select(judgments).where(judgments.c.study == study_name).order_by(judgments.c.id)
    ).all():
        extra = json.loads(row.extra)
        if not extra.get("check"):
            continue
        key = (int(row.participant_id), int(row.slot_id))
        record = by_page.setdefault(
            key,
            {
                "rater_id": rater_id(int(row.participant_id)),
                "study": study_name,
                "check": str(row.item_id).removeprefix("check:"),
                "answers": {},
                "passed": bool(extra.get("check_passed")),
                "sequence": extra.get("sequence"),
                "time_s": round(float(row.time_s), 3),
            },
        )
        record["answers"][str(row.criterion)] = float(row.value)
    return list(by_page.values())


def _page_times(
    conn: Connection, study: Study
) -> dict[int, dict[int, tuple[float, float | None, bool, bool]]]:
    """Per participant and page: time, gap before it, whether it was a check, and passed."""
    pages: dict[int, dict[int, tuple[float, float | None, bool, bool]]] = {}
    for row in conn.execute(
        select(
            judgments.c.participant_id,
            judgments.c.slot_id,
            judgments.c.time_s,
            judgments.c.gap_s,
            judgments.c.extra,
        ).where(judgments.c.study == study.name)
    ).all():
        data = json.loads(row.extra)
        pages.setdefault(int(row.participant_id), {})[int(row.slot_id)] = (
            float(row.time_s),
            None if row.gap_s is None else float(row.gap_s),
            bool(data.get("check")),
            bool(data.get("check_passed")),
        )
    return pages


def _slot_orders(conn: Connection, study: Study) -> tuple[dict[int, list[str]], dict[int, int]]:
    """Per participant: the items in the order shown, and how many are still reserved."""
    orders: dict[int, list[str]] = {}
    reserved: dict[int, int] = {}
    for pid, key, status in conn.execute(
        select(slots.c.participant_id, slots.c.item_key, slots.c.status)
        .where(slots.c.study == study.name, slots.c.participant_id.is_not(None))
        .order_by(slots.c.participant_id, slots.c.batch_pos)
    ).all():
        orders.setdefault(int(pid), []).append(str(key))
        if status == "reserved":
            reserved[int(pid)] = reserved.get(int(pid), 0) + 1
    return orders, reserved


def _training_outcomes(
    conn: Connection, study: Study
) -> tuple[dict[int, tuple[int, int]], dict[int, tuple[int, bool]]]:
    """Per participant: training answers (total, right) and comprehension (attempts, passed)."""
    training = {
        int(pid): (int(total), int(right or 0))
        for pid, total, right in conn.execute(
            select(
                training_answers.c.participant_id,
                func.count(),
                func.sum(training_answers.c.correct),
            )
            .where(training_answers.c.study == study.name)
            .group_by(training_answers.c.participant_id)
        ).all()
    }
    comprehension = {
        int(pid): (int(total), bool(passed))
        for pid, total, passed in conn.execute(
            select(
                comprehension_answers.c.participant_id,
                func.count(),
                func.max(comprehension_answers.c.passed),
            )
            .where(comprehension_answers.c.study == study.name)
            .group_by(comprehension_answers.c.participant_id)
        ).all()
    }
    return training, comprehension


def participant_summaries(conn: Connection, study: Study) -> list[dict[str, Any]]:
    """One record per participant: progress, timing, quality-control outcomes (attention
    checks, comprehension check), platform identifiers and the order pages were shown in."""
    people = conn.execute(
        select(participants, members.c.seq)
        .select_from(participants.outerjoin(members, members.c.participant_id == participants.c.id))
        .where(participants.c.kind == KIND, participants.c.session == study.name)
        .order_by(participants.c.id)
    ).all()
    pages = _page_times(conn, study)
    orders, reserved = _slot_orders(conn, study)
    training, comprehension = _training_outcomes(conn, study)
    typing = _typing_by_participant(conn, study)
    summaries = []
    for p in people:
        mine = pages.get(int(p.id), {})
        item_times = [t for t, _, check, _ in mine.values() if not check]
        gaps = [g for _, g, _, _ in mine.values() if g is not None]
        checks = [passed for _, _, check, passed in mine.values() if check]
        tr_total, tr_right = training.get(int(p.id), (0, 0))
        attempts, passed = comprehension.get(int(p.id), (0, False))
        summaries.append(
            {
                "rater_id": rater_id(int(p.id)),
                "study": study.name,
                "external_id": p.external_id,
                "platform": json.loads(p.platform) if p.platform else {},
                "status": p.status or ("finished" if p.finished_at else "active"),
                "sequence": p.seq,
                "created_at": iso(p.created_at),
                "started_at": iso(p.started_at),
                "finished_at": iso(p.finished_at),
                "pages": len(mine),
                "items": len(item_times),
                "reserved": reserved.get(int(p.id), 0),
                "median_time_s": round(statistics.median(item_times), 3) if item_times else None,
                "median_gap_s": round(statistics.median(gaps), 3) if gaps else None,
                "checks_passed": sum(checks),
                "checks_failed": len(checks) - sum(checks),
                "comprehension_attempts": attempts,
                "comprehension_passed": passed if attempts else None,
                "training_answered": tr_total,
                "training_correct": tr_right,
                "order": orders.get(int(p.id), []),
                "completion_code": p.completion_code,
                **typing.get(int(p.id), summarise([])),
            }
        )
    return summaries


def _typing_by_participant(conn: Connection, study: Study) -> dict[int, dict[str, Any]]:
    """Each participant's free-text answers at a glance (see
    :func:`storyeval.server.integrity.summarise`)."""
    answers: dict[int, list[Any]] = {}
    rows = conn.execute(
        select(responses.c.participant_id, responses.c.integrity).where(
            responses.c.study == study.name
        )
    ).all()
    for pid, integrity in rows:
        answers.setdefault(int(pid), []).append(json.loads(integrity) if integrity else None)
    return {pid: summarise(found) for pid, found in answers.items()}


def progress(conn: Connection, study: Study) -> dict[str, Any]:
    """Counts for the admin view: participants, slots by status, judgments, per-item coverage."""
    by_status: dict[Any, Any] = dict(
        conn.execute(
            select(slots.c.status, func.count())
            .where(slots.c.study == study.name, slots.c.kind == "item")
            .group_by(slots.c.status)
        ).all()
    )
    people = conn.execute(
        select(
            func.count(),
            func.count(participants.c.started_at),
            func.count(participants.c.finished_at),
            func.count(participants.c.status),
        ).where(participants.c.kind == KIND, participants.c.session == study.name)
    ).one()
    n_judgments = conn.execute(
        select(func.count()).select_from(judgments).where(judgments.c.study == study.name)
    ).scalar_one()
    coverage_rows = conn.execute(
        select(slots.c.item_key, slots.c.condition, slots.c.status, func.count())
        .where(slots.c.study == study.name, slots.c.kind == "item")
        .group_by(slots.c.item_key, slots.c.condition, slots.c.status)
    ).all()
    coverage: dict[str, dict[str, Any]] = {}
    for key, condition, status, count in coverage_rows:
        entry = coverage.setdefault(
            key,
            {
                "item": key,
                "condition": condition,
                "done": 0,
                "reserved": 0,
                "open": 0,
                "settled": 0,
            },
        )
        entry[str(status)] = int(count)
    return {
        "study": study.name,
        "version": study.version,
        "protocol": study.protocol,
        "participants": int(people[0]),
        "started": int(people[1]),
        "finished": int(people[2]) - int(people[3]),
        "screened_out_or_returned": int(people[3]),
        "slots_total": int(sum(by_status.values())),
        "slots_open": int(by_status.get("open", 0)),
        "slots_reserved": int(by_status.get("reserved", 0)),
        "slots_done": int(by_status.get("done", 0)),
        "slots_settled": int(by_status.get("settled", 0)),
        "judgments": int(n_judgments),
        "raters_per_item": study.raters_per_item,
        "items": sorted(coverage.values(), key=lambda e: e["item"]),
    }


def stored_and_done_slots(conn: Connection) -> tuple[set[int], set[int]]:
    """The slots with stored judgments and the slots marked done (the same set in a consistent
    database: a page's judgments and its slot are committed together)."""
    stored = set(conn.execute(select(judgments.c.slot_id)).scalars())
    done = set(conn.execute(select(slots.c.id).where(slots.c.status == "done")).scalars())
    return stored, done


def max_raters_per_item(conn: Connection, study_name: str) -> int:
    """The largest number of distinct participants who completed any one item (quota check)."""
    counts = conn.execute(
        select(slots.c.item_key, func.count(func.distinct(slots.c.participant_id)))
        .where(slots.c.study == study_name, slots.c.kind == "item", slots.c.status == "done")
        .group_by(slots.c.item_key)
    ).all()
    return max((int(c) for _, c in counts), default=0)


def export_to_directory(
    db: Database, study: Study, out_dir: str | Path, *, fmt: str = "jsonl"
) -> dict[str, int]:
    """Write a study's data to ``out_dir`` (atomically, all files or none).

    Files: ``judgments.<fmt>`` (long format, readable by
    :func:`storyeval.corpus.read_judgments`), ``responses.jsonl`` (free text),
    ``participants.jsonl`` (one record per participant), ``training.jsonl`` (training answers),
    ``attention_checks.jsonl``, ``comprehension.jsonl``, ``routing.jsonl`` (adaptive
    assignment: why each slot went to whom) and ``study.json`` (the definition that
    was run, with its version). Returns the number of records per file.
    """
    from storyeval.base.io import atomic_directory
    from storyeval.corpus import write_judgments, write_records

    check_choice(fmt, ("jsonl", "csv"), "fmt")
    with db.read() as conn:
        definition = stored_definition(conn, study.name)
        if definition is None:
            raise StoryevalError(
                f"the database {db.describe()} holds no study named {study.name!r}"
            )
        if definition.get("version") not in (study.version, study.legacy_version):
            raise StudyVersionError(
                f"the database holds study {study.name!r} version {definition.get('version')}, "
                f"but the study file gives version {study.version}"
            )
        records = export_judgments(conn, study.name, version=study.version)
        tables = {
            "responses.jsonl": export_responses(conn, study.name),
            "participants.jsonl": participant_summaries(conn, study),
            "training.jsonl": export_training(conn, study.name),
            "attention_checks.jsonl": export_attention_checks(conn, study.name),
            "comprehension.jsonl": export_comprehension(conn, study.name),
        }
        if study.config.assignment.adaptive is not None:
            tables["routing.jsonl"] = export_routing(conn, study.name)
    counts = {}
    with atomic_directory(Path(out_dir), "study export") as tmp:
        counts[f"judgments.{fmt}"] = (
            write_judgments(tmp / f"judgments.{fmt}", records) if records else 0
        )
        if not records:
            (tmp / f"judgments.{fmt}").write_text("", encoding="utf-8")
        for name, rows in tables.items():
            counts[name] = write_records(tmp / name, rows)
        (tmp / "study.json").write_text(
            json.dumps(definition, indent=2, ensure_ascii=False) + "\n", encoding="utf-8"
        )
        counts["study.json"] = 1
    return counts
