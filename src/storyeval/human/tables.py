"""Building blocks of the analysis of human judgments in the long format: the judgment frame,
quality filtering, summaries, Krippendorff's alpha and the tests between conditions. Every
function here works for any protocol; :mod:`storyeval.human.analysis` puts them together with
what each protocol adds.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping, Sequence
from itertools import combinations
from typing import Any

import numpy as np

from storyeval.base.errors import StoryevalError
from storyeval.base.stats import mean_interval
from storyeval.corpus import Judgment

KARPINSKA_MIN_MEDIAN_TIME_S = 40.0
"""The median time per item below which Karpinska et al. (Karpinska et al. 2021) removed raters."""

TEST_COLUMNS = (
    "analysis",
    "criterion",
    "comparison",
    "estimate",
    "statistic",
    "df",
    "df2",
    "p_value",
    "ci_low",
    "ci_high",
    "effect_size",
    "n",
    "method",
)
"""The columns of ``tests.csv``."""


class AnalysisError(StoryevalError, ValueError):
    """The judgments cannot be analysed as asked (e.g. every rater was filtered out)."""


# ----------------------------------------------------------------------------- the frame


def judgments_table(
    judgments: Sequence[Judgment], *, conditions: Mapping[str, str] | None = None
) -> Any:
    """A DataFrame with one row per judgment and every extra field as a column.

    Adds ``protocol`` (``likert`` when absent), ``check`` / ``check_passed`` (False when
    absent), and ``page`` (the unit a time applies to: the server's page id, else the item).
    ``conditions`` maps item ids to a condition (e.g. the system of each story) for judgments
    that have none.
    """
    import pandas as pd

    if not judgments:
        raise AnalysisError("there are no judgments to analyse")
    frame = pd.DataFrame([j.to_dict() for j in judgments])
    for column in ("time_s", "study", "condition", "protocol"):
        if column not in frame.columns:
            frame[column] = None
    frame["protocol"] = frame["protocol"].fillna("likert").astype(str)
    if conditions:
        frame["condition"] = frame["condition"].fillna(frame["item_id"].map(dict(conditions)))
    frame["condition"] = frame["condition"].fillna("(none)").astype(str)
    frame["study"] = frame["study"].fillna("(none)").astype(str)
    frame["check"] = frame["check"].fillna(False).astype(bool) if "check" in frame else False
    if "check_passed" in frame:
        frame["check_passed"] = frame["check_passed"].fillna(True).astype(bool)
    else:
        frame["check_passed"] = True
    if "page" in frame:
        frame["page"] = frame["page"].where(frame["page"].notna(), frame["item_id"]).astype(str)
    else:
        frame["page"] = frame["item_id"].astype(str)
    frame["time_s"] = pd.to_numeric(frame["time_s"], errors="coerce")
    frame["value"] = frame["value"].astype(float)
    return frame


def group_label(frame: Any) -> Any:
    """A readable label of a group key (a tuple joined with " / ")."""
    if frame["study"].nunique() > 1:
        return frame["study"] + "/" + frame["condition"]
    return frame["condition"]


# ----------------------------------------------------------------------------- filtering


def rater_times(frame: Any) -> Any:
    """Per rater: pages judged, median time per page, median gap between submissions.

    A page counts once however many criteria it asked (its time is the same on each row).
    """
    import pandas as pd

    items = frame[~frame["check"]]
    per_page = items.groupby(["rater_id", "study", "page"], sort=False).agg(
        time_s=("time_s", "first"),
        gap_s=("gap_s", "first") if "gap_s" in items else ("time_s", "first"),
    )
    if "gap_s" not in items:
        per_page["gap_s"] = np.nan
    per_page = per_page.reset_index()
    table = per_page.groupby("rater_id").agg(
        pages=("page", "size"),
        timed_pages=("time_s", "count"),
        median_time_s=("time_s", "median"),
        median_gap_s=("gap_s", lambda s: pd.to_numeric(s, errors="coerce").median()),
    )
    checks = frame[frame["check"]].groupby(["rater_id", "page"])["check_passed"].all()
    failed = (~checks).groupby(level="rater_id").sum()
    table["failed_checks"] = failed.reindex(table.index).fillna(0).astype(int)
    all_raters = pd.Index(sorted(frame["rater_id"].unique()), name="rater_id")
    table = table.reindex(all_raters)
    table["pages"] = table["pages"].fillna(0).astype(int)
    table["timed_pages"] = table["timed_pages"].fillna(0).astype(int)
    table["failed_checks"] = table["failed_checks"].fillna(0).astype(int)
    return table.reset_index()


def filter_raters(
    frame: Any,
    *,
    min_median_time_s: float | None = None,
    exclude_failed_checks: bool = True,
) -> tuple[Any, Any, Any]:
    """Apply the quality filters; return the kept judgments (check rows removed), the
    per-step report and the per-rater table.

    The report has one row per step: ``step``, ``threshold``, ``raters_before``,
    ``raters_removed``, ``judgments_before``, ``judgments_removed``, ``raters_after``,
    ``judgments_after``; the time step also gives ``raters_without_time`` (kept, since their
    time is unknown).
    """
    import pandas as pd

    if min_median_time_s is not None and (
        not math.isfinite(min_median_time_s) or min_median_time_s < 0
    ):
        raise ValueError(f"min_median_time_s must be >= 0 or None; got {min_median_time_s}")
    raters = rater_times(frame)
    raters["kept"] = True
    raters["reason"] = ""
    steps = []
    current = frame

    def record(
        step: str, threshold: Any, removed: set[str], extra: dict[str, Any] | None = None
    ) -> None:
        nonlocal current
        body = current[~current["check"]]
        before_raters = body["rater_id"].nunique()
        before_rows = len(body)
        current = current[~current["rater_id"].isin(removed)]
        after = current[~current["check"]]
        steps.append(
            {
                "step": step,
                "threshold": threshold,
                "raters_before": before_raters,
                "raters_removed": before_raters - after["rater_id"].nunique(),
                "judgments_before": before_rows,
                "judgments_removed": before_rows - len(after),
                "raters_after": after["rater_id"].nunique(),
                "judgments_after": len(after),
                **(extra or {}),
            }
        )

    if exclude_failed_checks:
        failed = set(raters.loc[raters["failed_checks"] > 0, "rater_id"])
        raters.loc[raters["rater_id"].isin(failed), ["kept", "reason"]] = [
            False,
            "failed attention check",
        ]
        record("attention checks", "all passed", failed)
    else:
        record("attention checks", "disabled", set())
    if min_median_time_s is None or min_median_time_s == 0:
        known = raters["median_time_s"].notna()
        below = int(
            (known & (raters["median_time_s"] < KARPINSKA_MIN_MEDIAN_TIME_S) & raters["kept"]).sum()
        )
        note = (
            f"not applied; {below} rater(s) have a median time per item below "
            f"{KARPINSKA_MIN_MEDIAN_TIME_S:g} s, the threshold of Karpinska et al. (2021)"
        )
        record("median time per item", "disabled", set(), {"note": note})
    else:
        known = raters["median_time_s"].notna()
        fast = raters["median_time_s"] < min_median_time_s
        too_fast = set(raters.loc[known & fast & raters["kept"], "rater_id"])
        raters.loc[raters["rater_id"].isin(too_fast), ["kept", "reason"]] = [
            False,
            f"median time per item < {min_median_time_s:g} s",
        ]
        untimed = int((~known & raters["kept"] & (raters["pages"] > 0)).sum())
        record(
            "median time per item",
            min_median_time_s,
            too_fast,
            {"raters_without_time": untimed, "note": f"{untimed} rater(s) without times kept"},
        )
    kept = current[~current["check"]].copy()
    report = pd.DataFrame(steps)
    return kept, report, raters


# ----------------------------------------------------------------------------- statistics


def summarize(frame: Any) -> Any:
    """Per criterion and condition: ``n``, ``mean``, ``sd``, ``sem``, ``ci_low``, ``ci_high``
    (95% t interval of the mean), ``median``, ``n_items``, ``n_raters``, ``method``."""
    import pandas as pd

    rows = []
    frame = frame.assign(group=group_label(frame))
    for (criterion, group), part in frame.groupby(["criterion", "group"], sort=True):
        values = part["value"].to_numpy(dtype=float)
        mean, sd, low, high = mean_interval(values)
        rows.append(
            {
                "criterion": criterion,
                "condition": group,
                "protocol": part["protocol"].iloc[0],
                "n": len(values),
                "mean": mean,
                "sd": sd,
                "sem": sd / math.sqrt(len(values)),
                "ci_low": low,
                "ci_high": high,
                "median": float(np.median(values)),
                "n_items": part["item_id"].nunique(),
                "n_raters": part["rater_id"].nunique(),
                "method": "mean (95% t interval)",
            }
        )
    return pd.DataFrame(rows)


def _reliability_matrix(frame: Any) -> Any:
    """Raters x items matrix of ``value`` (a rater's first rating of an item)."""
    return frame.pivot_table(index="rater_id", columns="item_id", values="value", aggfunc="first")


def krippendorff_alpha(frame: Any, *, level: str) -> tuple[float, int, int]:
    """Krippendorff's alpha of ``value`` over ``rater_id`` x ``item_id``.

    Computed by :func:`storyeval.meta.agreement.krippendorff_alpha`. Returns ``(alpha,
    n_items_pairable, n_raters)``; alpha is NaN (with a
    :class:`~storyeval.meta.DegenerateInputWarning`) when no item has two ratings or the values
    never vary.
    """
    estimate, n_items, n_raters, _, _ = alpha_with_interval(frame, level=level, n_boot=0, seed=0)
    return estimate, n_items, n_raters


def alpha_with_interval(
    frame: Any, *, level: str, n_boot: int, seed: int
) -> tuple[float, int, int, float, float]:
    """Krippendorff's alpha of one criterion with a bootstrap interval, as a table row."""
    from storyeval.meta.agreement import krippendorff_alpha as alpha

    pivot = _reliability_matrix(frame)
    pairable = int((pivot.notna().sum(axis=0) >= 2).sum())
    estimate, low, high = alpha(pivot.to_numpy(dtype=float), level=level, n_boot=n_boot, seed=seed)
    return estimate, pairable, int(pivot.shape[0]), low, high


def percent_agreement(frame: Any) -> float:
    """Percentage (0-100) of the items with two or more ratings on which every rater gave the
    same value."""
    groups = frame.groupby("item_id")["value"]
    multi = groups.count() >= 2
    if not multi.any():
        return math.nan
    same = groups.nunique()[multi] == 1
    return 100.0 * float(same.mean())


def _order_groups(groups: Sequence[str]) -> list[str]:
    return sorted(groups, key=lambda g: (not g.endswith("human"), g))


def _cohens_d(a: np.ndarray, b: np.ndarray) -> float:
    na, nb = len(a), len(b)
    if na < 2 or nb < 2:
        return math.nan
    pooled = math.sqrt(
        ((na - 1) * np.var(a, ddof=1) + (nb - 1) * np.var(b, ddof=1)) / (na + nb - 2)
    )
    return math.nan if pooled == 0 else float((np.mean(a) - np.mean(b)) / pooled)


def welch_tests(frame: Any) -> list[dict[str, Any]]:
    """Welch t-tests between every two conditions, per criterion (Karpinska et al. 2021, appendix D)."""
    from scipy.stats import ttest_ind

    rows = []
    frame = frame.assign(group=group_label(frame))
    for criterion, part in frame.groupby("criterion", sort=True):
        groups = _order_groups(list(part["group"].unique()))
        for a, b in combinations(groups, 2):
            x = part.loc[part["group"] == a, "value"].to_numpy(dtype=float)
            y = part.loc[part["group"] == b, "value"].to_numpy(dtype=float)
            if len(x) < 2 or len(y) < 2:
                continue
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                result = ttest_ind(x, y, equal_var=False)
                ci = result.confidence_interval(0.95)
            rows.append(
                {
                    "analysis": "ratings",
                    "criterion": criterion,
                    "comparison": f"{a} vs {b}",
                    "estimate": float(np.mean(x) - np.mean(y)),
                    "statistic": float(result.statistic),
                    "df": float(result.df),
                    "df2": math.nan,
                    "p_value": float(result.pvalue),
                    "ci_low": float(ci.low),
                    "ci_high": float(ci.high),
                    "effect_size": _cohens_d(x, y),
                    "n": len(x) + len(y),
                    "method": "Welch t-test (difference of means, 95% CI; effect size Cohen's d)",
                }
            )
    return rows


def anova_tukey(frame: Any) -> list[dict[str, Any]]:
    """One-way ANOVA (F, df between and within, eta squared) and Tukey HSD, per criterion,
    when there are at least three conditions."""
    from scipy.stats import f_oneway, tukey_hsd

    rows = []
    frame = frame.assign(group=group_label(frame))
    for criterion, part in frame.groupby("criterion", sort=True):
        groups = _order_groups(list(part["group"].unique()))
        samples = [part.loc[part["group"] == g, "value"].to_numpy(dtype=float) for g in groups]
        if len(groups) < 3 or any(len(s) < 2 for s in samples):
            continue
        result = f_oneway(*samples)
        everything = np.concatenate(samples)
        grand = everything.mean()
        ss_between = sum(len(s) * (s.mean() - grand) ** 2 for s in samples)
        ss_total = float(((everything - grand) ** 2).sum())
        k, n = len(samples), len(everything)
        rows.append(
            {
                "analysis": "ratings",
                "criterion": criterion,
                "comparison": " / ".join(groups),
                "estimate": ss_between / ss_total if ss_total > 0 else math.nan,
                "statistic": float(result.statistic),
                "df": float(k - 1),
                "df2": float(n - k),
                "p_value": float(result.pvalue),
                "ci_low": math.nan,
                "ci_high": math.nan,
                "effect_size": ss_between / ss_total if ss_total > 0 else math.nan,
                "n": n,
                "method": "one-way ANOVA (estimate = eta squared)",
            }
        )
        hsd = tukey_hsd(*samples)
        ci = hsd.confidence_interval(0.95)
        for i, j in combinations(range(k), 2):
            rows.append(
                {
                    "analysis": "ratings",
                    "criterion": criterion,
                    "comparison": f"{groups[i]} vs {groups[j]}",
                    "estimate": float(hsd.statistic[i, j]),
                    "statistic": float(hsd.statistic[i, j]),
                    "df": float(n - k),
                    "df2": math.nan,
                    "p_value": float(hsd.pvalue[i, j]),
                    "ci_low": float(ci.low[i, j]),
                    "ci_high": float(ci.high[i, j]),
                    "effect_size": _cohens_d(samples[i], samples[j]),
                    "n": len(samples[i]) + len(samples[j]),
                    "method": "Tukey HSD (difference of means, 95% family-wise CI)",
                }
            )
    return rows
