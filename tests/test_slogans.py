"""Skeleton-constrained slogan suggestions (Clark 2021, section 2.5.2) and ``storyeval slogans``."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from storyeval.base.errors import DataFileError, StoryevalError
from storyeval.generate.slogans import (
    SkeletonBank,
    SloganSettings,
    content_words,
    extract_skeleton,
    fill,
    inflect,
    read_lines,
    suggest,
)

LINES = [
    "Fresh bread makes happy mornings.",
    "Strong coffee wakes sleepy people.",
    "Knowledge is power.",
]


@pytest.fixture(scope="module")
def bank(nlp: Any) -> SkeletonBank:
    return SkeletonBank.from_lines(LINES, nlp=nlp, identity="test")


@pytest.fixture(scope="module")
def tiny_lm(tiny_models: dict[str, Any]) -> Any:
    """The two-layer model of SmolLM2's architecture: for the mechanics of filling slots
    (seeds, counts, which words may go where), not for how good the slogans read."""
    from storyeval.models import load_causal_lm

    return load_causal_lm(str(tiny_models["lm"]))


def test_skeleton_replaces_content_words_by_their_tags(nlp: Any) -> None:
    skeleton = extract_skeleton("Fresh bread makes happy mornings.", nlp)
    assert skeleton.pattern == "* * * * *."
    assert skeleton.tags == ("JJ", "NN", "VBZ", "JJ", "NNS", None)
    # function words stay: only the content word is a slot
    assert extract_skeleton("Knowledge is power.", nlp).pattern == "* is *."


def test_the_bank_keeps_the_corpus_words_by_tag(bank: SkeletonBank) -> None:
    assert len(bank.skeletons) == 3
    assert bank.vocabulary["VBZ"] == {"makes": 1, "wakes": 1}
    assert set(bank.vocabulary["NNS"]) == {"mornings", "people"}


def test_targets_are_inflected_to_the_slot(nlp: Any) -> None:
    [walk] = content_words(["walk"], nlp)
    assert inflect(walk, "VBZ") == "walks"
    assert inflect(walk, "NN") is None  # part of speech differs
    [boot] = content_words(["boots"], nlp)
    assert (boot.lemma, inflect(boot, "NN")) == ("boot", "boot")


def test_filling_uses_the_targets_and_keeps_the_pattern(
    bank: SkeletonBank, causal_lm: Any, nlp: Any
) -> None:
    targets = content_words(["tea", "evenings"], nlp)
    skeleton = bank.skeletons[0]  # * * * * *. (JJ NN VBZ JJ NNS)
    suggestion = fill(skeleton, targets, bank, causal_lm, SloganSettings())
    assert set(suggestion.targets) == {"tea", "evenings"}  # the writer's words
    words = suggestion.text.rstrip(".").lower().split()
    assert "tea" in words and "evenings" in words
    retagged = extract_skeleton(suggestion.text, nlp)
    assert len(retagged.words) == len(skeleton.words)
    assert retagged.words[-1] == "."


def test_suggest_is_seeded_and_gives_at_most_three(
    bank: SkeletonBank, tiny_lm: Any, nlp: Any
) -> None:
    first = suggest(["coffee", "morning"], "Wake up happy.", bank=bank, lm=tiny_lm, nlp=nlp)
    again = suggest(["coffee", "morning"], "Wake up happy.", bank=bank, lm=tiny_lm, nlp=nlp)
    suggestions, targets = first
    assert first == again
    assert 1 <= len(suggestions) <= 3
    assert set(targets) <= {"coffee", "morning", "wake", "happy"}
    assert all(s.targets for s in suggestions)  # every suggestion uses a target word
    with pytest.raises(StoryevalError, match="no content word"):
        suggest(["the", "of"], bank=bank, lm=tiny_lm, nlp=nlp)


def test_neighbours_widen_the_slot_words(bank: SkeletonBank, causal_lm: Any, nlp: Any) -> None:
    """With --neighbours the slots may take words near the targets in GloVe, words neither the
    writer nor the skeleton corpus' frequent words offer."""
    import dataclasses

    from storyeval.generate.slogans import SloganSettings, Target, related_words, slogan_signature

    related = related_words([Target("coffee", "coffee", "NN")], 4)
    assert [t.word for t in related] == ["drink", "drinks", "wine", "tea"]
    assert all(t.tag == "NN" for t in related)
    plain = SloganSettings()
    wide = dataclasses.replace(plain, neighbours=4)
    # an LM that likes "tea": the slot takes it only if the neighbours are offered
    import storyeval.generate.slogans as slogans

    def likes_tea(lm: Any, texts: list[str]) -> list[float]:
        return [1.0 if "tea" in t.lower().split() else 0.0 for t in texts]

    monkey = pytest.MonkeyPatch()
    monkey.setattr(slogans, "_prefix_scores", likes_tea)
    try:
        base, _ = suggest(["coffee"], "", bank=bank, lm=causal_lm, nlp=nlp, settings=plain)
        more, _ = suggest(["coffee"], "", bank=bank, lm=causal_lm, nlp=nlp, settings=wide)
    finally:
        monkey.undo()
    words = lambda found: {w.strip(".,!") for s in found for w in s.text.lower().split()}  # noqa: E731
    assert "tea" not in words(base) and "tea" in words(more)
    assert "neighbours" not in slogan_signature(bank, causal_lm, nlp, 0, plain).fields
    signature = slogan_signature(bank, causal_lm, nlp, 0, wide).fields
    assert signature["neighbours"] == 4 and str(signature["vectors"]).startswith("glove")


