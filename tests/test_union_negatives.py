"""UNION's negatives (issue: repetition not learned): negatives whose edit lies past
max_length are left out (they read as their originals), a share of the negatives can be one
technique alone, and train union checks each technique on held-out stories."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from storyeval.corpus import Story
from storyeval.learn.union import (
    UnionConfig,
    UnionExample,
    UnionTask,
    build_examples,
    visible_negatives,
)


def test_negatives_edited_past_max_length_are_left_out(encoder: Any) -> None:
    task = UnionTask(None, encoder.tokenizer, UnionConfig(max_length=16))
    early = "The dog ran home. It was late. " + "The night was cold and dark. " * 3
    original = "The cat ran home. It was late. " + "The night was cold and dark. " * 3
    late = "The cat ran home. It was late. " + "The night was cold and dark. " * 2 + "Dark."
    examples = [
        UnionExample("s", "", original, original, 1),
        UnionExample("s-early", "", early, original, 0, ("substitution",), "s"),
        UnionExample("s-late", "", late, original, 0, ("repetition",), "s"),
    ]
    with pytest.warns(UserWarning, match=r"1 negative\(s\) left out: their edits lie past"):
        kept, dropped = visible_negatives(examples, task)
    assert [e.id for e in kept] == ["s", "s-early"] and dropped == 1
    wide = UnionTask(None, encoder.tokenizer, UnionConfig(max_length=128))
    assert visible_negatives(examples, wide) == (examples, 0)


def test_a_share_of_negatives_is_one_technique_alone(human: Any, nlp: Any) -> None:
    stories = human[:40]
    mixed, _ = build_examples(stories, UnionConfig(), seed=3, nlp=nlp)
    half, _ = build_examples(stories, UnionConfig(single_share=0.5), seed=3, nlp=nlp)
    negatives = [e for e in half if e.label == 0]
    alone = [e for e in negatives if len(e.techniques) == 1]
    assert 0.4 < len(alone) / len(negatives) < 0.85  # half alone, plus mixtures of size 1
    single = {e.source_id: e for e in negatives}
    for example in (e for e in mixed if e.label == 0):
        other = single[example.source_id]
        if len(other.techniques) > 1:  # a mixed story draws as before
            assert other.text == example.text
    every, _ = build_examples(stories, UnionConfig(single_share=1.0), seed=3, nlp=nlp)
    counts: dict[str, int] = {}
    for example in (e for e in every if e.label == 0):
        assert len(example.techniques) == 1
        counts[example.techniques[0]] = counts.get(example.techniques[0], 0) + 1
    assert set(counts) == {"repetition", "substitution", "reordering", "negation"}
    assert min(counts.values()) >= 5
    with pytest.raises(ValueError, match="single_share must be in"):
        UnionConfig(single_share=1.5)


def test_train_union_checks_each_technique_on_heldout_stories(
    human: Any, tmp_path: Path, run_cli: Any
) -> None:
    train, heldout = tmp_path / "train.jsonl", tmp_path / "heldout.jsonl"
    train.write_text("".join(json.dumps(s.to_dict()) + "\n" for s in human[:12]))
    heldout.write_text("".join(json.dumps(s.to_dict()) + "\n" for s in human[50:56]))
    out = tmp_path / "union"
    code, stdout, stderr = run_cli(
        "train", "union", "--stories", str(train), "-o", str(out), "--max-steps", "2",
        "--epochs", "1", "--max-length", "48", "--window", "2", "--single-share", "0.5",
        "--mix-weights", "repetition=0.25", "--heldout", str(heldout), "-q",
    )  # fmt: skip
    assert code == 0, stderr
    assert "|single_share:0.5|" in stdout and "|mix_weights:repetition=0.25|" in stdout
    from storyeval.learn.union_scoring import load_union

    assert load_union(out).config.perturb.mix_weight("repetition") == 0.25
    assert "held-out stories (heldout.jsonl): the original preferred to its negative" in stdout
    table = (out / "heldout_techniques.csv").read_text().splitlines()
    assert table[0].startswith("metric,") or "technique" in table[0]
    assert {line.split(",")[-1] for line in table[1:]} <= {
        "repetition", "substitution", "reordering", "negation",
    }  # fmt: skip
    assert len(table) == 5
    import pandas as pd

    techniques = pd.read_csv(out / "heldout_techniques.csv").set_index("technique")
    operations = pd.read_csv(out / "heldout_operations.csv")
    assert "by edit operation" in stdout
    for technique, operation in zip(operations["technique"], operations["operation"], strict=True):
        assert (
            set(operation.split("|"))
            <= {
                "repetition": {"ngram_repetition", "sentence_repetition"},
                "substitution": {"keyword", "antonym", "sentence_substitution"},
                "reordering": {"reorder"},
                "negation": {"add_negation", "remove_negation"},
            }[technique]
        )
    for technique, count in operations.groupby("technique")["n_pairs"].sum().items():
        assert count >= techniques.loc[technique, "n_pairs"]  # several operations count for each
    negatives = tmp_path / "neg.jsonl"
    negatives.write_text(json.dumps({"source_id": human[0].id, "story": "x."}) + "\n")
    code, _, stderr = run_cli(
        "train", "union", "--stories", str(train), "-o", str(tmp_path / "x"),
        "--negatives-file", str(negatives), "--single-share", "0.5", "-q",
    )  # fmt: skip
    assert code == 2 and "leave out one of them" in stderr
    code, _, stderr = run_cli(
        "train", "union", "--stories", str(train), "-o", str(tmp_path / "y"),
        "--negatives-file", str(negatives), "--mix-weights", "negation=1", "-q",
    )  # fmt: skip
    assert code == 2 and "leave out one of them" in stderr


def test_union_examples_keep_their_story_order(human: Any, nlp: Any) -> None:
    stories = [Story(s.id, s.prompt, s.story) for s in human[:10]]
    examples, _ = build_examples(stories, UnionConfig(single_share=0.5), seed=1, nlp=nlp)
    sources = [e.source_id for e in examples if e.label == 0]
    order = [s.id for s in stories]
    assert sources == sorted(sources, key=order.index)
