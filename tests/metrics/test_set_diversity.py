"""The set-level diversity measures: the compression ratio (Shaib et al. 2024) and the Vendi
score (Friedman and Dieng 2023), checked against their definitions computed directly."""

from __future__ import annotations

import gzip
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from storyeval import functional as F
from storyeval.metrics.set_diversity import ngram_vectors, vendi


def _vendi_by_definition(x: np.ndarray) -> float:
    """exp(entropy) of the eigenvalues of K / n with K the cosine similarity matrix."""
    unit = x / np.linalg.norm(x, axis=1, keepdims=True)
    eigenvalues = np.linalg.eigvalsh(unit @ unit.T / len(x))
    eigenvalues = eigenvalues[eigenvalues > 1e-12]
    return float(np.exp(-(eigenvalues * np.log(eigenvalues)).sum()))


def test_vendi_counts_distinct_items_and_matches_its_definition() -> None:
    assert vendi(np.eye(5)) == pytest.approx(5.0)
    assert vendi(np.ones((7, 4))) == pytest.approx(1.0)
    two_clusters = np.array([[1.0, 0.0]] * 3 + [[0.0, 1.0]] * 3)
    assert vendi(two_clusters) == pytest.approx(2.0)
    rng = np.random.default_rng(0)
    for shape in ((12, 4), (4, 12)):  # more items than dimensions, and fewer
        x = rng.normal(size=shape)
        assert vendi(x) == pytest.approx(_vendi_by_definition(x), rel=1e-9)


def test_the_ngram_kernel_and_groups() -> None:
    texts = ["a b c", "a b c", "d e f", "g h i", "a b x"]
    result = F.vendi_score(texts, ["s", "s", "t", "t", "t"], kernel="ngram")
    assert result.values[:2].tolist() == pytest.approx([1.0, 1.0])  # two copies: one story
    expected = _vendi_by_definition(ngram_vectors(texts, 1)[2:])
    assert result.values[2:].tolist() == pytest.approx([expected] * 3)
    assert result.signature.fields["kernel"] == "ngram"


def test_compression_ratio_is_gzip_of_the_systems_text() -> None:
    texts = ["The cat sat on the mat. " * 3, "The cat sat on the mat.", "Rain fell on the roof."]
    result = F.compression_ratio(
        [*texts, "Hail hit the old shed.", "Snow."], ["s", "s", "t", "t", "u"]
    )
    joined = "\n".join(sorted(texts[:2])).encode()
    assert result.values[0] == pytest.approx(len(joined) / len(gzip.compress(joined, 9, mtime=0)))
    assert result.values[0] == result.values[1] > result.values[2]
    assert np.isnan(result.values[4]) and "alone in their system" in result.notes[0]


def test_scored_per_system_on_the_examples(examples_dir: Path, scoring_context: Any) -> None:
    from storyeval.corpus import read_stories
    from storyeval.metrics import score_stories

    stories = read_stories(examples_dir / "stories.jsonl")
    run = score_stories(
        stories, "compression_ratio,vendi_score", missing="skip", context=scoring_context
    )
    systems = run.systems.set_index(["metric", "system"])
    vendi_values = systems.xs("vendi_score", level="metric")["estimate"]
    assert ((vendi_values > 1.0) & (vendi_values < 60.0)).all()  # 60 stories a system
    ratios = systems.xs("compression_ratio", level="metric")["estimate"]
    assert (ratios > 1.5).all()
    human = "\n".join(sorted(s.story for s in stories if s.system == "human")).encode()
    assert ratios["human"] == pytest.approx(len(human) / len(gzip.compress(human, 9, mtime=0)))
    per_story: dict[str, set[float]] = {}
    for score in run.scores:
        if score.metric == "vendi_score":
            per_story.setdefault(str(score.extra.get("system")), set()).add(score.value)
    assert all(len(values) == 1 for values in per_story.values())  # one value a system


def test_homogenization_compares_each_story_with_the_other_systems_for_its_prompt() -> None:
    texts = [
        "The dragon slept on its gold in the cave.",
        "A dragon was sleeping on a pile of gold in a cave.",
        "Stock prices fell sharply on Monday morning.",
        "The knight rode home.",
    ]
    prompts = ["Dragon", "Dragon", "Dragon", "Knight"]
    result = F.homogenization(texts, prompts, ["a", "b", "c", "a"])
    values = result.values
    assert values[0] > values[2] and values[1] > values[2]  # a and b wrote the same story
    assert np.isnan(values[3]) and "no other system" in result.notes[0]
    same_system = F.homogenization(texts[:2], prompts[:2], ["a", "a"]).values
    assert np.isnan(same_system).all()  # its own stories do not count
    # among its own samples: a repeats itself (the two dragon stories), b does not
    own = F.homogenization(texts[:3], prompts[:3], ["a", "a", "b"], among="samples")
    plain = F.homogenization(texts[:3], prompts[:3], ["a", "a", "b"])
    assert own.values[0] == pytest.approx(own.values[1]) and np.isnan(own.values[2])
    assert own.values[0] > plain.values[0]  # the dragons are more alike than dragon and stocks
    assert "no other sample of its system" in own.notes[0]
    assert "among:samples" in own.signature.render()


