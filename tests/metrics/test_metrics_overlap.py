"""Parity of the overlap metrics with their reference packages.

Provenance: sacrebleu 2.x (`sentence_bleu`, `corpus_bleu`, `BLEU(max_ngram_order=1)`) and
rouge-score (`RougeScorer.score_multi`), called directly on the same texts.
"""

from __future__ import annotations

import numpy as np
import pytest
import sacrebleu
from rouge_score import rouge_scorer
from sacrebleu.metrics import BLEU

from storyeval.corpus import Story
from storyeval.metrics import score_stories
from storyeval.metrics.overlap import self_bleu_values


@pytest.fixture(scope="module")
def referenced(example_stories):
    return [s for s in example_stories if s.references][:40]


def _values(run, metric):
    return np.array([s.value for s in run.scores if s.metric == metric])


def test_bleu_matches_sacrebleu_sentence_and_corpus_bleu(referenced):
    run = score_stories(referenced, "bleu,bleu1", bootstrap=0)
    hyps = [s.story for s in referenced]
    refs = [s.references[0] for s in referenced]
    expected = [sacrebleu.sentence_bleu(h, [r]).score for h, r in zip(hyps, refs, strict=True)]
    assert np.allclose(_values(run, "bleu"), expected, atol=1e-9)
    unigram = BLEU(max_ngram_order=1, effective_order=True)
    expected1 = [unigram.sentence_score(h, [r]).score for h, r in zip(hyps, refs, strict=True)]
    assert np.allclose(_values(run, "bleu1"), expected1, atol=1e-9)
    table = run.systems.set_index(["system", "metric", "statistic"])["estimate"]
    for system in {s.system for s in referenced}:
        mine = [s for s in referenced if s.system == system]
        corpus = sacrebleu.corpus_bleu([s.story for s in mine], [[s.references[0] for s in mine]])
        assert table[(system, "bleu", "corpus_bleu")] == pytest.approx(corpus.score, abs=1e-9)
        corpus1 = BLEU(max_ngram_order=1).corpus_score(
            [s.story for s in mine], [[s.references[0] for s in mine]]
        )
        assert table[(system, "bleu1", "corpus_bleu1")] == pytest.approx(corpus1.score, abs=1e-9)


def test_bleu_with_several_references_and_options():
    story = Story(
        "a",
        "",
        "The Cat sat on the mat today.",
        reference=["A cat sat on the mat.", "the cat was sitting on a mat today"],
    )
    run = score_stories([story], "bleu", options={"bleu.lowercase": "true"}, bootstrap=0)
    expected = BLEU(lowercase=True, effective_order=True).sentence_score(
        story.story, story.references
    )
    assert run.scores[0].value == pytest.approx(expected.score)
    assert "lowercase:yes" in run.scores[0].signature and "refs:2" in run.scores[0].signature


@pytest.mark.parametrize("kind", ["rouge1", "rouge2", "rougeL"])
def test_rouge_matches_rouge_score(referenced, kind):
    run = score_stories(referenced[:20], kind, options={"rouge.stemmer": "true"}, bootstrap=0)
    scorer = rouge_scorer.RougeScorer([kind], use_stemmer=True)
    expected = [scorer.score(s.references[0], s.story)[kind].fmeasure for s in referenced[:20]]
    assert np.allclose(_values(run, kind), expected, atol=1e-12)


def test_self_bleu_matches_sacrebleu_with_the_other_stories_as_references(example_stories):
    stories = [s for s in example_stories if s.system == "smollm2-k40-t0.7"][:12]
    stories += [s for s in example_stories if s.system == "human"][:5]
    run = score_stories(stories, "self_bleu", bootstrap=0)
    values = {s.item_id: s.value for s in run.scores}
    for story in stories:
        others = [o.story for o in stories if o.system == story.system and o.id != story.id]
        expected = sacrebleu.sentence_bleu(story.story, others).score
        assert values[story.id] == pytest.approx(expected, abs=1e-9)
    table = run.systems.set_index(["system", "statistic"])
    assert table.loc[("human", "mean"), "n"] == 5


def test_self_bleu_is_undefined_for_a_story_alone_in_its_system():
    values = self_bleu_values(["a b c", "a b c", "x y z"], ["s", "s", "t"])
    assert values[0] == pytest.approx(100.0) and np.isnan(values[2])


def test_self_bleu_reference_lengths_with_ties_and_duplicates():
    """Short texts of many equal and near lengths (the closest other length, ties to the
    shorter, a length shared with another text): still sacrebleu's multi-reference BLEU."""
    import random

    rng = random.Random(3)
    words = ["the", "a", "cat", "dog", "sat", "ran", "on", "in", "mat", "park", "big", "small"]
    texts = [
        " ".join(rng.choice(words) for _ in range(rng.choice([3, 4, 4, 6, 7, 9])))
        for _ in range(40)
    ]
    values = self_bleu_values(texts, ["s"] * len(texts))
    for index, text in enumerate(texts):
        others = texts[:index] + texts[index + 1 :]
        assert values[index] == pytest.approx(sacrebleu.sentence_bleu(text, others).score, abs=1e-9)
