"""Audit a judge before trusting it (``storyeval judge-audit``): does it separate systems, give
the same answers twice, prefer the first story shown, reward length, prefer its own family's
stories, and notice errors that destroy a story while ignoring edits that keep it?

Judgemark (Paech 2024) grades judges by separability and stability; position and length bias
are the best-documented failures of LLM judges (Zheng et al. 2023; Dubois et al. 2024);
self-preference is Panickssery et al. (2024)'s finding; the perturbation checks follow
OpenMEVA's robustness tests (Guan et al. 2021). Every check reads files storyeval writes (the
judge's answers on the stories, its pairwise run, people's judgments, a perturbed story file
and the judge's answers on it), so any judge works: an LLM, a reward model, an endpoint, or
people. Each check gives an estimate with a bootstrap interval and a one-line verdict.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from storyeval.base.errors import StoryevalError
from storyeval.base.signature import Signature
from storyeval.corpus import Judgment, Story

#: A judge whose repeats agree at least this much (Kendall's tau) is called stable.
STABLE_TAU = 0.7
#: A destroying perturbation must lower the judge's score in at least this share of stories.
DETECTS = 0.7
#: A meaning-preserving edit may move the score by at most this many sd of the judge's scores.
ROBUST_SD = 0.25


@dataclass
class JudgeAudit:
    """One row per check and criterion (``check``, ``criterion``, ``statistic``, ``estimate``,
    ``ci_low``, ``ci_high``, ``n``, ``verdict``, ``signature``), what could not be checked
    and why, and the audit's signature (the judge, the data, every setting and threshold)."""

    checks: pd.DataFrame
    skipped: list[str]
    signature: Signature | None = None

    def verdicts(self) -> list[str]:
        """One line per check and criterion."""
        return [
            f"{row.check} ({row.criterion}): {row.verdict}"
            for row in self.checks.itertuples(index=False)
        ]


def _row(
    check: str,
    criterion: str,
    statistic: str,
    estimate: float,
    interval: tuple[float, float],
    n: int,
    verdict: str,
) -> dict[str, Any]:
    return {
        "check": check,
        "criterion": criterion,
        "statistic": statistic,
        "estimate": estimate,
        "ci_low": interval[0],
        "ci_high": interval[1],
        "n": n,
        "verdict": verdict,
    }


def _interval(values: np.ndarray, confidence: float) -> tuple[float, float]:
    from storyeval.base.stats import percentile_interval

    if np.isfinite(values).sum() < 2:
        return math.nan, math.nan
    return percentile_interval(values, confidence=confidence)


def _frame(judgments: Sequence[Judgment], run: int = 0) -> pd.DataFrame:
    return pd.DataFrame(
        [
            {
                "item_id": j.item_id,
                "criterion": j.criterion,
                "value": float(j.value),
                "sample": f"{run}:{j.extra.get('sample', 0)}",
            }
            for j in judgments
        ]
    )


def audit_judge(
    runs: Sequence[Sequence[Judgment]],
    stories: Sequence[Story],
    *,
    humans: Sequence[Judgment] = (),
    comparisons: Sequence[dict[str, Any]] = (),
    perturbed: Sequence[Story] = (),
    perturbed_judgments: Sequence[Judgment] = (),
    own_systems: Sequence[str] = (),
    n_boot: int = 1000,
    confidence: float = 0.95,
    seed: int = 0,
) -> JudgeAudit:
    """Audit one judge (see the module docstring). ``runs``: the judge's answers on
    ``stories``, one sequence per run (repeats within a run, ``sample``, count as runs too);
    ``own_systems``: the systems of the judge's own model family (self-preference)."""
    if not runs or not any(runs):
        raise StoryevalError("give the judge's answers on the stories (one file or more)")
    judged = pd.concat([_frame(run, k) for k, run in enumerate(runs)], ignore_index=True)
    known = {s.id: s for s in stories}
    judged = judged[judged["item_id"].isin(known)]
    if judged.empty:
        raise StoryevalError("none of the judge's answers is about a story of the story file")
    rng = np.random.default_rng(seed)
    per_item = judged.groupby(["criterion", "item_id"])["value"].mean().reset_index()
    per_item["system"] = per_item["item_id"].map(lambda i: known[i].system or "")
    per_item["length"] = per_item["item_id"].map(lambda i: math.log1p(len(known[i].story.split())))
    rows: list[dict[str, Any]] = []
    skipped: list[str] = []
    people = _people(humans)
    for criterion, group in per_item.groupby("criterion", sort=False):
        name = str(criterion)
        rows += _separability(name, group, n_boot, confidence, rng, skipped)
        rows += _stability(
            name, judged[judged["criterion"] == name], n_boot, confidence, rng, skipped
        )
        rows += _length(name, group, people.get(name), n_boot, confidence, rng)
        rows += _self_preference(
            name, group, people.get(name), own_systems, n_boot, confidence, rng, skipped
        )
        rows += _perturbations(name, group, perturbed, perturbed_judgments, skipped)
    rows += _position(comparisons, confidence, skipped)
    rows += _replaceability(per_item, humans, skipped)
    signature = _signature(runs, stories, humans, perturbed, n_boot, confidence, seed)
    checks = pd.DataFrame(rows)
    if not checks.empty:
        checks["signature"] = signature.render()
    return JudgeAudit(checks, skipped, signature)


