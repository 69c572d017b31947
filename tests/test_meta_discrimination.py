"""Discrimination tests on (original, altered) pairs."""

from __future__ import annotations

import itertools
import json
import math

import pandas as pd
import pytest
from scipy import stats

from metahelpers import EXAMPLES
from storyeval.base.errors import DataFileError
from storyeval.base.signature import Signature
from storyeval.corpus import Score, read_stories, write_scores
from storyeval.meta import (
    discrimination,
    pairs_from_perturbations,
    pairs_from_score_files,
    read_pairs,
)
from storyeval.meta.discrimination import metric_direction
from storyeval.text import split_sentences, tokenize_words


def _distinct2(text: str) -> float:
    words = tokenize_words(text, lowercase=True, punctuation=False)
    bigrams = list(itertools.pairwise(words))
    return len(set(bigrams)) / len(bigrams)


def test_hand_worked_counts_test_and_interval():
    """8 pairs: 6 wins, 1 tie, 1 loss. Estimate 6/8; sign test P(X >= 6 | 7, .5) = 8/128;
    Clopper-Pearson interval of 6/8 from scipy; ties counted as half: 6.5/8."""
    scores = pd.DataFrame(
        {
            "item_id": [*(f"o{i}" for i in range(8)), *(f"a{i}" for i in range(8))],
            "metric": "m",
            "value": [5, 5, 5, 5, 5, 5, 3, 1, 1, 2, 3, 4, 4.5, 4.9, 3, 2],
        }
    )
    pairs = pd.DataFrame(
        {"original_id": [f"o{i}" for i in range(8)], "altered_id": [f"a{i}" for i in range(8)]}
    )
    row = discrimination(scores, pairs).iloc[0]
    assert (row["wins"], row["ties"], row["losses"], row["n_pairs"]) == (6, 1, 1, 8)
    assert row["estimate"] == pytest.approx(6 / 8)
    assert row["win_rate_ties_half"] == pytest.approx(6.5 / 8)
    assert row["p_value"] == pytest.approx(8 / 128)
    ci = stats.binomtest(6, 8).proportion_ci(method="exact")
    assert (row["ci_low"], row["ci_high"]) == pytest.approx((ci.low, ci.high))
    assert row["direction"] == "higher"


def test_lower_is_better_flips_the_direction():
    # "lm_loss" is not in the metric registry, so nothing says its direction: higher wins
    scores = [Score("o", "lm_loss", 20.0), Score("a", "lm_loss", 35.0)]
    pairs = pd.DataFrame({"original_id": ["o"], "altered_id": ["a"]})
    assert discrimination(scores, pairs).iloc[0]["wins"] == 0
    flipped = discrimination(scores, pairs, lower_is_better=["lm_loss"]).iloc[0]
    assert flipped["wins"] == 1 and flipped["direction"] == "lower"
    signed = [
        Score(
            s.item_id,
            s.metric,
            s.value,
            Signature("lm_loss", {"higher_is_better": False}).render(),
        )
        for s in scores
    ]
    assert metric_direction(signed[0].signature) is False
    assert discrimination(signed, pairs).iloc[0]["wins"] == 1
    # a registered metric brings its direction from the registry: perplexity is lower-is-better
    registered = [Score("o", "perplexity", 20.0), Score("a", "perplexity", 35.0)]
    assert discrimination(registered, pairs).iloc[0]["wins"] == 1


