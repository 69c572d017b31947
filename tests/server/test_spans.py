"""Span annotation: the units and records, agreement worked by hand, the study protocol on the
real server (and in Chromium), and an LLM judge marking the same sentences, compared span by
span with people."""

from __future__ import annotations

import json
import math
import re

import pandas as pd
import pytest
from fastapi.testclient import TestClient

from storyeval.corpus import Judgment, Story, read_judgments
from storyeval.human.analysis import analyse_judgments
from storyeval.human.study import load_study
from storyeval.meta.spans import (
    SHARE,
    STORY_TAXONOMY,
    compare_spans,
    span_agreement,
    span_rows,
    spans_frame,
    story_units,
)
from storyeval.server.app import create_app
from storyeval.server.settings import Settings
from storyeval.server.simulate import StudyBrowser
from storyeval.server.study_session import StudySession

from .conftest import launch_chromium, write_study

TEXT = "Ana lit the lamp. The room was dark. Ana lit the lamp. Her brother, Tom, was asleep."
LABELS = [name for name, _ in STORY_TAXONOMY]


def _annotation(
    rater: str, marks: dict[int, str], item: str = "s1", text: str = TEXT
) -> list[Judgment]:
    return [
        Judgment(item, rater, criterion, value, extra={"system": "x", **extra})
        for criterion, value, extra in span_rows(story_units(text), marks, LABELS)
    ]


def test_units_carry_their_offsets_and_records_count_each_label():
    units = story_units(TEXT)
    assert [u.text for u in units] == [
        "Ana lit the lamp.",
        "The room was dark.",
        "Ana lit the lamp.",
        "Her brother, Tom, was asleep.",
    ]
    assert all(TEXT[u.start : u.end] == u.text for u in units)
    rows = {c: (v, e) for c, v, e in span_rows(units, {3: "repetition", 2: "none"}, LABELS)}
    assert rows["repetition"][0] == 1.0 and rows["style"][0] == 0.0
    value, extra = rows[SHARE]
    assert value == 0.25 and extra["units"] == 4
    assert extra["spans"] == [{"unit": 3, "start": 37, "end": 54, "label": "repetition"}]
    with pytest.raises(ValueError, match="outside the taxonomy"):
        span_rows(units, {1: "boredom"}, LABELS)


def test_span_agreement_worked_by_hand():
    judgments = _annotation("a", {1: "repetition", 3: "style"}) + _annotation(
        "b", {1: "repetition", 4: "style"}
    )
    frame = spans_frame(judgments)
    assert len(frame) == 8 and set(frame["label"]) == {"none", "repetition", "style"}
    table = span_agreement(frame, labels=LABELS, n_boot=50).set_index("label")
    assert table.loc["repetition", "overlap_f1"] == 1.0
    assert table.loc["style", "overlap_f1"] == 0.0
    u = story_units(TEXT)
    size = [x.end - x.start for x in u]
    assert table.loc["any", "overlap_f1"] == pytest.approx(
        2 * size[0] / (2 * size[0] + size[2] + size[3])
    )
    # raters x units for "any": [1, 0, 1, 0] and [1, 0, 0, 1]; nominal alpha by hand:
    # o_11 = 2, o_00 = 2, o_01 = o_10 = 2, n = 8, n_0 = n_1 = 4: 1 - 7 * 4 / (2 * 4 * 4)
    assert table.loc["any", "unit_alpha"] == pytest.approx(0.125)
    assert table.loc["repetition", "unit_alpha"] == pytest.approx(1.0)
    assert table.loc["any", "pairs"] == 1 and table.loc["any", "units"] == 4
    assert math.isnan(table.loc["inconsistency", "overlap_f1"])


def test_a_judge_is_compared_with_the_peoples_majority():
    people = spans_frame(
        _annotation("a", {1: "repetition", 3: "repetition"})
        + _annotation("b", {3: "repetition"})
        + _annotation("c", {3: "repetition", 4: "style"})
    )
    judge = spans_frame(_annotation("judge", {3: "repetition", 2: "incoherence"}))
    table = compare_spans(people, judge, labels=LABELS).set_index("label")
    # majority: only sentence 3 (repetition); the judge adds sentence 2
    assert table.loc["repetition", ["precision", "recall", "f1"]].tolist() == [1.0, 1.0, 1.0]
    u = story_units(TEXT)
    s2, s3 = u[1].end - u[1].start, u[2].end - u[2].start
    assert table.loc["any", "precision"] == pytest.approx(s3 / (s2 + s3))
    assert table.loc["any", "recall"] == 1.0
    assert table.loc["any", "unit_kappa"] == pytest.approx(0.5)
    assert table.loc["any", "stories"] == 1 and table.loc["any", "units"] == 4
    assert 0 < table.loc["any", "people_overlap_f1"] < 1


