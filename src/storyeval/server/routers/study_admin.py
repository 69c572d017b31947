"""Admin pages of a study (behind the admin token): live progress and exports. CSV downloads
have the cells a spreadsheet would run as formulas made inert."""

from __future__ import annotations

import json
from typing import Any

import pandas as pd
from fastapi import APIRouter, HTTPException
from fastapi.responses import Response
from pydantic import BaseModel

from storyeval.base.io import csv_text
from storyeval.corpus import JUDGMENT_FIELDS, records_csv
from storyeval.human.model import Study
from storyeval.server import study_export
from storyeval.server.routers import attachment, jsonl_attachment
from storyeval.server.state import Admin, ServerState
from storyeval.server.study_session import StudySession
from storyeval.server.study_tables import stored_definition

router = APIRouter(prefix="/study/{name}")


class ItemProgress(BaseModel):
    """Progress of one item: judgments collected, reserved and wanted."""

    item: str
    condition: str
    done: int
    reserved: int
    open: int
    settled: int = 0


class Progress(BaseModel):
    """Live progress of a study (``GET /admin/<token>/study/<name>/progress.json``)."""

    study: str
    version: str
    protocol: str
    participants: int
    started: int
    finished: int
    screened_out_or_returned: int
    slots_total: int
    slots_open: int
    slots_reserved: int
    slots_done: int
    slots_settled: int
    judgments: int
    raters_per_item: int
    items: list[ItemProgress]


def _study(state: ServerState, name: str) -> Study:
    session = state.session("study", name)
    if not isinstance(session, StudySession):
        raise HTTPException(status_code=404, detail=f"No study named {name!r} is served here.")
    return session.study


@router.get("/")
def study_dashboard(state: Admin, name: str) -> Response:
    """The admin page of a study: participants, progress and exports."""
    study = _study(state, name)
    with state.db.read() as conn:
        progress = study_export.progress(conn, study)
        people = study_export.participant_summaries(conn, study)
    return state.page(
        "admin/study.html",
        {
            "study": study,
            "progress": progress,
            "people": people,
            "threshold": study.config.quality.min_median_time_s,
            "prefix": f"/admin/{state.admin_token}/study/{name}",
            "admin_root": f"/admin/{state.admin_token}/",
            "links_csv": f"/admin/{state.admin_token}/links/study/{name}.csv",
        },
    )


@router.get("/progress.json", response_model=Progress)
def progress_json(state: Admin, name: str) -> Progress:
    """The study's progress as JSON."""
    study = _study(state, name)
    with state.db.read() as conn:
        return Progress.model_validate(study_export.progress(conn, study))


def _review(state: ServerState, study: Study) -> dict[str, Any]:
    """The agreement per criterion and the raters to review, computed again only when new
    judgments (or failed checks) arrived."""
    from storyeval.meta.review import criterion_agreement, rater_review

    with state.db.read() as conn:
        records = study_export.export_judgments(conn, study.name, version=study.version)
        people = study_export.participant_summaries(conn, study)
    failed = sum(int(p.get("checks_failed") or 0) for p in people)
    key = ("review", study.name, study.version, len(records), failed)
    if key not in state.computed:
        if len(state.computed) > 16:
            state.computed.clear()
        threshold = study.config.quality.min_median_time_s
        raters = (
            rater_review(records, participants=people, min_time_s=threshold)
            if records
            else pd.DataFrame()
        )
        state.computed[key] = {
            "judgments": len(records),
            "criteria": _plain(criterion_agreement(records)) if records else [],
            "raters": _plain(raters),
        }
    result: dict[str, Any] = state.computed[key]
    return result


def _plain(frame: pd.DataFrame) -> list[dict[str, Any]]:
    """Table rows with NaN as None and numpy scalars as Python values (JSON-ready)."""
    rows = json.loads(frame.to_json(orient="records")) if not frame.empty else []
    return list(rows)


@router.get("/agreement")
def agreement_page(state: Admin, name: str) -> Response:
    """Live agreement: per criterion alpha, kappa and ICC; per rater bias, agreement with the
    others, speed, attention checks and competence, with the raters to review first."""
    from storyeval.meta import review

    study = _study(state, name)
    return state.page(
        "admin/agreement.html",
        {
            "study": study,
            "review": _review(state, study),
            "prefix": f"/admin/{state.admin_token}/study/{name}",
            "threshold": study.config.quality.min_median_time_s,
            "low_agreement": review.LOW_AGREEMENT,
            "large_bias": review.LARGE_BIAS,
            "min_shared": review.MIN_SHARED,
        },
    )


@router.get("/agreement.json")
def agreement_json(state: Admin, name: str) -> Response:
    """The agreement page's tables as JSON (NaN as null)."""
    study = _study(state, name)
    return Response(json.dumps(_review(state, study)), media_type="application/json")


