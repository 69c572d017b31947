"""Cutting texts as each paper cut its generated ones: the three policies on hand-worked texts,
tokenized text, and the command's counts and records."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from storyeval.truncation import cut_text

# sentences of 4, 5 and 3 words: sentence ends at 4, 9 and 12 words
TEXT = "One two three four. Five six seven eight nine. Ten eleven twelve."


@pytest.mark.parametrize(
    "policy,words,expected,after,status",
    [
        ("at_most", 8, "One two three four.", 4, "cut"),
        ("at_most", 9, "One two three four. Five six seven eight nine.", 9, "cut"),
        ("at_most", 12, TEXT, 12, "kept"),
        ("nearest", 6, "One two three four.", 4, "cut"),  # 4 is 2 away, 9 is 3 away
        ("nearest", 7, "One two three four. Five six seven eight nine.", 9, "cut"),  # 3 vs 2
        ("at_least", 5, "One two three four. Five six seven eight nine.", 9, "cut"),
        ("at_least", 9, "One two three four. Five six seven eight nine.", 9, "cut"),
        ("at_least", 10, TEXT, 12, "kept"),
    ],
)
def test_policies_cut_at_the_right_sentence_end(
    policy: str, words: int, expected: str, after: int, status: str
) -> None:
    found = cut_text(TEXT, words=words, policy=policy)  # type: ignore[arg-type]
    assert (found.text, found.words_before, found.words_after, found.status) == (
        expected,
        12,
        after,
        status,
    )


def test_nearest_prefers_the_shorter_on_a_tie_and_at_least_leaves_short_texts_out() -> None:
    # sentence ends at 4 and 10 words, the cap 7: both 3 away, the shorter wins
    text = "One two three four. Five six seven eight nine ten. Eleven."
    assert cut_text(text, words=7, policy="nearest").text == "One two three four."
    assert cut_text("One two.", words=100, policy="at_least").status == "too_short"


def test_a_first_sentence_over_the_cap_is_cut_inside_and_said() -> None:
    found = cut_text("one two three four five six seven.", words=3, policy="at_most")
    assert found.text == "one two three" and found.status == "cut_inside"


def test_tokenized_text_is_detokenized_before_counting() -> None:
    text = "she did n't go home . then she slept ! it was late ."
    found = cut_text(text, words=7, policy="at_most", detokenize=True, method="tokens")
    assert found.text == "she didn't go home. then she slept!"
    assert found.words_before == 10 and found.status == "cut"


def test_truncate_command_counts_and_records(tmp_path: Path, run_cli) -> None:  # type: ignore[no-untyped-def]
    long_story = " ".join(f"Sentence number {k} has exactly six words." for k in range(40))
    records = [
        {"id": "long", "prompt": "p", "story": long_story, "system": "human"},
        {"id": "short", "prompt": "p", "story": "Too short to keep.", "system": "human"},
    ]
    source = tmp_path / "stories.jsonl"
    source.write_text("".join(json.dumps(r) + "\n" for r in records))
    out = tmp_path / "cut.jsonl"
    code, stdout, err = run_cli(
        "truncate", str(source), "--preset", "clark2021-detection", "-o", str(out)
    )
    assert code == 0, err
    kept = [json.loads(line) for line in out.read_text().splitlines()]
    assert [k["id"] for k in kept] == ["long"]
    assert (
        kept[0]["words_before_cut"] == 280 and kept[0]["words_after_cut"] == 105
    )  # 15 sentences of 7 words
    assert kept[0]["truncation"].startswith("truncate|policy:at_least|words:100")
    assert "1 cut, 1 too short" in stdout and "left out" in err
    code, stdout, _ = run_cli(
        "truncate", str(source), "--words", "50", "--policy", "nearest", "-o", str(out)
    )
    assert code == 0 and [
        json.loads(x)["words_after_cut"] for x in out.read_text().splitlines()
    ] == [49, 4]


def test_clark_context_keeps_the_last_60_words_from_a_sentence_start(tmp_path, run_cli):
    """Clark (2021), section 3.7: "the final 60 words ... We included the whole sentence that
    contained the 60th word"."""
    sentences = [" ".join(f"w{i}_{j}" for j in range(12)) + "." for i in range(8)]  # 96 words
    text = " ".join(sentences)
    kept = cut_text(text, words=60, policy="last_at_least")
    assert kept.text == " ".join(sentences[3:])  # 5 sentences = 60 words reach it exactly
    assert kept.words_after == 60 and kept.status == "cut"
    longer = cut_text(text, words=61, policy="last_at_least")
    assert longer.text == " ".join(sentences[2:]) and longer.words_after == 72
    short = cut_text(" ".join(sentences[:2]), words=60, policy="last_at_least")
    assert short.status == "kept" and short.words_after == 24
    path = tmp_path / "c.jsonl"
    path.write_text(json.dumps({"id": "a", "prompt": text, "story": "Next."}) + "\n")
    code, out, err = run_cli(
        "truncate", str(path), "--preset", "clark2021-context", "--field", "prompt",
        "-o", str(tmp_path / "o.jsonl"),
    )  # fmt: skip
    assert code == 0, out + err
    record = json.loads((tmp_path / "o.jsonl").read_text())
    assert record["prompt"] == kept.text and record["story"] == "Next."
    assert "policy:last_at_least" in record["truncation"]


def test_import_cuts_the_stories_as_the_paper_did(tmp_path, run_cli):
    """`storyeval import ... --truncate PRESET`: the imported stories are cut like the
    generated ones; a story too short for the cut is left out with its judgments."""
    long_story = " ".join(f"Sentence number {i} goes on for a while here." for i in range(30))
    short_story = "Too short to keep."
    path = tmp_path / "ds.jsonl"
    path.write_text(
        "".join(
            json.dumps({"title": f"T{i}", "story": text, "model": "human", "coherence": 3}) + "\n"
            for i, text in enumerate([long_story, short_story])
        )
    )
    code, out, err = run_cli(
        "import", "deltascore", str(path), "--out-dir", str(tmp_path / "cut"),
        "--truncate", "clark2021-detection",
    )  # fmt: skip
    assert code == 0, out + err
    stories = [json.loads(line) for line in (tmp_path / "cut" / "stories.jsonl").open()]
    judgments = [json.loads(line) for line in (tmp_path / "cut" / "judgments.jsonl").open()]
    assert len(stories) == 1 and stories[0]["words_before_cut"] == 270
    assert stories[0]["words_after_cut"] == 108  # the sentence that reaches 100 words ends it
    assert {j["item_id"] for j in judgments} == {stories[0]["id"]}
    assert "too short for clark2021-detection" in out + err
    code, out, err = run_cli(
        "import", "deltascore", str(path), "--out-dir", str(tmp_path / "bad"), "--truncate", "x"
    )
    assert code == 2 and "truncate must be one of" in err
