"""Consistency checks: the rule-based fallback finds contradictions the perturbation engine
plants (each quoted with the sentence it contradicts) and raises few false alarms on the
original stories; antonyms; the command."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from storyeval.analyses.consistency import find_contradictions
from storyeval.corpus import Story

pytestmark = pytest.mark.slow


def test_planted_contradictions_are_found_and_originals_are_not_flagged(
    human: Any, nlp: Any
) -> None:
    from storyeval.perturb import perturb_stories

    run = perturb_stories(
        human, "contradiction", mode="each", seed=0, nlp=nlp, skip_inapplicable=True
    )
    planted = {s.id: s for s in run.stories}
    assert len(planted) >= 50
    found = find_contradictions(run.stories, nlp=nlp)
    recall = found["item_id"].nunique() / len(planted)
    false_alarms = find_contradictions(human, nlp=nlp)["item_id"].nunique() / len(human)
    assert recall >= 0.75 and false_alarms <= 0.05, (recall, false_alarms)
    hits = 0
    for record in run.records():
        edit = record["edits"][0]
        pairs = found[found["item_id"] == record["id"]]
        hits += bool(((pairs["first_index"] == edit["contradicts"])
                      & (pairs["second_index"] == edit["sentence"])).any())  # fmt: skip
    assert hits >= 0.7 * len(planted)  # the planted pair itself, quoted
    assert set(found["method"]) == {"rules"} and set(found["kind"]) <= {"negation", "antonym"}


def test_antonyms_and_unrelated_sentences(nlp: Any) -> None:
    story = Story(
        "a", "", "The soup in the bowl was hot. Tom read a book. The soup in the bowl was cold."
    )
    found = find_contradictions([story], nlp=nlp)
    assert found[["first_index", "second_index", "kind"]].values.tolist() == [[0, 2, "antonym"]]
    calm = Story(
        "b", "", "The soup in the bowl was hot. Tom read a book. The tea in the cup was cold."
    )
    assert find_contradictions([calm], nlp=nlp).empty


def test_the_command(tmp_path: Path, run_cli: Any) -> None:
    stories = tmp_path / "s.jsonl"
    lines = [
        {"id": "x", "story": "Mara locked the door. She went to bed. Mara did not lock the door.", "system": "m"},
        {"id": "y", "story": "Mara locked the door. She went to bed.", "system": "m"},
    ]  # fmt: skip
    stories.write_text("".join(json.dumps(r) + "\n" for r in lines))
    code, stdout, err = run_cli("consistency", str(stories), "-o", str(tmp_path / "f.csv"))
    assert code == 0, err
    table = pd.read_csv(tmp_path / "f.csv")
    assert table["item_id"].tolist() == ["x"] and "1 of 2 stories with a finding" in stdout
    assert table["first"].iloc[0] == "Mara locked the door."


class _Reader:
    """A judge that says yes exactly when the later passage negates the earlier (a stand-in
    whose answers are known, to check the plumbing; the offline model is checked below)."""

    identity = name = "reader@test"

    def answer(self, requests: Any, decoding: Any, *, sample: int = 0) -> list[Any]:
        from storyeval.judge.backends import JudgeAnswer

        out = []
        for request in requests:
            later = request.messages[1]["content"].split("Later passage:")[1]
            yes = " not " in later
            out.append(JudgeAnswer((0.9, 0.1) if yes else (0.2, 0.8), None))
        return out


def test_an_llm_judge_finds_contradictions(nlp: Any) -> None:
    story = Story("a", "", "Mara locked the door. She went to bed. Mara did not lock the door.")
    found = find_contradictions([story], judge=_Reader(), nlp=nlp)
    assert found[["first_index", "second_index"]].values.tolist() == [[0, 2]]
    assert (
        found["score"].iloc[0] == pytest.approx(0.9)
        and found["method"].iloc[0] == "judge:reader@test"
    )
    with pytest.raises(ValueError, match="not both"):
        find_contradictions([story], judge=_Reader(), nli="x", nlp=nlp)


def test_the_command_with_the_offline_judge(tmp_path: Path, run_cli: Any) -> None:
    stories = tmp_path / "s.jsonl"
    record = {
        "id": "x",
        "story": "Mara locked the door. Mara did not lock the door.",
        "system": "m",
    }
    stories.write_text(json.dumps(record) + "\n")
    out = tmp_path / "f.csv"
    code, stdout, err = run_cli(
        "consistency", str(stories), "-o", str(out), "--judge", "offline", "--threshold", "0"
    )
    assert code == 0, err
    table = pd.read_csv(out)  # threshold 0: every pair asked is a finding, with its probability
    assert len(table) == 1 and table["method"].iloc[0].startswith("judge:")
    assert 0 <= table["score"].iloc[0] <= 1
    assert "1 findings (judge:" in stdout
