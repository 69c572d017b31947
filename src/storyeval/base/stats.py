"""Correlation primitives: point estimates with p-values (scipy.stats) and fast row-wise
estimators for bootstrap replicates.

Point estimates and p-values come from :mod:`scipy.stats` (``pearsonr``, ``spearmanr``,
``kendalltau``). Bootstrap replicates need thousands of correlations, so this module also has
vectorised estimators that compute one correlation per row of a matrix; their parity with
scipy is tested (``tests/test_meta_stats.py``).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from typing import Literal, cast

import numpy as np
from numpy.typing import ArrayLike, NDArray

from storyeval.base.errors import BootstrapWarning, DegenerateInputWarning, warn
from storyeval.base.validation import check_choice, check_confidence

Method = Literal["pearson", "spearman", "kendall"]
METHODS: tuple[str, ...] = ("pearson", "spearman", "kendall")
KENDALL_VARIANTS: tuple[str, ...] = ("b", "c")

FloatArray = NDArray[np.float64]


TIE_DIGITS = 12
"""Significant digits to which values are rounded before they are ranked: values equal to
this precision are ties (means of the same ratings summed in another order differ only in
the last bits, ~1e-16 relative, and must not count as a concordant or discordant pair)."""

RANK_METHODS = ("spearman", "kendall")


def tie_safe(values: ArrayLike, significant: int = TIE_DIGITS) -> FloatArray:
    """``values`` rounded to ``significant`` significant digits (NaN and infinities kept), so
    mathematically equal means computed in different orders compare equal.

    >>> a = [3.0, 1.0, 4.666666666666667, 2.3333333333333335, 2.6666666666666665, 4.666666666666667]
    >>> b = [1.6666666666666667, 2.3333333333333335, 5.0, 3.0, 5.0, 1.3333333333333333]
    >>> float(np.mean(a)) == float(np.mean(b)), bool(tie_safe([np.mean(a)]) == tie_safe([np.mean(b)]))
    (False, True)
    """
    array = np.asarray(values, dtype=float)
    finite = np.isfinite(array) & (array != 0)
    magnitude = np.floor(np.log10(np.abs(np.where(finite, array, 1.0))))
    scale = 10.0 ** (significant - 1 - magnitude)
    rounded: FloatArray = np.where(finite, np.round(array * scale) / scale, array)
    return rounded


def check_method(method: str) -> str:
    """Return ``method`` if it is a known correlation method, else raise ``ValueError``."""
    check_choice(method, METHODS, "method")
    return method


def check_variant(variant: str) -> str:
    """``variant`` if it is a Kendall variant (``b`` or ``c``), else ``ValueError``."""
    check_choice(variant, KENDALL_VARIANTS, "kendall_variant")
    return variant


def paired_finite(x: ArrayLike, y: ArrayLike) -> tuple[FloatArray, FloatArray]:
    """The pairs of ``x`` and ``y`` where both are finite, as float arrays."""
    xa = np.asarray(x, dtype=float).ravel()
    ya = np.asarray(y, dtype=float).ravel()
    if xa.shape != ya.shape:
        raise ValueError(f"x and y must have the same length; got {xa.size} and {ya.size}")
    keep = np.isfinite(xa) & np.isfinite(ya)
    return xa[keep], ya[keep]


def correlation(
    x: ArrayLike,
    y: ArrayLike,
    *,
    method: str = "pearson",
    kendall_variant: str = "b",
    min_n: int = 3,
    label: str = "",
) -> tuple[float, float, int]:
    """Correlation of two samples with its p-value, computed by :mod:`scipy.stats`.

    Pairs with a missing (nan) value on either side are dropped first.

    Parameters
    ----------
    x, y : array-like of shape (n,)
        Paired samples.
    method : {"pearson", "spearman", "kendall"}
        Pearson's r, Spearman's rho or Kendall's tau.
    kendall_variant : {"b", "c"}
        tau-b (adjusted for ties, the default) or tau-c (Stuart's, for rectangular tables).
    min_n : int
        Fewer finite pairs than this give nan (with a warning). Two pairs always correlate
        perfectly, so the default is 3.
    label : str
        Named in warnings (e.g. ``"bleu ~ coherence"``).

    Returns
    -------
    estimate : float
        The coefficient, or nan when undefined.
    p_value : float
        Two-sided p-value of scipy's test of no association (for n <= 8, exact, from all
        n! pairings), or nan.
    n : int
        The number of finite pairs used.

    Warns
    -----
    DegenerateInputWarning
        When there are fewer than ``min_n`` pairs or one side is constant.

    Examples
    --------
    >>> r, p, n = correlation([1, 2, 3, 4, 5], [2, 1, 4, 3, 5], method="spearman")
    >>> round(r, 3), n
    (0.8, 5)
    """
    from scipy import stats

    check_method(method)
    check_variant(kendall_variant)
    xa, ya = paired_finite(x, y)
    n = int(xa.size)
    where = f" ({label})" if label else ""
    if n < min_n:
        warn(
            DegenerateInputWarning,
            f"{method} correlation is undefined{where}: {n} complete pair(s), need at least {min_n}",
        )
        return float("nan"), float("nan"), n
    if np.ptp(xa) == 0 or np.ptp(ya) == 0:
        side = "x" if np.ptp(xa) == 0 else "y"
        warn(
            DegenerateInputWarning,
            f"{method} correlation is undefined{where}: {side} is constant over {n} pairs",
        )
        return float("nan"), float("nan"), n
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        if method == "pearson":
            result = stats.pearsonr(xa, ya)
            estimate, p_value = float(result.statistic), float(result.pvalue)
        elif method == "spearman":
            result = stats.spearmanr(xa, ya)
            estimate, p_value = float(result.statistic), float(result.pvalue)
        else:
            result = stats.kendalltau(xa, ya, variant=kendall_variant)
            estimate, p_value = float(result.statistic), float(result.pvalue)
    if n == 2:  # a p-value from two points means nothing
        p_value = float("nan")
    elif n <= EXACT_P_MAX_N:
        p_value = exact_permutation_p(xa, ya, method=method, kendall_variant=kendall_variant)
    return estimate, p_value, n


EXACT_P_MAX_N = 8
"""Up to this many pairs, p-values come from all n! pairings (scipy's asymptotic p-values
are far too small there: Pearson's or Spearman's r = 1 from 3 points gets p = 0)."""


def exact_permutation_p(
    x: FloatArray, y: FloatArray, *, method: str, kendall_variant: str = "b"
) -> float:
    """Two-sided p-value of a correlation from every pairing of ``x`` with ``y``.

    Uses ``scipy.stats.permutation_test`` (``permutation_type="pairings"``), which enumerates
    all n! pairings when n is small.

    Examples
    --------
    >>> exact_permutation_p([1.0, 2, 3], [1.0, 2, 3], method="spearman")  # 2 of 6 pairings
    0.3333333333333333
    """
    from scipy import stats

    ya = np.asarray(y, dtype=float)

    def statistic(xs: FloatArray, axis: int = -1) -> FloatArray:
        xs = np.moveaxis(np.asarray(xs, dtype=float), axis, -1)
        shape = xs.shape[:-1]
        flat = xs.reshape(-1, xs.shape[-1])
        ys = np.broadcast_to(ya, flat.shape)
        values = rows_correlation(
            flat, np.array(ys), method=method, kendall_variant=kendall_variant
        )
        return values.reshape(shape)

    result = stats.permutation_test(
        (np.asarray(x, dtype=float),),
        statistic,
        permutation_type="pairings",
        vectorized=True,
        n_resamples=np.inf,
        alternative="two-sided",
    )
    return float(min(1.0, result.pvalue))


# --------------------------------------------------------------------------- row estimators


def pearson_rows(x: FloatArray, y: FloatArray) -> FloatArray:
    """Pearson's r of each row pair of two (m, n) arrays; nan where a row is constant.

    Examples
    --------
    >>> import numpy as np
    >>> pearson_rows(np.array([[1.0, 2, 3], [1, 1, 1]]), np.array([[1.0, 2, 4], [3, 2, 1]]))
    array([0.98198051,        nan])
    """
    xc = x - x.mean(axis=1, keepdims=True)
    yc = y - y.mean(axis=1, keepdims=True)
    sxx = np.einsum("ij,ij->i", xc, xc)
    syy = np.einsum("ij,ij->i", yc, yc)
    sxy = np.einsum("ij,ij->i", xc, yc)
    denom = np.sqrt(sxx * syy)
    out = np.full(x.shape[0], np.nan)
    ok = (np.ptp(x, axis=1) > 0) & (np.ptp(y, axis=1) > 0) & (denom > 0)
    out[ok] = np.clip(sxy[ok] / denom[ok], -1.0, 1.0)
    return out


def _rank_rows(x: FloatArray) -> FloatArray:
    from scipy.stats import rankdata

    return np.asarray(rankdata(x, axis=1), dtype=float)


def spearman_rows(x: FloatArray, y: FloatArray) -> FloatArray:
    """Spearman's rho of each row pair (Pearson's r of average ranks)."""
    return pearson_rows(_rank_rows(x), _rank_rows(y))


def _distinct_per_row(x: FloatArray) -> NDArray[np.int64]:
    s = np.sort(x, axis=1)
    return np.asarray(1 + (np.diff(s, axis=1) != 0).sum(axis=1), dtype=np.int64)


def kendall_rows(x: FloatArray, y: FloatArray, *, variant: str = "b") -> FloatArray:
    """Kendall's tau-b or tau-c of each row pair.

    tau-b = S / sqrt((n0 - n1)(n0 - n2)) and tau-c = 2 m S / (n^2 (m - 1)), where S is the
    number of concordant minus discordant pairs, n0 = n(n-1)/2, n1 and n2 the pairs tied in x
    and in y, and m the smaller number of distinct values (as in ``scipy.stats.kendalltau``).
    Small rows are done with pairwise sign matrices in chunks; long rows call scipy per row.
    """
    check_variant(variant)
    m, n = x.shape
    out = np.full(m, np.nan)
    if n < 2:
        return out
    if n > 400:
        from scipy import stats

        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            for i in range(m):
                if np.ptp(x[i]) > 0 and np.ptp(y[i]) > 0:
                    out[i] = stats.kendalltau(x[i], y[i], variant=variant).statistic
        return out
    chunk = max(1, 4_000_000 // (n * n))
    for start in range(0, m, chunk):
        xs = x[start : start + chunk]
        ys = y[start : start + chunk]
        sx = np.sign(xs[:, :, None] - xs[:, None, :])
        sy = np.sign(ys[:, :, None] - ys[:, None, :])
        s2 = np.einsum("kij,kij->k", sx, sy)  # = 2 S (each pair counted twice)
        if variant == "b":
            tx = np.einsum("kij,kij->k", sx, sx)
            ty = np.einsum("kij,kij->k", sy, sy)
            denom = np.sqrt(tx * ty)
            block = np.full(xs.shape[0], np.nan)
            ok = denom > 0
            block[ok] = s2[ok] / denom[ok]
        else:
            mm = np.minimum(_distinct_per_row(xs), _distinct_per_row(ys)).astype(float)
            block = np.full(xs.shape[0], np.nan)
            ok = mm > 1
            block[ok] = 2.0 * mm[ok] * (s2[ok] / 2.0) / (n * n * (mm[ok] - 1.0))
        out[start : start + chunk] = block
    return cast("np.ndarray", np.clip(out, -1.0, 1.0))


def kendall_resampled(
    x: FloatArray, y: FloatArray, weights: FloatArray, *, variant: str = "b"
) -> FloatArray:
    """Kendall's tau of resamples of one sample, given as multiplicity weights.

    A bootstrap resample that takes item i ``weights[k, i]`` times has
    S = w' P w / 2 with P the matrix of sign(x_i - x_j) sign(y_i - y_j), and tied-pair counts
    from the same quadratic form on |sign(x_i - x_j)| (a repeated item ties with itself), so
    every replicate costs one matrix product instead of a new O(n log n) tau.

    Parameters
    ----------
    x, y : array of shape (n,)
    weights : array of shape (m, n)
        Non-negative counts; each row sums to the resample size.
    """
    check_variant(variant)
    n = x.size
    out = np.full(weights.shape[0], np.nan)
    if n < 2:
        return out
    if n > 2500:  # the n x n matrices would be too large: one scipy call per replicate
        idx = [np.repeat(np.arange(n), w.astype(int)) for w in weights]
        return np.array(
            [kendall_rows(x[i][None, :], y[i][None, :], variant=variant)[0] for i in idx]
        )
    sx = np.sign(x[:, None] - x[None, :])
    sy = np.sign(y[:, None] - y[None, :])
    s2 = np.einsum("ki,ki->k", weights @ (sx * sy), weights)
    if variant == "b":
        tx = np.einsum("ki,ki->k", weights @ np.abs(sx), weights)
        ty = np.einsum("ki,ki->k", weights @ np.abs(sy), weights)
        denom = np.sqrt(tx * ty)
        ok = denom > 0
        out[ok] = s2[ok] / denom[ok]
    else:
        size = weights.sum(axis=1)
        present = weights > 0
        _, cx = np.unique(x, return_inverse=True)
        _, cy = np.unique(y, return_inverse=True)
        dx = (present @ np.eye(int(cx.max()) + 1)[cx] > 0).sum(axis=1)
        dy = (present @ np.eye(int(cy.max()) + 1)[cy] > 0).sum(axis=1)
        mm = np.minimum(dx, dy).astype(float)
        ok = mm > 1
        out[ok] = 2.0 * mm[ok] * (s2[ok] / 2.0) / (size[ok] ** 2 * (mm[ok] - 1.0))
    return cast("np.ndarray", np.clip(out, -1.0, 1.0))


def rows_correlation(
    x: FloatArray, y: FloatArray, *, method: str, kendall_variant: str = "b"
) -> FloatArray:
    """One correlation per row of two (m, n) arrays, by ``method``."""
    check_method(method)
    if method == "pearson":
        return pearson_rows(x, y)
    if method == "spearman":
        return spearman_rows(x, y)
    return kendall_rows(x, y, variant=kendall_variant)


# --------------------------------------------------------------------------- intervals, tests


def bootstrap_indices(n: int, n_boot: int, seed: int) -> NDArray[np.int64]:
    """``n_boot`` rows of ``n`` indices drawn with replacement (numpy PCG64 seeded by ``seed``).

    Every seeded bootstrap of the project draws its resamples here, so the same seed gives the
    same resamples whichever statistic is resampled.

    Examples
    --------
    >>> bootstrap_indices(4, 2, seed=0).shape
    (2, 4)
    """
    rng = np.random.default_rng(seed)
    return np.asarray(rng.integers(0, n, size=(n_boot, n)), dtype=np.int64)


def bootstrap_weights(indices: NDArray[np.int64], n: int) -> FloatArray:
    """The resamples of :func:`bootstrap_indices` as multiplicity weights of shape (n_boot, n).

    ``weights[k, i]`` is how often resample ``k`` drew item ``i``; estimators that are sums
    over items (coincidence matrices, pair counts, cluster sums) resample as ``weights @ x``.

    Examples
    --------
    >>> bootstrap_weights(np.array([[0, 0, 2]]), 3)
    array([[2., 0., 1.]])
    """
    n_boot = indices.shape[0]
    weights = np.zeros((n_boot, n))
    np.add.at(weights, (np.repeat(np.arange(n_boot), indices.shape[1]), indices.ravel()), 1.0)
    return weights


def percentile_interval(
    replicates: ArrayLike, *, confidence: float = 0.95, label: str = ""
) -> tuple[float, float]:
    """Percentile bootstrap interval of the finite replicates.

    Undefined replicates (nan) are left out with a :class:`BootstrapWarning`; when fewer than
    half are defined, the interval is nan.
    """
    check_confidence(confidence)
    values = np.asarray(replicates, dtype=float)
    finite = values[np.isfinite(values)]
    where = f" ({label})" if label else ""
    if values.size == 0:
        return float("nan"), float("nan")
    if finite.size < values.size:
        if finite.size * 2 < values.size:
            warn(
                BootstrapWarning,
                f"bootstrap interval is undefined{where}: only {finite.size} of "
                f"{values.size} replicates are defined",
            )
            return float("nan"), float("nan")
        warn(
            BootstrapWarning,
            f"{values.size - finite.size} of {values.size} bootstrap replicates were undefined "
            f"and left out{where}",
        )
    alpha = (1.0 - confidence) / 2.0
    low, high = np.quantile(finite, [alpha, 1.0 - alpha])
    return float(low), float(high)


def bonferroni(p_values: Sequence[float], *, tests: int | None = None) -> list[float]:
    """Bonferroni-corrected p values: each times the number of tests (``tests``, by default
    the finite p values given), at most 1. Clark (2021) divides 0.05 by 15 (p < 0.00333)."""
    finite = [p for p in p_values if not math.isnan(p)]
    m = tests if tests is not None else len(finite)
    if m < 1:
        raise ValueError(f"tests must be at least 1; got {m}")
    return [math.nan if math.isnan(p) else min(1.0, p * m) for p in p_values]


def sign_flip_test(
    values: ArrayLike, *, n_resamples: int = 9999, seed: int = 0, exact_up_to: int = 14
) -> float:
    """Two-sided sign-flip randomization test that the mean of ``values`` is zero.

    Used for the story level, where the statistic is the mean of per-prompt correlations and
    the prompts are the independent units. Under the null hypothesis each value is symmetric
    around zero, so flipping signs gives the null distribution of the mean. Up to
    ``exact_up_to`` values every sign pattern is enumerated (an exact p-value); above, ``n_resamples``
    seeded random patterns give ``(1 + hits) / (1 + n_resamples)``.

    Examples
    --------
    >>> round(sign_flip_test([1.0, 1.0, 1.0, 1.0, 1.0]), 4)  # 2 of 32 patterns as extreme
    0.0625
    """
    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v)]
    k = v.size
    if k == 0 or np.all(v == 0):
        return float("nan")
    observed = abs(v.mean())
    tolerance = 1e-12 * max(1.0, observed)
    if k <= exact_up_to:
        patterns = ((np.arange(2**k)[:, None] >> np.arange(k)) & 1) * 2 - 1
        means = np.abs(patterns @ v) / k
        return float(np.mean(means >= observed - tolerance))
    rng = np.random.default_rng(seed)
    signs = rng.choice(np.array([-1.0, 1.0]), size=(n_resamples, k))
    means = np.abs(signs @ v) / k
    hits = int(np.sum(means >= observed - tolerance))
    return float((1 + hits) / (1 + n_resamples))


def mean_interval(
    values: ArrayLike, *, confidence: float = 0.95
) -> tuple[float, float, float, float]:
    """Mean, sd (n - 1) and the Student t interval of the mean of the finite values.

    Returns ``(mean, sd, ci_low, ci_high)``; the sd and the interval are nan for fewer than
    two values, everything is nan for none.

    Examples
    --------
    >>> mean, sd, low, high = mean_interval([4.0, 5.0, 6.0])
    >>> mean, sd, round(low, 3), round(high, 3)
    (5.0, 1.0, 2.516, 7.484)
    """
    from scipy.stats import t

    check_confidence(confidence)
    data = np.asarray(values, dtype=float).ravel()
    data = data[np.isfinite(data)]
    if data.size == 0:
        return float("nan"), float("nan"), float("nan"), float("nan")
    mean = float(data.mean())
    if data.size < 2:
        return mean, float("nan"), float("nan"), float("nan")
    sd = float(data.std(ddof=1))
    half = float(t.ppf(0.5 + confidence / 2, data.size - 1)) * sd / math.sqrt(data.size)
    return mean, sd, mean - half, mean + half


def binomial_test(
    successes: int,
    trials: int,
    *,
    p: float = 0.5,
    alternative: str = "two-sided",
    confidence: float = 0.95,
) -> tuple[float, float, float]:
    """Exact binomial test of ``successes`` out of ``trials`` against ``p``, with the exact
    (Clopper-Pearson) interval of the proportion (``scipy.stats.binomtest``).

    Returns ``(p_value, ci_low, ci_high)``; the interval is two-sided at ``confidence`` for the
    two-sided alternative and one-sided otherwise, as scipy gives it.

    Examples
    --------
    >>> p_value, low, high = binomial_test(9, 10)
    >>> round(p_value, 4), round(low, 3), round(high, 3)
    (0.0215, 0.555, 0.997)
    """
    from scipy.stats import binomtest

    check_confidence(confidence)
    result = binomtest(int(successes), int(trials), p, alternative=alternative)
    interval = result.proportion_ci(confidence_level=confidence, method="exact")
    return float(result.pvalue), float(interval.low), float(interval.high)


def describe_replicates(replicates: Sequence[float]) -> dict[str, float]:
    """Mean, sd, min and max of the finite values (the spread of repeated experiments)."""
    v = np.asarray(replicates, dtype=float)
    v = v[np.isfinite(v)]
    if v.size == 0:
        return {"mean": float("nan"), "sd": float("nan"), "min": float("nan"), "max": float("nan")}
    return {
        "mean": float(v.mean()),
        "sd": float(v.std(ddof=1)) if v.size > 1 else float("nan"),
        "min": float(v.min()),
        "max": float(v.max()),
    }
