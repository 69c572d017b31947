"""Persistence of human evaluation studies: items, slots (quota units), judgments, free-text
responses and training answers; claiming, submitting and exporting.

Invariants the tests check on SQLite and PostgreSQL:

* **Quota**: an item has ``raters_per_item`` slots and a slot is claimed by at most one
  participant, inside a transaction that holds the study row lock (PostgreSQL ``SELECT ... FOR
  UPDATE``; SQLite ``BEGIN IMMEDIATE``), so no item is ever rated more often than planned,
  however many participants start at once. No participant gets the same item twice (unique
  constraint).
* **Idempotence**: a page is stored once; submitting it again (a double click, a retried
  request) changes nothing and is acknowledged the same way (first answer wins).
* **Isolation**: every read and write of a slot is filtered by the participant who owns it.
* **Durability**: callers acknowledge only after the transaction committed.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    Column,
    Connection,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Table,
    Text,
    UniqueConstraint,
    func,
    insert,
    select,
    update,
)

from storyeval.corpus import Judgment
from storyeval.errors import StoryevalError
from storyeval.human.assign import build_slots, check_positions, condition_preferences, order_batch
from storyeval.human.study import Item, Study
from storyeval.human.study import Text as StoryText
from storyeval.server.db import Database, metadata
from storyeval.server.participants import (
    Participant,
    first_view,
    lock_participant,
    mark_finished,
    mark_started,
    note_submission,
    participants,
    rater_id,
)

KIND = "study"

studies = Table(
    "studies",
    metadata,
    Column("name", String(128), primary_key=True),
    Column("version", String(32), nullable=False),
    Column("protocol", String(32), nullable=False),
    Column("definition", Text, nullable=False),
    Column("created_at", Float, nullable=False),
)

study_items = Table(
    "study_items",
    metadata,
    Column("study", String(128), ForeignKey("studies.name"), primary_key=True),
    Column("key", String(160), primary_key=True),
    Column("position", Integer, nullable=False),
    Column("condition", String(256), nullable=False),
    Column("payload", Text, nullable=False),
)

slots = Table(
    "study_slots",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("study", String(128), ForeignKey("studies.name"), nullable=False),
    Column("seq", Integer, nullable=False),
    Column("kind", String(8), nullable=False),
    Column("item_key", String(160), nullable=False),
    Column("group_key", String(160), nullable=False),
    Column("condition", String(256), nullable=False),
    Column("replicate", Integer, nullable=False),
    Column("layout", String(32), nullable=False),
    Column("status", String(12), nullable=False),
    Column("participant_id", Integer, ForeignKey("participants.id"), nullable=True),
    Column("batch", Integer, nullable=True),
    Column("batch_pos", Integer, nullable=True),
    Column("reserved_at", Float, nullable=True),
    Column("done_at", Float, nullable=True),
    UniqueConstraint("study", "item_key", "participant_id", name="uq_slot_item_participant"),
    Index("ix_study_slots_claim", "study", "status", "kind", "seq"),
    Index("ix_study_slots_participant", "participant_id", "batch_pos"),
)

members = Table(
    "study_participants",
    metadata,
    Column("participant_id", Integer, ForeignKey("participants.id"), primary_key=True),
    Column("study", String(128), ForeignKey("studies.name"), nullable=False),
    Column("seq", Integer, nullable=False),
    Column("batches", Integer, nullable=False),
    Column("items_closed", Integer, nullable=False),
    Column("questions_done", Integer, nullable=False),
)

judgments = Table(
    "study_judgments",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("study", String(128), ForeignKey("studies.name"), nullable=False),
    Column("slot_id", Integer, ForeignKey("study_slots.id"), nullable=False),
    Column("participant_id", Integer, ForeignKey("participants.id"), nullable=False),
    Column("item_id", String(256), nullable=False),
    Column("criterion", String(160), nullable=False),
    Column("value", Float, nullable=False),
    Column("condition", String(256), nullable=True),
    Column("served_at", Float, nullable=False),
    Column("submitted_at", Float, nullable=False),
    Column("time_s", Float, nullable=False),
    Column("gap_s", Float, nullable=True),
    Column("extra", Text, nullable=False),
    UniqueConstraint("slot_id", "item_id", "criterion", name="uq_judgment_once"),
    Index("ix_study_judgments_study", "study", "id"),
)

responses = Table(
    "study_responses",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("study", String(128), ForeignKey("studies.name"), nullable=False),
    Column("participant_id", Integer, ForeignKey("participants.id"), nullable=False),
    Column("scope", String(64), nullable=False),
    Column("item_id", String(256), nullable=True),
    Column("question", String(160), nullable=False),
    Column("text", Text, nullable=False),
    Column("served_at", Float, nullable=True),
    Column("submitted_at", Float, nullable=False),
    Column("time_s", Float, nullable=True),
    UniqueConstraint("participant_id", "scope", "question", name="uq_response_once"),
)

training_answers = Table(
    "study_training",
    metadata,
    Column("participant_id", Integer, ForeignKey("participants.id"), primary_key=True),
    Column("idx", Integer, primary_key=True),
    Column("study", String(128), ForeignKey("studies.name"), nullable=False),
    Column("answer", Text, nullable=False),
    Column("correct", Integer, nullable=True),
    Column("served_at", Float, nullable=True),
    Column("submitted_at", Float, nullable=False),
)


class StudyVersionError(StoryevalError):
    """The database holds a study of the same name defined differently."""


def iso(ts: float | None) -> str | None:
    """Seconds since the epoch as an ISO 8601 UTC timestamp (``None`` stays ``None``)."""
    if ts is None:
        return None
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def page_key(slot_id: int) -> str:
    return f"slot:{slot_id}"


# ----------------------------------------------------------------------------- registration


def register_study(db: Database, study: Study, *, now: float) -> bool:
    """Store the study, its items and its slots unless already there; return whether created.

    Raises
    ------
    StudyVersionError
        If the database holds a study of this name with another version: the study file, or
        its story file, changed after data collection started.
    """

    def work(conn: Connection) -> bool:
        row = conn.execute(select(studies).where(studies.c.name == study.name)).first()
        if row is not None:
            if row.version != study.version:
                raise StudyVersionError(
                    f"the database {db.describe()} already holds study {study.name!r} with version "
                    f"{row.version}, but the study file now gives version {study.version}: the study "
                    "or its story file changed since data collection started. Give the changed study "
                    "a new name, or use a new database."
                )
            return False
        conn.execute(
            insert(studies).values(
                name=study.name,
                version=study.version,
                protocol=study.protocol,
                definition=json.dumps(study.definition(), ensure_ascii=False),
                created_at=now,
            )
        )
        conn.execute(
            insert(study_items),
            [
                {
                    "study": study.name,
                    "key": item.key,
                    "position": position,
                    "condition": item.condition,
                    "payload": json.dumps(item.to_dict(), ensure_ascii=False),
                }
                for position, item in enumerate(study.items)
            ],
        )
        specs = build_slots(study)
        conn.execute(
            insert(slots),
            [
                {
                    "study": study.name,
                    "seq": spec.seq,
                    "kind": "item",
                    "item_key": spec.item_key,
                    "group_key": spec.group,
                    "condition": spec.condition,
                    "replicate": spec.replicate,
                    "layout": ",".join(str(i) for i in spec.layout),
                    "status": "open",
                }
                for spec in specs
            ],
        )
        return True

    return db.run(work)


def stored_definition(conn: Connection, name: str) -> dict[str, Any] | None:
    value = conn.execute(
        select(studies.c.definition).where(studies.c.name == name)
    ).scalar_one_or_none()
    return None if value is None else dict(json.loads(value))


# ----------------------------------------------------------------------------- state


@dataclass(frozen=True)
class Member:
    participant_id: int
    seq: int
    batches: int
    items_closed: bool
    questions_done: bool


@dataclass(frozen=True)
class Step:
    """Where a participant is in the study."""

    kind: str  # welcome | full | training | item | explain | more | questions | done
    slot_id: int | None = None
    index: int | None = None


@dataclass(frozen=True)
class SlotRow:
    id: int
    kind: str
    item_key: str
    condition: str
    layout: tuple[int, ...]
    status: str
    participant_id: int | None
    batch: int | None
    batch_pos: int | None
    reserved_at: float | None
    done_at: float | None

    @classmethod
    def from_row(cls, row: Any) -> SlotRow:
        m = row._mapping
        return cls(
            int(m["id"]),
            str(m["kind"]),
            str(m["item_key"]),
            str(m["condition"]),
            tuple(int(v) for v in str(m["layout"]).split(",") if v != ""),
            str(m["status"]),
            m["participant_id"],
            m["batch"],
            m["batch_pos"],
            m["reserved_at"],
            m["done_at"],
        )


def get_member(conn: Connection, participant_id: int) -> Member | None:
    row = conn.execute(select(members).where(members.c.participant_id == participant_id)).first()
    if row is None:
        return None
    return Member(
        int(row.participant_id),
        int(row.seq),
        int(row.batches),
        bool(row.items_closed),
        bool(row.questions_done),
    )


def open_slot_count(conn: Connection, study: Study) -> int:
    return int(
        conn.execute(
            select(func.count())
            .select_from(slots)
            .where(slots.c.study == study.name, slots.c.status == "open", slots.c.kind == "item")
        ).scalar_one()
    )


def participant_slots(conn: Connection, participant_id: int) -> list[SlotRow]:
    rows = conn.execute(
        select(slots).where(slots.c.participant_id == participant_id).order_by(slots.c.batch_pos)
    ).all()
    return [SlotRow.from_row(r) for r in rows]


def slot_of(
    conn: Connection, participant_id: int, slot_id: int, *, lock: bool = False
) -> SlotRow | None:
    """The slot ``slot_id`` if (and only if) it belongs to this participant."""
    query = select(slots).where(slots.c.id == slot_id, slots.c.participant_id == participant_id)
    if lock:
        query = query.with_for_update()
    row = conn.execute(query).first()
    return None if row is None else SlotRow.from_row(row)


def items_done(conn: Connection, participant_id: int) -> int:
    return int(
        conn.execute(
            select(func.count())
            .select_from(slots)
            .where(
                slots.c.participant_id == participant_id,
                slots.c.kind == "item",
                slots.c.status == "done",
            )
        ).scalar_one()
    )


def _pending_explanation(conn: Connection, study: Study, participant_id: int) -> int | None:
    if study.protocol != "detection":
        return None
    done = (
        conn.execute(
            select(slots.c.id)
            .where(slots.c.participant_id == participant_id, slots.c.status == "done")
            .order_by(slots.c.batch_pos)
        )
        .scalars()
        .all()
    )
    if not done:
        return None
    answered = set(
        conn.execute(
            select(responses.c.scope).where(
                responses.c.participant_id == participant_id, responses.c.question == "explanation"
            )
        ).scalars()
    )
    for slot_id in done:
        if page_key(slot_id) not in answered:
            return int(slot_id)
    return None


def next_step(conn: Connection, study: Study, participant: Participant) -> Step:
    """The page the participant should see now."""
    if participant.finished_at is not None:
        return Step("done")
    member = get_member(conn, participant.id)
    if participant.started_at is None or member is None:
        if open_slot_count(conn, study) == 0:
            return Step("full")
        return Step("welcome")
    n_training = conn.execute(
        select(func.count())
        .select_from(training_answers)
        .where(training_answers.c.participant_id == participant.id)
    ).scalar_one()
    if n_training < len(study.training):
        return Step("training", index=int(n_training))
    explain = _pending_explanation(conn, study, participant.id)
    if explain is not None:
        return Step("explain", slot_id=explain)
    mine = participant_slots(conn, participant.id)
    pending = [s for s in mine if s.status == "reserved"]
    if pending:
        return Step("item", slot_id=pending[0].id)
    done = sum(1 for s in mine if s.kind == "item" and s.status == "done")
    if (
        not member.items_closed
        and done < study.max_items_per_participant
        and open_slot_count(conn, study) > 0
    ):
        return Step("more")  # also after reservations were released while the participant was away
    if done == 0 and not member.items_closed:
        return Step("full")
    if study.config.questions and not member.questions_done:
        return Step("questions")
    return Step("done")


# ----------------------------------------------------------------------------- claiming


def _lock_study(conn: Connection, study: Study) -> None:
    conn.execute(select(studies.c.name).where(studies.c.name == study.name).with_for_update()).one()


def release_expired(conn: Connection, study: Study, now: float) -> int:
    """Return to the pool the unanswered slots of participants inactive for longer than the
    reservation time; returns how many slots were released."""
    cutoff = now - study.config.assignment.reservation_minutes * 60.0
    inactive = select(participants.c.id).where(
        participants.c.kind == KIND,
        participants.c.session == study.name,
        participants.c.last_seen_at < cutoff,
    )
    result = conn.execute(
        update(slots)
        .where(
            slots.c.study == study.name,
            slots.c.status == "reserved",
            slots.c.kind == "item",
            slots.c.participant_id.in_(inactive),
        )
        .values(status="open", participant_id=None, batch=None, batch_pos=None, reserved_at=None)
    )
    return int(result.rowcount or 0)


def _claim_one(
    conn: Connection, study: Study, participant_id: int, condition: str | None
) -> SlotRow | None:
    # never the same item twice, nor two stories continuing the same prompt
    mine = select(slots.c.group_key).where(
        slots.c.participant_id == participant_id, slots.c.study == study.name
    )
    query = select(slots).where(
        slots.c.study == study.name,
        slots.c.status == "open",
        slots.c.kind == "item",
        slots.c.group_key.not_in(mine),
    )
    if condition is not None:
        query = query.where(slots.c.condition == condition)
    row = conn.execute(
        query.order_by(slots.c.seq).limit(1).with_for_update(skip_locked=True)
    ).first()
    return None if row is None else SlotRow.from_row(row)


def claim_batch(conn: Connection, study: Study, participant: Participant, now: float) -> int:
    """Reserve the participant's next batch of items (and, in the first batch, the attention
    checks). Must run in a write transaction; returns the number of items reserved."""
    _lock_study(conn, study)
    member = get_member(conn, participant.id)
    if member is None:
        raise RuntimeError("claim_batch needs a started participant")
    release_expired(conn, study, now)
    held = int(
        conn.execute(
            select(func.count())
            .select_from(slots)
            .where(slots.c.participant_id == participant.id, slots.c.kind == "item")
        ).scalar_one()
    )
    room = min(study.items_per_participant, study.max_items_per_participant - held)
    if room <= 0:
        return 0
    conditions = study.conditions
    preferences = condition_preferences(conditions, member.seq + member.batches, room)
    claimed: list[SlotRow] = []
    for preferred in preferences:
        row = _claim_one(conn, study, participant.id, preferred)
        if row is None:
            row = _claim_one(conn, study, participant.id, None)
        if row is None:
            break
        # reserve at once so the next query skips it
        conn.execute(
            update(slots)
            .where(slots.c.id == row.id, slots.c.status == "open")
            .values(status="reserved", participant_id=participant.id, reserved_at=now)
        )
        claimed.append(row)
    if not claimed:
        return 0
    position = {item.key: i for i, item in enumerate(study.items)}
    claimed.sort(key=lambda r: position.get(r.item_key, 0))
    order = order_batch(
        [r.condition for r in claimed],
        conditions=conditions,
        mode=study.config.assignment.order,
        participant_seq=member.seq + member.batches,
        seed=study.config.assignment.seed,
    )
    sequence: list[tuple[str, Any]] = [("item", claimed[i]) for i in order]
    if member.batches == 0 and study.checks:
        places = check_positions(
            len(sequence),
            [c.position for c in study.checks],
            seed=study.config.assignment.seed,
            participant_seq=member.seq,
        )
        for check, place in sorted(zip(study.checks, places, strict=True), key=lambda p: p[1]):
            sequence.insert(min(place, len(sequence)), ("check", check))
    start = int(
        conn.execute(
            select(func.coalesce(func.max(slots.c.batch_pos), 0)).where(
                slots.c.participant_id == participant.id
            )
        ).scalar_one()
    )
    batch = member.batches + 1
    for offset, (kind, entry) in enumerate(sequence, start=1):
        if kind == "item":
            conn.execute(
                update(slots)
                .where(slots.c.id == entry.id)
                .values(batch=batch, batch_pos=start + offset)
            )
        else:
            conn.execute(
                insert(slots).values(
                    study=study.name,
                    seq=0,
                    kind="check",
                    item_key=f"check:{entry.id}",
                    group_key=f"check:{entry.id}",
                    condition="attention-check",
                    replicate=0,
                    layout=",".join(str(i) for i in range(len(entry.texts))),
                    status="reserved",
                    participant_id=participant.id,
                    batch=batch,
                    batch_pos=start + offset,
                    reserved_at=now,
                )
            )
    conn.execute(
        update(members).where(members.c.participant_id == participant.id).values(batches=batch)
    )
    return len(claimed)


def start(conn: Connection, study: Study, participant: Participant, now: float) -> bool:
    """Consent given: register the participant in the study and reserve their first batch.

    Idempotent: a participant who already started is left as is. Returns whether any item is
    available to them.
    """
    _lock_study(conn, study)
    current = lock_participant(conn, participant.id)
    if current.started_at is not None and get_member(conn, participant.id) is not None:
        return True
    if open_slot_count(conn, study) == 0:
        release_expired(conn, study, now)
        if open_slot_count(conn, study) == 0:
            return False
    seq = int(
        conn.execute(
            select(func.count()).select_from(members).where(members.c.study == study.name)
        ).scalar_one()
    )
    conn.execute(
        insert(members).values(
            participant_id=participant.id,
            study=study.name,
            seq=seq,
            batches=0,
            items_closed=0,
            questions_done=0,
        )
    )
    mark_started(conn, participant.id, now)
    started = replace(current, started_at=current.started_at or now, last_seen_at=now)
    return claim_batch(conn, study, started, now) > 0


def claim_more(conn: Connection, study: Study, participant: Participant, now: float) -> int:
    lock_participant(conn, participant.id)
    if any(s.status == "reserved" for s in participant_slots(conn, participant.id)):
        return 0  # a batch is still open (double submission of the "more" form)
    return claim_batch(conn, study, participant, now)


def close_items(conn: Connection, participant: Participant) -> None:
    conn.execute(
        update(members).where(members.c.participant_id == participant.id).values(items_closed=1)
    )


def finish(conn: Connection, study: Study, participant: Participant, now: float) -> str:
    """Mark the participant finished; return their completion code (the study's, else a
    random one; see :func:`~storyeval.server.participants.mark_finished`)."""
    return mark_finished(conn, participant.id, now, code=study.config.completion.code)


# ----------------------------------------------------------------------------- what a page shows


@dataclass(frozen=True)
class Page:
    """An item page: the texts in display order and what to ask."""

    slot: SlotRow
    kind: str  # item | check
    item_key: str
    texts: tuple[StoryText, ...]
    item: Item | None
    position: int
    batch_size: int


def page_for(conn: Connection, study: Study, participant_id: int, slot: SlotRow) -> Page:
    if slot.kind == "check":
        check_id = slot.item_key.split(":", 1)[1]
        check = next(c for c in study.checks if c.id == check_id)
        texts = tuple(check.texts[i] for i in slot.layout)
        item = None
    else:
        item = _item(study, slot.item_key)
        texts = tuple(item.texts[i] for i in slot.layout)
    batch = [s for s in participant_slots(conn, participant_id) if s.batch == slot.batch]
    position = 1 + sum(1 for s in batch if (s.batch_pos or 0) < (slot.batch_pos or 0))
    return Page(slot, slot.kind, slot.item_key, texts, item, position, len(batch))


def _item(study: Study, key: str) -> Item:
    cache = getattr(study, "_item_index", None)
    if cache is None:
        cache = {item.key: item for item in study.items}
        object.__setattr__(study, "_item_index", cache)
    return cache[key]


# ----------------------------------------------------------------------------- submitting


@dataclass(frozen=True)
class SubmitResult:
    status: str  # saved | duplicate | missing
    judgments: int = 0
    check_passed: bool | None = None


def _judgment_rows(
    study: Study, page: Page, answers: Mapping[str, int]
) -> tuple[list[dict[str, Any]], bool | None]:
    """The judgments one page produces (see :func:`storyeval.human.study.answer_keys`)."""
    protocol = study.protocol
    rows: list[dict[str, Any]] = []
    texts = page.texts
    check_passed: bool | None = None
    common: dict[str, Any] = {"protocol": protocol}
    if page.kind == "check":
        check = next(c for c in study.checks if c.id == page.item_key.split(":", 1)[1])
        check_passed = all(answers.get(key) in values for key, values in check.expect.items())
        for key, given in answers.items():
            rows.append(
                {
                    "item_id": page.item_key,
                    "criterion": key,
                    "value": float(given),
                    "condition": "attention-check",
                    "extra": {**common, "check": True, "check_passed": check_passed},
                }
            )
        return rows, check_passed
    item = page.item
    assert item is not None
    if protocol == "likert":
        text = texts[0]
        for criterion in study.criteria:
            if criterion.name in answers:
                rows.append(
                    {
                        "item_id": text.id,
                        "criterion": criterion.name,
                        "value": float(answers[criterion.name]),
                        "condition": item.condition,
                        "extra": {**common, "system": text.system},
                    }
                )
    elif protocol == "side_by_side":
        for criterion in study.criteria:
            for pos in (1, 2):
                key = f"{criterion.name}@{pos}"
                if key not in answers:
                    continue
                text = texts[pos - 1]
                role = "model" if text.id == item.texts[0].id else "reference"
                rows.append(
                    {
                        "item_id": text.id,
                        "criterion": criterion.name,
                        "value": float(answers[key]),
                        "condition": text.system or role,
                        "extra": {
                            **common,
                            "system": text.system,
                            "role": role,
                            "position": pos,
                            "pair_item": item.key,
                        },
                    }
                )
    elif protocol == "pairwise":
        a, b = item.meta["system_a"], item.meta["system_b"]
        left_system = a if page.slot.layout[0] == 0 else b
        for criterion in study.criteria:
            if criterion.name not in answers:
                continue
            choice = answers[criterion.name]
            value: float
            chosen: str
            if choice == 0:
                value, chosen = 0.5, "tie"
            else:
                index = page.slot.layout[choice - 1]
                value, chosen = (1.0, a) if index == 0 else (0.0, b)
            rows.append(
                {
                    "item_id": item.key,
                    "criterion": criterion.name,
                    "value": value,
                    "condition": item.condition,
                    "extra": {
                        **common,
                        "system_a": a,
                        "system_b": b,
                        "story_a": item.texts[0].id,
                        "story_b": item.texts[1].id,
                        "left": left_system,
                        "chosen": chosen,
                        "chosen_position": choice,
                    },
                }
            )
    elif protocol == "detection":
        text = texts[0]
        rows.append(
            {
                "item_id": text.id,
                "criterion": "source",
                "value": float(answers["source"]),
                "condition": item.condition,
                "extra": {**common, "system": text.system, "truth": item.meta.get("truth")},
            }
        )
    else:  # triangle
        picked = answers["odd"]
        odd = int(item.meta["odd_position"])
        rows.append(
            {
                "item_id": item.key,
                "criterion": "odd_one_out",
                "value": 1.0 if picked == odd else 0.0,
                "condition": item.condition,
                "extra": {
                    **common,
                    "order": item.meta["order"],
                    "odd_position": odd,
                    "chosen_position": picked,
                    "odd_system": item.meta["odd_system"],
                    "system_a": item.meta["system_a"],
                    "system_b": item.meta["system_b"],
                    "test": item.meta["test"],
                    "texts": [t.id for t in texts],
                },
            }
        )
    return rows, check_passed


def submit_page(
    conn: Connection,
    study: Study,
    participant: Participant,
    slot_id: int,
    answers: Mapping[str, int],
    now: float,
) -> SubmitResult:
    """Store the answers of one page, once. Must run in a write transaction."""
    slot = slot_of(conn, participant.id, slot_id, lock=True)
    if slot is None:
        return SubmitResult("missing")
    if slot.status == "done":
        return SubmitResult("duplicate")
    if slot.status != "reserved":
        return SubmitResult("missing")
    current = lock_participant(conn, participant.id)
    page = page_for(conn, study, participant.id, slot)
    rows, check_passed = _judgment_rows(study, page, answers)
    served = first_view(conn, participant.id, page_key(slot_id))
    if served is None:
        served = slot.reserved_at if slot.reserved_at is not None else now
    gap = note_submission(conn, current, now)
    time_s = max(0.0, now - served)
    for row in rows:
        extra = dict(row.pop("extra"))
        extra.update(
            {"page": slot_id, "batch_position": page.position, "layout": list(slot.layout)}
        )
        conn.execute(
            insert(judgments).values(
                study=study.name,
                slot_id=slot_id,
                participant_id=participant.id,
                served_at=served,
                submitted_at=now,
                time_s=time_s,
                gap_s=gap,
                extra=json.dumps(extra, ensure_ascii=False),
                **row,
            )
        )
    conn.execute(update(slots).where(slots.c.id == slot_id).values(status="done", done_at=now))
    return SubmitResult("saved", len(rows), check_passed)


def submit_response(
    conn: Connection,
    study: Study,
    participant: Participant,
    *,
    scope: str,
    question: str,
    text: str,
    item_id: str | None,
    served_at: float | None,
    now: float,
) -> bool:
    """Store one free-text answer once; returns False if it was already stored."""
    exists = conn.execute(
        select(responses.c.id).where(
            responses.c.participant_id == participant.id,
            responses.c.scope == scope,
            responses.c.question == question,
        )
    ).first()
    if exists is not None:
        return False
    conn.execute(
        insert(responses).values(
            study=study.name,
            participant_id=participant.id,
            scope=scope,
            item_id=item_id,
            question=question,
            text=text,
            served_at=served_at,
            submitted_at=now,
            time_s=None if served_at is None else max(0.0, now - served_at),
        )
    )
    return True


def mark_questions_done(conn: Connection, participant: Participant) -> None:
    conn.execute(
        update(members).where(members.c.participant_id == participant.id).values(questions_done=1)
    )


def submit_training(
    conn: Connection,
    study: Study,
    participant: Participant,
    index: int,
    answer: Mapping[str, int],
    served_at: float | None,
    now: float,
) -> bool:
    """Store a training answer once (``False`` if already stored or out of order)."""
    lock_participant(conn, participant.id)
    done = conn.execute(
        select(func.count())
        .select_from(training_answers)
        .where(training_answers.c.participant_id == participant.id)
    ).scalar_one()
    if index != done:
        return False
    correct = training_correct(study, index, answer)
    conn.execute(
        insert(training_answers).values(
            participant_id=participant.id,
            idx=index,
            study=study.name,
            answer=json.dumps(dict(answer)),
            correct=None if correct is None else int(correct),
            served_at=served_at,
            submitted_at=now,
        )
    )
    return True


def training_correct(study: Study, index: int, answer: Mapping[str, int]) -> bool | None:
    """Whether a training answer matches the given answer (``None`` for Likert ratings,
    where the reference ratings calibrate rather than grade)."""
    example = study.training[index]
    protocol = study.protocol
    if protocol == "detection":
        given = answer.get("source")
        if given is None or example.answer is None:
            return None
        return (int(given) >= 3) == (int(example.answer) >= 3)
    if protocol in ("pairwise", "triangle"):
        key = study.criteria[0].name if protocol == "pairwise" else "odd"
        return answer.get(key) == example.answer
    return None


def training_answer(conn: Connection, participant_id: int, index: int) -> dict[str, int] | None:
    value = conn.execute(
        select(training_answers.c.answer).where(
            training_answers.c.participant_id == participant_id, training_answers.c.idx == index
        )
    ).scalar_one_or_none()
    return None if value is None else {k: int(v) for k, v in json.loads(value).items()}


# ----------------------------------------------------------------------------- export


def export_judgments(
    conn: Connection, study_name: str, *, version: str | None = None
) -> list[Judgment]:
    """Every stored judgment of a study as long-format records (foundation ``Judgment``).

    ``time_s`` is the time from the page's first delivery to its submission; ``extra`` holds
    ``gap_s`` (seconds since the participant's previous submission), ``protocol``,
    ``study_version``, ``served_at`` / ``submitted_at`` (ISO 8601 UTC) and protocol details.
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
        extra = json.loads(row.extra)
        extra = {
            "gap_s": None if row.gap_s is None else round(float(row.gap_s), 3),
            "study_version": version,
            "served_at": iso(row.served_at),
            "submitted_at": iso(row.submitted_at),
            **extra,
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
        }
        for r in rows
    ]


