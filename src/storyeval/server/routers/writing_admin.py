"""Admin pages of a collaborative-writing session (behind the admin token): progress, the
sessions export (the input of ``storyeval cyoa analyse``) and the session file that was run."""

from __future__ import annotations

import json
from typing import Annotated, Any

from fastapi import APIRouter, Depends, HTTPException
from fastapi.responses import Response

from storyeval.server import writing_store
from storyeval.server.app import ServerState
from storyeval.server.deps import require_admin
from storyeval.server.routers import jsonl_attachment

Admin = Annotated[ServerState, Depends(require_admin)]


def make_router(kind: str) -> APIRouter:
    router = APIRouter(prefix=f"/{kind}/{{name}}")

    def plugin_of(state: ServerState, name: str) -> Any:
        plugin = state.session(kind, name)
        if plugin is None:
            raise HTTPException(
                status_code=404, detail=f"No {kind} session named {name!r} is served here."
            )
        return plugin

    @router.get("/")
    def dashboard(state: Admin, name: str) -> Response:
        plugin = plugin_of(state, name)
        with state.db.read() as conn:
            progress = writing_store.progress(conn, plugin.config)
            people = [
                {
                    "participant": session.participant,
                    "phase": session.phase,
                    "turns": len(session.submitted_turns()),
                    "choices": [
                        t["chosen"]
                        for t in session.submitted_turns()
                        if t["author"] == "suggestion"
                    ],
                }
                for _, session in writing_store.sessions_of(conn, plugin.config)
            ]
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
    def progress_json(state: Admin, name: str) -> dict[str, Any]:
        plugin = plugin_of(state, name)
        with state.db.read() as conn:
            progress = writing_store.progress(conn, plugin.config)
        worker = plugin.worker
        progress["generations_queued"] = worker.in_flight if worker is not None else 0
        progress["generations_done"] = worker.completed if worker is not None else 0
        progress["generations_failed"] = worker.failed if worker is not None else 0
        return progress

    @router.get("/export/sessions.jsonl")
    def sessions_jsonl(state: Admin, name: str) -> Response:
        plugin = plugin_of(state, name)
        with state.db.read() as conn:
            records = writing_store.export(conn, plugin.config)
        return jsonl_attachment(records, f"{name}-sessions.jsonl")

    @router.get("/export/session.json")
    def definition(state: Admin, name: str) -> Response:
        plugin = plugin_of(state, name)
        body = json.dumps(
            {"version": plugin.config.version(), "config": plugin.config.model_dump(mode="json")},
            indent=2,
            ensure_ascii=False,
        )
        return Response(body, media_type="application/json; charset=utf-8")

    return router
