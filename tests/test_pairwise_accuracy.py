"""Pairwise accuracy of metrics against people's preferences, with intervals that resample
clusters of pairs, and the paired permutation test between two metrics: hand-worked examples
and the command."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from storyeval.meta.pairwise import accuracy_tests, pairwise_accuracy


def _pairs(winners: list[str], groups: list[str]) -> pd.DataFrame:
    rows = []
    for number, (winner, group) in enumerate(zip(winners, groups, strict=True)):
        a, b = f"p{number}-1", f"p{number}-2"
        rows.append(
            {"system_a": a, "system_b": b, "winner": {"a": a, "b": b, "tie": "tie"}[winner],
             "group": group, "criterion": "quality"}
        )  # fmt: skip
    return pd.DataFrame(rows)


def _scores(metric: str, values: list[tuple[float, float]]) -> pd.DataFrame:
    rows = []
    for number, (a, b) in enumerate(values):
        rows += [
            {"item_id": f"p{number}-1", "metric": metric, "value": a},
            {"item_id": f"p{number}-2", "metric": metric, "value": b},
        ]
    return pd.DataFrame(rows)


def test_accuracy_counts_ties_half_and_leaves_peoples_ties_out() -> None:
    """Five pairs: the metric right on two, wrong on one, tied on one (half), and one pair
    people tied (left out): (2 + 0.5) / 4 = 0.625."""
    pairs = _pairs(["a", "b", "a", "a", "tie"], ["x", "x", "y", "z", "z"])
    scores = _scores("m", [(2, 1), (1, 3), (1, 1), (1, 2), (5, 1)])
    [row] = pairwise_accuracy(scores, pairs, n_boot=0).to_dict("records")
    assert row["estimate"] == 0.625 and row["n"] == 4 and row["metric_ties"] == 1
    assert row["people_ties"] == 1 and row["n_clusters"] == 3
    # WMT's tau-like: 2 concordant, 1 discordant and the tie discordant: (2 - 2) / 4
    assert row["kendall_like"] == 0.0
    lower = pairwise_accuracy(scores, pairs, lower_is_better=["m"], n_boot=0)
    assert lower["estimate"].iloc[0] == 0.375 and lower["direction"].iloc[0] == "lower"


def test_the_bootstrap_resamples_clusters() -> None:
    """Two authors, each with ten pairs all right or all wrong: the pair bootstrap's interval
    is narrow, the author bootstrap's spans both extremes (two clusters: 0, 0.5 or 1)."""
    pairs = _pairs(["a"] * 20, ["x"] * 10 + ["y"] * 10)
    scores = _scores("m", [(2, 1)] * 10 + [(1, 2)] * 10)
    by_author = pairwise_accuracy(scores, pairs, n_boot=2000, seed=1).iloc[0]
    by_pair = pairwise_accuracy(scores, pairs, cluster=None, n_boot=2000, seed=1).iloc[0]
    assert by_author["estimate"] == by_pair["estimate"] == 0.5
    assert by_author["ci_low"] == 0.0 and by_author["ci_high"] == 1.0
    assert 0.25 < by_pair["ci_low"] < 0.5 < by_pair["ci_high"] < 0.75


def test_the_permutation_test_is_exact_over_few_clusters() -> None:
    """Three clusters where the reference is right and the other wrong on every pair: the
    exact one-sided p-value is 1/8 (one sign pattern of 2**3 is as extreme)."""
    pairs = _pairs(["a"] * 6, ["x", "x", "y", "y", "z", "z"])
    scores = pd.concat([_scores("good", [(2, 1)] * 6), _scores("poor", [(1, 2)] * 6)])
    [row] = accuracy_tests(scores, pairs, "good", n_boot=0).to_dict("records")
    assert row["difference"] == 1.0 and row["p_value"] == pytest.approx(1 / 8)
    assert row["n"] == 6 and row["n_clusters"] == 3 and row["p_adjusted"] == pytest.approx(1 / 8)
    many = _pairs(["a"] * 40, [f"g{i}" for i in range(20)] * 2)
    scores = pd.concat([_scores("good", [(2, 1)] * 40), _scores("poor", [(1, 2)] * 40)])
    sampled = accuracy_tests(scores, many, "good", n_boot=0, n_permutations=2000, seed=3)
    assert sampled["p_value"].iloc[0] == pytest.approx(1 / 2001)  # Monte Carlo, 20 clusters
    with pytest.raises(ValueError, match="the reference metric 'none'"):
        accuracy_tests(scores, many, "none")


def test_the_command_writes_accuracies_and_tests(tmp_path: Path, run_cli: Any) -> None:
    pairs = _pairs(["a", "b", "a", "a"], ["x", "x", "y", "z"])
    (tmp_path / "pairs.jsonl").write_text(
        "".join(json.dumps({**r, "item_id": f"i{n}", "prompt_id": f"i{n}"}) + "\n"
                for n, r in enumerate(pairs.to_dict("records")))
    )  # fmt: skip
    scores = pd.concat(
        [_scores("distinct2", [(0.9, 0.5), (0.1, 0.7), (0.8, 0.2), (0.6, 0.3)]),
         _scores("word_count", [(10, 20), (30, 10), (5, 5), (8, 9)])]
    )  # fmt: skip
    (tmp_path / "scores.jsonl").write_text(
        "".join(json.dumps(r) + "\n" for r in scores.to_dict("records"))
    )
    code, out, err = run_cli(
        "pairwise-accuracy", "-s", str(tmp_path / "scores.jsonl"), "-c",
        str(tmp_path / "pairs.jsonl"), "--n-boot", "100", "--versus", "distinct2", "--tests",
        str(tmp_path / "tests.csv"), "-o", str(tmp_path / "accuracy.csv"),
    )  # fmt: skip
    assert code == 0, err
    table = pd.read_csv(tmp_path / "accuracy.csv").set_index("metric")
    assert (
        table.loc["distinct2", "estimate"] == 1.0 and table.loc["word_count", "estimate"] == 0.125
    )
    assert table.loc["distinct2", "n_clusters"] == 3
    tests = pd.read_csv(tmp_path / "tests.csv")
    assert tests["metric_b"].tolist() == ["word_count"] and np.isclose(
        tests["difference"][0], 0.875
    )
    assert "pairwise_accuracy|cluster:group" in out
