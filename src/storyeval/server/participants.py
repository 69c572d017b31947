"""Participants, their tokens and the time they spend on each page: the core every session type
(studies now, collaborative-writing sessions later) builds on.

A participant belongs to one session (``kind`` and ``session`` name, e.g. ``study`` /
``likert-example``) and is identified by an unguessable token (256 bits from :mod:`secrets`)
that appears in their link ``/p/<token>``. A session type keeps its own tables keyed by
``participants.id``.

Time per page: :func:`record_view` stores when a page was first served to a participant and
:func:`note_submission` when they last submitted anything, so a session type can report the
time from page delivery to submission and the gap between consecutive submissions.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
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
    bindparam,
    func,
    insert,
    select,
    update,
)
from sqlalchemy.exc import IntegrityError

from storyeval.base.validation import check_choice
from storyeval.server.db import HotQuery, metadata

TOKEN_BYTES = 32
MAX_EXTERNAL_ID = 256
STATUSES = ("screened_out", "returned")
"""How a participant left other than by completing: failed the comprehension check (a paid
screen-out, data kept apart) or declined consent (returned the study)."""

participants = Table(
    "participants",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("token", String(64), nullable=False, unique=True),
    Column("kind", String(32), nullable=False),
    Column("session", String(128), nullable=False),
    Column("external_id", String(256), nullable=True),
    Column("created_at", Float, nullable=False),
    Column("started_at", Float, nullable=True),
    Column("finished_at", Float, nullable=True),
    Column("last_seen_at", Float, nullable=True),
    Column("last_submit_at", Float, nullable=True),
    Column("completion_code", String(64), nullable=True),
    Column("status", String(16), nullable=True),
    Column("browser_key", String(64), nullable=True),
    Column("platform", Text, nullable=True),
    # the last POST that changed the participant's state: reservations are kept by work, not by
    # reloading a page (GETs move last_seen_at only)
    Column("active_at", Float, nullable=True),
    # a keyed hash of the network address that consented (open enrollment), never the address
    Column("client_key", String(64), nullable=True),
    UniqueConstraint("kind", "session", "external_id", name="uq_participant_external"),
    Index("ix_participants_session", "kind", "session"),
)

page_views = Table(
    "page_views",
    metadata,
    Column("participant_id", Integer, ForeignKey("participants.id"), primary_key=True),
    Column("page", String(128), primary_key=True),
    Column("first_served_at", Float, nullable=False),
    Column("last_served_at", Float, nullable=False),
    Column("views", Integer, nullable=False),
)

server_meta = Table(
    "storyeval_meta",
    metadata,
    Column("key", String(64), primary_key=True),
    Column("value", Text, nullable=False),
)


# Statements of the hot path, built once (building a statement costs more than running it).
_BY_TOKEN = select(participants).where(participants.c.token == bindparam("token"))
_BY_ID_LOCKED = select(participants).where(participants.c.id == bindparam("pid")).with_for_update()
PARTICIPANT_COLUMNS = (
    "id, token, kind, session, external_id, created_at, started_at, finished_at, "
    "last_seen_at, last_submit_at, completion_code, status, browser_key, platform, active_at, "
    "client_key"
)
"""The columns of :class:`Participant`, in its field order (for hand-written queries)."""
_FIRST_VIEW = HotQuery(
    "SELECT first_served_at FROM page_views WHERE participant_id = :pid AND page = :page"
)
_NOTE_VIEW = HotQuery(
    "INSERT INTO page_views (participant_id, page, first_served_at, last_served_at, views) "
    "VALUES (:pid, :page, :now, :now, 1) ON CONFLICT DO NOTHING"
)
_VIEW_AGAIN = HotQuery(
    "UPDATE page_views SET last_served_at = :now, views = views + 1 "
    "WHERE participant_id = :pid AND page = :page"
)
_NOTE_SUBMISSION = HotQuery(
    "UPDATE participants SET last_submit_at = :now, last_seen_at = :now, active_at = :now "
    "WHERE id = :pid"
)
_NOTE_ACTIVE = HotQuery(
    "UPDATE participants SET last_seen_at = :now, active_at = :now WHERE id = :pid"
)


def new_token() -> str:
    """An unguessable URL-safe token (256 random bits).

    >>> len(new_token()) >= 43
    True
    """
    return secrets.token_urlsafe(TOKEN_BYTES)


@dataclass(frozen=True)
class Participant:
    """A participant row."""

    id: int
    token: str
    kind: str
    session: str
    external_id: str | None
    created_at: float
    started_at: float | None
    finished_at: float | None
    last_seen_at: float | None
    last_submit_at: float | None
    completion_code: str | None
    status: str | None = None
    browser_key: str | None = None
    platform: str | None = None
    active_at: float | None = None
    client_key: str | None = None

    @classmethod
    def from_row(cls, row: Any) -> Participant:
        """A participant from a row of the participants table."""
        return cls(**{name: row._mapping[name] for name in cls.__dataclass_fields__})

    @property
    def platform_parameters(self) -> dict[str, str]:
        """The crowd platform's URL parameters stored when the participant joined."""
        import json

        return dict(json.loads(self.platform)) if self.platform else {}


