"""Rater aggregation, agreement and the human ceiling: parity with the literature and with
krippendorff, statsmodels and pingouin."""

from __future__ import annotations

import math
import warnings

import krippendorff
import numpy as np
import pandas as pd
import pingouin
import pytest
from scipy import stats
from statsmodels.stats.inter_rater import fleiss_kappa

from metahelpers import JUDGMENTS, STORIES
from storyeval.corpus import read_judgments
from storyeval.meta import (
    DataCoverageWarning,
    DegenerateInputWarning,
    aggregate_ratings,
    agreement,
    human_ceiling,
)
from storyeval.meta.agreement import alpha_resampled, fleiss_kappa_resampled, icc_intervals

NAN = np.nan
# Krippendorff (2011), "Computing Krippendorff's alpha-reliability", section C: 4 observers,
# 12 units, values 1-5, missing data.
KRIPPENDORFF_2011 = [
    [1, 2, 3, 3, 2, 1, 4, 1, 2, NAN, NAN, NAN],
    [1, 2, 3, 3, 2, 2, 4, 1, 2, 5, NAN, 3],
    [NAN, 3, 3, 3, 2, 3, 4, 2, 2, 5, 1, NAN],
    [1, 2, 3, 3, 2, 4, 4, 1, 2, 5, 1, NAN],
]
# Fleiss (1971) as worked in Wikipedia's "Fleiss' kappa" article: 10 subjects, 14 raters,
# 5 categories (counts per category); kappa = 0.210.
FLEISS_EXAMPLE = [
    [0, 0, 0, 0, 14],
    [0, 2, 6, 4, 2],
    [0, 0, 3, 5, 6],
    [0, 3, 9, 2, 0],
    [2, 2, 8, 1, 1],
    [7, 7, 0, 0, 0],
    [3, 2, 6, 3, 0],
    [2, 5, 3, 2, 2],
    [6, 5, 2, 1, 0],
    [0, 2, 2, 3, 7],
]
# Shrout & Fleiss (1979), Table 2: 6 targets rated by 4 judges; their Table 4 gives
# ICC(1,1) = .17, ICC(2,1) = .29, ICC(3,1) = .71, ICC(1,4) = .44, ICC(2,4) = .62, ICC(3,4) = .91.
SHROUT_FLEISS = [
    [9, 2, 5, 8],
    [6, 1, 3, 2],
    [8, 4, 6, 8],
    [7, 1, 2, 6],
    [10, 5, 6, 9],
    [6, 2, 4, 7],
]


def _long(matrix, criterion="q"):
    rows = []
    for r, values in enumerate(matrix):
        for i, value in enumerate(values):
            if not (isinstance(value, float) and math.isnan(value)):
                rows.append(
                    {
                        "item_id": f"u{i:02d}",
                        "rater_id": f"c{r}",
                        "criterion": criterion,
                        "value": value,
                    }
                )
    return pd.DataFrame(rows)


def test_krippendorff_alpha_reproduces_the_published_example():
    """Krippendorff (2011): nominal .743, ordinal .815, interval .849."""
    out = agreement(_long(KRIPPENDORFF_2011), statistics=["alpha"], n_boot=300, seed=1)
    estimates = out.set_index("method")["estimate"]
    assert estimates["krippendorff_alpha_nominal"] == pytest.approx(0.743, abs=5e-4)
    assert estimates["krippendorff_alpha_ordinal"] == pytest.approx(0.815, abs=5e-4)
    assert estimates["krippendorff_alpha_interval"] == pytest.approx(0.849, abs=5e-4)
    data = np.array(KRIPPENDORFF_2011, dtype=float)
    for level in ("nominal", "ordinal", "interval"):
        assert estimates[f"krippendorff_alpha_{level}"] == pytest.approx(
            krippendorff.alpha(reliability_data=data, level_of_measurement=level), abs=1e-12
        )
    row = out.iloc[0]
    assert row["n"] == 11 and row["n_raters"] == 4 and row["n_ratings"] == 41
    assert (out["ci_low"] <= out["estimate"]).all() and (out["estimate"] <= out["ci_high"]).all()
    assert "resample:items" in row["signature"] and "bootstrap:300" in row["signature"]


