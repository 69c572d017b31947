"""Analysis of judgments: parity with independent implementations (pingouin, scipy,
Krippendorff's worked example) and hand-computed detection, preference and filtering cases."""

from __future__ import annotations

import math
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from storyeval.corpus import Judgment, write_judgments
from storyeval.human.analysis import (
    AnalysisError,
    agreement,
    analyse_judgments,
    filter_raters,
    judgments_table,
    krippendorff_alpha,
)
from storyeval.human.protocols.detection import detection_metrics

RNG = np.random.default_rng(7)


def ratings(
    groups: dict[str, list[float]], *, criterion: str = "coherence", raters: int = 3
) -> list[Judgment]:
    out = []
    for condition, values in groups.items():
        for i, value in enumerate(values):
            out.append(
                Judgment(
                    f"{condition}-{i // raters}",
                    f"r{i % raters}",
                    criterion,
                    float(value),
                    time_s=60.0,
                    condition=condition,
                )
            )
    return out


def test_welch_matches_pingouin():
    """Karpinska et al. (2021), appendix D reports Welch t-tests (t, df, 95% CI, p); pingouin is independent."""
    import pingouin

    human = RNG.integers(2, 6, 120).astype(float).tolist()
    model = RNG.integers(1, 5, 150).astype(float).tolist()
    result = analyse_judgments(ratings({"human": human, "model": model}), n_boot=0)
    row = result.tests.iloc[0]
    reference = pingouin.ttest(human, model, correction=True).iloc[0]
    assert row["comparison"] == "human vs model"
    assert row["statistic"] == pytest.approx(reference["T"])
    assert row["df"] == pytest.approx(reference["dof"])
    assert row["p_value"] == pytest.approx(
        reference["p_val"] if "p_val" in reference else reference["p-val"]
    )
    low, high = reference["CI95"] if "CI95" in reference else reference["CI95%"]
    assert (row["ci_low"], row["ci_high"]) == (
        pytest.approx(low, abs=0.005),
        pytest.approx(high, abs=0.005),
    )
    assert row["estimate"] == pytest.approx(np.mean(human) - np.mean(model))


@pytest.mark.filterwarnings("ignore:The inplace keyword")
def test_anova_and_tukey_match_pingouin():
    import pingouin

    groups = {
        "human": RNG.normal(4.0, 0.9, 60).round().clip(1, 5).tolist(),
        "model-a": RNG.normal(3.5, 1.0, 60).round().clip(1, 5).tolist(),
        "model-b": RNG.normal(3.1, 1.1, 60).round().clip(1, 5).tolist(),
    }
    result = analyse_judgments(ratings(groups), n_boot=0)
    frame = pd.DataFrame(
        [(g, v) for g, vals in groups.items() for v in vals], columns=["group", "value"]
    )
    aov = pingouin.anova(data=frame, dv="value", between="group").iloc[0]
    anova = result.tests[result.tests["method"].str.startswith("one-way ANOVA")].iloc[0]
    assert anova["statistic"] == pytest.approx(aov["F"])
    assert (anova["df"], anova["df2"]) == (2.0, 177.0)
    assert anova["p_value"] == pytest.approx(aov["p_unc"] if "p_unc" in aov else aov["p-unc"])
    assert anova["estimate"] == pytest.approx(
        aov["np2"]
    )  # one-way: eta squared = partial eta squared
    tukey = pingouin.pairwise_tukey(data=frame, dv="value", between="group")
    ours = result.tests[result.tests["method"].str.startswith("Tukey")].set_index("comparison")
    for _, ref in tukey.iterrows():
        row = ours.loc[f"{ref['A']} vs {ref['B']}"]
        assert row["estimate"] == pytest.approx(ref["diff"])
        assert row["p_value"] == pytest.approx(
            ref["p_tukey"] if "p_tukey" in ref else ref["p-tukey"], abs=1e-3
        )


