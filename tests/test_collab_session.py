"""Collaborative-writing sessions as a library: session files, the CYOA and MIL state
machines, the sessions file, and the generation worker with the real offline model."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from storyeval.base.errors import DataFileError
from storyeval.collab import (
    CYOA_QUESTIONS,
    CYOA_STATEMENTS,
    SuggestionResult,
    TurnError,
    WritingFileError,
    WritingSession,
    load_writing_config,
    parse_writing_config,
    read_sessions,
    write_sessions,
)
from storyeval.collab.config import USE_AGAIN_CHOICES

EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "cyoa"


def _cyoa(**overrides):
    data = {
        "kind": "cyoa",
        "name": "t",
        "title": "T",
        "generators": [{"name": "nucleus"}, {"name": "top-k"}],
    }
    data.update(overrides)
    return parse_writing_config(data)


def _result(text, request, now=1.0):
    return SuggestionResult(
        text=text, signature="suggest|x", seed=request.seed, started_at=now, finished_at=now
    )


def _answer_all(session, requests, now, texts=None):
    for request in requests:
        text = (texts or {}).get(request.generator, f"The {request.generator} went on.")
        assert session.add_suggestion(request.request_id, _result(text, request), now=now)


def test_defaults_follow_the_thesis():
    config = _cyoa()
    assert (config.rounds, config.min_chars, config.max_chars) == (5, 20, 260)
    assert [(s.name, s.statement) for s in config.likert.statements] == list(CYOA_STATEMENTS)
    assert config.likert.labels == [
        "Strongly Disagree",
        "Disagree",
        "Neutral",
        "Agree",
        "Strongly Agree",
    ]
    assert [(q.name, q.question) for q in config.questions] == list(CYOA_QUESTIONS)
    mil = load_writing_config(EXAMPLES / "mil.yaml")
    assert (mil.sentences, mil.rounds, mil.likert.scale) == (10, 5, 7)


def test_config_errors_name_file_line_and_key(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text(
        "kind: cyoa\nname: ok\ntitle: T\nmin_chars: 0\ngenerators:\n  - name: a\n"
        "    decoding: {top_p: 1.5}\n  - name: b\n    temprature: 3\n"
    )
    with pytest.raises(WritingFileError) as info:
        load_writing_config(path)
    problems = info.value.problems
    # the same wording and key paths as study files (storyeval.base.yamlfile)
    assert f"{path}:4: min_chars: Input should be greater than or equal to 1; got 0" in problems
    assert any(p.startswith(f"{path}:7: generators[0].decoding.top_p:") for p in problems)
    assert (
        f"{path}:9: generators[1].temprature: unknown key 'temprature' (check the spelling)"
        in problems
    )
    path.write_text(
        "kind: cyoa\nname: ok\ntitle: T\nprompts:\n  - {id: p, image: missing.png}\n"
        "generators: [{name: a}, {name: b}]\n"
    )
    with pytest.raises(WritingFileError, match=r"bad.yaml:5: prompts\[0\].image: no such file"):
        load_writing_config(path)
    with pytest.raises(WritingFileError, match="exactly two generators"):
        _cyoa(generators=[{"name": "a"}])
    with pytest.raises(WritingFileError, match="kind: must be one of cyoa, mil"):
        parse_writing_config({"kind": "story"})


def test_cyoa_session_runs_five_rounds_and_locks_turns():
    config = _cyoa()
    session = WritingSession.start(config, participant="p00001", now=0.0)
    with pytest.raises(TurnError, match="between 20 and 260 characters; this one has 9"):
        session.submit_text("Too short", now=1.0)
    with pytest.raises(TurnError, match="this one has 261"):
        session.submit_text("x" * 261, now=1.0)
    orders = []
    for round_number in range(1, 6):
        assert session.phase == "write" and session.round == round_number
        requests = session.submit_text(f"The writer wrote line {round_number} alone.", now=10.0)
        assert session.phase == "generating"
        assert sorted(r.generator for r in requests) == ["nucleus", "top-k"]
        assert all(r.context.endswith(f"line {round_number} alone.") for r in requests)
        with pytest.raises(TurnError):
            session.choose("nucleus", now=11.0)  # nothing to choose while generating
        _answer_all(session, requests, now=12.0)
        assert session.phase == "choose"
        orders.append(tuple(s["generator"] for s in session.ordered_suggestions()))
        session.choose("top-k", now=13.0)
        assert session.edit_text() == "The top-k went on."
        session.choose("nucleus", now=14.0)  # switch while editing
        session.choose("nucleus", now=14.5)  # re-selecting is not a switch
        assert session.edit_text() == "The nucleus went on."
        with pytest.raises(TurnError, match="no such suggestion"):
            session.choose("greedy", now=15.0)
        session.submit_text("The nucleus went on, edited by hand.", now=20.0)
        # the submitted turn is locked: nothing can change it any more
        with pytest.raises(TurnError):
            session.choose("top-k", now=21.0)
    assert session.phase == "survey"
    assert len(set(orders)) == 2, "presentation order should vary across rounds"
    assert session.story().count("edited by hand") == 5
    with pytest.raises(TurnError, match="Please answer: I'm happy"):
        session.submit_survey({}, {}, now=30.0)
    session.submit_survey(
        {s.name: 4 for s in config.likert.statements}, {"why_choose": " fit  "}, now=31.0
    )
    assert session.phase == "done"
    record = session.export()
    assert record["status"] == "complete" and len(record["turns"]) == 10
    turn = record["turns"][1]
    assert turn["chosen"] == "nucleus" and turn["switches"] == 1
    assert [e["action"] for e in turn["events"]] == ["choose", "switch", "submit"]
    assert turn["choice_s"] == 1.0 and turn["edit_s"] == 7.0
    assert sorted(s["position"] for s in turn["suggestions"]) == [1, 2]
    assert record["survey"]["questions"][0]["answer"] == "fit"
    assert record["survey"]["likert"][0]["label"] == "Agree"
    # the export is a valid sessions-file record
    parsed = read_sessions_from([record])
    assert parsed[0].suggestion_turns[0].chosen == "nucleus"


def read_sessions_from(records, tmp=None):
    import tempfile

    path = Path(tempfile.mkdtemp()) / "s.jsonl"
    write_sessions(path, records)
    return read_sessions(path)


def test_session_round_trips_through_json_and_is_deterministic():
    config = _cyoa(rounds=1)
    a = WritingSession.start(config, participant="p00007", now=0.0)
    b = WritingSession.start(config, participant="p00007", now=0.0)
    ra = a.submit_text("Gerald woke up early and ran outside.", now=1.0)
    rb = b.submit_text("Gerald woke up early and ran outside.", now=1.0)
    assert [(r.request_id, r.seed) for r in ra] == [(r.request_id, r.seed) for r in rb]
    restored = WritingSession.from_dict(config, json.loads(json.dumps(a.to_dict())))
    assert restored.pending_requests() == ra
    _answer_all(restored, ra, now=2.0)
    assert not restored.add_suggestion(ra[0].request_id, _result("late", ra[0]), now=3.0)
    assert restored.phase == "choose"


def test_failed_generation_can_be_retried():
    config = _cyoa(rounds=1)
    session = WritingSession.start(config, participant="p1", now=0.0)
    first = session.submit_text("A storm rolled over the quiet village.", now=1.0)
    bad = SuggestionResult(None, "", first[0].seed, 1.0, 2.0, error="model exploded")
    session.add_suggestion(first[0].request_id, bad, now=2.0)
    session.add_suggestion(first[1].request_id, _result("Fine.", first[1]), now=2.0)
    assert session.phase == "failed"
    again = session.retry(now=3.0)
    assert {r.request_id.rsplit("-", 1)[1] for r in again} == {"a2"}
    assert {r.seed for r in again}.isdisjoint({r.seed for r in first})
    # a stale result of the first attempt is ignored
    assert not session.add_suggestion(first[1].request_id, _result("Old.", first[1]), now=4.0)
    _answer_all(session, again, now=5.0)
    assert session.phase == "choose"
    assert session.export()["failed_generations"] == 1


def test_mil_pushes_one_sentence_into_the_edit_box():
    config = parse_writing_config(
        {"kind": "mil", "name": "m", "title": "M", "sentences": 4, "generator": {"name": "lm"}}
    )
    session = WritingSession.start(config, participant="p2", now=0.0)
    requests = session.submit_text("Tom lost his hat.", now=1.0)
    assert [r.generator for r in requests] == ["lm"]
    _answer_all(session, requests, now=2.0, texts={"lm": "He looked for it."})
    assert session.phase == "edit" and session.edit_text() == "He looked for it."
    with pytest.raises(TurnError, match="single suggestion"):
        session.choose("lm", now=2.5)
    session.submit_text("He looked everywhere.", now=3.0)
    requests = session.submit_text("The wind had taken it.", now=4.0)
    _answer_all(session, requests, now=5.0, texts={"lm": "The hat flew away."})
    session.submit_text("The hat flew away.", now=6.0)
    assert session.phase == "survey" and session.sentences_written() == 4
    record = session.export()
    assert [t["author"] for t in record["turns"]] == ["writer", "suggestion"] * 2
    assert record["turns"][1]["events"][0]["action"] == "push"


def test_sessions_file_errors_have_file_and_line(tmp_path):
    good = json.loads(
        (Path(__file__).parent / "data" / "writing_sessions.jsonl").read_text().splitlines()[0]
    )
    broken = dict(good, turns=[dict(good["turns"][1], chosen="gamma")])
    path = tmp_path / "s.jsonl"
    path.write_text(
        json.dumps(good)
        + "\n"
        + json.dumps(broken | {"session_id": "x"})
        + "\n{oops\n"
        + json.dumps(good)
        + "\n"
    )
    with pytest.raises(DataFileError) as info:
        read_sessions(path)
    text = [str(p) for p in info.value.problems]
    assert text[0] == f"{path}:2: turns[0].chosen: 'gamma' is not one of ['alpha', 'beta']"
    assert text[1].startswith(f"{path}:3: malformed JSON")
    assert text[2].startswith(f"{path}:4: duplicate session_id 'fixture/pA' (first seen on line 1)")


@pytest.mark.slow
def test_worker_generates_off_the_calling_thread_with_the_real_model(causal_lm):
    """The engine runs SmolLM2 in a worker thread; the caller is never blocked, results are
    seeded (same request, same text) and carry the signature of every setting."""
    from storyeval.collab.worker import GenerationWorker, SuggestionEngine

    config = _cyoa(
        rounds=1,
        generators=[
            {"name": "nucleus", "decoding": {"top_p": 0.9, "max_new_tokens": 16}},
            {
                "name": "top-k",
                "decoding": {"top_k": 40, "max_new_tokens": 16},
                "offensive_filter": True,
            },
        ],
    )
    session = WritingSession.start(config, participant="p9", now=0.0)
    requests = session.submit_text(
        "One morning, Gerald woke up early and ran to the window.", now=1.0
    )
    results: dict[str, SuggestionResult] = {}
    lock = threading.Lock()

    def store(key, request, result):
        with lock:
            results[request.generator] = result
            session.add_suggestion(request.request_id, result, now=time.time())

    worker = GenerationWorker(SuggestionEngine(config), store)
    started = time.perf_counter()
    for request in requests:
        assert worker.submit("p9", request)
    assert not worker.submit("p9", requests[0])  # already queued
    assert time.perf_counter() - started < 0.5  # submitting never waits for the model
    assert worker.wait_idle(timeout=120)
    worker.close()
    assert session.phase == "choose"
    for name, result in results.items():
        assert result.text and 0 < len(result.text) <= 260, name
        assert result.signature.startswith("suggest|model:SmolLM2-135M-Instruct-Q4_1@")
        assert f"seed:{result.seed}" in result.signature
    assert "word_filter:storyeval-default@" in results["top-k"].signature
    again = SuggestionEngine(config)(requests[0])
    assert again.text == results[requests[0].generator].text


def _mil_config(**changes: object) -> Any:
    return parse_writing_config(
        {"kind": "mil", "name": "m", "title": "M", "sentences": 3, "generator": {"name": "lm"}}
        | changes
    )


def test_mil_conditions_alternate_and_solo_writers_write_every_sentence():
    config = _mil_config(
        conditions=["solo", "mil"], prompts=[{"id": "a", "text": "A."}, {"id": "b", "text": "B."}]
    )
    writers = [
        WritingSession.start(config, participant=f"p{i}", now=0.0, prompt_index=i) for i in range(4)
    ]
    assert [w.condition for w in writers] == ["solo", "mil", "solo", "mil"]
    # each condition sees each prompt in turn: prompt and condition are not confounded
    assert [w.data["prompt"]["id"] for w in writers] == ["a", "a", "b", "b"]
    solo = writers[0]
    for second, text in enumerate(["Tom lost his hat.", "He looked.", "It was gone."]):
        assert solo.submit_text(text, now=float(second)) == []
    assert solo.phase == "survey" and solo.sentences_written() == 3
    names = [s.name for s in solo.survey_statements()]
    assert "story_creative" in names and "enjoyable" in names
    assert not any("suggestion" in name for name in names)
    assert [q.name for q in solo.survey_questions()][-1] == "tools"
    assert not solo.asks_use_again
    likert = {name: 5 for name in names}
    answers = {q.name: "fine" for q in solo.survey_questions()}
    solo.submit_survey(likert, answers, now=9.0)
    record = solo.export()
    assert record["condition"] == "solo" and "use_again" not in record["survey"]
    assert {t["author"] for t in record["turns"]} == {"writer"}


def test_mil_writers_answer_the_use_again_question_of_table_2_4():
    config = _mil_config(sentences=2)
    session = WritingSession.start(config, participant="p1", now=0.0)
    assert session.condition == "mil" and session.asks_use_again
    requests = session.submit_text("Tom lost his hat.", now=1.0)
    _answer_all(session, requests, now=2.0, texts={"lm": "He looked for it."})
    session.submit_text("He looked for it.", now=3.0)
    likert = {s.name: 4 for s in session.survey_statements()}
    answers = {q.name: "ok" for q in session.survey_questions()}
    with pytest.raises(TurnError, match="use_again"):
        session.submit_survey(likert, answers, now=4.0, use_again="Probably yes")
    assert session.phase == "survey"  # nothing stored
    session.submit_survey(likert, answers, now=4.0, use_again=USE_AGAIN_CHOICES[3])
    assert session.export()["survey"]["use_again"] == "I wouldn't use it."


def test_mil_default_keeps_the_version_of_files_written_before_conditions():
    assert _mil_config().version() == _mil_config(conditions=["mil"]).version()
    assert _mil_config().version() != _mil_config(conditions=["solo", "mil"]).version()
    with pytest.raises(WritingFileError, match="conditions: give solo, mil or both"):
        _mil_config(conditions=["alone"])
