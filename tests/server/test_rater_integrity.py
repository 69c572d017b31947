"""Rater integrity: how free-text answers were produced (keys, pastes, focus losses and the
composition time; never their content), recorded by the pages, checked by the server, shown on
the admin pages and in the exports, with pasted and machine-like answers flagged.

Two participants answer the same study in Chromium against the real server: one types the
answer key by key, the other pastes it. The paster is flagged, the typist is not; no page
shows the completion code before the last answer is saved. Writing sessions record their
texts the same way (checked through the app)."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from storyeval.server.integrity import measure_typing, summarise, typing_flags

from .conftest import launch_chromium

CODE = "C0MPLETE42"
ANSWER = "The second story rushed its ending and lost me."
STUDY = f"""
name: integrity-study
title: Integrity study
protocol: likert
stories: stories.jsonl
select:
  ids: [s001, s002-smollm2-p0.9]
criteria:
  - name: coherence
    question: How well do the sentences fit together?
    scale: 5
    labels: {{1: lowest, 5: highest}}
questions:
  - name: comments
    text: What did you notice about the stories?
    required: true
completion:
  code: {CODE}
assignment:
  items_per_participant: 2
  raters_per_item: 2
  order: fixed
quality:
  min_median_time_s: 0
"""

PASTE = """(text) => {
  const field = document.querySelector('textarea[name=comments]');
  const data = new DataTransfer();
  data.setData('text/plain', text);
  field.focus();
  field.dispatchEvent(new ClipboardEvent('paste', {clipboardData: data, bubbles: true}));
  field.value = text;
}"""


def _answer_study(page: Any, link: str, write: Any) -> list[str]:
    """Walk the study; returns every page's HTML before the last answer was submitted."""
    seen = []
    page.goto(link)
    seen.append(page.content())
    page.check("input[name=consent]")
    page.click("button[type=submit]")
    while "/item/" in page.url:
        seen.append(page.content())
        page.check("input[name=coherence][value='4']")
        page.click("button[type=submit]")
    assert page.url.endswith("/questions"), page.url
    seen.append(page.content())
    # the click returns once the page is on its way: its deferred integrity.js runs before
    # DOMContentLoaded, and a paste before that went uncounted on a loaded machine
    page.wait_for_load_state("domcontentloaded")
    write(page)
    page.click("button[type=submit]")
    assert page.url.endswith("/done")
    return seen


@pytest.mark.slow
def test_a_pasting_participant_is_flagged_and_a_typing_one_is_not(study_dir, tmp_path, live_server):
    from playwright.sync_api import sync_playwright

    (study_dir / "integrity.yaml").write_text(STUDY, encoding="utf-8")
    server = live_server(
        study_dir / "integrity.yaml", f"sqlite:///{tmp_path / 'integrity.sqlite3'}", links=2
    )
    with sync_playwright() as playwright:
        browser = launch_chromium(playwright)
        try:
            typist = browser.new_page()
            before = _answer_study(
                typist,
                server.links[0],
                lambda p: p.type("textarea[name=comments]", ANSWER, delay=110),
            )
            assert CODE in typist.inner_text("#completion-code")
            paster = browser.new_page()
            before += _answer_study(paster, server.links[1], lambda p: p.evaluate(PASTE, ANSWER))
            assert all(CODE not in html for html in before), "a page showed the code early"
        finally:
            browser.close()
    base = f"{server.base}/admin/{server.admin}/study/integrity-study"
    responses = [
        json.loads(x) for x in httpx.get(f"{base}/export/responses.jsonl").text.split("\n") if x
    ]
    by_rater = {r["rater_id"]: r for r in responses}
    assert len(by_rater) == 2 and all(r["text"] == ANSWER for r in responses)
    typed, pasted = (by_rater[r] for r in sorted(by_rater))
    assert typed["integrity"]["flags"] == [] and typed["integrity"]["keys"] >= len(ANSWER)
    assert typed["integrity"]["pastes"] == 0 and typed["integrity"]["active_s"] > 2
    assert pasted["integrity"]["flags"] == ["pasted"]
    assert pasted["integrity"]["pasted_chars"] == len(ANSWER) and pasted["integrity"]["keys"] == 0
    assert ANSWER not in json.dumps(typed["integrity"])  # counts, never the content
    people = [
        json.loads(x) for x in httpx.get(f"{base}/export/participants.jsonl").text.split("\n") if x
    ]
    flags = {p["rater_id"]: p["typing_flags"] for p in people}
    assert flags == {typed["rater_id"]: "", pasted["rater_id"]: "pasted 1"}
    page = httpx.get(f"{base}/").text
    assert "pasted 1 of 1" in page and "typed (1)" in page