@pytest.mark.parametrize("level", ["nominal", "ordinal", "interval"])
def test_vectorised_alpha_bootstrap_matches_the_package(level):
    rng = np.random.default_rng(9)
    data = rng.integers(1, 6, (4, 40)).astype(float)
    data[rng.random(data.shape) < 0.3] = np.nan
    data = data[:, np.isfinite(data).sum(axis=0) >= 2]
    domain = np.unique(data[np.isfinite(data)])
    idx = rng.integers(0, data.shape[1], (20, data.shape[1]))
    weights = np.zeros((20, data.shape[1]))
    np.add.at(weights, (np.repeat(np.arange(20), data.shape[1]), idx.ravel()), 1.0)
    ours = alpha_resampled(data, weights, level=level, domain=domain)
    ref = [
        krippendorff.alpha(
            reliability_data=data[:, i], level_of_measurement=level, value_domain=domain
        )
        for i in idx
    ]
    np.testing.assert_allclose(ours, ref, atol=1e-12)


def test_fleiss_kappa_reproduces_the_worked_example():
    rows = []
    for i, counts in enumerate(FLEISS_EXAMPLE):
        values = [c + 1 for c, k in enumerate(counts) for _ in range(k)]
        rows += [
            {"item_id": f"s{i}", "rater_id": f"r{r}", "criterion": "q", "value": v}
            for r, v in enumerate(values)
        ]
    out = agreement(pd.DataFrame(rows), statistics=["fleiss"], n_boot=200)
    row = out.iloc[0]
    assert row["method"] == "fleiss_kappa"
    assert row["estimate"] == pytest.approx(0.210, abs=5e-4)
    assert row["estimate"] == pytest.approx(fleiss_kappa(np.array(FLEISS_EXAMPLE)), abs=1e-12)
    assert row["ci_low"] < row["estimate"] < row["ci_high"]
    # The vectorised resampled kappa equals statsmodels on the resampled table.
    counts = np.array(FLEISS_EXAMPLE, dtype=float)
    idx = np.random.default_rng(1).integers(0, 10, (15, 10))
    weights = np.zeros((15, 10))
    np.add.at(weights, (np.repeat(np.arange(15), 10), idx.ravel()), 1.0)
    np.testing.assert_allclose(
        fleiss_kappa_resampled(counts, weights), [fleiss_kappa(counts[i]) for i in idx], atol=1e-12
    )


def test_icc_reproduces_shrout_and_fleiss_and_pingouin():
    long = pd.DataFrame(
        [
            {"item_id": f"t{i}", "rater_id": f"j{j}", "criterion": "q", "value": v}
            for i, row in enumerate(SHROUT_FLEISS)
            for j, v in enumerate(row)
        ]
    )
    out = agreement(long, statistics=["icc"]).set_index("method")
    published = {
        "icc1": 0.17,
        "icc2": 0.29,
        "icc3": 0.71,
        "icc1k": 0.44,
        "icc2k": 0.62,
        "icc3k": 0.91,
    }
    for name, value in published.items():
        assert out.loc[name, "estimate"] == pytest.approx(value, abs=0.005)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # pingouin's own pandas deprecation warning
        reference = pingouin.intraclass_corr(
            data=long, targets="item_id", raters="rater_id", ratings="value"
        ).set_index("Type")
    names = {
        "ICC(1,1)": "icc1",
        "ICC(A,1)": "icc2",
        "ICC(C,1)": "icc3",
        "ICC(1,k)": "icc1k",
        "ICC(A,k)": "icc2k",
        "ICC(C,k)": "icc3k",
    }
    for type_, name in names.items():
        assert out.loc[name, "estimate"] == pytest.approx(reference.loc[type_, "ICC"], abs=1e-12)
        assert out.loc[name, "p_value"] == pytest.approx(reference.loc[type_, "pval"], rel=1e-9)
        low, high = reference.loc[type_, "CI95"]
        assert out.loc[name, "ci_low"] == pytest.approx(low, abs=0.006)  # pingouin rounds to .01
        assert out.loc[name, "ci_high"] == pytest.approx(high, abs=0.006)
    wider = icc_intervals(np.array(SHROUT_FLEISS, dtype=float), confidence=0.99)
    assert wider["icc3"][0] < out.loc["icc3", "ci_low"]


def test_percent_full_agreement_hand_worked():
    long = pd.DataFrame(
        {
            "item_id": list("aabbccdd"),
            "rater_id": ["r1", "r2"] * 4,
            "criterion": "q",
            "value": [1, 1, 2, 2, 3, 3, 1, 2],
        }
    )
    out = agreement(long, statistics=["full_agreement"])
    assert out["estimate"].iloc[0] == 75.0  # 3 of 4 items


