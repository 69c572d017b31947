"""The ``storyeval view`` web app: read-only pages over joined files, rendered on the server
(no script at all: the Content-Security-Policy forbids it, and every value is escaped).

Every view's state is in its URL, so a link shows what its author saw:

- ``/``: the table, one story a row; ``system`` (repeatable), ``q`` (text) and ``range``
  (``COLUMN:LOW:HIGH``, repeatable: length, a metric, a criterion, a judge) filter, ``sort``
  and ``desc`` order, ``col`` (repeatable) chooses the columns, ``page`` pages;
- ``/prompt/{prompt_id}``: every system's story for one prompt side by side, with its scores,
  people's ratings (each rater and the mean) and each judge's score, rationale and answer
  probabilities; where a story has a reference, the words that differ from it are marked;
- ``/disagree``: stories ranked by the gap between a metric (or judge) and people
  (``metric``, ``criterion``), or by how much raters disagree (``by=raters``);
- ``/pairs``: the comparisons, with pairs a judge decided differently in its two orders flagged,
  the win-rate matrix, the Bradley-Terry ranking with bootstrap intervals, and any stored
  rankings (``storyeval rank`` outputs) given;
- ``/sessions`` and ``/session/{n}``: writing sessions (CYOA, machine-in-the-loop, slogans)
  and one replayed turn by turn: each suggestion offered with its generator, the one chosen,
  the writer's actions and the text kept, then the survey answers;
- ``/files``: what was read and what could not be joined.

Only requests naming a loopback host are answered (``allowed_hosts``; ``storyeval view
--allow-host NAME`` adds one), so a page elsewhere that rebinds its name to 127.0.0.1 reads
nothing.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from typing import Any
from urllib.parse import urlencode

import pandas as pd
from fastapi import FastAPI, HTTPException, Query, Request
from fastapi.responses import HTMLResponse

from storyeval.meta.review import rank_gap
from storyeval.view.data import ViewData

PAGE_SIZE = 50
FIXED = ("item_id", "system", "prompt_id", "words")
#: The navigation bar's page of each template (marked as the current page)
NAV_PAGES = {
    "table.html": "/",
    "disagree.html": "/disagree",
    "pairs.html": "/pairs",
    "perturbations.html": "/perturbations",
    "sessions.html": "/sessions",
    "session.html": "/sessions",
    "files.html": "/files",
}


#: The Host header values the viewer answers by default: its loopback names, so that a web
#: page that rebinds its own DNS name to 127.0.0.1 cannot read the stories (DNS rebinding)
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "[::1]")


def create_view_app(data: ViewData, *, allowed_hosts: Sequence[str] = LOOPBACK_HOSTS) -> FastAPI:
    """The app over ``data`` (see the module docstring), answering requests whose Host header
    names one of ``allowed_hosts`` (any port) and refusing the others with 400."""
    import jinja2
    from fastapi.staticfiles import StaticFiles
    from starlette.middleware.trustedhost import TrustedHostMiddleware

    from storyeval import __version__
    from storyeval.server.security import SecurityHeaders

    app = FastAPI(title="storyeval view", docs_url=None, redoc_url=None, openapi_url=None)
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("storyeval.view", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["num"] = _number
    env.filters["compact"] = compact_number
    env.filters["full"] = full_number
    env.filters["short"] = _short_name
    table = data.table()
    rows_of = {name: ItemRows(getattr(data, name)) for name in ("scores", "people", "judges")}

    def page(name: str, **context: Any) -> HTMLResponse:
        context.setdefault("current", NAV_PAGES.get(name))
        body = env.get_template(name).render(version=__version__, **context)
        return HTMLResponse(body)

    from starlette.exceptions import HTTPException as StarletteHTTPException

    @app.exception_handler(StarletteHTTPException)
    async def error_page(request: Request, exc: StarletteHTTPException) -> HTMLResponse:
        body = env.get_template("message.html").render(
            version=__version__, status=exc.status_code, message=str(exc.detail)
        )
        return HTMLResponse(body, status_code=exc.status_code)

    @app.get("/", response_class=HTMLResponse)
    def table_view(
        request: Request,
        system: list[str] = Query(default=[]),
        q: str = "",
        sort: str = "item_id",
        desc: bool = False,
        col: list[str] = Query(default=[]),
        page_number: int = Query(default=1, alias="page", ge=1),
        within: list[str] = Query(default=[], alias="range"),
        rc: str = "",
        rlo: str = "",
        rhi: str = "",
    ) -> HTMLResponse:
        limits = _ranges([*within, f"{rc}:{rlo}:{rhi}"], table)
        shown, total, columns = _filtered(
            _within(table, limits), data, system, q, sort, desc, col, page_number
        )
        return page(
            "table.html",
            **_table_context(table, data, shown, total, columns, page_number),
            chosen=system,
            q=q,
            sort=sort,
            desc=desc,
            limits=limits,
            query=urlencode([(k, v) for k, v in request.query_params.multi_items() if k != "page"]),
        )

    @app.get("/prompt/{prompt_id}", response_class=HTMLResponse)
    def prompt_view(prompt_id: str) -> HTMLResponse:
        stories = data.stories.by_prompt(prompt_id)
        if not stories:
            raise HTTPException(404, f"no story for prompt {prompt_id!r}")
        cards = [_card(rows_of, s) for s in sorted(stories, key=lambda s: s.system or "")]
        return page("prompt.html", prompt_id=prompt_id, prompt=stories[0].prompt, cards=cards)

    _add_reading_routes(app, data, table, page)
    from storyeval.server import __file__ as server_file

    static = str(__import__("pathlib").Path(server_file).parent / "static")
    app.mount("/static", StaticFiles(directory=static), name="static")
    app.add_middleware(SecurityHeaders)
    app.add_middleware(TrustedHostMiddleware, allowed_hosts=list(allowed_hosts))
    return app


def _add_reading_routes(
    app: FastAPI, data: ViewData, table: pd.DataFrame, page: Callable[..., HTMLResponse]
) -> None:
    """The disagreement, pairs and files views."""

    @app.get("/disagree", response_class=HTMLResponse)
    def disagree_view(metric: str = "", criterion: str = "", by: str = "metric") -> HTMLResponse:
        rows, note = _disagreements(table, data, metric, criterion, by)
        metrics = [c for c in table.columns if c not in FIXED and not c.startswith("people:")]
        criteria = sorted(set(data.people["criterion"])) if not data.people.empty else []
        return page(
            "disagree.html",
            rows=rows,
            note=note,
            metric=metric,
            criterion=criterion,
            by=by,
            metrics=metrics,
            criteria=criteria,
        )

    ranking: list[pd.DataFrame] = []  # computed on first request (a bootstrap)

    @app.get("/pairs", response_class=HTMLResponse)
    def pairs_view() -> HTMLResponse:
        rows, matrix = _pairs(data.comparisons)
        if not ranking:
            ranking.append(_ranking(data.comparisons))
        return page(
            "pairs.html",
            rows=rows,
            matrix=matrix,
            ranking=ranking[0].to_dict("records"),
            rankings=data.rankings.to_dict("records"),
        )

    @app.get("/perturbations", response_class=HTMLResponse)
    def perturbations_view(
        technique: str = "", page_number: int = Query(default=1, alias="page", ge=1)
    ) -> HTMLResponse:
        pairs, techniques = _perturbation_pairs(data, technique)
        start = (page_number - 1) * 20
        return page(
            "perturbations.html",
            pairs=pairs[start : start + 20],
            total=len(pairs),
            techniques=techniques,
            technique=technique,
            page=page_number,
            pages=max(1, math.ceil(len(pairs) / 20)),
        )

    @app.get("/files", response_class=HTMLResponse)
    def files_view() -> HTMLResponse:
        return page("files.html", files=data.files, unjoined=data.unjoined)

    @app.get("/sessions", response_class=HTMLResponse)
    def sessions_view() -> HTMLResponse:
        return page("sessions.html", sessions=[_session_row(s) for s in data.sessions])

    @app.get("/session/{number}", response_class=HTMLResponse)
    def session_view(number: int) -> HTMLResponse:
        if not 1 <= number <= len(data.sessions):
            raise HTTPException(404, f"no session {number} (there are {len(data.sessions)})")
        record = data.sessions[number - 1]
        return page("session.html", number=number, session=_session_row(record), record=record)


def _table_context(
    table: pd.DataFrame,
    data: ViewData,
    shown: pd.DataFrame,
    total: int,
    columns: list[str],
    page_number: int,
) -> dict[str, Any]:
    """What the stories table shows: the rows, the columns in their groups (foldable: the
    metrics, people's and judges' columns) and the pages."""
    group_of = {c: column_group(c) for c in table.columns}
    return {
        "rows": shown.to_dict("records"),
        "columns": columns,
        "group_of": group_of,
        "header_groups": _runs([group_of[c] for c in columns]),
        "foldable": [
            g for g in ("metrics", "people", "judges") if g in {group_of[c] for c in columns}
        ],
        "total": total,
        "page": page_number,
        "pages": max(1, math.ceil(total / PAGE_SIZE)),
        "systems": data.stories.systems(),
        "all_columns": list(table.columns),
        "numeric": [c for c in table.columns if c not in FIXED],
    }


def column_group(column: str) -> str:
    """The group a column of the stories table belongs to: ``story`` (its id, system, prompt,
    words), ``people``, ``judges`` or ``metrics``."""
    if column in FIXED:
        return "story"
    if column.startswith("people:"):
        return "people"
    if column.startswith("judge:"):
        return "judges"
    return "metrics"


def _runs(groups: list[str]) -> list[tuple[str, int]]:
    """Consecutive equal groups as (group, count): the spans of the header's first row."""
    runs: list[tuple[str, int]] = []
    for group in groups:
        if runs and runs[-1][0] == group:
            runs[-1] = (group, runs[-1][1] + 1)
        else:
            runs.append((group, 1))
    return runs


