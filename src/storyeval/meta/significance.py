"""Comparing metrics: the Williams test and multiple-comparison corrections.

Two metrics scored on the same items, each correlated with the same human ratings, give two
*dependent* correlations that share a variable; comparing them with a test for independent
correlations (or by eye) overstates or understates the difference. The Williams (1959) test,
in the form recommended by Steiger (1980) and used for metric evaluation by Graham & Baldwin
(2014) (and by Clark (2021), chapter 5), accounts for the correlation between the two metrics.

References
----------
Williams, E. J. (1959). *Regression Analysis*. Wiley.
Steiger, J. H. (1980). Tests for comparing elements of a correlation matrix. *Psychological
Bulletin* 87(2), 245-251 (equation 7).
Graham, Y. & Baldwin, T. (2014). Testing for significance of increased correlation with human
judgment. *EMNLP*, 172-176.
Benjamini, Y. & Hochberg, Y. (1995). Controlling the false discovery rate. *JRSS B* 57(1).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import pandas as pd

from storyeval.base.errors import DegenerateInputWarning, warn
from storyeval.base.signature import Signature
from storyeval.base.stats import check_method, check_variant, correlation
from storyeval.base.validation import check_choice
from storyeval.meta.correlation import check_level
from storyeval.meta.data import MetaTable

ALTERNATIVES: tuple[str, ...] = ("greater", "two-sided", "less")
CORRECTIONS: dict[str, str] = {"bh": "fdr_bh", "bonferroni": "bonferroni", "holm": "holm"}


def williams_test(
    r12: float, r13: float, r23: float, n: int, *, alternative: str = "greater"
) -> dict[str, float]:
    """Williams' t test that corr(1, 2) differs from corr(1, 3), variable 1 shared.

    With variable 1 the human ratings and 2, 3 two metrics:

    t = (r12 - r13) sqrt((n - 1)(1 + r23)) /
        sqrt(2 K (n - 1)/(n - 3) + ((r12 + r13)/2)^2 (1 - r23)^3),
    K = 1 - r12^2 - r13^2 - r23^2 + 2 r12 r13 r23,

    which follows Student's t with n - 3 degrees of freedom.

    Parameters
    ----------
    r12 : float
        Correlation of the human variable with metric A.
    r13 : float
        Correlation of the human variable with metric B.
    r23 : float
        Correlation of metric A with metric B (on the same items).
    n : int
        Number of items (at least 4).
    alternative : {"greater", "two-sided", "less"}
        ``greater`` (the default, as in Graham & Baldwin's script): A correlates more
        strongly than B.

    Returns
    -------
    dict
        ``statistic`` (t), ``df`` (n - 3), ``p_value``, ``estimate`` (r12 - r13).

    Examples
    --------
    A worked example (n = 103, r12 = .4, r13 = .5, r23 = .1; Steiger 1980 case A as in the
    documentation of ``psych::r.test``): t = -0.89.

    >>> out = williams_test(0.4, 0.5, 0.1, 103, alternative="two-sided")
    >>> round(out["statistic"], 2), out["df"]
    (-0.89, 100.0)
    """
    from scipy import stats

    check_choice(alternative, ALTERNATIVES, "alternative")
    nan = {"statistic": math.nan, "df": math.nan, "p_value": math.nan, "estimate": math.nan}
    values = (r12, r13, r23)
    if not all(isinstance(v, int | float) and math.isfinite(v) for v in values):
        warn(DegenerateInputWarning, "Williams test is undefined: a correlation is nan")
        return nan
    if any(abs(v) > 1 for v in values):
        raise ValueError(f"correlations must lie in [-1, 1]; got r12={r12}, r13={r13}, r23={r23}")
    if n < 4:
        warn(DegenerateInputWarning, f"Williams test is undefined for n = {n}: need n >= 4")
        return nan
    k = 1 - r12**2 - r13**2 - r23**2 + 2 * r12 * r13 * r23
    denominator = 2 * k * (n - 1) / (n - 3) + ((r12 + r13) ** 2 / 4) * (1 - r23) ** 3
    if denominator <= 0 or r23 <= -1:
        warn(
            DegenerateInputWarning,
            "Williams test is undefined: the correlation matrix is singular "
            f"(r12={r12:.4g}, r13={r13:.4g}, r23={r23:.4g})",
        )
        return nan
    t = (r12 - r13) * math.sqrt((n - 1) * (1 + r23)) / math.sqrt(denominator)
    df = float(n - 3)
    if alternative == "greater":
        p = float(stats.t.sf(t, df))
    elif alternative == "less":
        p = float(stats.t.cdf(t, df))
    else:
        p = float(2 * stats.t.sf(abs(t), df))
    return {"statistic": float(t), "df": df, "p_value": p, "estimate": float(r12 - r13)}


def adjust_pvalues(
    table: pd.DataFrame,
    *,
    method: str = "bh",
    column: str = "p_value",
    by: Sequence[str] | None = None,
    alpha: float = 0.05,
) -> pd.DataFrame:
    """Add multiple-comparison-corrected p-values to a table (statsmodels ``multipletests``).

    Parameters
    ----------
    table : DataFrame
        Any table with a p-value column (e.g. from :func:`~storyeval.meta.correlate`).
    method : {"bh", "bonferroni", "holm"}
        Benjamini-Hochberg false discovery rate, Bonferroni or Holm family-wise error.
    column : str
        The p-value column.
    by : sequence of str, optional
        Correct separately within each group of these columns (e.g. ``["level", "method"]``);
        by default the whole table is one family.
    alpha : float
        Level for the ``reject`` column.

    Returns
    -------
    DataFrame
        A copy with ``p_adjusted``, ``reject`` (p_adjusted < alpha) and ``correction``
        columns. Rows whose p-value is nan stay nan and are not counted in the family.

    Examples
    --------
    >>> import pandas as pd
    >>> out = adjust_pvalues(pd.DataFrame({"p_value": [0.01, 0.04, 0.03, 0.005]}))
    >>> out["p_adjusted"].round(4).tolist()
    [0.02, 0.04, 0.04, 0.02]
    """
    from statsmodels.stats.multitest import multipletests

    check_choice(method, CORRECTIONS, "method")
    if column not in table.columns:
        raise ValueError(f"the table has no column {column!r}")
    out = table.copy()
    out["p_adjusted"] = np.nan
    out["reject"] = pd.array([pd.NA] * len(out), dtype="boolean")
    groups = [out.index] if not by else [g.index for _, g in out.groupby(list(by), dropna=False)]
    for index in groups:
        p = out.loc[index, column].astype(float)
        finite = p[np.isfinite(p)]
        if finite.empty:
            continue
        reject, adjusted, _, _ = multipletests(
            finite.to_numpy(), alpha=alpha, method=CORRECTIONS[method]
        )
        out.loc[finite.index, "p_adjusted"] = adjusted
        out.loc[finite.index, "reject"] = reject
    family = "all" if not by else "+".join(by)
    out["correction"] = f"{method}|family:{family}|alpha:{alpha}"
    return out


def _comparison_inputs(
    table: MetaTable, criterion: str | None, metrics: Sequence[str] | None, level: str
) -> tuple[list[str], list[str]]:
    """The metrics and criteria to compare, checked against the table and the level."""
    if level in ("story", "within_system"):
        raise ValueError(
            "the Williams test compares two correlations over the same units; the story "
            "and within-system levels average per-group correlations; use level 'pooled' or "
            "'system'"
        )
    names = list(metrics) if metrics is not None else table.metric_names
    if len(names) < 2:
        raise ValueError(f"comparing metrics needs at least two; got {len(names)}")
    for name in names:
        if name not in table.metrics.columns:
            raise ValueError(f"unknown metric {name!r}; available: {', '.join(table.metric_names)}")
    criteria = [criterion] if criterion is not None else table.criteria
    for name in criteria:
        if name not in table.human.columns:
            raise ValueError(f"unknown criterion {name!r}; available: {', '.join(table.criteria)}")
    if level == "system" and not table.has_systems:
        from storyeval.meta.data import MetaInputError

        raise MetaInputError("the system level needs the system of every item")
    return names, criteria


def _paired_values(
    table: MetaTable, human: np.ndarray, a: str, b: str, level: str
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The human scores and the two metrics' values where all three are defined (per-system
    means at the system level)."""
    xa = table.metrics[a].to_numpy(dtype=float)
    xb = table.metrics[b].to_numpy(dtype=float)
    keep = np.isfinite(human) & np.isfinite(xa) & np.isfinite(xb)
    h, va, vb = human[keep], xa[keep], xb[keep]
    if level == "system":
        systems = table.items["system"].to_numpy(dtype=object)[keep]
        frame = pd.DataFrame({"s": systems, "h": h, "a": va, "b": vb}).dropna()
        means = frame.groupby("s")[["h", "a", "b"]].mean()
        h, va, vb = (means[c].to_numpy() for c in ("h", "a", "b"))
    return h, va, vb


def compare_metrics(
    table: MetaTable,
    *,
    criterion: str | None = None,
    metrics: Sequence[str] | None = None,
    method: str = "spearman",
    level: str = "pooled",
    kendall_variant: str = "b",
    alternative: str = "greater",
    correction: str | None = "bh",
    lower_is_better: Iterable[str] = (),
) -> pd.DataFrame:
    """Williams tests for every ordered pair of metrics against each human criterion.

    For each criterion and each pair (A, B), on the items where A, B and the rating are all
    defined: r_A = corr(human, A), r_B = corr(human, B), r_AB = corr(A, B), then
    :func:`williams_test`. At the ``system`` level the correlations are over per-system means
    and n is the number of systems. The story level averages per-prompt correlations, which
    the Williams test does not cover, so it is refused.

    Each metric is first **oriented** so that higher is better, as Graham and Baldwin (2014)
    compare metrics: one where lower is better (``lower_is_better``, else the metric
    registry's declaration: perplexity, repetition rates...) is negated, so a metric that
    falls as people's ratings rise correlates positively and is not judged worse for its sign.
    A metric that declares no direction (``sentence_length``) is compared as it is.

    Returns
    -------
    DataFrame
        One row per criterion x ordered pair: ``criterion, metric_a, metric_b, level,
        method, r_a, r_b, r_ab`` (of the oriented metrics), ``estimate`` (r_a - r_b),
        ``statistic``, ``df``, ``p_value``, ``n``, ``alternative``, ``direction_a``,
        ``direction_b`` (``higher``, ``lower``: negated, or ``undeclared``), ``signature``,
        plus ``p_adjusted``, ``reject`` and ``correction`` (per criterion) unless
        ``correction`` is None.
    """
    if method in ("acc_eq", "spa"):
        return _compare_acc_eq(
            table, criterion, metrics, method, level, correction, lower_is_better
        )
    check_method(method)
    check_variant(kendall_variant)
    check_level(level)
    names, criteria = _comparison_inputs(table, criterion, metrics, level)
    directions = metric_directions(names, lower_is_better)
    signature = Signature(
        "williams",
        {
            "method": method,
            **({"tau": kendall_variant} if method == "kendall" else {}),
            "level": level,
            "alternative": alternative,
            "raters": table.aggregation,
            "oriented": "yes",
        },
    ).render()
    rows: list[dict[str, Any]] = []
    for crit in criteria:
        human = table.human[crit].to_numpy(dtype=float)
        for a in names:
            for b in names:
                if a == b:
                    continue
                label = f"{a} vs {b} ~ {crit}, {level}"
                h, va, vb = _paired_values(table, human, a, b, level)
                va = -va if directions[a] == "lower" else va
                vb = -vb if directions[b] == "lower" else vb
                kw: dict[str, Any] = {
                    "method": method,
                    "kendall_variant": kendall_variant,
                    "label": label,
                }
                r_a, _, n = correlation(h, va, **kw)
                r_b, _, _ = correlation(h, vb, **kw)
                r_ab, _, _ = correlation(va, vb, **kw)
                test = williams_test(r_a, r_b, r_ab, n, alternative=alternative)
                rows.append(
                    {
                        "criterion": crit,
                        "metric_a": a,
                        "metric_b": b,
                        "level": level,
                        "method": method,
                        "r_a": r_a,
                        "r_b": r_b,
                        "r_ab": r_ab,
                        "estimate": test["estimate"],
                        "statistic": test["statistic"],
                        "df": test["df"],
                        "p_value": test["p_value"],
                        "n": n,
                        "alternative": alternative,
                        "direction_a": directions[a],
                        "direction_b": directions[b],
                        "signature": signature,
                    }
                )
    out = pd.DataFrame(rows)
    if correction is not None and not out.empty:
        out = adjust_pvalues(out, method=correction, by=["criterion"])
    return out


def _compare_acc_eq(
    table: MetaTable,
    criterion: str | None,
    metrics: Sequence[str] | None,
    method: str,
    level: str,
    correction: str | None,
    lower_is_better: Iterable[str],
    n_perm: int = 1000,
) -> pd.DataFrame:
    """:func:`compare_metrics` for tie-calibrated pairwise accuracy: a paired permutation
    test per ordered pair of metrics (:func:`~storyeval.meta.tie_accuracy.acc_eq_test`)."""
    from storyeval.meta.tie_accuracy import acc_eq_test

    if method == "spa":
        raise ValueError(
            "compare tests acc_eq (or a correlation); soft pairwise accuracy has no test here"
        )
    names, criteria = _comparison_inputs(table, criterion, metrics, "pooled")
    directions = metric_directions(names, lower_is_better)
    prompts = table.items["prompt_id"].to_numpy(dtype=object) if table.has_prompts else None
    systems = table.items["system"].to_numpy(dtype=object) if table.has_systems else None
    signature = Signature(
        "acc_eq_permutation",
        {"level": level, "ties": "calibrated", "standardised": "yes", "permutations": n_perm,
         "swap": "prompts" if prompts is not None else "items", "alternative": "greater",
         "raters": table.aggregation, "oriented": "yes"},
    ).render()  # fmt: skip
    rows = []
    for crit in criteria:
        human = table.human[crit].to_numpy(dtype=float)
        for a in names:
            for b in (n for n in names if n != a):
                va, vb = (
                    table.metrics[m].to_numpy(dtype=float) * (-1 if directions[m] == "lower" else 1)
                    for m in (a, b)
                )
                test = acc_eq_test(
                    va, vb, human, level=level, prompts=prompts, systems=systems, n_perm=n_perm
                )
                rows.append({"criterion": crit, "metric_a": a, "metric_b": b, "level": level, "method": method,
                             **test, "statistic": test["estimate"], "alternative": "greater",
                             "direction_a": directions[a], "direction_b": directions[b], "signature": signature})  # fmt: skip
    out = pd.DataFrame(rows)
    if correction is not None and not out.empty:
        out = adjust_pvalues(out, method=correction, by=["criterion"])
    return out


def metric_directions(names: Sequence[str], lower_is_better: Iterable[str] = ()) -> dict[str, str]:
    """Each metric's direction for comparisons: ``lower`` when named in ``lower_is_better``
    or declared so in the metric registry, ``higher`` when declared so, else ``undeclared``
    (a metric of no direction, or unknown to the registry: taken as it is).

    >>> metric_directions(["perplexity", "bleu", "sentence_length", "mine"])
    {'perplexity': 'lower', 'bleu': 'higher', 'sentence_length': 'undeclared', 'mine': 'undeclared'}
    """
    from storyeval.meta.discrimination import registered_direction

    lower = set(lower_is_better)
    directions = {}
    for name in names:
        declared = False if name in lower else registered_direction(name)
        directions[name] = {True: "higher", False: "lower", None: "undeclared"}[declared]
    return directions