SPANS_STUDY = """
name: spans-test
title: Spans
protocol: spans
stories: stories.jsonl
select:
  ids: [xss, s001, s002-smollm2-p0.9]
instructions: Mark the problems.
spans:
  taxonomy:
    - {name: repetition, definition: says again what was said}
    - {name: style, definition: awkward or ungrammatical}
assignment:
  items_per_participant: 3
  raters_per_item: 2
  order: fixed
"""
ADMIN = "spans-admin-token-0123456789"
HOSTILE = "<script>window.__pwned = 1</script> Ana lit the lamp. <b>Ana</b> lit the lamp."


@pytest.fixture
def spans_study(study_dir):  # type: ignore[no-untyped-def]
    with open(study_dir / "stories.jsonl", "a", encoding="utf-8") as fh:
        record = {"id": "xss", "prompt": "A <i>lamp</i>.", "story": HOSTILE, "system": "human"}
        fh.write(json.dumps(record) + "\n")
    return write_study(study_dir, SPANS_STUDY, "spans.yaml")


def _client(study, tmp_path) -> TestClient:  # type: ignore[no-untyped-def]
    settings = Settings(database_url=f"sqlite:///{tmp_path / 'spans.sqlite3'}", admin_token=ADMIN)
    return TestClient(create_app(settings, [StudySession(study)]))


def _links(client: TestClient, study, count: int) -> list[str]:  # type: ignore[no-untyped-def]
    page = client.post(
        f"/admin/{ADMIN}/links", data={"kind": "study", "name": study.name, "count": str(count)}
    )
    return re.findall(r"<code>(http[^<]+)</code>", page.text)


def test_the_spans_page_refuses_bad_answers_and_stores_the_spans(spans_study, tmp_path):
    study = spans_study
    client = _client(study, tmp_path)
    link = _links(client, study, 1)[0]
    page = client.get(link.split("http://testserver")[-1], follow_redirects=True)
    page = client.post(page.url.path.replace("/welcome", "/start"), data={"consent": "yes"})
    path = page.url.path
    assert "/item/" in path
    selects = re.findall(r'<select name="(u\d+)"', page.text)
    assert selects == [f"u{i}" for i in range(1, len(selects) + 1)] and selects
    assert "<script>window.__pwned" not in page.text and "&lt;script&gt;" in page.text
    for form in ({"u1": "1"}, {"u1": "9", "confirm": "1"}, {"u1": "x", "confirm": "1"}):
        refused = client.post(path, data=form)
        assert refused.status_code == 422
    export = client.get(f"/admin/{ADMIN}/study/{study.name}/export/judgments.jsonl")
    assert export.text.strip() == ""  # nothing stored by a refused page
    stored = client.post(path, data={"u1": "1", "u2": "2", "u99": "1", "confirm": "1"})
    assert stored.status_code == 200
    export = client.get(f"/admin/{ADMIN}/study/{study.name}/export/judgments.jsonl")
    records = [json.loads(line) for line in export.text.splitlines()]
    assert sorted(r["criterion"] for r in records) == ["flagged_share", "repetition", "style"]
    share = next(r for r in records if r["criterion"] == SHARE)
    units = story_units(next(s for s in study.items if s.key == share["item_id"]).texts[0].story)
    assert share["units"] == len(units) and share["value"] == pytest.approx(2 / len(units))
    assert [(s["unit"], s["label"]) for s in share["spans"]] == [(1, "repetition"), (2, "style")]
    assert share["spans"][0]["start"] == units[0].start


def test_a_spans_study_is_analysed_with_span_agreement(spans_study, tmp_path):
    study = spans_study

    def marks(kind, keys, rng):  # type: ignore[no-untyped-def]
        answers = {"confirm": 1}
        answers.update({"u1": 1, "u2": rng.choice([0, 2])})
        return answers

    client = _client(study, tmp_path)
    outcomes = [
        StudyBrowser(client, study, answer=marks, seed=i).run(link)
        for i, link in enumerate(_links(client, study, 2))
    ]
    assert all(o.completion_code for o in outcomes)
    path = tmp_path / "judgments.jsonl"
    path.write_text(
        client.get(f"/admin/{ADMIN}/study/{study.name}/export/judgments.jsonl").text,
        encoding="utf-8",
    )
    for page in ("agreement", "agreement.json"):  # the live dashboard reads span studies too
        response = client.get(f"/admin/{ADMIN}/study/{study.name}/{page}")
        assert response.status_code == 200 and "repetition" in response.text
    analysis = analyse_judgments(read_judgments(path), min_median_time_s=0, n_boot=50)
    agreement = analysis.spans_agreement.set_index("label")
    assert agreement.loc["repetition", "overlap_f1"] == 1.0  # both raters mark sentence 1
    assert agreement.loc["repetition", "pairs"] == 3 and agreement.loc["any", "raters"] == 2
    by_system = analysis.spans_by_system
    assert set(by_system["system"]) == {"human", "smollm2-p0.9"}
    rep = by_system[by_system["label"] == "repetition"]
    assert (rep["marked_per_story"] == 1.0).all()
    assert "spans_agreement" in analysis.tables() and set(analysis.agreement["criterion"]) >= {
        "repetition",
        SHARE,
    }