def compact_number(value: Any) -> str:
    """A table cell: three significant digits (the full value is in the cell's title).

    >>> compact_number(0.123456), compact_number(12345.678), compact_number(7), compact_number(None)
    ('0.123', '1.23e+04', '7', 'n/a')
    """
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    if isinstance(value, float):
        return f"{value:.3g}"
    return str(value)


def full_number(value: Any) -> str:
    """The value as stored, for a cell's title."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "no value"
    return repr(value) if isinstance(value, float) else str(value)


def _short_name(column: str) -> str:
    """A column header without its group prefix (the group row names it)."""
    return column.split(":", 1)[1] if column.startswith(("people:", "judge:")) else column


def _number(value: Any) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    if isinstance(value, float):
        return f"{value:.3f}"
    return str(value)


def _ranges(values: list[str], table: pd.DataFrame) -> list[tuple[str, float | None, float | None]]:
    """``COLUMN:LOW:HIGH`` filters (either bound may be empty) on numeric columns; a bad one
    is a 422 that says which."""
    limits = []
    for value in values:
        parts = value.rsplit(":", 2)  # column names may hold colons (people:coherence)
        column, low, high = ([""] * (3 - len(parts)) + parts) if len(parts) < 3 else parts
        if not column and not low and not high:
            continue  # the form's empty row
        if column not in table.columns or column in ("item_id", "system", "prompt_id"):
            raise HTTPException(422, f"range: no numeric column {column!r}")
        try:
            parsed = tuple(float(b) if b.strip() else None for b in (low, high))
        except ValueError:
            raise HTTPException(422, f"range: bounds must be numbers; got {value!r}") from None
        limits.append((column, parsed[0], parsed[1]))
    return limits


def _within(
    table: pd.DataFrame, limits: list[tuple[str, float | None, float | None]]
) -> pd.DataFrame:
    """The rows whose values lie within every range (a missing value is outside)."""
    rows = table
    for column, low, high in limits:
        values = pd.to_numeric(rows[column], errors="coerce")
        keep = values.notna()
        if low is not None:
            keep &= values >= low
        if high is not None:
            keep &= values <= high
        rows = rows[keep]
    return rows


def _filtered(
    table: pd.DataFrame,
    data: ViewData,
    systems: list[str],
    text: str,
    sort: str,
    desc: bool,
    columns: list[str],
    page_number: int,
) -> tuple[pd.DataFrame, int, list[str]]:
    """The page of rows the query asks for, the number of matching rows and the columns."""
    rows = table
    if systems:
        rows = rows[rows["system"].isin(systems)]
    if text:
        rows = rows[rows["item_id"].isin(data.stories.matching(text))]
    if sort in rows.columns:
        rows = rows.sort_values(sort, ascending=not desc, kind="stable", na_position="last")
    chosen = [c for c in columns if c in table.columns] or list(table.columns)
    chosen = [
        *[c for c in FIXED if c in chosen or c == "item_id"],
        *[c for c in chosen if c not in FIXED],
    ]
    start = (page_number - 1) * PAGE_SIZE
    return rows.iloc[start : start + PAGE_SIZE][chosen], len(rows), chosen


class ItemRows:
    """Each item's rows of a table (``item_id`` column), in the table's order: the positions
    are found once, on first use, so a prompt page reads its stories' rows instead of masking
    the whole table for each story (which made exporting every prompt page quadratic in the
    corpus: 9x on 5,000 stories' cards in ``benchmarks/bench_fast_paths.py``)."""

    def __init__(self, frame: pd.DataFrame) -> None:
        self.frame = frame
        self._positions: dict[Any, Any] | None = None

    def __call__(self, item_id: str) -> pd.DataFrame:
        """The rows of ``item_id`` (none: an empty table with the columns)."""
        if self._positions is None:
            grouped = self.frame.groupby("item_id", sort=False)
            self._positions = grouped.indices if len(self.frame) else {}
        positions = self._positions.get(item_id)
        return self.frame.iloc[positions if positions is not None else []]


def _card(rows_of: dict[str, ItemRows], story: Any) -> dict[str, Any]:
    """One story of the prompt view with what is known of it."""
    scores = rows_of["scores"](story.id)
    people = rows_of["people"](story.id)
    judges = rows_of["judges"](story.id)
    means = people.groupby("criterion")["value"].mean().to_dict() if len(people) else {}
    return {
        "story": story,
        "scores": scores.sort_values("metric").to_dict("records"),
        "people": people.sort_values(["criterion", "rater_id"]).to_dict("records"),
        "means": means,
        "judges": judges.sort_values("criterion").to_dict("records"),
        "reference": story.references[0] if story.references else "",
        "against_reference": _diff(story.references[0], story.story)[1] if story.references else [],
    }


def _disagreements(
    table: pd.DataFrame, data: ViewData, metric: str, criterion: str, by: str
) -> tuple[list[dict[str, Any]], str]:
    """Stories by the gap between a metric's and people's percentile ranks, or by the
    spread of the raters' ratings."""
    if by == "raters":
        if data.people.empty:
            return [], "no people's judgments were given"
        chosen = (
            data.people if not criterion else data.people[data.people["criterion"] == criterion]
        )
        spread = chosen.groupby(["item_id", "criterion"])["value"].agg(["std", "count", "mean"])
        spread = spread[spread["count"] > 1].sort_values("std", ascending=False).reset_index()
        return _with_prompts(spread.head(100), data), ""
    human = f"people:{criterion}"
    if metric not in table.columns or human not in table.columns:
        return [], "choose a metric (or judge) and a criterion people rated"
    both = table[["item_id", "system", metric, human]].dropna()
    if len(both) < 2:
        return [], "fewer than two stories have both values"
    gap = rank_gap(both[metric], both[human])
    both = both.assign(rank_gap=gap, abs_gap=gap.abs()).sort_values("abs_gap", ascending=False)
    return _with_prompts(both.head(100), data), ""


def _with_prompts(frame: pd.DataFrame, data: ViewData) -> list[dict[str, Any]]:
    records: list[dict[str, Any]] = frame.to_dict("records")
    for record in records:
        record["prompt_id"] = data.prompt_of(data.stories[record["item_id"]])
    return records


def _perturbation_pairs(data: ViewData, technique: str) -> tuple[list[dict[str, Any]], list[str]]:
    """Perturbed stories whose original is among the stories: both texts as diff segments
    (``same``/``old``/``new``), the techniques and each metric's two scores."""
    scores = data.scores.pivot_table(index="item_id", columns="metric", values="value")
    pairs, techniques = [], set()
    for story in data.stories.derived():
        source = str(story.extra.get("source_id") or "")
        if not source or source not in data.stories:
            continue
        used = [str(t) for t in story.extra.get("techniques") or []]
        techniques.update(used)
        if technique and technique not in used:
            continue
        original = data.stories[source]
        both = [
            {"metric": m, "original": scores.at[source, m], "perturbed": scores.at[story.id, m]}
            for m in scores.columns
            if source in scores.index and story.id in scores.index
        ]
        old, new = _diff(original.story, story.story)
        pairs.append(
            {
                "id": story.id,
                "source": source,
                "techniques": used,
                "old": old,
                "new": new,
                "scores": both,
            }
        )
    return pairs, sorted(techniques)


#: The largest word-by-word comparison a diff makes at once (words of one side times words of
#: the other): two 2,000-word texts; longer texts are compared sentence by sentence first
WORD_DIFF_BUDGET = 4_000_000
_SENTENCE_END = re.compile(r"(?<=[.!?\"”])\s+")


def _diff(before: str, after: str) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """Word-level segments of two texts: ``(kind, text)`` with kind ``same`` or ``changed``
    (escaped by the template like any text). A word diff costs the product of the two texts'
    lengths (52 s for two 50,000-word texts), so texts above :data:`WORD_DIFF_BUDGET` are
    first matched sentence by sentence and words are compared inside changed blocks only while
    the comparisons made stay within twice the budget (beyond, a changed block is marked
    whole): under a second whatever the length."""
    a, b = before.split(" "), after.split(" ")
    if len(a) * len(b) <= WORD_DIFF_BUDGET:
        return _word_diff(a, b)
    import difflib

    sa, sb = _SENTENCE_END.split(before), _SENTENCE_END.split(after)
    old: list[tuple[str, str]] = []
    new: list[tuple[str, str]] = []
    spent = 0
    for op, i1, i2, j1, j2 in difflib.SequenceMatcher(a=sa, b=sb, autojunk=False).get_opcodes():
        left, right = " ".join(sa[i1:i2]), " ".join(sb[j1:j2])
        if op == "equal":
            old.append(("same", left + " "))
            new.append(("same", right + " "))
            continue
        words_a, words_b = left.split(" ") if left else [], right.split(" ") if right else []
        cost = len(words_a) * len(words_b)
        if words_a and words_b and spent + cost <= 2 * WORD_DIFF_BUDGET:
            spent += cost
            part_old, part_new = _word_diff(words_a, words_b)
            old += part_old
            new += part_new
            continue
        old += [("changed", left + " ")] if left else []
        new += [("changed", right + " ")] if right else []
    return old, new


def _word_diff(a: list[str], b: list[str]) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    import difflib

    old: list[tuple[str, str]] = []
    new: list[tuple[str, str]] = []
    for op, i1, i2, j1, j2 in difflib.SequenceMatcher(a=a, b=b, autojunk=False).get_opcodes():
        kind = "same" if op == "equal" else "changed"
        if i2 > i1:
            old.append((kind, " ".join(a[i1:i2]) + " "))
        if j2 > j1:
            new.append((kind, " ".join(b[j1:j2]) + " "))
    return old, new


def _pairs(comparisons: pd.DataFrame) -> tuple[list[dict[str, Any]], pd.DataFrame]:
    """The comparisons with inconsistent orders flagged, and the win-rate matrix."""
    if comparisons.empty:
        return [], pd.DataFrame()
    from storyeval.meta.comparisons import win_rate_matrix

    frame = comparisons.copy()
    keys = [k for k in ("item_id", "criterion", "rater_id") if k in frame]
    frame["inconsistent"] = frame.groupby(keys)["winner"].transform("nunique") > 1
    matrix = win_rate_matrix(comparisons)
    return frame.head(500).to_dict("records"), matrix


def _ranking(comparisons: pd.DataFrame) -> pd.DataFrame:
    """Bradley-Terry strengths of the compared systems with bootstrap intervals over prompts
    (200 replicates; every criterion together), best first."""
    if comparisons.empty:
        return pd.DataFrame()
    import warnings

    from storyeval.meta.comparisons import rank_systems

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        table = rank_systems(comparisons, n_boot=200, seed=0)
    return table[table["method"] == "bradley-terry"].reset_index(drop=True)


def _session_row(record: dict[str, Any]) -> dict[str, Any]:
    """A session's summary: id, kind, participant, condition, status, turns or tasks, time."""
    steps = record.get("turns") if record.get("kind") != "slogan" else record.get("tasks")
    started, finished = record.get("started_at"), record.get("finished_at")
    minutes = (
        (finished - started) / 60
        if isinstance(started, int | float) and isinstance(finished, int | float)
        else None
    )
    prompt = record.get("prompt") or {}
    return {
        "id": record.get("session_id", ""),
        "kind": record.get("kind", ""),
        "participant": record.get("participant", ""),
        "condition": record.get("condition") or "",
        "status": record.get("status", ""),
        "steps": len(steps or []),
        "minutes": minutes,
        "prompt": (prompt.get("text") or prompt.get("alt") or prompt.get("id") or "")
        if isinstance(prompt, dict)
        else "",
    }
