"""Discrimination tests: does a metric prefer the original story to an altered copy?

For each pair (original, altered) a metric *wins* when it scores the original better (higher,
or lower for a metric where lower is better), *loses* when it scores the altered story better,
and *ties* when both scores are equal. The table reports the fraction of pairs won (ties
count as not won) with an exact (Clopper-Pearson) interval, the fraction with ties counted
as half, and a one-sided sign test (binomial test of wins against losses, ties left out, as
is usual for the sign test) that the metric prefers originals more often than chance.

Pairs come from
- a pair file (JSONL or CSV) with ``original_id`` and ``altered_id`` and any other columns
  (e.g. ``technique``), scores for both ids in the score file(s);
- the perturbation engine's output (records with ``id``, ``source_id``, ``story``,
  ``techniques``): each record is paired with its source by ``source_id``;
- two score files with the same item ids, one for the originals and one for the altered
  stories (:func:`pairs_from_score_files`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from storyeval.base.errors import (
    DataCoverageWarning,
    DataFileError,
    DataProblem,
    DegenerateInputWarning,
    warn,
)
from storyeval.base.signature import Signature, SignatureValue
from storyeval.base.stats import binomial_test
from storyeval.base.validation import check_confidence
from storyeval.corpus import Score, iter_raw_records, read_scores
from storyeval.meta.data import MetaInputError, _scores_to_frame

PAIR_COLUMNS: tuple[str, ...] = ("original_id", "altered_id")


def edit_operations(edits: Any) -> str | None:
    """The distinct operations of a perturbed record's ``edits`` (``storyeval perturb``'s
    output), sorted and ``|``-joined: ``"ngram_repetition|reorder"``; None without edits.

    >>> edit_operations([{"operation": "reorder"}, {"operation": "keyword"}, {"operation": "keyword"}])
    'keyword|reorder'
    """
    if not isinstance(edits, list):
        return None
    names = {str(e["operation"]) for e in edits if isinstance(e, dict) and e.get("operation")}
    return "|".join(sorted(names)) or None


def _technique_names(value: Any) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [value] if value.strip() else []
    if isinstance(value, dict):
        for key in ("name", "technique", "type"):
            if key in value:
                return [str(value[key])]
        return [str(value)]
    if isinstance(value, list | tuple):
        names: list[str] = []
        for item in value:
            names.extend(_technique_names(item))
        return names
    return [str(value)]


def read_pairs(path: str | Path) -> pd.DataFrame:
    """Read a pair file (JSONL or CSV): ``original_id``, ``altered_id``, other columns kept.

    List values (several techniques) are joined with ``|``; each part counts as a group value
    in :func:`discrimination`.

    Raises
    ------
    DataFileError
        ``FILE:LINE: reason`` for a missing id, a pair of identical ids, or a duplicate pair.
    """
    problems: list[DataProblem] = []
    rows: list[dict[str, Any]] = []
    seen: dict[tuple[str, str], int] = {}
    for line, record in iter_raw_records(path, required=PAIR_COLUMNS):
        if isinstance(record, DataProblem):
            problems.append(record)
            continue
        ids = []
        for key in PAIR_COLUMNS:
            value = record.get(key)
            if value is None or not str(value).strip():
                problems.append(DataProblem(str(path), line, f"required field '{key}' is missing"))
                break
            ids.append(str(value))
        if len(ids) < 2:
            continue
        if ids[0] == ids[1]:
            problems.append(
                DataProblem(str(path), line, f"a story is paired with itself ({ids[0]!r})")
            )
            continue
        pair = (ids[0], ids[1])
        if pair in seen:
            problems.append(
                DataProblem(str(path), line, f"duplicate pair {pair} (first on line {seen[pair]})")
            )
            continue
        seen[pair] = line
        row = {"original_id": ids[0], "altered_id": ids[1]}
        for name, value in record.items():
            if name in PAIR_COLUMNS:
                continue
            row[name] = "|".join(_technique_names(value)) if isinstance(value, list) else value
        rows.append(row)
    if problems:
        raise DataFileError(problems)
    if not rows:
        raise DataFileError.single(path, 1, "the file holds no pairs")
    return pd.DataFrame(rows)


def pairs_from_perturbations(path: str | Path) -> pd.DataFrame:
    """Pairs from the perturbation engine's output: (``source_id``, ``id``) per record.

    Returns columns ``original_id``, ``altered_id``, ``techniques`` (names joined with ``|``;
    a technique given as a record uses its ``name``, ``technique`` or ``type`` field).

    Raises
    ------
    DataFileError
        ``FILE:LINE: reason`` for a record without ``id`` or ``source_id``, or a duplicate id.
    """
    problems: list[DataProblem] = []
    rows: list[dict[str, Any]] = []
    seen: dict[str, int] = {}
    for line, record in iter_raw_records(path, required=("id", "source_id")):
        if isinstance(record, DataProblem):
            problems.append(record)
            continue
        item = record.get("id")
        source = record.get("source_id")
        if item is None or not str(item).strip():
            problems.append(DataProblem(str(path), line, "required field 'id' is missing"))
            continue
        if source is None or not str(source).strip():
            problems.append(
                DataProblem(
                    str(path),
                    line,
                    "required field 'source_id' is missing (is this "
                    "the output of `storyeval perturb`?)",
                )
            )
            continue
        if str(item) in seen:
            problems.append(
                DataProblem(
                    str(path), line, f"duplicate id {item!r} (first on line {seen[str(item)]})"
                )
            )
            continue
        seen[str(item)] = line
        techniques = record.get("techniques")
        if isinstance(techniques, str) and techniques.strip().startswith("["):
            import contextlib
            import json

            with contextlib.suppress(json.JSONDecodeError):
                techniques = json.loads(techniques)
        rows.append(
            {
                "original_id": str(source),
                "altered_id": str(item),
                "techniques": "|".join(_technique_names(techniques)) or None,
                "operations": edit_operations(record.get("edits")),
            }
        )
    if problems:
        raise DataFileError(problems)
    if not rows:
        raise DataFileError.single(path, 1, "the file holds no perturbed records")
    return pd.DataFrame(rows)


def pairs_from_score_files(
    original: str | Path, altered: str | Path
) -> tuple[pd.DataFrame, list[Score]]:
    """Pairs from two score files that score the same item ids (originals, altered copies).

    Returns the pairs (``original_id`` = ``altered_id`` = the shared item id would clash, so
    the altered ids are prefixed with ``altered:``) and the combined score records.
    """
    originals = read_scores(original)
    altered_scores = read_scores(altered)
    renamed = [
        Score(f"altered:{s.item_id}", s.metric, s.value, s.signature, dict(s.extra))
        for s in altered_scores
    ]
    shared = sorted({s.item_id for s in originals} & {s.item_id for s in altered_scores})
    if not shared:
        raise MetaInputError(
            f"{original} and {altered} share no item id; the two files must score the "
            "original and the altered version of each story under the same id"
        )
    pairs = pd.DataFrame({"original_id": shared, "altered_id": [f"altered:{i}" for i in shared]})
    return pairs, [*originals, *renamed]


def metric_direction(signature: str) -> bool | None:
    """``higher_is_better`` read from a score signature's field of that name, if present."""
    if not signature:
        return None
    try:
        fields = Signature.parse(signature.split("; ")[0]).fields
    except ValueError:
        return None
    value = fields.get("higher_is_better")
    if value is None:
        return None
    text = str(value).lower()
    if text in ("yes", "true", "1"):
        return True
    if text in ("no", "false", "0"):
        return False
    return None


