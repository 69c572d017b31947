"""Diagnostics of model prose: over-used phrases against the human profile, repetition across
stories, the slop index, sentence/paragraph-length variability; worked out by hand on crafted
corpora, then through the registry and the command."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from storyeval.corpus import Story
from storyeval.metrics.phrases import (
    coefficient_of_variation,
    cross_story_shares,
    overused_phrases,
    paragraphs,
    read_word_list,
    repeated_phrases,
    slop_share,
    smoothed_ratio,
)


def crafted() -> list[Story]:
    """Five human stories, five model stories; the model says 'a testament to' in four of
    them, people once."""
    human = [
        "Ana found a key under the mat.",
        "The river rose and the town waited.",
        "Her brother was a testament to patience.",
        "Rain fell on the old roof all night.",
        "He sold the boat and bought a horse.",
    ]
    model = [
        "It was a testament to her courage.",
        "The garden stood as a testament to time.",
        "A testament to love, the house remained.",
        "This was a testament to the village.",
        "The dog barked at the moon.",
    ]
    return [Story(f"h{i}", "", t, system="human") for i, t in enumerate(human)] + [
        Story(f"m{i}", "", t, system="model") for i, t in enumerate(model)
    ]


def test_overused_phrases_by_hand() -> None:
    table = overused_phrases(crafted(), n=3, min_stories=3, min_ratio=2.0)
    row = table[table.ngram == "a testament to"].iloc[0]
    assert (row.system, row.stories, row.reference_stories) == ("model", 4, 1)
    # shares smoothed by half a story: (4.5 / 6) / (1.5 / 6) = 3
    assert row.ratio == pytest.approx(3.0)
    assert row.share == pytest.approx(0.8) and row.reference_share == pytest.approx(0.2)
    assert smoothed_ratio(4, 5, 1, 5) == pytest.approx(3.0)
    assert set(table.system) == {"model"}, "the reference system has no over-used phrases"
    assert overused_phrases(crafted(), n=3, min_stories=3, min_ratio=3.5).empty
    with pytest.raises(ValueError, match="reference system 'people'"):
        overused_phrases(crafted(), reference_system="people")


def test_overused_phrase_rate_through_the_registry() -> None:
    from storyeval.metrics import score_stories

    run = score_stories(
        crafted(),
        "overused_phrase_rate",
        options={"overused_phrase_rate.min_ratio": 2.0},
        bootstrap=0,
    )
    values = {s.item_id: s.value for s in run.scores}
    assert np.isnan(values["h0"]), "the reference's own stories are undefined"
    # "It was a testament to her courage.": 5 trigrams, one over-used
    assert values["m0"] == pytest.approx(1 / 5)
    assert values["m4"] == 0.0
    assert "reference_system:human" in run.metrics["overused_phrase_rate"].signature.render()


def test_cross_story_repetition_by_hand() -> None:
    texts = ["once upon a time a cat", "once upon a time a dog", "once upon a time x", "p q r s"]
    shares = cross_story_shares(texts, n=4, min_stories=3)
    # text 0 has 3 four-grams; "once upon a time" is in 2 other texts, "upon a time a" in 1
    assert shares.tolist() == pytest.approx([1 / 3, 1 / 3, 1 / 2, 0.0])
    table = repeated_phrases([Story(str(i), "", t, system="s") for i, t in enumerate(texts)], n=4)
    assert table.ngram.tolist() == ["once upon a time"]
    assert table.stories.tolist() == [3]


def test_slop_index_and_a_replacement_list(tmp_path: Path) -> None:
    shipped, identity = read_word_list()
    assert identity == "slop-v1" and {"tapestry", "testament", "palpable"} <= shipped
    assert slop_share("The tapestry was palpable.", shipped) == pytest.approx(0.5)
    assert np.isnan(slop_share("...", shipped))
    mine = tmp_path / "mine.txt"
    mine.write_text("# my list\ncat\n", encoding="utf-8")
    from storyeval.metrics import score_stories

    run = score_stories(
        [Story("a", "", "The cat sat.", system="x")],
        "slop_index",
        options={"slop_index.words": str(mine)},
        bootstrap=0,
    )
    assert run.scores[0].value == pytest.approx(1 / 3)
    assert "words:mine.txt@" in run.metrics["slop_index"].signature.render()
    mine.write_text("Two  Words # a phrase\n", encoding="utf-8")
    assert read_word_list(mine)[0] == frozenset({"two words"})  # phrases are entries too
    mine.write_text("# nothing but a comment\n", encoding="utf-8")
    with pytest.raises(ValueError, match="the word list is empty"):
        read_word_list(mine)


def test_length_variability() -> None:
    assert coefficient_of_variation([10, 20, 30]) == pytest.approx(0.5)
    assert np.isnan(coefficient_of_variation([7]))
    assert paragraphs("A.\n\nB.\n\nC.") == ["A.", "B.", "C."]
    from storyeval.metrics import score_stories

    story = Story("a", "", "One two three.\n\nFour five six seven eight nine.", system="x")
    run = score_stories([story], "sentence_length_cv,paragraph_length_cv", bootstrap=0)
    values = {s.metric: s.value for s in run.scores}
    assert values["sentence_length_cv"] == pytest.approx(np.std([3, 6], ddof=1) / 4.5)
    assert values["paragraph_length_cv"] == pytest.approx(np.std([3, 6], ddof=1) / 4.5)


def test_the_default_suite_skips_over_used_phrases_without_people(
    example_stories: list[Any],
) -> None:
    from storyeval.metrics.runs import default_suite

    chosen, _ = default_suite(example_stories)
    assert {
        "overused_phrase_rate",
        "cross_story_repetition",
        "slop_index",
        "sentence_length_cv",
    } <= set(chosen)
    machine_only = [s for s in example_stories if s.system != "human"]
    chosen, skipped = default_suite(machine_only)
    assert "overused_phrase_rate" not in chosen
    assert "reference system 'human'" in skipped["overused_phrase_rate"]


def test_diagnose_command(run_cli: Any, examples_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "diag"
    code, stdout, stderr = run_cli(
        "diagnose", str(examples_dir / "stories.jsonl"), "-o", str(out), "--bootstrap", "50"
    )
    assert code == 0, stderr
    assert "most over-used phrases" in stdout
    import pandas as pd

    phrases = pd.read_csv(out / "overused_phrases.csv")
    assert set(phrases.system) <= {"smollm2-k40-t0.7", "smollm2-p0.9"} and len(phrases) > 0
    assert (phrases.ratio >= 3.0).all() and (phrases.stories >= 3).all()
    systems = pd.read_csv(out / "diagnostics.csv")
    assert set(systems.metric) >= {"slop_index", "cross_story_repetition"}
    assert "Over-used phrases" in (out / "diagnostics.md").read_text()


def test_not_but_constructions_by_hand() -> None:
    from storyeval import functional as F
    from storyeval.metrics.prose import not_but_count

    cases = {
        "This is not about money, but about trust.": 1,
        "It is not a story. It is a warning.": 1,
        "Not because he was afraid, but because he was tired.": 1,
        "They were not just friends, they were family.": 1,
        "It wasn't fear. It was something older. She was not tired but angry.": 2,
        "He did not know. Nobody did.": 0,
        "It was not until dawn that she slept.": 0,
        "She did not go. But he did.": 0,
    }
    for text, expected in cases.items():
        assert not_but_count(text) == expected, text
    result = F.not_but_rate(["It is not a story. It is a warning.", "He ran home.", ""])
    assert result.values[0] == pytest.approx(1000 / 9) and result.values[1] == 0.0
    assert np.isnan(result.values[2])


def test_a_slop_list_built_from_the_corpus_finds_planted_phrases(
    tmp_path, run_cli, examples_dir
) -> None:
    from storyeval import functional as F
    from storyeval.metrics.phrases import build_slop_list, read_word_list, slop_list_text

    rng = np.random.default_rng(0)
    common = [
        "the",
        "dog",
        "ran",
        "home",
        "and",
        "the",
        "cat",
        "sat",
        "by",
        "the",
        "door",
        "while",
        "rain",
        "fell",
    ]

    def text(planted: bool) -> str:
        tokens = list(rng.choice(common, 40))
        if planted:
            tokens[5:8] = ["a", "testament", "to"]
            tokens[20:22] = ["shimmering", "light"]
        return " ".join(tokens) + "."

    model = [text(True) for _ in range(80)]
    human = [text(False) for _ in range(80)]
    entries = build_slop_list(model, human)
    found = set(entries["entry"])
    assert {"testament", "shimmering", "a testament to", "shimmering light"} <= found
    assert not found & set(common)  # words both use alike are not listed
    path = tmp_path / "slop.txt"
    path.write_text(slop_list_text(entries, source="test"))
    vocabulary, identity = read_word_list(path)
    assert "a testament to" in vocabulary and identity.startswith("slop.txt@")
    scores = F.slop_index([model[0], human[0]], words=str(path)).values
    assert scores[0] >= 5 / 41 and scores[1] < scores[0]
    code, out, err = run_cli(
        "diagnose",
        str(examples_dir / "stories.jsonl"),
        "-o",
        str(tmp_path / "d"),
        "--bootstrap",
        "10",
        "--build-list",
        str(tmp_path / "built.txt"),
    )
    assert code == 0, err
    assert "over-represented words and phrases" in out
    assert read_word_list(tmp_path / "built.txt")[0]
