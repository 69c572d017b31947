"""Robustness of a metric's correlation: quality drift, subsets, dataset drift (Guan and Huang 2020, 4.4).

Quality drift
    Guan & Huang (2020) build biased test sets from annotated stories: with K + 1 quality
    levels (a story's mean of K binary labels is k/K), set I samples a story of level k with
    probability 1 / (|I - k| + 1), for I = 1..8 with K = 7. A metric that only works on bad
    (or only on good) stories shows a falling (or rising) correlation across the sets.
    :func:`quality_drift` reproduces this, repeats the sampling with seeds, and reports the
    spread over repeats.
Subsets
    :func:`subset_correlations` correlates within each value of a column (an error type, a
    system, a dataset, a genre), optionally adding a fixed part to every subset (Guan and Huang 2020
    Table 7 adds the 19 reasonable stories to each error type's stories).
Dataset drift
    :func:`dataset_drift` lays out the correlations of metrics trained on one corpus and tested
    on another beside their in-domain correlation (Guan and Huang 2020 Table 6), with the change.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from storyeval.base.errors import DataCoverageWarning, DataFileError, DataProblem, warn
from storyeval.base.signature import Signature
from storyeval.base.stats import check_method, check_variant, correlation, describe_replicates
from storyeval.corpus import iter_raw_records
from storyeval.meta.correlation import LEVELS, CorrelationSettings, correlate, settings_from
from storyeval.meta.data import MetaInputError, MetaTable, load_meta_table


def infer_levels(quality: np.ndarray, *, max_levels: int = 100, tolerance: float = 1e-6) -> int:
    """The smallest K such that every value of ``quality`` (in [0, 1]) is a multiple of 1/K.

    Raises ``ValueError`` when there is none up to ``max_levels`` (continuous scores): then
    pass the number of levels explicitly.

    Examples
    --------
    >>> import numpy as np
    >>> infer_levels(np.array([0, 1, 2, 5, 7]) / 7)
    7
    """
    q = np.asarray(quality, dtype=float)
    q = q[np.isfinite(q)]
    for k in range(1, max_levels + 1):
        if np.all(np.abs(q * k - np.round(q * k)) <= tolerance * k):
            return k
    raise ValueError(
        "cannot infer the number of quality levels: the human scores are not multiples of "
        f"1/K for any K <= {max_levels}; pass n_levels"
    )


def quality_levels(
    human: Sequence[float] | np.ndarray,
    *,
    n_levels: int | None = None,
    low: float | None = None,
    high: float | None = None,
) -> tuple[np.ndarray, int]:
    """Map human scores to quality levels k in 0..K: k = round(K (score - low) / (high - low)).

    ``low`` and ``high`` default to the smallest and largest score observed; pass the ends of
    the scale (0 and 1 for a mean of binary labels, 1 and 5 for a 5-point scale) when the data
    may not reach them. ``n_levels`` (K) is inferred when every normalized score is a multiple
    of 1/K (a mean of K binary labels); scores between levels are rounded (with a warning).

    Returns
    -------
    levels : array of int (nan scores get -1)
    K : int
    """
    h = np.asarray(human, dtype=float)
    finite = np.isfinite(h)
    if not finite.any():
        raise ValueError("no finite human score")
    lo = float(np.min(h[finite])) if low is None else float(low)
    hi = float(np.max(h[finite])) if high is None else float(high)
    if not hi > lo:
        raise ValueError(f"the quality scale needs high > low; got low={lo}, high={hi}")
    if np.any(h[finite] < lo - 1e-9) or np.any(h[finite] > hi + 1e-9):
        raise ValueError(f"human scores fall outside the scale [{lo}, {hi}]")
    q = np.where(finite, (h - lo) / (hi - lo), np.nan)
    k = infer_levels(q[finite]) if n_levels is None else int(n_levels)
    if k < 1:
        raise ValueError(f"n_levels must be >= 1; got {k}")
    scaled = q * k
    levels = np.where(finite, np.round(np.nan_to_num(scaled)), -1).astype(int)
    off = finite & (np.abs(scaled - np.round(np.nan_to_num(scaled))) > 1e-6)
    if off.any():
        warn(
            DataCoverageWarning,
            f"{int(off.sum())} human score(s) fall between the {k + 1} quality levels and were "
            "rounded to the nearest level",
        )
    return levels, k


def sampling_probability(set_index: int, level: Any) -> Any:
    """Probability that set I keeps a story of quality level k: 1 / (|I - k| + 1).

    >>> sampling_probability(3, 3), round(sampling_probability(1, 7), 4)
    (1.0, 0.1429)
    """
    value = 1.0 / (np.abs(set_index - np.asarray(level, dtype=float)) + 1.0)
    return float(value) if np.ndim(value) == 0 else value


def quality_drift(
    table: MetaTable,
    *,
    criterion: str,
    metrics: Sequence[str] | None = None,
    methods: Sequence[str] = ("pearson",),
    kendall_variant: str = "b",
    n_levels: int | None = None,
    low: float | None = None,
    high: float | None = None,
    sets: Sequence[int] | None = None,
    repeats: int = 20,
    seed: int = 0,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Correlations on biased test sets of different quality (Guan and Huang 2020, section 4.4).

    Parameters
    ----------
    table : MetaTable
    criterion : str
        The human score that defines quality (for UNION, the mean of the binary labels).
    metrics : sequence of str, optional
    methods : sequence of {"pearson", "spearman", "kendall"}
        Guan & Huang report Pearson's r.
    n_levels : int, optional
        K, the number of steps of the quality scale (levels 0..K); inferred when the scores
        are multiples of 1/K of the scale (see :func:`quality_levels`).
    low, high : float, optional
        The ends of the human scale (default: the observed min and max).
    sets : sequence of int, optional
        The set indices I. Default 1..K+1, as in the paper (K = 7 gives sets 1..8).
    repeats : int
        Independent samplings of every set; the spread over them is reported.
    seed : int

    Returns
    -------
    results : DataFrame
        One row per metric x set x method: ``metric, criterion, set, method, estimate``
        (mean over the repeats), ``sd``, ``min``, ``max``, ``n`` (mean set size),
        ``repeats``, ``undefined`` (repeats where the correlation was undefined),
        ``signature``, ``metric_signature``.
    composition : DataFrame
        One row per set x level: ``set, level, probability, items`` (stories of that level
        in the data) and ``expected`` (items x probability), to plot like Figure 2 (left).
    """
    if criterion not in table.human.columns:
        raise ValueError(f"unknown criterion {criterion!r}; available: {', '.join(table.criteria)}")
    methods = [check_method(m) for m in methods]
    check_variant(kendall_variant)
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1; got {repeats}")
    names = list(metrics) if metrics is not None else table.metric_names
    human = table.human[criterion].to_numpy(dtype=float)
    levels, k = quality_levels(human, n_levels=n_levels, low=low, high=high)
    set_indices = list(sets) if sets is not None else list(range(1, k + 2))
    if not set_indices:
        raise ValueError("give at least one set index")
    rng = np.random.default_rng(seed)
    uniforms = rng.random((len(set_indices), repeats, human.size))
    signature = Signature(
        "quality_drift",
        {
            "criterion": criterion,
            "levels": k,
            "low": low,
            "high": high,
            "sets": f"{set_indices[0]}..{set_indices[-1]}",
            "p": "1/(|I-k|+1)",
            "repeats": repeats,
            "seed": seed,
            "raters": table.aggregation,
        },
    ).render()
    rows: list[dict[str, Any]] = []
    composition: list[dict[str, Any]] = []
    valid = levels >= 0
    for s, set_index in enumerate(set_indices):
        prob = np.where(valid, sampling_probability(set_index, levels), 0.0)
        members = uniforms[s] < prob[None, :]
        composition += _composition(set_index, levels, k)
        for metric in names:
            x = table.metrics[metric].to_numpy(dtype=float)
            for method in methods:
                estimates, sizes = _set_correlations(x, human, members, method, kendall_variant)
                spread = describe_replicates(estimates)
                rows.append(
                    {
                        "metric": metric,
                        "criterion": criterion,
                        "set": set_index,
                        "method": method,
                        "estimate": spread["mean"],
                        "sd": spread["sd"],
                        "min": spread["min"],
                        "max": spread["max"],
                        "n": float(np.mean(sizes)),
                        "repeats": repeats,
                        "undefined": int(np.sum(~np.isfinite(estimates))),
                        "signature": signature,
                        "metric_signature": table.metric_signature(metric),
                    }
                )
    results = pd.DataFrame(rows)
    undefined = int(results["undefined"].sum()) if not results.empty else 0
    if undefined:
        warn(
            DataCoverageWarning,
            f"{undefined} set samplings gave an undefined correlation (too few or constant "
            "values); the estimates average the defined ones (see the 'undefined' column)",
        )
    return results, pd.DataFrame(composition)


