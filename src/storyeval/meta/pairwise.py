"""Pairwise accuracy: how often a metric prefers the text people preferred.

People's pairwise preferences (``comparisons.jsonl``: ``system_a``, ``system_b`` and the
``winner`` of each pair, each side a story id) are the most direct test of a metric: score
both texts and count the pairs where the metric ranks the preferred one higher. A tie of the
metric counts half (the expected accuracy of breaking it at random); a pair people called a
tie is left out (counted). When pairs share a source (the paragraphs of one author, the
stories of one prompt), they are not independent: the bootstrap resamples clusters
(``cluster``, the comparisons' ``group`` by default), so the interval reflects how many
clusters were judged, not how many pairs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from storyeval.base.signature import Signature

PAIRWISE_COLUMNS = [
    "metric", "criterion", "estimate", "ci_low", "ci_high", "n", "n_clusters", "metric_ties",
    "people_ties", "direction", "method", "kendall_like", "signature",
]  # fmt: skip


def _outcomes(
    values: Mapping[str, float], comparisons: pd.DataFrame, higher: bool
) -> tuple[np.ndarray, np.ndarray, int, int]:
    """Per comparison scored: 1 when the metric prefers people's winner, 0 when the other, 0.5
    on a tie; the rows used; the metric's ties and people's ties."""
    outcome, used = [], []
    people_ties = 0
    for row, record in enumerate(comparisons.itertuples(index=False)):
        a, b = values.get(str(record.system_a)), values.get(str(record.system_b))
        if a is None or b is None or not (np.isfinite(a) and np.isfinite(b)):
            continue
        if str(record.winner) == "tie":
            people_ties += 1
            continue
        winner, loser = (a, b) if str(record.winner) == str(record.system_a) else (b, a)
        gap = (winner - loser) if higher else (loser - winner)
        outcome.append(1.0 if gap > 0 else 0.5 if gap == 0 else 0.0)
        used.append(row)
    array = np.asarray(outcome, dtype=float)
    return array, np.asarray(used, dtype=int), int((array == 0.5).sum()), people_ties


def _clustered_interval(
    outcome: np.ndarray, clusters: np.ndarray, n_boot: int, confidence: float, seed: int
) -> tuple[float, float]:
    """Percentile interval of the mean of ``outcome``, resampling whole clusters."""
    if n_boot <= 0 or len(outcome) < 2:
        return float("nan"), float("nan")
    names, index = np.unique(clusters, return_inverse=True)
    sums = np.bincount(index, weights=outcome, minlength=len(names))
    counts = np.bincount(index, minlength=len(names)).astype(float)
    rng = np.random.default_rng(seed)
    draws = rng.integers(0, len(names), size=(n_boot, len(names)))
    means = sums[draws].sum(axis=1) / counts[draws].sum(axis=1)
    tail = (1 - confidence) / 2 * 100
    low, high = np.percentile(means, [tail, 100 - tail])
    return float(low), float(high)


def pairwise_accuracy(
    scores: pd.DataFrame,
    comparisons: pd.DataFrame,
    *,
    lower_is_better: Sequence[str] = (),
    cluster: str | None = "group",
    n_boot: int = 1000,
    confidence: float = 0.95,
    seed: int = 0,
) -> pd.DataFrame:
    """The pairwise accuracy of every metric against people's preferences, per criterion.

    Parameters
    ----------
    scores : DataFrame
        ``item_id``, ``metric``, ``value`` (a score file's records).
    comparisons : DataFrame
        ``system_a``, ``system_b``, ``winner`` (story ids, or ``tie``), ``criterion`` and the
        ``cluster`` column (see :func:`storyeval.meta.comparisons.read_comparisons`).
    lower_is_better : sequence of str
        Metrics whose lower value is the better text (the registry's direction is used for
        the others it knows; an unknown metric is read higher-is-better).
    cluster : str or None
        The comparisons' column whose values are resampled together (absent or None: each
        pair alone).

    Returns
    -------
    DataFrame
        One row per metric and criterion: ``estimate`` (the share of pairs the metric orders
        as people did), a cluster-bootstrap interval, ``n`` pairs scored, ``n_clusters``,
        ``metric_ties`` (counted half), ``people_ties`` (left out), ``direction``,
        ``kendall_like`` (WMT's Kendall's tau-like on the same pairs: a metric's tie counts
        discordant, as for WMT18-19's DARR pairs) and the signature.

    Examples
    --------
    >>> scores = pd.DataFrame({"item_id": ["a", "b", "c", "d"], "metric": "m", "value": [2.0, 1.0, 3.0, 3.0]})
    >>> pairs = pd.DataFrame({"system_a": ["a", "c"], "system_b": ["b", "d"], "winner": ["a", "d"],
    ...                       "criterion": "quality", "group": ["x", "y"]})
    >>> pairwise_accuracy(scores, pairs, n_boot=0)[["metric", "estimate", "n", "metric_ties"]].to_dict("records")
    [{'metric': 'm', 'estimate': 0.75, 'n': 2, 'metric_ties': 1}]
    """
    for column in ("system_a", "system_b", "winner"):
        if column not in comparisons:
            raise ValueError(f"the comparisons lack the column {column!r}")
    if not {"item_id", "metric", "value"} <= set(scores):
        raise ValueError("scores need item_id, metric and value columns")
    frame = comparisons.copy()
    frame["criterion"] = frame.get("criterion", pd.Series("", index=frame.index)).fillna("")
    rows = []
    for metric, values in scores.groupby("metric", sort=True):
        by_item = dict(
            zip(values["item_id"].astype(str), values["value"].astype(float), strict=True)
        )
        higher = _higher_is_better(str(metric), lower_is_better)
        for criterion, pairs in frame.groupby("criterion", sort=True):
            rows.append(
                _accuracy_row(
                    str(metric), str(criterion), by_item, pairs, higher, cluster,
                    (n_boot, confidence, seed),
                )
            )  # fmt: skip
    return pd.DataFrame(rows, columns=PAIRWISE_COLUMNS)


def _accuracy_row(
    metric: str,
    criterion: str,
    values: Mapping[str, float],
    pairs: pd.DataFrame,
    higher: bool,
    cluster: str | None,
    bootstrap: tuple[int, float, int],
) -> dict[str, Any]:
    n_boot, confidence, seed = bootstrap
    outcome, used, metric_ties, people_ties = _outcomes(values, pairs, higher)
    column = cluster if cluster and cluster in pairs else None
    labels = (
        pairs[column].astype(str).to_numpy()[used] if column else np.arange(len(used)).astype(str)
    )
    low, high = _clustered_interval(outcome, labels, n_boot, confidence, seed)
    fields: dict[str, str | int] = {"cluster": column or "pair", "bootstrap": n_boot, "seed": seed}
    return {
        "metric": metric,
        "criterion": criterion,
        "estimate": float(outcome.mean()) if len(outcome) else float("nan"),
        "ci_low": low,
        "ci_high": high,
        "n": len(outcome),
        "n_clusters": len(set(labels)),
        "metric_ties": metric_ties,
        "people_ties": people_ties,
        "direction": "higher" if higher else "lower",
        "method": "pairwise_accuracy",
        "kendall_like": _kendall_like(outcome),
        "signature": Signature("pairwise_accuracy", fields).render(),
    }


def _kendall_like(outcome: np.ndarray) -> float:
    """WMT's Kendall's tau-like formulation of the same pairs (Ma et al. 2018, 2019; Kane et
    al. 2020's Tables 3-4): (concordant - discordant) / (concordant + discordant), a metric's
    tie counted discordant."""
    if not len(outcome):
        return float("nan")
    concordant = float((outcome == 1.0).sum())
    return (2 * concordant - len(outcome)) / len(outcome)


def _higher_is_better(metric: str, lower: Sequence[str]) -> bool:
    if metric in lower:
        return False
    from storyeval.metrics.registry import METRICS

    spec = METRICS.registered(metric) if metric in METRICS.names() else None
    return not (spec is not None and spec.higher_is_better is False)


#: Up to this many clusters the permutation test enumerates every sign pattern (exact)
EXACT_CLUSTERS = 12
TEST_COLUMNS = [
    "metric_a", "metric_b", "criterion", "difference", "ci_low", "ci_high", "p_value",
    "p_adjusted", "n", "n_clusters", "method", "signature",
]  # fmt: skip


def accuracy_tests(
    scores: pd.DataFrame,
    comparisons: pd.DataFrame,
    reference: str,
    *,
    lower_is_better: Sequence[str] = (),
    cluster: str | None = "group",
    n_permutations: int = 10_000,
    n_boot: int = 1000,
    confidence: float = 0.95,
    seed: int = 0,
) -> pd.DataFrame:
    """Whether ``reference`` orders people's pairs better than each other metric, on the pairs
    both score: the difference of their pairwise accuracies with a cluster-bootstrap interval
    and a one-sided paired permutation test (the sign of each cluster's difference flipped at
    random; Benjamini-Hochberg adjusted over the metrics, per criterion).

    Examples
    --------
    >>> scores = pd.DataFrame({"item_id": list("abcdabcd"), "metric": ["good"] * 4 + ["poor"] * 4,
    ...                        "value": [2.0, 1.0, 2.0, 1.0, 1.0, 2.0, 1.0, 2.0]})
    >>> pairs = pd.DataFrame({"system_a": ["a", "c"], "system_b": ["b", "d"], "winner": ["a", "c"],
    ...                       "group": ["x", "y"]})
    >>> accuracy_tests(scores, pairs, "good", n_boot=0)[["metric_b", "difference", "p_value"]].to_dict("records")
    [{'metric_b': 'poor', 'difference': 1.0, 'p_value': 0.25}]
    """
    from storyeval.meta.significance import adjust_pvalues

    if reference not in set(scores["metric"]):
        raise ValueError(f"the reference metric {reference!r} has no score")
    frame = comparisons.copy()
    frame["criterion"] = frame.get("criterion", pd.Series("", index=frame.index)).fillna("")
    values = {
        str(m): dict(zip(g["item_id"].astype(str), g["value"].astype(float), strict=True))
        for m, g in scores.groupby("metric")
    }
    rows = []
    for criterion, pairs in frame.groupby("criterion", sort=True):
        ours = _per_pair(values[reference], pairs, _higher_is_better(reference, lower_is_better))
        for other in sorted(m for m in values if m != reference):
            theirs = _per_pair(values[other], pairs, _higher_is_better(other, lower_is_better))
            both = np.isfinite(ours) & np.isfinite(theirs)
            labels = _labels(pairs, cluster)[both]
            gaps = ours[both] - theirs[both]
            rows.append(
                _test_row(reference, other, str(criterion), gaps, labels, cluster,
                          (n_permutations, n_boot, confidence, seed))
            )  # fmt: skip
    table = pd.DataFrame(rows, columns=TEST_COLUMNS)
    if not table.empty:
        adjusted = adjust_pvalues(table, method="bh", by=["criterion"])
        table["p_adjusted"] = adjusted["p_adjusted"].to_numpy()
    return table


def _per_pair(values: Mapping[str, float], pairs: pd.DataFrame, higher: bool) -> np.ndarray:
    """Each pair's outcome for one metric (1, 0.5 or 0; NaN where it is not scored or people
    tied)."""
    outcome, used, _, _ = _outcomes(values, pairs, higher)
    full = np.full(len(pairs), np.nan)
    full[used] = outcome
    return full


def _labels(pairs: pd.DataFrame, cluster: str | None) -> np.ndarray:
    if cluster and cluster in pairs:
        return np.asarray(pairs[cluster].astype(str).to_numpy())
    return np.arange(len(pairs)).astype(str)


def _test_row(
    reference: str,
    other: str,
    criterion: str,
    gaps: np.ndarray,
    labels: np.ndarray,
    cluster: str | None,
    settings: tuple[int, int, float, int],
) -> dict[str, Any]:
    n_permutations, n_boot, confidence, seed = settings
    names, index = np.unique(labels, return_inverse=True)
    sums = np.bincount(index, weights=gaps, minlength=len(names))
    observed = float(gaps.mean()) if len(gaps) else float("nan")
    p_value = float("nan")
    if len(gaps) and len(names) <= EXACT_CLUSTERS:  # every sign pattern: the exact p-value
        signs = 1.0 - 2.0 * ((np.arange(2 ** len(names))[:, None] >> np.arange(len(names))) & 1)
        permuted = (signs * sums).sum(axis=1) / len(gaps)
        p_value = float(np.mean(permuted >= observed - 1e-12))
    elif len(gaps):
        rng = np.random.default_rng(seed)
        signs = rng.choice([-1.0, 1.0], size=(n_permutations, len(names)))
        permuted = (signs * sums).sum(axis=1) / len(gaps)
        p_value = float((1 + np.sum(permuted >= observed - 1e-12)) / (1 + n_permutations))
    low, high = _clustered_interval(gaps, labels, n_boot, confidence, seed)
    fields: dict[str, str | int] = {
        "cluster": cluster or "pair",
        "permutations": n_permutations,
        "seed": seed,
    }
    return {
        "metric_a": reference, "metric_b": other, "criterion": criterion,
        "difference": observed, "ci_low": low, "ci_high": high, "p_value": p_value,
        "p_adjusted": float("nan"), "n": len(gaps), "n_clusters": len(names),
        "method": "paired permutation (clusters' signs), one-sided",
        "signature": Signature("pairwise_accuracy_test", fields).render(),
    }  # fmt: skip