def test_krippendorff_alpha_reproduces_the_published_example():
    """Krippendorff (2011), "Computing Krippendorff's alpha-reliability": 4 observers, 12 units,
    missing values; alpha = 0.743 (nominal), 0.815 (ordinal), 0.849 (interval)."""
    n = math.nan
    data = [
        [1, 2, 3, 3, 2, 1, 4, 1, 2, n, n, n],
        [1, 2, 3, 3, 2, 2, 4, 1, 2, 5, n, 3],
        [n, 3, 3, 3, 2, 3, 4, 2, 2, 5, 1, n],
        [1, 2, 3, 3, 2, 4, 4, 1, 2, 5, 1, n],
    ]
    long = pd.DataFrame(
        [
            {"rater_id": f"o{r}", "item_id": f"u{u:02d}", "value": v}
            for r, row in enumerate(data)
            for u, v in enumerate(row)
            if not math.isnan(v)
        ]
    )
    assert round(krippendorff_alpha(long, level="nominal")[0], 3) == 0.743
    assert round(krippendorff_alpha(long, level="ordinal")[0], 3) == 0.815
    assert round(krippendorff_alpha(long, level="interval")[0], 3) == 0.849


def test_agreement_is_undefined_without_two_ratings_per_item():
    table = agreement(
        judgments_table([Judgment("a", "r1", "c", 1.0), Judgment("b", "r2", "c", 2.0)]), n_boot=0
    )
    assert table["estimate"].isna().all()


def detection_judgments() -> list[Judgment]:
    # truth: h1, h2 human; m1, m2 machine. Ratings 1-2 = human guess, 3-4 = machine guess.
    rows = [
        ("h1", "r1", 1),
        ("h1", "r2", 2),
        ("h2", "r1", 3),
        ("h2", "r2", 2),
        ("m1", "r1", 4),
        ("m1", "r2", 2),
        ("m2", "r1", 3),
        ("m2", "r2", 1),
    ]
    return [
        Judgment(
            item,
            rater,
            "source",
            float(v),
            time_s=50.0,
            condition="human" if item[0] == "h" else "gpt",
            extra={"protocol": "detection", "truth": "human" if item[0] == "h" else "machine"},
        )
        for item, rater, v in rows
    ]


def test_detection_metrics_by_hand():
    """Table 6.1 metrics: TP = 2 (m1 r1, m2 r1), FP = 1 (h2 r1), FN = 2 (m1 r2, m2 r2)."""
    table = detection_metrics(judgments_table(detection_judgments())).set_index("condition")
    row = table.loc["all"]
    assert row["accuracy"] == pytest.approx(5 / 8)
    assert row["precision"] == pytest.approx(2 / 3) and row["recall"] == pytest.approx(2 / 4)
    assert row["f1"] == pytest.approx(2 * (2 / 3) * 0.5 / (2 / 3 + 0.5))
    assert row["pct_human"] == pytest.approx(100 * 5 / 8)
    assert row["pct_confident"] == pytest.approx(100 * 3 / 8)  # ratings 1 or 4: h1 r1, m1 r1, m2 r2


def test_pairwise_preferences_use_an_exact_binomial_test():
    from scipy.stats import binomtest

    values = [1.0] * 14 + [0.0] * 4 + [0.5] * 2
    js = [
        Judgment(
            f"p{i}",
            f"r{i % 3}",
            "interest",
            v,
            time_s=45.0,
            condition="a vs b",
            extra={"protocol": "pairwise", "system_a": "a", "system_b": "b"},
        )
        for i, v in enumerate(values)
    ]
    result = analyse_judgments(js, n_boot=0)
    row = result.pairwise.iloc[0]
    assert (row["wins_a"], row["wins_b"], row["ties"], row["n"]) == (14, 4, 2, 18)
    assert row["p_value"] == pytest.approx(binomtest(14, 18, 0.5).pvalue)
    assert row["estimate"] == pytest.approx(14 / 18)