def test_pairs_from_perturbation_output_by_technique(tmp_path):
    """The perturbation engine's contract: records with id, source_id, story, techniques.
    Here a reordering (sentences reversed) and a repetition (first sentence repeated) of
    real example stories, scored with distinct-2."""
    stories = read_stories(EXAMPLES / "human.jsonl")[:10]
    records, scores = [], []
    for story in stories:
        sentences = split_sentences(story.story)
        reordered = " ".join(reversed(sentences))
        repeated = " ".join([sentences[0], *sentences[:-1]])
        records.append(
            {
                "id": f"{story.id}-reo",
                "source_id": story.id,
                "story": reordered,
                "techniques": ["reordering"],
            }
        )
        records.append(
            {
                "id": f"{story.id}-rep",
                "source_id": story.id,
                "story": repeated,
                "techniques": [{"name": "repetition", "where": [0]}],
            }
        )
        for item, text in (
            (story.id, story.story),
            (f"{story.id}-reo", reordered),
            (f"{story.id}-rep", repeated),
        ):
            scores.append(Score(item, "distinct2", _distinct2(text)))
    path = tmp_path / "perturbed.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    pairs = pairs_from_perturbations(path)
    assert list(pairs.columns) == ["original_id", "altered_id", "techniques", "operations"]
    assert pairs["operations"].isna().all()  # these records have no edits
    out = discrimination(scores, pairs, by="techniques").set_index("group")
    assert list(out.index) == ["(all)", "reordering", "repetition"]
    # Repeating a sentence repeats bigrams: distinct-2 always prefers the original.
    assert out.loc["repetition", "wins"] == 10 and out.loc["repetition", "p_value"] < 0.01
    # These human stories repeat no bigram, in any sentence order: distinct-2 is 1.0 for the
    # original and the reordered copy, every pair ties, and the sign test has no decided pair.
    reordering = out.loc["reordering"]
    assert (reordering["ties"], reordering["estimate"]) == (10, 0.0)
    assert reordering["win_rate_ties_half"] == 0.5 and math.isnan(reordering["p_value"])
    assert out.loc["(all)", "n_pairs"] == 20


def test_pair_file_and_its_errors(write_file):
    good = write_file("pairs.csv", "original_id,altered_id,technique\ns1,s1x,negation\ns2,s2x,\n")
    pairs = read_pairs(good)
    assert list(pairs["technique"].fillna("")) == ["negation", ""]
    bad = write_file(
        "bad.jsonl",
        '{"original_id": "s1", "altered_id": "s1x"}\n{"original_id": "s2"}\n'
        '{"original_id": "s3", "altered_id": "s3"}\n{"original_id": "s1", "altered_id": "s1x"}\n',
    )
    with pytest.raises(DataFileError) as info:
        read_pairs(bad)
    text = str(info.value)
    assert f"{bad}:2: required field 'altered_id' is missing" in text
    assert f"{bad}:3: a story is paired with itself" in text
    assert f"{bad}:4: duplicate pair" in text
    perturbed = write_file("p.jsonl", '{"id": "x1", "story": "text"}\n')
    with pytest.raises(DataFileError, match=r"p.jsonl:1: required field 'source_id'"):
        pairs_from_perturbations(perturbed)


def test_two_score_files(tmp_path):
    write_scores(
        tmp_path / "orig.jsonl",
        [Score("s1", "m", 0.9), Score("s2", "m", 0.8), Score("s3", "m", 0.4)],
    )
    write_scores(
        tmp_path / "alt.jsonl",
        [Score("s1", "m", 0.2), Score("s2", "m", 0.8), Score("s3", "m", float("nan"))],
    )
    pairs, scores = pairs_from_score_files(tmp_path / "orig.jsonl", tmp_path / "alt.jsonl")
    with pytest.warns(Warning, match="lack a score"):
        row = discrimination(scores, pairs).iloc[0]
    assert (row["wins"], row["ties"], row["missing"], row["n_pairs"]) == (1, 1, 1, 2)


def test_direction_comes_from_the_metric_registry():
    """repeated_ngram_rate is registered with higher_is_better=False (storyeval metrics)."""
    scores = [Score("o", "repeated_ngram_rate", 0.0), Score("a", "repeated_ngram_rate", 0.3)]
    pairs = pd.DataFrame({"original_id": ["o"], "altered_id": ["a"]})
    row = discrimination(scores, pairs).iloc[0]
    assert row["direction"] == "lower" and row["wins"] == 1