def registered_direction(metric: str) -> bool | None:
    """``higher_is_better`` of a metric in storyeval's metric registry (None if unknown or
    if the metric declares no direction)."""
    try:
        from storyeval.metrics.registry import get_metric
    except ImportError:  # pragma: no cover - the registry ships with storyeval
        return None
    try:
        return get_metric(metric).higher_is_better
    except KeyError:
        return None


def discrimination(
    scores: Sequence[Score] | pd.DataFrame,
    pairs: pd.DataFrame,
    *,
    metrics: Sequence[str] | None = None,
    lower_is_better: Iterable[str] = (),
    by: str | None = None,
    confidence: float = 0.95,
    tie_tolerance: float = 0.0,
) -> pd.DataFrame:
    """How often each metric scores the original story better than its altered copy.

    Parameters
    ----------
    scores : sequence of Score, or DataFrame (``item_id``, ``metric``, ``value``)
        Must score both members of the pairs.
    pairs : DataFrame
        ``original_id``, ``altered_id`` and optional grouping columns.
    metrics : sequence of str, optional
    lower_is_better : iterable of str
        Metrics where a lower score is better (perplexity...). Otherwise the direction is a
        ``higher_is_better`` field of the score signature, else the metric registry's
        declaration (``storyeval metrics``), else higher is better.
    by : str, optional
        A pair column to break the results down by (e.g. ``techniques``); ``|``-joined
        values count for each part; an ``(all)`` group is always included.
    confidence : float
        Of the Clopper-Pearson interval of the win fraction.
    tie_tolerance : float
        Scores closer than this count as a tie (default: exactly equal).

    Returns
    -------
    DataFrame
        One row per metric (x group): ``metric, group, direction, n_pairs, wins, losses,
        ties, missing, estimate`` (wins / n_pairs), ``ci_low, ci_high``,
        ``win_rate_ties_half`` ((wins + ties / 2) / n_pairs), ``p_value`` (one-sided sign
        test, ties left out), ``method``, ``signature``, ``metric_signature``.

    Examples
    --------
    >>> import pandas as pd
    >>> scores = pd.DataFrame({"item_id": ["a", "a'", "b", "b'", "c", "c'"], "metric": "m",
    ...                        "value": [0.9, 0.5, 0.7, 0.7, 0.8, 0.2]})
    >>> pairs = pd.DataFrame({"original_id": ["a", "b", "c"], "altered_id": ["a'", "b'", "c'"]})
    >>> row = discrimination(scores, pairs).iloc[0]
    >>> int(row.wins), int(row.ties), int(row.losses), round(float(row.estimate), 3), float(row.p_value)
    (2, 1, 0, 0.667, 0.25)
    """
    check_confidence(confidence)
    for column in PAIR_COLUMNS:
        if column not in pairs.columns:
            raise ValueError(f"pairs lack the column {column!r}")
    if by is not None and by not in pairs.columns:
        raise ValueError(
            f"pairs have no column {by!r} to group by; columns: {', '.join(map(str, pairs.columns))}"
        )
    frame = _scores_to_frame(scores)
    names, lower = _checked_metrics(frame, metrics, lower_is_better)
    _check_pairs_scored(frame, pairs)
    wide = frame.pivot(index="item_id", columns="metric", values="value")
    groups = _pair_groups(pairs, by)
    rows: list[dict[str, Any]] = []
    originals = pairs["original_id"].astype(str).to_numpy()
    altered = pairs["altered_id"].astype(str).to_numpy()
    missing_total = 0
    for metric in names:
        signature = "; ".join(
            sorted({s for s in frame.loc[frame["metric"] == metric, "signature"] if s})
        )
        declared = metric_direction(signature)
        if declared is None:
            declared = registered_direction(metric)
        higher = not (metric in lower or declared is False)
        a = wide[metric].reindex(originals).to_numpy(dtype=float)
        b = wide[metric].reindex(altered).to_numpy(dtype=float)
        diff = a - b if higher else b - a
        defined = np.isfinite(diff)
        missing_total += int((~defined).sum())
        for label, mask in groups:
            row = _sign_test_row(
                metric, label, diff[mask & defined], confidence=confidence, tolerance=tie_tolerance
            )
            row.update(
                direction="higher" if higher else "lower", missing=int((mask & ~defined).sum())
            )
            row["signature"] = _discrimination_signature(
                row["direction"], tie_tolerance, confidence
            )
            row["metric_signature"] = signature
            rows.append(row)
    if missing_total:
        warn(
            DataCoverageWarning,
            f"{missing_total} metric/pair combination(s) lack a score for the original or the "
            "altered story and were left out (see the 'missing' column)",
        )
    out = pd.DataFrame(rows, columns=DISCRIMINATION_COLUMNS)
    if by is None:
        out = out.drop(columns=["group"])
    return out


