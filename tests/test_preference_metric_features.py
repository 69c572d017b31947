"""Metric scores as features of a story reward model (``train preference --metric-features``):
a planted set where people punish repeated sentences, which a mean-pooled embedding barely
sees and the repetition metrics measure directly."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

from storyeval.corpus import Judgment, Story, read_stories
from storyeval.learn.metric_features import (
    check_metric_features,
    metric_feature_columns,
    parse_metric_options,
)
from storyeval.learn.preference import (
    PreferenceConfig,
    PreferenceData,
    cross_validate,
    fit_head,
    load_preference,
    preference_data,
    story_features,
    train_preference,
)

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
REPETITION = ("repeated_sentence_rate", "repeated_ngram_rate")
TRAIN = ["train", "preference", "--stories", str(EXAMPLES / "stories.jsonl")]
TRAIN += ["--judgments", str(EXAMPLES / "judgments.jsonl")]


def _repeated(story: Story, times: int, rng: np.random.Generator) -> Story:
    """The story with ``times`` of its sentences said twice in a row."""
    import pysbd

    sentences = [s.strip() for s in pysbd.Segmenter(clean=False).segment(story.story)]
    for _ in range(times):
        at = int(rng.integers(len(sentences)))
        sentences.insert(at + 1, sentences[at])
    return Story(f"{story.id}-{times}", story.prompt, " ".join(sentences), system=f"rep{times}")


@pytest.fixture(scope="module")
def planted() -> tuple[list[Story], list[Judgment]]:
    """Four versions of each example human story, 0-3 sentences repeated, rated 5 down to 2."""
    rng = np.random.default_rng(0)
    stories, ratings = [], []
    for human in read_stories(EXAMPLES / "human.jsonl"):
        for times in range(4):
            story = _repeated(human, times, rng)
            stories.append(story)
            ratings.append(Judgment(story.id, "r1", "coherence", float(5 - times)))
    return stories, ratings


def _held_out_accuracy(data: PreferenceData, config: PreferenceConfig, scoring: Any) -> float:
    features, lengths, _ = story_features(data.stories, config, scoring=scoring)
    table = cross_validate(data, features, lengths, config, folds=3, n_boot=0).table
    row = table.query("predictor == 'model' and statistic == 'pairwise_accuracy'")
    return float(row["estimate"].iloc[0])


def test_repetition_is_learned_from_the_metrics_not_from_the_embedding(  # type: ignore[no-untyped-def]
    planted, scoring_context
) -> None:
    stories, ratings = planted
    plain = PreferenceConfig(criterion="coherence")
    with_metrics = PreferenceConfig(criterion="coherence", metric_features=REPETITION)
    plain_data = preference_data(stories, ratings, config=plain)
    embedding_only = _held_out_accuracy(plain_data, plain, scoring_context)
    data = preference_data(stories, ratings, config=with_metrics)
    both = _held_out_accuracy(data, with_metrics, scoring_context)
    # measured: 0.883 with the embedding alone (length, which grows with repetition, is a
    # covariate left out of the scores), 0.997 with the repetition metrics beside it
    assert both > 0.97 and both > embedding_only + 0.05


def test_a_trained_model_scores_new_stories_with_its_metrics(  # type: ignore[no-untyped-def]
    planted, tmp_path: Path, scoring_context
) -> None:
    from storyeval.functional import metric

    stories, ratings = planted
    config = PreferenceConfig(criterion="coherence", metric_features=REPETITION)
    data = preference_data(stories, ratings, config=config)
    model = train_preference(
        data, tmp_path / "model", config=config, folds=0, scoring=scoring_context
    )
    reloaded = load_preference(tmp_path / "model")
    assert reloaded.config == config  # the file's lists read back as the config's tuples
    assert reloaded.signature.fields["metric_features"] == ",".join(REPETITION)
    effects = reloaded.summary["metric_effects"]
    assert set(effects) == set(REPETITION) and effects["repeated_sentence_rate"] < 0
    assert set(reloaded.summary["metric_signatures"]) == set(REPETITION)
    human = read_stories(EXAMPLES / "human.jsonl")[:10]
    rng = np.random.default_rng(5)
    twice = [_repeated(story, 2, rng) for story in human]
    as_metric = metric("preference", [s.story for s in human + twice], model=str(model.directory))
    original, repeated = np.split(as_metric.values, 2)
    assert (original > repeated).all()
    assert np.allclose(as_metric.values, reloaded.score(human + twice))
    assert as_metric.signature.fields["metric_features"] == ",".join(REPETITION)


def test_an_undefined_metric_value_counts_as_the_mean() -> None:
    rng = np.random.default_rng(0)
    features = rng.normal(size=(60, 3))
    features[::7, 2] = np.nan  # a metric undefined for some stories (one sentence, say)
    targets = np.nan_to_num(features[:, 2]) + features[:, 0]
    config = PreferenceConfig(steps=200, length_covariate=False, metric_features=("distinct2",))
    head = fit_head(features, np.zeros(60), targets / targets.std(), [], config)
    assert np.isfinite(head.mean).all() and np.isfinite(head.scores(features)).all()
    filled = features.copy()
    filled[::7, 2] = head.mean[2]
    assert np.allclose(head.scores(features), head.scores(filled))
    assert abs(head.mean[2] - np.nanmean(features[:, 2])) < 1e-12


def test_metric_features_that_cannot_be_are_refused() -> None:
    with pytest.raises(ValueError, match="bleu needs references"):
        PreferenceConfig(metric_features=("bleu",))
    with pytest.raises(ValueError, match="preference cannot be a feature"):
        PreferenceConfig(metric_features=("preference",))
    for corpus_wide in ("self_bleu", "vendi_score", "mauve"):
        with pytest.raises(ValueError, match="against the others scored with it"):
            PreferenceConfig(metric_features=(corpus_wide,))
    with pytest.raises(ValueError, match="named twice"):
        check_metric_features(("distinct2", "distinct2"), ())
    with pytest.raises(ValueError, match="perplexity is not a metric feature"):
        PreferenceConfig(
            metric_features=("distinct2",), metric_options=(("perplexity.model", "x"),)
        )
    with pytest.raises(ValueError, match="unknown metric"):
        PreferenceConfig(metric_features=("no_such_metric",))
    with pytest.raises(ValueError, match=r"NAME\.KEY=VALUE"):
        parse_metric_options(["perplexity=3"])


def test_metric_options_reach_the_metric() -> None:
    stories = [Story("a", "", "one two one two one two"), Story("b", "", "a b c d e f")]
    options = parse_metric_options(["repeated_ngram_rate.n=3"])
    columns, signatures = metric_feature_columns(stories, ["repeated_ngram_rate"], options)
    assert columns.shape == (2, 1) and columns[1, 0] == 0 and columns[0, 0] > 0
    assert "|n:3|" in signatures[0]


def test_metric_features_from_the_command_line(
    tmp_path: Path, tiny_models: dict[str, Path]
) -> None:
    """The options' plumbing, beside the two-layer encoder's features."""
    from storyeval.cli import app

    model = tmp_path / "model"
    result = CliRunner().invoke(
        app,
        [
            *TRAIN,
            "--model",
            str(tiny_models["encoder"]),
            "--criterion",
            "coherence",
            "--metric-features",
            "repeated_ngram_rate,distinct2",
            "--metric-option",
            "repeated_ngram_rate.n=3",
            "--folds",
            "2",
            "--bootstrap",
            "20",
            "-o",
            str(model),
        ],
    )
    assert result.exit_code == 0, result.output
    assert "metric feature repeated_ngram_rate:" in result.output
    assert "metric_features:repeated_ngram_rate(n=3),distinct2" in result.output
    saved = json.loads((model / "preference.json").read_text())
    assert saved["config"]["metric_options"] == [["repeated_ngram_rate.n", "3"]]
    refused = CliRunner().invoke(
        app,
        [
            *TRAIN,
            "--metric-features",
            "bleu",
            "-o",
            str(tmp_path / "other"),
        ],
    )
    assert refused.exit_code == 2 and "bleu needs references" in refused.output
