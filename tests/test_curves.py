"""Curves along long stories: chapters or windows, each scored in the context of the one
before; the command, the figure and the report section."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from storyeval.analyses.curves import segments, story_curves
from storyeval.corpus import Story


def book(examples_dir: Path, start: int, system: str) -> dict[str, Any]:
    rows = [json.loads(line) for line in (examples_dir / "human.jsonl").open()]
    chunk = rows[start : start + 6]
    text = "\n".join(f"CHAPTER {i + 1}: {r['id']}\n{r['story']}" for i, r in enumerate(chunk))
    return {"id": f"book{start}", "prompt": chunk[0]["prompt"], "story": text, "system": system}


def test_chapters_then_windows_cover_every_word() -> None:
    text = "Intro line.\nChapter 1\nA b c. D e.\nPART II\nF g h.\nChapter 3\nI j."
    parts = segments(text)
    assert [p.title for p in parts] == ["Chapter 1", "PART II", "Chapter 3"]
    assert [(p.start_word, p.end_word) for p in parts] == [(0, 5), (5, 8), (8, 10)]
    windows = segments(
        "One two three. Four five. Six seven eight nine.", chapter_pattern=None, window_words=5
    )
    assert [w.text for w in windows] == ["One two three. Four five.", "Six seven eight nine."]
    assert " ".join(w.text for w in windows).split() == [
        "One",
        "two",
        "three.",
        "Four",
        "five.",
        "Six",
        "seven",
        "eight",
        "nine.",
    ]
    with pytest.raises(ValueError, match="window_words"):
        segments("x", window_words=0)


def test_each_segment_is_scored_after_the_one_before() -> None:
    from storyeval.metrics import score_stories

    text = "Chapter 1\nThe cat sat on the mat. It purred.\nChapter 2\nThe dog barked at the cat."
    story = Story("s", "A quiet house.", text, system="x")
    table, signatures = story_curves([story], "distinct1,bertscore_prompt")
    assert set(table.metric) == {"distinct1", "bertscore_prompt"}
    second = table[(table.segment == 1) & (table.metric == "bertscore_prompt")].value.iloc[0]
    direct = (
        score_stories(
            [Story("b", "The cat sat on the mat. It purred.", "The dog barked at the cat.")],
            "bertscore_prompt",
            bootstrap=0,
        )
        .scores[0]
        .value
    )
    assert second == pytest.approx(direct), "segment 2 is read with segment 1 as its prompt"
    assert table.position.between(0, 1).all()
    assert "segments:chapters" in signatures["distinct1"]
    from storyeval.base.errors import StoryevalError

    with pytest.raises(StoryevalError, match="without a reference"):
        story_curves([story], "bleu")


def test_curves_command_and_report_section(
    run_cli: Any, examples_dir: Path, tmp_path: Path
) -> None:
    stories = tmp_path / "books.jsonl"
    rows = [
        book(examples_dir, 0, "human"),
        book(examples_dir, 6, "human"),
        book(examples_dir, 12, "model"),
    ]
    stories.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "curves"
    code, stdout, stderr = run_cli(
        "curves", str(stories), "-m", "distinct2,slop_index", "-o", str(out), "--no-progress"
    )
    assert code == 0, stderr
    assert "3 stories, 18 segments" in stdout
    assert (out / "curves.png").read_bytes()[:4] == b"\x89PNG"
    from storyeval.report.render import render_markdown
    from storyeval.report.sections import ReportFiles, curves_section

    report = tmp_path / "report"
    (report / "figures").mkdir(parents=True)
    text = render_markdown("r", [curves_section(out, ReportFiles(report))])
    assert "18 chapters or windows" in text
    assert (report / "curves.csv").is_file()


def test_report_command_adds_the_mauve_and_curves_sections(
    run_cli: Any, examples_dir: Path, tmp_path: Path, tiny_models: dict[str, Path]
) -> None:
    """The report's two sections (MAUVE from the two-layer encoder's features: the sections,
    not the numbers, are tested)."""
    from metahelpers import JUDGMENTS, write_example_scores

    stories = tmp_path / "books.jsonl"
    rows = [book(examples_dir, 0, "human"), book(examples_dir, 12, "model")]
    stories.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert run_cli("curves", str(stories), "-m", "distinct2", "-o", str(tmp_path / "c"))[0] == 0
    code, _, stderr = run_cli(
        "mauve", str(examples_dir / "stories.jsonl"), "-o", str(tmp_path / "m"), "--seeds", "2",
        "--model", str(tiny_models["encoder"]),
    )  # fmt: skip
    assert code == 0, stderr
    scores = write_example_scores(tmp_path / "scores.jsonl")
    code, _, stderr = run_cli(
        "report", "-s", str(scores), "-j", str(JUDGMENTS), "-o", str(tmp_path / "r"),
        "--n-boot", "20", "--method", "pearson",
        "--mauve", str(tmp_path / "m"), "--curves", str(tmp_path / "c"),
    )  # fmt: skip
    assert code == 0, stderr
    page = (tmp_path / "r" / "report.md").read_text()
    assert "Distribution of the stories (MAUVE)" in page and "Along the stories" in page
    assert (tmp_path / "r" / "figures" / "mauve_divergence.png").is_file()
    assert (tmp_path / "r" / "figures" / "curves.png").is_file()