def test_the_time_filter_reports_what_it_removes():
    js = []
    for rater, seconds in (("slow", 55.0), ("fast", 12.0), ("mixed", 41.0)):
        for item in range(4):
            for criterion in ("grammar", "coherence"):
                js.append(
                    Judgment(
                        f"i{item}",
                        rater,
                        criterion,
                        3.0 + item % 2,
                        time_s=seconds,
                        condition="human" if item < 2 else "model",
                        extra={"page": f"{rater}-{item}"},
                    )
                )
    js.append(Judgment("i9", "untimed", "grammar", 2.0, condition="model"))
    kept, report, raters = filter_raters(judgments_table(js), min_median_time_s=40)
    step = report.set_index("step").loc["median time per item"]
    assert (step["raters_removed"], step["judgments_removed"], step["raters_without_time"]) == (
        1,
        8,
        1,
    )
    assert set(kept["rater_id"]) == {"slow", "mixed", "untimed"}
    assert raters.set_index("rater_id").loc["fast", "reason"] == "median time per item < 40 s"
    assert raters.set_index("rater_id").loc["slow", "pages"] == 4, (
        "a page counts once over criteria"
    )
    with pytest.raises(AnalysisError, match="Pass a lower --min-median-time"):
        analyse_judgments(js[:-1], min_median_time_s=3600)  # every timed rater is too fast


def test_cli_writes_the_tables(tmp_path):
    path = tmp_path / "judgments.jsonl"
    write_judgments(path, ratings({"human": [5, 4, 4, 5, 3, 4], "model": [2, 3, 3, 1, 2, 2]}))
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "storyeval",
            "study",
            "analyse",
            "--judgments",
            str(path),
            "--bootstrap",
            "50",
            "-o",
            str(tmp_path / "out"),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    for name in ("summary", "agreement", "tests", "filtering", "raters"):
        assert (tmp_path / "out" / f"{name}.csv").exists()
    tests = pd.read_csv(tmp_path / "out" / "tests.csv")
    assert {"comparison", "statistic", "df", "p_value", "ci_low", "ci_high", "method"} <= set(
        tests.columns
    )
    summary = pd.read_csv(tmp_path / "out" / "summary.csv")
    assert summary.set_index("condition").loc["human", "mean"] == pytest.approx(25 / 6)
    assert summary["signature"].iloc[0].startswith("study_analysis|min_median_time_s:none")
    filtering = pd.read_csv(tmp_path / "out" / "filtering.csv").set_index("step")
    assert filtering.loc["median time per item", "threshold"] == "disabled"
    assert filtering.loc["median time per item", "note"].startswith("not applied; 0 rater(s)")
    strict = subprocess.run(
        [
            sys.executable,
            "-m",
            "storyeval",
            "study",
            "analyse",
            "--judgments",
            str(path),
            "--min-median-time",
            "90",
            "--bootstrap",
            "0",
            "-o",
            str(tmp_path / "strict"),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert strict.returncode == 2 and "removed 3 of 3 raters" in strict.stderr


def test_cli_takes_conditions_from_the_story_file(examples_dir, tmp_path):
    """The example judgments have no condition: --stories gives each its story's system."""
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "storyeval",
            "study",
            "analyse",
            "--judgments",
            str(examples_dir / "judgments.jsonl"),
            "--stories",
            str(examples_dir / "stories.jsonl"),
            "--bootstrap",
            "0",
            "-o",
            str(tmp_path / "out"),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    summary = pd.read_csv(tmp_path / "out" / "summary.csv")
    assert set(summary["condition"]) == {"human", "smollm2-p0.9", "smollm2-k40-t0.7"}
    assert summary.groupby("criterion")["n"].sum().eq(540).all()
    tests = pd.read_csv(tmp_path / "out" / "tests.csv")
    assert (tests["method"].str.startswith("Tukey")).sum() == 4 * 3
