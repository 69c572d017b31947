"""Adaptive assignment in the server (``assignment.adaptive`` in a study file).

Before each claim the study's judgments so far are summarised per item, text and criterion
(count, sum, sum of squares, in one grouped query) over the *trusted* raters: those who have
answered every attention check they were given and failed none, and whose answers vary on
some criterion (a rater who gives every item the same answers is straight-lining, and
agreement among straight-liners must not settle anything). The items whose interval is within
the target are *settled* (their open slots get status ``settled`` and are never handed out), and
the open slots are put in routing order (:func:`storyeval.human.adaptive.route`). The claim
then takes them in that order within the usual constraints (condition balance, one item per
prompt per participant, each slot claimed once), so quotas hold exactly as without routing.
Every slot handed out is recorded in ``study_routing`` with the evidence that chose it, and
exported as ``routing.jsonl``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from sqlalchemy import Connection, insert, select

from storyeval.human.adaptive import ItemState, Moments, item_states, route
from storyeval.human.model import Study
from storyeval.server.db import HotQuery
from storyeval.server.participants import rater_id
from storyeval.server.study_tables import iso, routing

_CELL_MOMENTS = HotQuery(
    "SELECT s.item_key, j.item_id, j.criterion, count(*), sum(j.value), sum(j.value * j.value) "
    "FROM study_judgments j JOIN study_slots s ON s.id = j.slot_id "
    "WHERE j.study = :study AND s.kind = 'item' "
    # raters whose answers vary on some criterion (a straight-liner's settle nothing) ...
    "AND j.participant_id IN (SELECT v.participant_id FROM study_judgments v "
    "JOIN study_slots vs ON vs.id = v.slot_id WHERE v.study = :study AND vs.kind = 'item' "
    "GROUP BY v.participant_id, v.criterion HAVING max(v.value) > min(v.value)) "
    # ... who have answered every attention check they were given, and failed none
    "AND j.participant_id NOT IN (SELECT c.participant_id FROM study_slots c "
    "WHERE c.study = :study AND c.kind = 'check' AND c.participant_id IS NOT NULL "
    "AND (c.status <> 'done' OR EXISTS (SELECT 1 FROM study_judgments cj "
    "WHERE cj.slot_id = c.id AND cj.extra LIKE :failed))) "
    "GROUP BY s.item_key, j.item_id, j.criterion"
)
#: how a failed attention check's judgment reads in ``study_judgments.extra`` (JSON)
_FAILED_CHECK = '%"check_passed": false%'
_ITEM_COUNTS = HotQuery(
    "SELECT item_key, status, count(*) FROM study_slots WHERE study = :study AND kind = 'item' "
    "GROUP BY item_key, status"
)
_SETTLE = HotQuery(
    "UPDATE study_slots SET status = 'settled' WHERE study = :study AND kind = 'item' "
    "AND status = 'open' AND item_key = :key"
)


def routing_states(conn: Connection, study: Study) -> dict[str, ItemState]:
    """Every item's evidence now: judgments done and planned, interval widths, settled."""
    settings = study.config.assignment.adaptive
    if settings is None:
        return {}
    wanted = set(settings.criteria or [])
    cells: dict[str, list[Moments]] = {}
    params = {"study": study.name, "failed": _FAILED_CHECK}
    for key, _item, criterion, n, total, squares in _CELL_MOMENTS.rows(conn, params):
        if not wanted or criterion in wanted:
            cells.setdefault(str(key), []).append(Moments(int(n), float(total), float(squares)))
    done: dict[str, int] = {}
    planned: dict[str, int] = {}
    for key, status, count in _ITEM_COUNTS.rows(conn, {"study": study.name}):
        if status in ("done", "reserved"):
            planned[str(key)] = planned.get(str(key), 0) + int(count)
        if status == "done":
            done[str(key)] = int(count)
        planned.setdefault(str(key), 0)
    return item_states(cells, done, planned, settings, fallback_variance=_scale_variance(study))


def _scale_variance(study: Study) -> float:
    """The variance of a uniform answer on the study's widest scale (1 for choices): the
    prior spread before any item has two judgments."""
    sizes = [c.scale for c in study.config.criteria if c.scale]
    if not sizes:
        return 0.25
    return (max(sizes) ** 2 - 1) / 12


def settle(conn: Connection, study: Study, states: dict[str, ItemState] | None = None) -> int:
    """Close the open slots of every settled item; returns how many items were settled now."""
    if study.config.assignment.adaptive is None:
        return 0
    states = routing_states(conn, study) if states is None else states
    keys = [{"study": study.name, "key": k} for k, s in states.items() if s.settled]
    _SETTLE.run_many(conn, keys)
    return len(keys)


def routed_slots(
    conn: Connection, study: Study, open_slots: Sequence[tuple[Any, ...]]
) -> tuple[list[tuple[Any, ...]], dict[str, ItemState]]:
    """The open slots (``id, item_key, group_key, condition`` rows in claiming order) in
    routing order, without the slots of items that should get no rater now."""
    settings = study.config.assignment.adaptive
    assert settings is not None
    states = routing_states(conn, study)
    settle(conn, study, states)
    order = route([str(row[1]) for row in open_slots], states, settings)
    by_item: dict[str, list[tuple[Any, ...]]] = {}
    for row in open_slots:
        by_item.setdefault(str(row[1]), []).append(row)
    return [by_item[key].pop(0) for key in order], states


def record_routing(
    conn: Connection,
    study: Study,
    participant_id: int,
    claimed: Sequence[tuple[Any, ...]],
    routed: Sequence[tuple[Any, ...]],
    states: dict[str, ItemState],
    now: float,
) -> None:
    """Store why each claimed slot was handed out (its item's evidence and place in the
    routing order)."""
    settings = study.config.assignment.adaptive
    assert settings is not None
    rank = {row[0]: i + 1 for i, row in enumerate(routed)}
    rows = []
    for row in claimed:
        state = states.get(str(row[1]))
        done = state.done if state else 0
        planned = state.planned if state else 0
        rows.append(
            {
                "study": study.name,
                "slot_id": row[0],
                "participant_id": participant_id,
                "item_key": str(row[1]),
                "phase": "coverage" if planned < settings.min_raters else "refine",
                "rank": rank.get(row[0], 0),
                "done_before": done,
                "planned_before": planned,
                "width": _finite(state.width) if state else None,
                "anticipated_width": _finite(state.anticipated_width) if state else None,
                "routed_at": now,
            }
        )
    if rows:
        conn.execute(insert(routing), rows)


def _finite(value: float) -> float | None:
    return None if math.isinf(value) or math.isnan(value) else round(value, 6)


def export_routing(conn: Connection, study_name: str) -> list[dict[str, Any]]:
    """The routing records of a study, in the order they were made."""
    result = conn.execute(
        select(routing).where(routing.c.study == study_name).order_by(routing.c.id)
    ).all()
    return [
        {
            "slot": row.slot_id,
            "rater_id": rater_id(int(row.participant_id)),
            "item": row.item_key,
            "phase": row.phase,
            "rank": row.rank,
            "done_before": row.done_before,
            "planned_before": row.planned_before,
            "width": row.width,
            "anticipated_width": row.anticipated_width,
            "routed_at": iso(row.routed_at),
        }
        for row in result
    ]
