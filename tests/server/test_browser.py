"""A participant completes a study in a real browser (Debian's Chromium driven by Playwright)
against the real server: consent with a content warning, a training example with its feedback,
items including an attention check and a story containing HTML and script (shown as text,
never run), a final question, the completion code; then the export holds every answer with
the time the participant spent."""

from __future__ import annotations

import json
import re

import httpx
import pytest

from .conftest import launch_chromium

pytestmark = pytest.mark.slow


HOSTILE = (
    '<script>window.__pwned = 1; document.title = "pwned";</script>'
    '<img src=x onerror="window.__pwned = 2"> The end <b>really</b>.'
)

STUDY = """
name: browser-study
title: Browser study
protocol: likert
stories: stories.jsonl
select:
  ids: [xss, s001, s002-smollm2-p0.9]
content_warning: Some texts may be upsetting.
instructions: Rate each continuation.
criteria:
  - name: coherence
    question: How well do the sentences fit together?
    scale: 5
    labels: {1: lowest, 5: highest}
  - name: relevance
    question: How relevant is the continuation to the prompt?
    scale: 5
    labels: {1: lowest, 5: highest}
training:
  - story: s003
    answers: {coherence: 5, relevance: 5}
    explanation: A coherent continuation that answers its prompt.
attention_checks:
  - id: check
    position: 3
    text:
      story: To show that you are reading, please select 1 for both questions.
    expect: {coherence: [1], relevance: [1]}
questions:
  - name: comments
    text: Any comments?
    required: true
assignment:
  items_per_participant: 3
  raters_per_item: 1
  order: fixed
"""


def test_a_participant_completes_a_study_in_chromium(study_dir, tmp_path, live_server):
    from playwright.sync_api import sync_playwright

    with open(study_dir / "stories.jsonl", "a", encoding="utf-8") as fh:
        fh.write(
            json.dumps(
                {
                    "id": "xss",
                    "prompt": "A <i>hostile</i> prompt.",
                    "story": HOSTILE,
                    "system": "human",
                }
            )
            + "\n"
        )
    (study_dir / "browser.yaml").write_text(STUDY, encoding="utf-8")
    server = live_server(
        study_dir / "browser.yaml", f"sqlite:///{tmp_path / 'browser.sqlite3'}", links=1
    )
    dialogs: list[str] = []
    with sync_playwright() as playwright:
        browser = launch_chromium(playwright)
        try:
            page = browser.new_page()
            page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
            page.goto(server.links[0])
            assert "Some texts may be upsetting." in page.inner_text(".content-warning")
            page.click("button[type=submit]")  # consent not given: the browser refuses to submit
            assert page.url.endswith("/welcome")
            page.check("input[name=consent]")
            page.click("button[type=submit]")

            assert "Training example 1 of 1" in page.inner_text("header")
            page.check("input[name=coherence][value='4']")
            page.check("input[name=relevance][value='5']")
            page.click("button[type=submit]")
            assert "A coherent continuation that answers its prompt." in page.inner_text(
                ".explanation"
            )
            page.click("text=Got it, next")

            seen = []
            while "/item/" in page.url:
                text = page.inner_text("main")
                seen.append(text)
                value = "1" if "please select 1" in text else "4"
                if "The end" in text:
                    story = page.inner_text(".story")
                    assert story.startswith(
                        '<script>window.__pwned = 1; document.title = "pwned";</script>'
                    )
                    assert (
                        '<img src=x onerror="window.__pwned = 2">' in story
                        and "<b>really</b>" in story
                    )
                    assert page.inner_text(".prompt") == "A <i>hostile</i> prompt."
                    assert page.evaluate("() => window.__pwned") is None
                    assert page.title() == "Browser study"
                    assert (
                        page.locator("main script").count() == 0
                        and page.locator("main img").count() == 0
                    )
                page.wait_for_timeout(300)  # the participant reads
                page.check(f"input[name=coherence][value='{value}']")
                page.check(f"input[name=relevance][value='{value}']")
                page.click("button[type=submit]")
            assert len(seen) == 4 and "Item 3 of 4" in seen[2]

            assert page.url.endswith("/questions")
            page.fill("textarea[name=comments]", "Nothing to add <script>alert(1)</script>")
            page.click("button[type=submit]")
            assert page.url.endswith("/done")
            code = page.inner_text("#completion-code")
            assert re.fullmatch(r"[0-9A-F]{8}", code)
            assert page.evaluate("() => window.__pwned") is None and not dialogs
        finally:
            browser.close()

    base = f"{server.base}/admin/{server.admin}/study/browser-study/export"
    judgments = [
        json.loads(line) for line in httpx.get(f"{base}/judgments.jsonl").text.splitlines()
    ]
    assert len(judgments) == 4 * 2
    assert {j["item_id"] for j in judgments} == {"xss", "s001", "s002-smollm2-p0.9", "check:check"}
    assert all(j["time_s"] >= 0.3 for j in judgments), [j["time_s"] for j in judgments]
    assert all(j["check_passed"] for j in judgments if j.get("check"))
    responses = [
        json.loads(line) for line in httpx.get(f"{base}/responses.jsonl").text.splitlines()
    ]
    assert [r["text"] for r in responses] == ["Nothing to add <script>alert(1)</script>"]
    people = [
        json.loads(line) for line in httpx.get(f"{base}/participants.jsonl").text.splitlines()
    ]
    assert people[0]["completion_code"] == code and people[0]["finished_at"]
