"""Table 5.3's inputs from their public formats: ASAP's essays (Kaggle TSV, Windows-1252) and
Chaganty et al.'s (2018) judged CNN/Daily Mail summaries, through `storyeval import`, then the
intrinsic study (`correlate`) on the result."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from storyeval.base.errors import DataFileError
from storyeval.corpus import read_judgments, read_stories
from storyeval.importers import import_asap, import_chaganty

HEADER = [
    "essay_id", "essay_set", "essay", "rater1_domain1", "rater2_domain1", "rater3_domain1",
    "domain1_score", "rater1_domain2",
]  # fmt: skip

ESSAYS = [
    (1, 1, "An essay of the first set. It has two sentences.", 4, 4, "", 8),
    (5978, 3, "The setting effected the cyclist. He ran out of water. The road was hot. "
     "Hills made it worse. He kept going to the end.", 2, 1, "", 2),
    (5979, 3, "The caf\u00e9 was closed. He had no water. The sun beat down. The desert was "
     "long. Snakes crossed the road. He reached Yosemite at last.", 3, 3, "", 3),
    (5980, 3, "Too short.", 0, 0, "", 0),
]  # fmt: skip


def _asap_file(tmp_path: Path) -> Path:
    lines = ["\t".join(HEADER)]
    for essay_id, essay_set, text, r1, r2, r3, score in ESSAYS:
        lines.append("\t".join(map(str, [essay_id, essay_set, text, r1, r2, r3, score, ""])))
    path = tmp_path / "training_set_rel3.tsv"
    path.write_bytes(("\r\n".join(lines) + "\r\n").encode("cp1252"))
    return path


def test_asap_essay_set_3_with_the_reference_and_the_sentence_range(tmp_path: Path):
    reference = tmp_path / "reference.txt"
    reference.write_text("The features of the setting affect the cyclist in many ways.")
    result = import_asap(
        _asap_file(tmp_path), references=reference, min_sentences=5, max_sentences=15
    )
    assert [s.id for s in result.stories] == ["asap-5978", "asap-5979"]
    assert "caf\u00e9" in result.stories[1].story  # Windows-1252 decoded
    assert result.stories[0].references == [reference.read_text()]
    assert [(j.item_id, j.rater_id, j.value) for j in result.judgments] == [
        ("asap-5978", "resolved", 2.0),
        ("asap-5979", "resolved", 3.0),
    ]
    assert "1 essay(s) of set 3 outside the sentence range" in result.notes
    raters = import_asap(_asap_file(tmp_path), score="raters")
    assert {
        (j.item_id, j.rater_id, j.value) for j in raters.judgments if j.item_id == "asap-5978"
    } == {
        ("asap-5978", "rater1", 2.0),
        ("asap-5978", "rater2", 1.0),
    }
    with pytest.raises(DataFileError, match="no essay of set 9"):
        import_asap(_asap_file(tmp_path), essay_set=9)


SUMMARIES = [
    {"id": "d1-seq2seq", "input_id": "d1", "system": "seq2seq", "input": {"contents": "A storm hit the coast. Ten homes flooded."},
     "output": {"contents": "storm hit coast . homes flooded ."}, "reference": "A storm flooded ten homes.",
     "answers": {"overall": [0.5, 0.0], "grammar": [1, 1], "edit": ["storm hit the coast ."]}},
    {"id": "d1-pointer", "input_id": "d1", "system": "pointer", "input": {"contents": "A storm hit the coast. Ten homes flooded."},
     "output": "A storm hit the coast and ten homes flooded.", "answers": {"overall": [1, 0.5, 1]}},
    {"id": "d2-ml", "input_id": "d2", "system": "ml", "input": "The team won the cup.",
     "output": "team cup team cup .", "reference": "The team won the cup.", "answers": {"overall": [-1]}},
]  # fmt: skip


def test_chaganty_summaries_keep_those_judged_twice(tmp_path: Path):
    path = tmp_path / "lqual.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in SUMMARIES))
    refs = tmp_path / "refs.jsonl"
    refs.write_text(json.dumps({"id": "d1-pointer", "reference": "A storm flooded ten homes."}))
    result = import_chaganty(path, references=refs, min_raters=2)
    assert [s.id for s in result.stories] == ["d1-seq2seq", "d1-pointer"]
    assert result.stories[1].reference == "A storm flooded ten homes."
    assert (
        result.stories[0].extra["prompt_id"] == result.stories[1].extra["prompt_id"] == "cnndm-d1"
    )
    overall = [j.value for j in result.judgments if j.item_id == "d1-pointer"]
    assert overall == [1.0, 0.5, 1.0]
    assert any("fewer than 2 people" in n for n in result.notes)
    assert any("edit" in n for n in result.notes)  # post-edits are not ratings
    listed = tmp_path / "lqual.json"
    listed.write_text(json.dumps(SUMMARIES))
    assert len(import_chaganty(listed).stories) == 3
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"id": "x", "system": "s", "output": "y"}) + "\n{oops\n")
    with pytest.raises(DataFileError) as info:
        import_chaganty(bad)
    text = [str(p) for p in info.value.problems]
    assert text[0].startswith(f"{bad}:1: answers: expected an object")
    assert text[1].startswith(f"{bad}:2: malformed JSON")


@pytest.mark.slow
def test_the_intrinsic_study_reruns_on_imported_essays(run_cli, tmp_path: Path):
    reference = tmp_path / "reference.txt"
    reference.write_text("The hot road, the hills and no water made the cyclist's ride hard.")
    code, out, err = run_cli(
        "import", "asap", str(_asap_file(tmp_path)), "--out-dir", str(tmp_path / "asap"),
        "--references", str(reference), "--min-sentences", "1",
    )  # fmt: skip
    assert code == 0, out + err
    stories = read_stories(tmp_path / "asap" / "stories.jsonl")
    assert len(stories) == 3 and all(s.reference for s in stories)
    assert {j.criterion for j in read_judgments(tmp_path / "asap" / "judgments.jsonl")} == {"score"}
    code, out, err = run_cli(
        "score", str(tmp_path / "asap" / "stories.jsonl"), "-m", "sms", "-m", "rougeL",
        "-o", str(tmp_path / "scores.jsonl"),
    )  # fmt: skip
    assert code == 0, out + err
    assert len((tmp_path / "scores.jsonl").read_text().splitlines()) == 6
