"""Best-worst scaling: the tuple design, the judgments a page produces, and the analysis
(counting, Bradley-Terry strengths of the implied comparisons, split-half reliability)
against simulated raters whose preferences are known."""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pytest

from storyeval.corpus import Judgment
from storyeval.human.analysis import analyse_judgments
from storyeval.human.protocols.best_worst import (
    design_tuples,
    implied_comparisons,
    split_half_reliability,
)


def test_every_story_appears_as_often_as_asked_and_never_twice_in_a_tuple():
    ids = [f"s{i:02d}" for i in range(30)]
    groups = {i: f"prompt{int(i[1:]) // 3}" for i in ids}  # three stories per prompt
    tuples = design_tuples(ids, tuple_size=4, appearances=4, seed=7, group=groups)
    assert tuples == design_tuples(ids, tuple_size=4, appearances=4, seed=7, group=groups)
    assert all(len(set(t)) == 4 for t in tuples)
    counts = Counter(i for t in tuples for i in t)
    assert set(counts) == set(ids)
    assert min(counts.values()) >= 4 and max(counts.values()) <= 6  # padding of short rounds
    clashes = sum(len(t) - len({groups[i] for i in t}) for t in tuples)
    assert clashes <= 2, "stories of one prompt are kept apart when the shuffle allows"
    with pytest.raises(ValueError, match="at least 4 stories"):
        design_tuples(ids[:3], tuple_size=4, appearances=1, seed=0)


def _simulate(quality: dict[str, float], systems: dict[str, str], raters: int, seed: int):  # type: ignore[no-untyped-def]
    """Raters choose the best and worst story of each tuple with probabilities following
    a Thurstone model of the stories' latent quality."""
    rng = np.random.default_rng(seed)
    tuples = design_tuples(sorted(quality), tuple_size=4, appearances=6, seed=seed)
    judgments = []
    for k, ids in enumerate(tuples):
        for r in range(raters):
            noisy = {i: quality[i] + rng.normal(0, 0.7) for i in ids}
            best, worst = max(noisy, key=noisy.get), min(noisy, key=noisy.get)
            for i in ids:
                value = 1.0 if i == best else (-1.0 if i == worst else 0.0)
                judgments.append(
                    Judgment(
                        i,
                        f"r{(k * raters + r) % 17}",
                        "quality",
                        value,
                        time_s=60.0,
                        condition=systems[i],
                        extra={
                            "protocol": "best_worst",
                            "item_key": f"tuple-{k}",
                            "page": f"{k}-{r}",
                            "system": systems[i],
                        },
                    )
                )
    return judgments


def test_the_analysis_recovers_the_order_of_the_systems():
    systems = {f"{s}{i}": s for s in ("good", "fair", "poor") for i in range(12)}
    level = {"good": 1.0, "fair": 0.0, "poor": -1.0}
    quality = {i: level[s] for i, s in systems.items()}
    judgments = _simulate(quality, systems, raters=3, seed=3)
    result = analyse_judgments(judgments, n_boot=200, seed=1)
    counts = result.best_worst.set_index("system")["score"]
    assert counts["good"] > counts["fair"] > counts["poor"]
    assert all(-1 <= v <= 1 for v in counts)
    strengths = result.best_worst_bradley_terry.set_index("system")
    assert strengths.loc["good", "estimate"] > strengths.loc["fair", "estimate"] > 0
    assert strengths.loc["poor", "estimate"] < 0
    assert (strengths["ci_low"] <= strengths["estimate"]).all()
    assert (strengths["estimate"] <= strengths["ci_high"]).all()
    assert strengths.loc["good", "ci_low"] > strengths.loc["poor", "ci_high"]
    stories = result.best_worst_stories
    assert len(stories) == 36 and set(stories.columns) >= {"story", "score", "n"}
    reliability = result.tests[result.tests["analysis"] == "best_worst"]
    assert 0.3 < float(reliability["estimate"].iloc[0]) < 1.0
    assert float(reliability["statistic"].iloc[0]) > float(reliability["estimate"].iloc[0])


def test_implied_comparisons_of_one_answer_by_hand():
    """Tuple (a, b, c, d), best a, worst d: a beats b, c, d; b and c beat d (5 comparisons)."""
    import pandas as pd

    frame = pd.DataFrame(
        {
            "page": ["p"] * 4,
            "criterion": ["q"] * 4,
            "condition": ["A", "B", "C", "D"],
            "value": [1.0, 0.0, 0.0, -1.0],
        }
    )
    assert sorted(implied_comparisons(frame)) == sorted(
        [("A", "B", "A"), ("A", "C", "A"), ("A", "D", "A"), ("B", "D", "B"), ("C", "D", "C")]
    )


def test_split_half_needs_two_raters_per_tuple():
    import pandas as pd

    one = pd.DataFrame(
        {
            "item_key": ["t1"] * 4,
            "rater_id": ["r"] * 4,
            "item_id": list("abcd"),
            "value": [1.0, 0.0, 0.0, -1.0],
        }
    )
    mean, corrected, n = split_half_reliability(one)
    assert math.isnan(mean) and math.isnan(corrected) and n == 0