def test_a_requests_suggestions_do_not_share_corpus_words(
    bank: SkeletonBank, tiny_lm: Any, nlp: Any
) -> None:
    """Without it most suggestions of a request began with the corpus' favourite adjective
    ("Bright ..."); the writer's own targets may still recur (the mechanics, on the two-layer
    model)."""
    import dataclasses

    from storyeval.generate.slogans import SloganSettings, first_word_diversity

    plain = SloganSettings()
    repeat = dataclasses.replace(plain, distinct_fillers=False)
    found, targets = suggest(["library", "books"], "Read more books at the library.", bank=bank,
                             lm=tiny_lm, nlp=nlp, settings=plain)  # fmt: skip
    fillers = [set(s.fillers) for s in found]
    for i, mine in enumerate(fillers):
        for other in fillers[i + 1 :]:
            assert not mine & other, (mine, other)
    assert all(not set(s.fillers) & {t.lower() for t in targets} for s in found)
    loose, _ = suggest(["library", "books"], "Read more books at the library.", bank=bank,
                       lm=tiny_lm, nlp=nlp, settings=repeat)  # fmt: skip
    before = first_word_diversity([{"suggestions": [s.text for s in loose]}])
    after = first_word_diversity([{"suggestions": [s.text for s in found]}])
    assert after["top_count"] <= before["top_count"]
    assert (
        after["top_count"] == 1 or after["distinct_first_words"] >= before["distinct_first_words"]
    )


def test_the_replication_preset_needs_wikiquote_lines(run_cli: Any, write_file: Any) -> None:
    requests = write_file("r.jsonl", '{"id": "a", "keywords": ["coffee"]}\n')
    code, _, err = run_cli("slogans", str(requests), "-o", "x.jsonl", "--preset", "clark2021")
    assert code == 2 and "storyeval slogan-lines" in err


def test_shipped_lines_and_user_files(tmp_path: Path) -> None:
    assert len(read_lines()) >= 50
    empty = tmp_path / "empty.txt"
    empty.write_text("# only a comment\n\n", encoding="utf-8")
    with pytest.raises(StoryevalError, match="no line"):
        read_lines(empty)
    with pytest.raises(FileNotFoundError):
        read_lines(tmp_path / "missing.txt")


def test_cli_writes_the_interface_records(run_cli: Any, write_file: Any, tmp_path: Path) -> None:
    requests = write_file(
        "requests.jsonl",
        '{"id": "a", "keywords": ["coffee", "morning"], "draft": "Wake up to better coffee."}\n'
        '{"id": "b", "keywords": ["the"]}\n',
    )
    skeletons = write_file("lines.txt", "\n".join(LINES) + "\n")
    output = tmp_path / "out.jsonl"
    code, out, err = run_cli(
        "slogans", str(requests), "-o", str(output), "--skeletons", str(skeletons)
    )
    assert code == 0, out + err
    records = [json.loads(line) for line in output.read_text(encoding="utf-8").splitlines()]
    assert [r["id"] for r in records] == ["a", "b"]
    assert 1 <= len(records[0]["suggestions"]) <= 3
    assert len(records[0]["skeletons"]) == len(records[0]["suggestions"])
    assert records[0]["targets"] and "skeletons:lines.txt@" in records[0]["signature"]
    for skeleton in records[0]["skeletons"]:  # slots named by their part of speech
        assert "*" not in skeleton and re.search(r"\[(NN|NNS|JJ|JJR|VB[DGNPZ]?|RB)\]", skeleton)
    for used in records[0]["used_targets"]:  # the writer's words, never a lemma of them
        assert set(used) <= set(records[0]["targets"])
    assert records[1]["suggestions"] == [] and "content word" in records[1]["error"]
    assert re.search(r"first words: \d+ distinct in \d+ suggestions", out)


def test_bad_requests_are_reported_by_line(write_file: Any) -> None:
    from storyeval.generate.slogans import read_requests

    path = write_file(
        "bad.jsonl",
        '{"id": "a", "keywords": ["tea"]}\n{"id": "a", "keywords": ["tea"]}\n'
        '{"id": "c", "keywords": 3}\n{"keywords": ["x"]}\nnot json\n',
    )
    with pytest.raises(DataFileError) as info:
        read_requests(path)
    lines = [p.line for p in info.value.problems]
    assert lines == [2, 3, 4, 5]
    assert "duplicate id" in str(info.value)
