"""Fixtures for the metric tests: short real stories from the example corpus."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

EXAMPLES = Path(__file__).resolve().parent.parent.parent / "examples"


def _short(text: str, n: int = 2) -> str:
    from storyeval.text import split_sentences

    return " ".join(split_sentences(text)[:n])


@pytest.fixture(scope="session")
def example_stories() -> list[Any]:
    from storyeval.corpus import read_stories

    return read_stories(EXAMPLES / "stories.jsonl")


@pytest.fixture(scope="session")
def short_stories(example_stories: list[Any]) -> list[Any]:
    """Six stories (two per system, prompts s001 and s002), cut to two sentences, each machine
    story with a two-sentence reference: cheap to score with every metric."""
    from storyeval.corpus import Story

    chosen = [s for s in example_stories if s.extra.get("prompt_id") in ("s001", "s002")]
    result = []
    for story in chosen:
        reference = [_short(r) for r in story.references] or None
        result.append(
            Story(
                story.id,
                story.prompt,
                _short(story.story, 3),
                reference=reference[0] if reference else None,
                system=story.system,
                extra=dict(story.extra),
            )
        )
    assert len(result) == 6
    return result


@pytest.fixture(scope="session")
def nsp_checkpoint(tmp_path_factory: pytest.TempPathFactory, encoder: Any) -> Path:
    """A BertForNextSentencePrediction checkpoint built from the offline encoder, with a head
    set deliberately (seeded weights, bias favouring 'is next'), saved with save_pretrained
    and its tokenizer: the loading path of the NSP metrics is exercised for real."""
    import torch
    from transformers import BertForNextSentencePrediction

    model = BertForNextSentencePrediction.from_pretrained(encoder.path)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        head = model.cls.seq_relationship
        head.weight.copy_(torch.randn(head.weight.shape, generator=generator) * 0.05)
        head.bias.copy_(torch.tensor([1.0, -1.0]))
    target = tmp_path_factory.mktemp("nsp") / "minilm-nsp"
    model.save_pretrained(target)
    encoder.tokenizer.save_pretrained(target)
    return target


@pytest.fixture(scope="session")
def nubia_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A NUBIA model with a seeded linear aggregator on synthetic features (the offline
    extractor's models, so scoring runs the real feature path), saved as `train nubia` does;
    clipped, not self-calibrated (which reads every story twice: tests/test_nubia.py tests
    it), since the metric tests score it often."""
    import numpy as np

    from storyeval.base.signature import Signature
    from storyeval.learn.nubia import NubiaFeatures, NubiaModel, feature_names, fit_aggregator

    names = feature_names("6dim")
    rng = np.random.default_rng(0)
    x = rng.normal(size=(40, len(names)))
    target = np.clip(0.5 + 0.2 * x[:, 0] - 0.1 * x[:, 3], 0, 1)
    fields = {**NubiaFeatures.load().identity(), "aggregator": "linear", "calibration": "clip"}
    model = NubiaModel(
        fit_aggregator(x, target), names, {}, (1.0, 5.0), "clip", Signature("nubia", fields), {}
    )
    target_dir = tmp_path_factory.mktemp("nubia") / "model"
    model.save(target_dir)
    return target_dir


@pytest.fixture(scope="session")
def checkpoints(
    nsp_checkpoint: Path,
    union_model: Any,
    nubia_checkpoint: Path,
    preference_checkpoint: Path,
    novelty_index: Path,
) -> dict[str, str]:
    """Options pointing the metrics that need a trained checkpoint (or an index) at one: the
    NSP head above, the session's UNION model (trained by tests/conftest.py), a NUBIA model,
    a preference model and a corpus index of the example human stories."""
    return {
        "nsp.model": str(nsp_checkpoint),
        "union.model": str(union_model.directory),
        "nubia.model": str(nubia_checkpoint),
        "preference.model": str(preference_checkpoint),
        "novelty.index": str(novelty_index),
    }


@pytest.fixture(scope="session")
def novelty_index(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A corpus index of the example human stories (for the novelty metrics)."""
    from storyeval.corpus import read_stories
    from storyeval.metrics.novelty import build_index

    examples = Path(__file__).resolve().parents[2] / "examples"
    target = tmp_path_factory.mktemp("novelty") / "index"
    build_index([s.story for s in read_stories(examples / "human.jsonl")], target)
    return target


@pytest.fixture(scope="session")
def preference_checkpoint(tmp_path_factory: pytest.TempPathFactory, scoring_context: Any) -> Path:
    """A preference model trained on the example ratings (no cross-validation: seconds)."""
    from storyeval.corpus import read_judgments, read_stories
    from storyeval.learn.preference import PreferenceConfig, preference_data, train_preference

    examples = Path(__file__).resolve().parents[2] / "examples"
    config = PreferenceConfig(criterion="coherence", steps=100)
    data = preference_data(
        read_stories(examples / "stories.jsonl"),
        read_judgments(examples / "judgments.jsonl"),
        config=config,
    )
    target = tmp_path_factory.mktemp("preference") / "model"
    train_preference(data, target, config=config, folds=0, scoring=scoring_context)
    return target
