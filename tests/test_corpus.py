"""Story and judgment files: every error class named by file and line, through the library
and through `storyeval validate` run as a real subprocess."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from storyeval.base.errors import DataFileError
from storyeval.corpus import (
    Judgment,
    Score,
    Story,
    detect_kind,
    read_judgments,
    read_scores,
    read_stories,
    write_judgments,
    write_scores,
    write_stories,
)

GOOD_STORY = {
    "id": "a",
    "prompt": "Once.",
    "story": "It rained.",
    "reference": "It snowed.",
    "system": "m1",
}


def jsonl(*records: object) -> str:
    return "".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in records)


def validate(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "storyeval", "validate", str(path)],
        capture_output=True,
        text=True,
        check=False,
    )


# (file name, content, line number, fragment of the reason)
BROKEN_FILES = [
    (
        "malformed.jsonl",
        jsonl(GOOD_STORY, '{"id": "b", "story": "x"', {"id": "c", "story": "y"}),
        2,
        "malformed JSON",
    ),
    (
        "missing.jsonl",
        jsonl(GOOD_STORY, {"id": "b", "prompt": "p"}),
        2,
        "required field 'story' is missing",
    ),
    (
        "empty.jsonl",
        jsonl(GOOD_STORY, {"id": "b", "story": "   "}),
        2,
        "required field 'story' is empty",
    ),
    ("empty_id.jsonl", jsonl({"id": "", "story": "x"}), 1, "required field 'id' is empty"),
    (
        "duplicate.jsonl",
        jsonl(GOOD_STORY, {"id": "b", "story": "x"}, {"id": "a", "story": "y"}),
        3,
        "duplicate id 'a' (first seen on line 1)",
    ),
    (
        "undecodable.jsonl",
        jsonl(GOOD_STORY).encode() + b'{"id": "b", "story": "caf\xe9"}\n',
        2,
        "undecodable byte 0xe9",
    ),
    ("not_object.jsonl", jsonl(GOOD_STORY, "[1, 2]"), 2, "expected a JSON object"),
    ("bad_header.csv", "id,text\na,hello\n", 1, "CSV header lacks required column(s) story"),
    (
        "judgment_nonnumeric.jsonl",
        jsonl({"item_id": "a", "rater_id": "r1", "criterion": "coherence", "value": "high"}),
        1,
        "field 'value' must be a number; got 'high'",
    ),
    (
        "judgment_nan.jsonl",
        jsonl(
            {"item_id": "a", "rater_id": "r1", "criterion": "coherence", "value": 3},
            '{"item_id": "b", "rater_id": "r1", "criterion": "coherence", "value": NaN}',
        ),
        2,
        "NaN",
    ),
    (
        "judgment_nan.csv",
        "item_id,rater_id,criterion,value\na,r1,coherence,4\nb,r1,coherence,nan\n",
        3,
        "is NaN",
    ),
    (
        "judgment_missing.csv",
        "item_id,rater_id,criterion,value\na,r1,,4\n",
        2,
        "required field 'criterion' is missing",
    ),
    (
        "judgment_header.csv",
        "item_id,rater,criterion,value\na,r1,c,4\n",
        1,
        "lacks required column(s) rater_id",
    ),
]


@pytest.mark.parametrize(
    ("name", "content", "line", "reason"), BROKEN_FILES, ids=[b[0] for b in BROKEN_FILES]
)
def test_validate_reports_file_line_and_reason(write_file, name, content, line, reason):
    path = write_file(name, content)
    result = validate(path)
    assert result.returncode == 2, result.stdout
    first = result.stderr.strip().splitlines()[0]
    assert first.startswith(f"{path}:{line}: "), first
    assert reason in first


def test_validate_lists_every_problem(write_file):
    path = write_file(
        "many.jsonl", jsonl({"id": "a"}, {"story": "x"}, "{oops", {"id": "d", "story": "ok"})
    )
    result = validate(path)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert [line.split(":")[1] for line in lines] == ["1", "2", "3"]


def test_validate_accepts_good_files(write_file, examples_dir):
    path = write_file("good.jsonl", jsonl(GOOD_STORY, {"id": 7, "story": "x", "extra": [1]}))
    result = validate(path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"{path}: 2 stories, valid"
    result = validate(examples_dir / "human.jsonl")
    assert result.returncode == 0 and "60 stories" in result.stdout


def test_story_fields_and_extras_are_kept(write_file):
    path = write_file(
        "s.jsonl",
        jsonl({**GOOD_STORY, "genre": "fable", "meta": {"k": 1}}, {"id": 2, "story": "y"}),
    )
    first, second = read_stories(path)
    assert first == Story(
        "a", "Once.", "It rained.", "It snowed.", "m1", {"genre": "fable", "meta": {"k": 1}}
    )
    assert (
        second.id == "2"
        and second.prompt == ""
        and second.reference is None
        and second.references == []
    )


def test_jsonl_and_csv_round_trip(tmp_path):
    stories = [
        Story(
            "a", "P, with comma", 'He said "hi".\nThen left.', ["r1", "r2"], "m1", {"genre": "x"}
        ),
        Story("b", "", "Plain.", None, None, {}),
    ]
    for suffix in ("jsonl", "csv"):
        path = tmp_path / f"s.{suffix}"
        assert write_stories(path, stories) == 2
        again = read_stories(path)
        assert [s.id for s in again] == ["a", "b"]
        assert again[0].story == stories[0].story and again[0].references == ["r1", "r2"]
        assert again[1].reference is None and again[1].system is None
    judgments = [
        Judgment("a", "r1", "coherence", 4.0, 12.5, "s1", "likert"),
        Judgment("b", "r1", "coherence", 2),
    ]
    for suffix in ("jsonl", "csv"):
        path = tmp_path / f"j.{suffix}"
        write_judgments(path, judgments)
        again_j = read_judgments(path)
        assert (
            again_j[0].time_s == 12.5
            and again_j[0].condition == "likert"
            and again_j[1].time_s is None
        )
        assert [j.value for j in again_j] == [4.0, 2.0]


def test_duplicate_judgment_is_an_error(write_file):
    row = {"item_id": "a", "rater_id": "r1", "criterion": "c", "value": 1}
    path = write_file("j.jsonl", jsonl(row, {**row, "criterion": "d"}, {**row, "value": 5}))
    with pytest.raises(DataFileError) as info:
        read_judgments(path)
    assert [p.line for p in info.value.problems] == [3]


def test_scores_keep_undefined_values_as_nan(tmp_path):
    path = tmp_path / "scores.jsonl"
    write_scores(
        path,
        [Score("a", "bleu", 12.5, "bleu|version:0.1.0"), Score("b", "bleu", float("nan"), "x")],
    )
    assert '"value": null' in path.read_text()
    first, second = read_scores(path)
    assert first.value == 12.5 and second.value != second.value


def test_detect_kind(write_file):
    assert detect_kind(write_file("a.jsonl", jsonl(GOOD_STORY))) == "stories"
    j = {"item_id": "a", "rater_id": "r", "criterion": "c", "value": 1}
    assert detect_kind(write_file("b.jsonl", jsonl(j))) == "judgments"
    with pytest.raises(DataFileError, match="cannot tell the record kind"):
        detect_kind(write_file("c.jsonl", jsonl({"foo": 1})))


def test_empty_file_is_an_error(write_file):
    with pytest.raises(DataFileError, match="holds no stories"):
        read_stories(write_file("e.jsonl", "\n\n"))


def test_failed_write_leaves_previous_file(tmp_path):
    path = tmp_path / "s.jsonl"
    write_stories(path, [Story("a", "", "one")])
    before = path.read_bytes()

    def broken():
        yield Story("b", "", "two")
        raise RuntimeError("interrupted")

    with pytest.raises(RuntimeError):
        write_stories(path, broken())
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["s.jsonl"]