def _composition(set_index: int, levels: np.ndarray, k: int) -> list[dict[str, Any]]:
    """Set I's stories per quality level: how many, kept with which probability."""
    rows = []
    for level in range(k + 1):
        count = int(np.sum(levels == level))
        p_level = sampling_probability(set_index, level)
        rows.append(
            {
                "set": set_index,
                "level": level,
                "probability": p_level,
                "items": count,
                "expected": count * p_level,
            }
        )
    return rows


def _set_correlations(
    x: np.ndarray, human: np.ndarray, members: np.ndarray, method: str, kendall_variant: str
) -> tuple[list[float], list[int]]:
    """The correlation and size of each sampling of a set (``members``: one row each)."""
    estimates, sizes = [], []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for keep in members:
            estimate, _, n = correlation(
                x[keep], human[keep], method=method, kendall_variant=kendall_variant
            )
            estimates.append(estimate)
            sizes.append(n)
    return estimates, sizes


def subset_correlations(
    table: MetaTable,
    column: str,
    *,
    include_with_each: str | None = None,
    include_all: bool = True,
    min_items: int = 3,
    metrics: Sequence[str] | None = None,
    criteria: Sequence[str] | None = None,
    settings: CorrelationSettings | None = None,
    **correlation: Any,
) -> pd.DataFrame:
    """Correlations within the subsets defined by a column of ``table.items``.

    Parameters
    ----------
    table : MetaTable
        Built with ``item_fields=[column]`` when the column comes from the story file;
        ``system`` and ``prompt_id`` are always there.
    column : str
        A column of ``table.items`` (error type, system, dataset...). List values (several
        error types) were joined with ``|`` and count for each of their parts.
    include_with_each : str, optional
        A value of ``column`` whose items are added to every other subset (Guan and Huang 2020 Table 7:
        the reasonable stories with the stories of each error type), and not a subset itself.
    include_all : bool
        Also report the whole table as subset ``(all)``.
    min_items : int
        Smaller subsets are left out (counted in a warning).
    metrics, criteria
        As in :func:`~storyeval.meta.correlate`.
    settings : CorrelationSettings, optional
        How to correlate (default: pooled Pearson, 1000 bootstrap replicates, seed 0).
    **correlation
        Or the settings as keywords (``levels``, ``methods``, ``kendall_variant``,
        ``n_boot``, ``confidence``, ``seed``).

    Returns
    -------
    DataFrame
        The correlation table with two leading columns, ``subset_column`` and ``subset``.
    """
    chosen = settings_from(
        settings, **{"levels": ("pooled",), "methods": ("pearson",), **correlation}
    )
    if column not in table.items.columns:
        raise ValueError(
            f"no item column {column!r}; available: {', '.join(map(str, table.items.columns))} "
            "(story fields must be asked for with item_fields / --field)"
        )
    raw = table.items[column]
    parts = raw.map(
        lambda v: [] if v is None or (isinstance(v, float) and math.isnan(v)) else str(v).split("|")
    )
    values = sorted({p for ps in parts for p in ps})
    if include_with_each is not None and include_with_each not in values:
        raise ValueError(
            f"{include_with_each!r} is not a value of {column!r}; values: {', '.join(values)}"
        )
    base = parts.map(lambda ps: include_with_each in ps) if include_with_each else None
    subsets: list[tuple[str, np.ndarray]] = []
    if include_all:
        subsets.append(("(all)", np.ones(len(raw), dtype=bool)))
    for value in values:
        if value == include_with_each:
            continue
        mask = parts.map(lambda ps, v=value: v in ps).to_numpy(dtype=bool)
        label = value
        if base is not None:
            mask = mask | base.to_numpy(dtype=bool)
            label = f"{value} + {include_with_each}"
        subsets.append((label, mask))
    frames = []
    small = []
    for label, mask in subsets:
        if mask.sum() < min_items:
            small.append(label)
            continue
        sub = table.subset(mask)
        use_levels = [
            level
            for level in chosen.levels
            if not (level == "story" and not sub.has_prompts)
            and not (level == "system" and not sub.has_systems)
        ]
        if not use_levels:
            continue
        result = correlate(
            sub, metrics=metrics, criteria=criteria, settings=chosen.with_levels(use_levels)
        )
        result.insert(0, "subset", label)
        result.insert(0, "subset_column", column)
        frames.append(result)
    if small:
        warn(
            DataCoverageWarning,
            f"{len(small)} subset(s) of {column!r} have fewer than {min_items} items and were "
            f"left out: {', '.join(small[:5])}{', ...' if len(small) > 5 else ''}",
        )
    if not frames:
        raise MetaInputError(f"no subset of {column!r} has {min_items} or more items")
    return pd.concat(frames, ignore_index=True)