def _signature(
    runs: Sequence[Sequence[Judgment]],
    stories: Sequence[Story],
    humans: Sequence[Judgment],
    perturbed: Sequence[Story],
    n_boot: int,
    confidence: float,
    seed: int,
) -> Signature:
    """The audit's signature: which judge (a hash of its rater ids), how much data, the
    bootstrap and the verdicts' thresholds."""
    import hashlib

    judges = sorted({j.rater_id for run in runs for j in run})
    return Signature(
        "judge_audit",
        {
            "judge": hashlib.sha256("\n".join(judges).encode()).hexdigest()[:12],
            "runs": len(runs),
            "stories": len(stories),
            "people": "yes" if humans else "no",
            "perturbed": len(perturbed),
            "bootstrap": n_boot,
            "confidence": confidence,
            "seed": seed,
            "stable_tau": STABLE_TAU,
            "detects": DETECTS,
            "robust_sd": ROBUST_SD,
        },
    )


def _replaceability(
    per_item: pd.DataFrame, humans: Sequence[Judgment], skipped: list[str]
) -> list[dict[str, Any]]:
    """The alternative annotator test (Calderon et al. 2025, epsilon 0.2) per criterion: may
    the judge replace one of the raters? Needs three or more raters per item."""
    from storyeval.meta.alt_test import alt_test_table

    if not humans:
        skipped.append("replaceability: no people's judgments (--humans)")
        return []
    people = pd.DataFrame(
        [{"item_id": j.item_id, "rater_id": j.rater_id, "criterion": j.criterion,
          "value": float(j.value)} for j in humans]
    )  # fmt: skip
    table = alt_test_table(people, per_item, pooled=False)
    rows = []
    for row in table.itertuples(index=False):
        if str(row.verdict).startswith("not testable"):
            skipped.append(f"replaceability ({row.criterion}): {row.verdict}")
            continue
        verdict = (
            f"{row.verdict} (alternative annotator test: winning rate {row.winning_rate:.2f} "
            f"of {row.raters_tested} raters, advantage probability {row.advantage_probability:.2f})"
        )
        rows.append(_row("replaceability", str(row.criterion), "winning_rate",
                         float(row.winning_rate), (math.nan, math.nan), int(row.items), verdict))  # fmt: skip
    return rows


def _people(humans: Sequence[Judgment]) -> dict[str, pd.Series]:
    """People's mean rating of each item, per criterion."""
    if not humans:
        return {}
    frame = pd.DataFrame(
        [{"item_id": j.item_id, "criterion": j.criterion, "value": float(j.value)} for j in humans]
    )
    return {str(c): g.groupby("item_id")["value"].mean() for c, g in frame.groupby("criterion")}


