"""Everything the meta-evaluation report shows, computed once and kept in a pure
:class:`ReportData` (no file is written here)."""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from storyeval.meta import (
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
from storyeval.meta.levels import available_levels

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
