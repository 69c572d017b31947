"""The importers of Salesforce's expert-judged creative writing (TTCW: Chakrabarty et al. 2024;
WQ: Chakrabarty et al. 2025) on small files in the releases' layouts, and their errors as
``FILE:LINE: reason``. (``tests/test_real_data.py`` imports the real files.)"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from storyeval.base.errors import DataFileError
from storyeval.importers import import_file, write_import
from storyeval.importers.creativity import criterion_name, parse_verdict

TESTS = [
    {"ttcw_idx": 1, "torrance_dimension": "Fluency", "category": "Narrative Ending",
     "question": "Does the end feel earned?", "full_prompt": "..."},
    {"ttcw_idx": 2, "torrance_dimension": "Originality", "category": "Originality in Thought",
     "question": "Is it original?", "full_prompt": "..."},
]  # fmt: skip


def _ttcw(folder: Path, *, verdict: str = "No", story: str = "0_Claude") -> Path:
    """A TTCW folder: one plot, a linked New Yorker story and a Claude story, two tests, three
    experts each, and two judges (one answers 'Content Blocked' once)."""
    (folder / "llm").mkdir(parents=True)
    stories = [
        {"story_idx": 0, "story_id": "0_NewYorker", "story_name": "T", "plot": "A plot.",
         "content": "https://www.newyorker.com/magazine/x"},
        {"story_idx": 0, "story_id": "0_Claude", "story_name": "T", "plot": "A plot.",
         "content": "Laura woke. The ward was quiet. She left with a baby."},
    ]  # fmt: skip
    (folder / "stories.json").write_text(json.dumps(stories, indent=1))
    (folder / "tests.json").write_text(json.dumps(TESTS, indent=1))
    annotations = [
        {"story_idx": 0, "story_id": sid, "expert_idx": e, "ttcw_idx": t, "category": "x",
         "binary_verdict": "Yes" if sid.endswith("NewYorker") else "No", "explanation": "why"}
        for sid in ("0_NewYorker", "0_Claude") for t in (1, 2) for e in (1, 2, 3)
    ]  # fmt: skip
    annotations[-1] = {**annotations[-1], "binary_verdict": verdict, "story_id": story}
    (folder / "expert_annotations.json").write_text(json.dumps(annotations, indent=1))
    for judge, first in (("gpt4", "Yes, it is."), ("gemini-pro", "Content Blocked")):
        lines = [
            {"id": f"story_{sid}_test{t}", "response": first if (sid, t) == ("0_Claude", 1) else "No."}
            for sid in ("0_NewYorker", "0_Claude") for t in (1, 2)
        ]  # fmt: skip
        text = "".join(json.dumps(line) + "\n" for line in lines)
        (folder / "llm" / f"annotations_{judge}.jsonl").write_text(text)
    return folder


def test_ttcw_stories_expert_verdicts_and_judges(tmp_path: Path) -> None:
    result = import_file("ttcw", _ttcw(tmp_path / "ttcw"))
    assert [s.id for s in result.stories] == ["0_Claude"]  # the linked story has no text
    story = result.stories[0]
    assert (
        story.system == "Claude"
        and story.prompt == "A plot."
        and story.extra["prompt_id"] == "plot0"
    )
    assert len(result.judgments) == 12
    first = result.judgments[0]
    assert (
        first.rater_id == "expert1" and first.criterion == "narrative_ending" and first.value == 1.0
    )
    assert first.condition == "NewYorker" and first.extra == {
        "system": "NewYorker",
        "rationale": "why",
    }
    judged = {(j.rater_id, j.item_id, j.criterion): j.value for j in result.judge_judgments}
    assert judged[("gpt4", "0_Claude", "narrative_ending")] == 1.0
    assert ("gemini-pro", "0_Claude", "narrative_ending") not in judged  # blocked: counted
    assert any("gemini-pro 1" in note for note in result.notes)
    assert any("1 stories are given as links only" in note for note in result.notes)
    written = write_import(result, tmp_path / "out")
    assert set(written) == {"stories", "judgments", "judge_judgments"}


def test_ttcw_linked_texts_fill_the_linked_stories(tmp_path: Path) -> None:
    texts = tmp_path / "texts"
    texts.mkdir()
    (texts / "0_NewYorker.txt").write_text("The New Yorker's text.")
    result = import_file("ttcw", _ttcw(tmp_path / "ttcw"), linked_texts=texts)
    assert {s.id for s in result.stories} == {"0_NewYorker", "0_Claude"}
    assert not any("links only" in note for note in result.notes)


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"verdict": "Maybe"}, "binary_verdict must be Yes or No; got 'Maybe'"),
        ({"story": "9_Nobody"}, "unknown story '9_Nobody'"),
    ],
)
def test_ttcw_bad_verdicts_name_file_and_line(tmp_path: Path, change: Any, reason: str) -> None:
    folder = _ttcw(tmp_path / "ttcw", **change)
    with pytest.raises(DataFileError) as caught:
        import_file("ttcw", folder)
    [problem] = caught.value.problems
    lines = (folder / "expert_annotations.json").read_text().splitlines()
    starts = [n for n, line in enumerate(lines, start=1) if line.strip() == "{"]
    assert problem.path.endswith("expert_annotations.json") and reason in problem.reason
    assert problem.line == starts[-1]  # the bad object's own line, not the file's first


def test_parse_verdict_and_criterion_names() -> None:
    assert parse_verdict(' "Yes" - the ending') == 1.0 and parse_verdict("no, never") == 0.0
    assert parse_verdict("Yesterday it rained") is None and parse_verdict("") is None
    assert criterion_name("Scene vs Summary") == "scene_vs_summary"


def _wq(path: Path, pairs: list[dict[str, Any]]) -> Path:
    path.write_text(json.dumps(pairs, indent=2))
    return path


def _pair(number: int, preferred: str, author: str) -> dict[str, Any]:
    return {
        "id": f"test-pairwise-{number}", "original_id": f"h-{number}", "source": author,
        "paragraph1": f"Paragraph one of pair {number}.", "paragraph2": f"Paragraph two of {number}.",
        "reference_preference": preferred, "sample_type": "style-mimic", "text_input": "...",
        "output": json.dumps({"preference": preferred}),
    }  # fmt: skip


def test_wq_pairs_mark_the_authors_paragraph(tmp_path: Path) -> None:
    path = _wq(
        tmp_path / "style_mimic.json",
        [_pair(1, "2", "Joan_Didion"), _pair(2, "1", "Joan_Didion"), _pair(3, "1", "Ben_Lerner")],
    )
    result = import_file("wq", path)
    assert len(result.stories) == 6 and len(result.comparisons) == 3
    by_id = {s.id: s for s in result.stories}
    assert by_id["test-pairwise-1-2"].extra["source"] == "human"
    assert by_id["test-pairwise-1-1"].extra["source"] == "llm"
    assert by_id["test-pairwise-1-1"].extra["ai_written"] is True
    assert by_id["test-pairwise-1-1"].system == "test-pairwise-1-1"  # a pairwise judge's sides
    assert by_id["test-pairwise-1-2"].extra["author"] == "Joan Didion"
    first = result.comparisons[0]
    assert first["winner"] == "test-pairwise-1-2" and first["group"] == "Joan Didion"
    assert any("3 pairs by 2 authors" in note for note in result.notes)


def test_wq_errors_name_file_and_line(tmp_path: Path) -> None:
    bad = _pair(2, "3", "X")
    path = _wq(tmp_path / "style_mimic.json", [_pair(1, "1", "X"), bad, _pair(1, "2", "X")])
    with pytest.raises(DataFileError) as caught:
        import_file("wq", path)
    reasons = [(p.line, p.reason) for p in caught.value.problems]
    lines = path.read_text().splitlines()
    starts = [n for n, line in enumerate(lines, start=1) if line.strip() == "{"]
    assert reasons == [
        (starts[1], "reference_preference must be 1 or 2; got '3'"),
        (starts[2], "duplicate id 'test-pairwise-1'"),
    ]
    (tmp_path / "bad.json").write_text("{}")
    with pytest.raises(DataFileError, match="expected a JSON list of pair objects"):
        import_file("wq", tmp_path / "bad.json")