def test_the_design_statement_lists_the_taxonomy(spans_study, tmp_path):
    from storyeval.human.statement import write_statement

    write_statement(spans_study, tmp_path / "statement.md")
    text = (tmp_path / "statement.md").read_text()
    assert "| repetition | says again what was said |" in text and "overlap F1" in text


def test_the_built_in_rubric_and_protocol_share_the_taxonomy(examples_dir):
    from storyeval.judge.rubric import load_rubric

    rubric = load_rubric("spans")
    assert [(c.name, c.question) for c in rubric.criteria] == list(STORY_TAXONOMY)
    study = load_study(examples_dir / "studies" / "spans.yaml")
    from storyeval.human.protocols import get_protocol

    assert get_protocol("spans").labels(study.config) == LABELS


@pytest.mark.slow
def test_the_offline_judge_marks_sentences_and_judge_eval_compares_spans(tmp_path):
    from typer.testing import CliRunner

    from storyeval.cli import app
    from storyeval.corpus import write_judgments, write_stories
    from storyeval.judge import judge_stories
    from storyeval.judge.backends import TransformersJudge
    from storyeval.judge.rubric import load_rubric

    stories = [
        Story("s1", "A lamp.", TEXT, system="x"),
        Story("s2", "A dog.", "The dog barked. It ran home. The dog barked.", system="y"),
    ]
    run = judge_stories(stories, load_rubric("spans"), [TransformersJudge(prefix_cache=True)])
    assert not run.failures
    frame = spans_frame(run.judgments)
    assert len(frame) == len(story_units(TEXT)) + 3
    shares = [j for j in run.judgments if j.criterion == SHARE]
    assert len(shares) == 2 and all(j.extra["label_mass"] > 0 for j in shares)
    assert run.calls >= 1 and "unit:sentence" in run.judgments[0].rater_id
    people = _annotation("a", {3: "repetition"}) + _annotation("b", {3: "repetition", 1: "style"})
    write_judgments(tmp_path / "judge.jsonl", [j for j in run.judgments if j.item_id == "s1"])
    write_judgments(tmp_path / "people.jsonl", people)
    write_stories(tmp_path / "stories.jsonl", stories)
    result = CliRunner().invoke(
        app,
        [
            "judge-eval",
            "--judge",
            str(tmp_path / "judge.jsonl"),
            "--humans",
            str(tmp_path / "people.jsonl"),
            "-o",
            str(tmp_path / "eval"),
            "--bootstrap",
            "20",
        ],
    )
    assert result.exit_code == 0, result.output
    table = pd.read_csv(tmp_path / "eval" / "spans.csv")
    assert set(table["label"]) == {*LABELS, "any"} and (table["stories"] == 1).all()
    assert "spans, the judge against the people's majority" in result.output


@pytest.mark.slow
def test_a_rater_marks_sentences_in_chromium(spans_study, tmp_path, live_server):
    import httpx
    from playwright.sync_api import sync_playwright

    server = live_server(spans_study.path, f"sqlite:///{tmp_path / 'spans-live.sqlite3'}", links=1)
    with sync_playwright() as playwright:
        browser = launch_chromium(playwright)
        try:
            page = browser.new_page()
            page.goto(server.links[0])
            page.check("input[name=consent]")
            page.click("button[type=submit]")
            while "/item/" in page.url:
                assert page.evaluate("() => window.__pwned") is None
                page.select_option("select[name=u1]", label="repetition")
                page.click("button[type=submit]")  # not confirmed: the browser refuses
                assert "/item/" in page.url
                page.check("input[name=confirm]")
                page.click("button[type=submit]")
        finally:
            browser.close()
    base = f"{server.base}/admin/{server.admin}/study/{spans_study.name}/export"
    records = [json.loads(x) for x in httpx.get(f"{base}/judgments.jsonl").text.splitlines()]
    shares = [r for r in records if r["criterion"] == SHARE]
    assert len(shares) == 3
    assert all([s["label"] for s in r["spans"]] == ["repetition"] for r in shares)
