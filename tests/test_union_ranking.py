"""UNION's pairwise ranking loss (``rank_weight``): a story and its negatives share a batch,
each negative adds RankNet's logistic loss on the two logits, the dev reports the pairwise
accuracy, and the paper's batches and losses are unchanged when it is off."""

from __future__ import annotations

import copy
import random
from typing import Any

import pytest

from storyeval.learn.trainer import _batches
from storyeval.learn.union import UnionConfig, UnionExample, UnionTask, rank_differences


def _old_batches(n: int, size: int, seed: int, epoch: int, lengths: list[int] | None) -> Any:
    """The trainer's batches before groups existed (0.7.1), to prove they are unchanged."""
    rng = random.Random(f"{seed}|epoch|{epoch}")
    order = list(range(n))
    rng.shuffle(order)
    if lengths is None:
        return [order[i : i + size] for i in range(0, n, size)]
    batches: list[list[int]] = []
    for start in range(0, n, size * 50):
        chunk = sorted(order[start : start + size * 50], key=lambda index: lengths[index])
        batches += [chunk[i : i + size] for i in range(0, len(chunk), size)]
    rng.shuffle(batches)
    return batches


def test_groups_share_a_batch_and_ungrouped_batches_are_unchanged() -> None:
    rng = random.Random(1)
    lengths = [rng.randint(20, 400) for _ in range(1203)]
    for lens in (lengths, None):
        assert _batches(1203, 10, 7, 2, lens) == _old_batches(1203, 10, 7, 2, lens)
    # a story and its negative (pairs), some stories without one, one with three negatives
    groups: list[Any] = [index // 2 for index in range(1200)] + [None, None, 599]
    for lens in (lengths, None):
        batches = _batches(1203, 10, 7, 0, lens, groups)
        assert sorted(i for batch in batches for i in batch) == list(range(1203))
        where = {i: number for number, batch in enumerate(batches) for i in batch}
        for index, key in enumerate(groups):
            if key is not None:
                assert where[index] == where[2 * key]  # never split
        assert max(len(batch) for batch in batches) == 10
        assert batches != _batches(1203, 10, 7, 1, lens, groups)


def _task(encoder: Any, rank_weight: float) -> UnionTask:
    import torch

    from storyeval.learn.union import _union_model_class

    torch.manual_seed(0)
    model = _union_model_class()(copy.deepcopy(encoder.model), True, tie=True)
    return UnionTask(model, encoder.tokenizer, UnionConfig(max_length=48, rank_weight=rank_weight))


def _pairs() -> list[UnionExample]:
    story = "Tom wanted a dog. He saved his money. He bought a puppy. They played all day."
    repeated = "Tom wanted a dog. He saved his money his money. He bought a puppy. They played."
    other = "Ann baked bread. It rose well. She sold it at the market."
    negated = "Ann baked bread. It did not rise. She sold it at the market."
    return [
        UnionExample("a", "", story, story, 1),
        UnionExample("a-1", "", repeated, story, 0, ("repetition",), "a"),
        UnionExample("b", "", other, other, 1),
        UnionExample("b-1", "", negated, other, 0, ("negation",), "b"),
        UnionExample("c-1", "", negated, other, 0, ("negation",), "c"),  # its story elsewhere
    ]


def test_rank_loss_is_ranknets_logistic_loss_on_each_pair_in_the_batch(encoder: Any) -> None:
    import torch
    import torch.nn.functional as F

    batch = _pairs()
    plain, ranked = _task(encoder, 0.0), _task(encoder, 2.0)
    assert plain.example_group(batch[1]) is None
    assert [ranked.example_group(e) for e in batch] == ["a", "a", "b", "b", "c"]
    totals = []
    for task in (plain, ranked):
        task.model.eval()  # no dropout: the two forward passes must match
        torch.manual_seed(5)  # the same sampled vocabulary
        with torch.no_grad():
            total, _ = task.batch_loss(batch)
        totals.append(float(total))
    with torch.no_grad():
        _, _, logits, _ = plain._losses(batch)
    differences = rank_differences(batch, logits)
    assert differences.tolist() == pytest.approx(
        [float(logits[1] - logits[0]), float(logits[3] - logits[2])]
    )  # c-1's story is not in the batch: no pair
    expected = 2.0 * float(F.softplus(differences).mean())
    assert totals[1] - totals[0] == pytest.approx(expected, rel=1e-4)
    with pytest.raises(ValueError, match="rank_weight must be a finite number"):
        UnionConfig(rank_weight=-1.0)


def test_dev_reports_pair_accuracy_and_the_rank_term(encoder: Any) -> None:
    import torch
    import torch.nn.functional as F

    examples = _pairs()
    plain, ranked = _task(encoder, 0.0), _task(encoder, 1.0)
    for task in (plain, ranked):
        task.model.eval()
    with torch.no_grad():
        shown = plain.evaluate(examples)
        with_rank = ranked.evaluate(examples)
        _, _, logits, _ = plain._losses(examples)
    differences = [float(logits[1] - logits[0]), float(logits[3] - logits[2])]
    wins = sum(1.0 if d < 0 else 0.5 if d == 0 else 0.0 for d in differences)
    assert shown["pair_accuracy"] == with_rank["pair_accuracy"] == wins / 2
    penalty = float(F.softplus(torch.tensor(differences)).mean())
    assert with_rank["loss"] - shown["loss"] == pytest.approx(penalty, rel=1e-4)
    assert with_rank["bce"] == pytest.approx(shown["bce"])


@pytest.mark.filterwarnings("ignore:.*negative\\(s\\) left out")
def test_train_union_rank_weight_from_the_command_line(
    human: Any, tmp_path: Any, run_cli: Any
) -> None:
    import json

    from storyeval.learn import TrainingConfig
    from storyeval.learn.trainer import read_metadata
    from storyeval.learn.union import union_signature
    from storyeval.learn.union_scoring import UnionScorer

    source = tmp_path / "human.jsonl"
    source.write_text("".join(json.dumps(s.to_dict()) + "\n" for s in human[:24]))
    args = ["--stories", str(source), "-o", str(tmp_path / "u"), "--max-steps", "3"]
    args += ["--epochs", "1", "--batch-size", "6", "--max-length", "48", "-q"]
    code, stdout, stderr = run_cli("train", "union", *args, "--rank-weight", "0.5")
    assert code == 0, stderr
    assert "|rank_weight:0.5|" in stdout
    meta = read_metadata(tmp_path / "u")
    assert 0.0 <= meta["training"]["best_dev"]["pair_accuracy"] <= 1.0
    assert UnionScorer(tmp_path / "u").config.rank_weight == 0.5
    default = union_signature(
        UnionConfig(), TrainingConfig(), encoder_identity="e", data="d", n_stories=24, dev="d"
    )
    assert default.fields["rank_weight"] is None  # the paper's loss signs as before
    code, _, stderr = run_cli("train", "union", *args, "--rank-weight", "-1", "--overwrite")
    assert code == 2 and "rank_weight must be a finite number >= 0" in stderr


def _grammar_stories(count: int) -> list[Any]:
    """Five-sentence stories of the built-in ``story`` grammar, the first sentence the prompt
    (as UNION reads ROCStories)."""
    from storyeval.corpus import Story
    from storyeval.rules import generate_corpus, load_grammar
    from storyeval.text import split_sentences

    stories = []
    for generated in generate_corpus(load_grammar("story"), count, seed=3):
        record = generated.to_record()
        sentences = split_sentences(record["story"])
        stories.append(Story(record["id"], sentences[0], " ".join(sentences[1:])))
    return stories


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore")
def test_a_repeated_ngram_is_learned_with_the_ranking_loss_and_not_without(
    nlp: Any, tmp_path: Any
) -> None:
    """Negatives that only repeat an n-gram inside a sentence, 40 steps on 200 stories: the
    ranking loss tells 100 held-out stories from their negatives 0.95 of the time, the paper's
    loss 0.63 (seen here; 0.97 and 0.67 after 60 steps on 300). The paper's loss fails the
    first assertion: this is why repetition was not learned."""
    from storyeval.learn import TrainingConfig
    from storyeval.learn.union import train_union
    from storyeval.learn.union_scoring import UnionScorer, heldout_discrimination
    from storyeval.perturb import PerturbOptions

    stories = _grammar_stories(300)
    train, heldout = stories[:200], stories[200:]
    ngrams_only = PerturbOptions(sentence_repetition_probability=0.0)
    training = TrainingConfig(
        epochs=3, max_steps=40, learning_rate=5e-5, head_learning_rate=1e-3, batch_size=10, seed=1
    )
    estimates = {}
    for weight in (1.0, 0.0):
        config = UnionConfig(
            max_length=64, techniques=("repetition",), perturb=ngrams_only, rank_weight=weight
        )
        output = tmp_path / f"rank-{weight}"
        train_union(train, output, config=config, training=training, progress=False, nlp=nlp)
        table = heldout_discrimination(
            UnionScorer(output),
            heldout,
            techniques=["repetition"],
            seed=7,
            nlp=nlp,
            options=ngrams_only,
        )
        assert table["n_pairs"].iloc[0] == 100
        estimates[weight] = float(table["estimate"].iloc[0])
    assert estimates[1.0] >= 0.85, estimates
    assert estimates[1.0] - estimates[0.0] >= 0.15, estimates


def test_recon_sample_option_chooses_the_papers_full_softmax() -> None:
    """``train union --recon-sample full`` is the paper's reconstruction softmax over the
    whole vocabulary (Eq. 4); a count samples that many tokens beside the batch's own."""
    from storyeval.cli.train import _recon_sample
    from storyeval.learn.union import UnionConfig

    assert _recon_sample("full") is None and _recon_sample("256") == 256
    assert UnionConfig(recon_sample=_recon_sample("full")).recon_sample is None
    with pytest.raises(ValueError, match="count or 'full'"):
        _recon_sample("all")