def _separability(
    criterion: str,
    group: pd.DataFrame,
    n_boot: int,
    confidence: float,
    rng: np.random.Generator,
    skipped: list[str],
) -> list[dict[str, Any]]:
    """Kruskal-Wallis across systems, and the share of system pairs whose bootstrap
    intervals of the mean do not overlap."""
    from scipy.stats import kruskal

    systems = {s: g["value"].to_numpy() for s, g in group.groupby("system") if s}
    if len(systems) < 2:
        skipped.append(f"separability ({criterion}): the stories have fewer than 2 systems")
        return []
    values = list(systems.values())
    p = float(kruskal(*values).pvalue) if any(np.ptp(v) > 0 for v in values) else math.nan
    intervals = {
        s: _interval(np.array([rng.choice(v, len(v)).mean() for _ in range(n_boot)]), confidence)
        for s, v in systems.items()
    }
    names = sorted(systems)
    pairs = [(a, b) for k, a in enumerate(names) for b in names[k + 1 :]]
    apart = [
        intervals[a][1] < intervals[b][0] or intervals[b][1] < intervals[a][0] for a, b in pairs
    ]
    share = float(np.mean(apart))
    verdict = (
        f"separates the systems (Kruskal-Wallis p = {p:.3g}; {sum(apart)} of {len(pairs)} "
        "pairs apart)"
        if p < 1 - confidence and share >= 0.5
        else f"separates the systems weakly (Kruskal-Wallis p = {p:.3g}; {sum(apart)} of "
        f"{len(pairs)} pairs apart)"
    )
    return [
        _row(
            "separability",
            criterion,
            "pairs_apart",
            share,
            (math.nan, math.nan),
            len(pairs),
            verdict,
        )
    ]


def _stability(
    criterion: str,
    judged: pd.DataFrame,
    n_boot: int,
    confidence: float,
    rng: np.random.Generator,
    skipped: list[str],
) -> list[dict[str, Any]]:
    """Kendall's tau between every two runs (or samples) over the items both judged, mean
    over pairs, with a bootstrap over items."""
    from scipy.stats import kendalltau

    wide = judged.pivot_table(index="item_id", columns="sample", values="value", aggfunc="mean")
    if wide.shape[1] < 2:
        skipped.append(
            f"stability ({criterion}): one run; give two runs (--judge twice) or --repeats 2"
        )
        return []
    wide = wide.dropna()
    columns = list(wide.columns)
    pairs = [(a, b) for k, a in enumerate(columns) for b in columns[k + 1 :]]
    matrix = wide.to_numpy()

    def mean_tau(rows: np.ndarray) -> float:
        taus = [
            kendalltau(matrix[rows, columns.index(a)], matrix[rows, columns.index(b)]).statistic
            for a, b in pairs
        ]
        return float(np.nanmean(taus)) if np.isfinite(taus).any() else math.nan

    everything = np.arange(len(wide))
    tau = mean_tau(everything)
    boots = np.array(
        [mean_tau(rng.integers(0, len(wide), len(wide))) for _ in range(min(n_boot, 200))]
    )
    verdict = "stable" if tau >= STABLE_TAU else "unstable"
    verdict += f" (Kendall tau between runs {tau:.2f}; {len(columns)} runs)"
    return [
        _row(
            "stability",
            criterion,
            "kendall_tau",
            tau,
            _interval(boots, confidence),
            len(wide),
            verdict,
        )
    ]


def _residual(values: np.ndarray, control: np.ndarray) -> np.ndarray:
    design = np.column_stack([np.ones(len(control)), control])
    coefficients, *_ = np.linalg.lstsq(design, values, rcond=None)
    residual: np.ndarray = values - design @ coefficients
    return residual


