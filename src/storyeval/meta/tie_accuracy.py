"""Pairwise accuracy with tie calibration, and soft pairwise accuracy.

* **Tie-calibrated pairwise accuracy** (Deutsch, Foster and Freitag 2023, "Ties Matter"):
  over every pair of items, a metric is right when it orders the pair as people did, or when
  people tied and the metric ties too; the metric ties when its two scores differ by at most
  ``epsilon``. ``acc_eq = (concordant + both tied) / pairs``, people's ties counted in the
  pairs. Tie calibration chooses the ``epsilon`` that maximises ``acc_eq`` (candidates: 0 and
  every difference between two scores), so a metric that cannot tie is not penalised on data
  where people often do, and the chosen ``epsilon`` is reported. Levels: ``pooled`` (every
  pair of items), ``story`` (pairs within a prompt, one ``epsilon`` for all prompts: the
  paper's "group by item"), ``system`` (pairs of system means), ``within_system`` (pairs
  within each system).
* **Soft pairwise accuracy** (Thompson et al. 2024, WMT24's system-level meta-metric): for
  every pair of systems, the p-value that the first is better than the second, from people's
  scores and from the metric's (one-sided paired permutation tests over the prompts both
  systems have); ``SPA = mean(1 - |p_people - p_metric|)``. It rewards a metric for being as
  sure as people are, not only for the sign. System level only: it needs each system's
  scores over shared prompts.

Both read the same meta table as the correlations (one value per item of the metric and of
people's mean), and their intervals come from a bootstrap over prompts (items without prompts),
with ``epsilon`` re-calibrated in every replicate so the interval carries its choice.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from storyeval.base.stats import FloatArray, percentile_interval
from storyeval.base.validation import check_choice

PAIRWISE_METHODS: tuple[str, ...] = ("acc_eq", "spa")
#: Sign flips of SPA's permutation tests
SPA_PERMUTATIONS = 1000


def _pairs(groups: np.ndarray | None, size: int) -> tuple[np.ndarray, np.ndarray]:
    """Index pairs (i < j) of items, within the same group when ``groups`` is given."""
    if groups is None:
        first, second = np.triu_indices(size, k=1)
        return first, second
    firsts, seconds = [], []
    for name in np.unique(groups):
        members = np.flatnonzero(groups == name)
        a, b = np.triu_indices(len(members), k=1)
        firsts.append(members[a])
        seconds.append(members[b])
    if not firsts:
        return np.zeros(0, dtype=int), np.zeros(0, dtype=int)
    return np.concatenate(firsts), np.concatenate(seconds)


def tie_calibrated_accuracy(
    metric_gaps: FloatArray, human_gaps: FloatArray, epsilon: float | None = None
) -> tuple[float, float]:
    """``acc_eq`` over pairs given each pair's metric and human score differences, and the
    ``epsilon`` used (chosen to maximise ``acc_eq`` when None; ties go to the smallest)."""
    if len(metric_gaps) == 0:
        return float("nan"), float("nan")
    human_tie = human_gaps == 0
    agree = (np.sign(metric_gaps) == np.sign(human_gaps)) & ~human_tie
    size = np.abs(metric_gaps)
    if epsilon is not None:
        tied = size <= epsilon
        right = np.where(tied, human_tie, agree)
        return float(right.mean()), float(epsilon)
    order = np.argsort(size, kind="stable")
    sizes = size[order]
    # making pair k a metric tie changes its credit from "agree" to "people tied"
    gain = human_tie[order].astype(float) - agree[order].astype(float)
    cumulative = np.cumsum(gain)
    last = np.r_[np.flatnonzero(np.diff(sizes) > 0), len(sizes) - 1]  # thresholds at each value
    candidates = np.r_[0.0, cumulative[last]]
    thresholds = np.r_[-1.0, sizes[last]]
    if sizes[0] == 0:  # epsilon 0 already ties the pairs with equal scores
        candidates, thresholds = candidates[1:], thresholds[1:]
    best = int(np.argmax(candidates))
    accuracy = (agree.sum() + candidates[best]) / len(size)
    return float(accuracy), float(max(thresholds[best], 0.0))


def _spa(
    x: FloatArray, y: FloatArray, systems: np.ndarray, prompts: np.ndarray, seed: int
) -> float:
    """Soft pairwise accuracy over every pair of systems with two or more shared prompts."""
    names = list(np.unique(systems))
    rng = np.random.default_rng(seed)
    agreement = []
    for a in range(len(names)):
        for b in range(a + 1, len(names)):
            pa = _prompt_means(x, y, systems == names[a], prompts)
            pb = _prompt_means(x, y, systems == names[b], prompts)
            shared = sorted(set(pa) & set(pb))
            if len(shared) < 2:
                continue
            diffs = np.array([np.subtract(pa[p], pb[p]) for p in shared])  # (prompts, 2)
            flips = rng.choice([-1.0, 1.0], size=(SPA_PERMUTATIONS, len(shared)))
            p_values = [_one_sided(diffs[:, k], flips) for k in (0, 1)]
            agreement.append(1 - abs(p_values[0] - p_values[1]))
    return float(np.mean(agreement)) if agreement else float("nan")


def _prompt_means(
    x: FloatArray, y: FloatArray, member: np.ndarray, prompts: np.ndarray
) -> dict[Any, tuple[float, float]]:
    found: dict[Any, tuple[float, float]] = {}
    for prompt in np.unique(prompts[member]):
        rows = member & (prompts == prompt)
        found[prompt] = (float(x[rows].mean()), float(y[rows].mean()))
    return found


def _one_sided(diffs: FloatArray, flips: FloatArray) -> float:
    """Permutation p-value that the mean difference is above 0 (sign flips per prompt)."""
    observed = diffs.mean()
    permuted = (flips * diffs).mean(axis=1)
    return float((1 + np.sum(permuted >= observed - 1e-12)) / (1 + len(permuted)))


def _estimate(
    x: FloatArray, y: FloatArray, level: str, method: str, prompts: np.ndarray | None,
    systems: np.ndarray | None, seed: int, epsilon: float | None = None,
) -> tuple[float, float, int]:  # fmt: skip
    """The statistic on one (resampled) table: the estimate, epsilon (NaN for SPA), pairs."""
    if method == "spa":
        if systems is None or prompts is None:
            raise ValueError("soft pairwise accuracy needs every item's system and prompt")
        return _spa(x, y, systems, prompts, seed), float("nan"), len(np.unique(systems))
    if level == "system":
        if systems is None:
            raise ValueError("the system level needs every item's system")
        names = np.unique(systems)
        x = np.array([x[systems == s].mean() for s in names])
        y = np.array([y[systems == s].mean() for s in names])
        groups = None
    else:
        groups = {"story": prompts, "within_system": systems}.get(level)
        if level in ("story", "within_system") and groups is None:
            raise ValueError(
                f"the {level} level needs every item's {'prompt' if level == 'story' else 'system'}"
            )
    first, second = _pairs(groups, len(x))
    accuracy, used = tie_calibrated_accuracy(x[first] - x[second], y[first] - y[second], epsilon)
    return accuracy, used, len(first)


def pairwise_meta_row(
    x: FloatArray,
    y: FloatArray,
    *,
    level: str,
    method: str,
    prompts: np.ndarray | None,
    systems: np.ndarray | None,
    n_boot: int,
    confidence: float,
    seed: int,
    label: str = "",
) -> dict[str, Any]:
    """``acc_eq`` or ``spa`` at one level, with a percentile interval over prompts (items
    where there are no prompts), in :func:`~storyeval.meta.correlation.level_correlation`'s
    result format plus ``epsilon``."""
    check_choice(method, PAIRWISE_METHODS, "method")
    if method == "spa" and level != "system":
        raise ValueError("soft pairwise accuracy is defined at the system level only")
    keep = np.isfinite(x) & np.isfinite(y)
    x, y = x[keep], y[keep]
    prompts = None if prompts is None or any(p is None for p in prompts[keep]) else prompts[keep]
    systems = None if systems is None or any(s is None for s in systems[keep]) else systems[keep]
    estimate, epsilon, pairs = _estimate(x, y, level, method, prompts, systems, seed)
    clusters = prompts if prompts is not None else np.arange(len(x))
    names = np.unique(clusters)
    members = [np.flatnonzero(clusters == name) for name in names]  # once, not per replicate
    replicates = []
    rng = np.random.default_rng(seed)
    for _ in range(n_boot if np.isfinite(estimate) else 0):
        drawn = rng.choice(len(names), size=len(names), replace=True)
        rows = np.concatenate([members[k] for k in drawn])
        # a prompt drawn twice becomes two prompts, so pairs within it are not doubled
        relabel = np.repeat(np.arange(len(drawn)), [len(members[k]) for k in drawn])
        found, _, _ = _estimate(
            x[rows],
            y[rows],
            level,
            method,
            relabel if prompts is not None else None,
            None if systems is None else systems[rows],
            seed,
        )
        replicates.append(found)
    low, high = (
        percentile_interval(np.asarray(replicates), confidence=confidence, label=label)
        if replicates else (float("nan"), float("nan"))
    )  # fmt: skip
    return {
        "estimate": estimate, "p_value": float("nan"), "ci_low": low, "ci_high": high,
        "n": pairs, "n_items": len(x), "n_groups": len(names), "skipped": 0,
        "resample": "prompts" if prompts is not None else "items", "epsilon": epsilon,
    }  # fmt: skip


def _standardised(values: FloatArray) -> FloatArray:
    spread = float(np.std(values))
    centred: FloatArray = values - values.mean()
    return centred / spread if spread > 0 else centred


def acc_eq_test(
    x_a: FloatArray,
    x_b: FloatArray,
    y: FloatArray,
    *,
    level: str,
    prompts: np.ndarray | None,
    systems: np.ndarray | None,
    n_perm: int = 1000,
    seed: int = 0,
) -> dict[str, Any]:
    """Is metric A's tie-calibrated pairwise accuracy above B's? A paired permutation test
    (Deutsch et al. 2021's way): both metrics standardised, each one's ``epsilon`` calibrated
    once, then A's and B's scores swapped per prompt (per item without prompts) at random;
    the one-sided p-value is the share of swaps whose difference is at least the observed."""
    keep = np.isfinite(x_a) & np.isfinite(x_b) & np.isfinite(y)
    a, b, y = _standardised(x_a[keep]), _standardised(x_b[keep]), y[keep]
    prompts = None if prompts is None else prompts[keep]
    systems = None if systems is None else systems[keep]
    acc_a, eps_a, n = _estimate(a, y, level, "acc_eq", prompts, systems, seed)
    acc_b, eps_b, _ = _estimate(b, y, level, "acc_eq", prompts, systems, seed)
    observed = acc_a - acc_b
    clusters = prompts if prompts is not None else np.arange(len(y))
    _, index = np.unique(clusters.astype(str), return_inverse=True)
    rng = np.random.default_rng(seed)
    exceed = 0
    for _ in range(n_perm):
        swap = rng.random(index.max() + 1)[index] < 0.5
        pa, pb = np.where(swap, b, a), np.where(swap, a, b)
        found_a = _estimate(pa, y, level, "acc_eq", prompts, systems, seed, eps_a)[0]
        found_b = _estimate(pb, y, level, "acc_eq", prompts, systems, seed, eps_b)[0]
        exceed += found_a - found_b >= observed - 1e-12
    return {
        "r_a": acc_a, "r_b": acc_b, "estimate": observed,
        "p_value": (1 + exceed) / (1 + n_perm), "n": n, "epsilon_a": eps_a, "epsilon_b": eps_b,
    }  # fmt: skip