@dataclass(frozen=True)
class DriftRun:
    """Scores of metrics trained on ``train`` for the stories of ``test``, with their table."""

    train: str
    test: str
    table: MetaTable


def dataset_drift(
    runs: Sequence[DriftRun],
    *,
    methods: Sequence[str] = ("pearson", "spearman", "kendall"),
    kendall_variant: str = "b",
    n_boot: int = 1000,
    confidence: float = 0.95,
    seed: int = 0,
    criteria: Sequence[str] | None = None,
) -> pd.DataFrame:
    """The dataset-drift table: each metric trained on one corpus, tested on another.

    Returns
    -------
    DataFrame
        The pooled correlation columns with leading ``train``, ``test`` and ``setting``
        (``in-domain`` when train == test, else ``cross-domain``), and
        ``in_domain_estimate`` (the same metric, criterion and method trained and tested on
        the test corpus, when a run gives it), ``change`` (estimate - in_domain_estimate)
        and ``relative_change`` (change / |in_domain_estimate|).
    """
    if not runs:
        raise ValueError("give at least one run")
    frames = []
    for run in runs:
        result = correlate(
            run.table,
            levels=["pooled"],
            methods=methods,
            kendall_variant=kendall_variant,
            n_boot=n_boot,
            confidence=confidence,
            seed=seed,
            criteria=criteria,
        )
        result.insert(0, "setting", "in-domain" if run.train == run.test else "cross-domain")
        result.insert(0, "test", run.test)
        result.insert(0, "train", run.train)
        frames.append(result)
    out = pd.concat(frames, ignore_index=True)
    keys = ["metric", "criterion", "method", "test"]
    in_domain = out.loc[out["setting"] == "in-domain", [*keys, "estimate"]]
    if in_domain.duplicated(keys).any():
        raise MetaInputError("two in-domain runs give the same metric on the same test corpus")
    in_domain = in_domain.rename(columns={"estimate": "in_domain_estimate"})
    out = out.merge(in_domain, on=keys, how="left")
    out["change"] = out["estimate"] - out["in_domain_estimate"]
    with np.errstate(divide="ignore", invalid="ignore"):
        out["relative_change"] = out["change"] / out["in_domain_estimate"].abs()
    return out