def test_functional_diversity_counts_classes_of_equivalent_samples() -> None:
    from storyeval.metrics.set_diversity import equivalence_classes

    # chains merge: a~b and b~c put a, b, c in one class even though a and c are apart
    chain = np.array([[1.0, 0.95, 0.5], [0.95, 1.0, 0.95], [0.5, 0.95, 1.0]])
    assert equivalence_classes(chain, 0.9).tolist() == [0, 0, 0]
    assert len(set(equivalence_classes(chain, 0.99).tolist())) == 3
    texts = [
        "The knight rode to the castle.",  # system s, prompt p: two copies and one other
        "The knight rode to the castle.",
        "A whale sang beneath the ice.",
        "Rain on the roof all night.",  # system t, prompt p: two different stories
        "Bread rose slowly in the oven.",
        "Only one sample here.",  # system t, prompt q: alone
    ]
    prompts = ["p", "p", "p", "p", "p", "q"]
    groups = ["s", "s", "s", "t", "t", "t"]
    result = F.functional_diversity(texts, prompts, groups, kernel="ngram", threshold=0.8)
    assert result.values[:5].tolist() == [2.0, 2.0, 2.0, 2.0, 2.0] and np.isnan(result.values[5])
    assert "only sample" in result.notes[0]
    reordered = F.functional_diversity(
        texts[::-1], prompts[::-1], groups[::-1], kernel="ngram", threshold=0.8
    )
    assert reordered.values[::-1].tolist()[:5] == result.values[:5].tolist()
    embedded = F.functional_diversity(texts[:3], prompts[:3], groups[:3], threshold=0.99)
    assert embedded.values.tolist() == [2.0, 2.0, 2.0]  # the copies are one story
    assert embedded.signature.fields["model"].startswith("all-MiniLM-L6-v2")
    assert (
        F.functional_diversity(texts[:3], prompts[:3], groups[:3], threshold=0.0).values[0] == 1.0
    )
    pooled = F.functional_diversity(texts, prompts, groups, kernel="ngram", within="system")
    assert pooled.values.tolist() == [2.0, 2.0, 2.0, 3.0, 3.0, 3.0]


def test_plot_reuse_counts_events_retold_in_the_other_samples() -> None:
    from storyeval.metrics.set_diversity import event_reuse

    unit = np.eye(3)
    assert event_reuse([unit[:2], unit[:1], unit[2:]], 0.9).tolist() == [0.5, 1.0, 0.0]
    assert np.isnan(event_reuse([unit[:1]], 0.9)[0])  # alone: no other sample
    texts = [
        "The knight rode out at dawn. He found a sleeping dragon.",
        "The knight rode out at dawn. A storm drove him home.",
        "A girl baked bread for the whole village.",
        "Only one sample here.",
    ]
    result = F.plot_reuse(texts, ["p", "p", "p", "q"], ["s", "s", "s", "s"])
    assert result.values[:3].tolist() == pytest.approx([0.5, 0.5, 0.0])
    assert np.isnan(result.values[3]) and "only sample" in result.notes[0]
    pooled = F.plot_reuse(texts, ["p", "p", "p", "q"], ["s", "s", "s", "s"], within="system")
    assert not np.isnan(pooled.values).any()


def test_functional_diversity_with_a_judge_partitions_in_order() -> None:
    from storyeval.metrics.set_diversity import judged_classes

    calls: list[tuple[str, str]] = []

    def same(first: str, second: str) -> bool:
        calls.append((first, second))
        return first.split()[1] == second.split()[1]  # same animal, same story

    texts = ["A cat slept.", "A dog ran.", "A cat napped.", "A bird sang.", "A dog barked."]
    assert judged_classes(texts, same) == [0, 1, 0, 2, 1]
    # each sample against the first member of each earlier class, until one matches
    assert calls[:3] == [("A cat slept.", "A dog ran."), ("A cat slept.", "A cat napped."),
                         ("A cat slept.", "A bird sang.")]  # fmt: skip
    result = F.functional_diversity(
        texts[:3], ["p"] * 3, ["s"] * 3, kernel="judge"
    )  # the offline SmolLM2 as the judge: the plumbing, not its verdicts
    assert 1 <= result.values[0] <= 3 and len(set(result.values.tolist())) == 1
    signature = result.signature.render()
    assert "judge:SmolLM2" in signature and "partition:sequential" in signature
    assert "threshold" not in signature and "kernel:judge" in signature


def test_the_ngram_vendi_is_sparse_exact_and_refuses_what_it_cannot_do() -> None:
    from storyeval.metrics.set_diversity import MAX_NGRAM_GRAM, ngram_vectors, vendi

    rng = np.random.default_rng(0)
    vocabulary = [f"w{i}" for i in range(3000)]
    texts = [" ".join(rng.choice(vocabulary, size=12)) for _ in range(400)]
    result = F.vendi_score(texts, ["s"] * 400, kernel="ngram")
    assert result.values[0] == pytest.approx(vendi(ngram_vectors(texts, 1)), rel=1e-9)
    many = [f"u{i} v{i}" for i in range(MAX_NGRAM_GRAM + 1)]  # as many stories as n-grams
    with pytest.raises(ValueError, match="use kernel embedding"):
        F.vendi_score(many, ["s"] * len(many), kernel="ngram")