DISCRIMINATION_COLUMNS = (
    "metric",
    "group",
    "direction",
    "n_pairs",
    "wins",
    "losses",
    "ties",
    "missing",
    "estimate",
    "ci_low",
    "ci_high",
    "win_rate_ties_half",
    "p_value",
    "method",
    "signature",
    "metric_signature",
)


def _checked_metrics(
    frame: pd.DataFrame, metrics: Sequence[str] | None, lower_is_better: Iterable[str]
) -> tuple[list[str], set[str]]:
    if frame.empty:
        raise MetaInputError("no scores given")
    available = list(dict.fromkeys(frame["metric"]))
    names = list(metrics) if metrics is not None else available
    for name in names:
        if name not in available:
            raise ValueError(f"unknown metric {name!r}; available: {', '.join(available)}")
    lower = set(lower_is_better)
    for name in lower:
        if name not in available:
            raise ValueError(f"lower_is_better names an unknown metric {name!r}")
    return names, lower


def _check_pairs_scored(frame: pd.DataFrame, pairs: pd.DataFrame) -> None:
    ids = set(frame["item_id"])
    scored = pairs["original_id"].astype(str).isin(ids) | pairs["altered_id"].astype(str).isin(ids)
    if not scored.any():
        raise MetaInputError(
            "no story of any pair has a score: the score file must score the original and the "
            f"altered ids (e.g. {pairs['original_id'].iloc[0]!r} and {pairs['altered_id'].iloc[0]!r})"
        )