DRIFT_SPEC_COLUMNS: tuple[str, ...] = ("train", "test", "scores", "judgments")


def load_drift_runs(
    spec: str | Path, *, aggregation: str = "mean", criteria: Sequence[str] | None = None
) -> list[DriftRun]:
    """Read a dataset-drift spec (CSV or JSONL): one run per record with ``train``, ``test``,
    ``scores``, ``judgments`` and optional ``stories``; paths are relative to the spec file.

    Raises
    ------
    DataFileError
        ``FILE:LINE: reason`` for a record without a field, or a file that does not exist.
    """
    spec_path = Path(spec)
    runs: list[DriftRun] = []
    problems: list[DataProblem] = []
    for line, record in iter_raw_records(spec_path, required=DRIFT_SPEC_COLUMNS):
        if isinstance(record, DataProblem):
            problems.append(record)
            continue
        missing = [c for c in DRIFT_SPEC_COLUMNS if not str(record.get(c) or "").strip()]
        if missing:
            problems.append(
                DataProblem(str(spec_path), line, f"missing field(s) {', '.join(missing)}")
            )
            continue
        paths = {}
        for key in ("scores", "judgments", "stories"):
            value = record.get(key)
            if value is None or not str(value).strip():
                continue
            path = Path(str(value))
            if not path.is_absolute():
                path = spec_path.parent / path
            if not path.exists():
                problems.append(
                    DataProblem(str(spec_path), line, f"{key} file {path} does not exist")
                )
            paths[key] = path
        if problems:
            continue
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DataCoverageWarning)
            table = load_meta_table(
                [paths["scores"]],
                [paths["judgments"]],
                stories=paths.get("stories"),
                aggregation=aggregation,
                criteria=criteria,
            )
        runs.append(DriftRun(str(record["train"]), str(record["test"]), table))
    if problems:
        raise DataFileError(problems)
    if not runs:
        raise DataFileError.single(spec_path, 1, "the spec lists no run")
    return runs


__all__ = [
    "LEVELS",
    "DriftRun",
    "dataset_drift",
    "infer_levels",
    "load_drift_runs",
    "quality_drift",
    "quality_levels",
    "sampling_probability",
    "subset_correlations",
]