@router.get("/export/judgments.{fmt}")
def export_judgments(state: Admin, name: str, fmt: str) -> Response:
    """Download the judgments (or participants, responses, attention checks...) as JSONL or CSV."""
    study = _study(state, name)
    if fmt not in ("jsonl", "csv"):
        raise HTTPException(status_code=404, detail="Judgments export as .jsonl or .csv.")
    with state.db.read() as conn:
        records = study_export.export_judgments(conn, study.name, version=study.version)
    filename = f"{name}-judgments.{fmt}"
    rows = [j.to_dict() for j in records]
    if fmt == "jsonl":
        return jsonl_attachment(rows, filename)
    body = (
        records_csv(rows, leading=JUDGMENT_FIELDS, escape_formulas=True)
        if rows
        else csv_text([], header=JUDGMENT_FIELDS)
    )
    return attachment(body, filename, "text/csv; charset=utf-8")


@router.get("/export/{table}.jsonl")
def export_table(state: Admin, name: str, table: str) -> Response:
    """``responses``, ``participants``, ``training``, ``attention_checks``, ``comprehension``."""
    study = _study(state, name)
    exports = {
        "responses": lambda conn: study_export.export_responses(conn, study.name),
        "participants": lambda conn: study_export.participant_summaries(conn, study),
        "training": lambda conn: study_export.export_training(conn, study.name),
        "attention_checks": lambda conn: study_export.export_attention_checks(conn, study.name),
        "comprehension": lambda conn: study_export.export_comprehension(conn, study.name),
    }
    if table not in exports:
        raise HTTPException(status_code=404, detail=f"There is no export named {table!r}.")
    with state.db.read() as conn:
        return jsonl_attachment(exports[table](conn), f"{name}-{table}.jsonl")


@router.get("/export/study.json")
def export_definition(state: Admin, name: str) -> Response:
    """Download the study definition the server runs."""
    study = _study(state, name)
    with state.db.read() as conn:
        definition = stored_definition(conn, study.name)
    return attachment(
        json.dumps(definition, indent=2, ensure_ascii=False),
        f"{name}-study.json",
        "application/json",
    )


def _judge_records(state: ServerState, study: Study) -> tuple[list[Any], str]:
    """The judgments of the served judge files about this study's texts, read again when a
    file changes, and why the latest reading failed (empty when it did not): a file edited to
    a bad line keeps the last good judgments in use, and the page says what is wrong."""
    from pathlib import Path

    from storyeval.corpus import read_judgments

    paths = [Path(p) for p in state.settings.judge_files]
    stamp = tuple((str(p), p.stat().st_mtime_ns if p.exists() else 0) for p in paths)
    key = ("judges", study.name, stamp)
    good = ("judges-last-good", study.name)
    if key not in state.computed:
        texts = {text.id for item in study.items for text in item.texts}
        try:
            records = [j for p in paths if p.exists() for j in read_judgments(p)]
        except (ValueError, OSError) as exc:  # a file mid-edit or broken: keep what worked
            state.computed[key] = (state.computed.get(good, []), str(exc))
        else:
            state.computed[good] = [j for j in records if j.item_id in texts]
            state.computed[key] = (state.computed[good], "")
    result: tuple[list[Any], str] = state.computed[key]
    return result


def _calibration(state: ServerState, study: Study, top: int) -> dict[str, Any]:
    """The judge-calibration tables: per judge and criterion the Spearman correlation with
    the people's mean so far, and the items where they disagree most."""
    from storyeval.meta.review import calibration_queue

    judges, error = _judge_records(state, study)
    with state.db.read() as conn:
        records = study_export.export_judgments(conn, study.name, version=study.version)
    people = [j for j in records if not j.extra.get("check")]
    files = list(state.settings.judge_files)
    if not judges or not people:
        return {"files": files, "summary": [], "queue": [], "error": error}
    summary, queue = calibration_queue(people, judges, top=top)
    texts = {text.id: text for item in study.items for text in item.texts}
    rows = _plain(queue)
    for row in rows:
        text = texts.get(row["item_id"])
        row["system"] = text.system if text else None
        row["excerpt"] = (text.story[:240] + ("…" if len(text.story) > 240 else "")) if text else ""
    return {"files": files, "summary": _plain(summary), "queue": rows, "error": error}


@router.get("/calibration")
def calibration_page(state: Admin, name: str, top: int = 25) -> Response:
    """The judge-calibration queue: the items where an LLM judge and people disagree most."""
    study = _study(state, name)
    return state.page(
        "admin/calibration.html",
        {
            "study": study,
            "calibration": _calibration(state, study, max(1, min(top, 500))),
            "prefix": f"/admin/{state.admin_token}/study/{name}",
        },
    )


@router.get("/calibration.json")
def calibration_json(state: Admin, name: str, top: int = 25) -> Response:
    """The calibration page's tables as JSON (NaN as null)."""
    study = _study(state, name)
    payload = _calibration(state, study, max(1, min(top, 500)))
    return Response(json.dumps(payload), media_type="application/json")
