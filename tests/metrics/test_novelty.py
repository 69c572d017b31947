"""Novelty against a corpus: the suffix-array index against a brute-force search, n-gram
novelty and L-uniqueness on hand-worked cases, the index and score commands end to end."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from storyeval import functional as F
from storyeval.metrics.novelty import (
    CorpusIndexError,
    build_index,
    index_words,
    novel_share,
    open_index,
    uniqueness,
)


def _brute_force(query: list[str], documents: list[list[str]], depth: int) -> list[int]:
    """The longest span from each query position found in one document, by trying them all."""
    best = []
    for i in range(len(query)):
        longest = 0
        for doc in documents:
            for j in range(len(doc)):
                k = 0
                while (
                    k < depth
                    and i + k < len(query)
                    and j + k < len(doc)
                    and query[i + k] == doc[j + k]
                ):
                    k += 1
                longest = max(longest, k)
        best.append(longest)
    return best


@pytest.mark.parametrize("depth", [3, 8, 16])
def test_match_lengths_equal_a_brute_force_search(tmp_path: Path, depth: int) -> None:
    rng = random.Random(depth)
    vocabulary = ["a", "b", "c", "d", "e"]  # few words: long matches are common
    documents = [[rng.choice(vocabulary) for _ in range(rng.randint(1, 40))] for _ in range(30)]
    index = build_index([" ".join(d) for d in documents], tmp_path / "index", depth=depth)
    assert index.words == sum(map(len, documents)) and index.documents == 30
    for _ in range(25):
        query = [rng.choice([*vocabulary, "zz"]) for _ in range(rng.randint(1, 50))]
        assert index.match_lengths(query).tolist() == _brute_force(query, documents, depth)


def test_spans_do_not_cross_documents(tmp_path: Path) -> None:
    index = build_index(["the old mill", "burned down in May"], tmp_path / "index", depth=8)
    # "mill burned" spans the two documents: from "mill" only one word matches
    assert index.match_lengths(index_words("the old mill burned down")).tolist() == [3, 2, 1, 2, 1]


def test_novelty_and_uniqueness_worked_by_hand() -> None:
    # match lengths of a 6-word story: positions 0-2 start spans of 4, 3, 2 words found
    matches = np.array([4, 3, 2, 0, 1, 0])
    assert novel_share(matches, 1) == pytest.approx(2 / 6)  # 2 words unknown to the corpus
    assert novel_share(matches, 2) == pytest.approx(2 / 5)  # the bigrams at words 3 and 4
    assert novel_share(matches, 4) == pytest.approx(2 / 3)
    assert np.isnan(novel_share(matches, 7))
    assert uniqueness(matches, 4) == pytest.approx(2 / 6)  # words 0-3 covered by one 4-gram
    assert uniqueness(matches, 2) == pytest.approx(2 / 6)  # words 0-3 by the 4-, 3- and 2-gram
    assert uniqueness(matches, 1) == pytest.approx(1 / 6)  # word 3 lies in the 4-gram; word 5 not
    assert np.isnan(uniqueness(np.zeros(0, dtype=np.int64), 3))


def test_metrics_rank_copied_and_new_text(tmp_path: Path) -> None:
    corpus = [
        "the rain fell on the old roof all night and the children slept",
        "a fox crossed the frozen river at dawn looking for food",
    ]
    index = build_index(corpus, tmp_path / "index", depth=16)
    copied = "the rain fell on the old roof all night and the children slept"
    mixed = "the rain fell on the old roof until a violin woke the quiet harbor town"
    new = "seven clockmakers argued about violet thunder beneath the lighthouse stairs"
    novelty = F.ngram_novelty([copied, mixed, new], index=str(tmp_path / "index"), n=5)
    assert novelty.values[0] == 0.0 and novelty.values[2] == 1.0
    assert 0.0 < novelty.values[1] < 1.0
    creativity = F.creativity_index([copied, mixed, new], index=index)
    assert creativity.values[0] == 0.0 and creativity.values[2] == 8.0
    assert 0.0 < creativity.values[1] < 8.0
    assert creativity.signature.fields["index"] == index.identity
    assert index.identity.startswith("index@") and index.identity.endswith("-d16")


def test_bad_indexes_and_options_are_named(tmp_path: Path) -> None:
    with pytest.raises(CorpusIndexError, match=r"no index\.json"):
        open_index(tmp_path)
    build_index(["one two three"], tmp_path / "small", depth=4)
    with pytest.raises(CorpusIndexError, match="longer than the index's depth"):
        F.ngram_novelty(["one two three"], index=str(tmp_path / "small"), n=5)
    with pytest.raises(CorpusIndexError, match="no words"):
        build_index(["!!", ""], tmp_path / "empty")
    with pytest.raises(CorpusIndexError, match="depth must be"):
        build_index(["a b"], tmp_path / "x", depth=1)
    with pytest.raises(CorpusIndexError, match="must not exceed"):
        F.creativity_index(["a"], index=str(tmp_path / "small"), min_span=4, max_span=3)


def test_a_rebuilt_index_has_a_new_identity(tmp_path: Path) -> None:
    first = build_index(["one two three"], tmp_path / "index").identity
    second = build_index(["one two four"], tmp_path / "index")
    assert second.identity != first and second.match_lengths(["two", "four"]).tolist() == [2, 1]


def test_index_and_score_commands(tmp_path: Path, run_cli: Any, examples_dir: Path) -> None:
    text = tmp_path / "book.txt"
    text.write_text("It was a dark and stormy night.\nThe rain fell in torrents.\n")
    code, stdout, err = run_cli(
        "index", str(examples_dir / "human.jsonl"), str(text), "-o", str(tmp_path / "idx")
    )
    assert code == 0, err
    assert "in 61 documents" in stdout  # 60 stories and the text file
    stories = tmp_path / "stories.jsonl"
    stories.write_text(
        json.dumps({"id": "a", "prompt": "", "story": "It was a dark and stormy night again."})
        + "\n"
        + json.dumps({"id": "b", "prompt": "", "story": "Quartz owls debated the tide charts."})
        + "\n"
    )
    out = tmp_path / "scores.jsonl"
    code, stdout, err = run_cli(
        "score", str(stories), "--metrics", "ngram_novelty", "-O",
        f"novelty.index={tmp_path / 'idx'}", "-O", "ngram_novelty.n=3", "-o", str(out),
    )  # fmt: skip
    assert code == 0, err
    values = {r["item_id"]: r["value"] for r in map(json.loads, out.read_text().splitlines())}
    assert values == {"a": pytest.approx(1 / 6), "b": 1.0}  # only 'stormy night again' is new
    code, _, err = run_cli("index", str(tmp_path / "missing.txt"), "-o", str(tmp_path / "i2"))
    assert code == 2 and "no such file" in err