def _length(
    criterion: str,
    group: pd.DataFrame,
    people: pd.Series | None,
    n_boot: int,
    confidence: float,
    rng: np.random.Generator,
) -> list[dict[str, Any]]:
    """Spearman correlation of the judge's score with log length; with people's ratings,
    both ranked and people's rating partialled out (how much more than people it rewards
    length)."""
    from scipy.stats import rankdata

    frame = group.copy()
    statistic = "spearman"
    if people is not None:
        frame["human"] = frame["item_id"].map(people)
        frame = frame.dropna(subset=["human"])
        statistic = "partial_spearman_given_people"
    if len(frame) < 5:
        return []
    score, length = rankdata(frame["value"]), rankdata(frame["length"])
    control = rankdata(frame["human"]) if "human" in frame else None

    def correlation(rows: np.ndarray) -> float:
        a, b = score[rows], length[rows]
        if control is not None:
            a, b = _residual(a, control[rows]), _residual(b, control[rows])
        if np.ptp(a) == 0 or np.ptp(b) == 0:
            return math.nan
        return float(np.corrcoef(a, b)[0, 1])

    estimate = correlation(np.arange(len(frame)))
    boots = np.array([correlation(rng.integers(0, len(frame), len(frame))) for _ in range(n_boot)])
    low, high = _interval(boots, confidence)
    given = " beyond people's ratings" if control is not None else ""
    if low > 0:
        verdict = f"favours longer stories{given} (rho {estimate:+.2f})"
    elif high < 0:
        verdict = f"favours shorter stories{given} (rho {estimate:+.2f})"
    else:
        verdict = f"no length bias found{given} (rho {estimate:+.2f})"
    return [_row("length_bias", criterion, statistic, estimate, (low, high), len(frame), verdict)]


def _self_preference(
    criterion: str,
    group: pd.DataFrame,
    people: pd.Series | None,
    own: Sequence[str],
    n_boot: int,
    confidence: float,
    rng: np.random.Generator,
    skipped: list[str],
) -> list[dict[str, Any]]:
    """The judge's z-score minus people's z-score, on its own family's stories minus on the
    others' (> 0: it likes its own more than people do)."""
    if not own:
        return []
    if people is None:
        skipped.append(f"self-preference ({criterion}): needs people's judgments (--humans)")
        return []
    frame = group.assign(human=group["item_id"].map(people)).dropna(subset=["human"])
    mine = frame["system"].isin(own).to_numpy()
    if not mine.any() or mine.all():
        skipped.append(
            f"self-preference ({criterion}): no story, or only stories, of {', '.join(own)}"
        )
        return []
    gap = _z(frame["value"].to_numpy()) - _z(frame["human"].to_numpy())

    def difference(rows: np.ndarray) -> float:
        a, b = gap[rows][mine[rows]], gap[rows][~mine[rows]]
        return float(a.mean() - b.mean()) if len(a) and len(b) else math.nan

    estimate = difference(np.arange(len(frame)))
    boots = np.array([difference(rng.integers(0, len(frame), len(frame))) for _ in range(n_boot)])
    low, high = _interval(boots, confidence)
    verdict = (
        f"prefers its own family's stories ({estimate:+.2f} sd more than people)"
        if low > 0
        else f"no self-preference found ({estimate:+.2f} sd)"
    )
    return [
        _row(
            "self_preference",
            criterion,
            "z_gap_own_minus_others",
            estimate,
            (low, high),
            len(frame),
            verdict,
        )
    ]


def _z(values: np.ndarray) -> np.ndarray:
    sd = float(values.std())
    standard: np.ndarray = (values - float(values.mean())) / (sd if sd > 0 else 1.0)
    return standard


def _perturbations(
    criterion: str,
    group: pd.DataFrame,
    perturbed: Sequence[Story],
    judged: Sequence[Judgment],
    skipped: list[str],
) -> list[dict[str, Any]]:
    """Per technique: how often the judge scores the perturbed story below its original
    (destroying techniques), or how far it moves (meaning-preserving ones)."""
    from storyeval.perturb.base import get_technique

    if not perturbed:
        return []
    original = dict(zip(group["item_id"], group["value"], strict=True))
    scored = {j.item_id: float(j.value) for j in judged if j.criterion == criterion}
    spread = float(group["value"].std()) or 1.0
    changes: dict[str, list[float]] = {}
    for story in perturbed:
        source = str(story.extra.get("source_id") or "")
        if source in original and story.id in scored:
            for name in story.extra.get("techniques") or []:
                changes.setdefault(str(name), []).append(scored[story.id] - original[source])
    if not changes:
        skipped.append(
            f"perturbations ({criterion}): no perturbed story with the judge's answer and its original's"
        )
        return []
    rows = []
    for name, values in changes.items():
        moved = np.array(values)
        if get_technique(name).suite.startswith("invariance"):
            shift = float(np.abs(moved).mean()) / spread
            verdict = f"{'robust to' if shift <= ROBUST_SD else 'moved by'} {name} ({shift:.2f} sd on average)"
            rows.append(
                _row(
                    f"perturbation:{name}",
                    criterion,
                    "mean_abs_change_sd",
                    shift,
                    (math.nan, math.nan),
                    len(moved),
                    verdict,
                )
            )
        else:
            lower = float((moved < 0).mean())
            verdict = (
                f"{'detects' if lower >= DETECTS else 'misses'} {name} (lower for {lower:.0%})"
            )
            rows.append(
                _row(
                    f"perturbation:{name}",
                    criterion,
                    "share_scored_lower",
                    lower,
                    (math.nan, math.nan),
                    len(moved),
                    verdict,
                )
            )
    return rows


