"""The evaluation rows: held-out accuracy, Kendall tau and negatives, with bootstrap intervals."""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np

from storyeval.learn.preference.data import PreferenceData


def _summary_rows(
    name: str, scores: np.ndarray, data: PreferenceData, n_boot: int, seed: int
) -> list[dict[str, Any]]:
    """Held-out pairwise accuracy and story-level Kendall tau of ``scores``, with intervals."""
    rng = np.random.default_rng(seed)
    decided = [(i, j) for i, j, o in data.pairs if o == 1.0 and np.isfinite(scores[[i, j]]).all()]
    rows = []
    if decided:
        rows.append(_won_row(name, "pairwise_accuracy", scores, decided, n_boot, rng))
    rated = np.isfinite(data.targets) & np.isfinite(scores)
    if rated.sum() >= 3:
        rows.append(_kendall_row(name, scores[rated], data.targets[rated], n_boot, rng))
        within = _within_system_row(name, scores, data, rated, n_boot, seed)
        rows += [within] if within else []
    return rows


def _within_system_row(
    name: str,
    scores: np.ndarray,
    data: PreferenceData,
    rated: np.ndarray,
    n_boot: int,
    seed: int,
) -> dict[str, Any] | None:
    """Kendall tau-b within each system across its ``rated`` stories, averaged over systems
    (the ``within_system`` level of :func:`storyeval.meta.level_correlation`): the agreement
    that telling the systems apart (human from generated) cannot give. None with fewer than
    two systems."""
    from storyeval.meta.correlation import level_correlation

    systems = np.array([story.system for story in data.stories], dtype=object)[rated]
    if len({system for system in systems if system is not None}) < 2:
        return None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a system without variance is skipped, not an error
        found = level_correlation(
            scores[rated],
            data.targets[rated],
            level="within_system",
            systems=systems,
            method="kendall",
            n_boot=n_boot,
            seed=seed,
        )
    if not np.isfinite(found["estimate"]):
        return None
    statistic = "kendall_tau_b_within_system"
    return _row(name, statistic, found["estimate"], found["ci_low"], found["ci_high"], found["n"])


def _negative_rows(
    name: str, scores: np.ndarray, data: PreferenceData, n_boot: int, seed: int
) -> list[dict[str, Any]]:
    """Per technique, the share of held-out perturbed copies scored below their original
    (a tie counts one half), with a bootstrap interval over the copies."""
    rng = np.random.default_rng(seed)
    techniques = list(dict.fromkeys(technique for _, _, technique in data.negatives))
    rows = []
    for technique in techniques:
        chosen = [(i, j) for i, j, t in data.negatives if t == technique]
        statistic = f"{technique}_scored_lower"
        rows.append(_won_row(name, statistic, scores, chosen, n_boot, rng))
    return rows


def _won_row(
    name: str,
    statistic: str,
    scores: np.ndarray,
    ordered: Sequence[tuple[int, int]],
    n_boot: int,
    rng: np.random.Generator,
) -> dict[str, Any]:
    """The share of the pairs ``(i, j)`` whose ``i`` scores above ``j`` (a tie one half),
    with a percentile-bootstrap interval over the pairs."""
    wins = np.array([scores[i] > scores[j] for i, j in ordered], dtype=float)
    wins[[scores[i] == scores[j] for i, j in ordered]] = 0.5
    boots = [wins[rng.integers(0, len(wins), len(wins))].mean() for _ in range(n_boot)]
    low, high = _interval(boots, n_boot)
    return _row(name, statistic, float(wins.mean()), low, high, len(wins))


def _kendall_row(
    name: str, scores: np.ndarray, targets: np.ndarray, n_boot: int, rng: np.random.Generator
) -> dict[str, Any]:
    from scipy.stats import kendalltau

    tau = float(kendalltau(scores, targets).statistic)
    boots = []
    for _ in range(n_boot):
        pick = rng.integers(0, len(scores), len(scores))
        value = kendalltau(scores[pick], targets[pick]).statistic
        boots.append(value if value == value else np.nan)
    low, high = _interval(boots, n_boot)
    return _row(name, "kendall_tau_b", tau, low, high, len(scores))


def _interval(boots: Sequence[float], n_boot: int) -> tuple[float, float]:
    """The 95% percentile interval of bootstrap replicates (NaN without any)."""
    from storyeval.base.stats import percentile_interval

    if not n_boot:
        return np.nan, np.nan
    low, high = percentile_interval(np.array(boots), confidence=0.95)
    return float(low), float(high)


def _row(
    predictor: str, statistic: str, estimate: float, low: float, high: float, n: int
) -> dict[str, Any]:
    return {
        "predictor": predictor,
        "statistic": statistic,
        "estimate": estimate,
        "ci_low": low,
        "ci_high": high,
        "n": n,
    }
