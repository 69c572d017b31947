"""The holes of the third attack on the study server and the viewer (the first three, the
directory writer, colluding raters and the Host header, are tested in ``test_view.py``,
``test_adaptive_assignment.py`` and ``tests/test_output_directories.py``):

4. spans analysis trusted its input (a span to 10**9 died with MemoryError; negative offsets,
   a unit twice, unknown labels, units past the story's end went through);
5. malformed files crashed the viewer (deep nesting, a metric named like a table column,
   writing sessions of the wrong shape: 500s with tracebacks);
6. the calibration page returned 500 when the judge file was edited to a bad line;
7. ``progress.json`` left out the settled slots;
8. one long story stalled the viewer (a 50,000-word word diff: 52 s).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from storyeval.corpus import Judgment, Story, write_judgments, write_stories
from storyeval.meta.spans import SHARE, story_units

LOOPBACK = "http://127.0.0.1"


# ----------------------------------------------------------------------------- 4 spans


def _span_file(path: Path, stories: list[Story], spans: list[Any], units: Any = None) -> Path:
    """Two raters' span judgments of the first story; the second rater's spans as given."""
    text = stories[0].story
    found = story_units(text)
    good = [{"unit": 1, "start": found[0].start, "end": found[0].end, "label": "repetition"}]
    rows = []
    for rater, marked in (("r1", good), ("r2", spans)):
        rows.append(
            Judgment(
                stories[0].id, rater, SHARE, 0.5,
                extra={"units": units if units is not None else len(found), "spans": marked,
                       "protocol": "spans"},
            )
        )  # fmt: skip
        rows.append(Judgment(stories[0].id, rater, "repetition", 1.0, extra={"protocol": "spans"}))
    write_judgments(path, rows)
    return path


@pytest.fixture
def span_stories(tmp_path: Path) -> tuple[list[Story], Path]:
    stories = [
        Story("s1", "", "It rained all day. She stayed in. He went out anyway.", system="a"),
        Story("s2", "", "The sun rose. Birds sang.", system="b"),
    ]
    path = tmp_path / "stories.jsonl"
    write_stories(path, stories)
    return stories, path


@pytest.mark.parametrize(
    ("spans", "units", "reason"),
    [
        (
            [{"unit": 1, "start": 0, "end": 10**9, "label": "repetition"}],
            None,
            "is at 0-1000000000",
        ),
        ([{"unit": 1, "start": -5, "end": 3, "label": "repetition"}], None, "0 <= start < end"),
        (
            [{"unit": 1, "start": 0, "end": 5, "label": "repetition"}] * 2,
            None,
            "unit 1 is marked twice",
        ),
        ([{"unit": 1, "start": 0, "end": 5, "label": "rhyme"}], None, "label 'rhyme' is not one"),
        ([{"unit": 9, "start": 0, "end": 5, "label": "repetition"}], None, "outside the story's 3"),
        ([], 10**8, "units must be a whole number in 1..100000"),
        ([], 7, "units is 7 but the story has 3 sentences"),
    ],
)
def test_bad_spans_are_refused_with_file_and_line(
    span_stories: Any, tmp_path: Path, run_cli: Any, spans: Any, units: Any, reason: str
) -> None:
    stories, story_file = span_stories
    path = _span_file(tmp_path / "judgments.jsonl", stories, spans, units)
    code, _, err = run_cli(
        "study", "analyse", "--judgments", str(path), "--stories", str(story_file),
        "--min-median-time", "0", "-o", str(tmp_path / "out"), "--bootstrap", "10",
    )  # fmt: skip
    assert code == 2, err
    assert f"{path}:3:" in err and reason in err, err
    assert not (tmp_path / "out").exists()


def test_good_spans_are_analysed(span_stories: Any, tmp_path: Path, run_cli: Any) -> None:
    stories, story_file = span_stories
    unit = story_units(stories[0].story)[0]
    spans = [{"unit": 1, "start": unit.start, "end": unit.end, "label": "repetition"}]
    path = _span_file(tmp_path / "judgments.jsonl", stories, spans)
    code, _, err = run_cli(
        "study", "analyse", "--judgments", str(path), "--stories", str(story_file),
        "--min-median-time", "0", "-o", str(tmp_path / "out"), "--bootstrap", "10",
    )  # fmt: skip
    assert code == 0, err
    import pandas as pd

    table = pd.read_csv(tmp_path / "out" / "spans_agreement.csv").set_index("label")
    assert table.loc["repetition", "overlap_f1"] == 1.0


# ----------------------------------------------------------------------------- 5 viewer files


def _view(tmp_path: Path, records: list[Any], name: str = "extra.jsonl") -> tuple[int, str]:
    """The viewer over a story file and one more file (raw lines): its exit code and error."""
    from typer.testing import CliRunner

    from storyeval.cli import app

    folder = tmp_path / "in"
    folder.mkdir(exist_ok=True)
    write_stories(folder / "stories.jsonl", [Story("s1", "P", "A story.", system="a")])
    lines = [r if isinstance(r, str) else json.dumps(r) for r in records]
    (folder / name).write_text("\n".join(lines) + "\n", encoding="utf-8")
    result = CliRunner().invoke(app, ["view", str(folder), "--export", str(tmp_path / "site")])
    return result.exit_code, result.output


SESSION = {"format": "storyeval-writing-session", "kind": "cyoa", "session_id": "x/1"}


@pytest.mark.parametrize(
    ("records", "reason"),
    [
        (["[" * 100_000 + "]" * 100_000], "nested too deeply"),
        ([{"item_id": "s1", "metric": "words", "value": 1.0}], "metric 'words' is named as a column"),
        ([{"item_id": "s1", "metric": "item_id", "value": 1.0}], "metric 'item_id' is named"),
        ([{**SESSION, "kind": None, "turns": []}], "needs its 'kind'"),
        ([{**SESSION, "turns": {}}], "turns must be a list"),
        ([{**SESSION, "turns": 5}], "turns must be a list"),
        ([{**SESSION, "turns": [{"author": "suggestion", "suggestions": ["a string"]}]}],
         "each of a turn's suggestions must be an object"),
        ([{**SESSION, "turns": [], "survey": ["a", "list"]}], "survey must be an object"),
        ([{"format": "storyeval-slogan-session", "kind": "slogan", "tasks": [{"pulls": "x"}]}],
         "a task's pulls must be a list"),
    ],
)  # fmt: skip
def test_malformed_files_get_file_and_line_not_a_crash(
    tmp_path: Path, records: list[Any], reason: str
) -> None:
    code, output = _view(tmp_path, records)
    assert code == 2, output
    assert f"{tmp_path / 'in' / 'extra.jsonl'}:1:" in output and reason in output, output
    assert "Traceback" not in output


def test_every_session_shape_the_checks_accept_renders(tmp_path: Path) -> None:
    """Sessions that pass the checks but lack optional fields still render (200)."""
    from storyeval.view import create_view_app, load_view_data

    folder = tmp_path / "in"
    folder.mkdir()
    write_stories(folder / "stories.jsonl", [Story("s1", "P", "A story.", system="a")])
    sessions = [
        {**SESSION, "turns": [{"author": "writer"}, {"author": "suggestion", "suggestions": [{}]}]},
        {"format": "storyeval-slogan-session", "kind": "slogan", "tasks": [{"prompt": "p", "pulls": [{}]}]},
        {**SESSION, "turns": [], "final_survey": {"likert": [1, {"value": 2}]}},
    ]  # fmt: skip
    (folder / "sessions.jsonl").write_text("".join(json.dumps(s) + "\n" for s in sessions))
    client = TestClient(create_view_app(load_view_data([folder])), base_url=LOOPBACK)
    for number in (1, 2, 3):
        assert client.get(f"/session/{number}").status_code == 200


# ----------------------------------------------------------------------------- 6 calibration


def test_a_judge_file_edited_to_a_bad_line_keeps_the_last_good_state(make_likert, tmp_path):
    from storyeval.server.app import create_app
    from storyeval.server.settings import Settings
    from storyeval.server.simulate import StudyBrowser
    from storyeval.server.study_session import StudySession

    from .test_calibration_queue import ADMIN, _links

    study = make_likert(per_system=3, per_participant=3, raters=2)
    ids = [text.id for item in study.items for text in item.texts]
    judge_file = tmp_path / "judge.jsonl"
    write_judgments(
        judge_file,
        [Judgment(i, "judge|model:test", "coherence", float(k % 5 + 1)) for k, i in enumerate(ids)],
    )
    settings = Settings(
        database_url=f"sqlite:///{tmp_path / 'c.sqlite3'}",
        admin_token=ADMIN,
        judge_files=(str(judge_file),),
    )
    client = TestClient(create_app(settings, [StudySession(study)]))
    for seed, link in enumerate(_links(client, study, 3)):
        StudyBrowser(client, study, seed=seed).run(link)
    prefix = f"/admin/{ADMIN}/study/{study.name}"
    before = json.loads(client.get(f"{prefix}/calibration.json").text)
    assert before["summary"] and before["error"] == ""
    with open(judge_file, "a", encoding="utf-8") as handle:
        handle.write('{"item_id": "x", "rater_id": "judge", "criterion": \n')
    stamp = judge_file.stat().st_mtime_ns + 1_000_000
    os.utime(judge_file, ns=(stamp, stamp))
    page = client.get(f"{prefix}/calibration")
    assert page.status_code == 200
    assert "could not be read" in page.text and "judge.jsonl:" in page.text
    during = json.loads(client.get(f"{prefix}/calibration.json").text)
    assert during["summary"] == before["summary"] and "judge.jsonl:" in during["error"]


# ----------------------------------------------------------------------------- 7 progress


def test_progress_json_counts_the_settled_slots(db_url, study_dir):
    from storyeval.server import study_store as store
    from storyeval.server.app import create_app
    from storyeval.server.db import Database
    from storyeval.server.settings import Settings
    from storyeval.server.study_session import StudySession

    from .conftest import LIKERT, write_study
    from .test_adaptive_assignment import _answer_everything

    adaptive = "\n  adaptive:\n    min_raters: 2\n    target_width: 3.5\n"
    text = LIKERT.format(name="settles", per_system=2, per_participant=4, raters=8) + adaptive
    study = write_study(study_dir, text, "settles.yaml")
    db = Database(db_url, pool_size=4)
    db.create_all()
    store.register_study(db, study, now=0.0)
    keys = [item.key for item in study.items]
    for step in range(4):  # items differ, raters agree: the items settle
        _answer_everything(
            db, study, lambda s: {c.name: 2 + keys.index(s.item_key) % 3 for c in study.criteria},
            step,
        )  # fmt: skip
    settings = Settings(database_url=db_url, admin_token="progress-admin-token-012345")
    client = TestClient(create_app(settings, [StudySession(study)]))
    progress = client.get(f"/admin/{settings.admin_token}/study/{study.name}/progress.json")
    data = progress.json()
    assert data["slots_settled"] > 0
    parts = data["slots_open"] + data["slots_reserved"] + data["slots_done"] + data["slots_settled"]
    assert data["slots_total"] == parts
    assert sum(item["settled"] for item in data["items"]) == data["slots_settled"]
    db.dispose()


# ----------------------------------------------------------------------------- 8 long story


def test_a_50000_word_story_beside_its_reference_renders_in_under_two_seconds(
    tmp_path: Path, examples_dir: Path
) -> None:
    from storyeval.corpus import read_stories
    from storyeval.view import create_view_app, load_view_data

    source = read_stories(examples_dir / "human.jsonl")
    pieces = [s.story for s in source]
    words = 0
    story, reference = [], []
    for index in range(10_000):
        text = pieces[index % len(pieces)]
        story.append(text)
        reference.append(text if index % 7 else pieces[(index + 3) % len(pieces)])
        words += len(text.split())
        if words >= 50_000:
            break
    folder = tmp_path / "in"
    folder.mkdir()
    long = Story("long", "A prompt.", " ".join(story), " ".join(reference), "a", {"prompt_id": "p"})
    write_stories(folder / "stories.jsonl", [long])
    client = TestClient(create_view_app(load_view_data([folder])), base_url=LOOPBACK)
    started = time.perf_counter()
    page = client.get("/prompt/p")
    seconds = time.perf_counter() - started
    assert page.status_code == 200 and "<ins>" in page.text
    assert seconds < 2.0, f"{seconds:.1f} s"
