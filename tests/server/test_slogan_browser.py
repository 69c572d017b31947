"""A writer writes a slogan with pulled suggestions in a real browser (Debian's Chromium driven
by Playwright) against the real server (``storyeval serve`` in a subprocess), with real
suggestions from the skeleton suggester and a two-layer model of SmolLM2's architecture: keywords and a draft, two
pulls (the page waits for each, the suggestions appear beside the draft and the first pull
moves to the history), the final slogan, the writing survey and the final survey. The admin
export holds both pulls and their suggestions, and ``storyeval slogan-study analyse`` reads it."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
import yaml

from storyeval.collab.config import USE_AGAIN_CHOICES

from .conftest import launch_chromium

pytestmark = pytest.mark.slow

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "slogan" / "slogan.yaml"


def test_a_writer_pulls_suggestions_twice_and_submits_a_slogan(
    tmp_path, live_server, run_cli, tiny_models
):
    from playwright.sync_api import expect, sync_playwright

    data = yaml.safe_load(EXAMPLE.read_text())
    data["name"] = "browser-slogan"
    data["prompts"] = data["prompts"][:1]  # one slogan keeps the test short
    data["conditions"] = ["mil", "solo"]  # the first writer gets the suggestions
    # a two-layer model of SmolLM2's architecture ranks the fillings: the pages are tested
    data["suggester"] = {"beam": 2, "vocabulary": 4, "model": str(tiny_models["lm"])}
    config = tmp_path / "slogan.yaml"
    config.write_text(yaml.safe_dump(data), encoding="utf-8")
    server = live_server(config, f"sqlite:///{tmp_path / 'slogan.sqlite3'}", links=1)
    with sync_playwright() as playwright:
        browser = launch_chromium(playwright)
        page = browser.new_page()
        page.goto(server.links[0])
        page.get_by_label("I have read the information above").check()
        page.click("#start")
        page.wait_for_url("**/write")
        expect(page.locator(".prompt")).to_contain_text("lunch box")
        expect(page.locator("#progress")).to_have_text("Slogan 1 of 1")
        page.fill("#keywords", "fresh, food, lunch")
        page.fill("#draft", "Fresh food all day long.")
        page.click("#pull")
        page.wait_for_url("**/write", timeout=120_000)  # through the self-refreshing wait page
        first = page.locator(".current-suggestions .suggestion").all_inner_texts()
        assert 1 <= len(first) <= 3
        # the draft is untouched: suggestions sit beside it, never in it
        assert page.input_value("#draft") == "Fresh food all day long."
        page.fill("#draft", "Fresh lunch, happy day.")
        page.click("#pull")
        page.wait_for_url("**/write", timeout=120_000)
        second = page.locator(".current-suggestions .suggestion").all_inner_texts()
        assert 1 <= len(second) <= 3
        expect(page.locator("#history > li")).to_have_count(1)
        expect(page.locator("#history")).to_contain_text("Fresh food all day long.")
        page.fill("#draft", "Fresh lunch, every day.")
        page.click("#submit-slogan")
        page.wait_for_url("**/survey")
        expect(page.locator("#final-slogan")).to_have_text("Fresh lunch, every day.")
        for name in ("slogan_creative", "slogan_catchy", "slogan_relevant", "satisfied"):
            page.check(f"input[name='likert-{name}'][value='5']")
        page.click("#submit-survey")
        page.wait_for_url("**/final")
        for name in ("enjoyable", "suggestions_surprising", "suggestions_creative",
                     "suggestions_catchy", "suggestions_relevant", "liked_suggestions",
                     "appreciated_suggestions"):  # fmt: skip
            page.check(f"input[name='likert-{name}'][value='3']")
        page.locator("input[name='use_again']").nth(1).check()
        page.check("input[name='experience'][value='a lot']")
        page.fill("#q-interface", "Clear enough.")
        page.click("#submit-final")
        page.wait_for_url("**/done")
        code = page.inner_text("#completion-code")
        browser.close()
    assert code == "SLOGAN-DEMO"

    response = httpx.get(
        f"{server.base}/admin/{server.admin}/slogan/browser-slogan/export/sessions.jsonl",
        timeout=30,
    )
    assert response.status_code == 200
    [record] = [json.loads(line) for line in response.text.splitlines()]
    assert record["condition"] == "mil" and record["status"] == "complete"
    [task] = record["tasks"]
    assert [p["draft"] for p in task["pulls"]] == [
        "Fresh food all day long.",
        "Fresh lunch, happy day.",
    ]
    assert [p["suggestions"] for p in task["pulls"]] == [first, second]
    assert all(
        p["signature"].startswith("slogans|skeletons:slogan_lines.txt@") for p in task["pulls"]
    )
    assert task["final"] == "Fresh lunch, every day."
    assert record["final_survey"]["use_again"] == USE_AGAIN_CHOICES[1]
    assert record["final_survey"]["experience"] == "a lot"

    sessions = tmp_path / "sessions.jsonl"
    sessions.write_text(response.text, encoding="utf-8")
    code, out, err = run_cli("slogan-study", "analyse", str(sessions), "-o", str(tmp_path / "an"))
    assert code == 0, out + err
    pulls = (tmp_path / "an" / "pulls.csv").read_text()
    assert "mil,1,2,2.0,1.0" in pulls
