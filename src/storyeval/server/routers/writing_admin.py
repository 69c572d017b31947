"""Admin pages of a collaborative-writing session (behind the admin token): progress, the
sessions export (the input of ``storyeval cyoa analyse``) and the session file that was run."""

from __future__ import annotations

import json
from typing import Any

from fastapi import APIRouter, HTTPException
from fastapi.responses import Response

from storyeval.collab.slogan import SloganSession
from storyeval.server import writing_store
from storyeval.server.routers import jsonl_attachment
from storyeval.server.state import Admin, ServerState
from storyeval.server.writing_session import ADMIN_KINDS, WritingSessionPlugin

router = APIRouter(prefix="/{kind}/{name}")


def _plugin(state: ServerState, kind: str, name: str) -> WritingSessionPlugin:
    plugin = state.session(kind, name) if kind in ADMIN_KINDS else None
    if not isinstance(plugin, WritingSessionPlugin):
        raise HTTPException(
            status_code=404, detail=f"No {kind} session named {name!r} is served here."
        )
    return plugin


def _person(session: writing_store.AnySession) -> dict[str, Any]:
    """A writer's row on the dashboard: phase, turns (slogans: pulls), choices and how their
    free text was produced (see :func:`storyeval.server.integrity.summarise`)."""
    from storyeval.server.integrity import summarise

    if isinstance(session, SloganSession):
        final = session.data.get("final_survey") or {}
        texts = [t.get("integrity") for t in session.tasks if t.get("final")]
        return {
            "participant": session.participant,
            "phase": session.phase,
            "turns": sum(len(task["pulls"]) for task in session.tasks),
            "choices": [session.condition],
            **summarise([*texts, *(final.get("integrity") or {}).values()]),
        }
    survey = session.data.get("survey") or {}
    written = [t.get("integrity") for t in session.submitted_turns() if t.get("text")]
    return {
        "participant": session.participant,
        "phase": session.phase,
        "turns": len(session.submitted_turns()),
        "choices": [t["chosen"] for t in session.submitted_turns() if t["author"] == "suggestion"],
        **summarise([*written, *(survey.get("integrity") or {}).values()]),
    }


@router.get("/")
def dashboard(state: Admin, kind: str, name: str) -> Response:
    """The admin page of a writing session."""
    plugin = _plugin(state, kind, name)
    with state.db.read() as conn:
        progress = writing_store.progress(conn, plugin.config)
        people = [_person(session) for _, session in writing_store.sessions_of(conn, plugin.config)]
    prefix = f"/admin/{state.admin_token}/{kind}/{name}"
    return state.page(
        "writing/admin.html",
        {
            "plugin": plugin,
            "config": plugin.config,
            "progress": progress,
            "people": people,
            "worker": plugin.worker,
            "models": plugin.models,
            "prefix": prefix,
            "admin_root": f"/admin/{state.admin_token}/",
            "links_csv": f"/admin/{state.admin_token}/links/{kind}/{name}.csv",
        },
    )


@router.get("/progress.json")
def progress_json(state: Admin, kind: str, name: str) -> dict[str, Any]:
    """The writing session's progress as JSON."""
    plugin = _plugin(state, kind, name)
    with state.db.read() as conn:
        progress = writing_store.progress(conn, plugin.config)
    worker = plugin.worker
    progress["generations_queued"] = worker.in_flight if worker is not None else 0
    progress["generations_done"] = worker.completed if worker is not None else 0
    progress["generations_failed"] = worker.failed if worker is not None else 0
    progress["generations_timed_out"] = worker.timed_out if worker is not None else 0
    progress["generation_workers_restarted"] = worker.restarted if worker is not None else 0
    return progress


@router.get("/export/sessions.jsonl")
def sessions_jsonl(state: Admin, kind: str, name: str) -> Response:
    """Download every writer's session as JSONL (the input of ``storyeval cyoa analyse``)."""
    plugin = _plugin(state, kind, name)
    with state.db.read() as conn:
        records = writing_store.export(conn, plugin.config)
    return jsonl_attachment(records, f"{name}-sessions.jsonl")


@router.get("/export/session.json")
def definition(state: Admin, kind: str, name: str) -> Response:
    """Download the session definition the server runs."""
    plugin = _plugin(state, kind, name)
    body = json.dumps(
        {"version": plugin.config.version(), "config": plugin.config.model_dump(mode="json")},
        indent=2,
        ensure_ascii=False,
    )
    return Response(body, media_type="application/json; charset=utf-8")
