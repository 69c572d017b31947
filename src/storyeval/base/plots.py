"""Figures (matplotlib, Agg canvas, PNG bytes): the report's heatmaps and scatter plots, and the
figure and PNG helpers every feature that draws uses (MAUVE curves, story curves, robustness
heatmaps)."""

from __future__ import annotations

import io
import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd


def figure(width: float, height: float) -> Any:
    """A matplotlib figure of ``width`` by ``height`` inches on the Agg canvas."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=110)
    FigureCanvasAgg(fig)
    return fig


def png(fig: Any) -> bytes:
    """The PNG bytes of a figure (which is closed)."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", bbox_inches="tight", metadata={"Software": None})
    return buffer.getvalue()


def stars(p: float) -> str:
    """Significance stars of a p-value (``***``, ``**``, ``*`` or empty)."""
    if p is None or not isinstance(p, float) or math.isnan(p):
        return ""
    return "**" if p < 0.01 else "*" if p < 0.05 else ""


def short_label(label: str, width: int = 22) -> str:
    """A label cut to ``width`` characters for an axis."""
    return label if len(label) <= width else label[: width - 1] + "…"


def annotated_heatmap(
    ax: Any,
    values: np.ndarray,
    rows: Sequence[str],
    columns: Sequence[str],
    *,
    notes: np.ndarray | None = None,
    title: str = "",
) -> Any:
    """A heatmap with each cell's value written in it."""
    from matplotlib import colormaps

    cmap = colormaps["RdBu_r"].with_extremes(bad="#dddddd")
    masked = np.ma.masked_invalid(values)
    image = ax.imshow(masked, cmap=cmap, vmin=-1, vmax=1, aspect="auto")
    ax.set_xticks(range(len(columns)))
    ax.set_xticklabels([short_label(c) for c in columns], rotation=40, ha="right", fontsize=8)
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels([short_label(r) for r in rows], fontsize=8)
    for i in range(len(rows)):
        for j in range(len(columns)):
            value = values[i, j]
            text = "n/a" if not np.isfinite(value) else f"{value:.2f}"
            if notes is not None and np.isfinite(value):
                text += str(notes[i, j])
            color = "white" if np.isfinite(value) and abs(value) > 0.6 else "black"
            ax.text(j, i, text, ha="center", va="center", fontsize=7, color=color)
    if title:
        ax.set_title(title, fontsize=9)
    return image


def correlation_heatmaps(
    correlations: pd.DataFrame,
    *,
    method: str,
    levels: Sequence[str],
    metrics: Sequence[str],
    criteria: Sequence[str],
    ceiling: pd.DataFrame | None = None,
) -> bytes:
    """One panel per level: metrics x criteria for ``method``; '*'/'**' mark BH-adjusted
    p < .05 / .01; a last row shows the human ceiling (mean over raters) when given."""
    rows = list(metrics)
    with_ceiling = ceiling is not None and not ceiling.empty
    if with_ceiling:
        rows = [*rows, "human ceiling"]
    fig = figure(
        max(4.0, 1.0 + 0.9 * len(criteria)) * len(levels), max(2.2, 0.9 + 0.38 * len(rows))
    )
    axes = fig.subplots(1, len(levels), squeeze=False)[0]
    image = None
    for ax, level in zip(axes, levels, strict=True):
        values = np.full((len(rows), len(criteria)), np.nan)
        notes = np.full((len(rows), len(criteria)), "", dtype=object)
        sub = correlations[(correlations["level"] == level) & (correlations["method"] == method)]
        p_column = "p_adjusted" if "p_adjusted" in sub.columns else "p_value"
        for record in sub.to_dict("records"):
            if record["metric"] in metrics and record["criterion"] in criteria:
                i = rows.index(record["metric"])
                j = list(criteria).index(record["criterion"])
                values[i, j] = record["estimate"]
                notes[i, j] = stars(record[p_column])
        if with_ceiling:
            assert ceiling is not None
            summary = ceiling[
                (ceiling["rater"] == "mean")
                & (ceiling["level"] == level)
                & (ceiling["method"] == method)
            ]
            for record in summary.to_dict("records"):
                if record["criterion"] in criteria:
                    values[-1, list(criteria).index(record["criterion"])] = record["estimate"]
        image = annotated_heatmap(
            ax, values, rows, criteria, notes=notes, title=f"{method}, {level}"
        )
        if ax is not axes[0]:
            ax.set_yticklabels([])
        if with_ceiling:
            ax.axhline(len(rows) - 1.5, color="black", linewidth=1.2)
    if image is not None:
        fig.colorbar(image, ax=list(axes), shrink=0.8, label=method)
    return png(fig)


def matrix_heatmap(matrix: pd.DataFrame, *, title: str) -> bytes:
    """The square matrix of criteria and metrics (Callan & Foster 2023, Table 2 / Figure 4)."""
    names = [str(c) for c in matrix.columns]
    size = max(3.5, 0.55 * len(names) + 1.5)
    fig = figure(size + 1.0, size)
    ax = fig.subplots()
    image = annotated_heatmap(ax, matrix.to_numpy(dtype=float), names, names, title=title)
    fig.colorbar(image, ax=ax, shrink=0.8)
    return png(fig)


def scatter_grid(
    x: pd.DataFrame,
    y: pd.Series,
    systems: pd.Series,
    *,
    criterion: str,
    stats: dict[str, str],
) -> bytes:
    """Metric (x) against the human rating (y), one panel per metric, points by system."""
    metrics = [str(c) for c in x.columns]
    cols = min(4, len(metrics))
    rows = math.ceil(len(metrics) / cols)
    fig = figure(3.2 * cols, 2.8 * rows)
    axes = fig.subplots(rows, cols, squeeze=False)
    from matplotlib import colormaps

    palette = colormaps["tab10"]
    labels = systems.fillna("(unknown)").astype(str)
    groups = list(dict.fromkeys(sorted(labels)))
    for k, metric in enumerate(metrics):
        ax = axes[k // cols][k % cols]
        for g, group in enumerate(groups):
            mask = (labels == group).to_numpy()
            ax.scatter(
                x[metric].to_numpy(dtype=float)[mask],
                y.to_numpy(dtype=float)[mask],
                s=10,
                alpha=0.7,
                color=palette(g % 10),
                label=group,
            )
        ax.set_xlabel(short_label(metric, 30), fontsize=8)
        ax.set_ylabel(short_label(criterion, 30), fontsize=8)
        ax.set_title(stats.get(metric, ""), fontsize=8)
        ax.tick_params(labelsize=7)
    for k in range(len(metrics), rows * cols):
        axes[k // cols][k % cols].set_visible(False)
    handles, names = axes[0][0].get_legend_handles_labels()
    if len(groups) > 1:
        fig.legend(
            handles,
            names,
            loc="upper center",
            ncol=min(5, len(groups)),
            fontsize=8,
            bbox_to_anchor=(0.5, 1.04),
        )
    fig.tight_layout()
    return png(fig)
