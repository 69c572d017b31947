"""Analysis of human judgments in the long format: quality filtering, summaries, agreement and
significance tests, for every study protocol.

Steps (:func:`analyse_judgments`):

1. **Attention checks** (rows with ``check: true``): raters who failed any are removed (by
   default), then the check rows themselves.
2. **Median time per item** (Karpinska et al. 2021, section 3.2): raters whose median time per page is
   below ``min_median_time_s`` (Karpinska et al. 2021 used 40 s) are removed with all their judgments. The
   report says how many raters and judgments each step removed; without a threshold nothing is
   removed and the report counts the raters below 40 s.
3. **Summary** per criterion and condition: n, mean, sd, 95% t interval of the mean, median,
   items and raters.
4. **Agreement**: Krippendorff's alpha per criterion, pooled and per condition (ordinal for
   ratings, nominal for choices and for detection guesses binned into human / machine).
5. **Tests**: Welch t-tests between conditions with the 95% CI of the difference and the
   Welch-Satterthwaite df (Karpinska et al. 2021, appendix D); one-way ANOVA with eta squared and Tukey HSD
   when there are three conditions or more; exact binomial tests of pairwise preferences;
   detection accuracy against chance; the triangle test of difference (and of similarity when
   ``beta`` and ``pd`` are given).
6. **Detection** (Clark 2021, Table 6.1): accuracy, F1, precision and recall for the machine
   class, Krippendorff's alpha, % judged human, % confident.

Protocols are read from the ``protocol`` field the study server writes; a file without it is
treated as Likert ratings.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from storyeval.base.errors import DegenerateInputWarning
from storyeval.base.signature import Signature
from storyeval.corpus import Judgment, read_judgments
from storyeval.human.protocols import PROTOCOLS, AnalysisSettings, get_protocol
from storyeval.human.tables import (
    KARPINSKA_MIN_MEDIAN_TIME_S,
    TEST_COLUMNS,
    AnalysisError,
    alpha_with_interval,
    anova_tukey,
    filter_raters,
    group_label,
    judgments_table,
    krippendorff_alpha,
    percent_agreement,
    rater_times,
    summarize,
    welch_tests,
)

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
    """Krippendorff's alpha per criterion, pooled over conditions and per condition, at the
    level each protocol declares (ordinal for ratings, nominal for choices; detection guesses
    binned into human / machine as in Clark (2021), Table 6.1). Protocols without agreement (one
    judge per triad; best-worst scaling, whose reliability is split-half) are left out.

    Columns: ``criterion``, ``condition`` (``all`` for the pooled row), ``estimate``,
    ``ci_low``, ``ci_high`` (percentile bootstrap over items, ``n_boot`` resamples), ``level``,
    ``n_items``, ``n_raters``, ``n``, ``percent_agreement``, ``method``.
    """
    import pandas as pd

    rows = []
    frame = frame.assign(group=group_label(frame))
    for criterion, part in frame.groupby("criterion", sort=True):
        protocol = get_protocol(str(part["protocol"].iloc[0]))
        level = protocol.agreement_level
        if level is None:
            continue
        data, method = protocol.agreement_values(part)
        subsets = [("all", data)] + [(str(g), d) for g, d in data.groupby("group", sort=True)]
        for label, subset in subsets:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", DegenerateInputWarning)
                alpha, n_items, n_raters, low, high = alpha_with_interval(
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


# ----------------------------------------------------------------------------- orchestration


@dataclass
class StudyAnalysis:
    """The tables of one analysis (each a tidy DataFrame with a ``signature`` column):
    ``summary``, ``agreement``, ``tests``, ``filtering``, ``raters`` and what the protocols of
    the data add (``pairwise``, ``detection``, ``triangle``, ``best_worst``...)."""

    summary: Any
    agreement: Any
    tests: Any
    filtering: Any
    raters: Any
    extra: dict[str, Any] = field(default_factory=dict)
    signature: str = ""
    notes: list[str] = field(default_factory=list)

    def __getattr__(self, name: str) -> Any:
        # the protocol tables by name (analysis.pairwise...), None when the data has none
        if name.startswith("_") or name == "extra":
            raise AttributeError(name)
        return self.__dict__.get("extra", {}).get(name)

    def tables(self) -> dict[str, Any]:
        """Every table of the analysis by file name (without ``.csv``)."""
        out = {
            "summary": self.summary,
            "agreement": self.agreement,
            "tests": self.tests,
            "filtering": self.filtering,
            "raters": self.raters,
        }
        out.update({name: table for name, table in self.extra.items() if len(table)})
        return out

    def write(self, directory: str | Path) -> list[Path]:
        """Write every table as ``DIR/<name>.csv`` (each file atomically); return the paths."""
        from storyeval.base.io import claim_output_directory, write_table

        target = claim_output_directory(directory, "study analysis")
        return [write_table(target / f"{name}.csv", table) for name, table in self.tables().items()]


def _read_checked(
    judgments: Sequence[Judgment] | str | Path, texts: Mapping[str, str] | None
) -> Sequence[Judgment]:
    """The judgments, read from a file after its span annotations are checked."""
    if not isinstance(judgments, str | Path):
        return judgments
    from storyeval.meta.spans import check_span_records

    check_span_records(judgments, texts)
    return read_judgments(judgments)


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
    competence: str | None = None,
    texts: Mapping[str, str] | None = None,
) -> StudyAnalysis:
    """Run the whole analysis (module docstring) on long-format judgments or a file of them.

    A file's span annotations are checked first (:func:`storyeval.meta.spans.check_span_records`;
    ``texts``, the stories' texts by id, checks them against their stories too).

    ``competence`` (``mace`` or ``dawid-skene``) adds a rater competence model of the rated
    criteria: ``competence`` (each rater's competence, spammers and constant raters flagged)
    and ``posteriors`` (each item's label with its posterior) tables.

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

    frame = judgments_table(_read_checked(judgments, texts), conditions=conditions)
    unknown = sorted(set(frame["protocol"]) - set(PROTOCOLS.names()))
    if unknown:
        raise AnalysisError(
            f"unknown protocol(s) {', '.join(unknown)} in the judgments; must be one of "
            + ", ".join(PROTOCOLS.names())
        )
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
    settings = AnalysisSettings(n_boot, seed, triangle_alpha, triangle_beta, triangle_pd)
    present = [PROTOCOLS.get(name) for name in PROTOCOLS.names() if name in set(kept["protocol"])]
    comparable = [p.name for p in present if p.compares_conditions]
    rating_like = kept[kept["protocol"].isin(comparable)]
    test_rows: list[dict[str, Any]] = []
    if not rating_like.empty:
        test_rows += welch_tests(rating_like)
        test_rows += anova_tukey(rating_like)
    extra: dict[str, Any] = {}
    if not rating_like.empty:
        extra.update(rating_spread(rating_like))
    if competence and not rating_like.empty:
        fields["competence"] = competence
        extra.update(_competence(rating_like, competence, seed))
    for protocol in present:
        result = protocol.analyse(kept[kept["protocol"] == protocol.name], settings)
        extra.update(result.tables)
        test_rows += result.tests
        fields.update(result.signature_fields)
    signature = Signature("study_analysis", fields).render()
    tests = pd.DataFrame(test_rows, columns=list(TEST_COLUMNS))
    analysis = StudyAnalysis(
        summary=summarize(kept),
        agreement=agreement(kept, n_boot=n_boot, seed=seed),
        tests=tests,
        filtering=report,
        raters=raters,
        extra=extra,
        signature=signature,
    )
    for table in analysis.tables().values():
        table["signature"] = signature
    for table in extra.values():
        table["signature"] = signature
    return analysis


def rating_spread(ratings: Any) -> dict[str, Any]:
    """Callan and Foster's (2023) Figures 2 and 3 as tables: ``distribution`` (how many times
    each value was given, per criterion and condition, and its share) and ``item_spread``
    (each item's mean, standard deviation across its raters and number of raters, per
    criterion), and the spread of those SDs per criterion in ``spread_summary`` (the paper:
    0.4 to 2.4, most over 1, with six or more raters a story)."""
    import pandas as pd

    counts = (
        ratings.groupby(["criterion", "condition", "value"], dropna=False)
        .size()
        .rename("count")
        .reset_index()
    )
    counts["share"] = counts["count"] / counts.groupby(["criterion", "condition"], dropna=False)[
        "count"
    ].transform("sum")
    spread = (
        ratings.groupby(["criterion", "item_id"], dropna=False)["value"]
        .agg(
            n="size", mean="mean", sd=lambda v: float(v.std(ddof=1)) if len(v) > 1 else float("nan")
        )
        .reset_index()
    )
    rated = spread[spread["n"] > 1]
    summary = pd.DataFrame(
        [
            {
                "criterion": criterion,
                "items": len(part),
                "sd_min": part["sd"].min(),
                "sd_median": part["sd"].median(),
                "sd_max": part["sd"].max(),
                "share_sd_over_1": float((part["sd"] > 1).mean()),
            }
            for criterion, part in rated.groupby("criterion")
        ]
    )
    return {"distribution": counts, "item_spread": spread, "spread_summary": summary}


def _competence(ratings: Any, model: str, seed: int) -> dict[str, Any]:
    """The competence and posterior tables of a rater competence model."""
    from storyeval.meta.competence import competence_tables

    raters, items = competence_tables(ratings, model=model, seed=seed)
    return {"competence": raters, "posteriors": items}


__all__ = [
    "AGREEMENT_COLUMNS",
    "KARPINSKA_MIN_MEDIAN_TIME_S",
    "TEST_COLUMNS",
    "AnalysisError",
    "StudyAnalysis",
    "agreement",
    "analyse_judgments",
    "anova_tukey",
    "filter_raters",
    "judgments_table",
    "krippendorff_alpha",
    "rater_times",
    "summarize",
    "welch_tests",
]