def export_training(conn: Connection, study_name: str) -> list[dict[str, Any]]:
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


def participant_summaries(conn: Connection, study: Study) -> list[dict[str, Any]]:
    """One record per participant: progress, timing and quality-control outcomes."""
    people = conn.execute(
        select(participants, members.c.seq)
        .select_from(participants.outerjoin(members, members.c.participant_id == participants.c.id))
        .where(participants.c.kind == KIND, participants.c.session == study.name)
        .order_by(participants.c.id)
    ).all()
    pages: dict[int, dict[int, tuple[float, float | None, str]]] = {}
    checks: dict[int, list[bool]] = {}
    for row in conn.execute(
        select(
            judgments.c.participant_id,
            judgments.c.slot_id,
            judgments.c.time_s,
            judgments.c.gap_s,
            judgments.c.extra,
        ).where(judgments.c.study == study.name)
    ).all():
        pages.setdefault(int(row.participant_id), {})[int(row.slot_id)] = (
            float(row.time_s),
            None if row.gap_s is None else float(row.gap_s),
            row.extra,
        )
    for pid, by_slot in pages.items():
        for _, (_, _, extra) in by_slot.items():
            data = json.loads(extra)
            if data.get("check"):
                checks.setdefault(pid, []).append(bool(data.get("check_passed")))
    reserved: dict[Any, Any] = dict(
        conn.execute(
            select(slots.c.participant_id, func.count())
            .where(slots.c.study == study.name, slots.c.status == "reserved")
            .group_by(slots.c.participant_id)
        ).all()
    )
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
    summaries = []
    for p in people:
        mine = pages.get(int(p.id), {})
        item_times = [t for t, _, extra in mine.values() if not json.loads(extra).get("check")]
        gaps = [g for _, g, _ in mine.values() if g is not None]
        passed = checks.get(int(p.id), [])
        tr_total, tr_right = training.get(int(p.id), (0, 0))
        summaries.append(
            {
                "rater_id": rater_id(int(p.id)),
                "study": study.name,
                "external_id": p.external_id,
                "sequence": p.seq,
                "created_at": iso(p.created_at),
                "started_at": iso(p.started_at),
                "finished_at": iso(p.finished_at),
                "pages": len(mine),
                "items": len(item_times),
                "reserved": int(reserved.get(p.id, 0)),
                "median_time_s": round(statistics.median(item_times), 3) if item_times else None,
                "median_gap_s": round(statistics.median(gaps), 3) if gaps else None,
                "checks_passed": sum(passed),
                "checks_failed": len(passed) - sum(passed),
                "training_answered": tr_total,
                "training_correct": tr_right,
                "completion_code": p.completion_code,
            }
        )
    return summaries


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
            key, {"item": key, "condition": condition, "done": 0, "reserved": 0, "open": 0}
        )
        entry[str(status)] = int(count)
    quota = study.raters_per_item
    return {
        "study": study.name,
        "version": study.version,
        "protocol": study.protocol,
        "participants": int(people[0]),
        "started": int(people[1]),
        "finished": int(people[2]),
        "slots_total": int(sum(by_status.values())),
        "slots_open": int(by_status.get("open", 0)),
        "slots_reserved": int(by_status.get("reserved", 0)),
        "slots_done": int(by_status.get("done", 0)),
        "judgments": int(n_judgments),
        "raters_per_item": quota,
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
    db: Database, study: Study, out_dir: str | Any, *, fmt: str = "jsonl"
) -> dict[str, int]:
    """Write a study's data to ``out_dir`` (atomically, all files or none).

    Files: ``judgments.<fmt>`` (long format, readable by
    :func:`storyeval.corpus.read_judgments`), ``responses.jsonl`` (free text),
    ``participants.jsonl`` (one record per participant), ``training.jsonl`` (training answers)
    and ``study.json`` (the definition that was run, with its version). Returns the number of
    records per file.
    """
    from pathlib import Path

    from storyeval.corpus import write_judgments, write_records
    from storyeval.io import atomic_directory

    if fmt not in ("jsonl", "csv"):
        raise ValueError(f"fmt must be one of jsonl, csv; got {fmt!r}")
    with db.read() as conn:
        definition = stored_definition(conn, study.name)
        if definition is None:
            raise StoryevalError(
                f"the database {db.describe()} holds no study named {study.name!r}"
            )
        if definition.get("version") != study.version:
            raise StudyVersionError(
                f"the database holds study {study.name!r} version {definition.get('version')}, "
                f"but the study file gives version {study.version}"
            )
        records = export_judgments(conn, study.name, version=study.version)
        answers = export_responses(conn, study.name)
        people = participant_summaries(conn, study)
        training = export_training(conn, study.name)
    target = Path(out_dir)
    counts = {}
    with atomic_directory(target) as tmp:
        counts[f"judgments.{fmt}"] = (
            write_judgments(tmp / f"judgments.{fmt}", records) if records else 0
        )
        if not records:
            (tmp / f"judgments.{fmt}").write_text("", encoding="utf-8")
        counts["responses.jsonl"] = write_records(tmp / "responses.jsonl", answers)
        counts["participants.jsonl"] = write_records(tmp / "participants.jsonl", people)
        counts["training.jsonl"] = write_records(tmp / "training.jsonl", training)
        (tmp / "study.json").write_text(
            json.dumps(definition, indent=2, ensure_ascii=False) + "\n", encoding="utf-8"
        )
        counts["study.json"] = 1
    return counts
