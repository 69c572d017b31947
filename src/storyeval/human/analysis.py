"""Analysis of human judgments in the long format: quality filtering, summaries, agreement and
significance tests, for every study protocol.

Steps (:func:`analyse_judgments`):

1. **Attention checks** (rows with ``check: true``): raters who failed any are removed (by
   default), then the check rows themselves.
2. **Median time per item** (seed 003, section 3.2): raters whose median time per page is
   below ``min_median_time_s`` (seed 003 used 40 s) are removed with all their judgments. The
   report says how many raters and judgments each step removed; without a threshold nothing is
   removed and the report counts the raters below 40 s.
3. **Summary** per criterion and condition: n, mean, sd, 95% t interval of the mean, median,
   items and raters.
4. **Agreement**: Krippendorff's alpha per criterion, pooled and per condition (ordinal for
   ratings, nominal for choices and for detection guesses binned into human / machine).
5. **Tests**: Welch t-tests between conditions with the 95% CI of the difference and the
   Welch-Satterthwaite df (seed 003, appendix D); one-way ANOVA with eta squared and Tukey HSD
   when there are three conditions or more; exact binomial tests of pairwise preferences;
   detection accuracy against chance; the triangle test of difference (and of similarity when
   ``beta`` and ``pd`` are given).
6. **Detection** (seed 000, Table 6.1): accuracy, F1, precision and recall for the machine
   class, Krippendorff's alpha, % judged human, % confident.

Protocols are read from the ``protocol`` field the study server writes; a file without it is
treated as Likert ratings.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from itertools import combinations
from pathlib import Path
from typing import Any

import numpy as np

from storyeval.corpus import Judgment, read_judgments
from storyeval.errors import StoryevalError
from storyeval.meta._warnings import DegenerateInputWarning
from storyeval.meta.stats import binomial_test, mean_interval
from storyeval.signature import Signature

RATING_PROTOCOLS = ("likert", "side_by_side")
SEED_003_MIN_MEDIAN_TIME_S = 40.0
"""The median time per item below which Karpinska et al. (seed 003) removed raters."""


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


def _group_label(frame: Any) -> Any:
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
            (known & (raters["median_time_s"] < SEED_003_MIN_MEDIAN_TIME_S) & raters["kept"]).sum()
        )
        note = (
            f"not applied; {below} rater(s) have a median time per item below "
            f"{SEED_003_MIN_MEDIAN_TIME_S:g} s, the threshold of seed 003"
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
    frame = frame.assign(group=_group_label(frame))
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
    estimate, n_items, n_raters, _, _ = _alpha_with_interval(frame, level=level, n_boot=0, seed=0)
    return estimate, n_items, n_raters


def _alpha_with_interval(
    frame: Any, *, level: str, n_boot: int, seed: int
) -> tuple[float, int, int, float, float]:
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


def _level(protocol: str) -> str:
    return "ordinal" if protocol in RATING_PROTOCOLS else "nominal"


AGREEMENT_COLUMNS = (
    "criterion",
    "condition",
    "estimate",
    "ci_low",
    "ci_high",
    "level",
    "n_items",
    "n_raters",
    "n",
    "percent_agreement",
    "method",
)


def agreement(frame: Any, *, n_boot: int = 1000, seed: int = 0) -> Any:
    """Krippendorff's alpha per criterion, pooled over conditions and per condition.

    Detection guesses are binned into human (1-2) and machine (3-4) before computing the
    nominal alpha, as in seed 000 (Table 6.1). Columns: ``criterion``, ``condition``
    (``all`` for the pooled row), ``estimate``, ``ci_low``, ``ci_high`` (percentile bootstrap
    over items, ``n_boot`` resamples), ``level``, ``n_items``, ``n_raters``, ``n``,
    ``percent_agreement``, ``method``.
    """
    import pandas as pd

    rows = []
    frame = frame.assign(group=_group_label(frame))
    for criterion, part in frame.groupby("criterion", sort=True):
        protocol = str(part["protocol"].iloc[0])
        if protocol == "triangle":
            continue  # one judge per triad: agreement is not defined
        level = _level(protocol)
        data = part
        method = f"krippendorff_alpha ({level})"
        if protocol == "detection":
            data = part.assign(value=(part["value"] >= 3).astype(float))
            method = "krippendorff_alpha (nominal, human/machine)"
        subsets = [("all", data)] + [(str(g), d) for g, d in data.groupby("group", sort=True)]
        for label, subset in subsets:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", DegenerateInputWarning)
                alpha, n_items, n_raters, low, high = _alpha_with_interval(
                    subset, level=level, n_boot=n_boot, seed=seed
                )
            rows.append(
                {
                    "criterion": criterion,
                    "condition": label,
                    "estimate": alpha,
                    "ci_low": low,
                    "ci_high": high,
                    "level": level,
                    "n_items": n_items,
                    "n_raters": n_raters,
                    "n": len(subset),
                    "percent_agreement": percent_agreement(subset),
                    "method": method,
                }
            )
    return pd.DataFrame(rows, columns=AGREEMENT_COLUMNS)


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
    """Welch t-tests between every two conditions, per criterion (seed 003, appendix D)."""
    from scipy.stats import ttest_ind

    rows = []
    frame = frame.assign(group=_group_label(frame))
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
    frame = frame.assign(group=_group_label(frame))
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


def pairwise_preferences(frame: Any) -> Any:
    """Per criterion and system pair: wins, ties, the share preferring system A with its exact
    95% CI and a two-sided exact binomial test of no preference (ties excluded)."""
    import pandas as pd

    rows = []
    for (criterion, condition), part in frame.groupby(["criterion", "condition"], sort=True):
        a = str(part["system_a"].iloc[0]) if "system_a" in part else condition.split(" vs ")[0]
        b = str(part["system_b"].iloc[0]) if "system_b" in part else condition.split(" vs ")[-1]
        wins_a = int((part["value"] == 1.0).sum())
        wins_b = int((part["value"] == 0.0).sum())
        ties = int(len(part) - wins_a - wins_b)
        n = wins_a + wins_b
        if n == 0:
            continue
        p_value, ci_low, ci_high = binomial_test(wins_a, n)
        rows.append(
            {
                "analysis": "pairwise",
                "criterion": criterion,
                "comparison": f"{a} vs {b}",
                "system_a": a,
                "system_b": b,
                "wins_a": wins_a,
                "wins_b": wins_b,
                "ties": ties,
                "estimate": wins_a / n,
                "statistic": float(wins_a),
                "df": math.nan,
                "df2": math.nan,
                "p_value": p_value,
                "ci_low": ci_low,
                "ci_high": ci_high,
                "effect_size": math.nan,
                "n": n,
                "method": "exact binomial test (estimate = share preferring system A, ties excluded)",
            }
        )
    return pd.DataFrame(rows)


def _truth(part: Any) -> Any:
    if "truth" in part and part["truth"].notna().all():
        return part["truth"].astype(str)
    return np.where(part["condition"].str.lower().eq("human"), "human", "machine")


def detection_metrics(frame: Any) -> Any:
    """Seed 000, Table 6.1: per machine system (with the human texts) and overall.

    Columns: ``condition``, ``n``, ``accuracy``, ``f1``, ``precision``, ``recall`` (machine
    class), ``alpha`` (Krippendorff, nominal, guesses binned human/machine), ``pct_human``,
    ``pct_confident`` (ratings 1 or 4), ``n_raters``, and the test of accuracy against chance
    as in seed 000 (one-sample t-test of per-rater accuracy against 0.5: ``statistic``,
    ``df``, ``p_value``).
    """
    import pandas as pd
    from scipy.stats import ttest_1samp

    data = frame.assign(truth=_truth(frame))
    data = data.assign(
        guess=np.where(data["value"] >= 3, "machine", "human"),
        confident=data["value"].isin([1.0, 4.0]),
    )
    data = data.assign(correct=data["guess"] == data["truth"])
    machines = sorted(data.loc[data["truth"] == "machine", "condition"].unique())
    subsets = [("all", data)]
    if len(machines) > 1:
        for system in machines:
            subsets.append(
                (system, data[(data["truth"] == "human") | (data["condition"] == system)])
            )
    rows = []
    for label, part in subsets:
        tp = int(((part["guess"] == "machine") & (part["truth"] == "machine")).sum())
        fp = int(((part["guess"] == "machine") & (part["truth"] == "human")).sum())
        fn = int(((part["guess"] == "human") & (part["truth"] == "machine")).sum())
        precision = tp / (tp + fp) if tp + fp else math.nan
        recall = tp / (tp + fn) if tp + fn else math.nan
        f1 = (
            2 * precision * recall / (precision + recall)
            if tp and not math.isnan(precision) and not math.isnan(recall)
            else (0.0 if tp + fp + fn else math.nan)
        )
        binned = part.assign(value=(part["value"] >= 3).astype(float))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DegenerateInputWarning)
            alpha, _, _ = krippendorff_alpha(binned, level="nominal")
        per_rater = part.groupby("rater_id")["correct"].mean().to_numpy(dtype=float)
        if len(per_rater) >= 2 and np.std(per_rater) > 0:
            t = ttest_1samp(per_rater, 0.5)
            statistic, df, p_value = float(t.statistic), float(len(per_rater) - 1), float(t.pvalue)
        else:
            statistic, df, p_value = math.nan, math.nan, math.nan
        rows.append(
            {
                "condition": label,
                "n": len(part),
                "accuracy": float(part["correct"].mean()),
                "f1": f1,
                "precision": precision,
                "recall": recall,
                "alpha": alpha,
                "pct_human": 100.0 * float((part["guess"] == "human").mean()),
                "pct_confident": 100.0 * float(part["confident"].mean()),
                "n_raters": part["rater_id"].nunique(),
                "statistic": statistic,
                "df": df,
                "p_value": p_value,
                "method": "accuracy vs 0.5: one-sample t-test of per-rater accuracy",
            }
        )
    return pd.DataFrame(rows)


def triangle_results(
    frame: Any, *, alpha: float = 0.05, beta: float | None = None, pd_max: float | None = None
) -> Any:
    """The triangle test per system pair (see :func:`storyeval.human.triangle.analyse`)."""
    import pandas as pd

    from storyeval.human.triangle import analyse

    rows = []
    for condition, part in frame.groupby("condition", sort=True):
        n = len(part)
        correct = int((part["value"] == 1.0).sum())
        result = analyse(n, correct, alpha=alpha, beta=beta, pd=pd_max)
        record = result.to_dict()
        record.pop("notes")
        record.pop("signature")
        orders = part["order"].value_counts().to_dict() if "order" in part else {}
        rows.append(
            {
                "condition": condition,
                **record,
                "order_counts": ", ".join(f"{k}:{v}" for k, v in sorted(orders.items())),
                "n_judges": part["rater_id"].nunique(),
                "notes": "; ".join(result.notes),
            }
        )
    return pd.DataFrame(rows)


# ----------------------------------------------------------------------------- orchestration


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


@dataclass
class StudyAnalysis:
    """The tables of one analysis (each a tidy DataFrame with a ``signature`` column)."""

    summary: Any
    agreement: Any
    tests: Any
    filtering: Any
    raters: Any
    detection: Any | None = None
    pairwise: Any | None = None
    triangle: Any | None = None
    signature: str = ""
    notes: list[str] = field(default_factory=list)

    def tables(self) -> dict[str, Any]:
        out = {
            "summary": self.summary,
            "agreement": self.agreement,
            "tests": self.tests,
            "filtering": self.filtering,
            "raters": self.raters,
        }
        for name in ("detection", "pairwise", "triangle"):
            table = getattr(self, name)
            if table is not None and len(table):
                out[name] = table
        return out

    def write(self, directory: str | Path) -> list[Path]:
        """Write every table as ``DIR/<name>.csv`` (each file atomically); return the paths."""
        from storyeval.io import atomic_write

        target = Path(directory)
        written = []
        for name, table in self.tables().items():
            path = target / f"{name}.csv"
            with atomic_write(path, newline="") as fh:
                table.to_csv(fh, index=False)
            written.append(path)
        return written


def analyse_judgments(
    judgments: Sequence[Judgment] | str | Path,
    *,
    min_median_time_s: float | None = None,
    exclude_failed_checks: bool = True,
    triangle_alpha: float = 0.05,
    triangle_beta: float | None = None,
    triangle_pd: float | None = None,
    n_boot: int = 1000,
    seed: int = 0,
    conditions: Mapping[str, str] | None = None,
) -> StudyAnalysis:
    """Run the whole analysis (module docstring) on long-format judgments or a file of them.

    ``conditions`` maps item ids to conditions for judgments without one (the CLI's
    ``--stories`` uses each story's system).

    Raises
    ------
    AnalysisError
        If there are no judgments, or the filters remove every rater (the message says which
        filter and how to relax it).

    Examples
    --------
    >>> from storyeval.corpus import Judgment
    >>> js = [Judgment(f"i{i}", r, "grammar", float(v), time_s=60.0, condition=c)
    ...       for i, (c, vals) in enumerate([("human", (5, 4)), ("human", (4, 4)), ("model", (2, 3)), ("model", (3, 2))])
    ...       for r, v in zip(("r1", "r2"), vals)]
    >>> result = analyse_judgments(js, n_boot=0)
    >>> result.summary[["condition", "n", "mean"]].to_dict("records")
    [{'condition': 'human', 'n': 4, 'mean': 4.25}, {'condition': 'model', 'n': 4, 'mean': 2.5}]
    >>> round(float(result.tests["estimate"].iloc[0]), 2)
    1.75
    """
    import pandas as pd

    if isinstance(judgments, str | Path):
        judgments = read_judgments(judgments)
    frame = judgments_table(judgments, conditions=conditions)
    kept, report, raters = filter_raters(
        frame, min_median_time_s=min_median_time_s, exclude_failed_checks=exclude_failed_checks
    )
    if kept.empty:
        steps = "; ".join(
            f"{r['step']}: removed {r['raters_removed']} of {r['raters_before']} raters"
            for _, r in report.iterrows()
        )
        hint = (
            f" Pass a lower --min-median-time (0 disables the time filter; it is {min_median_time_s:g} s now)."
            if min_median_time_s
            else ""
        )
        raise AnalysisError(f"no judgments are left after filtering ({steps}).{hint}")
    fields: dict[str, Any] = {
        "min_median_time_s": min_median_time_s,
        "exclude_failed_checks": exclude_failed_checks,
        "n_judgments": len(kept),
        "n_raters": int(kept["rater_id"].nunique()),
        "bootstrap": n_boot,
        "seed": seed,
    }
    protocols = set(kept["protocol"])
    test_rows: list[dict[str, Any]] = []
    rating_like = kept[kept["protocol"].isin((*RATING_PROTOCOLS, "detection"))]
    detection = pairwise = triangle = None
    if not rating_like.empty:
        test_rows += welch_tests(rating_like)
        test_rows += anova_tukey(rating_like)
    if "pairwise" in protocols:
        pairwise = pairwise_preferences(kept[kept["protocol"] == "pairwise"])
        test_rows += pairwise[list(TEST_COLUMNS)].to_dict("records") if len(pairwise) else []
    if "detection" in protocols:
        detection = detection_metrics(kept[kept["protocol"] == "detection"])
        for _, row in detection.iterrows():
            test_rows.append(
                {
                    "analysis": "detection",
                    "criterion": "source",
                    "comparison": f"accuracy ({row['condition']}) vs chance 0.5",
                    "estimate": row["accuracy"],
                    "statistic": row["statistic"],
                    "df": row["df"],
                    "df2": math.nan,
                    "p_value": row["p_value"],
                    "ci_low": math.nan,
                    "ci_high": math.nan,
                    "effect_size": math.nan,
                    "n": row["n"],
                    "method": row["method"],
                }
            )
    if "triangle" in protocols:
        fields.update(
            {
                "triangle_alpha": triangle_alpha,
                "triangle_beta": triangle_beta,
                "triangle_pd": triangle_pd,
            }
        )
        triangle = triangle_results(
            kept[kept["protocol"] == "triangle"],
            alpha=triangle_alpha,
            beta=triangle_beta,
            pd_max=triangle_pd,
        )
        for _, row in triangle.iterrows():
            test_rows.append(
                {
                    "analysis": "triangle",
                    "criterion": "odd_one_out",
                    "comparison": row["condition"],
                    "estimate": row["pd_estimate"],
                    "statistic": float(row["correct"]),
                    "df": math.nan,
                    "df2": math.nan,
                    "p_value": row["p_value"],
                    "ci_low": row["pd_lower"],
                    "ci_high": row["pd_upper"],
                    "effect_size": math.nan,
                    "n": row["judges"],
                    "method": "triangle test of difference (exact binomial; estimate = pd, bounds by normal approximation)",
                }
            )
    signature = Signature("study_analysis", fields).render()
    tests = pd.DataFrame(test_rows, columns=list(TEST_COLUMNS))
    tables = {
        "summary": summarize(kept),
        "agreement": agreement(kept, n_boot=n_boot, seed=seed),
        "tests": tests,
        "filtering": report,
        "raters": raters,
    }
    for table in [*tables.values(), detection, pairwise, triangle]:
        if table is not None:
            table["signature"] = signature
    return StudyAnalysis(
        summary=tables["summary"],
        agreement=tables["agreement"],
        tests=tables["tests"],
        filtering=tables["filtering"],
        raters=tables["raters"],
        detection=detection,
        pairwise=pairwise,
        triangle=triangle,
        signature=signature,
    )
