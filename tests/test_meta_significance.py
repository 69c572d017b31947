"""The Williams test and multiple-comparison corrections."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from metahelpers import JUDGMENTS, example_scores
from storyeval.corpus import Judgment, Score, read_judgments
from storyeval.meta import (
    DegenerateInputWarning,
    adjust_pvalues,
    build_meta_table,
    compare_metrics,
    correlate,
    williams_test,
)


def test_williams_worked_example_from_the_literature():
    """Steiger (1980) case A, as worked in the documentation of R's ``psych::r.test``
    (Revelle): n = 103, r12 = .4, r13 = .5, r23 = .1 gives t = -0.89 (df = 100) and a
    two-sided p of about .37. By hand with Williams' formula (Steiger 1980 eq. 7):
    K = 1 - .16 - .25 - .01 + 2(.4)(.5)(.1) = .62;
    t = -.1 sqrt(102 x 1.1) / sqrt(2 x .62 x 102/100 + (.9/2)^2 (.9)^3)
      = -1.05925 / sqrt(1.2648 + .147623) = -0.89128."""
    out = williams_test(0.4, 0.5, 0.1, 103, alternative="two-sided")
    assert out["statistic"] == pytest.approx(-0.89128, abs=5e-5)
    assert round(out["statistic"], 2) == -0.89
    assert out["df"] == 100
    assert out["p_value"] == pytest.approx(2 * stats.t.sf(0.89128, 100), abs=1e-4)
    assert round(out["p_value"], 2) == 0.37
    assert out["estimate"] == pytest.approx(-0.1)


def test_williams_alternatives_and_symmetry():
    """Graham & Baldwin (2014) use the one-sided test that metric A beats metric B."""
    greater = williams_test(0.6, 0.45, 0.7, 80)
    less = williams_test(0.6, 0.45, 0.7, 80, alternative="less")
    two = williams_test(0.6, 0.45, 0.7, 80, alternative="two-sided")
    swapped = williams_test(0.45, 0.6, 0.7, 80)
    assert greater["statistic"] > 0
    assert greater["p_value"] + less["p_value"] == pytest.approx(1.0)
    assert two["p_value"] == pytest.approx(2 * greater["p_value"])
    assert swapped["statistic"] == pytest.approx(-greater["statistic"])
    # More strongly correlated metrics make the same difference more significant.
    assert williams_test(0.6, 0.45, 0.9, 80)["p_value"] < greater["p_value"]


def test_williams_degenerate_inputs():
    with pytest.warns(DegenerateInputWarning, match="n = 3"):
        assert math.isnan(williams_test(0.5, 0.4, 0.3, 3)["statistic"])
    with pytest.warns(DegenerateInputWarning, match="nan"):
        assert math.isnan(williams_test(float("nan"), 0.4, 0.3, 30)["p_value"])
    with pytest.raises(ValueError, match=r"\[-1, 1\]"):
        williams_test(1.2, 0.4, 0.3, 30)
    with pytest.raises(ValueError, match="alternative"):
        williams_test(0.5, 0.4, 0.3, 30, alternative="bigger")


def test_compare_metrics_uses_the_shared_items():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        table = build_meta_table(list(example_scores()), read_judgments(JUDGMENTS))
        out = compare_metrics(table, criterion="coherence", method="spearman")
        corr = correlate(
            table, levels=["pooled"], methods=["spearman"], n_boot=0, criteria=["coherence"]
        )
    assert len(out) == 6  # ordered pairs of 3 metrics
    row = out[(out.metric_a == "distinct2") & (out.metric_b == "length")].iloc[0]
    r_distinct = corr.set_index("metric").loc["distinct2", "estimate"]
    assert row["r_a"] == pytest.approx(r_distinct)
    assert row["n"] == 180
    expected = williams_test(row["r_a"], row["r_b"], row["r_ab"], 180)
    assert row["statistic"] == pytest.approx(expected["statistic"])
    assert row["p_value"] == pytest.approx(expected["p_value"])
    # BLEU is undefined for human stories: pairs with BLEU use the 120 shared items.
    assert set(out.loc[(out.metric_a == "bleu") | (out.metric_b == "bleu"), "n"]) == {120}
    assert {"p_adjusted", "reject", "correction"} <= set(out.columns)
    assert out["signature"].iloc[0].startswith("williams|method:spearman|level:pooled")
    with pytest.raises(ValueError, match="story and within-system levels"):
        compare_metrics(table, level="story")


def test_compare_metrics_orients_lower_is_better_metrics():
    """A metric where lower is better (perplexity) is negated before the test, as Graham and
    Baldwin (2014) compare TER with BLEU: a metric whose values fall as ratings rise agrees
    with people and must not lose to every metric for its sign."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        table = build_meta_table(list(example_scores()), read_judgments(JUDGMENTS))
        plain = compare_metrics(table, criterion="coherence", metrics=["distinct2", "length"])
        # "length" is unknown to the registry: taken as it is unless named
        flipped = compare_metrics(
            table,
            criterion="coherence",
            metrics=["distinct2", "length"],
            lower_is_better=["length"],
        )
    key = lambda out: out[(out.metric_a == "distinct2") & (out.metric_b == "length")].iloc[0]  # noqa: E731
    before, after = key(plain), key(flipped)
    assert (before["direction_a"], before["direction_b"]) == ("higher", "undeclared")
    assert after["direction_b"] == "lower"
    assert after["r_b"] == pytest.approx(-before["r_b"])
    assert after["r_ab"] == pytest.approx(-before["r_ab"])
    assert after["r_a"] == pytest.approx(before["r_a"])
    expected = williams_test(after["r_a"], -before["r_b"], -before["r_ab"], int(after["n"]))
    assert after["statistic"] == pytest.approx(expected["statistic"])
    assert "oriented:yes" in after["signature"]