def create_participants(
    conn: Connection, kind: str, session: str, count: int, *, now: float
) -> list[Participant]:
    """Create ``count`` participants with fresh tokens."""
    if count < 1:
        raise ValueError(f"count must be >= 1; got {count}")
    created = []
    for _ in range(count):
        token = new_token()
        result = conn.execute(
            insert(participants).values(token=token, kind=kind, session=session, created_at=now)
        )
        key = result.inserted_primary_key
        assert key is not None
        pid = int(key[0])
        created.append(
            Participant(pid, token, kind, session, None, now, None, None, None, None, None)
        )
    return created


def browser_key(secret: str) -> str:
    """What the database keeps of a browser's binding cookie (its SHA-256, never the secret).

    >>> len(browser_key("abc"))
    64
    """
    import hashlib

    return hashlib.sha256(secret.encode("utf-8")).hexdigest()


def participant_for_external_id(
    conn: Connection,
    kind: str,
    session: str,
    external_id: str,
    *,
    now: float,
    browser_secret: str | None = None,
    platform: dict[str, str] | None = None,
) -> tuple[Participant, bool]:
    """The participant with this external id (e.g. a Prolific id), created if new.

    Returns the participant and whether *this call* created it. A new participant is bound to
    the browser whose cookie holds ``browser_secret`` (see :func:`browser_key`). Safe when two
    requests race: the unique constraint decides, the loser reads the winner's row and gets
    ``created=False``, so the caller checks whose browser it is bound to before handing it out.
    """
    if len(external_id) > MAX_EXTERNAL_ID:
        raise ValueError(f"an external id has at most {MAX_EXTERNAL_ID} characters")
    query = select(participants).where(
        participants.c.kind == kind,
        participants.c.session == session,
        participants.c.external_id == external_id,
    )
    row = conn.execute(query).first()
    if row is not None:
        return Participant.from_row(row), False
    import json

    try:
        with conn.begin_nested():
            conn.execute(
                insert(participants).values(
                    token=new_token(),
                    kind=kind,
                    session=session,
                    external_id=external_id,
                    created_at=now,
                    browser_key=browser_key(browser_secret) if browser_secret else None,
                    platform=json.dumps(platform, sort_keys=True) if platform else None,
                )
            )
    except IntegrityError:  # another request inserted this id first: theirs, not ours
        return Participant.from_row(conn.execute(query).one()), False
    return Participant.from_row(conn.execute(query).one()), True


def bind_browser(conn: Connection, participant_id: int, secret: str) -> None:
    """Bind a participant that has no browser yet to the browser holding ``secret``."""
    conn.execute(
        update(participants)
        .where(participants.c.id == participant_id, participants.c.browser_key.is_(None))
        .values(browser_key=browser_key(secret))
    )


