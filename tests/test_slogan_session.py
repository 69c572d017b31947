"""The slogan-writing session (Clark 2021, section 2.5): the state machine, balanced conditions,
the export, and the analysis of section 2.6.5."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from storyeval.base.errors import DataFileError
from storyeval.collab.config import USE_AGAIN_CHOICES, WritingFileError, parse_writing_config
from storyeval.collab.session import SuggestionResult, TurnError
from storyeval.collab.slogan import SloganSession, suggestion_survival
from storyeval.collab.slogan_analysis import (
    analyse_slogan_sessions,
    read_slogan_sessions,
    slogan_id,
    slogan_stories,
)
from storyeval.corpus import Judgment

CONFIG = {
    "kind": "slogan",
    "name": "slogans",
    "title": "Slogans",
    "prompts": [{"id": "a", "text": "A lunch box."}, {"id": "b", "text": "The movie Her."}],
}


def config() -> Any:
    return parse_writing_config(dict(CONFIG))


def answer(session: SloganSession, result: list[str], now: float) -> None:
    [request] = session.pending_requests()
    session.add_suggestion(
        request.request_id,
        SuggestionResult(
            text="\n".join(result),
            signature="sig",
            seed=request.seed,
            started_at=now,
            finished_at=now + 1,
            extra={"suggestions": result, "skeletons": ["* *."] * len(result), "targets": ["x"]},
        ),
        now=now + 1,
    )


def finish(
    session: SloganSession, slogans: list[str], satisfied: int, experience: str = "some"
) -> None:
    survey = {"slogan_creative": 4, "slogan_catchy": 5, "slogan_relevant": 6}
    for slogan in slogans:
        session.submit_slogan(slogan, now=50.0)
        session.submit_survey({**survey, "satisfied": satisfied}, now=60.0)
    likert = {s.name: 3 for s in session.final_statements().statements}
    use_again = USE_AGAIN_CHOICES[1] if session.condition == "mil" else None
    with pytest.raises(TurnError, match="writing experience"):
        session.submit_final(likert, {"interface": "fine"}, use_again=use_again, now=70.0)
    session.submit_final(
        likert, {"interface": "fine"}, use_again=use_again, experience=experience, now=70.0
    )


def test_conditions_alternate_and_prompt_orders_rotate() -> None:
    sessions = [
        SloganSession.start(config(), participant=f"p{i}", now=0.0, prompt_index=i)
        for i in range(4)
    ]
    assert [s.condition for s in sessions] == ["solo", "mil", "solo", "mil"]
    firsts = [s.current_task()["prompt"]["id"] for s in sessions]
    assert firsts == ["a", "a", "b", "b"]  # each prompt first equally often in each condition


def test_pull_twice_history_and_submit() -> None:
    session = SloganSession.start(config(), participant="p1", now=0.0, prompt_index=1)
    step = session.step_token()
    requests = session.pull("food, fresh", "Fresh all day.", now=1.0)
    assert session.phase == "generating" and session.step_token() != step
    assert json.loads(requests[0].context) == {
        "keywords": ["food", "fresh"],
        "draft": "Fresh all day.",
    }
    answer(session, ["Fresh food keeps the day.", "Food stays fresh."], 2.0)
    assert session.phase == "write"
    assert session.current_suggestions() == ["Fresh food keeps the day.", "Food stays fresh."]
    assert session.draft() == ("food, fresh", "Fresh all day.")  # the draft is not replaced
    session.pull(["food"], "Fresh food, all day.", now=5.0)
    answer(session, ["Food keeps fresh."], 6.0)
    assert len(session.current_task()["pulls"]) == 2
    # a stale result for the first pull changes nothing
    stale = SuggestionResult("x", "sig", 1, 0.0, 1.0, extra={"suggestions": ["x"]})
    assert not session.add_suggestion("t1-pull1", stale, now=7.0)
    finish(session, ["Fresh food keeps the day, all day.", "Her voice."], satisfied=6)
    assert session.phase == "done"
    record = session.export()
    assert record["condition"] == "mil" and record["status"] == "complete"
    first = record["tasks"][0]
    assert [p["draft"] for p in first["pulls"]] == ["Fresh all day.", "Fresh food, all day."]
    assert first["survival"]["suggestion"] == "Fresh food keeps the day."
    assert record["final_survey"]["use_again"] == USE_AGAIN_CHOICES[1]
    assert record["final_survey"]["experience"] == "some"


def test_actions_out_of_turn_and_bad_input_are_refused() -> None:
    solo = SloganSession.start(config(), participant="p0", now=0.0, prompt_index=0)
    with pytest.raises(TurnError, match="not part of this task"):
        solo.pull("food", "x", now=1.0)
    with pytest.raises(TurnError, match="write your slogan"):
        solo.submit_slogan("   ", now=1.0)
    with pytest.raises(TurnError, match="at most 200"):
        solo.submit_slogan("x" * 201, now=1.0)
    with pytest.raises(TurnError, match="not possible now"):
        solo.submit_survey({}, now=1.0)
    mil = SloganSession.start(config(), participant="p1", now=0.0, prompt_index=1)
    with pytest.raises(TurnError, match="keywords"):
        mil.pull("", "", now=1.0)
    mil.pull("food", "", now=1.0)
    with pytest.raises(TurnError, match="not possible now"):
        mil.submit_slogan("Final.", now=2.0)  # a pull is being served
    mil.data["phase"] = "write"
    with pytest.raises(TurnError, match="Please answer"):
        mil.submit_slogan("Final.", now=3.0)
        mil.submit_survey({"slogan_creative": 9}, now=4.0)


def test_bad_session_files_name_the_key() -> None:
    with pytest.raises(WritingFileError, match="prompts"):
        parse_writing_config({**CONFIG, "prompts": []})
    with pytest.raises(WritingFileError, match="conditions"):
        parse_writing_config({**CONFIG, "conditions": ["solo", "robot"]})


def test_survival_counts_words_new_to_the_writer() -> None:
    pulls = [
        {"keywords": ["fresh"], "draft": "Fresh food.", "suggestions": ["Lunch stays bright."]}
    ]
    found = suggestion_survival("Fresh lunch stays bright.", pulls)
    assert found == {"new_words": 0.75, "kept": 1.0, "suggestion": "Lunch stays bright."}
    assert suggestion_survival("Fresh food.", pulls)["new_words"] == 0.0


def test_analysis_per_condition_with_third_party_ratings(tmp_path: Path) -> None:
    records = []
    for i in range(6):
        session = SloganSession.start(config(), participant=f"p{i}", now=0.0, prompt_index=i)
        if session.condition == "mil":
            session.pull("food", "Fresh.", now=1.0)
            answer(session, ["Fresh food."], 2.0)
        level = ["none", "some", "a lot"][i % 3]
        finish(
            session,
            ["Fresh food.", "Her."],
            satisfied=6 if session.condition == "mil" else 3,
            experience=level,
        )
        records.append(session.export())
    path = tmp_path / "sessions.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    records = read_slogan_sessions(path)
    stories = slogan_stories(records)
    assert len(stories) == 12 and {s.system for s in stories} == {"solo", "mil"}
    ratings = [
        Judgment(
            slogan_id(r, t), "rater1", "catchy", 5.0 if r["condition"] == "mil" else 2.0 + k % 2
        )
        for k, (r, t) in enumerate((r, t) for r in records for t in r["tasks"])
    ]
    result = analyse_slogan_sessions(records, ratings=ratings)
    satisfied = result.survey[result.survey["question"] == "slogan:satisfied"]
    means = dict(zip(satisfied["condition"], satisfied["mean"], strict=True))
    assert means == {"solo": 3.0, "mil": 6.0}
    pulls = result.pulls.set_index("condition")
    assert pulls.loc["mil", "pulls"] == 3 and pulls.loc["mil", "pulls_per_slogan"] == 0.5
    assert pulls.loc["solo", "pulls"] == 0
    assert pulls.loc["mil", "new_words"] == 0.0  # "Fresh food." came from the writer's own draft
    catchy = result.ratings.set_index("condition")
    assert catchy.loc["mil", "mean"] == 5.0 and catchy.loc["solo", "mean"] == 2.5
    assert catchy.loc["mil", "mannwhitney_p"] < 0.01
    agreement = result.self_vs_others.set_index(["question", "criterion"])
    own = agreement.loc[("satisfied", "catchy")]  # the satisfied writers' slogans rate higher
    assert own["n"] == 12 and own["estimate"] > 0.7 and own["ci_low"] <= own["estimate"]
    writers = result.writers.set_index("condition")  # Table 2.3: writers by experience
    # writers 0, 2, 4 are solo (none, a lot, some), 1, 3, 5 mil (some, none, a lot)
    levels = ["experience: none", "experience: some", "experience: a lot"]
    assert writers.loc["solo", levels].tolist() == [1, 1, 1] and writers.loc["mil", "writers"] == 3
    assert writers["experience: not asked"].sum() == 0
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"format": "storyeval-writing-session"}\n', encoding="utf-8")
    with pytest.raises(DataFileError, match=r"bad\.jsonl:1"):
        read_slogan_sessions(bad)


def test_cli_exports_slogans_and_analyses(run_cli: Any, tmp_path: Path) -> None:
    records = []
    for i in range(2):
        session = SloganSession.start(config(), participant=f"p{i}", now=0.0, prompt_index=i)
        finish(session, ["Fresh food.", "Her."], satisfied=5)
        records.append(session.export())
    path = tmp_path / "sessions.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    code, out, err = run_cli("slogan-study", "stories", str(path), "-o", str(tmp_path / "s.jsonl"))
    assert code == 0, out + err
    assert len((tmp_path / "s.jsonl").read_text().splitlines()) == 4
    code, out, err = run_cli("slogan-study", "analyse", str(path), "-o", str(tmp_path / "an"))
    assert code == 0, out + err
    assert "Writers' surveys" in (tmp_path / "an" / "report.md").read_text()


def test_the_third_party_rating_study_asks_the_writers_questions(examples_dir):
    """examples/slogan/rating-study.yaml: a Likert study of final slogans on the writers' own
    Table 2.2 questions (seven points, nine raters), so analyse can pair the two."""
    from storyeval.collab.config import SLOGAN_STATEMENTS
    from storyeval.human.study import load_study

    study = load_study(examples_dir / "slogan" / "rating-study.yaml")
    names = [c.name for c in study.criteria]
    assert names == [name for name, _ in SLOGAN_STATEMENTS if name.startswith("slogan_")]
    assert {c.scale for c in study.criteria} == {7}
    assert study.protocol == "likert" and study.raters_per_item == 9
    assert {item.condition for item in study.items} == {"solo", "mil"}
