"""The tables of human evaluation studies and their registration.

Invariants the tests check on SQLite and PostgreSQL:

* **Quota**: an item has ``raters_per_item`` slots and a slot is claimed by at most one
  participant, inside a transaction that holds the study row lock (PostgreSQL ``SELECT ... FOR
  UPDATE``; SQLite ``BEGIN IMMEDIATE``), so no item is ever rated more often than planned,
  however many participants (and server processes) start at once. No participant gets the
  same item twice (unique constraint).
* **Idempotence**: a page is stored once; submitting it again (a double click, a retried
  request) changes nothing and is acknowledged the same way (first answer wins).
* **Isolation**: every read and write of a slot is filtered by the participant who owns it.
* **Durability**: callers acknowledge only after the transaction committed.
"""

from __future__ import annotations

import json
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
    insert,
    select,
    update,
)

from storyeval.base.errors import StoryevalError
from storyeval.human.assign import build_slots
from storyeval.human.model import Study
from storyeval.server.db import Database, metadata
from storyeval.server.participants import participants

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
    Column("participant_id", Integer, ForeignKey(participants.c.id), nullable=True),
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
    Column("participant_id", Integer, ForeignKey(participants.c.id), primary_key=True),
    Column("study", String(128), ForeignKey("studies.name"), nullable=False),
    Column("seq", Integer, nullable=False),
    Column("batches", Integer, nullable=False),
    Column("items_closed", Integer, nullable=False),
    Column("questions_done", Integer, nullable=False),
    Column("comprehension_passed", Integer, nullable=True),
)

judgments = Table(
    "study_judgments",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("study", String(128), ForeignKey("studies.name"), nullable=False),
    Column("slot_id", Integer, ForeignKey("study_slots.id"), nullable=False),
    Column("participant_id", Integer, ForeignKey(participants.c.id), nullable=False),
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
    Column("participant_id", Integer, ForeignKey(participants.c.id), nullable=False),
    Column("scope", String(64), nullable=False),
    Column("item_id", String(256), nullable=True),
    Column("question", String(160), nullable=False),
    Column("text", Text, nullable=False),
    Column("served_at", Float, nullable=True),
    Column("submitted_at", Float, nullable=False),
    Column("time_s", Float, nullable=True),
    # how the answer was produced (storyeval.server.integrity: counts and times, no content)
    Column("integrity", Text, nullable=True),
    UniqueConstraint("participant_id", "scope", "question", name="uq_response_once"),
)

routing = Table(
    "study_routing",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("study", String(128), ForeignKey("studies.name"), nullable=False),
    Column("slot_id", Integer, ForeignKey("study_slots.id"), nullable=False),
    Column("participant_id", Integer, ForeignKey(participants.c.id), nullable=False),
    Column("item_key", String(160), nullable=False),
    Column("phase", String(12), nullable=False),
    Column("rank", Integer, nullable=False),
    Column("done_before", Integer, nullable=False),
    Column("planned_before", Integer, nullable=False),
    Column("width", Float, nullable=True),
    Column("anticipated_width", Float, nullable=True),
    Column("routed_at", Float, nullable=False),
    Index("ix_study_routing_study", "study", "id"),
)
"""One row per slot adaptive assignment handed out: why that item, at that moment."""

training_answers = Table(
    "study_training",
    metadata,
    Column("participant_id", Integer, ForeignKey(participants.c.id), primary_key=True),
    Column("idx", Integer, primary_key=True),
    Column("study", String(128), ForeignKey("studies.name"), nullable=False),
    Column("answer", Text, nullable=False),
    Column("correct", Integer, nullable=True),
    Column("served_at", Float, nullable=True),
    Column("submitted_at", Float, nullable=False),
)

comprehension_answers = Table(
    "study_comprehension",
    metadata,
    Column("participant_id", Integer, ForeignKey(participants.c.id), primary_key=True),
    Column("attempt", Integer, primary_key=True),
    Column("study", String(128), ForeignKey("studies.name"), nullable=False),
    Column("answers", Text, nullable=False),
    Column("passed", Integer, nullable=False),
    Column("submitted_at", Float, nullable=False),
)


class StudyVersionError(StoryevalError):
    """The database holds a study of the same name defined differently."""


def iso(ts: float | None) -> str | None:
    """Seconds since the epoch as an ISO 8601 UTC timestamp (``None`` stays ``None``).

    >>> iso(0.0)
    '1970-01-01T00:00:00.000Z'
    """
    if ts is None:
        return None
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def page_key(slot_id: int) -> str:
    """The key of a page view (participant, page, slot) for server-side timing."""
    return f"slot:{slot_id}"


def register_study(db: Database, study: Study, *, now: float) -> bool:
    """Store the study, its items and its slots unless already there; return whether created.

    A study stored by storyeval 0.1 from the same file (same items) is recognised by its 0.1
    version and kept, its version updated.

    Raises
    ------
    StudyVersionError
        If the database holds a study of this name with another version: the study file, or
        its story file, changed after data collection started.
    """

    def work(conn: Connection) -> bool:
        row = conn.execute(select(studies).where(studies.c.name == study.name)).first()
        if row is not None:
            if row.version == study.version:
                return False
            if study.legacy_version is not None and row.version == study.legacy_version:
                conn.execute(
                    update(studies)
                    .where(studies.c.name == study.name)
                    .values(
                        version=study.version,
                        definition=json.dumps(study.definition(), ensure_ascii=False),
                    )
                )
                return False
            raise StudyVersionError(
                f"the database {db.describe()} already holds study {study.name!r} with version "
                f"{row.version}, but the study file now gives version {study.version}: the study "
                "or its story file changed since data collection started. Give the changed study "
                "a new name, or use a new database."
            )
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
                for spec in build_slots(study)
            ],
        )
        return True

    return db.run(work)


def stored_definition(conn: Connection, name: str) -> dict[str, Any] | None:
    """The study definition stored with the database (None for a new database)."""
    value = conn.execute(
        select(studies.c.definition).where(studies.c.name == name)
    ).scalar_one_or_none()
    return None if value is None else dict(json.loads(value))