def test_example_judgments_agreement_per_criterion():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = agreement(
            read_judgments(JUDGMENTS), statistics=["alpha"], alpha_levels=["ordinal"], n_boot=100
        )
    assert list(out["criterion"]) == ["coherence", "grammar", "likability", "relevance"]
    assert (out["n"] == 180).all() and (out["n_raters"] == 3).all()
    assert out["estimate"].between(0, 1).all()


def test_degenerate_agreement_is_nan_with_a_warning():
    long = pd.DataFrame(
        {
            "item_id": list("aabb"),
            "rater_id": ["r1", "r2"] * 2,
            "criterion": "q",
            "value": [4, 4, 4, 4],
        }
    )
    with pytest.warns(DegenerateInputWarning, match="same value"):
        out = agreement(long, statistics=["alpha", "fleiss", "icc"])
    assert out["estimate"].isna().all()
    single = pd.DataFrame(
        {"item_id": list("abc"), "rater_id": "r1", "criterion": "q", "value": [1, 2, 3]}
    )
    with pytest.warns(DegenerateInputWarning, match="no item has 2 or more ratings"):
        assert agreement(single, statistics=["alpha"])["estimate"].isna().all()


def test_fleiss_leaves_out_items_with_another_number_of_ratings():
    long = _long(KRIPPENDORFF_2011)
    with pytest.warns(DataCoverageWarning, match="same number of ratings"):
        row = agreement(long, statistics=["fleiss"], n_boot=0).iloc[0]
    assert row["n"] == 8  # units 2-9 are rated by all 4 observers (the modal count)


def test_aggregation_mean_and_majority():
    long = pd.DataFrame(
        {
            "item_id": ["a"] * 3 + ["b"] * 4,
            "rater_id": list("xyzwxyz"),
            "criterion": "ok",
            "value": [1, 1, 0, 1, 1, 0, 0],
        }
    )
    with pytest.warns(DataCoverageWarning, match="tied"):
        majority = aggregate_ratings(long, method="majority")["ok"]
    assert majority["a"] == 1.0 and math.isnan(majority["b"])
    assert aggregate_ratings(long)["ok"].tolist() == pytest.approx([2 / 3, 0.5])
    with pytest.raises(ValueError, match="mean, median, majority"):
        aggregate_ratings(long, method="mode")


def test_human_ceiling_each_rater_against_the_others():
    judgments = pd.DataFrame([j.to_dict() for j in read_judgments(JUDGMENTS)])
    from storyeval.corpus import prompt_id, read_stories

    stories = read_stories(STORIES)
    items = pd.DataFrame(
        {"system": [s.system for s in stories], "prompt_id": [prompt_id(s) for s in stories]},
        index=pd.Index([s.id for s in stories], name="item_id"),
    )
    out = human_ceiling(
        judgments,
        items=items,
        criteria=["coherence"],
        levels=["pooled", "system"],
        methods=["pearson"],
        n_boot=100,
    )
    wide = judgments[judgments.criterion == "coherence"].pivot(
        index="item_id", columns="rater_id", values="value"
    )
    expected = stats.pearsonr(wide["r1"], wide[["r2", "r3"]].mean(axis=1)).statistic
    row = out[(out.rater == "r1") & (out.level == "pooled")].iloc[0]
    assert row["estimate"] == pytest.approx(expected, abs=1e-12)
    assert row["ci_low"] < row["estimate"] < row["ci_high"]
    summary = out[(out.rater == "mean") & (out.level == "pooled")].iloc[0]
    per_rater = out[(out.rater != "mean") & (out.level == "pooled")]["estimate"]
    assert summary["estimate"] == pytest.approx(per_rater.mean())
    assert summary["n"] == 3 and summary["metric"] == "human ceiling"
    system_row = out[(out.rater == "r2") & (out.level == "system")].iloc[0]
    assert system_row["n"] == 3


def test_human_ceiling_skips_raters_with_few_items():
    long = pd.DataFrame(
        {
            "item_id": ["a", "b", "c", "a", "b", "c", "a"],
            "rater_id": ["r1"] * 3 + ["r2"] * 3 + ["r3"],
            "criterion": "q",
            "value": [1, 2, 3, 1, 3, 2, 2],
        }
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = human_ceiling(long, min_items=3, methods=["spearman"], n_boot=0)
    assert set(out["rater"]) == {"r1", "r2", "mean"}
    assert any("left out of the human ceiling" in str(w.message) for w in caught)