def test_registered_directions_orient_the_comparison():
    """Registered declarations decide without being named: perplexity is lower-is-better, and
    a metric built to fall with quality compares by how well it falls."""
    from storyeval.meta.significance import metric_directions

    directions = metric_directions(["perplexity", "bleu", "sentence_length", "mine"])
    assert directions == {
        "perplexity": "lower",
        "bleu": "higher",
        "sentence_length": "undeclared",
        "mine": "undeclared",
    }
    rng = np.random.default_rng(0)
    human = rng.normal(size=200)
    scores = []
    for i, rating in enumerate(human):  # perplexity falls with the rating, bleu barely rises
        scores.append(Score(f"i{i}", "perplexity", float(-rating + 0.3 * rng.normal())))
        scores.append(Score(f"i{i}", "bleu", float(0.2 * rating + rng.normal())))
    judgments = [Judgment(f"i{i}", "r1", "quality", float(v)) for i, v in enumerate(human)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = compare_metrics(build_meta_table(scores, judgments), method="pearson")
    row = out[(out.metric_a == "perplexity") & (out.metric_b == "bleu")].iloc[0]
    assert row["r_a"] > 0.9 and row["p_value"] < 1e-6


def test_benjamini_hochberg_and_bonferroni_hand_worked():
    """p = .01, .04, .03, .005 (m = 4). BH: sorted .005 .01 .03 .04 times m/rank gives
    .02 .02 .04 .04, already monotone. Bonferroni: min(1, 4p)."""
    table = pd.DataFrame({"p_value": [0.01, 0.04, 0.03, 0.005, np.nan]})
    bh = adjust_pvalues(table)
    np.testing.assert_allclose(bh["p_adjusted"].to_numpy()[:4], [0.02, 0.04, 0.04, 0.02])
    assert math.isnan(bh["p_adjusted"].iloc[4]) and bh["reject"].isna().iloc[4]
    bonf = adjust_pvalues(table, method="bonferroni")
    np.testing.assert_allclose(bonf["p_adjusted"].to_numpy()[:4], [0.04, 0.16, 0.12, 0.02])
    assert list(bonf["reject"].iloc[:4]) == [True, False, False, True]


def test_corrections_within_groups():
    table = pd.DataFrame({"level": ["a", "a", "b", "b"], "p_value": [0.01, 0.02, 0.01, 0.5]})
    out = adjust_pvalues(table, method="bonferroni", by=["level"])
    np.testing.assert_allclose(out["p_adjusted"], [0.02, 0.04, 0.02, 1.0])
    assert out["correction"].iloc[0] == "bonferroni|family:level|alpha:0.05"
    with pytest.raises(ValueError, match="must be one of bh, bonferroni, holm"):
        adjust_pvalues(table, method="fdr")


def test_compare_command_leaves_systems_out(tmp_path):
    """`compare --exclude-systems human` tests the metrics on the generated stories only."""
    from typer.testing import CliRunner

    from metahelpers import STORIES, write_example_scores
    from storyeval.cli import app

    scores = write_example_scores(tmp_path / "scores.jsonl")
    out = tmp_path / "compare.csv"
    args = ["compare", "-s", str(scores), "-j", str(JUDGMENTS), "--stories", str(STORIES)]
    args += ["--criterion", "coherence", "--exclude-systems", "human", "-o", str(out)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    table = pd.read_csv(out)
    assert len(table) == 6 and set(table["n"]) == {120}
    refused = CliRunner().invoke(app, [*args[:-2], "--systems", "gpt-9", "-o", str(out)])
    assert refused.exit_code != 0 and "no item of system 'gpt-9'" in refused.output
