"""Clark (2021), section 6.3, Table 6.2: detection accuracy compared between training arms.

Each training arm (no training, Instructions, Examples, Comparison) is its own detection study;
their judgments together give, per arm: the Table 6.1 statistics (accuracy, F1, precision,
recall, Krippendorff's alpha, % human, % confident), the mean per-rater accuracy, a two-sided
independent two-sample t test of per-rater accuracy against the baseline arm (no training),
its Bonferroni correction over the arms compared, Cohen's d, and Tukey's HSD adjusted p value
of the arm against the baseline over all arms (the thesis: Examples vs none, Tukey p < 0.003,
d = 0.25).

Examples
--------
>>> import pandas as pd
>>> rows = [
...     {"study": arm, "rater_id": f"{arm}{r}", "item_id": f"i{i}", "value": v,
...      "condition": "human" if i % 2 else "gpt3"}
...     for arm, good in (("none", 0), ("examples", 1))
...     for r in range(4)
...     for i in range(4)
...     for v in [(4.0 if i % 2 == 0 else 1.0) if (good or (r + i) % 2) else 2.0]
... ]
>>> table = compare_training_arms(pd.DataFrame(rows), baseline="none")
>>> table[["arm", "n_raters", "accuracy"]].to_dict("records")
[{'arm': 'none', 'n_raters': 4, 'accuracy': 0.75}, {'arm': 'examples', 'n_raters': 4, 'accuracy': 1.0}]
"""

from __future__ import annotations

import math
import warnings
from typing import Any

import numpy as np
import pandas as pd

from storyeval.base.stats import bonferroni
from storyeval.human.protocols.detection import detection_metrics, per_rater_accuracy


def _cohen_d(a: np.ndarray, b: np.ndarray) -> float:
    pooled = math.sqrt(
        ((len(a) - 1) * a.var(ddof=1) + (len(b) - 1) * b.var(ddof=1)) / (len(a) + len(b) - 2)
    )
    return float((a.mean() - b.mean()) / pooled) if pooled > 0 else math.nan


def _tukey_vs_baseline(samples: dict[str, np.ndarray], baseline: str) -> dict[str, float]:
    from scipy.stats import tukey_hsd

    names = list(samples)
    if len(names) < 2 or any(len(v) < 2 for v in samples.values()):
        return {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        result = tukey_hsd(*samples.values())
    base = names.index(baseline)
    return {name: float(result.pvalue[i, base]) for i, name in enumerate(names) if i != base}


def compare_training_arms(
    frame: pd.DataFrame,
    *,
    baseline: str,
    arm: str = "study",
    alpha: float = 0.05,
    tests: int | None = None,
) -> pd.DataFrame:
    """Table 6.2 from the detection judgments of every arm (``frame``: one row per judgment,
    with ``arm``, ``rater_id``, ``item_id``, ``value`` 1-4 and ``condition``, the system; a
    ``truth`` column when present). ``tests`` overrides the number of comparisons the
    Bonferroni correction counts (by default, the arms compared with the baseline)."""
    from scipy.stats import ttest_ind

    arms = list(dict.fromkeys(frame[arm].astype(str)))
    if baseline not in arms:
        raise ValueError(f"baseline {baseline!r} is not an arm; the arms are {', '.join(arms)}")
    if len(arms) < 2:
        raise ValueError("comparing training arms needs at least two arms")
    arms = [baseline, *[a for a in arms if a != baseline]]
    parts = {name: frame[frame[arm].astype(str) == name] for name in arms}
    samples = {name: per_rater_accuracy(part) for name, part in parts.items()}
    tukey = _tukey_vs_baseline(samples, baseline)
    rows: list[dict[str, Any]] = []
    for name in arms:
        metrics = detection_metrics(parts[name]).iloc[0]
        mine, base = samples[name], samples[baseline]
        statistic = p_value = d = math.nan
        if name != baseline and len(mine) >= 2 and len(base) >= 2:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                test = ttest_ind(mine, base)
            statistic, p_value = float(test.statistic), float(test.pvalue)
            d = _cohen_d(mine, base)
        rows.append(
            {
                "arm": name,
                "n_raters": len(mine),
                "n": int(metrics["n"]),
                **{k: metrics[k] for k in ("accuracy", "f1", "precision", "recall", "alpha")},
                "pct_human": metrics["pct_human"],
                "pct_confident": metrics["pct_confident"],
                "rater_accuracy": float(mine.mean()) if len(mine) else math.nan,
                "rater_sd": float(mine.std(ddof=1)) if len(mine) > 1 else math.nan,
                "statistic": statistic,
                "p_value": p_value,
                "cohen_d": d,
                "tukey_p": tukey.get(name, math.nan),
            }
        )
    table = pd.DataFrame(rows)
    compared = max(len(arms) - 1, 1) if tests is None else tests
    table["p_bonferroni"] = bonferroni(table["p_value"].tolist(), tests=compared)
    table["significant"] = table["p_bonferroni"] < alpha
    table["method"] = (
        f"per-rater accuracy vs {baseline}: two-sided independent t test, Bonferroni over "
        f"{compared} test(s); Tukey HSD over all arms"
    )
    return table
