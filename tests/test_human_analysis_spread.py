"""Callan and Foster's (2023) Figures 2 and 3 as ``study analyse`` tables: the distribution of
ratings and each story's spread across its raters."""

from __future__ import annotations

import statistics

import pytest

from storyeval.corpus import Judgment
from storyeval.human.analysis import analyse_judgments


def test_the_papers_example_story_and_the_distribution() -> None:
    # the paper's example: story interest (Q4) rated 1, 2, 3, 4, 5, 6 and 6 by seven raters
    example = [1, 2, 3, 4, 5, 6, 6]
    calm = [4, 4, 5, 4, 4, 5, 4]
    judgments = [
        Judgment(item, f"r{k}", "story_interest", float(v), time_s=60.0, condition="gpt")
        for item, values in (("s1", example), ("s2", calm))
        for k, v in enumerate(values)
    ]
    result = analyse_judgments(judgments, n_boot=0)
    spread = result.item_spread.set_index("item_id")
    assert spread.loc["s1", "sd"] == pytest.approx(statistics.stdev(example))  # 1.95
    assert spread.loc["s1", "n"] == 7 and spread.loc["s1", "mean"] == pytest.approx(27 / 7)
    summary = result.spread_summary.iloc[0]
    assert summary["share_sd_over_1"] == 0.5 and summary["sd_max"] == pytest.approx(
        1.9518, abs=1e-4
    )
    counts = result.distribution.set_index("value")
    assert counts.loc[4.0, "count"] == 6 and counts["count"].sum() == 14
    assert counts["share"].sum() == pytest.approx(1.0)