def _pair_groups(pairs: pd.DataFrame, by: str | None) -> list[tuple[str, np.ndarray]]:
    """``(all)`` and, with ``by``, one group per value (``|``-joined values count for each)."""
    groups: list[tuple[str, np.ndarray]] = [("(all)", np.ones(len(pairs), dtype=bool))]
    if by is None:
        return groups
    parts = pairs[by].map(
        lambda v: [] if v is None or (isinstance(v, float) and math.isnan(v)) else str(v).split("|")
    )
    for value in sorted({p for ps in parts for p in ps}):
        groups.append((value, parts.map(lambda ps, v=value: v in ps).to_numpy(dtype=bool)))
    return groups


def _sign_test_row(
    metric: str, label: str, diff: np.ndarray, *, confidence: float, tolerance: float
) -> dict[str, Any]:
    """Wins, losses and ties of the originals, the win rate with its interval and the
    one-sided sign test (ties left out)."""
    n = int(diff.size)
    wins = int((diff > tolerance).sum())
    losses = int((diff < -tolerance).sum())
    ties = n - wins - losses
    nan = float("nan")
    row: dict[str, Any] = {"metric": metric, "group": label, "n_pairs": n, "wins": wins}
    row.update(losses=losses, ties=ties, estimate=nan, ci_low=nan, ci_high=nan)
    row.update(win_rate_ties_half=nan, p_value=nan, method="sign_test")
    if n == 0:
        warn(
            DegenerateInputWarning,
            f"discrimination of {metric!r} ({label}) is undefined: no pair has both scores",
        )
        return row
    _, ci_low, ci_high = binomial_test(wins, n, confidence=confidence)
    row.update(estimate=wins / n, ci_low=ci_low, ci_high=ci_high)
    row["win_rate_ties_half"] = (wins + ties / 2) / n
    if wins + losses > 0:
        row["p_value"] = binomial_test(wins, wins + losses, alternative="greater")[0]
    return row


def _discrimination_signature(direction: str, tolerance: float, confidence: float) -> str:
    fields: dict[str, SignatureValue] = {
        "direction": direction,
        "ties": "not won; left out of the test",
        "tie_tolerance": tolerance,
        "ci": "clopper-pearson",
        "confidence": confidence,
        "test": "binomial one-sided",
    }
    return Signature("discrimination", fields).render()


__all__ = [
    "discrimination",
    "metric_direction",
    "pairs_from_perturbations",
    "pairs_from_score_files",
    "read_pairs",
]
