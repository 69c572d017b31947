"""Everything the meta-evaluation report shows, computed once and kept in a pure
:class:`ReportData` (no file is written here)."""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from storyeval.meta import (
    LEVELS,
    MetaEvaluationWarning,
    MetaTable,
    adjust_pvalues,
    agreement,
    compare_metrics,
    correlate,
    correlation_matrix,
    human_ceiling,
)
from storyeval.meta.correlation import CorrelationSettings
from storyeval.meta.data import judgments_frame

AGGREGATED_RATER_IDS = frozenset({"mean"})


@dataclass
class ReportData:
    """The computed content of a report.

    Attributes
    ----------
    table : MetaTable
    judgments : DataFrame
        The judgments of the table's items and criteria.
    per_rater : DataFrame
        Those of individual raters (aggregated ``mean`` rows left out).
    settings : CorrelationSettings
        Levels the data support, methods and bootstrap settings.
    correlations, matrix : DataFrame
    agreement, ceiling, williams : DataFrame or None
        None when the data do not allow them (one rater; one metric).
    notes : list of str
        Why a level was left out.
    warnings : list of str
        The meta-evaluation warnings raised while computing, each once.
    """

    table: MetaTable
    judgments: pd.DataFrame
    per_rater: pd.DataFrame
    settings: CorrelationSettings
    matrix_method: str
    williams_method: str
    correlations: pd.DataFrame
    matrix: pd.DataFrame
    agreement: pd.DataFrame | None = None
    ceiling: pd.DataFrame | None = None
    williams: pd.DataFrame | None = None
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @property
    def n_raters(self) -> int:
        """The number of individual raters."""
        return int(self.per_rater["rater_id"].nunique())


def available_levels(
    table: MetaTable, wanted: Sequence[str] | None, *, stories_given: bool = False
) -> tuple[list[str], list[str]]:
    """The wanted levels (default: all) that the data support, and a note for each other
    (``stories_given``: a story file was read, so what it lacks is said)."""
    notes = []
    keep = []
    for level in list(wanted) if wanted else list(LEVELS):
        if level == "story" and not table.has_prompts:
            where = (
                "the story file's records have no prompt or prompt_id"
                if stories_given
                else "no item has a prompt id (pass --stories)"
            )
            notes.append(f"The story level is left out: {where}.")
        elif level == "system" and not table.has_systems:
            where = (
                "the story file's records have no system field"
                if stories_given
                else "no item has a system (pass --stories)"
            )
            notes.append(f"The system level is left out: {where}.")
        else:
            keep.append(level)
            if level == "system":
                notes += _few_systems(table)
    return keep, notes


def _few_systems(table: MetaTable) -> list[str]:
    """A note naming the metrics that score fewer than 3 systems (their system level is
    undefined) and the systems they leave out (reference-based metrics do not score the
    stories that have no reference, often the human ones)."""
    systems = table.items["system"]
    every = sorted({str(s) for s in systems.dropna()})
    few: dict[tuple[str, ...], list[str]] = {}
    for name in table.metric_names:
        scored = sorted({str(s) for s in systems[table.metrics[name].notna()].dropna()})
        if len(scored) < 3:
            missing = tuple(s for s in every if s not in scored)
            few.setdefault(missing, []).append(name)
    notes = []
    for missing, names in few.items():
        shown = ", ".join(names[:6]) + (f" and {len(names) - 6} more" if len(names) > 6 else "")
        left = f"; they score no story of {', '.join(missing)}" if missing else ""
        notes.append(
            f"The system level needs 3 or more systems with scores and ratings; {shown} "
            f"score{'s' if len(names) == 1 else ''} {len(every) - len(missing)} of the "
            f"{len(every)} systems{left} (reference-based metrics leave out stories without a "
            "reference), so their system-level correlations are undefined."
        )
    return notes


def _judgments_of(table: MetaTable, judgments: Any) -> pd.DataFrame:
    frame = judgments_frame(judgments)
    frame = frame[frame["item_id"].isin(set(table.items.index))]
    return frame[frame["criterion"].isin(table.criteria)]


def compute_report(
    table: MetaTable,
    judgments: Any,
    *,
    methods: Sequence[str] = ("pearson", "spearman", "kendall"),
    levels: Sequence[str] | None = None,
    matrix_method: str = "pearson",
    williams_method: str = "spearman",
    n_boot: int = 1000,
    confidence: float = 0.95,
    seed: int = 0,
) -> ReportData:
    """Compute the report's statistics (see :func:`storyeval.report.build_report`)."""
    use_levels, notes = available_levels(table, levels)
    if not use_levels:
        raise ValueError("no correlation level can be computed from these data")
    settings = CorrelationSettings(
        levels=use_levels, methods=methods, n_boot=n_boot, confidence=confidence, seed=seed
    )
    frame = _judgments_of(table, judgments)
    per_rater = frame[~frame["rater_id"].isin(AGGREGATED_RATER_IDS)]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        correlations = adjust_pvalues(
            correlate(table, settings=settings), method="bh", by=["level", "method"]
        )
        data = ReportData(
            table,
            frame,
            per_rater,
            settings,
            matrix_method,
            williams_method,
            correlations,
            correlation_matrix(table, method=matrix_method, level="pooled"),
            notes=notes,
        )
        if data.n_raters >= 2:
            data.agreement = agreement(per_rater, n_boot=n_boot, confidence=confidence, seed=seed)
            data.ceiling = human_ceiling(per_rater, items=table.items, settings=settings)
        if len(table.metric_names) >= 2:
            data.williams = compare_metrics(table, method=williams_method, level="pooled")
    texts = [str(w.message) for w in caught if issubclass(w.category, MetaEvaluationWarning)]
    data.warnings = list(dict.fromkeys(texts))
    return data
