"""Correlations at the pooled, story and system levels on the example corpus."""

from __future__ import annotations

import math
import random
import warnings

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from metahelpers import JUDGMENTS, STORIES, example_scores, write_example_scores
from storyeval.base.signature import Signature
from storyeval.corpus import Score, read_judgments, read_stories
from storyeval.meta import (
    DegenerateInputWarning,
    MetaInputError,
    build_meta_table,
    correlate,
    correlation_matrix,
    level_correlation,
    load_meta_table,
)
from storyeval.meta.correlation import CORRELATION_COLUMNS

SCIPY = {"pearson": stats.pearsonr, "spearman": stats.spearmanr, "kendall": stats.kendalltau}


@pytest.fixture(scope="module")
def table():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return build_meta_table(list(example_scores()), read_judgments(JUDGMENTS))


@pytest.fixture(scope="module")
def merged():
    """An independent join of the example scores and mean judgments with pandas."""
    scores = pd.DataFrame([{**s.to_dict(), "value": s.value} for s in example_scores()])
    wide = scores.pivot(index="item_id", columns="metric", values="value")
    judg = pd.DataFrame([j.to_dict() for j in read_judgments(JUDGMENTS)])
    human = judg.groupby(["item_id", "criterion"])["value"].mean().unstack()
    info = scores.drop_duplicates("item_id").set_index("item_id")[["system", "prompt_id"]]
    return wide.join(human).join(info)


@pytest.fixture(scope="module")
def result(table):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return correlate(table, n_boot=200, seed=7)


def test_table_shape_columns_and_signatures(table, result):
    assert list(result.columns[: len(CORRELATION_COLUMNS)]) == list(CORRELATION_COLUMNS)
    assert len(result) == 3 * 4 * 3 * 3  # metrics x criteria x levels x methods
    assert set(result["level"]) == {"pooled", "story", "system"}
    row = result[
        (result.metric == "bleu") & (result.level == "story") & (result.method == "kendall")
    ].iloc[0]
    sig = Signature.parse(row["signature"])
    assert sig.name == "correlation"
    assert sig.fields["level"] == "story" and sig.fields["tau"] == "b"
    assert sig.fields["bootstrap"] == "200" and sig.fields["seed"] == "7"
    assert sig.fields["resample"] == "prompts" and sig.fields["raters"] == "mean"
    assert row["metric_signature"].startswith("bleu|tokenize:13a")
    assert table.metric_signature("bleu") == row["metric_signature"]


@pytest.mark.parametrize("method", ["pearson", "spearman", "kendall"])
def test_pooled_level_equals_scipy_on_an_independent_join(result, merged, method):
    for metric in ("distinct2", "bleu"):
        row = result[
            (result.metric == metric)
            & (result.criterion == "coherence")
            & (result.level == "pooled")
            & (result.method == method)
        ].iloc[0]
        data = merged[[metric, "coherence"]].dropna()
        reference = SCIPY[method](data[metric], data["coherence"])
        assert row["estimate"] == pytest.approx(reference.statistic, abs=1e-12)
        assert row["p_value"] == pytest.approx(reference.pvalue, rel=1e-9)
        assert row["n"] == len(data) == (120 if metric == "bleu" else 180)
        assert row["ci_low"] < row["estimate"] < row["ci_high"]


@pytest.mark.parametrize("method", ["pearson", "spearman", "kendall"])
def test_story_level_is_the_mean_of_within_prompt_correlations(result, merged, method):
    """Hand computation: per prompt, correlate across its systems with scipy; skip prompts
    with fewer than 2 stories or without variance; average."""
    row = result[
        (result.metric == "distinct2")
        & (result.criterion == "likability")
        & (result.level == "story")
        & (result.method == method)
    ].iloc[0]
    values, skipped, items = [], 0, 0
    for _, group in merged.groupby("prompt_id"):
        group = group[["distinct2", "likability"]].dropna()
        if len(group) < 2 or group["distinct2"].nunique() < 2 or group["likability"].nunique() < 2:
            skipped += 1
            continue
        values.append(SCIPY[method](group["distinct2"], group["likability"]).statistic)
        items += len(group)
    assert row["estimate"] == pytest.approx(np.mean(values), abs=1e-12)
    assert (row["n_groups"], row["skipped"], row["n"]) == (len(values), skipped, items)
    assert row["ci_low"] <= row["estimate"] <= row["ci_high"]
    assert 0 < row["p_value"] <= 1


@pytest.mark.parametrize("method", ["pearson", "spearman", "kendall"])
def test_system_level_correlates_system_means(result, merged, method):
    row = result[
        (result.metric == "length")
        & (result.criterion == "grammar")
        & (result.level == "system")
        & (result.method == method)
    ].iloc[0]
    means = merged.groupby("system")[["length", "grammar"]].mean()
    reference = SCIPY[method](means["length"], means["grammar"])
    assert row["estimate"] == pytest.approx(reference.statistic, abs=1e-12)
    assert row["n"] == 3 and row["n_items"] == 180
    # Three systems: the exact p-value can be no smaller than 2 / 3! (never scipy's t-test 0).
    assert row["p_value"] >= 2 / 6 - 1e-12


