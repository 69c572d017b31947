"""Span annotation: which parts of a story have which problem, and how far annotators agree.

People (the ``spans`` study protocol) and LLM judges (``storyeval judge --rubric spans``) mark
the sentences of a story with a label from an error taxonomy. Both write the same long-format
judgments: per story and annotator one count per label (``criterion`` = the label) and a
``flagged_share`` row (the share of sentences marked) whose ``extra`` holds the spans
(``unit``, ``start``, ``end`` character offsets, ``label``) and the number of units. So the
counts go through ``correlate`` and ``judge-eval`` like any rating, and the spans through
:func:`span_agreement` (annotators with one another) and :func:`compare_spans` (a judge or a
metric against people).

Agreement on spans (following the error-annotation studies of story and summary evaluation):

* **overlap F1**: character overlap of two annotators' spans of a label, micro-averaged over
  annotator pairs and stories (``2 |A ∩ B| / (|A| + |B|)``);
* **unit alpha**: Krippendorff's alpha (nominal) on the units, each annotator's unit marked 1
  when it carries the label, per label and for ``any`` label.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import combinations
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from storyeval.corpus import Judgment

#: The built-in taxonomy of story errors: name and definition (shown to raters and judges).
STORY_TAXONOMY: tuple[tuple[str, str], ...] = (
    (
        "inconsistency",
        "contradicts something the story established earlier (a fact, a character's name, "
        "state or motive, the setting, the timeline)",
    ),
    ("incoherence", "does not follow from what comes before, or makes no sense in context"),
    ("repetition", "repeats words, phrases or events of the story without purpose"),
    ("factual_error", "states something false about the real world, or a commonsense error"),
    ("style", "ungrammatical, awkward, or in a register that does not fit the story"),
)
NONE = "none"
SHARE = "flagged_share"
SPAN_COLUMNS = ["item_id", "rater_id", "unit", "label", "start", "end", "system"]


@dataclass(frozen=True)
class Unit:
    """One annotation unit of a story (a sentence): 1-based index, character offsets, text."""

    index: int
    start: int
    end: int
    text: str


@functools.lru_cache(maxsize=4096)
def story_units(text: str) -> tuple[Unit, ...]:
    """The sentences of ``text`` with their character offsets in it.

    >>> [(u.index, u.start, u.end) for u in story_units("It rained. She stayed in.")]
    [(1, 0, 10), (2, 11, 25)]
    """
    from storyeval.text import split_sentences

    units: list[Unit] = []
    cursor = 0
    for sentence in split_sentences(text):
        start = text.find(sentence, cursor)
        if start < 0:  # the splitter normalised something: fall back to the running position
            start = cursor
        end = min(len(text), start + len(sentence))
        units.append(Unit(len(units) + 1, start, end, text[start:end]))
        cursor = end
    return tuple(units)


def span_rows(
    units: Sequence[Unit], labels: Mapping[int, str], taxonomy: Sequence[str]
) -> list[tuple[str, float, dict[str, Any]]]:
    """The judgments of one annotated story: ``(criterion, value, extra)`` per taxonomy label
    (the number of units marked with it) and the ``flagged_share`` row with the spans.

    ``labels`` maps 1-based unit indices to a label (``none`` and unknown units are dropped).

    >>> rows = span_rows(story_units("It rained. She ran. He sat."), {2: "repetition"}, ["repetition", "style"])
    >>> [(c, round(v, 3)) for c, v, _ in rows]
    [('repetition', 1.0), ('style', 0.0), ('flagged_share', 0.333)]
    >>> rows[-1][2]["spans"]
    [{'unit': 2, 'start': 11, 'end': 19, 'label': 'repetition'}]
    """
    by_index = {u.index: u for u in units}
    spans: list[dict[str, Any]] = [
        {"unit": i, "start": by_index[i].start, "end": by_index[i].end, "label": label}
        for i, label in sorted(labels.items())
        if label != NONE and i in by_index
    ]
    unknown = {str(s["label"]) for s in spans} - set(taxonomy)
    if unknown:
        raise ValueError(f"labels outside the taxonomy: {sorted(unknown)}")
    rows: list[tuple[str, float, dict[str, Any]]] = [
        (name, float(sum(s["label"] == name for s in spans)), {}) for name in taxonomy
    ]
    share = len(spans) / len(units) if units else 0.0
    rows.append((SHARE, share, {"units": len(units), "spans": spans}))
    return rows


def spans_frame(judgments: pd.DataFrame | Sequence[Judgment]) -> pd.DataFrame:
    """One row per annotated unit: ``item_id, rater_id, unit, label`` (``none`` for units left
    unmarked), character offsets of marked units, and the system, read from the
    ``flagged_share`` judgments (people's exports and judge runs alike)."""
    if not isinstance(judgments, pd.DataFrame):
        judgments = pd.DataFrame([j.to_dict() for j in judgments])
    if judgments.empty or "criterion" not in judgments:
        return pd.DataFrame(columns=SPAN_COLUMNS)
    shares = judgments[judgments["criterion"] == SHARE]
    rows = []
    for record in shares.to_dict("records"):
        extra = record  # judgment files and tables carry the extra fields flat
        n_units = int(extra.get("units") or 0)
        marked = {int(s["unit"]): s for s in extra.get("spans") or []}
        for unit in range(1, n_units + 1):
            span = marked.get(unit, {})
            rows.append(
                {
                    "item_id": str(record["item_id"]),
                    "rater_id": str(record["rater_id"]),
                    "unit": unit,
                    "label": span.get("label", NONE),
                    "start": span.get("start"),
                    "end": span.get("end"),
                    "system": extra.get("system"),
                }
            )
    return pd.DataFrame(rows, columns=SPAN_COLUMNS)


def _intervals(rows: pd.DataFrame, label: str) -> list[tuple[int, int]]:
    """The character spans of ``label`` (any label for ``any``) the rows cover, merged into
    disjoint ``[start, end)`` intervals (lengths, never sets of offsets: no span size costs
    memory)."""
    chosen = rows[_flagged(rows["label"], label)]
    spans = sorted((int(s), int(e)) for s, e in zip(chosen["start"], chosen["end"], strict=True))
    merged: list[tuple[int, int]] = []
    for start, end in spans:
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def _covered(intervals: Sequence[tuple[int, int]]) -> int:
    return sum(end - start for start, end in intervals)


def _shared(a: Sequence[tuple[int, int]], b: Sequence[tuple[int, int]]) -> int:
    """Characters two sets of disjoint sorted intervals share."""
    shared = i = j = 0
    while i < len(a) and j < len(b):
        shared += max(0, min(a[i][1], b[j][1]) - max(a[i][0], b[j][0]))
        if a[i][1] <= b[j][1]:
            i += 1
        else:
            j += 1
    return shared


def _overlap(frame: pd.DataFrame, label: str) -> tuple[float, int]:
    """Micro overlap F1 of every pair of annotators of each story, and the number of pairs."""
    inter = total = pairs = 0
    for _, story in frame.groupby("item_id", sort=False):
        marks = {r: _intervals(rows, label) for r, rows in story.groupby("rater_id", sort=True)}
        for a, b in combinations(sorted(marks), 2):
            inter += _shared(marks[a], marks[b])
            total += _covered(marks[a]) + _covered(marks[b])
            pairs += 1
    return (2 * inter / total if total else math.nan), pairs


def _flagged(labels: pd.Series, label: str) -> pd.Series:
    """Whether each unit carries ``label`` (any label for ``any``)."""
    return labels != NONE if label == "any" else labels == label


def _unit_matrix(frame: pd.DataFrame, label: str) -> np.ndarray:
    """Raters x units: 1 where the rater marked the unit with ``label`` (any label for
    ``any``), 0 where they left it, nan where they did not annotate the story."""
    flags = _flagged(frame["label"], label)
    keyed = frame.assign(key=frame["item_id"] + "#" + frame["unit"].astype(str), flag=flags)
    wide = keyed.pivot_table(index="rater_id", columns="key", values="flag", aggfunc="max")
    return np.asarray(wide.to_numpy(dtype=float), dtype=float)


def span_agreement(
    frame: pd.DataFrame, *, labels: Sequence[str], n_boot: int = 1000, seed: int = 0
) -> pd.DataFrame:
    """Agreement of annotators on spans, per label and for ``any`` label: overlap F1 and unit
    alpha with a bootstrap interval (see the module docstring); ``frame`` from
    :func:`spans_frame`."""
    from storyeval.meta.agreement import krippendorff_alpha

    rows = []
    for label in [*labels, "any"]:
        f1, pairs = _overlap(frame, label)
        matrix = _unit_matrix(frame, label) if len(frame) else np.empty((0, 0))
        marked = int(np.nansum(matrix)) if matrix.size else 0
        if marked and matrix.shape[0] >= 2:
            alpha, low, high = krippendorff_alpha(
                matrix, level="nominal", n_boot=n_boot, seed=seed, label=f"spans {label}"
            )
        else:
            alpha = low = high = math.nan
        rows.append(
            {
                "label": label,
                "overlap_f1": f1,
                "pairs": pairs,
                "unit_alpha": alpha,
                "ci_low": low,
                "ci_high": high,
                "units_marked": marked,
                "units": int(np.isfinite(matrix).any(axis=0).sum()) if matrix.size else 0,
                "raters": int(frame["rater_id"].nunique()) if len(frame) else 0,
            }
        )
    return pd.DataFrame(rows)


def majority_labels(frame: pd.DataFrame) -> pd.DataFrame:
    """Each unit's label by majority of its annotators (``none`` unless more than half of them
    marked it; then the most frequent label, ties broken by name), with the share marking."""
    rows = []
    for (item, unit), group in frame.groupby(["item_id", "unit"], sort=True):
        marked = group[group["label"] != NONE]
        share = len(marked) / len(group)
        label = NONE
        if share > 0.5:
            counts = marked["label"].value_counts()
            label = sorted(counts[counts == counts.max()].index)[0]
        first = marked.iloc[0] if len(marked) else group.iloc[0]
        rows.append(
            {
                "item_id": item,
                "rater_id": "majority",
                "unit": unit,
                "label": label,
                "start": first["start"],
                "end": first["end"],
                "system": first["system"],
                "share_marking": share,
            }
        )
    return pd.DataFrame(rows)


def compare_spans(
    people: pd.DataFrame, candidate: pd.DataFrame, *, labels: Sequence[str]
) -> pd.DataFrame:
    """A judge's (or any single annotator's) spans against people's majority, per label and for
    ``any``: character precision, recall and F1 (micro over stories), Cohen's kappa on the
    units, and the people's own pairwise overlap F1 beside it (what agreement among people
    looks like). Only stories both annotated are compared."""
    from sklearn.metrics import cohen_kappa_score

    shared = sorted(set(people["item_id"]) & set(candidate["item_id"]))
    people = people[people["item_id"].isin(shared)]
    candidate = candidate[candidate["item_id"].isin(shared)]
    reference = majority_labels(people)
    by_item = {
        item: (reference[reference["item_id"] == item], candidate[candidate["item_id"] == item])
        for item in shared
    }
    joined = reference.merge(candidate, on=["item_id", "unit"], suffixes=("_ref", "_cand"))
    rows = []
    for label in [*labels, "any"]:
        inter = n_ref = n_cand = 0
        for ref_rows, cand_rows in by_item.values():
            ref, cand = _intervals(ref_rows, label), _intervals(cand_rows, label)
            inter += _shared(ref, cand)
            n_ref, n_cand = n_ref + _covered(ref), n_cand + _covered(cand)
        ref_flags = _flagged(joined["label_ref"], label)
        cand_flags = _flagged(joined["label_cand"], label)
        kappa = (
            float(cohen_kappa_score(ref_flags, cand_flags))
            if ref_flags.nunique() > 1 or cand_flags.nunique() > 1
            else math.nan
        )
        people_f1, _ = _overlap(people, label)
        rows.append(
            {
                "label": label,
                "precision": inter / n_cand if n_cand else math.nan,
                "recall": inter / n_ref if n_ref else math.nan,
                "f1": 2 * inter / (n_ref + n_cand) if n_ref + n_cand else math.nan,
                "unit_kappa": kappa,
                "people_overlap_f1": people_f1,
                "stories": len(shared),
                "units": len(joined),
            }
        )
    return pd.DataFrame(rows)


#: The most units a story may have (a sentence each): far above any story, far below what
#: would exhaust memory
MAX_UNITS = 100_000


def check_span_records(path: str | Path, texts: Mapping[str, str] | None = None) -> None:
    """Check every ``flagged_share`` record of a judgments file before its spans are read:
    ``units`` a whole number in 1..:data:`MAX_UNITS`, each span a unit in 1..``units`` given
    once, with ``0 <= start < end`` character offsets and a label the file counts as a
    criterion; with the stories' ``texts``, the story's own sentence count and each span
    within its unit's offsets (so nothing lies past the story's end).

    Raises
    ------
    DataFileError
        ``FILE:LINE: reason`` for every bad record.
    """
    from storyeval.base.errors import DataFileError, DataProblem
    from storyeval.corpus import iter_raw_records

    records = [(n, r) for n, r in iter_raw_records(path) if isinstance(r, dict)]
    labels = {str(r.get("criterion")) for _, r in records} - {SHARE}
    problems: list[DataProblem] = []
    for number, record in records:
        if record.get("criterion") != SHARE:
            continue
        text = (texts or {}).get(str(record.get("item_id")))
        for reason in _span_problems(record, labels, None if text is None else story_units(text)):
            problems.append(DataProblem(str(path), number, reason))
    if problems:
        raise DataFileError(problems)


def _span_problems(
    record: Mapping[str, Any], labels: set[str], units: Sequence[Unit] | None
) -> list[str]:
    """What is wrong with one ``flagged_share`` record (empty when nothing)."""
    count = record.get("units")
    if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= MAX_UNITS:
        return [f"units must be a whole number in 1..{MAX_UNITS}; got {count!r}"]
    if units is not None and count != len(units):
        return [f"units is {count} but the story has {len(units)} sentences"]
    spans = record.get("spans") or []
    if not isinstance(spans, list):
        return [f"spans must be a list; got {type(spans).__name__}"]
    problems: list[str] = []
    seen: set[int] = set()
    for span in spans:
        reason = _span_problem(span, count, labels, seen, units)
        if reason:
            problems.append(reason)
    return problems


def _span_problem(
    span: Any, count: int, labels: set[str], seen: set[int], units: Sequence[Unit] | None
) -> str:
    if not isinstance(span, Mapping):
        return f"a span must be an object; got {span!r}"[:200]
    unit, start, end, label = (span.get(k) for k in ("unit", "start", "end", "label"))
    numbers = (unit, start, end)
    if any(isinstance(v, bool) or not isinstance(v, int) for v in numbers):
        return (
            f"a span's unit, start and end must be whole numbers; got {unit!r}, {start!r}, {end!r}"
        )
    assert isinstance(unit, int) and isinstance(start, int) and isinstance(end, int)
    if not 1 <= unit <= count:
        return f"span unit {unit} is outside the story's {count} units"
    if unit in seen:
        return f"unit {unit} is marked twice"
    seen.add(unit)
    if not 0 <= start < end:
        return f"span of unit {unit}: start {start} and end {end} must satisfy 0 <= start < end"
    if str(label) not in labels:
        return f"span of unit {unit}: label {label!r} is not one of the file's criteria ({', '.join(sorted(labels))})"
    if units is not None and not units[unit - 1].start <= start < end <= units[unit - 1].end:
        found = units[unit - 1]
        return (
            f"span of unit {unit} is at {start}-{end} but the story's unit {unit} is at "
            f"{found.start}-{found.end}"
        )
    return ""
