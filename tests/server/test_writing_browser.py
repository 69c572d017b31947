"""A writer completes a Choose Your Own Adventure story in a real browser (Debian's Chromium
driven by Playwright) against the real server (``storyeval serve`` in a subprocess), with real
suggestions from a two-layer model of SmolLM2's architecture: five rounds of writing a line alone, waiting for two
suggestions (the page refreshes itself, no JavaScript), choosing one, switching once, editing
and adding it; then the Likert statements and open questions. The admin export holds every
suggestion, choice, switch and edit, and ``storyeval cyoa analyse`` reads it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import httpx
import pytest
import yaml

from .conftest import launch_chromium

pytestmark = pytest.mark.slow

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "cyoa"
LINES = [
    "Mara rowed out to the lighthouse after midnight.",
    "The door at the bottom of the tower was open.",
    "She climbed the stairs, counting every step aloud.",
    "At the top, the great lamp was already turning.",
    "Mara sat down beside the lamp and waited for dawn.",
]


def test_a_writer_completes_a_cyoa_story_in_chromium(tmp_path, live_server, tiny_models):
    from playwright.sync_api import expect, sync_playwright

    from storyeval.collab import read_sessions
    from storyeval.collab.analysis import analyse_sessions

    data = yaml.safe_load((EXAMPLE / "cyoa.yaml").read_text())
    data["name"] = "browser-cyoa"
    for spec in data["generators"]:  # short suggestions of a two-layer model keep it quick
        spec["model"] = str(tiny_models["lm"])
        spec["decoding"]["max_new_tokens"] = 12
        spec["max_attempts"] = 1
    # the first suggestion loads torch and the model in the server: on a loaded machine (two
    # test processes, a browser, the server) that has taken over the example's minute
    data["generation"]["timeout_s"] = 150
    shutil.copy(EXAMPLE / "lighthouse.png", tmp_path / "lighthouse.png")
    config = tmp_path / "cyoa.yaml"
    config.write_text(yaml.safe_dump(data), encoding="utf-8")
    server = live_server(config, f"sqlite:///{tmp_path / 'cyoa.sqlite3'}", links=1)
    chosen_positions = []
    kept_texts = []
    with sync_playwright() as playwright:
        browser = launch_chromium(playwright)
        page = browser.new_page()
        page.goto(server.links[0])
        expect(page.get_by_role("heading", name="Content warning")).to_be_visible()
        page.get_by_label("I have read the information above").check()
        page.click("#start")
        expect(page.locator("img[alt^='A lighthouse']")).to_be_visible()
        for round_number, line in enumerate(LINES, start=1):
            expect(page.locator(".round-progress")).to_contain_text(f"Round {round_number} of 5")
            page.fill("#text", line)
            page.click("#add")
            # the waiting page refreshes itself until both suggestions are ready
            page.wait_for_url("**/choose", timeout=180_000)
            expect(page.locator(".option")).to_have_count(2)
            expect(page.locator("#story-so-far li").last).to_have_text(f"you{line}")
            position = 1 + round_number % 2
            page.click(f"#choose-{position}")
            page.wait_for_url("**/edit")
            if round_number == 2:  # change of mind while editing
                other = 3 - position
                page.fill("#text", "A draft I abandon.")
                page.click(f"#switch-{other}")
                page.wait_for_url("**/edit")
                expect(page.locator(f"#option-{other}")).to_have_class("option current")
                position = other
            suggestion = page.input_value("#text")
            assert suggestion == page.locator(f"#option-{position} .suggestion").inner_text()
            kept = (suggestion[:200].rstrip() + " The sea was calm.").strip()
            page.fill("#text", kept)
            page.click("#add")
            chosen_positions.append(position)
            kept_texts.append(kept)
        page.wait_for_url("**/survey")
        for statement in data.get("likert", {}).get("statements") or [
            "happy",
            "collaborative",
            "useful",
            "connected",
            "ideas",
        ]:
            page.check(f"input[name='likert-{statement}'][value='4']")
        page.fill("#q-why_choose", "The one that kept Mara moving.")
        page.fill("#q-looking_for", "Something surprising about the lighthouse.")
        page.click("#submit-survey")
        page.wait_for_url("**/done")
        code = page.inner_text("#completion-code")
        story_lines = page.locator("#story-so-far li").all_inner_texts()
        browser.close()
    assert len(code) == 8
    assert len(story_lines) == 10

    response = httpx.get(
        f"{server.base}/admin/{server.admin}/cyoa/browser-cyoa/export/sessions.jsonl", timeout=30
    )
    [record] = [json.loads(line) for line in response.text.splitlines()]
    assert record["status"] == "complete" and record["completion_code"] == code
    turns = record["turns"]
    assert [t["text"] for t in turns if t["author"] == "writer"] == LINES
    suggestion_turns = [t for t in turns if t["author"] == "suggestion"]
    assert [t["text"] for t in suggestion_turns] == kept_texts
    for turn, position in zip(suggestion_turns, chosen_positions, strict=True):
        at = {s["position"]: s for s in turn["suggestions"]}
        assert turn["chosen"] == at[position]["generator"]
        assert {s["generator"] for s in turn["suggestions"]} == {"nucleus", "top-k"}
        assert all(s["signature"].startswith("suggest|model:SmolLM2") for s in at.values())
        assert turn["context"].endswith(turn_line(turns, turn))
    assert [t["switches"] for t in suggestion_turns] == [0, 1, 0, 0, 0]
    assert suggestion_turns[1]["events"][1]["draft"] == "A draft I abandon."
    assert record["survey"]["questions"][0]["answer"] == "The one that kept Mara moving."

    path = tmp_path / "sessions.jsonl"
    path.write_text(response.text, encoding="utf-8")
    analysis = analyse_sessions(read_sessions(path))
    total = analysis.preferences.query("factor == 'generator' and round == 'all'")
    assert total["n"].tolist() == [5, 5] and total["chosen"].sum() == 5
    edits = analysis.edit_items
    assert len(edits) == 5
    for distance, suggestion in zip(edits["edit_distance"], edits["suggestion"], strict=True):
        if len(suggestion) <= 200:  # the writer only appended " The sea was calm."
            assert distance == len(" The sea was calm.")


def turn_line(turns: list[dict], turn: dict) -> str:
    """The writer's line just before a suggestion turn (the end of the models' context)."""
    return turns[turn["index"] - 2]["text"]