def test_bleu_at_system_level_is_nan_with_a_warning(table):
    """Human stories have no reference, so BLEU exists for 2 systems: undefined, not invented."""
    with pytest.warns(DegenerateInputWarning, match="2 complete pair"):
        out = correlate(
            table,
            levels=["system"],
            methods=["pearson"],
            metrics=["bleu"],
            criteria=["coherence"],
            n_boot=50,
        )
    assert math.isnan(out["estimate"].iloc[0]) and math.isnan(out["ci_low"].iloc[0])


def test_seeded_bootstrap_is_reproducible_and_independent_of_other_rows(table):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        one = correlate(table, metrics=["distinct2"], criteria=["coherence"], n_boot=150, seed=3)
        again = correlate(table, metrics=["distinct2"], criteria=["coherence"], n_boot=150, seed=3)
        full = correlate(table, n_boot=150, seed=3)
        other = correlate(table, metrics=["distinct2"], criteria=["coherence"], n_boot=150, seed=4)
    pd.testing.assert_frame_equal(one, again)
    sub = full[(full.metric == "distinct2") & (full.criterion == "coherence")].reset_index(
        drop=True
    )
    pd.testing.assert_frame_equal(one, sub)
    assert not np.allclose(one["ci_low"], other["ci_low"])


def test_input_order_does_not_change_the_table():
    """Row order invariance, intervals included: items are sorted by id before resampling
    (metrics keep the order in which they first appear, so rows are compared by key)."""
    scores = list(example_scores())
    judgments = read_judgments(JUDGMENTS)
    shuffled_scores = scores[:]
    shuffled_judgments = judgments[:]
    random.Random(11).shuffle(shuffled_scores)
    random.Random(12).shuffle(shuffled_judgments)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        a = correlate(build_meta_table(scores, judgments), n_boot=100, criteria=["relevance"])
        b = correlate(
            build_meta_table(shuffled_scores, shuffled_judgments),
            n_boot=100,
            criteria=["relevance"],
        )
    keys = ["metric", "criterion", "level", "method"]
    pd.testing.assert_frame_equal(
        a.sort_values(keys).reset_index(drop=True), b.sort_values(keys).reset_index(drop=True)
    )