def test_the_signals_are_checked_and_read_into_flags():
    """Hand-worked cases: typed, pasted, filled by a script (no key, no paste), typed faster
    than a person, too short to judge, malformed or absent counts (unmeasured)."""

    def signals(**given: Any) -> str:
        return json.dumps({"composition_s": 30.0, "active_s": 25.0, **given})

    text = "x" * 100
    assert measure_typing(signals(keys=105, deletions=5), text)["flags"] == []
    assert measure_typing(signals(keys=10, pastes=1, pasted_chars=90), text)["flags"] == ["pasted"]
    assert measure_typing(signals(), text)["flags"] == ["machine_like"]
    fast = measure_typing(json.dumps({"keys": 100, "active_s": 2.0, "composition_s": 2.0}), text)
    assert fast is not None and fast["flags"] == ["machine_like"]
    assert measure_typing(signals(), "short")["flags"] == []
    for bad in ("", "not json", "[1]", '{"keys": -1}', '{"keys": true}', '{"active_s": 1e9}'):
        assert measure_typing(bad, text) is None
    assert typing_flags({"chars": 40, "keys": 0, "pasted_chars": 0}) == ["machine_like"]
    summary = summarise(
        [measure_typing(signals(keys=105), text), None, measure_typing(signals(), text)]
    )
    assert summary == {
        "answers_measured": 2, "answers_unmeasured": 1, "answers_pasted": 0,
        "answers_machine_like": 1, "typing_flags": "machine_like 1",
    }  # fmt: skip


def test_writing_sessions_record_how_each_turn_was_written(tmp_path, tiny_models):
    """A writer's turn and survey answer carry the page's counts into the session export,
    and the admin page flags a pasted turn."""
    from storyeval.server.app import create_app
    from storyeval.server.settings import Settings
    from storyeval.server.writing_session import WritingSessionPlugin

    from .test_writing_app import ADMIN, new_writer, step, write_config

    config = write_config(tmp_path, rounds=1, model=tiny_models["lm"])
    plugin = WritingSessionPlugin.from_file(config)
    app = create_app(
        Settings(database_url=f"sqlite:///{tmp_path / 'w.sqlite3'}", admin_token=ADMIN), [plugin]
    )
    client = TestClient(app)
    writer = new_writer(app, plugin)
    page = client.post(f"/cyoa/{writer}/start", data={"consent": "yes"})
    assert 'src="/static/integrity.js"' in page.text and "data-integrity" in page.text
    text = "The storm broke over the bay and the boats came home."
    counts = json.dumps({"keys": 2, "pastes": 1, "pasted_chars": len(text), "active_s": 1.0})
    client.post(
        f"/cyoa/{writer}/write",
        data={"step": step(page), "text": text, "integrity:text": counts},
    )
    exported = client.get(f"/admin/{ADMIN}/cyoa/{plugin.config.name}/export/sessions.jsonl")
    [record] = [json.loads(line) for line in exported.text.splitlines() if line]
    first = record["turns"][0]
    assert first["integrity"]["flags"] == ["pasted"] and first["integrity"]["chars"] == len(text)
    dashboard = client.get(f"/admin/{ADMIN}/cyoa/{plugin.config.name}/").text
    assert "pasted 1 of 1" in dashboard
    assert plugin.worker is not None and plugin.worker.wait_idle(timeout=120)  # its suggestions
