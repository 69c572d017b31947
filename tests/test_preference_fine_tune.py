"""Fine-tuning a reward model's encoder (``train preference --fine-tune-epochs N``): each
cross-validation fold tunes its own encoder on its training stories only, the final encoder is
saved beside the head and is what every later score reads."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

from storyeval.base.errors import ModelLoadError
from storyeval.corpus import read_judgments, read_stories
from storyeval.learn.preference import (
    PreferenceConfig,
    PreferenceData,
    load_preference,
    preference_data,
    train_preference,
)
from storyeval.learn.preference import tune as preference_tune

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
TUNED = PreferenceConfig(
    criterion="coherence", fine_tune_epochs=1, fine_tune_max_length=48, fine_tune_batch_size=6
)


@pytest.fixture(scope="module")
def small() -> PreferenceData:
    """The example stories of 16 prompts (48 stories) and their coherence ratings."""
    stories = read_stories(EXAMPLES / "stories.jsonl")
    prompts = sorted({s.prompt for s in stories})[:16]
    chosen = [s for s in stories if s.prompt in prompts]
    ids = {s.id for s in chosen}
    ratings = [j for j in read_judgments(EXAMPLES / "judgments.jsonl") if j.item_id in ids]
    return preference_data(chosen, ratings, config=TUNED)


def test_each_fold_tunes_on_its_training_stories_only(
    small: PreferenceData,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    tiny_models: dict[str, Path],
) -> None:
    """Which stories each fold tunes on (on a two-layer encoder of MiniLM's architecture)."""
    from dataclasses import replace

    seen: list[set[str]] = []
    tune = preference_tune.fine_tune_encoder

    def recording(texts: Any, *args: Any, **kwargs: Any) -> Any:
        seen.append({s.id for s in small.stories if s.story in texts})
        return tune(texts, *args, **kwargs)

    monkeypatch.setattr(preference_tune, "fine_tune_encoder", recording)
    config = replace(TUNED, model=str(tiny_models["encoder"]))
    model = train_preference(small, tmp_path / "model", config=config, folds=2, n_boot=20)
    everyone = {s.id for s in small.stories}
    assert len(seen) == 3 and seen[2] == everyone  # two folds, then the final encoder
    for trained_on in seen[:2]:
        held_out = everyone - trained_on
        assert held_out and trained_on
        prompts = {s.prompt for s in small.stories if s.id in held_out}
        assert not any(s.prompt in prompts for s in small.stories if s.id in trained_on)
    assert seen[0] | seen[1] == everyone and not seen[0] & seen[1]
    rows = {(r["predictor"], r["statistic"]) for r in model.summary["cross_validation"]}
    assert ("model", "kendall_tau_b") in rows


@pytest.fixture(scope="module")
def tuned(small: PreferenceData, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """A model fine-tuned on the small set, no cross-validation."""
    directory = tmp_path_factory.mktemp("tuned") / "model"
    return train_preference(small, directory, config=TUNED, folds=0)


def test_the_saved_encoder_is_tuned_and_the_metric_reads_it(
    small: PreferenceData, tuned: Any
) -> None:
    from storyeval.models import load_encoder

    model = tuned
    saved = model.directory / preference_tune.ENCODER_DIR
    assert (saved / "config.json").is_file() and (saved / "tokenizer.json").is_file()
    base = load_encoder().model.state_dict()
    tuned = load_encoder(str(saved)).model.state_dict()
    changed = [name for name in base if not np.allclose(base[name], tuned[name])]
    assert len(changed) > len(base) // 2  # the encoder itself learned, not only a head
    assert model.signature.fields["fine_tune_epochs"] == 1
    assert model.feature_config.model == str(saved)
    from storyeval.functional import metric

    texts = [s.story for s in small.stories[:6]]
    values = metric("preference", texts, model=str(model.directory)).values
    assert np.allclose(values, model.score(small.stories[:6]))
    frozen = PreferenceConfig(criterion="coherence")
    assert "fine_tune_epochs" not in frozen.signature_fields()  # older signatures unchanged


def test_a_model_whose_encoder_was_replaced_or_lost_is_refused(tuned: Any, tmp_path: Path) -> None:
    shutil.copytree(tuned.directory, tmp_path / "model")
    load_preference(tmp_path / "model")  # a copy loads
    encoder = tmp_path / "model" / preference_tune.ENCODER_DIR
    config = json.loads((encoder / "config.json").read_text())
    config["layer_norm_eps"] = 1e-6  # another model's files
    (encoder / "config.json").write_text(json.dumps(config))
    with pytest.raises(ModelLoadError, match="not the encoder this model was trained with"):
        load_preference(tmp_path / "model")
    shutil.rmtree(encoder)
    with pytest.raises(ModelLoadError, match=r"fine-tuned encoder .* is missing"):
        load_preference(tmp_path / "model")


def test_fine_tuning_settings_are_checked() -> None:
    with pytest.raises(ValueError, match="fine-tuning is for encoder features"):
        PreferenceConfig(features="causal-lm", fine_tune_epochs=1)
    with pytest.raises(ValueError, match="fine_tune_batch_size >= 2"):
        PreferenceConfig(fine_tune_epochs=1, fine_tune_batch_size=1)


def test_fine_tuning_from_the_command_line(tmp_path: Path) -> None:
    from storyeval.cli import app

    stories = read_stories(EXAMPLES / "stories.jsonl")
    prompts = sorted({s.prompt for s in stories})[:10]
    chosen = [s for s in stories if s.prompt in prompts]
    ids = {s.id for s in chosen}
    ratings = [j for j in read_judgments(EXAMPLES / "judgments.jsonl") if j.item_id in ids]
    subset, judged = tmp_path / "stories.jsonl", tmp_path / "judgments.jsonl"
    subset.write_text("".join(json.dumps(s.to_dict()) + "\n" for s in chosen))
    judged.write_text("".join(json.dumps(j.to_dict()) + "\n" for j in ratings))
    model = tmp_path / "model"
    arguments = ["train", "preference", "--stories", str(subset), "--judgments", str(judged)]
    arguments += ["--criterion", "coherence"]
    arguments += ["--fine-tune-epochs", "1", "--fine-tune-max-length", "32", "--folds", "0"]
    result = CliRunner().invoke(app, [*arguments, "-o", str(model)])
    assert result.exit_code == 0, result.output
    assert "fine-tuning 1: the encoder on 30 stories (1 epoch)" in result.output
    assert f"fine-tuned encoder saved in {model / 'encoder'}" in result.output
    assert "fine_tune_epochs:1" in result.output and "fine_tune_max_length:32" in result.output
    assert load_preference(model).config.fine_tune_max_length == 32


def test_fine_tuning_reads_the_stories_as_the_features_do(
    small: PreferenceData, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from dataclasses import replace

    read: list[str] = []
    tune = preference_tune.fine_tune_encoder

    def recording(texts: Any, *args: Any, **kwargs: Any) -> Any:
        read.extend(texts)
        return tune(texts, *args, **kwargs)

    monkeypatch.setattr(preference_tune, "fine_tune_encoder", recording)
    config = replace(TUNED, with_prompt=True)
    train_preference(small, tmp_path / "model", config=config, folds=0)
    assert len(read) == len(small.stories)
    assert all(
        text.startswith(s.prompt.strip()) for text, s in zip(read, small.stories, strict=True)
    )


def test_an_interrupted_or_repeated_training_does_not_tune_again(
    small: PreferenceData,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    tiny_models: dict[str, Path],
) -> None:
    """Resuming and reuse (on a two-layer encoder of MiniLM's architecture)."""
    from dataclasses import replace

    tuned = replace(TUNED, model=str(tiny_models["encoder"]))
    calls: list[int] = []
    lost = [True]
    tune = preference_tune.fine_tune_encoder

    def failing_second(texts: Any, *args: Any, **kwargs: Any) -> Any:
        calls.append(len(texts))
        if len(calls) == 2 and lost[0]:
            raise RuntimeError("machine lost")  # during the second fold
        return tune(texts, *args, **kwargs)

    monkeypatch.setattr(preference_tune, "fine_tune_encoder", failing_second)
    output = tmp_path / "model"
    with pytest.raises(RuntimeError, match="machine lost"):
        train_preference(small, output, config=tuned, folds=2, n_boot=0)
    assert len(list((output / "tuning").glob("*.npy"))) == 1
    lost[0] = False
    calls.clear()
    first = train_preference(small, output, config=tuned, folds=2, n_boot=0)
    assert len(calls) == 2  # the second fold and the final encoder, not the first fold
    whole = train_preference(small, tmp_path / "whole", config=tuned, folds=2, n_boot=0)
    assert whole.summary["cross_validation"] == first.summary["cross_validation"]
    assert whole.feature_identity.split("@")[1] == first.feature_identity.split("@")[1]
    calls.clear()
    heard: list[str] = []
    other_head = replace(tuned, l2=0.1)
    again = train_preference(
        small, output, config=other_head, folds=2, n_boot=0, overwrite=True, progress=heard.append
    )
    assert calls == []  # nothing tuned: the folds' and the final features were reused
    assert any("fine-tuned encoder reused" in line for line in heard)
    assert again.feature_identity == first.feature_identity
    assert again.config.l2 == 0.1