def test_systems_and_prompts_come_from_the_story_file(tmp_path):
    path = write_example_scores(tmp_path / "bare.jsonl", with_groups=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        bare = load_meta_table([path], [JUDGMENTS])
        with pytest.raises(MetaInputError, match="story level needs prompt ids"):
            correlate(bare, levels=["story"], n_boot=0)
        looked_up = load_meta_table([path], [JUDGMENTS], stories=STORIES)
        direct = build_meta_table(list(example_scores()), read_judgments(JUDGMENTS))
    pd.testing.assert_frame_equal(looked_up.items, direct.items)
    # A story without a prompt_id field gets an id derived from its prompt text.
    story = read_stories(STORIES)[0]
    story.extra.pop("prompt_id")
    from storyeval.corpus import prompt_id, prompt_key

    assert prompt_id(story) == prompt_key(story.prompt)


def test_story_level_skips_and_counts_prompts():
    # Prompt p1: 3 systems; p2: one story only; p3: no variance in the human rating.
    scores = pd.DataFrame(
        {
            "item_id": ["a1", "b1", "c1", "a2", "a3", "b3"],
            "metric": "m",
            "value": [0.1, 0.5, 0.9, 0.3, 0.2, 0.8],
            "system": ["A", "B", "C", "A", "A", "B"],
            "prompt_id": ["p1", "p1", "p1", "p2", "p3", "p3"],
        }
    )
    judgments = pd.DataFrame(
        {
            "item_id": ["a1", "b1", "c1", "a2", "a3", "b3"],
            "rater_id": "r",
            "criterion": "q",
            "value": [1, 3, 2, 4, 3, 3],
        }
    )
    table = build_meta_table(scores, judgments)
    with pytest.warns(DegenerateInputWarning, match="only one prompt contributes"):
        row = correlate(table, levels=["story"], methods=["spearman"], n_boot=50).iloc[0]
    assert row["estimate"] == pytest.approx(stats.spearmanr([0.1, 0.5, 0.9], [1, 3, 2]).statistic)
    assert (row["n_groups"], row["skipped"], row["n"]) == (1, 2, 3)
    assert math.isnan(row["ci_low"])  # one prompt: no interval


def test_all_undefined_story_level_warns():
    scores = pd.DataFrame(
        {
            "item_id": ["a", "b"],
            "metric": "m",
            "value": [1.0, 2.0],
            "prompt_id": ["p1", "p2"],
            "system": ["A", "B"],
        }
    )
    judgments = pd.DataFrame(
        {"item_id": ["a", "b"], "rater_id": "r", "criterion": "q", "value": [1, 2]}
    )
    with pytest.warns(DegenerateInputWarning, match="none of the 2 prompts"):
        out = level_correlation([1.0, 2.0], [1.0, 2.0], level="story", prompts=["p1", "p2"])
    assert math.isnan(out["estimate"]) and out["skipped"] == 2
    assert build_meta_table(scores, judgments).has_prompts


def test_bootstrap_interval_coverage_by_simulation():
    """Calibration: the seeded 95% percentile interval of Pearson's r covers the true
    correlation of bivariate normal data (rho = 0.5, n = 60) in about 95% of 150 samples."""
    rng = np.random.default_rng(2024)
    rho, hits, trials = 0.5, 0, 150
    cov = [[1, rho], [rho, 1]]
    for trial in range(trials):
        xy = rng.multivariate_normal([0, 0], cov, size=60)
        out = level_correlation(xy[:, 0], xy[:, 1], n_boot=300, seed=trial)
        hits += out["ci_low"] <= rho <= out["ci_high"]
    assert 0.88 <= hits / trials <= 0.99


def test_system_level_bootstrap_resamples_prompts():
    rng = np.random.default_rng(5)
    prompts = np.repeat([f"p{i}" for i in range(30)], 4)
    systems = np.tile(["A", "B", "C", "D"], 30)
    quality = {"A": 0.0, "B": 1.0, "C": 2.0, "D": 3.0}
    x = np.array([quality[s] for s in systems]) + rng.normal(0, 1, 120)
    y = np.array([quality[s] for s in systems]) + rng.normal(0, 1, 120)
    out = level_correlation(
        x, y, level="system", prompts=prompts, systems=systems, method="pearson", n_boot=300
    )
    assert out["resample"] == "prompts" and out["n"] == 4
    assert out["ci_low"] <= out["estimate"] <= out["ci_high"]
    without = level_correlation(x, y, level="system", systems=systems, n_boot=300)
    assert without["resample"] == "items" and without["estimate"] == out["estimate"]


def test_correlation_matrix_matches_pandas(table, merged):
    matrix = correlation_matrix(table, method="spearman")
    names = ["coherence", "grammar", "likability", "relevance", "distinct2", "length", "bleu"]
    assert list(matrix.columns) == names
    reference = merged[names].corr(method="spearman")
    np.testing.assert_allclose(matrix.to_numpy(), reference.to_numpy(), atol=1e-12)


def test_duplicate_scores_and_disjoint_items_are_refused():
    s = [Score("a", "m", 1.0), Score("a", "m", 2.0)]
    j = read_judgments(JUDGMENTS)
    with pytest.raises(MetaInputError, match="duplicate score"):
        build_meta_table(s, j)
    with pytest.raises(MetaInputError, match="no item id in common"):
        build_meta_table([Score("zz", "m", 1.0)], j)


def test_unknown_names_are_refused(table):
    with pytest.raises(ValueError, match="level must be one of pooled, story, system"):
        correlate(table, levels=["segment"])
    with pytest.raises(ValueError, match="unknown metric 'rouge'"):
        correlate(table, metrics=["rouge"])


def test_equal_rational_means_are_ties_at_the_system_level() -> None:
    """Two systems whose mean ratings are equal as fractions (3.0555...) but differ in the last
    bit when summed as floats: Kendall's tau counts them as a tie, in any summation order."""
    from scipy.stats import kendalltau

    from storyeval.meta.correlation import level_correlation

    a = [3.0, 1.0, 14 / 3, 7 / 3, 8 / 3, 14 / 3]  # item means of three raters' integer ratings
    b = [5 / 3, 7 / 3, 5.0, 3.0, 5.0, 4 / 3]
    c = [2.0, 2.0, 2.0, 2.0, 2.0, 2.0]
    assert np.mean(a) != np.mean(b) and sum(a) * 3 == pytest.approx(sum(b) * 3)
    human = np.array(a + b + c)
    metric = np.array([0.9] * 6 + [0.5] * 6 + [0.1] * 6)
    systems = ["A"] * 6 + ["B"] * 6 + ["C"] * 6
    exact = kendalltau([0.9, 0.5, 0.1], [55 / 18, 55 / 18, 2.0]).statistic
    for order in (np.arange(18), np.arange(18)[::-1], np.random.default_rng(3).permutation(18)):
        out = level_correlation(
            metric[order],
            human[order],
            level="system",
            systems=np.array(systems)[order],
            method="kendall",
            n_boot=0,
        )
        assert out["estimate"] == pytest.approx(exact, abs=1e-12)
