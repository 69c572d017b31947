"""Admin pages of a study (behind the admin token): live progress and exports."""

from __future__ import annotations

import io
import json
import tempfile
from pathlib import Path
from typing import Annotated

from fastapi import APIRouter, Depends, HTTPException
from fastapi.responses import Response
from pydantic import BaseModel

from storyeval.corpus import write_judgments
from storyeval.human.study import Study
from storyeval.server import study_store
from storyeval.server.app import ServerState
from storyeval.server.deps import require_admin
from storyeval.server.routers import attachment, jsonl_attachment

router = APIRouter(prefix="/study/{name}")
Admin = Annotated[ServerState, Depends(require_admin)]


class ItemProgress(BaseModel):
    item: str
    condition: str
    done: int
    reserved: int
    open: int


class Progress(BaseModel):
    """Live progress of a study (``GET /admin/<token>/study/<name>/progress.json``)."""

    study: str
    version: str
    protocol: str
    participants: int
    started: int
    finished: int
    slots_total: int
    slots_open: int
    slots_reserved: int
    slots_done: int
    judgments: int
    raters_per_item: int
    items: list[ItemProgress]


def _study(state: ServerState, name: str) -> Study:
    session = state.session("study", name)
    if session is None:
        raise HTTPException(status_code=404, detail=f"No study named {name!r} is served here.")
    study: Study = session.study  # type: ignore[attr-defined]
    return study


@router.get("/")
def study_dashboard(state: Admin, name: str) -> Response:
    study = _study(state, name)
    with state.db.read() as conn:
        progress = study_store.progress(conn, study)
        people = study_store.participant_summaries(conn, study)
    threshold = study.config.quality.min_median_time_s
    return state.page(
        "admin/study.html",
        {
            "study": study,
            "progress": progress,
            "people": people,
            "threshold": threshold,
            "prefix": f"/admin/{state.admin_token}/study/{name}",
            "admin_root": f"/admin/{state.admin_token}/",
            "links_csv": f"/admin/{state.admin_token}/links/study/{name}.csv",
        },
    )


@router.get("/progress.json", response_model=Progress)
def progress_json(state: Admin, name: str) -> Progress:
    study = _study(state, name)
    with state.db.read() as conn:
        return Progress.model_validate(study_store.progress(conn, study))


@router.get("/export/judgments.{fmt}")
def export_judgments(state: Admin, name: str, fmt: str) -> Response:
    study = _study(state, name)
    if fmt not in ("jsonl", "csv"):
        raise HTTPException(status_code=404, detail="Judgments export as .jsonl or .csv.")
    with state.db.read() as conn:
        records = study_store.export_judgments(conn, study.name, version=study.version)
    filename = f"{name}-judgments.{fmt}"
    if fmt == "jsonl":
        return jsonl_attachment([j.to_dict() for j in records], filename)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "judgments.csv"
        if records:
            write_judgments(path, records)
            body = path.read_text(encoding="utf-8")
        else:
            body = io.StringIO(
                "item_id,rater_id,criterion,value,time_s,study,condition\n"
            ).getvalue()
    return attachment(body, filename, "text/csv; charset=utf-8")


@router.get("/export/responses.jsonl")
def export_responses(state: Admin, name: str) -> Response:
    study = _study(state, name)
    with state.db.read() as conn:
        return jsonl_attachment(
            study_store.export_responses(conn, study.name), f"{name}-responses.jsonl"
        )


@router.get("/export/participants.jsonl")
def export_participants(state: Admin, name: str) -> Response:
    study = _study(state, name)
    with state.db.read() as conn:
        return jsonl_attachment(
            study_store.participant_summaries(conn, study), f"{name}-participants.jsonl"
        )


@router.get("/export/training.jsonl")
def export_training(state: Admin, name: str) -> Response:
    study = _study(state, name)
    with state.db.read() as conn:
        return jsonl_attachment(
            study_store.export_training(conn, study.name), f"{name}-training.jsonl"
        )


@router.get("/export/study.json")
def export_definition(state: Admin, name: str) -> Response:
    study = _study(state, name)
    with state.db.read() as conn:
        definition = study_store.stored_definition(conn, study.name)
    return attachment(
        json.dumps(definition, indent=2, ensure_ascii=False),
        f"{name}-study.json",
        "application/json",
    )