def _position(
    comparisons: Sequence[dict[str, Any]], confidence: float, skipped: list[str]
) -> list[dict[str, Any]]:
    """The share of decided comparisons won by the story shown first (exact binomial
    interval); 0.5 when the judge has no position bias."""
    from scipy.stats import binomtest

    if not comparisons:
        skipped.append("position bias: no pairwise run (--comparisons)")
        return []
    frame = pd.DataFrame(comparisons)
    if "first" not in frame:
        skipped.append("position bias: the comparisons do not say which story was shown first")
        return []
    rows = []
    for criterion, group in frame.groupby("criterion", sort=False):
        decided = group[group["winner"] != "tie"]
        wins, n = int((decided["winner"] == decided["first"]).sum()), len(decided)
        if not n:
            continue
        test = binomtest(wins, n, 0.5)
        interval = test.proportion_ci(confidence_level=confidence, method="exact")
        share = wins / n
        verdict = (
            f"favours the {'first' if share > 0.5 else 'second'} position ({share:.0%} first)"
            if test.pvalue < 1 - confidence
            else f"no position bias found ({share:.0%} first)"
        )
        rows.append(
            _row(
                "position_bias",
                str(criterion),
                "first_position_wins",
                share,
                (float(interval.low), float(interval.high)),
                n,
                verdict,
            )
        )
    return rows


def read_audit(directory: str | Path) -> JudgeAudit:
    """The audit :func:`write_audit` wrote in ``directory`` (its checks from ``audit.csv``,
    what was not checked from ``audit.md``, the signature from the checks).

    Raises
    ------
    StoryevalError
        When the directory holds no audit.
    """
    folder = Path(directory)
    if not (folder / "audit.csv").is_file():
        raise StoryevalError(f"{folder}: no audit.csv (write one with storyeval judge-audit)")
    checks = pd.read_csv(folder / "audit.csv")
    signature = None
    if "signature" in checks.columns and len(checks):
        signature = Signature.parse(str(checks["signature"].iloc[0]))
    skipped: list[str] = []
    markdown = folder / "audit.md"
    if markdown.is_file():
        section = markdown.read_text(encoding="utf-8").partition("## Not checked")[2]
        for line in section.splitlines():
            if line.startswith("#"):
                break
            if line.startswith("- "):
                skipped.append(line[2:])
    return JudgeAudit(checks, skipped, signature)


def write_audit(audit: JudgeAudit, directory: str | Path) -> list[Path]:
    """``audit.csv`` (the checks) and ``audit.md`` (the verdicts, the table and what was not
    checked), written atomically."""
    from storyeval.base.io import claim_output_directory, write_table, write_text_atomic
    from storyeval.base.markdown import Document

    folder = claim_output_directory(directory, "judge audit")
    write_table(folder / "audit.csv", audit.checks)
    doc = Document()
    doc.heading(1, "Judge audit")
    doc.bullets(audit.verdicts())
    if not audit.checks.empty:
        shown = audit.checks.drop(columns=["verdict", "signature"], errors="ignore")
        doc.table(list(shown.columns), shown.itertuples(index=False))
    if audit.skipped:
        doc.heading(2, "Not checked")
        doc.bullets(audit.skipped)
    if audit.signature is not None:
        doc.heading(2, "Signature")
        doc.paragraph(f"`{audit.signature.render()}`")
    write_text_atomic(folder / "audit.md", doc.render())
    return [folder / "audit.csv", folder / "audit.md"]
