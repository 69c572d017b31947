"""Clark (2021), chapter 2 from a study's exports: Table 2.4 reproduced from answers given in
the thesis' proportions, the t tests and Pearson correlations checked against scipy, and the
one command (`storyeval cyoa mil-study`) end to end."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy.stats import pearsonr, ttest_ind
from typer.testing import CliRunner

from storyeval.cli import app
from storyeval.collab.config import USE_AGAIN_CHOICES
from storyeval.collab.mil_study import analyse_mil_study, finished_stories
from storyeval.collab.records import parse_session
from storyeval.corpus import Judgment

# Table 2.4 of the thesis: answers of the nine MIL story writers and nine MIL slogan writers
TABLE_2_4 = {"story": [2, 4, 0, 3], "slogan": [0, 5, 1, 3]}
QUESTIONS = ("story_creative", "story_coherent", "satisfied")


def _story(index: int, condition: str, values: dict[str, int], use_again: str | None) -> dict:
    survey: dict = {
        "likert": [{"name": n, "statement": n, "value": v, "scale": 7} for n, v in values.items()],
        "questions": [],
    }
    if use_again is not None:
        survey["use_again"] = use_again
    return {
        "format": "storyeval-writing-session",
        "session_id": f"mil/p{index}",
        "kind": "mil",
        "session": "mil",
        "participant": f"p{index}",
        "condition": condition,
        "status": "complete",
        "generators": {"lm": {}},
        "prompt": {"id": "lighthouse", "text": "A lighthouse."},
        "turns": [],
        "story": f"Story number {index}.",
        "survey": survey,
    }


def _slogan(index: int, use_again: str) -> dict:
    return {
        "format": "storyeval-slogan-session",
        "participant": f"s{index}",
        "condition": "mil",
        "status": "complete",
        "session": "sl",
        "tasks": [
            {
                "task": 1,
                "prompt": {"id": "her", "text": "Her"},
                "final": f"Slogan {index}.",
                "pulls": [],
                "survey": {"likert": [{"name": "satisfied", "value": 3 + index % 4}]},
            }
        ],
        "final_survey": {"likert": [{"name": "enjoyable", "value": 5}], "use_again": use_again},
    }


def _answers(counts: list[int]) -> list[str]:
    return [a for a, n in zip(USE_AGAIN_CHOICES, counts, strict=True) for _ in range(n)]


@pytest.fixture(scope="module")
def study() -> tuple[list[dict], list[dict], list[Judgment]]:
    rng = np.random.default_rng(3)
    stories = []
    for index, answer in enumerate(_answers(TABLE_2_4["story"])):
        values = {q: int(rng.integers(1, 8)) for q in QUESTIONS}
        stories.append(_story(index, "mil", values, answer))
    for index in range(9, 18):
        values = {q: int(rng.integers(1, 8)) for q in QUESTIONS}
        stories.append(_story(index, "solo", values, None))
    slogans = [_slogan(i, a) for i, a in enumerate(_answers(TABLE_2_4["slogan"]))]
    ratings = [
        Judgment(f"mil/p{i}", f"turker{r}", criterion, float(rng.integers(1, 8)))
        for i in range(18)
        for r in range(3)
        for criterion in ("creative", "coherent")
    ]
    return stories, slogans, ratings


def test_table_2_4_counts_the_four_answers_per_task(study):
    stories, slogans, ratings = study
    result = analyse_mil_study([parse_session(s) for s in stories], slogans, ratings=ratings)
    assert result.use_again["answer"].tolist() == list(USE_AGAIN_CHOICES)
    assert result.use_again["story"].tolist() == TABLE_2_4["story"]
    assert result.use_again["slogan"].tolist() == TABLE_2_4["slogan"]


def test_conditions_are_compared_with_the_theses_t_test_and_pearson(study):
    stories, slogans, ratings = study
    result = analyse_mil_study([parse_session(s) for s in stories], slogans, ratings=ratings)
    own = {(s["condition"], a["name"]): [] for s in stories for a in s["survey"]["likert"]}
    for s in stories:
        for a in s["survey"]["likert"]:
            own[(s["condition"], a["name"])].append(a["value"])
    table = result.self_ratings.set_index(["task", "question", "condition"])
    row = table.loc[("story", "satisfied", "solo")]
    assert row["n"] == 9 and row["mean"] == pytest.approx(np.mean(own[("solo", "satisfied")]))
    expected_p = ttest_ind(own[("solo", "satisfied")], own[("mil", "satisfied")]).pvalue
    assert row["student_p"] == pytest.approx(expected_p)
    # Pearson's r of a writer's own answer with the third-party mean of the same story
    means = (
        pd.DataFrame([(j.item_id, j.criterion, j.value) for j in ratings], columns=["i", "c", "v"])
        .groupby(["i", "c"])["v"]
        .mean()
    )
    mine = {s["session_id"]: s["survey"]["likert"][0]["value"] for s in stories}
    items = sorted(mine)
    expected_r = pearsonr([mine[i] for i in items], [means[(i, "creative")] for i in items])[0]
    agreement = result.self_vs_others.set_index(["task", "question", "criterion"])
    got = agreement.loc[("story", "story_creative", "creative")]
    assert got["method"] == "pearson" and got["estimate"] == pytest.approx(expected_r)
    assert got["n"] == 18
    third = result.third_party.set_index(["task", "criterion", "condition"])
    assert third.loc[("story", "coherent", "mil"), "n"] == 27  # 9 stories x 3 raters


def test_the_one_command_writes_the_tables_from_exports(study, tmp_path: Path):
    stories, slogans, ratings = study
    story_file = tmp_path / "stories.jsonl"
    story_file.write_text("".join(json.dumps(s) + "\n" for s in stories))
    slogan_file = tmp_path / "slogans.jsonl"
    slogan_file.write_text("".join(json.dumps(s) + "\n" for s in slogans))
    rating_file = tmp_path / "ratings.jsonl"
    rating_file.write_text("".join(json.dumps(j.to_dict()) + "\n" for j in ratings))
    runner = CliRunner()
    rated = runner.invoke(
        app, ["cyoa", "stories", str(story_file), "-o", str(tmp_path / "r.jsonl")]
    )
    assert rated.exit_code == 0, rated.output
    assert "wrote 18 story(ies)" in rated.output
    result = runner.invoke(
        app,
        [
            "cyoa",
            "mil-study",
            str(story_file),
            "--slogans",
            str(slogan_file),
            "--ratings",
            str(rating_file),
            "-o",
            str(tmp_path / "out"),
        ],
    )
    assert result.exit_code == 0, result.output
    assert "I'd use it, but only if the suggestions were better." in result.output
    table = pd.read_csv(tmp_path / "out" / "use_again.csv")
    assert table["story"].tolist() == TABLE_2_4["story"]
    report = (tmp_path / "out" / "report.md").read_text()
    assert "Table 2.4" in report and "third-party mean" in report
    bad = runner.invoke(
        app,
        [
            "cyoa",
            "mil-study",
            str(story_file),
            "--agreement-method",
            "kendall",
            "-o",
            str(tmp_path / "bad"),
        ],
    )
    assert bad.exit_code == 2 and "method must be one of pearson, spearman" in bad.output


def test_finished_stories_carry_the_condition_as_system(study):
    stories, _, _ = study
    found = finished_stories([parse_session(s) for s in stories])
    assert {s.system for s in found} == {"solo", "mil"}
    assert found[0].id == "mil/p0" and found[0].extra["prompt_id"] == "lighthouse"
