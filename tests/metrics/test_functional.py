"""The functional API computes exactly what the registry computes, takes model objects as well
as names, and validates its input."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from storyeval import functional as F
from storyeval.metrics import score_stories
from storyeval.metrics.registry import OptionError


def _registry_values(stories: list[Any], metric: str, **options: Any) -> np.ndarray:
    run = score_stories(
        stories, metric, options={f"{metric}.{k}": v for k, v in options.items()}, bootstrap=0
    )
    by_id = {s.item_id: s.value for s in run.scores}
    return np.array([by_id[s.id] for s in stories])


def _signature(stories: list[Any], metric: str, **options: Any) -> str:
    run = score_stories(
        stories, metric, options={f"{metric}.{k}": v for k, v in options.items()}, bootstrap=0
    )
    return run.metrics[metric].signature.render()


@pytest.fixture
def with_references(short_stories: list[Any]) -> list[Any]:
    return [s for s in short_stories if s.references]


def test_bleu_rouge_and_distinct_equal_the_registry(with_references: list[Any]) -> None:
    short_stories = with_references
    hyps = [s.story for s in short_stories]
    refs = [s.references for s in short_stories]
    result = F.bleu(hyps, refs, max_order=4)
    assert result.scores.tolist() == _registry_values(short_stories, "bleu").tolist()
    assert result.signature.render() == _signature(short_stories, "bleu")
    import sacrebleu

    expected = sacrebleu.corpus_bleu(hyps, [[r[0] for r in refs]]).score
    assert result.corpus == pytest.approx(expected, abs=1e-9)
    assert "sacrebleu" in result.signature.fields
    rouge = F.rouge(hyps, refs, kind="rouge2", stemmer=True)
    assert rouge.values.tolist() == _registry_values(short_stories, "rouge2", stemmer=True).tolist()
    assert (
        F.distinct(hyps, n=2).values.tolist()
        == _registry_values(short_stories, "distinct2").tolist()
    )


def test_bertscore_takes_a_name_or_a_loaded_encoder(
    with_references: list[Any], encoder: Any
) -> None:
    short_stories = with_references
    from storyeval.models import wrap_model

    cands = [s.story for s in short_stories]
    refs = [s.references for s in short_stories]
    by_name = F.bertscore(cands, refs, layer=3, idf=True)
    by_object = F.bertscore(cands, refs, model=encoder, layer=3, idf=True)
    wrapped = F.bertscore(
        cands,
        refs,
        model=wrap_model(encoder.model, encoder.tokenizer, name="x"),
        layer=3,
        idf=True,
    )
    registry = _registry_values(short_stories, "bertscore_f", layer=3, idf=True)
    np.testing.assert_array_equal(by_name.f1, registry)
    np.testing.assert_array_equal(by_object.f1, registry)
    np.testing.assert_allclose(wrapped.f1, registry, rtol=1e-6)
    assert by_object.signature.fields["model"] == encoder.identity
    assert wrapped.signature.fields["model"].startswith("x")
    assert set(by_name.signature.fields) >= {"layer", "idf", "transformers", "torch"}
    assert np.all(by_name.precision <= 1) and by_name.precision.shape == by_name.recall.shape


def test_sms_and_perplexity_equal_the_registry(with_references: list[Any], causal_lm: Any) -> None:
    short_stories = with_references
    cands = [s.story for s in short_stories]
    refs = [s.references for s in short_stories]
    np.testing.assert_array_equal(F.sms(cands, refs).values, _registry_values(short_stories, "sms"))
    prompts = [s.prompt for s in short_stories]
    result = F.perplexity(cands, prompts=prompts, model=causal_lm)
    np.testing.assert_array_equal(result.values, _registry_values(short_stories, "perplexity"))
    run = score_stories(short_stories, "perplexity", bootstrap=0)
    corpus = run.systems.query("statistic == 'corpus_perplexity'")
    # every story in one corpus: the stats summed over all systems
    assert result.corpus > 1 and len(corpus) == len({s.system for s in short_stories})


@pytest.mark.slow
def test_union_takes_a_directory_or_a_loaded_model(
    short_stories: list[Any], union_model: Any
) -> None:
    from storyeval.learn.union_scoring import load_union

    stories = [s.story for s in short_stories]
    prompts = [s.prompt for s in short_stories]
    by_path = F.union(stories, prompts=prompts, model=str(union_model.directory))
    by_object = F.union(stories, prompts=prompts, model=load_union(str(union_model.directory)))
    registry = _registry_values(short_stories, "union", model=str(union_model.directory))
    np.testing.assert_array_equal(by_path.values, registry)
    np.testing.assert_array_equal(by_object.values, registry)


def test_bad_input_is_refused_with_a_clear_message() -> None:
    with pytest.raises(TypeError, match="not one string"):
        F.bleu("the cat", ["the cat"])
    with pytest.raises(ValueError, match="2 texts but 1 references"):
        F.bleu(["a", "b"], ["a"])
    with pytest.raises(TypeError, match=r"texts\[1\] is int"):
        F.distinct(["a", 3])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="no text"):
        F.distinct([])
    with pytest.raises(OptionError):
        F.bleu(["a"], ["a"], tokenize="nonsense")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="loaded model"):
        F.bertscore(["a"], ["a"], model=object())