def set_status(conn: Connection, participant_id: int, status: str, now: float, code: str) -> str:
    """End a participation as screened out or returned (once); returns the code shown."""
    check_choice(status, STATUSES, "status")
    current = lock_participant(conn, participant_id)
    if current.finished_at is not None:
        return current.completion_code or code
    conn.execute(
        update(participants)
        .where(participants.c.id == participant_id)
        .values(status=status, finished_at=now, completion_code=code)
    )
    return code


def count_participants(conn: Connection, kind: str, session: str) -> int:
    """The number of participants of ``session`` (every status)."""
    return int(
        conn.execute(
            select(func.count())
            .select_from(participants)
            .where(participants.c.kind == kind, participants.c.session == session)
        ).scalar_one()
    )


def count_enrolled(conn: Connection, kind: str, session: str, *, exclude: int | None = None) -> int:
    """The participants who hold a place in ``session``: consented and neither screened out
    nor returned (a join that never consents holds none, so ``max_participants`` cannot be
    filled by page loads)."""
    query = (
        select(func.count())
        .select_from(participants)
        .where(
            participants.c.kind == kind,
            participants.c.session == session,
            participants.c.started_at.is_not(None),
            participants.c.status.is_(None),
        )
    )
    if exclude is not None:
        query = query.where(participants.c.id != exclude)
    return int(conn.execute(query).scalar_one())


def count_active_from_client(
    conn: Connection, kind: str, session: str, key: str, *, since: float, exclude: int
) -> int:
    """Participants of ``session`` who consented from the network address with ``key`` since
    ``since`` and have not finished (the per-address limit of open enrollment)."""
    return int(
        conn.execute(
            select(func.count())
            .select_from(participants)
            .where(
                participants.c.kind == kind,
                participants.c.session == session,
                participants.c.client_key == key,
                participants.c.started_at >= since,
                participants.c.finished_at.is_(None),
                participants.c.id != exclude,
            )
        ).scalar_one()
    )


def set_client_key(conn: Connection, participant_id: int, key: str) -> None:
    """Remember which network address (its keyed hash) a participant consented from."""
    conn.execute(
        update(participants).where(participants.c.id == participant_id).values(client_key=key)
    )


def client_key(address: str, salt: str) -> str:
    """What the database keeps of a client's network address: a keyed hash (HMAC-SHA-256 with
    the server's secret salt), enough to count participants per address, never the address.

    >>> client_key("192.0.2.1", "s") == client_key("192.0.2.1", "s") != client_key("192.0.2.2", "s")
    True
    """
    import hashlib
    import hmac

    return hmac.new(salt.encode("utf-8"), address.encode("utf-8"), hashlib.sha256).hexdigest()


def participants_of_browser(
    conn: Connection, kind: str, session: str, secret: str
) -> list[Participant]:
    """The participants of ``session`` bound to the browser holding ``secret``, oldest first."""
    rows = conn.execute(
        select(participants)
        .where(
            participants.c.kind == kind,
            participants.c.session == session,
            participants.c.browser_key == browser_key(secret),
        )
        .order_by(participants.c.id)
    ).all()
    return [Participant.from_row(row) for row in rows]


def lock_session(conn: Connection, kind: str, session: str) -> None:
    """Serialise enrollment decisions of one session until the transaction ends.

    On PostgreSQL a transaction-scoped advisory lock keyed by the session (READ COMMITTED
    would let two joins both count the same free place); SQLite's write transactions are
    already exclusive.
    """
    if conn.dialect.name != "postgresql":
        return
    import hashlib

    digest = hashlib.sha256(f"storyeval:{kind}/{session}".encode()).digest()
    key = int.from_bytes(digest[:8], "big", signed=True)
    conn.exec_driver_sql("SELECT pg_advisory_xact_lock(%(key)s)", {"key": key})


def participant_by_token(conn: Connection, token: str) -> Participant | None:
    """The participant with this token, or ``None`` (also for malformed tokens)."""
    if not token or len(token) > 64 or "\x00" in token:
        return None
    row = conn.execute(_BY_TOKEN, {"token": token}).first()
    return None if row is None else Participant.from_row(row)


def lock_participant(conn: Connection, participant_id: int) -> Participant:
    """Re-read a participant inside a write transaction, locking the row (PostgreSQL)."""
    return Participant.from_row(conn.execute(_BY_ID_LOCKED, {"pid": participant_id}).one())


