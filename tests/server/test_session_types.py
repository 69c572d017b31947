"""The core is open to new session types (the way the writing sessions plug in): a session
kind registered in ``SESSION_KINDS`` brings its own table and router, reuses participants,
tokens, page timing and admin authentication, and cannot be reached with another kind's
tokens. Also: the serve command's errors."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Annotated, Any, ClassVar

import pytest
from fastapi import APIRouter, Depends, Form, Request
from fastapi.responses import HTMLResponse, RedirectResponse
from fastapi.testclient import TestClient
from sqlalchemy import Column, Connection, Float, ForeignKey, Integer, Table, Text, insert, select

from storyeval.server.app import create_app, server_state
from storyeval.server.db import Database, metadata
from storyeval.server.kinds import SESSION_KINDS, SessionKind
from storyeval.server.participants import (
    create_participants,
    first_view,
    note_submission,
    record_view,
)
from storyeval.server.sessions import SessionPlugin
from storyeval.server.settings import Settings
from storyeval.server.state import Who, participant_of
from storyeval.server.study_session import StudySession

notes = Table(
    "test_notes",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("participant_id", Integer, ForeignKey("participants.id"), nullable=False),
    Column("text", Text, nullable=False),
    Column("time_s", Float, nullable=False),
)

router = APIRouter(prefix="/note/{token}")
Writer = Annotated[Who, Depends(participant_of("note"))]


@router.get("/")
def note_page(request: Request, who: Writer) -> HTMLResponse:
    participant = who.participant
    state = server_state(request)
    state.db.run(lambda conn: record_view(conn, participant.id, "note", state.clock()))
    return HTMLResponse("<form method=post><textarea name=text></textarea></form>")


@router.post("/")
def note_submit(request: Request, who: Writer, text: Annotated[str, Form()]) -> RedirectResponse:
    participant = who.participant
    state = server_state(request)
    now = state.clock()

    def work(conn: Connection) -> None:
        served = first_view(conn, participant.id, "note") or now
        note_submission(conn, participant, now)
        conn.execute(
            insert(notes).values(participant_id=participant.id, text=text, time_s=now - served)
        )

    state.db.run(work)
    return RedirectResponse(f"/note/{participant.token}/", status_code=303)


class NoteSession(SessionPlugin):
    kind: ClassVar[str] = "note"

    def __init__(self) -> None:
        self.name = "notes"
        self.title = "Notes"

    def setup(self, db: Database, *, now: float) -> None:
        pass

    def summary(self, conn: Connection) -> dict[str, Any]:
        return {"notes": len(conn.execute(select(notes.c.id)).all())}


@pytest.fixture
def note_kind():  # type: ignore[no-untyped-def]
    SESSION_KINDS.register("note", SessionKind(lambda path: NoteSession(), (router,)))
    yield
    SESSION_KINDS.unregister("note")


def test_a_new_session_type_plugs_into_the_core(make_likert, tmp_path, note_kind):
    study = make_likert()
    admin = "admin-token-for-plugins-123"
    app = create_app(
        Settings(database_url=f"sqlite:///{tmp_path / 'p.sqlite3'}", admin_token=admin),
        [StudySession(study), NoteSession()],
    )
    client = TestClient(app)
    state = app.state.storyeval
    writer = state.db.run(
        lambda conn: create_participants(conn, "note", "notes", 1, now=state.clock())
    )[0]
    rater = state.db.run(
        lambda conn: create_participants(conn, "study", study.name, 1, now=state.clock())
    )[0]
    assert (
        client.get(f"/p/{writer.token}", follow_redirects=False).headers["location"]
        == f"/note/{writer.token}/"
    )
    assert (
        client.get(f"/p/{rater.token}", follow_redirects=False).headers["location"]
        == f"/study/{rater.token}/welcome"
    )
    assert client.get(f"/note/{writer.token}/").status_code == 200
    assert (
        client.post(
            f"/note/{writer.token}/", data={"text": "hello"}, follow_redirects=False
        ).status_code
        == 303
    )
    # tokens do not cross session types
    assert client.get(f"/note/{rater.token}/").status_code == 404
    assert client.get(f"/study/{writer.token}/").status_code == 404
    dashboard = client.get(f"/admin/{admin}/")
    assert dashboard.status_code == 200 and "Notes" in dashboard.text and "notes" in dashboard.text
    with state.db.read() as conn:
        rows = conn.execute(select(notes)).all()
    assert [(r.text, r.time_s >= 0) for r in rows] == [("hello", True)]


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "storyeval", *args],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )


@pytest.mark.slow
def test_serve_reports_bad_input_in_one_line(examples_dir, tmp_path: Path):
    missing = run("serve", str(tmp_path / "nope.yaml"))
    assert missing.returncode == 2 and "no such file" in missing.stderr
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\ntitle: X\nprotocol: likert\nstories: nowhere.jsonl\ncriteria: []\n")
    invalid = run("serve", str(bad))
    assert invalid.returncode == 2 and f"{bad}:4: stories: story file" in invalid.stderr
    url = run("serve", str(examples_dir / "studies" / "likert.yaml"), "--db", "mysql://u@h/d")
    assert url.returncode == 2 and "unsupported database 'mysql'" in url.stderr
    token = run(
        "serve",
        str(examples_dir / "studies" / "likert.yaml"),
        "--db",
        f"sqlite:///{tmp_path / 'x.db'}",
        "--admin-token",
        "short",
    )
    assert token.returncode == 2 and "admin_token" in token.stderr
