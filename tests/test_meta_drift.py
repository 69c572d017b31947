"""Quality drift, subset correlations and dataset drift (Guan and Huang 2020, section 4.4)."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from metahelpers import JUDGMENTS, STORIES, example_scores, write_example_scores
from storyeval.base.errors import DataFileError
from storyeval.corpus import read_judgments
from storyeval.meta import (
    build_meta_table,
    dataset_drift,
    load_drift_runs,
    load_meta_table,
    quality_drift,
    subset_correlations,
)
from storyeval.meta.drift import infer_levels, quality_levels, sampling_probability


def _union_like_table(n: int = 400, seed: int = 0):
    """Stories judged by 7 annotators with binary labels (as in UNION's ROC test set): the
    human score is k/7; a metric tracks it with noise."""
    rng = np.random.default_rng(seed)
    k = rng.integers(0, 8, n)
    items = [f"s{i:03d}" for i in range(n)]
    judgments = []
    for item, level in zip(items, k, strict=True):
        labels = [1] * int(level) + [0] * (7 - int(level))
        judgments += [
            {"item_id": item, "rater_id": f"a{j + 1}", "criterion": "reasonable", "value": v}
            for j, v in enumerate(labels)
        ]
    metric = k / 7 + rng.normal(0, 0.3, n)
    scores = pd.DataFrame({"item_id": items, "metric": "union", "value": metric})
    return build_meta_table(scores, pd.DataFrame(judgments)), k


def test_levels_and_sampling_probability_follow_the_paper():
    """Guan and Huang (2020): scores are k/7 (seven annotators), 8 sets I = 1..8, and set I keeps a story
    of score k/7 with probability 1 / (|I - k| + 1)."""
    table, k = _union_like_table()
    levels, big_k = quality_levels(table.human["reasonable"].to_numpy(), low=0, high=1)
    assert big_k == 7
    np.testing.assert_array_equal(np.sort(levels), np.sort(k))
    assert infer_levels(np.array([0, 3, 6]) / 12) == 4
    assert sampling_probability(1, 0) == 0.5 and sampling_probability(8, 7) == 0.5
    assert sampling_probability(4, 4) == 1.0 and sampling_probability(1, 7) == pytest.approx(1 / 7)


def test_quality_drift_sets_have_the_specified_composition():
    table, _ = _union_like_table()
    results, composition = quality_drift(
        table, criterion="reasonable", low=0, high=1, repeats=200, seed=1
    )
    assert sorted(results["set"].unique()) == list(range(1, 9))
    assert list(composition.columns) == ["set", "level", "probability", "items", "expected"]
    # Expected set sizes against the mean sampled sizes (200 repeats): within 3 %.
    for set_index in range(1, 9):
        expected = composition.loc[composition["set"] == set_index, "expected"].sum()
        observed = results.loc[results["set"] == set_index, "n"].iloc[0]
        assert observed == pytest.approx(expected, rel=0.03)
    row = results[results["set"] == 4].iloc[0]
    assert row["repeats"] == 200 and row["undefined"] == 0
    assert row["min"] <= row["estimate"] <= row["max"] and row["sd"] > 0
    from storyeval.base.signature import Signature

    fields = Signature.parse(row["signature"]).fields
    assert fields["p"] == "1/(|I-k|+1)" and fields["levels"] == "7" and fields["repeats"] == "200"


def test_quality_drift_is_seeded_and_uses_the_requested_sets():
    table, _ = _union_like_table(seed=3)
    a, _ = quality_drift(
        table,
        criterion="reasonable",
        sets=[1, 8],
        repeats=5,
        seed=9,
        methods=["pearson", "kendall"],
    )
    b, _ = quality_drift(
        table,
        criterion="reasonable",
        sets=[1, 8],
        repeats=5,
        seed=9,
        methods=["pearson", "kendall"],
    )
    pd.testing.assert_frame_equal(a, b)
    assert len(a) == 4
    c, _ = quality_drift(table, criterion="reasonable", sets=[1, 8], repeats=5, seed=10)
    assert not np.allclose(a[a.method == "pearson"]["estimate"], c["estimate"])


def test_quality_drift_on_likert_means_rounds_with_a_warning():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        table = build_meta_table(list(example_scores()), read_judgments(JUDGMENTS))
    # Means of 3 ratings on 1..5 are multiples of 1/12 of the scale: K = 12 is inferred.
    levels, k = quality_levels(table.human["coherence"].to_numpy(), low=1, high=5)
    assert k == 12 and levels.min() >= 0 and levels.max() <= 12
    with pytest.warns(Warning, match="rounded"):
        quality_levels(table.human["coherence"].to_numpy(), n_levels=4, low=1, high=5)
    with pytest.raises(ValueError, match="outside the scale"):
        quality_levels(table.human["coherence"].to_numpy(), low=2, high=5)


def test_subsets_with_a_fixed_part_like_union_table_7(tmp_path):
    """Guan and Huang (2020) Table 7: each evaluation set is the reasonable stories plus the stories of one
    error type. Subsets of a story field, with one value added to every subset."""
    stories = [json.loads(line) for line in STORIES.read_text().splitlines()]
    error_types = ["none", "repetition", "coherence", "conflict"]
    for i, story in enumerate(stories):
        story["error_type"] = "none" if story["system"] == "human" else error_types[1 + i % 3]
    path = tmp_path / "stories.jsonl"
    path.write_text("\n".join(json.dumps(s) for s in stories) + "\n")
    scores = write_example_scores(tmp_path / "scores.jsonl", with_groups=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        table = load_meta_table([scores], [JUDGMENTS], stories=path, item_fields=["error_type"])
        out = subset_correlations(
            table,
            "error_type",
            include_with_each="none",
            n_boot=50,
            metrics=["distinct2"],
            criteria=["coherence"],
        )
    assert list(out["subset"]) == [
        "(all)",
        "coherence + none",
        "conflict + none",
        "repetition + none",
    ]
    row = out[out["subset"] == "conflict + none"].iloc[0]
    mask = table.items["error_type"].isin(["conflict", "none"])
    expected = stats.pearsonr(
        table.metrics.loc[mask, "distinct2"], table.human.loc[mask, "coherence"]
    )
    assert row["estimate"] == pytest.approx(expected.statistic)
    assert row["n"] == int(mask.sum())
    assert row["subset_column"] == "error_type"
    with pytest.raises(ValueError, match="no item column 'genre'"):
        subset_correlations(table, "genre")


def test_subsets_by_system():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        table = build_meta_table(list(example_scores()), read_judgments(JUDGMENTS))
        out = subset_correlations(
            table, "system", include_all=False, n_boot=0, methods=["spearman"], metrics=["length"]
        )
    assert set(out["subset"]) == {"human", "smollm2-k40-t0.7", "smollm2-p0.9"}
    assert (out["n"] == 60).all()


def _write_run(tmp_path, name, noise, seed):
    rng = np.random.default_rng(seed)
    items = [f"{name}{i}" for i in range(60)]
    quality = rng.normal(0, 1, 60)
    scores = pd.DataFrame(
        {"item_id": items, "metric": "union", "value": quality + rng.normal(0, noise, 60)}
    )
    judg = pd.DataFrame(
        {
            "item_id": items,
            "rater_id": "mean",
            "criterion": "overall",
            "value": np.round(quality, 1),
        }
    )
    scores.to_csv(tmp_path / f"{name}_scores.csv", index=False)
    judg.to_csv(tmp_path / f"{name}_judgments.csv", index=False)


def test_dataset_drift_table(tmp_path):
    """Guan and Huang (2020) Table 6 layout: trained on one corpus, tested on the other, beside in-domain."""
    _write_run(tmp_path, "rocroc", 0.3, 1)
    _write_run(tmp_path, "wproc", 1.5, 1)
    _write_run(tmp_path, "wpwp", 0.4, 2)
    _write_run(tmp_path, "rocwp", 2.0, 2)
    spec = tmp_path / "drift.csv"
    spec.write_text(
        "train,test,scores,judgments\n"
        "roc,roc,rocroc_scores.csv,rocroc_judgments.csv\n"
        "wp,roc,wproc_scores.csv,wproc_judgments.csv\n"
        "wp,wp,wpwp_scores.csv,wpwp_judgments.csv\n"
        "roc,wp,rocwp_scores.csv,rocwp_judgments.csv\n"
    )
    out = dataset_drift(load_drift_runs(spec), methods=["pearson"], n_boot=50)
    assert list(out.columns[:3]) == ["train", "test", "setting"]
    cross = out[(out.train == "wp") & (out.test == "roc")].iloc[0]
    same = out[(out.train == "roc") & (out.test == "roc")].iloc[0]
    assert cross["setting"] == "cross-domain" and same["setting"] == "in-domain"
    assert cross["in_domain_estimate"] == pytest.approx(same["estimate"])
    assert cross["change"] == pytest.approx(cross["estimate"] - same["estimate"])
    assert cross["change"] < 0


def test_drift_spec_errors_name_the_line(tmp_path):
    spec = tmp_path / "bad.csv"
    spec.write_text("train,test,scores,judgments\nroc,roc,missing.csv,also.csv\n,wp,a,b\n")
    with pytest.raises(DataFileError) as info:
        load_drift_runs(spec)
    text = str(info.value)
    assert f"{spec}:2: scores file" in text and f"{spec}:3: missing field(s) train" in text
