"""Leaderboards that survive a judge change: a new judge's board on an old board's scale.

When a judge is replaced (a new model version, another provider), its scores are on its own
scale: means shift, spread changes, and a board built with it cannot be read beside the old
one. Given the items both judges scored, :func:`anchor_board` fits a monotone map from the new
judge's scores to the old judge's (isotonic regression, as score equating does between test
forms), applies it to every item the new judge scored, and builds the board from the mapped
scores: each system's mean on the old scale with a bootstrap interval that refits the map on
resampled shared items and resamples each system's items. It then lists the pairs of systems
the two boards order differently, and whether the new order holds beyond that uncertainty
(the interval of the anchored difference excludes zero), so a leaderboard can say "this swap
is real" or "this swap is noise".

Assumption: the shared items are a fair sample of what both judges see (not the easy ones); a
map fitted on a narrow range is flat beyond it (clipped), which the number of shared items and
their range in the signature let a reader check.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import stats

from storyeval.base.signature import Signature


@dataclass(frozen=True)
class AnchoredBoard:
    """The anchored board (``system, old_mean, new_mean, anchored_mean, ci_low, ci_high,
    n_items``), the pairs the two boards order differently (``system_a, system_b, old_difference,
    anchored_difference, ci_low, ci_high, beyond_uncertainty``), the Kendall tau between the old
    and the anchored board, and the signature."""

    board: pd.DataFrame
    changes: pd.DataFrame
    kendall: float
    shared_items: int
    signature: Signature


def _check(frame: pd.DataFrame, name: str) -> pd.DataFrame:
    for column in ("item_id", "system", "value"):
        if column not in frame.columns:
            raise ValueError(f"the {name} judge's table has no column {column!r}")
    if frame["system"].isna().any():
        raise ValueError(f"every item of the {name} judge needs a system")
    return frame.groupby("item_id", as_index=False).agg(
        system=("system", "first"), value=("value", "mean")
    )


def _mapped(shared_new: np.ndarray, shared_old: np.ndarray, values: np.ndarray) -> np.ndarray:
    from sklearn.isotonic import IsotonicRegression

    model = IsotonicRegression(increasing=True, out_of_bounds="clip")
    model.fit(shared_new, shared_old)
    return np.asarray(model.predict(values), dtype=float)


def _system_means(values: np.ndarray, systems: np.ndarray, names: list[str]) -> np.ndarray:
    return np.array([values[systems == name].mean() for name in names])


def anchor_board(
    old: pd.DataFrame,
    new: pd.DataFrame,
    *,
    n_boot: int = 1000,
    confidence: float = 0.95,
    seed: int = 0,
    min_shared: int = 10,
) -> AnchoredBoard:
    """The new judge's board on the old judge's scale (module docstring). ``old`` and ``new``:
    one row per judgment with ``item_id``, ``system`` and ``value`` (several per item are
    averaged)."""
    old, new = _check(old, "old"), _check(new, "new")
    shared = old.merge(new, on="item_id", suffixes=("_old", "_new"))
    if len(shared) < min_shared:
        raise ValueError(
            f"the two judges share {len(shared)} items; anchoring needs {min_shared} or more"
        )
    names = sorted(set(old["system"]) & set(new["system"]))
    if len(names) < 2:
        raise ValueError("the two boards share fewer than two systems")
    new = new[new["system"].isin(names)]
    values, systems = new["value"].to_numpy(float), new["system"].to_numpy(object)
    x, y = shared["value_new"].to_numpy(float), shared["value_old"].to_numpy(float)
    anchored = _system_means(_mapped(x, y, values), systems, names)
    old_means = _system_means(old["value"].to_numpy(float), old["system"].to_numpy(object), names)
    rng = np.random.default_rng(seed)
    groups = [np.flatnonzero(systems == name) for name in names]
    replicates = np.empty((n_boot, len(names)))
    for k in range(n_boot):
        pick = rng.integers(0, len(x), size=len(x))
        rows = np.concatenate([rng.choice(g, size=len(g)) for g in groups])
        replicates[k] = _system_means(_mapped(x[pick], y[pick], values[rows]), systems[rows], names)
    tail = (1 - confidence) / 2 * 100
    low, high = (
        np.percentile(replicates, [tail, 100 - tail], axis=0)
        if n_boot
        else (anchored * np.nan,) * 2
    )
    board = pd.DataFrame({
        "system": names, "old_mean": old_means,
        "new_mean": _system_means(values, systems, names), "anchored_mean": anchored,
        "ci_low": low, "ci_high": high, "n_items": [len(g) for g in groups],
    }).sort_values("anchored_mean", ascending=False, ignore_index=True)  # fmt: skip
    changes = _order_changes(names, old_means, anchored, replicates, tail)
    signature = Signature(
        "anchored_board",
        {"map": "isotonic", "shared_items": len(shared), "shared_range": f"{x.min():.4g}..{x.max():.4g}",
         "bootstrap": n_boot, "confidence": confidence, "seed": seed},
    )  # fmt: skip
    kendall = float(stats.kendalltau(old_means, anchored).statistic)
    return AnchoredBoard(board, changes, kendall, len(shared), signature)


def _order_changes(
    names: list[str], old: np.ndarray, anchored: np.ndarray, replicates: np.ndarray, tail: float
) -> pd.DataFrame:
    """The pairs of systems the old and the anchored board order differently."""
    rows = []
    for a in range(len(names)):
        for b in range(a + 1, len(names)):
            before, after = old[a] - old[b], anchored[a] - anchored[b]
            if np.sign(before) == np.sign(after):
                continue
            gaps = replicates[:, a] - replicates[:, b]
            low, high = np.percentile(gaps, [tail, 100 - tail]) if len(gaps) else (np.nan, np.nan)
            rows.append({
                "system_a": names[a], "system_b": names[b], "old_difference": before,
                "anchored_difference": after, "ci_low": low, "ci_high": high,
                "beyond_uncertainty": bool(low > 0 or high < 0),
            })  # fmt: skip
    columns = [
        "system_a",
        "system_b",
        "old_difference",
        "anchored_difference",
        "ci_low",
        "ci_high",
        "beyond_uncertainty",
    ]
    return pd.DataFrame(rows, columns=columns)
