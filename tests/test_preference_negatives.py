"""Perturbed copies as negatives of a story reward model (``train preference --negatives``):
each judged story's copy with a repeated sentence (or shuffled sentences, ...) must score
below it; cross-validation measures, per technique, how often held-out copies do."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

from storyeval.corpus import read_judgments, read_stories
from storyeval.learn.preference import (
    L2_GRID,
    PreferenceConfig,
    PreferenceData,
    chosen_l2,
    cross_validate,
    fit_head,
    preference_data,
    story_features,
    train_preference,
)
from storyeval.learn.preference import tune as preference_tune

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
REPETITION_METRICS = ("repeated_ngram_rate", "repeated_sentence_rate", "distinct2")
PEOPLE = ("pairwise_accuracy", "kendall_tau_b")


def _examples(config: PreferenceConfig) -> PreferenceData:
    stories = read_stories(EXAMPLES / "stories.jsonl")
    return preference_data(stories, read_judgments(EXAMPLES / "judgments.jsonl"), config=config)


@pytest.fixture(scope="module")
def with_copies() -> PreferenceData:
    """The example stories, rated for coherence, each with a repeated and a reordered copy."""
    return _examples(
        PreferenceConfig(criterion="coherence", negatives=("repetition", "reordering"))
    )


def _rows(table: list[dict] | object) -> dict[tuple[str, str], float]:  # type: ignore[type-arg]
    import pandas as pd

    frame = pd.DataFrame(table)
    return {(r.predictor, r.statistic): r.estimate for r in frame.itertuples()}


def test_each_judged_story_gets_a_copy_per_technique_in_its_own_split(
    with_copies: PreferenceData,
) -> None:
    data = with_copies
    judged = int((~data.synthetic).sum())
    assert judged == 180 and len(data.stories) == judged + len(data.negatives)
    techniques = [technique for _, _, technique in data.negatives]
    assert techniques.count("repetition") == 180 and 170 <= techniques.count("reordering") <= 180
    for original, copy, technique in data.negatives:
        assert original < judged <= copy
        story, perturbed = data.stories[original], data.stories[copy]
        assert perturbed.id == f"{story.id}-{technique}" and perturbed.story != story.story
        assert perturbed.prompt == story.prompt and perturbed.system == story.system
        assert data.groups[copy] == data.groups[original]  # never on the other side of a split
        assert np.isnan(data.targets[copy])
    assert all(i < judged and j < judged for i, j, _ in data.pairs)  # people's pairs only
    assert any("180 repetition" in note for note in data.notes)


def test_copies_only_measured_leave_peoples_numbers_as_they_were(
    with_copies: PreferenceData, tmp_path: Path, scoring_context: Any
) -> None:
    plain = PreferenceConfig(criterion="coherence")
    measured = replace(plain, negatives=("repetition", "reordering"), negative_weight=0.0)
    shared = {"n_boot": 50, "scoring": scoring_context}
    before = train_preference(_examples(plain), tmp_path / "plain", config=plain, **shared)
    after = train_preference(with_copies, tmp_path / "measured", config=measured, **shared)
    rows, rows_after = (
        _rows(before.summary["cross_validation"]),
        _rows(after.summary["cross_validation"]),
    )
    for statistic in PEOPLE:  # same folds, same head, same held-out predictions
        assert rows_after[("model", statistic)] == rows[("model", statistic)]
    # the frozen embedding alone hardly tells a copy from its story (measured 0.51 and 0.53)
    for technique in ("repetition", "reordering"):
        assert 0.35 < rows_after[("model", f"{technique}_scored_lower")] < 0.7
    assert rows_after[("length (log words)", "reordering_scored_lower")] == 0.5  # same length
    assert "negatives" not in before.signature.fields
    assert after.signature.fields["negatives"] == "repetition,reordering"
    assert after.signature.fields["negative_weight"] == 0.0


def test_repetition_copies_teach_the_metrics_weights_at_no_cost_to_people(
    with_copies: PreferenceData, scoring_context: Any
) -> None:
    config = replace(
        PreferenceConfig(criterion="coherence", metric_features=REPETITION_METRICS),
        negatives=("repetition", "reordering"),
        l2=1.0,
    )
    data = with_copies  # the copies depend on the techniques and the seed, not the features
    features, lengths, _ = story_features(data.stories, config, scoring=scoring_context)
    learned = _rows(cross_validate(data, features, lengths, config, n_boot=0).table)
    measured = replace(config, negative_weight=0.0)
    only_measured = _rows(cross_validate(data, features, lengths, measured, n_boot=0).table)
    # measured: held-out repeated copies scored lower for 93% of the stories against 77%
    # when the copies are not learned from; people's pairs 0.853 against 0.839
    repetition = ("model", "repetition_scored_lower")
    assert learned[repetition] > 0.88 and learned[repetition] > only_measured[repetition] + 0.1
    pairwise = ("model", "pairwise_accuracy")
    assert learned[pairwise] > only_measured[pairwise] - 0.03


def test_the_fine_tuning_learns_from_the_negatives_in_its_batches() -> None:
    import torch

    from storyeval.models import load_encoder

    base = load_encoder()
    head = torch.nn.Linear(base.model.config.hidden_size, 1)
    texts = ["Ken ran home. He was tired.", "Ken ran home. Ken ran home. He was tired."]
    no_pairs: list[tuple[int, int, float]] = []
    nothing_rated = (np.full(2, np.nan), no_pairs, [(0, 1)])
    config = PreferenceConfig(fine_tune_epochs=1, negatives=("repetition",))
    loss = preference_tune._batch_loss(
        base.model, head, base.tokenizer, texts, nothing_rated, [0, 1], config, "float32"
    )
    with torch.no_grad():
        inputs = base.tokenizer(texts, padding=True, return_tensors="pt")
        from storyeval.models.pooling import mean_pooled

        scores = head(mean_pooled(base.model, inputs)).squeeze(-1)
    expected = torch.nn.functional.softplus(scores[1] - scores[0])
    assert loss is not None and float(loss.detach()) == pytest.approx(float(expected), rel=1e-4)
    unweighted = replace(config, negative_weight=0.0)
    assert (
        preference_tune._batch_loss(
            base.model, head, base.tokenizer, texts, nothing_rated, [0, 1], unweighted, "float32"
        )
        is None
    )


def test_negatives_are_checked() -> None:
    with pytest.raises(ValueError, match="unknown technique 'nope'"):
        PreferenceConfig(negatives=("repetition", "nope"))
    with pytest.raises(ValueError, match="named twice"):
        PreferenceConfig(negatives=("repetition", "repetition"))
    for weight in (-1.0, float("nan")):
        with pytest.raises(ValueError, match="negative_weight must be >= 0"):
            PreferenceConfig(negatives=("repetition",), negative_weight=weight)
    assert PreferenceConfig(negatives=["reordering", "repetition"]).negatives == (  # type: ignore[arg-type]
        "reordering",
        "repetition",
    )


def test_negatives_from_the_command_line(tmp_path: Path, tiny_models: dict[str, Path]) -> None:
    """The options' plumbing, on the two-layer encoder's features."""
    from storyeval.cli import app
    from storyeval.corpus import write_judgments, write_stories

    stories = [s for s in read_stories(EXAMPLES / "stories.jsonl") if s.id < "s013"]
    ids = {s.id for s in stories}
    write_stories(tmp_path / "stories.jsonl", stories)
    ratings = [j for j in read_judgments(EXAMPLES / "judgments.jsonl") if j.item_id in ids]
    write_judgments(tmp_path / "judgments.jsonl", ratings)
    command = ["train", "preference", "--stories", str(tmp_path / "stories.jsonl")]
    command += ["--judgments", str(tmp_path / "judgments.jsonl"), "--criterion", "coherence"]
    command += ["--folds", "2", "--bootstrap", "20", "--model", str(tiny_models["encoder"])]
    result = CliRunner().invoke(
        app, [*command, "--negatives", "repetition", "--l2", "auto", "-o", str(tmp_path / "m")]
    )
    assert result.exit_code == 0, result.output
    n = len(stories)
    assert f"{n} stories, {n} with a mean rating" in result.output
    assert f"note: perturbed copies that must score below their originals: {n} repetition" in (
        result.output
    )
    assert "repetition_scored_lower" in result.output
    assert (
        "negatives:repetition|negative_weight:1.0" in result.output and "l2:auto" in result.output
    )
    chosen = re.search(r"weight decay chosen by cross-validation: ([0-9.]+)", result.output)
    assert chosen is not None and float(chosen.group(1)) in L2_GRID
    refused = CliRunner().invoke(app, [*command, "--negatives", "nope", "-o", str(tmp_path / "n")])
    assert refused.exit_code == 2 and "unknown technique 'nope'" in refused.output
    refused = CliRunner().invoke(app, [*command, "--l2", "much", "-o", str(tmp_path / "n")])
    assert refused.exit_code == 2 and "--l2 must be a number >= 0 or auto" in refused.output


def test_the_weight_decay_chosen_within_each_training_fold_agrees_better_with_people(
    scoring_context: Any,
) -> None:
    fixed = PreferenceConfig(criterion="coherence")
    auto = replace(fixed, l2="auto")
    data = _examples(fixed)
    features, lengths, _ = story_features(data.stories, fixed, scoring=scoring_context)
    rows = _rows(cross_validate(data, features, lengths, fixed, n_boot=0).table)
    nested = _rows(cross_validate(data, features, lengths, auto, n_boot=0).table)
    # measured: Kendall tau-b 0.485 (an Intel CPU) and 0.454 (an AMD EPYC) against 0.418 with
    # the default 0.01; each outer fold chose its weight decay on its own training stories.
    # The inner choices sit on near-ties that the CPU's float rounding tips (here 1.0, 10 or
    # 100 by fold), so the margin is one both machines clear, not the larger one measured.
    assert nested[("model", "kendall_tau_b")] > rows[("model", "kendall_tau_b")] + 0.025
    everything = np.arange(len(data.stories))
    assert chosen_l2(data, features, lengths, fixed, everything) in L2_GRID
    few = np.flatnonzero(np.isin(data.groups, sorted(set(data.groups))[:2]))
    assert chosen_l2(data, features, lengths, fixed, few) == L2_GRID[0]  # too few to split
    with pytest.raises(ValueError, match="l2='auto' is chosen per training set"):
        fit_head(features, lengths, data.targets, data.pairs, auto)
    with pytest.raises(ValueError, match="l2 must be a number >= 0 or 'auto'"):
        PreferenceConfig(l2=-1.0)


def test_an_audit_of_a_model_trained_on_copies_says_whose_copies_they_are(
    tmp_path: Path,
) -> None:
    from storyeval.judge.audit_run import collect_audit_inputs
    from storyeval.judge.rubric import load_rubric
    from storyeval.learn.preference.judge import RewardModelJudge

    stories = read_stories(EXAMPLES / "stories.jsonl")[:12]
    ids = {s.id for s in stories}
    ratings = [j for j in read_judgments(EXAMPLES / "judgments.jsonl") if j.item_id in ids]
    config = PreferenceConfig(criterion="coherence", negatives=("repetition",), seed=3)
    data = preference_data(stories, ratings, config=config)
    train_preference(data, tmp_path / "m", config=config, folds=0)
    judge = RewardModelJudge(str(tmp_path / "m"))
    rubric, audited = load_rubric("hanna"), stories[:3]
    for seed, says in ((3, "the ones it learned from"), (4, "of stories it saw")):
        notes = collect_audit_inputs(
            audited, rubric, judge, pairwise=False, techniques=("repetition", "typos"), seed=seed
        ).notes
        trained = [n for n in notes if "trained to score repetition copies lower" in n]
        assert len(trained) == 1 and says in trained[0] and "typos" not in trained[0]
    notes = collect_audit_inputs(
        audited, rubric, judge, pairwise=False, techniques=("typos",), seed=3
    ).notes
    assert not any("trained to score" in n for n in notes)
