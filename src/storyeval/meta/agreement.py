"""The human side: inter-rater agreement and the human ceiling.

Agreement per criterion (Karpinska et al. 2021 reports Krippendorff's alpha with the percentage of items
on which all raters agree, beside the mean and sd of the ratings):

- Krippendorff's alpha (the ``krippendorff`` package) at the nominal, ordinal and interval
  levels; it handles missing ratings and any number of raters per item. The interval is a
  seeded bootstrap over items (units).
- Fleiss' kappa (``statsmodels``), for categorical ratings with the same number of ratings per
  item (items with another number are left out, with a warning); bootstrap interval over items.
- Intraclass correlations (``pingouin``): ICC1 (one-way random), ICC2 (two-way random,
  absolute agreement), ICC3 (two-way mixed, consistency), single and average (``k``) forms,
  with pingouin's estimates and F-test p-values and F-distribution intervals (McGraw & Wong
  1996, computed here at full precision and any confidence); they need every item rated by the same raters
  (items with a missing rating are left out).
- ``percent_full_agreement``: the percentage of items (with 2 or more ratings) on which every
  rating is the same.

The human ceiling correlates each rater with the mean of the other raters, at the same levels
as the metrics, so that a metric's correlation with the mean rating can be read against how
well one person predicts the others. (The metric is compared with the mean of all k raters, a
rater with the mean of k - 1, so the ceiling is a reference point, not a strict bound.)
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any, cast

import numpy as np
import pandas as pd

from storyeval.base.errors import DataCoverageWarning, DegenerateInputWarning, warn
from storyeval.base.signature import Signature
from storyeval.base.stats import bootstrap_indices, bootstrap_weights, percentile_interval
from storyeval.base.validation import check_choice, check_confidence, check_n_boot
from storyeval.corpus import Judgment
from storyeval.meta.correlation import (
    LABEL_SEED,
    LEVELS,
    CorrelationSettings,
    settings_from,
    tidy_correlations,
)
from storyeval.meta.data import MetaInputError, judgments_frame

ALPHA_LEVELS: tuple[str, ...] = ("nominal", "ordinal", "interval")
AGREEMENT_STATISTICS: tuple[str, ...] = ("alpha", "fleiss", "icc", "full_agreement")
AGREEMENT_COLUMNS: tuple[str, ...] = (
    "criterion",
    "method",
    "estimate",
    "ci_low",
    "ci_high",
    "p_value",
    "n",
    "n_raters",
    "n_ratings",
    "signature",
)
ICC_TYPES: dict[str, str] = {
    "ICC(1,1)": "icc1",
    "ICC(A,1)": "icc2",
    "ICC(C,1)": "icc3",
    "ICC(1,k)": "icc1k",
    "ICC(A,k)": "icc2k",
    "ICC(C,k)": "icc3k",
}
MAX_CATEGORIES = 20


def reliability_matrix(judgments: pd.DataFrame, criterion: str) -> pd.DataFrame:
    """Raters x items matrix of one criterion's ratings (nan where a rater did not rate).

    A rater who rated an item twice (in two conditions) contributes the mean.
    """
    sub = judgments[judgments["criterion"] == criterion]
    return sub.pivot_table(index="rater_id", columns="item_id", values="value", aggfunc="mean")


def _alpha(matrix: np.ndarray, level: str, domain: np.ndarray) -> float:
    import krippendorff

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            value = float(
                krippendorff.alpha(
                    reliability_data=matrix,
                    level_of_measurement=cast(Any, level),
                    value_domain=domain,
                )
            )
    except (ValueError, ZeroDivisionError):
        return float("nan")
    return value


def alpha_resampled(
    matrix: np.ndarray, weights: np.ndarray, *, level: str, domain: np.ndarray
) -> np.ndarray:
    """Krippendorff's alpha of item resamples given as multiplicity weights.

    ``matrix`` is raters x items (nan = missing; every item has 2 or more ratings);
    ``weights`` is (replicates, items). With the per-item coincidences
    o_u[c, k] = (n_uc n_uk - [c = k] n_uc) / (m_u - 1), a resample's coincidence matrix is the
    weighted sum over items, and alpha = 1 - (n - 1) sum(o d2) / sum(n_c n_k d2) with the
    nominal, interval or ordinal distance d2 (the ordinal one from the resample's marginals),
    as in Krippendorff (2011) and the ``krippendorff`` package; parity with that package is
    tested. Falls back to one package call per replicate when the tensor would be large.
    """
    values = np.asarray(domain, dtype=float)
    v = values.size
    n_items = matrix.shape[1]
    if n_items * v * v > 20_000_000:
        looped = []
        for w in weights:
            idx = np.repeat(np.arange(n_items), w.astype(int))
            looped.append(_alpha(matrix[:, idx], level, values))
        return np.array(looped)
    codes = np.searchsorted(values, np.nan_to_num(matrix, nan=values[0]))
    present = np.isfinite(matrix)
    counts = np.zeros((n_items, v))
    for r in range(matrix.shape[0]):
        np.add.at(counts, (np.arange(n_items)[present[r]], codes[r][present[r]]), 1.0)
    m = counts.sum(axis=1)
    per_item = (counts[:, :, None] * counts[:, None, :]) - np.einsum(
        "uc,ck->uck", counts, np.eye(v)
    )
    per_item /= (m - 1.0)[:, None, None]
    o = (weights @ per_item.reshape(n_items, v * v)).reshape(-1, v, v)
    n_c = o.sum(axis=2)
    n_total = n_c.sum(axis=1)
    if level == "nominal":
        d2 = np.broadcast_to(1.0 - np.eye(v), o.shape)
    elif level == "interval":
        d2 = np.broadcast_to((values[:, None] - values[None, :]) ** 2, o.shape)
    elif level == "ordinal":
        cum = np.cumsum(n_c, axis=1)
        lo = np.minimum.outer(np.arange(v), np.arange(v))
        hi = np.maximum.outer(np.arange(v), np.arange(v))
        between = cum[:, hi] - cum[:, lo] + n_c[:, lo]
        d2 = (between - (n_c[:, :, None] + n_c[:, None, :]) / 2.0) ** 2
    else:
        raise ValueError(f"level must be one of {', '.join(ALPHA_LEVELS)}; got {level!r}")
    observed = (o * d2).sum(axis=(1, 2))
    expected = (n_c[:, :, None] * n_c[:, None, :] * d2).sum(axis=(1, 2))
    out = np.full(weights.shape[0], np.nan)
    ok = expected > 0
    out[ok] = 1.0 - (n_total[ok] - 1.0) * observed[ok] / expected[ok]
    return out


def krippendorff_alpha(
    matrix: np.ndarray,
    *,
    level: str,
    n_boot: int = 0,
    confidence: float = 0.95,
    seed: int = 0,
    label: str = "",
) -> tuple[float, float, float]:
    """Krippendorff's alpha of a raters x items matrix, with a percentile bootstrap interval.

    Parameters
    ----------
    matrix : array of shape (raters, items)
        Ratings (nan = not rated). Items with fewer than two ratings carry no pairable value
        and are left out.
    level : {"nominal", "ordinal", "interval"}
    n_boot : int
        Bootstrap replicates; each resamples items with replacement (0: no interval).
    confidence : float
    seed : int
    label : str
        Named in warnings.

    Returns
    -------
    estimate, ci_low, ci_high : float
        The estimate from the ``krippendorff`` package over the values observed; the interval
        from :func:`alpha_resampled` replicates. All nan, with a
        :class:`~storyeval.meta.DegenerateInputWarning`, when no item has two ratings or every
        rating is the same.

    Examples
    --------
    Two raters agree on three of four items (the fifth, rated once, is left out):
    alpha = 1 - (n - 1) D_o / D_e = 1 - 7 x 2 / (8^2 - 2^2 - 3^2 - 3^2) = 2/3.

    >>> m = np.array([[1, 2, 3, 3, np.nan], [1, 2, 3, 2, 1.0]])
    >>> round(krippendorff_alpha(m, level="nominal")[0], 3)
    0.667
    """
    check_choice(level, ALPHA_LEVELS, "level")
    n_boot = check_n_boot(n_boot)
    check_confidence(confidence)
    data = np.asarray(matrix, dtype=float)
    if data.ndim != 2:
        raise ValueError(f"matrix must be 2-dimensional (raters x items); got shape {data.shape}")
    data = data[:, np.isfinite(data).sum(axis=0) >= 2]
    domain = np.unique(data[np.isfinite(data)])
    nan = float("nan")
    where = f" ({label})" if label else ""
    if data.shape[1] == 0 or domain.size < 2:
        reason = (
            "no item has 2 or more ratings"
            if data.shape[1] == 0
            else f"every rating has the same value ({domain[0]:g})"
        )
        warn(DegenerateInputWarning, f"Krippendorff's alpha is undefined{where}: {reason}")
        return nan, nan, nan
    estimate = _alpha(data, level, domain)
    if not (n_boot and np.isfinite(estimate)):
        return estimate, nan, nan
    n_items = data.shape[1]
    weights = bootstrap_weights(bootstrap_indices(n_items, n_boot, seed), n_items)
    replicates = alpha_resampled(data, weights, level=level, domain=domain)
    low, high = percentile_interval(replicates, confidence=confidence, label=label)
    return estimate, low, high


def _fleiss_from_counts(counts: np.ndarray) -> float:
    from statsmodels.stats.inter_rater import fleiss_kappa

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return float(fleiss_kappa(counts, method="fleiss"))


def fleiss_kappa_resampled(counts: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Fleiss' kappa of item resamples given as multiplicity weights (one row per replicate).

    ``counts`` is the items x categories table of how many raters chose each category; every
    item has the same number m of ratings. kappa = (P - Pe) / (1 - Pe) with P the mean over
    items of (sum_j n_ij^2 - m) / (m (m - 1)) and Pe = sum_j p_j^2.
    """
    m = counts.sum(axis=1)[0]
    per_item = ((counts**2).sum(axis=1) - m) / (m * (m - 1))
    total = weights.sum(axis=1)
    p_bar = (weights @ per_item) / total
    p_j = (weights @ counts) / (total[:, None] * m)
    pe = (p_j**2).sum(axis=1)
    out = np.full(weights.shape[0], np.nan)
    ok = pe < 1
    out[ok] = (p_bar[ok] - pe[ok]) / (1 - pe[ok])
    return out


def _row(
    criterion: str,
    method: str,
    estimate: float,
    *,
    ci: tuple[float, float] = (float("nan"), float("nan")),
    p_value: float = float("nan"),
    n: int,
    n_raters: int,
    n_ratings: int,
    signature: str,
) -> dict[str, Any]:
    return {
        "criterion": criterion,
        "method": method,
        "estimate": estimate,
        "ci_low": ci[0],
        "ci_high": ci[1],
        "p_value": p_value,
        "n": n,
        "n_raters": n_raters,
        "n_ratings": n_ratings,
        "signature": signature,
    }


def agreement(
    judgments: pd.DataFrame | Sequence[Judgment],
    *,
    criteria: Sequence[str] | None = None,
    statistics: Sequence[str] = AGREEMENT_STATISTICS,
    alpha_levels: Sequence[str] = ALPHA_LEVELS,
    n_boot: int = 1000,
    confidence: float = 0.95,
    seed: int = 0,
) -> pd.DataFrame:
    """Inter-rater agreement per criterion, as a tidy table.

    Parameters
    ----------
    judgments : DataFrame or sequence of Judgment
        Long format (``item_id``, ``rater_id``, ``criterion``, ``value``).
    criteria : sequence of str, optional
        Default: every criterion, sorted.
    statistics : sequence of {"alpha", "fleiss", "icc", "full_agreement"}
    alpha_levels : sequence of {"nominal", "ordinal", "interval"}
    n_boot : int
        Bootstrap replicates (items resampled) for the alpha and kappa intervals.
    confidence : float
    seed : int

    Returns
    -------
    DataFrame
        One row per criterion x statistic with ``criterion, method, estimate, ci_low,
        ci_high, p_value, n, n_raters, n_ratings, signature``. ``method`` is
        ``krippendorff_alpha_<level>``, ``fleiss_kappa``, ``icc1`` ... ``icc3k`` or
        ``percent_full_agreement``; ``n`` is the number of items the statistic used (items
        with 2 or more ratings). Undefined statistics are nan with a warning.

    Examples
    --------
    >>> import pandas as pd
    >>> long = pd.DataFrame({"item_id": list("aabbccdd"), "rater_id": ["r1", "r2"] * 4,
    ...                      "criterion": "q", "value": [1, 1, 2, 2, 3, 3, 1, 2]})
    >>> out = agreement(long, statistics=["alpha", "full_agreement"], n_boot=0)
    >>> out.set_index("method")["estimate"].round(3).to_dict()  # doctest: +NORMALIZE_WHITESPACE
    {'krippendorff_alpha_nominal': 0.667, 'krippendorff_alpha_ordinal': 0.79,
     'krippendorff_alpha_interval': 0.821, 'percent_full_agreement': 75.0}
    """
    for name in statistics:
        if name not in AGREEMENT_STATISTICS:
            raise ValueError(
                f"statistics must be among {', '.join(AGREEMENT_STATISTICS)}; got {name!r}"
            )
    for level in alpha_levels:
        if level not in ALPHA_LEVELS:
            raise ValueError(f"alpha levels must be among {', '.join(ALPHA_LEVELS)}; got {level!r}")
    n_boot = check_n_boot(n_boot)
    check_confidence(confidence)
    frame = judgments_frame(judgments)
    if frame.empty:
        raise MetaInputError("no judgments given")
    available = sorted(set(frame["criterion"]))
    chosen = list(criteria) if criteria is not None else available
    for name in chosen:
        if name not in available:
            raise ValueError(f"unknown criterion {name!r}; available: {', '.join(available)}")
    rows: list[dict[str, Any]] = []
    for criterion in chosen:
        rows.extend(
            _criterion_agreement(
                frame,
                criterion,
                statistics=statistics,
                alpha_levels=alpha_levels,
                n_boot=n_boot,
                confidence=confidence,
                seed=seed,
            )
        )
    out = pd.DataFrame(rows, columns=list(AGREEMENT_COLUMNS))
    for column in ("estimate", "ci_low", "ci_high", "p_value"):
        out[column] = out[column].astype(float)
    return out


def _criterion_agreement(
    frame: pd.DataFrame,
    criterion: str,
    *,
    statistics: Sequence[str],
    alpha_levels: Sequence[str],
    n_boot: int,
    confidence: float,
    seed: int,
) -> list[dict[str, Any]]:
    wide = reliability_matrix(frame, criterion)
    per_item = wide.notna().sum(axis=0)
    pairable = wide.loc[:, per_item >= 2]
    n_items = int(pairable.shape[1])
    n_raters = int(wide.shape[0])
    n_ratings = int(wide.notna().to_numpy().sum())
    matrix = pairable.to_numpy(dtype=float)
    domain = np.unique(matrix[np.isfinite(matrix)])
    rows: list[dict[str, Any]] = []
    common: dict[str, Any] = {"n": n_items, "n_raters": n_raters, "n_ratings": n_ratings}
    degenerate = n_items == 0 or domain.size < 2
    if degenerate:
        reason = (
            "no item has 2 or more ratings"
            if n_items == 0
            else f"every rating has the same value ({domain[0]:g})"
        )
        warn(DegenerateInputWarning, f"agreement on {criterion!r} is undefined: {reason}")

    def boot_sig(name: str, **fields: Any) -> str:
        return Signature(
            name,
            {
                **fields,
                "ci": "percentile",
                "confidence": confidence,
                "bootstrap": n_boot,
                "resample": "items",
                "seed": seed,
            },
        ).render()

    if "alpha" in statistics:
        rows += _alpha_rows(
            criterion, matrix, alpha_levels, degenerate, common, n_boot, confidence, seed, boot_sig
        )
    if "fleiss" in statistics:
        rows.append(
            _fleiss_row(criterion, pairable, degenerate, domain, n_boot, confidence, seed, boot_sig)
        )
    if "icc" in statistics:
        rows.extend(_icc_rows(criterion, frame, degenerate, n_raters, n_ratings, confidence))
    if "full_agreement" in statistics:
        rows.append(_full_agreement_row(criterion, matrix, common))
    return rows


def _alpha_rows(
    criterion: str,
    matrix: np.ndarray,
    alpha_levels: Sequence[str],
    degenerate: bool,
    common: dict[str, Any],
    n_boot: int,
    confidence: float,
    seed: int,
    boot_sig: Any,
) -> list[dict[str, Any]]:
    """Krippendorff's alpha at each level of measurement, with bootstrap intervals."""
    rows = []
    for level in alpha_levels:
        sig = boot_sig("krippendorff_alpha", level=level)
        if degenerate:
            rows.append(
                _row(criterion, f"krippendorff_alpha_{level}", np.nan, signature=sig, **common)
            )
            continue
        estimate, low, high = krippendorff_alpha(
            matrix,
            level=level,
            n_boot=n_boot,
            confidence=confidence,
            seed=seed,
            label=f"alpha {level}, {criterion}",
        )
        rows.append(
            _row(
                criterion,
                f"krippendorff_alpha_{level}",
                estimate,
                ci=(low, high),
                signature=sig,
                **common,
            )
        )
    return rows


def _full_agreement_row(
    criterion: str, matrix: np.ndarray, common: dict[str, Any]
) -> dict[str, Any]:
    """The percentage of items (with 2+ ratings) on which every rater gave the same value."""
    sig = Signature("percent_full_agreement", {"unit": "items with 2+ ratings"}).render()
    if common["n"] == 0:
        return _row(criterion, "percent_full_agreement", np.nan, signature=sig, **common)
    spread = np.nanmax(matrix, axis=0) - np.nanmin(matrix, axis=0)
    return _row(
        criterion,
        "percent_full_agreement",
        float(100.0 * np.mean(spread == 0)),
        signature=sig,
        **common,
    )


def _fleiss_row(
    criterion: str,
    pairable: pd.DataFrame,
    degenerate: bool,
    domain: np.ndarray,
    n_boot: int,
    confidence: float,
    seed: int,
    boot_sig: Any,
) -> dict[str, Any]:
    sig = boot_sig("fleiss_kappa")
    counts_per_item = pairable.notna().sum(axis=0)
    if degenerate:
        return _row(criterion, "fleiss_kappa", np.nan, signature=sig, n=0, n_raters=0, n_ratings=0)
    if domain.size > MAX_CATEGORIES:
        warn(
            DegenerateInputWarning,
            f"Fleiss' kappa for {criterion!r} is not computed: {domain.size} distinct values "
            f"(more than {MAX_CATEGORIES}) do not look like categories",
        )
        return _row(criterion, "fleiss_kappa", np.nan, signature=sig, n=0, n_raters=0, n_ratings=0)
    modal = int(counts_per_item.mode().max())
    keep = counts_per_item == modal
    if not keep.all():
        warn(
            DataCoverageWarning,
            f"Fleiss' kappa for {criterion!r} needs the same number of ratings per item: used "
            f"the {int(keep.sum())} items with {modal} ratings, left out {int((~keep).sum())}",
        )
    used = pairable.loc[:, keep].to_numpy(dtype=float)
    codes = np.searchsorted(domain, used)
    counts = np.zeros((used.shape[1], domain.size))
    for item in range(used.shape[1]):
        column = codes[:, item][np.isfinite(used[:, item])]
        counts[item] = np.bincount(column, minlength=domain.size)
    estimate = _fleiss_from_counts(counts)
    ci = (float("nan"), float("nan"))
    n = counts.shape[0]
    if n_boot and np.isfinite(estimate):
        weights = bootstrap_weights(bootstrap_indices(n, n_boot, seed), n)
        ci = percentile_interval(
            fleiss_kappa_resampled(counts, weights),
            confidence=confidence,
            label=f"Fleiss' kappa, {criterion}",
        )
    raters_used = int(pairable.loc[:, keep].notna().any(axis=1).sum())
    return _row(
        criterion,
        "fleiss_kappa",
        estimate,
        ci=ci,
        signature=sig,
        n=n,
        n_raters=raters_used,
        n_ratings=int(n * modal),
    )


def icc_intervals(
    matrix: np.ndarray, *, confidence: float = 0.95
) -> dict[str, tuple[float, float]]:
    """F-distribution confidence intervals of the six ICCs of a complete items x raters matrix.

    The formulas of McGraw & Wong (1996) as implemented in ``pingouin.intraclass_corr``
    (which reports them at 95% and rounded to two decimals); here at any confidence and at
    full precision. ICC2 uses the Satterthwaite approximation for its degrees of freedom.
    """
    from scipy.stats import f

    y = np.asarray(matrix, dtype=float)
    n, k = y.shape
    grand = y.mean()
    ss_rows = k * ((y.mean(axis=1) - grand) ** 2).sum()
    ss_cols = n * ((y.mean(axis=0) - grand) ** 2).sum()
    ss_total = ((y - grand) ** 2).sum()
    ss_error = ss_total - ss_rows - ss_cols
    msb = ss_rows / (n - 1)
    msj = ss_cols / (k - 1)
    mse = ss_error / ((n - 1) * (k - 1))
    msw = (ss_cols + ss_error) / (n * (k - 1))
    a = 1.0 - confidence
    df1, df1kd, df2kd = n - 1, n * (k - 1), (n - 1) * (k - 1)
    with np.errstate(divide="ignore", invalid="ignore"):
        f1k = msb / msw
        f3k = msb / mse
        f1l = f1k / f.ppf(1 - a / 2, df1, df1kd)
        f1u = f1k * f.ppf(1 - a / 2, df1kd, df1)
        f3l = f3k / f.ppf(1 - a / 2, df1, df2kd)
        f3u = f3k * f.ppf(1 - a / 2, df2kd, df1)
        icc2 = (msb - mse) / (msb + (k - 1) * mse + k * (msj - mse) / n)
        fj = msj / mse
        vn = df2kd * (k * icc2 * fj + n * (1 + (k - 1) * icc2) - k * icc2) ** 2
        vd = df1 * k**2 * icc2**2 * fj**2 + (n * (1 + (k - 1) * icc2) - k * icc2) ** 2
        v = vn / vd
        f2u = f.ppf(1 - a / 2, n - 1, v)
        f2l = f.ppf(1 - a / 2, v, n - 1)
        l2 = n * (msb - f2u * mse) / (f2u * (k * msj + (k * n - k - n) * mse) + n * msb)
        u2 = n * (f2l * msb - mse) / (k * msj + (k * n - k - n) * mse + n * f2l * msb)
        out = {
            "icc1": ((f1l - 1) / (f1l + k - 1), (f1u - 1) / (f1u + k - 1)),
            "icc2": (l2, u2),
            "icc3": ((f3l - 1) / (f3l + k - 1), (f3u - 1) / (f3u + k - 1)),
            "icc1k": (1 - 1 / f1l, 1 - 1 / f1u),
            "icc2k": (l2 * k / (1 + l2 * (k - 1)), u2 * k / (1 + u2 * (k - 1))),
            "icc3k": (1 - 1 / f3l, 1 - 1 / f3u),
        }
    return {key: (float(lo), float(hi)) for key, (lo, hi) in out.items()}


def _icc_rows(
    criterion: str,
    frame: pd.DataFrame,
    degenerate: bool,
    n_raters: int,
    n_ratings: int,
    confidence: float,
) -> list[dict[str, Any]]:
    import pingouin

    sig = Signature("icc", {"anova": "two-way", "ci": "F", "confidence": confidence}).render()
    sub = frame[frame["criterion"] == criterion]
    sub = sub.groupby(["item_id", "rater_id"], as_index=False)["value"].mean()
    wide = sub.pivot(index="item_id", columns="rater_id", values="value")
    complete = wide.dropna(axis=0, how="any")
    n = int(complete.shape[0])
    nan_rows = [
        _row(criterion, name, np.nan, signature=sig, n=n, n_raters=n_raters, n_ratings=n_ratings)
        for name in ICC_TYPES.values()
    ]
    if degenerate:
        return nan_rows
    if n < len(wide):
        warn(
            DataCoverageWarning,
            f"ICC for {criterion!r} needs every item rated by the same raters: used the {n} of "
            f"{len(wide)} items rated by all {wide.shape[1]} raters",
        )
    if n < 3 or wide.shape[1] < 2 or np.ptp(complete.to_numpy()) == 0:
        warn(
            DegenerateInputWarning,
            f"ICC for {criterion!r} is undefined: {n} complete item(s) and {wide.shape[1]} raters",
        )
        return nan_rows
    long = complete.reset_index().melt(id_vars="item_id", var_name="rater_id", value_name="value")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        table = pingouin.intraclass_corr(
            data=long, targets="item_id", raters="rater_id", ratings="value"
        )
    intervals = icc_intervals(complete.to_numpy(dtype=float), confidence=confidence)
    rows = []
    for _, record in table.iterrows():
        low, high = intervals[ICC_TYPES[str(record["Type"])]]
        rows.append(
            _row(
                criterion,
                ICC_TYPES[str(record["Type"])],
                float(record["ICC"]),
                ci=(low, high),
                p_value=float(record["pval"]),
                signature=sig,
                n=n,
                n_raters=int(complete.shape[1]),
                n_ratings=int(complete.size),
            )
        )
    return rows


def describe_ratings(judgments: pd.DataFrame | Sequence[Judgment]) -> pd.DataFrame:
    """Mean and sd of the ratings per criterion (over all ratings), with the counts.

    Returns
    -------
    DataFrame
        ``criterion, mean, sd, n_items, n_raters, n_ratings``.
    """
    frame = judgments_frame(judgments)
    grouped = frame.groupby("criterion")
    out = pd.DataFrame(
        {
            "mean": grouped["value"].mean(),
            "sd": grouped["value"].std(ddof=1),
            "n_items": grouped["item_id"].nunique(),
            "n_raters": grouped["rater_id"].nunique(),
            "n_ratings": grouped["value"].count(),
        }
    )
    return out.reset_index()


def human_ceiling(
    judgments: pd.DataFrame | Sequence[Judgment],
    *,
    items: pd.DataFrame | None = None,
    criteria: Sequence[str] | None = None,
    levels: Sequence[str] = ("pooled",),
    methods: Sequence[str] = ("pearson", "spearman", "kendall"),
    kendall_variant: str = "b",
    min_items: int = 10,
    n_boot: int = 1000,
    confidence: float = 0.95,
    seed: int = 0,
    settings: CorrelationSettings | None = None,
    aggregation: str = "mean",
) -> pd.DataFrame:
    """Each rater against the mean of the other raters, at the metric levels.

    Parameters
    ----------
    judgments : DataFrame or sequence of Judgment
    items : DataFrame, optional
        Index ``item_id`` with ``system`` and ``prompt_id`` columns (``MetaTable.items``);
        needed for the story and system levels.
    criteria : sequence of str, optional
    levels, methods, kendall_variant, n_boot, confidence, seed, settings
        As in :func:`~storyeval.meta.correlate`.
    min_items : int
        Raters who share fewer items with the others are skipped (counted in a warning).
    aggregation : {"mean", "mace", "dawid-skene", "ordinal"}
        What each rater is compared with: the mean of the others' ratings, or the others'
        label under a competence model fitted without the rater
        (:func:`storyeval.meta.data.model_based_labels`), its posterior uncertainty carried
        into the bootstrap (each replicate draws the labels; ``labels:posterior-draws`` in
        the signature), so a ceiling and a metric's correlation against the same labels
        compare like with like.

    Returns
    -------
    DataFrame
        The correlation columns with ``rater`` and ``criterion`` (``metric`` is
        ``rater:<id>``), one row per rater x criterion x level x method, followed by one
        summary row per criterion x level x method with ``rater`` = ``mean``: the mean of
        the raters' estimates (``n`` = the number of raters averaged; no interval).
    """
    frame = judgments_frame(judgments)
    if frame.empty:
        raise MetaInputError("no judgments given")
    correlation = settings_from(
        settings,
        levels=levels,
        methods=methods,
        kendall_variant=kendall_variant,
        n_boot=n_boot,
        confidence=confidence,
        seed=seed,
    )
    levels, methods = correlation.levels, correlation.methods
    available = sorted(set(frame["criterion"]))
    chosen = list(criteria) if criteria is not None else available
    for name in chosen:
        if name not in available:
            raise ValueError(f"unknown criterion {name!r}; available: {', '.join(available)}")
    rows: list[dict[str, Any]] = []
    skipped_raters: set[str] = set()
    for criterion in chosen:
        wide = reliability_matrix(frame, criterion)
        if wide.shape[0] < 2:
            warn(
                DegenerateInputWarning,
                f"the human ceiling for {criterion!r} needs 2 or more raters; found {wide.shape[0]}",
            )
            continue
        prompts, systems = _item_groups(items, list(wide.columns), levels)
        for rater, mine, rest, draws in _leave_one_out(
            wide, frame, criterion, aggregation, correlation.n_boot, correlation.seed + LABEL_SEED
        ):
            if int((np.isfinite(mine) & np.isfinite(rest)).sum()) < min_items:
                skipped_raters.add(str(rater))
                continue
            for level in levels:
                for method in methods:
                    row = correlation.row(
                        mine,
                        rest,
                        level=level,
                        method=method,
                        prompts=prompts,
                        systems=systems,
                        label=f"rater {rater} ~ others, {criterion}, {level}, {method}",
                        aggregation=_ceiling_aggregation(aggregation),
                        y_draws=draws,
                    )
                    rater_columns = {"rater": str(rater), "metric": f"rater:{rater}"}
                    rows.append(
                        {**rater_columns, "criterion": criterion, **row, "metric_signature": ""}
                    )
    if skipped_raters:
        warn(
            DataCoverageWarning,
            f"{len(skipped_raters)} rater(s) share fewer than {min_items} items with the other "
            "raters and were left out of the human ceiling",
        )
    if not rows:
        warn(DegenerateInputWarning, "the human ceiling is undefined: no rater qualifies")
        return tidy_correlations([], extra=("rater",))
    per_rater = tidy_correlations(rows, extra=("rater",))
    return pd.concat([per_rater, _ceiling_summary(per_rater)], ignore_index=True)


def _item_groups(
    items: pd.DataFrame | None, item_ids: list[str], levels: Sequence[str]
) -> tuple[np.ndarray | None, np.ndarray | None]:
    """Prompt and system of each item, checked against the levels that need them."""
    prompts = systems = None
    if items is not None:
        info = items.reindex(item_ids)
        prompts = info["prompt_id"].to_numpy(dtype=object)
        systems = info["system"].to_numpy(dtype=object)
    if "story" in levels and (prompts is None or all(p is None for p in prompts)):
        raise MetaInputError("the story level of the human ceiling needs prompt ids")
    if "system" in levels and (systems is None or all(s is None for s in systems)):
        raise MetaInputError("the system level of the human ceiling needs systems")
    return prompts, systems


def _ceiling_aggregation(aggregation: str) -> str:
    if aggregation == "mean":
        return "leave-one-rater-out"
    return f"leave-one-rater-out-{aggregation}"


def _leave_one_out(
    wide: pd.DataFrame,
    frame: pd.DataFrame,
    criterion: str,
    aggregation: str,
    n_boot: int,
    seed: int,
) -> list[tuple[Any, np.ndarray, np.ndarray, np.ndarray | None]]:
    """Each rater's ratings beside the other raters' aggregate per item: their mean, or their
    label under a competence model fitted without the rater, with posterior draws."""
    from storyeval.meta.data import MODEL_AGGREGATIONS, model_based_labels, posterior_draws

    if aggregation not in ("mean", *MODEL_AGGREGATIONS):
        raise ValueError(
            f"aggregation must be mean or one of {', '.join(MODEL_AGGREGATIONS)}; got {aggregation!r}"
        )
    values = wide.to_numpy(dtype=float)
    items = [str(i) for i in wide.columns]
    part = frame[frame["criterion"] == criterion]
    result: list[tuple[Any, np.ndarray, np.ndarray, np.ndarray | None]] = []
    for index, rater in enumerate(wide.index):
        if aggregation == "mean":
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                rest = np.nanmean(np.delete(values, index, axis=0), axis=0)
            result.append((rater, values[index], rest, None))
            continue
        others = part[part["rater_id"] != str(rater)]
        labels, posteriors = model_based_labels(others, aggregation)
        rest = labels[criterion].reindex(items).to_numpy(dtype=float)
        draws = posterior_draws(posteriors[criterion], items, n_boot, seed) if n_boot else None
        result.append((rater, values[index], rest, draws))
    return result


def _ceiling_summary(per_rater: pd.DataFrame) -> pd.DataFrame:
    """One row per criterion x level x method: the mean of the raters' estimates."""
    rows = []
    for (criterion, level, method), group in per_rater.groupby(
        ["criterion", "level", "method"], sort=False
    ):
        finite = group["estimate"].dropna()
        signature = Signature(
            "human_ceiling", {"method": method, "level": level, "summary": "mean over raters"}
        )
        rows.append(
            {
                "rater": "mean",
                "metric": "human ceiling",
                "criterion": criterion,
                "level": level,
                "method": method,
                "estimate": float(finite.mean()) if len(finite) else float("nan"),
                "p_value": float("nan"),
                "ci_low": float("nan"),
                "ci_high": float("nan"),
                "n": len(finite),
                "n_items": int(group["n_items"].max()),
                "n_groups": pd.NA,
                "skipped": pd.NA,
                "resample": "none",
                "signature": signature.render(),
                "metric_signature": "",
            }
        )
    return tidy_correlations(rows, extra=("rater",))


__all__ = [
    "AGREEMENT_COLUMNS",
    "ALPHA_LEVELS",
    "LEVELS",
    "agreement",
    "describe_ratings",
    "fleiss_kappa_resampled",
    "human_ceiling",
    "krippendorff_alpha",
    "reliability_matrix",
]
