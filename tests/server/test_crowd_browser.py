"""A paid crowd study end to end in Chromium (Debian's, driven by Playwright) against the real
server, as Prolific participants meet it: they arrive through the open-enrollment link with
their Prolific identifiers; one fails the comprehension check twice and is screened out with
the screen-out code; one passes, rates the stories and gets the completion code with the link
back to Prolific; one declines consent and is asked to return the study. The export keeps the
identifiers, the statuses, the comprehension attempts and the attention check apart."""

from __future__ import annotations

import json
import shutil

import httpx
import pytest

from .conftest import launch_chromium

pytestmark = pytest.mark.slow


def _join(context, base: str, pid: str):  # type: ignore[no-untyped-def]
    page = context.new_page()
    page.goto(
        f"{base}/join/study/prolific-example?PROLIFIC_PID={pid}&STUDY_ID=STUDY1&SESSION_ID=S-{pid}"
    )
    return page


def _answer_comprehension(page, *, right: bool) -> None:  # type: ignore[no-untyped-def]
    answers = {"task": "Rate continuations of story openings", "part": "The continuation after"}
    wrong = {"task": "Translate stories", "part": "The opening in bold"}
    for name, text in (answers if right else wrong).items():
        page.locator(f"fieldset:has(input[name={name}]) label", has_text=text).click()
    page.click("button[type=submit]")


def test_a_prolific_study_screens_out_completes_and_returns(
    examples_dir, study_dir, tmp_path, live_server
):
    from playwright.sync_api import sync_playwright

    (study_dir / "studies").mkdir()
    study_path = study_dir / "studies" / "prolific.yaml"
    shutil.copy(examples_dir / "studies" / "prolific.yaml", study_path)
    server = live_server(study_path, f"sqlite:///{tmp_path / 'crowd.sqlite3'}", links=1)
    with sync_playwright() as playwright:
        browser = launch_chromium(playwright)
        try:
            # 1. fails the comprehension check twice: screened out, paid with the code
            page = _join(browser.new_context(), server.base, "PID-FAIL")
            page.check("input[name=consent]")
            page.click("form[action$='/start'] button[type=submit] >> nth=0")
            assert "/comprehension/0" in page.url
            _answer_comprehension(page, right=False)
            assert "/comprehension/1" in page.url and "attempt 2 of 2" in page.inner_text("main")
            _answer_comprehension(page, right=False)
            assert page.url.endswith("/screened_out")
            assert page.inner_text("#screen-out-code") == "SCREENED1"
            link = page.get_attribute("#platform-return", "href")
            assert link == "https://app.prolific.com/submissions/complete?cc=SCREENED1"

            # 2. passes at the second attempt, rates the stories, gets the completion code
            page = _join(browser.new_context(), server.base, "PID-PASS")
            page.check("input[name=consent]")
            page.click("form[action$='/start'] button[type=submit] >> nth=0")
            _answer_comprehension(page, right=False)
            _answer_comprehension(page, right=True)
            items = 0
            while "/item/" in page.url:
                text = page.inner_text("main")
                check = "please choose 2 for the first" in text
                page.check(f"input[name=coherence][value='{'2' if check else '4'}']")
                page.check(f"input[name=relevance][value='{'4' if check else '3'}']")
                page.click("button[type=submit]")
                items += 1
            assert items == 7, "six stories and the attention check"
            assert page.url.endswith("/done")
            assert page.inner_text("#completion-code") == "C1STORYEVAL"
            assert page.get_attribute("#platform-return", "href").endswith("cc=C1STORYEVAL")

            # 3. declines consent: asked to return the study on Prolific
            page = _join(browser.new_context(), server.base, "PID-NO")
            page.click("form.decline button")
            assert page.url.endswith("/returned")
            assert "Return submission" in page.inner_text("main")
            assert page.inner_text("#return-code") == "NOCONSENT"
        finally:
            browser.close()

    base = f"{server.base}/admin/{server.admin}/study/prolific-example/export"

    def lines(name: str) -> list[dict]:  # type: ignore[type-arg]
        return [json.loads(x) for x in httpx.get(f"{base}/{name}.jsonl").text.splitlines()]

    people = {p["external_id"]: p for p in lines("participants") if p["external_id"]}
    assert people["PID-FAIL"]["status"] == "screened_out"
    assert people["PID-FAIL"]["completion_code"] == "SCREENED1"
    assert people["PID-PASS"]["status"] == "finished" and people["PID-PASS"]["items"] == 6
    assert people["PID-PASS"]["checks_passed"] == 1 and people["PID-PASS"]["checks_failed"] == 0
    assert people["PID-NO"]["status"] == "returned"
    assert people["PID-PASS"]["platform"] == {
        "PROLIFIC_PID": "PID-PASS",
        "SESSION_ID": "S-PID-PASS",
        "STUDY_ID": "STUDY1",
    }
    assert len(people["PID-PASS"]["order"]) == 7, "the order the pages were shown in"
    attempts = lines("comprehension")
    assert [(a["rater_id"], a["attempt"], a["passed"]) for a in attempts] == [
        (people["PID-FAIL"]["rater_id"], 1, False),
        (people["PID-FAIL"]["rater_id"], 2, False),
        (people["PID-PASS"]["rater_id"], 1, False),
        (people["PID-PASS"]["rater_id"], 2, True),
    ]
    checks = lines("attention_checks")
    assert [(c["check"], c["passed"]) for c in checks] == [("read-check", True)]
    judgments = lines("judgments")
    assert {j["rater_id"] for j in judgments} == {people["PID-PASS"]["rater_id"]}
    assert sorted({j["sequence"] for j in judgments}) == list(range(1, 8))
