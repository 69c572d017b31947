"""Correlation of metrics with human judgments at the pooled, story and system levels.

Levels
------
``pooled``
    One correlation over all items (stories). The bootstrap resamples items.
``story``
    Within each prompt, the correlation across the stories that answer it (one per system,
    usually), then the mean over prompts. Prompts with fewer than 2 stories, or where the
    metric or the human rating does not vary, are skipped and counted (``skipped``). The
    bootstrap resamples prompts (clusters): each replicate draws the contributing prompts
    with replacement and averages their correlations. The p-value is a two-sided sign-flip
    randomization test of the mean per-prompt correlation (prompts are the independent units).
``system``
    The correlation between per-system means. The p-value is scipy's with n = the number of
    systems. The bootstrap resamples prompts (all the stories of a drawn prompt come along)
    and recomputes the system means; without prompt ids it resamples items.
``within_system`` (asked for by name; not among the default levels)
    Within each system, the correlation across its stories, then the mean over systems
    (Deutsch et al. 2023's "group-by-system"): does the metric rank the stories of one
    system as people do, with the differences between systems taken out? A metric or judge
    that mostly tells human stories from generated ones is high at the pooled level and low
    here. Systems with fewer than 2 stories, or where the metric or the rating does not vary,
    are skipped and counted. The bootstrap resamples stories within each system; the p-value
    is a two-sided permutation test that shuffles people's values within each system
    (1,999 seeded shuffles).

Every row carries a signature with the method, level, aggregation, bootstrap count,
confidence, what was resampled and the seed; with the same seed, a row's interval does not
depend on the other rows of the table or on the order of the input records.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pandas as pd
from numpy.typing import ArrayLike

from storyeval.base.errors import DegenerateInputWarning, warn
from storyeval.base.signature import Signature
from storyeval.base.stats import (
    RANK_METHODS,
    FloatArray,
    bootstrap_indices,
    bootstrap_weights,
    check_method,
    check_variant,
    correlation,
    kendall_resampled,
    percentile_interval,
    rows_correlation,
    sign_flip_test,
    tie_safe,
)
from storyeval.base.validation import check_choice, check_confidence, check_n_boot
from storyeval.meta.data import MetaInputError, MetaTable
from storyeval.meta.tie_accuracy import PAIRWISE_METHODS, SPA_PERMUTATIONS, pairwise_meta_row

LEVELS: tuple[str, ...] = ("pooled", "story", "system")
#: Every level :func:`level_correlation` computes: the default ones and those asked for by name.
ALL_LEVELS: tuple[str, ...] = (*LEVELS, "within_system")
#: Shuffles of the within-system permutation test.
WITHIN_SYSTEM_SHUFFLES = 1999

CORRELATION_COLUMNS: tuple[str, ...] = (
    "metric",
    "criterion",
    "level",
    "method",
    "estimate",
    "p_value",
    "ci_low",
    "ci_high",
    "n",
    "n_items",
    "n_groups",
    "skipped",
    "resample",
    "signature",
    "metric_signature",
)


#: Offset of the seed of the label draws from the bootstrap's (independent streams).
LABEL_SEED = 1_000_003


def check_level(level: str) -> str:
    """``level`` if it is one of :data:`ALL_LEVELS`, else ``ValueError``."""
    check_choice(level, ALL_LEVELS, "level")
    return level


def _nan_result(n: int = 0, n_items: int = 0, **extra: Any) -> dict[str, Any]:
    result: dict[str, Any] = {
        "estimate": float("nan"),
        "p_value": float("nan"),
        "ci_low": float("nan"),
        "ci_high": float("nan"),
        "n": n,
        "n_items": n_items,
        "n_groups": pd.NA,
        "skipped": pd.NA,
        "resample": "none",
    }
    result.update(extra)
    return result


def _labels(values: ArrayLike | None, size: int) -> np.ndarray | None:
    if values is None:
        return None
    raw = np.asarray(values, dtype=object).ravel().tolist()
    arr: np.ndarray = np.empty(len(raw), dtype=object)
    arr[:] = [None if v is None or (isinstance(v, float) and np.isnan(v)) else v for v in raw]
    if arr.shape != (size,):
        raise ValueError(f"group labels must have one value per item ({size}); got {arr.shape}")
    return arr


def level_correlation(
    x: ArrayLike,
    y: ArrayLike,
    *,
    level: str = "pooled",
    prompts: ArrayLike | None = None,
    systems: ArrayLike | None = None,
    method: str = "pearson",
    kendall_variant: str = "b",
    n_boot: int = 1000,
    confidence: float = 0.95,
    seed: int = 0,
    label: str = "",
    y_draws: ArrayLike | None = None,
) -> dict[str, Any]:
    """Correlation of ``x`` and ``y`` at one level, with p-value and bootstrap interval.

    Parameters
    ----------
    x, y : array-like of shape (n,)
        Item values (nan = missing; such items are dropped).
    level : {"pooled", "story", "system", "within_system"}
        See the module docstring.
    prompts : array-like of shape (n,), optional
        Prompt id of each item; required for ``story``; used for resampling at ``system``.
    systems : array-like of shape (n,), optional
        System of each item; required for ``system``.
    method : {"pearson", "spearman", "kendall"}
    kendall_variant : {"b", "c"}
    n_boot : int
        Bootstrap replicates (0: no interval).
    confidence : float
        Coverage of the percentile interval.
    seed : int
        Seeds the bootstrap (and the story-level sign-flip test).
    label : str
        Named in warnings.
    y_draws : array-like of shape (n_boot, n), optional
        Draws of ``y`` from its uncertainty (a competence model's posterior): bootstrap
        replicate ``k`` resamples items and reads ``y_draws[k]`` instead of ``y``, so the
        interval also carries the uncertainty of people's labels.

    Returns
    -------
    dict
        ``estimate``, ``p_value``, ``ci_low``, ``ci_high``, ``n`` (items at the pooled and
        story levels, systems at the system level), ``n_items``, ``n_groups`` (prompts used
        at the story level, systems at the system level), ``skipped`` (prompts skipped at the
        story level), ``resample`` (what the bootstrap resampled).

    Examples
    --------
    >>> out = level_correlation([1, 2, 3, 4, 5, 6], [1, 3, 2, 5, 4, 6], n_boot=200, seed=1)
    >>> round(out["estimate"], 4), out["n"]
    (0.8857, 6)
    >>> out["ci_low"] <= out["estimate"] <= out["ci_high"]
    True
    """
    check_level(level)
    check_method(method)
    check_variant(kendall_variant)
    n_boot = check_n_boot(n_boot)
    check_confidence(confidence)
    xa = np.asarray(x, dtype=float).ravel()
    ya = np.asarray(y, dtype=float).ravel()
    if xa.shape != ya.shape:
        raise ValueError(f"x and y must have the same length; got {xa.size} and {ya.size}")
    p_arr = _labels(prompts, xa.size)
    s_arr = _labels(systems, xa.size)
    keep = np.isfinite(xa) & np.isfinite(ya)
    xa, ya = xa[keep], ya[keep]
    p_arr = None if p_arr is None else p_arr[keep]
    s_arr = None if s_arr is None else s_arr[keep]
    draws = None
    if y_draws is not None and n_boot:
        draws = np.asarray(y_draws, dtype=float)
        if draws.shape != (n_boot, keep.size):
            raise ValueError(f"y_draws must have shape ({n_boot}, {keep.size}); got {draws.shape}")
        draws = np.where(np.isfinite(draws), draws, _as_row(y, keep.size))[:, keep]
    common: dict[str, Any] = {
        "method": method,
        "kendall_variant": kendall_variant,
        "n_boot": n_boot,
        "confidence": confidence,
        "seed": seed,
        "label": label,
        "draws": draws,
    }
    if level == "pooled":
        return _pooled(xa, ya, **common)
    if level == "story":
        if p_arr is None:
            raise MetaInputError("the story level needs the prompt id of every item")
        return _story(xa, ya, p_arr, **common)
    if s_arr is None:
        raise MetaInputError(f"the {level.replace('_', '-')} level needs the system of every item")
    if level == "within_system":
        return _within_system(xa, ya, s_arr, **common)
    return _system(xa, ya, s_arr, p_arr, **common)


def _as_row(y: ArrayLike, size: int) -> np.ndarray:
    """``y`` as one float row of ``size`` values (fills draws where a posterior is missing)."""
    return np.asarray(y, dtype=float).reshape(1, size)


def _pooled(
    x: FloatArray,
    y: FloatArray,
    *,
    method: str,
    kendall_variant: str,
    n_boot: int,
    confidence: float,
    seed: int,
    label: str,
    draws: FloatArray | None = None,
) -> dict[str, Any]:
    estimate, p_value, n = correlation(
        x, y, method=method, kendall_variant=kendall_variant, label=label
    )
    result = _nan_result(n=n, n_items=n, resample="items")
    result.update(estimate=estimate, p_value=p_value)
    if n_boot and np.isfinite(estimate):
        idx = bootstrap_indices(n, n_boot, seed)
        if draws is not None:
            resampled = draws[np.arange(n_boot)[:, None], idx]
            replicates = rows_correlation(
                x[idx], resampled, method=method, kendall_variant=kendall_variant
            )
        elif method == "kendall":
            replicates = kendall_resampled(x, y, bootstrap_weights(idx, n), variant=kendall_variant)
        else:
            replicates = rows_correlation(
                x[idx], y[idx], method=method, kendall_variant=kendall_variant
            )
        result["ci_low"], result["ci_high"] = percentile_interval(
            replicates, confidence=confidence, label=label
        )
    return result


def _group_correlations(
    x: FloatArray,
    y: FloatArray,
    groups: np.ndarray,
    *,
    method: str,
    kendall_variant: str,
) -> tuple[list[Any], FloatArray, FloatArray, list[str]]:
    """Per-group correlations. Returns group keys, values (nan = skipped), sizes, reasons."""
    keys = list(dict.fromkeys(groups.tolist()))
    position = {k: i for i, k in enumerate(keys)}
    codes = np.array([position[g] for g in groups.tolist()], dtype=int)
    sizes = np.bincount(codes, minlength=len(keys)).astype(float)
    values = np.full(len(keys), np.nan)
    reasons = [""] * len(keys)
    order = np.argsort(codes, kind="stable")
    starts = np.concatenate([[0], np.cumsum(sizes.astype(int))])
    by_size: dict[int, list[int]] = {}
    for g, size in enumerate(sizes.astype(int)):
        if size < 2:
            reasons[g] = "fewer than 2 stories"
            continue
        by_size.setdefault(size, []).append(g)
    for size, members in by_size.items():
        rows = np.array([order[starts[g] : starts[g] + size] for g in members])
        xs, ys = x[rows], y[rows]
        varied = (np.ptp(xs, axis=1) > 0) & (np.ptp(ys, axis=1) > 0)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            vals = rows_correlation(xs, ys, method=method, kendall_variant=kendall_variant)
        for g, ok, val in zip(members, varied, vals, strict=True):
            if not ok:
                reasons[g] = "no variance"
            elif np.isfinite(val):
                values[g] = val
            else:
                reasons[g] = "undefined"
    return keys, values, sizes, reasons


def _story(
    x: FloatArray,
    y: FloatArray,
    prompts: np.ndarray,
    *,
    method: str,
    kendall_variant: str,
    n_boot: int,
    confidence: float,
    seed: int,
    label: str,
    draws: FloatArray | None = None,
) -> dict[str, Any]:
    known = np.array([p is not None for p in prompts.tolist()], dtype=bool)
    where = f" ({label})" if label else ""
    if not known.all():
        warn(
            DegenerateInputWarning,
            f"{int((~known).sum())} item(s) without a prompt id are left out of the story "
            f"level{where}",
        )
    x, y, prompts = x[known], y[known], prompts[known]
    draws = None if draws is None else draws[:, known]
    if x.size == 0:
        warn(DegenerateInputWarning, f"story-level correlation is undefined{where}: no items")
        return _nan_result(n_groups=0, skipped=0, resample="prompts")
    keys, values, sizes, _ = _group_correlations(
        x, y, prompts, method=method, kendall_variant=kendall_variant
    )
    used = np.isfinite(values)
    n_groups = int(used.sum())
    skipped = len(keys) - n_groups
    n_items = int(sizes[used].sum())
    result = _nan_result(
        n=n_items, n_items=n_items, n_groups=n_groups, skipped=skipped, resample="prompts"
    )
    if n_groups == 0:
        warn(
            DegenerateInputWarning,
            f"story-level {method} correlation is undefined{where}: none of the {len(keys)} "
            "prompts has 2 or more stories with varying metric and human values",
        )
        return result
    if n_items < 3:  # one prompt of two stories: always +1 or -1
        warn(
            DegenerateInputWarning,
            f"story-level {method} correlation is undefined{where}: {n_items} complete "
            f"pair(s) in {n_groups} prompt(s), need at least 3",
        )
        return result
    per_prompt = values[used]
    result["estimate"] = float(per_prompt.mean())
    result["p_value"] = sign_flip_test(per_prompt, seed=seed)
    if n_boot:
        if n_groups < 2:
            warn(
                DegenerateInputWarning,
                f"story-level interval is undefined{where}: only one prompt contributes",
            )
        else:
            idx = bootstrap_indices(n_groups, n_boot, seed)
            if draws is None:
                replicates = per_prompt[idx].mean(axis=1)
            else:
                replicates = _drawn_story_replicates(
                    x, draws, prompts, used, idx, method, kendall_variant
                )
            result["ci_low"], result["ci_high"] = percentile_interval(
                replicates, confidence=confidence, label=label
            )
    return result


def _drawn_story_replicates(
    x: FloatArray,
    draws: FloatArray,
    prompts: np.ndarray,
    used: np.ndarray,
    idx: np.ndarray,
    method: str,
    kendall_variant: str,
) -> FloatArray:
    """Story-level replicates with people's labels drawn: replicate ``k`` recomputes the
    per-prompt correlations on ``draws[k]`` and averages the resampled prompts (a prompt whose
    drawn labels do not vary is left out of that replicate)."""
    replicates = np.full(idx.shape[0], np.nan)
    for k in range(idx.shape[0]):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            _, values, _, _ = _group_correlations(
                x, draws[k], prompts, method=method, kendall_variant=kendall_variant
            )
        chosen = values[used][idx[k]]
        if np.isfinite(chosen).any():
            replicates[k] = float(np.nanmean(chosen))
    return replicates


def _system_replicates(
    x: FloatArray,
    y: FloatArray,
    draws: FloatArray | None,
    c_codes: np.ndarray,
    s_codes: np.ndarray,
    n_sys: int,
    n_boot: int,
    seed: int,
    method: str,
    kendall_variant: str,
) -> FloatArray:
    """System-level replicates: clusters (prompts, else items) resampled, system means
    correlated; with ``draws``, replicate ``k`` averages its drawn labels."""
    n_clusters = int(c_codes.max()) + 1
    ax = np.zeros((n_clusters, n_sys))
    ay = np.zeros((n_clusters, n_sys))
    cc = np.zeros((n_clusters, n_sys))
    np.add.at(ax, (c_codes, s_codes), x)
    np.add.at(ay, (c_codes, s_codes), y)
    np.add.at(cc, (c_codes, s_codes), 1.0)
    weights = bootstrap_weights(bootstrap_indices(n_clusters, n_boot, seed), n_clusters)
    if draws is not None:  # each replicate's cluster sums of its drawn labels
        drawn = np.zeros((n_boot, n_clusters, n_sys))
        rows = np.arange(n_boot)[:, None]
        np.add.at(drawn, (rows, c_codes[None, :], s_codes[None, :]), draws)
    with np.errstate(invalid="ignore", divide="ignore"):
        wc = weights @ cc
        bx = (weights @ ax) / wc
        by = (weights @ ay) / wc if draws is None else np.einsum("kc,kcs->ks", weights, drawn) / wc
    if method in RANK_METHODS:
        bx, by = tie_safe(bx), tie_safe(by)
    complete = np.isfinite(bx).all(axis=1) & np.isfinite(by).all(axis=1)
    replicates = np.full(n_boot, np.nan)
    if complete.any():
        replicates[complete] = rows_correlation(
            bx[complete], by[complete], method=method, kendall_variant=kendall_variant
        )
    return replicates


def _with_system(systems: np.ndarray, level: str, label: str) -> np.ndarray:
    """The items that have a system (a warning counts the others, left out of ``level``)."""
    known = np.array([s is not None for s in systems.tolist()], dtype=bool)
    if not known.all():
        where = f" ({label})" if label else ""
        warn(
            DegenerateInputWarning,
            f"{int((~known).sum())} item(s) without a system are left out of the {level} "
            f"level{where}",
        )
    return known


def _system(
    x: FloatArray,
    y: FloatArray,
    systems: np.ndarray,
    prompts: np.ndarray | None,
    *,
    method: str,
    kendall_variant: str,
    n_boot: int,
    confidence: float,
    seed: int,
    label: str,
    draws: FloatArray | None = None,
) -> dict[str, Any]:
    known = _with_system(systems, "system", label)
    x, y, systems = x[known], y[known], systems[known]
    prompts = None if prompts is None else prompts[known]
    draws = None if draws is None else draws[:, known]
    system_keys = sorted(set(systems.tolist()), key=str)
    s_pos = {k: i for i, k in enumerate(system_keys)}
    s_codes = np.array([s_pos[s] for s in systems.tolist()], dtype=int)
    n_sys = len(system_keys)
    counts = np.bincount(s_codes, minlength=n_sys).astype(float)
    with np.errstate(invalid="ignore", divide="ignore"):
        mx = np.bincount(s_codes, weights=x, minlength=n_sys) / counts
        my = np.bincount(s_codes, weights=y, minlength=n_sys) / counts
    if method in RANK_METHODS:  # equal means summed in another order are ties
        mx, my = tie_safe(mx), tie_safe(my)
    estimate, p_value, n = correlation(
        mx, my, method=method, kendall_variant=kendall_variant, label=f"{label}, system means"
    )
    use_prompts = prompts is not None and all(p is not None for p in prompts.tolist())
    result = _nan_result(
        n=n,
        n_items=int(x.size),
        n_groups=n_sys,
        resample="prompts" if use_prompts else "items",
    )
    result.update(estimate=estimate, p_value=p_value)
    if not (n_boot and np.isfinite(estimate)):
        return result
    if use_prompts:
        assert prompts is not None
        keys = list(dict.fromkeys(prompts.tolist()))
        c_pos = {k: i for i, k in enumerate(keys)}
        c_codes = np.array([c_pos[p] for p in prompts.tolist()], dtype=int)
    else:
        c_codes = np.arange(x.size)
    replicates = _system_replicates(
        x, y, draws, c_codes, s_codes, n_sys, n_boot, seed, method, kendall_variant
    )
    result["ci_low"], result["ci_high"] = percentile_interval(
        replicates, confidence=confidence, label=label
    )
    return result


def _within_system(
    x: FloatArray,
    y: FloatArray,
    systems: np.ndarray,
    *,
    method: str,
    kendall_variant: str,
    n_boot: int,
    confidence: float,
    seed: int,
    label: str,
    draws: FloatArray | None = None,
) -> dict[str, Any]:
    where = f" ({label})" if label else ""
    known = _with_system(systems, "within-system", label)
    x, y, systems = x[known], y[known], systems[known]
    draws = None if draws is None else draws[:, known]
    keys, values, sizes, _ = _group_correlations(
        x, y, systems, method=method, kendall_variant=kendall_variant
    )
    used = np.isfinite(values)
    n_groups, n_items = int(used.sum()), int(sizes[used].sum())
    result = _nan_result(
        n=n_items,
        n_items=n_items,
        n_groups=n_groups,
        skipped=len(keys) - n_groups,
        resample="stories within systems",
    )
    if n_groups == 0 or n_items < 3:
        warn(
            DegenerateInputWarning,
            f"within-system {method} correlation is undefined{where}: no system has 2 or "
            "more stories with varying metric and human values",
        )
        return result
    codes = np.array([keys.index(s) for s in systems.tolist()])
    members = [np.flatnonzero(codes == g) for g in np.flatnonzero(used)]
    rank = {"method": method, "kendall_variant": kendall_variant}
    result["estimate"] = float(values[used].mean())
    result["p_value"] = _within_system_p(x, y, members, result["estimate"], seed, **rank)
    if n_boot:  # a system whose resample (or drawn labels) does not vary sits that one out
        per_system = np.full((len(members), n_boot), np.nan)
        for number, rows in enumerate(members):
            idx = rows[bootstrap_indices(rows.size, n_boot, seed + number)]
            drawn = y[idx] if draws is None else draws[np.arange(n_boot)[:, None], idx]
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                per_system[number] = rows_correlation(x[idx], drawn, **rank)
        defined = np.isfinite(per_system).any(axis=0)
        replicates = np.full(n_boot, np.nan)
        replicates[defined] = np.nanmean(per_system[:, defined], axis=0)
        result["ci_low"], result["ci_high"] = percentile_interval(
            replicates, confidence=confidence, label=label
        )
    return result


def _within_system_p(
    x: FloatArray,
    y: FloatArray,
    members: Sequence[np.ndarray],
    observed: float,
    seed: int,
    *,
    method: str,
    kendall_variant: str,
) -> float:
    """Two-sided permutation p-value of a mean within-system correlation: people's values
    shuffled within each system, ``(1 + hits) / (1 + shuffles)``."""
    rng = np.random.default_rng(seed)
    null = np.zeros(WITHIN_SYSTEM_SHUFFLES)
    for rows in members:
        shuffled = rng.permuted(np.tile(y[rows], (WITHIN_SYSTEM_SHUFFLES, 1)), axis=1)
        same = np.tile(x[rows], (WITHIN_SYSTEM_SHUFFLES, 1))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            null += rows_correlation(same, shuffled, method=method, kendall_variant=kendall_variant)
    null /= len(members)
    tolerance = 1e-12 * max(1.0, abs(observed))
    hits = int(np.sum(np.abs(null) >= abs(observed) - tolerance))
    return (1 + hits) / (1 + WITHIN_SYSTEM_SHUFFLES)


def correlation_signature(
    *,
    method: str,
    level: str,
    kendall_variant: str,
    n_boot: int,
    confidence: float,
    seed: int,
    resample: str,
    aggregation: str | None = None,
    labels: str | None = None,
) -> str:
    """The rendered signature of one correlation row (``labels``: ``posterior-draws`` when
    people's labels were drawn from a competence model in every replicate)."""
    fields: dict[str, Any] = {"method": method}
    if method == "kendall":
        fields["tau"] = kendall_variant
    fields["level"] = level
    if aggregation is not None:
        fields["raters"] = aggregation
    p_values = {"story": "signflip", "within_system": f"permutation:{WITHIN_SYSTEM_SHUFFLES}"}
    if method == "acc_eq":
        fields["ties"] = "calibrated"
    elif method == "spa":
        fields["p_systems"] = f"signflip:{SPA_PERMUTATIONS}"
    else:
        fields["p"] = p_values.get(level, "scipy;exact<=8")
    fields["ci"] = "percentile"
    fields["confidence"] = confidence
    fields["bootstrap"] = n_boot
    fields["resample"] = resample
    if labels is not None:
        fields["labels"] = labels
    fields["seed"] = seed
    return Signature("correlation", fields).render()


@dataclass(frozen=True)
class CorrelationSettings:
    """How correlations are computed, in one validated object that also writes its part of
    every row's signature (shared by :func:`correlate`, :func:`subset_correlations
    <storyeval.meta.drift.subset_correlations>`, :func:`human_ceiling
    <storyeval.meta.agreement.human_ceiling>` and the report).

    Parameters
    ----------
    levels : sequence of {"pooled", "story", "system", "within_system"}
    methods : sequence of {"pearson", "spearman", "kendall"}
    kendall_variant : {"b", "c"}
    n_boot : int
        Bootstrap replicates (0: no interval).
    confidence : float
        Coverage of the intervals.
    seed : int
        Seed of the bootstrap.

    Examples
    --------
    >>> settings = CorrelationSettings(levels=["pooled"], methods=["kendall"], n_boot=200)
    >>> settings.signature(method="kendall", level="pooled", resample="items").split("|")[1:4]
    ['method:kendall', 'tau:b', 'level:pooled']
    >>> CorrelationSettings(methods=["tau"])
    Traceback (most recent call last):
    ...
    ValueError: method must be one of pearson, spearman, kendall; got 'tau'
    """

    levels: Sequence[str] = LEVELS
    methods: Sequence[str] = ("pearson", "spearman", "kendall")
    kendall_variant: str = "b"
    n_boot: int = 1000
    confidence: float = 0.95
    seed: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "levels", tuple(check_level(lv) for lv in self.levels))
        object.__setattr__(
            self,
            "methods",
            tuple(m if m in PAIRWISE_METHODS else check_method(m) for m in self.methods),
        )
        if not self.levels or not self.methods:
            raise ValueError("give at least one level and one method")
        if self.kendall_variant not in ("b", "c"):
            raise ValueError(f"kendall_variant must be b or c; got {self.kendall_variant!r}")
        check_n_boot(self.n_boot)
        check_confidence(self.confidence)

    def with_levels(self, levels: Sequence[str]) -> CorrelationSettings:
        """These settings at other levels."""
        return replace(self, levels=tuple(levels))

    def compute(
        self,
        x: ArrayLike,
        y: ArrayLike,
        *,
        level: str,
        method: str,
        prompts: ArrayLike | None,
        systems: ArrayLike | None,
        label: str,
        y_draws: ArrayLike | None = None,
    ) -> dict[str, Any]:
        """:func:`level_correlation` with these settings (or, for ``acc_eq`` and ``spa``,
        :func:`~storyeval.meta.tie_accuracy.pairwise_meta_row`)."""
        if method in PAIRWISE_METHODS:
            return pairwise_meta_row(
                np.asarray(x, dtype=float),
                np.asarray(y, dtype=float),
                level=level,
                method=method,
                prompts=None if prompts is None else np.asarray(prompts, dtype=object),
                systems=None if systems is None else np.asarray(systems, dtype=object),
                n_boot=self.n_boot,
                confidence=self.confidence,
                seed=self.seed,
                label=label,
            )
        return level_correlation(
            x,
            y,
            level=level,
            prompts=prompts,
            systems=systems,
            method=method,
            kendall_variant=self.kendall_variant,
            n_boot=self.n_boot,
            confidence=self.confidence,
            seed=self.seed,
            label=label,
            y_draws=y_draws,
        )

    def signature(
        self,
        *,
        method: str,
        level: str,
        resample: str,
        aggregation: str | None = None,
        labels: str | None = None,
    ) -> str:
        """The rendered signature of one correlation row."""
        return correlation_signature(
            method=method,
            level=level,
            kendall_variant=self.kendall_variant,
            n_boot=self.n_boot,
            confidence=self.confidence,
            seed=self.seed,
            resample=resample,
            aggregation=aggregation,
            labels=labels,
        )

    def row(
        self,
        x: ArrayLike,
        y: ArrayLike,
        *,
        level: str,
        method: str,
        prompts: ArrayLike | None,
        systems: ArrayLike | None,
        label: str,
        aggregation: str | None,
        y_draws: ArrayLike | None = None,
    ) -> dict[str, Any]:
        """One correlation row: ``level, method``, the result and its ``signature``
        (``y_draws``: see :func:`level_correlation`)."""
        result = self.compute(
            x,
            y,
            level=level,
            method=method,
            prompts=prompts,
            systems=systems,
            label=label,
            y_draws=y_draws,
        )
        signature = self.signature(
            method=method,
            level=level,
            resample=str(result["resample"]),
            aggregation=aggregation,
            labels="posterior-draws" if y_draws is not None and self.n_boot else None,
        )
        return {"level": level, "method": method, **result, "signature": signature}


def settings_from(settings: CorrelationSettings | None, **given: Any) -> CorrelationSettings:
    """``settings`` when given, else one made of the individual keyword arguments."""
    return settings if settings is not None else CorrelationSettings(**given)


def correlate(
    table: MetaTable,
    *,
    levels: Sequence[str] = LEVELS,
    methods: Sequence[str] = ("pearson", "spearman", "kendall"),
    kendall_variant: str = "b",
    n_boot: int = 1000,
    confidence: float = 0.95,
    seed: int = 0,
    metrics: Sequence[str] | None = None,
    criteria: Sequence[str] | None = None,
    settings: CorrelationSettings | None = None,
) -> pd.DataFrame:
    """Correlate every metric with every human criterion.

    Parameters
    ----------
    table : MetaTable
        From :func:`~storyeval.meta.data.build_meta_table` or ``load_meta_table``.
    levels : sequence of {"pooled", "story", "system", "within_system"}
        Default: the first three (the module docstring says what each is).
    methods : sequence of {"pearson", "spearman", "kendall"}
    kendall_variant : {"b", "c"}
        Kendall's tau-b (default) or tau-c.
    n_boot : int
        Bootstrap replicates for the interval (0: none).
    confidence : float
    seed : int
    metrics, criteria : sequence of str, optional
        Restrict to these.

    Returns
    -------
    DataFrame
        One row per metric x criterion x level x method with the columns
        ``metric, criterion, level, method, estimate, p_value, ci_low, ci_high, n, n_items,
        n_groups, skipped, resample, signature, metric_signature`` (see
        :func:`level_correlation`; ``signature`` is the statistic's, ``metric_signature``
        the metric's).

    Raises
    ------
    MetaInputError
        When a level needs prompt ids or systems that no item has.

    Examples
    --------
    >>> import pandas as pd
    >>> from storyeval.meta.data import build_meta_table
    >>> scores = pd.DataFrame({"item_id": list("abcdef"), "metric": "m",
    ...                        "value": [0.1, 0.4, 0.2, 0.9, 0.5, 0.8]})
    >>> judg = pd.DataFrame({"item_id": list("abcdef"), "rater_id": "r1",
    ...                      "criterion": "q", "value": [1, 3, 2, 5, 3, 4]})
    >>> out = correlate(build_meta_table(scores, judg), levels=["pooled"],
    ...                 methods=["spearman"], n_boot=100)
    >>> out[["metric", "criterion", "level", "method", "n"]].to_dict("records")
    [{'metric': 'm', 'criterion': 'q', 'level': 'pooled', 'method': 'spearman', 'n': 6}]
    >>> round(float(out["estimate"].iloc[0]), 3)
    0.986
    """
    chosen = settings_from(
        settings,
        levels=levels,
        methods=methods,
        kendall_variant=kendall_variant,
        n_boot=n_boot,
        confidence=confidence,
        seed=seed,
    )
    if "story" in chosen.levels and not table.has_prompts:
        raise MetaInputError(
            "the story level needs prompt ids: score records with 'prompt_id', or a story file "
            "(--stories) whose records have 'prompt_id' or a prompt"
        )
    if {"system", "within_system"} & set(chosen.levels) and not table.has_systems:
        raise MetaInputError(
            "the system and within-system levels need systems: score records with 'system', or a story file "
            "(--stories) whose records have 'system'"
        )
    metric_names = list(metrics) if metrics is not None else table.metric_names
    criterion_names = list(criteria) if criteria is not None else table.criteria
    for name in metric_names:
        if name not in table.metrics.columns:
            raise ValueError(f"unknown metric {name!r}; available: {', '.join(table.metric_names)}")
    for name in criterion_names:
        if name not in table.human.columns:
            raise ValueError(f"unknown criterion {name!r}; available: {', '.join(table.criteria)}")
    prompts = table.items["prompt_id"].to_numpy(dtype=object)
    systems = table.items["system"].to_numpy(dtype=object)
    rows: list[dict[str, Any]] = []
    draws = {  # one set of label draws per criterion, shared by every metric
        criterion: table.label_draws(criterion, chosen.n_boot, chosen.seed + LABEL_SEED)
        for criterion in criterion_names
    }
    for metric in metric_names:
        x = table.metrics[metric].to_numpy(dtype=float)
        for criterion in criterion_names:
            y = table.human[criterion].to_numpy(dtype=float)
            for level in chosen.levels:
                for method in chosen.methods:
                    if method == "spa" and level != "system":
                        continue  # soft pairwise accuracy compares systems only
                    row = chosen.row(
                        x,
                        y,
                        level=level,
                        method=method,
                        prompts=prompts,
                        systems=systems,
                        label=f"{metric} ~ {criterion}, {level}, {method}",
                        aggregation=table.aggregation,
                        y_draws=draws[criterion],
                    )
                    rows.append(
                        {
                            "metric": metric,
                            "criterion": criterion,
                            **row,
                            "metric_signature": table.metric_signature(metric),
                        }
                    )
    return tidy_correlations(rows)


def tidy_correlations(rows: list[dict[str, Any]], extra: Sequence[str] = ()) -> pd.DataFrame:
    """A correlation table with the standard column order and dtypes."""
    columns = [*extra, *CORRELATION_COLUMNS]
    frame = pd.DataFrame(rows)
    for column in columns:
        if column not in frame.columns:
            frame[column] = pd.NA if column in ("n_groups", "skipped") else ""
    rest = [c for c in frame.columns if c not in columns]
    frame = frame[[*columns, *rest]]
    for column in ("estimate", "p_value", "ci_low", "ci_high"):
        frame[column] = frame[column].astype(float)
    for column in ("n", "n_items"):
        frame[column] = frame[column].astype(int)
    for column in ("n_groups", "skipped"):
        frame[column] = frame[column].astype("Int64")
    return frame


def correlation_matrix(
    table: MetaTable,
    *,
    method: str = "pearson",
    level: str = "pooled",
    kendall_variant: str = "b",
    columns: Sequence[str] | None = None,
) -> pd.DataFrame:
    """The square correlation matrix of human criteria and metrics (Callan & Foster Table 2).

    Rows and columns are the criteria followed by the metrics (or ``columns``, which may name
    either; a name that is both a metric and a criterion refers to the criterion, and metrics
    then appear as ``metric:NAME``). Entries are point estimates (no bootstrap) at ``level``;
    the diagonal is 1 where a column varies.

    Returns
    -------
    DataFrame
        Square, symmetric, labelled by column name.
    """
    check_level(level)
    check_method(method)
    data: dict[str, FloatArray] = {}
    for criterion in table.criteria:
        data[criterion] = table.human[criterion].to_numpy(dtype=float)
    for metric in table.metric_names:
        key = metric if metric not in data else f"metric:{metric}"
        data[key] = table.metrics[metric].to_numpy(dtype=float)
    names = list(columns) if columns is not None else list(data)
    for name in names:
        if name not in data:
            raise ValueError(f"unknown column {name!r}; available: {', '.join(data)}")
    prompts = table.items["prompt_id"].to_numpy(dtype=object)
    systems = table.items["system"].to_numpy(dtype=object)
    matrix = pd.DataFrame(np.nan, index=names, columns=names, dtype=float)
    for i, a in enumerate(names):
        for b in names[i:]:
            result = level_correlation(
                data[a],
                data[b],
                level=level,
                prompts=prompts,
                systems=systems,
                method=method,
                kendall_variant=kendall_variant,
                n_boot=0,
                label=f"{a} ~ {b}, {level}, {method}",
            )
            matrix.loc[a, b] = matrix.loc[b, a] = result["estimate"]
    return matrix