def touch(conn: Connection, participant_id: int, now: float, *, every: float = 15.0) -> None:
    """Record activity (used to release the reservations of participants who left)."""
    conn.execute(
        update(participants)
        .where(
            participants.c.id == participant_id,
            (participants.c.last_seen_at.is_(None)) | (participants.c.last_seen_at < now - every),
        )
        .values(last_seen_at=now)
    )


def note_view(conn: Connection, participant_id: int, page: str, now: float) -> None:
    """Note that ``page`` was served now, if it never was (one statement, no read)."""
    _NOTE_VIEW.run(conn, {"pid": participant_id, "page": page, "now": now})


def record_view(conn: Connection, participant_id: int, page: str, now: float) -> float:
    """Note that ``page`` was served now (counting views); return when it was *first* served."""
    first = first_view(conn, participant_id, page)
    if first is None:
        note_view(conn, participant_id, page, now)
        first = first_view(conn, participant_id, page)  # a concurrent request may have won
        return now if first is None else first
    _VIEW_AGAIN.run(conn, {"pid": participant_id, "page": page, "now": now})
    return first


def first_view(conn: Connection, participant_id: int, page: str) -> float | None:
    """When ``page`` was first served to the participant (``None`` if never)."""
    row = _FIRST_VIEW.one(conn, {"pid": participant_id, "page": page})
    return None if row is None else float(row[0])


def note_submission(conn: Connection, participant: Participant, now: float) -> float | None:
    """Record a submission; return the seconds since the previous one (or since the start).

    This is the "actual time" of Karpinska et al. (2021): the gap between consecutive submissions by the same
    participant, which crowd platforms' own work-time figures overstate.
    """
    previous = participant.last_submit_at or participant.started_at
    _NOTE_SUBMISSION.run(conn, {"pid": participant.id, "now": now})
    return None if previous is None else max(0.0, now - previous)


def rater_id(participant_id: int) -> str:
    """The pseudonymous rater id used in exports (``p00012``); tokens are credentials and are
    never exported.

    >>> rater_id(12)
    'p00012'
    """
    return f"p{participant_id:05d}"


_MARK_STARTED = HotQuery(
    "UPDATE participants SET started_at = :now, last_seen_at = :now, active_at = :now "
    "WHERE id = :pid AND started_at IS NULL"
)


def note_active(conn: Connection, participant_id: int, now: float) -> None:
    """Record a state-changing POST that is not a judgment (e.g. asking for more items): it
    keeps the participant's reservations, as a judgment does."""
    _NOTE_ACTIVE.run(conn, {"pid": participant_id, "now": now})


def mark_started(conn: Connection, participant_id: int, now: float) -> None:
    """Record when the participant started (consented); a later call keeps the first time."""
    _MARK_STARTED.run(conn, {"pid": participant_id, "now": now})


def mark_finished(
    conn: Connection, participant_id: int, now: float, *, code: str | None = None
) -> str:
    """Mark the participant finished; return their completion code.

    The first call stores ``code`` (a random 8-character code when ``None``) and the finish
    time; later calls (a reload of the last page, a double submission) return the stored code.
    """
    current = lock_participant(conn, participant_id)
    if current.completion_code:
        return current.completion_code
    final = code or secrets.token_hex(4).upper()
    conn.execute(
        update(participants)
        .where(participants.c.id == participant_id)
        .values(finished_at=now, completion_code=final)
    )
    return final


def get_meta(conn: Connection, key: str) -> str | None:
    """A value of the server's key-value metadata (None when unset)."""
    return conn.execute(
        select(server_meta.c.value).where(server_meta.c.key == key)
    ).scalar_one_or_none()


def set_meta(conn: Connection, key: str, value: str) -> None:
    """Set a value of the server's key-value metadata."""
    if get_meta(conn, key) is None:
        conn.execute(insert(server_meta).values(key=key, value=value))
    else:
        conn.execute(update(server_meta).where(server_meta.c.key == key).values(value=value))
