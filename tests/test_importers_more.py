"""HANNA's raw annotations, OpenMEVA's MAGS JSON and pairwise preference files, each on a small
file written here in its format."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import pytest

from storyeval.base.errors import DataFileError
from storyeval.corpus import read_judgments
from storyeval.importers import import_file, write_import
from storyeval.meta import agreement
from storyeval.meta.comparisons import rank_systems, read_comparisons

HANNA_HEADER = [
    "Story ID",
    "Prompt",
    "Human",
    "Story",
    "Model",
    "Relevance",
    "Coherence",
    "Empathy",
    "Surprise",
    "Engagement",
    "Complexity",
    "Worker ID",
    "Assignment ID",
    "Work time in seconds",
    "Name",
]


def _hanna(path: Path, rows: list[list[Any]]) -> Path:
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(HANNA_HEADER)
        writer.writerows(rows)
    return path


def test_hanna_raw_gives_texts_references_raters_and_work_time(tmp_path: Path) -> None:
    rows = []
    for story, model in (("0", "GPT-2"), ("1", "Human")):
        for worker, offset in (("W1", 0), ("W2", 1), ("W3", 0)):
            ratings = [min(5, 2 + offset + int(story))] * 6
            rows.append(
                [
                    story,
                    "A door opened.",
                    "The human story.",
                    f"Story {story} text.",
                    model,
                    *ratings,
                    worker,
                    f"A{worker}{story}",
                    40 + offset,
                    "n",
                ]
            )
    path = _hanna(tmp_path / "hanna_stories_annotations.csv", rows)
    result = import_file("hanna-raw", path)
    assert [s.id for s in result.stories] == ["0", "1"]
    assert result.stories[0].reference == "The human story." and result.stories[0].system == "GPT-2"
    assert len(result.judgments) == 2 * 3 * 6 and {j.rater_id for j in result.judgments} == {
        "W1",
        "W2",
        "W3",
    }
    assert {j.time_s for j in result.judgments} == {40.0, 41.0}
    assert {j.criterion for j in result.judgments} >= {"Relevance", "Complexity"}
    table = agreement(result.judgments, n_boot=0)
    assert "krippendorff_alpha_interval" in set(table["method"])
    rows[2][5] = "x"
    rows[4][3] = "Another text."
    bad = _hanna(tmp_path / "bad.csv", rows)
    with pytest.raises(DataFileError) as info:
        import_file("hanna-raw", bad)
    assert f"{bad}:4: Relevance: not a rating: 'x'" in str(info.value)
    assert f"{bad}:6: story '1' differs from line 5" in str(info.value)


def test_openmeva_mags_entries_become_stories_and_slot_judgments(tmp_path: Path) -> None:
    data = {
        "17": {
            "prompt": "Ken went jogging.",
            "gold_response": "He ran far.",
            "gen": {
                "gpt": {"text": "He ran.", "score": [4, 5, 3]},
                "fusion": {"text": "Ran he.", "score": [1, 2, 1]},
            },
        },
    }
    path = tmp_path / "mags.json"
    path.write_text(json.dumps(data, indent=2))
    result = import_file("openmeva", path)
    assert sorted(s.id for s in result.stories) == ["17:fusion", "17:gpt"]
    assert result.stories[0].reference == "He ran far."
    assert sorted(j.value for j in result.judgments if j.item_id == "17:gpt") == [3, 4, 5]
    data["18"] = {"prompt": "x", "gen": {"gpt": {"text": "y", "score": ["good"]}}}
    path.write_text(json.dumps(data, indent=2))
    with pytest.raises(
        DataFileError, match=r"mags.json:\d+: entry '18': gen.gpt.score: must be a list of numbers"
    ):
        import_file("openmeva", path)


def test_pairwise_preferences_feed_rank(tmp_path: Path) -> None:
    path = tmp_path / "litbench.jsonl"
    path.write_text(
        json.dumps(
            {
                "id": "p1",
                "prompt": "Write about rain.",
                "chosen_story": "Rain sang.",
                "rejected_story": "It rained.",
            }
        )
        + "\n"
        + json.dumps(
            {
                "id": "p2",
                "prompt": "Write about snow.",
                "story_a": "Snow.",
                "story_b": "White hush fell.",
                "preferred": "b",
            }
        )
        + "\n"
    )
    result = import_file("pairwise", path)
    assert [c["winner"] for c in result.comparisons] == ["p1-a", "p2-b"]
    assert len(result.stories) == 4 and result.stories[0].system == "p1-a"
    written = write_import(result, tmp_path / "out")
    frame = read_comparisons(written["comparisons"])
    assert len(rank_systems(frame, n_boot=0)) == 8
    path.write_text(
        json.dumps({"prompt": "x", "story_a": "a", "story_b": "b", "preferred": "maybe"}) + "\n"
    )
    with pytest.raises(
        DataFileError, match=r"litbench.jsonl:1: preferred must be a, b or tie; got 'maybe'"
    ):
        import_file("pairwise", path)


def _csv(path: Path, header: list[str], rows: list[list[Any]]) -> Path:
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(header)
        writer.writerows(rows)
    return path


def test_hanna_llm_stories_and_llm_ratings_as_judges(tmp_path: Path) -> None:
    stories = _csv(
        tmp_path / "hanna_llm_stories.csv",
        ["Story ID", "Prompt", "Story", "Model"],
        [
            ["1056", "A door opened.", "The door opened onto snow.", "Mistral-7B"],
            ["1057", "A door opened.", "Behind it, a second door.", "Llama-2-13B"],
        ],
    )
    result = import_file("hanna-llm", stories)
    assert [(s.id, s.system) for s in result.stories] == [
        ("1056", "Mistral-7B"),
        ("1057", "Llama-2-13B"),
    ]
    assert not result.judgments
    header = ["Story ID", "Model", "LLM", "Eval prompt", *HANNA_HEADER[5:11]]
    rows = [
        ["0", "GPT-2", "Beluga-13B", "simple", 4, 3, 2, 2, 3, 2],
        ["0", "GPT-2", "Beluga-13B", "simple", 5, 3, 2, 3, 3, 2],  # a repeat
        ["0", "GPT-2", "Beluga-13B", "explained", 4, 4, 3, 2, 3, 3],
        ["1", "Human", "Beluga-13B", "simple", 5, 5, 4, 3, 4, ""],  # one rating missing
        ["1", "Human", "Mistral-7B", "simple", 5, 4, 4, 4, 5, 4],
    ]
    scores = _csv(tmp_path / "hanna_metric_scores_llm.csv", header, rows)
    result = import_file("hanna-llm", scores)
    judges = {j.extra["judge"] for j in result.judgments}
    assert judges == {"Beluga-13B|simple", "Beluga-13B|explained", "Mistral-7B|simple"}
    assert {j.rater_id for j in result.judgments} == judges | {"Beluga-13B|simple#2"}
    assert len(result.judgments) == 5 * 6 - 1
    assert any("1 empty rating cell(s) left out" in note for note in result.notes)
    repeats = sorted(
        (j.extra["repeat"], j.value)
        for j in result.judgments
        if j.item_id == "0"
        and j.extra["judge"] == "Beluga-13B|simple"
        and j.criterion == "Relevance"
    )
    assert repeats == [(0, 4.0), (1, 5.0)]
    first = result.judgments[0]
    assert first.extra["rater_kind"] == "llm" and first.extra["system"] == "GPT-2"
    written = write_import(result, tmp_path / "out")
    assert set(written) == {"judgments"}
    assert len(read_judgments(written["judgments"])) == 29  # repeats are not duplicates
    rows[2][4] = "four"
    rows[3][2] = ""
    bad = _csv(tmp_path / "bad.csv", header, rows)
    with pytest.raises(DataFileError) as info:
        import_file("hanna-llm", bad)
    assert f"{bad}:4: Relevance: not a rating: 'four'" in str(info.value)
    assert f"{bad}:5: the rater (LLM) is empty" in str(info.value)
    no_rater = _csv(tmp_path / "norater.csv", ["Story ID", "Relevance"], [["0", 3]])
    with pytest.raises(DataFileError, match=r"norater\.csv:1: ratings without a rater column"):
        import_file("hanna-llm", no_rater)


def test_litbench_pairs_share_stories_by_comment_id(tmp_path: Path) -> None:
    """LitBench's layout (prompt_id, prompt, chosen/rejected story, their Reddit comment ids
    and upvotes): a story in two pairs is one story record, so a ranking over stories counts
    both of its comparisons."""
    result = import_file(
        "pairwise", Path(__file__).parent / "data" / "importers" / "litbench_sample.csv"
    )
    assert [s.id for s in result.stories] == ["c1a", "c1b", "c1c", "c2a", "c2b"]
    assert [(c["system_a"], c["system_b"], c["winner"]) for c in result.comparisons] == [
        ("c1a", "c1b", "c1a"),
        ("c1a", "c1c", "c1a"),
        ("c2a", "c2b", "c2a"),
    ]
    first = result.stories[0]
    assert first.extra["upvotes"] == "412" and first.extra["prompt_id"] == "wp1"
    written = write_import(result, tmp_path / "out")
    frame = read_comparisons(written["comparisons"])
    ranked = rank_systems(frame, n_boot=0)
    assert set(ranked["system"]) >= {"c1a", "c2a"}
