"""The judge-calibration queue: the library table worked by hand, and the admin page of a
running study with a judge file loaded (and refused when the file is bad)."""

from __future__ import annotations

import json
import math

import pytest
from fastapi.testclient import TestClient

from storyeval.corpus import Judgment, write_judgments
from storyeval.meta.review import calibration_queue
from storyeval.server.app import create_app
from storyeval.server.settings import Settings
from storyeval.server.simulate import StudyBrowser
from storyeval.server.study_session import StudySession

ADMIN = "calibration-admin-token-0123"


def test_the_queue_puts_the_stories_judge_and_people_rank_apart_first():
    people = [
        Judgment(item, rater, "coherence", value)
        for item, values in {"a": (1, 2), "b": (2, 2), "c": (4, 4), "d": (5, 4)}.items()
        for rater, value in zip(("r1", "r2"), values, strict=True)
    ]
    judge = [
        Judgment(item, "judge-x", "coherence", value)
        for item, value in {"a": 5, "b": 2, "c": 3, "d": 4}.items()
    ] + [Judgment("a", "judge-x", "humour", 3)]  # people did not rate humour
    summary, queue = calibration_queue(people, judge, top=2)
    # ranks: people 1 2 3 4, judge 4 1 2 3; sum of squared differences 12: 1 - 6 * 12 / 60
    assert summary.to_dict("records") == [
        {"judge": "judge-x", "criterion": "coherence", "spearman": pytest.approx(-0.2), "n": 4}
    ]
    # people rank a < b < c < d; the judge ranks a highest: a's gap is 1 - 0.25
    first = queue.iloc[0]
    assert first["item_id"] == "a" and first["rank_gap"] == pytest.approx(0.75)
    assert first["people_mean"] == 1.5 and first["people_n"] == 2
    assert first["people_sd"] == pytest.approx(math.sqrt(0.5)) and first["judge_value"] == 5
    assert len(queue) == 2 and queue.iloc[1]["rank_gap"] == pytest.approx(-0.25)


def _client(study, tmp_path, judge_files=()) -> TestClient:  # type: ignore[no-untyped-def]
    settings = Settings(
        database_url=f"sqlite:///{tmp_path / 'calibration.sqlite3'}",
        admin_token=ADMIN,
        judge_files=tuple(str(p) for p in judge_files),
    )
    return TestClient(create_app(settings, [StudySession(study)]))


def _links(client, study, count):  # type: ignore[no-untyped-def]
    import re

    page = client.post(
        f"/admin/{ADMIN}/links", data={"kind": "study", "name": study.name, "count": str(count)}
    )
    return re.findall(r"<code>(http[^<]+)</code>", page.text)


def test_the_admin_page_lists_the_disagreements_as_judgments_arrive(make_likert, tmp_path):
    study = make_likert(per_system=3, per_participant=3, raters=2)
    ids = [text.id for item in study.items for text in item.texts]
    judge_file = tmp_path / "judge.jsonl"
    write_judgments(
        judge_file,
        [Judgment(i, "judge|model:test", "coherence", float(k % 5 + 1)) for k, i in enumerate(ids)]
        + [Judgment("not-in-study", "judge|model:test", "coherence", 3.0)],
    )
    client = _client(study, tmp_path, [judge_file])
    prefix = f"/admin/{ADMIN}/study/{study.name}"
    empty = client.get(f"{prefix}/calibration")
    assert empty.status_code == 200 and "Nothing to compare yet" in empty.text
    for seed, link in enumerate(_links(client, study, 4)):
        StudyBrowser(client, study, seed=seed).run(link)
    page = client.get(f"{prefix}/calibration")
    assert page.status_code == 200 and "Spearman with the people" in page.text
    data = json.loads(client.get(f"{prefix}/calibration.json?top=3").text)
    assert [r["criterion"] for r in data["summary"]] == ["coherence"]
    assert 1 <= len(data["queue"]) <= 3 and data["summary"][0]["n"] <= len(ids)
    assert all(r["item_id"] in ids and r["excerpt"] for r in data["queue"])
    gaps = [abs(r["rank_gap"]) for r in data["queue"]]
    assert gaps == sorted(gaps, reverse=True)
    assert client.get(f"{prefix}/calibration.json?top=x").status_code == 422
    assert client.get(
        f"/admin/wrong-token-0123456789/study/{study.name}/calibration"
    ).status_code in (403, 404)
    assert "calibration" in client.get(f"{prefix}/").text


def test_without_a_judge_the_page_says_how_to_load_one(make_likert, tmp_path):
    study = make_likert()
    page = _client(study, tmp_path).get(f"/admin/{ADMIN}/study/{study.name}/calibration")
    assert page.status_code == 200 and "storyeval serve STUDY --judge" in page.text


def test_serve_refuses_a_bad_judge_file_before_starting(make_likert, tmp_path):
    from typer.testing import CliRunner

    from storyeval.cli import app

    study = make_likert()
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"item_id": "s1", "rater_id": "j", "criterion": "c", "value": 3}\n{oops\n')
    result = CliRunner().invoke(
        app,
        ["serve", str(study.path), "--db", f"sqlite:///{tmp_path / 'x.db'}", "--judge", str(bad)],
    )
    assert result.exit_code != 0 and "bad.jsonl:2" in result.output
